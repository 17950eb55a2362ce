//! The index cache: committed index entries, key → (leaf page, OIDs), so a
//! lookup by key skips the B+-tree descent and the binary searches.
//!
//! Filled a whole leaf at a time: a lookup that misses reads the leaf its key
//! lives in and caches every key of it, so the next lookups of keys nearby
//! hit. Entries are *validated by the leaf's lock*, the way cached objects
//! are validated by their home page's lock:
//!
//! - **A filler** reads the leaf under its shared lock (held to the end of
//!   its transaction), so the leaf cannot change while it fills.
//! - **A writer** changes a leaf only under its exclusive lock, and, after
//!   each change to a tree and while still holding those locks, clears the
//!   tree's entries and bumps the tree's *epoch*. A filler cannot interleave:
//!   it would need the shared lock on a leaf the writer holds exclusively.
//! - **A reader** takes an entry and the epoch, locks the entry's leaf
//!   (shared), then checks the epoch again. If a writer changed the tree
//!   meanwhile (its change and its clear both come before it releases the
//!   leaf), the epoch differs and the reader descends the tree instead.
//!
//! A transaction that changed a tree neither reads nor fills that tree's
//! entries: its own uncommitted entries live only in its private pages.
//! Keys at either end of a leaf are not cached (in a non-unique index their
//! values may continue in the neighbouring leaf), and neither are absent
//! keys. The cache is bounded by a number of entries; a tree whose entries
//! would exceed it is cleared and refilled as lookups come.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use cairn_storage::fxhash::FxHashMap;
use cairn_storage::{Oid, PageId};

/// One key's entries: the leaf holding them, and their OIDs in order.
#[derive(Clone, Debug)]
pub(crate) struct Entry {
    pub leaf: PageId,
    pub oids: Box<[Oid]>,
}

/// The cached entries of one index tree.
#[derive(Debug, Default)]
pub(crate) struct TreeCache {
    epoch: AtomicU64,
    entries: RwLock<FxHashMap<Box<[u8]>, Entry>>,
}

impl TreeCache {
    /// Appends the OIDs of `key` (the first only, with `first_only`) to
    /// `out`; returns the leaf holding them and the epoch they belong to.
    pub fn get(&self, key: &[u8], first_only: bool, out: &mut Vec<Oid>) -> Option<(PageId, u64)> {
        let epoch = self.epoch.load(Ordering::Acquire);
        let map = self.entries.read().unwrap_or_else(|e| e.into_inner());
        let e = map.get(key)?;
        let n = if first_only { e.oids.len().min(1) } else { e.oids.len() };
        out.extend_from_slice(&e.oids[..n]);
        Some((e.leaf, epoch))
    }

    /// The current epoch.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Caches the entries of one leaf, read under its shared lock at `epoch`
    /// (nothing is cached if a writer changed the tree since). `entries`
    /// holds (key, OID) pairs in key order.
    pub fn fill(&self, epoch: u64, leaf: PageId, entries: &[(&[u8], Oid)], max_entries: usize) {
        if entries.len() < 3 {
            return;
        }
        let first = entries[0].0;
        let last = entries[entries.len() - 1].0;
        let mut map = self.entries.write().unwrap_or_else(|e| e.into_inner());
        if self.epoch.load(Ordering::Acquire) != epoch {
            return;
        }
        // Already cached (a lookup of a key at the leaf's end misses every
        // time): one probe instead of one per entry.
        let mid = entries[entries.len() / 2].0;
        if mid != first && mid != last && map.get(mid).is_some_and(|e| e.leaf == leaf) {
            return;
        }
        if map.len() + entries.len() > max_entries {
            map.clear();
        }
        let mut i = 0;
        while i < entries.len() {
            let k = entries[i].0;
            let mut j = i + 1;
            while j < entries.len() && entries[j].0 == k {
                j += 1;
            }
            if k != first && k != last && !map.contains_key(k) {
                let oids: Box<[Oid]> = entries[i..j].iter().map(|(_, o)| *o).collect();
                map.insert(k.into(), Entry { leaf, oids });
            }
            i = j;
        }
    }

    /// A writer changed the tree (and holds its changed leaves' exclusive
    /// locks): every entry goes, and readers holding one re-check.
    pub fn invalidate(&self) {
        let mut map = self.entries.write().unwrap_or_else(|e| e.into_inner());
        self.epoch.fetch_add(1, Ordering::AcqRel);
        map.clear();
    }

