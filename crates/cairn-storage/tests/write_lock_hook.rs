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
