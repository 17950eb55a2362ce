//! Where a database lives ([`Store`]) and the storage transaction under a
//! typed one ([`Tx`]).
//!
//! Embedded, page-server and file-server databases run the storage
//! engine's algorithms in this process over pages: their transactions are
//! storage [`Txn`]s (the backend seam decides where pages come from). An
//! object-server database runs none of them here: the server reads and
//! changes objects and walks the B+-trees for the client, and its
//! transactions are [`ObjectTxn`]s. [`Tx`] is the one set of operations the
//! typed layer asks of either — objects, locks, trees — so the typed layer
//! is one code for all four architectures. Where a view reads a record in
//! place is each kind's own answer ([`Tx::view_bytes`]: the dual buffer's
//! images for a page-based transaction, what an object-server client keeps
//! under its rights), so `Transaction::view` has one path; what only a
//! page-based transaction has (a whole page decoded at once, the index
//! cache's leaf locks) is asked for through [`Tx::pages`] and skipped
//! otherwise.

use std::ops::{Bound, Range};
use std::sync::Arc;

use cairn_schema::TreeOp;
use cairn_storage::access::Recording;
use cairn_storage::btree::BTree;
use cairn_storage::{Db, GroupId, Oid, PageId, Txn};

use crate::cache::ObjectCache;
use crate::dual::Probe;
use crate::error::Result;
use crate::remote::{ObjectStore, ObjectTxn, RemoteStore};
use crate::store_ops::StoreOps;
use crate::view::CheckedAs;

type StorageResult<T> = cairn_storage::Result<T>;

/// Where the database lives.
pub(crate) enum Store {
    /// In this process.
    Embedded(Db),
    /// Behind `cairn serve`, as a page- or file-server client.
    Remote(Arc<RemoteStore>),
    /// Behind `cairn serve`, as an object-server client.
    Object(Arc<ObjectStore>),
}

impl Store {
    pub(super) fn begin(&self) -> StorageResult<Tx> {
        Ok(match self {
            Store::Embedded(db) => Tx::Pages(db.begin()?),
            Store::Remote(r) => Tx::Pages(r.begin()?),
            Store::Object(o) => Tx::Objects(o.begin()?),
        })
    }

    pub(super) fn group(&self, name: &str, create: bool) -> StorageResult<GroupId> {
        match self {
            Store::Embedded(db) => match db.group(name) {
                Ok(g) => Ok(g),
                Err(_) if create => match db.create_group(name) {
                    Ok(g) => Ok(g),
                    // Another thread made it first.
                    Err(cairn_storage::Error::GroupExists(_)) => db.group(name),
                    Err(e) => Err(e),
                },
                Err(e) => Err(e),
            },
            Store::Remote(r) => r.group(name, create),
            Store::Object(o) => o.group(name, create),
        }
    }

    pub(super) fn groups(&self) -> StorageResult<Vec<(GroupId, String)>> {
        match self {
            Store::Embedded(db) => Ok(db.groups().into_iter().map(|g| (g.id, g.name)).collect()),
            Store::Remote(r) => r.refresh_groups(),
            Store::Object(o) => o.groups(),
        }
    }

    pub(super) fn evict_cache(&self) -> StorageResult<()> {
        match self {
            Store::Embedded(db) => db.evict_cache(),
            Store::Remote(r) => r.evict_cache(),
            // It caches nothing across transactions.
            Store::Object(_) => Ok(()),
        }
    }

    pub(super) fn page_size(&self) -> usize {
        match self {
            Store::Embedded(d) => d.header().page_size as usize,
            Store::Remote(r) => r.page_size(),
            Store::Object(o) => o.page_size(),
        }
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Store::Embedded(db) => write!(f, "embedded at {}", db.dir().display()),
            Store::Remote(r) => write!(f, "page server at {}", r.address()),
            Store::Object(o) if o.is_adaptive() => write!(f, "adaptive client of {}", o.address()),
            Store::Object(o) => write!(f, "object server at {}", o.address()),
        }
    }
}

/// Which copies of an object cached by other transactions a transaction
/// may use ([`Tx::lock_to_read`]).
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

/// A record's bytes as a store holds them shared ([`Tx::view_bytes`]).
pub(crate) struct Viewable {
    /// A page image, or the object's bytes.
    pub(crate) bytes: Arc<[u8]>,
    /// The record (its header included) in `bytes`.
    pub(crate) range: Range<usize>,
    /// What the record was checked as, with these very bytes.
    pub(crate) checked: Option<CheckedAs>,
}

