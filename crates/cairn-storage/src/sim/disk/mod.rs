//! The simulated disk: a [`Vfs`](crate::io::Vfs) whose files live in memory,
//! with a record of what is durable, fault injection, and crash images.
//!
//! # Model
//!
//! ```text
//!  file (by id)      durable bytes ── pending: [Write{off,data} | SetLen{len}] … (in order)
//!                    current bytes = durable + pending (+ writes lost by a failed fsync)
//!  namespace         durable names/dirs ── pending directory changes, each in one directory:
//!                    Create{path,id} │ MkDir{path} │ Rename{from,to,id} │ Remove{path,id}
//! ```
//!
//! | operation | effect |
//! |---|---|
//! | `write_all_at`, `set_len` | change the current bytes; queue a pending operation |
//! | `sync_data` | the file's pending operations become durable, in order |
//! | `open(create)`, `rename`, `remove_file`, `create_dir_all` | change the current namespace; queue a directory change in the parent directory |
//! | `sync_dir(d)` | the pending changes of directory `d` become durable, in order |
//! | failed `sync_data` (injected EIO) | the file's pending writes are **lost** (never durable) but stay visible to reads — Linux's behaviour after a writeback error |
//! | `lock_exclusive` | an in-memory lock table; a second lock of a held path is refused |
//!
//! A name is in a crash image only if its whole chain of parent directories
//! is; the root `/` always is. A rename is modelled as one entry change in the
//! directory of its target (the engine renames only within a directory).
//!
//! # Crash images ([`SimDisk::image`])
//!
//! From the recorded state at any moment (usually after a simulated crash,
//! [`SimDisk::set_crash_at`]), a new disk holding what a power loss could
//! leave: durable bytes plus some of the pending operations, per
//! [`ImageKind`]. A write can be torn at any 512-byte sector boundary
//! ([`SECTOR_SIZE`], absolute file offsets): a part of it on either side of
//! the boundary survives, the other part keeps the old bytes. Writes within
//! one sector are atomic. Each directory keeps a prefix of its pending
//! changes (a journaling file system commits them in order). The image has no
//! pending operations and no locks (a crash drops every lock).
//!
//! # Operation indices, faults, crashes
//!
//! Every call that could fail counts as one I/O operation, numbered from 0 in
//! call order across all files (`exists` does not count: it cannot fail).
//! [`OpKind::mutates`] tells which operations change the disk; a crash before
//! a read leaves the same image as a crash before the next mutating one.
//! - **Crash at op `i`** ([`SimDisk::set_crash_at`]): operation `i` and every
//!   later one fail (the machine is off); nothing more is recorded.
//! - **Faults** ([`SimDisk::add_fault`]): the first operation at or after
//!   `from_op` that the fault applies to fails (EIO on a read, a write or an
//!   fsync; ENOSPC on an extending write or `set_len`; a short write that
//!   writes part of the buffer, then ENOSPC); once, or forever after.

mod vfs;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use super::{mix64, SimRng};

/// The unit of atomicity of a write: a crash tears writes only at these
/// boundaries (absolute file offsets).
pub const SECTOR_SIZE: u64 = 512;

const EIO: i32 = 5;
const ENOSPC: i32 = 28;

/// The kind of an I/O operation, as recorded in the trace.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum OpKind {
    /// `open` of an existing file.
    Open,
    /// `open` with `create` (a new directory entry).
    Create,
    /// `read_exact_at`.
    Read,
    /// `write_all_at`.
    Write,
    /// `sync_data`.
    SyncData,
    /// `len`.
    Len,
    /// `set_len`.
    SetLen,
    /// `sync_dir`.
    SyncDir,
    /// `create_dir_all`.
    CreateDir,
    /// `rename`.
    Rename,
    /// `remove_file`.
    Remove,
    /// `list_dir`.
    ListDir,
    /// `lock_exclusive`.
    Lock,
}

