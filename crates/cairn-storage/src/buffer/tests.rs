//! Tests of the buffer pool against an in-memory device.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::Duration;

use proptest::prelude::*;

use super::*;
use crate::page::{PageType, HEADER_SIZE};

const PAGE_SIZE: usize = page::PAGE_SIZE_MIN;

/// A `PageDevice` over a map of page images: it seals on write and verifies
/// on read like the volume file, counts its calls, and can be told to fail
/// writes or syncs, or to be slow to read.
#[derive(Default)]
struct MemDevice {
    pages: Mutex<HashMap<PageId, Vec<u8>>>,
    reads: AtomicU64,
    writes: AtomicU64,
    syncs: AtomicU64,
    fail_writes: AtomicBool,
    fail_syncs: AtomicBool,
    read_delay_ms: AtomicU64,
}

impl MemDevice {
    fn new() -> Arc<MemDevice> {
        Arc::new(MemDevice::default())
    }

    /// Stores a sealed copy of `image` as page `id`, without counting.
    fn put(&self, id: PageId, image: &[u8]) {
        let mut image = image.to_vec();
        page::seal(&mut image);
        self.pages.lock().unwrap().insert(id, image);
    }

    fn get(&self, id: PageId) -> Option<Vec<u8>> {
        self.pages.lock().unwrap().get(&id).cloned()
    }

    fn reads(&self) -> u64 {
        self.reads.load(Ordering::SeqCst)
    }

    fn writes(&self) -> u64 {
        self.writes.load(Ordering::SeqCst)
    }

    fn syncs(&self) -> u64 {
        self.syncs.load(Ordering::SeqCst)
    }
}

fn injected(op: &'static str) -> Error {
    Error::io(op, "mem-device", std::io::Error::other("injected failure"))
}

impl PageDevice for MemDevice {
    fn page_size(&self) -> usize {
        PAGE_SIZE
    }

    fn read_page(&self, id: PageId, buf: &mut [u8]) -> Result<()> {
        let delay = self.read_delay_ms.load(Ordering::SeqCst);
        if delay > 0 {
            thread::sleep(Duration::from_millis(delay));
        }
        self.reads.fetch_add(1, Ordering::SeqCst);
        match self.pages.lock().unwrap().get(&id) {
            Some(image) => buf.copy_from_slice(image),
            None => buf.fill(0),
        }
        page::verify(buf, id)
    }

