//! Callback locking's messages: one set for every client that caches
//! across transactions (page, file, object and adaptive), whatever its
//! rights cover — a page, an object, or a B+-tree leaf whose entries
//! answered an index lookup (`docs/protocol.md` has the byte diagrams).
//!
//! | message | body | final reply body |
//! |---|---|---|
//! | NOTICE (server → client) | [`Callback`]: `id u64, key, epoch u64` | — |
//! | `0x0301` CALLBACK_REPLY | [`CallbackReply`]: `id u64, key, epoch u64, writer u64, count u16, txn u64 × count` | empty |
//! | `0x0302` RELEASE | `count u16 (1..=4096), (key, epoch u64) × count` | none awaited (sent one way) |
//!
//! A `key` ([`RightKey`]) is `tag u8` then `page u32` (tag 0: a page, or
//! a B+-tree leaf), `oid[10]` (tag 1: an object), `root u32, hash u64`
//! (tag 2: a gap between two entries of the B+-tree at `root`, under
//! key-range locking) or `root u32` (tag 3: the gap past that tree's last
//! entry). A page session's rights are on pages only; the server refuses
//! any other key from one.
//!
//! **The protocol.** A reply that grants a right carries its nonzero
//! epoch. Before another client's transaction may change what a right
//! covers, the server sends a CALLBACK naming the key and that epoch; the
//! client answers CALLBACK_REPLY: no transactions (it gave the right up),
//! or the transactions of its own still reading under it (the server then
//! grants each the lock it held in effect, so the writer waits for them in
//! the lock table, where a deadlock through a callback is found like any
//! other). A CALLBACK_REPLY with id 0 answers no callback: before one of
//! its transactions (`writer`) changes what it caches, a client names its
//! *other* transactions reading under the right the same way. RELEASE
//! gives rights back unasked (what the client no longer caches), so
//! neither side's table grows with everything a client ever read; a right
//! whose epoch is not the one named (renewed since) stays.

use crate::frame::Kind;
use crate::message::{MessageError, Reader, Writer};
use crate::object_service::OID_BYTES;

/// Rights one RELEASE may give back.
pub const RELEASE_RIGHTS_MAX: usize = 4096;
/// Transactions a CALLBACK_REPLY may name.
pub const TXNS_MAX: usize = 1024;

impl Kind {
    /// The answer to a callback, or a client naming its readers.
    pub const CALLBACK_REPLY: Kind = Kind(0x0301);
    /// Rights given back unasked.
    pub const RELEASE: Kind = Kind(0x0302);
}

/// What a right covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RightKey {
    /// A page (cached whole, or a B+-tree leaf whose entries answered a
    /// lookup).
    Page(u32),
    /// An object.
    Object([u8; OID_BYTES]),
    /// The gap just below one entry of a B+-tree under key-range locking:
    /// the tree's root and the hash of the entry's identity (the server's
    /// gap lock). An index lookup's answer is kept under rights on the
    /// gaps it locked.
    Gap(u32, u64),
    /// The gap past the last entry of the B+-tree at this root (under
    /// key-range locking).
    TreeEnd(u32),
}

impl RightKey {
    pub(crate) fn put(&self, w: &mut Writer) {
        match self {
            RightKey::Page(p) => {
                w.put_u8(0);
                w.put_u32(*p);
            }
            RightKey::Object(o) => {
                w.put_u8(1);
                w.put(o);
            }
            RightKey::Gap(root, hash) => {
                w.put_u8(2);
                w.put_u32(*root);
                w.put_u64(*hash);
            }
            RightKey::TreeEnd(root) => {
                w.put_u8(3);
                w.put_u32(*root);
            }
        }
    }

    pub(crate) fn get(r: &mut Reader<'_>, what: &'static str) -> Result<RightKey, MessageError> {
        Ok(match r.u8("a right's key kind")? {
            0 => RightKey::Page(r.u32("a page")?),
            1 => RightKey::Object(r.take_array("an object id")?),
            2 => RightKey::Gap(r.u32("a tree's root")?, r.u64("a gap's hash")?),
            3 => RightKey::TreeEnd(r.u32("a tree's root")?),
            _ => {
                return Err(malformed(
                    what,
                    "a right's key is 0 (page), 1 (object), 2 (gap) or 3 (tree's end)",
                ))
            }
        })
    }
}

/// A callback (the body of a NOTICE): another client is about to change
/// what the right of `epoch` on `key` covers; give it up, or say which
/// transactions still read under it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Callback {
    /// The server's id for this callback.
    pub id: u64,
    /// What the right covers.
    pub key: RightKey,
    /// The epoch of the right called back.
    pub epoch: u64,
}

impl Callback {
    /// Encodes the NOTICE body.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(27);
        w.put_u64(self.id);
        self.key.put(&mut w);
        w.put_u64(self.epoch);
        w.into_bytes()
    }

    /// Decodes a NOTICE body.
    pub fn decode(body: &[u8]) -> Result<Callback, MessageError> {
        let what = "CALLBACK notice";
        let mut r = Reader::within(what, body);
        let c = Callback {
            id: r.u64("id")?,
            key: RightKey::get(&mut r, what)?,
            epoch: r.u64("epoch")?,
        };
        r.finish("the body")?;
        Ok(c)
    }
}

