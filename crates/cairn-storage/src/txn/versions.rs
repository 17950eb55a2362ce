//! Snapshot reads: the version store of page before-images, and the
//! snapshots that read from it.
//!
//! A **snapshot** ([`super::Db::begin_read_only`]) reads the database as it
//! was when it began: every commit whose records lie at or below its LSN,
//! `S`, and nothing after. It takes no lock, so it never waits for a writer
//! and never makes one wait, and it never aborts for a conflict.
//!
//! **What it sees.** Commits append their records, wait for the log, then
//! install their pages one by one; a snapshot must not see half of one,
//! and must see every commit that returned before it began. So every
//! commit is registered as *in flight* from its first append (under the
//! store's mutex, with that append, each batch of records with the LSN
//! range it took) until its pages are installed. A snapshot that begins
//! when the log ends at `H` sees every record at or below `H` but those of
//! the commits in flight then (their ranges, kept with the snapshot): a
//! commit that returned is all visible even while an older one is still
//! installing, and one in flight is invisible, whichever of its pages it
//! installed already. Its LSN `S` is where the oldest commit in flight
//! began (or `H`, with none): every image at or below `S` is visible to it
//! (a record's LSN is where it ends, so an in-flight commit's records all
//! lie above its start). Every page image a snapshot sees is part of a
//! finished commit (or of a system action, whose pages no committed
//! reference reaches before it).

//! **Its pages.** A snapshot reads the committed image of a page if the
//! image's LSN is at most `S`, or visible to it; else the newest version
//! the store kept for the page whose LSN is visible. Every install of a
//! transaction's commit hands the image it replaces to the store first,
//! under the page's buffer frame held for writing, so a reader that saw
//! the new image finds the old one.

//! **Reclaiming.** A version `[from, to)` is needed while a snapshot whose
//! window `(S, H]` it overlaps (`from <= H`, `S < to`) runs, or while a
//! snapshot could still begin below `to` (a commit in flight at or below
//! it). After each commit the store drops every version that ends at or
//! below both the oldest snapshot's `S` and the horizon; when a snapshot
//! ends it sweeps all of them.

//! **Pages freed.** A page a commit frees is out of use now but was in
//! use for a snapshot that does not see that commit (its objects may still
//! live there for it). Each free is noted with its commit's LSN before the
//! space map lets the page go ([`Versions::note_freed`]), and a snapshot
//! counts a page in use if it is now or if it was freed by a commit it
//! does not see ([`Versions::freed_unseen`]); the notes go as versions do.
//! (A page freed before a snapshot began and allocated again after it is
//! counted in use too: the snapshot's objects never reach it.)

//! **Bounded.** Past [`super::DbOptions::snapshot_bytes_max`] bytes of
//! kept images, the oldest snapshots are ended early: their next read is
//! [`Error::SnapshotTooOld`], and their versions go. Writers never wait for
//! the store.

use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::fxhash::{FxHashMap, FxHashSet};
use crate::ids::{Lsn, PageId};

/// A running snapshot: its id and its LSN.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// Which snapshot (unique in the database's life).
    pub id: u64,
    /// It sees every record at or below this LSN (where the oldest commit
    /// in flight when it began started); above it, those of the commits
    /// that were not in flight then, up to the log's end then (see the
    /// module docs).
    pub lsn: Lsn,
}

/// What a running snapshot sees: every page image of LSN at most `low`,
/// and above it those up to `high` outside the `excluded` ranges (see the
/// module docs). A remote client gets its snapshot's window from the
/// server and decides with it whether a page it caches is part of what the
/// snapshot sees.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotWindow {
    /// Its LSN (`S`).
    pub low: Lsn,
    /// The log's end when it began (`H`).
    pub high: Lsn,
    /// The LSN ranges `(start, end]` of the commits in flight when it began.
    pub excluded: Vec<(Lsn, Lsn)>,
}

type Window = SnapshotWindow;

impl SnapshotWindow {
    /// True if a page image of LSN `lsn` is part of what the snapshot sees.
    pub fn sees(&self, lsn: Lsn) -> bool {
        lsn <= self.low || (lsn <= self.high && !self.excluded.iter().any(|&(s, e)| s < lsn && lsn <= e))
    }
}

/// Counters of the version store.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VersionStats {
    /// Page versions kept now.
    pub versions: u64,
    /// Bytes of the images kept now.
    pub bytes: u64,
    /// Snapshots running now.
    pub snapshots: u64,
    /// Snapshots ended early because the store reached its bound.
    pub expired: u64,
}

