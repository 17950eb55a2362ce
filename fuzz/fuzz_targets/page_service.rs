//! libFuzzer entry point of the `page_service` target; the body is
//! `targets/page_service.rs`, which `cargo test` also runs over
//! `corpus/page_service/` on stable.
#![no_main]

#[path = "../targets/page_service.rs"]
mod target;

libfuzzer_sys::fuzz_target!(|data: &[u8]| target::run(data));
