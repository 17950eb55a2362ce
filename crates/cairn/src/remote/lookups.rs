//! Index lookups a client keeps across transactions under rights: the
//! answer of a lookup of a key (its values) kept under rights on what
//! guards it — the B+-tree leaves that enclose the key (a page-locking
//! server's, to the object client), or the gaps the server's key-range
//! locks guarded the answer with (a key-range server's, to the object and
//! page clients). A callback of any of those rights drops the lookup.
//!
//! Which transactions read a lookup under its rights, and so are named when
//! one is called back, is each client's own table's to know
//! (`page/rights.rs`, `object/rights.rs`); what a lookup is kept under, and
//! which lookups a right takes along when it goes, is here.

use cairn_storage::fxhash::{FxHashMap, FxHashSet};
use cairn_storage::lock::Resource;
use cairn_storage::PageId;

/// A right lookups are kept under: a leaf, or a gap of a tree.
struct Guard {
    epoch: u64,
    root: PageId,
    /// The keys of the lookups kept under it.
    keys: Vec<Vec<u8>>,
}

/// A kept lookup.
#[derive(Clone)]
pub(super) struct Kept {
    /// The rights it is kept under (leaves, or gaps and the tree's end).
    pub(super) guards: Vec<Resource>,
    /// The values of the key, all of them.
    pub(super) values: Vec<Vec<u8>>,
    /// When its rights came (the owner's clock): a snapshot asked for
    /// after that may read it while they are held.
    pub(super) since: u64,
}

/// The lookups a client keeps, and the rights they are kept under.
#[derive(Default)]
pub(super) struct KeptLookups {
    guards: FxHashMap<Resource, Guard>,
    /// (tree root, key) → the kept answer.
    lookups: FxHashMap<(PageId, Vec<u8>), Kept>,
}

impl KeptLookups {
    /// How many lookups are kept.
    pub(super) fn len(&self) -> usize {
        self.lookups.len()
    }

    /// The epoch of the right on `guard`, if one is held.
    pub(super) fn epoch(&self, guard: Resource) -> Option<u64> {
        self.guards.get(&guard).map(|g| g.epoch)
    }

    /// Whether a right on `guard` is held.
    pub(super) fn holds(&self, guard: Resource) -> bool {
        self.guards.contains_key(&guard)
    }

    /// A right on `guard` granted again with `epoch` (the server keeps one
    /// per client and guard, now of that epoch) for a lookup not kept:
    /// the one held, if any, takes the epoch, so that giving it back later
    /// names the server's. False if none is held.
    pub(super) fn renew(&mut self, guard: Resource, epoch: u64) -> bool {
        match self.guards.get_mut(&guard) {
            Some(g) => {
                g.epoch = g.epoch.max(epoch);
                true
            }
            None => false,
        }
    }

    /// The rights held on leaves or gaps of the tree at `root`.
    pub(super) fn guards_of(&self, root: PageId) -> Vec<Resource> {
        self.guards
            .iter()
            .filter(|(_, g)| g.root == root)
            .map(|(k, _)| *k)
            .collect()
    }

