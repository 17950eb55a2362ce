//! Range cursors: forward or backward over `[lo, hi]`, holding no page
//! between calls (see "Cursors" in the [module docs](super)).

use std::ops::Bound;

use super::node::{Node, Target};
use super::{with_node, BTree};
use crate::access::PageAccess;
use crate::error::{Error, Result};
use crate::ids::PageId;

/// The order a cursor returns entries in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Ascending (key, value).
    Forward,
    /// Descending (key, value).
    Backward,
}

/// Where a cursor is.
#[derive(Clone, Debug)]
enum Pos {
    /// Nothing returned yet.
    Start,
    /// The last entry returned, and where it was.
    At {
        leaf: PageId,
        idx: usize,
        key: Vec<u8>,
        value: Vec<u8>,
    },
    /// The range is exhausted.
    Done,
}

/// An entry and where it was found.
type Found = Option<(PageId, usize, Vec<u8>, Vec<u8>)>;

/// A cursor over a key range of a [`BTree`], made by [`BTree::range`]. It
/// keeps only positions and copies of keys between calls, so the tree may be
/// changed (through the same page access) while it is open: it continues
/// after the last entry it returned.
#[derive(Clone, Debug)]
pub struct Cursor {
    tree: BTree,
    lo: Bound<Vec<u8>>,
    hi: Bound<Vec<u8>>,
    dir: Direction,
    pos: Pos,
}

impl Cursor {
    pub(super) fn new(tree: BTree, lo: Bound<&[u8]>, hi: Bound<&[u8]>, dir: Direction) -> Cursor {
        Cursor {
            tree,
            lo: lo.map(<[u8]>::to_vec),
            hi: hi.map(<[u8]>::to_vec),
            dir,
            pos: Pos::Start,
        }
    }

    /// The cursor's direction.
    pub fn direction(&self) -> Direction {
        self.dir
    }

    /// The next entry `(key, value)` in the cursor's direction, or `None`
    /// when the range is exhausted. After an error the cursor is where it
    /// was, and the call may be retried.
    pub fn next<A: PageAccess>(&mut self, a: &mut A) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        let found = match &self.pos {
            Pos::Done => return Ok(None),
            Pos::Start => self.first(a)?,
            Pos::At { leaf, idx, key, value } => self.after(a, *leaf, *idx, key, value)?,
        };
        let Some((leaf, idx, key, value)) = found else {
            self.pos = Pos::Done;
            return Ok(None);
        };
        if let Pos::At {
            key: last_key,
            value: last_value,
            ..
        } = &self.pos
        {
            let last = (last_key.as_slice(), last_value.as_slice());
            let now = (key.as_slice(), value.as_slice());
            let ordered = match self.dir {
                Direction::Forward => last < now,
                Direction::Backward => last > now,
            };
            if !ordered {
                return Err(Error::corrupt(
                    leaf,
                    "b-tree entries repeat or go backwards along the leaf chain",
                ));
            }
        }
        let inside = match self.dir {
            Direction::Forward => match &self.hi {
                Bound::Included(h) => key <= *h,
                Bound::Excluded(h) => key < *h,
                Bound::Unbounded => true,
            },
            Direction::Backward => match &self.lo {
                Bound::Included(l) => key >= *l,
                Bound::Excluded(l) => key > *l,
                Bound::Unbounded => true,
            },
        };
        if !inside {
            self.pos = Pos::Done;
            return Ok(None);
        }
        self.pos = Pos::At {
            leaf,
            idx,
            key: key.clone(),
            value: value.clone(),
        };
        Ok(Some((key, value)))
    }

    /// The first entry of the range, from a search at the near bound.
    fn first<A: PageAccess>(&self, a: &mut A) -> Result<Found> {
        match self.dir {
            Direction::Forward => {
                let t = match &self.lo {
                    Bound::Unbounded => Target::Min,
                    Bound::Included(k) => Target::Pair(k, &[]),
                    Bound::Excluded(k) => Target::After(k),
                };
                let d = self.tree.descend(a, t, false)?;
                forward_from(a, d.leaf, d.idx)
            }
            Direction::Backward => {
                let t = match &self.hi {
                    Bound::Unbounded => Target::Max,
                    Bound::Included(k) => Target::After(k),
                    Bound::Excluded(k) => Target::Pair(k, &[]),
                };
                let d = self.tree.descend(a, t, false)?;
                backward_from(a, d.leaf, d.idx)
            }
        }
    }

    /// The entry after `(key, value)`, last seen at `idx` of `leaf`: from
    /// there if it is still there, else by a search from the root.
    fn after<A: PageAccess>(&self, a: &mut A, leaf: PageId, idx: usize, key: &[u8], value: &[u8]) -> Result<Found> {
        let still = a.read(leaf, |b| -> Result<bool> {
            let n = Node::parse(b, leaf)?;
            Ok(n.is_leaf() && idx < n.count && n.entry(idx)? == (key, value))
        });
        let still = match still {
            Ok(Ok(s)) => s,
            // The leaf may have been merged away and freed (or reused) since;
            // a search from the root finds the place again, and reports real
            // damage if the tree has any on the way.
            Ok(Err(Error::Corrupt { .. })) | Err(Error::Corrupt { .. }) => false,
            Ok(Err(e)) | Err(e) => return Err(e),
        };
        match (self.dir, still) {
            (Direction::Forward, true) => forward_from(a, leaf, idx + 1),
            (Direction::Backward, true) => backward_from(a, leaf, idx),
            (Direction::Forward, false) => {
                let d = self.tree.descend(a, Target::Pair(key, value), false)?;
                match forward_from(a, d.leaf, d.idx)? {
                    Some((l, i, k, v)) if k == key && v == value => forward_from(a, l, i + 1),
                    other => Ok(other),
                }
            }
            (Direction::Backward, false) => {
                let d = self.tree.descend(a, Target::Pair(key, value), false)?;
                backward_from(a, d.leaf, d.idx)
            }
        }
    }
}

