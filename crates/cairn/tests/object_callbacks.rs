//! Callback locking at object granularity: an object-server client keeps
//! the objects it read (and unique-index lookups) across transactions and
//! reads them again with no round trip, until the server calls them back
//! because another client is about to change them. Against one real
//! server process.

mod common;

use std::sync::Arc;

use cairn::storage::{Error, GroupId, Oid};
use cairn::tools::{parse_url, ObjectStore, RemoteStore};
use common::ServerChild;

fn object_client(server: &ServerChild) -> Arc<ObjectStore> {
    ObjectStore::connect(
        parse_url(&format!("cairn://{}", server.addr)).unwrap(),
        &cairn::tools::Connect::default(),
        1 << 20,
    )
    .expect("connect")
}

/// `n` objects of 100 bytes, on one or two pages.
fn seed(store: &Arc<ObjectStore>, n: usize) -> Vec<Oid> {
    let mut t = store.begin().unwrap();
    let oids = (0..n)
        .map(|i| t.create(GroupId::DEFAULT, None, &[i as u8; 100]).unwrap())
        .collect();
    t.commit().unwrap();
    oids
}

/// Waits for the client's callback thread to have answered `n` callbacks.
fn wait_for_callbacks(store: &ObjectStore, n: u64) {
    cairn_testkit::wait_until(&format!("{n} callbacks answered"), || store.stats().callbacks >= n);
}

#[test]
fn a_warm_transaction_reads_the_objects_it_read_before_with_no_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::serve(&dir.path().join("db"));
    let a = object_client(&server);
    let oids = seed(&a, 20);
    let mut t = a.begin().unwrap();
    let cold = t.read_many(&oids).unwrap();
    t.commit().unwrap();
    let before = a.stats();
    let mut t = a.begin().unwrap();
    let warm = t.read_many(&oids).unwrap();
    for &o in &oids {
        assert_eq!(t.len(o).unwrap(), 100);
    }
    t.commit().unwrap();
    let after = a.stats();
    assert_eq!(warm, cold);
    assert_eq!(
        after.round_trips, before.round_trips,
        "no round trip for cached objects"
    );
    assert_eq!(after.one_way, before.one_way, "not even a message");
    assert_eq!(after.cache_hits - before.cache_hits, 20);
    assert_eq!(a.cached_objects(), (20, 2000));
    server.stop();
}

#[test]
fn another_clients_change_calls_the_object_back_and_the_next_read_sees_it() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::serve(&dir.path().join("db"));
    let a = object_client(&server);
    let b = object_client(&server);
    let oids = seed(&a, 3);
    let mut t = a.begin().unwrap();
    t.read_many(&oids).unwrap();
    t.commit().unwrap();
    // B changes the first object: A's right to it is called back, not
    // those to the others of the page (object-level writes).
    let mut tb = b.begin().unwrap();
    tb.update(oids[0], b"changed by b").unwrap();
    tb.commit().unwrap();
    wait_for_callbacks(&a, 1);
    assert_eq!(a.cached_objects().0, 2);
    let before = a.stats();
    let mut t = a.begin().unwrap();
    assert_eq!(t.read(oids[0]).unwrap(), b"changed by b");
    assert_eq!(t.read(oids[1]).unwrap(), vec![1u8; 100]);
    assert_eq!(t.read(oids[2]).unwrap(), vec![2u8; 100]);
    t.commit().unwrap();
    let after = a.stats();
    assert_eq!(after.callbacks, 1, "only the changed object was called back");
    // One fetch for the changed object; its end (the transaction is known
    // to the server now) goes one way.
    assert_eq!(after.round_trips - before.round_trips, 1);
    assert_eq!(after.one_way - before.one_way, 1);
    server.stop();
}