/// Where a view finds a record ([`Tx::view_bytes`]).
pub(crate) enum ViewBytes {
    /// Held shared: read in place.
    Shared(Viewable),
    /// Read from the transaction's own pages (it changed the page), or not
    /// held in a form read in place (moved, large): a copy of the record.
    Copy,
    /// Only the owned path says what it is.
    Owned,
}

/// [`Tx::view_bytes`] of a page-based transaction: under its lock (the
/// home page's, or the object's under object-level locking), through the
/// dual buffer — the page's image, faulted in from the transaction's
/// committed image of it, or a copy the buffer made. Under object-level
/// locking only an image whose LSN is still the page's committed one is
/// read in place: then no commit changed any object of the page since it
/// was read, and the object, locked S now, cannot change while it is
/// read; a copy the buffer made has no LSN to check and is not used.
#[inline]
fn view_bytes_of_pages(txn: &mut Txn, oid: Oid, cache: &ObjectCache) -> Result<ViewBytes> {
    let check_lsn = txn.object_locking();
    if check_lsn {
        txn.lock_object(oid, false)?;
    } else {
        txn.lock_page(oid.page, false)?;
    }
    if txn.has_private_copy(oid.page) {
        return Ok(ViewBytes::Copy);
    }
    let me = txn.id().0;
    // Under object-level locking the page is not locked as a whole: its
    // committed image is read without a page lock.
    let image = |txn: &mut Txn| {
        if check_lsn {
            txn.committed_page_image(oid.page)
        } else {
            txn.page_image(oid.page)
        }
    };
    let mut found = match cache.buffered(me, oid)? {
        Probe::Hit(l) => Some(l),
        // Not in its page in a form read in place (moved, large): a copy.
        // (The typed layer flushes nothing into the buffer's transactions,
        // so never its own change.)
        Probe::Elsewhere => None,
        Probe::Miss => match image(txn)? {
            Some(image) => cache.fault_in(me, oid, image)?,
            None => None,
        },
    };
    if check_lsn {
        found = match found {
            Some(l) if l.in_page => {
                let now = txn.committed_page_lsn(oid.page)?;
                if cairn_storage::page::lsn(&l.bytes) == now {
                    Some(l)
                } else {
                    // A commit changed the page since the image was read:
                    // read it again (the object is locked S now, so the new
                    // image holds its current state).
                    cache.invalidate_image(oid.page);
                    match image(txn)? {
                        Some(image) => cache.fault_in(me, oid, image)?.filter(|l| l.in_page),
                        None => None,
                    }
                }
            }
            _ => None,
        };
    }
    Ok(match found {
        Some(l) => ViewBytes::Shared(Viewable {
            bytes: l.bytes,
            range: l.range,
            checked: l.checked,
        }),
        None => ViewBytes::Copy,
    })
}

/// The storage transaction under a typed transaction (see the module docs).
/// The page-based variant is the larger and the hot one: boxing it would put
/// an indirection on every object access.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Tx {
    /// A storage transaction over pages (embedded, page or file server).
    Pages(Txn),
    /// An object-server transaction.
    Objects(ObjectTxn),
}

impl Tx {
    /// The transaction's id (unique among this database's running ones).
    pub(crate) fn id(&self) -> u64 {
        match self {
            Tx::Pages(t) => t.id().0,
            Tx::Objects(t) => t.id(),
        }
    }

    /// The page-based transaction, if this is one.
    pub(crate) fn pages(&mut self) -> Option<&mut Txn> {
        match self {
            Tx::Pages(t) => Some(t),
            Tx::Objects(_) => None,
        }
    }

    /// Applies `ops` to an index tree: at once for a page-based transaction
    /// (`changed` collects the pages), kept to send with the next request
    /// that needs them for an object-server one
    /// (`ObjectTxn::tree_apply_later`).
    pub(crate) fn index_apply(
        &mut self,
        tree: &BTree,
        ops: Vec<TreeOp>,
        changed: &mut Vec<PageId>,
    ) -> StorageResult<()> {
        match self {
            Tx::Pages(t) => StoreOps::tree_apply(t, tree, ops, changed),
            Tx::Objects(t) => t.tree_apply_later(tree.root(), ops),
        }
    }

