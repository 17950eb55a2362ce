//! Callback locking for object-server clients: what an object session may
//! cache across transactions (an object, or a B+-tree leaf its index
//! lookups were answered from), how the server calls it back, and how the
//! client answers or gives a right up.
//!
//! | message | body |
//! |---|---|
//! | NOTICE (server → client) | [`ObjectCallback`]: `id u64, key, epoch u64` |
//! | `0x0209` OBJ_CALLBACK_REPLY | [`ObjectCallbackReply`]: `id u64, key, epoch u64, writer u64, count u16, txn u64 × count`; empty reply |
//! | `0x020A` OBJ_RELEASE | `count u16, (key, epoch u64) × count`; sent one way, no reply awaited |
//!
//! A `key` is `tag u8` then `page u32` (tag 0, a B+-tree leaf) or
//! `oid[10]` (tag 1, an object).

use crate::message::{MessageError, Reader, Writer};
use crate::page_service::{get_txns, put_txns, RELEASE_RIGHTS_MAX};

use super::{malformed, oid, OID_BYTES};

/// What a right covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RightKey {
    /// A page (a B+-tree leaf whose entries answered a lookup).
    Page(u32),
    /// An object.
    Object([u8; OID_BYTES]),
}

impl RightKey {
    pub(crate) fn put(&self, w: &mut Writer) {
        match self {
            RightKey::Page(p) => {
                w.put_u8(0);
                w.put(&p.to_le_bytes());
            }
            RightKey::Object(o) => {
                w.put_u8(1);
                w.put(o);
            }
        }
    }

    pub(crate) fn get(r: &mut Reader<'_>, what: &'static str) -> Result<RightKey, MessageError> {
        Ok(match r.u8("a right's key kind")? {
            0 => RightKey::Page(r.u32("a page")?),
            1 => RightKey::Object(oid(r)?),
            _ => return Err(malformed(what, "a right's key is 0 (page) or 1 (object)")),
        })
    }
}

/// The server calls back an object session's right (a NOTICE): another
/// client is about to change what it covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ObjectCallback {
    /// The server's id for this callback.
    pub id: u64,
    /// What the right covers.
    pub key: RightKey,
    /// The epoch of the right called back.
    pub epoch: u64,
}

impl ObjectCallback {
    /// Encodes the NOTICE body.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(27);
        w.put(&self.id.to_le_bytes());
        self.key.put(&mut w);
        w.put(&self.epoch.to_le_bytes());
        w.into_bytes()
    }

    /// Decodes a NOTICE body.
    pub fn decode(body: &[u8]) -> Result<ObjectCallback, MessageError> {
        let what = "object CALLBACK notice";
        let mut r = Reader::within(what, body);
        let c = ObjectCallback {
            id: r.u64("id")?,
            key: RightKey::get(&mut r, what)?,
            epoch: r.u64("epoch")?,
        };
        r.finish("the body")?;
        Ok(c)
    }
}

/// OBJ_CALLBACK_REPLY: the answer to an [`ObjectCallback`], or (id 0) a
/// client naming its transactions that read under a right before another
/// of its transactions changes what the right covers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectCallbackReply {
    /// The callback answered; 0: none (the right stays).
    pub id: u64,
    /// What the right covers.
    pub key: RightKey,
    /// Its epoch.
    pub epoch: u64,
    /// Callback id 0: the client's transaction about to change it; else 0.
    pub writer: u64,
    /// The client's transactions reading under the right (each is granted
    /// the lock it held in effect), at most 1,024.
    pub in_use_by: Vec<u64>,
}

impl ObjectCallbackReply {
    pub(crate) fn put(&self, w: &mut Writer) {
        w.put(&self.id.to_le_bytes());
        self.key.put(w);
        w.put(&self.epoch.to_le_bytes());
        w.put(&self.writer.to_le_bytes());
        put_txns(w, &self.in_use_by);
    }

    pub(crate) fn get(r: &mut Reader<'_>, what: &'static str) -> Result<ObjectCallbackReply, MessageError> {
        Ok(ObjectCallbackReply {
            id: r.u64("id")?,
            key: RightKey::get(r, what)?,
            epoch: r.u64("epoch")?,
            writer: r.u64("writer")?,
            in_use_by: get_txns(r, what)?,
        })
    }
}

/// OBJ_RELEASE's body: at most [`RELEASE_RIGHTS_MAX`] rights (more are
/// cut; send them in several).
pub(crate) fn put_release(w: &mut Writer, rights: &[(RightKey, u64)]) {
    let n = rights.len().min(RELEASE_RIGHTS_MAX);
    w.put(&(n as u16).to_le_bytes());
    for (key, epoch) in &rights[..n] {
        key.put(w);
        w.put(&epoch.to_le_bytes());
    }
}

/// Reads what [`put_release`] wrote.
pub(crate) fn get_release(r: &mut Reader<'_>, what: &'static str) -> Result<Vec<(RightKey, u64)>, MessageError> {
    let n = r.u16("right count")? as usize;
    if n == 0 || n > RELEASE_RIGHTS_MAX {
        return Err(malformed(what, "an OBJ_RELEASE names 1 to 4096 rights"));
    }
    r.check_count("a count", n as u64, 13)?;
    (0..n)
        .map(|_| Ok((RightKey::get(r, what)?, r.u64("an epoch")?)))
        .collect()
}
