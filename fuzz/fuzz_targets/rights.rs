//! libFuzzer entry point of the `rights` target; the body is
//! `targets/rights.rs`, which `cargo test` also runs over
//! `corpus/rights/` on stable.
#![no_main]

#[path = "../targets/rights.rs"]
mod target;

libfuzzer_sys::fuzz_target!(|data: &[u8]| target::run(data));
