//! The object service: what an object-server client asks of `cairn serve`
//! (DeWitt et al. §2.2; the wire format is in `docs/protocol.md`). The unit of transfer is an object;
//! the server runs the storage engine's object operations for the client,
//! in a transaction of its own per client transaction that locks single
//! objects (S/X on the object, IS/IX on its page), so clients change
//! different objects of one page at the same time.
//!
//! | kind | request body | final reply body |
//! |---|---|---|
//! | `0x0201` OBJ_FETCH | `txn u64, mode u8 (0 S, 1 X, 2 S with the page, 3 pages read ahead), count u16, oid[10] × count` | empty; one part per object ([`FetchedObject`]), streamed as read; in mode 2 ([`OBJ_S_PAGE`]) no parts: the final reply holds the objects asked for, in order, then per page its other small objects the server could lock S without waiting, or the page whole under a right on it ([`encode_fetched_batch`]); in mode 3 ([`OBJ_S_PAGE_AHEAD`]) the same with no objects, the pages that can go whole without a wait |
//! | `0x0202` OBJ_CREATE | `txn u64, group u32, near oid[10] (all zero: none), len u32, bytes` | `oid[10]` |
//! | `0x0203` OBJ_COMMIT | `txn u64, count u32, ([`Change`]) × count` | empty, once durable |
//! | `0x0204` OBJ_ABORT | `txn u64` | empty |
//! | `0x0205` OBJ_SCAN | `txn u64, group u32` | `count u32, oid[10] × count` |
//! | `0x0206` OBJ_READ_RANGE | `txn u64, oid[10], offset u64, len u32` | the bytes (fewer at the end of the object) |
//! | `0x0207` OBJ_FLUSH | as OBJ_COMMIT | empty, once the changes are applied in the transaction (not committed) |
//! | `0x0208` OBJ_METHOD | `txn u64, len u32, method` | the method's answer (`cairn::methods`) |
//! | `0x0209` | retired (was OBJ_CALLBACK_REPLY: now [`crate::rights`]'s CALLBACK_REPLY, for every client) | |
//! | `0x020A` | retired (was OBJ_RELEASE: now [`crate::rights`]'s RELEASE) | |
//! | `0x0210` TREE_OPEN | `txn u64, root u32` | `group u32` (the tree is checked) |
//! | `0x0211` TREE_CREATE | `txn u64, group u32, unique u8` | `root u32` |
//! | `0x0212` TREE_APPLY | `txn u64, root u32, count u32, ([`TreeOp`]) × count` | `count u32, page u32 × count`: the pages it changed, allocated or freed |
//! | `0x0213` TREE_GET | `txn u64, root u32, limit u32, key16` | `count u32, value32 × count`, then `0 u32` (no objects) and the rights as TREE_GET_OBJECTS |
//! | `0x0214` TREE_RANGE | `txn u64, root u32, limit u32, lo bound, hi bound, after u8 (0 none, 1: value32)` | `count u32, (key16, value32) × count, more u8` |
//! | `0x0215` TREE_DESTROY | `txn u64, root u32` | empty |
//! | `0x0218` TREE_GET_FOR_UPDATE | `txn u64, root u32, count u32 (1..=1,024), key16 × count` | `count u32, (found u8, value32 if found) × count`: each key's first value ([`encode_firsts`]), read to be changed next: under page locking each key's leaf under an update lock (U: readers share it, another such lookup waits), leaves in key order; no right |
//! | `0x0217` OBJ_SNAPSHOT | `txn u64` | the window, as the page service's SNAPSHOT ([`SnapshotInfo`](crate::page_service::SnapshotInfo)) |
//! | `0x0216` TREE_GET_OBJECTS | as TREE_GET | TREE_GET's reply, then `count u32, value32 × count`: the object each value names, read under S as OBJ_FETCH reads it (one [`FetchedObject`] each), then `count u8 (≤ 8), (key, right u64) × count` (a `key` as in [`crate::rights`]): rights to cache the answer (none: not cacheable) — on the leaves that enclose the key (tag 0), or on a server that locks key ranges on the gaps the lookup locked (tags 2 and 3) — an index lookup and the fetch of what it finds in one round trip |
//!
//! (`key16` is `len u16, bytes`; `value32` is `len u32, bytes`; a bound is
//! `tag u8` — 0 unbounded, 1 included, 2 excluded — then `key16` unless
//! unbounded.) The B+-trees (the catalog's and the indexes) are the
//! server's to walk: an object-server client names a tree by its root page
//! and the server runs the operation in the client's transaction, under the
//! page locks a B+-tree takes.
//!
//! Transactions are named by the client, as in the page service (any id but
//! 0; begun by the first request that names one). A FETCH locks each object
//! (S, or X for an object the client is about to change) and streams the
//! objects back as parts as the server reads them, so a client following a
//! list of references names them all in one request and takes the first
//! object in hand while the rest are still on their way. A large object is
//! read only in the ranges asked for (OBJ_READ_RANGE). A COMMIT carries the
//! after-image of each object the transaction changed (or its deletion):
//! the server applies them under X locks (taken then if not held), logs and
//! makes them durable — object-level redo, so another client's commit to
//! another object of the same page is not in the way — and answers.
//! Groups are named with the page service's GROUP and GROUPS requests,
//! which object sessions may use too.
//!
//! **Snapshots.** OBJ_SNAPSHOT begins the named transaction as a read-only
//! one at a snapshot of the last committed state (the page service's
//! SNAPSHOT, for object sessions). It reads with OBJ_FETCH in mode
//! [`OBJ_S`], OBJ_READ_RANGE, TREE_OPEN, TREE_GET, TREE_GET_OBJECTS and
//! TREE_RANGE, all as of the snapshot, without locks and never with a
//! right; it ends with OBJ_ABORT (or an OBJ_COMMIT with no changes). Any
//! other request naming it is refused (INVALID).
//!
//! **Callback locking at object granularity.** A fetched object may come
//! with a *right* (an epoch, [`FetchedObject::right`]): the client may keep
//! it across transactions and read it without asking, until the server
//! calls the right back because another client is about to change the
//! object. An index lookup whose key lies inside one leaf may come with a
//! right on that leaf. The callbacks, their answers and the rights given
//! back unasked are the messages every client shares ([`crate::rights`]).

