//! The [`Database`] and its [`Transaction`]s, embedded or against a server.
//!
//! A database is embedded ([`Database::open`]: the storage engine runs in
//! this process) or a page-server client ([`Database::connect`]: pages come
//! from `cairn serve`, see `crate::remote`); the two differ only in the
//! storage backend ([`cairn_storage::txn::Backend`]) under the one storage
//! transaction type, so everything below is the same code for both.
//!
//! A transaction wraps a storage transaction ([`cairn_storage::Txn`]): every
//! object read locks its home page shared, every change locks it exclusive,
//! strict two-phase, so histories are serializable. Objects come from the
//! shared [`ObjectCache`] when they are there (after the lock is taken, so
//! the copy is never stale), else they are read, decoded and cached — a
//! *fault*. A transaction's own changes are kept in its *overlay* (it reads
//! them back; nobody else sees them) and written through to the storage
//! transaction at once; they leave the cache at the first change and come back
//! as committed objects when next read.
//!
//! A record is `class id (u32) | schema version (u16) | fields`; the class
//! and version come from the catalog ([`crate::catalog`]).

use std::any::TypeId;
use std::collections::HashMap;
use std::marker::PhantomData;
use std::ops::Bound;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use cairn_schema::TreeOp;
use cairn_storage::btree::BTree;
use cairn_storage::{Db, DbOptions, GroupId, Oid, Txn};

use crate::cache::{CachePolicy, CacheStats, CachedObject, ObjectCache};
use crate::catalog::{self, Catalog, ClassInfo, Meta};
use cairn_schema::catalog_change::{self, CatalogChange, Outcome};

mod append;
mod classes;
mod query;
mod read;
mod source;
mod store;
mod write;

use crate::codec::{decode_value, Persistent, Reader, TypeDesc, Writer};
use crate::dual::DualBufferOptions;
use crate::error::{Error, Result};
use crate::fields::IndexKey;
use crate::index_cache::{IndexCache, TreeCache};
use crate::reference::Ref;
use crate::remote::{RemoteStats, RemoteStore};
pub(crate) use crate::store_ops::StoreOps;
pub(crate) use source::{IndexAnswer, Source};
pub(crate) use store::{Store, Tx};

/// How to open a database.
#[derive(Clone, Debug)]
pub struct Options {
    /// The storage engine's options (page size, buffer pool, log, locks).
    /// With `storage.object_locking` (embedded databases; **on by
    /// default** here, off in [`DbOptions::default`]), transactions lock
    /// single objects instead of their pages, so two of them change
    /// different objects of one page at the same time; a read takes S on
    /// the whole page while nobody writes there (a coarse read, lowered to
    /// object locks before the transaction changes that page or waits), so
    /// one transaction alone pays about what page locking costs it. Off,
    /// they lock pages. A page- or file-server client locks pages; an
    /// object-server client always locks objects.
    /// With `storage.key_range_locking` (embedded databases), index
    /// operations lock keys and key ranges instead of index pages.
    pub storage: DbOptions,
    /// Bytes of decoded objects the object cache may hold.
    pub cache_bytes: usize,
    /// The object cache's replacement policy.
    pub cache_policy: CachePolicy,
    /// The client's dual buffer: page images and object copies that
    /// objects are read in place from ([`Transaction::view`]), its size and
    /// strategy (see `crate::dual`).
    pub dual_buffer: DualBufferOptions,
    /// When a transaction faults an object from a page another transaction
    /// faulted from before, also decode and cache the other objects of the
    /// same type there (read and locked anyway), so a working set that comes
    /// back stops faulting one object at a time. Within one transaction
    /// (a cold start, a one-off scan) nothing is prefetched. Off by default:
    /// in OO1 it cut warm lookups by 10–40% but made warm traversals about
    /// 1.5× slower (each run starts somewhere new and decodes pages it then
    /// leaves), and decoding every object of a page on its second fault in
    /// one transaction made cold runs 1.5–2× slower — Kemper & Kossmann's
    /// finding that lazy copying beats eager copying, measured again.
    pub fault_whole_pages: bool,
    /// The longest record a transaction decodes (faults in) whole, in bytes:
    /// a longer one is [`Error::ObjectTooLarge`], refused before its bytes
    /// are read or allocated. 256 MiB by default (the storage layer's own
    /// limit for reading an object whole,
    /// `cairn_storage::record::object::READ_WHOLE_LEN_MAX`, also applies).
    pub object_bytes_max: u64,
    /// [`Database::connect`] only: which workstation–server architecture
    /// the client uses (DeWitt et al.; ARCHITECTURE.md). [`Arch::Adaptive`]
    /// by default.
    pub arch: Arch,
    /// [`Database::connect`] with [`Arch::Adaptive`] only: when it fetches
    /// pages of objects and when single objects.
    pub adaptive: crate::remote::AdaptivePolicy,
    /// [`Database::connect`] only: the user to log in as (SCRAM-SHA-256;
    /// the password never crosses the wire). `None`: the URL's user, if
    /// it names one, else no login (a server without users, which trusts
    /// loopback connections only).
    pub login: Option<crate::Login>,
    /// [`Database::connect`] to a `cairns://` URL only: the CA file the
    /// server's certificate must be signed by (else `CAIRN_TLS_CA`, else
    /// the system's roots).
    pub tls_ca: Option<std::path::PathBuf>,
    /// [`Database::connect`] only: pages the client's page buffer holds
    /// (an object-server client keeps as many bytes, 4 KiB a page, of
    /// objects across transactions).
    pub client_buffer_pages: usize,
    /// [`Database::connect`] only: rights to cache pages across
    /// transactions (callback locking) the client holds at most. Past it,
    /// it gives the oldest unused ones back to the server, pages no longer
    /// in its buffer first. Rights outlive a page's eviction because the
    /// object cache may still hold objects from the page, hence a bound
    /// above `client_buffer_pages` by default (4×).
    pub client_rights_max: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            storage: DbOptions {
                object_locking: true,
                ..DbOptions::default()
            },
            cache_bytes: 64 << 20,
            cache_policy: CachePolicy::Clock,
            dual_buffer: DualBufferOptions::default(),
            fault_whole_pages: false,
            object_bytes_max: 256 << 20,
            arch: Arch::Adaptive,
            adaptive: crate::remote::AdaptivePolicy::default(),
            login: None,
            tls_ca: None,
            client_buffer_pages: 4096,
            client_rights_max: 4 * 4096,
        }
    }
}

