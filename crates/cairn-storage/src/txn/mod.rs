//! Transactions: the embedded database engine ([`Db`]) and its transactions
//! ([`Txn`]).
//!
//! **Isolation** is strict two-phase locking on pages (S to read, X to
//! change), with IX/S locks on a group for allocation against scans (no
//! phantoms); locks are held until commit or abort. Lock holders are
//! (client, transaction) pairs, never threads. A transaction may lock
//! single objects instead ([`Txn::set_object_locking`],
//! [`DbOptions::object_locking`]): IS/IX on the page, S/X on the object,
//! its changes kept as record after-images and applied at commit to the
//! page's newest image (`objects.rs` explains the rules, the room reserved
//! for growth and when a change escalates to the page's X lock).
//!
//! **No-steal, redo-only.** A transaction changes private copies of pages
//! (spilled to a temporary file past `txn_memory_bytes`); the shared buffer
//! pool never holds uncommitted data, so nothing uncommitted can reach the
//! volume and abort is "drop the copies". At commit the transaction appends
//! one PAGE redo record per changed page (a full image on the page's first
//! change since the current checkpoint began, else the changed bytes) and a
//! COMMIT record, waits for the log to be durable (group commit shares the
//! fsync), installs its pages in the buffer pool with their new LSNs, frees
//! the pages it emptied, and releases its locks.
//!
//! **Space allocation is a system action**: it changes the space map, extent
//! lists and the page's format at once, logged under transaction id 0 with an
//! ALLOC marker naming the transaction. An aborting transaction frees what it
//! allocated; recovery frees what uncommitted transactions allocated and what
//! committed ones freed without a FREE record yet.
//!
//! # Transaction states
//!
//! ```text
//!  begin ──▶ Active ──commit()──▶ Appending ──COMMIT appended──▶ Decided ──▶ Done
//!             │  │                    └─ error ─▶ rolled back ─▶ Done   └─ error ─▶ Done (Db poisoned)
//!             │  └─ error after a change, deadlock, lock timeout, I/O ─▶ Doomed ─abort()/drop─▶ Done
//!             └─ abort()/drop ─────────────────────────────────────────────────────────────────▶ Done
//! ```
//!
//! | from | to | by | when |
//! |---|---|---|---|
//! | — | Active | `Db::begin` | a new id is handed out |
//! | Active | Doomed | `Txn::run` (every object operation) | it failed after changing private state, or with `Deadlock`, `LockTimeout`, `Io`, `Poisoned`; every call but abort now returns `TxnDoomed` |
//! | Active | Appending | `Txn::commit` | PAGE records are appended |
//! | Appending | Done | `Txn::rollback` | appending failed before the COMMIT: nothing is decided, so it rolls back |
//! | Appending | Decided | `Shared::append_records` | the COMMIT record is appended: never rolled back from here |
//! | Decided | Done | `Txn::commit` | durable, installed, frees done |
//! | Decided | Done (poisoned) | `Txn::commit` | fsync, install or a free failed: the Db is poisoned and reopening redoes the commit if its COMMIT is durable |
//! | Active, Doomed | Done | `Txn::abort`, `Drop` | private pages dropped, allocations freed |
//!
//! **Checkpoints** are fuzzy: [`Db::checkpoint`] picks a redo LSN (the end of
//! the log, under the commit gate so no change is logged but not yet
//! installed), flushes every dirty page, logs a CHECKPOINT record, and removes
//! log segments before the redo LSN. Recovery ([`crate::recovery`]) replays
//! from the last checkpoint's redo LSN.

mod append;
mod backend;
mod client_check;
mod commit;
mod db;
mod embedded;
mod keys;
mod objects;
mod remote;
mod salvage;
mod server_trees;
mod spill;
#[cfg(test)]
mod tests;
mod transaction;
mod unwritten;
mod versions;

pub use append::{ObjectMerges, RecordEdit, RecordMerge};
pub use backend::{Backend, FillPages, ParkedLock, Parking};
pub use commit::{InstalledLsns, PageDiff};
pub use db::{poisoned_reason, Db, DbOptions, DbStats, HookGuard, InstallHook, TreeChangeHook, WriteLockHook};
pub use keys::{GuardedLookup, KeyRanges, TreeState};
pub use objects::PageRead;
pub use remote::CommitCheck;
pub use salvage::Salvaged;
pub use server_trees::{TreeChange, TreeService};
pub use transaction::{ProtectedPages, Restriction, Txn};
pub use unwritten::Unwritten;
pub use versions::{Snapshot, SnapshotWindow, VersionStats};