    /// Entries cached now.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.read().unwrap_or_else(|e| e.into_inner()).len()
    }
}

/// The caches of every index tree of a database, by root page.
#[derive(Debug)]
pub(crate) struct IndexCache {
    trees: RwLock<FxHashMap<PageId, Arc<TreeCache>>>,
    /// Entries one tree may cache.
    pub max_entries: usize,
}

impl IndexCache {
    /// An empty cache allowing `max_entries` entries per tree.
    pub fn new(max_entries: usize) -> IndexCache {
        IndexCache {
            trees: RwLock::new(FxHashMap::default()),
            max_entries,
        }
    }

    /// The cache of the tree rooted at `root`.
    pub fn tree(&self, root: PageId) -> Arc<TreeCache> {
        if let Some(t) = self.trees.read().unwrap_or_else(|e| e.into_inner()).get(&root) {
            return Arc::clone(t);
        }
        let mut w = self.trees.write().unwrap_or_else(|e| e.into_inner());
        Arc::clone(w.entry(root).or_default())
    }

    /// Drops every tree's entries.
    pub fn clear(&self) {
        for t in self.trees.read().unwrap_or_else(|e| e.into_inner()).values() {
            t.invalidate();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_storage::{SlotIdx, Uniq};

    fn oid(n: u32) -> Oid {
        Oid {
            page: PageId(100 + n),
            slot: SlotIdx(n as u16),
            uniq: Uniq(n),
        }
    }

    #[test]
    fn fill_skips_the_leaf_ends_and_groups_duplicates() {
        let t = TreeCache::default();
        let keys: Vec<Vec<u8>> = [1u8, 2, 3, 3, 4, 5].iter().map(|k| vec![*k]).collect();
        let entries: Vec<(&[u8], Oid)> = keys.iter().enumerate().map(|(i, k)| (&k[..], oid(i as u32))).collect();
        t.fill(t.epoch(), PageId(7), &entries, 100);
        assert!(t.get(&[1], false, &mut Vec::new()).is_none(), "first key of the leaf");
        assert!(t.get(&[5], false, &mut Vec::new()).is_none(), "last key of the leaf");
        let mut out = Vec::new();
        let (leaf, _) = t.get(&[3], false, &mut out).unwrap();
        assert_eq!(leaf, PageId(7));
        assert_eq!(out, [oid(2), oid(3)]);
        out.clear();
        t.get(&[3], true, &mut out).unwrap();
        assert_eq!(out, [oid(2)], "first only");
        out.clear();
        t.get(&[2], false, &mut out).unwrap();
        assert_eq!(out, [oid(1)]);
        assert_eq!(t.len(), 3);
    }

    #[test]
    fn a_stale_fill_is_refused_and_invalidate_bumps_the_epoch() {
        let t = TreeCache::default();
        let keys: Vec<Vec<u8>> = (0u8..5).map(|k| vec![k]).collect();
        let entries: Vec<(&[u8], Oid)> = keys.iter().enumerate().map(|(i, k)| (&k[..], oid(i as u32))).collect();
        let before = t.epoch();
        t.invalidate();
        assert_ne!(t.epoch(), before);
        t.fill(before, PageId(7), &entries, 100);
        assert_eq!(t.len(), 0, "filled with a leaf read before a change");
        t.fill(t.epoch(), PageId(7), &entries, 100);
        assert_eq!(t.len(), 3);
        t.invalidate();
        assert_eq!(t.len(), 0);
    }

    #[test]
    fn the_bound_clears_instead_of_growing() {
        let t = TreeCache::default();
        let keys: Vec<Vec<u8>> = (0u8..10).map(|k| vec![k]).collect();
        let entries: Vec<(&[u8], Oid)> = keys.iter().enumerate().map(|(i, k)| (&k[..], oid(i as u32))).collect();
        t.fill(t.epoch(), PageId(7), &entries[..5], 6);
        assert_eq!(t.len(), 3);
        t.fill(t.epoch(), PageId(8), &entries[5..], 6);
        assert_eq!(t.len(), 3, "the old entries went to make room");
        assert!(t.get(&[6], false, &mut Vec::new()).is_some());
    }
}
