//! [`Source`] and [`StoreOps`] of an object-server transaction
//! ([`ObjectTxn`]): the object and adaptive clients. The server reads and
//! changes objects and walks the B+-trees; a tree is named by its root.

use std::ops::Bound;

use std::sync::Arc;

use cairn_schema::append::ListAppend;
use cairn_schema::TreeOp;
use cairn_storage::btree::BTree;
use cairn_storage::{GroupId, Oid, PageId, Txn};

use super::{IndexAnswer, Source, StorageResult, Trust, ViewBytes, Viewable};
use crate::cache::ObjectCache;
use crate::error::Result;
use crate::index_cache::TreeCache;
use crate::remote::ObjectTxn;
use crate::store_ops::StoreOps;
use crate::view::CheckedAs;

impl Source for ObjectTxn {
    fn id(&self) -> u64 {
        ObjectTxn::id(self)
    }

    fn storage(&mut self) -> Option<&mut Txn> {
        None
    }

    fn view_bytes(&mut self, oid: Oid, _cache: &ObjectCache) -> Result<ViewBytes> {
        Ok(match self.read_shared(oid)? {
            Some(s) => ViewBytes::Shared(Viewable {
                bytes: s.bytes,
                range: s.range,
                checked: s.mark,
            }),
            None => ViewBytes::Owned,
        })
    }

    fn note_checked(&self, oid: Oid, v: &Viewable, checked: CheckedAs, _cache: &ObjectCache) {
        self.mark_shared(oid, &v.bytes, checked);
    }

    /// Kept to send with the next request that needs them
    /// (`ObjectTxn::tree_apply_later`).
    fn index_apply(&mut self, tree: &BTree, ops: Vec<TreeOp>, _changed: &mut Vec<PageId>) -> StorageResult<()> {
        self.tree_apply_later(tree.root(), ops)
    }

    fn lock_to_read(&mut self, oid: Oid) -> StorageResult<Trust> {
        Ok(self.right_epoch(oid).map_or(Trust::Nothing, Trust::Right))
    }

    fn read_with_token<R>(&mut self, oid: Oid, f: impl FnOnce(&[u8]) -> R) -> StorageResult<(R, u64)> {
        self.read_with_epoch(oid, f).map(|(r, e)| (r, e.unwrap_or(0)))
    }

    fn token_of(&self, oid: Oid, bytes: &[u8]) -> u64 {
        self.epoch_of(oid, bytes).unwrap_or(0)
    }

    fn reads_shared_images(&self, _page: PageId) -> bool {
        false
    }

    /// The server holds the pages.
    fn objects_of_page(&mut self, _page: PageId, _f: impl FnMut(Oid, &[u8])) -> StorageResult<()> {
        Ok(())
    }

    /// The server walks the tree; `cache` is not used (the client keeps
    /// lookups under rights on their leaves instead).
    fn index_lookup(
        &mut self,
        tree: BTree,
        key: &[u8],
        first_only: bool,
        _cache: &TreeCache,
        _max_entries: usize,
        out: &mut Vec<Oid>,
    ) -> StorageResult<IndexAnswer> {
        let mut bad = false;
        self.tree_get_each(&tree, key, first_only, |v| {
            match Oid::from_exact(v) {
                Some(oid) => out.push(oid),
                None => bad = true,
            }
            !bad
        })?;
        Ok(if bad { IndexAnswer::Malformed } else { IndexAnswer::Read })
    }

    /// TREE_GET, not TREE_GET_OBJECTS: the object is locked for update
    /// next, and reading it now would take S first.
    fn index_lookup_to_update(
        &mut self,
        tree: BTree,
        key: &[u8],
        _cache: &TreeCache,
        _max_entries: usize,
        out: &mut Vec<Oid>,
    ) -> StorageResult<IndexAnswer> {
        for v in ObjectTxn::tree_get(self, tree.root(), key, 1)? {
            match Oid::from_exact(&v) {
                Some(oid) => out.push(oid),
                None => return Ok(IndexAnswer::Malformed),
            }
        }
        Ok(IndexAnswer::Read)
    }

