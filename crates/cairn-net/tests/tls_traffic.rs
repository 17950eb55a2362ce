//! TLS carries every kind of traffic unchanged: the handshake with and without a SCRAM login,
//! pipelined calls answered in any order, partial replies, NOTICEs (also while another thread
//! reads), large bodies both ways, and many clients at once.

mod common;

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use cairn_net::rpc::{Client, ClientOptions, Limits, Login};
use cairn_net::{Error, ErrorCode};
use common::{notice_number, notify_body, Server, Transport, ECHO, GREET_NAME, HOLD, NOTIFY, RELEASE, STREAM};

/// Long enough for anything that should happen to happen on a loaded machine.
const PATIENCE: Duration = Duration::from_secs(10);

fn tls_server() -> Server {
    Server::start(Transport::Tls, Limits::default())
}

fn body(client: u32, seq: u32) -> Bytes {
    let mut b = Vec::new();
    b.extend_from_slice(&client.to_le_bytes());
    b.extend_from_slice(&seq.to_le_bytes());
    // Vary the size so frames straddle TLS records and read boundaries.
    b.resize(8 + (seq as usize * 37) % 3000, (seq % 251) as u8);
    Bytes::from(b)
}

fn n(n: u32) -> Bytes {
    Bytes::copy_from_slice(&n.to_le_bytes())
}

#[test]
fn the_handshake_runs_inside_tls_with_and_without_a_login() {
    let server = tls_server();
    // With the SCRAM login (the test user).
    let c = server.connect();
    assert!(c.welcome().server_name.starts_with("cairn"));
    c.ping().unwrap();
    assert_eq!(c.call(ECHO, &b"over tls"[..]).unwrap(), &b"over tls"[..]);
    // Without a login.
    let anonymous = Client::connect(
        &server.addr,
        &ClientOptions {
            login: None,
            ..server.options()
        },
    )
    .unwrap();
    anonymous.ping().unwrap();
    // A wrong password is refused as without TLS.
    let wrong = ClientOptions {
        login: Some(Login {
            user: common::USER.into(),
            password: "wrong".into(),
        }),
        ..server.options()
    };
    match Client::connect(&server.addr, &wrong) {
        Err(Error::Refused(f)) => assert_eq!(f.code, ErrorCode::AUTH_FAILED),
        other => panic!("expected a refusal, got {other:?}"),
    }
    // The certificate names `localhost` as well as 127.0.0.1: a DNS name given explicitly.
    let mut by_name = server.options();
    by_name.tls.as_mut().unwrap().server_name = Some("localhost".into());
    Client::connect(&server.addr, &by_name).unwrap().ping().unwrap();
    assert_eq!(server.handler.opened.load(Ordering::SeqCst), 3);
}

#[test]
fn pipelined_calls_are_answered_in_any_order() {
    let server = tls_server();
    let c = server.connect();
    let held = c.invoke(HOLD, Bytes::from_static(b"held")).unwrap();
    // Later requests complete while the first is still running.
    for i in 0..10u32 {
        assert_eq!(c.call(ECHO, n(i)).unwrap(), n(i));
    }
    assert_eq!(c.pending(), 1);
    c.call(RELEASE, Bytes::new()).unwrap();
    assert_eq!(held.wait().unwrap(), Bytes::from_static(b"held"));

    // Many in flight, from one client shared by threads (writers and readers at once on the one
    // TLS session).
    std::thread::scope(|s| {
        for t in 0..4u32 {
            let c = c.clone();
            s.spawn(move || {
                let mut in_flight = VecDeque::new();
                for seq in 0..1500u32 {
                    in_flight.push_back((seq, c.invoke(ECHO, body(t, seq)).unwrap()));
                    if in_flight.len() == 64 {
                        let (s, call) = in_flight.pop_front().unwrap();
                        assert_eq!(call.wait().unwrap(), body(t, s));
                    }
                }
                for (s, call) in in_flight {
                    assert_eq!(call.wait().unwrap(), body(t, s));
                }
            });
        }
    });
    c.check_invariants();
    assert_eq!(c.pending(), 0);
}

#[test]
fn partial_replies_arrive_in_order() {
    let server = tls_server();
    let c = server.connect();
    let mut call = c.invoke(STREAM, n(1000)).unwrap();
    for i in 0..1000 {
        let part = call.next_part().unwrap().unwrap();
        assert!(!part.last);
        assert_eq!(part.body, n(i));
    }
    let last = call.next_part().unwrap().unwrap();
    assert!(last.last);
    assert_eq!(last.body, Bytes::from_static(b"end"));
    // Streams interleaved on one connection.
    let calls: Vec<_> = (0..20u32).map(|k| c.invoke(STREAM, n(50 + k)).unwrap()).collect();
    for (k, call) in calls.into_iter().enumerate().rev() {
        let parts = call.collect().unwrap();
        assert_eq!(parts.len(), 50 + k + 1);
        for (i, p) in parts[..parts.len() - 1].iter().enumerate() {
            assert_eq!(*p, n(i as u32));
        }
    }
}