impl OpKind {
    /// True if the operation can change what a crash image holds.
    pub fn mutates(self) -> bool {
        !matches!(self, OpKind::Open | OpKind::Read | OpKind::Len | OpKind::ListDir)
    }
}

/// Which failure a [`Fault`] injects, and into which operations.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum FaultKind {
    /// EIO on a read.
    ReadEio,
    /// EIO on a write (nothing written).
    WriteEio,
    /// EIO on `sync_data` or `sync_dir` (a file's pending writes are lost).
    SyncEio,
    /// ENOSPC on a write that extends its file (nothing written).
    WriteEnospc,
    /// ENOSPC on a `set_len` that grows its file.
    ExtendEnospc,
    /// A write of more than one byte stores only its first part (half,
    /// rounded down to a sector when it spans one), then fails with ENOSPC.
    ShortWrite,
}

impl FaultKind {
    /// Every kind, for tests that try them all.
    pub const ALL: [FaultKind; 6] = [
        FaultKind::ReadEio,
        FaultKind::WriteEio,
        FaultKind::SyncEio,
        FaultKind::WriteEnospc,
        FaultKind::ExtendEnospc,
        FaultKind::ShortWrite,
    ];

    /// True if this fault can hit an operation of `kind`; `grows` says the
    /// operation extends its file, `len` is a write's length.
    pub fn applies(self, kind: OpKind, grows: bool, len: usize) -> bool {
        match self {
            FaultKind::ReadEio => kind == OpKind::Read,
            FaultKind::WriteEio => kind == OpKind::Write,
            FaultKind::SyncEio => matches!(kind, OpKind::SyncData | OpKind::SyncDir),
            FaultKind::WriteEnospc => kind == OpKind::Write && grows,
            FaultKind::ExtendEnospc => kind == OpKind::SetLen && grows,
            FaultKind::ShortWrite => kind == OpKind::Write && len > 1,
        }
    }
}

/// A fault to inject (see [`SimDisk::add_fault`]).
#[derive(Clone, Debug)]
pub struct Fault {
    /// What fails.
    pub kind: FaultKind,
    /// The first operation index it may hit.
    pub from_op: u64,
    /// Fail every applicable operation from then on, not only the first.
    pub forever: bool,
    /// Only operations on paths containing this string (`None`: any path).
    pub path_contains: Option<String>,
}

/// What a crash image keeps of the pending (unsynced) operations.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ImageKind {
    /// Nothing unsynced: only what fsyncs made durable.
    Synced,
    /// Everything, as after a process crash with the machine still up.
    Everything,
    /// Each pending file operation kept or dropped at random, a kept write
    /// sometimes torn at a sector boundary; each directory keeps a random
    /// prefix of its pending changes.
    Random,
    /// Everything, but the last pending write is torn at a random sector
    /// boundary (only sectors before it survive; none if it fits in one).
    TornLast,
}

impl ImageKind {
    /// Every kind, worst first.
    pub const ALL: [ImageKind; 4] = [
        ImageKind::Synced,
        ImageKind::Random,
        ImageKind::TornLast,
        ImageKind::Everything,
    ];

    /// The lower-case name used in replay commands.
    pub fn name(self) -> &'static str {
        match self {
            ImageKind::Synced => "synced",
            ImageKind::Everything => "everything",
            ImageKind::Random => "random",
            ImageKind::TornLast => "torn-last",
        }
    }

    /// Parses [`ImageKind::name`].
    pub fn from_name(s: &str) -> Option<ImageKind> {
        ImageKind::ALL.into_iter().find(|k| k.name() == s)
    }
}

impl fmt::Display for ImageKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Counters of a simulated disk.
#[derive(Clone, Copy, Debug, Default)]
pub struct SimStats {
    /// I/O operations counted (the next operation's index).
    pub ops: u64,
    /// Writes done.
    pub writes: u64,
    /// `sync_data` and `sync_dir` calls that succeeded.
    pub syncs: u64,
    /// Faults that fired.
    pub faults_fired: u64,
    /// The index of the first operation a fault hit, if any.
    pub first_fault_op: Option<u64>,
}

