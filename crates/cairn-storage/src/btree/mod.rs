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
//!
//! # Where the code is
//!
//! This file holds the tree handle, the search-path types, the node helpers
//! the operations share and the descent from the root they all start with.
//! Reads are in `lookup.rs`, inserts and splits in `insert.rs`, deletes and
//! merges in `delete.rs`, the bulk load in `bulk.rs`, range cursors in
//! `cursor.rs`, the whole-tree walks (verifier, page list, count) in
//! `check.rs`, the leaves enclosing a key in `leaves.rs`, and the node page
//! format in `node.rs`.

mod bulk;
mod check;
mod cursor;
mod delete;
mod insert;
mod leaves;
mod lookup;
mod node;
#[cfg(test)]
mod tests;

use std::ops::Bound;

use crate::access::PageAccess;
use crate::error::{Error, Result};
use crate::ids::{GroupId, PageId};
use crate::page::PageType;

pub use self::cursor::{Cursor, Direction};
pub use self::node::{check_page, is_root_page, key_value_max, page_links, PageLinks, LEVEL_MAX, NODE_HEADER_SIZE};

use self::node::{Header, Node, Target, FLAG_ROOT, FLAG_UNIQUE};

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

/// [`Error::LimitExceeded`] if `(key, value)` is too large for a tree of
/// `page_size` pages (see [`key_value_max`]).
pub(crate) fn check_entry_size(page_size: usize, key: &[u8], value: &[u8]) -> Result<()> {
    check_size(page_size, key, value)
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

    /// The leaf position of `t`, for a read: [`BTree::descend`]'s checks
    /// without recording the path.
    fn find_leaf<A: PageAccess>(&self, a: &mut A, t: Target<'_>) -> Result<(PageId, usize)> {
        self.find_leaf_locking(a, t, false)
    }

    /// [`BTree::find_leaf`]; with `for_update`, the leaf is locked to be
    /// read for update ([`PageAccess::lock_to_read_for_update`]) before it
    /// is read (its parent's level says it is a leaf; a root that is a
    /// leaf is read as any page).
    fn find_leaf_locking<A: PageAccess>(&self, a: &mut A, t: Target<'_>, for_update: bool) -> Result<(PageId, usize)> {
        let mut id = self.root;
        let mut level: Option<u8> = None;
        loop {
            let expect = level;
            if for_update && expect == Some(0) {
                a.lock_to_read_for_update(id)?;
            }
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
