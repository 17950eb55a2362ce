//! The Cairn server: sessions over `cairn-net`, serving the storage engine
//! (`cairn-storage`) to page-server clients (ARCHITECTURE.md).
//!
//! [`run`] serves one listener until a shutdown future completes; `cairn
//! serve` binds TCP and/or Unix listeners, runs one `run` per listener over
//! one shared [`PageServer`], and checkpoints the database on the way out.
//!
//! # A session
//!
//! A connection's HELLO must ask for a served architecture and log in as a
//! user (SCRAM-SHA-256, run by the RPC layer), unless the database has no
//! users and the server trusts connections without a login (loopback only);
//! the user's role restricts every transaction of the session (`access.rs`).
//! Each session is a storage
//! client ([`ClientId`]): its transactions are storage [`Txn`]s whose lock
//! owner is `(client, txn)`, so lock waits, deadlock detection and timeouts
//! work between clients exactly as between threads. Requests run on tokio's
//! blocking pool (a lock wait or a page read blocks a thread, never the
//! reactor), except a FETCH for reading that needs no wait at all (each
//! lock granted at once, each page in the buffer pool), answered on the
//! network thread (`serve_without_waiting`). When the connection ends,
//! every transaction it left open is aborted: its locks are released and
//! nothing of it remains.
//!
//! ```text
//!  BEGIN ──▶ open ──FETCH/ALLOCATE/FREE──▶ open ──COMMIT──▶ (verified, logged, durable) ──▶ gone
//!                        │                     └──ABORT / connection closed──────────────────▶ gone
//!                        └─ error (deadlock, timeout, I/O) ─▶ doomed: only ABORT is accepted
//! ```
//!
//! The server trusts no client: pages it sends are sealed (CRC32C) for the
//! client to verify, and a COMMIT's records are verified by
//! [`Txn::stage_redo`] before anything reaches the log.
//!
//! A transaction is named by the client and begins on the server with the
//! first request that names it (there is no BEGIN round trip); a session
//! may have at most [`TXNS_PER_SESSION_MAX`] open.
//!
//! **Callback locking** ([`callbacks`]): a FETCH may give the client the
//! right to keep the page across transactions; before any transaction takes
//! X on a page the server calls back the other clients caching it.
//!
//! **File-server sessions** (HELLO with the file-server architecture, DeWitt
//! et al. §2.4): the client reads and writes pages in the volume file
//! itself; the server locks, allocates and logs. Its FETCH takes the lock
//! and writes the page back first if the server's buffer pool holds a
//! change not yet in the file (so the file holds the committed page),
//! ships no image and grants no right to cache; an ALLOCATE writes the new
//! page back before answering; a COMMIT logs the client's full images
//! without installing them ([`Db::commit_unwritten`]) and keeps the locks
//! until the client's WRITTEN; a session that closes before WRITTEN has
//! those pages repaired from the after-images. A file-server FETCH is
//! answered on the network thread when its locks are granted at once and no
//! page needs writing back.
//!
//! **Object-server sessions** (architecture 2, §2.2): the object service
//! ([`cairn_net::object_service`], `objects/`): the server reads, creates,
//! changes and deletes objects for the client in transactions that lock
//! single objects, streams fetched objects as partial replies, and commits
//! the after-images the client sends. They may ask for groups (GROUP,
//! GROUPS), the volume's facts (VOLUME) and the lock counters
//! (LOCK_STATS); no page request.
//!
//! **LOCK_STATS**, from any session: the database's lock-manager counters
//! (`DbStats::locks`), read and changed by nothing else.
//!
//! Not yet here: allocation of groups by clients.

pub mod access;
mod bounds;
pub mod callbacks;
mod catalog;
mod objects;
mod pages;
mod rights;
pub mod users;

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use bytes::Bytes;
use cairn_net::catalog_service::CatalogRequest;
use cairn_net::message::{Architecture, ErrorCode, Fault, Hello};
use cairn_net::object_service::ObjectRequest;
use cairn_net::page_service::{FaultDetail, PageRequest};
use cairn_net::rights::RightsRequest;
use cairn_net::rpc::{Handler, Limits, Notifier, Replier, Request};
use cairn_net::scram::{Decoy, Verifier};
use cairn_net::transport::Listener;
use cairn_storage::lock::{LockMode, Resource};
use cairn_storage::{ClientId, Db, Error, PageId, Restriction, Txn, TxnId, Unwritten};

