//! The systems under test, one [`System`]
//! implementation each. The two Cairn systems are one implementation,
//! [`cairn_typed::Cairn`], over two deployments (in this process; behind
//! `cairn serve`).

pub mod cairn_embedded;
pub mod cairn_page;
pub mod cairn_typed;
pub mod lmdb;
pub mod memory;
pub mod sqlite;

use std::path::Path;

use super::system::{Error, Result, System};

/// Every system's name, in report order.
pub const ALL: [&str; 5] = ["cairn-embedded", "cairn-page", "in-memory", "sqlite", "lmdb"];

/// The system called `name`, keeping its files under `scratch`. `cairn_exe`
/// is the `cairn` binary a server system starts as `cairn serve`.
pub fn by_name(name: &str, scratch: &Path, cairn_exe: Option<&Path>) -> Result<Box<dyn System>> {
    match name {
        "cairn-embedded" => Ok(Box::new(cairn_typed::Cairn::new(cairn_embedded::Embedded::new(
            scratch.join("cairn"),
        )))),
        "cairn-page" => {
            let exe = cairn_exe.ok_or_else(|| {
                Error::InvalidArgument(
                    "cairn-page starts `cairn serve` in a separate process: name the `cairn` binary \
                     (Oo1Config::cairn_exe; `cairn bench oo1` names itself)"
                        .into(),
                )
            })?;
            Ok(Box::new(cairn_typed::Cairn::new(cairn_page::PageServer::new(
                scratch.join("cairn-page"),
                exe.to_path_buf(),
            ))))
        }
        "in-memory" => Ok(Box::new(memory::InMemory::new())),
        "sqlite" => Ok(Box::new(sqlite::Sqlite::new(scratch.join("sqlite")))),
        "lmdb" => Ok(Box::new(lmdb::Lmdb::new(scratch.join("lmdb")))),
        other => Err(Error::InvalidArgument(format!(
            "unknown system {other:?}; the systems are {}",
            ALL.join(", ")
        ))),
    }
}
