//! [`Source`]: what the typed layer asks of the storage transaction under
//! a typed one — objects, locks, trees, where a view reads a record —
//! written once per kind of store:
//!
//! - `pages.rs`, a page-based storage [`Txn`] (embedded, page- and
//!   file-server clients): the storage engine's algorithms run here, over
//!   pages; a view reads records in place in the dual buffer's images.
//! - `objects.rs`, an object-server transaction ([`ObjectTxn`]; the
//!   object and adaptive clients): the server reads and changes objects
//!   and walks the trees; a view reads what the client keeps under its
//!   rights.
//!
//! The typed layer holds either in a [`super::Tx`], which passes each call
//! on to the one it holds (static dispatch: a virtual call on every object
//! access would cost the embedded hot path, and [`StoreOps`]'s generic
//! methods make the trait unfit for `dyn` anyway).

use std::ops::Range;
use std::sync::Arc;

use cairn_schema::append::ListAppend;
use cairn_schema::TreeOp;
use cairn_storage::btree::BTree;
use cairn_storage::{GroupId, Oid, PageId};

use crate::cache::ObjectCache;
use crate::error::Result;
use crate::index_cache::TreeCache;
use crate::store_ops::StoreOps;
use crate::view::CheckedAs;

#[cfg(doc)]
use crate::remote::ObjectTxn;
#[cfg(doc)]
use cairn_storage::Txn;

mod objects;
mod pages;

pub(crate) use pages::collect_oids;

type StorageResult<T> = cairn_storage::Result<T>;

/// Which copies of an object cached by other transactions a transaction
/// may use ([`Source::lock_to_read`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Trust {
    /// It holds the lock every writer must wait for: any cached copy.
    Locked,
    /// It reads under the client's right of this epoch: a copy decoded from
    /// the bytes kept under that right (token = epoch) and no other.
    Right(u64),
    /// Nothing: no copy another transaction cached.
    Nothing,
}

impl Trust {
    /// True if a copy cached under `token` may be used.
    pub(crate) fn covers(self, token: u64) -> bool {
        match self {
            Trust::Locked => true,
            Trust::Right(epoch) => epoch != 0 && token == epoch,
            Trust::Nothing => false,
        }
    }
}

/// A record's bytes as a store holds them shared ([`Source::view_bytes`]).
pub(crate) struct Viewable {
    /// A page image, or the object's bytes.
    pub(crate) bytes: Arc<[u8]>,
    /// The record (its header included) in `bytes`.
    pub(crate) range: Range<usize>,
    /// What the record was checked as, with these very bytes.
    pub(crate) checked: Option<CheckedAs>,
}

/// Where a view finds a record ([`Source::view_bytes`]).
pub(crate) enum ViewBytes {
    /// Held shared: read in place.
    Shared(Viewable),
    /// Read from the transaction's own pages (it changed the page), or not
    /// held in a form read in place (moved, large): a copy of the record.
    Copy,
    /// Only the owned path says what it is.
    Owned,
}

/// How [`Source::index_lookup`] answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum IndexAnswer {
    /// From the index cache, validated.
    Cached,
    /// From the tree (or the server).
    Read,
    /// The tree holds a value that is not an OID: the index is damaged.
    Malformed,
}

/// What the typed layer asks of a storage transaction, beyond the
/// catalog's and the methods' [`StoreOps`].
pub(crate) trait Source: StoreOps {
    /// The transaction's id (unique among this database's running ones).
    fn id(&self) -> u64;

    /// The storage transaction underneath, if it runs in this process (for
    /// tools and tests: [`crate::Transaction::storage`]); `None` for an
    /// object-server client, whose storage transaction is the server's.
    fn storage(&mut self) -> Option<&mut cairn_storage::Txn>;

    /// Where `Transaction::view` finds `oid`'s record, which it reads in
    /// place: as this store holds it shared (a page image or a copy in the
    /// dual buffer; what an object-server client keeps, or this
    /// transaction read), to be copied out of the transaction's own pages,
    /// or only by the owned path (an object that does not exist).
    fn view_bytes(&mut self, oid: Oid, cache: &ObjectCache) -> Result<ViewBytes>;

    /// Notes that the record `v` holds (from [`Source::view_bytes`]) was
    /// checked as `checked`, with the bytes that hold it: a later view of
    /// them as the same class is not checked again.
    fn note_checked(&self, oid: Oid, v: &Viewable, checked: CheckedAs, cache: &ObjectCache);

    /// Applies `ops` to an index tree: at once for a page-based
    /// transaction (`changed` collects the pages), kept to send with the
    /// next request that needs them for an object-server one.
    fn index_apply(&mut self, tree: &BTree, ops: Vec<TreeOp>, changed: &mut Vec<PageId>) -> StorageResult<()>;