    /// Where [`crate::Transaction::view`] finds `oid`'s record, which it
    /// reads in place: as this store holds it shared (a page image or a
    /// copy in the dual buffer, for a page-based transaction; what an
    /// object-server client keeps, or this transaction read), to be copied
    /// out of the transaction's own pages, or only by the owned path (an
    /// object-server client's object that does not exist).
    #[inline]
    pub(crate) fn view_bytes(&mut self, oid: Oid, cache: &ObjectCache) -> Result<ViewBytes> {
        match self {
            Tx::Pages(t) => view_bytes_of_pages(t, oid, cache),
            Tx::Objects(t) => Ok(match t.read_shared(oid)? {
                Some(s) => ViewBytes::Shared(Viewable {
                    bytes: s.bytes,
                    range: s.range,
                    checked: s.mark,
                }),
                None => ViewBytes::Owned,
            }),
        }
    }

    /// Notes that the record `v` holds (from [`Tx::view_bytes`]) was
    /// checked as `checked`, with the bytes that hold it: a later view of
    /// them as the same class is not checked again.
    pub(crate) fn note_checked(&self, oid: Oid, v: &Viewable, checked: CheckedAs, cache: &ObjectCache) {
        match self {
            Tx::Pages(_) => cache.note_checked(oid, checked),
            Tx::Objects(t) => t.mark_shared(oid, &v.bytes, checked),
        }
    }

    /// Takes what reading `oid` needs before a copy of it cached by another
    /// transaction may be trusted, and says which copies that is: with the
    /// home page's shared lock (the object's, under object-level locking)
    /// every copy, since a writer removes the object from the caches under
    /// its exclusive lock; for an object-server client, only a copy decoded
    /// from the bytes kept under the right it holds now — a copy decoded
    /// under an earlier right may be older than what a later right brought
    /// (the callback that dropped the earlier one can overtake the copy's
    /// insertion), so the right's epoch names the copies it covers.
    pub(crate) fn lock_to_read(&mut self, oid: Oid) -> StorageResult<Trust> {
        match self {
            Tx::Pages(t) if t.object_locking() => t.lock_object(oid, false).map(|()| Trust::Locked),
            Tx::Pages(t) => t.lock_page(oid.page, false).map(|()| Trust::Locked),
            Tx::Objects(t) => Ok(t.right_epoch(oid).map_or(Trust::Nothing, Trust::Right)),
        }
    }

    /// As [`StoreOps::read_with`], with the token a copy decoded from the
    /// bytes is cached under (see [`Tx::token_of`]).
    pub(crate) fn read_with_token<R>(&mut self, oid: Oid, f: impl FnOnce(&[u8]) -> R) -> StorageResult<(R, u64)> {
        match self {
            Tx::Pages(t) => StoreOps::read_with(t, oid, f).map(|r| (r, 0)),
            Tx::Objects(t) => t.read_with_epoch(oid, f).map(|(r, e)| (r, e.unwrap_or(0))),
        }
    }

    /// The token a copy decoded from `bytes` (just read by this
    /// transaction) is cached under: for an object-server client the epoch
    /// of the right the client keeps exactly these bytes under (0: none,
    /// the copy is this transaction's alone); 0 for a page-based
    /// transaction, whose lock decides ([`Trust::Locked`]).
    pub(crate) fn token_of(&self, oid: Oid, bytes: &[u8]) -> u64 {
        match self {
            Tx::Pages(_) => 0,
            Tx::Objects(t) => t.epoch_of(oid, bytes).unwrap_or(0),
        }
    }

    /// True if a page's other objects may be decoded along with one (the
    /// whole-page prefetch of `get`), trusting the page's image for all of
    /// them: the transaction locks whole pages. Under object-level locking
    /// another transaction may commit a change to another object of the
    /// page meanwhile, so an image loaded then could outlive that commit;
    /// views check an image's LSN instead ([`Tx::checks_image_lsns`]).
    pub(crate) fn reads_shared_images(&self) -> bool {
        matches!(self, Tx::Pages(t) if !t.object_locking())
    }

    /// Takes what changing `oid` needs (its home page's exclusive lock, or
    /// the object's on the server).
    pub(crate) fn lock_to_change(&mut self, oid: Oid) -> StorageResult<()> {
        match self {
            Tx::Pages(t) if t.object_locking() => t.lock_object(oid, true),
            Tx::Pages(t) => t.lock_page(oid.page, true),
            Tx::Objects(t) => t.lock_for_update(oid),
        }
    }

