//! Transactions: the embedded database engine ([`Db`]) and its transactions
//! ([`Txn`]).
//!
//! **Isolation** is strict two-phase locking on pages (S to read, X to
//! change), with IX/S locks on a group for allocation against scans (no
//! phantoms); locks are held until commit or abort. Lock holders are
//! (client, transaction) pairs, never threads.
//!
//! **No-steal, redo-only.** A transaction changes private copies of pages
//! (spilled to a temporary file past `txn_memory_bytes`); the shared buffer
//! pool never holds uncommitted data, so nothing uncommitted can reach the
//! volume and abort is "drop the copies". At commit the transaction appends
//! one PAGE redo record per changed page (a full image on the page's first
//! change since the current checkpoint began, else the changed bytes) and a
//! COMMIT record, waits for the log to be durable (group commit shares the
//! fsync), installs its pages in the buffer pool with their new LSNs, frees
//! the pages it emptied, and releases its locks.
//!
//! **Space allocation is a system action**: it changes the space map, extent
//! lists and the page's format at once, logged under transaction id 0 with an
//! ALLOC marker naming the transaction. An aborting transaction frees what it
//! allocated; recovery frees what uncommitted transactions allocated and what
//! committed ones freed without a FREE record yet.
//!
//! # Transaction states
//!
//! ```text
//!  begin ──▶ Active ──commit()──▶ Committing ──▶ Done
//!               │  └─abort()/drop──────────────▶ Done
//!               └─ error from the log ──▶ (the Db is poisoned; Done)
//! ```
//!
//! | from | to | by | when |
//! |---|---|---|---|
//! | — | Active | `Db::begin` | a new id is handed out |
//! | Active | Done | `Txn::commit` | the commit is durable and installed |
//! | Active | Done | `Txn::abort`, `Drop` | private pages dropped, allocations freed |
//! | Active | Done (poisoned) | `Txn::commit` | the log failed; the database must be reopened |
//!
//! **Checkpoints** are fuzzy: [`Db::checkpoint`] picks a redo LSN (the end of
//! the log, under the commit gate so no change is logged but not yet
//! installed), flushes every dirty page, logs a CHECKPOINT record, and removes
//! log segments before the redo LSN. Recovery ([`crate::recovery`]) replays
//! from the last checkpoint's redo LSN.

pub mod redo;
mod spill;

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::access::PageAccess;
use crate::buffer::{BufferPool, BufferStats};
use crate::error::{Error, Result};
use crate::ids::{ClientId, GroupId, Lsn, Oid, PageId, TxnId};
use crate::io::Vfs;
use crate::lock::{LockManager, LockMode, LockOptions, LockOwner, LockStats, Resource};
use crate::page::{self, PageType};
use crate::record::object::{self, GroupScan, ObjectSpace, ObjectStats};
use crate::volume::{GroupInfo, LogSink, Volume, VolumeOptions};
use crate::wal::{Wal, WalOptions, WalStats};

use self::redo::Redo;
use self::spill::PrivatePages;

/// How to open a database.
#[derive(Clone, Debug)]
pub struct DbOptions {
    /// Volume options (page size etc. for a new database; buffer frames, vfs).
    pub volume: VolumeOptions,
    /// Log segment size.
    pub wal_segment_bytes: u64,
    /// How long a lock wait may last.
    pub lock_timeout: Duration,
    /// Private page bytes a transaction keeps in memory before spilling.
    pub txn_memory_bytes: usize,
    /// A checkpoint is taken when this many log bytes follow the last one.
    pub checkpoint_log_bytes: u64,
    /// Run the background checkpointer thread.
    pub background: bool,
}

impl Default for DbOptions {
    fn default() -> Self {
        DbOptions {
            volume: VolumeOptions::default(),
            wal_segment_bytes: crate::wal::SEGMENT_BYTES_DEFAULT,
            lock_timeout: Duration::from_secs(10),
            txn_memory_bytes: 64 << 20,
            checkpoint_log_bytes: 64 << 20,
            background: true,
        }
    }
}

