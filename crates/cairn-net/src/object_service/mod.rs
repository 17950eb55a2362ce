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
//! | `0x0209` OBJ_CALLBACK_REPLY | [`ObjectCallbackReply`] ([`rights`]) | empty |
//! | `0x020A` OBJ_RELEASE | rights given back ([`rights`]) | none (sent one way) |
//! | `0x0210` TREE_OPEN | `txn u64, root u32` | `group u32` (the tree is checked) |
//! | `0x0211` TREE_CREATE | `txn u64, group u32, unique u8` | `root u32` |
//! | `0x0212` TREE_APPLY | `txn u64, root u32, count u32, ([`TreeOp`]) × count` | `count u32, page u32 × count`: the pages it changed, allocated or freed |
//! | `0x0213` TREE_GET | `txn u64, root u32, limit u32, key16` | `count u32, value32 × count`, then `0 u32` (no objects) and the leaves' rights as TREE_GET_OBJECTS |
//! | `0x0214` TREE_RANGE | `txn u64, root u32, limit u32, lo bound, hi bound, after u8 (0 none, 1: value32)` | `count u32, (key16, value32) × count, more u8` |
//! | `0x0215` TREE_DESTROY | `txn u64, root u32` | empty |
//! | `0x0216` TREE_GET_OBJECTS | as TREE_GET | TREE_GET's reply, then `count u32, value32 × count`: the object each value names, read under S as OBJ_FETCH reads it (one [`FetchedObject`] each), then `count u8 (≤ 8), (leaf u32, right u64) × count`: rights on the leaves that enclose the key, to cache the answer (none: not cacheable) — an index lookup and the fetch of what it finds in one round trip |
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
//! **Callback locking at object granularity.** A fetched object may come
//! with a *right* (an epoch, [`FetchedObject::right`]): the client may keep
//! it across transactions and read it without asking, until the server
//! calls the right back ([`rights::ObjectCallback`]) because another client
//! is about to change the object. An index lookup whose key lies inside one
//! leaf may come with a right on that leaf. The answers and the rights
//! given back unasked are in [`rights`].

pub mod rights;

use std::ops::Bound;

use crate::frame::Kind;
use crate::message::{MessageError, Reader};
pub use rights::{ObjectCallback, ObjectCallbackReply, RightKey};

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
    /// An object session's answer to a callback (`object_service::rights`).
    pub const OBJ_CALLBACK_REPLY: Kind = Kind(0x0209);
    /// Rights an object session gives back unasked.
    pub const OBJ_RELEASE: Kind = Kind(0x020A);
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
}

/// Entries one TREE_GET or TREE_RANGE answers at most.
pub const TREE_LIMIT_MAX: u32 = 1 << 16;

/// One change of a TREE_APPLY: `op u8 (0 insert, 1 delete, 2 delete one
/// value)`, `key16`, then `value32` for 0 and 2.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TreeOp {
    /// Inserts (key, value).
    Insert {
        /// The key.
        key: Vec<u8>,
        /// The value.
        value: Vec<u8>,
    },
    /// Deletes the key's entries (all of them, or the one with `value`).
    Delete {
        /// The key.
        key: Vec<u8>,
        /// Only the entry with this value.
        value: Option<Vec<u8>>,
    },
}

/// One change an OBJ_COMMIT carries: `oid[10], op u8 (0 update, 1
/// delete)`, then for an update `len u32, bytes` (the whole new object).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// The object's new bytes.
    Update {
        /// The object.
        oid: [u8; OID_BYTES],
        /// Its whole new value.
        bytes: Vec<u8>,
    },
    /// The object is deleted.
    Delete {
        /// The object.
        oid: [u8; OID_BYTES],
    },
}

