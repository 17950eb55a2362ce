//! What an object-protocol transaction reads: each object once from the
//! server (or never, when the client keeps it under a right), kept by the
//! transaction as [`Read`] and bounded by the client's cache bound
//! ([`ObjectTxn::trim`]); shared, not copied, where the typed layer views
//! it in place; a long object in ranges.

use std::sync::Arc;

use cairn_net::object_service::{FetchedObject, ObjectRequest, OBJ_S, OBJ_X, READ_RANGE_MAX};
use cairn_storage::{Error, Oid, Result};

use super::{ObjectTxn, SharedBytes};
use crate::view::CheckedAs;

/// What a transaction read of an object.
#[derive(Clone, Debug)]
pub(super) enum Read {
    Missing,
    Whole(Arc<[u8]>),
    /// Too long to send whole: its length.
    Long(u64),
}

impl Read {
    /// Bytes it holds.
    pub(super) fn bytes(&self) -> usize {
        match self {
            Read::Whole(b) => b.len(),
            _ => 0,
        }
    }

    /// What a fetched part says of its object.
    pub(super) fn of(f: &FetchedObject<'_>) -> Read {
        if !f.found {
            Read::Missing
        } else if f.bytes.len() as u64 == f.total_len {
            Read::Whole(Arc::from(f.bytes))
        } else {
            Read::Long(f.total_len)
        }
    }
}
impl ObjectTxn {
    /// Calls `f` with the object's bytes (no copy when it came whole).
    pub fn read_with<R>(&mut self, oid: Oid, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
        self.read_with_epoch(oid, f).map(|(r, _)| r)
    }

    /// [`ObjectTxn::read_with`], with the epoch of the right the client
    /// keeps these very bytes under, if any ([`ObjectTxn::epoch_of`]): a
    /// copy decoded from them is current while that right is held.
    pub fn read_with_epoch<R>(&mut self, oid: Oid, f: impl FnOnce(&[u8]) -> R) -> Result<(R, Option<u64>)> {
        self.check_active()?;
        self.settle_appends(oid)?;
        self.trim();
        if let Some(c) = self.changes.get(&oid) {
            return c.as_deref().map(|b| (f(b), None)).ok_or(Error::NotFound { oid });
        }
        if !self.local(oid) {
            self.fetch(&[oid], OBJ_S)?;
        }
        self.store.note_reads(&[oid]);
        if let Some(Read::Whole(b)) = self.read.get(&oid) {
            let epoch = if self.snapshot {
                None
            } else {
                self.store.epoch_if_bytes(oid, b)
            };
            return Ok((f(b), epoch));
        }
        let bytes = self.whole(oid)?.ok_or(Error::NotFound { oid })?;
        Ok((f(&bytes), None))
    }

    /// The object's length in bytes.
    pub fn len(&mut self, oid: Oid) -> Result<u64> {
        self.check_active()?;
        self.settle_appends(oid)?;
        self.trim();
        if let Some(c) = self.changes.get(&oid) {
            return c.as_ref().map(|b| b.len() as u64).ok_or(Error::NotFound { oid });
        }
        if !self.local(oid) {
            self.fetch(&[oid], OBJ_S)?;
        }
        match self.read.get(&oid) {
            Some(Read::Whole(b)) => Ok(b.len() as u64),
            Some(Read::Long(n)) => Ok(*n),
            _ => Err(Error::NotFound { oid }),
        }
    }

    /// True if this transaction read or changed the object already (its
    /// copy is this transaction's: no other can have changed it since).
    pub fn has_read(&self, oid: Oid) -> bool {
        (self.read.contains_key(&oid) || self.changes.contains_key(&oid)) && !self.has_appends(oid)
    }

    /// The epoch of the right to the object the client holds, if any: a
    /// copy decoded in an earlier
    /// transaction is current only if it was decoded from bytes kept under
    /// this same epoch ([`ObjectTxn::epoch_of`]). This transaction reads
    /// it under the right from now on. No server call.
    pub fn right_epoch(&mut self, oid: Oid) -> Option<u64> {
        if self.ended || self.doomed.is_some() || self.snapshot || self.has_appends(oid) {
            return None;
        }
        self.store.right_epoch(self.id, oid)
    }

    /// The epoch of the right under which the client keeps exactly `bytes`
    /// as the object's (compared whole), if it holds one: a copy decoded
    /// from `bytes` stays current while that right is held. `None` for
    /// bytes the client keeps under no right (this transaction's own
    /// change, or what it read under its lock alone).
    pub fn epoch_of(&self, oid: Oid, bytes: &[u8]) -> Option<u64> {
        if self.changes.contains_key(&oid) || self.snapshot || self.has_appends(oid) {
            return None;
        }
        self.store.epoch_if_bytes(oid, bytes)
    }

