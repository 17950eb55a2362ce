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
    let (lsns, commit_lsn) = shared.append_records(&mut t, Vec::new()).unwrap();
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

/// After a clean close the log is one short segment (the final checkpoint's
/// record), so opening reads next to nothing of it; the data is all there.
#[test]
fn a_clean_close_leaves_one_short_log_segment() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let db = Db::create(&path, &opts()).unwrap();
    let mut oids = Vec::new();
    for i in 0..50u8 {
        let mut t = db.begin().unwrap();
        oids.push(t.create(GroupId::DEFAULT, &vec![i; 3000]).unwrap());
        t.commit().unwrap();
    }
    let wal_dir = path.join(crate::wal::WAL_DIR);
    let log_bytes = |dir: &std::path::Path| -> (usize, u64) {
        let files: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
        let bytes = files.iter().map(|f| std::fs::metadata(f).unwrap().len()).sum();
        (files.len(), bytes)
    };
    let (_, before) = log_bytes(&wal_dir);
    assert!(before > 150_000, "the commits logged {before} bytes");
    db.close().unwrap();
    let (segments, after) = log_bytes(&wal_dir);
    assert_eq!(segments, 1, "one segment after a clean close");
    assert!(after < 4096, "the segment holds the checkpoint alone: {after} bytes");

    let db = Db::open(&path, &opts()).unwrap();
    let mut t = db.begin().unwrap();
    for (i, oid) in oids.iter().enumerate() {
        assert_eq!(t.read(*oid).unwrap(), vec![i as u8; 3000]);
    }
    t.commit().unwrap();
    db.close().unwrap();
}

/// A CHECKPOINT record proves the whole log before it durable
/// (`Redo::is_checkpoint`, the open rule): a damaged record before it is
/// damage, not a torn tail. So it must be appended only once everything
/// before it is durable, with no other append in between. Commits running
/// beside the checkpoint used to append between its flush and its record,
/// leaving unsynced bytes before it: a disk that wrote the checkpoint and
/// lost them made the next open refuse the log as corrupt. Every
/// checkpoint's `durable` field must be its own start.
#[test]
fn a_checkpoint_is_appended_only_after_the_log_before_it_is_durable() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let db = Db::create(&path, &opts()).unwrap();
    let done = std::sync::atomic::AtomicBool::new(false);
    let (mut checked, mut short) = (0, Vec::new());
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    let mut t = db.begin().unwrap();
                    t.create(GroupId::DEFAULT, &[7u8; 200]).unwrap();
                    t.commit().unwrap();
                }
            });
        }
        let mut seen = crate::ids::Lsn(0);
        for _ in 0..200 {
            db.checkpoint().unwrap();
            let wal = &db.shared.wal;
            let mut reader = wal.read_from(seen.max(wal.first_lsn())).unwrap();
            while let Some(r) = reader.next_with_durable() {
                let (lsn, durable, payload) = r.unwrap();
                seen = lsn;
                if crate::wal::redo::Redo::is_checkpoint(&payload) {
                    let start = lsn.0 - (crate::wal::format::RECORD_HEADER_SIZE + payload.len()) as u64;
                    checked += 1;
                    if durable.0 != start {
                        short.push((start, start - durable.0));
                    }
                }
            }
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    assert!(checked >= 200, "{checked} checkpoints read");
    assert!(
        short.is_empty(),
        "{} of {checked} checkpoints with unsynced bytes before them, first (start, bytes): {:?}",
        short.len(),
        &short[..short.len().min(5)]
    );
    db.close().unwrap();
}
