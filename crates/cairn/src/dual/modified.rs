//! Modified copies: a transaction's changes held in the buffer, flushed
//! into the transaction (its private pages) when relocated, displaced or at
//! commit, and nowhere else before it commits (no-steal).

use std::sync::Arc;

use cairn_storage::{Oid, PageId};

use super::{Backing, Copying, DualBuffer, PageDesc, Seg};
use crate::error::{Error, Result};

impl DualBuffer {
    /// `owner` changed `oid` to `bytes` (its new record), under an
    /// exclusive lock. An early update (home page resident, in place)
    /// under NOC, LOC and LOC− is written through to the transaction at
    /// once (the page is then marked changed); a late update (a copy), or
    /// any update under EOC and LOC+, becomes a modified copy, flushed
    /// when it is relocated or the transaction commits.
    pub fn modify(&mut self, owner: u64, oid: Oid, bytes: Arc<[u8]>, backing: &mut dyn Backing) -> Result<()> {
        self.refuse_if_held_by_another(owner, oid, "changes")?;
        let copied = self
            .objects
            .get(&oid)
            .is_some_and(|o| o.copy.is_some() || o.modified.is_some());
        let as_copy = match self.cfg.strategy.copying {
            Copying::Noc => false,
            Copying::Eoc | Copying::LocPlus => true,
            Copying::Loc | Copying::LocMinus => copied || !self.resident(oid.page),
        };
        if !as_copy {
            // In place: the change goes to the transaction's own copy of the
            // page, which it reads itself when the buffer does not hold the
            // page (NOC only; that read is counted as a flush's page fault).
            self.page_for_flush(oid.page, owner);
            backing.flush_object(owner, oid, &bytes)?;
            self.stats.objects_flushed += 1;
            self.mark_changed(oid.page, owner);
            self.mark_flushed(oid, owner);
            self.rebalance(backing)?;
            return Ok(());
        }
        if self.cfg.strategy.copying == Copying::LocPlus && !copied && self.resident(oid.page) {
            // LOC+ copies an object when it is first changed.
            self.stats.objects_copied += 1;
            self.stats.bytes_copied += bytes.len() as u64;
        }
        let len = bytes.len();
        if let Some(o) = self.objects.get_mut(&oid) {
            if let Some((_, old)) = o.modified.take() {
                self.bytes -= Self::copy_charge(old.len());
            }
        }
        self.make_room(Self::copy_charge(len), backing)?;
        self.describe(oid, len);
        let o = self.objects.get_mut(&oid).expect("described");
        o.modified = Some((owner, bytes));
        self.bytes += Self::copy_charge(len);
        self.touch_object(oid);
        self.rebalance(backing)?;
        Ok(())
    }

    /// Before `owner` commits: every modified copy it holds is flushed
    /// into it. The caller writes what was flushed into its transaction,
    /// calls [`DualBuffer::committed`] and commits (or, on failure,
    /// [`DualBuffer::abort`]).
    pub fn flush_for_commit(&mut self, owner: u64, backing: &mut dyn Backing) -> Result<()> {
        for oid in self.modified_by(owner) {
            self.flush_object(oid, backing)?;
        }
        Ok(())
    }

    /// `owner` committed: the pages it changed hold new committed state, so
    /// their images and copies go (they are loaded again when next used).
    /// Returns how many page images went.
    pub fn committed(&mut self, owner: u64) -> usize {
        let mut dropped = 0;
        self.forget_flushes(owner);
        let changed: Vec<PageId> = self
            .pages
            .iter()
            .filter(|(_, p)| p.changed_by.contains(&owner))
            .map(|(id, _)| *id)
            .collect();
        for page in changed {
            self.stats.pages_flushed += 1;
            if let Some(p) = self.pages.get_mut(&page) {
                p.changed_by.retain(|t| *t != owner);
            }
            dropped += usize::from(self.invalidate_page(page));
        }
        dropped
    }

    /// `owner` ended: the objects it flushed are read from here again.
    pub(super) fn forget_flushes(&mut self, owner: u64) {
        let mine: Vec<Oid> = self
            .objects
            .iter()
            .filter(|(_, o)| o.flushed_by == Some(owner))
            .map(|(oid, _)| *oid)
            .collect();
        for oid in mine {
            self.objects.get_mut(&oid).expect("listed").flushed_by = None;
            self.forget_if_unused(oid);
        }
    }

    /// `owner` ended without committing: its modified copies are dropped
    /// (what it flushed is its own transaction's to roll back).
    pub fn abort(&mut self, owner: u64) {
        self.forget_flushes(owner);
        for oid in self.modified_by(owner) {
            self.drop_modified(oid);
        }
        let pages: Vec<PageId> = self.pages.keys().copied().collect();
        for page in pages {
            if let Some(p) = self.pages.get_mut(&page) {
                p.changed_by.retain(|t| *t != owner);
            }
            self.forget_page_if_unused(page);
        }
    }

