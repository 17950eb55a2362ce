//! Each kind of bad input against a real server: the offender gets an error reply where
//! possible and a closed connection; a well-behaved client connected all along is still served,
//! and so is a new one.

mod common;

use std::time::Duration;

use cairn_net::frame::HEADER_SIZE;
use cairn_net::message::{ErrorCode, Message};
use cairn_net::rpc::Limits;
use cairn_net::{Kind, RequestId};
use common::{both, Raw, Server, Transport, ECHO};

/// Starts a server, connects a good client, lets `attack` misbehave on a handshaken raw
/// connection, checks what it got back, then checks the good clients.
fn case(limits: Limits, attack: impl Fn(&mut Raw), check: impl Fn(&[Message])) {
    for transport in both() {
        let server = Server::start(transport, limits.clone());
        let good = server.connect();
        good.ping().unwrap();
        let mut raw = Raw::connect(&server.addr);
        raw.handshake();
        attack(&mut raw);
        let got = raw.messages_until_closed();
        check(&got);
        assert_eq!(good.call(ECHO, &b"still here"[..]).unwrap(), &b"still here"[..]);
        common::well_behaved(&server);
    }
}

fn goodbye(m: &Message) -> (RequestId, ErrorCode) {
    match m {
        Message::Goodbye { request_id, fault } => (*request_id, fault.code),
        other => panic!("expected GOODBYE, got {other:?}"),
    }
}

fn error_reply(m: &Message) -> (Kind, RequestId, ErrorCode) {
    match m {
        Message::ErrorReply { kind, id, fault } => (*kind, *id, fault.code),
        other => panic!("expected an error reply, got {other:?}"),
    }
}

#[test]
fn oversized_length_is_rejected_from_the_header() {
    let limits = Limits {
        body_max: 4096,
        ..Limits::default()
    };
    for claimed in [4097u32, u32::MAX - 1] {
        case(
            limits.clone(),
            |raw| {
                let mut f = common::request_frame(ECHO, 7, b"");
                f[16..20].copy_from_slice(&claimed.to_le_bytes());
                common::reseal(&mut f);
                raw.send(&f);
            },
            |got| {
                assert_eq!(got.len(), 2, "{got:?}");
                assert_eq!(error_reply(&got[0]), (ECHO, RequestId(7), ErrorCode::TOO_LARGE));
                assert_eq!(goodbye(&got[1]), (RequestId(7), ErrorCode::TOO_LARGE));
            },
        );
    }
}