/// Counters of the engine.
#[derive(Clone, Debug, Default)]
pub struct DbStats {
    /// Transactions committed (with changes).
    pub commits: u64,
    /// Read-only transactions ended.
    pub read_only: u64,
    /// Transactions aborted.
    pub aborts: u64,
    /// Checkpoints taken.
    pub checkpoints: u64,
    /// Private pages spilled to temporary files.
    pub pages_spilled: u64,
    /// The log.
    pub wal: WalStats,
    /// The buffer pool.
    pub buffer: BufferStats,
    /// The lock manager.
    pub locks: LockStats,
}

#[derive(Default)]
struct Counters {
    commits: AtomicU64,
    read_only: AtomicU64,
    aborts: AtomicU64,
    checkpoints: AtomicU64,
    pages_spilled: AtomicU64,
}

/// State shared by the engine and its transactions.
pub(crate) struct Shared {
    dir: PathBuf,
    vfs: Arc<dyn Vfs>,
    page_size: usize,
    region_pages: u32,
    vol: Mutex<Volume>,
    pool: Arc<BufferPool>,
    wal: Arc<Wal>,
    sink: LogSink,
    locks: LockManager,
    next_txn: Arc<AtomicU64>,
    fill: Mutex<HashMap<GroupId, PageId>>,
    /// Pages allocated by transactions still running: others must not put
    /// objects on them (an abort would free them).
    pending_alloc: Mutex<HashMap<PageId, TxnId>>,
    ckpt: Mutex<Lsn>,
    poisoned: Mutex<Option<String>>,
    /// Set with `poisoned`, so the hot path checks an atomic, not a mutex.
    is_poisoned: std::sync::atomic::AtomicBool,
    opts: DbOptions,
    counters: Counters,
    stop: (Mutex<bool>, Condvar),
    txn_memory_pages: usize,
    recovered: crate::recovery::Recovered,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    fn check_poisoned(&self) -> Result<()> {
        if !self.is_poisoned.load(Ordering::Acquire) {
            return Ok(());
        }
        match &*lock(&self.poisoned) {
            Some(why) => Err(Error::Poisoned(why.clone())),
            None => Ok(()),
        }
    }

    fn poison(&self, why: String) {
        let mut p = lock(&self.poisoned);
        if p.is_none() {
            *p = Some(why);
        }
        self.is_poisoned.store(true, Ordering::Release);
    }

    fn checkpoint(&self) -> Result<()> {
        self.check_poisoned()?;
        let mut last = lock(&self.ckpt);
        // Under the gate no commit is between logging and installing its
        // pages, and none has logged its COMMIT without dropping its pending
        // allocations, so the redo LSN and the pending list agree.
        let (redo_lsn, pending) = {
            let _gate = self.sink.gate.write().unwrap_or_else(|e| e.into_inner());
            let end = self.wal.end_lsn();
            self.sink.redo_lsn.store(end.0, Ordering::SeqCst);
            let pending: Vec<(TxnId, PageId)> = lock(&self.pending_alloc).iter().map(|(p, t)| (*t, *p)).collect();
            (end, pending)
        };
        let result = (|| {
            self.pool.flush_all()?;
            let rec = Redo::Checkpoint {
                redo_lsn,
                next_txn: self.next_txn.load(Ordering::SeqCst),
                pending,
            };
            let lsn = self.wal.append(&[&rec.encode()])?[0];
            self.wal.flush(lsn)?;
            self.wal.remove_before(redo_lsn)?;
            Ok(lsn)
        })();
        match result {
            Ok(lsn) => {
                *last = lsn;
                self.counters.checkpoints.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Err(e) => {
                self.poison(format!("checkpoint failed: {e}"));
                Err(e)
            }
        }
    }
}

/// An open embedded database: the volume, its log, locks and buffer pool,
/// shared by any number of threads, each running its own [`Txn`]s.
pub struct Db {
    shared: Arc<Shared>,
    background: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Db").field("dir", &self.shared.dir).finish()
    }
}

