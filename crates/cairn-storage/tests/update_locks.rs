//! Locks for update taken together ([`Txn::lock_objects_for_update`]):
//! under page locking, X on the objects' home pages in page order, then X
//! on the pages of the moved objects' bodies, in page order too — not
//! each body read under S first and upgraded as a change reaches it,
//! which let two such transactions deadlock on a body's page.

mod common;

use cairn_storage::lock::{LockMode, Resource};
use cairn_storage::record::object::{slot_in, KIND_FORWARD};
use cairn_storage::{Db, GroupId, Oid};

#[test]
fn locks_for_update_take_the_pages_of_moved_bodies_too() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::create(&dir.path().join("db"), &common::opts()).unwrap();
    // A full page: objects until one lands on the next page.
    let mut t = db.begin().unwrap();
    let first = t.create(GroupId::DEFAULT, &[1u8; 400]).unwrap();
    while t.create(GroupId::DEFAULT, &[2u8; 400]).unwrap().page == first.page {}
    t.commit().unwrap();
    // Grown past the room its page has left, the first object moves.
    let mut t = db.begin().unwrap();
    t.update(first, &[3u8; 1_000]).unwrap();
    t.commit().unwrap();
    let home = db.read_committed(first.page).unwrap();
    let stub = slot_in(&home, first).unwrap().expect("the home slot");
    assert_eq!(stub.kind, KIND_FORWARD, "the object moved");
    let body: Oid = Oid::from_slice(stub.data).expect("a body's address");
    assert_ne!(body.page, first.page);

    let mut t = db.begin().unwrap();
    t.lock_objects_for_update(&[first]).unwrap();
    assert!(t.holds_lock(Resource::Page(first.page), LockMode::X), "the home page");
    assert!(
        t.holds_lock(Resource::Page(body.page), LockMode::X),
        "the body's page, before any change reads it"
    );
    t.update(first, &[4u8; 1_000]).unwrap();
    t.commit().unwrap();
    let mut t = db.begin().unwrap();
    assert_eq!(t.read(first).unwrap(), vec![4u8; 1_000]);
    t.commit().unwrap();
}
