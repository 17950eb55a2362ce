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
//! ([`cairn_net::object_service`], `objects.rs`): the server reads, creates,
//! changes and deletes objects for the client in transactions that lock
//! single objects, streams fetched objects as partial replies, and commits
//! the after-images the client sends. They may ask for groups (GROUP,
//! GROUPS) and the volume's facts (VOLUME); no page request.
//!
//! Not yet here: allocation of groups by clients.

pub mod access;
mod bounds;
pub mod callbacks;
mod objects;
pub mod users;

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use bytes::Bytes;
use cairn_net::message::{Architecture, ErrorCode, Fault, Hello};
use cairn_net::object_service::ObjectRequest;
use cairn_net::page_service::{
    encode_groups, encode_lsns, encode_page, encode_pages, FaultDetail, FetchStatus, Fetched, PageRequest, VolumeInfo,
    FETCH_CACHE, FETCH_S, FETCH_TRY_INSERT, FETCH_X, LOCK_MODE_IS, LOCK_MODE_IX, LOCK_MODE_S, LOCK_MODE_SIX, NO_GROUP,
    NO_PAGE, RESOURCE_PAGE,
};
use cairn_net::rpc::{Handler, Limits, Notifier, Replier, Request};
use cairn_net::scram::{Decoy, Verifier};
use cairn_net::transport::Listener;
use cairn_storage::access::PageAccess;
use cairn_storage::lock::{LockMode, LockOwner, Resource};
use cairn_storage::page::{self, PageType};
use cairn_storage::record::object::ObjectSpace;
use cairn_storage::{ClientId, Db, Error, GroupId, PageId, Restriction, Txn, TxnId, Unwritten};

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

    /// The transaction the client calls `id`, if it is open.
    fn txn(&self, id: u64) -> Option<Arc<Mutex<Txn>>> {
        lock(&self.txns).get(&id).map(|e| e.txn.clone())
    }

    /// The transaction the client calls `id`, begun now if it is new.
    fn txn_or_begin(&self, db: &Db, id: u64) -> Result<(TxnId, Arc<Mutex<Txn>>), Error> {
        if id == 0 {
            return Err(Error::InvalidArgument("transaction id 0 names no transaction".into()));
        }
        let mut txns = lock(&self.txns);
        if let Some(e) = txns.get(&id) {
            return Ok((e.id, e.txn.clone()));
        }
        if txns.len() >= TXNS_PER_SESSION_MAX {
            return Err(Error::LimitExceeded {
                what: "open transactions in one session",
                value: txns.len() as u64 + 1,
                limit: TXNS_PER_SESSION_MAX as u64,
            });
        }
        let slot = Arc::new(self.txns_bound.take()?);
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
        let entry = TxnEntry {
            id: t.id(),
            txn: Arc::new(Mutex::new(t)),
            sent: Arc::default(),
            _slot: slot,
        };
        txns.insert(id, entry.clone());
        Ok((entry.id, entry.txn))
    }
}