impl Db {
    /// Creates a new, empty database in `dir` and opens it.
    pub fn create(dir: &Path, opts: &DbOptions) -> Result<Db> {
        Volume::create(dir, &opts.volume)?.close()?;
        Db::open(dir, opts)
    }

    /// Opens the database in `dir`, creating it if there is none.
    pub fn open_or_create(dir: &Path, opts: &DbOptions) -> Result<Db> {
        if opts
            .volume
            .vfs
            .exists(&dir.join(crate::volume::manifest::MANIFEST_FILE))
        {
            Db::open(dir, opts)
        } else {
            Db::create(dir, opts)
        }
    }

    /// Opens the database in `dir`, recovering it from its log first.
    pub fn open(dir: &Path, opts: &DbOptions) -> Result<Db> {
        let wal_opts = WalOptions {
            segment_bytes: opts.wal_segment_bytes,
            vfs: opts.volume.vfs.clone(),
        };
        // The manifest first: a directory that is not a database should say
        // so, not grow a log.
        crate::volume::manifest::Manifest::read(opts.volume.vfs.as_ref(), dir)?;
        let (wal, _report) = Wal::open(dir, wal_opts)?;
        let wal = Arc::new(wal);
        let recovered = crate::recovery::redo(dir, &opts.volume, &wal)?;
        let mut vol = Volume::open(dir, &opts.volume)?;
        let next_txn = Arc::new(AtomicU64::new(recovered.next_txn.max(1)));
        let sink = LogSink {
            wal: wal.clone(),
            redo_lsn: Arc::new(AtomicU64::new(recovered.redo_lsn.0)),
            gate: Arc::new(RwLock::new(())),
            next_id: next_txn.clone(),
        };
        vol.attach_log(sink.clone());
        let pool = vol.pool_arc();
        let hook_wal = wal.clone();
        pool.set_before_write(Box::new(move |_id, lsn| hook_wal.flush(lsn)));
        // Give back what uncommitted transactions allocated and what committed
        // ones freed without a FREE record.
        for p in &recovered.to_free {
            if vol.is_page_in_use(*p) {
                vol.free_logged(*p)?;
            }
        }
        let page_size = vol.page_size();
        let region_pages = vol.header().region_pages;
        let shared = Arc::new(Shared {
            dir: dir.to_path_buf(),
            vfs: opts.volume.vfs.clone(),
            page_size,
            region_pages,
            vol: Mutex::new(vol),
            pool,
            wal,
            sink,
            locks: LockManager::new(LockOptions {
                timeout: opts.lock_timeout,
            }),
            next_txn,
            fill: Mutex::new(HashMap::new()),
            pending_alloc: Mutex::new(HashMap::new()),
            ckpt: Mutex::new(Lsn(0)),
            poisoned: Mutex::new(None),
            is_poisoned: std::sync::atomic::AtomicBool::new(false),
            opts: opts.clone(),
            counters: Counters::default(),
            stop: (Mutex::new(false), Condvar::new()),
            txn_memory_pages: (opts.txn_memory_bytes / page_size).max(4),
            recovered,
        });
        spill::remove_leftovers(&shared.vfs, dir);
        // A checkpoint now makes the next recovery short and trims the log.
        shared.checkpoint()?;
        let background = opts.background.then(|| {
            let s = shared.clone();
            std::thread::Builder::new()
                .name("cairn-checkpointer".into())
                .spawn(move || background_loop(&s))
                .expect("spawn the checkpointer thread")
        });
        Ok(Db { shared, background })
    }

    /// Starts a transaction for the embedded client (client 0).
    pub fn begin(&self) -> Result<Txn> {
        self.begin_for(ClientId(0))
    }