/// An object-service request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ObjectRequest {
    /// OBJ_FETCH.
    Fetch {
        /// The transaction.
        txn: u64,
        /// [`OBJ_S`], [`OBJ_X`] or [`OBJ_S_PAGE`].
        mode: u8,
        /// The objects, at most [`FETCH_OBJECTS_MAX`].
        oids: Vec<[u8; OID_BYTES]>,
    },
    /// OBJ_CREATE.
    Create {
        /// The transaction.
        txn: u64,
        /// The group.
        group: u32,
        /// An object to place it near, or [`NO_OID`].
        near: [u8; OID_BYTES],
        /// The new object's bytes.
        bytes: Vec<u8>,
    },
    /// OBJ_COMMIT.
    Commit {
        /// The transaction.
        txn: u64,
        /// Its changes, in order.
        changes: Vec<Change>,
    },
    /// OBJ_FLUSH: changes applied in the transaction's private scope (a
    /// server method that follows sees them), not committed.
    Flush {
        /// The transaction.
        txn: u64,
        /// Its changes, in order.
        changes: Vec<Change>,
    },
    /// OBJ_METHOD: a server-side method (selection, count, traversal),
    /// encoded by the client library, run in the transaction.
    Method {
        /// The transaction.
        txn: u64,
        /// The method.
        method: Vec<u8>,
    },
    /// OBJ_ABORT.
    Abort {
        /// The transaction.
        txn: u64,
    },
    /// OBJ_CALLBACK_REPLY.
    CallbackReply(ObjectCallbackReply),
    /// OBJ_RELEASE: rights (key, epoch) given back.
    Release {
        /// At most 4,096.
        rights: Vec<(RightKey, u64)>,
    },
    /// OBJ_SCAN: the OIDs of a group's objects.
    Scan {
        /// The transaction.
        txn: u64,
        /// The group.
        group: u32,
    },
    /// TREE_OPEN: checks that `root` is a B+-tree root; answers its group.
    TreeOpen {
        /// The transaction.
        txn: u64,
        /// The root page.
        root: u32,
    },
    /// TREE_CREATE.
    TreeCreate {
        /// The transaction.
        txn: u64,
        /// The group its pages belong to.
        group: u32,
        /// One value per key.
        unique: bool,
    },
    /// TREE_APPLY: changes, in order.
    TreeApply {
        /// The transaction.
        txn: u64,
        /// The root page.
        root: u32,
        /// The changes.
        ops: Vec<TreeOp>,
    },
    /// TREE_GET: the values of one key (at most `limit`); with `objects`
    /// (TREE_GET_OBJECTS) also the object each value names (an OID).
    TreeGet {
        /// The transaction.
        txn: u64,
        /// The root page.
        root: u32,
        /// At most this many values (1..=[`TREE_LIMIT_MAX`]).
        limit: u32,
        /// The key.
        key: Vec<u8>,
        /// Fetch the objects the values name too.
        objects: bool,
    },
    /// TREE_RANGE: entries between two bounds in key order (at most
    /// `limit`; the reply says if more follow).
    TreeRange {
        /// The transaction.
        txn: u64,
        /// The root page.
        root: u32,
        /// At most this many entries (1..=[`TREE_LIMIT_MAX`]).
        limit: u32,
        /// The low bound.
        lo: Bound<Vec<u8>>,
        /// The high bound.
        hi: Bound<Vec<u8>>,
        /// Resuming: entries whose key is the low bound's and whose value
        /// is at most this are skipped (a key's values continue where the
        /// last reply stopped).
        after: Option<Vec<u8>>,
    },
    /// TREE_DESTROY: frees every page of the tree.
    TreeDestroy {
        /// The transaction.
        txn: u64,
        /// The root page.
        root: u32,
    },
    /// OBJ_READ_RANGE: bytes of one object.
    ReadRange {
        /// The transaction.
        txn: u64,
        /// The object.
        oid: [u8; OID_BYTES],
        /// The first byte.
        offset: u64,
        /// How many, at most [`READ_RANGE_MAX`].
        len: u32,
    },
}

fn malformed(what: &'static str, problem: &'static str) -> MessageError {
    MessageError::Malformed { what, problem }
}

fn key16(out: &mut Vec<u8>, k: &[u8]) {
    let k = &k[..k.len().min(u16::MAX as usize)];
    out.extend_from_slice(&(k.len() as u16).to_le_bytes());
    out.extend_from_slice(k);
}

fn value32(out: &mut Vec<u8>, v: &[u8]) {
    out.extend_from_slice(&(v.len() as u32).to_le_bytes());
    out.extend_from_slice(v);
}

fn get_key16(r: &mut Reader<'_>) -> Result<Vec<u8>, MessageError> {
    Ok(r.bytes16("a key")?.to_vec())
}

