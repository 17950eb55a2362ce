//! Many clients × many requests in flight over real sockets: every reply matched to its request,
//! out-of-order replies, one client shared by threads.

mod common;

use std::collections::VecDeque;

use bytes::Bytes;
use cairn_net::rpc::Limits;
use common::{both, Server, ECHO, HOLD, RELEASE};

fn body(client: u32, seq: u32) -> Bytes {
    let mut b = Vec::new();
    b.extend_from_slice(&client.to_le_bytes());
    b.extend_from_slice(&seq.to_le_bytes());
    // Vary the size so frames straddle read boundaries.
    b.resize(8 + (seq as usize * 37) % 3000, (seq % 251) as u8);
    Bytes::from(b)
}

#[test]
fn many_clients_many_in_flight_every_reply_matched() {
    for transport in both() {
        let server = Server::start(transport, Limits::default());
        let threads: Vec<_> = (0..4u32)
            .map(|c| {
                let client = server.connect();
                std::thread::spawn(move || {
                    let mut in_flight = VecDeque::new();
                    for seq in 0..2000u32 {
                        in_flight.push_back((seq, client.invoke(ECHO, body(c, seq)).unwrap()));
                        if in_flight.len() == 64 {
                            let (s, call) = in_flight.pop_front().unwrap();
                            assert_eq!(call.wait().unwrap(), body(c, s));
                        }
                    }
                    for (s, call) in in_flight {
                        assert_eq!(call.wait().unwrap(), body(c, s));
                    }
                    client.check_invariants();
                    assert_eq!(client.pending(), 0);
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    }
}

#[test]
fn replies_come_out_of_order() {
    for transport in both() {
        let server = Server::start(transport, Limits::default());
        let c = server.connect();
        let held = c.invoke(HOLD, Bytes::from_static(b"held")).unwrap();
        // Later requests complete while the first is still running.
        for i in 0..10u32 {
            let b = Bytes::copy_from_slice(&i.to_le_bytes());
            assert_eq!(c.call(ECHO, b.clone()).unwrap(), b);
        }
        assert_eq!(c.pending(), 1);
        c.call(RELEASE, Bytes::new()).unwrap();
        assert_eq!(held.wait().unwrap(), Bytes::from_static(b"held"));
    }
}

#[test]
fn one_client_shared_by_threads() {
    for transport in both() {
        let server = Server::start(transport, Limits::default());
        let c = server.connect();
        std::thread::scope(|s| {
            for t in 0..4u32 {
                let c = c.clone();
                s.spawn(move || {
                    for seq in 0..500u32 {
                        if seq % 3 == 0 {
                            let calls: Vec<_> =
                                (0..8).map(|k| (k, c.invoke(ECHO, body(t, seq + k)).unwrap())).collect();
                            for (k, call) in calls.into_iter().rev() {
                                assert_eq!(call.wait().unwrap(), body(t, seq + k));
                            }
                        } else {
                            assert_eq!(c.call(ECHO, body(t, seq)).unwrap(), body(t, seq));
                        }
                    }
                });
            }
        });
        c.check_invariants();
        assert_eq!(c.pending(), 0);
    }
}

#[test]
fn dropped_calls_are_discarded_and_the_connection_stays_usable() {
    let server = Server::start(common::Transport::Tcp, Limits::default());
    let c = server.connect();
    for i in 0..100u32 {
        drop(c.invoke(ECHO, body(0, i)).unwrap());
    }
    assert_eq!(c.call(ECHO, body(1, 1)).unwrap(), body(1, 1));
    c.check_invariants();
    // Requests run concurrently, so some abandoned replies may still be on their way; each one
    // that arrives removes its slot.
    for _ in 0..10_000 {
        if c.pending() == 0 {
            break;
        }
        c.ping().unwrap();
    }
    assert_eq!(c.pending(), 0);
}

#[test]
fn deferred_requests_leave_before_a_wait_blocks() {
    for transport in both() {
        let server = Server::start(transport, Limits::default());
        let c = server.connect();
        let calls: Vec<_> = (0..100u32)
            .map(|i| (i, c.invoke_deferred(ECHO, body(9, i)).unwrap()))
            .collect();
        // Nothing was written yet; the first wait flushes them all.
        for (i, call) in calls.into_iter().rev() {
            assert_eq!(call.wait().unwrap(), body(9, i));
        }
        let late = c.invoke_deferred(ECHO, body(9, 1000)).unwrap();
        c.flush().unwrap();
        assert_eq!(late.wait().unwrap(), body(9, 1000));
    }
}

#[test]
fn sending_much_and_reading_nothing_does_not_deadlock() {
    // The server runs few requests at once and queues few reply bytes, so it soon stops reading;
    // the client's socket fills; its stalled writes must take replies off the socket themselves.
    let limits = Limits {
        in_flight_max: 2,
        body_max: 64 << 10,
        reply_bytes_max: 64 << 10,
        request_bytes_max: 64 << 10,
        ..Limits::default()
    };
    for transport in both() {
        let server = Server::start(transport, limits.clone());
        let c = server.connect();
        let big = Bytes::from(vec![7u8; 16 << 10]);
        let calls: Vec<_> = (0..400).map(|_| c.invoke(ECHO, big.clone()).unwrap()).collect();
        for call in calls {
            assert_eq!(call.wait().unwrap(), big);
        }
    }
}
