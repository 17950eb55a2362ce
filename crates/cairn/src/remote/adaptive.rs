//! The adaptive client's fetch policy (issue 14; ARCHITECTURE.md): an
//! object-server client ([`super::ObjectStore`]) that fetches a whole
//! page's worth of objects where the application uses much of each page it
//! touches, and single objects where it does not.
//!
//! None of DeWitt et al.'s systems could choose: a page server ships whole
//! pages whatever part of them is used, an object server one object per
//! request however well the objects are clustered. The adaptive client
//! speaks the object protocol (object locks, object callbacks, after-images
//! of the objects it changed at commit) and, per *run* of pages (
//! [`AdaptivePolicy::run_pages`] consecutive page numbers: a cluster of
//! one group's pages, as groups allocate pages in runs), chooses how it
//! fetches an object it does not hold:
//!
//! - **pages**: OBJ_FETCH in mode [`cairn_net::object_service::OBJ_S_PAGE`]:
//!   the object and its page in one round trip — the page whole if no
//!   writer is on it (its image kept under one right on the page, its
//!   small objects read in place from it: dual buffering, pages and
//!   objects in one cache), else every other small object of it the
//!   server can lock without waiting, each kept under a right of its own
//!   (the cache evicts the least recently used first: one never read ages
//!   from its arrival). Objects and images of pages a running transaction
//!   changes stay cached until it ends, as the page client keeps its
//!   changed pages (no steal);
//! - **objects**: OBJ_FETCH of the object alone (or of the batch the caller
//!   named together).
//!
//! **The measure.** Every object a transaction reads counts toward a
//! *visit* of its home page: a page enters a window of the
//! [`AdaptivePolicy::window_pages`] pages touched last, and when it leaves
//! the window its visit is a sample — how many distinct objects of it were
//! read, and what fraction of the page's objects that is (the count of a
//! page fetched whole is known; otherwise it is estimated from the page
//! size and the mean size of the objects seen). The measure is the same in
//! both modes: it counts what the application used, not what was fetched.
//!
//! **The decision and its hysteresis.** Each run keeps a moving mean of the
//! objects used per visit (each sample weighs 1/32; a new run's starts in
//! the middle of the band below). Fetching a page costs one round trip and
//! a page of bytes; fetching the objects used costs a round trip each. On
//! today's networks (and on loopback) a round trip costs far more than a
//! page of bytes, so a page pays as soon as a visit uses more than one
//! object on average: a run fetches pages while its visits use at least
//! [`AdaptivePolicy::to_pages`] objects (default 1.5), and single objects
//! once they use at most [`AdaptivePolicy::to_objects`] (default 1.1) —
//! then a page would ship a page of bytes, fill the cache with objects
//! nobody reads and lock the page, for nothing. Between the two a run keeps
//! its mode, and it turns to objects only after
//! [`AdaptivePolicy::min_samples`] samples since its last change, so a
//! workload at the edge does not flap; it turns back to pages as soon as
//! its mean says so — a run wrongly fetching pages wastes bytes, one
//! wrongly fetching objects a round trip per object (a smeared scan's
//! excursions into a run it has not reached yet turn the run to objects;
//! when the scan reaches it, its first visit turns it back).
//! A slower network (bytes dear) would raise both thresholds: they are the
//! policy's fields. A run not seen yet starts in the mode of the latest
//! decision (the start: pages).
//!
//! **Read-ahead.** A transaction that comes to pages of a run fetching
//! pages in sequence ([`AdaptivePolicy::sequence_pages`] consecutive page
//! numbers come to one after the other, each new to it: a scan in
//! physical order; once it runs, up to seven pages elsewhere between two
//! of its pages, a smeared scan's excursions, do not break it) has the
//! next
//! [`AdaptivePolicy::read_ahead_pages`] pages asked for before it needs
//! them (OBJ_FETCH in mode
//! [`cairn_net::object_service::OBJ_S_PAGE_AHEAD`], pipelined: the server
//! sends each that can go whole without a wait). Each page it then comes
//! to moves the window on by one more page; a page the server did not
//! send ends the sequence. A transaction's requests read ahead are all
//! answered before it ends.
//!
//! The counters ([`AdaptiveStats`], in `RemoteStats::adaptive`) show the
//! mode, the fetches of each kind, the switches, the pages read ahead and
//! the measure behind them.

use std::collections::VecDeque;

use cairn_storage::fxhash::FxHashMap;
use cairn_storage::{Oid, PageId};