#[test]
fn notices_arrive_whoever_reads() {
    let server = tls_server();
    // An idle client: next_notice itself reads.
    let c = server.connect();
    c.call(NOTIFY, notify_body(1, 200)).unwrap();
    let body = c.next_notice(PATIENCE).unwrap().expect("a notice");
    assert_eq!(notice_number(&body), 0);

    // A notice that comes with the WELCOME may be left decrypted inside the TLS session, where a
    // poll of the socket does not see it.
    for _ in 0..20 {
        let opts = ClientOptions {
            client_name: GREET_NAME.into(),
            ..server.options()
        };
        let greeted = Client::connect(&server.addr, &opts).unwrap();
        assert_eq!(
            greeted.next_notice(PATIENCE).unwrap(),
            Some(Bytes::from_static(b"hello"))
        );
    }

    // A thread parked in next_notice while this one pipelines calls and reads their replies:
    // notices come in order, replies go to their calls.
    let c = server.connect();
    const ROUNDS: u32 = 2000;
    let expected: usize = (0..ROUNDS)
        .filter(|i| i % 10 == 0)
        .map(|i| if i % 100 == 0 { 13 } else { 3 })
        .sum();
    std::thread::scope(|s| {
        let taker = s.spawn(|| {
            (0..expected)
                .map(|i| match c.next_notice(PATIENCE) {
                    Ok(Some(body)) => notice_number(&body),
                    other => panic!("notice {i} of {expected}: {other:?}"),
                })
                .collect::<Vec<_>>()
        });
        let mut in_flight = VecDeque::new();
        for i in 0..ROUNDS {
            let (kind, body) = if i % 10 != 0 {
                (ECHO, Bytes::from(format!("echo {i}").repeat(1 + (i as usize % 50))))
            } else if i % 100 == 0 {
                in_flight.push_back((Bytes::new(), c.invoke(NOTIFY, notify_body(3, 0)).unwrap()));
                (NOTIFY, notify_body(10, 2))
            } else {
                (NOTIFY, notify_body(3, 0))
            };
            let expect = if kind == ECHO { body.clone() } else { Bytes::new() };
            in_flight.push_back((expect, c.invoke(kind, body).unwrap()));
            while in_flight.len() > 32 {
                let (expect, call) = in_flight.pop_front().unwrap();
                assert_eq!(call.wait().unwrap(), expect);
            }
        }
        for (expect, call) in in_flight {
            assert_eq!(call.wait().unwrap(), expect);
        }
        let numbers = taker.join().unwrap();
        assert_eq!(numbers, (0..expected as u32).collect::<Vec<_>>());
    });
    assert_eq!(c.next_notice(Duration::from_millis(50)).unwrap(), None);
    c.check_invariants();
}

#[test]
fn large_bodies_go_both_ways() {
    let server = tls_server();
    let c = server.connect();
    let big = Bytes::from((0..6u32 << 20).map(|i| (i % 253) as u8).collect::<Vec<u8>>());
    assert_eq!(c.call(ECHO, big.clone()).unwrap(), big);
    // Several at once from two threads: each request is larger than the socket buffers, so
    // writers stall and must read replies while the server waits for its replies to be taken.
    std::thread::scope(|s| {
        for t in 0..2u8 {
            let c = c.clone();
            s.spawn(move || {
                let calls: Vec<_> = (0..3u8)
                    .map(|k| {
                        let b = Bytes::from(vec![t * 16 + k; 3 << 20]);
                        (b.clone(), c.invoke(ECHO, b).unwrap())
                    })
                    .collect();
                for (b, call) in calls {
                    assert_eq!(call.wait().unwrap(), b);
                }
            });
        }
    });
    c.check_invariants();
}

#[test]
fn many_clients_at_once() {
    let server = tls_server();
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..8u32 {
            let server = &server;
            s.spawn(move || {
                let clients: Vec<Client> = (0..4).map(|_| server.connect()).collect();
                for seq in 0..200u32 {
                    for (k, c) in clients.iter().enumerate() {
                        let b = body(t * 4 + k as u32, seq);
                        assert_eq!(c.call(ECHO, b.clone()).unwrap(), b);
                    }
                }
            });
        }
    });
    assert_eq!(server.handler.opened.load(Ordering::SeqCst), 32);
    assert!(start.elapsed() < Duration::from_secs(120));
}

#[test]
fn sending_much_and_reading_nothing_does_not_deadlock() {
    // The server runs few requests at once and queues few reply bytes, so it soon stops reading;
    // the client's socket fills; its stalled writes must take replies off the socket themselves,
    // through the one TLS session that the writer is also using.
    let limits = Limits {
        in_flight_max: 2,
        body_max: 64 << 10,
        reply_bytes_max: 64 << 10,
        request_bytes_max: 64 << 10,
        ..Limits::default()
    };
    let server = Server::start(Transport::Tls, limits);
    let c = server.connect();
    let big = Bytes::from(vec![7u8; 16 << 10]);
    let calls: Vec<_> = (0..400).map(|_| c.invoke(ECHO, big.clone()).unwrap()).collect();
    for call in calls {
        assert_eq!(call.wait().unwrap(), big);
    }
    // And with deferred requests, written in batches of 64 KiB.
    let calls: Vec<_> = (0..400)
        .map(|_| c.invoke_deferred(ECHO, big.clone()).unwrap())
        .collect();
    for call in calls {
        assert_eq!(call.wait().unwrap(), big);
    }
}
