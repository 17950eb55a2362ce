//! The embedded [`Database`] and its [`Transaction`]s.
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

use std::collections::HashMap;
use std::marker::PhantomData;
use std::ops::Bound;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use cairn_storage::btree::Direction;
use cairn_storage::{Db, DbOptions, GroupId, Oid, Txn};

use crate::cache::{CachePolicy, CacheStats, CachedObject, ObjectCache};
use crate::catalog::{self, Catalog, ClassInfo, Meta};
use crate::codec::{decode_value, Persistent, Reader, Writer};
use crate::error::{Error, Result};
use crate::fields::IndexKey;
use crate::reference::Ref;

/// How to open a database.
#[derive(Clone, Debug)]
pub struct Options {
    /// The storage engine's options (page size, buffer pool, log, locks).
    pub storage: DbOptions,
    /// Bytes of decoded objects the object cache may hold.
    pub cache_bytes: usize,
    /// The object cache's replacement policy.
    pub cache_policy: CachePolicy,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            storage: DbOptions::default(),
            cache_bytes: 64 << 20,
            cache_policy: CachePolicy::Lru,
        }
    }
}

pub(crate) struct Inner {
    db: Db,
    cache: ObjectCache,
    meta: Meta,
    catalog: Mutex<Catalog>,
    groups: Mutex<HashMap<String, GroupId>>,
    /// Index trees known to be committed, by (class id, field). A root page
    /// never moves, so the entry stays right for the database's life.
    index_roots: Mutex<HashMap<(u32, String), cairn_storage::btree::BTree>>,
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
        f.debug_struct("Database").field("dir", &self.inner.db.dir()).finish()
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
        let system = match db.group(catalog::SYSTEM_GROUP) {
            Ok(g) => g,
            Err(_) => db.create_group(catalog::SYSTEM_GROUP)?,
        };
        let (meta, cat) = retry(|| {
            let mut txn = db.begin()?;
            let meta = catalog::open_meta(&mut txn, system)?;
            let mut cat = Catalog::default();
            catalog::load(&mut txn, &meta, &mut cat)?;
            txn.commit()?;
            Ok((meta, cat))
        })?;
        Ok(Database {
            inner: Arc::new(Inner {
                db,
                cache: ObjectCache::new(opts.cache_bytes, opts.cache_policy),
                meta,
                catalog: Mutex::new(cat),
                groups: Mutex::new(HashMap::new()),
                index_roots: Mutex::new(HashMap::new()),
            }),
        })
    }

    /// Starts a transaction.
    pub fn begin(&self) -> Result<Transaction<'_>> {
        Ok(Transaction {
            inner: &self.inner,
            txn: self.inner.db.begin()?,
            overlay: HashMap::new(),
            local: Vec::new(),
            local_hits: 0,
            index_roots: HashMap::new(),
        })
    }

    /// The object cache's counters.
    pub fn cache_stats(&self) -> CacheStats {
        self.inner.cache.stats()
    }

    /// Empties the object cache (and the page buffer pool): a cold start.
    pub fn clear_caches(&self) -> Result<()> {
        self.inner.cache.clear();
        self.inner.db.evict_cache()?;
        Ok(())
    }

    /// The storage engine underneath.
    pub fn storage(&self) -> &Db {
        &self.inner.db
    }

    /// Checkpoints and closes.
    pub fn close(self) -> Result<()> {
        match Arc::try_unwrap(self.inner) {
            Ok(inner) => Ok(inner.db.close()?),
            Err(inner) => Ok(inner.db.checkpoint()?),
        }
    }

    /// Registers type `T` in the catalog (done on first use anyway); fails
    /// with `SchemaMismatch` if its definition changed incompatibly.
    pub fn register<T: Persistent>(&self) -> Result<()> {
        self.inner.class::<T>().map(|_| ())
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
    /// The class of `T`, registering it (in a transaction of its own) on first use.
    fn class<T: Persistent>(&self) -> Result<ClassInfo> {
        let mut cat = lock(&self.catalog);
        if let Some(c) = cat.registered.get(T::NAME) {
            return Ok(c.clone());
        }
        let fields = T::fields();
        let info = retry(|| {
            let mut txn = self.db.begin()?;
            let info = catalog::register(&mut txn, &self.meta, &mut cat, T::NAME, &fields)?;
            txn.commit()?;
            Ok(info)
        })?;
        cat.registered.insert(T::NAME.to_string(), info.clone());
        Ok(info)
    }

    fn group(&self, name: &str) -> Result<GroupId> {
        if let Some(g) = lock(&self.groups).get(name) {
            return Ok(*g);
        }
        let g = match self.db.group(name) {
            Ok(g) => g,
            Err(_) => match self.db.create_group(name) {
                Ok(g) => g,
                // Another thread made it first.
                Err(cairn_storage::Error::GroupExists(_)) => self.db.group(name)?,
                Err(e) => return Err(e.into()),
            },
        };
        lock(&self.groups).insert(name.to_string(), g);
        Ok(g)
    }

    fn encode<T: Persistent>(&self, v: &T) -> Result<Vec<u8>> {
        let c = self.class::<T>()?;
        let mut w = Writer::new();
        w.put(&c.id.to_le_bytes());
        w.put(&c.version.to_le_bytes());
        v.encode_fields(&mut w);
        Ok(w.into_bytes())
    }

    fn decode<T: Persistent>(&self, oid: Oid, bytes: &[u8]) -> Result<T> {
        let c = self.class::<T>()?;
        let mut r = Reader::new(bytes);
        let dec = |source| Error::Decode { oid, source };
        let class = u32::from_le_bytes(r.take_array("class id").map_err(dec)?);
        let version = u16::from_le_bytes(r.take_array("schema version").map_err(dec)?);
        if class != c.id {
            let found = lock(&self.catalog)
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
        let fields = lock(&self.catalog)
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
    inner: &'db Inner,
    txn: Txn,
    overlay: HashMap<Oid, CachedObject>,
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
}

impl std::fmt::Debug for Transaction<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transaction").field("txn", &self.txn.id()).finish()
    }
}