/// How the adaptive client fetches an object it does not hold.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FetchMode {
    /// The object's whole page of objects, in one round trip.
    #[default]
    Pages,
    /// The object alone (or the batch named together).
    Objects,
}

/// The adaptive client's policy (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdaptivePolicy {
    /// Consecutive pages that share one decision (at least 1).
    pub run_pages: u32,
    /// Pages touched last whose visits are still open (at least 1).
    pub window_pages: usize,
    /// Objects used per visit at or above which a run fetches pages.
    pub to_pages: f64,
    /// Objects used per visit at or below which a run fetches objects
    /// (below `to_pages`: the band between is the hysteresis).
    pub to_objects: f64,
    /// Samples a run takes after a change before it may turn to objects
    /// again (it turns back to pages at once).
    pub min_samples: u32,
    /// The mode of a run before any sample.
    pub start: FetchMode,
    /// Consecutive pages a transaction comes to, in order, after which it
    /// reads ahead (at least 2).
    pub sequence_pages: u32,
    /// Pages read ahead of a transaction reading in sequence (0: none; at
    /// most [`READ_AHEAD_MAX`]).
    pub read_ahead_pages: u32,
}

/// [`AdaptivePolicy::read_ahead_pages`] at most.
pub const READ_AHEAD_MAX: u32 = 64;

impl Default for AdaptivePolicy {
    fn default() -> Self {
        AdaptivePolicy {
            run_pages: 32,
            window_pages: 64,
            to_pages: 1.5,
            to_objects: 1.1,
            min_samples: 16,
            start: FetchMode::Pages,
            sequence_pages: 3,
            read_ahead_pages: 4,
        }
    }
}

impl AdaptivePolicy {
    /// Checks the policy's bounds: an error names what is wrong.
    pub fn check(&self) -> Result<(), String> {
        if self.run_pages == 0 || self.window_pages == 0 {
            return Err("run_pages and window_pages must be at least 1".into());
        }
        if !(self.to_objects.is_finite() && self.to_pages.is_finite() && self.to_objects < self.to_pages) {
            return Err(format!(
                "to_objects ({}) must be below to_pages ({}), both finite",
                self.to_objects, self.to_pages
            ));
        }
        if self.sequence_pages < 2 || self.read_ahead_pages > READ_AHEAD_MAX {
            return Err(format!(
                "sequence_pages ({}) must be at least 2 and read_ahead_pages ({}) at most {READ_AHEAD_MAX}",
                self.sequence_pages, self.read_ahead_pages
            ));
        }
        Ok(())
    }
}

/// Pages a transaction came to last that a sequence may continue from:
/// a scan's excursions to pages elsewhere (a smeared set's moved records)
/// between two pages of its sequence do not end it.
const SEQUENCE_WINDOW: usize = 8;

/// A transaction's sequence of pages, for read-ahead (see the module
/// docs): the pages it came to last, and the head of its sequence.
#[derive(Clone, Debug, Default)]
pub(super) struct Sequence {
    /// The last [`SEQUENCE_WINDOW`] pages come to, oldest first.
    recent: VecDeque<PageId>,
    /// The sequence's last page and its length.
    head: Option<(PageId, u32)>,
}

impl Sequence {
    /// The sequence is broken (a page read ahead did not come).
    pub(super) fn stop(&mut self) {
        self.recent.clear();
        self.head = None;
    }

    /// Comes to `page` (not among the recent ones): the length of the
    /// sequence it ends (1: none).
    fn step(&mut self, page: PageId) -> u32 {
        let length = match self.head {
            // The sequence goes on, whatever pages came between.
            Some((h, n)) if h.0.checked_add(1) == Some(page.0) && self.recent.contains(&h) => n + 1,
            // A new one: as long as the pages come to just before it were
            // the ones before it, in order (pages come to near each other
            // in any order, as a traversal of clustered objects does, are
            // no sequence).
            _ => {
                1 + self
                    .recent
                    .iter()
                    .rev()
                    .zip(1u32..)
                    .take_while(|(p, k)| page.0.checked_sub(*k) == Some(p.0))
                    .count() as u32
            }
        };
        if length > 1 {
            self.head = Some((page, length));
        }
        if self.recent.len() == SEQUENCE_WINDOW {
            self.recent.pop_front();
        }
        self.recent.push_back(page);
        length
    }
}

