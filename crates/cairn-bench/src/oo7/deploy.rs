//! Where the OO7 databases live and how they are opened cold.
//!
//! - **Embedded** (the default): one directory per clustering under the
//!   scratch directory. *Cold*: the database is closed, its files are
//!   evicted from the OS page cache (`posix_fadvise(DONTNEED)`, as OO1's
//!   `cairn-embedded` does) and it is opened again: an empty page buffer
//!   and object cache.
//! - **Remote** (`--connect URL`): a page-server client of a running `cairn
//!   serve`. The three clusterings are built into the server's one database,
//!   side by side (their own groups and named roots); each run adds them
//!   anew (about the size of one embedded database per clustering), so
//!   point it at a scratch server. *Cold*: a new client connection, whose
//!   page buffer and object cache are empty; the server, not ours to
//!   restart, keeps its buffer pool and the OS its cache.

use std::path::PathBuf;

use cairn::Database;

use super::build::{Clustering, Stored};
use super::strategy::{options_for, Strategy};
use crate::oo1::system::{dir_size_bytes, evict_os_cache, Error, Result};

/// Page buffer of the database while it is built (not timed).
const BUILD_BUFFER_PAGES: usize = 16_384;

/// Where the databases are.
#[derive(Clone, Debug)]
pub enum Deployment {
    /// In this process, one directory per clustering under `root`.
    Embedded {
        /// The scratch directory.
        root: PathBuf,
    },
    /// Behind `cairn serve` at `url`.
    Remote {
        /// `cairn://HOST:PORT` or `cairn+unix:///PATH`.
        url: String,
    },
}

impl Deployment {
    /// What the report says about it.
    pub fn describe(&self) -> String {
        match self {
            Deployment::Embedded { .. } => {
                "embedded; cold = closed, files evicted from the OS page cache, reopened".into()
            }
            Deployment::Remote { url } => format!(
                "page-server client of {url}; cold = a new client connection (empty client buffer and object \
                 cache; the server's buffer pool and the OS cache stay warm)"
            ),
        }
    }

    /// `"embedded"` or the server's URL.
    pub fn name(&self) -> String {
        match self {
            Deployment::Embedded { .. } => "embedded".into(),
            Deployment::Remote { url } => url.clone(),
        }
    }

    fn dir(root: &std::path::Path, c: Clustering) -> PathBuf {
        root.join(format!("oo7-{}", c.name()))
    }

    /// A new, empty database for clustering `c`, open for the build
    /// (embedded: a fresh directory; remote: a connection to the server).
    pub fn create(&self, c: Clustering) -> Result<Database> {
        let opts = options_for(Strategy::Noc, BUILD_BUFFER_PAGES);
        match self {
            Deployment::Embedded { root } => {
                let dir = Deployment::dir(root, c);
                let _ = std::fs::remove_dir_all(&dir);
                Ok(Database::open_with(&dir, opts)?)
            }
            Deployment::Remote { url } => Ok(Database::connect(url, opts)?),
        }
    }

    /// Opens clustering `c`'s database cold (the previous one closed) for a
    /// run of `strategy` with `buffer_pages` pages of buffer, its page
    /// segment `page_share` of it (`None`: the strategy's default).
    pub fn open_cold(
        &self,
        c: Clustering,
        strategy: Strategy,
        buffer_pages: usize,
        page_share: Option<f64>,
    ) -> Result<Database> {
        let mut opts = options_for(strategy, buffer_pages);
        opts.dual_buffer.page_share = page_share;
        match self {
            Deployment::Embedded { root } => {
                let dir = Deployment::dir(root, c);
                evict_os_cache(&dir)?;
                Ok(Database::open_with(&dir, opts)?)
            }
            Deployment::Remote { url } => Ok(Database::connect(url, opts)?),
        }
    }

    /// Closes `db` durably (embedded: checkpointed; remote: disconnected).
    pub fn close(&self, db: Database) -> Result<()> {
        Ok(db.close()?)
    }

    /// The size of clustering `c`'s database in pages, `db` open after the
    /// build: embedded, the pages its groups use (objects, large objects'
    /// pages, extent lists; not the catalog); remote, where the groups are
    /// not visible, the distinct pages of the objects' records plus one page
    /// per document (a 2,000-byte document is a large object on a page of
    /// its own).
    pub fn database_pages(&self, db: &Database, stored: &Stored) -> Result<u64> {
        match db.storage() {
            Some(s) => {
                let pages: u64 = s
                    .groups()
                    .iter()
                    .filter(|g| stored.clustering.owns_group(&g.name))
                    .map(|g| g.pages_used)
                    .sum();
                if pages == 0 {
                    return Err(Error::Wrong {
                        system: "oo7".into(),
                        reason: format!("no pages in the groups of {}", stored.clustering.label()),
                    });
                }
                Ok(pages)
            }
            None => Ok(stored.home_pages() + stored.documents.len() as u64),
        }
    }

    /// Bytes clustering `c`'s database takes on disk (embedded only).
    pub fn size_on_disk_bytes(&self, c: Clustering) -> Option<u64> {
        match self {
            Deployment::Embedded { root } => Some(dir_size_bytes(&Deployment::dir(root, c))),
            Deployment::Remote { .. } => None,
        }
    }
}