type FileId = u64;

#[derive(Clone, Debug)]
enum Pending {
    Write { offset: u64, data: Vec<u8>, seq: u64 },
    SetLen { len: u64 },
}

#[derive(Clone, Debug, Default)]
struct FileData {
    durable: Vec<u8>,
    current: Vec<u8>,
    pending: Vec<Pending>,
}

#[derive(Clone, Debug)]
enum DirChange {
    Create { path: PathBuf, id: FileId },
    MkDir { path: PathBuf },
    Rename { from: PathBuf, to: PathBuf, id: FileId },
    Remove { path: PathBuf, id: FileId },
}

#[derive(Clone, Debug)]
struct Namespace {
    names: BTreeMap<PathBuf, FileId>,
    dirs: BTreeSet<PathBuf>,
}

impl Namespace {
    fn root() -> Namespace {
        Namespace {
            names: BTreeMap::new(),
            dirs: BTreeSet::from([PathBuf::from("/")]),
        }
    }

    fn apply(&mut self, c: &DirChange) {
        match c {
            DirChange::Create { path, id } => {
                self.names.insert(path.clone(), *id);
            }
            DirChange::MkDir { path } => {
                self.dirs.insert(path.clone());
            }
            DirChange::Rename { from, to, id } => {
                // Only if the source entry is there (its creation may be lost).
                if self.names.get(from) == Some(id) {
                    self.names.remove(from);
                    self.names.insert(to.clone(), *id);
                }
            }
            DirChange::Remove { path, id } => {
                if self.names.get(path) == Some(id) {
                    self.names.remove(path);
                }
            }
        }
    }

    /// Drops names and directories whose parent chain is not all there.
    fn prune(&mut self) {
        let reachable = |dirs: &BTreeSet<PathBuf>, p: &Path| p.ancestors().skip(1).all(|a| dirs.contains(a));
        loop {
            let before = self.dirs.len();
            let dirs = self.dirs.clone();
            self.dirs.retain(|d| d == Path::new("/") || reachable(&dirs, d));
            if self.dirs.len() == before {
                break;
            }
        }
        let dirs = &self.dirs;
        self.names.retain(|p, _| reachable(dirs, p));
    }
}

struct ArmedFault {
    fault: Fault,
    spent: bool,
}

struct State {
    files: HashMap<FileId, FileData>,
    next_id: FileId,
    current: Namespace,
    durable: Namespace,
    /// Pending directory changes, each with the directory it belongs to.
    pending_dir: Vec<(PathBuf, DirChange)>,
    locks: HashMap<PathBuf, (u64, String)>,
    next_token: u64,
    seq: u64,
    trace: Option<Vec<OpKind>>,
    crash_at: Option<u64>,
    crashed_at: Option<u64>,
    faults: Vec<ArmedFault>,
    first_fault: Option<(u64, OpKind, PathBuf)>,
    stats: SimStats,
}

/// What [`State::begin`] decided for an operation.
enum Verdict {
    Proceed,
    Fail(io::Error),
    Short,
}

impl State {
    fn new() -> State {
        State {
            files: HashMap::new(),
            next_id: 1,
            current: Namespace::root(),
            durable: Namespace::root(),
            pending_dir: Vec::new(),
            locks: HashMap::new(),
            next_token: 1,
            seq: 0,
            trace: None,
            crash_at: None,
            crashed_at: None,
            faults: Vec::new(),
            first_fault: None,
            stats: SimStats::default(),
        }
    }

