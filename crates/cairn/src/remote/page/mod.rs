//! The page-server client (DeWitt et al. §2.3; ARCHITECTURE.md): a
//! [`Backend`] over a `cairn serve` connection.
//!
//! Objects, large objects and B+-trees run here, in the client, over pages
//! fetched from the server — the same code the embedded engine runs, in the
//! same [`Txn`]. What the backend does:
//!
//! - **Pages** are cached in a [`BufferPool`] over a [`RemoteDevice`] (the
//!   same buffer pool the server uses over its volume file). The pool only
//!   ever holds *committed* images: fetched ones, and a transaction's pages
//!   after the server acknowledged its commit (stamped with the LSNs the
//!   server gave them). A transaction's changes stay in its private pages
//!   until commit (no-steal), so nothing uncommitted reaches the server
//!   before the COMMIT, and the device never writes.
//! - **Locks** are the server's, with **callback locking**: a FETCH takes
//!   the lock and names the LSN of the cached copy (the server ships the
//!   image only if it changed), and may grant the *right to cache* the page
//!   across transactions (a nonzero cover epoch). While the client holds
//!   the right, its transactions read the page under a lock only the client
//!   knows of: no round trip, no message at all. Before another client's
//!   transaction takes X, the server calls the page back; the callback
//!   thread (`rights::callback_daemon`) answers "dropped", or names this client's
//!   transactions reading the page (the server then holds S for them, so
//!   the writer waits in the server's lock table, where deadlocks through
//!   callbacks are found). A transaction of this client that wants X names
//!   the client's other readers of the page the same way first
//!   (`name_readers`), and keeps new ones off the right until it ends.
//! - **Transactions** are named by the client and begin on the server with
//!   the first request that names them: a warm read-only transaction sends
//!   nothing from begin to end.
//! - **Space**: what the transaction learnt of a page (in use, its group)
//!   comes with each FETCH (and is kept with a right to cache); allocation
//!   and free are server calls; group lists come from the server.
//! - **Commit** ships one PAGE redo record per changed page (the changed
//!   byte runs against the committed image) in one COMMIT message; the
//!   server verifies, logs, makes durable (group commit), installs and
//!   releases the locks, then answers with the pages' LSNs.
//!
//! # A page in the client's pool
//!
//! The image (the pool) and the right to cache it (`covers`) are separate:
//! a page may be cached without a right (it is then revalidated by LSN at
//! the next lock), and a right outlives an eviction (the page is then read
//! again without a lock: no other client can have changed it).
//!
//! ```text
//!            FETCH: IMAGE (+ right e)                  FETCH (lsn named): IMAGE
//!  absent ─────────────────────────▶ cached(lsn) ───────────────────────────────▶ cached(lsn')  + typed caches told
//!    ▲                                │   │  ▲ FETCH (lsn named): UNCHANGED ──┘
//!    │                                │   └──┘ (no image shipped)
//!    └── evicted, discarded ──────────┘   └── own COMMIT acknowledged ──▶ cached(lsn from the reply)
//!
//!  right:  none ──FETCH part with cover e (not revoked)──▶ held(e) ──CALLBACK(e' ≥ e)──▶ none
//!            ▲ └──CALLBACK(e) before the FETCH part is taken in: revoked[e]──┘            │
//!            └──────────────────────── (readers named to the server) ─────────────────────┘
//!  held(e) ──an own transaction asks X──▶ held(e), writer T ──T ends──▶ held(e)
//! ```
//!
//! | from | to | by | when |
//! |---|---|---|---|
//! | absent | cached(l) | [`RemoteStore`]'s FETCH, ALLOCATE or READ | the server shipped the image (verified, installed clean) |
//! | cached(l) | cached(l) | FETCH naming `l` | the server answers UNCHANGED: the lock is taken, nothing shipped |
//! | cached(l) | cached(l') | FETCH naming `l` | another client changed the page: the new image is installed and the typed layer drops the objects and index entries it had from the page |
//! | cached(l) | cached(c) | `Backend::commit` | this client's commit is acknowledged with LSN `c` for the page: its after-image is installed — unless the pool already holds a newer image (another thread fetched one after the server released the lock): every install keeps the highest LSN (`install_newest`); a page the commit freed is never installed |
//! | cached | absent | `Backend::commit`, `Backend::rollback` | a commit failed (its outcome may be unknown) or the page was freed, or a rolled-back transaction had allocated it |
//! | cached | absent | the pool's replacement | evicted (never written anywhere: it is clean) |
//! | right none | held(e) | `take_parts` | a FETCH part grants cover `e` and no callback of epoch ≥ `e` came first |
//! | held(e) | none | `answer_callback` | the server calls back `e` (or later): the readers are named in the answer, which is acknowledged before any of them may end |
//! | held(e) | held(e) + writer | `fetch` (X), `try_lock` | an own transaction wants X: others stop using the right until it ends (`end`) |
//! | none | held(e) + writer | `take_parts` | a FETCH in X grants the right with the lock (the server calls back only other clients): its transaction is the writer from the start, or this client's other transactions would read the committed image around its X |
//! | held(e) | none | `allocate`, `free` | an own transaction frees or allocates the page: the right's facts (in use, group) are wrong from its commit on, and the server does not call back the client that did it |
//! | held(e) | none | `give_back_rights`, `evict_cache` | the client holds more than its bound of rights (the oldest unused go, pages out of the pool first), or empties its cache: RELEASE tells the server with the next request |
//!
//! The pool never holds a transaction's uncommitted change (those are the
//! `Txn`'s private pages), so an evicted page needs no write-back.

