//! Which leaves hold a key's entries and enclose them: what a server locks
//! (and calls back on) to keep an index lookup's answer for a client.

use crate::access::PageAccess;
use crate::error::{Error, Result};
use crate::ids::PageId;

use super::{with_node, BTree};

impl BTree {
    /// The leaves whose exclusive lock any change to `key`'s entries takes
    /// — one added, one removed, a split moving them — and how many
    /// entries of `key` they hold; `None` past `max_leaves`. They are the
    /// leaf where the smallest entry of `key` would go ([`BTree::leaf_of`];
    /// no entry of `key` can go further left) and its right siblings up to
    /// the first holding a greater key (or the last leaf): an entry of
    /// `key` can only ever go before that one. With their shared locks
    /// held, a server keeps a lookup's answer for a client until one of
    /// them changes.
    pub fn leaves_enclosing<A: PageAccess>(
        &self,
        a: &mut A,
        key: &[u8],
        max_leaves: usize,
    ) -> Result<Option<(Vec<PageId>, usize)>> {
        let first = self.leaf_of(a, key)?;
        let here = leaf_around(a, first, key)?;
        let mut leaves = vec![first];
        let mut count = here.equal;
        let (mut greater, mut next) = (here.greater, here.next);
        while !greater && next != PageId(0) {
            if leaves.len() >= max_leaves || leaves.contains(&next) {
                return Ok(None);
            }
            let right = leaf_around(a, next, key)?;
            leaves.push(next);
            count += right.equal;
            (greater, next) = (right.greater, right.next);
        }
        Ok((leaves.len() <= max_leaves).then_some((leaves, count)))
    }
}

/// Where `key` stands in leaf `id`: how many entries of `key` it holds,
/// whether it holds a greater key, and its right sibling.
struct Around {
    equal: usize,
    greater: bool,
    next: PageId,
}

fn leaf_around<A: PageAccess>(a: &mut A, id: PageId, key: &[u8]) -> Result<Around> {
    with_node(a, id, |n| {
        if !n.is_leaf() {
            return Err(Error::corrupt(id, "expected a b-tree leaf, found an inner page"));
        }
        let mut at = Around {
            equal: 0,
            greater: false,
            next: n.next,
        };
        for i in 0..n.count {
            match n.entry(i)?.0.cmp(key) {
                std::cmp::Ordering::Less => {}
                std::cmp::Ordering::Equal => at.equal += 1,
                std::cmp::Ordering::Greater => at.greater = true,
            }
        }
        Ok(at)
    })
}
