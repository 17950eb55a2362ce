//! Runs a test against every backend: embedded, and a page-server,
//! file-server or object-server client of a real server in a child process.
//!
//! The server is this very test binary, executed again as the child entry
//! point [`serve_child_process`] (`cairn-testkit`'s `child_entry_points!`:
//! not a test) with `CAIRN_TEST_SERVE_DIR` set: it serves the database in
//! the directory over TCP on loopback (the `cairn-server` crate's `run`, as
//! `cairn serve` does), prints its address on stdout, and stops with a
//! checkpoint when its stdin closes — so a test that dies never leaves a
//! server behind.

#![allow(dead_code)]

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cairn::{Database, Options};

/// Where a test's database lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// In the test process, locking pages (`DbOptions::object_locking`
    /// off; the typed API's default locks objects, as
    /// [`Backend::EmbeddedObjectLocks`]).
    Embedded,
    /// Behind a `cairn serve`-like child process, over loopback TCP.
    Page,
    /// A file-server client of such a child process: pages read and
    /// written in its volume file, locks and log at the server.
    File,
    /// An object-server client of such a child process: objects and
    /// B+-tree operations run on the server.
    Object,
    /// The adaptive client (the object protocol, fetching pages of objects
    /// or single objects as it measures) of such a child process.
    Adaptive,
    /// In the test process, locking single objects instead of pages
    /// (`DbOptions::object_locking`, the typed API's default).
    EmbeddedObjectLocks,
    /// In the test process, locking single objects, and index keys and key
    /// ranges instead of index pages (`DbOptions::key_range_locking`).
    EmbeddedKeyRanges,
}

/// Every backend, for tests that loop over them.
pub const BACKENDS: [Backend; 7] = [
    Backend::Embedded,
    Backend::Page,
    Backend::File,
    Backend::Object,
    Backend::Adaptive,
    Backend::EmbeddedObjectLocks,
    Backend::EmbeddedKeyRanges,
];

impl Backend {
    /// True if views read objects in place from shared page images:
    /// every page-based backend (under object-level locking, images
    /// checked against the page's committed LSN); not an object-server
    /// client, which has no pages.
    pub fn reads_page_images(self) -> bool {
        !self.speaks_objects()
    }

    /// True for the clients of the object protocol (object server and
    /// adaptive client): no pages, no index cache; the server walks the
    /// trees.
    pub fn speaks_objects(self) -> bool {
        matches!(self, Backend::Object | Backend::Adaptive)
    }

    /// True if a refaulted page's objects are decoded together (whole-page
    /// prefetch): transactions that lock whole pages, here or as page- or
    /// file-server clients.
    pub fn prefetches_whole_pages(self) -> bool {
        matches!(self, Backend::Embedded | Backend::Page | Backend::File)
    }
}

/// The default options without the background checkpointer: a test
/// decides when to checkpoint.
pub fn opts() -> Options {
    let mut o = Options::default();
    o.storage.background = false;
    o
}

/// A database site: a directory and, for the page backend, the server
/// serving it.
pub struct Site {
    backend: Backend,
    path: PathBuf,
    server: Option<ServerChild>,
    server_env: Vec<(&'static str, String)>,
}

impl Site {
    /// A site for `backend` with its database at `path` (created on first
    /// open).
    pub fn new(backend: Backend, path: &Path) -> Site {
        Site {
            backend,
            path: path.to_path_buf(),
            server: None,
            server_env: Vec::new(),
        }
    }

    /// Sets an environment variable for the server child (before it starts):
    /// `CAIRN_TEST_LOCK_TIMEOUT_MS` and the like.
    pub fn server_env(mut self, name: &'static str, value: &str) -> Site {
        self.server_env.push((name, value.to_string()));
        self
    }

    /// The backend.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Opens the database (embedded) or connects to it (page server,
    /// started on first use).
    pub fn open(&mut self, opts: Options) -> Database {
        self.try_open(opts).expect("open the database")
    }

