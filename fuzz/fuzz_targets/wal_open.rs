//! libFuzzer entry point of the `wal_open` target; the body is `targets/wal_open.rs`,
//! which `cargo test` also runs over `corpus/wal_open/` on stable.
#![no_main]

#[path = "../targets/wal_open.rs"]
mod target;

libfuzzer_sys::fuzz_target!(|data: &[u8]| target::run(data));
