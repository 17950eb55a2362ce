//! Inserts: finding an entry's place, and splitting full nodes upward (the
//! root included, which stays in place and grows the tree by one level).
//! See "Inserts" in the module docs.

use super::node::{self, Header, Target, LEVEL_MAX, SLOT_SIZE};
use super::{check_size, load_node, page_type_of, separator, show_key, with_node, write_node, BTree, Descent};
use crate::access::PageAccess;
use crate::error::{Error, Result};
use crate::ids::{GroupId, PageId};

impl BTree {
    /// Inserts `(key, value)`. A unique tree refuses a key it holds
    /// ([`Error::DuplicateKey`]); a non-unique tree returns `Ok(false)` for a
    /// pair it holds. Entries over [`key_value_max`](super::key_value_max) are
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