/// The adaptive client's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AdaptiveStats {
    /// The mode of the latest decision (or the start).
    pub mode: FetchMode,
    /// Fetches of whole pages of objects (round trips).
    pub page_fetches: u64,
    /// Fetches of single objects or named batches (round trips).
    pub object_fetches: u64,
    /// Objects that came along with a page (not asked for by name).
    pub objects_with_pages: u64,
    /// Page visits sampled.
    pub visits: u64,
    /// Moving mean of the objects used per visit, in thousandths (all
    /// runs).
    pub used_per_visit_milli: u64,
    /// Moving mean of the fraction of a visited page's objects used, in
    /// thousandths (all runs).
    pub used_fraction_milli: u64,
    /// Runs switched from objects to pages.
    pub to_pages: u64,
    /// Runs switched from pages to objects.
    pub to_objects: u64,
    /// Pages asked for ahead of a transaction reading in sequence.
    pub pages_read_ahead: u64,
    /// Of those, the pages a transaction then came to (the rest came too
    /// late or were not needed).
    pub read_ahead_used: u64,
    /// Runs with a decision (sampled at least once).
    pub runs: u64,
    /// Of those, the runs fetching pages now.
    pub runs_fetching_pages: u64,
}

/// A run's decision.
struct Run {
    mode: FetchMode,
    /// Moving mean of objects used per visit.
    used: f64,
    /// Samples since the last change.
    samples: u32,
}

/// Objects of a page known to be read in its open visit (slots).
type Visit = Vec<u16>;

/// Weight of a new sample in a moving mean: long, so a burst of visits
/// that use one object (a scan's excursions to far pages) does not turn a
/// run that mostly uses whole pages to single objects.
const WEIGHT: f64 = 1.0 / 32.0;

/// Objects an open visit of a page of a run fetching objects reaches when
/// it is sampled then (and counted afresh from there): one such sample
/// turns a run at the middle of the band back to pages, a few one that
/// was long at one object per visit.
const EARLY_SAMPLE: usize = 8;
/// Pages whose object counts are remembered at most.
const KNOWN_MAX: usize = 1 << 16;

/// The policy's state: runs, the window of open visits, the counters.
pub(super) struct Adaptive {
    policy: AdaptivePolicy,
    page_size: usize,
    runs: FxHashMap<u32, Run>,
    window: VecDeque<PageId>,
    visits: FxHashMap<PageId, Visit>,
    /// Objects on a page, from its last page fetch.
    known: FxHashMap<PageId, u16>,
    /// Moving mean of the bytes of objects fetched.
    object_bytes: f64,
    used_mean: f64,
    fraction_mean: f64,
    stats: AdaptiveStats,
}

impl Adaptive {
    pub(super) fn new(policy: AdaptivePolicy, page_size: usize) -> Adaptive {
        Adaptive {
            policy,
            page_size,
            runs: FxHashMap::default(),
            window: VecDeque::new(),
            visits: FxHashMap::default(),
            known: FxHashMap::default(),
            object_bytes: 0.0,
            used_mean: 0.0,
            fraction_mean: 0.0,
            stats: AdaptiveStats {
                mode: policy.start,
                ..AdaptiveStats::default()
            },
        }
    }

    fn run_of(&self, page: PageId) -> u32 {
        page.0 / self.policy.run_pages
    }

    /// How an object of `page` not held is fetched now.
    pub(super) fn mode_for(&self, page: PageId) -> FetchMode {
        self.runs.get(&self.run_of(page)).map_or(self.stats.mode, |r| r.mode)
    }

    /// A transaction read `oid` (from the server or from the client).
    pub(super) fn note_read(&mut self, oid: Oid) {
        let objects = self.mode_for(oid.page) == FetchMode::Objects;
        if let Some(v) = self.visits.get_mut(&oid.page) {
            if !v.contains(&oid.slot.0) {
                v.push(oid.slot.0);
                // A run fetching objects one round trip each hears of a
                // long visit as it grows, not only when it closes (a
                // window of pages later).
                if objects && v.len() >= EARLY_SAMPLE {
                    let used = v.len();
                    v.clear();
                    self.sample(oid.page, used);
                }
            }
            return;
        }
        self.visits.insert(oid.page, vec![oid.slot.0]);
        self.window.push_back(oid.page);
        while self.window.len() > self.policy.window_pages {
            let Some(old) = self.window.pop_front() else { break };
            if let Some(v) = self.visits.remove(&old) {
                self.sample(old, v.len());
            }
        }
    }

