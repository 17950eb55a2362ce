//! The index cache: committed index entries, key → (leaf page, OIDs), so a
//! lookup by key skips the B+-tree descent and the binary searches.
//!
//! Filled a whole leaf at a time: the second lookup that misses on a leaf
//! reads the leaf and caches every key of it, so the next lookups of keys
//! nearby hit (the first just descends: random lookups over a large index
//! touch most leaves once). Entries are *validated by the leaf's lock and version*, the way
//! cached objects are validated by their home page's lock:
//!
//! - **Every leaf has a version** in the tree's cache, taken from one
//!   counter that only grows (a leaf never changed has version 0).
//! - **A writer** changes pages only under their exclusive locks, and after
//!   each change to a tree, still holding those locks, gives every page it
//!   changed, allocated or freed a new version: the entries read from those
//!   leaves stop validating.
//! - **A filler** notes the counter, reads the leaf under its shared lock
//!   (held to the end of its transaction), and caches the leaf's entries
//!   only if the leaf's version is still below the noted counter (no writer
//!   changed it in between; none can while the filler holds the lock).
//! - **A reader** takes an entry whose version is the leaf's current one,
//!   locks the leaf (shared), then checks the version again. A writer that
//!   changed the leaf meanwhile gave it a new version before releasing its
//!   lock, so the reader sees the change and descends the tree instead.
//!
//! A transaction neither reads nor fills entries of a leaf it has changed
//! (it holds a private copy: its own uncommitted entries are there), but
//! keeps using the cache for the rest of the tree. Keys at either end of a
//! leaf are not cached (in a non-unique index their values may continue in
//! the neighbouring leaf), nor absent keys, nor keys over [`KEY_MAX`] bytes.
//! The entries are bounded in number; past the bound they are dropped and
//! refilled as lookups come (versions are kept: they are what makes an
//! entry read before the drop fail to validate after it).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use cairn_storage::fxhash::FxHashMap;
use cairn_storage::lock::Resource;
use cairn_storage::{Oid, PageId};

/// Longest key the cache holds (longer keys always descend the tree).
pub(crate) const KEY_MAX: usize = 22;

/// A key stored inline: filling a leaf's worth of entries allocates nothing
/// per entry. Hashes and compares as its bytes, so the map is probed with a
/// plain `&[u8]`.
#[derive(Clone, Copy)]
struct Key {
    len: u8,
    bytes: [u8; KEY_MAX],
}

impl Key {
    fn new(k: &[u8]) -> Option<Key> {
        let mut bytes = [0u8; KEY_MAX];
        bytes.get_mut(..k.len())?.copy_from_slice(k);
        Some(Key {
            len: k.len() as u8,
            bytes,
        })
    }
}

impl std::borrow::Borrow<[u8]> for Key {
    fn borrow(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

impl std::hash::Hash for Key {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        std::borrow::Borrow::<[u8]>::borrow(self).hash(state);
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Key) -> bool {
        std::borrow::Borrow::<[u8]>::borrow(self) == std::borrow::Borrow::<[u8]>::borrow(other)
    }
}

impl Eq for Key {}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:02x?}", std::borrow::Borrow::<[u8]>::borrow(self))
    }
}

/// One key's entries: the leaf holding them and the leaf's version when
/// they were read, and their OIDs in order (the first inline; more only for a
/// key with several objects).
#[derive(Clone, Debug)]
struct Entry {
    leaf: PageId,
    version: u64,
    first: Oid,
    rest: Box<[Oid]>,
    /// Under key-range locking: the lock on the gap just past the key's
    /// last value (below the next key's first entry in the leaf), which a
    /// hit reading every value takes ([`TreeCache::get_with_past`]).
    past: Option<Resource>,
}

#[derive(Debug, Default)]
struct State {
    entries: FxHashMap<Key, Entry>,
    /// Versions of the leaves changed since the database opened.
    versions: FxHashMap<PageId, u64>,
    /// Leaves a lookup missed on once: the second miss fills the leaf
    /// ([`TreeCache::worth_filling`]).
    missed: cairn_storage::fxhash::FxHashSet<PageId>,
}

impl State {
    fn version(&self, leaf: PageId) -> u64 {
        self.versions.get(&leaf).copied().unwrap_or(0)
    }
}

/// The cached entries of one index tree.
#[derive(Debug)]
pub(crate) struct TreeCache {
    /// The next version to hand out (1 and up; 0 is "never changed").
    counter: AtomicU64,
    state: RwLock<State>,
}

impl Default for TreeCache {
    fn default() -> TreeCache {
        TreeCache {
            counter: AtomicU64::new(1),
            state: RwLock::default(),
        }
    }
}

