//! The seam between the OO1 workloads and the systems under test: one trait,
//! [`System`], that every system implements (Cairn embedded and its page-server
//! client, the in-memory floor, SQLite and LMDB today; Cairn's object and file server
//! clients later),
//! so the workloads, timing and report never change when a system is added.
//!
//! The harness drives a system through this life cycle:
//!
//! ```text
//! build(graph) ─► check ─► close ─► [ open_cold ─► measure × runs ─► close ] per measure
//! ```
//!
//! Every measure method receives the run's random choices from the harness,
//! calls [`null_proc`] on each part it visits, and returns [`Visits`], so
//! every system can be checked to have done exactly the same work.

use std::collections::BTreeMap;
use std::path::Path;

use super::generate::{Check, PartSpec};

/// The harness's errors.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Cairn failed.
    #[error("cairn: {0}")]
    Cairn(#[from] cairn::Error),
    /// SQLite failed.
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// LMDB (through `heed`) failed.
    #[error("lmdb: {0}")]
    Lmdb(#[from] heed::Error),
    /// A file operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done, and to which file.
        what: String,
        /// The cause.
        source: std::io::Error,
    },
    /// A system answered wrongly (a missing part, a visit count that differs).
    #[error("{system}: {reason}")]
    Wrong {
        /// The system.
        system: String,
        /// What was wrong.
        reason: String,
    },
    /// A server process (`cairn serve`) did not start or stop as it should.
    #[error("server process: {0}")]
    Server(String),
    /// A bad option.
    #[error("{0}")]
    InvalidArgument(String),
    /// Drawing the plot failed.
    #[error("plot: {0}")]
    Plot(String),
    /// A run failed; its databases were kept for a look.
    #[error("{source} (the failed run's databases are kept in {})", dir.display())]
    Kept {
        /// What failed.
        source: Box<Error>,
        /// Where the databases are.
        dir: std::path::PathBuf,
    },
}

/// The harness's result.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// An I/O error with its context.
    pub fn io(what: impl Into<String>, source: std::io::Error) -> Error {
        Error::Io {
            what: what.into(),
            source,
        }
    }
}

/// What one measure run visited: how many parts, and a digest of what the
/// null procedure saw, so runs can be compared across systems.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Visits {
    /// Parts visited (counting duplicates).
    pub count: u64,
    /// Wrapping sum of [`null_proc`]'s answers.
    pub digest: u64,
}

impl Visits {
    /// Visits one part: calls the null procedure and counts it.
    #[inline]
    pub fn visit(&mut self, x: i32, y: i32, kind: &str) {
        self.count += 1;
        self.digest = self.digest.wrapping_add(null_proc(x, y, kind));
    }
}

/// The paper's "null procedure" of the host language, called with each
/// visited part's x, y and type. It is never inlined, so every system pays
/// the same call; its answer (a cheap digest) lets runs be compared.
#[inline(never)]
pub fn null_proc(x: i32, y: i32, kind: &str) -> u64 {
    let k = kind.as_bytes().last().copied().unwrap_or(0);
    (x as u64).wrapping_mul(100_003) ^ (y as u64).wrapping_shl(20) ^ u64::from(k)
}

/// Cumulative counters of a system, by name (`object_faults`,
/// `object_hits`, `page_reads`, `page_hits`, `fsyncs`, `commits`; a server
/// client adds `round_trips`, `bytes_shipped`, `pages_shipped`,
/// `pages_revalidated`). The harness reports the
/// difference over each run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Counters(pub BTreeMap<&'static str, u64>);

impl Counters {
    /// Sets one counter.
    pub fn set(&mut self, name: &'static str, value: u64) -> &mut Self {
        self.0.insert(name, value);
        self
    }

    /// `self − before`, counter by counter.
    pub fn since(&self, before: &Counters) -> Counters {
        Counters(
            self.0
                .iter()
                .map(|(k, v)| (*k, v.saturating_sub(before.0.get(k).copied().unwrap_or(0))))
                .collect(),
        )
    }
}

/// A system under test. Ids are the parts' OO1 ids; a system must find a
/// part by id through an index (B+-tree or hash), never by arithmetic on the
/// id, and must follow connections both ways without a scan.
pub trait System {
    /// The name in reports: `cairn-embedded`, `cairn-page`, `in-memory`, `sqlite`, `lmdb`, ….
    fn name(&self) -> &'static str;

