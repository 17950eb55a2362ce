//! The systems under test, one [`System`]
//! implementation each. The Cairn systems are one implementation,
//! [`cairn_typed::Cairn`], over four deployments (in this process; a
//! page-, file- or object-server client of `cairn serve`).

/// A [`cairn_typed::Deployment`] that is a newtype over another one
/// (`self.0`) with another client option: the same files, build and
/// cold start, under its own name.
macro_rules! delegating_deployment {
    ($ty:ident, $inner:ty, $name:literal) => {
        impl Deployment for $ty {
            const NAME: &'static str = $name;
            const BUILD_TXN_PARTS: usize = <$inner as Deployment>::BUILD_TXN_PARTS;

            fn create(&mut self) -> Result<Database> {
                self.0.create()
            }

            fn close(&mut self, db: Database) -> Result<()> {
                self.0.close(db)
            }

            fn open_cold(&mut self) -> Result<Database> {
                self.0.open_cold()
            }

            fn size_on_disk_bytes(&self) -> Option<u64> {
                self.0.size_on_disk_bytes()
            }
        }
    };
}

pub mod cairn_embedded;
pub mod cairn_page;
pub mod cairn_typed;
pub mod lmdb;
pub mod memory;
pub mod sqlite;

use std::path::{Path, PathBuf};

use super::system::{Error, Result, System};

/// Every system's name, in report order.
pub const ALL: [&str; 14] = [
    "cairn-embedded",
    "cairn-embedded-pagelocks",
    "cairn-embedded-keyranges",
    "cairn-page",
    "cairn-file",
    "cairn-object",
    "cairn-adaptive",
    "cairn-page-keyranges",
    "cairn-file-keyranges",
    "cairn-object-keyranges",
    "cairn-adaptive-keyranges",
    "in-memory",
    "sqlite",
    "lmdb",
];

/// Where the system called `name` keeps its database under `scratch`
/// (`--clients` opens the Cairn systems' databases there again after the
/// normal run).
pub fn database_dir(name: &str, scratch: &Path) -> PathBuf {
    match name {
        "cairn-embedded" => scratch.join("cairn"),
        "cairn-embedded-pagelocks" => scratch.join("cairn-pagelocks"),
        "cairn-embedded-keyranges" => scratch.join("cairn-keyranges"),
        other => scratch.join(other),
    }
}

/// The system called `name`, keeping its files under `scratch`. `cairn_exe`
/// is the `cairn` binary a server system starts as `cairn serve`.
pub fn by_name(name: &str, scratch: &Path, cairn_exe: Option<&Path>) -> Result<Box<dyn System>> {
    match name {
        "cairn-embedded" => Ok(Box::new(cairn_typed::Cairn::new(cairn_embedded::Embedded::new(
            database_dir(name, scratch),
        )))),
        "cairn-page"
        | "cairn-file"
        | "cairn-object"
        | "cairn-adaptive"
        | "cairn-page-keyranges"
        | "cairn-file-keyranges"
        | "cairn-object-keyranges"
        | "cairn-adaptive-keyranges" => {
            let exe = cairn_exe.ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "{name} starts `cairn serve` in a separate process: name the `cairn` binary \
                     (Oo1Config::cairn_exe; `cairn bench oo1` names itself)"
                ))
            })?;
            let (dir, exe) = (database_dir(name, scratch), exe.to_path_buf());
            Ok(match name {
                "cairn-page" => Box::new(cairn_typed::Cairn::new(cairn_page::PageServer::new(dir, exe))),
                "cairn-file" => Box::new(cairn_typed::Cairn::new(cairn_page::FileServer::new(dir, exe))),
                "cairn-adaptive" => Box::new(cairn_typed::Cairn::new(cairn_page::AdaptiveClient::new(dir, exe))),
                "cairn-page-keyranges" => Box::new(cairn_typed::Cairn::new(cairn_page::PageKeyRanges::new(dir, exe))),
                "cairn-file-keyranges" => Box::new(cairn_typed::Cairn::new(cairn_page::FileKeyRanges::new(dir, exe))),
                "cairn-object-keyranges" => {
                    Box::new(cairn_typed::Cairn::new(cairn_page::ObjectKeyRanges::new(dir, exe)))
                }
                "cairn-adaptive-keyranges" => {
                    Box::new(cairn_typed::Cairn::new(cairn_page::AdaptiveKeyRanges::new(dir, exe)))
                }
                _ => Box::new(cairn_typed::Cairn::new(cairn_page::ObjectServer::new(dir, exe))),
            })
        }
        "cairn-embedded-pagelocks" => Ok(Box::new(cairn_typed::Cairn::new(
            cairn_embedded::EmbeddedPageLocks::new(database_dir(name, scratch)),
        ))),
        "cairn-embedded-keyranges" => Ok(Box::new(cairn_typed::Cairn::new(
            cairn_embedded::EmbeddedKeyRanges::new(database_dir(name, scratch)),
        ))),
        "in-memory" => Ok(Box::new(memory::InMemory::new())),
        "sqlite" => Ok(Box::new(sqlite::Sqlite::new(database_dir(name, scratch)))),
        "lmdb" => Ok(Box::new(lmdb::Lmdb::new(database_dir(name, scratch)))),
        other => Err(Error::InvalidArgument(format!(
            "unknown system {other:?}; the systems are {}",
            ALL.join(", ")
        ))),
    }
}
