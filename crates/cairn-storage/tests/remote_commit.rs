//! The server's side of a page-server client's transaction: pages fetched
//! under a lock, changed by "the client", shipped back as PAGE redo records,
//! verified, staged and committed by the one commit algorithm. A client's
//! record is refused unless the server can check it is the client's to make.

mod common;

use cairn_storage::lock::{LockMode, Resource};
use cairn_storage::wal::redo;
use cairn_storage::{Db, GroupId, Oid, PageId};
use common::opts;

/// A database holding one object of 100 bytes of 7s.
fn setup() -> (tempfile::TempDir, Db, Oid) {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::create(&dir.path().join("db"), &opts()).unwrap();
    let mut t = db.begin().unwrap();
    let oid = t.create(GroupId::DEFAULT, &[7u8; 100]).unwrap();
    t.commit().unwrap();
    (dir, db, oid)
}

/// What a client does to change the object in place: finds its bytes in
/// the page image and rewrites them.
fn client_change(page: &[u8], from: u8, to: u8) -> Vec<u8> {
    let mut after = page.to_vec();
    let at = after
        .windows(100)
        .position(|w| w.iter().all(|&b| b == from))
        .expect("the object's bytes are in its page");
    after[at..at + 100].fill(to);
    after
}

#[test]
fn a_clients_page_records_commit_like_an_embedded_transaction() {
    let (dir, db, oid) = setup();
    let mut t = db.begin().unwrap();
    let base = t.fetch_page(oid.page, true).unwrap();
    let after = client_change(&base, 7, 9);
    let rec = redo::page_record(t.id(), oid.page, Some(&base), &after);
    t.stage_redo(&[&rec], t.id()).unwrap();
    t.commit().unwrap();
    db.close().unwrap();
    let db = Db::open(&dir.path().join("db"), &opts()).unwrap();
    let mut t = db.begin().unwrap();
    assert_eq!(t.read(oid).unwrap(), vec![9u8; 100]);
}

#[test]
fn a_record_for_a_page_without_an_exclusive_lock_is_refused() {
    let (_dir, db, oid) = setup();
    let mut t = db.begin().unwrap();
    let base = t.fetch_page(oid.page, false).unwrap();
    let after = client_change(&base, 7, 9);
    let rec = redo::page_record(t.id(), oid.page, Some(&base), &after);
    let err = t.stage_redo(&[&rec], t.id()).unwrap_err();
    assert!(err.to_string().contains("does not hold X"), "{err}");
    t.abort().unwrap();
    let mut t = db.begin().unwrap();
    assert_eq!(t.read(oid).unwrap(), vec![7u8; 100], "nothing was staged");
}

#[test]
fn a_record_naming_another_transaction_is_refused() {
    let (_dir, db, oid) = setup();
    let mut t = db.begin().unwrap();
    let base = t.fetch_page(oid.page, true).unwrap();
    let after = client_change(&base, 7, 9);
    let other = cairn_storage::TxnId(t.id().0 + 1000);
    let rec = redo::page_record(other, oid.page, Some(&base), &after);
    let err = t.stage_redo(&[&rec], t.id()).unwrap_err();
    assert!(err.to_string().contains("names"), "{err}");
}

#[test]
fn a_record_changing_a_system_page_is_refused() {
    let (_dir, db, _oid) = setup();
    let mut t = db.begin().unwrap();
    // Page 1 is a space-map page: only the server's system actions change it.
    let base = t.fetch_page(PageId(1), true).unwrap();
    let mut after = base.clone();
    after[100] ^= 0xff;
    let rec = redo::page_record(t.id(), PageId(1), Some(&base), &after);
    let err = t.stage_redo(&[&rec], t.id()).unwrap_err();
    assert!(err.to_string().contains("may not change"), "{err}");
}

#[test]
fn a_record_turning_a_data_page_into_a_system_page_is_refused() {
    let (_dir, db, oid) = setup();
    let mut t = db.begin().unwrap();
    let base = t.fetch_page(oid.page, true).unwrap();
    let mut after = base.clone();
    cairn_storage::page::format(&mut after, oid.page, cairn_storage::page::PageType::SpaceMap);
    let rec = redo::page_record(t.id(), oid.page, Some(&base), &after);
    let err = t.stage_redo(&[&rec], t.id()).unwrap_err();
    assert!(err.to_string().contains("may not make"), "{err}");
}

#[test]
fn a_record_leaving_a_malformed_page_is_refused_and_nothing_of_the_batch_is_staged() {
    let (_dir, db, oid) = setup();
    let mut t = db.begin().unwrap();
    let base = t.fetch_page(oid.page, true).unwrap();
    let good = redo::page_record(t.id(), oid.page, Some(&base), &client_change(&base, 7, 9));
    // The slot count (just past the common page header) made absurd.
    let mut broken = base.clone();
    broken[24..26].copy_from_slice(&u16::MAX.to_le_bytes());
    let bad = redo::page_record(t.id(), oid.page, Some(&base), &broken);
    let err = t.stage_redo(&[&good, &bad], t.id()).unwrap_err();
    assert!(err.to_string().contains("malformed"), "{err}");
    t.commit().unwrap();
    let mut t = db.begin().unwrap();
    assert_eq!(t.read(oid).unwrap(), vec![7u8; 100], "nothing of the batch was staged");
}