    /// One TREE_GET_FOR_UPDATE per 1,024 keys (`ObjectTxn::tree_get_for_update`):
    /// at the server, each key's leaf under an update lock where trees
    /// are locked by page.
    fn index_lookups_to_update(
        &mut self,
        tree: BTree,
        keys: &[Vec<u8>],
        _cache: &TreeCache,
        _max_entries: usize,
    ) -> StorageResult<Vec<(IndexAnswer, Option<Oid>)>> {
        Ok(self
            .tree_get_for_update(tree.root(), keys)?
            .into_iter()
            .map(|first| match first {
                None => (IndexAnswer::Read, None),
                Some(v) => match Oid::from_exact(&v) {
                    Some(oid) => (IndexAnswer::Read, Some(oid)),
                    None => (IndexAnswer::Malformed, None),
                },
            })
            .collect())
    }

    fn lock_to_change(&mut self, oid: Oid) -> StorageResult<()> {
        self.lock_for_update(oid)
    }

    fn prefetch(&mut self, oids: &[Oid]) -> StorageResult<()> {
        self.read_many(oids).map(|_| ())
    }

    /// The objects' X locks in one global order, OID order, each once:
    /// `lock_many_for_update` sorts them, and the server sorts again.
    fn prefetch_for_update(&mut self, oids: &[Oid]) -> StorageResult<()> {
        self.lock_many_for_update(oids)
    }

    /// The server places it in the neighbour's group.
    fn create_near(&mut self, near: Oid, bytes: &[u8]) -> StorageResult<Oid> {
        ObjectTxn::create(self, GroupId::DEFAULT, Some(near), bytes)
    }

    fn read_range(&mut self, oid: Oid, offset: u64, buf: &mut [u8]) -> StorageResult<()> {
        ObjectTxn::read_range(self, oid, offset, buf)
    }

    fn len(&mut self, oid: Oid) -> StorageResult<u64> {
        ObjectTxn::len(self, oid)
    }

    fn update(&mut self, oid: Oid, bytes: &[u8]) -> StorageResult<()> {
        ObjectTxn::update(self, oid, bytes)
    }

    /// Kept by the client and sent with the changes; the server applies
    /// it at commit under the object's append lock
    /// (`ObjectTxn::append`).
    fn append(&mut self, oid: Oid, append: &Arc<ListAppend>) -> StorageResult<bool> {
        ObjectTxn::append(self, oid, append)
    }

    /// Never reached: an object client keeps every append (the server
    /// applies those it cannot keep).
    fn append_whole(&mut self, _oid: Oid, _append: &Arc<ListAppend>) -> StorageResult<bool> {
        Ok(false)
    }

    fn keeps_appends(&self) -> bool {
        true
    }

    /// Nothing: the server keeps the appends, and a read of the object
    /// there applies them.
    fn settle_appends(&mut self, _oid: Oid) -> StorageResult<()> {
        Ok(())
    }

    /// Nothing: the server applies them.
    fn apply_appends(&mut self) -> StorageResult<()> {
        Ok(())
    }

    /// Nothing to lock ahead: the server takes each append's lock at
    /// commit, in OID order (X for one it cannot keep).
    fn prepare_appends(&mut self, _oids: &[Oid]) -> StorageResult<()> {
        Ok(())
    }

    fn delete(&mut self, oid: Oid) -> StorageResult<()> {
        ObjectTxn::delete(self, oid)
    }

    fn run_method(
        &mut self,
        m: &crate::methods::Method,
        _meta: &crate::catalog::Meta,
        _cat: &crate::catalog::Catalog,
        _group: &dyn Fn(&str) -> crate::Result<GroupId>,
    ) -> crate::Result<crate::methods::Answer> {
        crate::methods::Answer::decode(&self.method(m.encode())?)
    }

