//! Replacement policies: which frame the buffer pool reuses when a page it
//! does not hold is asked for and no frame is free.
//!
//! A [`Replacer`] tracks the frames that hold a page and orders them by its
//! policy; it knows nothing about pins, dirty bits or locks. The pool owns
//! that state and passes a predicate to [`Replacer::victim`] saying which
//! frames may be evicted *now* (cached and unpinned), so the pin state has one
//! home and cannot drift between two structures. The replacer lives inside the
//! pool's state mutex; none of its methods block.
//!
//! Protocol between pool and replacer:
//! - [`Replacer::record_access`] when a frame is pinned (a hit) or has just
//!   been filled with a page; this starts tracking the frame if needed.
//! - [`Replacer::victim`] to choose a frame; the choice does *not* forget the
//!   frame, because the pool may still have to write it back first and may
//!   then give it up (the page it wanted was loaded meanwhile by another
//!   thread).
//! - [`Replacer::remove`] when the frame's page leaves it (evicted, or the
//!   frame is reassigned to another page).
//!
//! Two policies are provided: [`LruReplacer`] (least recently accessed first,
//! O(1) access through an intrusive list over frame indexes) and
//! [`ClockReplacer`] (second chance: a reference bit per frame and a sweeping
//! hand).

use std::fmt;

/// The index of a frame in a buffer pool (memory only; never on disk).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FrameIdx(pub usize);

impl fmt::Debug for FrameIdx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "frame {}", self.0)
    }
}

/// The replacement policies the pool offers.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum Policy {
    /// Least recently used: evict the unpinned frame accessed longest ago.
    #[default]
    Lru,
    /// CLOCK (second chance): a hand sweeps the frames, clearing reference
    /// bits, and evicts the first unpinned frame whose bit is already clear.
    Clock,
}

impl Policy {
    /// A fresh replacer of this policy for a pool of `frame_count` frames.
    pub fn new_replacer(self, frame_count: usize) -> Box<dyn Replacer> {
        match self {
            Policy::Lru => Box::new(LruReplacer::new(frame_count)),
            Policy::Clock => Box::new(ClockReplacer::new(frame_count)),
        }
    }
}

/// A replacement policy over the frames `0..frame_count` of one pool.
///
/// Frame indexes passed in are always below the `frame_count` the replacer
/// was built for.
pub trait Replacer: Send {
    /// Frame `frame` was just used (pinned on a hit, or filled with a page).
    /// Starts tracking it if it was not tracked.
    fn record_access(&mut self, frame: FrameIdx);

    /// Chooses a tracked frame for which `evictable` is true, by the policy,
    /// or `None` if there is none. The frame stays tracked until
    /// [`Replacer::remove`]; a policy may update its bookkeeping (CLOCK moves
    /// its hand and clears reference bits).
    fn victim(&mut self, evictable: &dyn Fn(FrameIdx) -> bool) -> Option<FrameIdx>;

    /// Stops tracking `frame` (its page left it). A no-op if not tracked.
    fn remove(&mut self, frame: FrameIdx);

    /// True if `frame` is tracked (used by the pool's `check_invariants`).
    fn is_tracked(&self, frame: FrameIdx) -> bool;

    /// How many frames are tracked.
    fn tracked_count(&self) -> usize;

    /// Panics if the replacer's internal state is inconsistent.
    fn check_invariants(&self);
}

/// Marks the end of the LRU list in the `prev`/`next` arrays.
const NIL: usize = usize::MAX;

/// Least-recently-used replacement.
///
/// Tracked frames form a doubly linked list threaded through two arrays
/// indexed by frame, most recently accessed at the head. An access moves the
/// frame to the head in O(1); a victim is the first evictable frame walking
/// from the tail.
#[derive(Debug)]
pub struct LruReplacer {
    /// Towards the head (more recent), or `NIL`.
    prev: Vec<usize>,
    /// Towards the tail (less recent), or `NIL`.
    next: Vec<usize>,
    tracked: Vec<bool>,
    /// Most recently accessed, or `NIL` when empty.
    head: usize,
    /// Least recently accessed, or `NIL` when empty.
    tail: usize,
    tracked_count: usize,
}

impl LruReplacer {
    /// An LRU replacer for `frame_count` frames, none tracked.
    pub fn new(frame_count: usize) -> LruReplacer {
        LruReplacer {
            prev: vec![NIL; frame_count],
            next: vec![NIL; frame_count],
            tracked: vec![false; frame_count],
            head: NIL,
            tail: NIL,
            tracked_count: 0,
        }
    }

    fn unlink(&mut self, f: usize) {
        debug_assert!(self.tracked[f]);
        let (p, n) = (self.prev[f], self.next[f]);
        if p == NIL {
            self.head = n;
        } else {
            self.next[p] = n;
        }
        if n == NIL {
            self.tail = p;
        } else {
            self.prev[n] = p;
        }
        self.prev[f] = NIL;
        self.next[f] = NIL;
        self.tracked[f] = false;
        self.tracked_count -= 1;
    }

