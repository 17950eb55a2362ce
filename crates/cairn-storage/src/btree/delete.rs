//! Deletes: removing an entry, then rebalancing bottom up — freeing empty
//! nodes, merging a node under a quarter full with a neighbour, and
//! collapsing a root left with one child. See "Deletes" in the module docs.

use super::node::{self, Header, Node, Target, SLOT_SIZE};
use super::{load_node, with_node, write_node, BTree, Step};
use crate::access::PageAccess;
use crate::error::{Error, Result};
use crate::ids::PageId;

impl BTree {
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
