//! The server's side of a file-server commit (DeWitt et al. §2.4;
//! ARCHITECTURE.md): the client writes the pages, the server takes the log.
//!
//! A file-server client reads and writes volume pages itself, in the shared
//! volume file; the server grants its locks, allocates its pages and logs
//! its commits. So a commit has two halves on two machines:
//!
//! 1. **Logged** ([`Db::commit_unwritten`]): the client sends every page it
//!    changed as a *full image* PAGE record; the server verifies them, logs
//!    them and the COMMIT, and makes the log durable. The outcome is decided
//!    here, exactly as in the embedded commit — but nothing is installed in
//!    the server's buffer pool, and the transaction's locks stay held. The
//!    client learns each page's LSN.
//! 2. **Written** ([`Unwritten::written`]): the client stamps the LSNs,
//!    writes the pages into the volume file and syncs it (the WAL rule
//!    across machines: the log describing a page is durable before the page
//!    is written), then says so. Only then are the locks released, so the
//!    next reader of a page — which reads the volume file — finds it there.
//!    The pages the commit frees are let go here too, no sooner: a page let
//!    go while the commit is still in flight for snapshots could be
//!    allocated and formatted again where a snapshot that does not see the
//!    commit would read it (see [`Unwritten`]'s `end`).
//!
//! **Tree changes under key-range locking** (a client of a server that
//! locks key ranges sends them as tree requests; they wait in the
//! transaction) are the server's to apply: the logged half applies them
//! as an embedded commit does, under the trees' latches, logs their pages
//! with the client's, and installs those pages in the server's buffer pool
//! once the log is durable. [`Unwritten::lsns`] names only the client's
//! pages.
//!
//! **A client that dies in between** (its session closes with the commit
//! [`Unwritten`] still pending) leaves pages the log has and the volume file
//! may not. Dropping the [`Unwritten`] repairs them before the locks go: it
//! installs each after-image, stamped with its LSN, in the server's buffer
//! pool as a dirty page, which the next checkpoint writes (and a file-server
//! reader's lock flushes first). A server that dies too recovers them from
//! the log like any commit.
//!
//! **Why full images.** The client's page writes happen outside the
//! server's checkpoints, and may be torn by a power loss at any moment,
//! also after a checkpoint that began while they were pending. A record of
//! changed byte runs needs the page as it was, which a torn write destroys;
//! a full image rebuilds it from nothing. So a file-server commit logs
//! every page whole (PAGE records against an all-zero page, so an emptyish
//! page is still short), and a checkpoint's redo LSN never passes the first
//! record of a commit whose pages are not written yet
//! ([`Shared::oldest_unwritten`]).
//!
//! The server checks what it can: each record is a full image of a page
//! inside the volume, in use, locked X by the transaction, of a kind a
//! client may change and (a slotted page) well formed. It never reads the
//! page itself. A file-server client writes the volume file directly, so
//! the server trusts it with its pages' bytes in any case.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::ids::{Lsn, PageId, TxnId};
use crate::page;
use crate::wal::redo;

use super::client_check::refuse;
use super::db::Shared;
use super::remote::ClientRecord;
use super::{Db, Txn};

/// A file-server commit that is logged and durable but whose pages the
/// client has not yet reported written: it holds the transaction's locks.
/// [`Unwritten::written`] ends it; dropping it repairs the pages from the
/// after-images it keeps (see the module docs).
pub struct Unwritten {
    shared: Arc<Shared>,
    /// The committed transaction, inactive, still holding its locks (its
    /// private pages are the after-images).
    txn: Option<Txn>,
    /// Each page the commit changed (and did not free), with its LSN.
    lsns: Vec<(PageId, Lsn)>,
    /// Its entry in [`Shared::unwritten`].
    hold: u64,
}

impl std::fmt::Debug for Unwritten {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Unwritten")
            .field("txn", &self.txn.as_ref().map(Txn::id))
            .field("pages", &self.lsns.len())
            .finish()
    }
}

