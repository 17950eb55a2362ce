//! A page-based B+-tree: variable-length keys and values, unique or not, point
//! and range lookups in both directions, bulk load, deletes that reclaim space.
//!
//! It backs user indexes, the schema catalog and named roots. Every page is
//! read and changed through [`PageAccess`], so inside a transaction
//! ([`crate::txn::Txn`]) the tree is transactional for free: page locks, redo
//! logging, recovery and abort. The tree keeps no page in memory between
//! calls; a [`BTree`] is just its root page id.
//!
//! **The root page never moves.** When the root splits, its contents move into
//! two new children and the root becomes their parent; when the root is left
//! with one child, the child's contents move up into it. An index is named by
//! its root page for its whole life, and the root alone carries the tree's
//! flags (unique or not) and its group (where new pages are allocated).
//!
//! # Order
//!
//! Entries are `(key, value)` pairs ordered by key, then value, both as bytes.
//! A unique tree holds at most one entry per key; a non-unique one holds
//! distinct pairs. Inner nodes hold *separators*, also pairs: child `i` holds
//! the entries `e` with `sep[i] <= e < sep[i+1]` (with `sep[0]` and
//! `sep[count+1]` the bounds inherited from the parent). A separator is the
//! shortest prefix of the right node's first key that is above the left
//! node's last key, with an empty value; only when both share a key (in a
//! non-unique tree) is it the right node's first pair in full. So the
//! separators of a unique tree always have empty values.
//!
//! # Node layout
//!
//! Leaves (page type 8) and inner nodes (page type 9) share one layout:
//!
//! ```text
//!  offset            size  field
//!  0                 24    common page header (page::HEADER_SIZE)
//!  24                1     level        0 = leaf; a child is one level below its parent
//!  25                1     flags        bit 0 ROOT, bit 1 UNIQUE (root only); others 0
//!  26                2     count        cells (leaf: entries; inner: separators)
//!  28                4     heap_start   lowest cell byte; page_size when there is no cell
//!  32                4     garbage      heap bytes held by no cell (zeroed holes)
//!  36                4     prev         leaf: left sibling, 0 = none; inner: 0
//!  40                4     next         leaf: right sibling, 0 = none; inner: 0
//!  44                4     child0       inner: child below the first separator; leaf: 0
//!  48                4     group        root: group of the tree's pages; others: 0
//!  52                4     reserved     0
//!  56                2·n   slot directory: u16 offset of cell i, cells sorted by (key, value)
//!  56 + 2·n          ..    free gap (zero)
//!  heap_start        ..    cells, growing down from the page end, in any order,
//!                          with zeroed holes left by deletes
//!
//!  leaf cell                      inner cell
//!  0  2  key length               0  2  key length
//!  2  2  value length             2  2  value length
//!  4  .. key, then value          4  4  child (entries at or above this separator)
//!                                 8  .. key, then value
//! ```
//!
//! `key.len() + value.len()` is at most [`key_value_max`] (1000 bytes on
//! 4 KiB pages): four of the largest inner cells fit one node, so splitting an
//! overfull node always leaves two halves that fit. Larger entries are
//! [`Error::LimitExceeded`] and change nothing.
//!
//! # Invariants (verified by [`BTree::check`]; [`check_page`] does one page)
//!
//! - Page types match levels; a child is exactly one level below its parent;
//!   only the root has the ROOT flag, and every page is reached once.
//! - Cells lie in the heap, are disjoint, and `garbage` counts the rest; the
//!   gap and holes are zero (a page image never carries deleted bytes).
//! - Entries increase strictly within and across leaves (by key alone in a
//!   unique tree); every cell of a subtree lies within its separators.
//! - The leaves form one doubly linked list in key order, first `prev` and
//!   last `next` being 0.
//! - A leaf other than the root is never empty; an inner root has at least one
//!   separator (two children).
//!
//! # Deletes
//!
//! A delete removes the cell; then, bottom up along the search path:
//!
//! - an **empty** non-root leaf is unlinked from its siblings, removed from its
//!   parent and freed; a parent that so loses its only child goes the same way;
//! - a node **under a quarter full** is merged with a neighbour under the same
//!   parent (the right one, else the left one) if both fit one page: the right
//!   node's cells (after the separator between them, pulled down, for inner
//!   nodes) move into the left one, which is freed; the parent loses one
//!   separator and is examined in turn;
//! - finally an inner root with a single child takes that child's contents
//!   (the tree gets one level lower) until it has two children or is a leaf.
//!
//! There is no borrowing from a neighbour that is too full to merge with.
//! Worst case: a node keeps as little as one entry for as long as its
//! same-parent neighbours are too full to take it, so a level whose nodes
//! alternate between one entry and full uses about twice the pages its
//! entries need, and a node at a parent's edge can stay tiny beside a tiny
//! cousin under the next parent. Empty pages are always given back, and the
//! height never exceeds what the largest size the tree ever reached needed.
//! Merges never make a parent larger, so a delete never splits and never
//! allocates.
//!
//! # Inserts
//!
//! An entry goes into the leaf whose range holds it; a full leaf splits at the
//! byte midpoint (or, when appending past the last entry of the whole tree,
//! keeps everything and moves only the new entry right, so ascending loads
//! fill pages), the new right node is allocated near it, and its separator
//! goes into the parent, which may split in turn. A full root moves its halves
//! into two new pages and stays the root.
//!
//! # Cursors
//!
//! A [`Cursor`] holds no page between calls: it remembers the leaf, the index
//! and the pair it returned last. The next call rereads that leaf; if the pair
//! is no longer at that place (the tree changed), it searches from the root
//! for the pair after it. Every step checks that entries keep strictly
//! increasing (or decreasing), so a damaged sibling chain can neither loop nor
//! repeat entries.
//!
//! Nothing read from a page is trusted: every offset, length, count, level and
//! pointer is checked before use, and damage is [`Error::Corrupt`] naming the
//! page. No page content makes this module panic or loop forever.