/// The workstation–server architecture of a client
/// ([`Database::connect`]); every one runs the same transactions, objects,
/// indexes and errors.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Arch {
    /// The adaptive client (the default): it speaks the object server's
    /// protocol — object locks, object callbacks, the after-images of the
    /// objects it changed at commit — and fetches a page's worth of objects
    /// in one round trip where the application uses much of each page it
    /// touches, single objects where it does not, deciding per run of
    /// pages by how much of each visited page was used
    /// ([`Options::adaptive`]; the adaptive client (`remote/adaptive.rs`) documents the
    /// policy and its hysteresis; `RemoteStats::adaptive` shows the
    /// decisions).
    #[default]
    Adaptive,
    /// Page server (DeWitt et al. §2.3): pages are fetched from the server
    /// and cached across transactions under callback locks; a commit ships
    /// the changed byte runs of each page.
    Page,
    /// File server (§2.4): the client reads and writes pages in the
    /// server's volume file itself (it must be reachable at the same path);
    /// the server grants locks, allocates pages and takes the log. See
    /// `crate::remote::RemoteStore::connect_as`.
    File,
    /// Object server (§2.2): the unit of transfer is an object. The server
    /// reads and changes objects and walks the B+-trees for the client, in
    /// transactions that lock single objects, so clients change different
    /// objects of one page at the same time; the client sends the
    /// after-images of what it changed at commit, and keeps objects and
    /// index lookups across transactions under object callbacks. See
    /// `crate::remote::ObjectStore`.
    Object,
}

pub(crate) struct Inner {
    db: Box<dyn Store>,
    cache: ObjectCache,
    meta: Meta,
    catalog: Mutex<Catalog>,
    /// Held while this session registers a type in a transaction of its own
    /// ([`Inner::register_alone`]).
    registering: Mutex<()>,
    groups: Mutex<HashMap<String, GroupId>>,
    /// Index trees known to be committed, by (class id, field). A root page
    /// never moves, so the entry stays right for the database's life.
    index_roots: Mutex<HashMap<(u32, String), cairn_storage::btree::BTree>>,
    /// Committed index entries by key ([`crate::index_cache`]).
    index_cache: IndexCache,
    index_hits: AtomicU64,
    index_misses: AtomicU64,
    fault_whole_pages: bool,
    object_bytes_max: u64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// An open database (embedded: one process, one directory).
pub struct Database {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Database").field("store", &self.inner.db).finish()
    }
}

impl Database {
    /// Opens the database in `dir`, creating it if there is none.
    pub fn open(dir: impl AsRef<Path>) -> Result<Database> {
        Database::open_with(dir, Options::default())
    }

    /// Opens the database in `dir` with `opts`, creating it if there is none.
    pub fn open_with(dir: impl AsRef<Path>, opts: Options) -> Result<Database> {
        let db = Db::open_or_create(dir.as_ref(), &opts.storage)?;
        // Under key-range locking a commit changes index leaves without a
        // page lock: it tells the index cache which, before its key locks
        // go (a weak reference: the hook must not keep the database alive).
        let inner: Arc<std::sync::OnceLock<std::sync::Weak<Inner>>> = Arc::default();
        if opts.storage.key_range_locking {
            let slot = Arc::clone(&inner);
            db.set_tree_change_hook(Box::new(move |root, pages| {
                if let Some(inner) = slot.get().and_then(std::sync::Weak::upgrade) {
                    inner.index_cache.tree(root).changed(pages);
                }
            }))?;
        }
        if opts.storage.object_locking {
            // Under object locking a commit changes pages others read
            // objects of: their images in the dual buffer go before its
            // locks do, so one locked S whole is current (`source/pages.rs`).
            let slot = Arc::clone(&inner);
            db.set_install_hook(Box::new(move |pages| {
                if let Some(inner) = slot.get().and_then(std::sync::Weak::upgrade) {
                    inner.cache.installed(pages);
                }
            }))?;
        }
        let database = Database::on_store(Box::new(db), opts)?;
        let _ = inner.set(Arc::downgrade(&database.inner));
        Ok(database)
    }

