//! Cairn's schema layer, shared by the typed API (`cairn`) and the server
//! (`cairn-server`), so the server runs the catalog and the methods without
//! the client crate:
//!
//! - [`append`]: an append to a list field as a change that commutes
//!   with others ([`append::ListAppend`]), applied at commit.
//! - [`catalog`]: the schema catalog, named roots and index directory, in
//!   B+-trees named by the meta object of `cairn.system`.
//! - [`catalog_change`]: every change to the catalog as one request,
//!   checked and applied where the catalog is kept (the server, for a
//!   remote client).
//! - [`types`]: the stored field types ([`types::TypeDesc`],
//!   [`types::FieldDesc`]) and values decoded without their Rust type.
//! - [`methods`]: the server-side methods (selection, count, traversal),
//!   their encoding and the code that runs them.
//! - [`store_ops`]: [`StoreOps`], the object and B+-tree operations the
//!   catalog and the methods ask of a transaction, implemented here for a
//!   storage [`cairn_storage::Txn`] and by the typed layer for its own.
//! - [`error`]: [`Error`], the typed API's error.
//!
//! Architecture invariant: this crate depends on storage and the byte codec
//! only: no network, no client, no server.

pub mod append;
pub mod catalog;
pub mod catalog_change;
pub mod error;
pub mod methods;
pub mod store_ops;
pub mod types;

pub use error::{Error, Result};
pub use store_ops::{StoreOps, TreeOp};
