//! Recovery never strands a database because of a log record it cannot
//! apply (issue 34, item 2). A record written straight into the log — a
//! COMMIT freeing the volume header, a PAGE change that runs past its page —
//! stops recovery with an error naming the record's LSN and transaction and
//! what is wrong, and changes nothing (every open says the same). The
//! documented way out, `Db::recover_stopping_at` (`cairn recover --stop-at`),
//! copies the log from that record on to `lost+found` with a listing of the
//! transactions left out, opens the database as of just before the record,
//! and leaves an ordinary database behind: it reopens, checks clean, and
//! hands out no dropped transaction id again.

use std::path::Path;

use cairn_storage::io::OsVfs;
use cairn_storage::volume::manifest::Manifest;
use cairn_storage::wal::redo::Redo;
use cairn_storage::wal::{Wal, WalOptions};
use cairn_storage::{Db, DbOptions, Error, GroupId, Lsn, Oid, PageId, TxnId};

/// A database with two committed objects.
fn setup(dir: &Path) -> (Oid, Oid) {
    let db = Db::create(dir, &DbOptions::default()).unwrap();
    let mut t = db.begin().unwrap();
    let a = t.create(GroupId::DEFAULT, &[1u8; 100]).unwrap();
    t.commit().unwrap();
    let mut t = db.begin().unwrap();
    let b = t.create(GroupId::DEFAULT, &[2u8; 100]).unwrap();
    t.commit().unwrap();
    db.close().unwrap();
    (a, b)
}

/// Appends `records` to the closed database's log, durably; returns where
/// the first one starts.
fn append(dir: &Path, records: &[Redo]) -> Lsn {
    let manifest = Manifest::read(&OsVfs, dir).unwrap();
    let opts = WalOptions {
        creation_id: manifest.creation_id,
        ..Default::default()
    };
    let (wal, _) = Wal::open(dir, opts).unwrap();
    let start = wal.end_lsn();
    let encoded: Vec<Vec<u8>> = records.iter().map(Redo::encode).collect();
    let refs: Vec<&[u8]> = encoded.iter().map(Vec::as_slice).collect();
    let lsns = wal.append(&refs).unwrap();
    wal.flush(*lsns.last().unwrap()).unwrap();
    start
}

fn stopped(dir: &Path) -> (Lsn, Option<TxnId>, String) {
    match Db::open(dir, &DbOptions::default()) {
        Err(e @ Error::Unrecoverable { .. }) => {
            let text = e.to_string();
            assert!(text.contains("cairn recover") && text.contains("--stop-at"), "{text}");
            let Error::Unrecoverable { lsn, txn, reason } = e else {
                unreachable!()
            };
            (lsn, txn, reason)
        }
        Err(e) => panic!("expected Unrecoverable, got {e}"),
        Ok(_) => panic!("expected Unrecoverable, the database opened"),
    }
}

fn salvage_and_check(dir: &Path, stop: Lsn, dropped_txn: TxnId, kept: (Oid, Oid)) {
    // Not a record boundary: refused, nothing changes.
    match Db::recover_stopping_at(dir, &DbOptions::default(), Lsn(stop.0 + 1)) {
        Err(Error::InvalidArgument(m)) => assert!(m.contains("not where a log record starts"), "{m}"),
        other => panic!("expected InvalidArgument, got {:?}", other.map(|(_, s)| s)),
    }
    let (db, salvaged) = Db::recover_stopping_at(dir, &DbOptions::default(), stop).unwrap();
    assert_eq!(salvaged.stop, stop);
    assert!(salvaged.records >= 1);
    assert_eq!(
        salvaged.commits.iter().map(|(t, _)| *t).collect::<Vec<_>>(),
        vec![dropped_txn]
    );
    let kept_in = salvaged.kept_in.clone().expect("the dropped log was kept");
    let listing = std::fs::read_to_string(kept_in.join("dropped.txt")).unwrap();
    assert!(listing.contains(&format!("{} ", dropped_txn.0)), "{listing}");
    let segments = std::fs::read_dir(&kept_in).unwrap().count();
    assert!(segments >= 2, "dropped.txt and at least one segment");
    // The work before the stop is there; new ids never reuse a dropped one.
    let mut t = db.begin().unwrap();
    assert_eq!(t.read(kept.0).unwrap(), vec![1u8; 100]);
    assert_eq!(t.read(kept.1).unwrap(), vec![2u8; 100]);
    assert!(
        t.id().0 > dropped_txn.0,
        "txn {} after dropped {}",
        t.id().0,
        dropped_txn.0
    );
    t.abort().unwrap();
    db.close().unwrap();
    // An ordinary database again.
    let db = Db::open(dir, &DbOptions::default()).expect("reopens without the stop");
    let mut t = db.begin().unwrap();
    let c = t.create(GroupId::DEFAULT, &[3u8; 10]).unwrap();
    t.commit().unwrap();
    db.close().unwrap();
    let report = cairn_storage::check::check_database(dir, &Default::default());
    assert!(report.is_ok(), "{:?}", report.problems);
    let db = Db::open(dir, &DbOptions::default()).unwrap();
    assert_eq!(db.begin().unwrap().read(c).unwrap(), vec![3u8; 10]);
}

#[test]
fn a_commit_freeing_the_volume_header_stops_recovery_and_recover_stopping_at_opens_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let kept = setup(&path);
    let bad = TxnId(9_999);
    let start = append(
        &path,
        &[Redo::Commit {
            txn: bad,
            frees: vec![PageId(0)],
        }],
    );
    let (lsn, txn, reason) = stopped(&path);
    assert_eq!((lsn, txn), (start, Some(bad)));
    assert!(reason.contains("frees page 0") && reason.contains("header"), "{reason}");
    // Nothing changed: the next open stops at the same record.
    assert_eq!(stopped(&path).0, start);
    salvage_and_check(&path, start, bad, kept);
}

#[test]
fn a_change_running_past_its_page_stops_recovery_at_that_record() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let kept = setup(&path);
    let bad = TxnId(8_888);
    let start = append(
        &path,
        &[
            Redo::Page {
                txn: bad,
                page: kept.0.page,
                full: false,
                runs: vec![(4090, vec![7u8; 100])],
            },
            Redo::Commit {
                txn: bad,
                frees: vec![],
            },
        ],
    );
    let (lsn, txn, reason) = stopped(&path);
    assert_eq!((lsn, txn), (start, Some(bad)));
    assert!(reason.contains("does not apply"), "{reason}");
    salvage_and_check(&path, start, bad, kept);
}