    /// Keeps what the transaction read of `oid`.
    pub(super) fn keep(&mut self, oid: Oid, read: Read) {
        self.read_bytes += read.bytes();
        if let Some(old) = self.read.insert(oid, read) {
            self.read_bytes -= old.bytes();
        }
    }

    /// Forgets what the transaction read of `oid`.
    pub(super) fn forget(&mut self, oid: Oid) {
        if let Some(old) = self.read.remove(&oid) {
            self.read_bytes -= old.bytes();
        }
    }

    /// Past the client's bound on cached bytes, lets go of the objects this
    /// transaction read or created: a later read asks again (from the
    /// client's cache, or the server, where the transaction's lock keeps
    /// the object as it was, or as this transaction made it — the client
    /// takes no right to an object the transaction holds X on). A
    /// transaction's reads are so bounded like the client's cache, not
    /// kept whole for its duration. Kept: the objects of pages an adaptive
    /// transaction pinned, and the objects it deleted (as gone; no bytes).
    /// Called before a read, never between a fetch and its use.
    pub(super) fn trim(&mut self) {
        if self.read_bytes <= self.store.rights_bytes_max + self.read_kept {
            return;
        }
        let (exclusive, pinned) = (&self.exclusive, &self.pinned);
        self.read
            .retain(|o, r| pinned.contains(&o.page) || (exclusive.contains_key(o) && matches!(r, Read::Missing)));
        self.read_bytes = self.read.values().map(Read::bytes).sum();
        self.read_kept = self.read_bytes;
    }

    /// True if the object is in hand: read by this transaction, or kept by
    /// the client under a right (then read under it from now on).
    pub(super) fn local(&mut self, oid: Oid) -> bool {
        if self.read.contains_key(&oid) {
            return true;
        }
        if self.snapshot {
            // What the client keeps under rights is the present: used only
            // if the right came before the snapshot was asked for.
            return match self.store.use_object_before(self.id, oid, self.snapshot_clock) {
                Some(bytes) => {
                    self.keep(oid, Read::Whole(bytes));
                    true
                }
                None => false,
            };
        }
        match self.store.use_object(self.id, oid) {
            Some(bytes) => {
                self.keep(oid, Read::Whole(bytes));
                true
            }
            None => false,
        }
    }

    /// The object's bytes.
    pub fn read(&mut self, oid: Oid) -> Result<Vec<u8>> {
        self.check_active()?;
        self.settle_appends(oid)?;
        if let Some(c) = self.changes.get(&oid) {
            return c.clone().ok_or(Error::NotFound { oid });
        }
        // Held under a right and not read by this transaction yet: copied
        // once, straight from the client's cache (or the page's image),
        // and not kept a second time as this transaction's read — the
        // right stays the transaction's until it ends, so a later read
        // finds the same bytes, in the cache or on the server.
        if !self.read.contains_key(&oid) && !self.snapshot {
            if let Some(bytes) = self.store.copy_object(self.id, oid) {
                self.store.note_reads(&[oid]);
                return Ok(bytes);
            }
        }
        self.read_many(&[oid])?.pop().flatten().ok_or(Error::NotFound { oid })
    }

    /// The object's bytes shared, not copied (`None`: no such object):
    /// an `Arc` and the object's range in it — the kept object, the image
    /// of its page held under a right, or what this transaction read. Its
    /// own uncommitted change is copied (it may change again).
    pub fn read_shared(&mut self, oid: Oid) -> Result<Option<SharedBytes>> {
        self.check_active()?;
        self.settle_appends(oid)?;
        let unmarked = |bytes: Arc<[u8]>| {
            let range = 0..bytes.len();
            SharedBytes {
                bytes,
                range,
                mark: None,
            }
        };
        if let Some(c) = self.changes.get(&oid) {
            return Ok(c.as_deref().map(|b| unmarked(Arc::from(b))));
        }
        // Under a right and not read by this transaction yet: shared
        // straight from the client's cache, not kept again as its read
        // (as `read`).
        if !self.read.contains_key(&oid) && !self.snapshot {
            if let Some(shared) = self.store.share_object(self.id, oid) {
                self.store.note_reads(&[oid]);
                return Ok(Some(shared));
            }
        }
        self.trim();
        if !self.local(oid) {
            self.fetch(&[oid], OBJ_S)?;
        }
        self.store.note_reads(&[oid]);
        match self.read.get(&oid) {
            Some(Read::Whole(b)) => Ok(Some(unmarked(b.clone()))),
            Some(Read::Missing) => Ok(None),
            _ => Ok(self.whole(oid)?.map(|b| unmarked(Arc::from(b)))),
        }
    }