    /// As [`Site::open`], returning the error.
    pub fn try_open(&mut self, opts: Options) -> cairn::Result<Database> {
        match self.backend {
            Backend::Embedded => {
                // Page locking: the default locks objects, which
                // `EmbeddedObjectLocks` runs.
                let mut opts = opts;
                opts.storage.object_locking = false;
                Database::open_with(&self.path, opts)
            }
            Backend::EmbeddedObjectLocks => {
                let mut opts = opts;
                opts.storage.object_locking = true;
                Database::open_with(&self.path, opts)
            }
            Backend::EmbeddedKeyRanges => {
                let mut opts = opts;
                opts.storage.object_locking = true;
                opts.storage.key_range_locking = true;
                Database::open_with(&self.path, opts)
            }
            Backend::Page | Backend::File | Backend::Object | Backend::Adaptive => {
                if self.server.is_none() {
                    let env: Vec<(&str, &str)> = self.server_env.iter().map(|(k, v)| (*k, v.as_str())).collect();
                    self.server = Some(serve_with(&self.path, &env));
                }
                let url = self.server.as_ref().expect("started").url();
                let arch = match self.backend {
                    Backend::File => cairn::Arch::File,
                    Backend::Object => cairn::Arch::Object,
                    Backend::Adaptive => cairn::Arch::Adaptive,
                    _ => cairn::Arch::Page,
                };
                Database::connect(&url, Options { arch, ..opts })
            }
        }
    }

    /// Stops the server, if any (with a checkpoint), so the directory can
    /// be opened embedded.
    pub fn stop_server(&mut self) {
        if let Some(s) = self.server.take() {
            s.stop();
        }
    }
}

// Not every test binary uses every helper.
#[allow(unused_imports)]
pub use cairn_testkit::child::kill_child_once_locked;
#[allow(unused_imports)]
pub use cairn_testkit::ServerChild;

cairn_testkit::child_entry_points!(serve_child_process);

/// A server child on the database at `path`: this test binary running
/// [`serve_child_process`].
pub fn serve(path: &Path) -> ServerChild {
    serve_with(path, &[])
}

/// As [`serve`], with extra environment variables for the server
/// (`CAIRN_TEST_TXN_BYTES_MAX`, `CAIRN_TEST_BODY_MAX`, …).
pub fn serve_with(path: &Path, env: &[(&str, &str)]) -> ServerChild {
    let dir = [("CAIRN_TEST_SERVE_DIR", path.as_os_str())];
    let env = env.iter().map(|(k, v)| (*k, std::ffi::OsStr::new(*v)));
    ServerChild::entry_point("serve_child_process", dir.into_iter().chain(env))
}

/// The server side of [`serve`] (a child entry point, not a test): serves
/// the database in `CAIRN_TEST_SERVE_DIR` until stdin closes, and fails if
/// serving or the final checkpoint fails.
fn serve_child_process() {
    let dir = std::env::var_os("CAIRN_TEST_SERVE_DIR").expect("CAIRN_TEST_SERVE_DIR names the database");
    use cairn::storage::{Db, DbOptions};
    use cairn_net::rpc::Limits;
    use cairn_net::transport::{Address, Listener};
    use cairn_server::{PageServer, ServerConfig};

    let mut opts = DbOptions {
        background: false,
        ..DbOptions::default()
    };
    if let Some(ms) = std::env::var("CAIRN_TEST_LOCK_TIMEOUT_MS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        opts.lock_timeout = std::time::Duration::from_millis(ms);
    }
    if let Some(n) = std::env::var("CAIRN_TEST_BUFFER_FRAMES")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        opts.volume.buffer_frames = n;
    }
    opts.key_range_locking = std::env::var("CAIRN_TEST_KEY_RANGES").is_ok_and(|v| v == "1");
    let db = Arc::new(Db::open_or_create(Path::new(&dir), &opts).expect("open the served database"));
    let mut config = ServerConfig::default();
    if let Some(n) = std::env::var("CAIRN_TEST_TXN_BYTES_MAX")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        config.txn_bytes_max = n;
    }
    if let Some(n) = std::env::var("CAIRN_TEST_CALLBACK_RIGHTS_MAX")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        config.callback_rights_max = n;
    }
    if let Some(n) = std::env::var("CAIRN_TEST_WAITING_PER_SESSION_MAX")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        config.waiting_per_session_max = n;
    }
    let mut limits = Limits::default();
    if let Some(n) = std::env::var("CAIRN_TEST_BODY_MAX").ok().and_then(|v| v.parse().ok()) {
        limits.body_max = n;
    }
    config.limits = limits.clone();
    // The database directory's users (none: connections without a login are trusted).
    let users = cairn_server::users::UsersFile::open(Path::new(&dir)).expect("the users file");
    let server = Arc::new(PageServer::new(db.clone(), &config).with_users(users));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async move {
        let listener = Listener::bind(&"127.0.0.1:0".parse::<Address>().expect("an address"))
            .await
            .expect("bind loopback");
        println!(
            "{}{}",
            cairn_testkit::LISTENING,
            listener.local_addr().expect("its address")
        );
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        std::thread::spawn(move || {
            let mut sink = Vec::new();
            let _ = std::io::stdin().read_to_end(&mut sink);
            let _ = tx.send(());
        });
        cairn_server::run(
            listener,
            async move {
                let _ = rx.await;
            },
            server,
            limits,
        )
        .await;
    });
    db.checkpoint().expect("checkpoint at shutdown");
    // What the run cost the server, for a test that reports it (the
    // isolation suite's conflicts); nobody asserts on it.
    let st = db.stats();
    eprintln!(
        "CAIRN-TEST-SERVER-STATS commits {} aborts {} deadlocks {} lock timeouts {} waits {} escalations {}",
        st.commits, st.aborts, st.locks.deadlocks, st.locks.timeouts, st.locks.waits, st.escalations
    );
}

