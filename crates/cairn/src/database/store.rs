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
//! is one code for all four architectures. What each kind does is written
//! once, in its [`Source`] implementation (`source/pages.rs`,
//! `source/objects.rs`); [`Tx`] holds one and passes each call on to it.
//! Where a view reads a record in place is each kind's own answer
//! ([`Source::view_bytes`]), so `Transaction::view` has one path; what
//! only a page-based transaction has (a whole page decoded at once, the
//! index cache's leaf locks) is asked for through [`Source::pages`] and
//! skipped otherwise.

use std::ops::Bound;
use std::sync::Arc;

use cairn_schema::append::ListAppend;
use cairn_schema::TreeOp;
use cairn_storage::btree::BTree;
use cairn_storage::lock::LockStats;
use cairn_storage::{Db, GroupId, Oid, PageId, Txn};

use super::source::{IndexAnswer, Source, Trust, ViewBytes, Viewable};
use crate::cache::ObjectCache;
use crate::error::Result;
use crate::index_cache::TreeCache;
use crate::remote::{ObjectStore, ObjectTxn, RemoteStats, RemoteStore};
use crate::store_ops::StoreOps;
use crate::view::CheckedAs;

type StorageResult<T> = cairn_storage::Result<T>;

/// Where the database lives: in this process ([`Db`]), or behind `cairn
/// serve` as a page- or file-server client ([`RemoteStore`]) or an object
/// or adaptive client ([`ObjectStore`]). Nothing hot goes through it (a
/// transaction's operations go through [`Tx`]), so the database holds it
/// as a trait object.
pub(crate) trait Store: Send + Sync {
    /// Begins a storage transaction.
    fn begin(&self) -> StorageResult<Tx>;
    /// Begins a read-only storage transaction at a snapshot of the last
    /// committed state.
    fn begin_read_only(&self) -> StorageResult<Tx>;
    /// The group named `name`, created if `create` and missing.
    fn group(&self, name: &str, create: bool) -> StorageResult<GroupId>;
    /// Every group, with its name.
    fn groups(&self) -> StorageResult<Vec<(GroupId, String)>>;
    /// Empties what the store caches across transactions (a cold start).
    fn evict_cache(&self) -> StorageResult<()>;
    /// The volume's page size.
    fn page_size(&self) -> usize;
    /// True if saying which objects a transaction is about to use saves
    /// round trips (a client of `cairn serve`).
    fn prefetch_saves_round_trips(&self) -> bool {
        true
    }
    /// The client's counters, if this is a client.
    fn stats(&self) -> Option<RemoteStats> {
        None
    }
    /// The storage engine, if it runs in this process.
    fn storage(&self) -> Option<&Db> {
        None
    }
    /// The server's lock-manager counters, if this is a client of one
    /// (one round trip).
    fn server_lock_stats(&self) -> StorageResult<Option<LockStats>> {
        Ok(None)
    }
    /// The page- or file-server client, if this is one (crash tests
    /// inject faults there).
    fn remote_store(&self) -> Option<&Arc<RemoteStore>> {
        None
    }
    /// Makes what is committed durable in the volume (an embedded
    /// database's checkpoint; nothing for a client).
    fn checkpoint(&self) -> StorageResult<()> {
        Ok(())
    }
    /// Closes the store: an embedded database checkpoints and closes; a
    /// client disconnects (the server's database stays open).
    fn close(self: Box<Self>) -> StorageResult<()> {
        Ok(())
    }
    /// What it is and where, for `Debug`.
    fn describe(&self) -> String;
}

impl std::fmt::Debug for dyn Store + '_ {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

impl Store for Db {
    fn begin(&self) -> StorageResult<Tx> {
        Ok(Tx::Pages(Db::begin(self)?))
    }

    fn begin_read_only(&self) -> StorageResult<Tx> {
        Ok(Tx::Pages(Db::begin_read_only(self)?))
    }

