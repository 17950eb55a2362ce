//! What cairn-storage's integration tests share.
#![allow(dead_code)]

use cairn_storage::DbOptions;

/// The default options without the background checkpointer: a test
/// decides when to checkpoint.
pub fn opts() -> DbOptions {
    DbOptions {
        background: false,
        ..DbOptions::default()
    }
}
