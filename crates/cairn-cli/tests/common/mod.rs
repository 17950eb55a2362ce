//! Helpers shared by the tests that drive `cairn serve` with raw
//! page-service calls. The server child itself is `cairn-testkit`'s
//! [`ServerChild`], running this crate's `cairn` binary.
#![allow(dead_code)]

use std::path::Path;

use cairn_net::message::ErrorCode;
use cairn_net::page_service::{FetchStatus, Fetched, PageRequest, FETCH_S, FETCH_X, NO_GROUP};
use cairn_net::rpc::Client;
use cairn_net::Error as NetError;
use cairn_storage::{page, PageId};

pub use cairn_testkit::ServerChild;

/// `cairn serve DIR --listen 127.0.0.1:0 EXTRA…`, this crate's binary.
pub fn serve(dir: &Path, extra: &[&str]) -> ServerChild {
    serve_at(dir, "127.0.0.1:0", extra)
}

/// `cairn serve DIR --listen LISTEN EXTRA…` (LISTEN: HOST:PORT).
pub fn serve_at(dir: &Path, listen: &str, extra: &[&str]) -> ServerChild {
    ServerChild::cairn_serve(env!("CARGO_BIN_EXE_cairn"), dir, listen, extra)
}

pub fn call(c: &Client, req: &PageRequest) -> Result<Vec<bytes::Bytes>, NetError> {
    let (kind, body) = req.encode();
    c.invoke(kind, body)?.collect()
}

/// A new transaction id for `c`: the client names its transactions (the
/// server begins one with the first request naming it).
pub fn begin(_c: &Client) -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Fetches one page and checks it as a page read from disk.
pub fn fetch(c: &Client, txn: u64, id: PageId, exclusive: bool) -> Result<Vec<u8>, NetError> {
    let parts = call(
        c,
        &PageRequest::Fetch {
            txn,
            mode: if exclusive { FETCH_X } else { FETCH_S },
            group: NO_GROUP,
            pages: vec![(id.0, 0)],
        },
    )?;
    let part = Fetched::decode(&parts[0]).unwrap();
    assert_eq!(part.page, id.0);
    assert_eq!(part.status, FetchStatus::Image, "page {id} is in use");
    let image = part.image;
    page::verify(image, id).expect("the page arrives sealed and whole");
    Ok(image.to_vec())
}

pub fn remote_code(e: NetError) -> ErrorCode {
    match e {
        NetError::Remote(f) => f.code,
        other => panic!("expected an error reply, got {other}"),
    }
}
