//! I/O errors at every index (EIO on a read, write or fsync; ENOSPC on a
//! write or extend; a short write; once or forever): an error, never a
//! panic; later work refused until reopen; reopening, in place or on a
//! crash image, gives a state the model accepts.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant;

use cairn_storage::sim::{mix64, Fault, FaultKind, ImageKind, OpKind};
use cairn_storage::GroupId;

use crate::harness::{config, no_panic, panic_message, sample, verbose, Failures};
use crate::model::{recover_and_check, recover_check_write, Model, AFTER_RECOVERY};
use crate::workload::{clean_run, fresh_disk, run_workload, workloads};

fn fault_candidates(trace: &[OpKind], from: u64, kind: FaultKind) -> Vec<u64> {
    (from..trace.len() as u64)
        .filter(|&i| {
            let op = trace[i as usize];
            match kind {
                FaultKind::ReadEio => op == OpKind::Read,
                FaultKind::WriteEio | FaultKind::WriteEnospc | FaultKind::ShortWrite => op == OpKind::Write,
                FaultKind::SyncEio => matches!(op, OpKind::SyncData | OpKind::SyncDir),
                FaultKind::ExtendEnospc => op == OpKind::SetLen,
            }
        })
        .collect()
}

#[test]
fn io_errors_at_every_index() {
    let cfg = config();
    let started = Instant::now();
    let mut f = Failures::new("io_errors_at_every_index", &cfg);
    let w = workloads(&cfg)[0];
    let (disk, _, run) = clean_run(&w);
    let trace = disk.trace();
    let (mut injected, mut not_fired, mut surfaced, mut swallowed, mut poisoned, mut usable_after) =
        (0u64, 0u64, 0u64, 0u64, 0u64, 0u64);
    let mut images = 0u64;
    // `CAIRN_FAULT=Kind/forever` (as printed) replays one fault kind only.
    let only = std::env::var("CAIRN_FAULT").ok();
    for kind in FaultKind::ALL {
        for forever in [false, true] {
            if only.as_ref().is_some_and(|o| *o != format!("{kind:?}/{forever}")) {
                continue;
            }
            let cands = fault_candidates(&trace, run.create_end_op, kind);
            let points = match cfg.index {
                Some(i) => vec![i],
                None => sample(&cands, cfg.points.map_or(60, |n| n / 4 + 1)),
            };
            for at in points {
                let tag = format!("{kind:?}{} at op {at}", if forever { " forever" } else { " once" });
                let at_s = format!("CAIRN_CRASH_INDEX={at} CAIRN_FAULT={kind:?}/{forever}");
                let disk = fresh_disk();
                disk.add_fault(Fault {
                    kind,
                    from_op: at,
                    forever,
                    path_contains: None,
                });
                let mut model = Model::default();
                let ran = catch_unwind(AssertUnwindSafe(|| run_workload(&disk, &w, &mut model)));
                let run = match ran {
                    Ok(r) => r,
                    Err(p) => {
                        f.add(at_s, format!("{tag}: PANIC in the engine: {}", panic_message(&*p)));
                        continue;
                    }
                };
                if disk.stats().faults_fired == 0 {
                    not_fired += 1;
                    continue;
                }
                injected += 1;
                match &run.failure {
                    None => swallowed += 1,
                    Some(_) => surfaced += 1,
                }
                if verbose() {
                    eprintln!(
                        "{tag}: fault hit op {:?}; the workload stopped at {:?}",
                        disk.stats().first_fault_op,
                        run.failure.as_ref().map(|(w, e)| format!("{w}: {e}"))
                    );
                }
                // Later work is refused until reopen.
                if let (Some(db), Some((what, err))) = (&run.db, &run.failure) {
                    let after = no_panic(|| {
                        let mut t = db.begin().map_err(|e| e.to_string())?;
                        let oid = t
                            .create(GroupId::DEFAULT, b"after the fault")
                            .map_err(|e| e.to_string())?;
                        t.commit().map_err(|e| e.to_string())?;
                        Ok(oid)
                    });
                    match after {
                        Ok(oid) => {
                            // Acknowledged: it must survive whatever state wins.
                            model.ever.insert(oid);
                            model.acked.objects.insert(oid, b"after the fault".to_vec());
                            if let Some(s) = &mut model.in_flight {
                                s.objects.insert(oid, b"after the fault".to_vec());
                            }
                            let on = disk.first_fault().map(|(_, _, p)| p).unwrap_or_default();
                            let durable_file =
                                on.ends_with("volume.cairn") || on.components().any(|c| c.as_os_str() == "wal");
                            if kind == FaultKind::ReadEio || !durable_file {
                                // A failed read, or a failed write of a
                                // transaction's spill file, leaves nothing
                                // durable in doubt.
                                usable_after += 1;
                            } else {
                                f.add(
                                    at_s.clone(),
                                    format!(
                                        "{tag}: {what} failed ({err}), yet a later commit succeeded (not poisoned)"
                                    ),
                                );
                            }
                        }
                        Err(e) if e.contains("PANIC") => f.add(at_s.clone(), format!("{tag}: after the error: {e}")),
                        Err(_) => poisoned += 1,
                    }
                }
                // A commit that failed (on its spill file, or reading a page).
                let spill = disk
                    .first_fault()
                    .is_some_and(|(_, _, p)| p.components().any(|c| c.as_os_str() == "tmp"));
                let in_commit = run.failure.as_ref().is_some_and(|(w, _)| w.ends_with(": commit"));
                let known_io = (in_commit || spill).then_some("commit-rollback");
                drop(run.db);
                let crash_image = disk.image(ImageKind::Synced, mix64(at));
                disk.clear_faults();
                // Reopen on the same disk (the machine stayed up) ...
                images += 1;
                match recover_check_write(&disk, &model) {
                    Ok((which, oid)) => {
                        // ... and then lose power: what the reopen made
                        // durable must hold.
                        images += 1;
                        let after = disk.image(ImageKind::Synced, mix64(at ^ 1));
                        let mut resolved = model.resolved(which);
                        resolved.ever.insert(oid);
                        resolved.acked.objects.insert(oid, AFTER_RECOVERY.to_vec());
                        if let Err(e) = recover_and_check(&after, &resolved) {
                            let cached = kind == FaultKind::SyncEio && e.contains("the log is corrupt");
                            f.add_known(
                                if cached { Some("reopen-cached-log") } else { known_io },
                                at_s.clone(),
                                format!("{tag}: reopened in place, then a power loss: {e}"),
                            );
                        }
                    }
                    Err(e) => f.add_known(
                        if e.contains("the log holds no full image") {
                            Some("full-image-lsn")
                        } else {
                            known_io
                        },
                        at_s.clone(),
                        format!("{tag}: reopen on the same disk: {e}"),
                    ),
                }
                // ... or lose power right after the error.
                images += 1;
                if let Err(e) = recover_and_check(&crash_image, &model) {
                    f.add_known(
                        if e.contains("the log holds no full image") {
                            Some("full-image-lsn")
                        } else {
                            known_io
                        },
                        at_s,
                        format!("{tag}: power loss after the error: {e}"),
                    );
                }
            }
        }
    }
    eprintln!(
        "io_errors_at_every_index: 1 workload, {injected} I/O errors injected ({not_fired} armed but never hit), \
         {surfaced} surfaced as errors, {swallowed} absorbed by the engine, {poisoned} refused later work, \
         {usable_after} read or spill-file errors left the database usable, {images} images recovered, {} failures, {:.1}s",
        f.list.len(),
        started.elapsed().as_secs_f64()
    );
    f.finish();
}