#[test]
fn a_transaction_reading_under_a_right_makes_another_clients_writer_wait() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::serve_with(&dir.path().join("db"), &[("CAIRN_TEST_LOCK_TIMEOUT_MS", "300")]);
    let a = object_client(&server);
    let b = object_client(&server);
    let oids = seed(&a, 1);
    let mut t = a.begin().unwrap();
    t.read(oids[0]).unwrap();
    t.commit().unwrap();
    // A reads under its right (no message) and stays open.
    let mut reader = a.begin().unwrap();
    let rt = a.stats().round_trips;
    assert_eq!(reader.read(oids[0]).unwrap(), vec![0u8; 100]);
    assert_eq!(a.stats().round_trips, rt);
    // B's writer calls the object back: A answers "in use", the server
    // grants A's reader S, and B waits for it (here: times out).
    writer_waits_for_reader(&a, &b, reader, oids[0], || {
        assert_eq!(a.stats().callbacks_in_use, 1);
    });
    server.stop();
}

/// B's writer of `oid` waits for A's `reader` (here: times out), then
/// `between` runs; the reader still sees what it read (100 zero bytes);
/// once it ends, B changes the object and A reads B's change.
fn writer_waits_for_reader(
    a: &Arc<ObjectStore>,
    b: &Arc<ObjectStore>,
    mut reader: cairn::tools::ObjectTxn,
    oid: Oid,
    between: impl FnOnce(),
) {
    let mut tb = b.begin().unwrap();
    match tb.read_for_update(oid) {
        Err(Error::LockTimeout { .. }) => {}
        other => panic!("B should wait for A's reader: {other:?}"),
    }
    drop(tb);
    between();
    assert_eq!(reader.read(oid).unwrap(), vec![0u8; 100]);
    reader.commit().unwrap();
    let mut tb = b.begin().unwrap();
    tb.read_for_update(oid).unwrap();
    tb.update(oid, b"b").unwrap();
    tb.commit().unwrap();
    let mut t = a.begin().unwrap();
    assert_eq!(t.read(oid).unwrap(), b"b");
    t.commit().unwrap();
}

#[test]
fn a_right_read_under_outlives_the_eviction_of_its_bytes_until_the_reader_ends() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::serve_with(&dir.path().join("db"), &[("CAIRN_TEST_LOCK_TIMEOUT_MS", "300")]);
    // A client whose cache holds about 20 objects of 100 bytes.
    let a = ObjectStore::connect(
        parse_url(&format!("cairn://{}", server.addr)).unwrap(),
        &cairn::tools::Connect::default(),
        2048,
    )
    .unwrap();
    let b = object_client(&server);
    let oids = seed(&a, 200);
    let mut t = a.begin().unwrap();
    t.read(oids[0]).unwrap();
    t.commit().unwrap();
    // The reader reads object 0 under the client's right (no server
    // lock), then enough others to push object 0's bytes out of the cache.
    let mut reader = a.begin().unwrap();
    let rt = a.stats().round_trips;
    assert_eq!(reader.read(oids[0]).unwrap(), vec![0u8; 100]);
    assert_eq!(a.stats().round_trips, rt, "read under the right");
    for o in &oids[1..] {
        reader.read(*o).unwrap();
    }
    assert!(
        a.cached_objects().1 <= 2048,
        "the cache stays bounded: {:?}",
        a.cached_objects()
    );
    // The right stayed: B's writer is called back, A names its reader, and
    // B waits for it (here: times out) — the reader's S lock lives on.
    writer_waits_for_reader(&a, &b, reader, oids[0], || {});
    server.stop();
}

#[test]
fn a_transaction_of_the_same_client_waits_for_its_readers_under_a_right() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::serve_with(&dir.path().join("db"), &[("CAIRN_TEST_LOCK_TIMEOUT_MS", "300")]);
    let a = object_client(&server);
    let oids = seed(&a, 1);
    let mut t = a.begin().unwrap();
    t.read(oids[0]).unwrap();
    t.commit().unwrap();
    let mut reader = a.begin().unwrap();
    assert_eq!(reader.read(oids[0]).unwrap(), vec![0u8; 100]);
    // The server does not call a client back for its own writer: the
    // writer names the client's readers itself, and waits for them.
    let mut writer = a.begin().unwrap();
    writer.update(oids[0], b"w").unwrap();
    match writer.commit() {
        Err(Error::LockTimeout { .. }) => {}
        other => panic!("the writer should wait for the reader: {other:?}"),
    }
    // Its right went with the write: the reader's next transaction asks.
    reader.commit().unwrap();
    assert_eq!(a.cached_objects().0, 0);
    let mut writer = a.begin().unwrap();
    writer.update(oids[0], b"w").unwrap();
    writer.commit().unwrap();
    let mut t = a.begin().unwrap();
    assert_eq!(t.read(oids[0]).unwrap(), b"w");
    t.commit().unwrap();
    // Read again under a new right.
    let rt = a.stats().round_trips;
    let mut t = a.begin().unwrap();
    assert_eq!(t.read(oids[0]).unwrap(), b"w");
    t.commit().unwrap();
    assert_eq!(a.stats().round_trips, rt);
    server.stop();
}

