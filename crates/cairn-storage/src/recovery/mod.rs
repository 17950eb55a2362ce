//! Crash recovery: redo from the last checkpoint.
//!
//! **Tool interface** (see the crate docs): public so that tests can run
//! recovery on its own and check that it is idempotent; the upper layers
//! recover by opening a [`crate::Db`].
//!
//! Run by [`crate::txn::Db::open`] before the volume's structures are read:
//!
//! 1. **Analysis.** Read the whole log once: the last CHECKPOINT gives the
//!    redo LSN and the next transaction id; COMMIT records name the
//!    transactions and system actions whose changes count; ALLOC / FREE
//!    markers of committed actions and COMMIT free lists tell which pages must
//!    be given back afterwards (allocated by a transaction that never
//!    committed, or freed by one that did without its FREE reaching the log).
//!    Pending allocations and deferred frees recorded by the checkpoint
//!    stand in for markers in segments it removed. (`analyse.rs`)
//! 2. **Redo.** From the redo LSN, apply every PAGE record of a committed
//!    transaction or system action, in log order. A **full image** is
//!    applied unconditionally: the log holds one for every page changed
//!    since the checkpoint began (its first change), and a page read back
//!    after a failed fsync may look current in the OS cache while the disk
//!    is older, so only rewriting it is safe; it also rebuilds a torn or
//!    never-written page. A **diff** is applied only if the page's LSN is
//!    below the record's, so replaying twice (a crash during recovery)
//!    changes nothing. A damaged page the log cannot rebuild is reported as
//!    `Corrupt` naming it. (`apply.rs`)
//! 3. Everything recovered is written to the volume and fsynced, so the
//!    volume's own structures can then be opened and checked as usual.
//!
//! The frees found in step 1 are carried out by the caller once the volume is
//! open, as logged system actions, and a checkpoint follows.

mod analyse;
mod apply;

/// The error that stops recovery at the record starting at `lsn`.
pub(crate) fn unrecoverable(lsn: Lsn, txn: Option<crate::ids::TxnId>, what: &str, e: &Error) -> Error {
    let cause = match e {
        Error::Corrupt { reason, .. } | Error::CorruptLog { reason, .. } => reason.clone(),
        Error::InvalidArgument(why) => why.clone(),
        other => other.to_string(),
    };
    let reason = if cause.is_empty() || what.contains(&cause) {
        what.to_string()
    } else {
        format!("{what}: {cause}")
    };
    Error::Unrecoverable { lsn, txn, reason }
}

use std::path::Path;
use std::sync::Arc;

use crate::access::PageDevice;
use crate::buffer::BufferPool;
use crate::error::{Error, Result};
use crate::ids::{Lsn, PageId};
use crate::volume::file::VolumeFile;
use crate::volume::manifest::{Manifest, VOLUME_FILE};
use crate::volume::VolumeOptions;
use crate::wal::Wal;

/// What recovery found and did.
#[derive(Clone, Debug, Default)]
pub struct Recovered {
    /// The redo LSN of the last checkpoint (0 if none).
    pub redo_lsn: Lsn,
    /// The next transaction id to hand out.
    pub next_txn: u64,
    /// Pages to give back once the volume is open.
    pub to_free: Vec<PageId>,
    /// PAGE records applied.
    pub applied: u64,
    /// PAGE records skipped because the page already had them.
    pub skipped: u64,
    /// PAGE records of transactions that never committed.
    pub uncommitted: u64,
    /// Of `applied`, full page images (applied whatever the page's LSN, so a
    /// second recovery applies them again).
    pub images: u64,
    /// Pages rebuilt from a full image after failing verification.
    pub rebuilt: Vec<PageId>,
    /// Committed transactions seen after the redo LSN.
    pub committed: u64,
    /// For each page a replayed COMMIT frees: where that COMMIT starts, and
    /// its transaction (what an unrecoverable free names).
    pub free_origins: std::collections::HashMap<PageId, (Lsn, crate::ids::TxnId)>,
}

/// Analyses the log and redoes it onto the volume in `dir`; every page it
/// changed is written and the volume fsynced before this returns.
///
/// `stop`: treat the log as ending at that LSN, a record boundary (the
/// start of a record [`Error::Unrecoverable`] named); what follows is
/// neither counted nor applied. `cairn recover --stop-at` uses it
/// ([`crate::Db::recover_stopping_at`]); `None` for every ordinary open.
pub fn run(dir: &Path, opts: &VolumeOptions, wal: &Arc<Wal>, stop: Option<Lsn>) -> Result<Recovered> {
    let analysis = analyse::analyse(wal, stop)?;
    let mut out = Recovered {
        redo_lsn: analysis.redo_lsn,
        next_txn: analysis.next_txn,
        ..Recovered::default()
    };
    let m = Manifest::read(opts.vfs.as_ref(), dir)?;
    let page_size = m.page_size as usize;
    let vpath = dir.join(VOLUME_FILE);
    let f = opts
        .vfs
        .open(&vpath, false)
        .map_err(|e| Error::io("open volume", &vpath, e))?;
    let file = Arc::new(VolumeFile::new(f, &vpath, page_size));
    // A pool of its own, flushed at the end; small, since replay touches
    // pages in log order and eviction only writes recovered pages.
    let pool = BufferPool::new(
        file as Arc<dyn PageDevice>,
        opts.buffer_frames.clamp(64, 4096),
        opts.policy,
    );
    apply::apply(wal, &pool, &analysis, &mut out, stop)?;
    pool.flush_all()?;
    out.rebuilt.sort();
    out.rebuilt.dedup();
    Ok(out)
}