#[test]
fn a_record_past_the_end_of_the_volume_or_garbage_is_refused() {
    let (_dir, db, _oid) = setup();
    let mut t = db.begin().unwrap();
    let id = t.id();
    assert!(t.fetch_page(PageId(1 << 30), false).is_err());
    let far = redo::page_record(id, PageId(1 << 30), None, &vec![1u8; 4096]);
    let invalid = |r: cairn_storage::Result<()>| match r {
        Err(cairn_storage::Error::InvalidArgument(m)) => m,
        other => panic!("expected InvalidArgument (the client's fault, never damage), got {other:?}"),
    };
    invalid(t.stage_redo(&[&far], t.id()));
    let m = invalid(t.stage_redo(&[b"\x01garbage"], t.id()));
    assert!(m.contains("does not decode"), "{m}");
    let commit = redo::Redo::Commit { txn: id, frees: vec![] }.encode();
    invalid(t.stage_redo(&[&commit], t.id()));
}

#[test]
fn a_record_whose_changes_run_past_its_page_is_invalid_not_corrupt() {
    let (_dir, db, oid) = setup();
    let mut t = db.begin().unwrap();
    let base = t.fetch_page(oid.page, true).unwrap();
    // A hand-made PAGE record with one run at offset 4090 of 100 bytes.
    let mut rec = redo::page_record(t.id(), oid.page, Some(&base), &client_change(&base, 7, 9));
    let good = redo::Redo::decode(&rec, cairn_storage::Lsn(0)).unwrap();
    let redo::Redo::Page { txn, page, .. } = good else {
        panic!("a PAGE record")
    };
    rec = redo::Redo::Page {
        txn,
        page,
        full: false,
        runs: vec![(4090, vec![1u8; 100])],
    }
    .encode();
    match t.stage_redo(&[&rec], t.id()) {
        Err(cairn_storage::Error::InvalidArgument(m)) => assert!(m.contains("do not apply"), "{m}"),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

#[test]
fn a_fetch_without_waiting_gives_up_on_a_conflicting_lock_or_an_uncached_page_and_otherwise_matches_fetch_page() {
    let (_dir, db, oid) = setup();
    let mut writer = db.begin().unwrap();
    writer.fetch_page(oid.page, true).unwrap();
    // An X held by another transaction: no image, and no lock taken.
    let mut reader = db.begin().unwrap();
    assert_eq!(reader.try_fetch_page(oid.page, false).unwrap(), None);
    writer.abort().unwrap();
    // Cached and free: the very image fetch_page gives (compared sealed: a
    // frame's checksum field is only meaningful once the image is sealed,
    // as the server does before it sends one).
    let sealed = |mut image: Vec<u8>| {
        cairn_storage::page::seal(&mut image);
        image
    };
    let fast = sealed(
        reader
            .try_fetch_page(oid.page, false)
            .unwrap()
            .expect("cached and lockable"),
    );
    assert!(fast == sealed(db.begin().unwrap().fetch_page(oid.page, false).unwrap()));
    // The S lock it took is held: a writer cannot have the page now.
    let mut other = db.begin().unwrap();
    let x = other.try_lock_resource(Resource::Page(oid.page), LockMode::X);
    assert!(!x.unwrap(), "the reader's S lock is held");
    reader.abort().unwrap();
    other.abort().unwrap();
    // For writing: not while another transaction reads the page; once it
    // has ended, the same image under an X lock that stays held.
    let mut reading = db.begin().unwrap();
    reading.fetch_page(oid.page, false).unwrap();
    let mut writing = db.begin().unwrap();
    assert_eq!(writing.try_fetch_page(oid.page, true).unwrap(), None);
    reading.abort().unwrap();
    let image = writing.try_fetch_page(oid.page, true).unwrap().expect("free now");
    assert!(sealed(image) == fast);
    let mut late = db.begin().unwrap();
    assert!(!late.try_lock_resource(Resource::Page(oid.page), LockMode::S).unwrap());
    writing.abort().unwrap();
    late.abort().unwrap();
    // Not in the buffer pool: it does not read the volume.
    db.evict_cache().unwrap();
    let mut cold = db.begin().unwrap();
    assert_eq!(cold.try_fetch_page(oid.page, false).unwrap(), None);
    assert!(sealed(cold.fetch_page(oid.page, false).unwrap()) == fast);
    // Past the end of the volume: an error naming the page, as fetch_page.
    let err = cold.try_fetch_page(PageId(1 << 30), false).unwrap_err();
    assert!(err.to_string().contains("past the end of the volume"), "{err}");
}
