//! Callback locking for the object-server client (DeWitt et al. §2.2;
//! `cairn_net::object_service::rights`): objects, whole pages of objects
//! (the adaptive client's), and the answers of index lookups, kept across
//! transactions.
//!
//! - **Rights.** An object fetched under S may come with a right (an
//!   epoch): the client keeps its bytes, and a later transaction reads it
//!   without asking, under an S lock only the client knows of. An index
//!   lookup whose key lies inside one leaf may come with a right on that
//!   leaf: the answer (key → values) is kept until the leaf changes. On a
//!   server that locks key ranges it comes instead with rights on the gaps
//!   its locks guarded, called back before an entry is inserted into one
//!   of them or deleted from it — by this client's own transactions too:
//!   the server calls those back from here as well. A
//!   page an adaptive client fetched whole comes with a right on the page:
//!   its image is kept and its small objects read in place from it (dual
//!   buffering: objects and pages in one cache); a transaction so reading
//!   reads under the page's right.
//! - **Callbacks.** Before another client's transaction changes the object
//!   (or the leaf), the server calls the right back; the callback thread
//!   (`rights::callback_daemon`, [`ObjectStore::answer_callback`]) drops what the right covered and answers
//!   "dropped", or names this client's transactions reading under it (the
//!   server grants them the locks they held in effect, and the writer
//!   waits for them in its lock table). The typed layer's decoded copies
//!   go with the right ([`ObjectStore::on_object_lost`]). A running
//!   snapshot that began before the callback still reads the bytes
//!   (`rights/retired.rs`).
//! - **This client's own writers.** A transaction about to change an
//!   object (or a B+-tree) first drops what it covers here and names this
//!   client's other transactions reading under those rights to the server
//!   (a CALLBACK_REPLY with id 0): its X then waits for them there. Later
//!   readers go to the server and wait for its locks. Its after-images are
//!   not kept: the next reader fetches the object again (with a new right);
//!   an image of the object's page goes too (its readers named as the
//!   page's), and none is taken in until the writer ends.
//! - **Bounds.** The cached objects' and images' bytes are bounded; past
//!   the bound the least recently used that nobody reads under are given
//!   back (RELEASE, one way). What is on pages a running transaction
//!   of an adaptive client changes stays until it ends (no steal).
//! - **A cold start** ([`ObjectStore::evict_cache`], what
//!   `Database::clear_caches` asks of this client) gives back every right
//!   nobody reads under, as the page client empties its pool.
//!
//! Not cached: objects too long to send whole, objects read under X,
//! lookups of absent keys and of keys at either end of a leaf.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use cairn_net::rights::Callback;
use cairn_storage::fxhash::{FxHashMap, FxHashSet};
use cairn_storage::lock::Resource;
use cairn_storage::{Oid, PageId, Result, TxnId};

use super::ObjectStore;
use crate::remote::lookups::{Kept, KeptLookups};
use crate::remote::rights::{release, Answering, Bound, Revoked, Table};
use crate::view::CheckedAs;

/// An object kept under a right.
struct Cached {
    epoch: u64,
    /// `None`: evicted while a running transaction reads under the right —
    /// the right stays (the server must still call it back, to name that
    /// reader) until no running transaction reads it, the bytes go.
    bytes: Option<Arc<[u8]>>,
    /// When it came or was last read (the client's clock): the least
    /// recently used go first when the cache is full. An object that came
    /// along with its page (an adaptive client's) and is never read ages
    /// out from its arrival.
    stamp: u64,
    /// Marks the client's user set on objects of these bytes (slot, mark:
    /// the typed layer's "checked as this class"), reset with the bytes.
    marks: Vec<(u16, CheckedAs)>,
    /// When the right came (the client's clock): a snapshot begun after
    /// it may read these bytes while the right is held
    /// ([`ObjectStore::use_object_before`]).
    since: u64,
}

/// What a running transaction reads under rights.
#[derive(Default)]
struct TxnRights {
    /// Objects and leaves it read under the client's rights.
    reads: FxHashSet<Resource>,
    /// Objects, and B+-tree pages, it changes (or is about to): until it
    /// ends no right to them is taken in or used by the others, since a
    /// reply granting one may carry the value it is replacing.
    writes: FxHashSet<Resource>,
    /// B+-trees (by root) with a change of it on the way to the server: no
    /// lookup of them is taken in or used by the others until the answer
    /// says which pages changed.
    trees: FxHashSet<PageId>,
    /// Whether an answer (or a writer's naming) named it, so that the
    /// server knows it, whether it is ending, and the answers naming it in
    /// flight.
    answering: Answering,
    /// Pages it changes an object of (an adaptive client's): every object
    /// of theirs the client keeps stays, bytes and all, until it ends —
    /// a transaction that changes an object tends to come back to the
    /// objects clustered with it, and the page client keeps its changed
    /// pages whole the same way (no steal).
    pinned: FxHashSet<PageId>,
    /// Pages of the objects it changes: until it ends no image of them is
    /// taken in (a reply may carry the image its change replaces).
    write_pages: FxHashSet<PageId>,
}