#[test]
fn a_page_clients_change_calls_back_the_objects_of_its_page() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::serve(&dir.path().join("db"));
    let a = object_client(&server);
    let oids = seed(&a, 2);
    let mut t = a.begin().unwrap();
    t.read_many(&oids).unwrap();
    t.commit().unwrap();
    let p = RemoteStore::connect(
        parse_url(&format!("cairn://{}", server.addr)).unwrap(),
        &cairn::tools::Connect::default(),
        256,
        16 << 20,
        1024,
    )
    .unwrap();
    let mut tp = p.begin().unwrap();
    tp.update(oids[1], b"changed by a page client").unwrap();
    tp.commit().unwrap();
    // X on the page calls back every object of it this client keeps.
    wait_for_callbacks(&a, 2);
    let mut t = a.begin().unwrap();
    assert_eq!(t.read(oids[0]).unwrap(), vec![0u8; 100]);
    assert_eq!(t.read(oids[1]).unwrap(), b"changed by a page client");
    t.commit().unwrap();
    server.stop();
}

#[test]
fn a_typed_client_looks_up_and_reads_warm_objects_with_no_round_trip_until_they_change() {
    use cairn::{Arch, Database, Index, Options, Persistent};
    #[derive(Persistent, Debug, Clone, PartialEq)]
    struct Item {
        #[cairn(index)]
        key: u32,
        value: i64,
    }
    const BY_KEY: Index<u32, Item> = Index::on("key");
    let dir = tempfile::tempdir().unwrap();
    let server = common::serve(&dir.path().join("db"));
    let connect = || {
        let mut o = Options {
            arch: Arch::Object,
            ..Options::default()
        };
        o.storage.background = false;
        Database::connect(&format!("cairn://{}", server.addr), o).unwrap()
    };
    let (a, b) = (connect(), connect());
    let mut tx = a.begin().unwrap();
    for k in 0..50 {
        tx.create(Item {
            key: k,
            value: i64::from(k),
        })
        .unwrap();
    }
    tx.commit().unwrap();
    let lookup_all = |db: &Database| -> i64 {
        let mut tx = db.begin().unwrap();
        let mut sum = 0;
        for k in 0..50u32 {
            let r = tx.find_one(&BY_KEY, &k).unwrap().unwrap();
            sum += tx.get(&r).unwrap().value;
        }
        tx.commit().unwrap();
        sum
    };
    assert_eq!(lookup_all(&a), (0..50).sum::<i64>());
    let before = a.remote_stats().unwrap();
    assert_eq!(lookup_all(&a), (0..50).sum::<i64>());
    let warm = a.remote_stats().unwrap();
    assert_eq!(
        (warm.round_trips - before.round_trips, warm.one_way - before.one_way),
        (0, 0),
        "the catalog's epoch, the lookups and the objects are all cached"
    );
    assert!(warm.cache_hits - before.cache_hits >= 50);
    // B changes one value and moves another key: A's copies and its
    // lookup of the moved key are called back.
    let mut tx = b.begin().unwrap();
    let r = tx.find_one(&BY_KEY, &7).unwrap().unwrap();
    tx.update(&r, |i| i.value = 700).unwrap();
    let r = tx.find_one(&BY_KEY, &9).unwrap().unwrap();
    tx.update(&r, |i| i.key = 1009).unwrap();
    tx.commit().unwrap();
    let mut tx = a.begin().unwrap();
    let r = tx.find_one(&BY_KEY, &7).unwrap().unwrap();
    assert_eq!(tx.get(&r).unwrap().value, 700);
    assert!(tx.find_one(&BY_KEY, &9).unwrap().is_none(), "key 9 moved to 1009");
    let r = tx.find_one(&BY_KEY, &1009).unwrap().unwrap();
    assert_eq!(tx.get(&r).unwrap().value, 9);
    tx.commit().unwrap();
    assert!(a.remote_stats().unwrap().callbacks >= 2);
    drop((a, b));
    server.stop();
}

