//! Opening a database whose log holds a record recovery cannot apply
//! (`cairn recover DIR --stop-at LSN`).
//!
//! Recovery stops at such a record with [`Error::Unrecoverable`], naming
//! where it starts, and writes nothing: the database stays as it was, and
//! every later open stops there too. [`Db::recover_stopping_at`] is the way
//! out an operator chooses knowingly:
//!
//! 1. It reads the log once and lists what lies at and after the stop: the
//!    records, and the transactions whose COMMIT is among them — the work
//!    that will not be in the database.
//! 2. It copies every log segment holding such records into
//!    `DIR/lost+found/wal-from-LSN/`, with `dropped.txt` listing them, and
//!    fsyncs them, before anything changes: **nothing is dropped silently**
//!    or beyond reach.
//! 3. It recovers as if the log ended at the stop (the records after it are
//!    neither counted nor applied; their transaction ids are still never
//!    handed out again), opens the database, and takes a checkpoint in a new
//!    log segment, so every older segment — the records past the stop among
//!    them — is removed and the next open is an ordinary one.
//!
//! What it cannot undo: a redo-only log never changes the volume before a
//! record is durable and its transaction committed, but a page of a dropped
//! transaction that was already written to the volume keeps its change.
//! Recovery stops at the first record it cannot apply, and a server poisons
//! its database when a commit fails half-way, so in practice the stop is at
//! or near the end of the log; run `cairn check` afterwards.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::ids::{Lsn, TxnId};
use crate::io::Vfs;
use crate::wal::redo::Redo;
use crate::wal::segment::list_segments;
use crate::wal::{Wal, WalOptions, WAL_DIR};

use super::db::DbOptions;
use super::Db;

/// What [`Db::recover_stopping_at`] left out of the database, and where it
/// kept it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Salvaged {
    /// Where the log was taken to end.
    pub stop: Lsn,
    /// Where the log really ended.
    pub end: Lsn,
    /// Records at and after the stop.
    pub records: u64,
    /// The transactions whose COMMIT was at or after the stop, with the
    /// LSN of that COMMIT: their work is not in the database.
    pub commits: Vec<(TxnId, Lsn)>,
    /// The directory the log segments holding those records were copied
    /// to (`None` when nothing was past the stop).
    pub kept_in: Option<PathBuf>,
}

impl Db {
    /// Opens the database in `dir` as if its log ended at `stop` (the start
    /// of a record, as [`Error::Unrecoverable`] names it), after copying
    /// what follows to `dir/lost+found` (see the module docs). A `stop` that
    /// is not where a record starts is [`Error::InvalidArgument`] naming the
    /// nearest record boundaries, and nothing changes.
    pub fn recover_stopping_at(dir: &Path, opts: &DbOptions, stop: Lsn) -> Result<(Db, Salvaged)> {
        let vfs = opts.volume.vfs.clone();
        let manifest = crate::volume::manifest::Manifest::read(vfs.as_ref(), dir)?;
        let dir_lock = crate::volume::lock_dir(vfs.as_ref(), dir)?;
        crate::volume::Volume::finish_create(vfs.as_ref(), dir)?;
        let wal_opts = WalOptions {
            segment_bytes: opts.wal_segment_bytes,
            vfs: vfs.clone(),
            creation_id: manifest.creation_id,
            proves_durable: Redo::is_checkpoint,
        };
        let mut salvaged = {
            let (wal, _) = Wal::open(dir, wal_opts)?;
            survey(&wal, stop)?
        };
        if salvaged.records > 0 {
            salvaged.kept_in = Some(keep(vfs.as_ref(), dir, &salvaged)?);
        }
        let db = Db::open_locked(dir, opts, dir_lock, Some(stop))?;
        Ok((db, salvaged))
    }
}