    fn changed_pages(&self) -> Vec<PageId> {
        Vec::new()
    }

    fn commit(self) -> StorageResult<()> {
        ObjectTxn::commit(self)
    }

    fn abort(self) -> StorageResult<()> {
        ObjectTxn::abort(self)
    }

    /// An index lookup fetches what it finds in the same round trip: the
    /// object is read next.
    fn tree_get_each(
        &mut self,
        tree: &BTree,
        key: &[u8],
        first_only: bool,
        mut f: impl FnMut(&[u8]) -> bool,
    ) -> StorageResult<()> {
        let limit = if first_only {
            1
        } else {
            cairn_net::object_service::TREE_LIMIT_MAX
        };
        for v in self.tree_get_objects(tree.root(), key, limit)? {
            if !f(&v) {
                break;
            }
        }
        Ok(())
    }

    fn tree_bulk_load(
        &mut self,
        group: GroupId,
        pairs: Vec<(Vec<u8>, Vec<u8>)>,
        _changed: &mut Vec<PageId>,
    ) -> StorageResult<BTree> {
        let root = ObjectTxn::tree_create(self, group, false)?;
        for chunk in pairs.chunks(4096) {
            let ops = chunk
                .iter()
                .map(|(k, v)| TreeOp::Insert {
                    key: k.clone(),
                    value: v.clone(),
                })
                .collect();
            ObjectTxn::tree_apply(self, root, ops)?;
        }
        Ok(BTree::at_root(root))
    }

    fn tree_destroy(&mut self, tree: BTree, _changed: &mut Vec<PageId>) -> StorageResult<()> {
        ObjectTxn::tree_destroy(self, tree.root())
    }
}

impl StoreOps for ObjectTxn {
    fn create(&mut self, group: GroupId, bytes: &[u8]) -> StorageResult<Oid> {
        ObjectTxn::create(self, group, None, bytes)
    }

    fn catalog_remote(&mut self, trees: &[PageId], change: &[u8]) -> StorageResult<Option<Vec<u8>>> {
        ObjectTxn::catalog_change(self, trees, change).map(Some)
    }

    fn read(&mut self, oid: Oid) -> StorageResult<Vec<u8>> {
        ObjectTxn::read(self, oid)
    }

    fn read_with<R>(&mut self, oid: Oid, f: impl FnOnce(&[u8]) -> R) -> StorageResult<R> {
        ObjectTxn::read_with(self, oid, f)
    }

    fn scan_all(&mut self, group: GroupId) -> StorageResult<Vec<Oid>> {
        self.scan(group)
    }

    fn tree_open(&mut self, root: PageId) -> StorageResult<(BTree, Option<GroupId>)> {
        let group = ObjectTxn::tree_open(self, root)?;
        Ok((BTree::at_root(root), group))
    }

    fn tree_create(&mut self, group: GroupId, unique: bool) -> StorageResult<BTree> {
        ObjectTxn::tree_create(self, group, unique).map(BTree::at_root)
    }

    fn tree_get(&mut self, tree: &BTree, key: &[u8]) -> StorageResult<Option<Vec<u8>>> {
        Ok(ObjectTxn::tree_get(self, tree.root(), key, 1)?.into_iter().next())
    }

    fn tree_apply(&mut self, tree: &BTree, ops: Vec<TreeOp>, _changed: &mut Vec<PageId>) -> StorageResult<()> {
        ObjectTxn::tree_apply(self, tree.root(), ops)
    }

    fn tree_scan(
        &mut self,
        tree: &BTree,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        f: impl FnMut(&[u8], &[u8]) -> bool,
    ) -> StorageResult<()> {
        let own = |b: Bound<&[u8]>| b.map(|k| k.to_vec());
        self.tree_range(tree.root(), own(lo), own(hi), f)
    }
}