#[test]
fn kept_lookups_see_every_entry_another_client_adds_or_removes_even_across_leaves() {
    use cairn::tools::TreeOp;
    let dir = tempfile::tempdir().unwrap();
    let server = common::serve(&dir.path().join("db"));
    let a = object_client(&server);
    let b = object_client(&server);
    let key = |k: u32| format!("key{k:03}").into_bytes();
    let value = |v: u32| {
        let mut b = vec![b'v'; 100];
        b.extend_from_slice(&v.to_be_bytes());
        b
    };
    // 40 keys of 30 values each: about 130 KiB of entries, so runs of one
    // key cross leaves.
    let mut t = a.begin().unwrap();
    let root = t.tree_create(GroupId::DEFAULT, false).unwrap();
    let ops = (0..40u32)
        .flat_map(|k| (0..30u32).map(move |v| (k, v)))
        .map(|(k, v)| TreeOp::Insert {
            key: key(k),
            value: value(v * 10),
        })
        .collect();
    t.tree_apply(root, ops).unwrap();
    t.commit().unwrap();
    let read_all = |store: &Arc<ObjectStore>| -> Vec<Vec<Vec<u8>>> {
        let mut t = store.begin().unwrap();
        let out = (0..40u32).map(|k| t.tree_get(root, &key(k), 1000).unwrap()).collect();
        t.commit().unwrap();
        out
    };
    let first = read_all(&a);
    assert!(first.iter().all(|vs| vs.len() == 30));
    let rt = a.stats().round_trips;
    assert_eq!(read_all(&a), first);
    assert_eq!(a.stats().round_trips, rt, "every lookup kept");
    // B adds a value above the others of every third key, below those of
    // the next ones, and removes one from the middle of the rest — keys
    // apart, so that only the leaves a key's lookup is kept under can tell
    // A of the change.
    let big = value(1_000_000);
    let small: Vec<u8> = value(0).iter().take(50).copied().collect();
    let mut tb = b.begin().unwrap();
    let ops = (0..40u32)
        .map(|k| match k % 3 {
            0 => TreeOp::Insert {
                key: key(k),
                value: big.clone(),
            },
            1 => TreeOp::Insert {
                key: key(k),
                value: small.clone(),
            },
            _ => TreeOp::Delete {
                key: key(k),
                value: Some(value(150)),
            },
        })
        .collect();
    tb.tree_apply(root, ops).unwrap();
    tb.commit().unwrap();
    let after = read_all(&a);
    for (k, vs) in after.iter().enumerate() {
        match k % 3 {
            0 => assert!(vs.len() == 31 && vs.contains(&big), "key {k}"),
            1 => assert!(vs.len() == 31 && vs.contains(&small), "key {k}"),
            _ => assert!(vs.len() == 29 && !vs.contains(&value(150)), "key {k}"),
        }
    }
    assert!(a.stats().callbacks > 0);
    server.stop();
}

#[test]
fn a_transaction_keeps_no_more_objects_than_the_client_cache_holds() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::serve(&dir.path().join("db"));
    // A cache of 2 KiB: 20 objects of 100 bytes.
    let small = ObjectStore::connect(
        parse_url(&format!("cairn://{}", server.addr)).unwrap(),
        &cairn::tools::Connect::default(),
        2048,
    )
    .unwrap();
    let oids = seed(&small, 60);
    let mut t = small.begin().unwrap();
    let first = t.read_many(&oids).unwrap();
    // Read again in the same transaction: what was let go is asked for
    // again, under the S locks the transaction holds (the same values).
    let before = small.stats().round_trips;
    for (o, want) in oids.iter().zip(&first) {
        assert_eq!(Some(t.read(*o).unwrap()), *want);
    }
    t.commit().unwrap();
    assert!(
        small.stats().round_trips > before,
        "the reads were bounded by the cache"
    );
    assert!(small.cached_objects().1 <= 2048);
    // A client with room for all of them reads them again for nothing.
    let big = object_client(&server);
    let mut t = big.begin().unwrap();
    t.read_many(&oids).unwrap();
    let before = big.stats().round_trips;
    for o in &oids {
        t.read(*o).unwrap();
    }
    t.commit().unwrap();
    assert_eq!(big.stats().round_trips, before);
    server.stop();
}

