//! Snapshot reads (`Db::begin_read_only`, `txn/versions.rs`): a read-only
//! transaction sees the committed state as of its beginning, takes no lock
//! (so it neither waits for writers nor makes them wait), changes nothing,
//! and never aborts for a conflict; the version store keeps only what a
//! running snapshot (or one that could still begin) needs, and a snapshot
//! that outlives its bound ends with `SnapshotTooOld`. Threads moving value
//! between objects check that every snapshot sees one consistent state;
//! `CAIRN_SNAPSHOT_ROUNDS` scales that run (default 200).

use std::ops::Bound;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use cairn_storage::btree::BTree;
use cairn_storage::{Db, DbOptions, Error, GroupId, Oid};

fn opts() -> DbOptions {
    DbOptions {
        lock_timeout: Duration::from_millis(200),
        background: false,
        ..DbOptions::default()
    }
}

fn value(n: u64) -> Vec<u8> {
    let mut v = n.to_le_bytes().to_vec();
    v.resize(64, 0);
    v
}

fn read_u64(b: &[u8]) -> u64 {
    u64::from_le_bytes(b[..8].try_into().unwrap())
}

fn seed(db: &Db, n: u64) -> Vec<Oid> {
    let mut t = db.begin().unwrap();
    let oids = (0..n).map(|i| t.create(GroupId::DEFAULT, &value(i)).unwrap()).collect();
    t.commit().unwrap();
    oids
}

#[test]
fn a_snapshot_sees_the_state_it_began_at_and_neither_waits_nor_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::create(&dir.path().join("db"), &opts()).unwrap();
    let oids = seed(&db, 3);
    let mut snap = db.begin_read_only().unwrap();
    assert!(snap.is_snapshot());
    let waits = db.stats().locks.waits;
    let requests = db.stats().locks.requests;
    // A writer changes an object and holds its lock, uncommitted: the
    // snapshot reads the object without waiting.
    let mut w = db.begin().unwrap();
    w.update(oids[0], &value(100)).unwrap();
    assert_eq!(read_u64(&snap.read(oids[0]).unwrap()), 0);
    w.commit().unwrap();
    // Committed after the snapshot began: still invisible to it.
    assert_eq!(read_u64(&snap.read(oids[0]).unwrap()), 0);
    // A writer changes what the snapshot read, and commits at once.
    let mut w = db.begin().unwrap();
    w.update(oids[1], &value(200)).unwrap();
    w.delete(oids[2]).unwrap();
    w.commit().unwrap();
    assert_eq!(read_u64(&snap.read(oids[1]).unwrap()), 1);
    assert_eq!(read_u64(&snap.read(oids[2]).unwrap()), 2, "deleted after the snapshot");
    assert_eq!(db.stats().locks.waits, waits, "nobody waited");
    // The snapshot asked the lock manager for nothing (the writers did).
    let mut fresh = db.begin().unwrap();
    assert_eq!(read_u64(&fresh.read(oids[0]).unwrap()), 100);
    assert!(matches!(fresh.read(oids[2]), Err(Error::NotFound { .. })));
    fresh.commit().unwrap();
    let _ = requests;
    // It changes nothing.
    assert!(matches!(snap.update(oids[0], &value(1)), Err(Error::ReadOnlyTxn(_))));
    assert!(matches!(
        snap.create(GroupId::DEFAULT, &value(1)),
        Err(Error::ReadOnlyTxn(_))
    ));
    snap.commit().unwrap();
    assert_eq!(db.version_stats().snapshots, 0);
    assert_eq!(db.version_stats().versions, 0, "nothing kept once no snapshot runs");
}

#[test]
fn a_snapshot_takes_no_lock() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::create(&dir.path().join("db"), &opts()).unwrap();
    let oids = seed(&db, 50);
    let before = db.stats().locks.requests;
    let mut snap = db.begin_read_only().unwrap();
    for o in &oids {
        snap.read(*o).unwrap();
    }
    snap.commit().unwrap();
    assert_eq!(db.stats().locks.requests, before, "50 reads asked for no lock");
}

#[test]
fn a_snapshot_reads_a_tree_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::create(&dir.path().join("db"), &opts()).unwrap();
    let mut t = db.begin().unwrap();
    let tree = BTree::create(&mut t, GroupId::DEFAULT, true).unwrap();
    for k in 0..2_000u32 {
        t.tree_insert(&tree, &k.to_be_bytes(), b"old").unwrap();
    }
    t.commit().unwrap();
    let mut snap = db.begin_read_only().unwrap();
    // Many inserts (splits) and deletes (merges) after it began.
    let mut w = db.begin().unwrap();
    for k in 2_000..6_000u32 {
        w.tree_insert(&tree, &k.to_be_bytes(), b"new").unwrap();
    }
    for k in 0..1_000u32 {
        w.tree_delete(&tree, &k.to_be_bytes(), None).unwrap();
    }
    w.commit().unwrap();
    let mut n = 0u32;
    snap.tree_scan(&tree, Bound::Unbounded, Bound::Unbounded, |k, v| {
        assert_eq!(u32::from_be_bytes(k.try_into().unwrap()), n);
        assert_eq!(v, b"old");
        n += 1;
        true
    })
    .unwrap();
    assert_eq!(n, 2_000);
    assert!(
        db.version_stats().versions > 0,
        "the changed pages' old images are kept"
    );
    snap.commit().unwrap();
    assert_eq!(db.version_stats().versions, 0, "and dropped when the snapshot ends");
}

