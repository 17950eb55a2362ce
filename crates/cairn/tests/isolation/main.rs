//! Serializability of every client kind, alone and mixed, checked from the
//! outside: a list-append workload over the typed API (`workload.rs`)
//! records a history and an Elle-style checker (`checker.rs`) looks for
//! G0, G1a, G1b, G1c, G-single, G2-item, real-time violations (stale
//! reads), lost and partial writes and inconsistent reads inside one
//! transaction. Each configuration is a test: the embedded engine with
//! threads (page and object locking), each client kind alone against one
//! real server child, all kinds mixed on one server, and runs with the
//! server killed -9 and restarted as they go.
//!
//! Quick by default; `CAIRN_ISOLATION_TXNS` sets the transactions per
//! configuration (default 1000), `CAIRN_ISOLATION_CLIENTS` the processes
//! (default 8) and `CAIRN_ISOLATION_SEED` the seed.

#[path = "../common/mod.rs"]
mod common;

mod checker;
mod workload;

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, RwLock};

use cairn::{Arch, Database, Options};
use checker::History;
use common::ServerChild;
use workload::{Recorder, Source};

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// The size of a run: transactions in all, processes, seed.
struct Size {
    txns: usize,
    clients: usize,
    seed: u64,
}

fn size() -> Size {
    Size {
        txns: env_or("CAIRN_ISOLATION_TXNS", 1000) as usize,
        clients: env_or("CAIRN_ISOLATION_CLIENTS", 8) as usize,
        seed: env_or("CAIRN_ISOLATION_SEED", 0x15_0a71),
    }
}

/// Runs the processes, each with its own source, to `size.txns` in all.
fn run_processes(sources: &[Source], rec: &Recorder, size: &Size) {
    let per = size.txns.div_ceil(sources.len()).max(1);
    std::thread::scope(|s| {
        for (process, source) in sources.iter().enumerate() {
            s.spawn(move || workload::run_process(source, rec, process, size.seed, per));
        }
    });
}