impl Db {
    /// Commits `t`, a file-server client's transaction, from its PAGE
    /// records (full images; each must name `named`, the client's id for
    /// the transaction): verified, logged and durable when this returns,
    /// but not installed, and its locks still held — until the client says
    /// the pages are written ([`Unwritten::written`]). See the module docs.
    ///
    /// A refused record aborts the transaction (nothing is logged). As in
    /// [`Txn::commit`], a failure after the COMMIT is appended poisons the
    /// database.
    pub fn commit_unwritten(&self, mut t: Txn, records: &[&[u8]], named: TxnId) -> Result<Unwritten> {
        let s = self.shared.clone();
        t.check_active()?;
        if !t.objects.is_empty() {
            return Err(Error::InvalidArgument(
                "a file-server transaction changes whole pages, not objects".into(),
            ));
        }
        // A refused batch rolls `t` back as it drops.
        t.stage_full_images(records, named)?;
        t.check_client_links()?;
        let mut done = Unwritten {
            shared: s.clone(),
            txn: None,
            lsns: Vec::new(),
            hold: 0,
        };
        if t.pages.is_empty() && t.to_free.is_empty() && t.allocated.is_empty() && t.key_trees.is_empty() {
            t.finish();
            s.counters.read_only.fetch_add(1, Ordering::Relaxed);
            return Ok(done);
        }
        t.full_images = true;
        // Its tree changes under key-range locking (sent as TREE_APPLY) are
        // applied here as an embedded commit's are, and their pages are the
        // server's: installed in its buffer pool once the log is durable,
        // not left to the client.
        let trees = t.key_range_trees();
        let (applied, tree_images) = s.apply_trees(&mut t, &trees)?;
        let freed: Vec<PageId> = t.to_free.iter().copied().collect();
        let decided = {
            let gate = s.sink.gate.read().unwrap_or_else(|e| e.into_inner());
            // At or before the start of this commit's first record (the
            // LSNs `append_records` returns are where records end).
            let start = s.wal.end_lsn();
            let appended = s.append_records(&mut t, tree_images);
            applied.release(&s, appended.is_ok());
            match appended {
                Err(e) => {
                    // Lock order Volume → gate: see `commit_txn`.
                    drop(gate);
                    t.pages.clear();
                    s.give_back(&t);
                    s.commit_installed(&mut t);
                    t.finish();
                    return Err(e);
                }
                Ok((lsns, commit_lsn)) => {
                    // Under the gate: a checkpoint picking its redo LSN sees
                    // this hold, or began before these records.
                    done.hold = s.hold_redo(start);
                    // Its client writes the pages: nothing is installed
                    // here. The images they replace go to the version
                    // store now, while the volume file still has them, and
                    // the commit stays in flight for snapshots until the
                    // pages are written (`Unwritten::end`).
                    // (The pages it frees are kept when they are freed.)
                    // Its tree pages are installed here, once durable.
                    done.lsns = lsns
                        .into_iter()
                        .filter(|(p, _)| t.pages.contains(*p) && !freed.contains(p))
                        .collect();
                    let kept = s.keep_unwritten(&done.lsns);
                    s.note_unwritten(&done.lsns, true);
                    kept.and_then(|()| s.wal.flush(commit_lsn))
                        .and_then(|()| s.install_rebased(&mut t))
                }
            }
        };
        // From here on the commit is decided: `t` is never rolled back, and
        // its locks stay until the pages are written or repaired.
        t.active = false;
        let id = t.id;
        done.txn = Some(t);
        // (The pages it frees go when it ends: see `Unwritten::end`.)
        if let Err(e) = decided {
            s.poison(format!("{id} failed after its COMMIT was logged: {e}"));
            return Err(e);
        }
        s.counters.commits.fetch_add(1, Ordering::Relaxed);
        Ok(done)
    }
}

impl Unwritten {
    /// Each page the commit changed (pages it freed are not written), with
    /// the LSN the client stamps on it before writing it.
    pub fn lsns(&self) -> &[(PageId, Lsn)] {
        &self.lsns
    }

    /// The client wrote and synced every page of [`Unwritten::lsns`]: the
    /// server forgets any copy of them it holds (one read ahead while they
    /// were locked would be stale now) and releases the locks.
    pub fn written(mut self) -> Result<()> {
        let result = self.forget_copies();
        result.and(self.end())
    }

    fn forget_copies(&mut self) -> Result<()> {
        let Some(t) = self.txn.as_mut() else {
            return Ok(());
        };
        for &(id, lsn) in &self.lsns {
            if !self.shared.pool.discard(id)? {
                // Pinned or being read: replace it with what was written.
                let mut image = t
                    .pages
                    .get(id)?
                    .ok_or_else(|| Error::Internal(format!("after-image of page {id} vanished")))?
                    .to_vec();
                page::set_lsn(&mut image, lsn);
                page::seal(&mut image);
                self.shared.pool.install(id, &image)?;
            }
        }
        Ok(())
    }

