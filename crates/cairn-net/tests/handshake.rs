//! The handshake: WELCOME with version, capabilities and limits; clear refusals for an unknown
//! token, an unserved architecture, an unsupported version and a first message that is not HELLO.

mod common;

use bytes::Bytes;
use cairn_net::frame::{self, PROTOCOL_VERSION};
use cairn_net::message::{Architecture, Capabilities, ErrorCode, Message};
use cairn_net::rpc::{Client, Limits};
use cairn_net::{Error, Kind, RequestId};
use common::{both, options, Raw, Server, ECHO};

#[test]
fn welcome_states_version_capabilities_and_limits() {
    for transport in both() {
        let limits = Limits {
            body_max: 1 << 20,
            in_flight_max: 17,
            ..Limits::default()
        };
        let server = Server::start(transport, limits);
        let c = server.connect();
        let w = c.welcome();
        assert_eq!(w.version, PROTOCOL_VERSION as u16);
        assert_eq!(w.capabilities.0 & Capabilities::NET.0, Capabilities::NET.0);
        assert_eq!(w.body_max, 1 << 20);
        assert_eq!(w.in_flight_max, 17);
        assert!(w.server_name.starts_with("cairn"));
        // The client enforces the announced limit before sending.
        let too_big = Bytes::from(vec![0u8; (1 << 20) + 1]);
        assert!(matches!(c.invoke(ECHO, too_big), Err(Error::TooLarge { .. })));
        c.ping().unwrap();
    }
}

#[test]
fn unknown_token_is_refused() {
    let server = Server::start(common::Transport::Tcp, Limits::default());
    let mut opts = options();
    opts.token = Bytes::from_static(b"wrong");
    match Client::connect(&server.addr, &opts) {
        Err(Error::Refused(f)) => assert_eq!(f.code, ErrorCode::UNKNOWN_TOKEN),
        other => panic!("expected a refusal, got {other:?}"),
    }
    common::well_behaved(&server);
}

#[test]
fn unserved_architecture_is_refused() {
    let server = Server::start(common::Transport::Unix, Limits::default());
    let mut opts = options();
    opts.architecture = Architecture::FILE;
    match Client::connect(&server.addr, &opts) {
        Err(Error::Refused(f)) => assert_eq!(f.code, ErrorCode::UNSUPPORTED_ARCHITECTURE),
        other => panic!("expected a refusal, got {other:?}"),
    }
    common::well_behaved(&server);
}

#[test]
fn unsupported_version_is_refused_and_closed() {
    for transport in both() {
        let server = Server::start(transport, Limits::default());
        let mut raw = Raw::connect(&server.addr);
        let mut hello = Vec::new();
        Message::Hello(common::hello()).encode(&mut hello);
        hello[4] = PROTOCOL_VERSION + 1;
        common::reseal(&mut hello);
        raw.send(&hello);
        let got = raw.messages_until_closed();
        assert!(
            matches!(&got[..], [Message::Refusal(f)] if f.code == ErrorCode::UNSUPPORTED_VERSION),
            "{got:?}"
        );
        common::well_behaved(&server);
    }
}

#[test]
fn a_request_before_hello_is_refused() {
    let server = Server::start(common::Transport::Tcp, Limits::default());
    let mut raw = Raw::connect(&server.addr);
    raw.send(&common::request_frame(ECHO, 1, b"hi"));
    let got = raw.messages_until_closed();
    assert!(
        matches!(&got[..], [Message::Refusal(f)] if f.code == ErrorCode::PROTOCOL),
        "{got:?}"
    );
    common::well_behaved(&server);
}

#[test]
fn hello_over_the_handshake_limit_is_refused() {
    let limits = Limits {
        handshake_body_max: 64,
        ..Limits::default()
    };
    let server = Server::start(common::Transport::Tcp, limits);
    let mut raw = Raw::connect(&server.addr);
    let mut hello = common::hello();
    hello.client_name = "x".repeat(100);
    raw.send_message(&Message::Hello(hello));
    let got = raw.messages_until_closed();
    assert!(
        matches!(&got[..], [Message::Refusal(f)] if f.code == ErrorCode::TOO_LARGE),
        "{got:?}"
    );
    common::well_behaved(&server);
}

#[test]
fn raw_handshake_then_ping() {
    let server = Server::start(common::Transport::Unix, Limits::default());
    let mut raw = Raw::connect(&server.addr);
    let w = raw.handshake();
    assert_eq!(w.version, 1);
    raw.send(&common::request_frame(Kind::PING, 9, b""));
    assert_eq!(
        raw.next_message(),
        Some(Message::Reply {
            kind: Kind::PING,
            id: RequestId(9),
            body: Bytes::new()
        })
    );
    let _ = frame::HEADER_SIZE;
}