use access::Access;
use bounds::{Bound, Slot};
use users::UsersFile;

use callbacks::Callbacks;

/// Transactions one session may have open at once.
pub const TXNS_PER_SESSION_MAX: usize = 4096;

/// What a server admits and how it bounds its sessions.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Admit connections without a login while the database has no users
    /// (as `admin`): only for a server whose every listener is on loopback
    /// or a Unix socket. The caller decides; `cairn serve` refuses to start
    /// otherwise.
    pub trust_without_login: bool,
    /// The RPC layer's bounds (connections, requests in flight, bytes).
    pub limits: Limits,
    /// Bytes of redo records one transaction may send (over STAGE and
    /// COMMIT messages together); past it the transaction is aborted with
    /// LIMIT. Its private pages spill to disk past the database's
    /// in-memory budget, so this bounds disk, not memory.
    pub txn_bytes_max: u64,
    /// Rights to cache a page (callback locking) held at once by all
    /// clients together; past it pages are served under their lock alone
    /// and revalidated by LSN. Bounds the callback table's memory.
    pub callback_rights_max: usize,
    /// Transactions open at once on the whole server (`bounds.rs`); one
    /// more is refused with LIMIT.
    pub txns_max: usize,
    /// Requests that may block (a callback, I/O, a commit; not a lock wait,
    /// which is parked without a thread), each on a blocking thread, running
    /// at once on the whole server; one more is refused with LIMIT. Keep it
    /// below the runtime's blocking threads.
    pub waiting_max: usize,
    /// The same bound for one session, so one client cannot take them all.
    pub waiting_per_session_max: usize,
}

/// Default [`ServerConfig::txns_max`].
pub const TXNS_MAX_DEFAULT: usize = 65_536;
/// Default [`ServerConfig::waiting_max`] (tokio's blocking pool has 512 threads).
pub const WAITING_MAX_DEFAULT: usize = 448;
/// Default [`ServerConfig::waiting_per_session_max`].
pub const WAITING_PER_SESSION_MAX_DEFAULT: usize = 128;

/// Default [`ServerConfig::txn_bytes_max`]: 1 GiB.
pub const TXN_BYTES_MAX_DEFAULT: u64 = 1 << 30;

impl Default for ServerConfig {
    fn default() -> ServerConfig {
        ServerConfig {
            trust_without_login: true,
            limits: Limits::default(),
            txn_bytes_max: TXN_BYTES_MAX_DEFAULT,
            callback_rights_max: callbacks::RIGHTS_MAX_DEFAULT,
            txns_max: TXNS_MAX_DEFAULT,
            waiting_max: WAITING_MAX_DEFAULT,
            waiting_per_session_max: WAITING_PER_SESSION_MAX_DEFAULT,
        }
    }
}

/// The page server: the database and who is connected.
pub struct PageServer {
    core: Arc<Core>,
    access: Access,
    next_client: AtomicU32,
}

/// What requests share: the database, the callback table, the sessions.
struct Core {
    db: Arc<Db>,
    txn_bytes_max: u64,
    /// Bytes a reply built from many entries (a B+-tree range, a key's
    /// values and their objects) may take: the message bound, less room
    /// for its framing.
    reply_bytes_max: usize,
    callbacks: Callbacks,
    sessions: Mutex<HashMap<ClientId, Arc<SessionState>>>,
    /// Open transactions of all sessions (`bounds.rs`).
    txns: Arc<Bound>,
    /// Requests running on blocking threads, of all sessions.
    waiting: Arc<Bound>,
    waiting_per_session_max: usize,
    /// The catalog object clients' appends are placed by
    /// (`objects/appends.rs`).
    catalog: objects::CatalogCopy,
}

impl Core {
    fn session(&self, client: ClientId) -> Option<Arc<SessionState>> {
        lock(&self.sessions).get(&client).cloned()
    }

