//! The shared harness: the simulated disk and the database options every
//! run uses, the run configuration read from the environment
//! (`CAIRN_CRASH_POINTS`, `CAIRN_CRASH_SEED`, `CAIRN_CRASH_INDEX`,
//! `CAIRN_CRASH_IMAGE`, `CAIRN_SIM_VERBOSE`), the crash points of a trace,
//! the fixed defects a failure may name, and the collection of failures
//! with their replay commands.

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::Arc;

use cairn_storage::sim::{ImageKind, OpKind, SimDisk};
use cairn_storage::volume::VolumeOptions;
use cairn_storage::DbOptions;

pub(crate) const DB_DIR: &str = "/data/db";
pub(crate) const PAGE_SIZE: u64 = 4096;

pub(crate) fn db_path() -> PathBuf {
    PathBuf::from(DB_DIR)
}

pub(crate) fn opts(disk: &SimDisk) -> DbOptions {
    DbOptions {
        volume: VolumeOptions {
            vfs: Arc::new(disk.clone()),
            buffer_frames: 16,
            extent_pages: 4,
            ..VolumeOptions::default()
        },
        // Small segments and budgets: segments roll and are removed, and
        // transactions spill.
        wal_segment_bytes: 48 << 10,
        txn_memory_bytes: 8 * PAGE_SIZE as usize,
        background: false,
        ..DbOptions::default()
    }
}

pub(crate) fn check_opts(disk: &SimDisk) -> VolumeOptions {
    VolumeOptions {
        vfs: Arc::new(disk.clone()),
        ..VolumeOptions::default()
    }
}

/// A disk holding the same files, durably (a crash image has no pending
/// operations, so this is an exact copy of one).
pub(crate) fn copy(disk: &SimDisk) -> SimDisk {
    disk.image(ImageKind::Everything, 0)
}

// ---------------------------------------------------------------------------
// Configuration

pub(crate) struct Config {
    pub(crate) points: Option<usize>,
    pub(crate) seed: u64,
    pub(crate) index: Option<u64>,
    pub(crate) image: Option<ImageKind>,
}

pub(crate) fn config() -> Config {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let num = |k: &str| {
        var(k).map(|v| {
            let v = v.trim();
            match v.strip_prefix("0x") {
                Some(h) => u64::from_str_radix(h, 16),
                None => v.parse(),
            }
            .unwrap_or_else(|_| panic!("{k}={v} is not a number"))
        })
    };
    Config {
        points: num("CAIRN_CRASH_POINTS").map(|n| n as usize),
        seed: num("CAIRN_CRASH_SEED").unwrap_or(0xCA1E_0010),
        index: num("CAIRN_CRASH_INDEX"),
        image: var("CAIRN_CRASH_IMAGE")
            .map(|s| ImageKind::from_name(&s).unwrap_or_else(|| panic!("CAIRN_CRASH_IMAGE={s}: unknown kind"))),
    }
}

/// `CAIRN_SIM_VERBOSE=1`: say what each run did.
pub(crate) fn verbose() -> bool {
    std::env::var("CAIRN_SIM_VERBOSE").is_ok_and(|v| v != "0")
}

/// Up to `n` elements of `v`, evenly spread, first and last included.
pub(crate) fn sample<T: Copy>(v: &[T], n: usize) -> Vec<T> {
    if v.len() <= n {
        return v.to_vec();
    }
    if n <= 1 {
        return v.last().copied().into_iter().collect();
    }
    (0..n).map(|k| v[k * (v.len() - 1) / (n - 1)]).collect()
}

/// The engine defects this suite found (issue 10), all fixed, each with the
/// shape of failure it caused: a failure of that shape now names the fix
/// that regressed.
pub(crate) const FIXED_DEFECTS: &[(&str, &str)] = &[
    (
        "wal-hole",
        "a hole in the unsynced log tail followed by a valid record is CorruptLog at open, not the end of the log",
    ),
    (
        "commit-rollback",
        "a commit failing after its records are in the log is rolled back (pages freed) instead of poisoning",
    ),
    (
        "reopen-cached-log",
        "after a failed fsync, reopening trusts the log bytes in the page cache that were never made durable",
    ),
    (
        "dir-not-synced",
        "Db::create never fsyncs the parent of the database directory",
    ),
    (
        "create-retry",
        "after a crash during Db::create, open_or_create refuses (volume.cairn exists, no MANIFEST)",
    ),
    ("leftover-wal", "a leftover wal/ is replayed onto a new volume"),
    (
        "full-image-lsn",
        "a page whose LSN equals the checkpoint's redo LSN gets a diff, not a full image, at its next change, so a torn write of it cannot be repaired",
    ),
];

/// Failures collected over a test, printed together with replay commands.
pub(crate) struct Failures {
    test: &'static str,
    seed_var: String,
    pub(crate) list: Vec<String>,
}

impl Failures {
    pub(crate) fn new(test: &'static str, cfg: &Config) -> Failures {
        Failures {
            test,
            seed_var: format!("CAIRN_CRASH_SEED={:#x}", cfg.seed),
            list: Vec::new(),
        }
    }

    /// A failure with the shape of the fixed defect `bug` (see
    /// `FIXED_DEFECTS`): the message says which fix may have regressed.
    pub(crate) fn add_known(&mut self, bug: Option<&'static str>, at: String, msg: String) {
        let msg = match bug.and_then(|b| FIXED_DEFECTS.iter().find(|(k, _)| *k == b)) {
            Some((b, what)) => format!("{msg} [the shape of fixed defect {b}: {what}]"),
            None => msg,
        };
        self.add(at, msg)
    }

    pub(crate) fn add(&mut self, at: String, msg: String) {
        let replay = format!(
            "{} {at} cargo test --release -p cairn-storage --test crash_images {}",
            self.seed_var, self.test
        );
        self.list.push(format!("{msg}\n      replay: {replay}"));
    }

    /// Prints every failure (grouped: the first few of each message shape)
    /// and fails the test if there is any.
    pub(crate) fn finish(self) {
        if self.list.is_empty() {
            return;
        }
        let mut shapes: BTreeMap<String, Vec<&String>> = BTreeMap::new();
        for f in &self.list {
            let shape: String = f
                .lines()
                .next()
                .unwrap_or("")
                .chars()
                .filter(|c| !c.is_ascii_digit())
                .take(90)
                .collect();
            shapes.entry(shape).or_default().push(f);
        }
        eprintln!("\n{}: {} failures, {} kinds:", self.test, self.list.len(), shapes.len());
        for fs in shapes.values() {
            eprintln!("  [{} like this]", fs.len());
            for f in fs.iter().take(3) {
                eprintln!("  - {f}");
            }
        }
        panic!("{}: {} failures (see above)", self.test, self.list.len());
    }
}

pub(crate) fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "(a panic without a message)".into()
    }
}

/// Runs `f`, turning a panic into an error naming it.
pub(crate) fn no_panic<T>(f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => Err(format!("PANIC: {}", panic_message(&*p))),
    }
}

/// The mutating operations after `from` (a crash before a read leaves the
/// image a crash before the next mutation leaves), and the end.
pub(crate) fn crash_candidates(trace: &[OpKind], from: u64) -> Vec<u64> {
    let mut v: Vec<u64> = (from..trace.len() as u64)
        .filter(|&i| trace[i as usize].mutates())
        .collect();
    v.push(trace.len() as u64);
    v
}
