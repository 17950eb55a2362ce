//! The systems under test, one [`System`]
//! implementation each.

pub mod cairn_embedded;
pub mod memory;
pub mod sqlite;

use std::path::Path;

use super::system::{Error, Result, System};

/// Every system's name, in report order.
pub const ALL: [&str; 3] = ["cairn-embedded", "in-memory", "sqlite"];

/// The system called `name`, keeping its files under `scratch`.
pub fn by_name(name: &str, scratch: &Path) -> Result<Box<dyn System>> {
    match name {
        "cairn-embedded" => Ok(Box::new(cairn_embedded::CairnEmbedded::new(scratch.join("cairn")))),
        "in-memory" => Ok(Box::new(memory::InMemory::new())),
        "sqlite" => Ok(Box::new(sqlite::Sqlite::new(scratch.join("sqlite")))),
        other => Err(Error::InvalidArgument(format!(
            "unknown system {other:?}; the systems are {}",
            ALL.join(", ")
        ))),
    }
}
