//! Reproductions of the engine defects the isolation runs found: two of
//! snapshots, each a test of what `Database::begin_read_only` promises, and
//! one of key-range locking. All three are fixed, and run with the suite.
//! None depends on timing: the snapshot ones count their misses over a
//! fixed number of rounds and want none; the key-range one is a fixed
//! interleaving whose correct outcome is a deadlock (detected at once).
//!
//! 1. **A snapshot misses commits that have returned.** It promises to see
//!    "every commit that ended before it began", but its LSN is where the
//!    oldest commit still in flight began (`txn/versions.rs`): a commit that
//!    appended its records after that one and has already returned lies above
//!    it and is invisible — even to the next transaction of the thread that
//!    made it. (The checker reports it as `StaleSnapshot`.) Fixed in
//!    `txn/versions.rs`: a snapshot sees every record up to the log's end
//!    when it began but those of the commits in flight then, and a commit
//!    built on another's image not installed yet ends only after that one.
//! 2. **A snapshot reads torn objects under object locking.** With three or
//!    more threads committing changes to objects of one page, a snapshot
//!    sometimes reads an object it cannot decode ("cannot decode Cell.vals
//!    at byte 1300: u64: needs 8 bytes, 0 left"), from the moment the growing
//!    objects no longer fit their 4 KB page and start to move (one or two
//!    threads, or page locking, never showed it). A likely cause, from
//!    `txn/commit.rs`: when a later commit installs its rebased image of a
//!    page before an earlier one does, the earlier install is skipped, and
//!    the version store keeps the image both replaced as valid over
//!    `[its LSN, the later commit's LSN)` — so a snapshot whose LSN lies
//!    between the two commits reads that page without the earlier commit,
//!    and the commit's other pages (say, where it moved an object) with it.
//!    That install order is handled now (the later install hands the
//!    earlier commit's image to the store too, `Shared::keep_replaced`).
//!    What tore the rest (about 1 read in 1,000 here): a commit built its
//!    image of a page on the image an older commit had *installed* while
//!    still installing its other pages, ended first, and a snapshot saw it —
//!    with part of the older commit in its image — and not the older one.
//!    Fixed: a commit built on an image a commit still in flight made ends
//!    only after that one (`Versions::wait_for_older`,
//!    `Versions::any_in_flight`).
//! 3. **A scan's range opens to others where the scanner inserts.** Under
//!    key-range locking a scan holds S on the gap below each entry it
//!    returned (`txn/keys.rs`); an insert checks the gap below the next
//!    entry. When the scanner itself then inserts into its range, its new
//!    entry splits a gap it holds, and the part below the new entry is now
//!    "the gap below" an entry nobody has locked: another transaction's
//!    insert there (just below the scanner's own) neither waits nor
//!    conflicts — a phantom in the scanned range. The same holds for the
//!    scanner's insert just above its range, which splits the gap of its
//!    fence. The phantom runs (20000 transactions) showed it as a G-single:
//!    a scan that missed an insert into its range by a transaction that
//!    committed before the scanner's own insert into the same slot. Fixed
//!    in `Txn::tree_insert`: an entry inserted into a gap its transaction
//!    holds S on takes S on the gap below itself, under the tree's latch,
//!    before any other inserter can see it.

use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use cairn::{Database, Index, Persistent};

use crate::workload;

/// A counter, each in a group of its own (so that page locks do not
/// serialize the threads that change them).
#[derive(Persistent, Debug, Clone)]
struct Counter {
    #[cairn(index)]
    key: u32,
    n: u64,
}

fn open(dir: &std::path::Path, object_locking: bool) -> Database {
    let mut opts = cairn::Options::default();
    opts.storage.background = false;
    opts.storage.object_locking = object_locking;
    Database::open_with(dir, opts).unwrap()
}

/// Sets counter 0 to 1, 2, … and looks at it in a snapshot right after each
/// commit, while `writers` threads keep committing to counters of their own:
/// how many snapshots missed the commit just made.
fn own_commits_missed(object_locking: bool, writers: u32, rounds: u64) -> usize {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path(), object_locking);
    let by_key: Index<u32, Counter> = Index::on("key");
    let mut tx = db.begin().unwrap();
    for key in 0..=writers {
        tx.create_in(&format!("counter{key}"), Counter { key, n: 0 }).unwrap();
    }
    tx.commit().unwrap();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        for key in 1..=writers {
            let (db, stop, by_key) = (&db, &stop, &by_key);
            s.spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    let mut tx = db.begin().unwrap();
                    let c = tx.find_one(by_key, &key).unwrap().unwrap();
                    tx.update(&c, |c| c.n += 1).unwrap();
                    tx.commit().unwrap();
                }
            });
        }
        let mut missed = 0;
        for i in 1..=rounds {
            let mut tx = db.begin().unwrap();
            let c = tx.find_one(&by_key, &0).unwrap().unwrap();
            tx.update(&c, |c| c.n = i).unwrap();
            tx.commit().unwrap();
            let mut ro = db.begin_read_only().unwrap();
            let c = ro.find_one(&by_key, &0).unwrap().unwrap();
            missed += usize::from(ro.get(&c).unwrap().n != i);
            ro.commit().unwrap();
        }
        stop.store(true, Ordering::SeqCst);
        missed
    })
}