/// A kept image: the start of its validity and its bytes.
type Kept = (Lsn, Arc<[u8]>);

#[derive(Default)]
struct State {
    /// Kept images by (end of validity, page).
    by_to: BTreeMap<(Lsn, PageId), Kept>,
    /// Per page: start of validity → end, for the lookup by snapshot.
    by_page: FxHashMap<PageId, BTreeMap<Lsn, Lsn>>,
    bytes: usize,
    /// Running snapshots: id → what they see; and their LSNs, counted.
    snapshots: BTreeMap<u64, Window>,
    lsns: BTreeMap<Lsn, usize>,
    /// Snapshots ended early (until they end).
    expired: FxHashSet<u64>,
    expired_total: u64,
    next_id: u64,
    /// Commits in flight: first LSN → how many (they differ, but a count
    /// keeps removal exact) and the LSN ranges `(start, end]` of their
    /// batches of records.
    in_flight: BTreeMap<Lsn, (usize, Vec<(Lsn, Lsn)>)>,
    /// Pages freed, with the LSN of the commit that freed each (the latest).
    freed: FxHashMap<PageId, Lsn>,
}

impl State {
    /// The highest LSN a snapshot beginning now may see, given the log's
    /// `end` (the LSN the next record gets).
    fn horizon(&self, end: Lsn) -> Lsn {
        // A record's LSN is where it ends: the records of a commit that
        // begins at `first` all lie above it, those before it at or below.
        self.in_flight.keys().next().copied().unwrap_or(end)
    }

    /// True if a running snapshot's window overlaps `[from, to)`: it may
    /// read the version.
    fn needed(&self, from: Lsn, to: Lsn) -> bool {
        self.snapshots.values().any(|w| from <= w.high && w.low < to)
    }

    fn drop_version(&mut self, to: Lsn, page: PageId) {
        if let Some((from, image)) = self.by_to.remove(&(to, page)) {
            self.bytes -= image.len();
            if let Some(m) = self.by_page.get_mut(&page) {
                m.remove(&from);
                if m.is_empty() {
                    self.by_page.remove(&page);
                }
            }
        }
    }

    /// Drops the versions no running snapshot needs and none beginning at
    /// `horizon` or later can; `all` looks at every version, else only at
    /// those ending at or below the oldest snapshot (which none needs).
    fn prune(&mut self, horizon: Lsn, all: bool) {
        let oldest = self.lsns.keys().next().copied();
        let limit = match oldest {
            Some(s) if !all => Lsn(horizon.0.min(s.0)),
            _ => horizon,
        };
        let candidates: Vec<(Lsn, PageId, Lsn)> = self
            .by_to
            .range(..=(limit, PageId(u32::MAX)))
            .map(|(&(to, page), &(from, _))| (to, page, from))
            .collect();
        for (to, page, from) in candidates {
            if !self.needed(from, to) {
                self.drop_version(to, page);
            }
        }
        // A free every running snapshot sees, and every one beginning from
        // here will (it lies at or below the horizon), needs no note.
        if !self.freed.is_empty() {
            let windows = &self.snapshots;
            self.freed
                .retain(|_, at| *at > horizon || windows.values().any(|w| !w.sees(*at)));
        }
    }

    fn end_snapshot(&mut self, id: u64) {
        self.expired.remove(&id);
        if let Some(w) = self.snapshots.remove(&id) {
            if let Some(n) = self.lsns.get_mut(&w.low) {
                *n -= 1;
                if *n == 0 {
                    self.lsns.remove(&w.low);
                }
            }
        }
    }
}

/// The version store and the snapshots of one database.
pub(crate) struct Versions {
    state: Mutex<State>,
    /// Notified when a commit is no longer in flight.
    done: Condvar,
    bytes_max: usize,
}

