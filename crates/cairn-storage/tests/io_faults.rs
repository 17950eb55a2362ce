//! Injected I/O failures: a write or fsync that fails — of the log during a
//! commit, of the volume during a checkpoint — makes the operation fail with
//! an error, the database refuses further work, and reopening it (recovery)
//! gives a consistent database with every acknowledged commit in it and the
//! failed one either wholly there or wholly absent.

use std::path::Path;
use std::sync::Arc;

use cairn_storage::check::check_database;
use cairn_storage::io::{FaultyVfs, FileOp, OsVfs};
use cairn_storage::volume::VolumeOptions;
use cairn_storage::{Db, DbOptions, Error, GroupId, Oid};

fn opts(vfs: Arc<FaultyVfs>) -> DbOptions {
    DbOptions {
        volume: VolumeOptions {
            buffer_frames: 16,
            vfs,
            ..VolumeOptions::default()
        },
        background: false,
        ..DbOptions::default()
    }
}

#[derive(Clone, Copy, Debug)]
enum Fault {
    LogWrite,
    LogSync,
    VolumeWrite,
    VolumeSync,
}

impl Fault {
    fn matches(self, op: FileOp, p: &Path) -> bool {
        let log = p.components().any(|c| c.as_os_str() == "wal");
        let vol = p.ends_with("volume.cairn");
        match self {
            Fault::LogWrite => log && op == FileOp::Write,
            Fault::LogSync => log && op == FileOp::Sync,
            Fault::VolumeWrite => vol && op == FileOp::Write,
            Fault::VolumeSync => vol && op == FileOp::Sync,
        }
    }
}

#[test]
fn failed_writes_and_fsyncs_fail_the_operation_and_recovery_is_consistent() {
    for fault in [Fault::LogWrite, Fault::LogSync, Fault::VolumeWrite, Fault::VolumeSync] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let vfs = Arc::new(FaultyVfs::new(Arc::new(OsVfs)));
        let db = Db::create(&path, &opts(vfs.clone())).unwrap();
        let mut acknowledged: Vec<(Oid, Vec<u8>)> = Vec::new();
        for i in 0..20u32 {
            let mut t = db.begin().unwrap();
            let data = vec![i as u8; 300 + i as usize * 50];
            let oid = t.create(GroupId::DEFAULT, &data).unwrap();
            t.commit().unwrap();
            acknowledged.push((oid, data));
        }
        vfs.set_rule(Some(Arc::new(move |op, p: &Path, _| fault.matches(op, p))));
        // The failing step: a commit for log faults, a checkpoint for volume ones.
        let attempted = vec![0xEEu8; 2000];
        let mut attempted_oid = None;
        let err = match fault {
            Fault::LogWrite | Fault::LogSync => {
                // Any step may be the one that fails: allocation logs at once.
                let mut t = db.begin().unwrap();
                let steps = (|| {
                    let oid = t.create(GroupId::DEFAULT, &attempted)?;
                    attempted_oid = Some(oid);
                    t.update(acknowledged[3].0, b"changed by the failing commit")?;
                    Ok::<_, Error>(())
                })();
                match steps {
                    Ok(()) => t.commit().unwrap_err(),
                    Err(e) => e,
                }
            }
            Fault::VolumeWrite | Fault::VolumeSync => db.checkpoint().unwrap_err(),
        };
        assert!(matches!(err, Error::Io { .. }), "{fault:?}: {err}");
        let again = db.begin().and_then(|mut t| t.create(GroupId::DEFAULT, b"after"));
        assert!(matches!(again, Err(Error::Poisoned(_))), "{fault:?}: {again:?}");
        drop(db);

        vfs.set_rule(None);
        let db = Db::open(&path, &opts(vfs.clone())).unwrap();
        let mut t = db.begin().unwrap();
        let failed_is_there = match attempted_oid {
            Some(oid) => t.exists(oid).unwrap() && t.read(oid).unwrap() == attempted,
            None => false,
        };
        for (i, (oid, data)) in acknowledged.iter().enumerate() {
            let got = t.read(*oid).unwrap();
            if i == 3 && failed_is_there {
                assert_eq!(
                    got, b"changed by the failing commit",
                    "{fault:?}: the failed commit is all there"
                );
            } else {
                assert_eq!(&got, data, "{fault:?}: acknowledged commit {i}");
            }
        }
        t.commit().unwrap();
        db.close().unwrap();
        let report = check_database(&path, &opts(vfs).volume);
        assert!(report.is_ok(), "{fault:?}: {:?}", report.problems);
    }
}