impl Site {
    /// Stops the server (if any) and checks the database directory with
    /// the storage verifier.
    pub fn check(&mut self) {
        self.stop_server();
        let report =
            cairn::storage::check::check_database(&self.path, &cairn::storage::volume::VolumeOptions::default());
        assert!(report.is_ok(), "{:?}", report.problems);
    }
}

/// Declares `#[test]`s `embedded::NAME`, `page::NAME`, `file::NAME`,
/// `object::NAME`, `adaptive::NAME` and `embedded_object_locks::NAME` for each
/// `fn NAME(Backend)` named.
#[macro_export]
macro_rules! on_every_backend {
    ($($name:ident),* $(,)?) => {
        mod embedded {
            $(
                #[test]
                fn $name() {
                    super::$name(super::common::Backend::Embedded)
                }
            )*
        }
        mod page {
            $(
                #[test]
                fn $name() {
                    super::$name(super::common::Backend::Page)
                }
            )*
        }
        mod file {
            $(
                #[test]
                fn $name() {
                    super::$name(super::common::Backend::File)
                }
            )*
        }
        mod object {
            $(
                #[test]
                fn $name() {
                    super::$name(super::common::Backend::Object)
                }
            )*
        }
        mod adaptive {
            $(
                #[test]
                fn $name() {
                    super::$name(super::common::Backend::Adaptive)
                }
            )*
        }
        mod embedded_object_locks {
            $(
                #[test]
                fn $name() {
                    super::$name(super::common::Backend::EmbeddedObjectLocks)
                }
            )*
        }
        mod embedded_key_ranges {
            $(
                #[test]
                fn $name() {
                    super::$name(super::common::Backend::EmbeddedKeyRanges)
                }
            )*
        }
    };
}
