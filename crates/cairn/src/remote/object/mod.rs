//! The object-server client at the storage level (DeWitt et al. 1990,
//! §2.2): the unit of transfer is an object. The server runs the
//! object operations in a transaction of its own per client transaction,
//! locking single objects, so clients change different objects of one page
//! at the same time; the client keeps the objects it read and the
//! after-images of the ones it changed, and sends those at commit
//! (`cairn_net::object_service`).
//!
//! - **Reads** ([`ObjectTxn::read`], [`ObjectTxn::read_many`]) lock each
//!   object S on the server and bring it back; a list of OIDs the caller is
//!   about to follow goes in one OBJ_FETCH whose reply streams the objects
//!   as partial replies. [`ObjectTxn::read_for_update`] takes X instead. A
//!   transaction reads each object from the server once, and its own
//!   changes from itself. An object longer than the server sends whole
//!   crosses only in the ranges asked for ([`ObjectTxn::read_range`]).
//! - **Creates** go to the server at once (the OID is the server's to give).
//! - **Bounded**: what a transaction read or created is let go of past the
//!   client's cache bound (`ObjectTxn::trim`: read again from the
//!   server, never under a right while the transaction holds it X), and
//!   its after-images past theirs (`object/changes.rs`).
//! - **Updates and deletes** are kept as after-images and travel in the
//!   OBJ_COMMIT; the server takes the X locks it does not hold yet, applies
//!   them, logs the changed records and answers once durable.
//!
//! - **Across transactions** objects and unique-index lookups are kept
//!   under rights the server calls back (callback locking at object
//!   granularity, `object/rights.rs`): a warm transaction reads them with
//!   no round trip.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use super::conn::Connect;
use cairn_net::frame::Kind;
use cairn_net::message::Architecture;
use cairn_net::object_service::{
    decode_entries, decode_oids, FetchedObject, ObjectRequest, ValuesAndObjects, NO_OID, OBJ_S, OBJ_X, READ_RANGE_MAX,
    TREE_LIMIT_MAX,
};
use cairn_net::page_service::{decode_groups, PageRequest, VolumeInfo, NO_GROUP};
use cairn_net::transport::Address;
use cairn_storage::fxhash::{FxHashMap, FxHashSet};
use cairn_storage::{Error, GroupId, Oid, PageId, Result, TxnId};

use super::adaptive::{Adaptive, AdaptivePolicy, Sequence};
use super::conn::Connection;
use super::rights::{start_callback_thread, Rights};
use super::RemoteStats;
use crate::view::CheckedAs;
use rights::RightsState;

mod changes;
mod fetch;
mod rights;
mod trees;

pub use changes::CHANGES_KEPT_MIN;

/// What the typed layer runs when the client loses its right to an object
/// (its decoded copies are stale from then on).
pub type ObjectLostHook = Arc<dyn Fn(Oid) + Send + Sync>;

/// Default bound on the bytes of objects an object-server client keeps
/// across transactions (64 MiB).
pub const CACHED_OBJECT_BYTES_DEFAULT: usize = 64 << 20;

/// An object's bytes shared, not copied ([`ObjectTxn::read_shared`]).
#[derive(Clone, Debug)]
pub struct SharedBytes {
    /// The object's bytes, or its page's image.
    pub bytes: Arc<[u8]>,
    /// The object's range in `bytes`.
    pub range: std::ops::Range<usize>,
    /// The mark set on these very bytes ([`ObjectTxn::mark_shared`]), if
    /// any: the typed layer's "checked as this class and version".
    pub mark: Option<CheckedAs>,
}

/// An object-server client: one connection to `cairn serve`.
pub struct ObjectStore {
    pub(super) conn: Arc<Connection>,
    next_txn: AtomicU64,
    page_size: usize,
    /// Objects and lookups kept under rights (`object/rights.rs`).
    rights: Arc<Rights<RightsState>>,
    /// Bound on the bytes of objects kept.
    pub(super) rights_bytes_max: usize,
    pub(super) on_lost: OnceLock<ObjectLostHook>,
    /// An adaptive client's fetch policy (`adaptive.rs`); `None` for an
    /// object-server client.
    adaptive: Option<Mutex<Adaptive>>,
}

impl std::fmt::Debug for ObjectStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectStore")
            .field("server", &self.conn.address)
            .finish()
    }
}

impl ObjectStore {
    /// Connects to the server at `address`, as `connect` says (login, TLS); keeps
    /// up to `cached_bytes` of objects across transactions.
    pub fn connect(address: Address, connect: &Connect, cached_bytes: usize) -> Result<Arc<ObjectStore>> {
        ObjectStore::connect_with(address, connect, cached_bytes, None)
    }