/// Waits for the client's callback thread to have named its transactions
/// in `n` answers.
fn wait_for_answers_in_use(store: &ObjectStore, n: u64) {
    cairn_testkit::wait_until(&format!("{n} answers naming a reader"), || {
        store.stats().callbacks_in_use >= n
    });
}

/// A transaction that read an object under its client's right and then
/// asks for X on it keeps the right registered on the server until the X
/// is granted: another client's writer arriving meanwhile calls it back,
/// and the answer names the transaction (its read becomes an S lock, its X
/// a conversion) — so no writer can commit between its read and its
/// change. The client used to give the right back first, and a writer
/// could slip in between (G-single in the isolation suite, about one
/// transaction in 30,000 of adaptive clients).
#[test]
fn a_writers_own_read_under_a_right_stays_covered_until_its_x_is_granted() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::serve(&dir.path().join("db"));
    let (a, b, c) = (object_client(&server), object_client(&server), object_client(&server));
    let o = seed(&a, 1)[0];
    // a caches o under a right; c's open transaction reads it (S).
    let mut t = a.begin().unwrap();
    t.read(o).unwrap();
    t.commit().unwrap();
    let mut reader = c.begin().unwrap();
    assert_eq!(reader.read(o).unwrap(), vec![0u8; 100]);
    std::thread::scope(|s| {
        // a's transaction reads o under the right (no round trip), then
        // asks for X: its X waits for c's reader (c is called back).
        let first = s.spawn(|| {
            let mut t = a.begin().unwrap();
            assert_eq!(t.read(o).unwrap(), vec![0u8; 100]);
            t.lock_for_update(o).unwrap();
            t.update(o, &[1u8; 100]).unwrap();
            t.commit().unwrap();
        });
        wait_for_callbacks(&c, 1);
        // b's writer comes while a's X waits: a's right is still the
        // server's, so a is called back and names its transaction.
        let second = s.spawn(|| {
            let mut t = b.begin().unwrap();
            t.lock_for_update(o).unwrap();
            let seen = t.read(o).unwrap();
            t.update(o, &[2u8; 100]).unwrap();
            t.commit().unwrap();
            seen
        });
        wait_for_answers_in_use(&a, 1);
        reader.commit().unwrap();
        first.join().unwrap();
        assert_eq!(
            second.join().unwrap(),
            vec![1u8; 100],
            "b's writer ran after a's change, whose read it waited for"
        );
    });
    let mut t = c.begin().unwrap();
    assert_eq!(t.read(o).unwrap(), vec![2u8; 100]);
    t.commit().unwrap();
}

/// `clear_caches` is a cold start for an object client too: what it kept
/// under rights goes, the rights go back to the server, and the next
/// transaction fetches every object again.
#[test]
fn evicting_the_cache_gives_the_rights_back_and_the_next_read_fetches_again() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::serve(&dir.path().join("db"));
    let a = object_client(&server);
    let oids = seed(&a, 20);
    let mut t = a.begin().unwrap();
    let cold = t.read_many(&oids).unwrap();
    t.commit().unwrap();
    assert_eq!(a.cached_objects().0, 20);
    let given_back = a.stats().rights_given_back;
    a.evict_cache();
    assert_eq!(a.cached_objects(), (0, 0), "nothing kept");
    assert_eq!(a.stats().rights_given_back - given_back, 20, "every right went back");
    let before = a.stats();
    let mut t = a.begin().unwrap();
    assert_eq!(t.read_many(&oids).unwrap(), cold);
    t.commit().unwrap();
    let after = a.stats();
    assert_eq!(after.cache_hits, before.cache_hits, "nothing read from the cache");
    assert!(after.round_trips > before.round_trips, "fetched from the server");
    assert_eq!(a.cached_objects().0, 20, "kept again under new rights");
    server.stop();
}
