//! libFuzzer entry point of the `volume_open` target; the body is `targets/volume_open.rs`,
//! which `cargo test` also runs over `corpus/volume_open/` on stable.
#![no_main]

#[path = "../targets/volume_open.rs"]
mod target;

libfuzzer_sys::fuzz_target!(|data: &[u8]| target::run(data));
