//! An object-protocol transaction's changes: after-images kept by the
//! client and sent in the OBJ_COMMIT. They are bounded: past
//! [`ObjectTxn::changes_kept_max`] bytes the ones kept go to the server
//! ahead of the commit (OBJ_FLUSH: the server applies them in the
//! transaction, not committed, its private pages spilling to its own file
//! past its bound) and the client lets go of them, so a transaction of any
//! size keeps a bounded part of it in the client's memory and no message
//! carries more than the server takes in one.

use std::collections::BTreeMap;
use std::sync::Arc;

use cairn_net::object_service::{Change, ObjectRequest};
use cairn_schema::append::ListAppend;
use cairn_storage::txn::RecordMerge;
use cairn_storage::{Error, Oid, Result};

use super::{ObjectTxn, Read};

/// The least a transaction keeps of after-images before it sends them
/// ahead of its commit: 1 MiB (the client's cache bound if that is
/// larger, at most what one message may carry).
pub const CHANGES_KEPT_MIN: usize = 1 << 20;

/// Room in a message for all but the changes.
const BODY_OVERHEAD: usize = 64;

/// Room in a message for a change's OID, kind and length.
const CHANGE_OVERHEAD: usize = 32;

/// The bytes a change takes in a message, at most.
fn change_size(after: &Option<Vec<u8>>) -> usize {
    CHANGE_OVERHEAD + after.as_ref().map_or(0, Vec::len)
}

/// A kept change (`None`: deleted) as OBJ_FLUSH and OBJ_COMMIT carry it.
pub(super) fn wire_change(oid: Oid, after: Option<Vec<u8>>) -> Change {
    match after {
        Some(bytes) => Change::Update {
            oid: oid.to_bytes(),
            bytes,
        },
        None => Change::Delete { oid: oid.to_bytes() },
    }
}

/// The bytes an append takes in a message, at most.
fn append_size(a: &ListAppend) -> usize {
    CHANGE_OVERHEAD + a.field().name().len() + a.field().elem_encoded().len() + a.elems().len()
}

/// An append as OBJ_FLUSH and OBJ_COMMIT carry it (its count fits a
/// `u32`: [`ObjectTxn::append`] keeps no other).
pub(crate) fn wire_append(oid: Oid, a: &ListAppend) -> Change {
    Change::Append {
        oid: oid.to_bytes(),
        class: a.field().class(),
        field: a.field().name().to_string(),
        elem: a.field().elem_encoded().to_vec(),
        count: u32::try_from(a.count()).unwrap_or(u32::MAX),
        elems: a.elems().to_vec(),
    }
}

/// Every append kept, in OID order and per object in the order made.
pub(super) fn wire_appends(appends: BTreeMap<Oid, Vec<Arc<ListAppend>>>) -> impl Iterator<Item = Change> {
    appends
        .into_iter()
        .flat_map(|(oid, list)| list.into_iter().map(move |a| wire_append(oid, &a)))
}

impl ObjectTxn {
    /// Keeps `append` to the object, which this transaction need not have
    /// read, to send with its changes: the server applies it at commit to
    /// the object as it then stands, under an append lock other appenders
    /// share (`Txn::merge` there). False if it cannot be kept — the object
    /// was changed whole in this transaction (or sent so ahead of the
    /// commit), the append is longer than a message carries or holds more
    /// than `u32::MAX` elements: the caller rewrites the object instead. A
    /// later read or change of the object here reads it under X and
    /// applies the appends kept ([`ObjectTxn::settle_appends`]).
    pub fn append(&mut self, oid: Oid, append: &Arc<ListAppend>) -> Result<bool> {
        self.check_active()?;
        self.refuse_if_snapshot()?;
        let size = append_size(append);
        if self.changes.contains_key(&oid)
            || self.exclusive.contains_key(&oid)
            || size > self.changes_per_message()
            || u32::try_from(append.count()).is_err()
        {
            return Ok(false);
        }
        if self.changes_bytes + size > self.changes_kept_max() {
            self.send_changes(false)?;
        }
        self.appends.entry(oid).or_default().push(Arc::clone(append));
        self.changes_bytes += size;
        self.pin(oid);
        Ok(true)
    }

    /// Before a read or a change of `oid` here, if this transaction kept
    /// appends to it: reads it under X and keeps it, the appends applied,
    /// as the transaction's change of it (what every later read answers
    /// from). The appends stay kept if that fails.
    pub(super) fn settle_appends(&mut self, oid: Oid) -> Result<()> {
        if self.appends.is_empty() {
            return Ok(());
        }
        let Some(list) = self.appends.remove(&oid) else {
            return Ok(());
        };
        let size: usize = list.iter().map(|a| append_size(a)).sum();
        self.changes_bytes -= size;
        let merged = self.read_for_update(oid).and_then(|mut bytes| {
            for a in &list {
                bytes = a.apply(&bytes).map_err(|why| {
                    Error::InvalidArgument(format!("appending to {} of object {oid}: {why}", a.field().name()))
                })?;
            }
            Ok(bytes)
        });
        match merged {
            Ok(bytes) => self.change(oid, Some(bytes)),
            Err(e) => {
                self.appends.insert(oid, list);
                self.changes_bytes += size;
                Err(e)
            }
        }
    }