    /// Calls `page` (and the objects on it) back from the other clients
    /// caching them before `t` (of `client`) takes X on it; see
    /// [`callbacks`].
    fn call_back(&self, client: ClientId, t: TxnId, page: PageId) -> Result<callbacks::WriterMark<'_>, Error> {
        self.call_back_key(client, t, Resource::Page(page), true)
    }

    /// Calls the pages of `pages` (and the objects on them) back from the
    /// other clients caching them, [`CALLBACK_ROUND_PAGES`] at once, before
    /// `t` takes X on them one by one; the marks keep new rights off them
    /// until dropped.
    fn call_back_pages(
        &self,
        client: ClientId,
        t: TxnId,
        pages: &[PageId],
    ) -> Result<Vec<callbacks::WriterMark<'_>>, Error> {
        let mut marks = Vec::with_capacity(pages.len());
        for round in pages.chunks(CALLBACK_ROUND_PAGES) {
            let keys: Vec<Resource> = round.iter().map(|p| Resource::Page(*p)).collect();
            marks.extend(self.callbacks.call_back_all(
                &|c| self.session(c),
                client,
                t,
                &keys,
                true,
                self.db.lock_timeout(),
            )?);
        }
        Ok(marks)
    }

    /// Calls `key` back (with `objects`, the objects of the page it names
    /// too) from the other clients caching it; see [`callbacks`].
    fn call_back_key(
        &self,
        client: ClientId,
        t: TxnId,
        key: Resource,
        objects: bool,
    ) -> Result<callbacks::WriterMark<'_>, Error> {
        self.callbacks
            .call_back(&|c| self.session(c), client, t, key, objects, self.db.lock_timeout())
    }
}

/// Pages a FETCH X of many calls back in one round: the callbacks of a
/// round (a page's and its objects') wait in each client's queue of
/// notices together, which this keeps far below its bound (an object
/// client may hold rights on dozens of objects of a page).
const CALLBACK_ROUND_PAGES: usize = 64;

/// A writer's mark taken by the write-lock hook, ended when the lock
/// request it was taken for returns.
struct Unmark {
    core: Arc<Core>,
    client: ClientId,
    key: Resource,
}

impl Drop for Unmark {
    fn drop(&mut self) {
        self.core.callbacks.unmark(self.client, self.key);
    }
}

impl std::fmt::Debug for PageServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageServer").field("db", &self.core.db).finish()
    }
}

/// One connection's state: its storage client id and open transactions.
pub struct Session {
    state: Arc<SessionState>,
}

/// A session's transaction: its server id and the storage transaction.
#[derive(Clone)]
struct TxnEntry {
    id: TxnId,
    txn: Arc<Mutex<Txn>>,
    /// A read-only transaction at a snapshot (SNAPSHOT): it reads with
    /// FETCH at its snapshot and ends with ABORT, nothing else.
    snapshot: bool,
    /// Bytes of redo records it sent (STAGE and COMMIT).
    sent: Arc<std::sync::atomic::AtomicU64>,
    /// Its unit of the server's open-transaction bound, given back when the
    /// last clone of the entry goes.
    _slot: Arc<Slot>,
}

/// A session's state, shared by its requests.
pub struct SessionState {
    client: ClientId,
    peer: String,
    /// Open transactions by the client's id for them.
    txns: Mutex<HashMap<u64, TxnEntry>>,
    /// Sends callbacks to the client.
    notifier: OnceLock<Notifier>,
    /// A file-server session: the client reads and writes the volume file.
    file: bool,
    /// An object-server session: its transactions lock single objects and
    /// it asks for objects, not pages.
    object: bool,
    /// The session's role.
    role: users::Role,
    /// What the session's role lets its transactions change.
    restriction: Restriction,
    /// The server's open-transaction bound.
    txns_bound: Arc<Bound>,
    /// This session's requests running on blocking threads.
    waiting: Arc<Bound>,
    /// File-server commits whose pages the client has not reported written,
    /// by the client's transaction id (they hold their locks).
    unwritten: Mutex<HashMap<u64, Unwritten>>,
    /// Per transaction with a request in flight, the gate its requests pass
    /// one at a time ([`SessionState::turn`]).
    turns: Mutex<HashMap<u64, Arc<tokio::sync::Mutex<()>>>>,
}

/// A request's turn in its transaction ([`SessionState::turn`]); the next
/// request of the transaction goes on when it drops.
struct Turn<'a> {
    state: &'a SessionState,
    txn: u64,
    gate: Arc<tokio::sync::Mutex<()>>,
    _held: tokio::sync::OwnedMutexGuard<()>,
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        let mut turns = lock(&self.state.turns);
        // The map's, this turn's and its guard's: nobody else waits.
        if Arc::strong_count(&self.gate) <= 3 {
            turns.remove(&self.txn);
        }
    }
}