#[test]
fn a_snapshot_sees_its_own_threads_last_commit() {
    for object_locking in [false, true] {
        let missed = own_commits_missed(object_locking, 3, 2_000);
        eprintln!("object locking {object_locking}: {missed} of 2000 snapshots missed the commit just made");
        assert_eq!(missed, 0, "object locking {object_locking}");
    }
}

/// `writers` threads append `appends` values each to cells of their own (all
/// on one page at first) under object locking, while snapshots read those
/// cells until they are done: how many reads failed, of how many, and the
/// first errors.
fn torn_reads(writers: u32, appends: u64) -> (usize, usize, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path(), true);
    workload::load(&db);
    let done = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for key in 1..=writers {
            let (db, done) = (&db, &done);
            s.spawn(move || {
                for i in 0..appends {
                    let mut tx = db.begin().unwrap();
                    let cell = tx.find_one(&workload::by_key(), &key).unwrap().unwrap();
                    tx.update(&cell, |c| c.vals.push(i)).unwrap();
                    tx.commit().unwrap();
                }
                done.fetch_add(1, Ordering::SeqCst);
            });
        }
        let (mut failed, mut reads, mut first) = (0, 0, Vec::new());
        while done.load(Ordering::SeqCst) < writers as usize {
            let mut ro = db.begin_read_only().unwrap();
            for key in 1..=writers {
                let cell = ro.find_one(&workload::by_key(), &key).unwrap().unwrap();
                reads += 1;
                if let Err(e) = ro.get(&cell) {
                    failed += 1;
                    if first.len() < 3 {
                        first.push(e.to_string());
                    }
                }
            }
            ro.commit().unwrap();
        }
        (failed, reads, first)
    })
}

#[test]
fn a_snapshot_never_reads_a_torn_object() {
    let (failed, reads, first) = torn_reads(3, 1_500);
    eprintln!("{failed} of {reads} snapshot reads failed: {first:?}");
    assert_eq!(failed, 0, "{first:?}");
}

/// A unique tree under key-range locking holding `keys` (each its own value).
fn key_range_tree(db: &cairn::storage::Db, keys: &[u32]) -> cairn::storage::btree::BTree {
    let mut t = db.begin().unwrap();
    let tree = cairn::storage::btree::BTree::create(&mut t, cairn::storage::GroupId::DEFAULT, true).unwrap();
    for k in keys {
        t.tree_insert(&tree, &k.to_be_bytes(), &k.to_be_bytes()).unwrap();
    }
    t.commit().unwrap();
    tree
}

/// The keys `t` finds in `[lo, hi]`.
fn scan_keys(t: &mut cairn::storage::Txn, tree: &cairn::storage::btree::BTree, lo: u32, hi: u32) -> Vec<u32> {
    let (lo, hi) = (lo.to_be_bytes(), hi.to_be_bytes());
    let mut out = Vec::new();
    t.tree_scan(tree, Bound::Included(&lo[..]), Bound::Included(&hi[..]), |k, _| {
        out.push(u32::from_be_bytes(k.try_into().unwrap()));
        true
    })
    .unwrap();
    out
}

#[test]
fn an_insert_into_a_scanned_range_waits_even_below_the_scanners_own_insert() {
    use cairn::storage::{Db, DbOptions, Error as StorageError};
    let dir = tempfile::tempdir().unwrap();
    let opts = DbOptions {
        background: false,
        key_range_locking: true,
        ..DbOptions::default()
    };
    let db = Db::create(&dir.path().join("db"), &opts).unwrap();
    let tree = key_range_tree(&db, &[10, 20, 40]);
    // T1 scans [10, 20] and inserts 15 into it; T2 holds 50 (past T1's fence, 40).
    let mut t1 = db.begin().unwrap();
    assert_eq!(scan_keys(&mut t1, &tree, 10, 20), vec![10, 20]);
    assert!(t1.tree_insert(&tree, &15u32.to_be_bytes(), b"t1").unwrap());
    let mut t2 = db.begin().unwrap();
    assert!(t2.tree_insert(&tree, &50u32.to_be_bytes(), b"t2").unwrap());
    // T2 inserts 12, inside T1's range: it must wait for T1, which then waits
    // for T2's 50 — a deadlock, whichever runs first.
    let deadlock = |e: &StorageError| matches!(e, StorageError::Deadlock { .. });
    let (t1_insert, t1_again, t2_result) = std::thread::scope(|s| {
        let tree = &tree;
        let other = s.spawn(move || {
            let r = t2.tree_insert(tree, &12u32.to_be_bytes(), b"t2");
            r.and_then(|_| t2.commit()).map_err(|e| deadlock(&e))
        });
        let r = t1
            .tree_insert(tree, &50u32.to_be_bytes(), b"t1")
            .map_err(|e| deadlock(&e));
        // Unless it is the deadlock's victim, T1 looks at its range again.
        let again = (r != Err(true)).then(|| scan_keys(&mut t1, tree, 10, 20));
        (r, again, other.join().unwrap())
    });
    assert!(
        t1_insert == Err(true) || t2_result == Err(true),
        "T2 inserted 12 into [10, 20] while T1, which had scanned it, ran: T2 {t2_result:?}; T1's insert \
         of 50 {t1_insert:?} (Err(false): not a deadlock); T1's second scan of [10, 20] {t1_again:?}"
    );
}