    /// Connects to `cairn serve` as a client of the architecture
    /// `opts.arch` (a page-server client by default): `url` is
    /// `cairn://HOST:PORT` or `cairn+unix:///PATH`. The database behaves as
    /// an embedded one does — the same transactions, objects, indexes and
    /// errors — with its pages fetched from (and its commits sent to) the
    /// server (`crate::remote`). The client logs in as `opts.login`, or
    /// as the user the URL names (`cairn://USER:PASSWORD@HOST:PORT`, see
    /// `crate::remote::parse_url_login`); `opts.client_buffer_pages`
    /// sizes the client's page cache.
    pub fn connect(url: &str, opts: Options) -> Result<Database> {
        let (address, mut connect) = crate::remote::parse_url_login(url, opts.tls_ca.as_deref())?;
        if opts.login.is_some() {
            connect.login = opts.login.clone();
        }
        let arch = match opts.arch {
            Arch::Page => cairn_net::message::Architecture::PAGE,
            Arch::File => cairn_net::message::Architecture::FILE,
            Arch::Object | Arch::Adaptive => {
                // The object cache holds as many bytes as the page buffer
                // would (4 KiB pages).
                let bytes = opts.client_buffer_pages.saturating_mul(4096);
                let store = if opts.arch == Arch::Adaptive {
                    crate::remote::ObjectStore::connect_adaptive(address, &connect, bytes, opts.adaptive)?
                } else {
                    crate::remote::ObjectStore::connect(address, &connect, bytes)?
                };
                let db = Database::on_store(Box::new(store.clone()), opts)?;
                // An object whose right the client lost: the copies decoded
                // from it are stale. (A weak reference, as below.)
                let weak = Arc::downgrade(&db.inner);
                store.on_object_lost(Arc::new(move |oid| {
                    if let Some(inner) = weak.upgrade() {
                        inner.cache.invalidate(oid);
                    }
                }));
                return Ok(db);
            }
        };
        let store = RemoteStore::connect_as(
            arch,
            address,
            &connect,
            opts.client_buffer_pages,
            opts.storage.txn_memory_bytes,
            opts.client_rights_max,
        )?;
        let db = Database::on_store(Box::new(store.clone()), opts)?;
        // A page another client changed: the objects and index entries
        // cached from it are stale. (A weak reference: the hook must not
        // keep the database alive.)
        let weak = Arc::downgrade(&db.inner);
        store.on_new_image(Arc::new(move |page| {
            if let Some(inner) = weak.upgrade() {
                inner.cache.invalidate_page(page);
                inner.index_cache.page_changed(page);
            }
        }));
        Ok(db)
    }

    fn on_store(db: Box<dyn Store>, opts: Options) -> Result<Database> {
        let system = db.group(catalog::SYSTEM_GROUP, true)?;
        let (meta, cat) = retry(|| {
            let mut txn = db.begin()?;
            let meta = match catalog::read_meta(&mut txn, system)? {
                Some(meta) => meta,
                None => {
                    let group = |name: &str| -> Result<GroupId> { Ok(db.group(name, false)?) };
                    match catalog_change::change(&mut txn, &[], &group, &CatalogChange::CreateMeta)? {
                        Outcome::Meta(meta) => meta,
                        other => return Err(Error::Internal(format!("creating the catalog answered {other:?}"))),
                    }
                }
            };
            let mut cat = Catalog::default();
            catalog::load(&mut txn, &meta, &mut cat)?;
            txn.commit()?;
            Ok((meta, cat))
        })?;
        let page_size = db.page_size();
        let dual = crate::dual::DualBuffer::new(crate::dual::DualConfig {
            budget_bytes: opts.dual_buffer.bytes,
            page_size,
            strategy: opts.dual_buffer.strategy,
            page_share: opts.dual_buffer.page_share,
        })?;
        Ok(Database {
            inner: Arc::new(Inner {
                db,
                cache: ObjectCache::new(opts.cache_bytes, opts.cache_policy, dual),
                meta,
                catalog: Mutex::new(cat),
                registering: Mutex::new(()),
                groups: Mutex::new(HashMap::new()),
                index_roots: Mutex::new(HashMap::new()),
                index_cache: IndexCache::new((opts.cache_bytes / 64).max(1024)),
                index_hits: AtomicU64::new(0),
                index_misses: AtomicU64::new(0),
                fault_whole_pages: opts.fault_whole_pages,
                object_bytes_max: opts.object_bytes_max,
            }),
        })
    }

