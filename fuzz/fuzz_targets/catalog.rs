//! libFuzzer entry point of the `catalog` target; the body is `targets/catalog.rs`,
//! which `cargo test` also runs over `corpus/catalog/` on stable.
#![no_main]

#[path = "../targets/catalog.rs"]
mod target;

libfuzzer_sys::fuzz_target!(|data: &[u8]| target::run(data));