    /// Starts a transaction on behalf of `client`.
    pub fn begin_for(&self, client: ClientId) -> Result<Txn> {
        self.shared.check_poisoned()?;
        let id = TxnId(self.shared.next_txn.fetch_add(1, Ordering::SeqCst));
        let mut pages = PrivatePages::new(self.shared.txn_memory_pages, self.shared.page_size);
        pages.spill_to(self.shared.vfs.clone(), &self.shared.dir);
        Ok(Txn {
            db: self.shared.clone(),
            id,
            owner: LockOwner::new(client, id),
            held: crate::fxhash::FxHashMap::default(),
            pages,
            scratch: vec![0u8; self.shared.page_size],
            allocated: Vec::new(),
            to_free: BTreeSet::new(),
            stats: ObjectStats::default(),
            active: true,
        })
    }

    /// Creates a group (a system action, made durable before returning).
    pub fn create_group(&self, name: &str) -> Result<GroupId> {
        self.shared.check_poisoned()?;
        let g = lock(&self.shared.vol).create_group(name)?;
        self.shared.wal.flush(self.shared.wal.end_lsn())?;
        Ok(g)
    }

    /// Looks a group up by name.
    pub fn group(&self, name: &str) -> Result<GroupId> {
        lock(&self.shared.vol)
            .group_id(name)
            .ok_or_else(|| Error::GroupNotFound(name.to_string()))
    }

    /// Every group with its space.
    pub fn groups(&self) -> Vec<GroupInfo> {
        lock(&self.shared.vol).groups()
    }

    /// Pages in the volume and pages not in use.
    pub fn page_counts(&self) -> (u32, u64) {
        let v = lock(&self.shared.vol);
        (v.page_count(), v.free_pages())
    }

    /// The volume header.
    pub fn header(&self) -> crate::volume::header::VolumeHeader {
        *lock(&self.shared.vol).header()
    }

    /// What recovery did when this database was opened.
    pub fn recovery(&self) -> &crate::recovery::Recovered {
        &self.shared.recovered
    }

    /// Takes a checkpoint now.
    pub fn checkpoint(&self) -> Result<()> {
        self.shared.checkpoint()
    }

    /// The engine's counters.
    pub fn stats(&self) -> DbStats {
        let c = &self.shared.counters;
        DbStats {
            commits: c.commits.load(Ordering::Relaxed),
            read_only: c.read_only.load(Ordering::Relaxed),
            aborts: c.aborts.load(Ordering::Relaxed),
            checkpoints: c.checkpoints.load(Ordering::Relaxed),
            pages_spilled: c.pages_spilled.load(Ordering::Relaxed),
            wal: self.shared.wal.stats(),
            buffer: self.shared.pool.stats(),
            locks: self.shared.locks.stats(),
        }
    }

    /// Drops every clean page from the buffer pool (after writing dirty ones):
    /// a cold cache for benchmarks and tests.
    pub fn evict_cache(&self) -> Result<()> {
        self.shared.pool.evict_all()
    }

    /// The database directory.
    pub fn dir(&self) -> &Path {
        &self.shared.dir
    }

    /// Stops the background thread, takes a final checkpoint and closes.
    pub fn close(mut self) -> Result<()> {
        self.stop_background();
        self.shared.checkpoint()
    }

    fn stop_background(&mut self) {
        *lock(&self.shared.stop.0) = true;
        self.shared.stop.1.notify_all();
        if let Some(h) = self.background.take() {
            let _ = h.join();
        }
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        self.stop_background();
    }
}

fn background_loop(s: &Shared) {
    let mut last_end = s.wal.end_lsn();
    loop {
        {
            let stop = lock(&s.stop.0);
            let (stop, _) = s
                .stop
                .1
                .wait_timeout(stop, Duration::from_millis(200))
                .unwrap_or_else(|e| e.into_inner());
            if *stop {
                return;
            }
        }
        if lock(&s.poisoned).is_some() {
            return;
        }
        let end = s.wal.end_lsn();
        if end.0.saturating_sub(last_end.0) >= s.opts.checkpoint_log_bytes {
            // An error poisons the database; the next caller sees it.
            let _ = s.checkpoint();
            last_end = end;
        }
    }
}

