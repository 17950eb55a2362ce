//! Copies kept past their right for the snapshots that still see them.
//!
//! A snapshot transaction reads what the client keeps under a right taken
//! in before the snapshot was asked for ([`ObjectStore::use_object_before`]).
//! When a writer calls such a right back, the copy is still the version a
//! snapshot that had *begun on the server* before the callback sees: the
//! writer commits only once this client has answered the callback, and
//! the answer goes after the callback came, which is after the reply that
//! said the snapshot had begun. So a copy called back at `until` (the
//! client's clock), whose right came at `since`, is what a snapshot asked
//! for at `asked ≥ since` whose reply came at `began < until` reads —
//! and, on a server many writers change, a long snapshot traversal keeps
//! reading from the client instead of going back to the server for every
//! object a writer touched.
//!
//! Kept only while a running snapshot can use them, within a bound on
//! their bytes (past it a called-back copy is not kept: the snapshot asks
//! the server, as before).
//!
//! [`ObjectStore::use_object_before`]: super::ObjectStore::use_object_before

use std::sync::Arc;

use cairn_storage::fxhash::FxHashMap;
use cairn_storage::lock::Resource;
use cairn_storage::TxnId;

/// A copy kept past its right.
struct Copy {
    bytes: Arc<[u8]>,
    /// When its right came (the client's clock).
    since: u64,
    /// When the right was called back.
    until: u64,
}

/// A running snapshot: when it was asked for and when its reply came (the
/// client's clock).
#[derive(Clone, Copy)]
struct Window {
    asked: u64,
    began: u64,
}

impl Window {
    fn sees(self, c: &Copy) -> bool {
        c.since <= self.asked && self.began < c.until
    }
}

/// The copies kept past their rights, and the snapshots that may read them.
#[derive(Default)]
pub(super) struct Retired {
    /// By the right's key: an object, or a page (an adaptive client's
    /// image).
    copies: FxHashMap<Resource, Vec<Copy>>,
    snapshots: FxHashMap<TxnId, Window>,
    bytes: usize,
    /// Bound on `bytes`; 0 keeps nothing.
    pub(super) bytes_max: usize,
}

impl Retired {
    /// A snapshot `txn`, asked for at `asked`, has begun (its reply came at
    /// `began`).
    pub(super) fn snapshot_began(&mut self, txn: TxnId, asked: u64, began: u64) {
        self.snapshots.insert(txn, Window { asked, began });
    }

    /// `txn` ended: the copies no running snapshot can read go.
    pub(super) fn txn_ended(&mut self, txn: TxnId) {
        if self.snapshots.remove(&txn).is_none() {
            return;
        }
        if self.snapshots.is_empty() {
            self.copies.clear();
            self.bytes = 0;
            return;
        }
        let windows: Vec<Window> = self.snapshots.values().copied().collect();
        let mut freed = 0;
        self.copies.retain(|_, list| {
            list.retain(|c| {
                let keep = windows.iter().any(|w| w.sees(c));
                if !keep {
                    freed += c.bytes.len();
                }
                keep
            });
            !list.is_empty()
        });
        self.bytes -= freed;
    }

    /// The right on `key`, taken in at `since`, was called back at `until`:
    /// keeps `bytes` if a running snapshot reads them and the bound allows.
    pub(super) fn called_back(&mut self, key: Resource, bytes: Arc<[u8]>, since: u64, until: u64) {
        let c = Copy { bytes, since, until };
        if self.bytes + c.bytes.len() > self.bytes_max || !self.snapshots.values().any(|w| w.sees(&c)) {
            return;
        }
        self.bytes += c.bytes.len();
        self.copies.entry(key).or_default().push(c);
    }

    /// What snapshot `txn` reads of `key` from a copy kept past its right.
    pub(super) fn read(&self, txn: TxnId, key: Resource) -> Option<Arc<[u8]>> {
        let w = self.snapshots.get(&txn)?;
        let list = self.copies.get(&key)?;
        list.iter().find(|c| w.sees(c)).map(|c| Arc::clone(&c.bytes))
    }

    /// Bytes kept (for the tests).
    #[cfg(test)]
    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_storage::{Oid, PageId};

    fn obj(n: u32) -> Resource {
        Resource::Object(Oid::from_bytes(&[n as u8; 10]))
    }

    fn bytes(b: &[u8]) -> Arc<[u8]> {
        Arc::from(b)
    }

    #[test]
    fn a_copy_serves_only_the_snapshots_that_began_before_its_callback() {
        let mut r = Retired {
            bytes_max: 1000,
            ..Retired::default()
        };
        // Nobody to read it: not kept.
        r.called_back(obj(1), bytes(b"v0"), 1, 5);
        assert_eq!(r.bytes(), 0);
        // Snapshot 7 asked at 10, began at 12.
        r.snapshot_began(TxnId(7), 10, 12);
        // A right taken in after it was asked (11) is not its version.
        r.called_back(obj(2), bytes(b"late"), 11, 20);
        // Called back before it began (12): the writer may have committed
        // before the snapshot.
        r.called_back(obj(3), bytes(b"early"), 3, 12);
        assert_eq!(r.bytes(), 0);
        r.called_back(obj(1), bytes(b"v1"), 4, 13);
        r.called_back(Resource::Page(PageId(9)), bytes(b"img"), 2, 30);
        assert_eq!(r.read(TxnId(7), obj(1)).as_deref(), Some(&b"v1"[..]));
        assert_eq!(
            r.read(TxnId(7), Resource::Page(PageId(9))).as_deref(),
            Some(&b"img"[..])
        );
        assert_eq!(r.read(TxnId(8), obj(1)), None, "not a snapshot");
        // A later snapshot (began after the callback) does not see v1.
        r.snapshot_began(TxnId(8), 31, 32);
        assert_eq!(r.read(TxnId(8), obj(1)), None);
        assert_eq!(r.read(TxnId(8), Resource::Page(PageId(9))), None);
        // Snapshot 7 ends: nothing left anybody reads.
        r.txn_ended(TxnId(7));
        assert_eq!(r.bytes(), 0);
        assert_eq!(r.read(TxnId(7), obj(1)), None);
        r.txn_ended(TxnId(8));
    }

    #[test]
    fn the_bound_is_kept() {
        let mut r = Retired {
            bytes_max: 5,
            ..Retired::default()
        };
        r.snapshot_began(TxnId(1), 10, 11);
        r.called_back(obj(1), bytes(b"abcd"), 1, 20);
        r.called_back(obj(2), bytes(b"ef"), 1, 21);
        assert_eq!(r.bytes(), 4);
        assert_eq!(r.read(TxnId(1), obj(2)), None);
        // Another snapshot still running keeps what it sees.
        r.snapshot_began(TxnId(2), 1, 2);
        r.txn_ended(TxnId(1));
        assert_eq!(r.bytes(), 4, "snapshot 2 sees it too");
        r.txn_ended(TxnId(2));
        assert_eq!(r.bytes(), 0);
    }
}
