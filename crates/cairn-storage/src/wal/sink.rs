//! The log sink: where page changes are logged, shared by the transaction
//! layer (commits) and the volume (system actions), with the checkpoint's
//! redo LSN that decides when a change is logged as a full page image.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use crate::ids::Lsn;
use crate::wal::Wal;

/// Where a volume logs its own page changes (system actions: allocation,
/// groups). Shared with the transaction layer.
#[derive(Clone)]
pub struct LogSink {
    /// The write-ahead log.
    pub wal: Arc<Wal>,
    /// The redo LSN of the checkpoint in progress or last taken: a page whose
    /// LSN is below it gets a full image on its next change.
    pub redo_lsn: Arc<AtomicU64>,
    /// Held (shared) from appending a change to applying it, so a checkpoint
    /// (which takes it exclusively to pick its redo LSN) never sees a change
    /// logged but not yet in the buffer pool.
    pub gate: Arc<RwLock<()>>,
    /// Where system actions take their ids (shared with transactions: an
    /// action is committed like a transaction, under its own id).
    pub next_id: Arc<AtomicU64>,
}

impl std::fmt::Debug for LogSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogSink").field("redo_lsn", &self.redo_lsn).finish()
    }
}

impl LogSink {
    /// True if a page whose LSN is `page_lsn` must be logged as a full image
    /// on its next change (its first since the current checkpoint began).
    ///
    /// A page whose LSN *equals* the redo LSN needs one too: its last record
    /// ends exactly there, so it lies before the replay range (a system
    /// action stamps its pages with its COMMIT's LSN, which can be the end
    /// of the log a checkpoint picks). Found by the crash-image suite.
    pub fn needs_full_image(&self, page_lsn: Lsn) -> bool {
        page_lsn.0 <= self.redo_lsn.load(Ordering::SeqCst)
    }
}