    fn write_page(&self, id: PageId, buf: &mut [u8]) -> Result<()> {
        if self.fail_writes.load(Ordering::SeqCst) {
            return Err(injected("write page"));
        }
        page::seal(buf);
        self.pages.lock().unwrap().insert(id, buf.to_vec());
        self.writes.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    fn sync(&self) -> Result<()> {
        if self.fail_syncs.load(Ordering::SeqCst) {
            return Err(injected("sync"));
        }
        self.syncs.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

/// A valid slotted page `id` whose body is `fill`.
fn image(id: PageId, fill: u8) -> Vec<u8> {
    let mut buf = vec![0u8; PAGE_SIZE];
    page::format(&mut buf, id, PageType::Slotted);
    buf[HEADER_SIZE..].fill(fill);
    buf
}

/// Everything but the checksum, which a page in memory need not have right.
fn unsealed(buf: &[u8]) -> &[u8] {
    &buf[4..]
}

fn pool_with(device: &Arc<MemDevice>, frames: usize, policy: Policy) -> BufferPool {
    BufferPool::new(device.clone() as Arc<dyn PageDevice>, frames, policy)
}

fn stats(hits: u64, misses: u64, reads: u64, writes: u64, evictions: u64) -> BufferStats {
    BufferStats {
        hits,
        misses,
        reads,
        writes,
        evictions,
        read_ahead: 0,
    }
}

#[test]
fn scripted_sequence_is_counted_exactly() {
    let dev = MemDevice::new();
    for p in 1..=3 {
        dev.put(PageId(p), &image(PageId(p), p as u8));
    }
    let pool = pool_with(&dev, 2, Policy::Lru);
    assert_eq!(pool.frame_count(), 2);
    assert_eq!(pool.page_size(), PAGE_SIZE);

    drop(pool.read(PageId(1)).unwrap()); // miss
    drop(pool.read(PageId(1)).unwrap()); // hit
    {
        let mut g = pool.write(PageId(2)).unwrap(); // miss
        g[HEADER_SIZE] = 0xAB;
    }
    assert_eq!(pool.stats(), stats(1, 2, 2, 0, 0));
    pool.check_invariants();

    // LRU victim: page 1 (last used before page 2), clean.
    drop(pool.read(PageId(3)).unwrap());
    assert_eq!(pool.stats(), stats(1, 3, 3, 0, 1));
    // Victim: page 2, dirty: written back first.
    drop(pool.read(PageId(1)).unwrap());
    assert_eq!(pool.stats(), stats(1, 4, 4, 1, 2));
    assert_eq!(dev.get(PageId(2)).unwrap()[HEADER_SIZE], 0xAB);
    // Victim: page 3; page 2 comes back with its change.
    let g = pool.read(PageId(2)).unwrap();
    assert_eq!(g[HEADER_SIZE], 0xAB);
    assert_eq!(g[HEADER_SIZE + 1], 2);
    drop(g);
    drop(pool.read(PageId(1)).unwrap()); // hit
    assert_eq!(pool.stats(), stats(2, 5, 5, 1, 3));
    assert_eq!((dev.reads(), dev.writes(), dev.syncs()), (5, 1, 0));
    pool.check_invariants();
}

#[test]
fn lru_and_clock_choose_different_victims() {
    // Pages 1 and 2 cached, page 1 used again, then page 3 comes in. LRU
    // evicts page 2 (least recently used); CLOCK finds both reference bits
    // set, clears them, and evicts the frame under its hand: page 1.
    for (policy, evicted, kept) in [(Policy::Lru, 2, 1), (Policy::Clock, 1, 2)] {
        let dev = MemDevice::new();
        for p in 1..=3 {
            dev.put(PageId(p), &image(PageId(p), 0));
        }
        let pool = pool_with(&dev, 2, policy);
        for p in [1, 2, 1, 3] {
            drop(pool.read(PageId(p)).unwrap());
            pool.check_invariants();
        }
        assert_eq!(pool.stats(), stats(1, 3, 3, 0, 1), "{policy:?}");
        drop(pool.read(PageId(kept)).unwrap());
        assert_eq!(pool.stats().hits, 2, "{policy:?}: page {kept} was kept");
        drop(pool.read(PageId(evicted)).unwrap());
        assert_eq!(pool.stats().misses, 4, "{policy:?}: page {evicted} was evicted");
    }
}

#[test]
fn dirty_page_is_written_back_on_eviction_with_its_content() {
    for policy in [Policy::Lru, Policy::Clock] {
        let dev = MemDevice::new();
        dev.put(PageId(2), &image(PageId(2), 2));
        let pool = pool_with(&dev, 1, policy);
        let mut written = image(PageId(1), 0x5A);
        page::set_lsn(&mut written, Lsn(77));
        pool.create(PageId(1)).unwrap().copy_from_slice(&written);
        assert_eq!(dev.writes(), 0);
        drop(pool.read(PageId(2)).unwrap());
        assert_eq!(dev.writes(), 1);
        let on_disk = dev.get(PageId(1)).unwrap();
        page::verify(&on_disk, PageId(1)).unwrap();
        assert_eq!(unsealed(&on_disk), unsealed(&written));
        // And it reads back the same through the pool.
        let g = pool.read(PageId(1)).unwrap();
        assert_eq!(unsealed(&g), unsealed(&written));
        assert_eq!(page::lsn(&g), Lsn(77));
        drop(g);
        pool.check_invariants();
    }
}

#[test]
fn flush_all_writes_every_dirty_page_then_syncs() {
    let dev = MemDevice::new();
    let pool = pool_with(&dev, 4, Policy::Clock);
    for p in 1..=3u32 {
        pool.create(PageId(p))
            .unwrap()
            .copy_from_slice(&image(PageId(p), p as u8));
    }
    assert_eq!(pool.dirty_pages().len(), 3);
    pool.flush_all().unwrap();
    assert_eq!((dev.writes(), dev.syncs()), (3, 1));
    assert!(pool.dirty_pages().is_empty());
    for p in 1..=3u32 {
        let on_disk = dev.get(PageId(p)).unwrap();
        assert_eq!(unsealed(&on_disk), unsealed(&image(PageId(p), p as u8)));
    }
    // Nothing is dirty now: a second flush only syncs; flush_page of a clean
    // or uncached page writes nothing.
    pool.flush_all().unwrap();
    pool.flush_page(PageId(1)).unwrap();
    pool.flush_page(PageId(99)).unwrap();
    assert_eq!((dev.writes(), dev.syncs()), (3, 2));
    // flush_page writes one page and does not sync.
    pool.write(PageId(2)).unwrap()[HEADER_SIZE] = 0xEE;
    pool.flush_page(PageId(2)).unwrap();
    assert_eq!((dev.writes(), dev.syncs()), (4, 2));
    assert_eq!(dev.get(PageId(2)).unwrap()[HEADER_SIZE], 0xEE);
    // Pages stayed cached throughout.
    assert_eq!(pool.stats(), stats(1, 0, 0, 4, 0));
    pool.check_invariants();
}

#[test]
fn flush_page_lets_readers_share_the_page() {
    let dev = MemDevice::new();
    let pool = pool_with(&dev, 2, Policy::Lru);
    pool.create(PageId(1)).unwrap().copy_from_slice(&image(PageId(1), 1));
    let reader = pool.read(PageId(1)).unwrap();
    pool.flush_page(PageId(1)).unwrap();
    assert_eq!(reader[HEADER_SIZE], 1);
    drop(reader);
    assert!(pool.dirty_pages().is_empty());
    assert_eq!(dev.writes(), 1);
}

#[test]
fn create_does_not_read_the_device() {
    let dev = MemDevice::new();
    let pool = pool_with(&dev, 2, Policy::Lru);
    let mut g = pool.create(PageId(5)).unwrap();
    assert!(g.iter().all(|&b| b == 0), "a created frame is zero-filled");
    assert_eq!(g.page_id(), PageId(5));
    page::format(&mut g, PageId(5), PageType::Slotted);
    page::set_lsn(&mut g, Lsn(9));
    drop(g);
    assert_eq!(dev.reads(), 0);
    assert_eq!(pool.stats(), BufferStats::default());
    assert_eq!(pool.dirty_pages(), vec![(PageId(5), Lsn(9))]);

    // Creating over a cached page reuses its frame and zero-fills it.
    let g = pool.create(PageId(5)).unwrap();
    assert!(g.iter().all(|&b| b == 0));
    drop(g);
    assert_eq!(dev.reads(), 0);
    assert_eq!(pool.dirty_pages(), vec![(PageId(5), Lsn(0))]);
    pool.check_invariants();
}

#[test]
fn evict_all_writes_dirty_pages_and_empties_the_cache_except_pinned_pages() {
    let dev = MemDevice::new();
    let pool = pool_with(&dev, 3, Policy::Lru);
    for p in 1..=3u32 {
        pool.create(PageId(p))
            .unwrap()
            .copy_from_slice(&image(PageId(p), p as u8));
    }
    let pinned = pool.read(PageId(2)).unwrap();
    pool.evict_all().unwrap();
    // Pages 1 and 3 written and dropped; page 2 is pinned, so it stays (and
    // stays dirty).
    assert_eq!(dev.writes(), 2);
    assert_eq!(dev.syncs(), 0);
    assert_eq!(pool.stats().evictions, 2);
    assert_eq!(pool.dirty_pages(), vec![(PageId(2), Lsn(0))]);
    pool.check_invariants();
    drop(pinned);
    pool.evict_all().unwrap();
    assert_eq!(dev.writes(), 3);
    assert!(pool.dirty_pages().is_empty());
    pool.check_invariants();
    // Cold: every page is a miss now.
    for p in 1..=3u32 {
        let g = pool.read(PageId(p)).unwrap();
        assert_eq!(g[HEADER_SIZE], p as u8);
    }
    // One hit (pinning page 2), then three cold misses.
    assert_eq!(pool.stats(), stats(1, 3, 3, 3, 3));
}

#[test]
fn all_frames_pinned_is_limit_exceeded() {
    let dev = MemDevice::new();
    for p in 1..=3 {
        dev.put(PageId(p), &image(PageId(p), 0));
    }
    let pool = pool_with(&dev, 2, Policy::Clock);
    let a = pool.read(PageId(1)).unwrap();
    let b = pool.write(PageId(2)).unwrap();
    for result in [
        pool.read(PageId(3)).map(drop),
        pool.write(PageId(3)).map(drop),
        pool.create(PageId(3)).map(drop),
    ] {
        match result {
            Err(Error::LimitExceeded {
                what: "pinned buffer frames",
                value: 3,
                limit: 2,
            }) => {}
            other => panic!("expected LimitExceeded, got {other:?}"),
        }
    }
    pool.check_invariants();
    // A pinned page can still be shared.
    let a2 = pool.read(PageId(1)).unwrap();
    drop((a, a2));
    drop(pool.read(PageId(3)).unwrap());
    drop(b);
    pool.check_invariants();

    // A pool without frames refuses everything, without panicking.
    let empty = pool_with(&dev, 0, Policy::Lru);
    assert!(matches!(
        empty.read(PageId(1)),
        Err(Error::LimitExceeded { limit: 0, .. })
    ));
    empty.flush_all().unwrap();
    empty.evict_all().unwrap();
    empty.check_invariants();
}

#[test]
fn holding_one_page_while_fetching_many_others_does_not_deadlock() {
    let dev = MemDevice::new();
    for p in 1..=10 {
        dev.put(PageId(p), &image(PageId(p), p as u8));
    }
    for policy in [Policy::Lru, Policy::Clock] {
        let pool = pool_with(&dev, 2, policy);
        let mut held = pool.write(PageId(1)).unwrap();
        held[HEADER_SIZE] = 0xFF;
        for round in 0..3 {
            for p in 2..=10u32 {
                if round % 2 == 0 {
                    assert_eq!(pool.read(PageId(p)).unwrap()[HEADER_SIZE], p as u8);
                } else {
                    drop(pool.write(PageId(p)).unwrap());
                }
                pool.check_invariants();
            }
        }
        drop(held);
        assert_eq!(pool.read(PageId(1)).unwrap()[HEADER_SIZE], 0xFF);
    }
}

#[test]
fn read_error_is_returned_and_nothing_is_cached() {
    let dev = MemDevice::new();
    let mut bad = image(PageId(4), 4);
    page::seal(&mut bad);
    bad[100] ^= 1;
    dev.pages.lock().unwrap().insert(PageId(4), bad);
    dev.put(PageId(1), &image(PageId(1), 1));
    let pool = pool_with(&dev, 1, Policy::Lru);
    for id in [PageId(4), PageId(9)] {
        match pool.read(id) {
            Err(Error::Corrupt { page, .. }) => assert_eq!(page, id),
            other => panic!("expected Corrupt, got {other:?}"),
        }
        assert!(matches!(pool.write(id), Err(Error::Corrupt { .. })));
        pool.check_invariants();
    }
    // Not poisoned, and the only frame is free again.
    assert_eq!(pool.read(PageId(1)).unwrap()[HEADER_SIZE], 1);
    assert_eq!(pool.stats(), stats(0, 5, 1, 0, 0));
    pool.check_invariants();
}

#[test]
fn write_failure_on_eviction_poisons_the_pool() {
    let dev = MemDevice::new();
    dev.put(PageId(2), &image(PageId(2), 2));
    let pool = pool_with(&dev, 1, Policy::Lru);
    pool.create(PageId(1)).unwrap().copy_from_slice(&image(PageId(1), 1));
    dev.fail_writes.store(true, Ordering::SeqCst);
    assert!(matches!(pool.read(PageId(2)), Err(Error::Io { .. })));
    pool.check_invariants();
    dev.fail_writes.store(false, Ordering::SeqCst);
    for result in [
        pool.read(PageId(1)).map(drop),
        pool.write(PageId(2)).map(drop),
        pool.create(PageId(3)).map(drop),
        pool.flush_page(PageId(1)),
        pool.flush_all(),
        pool.evict_all(),
    ] {
        assert!(
            matches!(result, Err(Error::Poisoned(ref why)) if why.contains("page 1")),
            "{result:?}"
        );
    }
    assert_eq!(dev.writes(), 0);
    // Still inspectable.
    assert_eq!(pool.dirty_pages(), vec![(PageId(1), Lsn(0))]);
    pool.check_invariants();
}

#[test]
fn write_or_sync_failure_on_flush_poisons_the_pool() {
    let dev = MemDevice::new();
    let pool = pool_with(&dev, 2, Policy::Clock);
    pool.create(PageId(1)).unwrap().copy_from_slice(&image(PageId(1), 1));
    // A reader holding the page keeps its guard usable after the failure.
    let reader = pool.read(PageId(1)).unwrap();
    dev.fail_writes.store(true, Ordering::SeqCst);
    assert!(matches!(pool.flush_page(PageId(1)), Err(Error::Io { .. })));
    assert_eq!(reader[HEADER_SIZE], 1);
    drop(reader);
    assert!(matches!(pool.read(PageId(1)), Err(Error::Poisoned(_))));
    pool.check_invariants();

    let dev = MemDevice::new();
    let pool = pool_with(&dev, 2, Policy::Clock);
    pool.create(PageId(1)).unwrap().copy_from_slice(&image(PageId(1), 1));
    dev.fail_syncs.store(true, Ordering::SeqCst);
    assert!(matches!(pool.flush_all(), Err(Error::Io { .. })));
    assert!(matches!(pool.flush_all(), Err(Error::Poisoned(_))));
    assert_eq!(dev.writes(), 1);
}

#[test]
fn panic_while_holding_a_write_guard_poisons_the_pool() {
    let dev = MemDevice::new();
    let pool = pool_with(&dev, 2, Policy::Lru);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut g = pool.create(PageId(1)).unwrap();
        g[HEADER_SIZE] = 1;
        panic!("half-way through a change");
    }));
    assert!(result.is_err());
    assert!(matches!(pool.read(PageId(1)), Err(Error::Poisoned(ref why)) if why.contains("panicked")));
    pool.check_invariants();
}

