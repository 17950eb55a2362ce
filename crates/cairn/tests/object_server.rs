//! Object-server clients (`cairn::tools::ObjectStore`) of one real server
//! process: two clients change different objects of one page at the same
//! time and both commit (two page-server clients serialize on the page);
//! a list of objects crosses in one streamed request; a large object only
//! in the ranges asked for; a killed client leaves no lock, a killed server
//! loses no acknowledged commit.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn::storage::{Db, DbOptions, Error, GroupId, Oid};
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

fn page_client(server: &ServerChild) -> Arc<RemoteStore> {
    RemoteStore::connect(
        parse_url(&format!("cairn://{}", server.addr)).unwrap(),
        &cairn::tools::Connect::default(),
        256,
        16 << 20,
        1024,
    )
    .expect("connect")
}

/// `n` objects of 100 bytes created in one transaction: they share pages.
fn seed(store: &Arc<ObjectStore>, n: usize) -> Vec<Oid> {
    let mut t = store.begin().unwrap();
    let oids = (0..n)
        .map(|i| t.create(GroupId::DEFAULT, None, &[i as u8; 100]).unwrap())
        .collect();
    t.commit().unwrap();
    oids
}

#[test]
fn two_object_clients_change_objects_of_one_page_at_once_and_page_clients_serialize() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::serve_with(&dir.path().join("db"), &[("CAIRN_TEST_LOCK_TIMEOUT_MS", "300")]);
    let a = object_client(&server);
    let b = object_client(&server);
    let oids = seed(&a, 2);
    assert_eq!(oids[0].page, oids[1].page, "both objects on one page");
    // A changes the first and stays open, holding X on it.
    let mut ta = a.begin().unwrap();
    assert_eq!(ta.read_for_update(oids[0]).unwrap(), vec![0u8; 100]);
    ta.update(oids[0], b"changed by a").unwrap();
    // B changes the second object of the same page and commits meanwhile:
    // before A ends, so B did not wait for A (a wait would have ended in
    // the server's 300 ms lock timeout, an error here).
    let mut tb = b.begin().unwrap();
    assert_eq!(tb.read_for_update(oids[1]).unwrap(), vec![1u8; 100]);
    tb.update(oids[1], b"changed by b").unwrap();
    tb.commit().unwrap();
    ta.commit().unwrap();
    let mut t = b.begin().unwrap();
    assert_eq!(t.read(oids[0]).unwrap(), b"changed by a");
    assert_eq!(t.read(oids[1]).unwrap(), b"changed by b");
    t.commit().unwrap();

    // The same on the page server: B's change waits for A's page lock (here
    // until the server's lock timeout) and goes through once A commits.
    let pa = page_client(&server);
    let pb = page_client(&server);
    let mut ta = pa.begin().unwrap();
    ta.update(oids[0], b"page a").unwrap();
    let mut tb = pb.begin().unwrap();
    match tb.update(oids[1], b"page b") {
        Err(Error::LockTimeout { .. }) => {}
        r => panic!("a page client's change of the same page must wait: {r:?}"),
    }
    drop(tb);
    ta.commit().unwrap();
    let mut tb = pb.begin().unwrap();
    tb.update(oids[1], b"page b").unwrap();
    tb.commit().unwrap();
    let mut t = a.begin().unwrap();
    assert_eq!(t.read(oids[0]).unwrap(), b"page a");
    assert_eq!(t.read(oids[1]).unwrap(), b"page b");
    t.commit().unwrap();
    drop((a, b, pa, pb));
    server.stop();
}

#[test]
fn a_list_of_objects_crosses_in_one_streamed_request() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::serve(&dir.path().join("db"));
    let store = object_client(&server);
    let mut oids = seed(&store, 300);
    // One that does not exist (a slot past the page's last).
    let missing = Oid {
        slot: cairn::storage::SlotIdx(4000),
        ..oids[0]
    };
    oids.push(missing);
    let before = store.stats().round_trips;
    let mut t = store.begin().unwrap();
    let got = t.read_many(&oids).unwrap();
    assert_eq!(store.stats().round_trips - before, 1, "one request for 301 objects");
    for (i, g) in got.iter().take(300).enumerate() {
        assert_eq!(g.as_deref(), Some(&[i as u8; 100][..]));
    }
    assert_eq!(got[300], None);
    // Read again: from the transaction, no request.
    let again = t.read(oids[7]).unwrap();
    assert_eq!(again, vec![7u8; 100]);
    assert_eq!(store.stats().round_trips - before, 1);
    assert!(matches!(t.read(missing), Err(Error::NotFound { .. })));
    t.commit().unwrap();
    drop(store);
    server.stop();
}

