//! Handler failures become error replies and the connection stays usable; the in-flight bound
//! holds.

mod common;

use std::sync::atomic::Ordering;

use bytes::Bytes;
use cairn_net::message::ErrorCode;
use cairn_net::rpc::Limits;
use cairn_net::{Error, Kind};
use common::{Server, Transport, ECHO, FAIL, HOLD, PANIC};

#[test]
fn errors_and_panics_are_error_replies() {
    let server = Server::start(Transport::Unix, Limits::default());
    let c = server.connect();
    match c.call(FAIL, Bytes::new()) {
        Err(Error::Remote(f)) => assert_eq!(f.code, ErrorCode(0x1001)),
        other => panic!("{other:?}"),
    }
    match c.call(PANIC, Bytes::new()) {
        Err(Error::Remote(f)) => assert_eq!(f.code, ErrorCode::INTERNAL),
        other => panic!("{other:?}"),
    }
    match c.call(Kind(0x0200), Bytes::new()) {
        Err(Error::Remote(f)) => assert_eq!(f.code, ErrorCode(0x1000)),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        c.invoke(Kind::HELLO, Bytes::new()),
        Err(Error::NotARequest(1))
    ));
    assert_eq!(c.call(ECHO, &b"ok"[..]).unwrap(), &b"ok"[..]);
}

#[test]
fn in_flight_requests_per_connection_are_bounded() {
    let limits = Limits {
        in_flight_max: 4,
        ..Limits::default()
    };
    let server = Server::start(Transport::Tcp, limits);
    let c = server.connect();
    let held: Vec<_> = (0..10u8).map(|i| c.invoke(HOLD, vec![i]).unwrap()).collect();
    while server.handler.holding.load(Ordering::SeqCst) < 4 {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    // A second connection has its own budget.
    let other = server.connect();
    assert_eq!(other.call(ECHO, &b"x"[..]).unwrap(), &b"x"[..]);
    server.handler.release_all();
    for (i, call) in held.into_iter().enumerate() {
        assert_eq!(call.wait().unwrap(), Bytes::from(vec![i as u8]));
    }
    assert_eq!(server.handler.holding.load(Ordering::SeqCst), 10);
    assert!(server.handler.running_max.load(Ordering::SeqCst) <= 5);
}