mod bulk;
mod check;
mod cursor;
mod node;

mod leaves;
#[cfg(test)]
mod tests;

use std::ops::Bound;

use crate::access::PageAccess;
use crate::error::{Error, Result};
use crate::ids::{GroupId, PageId};
use crate::page::PageType;

pub use self::cursor::{Cursor, Direction};
pub use self::node::{check_page, is_root_page, key_value_max, page_links, PageLinks, LEVEL_MAX, NODE_HEADER_SIZE};

use self::node::{Header, Node, Target, FLAG_ROOT, FLAG_UNIQUE, SLOT_SIZE};

/// A B+-tree, named by its root page (which never moves).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BTree {
    root: PageId,
}

/// What the root page says about the tree.
#[derive(Clone, Copy, Debug)]
struct RootInfo {
    unique: bool,
    group: GroupId,
}

/// One step of a search path: an inner node and the child index taken.
#[derive(Clone, Copy, Debug)]
struct Step {
    page: PageId,
    child: usize,
    /// The child taken was the node's last.
    last: bool,
}

/// Where a search from the root ended.
#[derive(Clone, Debug)]
struct Descent {
    /// Inner nodes from the root down.
    path: Vec<Step>,
    leaf: PageId,
    /// The leaf's lower bound for the target (may equal `count`).
    idx: usize,
    root: RootInfo,
}

fn page_type_of(level: u8) -> PageType {
    if level == 0 {
        PageType::BTreeLeaf
    } else {
        PageType::BTreeInner
    }
}

/// Prints a key for an error message: as text if it is printable UTF-8, else hex.
pub(crate) fn show_key(key: &[u8]) -> String {
    match std::str::from_utf8(key) {
        Ok(s) if !s.chars().any(char::is_control) => format!("{s:?}"),
        _ => {
            let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
            format!("0x{hex}")
        }
    }
}

fn check_size(page_size: usize, key: &[u8], value: &[u8]) -> Result<()> {
    let limit = key_value_max(page_size);
    let len = key.len() + value.len();
    if len > limit {
        return Err(Error::LimitExceeded {
            what: "b-tree key and value bytes",
            value: len as u64,
            limit: limit as u64,
        });
    }
    Ok(())
}

/// The separator between a node ending with `left` and the next starting with
/// `right` (`left < right`): the shortest prefix of `right`'s key above
/// `left`'s key, or `right` itself when both have the same key.
fn separator(left: (&[u8], &[u8]), right: (&[u8], &[u8])) -> (Vec<u8>, Vec<u8>) {
    debug_assert!(left < right);
    if left.0 < right.0 {
        let common = left.0.iter().zip(right.0).take_while(|(a, b)| a == b).count();
        (right.0[..(common + 1).min(right.0.len())].to_vec(), Vec::new())
    } else {
        (right.0.to_vec(), right.1.to_vec())
    }
}