#[test]
fn before_write_hook_runs_before_every_write_with_the_page_lsn() {
    let dev = MemDevice::new();
    let pool = pool_with(&dev, 1, Policy::Lru);
    let seen: Arc<Mutex<Vec<(PageId, Lsn, u64)>>> = Arc::default();
    {
        let (seen, dev) = (seen.clone(), dev.clone());
        pool.set_before_write(Box::new(move |id, lsn| {
            // Record how many writes the device had done: the hook must run
            // before the write it guards.
            seen.lock().unwrap().push((id, lsn, dev.writes()));
            Ok(())
        }));
    }
    for (p, lsn) in [(1u32, 10u64), (2, 20)] {
        let mut g = pool.create(PageId(p)).unwrap();
        g.copy_from_slice(&image(PageId(p), 0));
        page::set_lsn(&mut g, Lsn(lsn));
    }
    // Creating page 2 evicted page 1; flush_all writes page 2.
    pool.flush_all().unwrap();
    assert_eq!(
        *seen.lock().unwrap(),
        vec![(PageId(1), Lsn(10), 0), (PageId(2), Lsn(20), 1)]
    );

    // A failing hook: nothing written, the page stays dirty, no poisoning.
    pool.set_before_write(Box::new(|_, lsn| {
        Err(Error::InvalidArgument(format!("log not durable to {lsn:?}")))
    }));
    page::set_lsn(&mut pool.write(PageId(2)).unwrap(), Lsn(30));
    assert!(matches!(pool.flush_all(), Err(Error::InvalidArgument(_))));
    assert!(matches!(pool.create(PageId(3)), Err(Error::InvalidArgument(_))));
    assert_eq!(pool.dirty_pages(), vec![(PageId(2), Lsn(30))]);
    assert_eq!(dev.writes(), 2);
    pool.check_invariants();
    pool.set_before_write(Box::new(|_, _| Ok(())));
    pool.flush_all().unwrap();
    assert_eq!(dev.writes(), 3);
}

