//! Cairn: typed persistent objects in a transactional object database.
//!
//! ```ignore
//! #[derive(cairn::Persistent)]
//! struct Part { id: u32, x: i32, to: cairn::List<cairn::Ref<Part>> }
//!
//! let db = cairn::Database::open("parts.cairn")?;
//! let mut tx = db.begin()?;
//! let p = tx.create(Part { id: 1, x: 0, to: cairn::List::new() })?;
//! tx.set_root("first-part", &p)?;
//! tx.update(&p, |p| p.x += 1)?;
//! tx.commit()?;
//! ```
//!
//! - [`Database`] / [`Transaction`]: serializable transactions
//!   (`database/`), embedded ([`Database::open`]) or against `cairn serve`
//!   ([`Database::connect`], the page-server client in [`remote`]).
//! - [`Ref<T>`]: typed references, swizzled to object-cache slots (`reference.rs`).
//! - [`cache::ObjectCache`]: decoded objects bounded in bytes, LRU or CLOCK.
//! - [`List`], [`Set`], [`Map`] fields and [`Index`] (a B+-tree on a field).
//! - [`codec`], [`fields`]: the record encoding and `#[derive(Persistent)]`'s traits.
//! - [`view`]: objects read in place ([`Obj`], [`Transaction::view`]).
//! - `catalog.rs`: class ids and schema versions, named roots, index directory.

pub mod cache;
mod catalog;
pub mod codec;
pub mod collections;
mod database;
pub mod dual;
mod error;
pub mod fields;
mod index_cache;
pub mod methods;
mod reference;
pub mod remote;
pub mod view;

pub use cache::{CachePolicy, CacheStats};
pub use cairn_derive::Persistent;
pub use cairn_storage as storage;
pub use codec::{DecodeError, Field, FieldDesc, Persistent, Reader, TypeDesc, Value, Writer};
pub use collections::{List, Map, Set};
pub use database::{Arch, Database, Index, Options, Transaction};
pub use dual::DualBufferOptions;
pub use error::{Error, Result};
pub use methods::{Cmp, Literal, Predicate};
pub use reference::Ref;
pub use remote::RemoteStats;
pub use view::Obj;

/// Decoders that are otherwise private, for the fuzz targets
/// (`fuzz/targets/catalog.rs`) and their corpus replay under `cargo test`.
/// Not a stable API.
#[doc(hidden)]
pub mod fuzzing {
    pub use crate::catalog::{decode_schema, encode_schema};
}