/// Reads the log once: checks `stop` is a record boundary and lists what
/// lies at and after it.
fn survey(wal: &Wal, stop: Lsn) -> Result<Salvaged> {
    let mut out = Salvaged {
        stop,
        end: wal.end_lsn(),
        ..Salvaged::default()
    };
    let first = wal.first_lsn();
    let mut start = first;
    let mut boundary = stop == start;
    let mut before = start;
    for item in wal.read_from(first)? {
        let (lsn, payload) = item?;
        let record_start = std::mem::replace(&mut start, lsn);
        if record_start < stop {
            before = lsn;
            boundary |= lsn == stop;
            continue;
        }
        out.records += 1;
        if let Ok(Redo::Commit { txn, .. }) = Redo::decode(&payload, lsn) {
            out.commits.push((txn, record_start));
        }
    }
    if !boundary {
        return Err(Error::InvalidArgument(format!(
            "LSN {} is not where a log record starts (the log holds LSNs {}..{}; the nearest record boundary below it is {}): \
             give the LSN the recovery error names",
            stop.0, first.0, out.end.0, before.0
        )));
    }
    Ok(out)
}

/// Copies the log segments holding records at or after the stop, and a
/// listing of them, into `dir/lost+found/wal-from-STOP/`, durably.
fn keep(vfs: &dyn Vfs, dir: &Path, s: &Salvaged) -> Result<PathBuf> {
    let wal_dir = dir.join(WAL_DIR);
    let lost = dir.join("lost+found");
    let to = lost.join(format!("wal-from-{}", s.stop.0));
    crate::io::create_dir_durably(vfs, &lost).map_err(|e| Error::io("create lost+found", &lost, e))?;
    crate::io::create_dir_durably(vfs, &to).map_err(|e| Error::io("create lost+found", &to, e))?;
    let segments = list_segments(vfs, &wal_dir)?;
    for (i, (start, path)) in segments.iter().enumerate() {
        let end = segments.get(i + 1).map_or(s.end, |(next, _)| *next);
        if end <= s.stop {
            continue;
        }
        let name = path
            .file_name()
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(format!("{}", start.0)));
        copy(vfs, path, &to.join(name))?;
    }
    let mut listing = format!(
        "cairn recover --stop-at {}: the log was taken to end at LSN {} (it ended at {}).\n\
         {} records at or after it are not in the database; they are in the segment files beside this one.\n\
         Transactions whose COMMIT was among them (transaction id, LSN of its COMMIT):\n",
        s.stop.0, s.stop.0, s.end.0, s.records
    );
    for (t, lsn) in &s.commits {
        let _ = writeln!(listing, "{} {}", t.0, lsn.0);
    }
    let path = to.join("dropped.txt");
    let f = vfs.open(&path, true).map_err(|e| Error::io("create", &path, e))?;
    f.write_all_at(listing.as_bytes(), 0)
        .map_err(|e| Error::io("write", &path, e))?;
    f.sync_data().map_err(|e| Error::io("fsync", &path, e))?;
    vfs.sync_dir(&to).map_err(|e| Error::io("fsync directory", &to, e))?;
    Ok(to)
}

/// Copies one file, durably.
fn copy(vfs: &dyn Vfs, from: &Path, to: &Path) -> Result<()> {
    let src = vfs.open(from, false).map_err(|e| Error::io("open", from, e))?;
    let len = src.len().map_err(|e| Error::io("size", from, e))?;
    let dst = vfs.open(to, true).map_err(|e| Error::io("create", to, e))?;
    let mut buf = vec![0u8; 1 << 20];
    let mut at = 0u64;
    while at < len {
        let n = usize::try_from((len - at).min(buf.len() as u64)).unwrap_or(buf.len());
        src.read_exact_at(&mut buf[..n], at)
            .map_err(|e| Error::io("read", from, e))?;
        dst.write_all_at(&buf[..n], at).map_err(|e| Error::io("write", to, e))?;
        at += n as u64;
    }
    dst.sync_data().map_err(|e| Error::io("fsync", to, e))
}