mod appends;
mod backend;
mod rights;
mod snapshot;
mod trees;

use super::adaptive::AdaptiveStats;
use super::conn::{self, Connect, RemoteDevice, RemoteStats, VolumeFile};
use super::lock;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use cairn_net::message::Architecture;
use cairn_net::page_service::{
    decode_groups, FetchStatus, Fetched, PageRequest, VolumeInfo, FETCH_CACHE, FETCH_PAGES_MAX, FETCH_S,
    FETCH_TRY_INSERT, FETCH_U, FETCH_X, LOCK_MODE_IS, LOCK_MODE_IX, LOCK_MODE_S, LOCK_MODE_SIX, LOCK_MODE_U,
    LOCK_MODE_X, NO_GROUP,
};
use cairn_net::transport::Address;
use cairn_storage::buffer::{BufferPool, Policy};
use cairn_storage::io::{OsVfs, Vfs};
use cairn_storage::lock::{LockMode, LockOwner, Resource};
use cairn_storage::page;
use cairn_storage::txn::{Backend, FillPages};
use cairn_storage::{ClientId, Error, GroupId, Lsn, PageId, Result, Txn, TxnId};

use super::rights::{start_callback_thread, Rights};
use conn::Connection;
use rights::{ClientState, Cover, Facts, TxnView};

/// The page-server client backend: also the storage-level client for tools
/// that work on storage transactions directly (`cairn torture --connect`).
pub struct RemoteStore {
    conn: Arc<Connection>,
    pool: BufferPool,
    page_size: usize,
    region_pages: u32,
    page_count: AtomicU32,
    groups: Mutex<HashMap<GroupId, String>>,
    fill: FillPages,
    /// Its rights to cache pages, and what its transactions hold and know.
    rights: Arc<Rights<ClientState>>,
    next_txn: AtomicU64,
    txn_memory_bytes: usize,
    spill_dir: tempfile_dir::TempDir,
    /// Told of every page whose image the server shipped: the page may have
    /// changed since the typed layer cached objects or index entries from
    /// it.
    on_new_image: Mutex<Option<PageHook>>,
    /// Serializes installs into the pool ([`RemoteStore::install_newest`]).
    installing: Mutex<()>,
    /// Rights to cache held at most: past it the client gives the oldest
    /// unused ones back ([`RemoteStore::give_back_rights`]).
    rights_max: usize,
    /// A file-server client's volume file (see [`RemoteStore::connect_as`]).
    file: Option<Arc<VolumeFile>>,
    /// Set when a file-server commit was logged but its pages could not be
    /// written: the client stops (the server repairs them when the
    /// connection closes).
    broken: Mutex<Option<String>>,
    /// A fault injected by crash tests: called after a file-server commit
    /// is durable in the server's log, before its pages are written.
    before_page_writes: std::sync::OnceLock<fn()>,
}

/// A function told of a page whose committed image may be new to the client.
pub(crate) type PageHook = Arc<dyn Fn(PageId) + Send + Sync>;

fn wire_mode(m: LockMode) -> u8 {
    match m {
        LockMode::IS => LOCK_MODE_IS,
        LockMode::IX => LOCK_MODE_IX,
        LockMode::S => LOCK_MODE_S,
        LockMode::SIX => LOCK_MODE_SIX,
        // A page client locks pages, never objects, so it never appends
        // under A; were it asked to, X covers what A allows.
        LockMode::X | LockMode::A => LOCK_MODE_X,
        LockMode::U => LOCK_MODE_U,
    }
}