/// A transaction. Dropping an active transaction aborts it.
pub struct Txn {
    db: Arc<Shared>,
    id: TxnId,
    owner: LockOwner,
    /// Locks known to be held, to skip the lock manager on repeats.
    held: crate::fxhash::FxHashMap<Resource, LockMode>,
    pages: PrivatePages,
    scratch: Vec<u8>,
    allocated: Vec<PageId>,
    to_free: BTreeSet<PageId>,
    stats: ObjectStats,
    active: bool,
}

impl std::fmt::Debug for Txn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Txn")
            .field("id", &self.id)
            .field("active", &self.active)
            .finish()
    }
}

impl Txn {
    /// The transaction's id.
    pub fn id(&self) -> TxnId {
        self.id
    }

    /// Object-layer counters of this transaction.
    pub fn object_stats(&self) -> ObjectStats {
        self.stats
    }

    fn check_active(&self) -> Result<()> {
        if !self.active {
            return Err(Error::TxnNotActive(self.id));
        }
        self.db.check_poisoned()
    }

    fn lock(&mut self, res: Resource, mode: LockMode) -> Result<()> {
        if self.held.get(&res).is_some_and(|m| m.covers(mode)) {
            return Ok(());
        }
        self.db.locks.lock(self.owner, res, mode)?;
        let m = self.held.entry(res).or_insert(mode);
        *m = m.sup(mode);
        Ok(())
    }

    /// Locks a page, shared or exclusive, until the transaction ends. The
    /// typed layer locks an object's home page this way before using a
    /// cached copy (shared) and before changing the object (exclusive).
    pub fn lock_page(&mut self, page: PageId, exclusive: bool) -> Result<()> {
        self.check_active()?;
        self.lock(Resource::Page(page), if exclusive { LockMode::X } else { LockMode::S })
    }

    /// Creates an object in `group`.
    pub fn create(&mut self, group: GroupId, data: &[u8]) -> Result<Oid> {
        self.check_active()?;
        object::create(self, group, data)
    }

    /// Creates an object near `near` (same page if it fits, else within the
    /// clustering region), in `near`'s group.
    pub fn create_near(&mut self, near: Oid, data: &[u8]) -> Result<Oid> {
        self.check_active()?;
        object::create_near(self, near, data)
    }

    /// Reads a whole object.
    pub fn read(&mut self, oid: Oid) -> Result<Vec<u8>> {
        self.check_active()?;
        object::read(self, oid)
    }

    /// Calls `f` with the OID and bytes of every small object stored whole
    /// in its home slot on `page` (see [`object::page_objects`]), under the
    /// page's shared lock.
    pub fn page_objects(&mut self, page: PageId, f: impl FnMut(Oid, &[u8])) -> Result<()> {
        self.check_active()?;
        object::page_objects(self, page, f)
    }

    /// True if this transaction holds a private (changed) copy of `page`:
    /// what it reads there is not committed state.
    pub fn has_private_copy(&self, page: PageId) -> bool {
        self.pages.contains(page)
    }

    /// Calls `f` with an object's bytes, in place in its page when it can
    /// (see [`object::read_with`]); `f` must not block.
    pub fn read_with<R>(&mut self, oid: Oid, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
        self.check_active()?;
        object::read_with(self, oid, f)
    }

    /// Reads part of an object.
    pub fn read_range(&mut self, oid: Oid, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.check_active()?;
        object::read_range(self, oid, offset, buf)
    }

    /// The object's length in bytes.
    pub fn len(&mut self, oid: Oid) -> Result<u64> {
        self.check_active()?;
        object::len(self, oid)
    }

    /// True if `oid` names a live object.
    pub fn exists(&mut self, oid: Oid) -> Result<bool> {
        self.check_active()?;
        object::exists(self, oid)
    }

    /// True if the object is stored as a large object.
    pub fn is_large(&mut self, oid: Oid) -> Result<bool> {
        self.check_active()?;
        object::is_large(self, oid)
    }

    /// Replaces an object's bytes.
    pub fn update(&mut self, oid: Oid, data: &[u8]) -> Result<()> {
        self.check_active()?;
        object::update(self, oid, data)
    }