fn downcast<T: Persistent>(oid: Oid, obj: CachedObject) -> Result<Arc<T>> {
    obj.downcast::<T>().map_err(|_| Error::WrongType {
        oid,
        expected: T::NAME.into(),
        found: "another type (cached)".into(),
    })
}

impl<'db> Transaction<'db> {
    /// Creates an object in the `default` group.
    pub fn create<T: Persistent>(&mut self, value: T) -> Result<Ref<T>> {
        self.create_in("default", value)
    }

    /// Creates an object in the named group (created if missing).
    pub fn create_in<T: Persistent>(&mut self, group: &str, value: T) -> Result<Ref<T>> {
        let g = self.inner.group(group)?;
        let bytes = self.inner.encode(&value)?;
        let oid = self.txn.create(g, &bytes)?;
        self.after_create(oid, value)
    }

    /// Creates an object near `near` (on its page if it fits, else within
    /// its clustering region), in `near`'s group.
    pub fn create_near<T: Persistent, U>(&mut self, near: &Ref<U>, value: T) -> Result<Ref<T>> {
        let bytes = self.inner.encode(&value)?;
        let oid = self.txn.create_near(near.oid(), &bytes)?;
        self.after_create(oid, value)
    }

    fn after_create<T: Persistent>(&mut self, oid: Oid, value: T) -> Result<Ref<T>> {
        self.txn.lock_page(oid.page, true)?;
        for (field, key) in value.index_keys() {
            let tree = self.index_tree::<T>(field, true)?.expect("created");
            tree.insert(&mut self.txn, &key, &oid.to_bytes())?;
        }
        self.overlay.insert(oid, Arc::new(value));
        Ok(Ref::from_oid(oid))
    }

    fn index_tree<T: Persistent>(&mut self, field: &str, create: bool) -> Result<Option<cairn_storage::btree::BTree>> {
        let class = self.inner.class::<T>()?;
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
        let tree = catalog::index_tree(&mut self.txn, &self.inner.meta, class.id, field, group)?;
        if let Some(t) = tree {
            self.index_roots.insert(key, t);
        }
        Ok(tree)
    }

