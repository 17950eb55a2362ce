//! `cairn-embedded`: OO1 on Cairn's typed API in the same process — the
//! model and operations of [`super::cairn_typed`] over a database opened
//! with [`Database::open_with`].
//!
//! **Cold**: the `Database` is closed, its files are evicted from the OS
//! page cache, and a fresh `Database` is opened (empty object cache and
//! buffer pool).

use std::path::PathBuf;

use cairn::Database;

use super::cairn_typed::{options, Cairn, Deployment};
use crate::oo1::system::{dir_size_bytes, evict_os_cache, Result};

/// Cairn embedded.
pub type CairnEmbedded = Cairn<Embedded>;

/// A database in a directory, opened in this process.
pub struct Embedded {
    dir: PathBuf,
    object_locking: bool,
    key_range_locking: bool,
}

impl Embedded {
    /// The database in `dir` (created by `build`).
    pub fn new(dir: PathBuf) -> Embedded {
        Embedded {
            dir,
            object_locking: true,
            key_range_locking: false,
        }
    }

    fn options(&self) -> cairn::Options {
        let mut o = options();
        o.storage.object_locking = self.object_locking;
        o.storage.key_range_locking = self.key_range_locking;
        o
    }
}

/// `cairn-embedded-pagelocks`: the same, its transactions locking pages
/// instead of single objects (`DbOptions::object_locking` off; the typed
/// API locks objects by default): what object-level
/// locking costs or saves a single process.
pub struct EmbeddedPageLocks(Embedded);

impl EmbeddedPageLocks {
    /// The database in `dir` (created by `build`).
    pub fn new(dir: PathBuf) -> EmbeddedPageLocks {
        EmbeddedPageLocks(Embedded {
            dir,
            object_locking: false,
            key_range_locking: false,
        })
    }
}

delegating_deployment!(EmbeddedPageLocks, Embedded, "cairn-embedded-pagelocks");

/// `cairn-embedded-keyranges`: the same, locking objects and its index
/// operations locking keys and key ranges instead of index pages
/// (`DbOptions::key_range_locking`): what key-range locking costs one
/// process and saves many threads.
pub struct EmbeddedKeyRanges(Embedded);

impl EmbeddedKeyRanges {
    /// The database in `dir` (created by `build`).
    pub fn new(dir: PathBuf) -> EmbeddedKeyRanges {
        EmbeddedKeyRanges(Embedded {
            dir,
            object_locking: true,
            key_range_locking: true,
        })
    }
}

delegating_deployment!(EmbeddedKeyRanges, Embedded, "cairn-embedded-keyranges");

impl Deployment for Embedded {
    const NAME: &'static str = "cairn-embedded";
    /// The whole build in one transaction.
    const BUILD_TXN_PARTS: usize = usize::MAX;

    fn create(&mut self) -> Result<Database> {
        let _ = std::fs::remove_dir_all(&self.dir);
        Ok(Database::open_with(&self.dir, self.options())?)
    }

    fn close(&mut self, db: Database) -> Result<()> {
        Ok(db.close()?)
    }

    fn open_cold(&mut self) -> Result<Database> {
        evict_os_cache(&self.dir)?;
        Ok(Database::open_with(&self.dir, self.options())?)
    }

    fn size_on_disk_bytes(&self) -> Option<u64> {
        Some(dir_size_bytes(&self.dir))
    }
}