fn get_value32(r: &mut Reader<'_>) -> Result<Vec<u8>, MessageError> {
    Ok(r.bytes32("a value")?.to_vec())
}

fn put_bound(out: &mut Vec<u8>, b: &Bound<Vec<u8>>) {
    match b {
        Bound::Unbounded => out.push(0),
        Bound::Included(k) => {
            out.push(1);
            key16(out, k);
        }
        Bound::Excluded(k) => {
            out.push(2);
            key16(out, k);
        }
    }
}

fn get_bound(r: &mut Reader<'_>, what: &'static str) -> Result<Bound<Vec<u8>>, MessageError> {
    Ok(match r.u8("a bound")? {
        0 => Bound::Unbounded,
        1 => Bound::Included(get_key16(r)?),
        2 => Bound::Excluded(get_key16(r)?),
        _ => return Err(malformed(what, "a bound is 0, 1 or 2")),
    })
}

fn get_limit(r: &mut Reader<'_>, what: &'static str) -> Result<u32, MessageError> {
    let limit = r.u32("limit")?;
    if limit == 0 || limit > TREE_LIMIT_MAX {
        return Err(malformed(what, "a tree read asks for 1 to 65,536 entries"));
    }
    Ok(limit)
}

fn oid(r: &mut Reader<'_>) -> Result<[u8; OID_BYTES], MessageError> {
    let mut o = [0u8; OID_BYTES];
    o.copy_from_slice(r.take(OID_BYTES, "an OID")?);
    Ok(o)
}

impl ObjectRequest {
    /// The client transaction the request runs in, if it names one.
    pub fn txn(&self) -> Option<u64> {
        match self {
            ObjectRequest::Fetch { txn, .. }
            | ObjectRequest::Create { txn, .. }
            | ObjectRequest::Commit { txn, .. }
            | ObjectRequest::Flush { txn, .. }
            | ObjectRequest::Method { txn, .. }
            | ObjectRequest::Abort { txn }
            | ObjectRequest::Scan { txn, .. }
            | ObjectRequest::TreeOpen { txn, .. }
            | ObjectRequest::TreeCreate { txn, .. }
            | ObjectRequest::TreeApply { txn, .. }
            | ObjectRequest::TreeGet { txn, .. }
            | ObjectRequest::TreeRange { txn, .. }
            | ObjectRequest::TreeDestroy { txn, .. }
            | ObjectRequest::ReadRange { txn, .. } => Some(*txn),
            ObjectRequest::CallbackReply(_) | ObjectRequest::Release { .. } => None,
        }
    }

