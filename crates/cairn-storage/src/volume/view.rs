//! [`SpaceView`]: a concurrent read view of the volume's space — which pages
//! are in use, which group owns each extent, how many pages the volume has,
//! which groups exist — that readers consult without the `Volume`.
//!
//! **Why.** The engine keeps the `Volume` behind one mutex, and that mutex is
//! held for whole system actions, which append to the log and may write pages
//! back (with an fsync, through the WAL rule). Object reads only need the four
//! answers above; asking the `Volume` for them would queue every reader behind
//! one cold allocation. The view holds a compact copy of what those answers
//! need (extent start → owning group, length and in-use bits; the page count;
//! the set of group ids) under its own `RwLock`, which is only ever held for
//! an in-memory lookup or update — never across I/O — and under which nothing
//! else is locked (a leaf in the engine's lock order).
//!
//! **Who writes it.** Only the `Volume` that owns it ([`super::Volume::view`]
//! hands out shared references). While a system action runs, the volume
//! notes *which* extents and groups it touches (allocating or freeing a page,
//! adding an extent to a group, creating a group; the page count is copied
//! every time); when the action is over it copies the current truth for those
//! keys into the view in one write-locked update (`Volume::publish_view`).
//! Opening or creating a volume publishes every group and extent it loaded.
//!
//! **Invariant.** Whenever no system action is in progress and the volume is
//! not poisoned, the view answers exactly what the `Volume`'s own
//! `is_page_in_use`, `group_of_page`, `page_count` and `group_name(..).is_some()`
//! answer (checked by `Volume::check_invariants`). Each action's changes
//! appear at once, all together, at a single point: **after** the action's
//! batch (page records, ALLOC/FREE markers, COMMIT) is appended to the log and
//! its pages are installed in the buffer pool, and before the `Volume`'s
//! mutex is released. That is exactly the moment at which a reader taking the
//! mutex could first see the new state, so the view shows nothing a reader
//! could not already see before it existed. In particular:
//!
//! - *A page is never shown in use before its formatted image is in the
//!   buffer pool,* nor the page count grown before the new pages are there, so
//!   a reader that checks the view and then reads the page finds the page the
//!   action wrote. Publishing earlier (when the in-use bit is set, inside the
//!   action) would be wrong: the action's pages are private until its batch is
//!   logged, so such a reader would find the old `Free` page, or a page past
//!   the end of the file; and the action could still fail and poison the
//!   volume, leaving the view showing a state that never existed.
//! - *A page is shown in use before its ALLOC is durable* (actions do not
//!   fsync). This is harmless: the pool holds no uncommitted data (no-steal),
//!   so what a reader finds on such a page is an empty, freshly formatted
//!   page; anything durable that depends on the allocation — the commit of
//!   the transaction it was made for — is appended to the log after the
//!   action's batch, and the log becomes durable in order, so that commit is
//!   never durable without the allocation. After a crash the allocation is
//!   either redone or given back, and the view is rebuilt at open from what
//!   recovery left.
//! - *A freed page is shown in use until the action ends,* while the pool may
//!   already hold its `Free` image. Readers already tolerate this: checking
//!   "in use" and then reading the page is not atomic even under the mutex,
//!   so the record layer checks the page type it reads.
//! - *If an action fails after changing pages* the volume is poisoned (its
//!   in-memory state has run ahead of the pages) and the view keeps the last
//!   published state, which is what the pool held before the action: a
//!   failed action's pages are not installed, unless installing them is what
//!   failed. The volume then refuses further work until reopened, and the
//!   reopened volume has a new view, loaded from what recovery left. Without a log (creation, tests, the
//!   checker) pages change in place and a failed action is not poisoned, so
//!   the view follows the volume's in-memory state as usual.
//!
//! A view belongs to one open `Volume`: after it is closed the view no longer
//! changes; a reopened volume has a new one.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{PoisonError, RwLock, RwLockReadGuard};

use crate::ids::{GroupId, PageId};

/// What the view knows of one extent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct ViewExtent {
    /// The group owning the extent.
    pub(super) group: GroupId,
    /// Pages in the extent (1..=64).
    pub(super) len: u32,
    /// Bit `i` set: page `start + i` is in use.
    pub(super) used: u64,
}

