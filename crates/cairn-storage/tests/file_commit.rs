//! The server's half of a file-server commit (`txn/unwritten.rs`): logged
//! and durable without being installed, the locks held until the client
//! reports its pages written; a client that never does has its pages
//! repaired from the after-images; a checkpoint taken in between keeps the
//! log that rebuilds them after a crash.

mod common;

use std::os::unix::fs::FileExt;
use std::path::Path;

use cairn_storage::check::check_database;
use cairn_storage::lock::{LockMode, Resource};
use cairn_storage::page;
use cairn_storage::volume::manifest::VOLUME_FILE;
use cairn_storage::volume::VolumeOptions;
use cairn_storage::wal::redo;
use cairn_storage::{Db, DbOptions, Error, GroupId, Oid, Txn, Unwritten};

/// [`common::opts`] with a 200 ms lock timeout: a request that waits for
/// a lock the test holds fails soon.
fn short_lock_timeout_opts() -> DbOptions {
    DbOptions {
        lock_timeout: std::time::Duration::from_millis(200),
        ..common::opts()
    }
}

fn seed(db: &Db) -> Oid {
    let mut t = db.begin().unwrap();
    let oid = t.create(GroupId::DEFAULT, b"before").unwrap();
    t.commit().unwrap();
    db.checkpoint().unwrap();
    oid
}

/// What a file-server client does before its COMMIT: change the object in
/// a transaction of its own and send its changed pages as full images.
/// Returns the transaction and the records.
fn change(db: &Db, oid: Oid, data: &[u8]) -> (Txn, Vec<Vec<u8>>) {
    let mut t = db.begin().unwrap();
    t.update(oid, data).unwrap();
    let id = t.id();
    let records = t
        .changed_pages()
        .into_iter()
        .map(|p| redo::page_record(id, p, None, t.private_page(p).unwrap().unwrap()))
        .collect();
    (t, records)
}

fn commit(db: &Db, oid: Oid, data: &[u8]) -> Unwritten {
    let (t, records) = change(db, oid, data);
    let id = t.id();
    let refs: Vec<&[u8]> = records.iter().map(|r| &r[..]).collect();
    db.commit_unwritten(t, &refs, id).unwrap()
}

/// The client's half: stamp, seal, write and sync each page.
fn write_pages(dir: &Path, db: &Db, u: &Unwritten, data_of: impl Fn(&mut Vec<u8>)) {
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.join(VOLUME_FILE))
        .unwrap();
    let page_size = db.header().page_size as u64;
    for &(p, lsn) in u.lsns() {
        let mut image = db.read_committed(p).unwrap();
        data_of(&mut image);
        page::set_lsn(&mut image, lsn);
        page::seal(&mut image);
        f.write_all_at(&image, u64::from(p.0) * page_size).unwrap();
    }
    f.sync_data().unwrap();
}

fn read(db: &Db, oid: Oid) -> Vec<u8> {
    let mut t = db.begin().unwrap();
    let v = t.read(oid).unwrap();
    t.commit().unwrap();
    v
}

#[test]
fn the_locks_stay_until_the_pages_are_written() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::create(dir.path(), &short_lock_timeout_opts()).unwrap();
    let oid = seed(&db);
    let (t, records) = change(&db, oid, b"after!");
    let id = t.id();
    // The server's copy of the committed page before the commit.
    let before = db.read_committed(oid.page).unwrap();
    let refs: Vec<&[u8]> = records.iter().map(|r| &r[..]).collect();
    let u = db.commit_unwritten(t, &refs, id).unwrap();
    assert_eq!(u.lsns().len(), 1);
    assert_eq!(u.lsns()[0].0, oid.page);
    // Logged, not installed: the server's pool still has the old image.
    assert_eq!(db.read_committed(oid.page).unwrap(), before);
    // Another transaction cannot read the page while it is unwritten.
    let mut other = db.begin().unwrap();
    match other.lock_resource(Resource::Page(oid.page), LockMode::S) {
        Err(Error::LockTimeout { .. }) => {}
        r => panic!("the page should stay locked until written: {r:?}"),
    }
    drop(other);
    // The client writes the after-image (here: the records applied).
    let after = {
        let mut img = vec![0u8; before.len()];
        let redo::Redo::Page { runs, .. } = redo::Redo::decode(&records[0], cairn_storage::Lsn(0)).unwrap() else {
            panic!("a PAGE record")
        };
        redo::apply(&mut img, oid.page, true, &runs, cairn_storage::Lsn(0)).unwrap();
        img
    };
    write_pages(dir.path(), &db, &u, |img| img.copy_from_slice(&after));
    u.written().unwrap();
    assert_eq!(read(&db, oid), b"after!");
    assert_eq!(db.stats().pages_repaired, 0);
    db.close().unwrap();
    let report = check_database(dir.path(), &VolumeOptions::default());
    assert!(report.is_ok(), "{:?}", report.problems);
}