    /// Starts a transaction.
    pub fn begin(&self) -> Result<Transaction<'_>> {
        self.inner.begin()
    }

    /// Starts a read-only transaction at a snapshot of the last committed
    /// state: it sees every commit that ended before it began and none
    /// after, takes no lock — so it never waits for a writer, never makes
    /// one wait, and never aborts for a conflict — and reads around the
    /// shared caches (what they hold may be newer than its snapshot). A
    /// change is [`Error::ReadOnly`]; `select` and `count` (group scans)
    /// are not offered at a snapshot yet. Embedded databases, and every
    /// client of `cairn serve` (the server keeps the versions; one round
    /// trip to begin): a page client reads a page it caches under a right
    /// when the snapshot sees that image, else asks the server for the
    /// page as of the snapshot; an object or adaptive client reads an
    /// object or lookup it kept under a right taken in before the snapshot
    /// began and still held, else asks the server. A snapshot that runs so long that the
    /// versions it needs outgrow `Options::storage.snapshot_bytes_max` (the
    /// server's, for a client) ends early: its next read fails, and a new
    /// one sees the present.
    pub fn begin_read_only(&self) -> Result<Transaction<'_>> {
        let txn = self.inner.db.begin_read_only()?;
        let mut t = self.inner.transaction(txn);
        t.read_only = true;
        Ok(t)
    }

    /// The object cache's counters.
    pub fn cache_stats(&self) -> CacheStats {
        CacheStats {
            index_hits: self.inner.index_hits.load(Ordering::Relaxed),
            index_misses: self.inner.index_misses.load(Ordering::Relaxed),
            ..self.inner.cache.stats()
        }
    }

    /// Empties the object cache (and the page buffer pool): a cold start.
    pub fn clear_caches(&self) -> Result<()> {
        self.inner.cache.clear();
        self.inner.index_cache.clear();
        self.inner.db.evict_cache()?;
        Ok(())
    }

    /// The storage engine underneath, if it is embedded.
    pub fn storage(&self) -> Option<&Db> {
        self.inner.db.storage()
    }

    /// The client backend underneath, if the database is remote (crash
    /// tests inject faults there).
    #[doc(hidden)]
    pub fn remote_store(&self) -> Option<&Arc<RemoteStore>> {
        self.inner.db.remote_store()
    }

    /// The client's counters (round trips, bytes, pages shipped), if the
    /// database is remote.
    pub fn remote_stats(&self) -> Option<RemoteStats> {
        self.inner.db.stats()
    }

    /// The lock-manager counters of the server this client is connected
    /// to — lock requests, waits, deadlocks, timeouts and the time spent
    /// waiting, of all its sessions together since it opened the database
    /// (one LOCK_STATS round trip, which any session may make; it changes
    /// nothing) — or `None` for an embedded database, whose counters are
    /// its own: `storage().map(|db| db.stats().locks)`.
    pub fn server_lock_stats(&self) -> Result<Option<cairn_storage::lock::LockStats>> {
        Ok(self.inner.db.server_lock_stats()?)
    }

    /// Embedded: checkpoints and closes. Remote: disconnects (the server's
    /// database stays open for its other clients).
    pub fn close(self) -> Result<()> {
        match Arc::try_unwrap(self.inner) {
            Ok(inner) => Ok(inner.db.close()?),
            Err(inner) => Ok(inner.db.checkpoint()?),
        }
    }

    /// Registers type `T` in the catalog (done on first use anyway); fails
    /// with `SchemaMismatch` if its definition changed incompatibly.
    pub fn register<T: Persistent>(&self) -> Result<()> {
        self.inner.register_alone::<T>()
    }
}

/// Runs `f` again while it fails with a deadlock or lock timeout (a few times).
fn retry<R>(mut f: impl FnMut() -> Result<R>) -> Result<R> {
    let mut tries = 0;
    loop {
        match f() {
            Err(e) if e.is_retryable() && tries < 5 => tries += 1,
            other => return other,
        }
    }
}

impl Inner {
    fn begin(&self) -> Result<Transaction<'_>> {
        let txn = self.db.begin()?;
        Ok(self.transaction(txn))
    }

    fn transaction(&self, txn: Tx) -> Transaction<'_> {
        Transaction {
            inner: self,
            buffered: write::Buffered::new(&self.cache, txn.id()),
            txn,
            written: Default::default(),
            appended: Default::default(),
            lists: Vec::new(),
            overlay: cairn_storage::fxhash::FxHashMap::default(),
            local: Vec::new(),
            local_hits: 0,
            index_roots: HashMap::new(),
            classes: Vec::new(),
            trees: Vec::new(),
            key: Vec::new(),
            found: Vec::new(),
            index_hits: 0,
            index_misses: 0,
            catalog_epoch: None,
            catalog: None,
            read_only: false,
        }
    }

    /// Refuses a record longer than [`Options::object_bytes_max`].
    fn check_len(&self, oid: Oid, len: u64) -> Result<()> {
        if len > self.object_bytes_max {
            return Err(Error::ObjectTooLarge {
                oid,
                len,
                limit: self.object_bytes_max,
            });
        }
        Ok(())
    }

    fn group(&self, name: &str) -> Result<GroupId> {
        if let Some(g) = lock(&self.groups).get(name) {
            return Ok(*g);
        }
        let g = self.db.group(name, true)?;
        lock(&self.groups).insert(name.to_string(), g);
        Ok(g)
    }

    fn encode<T: Persistent>(&self, c: ClassInfo, v: &T) -> Result<Vec<u8>> {
        // Most records are small: one allocation instead of a doubling series.
        let mut w = Writer::with_capacity(256);
        w.put(&c.id.to_le_bytes());
        w.put(&c.version.to_le_bytes());
        v.encode_fields(&mut w);
        Ok(w.into_bytes())
    }

    fn decode<T: Persistent>(&self, c: ClassInfo, oid: Oid, bytes: &[u8]) -> Result<T> {
        decode_record(c, oid, bytes, || lock(&self.catalog))
    }
}

