//! The backend seam: what a [`Txn`] needs from whatever
//! keeps the database — the embedded engine in this process, or a server
//! reached over the network.
//!
//! A transaction's algorithms live once, in [`Txn`] and the layers under it:
//! private copies of changed pages (no-steal), the object layer, large
//! objects, the B+-tree, doom on errors. A backend supplies the rest:
//!
//! - **locks**, taken for a transaction's lock owner and held until it ends;
//!   taking a page lock may bring the page's committed image along (a remote
//!   backend piggy-backs the lock on the page fetch, so locking adds no round
//!   trip);
//! - **committed page images** ([`Backend::read_committed`]), which the
//!   transaction copies before its first change to a page;
//! - **space**: pages in use, the group of a page, allocation and free;
//! - **commit** of the transaction's private pages, and **rollback**.
//!
//! The embedded engine (`Shared`, in `db.rs`) implements it with its buffer
//! pool, lock manager, volume and log; the page-server client in the `cairn`
//! crate implements it with a client buffer pool over a remote page device
//! and the page service of `cairn serve`.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::error::Result;
use crate::ids::{GroupId, PageId, TxnId};
use crate::lock::{LockMode, LockOwner, LockWait, Resource};
use crate::page::PageType;

use super::{ObjectMerges, Txn};

/// What a transaction needs from the database underneath it. Object safe:
/// a [`Txn`] holds an `Arc<dyn Backend>`.
///
/// Methods that take a `txn` answer *for that transaction*: a page another
/// running transaction allocated is not in use for anybody else, and a page
/// this one freed is not in use for it.
pub trait Backend: Send + Sync {
    /// The page size in bytes.
    fn page_size(&self) -> usize;
    /// The clustering region, in pages, for create-near.
    fn region_pages(&self) -> u32;
    /// Refuses every operation once the backend can no longer be trusted
    /// (a poisoned engine, a lost server connection).
    fn check_usable(&self) -> Result<()>;

    /// Takes `res` in `mode` for `owner`, waiting while it conflicts (a
    /// deadlock or a timeout is an error). The transaction remembers what it
    /// holds and does not ask twice.
    fn lock(&self, owner: LockOwner, res: Resource, mode: LockMode) -> Result<()>;
    /// Takes `res` in `mode` if no other owner is in the way; false if one
    /// is (nothing waits).
    fn try_lock(&self, owner: LockOwner, res: Resource, mode: LockMode) -> Result<bool>;
    /// Lowers `owner`'s lock on `res` to `mode` (which the held one covers)
    /// where the backend can: `Ok(false)`, nothing changed, where it cannot
    /// (the default). A transaction de-escalating a page's S it took for
    /// its reads ([`Txn::set_coarse_reads`]) lowers it to IS once its
    /// objects are locked one by one.
    ///
    /// [`Txn::set_coarse_reads`]: super::Txn::set_coarse_reads
    fn downgrade_lock(&self, owner: LockOwner, res: Resource, mode: LockMode) -> Result<bool> {
        let _ = (owner, res, mode);
        Ok(false)
    }
    /// Takes `res` in `mode` without a thread waiting for it, where the
    /// backend can (a server's clients' transactions, [`Txn::set_parking`]):
    /// granted now, parked in the lock manager's queue, or
    /// [`Parking::MustBlock`] when the request cannot be parked (it would
    /// first have to wait for callbacks); the caller then takes it with
    /// [`Backend::lock`]. The default can never park.
    fn park_lock(&self, owner: LockOwner, res: Resource, mode: LockMode) -> Result<Parking> {
        let _ = (owner, res, mode);
        Ok(Parking::MustBlock)
    }

    /// Calls `f` with the committed image of page `id` (never a
    /// transaction's private copy). The caller holds a lock on the page.
    fn read_committed(&self, id: PageId, f: &mut dyn FnMut(&[u8])) -> Result<()>;
    /// Like [`Backend::read_committed`], but only if the image is at hand
    /// without waiting for I/O (in the buffer pool now): true if `f` was
    /// called. The default never is; a caller then uses
    /// [`Backend::read_committed`] where it may wait.
    fn read_committed_cached(&self, _id: PageId, _f: &mut dyn FnMut(&[u8])) -> Result<bool> {
        Ok(false)
    }