    /// A fetch went out: in page mode (`pages`) or not.
    pub(super) fn note_fetch(&mut self, pages: bool) {
        if pages {
            self.stats.page_fetches += 1;
        } else {
            self.stats.object_fetches += 1;
        }
    }

    /// A transaction of `seq` comes to `page` (fetching it, or taking it
    /// read ahead: `ahead`): the pages to read ahead now (those of runs
    /// fetching pages; the caller leaves out the ones held or asked for).
    pub(super) fn came_to(&mut self, seq: &mut Sequence, page: PageId, ahead: bool) -> Vec<PageId> {
        if ahead {
            self.stats.read_ahead_used += 1;
        }
        if seq.recent.contains(&page) {
            return Vec::new();
        }
        if seq.step(page) < self.policy.sequence_pages || self.mode_for(page) != FetchMode::Pages {
            return Vec::new();
        }
        (1..=self.policy.read_ahead_pages)
            .filter_map(|k| page.0.checked_add(k).map(PageId))
            .filter(|p| self.mode_for(*p) == FetchMode::Pages)
            .collect()
    }

    /// `pages` were asked for ahead.
    pub(super) fn note_read_ahead(&mut self, pages: usize) {
        self.stats.pages_read_ahead += pages as u64;
    }

    /// A page fetch brought `objects` objects of `page` (those asked for
    /// and those that came along: `along`).
    pub(super) fn note_page(&mut self, page: PageId, objects: usize, along: usize) {
        if self.known.len() >= KNOWN_MAX {
            self.known.clear();
        }
        self.known.insert(page, objects.min(u16::MAX as usize) as u16);
        self.stats.objects_with_pages += along as u64;
    }

    /// An object of `len` bytes came from the server.
    pub(super) fn note_object_bytes(&mut self, len: usize) {
        let len = len as f64;
        self.object_bytes = if self.object_bytes == 0.0 {
            len
        } else {
            self.object_bytes + (len - self.object_bytes) * WEIGHT
        };
    }

    /// Objects on `page`: known from a page fetch, or estimated.
    fn objects_on(&self, page: PageId, used: usize) -> usize {
        let n = match self.known.get(&page) {
            Some(n) => usize::from(*n),
            // A slot costs its record header and directory entry (~8
            // bytes); the page header ~32.
            None if self.object_bytes > 0.0 => {
                ((self.page_size.saturating_sub(32)) as f64 / (self.object_bytes + 8.0)) as usize
            }
            None => used,
        };
        n.max(used).max(1)
    }

    /// A closed visit of `page` that read `used` distinct objects.
    fn sample(&mut self, page: PageId, used: usize) {
        let fraction = used as f64 / self.objects_on(page, used) as f64;
        let u = used as f64;
        let start = self.stats.mode;
        let p = self.policy;
        let run = self.run_of(page);
        // A new run's mean starts inside the band: only evidence moves it
        // out.
        let r = self.runs.entry(run).or_insert_with(|| Run {
            mode: start,
            used: (p.to_pages + p.to_objects) / 2.0,
            samples: 0,
        });
        r.used += (u - r.used) * WEIGHT;
        r.samples = r.samples.saturating_add(1);
        // Back to pages at once; to objects only after `min_samples`: a
        // run wrongly fetching pages wastes bytes, one wrongly fetching
        // objects a round trip per object.
        let next = match r.mode {
            FetchMode::Objects if r.used >= p.to_pages => Some(FetchMode::Pages),
            FetchMode::Pages if r.used <= p.to_objects && r.samples >= p.min_samples => Some(FetchMode::Objects),
            _ => None,
        };
        if let Some(m) = next {
            r.mode = m;
            r.samples = 0;
            match m {
                FetchMode::Pages => self.stats.to_pages += 1,
                FetchMode::Objects => self.stats.to_objects += 1,
            }
            self.stats.mode = m;
        }
        self.stats.visits += 1;
        if self.stats.visits == 1 {
            self.used_mean = u;
            self.fraction_mean = fraction;
        } else {
            self.used_mean += (u - self.used_mean) * WEIGHT;
            self.fraction_mean += (fraction - self.fraction_mean) * WEIGHT;
        }
    }