/// Whether a FETCH in `mode` takes a lock that lets the page change (X, or
/// X by a granted try-insert): before one, this client's other transactions
/// reading the page under its right are named to the server, and new ones
/// are kept off the right until the writer ends.
fn fetch_writes(mode: u8) -> bool {
    matches!(mode, FETCH_X | FETCH_TRY_INSERT)
}

/// The lock a granted FETCH in `mode` leaves its transaction holding.
fn fetch_lock_mode(mode: u8) -> LockMode {
    match mode {
        FETCH_S => LockMode::S,
        FETCH_U => LockMode::U,
        _ => LockMode::X,
    }
}

impl RemoteStore {
    /// Connects to the server at `address`, as `connect` says (login, TLS), and sizes the
    /// client buffer pool to `buffer_pages` pages; a transaction keeps
    /// `txn_memory_bytes` of private pages in memory, then spills them to a
    /// temporary directory. The client holds at most `rights_max` rights to
    /// cache pages (at least 16): past that it gives the oldest back.
    pub fn connect(
        address: Address,
        connect: &Connect,
        buffer_pages: usize,
        txn_memory_bytes: usize,
        rights_max: usize,
    ) -> Result<Arc<RemoteStore>> {
        RemoteStore::connect_as(
            Architecture::PAGE,
            address,
            connect,
            buffer_pages,
            txn_memory_bytes,
            rights_max,
        )
    }

    /// [`RemoteStore::connect`] as a page-server client
    /// ([`Architecture::PAGE`]) or a file-server client
    /// ([`Architecture::FILE`]; DeWitt et al. §2.4). A file-server client
    /// opens the server's volume file (which must be reachable at the same
    /// path: the same machine, or a shared file system) and reads and
    /// writes pages there itself; the server takes its locks, allocations
    /// and log. Its pool keeps pages across transactions, but each lock
    /// reads the page from the file again (no network: a local read), and
    /// only a page whose LSN changed counts as new, so the typed layer's
    /// caches stay valid across transactions for unchanged pages. At commit
    /// it sends full page images, waits for them to be durable in the
    /// server's log, writes and syncs the pages, then sends WRITTEN and
    /// waits for its answer, which releases the locks.
    pub fn connect_as(
        architecture: Architecture,
        address: Address,
        connect: &Connect,
        buffer_pages: usize,
        txn_memory_bytes: usize,
        rights_max: usize,
    ) -> Result<Arc<RemoteStore>> {
        if architecture != Architecture::PAGE && architecture != Architecture::FILE {
            return Err(Error::InvalidArgument(format!(
                "a page or file client, not architecture {}",
                architecture.0
            )));
        }
        let kind = if architecture == Architecture::FILE {
            "file"
        } else {
            "page"
        };
        let conn = Connection::open(address, architecture, connect, kind)?;
        let info = VolumeInfo::decode(&conn.call_one(&PageRequest::Volume)?)
            .map_err(|e| conn.error(cairn_net::Error::Message(e)))?;
        let page_size = info.page_size as usize;
        if !(page::PAGE_SIZE_MIN..=page::PAGE_SIZE_MAX).contains(&page_size) {
            return Err(conn.protocol("a page size the storage layer supports"));
        }
        let file = if architecture == Architecture::FILE {
            use std::os::unix::ffi::OsStrExt;
            let body = conn.call_one(&PageRequest::VolumeFile)?;
            let path = std::path::PathBuf::from(std::ffi::OsStr::from_bytes(&body));
            Some(Arc::new(VolumeFile::open(path, page_size)?))
        } else {
            None
        };
        let device = Arc::new(RemoteDevice {
            conn: conn.clone(),
            page_size,
            file: file.clone(),
        });
        let store = RemoteStore {
            pool: BufferPool::new(device, buffer_pages.max(16), Policy::Lru),
            conn,
            page_size,
            region_pages: info.region_pages,
            page_count: AtomicU32::new(info.page_count),
            groups: Mutex::new(HashMap::new()),
            fill: FillPages::default(),
            rights: Rights::new(ClientState::default()),
            next_txn: AtomicU64::new(1),
            txn_memory_bytes,
            spill_dir: tempfile_dir::TempDir::new()?,
            on_new_image: Mutex::new(None),
            installing: Mutex::new(()),
            rights_max: rights_max.max(16),
            file,
            broken: Mutex::new(None),
            before_page_writes: std::sync::OnceLock::new(),
        };
        store.refresh_groups()?;
        let store = Arc::new(store);
        let client = store.conn.client.clone();
        start_callback_thread("cairn-callbacks", client, &store, RemoteStore::answer_callback)?;
        Ok(store)
    }