    /// Pages in the volume.
    fn page_count(&self) -> u32;
    /// True if the group exists.
    fn group_exists(&self, group: GroupId) -> bool;
    /// The group owning page `id`'s extent. A backend that has to ask
    /// (and may fail: a lost connection, a lock the question waited for)
    /// returns the error; it never guesses.
    fn group_of_page(&self, txn: TxnId, id: PageId) -> Result<Option<GroupId>>;
    /// True if page `id` is allocated and usable by `txn` (see the trait
    /// docs); errors as for [`Backend::group_of_page`].
    fn is_page_in_use(&self, txn: TxnId, id: PageId) -> Result<bool>;
    /// The in-use pages of `group` in physical order, as `txn` sees them.
    /// The caller holds the group's shared lock.
    fn group_pages(&self, txn: TxnId, group: GroupId) -> Result<Vec<PageId>>;
    /// Decides whether an insert of `owner`'s transaction into `group` may
    /// try page `page` now: it is in use, belongs to `group`, and its
    /// exclusive lock was granted without waiting (then it is held).
    /// The default asks [`Backend::is_page_in_use`], [`Backend::group_of_page`]
    /// and [`Backend::try_lock`] in turn; a remote backend answers all three
    /// in one round trip.
    fn try_insert_page(&self, owner: LockOwner, group: GroupId, page: PageId) -> Result<bool> {
        Ok(self.is_page_in_use(owner.txn, page)?
            && self.group_of_page(owner.txn, page)? == Some(group)
            && self.try_lock(owner, Resource::Page(page), LockMode::X)?)
    }

    /// [`Backend::try_insert_page`] of the pages of `candidates` in order,
    /// for an insert of a payload of `need` bytes, until one is granted:
    /// the pages granted (now held X), in order, and how many of
    /// `candidates` were tried. The caller looks at the pages granted for
    /// room, and tries the rest again if none had it. The default stops at
    /// the first page granted without looking at its room; a remote
    /// backend asks about all of them in one round trip, and its server
    /// passes over (nothing locked) the pages without room and stops at
    /// the first locked page with it. Pages the transaction holds X on
    /// already are the caller's to look at, not passed here.
    fn try_insert_pages(
        &self,
        owner: LockOwner,
        group: GroupId,
        candidates: &[PageId],
        need: usize,
    ) -> Result<(Vec<PageId>, usize)> {
        let _ = need;
        for (i, &p) in candidates.iter().enumerate() {
            if self.try_insert_page(owner, group, p)? {
                return Ok((vec![p], i + 1));
            }
        }
        Ok((Vec::new(), candidates.len()))
    }

    /// The hints of which page the next insert into each group tries first
    /// (shared by the backend's transactions).
    fn fill_pages(&self) -> &FillPages;

    /// Allocates a page in `group` (near `near` when it can) for `owner`'s
    /// transaction, formatted as an empty page of type `ty`. The transaction
    /// holds the group's IX lock and the page's X lock when this returns.
    fn allocate(&self, owner: LockOwner, group: GroupId, near: Option<PageId>, ty: PageType) -> Result<PageId>;
    /// Records that `owner`'s transaction frees `page` at commit; the
    /// transaction holds (or now takes) the page's X lock.
    fn free(&self, owner: LockOwner, page: PageId) -> Result<()>;