impl SessionState {
    /// Waits, without a thread, until no other request of the client's
    /// transaction `txn` is in flight, and returns this request's turn:
    /// a transaction's requests run one at a time, in arrival order (the
    /// gate is FIFO), as a transaction makes one lock request at a time. A
    /// request whose lock wait is parked ([`run_parking`]) keeps its turn
    /// while it waits.
    ///
    /// A request that waited for a transaction that ended meanwhile (an
    /// ABORT, which goes past the gate, or a failed COMMIT) is refused
    /// with NOT_FOUND: it must not begin a new transaction under the old
    /// name, which nobody would end.
    async fn turn(&self, txn: u64) -> Result<Turn<'_>, Fault> {
        let known = lock(&self.txns).get(&txn).map(|e| e.id);
        let gate = lock(&self.turns).entry(txn).or_default().clone();
        let held = gate.clone().lock_owned().await;
        let turn = Turn {
            state: self,
            txn,
            gate,
            _held: held,
        };
        if let Some(id) = known {
            if lock(&self.txns).get(&txn).map(|e| e.id) != Some(id) {
                return Err(fault(Error::TxnNotActive(id)));
            }
        }
        Ok(turn)
    }

    /// [`SessionState::turn`] for a request naming `txn`; no turn for one
    /// naming no transaction, nor for an ABORT (`abort`), which goes past
    /// the gate: it ends a parked wait of its transaction instead of
    /// queueing behind it.
    pub(crate) async fn turn_of(&self, txn: Option<u64>, abort: bool) -> Result<Option<Turn<'_>>, Fault> {
        match txn {
            Some(txn) if !abort => Ok(Some(self.turn(txn).await?)),
            _ => Ok(None),
        }
    }

    /// Takes the client's transaction `txn` out of the session for its
    /// `request` (COMMIT, OBJ_COMMIT) to end it: NOT_FOUND if it ended
    /// meanwhile. The transaction's turn ([`SessionState::turn`]) means no
    /// other request of it holds it; one that does is an INVALID request.
    /// With it comes its unit of the open-transaction bound, to keep until
    /// the commit is over.
    fn take_for_commit(&self, txn: u64, request: &str) -> Result<(Txn, Arc<Slot>), Fault> {
        let entry = lock(&self.txns).remove(&txn).ok_or_else(|| {
            Fault::new(
                ErrorCode::NOT_FOUND,
                format!("transaction {txn} ended while its {request} arrived"),
            )
        })?;
        let t = Arc::try_unwrap(entry.txn).map_err(|_| {
            Fault::new(
                ErrorCode::INVALID,
                format!("transaction {txn} has a request still running"),
            )
        })?;
        Ok((t.into_inner().unwrap_or_else(|e| e.into_inner()), entry._slot))
    }

    /// The transaction the client calls `id`, if it is open.
    fn txn(&self, id: u64) -> Option<Arc<Mutex<Txn>>> {
        lock(&self.txns).get(&id).map(|e| e.txn.clone())
    }

    /// Whether the session may open one more transaction, `id` (not 0; a
    /// new one): its unit of the server's open-transaction bound if so.
    fn admit(&self, txns: &HashMap<u64, TxnEntry>, id: u64) -> Result<Arc<Slot>, Error> {
        if id == 0 {
            return Err(Error::InvalidArgument("transaction id 0 names no transaction".into()));
        }
        if txns.len() >= TXNS_PER_SESSION_MAX {
            return Err(Error::LimitExceeded {
                what: "open transactions in one session",
                value: txns.len() as u64 + 1,
                limit: TXNS_PER_SESSION_MAX as u64,
            });
        }
        Ok(Arc::new(self.txns_bound.take()?))
    }

    /// The transaction the client calls `id`, begun now if it is new.
    fn txn_or_begin(&self, db: &Db, id: u64) -> Result<(TxnId, Arc<Mutex<Txn>>), Error> {
        let mut txns = lock(&self.txns);
        if let Some(e) = txns.get(&id) {
            return Ok((e.id, e.txn.clone()));
        }
        let slot = self.admit(&txns, id)?;
        let mut t = db.begin_for(self.client)?;
        t.restrict(self.restriction.clone());
        if !self.object {
            // A page or file client runs the record and tree code itself:
            // what it commits and frees is checked as a whole at commit.
            t.set_client_checked();
        }
        if self.object {
            t.set_object_locking(true)?;
        }
        // A client's transaction lives across round trips and the client's
        // own work: a coarse S on a whole page or tree would hold every
        // writer there up until it ends.
        t.set_coarse_reads(false);
        let entry = TxnEntry {
            id: t.id(),
            txn: Arc::new(Mutex::new(t)),
            snapshot: false,
            sent: Arc::default(),
            _slot: slot,
        };
        txns.insert(id, entry.clone());
        Ok((entry.id, entry.txn))
    }

    /// Begins the client's transaction `id` as a read-only one at a
    /// snapshot of the last committed state (SNAPSHOT); `id` must be new.
    fn begin_snapshot(&self, db: &Db, id: u64) -> Result<Arc<Mutex<Txn>>, Error> {
        let mut txns = lock(&self.txns);
        if txns.contains_key(&id) {
            return Err(Error::InvalidArgument(format!(
                "SNAPSHOT names transaction {id}, which is open already: a snapshot begins a new one"
            )));
        }
        let slot = self.admit(&txns, id)?;
        let t = db.begin_read_only_for(self.client)?;
        let entry = TxnEntry {
            id: t.id(),
            txn: Arc::new(Mutex::new(t)),
            snapshot: true,
            sent: Arc::default(),
            _slot: slot,
        };
        txns.insert(id, entry.clone());
        Ok(entry.txn)
    }

    /// Whether the client's transaction `id` is open and at a snapshot.
    fn is_snapshot(&self, id: u64) -> bool {
        lock(&self.txns).get(&id).is_some_and(|e| e.snapshot)
    }
}

