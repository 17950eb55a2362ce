//! The catalog service: one request, CATALOG, by which a client of any
//! kind (page, file, object, adaptive) changes the schema catalog. No
//! client writes the catalog's pages itself: the server checks each
//! change for meaning and makes it with its own code, in the client's
//! transaction (`docs/protocol.md` has the byte diagrams; the change's own
//! encoding is the schema layer's, `cairn_schema::catalog_change`).
//!
//! | message | body | final reply body |
//! |---|---|---|
//! | `0x0401` CATALOG | `txn u64, change (the rest)` | [`CatalogReply`]: `count u32, page u32 × count, images u32, (page u32, image bytes32) × images, outcome (the rest)` |
//!
//! The reply names every page the change made or changed in the
//! transaction. A page or file session also gets their images: its
//! transaction reads them as its own private pages, and its commit does
//! not ship them (they are the server's). An object session gets the
//! pages alone: it drops the index lookups it keeps under them.

use crate::frame::Kind;
use crate::message::{MessageError, Reader, Writer};

impl Kind {
    /// A catalog change in a transaction.
    pub const CATALOG: Kind = Kind(0x0401);
}

/// A CATALOG request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CatalogRequest {
    /// The client's transaction.
    pub txn: u64,
    /// The change, in the schema layer's encoding.
    pub change: Vec<u8>,
}

impl CatalogRequest {
    /// The request's kind and body.
    pub fn encode(&self) -> (Kind, Vec<u8>) {
        let mut w = Writer::with_capacity(8 + self.change.len());
        w.put_u64(self.txn);
        w.put(&self.change);
        (Kind::CATALOG, w.into_bytes())
    }

    /// Decodes a request; another kind is `Ok(None)`.
    pub fn decode(kind: Kind, body: &[u8]) -> Result<Option<CatalogRequest>, MessageError> {
        if kind != Kind::CATALOG {
            return Ok(None);
        }
        let mut r = Reader::within("CATALOG", body);
        let txn = r.u64("a transaction")?;
        let change = r.take(r.remaining(), "a change")?.to_vec();
        if change.is_empty() {
            return Err(MessageError::Malformed {
                what: "CATALOG",
                problem: "the change is empty",
            });
        }
        Ok(Some(CatalogRequest { txn, change }))
    }
}

/// The reply to a CATALOG request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CatalogReply {
    /// Every page the change made or changed.
    pub pages: Vec<u32>,
    /// Their images, for a page or file session.
    pub images: Vec<(u32, Vec<u8>)>,
    /// What the change made, in the schema layer's encoding.
    pub outcome: Vec<u8>,
}

impl CatalogReply {
    /// The reply's body.
    pub fn encode(&self) -> Vec<u8> {
        let image_bytes: usize = self.images.iter().map(|(_, i)| 8 + i.len()).sum();
        let mut w = Writer::with_capacity(8 + 4 * self.pages.len() + image_bytes + self.outcome.len());
        w.put_u32(self.pages.len() as u32);
        for p in &self.pages {
            w.put_u32(*p);
        }
        w.put_u32(self.images.len() as u32);
        for (p, image) in &self.images {
            w.put_u32(*p);
            w.put_bytes32(image);
        }
        w.put(&self.outcome);
        w.into_bytes()
    }

    /// Decodes a reply.
    pub fn decode(body: &[u8]) -> Result<CatalogReply, MessageError> {
        let mut r = Reader::within("CATALOG reply", body);
        let n = r.count32("a page count", 4)?;
        let pages = (0..n).map(|_| r.u32("a page")).collect::<Result<Vec<_>, _>>()?;
        let n = r.count32("an image count", 8)?;
        let mut images = Vec::with_capacity(n);
        for _ in 0..n {
            let page = r.u32("an image's page")?;
            images.push((page, r.bytes32("an image")?.to_vec()));
        }
        let outcome = r.take(r.remaining(), "the outcome")?.to_vec();
        Ok(CatalogReply { pages, images, outcome })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_replies_round_trip_and_damage_is_an_error() {
        let req = CatalogRequest {
            txn: 7,
            change: vec![5, 1, b'x', 0],
        };
        let (kind, body) = req.encode();
        assert_eq!(CatalogRequest::decode(kind, &body).unwrap(), Some(req));
        assert_eq!(CatalogRequest::decode(Kind(0x0101), &body).unwrap(), None);
        for cut in 0..9 {
            assert!(CatalogRequest::decode(kind, &body[..cut]).is_err(), "cut at {cut}");
        }
        let reply = CatalogReply {
            pages: vec![3, 9],
            images: vec![(3, vec![1; 16]), (9, vec![2; 16])],
            outcome: vec![3],
        };
        let body = reply.encode();
        assert_eq!(CatalogReply::decode(&body).unwrap(), reply);
        // Every cut inside the pages and images is an error (the outcome is
        // the rest, so a cut there is the outcome's decoder's to find).
        for cut in 0..body.len() - 1 {
            assert!(CatalogReply::decode(&body[..cut]).is_err(), "cut at {cut}");
        }
        let mut huge = 0xFFFF_FFFFu32.to_le_bytes().to_vec();
        huge.extend_from_slice(&[0; 8]);
        assert!(CatalogReply::decode(&huge).is_err());
    }

    proptest::proptest! {
        #[test]
        fn no_bytes_make_the_decoders_panic(b in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..96)) {
            let _ = CatalogRequest::decode(Kind::CATALOG, &b);
            let _ = CatalogReply::decode(&b);
        }
    }
}