    /// [`ObjectStore::connect`] as an *adaptive* client (`adaptive.rs`):
    /// it fetches a page's worth of objects at once where the application
    /// uses much of the pages it touches, single objects where it does
    /// not, as `policy` decides per run of pages.
    pub fn connect_adaptive(
        address: Address,
        connect: &Connect,
        cached_bytes: usize,
        policy: AdaptivePolicy,
    ) -> Result<Arc<ObjectStore>> {
        policy
            .check()
            .map_err(|e| Error::InvalidArgument(format!("adaptive policy: {e}")))?;
        ObjectStore::connect_with(address, connect, cached_bytes, Some(policy))
    }

    fn connect_with(
        address: Address,
        connect: &Connect,
        cached_bytes: usize,
        policy: Option<AdaptivePolicy>,
    ) -> Result<Arc<ObjectStore>> {
        let conn = Connection::open(address, Architecture::OBJECT, connect, "object")?;
        let info = VolumeInfo::decode(&conn.call_one(&PageRequest::Volume)?)
            .map_err(|e| conn.error(cairn_net::Error::Message(e)))?;
        let store = Arc::new(ObjectStore {
            conn,
            next_txn: AtomicU64::new(1),
            page_size: info.page_size as usize,
            rights: Rights::new(RightsState::default()),
            rights_bytes_max: cached_bytes,
            on_lost: OnceLock::new(),
            adaptive: policy.map(|p| Mutex::new(Adaptive::new(p, info.page_size as usize))),
        });
        let client = store.conn.client.clone();
        start_callback_thread("cairn-object-callbacks", client, &store, ObjectStore::answer_callback)?;
        Ok(store)
    }

    /// Sets what runs when the client loses its right to an object (the
    /// typed layer drops its decoded copies). Set once.
    #[doc(hidden)]
    pub fn on_object_lost(&self, hook: ObjectLostHook) {
        let _ = self.on_lost.set(hook);
        self.rights.lock().track_lost = true;
    }

    /// The served database's page size.
    pub fn page_size(&self) -> usize {
        self.page_size
    }

    /// Every group, from the server.
    pub fn groups(&self) -> Result<Vec<(GroupId, String)>> {
        let body = self.conn.call_one(&PageRequest::Groups)?;
        let groups = decode_groups(&body).map_err(|e| self.conn.error(cairn_net::Error::Message(e)))?;
        Ok(groups.into_iter().map(|(i, n)| (GroupId(i), n)).collect())
    }

    /// The server's address.
    pub fn address(&self) -> &Address {
        &self.conn.address
    }

    /// Starts a transaction (nothing is sent: the server begins it with the
    /// first request that names it).
    pub fn begin(self: &Arc<Self>) -> Result<ObjectTxn> {
        if let Some(e) = self.conn.client.closed() {
            return Err(self.conn.error(e));
        }
        Ok(ObjectTxn {
            store: self.clone(),
            id: TxnId(self.next_txn.fetch_add(1, Ordering::Relaxed)),
            on_server: false,
            wrote: false,
            ended: false,
            doomed: None,
            read: FxHashMap::default(),
            read_bytes: 0,
            read_kept: 0,
            exclusive: FxHashMap::default(),
            changes: BTreeMap::new(),
            changes_bytes: 0,
            tree_later: Vec::new(),
            tree_later_bytes: 0,
            tree_later_keys: FxHashSet::default(),
            pinned: FxHashSet::default(),
            ahead: std::collections::VecDeque::new(),
            sequence: Sequence::default(),
        })
    }

    /// The group named `name`, created if `create` and missing.
    pub fn group(&self, name: &str, create: bool) -> Result<GroupId> {
        let body = self.conn.call_one(&PageRequest::Group {
            create,
            name: name.to_string(),
        })?;
        let id: [u8; 4] = body[..]
            .try_into()
            .map_err(|_| self.conn.protocol("a GROUP reply of 4 bytes"))?;
        Ok(GroupId(u32::from_le_bytes(id)))
    }

    /// The client's counters (round trips, bytes).
    pub fn stats(&self) -> RemoteStats {
        let c = &self.conn;
        RemoteStats {
            round_trips: c.round_trips.load(Ordering::Relaxed),
            bytes_sent: c.bytes_sent.load(Ordering::Relaxed),
            bytes_received: c.bytes_received.load(Ordering::Relaxed),
            one_way: c.one_way.load(Ordering::Relaxed),
            cache_hits: c.cache_hits.load(Ordering::Relaxed),
            callbacks: c.callbacks.load(Ordering::Relaxed),
            callbacks_in_use: c.callbacks_in_use.load(Ordering::Relaxed),
            rights_given_back: c.rights_given_back.load(Ordering::Relaxed),
            objects_shipped: c.objects_shipped.load(Ordering::Relaxed),
            pages_shipped: c.pages_shipped.load(Ordering::Relaxed),
            adaptive: self
                .adaptive
                .as_ref()
                .map(|a| super::lock(a).stats())
                .unwrap_or_default(),
            ..RemoteStats::default()
        }
    }

