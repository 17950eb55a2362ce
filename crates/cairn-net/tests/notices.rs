//! Server-initiated messages: NOTICEs pushed by the handler through its `Notifier` reach
//! `Client::next_notice` in order, whoever reads the socket, and never get mixed up with replies.

mod common;

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use cairn_net::frame::{self, Flags, FrameDecoder};
use cairn_net::message::{Capabilities, Message, Welcome};
use cairn_net::rpc::client::NOTICES_MAX;
use cairn_net::rpc::{Client, ClientOptions, Limits};
use cairn_net::transport::Address;
use cairn_net::{Error, ErrorCode, Kind, RequestId};
use common::{both, notice_number, notify_body, Server, Transport, ECHO, GREET_NAME, HOLD, NOTIFY};

/// Long enough for anything that should happen to happen on a loaded machine.
const PATIENCE: Duration = Duration::from_secs(10);

/// Takes `count` notices and returns their numbers.
fn take_numbers(c: &Client, count: usize) -> Vec<u32> {
    (0..count)
        .map(|i| match c.next_notice(PATIENCE) {
            Ok(Some(body)) => notice_number(&body),
            other => panic!("notice {i} of {count}: {other:?}"),
        })
        .collect()
}

/// Waits until `done` holds, or fails the test.
fn eventually(what: &str, done: impl Fn() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < PATIENCE, "{what} did not happen");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Releases every HOLD when dropped, so a test failing while one runs fails instead of hanging
/// (the server's shutdown waits for running handlers).
struct ReleaseOnDrop<'a>(&'a Server);

impl Drop for ReleaseOnDrop<'_> {
    fn drop(&mut self) {
        self.0.handler.release_all();
    }
}

#[test]
fn an_idle_client_receives_a_notice_pushed_later() {
    for transport in both() {
        let server = Server::start(transport, Limits::default());
        let c = server.connect();
        // The reply comes at once; the notice 200 ms later, when no call is in flight and so
        // nobody but next_notice itself reads the socket.
        c.call(NOTIFY, notify_body(1, 200)).unwrap();
        assert_eq!(c.pending(), 0);
        let start = Instant::now();
        let body = c.next_notice(PATIENCE).unwrap().expect("a notice");
        assert_eq!(notice_number(&body), 0);
        assert!(start.elapsed() < PATIENCE);
        c.check_invariants();
        // The connection is as usable as before.
        assert_eq!(c.call(ECHO, &b"after"[..]).unwrap(), &b"after"[..]);
    }
}

#[test]
fn a_notice_queued_at_attach_follows_the_welcome() {
    // The notice often comes in the same read as the WELCOME, so it sits in the decoder, not in
    // the socket, when the handshake ends; a poll of the socket would never see it.
    let server = Server::start(Transport::Tcp, Limits::default());
    for _ in 0..20 {
        let opts = ClientOptions {
            client_name: GREET_NAME.into(),
            ..common::options()
        };
        let c = Client::connect(&server.addr, &opts).unwrap();
        assert_eq!(c.next_notice(PATIENCE).unwrap(), Some(Bytes::from_static(b"hello")));
    }
}