    /// Says which objects are about to be read, so they are fetched
    /// together (pages or objects, pipelined).
    pub(crate) fn prefetch(&mut self, oids: &[Oid]) -> StorageResult<()> {
        match self {
            Tx::Pages(t) => {
                let pages: Vec<PageId> = oids.iter().map(|o| o.page).collect();
                t.prefetch_pages(&pages)
            }
            Tx::Objects(t) => t.read_many(oids).map(|_| ()),
        }
    }

    /// Says which objects are about to be changed, so their locks (pages
    /// or objects, exclusive) are taken together.
    pub(crate) fn prefetch_for_update(&mut self, oids: &[Oid]) -> StorageResult<()> {
        match self {
            Tx::Pages(t) if t.object_locking() => Ok(()),
            Tx::Pages(t) => {
                let pages: Vec<PageId> = oids.iter().map(|o| o.page).collect();
                t.prefetch_pages_exclusive(&pages)
            }
            Tx::Objects(t) => t.lock_many_for_update(oids),
        }
    }

    pub(crate) fn create_near(&mut self, near: Oid, bytes: &[u8]) -> StorageResult<Oid> {
        match self {
            Tx::Pages(t) => t.create_near(near, bytes),
            // The server places it in the neighbour's group.
            Tx::Objects(t) => t.create(GroupId::DEFAULT, Some(near), bytes),
        }
    }

    pub(crate) fn read_range(&mut self, oid: Oid, offset: u64, buf: &mut [u8]) -> StorageResult<()> {
        match self {
            Tx::Pages(t) => t.read_range(oid, offset, buf),
            Tx::Objects(t) => t.read_range(oid, offset, buf),
        }
    }

    pub(crate) fn len(&mut self, oid: Oid) -> StorageResult<u64> {
        match self {
            Tx::Pages(t) => t.len(oid),
            Tx::Objects(t) => t.len(oid),
        }
    }

    pub(crate) fn update(&mut self, oid: Oid, bytes: &[u8]) -> StorageResult<()> {
        match self {
            Tx::Pages(t) => t.update(oid, bytes),
            Tx::Objects(t) => t.update(oid, bytes),
        }
    }

    pub(crate) fn delete(&mut self, oid: Oid) -> StorageResult<()> {
        match self {
            Tx::Pages(t) => t.delete(oid),
            Tx::Objects(t) => t.delete(oid),
        }
    }

    /// Runs a server-side method: here for a page-based transaction, on the
    /// server (after sending it this transaction's changes) for an
    /// object-server one.
    pub(crate) fn run_method(
        &mut self,
        m: &crate::methods::Method,
        meta: &crate::catalog::Meta,
        cat: &crate::catalog::Catalog,
        group: &dyn Fn(&str) -> crate::Result<GroupId>,
    ) -> crate::Result<crate::methods::Answer> {
        match self {
            Tx::Pages(t) => crate::methods::run(t, meta, cat, group, m),
            Tx::Objects(t) => crate::methods::Answer::decode(&t.method(m.encode())?),
        }
    }

    /// The pages this transaction changed (none for an object-server one:
    /// it has no pages).
    pub(crate) fn changed_pages(&self) -> Vec<PageId> {
        match self {
            Tx::Pages(t) => t.changed_pages(),
            Tx::Objects(_) => Vec::new(),
        }
    }

    pub(crate) fn commit(self) -> StorageResult<()> {
        match self {
            Tx::Pages(t) => t.commit(),
            Tx::Objects(t) => t.commit(),
        }
    }

    pub(crate) fn abort(self) -> StorageResult<()> {
        match self {
            Tx::Pages(t) => t.abort(),
            Tx::Objects(t) => t.abort(),
        }
    }

    /// Calls `f` with each value of `key` until it says false.
    pub(crate) fn tree_get_each(
        &mut self,
        tree: &BTree,
        key: &[u8],
        first_only: bool,
        mut f: impl FnMut(&[u8]) -> bool,
    ) -> StorageResult<()> {
        match self {
            Tx::Pages(t) => tree.get_each(t, key, f).map(|_| ()),
            Tx::Objects(t) => {
                let limit = if first_only {
                    1
                } else {
                    cairn_net::object_service::TREE_LIMIT_MAX
                };
                // An index lookup fetches what it finds in the same round
                // trip: the object is read next.
                for v in t.tree_get_objects(tree.root(), key, limit)? {
                    if !f(&v) {
                        break;
                    }
                }
                Ok(())
            }
        }
    }