impl PageServer {
    /// A server over an open database. It sets the database's write-lock
    /// hook ([`Db::set_write_lock_hook`]): every lock that lets a
    /// transaction change a page — a page client's X, an object client's
    /// IX under object-level locking, a B+-tree's split, a free — first
    /// calls the page back from the other clients caching it, so no path
    /// around the explicit call-backs of the page service leaves a cached
    /// page stale.
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

/// Whether a READ of `page` is the session's to make (see the READ arm).
fn may_read(core: &Core, state: &SessionState, page: PageId) -> bool {
    if core.callbacks.has_right(state.client, Resource::Page(page)) {
        return true;
    }
    let group = core.db.group_of_page(page);
    // Asked of the lock manager by transaction id: a clone of a `Txn`
    // held here would make a COMMIT of it, on another thread, find "a
    // request still running", and locking one would wait for its request.
    let ids: Vec<TxnId> = lock(&state.txns).values().map(|e| e.id).collect();
    ids.into_iter().any(|id| {
        let owner = LockOwner::new(state.client, id);
        core.db.holds_lock(owner, &Resource::Page(page), LockMode::S)
            || group.is_some_and(|g| core.db.holds_lock(owner, &Resource::Group(g), LockMode::S))
    })
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
        if session.state.object {
            let req = ObjectRequest::decode(request.kind, &request.body)
                .map_err(|e| Fault::new(ErrorCode::PROTOCOL, e.to_string()))?;
            if let Some(req) = req {
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
                PageRequest::Group { .. } | PageRequest::Groups | PageRequest::Volume
            )
        {
            return Err(Fault::new(
                ErrorCode::INVALID,
                "an object-server session asks for objects, not pages (only GROUP, GROUPS and VOLUME of the page \
                 service)",
            ));
        }
        // One request of a transaction at a time.
        let abort = matches!(req, PageRequest::Abort { .. });
        let _turn = session.state.turn_of(req.txn(), abort).await?;
        // A read that needs no wait is answered here, on the network
        // thread: handing it to a blocking thread and back cost about
        // 90 µs of the ~150 µs a cold page fetch took (docs/history/benchmarks-notebook.md).
        let outcome = match self.without_waiting(&session.state, &req).await? {
            Some(answer) => answer,
            None => match req {
                // Their lock waits are parked, holding no thread.
                PageRequest::Fetch { txn, .. }
                | PageRequest::Free { txn, .. }
                | PageRequest::Lock {
                    txn, try_only: false, ..
                } => Ok(run_parking(&self.core, &session.state, txn, move |c, s| serve(c, s, req.clone())).await?),
                req => {
                    let core = self.core.clone();
                    let state = session.state.clone();
                    run_blocking(&self.core, &session.state, move || serve(&core, &state, req)).await?
                }
            },
        };
        match outcome? {
            Answer::Body(body) => Ok(Bytes::from(body)),
            Answer::Parts(parts) => {
                for p in parts {
                    reply
                        .part(p)
                        .await
                        .map_err(|e| Fault::new(ErrorCode::INTERNAL, e.to_string()))?;
                }
                Ok(Bytes::new())
            }
        }
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

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A request's answer: one body, or parts streamed before an empty final
/// reply.
enum Answer {
    Body(Vec<u8>),
    Parts(Vec<Vec<u8>>),
}

impl PageServer {
    /// [`serve_without_waiting`], with its lock waits parked: when a lock of
    /// the request must wait it is queued, the wait awaited here (no thread
    /// held), and the request tried again.
    async fn without_waiting(
        &self,
        state: &SessionState,
        req: &PageRequest,
    ) -> Result<Option<Result<Answer, Fault>>, Fault> {
        loop {
            match serve_without_waiting(&self.core, state, req) {
                Some(Err(refused)) => match req.txn() {
                    Some(txn) if await_parked(&self.core, state, txn).await? => continue,
                    _ => return Ok(Some(Err(refused))),
                },
                answer => return Ok(answer),
            }
        }
    }
}

/// Answers `req` if it can be done without waiting for anything but a
/// short in-memory critical section or a lock: a FETCH (to read, or to
/// write a page no other client caches, so nobody is called back) whose
/// every page is in the server's buffer pool, or a LOCK that calls nobody
/// back. A lock that must wait is parked: the answer is then
/// [`Error::LockParked`], and the parked request is the transaction's to
/// await ([`PageServer::without_waiting`]). `None` otherwise, and the
/// request goes to [`serve`] on a thread that may block; what was done
/// here by then (a transaction begun, locks taken, rights granted) is what
/// [`serve`] would do first anyway, so it is not done twice.
fn serve_without_waiting(core: &Core, state: &SessionState, req: &PageRequest) -> Option<Result<Answer, Fault>> {
    if let PageRequest::Release { rights } = req {
        give_back(core, state, rights);
        return Some(Ok(Answer::Body(Vec::new())));
    }
    if let PageRequest::Lock {
        txn,
        resource,
        id,
        mode,
        try_only,
    } = *req
    {
        return lock_without_waiting(core, state, txn, lock_request(resource, id, mode), try_only);
    }
    let PageRequest::Fetch {
        txn,
        mode,
        group,
        pages,
    } = req
    else {
        return None;
    };

    if !matches!(mode & !FETCH_CACHE, FETCH_S | FETCH_X) {
        return None;
    }
    let (server_id, t) = match state.txn_or_begin(&core.db, *txn) {
        Ok(x) => x,
        Err(e) => return Some(Err(fault(e))),
    };
    // Another request of this transaction is running: not waiting for it
    // here (a poisoned mutex goes the slow way too, which reports it).
    let mut t = t.try_lock().ok()?;
    let mut parts = Vec::with_capacity(pages.len());
    for &(p, lsn) in pages {
        let fetched = fetch_one(
            core,
            state,
            server_id,
            &mut t,
            PageId(p),
            *mode,
            GroupId(*group),
            lsn,
            false,
        );
        match fetched {
            Ok(Some(part)) => parts.push(part),
            Ok(None) => return None,
            Err(e) => return Some(Err(fault(e))),
        }
    }
    Some(Ok(Answer::Parts(parts)))
}

/// The resource and mode a LOCK request names.
fn lock_request(resource: u8, id: u32, mode: u8) -> (Resource, LockMode) {
    let res = if resource == RESOURCE_PAGE {
        Resource::Page(PageId(id))
    } else {
        Resource::Group(GroupId(id))
    };
    let mode = match mode {
        LOCK_MODE_IS => LockMode::IS,
        LOCK_MODE_IX => LockMode::IX,
        LOCK_MODE_S => LockMode::S,
        LOCK_MODE_SIX => LockMode::SIX,
        _ => LockMode::X,
    };
    (res, mode)
}

/// A LOCK answered on the network thread (see [`serve_without_waiting`]):
/// if no other client caches the page it would let this one change, and
/// (for the file server) the page needs no write-back. A wait parks.
fn lock_without_waiting(
    core: &Core,
    state: &SessionState,
    txn: u64,
    (res, mode): (Resource, LockMode),
    try_only: bool,
) -> Option<Result<Answer, Fault>> {
    let (_, t) = match state.txn_or_begin(&core.db, txn) {
        Ok(x) => x,
        Err(e) => return Some(Err(fault(e))),
    };
    let mut t = t.try_lock().ok()?;
    let _mark = match res {
        Resource::Page(_) if !LockMode::S.covers(mode) => Some(core.callbacks.try_mark(state.client, res, true)?),
        _ => None,
    };
    let granted = if try_only {
        t.try_lock_resource(res, mode)
    } else {
        t.lock_or_park(res, mode)
    };
    match granted {
        // Refused for now (try) or needing a callback (not parked): the
        // slow path does what is left.
        Ok(false) if !try_only => None,
        Ok(granted) => match res {
            Resource::Page(p) if granted && state.file && core.db.needs_write_back(p) => None,
            _ => Some(Ok(Answer::Body(vec![u8::from(granted)]))),
        },
        Err(e) => Some(Err(fault(e))),
    }
}

/// Runs one request on a blocking thread.
fn serve(core: &Core, state: &SessionState, req: PageRequest) -> Result<Answer, Fault> {
    let db = &*core.db;
    let txn_of = |id: u64| state.txn_or_begin(db, id).map_err(fault);
    match req {
        PageRequest::Fetch {
            txn,
            mode,
            group,
            pages,
        } => {
            let (server_id, t) = txn_of(txn)?;
            let mut t = lock(&t);
            let mut parts = Vec::with_capacity(pages.len());
            for (p, lsn) in pages {
                let page = PageId(p);
                let part = parking(&mut t, |t| {
                    fetch_one(core, state, server_id, t, page, mode, GroupId(group), lsn, true)
                });
                match part.map_err(fault)? {
                    Some(part) => parts.push(part),
                    None => {
                        return Err(Fault::new(
                            ErrorCode::INTERNAL,
                            format!("fetching page {page} gave up without being asked to"),
                        ))
                    }
                }
            }
            Ok(Answer::Parts(parts))
        }
        PageRequest::Allocate {
            txn,
            group,
            near,
            page_type,
        } => {
            let ty = PageType::from_u8(page_type)
                .filter(|t| t.is_client_kind())
                .ok_or_else(|| {
                    Fault::new(
                        ErrorCode::INVALID,
                        format!("a client may not allocate a page of type {page_type}"),
                    )
                })?;
            let (_, t) = txn_of(txn)?;
            let mut t = lock(&t);
            let near = (near != NO_PAGE).then_some(PageId(near));
            let p = t.allocate(GroupId(group), near, ty).map_err(fault)?;
            let mut image = t.fetch_page(p, true).map_err(fault)?;
            if state.file {
                // The client writes the page at commit; the server must
                // never write its formatted image over that later.
                db.write_back(p).map_err(fault)?;
            }
            page::seal(&mut image);
            Ok(Answer::Body(encode_page(p.0, t.page_count(), &image)))
        }
        PageRequest::Free { txn, page } => {
            let (server_id, t) = txn_of(txn)?;
            let mut t = lock(&t);
            let _mark = core.call_back(state.client, server_id, PageId(page)).map_err(fault)?;
            parking(&mut t, |t| t.free(PageId(page))).map_err(fault)?;
            Ok(Answer::Body(Vec::new()))
        }
        PageRequest::Stage { txn, records } => {
            let (_, t) = txn_of(txn)?;
            let refused = count_sent(core, state, txn, &records)
                .and_then(|()| lock(&t).stage_redo(&records_of(&records), TxnId(txn)));
            if let Err(e) = refused {
                // A refused batch aborts the transaction.
                drop(t);
                lock(&state.txns).remove(&txn);
                return Err(fault(e));
            }
            Ok(Answer::Body(Vec::new()))
        }
        PageRequest::Commit { txn, records } => {
            // A transaction that never reached the server before has nothing
            // locked, so any record it sends is refused below.
            txn_of(txn)?;
            if let Err(e) = count_sent(core, state, txn, &records) {
                lock(&state.txns).remove(&txn);
                return Err(fault(e));
            }
            let entry = lock(&state.txns).remove(&txn).ok_or_else(|| {
                Fault::new(
                    ErrorCode::NOT_FOUND,
                    format!("transaction {txn} ended while its COMMIT arrived"),
                )
            })?;
            let t = Arc::try_unwrap(entry.txn).map_err(|_| {
                Fault::new(
                    ErrorCode::INVALID,
                    format!("transaction {txn} has a request still running"),
                )
            })?;
            let t = t.into_inner().unwrap_or_else(|e| e.into_inner());
            if state.file {
                let u = db
                    .commit_unwritten(t, &records_of(&records), TxnId(txn))
                    .map_err(fault)?;
                let lsns: Vec<(u32, u64)> = u.lsns().iter().map(|(p, l)| (p.0, l.0)).collect();
                if !lsns.is_empty() {
                    lock(&state.unwritten).insert(txn, u);
                }
                return Ok(Answer::Body(encode_lsns(&lsns)));
            }
            let mut t = t;
            // A refused batch aborts the transaction (dropping it).
            t.stage_redo(&records_of(&records), TxnId(txn)).map_err(fault)?;
            let lsns = t.commit_with_lsns().map_err(fault)?;
            let lsns: Vec<(u32, u64)> = lsns.into_iter().map(|(p, l)| (p.0, l.0)).collect();
            Ok(Answer::Body(encode_lsns(&lsns)))
        }
        PageRequest::Abort { txn } => {
            let t = lock(&state.txns).remove(&txn);
            drop(t);
            Ok(Answer::Body(Vec::new()))
        }
        PageRequest::Volume => {
            let header = db.header();
            Ok(Answer::Body(
                VolumeInfo {
                    page_size: header.page_size,
                    page_count: db.page_counts().0,
                    region_pages: header.region_pages,
                }
                .encode(),
            ))
        }
        PageRequest::Lock {
            txn,
            resource,
            id,
            mode,
            try_only,
        } => {
            let (res, mode) = lock_request(resource, id, mode);
            let (server_id, t) = txn_of(txn)?;
            let mut t = lock(&t);
            let _mark = match res {
                Resource::Page(p) if !LockMode::S.covers(mode) => {
                    Some(core.call_back(state.client, server_id, p).map_err(fault)?)
                }
                _ => None,
            };
            let granted = if try_only {
                t.try_lock_resource(res, mode).map_err(fault)?
            } else {
                parking(&mut t, |t| t.lock_resource(res, mode)).map_err(fault)?;
                true
            };
            if let (true, true, Resource::Page(p)) = (state.file, granted, res) {
                // The client reads the page from the volume file next.
                db.write_back(p).map_err(fault)?;
            }
            Ok(Answer::Body(vec![u8::from(granted)]))
        }
        PageRequest::GroupPages { txn, group } => {
            let (_, t) = txn_of(txn)?;
            let pages = lock(&t).group_pages(GroupId(group)).map_err(fault)?;
            let pages: Vec<u32> = pages.into_iter().map(|p| p.0).collect();
            Ok(Answer::Body(encode_pages(&pages)))
        }
        PageRequest::Groups => {
            let groups: Vec<(u32, String)> = db.groups().into_iter().map(|g| (g.id.0, g.name)).collect();
            Ok(Answer::Body(encode_groups(&groups)))
        }
        PageRequest::Group { create, name } => {
            let g = match db.group(&name) {
                Ok(g) => g,
                Err(_) if create => match db.create_group(&name) {
                    Ok(g) => g,
                    // Another session made it first.
                    Err(Error::GroupExists(_)) => db.group(&name).map_err(fault)?,
                    Err(e) => return Err(fault(e)),
                },
                Err(e) => return Err(fault(e)),
            };
            Ok(Answer::Body(g.0.to_le_bytes().to_vec()))
        }
        PageRequest::Read { page: p } => {
            // Only a page the session may see now: one a transaction of it
            // holds a lock on (the page's, or its group's), or one it holds
            // a right to cache (an evicted page it refills).
            if !may_read(core, state, PageId(p)) {
                return Err(Fault::new(
                    ErrorCode::INVALID,
                    format!("READ of page {p}: the session holds no lock on it and no right to cache it"),
                ));
            }
            let mut image = db.read_committed(PageId(p)).map_err(fault)?;
            page::seal(&mut image);
            Ok(Answer::Body(image))
        }
        PageRequest::CallbackReply(c) => {
            // Id 0 answers no callback: the client names its transactions
            // reading a page under its right before another of them takes X.
            core.callbacks
                .answer(
                    db,
                    state,
                    c.id,
                    Resource::Page(PageId(c.page)),
                    c.epoch,
                    c.writer,
                    &c.in_use_by,
                )
                .map_err(fault)?;
            Ok(Answer::Body(Vec::new()))
        }
        PageRequest::Release { rights } => {
            give_back(core, state, &rights);
            Ok(Answer::Body(Vec::new()))
        }
        PageRequest::VolumeFile => {
            use std::os::unix::ffi::OsStrExt;
            let path = db.volume_file();
            Ok(Answer::Body(path.as_os_str().as_bytes().to_vec()))
        }
        PageRequest::Written { txn } => {
            let u = lock(&state.unwritten).remove(&txn).ok_or_else(|| {
                Fault::new(
                    ErrorCode::NOT_FOUND,
                    format!("transaction {txn} has no commit waiting for its pages to be written"),
                )
            })?;
            u.written().map_err(fault)?;
            Ok(Answer::Body(Vec::new()))
        }
    }
}

/// RELEASE: the session's rights to cache `rights` go (never waits).
fn give_back(core: &Core, state: &SessionState, rights: &[(u32, u64)]) {
    let rights: Vec<(Resource, u64)> = rights.iter().map(|&(p, e)| (Resource::Page(PageId(p)), e)).collect();
    core.callbacks.give_back(state.client, &rights);
}

/// The records as slices.
fn records_of(records: &[Vec<u8>]) -> Vec<&[u8]> {
    records.iter().map(|r| &r[..]).collect()
}

/// Counts the bytes of `records` against the transaction's limit.
fn count_sent(core: &Core, state: &SessionState, txn: u64, records: &[Vec<u8>]) -> Result<(), Error> {
    let bytes: u64 = records.iter().map(|r| r.len() as u64).sum();
    let Some(entry) = lock(&state.txns).get(&txn).cloned() else {
        return Ok(());
    };
    let total = entry.sent.fetch_add(bytes, Ordering::Relaxed) + bytes;
    if total > core.txn_bytes_max {
        return Err(Error::LimitExceeded {
            what: "bytes of redo records in one transaction (txn_bytes_max)",
            value: total,
            limit: core.txn_bytes_max,
        });
    }
    Ok(())
}

/// One page of a FETCH: its part (see [`Fetched`]). A page not in use for
/// the transaction is reported, not locked; a try-insert that is not
/// granted takes nothing. Before an X lock the page is called back from
/// the other clients caching it; a page locked and sent (or revalidated)
/// comes with the right to cache it when no other client's writer is at it.
///
/// For a file-server session the page is written back first if the
/// server's buffer pool holds a change the volume file lacks (the client
/// reads the committed page there), and the part ships no image and grants
/// no right to cache ([`FetchStatus::Locked`]).
#[allow(clippy::too_many_arguments)]
fn fetch_one(
    core: &Core,
    state: &SessionState,
    server_id: TxnId,
    t: &mut Txn,
    id: PageId,
    mode: u8,
    group: GroupId,
    client_lsn: u64,
    wait: bool,
) -> Result<Option<Vec<u8>>, Error> {
    let client = state.client;
    let cache = mode & FETCH_CACHE != 0 && !state.file;
    let mode = mode & !FETCH_CACHE;
    let page_count = t.page_count();
    let owner = t.group_of_page(id)?;
    let mut part = Fetched {
        page: id.0,
        status: FetchStatus::NotInUse,
        group: owner.map_or(NO_GROUP, |g| g.0),
        page_count,
        lsn: 0,
        cover: 0,
        image: &[],
    };
    if !t.is_page_in_use(id)? {
        return Ok(Some(part.encode()));
    }
    if !wait {
        // X only if no other client caches the page (nobody to call back);
        // the mark then keeps any from getting a right until this one's is
        // registered, as `call_back`'s does below.
        let _mark = match mode {
            FETCH_S => None,
            FETCH_X => match core.callbacks.try_mark(client, Resource::Page(id), true) {
                Some(mark) => Some(mark),
                None => return Ok(None),
            },
            _ => return Ok(None),
        };
        // A lock wait parks here (`Error::LockParked`), with no thread.
        let m = if mode == FETCH_X { LockMode::X } else { LockMode::S };
        if !t.lock_or_park(Resource::Page(id), m)? {
            return Ok(None);
        }
        if state.file {
            if core.db.needs_write_back(id) {
                return Ok(None);
            }
            part.status = FetchStatus::Locked;
            return Ok(Some(part.encode()));
        }
        return match t.try_fetch_page(id, mode == FETCH_X)? {
            Some(mut image) => Ok(Some(finish_fetch(
                core, client, id, cache, client_lsn, part, &mut image,
            ))),
            None => Ok(None),
        };
    }
    let _mark = if mode == FETCH_S {
        None
    } else {
        Some(core.call_back(client, server_id, id)?)
    };
    let granted = match mode {
        FETCH_TRY_INSERT => t.try_insert_page(group, id)?,
        FETCH_S | FETCH_X => {
            t.lock_page(id, mode == FETCH_X)?;
            true
        }
        _ => return Err(Error::InvalidArgument(format!("FETCH mode {mode}"))),
    };
    if !granted {
        part.status = FetchStatus::NotGranted;
        return Ok(Some(part.encode()));
    }
    if state.file {
        core.db.write_back(id)?;
        part.status = FetchStatus::Locked;
        return Ok(Some(part.encode()));
    }
    let mut image = t.fetch_page(id, mode != FETCH_S)?;
    // (The writer's mark, if any, lasts until its right is registered.)
    Ok(Some(finish_fetch(
        core, client, id, cache, client_lsn, part, &mut image,
    )))
}

/// The FETCH part of a page locked and read: its LSN, the right to cache it
/// if asked for, and its image unless the client's copy is current.
fn finish_fetch<'a>(
    core: &Core,
    client: ClientId,
    id: PageId,
    cache: bool,
    client_lsn: u64,
    mut part: Fetched<'a>,
    image: &'a mut [u8],
) -> Vec<u8> {
    part.lsn = page::lsn(image).0;
    if cache {
        part.cover = core.callbacks.register(client, Resource::Page(id));
    }
    if client_lsn != 0 && part.lsn == client_lsn {
        part.status = FetchStatus::Unchanged;
        return part.encode();
    }
    page::seal(image);
    part.status = FetchStatus::Image;
    part.image = image;
    part.encode()
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
        _ => None,
    };
    let mut f = Fault::new(code, e.to_string());
    if let Some(d) = detail {
        f.detail = Bytes::from(d.encode());
    }
    f
}