    /// Takes what reading `oid` needs before a copy of it cached by another
    /// transaction may be trusted, and says which copies that is: with the
    /// home page's shared lock (the object's, under object-level locking)
    /// every copy, since a writer removes the object from the caches under
    /// its exclusive lock; for an object-server client, only a copy decoded
    /// from the bytes kept under the right it holds now — a copy decoded
    /// under an earlier right may be older than what a later right brought
    /// (the callback that dropped the earlier one can overtake the copy's
    /// insertion), so the right's epoch names the copies it covers.
    fn lock_to_read(&mut self, oid: Oid) -> StorageResult<Trust>;

    /// As [`StoreOps::read_with`], with the token a copy decoded from the
    /// bytes is cached under (see [`Source::token_of`]).
    fn read_with_token<R>(&mut self, oid: Oid, f: impl FnOnce(&[u8]) -> R) -> StorageResult<(R, u64)>;

    /// The token a copy decoded from `bytes` (just read by this
    /// transaction) is cached under: for an object-server client the epoch
    /// of the right the client keeps exactly these bytes under (0: none,
    /// the copy is this transaction's alone); 0 for a page-based
    /// transaction, whose lock decides ([`Trust::Locked`]).
    fn token_of(&self, oid: Oid, bytes: &[u8]) -> u64;

    /// True if `page`'s other objects may be decoded along with one (the
    /// whole-page prefetch of `get`), trusting the page's image for all of
    /// them: the transaction holds the whole page locked S, by page
    /// locking or by a coarse read under object locking. Otherwise another
    /// transaction may commit a change to another object of the page
    /// meanwhile, so an image loaded then could outlive that commit.
    fn reads_shared_images(&self, page: PageId) -> bool;

    /// Calls `f` with each object (OID, record) of `page`, which this
    /// transaction has read under its lock, if the image it reads holds
    /// committed state ([`Source::reads_shared_images`], and it has not
    /// changed the page); nothing otherwise, and nothing for a store that
    /// holds no page images in this process.
    fn objects_of_page(&mut self, page: PageId, f: impl FnMut(Oid, &[u8])) -> StorageResult<()>;

    /// Looks `key` up in the index `tree`, appending the OIDs it maps to
    /// (the first only, with `first_only`) to `out`. A page-based
    /// transaction answers from `cache`, the index cache of this tree, when
    /// an entry validates (the lock on its leaf, and the leaf's version),
    /// and fills the cache from a leaf on its second miss (at most
    /// `max_entries` in all); an object-server transaction asks the server,
    /// which walks the tree (there are no leaf locks here to validate a
    /// cache by; the client keeps lookups under rights instead).
    fn index_lookup(
        &mut self,
        tree: BTree,
        key: &[u8],
        first_only: bool,
        cache: &TreeCache,
        max_entries: usize,
        out: &mut Vec<Oid>,
    ) -> StorageResult<IndexAnswer>;

    /// [`Source::index_lookup`] of the first value of `key`, for an object
    /// the caller is about to lock for update: the object is not read. (An
    /// object-server transaction's lookup reads what it finds under S in
    /// the same round trip; two updaters that each hold S on an object and
    /// then want X deadlock on it, whatever order their X locks take.)
    fn index_lookup_to_update(
        &mut self,
        tree: BTree,
        key: &[u8],
        cache: &TreeCache,
        max_entries: usize,
        out: &mut Vec<Oid>,
    ) -> StorageResult<IndexAnswer> {
        self.index_lookup(tree, key, true, cache, max_entries, out)
    }

    /// [`Source::index_lookup_to_update`] of each of `keys`: how each was
    /// answered, and its first value. One by one unless the store looks
    /// them up together (an object-server client: one round trip).
    fn index_lookups_to_update(
        &mut self,
        tree: BTree,
        keys: &[Vec<u8>],
        cache: &TreeCache,
        max_entries: usize,
    ) -> StorageResult<Vec<(IndexAnswer, Option<Oid>)>> {
        lookups_to_update_one_by_one(self, tree, keys, cache, max_entries)
    }

    /// Takes what changing `oid` needs (its home page's exclusive lock, or
    /// the object's on the server).
    fn lock_to_change(&mut self, oid: Oid) -> StorageResult<()>;

    /// Says which objects are about to be read, so they are fetched
    /// together (pages or objects, pipelined).
    fn prefetch(&mut self, oids: &[Oid]) -> StorageResult<()>;

    /// Says which objects are about to be changed, so their locks (pages
    /// or objects, exclusive) are taken together.
    fn prefetch_for_update(&mut self, oids: &[Oid]) -> StorageResult<()>;

