//! libFuzzer entry point of the `large_object_pages` target; the body is `targets/large_object_pages.rs`,
//! which `cargo test` also runs over `corpus/large_object_pages/` on stable.
#![no_main]

#[path = "../targets/large_object_pages.rs"]
mod target;

libfuzzer_sys::fuzz_target!(|data: &[u8]| target::run(data));
