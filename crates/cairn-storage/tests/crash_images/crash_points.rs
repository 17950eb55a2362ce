//! Crash at every I/O index of each workload, on every disk image the
//! power loss could leave, and crash during recovery, three deep, for
//! some of those points.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant;

use cairn_storage::sim::{mix64, ImageKind, SimDisk, SimRng};
use cairn_storage::Db;

use crate::harness::{config, copy, crash_candidates, db_path, no_panic, opts, panic_message, sample, Failures};
use crate::model::{recover_and_check, Model};
use crate::workload::{clean_run, fresh_disk, run_workload, workloads};

/// Crashes `disk`'s database in the middle of `Db::open` (at a random
/// mutating operation) `depth` times over, each time on an image of the
/// last crash; returns the last image.
fn crash_recovery_nested(disk: &SimDisk, depth: u32, rng: &mut SimRng, log: &mut Vec<String>) -> SimDisk {
    let mut cur = copy(disk);
    for level in 0..depth {
        let probe = copy(&cur);
        probe.record_trace(true);
        let _ = no_panic(|| Db::open(&db_path(), &opts(&probe)).map(drop).map_err(|e| e.to_string()));
        let trace = probe.trace();
        let muts: Vec<u64> = (0..trace.len() as u64)
            .filter(|&i| trace[i as usize].mutates())
            .collect();
        if muts.is_empty() {
            break;
        }
        let at = muts[rng.below(muts.len() as u64) as usize];
        let run = copy(&cur);
        run.set_crash_at(Some(at));
        let _ = no_panic(|| Db::open(&db_path(), &opts(&run)).map(drop).map_err(|e| e.to_string()));
        let kind = ImageKind::ALL[rng.below(4) as usize];
        log.push(format!(
            "level {level}: crash at recovery op {at} of {}, image {kind}",
            trace.len()
        ));
        cur = run.image(kind, rng.next_u64());
    }
    cur
}

#[test]
fn crash_at_every_io_index() {
    let cfg = config();
    let started = Instant::now();
    let mut f = Failures::new("crash_at_every_io_index", &cfg);
    let (mut n_workloads, mut n_points, mut n_images, mut n_nested) = (0, 0, 0, 0);
    let mut outcomes = [0u64; 2];
    for w in workloads(&cfg) {
        n_workloads += 1;
        let (disk, clean, run) = clean_run(&w);
        if w.object_locks {
            assert!(
                clean.acked.side >= 5,
                "interlopers committed beside open transactions: {}",
                clean.acked.side
            );
        }
        let trace = disk.trace();
        let candidates = crash_candidates(&trace, run.create_end_op);
        let points = match cfg.index {
            Some(i) => vec![i],
            None => sample(&candidates, cfg.points.unwrap_or(300)),
        };
        eprintln!(
            "workload seed {:#x}: {} I/O operations, {} crash candidates, {} crash points",
            w.seed,
            trace.len(),
            candidates.len(),
            points.len()
        );
        for (pi, &at) in points.iter().enumerate() {
            n_points += 1;
            let disk = fresh_disk();
            disk.set_crash_at(Some(at));
            let mut model = Model::default();
            let ran = catch_unwind(AssertUnwindSafe(|| {
                let run = run_workload(&disk, &w, &mut model);
                drop(run.db);
            }));
            if let Err(p) = ran {
                f.add(
                    format!("CAIRN_CRASH_INDEX={at}"),
                    format!(
                        "workload {:#x} crash at op {at}: PANIC in the engine: {}",
                        w.seed,
                        panic_message(&*p)
                    ),
                );
                continue;
            }
            disk.crash_now();
            let kinds: Vec<ImageKind> = match cfg.image {
                Some(k) => vec![k],
                None => ImageKind::ALL.to_vec(),
            };
            for kind in kinds {
                n_images += 1;
                let img = disk.image(kind, mix64(w.seed ^ at ^ ((kind as u64) << 56)));
                let at_s = format!("CAIRN_CRASH_INDEX={at} CAIRN_CRASH_IMAGE={kind}");
                match recover_and_check(&copy(&img), &model) {
                    Ok(which) => {
                        outcomes[which as usize] += 1;
                        // Crash during recovery, three deep, for some points.
                        if pi % 6 == 0 && kind != ImageKind::Everything {
                            n_nested += 1;
                            let mut rng = SimRng::new(mix64(w.seed ^ at ^ 0x0E57));
                            let mut log = Vec::new();
                            let last = crash_recovery_nested(&img, 3, &mut rng, &mut log);
                            n_images += 1;
                            match recover_and_check(&last, &model) {
                                Ok(w2) if w2 == which => {}
                                Ok(w2) => f.add(
                                    at_s.clone(),
                                    format!(
                                        "workload {:#x} crash at op {at}, image {kind}, recovery crashed ({}): ends in {w2:?}, a clean recovery in {which:?}",
                                        w.seed,
                                        log.join("; ")
                                    ),
                                ),
                                Err(e) => f.add_known(
                                    e.contains("a valid record follows").then_some("wal-hole"),
                                    at_s.clone(),
                                    format!(
                                        "workload {:#x} crash at op {at}, image {kind}, recovery crashed ({}): {e}",
                                        w.seed,
                                        log.join("; ")
                                    ),
                                ),
                            }
                        }
                    }
                    Err(e) => f.add_known(
                        if kind == ImageKind::Random && e.contains("a valid record follows") {
                            Some("wal-hole")
                        } else {
                            e.contains("the log holds no full image").then_some("full-image-lsn")
                        },
                        at_s,
                        format!("workload {:#x} crash at op {at}, image {kind}: {e}", w.seed),
                    ),
                }
            }
        }
    }
    eprintln!(
        "crash_at_every_io_index: {n_workloads} workloads, {n_points} crash points, {n_images} images recovered \
         ({} acknowledged state, {} with the in-flight commit), {n_nested} nested recoveries (3 deep), {} failures, {:.1}s",
        outcomes[0],
        outcomes[1],
        f.list.len(),
        started.elapsed().as_secs_f64()
    );
    f.finish();
}