    fn push_head(&mut self, f: usize) {
        debug_assert!(!self.tracked[f]);
        self.prev[f] = NIL;
        self.next[f] = self.head;
        if self.head == NIL {
            self.tail = f;
        } else {
            self.prev[self.head] = f;
        }
        self.head = f;
        self.tracked[f] = true;
        self.tracked_count += 1;
    }
}

impl Replacer for LruReplacer {
    fn record_access(&mut self, frame: FrameIdx) {
        if self.tracked[frame.0] {
            self.unlink(frame.0);
        }
        self.push_head(frame.0);
    }

    fn victim(&mut self, evictable: &dyn Fn(FrameIdx) -> bool) -> Option<FrameIdx> {
        let mut f = self.tail;
        while f != NIL {
            if evictable(FrameIdx(f)) {
                return Some(FrameIdx(f));
            }
            f = self.prev[f];
        }
        None
    }

    fn remove(&mut self, frame: FrameIdx) {
        if self.tracked[frame.0] {
            self.unlink(frame.0);
        }
    }

    fn is_tracked(&self, frame: FrameIdx) -> bool {
        self.tracked[frame.0]
    }

    fn tracked_count(&self) -> usize {
        self.tracked_count
    }

    fn check_invariants(&self) {
        let n = self.tracked.len();
        assert_eq!(self.prev.len(), n);
        assert_eq!(self.next.len(), n);
        // Walk head → tail: links agree both ways, every node is tracked,
        // and the walk ends (no cycle) at `tail` after `tracked_count` nodes.
        let mut seen = 0usize;
        let mut prev = NIL;
        let mut f = self.head;
        while f != NIL {
            assert!(self.tracked[f], "LRU list holds untracked frame {f}");
            assert_eq!(self.prev[f], prev, "LRU back link of frame {f}");
            seen += 1;
            assert!(seen <= n, "LRU list has a cycle");
            prev = f;
            f = self.next[f];
        }
        assert_eq!(self.tail, prev, "LRU tail");
        assert_eq!(seen, self.tracked_count, "LRU tracked count");
        assert_eq!(
            self.tracked.iter().filter(|&&t| t).count(),
            self.tracked_count,
            "LRU tracked flags"
        );
    }
}

/// CLOCK (second-chance) replacement.
///
/// Each tracked frame has a reference bit, set on every access. The hand
/// sweeps the frames in index order: an evictable frame with its bit set loses
/// the bit and is passed over; the first evictable frame with a clear bit is
/// the victim, and the hand stops just past it. Frames that are not evictable
/// are skipped and keep their bit. Two full sweeps visit every evictable frame
/// with a clear bit, so `victim` is bounded.
#[derive(Debug)]
pub struct ClockReplacer {
    tracked: Vec<bool>,
    referenced: Vec<bool>,
    /// The next frame the hand looks at.
    hand: usize,
    tracked_count: usize,
}

impl ClockReplacer {
    /// A CLOCK replacer for `frame_count` frames, none tracked, hand at 0.
    pub fn new(frame_count: usize) -> ClockReplacer {
        ClockReplacer {
            tracked: vec![false; frame_count],
            referenced: vec![false; frame_count],
            hand: 0,
            tracked_count: 0,
        }
    }
}

impl Replacer for ClockReplacer {
    fn record_access(&mut self, frame: FrameIdx) {
        if !self.tracked[frame.0] {
            self.tracked[frame.0] = true;
            self.tracked_count += 1;
        }
        self.referenced[frame.0] = true;
    }

    fn victim(&mut self, evictable: &dyn Fn(FrameIdx) -> bool) -> Option<FrameIdx> {
        let n = self.tracked.len();
        for _ in 0..2 * n {
            let f = self.hand;
            self.hand = (self.hand + 1) % n;
            if !self.tracked[f] || !evictable(FrameIdx(f)) {
                continue;
            }
            if self.referenced[f] {
                self.referenced[f] = false;
            } else {
                return Some(FrameIdx(f));
            }
        }
        None
    }

    fn remove(&mut self, frame: FrameIdx) {
        if self.tracked[frame.0] {
            self.tracked[frame.0] = false;
            self.tracked_count -= 1;
        }
        self.referenced[frame.0] = false;
    }

    fn is_tracked(&self, frame: FrameIdx) -> bool {
        self.tracked[frame.0]
    }

    fn tracked_count(&self) -> usize {
        self.tracked_count
    }

