//! Key-range locking of B+-trees: index changes that lock keys, not pages,
//! and reach the tree's pages only when their transaction commits.
//!
//! Under page locking a B+-tree change holds X on every page it touched
//! until its transaction ends, so every insert at an index's right edge
//! waits for every other one, and inserts meeting in opposite orders
//! deadlock. Under key-range locking ([`DbOptions::key_range_locking`]) a
//! transaction's tree operations take **logical locks on entries and
//! gaps** (in the manner of Lomet's key-range locking and ARIES/KVL) and
//! only **short physical latches** on the tree:
//!
//! - **Entries and gaps.** An entry is named by its identity — its key in a
//!   unique tree, its key and value in another — hashed with the tree's
//!   root ([`Resource::Entry`]); the gap just below an entry is a resource
//!   of its own ([`Resource::Gap`]), and the gap above the last entry is
//!   [`Resource::TreeEnd`]. Every operation also holds IS or IX on the
//!   whole tree ([`Resource::Tree`]); destroying a tree takes X on it.
//! - **Readers** (lookups and scans) take S on the gap below each entry
//!   they return — which covers the entry as well, since a deleter takes
//!   X on both — and S on the gap below the first entry past their range
//!   (the *fence*, or the tree's end): nothing can appear in, or vanish
//!   from, what they read until they end. One lock per entry read: a
//!   lookup that finds its key in a unique tree takes no fence. A fence
//!   another transaction is inserting or deleting is waited for first (S
//!   on its entry): the gap below an entry that may never exist guards
//!   nothing. A reader
//!   meeting another transaction's registered change waits on the entry
//!   itself (S on it, which its writer holds X on).
//! - **Inserters** take X on the new entry, then check the gap it falls in
//!   (the gap below the next entry): only a reader's S there (or a
//!   deleter's X) makes them wait, and then they hold IX on it; so does a
//!   right a server's client keeps a lookup under on that gap
//!   ([`Backend::probe_write`]: the lock's write hook calls it back). Two
//!   inserts of different keys into one gap — the right edge, under a
//!   rising key — do not wait for each other: IX is compatible with IX,
//!   and an inserter never locks another inserter's entry.
//! - **Deleters** take X on the entry and on the gap below it: the gap
//!   merges into the next one when the entry goes, so a reader whose fence
//!   it was must be gone first.
//! - **Locks are never waited for under a latch.** Under its tree's latch
//!   an operation reads the tree and asks for locks without waiting
//!   (`try_lock`); one that would wait lets the latch go, waits, and reads
//!   again from where it was, because the tree may have changed meanwhile.
//!
//! **Changes are kept per entry, not per page.** A transaction's tree
//! changes are a sorted map of entry identities to inserts and deletes
//! (`OwnTree`); its own reads merge them over the committed tree. Every
//! change is also **registered** in the tree's shared `Pending` set until
//! its transaction ends, so other readers meet an uncommitted insert or
//! delete as if it were in the tree: they ask for S on it and wait for its
//! writer. That is what keeps a gap's lock valid while entries come and go
//! around it: a reader that meets a registered entry waits for it rather
//! than scanning past a gap the entry will split.
//!
//! **Commit applies the changes** to the tree as it stands: under the
//! tree's exclusive latch, on the newest image of each page (the committed
//! one, or the one a commit logged ahead of it and has not installed yet),
//! splitting and merging as it goes. The pages it changed are logged in
//! the commit's batch like object-level changes, registered as the pages'
//! newest images, and installed once the log is durable (`commit.rs`). A
//! split or merge is thus done only by a committing transaction, for the
//! entries it commits: no abort ever undoes one, and no transaction's
//! locks cover a tree page, so a split made for one transaction holds
//! nobody up once its commit is logged. Readers read the newest images
//! too, under the shared latch: the entries of a commit that is logged but
//! not yet durable are still registered and X-locked by their writer, so a
//! reader that meets them waits until they are durable.
//!
//! A tree created in the transaction itself (its root is one of the
//! transaction's own new pages) is changed at page level: nobody else can
//! reach it before the commit.
//!
//! [`DbOptions::key_range_locking`]: super::DbOptions::key_range_locking

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::ops::Bound;
use std::sync::{Arc, Mutex, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::access::PageAccess;
use crate::btree::{BTree, Direction};
use crate::error::{Error, Result};
use crate::ids::{GroupId, PageId, TxnId};
use crate::lock::{LockMode, Resource};
use crate::page::PageType;

use super::backend::Backend;
use super::Txn;

/// An entry's identity: `(key, [])` in a unique tree, `(key, value)` in
/// another. Ordered as the tree orders its entries.
pub(crate) type EntryId = (Vec<u8>, Vec<u8>);

/// Entries a scan reads under one hold of the latch.
const BATCH: usize = 128;

/// The shared state of one tree under key-range locking: its latch, and
/// the entries running transactions have changed (`Pending`), guarded by
/// the latch.
#[derive(Debug)]
pub struct TreeState {
    unique: bool,
    latch: RwLock<Pending>,
}

/// Uncommitted (or committed and not yet released) changes of running
/// transactions: entry identity → its writer.
#[derive(Debug, Default)]
pub(crate) struct Pending {
    entries: BTreeMap<EntryId, TxnId>,
}

impl TreeState {
    fn read(&self) -> RwLockReadGuard<'_, Pending> {
        self.latch.read().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn write(&self) -> RwLockWriteGuard<'_, Pending> {
        self.latch.write().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The trees of a database under key-range locking, by root page: made on
/// first use, forgotten when a tree is destroyed.
#[derive(Debug, Default)]
pub struct KeyRanges {
    trees: Mutex<HashMap<PageId, Arc<TreeState>>>,
}

impl KeyRanges {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<PageId, Arc<TreeState>>> {
        self.trees.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn get_or_make(&self, root: PageId, unique: impl FnOnce() -> Result<bool>) -> Result<Arc<TreeState>> {
        if let Some(s) = self.map().get(&root) {
            return Ok(Arc::clone(s));
        }
        let unique = unique()?;
        let mut m = self.map();
        Ok(Arc::clone(m.entry(root).or_insert_with(|| {
            Arc::new(TreeState {
                unique,
                latch: RwLock::new(Pending::default()),
            })
        })))
    }

    fn forget(&self, root: PageId) {
        self.map().remove(&root);
    }
}

/// A transaction's change of one entry.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Change {
    /// Inserted with this value.
    Insert(Vec<u8>),
    /// Deleted.
    Delete,
}

/// A transaction's changes to one tree.
#[derive(Debug)]
struct OwnTree {
    tree: BTree,
    state: Arc<TreeState>,
    changes: BTreeMap<EntryId, Change>,
}

/// A transaction's key-range state: the trees it changed.
#[derive(Debug, Default)]
pub(super) struct OwnTrees {
    trees: BTreeMap<PageId, OwnTree>,
    /// The transaction sent tree changes to the server that runs its trees
    /// (`server_trees.rs`): they are the server's to commit.
    pub(super) at_server: bool,
}

impl OwnTrees {
    /// True if the transaction changed no tree under key-range locking.
    pub(super) fn is_empty(&self) -> bool {
        !self.at_server && self.trees.values().all(|t| t.changes.is_empty())
    }
}

/// The tree's pages as they stand for readers and committers: each page's
/// newest image, read without a lock (the caller holds the tree's latch).
struct Newest<'a> {
    db: &'a dyn Backend,
}

impl PageAccess for Newest<'_> {
    fn page_size(&self) -> usize {
        self.db.page_size()
    }

    fn read<R>(&mut self, id: PageId, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
        let mut f = Some(f);
        let mut out = None;
        self.db.read_newest(id, &mut |b| out = f.take().map(|f| f(b)))?;
        out.ok_or_else(|| Error::Internal(format!("the backend did not read page {id}")))
    }

    fn modify<R>(&mut self, id: PageId, _f: impl FnOnce(&mut [u8]) -> Result<R>) -> Result<R> {
        Err(Error::Internal(format!("a key-range read tried to change page {id}")))
    }

    fn allocate(&mut self, _group: GroupId, _near: Option<PageId>, _ty: PageType) -> Result<PageId> {
        Err(Error::Internal("a key-range read tried to allocate a page".into()))
    }

    fn free(&mut self, id: PageId) -> Result<()> {
        Err(Error::Internal(format!("a key-range read tried to free page {id}")))
    }
}

