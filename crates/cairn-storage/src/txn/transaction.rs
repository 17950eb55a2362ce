//! A transaction: its private pages, its locks, the object operations over
//! them, abort, and the state machine of the module docs (`super`).

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use crate::access::PageAccess;
use crate::btree::BTree;
use crate::error::{Error, Result};
use crate::ids::{GroupId, Oid, PageId, TxnId};
use crate::lock::{LockMode, LockOwner, Resource};
use crate::page::PageType;
use crate::record::object::{self, GroupScan, ObjectSpace, ObjectStats};

use crate::io::Vfs;

use super::backend::Backend;
use super::objects::{change_bytes_max, ObjectChanges};
use super::spill::PrivatePages;

/// A transaction. Dropping an active transaction aborts it.
pub struct Txn {
    pub(super) db: Arc<dyn Backend>,
    pub(super) id: TxnId,
    pub(super) owner: LockOwner,
    /// Locks known to be held, to skip the lock manager on repeats.
    pub(super) held: crate::fxhash::FxHashMap<Resource, LockMode>,
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
    pub(super) changes: u64,
    /// The pages a commit installed, with their new LSNs (set by the
    /// backend's commit; see [`Txn::commit_with_lsns`]).
    pub(super) installed: Vec<(PageId, crate::ids::Lsn)>,
    /// Lock single objects rather than pages (see `objects.rs`).
    pub(super) object_locks: bool,
    /// Under object locking, reads take S on an object's page while nobody
    /// writes there: one lock for all the page's objects (`objects.rs`,
    /// "Coarse reads"); under key-range locking, reads of a tree take S on
    /// the whole tree while nobody changes it (`keys.rs`).
    pub(super) coarse_reads: bool,
    /// What coarse reads need to be lowered later: the objects read under
    /// a page's S, and the pages locked S by page-level accesses, which are
    /// never lowered (`objects.rs`).
    pub(super) coarse: super::objects::CoarseReads,
    /// Object-level changes: records changed under object locks.
    pub(super) objects: ObjectChanges,
    /// Most payload bytes `objects` may hold before changes escalate.
    pub(super) object_bytes_max: usize,
    /// Pages whose object-level changes a commit logged, with their LSNs
    /// and the images it installs.
    pub(super) rebased: Vec<(PageId, crate::ids::Lsn, Arc<[u8]>)>,
    /// How the commit changed each page of `objects`, when asked
    /// ([`Txn::report_object_diffs`]).
    pub(super) object_diffs: Option<Vec<super::commit::PageDiff>>,
    /// Log every page as a full image without reading its committed image
    /// (a file-server commit, `unwritten.rs`).
    pub(super) full_images: bool,
    /// Pages client records changed (`remote.rs`, `unwritten.rs`), whose
    /// links are checked before the commit is logged (`client_check.rs`).
    pub(super) client_pages: BTreeSet<PageId>,
    /// Pages changed by the server's own code for this transaction (a
    /// catalog request, `remote.rs`): on the server, pages no client
    /// record may change and whose links the server vouches for; in a
    /// client, the server's images of them, which its commit does not ship.
    pub(super) server_pages: BTreeSet<PageId>,
    /// What a catalog request said of pages whose client images come with
    /// the commit, checked then ([`Txn::check_at_commit`]).
    pub(super) commit_checks: Vec<super::remote::CommitCheck>,
    /// B+-tree roots a catalog change of this transaction let go of (an
    /// index dropped): a client may free them ([`Txn::release_root`]).
    pub(super) released_roots: BTreeSet<PageId>,
    /// What the transaction may change ([`Txn::restrict`]).
    restriction: Restriction,
    /// A client's transaction: its pages and frees are checked before the
    /// commit is logged ([`Txn::set_client_checked`], `client_check.rs`).
    pub(super) client_checked: bool,
    /// Lock waits are parked, not waited for ([`Txn::set_parking`]).
    parking: bool,
    /// The lock request parked by the last [`Error::LockParked`].
    parked: Option<super::ParkedLock>,
    /// B+-tree changes under key-range locking (`keys.rs`).
    pub(super) key_trees: super::keys::OwnTrees,
    /// A read-only transaction's snapshot (`versions.rs`): it reads the
    /// pages as of it, takes no lock and changes nothing.
    pub(super) snapshot: Option<super::Snapshot>,
    /// Where its commit began, while it is in flight (`versions.rs`).
    pub(super) in_flight: Option<crate::ids::Lsn>,
    /// The LSN of its COMMIT record, once appended (the frees it makes are
    /// noted with it for snapshots, `versions.rs`).
    pub(super) commit_lsn: Option<crate::ids::Lsn>,
    /// Its commit applied changes to a page image another commit still in
    /// flight made (`commit.rs`): it ends only after that one.
    pub(super) built_on_pending: bool,
    /// Appends kept to commit under page locking (`append.rs`).
    pub(super) deferred: super::append::Deferred,
}

/// Which pages a [`Restriction`] protects: `Some(why)` for a page the
/// transaction may not change.
pub type ProtectedPages = Arc<dyn Fn(PageId) -> Option<String> + Send + Sync>;