    fn check_invariants(&self) {
        let n = self.tracked.len();
        assert_eq!(self.referenced.len(), n);
        assert!(self.hand < n || n == 0, "CLOCK hand {} out of range", self.hand);
        assert_eq!(
            self.tracked.iter().filter(|&&t| t).count(),
            self.tracked_count,
            "CLOCK tracked count"
        );
        for f in 0..n {
            assert!(
                self.tracked[f] || !self.referenced[f],
                "CLOCK untracked frame {f} has its reference bit set"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(_: FrameIdx) -> bool {
        true
    }

    /// Takes victims until none is left, removing each, as the pool does.
    fn drain(r: &mut dyn Replacer, evictable: &dyn Fn(FrameIdx) -> bool) -> Vec<usize> {
        let mut order = Vec::new();
        while let Some(f) = r.victim(evictable) {
            r.remove(f);
            r.check_invariants();
            order.push(f.0);
        }
        order
    }

    #[test]
    fn lru_evicts_least_recently_accessed_first() {
        let mut r = LruReplacer::new(4);
        for f in [0, 1, 2, 3, 1, 0] {
            r.record_access(FrameIdx(f));
            r.check_invariants();
        }
        assert_eq!(r.tracked_count(), 4);
        assert_eq!(drain(&mut r, &all), vec![2, 3, 1, 0]);
        assert_eq!(r.tracked_count(), 0);
        assert_eq!(r.victim(&all), None);
    }

    #[test]
    fn lru_skips_frames_that_are_not_evictable_and_keeps_them() {
        let mut r = LruReplacer::new(4);
        for f in [0, 1, 2, 3] {
            r.record_access(FrameIdx(f));
        }
        let not_0_or_1 = |f: FrameIdx| f.0 >= 2;
        assert_eq!(r.victim(&not_0_or_1), Some(FrameIdx(2)));
        // A victim that is not removed is chosen again.
        assert_eq!(r.victim(&not_0_or_1), Some(FrameIdx(2)));
        assert_eq!(drain(&mut r, &not_0_or_1), vec![2, 3]);
        assert!(r.is_tracked(FrameIdx(0)) && r.is_tracked(FrameIdx(1)));
        assert_eq!(r.victim(&not_0_or_1), None);
        assert_eq!(drain(&mut r, &all), vec![0, 1]);
    }

    #[test]
    fn lru_remove_in_the_middle_keeps_the_order() {
        let mut r = LruReplacer::new(5);
        for f in [4, 3, 2, 1, 0] {
            r.record_access(FrameIdx(f));
        }
        r.remove(FrameIdx(2));
        r.remove(FrameIdx(2));
        r.check_invariants();
        r.record_access(FrameIdx(4));
        assert_eq!(drain(&mut r, &all), vec![3, 1, 0, 4]);
    }

    #[test]
    fn clock_gives_referenced_frames_a_second_chance() {
        let mut r = ClockReplacer::new(4);
        for f in [0, 1, 2, 3] {
            r.record_access(FrameIdx(f));
        }
        // Every bit is set: the hand clears all four and takes frame 0.
        assert_eq!(r.victim(&all), Some(FrameIdx(0)));
        r.remove(FrameIdx(0));
        r.record_access(FrameIdx(0));
        r.record_access(FrameIdx(2));
        r.check_invariants();
        // Hand at 1: frame 1's bit is clear.
        assert_eq!(r.victim(&all), Some(FrameIdx(1)));
        r.remove(FrameIdx(1));
        // Hand at 2: frame 2 was referenced again, frame 3 was not.
        assert_eq!(r.victim(&all), Some(FrameIdx(3)));
        r.remove(FrameIdx(3));
        // Hand at 0: frame 0 (bit set) is passed over once, then frame 2
        // (bit cleared on the last sweep) is taken.
        assert_eq!(r.victim(&all), Some(FrameIdx(2)));
        r.remove(FrameIdx(2));
        assert_eq!(r.victim(&all), Some(FrameIdx(0)));
        r.remove(FrameIdx(0));
        assert_eq!(r.victim(&all), None);
        r.check_invariants();
    }

    #[test]
    fn clock_skips_frames_that_are_not_evictable_and_keeps_their_bit() {
        let mut r = ClockReplacer::new(3);
        for f in [0, 1, 2] {
            r.record_access(FrameIdx(f));
        }
        let not_0 = |f: FrameIdx| f.0 != 0;
        assert_eq!(r.victim(&not_0), Some(FrameIdx(1)));
        r.remove(FrameIdx(1));
        assert_eq!(r.victim(&not_0), Some(FrameIdx(2)));
        r.remove(FrameIdx(2));
        assert_eq!(r.victim(&not_0), None);
        // Frame 0 was never swept, so its bit is still set: it gets a second
        // chance before being taken.
        assert!(r.referenced[0]);
        assert_eq!(r.victim(&all), Some(FrameIdx(0)));
    }

    #[test]
    fn empty_replacers_have_no_victim() {
        for policy in [Policy::Lru, Policy::Clock] {
            let mut r = policy.new_replacer(0);
            assert_eq!(r.victim(&all), None);
            r.check_invariants();
            let mut r = policy.new_replacer(3);
            assert_eq!(r.victim(&all), None);
            r.check_invariants();
        }
    }
}
