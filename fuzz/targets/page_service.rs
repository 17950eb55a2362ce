//! Fuzz target body `page_service`: every decoder of the page service
//! (`cairn_net::page_service`) on arbitrary bytes. The first byte picks the
//! decoder (a request kind, or one of the reply decoders; 23 is LOCK_STATS,
//! its request and its reply; 24 SNAPSHOT's request, 25 its reply, 26
//! PLACE's request, 27 APPEND's request and its reply), the
//! rest is the body. Decoding must return a
//! value or an error, never panic; a request that decodes must encode back
//! to the same bytes.

use cairn_net::frame::Kind;
use cairn_net::page_service::{
    decode_commit_reply, decode_groups, decode_kept_pages, decode_lsns, decode_page, decode_pages, FaultDetail,
    Fetched, LockCounters, PageRequest, SnapshotInfo, VolumeInfo,
};

/// Runs one input.
pub fn run(data: &[u8]) {
    let Some((&which, body)) = data.split_first() else {
        return;
    };
    match which % 28 {
        k @ 0..=16 => {
            let kind = Kind(0x0100 + u16::from(k));
            if let Ok(Some(req)) = PageRequest::decode(kind, body) {
                let (k2, again) = req.encode();
                assert_eq!(k2, kind, "a request encodes to its own kind");
                assert_eq!(again, body, "a decoded request encodes back to its bytes");
            }
        }
        17 => {
            if let Ok(f) = Fetched::decode(body) {
                assert_eq!(f.encode(), body, "a FETCH part encodes back to its bytes");
            }
        }
        18 => {
            let _ = decode_lsns(body);
            if let Ok(reply) = decode_commit_reply(body) {
                assert_eq!(reply.encode(), body, "a COMMIT reply encodes back to its bytes");
            }
        }
        19 => {
            let _ = decode_pages(body);
            let _ = decode_page(body);
        }
        20 => {
            let _ = decode_groups(body);
        }
        21 => {
            if let Ok(d) = FaultDetail::decode(body) {
                assert_eq!(d.encode(), body, "a fault detail encodes back to its bytes");
            }
        }
        22 => {
            let _ = VolumeInfo::decode(body);
        }
        24 => {
            if let Ok(Some(req)) = PageRequest::decode(Kind::SNAPSHOT, body) {
                assert_eq!(req.encode(), (Kind::SNAPSHOT, body.to_vec()));
            }
        }
        26 => {
            if let Ok(Some(req)) = PageRequest::decode(Kind::PLACE, body) {
                assert_eq!(req.encode(), (Kind::PLACE, body.to_vec()));
            }
        }
        27 => {
            if let Ok(Some(req)) = PageRequest::decode(Kind::APPEND, body) {
                assert_eq!(req.encode(), (Kind::APPEND, body.to_vec()));
            }
            let _ = decode_kept_pages(body);
        }
        25 => {
            if let Ok(w) = SnapshotInfo::decode(body) {
                assert_eq!(w.encode(), body, "a snapshot window encodes back to its bytes");
            }
        }
        _ => {
            if let Ok(Some(req)) = PageRequest::decode(Kind::LOCK_STATS, body) {
                assert_eq!(req.encode(), (Kind::LOCK_STATS, body.to_vec()));
            }
            if let Ok(c) = LockCounters::decode(body) {
                assert_eq!(c.encode(), body, "lock counters encode back to their bytes");
            }
        }
    }
}
