//! libFuzzer entry point of the `methods` target; the body is
//! `targets/methods.rs`, which `cargo test` also runs over
//! `corpus/methods/` on stable.
#![no_main]

#[path = "../targets/methods.rs"]
mod target;

libfuzzer_sys::fuzz_target!(|data: &[u8]| target::run(data));
