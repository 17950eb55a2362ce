//! [`StoreOps`]: the object and B+-tree operations the catalog and the
//! server-side methods ask of a transaction, and their implementation for
//! a page-based storage [`Txn`]. The typed layer's transactions implement
//! it too (passing each operation on to what they hold: a storage
//! transaction, or an object-server client's), so the catalog and the
//! methods run the same in every process.

use std::ops::Bound;

use cairn_storage::access::Recording;
use cairn_storage::btree::BTree;
use cairn_storage::record::object::ObjectSpace;
use cairn_storage::txn::{CommitCheck, TreeChange};
use cairn_storage::{GroupId, Oid, PageId, Txn};

type StorageResult<T> = cairn_storage::Result<T>;

/// One change of a B+-tree, applied in order with the others of a
/// [`StoreOps::tree_apply`]: the storage layer's [`TreeChange`], which a
/// page client's transaction sends as is to a server that runs its trees.
pub type TreeOp = TreeChange;

/// The object and B+-tree operations the catalog and the server-side
/// methods ask of a storage transaction: a page-based [`Txn`] runs them
/// itself (in this process, or on the server for an object-server
/// client's method), the typed layer's `Tx` passes them on to what it
/// holds.
pub trait StoreOps {
    /// Creates an object of `bytes` in `group`.
    fn create(&mut self, group: GroupId, bytes: &[u8]) -> StorageResult<Oid>;
    /// The object's bytes.
    fn read(&mut self, oid: Oid) -> StorageResult<Vec<u8>>;
    /// `f` of the object's bytes, read in place where the store can.
    fn read_with<R>(&mut self, oid: Oid, f: impl FnOnce(&[u8]) -> R) -> StorageResult<R>;
    /// The objects of `group`.
    fn scan_all(&mut self, group: GroupId) -> StorageResult<Vec<Oid>>;
    /// Opens the tree at `root`, checking it is one; with the group of its
    /// root page.
    fn tree_open(&mut self, root: PageId) -> StorageResult<(BTree, Option<GroupId>)>;
    /// Creates an empty tree in `group` (`unique`: one value per key).
    fn tree_create(&mut self, group: GroupId, unique: bool) -> StorageResult<BTree>;
    /// The first value of `key`.
    fn tree_get(&mut self, tree: &BTree, key: &[u8]) -> StorageResult<Option<Vec<u8>>>;
    /// Applies `ops` to `tree` in order; `changed` collects the pages a
    /// page-based transaction changed (the index cache's versions).
    fn tree_apply(&mut self, tree: &BTree, ops: Vec<TreeOp>, changed: &mut Vec<PageId>) -> StorageResult<()>;
    /// Calls `f` with each entry between `lo` and `hi` in key order until
    /// it says false.
    fn tree_scan(
        &mut self,
        tree: &BTree,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        f: impl FnMut(&[u8], &[u8]) -> bool,
    ) -> StorageResult<()>;
    /// Sends a catalog change (its bytes, [`crate::catalog_change`]) to
    /// the process that keeps the catalog, and returns its answer; `None`
    /// (the default) where this process keeps it and the caller applies
    /// the change itself. `trees` are the catalog's tree roots: a client
    /// that keeps lookups of them drops those the change made stale.
    fn catalog_remote(&mut self, trees: &[PageId], change: &[u8]) -> StorageResult<Option<Vec<u8>>> {
        let _ = (trees, change);
        Ok(None)
    }
    /// For a page client's transaction on the server: keeps `check` to be
    /// made at commit, when the client's image of its page arrives, and
    /// says true; false where the page is readable now (everywhere else).
    /// A catalog change naming what a page client made in the transaction
    /// (an object, an index tree) is checked this way.
    fn check_at_commit(&mut self, check: CommitCheck) -> bool {
        let _ = check;
        false
    }
}

impl StoreOps for Txn {
    fn create(&mut self, group: GroupId, bytes: &[u8]) -> StorageResult<Oid> {
        Txn::create(self, group, bytes)
    }

    fn read(&mut self, oid: Oid) -> StorageResult<Vec<u8>> {
        Txn::read(self, oid)
    }

    fn read_with<R>(&mut self, oid: Oid, f: impl FnOnce(&[u8]) -> R) -> StorageResult<R> {
        Txn::read_with(self, oid, f)
    }

    fn scan_all(&mut self, group: GroupId) -> StorageResult<Vec<Oid>> {
        Txn::scan_all(self, group)
    }

    fn tree_open(&mut self, root: PageId) -> StorageResult<(BTree, Option<GroupId>)> {
        let tree = BTree::open(self, root)?;
        Ok((tree, self.group_of_page(root)?))
    }

    fn tree_create(&mut self, group: GroupId, unique: bool) -> StorageResult<BTree> {
        BTree::create(self, group, unique)
    }

    fn tree_get(&mut self, tree: &BTree, key: &[u8]) -> StorageResult<Option<Vec<u8>>> {
        Txn::tree_get(self, tree, key)
    }

    fn tree_apply(&mut self, tree: &BTree, ops: Vec<TreeOp>, changed: &mut Vec<PageId>) -> StorageResult<()> {
        if self.locks_key_ranges(tree) {
            // Kept by the transaction (or by the server that runs the
            // tree, in one request) and applied at commit: no page of the
            // tree changes now, so `changed` stays as it is.
            return self.tree_apply_changes(tree, ops);
        }
        let mut rec = Recording {
            inner: self,
            pages: changed,
        };
        for op in &ops {
            match op {
                TreeOp::Insert { key, value } => {
                    tree.insert(&mut rec, key, value)?;
                }
                TreeOp::Delete { key, value } => {
                    tree.delete(&mut rec, key, value.as_deref())?;
                }
            }
        }
        Ok(())
    }

    fn tree_scan(
        &mut self,
        tree: &BTree,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        f: impl FnMut(&[u8], &[u8]) -> bool,
    ) -> StorageResult<()> {
        Txn::tree_scan(self, tree, lo, hi, f)
    }

    fn catalog_remote(&mut self, _trees: &[PageId], change: &[u8]) -> StorageResult<Option<Vec<u8>>> {
        Txn::catalog_change(self, change)
    }

    fn check_at_commit(&mut self, check: CommitCheck) -> bool {
        Txn::check_at_commit(self, check)
    }
}