    /// Creates an object of `bytes` near `near` (on its page if it fits).
    fn create_near(&mut self, near: Oid, bytes: &[u8]) -> StorageResult<Oid>;

    /// Reads `buf.len()` bytes of the object from `offset`.
    fn read_range(&mut self, oid: Oid, offset: u64, buf: &mut [u8]) -> StorageResult<()>;

    /// The object's length in bytes.
    fn len(&mut self, oid: Oid) -> StorageResult<u64>;

    /// Replaces the object's bytes.
    fn update(&mut self, oid: Oid, bytes: &[u8]) -> StorageResult<()>;

    /// Keeps `append` for the object without reading it, to be applied at
    /// commit to its newest record (`cairn_storage::txn::RecordMerge`):
    /// true if kept; false if the caller must change the object whole
    /// instead (read, append, write under X).
    fn append(&mut self, oid: Oid, append: &Arc<ListAppend>) -> StorageResult<bool>;

    /// Applies `append` to the object now, under X, where
    /// [`Source::append`] did not keep it: true if done (a large record
    /// whose list ends it is edited in place, its head and tail pages
    /// only); false if the caller must rewrite the object itself.
    fn append_whole(&mut self, oid: Oid, append: &Arc<ListAppend>) -> StorageResult<bool>;

    /// Whether [`Source::append`] keeps appends (under append locks, or to
    /// commit under page locking) rather than leaving the caller to rewrite
    /// the object under X.
    fn keeps_appends(&self) -> bool;

    /// Before this transaction reads an object it appended to: applies the
    /// appends the store keeps for it in this process (kept to commit under
    /// page locking), so the read sees them.
    fn settle_appends(&mut self, oid: Oid) -> StorageResult<()>;

    /// Just before commit: applies the appends this process keeps to
    /// commit (under page locking), under X on their objects' pages, which
    /// the transaction then holds to its end (so the objects' cached copies
    /// can go before those locks do) — or, for a page client, has its
    /// server keep them under append locks, applied by the commit
    /// (`Txn::apply_deferred_at_commit`).
    fn apply_appends(&mut self) -> StorageResult<()>;

    /// Before appends to `oids` ([`Source::keeps_appends`]): the exclusive
    /// locks of those it will not keep, taken now in one global order.
    fn prepare_appends(&mut self, oids: &[Oid]) -> StorageResult<()>;

    /// Deletes the object.
    fn delete(&mut self, oid: Oid) -> StorageResult<()>;

    /// Runs a server-side method: here for a page-based transaction, on the
    /// server (after sending it this transaction's changes) for an
    /// object-server one.
    fn run_method(
        &mut self,
        m: &crate::methods::Method,
        meta: &crate::catalog::Meta,
        cat: &crate::catalog::Catalog,
        group: &dyn Fn(&str) -> crate::Result<GroupId>,
    ) -> crate::Result<crate::methods::Answer>;

    /// The pages this transaction changed (none for an object-server one:
    /// it has no pages).
    fn changed_pages(&self) -> Vec<PageId>;

    /// Commits.
    fn commit(self) -> StorageResult<()>;

    /// Aborts.
    fn abort(self) -> StorageResult<()>;

    /// Calls `f` with each value of `key` until it says false
    /// (`first_only`: the first value is all the caller wants).
    fn tree_get_each(
        &mut self,
        tree: &BTree,
        key: &[u8],
        first_only: bool,
        f: impl FnMut(&[u8]) -> bool,
    ) -> StorageResult<()>;

    /// Builds a tree of `pairs` (sorted) in `group`.
    fn tree_bulk_load(
        &mut self,
        group: GroupId,
        pairs: Vec<(Vec<u8>, Vec<u8>)>,
        changed: &mut Vec<PageId>,
    ) -> StorageResult<BTree>;

    /// Frees every page of `tree`.
    fn tree_destroy(&mut self, tree: BTree, changed: &mut Vec<PageId>) -> StorageResult<()>;
}

/// [`Source::index_lookup_to_update`] of each of `keys` in turn: how each
/// was answered, and its first value.
pub(super) fn lookups_to_update_one_by_one<S: Source + ?Sized>(
    source: &mut S,
    tree: BTree,
    keys: &[Vec<u8>],
    cache: &TreeCache,
    max_entries: usize,
) -> StorageResult<Vec<(IndexAnswer, Option<Oid>)>> {
    let mut oids = Vec::new();
    keys.iter()
        .map(|key| {
            oids.clear();
            let answer = source.index_lookup_to_update(tree, key, cache, max_entries, &mut oids)?;
            Ok((answer, oids.first().copied()))
        })
        .collect()
}