/// Decodes a record of class `c` (at this session's version `c.version`)
/// into a `T`; `catalog` gives the catalog when the record is of another
/// class or version (so the caller decides whether to take its mutex).
fn decode_record<T: Persistent, C: std::ops::Deref<Target = Catalog>>(
    c: ClassInfo,
    oid: Oid,
    bytes: &[u8],
    catalog: impl FnOnce() -> C,
) -> Result<T> {
    let mut r = Reader::new(bytes);
    let dec = |source| Error::Decode { oid, source };
    let class = u32::from_le_bytes(r.take_array("class id").map_err(dec)?);
    let version = u16::from_le_bytes(r.take_array("schema version").map_err(dec)?);
    if class != c.id {
        let found = catalog()
            .names
            .get(&class)
            .cloned()
            .unwrap_or_else(|| format!("class {class}"));
        return Err(Error::WrongType {
            oid,
            expected: T::NAME.into(),
            found,
        });
    }
    if version == c.version {
        let v = T::decode_fields(&mut r).map_err(dec)?;
        r.finish(T::NAME).map_err(dec)?;
        return Ok(v);
    }
    let fields = catalog()
        .schemas
        .get(&(class, version))
        .cloned()
        .ok_or_else(|| Error::SchemaMismatch {
            type_name: T::NAME.into(),
            field: String::new(),
            reason: format!("object {oid} has schema version {version}, which the catalog does not hold"),
        })?;
    let mut values = Vec::with_capacity(fields.len());
    for f in &fields {
        values.push((f.name.clone(), decode_value(&f.ty, &mut r).map_err(dec)?));
    }
    r.finish(T::NAME).map_err(dec)?;
    T::from_values(values).map_err(dec)
}

/// A typed index over the objects of `T`, on the field marked
/// `#[cairn(index)]` named `field`, with keys of type `K`.
pub struct Index<K, T> {
    field: &'static str,
    _p: PhantomData<fn() -> (K, T)>,
}

impl<K, T> Index<K, T> {
    /// The index on `field`.
    pub const fn on(field: &'static str) -> Index<K, T> {
        Index { field, _p: PhantomData }
    }
}

/// A transaction. Dropping it without `commit` aborts it.
pub struct Transaction<'db> {
    /// Ends the transaction's part in the dual buffer when it is dropped:
    /// declared before `txn`, so it is dropped before the locks go.
    buffered: write::Buffered<'db>,
    inner: &'db Inner,
    txn: Tx,
    overlay: cairn_storage::fxhash::FxHashMap<Oid, CachedObject>,
    /// Objects this transaction has already locked and fetched, by cache
    /// slot: (generation, object). Following a swizzled reference again is an
    /// index into this vector and a generation check — no lock, no hash. It
    /// keeps the objects alive until the transaction ends, even if the cache
    /// evicts them meanwhile (they cannot change: this transaction holds
    /// their home pages' locks).
    local: Vec<Option<(u32, Oid, CachedObject)>>,
    /// Hits answered from `local`, added to the cache's counters in batches.
    local_hits: u64,
    /// Index trees this transaction looked up or created; they join the
    /// database's table when it commits (a tree created by a transaction
    /// that aborts must not be remembered).
    index_roots: HashMap<(u32, String), cairn_storage::btree::BTree>,
    /// Classes this transaction has used, by Rust type: skips the catalog's
    /// mutex and name hash on every decode.
    classes: Vec<(TypeId, ClassInfo)>,
    /// Index trees this transaction has used, by (type, field): skips the
    /// class lookup, a `String` and the shared table on every `find`.
    /// The field's stored type is kept to check a query's key type.
    trees: Vec<(TypeId, &'static str, BTree, Arc<TreeCache>, TypeDesc)>,
    /// Scratch space for an encoded index key.
    key: Vec<u8>,
    /// Scratch for `find_one`'s answer, reused so a lookup allocates nothing.
    found: Vec<Oid>,
    /// Index lookups answered from / missing the index cache, added to the
    /// database's counters when the transaction ends.
    index_hits: u64,
    index_misses: u64,
    /// The catalog epoch this transaction read (and holds share-locked to
    /// its end) before it first relied on the session's catalog; `None`
    /// until then ([`Transaction::ensure_catalog`]).
    catalog_epoch: Option<u64>,
    /// This transaction's own copy of the catalog, once it has registered
    /// something: uncommitted, so the session's copy must not see it. (The
    /// next transaction finds the epoch moved and reloads.)
    catalog: Option<Box<Catalog>>,
    /// A read-only transaction at a snapshot ([`Database::begin_read_only`]):
    /// it reads around the shared caches and changes nothing.
    read_only: bool,
    /// The records this transaction changed, as last encoded: its own
    /// reads of them (to change them again) decode these, since a change
    /// may still be held in the dual buffer as a modified copy.
    written: cairn_storage::fxhash::FxHashMap<Oid, Arc<[u8]>>,
    /// Objects this transaction appended to under append locks, not read
    /// since: the store keeps the appends, so a read of one goes there
    /// ([`Transaction::append`]).
    appended: cairn_storage::fxhash::FxHashSet<Oid>,
    /// List fields this transaction appended to, by type.
    lists: Vec<(TypeId, Arc<cairn_schema::append::ListField>)>,
}

impl std::fmt::Debug for Transaction<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transaction").field("txn", &self.txn.id()).finish()
    }
}

/// Bytes of a record's header: class id (u32) and schema version (u16).
const HEADER_SIZE: usize = 6;

/// The record header of class `c` at its current schema version.
fn header(c: ClassInfo) -> [u8; HEADER_SIZE] {
    let mut h = [0u8; HEADER_SIZE];
    h[..4].copy_from_slice(&c.id.to_le_bytes());
    h[4..].copy_from_slice(&c.version.to_le_bytes());
    h
}

/// The stored type of `T`'s `field`, if the field is indexed; else
/// [`Error::NoIndex`].
fn indexed_field_type<T: Persistent>(field: &str) -> Result<TypeDesc> {
    let no_index = || Error::NoIndex {
        type_name: T::NAME.into(),
        field: field.into(),
        indexed: if T::INDEXED_FIELDS.is_empty() {
            "none".into()
        } else {
            T::INDEXED_FIELDS.join(", ")
        },
    };
    if !T::INDEXED_FIELDS.contains(&field) {
        return Err(no_index());
    }
    T::fields()
        .into_iter()
        .find(|f| f.name == field)
        .map(|f| f.ty)
        .ok_or_else(no_index)
}

