//! libFuzzer entry point of the `frame` target; the body is `targets/frame.rs`,
//! which `cargo test` also runs over `corpus/frame/` on stable.
#![no_main]

#[path = "../targets/frame.rs"]
mod target;

libfuzzer_sys::fuzz_target!(|data: &[u8]| target::run(data));