    fn group(&self, name: &str, create: bool) -> StorageResult<GroupId> {
        match Db::group(self, name) {
            Ok(g) => Ok(g),
            Err(_) if create => match self.create_group(name) {
                Ok(g) => Ok(g),
                // Another thread made it first.
                Err(cairn_storage::Error::GroupExists(_)) => Db::group(self, name),
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        }
    }

    fn groups(&self) -> StorageResult<Vec<(GroupId, String)>> {
        Ok(Db::groups(self).into_iter().map(|g| (g.id, g.name)).collect())
    }

    fn evict_cache(&self) -> StorageResult<()> {
        Db::evict_cache(self)
    }

    fn page_size(&self) -> usize {
        self.header().page_size as usize
    }

    /// No round trip to save.
    fn prefetch_saves_round_trips(&self) -> bool {
        false
    }

    fn storage(&self) -> Option<&Db> {
        Some(self)
    }

    fn checkpoint(&self) -> StorageResult<()> {
        Db::checkpoint(self)
    }

    fn close(self: Box<Self>) -> StorageResult<()> {
        Db::close(*self)
    }

    fn describe(&self) -> String {
        format!("embedded at {}", self.dir().display())
    }
}

impl Store for Arc<RemoteStore> {
    fn begin(&self) -> StorageResult<Tx> {
        Ok(Tx::Pages(RemoteStore::begin(self)?))
    }

    fn begin_read_only(&self) -> StorageResult<Tx> {
        Ok(Tx::Pages(RemoteStore::begin_read_only(self)?))
    }

    fn group(&self, name: &str, create: bool) -> StorageResult<GroupId> {
        RemoteStore::group(self, name, create)
    }

    fn groups(&self) -> StorageResult<Vec<(GroupId, String)>> {
        self.refresh_groups()
    }

    fn evict_cache(&self) -> StorageResult<()> {
        RemoteStore::evict_cache(self)
    }

    fn page_size(&self) -> usize {
        RemoteStore::page_size(self)
    }

    fn stats(&self) -> Option<RemoteStats> {
        Some(RemoteStore::stats(self))
    }

    fn server_lock_stats(&self) -> StorageResult<Option<LockStats>> {
        RemoteStore::server_lock_stats(self).map(Some)
    }

    fn remote_store(&self) -> Option<&Arc<RemoteStore>> {
        Some(self)
    }

    fn describe(&self) -> String {
        format!("page server at {}", self.address())
    }
}

impl Store for Arc<ObjectStore> {
    fn begin(&self) -> StorageResult<Tx> {
        Ok(Tx::Objects(ObjectStore::begin(self)?))
    }

    fn begin_read_only(&self) -> StorageResult<Tx> {
        Ok(Tx::Objects(ObjectStore::begin_read_only(self)?))
    }

    fn group(&self, name: &str, create: bool) -> StorageResult<GroupId> {
        ObjectStore::group(self, name, create)
    }

    fn groups(&self) -> StorageResult<Vec<(GroupId, String)>> {
        ObjectStore::groups(self)
    }

    /// What the client keeps under rights goes, and the rights go back
    /// ([`ObjectStore::evict_cache`]).
    fn evict_cache(&self) -> StorageResult<()> {
        ObjectStore::evict_cache(self);
        Ok(())
    }

    fn page_size(&self) -> usize {
        ObjectStore::page_size(self)
    }

    fn stats(&self) -> Option<RemoteStats> {
        Some(ObjectStore::stats(self))
    }

    fn server_lock_stats(&self) -> StorageResult<Option<LockStats>> {
        ObjectStore::server_lock_stats(self).map(Some)
    }

    fn describe(&self) -> String {
        if self.is_adaptive() {
            format!("adaptive client of {}", self.address())
        } else {
            format!("object server at {}", self.address())
        }
    }
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

/// Runs `$body` with `$t` bound to the transaction `$tx` holds, of
/// either kind.
macro_rules! each {
    ($tx:expr, $t:ident => $body:expr) => {
        match $tx {
            Tx::Pages($t) => $body,
            Tx::Objects($t) => $body,
        }
    };
}

impl Source for Tx {
    #[inline]
    fn id(&self) -> u64 {
        each!(self, t => Source::id(t))
    }

    #[inline]
    fn storage(&mut self) -> Option<&mut Txn> {
        each!(self, t => Source::storage(t))
    }

    #[inline]
    fn view_bytes(&mut self, oid: Oid, cache: &ObjectCache) -> Result<ViewBytes> {
        each!(self, t => Source::view_bytes(t, oid, cache))
    }