impl TreeCache {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends the OIDs of `key` (the first only, with `first_only`) to
    /// `out` if its entry is valid now; returns the leaf holding them and the
    /// version to check again once the leaf is locked ([`TreeCache::still`]).
    pub fn get(&self, key: &[u8], first_only: bool, out: &mut Vec<Oid>) -> Option<(PageId, u64)> {
        self.get_with_past(key, first_only, out)
            .map(|(leaf, version, _)| (leaf, version))
    }

    /// [`TreeCache::get`], with the lock on the gap past the key's last
    /// value if the fill knew it ([`TreeCache::fill_with_gaps`]).
    pub fn get_with_past(
        &self,
        key: &[u8],
        first_only: bool,
        out: &mut Vec<Oid>,
    ) -> Option<(PageId, u64, Option<Resource>)> {
        let st = self.read();
        let e = st.entries.get(key)?;
        if st.version(e.leaf) != e.version {
            return None;
        }
        out.push(e.first);
        if !first_only {
            out.extend_from_slice(&e.rest);
        }
        Some((e.leaf, e.version, e.past))
    }

    /// True if `leaf` still has `version`.
    pub fn still(&self, leaf: PageId, version: u64) -> bool {
        self.read().version(leaf) == version
    }

    /// The counter to note before reading a leaf to fill from.
    pub fn mark(&self) -> u64 {
        self.counter.load(Ordering::Acquire)
    }

    /// Notes a lookup that missed on `leaf`; true if one missed there before
    /// (since the leaf was last filled), so the leaf is worth copying into
    /// the cache. Random lookups over a large index touch most leaves once:
    /// they descend and move on instead of paying for ~200 entries each.
    /// The set is bounded by the entry bound, and cleared past it.
    pub fn worth_filling(&self, leaf: PageId, max_entries: usize) -> bool {
        let mut st = self.write();
        if st.missed.remove(&leaf) {
            return true;
        }
        if st.missed.len() >= max_entries {
            st.missed.clear();
        }
        st.missed.insert(leaf);
        false
    }

    /// Caches the entries of one leaf, read under its shared lock after
    /// [`TreeCache::mark`] returned `mark` (nothing is cached if a writer
    /// changed the leaf since). `entries` holds (key, OID) pairs in key order.
    pub fn fill(&self, mark: u64, leaf: PageId, entries: &[(&[u8], Oid)], max_entries: usize) {
        self.fill_with_gaps(mark, leaf, entries, None, max_entries)
    }

    /// [`TreeCache::fill`] under key-range locking: `gaps[i]` is the lock
    /// on the gap just below `entries[i]`, so each key's entry keeps the
    /// one past its last value.
    pub fn fill_with_gaps(
        &self,
        mark: u64,
        leaf: PageId,
        entries: &[(&[u8], Oid)],
        gaps: Option<&[Resource]>,
        max_entries: usize,
    ) {
        if entries.len() < 3 {
            return;
        }
        let first = entries[0].0;
        let last = entries[entries.len() - 1].0;
        let mut st = self.write();
        let version = st.version(leaf);
        if version >= mark {
            return;
        }
        // Already cached (a lookup of a key at the leaf's end misses every
        // time): one probe instead of one per entry.
        let mid = entries[entries.len() / 2].0;
        if mid != first
            && mid != last
            && st
                .entries
                .get(mid)
                .is_some_and(|e| e.leaf == leaf && e.version == version)
        {
            return;
        }
        if st.entries.len() + entries.len() > max_entries {
            st.entries.clear();
        }
        st.entries.reserve(entries.len());
        let mut i = 0;
        while i < entries.len() {
            let k = entries[i].0;
            let mut j = i + 1;
            while j < entries.len() && entries[j].0 == k {
                j += 1;
            }
            if k != first && k != last {
                if let Some(key) = Key::new(k) {
                    st.entries.insert(
                        key,
                        Entry {
                            leaf,
                            version,
                            first: entries[i].1,
                            rest: entries[i + 1..j].iter().map(|(_, o)| *o).collect(),
                            past: gaps.and_then(|g| g.get(j).copied()),
                        },
                    );
                }
            }
            i = j;
        }
    }

    /// A writer changed, allocated or freed `pages` of the tree (and holds
    /// their exclusive locks): each gets a new version.
    pub fn changed(&self, pages: &[PageId]) {
        if pages.is_empty() {
            return;
        }
        let mut st = self.write();
        for p in pages {
            let v = self.counter.fetch_add(1, Ordering::AcqRel);
            st.versions.insert(*p, v);
        }
    }

    /// Drops every entry (versions stay).
    pub fn clear(&self) {
        self.write().entries.clear();
    }

    /// Entries cached now.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.read().entries.len()
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

