//! The object service's replies: the parts of an OBJ_FETCH
//! ([`FetchedObject`]) and the bodies of the tree requests' and OBJ_SCAN's
//! final replies. The byte layout of each is in the module table of
//! [`object_service`](super).

use super::{get_key16, get_value32, malformed, oid, MessageError, Reader, Writer, OID_BYTES};
use crate::rights::RightKey;

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
    /// transactions (0: none; see [`crate::rights`]).
    pub right: u64,
}

/// Bytes of a fetched object's header.
pub const FETCHED_OBJECT_HEADER: usize = OID_BYTES + 1 + 8 + 8;

impl FetchedObject<'_> {
    /// Encodes the part.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(FETCHED_OBJECT_HEADER + self.bytes.len());
        w.put(&self.oid);
        w.put_u8(u8::from(!self.found));
        w.put(&self.total_len.to_le_bytes());
        w.put(&self.right.to_le_bytes());
        w.put(self.bytes);
        w.into_bytes()
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
    let mut w = Writer::new();
    put_values(&mut w, values);
    w.into_bytes()
}

fn put_values(w: &mut Writer, values: &[Vec<u8>]) {
    w.put_u32(values.len() as u32);
    for v in values {
        w.put_bytes32(v);
    }
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

/// TREE_GET_FOR_UPDATE's reply: each key's first value, if it has one.
pub fn encode_firsts(firsts: &[Option<Vec<u8>>]) -> Vec<u8> {
    let mut w = Writer::new();
    w.put_u32(firsts.len() as u32);
    for f in firsts {
        match f {
            Some(v) => {
                w.put_u8(1);
                w.put_bytes32(v);
            }
            None => w.put_u8(0),
        }
    }
    w.into_bytes()
}

/// Decodes what [`encode_firsts`] wrote.
pub fn decode_firsts(body: &[u8]) -> Result<Vec<Option<Vec<u8>>>, MessageError> {
    let mut r = Reader::within("TREE_GET_FOR_UPDATE reply", body);
    let n = r.count32("a count", 1)?;
    let firsts = (0..n)
        .map(|_| match r.u8("a found flag")? {
            0 => Ok(None),
            1 => Ok(Some(get_value32(&mut r)?)),
            _ => Err(MessageError::Malformed {
                what: "TREE_GET_FOR_UPDATE reply",
                problem: "a found flag is 0 or 1",
            }),
        })
        .collect::<Result<_, _>>()?;
    r.finish("the body")?;
    Ok(firsts)
}

/// TREE_GET_OBJECTS's reply, and TREE_GET's (with no objects).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ValuesAndObjects {
    /// The key's values.
    pub values: Vec<Vec<u8>>,
    /// One encoded [`FetchedObject`] per value.
    pub objects: Vec<Vec<u8>>,
    /// Rights (key, epoch) to cache the answer until what they cover
    /// changes: the leaves that enclose the key ([`RightKey::Page`]), or on
    /// a server that locks key ranges the gaps the lookup locked
    /// ([`RightKey::Gap`], [`RightKey::TreeEnd`]); at most
    /// [`LOOKUP_LEAVES_MAX`] (empty: the answer is not to be kept).
    pub rights: Vec<(RightKey, u64)>,
}

/// Rights a lookup's answer names at most (leaves or gaps).
pub const LOOKUP_LEAVES_MAX: usize = 8;

impl ValuesAndObjects {
    /// Encodes the reply.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        put_values(&mut w, &self.values);
        put_values(&mut w, &self.objects);
        let rights = &self.rights[..self.rights.len().min(LOOKUP_LEAVES_MAX)];
        w.put_u8(rights.len() as u8);
        for (key, epoch) in rights {
            key.put(&mut w);
            w.put_u64(*epoch);
        }
        w.into_bytes()
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
            return Err(malformed(what, "more than 8 rights"));
        }
        let rights = (0..n)
            .map(|_| Ok((RightKey::get(&mut r, what)?, r.u64("an epoch")?)))
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
            rights,
        })
    }
}

/// Encodes TREE_RANGE's reply: `count u32, (key16, value32) × count, more u8`.
pub fn encode_entries(entries: &[(Vec<u8>, Vec<u8>)], more: bool) -> Vec<u8> {
    let mut w = Writer::new();
    w.put(&(entries.len() as u32).to_le_bytes());
    for (k, v) in entries {
        w.put_bytes16(k);
        w.put_bytes32(v);
    }
    w.put_u8(u8::from(more));
    w.into_bytes()
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
    let mut w = Writer::with_capacity(4 + oids.len() * OID_BYTES);
    w.put(&(oids.len() as u32).to_le_bytes());
    for o in oids {
        w.put(o);
    }
    w.into_bytes()
}

/// Decodes what [`encode_oids`] wrote.
pub fn decode_oids(body: &[u8]) -> Result<Vec<[u8; OID_BYTES]>, MessageError> {
    let mut r = Reader::within("OID list", body);
    let n = r.count32("a count", OID_BYTES)?;
    let oids = (0..n).map(|_| oid(&mut r)).collect::<Result<_, _>>()?;
    r.finish("the body")?;
    Ok(oids)
}
