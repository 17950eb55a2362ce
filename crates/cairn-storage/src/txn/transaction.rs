//! A transaction: its private pages, its locks, the object operations over
//! them, abort, and the state machine of the module docs (`super`).

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::access::PageAccess;
use crate::error::{Error, Result};
use crate::ids::{GroupId, Oid, PageId, TxnId};
use crate::lock::{LockMode, LockOwner, Resource};
use crate::page::PageType;
use crate::record::object::{self, GroupScan, ObjectSpace, ObjectStats};

use super::db::{lock, Shared};
use super::spill::PrivatePages;

/// A transaction. Dropping an active transaction aborts it.
pub struct Txn {
    pub(super) db: Arc<Shared>,
    pub(super) id: TxnId,
    owner: LockOwner,
    /// Locks known to be held, to skip the lock manager on repeats.
    held: crate::fxhash::FxHashMap<Resource, LockMode>,
    pub(super) pages: PrivatePages,
    scratch: Vec<u8>,
    pub(super) allocated: Vec<PageId>,
    pub(super) to_free: BTreeSet<PageId>,
    stats: ObjectStats,
    pub(super) active: bool,
    /// Set by an error that left the transaction half-way through a change
    /// (or holding locks it must give up): every call but abort refuses.
    doomed: Option<String>,
    /// Private changes kept so far (page changes, allocations, frees): an
    /// operation that fails after this moved dooms the transaction.
    changes: u64,
}

impl std::fmt::Debug for Txn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Txn")
            .field("id", &self.id)
            .field("active", &self.active)
            .field("doomed", &self.doomed)
            .finish()
    }
}

impl Txn {
    pub(super) fn new(db: Arc<Shared>, id: TxnId, owner: LockOwner, pages: PrivatePages) -> Txn {
        let page_size = db.page_size;
        Txn {
            db,
            id,
            owner,
            held: crate::fxhash::FxHashMap::default(),
            pages,
            scratch: vec![0u8; page_size],
            allocated: Vec::new(),
            to_free: BTreeSet::new(),
            stats: ObjectStats::default(),
            active: true,
            doomed: None,
            changes: 0,
        }
    }

    /// True if an earlier error doomed the transaction (see
    /// [`Error::TxnDoomed`]): only abort is left.
    pub fn is_doomed(&self) -> bool {
        self.doomed.is_some()
    }

    /// The transaction's id.
    pub fn id(&self) -> TxnId {
        self.id
    }

    /// Object-layer counters of this transaction.
    pub fn object_stats(&self) -> ObjectStats {
        self.stats
    }

    pub(super) fn check_active(&self) -> Result<()> {
        if !self.active {
            return Err(Error::TxnNotActive(self.id));
        }
        if let Some(cause) = &self.doomed {
            return Err(Error::TxnDoomed {
                txn: self.id,
                cause: cause.clone(),
            });
        }
        self.db.check_poisoned()
    }

    /// Runs one operation of the public API: refuses if the transaction is
    /// not usable, and dooms it if the operation fails after changing
    /// private state, or with an error that leaves it holding locks it must
    /// give up or private pages it may have lost.
    fn run<R>(&mut self, f: impl FnOnce(&mut Txn) -> Result<R>) -> Result<R> {
        self.check_active()?;
        let before = self.changes;
        let r = f(self);
        if let Err(e) = &r {
            if self.changes != before {
                self.doom(e);
            } else {
                self.doom_if_fatal(e);
            }
        }
        r
    }

    fn lock(&mut self, res: Resource, mode: LockMode) -> Result<()> {
        if self.held.get(&res).is_some_and(|m| m.covers(mode)) {
            return Ok(());
        }
        if let Err(e) = self.db.locks.lock(self.owner, res, mode) {
            // A deadlock victim or a timed-out waiter must give its locks
            // up; whatever it was in the middle of stays half-done.
            self.doom_if_fatal(&e);
            return Err(e);
        }
        let m = self.held.entry(res).or_insert(mode);
        *m = m.sup(mode);
        Ok(())
    }

    /// Dooms the transaction for an error that may have left it half-way
    /// through a change whatever layer made it (the B+-tree and the typed
    /// layer change pages through [`PageAccess`] directly): a lost lock
    /// wait, or an I/O error on its private pages or the pool.
    fn doom_if_fatal(&mut self, e: &Error) {
        if matches!(
            e,
            Error::Deadlock { .. } | Error::LockTimeout { .. } | Error::Io { .. } | Error::Poisoned(_)
        ) {
            self.doom(e);
        }
    }

