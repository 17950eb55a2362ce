//! Pass 1, analysis: one read of the whole log finds the last checkpoint,
//! the transactions and system actions whose COMMIT is in the log, and the
//! next transaction id.

use std::collections::HashSet;

use crate::error::Result;
use crate::ids::{Lsn, PageId, TxnId};
use crate::wal::redo::Redo;
use crate::wal::Wal;

/// What analysis found.
pub(super) struct Analysis {
    /// Transactions and system actions with a COMMIT in the log.
    pub committed: HashSet<TxnId>,
    /// The redo LSN of the last checkpoint (0 without one).
    pub redo_lsn: Lsn,
    /// The next transaction id to hand out.
    pub next_txn: u64,
    /// Allocations pending at the last checkpoint: (transaction, page).
    pub pending_allocs: Vec<(TxnId, PageId)>,
    /// Deferred frees owed at the last checkpoint: (transaction, page).
    pub pending_frees: Vec<(TxnId, PageId)>,
}

/// Reads the whole log once. With `stop`, the log is taken to end at that
/// LSN (`cairn recover --stop-at`): a COMMIT or CHECKPOINT ending past it
/// does not count, but every transaction id in the whole log is still
/// counted, so an id of a dropped transaction is never handed out again
/// (its COMMIT stays in the log until a checkpoint removes its segment).
pub(super) fn analyse(wal: &Wal, stop: Option<Lsn>) -> Result<Analysis> {
    let mut committed: HashSet<TxnId> = HashSet::new();
    let mut max_txn = 0u64;
    /// (redo LSN, next transaction id, pending allocations, pending frees)
    type Checkpoint = (Lsn, u64, Vec<(TxnId, PageId)>, Vec<(TxnId, PageId)>);
    let mut checkpoint: Option<Checkpoint> = None;
    let mut start = wal.first_lsn();
    for item in wal.read_from(wal.first_lsn())? {
        let (lsn, payload) = item?;
        let dropped = stop.is_some_and(|s| start >= s);
        let record_start = std::mem::replace(&mut start, lsn);
        let redo = match Redo::decode(&payload, lsn) {
            Ok(r) => r,
            // Past the stop, a record that does not decode names no id.
            Err(_) if dropped => continue,
            Err(e) => {
                return Err(super::unrecoverable(
                    record_start,
                    None,
                    "the record does not decode",
                    &e,
                ))
            }
        };
        if dropped {
            max_txn = max_txn.max(redo_ids(&redo));
            continue;
        }
        match redo {
            Redo::Checkpoint {
                redo_lsn,
                next_txn,
                pending,
                pending_frees,
            } => checkpoint = Some((redo_lsn, next_txn, pending, pending_frees)),
            Redo::Commit { txn, .. } => {
                committed.insert(txn);
                max_txn = max_txn.max(txn.0);
            }
            Redo::Page { txn, .. } => max_txn = max_txn.max(txn.0),
            Redo::Alloc { action, txn, .. } => max_txn = max_txn.max(txn.0).max(action.0),
            Redo::Free { action, .. } => max_txn = max_txn.max(action.0),
        }
    }
    let (redo_lsn, ckpt_next, pending_allocs, pending_frees) =
        checkpoint.unwrap_or((Lsn(0), 1, Vec::new(), Vec::new()));
    Ok(Analysis {
        committed,
        redo_lsn,
        next_txn: ckpt_next.max(max_txn.saturating_add(1)),
        pending_allocs,
        pending_frees,
    })
}

/// The largest transaction or action id a record names.
fn redo_ids(r: &Redo) -> u64 {
    match r {
        Redo::Checkpoint { next_txn, .. } => next_txn.saturating_sub(1),
        Redo::Commit { txn, .. } | Redo::Page { txn, .. } => txn.0,
        Redo::Alloc { action, txn, .. } => txn.0.max(action.0),
        Redo::Free { action, .. } => action.0,
    }
}
