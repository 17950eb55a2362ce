//! Crash recovery: redo from the last checkpoint.
//!
//! Run by [`crate::txn::Db::open`] before the volume's structures are read:
//!
//! 1. **Analysis.** Read the whole log once: the last CHECKPOINT gives the
//!    redo LSN and the next transaction id; COMMIT records name the
//!    transactions and system actions whose changes count; ALLOC / FREE
//!    markers of committed actions and COMMIT free lists tell which pages must
//!    be given back afterwards (allocated by a transaction that never
//!    committed, or freed by one that did without its FREE reaching the log).
//! 2. **Redo.** From the redo LSN, apply every PAGE record of a committed
//!    transaction or system action, in log order, to the
//!    page — but only if the page's LSN is below the record's, so replaying
//!    twice (a crash during recovery) changes nothing. A page that fails
//!    verification (torn by a crash, or never written) is rebuilt from a
//!    full-image record, which the log holds for every page changed since
//!    the checkpoint began (its first change logged a full image); a damaged
//!    page the log cannot rebuild is reported as `Corrupt` naming it.
//! 3. Everything recovered is written to the volume and fsynced, so the
//!    volume's own structures can then be opened and checked as usual.
//!
//! The frees found in step 1 are carried out by the caller once the volume is
//! open, as logged system actions, and a checkpoint follows.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use crate::access::PageDevice;
use crate::buffer::BufferPool;
use crate::error::{Error, Result};
use crate::ids::{Lsn, PageId, TxnId};
use crate::page;
use crate::txn::redo::{self, Redo};
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
    /// Pages rebuilt from a full image after failing verification.
    pub rebuilt: Vec<PageId>,
    /// Committed transactions seen after the redo LSN.
    pub committed: u64,
}

/// Analyses the log and redoes it onto the volume in `dir`.
pub fn redo(dir: &Path, opts: &VolumeOptions, wal: &Arc<Wal>) -> Result<Recovered> {
    let mut out = Recovered::default();
    // Pass 1: analysis.
    let mut committed: HashSet<TxnId> = HashSet::new();
    let mut max_txn = 0u64;
    // (redo LSN, next transaction id, allocations pending at the checkpoint)
    type Checkpoint = (Lsn, u64, Vec<(TxnId, PageId)>);
    let mut checkpoint: Option<Checkpoint> = None;
    for item in wal.read_from(wal.first_lsn())? {
        let (lsn, payload) = item?;
        match Redo::decode(&payload, lsn)? {
            Redo::Checkpoint {
                redo_lsn,
                next_txn,
                pending,
            } => checkpoint = Some((redo_lsn, next_txn, pending)),
            Redo::Commit { txn, .. } => {
                committed.insert(txn);
                max_txn = max_txn.max(txn.0);
            }
            Redo::Page { txn, .. } => max_txn = max_txn.max(txn.0),
            Redo::Alloc { action, txn, .. } => max_txn = max_txn.max(txn.0).max(action.0),
            Redo::Free { action, .. } => max_txn = max_txn.max(action.0),
        }
    }
    let (redo_lsn, ckpt_next, ckpt_pending) = checkpoint.unwrap_or((Lsn(0), 1, Vec::new()));
    out.redo_lsn = redo_lsn;
    out.next_txn = ckpt_next.max(max_txn + 1);

    // Pass 2: redo, on a pool of our own that is flushed at the end.
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
    // Allocations still pending at the checkpoint, whose ALLOC markers may be
    // gone with older segments; later markers override them.
    let mut alloc_owner: HashMap<PageId, TxnId> = ckpt_pending.into_iter().map(|(t, p)| (p, t)).collect();
    let mut pending_frees: BTreeSet<PageId> = BTreeSet::new();
    let mut unrecoverable: HashMap<PageId, String> = HashMap::new();
    for item in wal.read_from(redo_lsn)? {
        let (lsn, payload) = item?;
        match Redo::decode(&payload, lsn)? {
            Redo::Page {
                txn,
                page: id,
                full,
                runs,
            } => {
                if !committed.contains(&txn) {
                    out.uncommitted += 1;
                    continue;
                }
                match pool.write(id) {
                    Ok(mut g) => {
                        if page::lsn(&g) >= lsn {
                            out.skipped += 1;
                            continue;
                        }
                        redo::apply(&mut g, id, full, &runs, lsn)?;
                        out.applied += 1;
                    }
                    Err(Error::Corrupt { reason, .. }) => {
                        if full {
                            let mut g = pool.create(id)?;
                            redo::apply(&mut g, id, true, &runs, lsn)?;
                            out.applied += 1;
                            out.rebuilt.push(id);
                            unrecoverable.remove(&id);
                        } else {
                            unrecoverable.entry(id).or_insert(reason);
                        }
                    }
                    Err(e) => return Err(e),
                }
            }
            Redo::Commit { txn, frees } => {
                out.committed += u64::from(committed.contains(&txn));
                pending_frees.extend(frees);
            }
            Redo::Alloc { action, txn, page } => {
                if committed.contains(&action) {
                    alloc_owner.insert(page, txn);
                }
            }
            Redo::Free { action, page } => {
                if committed.contains(&action) {
                    alloc_owner.remove(&page);
                    pending_frees.remove(&page);
                }
            }
            Redo::Checkpoint { .. } => {}
        }
    }
    if let Some((&page, reason)) = unrecoverable.iter().min_by_key(|(p, _)| **p) {
        return Err(Error::corrupt(
            page,
            format!("damaged ({reason}) and the log holds no full image to rebuild it from"),
        ));
    }
    pool.flush_all()?;
    let mut to_free: BTreeSet<PageId> = pending_frees;
    to_free.extend(
        alloc_owner
            .into_iter()
            .filter(|(_, t)| !committed.contains(t))
            .map(|(p, _)| p),
    );
    out.to_free = to_free.into_iter().collect();
    out.rebuilt.sort();
    out.rebuilt.dedup();
    Ok(out)
}