    /// Counts one operation and decides whether it fails.
    fn begin(&mut self, kind: OpKind, path: &Path, grows: bool, len: usize) -> Verdict {
        if let Some(at) = self.crashed_at {
            return Verdict::Fail(crash_error(at));
        }
        let n = self.stats.ops;
        self.stats.ops += 1;
        if let Some(t) = &mut self.trace {
            t.push(kind);
        }
        if self.crash_at.is_some_and(|at| n >= at) {
            self.crashed_at = Some(n);
            return Verdict::Fail(crash_error(n));
        }
        for f in &mut self.faults {
            if f.spent || n < f.fault.from_op || !f.fault.kind.applies(kind, grows, len) {
                continue;
            }
            if let Some(s) = &f.fault.path_contains {
                if !path.to_string_lossy().contains(s.as_str()) {
                    continue;
                }
            }
            f.spent = !f.fault.forever;
            self.stats.faults_fired += 1;
            self.stats.first_fault_op.get_or_insert(n);
            self.first_fault.get_or_insert_with(|| (n, kind, path.to_path_buf()));
            return match f.fault.kind {
                FaultKind::ReadEio | FaultKind::WriteEio | FaultKind::SyncEio => {
                    Verdict::Fail(io::Error::from_raw_os_error(EIO))
                }
                FaultKind::WriteEnospc | FaultKind::ExtendEnospc => Verdict::Fail(io::Error::from_raw_os_error(ENOSPC)),
                FaultKind::ShortWrite => Verdict::Short,
            };
        }
        Verdict::Proceed
    }

    fn proceed(&mut self, kind: OpKind, path: &Path) -> io::Result<()> {
        match self.begin(kind, path, false, 0) {
            Verdict::Proceed => Ok(()),
            Verdict::Fail(e) => Err(e),
            Verdict::Short => unreachable!("a short write applies to writes only"),
        }
    }

    fn file(&mut self, id: FileId) -> &mut FileData {
        self.files.get_mut(&id).expect("an open file's data is never dropped")
    }

    fn new_entry(&mut self, path: &Path) -> io::Result<FileId> {
        let parent = parent_of(path)?;
        if !self.current.dirs.contains(&parent) {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("no directory {}", parent.display()),
            ));
        }
        if self.current.names.contains_key(path) || self.current.dirs.contains(path) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} exists", path.display()),
            ));
        }
        let id = self.next_id;
        self.next_id += 1;
        self.files.insert(id, FileData::default());
        self.current.names.insert(path.to_path_buf(), id);
        self.pending_dir.push((
            parent,
            DirChange::Create {
                path: path.to_path_buf(),
                id,
            },
        ));
        Ok(id)
    }

    fn write(&mut self, id: FileId, offset: u64, data: &[u8]) {
        self.seq += 1;
        let seq = self.seq;
        self.stats.writes += 1;
        let f = self.file(id);
        apply_write(&mut f.current, offset, data);
        f.pending.push(Pending::Write {
            offset,
            data: data.to_vec(),
            seq,
        });
    }
}

fn crash_error(at: u64) -> io::Error {
    io::Error::other(format!("simulated crash: the power failed at I/O operation {at}"))
}

fn parent_of(path: &Path) -> io::Result<PathBuf> {
    path.parent()
        .map(Path::to_path_buf)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the root has no parent"))
}

fn apply_write(buf: &mut Vec<u8>, offset: u64, data: &[u8]) {
    let off = usize::try_from(offset).expect("simulated files fit in memory");
    let end = off + data.len();
    if buf.len() < end {
        buf.resize(end, 0);
    }
    buf[off..end].copy_from_slice(data);
}

fn apply(buf: &mut Vec<u8>, p: &Pending) {
    match p {
        Pending::Write { offset, data, .. } => apply_write(buf, *offset, data),
        Pending::SetLen { len } => buf.resize(usize::try_from(*len).expect("fits"), 0),
    }
}