impl ViewExtent {
    fn is_used(&self, offset: u32) -> bool {
        offset < self.len && self.used.checked_shr(offset).is_some_and(|b| b & 1 == 1)
    }
}

/// The state a view answers from (see the module docs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct ViewState {
    /// Pages in the volume.
    pub(super) page_count: u32,
    /// Extent first page → the extent.
    pub(super) extents: BTreeMap<u32, ViewExtent>,
    /// Every group that exists.
    pub(super) groups: BTreeSet<GroupId>,
}

impl ViewState {
    fn extent_of(&self, id: PageId) -> Option<(u32, &ViewExtent)> {
        let (&start, x) = self.extents.range(..=id.0).next_back()?;
        // `start <= id` by the range, so the subtraction cannot wrap.
        let offset = id.0 - start;
        (offset < x.len).then_some((offset, x))
    }
}

/// One published change: the new page count and the new truth for each
/// extent and group an action touched (`None` / `false`: it no longer exists).
#[derive(Debug, Default)]
pub(super) struct ViewUpdate {
    pub(super) page_count: u32,
    pub(super) extents: Vec<(u32, Option<ViewExtent>)>,
    pub(super) groups: Vec<(GroupId, bool)>,
}

/// A read view of a volume's space, shared without the `Volume`'s mutex:
/// see the module docs for when it changes. Get one with
/// [`super::Volume::view`]; every method takes a short read lock and does no
/// I/O.
pub struct SpaceView {
    state: RwLock<ViewState>,
}

impl std::fmt::Debug for SpaceView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.read();
        f.debug_struct("SpaceView")
            .field("page_count", &s.page_count)
            .field("extents", &s.extents.len())
            .field("groups", &s.groups.len())
            .finish()
    }
}

impl SpaceView {
    /// An empty view of a volume of `page_count` pages (no groups, no extents).
    pub(super) fn new(page_count: u32) -> SpaceView {
        SpaceView {
            state: RwLock::new(ViewState {
                page_count,
                ..ViewState::default()
            }),
        }
    }

    /// The state, read-locked. A panic while the lock was held cannot leave
    /// the state half-updated in a way these answers depend on (updates only
    /// insert and remove whole map entries), so a poisoned lock is used as is.
    fn read(&self) -> RwLockReadGuard<'_, ViewState> {
        self.state.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// True if page `id` is an allocated (in-use) page of some extent.
    pub fn is_page_in_use(&self, id: PageId) -> bool {
        self.read().extent_of(id).is_some_and(|(offset, x)| x.is_used(offset))
    }

    /// The group owning the extent that holds page `id`, if any.
    pub fn group_of_page(&self, id: PageId) -> Option<GroupId> {
        self.read().extent_of(id).map(|(_, x)| x.group)
    }

    /// Pages in the volume.
    pub fn page_count(&self) -> u32 {
        self.read().page_count
    }

    /// True if group `id` exists.
    pub fn group_exists(&self, id: GroupId) -> bool {
        self.read().groups.contains(&id)
    }

    /// Applies one update under the write lock (in memory only).
    pub(super) fn apply(&self, update: ViewUpdate) {
        let mut s = self.state.write().unwrap_or_else(PoisonError::into_inner);
        s.page_count = update.page_count;
        for (start, x) in update.extents {
            match x {
                Some(x) => s.extents.insert(start, x),
                None => s.extents.remove(&start),
            };
        }
        for (id, exists) in update.groups {
            if exists {
                s.groups.insert(id);
            } else {
                s.groups.remove(&id);
            }
        }
    }

    /// A copy of the whole state (for `Volume::check_invariants`).
    pub(super) fn snapshot(&self) -> ViewState {
        self.read().clone()
    }