    /// Sets `mark` on `bytes` (a [`SharedBytes`]'s) if the client still holds them
    /// under its right (not on this transaction's own copies): a later
    /// [`ObjectTxn::read_shared`] of the same bytes, by any transaction,
    /// gives it back. The mark goes with the bytes.
    pub fn mark_shared(&self, oid: Oid, bytes: &Arc<[u8]>, mark: CheckedAs) {
        self.store.mark_object(oid, bytes, mark);
    }

    /// The object's bytes, locked X on the server (the caller is about to
    /// change it: no S→X upgrade later).
    pub fn read_for_update(&mut self, oid: Oid) -> Result<Vec<u8>> {
        self.check_active()?;
        self.refuse_if_snapshot()?;
        self.settle_appends(oid)?;
        if let Some(c) = self.changes.get(&oid) {
            return c.clone().ok_or(Error::NotFound { oid });
        }
        if !self.exclusive.contains_key(&oid) {
            let store = self.store.clone();
            let _release = store.before_write(self.id, &[oid])?;
            self.fetch(&[oid], OBJ_X)?;
        } else if !self.read.contains_key(&oid) {
            // Its change went ahead of the commit and was let go of
            // (`object/changes.rs`): the server has this transaction's
            // version.
            self.fetch(&[oid], OBJ_X)?;
        }
        self.whole(oid)?.ok_or(Error::NotFound { oid })
    }

    /// Each object of `oids` (`None`: no such object), fetching every one
    /// not read yet in requests of up to 1,024 objects, all sent before the
    /// first reply is read; each reply streams its objects.
    pub fn read_many(&mut self, oids: &[Oid]) -> Result<Vec<Option<Vec<u8>>>> {
        self.check_active()?;
        self.settle_appends_of(oids)?;
        self.trim();
        let todo: Vec<Oid> = oids
            .iter()
            .copied()
            .filter(|o| !self.changes.contains_key(o) && !self.local(*o))
            .collect();
        if !todo.is_empty() {
            self.fetch(&todo, OBJ_S)?;
        }
        self.store.note_reads(oids);
        oids.iter()
            .map(|o| match self.changes.get(o) {
                Some(c) => Ok(c.clone()),
                None => self.whole(*o),
            })
            .collect()
    }

    /// An object read before: its bytes, reading a long one in ranges.
    pub(super) fn whole(&mut self, oid: Oid) -> Result<Option<Vec<u8>>> {
        let len = match self.read.get(&oid) {
            Some(Read::Whole(b)) => return Ok(Some(b.to_vec())),
            Some(Read::Missing) => return Ok(None),
            Some(Read::Long(len)) => Some(*len),
            None => None,
        };
        match len {
            Some(len) => {
                let len = usize::try_from(len).map_err(|_| Error::LimitExceeded {
                    what: "bytes of an object read whole",
                    value: len,
                    limit: usize::MAX as u64,
                })?;
                let mut out = vec![0u8; len];
                self.read_range(oid, 0, &mut out)?;
                Ok(Some(out))
            }
            None => Err(Error::Internal(format!("object {oid} was fetched but not kept"))),
        }
    }

    /// Reads `buf.len()` bytes of the object from `offset` (a large object
    /// crosses only in the ranges asked for); its own changes first.
    pub fn read_range(&mut self, oid: Oid, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.check_active()?;
        self.settle_appends(oid)?;
        if let Some(c) = self.changes.get(&oid) {
            let c = c.as_ref().ok_or(Error::NotFound { oid })?;
            let start = usize::try_from(offset).ok().filter(|s| s + buf.len() <= c.len());
            let start = start
                .ok_or_else(|| Error::InvalidArgument(format!("bytes {offset}.. of object {oid} are past its end")))?;
            buf.copy_from_slice(&c[start..start + buf.len()]);
            return Ok(());
        }
        self.on_server = true;
        let mut done = 0usize;
        while done < buf.len() {
            let len = (buf.len() - done).min(READ_RANGE_MAX as usize) as u32;
            let body = self.store.call_one(
                &ObjectRequest::ReadRange {
                    txn: self.id.0,
                    oid: oid.to_bytes(),
                    offset: offset + done as u64,
                    len,
                },
                self.id,
            )?;
            if body.is_empty() || body.len() > len as usize {
                return Err(Error::InvalidArgument(format!(
                    "bytes {}.. of object {oid} are past its end",
                    offset + done as u64
                )));
            }
            buf[done..done + body.len()].copy_from_slice(&body);
            done += body.len();
        }
        Ok(())
    }
}