#[test]
fn a_large_object_crosses_only_in_the_ranges_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::serve(&dir.path().join("db"));
    let store = object_client(&server);
    let big: Vec<u8> = (0..3 << 20).map(|i: u32| (i % 251) as u8).collect();
    let oid = {
        let mut t = store.begin().unwrap();
        let oid = t.create(GroupId::DEFAULT, None, &big).unwrap();
        t.commit().unwrap();
        oid
    };
    let before = store.stats().bytes_received;
    let mut t = store.begin().unwrap();
    let mut buf = vec![0u8; 4096];
    t.read_range(oid, 2 << 20, &mut buf).unwrap();
    assert_eq!(buf, big[2 << 20..(2 << 20) + 4096]);
    assert!(
        store.stats().bytes_received - before < 64 << 10,
        "a 4 KiB range, not the 3 MiB object"
    );
    // Fetched whole it comes as its length, then in ranges.
    assert_eq!(t.read(oid).unwrap(), big);
    t.commit().unwrap();
    drop(store);
    server.stop();
}

cairn_testkit::child_entry_points!(locking_object_client_child_process);

/// The child side of the killed-client test (a child entry point, not a
/// test): locks an object X, says so, waits to be killed.
fn locking_object_client_child_process() {
    let url = std::env::var("CAIRN_TEST_OBJECT_CLIENT").unwrap();
    let oid = Oid::from_slice(&hex(&std::env::var("CAIRN_TEST_OID").unwrap())).unwrap();
    let cached = Oid::from_slice(&hex(&std::env::var("CAIRN_TEST_CACHED_OID").unwrap())).unwrap();
    let store = ObjectStore::connect(parse_url(&url).unwrap(), &cairn::tools::Connect::default(), 1 << 20).unwrap();
    // A right to cache `cached`, held when the process dies.
    let mut t = store.begin().unwrap();
    t.read(cached).unwrap();
    t.commit().unwrap();
    assert_eq!(store.cached_objects().0, 1);
    let mut t = store.begin().unwrap();
    t.read_for_update(oid).unwrap();
    t.update(oid, b"never committed").unwrap();
    cairn_testkit::child::say_locked();
    cairn_testkit::child::wait_to_be_killed();
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

#[test]
fn a_killed_object_client_leaves_no_lock_and_a_killed_server_no_lost_commit() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let server = common::serve(&path);
    let store = object_client(&server);
    let oids = seed(&store, 2);
    let hex_of = |o: Oid| -> String { o.to_bytes().iter().map(|b| format!("{b:02x}")).collect() };
    common::kill_child_once_locked(
        "locking_object_client_child_process",
        &[
            ("CAIRN_TEST_OBJECT_CLIENT", server.url()),
            ("CAIRN_TEST_OID", hex_of(oids[0])),
            ("CAIRN_TEST_CACHED_OID", hex_of(oids[1])),
        ],
    );
    // Its X lock went with its connection: this commit does not wait out
    // the lock timeout, and nothing of the killed client is there.
    let started = Instant::now();
    let mut t = store.begin().unwrap();
    assert_eq!(t.read_for_update(oids[0]).unwrap(), vec![0u8; 100]);
    t.update(oids[0], b"first").unwrap();
    t.commit().unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
    // Two commits to objects of one page, then the server is killed. The
    // second changes the object the killed client held a right to: its
    // right went with its connection too (no callback to wait out).
    let other = object_client(&server);
    let started = Instant::now();
    let mut t = other.begin().unwrap();
    t.update(oids[1], b"second").unwrap();
    t.commit().unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
    drop((store, other));
    server.kill();
    let db = Db::open(
        &path,
        &DbOptions {
            background: false,
            ..DbOptions::default()
        },
    )
    .unwrap();
    let mut t = db.begin().unwrap();
    assert_eq!(t.read(oids[0]).unwrap(), b"first");
    assert_eq!(t.read(oids[1]).unwrap(), b"second");
    t.commit().unwrap();
    db.close().unwrap();
}