/// CALLBACK_REPLY: the answer to a [`Callback`], or (id 0) a client naming
/// its transactions that read under a right before another of its
/// transactions changes what the right covers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallbackReply {
    /// The callback answered; 0: none (the right stays).
    pub id: u64,
    /// What the right covers.
    pub key: RightKey,
    /// Its epoch.
    pub epoch: u64,
    /// Callback id 0: the client's transaction about to change what the
    /// right covers (its readers named here must not wait for it); else 0.
    pub writer: u64,
    /// The client's transactions reading under the right (each is granted
    /// the lock it held in effect; empty: the right is given up and nobody
    /// reads under it), at most [`TXNS_MAX`].
    pub in_use_by: Vec<u64>,
}

impl CallbackReply {
    fn put(&self, w: &mut Writer) {
        w.put_u64(self.id);
        self.key.put(w);
        w.put_u64(self.epoch);
        w.put_u64(self.writer);
        let txns = &self.in_use_by[..self.in_use_by.len().min(TXNS_MAX)];
        w.put_u16(txns.len() as u16);
        for t in txns {
            w.put_u64(*t);
        }
    }

    fn get(r: &mut Reader<'_>, what: &'static str) -> Result<CallbackReply, MessageError> {
        let (id, key, epoch, writer) = (r.u64("id")?, RightKey::get(r, what)?, r.u64("epoch")?, r.u64("writer")?);
        let n = r.u16("a transaction count")? as usize;
        if n > TXNS_MAX {
            return Err(malformed(what, "a list of more than 1,024 transactions"));
        }
        r.check_count("a count", n as u64, 8)?;
        let in_use_by = (0..n).map(|_| r.u64("a transaction")).collect::<Result<_, _>>()?;
        Ok(CallbackReply {
            id,
            key,
            epoch,
            writer,
            in_use_by,
        })
    }
}

/// A message of callback locking from a client, of either service's
/// sessions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RightsRequest {
    /// CALLBACK_REPLY.
    CallbackReply(CallbackReply),
    /// RELEASE: the client gives up its rights (key, epoch of the right),
    /// unasked; at most [`RELEASE_RIGHTS_MAX`] (more are cut: send them in
    /// several). A right of another epoch (renewed since) is kept. Needs no
    /// answer: a client sends it with its next request and never waits for
    /// the reply.
    Release {
        /// The rights given back.
        rights: Vec<(RightKey, u64)>,
    },
}

impl RightsRequest {
    /// The request's kind and body.
    pub fn encode(&self) -> (Kind, Vec<u8>) {
        let mut w = Writer::new();
        let kind = match self {
            RightsRequest::CallbackReply(c) => {
                c.put(&mut w);
                Kind::CALLBACK_REPLY
            }
            RightsRequest::Release { rights } => {
                let rights = &rights[..rights.len().min(RELEASE_RIGHTS_MAX)];
                w.put_u16(rights.len() as u16);
                for (key, epoch) in rights {
                    key.put(&mut w);
                    w.put_u64(*epoch);
                }
                Kind::RELEASE
            }
        };
        (kind, w.into_bytes())
    }

    /// Decodes a request; another kind is `Ok(None)` (a service's).
    pub fn decode(kind: Kind, body: &[u8]) -> Result<Option<RightsRequest>, MessageError> {
        let what = "callback locking request";
        let mut r = Reader::within(what, body);
        let req = match kind {
            Kind::CALLBACK_REPLY => RightsRequest::CallbackReply(CallbackReply::get(&mut r, what)?),
            Kind::RELEASE => {
                let n = r.u16("right count")? as usize;
                if n == 0 || n > RELEASE_RIGHTS_MAX {
                    return Err(malformed(what, "a RELEASE names 1 to 4096 rights"));
                }
                r.check_count("a count", n as u64, 13)?;
                let rights = (0..n)
                    .map(|_| Ok((RightKey::get(&mut r, what)?, r.u64("an epoch")?)))
                    .collect::<Result<_, MessageError>>()?;
                RightsRequest::Release { rights }
            }
            _ => return Ok(None),
        };
        r.finish("the body")?;
        Ok(Some(req))
    }

    /// True if every key it names is a page's (what a page session may
    /// name).
    pub fn pages_only(&self) -> bool {
        self.keys().all(|k| matches!(k, RightKey::Page(_)))
    }

    /// True if no key it names is an object's (what a page session of a
    /// server that locks key ranges may name: pages, and the gaps of its
    /// lookups).
    pub fn names_no_object(&self) -> bool {
        self.keys().all(|k| !matches!(k, RightKey::Object(_)))
    }