#[test]
fn notices_interleaved_with_pipelined_replies_arrive_in_order() {
    for transport in both() {
        let server = Server::start(transport, Limits::default());
        let c = server.connect();
        const ROUNDS: u32 = 3000;
        // Every 10th request is a NOTIFY: three notices inline (queued before its reply), and on
        // every 100th also ten from a task a little later, landing between other replies.
        let expected: usize = (0..ROUNDS)
            .filter(|i| i % 10 == 0)
            .map(|i| if i % 100 == 0 { 13 } else { 3 })
            .sum();
        std::thread::scope(|s| {
            let taker = s.spawn(|| take_numbers(&c, expected));
            let mut in_flight = VecDeque::new();
            for i in 0..ROUNDS {
                let (kind, body) = if i % 10 != 0 {
                    (ECHO, Bytes::from(format!("echo {i}").repeat(1 + (i as usize % 50))))
                } else if i % 100 == 0 {
                    // Inline first, then the delayed ones: the inline three come before them.
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
            let want: Vec<u32> = (0..expected as u32).collect();
            assert_eq!(numbers, want);
        });
        assert_eq!(c.next_notice(Duration::from_millis(50)).unwrap(), None);
        c.check_invariants();
        assert_eq!(c.pending(), 0);
    }
}

#[test]
fn several_threads_share_the_notices() {
    let server = Server::start(Transport::Unix, Limits::default());
    let c = server.connect();
    const COUNT: u32 = 2000;
    let (tx, rx) = mpsc::channel::<u32>();
    let sent = AtomicBool::new(false);
    std::thread::scope(|s| {
        for _ in 0..3 {
            let (c, tx, sent) = (c.clone(), tx.clone(), &sent);
            s.spawn(move || {
                // Each taker sees the notices it gets in increasing order; it stops at the first
                // quiet spell after all were sent.
                let mut last = None;
                loop {
                    match c.next_notice(Duration::from_millis(200)).unwrap() {
                        Some(body) => {
                            let n = notice_number(&body);
                            assert!(last < Some(n), "{n} after {last:?}");
                            last = Some(n);
                            tx.send(n).unwrap();
                        }
                        None if sent.load(Ordering::SeqCst) => return,
                        None => {}
                    }
                }
            });
        }
        for _ in 0..COUNT / 100 {
            c.call(NOTIFY, notify_body(100, 0)).unwrap();
        }
        sent.store(true, Ordering::SeqCst);
        drop(tx);
        let mut got: Vec<u32> = (0..COUNT).map(|_| rx.recv_timeout(PATIENCE).unwrap()).collect();
        got.sort_unstable();
        assert_eq!(
            got,
            (0..COUNT).collect::<Vec<_>>(),
            "each notice goes to exactly one taker"
        );
    });
    assert!(rx.try_recv().is_err(), "no notice twice");
    c.check_invariants();
}

#[test]
fn a_caller_reading_hands_notices_over() {
    for transport in both() {
        let server = Server::start(transport, Limits::default());
        let c = server.connect();
        std::thread::scope(|s| {
            let _release = ReleaseOnDrop(&server);
            // This thread is the reader for as long as its HOLD waits.
            let held = c.invoke(HOLD, &b"held"[..]).unwrap();
            let reader = s.spawn(move || held.wait().unwrap());
            eventually("HOLD running", || server.handler.holding.load(Ordering::SeqCst) == 1);
            c.call(NOTIFY, notify_body(5, 100)).unwrap();
            assert_eq!(take_numbers(&c, 5), vec![0, 1, 2, 3, 4]);
            assert!(!reader.is_finished(), "the notices came through the HOLD's reader");
            server.handler.release_all();
            assert_eq!(reader.join().unwrap(), &b"held"[..]);
        });
        c.check_invariants();
    }
}

#[test]
fn next_notice_times_out_with_none() {
    for transport in both() {
        let server = Server::start(transport, Limits::default());
        let c = server.connect();
        // Nobody reading: next_notice polls the socket until its deadline.
        let start = Instant::now();
        assert_eq!(c.next_notice(Duration::from_millis(150)).unwrap(), None);
        let waited = start.elapsed();
        assert!(waited >= Duration::from_millis(150), "{waited:?}");
        assert!(waited < Duration::from_secs(3), "{waited:?}");
        // A zero timeout answers at once.
        let start = Instant::now();
        assert_eq!(c.next_notice(Duration::ZERO).unwrap(), None);
        assert!(start.elapsed() < Duration::from_secs(1));
        // A caller reading: next_notice waits for its hand-over until the deadline.
        std::thread::scope(|s| {
            let _release = ReleaseOnDrop(&server);
            let held = c.invoke(HOLD, &b"x"[..]).unwrap();
            let reader = s.spawn(move || held.wait().unwrap());
            eventually("HOLD running", || server.handler.holding.load(Ordering::SeqCst) == 1);
            let start = Instant::now();
            assert_eq!(c.next_notice(Duration::from_millis(120)).unwrap(), None);
            let waited = start.elapsed();
            assert!(waited >= Duration::from_millis(120), "{waited:?}");
            assert!(waited < Duration::from_secs(3), "{waited:?}");
            server.handler.release_all();
            reader.join().unwrap();
        });
        // A notice that arrived while nobody waited is taken even with a zero timeout.
        c.call(NOTIFY, notify_body(1, 0)).unwrap();
        assert_eq!(
            c.next_notice(Duration::ZERO).unwrap().map(|b| notice_number(&b)),
            Some(0)
        );
        c.check_invariants();
    }
}

#[test]
fn a_closed_connection_ends_next_notice_after_the_queued_notices() {
    for transport in both() {
        let mut server = Server::start(transport, Limits::default());
        let c = server.connect();
        // Three notices, their request's reply and the GOODBYE all wait in the socket; one read
        // takes them together.
        let call = c.invoke(NOTIFY, notify_body(3, 0)).unwrap();
        // The notices are queued by the time the (only) request has finished.
        let h = server.handler.clone();
        eventually("the notices sent", || {
            h.running_max.load(Ordering::SeqCst) == 1 && h.running.load(Ordering::SeqCst) == 0
        });
        server.shutdown();
        assert_eq!(take_numbers(&c, 3), vec![0, 1, 2]);
        let err = c.next_notice(PATIENCE).unwrap_err();
        assert!(
            matches!(&err, Error::Closed(f) if f.code == ErrorCode::SHUTTING_DOWN),
            "{err:?}"
        );
        // Again, and calls get the same error.
        assert!(matches!(c.next_notice(Duration::ZERO), Err(Error::Closed(_))));
        assert!(matches!(c.call(ECHO, &b"late"[..]), Err(Error::Closed(_))));
        // The reply read with them still reaches its call.
        assert_eq!(call.wait().unwrap(), Bytes::new());
        c.check_invariants();
    }
}

#[test]
fn a_server_shutting_down_wakes_next_notice() {
    let server = Server::start(Transport::Tcp, Limits::default());
    let c = server.connect();
    let c2 = c.clone();
    let waiter = std::thread::spawn(move || c2.next_notice(PATIENCE));
    // The waiter is inside next_notice before the server goes.
    eventually("the waiter entering next_notice", || c.notice_callers() == 1);
    drop(server);
    let start = Instant::now();
    let got = waiter.join().unwrap();
    assert!(matches!(got, Err(Error::Closed(_))), "{got:?}");
    assert!(start.elapsed() < Duration::from_secs(3));
    assert!(c.closed().is_some());
}

#[test]
fn a_flood_of_untaken_notices_closes_the_connection() {
    for transport in both() {
        let server = Server::start(transport, Limits::default());
        let c = server.connect();
        let flood = NOTICES_MAX as u32 + 10;
        // All the notices come before the reply, so the call's reader meets the limit first.
        let err = c.call(NOTIFY, notify_body(flood, 0)).unwrap_err();
        assert!(
            matches!(&err, Error::Protocol(m) if m.contains(&NOTICES_MAX.to_string())),
            "{err:?}"
        );
        c.check_invariants();
        // What was accepted is still handed out, in order, then the same error.
        let numbers = take_numbers(&c, NOTICES_MAX);
        assert!(numbers.iter().enumerate().all(|(i, n)| *n == i as u32));
        assert!(matches!(c.next_notice(Duration::ZERO), Err(Error::Protocol(_))));
        // The client shut its socket, so the server sees it go while the Client still exists.
        eventually("the server closing the session", || {
            server.handler.closed.load(Ordering::SeqCst) == 1
        });
        drop(c);
    }
}

#[test]
fn a_notifier_outliving_its_client_reports_disconnected() {
    let limits = Limits {
        body_max: 4096,
        ..Limits::default()
    };
    for transport in both() {
        let mut server = Server::start(transport, limits.clone());
        let c = server.connect();
        c.ping().unwrap();
        let notifier = server.handler.last_notifier.lock().unwrap().clone().unwrap();
        assert!(!notifier.is_closed());
        assert!(matches!(
            notifier.notice(vec![0u8; 4097]),
            Err(Error::TooLarge { len: 4097, max: 4096 })
        ));
        notifier.notice(vec![1u8; 4096]).unwrap();
        assert_eq!(c.next_notice(PATIENCE).unwrap().unwrap().len(), 4096);
        drop(c);
        eventually("the notifier seeing the client gone", || notifier.is_closed());
        assert!(matches!(notifier.notice(&b"late"[..]), Err(Error::Disconnected)));
        // The handler still holds notifiers of the closed connection; they must not keep its
        // writer alive, or shutting down would wait for them forever.
        let (done_tx, done_rx) = mpsc::channel();
        std::thread::spawn(move || {
            server.shutdown();
            done_tx.send(()).unwrap();
        });
        done_rx.recv_timeout(PATIENCE).expect("the server shut down");
        assert!(notifier.is_closed());
    }
}

#[test]
fn a_notifier_is_closed_as_soon_as_its_connection_stops_serving() {
    let server = Server::start(Transport::Tcp, Limits::default());
    let _release = ReleaseOnDrop(&server);
    let c = server.connect();
    let held = c.invoke(HOLD, &b"x"[..]).unwrap();
    eventually("HOLD running", || server.handler.holding.load(Ordering::SeqCst) == 1);
    let notifier = server.handler.last_notifier.lock().unwrap().clone().unwrap();
    drop(held);
    drop(c);
    // The HOLD keeps the connection draining (its writer alive) until released, but the client
    // can no longer answer a notice: it is refused at once.
    eventually("the notifier seeing the client gone", || notifier.is_closed());
    assert!(matches!(notifier.notice(&b"late"[..]), Err(Error::Disconnected)));
    assert_eq!(server.handler.closed.load(Ordering::SeqCst), 0, "still draining");
    server.handler.release_all();
    eventually("the session closing", || {
        server.handler.closed.load(Ordering::SeqCst) == 1
    });
}

/// A server that answers HELLO with a WELCOME followed by `after`, then waits for the client
/// to close.
fn fake_server(after: Vec<u8>) -> (Address, std::thread::JoinHandle<()>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = Address::Tcp(listener.local_addr().unwrap());
    let thread = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(PATIENCE)).unwrap();
        let mut dec = FrameDecoder::new(4096);
        let mut buf = [0u8; 4096];
        while dec.decode().unwrap().is_none() {
            let n = s.read(&mut buf).unwrap();
            dec.push(&buf[..n]);
        }
        let mut out = Vec::new();
        Message::Welcome(Welcome {
            version: 1,
            capabilities: Capabilities::NET,
            body_max: 1 << 20,
            in_flight_max: 16,
            session: 1,
            server_name: "fake".into(),
            auth: Bytes::new(),
        })
        .encode(&mut out);
        out.extend_from_slice(&after);
        s.write_all(&out).unwrap();
        while matches!(s.read(&mut buf), Ok(n) if n > 0) {}
    });
    (addr, thread)
}