/// Checks the history and fails the test with the checker's summary on any
/// anomaly or on any error that was neither a conflict nor a lost
/// connection.
fn judge(what: &str, rec: &Recorder, final_state: std::collections::BTreeMap<u32, Vec<u64>>) {
    let history = History {
        txns: rec.txns(),
        final_state,
    };
    let report = checker::check(&history);
    let failures = rec.failures();
    let at = |i: usize| rec.conflicts_at[i].load(Ordering::Relaxed);
    eprintln!(
        "{what}: {} committed, {} aborted, {} unknown; {} anomalies, {} failures; conflicts at read/append/commit {}/{}/{}",
        report.committed,
        report.aborted,
        report.unknown,
        report.anomalies.len(),
        failures.len(),
        at(0),
        at(1),
        at(2)
    );
    assert!(report.committed > 0, "{what}: nothing committed");
    assert!(
        failures.is_empty(),
        "{what}: {} transactions failed with errors that are neither conflicts nor lost connections, first: {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
    assert!(report.is_clean(), "{what}:\n{}", report.summary(&history, 3));
}

fn embedded(object_locking: bool) {
    embedded_with(object_locking, false)
}

fn embedded_with(object_locking: bool, key_range_locking: bool) {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = Options::default();
    opts.storage.background = false;
    opts.storage.object_locking = object_locking;
    opts.storage.key_range_locking = key_range_locking;
    opts.storage.lock_timeout = std::time::Duration::from_millis(2_000);
    let db = Arc::new(Database::open_with(dir.path(), opts).unwrap());
    workload::load(&db);
    let size = size();
    let rec = Recorder::default();
    let sources: Vec<Source> = (0..size.clients).map(|_| Source::Shared(db.clone())).collect();
    run_processes(&sources, &rec, &size);
    let what = match (object_locking, key_range_locking) {
        (true, false) => "embedded, object locks",
        (false, false) => "embedded, page locks",
        (true, true) => "embedded, object locks, key-range locks",
        (false, true) => "embedded, page locks, key-range locks",
    };
    judge(what, &rec, workload::final_state(&db));
}

#[test]
fn embedded_threads_with_page_locks_are_serializable() {
    embedded(false)
}

#[test]
fn embedded_threads_with_object_locks_are_serializable() {
    embedded(true)
}

#[test]
fn embedded_threads_with_object_and_key_range_locks_are_serializable() {
    embedded_with(true, true)
}

#[test]
fn embedded_threads_with_page_and_key_range_locks_are_serializable() {
    embedded_with(false, true)
}

/// A served database and what kills and restarts its server.
struct Served {
    path: std::path::PathBuf,
    server: Mutex<Option<ServerChild>>,
    addr: Arc<RwLock<String>>,
}

const SERVER_ENV: [(&str, &str); 1] = [("CAIRN_TEST_LOCK_TIMEOUT_MS", "2000")];

impl Served {
    fn start(path: &Path) -> Served {
        let server = common::serve_with(path, &SERVER_ENV);
        let addr = Arc::new(RwLock::new(server.addr.to_string()));
        Served {
            path: path.to_path_buf(),
            server: Mutex::new(Some(server)),
            addr,
        }
    }

    /// Kills the server -9 and starts it again (recovery runs at its open).
    fn kill_and_restart(&self) {
        let mut server = self.server.lock().unwrap();
        if let Some(s) = server.take() {
            s.kill();
        }
        let s = common::serve_with(&self.path, &SERVER_ENV);
        *self.addr.write().unwrap() = s.addr.to_string();
        *server = Some(s);
    }

    /// Stops the server cleanly and reads the final state embedded (an
    /// independent reader: no client of the run), then checks the volume.
    fn final_state(&self) -> std::collections::BTreeMap<u32, Vec<u64>> {
        if let Some(s) = self.server.lock().unwrap().take() {
            s.stop();
        }
        let mut opts = Options::default();
        opts.storage.background = false;
        let db = Database::open_with(&self.path, opts).unwrap();
        let state = workload::final_state(&db);
        db.close().unwrap();
        let report =
            cairn::storage::check::check_database(&self.path, &cairn::storage::volume::VolumeOptions::default());
        assert!(report.is_ok(), "the volume checks: {:?}", report.problems);
        state
    }

    fn source(&self, arch: Arch) -> Source {
        Source::Server {
            addr: self.addr.clone(),
            arch,
        }
    }
}

/// `archs[i % archs.len()]` for each process, against one server; with
/// `kills`, the server is killed -9 and restarted that many times, evenly
/// spread over the run's commits.
fn served(what: &str, archs: &[Arch], kills: usize) {
    let dir = tempfile::tempdir().unwrap();
    let served = Served::start(&dir.path().join("db"));
    let loader = served.source(Arch::Page).open().unwrap();
    workload::load(&loader);
    drop(loader);
    let size = size();
    let rec = Recorder::default();
    let sources: Vec<Source> = (0..size.clients)
        .map(|i| served.source(archs[i % archs.len()]))
        .collect();
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        if kills > 0 {
            // The killer strikes after every `every` commits (counts, not
            // the wall clock), and stops when the processes are done.
            let every = (size.txns / 2 / (kills + 1)).max(1);
            let (rec, served, done) = (&rec, &served, &done);
            s.spawn(move || {
                for k in 1..=kills {
                    while rec.committed.load(Ordering::SeqCst) < k * every {
                        if done.load(Ordering::SeqCst) {
                            return;
                        }
                        std::thread::yield_now();
                    }
                    served.kill_and_restart();
                }
            });
        }
        run_processes(&sources, &rec, &size);
        done.store(true, Ordering::SeqCst);
    });
    judge(what, &rec, served.final_state());
}

#[test]
fn page_clients_are_serializable() {
    served("page clients", &[Arch::Page], 0)
}

#[test]
fn file_clients_are_serializable() {
    served("file clients", &[Arch::File], 0)
}

#[test]
fn object_clients_are_serializable() {
    served("object clients", &[Arch::Object], 0)
}

#[test]
fn adaptive_clients_are_serializable() {
    served("adaptive clients", &[Arch::Adaptive], 0)
}

/// The client kinds of the mixed runs, in turn: every kind, or those named
/// in `CAIRN_ISOLATION_MIX` (comma-separated: page, file, object,
/// adaptive), to narrow a failure down.
fn mixed() -> Vec<Arch> {
    let Ok(names) = std::env::var("CAIRN_ISOLATION_MIX") else {
        return vec![Arch::Page, Arch::Object, Arch::Adaptive, Arch::File];
    };
    names
        .split(',')
        .map(|n| match n.trim() {
            "page" => Arch::Page,
            "file" => Arch::File,
            "object" => Arch::Object,
            "adaptive" => Arch::Adaptive,
            other => panic!("CAIRN_ISOLATION_MIX: no client kind {other:?}"),
        })
        .collect()
}

#[test]
fn every_client_kind_mixed_on_one_server_is_serializable() {
    served("mixed clients", &mixed(), 0)
}

#[test]
fn mixed_clients_stay_serializable_and_lose_nothing_with_the_server_killed() {
    served("mixed clients, server killed -9", &mixed(), 3)
}
