//! The buffer pool: a fixed set of page frames shared by many threads, in
//! front of a [`PageDevice`].
//!
//! The pool allocates `frame_count` page-sized frames once. A page table maps
//! each cached [`PageId`] to its frame; every frame has a pin count, a dirty
//! bit and the LSN of the page it holds (read from the page header with
//! [`page::lsn`]). Callers get pages through guards: [`BufferPool::read`]
//! (shared, many readers at once), [`BufferPool::write`] (exclusive, the page
//! is read from the device on a miss) and [`BufferPool::create`] (exclusive, a
//! zero-filled frame for a brand-new page, nothing read). A guard pins its
//! frame, and **a pinned frame is never evicted**. When every frame is pinned
//! a request fails with [`Error::LimitExceeded`] (`what: "pinned buffer
//! frames"`) instead of waiting: waiting could deadlock threads that each hold
//! some pages and want more.
//!
//! Which unpinned frame is reused on a miss is the [`Replacer`]'s choice
//! ([`Policy::Lru`] or [`Policy::Clock`]).
//!
//! # Frame states
//!
//! ```text
//!  ┌──────┐ claim  ┌─────────┐ load ok ┌──────────────┐ PageWriteGuard::drop ┌──────────────┐
//!  │ Free │───────▶│ Loading │────────▶│ Cached clean │─────────────────────▶│ Cached dirty │
//!  └──────┘        └─────────┘         └──────────────┘◀─────────────────────└──────────────┘
//!   ▲  ▲ load fails    │                  │     ▲       flush_pinned (pinned)       │
//!   │  └───────────────┘                  │     │                                   │ clean_unpinned
//!   │                                     │     │ write ok  ┌─────────────┐         │ (unpinned)
//!   │   evict_all (clean, unpinned)       │     └───────────│ WritingBack │◀────────┘
//!   └─────────────────────────────────────┘                 └─────────────┘
//!                                     write fails: back to Cached dirty, and the pool is poisoned
//!
//!  claim, evicting: Cached clean, unpinned ──▶ Loading (read/write) or Cached (create), another page
//! ```
//!
//! | from | to | made by | when |
//! |---|---|---|---|
//! | Free | Loading | `BufferPool::claim` (from `read`/`write`) | a miss takes a free frame |
//! | Cached clean, unpinned | Loading | `BufferPool::claim` | a miss evicts the victim's page |
//! | Free or Cached clean, unpinned | Cached clean, pinned | `BufferPool::claim` (from `create`) | a new page takes a frame |
//! | Loading | Cached clean, pinned | `BufferPool::load` | the device read succeeded |
//! | Loading | Free | `BufferPool::load` | the device read failed; the error goes to the caller |
//! | Cached | Cached dirty | `PageWriteGuard::drop` | a write guard is released |
//! | Cached dirty, pinned | Cached clean | `BufferPool::flush_pinned` (from `flush_page`/`flush_all`) | written back while pinned by the flusher |
//! | Cached dirty, unpinned | WritingBack | `BufferPool::clean_unpinned` (from a miss or `evict_all`) | the victim (or page to drop) is dirty |
//! | WritingBack | Cached clean | `BufferPool::clean_unpinned` | the write succeeded |
//! | WritingBack | Cached dirty | `BufferPool::clean_unpinned` | the write failed: the pool is poisoned |
//! | Cached clean, unpinned | Free | `BufferPool::evict_all` | dropping the cache |
//!
//! The pin count is orthogonal to the state but constrained by it: `Free`,
//! `Loading` and `WritingBack` frames have pin count 0; only `Cached` frames
//! are pinned. "Evicting" is `WritingBack` followed by `claim`; a clean victim
//! goes straight from `Cached` to `Loading`. A frame in `Loading` or
//! `WritingBack` is owned by the one thread doing its I/O; anyone else who
//! wants its page waits on the pool's condition variable (`changed`) until the
//! I/O ends, so two concurrent misses on one page load it once, into one
//! frame.
//!
//! # Locking protocol
//!
//! - One mutex (`state`) guards the page table, the frame metadata (state,
//!   pin count, dirty bit, LSN), the free list, the replacer and the poison
//!   flag. It is held only for bookkeeping, **never across I/O and never while
//!   blocking on a frame lock** — only a `try_write` on a frame known to be
//!   unlocked is done under it.
//! - Each frame's bytes sit in their own `RwLock`. A guard holds it (read or
//!   write) for its lifetime. Order: **pin under `state`, release `state`,
//!   then lock the frame; on drop, unlock the frame, then unpin**. Hence a
//!   `Cached` frame with pin count 0 has an unlocked frame lock
//!   ([`BufferPool::check_invariants`] asserts it), and eviction never waits
//!   for a guard: a thread holding page A that asks for page B cannot
//!   deadlock with the eviction B needs.
//! - Taking `state` while holding a frame lock is allowed (frame → state);
//!   the reverse wait never happens, so there is no cycle.
//! - The dirty bit is set by `PageWriteGuard::drop` while it still holds the
//!   frame's write lock, and cleared by a flusher while it holds the frame's
//!   read lock (or exclusive I/O ownership), so a change can never be lost
//!   between "written" and "marked clean".
//!
//! Like `RwLock` itself, a thread must not ask for a write guard on a page it
//! already holds a guard on (or a read guard on a page it holds a write guard
//! on): it would wait for itself. A second read guard on a page the thread
//! already reads can also wait for itself when a writer is queued in between
//! (`std`'s `RwLock` lets waiting writers go first). For the same reason `flush_page`,
//! `flush_all` and `evict_all` must not be called while the calling thread
//! holds a guard on a dirty page.
//!
//! # Write-back and failures
//!
//! Before a dirty page goes to the device, the before-write hook
//! ([`BufferPool::set_before_write`]) is called with its id and page LSN, so
//! the write-ahead log can be made durable up to that LSN first (the WAL
//! rule). A hook error is returned and nothing is written; the page stays
//! dirty. A device error on write-back (or on sync) leaves the volume in an
//! unknown state, so the pool **poisons itself**: every later request returns
//! [`Error::Poisoned`] until it is rebuilt. A device error on read (such as
//! [`Error::Corrupt`]) is returned to the caller, the frame is freed and
//! nothing is cached. A thread that panics while holding a write guard also
//! poisons the pool, because the page may be half changed.