    /// Follows a reference: the object, from this transaction's changes, the
    /// cache (through the swizzled reference when it is still valid), or the
    /// store (a fault, which caches it and swizzles the reference).
    pub fn get<T: Persistent>(&mut self, r: &Ref<T>) -> Result<Arc<T>> {
        let oid = r.oid();
        if !self.overlay.is_empty() {
            if let Some(o) = self.overlay.get(&oid) {
                return downcast(oid, o.clone());
            }
        }
        let swizzle = r.swizzled();
        if let Some((slot, gen)) = swizzle {
            // Fast path: already fetched by this transaction.
            // The OID is compared too: a reference may carry a swizzle from
            // another database instance (kept across a reopen), whose slot
            // numbers mean nothing here.
            if let Some(Some((g, o, obj))) = self.local.get(slot as usize) {
                if *g == gen && *o == oid {
                    let obj = obj.clone();
                    self.local_hits += 1;
                    if self.local_hits >= 4096 {
                        self.flush_hits();
                    }
                    return downcast(oid, obj);
                }
            }
        }
        let me = self.txn.id().0;
        let cache = &self.inner.cache;
        if let Some((slot, gen)) = swizzle {
            if let Some(hit) = cache.get_slot(slot, gen, oid) {
                if hit.last_txn != me {
                    // Lock first, then trust the cache: a writer removes the
                    // object under its exclusive lock.
                    self.txn.lock_page(oid.page, false)?;
                }
                if let Some(hit) = cache.get_slot(slot, gen, oid) {
                    cache.set_last_txn(slot, gen, me);
                    self.remember(slot, gen, oid, &hit.obj);
                    return downcast(oid, hit.obj);
                }
            }
            r.unswizzle();
        }
        self.txn.lock_page(oid.page, false)?;
        if let Some(hit) = cache.lookup(oid, me) {
            r.swizzle(hit.slot, hit.gen);
            cache.note_swizzle();
            self.remember(hit.slot, hit.gen, oid, &hit.obj);
            return downcast(oid, hit.obj);
        }
        let bytes = self.txn.read(oid)?;
        let value: Arc<T> = Arc::new(self.inner.decode::<T>(oid, &bytes)?);
        let obj: CachedObject = value.clone();
        let (slot, gen) = cache.insert(oid, obj.clone(), bytes.len(), me);
        r.swizzle(slot, gen);
        cache.note_swizzle();
        self.remember(slot, gen, oid, &obj);
        Ok(value)
    }

    fn remember(&mut self, slot: u32, gen: u32, oid: Oid, obj: &CachedObject) {
        let i = slot as usize;
        if i >= self.local.len() {
            self.local.resize(i + 1, None);
        }
        self.local[i] = Some((gen, oid, obj.clone()));
    }

    fn flush_hits(&mut self) {
        self.inner.cache.add_hits(std::mem::take(&mut self.local_hits));
    }

    /// Reads the object afresh (for a change), decoded into an owned value.
    fn load_owned<T: Persistent>(&mut self, oid: Oid) -> Result<T> {
        let bytes = self.txn.read(oid)?;
        self.inner.decode::<T>(oid, &bytes)
    }

    /// Changes an object in place with `f`.
    pub fn update<T: Persistent>(&mut self, r: &Ref<T>, f: impl FnOnce(&mut T)) -> Result<()> {
        let oid = r.oid();
        self.txn.lock_page(oid.page, true)?;
        let mut value: T = self.load_owned(oid)?;
        let old_keys = value.index_keys();
        f(&mut value);
        self.write(oid, value, old_keys)
    }

    /// Replaces an object.
    pub fn put<T: Persistent>(&mut self, r: &Ref<T>, value: T) -> Result<()> {
        let oid = r.oid();
        self.txn.lock_page(oid.page, true)?;
        let old: T = self.load_owned(oid)?;
        self.write(oid, value, old.index_keys())
    }