    /// Dooms the transaction with `e` as the cause (the first cause stays).
    fn doom(&mut self, e: &Error) {
        if self.doomed.is_none() {
            self.doomed = Some(e.to_string());
        }
    }

    /// True if this transaction holds `res` in `mode` or a stronger one.
    pub(super) fn holds(&self, res: Resource, mode: LockMode) -> bool {
        self.held.get(&res).is_some_and(|m| m.covers(mode))
    }

    /// The committed image of page `id` (the pool's, never a private copy).
    pub(super) fn committed_image(&mut self, id: PageId) -> Result<Vec<u8>> {
        let r = self.db.pool.read(id).map(|g| g.to_vec());
        r.inspect_err(|e| self.doom_if_fatal(e))
    }

    /// Page `id` as this transaction sees it: its private copy if it has
    /// one, else the committed image.
    pub(super) fn current_image(&mut self, id: PageId) -> Result<Vec<u8>> {
        let private = self.pages.get(id).inspect_err(|e| {
            self.doomed.get_or_insert_with(|| e.to_string());
        })?;
        match private {
            Some(p) => Ok(p.to_vec()),
            None => self.committed_image(id),
        }
    }

    /// Refuses page access in a doomed transaction.
    fn refuse_if_doomed(&self) -> Result<()> {
        match &self.doomed {
            None => Ok(()),
            Some(cause) => Err(Error::TxnDoomed {
                txn: self.id,
                cause: cause.clone(),
            }),
        }
    }

    /// Locks a page, shared or exclusive, until the transaction ends. The
    /// typed layer locks an object's home page this way before using a
    /// cached copy (shared) and before changing the object (exclusive).
    pub fn lock_page(&mut self, page: PageId, exclusive: bool) -> Result<()> {
        self.run(|t| t.lock(Resource::Page(page), if exclusive { LockMode::X } else { LockMode::S }))
    }

    /// Creates an object in `group`.
    pub fn create(&mut self, group: GroupId, data: &[u8]) -> Result<Oid> {
        self.run(|t| object::create(t, group, data))
    }

    /// Creates an object near `near` (same page if it fits, else within the
    /// clustering region), in `near`'s group.
    pub fn create_near(&mut self, near: Oid, data: &[u8]) -> Result<Oid> {
        self.run(|t| object::create_near(t, near, data))
    }

    /// Reads a whole object.
    pub fn read(&mut self, oid: Oid) -> Result<Vec<u8>> {
        self.run(|t| object::read(t, oid))
    }

    /// Calls `f` with the OID and bytes of every small object stored whole
    /// in its home slot on `page` (see [`object::page_objects`]), under the
    /// page's shared lock.
    pub fn page_objects(&mut self, page: PageId, f: impl FnMut(Oid, &[u8])) -> Result<()> {
        self.run(|t| object::page_objects(t, page, f))
    }

    /// True if this transaction holds a private (changed) copy of `page`:
    /// what it reads there is not committed state.
    pub fn has_private_copy(&self, page: PageId) -> bool {
        self.pages.contains(page)
    }

    /// Calls `f` with an object's bytes, in place in its page when it can
    /// (see [`object::read_with`]); `f` must not block.
    pub fn read_with<R>(&mut self, oid: Oid, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
        self.run(|t| object::read_with(t, oid, f))
    }

    /// Reads part of an object.
    pub fn read_range(&mut self, oid: Oid, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.run(|t| object::read_range(t, oid, offset, buf))
    }

    /// The object's length in bytes.
    pub fn len(&mut self, oid: Oid) -> Result<u64> {
        self.run(|t| object::len(t, oid))
    }

    /// True if `oid` names a live object.
    pub fn exists(&mut self, oid: Oid) -> Result<bool> {
        self.run(|t| object::exists(t, oid))
    }

    /// True if the object is stored as a large object.
    pub fn is_large(&mut self, oid: Oid) -> Result<bool> {
        self.run(|t| object::is_large(t, oid))
    }

    /// Replaces an object's bytes.
    pub fn update(&mut self, oid: Oid, data: &[u8]) -> Result<()> {
        self.run(|t| object::update(t, oid, data))
    }