mod guard;
mod miss;
mod replacer;
#[cfg(test)]
mod tests;

pub use guard::{PageReadGuard, PageWriteGuard};
pub use replacer::{ClockReplacer, FrameIdx, LruReplacer, Policy, Replacer};

use guard::Pin;

use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{
    Arc, Condvar, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard, TryLockError,
};

use crate::access::PageDevice;
use crate::error::{Error, Result};
use crate::ids::{Lsn, PageId};
use crate::page;

/// The before-write hook: called with a page's id and LSN before the page is
/// written to the device (see [`BufferPool::set_before_write`]).
pub type BeforeWriteHook = dyn Fn(PageId, Lsn) -> Result<()> + Send + Sync;

/// Buffer pool counters since it was created.
///
/// `hits + misses` is the number of `read`/`write` requests that got a page
/// (or a read error); `create` counts as neither.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BufferStats {
    /// Requests that found their page cached (including ones that waited for
    /// another thread to finish loading it).
    pub hits: u64,
    /// Requests that had to read their page from the device.
    pub misses: u64,
    /// Pages read successfully from the device.
    pub reads: u64,
    /// Pages written successfully to the device.
    pub writes: u64,
    /// Pages dropped from the pool (to make room, or by `evict_all`).
    pub evictions: u64,
    /// Of `reads`, pages read ahead: brought in with a missed page, in the
    /// same device read, into frames that were free.
    pub read_ahead: u64,
}

#[derive(Default)]
struct Counters {
    hits: AtomicU64,
    misses: AtomicU64,
    reads: AtomicU64,
    writes: AtomicU64,
    evictions: AtomicU64,
    read_ahead: AtomicU64,
}

impl Counters {
    fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// Where a frame is in its life; see the module docs for the transitions.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum FrameState {
    /// Holds no page; on the free list.
    Free,
    /// Its page is being read from the device by the thread that claimed it.
    Loading,
    /// Holds its page; usable by guards.
    Cached,
    /// Its dirty page is being written back by the thread about to evict it.
    WritingBack,
}