/// Checks that keys of type `K` are keys of `T`'s `field`, of type `field_ty`.
fn check_key_type<K: IndexKey, T: Persistent>(field: &str, field_ty: &TypeDesc) -> Result<()> {
    let key_ty = K::key_type();
    if key_ty != *field_ty {
        return Err(Error::IndexKeyType {
            type_name: T::NAME.into(),
            field: field.into(),
            field_type: field_ty.to_string(),
            key_type: key_ty.to_string(),
        });
    }
    Ok(())
}

/// An index entry whose value is not an OID.
fn malformed(tree: &cairn_storage::btree::BTree, field: &str) -> Error {
    Error::Corrupt {
        page: tree.root(),
        reason: format!("index on {field} holds a malformed OID"),
    }
}

impl<'db> Transaction<'db> {
    /// Creates an object in the `default` group.
    pub fn create<T: Persistent>(&mut self, value: T) -> Result<Ref<T>> {
        self.refuse_if_read_only()?;
        self.create_in("default", value)
    }

    /// Creates an object in the named group (created if missing).
    pub fn create_in<T: Persistent>(&mut self, group: &str, value: T) -> Result<Ref<T>> {
        self.refuse_if_read_only()?;
        let g = self.inner.group(group)?;
        let c = self.writable_class_of::<T>()?;
        let bytes = self.inner.encode(c, &value)?;
        let oid = self.txn.create(g, &bytes)?;
        self.after_create(oid, value)
    }

    /// Creates an object near `near` (on its page if it fits, else within
    /// its clustering region), in `near`'s group.
    pub fn create_near<T: Persistent, U>(&mut self, near: &Ref<U>, value: T) -> Result<Ref<T>> {
        self.refuse_if_read_only()?;
        let c = self.writable_class_of::<T>()?;
        let bytes = self.inner.encode(c, &value)?;
        let oid = self.txn.create_near(near.oid(), &bytes)?;
        self.after_create(oid, value)
    }

    fn after_create<T: Persistent>(&mut self, oid: Oid, value: T) -> Result<Ref<T>> {
        self.txn.lock_to_change(oid)?;
        for (field, key) in value.index_keys() {
            let tree = self.index_tree::<T>(field, true)?.expect("created");
            let ops = vec![TreeOp::Insert {
                key,
                value: oid.to_bytes().to_vec(),
            }];
            self.change_tree(&tree, ops)?;
        }
        self.overlay.insert(oid, Arc::new(value));
        Ok(Ref::from_oid(oid))
    }

    /// The tree of the index on `T`'s `field`, if it exists, through this
    /// transaction's table of trees it has used; checks first that `field`
    /// is indexed and that `K` is its type.
    fn find_tree<K: IndexKey, T: Persistent>(
        &mut self,
        field: &'static str,
    ) -> Result<Option<(cairn_storage::btree::BTree, Arc<TreeCache>)>> {
        let ty = TypeId::of::<T>();
        if let Some((_, _, t, c, field_ty)) = self.trees.iter().find(|(t, f, ..)| *t == ty && *f == field) {
            check_key_type::<K, T>(field, field_ty)?;
            return Ok(Some((*t, Arc::clone(c))));
        }
        let field_ty = indexed_field_type::<T>(field)?;
        check_key_type::<K, T>(field, &field_ty)?;
        let Some(tree) = self.index_tree::<T>(field, false)? else {
            return Ok(None);
        };
        let cache = self.inner.index_cache.tree(tree.root());
        self.trees.push((ty, field, tree, Arc::clone(&cache), field_ty));
        Ok(Some((tree, cache)))
    }

    /// Applies `ops` to an index tree, then gives every page it changed,
    /// allocated or freed a new version in the tree's cache (this
    /// transaction holds their exclusive locks), so cached entries read from
    /// them stop validating ([`crate::index_cache`]). Also on failure: the
    /// pages may have changed before it.
    fn change_tree(&mut self, tree: &cairn_storage::btree::BTree, ops: Vec<TreeOp>) -> Result<()> {
        let mut pages = Vec::new();
        let r = self.txn.index_apply(tree, ops, &mut pages);
        self.inner.index_cache.tree(tree.root()).changed(&pages);
        Ok(r?)
    }

    /// Looks `self.key` up in `tree` ([`Source::index_lookup`]: through
    /// the index cache where the store validates it by leaf locks),
    /// appending the OIDs (the first only, with `first_only`) to `out`.
    fn index_lookup(
        &mut self,
        tree: cairn_storage::btree::BTree,
        cache: &TreeCache,
        field: &str,
        first_only: bool,
        out: &mut Vec<Oid>,
    ) -> Result<()> {
        if self.read_only {
            // At a snapshot: the tree as of it, not the cache's entries.
            let mut bad = false;
            let collect = source::collect_oids(out, first_only, &mut bad);
            self.txn.tree_get_each(&tree, &self.key, first_only, collect)?;
            self.index_misses += 1;
            return if bad { Err(malformed(&tree, field)) } else { Ok(()) };
        }
        let max_entries = self.inner.index_cache.max_entries;
        let answer = self
            .txn
            .index_lookup(tree, &self.key, first_only, cache, max_entries, out)?;
        self.count_index_answer(answer, &tree, field)
    }