    /// Builds a tree of `pairs` (sorted) in `group`.
    pub(crate) fn tree_bulk_load(
        &mut self,
        group: GroupId,
        pairs: Vec<(Vec<u8>, Vec<u8>)>,
        changed: &mut Vec<PageId>,
    ) -> StorageResult<BTree> {
        match self {
            Tx::Pages(t) => {
                let mut rec = Recording {
                    inner: t,
                    pages: changed,
                };
                BTree::bulk_load(&mut rec, group, false, pairs)
            }
            Tx::Objects(t) => {
                let root = t.tree_create(group, false)?;
                for chunk in pairs.chunks(4096) {
                    let ops = chunk
                        .iter()
                        .map(|(k, v)| TreeOp::Insert {
                            key: k.clone(),
                            value: v.clone(),
                        })
                        .collect();
                    t.tree_apply(root, ops)?;
                }
                Ok(BTree::at_root(root))
            }
        }
    }

    /// Frees every page of `tree`.
    pub(crate) fn tree_destroy(&mut self, tree: BTree, changed: &mut Vec<PageId>) -> StorageResult<()> {
        match self {
            Tx::Pages(t) => {
                let mut rec = Recording {
                    inner: t,
                    pages: changed,
                };
                tree.destroy(&mut rec)
            }
            Tx::Objects(t) => t.tree_destroy(tree.root()),
        }
    }
}

impl StoreOps for Tx {
    fn create(&mut self, group: GroupId, bytes: &[u8]) -> StorageResult<Oid> {
        match self {
            Tx::Pages(t) => StoreOps::create(t, group, bytes),
            Tx::Objects(t) => t.create(group, None, bytes),
        }
    }

    fn read(&mut self, oid: Oid) -> StorageResult<Vec<u8>> {
        match self {
            Tx::Pages(t) => StoreOps::read(t, oid),
            Tx::Objects(t) => t.read(oid),
        }
    }

    fn read_with<R>(&mut self, oid: Oid, f: impl FnOnce(&[u8]) -> R) -> StorageResult<R> {
        match self {
            Tx::Pages(t) => StoreOps::read_with(t, oid, f),
            Tx::Objects(t) => t.read_with(oid, f),
        }
    }

    fn scan_all(&mut self, group: GroupId) -> StorageResult<Vec<Oid>> {
        match self {
            Tx::Pages(t) => StoreOps::scan_all(t, group),
            Tx::Objects(t) => t.scan(group),
        }
    }

    fn tree_open(&mut self, root: PageId) -> StorageResult<(BTree, Option<GroupId>)> {
        match self {
            Tx::Pages(t) => t.tree_open(root),
            Tx::Objects(t) => {
                let group = t.tree_open(root)?;
                Ok((BTree::at_root(root), group))
            }
        }
    }

    fn tree_create(&mut self, group: GroupId, unique: bool) -> StorageResult<BTree> {
        match self {
            Tx::Pages(t) => StoreOps::tree_create(t, group, unique),
            Tx::Objects(t) => t.tree_create(group, unique).map(BTree::at_root),
        }
    }

    fn tree_get(&mut self, tree: &BTree, key: &[u8]) -> StorageResult<Option<Vec<u8>>> {
        match self {
            Tx::Pages(t) => StoreOps::tree_get(t, tree, key),
            Tx::Objects(t) => Ok(t.tree_get(tree.root(), key, 1)?.into_iter().next()),
        }
    }

    fn tree_apply(&mut self, tree: &BTree, ops: Vec<TreeOp>, changed: &mut Vec<PageId>) -> StorageResult<()> {
        match self {
            Tx::Pages(t) => StoreOps::tree_apply(t, tree, ops, changed),
            Tx::Objects(t) => t.tree_apply(tree.root(), ops),
        }
    }

    fn tree_scan(
        &mut self,
        tree: &BTree,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        f: impl FnMut(&[u8], &[u8]) -> bool,
    ) -> StorageResult<()> {
        match self {
            Tx::Pages(t) => StoreOps::tree_scan(t, tree, lo, hi, f),
            Tx::Objects(t) => {
                let own = |b: Bound<&[u8]>| b.map(|k| k.to_vec());
                t.tree_range(tree.root(), own(lo), own(hi), f)
            }
        }
    }
}
