//! Bit flips in any page of the volume or byte of the log, of a cleanly
//! closed database and of one awaiting recovery: each is detected, never
//! returned as data, never a panic; a flip in the unvouched last group
//! commit ends the log there, as a torn tail would.

use std::path::PathBuf;
use std::time::Instant;

use cairn_storage::btree::BTree;
use cairn_storage::check::check_database;
use cairn_storage::io::Vfs;
use cairn_storage::sim::{mix64, ImageKind, SimDisk, SimRng};
use cairn_storage::{Db, Error};

use crate::harness::{check_opts, config, copy, crash_candidates, db_path, no_panic, opts, Failures, PAGE_SIZE};
use crate::model::{first_difference, recover_and_check, registry_bytes, registry_seq, Model};
use crate::workload::{clean_run, fresh_disk, run_workload, workloads};

#[derive(Default, Debug)]
struct FlipCounts {
    tried: u64,
    at_open: u64,
    at_open_named: u64,
    by_read: u64,
    by_check: u64,
    repaired: u64,
    harmless: u64,
    /// Flips in the last group commit's records, which no later record
    /// vouches for: the engine cannot tell them from a torn tail, and must
    /// treat them exactly as one (the log ends before the damaged record).
    tail_cut: u64,
}

enum FlipOutcome {
    Open { named: bool },
    Read,
    Check,
    Repaired,
    Harmless,
}

/// Where a flip went: the volume's page, or a log segment and offset.
#[derive(Clone, Debug)]
enum Target {
    Page(u32),
    Log(PathBuf),
}

/// Opens the flipped database and reads everything; wrong data returned as
/// Ok, a silent loss, or a panic is an `Err`.
fn flip_outcome(disk: &SimDisk, model: &Model, target: &Target) -> Result<FlipOutcome, String> {
    no_panic(|| {
        let db = match Db::open(&db_path(), &opts(disk)) {
            Err(e) => {
                let named = match (target, &e) {
                    (Target::Page(p), Error::Corrupt { page, .. }) => page.0 == *p,
                    (Target::Page(_), Error::CorruptFile { path, .. }) => path.ends_with("volume.cairn"),
                    (Target::Log(seg), Error::CorruptLog { path, .. }) => path == seg,
                    _ => false,
                };
                return Ok(FlipOutcome::Open { named });
            }
            Ok(db) => db,
        };
        let rebuilt = match target {
            Target::Page(p) => db.recovery().rebuilt.iter().any(|r| r.0 == *p),
            Target::Log(_) => false,
        };
        let mut read_error = false;
        let mut loss = Vec::new();
        let mut t = db.begin().map_err(|e| format!("begin: {e}"))?;
        let state = &model.acked;
        if let Some(reg) = state.registry {
            match t.read(reg) {
                Ok(b) if b == registry_bytes(state.seq) => {}
                Ok(b) => match registry_seq(&b) {
                    Some(seq) => loss.push(format!("the registry says txn {seq}, acknowledged {}", state.seq)),
                    None => return Err(format!("WRONG DATA: the registry {reg} reads garbled bytes")),
                },
                Err(_) => read_error = true,
            }
        }
        for (oid, want) in &state.objects {
            match t.read(*oid) {
                Ok(got) if &got == want => {}
                Ok(got) => return Err(format!("WRONG DATA: object {oid}: {}", first_difference(&got, want))),
                Err(Error::NotFound { .. }) => loss.push(format!("object {oid} not found")),
                Err(_) => read_error = true,
            }
        }
        if let Some(root) = state.root {
            match BTree::open(&mut t, root) {
                Ok(tree) => {
                    if tree.check(&mut t).is_err() {
                        read_error = true;
                    }
                    for (k, v) in &state.keys {
                        match tree.get(&mut t, k) {
                            Ok(Some(got)) if &got == v => {}
                            Ok(Some(got)) => {
                                return Err(format!(
                                    "WRONG DATA: key {:?}: {}",
                                    String::from_utf8_lossy(k),
                                    first_difference(&got, v)
                                ))
                            }
                            Ok(None) => loss.push(format!("key {:?} not found", String::from_utf8_lossy(k))),
                            Err(_) => read_error = true,
                        }
                    }
                }
                Err(_) => read_error = true,
            }
        }
        drop(t);
        let closed = db.close();
        let report = check_database(&db_path(), &check_opts(disk));
        if read_error {
            return Ok(FlipOutcome::Read);
        }
        if !report.is_ok() || closed.is_err() {
            return Ok(FlipOutcome::Check);
        }
        if !loss.is_empty() {
            return Err(format!("SILENT LOSS, nothing detected: {}", loss.join("; ")));
        }
        Ok(if rebuilt {
            FlipOutcome::Repaired
        } else {
            FlipOutcome::Harmless
        })
    })
}