    /// Asserts the view's own invariants: extents are disjoint, non-empty,
    /// at most 64 pages, inside the page count, with no in-use bit past their
    /// end, and each owned by a group that exists.
    pub fn check_invariants(&self) {
        let s = self.read();
        let mut prev_end = 0u64;
        for (&start, x) in &s.extents {
            let end = u64::from(start) + u64::from(x.len);
            assert!(u64::from(start) >= prev_end, "extents overlap at page {start}");
            assert!((1..=64).contains(&x.len), "extent at page {start} has {} pages", x.len);
            assert!(
                end <= u64::from(s.page_count),
                "extent at page {start} ends past the volume"
            );
            assert!(
                x.len == 64 || x.used >> x.len == 0,
                "extent at page {start} marks pages past its end in use"
            );
            assert!(s.groups.contains(&x.group), "extent at page {start} has no group");
            prev_end = end;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view() -> SpaceView {
        let v = SpaceView::new(200);
        v.apply(ViewUpdate {
            page_count: 200,
            extents: vec![
                (
                    3,
                    Some(ViewExtent {
                        group: GroupId(0),
                        len: 8,
                        used: 0b1000_0101,
                    }),
                ),
                (
                    100,
                    Some(ViewExtent {
                        group: GroupId(4),
                        len: 64,
                        used: 1 << 63,
                    }),
                ),
            ],
            groups: vec![(GroupId(0), true), (GroupId(4), true)],
        });
        v.check_invariants();
        v
    }

    #[test]
    fn answers_come_from_the_extent_holding_the_page() {
        let v = view();
        let in_use: Vec<u32> = (0..300).filter(|&p| v.is_page_in_use(PageId(p))).collect();
        assert_eq!(in_use, vec![3, 5, 10, 163]);
        assert_eq!(v.group_of_page(PageId(2)), None);
        assert_eq!(v.group_of_page(PageId(3)), Some(GroupId(0)));
        assert_eq!(v.group_of_page(PageId(10)), Some(GroupId(0)));
        assert_eq!(v.group_of_page(PageId(11)), None, "just past the first extent");
        assert_eq!(v.group_of_page(PageId(163)), Some(GroupId(4)));
        assert_eq!(v.group_of_page(PageId(164)), None);
        assert_eq!(v.group_of_page(PageId(u32::MAX)), None);
        assert!(!v.is_page_in_use(PageId(u32::MAX)));
        assert_eq!(v.page_count(), 200);
        assert!(v.group_exists(GroupId(4)));
        assert!(!v.group_exists(GroupId(1)));
    }

    #[test]
    fn an_update_replaces_and_removes_whole_entries() {
        let v = view();
        v.apply(ViewUpdate {
            page_count: 210,
            extents: vec![
                (
                    3,
                    Some(ViewExtent {
                        group: GroupId(0),
                        len: 8,
                        used: 0b1,
                    }),
                ),
                (100, None),
            ],
            groups: vec![(GroupId(4), false), (GroupId(7), true)],
        });
        v.check_invariants();
        assert!(v.is_page_in_use(PageId(3)));
        assert!(!v.is_page_in_use(PageId(5)));
        assert_eq!(v.group_of_page(PageId(163)), None);
        assert!(!v.group_exists(GroupId(4)));
        assert!(v.group_exists(GroupId(7)));
        assert_eq!(v.page_count(), 210);
    }

    #[test]
    #[should_panic(expected = "overlap")]
    fn overlapping_extents_break_the_invariants() {
        let v = view();
        v.apply(ViewUpdate {
            page_count: 200,
            extents: vec![(
                9,
                Some(ViewExtent {
                    group: GroupId(0),
                    len: 2,
                    used: 0,
                }),
            )],
            groups: Vec::new(),
        });
        v.check_invariants();
    }

    #[test]
    fn a_damaged_extent_length_does_not_panic_a_reader() {
        // Lengths come from disk through the volume, which checks them; the
        // view still answers without overflowing a shift if one slipped by.
        let v = SpaceView::new(1000);
        v.apply(ViewUpdate {
            page_count: 1000,
            extents: vec![(
                10,
                Some(ViewExtent {
                    group: GroupId(0),
                    len: 100,
                    used: u64::MAX,
                }),
            )],
            groups: vec![(GroupId(0), true)],
        });
        assert!(v.is_page_in_use(PageId(73)));
        assert!(!v.is_page_in_use(PageId(74)));
        assert!(!v.is_page_in_use(PageId(109)));
        assert_eq!(v.group_of_page(PageId(109)), Some(GroupId(0)));
    }
}
