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

/// Reads the whole log once.
pub(super) fn analyse(wal: &Wal) -> Result<Analysis> {
    let mut committed: HashSet<TxnId> = HashSet::new();
    let mut max_txn = 0u64;
    /// (redo LSN, next transaction id, pending allocations, pending frees)
    type Checkpoint = (Lsn, u64, Vec<(TxnId, PageId)>, Vec<(TxnId, PageId)>);
    let mut checkpoint: Option<Checkpoint> = None;
    for item in wal.read_from(wal.first_lsn())? {
        let (lsn, payload) = item?;
        match Redo::decode(&payload, lsn)? {
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
