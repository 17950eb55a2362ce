//! libFuzzer entry point of the `catalog_change` target; the body is
//! `targets/catalog_change.rs`, which `cargo test` also runs over
//! `corpus/catalog_change/` on stable.
#![no_main]

#[path = "../targets/catalog_change.rs"]
mod target;

libfuzzer_sys::fuzz_target!(|data: &[u8]| target::run(data));
