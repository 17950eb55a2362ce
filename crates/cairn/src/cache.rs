//! The client object cache: decoded objects by OID, bounded in bytes, with
//! stable slots that references swizzle to.
//!
//! Each cached object lives in a *slot*. A [`crate::Ref`] that has been
//! followed once remembers its slot index and the slot's *generation*;
//! following it again checks the generation and reads the slot by index —
//! no hash lookup. Evicting or invalidating an object bumps its slot's
//! generation, so every reference to it stops pointing at it safely (it
//! falls back to a lookup, then a fault).
//!
//! The cache holds committed state only. The typed layer removes an object
//! from it when a transaction changes or deletes it (under an exclusive lock
//! on the object's home page), and locks the home page (shared) before using
//! a cached copy, so a cached object is never stale for a transaction that
//! uses it. Each slot remembers the last transaction that locked it, so a
//! transaction following the same reference again skips the lock manager.
//!
//! Replacement is LRU (a list threaded through the slots) or CLOCK (a
//! reference bit and a hand), chosen at creation; the size bound counts
//! encoded object bytes plus a fixed per-object overhead.

use std::any::Any;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use cairn_storage::Oid;

use crate::dual::{Backing, DualBuffer, Located, Probe};
use crate::error::{Error, Result};

/// The dual buffer's view of a transaction during one call: the image of
/// the page being faulted in, read beforehand (the buffer never reads
/// pages itself under its mutex), where a record is in an image, and the
/// modified copies the call flushed, collected to be handed to their
/// transactions (a transaction applies them to its storage transaction
/// itself, outside the mutex: the buffer never waits for a lock).
struct Fault {
    image: Option<(cairn_storage::PageId, Arc<[u8]>)>,
    flushed: Vec<(u64, Oid, Arc<[u8]>)>,
}

impl Backing for Fault {
    fn load(&mut self, page: cairn_storage::PageId) -> Result<Arc<[u8]>> {
        match &self.image {
            Some((p, image)) if *p == page => Ok(Arc::clone(image)),
            _ => Err(Error::Internal(format!(
                "the dual buffer asked for page {page}, which was not read for it"
            ))),
        }
    }

    fn locate(&mut self, image: &[u8], oid: Oid) -> Result<Option<std::ops::Range<usize>>> {
        Ok(cairn_storage::record::object::home_record(image, oid)?)
    }

    fn flush_object(&mut self, owner: u64, oid: Oid, bytes: &[u8]) -> Result<()> {
        self.flushed.push((owner, oid, Arc::from(bytes)));
        Ok(())
    }
}

/// Changes flushed out of the dual buffer, by transaction, in the order
/// flushed: the transaction writes them into its storage transaction the
/// next time it changes something, and at commit.
type Outbox = cairn_storage::fxhash::FxHashMap<u64, Vec<(Oid, Arc<[u8]>)>>;

/// The dual buffer and the changes it flushed, under one mutex.
struct Shared {
    buf: DualBuffer,
    outbox: Outbox,
    /// Counts [`ObjectCache::installed`] calls: a page image read before a
    /// commit installed its page is faulted in only if no install happened
    /// since it was read ([`ObjectCache::fault_in_since`]).
    installs: u64,
}

impl Shared {
    /// Runs `f` on the buffer with a [`Fault`] holding `image` (the page
    /// read for it, if any), then hands what it flushed, even if it
    /// failed, to its transactions' outboxes.
    fn call<R>(
        &mut self,
        image: Option<(cairn_storage::PageId, Arc<[u8]>)>,
        f: impl FnOnce(&mut DualBuffer, &mut Fault) -> Result<R>,
    ) -> Result<R> {
        let mut fault = Fault {
            image,
            flushed: Vec::new(),
        };
        let r = f(&mut self.buf, &mut fault);
        for (owner, oid, bytes) in fault.flushed {
            self.outbox.entry(owner).or_default().push((oid, bytes));
        }
        r
    }