/// In a log segment's bytes: the file offset from which no record is
/// vouched for (the `durable` field of the last valid record: every byte
/// before it had been fsynced when that record was appended), and the start
/// offset of every valid record.
fn segment_records(bytes: &[u8]) -> (u64, Vec<u64>) {
    let header = cairn_storage::wal::SEGMENT_HEADER_SIZE;
    let rec_header = cairn_storage::wal::RECORD_HEADER_SIZE;
    if bytes.len() < header {
        return (0, Vec::new());
    }
    let start = u64::from_le_bytes(bytes[16..24].try_into().unwrap());
    let (mut at, mut starts, mut vouched) = (header, Vec::new(), 0u64);
    while at + rec_header <= bytes.len() {
        let len = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap()) as usize;
        let durable = u64::from_le_bytes(bytes[at + 16..at + 24].try_into().unwrap());
        if at + rec_header + len > bytes.len() {
            break;
        }
        starts.push(at as u64);
        vouched = durable.saturating_sub(start) + header as u64;
        at += rec_header + len;
    }
    (vouched, starts)
}

/// Everything a database holds that the model knows of, as text: every OID
/// ever handed out (its bytes or its error kind) and every key.
fn snapshot(disk: &SimDisk, model: &Model) -> Result<String, String> {
    let db = Db::open(&db_path(), &opts(disk)).map_err(|e| format!("open: {e}"))?;
    let mut t = db.begin().map_err(|e| format!("begin: {e}"))?;
    let mut out = String::new();
    for oid in &model.ever {
        match t.read(*oid) {
            Ok(b) => out.push_str(&format!(
                "{oid}={:x}\n",
                mix64(b.iter().fold(b.len() as u64, |h, &x| mix64(h ^ u64::from(x))))
            )),
            Err(e) => out.push_str(&format!("{oid}: {e}\n")),
        }
    }
    if let Some(root) = model.acked.root {
        if let Ok(tree) = BTree::open(&mut t, root) {
            for k in model.acked.keys.keys() {
                out.push_str(&format!("{k:?}={:?}\n", tree.get(&mut t, k).map_err(|e| e.to_string())));
            }
        }
    }
    drop(t);
    db.close().map_err(|e| format!("close: {e}"))?;
    Ok(out)
}