impl PageServer {
    /// A server over an open database. It sets the database's write-lock
    /// hook ([`Db::set_write_lock_hook`]): every lock that lets a
    /// transaction change a page — a page client's X, an object client's
    /// IX under object-level locking, a B+-tree's split, a free — first
    /// calls the page back from the other clients caching it, so no path
    /// around the explicit call-backs of the page service leaves a cached
    /// page stale; under key-range locking an insert into, or a delete
    /// from, a gap a kept lookup's right covers calls that right back the
    /// same way.
    pub fn new(db: Arc<Db>, config: &ServerConfig) -> PageServer {
        let core = Arc::new(Core {
            db,
            txn_bytes_max: config.txn_bytes_max,
            reply_bytes_max: (config.limits.body_max as usize).saturating_sub(1024).max(1024),
            callbacks: Callbacks::new(config.callback_rights_max),
            sessions: Mutex::new(HashMap::new()),
            txns: Bound::new("open transactions on the server (txns_max)", config.txns_max),
            waiting: Bound::new("requests waiting on the server (waiting_max)", config.waiting_max),
            waiting_per_session_max: config.waiting_per_session_max,
            catalog: Default::default(),
        });
        let weak = Arc::downgrade(&core);
        let hook = move |owner: cairn_storage::lock::LockOwner,
                         key: Resource,
                         mode: LockMode,
                         wait: bool|
              -> Result<Option<cairn_storage::txn::HookGuard>, Error> {
            let Some(core) = weak.upgrade() else {
                return Ok(Some(None));
            };
            // X or SIX on a page may change any object of it: the objects
            // cached from it are called back too. IX changes objects that
            // are called back each under its own X.
            let objects = matches!(key, Resource::Page(_)) && mode != LockMode::IX;
            let (client, key) = if wait {
                core.call_back_key(owner.client, owner.txn, key, objects)?.keep()
            } else {
                match core.callbacks.try_mark(owner.client, key, objects) {
                    Some(mark) => mark.keep(),
                    None => return Ok(None),
                }
            };
            let guard: Box<dyn std::any::Any + Send> = Box::new(Unmark { core, client, key });
            Ok(Some(Some(guard)))
        };
        // A second server over one database (tests) keeps the first hook,
        // which calls back through the first server's table.
        let _ = core.db.set_write_lock_hook(Box::new(hook));
        let access = Access::new(core.db.clone(), None, config.trust_without_login);
        PageServer {
            core,
            access,
            // Client 0 is the embedded engine's own.
            next_client: AtomicU32::new(1),
        }
    }