    /// The counters now.
    pub(super) fn stats(&self) -> AdaptiveStats {
        AdaptiveStats {
            used_per_visit_milli: (self.used_mean * 1000.0) as u64,
            used_fraction_milli: (self.fraction_mean * 1000.0) as u64,
            runs: self.runs.len() as u64,
            runs_fetching_pages: self.runs.values().filter(|r| r.mode == FetchMode::Pages).count() as u64,
            ..self.stats
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn oid(page: u32, slot: u16) -> Oid {
        Oid {
            page: PageId(page),
            slot: cairn_storage::SlotIdx(slot),
            uniq: cairn_storage::Uniq(1),
        }
    }

    fn policy() -> AdaptivePolicy {
        AdaptivePolicy {
            window_pages: 4,
            min_samples: 4,
            ..AdaptivePolicy::default()
        }
    }

    /// Reads every object of `pages` pages from `first` (`per_page` each).
    fn read_pages(a: &mut Adaptive, first: u32, pages: u32, per_page: u16) {
        for p in first..first + pages {
            for s in 0..per_page {
                a.note_read(oid(p, s));
            }
        }
    }

    #[test]
    fn scattered_reads_switch_a_run_to_objects_and_clustered_ones_back() {
        let mut a = Adaptive::new(policy(), 4096);
        a.note_object_bytes(100);
        assert_eq!(a.mode_for(PageId(3)), FetchMode::Pages);
        read_pages(&mut a, 0, 20, 10);
        assert_eq!(a.mode_for(PageId(3)), FetchMode::Pages, "{:?}", a.stats());
        // One object per page: the run goes to objects once the mean has
        // come down.
        for _ in 0..6 {
            read_pages(&mut a, 0, 30, 1);
        }
        let s = a.stats();
        assert_eq!(a.mode_for(PageId(3)), FetchMode::Objects, "{s:?}");
        assert_eq!((s.to_objects, s.to_pages), (1, 0));
        assert_eq!(s.mode, FetchMode::Objects);
        // Clustered again: back to pages.
        read_pages(&mut a, 0, 30, 6);
        let s = a.stats();
        assert_eq!(a.mode_for(PageId(3)), FetchMode::Pages, "{s:?}");
        assert_eq!((s.to_objects, s.to_pages), (1, 1));
        assert!(s.visits > 0 && s.used_fraction_milli > 0);
    }

    #[test]
    fn a_long_visit_turns_a_run_fetching_objects_back_to_pages_before_it_closes() {
        let mut a = Adaptive::new(
            AdaptivePolicy {
                start: FetchMode::Objects,
                ..policy()
            },
            4096,
        );
        // The run's mean starts mid-band; one page read object by object
        // (its visit stays open: the window holds 4 pages).
        for s in 0..EARLY_SAMPLE as u16 - 1 {
            a.note_read(oid(0, s));
            assert_eq!(a.mode_for(PageId(0)), FetchMode::Objects, "after {} objects", s + 1);
        }
        a.note_read(oid(0, EARLY_SAMPLE as u16));
        let s = a.stats();
        assert_eq!(a.mode_for(PageId(0)), FetchMode::Pages, "{s:?}");
        assert_eq!((s.to_pages, s.visits), (1, 1), "sampled while open");
    }

    #[test]
    fn pages_come_to_in_sequence_are_read_ahead_and_a_break_starts_the_count_again() {
        let mut a = Adaptive::new(policy(), 4096);
        let mut seq = Sequence::default();
        let ahead = |from: u32| (from..from + 4).map(PageId).collect::<Vec<_>>();
        // Two pages in sequence are not yet one; the third is.
        assert!(a.came_to(&mut seq, PageId(10), false).is_empty());
        assert!(a.came_to(&mut seq, PageId(11), false).is_empty());
        assert_eq!(a.came_to(&mut seq, PageId(12), false), ahead(13));
        // Coming to the same page again changes nothing.
        assert!(a.came_to(&mut seq, PageId(12), false).is_empty());
        // Each next page (read ahead) moves the window on.
        assert_eq!(a.came_to(&mut seq, PageId(13), true), ahead(14));
        assert_eq!(a.stats().read_ahead_used, 1);
        // Excursions elsewhere between two pages of the sequence do not
        // end it (a smeared scan's moved records) ...
        for p in [100, 7, 300] {
            assert!(a.came_to(&mut seq, PageId(p), false).is_empty());
        }
        assert_eq!(a.came_to(&mut seq, PageId(14), true), ahead(15));
        // ... unless they go on past the window: then the count starts
        // again from the pages come to lately.
        for p in 200..200 + SEQUENCE_WINDOW as u32 {
            assert!(a.came_to(&mut seq, PageId(p * 2), false).is_empty());
        }
        assert!(a.came_to(&mut seq, PageId(15), false).is_empty());
        // Pages before it come to in another order (or with others
        // between) start no sequence.
        let mut near = Sequence::default();
        for p in [60, 100, 61, 200, 62, 64, 63, 65] {
            assert!(a.came_to(&mut near, PageId(p), false).is_empty(), "page {p}");
        }
        // A jump starts the count again; so does a page read ahead that
        // did not come.
        assert!(a.came_to(&mut seq, PageId(40), false).is_empty());
        assert!(a.came_to(&mut seq, PageId(41), false).is_empty());
        seq.stop();
        assert!(a.came_to(&mut seq, PageId(42), false).is_empty());
        assert!(a.came_to(&mut seq, PageId(43), false).is_empty());
        assert_eq!(a.came_to(&mut seq, PageId(44), false), ahead(45));
        // Backwards is no sequence.
        let mut back = Sequence::default();
        for p in (50..60).rev() {
            assert!(a.came_to(&mut back, PageId(p), false).is_empty(), "page {p}");
        }
        // A run fetching objects is not read ahead; nor is anything with a
        // read-ahead of 0 pages.
        let mut b = Adaptive::new(
            AdaptivePolicy {
                start: FetchMode::Objects,
                ..policy()
            },
            4096,
        );
        let mut c = Adaptive::new(
            AdaptivePolicy {
                read_ahead_pages: 0,
                ..policy()
            },
            4096,
        );
        let (mut sb, mut sc) = (Sequence::default(), Sequence::default());
        for p in 0..10 {
            assert!(b.came_to(&mut sb, PageId(p), false).is_empty());
            assert!(c.came_to(&mut sc, PageId(p), false).is_empty());
        }
        assert!(AdaptivePolicy {
            read_ahead_pages: READ_AHEAD_MAX + 1,
            ..policy()
        }
        .check()
        .is_err());
        assert!(AdaptivePolicy {
            sequence_pages: 1,
            ..policy()
        }
        .check()
        .is_err());
    }

    #[test]
    fn the_band_between_thresholds_keeps_the_mode() {
        let mut a = Adaptive::new(policy(), 4096);
        // 1⅓ objects per visit: inside the band, from either mode.
        for round in 0..40u32 {
            let per = if round % 3 == 2 { 2 } else { 1 };
            read_pages(&mut a, round * 2, 1, per);
        }
        assert_eq!(a.stats().to_objects, 0, "{:?}", a.stats());
        let mut b = Adaptive::new(
            AdaptivePolicy {
                start: FetchMode::Objects,
                ..policy()
            },
            4096,
        );
        for round in 0..40u32 {
            let per = if round % 3 == 2 { 2 } else { 1 };
            read_pages(&mut b, round * 2, 1, per);
        }
        assert_eq!(b.stats().to_pages, 0, "{:?}", b.stats());
    }

    #[test]
    fn runs_decide_apart_and_a_new_run_starts_in_the_latest_mode() {
        let mut a = Adaptive::new(
            AdaptivePolicy {
                run_pages: 8,
                ..policy()
            },
            4096,
        );
        // Run 0 (pages 0..8) scattered; run 1 (8..16) clustered.
        for _ in 0..10 {
            read_pages(&mut a, 0, 8, 1);
            read_pages(&mut a, 8, 8, 5);
        }
        assert_eq!(a.mode_for(PageId(1)), FetchMode::Objects);
        assert_eq!(a.mode_for(PageId(9)), FetchMode::Pages);
        assert_eq!(a.stats().runs, 2);
        assert_eq!(a.stats().runs_fetching_pages, 1);
    }

    #[test]
    fn a_known_page_count_sets_the_fraction() {
        let mut a = Adaptive::new(policy(), 4096);
        a.note_page(PageId(0), 10, 9);
        a.note_read(oid(0, 0));
        a.note_read(oid(0, 1));
        // Push page 0 out of the window.
        read_pages(&mut a, 1, 4, 1);
        let s = a.stats();
        assert_eq!(s.visits, 1);
        assert_eq!(s.used_fraction_milli, 200);
        assert_eq!(s.objects_with_pages, 9);
        assert!(policy().check().is_ok());
        assert!(AdaptivePolicy {
            to_objects: 3.0,
            ..policy()
        }
        .check()
        .is_err());
    }
}