#[test]
fn a_notice_kind_with_an_id_or_flags_is_not_a_notice() {
    /// Whether the error is the one expected.
    type Expect = fn(&Error) -> bool;
    let bad: [(Flags, u64, Expect); 3] = [
        // Id not 0: an unknown message.
        (Flags::NONE, 5, |e| matches!(e, Error::Message(_))),
        // The REPLY flag makes it a reply (to a request of kind 6, which was never sent).
        (
            Flags::REPLY,
            0,
            |e| matches!(e, Error::Protocol(m) if m.contains("unknown request")),
        ),
        (
            Flags::REPLY.with(Flags::MORE),
            7,
            |e| matches!(e, Error::Protocol(m) if m.contains("unknown request")),
        ),
    ];
    for (flags, id, expected) in bad {
        let mut after = Vec::new();
        // A good notice first: it is delivered, then the bad frame closes the connection.
        Message::Notice {
            body: Bytes::from_static(b"good"),
        }
        .encode(&mut after);
        frame::encode_frame(Kind::NOTICE, flags, RequestId(id), b"bad", &mut after);
        let (addr, fake) = fake_server(after);
        let c = Client::connect(&addr, &without_login()).unwrap();
        assert_eq!(c.next_notice(PATIENCE).unwrap(), Some(Bytes::from_static(b"good")));
        let err = c.next_notice(PATIENCE).unwrap_err();
        assert!(expected(&err), "{flags:?} id {id}: {err:?}");
        c.check_invariants();
        drop(c);
        fake.join().unwrap();
    }
}