#[test]
fn wrong_magic_is_a_bad_frame() {
    case(
        Limits::default(),
        |raw| raw.send(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n"),
        |got| {
            assert_eq!(got.len(), 1, "{got:?}");
            assert_eq!(goodbye(&got[0]), (RequestId(0), ErrorCode::BAD_FRAME));
        },
    );
}

#[test]
fn bad_header_checksum_is_a_bad_frame() {
    case(
        Limits::default(),
        |raw| {
            let mut f = common::request_frame(ECHO, 3, b"abc");
            f[10] ^= 0x40; // the id, under the checksum
            raw.send(&f);
        },
        |got| {
            assert_eq!(got.len(), 1, "{got:?}");
            assert_eq!(goodbye(&got[0]), (RequestId(0), ErrorCode::BAD_FRAME));
        },
    );
}

#[test]
fn bad_body_checksum_gets_an_error_reply() {
    case(
        Limits::default(),
        |raw| {
            let mut f = common::request_frame(ECHO, 11, b"payload");
            let last = f.len() - 1;
            f[last] ^= 1;
            raw.send(&f);
        },
        |got| {
            assert_eq!(got.len(), 2, "{got:?}");
            assert_eq!(error_reply(&got[0]), (ECHO, RequestId(11), ErrorCode::BAD_CHECKSUM));
            assert_eq!(goodbye(&got[1]), (RequestId(11), ErrorCode::BAD_CHECKSUM));
        },
    );
}

#[test]
fn truncated_frame_at_end_of_stream() {
    case(
        Limits::default(),
        |raw| {
            let f = common::request_frame(ECHO, 5, b"cut short");
            raw.send(&f[..HEADER_SIZE + 3]);
            raw.shutdown_write();
        },
        |got| {
            assert_eq!(got.len(), 1, "{got:?}");
            assert_eq!(goodbye(&got[0]), (RequestId(0), ErrorCode::TRUNCATED));
        },
    );
}

#[test]
fn stalled_frame_is_truncated_after_the_frame_timeout() {
    let limits = Limits {
        frame_timeout: Duration::from_millis(200),
        ..Limits::default()
    };
    case(
        limits,
        |raw| {
            let f = common::request_frame(ECHO, 5, b"never finished");
            raw.send(&f[..10]);
        },
        |got| {
            assert_eq!(got.len(), 1, "{got:?}");
            assert_eq!(goodbye(&got[0]), (RequestId(0), ErrorCode::TRUNCATED));
        },
    );
}

#[test]
fn unknown_message_kind_gets_an_error_reply() {
    case(
        Limits::default(),
        |raw| raw.send(&common::request_frame(Kind(0x0077), 21, b"")),
        |got| {
            assert_eq!(got.len(), 2, "{got:?}");
            assert_eq!(
                error_reply(&got[0]),
                (Kind(0x0077), RequestId(21), ErrorCode::UNKNOWN_KIND)
            );
            assert_eq!(goodbye(&got[1]), (RequestId(21), ErrorCode::UNKNOWN_KIND));
        },
    );
}

#[test]
fn a_server_message_from_the_client_is_a_protocol_error() {
    case(
        Limits::default(),
        |raw| {
            raw.send_message(&Message::Reply {
                kind: ECHO,
                id: RequestId(4),
                body: bytes::Bytes::new(),
            })
        },
        |got| {
            assert_eq!(got.len(), 1, "{got:?}");
            assert_eq!(goodbye(&got[0]), (RequestId(4), ErrorCode::PROTOCOL));
        },
    );
}

#[test]
fn a_notice_from_the_client_is_a_protocol_error() {
    // NOTICE goes server → client only: a client sending one is cut off like one sending any
    // other server-to-client message.
    case(
        Limits::default(),
        |raw| {
            raw.send_message(&Message::Notice {
                body: bytes::Bytes::from_static(b"callback?"),
            })
        },
        |got| {
            assert_eq!(got.len(), 1, "{got:?}");
            assert_eq!(goodbye(&got[0]), (RequestId(0), ErrorCode::PROTOCOL));
            assert!(
                matches!(&got[0], Message::Goodbye { fault, .. } if fault.message.contains("unexpected")),
                "{got:?}"
            );
        },
    );
}

#[test]
fn a_notice_kind_with_a_request_id_from_the_client_is_unknown() {
    case(
        Limits::default(),
        |raw| raw.send(&common::request_frame(Kind::NOTICE, 9, b"")),
        |got| {
            assert_eq!(got.len(), 2, "{got:?}");
            assert_eq!(
                error_reply(&got[0]),
                (Kind::NOTICE, RequestId(9), ErrorCode::UNKNOWN_KIND)
            );
            assert_eq!(goodbye(&got[1]), (RequestId(9), ErrorCode::UNKNOWN_KIND));
        },
    );
}

#[test]
fn a_flood_of_idle_connections() {
    let limits = Limits {
        connections_max: 8,
        handshake_timeout: Duration::from_millis(300),
        ..Limits::default()
    };
    let server = Server::start(Transport::Tcp, limits);
    let good = server.connect();
    let mut idle: Vec<Raw> = (0..40).map(|_| Raw::connect(&server.addr)).collect();
    // The connected client is served throughout the flood.
    assert_eq!(good.call(ECHO, &b"during"[..]).unwrap(), &b"during"[..]);
    // Every idle connection is refused, at once (over the limit) or when its handshake time runs
    // out, and closed.
    let mut codes = Vec::new();
    for raw in &mut idle {
        let got = raw.messages_until_closed();
        match &got[..] {
            [Message::Refusal(f)] => codes.push(f.code),
            other => panic!("expected one REFUSAL, got {other:?}"),
        }
    }
    assert!(codes.contains(&ErrorCode::TOO_MANY_CONNECTIONS));
    assert!(codes.contains(&ErrorCode::HANDSHAKE_TIMEOUT));
    assert!(codes
        .iter()
        .all(|c| *c == ErrorCode::TOO_MANY_CONNECTIONS || *c == ErrorCode::HANDSHAKE_TIMEOUT));
    drop(idle);
    // With the flood gone, new clients are served (the server may take a moment to see the
    // connections close).
    let mut served = false;
    for _ in 0..200 {
        match cairn_net::rpc::Client::connect(&server.addr, &common::options()) {
            Ok(c) => {
                c.ping().unwrap();
                served = true;
                break;
            }
            Err(cairn_net::Error::Refused(_)) => std::thread::sleep(Duration::from_millis(25)),
            Err(e) => panic!("{e}"),
        }
    }
    assert!(served);
    assert_eq!(good.call(ECHO, &b"after"[..]).unwrap(), &b"after"[..]);
}

/// The frame timeout runs from a frame's first byte, not from the last read:
/// a client that sends one byte well within the timeout each time is still
/// cut off once the whole frame has taken longer than the timeout (it used
/// to hold its connection, and the budget its header announced, forever).
#[test]
fn a_trickled_frame_is_cut_off_at_the_timeout_from_its_first_byte() {
    let limits = Limits {
        frame_timeout: Duration::from_millis(300),
        ..Limits::default()
    };
    let server = Server::start(Transport::Tcp, limits);
    let good = server.connect();
    let mut raw = Raw::connect(&server.addr);
    raw.handshake();
    let f = common::request_frame(ECHO, 5, &[9u8; 200]);
    let mut sent = 0;
    for byte in &f {
        // Each gap is a third of the timeout; the whole frame would take 20×
        // the timeout. A failed write means the server has closed.
        if std::io::Write::write_all(&mut raw, std::slice::from_ref(byte)).is_err() {
            break;
        }
        sent += 1;
        std::thread::sleep(Duration::from_millis(100));
        if raw.peer_closed() {
            break;
        }
    }
    assert!(
        sent < f.len(),
        "the server waited for the whole trickled frame ({sent} bytes)"
    );
    let got = raw.messages_until_closed();
    assert!(
        got.iter()
            .any(|m| matches!(m, Message::Goodbye { fault, .. } if fault.code == ErrorCode::TRUNCATED)),
        "{got:?}"
    );
    assert_eq!(good.call(ECHO, &b"still here"[..]).unwrap(), &b"still here"[..]);
}

/// A TCP connection to `to` from the local address 127.0.0.2 (all of
/// 127/8 is loopback on Linux): a client at another address.
fn connect_from_127_0_0_2(to: &cairn_net::transport::Address) -> Raw {
    use std::os::fd::FromRawFd;
    let cairn_net::transport::Address::Tcp(to) = to else {
        panic!("a TCP address")
    };
    let std::net::SocketAddr::V4(to) = to else {
        panic!("an IPv4 address")
    };
    // SAFETY: plain socket calls on a descriptor this function owns until
    // it is handed to the TcpStream; the sockaddr structs live on the stack
    // for the duration of each call.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
        assert!(fd >= 0);
        let mut from: libc::sockaddr_in = std::mem::zeroed();
        from.sin_family = libc::AF_INET as libc::sa_family_t;
        from.sin_addr.s_addr = u32::from(std::net::Ipv4Addr::new(127, 0, 0, 2)).to_be();
        let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        assert_eq!(libc::bind(fd, (&from as *const libc::sockaddr_in).cast(), len), 0);
        let mut dest: libc::sockaddr_in = std::mem::zeroed();
        dest.sin_family = libc::AF_INET as libc::sa_family_t;
        dest.sin_port = to.port().to_be();
        dest.sin_addr.s_addr = u32::from(*to.ip()).to_be();
        assert_eq!(libc::connect(fd, (&dest as *const libc::sockaddr_in).cast(), len), 0);
        let s = std::net::TcpStream::from_raw_fd(fd);
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        Raw::Tcp(s)
    }
}