    #[inline]
    fn note_checked(&self, oid: Oid, v: &Viewable, checked: CheckedAs, cache: &ObjectCache) {
        each!(self, t => Source::note_checked(t, oid, v, checked, cache))
    }

    fn index_apply(&mut self, tree: &BTree, ops: Vec<TreeOp>, changed: &mut Vec<PageId>) -> StorageResult<()> {
        each!(self, t => Source::index_apply(t, tree, ops, changed))
    }

    #[inline]
    fn lock_to_read(&mut self, oid: Oid) -> StorageResult<Trust> {
        each!(self, t => Source::lock_to_read(t, oid))
    }

    #[inline]
    fn read_with_token<R>(&mut self, oid: Oid, f: impl FnOnce(&[u8]) -> R) -> StorageResult<(R, u64)> {
        each!(self, t => Source::read_with_token(t, oid, f))
    }

    #[inline]
    fn token_of(&self, oid: Oid, bytes: &[u8]) -> u64 {
        each!(self, t => Source::token_of(t, oid, bytes))
    }

    #[inline]
    fn reads_shared_images(&self, page: PageId) -> bool {
        each!(self, t => Source::reads_shared_images(t, page))
    }

    fn objects_of_page(&mut self, page: PageId, f: impl FnMut(Oid, &[u8])) -> StorageResult<()> {
        each!(self, t => Source::objects_of_page(t, page, f))
    }

    fn index_lookup(
        &mut self,
        tree: BTree,
        key: &[u8],
        first_only: bool,
        cache: &TreeCache,
        max_entries: usize,
        out: &mut Vec<Oid>,
    ) -> StorageResult<IndexAnswer> {
        each!(self, t => Source::index_lookup(t, tree, key, first_only, cache, max_entries, out))
    }

    fn index_lookup_to_update(
        &mut self,
        tree: BTree,
        key: &[u8],
        cache: &TreeCache,
        max_entries: usize,
        out: &mut Vec<Oid>,
    ) -> StorageResult<IndexAnswer> {
        each!(self, t => Source::index_lookup_to_update(t, tree, key, cache, max_entries, out))
    }

    fn index_lookups_to_update(
        &mut self,
        tree: BTree,
        keys: &[Vec<u8>],
        cache: &TreeCache,
        max_entries: usize,
    ) -> StorageResult<Vec<(IndexAnswer, Option<Oid>)>> {
        each!(self, t => Source::index_lookups_to_update(t, tree, keys, cache, max_entries))
    }

    fn lock_to_change(&mut self, oid: Oid) -> StorageResult<()> {
        each!(self, t => Source::lock_to_change(t, oid))
    }

    fn prefetch(&mut self, oids: &[Oid]) -> StorageResult<()> {
        each!(self, t => Source::prefetch(t, oids))
    }

    fn prefetch_for_update(&mut self, oids: &[Oid]) -> StorageResult<()> {
        each!(self, t => Source::prefetch_for_update(t, oids))
    }

    fn create_near(&mut self, near: Oid, bytes: &[u8]) -> StorageResult<Oid> {
        each!(self, t => Source::create_near(t, near, bytes))
    }

    fn read_range(&mut self, oid: Oid, offset: u64, buf: &mut [u8]) -> StorageResult<()> {
        each!(self, t => Source::read_range(t, oid, offset, buf))
    }

    fn len(&mut self, oid: Oid) -> StorageResult<u64> {
        each!(self, t => Source::len(t, oid))
    }

    fn update(&mut self, oid: Oid, bytes: &[u8]) -> StorageResult<()> {
        each!(self, t => Source::update(t, oid, bytes))
    }

    fn append(&mut self, oid: Oid, append: &Arc<ListAppend>) -> StorageResult<bool> {
        each!(self, t => Source::append(t, oid, append))
    }

    fn append_whole(&mut self, oid: Oid, append: &Arc<ListAppend>) -> StorageResult<bool> {
        each!(self, t => Source::append_whole(t, oid, append))
    }

    fn keeps_appends(&self) -> bool {
        each!(self, t => Source::keeps_appends(t))
    }

    fn settle_appends(&mut self, oid: Oid) -> StorageResult<()> {
        each!(self, t => Source::settle_appends(t, oid))
    }

