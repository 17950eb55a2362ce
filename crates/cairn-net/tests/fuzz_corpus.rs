//! The `frame` fuzz target's corpus, replayed on stable (see `fuzz/replay.rs`).

#[path = "../../../fuzz/replay.rs"]
#[expect(
    dead_code,
    reason = "the frame corpus is committed bytes: no seeds are written from here"
)]
mod replay;

#[path = "../../../fuzz/targets/frame.rs"]
mod frame;

#[test]
fn frame_corpus_replays_without_panics() {
    replay::replay("frame", frame::run);
}
