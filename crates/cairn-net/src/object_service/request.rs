//! The object service's requests: [`ObjectRequest`] and the parts of the
//! larger ones ([`Change`], [`TreeOp`]), each encoding and decoding itself
//! with the one byte [`Writer`] and [`Reader`]. The byte layout of each is
//! in the module table of [`object_service`](super).

use std::ops::Bound;

use super::{
    get_key16, get_value32, malformed, oid, MessageError, Reader, Writer, COMMIT_CHANGES_MAX, FETCH_OBJECTS_MAX,
    OBJ_S_PAGE_AHEAD, OID_BYTES, READ_RANGE_MAX, TREE_KEYS_MAX, TREE_LIMIT_MAX,
};
use crate::frame::Kind;

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
/// delete, 2 append)`, then for an update `len u32, bytes` (the whole new
/// object), for an append `class u32, field key16 (UTF-8), elem key16,
/// count u32, elems value32`.
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
    /// Elements added at the end of a list field of the object, which the
    /// client did not read: the server applies them at commit to the
    /// object as it then stands, under an append lock other appenders
    /// share (or, where it cannot keep them so, reads the object under X
    /// and rewrites it), placing the field by its own catalog.
    Append {
        /// The object.
        oid: [u8; OID_BYTES],
        /// Its class (the first field of its records).
        class: u32,
        /// The list field's name.
        field: String,
        /// The elements' type, as a schema stores a type descriptor.
        elem: Vec<u8>,
        /// How many elements `elems` holds.
        count: u32,
        /// The elements, encoded one after another.
        elems: Vec<u8>,
    },
}

