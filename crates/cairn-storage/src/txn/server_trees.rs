//! B+-trees a server runs for its client: a page-server client of a server
//! that locks key ranges.
//!
//! Under key-range locking a commit applies its tree changes to the
//! tree's pages under the tree's latch and no page lock (`keys.rs`). A
//! client that ran the tree code on pages itself would read a leaf under
//! a page lock no committer respects, and its image of a leaf would
//! overwrite the entries applied since it read it. So a client whose
//! backend has a [`TreeService`] never reads or writes the pages of a tree
//! it did not make: every change, lookup, range and destruction of such a
//! tree is sent to the server, which runs it in the client's transaction
//! there through the same key-range operations ([`Txn::tree_insert`],
//! [`Txn::tree_scan`], …) as an embedded transaction's, and the client's
//! COMMIT commits them with its pages in one batch. Those changes are
//! *logical*: the server verifies and applies them itself, to the tree as
//! it stands at commit, so a client cannot damage a shared tree, and
//! inserts of different keys do not wait for each other.
//!
//! A tree the transaction made itself (its root allocated or changed
//! privately) stays on pages, as under key-range locking anywhere: nobody
//! else reaches it before the commit.

use std::ops::Bound;
use std::sync::Arc;

use crate::btree::BTree;
use crate::error::{Error, Result};
use crate::ids::{PageId, TxnId};

use super::Txn;

/// A change to a B+-tree, as a [`TreeService`] sends it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TreeChange {
    /// Insert `(key, value)` (see [`BTree::insert`]).
    Insert {
        /// The key.
        key: Vec<u8>,
        /// The value.
        value: Vec<u8>,
    },
    /// Delete `(key, value)`, or every entry of `key` with `value` `None`
    /// (see [`BTree::delete`]).
    Delete {
        /// The key.
        key: Vec<u8>,
        /// The value, or `None` for all of the key's.
        value: Option<Vec<u8>>,
    },
}

/// A backend's server runs the B+-tree operations of its transactions
/// (see the module docs): each names the transaction by its id and the
/// tree by its root.
pub trait TreeService: Send + Sync {
    /// Applies `changes` to the tree at `root`, in order, in transaction
    /// `txn` at the server (kept there and applied at its commit).
    fn apply(&self, txn: TxnId, root: PageId, changes: Vec<TreeChange>) -> Result<()>;
    /// Calls `f` with each entry of the tree at `root` whose key lies
    /// between `lo` and `hi`, in key order, until it says false, as
    /// transaction `txn` reads them at the server (locking what it reads).
    fn scan(
        &self,
        txn: TxnId,
        root: PageId,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<()>;
    /// Calls `f` with each value of `key` in the tree at `root` until it
    /// says false, as transaction `txn` looks it up at the server: the
    /// locks that guard a lookup's answer (S on the gap below each value
    /// found and past the last), not the tree's end past a found key.
    fn get(&self, txn: TxnId, root: PageId, key: &[u8], f: &mut dyn FnMut(&[u8]) -> bool) -> Result<()>;
    /// The first value of each of `keys` in the tree at `root` (`None`
    /// where a key has none), looked up together in transaction `txn` at
    /// the server, each locked as [`TreeService::get`] locks it: lookups
    /// for update, whose objects the caller locks next.
    fn get_firsts(&self, txn: TxnId, root: PageId, keys: &[Vec<u8>]) -> Result<Vec<Option<Vec<u8>>>>;
    /// Destroys the tree at `root` in transaction `txn` at the server.
    fn destroy(&self, txn: TxnId, root: PageId) -> Result<()>;
}

impl Txn {
    /// The server that runs `tree`'s operations for this transaction, if
    /// one does: its backend has a [`TreeService`] and the tree is one the
    /// transaction reads and changes under key-range locking (not one it
    /// made itself, not at a snapshot).
    pub(super) fn tree_server(&self, tree: &BTree) -> Option<Arc<dyn super::Backend>> {
        (self.db.tree_service().is_some() && self.locks_key_ranges(tree)).then(|| Arc::clone(&self.db))
    }

