//! libFuzzer entry point of the `object_service` target; the body is
//! `targets/object_service.rs`, which `cargo test` also runs over
//! `corpus/object_service/` on stable.
#![no_main]

#[path = "../targets/object_service.rs"]
mod target;

libfuzzer_sys::fuzz_target!(|data: &[u8]| target::run(data));
