//! Partial replies (PRIMA's Reply_Part_Of_Task): parts arrive in order and complete, streams
//! interleave on one connection, a slow reader holds the server's reply budget in check.

mod common;

use bytes::Bytes;
use cairn_net::rpc::Limits;
use common::{both, Server, ECHO, STREAM};

fn n(n: u32) -> Bytes {
    Bytes::copy_from_slice(&n.to_le_bytes())
}

fn index(part: &Bytes) -> u32 {
    u32::from_le_bytes(part[..].try_into().unwrap())
}

#[test]
fn parts_arrive_in_order_and_complete() {
    for transport in both() {
        let server = Server::start(transport, Limits::default());
        let c = server.connect();
        let mut call = c.invoke(STREAM, n(1000)).unwrap();
        for i in 0..1000 {
            let part = call.next_part().unwrap().unwrap();
            assert!(!part.last);
            assert_eq!(index(&part.body), i);
        }
        let last = call.next_part().unwrap().unwrap();
        assert!(last.last);
        assert_eq!(last.body, Bytes::from_static(b"end"));
        assert!(call.next_part().unwrap().is_none());
        // A stream of no parts is just the final reply.
        assert_eq!(
            c.invoke(STREAM, n(0)).unwrap().collect().unwrap(),
            vec![Bytes::from_static(b"end")]
        );
    }
}

#[test]
fn interleaved_streams_on_one_connection() {
    let server = Server::start(common::Transport::Unix, Limits::default());
    let c = server.connect();
    let calls: Vec<_> = (0..20u32).map(|k| c.invoke(STREAM, n(50 + k)).unwrap()).collect();
    let echo = c.invoke(ECHO, n(7)).unwrap();
    for (k, call) in calls.into_iter().enumerate().rev() {
        let parts = call.collect().unwrap();
        assert_eq!(parts.len(), 50 + k + 1);
        for (i, p) in parts[..parts.len() - 1].iter().enumerate() {
            assert_eq!(index(p) as usize, i);
        }
    }
    assert_eq!(echo.wait().unwrap(), n(7));
    assert_eq!(c.pending(), 0);
}

#[test]
fn slow_reader_with_a_small_reply_budget_gets_everything() {
    // The server may queue only a few KiB of replies for this connection, so the streaming handler
    // waits for the client to read; nothing is lost.
    let limits = Limits {
        body_max: 1024,
        reply_bytes_max: 4096,
        ..Limits::default()
    };
    let server = Server::start(common::Transport::Tcp, limits);
    let c = server.connect();
    let streams: Vec<_> = (0..4).map(|_| c.invoke(STREAM, n(5000)).unwrap()).collect();
    for call in streams {
        let parts = call.collect().unwrap();
        assert_eq!(parts.len(), 5001);
        assert!(parts[..5000].iter().enumerate().all(|(i, p)| index(p) as usize == i));
    }
}

#[test]
fn wait_on_a_stream_returns_the_final_reply() {
    let server = Server::start(common::Transport::Tcp, Limits::default());
    let c = server.connect();
    assert_eq!(c.call(STREAM, n(100)).unwrap(), Bytes::from_static(b"end"));
    let mut call = c.invoke(STREAM, n(3)).unwrap();
    assert_eq!(index(&call.next_part().unwrap().unwrap().body), 0);
    drop(call);
    c.ping().unwrap();
}