    /// The server with the users of `users` (`cairn serve` reads the
    /// database directory's users file): once one exists, every connection
    /// must log in, and its role restricts what it may change.
    pub fn with_users(mut self, users: UsersFile) -> PageServer {
        self.access.set_users(users);
        self
    }

    /// The database served.
    pub fn db(&self) -> &Arc<Db> {
        &self.core.db
    }

    /// The callback table (its counters and invariants).
    pub fn callbacks(&self) -> &Callbacks {
        &self.core.callbacks
    }
}

/// Runs `f`, a request that may wait, on a blocking thread, under the
/// server's and the session's bounds of waiting requests (`bounds.rs`):
/// LIMIT at once when either is full.
async fn run_blocking<T: Send + 'static>(
    core: &Core,
    state: &SessionState,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Fault> {
    let slots = (
        core.waiting.take().map_err(fault)?,
        state.waiting.take().map_err(fault)?,
    );
    tokio::task::spawn_blocking(move || {
        let r = f();
        drop(slots);
        r
    })
    .await
    .map_err(|e| Fault::new(ErrorCode::INTERNAL, format!("request task failed: {e}")))
}

/// Runs `f`, a request whose lock requests come before its changes, as
/// [`run_blocking`] does, with its transaction's lock waits parked: when a
/// lock must wait, `f` returns (giving its thread and its waiting slot
/// back) and the request waits here, as a future in the lock manager's
/// queue, up to the lock timeout; then `f` runs again and finds the lock
/// held. A thousand waiting requests so hold a thousand queue entries, not
/// a thousand threads. No reference to the transaction is kept while it
/// waits, so an ABORT or a closed session ends it, and the wait with it.
pub(crate) async fn run_parking<T: Send + 'static>(
    core: &Arc<Core>,
    state: &Arc<SessionState>,
    txn: u64,
    f: impl Fn(&Core, &SessionState) -> Result<T, Fault> + Send + Sync + Clone + 'static,
) -> Result<T, Fault> {
    loop {
        let (c, s, g) = (core.clone(), state.clone(), f.clone());
        let refused = match run_blocking(core, state, move || g(&c, &s)).await? {
            Ok(answer) => return Ok(answer),
            Err(refused) => refused,
        };
        if !await_parked(core, state, txn).await? {
            return Err(refused);
        }
    }
}

/// Awaits the lock request the client's transaction `txn` parked, if it
/// parked one ([`Txn::take_parked`]): `Ok(false)` if it did not (the
/// request failed for another reason), `Ok(true)` once the lock is held,
/// or the error that ended the wait (a deadlock victim, a timeout, the
/// transaction ended).
pub(crate) async fn await_parked(core: &Core, state: &SessionState, txn: u64) -> Result<bool, Fault> {
    let Some(t) = state.txn(txn) else {
        return Ok(false);
    };
    let parked = lock(&t).take_parked();
    drop(t);
    let Some(mut parked) = parked else {
        return Ok(false);
    };
    let request = parked.request();
    let outcome = match tokio::time::timeout(core.db.lock_timeout(), parked.wait()).await {
        Ok(outcome) => outcome,
        Err(_) => parked.time_out(),
    };
    let t = state.txn(txn).ok_or_else(|| fault(Error::TxnNotActive(TxnId(txn))))?;
    let r = lock(&t).finish_parked(request, outcome);
    r.map_err(fault)?;
    Ok(true)
}

/// Runs `f` on `t` with its lock waits parked ([`Txn::set_parking`]).
pub(crate) fn parking<R>(t: &mut Txn, f: impl FnOnce(&mut Txn) -> R) -> R {
    t.set_parking(true);
    let r = f(t);
    t.set_parking(false);
    r
}

/// Serves `listener` with `server` until `shutdown` completes; then stops
/// accepting, lets requests in flight finish (within the limits' grace) and
/// returns. Open transactions of closed sessions are aborted.
pub async fn run(listener: Listener, shutdown: impl Future<Output = ()>, server: Arc<PageServer>, limits: Limits) {
    cairn_net::rpc::run(listener, shutdown, server, limits).await;
}

impl Handler for PageServer {
    type Session = Session;

    fn credentials(&self, user: &str) -> Option<(Option<Verifier>, Decoy)> {
        self.access.credentials(user)
    }

