//! The commit benchmark: commits per second and fsyncs per commit with 1, 4
//! and 16 concurrent committers, on an embedded `Db`.
//!
//! Each committer loops: begin, create (until it owns [`OBJECTS_PER_THREAD`]
//! objects) or update one of its ~100-byte objects, commit, timing each
//! transaction from begin to the return of commit. Every commit is durable
//! (the log is fsynced; group commit lets one fsync serve several
//! committers), so `fsyncs / commit` below 1 is group commit at work.
//!
//! Each committer writes in its own group, so committers never wait on each
//! other's page locks (locks are per page, held through the commit's
//! fsync): the benchmark measures the log, not lock contention. Deadlocks
//! and lock timeouts, should any occur, are retried and counted.
//!
//! Each setting runs on a fresh database in its own directory under the
//! benchmark directory, removed afterwards.

use std::path::{Path, PathBuf};
use std::sync::{Barrier, OnceLock};
use std::time::{Duration, Instant};

use cairn::storage::{Db, DbOptions, Error, GroupId, Oid};

/// Objects each committer creates before it switches to updates.
pub const OBJECTS_PER_THREAD: usize = 64;
/// Bytes of each object.
pub const OBJECT_BYTES: usize = 100;

/// What to run.
#[derive(Clone, Debug)]
pub struct CommitOptions {
    /// Where to put the databases; a fresh temporary directory if `None`.
    pub dir: Option<PathBuf>,
    /// Measured seconds per setting.
    pub seconds: f64,
    /// Committer counts to measure, in order.
    pub threads: Vec<usize>,
}

impl Default for CommitOptions {
    fn default() -> Self {
        CommitOptions {
            dir: None,
            seconds: 3.0,
            threads: vec![1, 4, 16],
        }
    }
}

/// One setting's result.
#[derive(Clone, Debug, PartialEq)]
pub struct CommitResult {
    /// Concurrent committers.
    pub threads: usize,
    /// Transactions committed.
    pub commits: u64,
    /// Wall time measured.
    pub seconds: f64,
    /// Commits per second.
    pub commits_per_s: f64,
    /// Log fsyncs during the measurement (`WalStats::fsyncs`).
    pub fsyncs: u64,
    /// fsyncs per commit.
    pub fsyncs_per_commit: f64,
    /// Mean commit latency (begin to commit returned), microseconds.
    pub mean_us: f64,
    /// 99th-percentile commit latency, microseconds.
    pub p99_us: f64,
    /// Transactions retried after a deadlock or lock timeout.
    pub retries: u64,
}

/// The whole benchmark's result.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CommitReport {
    /// One result per committer count, in the order asked.
    pub results: Vec<CommitResult>,
}

/// The machine the benchmark ran on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Machine {
    /// Logical cores available.
    pub cores: usize,
    /// Physical memory in bytes (0 if unknown).
    pub memory_bytes: u64,
}

/// Describes this machine (memory from `/proc/meminfo` where there is one).
pub fn machine() -> Machine {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let memory_bytes = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("MemTotal:"))?;
            let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kib * 1024)
        })
        .unwrap_or(0);
    Machine { cores, memory_bytes }
}