/// Applies part of a write torn at a random sector boundary inside it: the
/// part before the boundary (`prefix`) or the part after it. A write inside
/// one sector has only its start as a boundary, so its prefix is empty.
fn apply_torn(buf: &mut Vec<u8>, offset: u64, data: &[u8], rng: &mut SimRng, prefix: bool) {
    let end = offset + data.len() as u64;
    let first = (offset / SECTOR_SIZE + 1) * SECTOR_SIZE;
    let mut bounds = vec![offset];
    bounds.extend((first..end).step_by(SECTOR_SIZE as usize));
    let b = bounds[rng.below(bounds.len() as u64) as usize];
    let cut = (b - offset) as usize;
    if prefix {
        apply_write(buf, offset, &data[..cut]);
    } else {
        apply_write(buf, b, &data[cut..]);
    }
}

/// The simulated disk; cheap to clone (clones share the disk).
#[derive(Clone)]
pub struct SimDisk {
    state: Arc<Mutex<State>>,
}

impl fmt::Debug for SimDisk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let st = self.lock();
        f.debug_struct("SimDisk")
            .field("ops", &st.stats.ops)
            .field("files", &st.current.names.len())
            .field("crashed_at", &st.crashed_at)
            .finish()
    }
}

impl Default for SimDisk {
    fn default() -> Self {
        SimDisk::new()
    }
}