#[test]
fn a_client_that_never_writes_has_its_pages_repaired() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::create(dir.path(), &short_lock_timeout_opts()).unwrap();
    let oid = seed(&db);
    let u = commit(&db, oid, b"repair me");
    // The session ends without WRITTEN.
    drop(u);
    assert_eq!(db.stats().pages_repaired, 1);
    assert_eq!(read(&db, oid), b"repair me");
    db.close().unwrap();
    let db = Db::open(dir.path(), &short_lock_timeout_opts()).unwrap();
    assert_eq!(read(&db, oid), b"repair me");
    db.close().unwrap();
}

#[test]
fn a_checkpoint_keeps_the_log_of_unwritten_pages_across_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::create(dir.path(), &short_lock_timeout_opts()).unwrap();
    let oid = seed(&db);
    let u = commit(&db, oid, b"from the log");
    // A checkpoint now must not move redo past the commit: nothing but the
    // log has its page.
    db.checkpoint().unwrap();
    // Both die: neither the client's write nor the server's repair happens.
    std::mem::forget(u);
    db.crash();
    let db = Db::open(dir.path(), &short_lock_timeout_opts()).unwrap();
    assert_eq!(read(&db, oid), b"from the log");
    db.close().unwrap();
    let report = check_database(dir.path(), &VolumeOptions::default());
    assert!(report.is_ok(), "{:?}", report.problems);
}

#[test]
fn records_that_are_not_full_images_of_locked_pages_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::create(dir.path(), &short_lock_timeout_opts()).unwrap();
    let oid = seed(&db);
    // A diff record.
    let (mut t, _) = change(&db, oid, b"diff");
    let id = t.id();
    let base = db.read_committed(oid.page).unwrap();
    let diff = redo::page_record(id, oid.page, Some(&base), t.private_page(oid.page).unwrap().unwrap());
    let e = db.commit_unwritten(t, &[&diff], id).unwrap_err();
    assert!(e.to_string().contains("full page images"), "{e}");
    // A page the transaction did not lock.
    let mut t = db.begin().unwrap();
    let id = t.id();
    let img = db.read_committed(oid.page).unwrap();
    let rec = redo::page_record(id, oid.page, None, &img);
    t.read(oid).unwrap(); // S only
    let e = db.commit_unwritten(t, &[&rec], id).unwrap_err();
    assert!(e.to_string().contains("does not hold X"), "{e}");
    // A record naming another transaction.
    let (t, records) = change(&db, oid, b"other");
    let e = db
        .commit_unwritten(t, &[&records[0]], cairn_storage::TxnId(id.0 + 1000))
        .unwrap_err();
    assert!(e.to_string().contains("names"), "{e}");
    // Nothing of them was committed.
    assert_eq!(read(&db, oid), b"before");
    db.close().unwrap();
}

/// A file-server commit that frees a page lets it go only once its pages
/// are written and it is no longer in flight: a snapshot that begins in
/// between does not see the commit, so the page must keep its last image
/// for it — the page allocated and formatted again meanwhile, with a log
/// record the snapshot sees, would put an empty page in its place.
#[test]
fn a_page_a_file_commit_frees_keeps_its_image_for_a_snapshot_begun_before_it_is_written() {
    use cairn_storage::access::PageAccess;
    use cairn_storage::page::PageType;
    let dir = tempfile::tempdir().unwrap();
    let db = Db::create(dir.path(), &short_lock_timeout_opts()).unwrap();
    let group = db.create_group("freed").unwrap();
    let mut t = db.begin().unwrap();
    let oid = t.create(group, b"on the page freed").unwrap();
    t.commit().unwrap();
    let p = oid.page;
    // The file-server commit frees the object's page (no page to write).
    let mut t = db.begin().unwrap();
    PageAccess::free(&mut t, p).unwrap();
    let id = t.id();
    let u = db.commit_unwritten(t, &[], id).unwrap();
    assert!(u.lsns().is_empty());
    // Another transaction allocates a page of the group next to it. Had
    // the page been let go already, it would be this one, formatted anew
    // (its lock then waits for the unwritten commit, in vain).
    let mut other = db.begin().unwrap();
    let got = PageAccess::allocate(&mut other, group, Some(p), PageType::Slotted);
    drop(other);
    // A snapshot begun now does not see the commit: the object is there.
    let mut snap = db.begin_read_only().unwrap();
    assert_eq!(snap.read(oid).unwrap(), b"on the page freed");
    assert!(
        got.is_ok_and(|q| q != p),
        "the page freed by a commit in flight was allocated again"
    );
    u.written().unwrap();
    assert_eq!(snap.read(oid).unwrap(), b"on the page freed");
    drop(snap);
    // Written, the commit has let the page go: it is the one allocated now.
    let mut t = db.begin().unwrap();
    assert_eq!(
        PageAccess::allocate(&mut t, group, Some(p), PageType::Slotted).unwrap(),
        p
    );
    t.commit().unwrap();
    db.close().unwrap();
    let report = check_database(dir.path(), &VolumeOptions::default());
    assert!(report.is_ok(), "{:?}", report.problems);
}
