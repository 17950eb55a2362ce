//! Proven durability (issue 10), on the simulated disk (`cairn_storage::sim`):
//!
//! - **crash at every I/O index** of a workload (transactions of small and
//!   large objects, B+-tree splits, checkpoints, evictions, reopens; in the
//!   third workload they lock objects, and an interloper commits changes to
//!   other objects of the same pages while each is open): the
//!   power fails at operation `i`, and every disk image it could leave
//!   (unsynced writes all dropped, a random subset kept, the last write torn,
//!   all kept) recovers to a state the model accepts — every acknowledged
//!   commit whole, nothing of an unacknowledged one, the commit in flight all
//!   or nothing — and `check` finds nothing wrong;
//! - **crash during recovery**, three deep, ends where a clean recovery does;
//! - **I/O errors at every index** (EIO on a read, write or fsync; ENOSPC on
//!   a write or extend; a short write; once or forever): the operation fails
//!   with an error, never a panic; later work is refused (poisoned) until
//!   reopen; reopening — on the same disk or on a crash image of it — gives a
//!   state the model accepts;
//! - **bit flips** in any page of the volume or byte of the log, of a cleanly
//!   closed database and of one awaiting recovery: each is detected (open
//!   fails naming the page or log position, `check` reports it, or a read
//!   fails), never returned as data, never a panic;
//! - **crash while creating a database**, and a **leftover log** in a new
//!   database's directory.
//!
//! Environment: `CAIRN_CRASH_POINTS=N` crash points (and I/O-error points,
//! bit-flip trials) per workload, sampled evenly (default small, for CI);
//! `CAIRN_CRASH_SEED=S` the seed; `CAIRN_CRASH_INDEX=i` and
//! `CAIRN_CRASH_IMAGE=synced|random|torn-last|everything` replay one crash
//! point. Every failure prints the seed, the I/O index and the image kind;
//! a failure with the shape of a defect this suite found (see
//! `FIXED_DEFECTS`) names it, since it would be that fix regressing.
//!
//! Layout: `harness` (options, configuration, failures), `model` (the
//! model and verification against it), `workload` (the workloads), and
//! one module per behaviour: `crash_points`, `io_errors`, `bit_flips`,
//! `creating`.

mod bit_flips;
mod checkpoint_beside_commits;
mod crash_points;
mod creating;
mod harness;
mod io_errors;
mod model;
mod workload;
