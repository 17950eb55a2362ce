//! Changing objects: `update`, `put` and `delete`, through the client's
//! dual buffer ([`crate::dual`]). A change is encoded and handed to the
//! buffer, which writes it through to the storage transaction at once (an
//! early update, and every update under NOC) or keeps it as a modified
//! copy (a late update, and every update under EOC and LOC+) until it is
//! relocated or the transaction commits. Either way it reaches only this
//! transaction's own pages before commit (no-steal): the buffer flushes
//! into a per-transaction outbox, and the transaction writes what is there
//! into its storage transaction itself, outside the buffer's mutex, the
//! next time it changes something and before it commits.

use super::*;

/// A transaction's part in the dual buffer: ended (its modified copies
/// and flushed changes dropped) when the transaction is dropped without
/// committing.
pub(super) struct Buffered<'db> {
    cache: &'db ObjectCache,
    owner: u64,
    /// It has handed the buffer a change not yet committed.
    active: bool,
}

impl<'db> Buffered<'db> {
    pub(super) fn new(cache: &'db ObjectCache, owner: u64) -> Buffered<'db> {
        Buffered {
            cache,
            owner,
            active: false,
        }
    }
}

impl Buffered<'_> {
    /// Drops what the transaction holds in the buffer. Must run before its
    /// locks are released: another transaction may change the same
    /// objects as soon as they are.
    pub(super) fn end(&mut self) {
        if self.active {
            self.cache.end(self.owner);
            self.active = false;
        }
    }
}

impl Drop for Buffered<'_> {
    fn drop(&mut self) {
        self.end();
    }
}

impl Transaction<'_> {
    /// Changes an object in place with `f`.
    pub fn update<T: Persistent>(&mut self, r: &Ref<T>, f: impl FnOnce(&mut T)) -> Result<()> {
        self.refuse_if_read_only()?;
        let oid = r.oid();
        self.txn.lock_to_change(oid)?;
        let mut value: T = self.load_own::<T>(oid)?;
        let old_keys = value.index_keys();
        f(&mut value);
        self.write(oid, value, old_keys)
    }

    /// Replaces an object.
    pub fn put<T: Persistent>(&mut self, r: &Ref<T>, value: T) -> Result<()> {
        self.refuse_if_read_only()?;
        let oid = r.oid();
        self.txn.lock_to_change(oid)?;
        let old: T = self.load_own::<T>(oid)?;
        self.write(oid, value, old.index_keys())
    }

    /// Deletes an object; references to it answer `NotFound` from now on.
    pub fn delete<T: Persistent>(&mut self, r: &Ref<T>) -> Result<()> {
        self.refuse_if_read_only()?;
        self.writable_class_of::<T>()?;
        let oid = r.oid();
        self.txn.lock_to_change(oid)?;
        let old: T = self.load_own::<T>(oid)?;
        self.inner.cache.invalidate(oid);
        for (field, key) in old.index_keys() {
            if let Some(tree) = self.index_tree::<T>(field, false)? {
                let ops = vec![TreeOp::Delete {
                    key,
                    value: Some(oid.to_bytes().to_vec()),
                }];
                self.change_tree(&tree, ops)?;
            }
        }
        // Whatever change to it the buffer holds goes, and the record goes
        // from this transaction's pages.
        self.buffered.active = true;
        let flushed = self.inner.cache.discard(self.buffered.owner, oid)?;
        self.written.remove(&oid);
        self.appended.remove(&oid);
        self.write_flushed(flushed)?;
        self.txn.delete(oid)?;
        self.overlay.remove(&oid);
        r.unswizzle();
        Ok(())
    }

    /// The object as this transaction sees it, decoded to be changed: its
    /// own last change if it made one (which may be held in the buffer),
    /// else read from the store.
    pub(super) fn load_own<T: Persistent>(&mut self, oid: Oid) -> Result<T> {
        match self.written.get(&oid) {
            Some(bytes) => {
                let bytes = Arc::clone(bytes);
                let c = self.class_of::<T>()?;
                self.inner.decode::<T>(c, oid, &bytes)
            }
            None => self.load_owned(oid),
        }
    }

    pub(super) fn write<T: Persistent>(
        &mut self,
        oid: Oid,
        value: T,
        old_keys: Vec<(&'static str, Vec<u8>)>,
    ) -> Result<()> {
        let c = self.writable_class_of::<T>()?;
        let bytes: Arc<[u8]> = self.inner.encode(c, &value)?.into();
        // Refused here, not when a held copy is flushed at commit.
        self.inner.check_len(oid, bytes.len() as u64)?;
        self.inner.cache.invalidate(oid);
        self.buffered.active = true;
        let flushed = self.inner.cache.modify(self.buffered.owner, oid, Arc::clone(&bytes))?;
        self.written.insert(oid, bytes);
        self.appended.remove(&oid);
        self.write_flushed(flushed)?;
        let new_keys = value.index_keys();
        for ((field, old), (_, new)) in old_keys.iter().zip(new_keys.iter()) {
            if old != new {
                let tree = self.index_tree::<T>(field, true)?.expect("created");
                let ops = vec![
                    TreeOp::Delete {
                        key: old.clone(),
                        value: Some(oid.to_bytes().to_vec()),
                    },
                    TreeOp::Insert {
                        key: new.clone(),
                        value: oid.to_bytes().to_vec(),
                    },
                ];
                self.change_tree(&tree, ops)?;
            }
        }
        self.overlay.insert(oid, Arc::new(value));
        Ok(())
    }

    /// Writes changes the dual buffer flushed into the storage transaction.
    fn write_flushed(&mut self, flushed: Vec<(Oid, Arc<[u8]>)>) -> Result<()> {
        for (oid, bytes) in flushed {
            self.txn.update(oid, &bytes)?;
        }
        Ok(())
    }

    /// Hands every change this transaction holds in the dual buffer to its
    /// storage transaction, so that [`Transaction::storage`] reads what
    /// the transaction wrote. Commit does it itself; under NOC (the
    /// default) every change is handed over at once and this does nothing.
    pub fn flush(&mut self) -> Result<()> {
        if self.buffered.active {
            let flushed = self.inner.cache.flush_for_commit(self.buffered.owner)?;
            self.write_flushed(flushed)?;
        }
        Ok(())
    }

    /// Before commit: every held change into the storage transaction, and
    /// the pages changed through the buffer out of it (while the exclusive
    /// locks are still held, so no other transaction reads them stale).
    pub(super) fn flush_buffered(&mut self) -> Result<()> {
        if self.buffered.active {
            self.flush()?;
            self.inner.cache.committed(self.buffered.owner)?;
            self.buffered.active = false;
        }
        Ok(())
    }
}