    /// True for an adaptive client ([`ObjectStore::connect_adaptive`]).
    pub fn is_adaptive(&self) -> bool {
        self.adaptive.is_some()
    }

    /// An adaptive client notes the objects a transaction read (the
    /// measure of how much of each page is used).
    fn note_reads(&self, oids: &[Oid]) {
        if let Some(a) = &self.adaptive {
            let mut a = super::lock(a);
            for o in oids {
                a.note_read(*o);
            }
        }
    }

    fn call(&self, req: &ObjectRequest, txn: TxnId) -> Result<Vec<bytes::Bytes>> {
        let (kind, body) = req.encode();
        self.conn.call_kind(kind, body, txn)
    }

    fn call_one(&self, req: &ObjectRequest, txn: TxnId) -> Result<bytes::Bytes> {
        let parts = self.call(req, txn)?;
        self.conn.one_body(parts)
    }
}

/// A transaction of an [`ObjectStore`]. Dropping an active one aborts it.
pub struct ObjectTxn {
    store: Arc<ObjectStore>,
    id: TxnId,
    /// A request named it: the server has begun it.
    on_server: bool,
    /// It changed something on the server already (a create, a flush, a
    /// B+-tree change): its end must be a COMMIT even without changes
    /// left to send.
    wrote: bool,
    ended: bool,
    /// Set when the server may hold part of what the transaction sent (a
    /// flush that failed half-way): only abort is left.
    doomed: Option<String>,
    /// Objects read from the server or created (`None`: no such object; an
    /// object too long to send whole is kept as its length only).
    read: FxHashMap<Oid, Read>,
    /// Bytes of the objects in `read`: past the client's cache bound they
    /// are let go at the next read or create (see [`ObjectTxn::trim`]).
    read_bytes: usize,
    /// Bytes [`ObjectTxn::trim`] kept last time (on pinned pages): they
    /// are over the bound, not counted against it.
    read_kept: usize,
    /// Objects locked X on the server.
    exclusive: FxHashMap<Oid, ()>,
    /// After-images (`None`: deleted), sent at commit (or ahead of it
    /// past a bound, `object/changes.rs`).
    changes: BTreeMap<Oid, Option<Vec<u8>>>,
    /// Bytes the changes take in a message.
    changes_bytes: usize,
    /// Changes of B+-trees kept to send later, per root, in order
    /// (`object/trees.rs`), and the bytes they take.
    tree_later: Vec<(PageId, Vec<cairn_schema::TreeOp>)>,
    tree_later_bytes: usize,
    /// The (root, key) pairs of `tree_later`: a lookup of one sends them.
    tree_later_keys: FxHashSet<(PageId, Vec<u8>)>,
    /// Pages it changed an object of, an adaptive client's: what it read
    /// of them, and the client keeps of them, stays until it ends (the
    /// page client keeps its changed pages whole the same way).
    pinned: FxHashSet<PageId>,
    /// An adaptive client's pages asked for ahead, whose replies are not
    /// taken in yet (oldest first).
    ahead: std::collections::VecDeque<fetch::Ahead>,
    /// The pages it came to, for read-ahead.
    sequence: Sequence,
}

/// What a transaction read of an object.
#[derive(Clone, Debug)]
enum Read {
    Missing,
    Whole(Arc<[u8]>),
    /// Too long to send whole: its length.
    Long(u64),
}

impl Read {
    /// Bytes it holds.
    fn bytes(&self) -> usize {
        match self {
            Read::Whole(b) => b.len(),
            _ => 0,
        }
    }

    /// What a fetched part says of its object.
    fn of(f: &FetchedObject<'_>) -> Read {
        if !f.found {
            Read::Missing
        } else if f.bytes.len() as u64 == f.total_len {
            Read::Whole(Arc::from(f.bytes))
        } else {
            Read::Long(f.total_len)
        }
    }
}

impl ObjectTxn {
    /// The transaction's id (the client's name for it on the server).
    pub fn id(&self) -> u64 {
        self.id.0
    }

    fn check_active(&self) -> Result<()> {
        if self.ended {
            return Err(Error::TxnNotActive(self.id));
        }
        if let Some(cause) = &self.doomed {
            return Err(Error::TxnDoomed {
                txn: self.id,
                cause: cause.clone(),
            });
        }
        Ok(())
    }

    /// Calls `f` with the object's bytes (no copy when it came whole).
    pub fn read_with<R>(&mut self, oid: Oid, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
        self.read_with_epoch(oid, f).map(|(r, _)| r)
    }