    /// Commits `txn` (active, not doomed, with changes): makes its private
    /// pages, allocations and frees durable and visible, or fails. Its
    /// locks are released by [`Backend::end`] afterwards either way.
    fn commit(&self, txn: &mut Txn) -> Result<()>;
    /// Undoes what `txn` did outside its private pages (its allocations):
    /// an abort. Cannot fail; a failure that leaves the database unsure is
    /// the backend's to report on the next call.
    fn rollback(&self, txn: &mut Txn);
    /// The transaction has ended (committed, rolled back): release its
    /// locks and forget it.
    fn end(&self, owner: LockOwner, allocated: &[PageId]);
    /// Takes `mode` (S; U: the transaction reads them to change some
    /// next; X: it is about to change them) on every page of `pages` for
    /// `owner` (none of them held so yet), in the order of `pages`, and
    /// brings them into the backend's cache, as reading each would, but
    /// all at once: a remote backend sends the fetches together, several
    /// pages a request (under S and X every request in flight before the
    /// first reply is read; under U one after another, so that the server
    /// takes them in order). True if the locks are held now; the default takes
    /// nothing and says false (each page is locked when it is used, as
    /// usual: an embedded engine has no round trip to save).
    fn prefetch(&self, owner: LockOwner, pages: &[PageId], mode: LockMode) -> Result<bool> {
        let _ = (owner, pages, mode);
        Ok(false)
    }
    /// Offers the appends `merges` (by object, none of them on a page
    /// `owner` changed or holds X on) for the backend to keep at object
    /// grain and apply at the transaction's commit: a page client sends
    /// them to its server, which keeps them under append locks
    /// (`txn/append.rs`). Returns the pages whose appends it keeps — all
    /// the appends offered on each, never some — and the caller applies
    /// the rest itself. The default keeps none.
    fn keep_merges(&self, owner: LockOwner, merges: &[ObjectMerges]) -> Result<Vec<PageId>> {
        let _ = (owner, merges);
        Ok(Vec::new())
    }
    /// True if [`Backend::keep_merges`] may keep any (the default: false,
    /// and nothing is offered).
    fn keeps_merges(&self) -> bool {
        false
    }
    /// True if a lock costs a round trip to a server and the server takes
    /// U (a page- or file-server client): [`Txn::lock_leaves_for_update`] then
    /// takes a lookup's update locks together. False by default.
    fn locks_remotely(&self) -> bool {
        false
    }
    /// True if the backend keeps transactions' object-level changes (see
    /// [`Txn::set_object_locking`]): it reserves room with
    /// [`Backend::reserve_room`] and its commit applies them to the newest
    /// image of each page. The default does not.
    fn object_locking(&self) -> bool {
        false
    }
    /// Reserves `bytes` of room on `page` for `owner`'s object-level changes
    /// there (replacing what it reserved before), if the page's room covers
    /// it besides every other transaction's reservation; false if not (a
    /// growing record then does not fit there and its body moves to a page
    /// with room). Reservations end
    /// with the transaction ([`Backend::end`]). The default grants none.
    fn reserve_room(&self, owner: LockOwner, page: PageId, bytes: usize) -> Result<bool> {
        let _ = (owner, page, bytes);
        Ok(false)
    }
    /// The room [`Backend::reserve_room`] would grant `owner` on `page`
    /// now, read without a lock (a hint: it may change before a
    /// reservation); `None` if the backend does not say (the default).
    fn room_left(&self, owner: LockOwner, page: PageId) -> Result<Option<usize>> {
        let _ = (owner, page);
        Ok(None)
    }
    /// The trees under key-range locking (`txn::keys`), if the backend
    /// locks key ranges; the default does not (its transactions lock a
    /// tree's pages).
    fn key_ranges(&self) -> Option<&super::KeyRanges> {
        None
    }
    /// The server that runs the B+-tree operations of this backend's
    /// transactions, if one does (a page-server client of a server that
    /// locks key ranges: `txn::server_trees`); the default runs them here.
    fn tree_service(&self) -> Option<&dyn super::TreeService> {
        None
    }
    /// Calls `f` with the newest image of page `id`: the one a commit
    /// logged and has not installed yet, else the committed one. Read
    /// under a tree's latch, without a lock. The default is
    /// [`Backend::read_committed`].
    fn read_newest(&self, id: PageId, f: &mut dyn FnMut(&[u8])) -> Result<()> {
        self.read_committed(id, f)
    }
    /// Whether a change under `res` in `mode` (an inserter's IX on the gap
    /// its entry falls in, under key-range locking) may go on without a
    /// lock: `Some(guard)` if the write-lock hook
    /// ([`super::Db::set_write_lock_hook`]) has nothing to call back (hold
    /// the guard until the change is registered: it keeps a new right off
    /// `res` meanwhile), `None` if it has — take the lock then, which calls
    /// back. The default has no hook and says go on.
    fn probe_write(&self, owner: LockOwner, res: Resource, mode: LockMode) -> Result<Option<super::HookGuard>> {
        let _ = (owner, res, mode);
        Ok(Some(None))
    }
    /// Who holds `res`, in which mode (an inserter's check of a gap under
    /// key-range locking). The default knows of nobody.
    fn lock_holders(&self, res: &Resource) -> Vec<(LockOwner, LockMode)> {
        let _ = res;
        Vec::new()
    }
    /// Calls `f` with the image of page `id` at `snap` (see
    /// `txn::versions`): the committed one if no commit after the snapshot
    /// changed it, else the version kept for it. No lock. The default
    /// keeps no versions and refuses.
    fn read_at(&self, id: PageId, snap: super::Snapshot, f: &mut dyn FnMut(&[u8])) -> Result<()> {
        let _ = (id, snap, f);
        Err(crate::Error::InvalidArgument("this backend keeps no snapshots".into()))
    }
    /// True if page `id` was in use as of `snap` (see `txn::versions`): in
    /// use now, or freed by a commit the snapshot does not see. The default
    /// keeps no snapshots and answers as [`Backend::is_page_in_use`].
    fn is_page_in_use_at(&self, txn: TxnId, id: PageId, snap: super::Snapshot) -> Result<bool> {
        let _ = snap;
        self.is_page_in_use(txn, id)
    }
    /// Ends a snapshot: the versions only it needed go.
    fn end_snapshot(&self, snap: super::Snapshot) {
        let _ = snap;
    }
    /// Counts a read-only transaction that ended.
    /// Runs a catalog change (`change`: the schema layer's encoding of it)
    /// where the catalog is kept: a remote client's backend sends it to
    /// the server, which checks and applies it in this transaction, stages
    /// the server's images of the pages it changed in `txn`
    /// ([`Txn::stage_server_pages`]) and returns the server's answer.
    /// `None` (the default, and an embedded database's): the caller runs
    /// the change in this process.
    fn catalog_change(&self, _txn: &mut Txn, _change: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(None)
    }