/// Connections still in their handshake are bounded per address
/// (`handshakes_per_address_max`): one address's idle connections cannot
/// take every slot (1,100 of them used to lock everyone out), a client at
/// another address is served meanwhile, and a slot comes back as soon as
/// one of them completes its handshake.
#[test]
fn idle_handshakes_are_bounded_per_address_and_another_address_is_served() {
    let limits = Limits {
        handshakes_per_address_max: 4,
        handshake_timeout: Duration::from_secs(60),
        ..Limits::default()
    };
    let server = Server::start(Transport::Tcp, limits);
    let mut idle: Vec<Raw> = (0..4).map(|_| Raw::connect(&server.addr)).collect();
    // Wait until the server has taken all four in (each is answered when it says HELLO).
    for raw in &mut idle {
        assert!(!raw.peer_closed());
    }
    let mut fifth = Raw::connect(&server.addr);
    match &fifth.messages_until_closed()[..] {
        [Message::Refusal(f)] => {
            assert_eq!(f.code, ErrorCode::TOO_MANY_CONNECTIONS);
            assert!(f.message.contains("this address"), "{f}");
        }
        other => panic!("expected one REFUSAL, got {other:?}"),
    }
    let mut other = connect_from_127_0_0_2(&server.addr);
    other.handshake();
    // One idle connection finishes its handshake: its address has a slot again.
    idle[0].handshake();
    let mut again = Raw::connect(&server.addr);
    again.handshake();
}