/// What a scan meets at one identity, under the latch.
#[derive(Debug)]
enum Item {
    /// An entry the transaction sees: committed (and not deleted by it), or
    /// inserted by it.
    Visible { key: Vec<u8>, value: Vec<u8> },
    /// Another transaction's registered change: a lock point only.
    Other,
}

/// What one hold of the latch gathered.
struct Gathered {
    items: Vec<(EntryId, Item)>,
    /// The last committed identity read when the batch was cut short.
    cut: Option<EntryId>,
    /// The first identity past the range (`Some(None)`: the tree's end);
    /// `None` when the batch was cut short and the range goes on.
    fence: Option<Option<EntryId>>,
}

/// The lock that guards the gap just below `next` (the tree's end if none).
fn gap_of(root: PageId, next: Option<&EntryId>) -> Resource {
    match next {
        Some(id) => Resource::Gap(root, hash_id(root, id)),
        None => Resource::TreeEnd(root),
    }
}

fn entry_of(root: PageId, id: &EntryId) -> Resource {
    Resource::Entry(root, hash_id(root, id))
}

fn hash_id(root: PageId, id: &EntryId) -> u64 {
    // A fast hash: two entries sharing one only conflict more than they
    // must (the lock is shared, never the data).
    let mut h = crate::fxhash::FxHasher::default();
    root.hash(&mut h);
    id.hash(&mut h);
    h.finish()
}

/// [`hash_id`] of the identity `(key, value)` without making it: a slice
/// hashes as the `Vec` holding it does.
fn hash_parts(root: PageId, key: &[u8], value: &[u8]) -> u64 {
    let mut h = crate::fxhash::FxHasher::default();
    root.hash(&mut h);
    (key, value).hash(&mut h);
    h.finish()
}

fn identity(unique: bool, key: &[u8], value: &[u8]) -> EntryId {
    if unique {
        (key.to_vec(), Vec::new())
    } else {
        (key.to_vec(), value.to_vec())
    }
}

fn below_hi(key: &[u8], hi: Bound<&[u8]>) -> bool {
    match hi {
        Bound::Included(h) => key <= h,
        Bound::Excluded(h) => key < h,
        Bound::Unbounded => true,
    }
}

fn above_lo(key: &[u8], lo: Bound<&[u8]>) -> bool {
    match lo {
        Bound::Included(l) => key >= l,
        Bound::Excluded(l) => key > l,
        Bound::Unbounded => true,
    }
}

/// The key bound where the entries past `hi` begin.
fn past(hi: Bound<&[u8]>) -> Option<Bound<&[u8]>> {
    match hi {
        Bound::Included(h) => Some(Bound::Excluded(h)),
        Bound::Excluded(h) => Some(Bound::Included(h)),
        Bound::Unbounded => None,
    }
}

