//! [`Source`] of a page-based storage [`Txn`]: embedded, and the page and
//! file clients.

use std::sync::Arc;

use cairn_schema::append::ListAppend;
use cairn_schema::TreeOp;
use cairn_storage::access::{PageAccess as _, Recording};
use cairn_storage::btree::BTree;
use cairn_storage::{GroupId, Oid, PageId, Txn};

use super::{IndexAnswer, Source, StorageResult, Trust, ViewBytes, Viewable};
use crate::cache::ObjectCache;
use crate::dual::Probe;
use crate::error::Result;
use crate::index_cache::TreeCache;
use crate::store_ops::StoreOps;
use crate::view::CheckedAs;

impl Source for Txn {
    #[inline]
    fn id(&self) -> u64 {
        Txn::id(self).0
    }

    #[inline]
    fn storage(&mut self) -> Option<&mut Txn> {
        Some(self)
    }

    #[inline]
    fn view_bytes(&mut self, oid: Oid, cache: &ObjectCache) -> Result<ViewBytes> {
        view_bytes_of_pages(self, oid, cache)
    }

    #[inline]
    fn note_checked(&self, oid: Oid, _v: &Viewable, checked: CheckedAs, cache: &ObjectCache) {
        cache.note_checked(oid, checked);
    }

    fn index_apply(&mut self, tree: &BTree, ops: Vec<TreeOp>, changed: &mut Vec<PageId>) -> StorageResult<()> {
        StoreOps::tree_apply(self, tree, ops, changed)
    }

    #[inline]
    fn lock_to_read(&mut self, oid: Oid) -> StorageResult<Trust> {
        if self.object_locking() {
            self.lock_object(oid, false)?;
        } else {
            self.lock_page(oid.page, false)?;
        }
        Ok(Trust::Locked)
    }

    #[inline]
    fn read_with_token<R>(&mut self, oid: Oid, f: impl FnOnce(&[u8]) -> R) -> StorageResult<(R, u64)> {
        StoreOps::read_with(self, oid, f).map(|r| (r, 0))
    }

    #[inline]
    fn token_of(&self, _oid: Oid, _bytes: &[u8]) -> u64 {
        0
    }

    #[inline]
    fn reads_shared_images(&self, page: PageId) -> bool {
        !self.object_locking() || self.reads_page_whole(page)
    }

    fn objects_of_page(&mut self, page: PageId, f: impl FnMut(Oid, &[u8])) -> StorageResult<()> {
        if self.has_private_copy(page) {
            return Ok(());
        }
        if !self.object_locking() {
            return self.page_objects(page, f);
        }
        if !self.reads_page_whole(page) {
            return Ok(());
        }
        // Held S for the objects read (a coarse read): the committed image
        // is the transaction's, and reading it is no page-level access
        // (which would keep the page's S from ever being lowered).
        match self.committed_page_image(page)? {
            Some(image) => cairn_storage::record::object::image_objects(page, &image, f),
            None => Ok(()),
        }
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
        index_lookup_in_pages(self, tree, key, first_only, false, cache, max_entries, out)
    }

    /// Under page locking, the key's leaf is read under an update lock
    /// (U: readers share it, another lookup for update waits), so two
    /// transactions that look keys up and then insert into the same leaf
    /// (OO1's inserts: targets looked up, new ids at the right edge) queue
    /// instead of both holding S and deadlocking on X.
    fn index_lookup_to_update(
        &mut self,
        tree: BTree,
        key: &[u8],
        cache: &TreeCache,
        max_entries: usize,
        out: &mut Vec<Oid>,
    ) -> StorageResult<IndexAnswer> {
        index_lookup_in_pages(self, tree, key, true, true, cache, max_entries, out)
    }