    /// The server that answers this transaction's reads of `tree`: the one
    /// that runs its operations ([`Txn::tree_server`]), or, at a snapshot,
    /// the backend's server for a tree the transaction did not make — it
    /// looks up and scans at the snapshot there, and a client may keep the
    /// answers under rights, where reading the tree's pages here would
    /// fetch each of them (a key-range server grants no right to cache
    /// one).
    pub(super) fn tree_read_server(&self, tree: &BTree) -> Option<Arc<dyn super::Backend>> {
        self.tree_server(tree).or_else(|| {
            let root = tree.root();
            let snapshot_read = self.snapshot.is_some()
                && self.db.tree_service().is_some()
                && !self.allocated.contains(&root)
                && !self.pages.contains(root);
            snapshot_read.then(|| Arc::clone(&self.db))
        })
    }

    /// Applies `changes` to `tree` in order: at the server that runs its
    /// operations (one request), else one by one, as
    /// [`Txn::tree_insert`] and [`Txn::tree_delete`] do. A failure at the
    /// server dooms the transaction: the server may hold part of them.
    pub fn tree_apply_changes(&mut self, tree: &BTree, changes: Vec<TreeChange>) -> Result<()> {
        self.check_active()?;
        if changes.is_empty() {
            return Ok(());
        }
        if let Some(db) = self.tree_server(tree) {
            let service = db.tree_service().ok_or_else(no_service)?;
            self.key_trees.at_server = true;
            self.changes += 1;
            return service
                .apply(self.id, tree.root(), changes)
                .inspect_err(|e| self.doom(&Error::Internal(format!("a B+-tree change at the server failed: {e}"))));
        }
        for change in changes {
            match change {
                TreeChange::Insert { key, value } => {
                    self.tree_insert(tree, &key, &value)?;
                }
                TreeChange::Delete { key, value } => {
                    self.tree_delete(tree, &key, value.as_deref())?;
                }
            }
        }
        Ok(())
    }

    /// [`Txn::tree_scan`] at the server that runs `tree`'s operations:
    /// `None` if none does (the caller scans here).
    pub(super) fn scan_at_server(
        &mut self,
        tree: &BTree,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Option<Result<()>> {
        let db = self.tree_read_server(tree)?;
        let service = db.tree_service()?;
        Some(service.scan(self.id, tree.root(), lo, hi, f))
    }

    /// [`Txn::tree_get_each`] at the server that runs `tree`'s
    /// operations: `None` if none does.
    pub(super) fn get_at_server(
        &mut self,
        tree: &BTree,
        key: &[u8],
        f: &mut dyn FnMut(&[u8]) -> bool,
    ) -> Option<Result<()>> {
        let db = self.tree_read_server(tree)?;
        let service = db.tree_service()?;
        Some(service.get(self.id, tree.root(), key, f))
    }

    /// The first value of each of `keys` in `tree`, looked up together at
    /// the server that runs the tree's operations (one request for many
    /// keys, locked as [`Txn::tree_get_each`] locks each): `None` if no
    /// server does (the caller looks each up here).
    pub fn tree_firsts_at_server(&mut self, tree: &BTree, keys: &[Vec<u8>]) -> Option<Result<Vec<Option<Vec<u8>>>>> {
        let db = self.tree_server(tree)?;
        let service = db.tree_service()?;
        if let Err(e) = self.check_active() {
            return Some(Err(e));
        }
        Some(service.get_firsts(self.id, tree.root(), keys))
    }

    /// [`Txn::tree_destroy`] at the server that runs `tree`'s operations:
    /// `None` if none does.
    pub(super) fn destroy_at_server(&mut self, tree: &BTree) -> Option<Result<()>> {
        let db = self.tree_server(tree)?;
        let service = db.tree_service()?;
        self.key_trees.at_server = true;
        self.changes += 1;
        Some(service.destroy(self.id, tree.root()))
    }
}

fn no_service() -> Error {
    Error::Internal("the backend runs no B+-tree operations".into())
}
