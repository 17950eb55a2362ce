//! Framing under random splits and coalescing: a model test of the decoder (any split of any
//! sequence of messages decodes to the same messages), and the same over a real socket.

mod common;

use bytes::Bytes;
use cairn_net::frame::{FrameDecoder, RequestId};
use cairn_net::message::{Architecture, ErrorCode, Fault, Hello, Message};
use cairn_net::rpc::Limits;
use cairn_net::Kind;
use proptest::prelude::*;

fn message() -> impl Strategy<Value = Message> {
    let body = proptest::collection::vec(any::<u8>(), 0..300).prop_map(Bytes::from);
    let kind = (0x0100u16..=0xFFFF).prop_map(Kind);
    let id = (1u64..u64::MAX).prop_map(RequestId);
    let fault = (
        any::<u16>(),
        "[a-z ]{0,40}",
        proptest::collection::vec(any::<u8>(), 0..20),
    )
        .prop_map(|(code, message, detail)| Fault {
            code: ErrorCode(code),
            message,
            detail: detail.into(),
        });
    prop_oneof![
        (kind.clone(), id.clone(), body.clone()).prop_map(|(kind, id, body)| Message::Request { kind, id, body }),
        (kind.clone(), id.clone(), body.clone()).prop_map(|(kind, id, body)| Message::ReplyPart { kind, id, body }),
        (kind.clone(), id.clone(), body.clone()).prop_map(|(kind, id, body)| Message::Reply { kind, id, body }),
        (kind, id.clone(), fault.clone()).prop_map(|(kind, id, fault)| Message::ErrorReply { kind, id, fault }),
        (id, fault.clone()).prop_map(|(request_id, fault)| Message::Goodbye { request_id, fault }),
        fault.prop_map(Message::Refusal),
        (
            any::<u16>(),
            proptest::collection::vec(any::<u8>(), 0..40),
            "[a-z]{0,20}"
        )
            .prop_map(|(a, auth, client_name)| Message::Hello(Hello {
                architecture: Architecture(a),
                auth: auth.into(),
                client_name
            })),
    ]
}

proptest! {
    #[test]
    fn any_split_decodes_to_the_same_messages(
        messages in proptest::collection::vec(message(), 1..20),
        cuts in proptest::collection::vec(1usize..200, 0..50),
    ) {
        let mut bytes = Vec::new();
        for m in &messages {
            m.encode(&mut bytes);
        }
        let mut dec = FrameDecoder::new(1 << 20);
        let mut got = Vec::new();
        let mut rest = &bytes[..];
        let mut cuts = cuts.into_iter();
        while !rest.is_empty() {
            let n = cuts.next().unwrap_or(rest.len()).min(rest.len());
            dec.push(&rest[..n]);
            rest = &rest[n..];
            while let Some(frame) = dec.decode().unwrap() {
                got.push(Message::from_frame(frame).unwrap());
            }
            dec.check_invariants();
        }
        dec.finish().unwrap();
        prop_assert_eq!(got, messages);
    }

    #[test]
    fn corruption_never_panics(messages in proptest::collection::vec(message(), 1..5), at in any::<usize>(), bit in 0u8..8) {
        let mut bytes = Vec::new();
        for m in &messages {
            m.encode(&mut bytes);
        }
        let at = at % bytes.len();
        bytes[at] ^= 1 << bit;
        let mut dec = FrameDecoder::new(1 << 20);
        dec.push(&bytes);
        let mut decoded = 0;
        while let Ok(Some(frame)) = dec.decode() {
            decoded += 1;
            let _ = Message::from_frame(frame);
        }
        // One flipped bit is always caught: the frame holding it never decodes.
        prop_assert!(decoded < messages.len());
    }
}

#[test]
fn requests_written_in_random_pieces_over_a_real_socket() {
    for transport in common::both() {
        let server = common::Server::start(transport, Limits::default());
        let mut raw = common::Raw::connect(&server.addr);
        raw.handshake();
        let mut stream = Vec::new();
        for id in 1..=300u64 {
            let body = vec![id as u8; (id as usize * 13) % 700];
            stream.extend_from_slice(&common::request_frame(common::ECHO, id, &body));
        }
        // A fixed-seed LCG picks the piece sizes, so a failure replays.
        let mut seed = 12345u64;
        let mut rest = &stream[..];
        while !rest.is_empty() {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let n = ((seed >> 33) as usize % 97 + 1).min(rest.len());
            raw.send(&rest[..n]);
            rest = &rest[n..];
        }
        let mut seen = std::collections::BTreeSet::new();
        while seen.len() < 300 {
            match raw.next_message() {
                Some(Message::Reply { kind, id, body }) => {
                    assert_eq!(kind, common::ECHO);
                    assert_eq!(body, Bytes::from(vec![id.0 as u8; (id.0 as usize * 13) % 700]));
                    assert!(seen.insert(id.0));
                }
                other => panic!("{other:?}"),
            }
        }
    }
}