    /// Crash tests only: `fault` runs after each file-server commit is
    /// durable in the server's log and before the client writes its pages
    /// (a test makes the process die there). Set once.
    #[doc(hidden)]
    pub fn inject_before_page_writes(&self, fault: fn()) {
        let _ = self.before_page_writes.set(fault);
    }

    /// The page size of the served database.
    pub fn page_size(&self) -> usize {
        self.page_size
    }

    /// Starts a transaction. Nothing is sent: the server begins it with
    /// the first request that names it, and a transaction that only reads
    /// pages cached under callbacks never reaches the server.
    pub fn begin(self: &Arc<Self>) -> Result<Txn> {
        self.check_usable()?;
        let id = TxnId(self.next_txn.fetch_add(1, Ordering::Relaxed));
        self.rights.lock().txns.insert(id, TxnView::default());
        let backend: Arc<dyn Backend> = self.clone();
        let vfs: Arc<dyn Vfs> = Arc::new(OsVfs);
        Ok(Txn::on_backend(
            backend,
            LockOwner::new(ClientId(0), id),
            self.txn_memory_bytes,
            Some((vfs, self.spill_dir.path())),
        ))
    }

    /// The group named `name`, created if `create` and missing.
    pub fn group(&self, name: &str, create: bool) -> Result<GroupId> {
        let body = self.conn.call_one(&PageRequest::Group {
            create,
            name: name.to_string(),
        })?;
        let id = GroupId(u32::from_le_bytes(
            body[..]
                .try_into()
                .map_err(|_| self.conn.protocol("a GROUP reply of 4 bytes"))?,
        ));
        lock(&self.groups).insert(id, name.to_string());
        Ok(id)
    }

    /// Every group, from the server.
    pub fn refresh_groups(&self) -> Result<Vec<(GroupId, String)>> {
        let body = self.conn.call_one(&PageRequest::Groups)?;
        let groups = decode_groups(&body).map_err(|e| self.conn.error(cairn_net::Error::Message(e)))?;
        let groups: Vec<(GroupId, String)> = groups.into_iter().map(|(i, n)| (GroupId(i), n)).collect();
        let mut known = lock(&self.groups);
        for (i, n) in &groups {
            known.insert(*i, n.clone());
        }
        Ok(groups)
    }

    /// Sets the function told of pages whose image the server shipped.
    pub(crate) fn on_new_image(&self, hook: PageHook) {
        *lock(&self.on_new_image) = Some(hook);
    }

    fn new_image(&self, id: PageId) {
        let hook = lock(&self.on_new_image).clone();
        if let Some(h) = hook {
            h(id);
        }
    }

    /// Empties the client cache (a cold start): the pages and the rights to
    /// cache them (the server's later callbacks are answered "dropped").
    pub fn evict_cache(&self) -> Result<()> {
        let dropped: Vec<(PageId, u64)> = self.rights.lock().covers.drain().map(|(p, c)| (p, c.epoch)).collect();
        self.release_pages(dropped);
        self.evict_lookups();
        self.pool.evict_all()
    }

    /// The server's lock-manager counters, all sessions together (a
    /// LOCK_STATS round trip).
    pub fn server_lock_stats(&self) -> Result<cairn_storage::lock::LockStats> {
        self.conn.server_lock_stats()
    }

    /// The client's counters.
    pub fn stats(&self) -> RemoteStats {
        let c = &self.conn;
        RemoteStats {
            round_trips: c.round_trips.load(Ordering::Relaxed),
            bytes_sent: c.bytes_sent.load(Ordering::Relaxed),
            bytes_received: c.bytes_received.load(Ordering::Relaxed),
            pages_shipped: c.pages_shipped.load(Ordering::Relaxed),
            pages_revalidated: c.pages_revalidated.load(Ordering::Relaxed),
            one_way: c.one_way.load(Ordering::Relaxed),
            cache_hits: c.cache_hits.load(Ordering::Relaxed),
            callbacks: c.callbacks.load(Ordering::Relaxed),
            callbacks_in_use: c.callbacks_in_use.load(Ordering::Relaxed),
            answers_refused: c.answers_refused.load(Ordering::Relaxed),
            rights_given_back: c.rights_given_back.load(Ordering::Relaxed),
            pages_read_direct: c.pages_read_direct.load(Ordering::Relaxed),
            pages_written_direct: c.pages_written_direct.load(Ordering::Relaxed),
            appends_kept: c.appends_kept.load(Ordering::Relaxed),
            appends_applied_here: c.appends_applied_here.load(Ordering::Relaxed),
            objects_shipped: 0,
            adaptive: AdaptiveStats::default(),
        }
    }

    /// The server's address.
    pub fn address(&self) -> &Address {
        &self.conn.address
    }

