//! libFuzzer entry point of the `btree_nodes` target; the body is `targets/btree_nodes.rs`,
//! which `cargo test` also runs over `corpus/btree_nodes/` on stable.
#![no_main]

#[path = "../targets/btree_nodes.rs"]
mod target;

libfuzzer_sys::fuzz_target!(|data: &[u8]| target::run(data));
