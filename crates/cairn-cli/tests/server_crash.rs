//! Kill -9 of `cairn serve` while clients commit: every commit the server
//! acknowledged survives the restart, and no object is ever partly written
//! (each holds one whole value: the last acknowledged, or the one whose
//! commit was in flight at the kill). Once with page-server clients (raw
//! page-service commits), once with object-server clients (after-images,
//! object-level redo), once with file-server clients (full-image commits,
//! pages written by the client). `CAIRN_SERVER_KILLS` sets the number of
//! cycles of each (default 20).

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cairn_net::message::Architecture;
use cairn_net::page_service::PageRequest;
use cairn_net::rpc::{Client, ClientOptions};
use cairn_net::transport::Address;
use cairn_storage::wal::redo;
use cairn_storage::{Db, DbOptions, Oid, TxnId};

use common::{call, fetch, serve};

const CLIENTS: usize = 4;
const OBJECTS_PER_CLIENT: usize = 3;
const OBJECT_BYTES: usize = 120;

/// An object's bytes: a tag naming it, a counter, and filler derived from
/// the counter (so a partly written value is visible).
fn value(tag: u64, counter: u64) -> Vec<u8> {
    let mut v = Vec::with_capacity(OBJECT_BYTES);
    v.extend_from_slice(&tag.to_le_bytes());
    v.extend_from_slice(&counter.to_le_bytes());
    while v.len() < OBJECT_BYTES {
        v.push((counter.wrapping_mul(31).wrapping_add(v.len() as u64) % 251) as u8);
    }
    v
}

fn tag_of(client: usize, i: usize) -> u64 {
    0x7a67_0000_0000_0000 | ((client as u64) << 16) | i as u64
}

/// Creates the objects, each client's in a group of its own (so clients
/// never share a page lock).
fn setup(dir: &Path) -> Vec<Vec<Oid>> {
    let db = Db::create(dir, &DbOptions::default()).unwrap();
    let mut owned = Vec::new();
    for c in 0..CLIENTS {
        let g = db.create_group(&format!("client-{c}")).unwrap();
        let mut t = db.begin().unwrap();
        owned.push(
            (0..OBJECTS_PER_CLIENT)
                .map(|i| t.create(g, &value(tag_of(c, i), 0)).unwrap())
                .collect(),
        );
        t.commit().unwrap();
    }
    db.close().unwrap();
    owned
}

/// What a client knows of an object: the last acknowledged counter and the
/// one in flight (sent, not acknowledged).
#[derive(Clone, Copy, Default, Debug)]
struct Known {
    acked: u64,
    in_flight: Option<u64>,
}

/// The kind of client a run uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Page,
    Object,
    File,
}

/// An object-server client: rewrites its objects in turn (one object a
/// transaction, its after-image in the OBJ_COMMIT) until the server goes.
fn object_client(addr: &Address, oids: &[Oid], client: usize, known: &Mutex<HashMap<Oid, Known>>) {
    let Ok(store) = cairn::tools::ObjectStore::connect(addr.clone(), &cairn::tools::Connect::default(), 1 << 20) else {
        return;
    };
    storage_client(oids, client, known, |oid, bytes| {
        let mut t = store.begin()?;
        t.update(oid, bytes)?;
        t.commit()
    });
}

/// A file-server client: the same, through a storage transaction whose
/// commit is logged by the server and written by the client.
fn file_client(addr: &Address, oids: &[Oid], client: usize, known: &Mutex<HashMap<Oid, Known>>) {
    let Ok(store) = cairn::tools::RemoteStore::connect_as(
        Architecture::FILE,
        addr.clone(),
        &cairn::tools::Connect::default(),
        64,
        16 << 20,
        1024,
    ) else {
        return;
    };
    storage_client(oids, client, known, |oid, bytes| {
        let mut t = store.begin()?;
        t.update(oid, bytes)?;
        t.commit()
    });
}

/// Rewrites `oids` in turn with `commit` until it fails (the server went).
fn storage_client(
    oids: &[Oid],
    client: usize,
    known: &Mutex<HashMap<Oid, Known>>,
    commit: impl Fn(Oid, &[u8]) -> cairn_storage::Result<()>,
) {
    for turn in 0.. {
        let i = turn % oids.len();
        let oid = oids[i];
        let next = known.lock().unwrap()[&oid].acked + 1;
        known.lock().unwrap().get_mut(&oid).unwrap().in_flight = Some(next);
        if commit(oid, &value(tag_of(client, i), next)).is_err() {
            return;
        }
        let mut k = known.lock().unwrap();
        let e = k.get_mut(&oid).unwrap();
        e.acked = next;
        e.in_flight = None;
    }
}

