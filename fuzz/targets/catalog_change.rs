//! Fuzz target body `catalog_change`: the decoders of the catalog service
//! on arbitrary bytes — a catalog change (`cairn_schema::catalog_change`),
//! a CATALOG request and its reply (`cairn_net::catalog_service`). The
//! first byte picks the decoder, the rest is the input. Decoding must
//! return a value or an error, never panic; a change decodes again to the
//! same change from its encoding, and a request or reply encodes back to
//! its bytes.

use cairn_net::catalog_service::{CatalogReply, CatalogRequest};
use cairn_net::frame::Kind;
use cairn_schema::catalog_change::CatalogChange;

/// Runs one input.
pub fn run(data: &[u8]) {
    let Some((&which, body)) = data.split_first() else {
        return;
    };
    match which % 3 {
        0 => {
            if let Ok(change) = CatalogChange::decode(body) {
                let again = CatalogChange::decode(&change.encode()).expect("an encoded change decodes");
                assert_eq!(again, change, "a change survives its encoding");
            }
        }
        1 => {
            if let Ok(Some(req)) = CatalogRequest::decode(Kind::CATALOG, body) {
                assert_eq!(req.encode().1, body, "a CATALOG request encodes back to its bytes");
            }
        }
        _ => {
            if let Ok(reply) = CatalogReply::decode(body) {
                assert_eq!(reply.encode(), body, "a CATALOG reply encodes back to its bytes");
            }
        }
    }
}