    fn write<T: Persistent>(&mut self, oid: Oid, value: T, old_keys: Vec<(&'static str, Vec<u8>)>) -> Result<()> {
        let bytes = self.inner.encode(&value)?;
        self.inner.cache.invalidate(oid);
        self.txn.update(oid, &bytes)?;
        let new_keys = value.index_keys();
        for ((field, old), (_, new)) in old_keys.iter().zip(new_keys.iter()) {
            if old != new {
                let tree = self.index_tree::<T>(field, true)?.expect("created");
                tree.delete(&mut self.txn, old, Some(&oid.to_bytes()))?;
                tree.insert(&mut self.txn, new, &oid.to_bytes())?;
            }
        }
        self.overlay.insert(oid, Arc::new(value));
        Ok(())
    }

    /// Deletes an object; references to it answer `NotFound` from now on.
    pub fn delete<T: Persistent>(&mut self, r: &Ref<T>) -> Result<()> {
        let oid = r.oid();
        self.txn.lock_page(oid.page, true)?;
        let old: T = self.load_owned(oid)?;
        self.inner.cache.invalidate(oid);
        for (field, key) in old.index_keys() {
            if let Some(tree) = self.index_tree::<T>(field, false)? {
                tree.delete(&mut self.txn, &key, Some(&oid.to_bytes()))?;
            }
        }
        self.txn.delete(oid)?;
        self.overlay.remove(&oid);
        r.unswizzle();
        Ok(())
    }

    /// Names an object: `root(name)` finds it again in any later transaction.
    pub fn set_root<T>(&mut self, name: &str, r: &Ref<T>) -> Result<()> {
        catalog::set_root(&mut self.txn, &self.inner.meta, name, Some(r.oid()))
    }

    /// Removes a name.
    pub fn remove_root(&mut self, name: &str) -> Result<()> {
        catalog::set_root(&mut self.txn, &self.inner.meta, name, None)
    }

    /// The object named `name`.
    pub fn root<T: Persistent>(&mut self, name: &str) -> Result<Ref<T>> {
        match catalog::get_root(&mut self.txn, &self.inner.meta, name)? {
            Some(oid) => Ok(Ref::from_oid(oid)),
            None => Err(Error::NotFound(format!("no root named {name:?}"))),
        }
    }

    /// The objects whose indexed field equals `key`.
    pub fn find<K: IndexKey, T: Persistent>(&mut self, index: &Index<K, T>, key: &K) -> Result<Vec<Ref<T>>> {
        let Some(tree) = self.index_tree::<T>(index.field, false)? else {
            return Ok(Vec::new());
        };
        let mut k = Vec::new();
        key.key_bytes(&mut k);
        let values = tree.get_all(&mut self.txn, &k)?;
        values
            .into_iter()
            .map(|v| self.index_ref(&tree, index.field, &v))
            .collect()
    }

    /// The first object whose indexed field equals `key` (for unique fields).
    pub fn find_one<K: IndexKey, T: Persistent>(&mut self, index: &Index<K, T>, key: &K) -> Result<Option<Ref<T>>> {
        let Some(tree) = self.index_tree::<T>(index.field, false)? else {
            return Ok(None);
        };
        let mut k = Vec::new();
        key.key_bytes(&mut k);
        match tree.get(&mut self.txn, &k)? {
            Some(v) => Ok(Some(self.index_ref(&tree, index.field, &v)?)),
            None => Ok(None),
        }
    }

    fn index_ref<T>(&self, tree: &cairn_storage::btree::BTree, field: &str, v: &[u8]) -> Result<Ref<T>> {
        Oid::from_slice(v)
            .filter(|_| v.len() == Oid::ENCODED_SIZE)
            .map(Ref::from_oid)
            .ok_or_else(|| Error::Corrupt {
                page: tree.root(),
                reason: format!("index on {field} holds a malformed OID"),
            })
    }

    /// The objects whose indexed field lies between `lo` and `hi`, in key order.
    pub fn find_range<K: IndexKey, T: Persistent>(
        &mut self,
        index: &Index<K, T>,
        lo: Bound<&K>,
        hi: Bound<&K>,
    ) -> Result<Vec<Ref<T>>> {
        let Some(tree) = self.index_tree::<T>(index.field, false)? else {
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
        let mut cur = tree.range(
            &mut self.txn,
            lo.as_ref().map(|v| &v[..]),
            hi.as_ref().map(|v| &v[..]),
            Direction::Forward,
        )?;
        let mut out = Vec::new();
        while let Some((_, v)) = cur.next(&mut self.txn)? {
            let oid = Oid::from_slice(&v)
                .filter(|_| v.len() == Oid::ENCODED_SIZE)
                .ok_or_else(|| Error::Corrupt {
                    page: tree.root(),
                    reason: format!("index on {} holds a malformed OID", index.field),
                })?;
            out.push(Ref::from_oid(oid));
        }
        Ok(out)
    }

    /// The storage transaction underneath (for tools and tests).
    pub fn storage(&mut self) -> &mut Txn {
        &mut self.txn
    }

    /// Commits: the changes are durable when this returns Ok.
    pub fn commit(mut self) -> Result<()> {
        self.flush_hits();
        let roots = std::mem::take(&mut self.index_roots);
        self.txn.commit()?;
        if !roots.is_empty() {
            lock(&self.inner.index_roots).extend(roots);
        }
        Ok(())
    }

    /// Aborts: nothing the transaction did remains.
    pub fn abort(mut self) -> Result<()> {
        self.flush_hits();
        Ok(self.txn.abort()?)
    }
}