    /// Writes part of an object (extending it if the range runs past its end).
    pub fn write_range(&mut self, oid: Oid, offset: u64, data: &[u8]) -> Result<()> {
        self.run(|t| object::write_range(t, oid, offset, data))
    }

    /// Appends to an object.
    pub fn append(&mut self, oid: Oid, data: &[u8]) -> Result<()> {
        self.run(|t| object::append(t, oid, data))
    }

    /// Cuts an object to `len` bytes.
    pub fn truncate(&mut self, oid: Oid, len: u64) -> Result<()> {
        self.run(|t| object::truncate(t, oid, len))
    }

    /// Deletes an object.
    pub fn delete(&mut self, oid: Oid) -> Result<()> {
        self.run(|t| object::delete(t, oid))
    }

    /// Starts a scan of a group's objects in physical order. The group is
    /// locked (S) against allocation of new pages, so a scan sees no phantoms.
    pub fn scan(&mut self, group: GroupId) -> Result<GroupScan> {
        self.run(|t| {
            t.lock(Resource::Group(group), LockMode::S)?;
            object::scan(t, group)
        })
    }

    /// Every object of a group, in physical order.
    pub fn scan_all(&mut self, group: GroupId) -> Result<Vec<Oid>> {
        self.run(|t| {
            t.lock(Resource::Group(group), LockMode::S)?;
            object::scan_all(t, group)
        })
    }

    /// Aborts: nothing the transaction did remains.
    pub fn abort(mut self) -> Result<()> {
        if !self.active {
            return Err(Error::TxnNotActive(self.id));
        }
        self.rollback();
        Ok(())
    }

    pub(super) fn rollback(&mut self) {
        let db = self.db.clone();
        self.pages.clear();
        if !self.allocated.is_empty() {
            let mut vol = lock(&db.vol);
            for &p in &self.allocated {
                if vol.is_page_in_use(p) {
                    if let Err(e) = vol.free_logged(p) {
                        db.poison(format!("giving back page {p} at abort failed: {e}"));
                        break;
                    }
                }
            }
        }
        self.finish();
        db.counters.aborts.fetch_add(1, Ordering::Relaxed);
    }

    /// Forgets this transaction's entries in the pending allocations (only
    /// its own: a page it freed may already be another's). Called under the
    /// commit gate right after the COMMIT record is appended, and at the end.
    pub(super) fn drop_pending_allocations(&self) {
        let mut pending = lock(&self.db.pending_alloc);
        for p in &self.allocated {
            if pending.get(p) == Some(&self.id) {
                pending.remove(p);
            }
        }
    }

    pub(super) fn finish(&mut self) {
        self.drop_pending_allocations();
        let mut fill = lock(&self.db.fill);
        for p in self.allocated.iter().chain(self.to_free.iter()) {
            fill.retain(|_, f| f != p);
        }
        drop(fill);
        self.allocated.clear();
        self.to_free.clear();
        self.pages.clear();
        self.db.locks.release_all(self.owner);
        self.held.clear();
        self.active = false;
    }
}

impl Drop for Txn {
    fn drop(&mut self) {
        if self.active {
            self.rollback();
        }
    }
}

impl PageAccess for Txn {
    fn page_size(&self) -> usize {
        self.db.page_size
    }

    fn read<R>(&mut self, id: PageId, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
        self.refuse_if_doomed()?;
        let private = self.pages.get(id).inspect_err(|e| {
            self.doomed.get_or_insert_with(|| e.to_string());
        })?;
        if let Some(p) = private {
            return Ok(f(p));
        }
        if self.to_free.contains(&id) {
            return Err(Error::corrupt(id, format!("{} reads a page it freed", self.id)));
        }
        self.lock(Resource::Page(id), LockMode::S)?;
        let r = self.db.pool.read(id).map(|g| f(&g));
        r.inspect_err(|e| self.doom_if_fatal(e))
    }

    fn modify<R>(&mut self, id: PageId, f: impl FnOnce(&mut [u8]) -> Result<R>) -> Result<R> {
        self.refuse_if_doomed()?;
        self.modify_private(id, f).inspect_err(|e| self.doom_if_fatal(e))
    }

    fn allocate(&mut self, group: GroupId, near: Option<PageId>, ty: PageType) -> Result<PageId> {
        self.refuse_if_doomed()?;
        self.allocate_page(group, near, ty)
            .inspect_err(|e| self.doom_if_fatal(e))
    }