    /// Creates the database from `graph` and leaves it open. The harness
    /// times this as the load.
    fn build(&mut self, graph: &super::generate::Graph) -> Result<()>;

    /// Closes the database (durably: a later `open_cold` sees everything).
    fn close(&mut self) -> Result<()>;

    /// Opens the database cold: empty caches, its files evicted from the
    /// operating system's page cache (a restarted server, for servers).
    fn open_cold(&mut self) -> Result<()>;

    /// Fetches each part by id through the index and visits it.
    fn lookup(&mut self, ids: &[u32]) -> Result<Visits>;

    /// Finds part `start` by id, then follows `to` connections depth-first
    /// for `hops` hops, visiting every part reached (duplicates included).
    fn traversal(&mut self, start: u32, hops: u32) -> Result<Visits>;

    /// As `traversal`, following connections backwards (`from`).
    fn reverse_traversal(&mut self, start: u32, hops: u32) -> Result<Visits>;

    /// Adds `parts` (ids above every existing one, connected to existing
    /// parts or earlier ones of the batch), updates the index and the reverse
    /// links, and commits durably. Visits each new part's x, y (the paper's
    /// "null procedure to obtain the x, y position").
    fn insert(&mut self, parts: &[PartSpec]) -> Result<Visits>;

    /// Removes what `insert(parts)` added, durably, so the next run starts
    /// from the original database. Not timed.
    fn remove(&mut self, parts: &[PartSpec]) -> Result<()>;

    /// Reads the whole database back into a [`Check`] (not timed).
    fn check(&mut self) -> Result<Check>;

    /// Bytes the database occupies on disk, if it has a disk.
    fn size_on_disk_bytes(&self) -> Option<u64>;

    /// The counters now (cumulative since open).
    fn counters(&self) -> Counters;
}

/// Bytes of every file under `dir`.
pub fn dir_size_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_size_bytes(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

/// The calling thread's major page faults so far (`getrusage`): reads of a
/// memory-mapped file that waited for the disk. A system that reads its
/// files through a map (LMDB, SQLite with `mmap_size`) reports them as
/// `major_faults`; one fault may bring in many pages (the kernel reads
/// ahead).
pub fn major_faults() -> u64 {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `ru` is a valid, writable `rusage` for the duration of the call.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, ru.as_mut_ptr()) };
    if rc != 0 {
        return 0;
    }
    // SAFETY: getrusage succeeded, so it filled `ru` (which was zeroed before).
    let ru = unsafe { ru.assume_init() };
    ru.ru_majflt.max(0) as u64
}

/// Evicts every file under `dir` from the operating system's page cache:
/// writes back whatever is dirty, then `posix_fadvise(POSIX_FADV_DONTNEED)`.
/// Call it with the database closed.
pub fn evict_os_cache(dir: &Path) -> Result<()> {
    let entries = std::fs::read_dir(dir).map_err(|e| Error::io(format!("listing {}", dir.display()), e))?;
    for e in entries.flatten() {
        let path = e.path();
        if path.is_dir() {
            evict_os_cache(&path)?;
        } else {
            evict_file(&path)?;
        }
    }
    Ok(())
}

/// Evicts one file from the operating system's page cache (see
/// [`evict_os_cache`]). It opens and closes the file, and closing a
/// descriptor releases every POSIX (`fcntl`) lock this process holds on the
/// file: call it on a file of an open database only if the database holds
/// no such lock on that file.
pub fn evict_file(path: &Path) -> Result<()> {
    use std::os::fd::AsRawFd;
    let f = match std::fs::OpenOptions::new().read(true).write(true).open(path) {
        Ok(f) => f,
        // Gone since the listing (a removed log segment): nothing to evict.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io(format!("opening {}", path.display()), e)),
    };
    // DONTNEED drops only clean pages, so write dirty ones back first.
    f.sync_data()
        .map_err(|e| Error::io(format!("syncing {}", path.display()), e))?;
    // SAFETY: `f` is an open file for the duration of the call; fadvise
    // reads no memory of ours.
    let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if rc != 0 {
        return Err(Error::io(
            format!("posix_fadvise on {}", path.display()),
            std::io::Error::from_raw_os_error(rc),
        ));
    }
    Ok(())
}