/// The client's rights and what its transactions read under them.
#[derive(Default)]
pub(super) struct RightsState {
    objects: FxHashMap<Oid, Cached>,
    /// Images of whole pages (an adaptive client's), kept under rights on
    /// the pages: their small objects are read in place.
    pages: FxHashMap<PageId, Cached>,
    /// Objects of page images dropped since the typed layer was last told
    /// ([`ObjectStore::lost`]); noted only once it listens
    /// (`track_lost`).
    lost_pending: Vec<Oid>,
    /// The typed layer has a hook for lost objects
    /// ([`ObjectStore::on_object_lost`]).
    pub(super) track_lost: bool,
    /// Ticks at every object taken in or read (the stamps' clock).
    clock: u64,
    /// Bytes of `objects` and `pages`.
    bytes: usize,
    /// Bytes of objects on pages running transactions pin, as the last
    /// eviction counted them: they are kept over the bound.
    pinned_bytes: usize,
    /// Index lookups, kept under rights on leaves (or gaps).
    lookups: KeptLookups,
    txns: FxHashMap<TxnId, TxnRights>,
    /// Rights called back before the reply granting them was taken in.
    revoked: Revoked,
    /// Copies kept past their rights for running snapshots
    /// (`rights/retired.rs`).
    retired: retired::Retired,
}

impl RightsState {
    /// An empty table that keeps up to `retired_max` bytes of called-back
    /// copies for running snapshots (`rights/retired.rs`).
    pub(super) fn new(retired_max: usize) -> RightsState {
        let mut st = RightsState::default();
        st.retired.bytes_max = retired_max;
        st
    }

    /// True if a transaction other than `txn` changes `key` (an object, or
    /// a B+-tree page), or (`tree`) has a change of that tree on the way.
    fn written(&self, key: Resource, tree: Option<PageId>, txn: TxnId) -> bool {
        self.txns
            .iter()
            .any(|(t, v)| *t != txn && (v.writes.contains(&key) || tree.is_some_and(|r| v.trees.contains(&r))))
    }

    /// Whether a right of `epoch` to `key`, just taken in, may be used
    /// (`tree`: the root of the leaf's tree).
    fn take_right(&mut self, key: Resource, epoch: u64, tree: Option<PageId>) -> bool {
        !self.written(key, tree, TxnId(0)) && self.revoked.admits(key, epoch)
    }

    /// An entry for `bytes` kept under a right of `epoch`, stamped now and
    /// counted in `bytes` (the caller inserts it).
    fn new_entry(&mut self, epoch: u64, bytes: Arc<[u8]>) -> Cached {
        self.bytes += bytes.len();
        self.clock += 1;
        Cached {
            epoch,
            bytes: Some(bytes),
            stamp: self.clock,
            marks: Vec::new(),
            since: self.clock,
        }
    }

    /// `txn`'s bookkeeping, removed (it ended). A reply still in flight
    /// may carry a right to something it wrote, granted before its commit
    /// (a snapshot's read, under a lock held for that request alone): the
    /// client's own writer calls none of its rights back, so such a right
    /// is refused when it comes ([`Revoked`]), as a called-back one is.
    fn forget_txn(&mut self, txn: TxnId) -> Option<TxnRights> {
        let v = self.txns.remove(&txn)?;
        for k in &v.writes {
            self.revoked.revoke(*k, u64::MAX);
        }
        Some(v)
    }

    /// What running transactions read under the client's rights.
    fn read_keys(&self) -> FxHashSet<Resource> {
        self.txns.values().flat_map(|v| v.reads.iter().copied()).collect()
    }

    /// Pages running transactions pin (they change an object of each).
    fn pinned_pages(&self) -> FxHashSet<PageId> {
        self.txns.values().flat_map(|v| v.pinned.iter().copied()).collect()
    }

    /// True if a running transaction changes an object of `page`.
    fn page_written(&self, page: PageId) -> bool {
        self.txns.values().any(|v| v.write_pages.contains(&page))
    }

    /// Drops the image of `page`; its epoch if there was one. The typed
    /// layer is told its objects lost their right.
    fn drop_image(&mut self, page: PageId) -> Option<u64> {
        let c = self.pages.remove(&page)?;
        if let Some(image) = &c.bytes {
            self.bytes -= image.len();
            self.lose_objects_of(page, image);
        }
        Some(c.epoch)
    }

    /// Lets the image of `page` go but keeps the right (a running
    /// transaction reads under it): the typed layer's copies of its
    /// objects go now, since the image will not be there to list them.
    fn ghost_image(&mut self, page: PageId) {
        let Some(image) = self.pages.get_mut(&page).and_then(|c| c.bytes.take()) else {
            return;
        };
        self.bytes -= image.len();
        self.lose_objects_of(page, &image);
    }