    /// Counts a lookup's answer as an index cache hit or miss; a malformed
    /// tree is an error naming it.
    fn count_index_answer(
        &mut self,
        answer: IndexAnswer,
        tree: &cairn_storage::btree::BTree,
        field: &str,
    ) -> Result<()> {
        match answer {
            IndexAnswer::Cached => self.index_hits += 1,
            IndexAnswer::Read => self.index_misses += 1,
            IndexAnswer::Malformed => {
                self.index_misses += 1;
                return Err(malformed(tree, field));
            }
        }
        Ok(())
    }

    /// [`Error::ReadOnly`] for a read-only transaction.
    fn refuse_if_read_only(&self) -> Result<()> {
        if self.read_only {
            return Err(Error::ReadOnly(format!("txn {}", self.txn.id())));
        }
        Ok(())
    }

    fn index_tree<T: Persistent>(&mut self, field: &str, create: bool) -> Result<Option<cairn_storage::btree::BTree>> {
        let class = self.class_of::<T>()?;
        let key = (class.id, field.to_string());
        if let Some(t) = lock(&self.inner.index_roots).get(&key) {
            return Ok(Some(*t));
        }
        if let Some(t) = self.index_roots.get(&key) {
            return Ok(Some(*t));
        }
        let group = if create {
            Some(self.inner.group(catalog::INDEX_GROUP)?)
        } else {
            None
        };
        let mut tree = catalog::index_tree(&mut self.txn, &self.inner.meta, class.id, field)?;
        if let (None, Some(group)) = (tree, group) {
            let created = self.txn.tree_create(group, false)?;
            let change = CatalogChange::AddIndex {
                class: class.id,
                field: field.to_string(),
                root: created.root(),
            };
            self.inner.change_catalog(&mut self.txn, change)?;
            tree = Some(created);
        }
        if let Some(t) = tree {
            self.index_roots.insert(key, t);
        }
        Ok(tree)
    }

    /// Names an object: `root(name)` finds it again in any later transaction.
    pub fn set_root<T>(&mut self, name: &str, r: &Ref<T>) -> Result<()> {
        self.refuse_if_read_only()?;
        let change = CatalogChange::SetRoot {
            name: name.to_string(),
            oid: Some(r.oid()),
        };
        self.inner.change_catalog(&mut self.txn, change).map(drop)
    }

    /// Removes a name.
    pub fn remove_root(&mut self, name: &str) -> Result<()> {
        self.refuse_if_read_only()?;
        let change = CatalogChange::SetRoot {
            name: name.to_string(),
            oid: None,
        };
        self.inner.change_catalog(&mut self.txn, change).map(drop)
    }

    /// The object named `name`.
    pub fn root<T: Persistent>(&mut self, name: &str) -> Result<Ref<T>> {
        match catalog::get_root(&mut self.txn, &self.inner.meta, name)? {
            Some(oid) => Ok(Ref::from_oid(oid)),
            None => Err(Error::NoRoot { name: name.to_string() }),
        }
    }

    /// The objects whose indexed field equals `key`. A field without
    /// `#[cairn(index)]` is [`Error::NoIndex`], a key of another type than
    /// the field's [`Error::IndexKeyType`] (as for every index query).
    pub fn find<K: IndexKey, T: Persistent>(&mut self, index: &Index<K, T>, key: &K) -> Result<Vec<Ref<T>>> {
        let Some((tree, cache)) = self.find_tree::<K, T>(index.field)? else {
            return Ok(Vec::new());
        };
        self.key.clear();
        key.key_bytes(&mut self.key);
        let mut oids = Vec::new();
        self.index_lookup(tree, &cache, index.field, false, &mut oids)?;
        Ok(oids.into_iter().map(Ref::from_oid).collect())
    }

    /// The first object whose indexed field equals `key` (for unique fields).
    pub fn find_one<K: IndexKey, T: Persistent>(&mut self, index: &Index<K, T>, key: &K) -> Result<Option<Ref<T>>> {
        let Some((tree, cache)) = self.find_tree::<K, T>(index.field)? else {
            return Ok(None);
        };
        self.key.clear();
        key.key_bytes(&mut self.key);
        let mut oids = std::mem::take(&mut self.found);
        oids.clear();
        let r = self.index_lookup(tree, &cache, index.field, true, &mut oids);
        let first = oids.first().copied();
        self.found = oids;
        r?;
        Ok(first.map(Ref::from_oid))
    }

    /// The first object of each of `keys` (as [`Transaction::find_one`]),
    /// locked for update, in one global order, before anything of them is
    /// read: what a transaction about to change the objects it looks up
    /// should use. Looking them up with `find_one` and then calling
    /// [`Transaction::prefetch_for_update`] reads them first on an object
    /// server's client (the lookup brings the object under S), and two
    /// such transactions that found one object each hold S and want X: a
    /// deadlock no lock order prevents.
    pub fn find_for_update<K: IndexKey, T: Persistent>(
        &mut self,
        index: &Index<K, T>,
        keys: &[K],
    ) -> Result<Vec<Option<Ref<T>>>> {
        let found = self.find_unread(index, keys)?;
        let lock: Vec<Oid> = found.iter().flatten().copied().collect();
        self.txn.prefetch_for_update(&lock)?;
        Ok(found.into_iter().map(|o| o.map(Ref::from_oid)).collect())
    }