    /// Another client changed `page`: whatever any tree cached from it
    /// stops validating.
    pub fn page_changed(&self, page: PageId) {
        for t in self.trees.read().unwrap_or_else(|e| e.into_inner()).values() {
            t.changed(&[page]);
        }
    }

    /// Drops every tree's entries.
    pub fn clear(&self) {
        for t in self.trees.read().unwrap_or_else(|e| e.into_inner()).values() {
            t.clear();
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

    fn keys(n: u8, len: usize) -> Vec<Vec<u8>> {
        (0..n).map(|k| vec![k; len]).collect()
    }

    fn pairs(keys: &[Vec<u8>]) -> Vec<(&[u8], Oid)> {
        keys.iter().enumerate().map(|(i, k)| (&k[..], oid(i as u32))).collect()
    }

    #[test]
    fn fill_skips_the_leaf_ends_and_groups_duplicates() {
        let t = TreeCache::default();
        let keys: Vec<Vec<u8>> = [1u8, 2, 3, 3, 4, 5].iter().map(|k| vec![*k]).collect();
        t.fill(t.mark(), PageId(7), &pairs(&keys), 100);
        assert!(t.get(&[1], false, &mut Vec::new()).is_none(), "first key of the leaf");
        assert!(t.get(&[5], false, &mut Vec::new()).is_none(), "last key of the leaf");
        let mut out = Vec::new();
        let (leaf, v) = t.get(&[3], false, &mut out).unwrap();
        assert_eq!((leaf, v), (PageId(7), 0));
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
    fn long_keys_are_not_cached() {
        let t = TreeCache::default();
        let keys: Vec<Vec<u8>> = (0u8..5).map(|k| vec![k; KEY_MAX + usize::from(k % 2)]).collect();
        t.fill(t.mark(), PageId(7), &pairs(&keys), 100);
        assert!(
            t.get(&keys[2], false, &mut Vec::new()).is_some(),
            "a key of exactly KEY_MAX bytes"
        );
        assert!(
            t.get(&keys[1], false, &mut Vec::new()).is_none(),
            "a key over KEY_MAX bytes"
        );
        assert!(t.get(&keys[3], false, &mut Vec::new()).is_none());
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn a_changed_leaf_invalidates_its_entries_only() {
        let t = TreeCache::default();
        let (a, b) = (keys(5, 1), (10u8..15).map(|k| vec![k]).collect::<Vec<_>>());
        t.fill(t.mark(), PageId(7), &pairs(&a), 100);
        t.fill(t.mark(), PageId(8), &pairs(&b), 100);
        let (leaf, v) = t.get(&[2], false, &mut Vec::new()).unwrap();
        assert!(t.still(leaf, v));
        t.changed(&[PageId(7)]);
        assert!(!t.still(leaf, v), "a reader holding the entry must re-check");
        assert!(t.get(&[2], false, &mut Vec::new()).is_none());
        assert!(
            t.get(&[12], false, &mut Vec::new()).is_some(),
            "another leaf's entries stay"
        );
    }

    #[test]
    fn a_fill_read_before_a_change_is_refused() {
        let t = TreeCache::default();
        let a = keys(5, 1);
        let mark = t.mark();
        t.changed(&[PageId(7)]);
        t.fill(mark, PageId(7), &pairs(&a), 100);
        assert_eq!(t.len(), 0, "filled with a leaf read before a change");
        t.fill(t.mark(), PageId(7), &pairs(&a), 100);
        assert_eq!(t.len(), 3);
        let (_, v) = t.get(&[2], false, &mut Vec::new()).unwrap();
        assert!(v > 0);
    }

    #[test]
    fn a_leaf_is_worth_filling_on_its_second_miss() {
        let t = TreeCache::default();
        assert!(!t.worth_filling(PageId(7), 100));
        assert!(!t.worth_filling(PageId(8), 100));
        assert!(t.worth_filling(PageId(7), 100));
        assert!(!t.worth_filling(PageId(7), 100), "counting starts again after a fill");
        assert!(!t.worth_filling(PageId(9), 2), "past the bound the set starts over");
        assert!(!t.worth_filling(PageId(8), 2));
    }

    #[test]
    fn the_bound_drops_entries_but_keeps_versions() {
        let t = TreeCache::default();
        let k = keys(10, 1);
        let p = pairs(&k);
        t.fill(t.mark(), PageId(7), &p[..5], 6);
        let (leaf, v) = t.get(&[2], false, &mut Vec::new()).unwrap();
        t.changed(&[PageId(7)]);
        t.fill(t.mark(), PageId(8), &p[5..], 6);
        assert_eq!(t.len(), 3, "the old entries went to make room");
        assert!(t.get(&[6], false, &mut Vec::new()).is_some());
        assert!(!t.still(leaf, v), "versions survive a drop");
    }
}