    /// The client never said its pages were written: each after-image goes
    /// into the buffer pool, dirty, for the server to write.
    fn repair(&mut self) -> Result<()> {
        let Some(t) = self.txn.as_mut() else {
            return Ok(());
        };
        for &(id, lsn) in &self.lsns {
            let after = t
                .pages
                .get(id)?
                .ok_or_else(|| Error::Internal(format!("after-image of page {id} vanished")))?;
            let mut g = self.shared.pool.create(id)?;
            g.copy_from_slice(after);
            page::set_lsn(&mut g, lsn);
        }
        if !self.lsns.is_empty() {
            self.shared
                .counters
                .repaired
                .fetch_add(self.lsns.len() as u64, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Releases the hold on the redo LSN; the commit is no longer in
    /// flight for snapshots (its pages are where a read finds them); the
    /// pages it frees go; then the locks go.
    ///
    /// The frees wait until here, as an embedded commit's wait until its
    /// pages are installed: a page let go while the commit is in flight
    /// could be allocated and formatted again by a system action a
    /// snapshot that does not see the commit sees, and that snapshot would
    /// find the page empty. Let go after, a new format is newer than every
    /// snapshot that does not see the commit, which reads the page's last
    /// image from the version store. Until then the COMMIT record lists
    /// the frees (a crash redoes them) and the page stays locked X.
    fn end(&mut self) -> Result<()> {
        self.shared.release_redo(self.hold);
        let mut result = Ok(());
        if let Some(mut t) = self.txn.take() {
            self.shared.commit_installed(&mut t);
            if let Err(e) = self.shared.free_deferred(&mut t) {
                self.shared.poison(format!(
                    "{} failed to free its pages after its COMMIT was logged: {e}",
                    t.id
                ));
                result = Err(e);
            }
            self.shared.note_unwritten(&self.lsns, false);
            t.finish();
        }
        result
    }
}

impl Shared {
    /// Hands the version store the committed image of each page a
    /// file-server commit changes (`lsns`: each with the LSN of its new
    /// image), read before its client writes the new one.
    fn keep_unwritten(&self, lsns: &[(PageId, Lsn)]) -> Result<()> {
        let end = self.wal.end_lsn();
        for &(id, lsn) in lsns {
            let g = self.pool.read(id)?;
            self.versions.keep(id, page::lsn(&g), lsn, &g, end);
        }
        Ok(())
    }

    /// Notes that a client writes `pages` now (`writing`), or has written
    /// them.
    fn note_unwritten(&self, pages: &[(PageId, Lsn)], writing: bool) {
        let mut m = super::db::lock(&self.unwritten_pages);
        for &(id, _) in pages {
            if writing {
                *m.entry(id).or_insert(0) += 1;
            } else if let Some(n) = m.get_mut(&id) {
                *n -= 1;
                if *n == 0 {
                    m.remove(&id);
                }
            }
        }
    }

    /// True if a file-server client may be writing page `id` now.
    pub(super) fn being_written(&self, id: PageId) -> bool {
        super::db::lock(&self.unwritten_pages).contains_key(&id)
    }
}

impl Drop for Unwritten {
    fn drop(&mut self) {
        if self.txn.is_none() {
            return;
        }
        if let Err(e) = self.repair() {
            let id = self.txn.as_ref().map_or(TxnId(0), Txn::id);
            self.shared.poison(format!(
                "repairing the pages of {id}, a file-server commit its client never wrote, failed: {e}"
            ));
        }
        // A failure to free poisons the database (`end`): nothing more to say.
        let _ = self.end();
    }
}

impl Txn {
    /// Verifies a file-server client's full-image PAGE records (see the
    /// module docs) and stages each as a private page; all or nothing.
    fn stage_full_images(&mut self, records: &[&[u8]], named: TxnId) -> Result<()> {
        let mut staged: Vec<(PageId, Vec<u8>)> = Vec::with_capacity(records.len());
        for (i, bytes) in records.iter().enumerate() {
            let ClientRecord { id, full, runs } = self.client_record(bytes, i, named)?;
            if !full {
                return Err(refuse(i, id, "a file-server commit carries full page images".into()));
            }
            if !self.db.is_page_in_use(self.id, id)? {
                return Err(refuse(i, id, "the page is not in use".into()));
            }
            let mut after = vec![0u8; self.db.page_size()];
            redo::apply(&mut after, id, true, &runs, Lsn(0)).map_err(|e| super::remote::malformed(i, id, &e))?;
            self.check_client_after(i, id, &after)?;
            super::remote::stage_one(&mut staged, id, after);
        }
        self.stage_pages(staged)
    }
}