impl Versions {
    pub(crate) fn new(bytes_max: usize) -> Versions {
        Versions {
            state: Mutex::new(State::default()),
            done: Condvar::new(),
            bytes_max,
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `append` (a batch of a commit's log records, returning where
    /// the log ended before it and the LSN of its last record) under the
    /// store's mutex and registers the commit in flight from there, unless
    /// `registered` says it already is; either way the batch's range is
    /// the commit's.
    pub(crate) fn append_in_flight<T>(
        &self,
        registered: &mut Option<Lsn>,
        append: impl FnOnce() -> Result<(Lsn, Lsn, T)>,
    ) -> Result<T> {
        let mut st = self.state();
        let (start, end, out) = append()?;
        let first = *registered.get_or_insert(start);
        let entry = st.in_flight.entry(first).or_insert((0, Vec::new()));
        if first == start {
            entry.0 += 1;
        }
        entry.1.push((start, end));
        Ok(out)
    }

    /// The commit registered at `first` has installed its pages (or
    /// failed): it is no longer in flight; versions nobody needs go.
    pub(crate) fn commit_done(&self, first: Lsn, end: Lsn) {
        let mut st = self.state();
        if let Some((n, _)) = st.in_flight.get_mut(&first) {
            *n -= 1;
            if *n == 0 {
                st.in_flight.remove(&first);
            }
        }
        if !st.by_to.is_empty() {
            let h = st.horizon(end);
            st.prune(h, false);
        }
        drop(st);
        self.done.notify_all();
    }

    /// True if a page image of one of the LSNs `lsns` was made by a commit
    /// in flight now.
    pub(crate) fn any_in_flight(&self, lsns: &[Lsn]) -> bool {
        let st = self.state();
        st.in_flight
            .values()
            .flat_map(|(_, ranges)| ranges)
            .any(|&(s, e)| lsns.iter().any(|&l| s < l && l <= e))
    }

    /// Waits until no commit that began before `first` is in flight: a
    /// commit built on a page image another commit still in flight made
    /// (object-level or key-range changes to the same page, applied to that
    /// commit's image whether or not it is installed yet) must not end
    /// before that one does, or a snapshot beginning in between would see
    /// it (and through its image, part of the other) without the rest of
    /// the other. The
    /// commits waited for are decided and installing: the wait is short
    /// and takes no lock. Bounded: past `limit` it gives up (a commit whose
    /// thread died with the database poisoned never ends).
    pub(crate) fn wait_for_older(&self, first: Lsn, limit: Duration) {
        let deadline = Instant::now() + limit;
        let mut st = self.state();
        while st.in_flight.range(..first).next().is_some() {
            let now = Instant::now();
            if now >= deadline {
                return;
            }
            st = self
                .done
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Keeps `image`, the committed image of `page` valid from its LSN
    /// `from` until `to`, the LSN of the image replacing it. Past the
    /// bound, the oldest snapshots end early.
    pub(crate) fn keep(&self, page: PageId, from: Lsn, to: Lsn, image: &[u8], end: Lsn) {
        if from >= to {
            return;
        }
        let mut st = self.state();
        let image: Arc<[u8]> = image.into();
        st.bytes += image.len();
        if let Some((_, old)) = st.by_to.insert((to, page), (from, image)) {
            st.bytes -= old.len();
        }
        st.by_page.entry(page).or_default().insert(from, to);
        while st.bytes > self.bytes_max {
            let Some((&id, _)) = st.snapshots.iter().min_by_key(|(_, w)| w.low) else {
                break;
            };
            st.end_snapshot(id);
            st.expired.insert(id);
            st.expired_total += 1;
            let h = st.horizon(end);
            st.prune(h, true);
        }
    }

    /// Begins a snapshot; `end` reads the log's end. It is read under the
    /// store's mutex, as commits append under it: read before, a commit
    /// could append and end in between, and the versions its installs kept
    /// be dropped as needed by nobody before this snapshot — which does not
    /// see that commit — is registered.
    pub(crate) fn begin(&self, end: impl FnOnce() -> Lsn) -> Snapshot {
        let mut st = self.state();
        let end = end();
        let lsn = st.horizon(end);
        let id = st.next_id;
        st.next_id += 1;
        let excluded: Vec<(Lsn, Lsn)> = st.in_flight.values().flat_map(|(_, r)| r.iter().copied()).collect();
        let window = Window {
            low: lsn,
            high: end,
            excluded,
        };
        st.snapshots.insert(id, window);
        *st.lsns.entry(lsn).or_insert(0) += 1;
        Snapshot { id, lsn }
    }

    /// Ends a snapshot; the versions only it needed go.
    pub(crate) fn end(&self, snap: Snapshot, end: Lsn) {
        let mut st = self.state();
        st.end_snapshot(snap.id);
        let h = st.horizon(end);
        st.prune(h, true);
    }

    /// The image of `page` the snapshot reads when the committed one has
    /// LSN `current`: `None` if it sees that one, else the newest version
    /// kept whose LSN it sees. An error if the snapshot was ended early.
    pub(crate) fn version_at(&self, page: PageId, snap: Snapshot, current: Lsn) -> Result<Option<Arc<[u8]>>> {
        let st = self.state();
        if st.expired.contains(&snap.id) {
            return Err(Error::SnapshotTooOld {
                lsn: snap.lsn.0,
                bytes_max: self.bytes_max as u64,
            });
        }
        let Some(w) = st.snapshots.get(&snap.id) else {
            return Err(Error::Internal(format!("snapshot {} is not running", snap.id)));
        };
        if w.sees(current) {
            return Ok(None);
        }
        let found = st.by_page.get(&page).and_then(|m| {
            m.range(..=w.high)
                .rev()
                .find(|(&from, _)| w.sees(from))
                .and_then(|(_, &to)| st.by_to.get(&(to, page)))
        });
        match found {
            Some((_, image)) => Ok(Some(Arc::clone(image))),
            None => Err(Error::Internal(format!(
                "page {page} has no version the snapshot at LSN {} sees (it did not exist then)",
                snap.lsn.0
            ))),
        }
    }

    /// Notes that the commit of LSN `at` frees `page` (called before the
    /// space map lets it go).
    pub(crate) fn note_freed(&self, page: PageId, at: Lsn) {
        self.state().freed.insert(page, at);
    }

    /// True if a commit the snapshot does not see freed `page`: the page
    /// was in use for it, whatever the space map says now.
    pub(crate) fn freed_unseen(&self, page: PageId, snap: Snapshot) -> bool {
        let st = self.state();
        match (st.freed.get(&page), st.snapshots.get(&snap.id)) {
            (Some(&at), Some(w)) => !w.sees(at),
            _ => false,
        }
    }

    /// The window of a running snapshot (`None` once it ended, or was
    /// ended early).
    pub(crate) fn window(&self, snap: Snapshot) -> Option<SnapshotWindow> {
        self.state().snapshots.get(&snap.id).cloned()
    }

    /// True if the snapshot was ended early.
    pub(crate) fn is_expired(&self, snap: Snapshot) -> bool {
        self.state().expired.contains(&snap.id)
    }

    pub(crate) fn stats(&self) -> VersionStats {
        let st = self.state();
        VersionStats {
            versions: st.by_to.len() as u64,
            bytes: st.bytes as u64,
            snapshots: st.snapshots.len() as u64,
            expired: st.expired_total,
        }
    }
}

/// Commits in flight, for tests.
#[cfg(test)]
pub(crate) fn in_flight_count(v: &Versions) -> usize {
    v.state().in_flight.values().map(|(n, _)| n).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn img(b: u8) -> Vec<u8> {
        vec![b; 16]
    }

    #[test]
    fn a_snapshot_finds_the_version_whose_range_holds_it_and_versions_go_when_unneeded() {
        let v = Versions::new(1 << 20);
        // A commit in flight from LSN 100: a snapshot begins below it.
        let mut reg = None;
        v.append_in_flight(&mut reg, || Ok((Lsn(100), Lsn(130), ()))).unwrap();
        let s = v.begin(|| Lsn(500));
        assert_eq!(s.lsn, Lsn(100));
        v.keep(PageId(7), Lsn(40), Lsn(120), &img(1), Lsn(500));
        v.commit_done(Lsn(100), Lsn(500));
        assert_eq!(&*v.version_at(PageId(7), s, Lsn(120)).unwrap().unwrap(), &img(1)[..]);
        assert!(v.version_at(PageId(8), s, Lsn(125)).is_err());
        // A later snapshot sees the new image (no version needed).
        let s2 = v.begin(|| Lsn(500));
        assert_eq!(s2.lsn, Lsn(500));
        assert_eq!(v.stats().versions, 1);
        v.end(s, Lsn(500));
        assert_eq!(v.stats().versions, 0, "only the ended snapshot needed it");
        v.end(s2, Lsn(500));
        assert_eq!(v.stats().snapshots, 0);
        assert_eq!(in_flight_count(&v), 0);
    }

    #[test]
    fn past_the_bound_the_oldest_snapshot_ends_early() {
        let v = Versions::new(40);
        let old = v.begin(|| Lsn(10));
        let young = v.begin(|| Lsn(30));
        for (i, to) in [(1u8, 20u64), (2, 40), (3, 60)] {
            v.keep(PageId(u32::from(i)), Lsn(5), Lsn(to), &img(i), Lsn(100));
        }
        assert!(v.is_expired(old), "the oldest snapshot went first");
        assert!(matches!(
            v.version_at(PageId(1), old, Lsn(20)),
            Err(Error::SnapshotTooOld { .. })
        ));
        assert!(!v.is_expired(young));
        assert!(v.stats().bytes <= 40);
        assert_eq!(v.stats().expired, 1);
    }

    #[test]
    fn versions_of_a_commit_in_flight_stay_until_it_is_done() {
        let v = Versions::new(1 << 20);
        let mut reg = None;
        v.append_in_flight(&mut reg, || Ok((Lsn(200), Lsn(220), ()))).unwrap();
        v.keep(PageId(1), Lsn(50), Lsn(210), &img(9), Lsn(300));
        // No snapshot runs, but one beginning now would need the version.
        let s = v.begin(|| Lsn(300));
        assert_eq!(&*v.version_at(PageId(1), s, Lsn(210)).unwrap().unwrap(), &img(9)[..]);
        v.end(s, Lsn(300));
        assert_eq!(v.stats().versions, 1, "still in flight");
        v.commit_done(Lsn(200), Lsn(300));
        assert_eq!(v.stats().versions, 0);
    }

    /// A page freed by a commit a snapshot does not see is in use for that
    /// snapshot, not for one that sees the commit; the note goes once no
    /// snapshot can miss the free.
    #[test]
    fn a_page_freed_by_a_commit_a_snapshot_does_not_see_is_in_use_for_it() {
        let v = Versions::new(1 << 20);
        let before = v.begin(|| Lsn(100));
        let mut c = None;
        v.append_in_flight(&mut c, || Ok((Lsn(100), Lsn(150), ()))).unwrap();
        v.note_freed(PageId(9), Lsn(150));
        let during = v.begin(|| Lsn(150));
        assert!(v.freed_unseen(PageId(9), before));
        assert!(
            v.freed_unseen(PageId(9), during),
            "the freeing commit is in flight for it"
        );
        assert!(!v.freed_unseen(PageId(8), before), "another page");
        v.commit_done(Lsn(100), Lsn(150));
        let after = v.begin(|| Lsn(150));
        assert!(!v.freed_unseen(PageId(9), after), "it sees the free");
        v.end(before, Lsn(150));
        assert!(!v.state().freed.is_empty(), "kept while a running snapshot misses it");
        v.end(during, Lsn(150));
        assert!(v.state().freed.is_empty(), "no snapshot misses the free any more");
        v.end(after, Lsn(150));
    }

    /// A commit that returned while an older one was still in flight is
    /// seen; the one in flight is not, neither the page it installed
    /// already nor the one it will install.
    #[test]
    fn a_snapshot_sees_a_finished_commit_above_one_still_in_flight() {
        let v = Versions::new(1 << 20);
        // C0 appends (100, 150] and installs page 1 at LSN 140.
        let mut c0 = None;
        v.append_in_flight(&mut c0, || Ok((Lsn(100), Lsn(150), ()))).unwrap();
        v.keep(PageId(1), Lsn(40), Lsn(140), &img(1), Lsn(150));
        // C1 appends (150, 200], installs page 2 at LSN 190 and is done.
        let mut c1 = None;
        v.append_in_flight(&mut c1, || Ok((Lsn(150), Lsn(200), ()))).unwrap();
        v.keep(PageId(2), Lsn(60), Lsn(190), &img(2), Lsn(200));
        v.commit_done(Lsn(150), Lsn(200));
        let s = v.begin(|| Lsn(200));
        assert_eq!(s.lsn, Lsn(100), "its LSN is C0's start");
        assert!(v.version_at(PageId(2), s, Lsn(190)).unwrap().is_none(), "C1 is seen");
        assert_eq!(
            &*v.version_at(PageId(1), s, Lsn(140)).unwrap().unwrap(),
            &img(1)[..],
            "C0's installed page is not"
        );
        // C0 installs page 3 at 145 after the snapshot began: not seen.
        v.keep(PageId(3), Lsn(70), Lsn(145), &img(3), Lsn(200));
        v.commit_done(Lsn(100), Lsn(200));
        assert_eq!(&*v.version_at(PageId(3), s, Lsn(145)).unwrap().unwrap(), &img(3)[..]);
        // A commit after the snapshot began is not seen either.
        let mut c2 = None;
        v.append_in_flight(&mut c2, || Ok((Lsn(200), Lsn(230), ()))).unwrap();
        v.keep(PageId(2), Lsn(190), Lsn(220), &img(4), Lsn(230));
        v.commit_done(Lsn(200), Lsn(230));
        assert!(v
            .version_at(PageId(2), s, Lsn(220))
            .unwrap()
            .is_some_and(|i| *i == img(4)[..]));
        // A new snapshot sees all of them.
        let s2 = v.begin(|| Lsn(230));
        assert_eq!(s2.lsn, Lsn(230));
        v.end(s, Lsn(230));
        v.end(s2, Lsn(230));
        assert_eq!(v.stats().versions, 0);
    }
}