use crate::frame::Kind;
use crate::message::{MessageError, Reader, Writer};

/// Objects one OBJ_FETCH may name.
pub const FETCH_OBJECTS_MAX: usize = 1024;
/// Changes one OBJ_COMMIT may carry.
pub const COMMIT_CHANGES_MAX: u32 = 1 << 20;
/// Bytes one OBJ_READ_RANGE may ask for.
pub const READ_RANGE_MAX: u32 = 4 << 20;
/// Bytes of an encoded OID.
pub const OID_BYTES: usize = 10;
/// The OID naming no object (a create without a neighbour).
pub const NO_OID: [u8; OID_BYTES] = [0; OID_BYTES];

/// [`ObjectRequest::Fetch`] mode: shared.
pub const OBJ_S: u8 = 0;
/// [`ObjectRequest::Fetch`] mode: exclusive (the client will change it).
pub const OBJ_X: u8 = 1;
/// [`ObjectRequest::Fetch`] mode: shared, and the named objects' pages
/// along (an adaptive client fetching a page's worth of objects in one
/// round trip): after the named objects, per home page the server sends
/// the page whole ([`FetchedPage`]: its committed image under a right on
/// the page) if the page's S lock needs no wait (no writer on it), else
/// every other small object stored whole on it that it can lock S without
/// waiting (one skipped is read through its own OID later), each with a
/// right to cache it as OBJ_FETCH grants one; all in the final reply (no
/// parts: one message, as a page server's page). The S locks are held to
/// the transaction's end, as a page server's page lock is.
pub const OBJ_S_PAGE: u8 = 2;
/// [`ObjectRequest::Fetch`] mode: read-ahead of whole pages (an adaptive
/// client reading its pages in sequence asks for the next ones before it
/// needs them). Each OID names its page only (the slot is ignored; a page
/// named twice counts once). The reply is [`OBJ_S_PAGE`]'s with no
/// objects: each page named that is an object page, whose S lock needs no
/// wait and to which a right can be had, whole; any other is left out
/// (nothing waits: the client fetches it when it needs it). A page's S
/// lock, once taken, is held to the transaction's end.
pub const OBJ_S_PAGE_AHEAD: u8 = 3;

impl Kind {
    /// OBJ_FETCH.
    pub const OBJ_FETCH: Kind = Kind(0x0201);
    /// OBJ_CREATE.
    pub const OBJ_CREATE: Kind = Kind(0x0202);
    /// OBJ_COMMIT.
    pub const OBJ_COMMIT: Kind = Kind(0x0203);
    /// OBJ_ABORT.
    pub const OBJ_ABORT: Kind = Kind(0x0204);
    /// OBJ_SCAN.
    pub const OBJ_SCAN: Kind = Kind(0x0205);
    /// OBJ_READ_RANGE.
    pub const OBJ_READ_RANGE: Kind = Kind(0x0206);
    /// OBJ_FLUSH.
    pub const OBJ_FLUSH: Kind = Kind(0x0207);
    /// OBJ_METHOD.
    pub const OBJ_METHOD: Kind = Kind(0x0208);
    /// TREE_OPEN.
    pub const TREE_OPEN: Kind = Kind(0x0210);
    /// TREE_CREATE.
    pub const TREE_CREATE: Kind = Kind(0x0211);
    /// TREE_APPLY.
    pub const TREE_APPLY: Kind = Kind(0x0212);
    /// TREE_GET.
    pub const TREE_GET: Kind = Kind(0x0213);
    /// TREE_RANGE.
    pub const TREE_RANGE: Kind = Kind(0x0214);
    /// TREE_DESTROY.
    pub const TREE_DESTROY: Kind = Kind(0x0215);
    /// TREE_GET_OBJECTS.
    pub const TREE_GET_OBJECTS: Kind = Kind(0x0216);
    /// OBJ_SNAPSHOT.
    pub const OBJ_SNAPSHOT: Kind = Kind(0x0217);
    /// TREE_GET_FOR_UPDATE.
    pub const TREE_GET_FOR_UPDATE: Kind = Kind(0x0218);
}

/// Keys one TREE_GET_FOR_UPDATE names at most.
pub const TREE_KEYS_MAX: usize = 1024;

/// Entries one TREE_GET or TREE_RANGE answers at most.
pub const TREE_LIMIT_MAX: u32 = 1 << 16;

fn malformed(what: &'static str, problem: &'static str) -> MessageError {
    MessageError::Malformed { what, problem }
}

fn get_key16(r: &mut Reader<'_>) -> Result<Vec<u8>, MessageError> {
    Ok(r.bytes16("a key")?.to_vec())
}

fn get_value32(r: &mut Reader<'_>) -> Result<Vec<u8>, MessageError> {
    Ok(r.bytes32("a value")?.to_vec())
}

fn oid(r: &mut Reader<'_>) -> Result<[u8; OID_BYTES], MessageError> {
    let mut o = [0u8; OID_BYTES];
    o.copy_from_slice(r.take(OID_BYTES, "an OID")?);
    Ok(o)
}

mod request;
pub use request::{Change, ObjectRequest, TreeOp};

mod replies;
pub use replies::*;

mod batch;
pub use batch::*;

#[cfg(test)]
mod tests;