/// A read of the tree's entries in `[lo, hi]` after `after`, at most
/// [`BATCH`] of the committed ones, merged with `own` changes and the
/// other transactions' registered ones; with the fence when the range
/// ended. Called under the tree's latch.
#[allow(clippy::too_many_arguments)]
fn gather(
    db: &dyn Backend,
    tree: &BTree,
    unique: bool,
    pending: &Pending,
    own: Option<&BTreeMap<EntryId, Change>>,
    me: TxnId,
    lo: Bound<&[u8]>,
    after: Option<&EntryId>,
    hi: Bound<&[u8]>,
) -> Result<Gathered> {
    let mut view = Newest { db };
    let start = match after {
        Some((k, _)) => Bound::Included(&k[..]),
        None => lo,
    };
    let mut merged: BTreeMap<EntryId, Item> = BTreeMap::new();
    let mut cur = tree.range(&mut view, start, hi, Direction::Forward)?;
    let mut read = 0usize;
    let mut cut: Option<EntryId> = None;
    while let Some((key, value)) = cur.next(&mut view)? {
        let id = identity(unique, &key, &value);
        if after.is_some_and(|a| id <= *a) {
            continue;
        }
        read += 1;
        let last = read >= BATCH;
        if last {
            cut = Some(id.clone());
        }
        merged.insert(id, Item::Visible { key, value });
        if last {
            break;
        }
    }
    let in_window = |id: &EntryId| {
        above_lo(&id.0, lo)
            && below_hi(&id.0, hi)
            && after.is_none_or(|a| id > a)
            && cut.as_ref().is_none_or(|c| id <= c)
    };
    let from: Bound<EntryId> = match start {
        Bound::Included(k) | Bound::Excluded(k) => Bound::Included((k.to_vec(), Vec::new())),
        Bound::Unbounded => Bound::Unbounded,
    };
    for (id, &who) in pending.entries.range((from.clone(), Bound::Unbounded)) {
        if !below_hi(&id.0, hi) || cut.as_ref().is_some_and(|c| id > c) {
            break;
        }
        if who != me && in_window(id) {
            merged.insert(id.clone(), Item::Other);
        }
    }
    if let Some(own) = own {
        for (id, change) in own.range((from, Bound::Unbounded)) {
            if !below_hi(&id.0, hi) || cut.as_ref().is_some_and(|c| id > c) {
                break;
            }
            if !in_window(id) {
                continue;
            }
            match change {
                Change::Delete => {
                    merged.remove(id);
                }
                Change::Insert(value) => {
                    merged.insert(
                        id.clone(),
                        Item::Visible {
                            key: id.0.clone(),
                            value: value.clone(),
                        },
                    );
                }
            }
        }
    }
    let fence = if cut.is_some() {
        None
    } else {
        Some(first_past(db, tree, unique, pending, own, hi)?)
    };
    Ok(Gathered {
        items: merged.into_iter().collect(),
        cut,
        fence,
    })
}

/// The first identity past `hi` — committed, registered by anyone, or
/// inserted by this transaction — or `None` at the tree's end.
fn first_past(
    db: &dyn Backend,
    tree: &BTree,
    unique: bool,
    pending: &Pending,
    own: Option<&BTreeMap<EntryId, Change>>,
    hi: Bound<&[u8]>,
) -> Result<Option<EntryId>> {
    let Some(from) = past(hi) else {
        return Ok(None);
    };
    let mut view = Newest { db };
    let mut cur = tree.range(&mut view, from, Bound::Unbounded, Direction::Forward)?;
    let mut best = cur.next(&mut view)?.map(|(k, v)| identity(unique, &k, &v));
    let start: Bound<EntryId> = match from {
        Bound::Included(k) | Bound::Excluded(k) => Bound::Included((k.to_vec(), Vec::new())),
        Bound::Unbounded => Bound::Unbounded,
    };
    let beyond = |id: &&EntryId| above_lo(&id.0, from);
    let registered = pending
        .entries
        .range((start.clone(), Bound::Unbounded))
        .map(|(id, _)| id)
        .find(beyond);
    let inserted = own.and_then(|o| {
        o.range((start, Bound::Unbounded))
            .filter(|(_, c)| matches!(c, Change::Insert(_)))
            .map(|(id, _)| id)
            .find(beyond)
    });
    for id in [registered, inserted].into_iter().flatten() {
        if best.as_ref().is_none_or(|b| id < b) {
            best = Some(id.clone());
        }
    }
    Ok(best)
}

/// The first identity above `id` that others can meet (committed or
/// registered by anyone; this transaction's inserts included), or `None`.
fn next_after(
    db: &dyn Backend,
    tree: &BTree,
    unique: bool,
    pending: &Pending,
    own: Option<&BTreeMap<EntryId, Change>>,
    id: &EntryId,
) -> Result<Option<EntryId>> {
    let mut view = Newest { db };
    let mut cur = tree.range(
        &mut view,
        Bound::Included(&id.0[..]),
        Bound::Unbounded,
        Direction::Forward,
    )?;
    let mut best = None;
    while let Some((k, v)) = cur.next(&mut view)? {
        let e = identity(unique, &k, &v);
        if e > *id {
            best = Some(e);
            break;
        }
    }
    let after = (Bound::Excluded(id.clone()), Bound::Unbounded);
    let registered = pending.entries.range(after.clone()).map(|(e, _)| e).next();
    let inserted = own.and_then(|o| {
        o.range(after)
            .find(|(_, c)| matches!(c, Change::Insert(_)))
            .map(|(e, _)| e)
    });
    for e in [registered, inserted].into_iter().flatten() {
        if best.as_ref().is_none_or(|b| e < b) {
            best = Some(e.clone());
        }
    }
    Ok(best)
}

/// True if the committed tree (newest images) holds the entry `id`.
fn committed_has(db: &dyn Backend, tree: &BTree, unique: bool, id: &EntryId) -> Result<bool> {
    let mut view = Newest { db };
    let mut found = false;
    tree.get_each(&mut view, &id.0, |v| {
        found = unique || v == &id.1[..];
        !found
    })?;
    Ok(found)
}

/// What a scan reads: keys in `[lo, hi]`; `point` if that is one key.
#[derive(Clone, Copy)]
struct Scope<'a> {
    lo: Bound<&'a [u8]>,
    hi: Bound<&'a [u8]>,
    point: bool,
}

/// What a guarded lookup's scan notes ([`Txn::tree_lookup_guarded`]).
struct Guards<'a> {
    /// The gap locks taken (or covered) that guard what was read.
    gaps: Vec<Resource>,
    /// Set once the answer holds its limit of values: the scan reads on
    /// only to know whether it is whole, so it waits for no lock and
    /// spares the tree's end.
    full: &'a std::cell::Cell<bool>,
    /// Something past a full answer was spared: it is not known whole.
    spared: bool,
}

/// A lookup's answer with the locks that guard it
/// ([`Txn::tree_lookup_guarded`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuardedLookup {
    /// The key's values, in order (at most the limit asked for).
    pub values: Vec<Vec<u8>>,
    /// The gap locks (S, held by the transaction) that guard the answer:
    /// nothing can be inserted among the values, or past the last of them
    /// within the key, nor a value deleted, without IX or X on one of them.
    pub gaps: Vec<Resource>,
    /// The key is known to have no more values than were returned: only
    /// then do `gaps` guard the whole answer.
    pub complete: bool,
}

/// What a scan does after one hold of the latch.
enum Next {
    /// Wait for this lock, then read again after the last entry handed on.
    Wait(Resource),
    /// Read the next batch after the last entry handed on.
    More,
    /// The range is read (or the caller stopped).
    Done,
}