    /// [`ObjectTxn::read_with`], with the epoch of the right the client
    /// keeps these very bytes under, if any ([`ObjectTxn::epoch_of`]): a
    /// copy decoded from them is current while that right is held.
    pub fn read_with_epoch<R>(&mut self, oid: Oid, f: impl FnOnce(&[u8]) -> R) -> Result<(R, Option<u64>)> {
        self.check_active()?;
        self.trim();
        if let Some(c) = self.changes.get(&oid) {
            return c.as_deref().map(|b| (f(b), None)).ok_or(Error::NotFound { oid });
        }
        if !self.local(oid) {
            self.fetch(&[oid], OBJ_S)?;
        }
        self.store.note_reads(&[oid]);
        if let Some(Read::Whole(b)) = self.read.get(&oid) {
            let epoch = self.store.epoch_if_bytes(oid, b);
            return Ok((f(b), epoch));
        }
        let bytes = self.whole(oid)?.ok_or(Error::NotFound { oid })?;
        Ok((f(&bytes), None))
    }

    /// The object's length in bytes.
    pub fn len(&mut self, oid: Oid) -> Result<u64> {
        self.check_active()?;
        self.trim();
        if let Some(c) = self.changes.get(&oid) {
            return c.as_ref().map(|b| b.len() as u64).ok_or(Error::NotFound { oid });
        }
        if !self.local(oid) {
            self.fetch(&[oid], OBJ_S)?;
        }
        match self.read.get(&oid) {
            Some(Read::Whole(b)) => Ok(b.len() as u64),
            Some(Read::Long(n)) => Ok(*n),
            _ => Err(Error::NotFound { oid }),
        }
    }

    /// Locks the object X on the server (a change follows), unless held.
    pub fn lock_for_update(&mut self, oid: Oid) -> Result<()> {
        self.check_active()?;
        if !self.exclusive.contains_key(&oid) && !self.changes.contains_key(&oid) {
            let store = self.store.clone();
            let _release = store.before_write(self.id, &[oid])?;
            self.fetch(&[oid], OBJ_X)?;
        }
        Ok(())
    }

    /// Locks every object of `oids` X on the server (changes follow) in
    /// pipelined OBJ_FETCH requests, those not held yet: a transaction that
    /// knows what it will change takes the locks in one round trip.
    pub fn lock_many_for_update(&mut self, oids: &[Oid]) -> Result<()> {
        self.check_active()?;
        let mut todo: Vec<Oid> = oids
            .iter()
            .copied()
            .filter(|o| !self.exclusive.contains_key(o) && !self.changes.contains_key(o))
            .collect();
        todo.sort_unstable();
        todo.dedup();
        if todo.is_empty() {
            return Ok(());
        }
        let store = self.store.clone();
        let _release = store.before_write(self.id, &todo)?;
        // What was read already is replaced by what the X fetch brings.
        for o in &todo {
            self.forget(*o);
        }
        self.fetch(&todo, OBJ_X)
    }

    /// True if this transaction read or changed the object already (its
    /// copy is this transaction's: no other can have changed it since).
    pub fn has_read(&self, oid: Oid) -> bool {
        self.read.contains_key(&oid) || self.changes.contains_key(&oid)
    }

    /// The epoch of the right to the object the client holds, if any: a
    /// copy decoded in an earlier
    /// transaction is current only if it was decoded from bytes kept under
    /// this same epoch ([`ObjectTxn::epoch_of`]). This transaction reads
    /// it under the right from now on. No server call.
    pub fn right_epoch(&mut self, oid: Oid) -> Option<u64> {
        if self.ended || self.doomed.is_some() {
            return None;
        }
        self.store.right_epoch(self.id, oid)
    }

    /// The epoch of the right under which the client keeps exactly `bytes`
    /// as the object's (compared whole), if it holds one: a copy decoded
    /// from `bytes` stays current while that right is held. `None` for
    /// bytes the client keeps under no right (this transaction's own
    /// change, or what it read under its lock alone).
    pub fn epoch_of(&self, oid: Oid, bytes: &[u8]) -> Option<u64> {
        if self.changes.contains_key(&oid) {
            return None;
        }
        self.store.epoch_if_bytes(oid, bytes)
    }

    /// Keeps what the transaction read of `oid`.
    fn keep(&mut self, oid: Oid, read: Read) {
        self.read_bytes += read.bytes();
        if let Some(old) = self.read.insert(oid, read) {
            self.read_bytes -= old.bytes();
        }
    }

    /// Forgets what the transaction read of `oid`.
    fn forget(&mut self, oid: Oid) {
        if let Some(old) = self.read.remove(&oid) {
            self.read_bytes -= old.bytes();
        }
    }

    /// Past the client's bound on cached bytes, lets go of the objects this
    /// transaction read or created: a later read asks again (from the
    /// client's cache, or the server, where the transaction's lock keeps
    /// the object as it was, or as this transaction made it — the client
    /// takes no right to an object the transaction holds X on). A
    /// transaction's reads are so bounded like the client's cache, not
    /// kept whole for its duration. Kept: the objects of pages an adaptive
    /// transaction pinned, and the objects it deleted (as gone; no bytes).
    /// Called before a read, never between a fetch and its use.
    fn trim(&mut self) {
        if self.read_bytes <= self.store.rights_bytes_max + self.read_kept {
            return;
        }
        let (exclusive, pinned) = (&self.exclusive, &self.pinned);
        self.read
            .retain(|o, r| pinned.contains(&o.page) || (exclusive.contains_key(o) && matches!(r, Read::Missing)));
        self.read_bytes = self.read.values().map(Read::bytes).sum();
        self.read_kept = self.read_bytes;
    }

