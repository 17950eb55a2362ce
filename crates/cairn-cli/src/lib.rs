//! The library half of the `cairn` tool: the torture writer, its record and
//! digest format, and the verifier, here so that integration tests can build
//! and damage records exactly as the tools do. The binary (`main.rs`) only
//! parses arguments and prints.

pub mod format;
pub mod serve;
pub mod torture;
pub mod verify;
