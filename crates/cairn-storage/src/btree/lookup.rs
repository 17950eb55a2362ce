//! Reads: point lookups of the values under a key, the leaf a key lives in
//! and its entries, and opening range cursors. Nothing here changes a page.

use std::ops::Bound;

use super::node::Target;
use super::{check_level, with_node, BTree, Cursor, Direction};
use crate::access::PageAccess;
use crate::error::{Error, Result};
use crate::ids::PageId;

impl BTree {
    /// The leaf where `key` lives (or would live): its first entry at or
    /// after `key` is there, or (at the leaf's end) in its right sibling.
    pub fn leaf_of<A: PageAccess>(&self, a: &mut A, key: &[u8]) -> Result<PageId> {
        Ok(self.find_leaf(a, Target::Pair(key, &[]))?.0)
    }

    /// [`BTree::leaf_of`] for a lookup whose transaction may change the
    /// tree next: the leaf is locked to be read for update before it is
    /// read ([`PageAccess::lock_to_read_for_update`]: under page locking
    /// an update lock, which readers share and a second such lookup waits
    /// for, so two of them never both read a leaf and then both ask to
    /// change it).
    pub fn leaf_of_for_update<A: PageAccess>(&self, a: &mut A, key: &[u8]) -> Result<PageId> {
        Ok(self.find_leaf_locking(a, Target::Pair(key, &[]), true)?.0)
    }

    /// The leaf where `key` lives, as [`BTree::leaf_of`], found without
    /// reading the leaf itself: its parent's level says it is a leaf (a
    /// root that is a leaf is the answer, read as any root). A transaction
    /// that looks up several keys for update finds their leaves so and
    /// locks them all together, in one order, before it reads any (see
    /// [`crate::Txn::lock_leaves_for_update`]).
    pub fn leaf_page_of<A: PageAccess>(&self, a: &mut A, key: &[u8]) -> Result<PageId> {
        let t = Target::Pair(key, &[]);
        let mut id = self.root;
        let mut level: Option<u8> = None;
        loop {
            if level == Some(0) {
                return Ok(id);
            }
            let expect = level;
            let down = with_node(a, id, |n| {
                check_level(n, expect)?;
                if n.is_leaf() {
                    Ok(None)
                } else {
                    Ok(Some((n.child(n.child_index(&t)?)?, n.level)))
                }
            })?;
            match down {
                None => return Ok(id),
                Some((child, lvl)) => {
                    level = Some(lvl - 1);
                    id = child;
                }
            }
        }
    }

    /// Calls `f` on every entry `(key, value)` of `leaf` (a leaf of this
    /// tree, from [`BTree::leaf_of`]), in order. With the leaf's lock held,
    /// the entries stay exactly so until the transaction ends; the typed
    /// layer's index cache fills itself from them.
    pub fn leaf_entries<A: PageAccess>(&self, a: &mut A, leaf: PageId, mut f: impl FnMut(&[u8], &[u8])) -> Result<()> {
        with_node(a, leaf, |n| {
            if !n.is_leaf() {
                return Err(Error::corrupt(leaf, "expected a b-tree leaf, found an inner page"));
            }
            for i in 0..n.count {
                let (k, v) = n.entry(i)?;
                f(k, v);
            }
            Ok(())
        })
    }

    /// The first value stored under `key`, if any.
    pub fn get<A: PageAccess>(&self, a: &mut A, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let mut first = None;
        self.get_each(a, key, |v| {
            first = Some(v.to_vec());
            false
        })?;
        Ok(first)
    }

    /// Every value stored under `key`, in order.
    pub fn get_all<A: PageAccess>(&self, a: &mut A, key: &[u8]) -> Result<Vec<Vec<u8>>> {
        let mut out = Vec::new();
        self.get_each(a, key, |v| {
            out.push(v.to_vec());
            true
        })?;
        Ok(out)
    }

    /// Calls `f` on each value stored under `key`, in order, while it returns
    /// true; returns how many values it was called on. The point lookup:
    /// one descent, then a scan of the leaf (and its right siblings while
    /// they hold `key`), copying nothing.
    pub fn get_each<A: PageAccess>(&self, a: &mut A, key: &[u8], f: impl FnMut(&[u8]) -> bool) -> Result<usize> {
        let (leaf, idx) = self.find_leaf(a, Target::Pair(key, &[]))?;
        self.scan_key(a, leaf, idx, key, f)
    }

    /// [`BTree::get_each`] from `leaf`, the leaf [`BTree::leaf_of`] gave for
    /// `key` (no second descent).
    pub fn get_each_in<A: PageAccess>(
        &self,
        a: &mut A,
        leaf: PageId,
        key: &[u8],
        f: impl FnMut(&[u8]) -> bool,
    ) -> Result<usize> {
        let idx = with_node(a, leaf, |n| {
            if !n.is_leaf() {
                return Err(Error::corrupt(leaf, "expected a b-tree leaf, found an inner page"));
            }
            n.lower_bound(&Target::Pair(key, &[]))
        })?;
        self.scan_key(a, leaf, idx, key, f)
    }

    /// Calls `f` on the values of `key` from position `idx` of `first` on,
    /// following right siblings while they hold `key`.
    fn scan_key<A: PageAccess>(
        &self,
        a: &mut A,
        first: PageId,
        idx: usize,
        key: &[u8],
        mut f: impl FnMut(&[u8]) -> bool,
    ) -> Result<usize> {
        let (mut leaf, mut idx) = (first, idx);
        let mut seen: Vec<PageId> = Vec::new();
        let mut n = 0;
        loop {
            let next = with_node(a, leaf, |node| {
                if !node.is_leaf() {
                    return Err(Error::corrupt(leaf, "b-tree leaf chain reaches an inner page"));
                }
                for i in idx..node.count {
                    let (k, v) = node.entry(i)?;
                    if k != key {
                        return Ok(None);
                    }
                    n += 1;
                    if !f(v) {
                        return Ok(None);
                    }
                }
                Ok(Some(node.next).filter(|p| *p != PageId(0)))
            })?;
            let Some(next) = next else { return Ok(n) };
            // Only a run of one key spanning leaves gets here; a damaged
            // sibling chain that loops must not loop us.
            if seen.contains(&next) || next == first {
                return Err(Error::corrupt(
                    leaf,
                    format!("b-tree sibling chain loops back to page {next}"),
                ));
            }
            seen.push(leaf);
            leaf = next;
            idx = 0;
        }
    }

    /// A cursor over the entries whose keys lie in `[lo, hi]` (as bounded),
    /// in `dir` order. It holds no page between calls.
    pub fn range<A: PageAccess>(
        &self,
        a: &mut A,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        dir: Direction,
    ) -> Result<Cursor> {
        self.root_info(a)?;
        Ok(Cursor::new(*self, lo, hi, dir))
    }
}
