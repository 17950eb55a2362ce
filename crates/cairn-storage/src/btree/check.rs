//! Whole-tree walks: the verifier ([`check_tree`]), the page list for
//! `destroy`, and counting. Each walk checks levels and refuses a page
//! reached twice, so a damaged tree cannot make it loop.

use std::collections::HashSet;

use super::node::{self, Node, Target};
use super::{with_node, BTree};
use crate::access::PageAccess;
use crate::error::{Error, Result};
use crate::ids::PageId;

type Pair = (Vec<u8>, Vec<u8>);

/// What the walk of [`check_tree`] carries along.
struct State {
    unique: bool,
    seen: HashSet<PageId>,
    /// Leaves in key order: (page, prev, next).
    leaves: Vec<(PageId, PageId, PageId)>,
    /// The last entry seen, in key order.
    last: Option<Pair>,
}

/// Verifies every invariant listed in the module docs.
pub(super) fn check_tree<A: PageAccess>(tree: &BTree, a: &mut A) -> Result<()> {
    let mut st = State {
        unique: false,
        seen: HashSet::new(),
        leaves: Vec::new(),
        last: None,
    };
    visit(a, tree.root(), None, None, None, &mut st)?;
    let leaves = &st.leaves;
    for (i, &(id, prev, next)) in leaves.iter().enumerate() {
        let want_prev = if i == 0 { PageId(0) } else { leaves[i - 1].0 };
        let want_next = leaves.get(i + 1).map_or(PageId(0), |l| l.0);
        if prev != want_prev {
            return Err(Error::corrupt(
                id,
                format!("b-tree leaf links to {prev} as its left sibling, expected {want_prev}"),
            ));
        }
        if next != want_next {
            return Err(Error::corrupt(
                id,
                format!("b-tree leaf links to {next} as its right sibling, expected {want_next}"),
            ));
        }
    }
    Ok(())
}

/// What one node holds, copied out of its page.
struct Seen {
    level: u8,
    root: bool,
    unique: bool,
    prev: PageId,
    next: PageId,
    entries: Vec<Pair>,
    children: Vec<PageId>,
}

fn visit<A: PageAccess>(
    a: &mut A,
    id: PageId,
    level: Option<u8>,
    lo: Option<&Pair>,
    hi: Option<&Pair>,
    st: &mut State,
) -> Result<()> {
    if !st.seen.insert(id) {
        return Err(Error::corrupt(id, "b-tree page is reached twice"));
    }
    let s = a.read(id, |b| -> Result<Seen> {
        node::check_node(b, id)?;
        let n = Node::parse(b, id)?;
        let entries = (0..n.count)
            .map(|i| n.entry(i).map(|(k, v)| (k.to_vec(), v.to_vec())))
            .collect::<Result<Vec<_>>>()?;
        let children = if n.is_leaf() {
            Vec::new()
        } else {
            (0..=n.count).map(|i| n.child(i)).collect::<Result<Vec<_>>>()?
        };
        Ok(Seen {
            level: n.level,
            root: n.is_root(),
            unique: n.is_unique(),
            prev: n.prev,
            next: n.next,
            entries,
            children,
        })
    })??;
    match level {
        None if !s.root => return Err(Error::corrupt(id, "page is not the root of a b-tree")),
        None => st.unique = s.unique,
        Some(_) if s.root => return Err(Error::corrupt(id, "b-tree page below the root is marked as a root")),
        Some(l) if l != s.level => {
            return Err(Error::corrupt(
                id,
                format!("b-tree child should be at level {l} but is at level {}", s.level),
            ))
        }
        Some(_) => {}
    }
    for (i, e) in s.entries.iter().enumerate() {
        if lo.is_some_and(|lo| e < lo) || hi.is_some_and(|hi| e >= hi) {
            return Err(Error::corrupt(
                id,
                format!("b-tree cell {i} lies outside the range its parent gives this page"),
            ));
        }
    }
    if s.level == 0 {
        if !s.root && s.entries.is_empty() {
            return Err(Error::corrupt(id, "b-tree leaf other than the root is empty"));
        }
        for (i, e) in s.entries.into_iter().enumerate() {
            if let Some(last) = &st.last {
                let ordered = if st.unique { last.0 < e.0 } else { *last < e };
                if !ordered {
                    return Err(Error::corrupt(
                        id,
                        format!("b-tree entry {i} is not above the entry before it (by key in a unique tree)"),
                    ));
                }
            }
            st.last = Some(e);
        }
        st.leaves.push((id, s.prev, s.next));
        return Ok(());
    }
    if s.root && s.entries.is_empty() {
        return Err(Error::corrupt(id, "b-tree inner root has a single child"));
    }
    if st.unique && s.entries.iter().any(|e| !e.1.is_empty()) {
        return Err(Error::corrupt(id, "separator of a unique b-tree has a value"));
    }
    for (i, &child) in s.children.iter().enumerate() {
        let clo = if i == 0 { lo } else { Some(&s.entries[i - 1]) };
        let chi = if i == s.entries.len() { hi } else { Some(&s.entries[i]) };
        visit(a, child, Some(s.level - 1), clo, chi, st)?;
    }
    Ok(())
}

/// Every page of the tree, children before parents, the root last.
pub(super) fn pages<A: PageAccess>(tree: &BTree, a: &mut A) -> Result<Vec<PageId>> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    collect(a, tree.root(), None, &mut seen, &mut out)?;
    Ok(out)
}

fn collect<A: PageAccess>(
    a: &mut A,
    id: PageId,
    level: Option<u8>,
    seen: &mut HashSet<PageId>,
    out: &mut Vec<PageId>,
) -> Result<()> {
    if !seen.insert(id) {
        return Err(Error::corrupt(id, "b-tree page is reached twice"));
    }
    let (lvl, children) = with_node(a, id, |n| {
        match level {
            None if !n.is_root() => return Err(Error::corrupt(id, "page is not the root of a b-tree")),
            Some(l) if l != n.level || n.is_root() => {
                return Err(Error::corrupt(
                    id,
                    format!("b-tree child should be a non-root page at level {l}"),
                ))
            }
            _ => {}
        }
        let children = if n.is_leaf() {
            Vec::new()
        } else {
            (0..=n.count).map(|i| n.child(i)).collect::<Result<Vec<_>>>()?
        };
        Ok((n.level, children))
    })?;
    for c in children {
        collect(a, c, Some(lvl - 1), seen, out)?;
    }
    out.push(id);
    Ok(())
}

/// Counts the entries by walking the leaf chain from the leftmost leaf.
pub(super) fn count<A: PageAccess>(tree: &BTree, a: &mut A) -> Result<u64> {
    let d = tree.descend(a, Target::Min, false)?;
    let mut seen = HashSet::new();
    let (mut id, mut prev, mut total) = (d.leaf, PageId(0), 0u64);
    while id != PageId(0) {
        if !seen.insert(id) {
            return Err(Error::corrupt(id, "b-tree leaf chain loops"));
        }
        let (count, next) = with_node(a, id, |n| {
            if !n.is_leaf() || n.prev != prev {
                return Err(Error::corrupt(
                    id,
                    format!("b-tree leaf chain: expected a leaf linking back to {prev}"),
                ));
            }
            Ok((n.count, n.next))
        })?;
        total += count as u64;
        prev = id;
        id = next;
    }
    Ok(total)
}
