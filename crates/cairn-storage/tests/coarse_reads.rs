//! Coarse reads under object-level locking (`txn/objects.rs`): a read takes
//! S on the object's page while nobody writes there — one lock for all the
//! page's objects — and a transaction about to change an object of such a
//! page first locks what it read there object by object and lowers the
//! page's lock to IS, so object-level writers of one page still do not
//! wait for each other. A page locked S for a page-level read (a scan) is
//! never lowered.

use std::sync::{Arc, Barrier};
use std::time::Duration;

use cairn_storage::btree::BTree;
use cairn_storage::lock::{LockMode, Resource};
use cairn_storage::{Db, DbOptions, GroupId, Oid, Txn};

fn open(dir: &tempfile::TempDir) -> Db {
    let o = DbOptions {
        // A wait that should never happen fails the test instead of hanging.
        lock_timeout: Duration::from_secs(20),
        background: false,
        object_locking: true,
        ..DbOptions::default()
    };
    Db::create(&dir.path().join("db"), &o).unwrap()
}

/// `n` objects of 100 bytes, created in one transaction: one page.
fn seed(db: &Db, n: usize) -> Vec<Oid> {
    let mut t = db.begin().unwrap();
    t.set_object_locking(false).unwrap();
    let oids: Vec<Oid> = (0..n)
        .map(|i| t.create(GroupId::DEFAULT, &[i as u8; 100]).unwrap())
        .collect();
    t.commit().unwrap();
    assert!(oids.iter().all(|o| o.page == oids[0].page), "one page: {oids:?}");
    oids
}

fn holds(db: &Db, t: &Txn, res: Resource, mode: LockMode) -> bool {
    db.holds_lock(t.owner(), &res, mode)
}

#[test]
fn a_reader_locks_the_page_once_for_all_its_objects() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir);
    let oids = seed(&db, 5);
    let page = Resource::Page(oids[0].page);

    let mut t1 = db.begin().unwrap();
    let before = db.stats().locks.requests;
    for &o in &oids[..4] {
        assert_eq!(t1.read(o).unwrap().len(), 100);
    }
    assert_eq!(db.stats().locks.requests - before, 1, "one request: S on the page");
    assert!(holds(&db, &t1, page, LockMode::S));
    assert!(!holds(&db, &t1, Resource::Object(oids[0]), LockMode::S));
    assert!(
        t1.holds_lock(Resource::Object(oids[0]), LockMode::S),
        "the page's S covers its objects"
    );

    // A writer of another object of the page meets the reader's S.
    let mut t2 = db.begin().unwrap();
    assert!(!t2.try_lock_resource(page, LockMode::IX).unwrap());
    t1.commit().unwrap();
    t2.update(oids[4], &[9u8; 100]).unwrap();
    t2.commit().unwrap();
}

#[test]
fn a_reader_that_writes_on_the_page_locks_what_it_read_object_by_object() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir);
    let oids = seed(&db, 5);
    let (a, b, c, d) = (oids[0], oids[1], oids[2], oids[3]);
    let page = Resource::Page(a.page);

    let mut t1 = db.begin().unwrap();
    t1.read(a).unwrap();
    t1.read(b).unwrap();
    t1.read(a).unwrap();
    t1.update(c, &[1u8; 100]).unwrap();
    assert_eq!(db.stats().de_escalations, 1);
    assert!(holds(&db, &t1, page, LockMode::IX) && !holds(&db, &t1, page, LockMode::S));
    for o in [a, b] {
        assert!(
            holds(&db, &t1, Resource::Object(o), LockMode::S),
            "{o} read, so locked S"
        );
        assert!(!holds(&db, &t1, Resource::Object(o), LockMode::X));
    }
    assert!(holds(&db, &t1, Resource::Object(c), LockMode::X));

    // Another transaction changes a fourth object of the page at once, but
    // not one that t1 read.
    let mut t2 = db.begin().unwrap();
    t2.update(d, &[2u8; 100]).unwrap();
    assert!(!t2.try_lock_resource(Resource::Object(a), LockMode::X).unwrap());
    t2.commit().unwrap();
    t1.commit().unwrap();

    let mut t = db.begin().unwrap();
    assert_eq!(t.read(c).unwrap(), vec![1u8; 100]);
    assert_eq!(t.read(d).unwrap(), vec![2u8; 100]);
    t.commit().unwrap();
}

