//! Fuzz target body `rights`: the decoders of callback locking's messages
//! (`cairn_net::rights`) on arbitrary bytes. The first byte picks the
//! decoder (CALLBACK_REPLY, RELEASE, or the server's CALLBACK notice), the
//! rest is the body. Decoding must return a value or an error, never
//! panic; what decodes must encode back to the same bytes.

use cairn_net::frame::Kind;
use cairn_net::rights::{Callback, RightsRequest};

/// Runs one input.
pub fn run(data: &[u8]) {
    let Some((&which, body)) = data.split_first() else {
        return;
    };
    match which % 3 {
        k @ (0 | 1) => {
            let kind = if k == 0 { Kind::CALLBACK_REPLY } else { Kind::RELEASE };
            if let Ok(Some(req)) = RightsRequest::decode(kind, body) {
                let (k2, again) = req.encode();
                assert_eq!(k2, kind, "a request encodes to its own kind");
                assert_eq!(again, body, "a decoded request encodes back to its bytes");
            }
        }
        _ => {
            if let Ok(c) = Callback::decode(body) {
                assert_eq!(c.encode(), body, "a CALLBACK encodes back to its bytes");
            }
        }
    }
}
