//! Hostile network input against a real `cairn serve`, limits set by its
//! `--config` file: a connection that never says HELLO, a frame claiming
//! 4 GiB, garbage after a good handshake, a client sending one byte at a
//! time, and more connections than allowed. Each offender gets a clear
//! refusal or is cut off at its limit, and a well-behaved client connected
//! all along — and a new one — is still served.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use cairn_net::frame::{encode_frame, Flags, FrameDecoder, HEADER_SIZE};
use cairn_net::message::{Architecture, ErrorCode, Hello, Message};
use cairn_net::page_service::PageRequest;
use cairn_net::rpc::Client;
use cairn_net::transport::Address;
use cairn_net::{Kind, RequestId};
use cairn_storage::{Db, DbOptions};

use common::{call, serve};

fn tcp(addr: &Address) -> TcpStream {
    let Address::Tcp(a) = addr else { panic!("a TCP address") };
    let s = TcpStream::connect(a).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s
}

fn hello_bytes() -> Vec<u8> {
    let mut out = Vec::new();
    Message::Hello(Hello {
        architecture: Architecture::PAGE,
        auth: bytes::Bytes::new(),
        client_name: "hostile".into(),
    })
    .encode(&mut out);
    out
}

/// Every message the server sends until it closes the connection.
fn until_closed(s: &mut TcpStream) -> Vec<Message> {
    let mut dec = FrameDecoder::new(1 << 20);
    let mut buf = [0u8; 4096];
    let mut out = Vec::new();
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => dec.push(&buf[..n]),
        }
        while let Ok(Some(f)) = dec.decode() {
            if let Ok(m) = Message::from_frame(f) {
                out.push(m);
            }
        }
    }
    out
}

fn fault_code(m: &Message) -> ErrorCode {
    match m {
        Message::Refusal(f) => f.code,
        Message::Goodbye { fault, .. } => fault.code,
        Message::ErrorReply { fault, .. } => fault.code,
        other => panic!("expected a refusal, a goodbye or an error reply, got {other:?}"),
    }
}

fn served(good: &Client) {
    let body = call(good, &PageRequest::Volume).expect("a well-behaved client is served");
    assert_eq!(body.len(), 1);
}

#[test]
fn each_offender_is_refused_or_cut_off_and_others_are_served() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    Db::create(&path, &DbOptions::default()).unwrap().close().unwrap();
    let config = dir.path().join("limits.conf");
    std::fs::write(
        &config,
        "# small limits, so offenders meet them quickly\n\
         connections_max = 8\n\
         body_max = 65536\n\
         handshake_timeout_ms = 300\n\
         frame_timeout_ms = 300\n",
    )
    .unwrap();
    let server = serve(&path, &["--config", config.to_str().unwrap()]);
    let good = server.client().unwrap();
    served(&good);

    // No HELLO at all: refused when the handshake time is up.
    let started = Instant::now();
    let mut silent = tcp(&server.addr);
    let got = until_closed(&mut silent);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(fault_code(&got[0]), ErrorCode::HANDSHAKE_TIMEOUT);
    assert!(started.elapsed() < Duration::from_secs(10));
    served(&good);

    // A frame claiming 4 GiB after a good handshake: refused from its
    // header alone, nothing allocated for it.
    let mut big = tcp(&server.addr);
    big.write_all(&hello_bytes()).unwrap();
    let mut f = Vec::new();
    encode_frame(Kind::VOLUME, Flags::NONE, RequestId(7), b"", &mut f);
    f[16..20].copy_from_slice(&u32::MAX.to_le_bytes());
    let sum = crc32c::crc32c(&f[..HEADER_SIZE - 4]);
    f[HEADER_SIZE - 4..HEADER_SIZE].copy_from_slice(&sum.to_le_bytes());
    big.write_all(&f).unwrap();
    let got = until_closed(&mut big);
    assert!(matches!(got.first(), Some(Message::Welcome(_))), "{got:?}");
    assert!(
        got[1..].iter().any(|m| fault_code(m) == ErrorCode::TOO_LARGE),
        "{got:?}"
    );
    served(&good);

    // Garbage after a good handshake.
    let mut junk = tcp(&server.addr);
    junk.write_all(&hello_bytes()).unwrap();
    junk.write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    let got = until_closed(&mut junk);
    assert!(
        got[1..].iter().any(|m| fault_code(m) == ErrorCode::BAD_FRAME),
        "{got:?}"
    );
    served(&good);

    // One byte at a time, slower than the frame timeout allows.
    let mut slow = tcp(&server.addr);
    slow.write_all(&hello_bytes()).unwrap();
    let mut req = Vec::new();
    let (kind, body) = PageRequest::Volume.encode();
    encode_frame(kind, Flags::NONE, RequestId(1), &body, &mut req);
    for b in &req[..10] {
        if slow.write_all(&[*b]).is_err() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let got = until_closed(&mut slow);
    assert!(
        got[1..].iter().any(|m| fault_code(m) == ErrorCode::TRUNCATED),
        "{got:?}"
    );
    served(&good);

    // More connections than allowed: the extra ones are refused, the good
    // client is still served, and once the idle ones are gone (no HELLO:
    // the handshake timeout) a new client is served.
    let idle: Vec<TcpStream> = (0..12).map(|_| tcp(&server.addr)).collect();
    let mut refused = 0;
    for mut s in idle {
        let got = until_closed(&mut s);
        if got.iter().any(|m| fault_code(m) == ErrorCode::TOO_MANY_CONNECTIONS) {
            refused += 1;
        }
    }
    assert!(
        refused >= 5,
        "at most 8 connections (one is the good client): {refused} refused"
    );
    served(&good);
    let fresh = server.client().unwrap();
    served(&fresh);
    drop((good, fresh));
    server.stop();
}