    /// True if the object is in hand: read by this transaction, or kept by
    /// the client under a right (then read under it from now on).
    fn local(&mut self, oid: Oid) -> bool {
        if self.read.contains_key(&oid) {
            return true;
        }
        match self.store.use_object(self.id, oid) {
            Some(bytes) => {
                self.keep(oid, Read::Whole(bytes));
                true
            }
            None => false,
        }
    }

    /// Checks that `root` is a B+-tree root; returns the group of its page.
    pub fn tree_open(&mut self, root: PageId) -> Result<Option<GroupId>> {
        let body = self.tree_call(&ObjectRequest::TreeOpen {
            txn: self.id.0,
            root: root.0,
        })?;
        let g: [u8; 4] = body[..]
            .try_into()
            .map_err(|_| self.store.conn.protocol("a TREE_OPEN reply of 4 bytes"))?;
        let g = u32::from_le_bytes(g);
        Ok((g != NO_GROUP).then_some(GroupId(g)))
    }

    /// Creates a B+-tree in `group`; returns its root page.
    pub fn tree_create(&mut self, group: GroupId, unique: bool) -> Result<PageId> {
        self.wrote = true;
        let body = self.tree_call(&ObjectRequest::TreeCreate {
            txn: self.id.0,
            group: group.0,
            unique,
        })?;
        let r: [u8; 4] = body[..]
            .try_into()
            .map_err(|_| self.store.conn.protocol("a TREE_CREATE reply of 4 bytes"))?;
        Ok(PageId(u32::from_le_bytes(r)))
    }

    /// The values of `key` in the tree at `root`, at most `limit` (kept
    /// across transactions under a right on the leaf when the server gives
    /// one: then no round trip).
    pub fn tree_get(&mut self, root: PageId, key: &[u8], limit: u32) -> Result<Vec<Vec<u8>>> {
        self.check_active()?;
        if self.tree_later_touches(root, key) {
            self.send_tree_later(Some(root))?;
        }
        if let Some(mut values) = self.store.use_lookup(self.id, root, key) {
            values.truncate(limit.max(1) as usize);
            return Ok(values);
        }
        self.lookup(root, key, limit, false)
    }

    /// The values of `key` in a tree of OIDs (an index), at most `limit`,
    /// with the objects they name read (share-locked) in the same round
    /// trip and kept as this transaction's reads: a lookup and the fetch of
    /// what it finds cost one round trip.
    ///
    /// The answer, and the objects it names, may be kept by the client
    /// under rights: then no round trip at all.
    pub fn tree_get_objects(&mut self, root: PageId, key: &[u8], limit: u32) -> Result<Vec<Vec<u8>>> {
        self.check_active()?;
        if self.tree_later_touches(root, key) {
            self.send_tree_later(Some(root))?;
        }
        self.trim();
        if let Some(values) = self.store.use_lookup(self.id, root, key) {
            let in_hand = values
                .iter()
                .all(|v| Oid::from_exact(v).is_some_and(|o| self.changes.contains_key(&o) || self.local(o)));
            if in_hand {
                let mut values = values;
                values.truncate(limit.max(1) as usize);
                return Ok(values);
            }
        }
        self.lookup(root, key, limit, true)
    }

    /// TREE_GET (with `objects`, TREE_GET_OBJECTS): the values, the objects
    /// they name kept as this transaction's reads (and across transactions
    /// if sent with rights), the answer kept under the leaves' rights, all
    /// taken in while the request counts as a fetch in flight.
    fn lookup(&mut self, root: PageId, key: &[u8], limit: u32, objects: bool) -> Result<Vec<Vec<u8>>> {
        let store = self.store.clone();
        let conn = &store.conn;
        let _flight = store.rights.fetch();
        let body = self.tree_call(&ObjectRequest::TreeGet {
            txn: self.id.0,
            root: root.0,
            limit: limit.clamp(1, TREE_LIMIT_MAX),
            key: key.to_vec(),
            objects,
        })?;
        let reply = ValuesAndObjects::decode(&body).map_err(|e| conn.error(cairn_net::Error::Message(e)))?;
        let sent = if objects { reply.values.len() } else { 0 };
        if reply.objects.len() != sent {
            return Err(conn.protocol("one object per value for TREE_GET_OBJECTS, none for TREE_GET"));
        }
        for (v, part) in reply.values.iter().zip(&reply.objects) {
            let f = FetchedObject::decode(part).map_err(|e| conn.error(cairn_net::Error::Message(e)))?;
            conn.objects_shipped.fetch_add(1, Ordering::Relaxed);
            if f.oid[..] != v[..] {
                return Err(conn.protocol("the objects the values name, in order"));
            }
            let oid = Oid::from_bytes(&f.oid);
            let read = Read::of(&f);
            if let (Read::Whole(bytes), r @ 1..) = (&read, f.right) {
                if !self.exclusive.contains_key(&oid) {
                    store.take_object(oid, r, bytes);
                }
            }
            if self.changes.contains_key(&oid) || self.read.contains_key(&oid) {
                continue;
            }
            self.keep(oid, read);
        }
        if !reply.leaves.is_empty() {
            store.take_lookup(root, key, &reply.leaves, reply.values.clone());
        }
        Ok(reply.values)
    }