    /// [`ObjectTxn::settle_appends`] of each of `oids`.
    pub(super) fn settle_appends_of(&mut self, oids: &[Oid]) -> Result<()> {
        if self.appends.is_empty() {
            return Ok(());
        }
        for &oid in oids {
            self.settle_appends(oid)?;
        }
        Ok(())
    }

    /// Lets go of the appends kept to `oid` (it is replaced or deleted
    /// whole).
    pub(super) fn drop_appends(&mut self, oid: Oid) {
        if let Some(list) = self.appends.remove(&oid) {
            self.changes_bytes -= list.iter().map(|a| append_size(a)).sum::<usize>();
        }
    }

    /// True if this transaction keeps appends to `oid` not yet applied
    /// here (what the client holds of it is not what it reads).
    pub(super) fn has_appends(&self, oid: Oid) -> bool {
        !self.appends.is_empty() && self.appends.contains_key(&oid)
    }

    /// Bytes of changes one request may carry (the server's message bound,
    /// from its welcome).
    pub(super) fn changes_per_message(&self) -> usize {
        (self.store.conn.client.welcome().body_max as usize).saturating_sub(BODY_OVERHEAD)
    }

    /// Bytes of after-images kept before they are sent ahead of the
    /// commit: the client's cache bound, at least [`CHANGES_KEPT_MIN`], at
    /// most what one message carries.
    pub(super) fn changes_kept_max(&self) -> usize {
        self.store
            .rights_bytes_max
            .max(CHANGES_KEPT_MIN)
            .min(self.changes_per_message())
    }

    /// Keeps `after` (`None`: deleted) as the object's change, sending the
    /// changes kept so far to the server first if it would take them past
    /// [`ObjectTxn::changes_kept_max`]. An after-image longer than one
    /// message carries is refused (nothing changes, the transaction goes
    /// on).
    pub(super) fn change(&mut self, oid: Oid, after: Option<Vec<u8>>) -> Result<()> {
        self.refuse_if_snapshot()?;
        let size = change_size(&after);
        let per_message = self.changes_per_message();
        if size > per_message {
            return Err(Error::LimitExceeded {
                what: "bytes of an object's after-image (an object-server client sends each in one message)",
                value: size as u64,
                limit: per_message as u64,
            });
        }
        let replaced = self.changes.get(&oid).map_or(0, change_size);
        if self.changes_bytes - replaced + size > self.changes_kept_max() {
            self.send_changes(false)?;
        }
        if let Some(old) = self.changes.insert(oid, after) {
            self.changes_bytes -= change_size(&old);
        }
        self.changes_bytes += size;
        self.pin(oid);
        Ok(())
    }

    /// Sends the changes kept so far to the server, which applies them in
    /// this transaction (not committed): a server-side method that follows
    /// sees them (DeWitt et al. §2.2: the method must see the transaction's
    /// own changes). They are this transaction's reads from now on.
    pub fn flush_changes(&mut self) -> Result<()> {
        self.send_changes(true)
    }

    /// OBJ_FLUSH of the changes kept (in one message: they are bounded by
    /// [`ObjectTxn::changes_kept_max`]). With `keep` the after-images stay
    /// as the transaction's reads; without, the client lets go of them (and
    /// of the pages it pinned): a later read asks the server, which answers
    /// with this transaction's own version. A deleted object stays known
    /// as gone either way.
    pub(super) fn send_changes(&mut self, keep: bool) -> Result<()> {
        self.check_active()?;
        if self.changes.is_empty() && self.appends.is_empty() {
            return Ok(());
        }
        let oids: Vec<Oid> = self.changes.keys().chain(self.appends.keys()).copied().collect();
        let store = self.store.clone();
        let _release = store.before_write(self.id, &oids)?;
        self.wrote = true;
        let changes = std::mem::take(&mut self.changes);
        let appends = std::mem::take(&mut self.appends);
        self.changes_bytes = 0;
        // What the transaction knows of them once sent. An object appended
        // to (never one changed whole too: `append` and `change` see to
        // that) is read from the server from now on, which applies the
        // appends there, and never under a right (`exclusive`: what the
        // server sends of it is this transaction's version).
        let mut after: Vec<(Oid, Option<Read>)> = appends.keys().map(|o| (*o, None)).collect();
        let wire: Vec<Change> = changes
            .into_iter()
            .map(|(oid, c)| {
                after.push((
                    oid,
                    match &c {
                        Some(bytes) => keep.then(|| Read::Whole(Arc::from(&bytes[..]))),
                        None => Some(Read::Missing),
                    },
                ));
                wire_change(oid, c)
            })
            .chain(wire_appends(appends))
            .collect();
        self.on_server = true;
        let sent = self.store.call_one(
            &ObjectRequest::Flush {
                txn: self.id.0,
                changes: wire,
            },
            self.id,
        );
        if let Err(e) = sent {
            // The server may have applied some of them: the transaction
            // cannot go on knowing what it changed.
            self.doomed = Some(format!("sending its changes to the server failed: {e}"));
            return Err(e);
        }
        for (oid, read) in after {
            self.exclusive.insert(oid, ());
            match read {
                Some(read) => self.keep(oid, read),
                None => self.forget(oid),
            }
        }
        if !keep && !self.pinned.is_empty() {
            self.pinned.clear();
            self.store.unpin_pages(self.id);
        }
        Ok(())
    }
}