impl SimDisk {
    /// An empty disk: only the root directory `/`, durable.
    pub fn new() -> SimDisk {
        SimDisk {
            state: Arc::new(Mutex::new(State::new())),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Creates `dir` and its parents durably, outside the operation count (a
    /// directory that existed before the test began).
    pub fn make_durable_dir(&self, dir: &Path) {
        let mut st = self.lock();
        for a in dir.ancestors() {
            st.current.dirs.insert(a.to_path_buf());
            st.durable.dirs.insert(a.to_path_buf());
        }
    }

    /// Starts (or stops) recording the kind of every operation.
    pub fn record_trace(&self, on: bool) {
        self.lock().trace = on.then(Vec::new);
    }

    /// The kinds of the operations recorded since [`SimDisk::record_trace`].
    pub fn trace(&self) -> Vec<OpKind> {
        self.lock().trace.clone().unwrap_or_default()
    }

    /// From operation `at` on, every operation fails: the machine lost power.
    pub fn set_crash_at(&self, at: Option<u64>) {
        self.lock().crash_at = at;
    }

    /// Crashes now: every later operation fails.
    pub fn crash_now(&self) {
        let mut st = self.lock();
        let n = st.stats.ops;
        st.crashed_at.get_or_insert(n);
    }

    /// The operation the crash happened at, if it has.
    pub fn crashed_at(&self) -> Option<u64> {
        self.lock().crashed_at
    }

    /// Arms a fault.
    pub fn add_fault(&self, fault: Fault) {
        self.lock().faults.push(ArmedFault { fault, spent: false });
    }

    /// Disarms every fault (the disk is repaired; a crash stays a crash).
    pub fn clear_faults(&self) {
        self.lock().faults.clear();
    }

    /// The counters.
    pub fn stats(&self) -> SimStats {
        self.lock().stats
    }

    /// The first operation a fault hit: its index, kind and path.
    pub fn first_fault(&self) -> Option<(u64, OpKind, PathBuf)> {
        self.lock().first_fault.clone()
    }

    /// The paths of every file (current namespace), sorted.
    pub fn file_paths(&self) -> Vec<PathBuf> {
        self.lock().current.names.keys().cloned().collect()
    }

    /// The current bytes of a file (what a read sees), outside the count.
    pub fn file_bytes(&self, path: &Path) -> Option<Vec<u8>> {
        let st = self.lock();
        let id = st.current.names.get(path)?;
        Some(st.files[id].current.clone())
    }

    /// Pending (unsynced) file operations and directory changes.
    pub fn pending_counts(&self) -> (usize, usize) {
        let st = self.lock();
        let files: usize = st.current.names.values().map(|id| st.files[id].pending.len()).sum();
        (files, st.pending_dir.len())
    }

    /// Flips bit `bit` (0..8) of byte `offset` of a file, in its durable and
    /// current bytes alike (damage at rest). False if there is no such byte.
    pub fn flip_bit(&self, path: &Path, offset: u64, bit: u8) -> bool {
        let mut st = self.lock();
        let Some(&id) = st.current.names.get(path) else {
            return false;
        };
        let f = st.file(id);
        let off = offset as usize;
        let mask = 1u8 << (bit & 7);
        let mut done = false;
        for buf in [&mut f.durable, &mut f.current] {
            if let Some(b) = buf.get_mut(off) {
                *b ^= mask;
                done = true;
            }
        }
        done
    }

    /// A new disk holding what a power loss now could leave (see the module
    /// docs and [`ImageKind`]); random choices come from `seed`.
    pub fn image(&self, kind: ImageKind, seed: u64) -> SimDisk {
        let st = self.lock();
        let mut rng = SimRng::new(mix64(seed ^ 0x1AA6_E000));
        // The namespace: durable entries plus a prefix of each directory's
        // pending changes.
        let mut ns = st.durable.clone();
        let mut keep_upto: HashMap<&Path, usize> = HashMap::new();
        if kind == ImageKind::Random {
            let mut per_dir: BTreeMap<&Path, usize> = BTreeMap::new();
            for (d, _) in &st.pending_dir {
                *per_dir.entry(d.as_path()).or_default() += 1;
            }
            for (d, n) in per_dir {
                keep_upto.insert(d, rng.below(n as u64 + 1) as usize);
            }
        }
        let mut seen: HashMap<&Path, usize> = HashMap::new();
        for (d, c) in &st.pending_dir {
            let i = seen.entry(d.as_path()).or_default();
            *i += 1;
            let keep = match kind {
                ImageKind::Synced => false,
                ImageKind::Everything | ImageKind::TornLast => true,
                ImageKind::Random => *i <= keep_upto[d.as_path()],
            };
            if keep {
                ns.apply(c);
            }
        }
        ns.prune();
        // The last pending write of all, for TornLast.
        let last_seq = st
            .files
            .values()
            .flat_map(|f| f.pending.iter())
            .filter_map(|p| match p {
                Pending::Write { seq, .. } => Some(*seq),
                Pending::SetLen { .. } => None,
            })
            .max();
        let mut ids: Vec<FileId> = ns.names.values().copied().collect();
        ids.sort_unstable();
        ids.dedup();
        let mut files = HashMap::new();
        for id in ids {
            let f = &st.files[&id];
            let mut bytes = f.durable.clone();
            for p in &f.pending {
                match (kind, p) {
                    (ImageKind::Synced, _) => {}
                    (ImageKind::Everything, _) => apply(&mut bytes, p),
                    (ImageKind::TornLast, Pending::Write { offset, data, seq }) if Some(*seq) == last_seq => {
                        apply_torn(&mut bytes, *offset, data, &mut rng, true);
                    }
                    (ImageKind::TornLast, _) => apply(&mut bytes, p),
                    (ImageKind::Random, _) if rng.chance(1, 2) => {}
                    (ImageKind::Random, Pending::Write { offset, data, .. }) if rng.chance(1, 4) => {
                        let prefix = rng.chance(1, 2);
                        apply_torn(&mut bytes, *offset, data, &mut rng, prefix);
                    }
                    (ImageKind::Random, _) => apply(&mut bytes, p),
                }
            }
            files.insert(
                id,
                FileData {
                    durable: bytes.clone(),
                    current: bytes,
                    pending: Vec::new(),
                },
            );
        }
        let mut out = State::new();
        out.files = files;
        out.next_id = st.next_id;
        out.current = ns.clone();
        out.durable = ns;
        SimDisk {
            state: Arc::new(Mutex::new(out)),
        }
    }
}