#[test]
fn a_protocol_error_closes_the_socket_while_the_client_is_still_held() {
    let mut after = Vec::new();
    frame::encode_frame(Kind::NOTICE, Flags::REPLY, RequestId(9), b"bad", &mut after);
    let (addr, fake) = fake_server(after);
    let c = Client::connect(&addr, &without_login()).unwrap();
    let err = c.next_notice(PATIENCE).unwrap_err();
    assert!(matches!(err, Error::Protocol(_)), "{err:?}");
    // The fake server returns when it reads the end of the stream: the
    // client must not wait to be dropped to close it (a real server would
    // hold the session's locks until then).
    eventually("the server seeing the connection closed", || fake.is_finished());
    assert!(c.ping().is_err(), "the connection stays failed");
    drop(c);
    fake.join().unwrap();
}

/// Not a correctness test: prints what a thread parked in `next_notice` costs a stream of
/// synchronous calls (it should be nothing measurable). Run with
/// `cargo test -p cairn-net --release --test notices -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement, not a check"]
fn calls_cost_the_same_with_a_thread_in_next_notice() {
    for transport in both() {
        let server = Server::start(transport, Limits::default());
        let c = server.connect();
        let time_calls = || {
            let start = Instant::now();
            for _ in 0..20_000 {
                c.ping().unwrap();
            }
            start.elapsed().as_secs_f64() * 1e6 / 20_000.0
        };
        time_calls();
        let alone: Vec<f64> = (0..3).map(|_| time_calls()).collect();
        let parked: Vec<f64> = std::thread::scope(|s| {
            let stop = std::sync::Arc::new(AtomicBool::new(false));
            let taker = {
                let (c, stop) = (c.clone(), stop.clone());
                s.spawn(move || {
                    while !stop.load(Ordering::SeqCst) {
                        assert_eq!(c.next_notice(Duration::from_millis(100)).unwrap(), None);
                    }
                })
            };
            let t: Vec<f64> = (0..3).map(|_| time_calls()).collect();
            stop.store(true, Ordering::SeqCst);
            taker.join().unwrap();
            t
        });
        println!("{transport:?}: µs per call alone {alone:.1?}, with a thread in next_notice {parked:.1?}");
    }
}

/// The options of a client that does not log in (the fake servers here do not run SCRAM).
fn without_login() -> cairn_net::rpc::ClientOptions {
    cairn_net::rpc::ClientOptions {
        login: None,
        ..common::options()
    }
}