    /// Writes part of an object (extending it if the range runs past its end).
    pub fn write_range(&mut self, oid: Oid, offset: u64, data: &[u8]) -> Result<()> {
        self.check_active()?;
        object::write_range(self, oid, offset, data)
    }

    /// Appends to an object.
    pub fn append(&mut self, oid: Oid, data: &[u8]) -> Result<()> {
        self.check_active()?;
        object::append(self, oid, data)
    }

    /// Cuts an object to `len` bytes.
    pub fn truncate(&mut self, oid: Oid, len: u64) -> Result<()> {
        self.check_active()?;
        object::truncate(self, oid, len)
    }

    /// Deletes an object.
    pub fn delete(&mut self, oid: Oid) -> Result<()> {
        self.check_active()?;
        object::delete(self, oid)
    }

    /// Starts a scan of a group's objects in physical order. The group is
    /// locked (S) against allocation of new pages, so a scan sees no phantoms.
    pub fn scan(&mut self, group: GroupId) -> Result<GroupScan> {
        self.check_active()?;
        self.lock(Resource::Group(group), LockMode::S)?;
        object::scan(self, group)
    }

    /// Every object of a group, in physical order.
    pub fn scan_all(&mut self, group: GroupId) -> Result<Vec<Oid>> {
        self.check_active()?;
        self.lock(Resource::Group(group), LockMode::S)?;
        object::scan_all(self, group)
    }

    /// Commits: the transaction's changes are durable when this returns Ok.
    pub fn commit(mut self) -> Result<()> {
        self.check_active()?;
        let result = self.commit_inner();
        if result.is_err() && self.active {
            self.rollback();
        }
        result
    }