#[test]
fn concurrent_misses_on_one_page_load_it_once() {
    let dev = MemDevice::new();
    dev.put(PageId(1), &image(PageId(1), 7));
    dev.read_delay_ms.store(50, Ordering::SeqCst);
    let pool = pool_with(&dev, 4, Policy::Lru);
    let start = Barrier::new(4);
    thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                start.wait();
                let g = pool.read(PageId(1)).unwrap();
                assert_eq!(g[HEADER_SIZE], 7);
            });
        }
    });
    assert_eq!(dev.reads(), 1);
    assert_eq!(pool.stats(), stats(3, 1, 1, 0, 0));
    pool.check_invariants();
}

#[test]
fn dirty_pages_lists_page_lsns_sorted() {
    let dev = MemDevice::new();
    let pool = pool_with(&dev, 4, Policy::Lru);
    for (p, lsn) in [(3u32, 5u64), (1, 8), (2, 2)] {
        let mut g = pool.create(PageId(p)).unwrap();
        page::format(&mut g, PageId(p), PageType::Slotted);
        page::set_lsn(&mut g, Lsn(lsn));
    }
    assert_eq!(
        pool.dirty_pages(),
        vec![(PageId(1), Lsn(8)), (PageId(2), Lsn(2)), (PageId(3), Lsn(5))]
    );
    page::set_lsn(&mut pool.write(PageId(2)).unwrap(), Lsn(11));
    pool.flush_page(PageId(3)).unwrap();
    assert_eq!(pool.dirty_pages(), vec![(PageId(1), Lsn(8)), (PageId(2), Lsn(11))]);
}