    /// Takes `owner`'s flushed changes.
    fn take(&mut self, owner: u64) -> Vec<(Oid, Arc<[u8]>)> {
        self.outbox.remove(&owner).unwrap_or_default()
    }

    /// Forgets `owner`'s flushed change to `oid`, superseded or deleted.
    fn withdraw(&mut self, owner: u64, oid: Oid) {
        if let Some(v) = self.outbox.get_mut(&owner) {
            v.retain(|(o, _)| *o != oid);
        }
    }
}

/// Bytes charged per cached object on top of its encoded size.
pub const ENTRY_OVERHEAD_BYTES: usize = 96;

/// Replacement policy of the object cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum CachePolicy {
    /// Least recently used (a list threaded through the slots, moved on every hit).
    Lru,
    /// CLOCK (second chance): a hit only sets a bit, so it is the default.
    #[default]
    Clock,
}

/// Counters of the object cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Objects read from the store (misses).
    pub faults: u64,
    /// Objects decoded and cached because a fault read their page anyway
    /// (not counted in `faults`).
    pub prefetches: u64,
    /// Lookups answered from the cache (by OID or through a swizzled reference).
    pub hits: u64,
    /// Of the hits, those through a swizzled reference (no hash lookup).
    pub swizzled_hits: u64,
    /// References swizzled (bound to a slot).
    pub swizzles: u64,
    /// Objects evicted to stay within the size bound.
    pub evictions: u64,
    /// Objects removed because a transaction changed or deleted them.
    pub invalidations: u64,
    /// Objects cached now.
    pub objects: u64,
    /// Bytes charged now.
    pub bytes: u64,
    /// Index lookups answered from the index cache (no B+-tree descent).
    pub index_hits: u64,
    /// Index lookups that descended the B+-tree.
    pub index_misses: u64,
    /// Page faults of the client's dual buffer: page images copied in for
    /// objects read in place ([`crate::Transaction::view`]).
    pub image_loads: u64,
    /// Views answered from the dual buffer (in place or from a copy).
    pub image_hits: u64,
    /// Page images held now.
    pub images: u64,
    /// The dual buffer's counters.
    pub dual: crate::dual::DualStats,
}

/// A cached, decoded object.
pub type CachedObject = Arc<dyn Any + Send + Sync>;

const NIL: u32 = u32::MAX;

struct Slot {
    oid: Oid,
    gen: u32,
    obj: Option<CachedObject>,
    bytes: usize,
    last_txn: u64,
    /// What the copy was decoded under, for an object-server client: the
    /// epoch of the right whose bytes it was decoded from (0: none). A
    /// transaction that did not decode or look it up itself trusts it
    /// only while the client holds a right of that same epoch.
    token: u64,
    referenced: bool,
    prev: u32,
    next: u32,
}

struct State {
    map: cairn_storage::fxhash::FxHashMap<Oid, u32>,
    /// Pages an object was faulted from, and by which transaction: a fault
    /// there by another transaction prefetches the page's objects
    /// ([`ObjectCache::refaulted`]).
    faulted_pages: cairn_storage::fxhash::FxHashMap<cairn_storage::PageId, u64>,
    /// The cached objects of each home page, so a page changed by another
    /// client drops them all ([`ObjectCache::invalidate_page`]).
    by_page: cairn_storage::fxhash::FxHashMap<cairn_storage::PageId, Vec<u32>>,
    slots: Vec<Slot>,
    free: Vec<u32>,
    bytes: usize,
    /// LRU list: head = most recent.
    head: u32,
    tail: u32,
    hand: usize,
}

/// The object cache. Shared by all transactions of a database.
pub struct ObjectCache {
    state: Mutex<State>,
    capacity_bytes: usize,
    policy: CachePolicy,
    faults: AtomicU64,
    hits: AtomicU64,
    swizzled_hits: AtomicU64,
    swizzles: AtomicU64,
    prefetches: AtomicU64,
    evictions: AtomicU64,
    invalidations: AtomicU64,
    /// The client buffer objects are read in place from: page images and
    /// object copies (see [`crate::dual`]).
    dual: Mutex<Shared>,
}

