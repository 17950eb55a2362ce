//! Tests that drive a commit's phases one at a time.

use std::sync::Arc;

use super::{Db, DbOptions};
use crate::ids::GroupId;
use crate::io::OsVfs;
use crate::volume::VolumeOptions;

fn opts() -> DbOptions {
    DbOptions {
        volume: VolumeOptions {
            vfs: Arc::new(OsVfs),
            ..VolumeOptions::default()
        },
        background: false,
        ..DbOptions::default()
    }
}

/// Defect 8: a checkpoint between a commit and its deferred frees moves the
/// redo LSN past the COMMIT that names the pages to free. The checkpoint
/// must record them, or a crash before the FREE actions leaks the pages.
#[test]
fn deferred_frees_survive_a_checkpoint_between_the_commit_and_the_frees() {
    let dir = tempfile::tempdir().unwrap();
    // The control: the same delete, committed normally.
    let db = Db::create(&dir.path().join("control"), &opts()).unwrap();
    let mut t = db.begin().unwrap();
    let big = t.create(GroupId::DEFAULT, &vec![5u8; 100_000]).unwrap();
    t.commit().unwrap();
    let used_full = db.groups()[0].pages_used;
    let mut t = db.begin().unwrap();
    t.delete(big).unwrap();
    t.commit().unwrap();
    let used_after_delete = db.groups()[0].pages_used;
    assert!(used_full > used_after_delete + 20);
    db.close().unwrap();

    let path = dir.path().join("db");
    let db = Db::create(&path, &opts()).unwrap();
    let mut t = db.begin().unwrap();
    let big = t.create(GroupId::DEFAULT, &vec![5u8; 100_000]).unwrap();
    t.commit().unwrap();

    let mut t = db.begin().unwrap();
    t.delete(big).unwrap();
    assert!(!t.to_free.is_empty(), "deleting a large object defers frees");
    let shared = db.shared.clone();
    let (lsns, commit_lsn) = shared.append_records(&mut t).unwrap();
    shared.make_durable_and_install(&mut t, &lsns, commit_lsn).unwrap();
    // The checkpoint falls here, before the FREE actions...
    db.checkpoint().unwrap();
    // ...and the process dies before they run.
    t.to_free.clear();
    t.finish();
    db.crash();

    let db = Db::open(&path, &opts()).unwrap();
    assert_eq!(
        db.groups()[0].pages_used,
        used_after_delete,
        "the deleted object's pages were given back: {:?}",
        db.recovery()
    );
    let mut t = db.begin().unwrap();
    assert!(matches!(t.read(big), Err(crate::Error::NotFound { .. })));
    t.commit().unwrap();
    db.close().unwrap();
    let report = crate::check::check_database(&path, &VolumeOptions::default());
    assert!(report.is_ok(), "{:?}", report.problems);
}