/// Reads page `id` as a node and runs `f` on it.
fn with_node<A: PageAccess, R>(a: &mut A, id: PageId, f: impl FnOnce(&Node<'_>) -> Result<R>) -> Result<R> {
    a.read(id, |b| Node::parse(b, id).and_then(|n| f(&n)))?
}

/// On the way down from the root: `n` is the root when `expect` is `None`,
/// else a non-root node at level `expect` (so a damaged tree cannot loop).
fn check_level(n: &Node<'_>, expect: Option<u8>) -> Result<()> {
    match expect {
        None if !n.is_root() => Err(Error::corrupt(n.id, "page is not the root of a b-tree")),
        Some(l) if n.level != l => Err(Error::corrupt(
            n.id,
            format!("b-tree child should be at level {l} but is at level {}", n.level),
        )),
        Some(_) if n.is_root() => Err(Error::corrupt(n.id, "b-tree page below the root is marked as a root")),
        _ => Ok(()),
    }
}

/// A node's header and a copy of its cells.
fn load_node<A: PageAccess>(a: &mut A, id: PageId) -> Result<(Header, Vec<Vec<u8>>, usize)> {
    with_node(a, id, |n| Ok((n.header(), n.cells()?, n.used_bytes())))
}

fn write_node<A: PageAccess>(a: &mut A, id: PageId, h: &Header, cells: &[Vec<u8>]) -> Result<()> {
    a.modify(id, |b| node::build(b, id, h, cells))
}

impl BTree {
    /// Creates an empty tree (a root leaf) in `group`.
    pub fn create<A: PageAccess>(a: &mut A, group: GroupId, unique: bool) -> Result<BTree> {
        let root = a.allocate(group, None, PageType::BTreeLeaf)?;
        let h = Header {
            level: 0,
            flags: FLAG_ROOT | if unique { FLAG_UNIQUE } else { 0 },
            prev: PageId(0),
            next: PageId(0),
            child0: PageId(0),
            group,
        };
        write_node(a, root, &h, &[])?;
        Ok(BTree { root })
    }

    /// Opens the tree whose root is `root`; a page that is not a b-tree root
    /// is [`Error::Corrupt`].
    pub fn open<A: PageAccess>(a: &mut A, root: PageId) -> Result<BTree> {
        let t = BTree { root };
        t.root_info(a)?;
        Ok(t)
    }

    /// A handle naming the tree whose root is `root`, without reading it:
    /// for a client whose server runs the tree's operations (an object
    /// server opens and checks the tree for each one).
    pub fn at_root(root: PageId) -> BTree {
        BTree { root }
    }

    /// The root page, which names the tree for its whole life.
    pub fn root(&self) -> PageId {
        self.root
    }

    /// True if the tree holds at most one entry per key.
    pub fn is_unique<A: PageAccess>(&self, a: &mut A) -> Result<bool> {
        Ok(self.root_info(a)?.unique)
    }

    fn root_info<A: PageAccess>(&self, a: &mut A) -> Result<RootInfo> {
        with_node(a, self.root, |n| {
            if !n.is_root() {
                return Err(Error::corrupt(self.root, "page is not the root of a b-tree"));
            }
            Ok(RootInfo {
                unique: n.is_unique(),
                group: n.group,
            })
        })
    }

    /// Searches from the root for the leaf position of `t`, checking levels
    /// and the root flag on the way down (so a damaged tree cannot loop).
    /// Descends to the leaf for `t`. With `for_update`, the leaf is locked
    /// for update before it is read (its parent's level says it is a leaf),
    /// so concurrent inserters into one leaf queue instead of deadlocking on
    /// a shared-to-exclusive upgrade.
    fn descend<A: PageAccess>(&self, a: &mut A, t: Target<'_>, for_update: bool) -> Result<Descent> {
        let mut path = Vec::new();
        let mut id = self.root;
        let mut level = None;
        let mut root = None;
        loop {
            let expect = level;
            if for_update && expect == Some(0) {
                a.lock_for_update(id)?;
            }
            let step = with_node(a, id, |n| {
                check_level(n, expect)?;
                let info = RootInfo {
                    unique: n.is_unique(),
                    group: n.group,
                };
                if n.is_leaf() {
                    Ok((info, None, n.lower_bound(&t)?, n.level))
                } else {
                    let i = n.child_index(&t)?;
                    Ok((info, Some((n.child(i)?, i, i == n.count)), 0, n.level))
                }
            })?;
            let (info, down, idx, lvl) = step;
            if root.is_none() {
                root = Some(info);
            }
            match down {
                None => {
                    return Ok(Descent {
                        path,
                        leaf: id,
                        idx,
                        root: root.unwrap_or(info),
                    })
                }
                Some((child, i, last)) => {
                    path.push(Step {
                        page: id,
                        child: i,
                        last,
                    });
                    level = Some(lvl - 1);
                    id = child;
                }
            }
        }
    }

    /// The leaf where `key` lives (or would live): its first entry at or
    /// after `key` is there, or (at the leaf's end) in its right sibling.
    pub fn leaf_of<A: PageAccess>(&self, a: &mut A, key: &[u8]) -> Result<PageId> {
        Ok(self.find_leaf(a, Target::Pair(key, &[]))?.0)
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

    /// The leaf position of `t`, for a read: [`BTree::descend`]'s checks
    /// without recording the path.
    fn find_leaf<A: PageAccess>(&self, a: &mut A, t: Target<'_>) -> Result<(PageId, usize)> {
        let mut id = self.root;
        let mut level: Option<u8> = None;
        loop {
            let expect = level;
            let (down, idx, lvl) = with_node(a, id, |n| {
                check_level(n, expect)?;
                if n.is_leaf() {
                    Ok((None, n.lower_bound(&t)?, 0))
                } else {
                    Ok((Some(n.child(n.child_index(&t)?)?), 0, n.level))
                }
            })?;
            match down {
                None => return Ok((id, idx)),
                Some(child) => {
                    level = Some(lvl - 1);
                    id = child;
                }
            }
        }
    }

    /// Inserts `(key, value)`. A unique tree refuses a key it holds
    /// ([`Error::DuplicateKey`]); a non-unique tree returns `Ok(false)` for a
    /// pair it holds. Entries over [`key_value_max`] are
    /// [`Error::LimitExceeded`]; nothing changes on any error.
    pub fn insert<A: PageAccess>(&self, a: &mut A, key: &[u8], value: &[u8]) -> Result<bool> {
        check_size(a.page_size(), key, value)?;
        let unique = self.root_info(a)?.unique;
        let t = if unique {
            Target::Pair(key, &[])
        } else {
            Target::Pair(key, value)
        };
        let d = self.descend(a, t, true)?;
        let at = d.idx;
        let found = with_node(a, d.leaf, |n| {
            if at < n.count {
                let (k, v) = n.entry(at)?;
                Ok(Some((k == key, v == value)))
            } else {
                Ok(None)
            }
        })?;
        match found {
            Some((true, _)) if unique => {
                return Err(Error::DuplicateKey {
                    root: self.root,
                    key: show_key(key),
                })
            }
            Some((true, true)) => return Ok(false),
            _ => {}
        }
        self.insert_cell(a, d, node::leaf_cell(key, value))?;
        Ok(true)
    }

    /// Puts `cell` at the descent's position, splitting nodes upward as needed.
    fn insert_cell<A: PageAccess>(&self, a: &mut A, d: Descent, cell: Vec<u8>) -> Result<()> {
        let Descent {
            mut path, leaf, idx, ..
        } = d;
        let group = d.root.group;
        let (mut id, mut pos, mut cell) = (leaf, idx, cell);
        loop {
            if a.modify(id, |b| node::insert_cell(b, id, pos, &cell))? {
                return Ok(());
            }
            let (h, mut cells, _) = load_node(a, id)?;
            if pos > cells.len() {
                return Err(Error::corrupt(id, "b-tree node changed under an insert"));
            }
            cells.insert(pos, cell);
            let rightmost = if h.level == 0 {
                h.next == PageId(0)
            } else {
                path.iter().all(|s| s.last)
            };
            let append = rightmost && pos + 1 == cells.len();
            let split = split_cells(id, &h, cells, append, a.page_size())?;
            let Some(parent) = path.pop() else {
                return self.split_root(a, &h, split);
            };
            let ty = page_type_of(h.level);
            let right = a.allocate(group, Some(id), ty)?;
            let mut lh = h;
            let mut rh = Header {
                level: h.level,
                flags: 0,
                prev: PageId(0),
                next: PageId(0),
                child0: split.right_child0,
                group: GroupId(0),
            };
            if h.level == 0 {
                lh.next = right;
                rh.prev = id;
                rh.next = h.next;
                if h.next != PageId(0) {
                    let n = h.next;
                    a.modify(n, |b| node::set_prev(b, n, right))?;
                }
            }
            write_node(a, right, &rh, &split.right)?;
            write_node(a, id, &lh, &split.left)?;
            cell = node::inner_cell(&split.sep.0, &split.sep.1, right);
            id = parent.page;
            pos = parent.child;
        }
    }

    /// Splits the full root: its halves go into two new pages and the root
    /// becomes their parent, one level higher.
    fn split_root<A: PageAccess>(&self, a: &mut A, h: &Header, split: Split) -> Result<()> {
        if h.level >= LEVEL_MAX {
            return Err(Error::LimitExceeded {
                what: "b-tree height",
                value: u64::from(h.level) + 1,
                limit: u64::from(LEVEL_MAX),
            });
        }
        let ty = page_type_of(h.level);
        let left = a.allocate(h.group, Some(self.root), ty)?;
        let right = a.allocate(h.group, Some(left), ty)?;
        let leaf = h.level == 0;
        let lh = Header {
            level: h.level,
            flags: 0,
            prev: PageId(0),
            next: if leaf { right } else { PageId(0) },
            child0: h.child0,
            group: GroupId(0),
        };
        let rh = Header {
            level: h.level,
            flags: 0,
            prev: if leaf { left } else { PageId(0) },
            next: PageId(0),
            child0: split.right_child0,
            group: GroupId(0),
        };
        write_node(a, left, &lh, &split.left)?;
        write_node(a, right, &rh, &split.right)?;
        let root = Header {
            level: h.level + 1,
            flags: h.flags,
            prev: PageId(0),
            next: PageId(0),
            child0: left,
            group: h.group,
        };
        write_node(
            a,
            self.root,
            &root,
            &[node::inner_cell(&split.sep.0, &split.sep.1, right)],
        )
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

    /// Deletes `(key, value)`, or with `value` `None` every entry of `key`;
    /// returns how many entries were removed.
    pub fn delete<A: PageAccess>(&self, a: &mut A, key: &[u8], value: Option<&[u8]>) -> Result<usize> {
        match value {
            Some(v) => Ok(usize::from(self.delete_pair(a, key, v)?)),
            None => {
                let mut n = 0;
                for v in self.get_all(a, key)? {
                    n += usize::from(self.delete_pair(a, key, &v)?);
                }
                Ok(n)
            }
        }
    }

    fn delete_pair<A: PageAccess>(&self, a: &mut A, key: &[u8], value: &[u8]) -> Result<bool> {
        let unique = self.root_info(a)?.unique;
        let t = if unique {
            Target::Pair(key, &[])
        } else {
            Target::Pair(key, value)
        };
        let d = self.descend(a, t, true)?;
        let at = d.idx;
        let hit = with_node(a, d.leaf, |n| Ok(at < n.count && n.entry(at)? == (key, value)))?;
        if !hit {
            return Ok(false);
        }
        let leaf = d.leaf;
        let left = a.modify(leaf, |b| node::remove_cell(b, leaf, at))?;
        self.rebalance(a, d.path, leaf, left == 0)?;
        Ok(true)
    }

    /// Restores the invariants bottom up after a cell left node `id` (see the
    /// module docs, "Deletes"). `dead` says the node has no entries (leaf)
    /// or no children (inner) and must go.
    fn rebalance<A: PageAccess>(&self, a: &mut A, mut path: Vec<Step>, mut id: PageId, mut dead: bool) -> Result<()> {
        let cap = node::capacity(a.page_size());
        while let Some(parent) = path.pop() {
            let p = parent.page;
            let siblings = with_node(a, p, |n| Ok(n.count + 1))?;
            if dead {
                let (h, _, _) = load_node(a, id)?;
                if h.level == 0 {
                    unlink_leaf(a, &h)?;
                }
                a.free(id)?;
                if siblings == 1 {
                    id = p;
                    continue;
                }
                remove_child(a, p, parent.child)?;
                dead = false;
                id = p;
                continue;
            }
            let used = with_node(a, id, |n| Ok(n.used_bytes()))?;
            if used >= cap / 4 || !self.try_merge(a, p, parent.child, siblings, cap)? {
                break;
            }
            id = p;
        }
        if dead && id == self.root {
            // An inner root that lost its last child (only a damaged tree can
            // get here) becomes an empty leaf; an empty root leaf is normal.
            let (h, _, _) = load_node(a, id)?;
            if h.level == 0 {
                return Ok(());
            }
            let h = Header {
                level: 0,
                prev: PageId(0),
                next: PageId(0),
                child0: PageId(0),
                ..h
            };
            write_node(a, id, &h, &[])?;
        }
        self.collapse_root(a)
    }

    /// Merges child `ci` of `parent` with a neighbour if both fit one page.
    fn try_merge<A: PageAccess>(
        &self,
        a: &mut A,
        parent: PageId,
        ci: usize,
        siblings: usize,
        cap: usize,
    ) -> Result<bool> {
        let mut pairs = Vec::with_capacity(2);
        if ci + 1 < siblings {
            pairs.push(ci);
        }
        if ci > 0 {
            pairs.push(ci - 1);
        }
        for li in pairs {
            let (l, r, sep) = with_node(a, parent, |n| {
                let (k, v) = n.entry(li)?;
                Ok((n.child(li)?, n.child(li + 1)?, (k.to_vec(), v.to_vec())))
            })?;
            let (lh, lcells, lused) = load_node(a, l)?;
            let (rh, rcells, rused) = load_node(a, r)?;
            if lh.level != rh.level {
                return Err(Error::corrupt(parent, "b-tree children at different levels"));
            }
            let leaf = lh.level == 0;
            if leaf && (lh.next != r || rh.prev != l) {
                return Err(Error::corrupt(
                    l,
                    format!("b-tree leaf siblings {l} and {r} are not linked"),
                ));
            }
            let pulled = (!leaf).then(|| node::inner_cell(&sep.0, &sep.1, rh.child0));
            let extra = pulled.as_ref().map_or(0, |c| SLOT_SIZE + c.len());
            if lused + rused + extra > cap {
                continue;
            }
            let mut cells = lcells;
            cells.extend(pulled);
            cells.extend(rcells);
            let mut h = lh;
            if leaf {
                h.next = rh.next;
                if rh.next != PageId(0) {
                    let n = rh.next;
                    a.modify(n, |b| node::set_prev(b, n, l))?;
                }
            }
            write_node(a, l, &h, &cells)?;
            a.free(r)?;
            a.modify(parent, |b| node::remove_cell(b, parent, li))?;
            return Ok(true);
        }
        Ok(false)
    }

    /// While the root is an inner node with one child, moves the child's
    /// contents into the root and frees the child.
    fn collapse_root<A: PageAccess>(&self, a: &mut A) -> Result<()> {
        loop {
            let (h, count) = with_node(a, self.root, |n| Ok((n.header(), n.count)))?;
            if h.level == 0 || count > 0 {
                return Ok(());
            }
            let child = h.child0;
            let (ch, cells, _) = load_node(a, child)?;
            if ch.level + 1 != h.level || ch.flags != 0 {
                return Err(Error::corrupt(
                    child,
                    "b-tree child of the root has the wrong level or flags",
                ));
            }
            if ch.prev != PageId(0) || ch.next != PageId(0) {
                return Err(Error::corrupt(child, "the only leaf of a b-tree has siblings"));
            }
            let nh = Header {
                level: ch.level,
                flags: h.flags,
                prev: PageId(0),
                next: PageId(0),
                child0: ch.child0,
                group: h.group,
            };
            write_node(a, self.root, &nh, &cells)?;
            a.free(child)?;
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

    /// Builds a tree from entries sorted by (key, value), filling pages to
    /// about 90 % bottom up. Unsorted input is [`Error::InvalidArgument`], a
    /// repeated key in a unique tree [`Error::DuplicateKey`]; on any error
    /// the pages allocated so far are given back.
    pub fn bulk_load<A: PageAccess, I: IntoIterator<Item = (Vec<u8>, Vec<u8>)>>(
        a: &mut A,
        group: GroupId,
        unique: bool,
        sorted: I,
    ) -> Result<BTree> {
        bulk::load(a, group, unique, sorted)
    }

    /// Every page of the tree, children before parents, the root last
    /// (levels checked and no page reached twice, so a damaged tree is an
    /// error, never a loop).
    pub fn pages<A: PageAccess>(&self, a: &mut A) -> Result<Vec<PageId>> {
        check::pages(self, a)
    }

    /// Frees every page of the tree, the root included.
    pub fn destroy<A: PageAccess>(self, a: &mut A) -> Result<()> {
        let pages = check::pages(&self, a)?;
        for p in pages {
            a.free(p)?;
        }
        Ok(())
    }

    /// The number of entries (by walking the leaves).
    pub fn len<A: PageAccess>(&self, a: &mut A) -> Result<u64> {
        check::count(self, a)
    }

    /// True if the tree holds no entry.
    pub fn is_empty<A: PageAccess>(&self, a: &mut A) -> Result<bool> {
        let mut c = self.range(a, Bound::Unbounded, Bound::Unbounded, Direction::Forward)?;
        Ok(c.next(a)?.is_none())
    }

    /// Walks the whole tree and verifies every invariant of the module docs;
    /// the first violation is [`Error::Corrupt`] naming its page.
    pub fn check<A: PageAccess>(&self, a: &mut A) -> Result<()> {
        check::check_tree(self, a)
    }
}

/// Unlinks a leaf (with header `h`) from its siblings.
fn unlink_leaf<A: PageAccess>(a: &mut A, h: &Header) -> Result<()> {
    let (prev, next) = (h.prev, h.next);
    if prev != PageId(0) {
        a.modify(prev, |b| node::set_next(b, prev, next))?;
    }
    if next != PageId(0) {
        a.modify(next, |b| node::set_prev(b, next, prev))?;
    }
    Ok(())
}

/// Removes child `ci` (and the separator that goes with it) from inner node
/// `p`, which has at least two children.
fn remove_child<A: PageAccess>(a: &mut A, p: PageId, ci: usize) -> Result<()> {
    a.modify(p, |b| {
        if ci == 0 {
            let first = Node::parse(b, p)?.child(1)?;
            node::set_child0(b, p, first)?;
            node::remove_cell(b, p, 0)
        } else {
            node::remove_cell(b, p, ci - 1)
        }
    })?;
    Ok(())
}

/// How an overfull node's cells are divided.
struct Split {
    left: Vec<Vec<u8>>,
    right: Vec<Vec<u8>>,
    /// The separator that goes up.
    sep: (Vec<u8>, Vec<u8>),
    /// Inner nodes: the right node's first child.
    right_child0: PageId,
}

/// Divides the cells of an overfull node (`cells` already holds the new one):
/// at the byte midpoint, or when `append` leaving the old cells left.
fn split_cells(id: PageId, h: &Header, mut cells: Vec<Vec<u8>>, append: bool, page_size: usize) -> Result<Split> {
    let cap = node::capacity(page_size);
    let leaf = h.level == 0;
    let sizes: Vec<usize> = cells.iter().map(|c| SLOT_SIZE + c.len()).collect();
    let total: usize = sizes.iter().sum();
    // A leaf splits at m: left = [..m], right = [m..]; an inner node moves
    // cell m up: left = [..m], right = [m+1..].
    let (lo, hi) = if leaf {
        (1, cells.len())
    } else {
        (1, cells.len().saturating_sub(1))
    };
    let mut best: Option<(usize, usize)> = None;
    let mut left_bytes = 0;
    for (m, &size) in sizes.iter().enumerate().take(hi) {
        if m >= lo {
            let right_bytes = total - left_bytes - if leaf { 0 } else { sizes[m] };
            if left_bytes <= cap && right_bytes <= cap {
                let score = if append {
                    cap - left_bytes
                } else {
                    left_bytes.max(right_bytes)
                };
                if best.is_none_or(|(_, s)| score <= s) {
                    best = Some((m, score));
                }
            }
        }
        left_bytes += size;
    }
    let Some((m, _)) = best else {
        return Err(Error::corrupt(id, "b-tree node cannot be split (internal error)"));
    };
    let mut right = cells.split_off(m);
    if leaf {
        let (lk, lv, _) = node::decode_cell(&cells[m - 1], true, id)?;
        let (rk, rv, _) = node::decode_cell(&right[0], true, id)?;
        if (lk, lv) >= (rk, rv) {
            return Err(Error::corrupt(id, "b-tree leaf entries out of order"));
        }
        let sep = separator((lk, lv), (rk, rv));
        Ok(Split {
            left: cells,
            right,
            sep,
            right_child0: PageId(0),
        })
    } else {
        let up = right.remove(0);
        let (k, v, child) = node::decode_cell(&up, false, id)?;
        Ok(Split {
            left: cells,
            right,
            sep: (k.to_vec(), v.to_vec()),
            right_child0: child,
        })
    }
}