    fn capabilities(&self) -> cairn_net::message::Capabilities {
        if self.core.db.locks_key_ranges() {
            cairn_net::page_service::KEY_RANGES
        } else {
            cairn_net::message::Capabilities(0)
        }
    }

    fn login_failed(&self, peer: &str, user: &str, failures: u64, error: &str) {
        tracing::warn!(
            peer,
            user,
            failures,
            error,
            "login failed (logged at the 1st, 2nd, 4th, ... failure of an address)"
        );
    }

    fn open(&self, hello: &Hello, peer: &str, user: Option<&str>) -> Result<Session, Fault> {
        if ![Architecture::PAGE, Architecture::FILE, Architecture::OBJECT].contains(&hello.architecture) {
            return Err(Fault::new(
                ErrorCode::UNSUPPORTED_ARCHITECTURE,
                format!(
                    "this server serves the page-server ({}), object-server ({}) and file-server ({}) \
                     architectures, not {}",
                    Architecture::PAGE.0,
                    Architecture::OBJECT.0,
                    Architecture::FILE.0,
                    hello.architecture.0
                ),
            ));
        }
        let role = self.access.admit(peer, user)?;
        let client = ClientId(self.next_client.fetch_add(1, Ordering::Relaxed));
        tracing::info!(peer, client = client.0, name = %hello.client_name, user = user.unwrap_or("(trusted, no login)"), role = role.name(), "session opened");
        let state = Arc::new(SessionState {
            client,
            peer: peer.to_string(),
            txns: Mutex::new(HashMap::new()),
            notifier: OnceLock::new(),
            file: hello.architecture == Architecture::FILE,
            object: hello.architecture == Architecture::OBJECT,
            role,
            restriction: self.access.restriction(role),
            txns_bound: self.core.txns.clone(),
            waiting: Bound::new(
                "requests of one session waiting on the server (waiting_per_session_max)",
                self.core.waiting_per_session_max,
            ),
            unwritten: Mutex::new(HashMap::new()),
            turns: Mutex::new(HashMap::new()),
        });
        if !self.core.callbacks.session_opened(client, peer) {
            tracing::warn!(peer, client = client.0, "session from an address barred from rights to cache (a session of it did not answer a callback): served under locks alone");
        }
        lock(&self.core.sessions).insert(client, state.clone());
        Ok(Session { state })
    }

    fn attach(&self, session: &Session, notifier: Notifier) {
        let _ = session.state.notifier.set(notifier);
    }

    async fn handle(&self, session: &Session, request: Request, reply: &Replier) -> Result<Bytes, Fault> {
        let rights = RightsRequest::decode(request.kind, &request.body)
            .map_err(|e| Fault::new(ErrorCode::PROTOCOL, e.to_string()))?;
        if let Some(req) = rights {
            return rights::handle(&self.core, &session.state, req).await;
        }
        let catalog = CatalogRequest::decode(request.kind, &request.body)
            .map_err(|e| Fault::new(ErrorCode::PROTOCOL, e.to_string()))?;
        if let Some(req) = catalog {
            return catalog::handle(&self.core, &session.state, req).await;
        }
        // A page or file session of a server that locks key ranges sends
        // its tree operations as the object service's tree requests.
        let trees_here = self.core.db.locks_key_ranges();
        if session.state.object || trees_here {
            let req = ObjectRequest::decode(request.kind, &request.body)
                .map_err(|e| Fault::new(ErrorCode::PROTOCOL, e.to_string()))?;
            if let Some(req) = req {
                if !session.state.object && !is_page_session_tree_request(&req) {
                    return Err(Fault::new(
                        ErrorCode::INVALID,
                        "a page-server session asks for pages; of the object service it sends only TREE_APPLY, \
                         TREE_GET (without objects), TREE_GET_FOR_UPDATE, TREE_RANGE and TREE_DESTROY (to a server that \
                         locks key ranges)",
                    ));
                }
                return objects::handle(&self.core, &session.state, req, reply).await;
            }
        }
        let req = PageRequest::decode(request.kind, &request.body)
            .map_err(|e| Fault::new(ErrorCode::PROTOCOL, e.to_string()))?
            .ok_or_else(|| {
                Fault::new(
                    ErrorCode::UNKNOWN_KIND,
                    format!("unknown service kind {:#06x}", request.kind.0),
                )
            })?;
        if session.state.object
            && !matches!(
                req,
                PageRequest::Group { .. } | PageRequest::Groups | PageRequest::Volume | PageRequest::LockStats
            )
        {
            return Err(Fault::new(
                ErrorCode::INVALID,
                "an object-server session asks for objects, not pages (only GROUP, GROUPS, VOLUME and LOCK_STATS of \
                 the page service)",
            ));
        }
        pages::handle(&self.core, &session.state, req, reply).await
    }

