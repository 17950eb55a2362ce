//! The file seam: every byte the storage manager reads or writes goes through
//! [`Vfs`] and [`StorageFile`], so tests can inject a failing write or fsync at
//! a chosen point ([`FaultyVfs`]) without touching the code under test.
//!
//! Assumptions about the disk, stated once (see also `docs/storage-format.md`):
//! - a successful `sync` makes every previously completed write durable;
//! - writes of one page may be torn by a crash (hence per-page checksums);
//! - after a failed write or fsync the file's contents are unknown, so the
//!   caller must stop trusting its in-memory state (the store poisons itself).

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// One open file, addressed by absolute offsets.
#[expect(
    clippy::len_without_is_empty,
    reason = "a file's emptiness is never a question the store asks"
)]
pub trait StorageFile: Send + Sync + fmt::Debug {
    /// Reads exactly `buf.len()` bytes at `offset`; a short file is
    /// `ErrorKind::UnexpectedEof`.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// Writes all of `buf` at `offset`, extending the file if needed.
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Makes all completed writes durable (fdatasync).
    fn sync_data(&self) -> io::Result<()>;
    /// The file's length in bytes.
    fn len(&self) -> io::Result<u64>;
    /// Sets the file's length, zero-filling or cutting.
    fn set_len(&self, len: u64) -> io::Result<()>;
}

/// The file system, as far as the storage manager uses it.
pub trait Vfs: Send + Sync + fmt::Debug {
    /// Opens a file for reading and writing; creates it if `create` is set
    /// (and fails if it exists then).
    fn open(&self, path: &Path, create: bool) -> io::Result<Arc<dyn StorageFile>>;
    /// Makes the directory entry changes in `dir` durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Creates a directory and its parents.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Atomically replaces `to` by `from`.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Removes a file.
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// True if the path exists.
    fn exists(&self, path: &Path) -> bool;
    /// The names of the entries of a directory (not `.` and `..`), in no
    /// particular order.
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<std::ffi::OsString>>;
    /// Takes an exclusive lock on the file at `path` (created if missing)
    /// and writes `note` into it (who holds it: the process id). The lock is
    /// held until the returned guard is dropped, and excludes every other
    /// opener, in this process or another. If someone else holds it, the
    /// answer is `Ok(Err(their note))`.
    fn lock_exclusive(&self, path: &Path, note: &str) -> io::Result<std::result::Result<Box<dyn FileLock>, String>>;
}

/// A held exclusive lock (see [`Vfs::lock_exclusive`]); dropping it releases
/// the lock.
pub trait FileLock: Send + Sync + fmt::Debug {}

#[derive(Debug)]
struct OsFileLock {
    _file: File,
}

impl FileLock for OsFileLock {}

/// The real file system.
#[derive(Debug, Default, Clone, Copy)]
pub struct OsVfs;

#[derive(Debug)]
struct OsFile {
    file: File,
}

impl StorageFile for OsFile {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        std::os::unix::fs::FileExt::read_exact_at(&self.file, buf, offset)
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        std::os::unix::fs::FileExt::write_all_at(&self.file, buf, offset)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }
}

impl Vfs for OsVfs {
    fn open(&self, path: &Path, create: bool) -> io::Result<Arc<dyn StorageFile>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(create)
            .open(path)?;
        Ok(Arc::new(OsFile { file }))
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<std::ffi::OsString>> {
        std::fs::read_dir(dir)?.map(|e| e.map(|e| e.file_name())).collect()
    }

    fn lock_exclusive(&self, path: &Path, note: &str) -> io::Result<std::result::Result<Box<dyn FileLock>, String>> {
        use std::io::{Read, Seek};
        // flock(2) locks belong to the open file description, so a second
        // open in this same process is excluded as well as another process.
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        // A lock this very process held and let go may still be held for a
        // moment by a child it just forked: the child shares the open file
        // description until its exec closes it (close-on-exec). So a holder
        // naming this process is retried for a short while before it counts.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(std::fs::TryLockError::WouldBlock) => {
                    let mut holder = String::new();
                    // The holder's note is informative only; a read error leaves it empty.
                    let _ = (&file).seek(std::io::SeekFrom::Start(0));
                    let _ = file.read_to_string(&mut holder);
                    let holder = holder.trim().to_string();
                    if holder == note.trim() && std::time::Instant::now() < deadline {
                        std::thread::sleep(std::time::Duration::from_millis(10));
                        continue;
                    }
                    return Ok(Err(holder));
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(e),
            }
        }
        file.set_len(0)?;
        std::os::unix::fs::FileExt::write_all_at(&file, note.as_bytes(), 0)?;
        Ok(Ok(Box::new(OsFileLock { _file: file })))
    }
}

/// Creates `dir` and any missing parents, and makes each new directory
/// entry durable by fsyncing the directory that holds it: without that, a
/// power loss could remove a database whose commits were acknowledged.
pub fn create_dir_durably(vfs: &dyn Vfs, dir: &Path) -> io::Result<()> {
    let mut missing = Vec::new();
    let mut at = Some(dir);
    while let Some(d) = at {
        if d.as_os_str().is_empty() || vfs.exists(d) {
            break;
        }
        missing.push(d);
        at = d.parent();
    }
    if missing.is_empty() {
        return Ok(());
    }
    vfs.create_dir_all(dir)?;
    for d in missing.iter().rev() {
        let parent = match d.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        vfs.sync_dir(parent)?;
    }
    Ok(())
}