/// What a transaction may change: how a server enforces a session's role.
/// Checked where every lock that allows a change is taken (X, IX and SIX
/// on any resource, allocation, free, prefetch for update), so no path
/// can change what the restriction forbids: a refused lock is
/// [`Error::PermissionDenied`] and dooms the transaction.
#[derive(Clone, Default)]
pub struct Restriction {
    /// No change at all (a read-only role).
    pub read_only: bool,
    /// Pages the transaction may not lock X, nor lock an object on X (the
    /// catalog, for a role that may change objects but not classes).
    pub protected: Option<ProtectedPages>,
}

impl std::fmt::Debug for Restriction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Restriction")
            .field("read_only", &self.read_only)
            .field("protected", &self.protected.is_some())
            .finish()
    }
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
    pub(super) fn new(db: Arc<dyn Backend>, owner: LockOwner, pages: PrivatePages) -> Txn {
        let page_size = db.page_size();
        let object_bytes_max = change_bytes_max(pages.budget_bytes());
        Txn {
            db,
            id: owner.txn,
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
            installed: Vec::new(),
            object_locks: false,
            coarse_reads: false,
            coarse: super::objects::CoarseReads::default(),
            objects: ObjectChanges::default(),
            object_bytes_max,
            rebased: Vec::new(),
            object_diffs: None,
            full_images: false,
            client_pages: BTreeSet::new(),
            server_pages: BTreeSet::new(),
            commit_checks: Vec::new(),
            released_roots: BTreeSet::new(),
            restriction: Restriction::default(),
            client_checked: false,
            parking: false,
            parked: None,
            key_trees: super::keys::OwnTrees::default(),
            snapshot: None,
            in_flight: None,
            commit_lsn: None,
            built_on_pending: false,
            deferred: Default::default(),
        }
    }

    /// A transaction of `owner` on `backend` (a remote client's, see
    /// [`Backend`]): private pages stay in memory up to `memory_bytes`, then
    /// spill to files under `spill` (a directory and the file system to
    /// use), if given.
    pub fn on_backend(
        backend: Arc<dyn Backend>,
        owner: LockOwner,
        memory_bytes: usize,
        spill: Option<(Arc<dyn Vfs>, &Path)>,
    ) -> Txn {
        let page_size = backend.page_size();
        let mut pages = PrivatePages::new(memory_bytes / page_size.max(1), page_size);
        if let Some((vfs, dir)) = spill {
            pages.spill_to(vfs, dir);
        }
        Txn::new(backend, owner, pages)
    }

    /// The transaction's lock owner.
    pub fn owner(&self) -> LockOwner {
        self.owner
    }

    /// The pages this transaction changed (holds private copies of).
    pub fn changed_pages(&self) -> Vec<PageId> {
        self.pages.ids()
    }

    /// This transaction's private copy of `id`, if it changed the page.
    pub fn private_page(&mut self, id: PageId) -> Result<Option<&[u8]>> {
        self.pages.get(id)
    }

    /// The pages this transaction allocated, and those it frees at commit.
    pub fn allocations(&self) -> (&[PageId], &BTreeSet<PageId>) {
        (&self.allocated, &self.to_free)
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
        self.db.check_usable()
    }

    /// Runs one operation of the public API: refuses if the transaction is
    /// not usable, and dooms it if the operation fails after changing
    /// private state, or with an error that leaves it holding locks it must
    /// give up or private pages it may have lost.
    pub(super) fn run<R>(&mut self, f: impl FnOnce(&mut Txn) -> Result<R>) -> Result<R> {
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

    /// Takes a lock on any resource until the transaction ends (the lock
    /// service of a server, on behalf of a remote client's transaction).
    pub fn lock_resource(&mut self, res: Resource, mode: LockMode) -> Result<()> {
        self.run(|t| t.lock(res, mode))
    }

    /// Takes a lock if nobody is in the way; false (and nothing held) if
    /// somebody is.
    pub fn try_lock_resource(&mut self, res: Resource, mode: LockMode) -> Result<bool> {
        if self.snapshot.is_some() {
            return self.snapshot_lock(mode).map(|()| true);
        }
        self.run(|t| {
            t.note_page_level(res, mode);
            if t.holds(res, mode) {
                return Ok(true);
            }
            t.check_allowed(res, mode)?;
            if t.db.try_lock(t.owner, res, mode)? {
                let m = t.held.entry(res).or_insert(mode);
                *m = m.sup(mode);
                return Ok(true);
            }
            Ok(false)
        })
    }

    /// Limits what this transaction may change (a server session's role):
    /// from now on every lock that would allow a change the restriction
    /// forbids is refused with [`Error::PermissionDenied`].
    pub fn restrict(&mut self, restriction: Restriction) {
        self.restriction = restriction;
    }

    /// Takes the restriction off (and returns it): the server's own code
    /// runs a request it has checked (a catalog change) on the pages the
    /// restriction protects from the client, then puts it back with
    /// [`Txn::restrict`].
    pub fn take_restriction(&mut self) -> Restriction {
        std::mem::take(&mut self.restriction)
    }

    /// Marks the transaction as a page or file client's (a server does):
    /// before its commit is logged, the pages it changed and the pages it
    /// frees are checked as a whole (`client_check.rs`), not only each
    /// record as it is staged.
    pub fn set_client_checked(&mut self) {
        self.client_checked = true;
    }

    /// Whether the restriction lets the transaction change the schema
    /// (none at all, or no protected pages).
    pub(super) fn may_change_schema(&self) -> bool {
        !self.restriction.read_only && self.restriction.protected.is_none()
    }

    /// Refuses (and dooms the transaction for) a lock the restriction
    /// forbids.
    /// A snapshot transaction's "lock": nothing to take for a read (it
    /// reads the pages as of its snapshot), a refusal for a change.
    fn snapshot_lock(&self, mode: LockMode) -> Result<()> {
        if matches!(mode, LockMode::S | LockMode::IS) {
            Ok(())
        } else {
            Err(Error::ReadOnlyTxn(self.id))
        }
    }

    /// True for a read-only transaction at a snapshot
    /// ([`crate::Db::begin_read_only`]).
    pub fn is_snapshot(&self) -> bool {
        self.snapshot.is_some()
    }

    /// Makes this new transaction a read-only one at `snap`, a snapshot its
    /// backend keeps (a remote client's: the server began it and keeps the
    /// versions it reads, see [`Backend::read_at`]). From here it takes no
    /// lock and reads every page with [`Backend::read_at`]; a change is
    /// [`Error::ReadOnlyTxn`]. Refused once the transaction has locked or
    /// changed anything.
    pub fn set_snapshot(&mut self, snap: super::Snapshot) -> Result<()> {
        if !self.held.is_empty() || self.changes > 0 || self.snapshot.is_some() {
            return Err(Error::InvalidArgument(format!(
                "{} has begun already: only a new transaction is put at a snapshot",
                self.id
            )));
        }
        self.object_locks = false;
        self.coarse_reads = false;
        self.snapshot = Some(snap);
        Ok(())
    }

    /// Why the restriction protects page `id` from this transaction's
    /// changes, if it does.
    pub(super) fn protected_reason(&self, id: PageId) -> Option<String> {
        self.restriction.protected.as_ref().and_then(|f| f(id))
    }

    fn check_allowed(&mut self, res: Resource, mode: LockMode) -> Result<()> {
        let writes = !matches!(mode, LockMode::S | LockMode::IS);
        if !writes {
            return Ok(());
        }
        let why = if self.restriction.read_only {
            Some("the session may only read".to_string())
        } else {
            match (res, &self.restriction.protected) {
                (Resource::Page(p), Some(f)) if mode != LockMode::IX => f(p),
                (Resource::Object(oid), Some(f)) => f(oid.page),
                (Resource::Entry(root, _) | Resource::Tree(root), Some(f)) => f(root),
                _ => None,
            }
        };
        let Some(why) = why else { return Ok(()) };
        let e = Error::PermissionDenied(format!("{} may not lock {res} {mode:?}: {why}", self.id));
        self.doom(&e);
        Err(e)
    }

    pub(super) fn lock(&mut self, res: Resource, mode: LockMode) -> Result<()> {
        self.note_page_level(res, mode);
        if self.held.get(&res).is_some_and(|m| m.covers(mode)) {
            return Ok(());
        }
        if self.snapshot.is_some() {
            return self.snapshot_lock(mode);
        }
        self.check_allowed(res, mode)?;
        if self.parking && self.park(res, mode)? {
            return Ok(());
        }
        if self.coarse.active {
            // Granted now, or lower the coarse locks before waiting.
            if self.db.try_lock(self.owner, res, mode)? {
                self.note_held(res, mode);
                return Ok(());
            }
            self.lower_coarse_locks()?;
        }
        if let Err(e) = self.db.lock(self.owner, res, mode) {
            // A deadlock victim or a timed-out waiter must give its locks
            // up; whatever it was in the middle of stays half-done.
            self.doom_if_fatal(&e);
            return Err(e);
        }
        self.note_held(res, mode);
        Ok(())
    }

    /// Takes `res` in `mode` now, or parks the request: `Ok(true)` held,
    /// [`Error::LockParked`] parked (see [`Txn::set_parking`]), `Ok(false)`
    /// if it can be neither (it must first wait for callbacks: the caller
    /// takes it where it may block). The caller checked the restriction.
    fn park(&mut self, res: Resource, mode: LockMode) -> Result<bool> {
        match self.db.park_lock(self.owner, res, mode) {
            Ok(super::Parking::Granted) => {
                self.note_held(res, mode);
                Ok(true)
            }
            Ok(super::Parking::Parked(p)) => {
                self.parked = Some(p);
                Err(Error::LockParked {
                    txn: self.id,
                    resource: res.to_string(),
                    mode: mode.to_string(),
                })
            }
            Ok(super::Parking::MustBlock) => Ok(false),
            Err(e) => {
                self.doom_if_fatal(&e);
                Err(e)
            }
        }
    }

    /// Takes a lock now, or parks the request without waiting
    /// ([`Error::LockParked`]; see [`Txn::set_parking`]), but never blocks:
    /// `Ok(false)` (nothing held, nothing queued) when it could only be
    /// taken by a request that may block (it must first wait for
    /// callbacks). A server answers requests on its network threads with
    /// it.
    pub fn lock_or_park(&mut self, res: Resource, mode: LockMode) -> Result<bool> {
        self.run(|t| {
            t.note_page_level(res, mode);
            if t.holds(res, mode) {
                return Ok(true);
            }
            t.check_allowed(res, mode)?;
            t.park(res, mode)
        })
    }

    /// A lock asked for on a whole page in S or stronger is a page-level
    /// access (a scan, a structural change): a page held S for coarse
    /// reads is then held for that too, and is never de-escalated.
    fn note_page_level(&mut self, res: Resource, mode: LockMode) {
        if !self.coarse_reads || !self.object_locks {
            return;
        }
        if let Resource::Page(p) = res {
            if !matches!(mode, LockMode::IS | LockMode::IX) {
                self.coarse.page_level.insert(p);
            }
        }
    }

    fn note_held(&mut self, res: Resource, mode: LockMode) {
        let m = self.held.entry(res).or_insert(mode);
        *m = m.sup(mode);
    }

    /// Parks lock waits instead of waiting for them (a server's client
    /// transactions, so that a wait holds no thread): while on, a lock
    /// request that must wait is queued in the lock manager and the
    /// operation fails with [`Error::LockParked`], having changed nothing
    /// (the lock is each such operation's first step). The caller takes the
    /// request with [`Txn::take_parked`], awaits it, reports the outcome to
    /// [`Txn::finish_parked`] and runs the operation again; it then finds
    /// the lock held. Only operations that take their locks before they
    /// change anything may run with parking on (a server's fetch and lock
    /// requests): one that parked after a change would be doomed, as any
    /// operation failing half-way.
    pub fn set_parking(&mut self, on: bool) {
        self.parking = on;
    }

    /// The request parked by the last [`Error::LockParked`], once.
    pub fn take_parked(&mut self) -> Option<super::ParkedLock> {
        self.parked.take()
    }

    /// Ends a parked request with its outcome: `Ok` records the lock held;
    /// an error (a deadlock victim, a timeout, the owner ended) is returned,
    /// and dooms the transaction as a lost wait always does.
    pub fn finish_parked(&mut self, request: (Resource, LockMode), outcome: Result<()>) -> Result<()> {
        match outcome {
            Ok(()) => {
                self.note_held(request.0, request.1);
                Ok(())
            }
            Err(e) => {
                self.doom_if_fatal(&e);
                Err(e)
            }
        }
    }

    /// Dooms the transaction for an error that may have left it half-way
    /// through a change whatever layer made it (the B+-tree and the typed
    /// layer change pages through [`PageAccess`] directly): a lost lock
    /// wait, or an I/O error on its private pages or the pool.
    pub(super) fn doom_if_fatal(&mut self, e: &Error) {
        if matches!(
            e,
            Error::Deadlock { .. }
                | Error::LockTimeout { .. }
                | Error::Io { .. }
                | Error::Poisoned(_)
                | Error::BackendLost { .. }
        ) {
            self.doom(e);
        }
    }

    /// Dooms the transaction with `e` as the cause (the first cause stays).
    pub(super) fn doom(&mut self, e: &Error) {
        if self.doomed.is_none() {
            self.doomed = Some(e.to_string());
        }
    }

    /// True if this transaction holds `res` in `mode` or a stronger one.
    /// Whether the transaction holds a lock on `res` at least as strong as
    /// `mode` (what a server checks before it answers a request that names
    /// no transaction).
    pub fn holds_lock(&self, res: Resource, mode: LockMode) -> bool {
        self.holds(res, mode)
    }

    pub(super) fn holds(&self, res: Resource, mode: LockMode) -> bool {
        let covers = |r| self.held.get(&r).is_some_and(|m: &LockMode| m.covers(mode));
        // An object's page locked S or X covers the object in that mode.
        covers(res) || matches!(res, Resource::Object(oid) if covers(Resource::Page(oid.page)))
    }

    /// The committed image of page `id` (the pool's, never a private copy).
    pub(super) fn committed_image(&mut self, id: PageId) -> Result<Vec<u8>> {
        let mut image = Vec::new();
        let r = self.db.read_committed(id, &mut |b| image = b.to_vec());
        r.inspect_err(|e| self.doom_if_fatal(e))?;
        Ok(image)
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
    pub(super) fn refuse_if_doomed(&self) -> Result<()> {
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

    /// Locks (shared) the pages of `pages` this transaction does not hold
    /// yet and fetches them together, where the backend gains by it (a
    /// page-server client: one round trip for many pages instead of one
    /// each); see [`Backend::prefetch`]. A traversal that knows where it
    /// goes next (the targets of an object's references) calls this before
    /// it follows them. A page it then does not read stays locked, as if
    /// read, until the transaction ends.
    pub fn prefetch_pages(&mut self, pages: &[PageId]) -> Result<()> {
        self.prefetch_in(pages, LockMode::S)
    }

    /// As [`Txn::prefetch_pages`], locking exclusive: a transaction that
    /// knows which objects it will change (an insert's connection targets)
    /// takes their pages in one round trip instead of one each. Under
    /// object-level locking nothing is taken (its changes lock objects, not
    /// pages).
    ///
    /// The X locks are asked for in one global order, page id order, each
    /// page once, whatever the order of `pages`: two transactions
    /// prefetching the same pages for update then never hold one each and
    /// wait for the other (the second waits for the first page before it
    /// holds any). A backend that does not prefetch (the embedded engine:
    /// no round trip to save) takes nothing here; the pages are locked as
    /// they are changed.
    pub fn prefetch_pages_exclusive(&mut self, pages: &[PageId]) -> Result<()> {
        if self.object_locks {
            return Ok(());
        }
        let mut ordered = pages.to_vec();
        ordered.sort_unstable();
        ordered.dedup();
        self.prefetch_in(&ordered, LockMode::X)
    }

    /// Before lookups for update of `keys` in `tree` on a backend whose
    /// locks cost a round trip ([`Backend::locks_remotely`]: a page- or file-server
    /// client), under page locking: takes U on the tree's root,
    /// then U on every key's leaf, in page order and in as few round trips
    /// as the backend can ([`Backend::prefetch`]), before any leaf is read.
    /// Each lookup then finds its leaf locked. Elsewhere nothing is done:
    /// each lookup locks its own leaf.
    ///
    /// The root first, as the object server's TREE_GET_FOR_UPDATE takes
    /// it: every lookup reads the root (S to the end under page locking),
    /// and a split the transaction's insert makes next takes X on it, so
    /// two such transactions under S each wait for the other. Under U they
    /// queue at the root; readers still share it. The leaves are found
    /// without being read ([`BTree::leaf_page_of`]), or each would be read
    /// under S first and two updaters would deadlock on their upgrades.
    pub fn lock_leaves_for_update(&mut self, tree: &BTree, keys: &[&[u8]]) -> Result<()> {
        if !self.db.locks_remotely() || self.snapshot.is_some() || self.locks_key_ranges(tree) {
            return Ok(());
        }
        PageAccess::lock_to_read_for_update(self, tree.root())?;
        let mut leaves = Vec::with_capacity(keys.len());
        for key in keys {
            let leaf = tree.leaf_page_of(self, key)?;
            if leaf != tree.root() {
                leaves.push(leaf);
            }
        }
        leaves.sort_unstable();
        leaves.dedup();
        self.prefetch_in(&leaves, LockMode::U)
    }

    /// Takes the X locks a change of each object of `oids` takes, now and
    /// in one global order — OID order, whatever the order of `oids` — so
    /// that two transactions that name the objects they will change never
    /// hold one each and wait for the other's: under object-level locking
    /// IX on each page and X on each object; else X on their pages, in page
    /// order (a remote client's in one round trip,
    /// [`Txn::prefetch_pages_exclusive`]), then X on the pages of the
    /// moved objects' bodies, in page order too.
    pub fn lock_objects_for_update(&mut self, oids: &[Oid]) -> Result<()> {
        let mut ordered = oids.to_vec();
        ordered.sort_unstable();
        ordered.dedup();
        if self.object_locks {
            for oid in ordered {
                self.lock_object(oid, true)?;
            }
            return Ok(());
        }
        let mut pages: Vec<PageId> = ordered.iter().map(|o| o.page).collect();
        pages.dedup();
        self.prefetch_pages_exclusive(&pages)?;
        for p in pages {
            self.lock_page(p, true)?;
        }
        // The bodies of moved objects next, read from their stubs under
        // the home pages' X and locked together in page order: locked one
        // by one as each change reaches them, each would be read under S
        // first and then upgraded, out of any order (two transactions
        // appending to moved objects deadlocked that way on their bodies'
        // pages).
        let mut bodies = Vec::new();
        for &oid in &ordered {
            let body = PageAccess::read(self, oid.page, |b| match crate::record::object::slot_in(b, oid) {
                Ok(Some(r)) if r.kind == crate::record::object::KIND_FORWARD => Oid::from_slice(r.data),
                _ => None,
            })?;
            if let Some(body) = body.filter(|b| !self.holds(Resource::Page(b.page), LockMode::X)) {
                bodies.push(body.page);
            }
        }
        bodies.sort_unstable();
        bodies.dedup();
        self.prefetch_pages_exclusive(&bodies)?;
        for p in bodies {
            self.lock_page(p, true)?;
        }
        Ok(())
    }

    /// [`Backend::prefetch`] of the pages not held in `mode` (S or X) yet.
    fn prefetch_in(&mut self, pages: &[PageId], mode: LockMode) -> Result<()> {
        self.run(|t| {
            let mut todo: Vec<PageId> = pages
                .iter()
                .copied()
                .filter(|p| !t.holds(Resource::Page(*p), mode))
                .collect();
            todo.sort_unstable();
            todo.dedup();
            if todo.is_empty() {
                return Ok(());
            }
            for &p in &todo {
                t.check_allowed(Resource::Page(p), mode)?;
            }
            if t.db.prefetch(t.owner, &todo, mode)? {
                for p in todo {
                    let m = t.held.entry(Resource::Page(p)).or_insert(mode);
                    *m = m.sup(mode);
                }
            }
            Ok(())
        })
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
        self.settle_merges(oid)?;
        self.run(|t| object::read(t, oid))
    }

    /// Calls `f` with the OID and bytes of every small object stored whole
    /// in its home slot on `page` (see [`object::page_objects`]), under the
    /// page's shared lock.
    pub fn page_objects(&mut self, page: PageId, f: impl FnMut(Oid, &[u8])) -> Result<()> {
        self.run(|t| object::page_objects(t, page, f))
    }

    /// A copy of object page `page` as this transaction reads it (see
    /// [`object::page_image`]); the caller holds the page's lock.
    pub fn page_image(&mut self, page: PageId) -> Result<Option<std::sync::Arc<[u8]>>> {
        self.run(|t| object::page_image(t, page))
    }

    /// The LSN of `page`'s committed image now (the last commit installed
    /// there): an image of the page read earlier with this LSN is current.
    /// Under object-level locking a reader checks an image it kept against
    /// it, since other objects of the page change under their own locks.
    pub fn committed_page_lsn(&mut self, page: PageId) -> Result<crate::ids::Lsn> {
        let mut lsn = None;
        self.read_as_of(page, &mut |b| lsn = Some(crate::page::lsn(b)))
            .inspect_err(|e| self.doom_if_fatal(e))?;
        lsn.ok_or_else(|| Error::Internal(format!("the backend did not read page {page}")))
    }

    /// A copy of `page`'s committed image, read without a page lock, if it
    /// is an object (slotted) page: under object-level locking a reader
    /// holding S on one of its objects reads that object in it (the other
    /// objects may be changing under their own locks; see
    /// [`Txn::committed_page_lsn`]). `None` also for a page past the end of
    /// the volume.
    pub fn committed_page_image(&mut self, page: PageId) -> Result<Option<std::sync::Arc<[u8]>>> {
        if page.0 >= self.db.page_count() {
            return Ok(None);
        }
        let mut image = None;
        self.read_as_of(page, &mut |b| {
            image =
                (crate::page::page_type(b) == Some(crate::page::PageType::Slotted)).then(|| std::sync::Arc::from(b));
        })
        .inspect_err(|e| self.doom_if_fatal(e))?;
        Ok(image)
    }

    /// The committed image of `page`, or at a snapshot transaction's
    /// snapshot the image as of it.
    fn read_as_of(&self, page: PageId, f: &mut dyn FnMut(&[u8])) -> Result<()> {
        match self.snapshot {
            Some(snap) => self.db.read_at(page, snap, f),
            None => self.db.read_committed(page, f),
        }
    }

    /// True if this transaction holds a private (changed) copy of `page`:
    /// what it reads there is not committed state.
    pub fn has_private_copy(&self, page: PageId) -> bool {
        self.pages.contains(page) || self.objects.contains(page)
    }

    /// Calls `f` with an object's bytes, in place in its page when it can
    /// (see [`object::read_with`]); `f` must not block.
    pub fn read_with<R>(&mut self, oid: Oid, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
        self.settle_merges(oid)?;
        self.run(|t| object::read_with(t, oid, f))
    }

    /// Reads part of an object.
    pub fn read_range(&mut self, oid: Oid, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.settle_merges(oid)?;
        self.run(|t| object::read_range(t, oid, offset, buf))
    }

    /// The object's length in bytes.
    pub fn len(&mut self, oid: Oid) -> Result<u64> {
        self.settle_merges(oid)?;
        self.run(|t| object::len(t, oid))
    }

    /// True if `oid` names a live object.
    pub fn exists(&mut self, oid: Oid) -> Result<bool> {
        self.run(|t| object::exists(t, oid))
    }

    /// True if the object is stored as a large object.
    pub fn is_large(&mut self, oid: Oid) -> Result<bool> {
        self.settle_merges(oid)?;
        self.run(|t| object::is_large(t, oid))
    }

    /// Replaces an object's bytes.
    pub fn update(&mut self, oid: Oid, data: &[u8]) -> Result<()> {
        self.drop_merges(oid);
        self.run(|t| object::update(t, oid, data))
    }

    /// Writes part of an object (extending it if the range runs past its end).
    pub fn write_range(&mut self, oid: Oid, offset: u64, data: &[u8]) -> Result<()> {
        self.settle_merges(oid)?;
        self.run(|t| object::write_range(t, oid, offset, data))
    }

    /// Appends to an object.
    pub fn append(&mut self, oid: Oid, data: &[u8]) -> Result<()> {
        self.settle_merges(oid)?;
        self.run(|t| object::append(t, oid, data))
    }

    /// Cuts an object to `len` bytes.
    pub fn truncate(&mut self, oid: Oid, len: u64) -> Result<()> {
        self.settle_merges(oid)?;
        self.run(|t| object::truncate(t, oid, len))
    }

    /// Deletes an object.
    pub fn delete(&mut self, oid: Oid) -> Result<()> {
        self.drop_merges(oid);
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
        self.objects.clear();
        db.rollback(self);
        self.finish();
    }

    /// Ends the transaction after commit or rollback: the backend releases
    /// its locks and forgets its allocations.
    pub(super) fn finish(&mut self) {
        // Registered tree changes go before the locks that cover them.
        self.end_key_ranges();
        if let Some(snap) = self.snapshot.take() {
            self.db.end_snapshot(snap);
        }
        if !self.allocated.is_empty() || !self.to_free.is_empty() {
            let gone: Vec<PageId> = self.allocated.iter().chain(self.to_free.iter()).copied().collect();
            self.db.fill_pages().forget(&gone);
        }
        self.db.end(self.owner, &self.allocated);
        self.allocated.clear();
        self.to_free.clear();
        self.pages.clear();
        self.objects.clear();
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
        self.db.page_size()
    }

    fn read<R>(&mut self, id: PageId, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
        self.refuse_if_doomed()?;
        if let Some(snap) = self.snapshot {
            self.check_active()?;
            let mut f = Some(f);
            let mut out = None;
            self.db.read_at(id, snap, &mut |b| out = f.take().map(|f| f(b)))?;
            return out.ok_or_else(|| Error::Internal(format!("the backend did not read page {id}")));
        }
        let private = self.pages.get(id).inspect_err(|e| {
            self.doomed.get_or_insert_with(|| e.to_string());
        })?;
        if let Some(p) = private {
            return Ok(f(p));
        }
        if self.to_free.contains(&id) {
            return Err(Error::corrupt(id, format!("{} reads a page it freed", self.id)));
        }
        if let Some(image) = self.image_with_changes(id)? {
            return Ok(f(&image));
        }
        self.lock(Resource::Page(id), LockMode::S)?;
        let mut f = Some(f);
        let mut out = None;
        let r = self.db.read_committed(id, &mut |b| out = f.take().map(|f| f(b)));
        r.inspect_err(|e| self.doom_if_fatal(e))?;
        out.ok_or_else(|| Error::Internal(format!("the backend did not read page {id}")))
    }

    fn modify<R>(&mut self, id: PageId, f: impl FnOnce(&mut [u8]) -> Result<R>) -> Result<R> {
        self.refuse_if_doomed()?;
        if self.snapshot.is_some() {
            return Err(Error::ReadOnlyTxn(self.id));
        }
        self.modify_private(id, f).inspect_err(|e| self.doom_if_fatal(e))
    }

    fn allocate(&mut self, group: GroupId, near: Option<PageId>, ty: PageType) -> Result<PageId> {
        self.refuse_if_doomed()?;
        if self.snapshot.is_some() {
            return Err(Error::ReadOnlyTxn(self.id));
        }
        self.allocate_page(group, near, ty)
            .inspect_err(|e| self.doom_if_fatal(e))
    }

    fn lock_for_update(&mut self, id: PageId) -> Result<()> {
        self.lock(Resource::Page(id), LockMode::X)
    }

    fn lock_to_read_for_update(&mut self, id: PageId) -> Result<()> {
        self.lock(Resource::Page(id), LockMode::U)
    }

    fn free(&mut self, id: PageId) -> Result<()> {
        self.refuse_if_doomed()?;
        // Only a page in use, of a kind transactions hold (object,
        // large-object and B+-tree pages): the volume's own pages (header,
        // space map, group directory, extent lists) are changed by system
        // actions alone. A FREE of one used to be logged and then fail at
        // commit, poisoning the database — or, for an extent-list page,
        // failing every later open in recovery. Checked before anything is
        // logged; refused, the transaction is doomed, nothing else changes.
        if self.to_free.contains(&id) || !self.db.is_page_in_use(self.id, id)? {
            let e = Error::InvalidArgument(format!("{} frees page {id}, which is not in use", self.id));
            self.doom(&e);
            return Err(e);
        }
        self.lock(Resource::Page(id), LockMode::X)?;
        let kind = PageAccess::read(self, id, crate::page::page_type)?;
        if !kind.is_some_and(PageType::is_client_kind) {
            let e = Error::InvalidArgument(format!(
                "{} frees page {id}, a {} page: a transaction frees only object, large-object and B+-tree pages",
                self.id,
                kind.map_or_else(|| "unknown".to_string(), |k| format!("{k:?}"))
            ));
            self.doom(&e);
            return Err(e);
        }
        if let Err(e) = self.db.free(self.owner, id) {
            self.doom(&e);
            return Err(e);
        }
        // The private copy stays: it is installed at commit before the page
        // is freed, so the page's uniquifier sequence keeps every uniquifier
        // this transaction handed out on it (an OID of an object created and
        // deleted here must never name a later object).
        self.to_free.insert(id);
        self.changes += 1;
        self.db.fill_pages().forget(&[id]);
        Ok(())
    }
}

impl Txn {
    fn modify_private<R>(&mut self, id: PageId, f: impl FnOnce(&mut [u8]) -> Result<R>) -> Result<R> {
        if self.to_free.contains(&id) {
            return Err(Error::corrupt(id, format!("{} changes a page it freed", self.id)));
        }
        self.lock(Resource::Page(id), LockMode::X)?;
        if self.objects.contains(id) {
            self.fold(id)?;
        }
        if !self.pages.contains(id) {
            let Txn { db, pages, .. } = self;
            let mut spilled = Ok(0);
            db.read_committed(id, &mut |b| spilled = pages.insert(id, b))?;
            db.note_spilled(spilled?);
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

    pub(super) fn allocate_page(&mut self, group: GroupId, near: Option<PageId>, ty: PageType) -> Result<PageId> {
        self.check_allowed(Resource::Group(group), LockMode::IX)?;
        // The backend may wait for the group's lock.
        self.lower_coarse_locks()?;
        let p = self.db.allocate(self.owner, group, near, ty)?;
        self.allocated.push(p);
        self.changes += 1;
        for (res, mode) in [(Resource::Group(group), LockMode::IX), (Resource::Page(p), LockMode::X)] {
            let m = self.held.entry(res).or_insert(mode);
            *m = m.sup(mode);
        }
        Ok(p)
    }
}

impl ObjectSpace for Txn {
    fn page_count(&self) -> u32 {
        self.db.page_count()
    }

    fn group_exists(&self, group: GroupId) -> bool {
        self.db.group_exists(group)
    }

    fn group_of_page(&self, id: PageId) -> Result<Option<GroupId>> {
        self.db.group_of_page(self.id, id)
    }

    fn is_page_in_use(&self, id: PageId) -> Result<bool> {
        if let Some(snap) = self.snapshot {
            // In use as of the snapshot: a page freed since is, for it.
            return self.db.is_page_in_use_at(self.id, id, snap);
        }
        Ok(!self.to_free.contains(&id) && self.db.is_page_in_use(self.id, id)?)
    }

    fn region_pages(&self) -> u32 {
        self.db.region_pages()
    }

    fn group_pages(&self, group: GroupId) -> Result<Vec<PageId>> {
        let mut pages = self.db.group_pages(self.id, group)?;
        pages.retain(|p| !self.to_free.contains(p));
        Ok(pages)
    }

    fn fill_page(&self, group: GroupId) -> Option<PageId> {
        self.db.fill_pages().get(group)
    }

    fn set_fill_page(&mut self, group: GroupId, page: Option<PageId>) {
        self.db.fill_pages().set(group, page);
    }

    fn forget_fill_page(&mut self, page: PageId) {
        self.db.fill_pages().forget(&[page]);
    }

    fn try_insert_page(&mut self, group: GroupId, page: PageId) -> Result<bool> {
        if self.to_free.contains(&page) {
            return Ok(false);
        }
        let res = Resource::Page(page);
        if self.held.get(&res).is_some_and(|m| m.covers(LockMode::X)) {
            return Ok(self.db.is_page_in_use(self.id, page)? && self.db.group_of_page(self.id, page)? == Some(group));
        }
        let r = self.db.try_insert_page(self.owner, group, page);
        if let Err(e) = &r {
            self.doom_if_fatal(e);
        }
        if r? {
            self.note_held(res, LockMode::X);
            return Ok(true);
        }
        Ok(false)
    }

    fn insert_page(&mut self, group: GroupId, candidates: &[PageId], need: usize) -> Result<Option<PageId>> {
        let (held, rest): (Vec<PageId>, Vec<PageId>) = candidates
            .iter()
            .filter(|p| !self.to_free.contains(p))
            .partition(|&&p| self.held.get(&Resource::Page(p)).is_some_and(|m| m.covers(LockMode::X)));
        for p in held {
            if self.try_insert_page(group, p)? && object::has_room(self, p, need)? {
                return Ok(Some(p));
            }
        }
        let mut rest = &rest[..];
        while !rest.is_empty() {
            let r = self.db.try_insert_pages(self.owner, group, rest, need);
            if let Err(e) = &r {
                self.doom_if_fatal(e);
            }
            let (granted, tried) = r?;
            for p in granted {
                self.note_held(Resource::Page(p), LockMode::X);
                if object::has_room(self, p, need)? {
                    return Ok(Some(p));
                }
            }
            rest = rest.get(tried.max(1)..).unwrap_or_default();
        }
        Ok(None)
    }

    fn stats_mut(&mut self) -> &mut ObjectStats {
        &mut self.stats
    }

    fn with_slot<R>(&mut self, at: Oid, f: impl FnOnce(Option<crate::record::slotted::SlotRef<'_>>) -> R) -> Result<R> {
        self.slot_with(at, f)
    }

    fn update_slot(&mut self, at: Oid, kind: u8, payload: &[u8]) -> Result<bool> {
        self.change_slot(at, Some((kind, payload)))
    }

    fn delete_slot(&mut self, at: Oid) -> Result<bool> {
        self.change_slot(at, None)
    }
}
