//! The embedded engine: [`Db`] opens (recovers) a database directory and
//! shares its volume, buffer pool, log and lock manager with every
//! transaction; [`Shared::checkpoint`] takes fuzzy checkpoints.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::access::PageAccess;
use crate::buffer::{BufferPool, BufferStats};
use crate::error::{Error, Result};
use crate::ids::{ClientId, GroupId, Lsn, PageId, TxnId};
use crate::io::{FileLock, Vfs};
use crate::lock::{LockManager, LockMode, LockOptions, LockOwner, LockStats, Resource};
use crate::volume::{GroupInfo, SpaceView, Volume, VolumeOptions};
use crate::wal::redo::Redo;
use crate::wal::LogSink;
use crate::wal::{Wal, WalOptions, WalStats};

use super::spill::{self, PrivatePages};
use super::Txn;

/// A checkpoint taken when nothing was logged since its redo LSN starts a
/// new log segment if the current one holds at least this many bytes, so
/// that the next open reads one short segment (see [`Wal::roll_at`]).
const ROLL_AT_CHECKPOINT_BYTES: u64 = 64 << 10;

/// A page image a commit logged and has not installed yet, stamped with
/// its record's LSN.
pub(super) type NewestImage = (Lsn, Arc<[u8]>);

/// A page's images logged by commits and not installed yet, by LSN.
pub(super) type PendingImages = std::collections::BTreeMap<Lsn, Arc<[u8]>>;

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
    /// Transactions lock single objects instead of pages (see
    /// [`Txn::set_object_locking`]); off by default.
    pub object_locking: bool,
    /// Bytes of page before-images the version store keeps for running
    /// snapshots ([`Db::begin_read_only`]); past it the oldest snapshots
    /// end early ([`Error::SnapshotTooOld`]).
    pub snapshot_bytes_max: usize,
    /// B+-tree operations lock entries and key ranges, and reach the
    /// tree's pages only at commit, instead of locking the pages they
    /// touch until their transaction ends (see [`Txn::tree_insert`] and
    /// the key-range locking section of ARCHITECTURE.md); off by default.
    pub key_range_locking: bool,
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
            object_locking: false,
            key_range_locking: false,
            snapshot_bytes_max: 256 << 20,
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
    /// Object-level changes that escalated to an X lock on their page (no
    /// room could be reserved there for their growth): a page-level lock
    /// taken late, often at an object-server client's commit, where it
    /// waits for every reader of the page.
    pub escalations: u64,
    /// Pages held S for an object-locking transaction's reads ("coarse
    /// reads", `txn/objects.rs`) lowered to IS, with their objects locked
    /// one by one, before the transaction changed an object there.
    pub de_escalations: u64,
    /// Appends kept under append locks (`Txn::merge` answered true) or,
    /// by transactions that lock pages, to their commits
    /// (`Txn::defer_merge`), and appends left to be made whole under X
    /// (no room on the record's page, a large record, a merge that did
    /// not apply).
    pub appends_kept: u64,
    /// See [`DbStats::appends_kept`].
    pub appends_whole: u64,
    /// Pages of file-server commits whose client died before writing them,
    /// repaired by the server (`txn/unwritten.rs`).
    pub pages_repaired: u64,
    /// The log.
    pub wal: WalStats,
    /// The buffer pool.
    pub buffer: BufferStats,
    /// The lock manager.
    pub locks: LockStats,
}

#[derive(Default)]
pub(super) struct Counters {
    pub(super) commits: AtomicU64,
    pub(super) read_only: AtomicU64,
    pub(super) aborts: AtomicU64,
    pub(super) checkpoints: AtomicU64,
    pub(super) pages_spilled: AtomicU64,
    pub(super) escalations: AtomicU64,
    pub(super) de_escalations: AtomicU64,
    pub(super) appends_kept: AtomicU64,
    pub(super) appends_whole: AtomicU64,
    pub(super) repaired: AtomicU64,
}

/// What a write-lock hook returns to go on: a guard held until the lock
/// request returns (`None`: nothing to hold).
pub type HookGuard = Option<Box<dyn std::any::Any + Send>>;

/// The function [`Db::set_tree_change_hook`] sets: called with a tree's
/// root and the pages a commit changed, allocated or freed in it under
/// key-range locking, after the commit's records are logged and its pages
/// are the newest images readers see, and before its locks are released —
/// so a cache of tree entries validated by page versions (the typed
/// layer's index cache) drops them before any reader can lock the keys
/// the commit changed.
pub type TreeChangeHook = dyn Fn(PageId, &[PageId]) + Send + Sync;