/// A xorshift generator: the threads' choices replay from their seeds.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

fn counter(buf: &[u8]) -> u64 {
    u64::from_le_bytes(buf[HEADER_SIZE..HEADER_SIZE + 8].try_into().unwrap())
}

fn bump(buf: &mut [u8]) {
    let c = counter(buf) + 1;
    buf[HEADER_SIZE..HEADER_SIZE + 8].copy_from_slice(&c.to_le_bytes());
}

/// Retries `f` while every frame is pinned by other threads.
fn retry<G>(mut f: impl FnMut() -> Result<G>) -> G {
    loop {
        match f() {
            Ok(g) => return g,
            Err(Error::LimitExceeded { .. }) => thread::yield_now(),
            Err(e) => panic!("unexpected error: {e}"),
        }
    }
}

#[test]
fn threads_incrementing_counters_on_overlapping_pages_lose_nothing() {
    const THREADS: u64 = 4;
    const PAGES: u32 = 8;
    const ITERATIONS: u64 = 3000;
    for policy in [Policy::Lru, Policy::Clock] {
        let dev = MemDevice::new();
        let pool = pool_with(&dev, 4, policy);
        for p in 1..=PAGES {
            pool.create(PageId(p)).unwrap().copy_from_slice(&image(PageId(p), 0));
        }
        pool.flush_all().unwrap();

        let totals: Vec<Vec<u64>> = thread::scope(|s| {
            let handles: Vec<_> = (0..THREADS)
                .map(|t| {
                    let pool = &pool;
                    s.spawn(move || {
                        let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (t + 1));
                        let mut mine = vec![0u64; PAGES as usize + 1];
                        for i in 0..ITERATIONS {
                            let p = 1 + rng.below(u64::from(PAGES)) as u32;
                            match rng.below(20) {
                                0..=11 => {
                                    bump(&mut retry(|| pool.write(PageId(p))));
                                    mine[p as usize] += 1;
                                }
                                12..=15 => {
                                    let g = retry(|| pool.read(PageId(p)));
                                    assert_eq!(page::page_id(&g), PageId(p));
                                    assert!(counter(&g) >= mine[p as usize]);
                                }
                                16..=18 => {
                                    // Hold page a while changing page b > a
                                    // (ordered, so threads cannot wait in a
                                    // cycle); on LimitExceeded let go of
                                    // both and retry.
                                    let a = 1 + rng.below(u64::from(PAGES) - 1) as u32;
                                    let b = a + 1 + rng.below(u64::from(PAGES - a)) as u32;
                                    loop {
                                        let ga = retry(|| pool.read(PageId(a)));
                                        match pool.write(PageId(b)) {
                                            Ok(mut gb) => {
                                                bump(&mut gb);
                                                mine[b as usize] += 1;
                                                drop(ga);
                                                break;
                                            }
                                            Err(Error::LimitExceeded { .. }) => {
                                                drop(ga);
                                                thread::yield_now();
                                            }
                                            Err(e) => panic!("unexpected error: {e}"),
                                        }
                                    }
                                }
                                _ => pool.flush_page(PageId(p)).unwrap(),
                            }
                            if t == 0 && i % 300 == 0 {
                                pool.flush_all().unwrap();
                            }
                            if t == 1 && i % 250 == 0 {
                                pool.evict_all().unwrap();
                            }
                            if t == 2 && i % 100 == 0 {
                                pool.check_invariants();
                            }
                        }
                        mine
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });

        pool.check_invariants();
        let expected = |p: u32| totals.iter().map(|m| m[p as usize]).sum::<u64>();
        for p in 1..=PAGES {
            assert_eq!(counter(&pool.read(PageId(p)).unwrap()), expected(p), "{policy:?}");
        }
        // And the same after a round trip through the device.
        pool.flush_all().unwrap();
        pool.evict_all().unwrap();
        for p in 1..=PAGES {
            assert_eq!(counter(&pool.read(PageId(p)).unwrap()), expected(p), "{policy:?}");
        }
        let st = pool.stats();
        assert!(st.evictions > 0 && st.writes > 0 && st.misses > 0, "{st:?}");
        pool.check_invariants();
    }
}

// ---- model test -------------------------------------------------------------

#[derive(Clone, Debug)]
enum Op {
    Read(u32),
    /// Change one body byte (offset from the body start) and the page LSN.
    Write(u32, usize, u8),
    Create(u32, u8),
    /// Read `.1` while holding a read guard on `.0`.
    ReadWhileHolding(u32, u32),
    FlushPage(u32),
    FlushAll,
    EvictAll,
}

fn page_no() -> impl Strategy<Value = u32> {
    1u32..=6
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => page_no().prop_map(Op::Read),
        4 => (page_no(), 0..PAGE_SIZE - HEADER_SIZE, any::<u8>())
            .prop_map(|(p, off, v)| Op::Write(p, off, v)),
        2 => (page_no(), any::<u8>()).prop_map(|(p, v)| Op::Create(p, v)),
        2 => (page_no(), page_no()).prop_map(|(a, b)| Op::ReadWhileHolding(a, b)),
        1 => page_no().prop_map(Op::FlushPage),
        1 => Just(Op::FlushAll),
        1 => Just(Op::EvictAll),
    ]
}

fn policy() -> impl Strategy<Value = Policy> {
    prop_oneof![Just(Policy::Lru), Just(Policy::Clock)]
}

/// Checks a read result against the model: the page's content, or Corrupt
/// for a page that was never created.
fn check_read(model: &HashMap<PageId, Vec<u8>>, id: PageId, result: &Result<PageReadGuard<'_>>) {
    match (model.get(&id), result) {
        (Some(want), Ok(g)) => assert_eq!(unsealed(g), unsealed(want), "content of {id}"),
        (None, Err(Error::Corrupt { page, .. })) => assert_eq!(*page, id),
        (want, got) => panic!("{id}: model has {:?}, pool gave {got:?}", want.is_some()),
    }
}

/// Every page the pool does not hold dirty is on the device as the model has it.
fn check_device(dev: &MemDevice, pool: &BufferPool, model: &HashMap<PageId, Vec<u8>>) {
    let dirty: Vec<PageId> = pool.dirty_pages().into_iter().map(|(p, _)| p).collect();
    for (id, want) in model {
        if dirty.contains(id) {
            continue;
        }
        let on_disk = dev.get(*id).unwrap_or_else(|| panic!("{id} never written"));
        page::verify(&on_disk, *id).unwrap();
        assert_eq!(unsealed(&on_disk), unsealed(want), "{id} on the device");
    }
}

fn run_model(policy: Policy, frame_count: usize, read_ahead: usize, ops: Vec<Op>) {
    let dev = MemDevice::new();
    let pool = pool_with(&dev, frame_count, policy);
    pool.set_read_ahead(read_ahead);
    let mut model: HashMap<PageId, Vec<u8>> = HashMap::new();
    for (step, op) in ops.into_iter().enumerate() {
        let lsn = Lsn(step as u64 + 1);
        match op {
            Op::Read(p) => check_read(&model, PageId(p), &pool.read(PageId(p))),
            Op::Write(p, off, v) => {
                let id = PageId(p);
                match (model.get_mut(&id), pool.write(id)) {
                    (Some(want), Ok(mut g)) => {
                        assert_eq!(unsealed(&g), unsealed(want));
                        g[HEADER_SIZE + off] = v;
                        page::set_lsn(&mut g, lsn);
                        want[HEADER_SIZE + off] = v;
                        page::set_lsn(want, lsn);
                    }
                    (None, Err(Error::Corrupt { .. })) => {}
                    (want, got) => {
                        panic!("{id}: model has {:?}, pool gave {got:?}", want.is_some())
                    }
                }
            }
            Op::Create(p, v) => {
                let id = PageId(p);
                let mut g = pool.create(id).unwrap();
                assert!(g.iter().all(|&b| b == 0));
                page::format(&mut g, id, PageType::Slotted);
                g[HEADER_SIZE..HEADER_SIZE + 32].fill(v);
                page::set_lsn(&mut g, lsn);
                model.insert(id, g.to_vec());
            }
            Op::ReadWhileHolding(a, b) => {
                let held = pool.read(PageId(a));
                check_read(&model, PageId(a), &held);
                let second = pool.read(PageId(b));
                if held.is_ok() && a != b && frame_count == 1 {
                    // The only frame is pinned by `held`.
                    assert!(matches!(second, Err(Error::LimitExceeded { .. })), "{second:?}");
                } else {
                    check_read(&model, PageId(b), &second);
                }
                pool.check_invariants();
            }
            Op::FlushPage(p) => {
                pool.flush_page(PageId(p)).unwrap();
                assert!(pool.dirty_pages().iter().all(|&(q, _)| q != PageId(p)));
            }
            Op::FlushAll => {
                pool.flush_all().unwrap();
                assert!(pool.dirty_pages().is_empty());
            }
            Op::EvictAll => {
                pool.evict_all().unwrap();
                assert!(pool.dirty_pages().is_empty());
            }
        }
        pool.check_invariants();
        // Dirty pages are model pages, with the model's LSN.
        for (id, lsn) in pool.dirty_pages() {
            assert_eq!(page::lsn(&model[&id]), lsn, "LSN of dirty {id}");
        }
        check_device(&dev, &pool, &model);
    }
    pool.flush_all().unwrap();
    pool.evict_all().unwrap();
    check_device(&dev, &pool, &model);
    for id in model.keys() {
        check_read(&model, *id, &pool.read(*id));
    }
    pool.check_invariants();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn pool_matches_a_map_model(
        policy in policy(),
        frame_count in 1usize..=4,
        read_ahead in prop_oneof![Just(1usize), Just(2), Just(4), Just(8)],
        ops in proptest::collection::vec(op(), 1..80),
    ) {
        run_model(policy, frame_count, read_ahead, ops);
    }
}

#[test]
fn read_ahead_fills_free_frames_with_the_run_and_drops_what_does_not_verify() {
    let dev = MemDevice::new();
    // Pages 8..=13 written; 14 and 15 never were.
    for p in 8..=13 {
        dev.put(PageId(p), &image(PageId(p), p as u8));
    }
    let pool = pool_with(&dev, 16, Policy::Clock);
    pool.set_read_ahead(8);
    assert_eq!(pool.read(PageId(10)).unwrap()[HEADER_SIZE], 10);
    assert_eq!(pool.stats().read_ahead, 0, "a run's first miss reads one page");
    assert_eq!(pool.read(PageId(12)).unwrap()[HEADER_SIZE], 12);
    let s = pool.stats();
    assert_eq!((s.misses, s.reads, s.read_ahead), (2, 6, 4), "{s:?}");
    pool.check_invariants();
    for p in 8..=13 {
        assert_eq!(pool.read(PageId(p)).unwrap()[HEADER_SIZE], p as u8);
    }
    assert_eq!(pool.stats().misses, 2, "the run was cached");
    // A never-written page still reports its damage.
    assert!(matches!(pool.read(PageId(14)), Err(Error::Corrupt { .. })));
    pool.check_invariants();
}

#[test]
fn read_ahead_never_evicts() {
    let dev = MemDevice::new();
    for p in 0..32 {
        dev.put(PageId(p), &image(PageId(p), p as u8));
    }
    let pool = pool_with(&dev, 4, Policy::Lru);
    pool.set_read_ahead(8);
    drop(pool.read(PageId(17)).unwrap());
    drop(pool.read(PageId(20)).unwrap());
    assert_eq!(pool.stats().read_ahead, 2, "two free frames, two pages ahead");
    drop(pool.read(PageId(25)).unwrap());
    drop(pool.read(PageId(26)).unwrap());
    let s = pool.stats();
    assert_eq!(
        (s.misses, s.read_ahead),
        (4, 2),
        "a full pool reads only the page asked for: {s:?}"
    );
    for p in [16, 17, 18, 20, 25, 26] {
        assert_eq!(pool.read(PageId(p)).unwrap()[HEADER_SIZE], p as u8);
    }
    pool.check_invariants();
}

#[test]
fn read_ahead_rounds_to_a_power_of_two_and_one_turns_it_off() {
    let dev = MemDevice::new();
    for p in 0..16 {
        dev.put(PageId(p), &image(PageId(p), p as u8));
    }
    let pool = pool_with(&dev, 32, Policy::Clock);
    pool.set_read_ahead(1);
    drop(pool.read(PageId(3)).unwrap());
    assert_eq!(pool.stats().read_ahead, 0);
    pool.set_read_ahead(6); // 4: pages 4..=7 around pages 5 and 6
    drop(pool.read(PageId(5)).unwrap());
    drop(pool.read(PageId(6)).unwrap());
    assert_eq!(pool.stats().read_ahead, 2);
    pool.check_invariants();
}

/// A page client's pool: installed images are clean (never written back),
/// `read_cached` never reads the device, and `discard` drops a clean
/// unpinned page but keeps a pinned one.
#[test]
fn installed_pages_are_clean_and_can_be_discarded() {
    let device = MemDevice::new();
    let pool = pool_with(&device, 2, Policy::Lru);
    assert!(pool.read_cached(PageId(1)).unwrap().is_none());
    assert_eq!(device.reads(), 0, "read_cached never reads the device");
    pool.install(PageId(1), &image(PageId(1), 7)).unwrap();
    pool.install(PageId(2), &image(PageId(2), 8)).unwrap();
    assert!(pool.install(PageId(3), &[0u8; 10]).is_err(), "a short image is refused");
    {
        let g = pool.read_cached(PageId(1)).unwrap().expect("installed");
        assert_eq!(g[HEADER_SIZE], 7);
        assert!(!pool.discard(PageId(1)).unwrap(), "a pinned page stays");
    }
    // Evicting both installed pages writes nothing: they are clean.
    device.put(PageId(3), &image(PageId(3), 9));
    device.put(PageId(4), &image(PageId(4), 9));
    drop(pool.read(PageId(3)).unwrap());
    drop(pool.read(PageId(4)).unwrap());
    assert_eq!(device.writes(), 0, "installed pages are never written back");
    assert!(pool.discard(PageId(3)).unwrap());
    assert!(pool.read_cached(PageId(3)).unwrap().is_none());
    assert!(pool.read_cached(PageId(4)).unwrap().is_some());
    assert!(pool.discard(PageId(9)).unwrap(), "an uncached page is already gone");
    pool.check_invariants();
}

#[test]
fn read_around_cold_runs_may_exceed_read_ahead_but_never_fill_past_half_the_pool() {
    let dev = MemDevice::new();
    for p in 1..64 {
        dev.put(PageId(p), &image(PageId(p), p as u8));
    }
    let pool = pool_with(&dev, 16, Policy::Clock);
    pool.set_read_ahead(4);
    // 40 rounds down to 32: the run of page 33 is 32..=63.
    pool.set_read_around_cold(40);
    assert_eq!(pool.read(PageId(33)).unwrap()[HEADER_SIZE], 33);
    let s = pool.stats();
    // One frame for the miss, then read-around stops at half the pool.
    assert_eq!((s.misses, s.read_ahead), (1, 7), "{s:?}");
    for p in 32..=39 {
        assert_eq!(pool.read(PageId(p)).unwrap()[HEADER_SIZE], p as u8);
    }
    assert_eq!(pool.stats().misses, 1, "32..=39 came with the first read");
    // Half full: a lone miss reads one page.
    drop(pool.read(PageId(50)).unwrap());
    assert_eq!(pool.stats().read_ahead, 7);
    pool.check_invariants();
}

#[test]
fn read_around_cold_reads_the_run_of_every_miss_until_half_the_pool_is_used() {
    let dev = MemDevice::new();
    for p in 1..64 {
        dev.put(PageId(p), &image(PageId(p), p as u8));
    }
    let pool = pool_with(&dev, 16, Policy::Clock);
    pool.set_read_ahead(4);
    pool.set_read_around_cold(4);
    // Cold: a lone miss reads its whole aligned run (8..=11).
    assert_eq!(pool.read(PageId(9)).unwrap()[HEADER_SIZE], 9);
    let s = pool.stats();
    assert_eq!((s.misses, s.read_ahead), (1, 3), "{s:?}");
    // One more cold miss: 8 frames used, half the pool.
    drop(pool.read(PageId(21)).unwrap());
    assert_eq!(pool.stats().read_ahead, 6);
    for p in 8..=11 {
        assert_eq!(pool.read(PageId(p)).unwrap()[HEADER_SIZE], p as u8);
    }
    assert_eq!(pool.stats().misses, 2, "the runs were cached");
    // Half full: a lone miss reads one page again.
    drop(pool.read(PageId(41)).unwrap());
    let s = pool.stats();
    assert_eq!((s.misses, s.read_ahead), (3, 6), "{s:?}");
    pool.check_invariants();
    // Off (the default): a lone miss in a cold pool reads one page.
    let pool = pool_with(&dev, 16, Policy::Clock);
    pool.set_read_ahead(4);
    drop(pool.read(PageId(9)).unwrap());
    assert_eq!(pool.stats().read_ahead, 0);
}
