//! What TLS refuses, and that a refusal ends only that connection: a certificate from a CA the
//! client does not trust or for another name, a client without TLS at a TLS listener (told so in
//! plain), a TLS client at a listener without TLS (told so clearly), a TCP connection that never
//! starts TLS (closed at the handshake timeout, holding its slot no longer), and TLS on a Unix
//! socket.

mod common;

use std::io::Read;
use std::time::{Duration, Instant};

use bytes::Bytes;
use cairn_net::rpc::{Client, ClientOptions, Limits};
use cairn_net::transport::{Address, ClientTls, Listener, TlsError, TlsRoots};
use cairn_net::{Error, ErrorCode};
use common::{Pki, Raw, Server, Transport, ECHO};

/// A TLS client does a few calls (the server still serves others).
fn still_serving(server: &Server) {
    let c = server.connect();
    for i in 0..10u32 {
        let b = Bytes::copy_from_slice(&i.to_le_bytes());
        assert_eq!(c.call(ECHO, b.clone()).unwrap(), b);
    }
}

fn tls_error(result: Result<Client, Error>) -> String {
    match result {
        Err(Error::Tls(why)) => {
            eprintln!("refused: {why}");
            why
        }
        other => panic!("expected a TLS error, got {other:?}"),
    }
}

#[test]
fn a_client_trusting_another_ca_is_refused_naming_the_certificate_problem() {
    let server = Server::start(Transport::Tls, Limits::default());
    let other = Pki::new("some other CA");
    let opts = ClientOptions {
        tls: Some(other.client_tls()),
        ..server.options()
    };
    let why = tls_error(Client::connect(&server.addr, &opts));
    assert!(why.contains("certificate"), "{why}");
    assert!(why.contains("not signed by a trusted CA"), "{why}");
    still_serving(&server);
}

#[test]
fn a_client_trusting_the_system_roots_refuses_a_private_ca() {
    let server = Server::start(Transport::Tls, Limits::default());
    let opts = ClientOptions {
        tls: Some(ClientTls::new(TlsRoots::System)),
        ..server.options()
    };
    let why = tls_error(Client::connect(&server.addr, &opts));
    // A machine without a certificate store says so instead.
    assert!(
        why.contains("not signed by a trusted CA") || why.contains("no usable system root certificates"),
        "{why}"
    );
    still_serving(&server);
}

#[test]
fn a_certificate_for_another_name_is_refused() {
    let server = Server::start(Transport::Tls, Limits::default());
    let mut opts = server.options();
    opts.tls.as_mut().unwrap().server_name = Some("db.example.com".into());
    let why = tls_error(Client::connect(&server.addr, &opts));
    assert!(why.contains("not valid for"), "{why}");
    assert!(why.contains("db.example.com"), "{why}");
    still_serving(&server);
}

#[test]
fn a_plain_client_at_a_tls_listener_is_told_and_others_go_on() {
    let server = Server::start(Transport::Tls, Limits::default());
    // A client without TLS speaks frames at once: it gets a plain REFUSAL saying TLS is needed.
    let plain = ClientOptions {
        tls: None,
        ..server.options()
    };
    match Client::connect(&server.addr, &plain) {
        Err(Error::Refused(f)) => {
            assert_eq!(f.code, ErrorCode::PROTOCOL);
            assert!(f.message.contains("TLS"), "{}", f.message);
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    // Something that is neither TLS nor the protocol is simply closed.
    let mut raw = Raw::connect(&server.addr);
    raw.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    let mut rest = Vec::new();
    let _ = raw.read_to_end(&mut rest);
    assert!(!rest.starts_with(b"CRN"), "no frame to a stranger");
    still_serving(&server);
}

#[test]
fn a_tls_client_at_a_listener_without_tls_fails_clearly() {
    let server = Server::start(Transport::Tcp, Limits::default());
    let pki = Pki::new("cairn test CA");
    let opts = ClientOptions {
        tls: Some(pki.client_tls()),
        ..common::options()
    };
    let why = tls_error(Client::connect(&server.addr, &opts));
    assert!(why.contains("without TLS"), "{why}");
    common::well_behaved(&server);
}

#[test]
fn a_connection_that_never_starts_tls_is_closed_at_the_handshake_timeout() {
    let timeout = Duration::from_millis(500);
    let limits = Limits {
        handshake_timeout: timeout,
        connections_max: 3,
        ..Limits::default()
    };
    let server = Server::start(Transport::Tls, limits);
    // Two silent connections and one that stops halfway through a ClientHello.
    let start = Instant::now();
    let mut silent: Vec<Raw> = (0..2).map(|_| Raw::connect(&server.addr)).collect();
    let mut partial = Raw::connect(&server.addr);
    partial.send(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01]);
    // They hold every slot meanwhile (the server counts them): a TLS client is refused as at
    // any full server (and the refusal comes through TLS).
    while server.stats.connections.load(std::sync::atomic::Ordering::SeqCst) < 3 {
        assert!(start.elapsed() < timeout, "the three connections were not all accepted");
        std::thread::sleep(Duration::from_millis(1));
    }
    match Client::connect(&server.addr, &server.options()) {
        Err(Error::Refused(f)) => assert_eq!(f.code, ErrorCode::TOO_MANY_CONNECTIONS),
        Err(e) if start.elapsed() >= timeout => eprintln!("(too slow to see the full server: {e})"),
        other => panic!("expected a refusal at the limit, got {other:?}"),
    }
    // Each is closed at the timeout, with nothing said (there is no TLS session to say it in).
    silent.push(partial);
    for raw in &mut silent {
        let mut rest = Vec::new();
        let _ = raw.read_to_end(&mut rest);
        assert!(rest.is_empty() || !rest.starts_with(b"CRN"), "nothing in plain");
    }
    let closed_after = start.elapsed();
    assert!(
        closed_after >= timeout - Duration::from_millis(50),
        "closed after {closed_after:?}"
    );
    assert!(closed_after < timeout * 10, "closed only after {closed_after:?}");
    // Their slots are free again.
    still_serving(&server);
}

#[test]
fn a_silent_connection_does_not_hold_up_others() {
    let limits = Limits {
        handshake_timeout: Duration::from_secs(30),
        ..Limits::default()
    };
    let server = Server::start(Transport::Tls, limits);
    let _silent: Vec<Raw> = (0..4).map(|_| Raw::connect(&server.addr)).collect();
    let start = Instant::now();
    still_serving(&server);
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "others wait for nobody's handshake"
    );
}

#[test]
fn tls_is_refused_on_a_unix_socket() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cairn.sock");
    let pki = Pki::new("cairn test CA");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let listener = rt.block_on(Listener::bind(&Address::Unix(path.clone()))).unwrap();
    match listener.with_tls(pki.server_tls()) {
        Err(e @ TlsError::UnixSocket { .. }) => assert!(e.to_string().contains("cairn.sock"), "{e}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    let opts = ClientOptions {
        tls: Some(pki.client_tls()),
        ..common::options()
    };
    let why = tls_error(Client::connect(&Address::Unix(path), &opts));
    assert!(why.contains("Unix socket"), "{why}");
}