    /// Notes the objects of `image` for [`ObjectStore::lost`].
    fn lose_objects_of(&mut self, page: PageId, image: &[u8]) {
        if !self.track_lost {
            return;
        }
        let pending = &mut self.lost_pending;
        // A damaged image was never read from either (its objects are
        // fetched): nothing to tell.
        let _ = cairn_storage::record::object::image_objects(page, image, |o, _| pending.push(o));
    }

    /// Drops the object's entry; true if there was one.
    fn drop_object(&mut self, oid: Oid) -> Option<u64> {
        let c = self.objects.remove(&oid)?;
        self.bytes -= c.bytes.as_ref().map_or(0, |b| b.len());
        Some(c.epoch)
    }

    /// Drops what `key` covers (a page: its lookups and its image); its
    /// epoch if there was a right.
    fn drop_key(&mut self, key: Resource) -> Option<u64> {
        match key {
            Resource::Object(o) => self.drop_object(o),
            Resource::Page(p) => {
                let leaf = self.lookups.drop_guard(key);
                let image = self.drop_image(p);
                leaf.max(image)
            }
            Resource::Gap(..) | Resource::TreeEnd(_) => self.lookups.drop_guard(key),
            _ => None,
        }
    }

    /// Names the transactions but `except` reading under `key` (not
    /// ending) in an answer about to be sent.
    fn name_readers(&mut self, key: Resource, except: TxnId) -> Vec<TxnId> {
        let mut readers = Vec::new();
        for (t, v) in self.txns.iter_mut() {
            if *t != except && !v.answering.ending && v.reads.contains(&key) {
                v.answering.name();
                readers.push(*t);
            }
        }
        readers
    }
}

impl Table for RightsState {
    fn revoked(&mut self) -> &mut Revoked {
        &mut self.revoked
    }

    fn answering(&mut self, txn: TxnId) -> Option<&mut Answering> {
        self.txns.get_mut(&txn).map(|v| &mut v.answering)
    }

    /// A page's: of its lookups or its image, the newer.
    fn held(&self, key: Resource) -> Option<u64> {
        match key {
            Resource::Object(o) => self.objects.get(&o).map(|c| c.epoch),
            Resource::Page(p) => {
                let leaf = self.lookups.epoch(key);
                let image = self.pages.get(&p).map(|c| c.epoch);
                leaf.max(image)
            }
            Resource::Gap(..) | Resource::TreeEnd(_) => self.lookups.epoch(key),
            _ => None,
        }
    }

    /// What `key` covers goes (an object's copies in the typed layer are
    /// noted lost, for [`ObjectStore::lost`]).
    fn call_back(&mut self, key: Resource) -> Vec<TxnId> {
        // What the right covered is still what a snapshot that began
        // before now sees (`rights/retired.rs`).
        let copy = match key {
            Resource::Object(o) => self.objects.get(&o),
            Resource::Page(p) => self.pages.get(&p),
            _ => None,
        }
        .and_then(|c| Some((Arc::clone(c.bytes.as_ref()?), c.since)));
        if let Some((bytes, since)) = copy {
            self.clock += 1;
            let until = self.clock;
            self.retired.called_back(key, bytes, since, until);
        }
        if self.drop_key(key).is_some() && self.track_lost {
            if let Resource::Object(o) = key {
                self.lost_pending.push(o);
            }
        }
        self.name_readers(key, TxnId(0))
    }

    /// Transactions that still read under a right given up (by a writer
    /// of this client, or dropped with their reads kept) are named: the
    /// server may still count the right, and their reads need their locks
    /// (fail closed).
    fn readers_without_right(&mut self, key: Resource) -> Vec<TxnId> {
        self.name_readers(key, TxnId(0))
    }
}

/// Rights a writer dropped, given back to the server when dropped (see
/// [`ObjectStore::before_write`]): after the write request they guard has
/// been answered.
pub(super) struct ReleaseAfter<'a> {
    store: &'a ObjectStore,
    dropped: Vec<(Resource, u64)>,
}

impl Drop for ReleaseAfter<'_> {
    fn drop(&mut self) {
        release(&self.store.conn, &self.dropped);
    }
}