/// The function [`Db::set_install_hook`] sets: called with the pages a
/// commit installed, once they are the committed images and before the
/// commit's locks are released — so a cache of page images (the typed
/// layer's dual buffer, under object locking, where a commit changes a
/// page others may be reading objects of) drops the old images before any
/// transaction can lock the whole page again.
pub type InstallHook = dyn Fn(&[PageId]) + Send + Sync;

/// The function [`Db::set_write_lock_hook`] sets: (owner, page or object,
/// mode, may wait) → `Some(guard)` to go on, `None` if it would have to
/// wait and may not.
pub type WriteLockHook = dyn Fn(crate::lock::LockOwner, crate::lock::Resource, crate::lock::LockMode, bool) -> Result<Option<HookGuard>>
    + Send
    + Sync;

/// State shared by the engine and its transactions.
pub(crate) struct Shared {
    pub(super) dir: PathBuf,
    pub(super) vfs: Arc<dyn Vfs>,
    pub(super) page_size: usize,
    pub(super) region_pages: u32,
    pub(super) vol: Mutex<Volume>,
    /// The volume's space, readable without the `Volume` mutex (which a
    /// system action holds across its log append and page writes): what
    /// every object read asks.
    pub(super) space: Arc<SpaceView>,
    pub(super) pool: Arc<BufferPool>,
    pub(super) wal: Arc<Wal>,
    pub(super) sink: LogSink,
    pub(super) locks: Arc<LockManager>,
    pub(super) next_txn: Arc<AtomicU64>,
    pub(super) fill: super::backend::FillPages,
    /// Pages allocated by transactions still running: others must not put
    /// objects on them (an abort would free them). Changed under the
    /// `Volume` mutex, with the allocation it records.
    pub(super) pending_alloc: Mutex<HashMap<PageId, TxnId>>,
    /// Pages freed by committed transactions whose deferred FREE actions
    /// have not run yet (registered with the COMMIT record, under the gate;
    /// each removed under the `Volume` mutex with the FREE that does it). A
    /// checkpoint records them, since the COMMIT naming them may be in a
    /// segment it removes.
    pub(super) pending_frees: Mutex<HashMap<PageId, TxnId>>,
    /// Room on pages reserved for running transactions' object-level
    /// changes (`objects.rs`). Taken before `newest` and the buffer pool's
    /// frames, never under them.
    pub(super) reserved: Mutex<crate::fxhash::FxHashMap<PageId, Vec<(TxnId, usize)>>>,
    /// The newest image of each page whose object-level changes a commit
    /// has logged but not installed yet, with the LSN it is stamped with:
    /// the base the next commit to the page applies its changes to. Taken
    /// under the commit gate, before a buffer frame.
    pub(super) newest: Mutex<crate::fxhash::FxHashMap<PageId, NewestImage>>,
    /// Every such image not installed yet, by page and LSN (the newest
    /// is also in `newest`): a commit that installs its image of a page
    /// before an earlier commit installed its own hands the earlier states
    /// to the version store too (`commit.rs`), so a snapshot that sees the
    /// earlier commit and not the later finds the page as the earlier one
    /// left it. Taken under a buffer frame.
    pub(super) pending_images: Mutex<crate::fxhash::FxHashMap<PageId, PendingImages>>,
    /// The first LSNs of file-server commits whose pages their clients have
    /// not written yet: a checkpoint's redo LSN stays at or below each.
    pub(super) unwritten: Mutex<RedoHolds>,
    /// The pages those commits' clients are writing into the volume file,
    /// with how many such commits write each: a snapshot's read of one may
    /// meet a half-written page, and then reads its version instead
    /// (`embedded.rs`, `read_at`).
    pub(super) unwritten_pages: Mutex<crate::fxhash::FxHashMap<PageId, usize>>,
    /// Called before every lock that lets a transaction change a page
    /// ([`Db::set_write_lock_hook`]).
    pub(super) write_hook: std::sync::OnceLock<Box<WriteLockHook>>,
    /// The trees under key-range locking, if the database locks key
    /// ranges ([`DbOptions::key_range_locking`]).
    pub(super) key_ranges: Option<super::KeyRanges>,
    /// Page versions for snapshots (`versions.rs`).
    pub(super) versions: super::versions::Versions,
    /// Called when a commit has changed a tree's pages under key-range
    /// locking ([`Db::set_tree_change_hook`]).
    pub(super) tree_hook: std::sync::OnceLock<Box<TreeChangeHook>>,
    /// Called when a commit has installed its pages ([`Db::set_install_hook`]).
    pub(super) install_hook: std::sync::OnceLock<Box<InstallHook>>,
    ckpt: Mutex<Lsn>,
    poisoned: Mutex<Option<String>>,
    /// Set with `poisoned`, so the hot path checks an atomic, not a mutex.
    is_poisoned: AtomicBool,
    opts: DbOptions,
    pub(super) counters: Counters,
    stop: (Mutex<bool>, Condvar),
    txn_memory_pages: usize,
    recovered: crate::recovery::Recovered,
    /// The directory lock, held for as long as the database is open (taken
    /// out early only by [`Db::crash`]).
    dir_lock: Mutex<Option<Box<dyn FileLock>>>,
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    pub(super) fn check_poisoned(&self) -> Result<()> {
        if !self.is_poisoned.load(Ordering::Acquire) {
            return Ok(());
        }
        match &*lock(&self.poisoned) {
            Some(why) => Err(Error::Poisoned(why.clone())),
            None => Ok(()),
        }
    }