#[derive(Debug)]
struct FrameMeta {
    /// The page held (or being loaded / written back); `None` when free.
    page: Option<PageId>,
    state: FrameState,
    /// Guards (and flushers) currently holding the frame.
    pin_count: u32,
    /// The frame differs from the page on the device.
    dirty: bool,
    /// The page LSN, as of the load or the last write guard released.
    lsn: Lsn,
}

impl FrameMeta {
    fn free() -> FrameMeta {
        FrameMeta {
            page: None,
            state: FrameState::Free,
            pin_count: 0,
            dirty: false,
            lsn: Lsn(0),
        }
    }

    fn evictable(&self) -> bool {
        self.state == FrameState::Cached && self.pin_count == 0
    }
}

/// Everything guarded by the pool's `state` mutex.
struct State {
    page_table: crate::fxhash::FxHashMap<PageId, FrameIdx>,
    metas: Vec<FrameMeta>,
    /// Free frames; popped from the end, so frame 0 is used first.
    free: Vec<FrameIdx>,
    replacer: Box<dyn Replacer>,
    /// Why the pool refuses work, once a write-back failed.
    poisoned: Option<String>,
    /// The runs of the last [`RECENT_RUNS`] misses: a miss in a run that
    /// missed recently reads the rest of it.
    missed_runs: std::collections::VecDeque<u32>,
}

/// What a miss can do for a frame.
enum Victim {
    /// A free frame, or a clean unpinned one: usable at once.
    Ready(FrameIdx),
    /// An unpinned dirty frame: write it back first.
    Dirty(FrameIdx),
    /// No frame now, but some frame's I/O is in flight: wait and retry.
    Busy,
    /// Every frame is pinned.
    AllPinned,
}

/// How a request wants its page.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Access {
    Read,
    Write,
    Create,
}

type FrameLock = RwLock<Box<[u8]>>;
type FrameRead<'a> = RwLockReadGuard<'a, Box<[u8]>>;
type FrameWrite<'a> = RwLockWriteGuard<'a, Box<[u8]>>;

/// How many recent misses' runs read-ahead remembers.
const RECENT_RUNS: usize = 64;

/// The largest run read around a miss while the pool is cold, in pages
/// ([`BufferPool::set_read_around_cold`]).
pub const READ_AROUND_MAX: usize = 1024;

/// A fixed-size, thread-safe page cache over a [`PageDevice`].
///
/// See the module docs for the frame states and the locking protocol.
pub struct BufferPool {
    device: Arc<dyn PageDevice>,
    page_size: usize,
    frames: Box<[FrameLock]>,
    state: Mutex<State>,
    /// Signalled whenever a frame leaves `Loading` or `WritingBack`.
    changed: Condvar,
    before_write: RwLock<Option<Arc<BeforeWriteHook>>>,
    counters: Counters,
    /// Pages per read-ahead unit (a power of two; 1 = none).
    read_ahead: AtomicUsize,
    /// Pages read around every miss while more than half the frames are
    /// free (a power of two; 0 = off; [`BufferPool::set_read_around_cold`]).
    read_around_cold: AtomicUsize,
}

