//! Cycle search in the waits-for graph.
//!
//! The graph is never stored: its edges are computed on demand from the lock
//! table (and the external callback edges) by the closure passed in, so it
//! cannot drift from the queues it describes.

use std::collections::HashSet;

use super::resource::LockOwner;

/// A cycle through `start` in the graph whose out-edges `edges` returns, as
/// the path `start → … → (last)` whose last node waits for `start`; `None` if
/// `start` cannot reach itself.
///
/// Iterative depth-first search, so a long chain of waiters cannot overflow
/// the stack. Each node is expanded at most once: reaching `start` is all
/// that matters, and a node already explored cannot lead there.
pub(crate) fn find_cycle(
    start: LockOwner,
    mut edges: impl FnMut(LockOwner) -> Vec<LockOwner>,
) -> Option<Vec<LockOwner>> {
    let mut explored = HashSet::from([start]);
    // The current path: each node with its out-edges and the next to follow.
    let mut path: Vec<(LockOwner, Vec<LockOwner>, usize)> = vec![(start, edges(start), 0)];
    while let Some((_, out, next)) = path.last_mut() {
        let Some(&to) = out.get(*next) else {
            path.pop();
            continue;
        };
        *next += 1;
        if to == start {
            return Some(path.iter().map(|(node, _, _)| *node).collect());
        }
        if explored.insert(to) {
            let out = edges(to);
            path.push((to, out, 0));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::ids::{ClientId, TxnId};

    fn o(n: u64) -> LockOwner {
        LockOwner::new(ClientId(0), TxnId(n))
    }

    fn search(edges: &[(u64, u64)], start: u64) -> Option<Vec<u64>> {
        let mut map: HashMap<LockOwner, Vec<LockOwner>> = HashMap::new();
        for &(a, b) in edges {
            map.entry(o(a)).or_default().push(o(b));
        }
        find_cycle(o(start), |n| map.get(&n).cloned().unwrap_or_default()).map(|p| p.iter().map(|n| n.txn.0).collect())
    }

    #[test]
    fn finds_cycles_through_the_start_only() {
        assert_eq!(search(&[], 1), None);
        assert_eq!(search(&[(1, 2), (2, 1)], 1), Some(vec![1, 2]));
        assert_eq!(search(&[(1, 2), (2, 3), (3, 1)], 1), Some(vec![1, 2, 3]));
        // A cycle elsewhere, reachable from the start, is not the start's.
        assert_eq!(search(&[(1, 2), (2, 3), (3, 2)], 1), None);
        // Dead ends and diamonds are explored once and left behind.
        assert_eq!(
            search(&[(1, 2), (1, 3), (2, 4), (3, 4), (4, 5), (3, 1)], 1),
            Some(vec![1, 3])
        );
    }
}