impl Txn {
    /// True if this transaction changes and reads `tree` under key-range
    /// locking: the database locks key ranges (here, or at the server that
    /// runs the tree's operations: `server_trees.rs`), and the tree is not
    /// one the transaction made itself.
    pub fn locks_key_ranges(&self, tree: &BTree) -> bool {
        self.snapshot.is_none()
            && (self.db.key_ranges().is_some() || self.db.tree_service().is_some())
            && !self.allocated.contains(&tree.root())
            && !self.pages.contains(tree.root())
    }

    fn tree_state(&mut self, tree: &BTree) -> Result<Arc<TreeState>> {
        let root = tree.root();
        if let Some(own) = self.key_trees.trees.get(&root) {
            return Ok(Arc::clone(&own.state));
        }
        let Some(ranges) = self.db.key_ranges() else {
            return Err(Error::Internal("this backend does not lock key ranges".into()));
        };
        let db = Arc::clone(&self.db);
        let state = ranges.get_or_make(root, || tree.is_unique(&mut Newest { db: &*db }))?;
        // Kept by the transaction (no trip to the shared map and its mutex
        // on the next operation) once it holds a lock on the whole tree:
        // the tree cannot be destroyed, and its root page reused for
        // another, until the transaction ends.
        if self.holds(Resource::Tree(root), LockMode::IS) {
            self.own_tree(tree, &state);
        }
        Ok(state)
    }

    /// Inserts `(key, value)` into `tree` (see [`BTree::insert`] for the
    /// answers): under key-range locking, a change kept by the transaction
    /// and applied to the tree at commit (see the module docs of
    /// `txn::keys`); else at page level. At a server that runs the tree
    /// ([`Txn::tree_apply_changes`]) the answer is true: whether the entry
    /// was new stays with the server (a unique key already there is still
    /// an error).
    pub fn tree_insert(&mut self, tree: &BTree, key: &[u8], value: &[u8]) -> Result<bool> {
        self.check_active()?;
        if !self.locks_key_ranges(tree) {
            return tree.insert(self, key, value);
        }
        if self.tree_server(tree).is_some() {
            let change = super::TreeChange::Insert {
                key: key.to_vec(),
                value: value.to_vec(),
            };
            return self.tree_apply_changes(tree, vec![change]).map(|()| true);
        }
        crate::btree::check_entry_size(self.db.page_size(), key, value)?;
        let root = tree.root();
        self.de_escalate_tree(root)?;
        self.lock(Resource::Tree(root), LockMode::IX)?;
        let state = self.tree_state(tree)?;
        let id = identity(state.unique, key, value);
        self.lock(entry_of(root, &id), LockMode::X)?;
        let db = Arc::clone(&self.db);
        loop {
            let mut pending = state.write();
            let own = self.key_trees.trees.get(&root).map(|t| &t.changes);
            let exists = match own.and_then(|o| o.get(&id)) {
                Some(Change::Insert(_)) => true,
                Some(Change::Delete) => false,
                None => committed_has(&*db, tree, state.unique, &id)?,
            };
            if exists {
                if state.unique {
                    return Err(Error::DuplicateKey {
                        root,
                        key: crate::btree::show_key(key),
                    });
                }
                return Ok(false);
            }
            let next = next_after(&*db, tree, state.unique, &pending, own, &id)?;
            let gap = gap_of(root, next.as_ref());
            let mine = next
                .as_ref()
                .is_some_and(|n| own.is_some_and(|o| matches!(o.get(n), Some(Change::Insert(_)))));
            // Held until the change is registered: no right on the gap is
            // granted meanwhile (a lookup registered after it meets the
            // change and waits for it).
            let mut _unwatched = None;
            if !mine && !self.holds(gap, LockMode::IX) {
                let owner = self.owner();
                if self.gap_is_read(gap) {
                    // A reader scanned this gap: wait for it, off the latch.
                    drop(pending);
                    self.lock(gap, LockMode::IX)?;
                    continue;
                }
                match self.db.probe_write(owner, gap, LockMode::IX)? {
                    Some(guard) => _unwatched = Some(guard),
                    None => {
                        // A client keeps a lookup under a right on this
                        // gap: the lock's hook calls it back, off the
                        // latch, before the entry can appear.
                        drop(pending);
                        self.lock(gap, LockMode::IX)?;
                        continue;
                    }
                }
            }
            // The new entry splits the gap: the part below it is guarded
            // by the gap below the new entry from now on. If this
            // transaction read the gap (S), it keeps reading that part too:
            // it takes S there, under the latch, before any other inserter
            // can see the new entry (else another's insert just below it
            // would find a gap nobody holds — a phantom in this
            // transaction's range). Nobody else can hold X there: X on the
            // entry is this transaction's.
            let below = gap_of(root, Some(&id));
            if self.holds(gap, LockMode::S)
                && !self.holds(below, LockMode::S)
                && !self.try_lock_resource(below, LockMode::S)?
            {
                drop(pending);
                self.lock(below, LockMode::S)?;
                continue;
            }
            pending.entries.insert(id.clone(), self.id);
            drop(pending);
            self.own_tree(tree, &state)
                .changes
                .insert(id, Change::Insert(value.to_vec()));
            self.changes += 1;
            return Ok(true);
        }
    }

    /// True if another owner holds `gap` in a mode an inserter's IX must
    /// wait for (a reader's S, a deleter's X).
    fn gap_is_read(&self, gap: Resource) -> bool {
        self.db
            .lock_holders(&gap)
            .iter()
            .any(|(o, m)| *o != self.owner() && !m.compatible(LockMode::IX))
    }

    fn own_tree(&mut self, tree: &BTree, state: &Arc<TreeState>) -> &mut OwnTree {
        self.key_trees.trees.entry(tree.root()).or_insert_with(|| OwnTree {
            tree: *tree,
            state: Arc::clone(state),
            changes: BTreeMap::new(),
        })
    }