    fn note_read_only(&self) {}
    /// Counts private pages a transaction spilled to disk.
    fn note_spilled(&self, pages: u64) {
        let _ = pages;
    }
    /// Counts an object-level change that escalated to its page's X lock
    /// (no room could be reserved on the page for its growth).
    fn note_escalated(&self) {}
    /// Counts an append kept under an append lock or to commit (`kept`),
    /// or left to be made whole.
    fn note_append(&self, kept: bool) {
        let _ = kept;
    }
}

/// What [`Backend::park_lock`] did.
#[derive(Debug)]
pub enum Parking {
    /// The lock is held now.
    Granted,
    /// The request waits in its queue; nothing holds a thread for it.
    Parked(ParkedLock),
    /// It cannot be parked; take it with [`Backend::lock`].
    MustBlock,
}

/// A lock request of a transaction parked by [`Backend::park_lock`]: the
/// queued request ([`LockWait`]) and what must be held until the request is
/// over (the write-lock hook's guard, which keeps other clients from taking
/// a right to cache the resource meanwhile). Its holder awaits
/// [`ParkedLock::wait`], or calls [`ParkedLock::time_out`] when its timeout
/// passes, and hands the outcome to [`Txn::finish_parked`].
#[derive(Debug)]
pub struct ParkedLock {
    wait: LockWait,
    guard: GuardBox,
}

/// The hook's guard, opaque.
struct GuardBox(crate::txn::HookGuard);

impl std::fmt::Debug for GuardBox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "GuardBox(held)"
        } else {
            "GuardBox(none)"
        })
    }
}

impl ParkedLock {
    /// A parked request, with the guard to hold until it is over.
    pub fn new(wait: LockWait, guard: crate::txn::HookGuard) -> ParkedLock {
        ParkedLock {
            wait,
            guard: GuardBox(guard),
        }
    }

    /// The resource waited for and the mode asked.
    pub fn request(&self) -> (Resource, LockMode) {
        (self.wait.resource(), self.wait.mode())
    }

    /// The wait, to await (see [`LockWait`]).
    pub fn wait(&mut self) -> &mut LockWait {
        &mut self.wait
    }

    /// Gives up at the timeout ([`LockWait::time_out`]).
    pub fn time_out(self) -> Result<()> {
        let ParkedLock { wait, guard } = self;
        let r = wait.time_out();
        drop(guard);
        r
    }
}

/// Per group, the page the next insert tries first: a hint shared by a
/// backend's transactions (never trusted: an insert checks the page first).
#[derive(Debug, Default)]
pub struct FillPages(Mutex<HashMap<GroupId, PageId>>);

impl FillPages {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<GroupId, PageId>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The fill page of `group`.
    pub fn get(&self, group: GroupId) -> Option<PageId> {
        self.map().get(&group).copied()
    }

    /// Sets (or, with `None`, clears) the fill page of `group`.
    pub fn set(&self, group: GroupId, page: Option<PageId>) {
        let mut m = self.map();
        match page {
            Some(p) => m.insert(group, p),
            None => m.remove(&group),
        };
    }

    /// Forgets each of `pages` as a fill page of any group (they were
    /// freed, or allocated by a transaction that ended).
    pub fn forget(&self, pages: &[PageId]) {
        if !pages.is_empty() {
            self.map().retain(|_, f| !pages.contains(f));
        }
    }
}