    pub(super) fn poison(&self, why: String) {
        let mut p = lock(&self.poisoned);
        if p.is_none() {
            *p = Some(why);
        }
        self.is_poisoned.store(true, Ordering::Release);
    }

    /// Takes a fuzzy checkpoint: picks the redo LSN, writes every dirty page
    /// and fsyncs the volume, logs CHECKPOINT and makes it durable, then
    /// removes the log segments before the redo LSN.
    ///
    /// Log is removed only once the pages it describes were written *and*
    /// fsynced by this process: the flush writes every page dirty in the
    /// pool, and recovery leaves every page it rebuilt dirty (never trusting
    /// a cached copy that merely looks current, see [`crate::recovery`]).
    pub(super) fn checkpoint(&self) -> Result<()> {
        self.checkpoint_rolling(ROLL_AT_CHECKPOINT_BYTES)
    }

    /// [`Shared::checkpoint`], starting a new segment for the CHECKPOINT
    /// when nothing was logged since the redo LSN and the current segment
    /// holds at least `roll_bytes`.
    pub(super) fn checkpoint_rolling(&self, roll_bytes: u64) -> Result<()> {
        self.check_poisoned()?;
        let mut last = lock(&self.ckpt);
        // Under the Volume mutex no allocation or deferred free is half-way
        // between its log record and the pending list that mirrors it; under
        // the gate no commit is between logging and installing its pages or
        // between its COMMIT and registering its frees. So the redo LSN and
        // both pending lists agree. (Lock order: Volume → gate.)
        let (redo_lsn, pending, pending_frees) = {
            let _vol = lock(&self.vol);
            let _gate = self.sink.gate.write().unwrap_or_else(|e| e.into_inner());
            let end = self.wal.end_lsn();
            // Full images are owed from `end` on; but redo starts no later
            // than the first record of a file-server commit whose client
            // has not written its pages yet (`unwritten.rs`).
            self.sink.redo_lsn.store(end.0, Ordering::SeqCst);
            let redo = self.oldest_unwritten().map_or(end, |u| u.min(end));
            let pending: Vec<(TxnId, PageId)> = lock(&self.pending_alloc).iter().map(|(p, t)| (*t, *p)).collect();
            let frees: Vec<(TxnId, PageId)> = lock(&self.pending_frees).iter().map(|(p, t)| (*t, *p)).collect();
            (redo, pending, frees)
        };
        let result = (|| {
            self.pool.flush_all()?;
            // Nothing logged since the redo LSN (a quiet database, a close):
            // the CHECKPOINT starts a new segment and every older one goes.
            self.wal.roll_at(redo_lsn, roll_bytes)?;
            let rec = Redo::Checkpoint {
                redo_lsn,
                next_txn: self.next_txn.load(Ordering::SeqCst),
                pending,
                pending_frees,
            };
            // The CHECKPOINT proves the log before it durable
            // (`Redo::is_checkpoint`, the open rule), so everything before
            // it is made durable first, with no append in between: every
            // append (commits, system actions) holds the gate's read side.
            let lsn = {
                let _gate = self.sink.gate.write().unwrap_or_else(|e| e.into_inner());
                self.wal.flush(self.wal.end_lsn())?;
                self.wal.append(&[&rec.encode()])?[0]
            };
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
    pub(super) shared: Arc<Shared>,
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
        let vfs = &opts.volume.vfs;
        crate::io::create_dir_durably(vfs.as_ref(), dir).map_err(|e| Error::io("create database directory", dir, e))?;
        let dir_lock = crate::volume::lock_dir(vfs.as_ref(), dir)?;
        // A log left in the directory belongs to some other database: never
        // start a new one beside it (it would be refused at open anyway).
        let wal_dir = dir.join(crate::wal::WAL_DIR);
        if vfs.exists(&wal_dir)
            && !vfs
                .list_dir(&wal_dir)
                .map_err(|e| Error::io("list log directory", &wal_dir, e))?
                .is_empty()
        {
            return Err(Error::AlreadyExists { path: wal_dir });
        }
        Volume::create(dir, &opts.volume)?.close()?;
        Db::open_locked(dir, opts, dir_lock, None)
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
    ///
    /// The directory is locked first: a second opener, in this process or
    /// another, gets [`Error::InUse`] naming the holder, and never runs
    /// recovery against a live database.
    pub fn open(dir: &Path, opts: &DbOptions) -> Result<Db> {
        // The manifest first: a directory that is not a database should say
        // so, not grow a log or a lock file.
        crate::volume::manifest::Manifest::read(opts.volume.vfs.as_ref(), dir)?;
        let dir_lock = crate::volume::lock_dir(opts.volume.vfs.as_ref(), dir)?;
        Db::open_locked(dir, opts, dir_lock, None)
    }

    /// Opens the locked database in `dir`; `stop`: recover as if the log
    /// ended there (`salvage.rs`), and make that permanent.
    ///
    /// The steps, in this order: open the log, recover, open the volume and
    /// attach the log to it, give back what recovery says to free, build the
    /// shared state, checkpoint, start the checkpointer.
    pub(super) fn open_locked(
        dir: &Path,
        opts: &DbOptions,
        dir_lock: Box<dyn FileLock>,
        stop: Option<Lsn>,
    ) -> Result<Db> {
        let wal = Arc::new(Db::open_wal(dir, opts)?);
        let recovered = crate::recovery::run(dir, &opts.volume, &wal, stop)?;
        let mut vol = Volume::open(dir, &opts.volume)?;
        let (next_txn, sink, pool) = Db::attach_log(&mut vol, &wal, &recovered);
        Db::free_recovered(&mut vol, &recovered)?;
        let page_size = vol.page_size();
        let region_pages = vol.header().region_pages;
        let shared = Arc::new(Shared {
            dir: dir.to_path_buf(),
            vfs: opts.volume.vfs.clone(),
            page_size,
            region_pages,
            space: vol.view(),
            vol: Mutex::new(vol),
            pool,
            wal,
            sink,
            locks: Arc::new(LockManager::new(LockOptions {
                timeout: opts.lock_timeout,
            })),
            next_txn,
            fill: super::backend::FillPages::default(),
            pending_alloc: Mutex::new(HashMap::new()),
            pending_frees: Mutex::new(HashMap::new()),
            reserved: Mutex::default(),
            newest: Mutex::default(),
            pending_images: Mutex::default(),
            unwritten: Mutex::default(),
            unwritten_pages: Mutex::default(),
            write_hook: std::sync::OnceLock::new(),
            key_ranges: opts.key_range_locking.then(super::KeyRanges::default),
            tree_hook: std::sync::OnceLock::new(),
            install_hook: std::sync::OnceLock::new(),
            versions: super::versions::Versions::new(opts.snapshot_bytes_max),
            ckpt: Mutex::new(Lsn(0)),
            poisoned: Mutex::new(None),
            is_poisoned: AtomicBool::new(false),
            opts: opts.clone(),
            counters: Counters::default(),
            stop: (Mutex::new(false), Condvar::new()),
            txn_memory_pages: (opts.txn_memory_bytes / page_size).max(4),
            recovered,
            dir_lock: Mutex::new(Some(dir_lock)),
        });
        spill::remove_leftovers(&shared.vfs, dir);
        // A checkpoint now makes the frees above and everything recovery
        // rebuilt durable, makes the next recovery short and trims the log.
        // After a stop, it starts a new segment so every older one — the
        // records past the stop among them — goes (`salvage.rs`).
        shared.checkpoint_rolling(if stop.is_some() { 0 } else { ROLL_AT_CHECKPOINT_BYTES })?;
        let background = opts.background.then(|| spawn_checkpointer(&shared));
        Ok(Db { shared, background })
    }

    /// The first step of [`Db::open_locked`]: finishes an interrupted
    /// create, then opens the log, which must carry the manifest's creation
    /// id.
    fn open_wal(dir: &Path, opts: &DbOptions) -> Result<Wal> {
        Volume::finish_create(opts.volume.vfs.as_ref(), dir)?;
        let manifest = crate::volume::manifest::Manifest::read(opts.volume.vfs.as_ref(), dir)?;
        let wal_opts = WalOptions {
            segment_bytes: opts.wal_segment_bytes,
            vfs: opts.volume.vfs.clone(),
            creation_id: manifest.creation_id,
            proves_durable: Redo::is_checkpoint,
        };
        let (wal, _report) = Wal::open(dir, wal_opts)?;
        Ok(wal)
    }

    /// Makes the recovered volume log through `wal`: the log sink (its redo
    /// LSN and transaction ids go on from where recovery left them), and a
    /// buffer pool that flushes the log before writing a page. Returns the
    /// transaction id counter, the sink and the pool.
    fn attach_log(
        vol: &mut Volume,
        wal: &Arc<Wal>,
        recovered: &crate::recovery::Recovered,
    ) -> (Arc<AtomicU64>, LogSink, Arc<BufferPool>) {
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
        (next_txn, sink, pool)
    }

    /// Give back what uncommitted transactions allocated and what committed
    /// ones freed without a FREE record.
    ///
    /// A COMMIT may only free pages transactions hold; a free of any
    /// other page stops recovery at that COMMIT (`cairn recover
    /// --stop-at`), never a failed open for good. All are checked before
    /// any is carried out, so a refused open logs nothing.
    fn free_recovered(vol: &mut Volume, recovered: &crate::recovery::Recovered) -> Result<()> {
        Db::check_recovered_frees(vol, recovered)?;
        for p in &recovered.to_free {
            if vol.is_page_in_use(*p) {
                vol.free_logged(*p)?;
            }
        }
        Ok(())
    }

    /// Refuses, as [`Error::Unrecoverable`] at the COMMIT that freed it, the
    /// first page recovery would free that no transaction may free.
    fn check_recovered_frees(vol: &mut Volume, recovered: &crate::recovery::Recovered) -> Result<()> {
        for p in &recovered.to_free {
            // A page already given back (a Free page, or one in no group's
            // use) needs nothing; any other kind must be a transaction's.
            if p.0 < vol.page_count() {
                let kind = crate::access::PageAccess::read(vol, *p, crate::page::page_type)?;
                let fine = kind.is_some_and(|k| k.is_client_kind() || k == crate::page::PageType::Free)
                    || (kind.is_none() && !vol.is_page_in_use(*p));
                if !fine {
                    let origin = recovered.free_origins.get(p).copied();
                    let (lsn, txn) = origin.map_or((Lsn(0), None), |(l, t)| (l, Some(t)));
                    return Err(Error::Unrecoverable {
                        lsn,
                        txn,
                        reason: format!(
                            "it frees page {p}, a {} page, which no transaction may free",
                            kind.map_or("page of unknown kind", |k| k.name())
                        ),
                    });
                }
            }
        }
        Ok(())
    }

    /// Starts a transaction for the embedded client (client 0).
    pub fn begin(&self) -> Result<Txn> {
        self.begin_for(ClientId(0))
    }

    /// Starts a read-only transaction at a snapshot of the last committed
    /// state (see `txn::versions`): it takes no locks, never waits for a
    /// writer and never makes one wait, and never aborts for a conflict; a
    /// change is [`Error::ReadOnlyTxn`]. A snapshot that outlives the
    /// version store's bound ends early ([`Error::SnapshotTooOld`]).
    pub fn begin_read_only(&self) -> Result<Txn> {
        self.begin_read_only_for(ClientId(0))
    }

    /// [`Db::begin_read_only`] on behalf of `client` (a server's session).
    pub fn begin_read_only_for(&self, client: ClientId) -> Result<Txn> {
        let mut txn = self.begin_for(client)?;
        txn.object_locks = false;
        txn.coarse_reads = false;
        txn.snapshot = Some(self.shared.versions.begin(|| self.shared.wal.end_lsn()));
        Ok(txn)
    }

    /// What the snapshot of `txn` sees (`None` for a transaction that is
    /// not at a snapshot, or whose snapshot ended early): a server sends it
    /// to the client whose snapshot it is, which uses a page it caches for
    /// the snapshot only if the window sees the page's LSN.
    pub fn snapshot_window(&self, txn: &Txn) -> Option<super::SnapshotWindow> {
        txn.snapshot.and_then(|s| self.shared.versions.window(s))
    }

    /// The version store's counters (page versions kept for snapshots).
    pub fn version_stats(&self) -> super::versions::VersionStats {
        self.shared.versions.stats()
    }

    /// Starts a transaction on behalf of `client`.
    pub fn begin_for(&self, client: ClientId) -> Result<Txn> {
        self.shared.check_poisoned()?;
        let id = TxnId(self.shared.next_txn.fetch_add(1, Ordering::SeqCst));
        let mut pages = PrivatePages::new(self.shared.txn_memory_pages, self.shared.page_size);
        pages.spill_to(self.shared.vfs.clone(), &self.shared.dir);
        let mut txn = Txn::new(self.shared.clone(), LockOwner::new(client, id), pages);
        txn.object_locks = self.shared.opts.object_locking;
        txn.coarse_reads = self.shared.opts.object_locking || self.shared.opts.key_range_locking;
        Ok(txn)
    }

    /// Grants `owner` a lock ahead of waiting requests: a remote client's
    /// transaction that has been reading `res` under its callback right
    /// ([`LockManager::lock_ahead`](crate::lock::LockManager::lock_ahead)).
    pub fn lock_ahead(
        &self,
        owner: LockOwner,
        res: Resource,
        mode: LockMode,
        writer: Option<LockOwner>,
    ) -> Result<bool> {
        self.shared.locks.lock_ahead(owner, res, mode, writer)
    }

    /// Whether `owner` holds a lock on `res` that covers `mode`, asked of
    /// the lock manager: a server checks its session's transactions this
    /// way without taking (or keeping alive) their [`Txn`]s.
    pub fn holds_lock(&self, owner: LockOwner, res: &Resource, mode: LockMode) -> bool {
        self.shared.locks.held_mode(owner, res).is_some_and(|m| m.covers(mode))
    }

    /// True if the database locks key ranges of its B+-trees
    /// ([`DbOptions::key_range_locking`]): a tree's pages then change only
    /// when a transaction that changed its entries commits, under no page
    /// lock, so whoever reads or writes tree pages directly (a page or
    /// file client) cannot share it.
    pub fn locks_key_ranges(&self) -> bool {
        self.shared.key_ranges.is_some()
    }

    /// The lock manager's timeout: how long a request waits for a lock (a
    /// server waits as long for a client to answer a callback).
    pub fn lock_timeout(&self) -> std::time::Duration {
        self.shared.locks.options().timeout
    }

    /// The committed image of page `id`, read without a lock (a page
    /// server's READ, for a client whose transaction already holds one).
    pub fn read_committed(&self, id: PageId) -> Result<Vec<u8>> {
        let count = lock(&self.shared.vol).page_count();
        if id.0 >= count {
            return Err(Error::InvalidArgument(format!(
                "page {id} is past the end of the volume ({count} pages)"
            )));
        }
        Ok(self.shared.pool.read(id)?.to_vec())
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

    /// The group page `id` belongs to (`None`: not in any group's
    /// extents), read without the volume's mutex.
    pub fn group_of_page(&self, id: PageId) -> Option<GroupId> {
        self.shared.space.group_of_page(id)
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
            escalations: c.escalations.load(Ordering::Relaxed),
            de_escalations: c.de_escalations.load(Ordering::Relaxed),
            appends_kept: c.appends_kept.load(Ordering::Relaxed),
            appends_whole: c.appends_whole.load(Ordering::Relaxed),
            pages_repaired: c.repaired.load(Ordering::Relaxed),
            wal: self.shared.wal.stats(),
            buffer: self.shared.pool.stats(),
            locks: self.shared.locks.stats(),
        }
    }

    /// Writes page `id` to the volume file if the buffer pool holds a
    /// change of it the file lacks (the log first, as always): a
    /// file-server client reads the page from the file next.
    pub fn write_back(&self, id: PageId) -> Result<()> {
        self.shared.pool.flush_page(id)
    }

    /// Sets the tree-change hook (see [`TreeChangeHook`]); once.
    pub fn set_tree_change_hook(&self, hook: Box<TreeChangeHook>) -> Result<()> {
        self.shared
            .tree_hook
            .set(hook)
            .map_err(|_| Error::InvalidArgument("the tree-change hook is set already".into()))
    }

    /// Sets the install hook (see [`InstallHook`]); once.
    pub fn set_install_hook(&self, hook: Box<InstallHook>) -> Result<()> {
        self.shared
            .install_hook
            .set(hook)
            .map_err(|_| Error::InvalidArgument("the install hook is set already".into()))
    }

    /// Sets the function called before every lock that lets a transaction
    /// change a page or an object — X, SIX or IX on
    /// [`Resource::Page`](crate::lock::Resource::Page), X on
    /// [`Resource::Object`](crate::lock::Resource::Object) — or what a
    /// B+-tree's gap covers under key-range locking (IX or X on a gap or
    /// the tree's end, X on the whole tree; an insert asks for its gap's IX
    /// whenever the hook, asked without waiting, would call back), with the lock's
    /// owner, the resource, the mode, and whether it may wait. A server
    /// calls back the page or object from the clients caching it there,
    /// whatever path the change takes (a page written, an object changed
    /// under object-level locking, a B+-tree split, a free). It answers
    /// `Some(guard)` to go on (the guard is held until the lock request
    /// returns) or, when it may not wait and would have to, `None` (the
    /// try-lock then reports the lock not granted); an error fails the lock
    /// request. Set once; an error if it was set before.
    pub fn set_write_lock_hook(&self, hook: Box<WriteLockHook>) -> Result<()> {
        self.shared
            .write_hook
            .set(hook)
            .map_err(|_| Error::InvalidArgument("the write-lock hook is set already".into()))
    }

    /// The path of the volume file (a file-server client reads and writes
    /// its pages there).
    pub fn volume_file(&self) -> PathBuf {
        self.shared.dir.join(crate::volume::manifest::VOLUME_FILE)
    }

    /// True if [`Db::write_back`] would write page `id` now (never waits).
    pub fn needs_write_back(&self, id: PageId) -> bool {
        self.shared.pool.is_dirty(id)
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

    /// Stops as a power cut or `kill -9` would, for crash tests inside one
    /// process: nothing more is written (the database is poisoned, so a
    /// transaction still alive can neither commit nor write), no checkpoint
    /// is taken, and the directory lock is released so the database can be
    /// opened — and recovered — again.
    pub fn crash(mut self) {
        self.shared
            .poison("the database was crashed on purpose (Db::crash)".into());
        self.stop_background();
        drop(lock(&self.shared.dir_lock).take());
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

/// Starts the background checkpointer thread on `shared`.
fn spawn_checkpointer(shared: &Arc<Shared>) -> JoinHandle<()> {
    let s = shared.clone();
    std::thread::Builder::new()
        .name("cairn-checkpointer".into())
        .spawn(move || background_loop(&s))
        .expect("spawn the checkpointer thread")
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
        if s.is_poisoned.load(Ordering::Acquire) {
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

/// Holds on the redo LSN for file-server commits whose pages their client
/// has not written yet (`unwritten.rs`).
impl Shared {
    /// Keeps checkpoints from moving the redo LSN past `lsn` until
    /// [`Shared::release_redo`]; returns the hold's id (never 0).
    pub(super) fn hold_redo(&self, lsn: Lsn) -> u64 {
        let mut holds = lock(&self.unwritten);
        let id = holds.next_id.max(1);
        holds.next_id = id + 1;
        holds.by_id.insert(id, lsn);
        id
    }

    pub(super) fn release_redo(&self, hold: u64) {
        if hold != 0 {
            lock(&self.unwritten).by_id.remove(&hold);
        }
    }

    /// The first LSN of the oldest commit whose pages a file-server client
    /// has not written yet: a checkpoint's redo LSN stays at or below it.
    pub(super) fn oldest_unwritten(&self) -> Option<Lsn> {
        lock(&self.unwritten).by_id.values().min().copied()
    }
}

/// The holds of [`Shared::hold_redo`].
#[derive(Debug, Default)]
pub(super) struct RedoHolds {
    next_id: u64,
    by_id: std::collections::HashMap<u64, Lsn>,
}