#[test]
fn two_readers_of_a_page_that_then_change_it_both_commit() {
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(open(&dir));
    let oids = seed(&db, 4);
    // Both read the page first (each holding S on it for its reads) ...
    let mut t1 = db.begin().unwrap();
    let mut t2 = db.begin().unwrap();
    t1.read(oids[0]).unwrap();
    t2.read(oids[1]).unwrap();
    // ... then change one object each, at the same time: each waits for
    // the other's S until the other lowers it (without that, a deadlock).
    let barrier = Arc::new(Barrier::new(2));
    let run = |mut t: Txn, target: Oid, byte: u8, barrier: Arc<Barrier>| {
        std::thread::spawn(move || {
            barrier.wait();
            t.update(target, &[byte; 100])?;
            t.commit()
        })
    };
    let h1 = run(t1, oids[2], 7, barrier.clone());
    let h2 = run(t2, oids[3], 8, barrier);
    h1.join().unwrap().unwrap();
    h2.join().unwrap().unwrap();
    assert_eq!(db.stats().locks.deadlocks, 0);
    assert_eq!(db.stats().de_escalations, 2);
}

#[test]
fn a_page_scanned_is_never_lowered() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir);
    let oids = seed(&db, 4);
    let page = Resource::Page(oids[0].page);

    let mut t1 = db.begin().unwrap();
    t1.read(oids[0]).unwrap();
    let mut seen = 0;
    t1.page_objects(oids[0].page, |_, _| seen += 1).unwrap();
    assert_eq!(seen, 4);
    t1.update(oids[1], &[3u8; 100]).unwrap();
    assert_eq!(db.stats().de_escalations, 0);
    // Still S on the page (SIX with the change's IX): nothing can appear in
    // or vanish from what the scan read.
    assert!(holds(&db, &t1, page, LockMode::S) && holds(&db, &t1, page, LockMode::IX));
    let mut t2 = db.begin().unwrap();
    assert!(!t2.try_lock_resource(page, LockMode::IX).unwrap());
    t1.commit().unwrap();
    t2.abort().unwrap();
}

#[test]
fn a_read_beside_a_writer_locks_the_object_alone() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir);
    let oids = seed(&db, 3);
    let page = Resource::Page(oids[0].page);

    let mut writer = db.begin().unwrap();
    writer.update(oids[2], &[4u8; 100]).unwrap();
    let mut reader = db.begin().unwrap();
    assert_eq!(reader.read(oids[0]).unwrap(), vec![0u8; 100]);
    assert!(holds(&db, &reader, page, LockMode::IS) && !holds(&db, &reader, page, LockMode::S));
    assert!(holds(&db, &reader, Resource::Object(oids[0]), LockMode::S));
    // Both go on: the writer changes another object the reader did not read.
    writer.update(oids[1], &[5u8; 100]).unwrap();
    writer.commit().unwrap();
    reader.commit().unwrap();
}

#[test]
fn transactions_may_turn_coarse_reads_off() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir);
    let oids = seed(&db, 2);
    let mut t = db.begin().unwrap();
    t.set_coarse_reads(false);
    t.read(oids[0]).unwrap();
    assert!(holds(&db, &t, Resource::Page(oids[0].page), LockMode::IS));
    assert!(!holds(&db, &t, Resource::Page(oids[0].page), LockMode::S));
    assert!(holds(&db, &t, Resource::Object(oids[0]), LockMode::S));
    t.commit().unwrap();
}

fn key_range_db(dir: &tempfile::TempDir) -> Db {
    let o = DbOptions {
        lock_timeout: Duration::from_secs(20),
        background: false,
        object_locking: true,
        key_range_locking: true,
        ..DbOptions::default()
    };
    Db::create(&dir.path().join("db"), &o).unwrap()
}

fn key(n: u32) -> Vec<u8> {
    n.to_be_bytes().to_vec()
}

/// A committed unique tree holding `keys` (value = key).
fn tree_with(db: &Db, keys: impl IntoIterator<Item = u32>) -> BTree {
    let mut t = db.begin().unwrap();
    let tree = BTree::create(&mut t, GroupId::DEFAULT, true).unwrap();
    for k in keys {
        t.tree_insert(&tree, &key(k), &key(k)).unwrap();
    }
    t.commit().unwrap();
    tree
}

