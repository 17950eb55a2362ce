//! libFuzzer entry point of the `log_records` target; the body is `targets/log_records.rs`,
//! which `cargo test` also runs over `corpus/log_records/` on stable.
#![no_main]

#[path = "../targets/log_records.rs"]
mod target;

libfuzzer_sys::fuzz_target!(|data: &[u8]| target::run(data));