    /// The request's kind and body.
    pub fn encode(&self) -> (Kind, Vec<u8>) {
        let mut out = Vec::new();
        let kind = match self {
            ObjectRequest::Fetch { txn, mode, oids } => {
                out.extend_from_slice(&txn.to_le_bytes());
                out.push(*mode);
                let n = oids.len().min(FETCH_OBJECTS_MAX);
                out.extend_from_slice(&(n as u16).to_le_bytes());
                for o in &oids[..n] {
                    out.extend_from_slice(o);
                }
                Kind::OBJ_FETCH
            }
            ObjectRequest::Create {
                txn,
                group,
                near,
                bytes,
            } => {
                out.extend_from_slice(&txn.to_le_bytes());
                out.extend_from_slice(&group.to_le_bytes());
                out.extend_from_slice(near);
                out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
                out.extend_from_slice(bytes);
                Kind::OBJ_CREATE
            }
            ObjectRequest::Commit { txn, changes } | ObjectRequest::Flush { txn, changes } => {
                out.extend_from_slice(&txn.to_le_bytes());
                out.extend_from_slice(&(changes.len() as u32).to_le_bytes());
                for c in changes {
                    match c {
                        Change::Update { oid, bytes } => {
                            out.extend_from_slice(oid);
                            out.push(0);
                            out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
                            out.extend_from_slice(bytes);
                        }
                        Change::Delete { oid } => {
                            out.extend_from_slice(oid);
                            out.push(1);
                        }
                    }
                }
                if matches!(self, ObjectRequest::Flush { .. }) {
                    Kind::OBJ_FLUSH
                } else {
                    Kind::OBJ_COMMIT
                }
            }
            ObjectRequest::Method { txn, method } => {
                out.extend_from_slice(&txn.to_le_bytes());
                value32(&mut out, method);
                Kind::OBJ_METHOD
            }
            ObjectRequest::Abort { txn } => {
                out.extend_from_slice(&txn.to_le_bytes());
                Kind::OBJ_ABORT
            }
            ObjectRequest::CallbackReply(c) => {
                c.put(&mut out);
                Kind::OBJ_CALLBACK_REPLY
            }
            ObjectRequest::Release { rights } => {
                rights::put_release(&mut out, rights);
                Kind::OBJ_RELEASE
            }
            ObjectRequest::Scan { txn, group } => {
                out.extend_from_slice(&txn.to_le_bytes());
                out.extend_from_slice(&group.to_le_bytes());
                Kind::OBJ_SCAN
            }
            ObjectRequest::TreeOpen { txn, root } => {
                out.extend_from_slice(&txn.to_le_bytes());
                out.extend_from_slice(&root.to_le_bytes());
                Kind::TREE_OPEN
            }
            ObjectRequest::TreeCreate { txn, group, unique } => {
                out.extend_from_slice(&txn.to_le_bytes());
                out.extend_from_slice(&group.to_le_bytes());
                out.push(u8::from(*unique));
                Kind::TREE_CREATE
            }
            ObjectRequest::TreeApply { txn, root, ops } => {
                out.extend_from_slice(&txn.to_le_bytes());
                out.extend_from_slice(&root.to_le_bytes());
                out.extend_from_slice(&(ops.len() as u32).to_le_bytes());
                for op in ops {
                    match op {
                        TreeOp::Insert { key, value } => {
                            out.push(0);
                            key16(&mut out, key);
                            value32(&mut out, value);
                        }
                        TreeOp::Delete { key, value: None } => {
                            out.push(1);
                            key16(&mut out, key);
                        }
                        TreeOp::Delete { key, value: Some(v) } => {
                            out.push(2);
                            key16(&mut out, key);
                            value32(&mut out, v);
                        }
                    }
                }
                Kind::TREE_APPLY
            }
            ObjectRequest::TreeGet {
                txn,
                root,
                limit,
                key,
                objects,
            } => {
                out.extend_from_slice(&txn.to_le_bytes());
                out.extend_from_slice(&root.to_le_bytes());
                out.extend_from_slice(&limit.to_le_bytes());
                key16(&mut out, key);
                if *objects {
                    Kind::TREE_GET_OBJECTS
                } else {
                    Kind::TREE_GET
                }
            }
            ObjectRequest::TreeRange {
                txn,
                root,
                limit,
                lo,
                hi,
                after,
            } => {
                out.extend_from_slice(&txn.to_le_bytes());
                out.extend_from_slice(&root.to_le_bytes());
                out.extend_from_slice(&limit.to_le_bytes());
                put_bound(&mut out, lo);
                put_bound(&mut out, hi);
                match after {
                    None => out.push(0),
                    Some(v) => {
                        out.push(1);
                        value32(&mut out, v);
                    }
                }
                Kind::TREE_RANGE
            }
            ObjectRequest::TreeDestroy { txn, root } => {
                out.extend_from_slice(&txn.to_le_bytes());
                out.extend_from_slice(&root.to_le_bytes());
                Kind::TREE_DESTROY
            }
            ObjectRequest::ReadRange { txn, oid, offset, len } => {
                out.extend_from_slice(&txn.to_le_bytes());
                out.extend_from_slice(oid);
                out.extend_from_slice(&offset.to_le_bytes());
                out.extend_from_slice(&len.to_le_bytes());
                Kind::OBJ_READ_RANGE
            }
        };
        (kind, out)
    }