    /// Deletes `(key, value)` from `tree`, or with `value` `None` every
    /// entry of `key`; returns how many entries it removed (see
    /// [`BTree::delete`]). Under key-range locking, kept by the transaction
    /// and applied at commit; else at page level.
    ///
    /// At a server that runs the tree ([`Txn::tree_apply_changes`]) the
    /// answer is 1: how many went stays with the server.
    pub fn tree_delete(&mut self, tree: &BTree, key: &[u8], value: Option<&[u8]>) -> Result<usize> {
        self.check_active()?;
        if !self.locks_key_ranges(tree) {
            return tree.delete(self, key, value);
        }
        if self.tree_server(tree).is_some() {
            let change = super::TreeChange::Delete {
                key: key.to_vec(),
                value: value.map(<[u8]>::to_vec),
            };
            return self.tree_apply_changes(tree, vec![change]).map(|()| 1);
        }
        let root = tree.root();
        self.de_escalate_tree(root)?;
        self.lock(Resource::Tree(root), LockMode::IX)?;
        let state = self.tree_state(tree)?;
        let ids: Vec<EntryId> = match value {
            Some(v) => vec![identity(state.unique, key, v)],
            None if state.unique => vec![identity(true, key, &[])],
            None => {
                let mut values = Vec::new();
                self.tree_get_each(tree, key, |v| {
                    values.push(v.to_vec());
                    true
                })?;
                values.into_iter().map(|v| (key.to_vec(), v)).collect()
            }
        };
        let mut removed = 0;
        for id in ids {
            self.lock(entry_of(root, &id), LockMode::X)?;
            self.lock(gap_of(root, Some(&id)), LockMode::X)?;
            let db = Arc::clone(&self.db);
            let mut pending = state.write();
            let own = self.key_trees.trees.get(&root).map(|t| &t.changes);
            let committed = committed_has(&*db, tree, state.unique, &id)?;
            let present = match own.and_then(|o| o.get(&id)) {
                Some(Change::Insert(_)) => true,
                Some(Change::Delete) => false,
                None => committed,
            };
            if !present {
                continue;
            }
            if committed {
                pending.entries.insert(id.clone(), self.id);
            } else {
                // Its own insert, taken back: nobody else ever sees it.
                pending.entries.remove(&id);
            }
            drop(pending);
            let changes = &mut self.own_tree(tree, &state).changes;
            if committed {
                changes.insert(id, Change::Delete);
            } else {
                changes.remove(&id);
            }
            self.changes += 1;
            removed += 1;
        }
        Ok(removed)
    }

    /// Calls `f` with each value of `key` in `tree` until it says false;
    /// returns how many it was given (see [`BTree::get_each`]). Under
    /// key-range locking, locks what it reads (see the module docs of
    /// `txn::keys`).
    pub fn tree_get_each(&mut self, tree: &BTree, key: &[u8], mut f: impl FnMut(&[u8]) -> bool) -> Result<usize> {
        self.check_active()?;
        let at_server = self.tree_read_server(tree).is_some();
        if !at_server && !self.locks_key_ranges(tree) {
            return tree.get_each(self, key, f);
        }
        let mut n = 0;
        if at_server {
            let mut count = |v: &[u8]| {
                n += 1;
                f(v)
            };
            let done = self.get_at_server(tree, key, &mut count);
            return done.unwrap_or(Ok(())).map(|()| n);
        }
        self.tree_scan(tree, Bound::Included(key), Bound::Included(key), |_, v| {
            n += 1;
            f(v)
        })?;
        Ok(n)
    }

    /// The first value of `key` in `tree` (see [`BTree::get`]).
    pub fn tree_get(&mut self, tree: &BTree, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let mut out = None;
        self.tree_get_each(tree, key, |v| {
            out = Some(v.to_vec());
            false
        })?;
        Ok(out)
    }