impl fmt::Debug for BufferPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BufferPool")
            .field("page_size", &self.page_size)
            .field("frame_count", &self.frames.len())
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl BufferPool {
    /// A pool of `frame_count` frames of the device's page size, all free,
    /// using the replacement `policy`. A pool of 0 frames refuses every
    /// request with [`Error::LimitExceeded`].
    pub fn new(device: Arc<dyn PageDevice>, frame_count: usize, policy: Policy) -> BufferPool {
        BufferPool::with_replacer(device, frame_count, policy.new_replacer(frame_count))
    }

    /// Like [`BufferPool::new`] with a caller-supplied replacer, built for
    /// `frame_count` frames.
    pub fn with_replacer(device: Arc<dyn PageDevice>, frame_count: usize, replacer: Box<dyn Replacer>) -> BufferPool {
        let page_size = device.page_size();
        let frames = (0..frame_count)
            .map(|_| RwLock::new(vec![0u8; page_size].into_boxed_slice()))
            .collect();
        let state = State {
            page_table: crate::fxhash::FxHashMap::with_capacity_and_hasher(frame_count, Default::default()),
            metas: (0..frame_count).map(|_| FrameMeta::free()).collect(),
            free: (0..frame_count).rev().map(FrameIdx).collect(),
            replacer,
            poisoned: None,
            missed_runs: Default::default(),
        };
        BufferPool {
            device,
            page_size,
            frames,
            state: Mutex::new(state),
            changed: Condvar::new(),
            before_write: RwLock::new(None),
            counters: Counters::default(),
            read_ahead: AtomicUsize::new(1),
            read_around_cold: AtomicUsize::new(0),
        }
    }

    /// Sets read-around while cold: while more than half the pool's frames
    /// are free, *every* miss reads the aligned run of `pages` around it
    /// (rounded down to a power of two, at most [`READ_AROUND_MAX`]; never
    /// less than the read-ahead run), into free frames only, as the kernel
    /// reads around a fault in a mapped file. A cold start then reads the
    /// volume in large runs instead of page by page; once the pool is half
    /// full, only runs of [`BufferPool::set_read_ahead`] pages that missed
    /// recently are read whole, as before. 0 or 1 (the default) turns it
    /// off.
    pub fn set_read_around_cold(&self, pages: usize) {
        let p = match pages.min(READ_AROUND_MAX) {
            0 | 1 => 0,
            p => 1usize << (usize::BITS - 1 - p.leading_zeros()),
        };
        self.read_around_cold.store(p, Ordering::Relaxed);
    }

    /// Sets read-ahead: a read that misses in an aligned run of `pages`
    /// (rounded down to a power of two, at most 64) within the last 64
    /// misses' runs — the second of two misses close in space and time —
    /// also brings in the run's other uncached pages, in one device read,
    /// **but only into free frames**: read-ahead never evicts a cached page,
    /// so it speeds up a cold start and a walk through clustered pages, and
    /// costs nothing once the pool is full. A lone miss reads one page, so
    /// random reads across a large volume do not pay for neighbours nobody
    /// asked for. Pages that fail verification are dropped silently (they
    /// may never have been written); only the page asked for reports an
    /// error. 0 or 1 turns it off.
    pub fn set_read_ahead(&self, pages: usize) {
        let p = pages.clamp(1, 64);
        let p = 1usize << (usize::BITS - 1 - p.leading_zeros());
        self.read_ahead.store(p, Ordering::Relaxed);
    }

    /// The page size in bytes (the device's).
    pub fn page_size(&self) -> usize {
        self.page_size
    }

    /// The number of frames.
    pub fn frame_count(&self) -> usize {
        self.frames.len()
    }

    /// Shared access to page `id`, read from the device on a miss (the device
    /// verifies it; a failure is returned and nothing is cached). Other
    /// readers may hold the page at the same time; writers wait.
    pub fn read(&self, id: PageId) -> Result<PageReadGuard<'_>> {
        let frame = match self.pin(id, Access::Read)? {
            (frame, None) => frame,
            // Loaded by us: give up the loader's write lock and take a shared
            // one (a writer may slip in between; we are pinned, so that is
            // all that can happen).
            (frame, Some(write)) => {
                drop(write);
                frame
            }
        };
        let pin = Pin { pool: self, frame };
        let data = self.lock_frame_read(frame);
        Ok(PageReadGuard { data, pin, page: id })
    }

    /// Shared access to page `id` only if it is cached now: the device is
    /// never read (a page being loaded or written back counts as not
    /// cached). Counts as a hit when it is there, else as nothing. A page
    /// client asks this before a fetch, to send the LSN of its copy.
    pub fn read_cached(&self, id: PageId) -> Result<Option<PageReadGuard<'_>>> {
        let frame = {
            let mut st = self.lock_live()?;
            let Some(&frame) = st.page_table.get(&id) else {
                return Ok(None);
            };
            if st.metas[frame.0].state != FrameState::Cached {
                return Ok(None);
            }
            st.metas[frame.0].pin_count += 1;
            st.replacer.record_access(frame);
            Counters::bump(&self.counters.hits);
            frame
        };
        let pin = Pin { pool: self, frame };
        let data = self.lock_frame_read(frame);
        Ok(Some(PageReadGuard { data, pin, page: id }))
    }

    /// Whether page `id` is cached now (neither pinned, nor counted, nor
    /// kept from replacement by asking): a page client keeps its rights to
    /// cache the pages it still holds.
    pub fn is_cached(&self, id: PageId) -> bool {
        self.lock_live().is_ok_and(|st| {
            st.page_table
                .get(&id)
                .is_some_and(|f| st.metas[f.0].state == FrameState::Cached)
        })
    }

    /// Whether page `id` is cached with a change not yet written to the
    /// device, or being written (never waits).
    pub fn is_dirty(&self, id: PageId) -> bool {
        self.lock_live().is_ok_and(|st| {
            st.page_table.get(&id).is_some_and(|f| {
                let m = &st.metas[f.0];
                m.dirty || m.state == FrameState::WritingBack
            })
        })
    }

    /// Caches `image` as page `id`, **clean**: the caller vouches that the
    /// device holds exactly this image (a page client caching the server's
    /// committed page), so it is never written back. Replaces a cached copy.
    pub fn install(&self, id: PageId, image: &[u8]) -> Result<()> {
        if image.len() != self.page_size() {
            return Err(Error::InvalidArgument(format!(
                "installing page {id}: {} bytes, the page size is {}",
                image.len(),
                self.page_size()
            )));
        }
        let mut g = self.create(id)?;
        g.copy_from_slice(image);
        g.clean = true;
        Ok(())
    }

    /// Drops page `id` from the pool if it is cached, clean and unpinned,
    /// without writing it anywhere: a page client forgets a copy the server
    /// called back, or one that is no longer current. Returns false (and
    /// keeps the page) if it is pinned, dirty or being loaded.
    pub fn discard(&self, id: PageId) -> Result<bool> {
        let mut st = self.lock_live()?;
        let Some(&frame) = st.page_table.get(&id) else {
            return Ok(true);
        };
        let meta = &st.metas[frame.0];
        if meta.state != FrameState::Cached || meta.pin_count > 0 || meta.dirty {
            return Ok(false);
        }
        let State {
            page_table,
            metas,
            free,
            replacer,
            ..
        } = &mut *st;
        page_table.remove(&id);
        replacer.remove(frame);
        metas[frame.0] = FrameMeta::free();
        free.push(frame);
        Counters::bump(&self.counters.evictions);
        Ok(true)
    }

    /// Exclusive access to page `id`, read from the device on a miss. The
    /// page is marked dirty (and its LSN recorded) **when the guard is
    /// dropped**, whether or not it was changed.
    pub fn write(&self, id: PageId) -> Result<PageWriteGuard<'_>> {
        let (frame, locked) = self.pin(id, Access::Write)?;
        let pin = Pin { pool: self, frame };
        let data = match locked {
            Some(data) => data,
            None => self.lock_frame_write(frame),
        };
        Ok(PageWriteGuard {
            data,
            pin,
            page: id,
            clean: false,
        })
    }

    /// Exclusive access to a brand-new page `id`: the device is not read, the
    /// frame is zero-filled and (like every write guard) marked dirty when
    /// the guard is dropped. If `id` is cached, its frame is reused and
    /// zero-filled. Counts as neither a hit nor a miss.
    pub fn create(&self, id: PageId) -> Result<PageWriteGuard<'_>> {
        let (frame, locked) = self.pin(id, Access::Create)?;
        let pin = Pin { pool: self, frame };
        let mut data = match locked {
            Some(data) => data,
            None => self.lock_frame_write(frame),
        };
        data.fill(0);
        Ok(PageWriteGuard {
            data,
            pin,
            page: id,
            clean: false,
        })
    }

    /// Writes page `id` to the device if it is cached and dirty (no sync).
    /// Waits for a writer holding the page to release it.
    pub fn flush_page(&self, id: PageId) -> Result<()> {
        let mut st = self.lock_live()?;
        loop {
            let Some(&frame) = st.page_table.get(&id) else {
                return Ok(());
            };
            let meta = &mut st.metas[frame.0];
            match meta.state {
                // Being read from the device: it is clean.
                FrameState::Loading => return Ok(()),
                FrameState::WritingBack => st = self.wait(st)?,
                FrameState::Cached if !meta.dirty => return Ok(()),
                FrameState::Cached => {
                    meta.pin_count += 1;
                    drop(st);
                    return self.flush_pinned(frame, id);
                }
                FrameState::Free => panic!("free {frame:?} is in the page table for {id}"),
            }
        }
    }

    /// Writes every page that is dirty at the call to the device, then syncs
    /// the device. A sync failure poisons the pool.
    pub fn flush_all(&self) -> Result<()> {
        let dirty: Vec<PageId> = {
            let st = self.lock_live()?;
            st.metas.iter().filter(|m| m.dirty).filter_map(|m| m.page).collect()
        };
        for id in dirty {
            self.flush_page(id)?;
        }
        drop(self.lock_live()?);
        if let Err(e) = self.device.sync() {
            self.poison(format!("syncing the volume failed: {e}"));
            return Err(e);
        }
        Ok(())
    }

    /// Drops every unpinned page from the pool, writing dirty ones back first
    /// (no sync), so that the next requests find a cold cache. Pinned pages
    /// stay. Each page dropped counts as an eviction.
    pub fn evict_all(&self) -> Result<()> {
        for i in 0..self.frames.len() {
            let frame = FrameIdx(i);
            let mut st = self.lock_live()?;
            loop {
                let meta = &st.metas[i];
                match meta.state {
                    FrameState::Free | FrameState::Loading => break,
                    FrameState::WritingBack => st = self.wait(st)?,
                    FrameState::Cached if meta.pin_count > 0 => break,
                    FrameState::Cached if meta.dirty => st = self.clean_unpinned(st, frame)?,
                    FrameState::Cached => {
                        let State {
                            page_table,
                            metas,
                            free,
                            replacer,
                            ..
                        } = &mut *st;
                        let old = metas[i].page.expect("a cached frame holds a page");
                        let removed = page_table.remove(&old);
                        assert_eq!(removed, Some(frame), "page table entry for {old}");
                        replacer.remove(frame);
                        metas[i] = FrameMeta::free();
                        free.push(frame);
                        Counters::bump(&self.counters.evictions);
                        break;
                    }
                }
            }
        }
        Ok(())
    }

    /// Installs the WAL hook: `hook(page, page_lsn)` runs before any dirty
    /// page is written to the device, so the log can be made durable up to
    /// that LSN first. If it fails, the page is not written and the error is
    /// returned. Replaces any earlier hook; the default is none. The hook
    /// runs with the page's frame locked and must not call back into the
    /// pool.
    pub fn set_before_write(&self, hook: Box<BeforeWriteHook>) {
        *self.before_write.write().unwrap_or_else(PoisonError::into_inner) = Some(Arc::from(hook));
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> BufferStats {
        let c = &self.counters;
        BufferStats {
            hits: c.hits.load(Ordering::Relaxed),
            misses: c.misses.load(Ordering::Relaxed),
            reads: c.reads.load(Ordering::Relaxed),
            writes: c.writes.load(Ordering::Relaxed),
            evictions: c.evictions.load(Ordering::Relaxed),
            read_ahead: c.read_ahead.load(Ordering::Relaxed),
        }
    }

    /// The dirty pages and their page LSNs (as of the last write guard
    /// released on each), sorted by page id. A page whose write guard is
    /// still held is listed only if it was dirty before.
    pub fn dirty_pages(&self) -> Vec<(PageId, Lsn)> {
        let st = self.lock_state();
        let mut out: Vec<(PageId, Lsn)> = st
            .metas
            .iter()
            .filter(|m| m.dirty)
            .map(|m| (m.page.expect("a dirty frame holds a page"), m.lsn))
            .collect();
        out.sort_unstable();
        out
    }

    /// Panics if the pool's bookkeeping is inconsistent: page table, frame
    /// states, pins, free list and replacer must agree, and every unpinned
    /// cached frame must be unlocked. Safe to call while other threads use
    /// the pool.
    pub fn check_invariants(&self) {
        let st = self.lock_state();
        let n = self.frames.len();
        assert_eq!(st.metas.len(), n, "one metadata entry per frame");
        let mut on_free_list = vec![false; n];
        for &f in &st.free {
            assert!(f.0 < n, "{f:?} on the free list is out of range");
            assert!(!on_free_list[f.0], "{f:?} is twice on the free list");
            on_free_list[f.0] = true;
        }
        let mut mapped = 0usize;
        let mut tracked = 0usize;
        for (i, m) in st.metas.iter().enumerate() {
            let f = FrameIdx(i);
            let is_tracked = st.replacer.is_tracked(f);
            match m.state {
                FrameState::Free => {
                    assert!(m.page.is_none(), "free {f:?} holds {:?}", m.page);
                    assert!(on_free_list[i], "free {f:?} is not on the free list");
                    assert!(!m.dirty, "free {f:?} is dirty");
                    assert!(!is_tracked, "free {f:?} is tracked by the replacer");
                }
                FrameState::Loading | FrameState::Cached | FrameState::WritingBack => {
                    let p = m.page.expect("a used frame holds a page");
                    assert_eq!(
                        st.page_table.get(&p),
                        Some(&f),
                        "{f:?} holds {p} but the page table disagrees"
                    );
                    assert!(!on_free_list[i], "used {f:?} is on the free list");
                    mapped += 1;
                }
            }
            match m.state {
                FrameState::Free | FrameState::Loading => {
                    assert_eq!(m.pin_count, 0, "{:?} {f:?} is pinned", m.state);
                    assert!(!m.dirty, "{:?} {f:?} is dirty", m.state);
                    assert!(!is_tracked, "{:?} {f:?} is tracked", m.state);
                }
                FrameState::WritingBack => {
                    assert_eq!(m.pin_count, 0, "{f:?} being written back is pinned");
                    assert!(m.dirty, "{f:?} being written back is clean");
                    assert!(is_tracked, "{f:?} being written back is not tracked");
                    tracked += 1;
                }
                FrameState::Cached => {
                    assert!(is_tracked, "cached {f:?} is not tracked");
                    tracked += 1;
                    if m.pin_count == 0 {
                        // Guards unlock before they unpin, and only I/O
                        // owners lock unpinned frames (which are then not
                        // `Cached`), so nobody can hold this lock.
                        assert!(
                            !matches!(self.frames[i].try_write(), Err(TryLockError::WouldBlock)),
                            "unpinned cached {f:?} is locked"
                        );
                    }
                }
            }
        }
        assert_eq!(st.page_table.len(), mapped, "page table has stale entries");
        assert_eq!(st.free.len() + mapped, n, "every frame is either free or mapped");
        assert_eq!(st.replacer.tracked_count(), tracked, "replacer tracks other frames");
        st.replacer.check_invariants();
    }

    // ---- internals -------------------------------------------------------

    /// Locks the state, even if a thread panicked while holding it (used
    /// where the caller must make progress: guard drops, bookkeeping after
    /// I/O, diagnostics).
    fn lock_state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Locks the state for new work: fails if the pool is poisoned.
    fn lock_live(&self) -> Result<MutexGuard<'_, State>> {
        let st = self
            .state
            .lock()
            .map_err(|_| Error::Poisoned("a thread panicked inside the buffer pool".to_string()))?;
        match &st.poisoned {
            Some(reason) => Err(Error::Poisoned(reason.clone())),
            None => Ok(st),
        }
    }

    /// Waits until some frame leaves `Loading` or `WritingBack`.
    fn wait<'a>(&'a self, st: MutexGuard<'a, State>) -> Result<MutexGuard<'a, State>> {
        let st = self.changed.wait(st).unwrap_or_else(PoisonError::into_inner);
        match &st.poisoned {
            Some(reason) => Err(Error::Poisoned(reason.clone())),
            None => Ok(st),
        }
    }

    /// Makes the pool refuse all further work.
    fn poison(&self, reason: String) {
        let mut st = self.lock_state();
        if st.poisoned.is_none() {
            st.poisoned = Some(reason);
        }
        drop(st);
        self.changed.notify_all();
    }

    fn lock_frame_read(&self, frame: FrameIdx) -> FrameRead<'_> {
        self.frames[frame.0].read().unwrap_or_else(PoisonError::into_inner)
    }

    fn lock_frame_write(&self, frame: FrameIdx) -> FrameWrite<'_> {
        self.frames[frame.0].write().unwrap_or_else(PoisonError::into_inner)
    }

    /// Locks a frame that the protocol guarantees nobody holds (free, or
    /// cached and unpinned); called under `state`, so it must not block.
    fn lock_frame_unheld(&self, frame: FrameIdx) -> FrameWrite<'_> {
        match self.frames[frame.0].try_write() {
            Ok(guard) => guard,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => {
                panic!("{frame:?} is locked although nobody has it pinned")
            }
        }
    }

    /// Writes back the dirty, unpinned, cached `frame`, letting go of `state`
    /// during the I/O (the frame is `WritingBack` meanwhile). Returns `state`
    /// re-locked with the frame `Cached`: clean on success; still dirty on
    /// failure, which is returned.
    fn clean_unpinned<'a>(&'a self, mut st: MutexGuard<'a, State>, frame: FrameIdx) -> Result<MutexGuard<'a, State>> {
        let meta = &mut st.metas[frame.0];
        assert!(meta.evictable() && meta.dirty, "cleaning {frame:?}: {meta:?}");
        let id = meta.page.expect("a cached frame holds a page");
        meta.state = FrameState::WritingBack;
        drop(st);
        let result = {
            let mut data = self.lock_frame_write(frame);
            self.write_out(id, &mut data)
        };
        let mut st = self.lock_state();
        let meta = &mut st.metas[frame.0];
        assert_eq!(meta.state, FrameState::WritingBack);
        meta.state = FrameState::Cached;
        if result.is_ok() {
            meta.dirty = false;
        }
        self.changed.notify_all();
        result?;
        match &st.poisoned {
            Some(reason) => Err(Error::Poisoned(reason.clone())),
            None => Ok(st),
        }
    }

    /// Writes back the dirty `frame` holding `id`, which this thread has
    /// pinned; unpins it on return. Readers may use the page meanwhile.
    fn flush_pinned(&self, frame: FrameIdx, id: PageId) -> Result<()> {
        // Declared first, so dropped last: the frame is unlocked before it
        // is unpinned.
        let _pin = Pin { pool: self, frame };
        let data = self.lock_frame_read(frame);
        {
            let st = self.lock_live()?;
            if !st.metas[frame.0].dirty {
                // Another flusher wrote it while we waited for the lock.
                return Ok(());
            }
        }
        // The device seals what it writes; seal a copy so the frame can stay
        // shared with readers.
        let mut image = data.to_vec();
        self.write_out(id, &mut image)?;
        // Still under the read lock: no writer has changed the page since
        // the copy, so clean is the truth.
        self.lock_state().metas[frame.0].dirty = false;
        drop(data);
        Ok(())
    }

    /// The WAL hook, then the device write. A device failure poisons the
    /// pool; a hook failure does not (nothing was written).
    fn write_out(&self, id: PageId, image: &mut [u8]) -> Result<()> {
        let hook = self.before_write.read().unwrap_or_else(PoisonError::into_inner).clone();
        if let Some(hook) = hook {
            hook(id, page::lsn(image))?;
        }
        match self.device.write_page(id, image) {
            Ok(()) => {
                Counters::bump(&self.counters.writes);
                Ok(())
            }
            Err(e) => {
                self.poison(format!("writing page {id} to the volume failed: {e}"));
                Err(e)
            }
        }
    }

    /// Drops one pin of `frame` (its lock already released).
    fn unpin(&self, frame: FrameIdx) {
        let mut st = self.lock_state();
        let meta = &mut st.metas[frame.0];
        assert!(
            meta.state == FrameState::Cached && meta.pin_count > 0,
            "unpinning {frame:?}: {meta:?}"
        );
        meta.pin_count -= 1;
    }
}
