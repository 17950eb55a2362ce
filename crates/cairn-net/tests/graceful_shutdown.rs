//! Graceful shutdown: the server stops accepting, finishes the requests in flight, says GOODBYE
//! and `run` returns.

mod common;

use bytes::Bytes;
use cairn_net::message::ErrorCode;
use cairn_net::rpc::{Client, Limits};
use cairn_net::Error;
use common::{both, Server, HOLD};

#[test]
fn shutdown_finishes_in_flight_requests() {
    for transport in both() {
        let mut server = Server::start(transport, Limits::default());
        let c = server.connect();
        let held: Vec<_> = (0..3u8).map(|i| c.invoke(HOLD, vec![i]).unwrap()).collect();
        while server.handler.holding.load(std::sync::atomic::Ordering::SeqCst) < 3 {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        server.begin_shutdown();
        // Wait until the server no longer takes new sessions.
        loop {
            match Client::connect(&server.addr, &common::options()) {
                Ok(_) => std::thread::sleep(std::time::Duration::from_millis(5)),
                Err(Error::Refused(f)) => {
                    assert_eq!(f.code, ErrorCode::SHUTTING_DOWN);
                    break;
                }
                Err(_) => break,
            }
        }
        server.handler.release_all();
        for (i, call) in held.into_iter().enumerate() {
            assert_eq!(call.wait().unwrap(), Bytes::from(vec![i as u8]));
        }
        server.shutdown();
        // After the replies, the client is told why the connection ends.
        match c.ping() {
            Err(Error::Closed(f)) => assert_eq!(f.code, ErrorCode::SHUTTING_DOWN),
            other => panic!("expected GOODBYE, got {other:?}"),
        }
        assert_eq!(server.handler.closed.load(std::sync::atomic::Ordering::SeqCst), 1);
    }
}
