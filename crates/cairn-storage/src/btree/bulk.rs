//! Bulk load: a tree built bottom up from sorted entries, without a search
//! per entry.
//!
//! One builder per level holds the node being filled. When the next cell
//! would take a node past [`FILL_PERCENT`] of its page, the node is written
//! to a newly allocated page (near the previous one at its level), linked to
//! its left sibling if it is a leaf, and handed to the level above with the
//! separator that precedes it. At the end each level's last node is written
//! the same way, except the single node of the top level, which is written
//! into the root page allocated first, so the tree has the root page it will
//! keep. Memory is one page of cells per level.

use super::node::{self, Header, FLAG_ROOT, FLAG_UNIQUE, LEVEL_MAX, SLOT_SIZE};
use super::{check_size, page_type_of, separator, show_key, write_node, BTree};
use crate::access::PageAccess;
use crate::error::{Error, Result};
use crate::ids::{GroupId, PageId};

/// How full bulk load makes each page (of the bytes for slots and cells).
pub const FILL_PERCENT: usize = 90;

type Pair = (Vec<u8>, Vec<u8>);

/// The node being filled at one level.
#[derive(Default)]
struct Level {
    cells: Vec<Vec<u8>>,
    /// Bytes of slots and cells.
    used: usize,
    /// Inner: the leftmost child (`PageId(0)` while the node is empty).
    child0: PageId,
    /// The separator before this node (none for the first at its level).
    lead: Option<Pair>,
    /// The last node written at this level.
    prev: PageId,
    /// Nodes written at this level.
    written: u64,
}

impl Level {
    fn is_empty(&self, level: usize) -> bool {
        if level == 0 {
            self.cells.is_empty()
        } else {
            self.child0 == PageId(0)
        }
    }
}

struct Loader {
    root: PageId,
    group: GroupId,
    unique: bool,
    fill: usize,
    levels: Vec<Level>,
    /// Pages allocated so far (given back on error).
    allocated: Vec<PageId>,
}

pub(super) fn load<A: PageAccess, I: IntoIterator<Item = (Vec<u8>, Vec<u8>)>>(
    a: &mut A,
    group: GroupId,
    unique: bool,
    sorted: I,
) -> Result<BTree> {
    let tree = BTree::create(a, group, unique)?;
    let mut l = Loader {
        root: tree.root(),
        group,
        unique,
        fill: node::capacity(a.page_size()) * FILL_PERCENT / 100,
        levels: vec![Level::default()],
        allocated: Vec::new(),
    };
    match l.run(a, sorted) {
        Ok(()) => Ok(tree),
        Err(e) => {
            // Best effort: the caller's transaction should abort anyway.
            for p in l.allocated.into_iter().chain([tree.root()]) {
                let _ = a.free(p);
            }
            Err(e)
        }
    }
}

impl Loader {
    fn run<A: PageAccess, I: IntoIterator<Item = (Vec<u8>, Vec<u8>)>>(&mut self, a: &mut A, sorted: I) -> Result<()> {
        let mut last: Option<Pair> = None;
        for (n, (k, v)) in sorted.into_iter().enumerate() {
            check_size(a.page_size(), &k, &v)?;
            if let Some((lk, lv)) = &last {
                if self.unique && *lk == k {
                    return Err(Error::DuplicateKey {
                        root: self.root,
                        key: show_key(&k),
                    });
                }
                if (lk, lv) >= (&k, &v) {
                    return Err(Error::InvalidArgument(format!(
                        "bulk load: entry {n} is not above the entry before it (input must be sorted by key, then value, without repeats)"
                    )));
                }
            }
            let cell = node::leaf_cell(&k, &v);
            let leaf = &self.levels[0];
            if !leaf.cells.is_empty() && leaf.used + SLOT_SIZE + cell.len() > self.fill {
                let (lk, lv) = last
                    .as_ref()
                    .map(|(k, v)| (k.as_slice(), v.as_slice()))
                    .unwrap_or_default();
                let sep = separator((lk, lv), (&k, &v));
                self.flush(a, 0, Some(sep))?;
            }
            let leaf = &mut self.levels[0];
            leaf.used += SLOT_SIZE + cell.len();
            leaf.cells.push(cell);
            last = Some((k, v));
        }
        let mut level = 0;
        while level < self.levels.len() {
            if self.levels[level].written == 0 {
                return self.write_root(a, level);
            }
            self.flush(a, level, None)?;
            level += 1;
        }
        Ok(())
    }

    /// Writes the node being filled at `level` to a new page, hands it to the
    /// level above, and starts the next node with separator `next_lead`.
    fn flush<A: PageAccess>(&mut self, a: &mut A, level: usize, next_lead: Option<Pair>) -> Result<()> {
        let lv = level as u8;
        let near = match self.levels[level].prev {
            PageId(0) => self.root,
            p => p,
        };
        let id = a.allocate(self.group, Some(near), page_type_of(lv))?;
        self.allocated.push(id);
        let l = &mut self.levels[level];
        let prev = l.prev;
        let h = Header {
            level: lv,
            flags: 0,
            prev: if level == 0 { prev } else { PageId(0) },
            next: PageId(0),
            child0: l.child0,
            group: GroupId(0),
        };
        let cells = std::mem::take(&mut l.cells);
        let lead = std::mem::replace(&mut l.lead, next_lead);
        l.used = 0;
        l.child0 = PageId(0);
        l.prev = id;
        l.written += 1;
        write_node(a, id, &h, &cells)?;
        if level == 0 && prev != PageId(0) {
            a.modify(prev, |b| node::set_next(b, prev, id))?;
        }
        self.add_child(a, level + 1, lead, id)
    }

    /// Adds `child` to the node being filled at `level` (an inner level),
    /// `sep` being the separator before it.
    fn add_child<A: PageAccess>(&mut self, a: &mut A, level: usize, sep: Option<Pair>, child: PageId) -> Result<()> {
        if level > usize::from(LEVEL_MAX) {
            return Err(Error::LimitExceeded {
                what: "b-tree height",
                value: level as u64,
                limit: u64::from(LEVEL_MAX),
            });
        }
        if level == self.levels.len() {
            self.levels.push(Level::default());
        }
        if self.levels[level].is_empty(level) {
            let l = &mut self.levels[level];
            l.child0 = child;
            l.lead = sep;
            return Ok(());
        }
        let Some((k, v)) = sep else {
            return Err(Error::InvalidArgument(
                "bulk load: a separator is missing (internal error)".into(),
            ));
        };
        let cell = node::inner_cell(&k, &v, child);
        if self.levels[level].used + SLOT_SIZE + cell.len() > self.fill {
            // The separator goes up with the new node, whose first child this is.
            self.flush(a, level, Some((k, v)))?;
            self.levels[level].child0 = child;
            return Ok(());
        }
        let l = &mut self.levels[level];
        l.used += SLOT_SIZE + cell.len();
        l.cells.push(cell);
        Ok(())
    }

    /// Writes the single node of the top level into the root page.
    fn write_root<A: PageAccess>(&mut self, a: &mut A, level: usize) -> Result<()> {
        let l = &mut self.levels[level];
        let h = Header {
            level: level as u8,
            flags: FLAG_ROOT | if self.unique { FLAG_UNIQUE } else { 0 },
            prev: PageId(0),
            next: PageId(0),
            child0: l.child0,
            group: self.group,
        };
        let cells = std::mem::take(&mut l.cells);
        write_node(a, self.root, &h, &cells)
    }
}