#[test]
fn lookups_in_a_tree_nobody_changes_take_one_lock() {
    let dir = tempfile::tempdir().unwrap();
    let db = key_range_db(&dir);
    let tree = tree_with(&db, (0..100).map(|k| k * 10));
    let whole = Resource::Tree(tree.root());

    let mut reader = db.begin().unwrap();
    let before = db.stats().locks.requests;
    for k in [10, 20, 25, 500, 990] {
        let found = reader.tree_get(&tree, &key(k)).unwrap();
        assert_eq!(found.is_some(), k % 10 == 0, "{k}");
    }
    assert_eq!(db.stats().locks.requests - before, 1, "one request: S on the tree");
    assert!(holds(&db, &reader, whole, LockMode::S));
    // An insert anywhere meets the reader's S until it ends.
    let mut w = db.begin().unwrap();
    assert!(!w.try_lock_resource(whole, LockMode::IX).unwrap());
    reader.commit().unwrap();
    assert!(w.tree_insert(&tree, &key(15), b"x").unwrap());
    w.commit().unwrap();
}

#[test]
fn a_reader_that_changes_the_tree_locks_what_it_read_key_by_key() {
    let dir = tempfile::tempdir().unwrap();
    let db = key_range_db(&dir);
    let tree = tree_with(&db, (0..100).map(|k| k * 10));
    let whole = Resource::Tree(tree.root());

    let mut t1 = db.begin().unwrap();
    assert!(t1.tree_get(&tree, &key(200)).unwrap().is_some());
    assert!(t1.tree_get(&tree, &key(305)).unwrap().is_none());
    assert!(t1.tree_insert(&tree, &key(995), b"x").unwrap());
    assert!(holds(&db, &t1, whole, LockMode::IX) && !holds(&db, &t1, whole, LockMode::S));
    // What it read is locked key by key: the entry 200 (the gap below it)
    // and the gap 305 fell in (below 310).
    for (k, v) in [(200, key(200)), (310, key(310))] {
        let gap = t1.tree_gap_below(&tree, &key(k), &v).unwrap();
        assert!(holds(&db, &t1, gap, LockMode::S), "the gap below {k}");
    }
    // Others insert beside it at once, but not into what it read.
    let mut t2 = db.begin().unwrap();
    assert!(t2.tree_insert(&tree, &key(505), b"y").unwrap());
    let gap = t2.tree_gap_below(&tree, &key(310), &key(310)).unwrap();
    assert!(!t2.try_lock_resource(gap, LockMode::IX).unwrap());
    t2.commit().unwrap();
    t1.commit().unwrap();
}

/// A transaction about to wait for a lock lowers its coarse locks first,
/// so a writer never waits for a transaction that itself waits.
#[test]
fn a_transaction_that_waits_holds_no_coarse_lock() {
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(key_range_db(&dir));
    let tree = tree_with(&db, (0..10).map(|k| k * 10));
    let oids = seed(&db, 3);
    let whole = Resource::Tree(tree.root());
    let page = Resource::Page(oids[0].page);

    let mut holder = db.begin().unwrap();
    holder.update(oids[2], &[6u8; 100]).unwrap();

    let mut t1 = db.begin().unwrap();
    t1.tree_get(&tree, &key(30)).unwrap();
    let owner = t1.owner();
    assert!(holds(&db, &t1, whole, LockMode::S));
    // IX on the page is held by `holder`: t1 reads oids[0] object by
    // object; then it wants the object `holder` changes, and waits.
    t1.read(oids[0]).unwrap();
    let waiter = std::thread::spawn(move || {
        let r = t1.read(oids[2]);
        (t1, r)
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while db.holds_lock(owner, &whole, LockMode::S) {
        assert!(std::time::Instant::now() < deadline, "t1 never lowered the tree's S");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(db.holds_lock(owner, &whole, LockMode::IS));
    assert!(db.holds_lock(owner, &page, LockMode::IS));
    // An insert into the tree goes on while t1 waits.
    let mut w = db.begin().unwrap();
    assert!(w.tree_insert(&tree, &key(55), b"x").unwrap());
    w.commit().unwrap();
    holder.commit().unwrap();
    let (t1, r) = waiter.join().unwrap();
    assert_eq!(r.unwrap(), vec![6u8; 100]);
    t1.commit().unwrap();
}
