//! Reading objects: following a reference to a decoded object (`get`, with
//! the object cache and swizzling), reading one in place (`view`, from page
//! images), prefetching pages, and the owned read a change starts from.

use super::source::ViewBytes;
use super::*;
use crate::view::CheckedAs;

/// A view of `value` through a copy of its encoding (current schema).
fn copy_of<T: Persistent>(oid: Oid, value: &T) -> Result<crate::view::Obj<T>> {
    let mut w = crate::codec::Writer::new();
    value.encode_fields(&mut w);
    let bytes: Arc<[u8]> = w.into_bytes().into();
    let len = bytes.len();
    crate::view::Obj::new(bytes, 0..len, oid).map_err(|source| Error::Decode { oid, source })
}

fn downcast<T: Persistent>(oid: Oid, obj: CachedObject) -> Result<Arc<T>> {
    obj.downcast::<T>().map_err(|_| Error::WrongType {
        oid,
        expected: T::NAME.into(),
        found: "another type (cached)".into(),
    })
}

impl Transaction<'_> {
    /// Says which references the transaction is about to follow, so their
    /// pages are locked and fetched together: against a server, the pages
    /// not yet cached go in one request (several pages a round trip, every
    /// request in flight at once) instead of one round trip each as each
    /// reference is followed. A traversal calls it with an object's
    /// references before it visits them. Embedded it does nothing: there is
    /// no round trip to save. What it takes is what following the
    /// references would take (a shared lock on each home page, to the end
    /// of the transaction), so a reference prefetched and then not followed
    /// only holds that lock longer; a dangling reference is reported when
    /// followed, not here.
    pub fn prefetch<'r, T: Persistent + 'r>(&mut self, refs: impl IntoIterator<Item = &'r Ref<T>>) -> Result<()> {
        if !self.inner.db.prefetch_saves_round_trips() {
            return Ok(());
        }
        let oids: Vec<Oid> = refs.into_iter().map(|r| r.oid()).collect();
        self.txn.prefetch(&oids)?;
        Ok(())
    }

    /// Says which objects this transaction is about to change, so that it
    /// takes their exclusive locks now, together and in one global order
    /// (OID order, whatever the order of `refs`): two transactions naming
    /// the objects they will change never hold one each and wait for the
    /// other's (a deadlock the changes made one by one, in their own
    /// orders, would risk). A client takes them in one round trip — the
    /// pages' in one pipelined FETCH (page server), the objects' in one
    /// OBJ_FETCH (object server) — instead of one each as the changes come.
    /// The locks are held to the end of the transaction whether or not the
    /// objects are changed. Nothing in a read-only transaction.
    pub fn prefetch_for_update<'r, T: Persistent + 'r>(
        &mut self,
        refs: impl IntoIterator<Item = &'r Ref<T>>,
    ) -> Result<()> {
        self.refuse_if_read_only()?;
        let oids: Vec<Oid> = refs.into_iter().map(|r| r.oid()).collect();
        self.txn.prefetch_for_update(&oids)?;
        Ok(())
    }

    /// Follows a reference: the object, from this transaction's changes, the
    /// cache (through the swizzled reference when it is still valid), or the
    /// store (a fault, which caches it and swizzles the reference).
    pub fn get<T: Persistent>(&mut self, r: &Ref<T>) -> Result<Arc<T>> {
        let oid = r.oid();
        if self.read_only {
            // At a snapshot: decoded from the pages as of it, and kept out
            // of the shared cache (whose readers expect the present).
            let (value, _, _) = self.fetch::<T>(oid)?;
            return Ok(Arc::new(value));
        }
        self.settle_appends::<T>(oid)?;
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
        let me = self.txn.id();
        let cache = &self.inner.cache;
        if let Some((slot, gen)) = swizzle {
            if let Some(hit) = cache.get_slot(slot, gen, oid) {
                // Lock first, then trust the cache: a writer removes the
                // object under its exclusive lock.
                let trusted = hit.last_txn == me || self.txn.lock_to_read(oid)?.covers(hit.token);
                if !trusted {
                    cache.invalidate(oid);
                }
                if let Some(hit) = cache.get_slot(slot, gen, oid) {
                    cache.set_last_txn(slot, gen, me);
                    self.remember(slot, gen, oid, &hit.obj);
                    return downcast(oid, hit.obj);
                }
            }
            r.unswizzle();
        }
        let trust = self.txn.lock_to_read(oid)?;
        if let Some(hit) = cache.lookup(oid, me, |token| trust.covers(token)) {
            r.swizzle(hit.slot, hit.gen);
            cache.note_swizzle();
            self.remember(hit.slot, hit.gen, oid, &hit.obj);
            return downcast(oid, hit.obj);
        }
        let (value, len, token) = self.fetch::<T>(oid)?;
        let value: Arc<T> = Arc::new(value);
        let obj: CachedObject = value.clone();
        let (slot, gen) = cache.insert(oid, obj.clone(), len, me, token);
        r.swizzle(slot, gen);
        cache.note_swizzle();
        self.remember(slot, gen, oid, &obj);
        if self.inner.fault_whole_pages && self.txn.reads_shared_images(oid.page) && cache.refaulted(oid.page, me) {
            let c = self.class_of::<T>()?;
            self.prefetch_page::<T>(c, oid)?;
        }
        Ok(value)
    }

    /// Reads an object in place: its fields are read straight from the
    /// bytes of its page, with no decoding and no allocation (see
    /// [`crate::view`]). `view(&r)?.get()` has one method per field, named
    /// like the field: numbers, `&str` for strings, `Ref`s, sequences of
    /// views for `Vec` and `List`, the view of a nested struct.
    ///
    /// The bytes come from the client's dual buffer (`crate::dual`,
    /// sized and steered by [`Options::dual_buffer`]): an image of the
    /// object's page (copied from the buffer pool, or from the server, on a
    /// page fault; shared by every transaction until the page changes), or
    /// a copy of the object the buffer made under its strategy; or a copy
    /// of the object when it cannot be read in its page: changed by this
    /// transaction, moved, large, or written with an older schema version. Locks as [`Transaction::get`] does (the home
    /// page, shared). The record is checked when the view is made: damaged
    /// bytes are an error naming the object (and so its page) here, and
    /// the accessors never fail afterwards.
    pub fn view<T: Persistent>(&mut self, r: &Ref<T>) -> Result<crate::view::Obj<T>> {
        let oid = r.oid();
        if !self.read_only {
            self.settle_appends::<T>(oid)?;
        }
        if !self.overlay.is_empty() {
            if let Some(o) = self.overlay.get(&oid) {
                let value = downcast::<T>(oid, o.clone())?;
                return copy_of(oid, &*value);
            }
        }
        let c = self.class_of::<T>()?;
        let checked_as = CheckedAs {
            class: c.id,
            version: c.version,
        };
        let inner = self.inner;
        let current = header(c);
        let bytes = if self.read_only {
            // At a snapshot: a copy of the record as of it, never the dual
            // buffer's images (the present).
            ViewBytes::Copy
        } else {
            self.txn.view_bytes(oid, &inner.cache)?
        };
        let copy = match bytes {
            ViewBytes::Shared(v) => {
                let at = v.range.clone();
                // Checked once as this class: whoever holds the bytes
                // remembers it with them until they go.
                if v.checked == Some(checked_as) {
                    let range = at.start + HEADER_SIZE..at.end;
                    return Ok(crate::view::Obj::checked(v.bytes, range, oid));
                }
                if v.bytes.get(at.start..at.start + HEADER_SIZE) == Some(&current[..]) {
                    inner.check_len(oid, at.len() as u64)?;
                    let range = at.start + HEADER_SIZE..at.end;
                    let obj = crate::view::Obj::new(Arc::clone(&v.bytes), range, oid)
                        .map_err(|source| Error::Decode { oid, source })?;
                    self.txn.note_checked(oid, &v, checked_as, &inner.cache);
                    return Ok(obj);
                }
                // Another class or schema version: the copy says which.
                true
            }
            ViewBytes::Copy => true,
            ViewBytes::Owned => false,
        };
        if copy {
            // The record copied once, if it is stored whole at this
            // class's schema version, and checked as the view is built —
            // not decoded into a value and encoded again.
            let copied = self.txn.read_with(oid, |bytes| {
                (bytes.get(..HEADER_SIZE) == Some(&current[..]))
                    .then(|| (bytes.len(), Arc::<[u8]>::from(&bytes[HEADER_SIZE..])))
            })?;
            if let Some((len, fields)) = copied {
                inner.check_len(oid, len as u64)?;
                let end = fields.len();
                return crate::view::Obj::new(fields, 0..end, oid).map_err(|source| Error::Decode { oid, source });
            }
        }
        // Moved, large, older schema, of another class or missing: the
        // owned path says which, and its value is viewed through a copy.
        let (value, _, _) = self.fetch::<T>(oid)?;
        copy_of(oid, &value)
    }

    /// Decodes and caches the other objects of class `c` on `faulted`'s
    /// page, which this transaction has locked, if the page holds committed
    /// state ([`Source::objects_of_page`]). An object that does not decode is left to
    /// report its error when it is fetched itself.
    fn prefetch_page<T: Persistent>(&mut self, c: ClassInfo, faulted: Oid) -> Result<()> {
        let inner = self.inner;
        // Only records of this class at this schema version: decoding an
        // older version takes the catalog's mutex, not done under a page latch.
        let header = header(c);
        let mut found: Vec<(Oid, CachedObject, usize)> = Vec::new();
        self.txn.objects_of_page(faulted.page, |oid, bytes| {
            if oid == faulted || bytes.get(..6) != Some(&header[..]) {
                return;
            }
            if let Ok(v) = inner.decode::<T>(c, oid, bytes) {
                found.push((oid, Arc::new(v), bytes.len()));
            }
        })?;
        if !found.is_empty() {
            inner.cache.insert_prefetched(found);
        }
        Ok(())
    }

    fn remember(&mut self, slot: u32, gen: u32, oid: Oid, obj: &CachedObject) {
        let i = slot as usize;
        if i >= self.local.len() {
            self.local.resize(i + 1, None);
        }
        self.local[i] = Some((gen, oid, obj.clone()));
    }

    pub(super) fn flush_hits(&mut self) {
        self.inner.cache.add_hits(std::mem::take(&mut self.local_hits));
        let i = &self.inner;
        i.index_hits
            .fetch_add(std::mem::take(&mut self.index_hits), Ordering::Relaxed);
        i.index_misses
            .fetch_add(std::mem::take(&mut self.index_misses), Ordering::Relaxed);
    }

    /// Reads the object afresh (for a change), decoded into an owned value.
    pub(super) fn load_owned<T: Persistent>(&mut self, oid: Oid) -> Result<T> {
        Ok(self.fetch::<T>(oid)?.0)
    }

    /// Reads and decodes an object from the store, with its encoded size:
    /// in place in its page when it is stored there at this schema version
    /// (decoding an older one takes the catalog's mutex, not done under a
    /// page latch), else from a copy.
    /// The object decoded, its encoded length, and the token its copy is
    /// cached under ([`Tx::token_of`]: what makes it current for later
    /// transactions).
    fn fetch<T: Persistent>(&mut self, oid: Oid) -> Result<(T, usize, u64)> {
        let c = self.class_of::<T>()?;
        let inner = self.inner;
        let current = header(c);
        let (direct, token) = self.txn.read_with_token(oid, |bytes| {
            (bytes.get(..HEADER_SIZE) == Some(&current[..])).then(|| {
                let decoded = inner
                    .check_len(oid, bytes.len() as u64)
                    .and_then(|()| inner.decode::<T>(c, oid, bytes));
                (decoded, bytes.len())
            })
        })?;
        match direct {
            Some((v, len)) => Ok((v?, len, token)),
            None => {
                // A large, moved or older-version record: refuse one too long
                // to decode before reading (and allocating) it whole.
                self.inner.check_len(oid, self.txn.len(oid)?)?;
                let bytes = self.txn.read(oid)?;
                let token = self.txn.token_of(oid, &bytes);
                Ok((self.inner.decode::<T>(c, oid, &bytes)?, bytes.len(), token))
            }
        }
    }
}
