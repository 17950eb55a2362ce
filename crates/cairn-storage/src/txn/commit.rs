//! Commit, in three phases: **append** the redo records and the COMMIT,
//! **install** the pages once the log is durable, **free** the pages the
//! transaction emptied.
//!
//! The outcome is decided the moment the COMMIT record is appended: from
//! then on the transaction is never rolled back (a rollback would log FREE
//! for pages a durable commit wrote). A failure after that point — the fsync,
//! installing a page, reading a spilled page back, a deferred free — poisons
//! the database instead, and reopening redoes the commit from the log if its
//! COMMIT reached the disk. Only a failure *before* the COMMIT is appended
//! rolls the transaction back, which is safe: recovery ignores PAGE records
//! without a COMMIT.

use std::sync::atomic::Ordering;

use crate::error::{Error, Result};
use crate::ids::{Lsn, PageId};
use crate::page;
use crate::wal::redo::{self, Redo};

use super::db::lock;
use super::Txn;

/// A batch of redo records is appended once it holds this many bytes, so a
/// transaction larger than memory never holds all its records at once.
const APPEND_BATCH_BYTES: usize = 4 << 20;

impl Txn {
    /// Commits: the transaction's changes are durable when this returns Ok.
    ///
    /// On an error before the outcome is decided the transaction is rolled
    /// back; after it (see the module docs) the database is poisoned and the
    /// error says so, and reopening the database tells whether the commit
    /// happened.
    pub fn commit(mut self) -> Result<()> {
        self.check_active()?;
        let db = self.db.clone();
        if self.pages.is_empty() && self.to_free.is_empty() && self.allocated.is_empty() {
            self.finish();
            db.counters.read_only.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        let decided = {
            let _gate = db.sink.gate.read().unwrap_or_else(|e| e.into_inner());
            match self.append_records() {
                Err(e) => {
                    self.rollback();
                    return Err(e);
                }
                Ok((lsns, commit_lsn)) => self.make_durable_and_install(&lsns, commit_lsn),
            }
        };
        let result = decided.and_then(|()| self.free_deferred());
        if let Err(e) = &result {
            db.poison(format!("{} failed after its COMMIT was logged: {e}", self.id));
        }
        // Decided either way: release the locks without a rollback.
        self.finish();
        if result.is_ok() {
            db.counters.commits.fetch_add(1, Ordering::Relaxed);
        }
        result
    }

    /// Phase 1: appends one PAGE record per private page, then the COMMIT
    /// with the pages to free, and registers those frees (under the gate,
    /// with the COMMIT, so a checkpoint sees both or neither). Returns each
    /// page's LSN and the COMMIT's LSN. Nothing is decided if this fails.
    pub(super) fn append_records(&mut self) -> Result<(Vec<(PageId, Lsn)>, Lsn)> {
        let db = self.db.clone();
        let ids = self.pages.ids();
        let frees: Vec<PageId> = self.to_free.iter().copied().collect();
        let mut lsns: Vec<(PageId, Lsn)> = Vec::with_capacity(ids.len());
        let mut batch: Vec<Vec<u8>> = Vec::new();
        let mut batch_ids: Vec<PageId> = Vec::new();
        let mut batch_bytes = 0usize;
        for (i, &id) in ids.iter().enumerate() {
            let rec = {
                let after = self
                    .pages
                    .get(id)?
                    .ok_or_else(|| Error::Internal(format!("private page {id} vanished before commit")))?;
                let base = db.pool.read(id)?;
                let full = db.sink.needs_full_image(page::lsn(&base));
                redo::page_record(self.id, id, (!full).then_some(&base[..]), after)
            };
            batch_bytes += rec.len();
            batch.push(rec);
            batch_ids.push(id);
            if batch_bytes >= APPEND_BATCH_BYTES && i + 1 < ids.len() {
                let refs: Vec<&[u8]> = batch.iter().map(|r| &r[..]).collect();
                let got = db
                    .wal
                    .append(&refs)
                    .inspect_err(|e| db.poison(format!("log append failed: {e}")))?;
                lsns.extend(batch_ids.drain(..).zip(got));
                batch.clear();
                batch_bytes = 0;
            }
        }
        batch.push(
            Redo::Commit {
                txn: self.id,
                frees: frees.clone(),
            }
            .encode(),
        );
        let refs: Vec<&[u8]> = batch.iter().map(|r| &r[..]).collect();
        let got = db
            .wal
            .append(&refs)
            .inspect_err(|e| db.poison(format!("log append failed: {e}")))?;
        let commit_lsn = *got.last().expect("the batch holds the COMMIT");
        lsns.extend(batch_ids.drain(..).zip(got));
        // Decided. Its allocations are committed pages now; its frees are
        // owed until the FREE actions run.
        self.drop_pending_allocations();
        let mut pending = lock(&db.pending_frees);
        for p in frees {
            pending.insert(p, self.id);
        }
        Ok((lsns, commit_lsn))
    }

    /// Phase 2: waits for the log to be durable up to the COMMIT (group
    /// commit), then installs every page in the buffer pool stamped with its
    /// record's LSN. Called under the gate.
    pub(super) fn make_durable_and_install(&mut self, lsns: &[(PageId, Lsn)], commit_lsn: Lsn) -> Result<()> {
        let db = self.db.clone();
        db.wal.flush(commit_lsn)?;
        for &(id, lsn) in lsns {
            let after = self
                .pages
                .get(id)?
                .ok_or_else(|| Error::Internal(format!("private page {id} vanished during commit")))?;
            let mut g = db.pool.write(id)?;
            g.copy_from_slice(after);
            page::set_lsn(&mut g, lsn);
        }
        Ok(())
    }

    /// Phase 3: the deferred frees, each a system action; each page leaves
    /// the pending list under the Volume mutex together with its FREE, so a
    /// checkpoint never records a page as owed that was already freed (and
    /// maybe allocated again).
    fn free_deferred(&mut self) -> Result<()> {
        if self.to_free.is_empty() {
            return Ok(());
        }
        let db = self.db.clone();
        let mut vol = lock(&db.vol);
        for p in std::mem::take(&mut self.to_free) {
            vol.free_logged(p)?;
            lock(&db.pending_frees).remove(&p);
        }
        Ok(())
    }
}
