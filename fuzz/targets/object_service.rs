//! Fuzz target body `object_service`: every decoder of the object service
//! (`cairn_net::object_service`) on arbitrary bytes. The first byte picks
//! the decoder (a request kind, or one of the reply decoders), the rest is
//! the body. Decoding must return a value or an error, never panic; a
//! request or a fetched object that decodes must encode back to the same
//! bytes.

use cairn_net::frame::Kind;
use cairn_net::object_service::{
    decode_entries, decode_fetched_batch, decode_firsts, decode_oids, decode_values, encode_fetched_batch,
    encode_firsts, FetchedObject, ObjectRequest, ValuesAndObjects,
};

/// The request kinds, in selector order.
const KINDS: [u16; 17] = [
    0x0201, 0x0202, 0x0203, 0x0204, 0x0205, 0x0206, 0x0207, 0x0208, 0x0210, 0x0211, 0x0212, 0x0213, 0x0214, 0x0215,
    0x0216, 0x0217, 0x0218,
];

/// Runs one input.
pub fn run(data: &[u8]) {
    let Some((&which, body)) = data.split_first() else {
        return;
    };
    let pick = usize::from(which) % (KINDS.len() + 4);
    if let Some(&k) = KINDS.get(pick) {
        let kind = Kind(k);
        if let Ok(Some(req)) = ObjectRequest::decode(kind, body) {
            let (k2, again) = req.encode();
            assert_eq!(k2, kind, "a request encodes to its own kind");
            assert_eq!(again, body, "a decoded request encodes back to its bytes");
        }
        return;
    }
    match pick - KINDS.len() {
        0 => {
            if let Ok(f) = FetchedObject::decode(body) {
                assert_eq!(f.encode(), body, "an OBJ_FETCH part encodes back to its bytes");
            }
        }
        1 => {
            let _ = decode_oids(body);
            if let Ok(batch) = decode_fetched_batch(body) {
                let parts: Vec<Vec<u8>> = batch.objects.iter().map(|f| f.encode()).collect();
                assert_eq!(
                    encode_fetched_batch(&parts, &batch.pages),
                    body,
                    "a batch part encodes back to its bytes"
                );
            }
        }
        2 => {
            let _ = decode_values(body);
            let _ = decode_entries(body);
            if let Ok(f) = decode_firsts(body) {
                assert_eq!(
                    encode_firsts(&f),
                    body,
                    "a TREE_GET_FOR_UPDATE reply encodes back to its bytes"
                );
            }
        }
        _ => {
            if let Ok(v) = ValuesAndObjects::decode(body) {
                assert_eq!(v.encode(), body, "a TREE_GET_OBJECTS reply encodes back to its bytes");
            }
        }
    }
}
