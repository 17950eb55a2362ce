//! The typed API with object-level locking (`DbOptions::object_locking`,
//! embedded): two transactions change different objects of one page at the
//! same time and both commit; with page locking the second waits for the
//! first. (The whole typed suite also runs this way: `tests/common`,
//! `Backend::EmbeddedObjectLocks`.)

use std::time::{Duration, Instant};

use cairn::{Database, Error, Options, Persistent, Ref};

#[derive(Persistent, Debug, Clone, PartialEq)]
struct Counter {
    n: i64,
}

fn open(dir: &std::path::Path, object_locking: bool) -> Database {
    let mut o = Options::default();
    o.storage.background = false;
    o.storage.lock_timeout = Duration::from_millis(300);
    o.storage.object_locking = object_locking;
    Database::open_with(dir, o).unwrap()
}

fn two_on_one_page(db: &Database) -> (Ref<Counter>, Ref<Counter>) {
    let mut tx = db.begin().unwrap();
    let a = tx.create(Counter { n: 0 }).unwrap();
    let b = tx.create(Counter { n: 0 }).unwrap();
    tx.commit().unwrap();
    assert_eq!(a.oid().page, b.oid().page, "both on one page");
    (a, b)
}

#[test]
fn object_locks_let_two_transactions_change_one_page_page_locks_make_one_wait() {
    for object_locking in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let db = open(dir.path(), object_locking);
        let (a, b) = two_on_one_page(&db);
        let mut first = db.begin().unwrap();
        first.update(&a, |c| c.n = 1).unwrap();
        let started = Instant::now();
        let mut second = db.begin().unwrap();
        let r = second.update(&b, |c| c.n = 2);
        if object_locking {
            r.unwrap();
            second.commit().unwrap();
            assert!(started.elapsed() < Duration::from_millis(300), "it did not wait");
        } else {
            assert!(matches!(r, Err(Error::LockTimeout { .. })), "{r:?}");
            drop(second);
        }
        first.commit().unwrap();
        let mut tx = db.begin().unwrap();
        assert_eq!(tx.get(&a).unwrap().n, 1);
        assert_eq!(tx.get(&b).unwrap().n, if object_locking { 2 } else { 0 });
        // Each sees the other's committed change in a later transaction,
        // from the object cache too (the writer dropped the copies).
        assert_eq!(tx.view(&b).unwrap().get().n(), if object_locking { 2 } else { 0 });
        tx.commit().unwrap();
        db.close().unwrap();
    }
}
