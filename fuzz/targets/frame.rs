//! The frame and message decoders on arbitrary bytes, fed in arbitrary pieces: the header
//! decoder, the incremental frame decoder (with a small and a large body limit) and every
//! message body decoder. None may panic, and the decoder's buffer never grows past what it was
//! given plus one read chunk, whatever the length fields claim.

use cairn_net::frame::{FrameDecoder, FrameHeader, HEADER_SIZE, READ_CHUNK};
use cairn_net::message::{Fault, Hello, Message, Welcome};

/// Runs the target on one input; panics only on a bug.
pub fn run(data: &[u8]) {
    if data.len() >= HEADER_SIZE {
        let _ = FrameHeader::decode(data[..HEADER_SIZE].try_into().unwrap());
    }
    let _ = Hello::decode(data);
    let _ = Welcome::decode(data);
    let _ = Fault::decode(data);
    // The first byte picks the piece size, so splits are explored too.
    let (piece, rest) = match data.split_first() {
        Some((p, rest)) => (usize::from(*p % 64) + 1, rest),
        None => return,
    };
    for body_max in [64u32, 16 << 20] {
        let mut dec = FrameDecoder::new(body_max);
        'feed: for chunk in rest.chunks(piece) {
            dec.read_hint();
            dec.push(chunk);
            loop {
                match dec.decode() {
                    Ok(Some(frame)) => {
                        let _ = Message::from_frame(frame);
                    }
                    Ok(None) => break,
                    Err(_) => break 'feed,
                }
            }
            dec.check_invariants();
            assert!(dec.buffer_mut().capacity() <= 2 * (rest.len() + READ_CHUNK + HEADER_SIZE));
        }
        let _ = dec.finish();
    }
}