    /// The keys it names.
    fn keys(&self) -> impl Iterator<Item = &RightKey> {
        let (one, many) = match self {
            RightsRequest::CallbackReply(c) => (Some(&c.key), &[][..]),
            RightsRequest::Release { rights } => (None, &rights[..]),
        };
        one.into_iter().chain(many.iter().map(|(k, _)| k))
    }
}

fn malformed(what: &'static str, problem: &'static str) -> MessageError {
    MessageError::Malformed { what, problem }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn requests() -> Vec<RightsRequest> {
        vec![
            RightsRequest::CallbackReply(CallbackReply {
                id: 4,
                key: RightKey::Object([3; OID_BYTES]),
                epoch: 17,
                writer: 0,
                in_use_by: vec![2, 5],
            }),
            RightsRequest::CallbackReply(CallbackReply {
                id: 0,
                key: RightKey::Page(9),
                epoch: 0,
                writer: 7,
                in_use_by: vec![],
            }),
            RightsRequest::Release {
                rights: vec![(RightKey::Object([1; OID_BYTES]), 3), (RightKey::Page(8), 4)],
            },
        ]
    }

    #[test]
    fn requests_round_trip_and_every_truncation_is_refused() {
        for req in requests() {
            let (kind, body) = req.encode();
            assert_eq!(RightsRequest::decode(kind, &body).unwrap(), Some(req.clone()));
            for cut in 0..body.len() {
                assert!(
                    RightsRequest::decode(kind, &body[..cut]).is_err(),
                    "{req:?} cut at {cut}"
                );
            }
            let mut longer = body.clone();
            longer.push(0);
            assert!(
                RightsRequest::decode(kind, &longer).is_err(),
                "{req:?} with a byte more"
            );
        }
        assert_eq!(
            RightsRequest::decode(Kind(0x0101), &[]).unwrap(),
            None,
            "a service's kind"
        );
    }

    #[test]
    fn bad_keys_counts_and_lists_are_refused_by_name() {
        let mut bad_tag = RightsRequest::Release {
            rights: vec![(RightKey::Page(1), 2)],
        }
        .encode()
        .1;
        bad_tag[2] = 4;
        let e = RightsRequest::decode(Kind::RELEASE, &bad_tag).unwrap_err().to_string();
        assert!(e.contains("2 (gap) or 3 (tree's end)"), "{e}");
        let e = RightsRequest::decode(Kind::RELEASE, &0u16.to_le_bytes())
            .unwrap_err()
            .to_string();
        assert!(e.contains("1 to 4096"), "{e}");
        let mut many = ((RELEASE_RIGHTS_MAX + 1) as u16).to_le_bytes().to_vec();
        many.resize(2 + 13 * (RELEASE_RIGHTS_MAX + 1), 0);
        assert!(RightsRequest::decode(Kind::RELEASE, &many).is_err());
        let reply = CallbackReply {
            id: 1,
            key: RightKey::Page(1),
            epoch: 1,
            writer: 0,
            in_use_by: vec![1; TXNS_MAX + 1],
        };
        let (kind, body) = RightsRequest::CallbackReply(reply).encode();
        let decoded = RightsRequest::decode(kind, &body).unwrap().unwrap();
        let RightsRequest::CallbackReply(c) = decoded else {
            panic!("{decoded:?}")
        };
        assert_eq!(c.in_use_by.len(), TXNS_MAX, "encoding cuts the list at the bound");
        let mut over = body.clone();
        let at = 8 + 5 + 8 + 8;
        over[at..at + 2].copy_from_slice(&((TXNS_MAX + 1) as u16).to_le_bytes());
        over.extend_from_slice(&1u64.to_le_bytes());
        let e = RightsRequest::decode(kind, &over).unwrap_err().to_string();
        assert!(e.contains("more than 1,024"), "{e}");
    }

    #[test]
    fn callbacks_round_trip_and_every_truncation_is_refused() {
        for key in [
            RightKey::Page(7),
            RightKey::Object([9; OID_BYTES]),
            RightKey::Gap(5, u64::MAX - 3),
            RightKey::TreeEnd(5),
        ] {
            let c = Callback { id: 9, key, epoch: 11 };
            let enc = c.encode();
            assert_eq!(Callback::decode(&enc).unwrap(), c);
            for cut in 0..enc.len() {
                assert!(Callback::decode(&enc[..cut]).is_err());
            }
        }
    }

    #[test]
    fn pages_only_tells_a_page_sessions_messages() {
        let r = requests();
        assert!(!r[0].pages_only());
        assert!(r[1].pages_only());
        assert!(!r[2].pages_only(), "one object key among pages");
        assert!(!r[0].names_no_object() && r[1].names_no_object() && !r[2].names_no_object());
        let gaps = RightsRequest::Release {
            rights: vec![
                (RightKey::Gap(5, 1), 3),
                (RightKey::TreeEnd(5), 3),
                (RightKey::Page(8), 4),
            ],
        };
        assert!(gaps.names_no_object() && !gaps.pages_only());
    }
}