impl std::fmt::Debug for ObjectCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectCache").field("stats", &self.stats()).finish()
    }
}

/// A cache hit: the object, its slot and generation, and the last
/// transaction that locked it.
pub struct Hit {
    /// The object.
    pub obj: CachedObject,
    /// Its slot.
    pub slot: u32,
    /// The slot's generation.
    pub gen: u32,
    /// The last transaction that locked its home page.
    pub last_txn: u64,
    /// What it was decoded under (see [`ObjectCache::insert`]).
    pub token: u64,
}

impl ObjectCache {
    /// A cache of at most `capacity_bytes` of decoded objects, with the
    /// dual buffer `dual` for objects read in place.
    pub fn new(capacity_bytes: usize, policy: CachePolicy, dual: DualBuffer) -> ObjectCache {
        ObjectCache {
            state: Mutex::new(State {
                map: cairn_storage::fxhash::FxHashMap::default(),
                faulted_pages: Default::default(),
                by_page: Default::default(),
                slots: Vec::new(),
                free: Vec::new(),
                bytes: 0,
                head: NIL,
                tail: NIL,
                hand: 0,
            }),
            capacity_bytes,
            policy,
            faults: AtomicU64::new(0),
            hits: AtomicU64::new(0),
            swizzled_hits: AtomicU64::new(0),
            swizzles: AtomicU64::new(0),
            prefetches: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
            invalidations: AtomicU64::new(0),
            dual: Mutex::new(Shared {
                buf: dual,
                outbox: Outbox::default(),
                installs: 0,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reads slot `slot` if it still holds generation `gen` of `oid`.
    pub fn get_slot(&self, slot: u32, gen: u32, oid: Oid) -> Option<Hit> {
        let mut st = self.lock();
        let s = st.slots.get(slot as usize)?;
        if s.gen != gen || s.oid != oid {
            return None;
        }
        let obj = s.obj.clone()?;
        let (last_txn, token) = (s.last_txn, s.token);
        self.touch(&mut st, slot);
        self.hits.fetch_add(1, Ordering::Relaxed);
        self.swizzled_hits.fetch_add(1, Ordering::Relaxed);
        Some(Hit {
            obj,
            slot,
            gen,
            last_txn,
            token,
        })
    }

    /// Looks `oid` up by hash, recording `txn` as the last transaction that
    /// locked it (the caller holds the lock), if `trusted` accepts the
    /// copy's token (what it was decoded under, [`ObjectCache::insert`]);
    /// a copy it refuses is dropped.
    pub fn lookup(&self, oid: Oid, txn: u64, trusted: impl FnOnce(u64) -> bool) -> Option<Hit> {
        let mut st = self.lock();
        let slot = *st.map.get(&oid)?;
        let s = &mut st.slots[slot as usize];
        if s.last_txn != txn && !trusted(s.token) {
            self.invalidations.fetch_add(1, Ordering::Relaxed);
            self.drop_slot(&mut st, slot);
            return None;
        }
        let s = &mut st.slots[slot as usize];
        let hit = Hit {
            obj: s.obj.clone()?,
            slot,
            gen: s.gen,
            last_txn: s.last_txn,
            token: s.token,
        };
        s.last_txn = txn;
        self.touch(&mut st, slot);
        self.hits.fetch_add(1, Ordering::Relaxed);
        Some(hit)
    }

    /// Records that transaction `txn` holds the lock for the object in `slot`.
    pub fn set_last_txn(&self, slot: u32, gen: u32, txn: u64) {
        let mut st = self.lock();
        if let Some(s) = st.slots.get_mut(slot as usize) {
            if s.gen == gen {
                s.last_txn = txn;
            }
        }
    }

    /// Counts hits answered by a transaction's own table of fetched objects
    /// (through swizzled references).
    pub fn add_hits(&self, n: u64) {
        self.hits.fetch_add(n, Ordering::Relaxed);
        self.swizzled_hits.fetch_add(n, Ordering::Relaxed);
    }

    /// Counts a reference swizzle.
    pub fn note_swizzle(&self) {
        self.swizzles.fetch_add(1, Ordering::Relaxed);
    }

    /// Caches a freshly read object (a fault) decoded under `token` (for
    /// an object-server client, the epoch of the right whose bytes it was
    /// decoded from, 0 if none; for a page-based transaction anything: its
    /// lock decides); returns its slot and generation.
    pub fn insert(&self, oid: Oid, obj: CachedObject, encoded_bytes: usize, txn: u64, token: u64) -> (u32, u32) {
        self.faults.fetch_add(1, Ordering::Relaxed);
        let mut st = self.lock();
        if let Some(&old) = st.map.get(&oid) {
            self.drop_slot(&mut st, old);
        }
        let (slot, gen) = self.place(&mut st, oid, obj, encoded_bytes, txn, true);
        st.slots[slot as usize].token = token;
        (slot, gen)
    }

    /// Notes a fault on `page` by transaction `txn`; true if an earlier
    /// transaction faulted there too. The typed layer prefetches a page's
    /// objects only then: within one transaction (a cold start, a one-off
    /// scan) every fault costs one decode, and a page that keeps being
    /// faulted across transactions (the working set coming back) is decoded
    /// whole. The table is bounded by the number of cached objects, and
    /// cleared past it.
    pub fn refaulted(&self, page: cairn_storage::PageId, txn: u64) -> bool {
        let mut st = self.lock();
        if let Some(&t) = st.faulted_pages.get(&page) {
            return t != txn;
        }
        if st.faulted_pages.len() > st.map.len() + 1024 {
            st.faulted_pages.clear();
        }
        st.faulted_pages.insert(page, txn);
        false
    }

    /// Caches objects decoded because a fault read their page anyway: each
    /// (OID, object, encoded bytes) not cached already is added, unreferenced
    /// (CLOCK evicts it first unless it is used).
    pub fn insert_prefetched(&self, objects: Vec<(Oid, CachedObject, usize)>) {
        let mut st = self.lock();
        let mut n = 0;
        for (oid, obj, bytes) in objects {
            if !st.map.contains_key(&oid) {
                self.place(&mut st, oid, obj, bytes, 0, false);
                n += 1;
            }
        }
        self.prefetches.fetch_add(n, Ordering::Relaxed);
    }

    /// Puts `oid` (not cached) into a slot, evicting to make room.
    fn place(
        &self,
        st: &mut State,
        oid: Oid,
        obj: CachedObject,
        encoded_bytes: usize,
        txn: u64,
        referenced: bool,
    ) -> (u32, u32) {
        let charge = encoded_bytes + ENTRY_OVERHEAD_BYTES;
        while st.bytes + charge > self.capacity_bytes && !st.map.is_empty() {
            if !self.evict_one(st) {
                break;
            }
        }
        let slot = match st.free.pop() {
            Some(i) => i,
            None => {
                st.slots.push(Slot {
                    oid,
                    gen: 0,
                    obj: None,
                    bytes: 0,
                    last_txn: 0,
                    token: 0,
                    referenced: false,
                    prev: NIL,
                    next: NIL,
                });
                (st.slots.len() - 1) as u32
            }
        };
        let s = &mut st.slots[slot as usize];
        s.oid = oid;
        s.obj = Some(obj);
        s.bytes = charge;
        s.last_txn = txn;
        s.token = 0;
        s.referenced = referenced;
        let gen = s.gen;
        st.bytes += charge;
        st.map.insert(oid, slot);
        st.by_page.entry(oid.page).or_default().push(slot);
        self.link_front(st, slot);
        (slot, gen)
    }

    fn dual(&self) -> MutexGuard<'_, Shared> {
        self.dual.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What the dual buffer holds of `oid` for transaction `owner`, with
    /// no page fault (the caller holds the page's lock): its bytes if it is
    /// described or its page is resident (an object fault answered from
    /// the resident page), `Probe::Elsewhere` if it is not in its page in
    /// a form read in place (or is the caller's own flushed change), and
    /// `Probe::Miss` only if its page must be read ([`ObjectCache::fault_in`]).
    pub fn buffered(&self, owner: u64, oid: Oid) -> Result<Probe> {
        self.dual()
            .call(None, |buf, fault| match buf.probe(owner, oid, fault)? {
                // The page is here: no image to read (`Fault` is never asked
                // to load while the mutex is held).
                Probe::Miss if buf.is_resident(oid.page) => Ok(match buf.access(owner, oid, fault)? {
                    Some(l) => Probe::Hit(l),
                    None => Probe::Elsewhere,
                }),
                other => Ok(other),
            })
    }

    /// A page fault of the dual buffer for `oid`: `image` is its page's
    /// committed image, read under the page's lock (outside the buffer's
    /// mutex, so other transactions go on meanwhile). `None`: the record
    /// is not in its page in a form read in place.
    pub fn fault_in(&self, owner: u64, oid: Oid, image: Arc<[u8]>) -> Result<Option<Located>> {
        self.dual()
            .call(Some((oid.page, image)), |buf, fault| buf.access(owner, oid, fault))
    }

    /// Where the count of installs stands ([`ObjectCache::fault_in_since`]):
    /// taken before a page image is read without a lock on the whole page.
    pub fn installs(&self) -> u64 {
        self.dual().installs
    }

    /// [`ObjectCache::fault_in`] of an image read after [`ObjectCache::installs`]
    /// answered `since`, without a lock on the whole page (under object
    /// locking): refused (`None`, as a record not read in place) if a
    /// commit installed any page since — the image may predate it, and
    /// would stay in the buffer after [`ObjectCache::installed`] dropped
    /// that page's images. So every image the buffer holds of a page is
    /// as new as the page's last install.
    pub fn fault_in_since(&self, since: u64, owner: u64, oid: Oid, image: Arc<[u8]>) -> Result<Option<Located>> {
        let mut dual = self.dual();
        if dual.installs != since {
            return Ok(None);
        }
        dual.call(Some((oid.page, image)), |buf, fault| buf.access(owner, oid, fault))
    }

    /// A commit installed `pages` (its locks are not released yet): their
    /// images leave the buffer, and faults of images read before are
    /// refused from now on (the storage engine's install hook, under
    /// object locking).
    pub fn installed(&self, pages: &[cairn_storage::PageId]) {
        let mut dual = self.dual();
        dual.installs += 1;
        for &page in pages {
            if dual.buf.invalidate_page(page) {
                self.invalidations.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Transaction `owner` changed `oid` to `bytes` (its encoded record),
    /// under an exclusive lock on its page: the dual buffer writes it
    /// through or keeps it as a modified copy, by its strategy
    /// (`DualBuffer::modify`). Returns every change of `owner` flushed
    /// so far (this one if written through), which the caller writes into
    /// its storage transaction now.
    pub fn modify(&self, owner: u64, oid: Oid, bytes: Arc<[u8]>) -> Result<Vec<(Oid, Arc<[u8]>)>> {
        let mut dual = self.dual();
        dual.withdraw(owner, oid);
        dual.call(None, |buf, fault| buf.modify(owner, oid, bytes, fault))?;
        Ok(dual.take(owner))
    }

    /// Transaction `owner` deletes `oid` (under an exclusive lock): any
    /// change to it held or flushed is dropped; it reads the object from
    /// its own pages from now on (`DualBuffer::discard`). Returns
    /// `owner`'s other flushed changes, to write now.
    pub fn discard(&self, owner: u64, oid: Oid) -> Result<Vec<(Oid, Arc<[u8]>)>> {
        let mut dual = self.dual();
        dual.withdraw(owner, oid);
        dual.buf.discard(owner, oid)?;
        Ok(dual.take(owner))
    }

    /// Before `owner` commits: every change it holds in the dual buffer,
    /// flushed (`DualBuffer::flush_for_commit`), with those flushed
    /// before; the caller writes them into its storage transaction, then
    /// calls [`ObjectCache::committed`].
    pub fn flush_for_commit(&self, owner: u64) -> Result<Vec<(Oid, Arc<[u8]>)>> {
        let mut dual = self.dual();
        dual.call(None, |buf, fault| buf.flush_for_commit(owner, fault))?;
        Ok(dual.take(owner))
    }

    /// `owner`'s changes are all in its storage transaction, which commits
    /// next (its exclusive locks still held): the pages it changed leave
    /// the dual buffer, counted as flushed (`DualBuffer::committed`).
    pub fn committed(&self, owner: u64) -> Result<()> {
        let mut dual = self.dual();
        if dual.outbox.get(&owner).is_some_and(|v| !v.is_empty()) {
            // Nothing of it is held after `flush_for_commit`, so nothing
            // can have been flushed since: refuse rather than lose it.
            return Err(Error::Internal(format!(
                "changes of transaction {owner} were flushed after its commit began"
            )));
        }
        let dropped = dual.buf.committed(owner);
        self.invalidations.fetch_add(dropped as u64, Ordering::Relaxed);
        Ok(())
    }

    /// `owner` ended without committing (aborted, dropped, or its commit
    /// failed): its modified copies and flushed changes are dropped.
    pub fn end(&self, owner: u64) {
        let mut dual = self.dual();
        dual.buf.abort(owner);
        dual.outbox.remove(&owner);
    }

    /// Notes that `oid`'s record, as the dual buffer holds it, was checked
    /// as `class` at schema `version`.
    pub fn note_checked(&self, oid: Oid, checked: crate::view::CheckedAs) {
        self.dual().buf.note_checked(oid, checked);
    }

    /// Drops the image of `page`: a transaction changed it (called before
    /// the change commits, while the page is still locked exclusively).
    pub fn invalidate_image(&self, page: cairn_storage::PageId) {
        if self.dual().buf.invalidate_page(page) {
            self.invalidations.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Removes `oid` (a transaction changed or deleted it).
    pub fn invalidate(&self, oid: Oid) {
        let mut st = self.lock();
        if let Some(&slot) = st.map.get(&oid) {
            self.drop_slot(&mut st, slot);
            self.invalidations.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Removes every object whose home is `page`: another client changed
    /// the page (a page-server client learns it when a fetch brings a new
    /// image).
    pub fn invalidate_page(&self, page: cairn_storage::PageId) {
        if self.dual().buf.invalidate_page(page) {
            self.invalidations.fetch_add(1, Ordering::Relaxed);
        }
        let mut st = self.lock();
        let Some(slots) = st.by_page.get(&page).cloned() else {
            return;
        };
        for slot in slots {
            self.drop_slot(&mut st, slot);
            self.invalidations.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Drops every object.
    pub fn clear(&self) {
        let mut st = self.lock();
        let slots: Vec<u32> = st.map.values().copied().collect();
        for s in slots {
            self.drop_slot(&mut st, s);
        }
        st.faulted_pages.clear();
        st.by_page.clear();
        drop(st);
        self.dual().buf.clear();
    }

    /// The counters.
    pub fn stats(&self) -> CacheStats {
        let dual = self.dual().buf.stats();
        let st = self.lock();
        CacheStats {
            faults: self.faults.load(Ordering::Relaxed),
            prefetches: self.prefetches.load(Ordering::Relaxed),
            hits: self.hits.load(Ordering::Relaxed),
            swizzled_hits: self.swizzled_hits.load(Ordering::Relaxed),
            swizzles: self.swizzles.load(Ordering::Relaxed),
            evictions: self.evictions.load(Ordering::Relaxed),
            invalidations: self.invalidations.load(Ordering::Relaxed),
            objects: st.map.len() as u64,
            bytes: st.bytes as u64,
            index_hits: 0,
            index_misses: 0,
            image_loads: dual.page_faults,
            image_hits: dual.object_hits,
            images: dual.pages,
            dual,
        }
    }

    fn drop_slot(&self, st: &mut State, slot: u32) {
        self.unlink(st, slot);
        let s = &mut st.slots[slot as usize];
        st.map.remove(&s.oid);
        if let Some(v) = st.by_page.get_mut(&s.oid.page) {
            v.retain(|&x| x != slot);
            if v.is_empty() {
                st.by_page.remove(&s.oid.page);
            }
        }
        s.obj = None;
        s.gen = s.gen.wrapping_add(1);
        st.bytes -= s.bytes;
        s.bytes = 0;
        st.free.push(slot);
    }

    fn evict_one(&self, st: &mut State) -> bool {
        let victim = match self.policy {
            CachePolicy::Lru => st.tail,
            CachePolicy::Clock => {
                let n = st.slots.len();
                let mut found = NIL;
                for _ in 0..2 * n + 1 {
                    let i = st.hand % n.max(1);
                    st.hand = (st.hand + 1) % n.max(1);
                    let s = &mut st.slots[i];
                    if s.obj.is_none() {
                        continue;
                    }
                    if s.referenced {
                        s.referenced = false;
                    } else {
                        found = i as u32;
                        break;
                    }
                }
                found
            }
        };
        if victim == NIL {
            return false;
        }
        self.drop_slot(st, victim);
        self.evictions.fetch_add(1, Ordering::Relaxed);
        true
    }

    fn touch(&self, st: &mut State, slot: u32) {
        match self.policy {
            CachePolicy::Clock => st.slots[slot as usize].referenced = true,
            CachePolicy::Lru => {
                if st.head != slot {
                    self.unlink(st, slot);
                    self.link_front(st, slot);
                }
            }
        }
    }

    fn link_front(&self, st: &mut State, slot: u32) {
        if self.policy != CachePolicy::Lru {
            return;
        }
        let old = st.head;
        {
            let s = &mut st.slots[slot as usize];
            s.prev = NIL;
            s.next = old;
        }
        if old != NIL {
            st.slots[old as usize].prev = slot;
        } else {
            st.tail = slot;
        }
        st.head = slot;
    }

    fn unlink(&self, st: &mut State, slot: u32) {
        if self.policy != CachePolicy::Lru {
            return;
        }
        let (prev, next) = {
            let s = &st.slots[slot as usize];
            (s.prev, s.next)
        };
        if prev != NIL {
            st.slots[prev as usize].next = next;
        } else if st.head == slot {
            st.head = next;
        }
        if next != NIL {
            st.slots[next as usize].prev = prev;
        } else if st.tail == slot {
            st.tail = prev;
        }
        let s = &mut st.slots[slot as usize];
        s.prev = NIL;
        s.next = NIL;
    }

    /// Asserts the cache's internal consistency (tests).
    pub fn check_invariants(&self) {
        let st = self.lock();
        let mut bytes = 0;
        for (oid, &slot) in &st.map {
            let s = &st.slots[slot as usize];
            assert_eq!(s.oid, *oid);
            assert!(s.obj.is_some());
            bytes += s.bytes;
        }
        assert_eq!(bytes, st.bytes);
        let indexed: usize = st.by_page.values().map(Vec::len).sum();
        assert_eq!(indexed, st.map.len(), "every cached object is under its page, once");
        for (page, slots) in &st.by_page {
            for &slot in slots {
                assert_eq!(st.slots[slot as usize].oid.page, *page);
                assert_eq!(st.map.get(&st.slots[slot as usize].oid), Some(&slot));
            }
        }
        assert!(st.bytes <= self.capacity_bytes || st.map.len() <= 1);
        if self.policy == CachePolicy::Lru {
            let mut n = 0;
            let mut cur = st.head;
            while cur != NIL {
                n += 1;
                assert!(n <= st.map.len());
                cur = st.slots[cur as usize].next;
            }
            assert_eq!(n, st.map.len(), "LRU list covers every cached object");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dual() -> DualBuffer {
        DualBuffer::new(crate::dual::DualConfig::pages(
            16,
            4096,
            crate::dual::Strategy::default(),
        ))
        .unwrap()
    }
    use cairn_storage::{PageId, SlotIdx, Uniq};

    fn oid(n: u32) -> Oid {
        Oid {
            page: PageId(n),
            slot: SlotIdx(0),
            uniq: Uniq(1),
        }
    }

    /// A page changed by another client drops exactly that page's objects,
    /// and their swizzles stop hitting.
    #[test]
    fn invalidating_a_page_drops_its_objects_only() {
        let c = ObjectCache::new(1 << 20, CachePolicy::Lru, dual());
        let on = |page: u32, slot: u16| Oid {
            page: PageId(page),
            slot: SlotIdx(slot),
            uniq: Uniq(1),
        };
        let a = c.insert(on(5, 0), Arc::new(1u32), 10, 0, 0);
        c.insert(on(5, 1), Arc::new(2u32), 10, 0, 0);
        let b = c.insert(on(6, 0), Arc::new(3u32), 10, 0, 0);
        c.invalidate(on(5, 1));
        c.check_invariants();
        c.invalidate_page(PageId(5));
        c.check_invariants();
        assert!(c.get_slot(a.0, a.1, on(5, 0)).is_none());
        assert!(c.get_slot(b.0, b.1, on(6, 0)).is_some());
        assert_eq!(c.stats().objects, 1);
        assert_eq!(c.stats().invalidations, 2);
        c.invalidate_page(PageId(77));
        c.check_invariants();
    }

    #[test]
    fn bounded_by_bytes_and_generations_invalidate_swizzles() {
        for policy in [CachePolicy::Lru, CachePolicy::Clock] {
            let c = ObjectCache::new(10 * (100 + ENTRY_OVERHEAD_BYTES), policy, dual());
            let mut slots = Vec::new();
            for i in 0..30u32 {
                slots.push(c.insert(oid(i), Arc::new(i), 100, 0, 0));
                c.check_invariants();
            }
            let st = c.stats();
            assert_eq!(st.objects, 10);
            assert_eq!(st.evictions, 20);
            // The first objects were evicted: their swizzles no longer hit.
            let (s0, g0) = slots[0];
            assert!(c.get_slot(s0, g0, oid(0)).is_none());
            let (s29, g29) = slots[29];
            let hit = c.get_slot(s29, g29, oid(29)).unwrap();
            assert_eq!(*hit.obj.downcast::<u32>().unwrap(), 29);
            c.invalidate(oid(29));
            assert!(c.get_slot(s29, g29, oid(29)).is_none());
            assert!(c.lookup(oid(29), 0, |_| true).is_none());
            c.check_invariants();
        }
    }

    /// An object-server client's copy is trusted by another transaction
    /// only under the right (token) it was decoded under; refused, it is
    /// dropped, so no later transaction finds it either.
    #[test]
    fn a_copy_refused_for_its_token_is_dropped() {
        let c = ObjectCache::new(1 << 20, CachePolicy::Lru, dual());
        c.insert(oid(1), Arc::new(1u8), 10, 7, 42);
        assert!(c.lookup(oid(1), 7, |_| false).is_some(), "its own transaction's copy");
        assert!(c.lookup(oid(1), 8, |t| t == 42).is_some(), "under the same right");
        assert!(
            c.lookup(oid(1), 9, |t| t == 43).is_none(),
            "under another right: refused"
        );
        assert!(c.lookup(oid(1), 8, |_| true).is_none(), "and gone");
        c.check_invariants();
    }

    #[test]
    fn lru_keeps_what_is_used() {
        let c = ObjectCache::new(3 * (10 + ENTRY_OVERHEAD_BYTES), CachePolicy::Lru, dual());
        c.insert(oid(1), Arc::new(1u8), 10, 0, 0);
        c.insert(oid(2), Arc::new(2u8), 10, 0, 0);
        c.insert(oid(3), Arc::new(3u8), 10, 0, 0);
        assert!(c.lookup(oid(1), 0, |_| true).is_some());
        c.insert(oid(4), Arc::new(4u8), 10, 0, 0);
        assert!(c.lookup(oid(1), 0, |_| true).is_some(), "recently used stays");
        assert!(c.lookup(oid(2), 0, |_| true).is_none(), "least recently used goes");
        c.check_invariants();
    }
}