    /// Calls `f` with each entry between `lo` and `hi` in (key, value)
    /// order until it says false, asking for up to 4,096 entries a request.
    pub fn tree_range(
        &mut self,
        root: PageId,
        lo: std::ops::Bound<Vec<u8>>,
        hi: std::ops::Bound<Vec<u8>>,
        mut f: impl FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<()> {
        use std::ops::Bound;
        const BATCH: u32 = 4096;
        self.send_tree_later(Some(root))?;
        let mut lo = lo;
        let mut after = None;
        loop {
            let body = self.tree_call(&ObjectRequest::TreeRange {
                txn: self.id.0,
                root: root.0,
                limit: BATCH,
                lo: lo.clone(),
                hi: hi.clone(),
                after: after.take(),
            })?;
            let (entries, more) =
                decode_entries(&body).map_err(|e| self.store.conn.error(cairn_net::Error::Message(e)))?;
            let mut last = None;
            for (k, v) in entries {
                if !f(&k, &v) {
                    return Ok(());
                }
                last = Some((k, v));
            }
            match (more, last) {
                // The next batch resumes after the last entry: its key
                // again, skipping its values up to the last one seen.
                (true, Some((k, v))) => {
                    lo = Bound::Included(k);
                    after = Some(v);
                }
                _ => return Ok(()),
            }
        }
    }

    pub(super) fn tree_call(&mut self, req: &ObjectRequest) -> Result<bytes::Bytes> {
        self.check_active()?;
        self.on_server = true;
        self.store.call_one(req, self.id)
    }

    /// The object's bytes.
    pub fn read(&mut self, oid: Oid) -> Result<Vec<u8>> {
        self.check_active()?;
        if let Some(c) = self.changes.get(&oid) {
            return c.clone().ok_or(Error::NotFound { oid });
        }
        // Held under a right and not read by this transaction yet: copied
        // once, straight from the client's cache (or the page's image),
        // and not kept a second time as this transaction's read — the
        // right stays the transaction's until it ends, so a later read
        // finds the same bytes, in the cache or on the server.
        if !self.read.contains_key(&oid) {
            if let Some(bytes) = self.store.copy_object(self.id, oid) {
                self.store.note_reads(&[oid]);
                return Ok(bytes);
            }
        }
        self.read_many(&[oid])?.pop().flatten().ok_or(Error::NotFound { oid })
    }

    /// The object's bytes shared, not copied (`None`: no such object):
    /// an `Arc` and the object's range in it — the kept object, the image
    /// of its page held under a right, or what this transaction read. Its
    /// own uncommitted change is copied (it may change again).
    pub fn read_shared(&mut self, oid: Oid) -> Result<Option<SharedBytes>> {
        self.check_active()?;
        let unmarked = |bytes: Arc<[u8]>| {
            let range = 0..bytes.len();
            SharedBytes {
                bytes,
                range,
                mark: None,
            }
        };
        if let Some(c) = self.changes.get(&oid) {
            return Ok(c.as_deref().map(|b| unmarked(Arc::from(b))));
        }
        // Under a right and not read by this transaction yet: shared
        // straight from the client's cache, not kept again as its read
        // (as `read`).
        if !self.read.contains_key(&oid) {
            if let Some(shared) = self.store.share_object(self.id, oid) {
                self.store.note_reads(&[oid]);
                return Ok(Some(shared));
            }
        }
        self.trim();
        if !self.local(oid) {
            self.fetch(&[oid], OBJ_S)?;
        }
        self.store.note_reads(&[oid]);
        match self.read.get(&oid) {
            Some(Read::Whole(b)) => Ok(Some(unmarked(b.clone()))),
            Some(Read::Missing) => Ok(None),
            _ => Ok(self.whole(oid)?.map(|b| unmarked(Arc::from(b)))),
        }
    }

    /// Sets `mark` on `bytes` (a [`SharedBytes`]'s) if the client still holds them
    /// under its right (not on this transaction's own copies): a later
    /// [`ObjectTxn::read_shared`] of the same bytes, by any transaction,
    /// gives it back. The mark goes with the bytes.
    pub fn mark_shared(&self, oid: Oid, bytes: &Arc<[u8]>, mark: CheckedAs) {
        self.store.mark_object(oid, bytes, mark);
    }

    /// The object's bytes, locked X on the server (the caller is about to
    /// change it: no S→X upgrade later).
    pub fn read_for_update(&mut self, oid: Oid) -> Result<Vec<u8>> {
        self.check_active()?;
        if let Some(c) = self.changes.get(&oid) {
            return c.clone().ok_or(Error::NotFound { oid });
        }
        if !self.exclusive.contains_key(&oid) {
            let store = self.store.clone();
            let _release = store.before_write(self.id, &[oid])?;
            self.fetch(&[oid], OBJ_X)?;
        } else if !self.read.contains_key(&oid) {
            // Its change went ahead of the commit and was let go of
            // (`object/changes.rs`): the server has this transaction's
            // version.
            self.fetch(&[oid], OBJ_X)?;
        }
        self.whole(oid)?.ok_or(Error::NotFound { oid })
    }

    /// Each object of `oids` (`None`: no such object), fetching every one
    /// not read yet in requests of up to 1,024 objects, all sent before the
    /// first reply is read; each reply streams its objects.
    pub fn read_many(&mut self, oids: &[Oid]) -> Result<Vec<Option<Vec<u8>>>> {
        self.check_active()?;
        self.trim();
        let todo: Vec<Oid> = oids
            .iter()
            .copied()
            .filter(|o| !self.changes.contains_key(o) && !self.local(*o))
            .collect();
        if !todo.is_empty() {
            self.fetch(&todo, OBJ_S)?;
        }
        self.store.note_reads(oids);
        oids.iter()
            .map(|o| match self.changes.get(o) {
                Some(c) => Ok(c.clone()),
                None => self.whole(*o),
            })
            .collect()
    }

    /// An object read before: its bytes, reading a long one in ranges.
    fn whole(&mut self, oid: Oid) -> Result<Option<Vec<u8>>> {
        let len = match self.read.get(&oid) {
            Some(Read::Whole(b)) => return Ok(Some(b.to_vec())),
            Some(Read::Missing) => return Ok(None),
            Some(Read::Long(len)) => Some(*len),
            None => None,
        };
        match len {
            Some(len) => {
                let len = usize::try_from(len).map_err(|_| Error::LimitExceeded {
                    what: "bytes of an object read whole",
                    value: len,
                    limit: usize::MAX as u64,
                })?;
                let mut out = vec![0u8; len];
                self.read_range(oid, 0, &mut out)?;
                Ok(Some(out))
            }
            None => Err(Error::Internal(format!("object {oid} was fetched but not kept"))),
        }
    }

    /// Reads `buf.len()` bytes of the object from `offset` (a large object
    /// crosses only in the ranges asked for); its own changes first.
    pub fn read_range(&mut self, oid: Oid, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.check_active()?;
        if let Some(c) = self.changes.get(&oid) {
            let c = c.as_ref().ok_or(Error::NotFound { oid })?;
            let start = usize::try_from(offset).ok().filter(|s| s + buf.len() <= c.len());
            let start = start
                .ok_or_else(|| Error::InvalidArgument(format!("bytes {offset}.. of object {oid} are past its end")))?;
            buf.copy_from_slice(&c[start..start + buf.len()]);
            return Ok(());
        }
        self.on_server = true;
        let mut done = 0usize;
        while done < buf.len() {
            let len = (buf.len() - done).min(READ_RANGE_MAX as usize) as u32;
            let body = self.store.call_one(
                &ObjectRequest::ReadRange {
                    txn: self.id.0,
                    oid: oid.to_bytes(),
                    offset: offset + done as u64,
                    len,
                },
                self.id,
            )?;
            if body.is_empty() || body.len() > len as usize {
                return Err(Error::InvalidArgument(format!(
                    "bytes {}.. of object {oid} are past its end",
                    offset + done as u64
                )));
            }
            buf[done..done + body.len()].copy_from_slice(&body);
            done += body.len();
        }
        Ok(())
    }

    /// Creates an object in `group` (near `near`, if given) and returns
    /// its OID.
    pub fn create(&mut self, group: GroupId, near: Option<Oid>, bytes: &[u8]) -> Result<Oid> {
        self.check_active()?;
        // What it created counts against the bound as what it read.
        self.trim();
        self.on_server = true;
        self.wrote = true;
        let body = self.store.call_one(
            &ObjectRequest::Create {
                txn: self.id.0,
                group: group.0,
                near: near.map_or(NO_OID, Oid::to_bytes),
                bytes: bytes.to_vec(),
            },
            self.id,
        )?;
        let oid = Oid::from_exact(&body).ok_or_else(|| self.store.conn.protocol("an OID of 10 bytes"))?;
        self.keep(oid, Read::Whole(Arc::from(bytes)));
        self.exclusive.insert(oid, ());
        Ok(oid)
    }

    /// Replaces the object's bytes (sent at commit).
    pub fn update(&mut self, oid: Oid, bytes: &[u8]) -> Result<()> {
        self.check_active()?;
        if self.deleted(oid) {
            return Err(Error::NotFound { oid });
        }
        self.change(oid, Some(bytes.to_vec()))
    }

    /// An adaptive client keeps the objects of a page its transaction
    /// changes until the transaction ends (see `pinned`).
    fn pin(&mut self, oid: Oid) {
        if self.store.is_adaptive() && self.pinned.insert(oid.page) {
            self.store.pin_page(self.id, oid.page);
        }
    }

    /// Deletes the object (at commit).
    pub fn delete(&mut self, oid: Oid) -> Result<()> {
        self.check_active()?;
        if self.deleted(oid) {
            return Err(Error::NotFound { oid });
        }
        self.change(oid, None)
    }

    /// True if this transaction deleted the object (the delete kept, or
    /// sent ahead of the commit).
    fn deleted(&self, oid: Oid) -> bool {
        match self.changes.get(&oid) {
            Some(c) => c.is_none(),
            None => self.exclusive.contains_key(&oid) && matches!(self.read.get(&oid), Some(Read::Missing)),
        }
    }

    /// The OIDs of `group`'s objects (as this transaction sees them on the
    /// server: its creates, not its uncommitted deletes).
    pub fn scan(&mut self, group: GroupId) -> Result<Vec<Oid>> {
        self.check_active()?;
        self.on_server = true;
        let body = self.store.call_one(
            &ObjectRequest::Scan {
                txn: self.id.0,
                group: group.0,
            },
            self.id,
        )?;
        let oids = decode_oids(&body).map_err(|e| self.store.conn.error(cairn_net::Error::Message(e)))?;
        Ok(oids
            .iter()
            .map(Oid::from_bytes)
            .filter(|o| !matches!(self.changes.get(o), Some(None)))
            .collect())
    }

    /// Runs a server-side method (encoded by [`crate::methods`]) in this
    /// transaction, after sending it the changes kept so far; returns the
    /// encoded answer.
    pub fn method(&mut self, method: Vec<u8>) -> Result<Vec<u8>> {
        self.flush_changes()?;
        self.send_tree_later(None)?;
        self.on_server = true;
        let body = self
            .store
            .call_one(&ObjectRequest::Method { txn: self.id.0, method }, self.id)?;
        Ok(body.to_vec())
    }

    /// Commits: the after-images go to the server in one OBJ_COMMIT, which
    /// answers once they are durable.
    pub fn commit(mut self) -> Result<()> {
        self.check_active()?;
        self.settle_ahead();
        self.send_tree_later(None)?;
        let oids: Vec<Oid> = self.changes.keys().copied().collect();
        let store = self.store.clone();
        let _release = match oids.is_empty() {
            true => None,
            false => Some(store.before_write(self.id, &oids)?),
        };
        self.ended = true;
        // No answer may name it once its end is on the way; one that did
        // made the server begin it (it must end there too).
        let named = self.store.txn_ending(self.id);
        let _ended = Ended(&self.store, self.id);
        if !self.wrote && self.changes.is_empty() {
            // Read-only: its end releases its locks, and nobody waits for
            // the answer (sent one way, as a page client ends one).
            if self.on_server || named {
                self.send_abort();
            }
            return Ok(());
        }
        let changes = std::mem::take(&mut self.changes)
            .into_iter()
            .map(|(oid, c)| changes::wire_change(oid, c))
            .collect();
        self.store
            .call_one(
                &ObjectRequest::Commit {
                    txn: self.id.0,
                    changes,
                },
                self.id,
            )
            .map(|_| ())
    }

    /// Aborts: the server drops what the transaction did and its locks.
    pub fn abort(mut self) -> Result<()> {
        self.end_on_server();
        Ok(())
    }

    fn end_on_server(&mut self) {
        if self.ended {
            return;
        }
        self.settle_ahead();
        self.ended = true;
        let named = self.store.txn_ending(self.id);
        let _ended = Ended(&self.store, self.id);
        if self.on_server || named {
            self.send_abort();
        }
    }

    /// Sends OBJ_ABORT one way: nobody waits for the answer (sent and
    /// dropped, as a page client ends a read-only transaction).
    fn send_abort(&self) {
        let conn = &self.store.conn;
        let (kind, body): (Kind, Vec<u8>) = ObjectRequest::Abort { txn: self.id.0 }.encode();
        conn.one_way.fetch_add(1, Ordering::Relaxed);
        drop(conn.client.invoke(kind, body));
    }
}

impl Drop for ObjectTxn {
    fn drop(&mut self) {
        self.end_on_server();
    }
}

/// Forgets a transaction's rights bookkeeping once its end was sent (and,
/// for a commit, answered): only then may rights to what it changed be
/// taken in again.
struct Ended<'a>(&'a ObjectStore, TxnId);

impl Drop for Ended<'_> {
    fn drop(&mut self) {
        self.0.txn_ended(self.1);
    }
}