/// The kind of file operation a fault can be injected into.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum FileOp {
    /// `read_exact_at`.
    Read,
    /// `write_all_at`.
    Write,
    /// `sync_data` or `sync_dir`.
    Sync,
    /// `set_len`.
    SetLen,
}

/// Decides, for the `n`-th operation (counted from 0 across all files of the
/// VFS), whether it fails.
pub type FaultRule = dyn Fn(FileOp, &Path, u64) -> bool + Send + Sync;

/// A [`Vfs`] wrapper that makes chosen operations fail with an I/O error
/// (a fault injected for tests; the real file system does all other work).
pub struct FaultyVfs {
    inner: Arc<dyn Vfs>,
    rule: Arc<Mutex<Option<Arc<FaultRule>>>>,
    counter: Arc<AtomicU64>,
}

impl fmt::Debug for FaultyVfs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultyVfs")
            .field("ops", &self.counter.load(Ordering::Relaxed))
            .finish()
    }
}

impl FaultyVfs {
    /// Wraps `inner`; no faults until [`FaultyVfs::set_rule`].
    pub fn new(inner: Arc<dyn Vfs>) -> FaultyVfs {
        FaultyVfs {
            inner,
            rule: Arc::new(Mutex::new(None)),
            counter: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Installs the rule that decides which operations fail (`None` = none).
    pub fn set_rule(&self, rule: Option<Arc<FaultRule>>) {
        *self.rule.lock().unwrap_or_else(|e| e.into_inner()) = rule;
    }

    /// How many operations have been counted so far.
    pub fn op_count(&self) -> u64 {
        self.counter.load(Ordering::Relaxed)
    }
}

fn check_fault(rule: &Mutex<Option<Arc<FaultRule>>>, counter: &AtomicU64, op: FileOp, path: &Path) -> io::Result<()> {
    let n = counter.fetch_add(1, Ordering::Relaxed);
    let rule = rule.lock().unwrap_or_else(|e| e.into_inner()).clone();
    if let Some(rule) = rule {
        if rule(op, path, n) {
            return Err(io::Error::other(format!("injected {op:?} fault (operation {n})")));
        }
    }
    Ok(())
}

struct FaultyFile {
    inner: Arc<dyn StorageFile>,
    path: PathBuf,
    rule: Arc<Mutex<Option<Arc<FaultRule>>>>,
    counter: Arc<AtomicU64>,
}

impl fmt::Debug for FaultyFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultyFile").field("path", &self.path).finish()
    }
}

impl StorageFile for FaultyFile {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        check_fault(&self.rule, &self.counter, FileOp::Read, &self.path)?;
        self.inner.read_exact_at(buf, offset)
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        check_fault(&self.rule, &self.counter, FileOp::Write, &self.path)?;
        self.inner.write_all_at(buf, offset)
    }

    fn sync_data(&self) -> io::Result<()> {
        check_fault(&self.rule, &self.counter, FileOp::Sync, &self.path)?;
        self.inner.sync_data()
    }

    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        check_fault(&self.rule, &self.counter, FileOp::SetLen, &self.path)?;
        self.inner.set_len(len)
    }
}

impl Vfs for FaultyVfs {
    fn open(&self, path: &Path, create: bool) -> io::Result<Arc<dyn StorageFile>> {
        let inner = self.inner.open(path, create)?;
        Ok(Arc::new(FaultyFile {
            inner,
            path: path.to_path_buf(),
            rule: self.rule.clone(),
            counter: self.counter.clone(),
        }))
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        check_fault(&self.rule, &self.counter, FileOp::Sync, dir)?;
        self.inner.sync_dir(dir)
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.inner.create_dir_all(dir)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        check_fault(&self.rule, &self.counter, FileOp::Write, to)?;
        self.inner.rename(from, to)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.inner.remove_file(path)
    }

    fn exists(&self, path: &Path) -> bool {
        self.inner.exists(path)
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<std::ffi::OsString>> {
        check_fault(&self.rule, &self.counter, FileOp::Read, dir)?;
        self.inner.list_dir(dir)
    }

    fn lock_exclusive(&self, path: &Path, note: &str) -> io::Result<std::result::Result<Box<dyn FileLock>, String>> {
        self.inner.lock_exclusive(path, note)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_file_reads_back_what_was_written_and_reports_short_reads() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let f = OsVfs.open(&path, true).unwrap();
        f.write_all_at(b"hello", 10).unwrap();
        f.sync_data().unwrap();
        assert_eq!(f.len().unwrap(), 15);
        let mut buf = [0u8; 5];
        f.read_exact_at(&mut buf, 10).unwrap();
        assert_eq!(&buf, b"hello");
        let err = f.read_exact_at(&mut buf, 12).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
        assert!(OsVfs.open(&path, true).is_err(), "create must not clobber");
    }

    #[test]
    fn faulty_vfs_fails_exactly_the_chosen_operations() {
        let dir = tempfile::tempdir().unwrap();
        let vfs = FaultyVfs::new(Arc::new(OsVfs));
        let f = vfs.open(&dir.path().join("f"), true).unwrap();
        vfs.set_rule(Some(Arc::new(|op, _p: &Path, _n| op == FileOp::Sync)));
        f.write_all_at(b"x", 0).unwrap();
        assert!(f.sync_data().is_err());
        vfs.set_rule(None);
        f.sync_data().unwrap();
        assert_eq!(vfs.op_count(), 3);
    }
}
