//! Cairn's storage manager.
//!
//! Layers, bottom up (each module's docs state its invariants):
//! - [`io`]: the file seam ([`io::Vfs`]); fault injection for tests.
//! - [`page`]: the common page header, checksums, page types.
//! - [`volume`]: the database directory — manifest, volume file, header page,
//!   space map and extent allocation, object groups.
//! - [`buffer`]: the buffer pool (frames, pins, dirty pages, LRU / CLOCK).
//! - [`access`]: the seams [`access::PageDevice`] (pool ↔ volume) and
//!   [`access::PageAccess`] (record layer ↔ pages; the one narrow change path).
//! - [`record`]: slotted pages, physical OIDs with forwarding, large objects.
//! - [`record::object`]: objects with physical OIDs over any page access.
//! - [`lock`]: the lock manager; [`wal`]: the write-ahead log.
//! - [`txn`]: the engine ([`txn::Db`]) and transactions ([`txn::Txn`]);
//!   [`recovery`]: redo at open; [`check`]: the verifier.
//!
//! **Architecture invariant:** this crate uses no async runtime and depends on
//! no other Cairn crate.

pub mod access;
pub mod btree;
pub mod buffer;
pub(crate) mod bytes;
pub mod check;
pub(crate) mod error;
pub mod fxhash;
pub(crate) mod ids;
pub mod io;
pub mod lock;
pub mod page;
pub mod record;
pub mod recovery;
#[cfg(any(test, feature = "sim"))]
pub mod sim;
pub mod txn;
pub mod volume;
pub mod wal;

pub use error::{Error, Result};
pub use ids::{ClientId, GroupId, Lsn, Oid, PageId, SlotIdx, TxnId, Uniq};
pub use txn::{Db, DbOptions, Txn};