    /// Calls `f` with each entry of `tree` whose key lies in `[lo, hi]`, in
    /// order, until it says false. Under key-range locking every entry
    /// handed on is locked S with the gap below it, and a range read to
    /// its end locks the gap past it, so nothing read changes and nothing
    /// appears in the range until the transaction ends.
    pub fn tree_scan(
        &mut self,
        tree: &BTree,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        mut f: impl FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<()> {
        self.check_active()?;
        if !self.locks_key_ranges(tree) && self.tree_read_server(tree).is_none() {
            let mut cur = tree.range(self, lo, hi, Direction::Forward)?;
            while let Some((k, v)) = cur.next(self)? {
                if !f(&k, &v) {
                    break;
                }
            }
            return Ok(());
        }
        if let Some(done) = self.scan_at_server(tree, lo, hi, &mut f) {
            return done;
        }
        self.scan_locking(tree, lo, hi, &mut f, None, true).map(|_| ())
    }

    /// A lookup of `key` in `tree` under key-range locking (`limit` values
    /// at most) that also says which locks guard its answer: S on the gap
    /// below each value and on the gap past them (none for a found key of
    /// a unique tree) — what a server grants its client rights on, so the
    /// answer is kept until one of them is written. An answer of `limit`
    /// values reads on, one value, to know whether it is whole, and there
    /// locks only what it can have without waiting, never the tree's end:
    /// a `find_one` of the key an inserter at the end just added must not
    /// hold every later inserter up, nor wait for one. What it spares, its
    /// answer is not known whole. Without `wait`, `None` if a lock would
    /// have to be waited for (the locks taken so far stay).
    pub fn tree_lookup_guarded(
        &mut self,
        tree: &BTree,
        key: &[u8],
        limit: usize,
        wait: bool,
    ) -> Result<Option<GuardedLookup>> {
        self.check_active()?;
        if !self.locks_key_ranges(tree) {
            return Err(Error::Internal(format!(
                "a guarded lookup of the tree at {} outside key-range locking",
                tree.root()
            )));
        }
        let mut values = Vec::new();
        let full = std::cell::Cell::new(limit == 0);
        let mut guards = Guards {
            gaps: Vec::new(),
            full: &full,
            spared: false,
        };
        let mut cut = false;
        let mut take = |_: &[u8], v: &[u8]| {
            if values.len() == limit {
                cut = true;
                return false;
            }
            values.push(v.to_vec());
            full.set(values.len() == limit);
            true
        };
        let range = (Bound::Included(key), Bound::Included(key));
        if !self.scan_locking(tree, range.0, range.1, &mut take, Some(&mut guards), wait)? {
            return Ok(None);
        }
        let complete = !cut && !guards.spared;
        let mut gaps = guards.gaps;
        gaps.sort_unstable();
        gaps.dedup();
        Ok(Some(GuardedLookup { values, gaps, complete }))
    }

    /// [`Txn::tree_scan`] under key-range locking, noting in `guards` the
    /// gap locks that guard what it read (and sparing what
    /// [`Guards::full`] says); without `wait`, false as soon as a lock
    /// would have to be waited for.
    fn scan_locking(
        &mut self,
        tree: &BTree,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        f: &mut impl FnMut(&[u8], &[u8]) -> bool,
        mut guards: Option<&mut Guards<'_>>,
        wait: bool,
    ) -> Result<bool> {
        let root = tree.root();
        if wait {
            self.lock_tree_to_read(root)?;
        } else if !self.holds(Resource::Tree(root), LockMode::IS)
            && !self.try_lock_resource(Resource::Tree(root), LockMode::IS)?
        {
            return Ok(false);
        }
        let state = self.tree_state(tree)?;
        let point = matches!((lo, hi), (Bound::Included(a), Bound::Included(b)) if a == b);
        let mut after: Option<EntryId> = None;
        loop {
            let scope = Scope { lo, hi, point };
            let (handed, next) = self.scan_batch(tree, &state, scope, after.as_ref(), f, guards.as_deref_mut())?;
            if let Some(last) = handed {
                after = Some(last);
            }
            match next {
                Next::Done => return Ok(true),
                Next::More => {}
                Next::Wait(_) if guards.as_ref().is_some_and(|g| g.full.get()) => {
                    // Past a full answer: not waited for, the answer is
                    // just not known whole.
                    if let Some(g) = guards {
                        g.spared = true;
                    }
                    return Ok(true);
                }
                Next::Wait(_) if !wait => return Ok(false),
                Next::Wait(res) => self.lock(res, LockMode::S)?,
            }
        }
    }

    /// One hold of the latch of a [`Txn::tree_scan`]: the entries it could
    /// lock without waiting, handed to `f`; the last one handed on, and
    /// what to do next.
    fn scan_batch(
        &mut self,
        tree: &BTree,
        state: &Arc<TreeState>,
        scope: Scope<'_>,
        after: Option<&EntryId>,
        f: &mut impl FnMut(&[u8], &[u8]) -> bool,
        mut guards: Option<&mut Guards<'_>>,
    ) -> Result<(Option<EntryId>, Next)> {
        let Scope { lo, hi, point } = scope;
        let root = tree.root();
        let db = Arc::clone(&self.db);
        let pending = state.read();
        let own = self.key_trees.trees.get(&root).map(|t| &t.changes);
        let g = gather(&*db, tree, state.unique, &pending, own, self.id, lo, after, hi)?;
        let mut handed: Option<EntryId> = None;
        let mut found = false;
        for (id, item) in g.items {
            match item {
                Item::Other => return Ok((handed, self.wait_for_change(root, &id)?)),
                Item::Visible { key, value, .. } => {
                    // S on the gap below an entry covers the entry too: a
                    // deleter takes X on both, an inserter checks the gap.
                    let gap = gap_of(root, Some(&id));
                    if !self.try_lock_shared(gap)? {
                        return Ok((handed, Next::Wait(gap)));
                    }
                    if let Some(g) = guards.as_deref_mut() {
                        g.gaps.push(gap);
                    }
                    found = true;
                    let go_on = f(&key, &value);
                    handed = Some(id);
                    if !go_on {
                        return Ok((handed, Next::Done));
                    }
                }
            }
        }
        let Some(fence) = g.fence else {
            // Cut short: everything up to the cut was handed on or hidden.
            return Ok((g.cut, Next::More));
        };
        if point && state.unique && found {
            return Ok((handed, Next::Done));
        }
        // A fence another transaction is inserting (or deleting) guards
        // nothing until that one ends: if it aborts, the entry never was,
        // and the gap below it merges into the next one, which this scan
        // would not hold — an insert into the range would then meet no
        // lock (a phantom). Wait for its writer first, as for a change met
        // inside the range; the fence is found again after.
        if let Some(f) = fence
            .as_ref()
            .filter(|f| pending.entries.get(*f).is_some_and(|w| *w != self.id))
        {
            return Ok((handed, self.wait_for_change(root, f)?));
        }
        Ok((handed, self.lock_fence(root, fence.as_ref(), guards)?))
    }

    /// Another transaction's registered change met at `id`: its writer
    /// holds X on the entry until it has taken the registration back
    /// (under the exclusive latch), so S on it cannot be had while it is
    /// seen — the scan waits for it.
    fn wait_for_change(&mut self, root: PageId, id: &EntryId) -> Result<Next> {
        let entry = entry_of(root, id);
        if !self.try_lock_shared(entry)? {
            return Ok(Next::Wait(entry));
        }
        Err(Error::Internal(format!(
            "{} was granted S on {entry}, which another transaction has changed",
            self.id
        )))
    }

    /// S on the gap past a scan's range: the gap below `fence`, or the
    /// tree's end — which a guarded lookup spares past a full answer.
    fn lock_fence(&mut self, root: PageId, fence: Option<&EntryId>, guards: Option<&mut Guards<'_>>) -> Result<Next> {
        match guards {
            Some(g) if fence.is_none() && g.full.get() => {
                g.spared = true;
                Ok(Next::Done)
            }
            guards => {
                let gap = gap_of(root, fence);
                if !self.try_lock_shared(gap)? {
                    return Ok(Next::Wait(gap));
                }
                if let Some(g) = guards {
                    g.gaps.push(gap);
                }
                Ok(Next::Done)
            }
        }
    }

    /// S on `res` (an entry or gap) if it can be had without waiting:
    /// covered by what the transaction holds — the lock itself, or S on
    /// its whole tree (a coarse read's, which notes it) — or granted now.
    fn try_lock_shared(&mut self, res: Resource) -> Result<bool> {
        if self.holds(res, LockMode::S) || self.covered_by_tree(res) {
            return Ok(true);
        }
        self.try_lock_resource(res, LockMode::S)
    }

    /// True if the transaction holds S on the whole tree of `res` (taken by
    /// [`Txn::lock_tree_to_read`]); `res` is then noted, to be locked by
    /// itself if the tree's S is lowered (`Txn::de_escalate_tree`).
    fn covered_by_tree(&mut self, res: Resource) -> bool {
        let Some(root) = res.tree() else { return false };
        if !self
            .held
            .get(&Resource::Tree(root))
            .is_some_and(|m| m.covers(LockMode::S))
        {
            return false;
        }
        self.coarse.keys.note(res);
        true
    }

    /// The lock a read of the tree at `root` holds on the whole tree:
    /// under coarse reads S if nobody holds or waits for IX there (asked
    /// with `try_lock`: it never waits) — one lock covering every entry and
    /// gap the transaction reads there, which it then only notes — else,
    /// or if it already holds another, IS.
    fn lock_tree_to_read(&mut self, root: PageId) -> Result<()> {
        let res = Resource::Tree(root);
        if self.held.contains_key(&res) || !self.coarse_reads || self.snapshot.is_some() {
            return self.lock(res, LockMode::IS);
        }
        if self.db.try_lock(self.owner, res, LockMode::S)? {
            self.held.insert(res, LockMode::S);
            self.coarse.active = true;
            return Ok(());
        }
        self.lock(res, LockMode::IS)
    }

    /// Before a change of the tree at `root`: if the transaction holds S on
    /// the whole tree for its reads, locks each entry and gap it read
    /// there S (granted at once: nobody else holds IX on the tree, so
    /// nobody holds X or IX on its entries and gaps) and lowers the tree's
    /// S to IS, so that the change's IX does not exclude other inserters;
    /// what it read stays locked (the coarse reads of `txn/objects.rs`,
    /// for a tree).
    pub(super) fn de_escalate_tree(&mut self, root: PageId) -> Result<()> {
        let res = Resource::Tree(root);
        if self.held.get(&res) != Some(&LockMode::S) {
            return Ok(());
        }
        for key in self.coarse.keys.take_unless(|r| r.tree() != Some(root)) {
            self.lock(key, LockMode::S)?;
        }
        if self.db.downgrade_lock(self.owner, res, LockMode::IS)? {
            self.held.insert(res, LockMode::IS);
        }
        Ok(())
    }

    /// True if a lookup of `key` in `tree` may be answered from a cache of
    /// its committed entries after [`Txn::lock_tree_lookup`]: the tree is
    /// under key-range locking and this transaction has changed no entry
    /// of that key.
    pub fn tree_key_cacheable(&self, tree: &BTree, key: &[u8]) -> bool {
        if !self.locks_key_ranges(tree) || self.tree_server(tree).is_some() {
            return false;
        }
        let Some(own) = self.key_trees.trees.get(&tree.root()).filter(|t| !t.changes.is_empty()) else {
            return true;
        };
        let from = (key.to_vec(), Vec::new());
        own.changes
            .range(from..)
            .next()
            .is_none_or(|((k, _), _)| k.as_slice() != key)
    }

    /// Whether no other transaction has an uncommitted change of `key` in
    /// `tree` (read under the tree's latch). A cached answer validated by
    /// its gap locks must also ask this: an insert registered before those
    /// locks were granted may hold its lock on a gap the cache does not
    /// name (the gap below another transaction's uncommitted entry, which
    /// that one's abort then removes), and a scan of the tree would have
    /// met it and waited for it.
    pub fn tree_key_settled(&mut self, tree: &BTree, key: &[u8]) -> Result<bool> {
        let state = self.tree_state(tree)?;
        let pending = state.read();
        let me = self.id;
        let from = (key.to_vec(), Vec::new());
        Ok(pending
            .entries
            .range(from..)
            .take_while(|((k, _), _)| k.as_slice() == key)
            .all(|(_, owner)| *owner == me))
    }

    /// The locks a lookup of `key` in `tree` under key-range locking takes
    /// when it finds `values` (in order): S on the gap below each (which
    /// covers the entry too); with `past` (the gap just
    /// past the last value, [`Txn::tree_gap_below`] of the next entry) S on
    /// that too, for a lookup that read every value of the key. What a
    /// cache hit holds before it checks its entries are current.
    pub fn lock_tree_lookup(
        &mut self,
        tree: &BTree,
        key: &[u8],
        values: &[&[u8]],
        past: Option<Resource>,
    ) -> Result<()> {
        self.check_active()?;
        let root = tree.root();
        let whole = Resource::Tree(root);
        if !self.held.contains_key(&whole) {
            self.lock_tree_to_read(root)?;
        }
        // Under S on the whole tree (a coarse read) the locks are only noted.
        let coarse = self.held.get(&whole).is_some_and(|m| m.covers(LockMode::S));
        let unique = match self.key_trees.trees.get(&root) {
            Some(own) => own.state.unique,
            None => self.tree_state(tree)?.unique,
        };
        let past = past.filter(|_| !unique);
        let gaps = values
            .iter()
            .map(|v| Resource::Gap(root, hash_parts(root, key, if unique { &[][..] } else { v })))
            .chain(past);
        for gap in gaps {
            if coarse {
                self.coarse.keys.note(gap);
            } else {
                self.lock(gap, LockMode::S)?;
            }
        }
        Ok(())
    }

    /// The lock on the gap just below the entry `(key, value)` of `tree`
    /// (under key-range locking).
    pub fn tree_gap_below(&mut self, tree: &BTree, key: &[u8], value: &[u8]) -> Result<Resource> {
        let unique = self.tree_state(tree)?.unique;
        let value = if unique { &[][..] } else { value };
        Ok(Resource::Gap(tree.root(), hash_parts(tree.root(), key, value)))
    }

    /// The leaf of `tree` whose range holds `key`, as the tree stands now
    /// (its newest pages, under its latch; no lock): where a cache of its
    /// entries would be filled from.
    pub fn tree_leaf_of(&mut self, tree: &BTree, key: &[u8]) -> Result<PageId> {
        let state = self.tree_state(tree)?;
        let db = Arc::clone(&self.db);
        let _latch = state.read();
        tree.leaf_of(&mut Newest { db: &*db }, key)
    }

    /// Calls `f` with every entry of the leaf of `tree` whose range holds
    /// `key`, read under the tree's latch from its newest pages with no
    /// lock; returns the leaf. A cache filled from it must be validated by
    /// versions the tree-change hook ([`super::Db::set_tree_change_hook`])
    /// moves, and used only under [`Txn::lock_tree_lookup`].
    pub fn tree_leaf_entries(&mut self, tree: &BTree, key: &[u8], f: impl FnMut(&[u8], &[u8])) -> Result<PageId> {
        let state = self.tree_state(tree)?;
        let db = Arc::clone(&self.db);
        let _latch = state.read();
        let mut view = Newest { db: &*db };
        let leaf = tree.leaf_of(&mut view, key)?;
        tree.leaf_entries(&mut view, leaf, f)?;
        Ok(leaf)
    }

    /// Destroys `tree`, freeing its pages (see [`BTree::destroy`]). Under
    /// key-range locking it first takes X on the whole tree, which waits
    /// for every transaction that read or changed it.
    pub fn tree_destroy(&mut self, tree: BTree) -> Result<()> {
        self.check_active()?;
        if let Some(done) = self.destroy_at_server(&tree) {
            return done;
        }
        if self.locks_key_ranges(&tree) {
            self.lock(Resource::Tree(tree.root()), LockMode::X)?;
            if let Some(r) = self.db.key_ranges() {
                r.forget(tree.root());
            }
            if self
                .key_trees
                .trees
                .get(&tree.root())
                .is_some_and(|t| t.changes.is_empty())
            {
                self.key_trees.trees.remove(&tree.root());
            }
        }
        tree.destroy(self)
    }

    /// Ends the transaction's registered changes (before its locks go).
    pub(super) fn end_key_ranges(&mut self) {
        let trees = std::mem::take(&mut self.key_trees.trees);
        for t in trees.into_values() {
            if t.changes.is_empty() {
                continue;
            }
            let mut pending = t.state.write();
            for id in t.changes.keys() {
                if pending.entries.get(id) == Some(&self.id) {
                    pending.entries.remove(id);
                }
            }
        }
    }

    /// The trees with changes, their states and the groups of their roots:
    /// what a commit latches and applies, in root order.
    pub(super) fn key_range_trees(&self) -> Vec<(BTree, Arc<TreeState>)> {
        self.key_trees
            .trees
            .values()
            .filter(|t| !t.changes.is_empty())
            .map(|t| (t.tree, Arc::clone(&t.state)))
            .collect()
    }

    /// Applies the transaction's changes of `tree` to the newest images of
    /// its pages (the caller holds the tree's exclusive latch), allocating
    /// and freeing pages as splits and merges need; adds the images it
    /// made to `images`.
    pub(super) fn apply_key_ranges(
        &mut self,
        tree: &BTree,
        images: &mut BTreeMap<PageId, Vec<u8>>,
    ) -> Result<Vec<PageId>> {
        let Some(own) = self.key_trees.trees.get(&tree.root()) else {
            return Ok(Vec::new());
        };
        let unique = own.state.unique;
        let changes: Vec<(EntryId, Change)> = own.changes.iter().map(|(k, c)| (k.clone(), c.clone())).collect();
        let mut view = Apply {
            txn: self,
            images,
            touched: Vec::new(),
        };
        // Deletes first: they make room, and a unique key deleted and
        // inserted again is deleted before its new value goes in.
        for (id, change) in &changes {
            let value = if unique { None } else { Some(&id.1[..]) };
            if *change == Change::Delete || unique {
                tree.delete(&mut view, &id.0, value)?;
            }
        }
        for (id, change) in changes {
            if let Change::Insert(value) = change {
                tree.insert(&mut view, &id.0, &value)?;
            }
        }
        Ok(view.touched)
    }
}

/// The pages a commit's tree changes are applied to: the images it made,
/// over the newest images of the rest; its splits allocate for the
/// transaction and its merges free at commit.
struct Apply<'a> {
    txn: &'a mut Txn,
    images: &'a mut BTreeMap<PageId, Vec<u8>>,
    /// Every page changed, allocated or freed (with repeats).
    touched: Vec<PageId>,
}