/// A directory removed when dropped.
struct ScratchDir(PathBuf);

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn scratch_dir(parent: Option<&Path>, name: &str) -> std::io::Result<ScratchDir> {
    let base = parent.map_or_else(std::env::temp_dir, Path::to_path_buf);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let dir = base.join(format!("cairn-bench-{name}-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(ScratchDir(dir))
}

/// Runs the benchmark.
pub fn run(opts: &CommitOptions) -> Result<CommitReport, Error> {
    let mut report = CommitReport::default();
    for &threads in &opts.threads {
        let dir = scratch_dir(opts.dir.as_deref(), &format!("commit-{threads}"))
            .map_err(|e| Error::io("create benchmark directory", opts.dir.clone().unwrap_or_default(), e))?;
        report.results.push(run_one(&dir.0.join("db"), threads, opts.seconds)?);
    }
    Ok(report)
}

/// Per-committer tallies.
#[derive(Default)]
struct Tally {
    latencies_us: Vec<u32>,
    retries: u64,
}

fn committer(db: &Db, group: GroupId, deadline: Instant) -> Result<Tally, Error> {
    let mut objects: Vec<Oid> = Vec::with_capacity(OBJECTS_PER_THREAD);
    let mut tally = Tally::default();
    let mut bytes = [0u8; OBJECT_BYTES];
    let mut n: u64 = 0;
    while Instant::now() < deadline {
        n += 1;
        bytes[..8].copy_from_slice(&n.to_le_bytes());
        let start = Instant::now();
        let result = (|| {
            let mut txn = db.begin()?;
            let created = if objects.len() < OBJECTS_PER_THREAD {
                Some(txn.create(group, &bytes)?)
            } else {
                txn.update(objects[(n as usize) % objects.len()], &bytes)?;
                None
            };
            txn.commit()?;
            Ok::<_, Error>(created)
        })();
        match result {
            Ok(created) => {
                let us = start.elapsed().as_micros();
                tally.latencies_us.push(u32::try_from(us).unwrap_or(u32::MAX));
                objects.extend(created);
            }
            Err(Error::Deadlock { .. } | Error::LockTimeout { .. }) => tally.retries += 1,
            Err(e) => return Err(e),
        }
    }
    Ok(tally)
}

fn run_one(dir: &Path, threads: usize, seconds: f64) -> Result<CommitResult, Error> {
    let opts = DbOptions {
        background: false,
        ..DbOptions::default()
    };
    let db = Db::create(dir, &opts)?;
    // Groups are created before the clock starts (each is made durable).
    let groups = (0..threads)
        .map(|i| db.create_group(&format!("committer-{i}")))
        .collect::<Result<Vec<GroupId>, Error>>()?;
    let start_line = Barrier::new(threads + 1);
    let deadline = OnceLock::<Instant>::new();
    let (tallies, fsyncs, elapsed) = std::thread::scope(|s| {
        let handles: Vec<_> = groups
            .iter()
            .map(|&group| {
                let (db, start_line, deadline) = (&db, &start_line, &deadline);
                s.spawn(move || {
                    start_line.wait();
                    committer(db, group, *deadline.get().expect("set before the start line"))
                })
            })
            .collect();
        let before = db.stats().wal.fsyncs;
        let started = Instant::now();
        let _ = deadline.set(started + Duration::from_secs_f64(seconds));
        start_line.wait();
        let tallies: Vec<Result<Tally, Error>> = handles
            .into_iter()
            .map(|h| h.join().expect("a committer panicked"))
            .collect();
        let elapsed = started.elapsed();
        (tallies, db.stats().wal.fsyncs - before, elapsed)
    });
    db.close()?;
    let mut latencies: Vec<u32> = Vec::new();
    let mut retries = 0;
    for t in tallies {
        let t = t?;
        latencies.extend(t.latencies_us);
        retries += t.retries;
    }
    latencies.sort_unstable();
    let commits = latencies.len() as u64;
    let secs = elapsed.as_secs_f64();
    let mean_us = if commits == 0 {
        0.0
    } else {
        latencies.iter().map(|&l| f64::from(l)).sum::<f64>() / commits as f64
    };
    let p99_us = percentile(&latencies, 0.99);
    Ok(CommitResult {
        threads,
        commits,
        seconds: secs,
        commits_per_s: commits as f64 / secs,
        fsyncs,
        fsyncs_per_commit: if commits == 0 {
            0.0
        } else {
            fsyncs as f64 / commits as f64
        },
        mean_us,
        p99_us,
        retries,
    })
}

/// The `q` quantile of sorted samples (nearest rank), 0 when empty.
fn percentile(sorted: &[u32], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    f64::from(sorted[rank - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_is_nearest_rank() {
        assert_eq!(percentile(&[], 0.99), 0.0);
        assert_eq!(percentile(&[5], 0.99), 5.0);
        let v: Vec<u32> = (1..=100).collect();
        assert_eq!(percentile(&v, 0.99), 99.0);
        assert_eq!(percentile(&v, 1.0), 100.0);
    }

    #[test]
    fn a_short_run_commits_and_fsyncs() {
        let dir = std::env::temp_dir();
        let report = run(&CommitOptions {
            dir: Some(dir),
            seconds: 0.2,
            threads: vec![1, 2],
        })
        .unwrap();
        assert_eq!(report.results.len(), 2);
        for r in &report.results {
            assert!(r.commits > 0, "{r:?}");
            assert!(r.fsyncs > 0, "{r:?}");
            assert!(r.p99_us >= r.mean_us.min(r.p99_us));
        }
    }
}