    /// Caches `image` as page `id` unless the pool holds a newer image (a
    /// higher LSN) already: installs come from several threads (fetches,
    /// allocations, the answers to commits), and a late one must not
    /// replace what a later one brought. Every change to a page on the
    /// server gives it a higher LSN, so the newest image is the one to keep.
    fn install_newest(&self, id: PageId, image: &[u8]) -> Result<()> {
        let _one_at_a_time = lock(&self.installing);
        if let Some(cached) = self.pool.read_cached(id)? {
            if page::lsn(&cached) > page::lsn(image) {
                return Ok(());
            }
        }
        self.pool.install(id, image)
    }

    /// [`FETCH_CACHE`] for a page-server client (it answers callbacks); a
    /// file-server client caches no page under a right.
    fn cache_flag(&self) -> u8 {
        if self.file.is_some() {
            0
        } else {
            FETCH_CACHE
        }
    }

    /// A file-server client took a lock on `id`: reads the page from the
    /// volume file (which the server made current before granting it) and
    /// caches it if its LSN differs from the cached copy's, telling the
    /// typed layer (objects from the older image are stale).
    fn refresh_from_file(&self, id: PageId) -> Result<()> {
        let Some(file) = &self.file else {
            return Ok(());
        };
        let mut image = vec![0u8; self.page_size];
        file.read(id, &mut image)?;
        if self.cached_lsn(id)? == page::lsn(&image).0 {
            self.conn.pages_revalidated.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        self.conn.pages_read_direct.fetch_add(1, Ordering::Relaxed);
        self.install_newest(id, &image)?;
        self.new_image(id);
        Ok(())
    }

    /// A file-server commit's second half: the server has the pages durable
    /// in its log (`lsns`, for the pages of `changed`), so the client writes
    /// them — stamped with their LSNs and sealed, pages freed excepted —
    /// and caches them, syncs the volume file and sends WRITTEN, which
    /// releases the transaction's locks and makes the commit visible to
    /// snapshots; the commit returns once it is answered. If writing fails the commit still stands (the log has it): the client
    /// stops, and the server repairs the pages when the connection closes.
    fn write_pages(
        &self,
        txn: &mut Txn,
        lsns: &[(u32, u64)],
        changed: &std::collections::HashSet<PageId>,
        freed: &std::collections::HashSet<PageId>,
    ) -> Result<()> {
        let Some(file) = &self.file else {
            return Ok(());
        };
        if lsns.is_empty() {
            return Ok(());
        }
        if let Some(fault) = self.before_page_writes.get() {
            fault();
        }
        let written = (|| {
            for &(p, lsn) in lsns {
                if let Some((id, after)) = self.stamped_after(txn, p, lsn, changed, freed)? {
                    file.write(id, &after)?;
                    self.conn.pages_written_direct.fetch_add(1, Ordering::Relaxed);
                    // The commit is durable in the server's log and the
                    // pages stay locked until WRITTEN: cache it now.
                    self.install_newest(id, &after)?;
                }
            }
            file.sync()
        })();
        if let Err(e) = written {
            *lock(&self.broken) = Some(format!(
                "{} is committed but its pages could not be written ({e}); the server repairs them when this client disconnects",
                txn.id()
            ));
            return Err(e);
        }
        // Awaited: until the server has taken it in, the commit is not
        // visible to snapshots (it is in flight for them until its pages
        // are written), so a commit that returned earlier could be missed
        // by a snapshot another client began after it. A lost connection
        // leaves the outcome to the caller unknown (the server repairs the
        // pages when it sees the session closed).
        self.conn.call_one(&PageRequest::Written { txn: txn.id().0 })?;
        Ok(())
    }

    /// The after-image of page `p` a committed transaction `txn` left,
    /// stamped with the LSN the server gave it and sealed: `None` for a
    /// page it freed (or holds no copy of); an error for a page the commit
    /// did not change (the server broke the protocol).
    fn stamped_after(
        &self,
        txn: &mut Txn,
        p: u32,
        lsn: u64,
        changed: &std::collections::HashSet<PageId>,
        freed: &std::collections::HashSet<PageId>,
    ) -> Result<Option<(PageId, Vec<u8>)>> {
        let id = PageId(p);
        if !changed.contains(&id) {
            return Err(self.conn.protocol("LSNs only for the pages the commit changed"));
        }
        if freed.contains(&id) {
            return Ok(None);
        }
        let Some(after) = txn.private_page(id)? else {
            return Ok(None);
        };
        let mut after = after.to_vec();
        page::set_lsn(&mut after, Lsn(lsn));
        page::seal(&mut after);
        Ok(Some((id, after)))
    }

    /// The LSN of the cached copy of `id`, 0 if none.
    fn cached_lsn(&self, id: PageId) -> Result<u64> {
        Ok(self.pool.read_cached(id)?.map_or(0, |g| page::lsn(&g).0))
    }

    /// Marks `txn` as ending (no callback answer names it from now on) and
    /// waits until the answers that did name it are acknowledged, so that
    /// its COMMIT or ABORT cannot overtake them; returns whether the server
    /// knows the transaction.
    fn start_ending(&self, txn: TxnId) -> bool {
        let known = self.rights.end(txn, |st| {
            st.txns
                .get(&txn)
                .is_some_and(|v| v.answering.on_server && !v.ended_on_server)
        });
        known.unwrap_or(false)
    }

    /// Marks `txn` as known to the server (a request is about to name it).
    fn mark_on_server(&self, txn: TxnId) {
        if let Some(v) = self.rights.lock().txns.get_mut(&txn) {
            v.answering.on_server = true;
        }
    }

    /// FETCHes one page for `txn` in `mode` and takes in what the reply
    /// says; returns its status. Before an X fetch of a page this client
    /// caches, its other transactions reading it under the right are named
    /// to the server ([`RemoteStore::name_readers`]), and new ones are kept
    /// off the right until `txn` ends.
    fn fetch(&self, txn: TxnId, id: PageId, mode: u8, group: GroupId) -> Result<FetchStatus> {
        if fetch_writes(mode) {
            self.name_readers(txn, id)?;
        }
        self.mark_on_server(txn);
        let lsn = self.cached_lsn(id)?;
        let named = [(id.0, lsn)];
        let _in_flight = self.rights.fetch();
        let parts = self.conn.call(&PageRequest::Fetch {
            txn: txn.0,
            mode: mode | self.cache_flag(),
            group: if mode == FETCH_TRY_INSERT { group.0 } else { NO_GROUP },
            pages: named.to_vec(),
        })?;
        let statuses = self.take_parts(txn, mode, &named, &parts)?;
        Ok(statuses[0])
    }

    /// Sends one PLACE for an insert of `txn` into `group` of a payload of
    /// `need` bytes, naming `pages` (none of them held X by `txn`) in
    /// order, and takes in the reply as a try-insert FETCH's: the status
    /// of each page the server tried, in order (a prefix of `pages`; it
    /// stops at the first page it locked with room). This client's other
    /// transactions reading any of the pages under its right are named
    /// first, as before a single try-insert FETCH.
    fn place(&self, txn: TxnId, group: GroupId, need: usize, pages: &[PageId]) -> Result<Vec<FetchStatus>> {
        self.name_readers_of(txn, pages)?;
        self.mark_on_server(txn);
        let mut named = Vec::with_capacity(pages.len());
        for p in pages {
            named.push((p.0, self.cached_lsn(*p)?));
        }
        let _in_flight = self.rights.fetch();
        let parts = self.conn.call(&PageRequest::Place {
            txn: txn.0,
            cache: self.cache_flag() != 0,
            group: group.0,
            need: u32::try_from(need).unwrap_or(u32::MAX),
            pages: named.clone(),
        })?;
        if parts.len() < 2 || parts.len() > named.len() + 1 {
            return Err(self.conn.protocol("one PLACE part per page tried, at least one"));
        }
        self.take_parts(txn, FETCH_TRY_INSERT, &named[..parts.len() - 1], &parts)
    }

    /// Locks (shared) and fetches every page of `pages` that `txn` has not
    /// locked yet and does not cache under a callback, [`FETCH_PAGES_MAX`]
    /// per request with every request in flight before the first reply is
    /// read: a scan's pages, or the targets of a traversal's next step,
    /// known in advance, cost one round trip per batch, not one per page.
    /// Fewer than `at_least` pages to fetch: nothing is fetched. True if
    /// `txn` holds S on every page of `pages` now (a page not in use is not
    /// locked).
    fn fetch_shared(&self, txn: TxnId, pages: &[PageId], at_least: usize) -> Result<bool> {
        self.fetch_many(txn, pages, FETCH_S, at_least)
    }

    /// [`RemoteStore::fetch_shared`] in `mode` (FETCH_S, FETCH_U or
    /// FETCH_X; for X, this client's other transactions reading a page
    /// under its right are named first, as a single X fetch does). Only S
    /// is taken through a right to cache: U and X are the server's to
    /// grant. Under U and X the requests go one after another, each sent
    /// once the last is answered, so the server takes the locks in the
    /// order of `pages` — the one order that keeps two such transactions
    /// from deadlocking — also past [`FETCH_PAGES_MAX`] pages (two
    /// requests of one transaction in flight at once may be served in
    /// either order). Under S they all go out at once: a shared lock is
    /// never taken in a promised order.
    fn fetch_many(&self, txn: TxnId, pages: &[PageId], mode: u8, at_least: usize) -> Result<bool> {
        let want = fetch_lock_mode(mode);
        let covered = mode == FETCH_S;
        let mut todo = Vec::new();
        for &p in pages {
            let held = self.holds(txn, Resource::Page(p), want) || (covered && self.use_cover(txn, p));
            if !held {
                todo.push(p);
            }
        }
        if todo.is_empty() {
            return Ok(true);
        }
        if todo.len() < at_least {
            return Ok(false);
        }
        if fetch_writes(mode) {
            for &p in &todo {
                self.name_readers(txn, p)?;
            }
        }
        self.mark_on_server(txn);
        let _in_flight = self.rights.fetch();
        let mut calls = Vec::new();
        let mut all_locked = true;
        for chunk in todo.chunks(FETCH_PAGES_MAX) {
            let mut named = Vec::with_capacity(chunk.len());
            for p in chunk {
                named.push((p.0, self.cached_lsn(*p)?));
            }
            let call = self.send_fetch(txn, mode | self.cache_flag(), &named)?;
            calls.push((call, named));
            if mode != FETCH_S {
                all_locked &= self.take_replies(txn, mode, &mut calls)?;
            }
        }
        all_locked &= self.take_replies(txn, mode, &mut calls)?;
        Ok(all_locked)
    }

    /// Takes in the replies of the FETCHes `calls` (sent in `mode`), in
    /// order, and empties it: true if every page came locked.
    fn take_replies(
        &self,
        txn: TxnId,
        mode: u8,
        calls: &mut Vec<(cairn_net::rpc::Call, Vec<(u32, u64)>)>,
    ) -> Result<bool> {
        let mut all_locked = true;
        for (call, named) in calls.drain(..) {
            let parts = self.fetch_reply(txn, call)?;
            let statuses = self.take_parts(txn, mode, &named, &parts)?;
            all_locked &= statuses.iter().all(|s| s.is_locked());
        }
        Ok(all_locked)
    }

    /// Sends a FETCH of `named` (page, LSN of the cached copy) for `txn` in
    /// `mode` without waiting for its reply ([`RemoteStore::fetch_reply`]
    /// takes it): several go out before the first reply is read.
    fn send_fetch(&self, txn: TxnId, mode: u8, named: &[(u32, u64)]) -> Result<cairn_net::rpc::Call> {
        let (kind, body) = PageRequest::Fetch {
            txn: txn.0,
            mode,
            group: NO_GROUP,
            pages: named.to_vec(),
        }
        .encode();
        self.conn.round_trips.fetch_add(1, Ordering::Relaxed);
        self.conn.bytes_sent.fetch_add(body.len() as u64, Ordering::Relaxed);
        self.conn
            .client
            .invoke(kind, body)
            .map_err(|e| self.conn.error_for(e, txn))
    }

    /// The parts of a FETCH [`RemoteStore::send_fetch`] sent, counted.
    fn fetch_reply(&self, txn: TxnId, call: cairn_net::rpc::Call) -> Result<Vec<Bytes>> {
        let parts = call.collect().map_err(|e| self.conn.error_for(e, txn))?;
        let n: usize = parts.iter().map(|p| p.len()).sum();
        self.conn.bytes_received.fetch_add(n as u64, Ordering::Relaxed);
        Ok(parts)
    }

    /// Takes in the parts of a FETCH for `txn` in `mode` that named `named`
    /// (page, LSN of the cached copy): verifies and caches the images,
    /// records what the transaction now knows and holds and the rights to
    /// cache the server granted; returns each page's status in order.
    fn take_parts(&self, txn: TxnId, mode: u8, named: &[(u32, u64)], parts: &[Bytes]) -> Result<Vec<FetchStatus>> {
        // One part per page, then the empty final reply.
        if parts.len() != named.len() + 1 {
            return Err(self.conn.protocol("one FETCH part per page"));
        }
        if !parts[named.len()].is_empty() {
            return Err(self.conn.protocol("an empty final FETCH reply"));
        }
        let mut statuses = Vec::with_capacity(named.len());
        for (part, &(page, lsn)) in parts.iter().zip(named) {
            let id = PageId(page);
            let f = Fetched::decode(part).map_err(|e| self.conn.error(cairn_net::Error::Message(e)))?;
            if f.page != page {
                return Err(self.conn.protocol("the pages asked for, in order"));
            }
            self.page_count.fetch_max(f.page_count, Ordering::Relaxed);
            match f.status {
                FetchStatus::Image => {
                    page::verify(f.image, id)?;
                    self.install_newest(id, f.image)?;
                    self.conn.pages_shipped.fetch_add(1, Ordering::Relaxed);
                    // Objects decoded from an older image (kept in the typed
                    // layer's caches after the page left the pool, or before
                    // another client changed it) are stale now.
                    self.new_image(id);
                }
                FetchStatus::Unchanged => {
                    if lsn == 0 || f.lsn != lsn {
                        return Err(self.conn.protocol("\"unchanged\" only for the LSN the client named"));
                    }
                    self.conn.pages_revalidated.fetch_add(1, Ordering::Relaxed);
                }
                FetchStatus::Locked => {
                    if self.file.is_none() || f.cover != 0 {
                        return Err(self.conn.protocol("a page image for a page-server client"));
                    }
                    self.refresh_from_file(id)?;
                }
                FetchStatus::NotInUse | FetchStatus::NotGranted => {
                    if f.cover != 0 {
                        return Err(self.conn.protocol("a right to cache only with a locked page"));
                    }
                }
            }
            statuses.push(f.status);
            let group = (f.group != NO_GROUP).then_some(GroupId(f.group));
            let mut st = self.rights.lock();
            let st = &mut *st;
            let view = st.txns.entry(txn).or_default();
            let in_use = match f.status {
                FetchStatus::NotInUse => false,
                FetchStatus::NotGranted => {
                    // Nothing was locked; only the group is known.
                    if let Some(g) = group {
                        view.facts.entry(id).or_insert(Facts {
                            in_use: true,
                            group: Some(g),
                        });
                    }
                    continue;
                }
                _ => true,
            };
            let facts = Facts { in_use, group };
            view.facts.insert(id, facts);
            if in_use {
                let m = fetch_lock_mode(mode);
                let held = view.locks.entry(Resource::Page(id)).or_insert(m);
                *held = held.sup(m);
            }
            if st.take_right(id, f.cover) {
                st.covers.insert(id, Cover { epoch: f.cover, facts });
            }
            // A page locked X comes with the right to cache it too (the
            // server calls back only other clients): until this writer
            // ends, this client's other transactions must not read the
            // committed image under that right, or they would read around
            // its X and see its commit only on the pages they read later.
            if in_use && fetch_writes(mode) {
                st.add_writer(id, txn);
            }
        }
        self.give_back_rights();
        Ok(statuses)
    }

    /// What `txn` knows of page `id`, fetching it (shared) if nothing: a
    /// page about to be read, so the lock is taken anyway. An error (a
    /// deadlock, a lost connection) is the caller's, never a guess.
    fn facts(&self, txn: TxnId, id: PageId) -> Result<Facts> {
        let (known, snapshot) = {
            let st = self.rights.lock();
            let view = st.txns.get(&txn);
            (
                view.and_then(|v| v.facts.get(&id).copied()),
                view.is_some_and(|v| v.snapshot.is_some()),
            )
        };
        if let Some(f) = known {
            return Ok(f);
        }
        if snapshot {
            // Known from the snapshot's own read of the page: no lock.
            return self.snapshot_facts(txn, id);
        }
        if !self.use_cover(txn, id) {
            self.fetch(txn, id, FETCH_S, GroupId(0))?;
        }
        self.rights
            .lock()
            .txns
            .get(&txn)
            .and_then(|v| v.facts.get(&id).copied())
            .ok_or_else(|| Error::Internal(format!("a FETCH of page {id} left nothing known of it")))
    }

    fn holds(&self, txn: TxnId, res: Resource, mode: LockMode) -> bool {
        self.rights
            .lock()
            .txns
            .get(&txn)
            .and_then(|v| v.locks.get(&res))
            .is_some_and(|m| m.covers(mode))
    }
}

/// A private temporary directory for spilled private pages, removed when
/// the connection goes.
mod tempfile_dir {
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicU64, Ordering};

    use cairn_storage::Result;

    static NEXT: AtomicU64 = AtomicU64::new(0);

    /// A directory under the system's temporary directory.
    pub struct TempDir(PathBuf);

    impl TempDir {
        /// A fresh name for one. Nothing is created until a transaction
        /// spills (the spill code creates what it writes in), so a client
        /// that never spills leaves nothing behind, even if it is never
        /// dropped (a process that exits with its store still shared).
        pub fn new() -> Result<TempDir> {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            Ok(TempDir(
                std::env::temp_dir().join(format!("cairn-client-{}-{n}", std::process::id())),
            ))
        }

        /// Its path.
        pub fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}
