//! libFuzzer entry point of the `page_decoders` target; the body is `targets/page_decoders.rs`,
//! which `cargo test` also runs over `corpus/page_decoders/` on stable.
#![no_main]

#[path = "../targets/page_decoders.rs"]
mod target;

libfuzzer_sys::fuzz_target!(|data: &[u8]| target::run(data));