#[test]
fn b_trees_run_on_the_server_for_an_object_client() {
    use cairn::tools::TreeOp;
    use std::ops::Bound;
    let dir = tempfile::tempdir().unwrap();
    let server = common::serve(&dir.path().join("db"));
    let store = object_client(&server);
    let mut t = store.begin().unwrap();
    let root = t.tree_create(GroupId::DEFAULT, false).unwrap();
    assert_eq!(t.tree_open(root).unwrap(), Some(GroupId::DEFAULT));
    // 5,000 values of one key and 3,000 of others: more than a batch.
    let mut ops = Vec::new();
    for i in 0u32..5000 {
        ops.push(TreeOp::Insert {
            key: b"same".to_vec(),
            value: i.to_be_bytes().to_vec(),
        });
    }
    for i in 0u32..3000 {
        ops.push(TreeOp::Insert {
            key: format!("k{i:05}").into_bytes(),
            value: vec![1],
        });
    }
    t.tree_apply(root, ops).unwrap();
    t.commit().unwrap();
    let mut t = store.begin().unwrap();
    assert_eq!(t.tree_get(root, b"same", 3).unwrap().len(), 3);
    assert_eq!(t.tree_get(root, b"k00007", 10).unwrap(), vec![vec![1]]);
    let mut seen = Vec::new();
    t.tree_range(root, Bound::Unbounded, Bound::Unbounded, |k, v| {
        seen.push((k.to_vec(), v.to_vec()));
        true
    })
    .unwrap();
    assert_eq!(seen.len(), 8000, "every entry once, across batches");
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "in (key, value) order");
    t.tree_apply(
        root,
        vec![TreeOp::Delete {
            key: b"same".to_vec(),
            value: None,
        }],
    )
    .unwrap();
    let mut n = 0;
    t.tree_range(
        root,
        Bound::Included(b"k".to_vec()),
        Bound::Excluded(b"k00010".to_vec()),
        |_, _| {
            n += 1;
            true
        },
    )
    .unwrap();
    assert_eq!(n, 10);
    assert!(t.tree_get(root, b"same", 1).unwrap().is_empty());
    // A page that is no tree root is refused, not walked.
    let oid = t.create(GroupId::DEFAULT, None, b"not a tree").unwrap();
    assert!(t.tree_open(oid.page).is_err());
    drop(t);
    let mut t = store.begin().unwrap();
    t.tree_destroy(root).unwrap();
    t.commit().unwrap();
    drop(store);
    server.stop();
}

/// A page client caches a page under a callback right; an object client's
/// commit to an object on that page, a new object placed there and an
/// index entry it adds must reach the page client's next transaction (the
/// server calls the page back before the object client's locks on it).
#[test]
fn a_page_clients_cached_page_is_called_back_before_an_object_client_changes_it() {
    use cairn::{Arch, Database, Index, Options, Persistent, Ref};
    #[derive(Persistent, Debug, Clone, PartialEq)]
    struct Item {
        #[cairn(index)]
        key: u32,
        value: i64,
    }
    const BY_KEY: Index<u32, Item> = Index::on("key");
    let dir = tempfile::tempdir().unwrap();
    let server = common::serve(&dir.path().join("db"));
    let url = format!("cairn://{}", server.addr);
    let connect = |arch| {
        let mut o = Options {
            arch,
            ..Options::default()
        };
        o.storage.background = false;
        Database::connect(&url, o).unwrap()
    };
    let page = connect(Arch::Page);
    let object = connect(Arch::Object);
    let items: Vec<Ref<Item>> = {
        let mut tx = page.begin().unwrap();
        let v = (0..10).map(|k| tx.create(Item { key: k, value: 0 }).unwrap()).collect();
        tx.commit().unwrap();
        v
    };
    // The page client reads them (and caches their page under a right).
    let read_all = |db: &Database| -> Vec<i64> {
        let mut tx = db.begin().unwrap();
        let v = items.iter().map(|r| tx.get(r).unwrap().value).collect();
        tx.commit().unwrap();
        v
    };
    assert_eq!(read_all(&page), vec![0; 10]);
    assert_eq!(page.remote_stats().unwrap().callbacks, 0);
    // The object client changes one and adds one with a new key.
    let mut tx = object.begin().unwrap();
    tx.update(&items[3], |i| i.value = 33).unwrap();
    let extra = tx.create(Item { key: 100, value: 7 }).unwrap();
    tx.commit().unwrap();
    let mut want = vec![0; 10];
    want[3] = 33;
    assert_eq!(read_all(&page), want, "the page client read a stale page");
    let mut tx = page.begin().unwrap();
    assert_eq!(tx.find_one(&BY_KEY, &100).unwrap(), Some(extra.clone()));
    assert_eq!(tx.get(&extra).unwrap().value, 7);
    tx.commit().unwrap();
    assert!(page.remote_stats().unwrap().callbacks > 0, "the page was called back");
    drop((page, object));
    server.stop();
}

