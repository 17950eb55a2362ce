//! Every lock that lets a transaction change a page passes the write-lock
//! hook (`Db::set_write_lock_hook`), the server's one place to call a page
//! back from the clients caching it. A path around it leaves a cached copy
//! stale: placing a record on a page that has room (`try_insert_page`)
//! took its X straight from the lock manager, and a page client then
//! followed a forwarding stub into its old copy of the page ("forwarding
//! stub … points to …, which does not exist"); a page allocation did too.

use std::sync::{Arc, Mutex};

use cairn_storage::lock::{LockMode, Resource};
use cairn_storage::{Db, DbOptions, GroupId, PageId};

type Seen = Arc<Mutex<Vec<(Resource, LockMode, bool)>>>;

fn db_with_hook(dir: &std::path::Path, refuse_try: bool) -> (Db, Seen) {
    let opts = DbOptions {
        background: false,
        ..DbOptions::default()
    };
    let db = Db::create(dir, &opts).unwrap();
    let seen: Seen = Arc::default();
    let log = seen.clone();
    db.set_write_lock_hook(Box::new(move |_owner, res, mode, wait| {
        log.lock().unwrap().push((res, mode, wait));
        // A hook that may not wait says no: as a server does while a
        // client caches the page.
        Ok(if refuse_try && !wait { None } else { Some(None) })
    }))
    .unwrap();
    (db, seen)
}

fn x_on_pages(seen: &Seen) -> Vec<(PageId, bool)> {
    seen.lock()
        .unwrap()
        .iter()
        .filter_map(|(res, mode, wait)| match (res, mode) {
            (Resource::Page(p), LockMode::X) => Some((*p, *wait)),
            _ => None,
        })
        .collect()
}

#[test]
fn placing_a_record_on_a_page_with_room_and_allocating_a_page_pass_the_hook() {
    let dir = tempfile::tempdir().unwrap();
    let (db, seen) = db_with_hook(dir.path(), false);
    let mut t = db.begin().unwrap();
    let first = t.create(GroupId::DEFAULT, &[1u8; 100]).unwrap();
    t.commit().unwrap();
    let allocated = x_on_pages(&seen);
    assert!(
        allocated.iter().any(|&(p, wait)| p == first.page && wait),
        "the page allocated for the first record passed the hook: {allocated:?}"
    );
    seen.lock().unwrap().clear();
    // A second transaction puts a record near the first, on the same page
    // (it has room): a try-lock X, asked of the hook without waiting.
    let mut t = db.begin().unwrap();
    let second = t.create_near(first, &[2u8; 100]).unwrap();
    t.commit().unwrap();
    assert_eq!(second.page, first.page, "the page with room was used");
    let placed = x_on_pages(&seen);
    assert!(
        placed.iter().any(|&(p, wait)| p == first.page && !wait),
        "placing the record on page {} passed the hook: {placed:?}",
        first.page
    );
}

#[test]
fn a_page_the_hook_refuses_without_waiting_is_not_used_for_a_new_record() {
    let dir = tempfile::tempdir().unwrap();
    let (db, _seen) = db_with_hook(dir.path(), true);
    let mut t = db.begin().unwrap();
    let first = t.create(GroupId::DEFAULT, &[1u8; 100]).unwrap();
    t.commit().unwrap();
    // Someone caches that page: the hook refuses a try-lock on it, so the
    // record goes elsewhere instead of changing a page cached elsewhere.
    let mut t = db.begin().unwrap();
    let second = t.create_near(first, &[2u8; 100]).unwrap();
    t.commit().unwrap();
    assert_ne!(second.page, first.page);
    let mut t = db.begin().unwrap();
    assert_eq!(t.read(first).unwrap(), vec![1u8; 100]);
    assert_eq!(t.read(second).unwrap(), vec![2u8; 100]);
    t.commit().unwrap();
}

/// A record placed near another goes first to a page of the clustering
/// region the transaction holds X on already (nothing to ask), and only
/// then are the other candidates tried: here the page just past the near
/// one has room too, but is never asked for.
#[test]
fn a_record_goes_first_to_a_page_of_its_region_the_transaction_holds() {
    let dir = tempfile::tempdir().unwrap();
    let (db, seen) = db_with_hook(dir.path(), false);
    // Twelve records of 1,000 bytes: four to a page, three pages.
    let mut t = db.begin().unwrap();
    let oids: Vec<_> = (0..12u8)
        .map(|i| t.create(GroupId::DEFAULT, &[i; 1000]).unwrap())
        .collect();
    t.commit().unwrap();
    let pages: Vec<PageId> = oids.iter().map(|o| o.page).collect();
    let (p0, p1, p2) = (pages[0], pages[4], pages[8]);
    assert!(
        p0 < p1 && p1 < p2 && p2.0 - p0.0 <= 4,
        "three pages in one region: {pages:?}"
    );
    // Room on the second and third pages.
    let mut t = db.begin().unwrap();
    for &o in [&oids[4], &oids[8]] {
        t.delete(o).unwrap();
    }
    t.commit().unwrap();

    let mut t = db.begin().unwrap();
    // X on the third page: the transaction changes a record there.
    t.update(oids[9], &[99; 1000]).unwrap();
    seen.lock().unwrap().clear();
    let placed = t.create_near(oids[0], &[7; 1000]).unwrap();
    let asked = x_on_pages(&seen);
    t.commit().unwrap();
    assert_eq!(placed.page, p2, "the held page with room was used");
    assert!(
        !asked.iter().any(|&(p, _)| p == p1),
        "page {p1}, not held, was asked for before the held page {p2}: {asked:?}"
    );
    let mut t = db.begin().unwrap();
    assert_eq!(t.read(placed).unwrap(), vec![7; 1000]);
    assert_eq!(t.read(oids[9]).unwrap(), vec![99; 1000]);
    t.commit().unwrap();
}
