//! The handshake: WELCOME with version, capabilities and limits; SCRAM logins, refused alike for
//! a wrong password and an unknown user and throttled per address; clear refusals for an
//! unserved architecture, an unsupported version and a first message that is not HELLO.

mod common;

use bytes::Bytes;
use cairn_net::frame::{self, PROTOCOL_VERSION};
use cairn_net::message::{Architecture, Capabilities, ErrorCode, Message};
use cairn_net::rpc::{Client, Limits, Login};
use cairn_net::scram::ClientFirst;
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
fn a_wrong_password_and_an_unknown_user_are_refused_alike() {
    let server = Server::start(common::Transport::Tcp, Limits::default());
    for (user, password) in [(common::USER, "wrong"), ("nobody", common::PASSWORD)] {
        let mut opts = options();
        opts.login = Some(Login {
            user: user.into(),
            password: password.into(),
        });
        match Client::connect(&server.addr, &opts) {
            Err(Error::Refused(f)) => {
                assert_eq!(f.code, ErrorCode::AUTH_FAILED);
                assert_eq!(f.message, "authentication failed", "it does not say which was wrong");
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
    common::well_behaved(&server);
}

#[test]
fn a_login_proves_both_sides_and_the_password_never_crosses_the_wire() {
    let server = Server::start(common::Transport::Tcp, Limits::default());
    let mut raw = Raw::connect(&server.addr);
    let first = ClientFirst::with_nonce(common::USER, "fixedclientnonce").unwrap();
    let mut hello = common::hello();
    hello.auth = Bytes::copy_from_slice(first.message());
    raw.send_message(&Message::Hello(hello));
    let Some(Message::Challenge(server_first)) = raw.next_message() else {
        panic!("a login is answered with CHALLENGE")
    };
    let last = first.receive_server_first(&server_first, common::PASSWORD).unwrap();
    assert!(!last.message().windows(6).any(|w| w == common::PASSWORD.as_bytes()));
    raw.send_message(&Message::Auth(Bytes::copy_from_slice(last.message())));
    let Some(Message::Welcome(w)) = raw.next_message() else {
        panic!("a good proof is answered with WELCOME")
    };
    last.verify_server_final(&w.auth)
        .expect("the WELCOME carries the server's proof");
}

#[test]
fn failed_logins_from_one_address_are_throttled_even_with_the_right_password_next() {
    let limits = Limits {
        login_failures_burst: 3,
        login_failure_refill: std::time::Duration::from_secs(3600),
        ..Limits::default()
    };
    let server = Server::start(common::Transport::Tcp, limits);
    let mut wrong = options();
    wrong.login = Some(Login {
        user: common::USER.into(),
        password: "guess".into(),
    });
    let codes: Vec<ErrorCode> = (0..6)
        .map(|_| match Client::connect(&server.addr, &wrong) {
            Err(Error::Refused(f)) => f.code,
            other => panic!("expected a refusal, got {other:?}"),
        })
        .collect();
    assert_eq!(
        codes,
        [[ErrorCode::AUTH_FAILED; 3], [ErrorCode::TOO_MANY_FAILED_LOGINS; 3]].concat(),
        "three guesses are checked, then the address must wait"
    );
    match Client::connect(&server.addr, &options()) {
        Err(Error::Refused(f)) => assert_eq!(f.code, ErrorCode::TOO_MANY_FAILED_LOGINS),
        other => panic!("the right password waits too, got {other:?}"),
    }
    // A connection without a login is not a guess: it is still served.
    let mut raw = Raw::connect(&server.addr);
    raw.handshake();
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
        handshake_body_max: 256,
        ..Limits::default()
    };
    let server = Server::start(common::Transport::Tcp, limits);
    let mut raw = Raw::connect(&server.addr);
    let mut hello = common::hello();
    hello.client_name = "x".repeat(300);
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
    assert_eq!(w.version, u16::from(PROTOCOL_VERSION));
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