/// An object client's index lookup brings the object it finds in the same
/// round trip: a lookup and a read of the part cost one round trip.
#[test]
fn an_index_lookup_and_the_object_it_finds_cost_one_round_trip() {
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
    let mut o = Options {
        arch: Arch::Object,
        ..Options::default()
    };
    o.storage.background = false;
    let db = Database::connect(&format!("cairn://{}", server.addr), o).unwrap();
    let mut tx = db.begin().unwrap();
    for k in 0..100 {
        tx.create(Item {
            key: k,
            value: i64::from(k) * 10,
        })
        .unwrap();
    }
    tx.commit().unwrap();
    let mut tx = db.begin().unwrap();
    // The first query of a transaction checks the catalog's epoch too.
    let r = tx.find_one(&BY_KEY, &0).unwrap().unwrap();
    assert_eq!(tx.get(&r).unwrap().value, 0);
    let before = db.remote_stats().unwrap().round_trips;
    for k in 1..11u32 {
        let r = tx.find_one(&BY_KEY, &k).unwrap().unwrap();
        assert_eq!(tx.get(&r).unwrap().value, i64::from(k) * 10);
    }
    assert_eq!(
        db.remote_stats().unwrap().round_trips - before,
        10,
        "one round trip per part"
    );
    tx.commit().unwrap();
    drop(db);
    server.stop();
}

/// Changes sent ahead of a method that the server refuses half-way doom
/// the transaction (the server may hold part of them): only abort is left,
/// and nothing of it remains.
#[test]
fn a_refused_flush_dooms_the_transaction_and_nothing_of_it_remains() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::serve(&dir.path().join("db"));
    let store = object_client(&server);
    let oids = seed(&store, 2);
    let missing = Oid {
        slot: cairn::storage::SlotIdx(4000),
        ..oids[0]
    };
    let mut t = store.begin().unwrap();
    t.update(oids[0], b"first, applied on the server").unwrap();
    t.update(missing, b"no such object").unwrap();
    assert!(t.flush_changes().is_err(), "the missing object is refused");
    match t.read(oids[1]) {
        Err(Error::TxnDoomed { .. }) => {}
        r => panic!("a doomed transaction must refuse reads: {r:?}"),
    }
    t.abort().unwrap();
    let mut t = store.begin().unwrap();
    assert_eq!(
        t.read(oids[0]).unwrap(),
        vec![0u8; 100],
        "nothing of the doomed transaction"
    );
    t.commit().unwrap();
    drop(store);
    server.stop();
}