/// An object-service request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ObjectRequest {
    /// OBJ_FETCH.
    Fetch {
        /// The transaction.
        txn: u64,
        /// [`OBJ_S`](super::OBJ_S), [`OBJ_X`](super::OBJ_X) or [`OBJ_S_PAGE`](super::OBJ_S_PAGE).
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
        /// An object to place it near, or [`NO_OID`](super::NO_OID).
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
    /// OBJ_SNAPSHOT: begins `txn` as a read-only transaction at a
    /// snapshot; the reply is its window
    /// ([`SnapshotInfo`](crate::page_service::SnapshotInfo)).
    Snapshot {
        /// The transaction (new to the session).
        txn: u64,
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
    /// TREE_GET_FOR_UPDATE: the first value of each key, looked up to be
    /// changed next ([`TREE_KEYS_MAX`] keys at most): under page locking
    /// the server reads each key's leaf under an update lock (U), leaves
    /// in key order, so two transactions that look keys up and then change
    /// the same leaves queue instead of deadlocking. No right comes with
    /// the answer.
    TreeGetForUpdate {
        /// The transaction.
        txn: u64,
        /// The root page.
        root: u32,
        /// The keys.
        keys: Vec<Vec<u8>>,
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

fn put_bound(w: &mut Writer, b: &Bound<Vec<u8>>) {
    match b {
        Bound::Unbounded => w.put_u8(0),
        Bound::Included(k) => {
            w.put_u8(1);
            w.put_bytes16(k);
        }
        Bound::Excluded(k) => {
            w.put_u8(2);
            w.put_bytes16(k);
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

impl TreeOp {
    fn put(&self, w: &mut Writer) {
        match self {
            TreeOp::Insert { key, value } => {
                w.put_u8(0);
                w.put_bytes16(key);
                w.put_bytes32(value);
            }
            TreeOp::Delete { key, value: None } => {
                w.put_u8(1);
                w.put_bytes16(key);
            }
            TreeOp::Delete { key, value: Some(v) } => {
                w.put_u8(2);
                w.put_bytes16(key);
                w.put_bytes32(v);
            }
        }
    }

    fn get(r: &mut Reader<'_>, what: &'static str) -> Result<TreeOp, MessageError> {
        let op = r.u8("a tree change's kind")?;
        let key = get_key16(r)?;
        Ok(match op {
            0 => TreeOp::Insert {
                key,
                value: get_value32(r)?,
            },
            1 => TreeOp::Delete { key, value: None },
            2 => TreeOp::Delete {
                key,
                value: Some(get_value32(r)?),
            },
            _ => return Err(malformed(what, "a tree change is 0, 1 or 2")),
        })
    }
}

impl Change {
    pub(crate) fn put(&self, w: &mut Writer) {
        match self {
            Change::Update { oid, bytes } => {
                w.put(oid);
                w.put_u8(0);
                w.put_bytes32(bytes);
            }
            Change::Delete { oid } => {
                w.put(oid);
                w.put_u8(1);
            }
            Change::Append {
                oid,
                class,
                field,
                elem,
                count,
                elems,
            } => {
                w.put(oid);
                w.put_u8(2);
                w.put_u32(*class);
                w.put_bytes16(field.as_bytes());
                w.put_bytes16(elem);
                w.put_u32(*count);
                w.put_bytes32(elems);
            }
        }
    }

    /// The object the change is to.
    pub fn oid(&self) -> [u8; OID_BYTES] {
        match self {
            Change::Update { oid, .. } | Change::Delete { oid } | Change::Append { oid, .. } => *oid,
        }
    }

    /// The bytes of object data it carries (what a transaction's bound on
    /// its changes counts).
    pub fn data_len(&self) -> usize {
        match self {
            Change::Update { bytes, .. } => bytes.len(),
            Change::Delete { .. } => 0,
            Change::Append { elems, .. } => elems.len(),
        }
    }

    pub(crate) fn get(r: &mut Reader<'_>, what: &'static str) -> Result<Change, MessageError> {
        let o = oid(r)?;
        Ok(match r.u8("a change's kind")? {
            0 => Change::Update {
                oid: o,
                bytes: r.bytes32("an object")?.to_vec(),
            },
            1 => Change::Delete { oid: o },
            2 => Change::Append {
                oid: o,
                class: r.u32("an append's class")?,
                field: r.str16("an append's field")?.to_string(),
                elem: r.bytes16("an append's element type")?.to_vec(),
                count: r.u32("an append's element count")?,
                elems: r.bytes32("an append's elements")?.to_vec(),
            },
            _ => return Err(malformed(what, "a change is 0 (update), 1 (delete) or 2 (append)")),
        })
    }
}

/// A `u32` count of at most [`COMMIT_CHANGES_MAX`] items, each at least
/// `min_bytes` long; `too_many` says which request carried too many.
fn changes_count(
    r: &mut Reader<'_>,
    what: &'static str,
    min_bytes: usize,
    too_many: &'static str,
) -> Result<usize, MessageError> {
    let n = r.u32("a change count")?;
    if n > COMMIT_CHANGES_MAX {
        return Err(malformed(what, too_many));
    }
    Ok(r.check_count("a change count", u64::from(n), min_bytes)?)
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
            | ObjectRequest::Snapshot { txn }
            | ObjectRequest::Scan { txn, .. }
            | ObjectRequest::TreeOpen { txn, .. }
            | ObjectRequest::TreeCreate { txn, .. }
            | ObjectRequest::TreeApply { txn, .. }
            | ObjectRequest::TreeGet { txn, .. }
            | ObjectRequest::TreeGetForUpdate { txn, .. }
            | ObjectRequest::TreeRange { txn, .. }
            | ObjectRequest::TreeDestroy { txn, .. }
            | ObjectRequest::ReadRange { txn, .. } => Some(*txn),
        }
    }

    /// The request's kind and body.
    pub fn encode(&self) -> (Kind, Vec<u8>) {
        let mut w = Writer::new();
        let kind = self.put(&mut w);
        (kind, w.into_bytes())
    }

    /// Writes the body; returns the kind.
    fn put(&self, w: &mut Writer) -> Kind {
        match self {
            ObjectRequest::Fetch { txn, mode, oids } => {
                w.put_u64(*txn);
                w.put_u8(*mode);
                let oids = &oids[..oids.len().min(FETCH_OBJECTS_MAX)];
                w.put_u16(oids.len() as u16);
                oids.iter().for_each(|o| w.put(o));
                Kind::OBJ_FETCH
            }
            ObjectRequest::Create {
                txn,
                group,
                near,
                bytes,
            } => {
                w.put_u64(*txn);
                w.put_u32(*group);
                w.put(near);
                w.put_bytes32(bytes);
                Kind::OBJ_CREATE
            }
            ObjectRequest::Commit { txn, changes } | ObjectRequest::Flush { txn, changes } => {
                w.put_u64(*txn);
                w.put_u32(changes.len() as u32);
                changes.iter().for_each(|c| c.put(w));
                if matches!(self, ObjectRequest::Flush { .. }) {
                    Kind::OBJ_FLUSH
                } else {
                    Kind::OBJ_COMMIT
                }
            }
            ObjectRequest::Method { txn, method } => {
                w.put_u64(*txn);
                w.put_bytes32(method);
                Kind::OBJ_METHOD
            }
            ObjectRequest::Abort { txn } => {
                w.put_u64(*txn);
                Kind::OBJ_ABORT
            }
            ObjectRequest::Snapshot { txn } => {
                w.put_u64(*txn);
                Kind::OBJ_SNAPSHOT
            }
            ObjectRequest::Scan { txn, group } => {
                w.put_u64(*txn);
                w.put_u32(*group);
                Kind::OBJ_SCAN
            }
            ObjectRequest::ReadRange { txn, oid, offset, len } => {
                w.put_u64(*txn);
                w.put(oid);
                w.put_u64(*offset);
                w.put_u32(*len);
                Kind::OBJ_READ_RANGE
            }
            _ => self.put_tree(w),
        }
    }

    /// [`ObjectRequest::put`] for the tree requests.
    fn put_tree(&self, w: &mut Writer) -> Kind {
        match self {
            ObjectRequest::TreeOpen { txn, root } | ObjectRequest::TreeDestroy { txn, root } => {
                w.put_u64(*txn);
                w.put_u32(*root);
                if matches!(self, ObjectRequest::TreeOpen { .. }) {
                    Kind::TREE_OPEN
                } else {
                    Kind::TREE_DESTROY
                }
            }
            ObjectRequest::TreeCreate { txn, group, unique } => {
                w.put_u64(*txn);
                w.put_u32(*group);
                w.put_u8(u8::from(*unique));
                Kind::TREE_CREATE
            }
            ObjectRequest::TreeApply { txn, root, ops } => {
                w.put_u64(*txn);
                w.put_u32(*root);
                w.put_u32(ops.len() as u32);
                ops.iter().for_each(|op| op.put(w));
                Kind::TREE_APPLY
            }
            ObjectRequest::TreeGet {
                txn,
                root,
                limit,
                key,
                objects,
            } => {
                w.put_u64(*txn);
                w.put_u32(*root);
                w.put_u32(*limit);
                w.put_bytes16(key);
                if *objects {
                    Kind::TREE_GET_OBJECTS
                } else {
                    Kind::TREE_GET
                }
            }
            ObjectRequest::TreeGetForUpdate { txn, root, keys } => {
                w.put_u64(*txn);
                w.put_u32(*root);
                w.put_u32(keys.len() as u32);
                keys.iter().for_each(|k| w.put_bytes16(k));
                Kind::TREE_GET_FOR_UPDATE
            }
            ObjectRequest::TreeRange {
                txn,
                root,
                limit,
                lo,
                hi,
                after,
            } => {
                w.put_u64(*txn);
                w.put_u32(*root);
                w.put_u32(*limit);
                put_bound(w, lo);
                put_bound(w, hi);
                match after {
                    None => w.put_u8(0),
                    Some(v) => {
                        w.put_u8(1);
                        w.put_bytes32(v);
                    }
                }
                Kind::TREE_RANGE
            }
            _ => unreachable!("put_tree is called for tree requests only"),
        }
    }

    /// Decodes a request; an unknown kind is `Ok(None)` (another service's).
    pub fn decode(kind: Kind, body: &[u8]) -> Result<Option<ObjectRequest>, MessageError> {
        let what = "object service request";
        let mut r = Reader::within(what, body);
        let req = match kind {
            Kind::OBJ_FETCH => Self::get_fetch(&mut r, what)?,
            Kind::OBJ_CREATE => ObjectRequest::Create {
                txn: r.u64("txn")?,
                group: r.u32("group")?,
                near: oid(&mut r)?,
                bytes: r.bytes32("the object")?.to_vec(),
            },
            Kind::OBJ_COMMIT | Kind::OBJ_FLUSH => {
                let txn = r.u64("txn")?;
                let n = changes_count(&mut r, what, OID_BYTES + 1, "an OBJ_COMMIT carries too many changes")?;
                let changes = (0..n).map(|_| Change::get(&mut r, what)).collect::<Result<_, _>>()?;
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
            Kind::OBJ_SNAPSHOT => ObjectRequest::Snapshot { txn: r.u64("txn")? },
            Kind::OBJ_SCAN => ObjectRequest::Scan {
                txn: r.u64("txn")?,
                group: r.u32("group")?,
            },
            Kind::OBJ_READ_RANGE => Self::get_read_range(&mut r, what)?,
            _ => match Self::get_tree(kind, &mut r, what)? {
                Some(req) => req,
                None => return Ok(None),
            },
        };
        r.finish("the body")?;
        Ok(Some(req))
    }

    fn get_fetch(r: &mut Reader<'_>, what: &'static str) -> Result<ObjectRequest, MessageError> {
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
        r.check_count("object count", n as u64, OID_BYTES)?;
        let oids = (0..n).map(|_| oid(r)).collect::<Result<_, _>>()?;
        Ok(ObjectRequest::Fetch { txn, mode, oids })
    }

    fn get_read_range(r: &mut Reader<'_>, what: &'static str) -> Result<ObjectRequest, MessageError> {
        let txn = r.u64("txn")?;
        let o = oid(r)?;
        let offset = r.u64("offset")?;
        let len = r.u32("length")?;
        if len > READ_RANGE_MAX {
            return Err(malformed(what, "an OBJ_READ_RANGE asks for more than 4 MiB"));
        }
        Ok(ObjectRequest::ReadRange {
            txn,
            oid: o,
            offset,
            len,
        })
    }

    /// The tree requests; `None` for a kind that is none of them.
    fn get_tree(kind: Kind, r: &mut Reader<'_>, what: &'static str) -> Result<Option<ObjectRequest>, MessageError> {
        Ok(Some(match kind {
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
                let n = changes_count(r, what, 3, "a TREE_APPLY carries too many changes")?;
                let ops = (0..n).map(|_| TreeOp::get(r, what)).collect::<Result<_, _>>()?;
                ObjectRequest::TreeApply { txn, root, ops }
            }
            Kind::TREE_GET | Kind::TREE_GET_OBJECTS => ObjectRequest::TreeGet {
                txn: r.u64("txn")?,
                root: r.u32("root")?,
                limit: get_limit(r, what)?,
                key: get_key16(r)?,
                objects: kind == Kind::TREE_GET_OBJECTS,
            },
            Kind::TREE_GET_FOR_UPDATE => {
                let txn = r.u64("txn")?;
                let root = r.u32("root")?;
                let n = r.u32("a key count")?;
                if n == 0 || n as usize > TREE_KEYS_MAX {
                    return Err(malformed(what, "a TREE_GET_FOR_UPDATE names 1 to 1,024 keys"));
                }
                let n = r.check_count("a key count", u64::from(n), 2)?;
                let keys = (0..n).map(|_| get_key16(r)).collect::<Result<_, _>>()?;
                ObjectRequest::TreeGetForUpdate { txn, root, keys }
            }
            Kind::TREE_RANGE => ObjectRequest::TreeRange {
                txn: r.u64("txn")?,
                root: r.u32("root")?,
                limit: get_limit(r, what)?,
                lo: get_bound(r, what)?,
                hi: get_bound(r, what)?,
                after: match r.u8("the resume flag")? {
                    0 => None,
                    1 => Some(get_value32(r)?),
                    _ => return Err(malformed(what, "a TREE_RANGE resume flag is 0 or 1")),
                },
            },
            Kind::TREE_DESTROY => ObjectRequest::TreeDestroy {
                txn: r.u64("txn")?,
                root: r.u32("root")?,
            },
            _ => return Ok(None),
        }))
    }
}
