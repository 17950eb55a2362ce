//! The typed API with object-level locking (`DbOptions::object_locking`,
//! embedded): two transactions change different objects of one page at the
//! same time and both commit; with page locking the second waits for the
//! first; views read objects in place in page images checked against the
//! page's committed LSN. (The whole typed suite also runs this way:
//! `tests/common`, `Backend::EmbeddedObjectLocks`.)

use std::time::Duration;

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
        let mut second = db.begin().unwrap();
        let r = second.update(&b, |c| c.n = 2);
        if object_locking {
            // Done while `first` is open: it did not wait for it (a wait
            // would have ended in the 300 ms lock timeout, an error here).
            r.unwrap();
            second.commit().unwrap();
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

/// Under object-level locking views read objects in place in the page
/// images the dual buffer keeps, but only in an image whose LSN is still
/// the page's committed one: a reader faults a page's image while another
/// transaction holds X on another object of the page and commits it after
/// the image was read, so the image lacks that commit; a later reader of
/// the changed object must not read it there.
#[test]
fn a_page_image_read_before_another_objects_commit_is_not_read_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path(), true);
    let (a, b) = two_on_one_page(&db);
    // The writer changes b and holds X on it, not yet committed.
    let mut writer = db.begin().unwrap();
    writer.update(&b, |c| c.n = 7).unwrap();
    // Meanwhile a reader of a faults the page's image in (b still 0).
    let mut reader = db.begin().unwrap();
    assert_eq!(reader.view(&a).unwrap().get().n(), 0);
    reader.commit().unwrap();
    writer.commit().unwrap();
    // The image in the dual buffer is older than the page now.
    let mut tx = db.begin().unwrap();
    assert_eq!(tx.view(&b).unwrap().get().n(), 7);
    assert_eq!(tx.view(&a).unwrap().get().n(), 0);
    tx.commit().unwrap();
    let loads = db.cache_stats().image_loads;
    assert!(loads > 0, "views read objects in page images");
    // An image still current is read in place with no new load.
    let mut tx = db.begin().unwrap();
    assert_eq!(tx.view(&a).unwrap().get().n(), 0);
    assert_eq!(tx.view(&b).unwrap().get().n(), 7);
    tx.commit().unwrap();
    assert_eq!(
        db.cache_stats().image_loads,
        loads,
        "the current image was read in place"
    );
    db.close().unwrap();
}

/// The race the LSN check closes, run many times: a reader faults the
/// page's image in while a writer commits another object of the page (its
/// invalidation of the image can run before the reader's image lands in
/// the buffer); every later reader must still see every committed value.
#[test]
fn views_under_object_locks_see_every_commit_to_other_objects_of_their_page() {
    use std::sync::atomic::{AtomicI64, Ordering};
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(open(dir.path(), true));
    let (a, b) = two_on_one_page(&db);
    let committed = Arc::new(AtomicI64::new(0));
    let rounds: i64 = std::env::var("CAIRN_TEST_RACE_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400);
    let writer = {
        let (db, committed, b) = (db.clone(), committed.clone(), b.clone());
        std::thread::spawn(move || {
            for i in 1..=rounds {
                let mut tx = db.begin().unwrap();
                tx.update(&b, |c| c.n = i).unwrap();
                tx.commit().unwrap();
                committed.store(i, Ordering::SeqCst);
            }
        })
    };
    let mut last = 0;
    while last < rounds {
        // Fault the page's image in through a, racing the writer's commits.
        let mut tx = db.begin().unwrap();
        assert_eq!(tx.view(&a).unwrap().get().n(), 0);
        tx.commit().unwrap();
        let floor = committed.load(Ordering::SeqCst);
        let mut tx = db.begin().unwrap();
        let seen = tx.view(&b).unwrap().get().n();
        tx.commit().unwrap();
        assert!(seen >= floor, "read b = {seen} after {floor} was committed");
        last = floor;
    }
    writer.join().unwrap();
}

/// Two transactions that name the objects they will change, in opposite
/// orders, take their locks in one order (OID order) and never deadlock:
/// the second waits for the first at its prefetch, holding nothing. Made
/// one by one in their own orders, the changes would deadlock: the first
/// holds `a` and wants `b`, the second holds `b` and wants `a`. Under page
/// locking the two objects are put on different pages.
#[test]
fn prefetch_for_update_takes_its_locks_in_one_order_so_opposite_orders_do_not_deadlock() {
    for object_locking in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let db = std::sync::Arc::new(open(dir.path(), object_locking));
        let (a, b) = if object_locking {
            two_on_one_page(&db)
        } else {
            let mut tx = db.begin().unwrap();
            let a = tx.create(Counter { n: 0 }).unwrap();
            let mut b = tx.create(Counter { n: 0 }).unwrap();
            while b.oid().page == a.oid().page {
                b = tx.create(Counter { n: 0 }).unwrap();
            }
            tx.commit().unwrap();
            (a, b)
        };
        let waits = |db: &Database| db.storage().unwrap().stats().locks.waits;
        let mut first = db.begin().unwrap();
        first.prefetch_for_update([&a, &b]).unwrap();
        first.update(&a, |c| c.n += 1).unwrap();
        let before = waits(&db);
        let second = {
            let (db, a, b) = (db.clone(), a.clone(), b.clone());
            std::thread::spawn(move || {
                let mut tx = db.begin().unwrap();
                tx.prefetch_for_update([&b, &a])?;
                tx.update(&b, |c| c.n += 10)?;
                tx.update(&a, |c| c.n += 10)?;
                tx.commit()
            })
        };
        while waits(&db) == before && !second.is_finished() {
            std::thread::yield_now();
        }
        first.update(&b, |c| c.n += 1).unwrap();
        first.commit().unwrap();
        second
            .join()
            .unwrap()
            .expect("the second transaction commits too, no deadlock");
        let mut tx = db.begin().unwrap();
        assert_eq!(
            (tx.get(&a).unwrap().n, tx.get(&b).unwrap().n),
            (11, 11),
            "object locking {object_locking}"
        );
        tx.commit().unwrap();
    }
}