    /// As one by one, but a page or file client first takes U on the
    /// root and on all the keys' leaves together, in page order
    /// ([`Txn::lock_leaves_for_update`]: one round trip for them all, and
    /// one order, so that two such transactions queue instead of holding a
    /// leaf each and waiting for the other's).
    fn index_lookups_to_update(
        &mut self,
        tree: BTree,
        keys: &[Vec<u8>],
        cache: &TreeCache,
        max_entries: usize,
    ) -> StorageResult<Vec<(IndexAnswer, Option<Oid>)>> {
        if keys.len() >= 2 {
            // A page client of a server that locks key ranges: the server
            // looks them all up, in one request.
            if let Some(firsts) = self.tree_firsts_at_server(&tree, keys) {
                return firsts?
                    .into_iter()
                    .map(|first| {
                        Ok(match first {
                            None => (IndexAnswer::Read, None),
                            Some(v) => match Oid::from_exact(&v) {
                                Some(oid) => (IndexAnswer::Read, Some(oid)),
                                None => (IndexAnswer::Malformed, None),
                            },
                        })
                    })
                    .collect();
            }
            let named: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
            self.lock_leaves_for_update(&tree, &named)?;
        }
        super::lookups_to_update_one_by_one(self, tree, keys, cache, max_entries)
    }

    fn lock_to_change(&mut self, oid: Oid) -> StorageResult<()> {
        if self.object_locking() {
            self.lock_object(oid, true)
        } else {
            self.lock_page(oid.page, true)
        }
    }

    fn prefetch(&mut self, oids: &[Oid]) -> StorageResult<()> {
        let pages: Vec<PageId> = oids.iter().map(|o| o.page).collect();
        self.prefetch_pages(&pages)
    }

    /// The X locks of the objects' pages, in one global order: page id
    /// order, each page once (and `prefetch_pages_exclusive` keeps it), so
    /// two transactions prefetching the same pages for update never hold
    /// one each and wait for the other.
    fn prefetch_for_update(&mut self, oids: &[Oid]) -> StorageResult<()> {
        self.lock_objects_for_update(oids)
    }

    fn create_near(&mut self, near: Oid, bytes: &[u8]) -> StorageResult<Oid> {
        Txn::create_near(self, near, bytes)
    }

    fn read_range(&mut self, oid: Oid, offset: u64, buf: &mut [u8]) -> StorageResult<()> {
        Txn::read_range(self, oid, offset, buf)
    }

    fn len(&mut self, oid: Oid) -> StorageResult<u64> {
        Txn::len(self, oid)
    }

    fn update(&mut self, oid: Oid, bytes: &[u8]) -> StorageResult<()> {
        Txn::update(self, oid, bytes)
    }

    /// Kept under the object's append lock when the transaction locks
    /// objects (embedded); under page locking (page and file clients, the
    /// embedded engine with page locks) kept to commit, where the pages of
    /// all the objects appended to are locked X together
    /// ([`Txn::defer_merge`]): the page locks are held for the commit only.
    fn append(&mut self, oid: Oid, append: &Arc<ListAppend>) -> StorageResult<bool> {
        let merge = Arc::clone(append) as Arc<dyn cairn_storage::txn::RecordMerge>;
        if !self.object_locking() {
            self.defer_merge(oid, merge)?;
            return Ok(true);
        }
        self.merge(oid, merge)
    }

    fn append_whole(&mut self, oid: Oid, append: &Arc<ListAppend>) -> StorageResult<bool> {
        let merge = Arc::clone(append) as Arc<dyn cairn_storage::txn::RecordMerge>;
        self.merge_whole(oid, &[merge])?;
        Ok(true)
    }

    fn keeps_appends(&self) -> bool {
        true
    }

    fn settle_appends(&mut self, oid: Oid) -> StorageResult<()> {
        self.settle_merges(oid)
    }

    fn apply_appends(&mut self) -> StorageResult<()> {
        self.apply_deferred_at_commit()
    }

    fn prepare_appends(&mut self, oids: &[Oid]) -> StorageResult<()> {
        self.lock_for_appends(oids)
    }

    fn delete(&mut self, oid: Oid) -> StorageResult<()> {
        Txn::delete(self, oid)
    }

