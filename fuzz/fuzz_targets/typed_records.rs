//! libFuzzer entry point of the `typed_records` target; the body is `targets/typed_records.rs`,
//! which `cargo test` also runs over `corpus/typed_records/` on stable.
#![no_main]

#[path = "../targets/typed_records.rs"]
mod target;

libfuzzer_sys::fuzz_target!(|data: &[u8]| target::run(data));