/// A page-server client: rewrites its objects in turn until the server
/// goes away.
fn page_client(addr: &Address, oids: &[Oid], client: usize, known: &Mutex<HashMap<Oid, Known>>) {
    let opts = ClientOptions {
        architecture: Architecture::PAGE,
        ..ClientOptions::default()
    };
    let Ok(c) = Client::connect(addr, &opts) else { return };
    let mut turn = 0usize;
    loop {
        let i = turn % oids.len();
        turn += 1;
        let oid = oids[i];
        let next = known.lock().unwrap()[&oid].acked + 1;
        // The client names its transactions; the server begins one with
        // the first request naming it.
        let txn = turn as u64;
        let Ok(base) = fetch(&c, txn, oid.page, true) else {
            return;
        };
        let tag = tag_of(client, i).to_le_bytes();
        let at = base
            .windows(8)
            .position(|w| w == tag)
            .expect("the object's tag is in its page");
        let mut after = base.clone();
        after[at..at + OBJECT_BYTES].copy_from_slice(&value(tag_of(client, i), next));
        let rec = redo::page_record(TxnId(txn), oid.page, Some(&base), &after);
        known.lock().unwrap().get_mut(&oid).unwrap().in_flight = Some(next);
        match call(
            &c,
            &PageRequest::Commit {
                txn,
                records: vec![rec],
            },
        ) {
            Ok(_) => {
                let mut k = known.lock().unwrap();
                let e = k.get_mut(&oid).unwrap();
                e.acked = next;
                e.in_flight = None;
            }
            Err(_) => return,
        }
    }
}

#[test]
fn acknowledged_commits_survive_kill_9_of_the_server() {
    kill_cycles(Kind::Page);
}

#[test]
fn acknowledged_object_server_commits_survive_kill_9_of_the_server() {
    kill_cycles(Kind::Object);
}

#[test]
fn acknowledged_file_server_commits_survive_kill_9_of_the_server() {
    kill_cycles(Kind::File);
}

fn kill_cycles(kind: Kind) {
    let cycles: u64 = std::env::var("CAIRN_SERVER_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let owned = setup(&path);
    let known: Arc<Mutex<HashMap<Oid, Known>>> = Arc::new(Mutex::new(
        owned.iter().flatten().map(|o| (*o, Known::default())).collect(),
    ));
    let mut acked_total = 0u64;
    let mut in_flight_landed = 0u64;
    for cycle in 0..cycles {
        let at_start: HashMap<Oid, u64> = known.lock().unwrap().iter().map(|(o, k)| (*o, k.acked)).collect();
        let server = serve(&path, &[]);
        let threads: Vec<_> = (0..CLIENTS)
            .map(|c| {
                let (addr, known, oids) = (server.addr.clone(), known.clone(), owned[c].clone());
                std::thread::spawn(move || match kind {
                    Kind::Page => page_client(&addr, &oids, c, &known),
                    Kind::Object => object_client(&addr, &oids, c, &known),
                    Kind::File => file_client(&addr, &oids, c, &known),
                })
            })
            .collect();
        // Let commits flow for a while that differs from cycle to cycle.
        let started = Instant::now();
        std::thread::sleep(Duration::from_millis(80 + (cycle * 37) % 150));
        server.kill();
        for t in threads {
            t.join().unwrap();
        }
        assert!(started.elapsed() < Duration::from_secs(60));

        // Verify with the storage engine directly (recovery runs at open).
        let db = Db::open(&path, &DbOptions::default()).unwrap();
        let mut t = db.begin().unwrap();
        let mut k = known.lock().unwrap();
        for (c, oids) in owned.iter().enumerate() {
            for (i, oid) in oids.iter().enumerate() {
                let got = t.read(*oid).unwrap();
                let counter = u64::from_le_bytes(got[8..16].try_into().unwrap());
                assert_eq!(
                    got,
                    value(tag_of(c, i), counter),
                    "cycle {cycle}: {oid} is partly written"
                );
                let e = k.get_mut(oid).unwrap();
                let ok = counter == e.acked || Some(counter) == e.in_flight;
                assert!(
                    ok,
                    "cycle {cycle}: {oid} holds {counter}, acknowledged {} (in flight {:?})",
                    e.acked, e.in_flight
                );
                in_flight_landed += u64::from(counter != e.acked);
                acked_total += e.acked - at_start[oid];
                // The recovered state is the truth the next cycle builds on.
                *e = Known {
                    acked: counter,
                    in_flight: None,
                };
            }
        }
        drop(k);
        t.commit().unwrap();
        db.close().unwrap();
    }
    eprintln!(
        "{kind:?} clients: {cycles} kills of the server; {acked_total} commits acknowledged and found; {in_flight_landed} in-flight commits found whole after a kill"
    );
    assert!(acked_total > 0, "commits were acknowledged at all");
}