    /// Every right held.
    pub(super) fn all_guards(&self) -> impl Iterator<Item = Resource> + '_ {
        self.guards.keys().copied()
    }

    /// The lookup of `key` in the tree at `root`, if kept.
    pub(super) fn get(&self, root: PageId, key: &[u8]) -> Option<&Kept> {
        self.lookups.get(&(root, key.to_vec()))
    }

    /// Drops the right on `guard` and the lookups kept under it (a lookup
    /// under other rights too stays listed there: dropping it again later
    /// is harmless); its epoch if one was held.
    pub(super) fn drop_guard(&mut self, guard: Resource) -> Option<u64> {
        let g = self.guards.remove(&guard)?;
        for k in g.keys {
            let key = (g.root, k);
            if self.lookups.get(&key).is_some_and(|l| l.guards.contains(&guard)) {
                self.lookups.remove(&key);
            }
        }
        Some(g.epoch)
    }

    /// Keeps the lookup of `key` in the tree at `root` (its `values`)
    /// under `rights` (key, epoch), taken in at `since`. The caller has
    /// checked that each right may be taken in.
    pub(super) fn keep(
        &mut self,
        root: PageId,
        key: &[u8],
        rights: &[(Resource, u64)],
        values: Vec<Vec<u8>>,
        since: u64,
    ) {
        for &(guard, epoch) in rights {
            match self.guards.get_mut(&guard) {
                Some(have) if have.root == root => {
                    have.epoch = have.epoch.max(epoch);
                    have.keys.push(key.to_vec());
                }
                _ => {
                    self.drop_guard(guard);
                    self.guards.insert(
                        guard,
                        Guard {
                            epoch,
                            root,
                            keys: vec![key.to_vec()],
                        },
                    );
                }
            }
        }
        let guards = rights.iter().map(|(g, _)| *g).collect();
        self.lookups
            .insert((root, key.to_vec()), Kept { guards, values, since });
    }

    /// The rights nobody reads under (`read`: what running transactions
    /// read under rights), with their epochs: the candidates to give back,
    /// oldest right (lowest epoch) first once sorted.
    pub(super) fn unread(&self, read: &FxHashSet<Resource>) -> Vec<(u64, Resource)> {
        self.guards
            .iter()
            .filter(|(k, _)| !read.contains(*k))
            .map(|(k, g)| (g.epoch, *k))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An operation of the model test.
    #[derive(Clone, Debug)]
    enum Op {
        /// Keep key `k`'s lookup under these guards (index, epoch).
        Keep(u8, Vec<(u8, u64)>),
        DropGuard(u8),
        Renew(u8, u64),
    }

    /// Six guards of one tree: two leaves, three gaps, its end.
    fn guard(i: u8) -> Resource {
        let root = PageId(3);
        match i % 6 {
            0 => Resource::Page(PageId(10)),
            1 => Resource::Page(PageId(11)),
            5 => Resource::TreeEnd(root),
            g => Resource::Gap(root, u64::from(g)),
        }
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        prop_oneof![
            3 => (0u8..8, proptest::collection::vec((0u8..6, 1u64..20), 1..4)).prop_map(|(k, g)| Op::Keep(k, g)),
            1 => (0u8..6).prop_map(Op::DropGuard),
            1 => (0u8..6, 1u64..20).prop_map(|(g, e)| Op::Renew(g, e)),
        ]
    }

    proptest::proptest! {
        /// Against a model that keeps, per guard, the epoch and which keys'
        /// lookups it guards: a lookup is there exactly while none of the
        /// guards it was kept under has been dropped since, and a guard's
        /// epoch is the highest it was kept or renewed with since it was
        /// last taken in.
        #[test]
        fn kept_lookups_follow_their_guards_as_a_model_does(ops in proptest::collection::vec(op(), 0..60)) {
            let root = PageId(3);
            let mut kept = KeptLookups::default();
            let mut epochs: std::collections::HashMap<Resource, u64> = Default::default();
            let mut model: std::collections::HashMap<u8, (Vec<Resource>, u64)> = Default::default();
            for (clock, op) in ops.into_iter().enumerate() {
                match op {
                    Op::Keep(k, gs) => {
                        let mut rights: Vec<(Resource, u64)> = Vec::new();
                        for (g, e) in gs {
                            if !rights.iter().any(|(r, _)| *r == guard(g)) {
                                rights.push((guard(g), e));
                            }
                        }
                        kept.keep(root, &[k], &rights, vec![vec![k]], clock as u64);
                        for &(g, e) in &rights {
                            let have = epochs.entry(g).or_insert(e);
                            *have = (*have).max(e);
                        }
                        model.insert(k, (rights.iter().map(|(g, _)| *g).collect(), clock as u64));
                    }
                    Op::DropGuard(g) => {
                        let g = guard(g);
                        proptest::prop_assert_eq!(kept.drop_guard(g), epochs.remove(&g));
                        model.retain(|_, (gs, _)| !gs.contains(&g));
                    }
                    Op::Renew(g, e) => {
                        let g = guard(g);
                        let held = epochs.get_mut(&g).map(|have| *have = (*have).max(e)).is_some();
                        proptest::prop_assert_eq!(kept.renew(g, e), held);
                    }
                }
                proptest::prop_assert_eq!(kept.len(), model.len());
                for k in 0u8..8 {
                    let got = kept.get(root, &[k]).map(|l| (l.guards.clone(), l.since, l.values.clone()));
                    let want = model.get(&k).map(|(gs, since)| (gs.clone(), *since, vec![vec![k]]));
                    proptest::prop_assert_eq!(got, want, "key {}", k);
                }
                for i in 0u8..6 {
                    proptest::prop_assert_eq!(kept.epoch(guard(i)), epochs.get(&guard(i)).copied());
                }
            }
        }
    }

    /// Dropping a right drops the lookups kept under it, and only them; a
    /// lookup kept under two rights goes with either.
    #[test]
    fn a_right_takes_its_lookups_along() {
        let mut kept = KeptLookups::default();
        let root = PageId(3);
        let leaf = |p| Resource::Page(PageId(p));
        let gap = Resource::Gap(root, 77);
        kept.keep(root, b"a", &[(leaf(9), 4)], vec![vec![1]], 1);
        kept.keep(root, b"b", &[(leaf(8), 2), (leaf(9), 4)], vec![vec![2]], 2);
        kept.keep(root, b"c", &[(leaf(10), 1)], vec![vec![3]], 3);
        kept.keep(root, b"d", &[(gap, 5), (Resource::TreeEnd(root), 5)], vec![vec![4]], 4);
        assert_eq!(kept.epoch(gap), Some(5));
        assert_eq!(kept.get(root, b"b").map(|k| k.since), Some(2));
        assert_eq!(kept.drop_guard(leaf(9)), Some(4));
        assert_eq!(kept.len(), 2, "a and b went with leaf 9");
        assert_eq!(kept.drop_guard(leaf(9)), None);
        assert_eq!(kept.drop_guard(gap), Some(5));
        assert!(!kept.holds(gap));
        assert!(kept.get(root, b"c").is_some());
        assert_eq!(kept.len(), 1);
        let read: FxHashSet<Resource> = [leaf(10)].into_iter().collect();
        let mut unread: Vec<Resource> = kept.unread(&read).into_iter().map(|(_, k)| k).collect();
        unread.sort_unstable();
        let mut want = vec![leaf(8), Resource::TreeEnd(root)];
        want.sort_unstable();
        assert_eq!(unread, want, "rights without lookups stay until given back");
        assert_eq!(kept.guards_of(root).len(), 3);
        assert!(kept.renew(leaf(10), 8) && kept.epoch(leaf(10)) == Some(8));
        assert!(!kept.renew(gap, 9), "a right not held is not renewed");
        assert!(kept.get(root, b"c").is_some(), "renewing keeps its lookups");
    }
}
