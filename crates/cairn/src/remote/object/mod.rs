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
use cairn_net::object_service::{decode_oids, ObjectRequest, NO_OID, OBJ_X};
use cairn_net::page_service::{decode_groups, PageRequest, VolumeInfo};
use cairn_net::transport::Address;
use cairn_storage::fxhash::{FxHashMap, FxHashSet};
use cairn_storage::{Error, GroupId, Oid, PageId, Result, TxnId};

use super::adaptive::{Adaptive, AdaptivePolicy, Sequence};
use super::conn::Connection;
use super::rights::{start_callback_thread, Rights};
use super::RemoteStats;
use crate::view::CheckedAs;
use cairn_schema::append::ListAppend;
use reads::Read;
use rights::RightsState;

mod changes;
mod fetch;
mod reads;
mod rights;
pub(in crate::remote) mod trees;

pub(crate) use changes::wire_append;
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
            // A quarter of the bound again for copies kept past their
            // rights for running snapshots.
            rights: Rights::new(RightsState::new(cached_bytes / 4)),
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
        Ok(self.new_txn(TxnId(self.next_txn.fetch_add(1, Ordering::Relaxed)), false))
    }

    /// Starts a read-only transaction at a snapshot of the server's last
    /// committed state (one round trip, OBJ_SNAPSHOT): it sees every commit
    /// that returned before it began and none after, takes no lock, never
    /// waits for a writer nor makes one wait, and never aborts for a
    /// conflict. It reads an object or lookup the client keeps under a
    /// right that came *before* the snapshot was asked for and is still
    /// held (no commit changed it since the right's grant, which came
    /// before the snapshot began: it is what the snapshot sees), and every
    /// other from the server as of the snapshot (an adaptive client
    /// fetching single objects); what the server sends that is the
    /// committed version comes with a right and is kept for later
    /// transactions, not used by this one. A change
    /// is [`Error::ReadOnlyTxn`]; a snapshot that outlives the server's
    /// version store fails with [`Error::SnapshotTooOld`].
    pub fn begin_read_only(self: &Arc<Self>) -> Result<ObjectTxn> {
        if let Some(e) = self.conn.client.closed() {
            return Err(self.conn.error(e));
        }
        let id = TxnId(self.next_txn.fetch_add(1, Ordering::Relaxed));
        // Read before the request goes: every right taken in up to now was
        // granted before the server begins the snapshot.
        let before = self.clock();
        let body = self.call_one(&ObjectRequest::Snapshot { txn: id.0 }, id)?;
        // The window is checked; the client keeps nothing it could judge
        // by it (it caches objects without their pages' LSNs).
        cairn_net::page_service::SnapshotInfo::decode(&body)
            .map_err(|e| self.conn.error(cairn_net::Error::Message(e)))?;
        let mut t = self.new_txn(id, true);
        t.on_server = true;
        t.snapshot_clock = before;
        self.snapshot_began(id, before);
        Ok(t)
    }

    fn new_txn(self: &Arc<Self>, id: TxnId, snapshot: bool) -> ObjectTxn {
        ObjectTxn {
            store: self.clone(),
            id,
            snapshot,
            snapshot_clock: 0,
            on_server: false,
            wrote: false,
            ended: false,
            doomed: None,
            read: FxHashMap::default(),
            read_bytes: 0,
            read_kept: 0,
            exclusive: FxHashMap::default(),
            changes: BTreeMap::new(),
            appends: BTreeMap::new(),
            changes_bytes: 0,
            tree_later: Vec::new(),
            tree_later_bytes: 0,
            tree_later_keys: FxHashSet::default(),
            pinned: FxHashSet::default(),
            ahead: std::collections::VecDeque::new(),
            sequence: Sequence::default(),
        }
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

    /// The server's lock-manager counters, all sessions together (a
    /// LOCK_STATS round trip).
    pub fn server_lock_stats(&self) -> Result<cairn_storage::lock::LockStats> {
        self.conn.server_lock_stats()
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
            answers_refused: c.answers_refused.load(Ordering::Relaxed),
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
    /// A read-only transaction at a snapshot
    /// ([`ObjectStore::begin_read_only`]): it reads under rights only what
    /// was kept before it began, and changes nothing.
    snapshot: bool,
    /// A snapshot's: the client's clock when it was asked for (what was
    /// taken in under rights by then, and is still held, it may read).
    snapshot_clock: u64,
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
    /// Appends to objects it did not read (`object/changes.rs`), in the
    /// order made, sent with the after-images.
    appends: BTreeMap<Oid, Vec<Arc<ListAppend>>>,
    /// Bytes the changes and appends take in a message.
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

impl ObjectTxn {
    /// The transaction's id (the client's name for it on the server).
    pub fn id(&self) -> u64 {
        self.id.0
    }

    /// True for a read-only transaction at a snapshot.
    pub fn is_snapshot(&self) -> bool {
        self.snapshot
    }

    /// Refuses a change in a snapshot transaction.
    fn refuse_if_snapshot(&self) -> Result<()> {
        if self.snapshot {
            return Err(Error::ReadOnlyTxn(self.id));
        }
        Ok(())
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

    /// Locks the object X on the server (a change follows), unless held.
    pub fn lock_for_update(&mut self, oid: Oid) -> Result<()> {
        self.check_active()?;
        self.refuse_if_snapshot()?;
        self.settle_appends(oid)?;
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
    ///
    /// In one global order, OID order (page, then slot), each object once,
    /// whatever the order of `oids`: two transactions locking the same
    /// objects for update then never hold one each and wait for the other.
    /// The requests go in that order and the server serves a transaction's
    /// requests one at a time, in arrival order; it also sorts each
    /// request's objects itself before it locks them, so it does not rely
    /// on this.
    pub fn lock_many_for_update(&mut self, oids: &[Oid]) -> Result<()> {
        self.check_active()?;
        self.refuse_if_snapshot()?;
        self.settle_appends_of(oids)?;
        let mut todo: Vec<Oid> = oids
            .iter()
            .copied()
            .filter(|o| !self.exclusive.contains_key(o) && !self.changes.contains_key(o))
            .collect();
        // The one global order (see above).
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

    /// Creates an object in `group` (near `near`, if given) and returns
    /// its OID.
    pub fn create(&mut self, group: GroupId, near: Option<Oid>, bytes: &[u8]) -> Result<Oid> {
        self.check_active()?;
        self.refuse_if_snapshot()?;
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
        // The new bytes replace the object whole, its appends too.
        self.drop_appends(oid);
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
        self.drop_appends(oid);
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
        if self.snapshot {
            return Err(Error::InvalidArgument(format!(
                "{} is a snapshot: scanning a group at a snapshot is not offered",
                self.id
            )));
        }
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
        if self.snapshot {
            return Err(Error::InvalidArgument(format!(
                "{} is a snapshot: server-side methods are not offered at a snapshot",
                self.id
            )));
        }
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
        // Appends take their locks on the server (append locks, or X for
        // one the server rewrites) ahead of the commit, while this
        // transaction's reads under rights still name it to writers: once
        // its end is on the way they no longer do (`txn_ending` below), so
        // a lock it took after that could follow a writer that changed
        // what it read — its reads' protection released before its last
        // lock was taken (write skew). The commit then carries none.
        if !self.appends.is_empty() {
            self.send_changes(false)?;
        }
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