    /// The first object of each of `keys`, for a transaction about to
    /// [`Transaction::append`] to them, looked up as
    /// [`Transaction::find_for_update`] looks them up: where objects are
    /// locked (embedded, by default) only those whose appends the store
    /// cannot keep (large records) are then locked for update, in one
    /// global order — each other append takes its own append lock, which
    /// other appenders share; where pages are locked (the page and file
    /// clients) none is locked now: the appends are kept to the commit,
    /// which locks their pages together; an object client's server takes
    /// the appends' locks before the commit.
    pub fn find_to_append<K: IndexKey, T: Persistent>(
        &mut self,
        index: &Index<K, T>,
        keys: &[K],
    ) -> Result<Vec<Option<Ref<T>>>> {
        if !self.txn.keeps_appends() {
            return self.find_for_update(index, keys);
        }
        let found = self.find_unread(index, keys)?;
        let oids: Vec<Oid> = found.iter().flatten().copied().collect();
        self.txn.prepare_appends(&oids)?;
        Ok(found.into_iter().map(|o| o.map(Ref::from_oid)).collect())
    }

    /// The first object of each of `keys`, looked up without reading it.
    fn find_unread<K: IndexKey, T: Persistent>(&mut self, index: &Index<K, T>, keys: &[K]) -> Result<Vec<Option<Oid>>> {
        self.refuse_if_read_only()?;
        let Some((tree, cache)) = self.find_tree::<K, T>(index.field)? else {
            return Ok(vec![None; keys.len()]);
        };
        let max_entries = self.inner.index_cache.max_entries;
        let encoded: Vec<Vec<u8>> = keys
            .iter()
            .map(|key| {
                let mut k = Vec::new();
                key.key_bytes(&mut k);
                k
            })
            .collect();
        let answers = self.txn.index_lookups_to_update(tree, &encoded, &cache, max_entries)?;
        let mut found = Vec::with_capacity(keys.len());
        for (answer, first) in answers {
            self.count_index_answer(answer, &tree, index.field)?;
            found.push(first);
        }
        Ok(found)
    }

    /// The objects whose indexed field lies between `lo` and `hi`, in key order.
    pub fn find_range<K: IndexKey, T: Persistent>(
        &mut self,
        index: &Index<K, T>,
        lo: Bound<&K>,
        hi: Bound<&K>,
    ) -> Result<Vec<Ref<T>>> {
        let Some((tree, _)) = self.find_tree::<K, T>(index.field)? else {
            return Ok(Vec::new());
        };
        let enc = |b: Bound<&K>| -> Bound<Vec<u8>> {
            match b {
                Bound::Included(k) => {
                    let mut v = Vec::new();
                    k.key_bytes(&mut v);
                    Bound::Included(v)
                }
                Bound::Excluded(k) => {
                    let mut v = Vec::new();
                    k.key_bytes(&mut v);
                    Bound::Excluded(v)
                }
                Bound::Unbounded => Bound::Unbounded,
            }
        };
        let (lo, hi) = (enc(lo), enc(hi));
        let mut out = Vec::new();
        let mut bad = false;
        self.txn.tree_scan(
            &tree,
            lo.as_ref().map(|v| &v[..]),
            hi.as_ref().map(|v| &v[..]),
            |_, v| {
                match Oid::from_exact(v) {
                    Some(oid) => out.push(Ref::from_oid(oid)),
                    None => bad = true,
                }
                !bad
            },
        )?;
        if bad {
            return Err(malformed(&tree, index.field));
        }
        Ok(out)
    }

    /// The storage transaction underneath (for tools and tests), if it
    /// runs in this process: `None` for an object-server client, whose
    /// storage transaction is the server's. Under a strategy that keeps
    /// changes in the dual buffer (EOC, LOC, LOC−, LOC+), it holds this
    /// transaction's changes once [`Transaction::flush`] has run.
    pub fn storage(&mut self) -> Option<&mut Txn> {
        self.txn.storage()
    }

    /// Commits: the changes are durable when this returns Ok.
    pub fn commit(mut self) -> Result<()> {
        self.flush_hits();
        self.flush_buffered()?;
        // Appends kept to commit (page locking) are applied now, under X
        // on their objects' pages: the copies of those objects another
        // transaction cached while this one held no lock go before the
        // locks do, as the images of the pages below. (Where objects are
        // locked, nobody cached them past the append locks; they go too.)
        self.txn.apply_appends()?;
        for oid in self.appended.drain() {
            self.inner.cache.invalidate(oid);
        }
        let roots = std::mem::take(&mut self.index_roots);
        let changed = self.catalog.take();
        // Page images of what this transaction changed go before its
        // exclusive locks do, so no other transaction can read them stale.
        for page in self.txn.changed_pages() {
            self.inner.cache.invalidate_image(page);
        }
        self.txn.commit()?;
        if let Some(cat) = changed {
            // Committed: the session's catalog becomes this one, unless a
            // later epoch is already there. Trees of dropped indexes must go.
            let mut session = lock(&self.inner.catalog);
            if cat.epoch > session.epoch {
                *session = *cat;
                lock(&self.inner.index_roots).clear();
            }
        }
        if !roots.is_empty() {
            lock(&self.inner.index_roots).extend(roots);
        }
        Ok(())
    }

    /// Aborts: nothing the transaction did remains.
    pub fn abort(mut self) -> Result<()> {
        self.flush_hits();
        self.buffered.end();
        Ok(self.txn.abort()?)
    }
}