    fn run_method(
        &mut self,
        m: &crate::methods::Method,
        meta: &crate::catalog::Meta,
        cat: &crate::catalog::Catalog,
        group: &dyn Fn(&str) -> crate::Result<GroupId>,
    ) -> crate::Result<crate::methods::Answer> {
        // It may read objects this transaction appended to, page by page.
        self.apply_deferred()?;
        crate::methods::run(self, meta, cat, group, m)
    }

    /// Its private pages, and those whose appends its server keeps
    /// (changed by its commit all the same).
    fn changed_pages(&self) -> Vec<PageId> {
        let mut pages = Txn::changed_pages(self);
        pages.extend_from_slice(self.pages_kept_by_backend());
        pages
    }

    fn commit(self) -> StorageResult<()> {
        Txn::commit(self)
    }

    fn abort(self) -> StorageResult<()> {
        Txn::abort(self)
    }

    fn tree_get_each(
        &mut self,
        tree: &BTree,
        key: &[u8],
        _first_only: bool,
        f: impl FnMut(&[u8]) -> bool,
    ) -> StorageResult<()> {
        Txn::tree_get_each(self, tree, key, f).map(|_| ())
    }

    fn tree_bulk_load(
        &mut self,
        group: GroupId,
        pairs: Vec<(Vec<u8>, Vec<u8>)>,
        changed: &mut Vec<PageId>,
    ) -> StorageResult<BTree> {
        let mut rec = Recording {
            inner: self,
            pages: changed,
        };
        BTree::bulk_load(&mut rec, group, false, pairs)
    }

    fn tree_destroy(&mut self, tree: BTree, changed: &mut Vec<PageId>) -> StorageResult<()> {
        if self.locks_key_ranges(&tree) {
            // Its lookups were never cached (see `index_lookup_in_pages`).
            return Txn::tree_destroy(self, tree);
        }
        let mut rec = Recording {
            inner: self,
            pages: changed,
        };
        tree.destroy(&mut rec)
    }
}