/// A transaction's changes are bounded in the client: past the bound the
/// ones kept go to the server ahead of the commit (OBJ_FLUSH) and the
/// client lets go of them. The transaction still reads its own changes,
/// commits all of them or, aborted, none; an after-image longer than a
/// message is refused and the transaction goes on. For the object and the
/// adaptive client, against a server that takes 64 KiB a message.
#[test]
fn a_transaction_larger_than_the_clients_bound_sends_its_changes_ahead_and_commits_or_aborts_whole() {
    use cairn::AdaptivePolicy;
    let dir = tempfile::tempdir().unwrap();
    let server = common::serve_with(&dir.path().join("db"), &[("CAIRN_TEST_BODY_MAX", "65536")]);
    let url = parse_url(&format!("cairn://{}", server.addr)).unwrap();
    let other = object_client(&server);
    let all = seed(&other, 3000);
    let clients = [
        ("object", object_client(&server)),
        (
            "adaptive",
            ObjectStore::connect_adaptive(
                url,
                &cairn::tools::Connect::default(),
                1 << 20,
                AdaptivePolicy::default(),
            )
            .unwrap(),
        ),
    ];
    for ((name, store), oids) in clients.iter().zip(all.chunks(1500)) {
        let value = |i: usize| vec![i as u8 ^ 0x5a; 200];
        // 1,500 after-images of 200 bytes: over five 64 KiB messages.
        let before = store.stats().round_trips;
        let mut t = store.begin().unwrap();
        for (i, &o) in oids.iter().enumerate() {
            t.update(o, &value(i)).unwrap();
        }
        let sent_ahead = store.stats().round_trips - before;
        assert!(
            sent_ahead >= 5,
            "{name}: changes sent ahead in {sent_ahead} round trips"
        );
        t.delete(oids[0]).unwrap();
        // Its own changes, sent ahead or not, and the object it deleted.
        for i in [1, 2, 700, 1499] {
            assert_eq!(t.read(oids[i]).unwrap(), value(i), "{name}: object {i}");
        }
        assert_eq!(t.read_for_update(oids[3]).unwrap(), value(3), "{name}");
        assert!(matches!(t.read(oids[0]), Err(Error::NotFound { .. })), "{name}");
        // Sent ahead with the next ones: still known as gone.
        for (i, &o) in oids.iter().enumerate().skip(6) {
            t.update(o, &value(i)).unwrap();
        }
        assert!(matches!(t.update(oids[0], b"x"), Err(Error::NotFound { .. })), "{name}");
        // An after-image longer than a message: refused, nothing lost.
        match t.update(oids[5], &vec![1; 70_000]) {
            Err(Error::LimitExceeded { value, limit, .. }) => assert!(value > limit, "{name}"),
            r => panic!("{name}: an after-image over the message bound must be refused: {r:?}"),
        }
        assert_eq!(t.read(oids[5]).unwrap(), value(5), "{name}");
        t.commit().unwrap();

        // Another client sees all of it.
        let mut r = other.begin().unwrap();
        assert!(r.read_many(&oids[..1]).unwrap()[0].is_none(), "{name}: deleted");
        let got = r.read_many(&oids[1..]).unwrap();
        for (i, g) in got.iter().enumerate() {
            assert_eq!(g.as_deref(), Some(&value(i + 1)[..]), "{name}: object {}", i + 1);
        }
        r.commit().unwrap();

        // Aborted after sending changes ahead: none of it stays, and no
        // lock of it holds a writer off.
        let mut t = store.begin().unwrap();
        for &o in &oids[1..] {
            t.update(o, &[0xee; 200]).unwrap();
        }
        t.abort().unwrap();
        let mut w = other.begin().unwrap();
        let got = w.read_many(&oids[1..]).unwrap();
        for (i, g) in got.iter().enumerate() {
            let i = i + 1;
            assert_eq!(g.as_deref(), Some(&value(i)[..]), "{name}: object {i} after the abort");
        }
        w.update(oids[1], b"written after the abort").unwrap();
        w.commit().unwrap();
    }
    drop(clients);
    drop(other);
    server.stop();
}