    fn apply_appends(&mut self) -> StorageResult<()> {
        each!(self, t => Source::apply_appends(t))
    }

    fn prepare_appends(&mut self, oids: &[Oid]) -> StorageResult<()> {
        each!(self, t => Source::prepare_appends(t, oids))
    }

    fn delete(&mut self, oid: Oid) -> StorageResult<()> {
        each!(self, t => Source::delete(t, oid))
    }

    fn run_method(
        &mut self,
        m: &crate::methods::Method,
        meta: &crate::catalog::Meta,
        cat: &crate::catalog::Catalog,
        group: &dyn Fn(&str) -> crate::Result<GroupId>,
    ) -> crate::Result<crate::methods::Answer> {
        each!(self, t => Source::run_method(t, m, meta, cat, group))
    }

    fn changed_pages(&self) -> Vec<PageId> {
        each!(self, t => Source::changed_pages(t))
    }

    fn commit(self) -> StorageResult<()> {
        each!(self, t => Source::commit(t))
    }

    fn abort(self) -> StorageResult<()> {
        each!(self, t => Source::abort(t))
    }

    fn tree_get_each(
        &mut self,
        tree: &BTree,
        key: &[u8],
        first_only: bool,
        f: impl FnMut(&[u8]) -> bool,
    ) -> StorageResult<()> {
        each!(self, t => Source::tree_get_each(t, tree, key, first_only, f))
    }

    fn tree_bulk_load(
        &mut self,
        group: GroupId,
        pairs: Vec<(Vec<u8>, Vec<u8>)>,
        changed: &mut Vec<PageId>,
    ) -> StorageResult<BTree> {
        each!(self, t => Source::tree_bulk_load(t, group, pairs, changed))
    }

    fn tree_destroy(&mut self, tree: BTree, changed: &mut Vec<PageId>) -> StorageResult<()> {
        each!(self, t => Source::tree_destroy(t, tree, changed))
    }
}

impl StoreOps for Tx {
    fn create(&mut self, group: GroupId, bytes: &[u8]) -> StorageResult<Oid> {
        each!(self, t => StoreOps::create(t, group, bytes))
    }

    fn read(&mut self, oid: Oid) -> StorageResult<Vec<u8>> {
        each!(self, t => StoreOps::read(t, oid))
    }

    #[inline]
    fn read_with<R>(&mut self, oid: Oid, f: impl FnOnce(&[u8]) -> R) -> StorageResult<R> {
        each!(self, t => StoreOps::read_with(t, oid, f))
    }

    fn scan_all(&mut self, group: GroupId) -> StorageResult<Vec<Oid>> {
        each!(self, t => StoreOps::scan_all(t, group))
    }

    fn tree_open(&mut self, root: PageId) -> StorageResult<(BTree, Option<GroupId>)> {
        each!(self, t => StoreOps::tree_open(t, root))
    }

    fn tree_create(&mut self, group: GroupId, unique: bool) -> StorageResult<BTree> {
        each!(self, t => StoreOps::tree_create(t, group, unique))
    }

    fn tree_get(&mut self, tree: &BTree, key: &[u8]) -> StorageResult<Option<Vec<u8>>> {
        each!(self, t => StoreOps::tree_get(t, tree, key))
    }

    fn tree_apply(&mut self, tree: &BTree, ops: Vec<TreeOp>, changed: &mut Vec<PageId>) -> StorageResult<()> {
        each!(self, t => StoreOps::tree_apply(t, tree, ops, changed))
    }

    fn tree_scan(
        &mut self,
        tree: &BTree,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        f: impl FnMut(&[u8], &[u8]) -> bool,
    ) -> StorageResult<()> {
        each!(self, t => StoreOps::tree_scan(t, tree, lo, hi, f))
    }

    fn catalog_remote(&mut self, trees: &[PageId], change: &[u8]) -> StorageResult<Option<Vec<u8>>> {
        each!(self, t => StoreOps::catalog_remote(t, trees, change))
    }

    fn check_at_commit(&mut self, check: cairn_storage::txn::CommitCheck) -> bool {
        each!(self, t => StoreOps::check_at_commit(t, check))
    }
}