impl PageAccess for Apply<'_> {
    fn page_size(&self) -> usize {
        self.txn.db.page_size()
    }

    fn read<R>(&mut self, id: PageId, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
        if let Some(image) = self.images.get(&id) {
            return Ok(f(image));
        }
        Newest { db: &*self.txn.db }.read(id, f)
    }

    fn modify<R>(&mut self, id: PageId, f: impl FnOnce(&mut [u8]) -> Result<R>) -> Result<R> {
        if !self.images.contains_key(&id) {
            let image = Newest { db: &*self.txn.db }.read(id, <[u8]>::to_vec)?;
            self.images.insert(id, image);
        }
        self.touched.push(id);
        let image = self.images.get_mut(&id).expect("inserted above");
        // On a copy, so a failed change leaves the image as it was.
        let mut copy = image.clone();
        let r = f(&mut copy)?;
        *image = copy;
        Ok(r)
    }

    fn allocate(&mut self, group: GroupId, near: Option<PageId>, ty: PageType) -> Result<PageId> {
        let p = self.txn.allocate_page(group, near, ty)?;
        self.touched.push(p);
        Ok(p)
    }

    fn free(&mut self, id: PageId) -> Result<()> {
        // Nobody locks a tree page under key-range locking: the X is free.
        if !self.txn.try_lock_resource(Resource::Page(id), LockMode::X)? {
            return Err(Error::Internal(format!(
                "tree page {id}, freed by a commit's merge, is locked by another transaction"
            )));
        }
        self.images.remove(&id);
        self.touched.push(id);
        self.txn.to_free.insert(id);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lock a lookup takes by hashing slices is the lock an insert or
    /// a scan takes by hashing the entry's identity: else a cached lookup
    /// would lock another gap than the writer checks.
    #[test]
    fn hashing_the_parts_hashes_the_identity() {
        let root = PageId(7);
        for (unique, key, value) in [
            (true, &b"k"[..], &b"v1"[..]),
            (false, &b"k"[..], &b"v1"[..]),
            (false, &b""[..], &b""[..]),
            (false, &b"ab"[..], &b"c"[..]),
            (false, &b"a"[..], &b"bc"[..]),
        ] {
            let value_part = if unique { &[][..] } else { value };
            assert_eq!(
                hash_parts(root, key, value_part),
                hash_id(root, &identity(unique, key, value)),
                "{key:?} {value:?}"
            );
        }
        // The length prefixes keep a split between key and value apart.
        assert_ne!(hash_parts(root, b"ab", b"c"), hash_parts(root, b"a", b"bc"));
    }
}