#[test]
fn a_snapshot_that_outlives_the_bound_ends_early_and_writers_never_wait() {
    let dir = tempfile::tempdir().unwrap();
    let o = DbOptions {
        snapshot_bytes_max: 64 << 10,
        ..opts()
    };
    let db = Db::create(&dir.path().join("db"), &o).unwrap();
    let oids = seed(&db, 400);
    let mut snap = db.begin_read_only().unwrap();
    assert_eq!(read_u64(&snap.read(oids[0]).unwrap()), 0);
    // Commits that change more pages than the bound holds.
    for round in 0..4u64 {
        let mut w = db.begin().unwrap();
        for o in &oids {
            w.update(*o, &value(1_000 + round)).unwrap();
        }
        w.commit().unwrap();
    }
    let stats = db.version_stats();
    assert_eq!(stats.expired, 1);
    assert!(stats.bytes <= 64 << 10, "{stats:?}");
    let r = snap.read(oids[0]);
    assert!(matches!(r, Err(Error::SnapshotTooOld { .. })), "{r:?}");
    drop(snap);
    // A new snapshot sees the last commit.
    let mut snap = db.begin_read_only().unwrap();
    assert_eq!(read_u64(&snap.read(oids[399]).unwrap()), 1_003);
}

#[test]
fn every_snapshot_sees_one_consistent_state_while_threads_move_value() {
    let rounds: u64 = std::env::var("CAIRN_SNAPSHOT_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let dir = tempfile::tempdir().unwrap();
    let db = Db::create(&dir.path().join("db"), &opts()).unwrap();
    const N: u64 = 40;
    const EACH: u64 = 1_000;
    let mut t = db.begin().unwrap();
    let oids: Vec<Oid> = (0..N)
        .map(|_| t.create(GroupId::DEFAULT, &value(EACH)).unwrap())
        .collect();
    t.commit().unwrap();
    let writers_done = AtomicUsize::new(0);
    let snapshots_read = std::thread::scope(|s| {
        for w in 0..3u64 {
            let (db, oids, writers_done) = (&db, &oids, &writers_done);
            s.spawn(move || {
                let mut x = w * 7 + 1;
                for _ in 0..rounds {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    let (a, b) = ((x >> 33) % N, (x >> 13) % N);
                    if a == b {
                        continue;
                    }
                    let mut t = db.begin().unwrap();
                    let r = (|| -> Result<(), Error> {
                        let va = read_u64(&t.read(oids[a as usize])?);
                        let vb = read_u64(&t.read(oids[b as usize])?);
                        let amount = va.min(5);
                        t.update(oids[a as usize], &value(va - amount))?;
                        t.update(oids[b as usize], &value(vb + amount))?;
                        Ok(())
                    })();
                    match r {
                        Ok(()) => t.commit().unwrap(),
                        Err(Error::Deadlock { .. } | Error::LockTimeout { .. }) => drop(t),
                        Err(e) => panic!("writer: {e}"),
                    }
                }
                writers_done.fetch_add(1, Ordering::SeqCst);
            });
        }
        let (db, oids, writers_done) = (&db, &oids, &writers_done);
        let reader = s.spawn(move || {
            let mut read = 0u64;
            // Until every writer has ended, and at least 20 snapshots.
            while writers_done.load(Ordering::SeqCst) < 3 || read < 20 {
                let mut snap = db.begin_read_only().unwrap();
                let total: u64 = oids.iter().map(|o| read_u64(&snap.read(*o).unwrap())).sum();
                assert_eq!(total, N * EACH, "a snapshot saw money appear or vanish");
                snap.commit().unwrap();
                read += 1;
            }
            read
        });
        reader.join().unwrap()
    });
    assert!(snapshots_read >= 20);
    assert_eq!(db.version_stats().snapshots, 0);
    assert_eq!(db.version_stats().versions, 0);
}

/// A large object is deleted after a snapshot began, and its pages freed:
/// the snapshot still reads it whole (its pages were in use for it), and
/// once the snapshot ends they are out of use for everyone. The space map
/// alone said "not in use" and the snapshot's read failed before the
/// version store noted frees (`Versions::note_freed`).
#[test]
fn a_snapshot_reads_pages_freed_after_it_began() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::create(&dir.path().join("db"), &opts()).unwrap();
    let big: Vec<u8> = (0..40_000u32).map(|i| (i % 251) as u8).collect();
    let mut t = db.begin().unwrap();
    let oid = t.create(GroupId::DEFAULT, &big).unwrap();
    t.commit().unwrap();
    let (_, free_before) = db.page_counts();
    let mut snap = db.begin_read_only().unwrap();
    let mut w = db.begin().unwrap();
    w.delete(oid).unwrap();
    w.commit().unwrap();
    assert!(db.page_counts().1 > free_before, "the delete freed the object's pages");
    assert_eq!(snap.read(oid).unwrap(), big, "its pages were in use for the snapshot");
    snap.commit().unwrap();
    let mut fresh = db.begin_read_only().unwrap();
    assert!(matches!(fresh.read(oid), Err(Error::NotFound { .. })));
    fresh.commit().unwrap();
}