/// [`Source::view_bytes`] of a page-based transaction: under its lock (the
/// home page's, or the object's under object-level locking), through the
/// dual buffer — the page's image, faulted in from the transaction's
/// committed image of it, or a copy the buffer made. Under object-level
/// locking an image is read without a lock on the whole page, so a commit
/// may install the page meanwhile: it is faulted in only if no install
/// happened since ([`ObjectCache::fault_in_since`]), and every commit
/// drops its pages' images before its locks go (`Database::open_with`'s
/// install hook). With the object locked S only, an image is read in place
/// only if its LSN is still the page's committed one (then no commit
/// changed any object of the page since it was read, and the object cannot
/// change while it is read); a copy the buffer made has no LSN to check
/// and is not used. With the whole page held S (a coarse read) no commit
/// can change the page, and what the buffer holds of it is current.
#[inline]
fn view_bytes_of_pages(txn: &mut Txn, oid: Oid, cache: &ObjectCache) -> Result<ViewBytes> {
    let object_locking = txn.object_locking();
    let check_lsn = if object_locking {
        txn.lock_object_to_read(oid)? == cairn_storage::txn::PageRead::Object
    } else {
        txn.lock_page(oid.page, false)?;
        false
    };
    if txn.has_private_copy(oid.page) {
        return Ok(ViewBytes::Copy);
    }
    let me = txn.id().0;
    // Under object-level locking the page is not locked as a whole (or is
    // held S for the objects read, which a page-level read would keep from
    // being lowered): its committed image is read without a page lock, and
    // faulted in only if no commit installed a page meanwhile.
    let fault = |txn: &mut Txn| -> Result<Option<crate::dual::Located>> {
        if !object_locking {
            return match txn.page_image(oid.page)? {
                Some(image) => cache.fault_in(me, oid, image),
                None => Ok(None),
            };
        }
        let since = cache.installs();
        match txn.committed_page_image(oid.page)? {
            Some(image) => cache.fault_in_since(since, me, oid, image),
            None => Ok(None),
        }
    };
    let mut found = match cache.buffered(me, oid)? {
        Probe::Hit(l) => Some(l),
        // Not in its page in a form read in place (moved, large): a copy.
        // (The typed layer flushes nothing into the buffer's transactions,
        // so never its own change.)
        Probe::Elsewhere => None,
        Probe::Miss => fault(txn)?,
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
                    fault(txn)?.filter(|l| l.in_page)
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

/// [`Source::index_lookup`] of a page-based transaction: through `cache`
/// when its entry validates (the leaf's lock and version, see
/// [`crate::index_cache`]), else in the tree: the key's whole leaf is read
/// (under its lock), the answer taken from it when the key lies strictly
/// inside it, and the cache filled from it on the leaf's second miss.
#[allow(clippy::too_many_arguments)]
fn index_lookup_in_pages(
    txn: &mut Txn,
    tree: BTree,
    key: &[u8],
    first_only: bool,
    for_update: bool,
    cache: &TreeCache,
    max_entries: usize,
    out: &mut Vec<Oid>,
) -> StorageResult<IndexAnswer> {
    if txn.locks_key_ranges(&tree) {
        return index_lookup_by_key(txn, tree, key, first_only, cache, max_entries, out);
    }
    let start = out.len();
    if let Some((leaf, version)) = cache.get(key, first_only, out) {
        // (A leaf this transaction changed has a new version, so its
        // entries never validate here: its own are in its private copy.)
        if for_update {
            txn.lock_to_read_for_update(leaf)?;
        } else {
            txn.lock_page(leaf, false)?;
        }
        if cache.still(leaf, version) {
            return Ok(IndexAnswer::Cached);
        }
        out.truncate(start);
    }
    let mark = cache.mark();
    let leaf = if for_update {
        tree.leaf_of_for_update(txn, key)?
    } else {
        tree.leaf_of(txn, key)?
    };
    // Changed here, the leaf holds uncommitted entries, never cached; and
    // a leaf's first miss just descends.
    if txn.has_private_copy(leaf) || !cache.worth_filling(leaf, max_entries) {
        return tree_lookup(txn, tree, leaf, key, first_only, out);
    }
    let mut entries = LeafEntries::default();
    tree.leaf_entries(txn, leaf, |k, v| entries.push(k, v))?;
    let Some(pairs) = entries.pairs() else {
        return Ok(IndexAnswer::Malformed);
    };
    let inside = match (pairs.first(), pairs.last()) {
        (Some((first, _)), Some((last, _))) => *first < key && key < *last,
        _ => false,
    };
    let answer = if inside {
        let n = if first_only { 1 } else { usize::MAX };
        out.extend(pairs.iter().filter(|(k, _)| *k == key).map(|(_, o)| *o).take(n));
        IndexAnswer::Read
    } else {
        tree_lookup(txn, tree, leaf, key, first_only, out)?
    };
    cache.fill(mark, leaf, &pairs, max_entries);
    Ok(answer)
}

/// [`index_lookup_in_pages`] under key-range locking: a lookup locks the
/// key, not the leaf, and a commit changes a leaf without a page lock but
/// gives it a new version in the cache (the database's tree-change hook)
/// before it releases its key locks. So a cached entry of a key the
/// transaction has not changed is used under the locks a lookup that
/// found its values takes (S on the gap below each, and past the last) if
/// the leaf's version is unchanged once they are held and no other
/// transaction has an uncommitted change of the key
/// (`Txn::tree_key_settled`: an insert registered before those locks may
/// hold a gap the cached answer does not name, where a scan of the tree
/// would have met it; without this check the phantom workload saw
/// phantoms about one 20,000-transaction run in two); a fill reads the leaf as it stands
/// (no lock: what it caches is validated when used) after noting the
/// counter, as at page level.
fn index_lookup_by_key(
    txn: &mut Txn,
    tree: BTree,
    key: &[u8],
    first_only: bool,
    cache: &TreeCache,
    max_entries: usize,
    out: &mut Vec<Oid>,
) -> StorageResult<IndexAnswer> {
    let cacheable = txn.tree_key_cacheable(&tree, key);
    let start = out.len();
    if cacheable {
        if let Some((leaf, version, past)) = cache.get_with_past(key, first_only, out) {
            let past = if first_only { None } else { past };
            if let [one] = &out[start..] {
                // The usual answer (a unique key): no lists to make.
                txn.lock_tree_lookup(&tree, key, &[&one.to_bytes()[..]], past)?;
            } else {
                let values: Vec<[u8; Oid::ENCODED_SIZE]> = out[start..].iter().map(|o| o.to_bytes()).collect();
                let values: Vec<&[u8]> = values.iter().map(|v| &v[..]).collect();
                txn.lock_tree_lookup(&tree, key, &values, past)?;
            }
            if cache.still(leaf, version) && txn.tree_key_settled(&tree, key)? {
                return Ok(IndexAnswer::Cached);
            }
            out.truncate(start);
        }
    }
    let mut bad = false;
    txn.tree_get_each(&tree, key, collect_oids(out, first_only, &mut bad))?;
    if bad {
        return Ok(IndexAnswer::Malformed);
    }
    if cacheable && cache.worth_filling(txn.tree_leaf_of(&tree, key)?, max_entries) {
        let mark = cache.mark();
        let mut entries = LeafEntries::default();
        let leaf = txn.tree_leaf_entries(&tree, key, |k, v| entries.push(k, v))?;
        if let Some(pairs) = entries.pairs() {
            // The gap below each entry: a key's last value's is the next
            // key's first entry's.
            let gaps = pairs
                .iter()
                .map(|(k, o)| txn.tree_gap_below(&tree, k, &o.to_bytes()))
                .collect::<StorageResult<Vec<_>>>()?;
            cache.fill_with_gaps(mark, leaf, &pairs, Some(&gaps), max_entries);
        }
    }
    Ok(IndexAnswer::Read)
}

/// Looks `key` up in the tree itself, from `leaf`, its leaf.
fn tree_lookup(
    txn: &mut Txn,
    tree: BTree,
    leaf: PageId,
    key: &[u8],
    first_only: bool,
    out: &mut Vec<Oid>,
) -> StorageResult<IndexAnswer> {
    let mut bad = false;
    tree.get_each_in(txn, leaf, key, collect_oids(out, first_only, &mut bad))?;
    Ok(if bad { IndexAnswer::Malformed } else { IndexAnswer::Read })
}

/// The value visitor of an index lookup: each value, an OID, appended to
/// `out` (only the first with `first_only`); a value that is not one sets
/// `bad` and stops the walk.
pub(crate) fn collect_oids<'a>(
    out: &'a mut Vec<Oid>,
    first_only: bool,
    bad: &'a mut bool,
) -> impl FnMut(&[u8]) -> bool + 'a {
    move |v| {
        match Oid::from_exact(v) {
            Some(oid) => out.push(oid),
            None => *bad = true,
        }
        !*bad && !first_only
    }
}

/// A leaf's entries copied for the index cache: the keys in one buffer,
/// each value read as an OID.
#[derive(Default)]
struct LeafEntries {
    keys: Vec<u8>,
    ents: Vec<(usize, usize, Option<Oid>)>,
}

impl LeafEntries {
    fn push(&mut self, k: &[u8], v: &[u8]) {
        let start = self.keys.len();
        self.keys.extend_from_slice(k);
        self.ents.push((start, self.keys.len(), Oid::from_exact(v)));
    }

    /// The (key, OID) pairs, or `None` if a value is not an OID.
    fn pairs(&self) -> Option<Vec<(&[u8], Oid)>> {
        self.ents
            .iter()
            .map(|&(s, e, oid)| Some((&self.keys[s..e], oid?)))
            .collect()
    }
}
