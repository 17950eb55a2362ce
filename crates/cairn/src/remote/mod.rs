//! The clients of `cairn serve` (ARCHITECTURE.md): one connection each, and
//! the caches they keep across transactions under callback locking.
//!
//! - `page`: the page- and file-server client ([`RemoteStore`]), a storage
//!   [`Backend`](cairn_storage::txn::Backend) under the same `Txn` the
//!   embedded engine runs: pages fetched (or, as a file-server client, read
//!   from the served volume file) into a buffer pool, rights to cache pages
//!   (and, on a server that locks key ranges, index lookups kept under
//!   rights on gaps).
//! - `object`: the object-server client ([`ObjectStore`], [`ObjectTxn`]):
//!   objects fetched by name, changes sent as after-images, B+-trees walked
//!   by the server; rights on objects, index leaves and (the adaptive
//!   client's) whole page images.
//! - `adaptive`: the adaptive client's fetch policy, an object client that
//!   fetches whole pages of objects when a page's objects are used
//!   together.
//! - `rights`: callback locking's client half that every client shares
//!   (answers, rights that cross their callback, ends that wait for their
//!   answers, RELEASE, the callback thread); each client's table of what it
//!   keeps is its own (`page/rights.rs`, `object/rights.rs`).
//! - `lookups`: index lookups kept across transactions under rights on
//!   leaves or gaps (the object and page clients').
//! - `conn`: the connection, its counters ([`RemoteStats`]), URLs, and the
//!   page client's device.

mod adaptive;
mod conn;
mod lookups;
mod object;
mod page;
mod rights;

use std::sync::{Mutex, MutexGuard};

pub use adaptive::{AdaptivePolicy, AdaptiveStats, FetchMode, READ_AHEAD_MAX};
/// A B+-tree change, as [`ObjectTxn::tree_apply`] takes it.
pub use cairn_schema::TreeOp;
pub use conn::{parse_url, parse_url_login, Connect, RemoteDevice, RemoteStats};
pub use object::{ObjectLostHook, ObjectStore, ObjectTxn, SharedBytes, CACHED_OBJECT_BYTES_DEFAULT, CHANGES_KEPT_MIN};
pub use page::RemoteStore;

/// Locks `m`, taking over a lock a panicking thread left poisoned (the
/// state behind every client mutex stays consistent across a panic).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
