//! Checkpoints taken while commits run beside them, crashed at random
//! fsyncs: every image the power loss could leave opens (issue 34, item 2).
//!
//! A CHECKPOINT record proves the log before it durable (the open rule:
//! damage before a proven-durable record is corruption, not a torn tail),
//! so it is appended only once that log is durable. The direct regression
//! for that is `txn/tests.rs`
//! `a_checkpoint_is_appended_only_after_the_log_before_it_is_durable`
//! (every checkpoint's `durable` field covers its start); here the same
//! workload is crashed, which the simulated disk makes too fast to hit the
//! old window reliably. What this test did find: a commit whose append
//! failed gave its pages back while holding the commit gate, against the
//! lock order (Volume → gate) a checkpoint follows, and the two hung forever
//! (`commit.rs`). Committer threads make the interleavings nondeterministic;
//! the crash points and images are seeded (`CAIRN_CRASH_SEED`), and
//! `CAIRN_CRASH_POINTS` scales the trials.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use cairn_storage::sim::{ImageKind, SimDisk, SimRng};
use cairn_storage::{Db, GroupId};

use crate::harness::{config, db_path, opts};
use crate::workload::fresh_disk;

/// Runs three committers and a checkpointer on `disk` until the
/// committers are done or the disk has crashed; returns the operation count
/// once the database was created.
fn run(disk: &SimDisk) -> u64 {
    let Ok(db) = Db::create(&db_path(), &opts(disk)) else {
        return u64::MAX;
    };
    let created = disk.trace().len() as u64;
    let db = Arc::new(db);
    let done = Arc::new(AtomicUsize::new(0));
    let committers: Vec<_> = (0..3u8)
        .map(|k| {
            let (db, done) = (db.clone(), done.clone());
            std::thread::spawn(move || {
                for _ in 0..40 {
                    let Ok(mut t) = db.begin() else { break };
                    if t.create(GroupId::DEFAULT, &[k; 200]).is_err() || t.commit().is_err() {
                        break;
                    }
                }
                done.fetch_add(1, Ordering::SeqCst);
            })
        })
        .collect();
    while done.load(Ordering::SeqCst) < 3 {
        if db.checkpoint().is_err() {
            break;
        }
    }
    for c in committers {
        let _ = c.join();
    }
    created
}

#[test]
fn a_checkpoint_beside_commits_leaves_no_image_that_fails_to_open() {
    let cfg = config();
    let mut rng = SimRng::new(cfg.seed ^ 0xC4EC_4901);
    // The length of a whole run, to choose crash points in.
    let probe = fresh_disk();
    probe.record_trace(true);
    let created = run(&probe) as usize;
    let trace = probe.trace();
    let ops = trace.len() as u64;
    assert!(ops > 100, "the workload did I/O ({ops} operations)");
    // Crash at an fsync that follows a write: where a record written but
    // not yet durable may be kept or lost (threads move the indexes a
    // little between runs, so these are aims, not exact points).
    let syncs: Vec<u64> = (created.max(1)..trace.len())
        .filter(|&i| {
            matches!(trace[i], cairn_storage::sim::OpKind::SyncData)
                && matches!(trace[i - 1], cairn_storage::sim::OpKind::Write)
        })
        .map(|i| i as u64)
        .collect();
    let trials = cfg.points.unwrap_or(24);
    let mut failures = Vec::new();
    for trial in 0..trials {
        let at = syncs[rng.below(syncs.len() as u64) as usize];
        let disk = fresh_disk();
        disk.set_crash_at(Some(at));
        run(&disk);
        // The random-subset image most often: it is the one that can keep a
        // later write and lose an earlier one.
        for kind in [ImageKind::Random; 4].into_iter().chain(ImageKind::ALL) {
            let seed = rng.next_u64();
            let image = disk.image(kind, seed);
            if let Err(e) = Db::open(&db_path(), &opts(&image)) {
                failures.push(format!(
                    "trial {trial}: crash at op {at} of ~{ops}, image {kind} (seed {seed:#x}): {e}"
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} images failed to open:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
