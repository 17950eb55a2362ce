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
//!
//! # The API boundary
//!
//! Every module is in one of three classes. `crates/cairn-cli/tests/layering.rs`
//! reads the other crates' sources and fails when one names a module outside
//! its class, so this list and that test change together.
//!
//! - **API** — what the upper layers (`cairn`, `cairn-server`) program
//!   against: the root re-exports ([`Db`], [`DbOptions`], [`VolumeOptions`],
//!   [`Txn`], [`Error`], [`Result`] and the ids: [`PageId`], [`Oid`], …);
//!   [`txn`] (the engine, and [`txn::Backend`], the seam the client's engine
//!   plugs into); [`access`] ([`access::PageAccess`], [`access::PageDevice`]);
//!   [`page`] (the page header and [`page::PageType`]); [`record::object`];
//!   [`btree`]; [`lock`] (the modes and resources callback locking names);
//!   [`wal::redo`] (the redo records a client ships to the server); [`buffer`]
//!   and [`io`] (the client builds its page cache from them); [`check`] (the
//!   verifier); [`fxhash`].
//! - **Tool interface** — formats and machinery below the API, public only for
//!   the CLI's inspect, verify and torture tools, the benchmarks, the fuzz
//!   targets and the crash and damage tests: [`volume`] (directory, manifest,
//!   header page, space map, groups — but [`VolumeOptions`] is API and named
//!   from the root); [`wal`] apart from [`wal::redo`] (segments, record
//!   framing, [`wal::Wal`]); [`record::slotted`] and [`record::large`] (page
//!   formats); [`recovery`]; and `sim`, the simulated disk (cargo feature
//!   `sim`). Each says so in its module docs. The tool modules stay at their
//!   own paths rather than behind a `tools` module, so that an item has one
//!   name and a tool names the path the code's docs use; the layering test,
//!   not the compiler, keeps `cairn` and `cairn-server` off them.
//! - **Private** (so the compiler enforces it): `bytes` (the workspace's
//!   byte codec, the `cairn-codec` crate, under its old name here), `error` and `ids` (`pub(crate)`; their items are
//!   re-exported at the root), and inside public modules `volume::view` and
//!   `sim::disk` (private `mod`s; their items are re-exported by their
//!   parents).
//!
//! The boundary is on the paths other crates write: an API method may return
//! a tool type that its caller uses without naming it ([`Db::header`] returns
//! the volume's header page, [`Db::recovery`] the recovery report).

pub mod access;
pub mod btree;
pub mod buffer;
/// The byte codec, under the name the storage code has always used.
pub(crate) use cairn_codec as bytes;
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
pub use txn::{Db, DbOptions, Restriction, Salvaged, Txn, Unwritten};
/// The file whose presence makes a directory a Cairn database (the server keeps its users
/// beside it).
pub use volume::manifest::MANIFEST_FILE;
pub use volume::VolumeOptions;