    fn closed(&self, session: &Session) {
        let client = session.state.client;
        lock(&self.core.sessions).remove(&client);
        let txns: Vec<TxnEntry> = lock(&session.state.txns).drain().map(|(_, t)| t).collect();
        let open = txns.len();
        // Dropping a transaction aborts it: its locks are released and its
        // allocations given back. A request still holding one finishes first.
        drop(txns);
        // File-server commits it never reported written: repaired from
        // their after-images as they drop, before their locks go.
        let unwritten: Vec<Unwritten> = lock(&session.state.unwritten).drain().map(|(_, u)| u).collect();
        if !unwritten.is_empty() {
            tracing::warn!(peer = %session.state.peer, commits = unwritten.len(), "file-server client left commits unwritten: repairing");
        }
        drop(unwritten);
        // Its rights to cache go, and writers waiting for its answers go on.
        self.core.callbacks.session_closed(client);
        tracing::info!(peer = %session.state.peer, client = session.state.client.0, aborted = open, "session closed");
    }
}

/// The object service's requests a page session of a server that locks
/// key ranges sends: its tree operations, which read and change the trees
/// under key-range locks in its transaction here; a TREE_GET's answer may
/// come with rights on the gaps that guard it (its client keeps the
/// lookup), no other right is granted.
fn is_page_session_tree_request(req: &ObjectRequest) -> bool {
    matches!(
        req,
        ObjectRequest::TreeApply { .. }
            | ObjectRequest::TreeRange { .. }
            | ObjectRequest::TreeDestroy { .. }
            | ObjectRequest::TreeGet { objects: false, .. }
            | ObjectRequest::TreeGetForUpdate { .. }
    )
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The fault a storage error becomes, with a code a client can act on.
pub fn fault(e: Error) -> Fault {
    let code = match &e {
        Error::Deadlock { .. } => ErrorCode::DEADLOCK,
        Error::LockTimeout { .. } => ErrorCode::LOCK_TIMEOUT,
        Error::NotFound { .. } | Error::GroupNotFound(_) | Error::TxnNotActive(_) => ErrorCode::NOT_FOUND,
        Error::Corrupt { .. } | Error::CorruptFile { .. } | Error::CorruptLog { .. } => ErrorCode::CORRUPT,
        Error::Poisoned(_) => ErrorCode::POISONED,
        Error::TxnDoomed { .. } => ErrorCode::DOOMED,
        Error::LimitExceeded { .. } | Error::VolumeFull(_) => ErrorCode::LIMIT,
        Error::Io { .. } => ErrorCode::IO,
        Error::Internal(_) => ErrorCode::INTERNAL,
        Error::PermissionDenied(_) => ErrorCode::DENIED,
        Error::SnapshotTooOld { .. } => ErrorCode::SNAPSHOT_TOO_OLD,
        _ => ErrorCode::INVALID,
    };
    // The fields a client rebuilds the same error from.
    let detail = match &e {
        Error::LockTimeout {
            resource,
            mode,
            waited_ms,
            ..
        } => Some(FaultDetail::LockTimeout {
            resource: resource.clone(),
            mode: mode.clone(),
            waited_ms: *waited_ms,
        }),
        Error::Deadlock { cycle, .. } => Some(FaultDetail::Deadlock { cycle: cycle.clone() }),
        Error::Corrupt { page, reason } => Some(FaultDetail::Corrupt {
            page: page.0,
            reason: reason.clone(),
        }),
        Error::SnapshotTooOld { lsn, bytes_max } => Some(FaultDetail::SnapshotTooOld {
            lsn: *lsn,
            bytes_max: *bytes_max,
        }),
        _ => None,
    };
    let mut f = Fault::new(code, e.to_string());
    if let Some(d) = detail {
        f.detail = Bytes::from(d.encode());
    }
    f
}