    /// An exclusive lock keeps any other transaction's modified copy of
    /// `oid` away from `owner`: one here is an internal error.
    fn refuse_if_held_by_another(&self, owner: u64, oid: Oid, doing: &str) -> Result<()> {
        match self.objects.get(&oid).and_then(|o| o.modified.as_ref()) {
            Some((by, _)) if *by != owner => Err(Error::Internal(format!(
                "transaction {owner} {doing} object {oid} while transaction {by} holds changes to it"
            ))),
            _ => Ok(()),
        }
    }

    /// The objects `owner` holds modified copies of.
    fn modified_by(&self, owner: u64) -> Vec<Oid> {
        self.objects
            .iter()
            .filter(|(_, o)| o.modified.as_ref().is_some_and(|(by, _)| *by == owner))
            .map(|(oid, _)| *oid)
            .collect()
    }

    /// Drops `oid`'s modified copy, if any (its transaction aborted or
    /// deleted the object).
    fn drop_modified(&mut self, oid: Oid) {
        let Some(o) = self.objects.get_mut(&oid) else { return };
        let Some((_, b)) = o.modified.take() else { return };
        self.bytes -= Self::copy_charge(b.len());
        if o.copy.is_none() && self.pages.get(&o.page).is_none_or(|p| p.image.is_none()) {
            // Nothing of it is held any more.
            self.leave_segment(oid);
        } else if o.copy.is_none() {
            if let Seg::Free(t) = o.seg {
                // A modified copy that had left the object segment.
                self.free.remove(&t);
                o.seg = Seg::None;
            }
        }
        self.forget_if_unused(oid);
    }

    /// `owner` deletes `oid` (under an exclusive lock): its modified copy,
    /// if any, is dropped, and from now on it reads the object from its own
    /// pages (where the caller deletes the record) until it ends, as after
    /// a flush; the page counts as changed by it.
    pub fn discard(&mut self, owner: u64, oid: Oid) -> Result<()> {
        self.refuse_if_held_by_another(owner, oid, "deletes")?;
        self.drop_modified(oid);
        self.mark_changed(oid.page, owner);
        self.mark_flushed(oid, owner);
        Ok(())
    }

    /// Hands `oid`'s modified copy to its transaction. The transaction
    /// applies it to its own copy of the home page; when the buffer does
    /// not hold that page the transaction must read it (the paper's cost
    /// of flushing a late update), counted as a page fault and a flush's
    /// page fault, but the page does not enter the buffer: the
    /// transaction's changed pages are its own, outside the budget.
    pub(super) fn flush_object(&mut self, oid: Oid, backing: &mut dyn Backing) -> Result<()> {
        let Some((owner, bytes)) = self.objects.get(&oid).and_then(|o| o.modified.clone()) else {
            return Ok(());
        };
        self.page_for_flush(oid.page, owner);
        backing.flush_object(owner, oid, &bytes)?;
        self.stats.objects_flushed += 1;
        self.stats.relocations += 1;
        let o = self.objects.get_mut(&oid).expect("flushed object");
        o.modified = None;
        if let (Seg::Free(t), None) = (o.seg, &o.copy) {
            // Its only copy, out of the object segment, is gone.
            self.free.remove(&t);
            o.seg = Seg::None;
        }
        self.bytes -= Self::copy_charge(bytes.len());
        self.mark_changed(oid.page, owner);
        self.mark_flushed(oid, owner);
        Ok(())
    }

    /// A change of `owner` is applied to `page`: a use of the page if it
    /// is resident; else the transaction reads it (a page fault, counted
    /// as a flush's) unless it holds its own copy already (it changed the
    /// page before).
    fn page_for_flush(&mut self, page: PageId, owner: u64) {
        if self.resident(page) {
            self.touch_page(page);
        } else if !self.pages.get(&page).is_some_and(|p| p.changed_by.contains(&owner)) {
            self.stats.page_faults += 1;
            self.stats.flush_page_faults += 1;
        }
    }

    /// `owner`'s change to `oid` is in its own pages now: it reads the
    /// object from there until it ends.
    pub(super) fn mark_flushed(&mut self, oid: Oid, owner: u64) {
        self.ensure_described(oid, 0);
        self.objects.get_mut(&oid).expect("described").flushed_by = Some(owner);
    }

    pub(super) fn mark_changed(&mut self, page: PageId, owner: u64) {
        let p = self.pages.entry(page).or_insert_with(PageDesc::empty);
        if !p.changed_by.contains(&owner) {
            p.changed_by.push(owner);
        }
    }
}