    fn commit_inner(&mut self) -> Result<()> {
        let db = self.db.clone();
        if self.pages.is_empty() && self.to_free.is_empty() && self.allocated.is_empty() {
            self.finish();
            db.counters.read_only.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        let ids = self.pages.ids();
        {
            let _gate = db.sink.gate.read().unwrap_or_else(|e| e.into_inner());
            // 1. Redo records, appended in chunks (a transaction larger than
            //    memory never holds all of them at once), then the commit.
            let mut lsns: Vec<(PageId, Lsn)> = Vec::with_capacity(ids.len());
            let mut batch: Vec<Vec<u8>> = Vec::new();
            let mut batch_ids: Vec<PageId> = Vec::new();
            let mut batch_bytes = 0usize;
            let mut commit_lsn = Lsn(0);
            let frees: Vec<PageId> = self.to_free.iter().copied().collect();
            for (i, &id) in ids.iter().enumerate() {
                let rec = {
                    let after = self
                        .pages
                        .get(id)?
                        .ok_or_else(|| Error::corrupt(id, "private page vanished"))?;
                    let base = db.pool.read(id)?;
                    let full = db.sink.needs_full_image(page::lsn(&base));
                    redo::page_record(self.id, id, (!full).then_some(&base[..]), after)
                };
                batch_bytes += rec.len();
                batch.push(rec);
                batch_ids.push(id);
                let last = i + 1 == ids.len();
                if batch_bytes >= (4 << 20) || last {
                    if last {
                        batch.push(
                            Redo::Commit {
                                txn: self.id,
                                frees: frees.clone(),
                            }
                            .encode(),
                        );
                    }
                    let refs: Vec<&[u8]> = batch.iter().map(|r| &r[..]).collect();
                    let got = db
                        .wal
                        .append(&refs)
                        .inspect_err(|e| db.poison(format!("log append failed: {e}")))?;
                    lsns.extend(batch_ids.iter().copied().zip(got.iter().copied()));
                    commit_lsn = *got.last().expect("a batch is never empty");
                    if last {
                        self.drop_pending_allocations();
                    }
                    batch.clear();
                    batch_ids.clear();
                    batch_bytes = 0;
                }
            }
            if ids.is_empty() {
                let rec = Redo::Commit {
                    txn: self.id,
                    frees: frees.clone(),
                }
                .encode();
                commit_lsn = db
                    .wal
                    .append(&[&rec])
                    .inspect_err(|e| db.poison(format!("log append failed: {e}")))?[0];
                self.drop_pending_allocations();
            }
            // 2. Durable (group commit).
            db.wal
                .flush(commit_lsn)
                .inspect_err(|e| db.poison(format!("log flush failed: {e}")))?;
            // 3. Install the pages with their LSNs.
            for (id, lsn) in lsns {
                let after = self
                    .pages
                    .get(id)?
                    .ok_or_else(|| Error::corrupt(id, "private page vanished"))?;
                let mut g = db
                    .pool
                    .write(id)
                    .inspect_err(|e| db.poison(format!("installing a commit failed: {e}")))?;
                g.copy_from_slice(after);
                page::set_lsn(&mut g, lsn);
            }
        }
        // 4. Deferred frees (system actions), after the commit record.
        if !self.to_free.is_empty() {
            let mut vol = lock(&db.vol);
            for p in std::mem::take(&mut self.to_free) {
                vol.free_logged(p)
                    .inspect_err(|e| db.poison(format!("freeing page {p} failed: {e}")))?;
            }
        }
        self.finish();
        db.counters.commits.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Aborts: nothing the transaction did remains.
    pub fn abort(mut self) -> Result<()> {
        if !self.active {
            return Err(Error::TxnNotActive(self.id));
        }
        self.rollback();
        Ok(())
    }

    fn rollback(&mut self) {
        let db = self.db.clone();
        self.pages.clear();
        if !self.allocated.is_empty() {
            let mut vol = lock(&db.vol);
            for &p in &self.allocated {
                if vol.is_page_in_use(p) {
                    if let Err(e) = vol.free_logged(p) {
                        db.poison(format!("giving back page {p} at abort failed: {e}"));
                        break;
                    }
                }
            }
        }
        self.finish();
        db.counters.aborts.fetch_add(1, Ordering::Relaxed);
    }

    /// Forgets this transaction's entries in the pending allocations (only
    /// its own: a page it freed may already be another's). Called under the
    /// commit gate right after the COMMIT record is appended, and at the end.
    fn drop_pending_allocations(&self) {
        let mut pending = lock(&self.db.pending_alloc);
        for p in &self.allocated {
            if pending.get(p) == Some(&self.id) {
                pending.remove(p);
            }
        }
    }

    fn finish(&mut self) {
        self.drop_pending_allocations();
        let mut fill = lock(&self.db.fill);
        for p in self.allocated.iter().chain(self.to_free.iter()) {
            fill.retain(|_, f| f != p);
        }
        drop(fill);
        self.allocated.clear();
        self.to_free.clear();
        self.pages.clear();
        self.db.locks.release_all(self.owner);
        self.held.clear();
        self.active = false;
    }
}

impl Drop for Txn {
    fn drop(&mut self) {
        if self.active {
            self.rollback();
        }
    }
}

impl PageAccess for Txn {
    fn page_size(&self) -> usize {
        self.db.page_size
    }

    fn read<R>(&mut self, id: PageId, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
        if let Some(p) = self.pages.get(id)? {
            return Ok(f(p));
        }
        if self.to_free.contains(&id) {
            return Err(Error::corrupt(id, format!("{} reads a page it freed", self.id)));
        }
        self.lock(Resource::Page(id), LockMode::S)?;
        let g = self.db.pool.read(id)?;
        Ok(f(&g))
    }

    fn modify<R>(&mut self, id: PageId, f: impl FnOnce(&mut [u8]) -> Result<R>) -> Result<R> {
        if self.to_free.contains(&id) {
            return Err(Error::corrupt(id, format!("{} changes a page it freed", self.id)));
        }
        self.lock(Resource::Page(id), LockMode::X)?;
        if !self.pages.contains(id) {
            let g = self.db.pool.read(id)?;
            let spilled = self.pages.insert(id, &g)?;
            drop(g);
            self.db.counters.pages_spilled.fetch_add(spilled, Ordering::Relaxed);
        }
        let Txn { pages, scratch, .. } = self;
        let page = pages
            .get_mut(id)?
            .ok_or_else(|| Error::corrupt(id, "private page vanished"))?;
        scratch.copy_from_slice(page);
        let r = f(scratch)?;
        // The changed copy becomes the page; the old image is the next scratch.
        std::mem::swap(page, scratch);
        Ok(r)
    }

    fn allocate(&mut self, group: GroupId, near: Option<PageId>, ty: PageType) -> Result<PageId> {
        self.lock(Resource::Group(group), LockMode::IX)?;
        let p = {
            let mut vol = lock(&self.db.vol);
            let p = vol.allocate_for(self.id, group, near, ty)?;
            lock(&self.db.pending_alloc).insert(p, self.id);
            p
        };
        self.allocated.push(p);
        self.lock(Resource::Page(p), LockMode::X)?;
        Ok(p)
    }

    fn lock_for_update(&mut self, id: PageId) -> Result<()> {
        self.lock(Resource::Page(id), LockMode::X)
    }

    fn free(&mut self, id: PageId) -> Result<()> {
        self.lock(Resource::Page(id), LockMode::X)?;
        // The private copy stays: it is installed at commit before the page
        // is freed, so the page's uniquifier sequence keeps every uniquifier
        // this transaction handed out on it (an OID of an object created and
        // deleted here must never name a later object).
        self.to_free.insert(id);
        lock(&self.db.fill).retain(|_, f| *f != id);
        Ok(())
    }
}

impl ObjectSpace for Txn {
    fn page_count(&self) -> u32 {
        lock(&self.db.vol).page_count()
    }

    fn group_exists(&self, group: GroupId) -> bool {
        lock(&self.db.vol).group_name(group).is_some()
    }

    fn group_of_page(&self, id: PageId) -> Option<GroupId> {
        lock(&self.db.vol).group_of_page(id)
    }

    fn is_page_in_use(&self, id: PageId) -> bool {
        if self.to_free.contains(&id) {
            return false;
        }
        if lock(&self.db.pending_alloc).get(&id).is_some_and(|t| *t != self.id) {
            return false;
        }
        lock(&self.db.vol).is_page_in_use(id)
    }

    fn region_pages(&self) -> u32 {
        self.db.region_pages
    }

    fn group_pages(&self, group: GroupId) -> Result<Vec<PageId>> {
        let mut pages = lock(&self.db.vol).group_pages(group)?;
        pages.retain(|p| self.is_page_in_use(*p));
        Ok(pages)
    }

    fn fill_page(&self, group: GroupId) -> Option<PageId> {
        lock(&self.db.fill).get(&group).copied()
    }

    fn set_fill_page(&mut self, group: GroupId, page: Option<PageId>) {
        let mut fill = lock(&self.db.fill);
        match page {
            Some(p) => fill.insert(group, p),
            None => fill.remove(&group),
        };
    }

    fn forget_fill_page(&mut self, page: PageId) {
        lock(&self.db.fill).retain(|_, f| *f != page);
    }

    fn may_try_page(&mut self, page: PageId) -> Result<bool> {
        let res = Resource::Page(page);
        if self.held.get(&res).is_some_and(|m| m.covers(LockMode::X)) {
            return Ok(true);
        }
        if self.db.locks.try_lock(self.owner, res, LockMode::X)? {
            let m = self.held.entry(res).or_insert(LockMode::X);
            *m = m.sup(LockMode::X);
            return Ok(true);
        }
        Ok(false)
    }

    fn stats_mut(&mut self) -> &mut ObjectStats {
        &mut self.stats
    }
}

/// Used by tools: was the database poisoned, and why.
pub fn poisoned_reason(db: &Db) -> Option<String> {
    lock(&db.shared.poisoned).clone()
}

// The engine is shared across threads; a transaction may move between them.
const _: fn() = || {
    fn send<T: Send>() {}
    fn sync<T: Sync>() {}
    send::<Txn>();
    send::<Db>();
    sync::<Db>();
};
