//! Fuzz target body `methods`: the decoders of server-side methods and
//! their answers (`cairn::methods`) on arbitrary bytes — what an object
//! server decodes from any client. The first byte picks the decoder.
//! Decoding must return a value or an error, never panic; what decodes
//! encodes back to the same bytes.

/// Runs one input.
pub fn run(data: &[u8]) {
    let Some((&which, body)) = data.split_first() else {
        return;
    };
    if which % 2 == 0 {
        cairn::fuzzing::method_round_trip(body);
    } else {
        cairn::fuzzing::answer_round_trip(body);
    }
}
