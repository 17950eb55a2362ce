//! The embedded engine as a [`Backend`]: locks from its lock manager,
//! committed images from its buffer pool, space from its volume, commit
//! through its log (`commit.rs`).

use crate::error::Result;
use crate::ids::{GroupId, PageId, TxnId};
use crate::lock::{LockMode, LockOwner, Resource};
use crate::page::PageType;

use super::backend::{Backend, FillPages};
use super::db::{lock, Shared};
use super::Txn;

impl Backend for Shared {
    fn page_size(&self) -> usize {
        self.page_size
    }

    fn region_pages(&self) -> u32 {
        self.region_pages
    }

    fn check_usable(&self) -> Result<()> {
        self.check_poisoned()
    }

    fn lock(&self, owner: LockOwner, res: Resource, mode: LockMode) -> Result<()> {
        let _guard = self.before_page_write_lock(owner, res, mode, true)?;
        self.locks.lock(owner, res, mode)
    }

    fn downgrade_lock(&self, owner: LockOwner, res: Resource, mode: LockMode) -> Result<bool> {
        self.locks.downgrade(owner, res, mode)?;
        self.counters
            .de_escalations
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(true)
    }

    fn try_lock(&self, owner: LockOwner, res: Resource, mode: LockMode) -> Result<bool> {
        let Some(_guard) = self.before_page_write_lock(owner, res, mode, false)? else {
            return Ok(false);
        };
        self.locks.try_lock(owner, res, mode)
    }

    fn park_lock(&self, owner: LockOwner, res: Resource, mode: LockMode) -> Result<super::Parking> {
        let Some(guard) = self.before_page_write_lock(owner, res, mode, false)? else {
            return Ok(super::Parking::MustBlock);
        };
        Ok(match self.locks.park(owner, res, mode)? {
            None => super::Parking::Granted,
            Some(wait) => super::Parking::Parked(super::ParkedLock::new(wait, guard)),
        })
    }

    fn probe_write(&self, owner: LockOwner, res: Resource, mode: LockMode) -> Result<Option<super::HookGuard>> {
        self.before_page_write_lock(owner, res, mode, false)
    }

    fn read_committed(&self, id: PageId, f: &mut dyn FnMut(&[u8])) -> Result<()> {
        let g = self.pool.read(id)?;
        f(&g);
        Ok(())
    }

    fn key_ranges(&self) -> Option<&super::KeyRanges> {
        self.key_ranges.as_ref()
    }

    fn read_newest(&self, id: PageId, f: &mut dyn FnMut(&[u8])) -> Result<()> {
        let image = lock(&self.newest).get(&id).map(|(_, image)| image.clone());
        match image {
            Some(image) => f(&image),
            None => f(&self.pool.read(id)?),
        }
        Ok(())
    }

    fn read_at(&self, id: PageId, snap: super::Snapshot, f: &mut dyn FnMut(&[u8])) -> Result<()> {
        let g = match self.pool.read(id) {
            Ok(g) => g,
            // A file-server client is writing the page into the volume
            // file (its commit is in flight, so the snapshot does not see
            // it): the read may have met it half written. The version the
            // snapshot sees was kept before the client began.
            Err(e) if self.being_written(id) => {
                return match self.versions.version_at(id, snap, crate::ids::Lsn(u64::MAX))? {
                    Some(image) => {
                        f(&image);
                        Ok(())
                    }
                    None => Err(e),
                };
            }
            Err(e) => return Err(e),
        };
        let lsn = crate::page::lsn(&g);
        if lsn <= snap.lsn && !self.versions.is_expired(snap) {
            f(&g);
            return Ok(());
        }
        // Changed after the snapshot's LSN (or the snapshot expired): the
        // store says whether the snapshot sees this image, else gives the
        // version it sees — kept by the install before the new image was
        // visible. (The frame stays held for reading meanwhile, so no
        // install slips in between; an install takes the frame, then the
        // store, in that order too.)
        match self.versions.version_at(id, snap, lsn)? {
            None => f(&g),
            Some(image) => f(&image),
        }
        Ok(())
    }

    fn is_page_in_use_at(&self, txn: TxnId, id: PageId, snap: super::Snapshot) -> Result<bool> {
        Ok(self.is_page_in_use(txn, id)? || self.versions.freed_unseen(id, snap))
    }

    fn end_snapshot(&self, snap: super::Snapshot) {
        self.versions.end(snap, self.wal.end_lsn());
    }

    fn lock_holders(&self, res: &Resource) -> Vec<(LockOwner, LockMode)> {
        self.locks.holders(res)
    }