/// What a transaction creates counts against the client's bound like what
/// it reads: past it the created objects' bytes are let go of, a later
/// read brings the transaction's own version from the server (one round
/// trip), and the client takes no right to it there — aborted, the objects
/// are gone for every later transaction of the client, not served from its
/// cache.
#[test]
fn created_objects_past_the_bound_are_let_go_of_and_never_cached_under_a_right() {
    use cairn::AdaptivePolicy;
    let dir = tempfile::tempdir().unwrap();
    let server = common::serve(&dir.path().join("db"));
    let url = parse_url(&format!("cairn://{}", server.addr)).unwrap();
    let clients = [
        (
            "object",
            ObjectStore::connect(url.clone(), &cairn::tools::Connect::default(), 64 << 10).unwrap(),
        ),
        (
            "adaptive",
            ObjectStore::connect_adaptive(
                url,
                &cairn::tools::Connect::default(),
                64 << 10,
                AdaptivePolicy::default(),
            )
            .unwrap(),
        ),
    ];
    for (name, store) in &clients {
        // 2,000 objects of 200 bytes: six times the 64 KiB bound.
        let mut t = store.begin().unwrap();
        let oids: Vec<Oid> = (0..2000)
            .map(|i| t.create(GroupId::DEFAULT, None, &[i as u8; 200]).unwrap())
            .collect();
        let before = store.stats().round_trips;
        assert_eq!(t.read(oids[0]).unwrap(), vec![0u8; 200], "{name}");
        assert!(
            store.stats().round_trips > before,
            "{name}: the first object was let go of and read again from the server"
        );
        assert_eq!(t.read(oids[1999]).unwrap(), vec![1999u16 as u8; 200], "{name}");
        // An index lookup that finds an object the transaction created
        // brings it with a right the client must not take either.
        let root = {
            let mut r = store.begin().unwrap();
            let root = r.tree_create(GroupId::DEFAULT, false).unwrap();
            r.commit().unwrap();
            root
        };
        let found = t.create(GroupId::DEFAULT, None, b"found by its key").unwrap();
        t.tree_apply(
            root,
            vec![cairn::tools::TreeOp::Insert {
                key: b"key".to_vec(),
                value: found.to_bytes().to_vec(),
            }],
        )
        .unwrap();
        assert_eq!(
            t.tree_get_objects(root, b"key", 1).unwrap(),
            vec![found.to_bytes().to_vec()]
        );
        t.abort().unwrap();
        let mut t = store.begin().unwrap();
        for &o in [oids[0], oids[1], oids[1999], found].iter() {
            assert!(
                matches!(t.read(o), Err(Error::NotFound { .. })),
                "{name}: an aborted create must not be read back from the cache"
            );
        }
        t.commit().unwrap();
    }
    drop(clients);
    server.stop();
}

/// Index changes kept to send later cost no round trip of their own: the
/// transaction's lookups of a key they change send them first, a commit
/// sends them in one TREE_APPLY per tree, an abort never sends them, and
/// one the server refuses fails the request that sends it and dooms the
/// transaction (nothing of it remains).
#[test]
fn index_changes_kept_to_send_later_cost_no_round_trip_and_commit_or_abort_with_the_transaction() {
    use cairn::tools::TreeOp;
    let dir = tempfile::tempdir().unwrap();
    let server = common::serve(&dir.path().join("db"));
    let store = object_client(&server);
    let other = object_client(&server);
    let root = {
        let mut t = store.begin().unwrap();
        let root = t.tree_create(GroupId::DEFAULT, false).unwrap();
        t.commit().unwrap();
        root
    };
    let insert = |k: u32| TreeOp::Insert {
        key: k.to_be_bytes().to_vec(),
        value: vec![k as u8],
    };
    let mut t = store.begin().unwrap();
    let before = store.stats().round_trips;
    for k in 0..100u32 {
        t.tree_apply_later(root, vec![insert(k)]).unwrap();
    }
    assert_eq!(store.stats().round_trips, before, "kept, not sent");
    // A lookup of another key goes alone; one of a key kept sends them.
    assert!(t.tree_get(root, &1000u32.to_be_bytes(), 1).unwrap().is_empty());
    assert_eq!(store.stats().round_trips, before + 1);
    assert_eq!(t.tree_get(root, &7u32.to_be_bytes(), 1).unwrap(), vec![vec![7u8]]);
    assert_eq!(store.stats().round_trips, before + 3, "one TREE_APPLY, then the lookup");
    for k in 100..200u32 {
        t.tree_apply_later(root, vec![insert(k)]).unwrap();
    }
    let mut n = 0;
    t.tree_range(root, std::ops::Bound::Unbounded, std::ops::Bound::Unbounded, |_, _| {
        n += 1;
        true
    })
    .unwrap();
    assert_eq!(n, 200, "a range sends them first");
    for k in 200..300u32 {
        t.tree_apply_later(root, vec![insert(k)]).unwrap();
    }
    t.commit().unwrap();
    let mut r = other.begin().unwrap();
    assert_eq!(
        r.tree_get(root, &299u32.to_be_bytes(), 1).unwrap(),
        vec![vec![299u32 as u8]]
    );
    r.commit().unwrap();

    // Aborted: never sent, nothing of it.
    let mut t = store.begin().unwrap();
    t.tree_apply_later(root, vec![insert(5000)]).unwrap();
    t.abort().unwrap();
    // Refused when sent (not a tree): the commit fails, the transaction
    // is gone, and the change kept with it for the real tree too.
    let data = seed(&store, 1)[0];
    let mut t = store.begin().unwrap();
    t.tree_apply_later(root, vec![insert(6000)]).unwrap();
    t.tree_apply_later(data.page, vec![insert(1)]).unwrap();
    assert!(t.commit().is_err(), "a change of something that is no tree is refused");
    let mut r = other.begin().unwrap();
    for k in [5000u32, 6000] {
        assert!(r.tree_get(root, &k.to_be_bytes(), 1).unwrap().is_empty(), "{k}");
    }
    r.commit().unwrap();
    drop((store, other));
    server.stop();
}