    /// Decodes a request; an unknown kind is `Ok(None)` (another service's).
    pub fn decode(kind: Kind, body: &[u8]) -> Result<Option<ObjectRequest>, MessageError> {
        let what = "object service request";
        let mut r = Reader::within(what, body);
        let req = match kind {
            Kind::OBJ_FETCH => {
                let txn = r.u64("txn")?;
                let mode = r.u8("mode")?;
                if mode > OBJ_S_PAGE_AHEAD {
                    return Err(malformed(
                        what,
                        "an OBJ_FETCH mode is 0 (S), 1 (X), 2 (S with the page) or 3 (pages read ahead)",
                    ));
                }
                let n = r.u16("object count")? as usize;
                if n == 0 || n > FETCH_OBJECTS_MAX {
                    return Err(malformed(what, "an OBJ_FETCH names 1 to 1,024 objects"));
                }
                r.check_count("a count", n as u64, OID_BYTES)?;
                let oids = (0..n).map(|_| oid(&mut r)).collect::<Result<_, _>>()?;
                ObjectRequest::Fetch { txn, mode, oids }
            }
            Kind::OBJ_CREATE => {
                let txn = r.u64("txn")?;
                let group = r.u32("group")?;
                let near = oid(&mut r)?;
                let bytes = r.bytes32("the object")?.to_vec();
                ObjectRequest::Create {
                    txn,
                    group,
                    near,
                    bytes,
                }
            }
            Kind::OBJ_COMMIT | Kind::OBJ_FLUSH => {
                let txn = r.u64("txn")?;
                let n = r.u32("change count")?;
                if n > COMMIT_CHANGES_MAX {
                    return Err(malformed(what, "an OBJ_COMMIT carries too many changes"));
                }
                r.check_count("a count", n as usize as u64, OID_BYTES + 1)?;
                let mut changes = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    let o = oid(&mut r)?;
                    changes.push(match r.u8("a change kind")? {
                        0 => Change::Update {
                            oid: o,
                            bytes: r.bytes32("an object")?.to_vec(),
                        },
                        1 => Change::Delete { oid: o },
                        _ => return Err(malformed(what, "a change is 0 (update) or 1 (delete)")),
                    });
                }
                if kind == Kind::OBJ_FLUSH {
                    ObjectRequest::Flush { txn, changes }
                } else {
                    ObjectRequest::Commit { txn, changes }
                }
            }
            Kind::OBJ_METHOD => ObjectRequest::Method {
                txn: r.u64("txn")?,
                method: get_value32(&mut r)?,
            },
            Kind::OBJ_ABORT => ObjectRequest::Abort { txn: r.u64("txn")? },
            Kind::OBJ_CALLBACK_REPLY => ObjectRequest::CallbackReply(ObjectCallbackReply::get(&mut r, what)?),
            Kind::OBJ_RELEASE => ObjectRequest::Release {
                rights: rights::get_release(&mut r, what)?,
            },
            Kind::OBJ_SCAN => ObjectRequest::Scan {
                txn: r.u64("txn")?,
                group: r.u32("group")?,
            },
            Kind::OBJ_READ_RANGE => {
                let txn = r.u64("txn")?;
                let o = oid(&mut r)?;
                let offset = r.u64("offset")?;
                let len = r.u32("length")?;
                if len > READ_RANGE_MAX {
                    return Err(malformed(what, "an OBJ_READ_RANGE asks for more than 4 MiB"));
                }
                ObjectRequest::ReadRange {
                    txn,
                    oid: o,
                    offset,
                    len,
                }
            }
            Kind::TREE_OPEN => ObjectRequest::TreeOpen {
                txn: r.u64("txn")?,
                root: r.u32("root")?,
            },
            Kind::TREE_CREATE => ObjectRequest::TreeCreate {
                txn: r.u64("txn")?,
                group: r.u32("group")?,
                unique: match r.u8("the unique flag")? {
                    0 => false,
                    1 => true,
                    _ => return Err(malformed(what, "a TREE_CREATE unique flag is 0 or 1")),
                },
            },
            Kind::TREE_APPLY => {
                let txn = r.u64("txn")?;
                let root = r.u32("root")?;
                let n = r.u32("change count")?;
                if n > COMMIT_CHANGES_MAX {
                    return Err(malformed(what, "a TREE_APPLY carries too many changes"));
                }
                r.check_count("a count", n as usize as u64, 3)?;
                let mut ops = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    let op = r.u8("op")?;
                    let key = get_key16(&mut r)?;
                    ops.push(match op {
                        0 => TreeOp::Insert {
                            key,
                            value: get_value32(&mut r)?,
                        },
                        1 => TreeOp::Delete { key, value: None },
                        2 => TreeOp::Delete {
                            key,
                            value: Some(get_value32(&mut r)?),
                        },
                        _ => return Err(malformed(what, "a tree change is 0, 1 or 2")),
                    });
                }
                ObjectRequest::TreeApply { txn, root, ops }
            }
            Kind::TREE_GET | Kind::TREE_GET_OBJECTS => ObjectRequest::TreeGet {
                txn: r.u64("txn")?,
                root: r.u32("root")?,
                limit: get_limit(&mut r, what)?,
                key: get_key16(&mut r)?,
                objects: kind == Kind::TREE_GET_OBJECTS,
            },
            Kind::TREE_RANGE => ObjectRequest::TreeRange {
                txn: r.u64("txn")?,
                root: r.u32("root")?,
                limit: get_limit(&mut r, what)?,
                lo: get_bound(&mut r, what)?,
                hi: get_bound(&mut r, what)?,
                after: match r.u8("the resume flag")? {
                    0 => None,
                    1 => Some(get_value32(&mut r)?),
                    _ => return Err(malformed(what, "a TREE_RANGE resume flag is 0 or 1")),
                },
            },
            Kind::TREE_DESTROY => ObjectRequest::TreeDestroy {
                txn: r.u64("txn")?,
                root: r.u32("root")?,
            },
            _ => return Ok(None),
        };
        r.finish("the body")?;
        Ok(Some(req))
    }
}