    fn lock_for_update(&mut self, id: PageId) -> Result<()> {
        self.lock(Resource::Page(id), LockMode::X)
    }

    fn free(&mut self, id: PageId) -> Result<()> {
        self.refuse_if_doomed()?;
        self.lock(Resource::Page(id), LockMode::X)?;
        // The private copy stays: it is installed at commit before the page
        // is freed, so the page's uniquifier sequence keeps every uniquifier
        // this transaction handed out on it (an OID of an object created and
        // deleted here must never name a later object).
        self.to_free.insert(id);
        self.changes += 1;
        lock(&self.db.fill).retain(|_, f| *f != id);
        Ok(())
    }
}

impl Txn {
    fn modify_private<R>(&mut self, id: PageId, f: impl FnOnce(&mut [u8]) -> Result<R>) -> Result<R> {
        if self.to_free.contains(&id) {
            return Err(Error::corrupt(id, format!("{} changes a page it freed", self.id)));
        }
        self.lock(Resource::Page(id), LockMode::X)?;
        if !self.pages.contains(id) {
            let g = self.db.pool.read(id)?;
            let spilled = self.pages.insert(id, &g)?;
            drop(g);
            self.db.counters.pages_spilled.fetch_add(spilled, Ordering::Relaxed);
        }
        let Txn { pages, scratch, .. } = self;
        let page = pages
            .get_mut(id)?
            .ok_or_else(|| Error::corrupt(id, "private page vanished"))?;
        scratch.copy_from_slice(page);
        let r = f(scratch)?;
        // The changed copy becomes the page; the old image is the next scratch.
        std::mem::swap(page, scratch);
        self.changes += 1;
        Ok(r)
    }

    fn allocate_page(&mut self, group: GroupId, near: Option<PageId>, ty: PageType) -> Result<PageId> {
        self.lock(Resource::Group(group), LockMode::IX)?;
        let p = {
            let mut vol = lock(&self.db.vol);
            let p = vol.allocate_for(self.id, group, near, ty)?;
            lock(&self.db.pending_alloc).insert(p, self.id);
            p
        };
        self.allocated.push(p);
        self.changes += 1;
        self.lock(Resource::Page(p), LockMode::X)?;
        Ok(p)
    }
}

impl ObjectSpace for Txn {
    fn page_count(&self) -> u32 {
        lock(&self.db.vol).page_count()
    }

    fn group_exists(&self, group: GroupId) -> bool {
        lock(&self.db.vol).group_name(group).is_some()
    }

    fn group_of_page(&self, id: PageId) -> Option<GroupId> {
        lock(&self.db.vol).group_of_page(id)
    }

    fn is_page_in_use(&self, id: PageId) -> bool {
        if self.to_free.contains(&id) {
            return false;
        }
        if lock(&self.db.pending_alloc).get(&id).is_some_and(|t| *t != self.id) {
            return false;
        }
        lock(&self.db.vol).is_page_in_use(id)
    }

    fn region_pages(&self) -> u32 {
        self.db.region_pages
    }

    fn group_pages(&self, group: GroupId) -> Result<Vec<PageId>> {
        let mut pages = lock(&self.db.vol).group_pages(group)?;
        pages.retain(|p| self.is_page_in_use(*p));
        Ok(pages)
    }

    fn fill_page(&self, group: GroupId) -> Option<PageId> {
        lock(&self.db.fill).get(&group).copied()
    }

    fn set_fill_page(&mut self, group: GroupId, page: Option<PageId>) {
        let mut fill = lock(&self.db.fill);
        match page {
            Some(p) => fill.insert(group, p),
            None => fill.remove(&group),
        };
    }

    fn forget_fill_page(&mut self, page: PageId) {
        lock(&self.db.fill).retain(|_, f| *f != page);
    }

    fn may_try_page(&mut self, page: PageId) -> Result<bool> {
        let res = Resource::Page(page);
        if self.held.get(&res).is_some_and(|m| m.covers(LockMode::X)) {
            return Ok(true);
        }
        if self.db.locks.try_lock(self.owner, res, LockMode::X)? {
            let m = self.held.entry(res).or_insert(LockMode::X);
            *m = m.sup(LockMode::X);
            return Ok(true);
        }
        Ok(false)
    }

    fn stats_mut(&mut self) -> &mut ObjectStats {
        &mut self.stats
    }
}