/// A TREE_APPLY larger than the server's message bound crosses in as many
/// requests as it needs, in order; a single change longer than a message
/// is refused before anything is sent (the transaction goes on). A range
/// reply stops at the bound (the client asks on from there), and a lookup
/// bringing objects sends those past it as lengths.
#[test]
fn b_tree_requests_and_replies_larger_than_a_message_cross_in_several() {
    use cairn::tools::TreeOp;
    let dir = tempfile::tempdir().unwrap();
    let server = common::serve_with(&dir.path().join("db"), &[("CAIRN_TEST_BODY_MAX", "65536")]);
    let store = object_client(&server);
    let mut t = store.begin().unwrap();
    let root = t.tree_create(GroupId::DEFAULT, false).unwrap();
    // 1,200 entries of ~120 bytes: about 150 KiB, three messages at least.
    let ops: Vec<TreeOp> = (0..1200u32)
        .map(|k| TreeOp::Insert {
            key: k.to_be_bytes().to_vec(),
            value: vec![k as u8; 100],
        })
        .collect();
    let before = store.stats().round_trips;
    t.tree_apply(root, ops).unwrap();
    assert!(store.stats().round_trips - before >= 3, "split into several requests");
    let too_long = TreeOp::Insert {
        key: b"long".to_vec(),
        value: vec![0; 70_000],
    };
    assert!(matches!(
        t.tree_apply(root, vec![too_long]),
        Err(Error::LimitExceeded { .. })
    ));
    t.commit().unwrap();
    let mut t = store.begin().unwrap();
    let mut n = 0u32;
    t.tree_range(root, std::ops::Bound::Unbounded, std::ops::Bound::Unbounded, |k, v| {
        assert_eq!(k, n.to_be_bytes(), "in order");
        assert_eq!(v, vec![n as u8; 100]);
        n += 1;
        true
    })
    .unwrap();
    assert_eq!(n, 1200);
    t.commit().unwrap();

    // One key naming 60 objects of 2 KiB (120 KiB): the lookup that
    // brings the objects sends those past the message bound as lengths,
    // read when wanted; all values come.
    let mut t = store.begin().unwrap();
    let objs: Vec<Oid> = (0..60u8)
        .map(|i| t.create(GroupId::DEFAULT, None, &[i; 2048]).unwrap())
        .collect();
    let ops = objs
        .iter()
        .map(|o| TreeOp::Insert {
            key: b"many".to_vec(),
            value: o.to_bytes().to_vec(),
        })
        .collect();
    t.tree_apply(root, ops).unwrap();
    t.commit().unwrap();
    let reader = object_client(&server);
    let mut t = reader.begin().unwrap();
    let values = t.tree_get_objects(root, b"many", 100).unwrap();
    assert_eq!(values.len(), 60);
    for (i, v) in values.iter().enumerate() {
        let o = Oid::from_exact(v).unwrap();
        let at = objs.iter().position(|x| *x == o).unwrap();
        assert_eq!(t.read(o).unwrap(), vec![at as u8; 2048], "object {i}");
    }
    t.commit().unwrap();
    drop((store, reader));
    server.stop();
}