/// An object's bytes as the client keeps them: an object's own, or in
/// place in its page's image.
enum Bytes<'a> {
    Shared(&'a Arc<[u8]>),
    /// A page's image and the object's range in it.
    InImage(&'a Arc<[u8]>, std::ops::Range<usize>),
}

impl ObjectStore {
    /// The object's bytes if the client holds a right to it, read by `txn`
    /// under it from now on (no server call).
    pub(super) fn use_object(&self, txn: TxnId, oid: Oid) -> Option<Arc<[u8]>> {
        self.with_object(txn, oid, |b| match b {
            Bytes::Shared(a) => a.clone(),
            Bytes::InImage(image, r) => Arc::from(&image[r]),
        })
    }

    /// A copy of the object's bytes if the client holds a right to it
    /// (the object kept, or read in place from its page's image), read by
    /// `txn` under it from now on: one copy, no server call.
    pub(super) fn copy_object(&self, txn: TxnId, oid: Oid) -> Option<Vec<u8>> {
        self.with_object(txn, oid, |b| match b {
            Bytes::Shared(a) => a.to_vec(),
            Bytes::InImage(image, r) => image[r].to_vec(),
        })
    }

    /// The object's bytes, shared, if the client holds a right to it: the
    /// kept object whole, or its page's image and the object's range in it
    /// — nothing copied. `txn` reads it under the right from now on.
    pub(super) fn share_object(&self, txn: TxnId, oid: Oid) -> Option<super::SharedBytes> {
        self.with_object_marked(txn, oid, |b, mark| {
            let (bytes, range) = match b {
                Bytes::Shared(a) => (a.clone(), 0..a.len()),
                Bytes::InImage(image, r) => (image.clone(), r),
            };
            super::SharedBytes { bytes, range, mark }
        })
    }

    /// Sets `mark` on the object, if the client still holds it in `bytes`
    /// (the kept object, or its page's image): a later
    /// [`ObjectStore::share_object`] of the same bytes gives it back. Gone
    /// with the bytes (a callback, an eviction, newer bytes).
    pub(super) fn mark_object(&self, oid: Oid, bytes: &Arc<[u8]>, mark: CheckedAs) {
        let mut st = self.rights.lock();
        let st = &mut *st;
        let c = match st.objects.get_mut(&oid) {
            Some(c) => c,
            None => match st.pages.get_mut(&oid.page) {
                Some(c) => c,
                None => return,
            },
        };
        if !c.bytes.as_ref().is_some_and(|b| Arc::ptr_eq(b, bytes)) {
            return;
        }
        match c.marks.iter_mut().find(|(slot, _)| *slot == oid.slot.0) {
            Some(m) => m.1 = mark,
            None => c.marks.push((oid.slot.0, mark)),
        }
    }

    /// `f` of the object's bytes, under the rights mutex (`f` must not
    /// block), if the client holds a right to it: kept as an object, or
    /// read in place from the image of its page (a small object stored
    /// whole there). `txn` reads it (or the page) under the right from now
    /// on.
    fn with_object<R>(&self, txn: TxnId, oid: Oid, f: impl FnOnce(Bytes<'_>) -> R) -> Option<R> {
        self.with_object_marked(txn, oid, |b, _| f(b))
    }

    /// [`ObjectStore::with_object`], `f` also given the object's mark if
    /// it has one ([`ObjectStore::mark_object`]).
    fn with_object_marked<R>(
        &self,
        txn: TxnId,
        oid: Oid,
        f: impl FnOnce(Bytes<'_>, Option<CheckedAs>) -> R,
    ) -> Option<R> {
        self.with_object_epoch(txn, oid, |b, mark, _| f(b, mark))
    }

    /// The epoch of the right `txn` reads `oid` under (the object's, or
    /// its page image's), if the client holds one: `txn` reads under it
    /// from now on. A copy of the object decoded from bytes kept under
    /// the same epoch is current ([`ObjectStore::epoch_if_bytes`]).
    pub(super) fn right_epoch(&self, txn: TxnId, oid: Oid) -> Option<u64> {
        self.with_object_epoch(txn, oid, |_, _, epoch| epoch)
    }

    /// The epoch of the right the client holds to `oid` if the bytes kept
    /// under it are `bytes` (compared whole, so no reuse of an allocation
    /// can fool it): a copy decoded from `bytes` is current for as long as
    /// that right is held. Registers no reader.
    pub(super) fn epoch_if_bytes(&self, oid: Oid, bytes: &[u8]) -> Option<u64> {
        let st = self.rights.lock();
        match st.objects.get(&oid) {
            Some(c) => (c.bytes.as_deref()? == bytes).then_some(c.epoch),
            None => {
                let page = st.pages.get(&oid.page)?;
                let image = page.bytes.as_ref()?;
                let range = cairn_storage::record::object::home_record(image, oid).ok()??;
                (image.get(range)? == bytes).then_some(page.epoch)
            }
        }
    }

    /// [`ObjectStore::with_object_marked`], `f` also given the epoch of
    /// the right read under.
    fn with_object_epoch<R>(
        &self,
        txn: TxnId,
        oid: Oid,
        f: impl FnOnce(Bytes<'_>, Option<CheckedAs>, u64) -> R,
    ) -> Option<R> {
        let mut guard = self.rights.lock();
        let st = &mut *guard;
        // In an image: the object's place there.
        let range = match st.objects.get(&oid) {
            Some(c) => {
                c.bytes.as_ref()?;
                None
            }
            None => {
                let image = st.pages.get(&oid.page)?.bytes.as_ref()?;
                Some(cairn_storage::record::object::home_record(image, oid).ok()??)
            }
        };
        if st.written(Resource::Object(oid), None, txn) {
            return None;
        }
        let v = st.txns.entry(txn).or_default();
        if v.answering.ending {
            return None;
        }
        v.reads.insert(match range {
            Some(_) => Resource::Page(oid.page),
            None => Resource::Object(oid),
        });
        st.clock += 1;
        let now = st.clock;
        let c = match range {
            Some(_) => st.pages.get_mut(&oid.page),
            None => st.objects.get_mut(&oid),
        }?;
        c.stamp = now;
        let mark = c.marks.iter().find(|(slot, _)| *slot == oid.slot.0).map(|(_, m)| *m);
        let bytes = c.bytes.as_ref()?;
        let out = match range {
            Some(r) => f(Bytes::InImage(bytes, r), mark, c.epoch),
            None => f(Bytes::Shared(bytes), mark, c.epoch),
        };
        self.conn.cache_hits.fetch_add(1, Ordering::Relaxed);
        Some(out)
    }

    /// Keeps the image of `page`, fetched whole with a right of `epoch`
    /// (unless called back before it arrived, or a running transaction
    /// changes an object of it). False if it was not kept.
    pub(super) fn take_page(&self, page: PageId, epoch: u64, image: Arc<[u8]>) -> bool {
        let evicted = {
            let mut st = self.rights.lock();
            if !st.take_right(Resource::Page(page), epoch, None) || st.page_written(page) {
                return false;
            }
            // An older image's right was replaced by this one on the server.
            st.drop_image(page);
            let c = st.new_entry(epoch, image);
            st.pages.insert(page, c);
            self.evict(&mut st)
        };
        self.lost(&evicted);
        release(&self.conn, &evicted);
        true
    }

    /// True if a page read ahead would be kept: the client has no image
    /// of it, and no running transaction of it changes an object of it.
    pub(super) fn wants_page(&self, page: PageId) -> bool {
        let st = self.rights.lock();
        !st.pages.contains_key(&page) && !st.page_written(page)
    }

    /// The values of `key` in the tree at `root`, if a lookup's answer is
    /// kept under a right on its leaf (read by `txn` under it from now on).
    pub(super) fn use_lookup(&self, txn: TxnId, root: PageId, key: &[u8]) -> Option<Vec<Vec<u8>>> {
        let mut st = self.rights.lock();
        let Kept {
            guards: leaves, values, ..
        } = st.lookups.get(root, key).cloned()?;
        if leaves
            .iter()
            .enumerate()
            .any(|(i, l)| st.written(*l, (i == 0).then_some(root), txn))
        {
            return None;
        }
        let v = st.txns.entry(txn).or_default();
        if v.answering.ending {
            return None;
        }
        v.reads.extend(leaves.iter().copied());
        Some(values)
    }

    /// The client's clock now: a snapshot begun after this reads what was
    /// taken in under rights up to it, while the rights are held
    /// ([`ObjectStore::use_object_before`]).
    pub(super) fn clock(&self) -> u64 {
        self.rights.lock().clock
    }

    /// The object's bytes, kept under a right taken in at or before
    /// `before` (the clock when a snapshot was asked for) and held now —
    /// the object itself, or its page's image. Such bytes are what the
    /// snapshot sees: no commit changed the object between the right's
    /// grant, which came before the snapshot began, and now (a writer
    /// calls the right back before it may change the object, and commits
    /// only once the client has given it up). No reader is registered: a
    /// snapshot holds no lock, in effect or real, and keeps what it read.
    ///
    /// Failing that, a copy called back since, which `txn`'s snapshot
    /// still sees (`rights/retired.rs`).
    pub(super) fn use_object_before(&self, txn: TxnId, oid: Oid, before: u64) -> Option<Arc<[u8]>> {
        let st = self.rights.lock();
        if st.written(Resource::Object(oid), None, TxnId(0)) {
            return None;
        }
        let from_image = |image: &[u8]| -> Option<Arc<[u8]>> {
            let range = cairn_storage::record::object::home_record(image, oid).ok()??;
            Some(Arc::from(image.get(range)?))
        };
        let held = match st.objects.get(&oid) {
            Some(c) => c.bytes.as_ref().filter(|_| c.since <= before).map(Arc::clone),
            None => st
                .pages
                .get(&oid.page)
                .filter(|c| c.since <= before && !st.page_written(oid.page))
                .and_then(|c| from_image(c.bytes.as_ref()?)),
        };
        let bytes = held.or_else(|| {
            st.retired.read(txn, Resource::Object(oid)).or_else(|| {
                if st.page_written(oid.page) {
                    return None;
                }
                let image = st.retired.read(txn, Resource::Page(oid.page))?;
                from_image(&image)
            })
        })?;
        self.conn.cache_hits.fetch_add(1, Ordering::Relaxed);
        Some(bytes)
    }

    /// Snapshot `txn`, asked for at `asked` (the clock then), has begun:
    /// its reply came now. Called-back copies it sees are kept for it
    /// until it ends (`rights/retired.rs`).
    pub(super) fn snapshot_began(&self, txn: TxnId, asked: u64) {
        let mut st = self.rights.lock();
        st.clock += 1;
        let began = st.clock;
        st.retired.snapshot_began(txn, asked, began);
    }

    /// The values of `key` in the tree at `root` for a snapshot asked for
    /// at `before`: a lookup kept under rights taken in by then and held
    /// now (as [`ObjectStore::use_object_before`]; no reader registered).
    pub(super) fn use_lookup_before(&self, root: PageId, key: &[u8], before: u64) -> Option<Vec<Vec<u8>>> {
        let st = self.rights.lock();
        let Kept {
            guards: leaves,
            values,
            since,
        } = st.lookups.get(root, key)?;
        if *since > before
            || leaves
                .iter()
                .enumerate()
                .any(|(i, l)| st.written(*l, (i == 0).then_some(root), TxnId(0)))
        {
            return None;
        }
        self.conn.cache_hits.fetch_add(1, Ordering::Relaxed);
        Some(values.clone())
    }

    /// Keeps an object fetched with a right of `epoch` (unless called back
    /// before it arrived).
    pub(super) fn take_object(&self, oid: Oid, epoch: u64, bytes: &Arc<[u8]>) {
        self.take_objects(&[(oid, epoch, bytes.clone())]);
    }

    /// [`ObjectStore::take_object`] for each of `objects` (oid, epoch,
    /// bytes), under one lock.
    pub(super) fn take_objects(&self, objects: &[(Oid, u64, Arc<[u8]>)]) {
        if objects.is_empty() {
            return;
        }
        let evicted = {
            let mut st = self.rights.lock();
            for (oid, epoch, bytes) in objects {
                if !st.take_right(Resource::Object(*oid), *epoch, None) {
                    continue;
                }
                st.drop_object(*oid);
                let c = st.new_entry(*epoch, bytes.clone());
                st.objects.insert(*oid, c);
            }
            self.evict(&mut st)
        };
        self.lost(&evicted);
        release(&self.conn, &evicted);
    }

    /// Keeps an index lookup under rights (key, epoch) on the leaves that
    /// enclose its key, or (a server that locks key ranges) on the gaps
    /// that guard it: all taken in, or the lookup is not kept.
    pub(super) fn take_lookup(&self, root: PageId, key: &[u8], rights: &[(Resource, u64)], values: Vec<Vec<u8>>) {
        let mut st = self.rights.lock();
        if !rights.iter().all(|&(l, e)| st.take_right(l, e, Some(root))) {
            // Not kept; a right held for another lookup was renewed at the
            // server with this epoch, which a give-back must name.
            for &(l, e) in rights {
                st.lookups.renew(l, e);
            }
            return;
        }
        st.clock += 1;
        let since = st.clock;
        st.lookups.keep(root, key, rights, values, since);
        let dropped = self.evict_leaves(&mut st);
        drop(st);
        release(&self.conn, &dropped);
    }

    /// Past [`ObjectStore::lookups_max`] kept lookups, drops leaves nobody
    /// reads under (and their lookups), oldest right first, down to three
    /// quarters of it ([`Bound::count`]); what was dropped, to give back.
    fn evict_leaves(&self, st: &mut RightsState) -> Vec<(Resource, u64)> {
        let bound = Bound::count(self.lookups_max());
        if !bound.passed(st.lookups.len(), 0) {
            return Vec::new();
        }
        let victims = st.lookups.unread(&st.read_keys());
        let mut out = Vec::new();
        bound.give_back(st.lookups.len(), 0, victims, |l| {
            let before = st.lookups.len();
            if let Some(e) = st.lookups.drop_guard(l) {
                out.push((l, e));
            }
            before - st.lookups.len()
        });
        out
    }

    /// Lookups kept at most: one per 256 bytes of the object bound.
    fn lookups_max(&self) -> usize {
        (self.rights_bytes_max / 256).max(64)
    }

    /// Past the bound on cached bytes ([`Bound::bytes`]), drops objects
    /// and images least recently used first (taken in or read); of one a
    /// running transaction read under its right only the bytes go, the
    /// right stays until that transaction ends ([`ObjectStore::txn_ended`]).
    /// Objects of pages running transactions pin are kept over the bound.
    /// What was dropped (key, epoch), to give back.
    fn evict(&self, st: &mut RightsState) -> Vec<(Resource, u64)> {
        let bound = Bound::bytes(self.rights_bytes_max);
        if !bound.passed(st.bytes, st.pinned_bytes) {
            return Vec::new();
        }
        let pinned = st.pinned_pages();
        let mut pinned_bytes = 0;
        // Ranked by stamp, oldest first: an object that just came along
        // with its page stays over one a transaction read long ago.
        let mut victims: Vec<(u64, Resource)> = Vec::with_capacity(st.objects.len() + st.pages.len());
        let objects = st.objects.iter().map(|(o, c)| (Resource::Object(*o), o.page, c));
        let pages = st.pages.iter().map(|(p, c)| (Resource::Page(*p), *p, c));
        for (k, page, c) in objects.chain(pages) {
            let Some(b) = &c.bytes else { continue };
            if pinned.contains(&page) {
                pinned_bytes += b.len();
            } else {
                victims.push((c.stamp, k));
            }
        }
        st.pinned_bytes = pinned_bytes;
        let mut out = Vec::new();
        bound.give_back(st.bytes, pinned_bytes, victims, |k| {
            let before = st.bytes;
            if st.txns.values().any(|v| v.reads.contains(&k)) {
                // Read under its right by a running transaction: the right
                // stays until that ends, the bytes go.
                match k {
                    Resource::Object(o) => {
                        if let Some(c) = st.objects.get_mut(&o) {
                            let n = c.bytes.take().map_or(0, |b| b.len());
                            st.bytes -= n;
                        }
                    }
                    Resource::Page(p) => st.ghost_image(p),
                    _ => {}
                }
            } else {
                let epoch = match k {
                    Resource::Object(o) => st.drop_object(o),
                    Resource::Page(p) => st.drop_image(p),
                    _ => None,
                };
                if let Some(e) = epoch {
                    out.push((k, e));
                }
            }
            before - st.bytes
        });
        out
    }

    /// The typed layer's copies of objects whose right went.
    fn lost(&self, keys: &[(Resource, u64)]) {
        if let Some(hook) = self.on_lost.get() {
            let of_images = std::mem::take(&mut self.rights.lock().lost_pending);
            for o in of_images {
                hook(o);
            }
            for (k, _) in keys {
                if let Resource::Object(o) = k {
                    hook(*o);
                }
            }
        }
    }

    /// Before `txn` changes the objects `oids`: drops what this client
    /// keeps of them, and names to the server its other transactions
    /// reading under those rights, so that the change's X waits for them
    /// there. A round trip per object read by another transaction (none in
    /// a single-threaded program).
    ///
    /// The rights go back to the server only when the returned guard is
    /// dropped, which the caller does once its write request (the X fetch,
    /// the flush, the commit) has been answered: until the server has
    /// granted `txn` what it asked, the right is what keeps another
    /// client's writer from changing what `txn` itself read under it — a
    /// callback for it still reaches this client, which names `txn` as a
    /// reader (its S granted, its X a conversion). Given back first, a
    /// writer could commit in between and `txn` would have read a value
    /// already replaced (G-single).
    pub(super) fn before_write(&self, txn: TxnId, oids: &[Oid]) -> Result<ReleaseAfter<'_>> {
        let (named, dropped) = {
            let mut st = self.rights.lock();
            let v = st.txns.entry(txn).or_default();
            v.writes.extend(oids.iter().map(|o| Resource::Object(*o)));
            v.write_pages.extend(oids.iter().map(|o| o.page));
            let mut named = Vec::new();
            let mut dropped = Vec::new();
            // An image of their pages goes (after the change it is stale),
            // and the others reading under it are named as readers of the
            // page.
            let mut pages: Vec<PageId> = oids.iter().map(|o| o.page).collect();
            pages.sort_unstable();
            pages.dedup();
            let images = pages
                .into_iter()
                .filter(|p| st.pages.contains_key(p))
                .map(Resource::Page);
            let keys: Vec<Resource> = oids.iter().map(|o| Resource::Object(*o)).chain(images).collect();
            for k in keys {
                let epoch = match k {
                    Resource::Page(p) => st.drop_image(p),
                    _ => st.drop_key(k),
                };
                let Some(epoch) = epoch else { continue };
                dropped.push((k, epoch));
                let readers = st.name_readers(k, txn);
                if !readers.is_empty() {
                    named.push((k, readers));
                }
            }
            (named, dropped)
        };
        self.lost(&dropped);
        let guard = ReleaseAfter { store: self, dropped };
        self.rights.name(&self.conn, txn, named)?;
        Ok(guard)
    }

    /// Before `txn` changes the B+-tree at `root` (which leaves, only the
    /// server's answer will tell): no lookup of the tree is used or taken
    /// in by another transaction until [`ObjectStore::tree_written`], and
    /// the others reading lookups of it are named to the server.
    pub(super) fn before_tree_write(&self, txn: TxnId, root: PageId) -> Result<()> {
        let named = {
            let mut st = self.rights.lock();
            st.txns.entry(txn).or_default().trees.insert(root);
            let leaves = st.lookups.guards_of(root);
            let mut named = Vec::new();
            for k in leaves {
                let readers = st.name_readers(k, txn);
                if !readers.is_empty() {
                    named.push((k, readers));
                }
            }
            named
        };
        self.rights.name(&self.conn, txn, named)
    }

    /// `txn` changed (or allocated, or freed) `pages` of the tree at
    /// `root`: the lookups kept under them go, and until it ends no lookup
    /// under them is used or taken in by the others; the rest of the tree's
    /// lookups are good again. Without `pages` (a tree destroyed), every
    /// lookup of the tree goes, and the tree stays written.
    pub(super) fn tree_written(&self, txn: TxnId, root: PageId, pages: Option<&[PageId]>) {
        let dropped = {
            let mut st = self.rights.lock();
            let leaves: Vec<Resource> = match pages {
                Some(pages) => pages
                    .iter()
                    .map(|p| Resource::Page(*p))
                    .filter(|p| st.lookups.holds(*p))
                    .collect(),
                None => st.lookups.guards_of(root),
            };
            let mut dropped = Vec::new();
            for p in leaves {
                if let Some(e) = st.lookups.drop_guard(p) {
                    dropped.push((p, e));
                }
            }
            let v = st.txns.entry(txn).or_default();
            if let Some(pages) = pages {
                v.writes.extend(pages.iter().map(|p| Resource::Page(*p)));
                v.trees.remove(&root);
            }
            dropped
        };
        release(&self.conn, &dropped);
    }

    /// `txn` ends: it reads nothing more under rights; waits until no
    /// answer naming it is in flight. True if an answer named it (the
    /// server knows it: its end must be sent). Its writes keep rights to
    /// what it changes out until [`ObjectStore::txn_ended`].
    pub(super) fn txn_ending(&self, txn: TxnId) -> bool {
        let named = self
            .rights
            .end(txn, |st| st.txns.get(&txn).is_some_and(|v| v.answering.on_server));
        named.unwrap_or(false)
    }

    /// `txn` (an adaptive client's) changes an object of `page`: the
    /// page's objects stay cached until it ends (see [`TxnRights::pinned`]).
    pub(super) fn pin_page(&self, txn: TxnId, page: PageId) {
        self.rights.lock().txns.entry(txn).or_default().pinned.insert(page);
    }

    /// `txn` (an adaptive client's) sent its changes ahead of its commit
    /// and let go of them: the pages it pinned count against the bound
    /// again.
    pub(super) fn unpin_pages(&self, txn: TxnId) {
        let mut st = self.rights.lock();
        if let Some(v) = st.txns.get_mut(&txn) {
            v.pinned.clear();
            st.pinned_bytes = 0;
        }
    }

    /// `txn`'s end was sent (a commit's answered): its bookkeeping goes.
    pub(super) fn txn_ended(&self, txn: TxnId) {
        let dropped = {
            let mut st = self.rights.lock();
            st.retired.txn_ended(txn);
            let Some(v) = st.forget_txn(txn) else { return };
            if !v.pinned.is_empty() {
                // What it pinned counts against the bound again.
                st.pinned_bytes = 0;
            }
            // Rights kept without bytes for it alone go now.
            let mut dropped = Vec::new();
            for k in v.reads {
                let ghost = match k {
                    Resource::Object(o) => st.objects.get(&o).is_some_and(|c| c.bytes.is_none()),
                    Resource::Page(p) => st.pages.get(&p).is_some_and(|c| c.bytes.is_none()),
                    _ => false,
                };
                if !ghost || st.txns.values().any(|v| v.reads.contains(&k)) {
                    continue;
                }
                let epoch = match k {
                    Resource::Object(o) => st.drop_object(o),
                    Resource::Page(p) => st.drop_image(p),
                    _ => None,
                };
                if let Some(e) = epoch {
                    dropped.push((k, e));
                }
            }
            dropped
        };
        self.lost(&dropped);
        release(&self.conn, &dropped);
    }

    /// Answers callbacks that came together (on the callback thread,
    /// `rights::callback_daemon`): the typed layer's copies of what the
    /// rights covered go before the answers do.
    pub(super) fn answer_callback(&self, cbs: Vec<Callback>) -> Result<()> {
        self.rights.answer(&self.conn, cbs, || self.lost(&[]))
    }

    /// Empties what the client keeps under rights (a cold start:
    /// `Database::clear_caches`): every object, page image and lookup no
    /// running transaction reads under goes, with the typed layer's copies
    /// of its objects, and its right goes back to the server with the next
    /// request (RELEASE). What a running transaction reads under, or keeps
    /// on a page it changes, stays until it ends.
    pub fn evict_cache(&self) {
        let dropped = {
            let mut st = self.rights.lock();
            let read = st.read_keys();
            let pinned = st.pinned_pages();
            let objects = st
                .objects
                .keys()
                .filter(|o| !pinned.contains(&o.page))
                .map(|o| Resource::Object(*o));
            let pages = st
                .pages
                .keys()
                .filter(|p| !pinned.contains(p))
                .map(|p| Resource::Page(*p));
            let leaves = st.lookups.all_guards();
            // A page may be both an image and a leaf's key: once each.
            let keys: FxHashSet<Resource> = objects
                .chain(pages)
                .chain(leaves)
                .filter(|k| !read.contains(k))
                .collect();
            let mut dropped = Vec::with_capacity(keys.len());
            for k in keys {
                if let Some(e) = st.drop_key(k) {
                    dropped.push((k, e));
                }
            }
            dropped
        };
        self.lost(&dropped);
        release(&self.conn, &dropped);
    }

    /// Objects kept under rights now, and their bytes.
    pub fn cached_objects(&self) -> (usize, usize) {
        let st = self.rights.lock();
        (st.objects.len(), st.bytes)
    }
}

mod retired;
#[cfg(test)]
mod tests;