fn flip_trials(base: &SimDisk, model: &Model, trials: u64, seed: u64, label: &str, f: &mut Failures) -> FlipCounts {
    let mut c = FlipCounts::default();
    let vol = db_path().join("volume.cairn");
    let segs: Vec<PathBuf> = base
        .file_paths()
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    for trial in 0..trials {
        let mut rng = SimRng::new(mix64(seed ^ mix64(trial)));
        let disk = copy(base);
        let multi = rng.chance(1, 3);
        let flips = if multi { rng.range(2, 9) } else { 1 };
        let (target, file, lo, hi) = if rng.chance(1, 2) || segs.is_empty() {
            let len = base.file_bytes(&vol).map_or(0, |b| b.len() as u64);
            let page = rng.below(len / PAGE_SIZE) as u32;
            let lo = u64::from(page) * PAGE_SIZE;
            (Target::Page(page), vol.clone(), lo, lo + PAGE_SIZE)
        } else {
            let seg = segs[rng.below(segs.len() as u64) as usize].clone();
            let len = base.file_bytes(&seg).map_or(0, |b| b.len() as u64);
            if len == 0 {
                continue;
            }
            let at = rng.below(len);
            // Multiple flips within one record's reach.
            let (lo, hi) = if multi { (at, (at + 64).min(len)) } else { (at, at + 1) };
            (Target::Log(seg.clone()), seg, lo, hi)
        };
        let mut spots = Vec::new();
        for _ in 0..flips {
            let off = rng.range(lo, hi);
            let bit = rng.below(8) as u8;
            disk.flip_bit(&file, off, bit);
            spots.push(format!("{off}.{bit}"));
        }
        c.tried += 1;
        // A flip in the last group commit's records, past what any record
        // vouches for: it must be handled exactly as a torn tail there.
        if let Target::Log(seg) = &target {
            let last_seg = segs.iter().max() == Some(seg);
            let bytes = base.file_bytes(seg).unwrap_or_default();
            let (vouched, starts) = segment_records(&bytes);
            let lowest = lo.min(hi.saturating_sub(1));
            let flipped_lowest = spots
                .iter()
                .filter_map(|s| s.split('.').next()?.parse::<u64>().ok())
                .min()
                .unwrap_or(lowest);
            if last_seg && flipped_lowest >= vouched {
                let cut = starts
                    .iter()
                    .copied()
                    .filter(|&r| r <= flipped_lowest)
                    .max()
                    .unwrap_or(vouched);
                let reference = copy(base);
                let file = reference.open(seg, false).expect("the segment");
                file.set_len(cut).expect("cut the reference's log");
                file.sync_data().expect("sync the reference");
                let outcome = no_panic(|| {
                    let want = snapshot(&reference, model)?;
                    let got = snapshot(&disk, model)?;
                    if got == want {
                        Ok(())
                    } else {
                        Err(format!(
                            "the log was not ended at the damaged record {cut}: {got} vs {want}"
                        ))
                    }
                });
                match outcome {
                    Ok(()) => c.tail_cut += 1,
                    Err(e) => f.add(
                        format!("CAIRN_FLIP_TRIAL={trial}"),
                        format!(
                            "{label}: flip trial {trial} in the unvouched tail of {}: {e}",
                            seg.display()
                        ),
                    ),
                }
                continue;
            }
        }
        match flip_outcome(&disk, model, &target) {
            Ok(FlipOutcome::Open { named }) => {
                c.at_open += 1;
                c.at_open_named += u64::from(named);
            }
            Ok(FlipOutcome::Read) => c.by_read += 1,
            Ok(FlipOutcome::Check) => c.by_check += 1,
            Ok(FlipOutcome::Repaired) => c.repaired += 1,
            Ok(FlipOutcome::Harmless) => c.harmless += 1,
            Err(e) => f.add(
                format!("CAIRN_FLIP_TRIAL={trial}"),
                format!(
                    "{label}: flip trial {trial} in {} (bytes.bits {}): {e}",
                    file.display(),
                    spots.join(",")
                ),
            ),
        }
    }
    c
}

#[test]
fn bit_flips_are_detected() {
    let cfg = config();
    let started = Instant::now();
    let mut f = Failures::new("bit_flips_are_detected", &cfg);
    let trials = cfg.points.map_or(300, |n| n as u64);
    // A cleanly closed database.
    let w = workloads(&cfg)[1];
    let (closed, model, _) = clean_run(&w);
    let closed = copy(&closed);
    let a = flip_trials(&closed, &model, trials, cfg.seed, "closed database", &mut f);
    // One awaiting recovery: a crash late in a workload, synced image.
    let w = workloads(&cfg)[0];
    let (disk, _, run) = clean_run(&w);
    let cands = crash_candidates(&disk.trace(), run.create_end_op);
    let at = cands[cands.len() * 4 / 5];
    let crashed = fresh_disk();
    crashed.set_crash_at(Some(at));
    let mut model = Model::default();
    drop(run_workload(&crashed, &w, &mut model).db);
    let awaiting = crashed.image(ImageKind::Synced, at);
    // The commit in flight, if any, is decided by a clean recovery; the
    // flips are judged against that.
    let which = recover_and_check(&copy(&awaiting), &model).expect("the unflipped image recovers");
    let model = model.resolved(which);
    let b = flip_trials(
        &awaiting,
        &model,
        trials,
        mix64(cfg.seed),
        "database awaiting recovery",
        &mut f,
    );
    for (label, c) in [("closed", &a), ("awaiting recovery", &b)] {
        eprintln!(
            "bit_flips_are_detected ({label}): {} flips tried, detected {} (at open {} of which {} named the page/log file, by a read {}, by check {}), \
             {} repaired from the log, {} harmless (never read), {} in the unvouched last group commit ended the log there as a torn tail would",
            c.tried,
            c.at_open + c.by_read + c.by_check,
            c.at_open,
            c.at_open_named,
            c.by_read,
            c.by_check,
            c.repaired,
            c.harmless,
            c.tail_cut
        );
    }
    eprintln!(
        "bit_flips_are_detected: {} failures, {:.1}s",
        f.list.len(),
        started.elapsed().as_secs_f64()
    );
    f.finish();
}