/// Entry `idx` of `leaf`, or the first entry of the next leaf if `idx` is
/// past the end.
fn forward_from<A: PageAccess>(a: &mut A, leaf: PageId, idx: usize) -> Result<Found> {
    let here = with_node(a, leaf, |n| {
        if !n.is_leaf() {
            return Err(Error::corrupt(leaf, "b-tree cursor position is not a leaf"));
        }
        if idx < n.count {
            let (k, v) = n.entry(idx)?;
            Ok(Ok((k.to_vec(), v.to_vec())))
        } else {
            Ok(Err(n.next))
        }
    })?;
    let next = match here {
        Ok((k, v)) => return Ok(Some((leaf, idx, k, v))),
        Err(next) => next,
    };
    if next == PageId(0) {
        return Ok(None);
    }
    let (k, v) = with_node(a, next, |n| {
        if !n.is_leaf() || n.prev != leaf || n.count == 0 {
            return Err(Error::corrupt(
                next,
                format!("b-tree leaf {leaf} links to this page as its right sibling, which is not a non-empty leaf linking back"),
            ));
        }
        let (k, v) = n.entry(0)?;
        Ok((k.to_vec(), v.to_vec()))
    })?;
    Ok(Some((next, 0, k, v)))
}

/// The entry before index `idx` of `leaf`, or the last entry of the previous
/// leaf if `idx` is 0.
fn backward_from<A: PageAccess>(a: &mut A, leaf: PageId, idx: usize) -> Result<Found> {
    let here = with_node(a, leaf, |n| {
        if !n.is_leaf() {
            return Err(Error::corrupt(leaf, "b-tree cursor position is not a leaf"));
        }
        let idx = idx.min(n.count);
        if idx > 0 {
            let (k, v) = n.entry(idx - 1)?;
            Ok(Ok((idx - 1, k.to_vec(), v.to_vec())))
        } else {
            Ok(Err(n.prev))
        }
    })?;
    let prev = match here {
        Ok((i, k, v)) => return Ok(Some((leaf, i, k, v))),
        Err(prev) => prev,
    };
    if prev == PageId(0) {
        return Ok(None);
    }
    let (i, k, v) = with_node(a, prev, |n| {
        if !n.is_leaf() || n.next != leaf || n.count == 0 {
            return Err(Error::corrupt(
                prev,
                format!("b-tree leaf {leaf} links to this page as its left sibling, which is not a non-empty leaf linking back"),
            ));
        }
        let (k, v) = n.entry(n.count - 1)?;
        Ok((n.count - 1, k.to_vec(), v.to_vec()))
    })?;
    Ok(Some((prev, i, k, v)))
}