    fn read_committed_cached(&self, id: PageId, f: &mut dyn FnMut(&[u8])) -> Result<bool> {
        match self.pool.read_cached(id)? {
            Some(g) => {
                f(&g);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    // The space questions of the read path go to the volume's `SpaceView`,
    // never to the `Volume` mutex: a reader does not wait behind a system
    // action's log append or page writes.

    fn page_count(&self) -> u32 {
        self.space.page_count()
    }

    fn group_exists(&self, group: GroupId) -> bool {
        self.space.group_exists(group)
    }

    fn group_of_page(&self, _txn: TxnId, id: PageId) -> Result<Option<GroupId>> {
        Ok(self.space.group_of_page(id))
    }

    fn is_page_in_use(&self, txn: TxnId, id: PageId) -> Result<bool> {
        if lock(&self.pending_alloc).get(&id).is_some_and(|t| *t != txn) {
            return Ok(false);
        }
        Ok(self.space.is_page_in_use(id))
    }

    /// A page another transaction is allocating right now shows in the view
    /// a moment before it is registered as that transaction's (both happen
    /// under the `Volume` mutex, the view first). Reading such a page is
    /// harmless (it is empty), but putting an object on it is not: if its
    /// transaction aborts, the page is freed with the object. So once the
    /// lock is granted the answer is checked again under the mutex, where
    /// the allocation is either not visible or complete.
    fn try_insert_page(&self, owner: LockOwner, group: GroupId, page: PageId) -> Result<bool> {
        if !self.is_page_in_use(owner.txn, page)? || self.space.group_of_page(page) != Some(group) {
            return Ok(false);
        }
        // Through the write-lock hook, which refuses (nothing waits here)
        // while a client caches the page under a right: placing a record
        // changes the page, and a copy cached elsewhere would go stale
        // without a callback (a page client then followed a forwarding
        // stub into its old copy of the page).
        if !Backend::try_lock(self, owner, Resource::Page(page), LockMode::X)? {
            return Ok(false);
        }
        let vol = lock(&self.vol);
        let ours = lock(&self.pending_alloc).get(&page).is_none_or(|t| *t == owner.txn);
        // (The lock stays until the transaction ends, unused if not ours.)
        Ok(ours && vol.is_page_in_use(page) && vol.group_of_page(page) == Some(group))
    }

    fn group_pages(&self, txn: TxnId, group: GroupId) -> Result<Vec<PageId>> {
        let mut pages = lock(&self.vol).group_pages(group)?;
        let pending = lock(&self.pending_alloc);
        pages.retain(|p| pending.get(p).is_none_or(|t| *t == txn));
        Ok(pages)
    }

    fn fill_pages(&self) -> &FillPages {
        &self.fill
    }

    fn allocate(&self, owner: LockOwner, group: GroupId, near: Option<PageId>, ty: PageType) -> Result<PageId> {
        self.locks.lock(owner, Resource::Group(group), LockMode::IX)?;
        let p = {
            let mut vol = lock(&self.vol);
            let p = vol.allocate_for(owner.txn, group, near, ty)?;
            lock(&self.pending_alloc).insert(p, owner.txn);
            p
        };
        // Through the write-lock hook like any X: a client may still hold
        // a right to cache the page from before it was freed (a copy of
        // its old contents), which must be called back before the page is
        // formatted and used again.
        if let Err(e) = Backend::lock(self, owner, Resource::Page(p), LockMode::X) {
            // Not the transaction's yet (it records the page only on
            // success): give it back now, or nobody would.
            let mut vol = lock(&self.vol);
            if let Err(f) = vol.free_logged(p) {
                self.poison(format!("giving back page {p} after a failed lock failed: {f}"));
            }
            lock(&self.pending_alloc).remove(&p);
            return Err(e);
        }
        Ok(p)
    }

    fn free(&self, owner: LockOwner, page: PageId) -> Result<()> {
        Backend::lock(self, owner, Resource::Page(page), LockMode::X)
    }

    fn commit(&self, txn: &mut Txn) -> Result<()> {
        self.commit_txn(txn)
    }

    fn rollback(&self, txn: &mut Txn) {
        self.give_back(txn);
    }

    fn end(&self, owner: LockOwner, allocated: &[PageId]) {
        self.drop_pending_allocations(owner.txn, allocated);
        self.release_room(owner.txn);
        self.locks.release_all(owner);
    }

    fn object_locking(&self) -> bool {
        true
    }

    fn reserve_room(&self, owner: LockOwner, page: PageId, bytes: usize) -> Result<bool> {
        self.reserve_room_for(owner.txn, page, bytes)
    }

    fn room_left(&self, owner: LockOwner, page: PageId) -> Result<Option<usize>> {
        self.room_left_for(owner.txn, page).map(Some)
    }

    fn note_read_only(&self) {
        self.counters
            .read_only
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    fn note_escalated(&self) {
        self.counters
            .escalations
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    fn note_append(&self, kept: bool) {
        let c = if kept {
            &self.counters.appends_kept
        } else {
            &self.counters.appends_whole
        };
        c.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    fn note_spilled(&self, pages: u64) {
        self.counters
            .pages_spilled
            .fetch_add(pages, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Shared {
    /// Runs the write-lock hook ([`super::Db::set_write_lock_hook`]) before a
    /// lock that lets its owner change a page or an object (X, SIX or IX on
    /// a page, X or A on an object; not U, a read), or what a B+-tree's gap covers under
    /// key-range locking (IX or X on a gap or the tree's end, X on the
    /// whole tree): `Some(guard)` to go on (held until the lock request
    /// returns), `None` if `wait` is false and the hook would have to wait.
    /// Without a hook, or for any other lock, goes on at once.
    fn before_page_write_lock(
        &self,
        owner: LockOwner,
        res: Resource,
        mode: LockMode,
        wait: bool,
    ) -> Result<Option<super::db::HookGuard>> {
        let writes = match res {
            // U reads (it only announces a change: X comes before one).
            Resource::Page(_) | Resource::Object(_) | Resource::Gap(..) | Resource::TreeEnd(_) => {
                !LockMode::U.covers(mode)
            }
            Resource::Tree(_) => mode == LockMode::X,
            _ => false,
        };
        if !writes {
            return Ok(Some(None));
        }
        match self.write_hook.get() {
            None => Ok(Some(None)),
            Some(hook) => hook(owner, res, mode, wait),
        }
    }
}