/// One OBJ_FETCH part: `oid[10], status u8 (0 found, 1 no such object),
/// total_len u64, right u64`, then the object's bytes if found — the whole object, or,
/// for one longer than the request's limit, none (`total_len` tells the
/// client to read it in ranges).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FetchedObject<'a> {
    /// The object.
    pub oid: [u8; OID_BYTES],
    /// False if there is no such object (nothing was locked).
    pub found: bool,
    /// The object's length in bytes.
    pub total_len: u64,
    /// Its bytes (empty if not found, or too long to send whole).
    pub bytes: &'a [u8],
    /// The epoch of the client's right to cache the object across its
    /// transactions (0: none; see [`rights`]).
    pub right: u64,
}

/// Bytes of a fetched object's header.
pub const FETCHED_OBJECT_HEADER: usize = OID_BYTES + 1 + 8 + 8;

impl FetchedObject<'_> {
    /// Encodes the part.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(FETCHED_OBJECT_HEADER + self.bytes.len());
        out.extend_from_slice(&self.oid);
        out.push(u8::from(!self.found));
        out.extend_from_slice(&self.total_len.to_le_bytes());
        out.extend_from_slice(&self.right.to_le_bytes());
        out.extend_from_slice(self.bytes);
        out
    }

    /// Decodes a part.
    pub fn decode(body: &[u8]) -> Result<FetchedObject<'_>, MessageError> {
        let what = "OBJ_FETCH part";
        let mut r = Reader::within(what, body);
        let o = oid(&mut r)?;
        let found = match r.u8("a flag")? {
            0 => true,
            1 => false,
            _ => return Err(malformed(what, "an object status is 0 or 1")),
        };
        let total_len = r.u64("total len")?;
        let right = r.u64("right")?;
        let bytes = &body[FETCHED_OBJECT_HEADER..];
        if bytes.len() as u64 > total_len || (!found && (total_len != 0 || !bytes.is_empty())) {
            return Err(malformed(what, "object bytes that disagree with its length or status"));
        }
        if !bytes.is_empty() && bytes.len() as u64 != total_len {
            return Err(malformed(what, "an object sent in part"));
        }
        if right != 0 && (!found || bytes.len() as u64 != total_len) {
            return Err(malformed(what, "a right to cache an object not sent whole"));
        }
        Ok(FetchedObject {
            oid: o,
            found,
            total_len,
            bytes,
            right,
        })
    }
}

/// Encodes TREE_GET's reply: `count u32, value32 × count`.
pub fn encode_values(values: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&(values.len() as u32).to_le_bytes());
    for v in values {
        value32(&mut out, v);
    }
    out
}

/// Decodes what [`encode_values`] wrote.
pub fn decode_values(body: &[u8]) -> Result<Vec<Vec<u8>>, MessageError> {
    let mut r = Reader::within("TREE_GET reply", body);
    let values = get_values(&mut r)?;
    r.finish("the body")?;
    Ok(values)
}

fn get_values(r: &mut Reader<'_>) -> Result<Vec<Vec<u8>>, MessageError> {
    let n = r.count32("a count", 4)?;
    (0..n).map(|_| get_value32(r)).collect()
}

/// TREE_GET_OBJECTS's reply, and TREE_GET's (with no objects).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ValuesAndObjects {
    /// The key's values.
    pub values: Vec<Vec<u8>>,
    /// One encoded [`FetchedObject`] per value.
    pub objects: Vec<Vec<u8>>,
    /// Rights (leaf, epoch) to cache the answer until one of the leaves
    /// that enclose the key changes; at most [`LOOKUP_LEAVES_MAX`] (empty:
    /// the answer is not to be kept).
    pub leaves: Vec<(u32, u64)>,
}

/// Leaves a lookup's rights name at most.
pub const LOOKUP_LEAVES_MAX: usize = 8;

impl ValuesAndObjects {
    /// Encodes the reply.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = encode_values(&self.values);
        out.extend_from_slice(&encode_values(&self.objects));
        let leaves = &self.leaves[..self.leaves.len().min(LOOKUP_LEAVES_MAX)];
        out.push(leaves.len() as u8);
        for (leaf, epoch) in leaves {
            out.extend_from_slice(&leaf.to_le_bytes());
            out.extend_from_slice(&epoch.to_le_bytes());
        }
        out
    }

    /// Decodes the reply: as many objects as values (TREE_GET_OBJECTS), or
    /// none (TREE_GET).
    pub fn decode(body: &[u8]) -> Result<ValuesAndObjects, MessageError> {
        let what = "TREE_GET_OBJECTS reply";
        let mut r = Reader::within(what, body);
        let values = get_values(&mut r)?;
        let objects = get_values(&mut r)?;
        let n = r.u8("a count")? as usize;
        if n > LOOKUP_LEAVES_MAX {
            return Err(malformed(what, "rights on more than 8 leaves"));
        }
        let leaves = (0..n)
            .map(|_| Ok((r.u32("a page")?, r.u64("an LSN or epoch")?)))
            .collect::<Result<_, MessageError>>()?;
        r.finish("the body")?;
        if !objects.is_empty() && objects.len() != values.len() {
            return Err(malformed(
                what,
                "one object per value (TREE_GET_OBJECTS) or none (TREE_GET)",
            ));
        }
        Ok(ValuesAndObjects {
            values,
            objects,
            leaves,
        })
    }
}

/// Encodes TREE_RANGE's reply: `count u32, (key16, value32) × count, more u8`.
pub fn encode_entries(entries: &[(Vec<u8>, Vec<u8>)], more: bool) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&(entries.len() as u32).to_le_bytes());
    for (k, v) in entries {
        key16(&mut out, k);
        value32(&mut out, v);
    }
    out.push(u8::from(more));
    out
}

/// Decodes what [`encode_entries`] wrote.
#[allow(clippy::type_complexity)]
pub fn decode_entries(body: &[u8]) -> Result<(Vec<(Vec<u8>, Vec<u8>)>, bool), MessageError> {
    let what = "TREE_RANGE reply";
    let mut r = Reader::within(what, body);
    let n = r.count32("a count", 6)?;
    let mut entries = Vec::with_capacity(n);
    for _ in 0..n {
        let k = get_key16(&mut r)?;
        entries.push((k, get_value32(&mut r)?));
    }
    let more = match r.u8("a flag")? {
        0 => false,
        1 => true,
        _ => return Err(malformed(what, "the more flag is 0 or 1")),
    };
    r.finish("the body")?;
    Ok((entries, more))
}

/// Encodes a list of OIDs: `count u32, oid[10] × count` (OBJ_SCAN's reply).
pub fn encode_oids(oids: &[[u8; OID_BYTES]]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + oids.len() * OID_BYTES);
    out.extend_from_slice(&(oids.len() as u32).to_le_bytes());
    for o in oids {
        out.extend_from_slice(o);
    }
    out
}

/// Decodes what [`encode_oids`] wrote.
pub fn decode_oids(body: &[u8]) -> Result<Vec<[u8; OID_BYTES]>, MessageError> {
    let mut r = Reader::within("OID list", body);
    let n = r.count32("a count", OID_BYTES)?;
    let oids = (0..n).map(|_| oid(&mut r)).collect::<Result<_, _>>()?;
    r.finish("the body")?;
    Ok(oids)
}

mod batch;
pub use batch::*;

#[cfg(test)]
mod tests;
