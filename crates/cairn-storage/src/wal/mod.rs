//! The redo write-ahead log.
//!
//! **Tool interface** (see the crate docs), except [`redo`], which is API:
//! the upper layers exchange redo records but never open the log themselves.
//!
//! The log is an append-only byte stream cut into segment files in `DIR/wal/`.
//! An [`Lsn`] is a byte position in that stream, and **a record's LSN is the
//! position just past its end**: a page whose LSN is `L` has every change up to
//! `L` applied, and "durable up to `L`" is a plain comparison. The log does not
//! interpret payloads (the transaction layer puts page diffs, commits and
//! checkpoints in them); it frames them, checksums them, makes them durable
//! and reads them back.
//!
//! # Format
//!
//! ```text
//!  DIR/wal/0000000000000000.log   segment: header, then records, contiguous
//!          0000000000a81c3e.log   the next segment starts at the LSN the previous ended at
//!
//!  segment file      ┌──────────────────┬──────────┬──────────┬─────┐
//!                    │ segment header 48│ record   │ record   │ ... │
//!                    └──────────────────┴──────────┴──────────┴─────┘
//!  file offset        0                  48         48 + (p − start) for the record starting at LSN p
//!
//!  segment header: 0 magic "CAIRNWAL" (8) │ 8 format version = 2 (4) │ 12 flags = 0 (4)
//!                  16 start LSN (8) │ 24 creation id (16) │ 40 reserved = 0 (4)
//!                  44 CRC32C of bytes 0..44 (4)
//!
//!  record:  0       4      8          16          24            28          28 + len
//!           ┌───────┬──────┬──────────┬───────────┬─────────────┬───────────┐
//!           │hdr crc│ len  │ lsn      │ durable   │ payload crc │ payload   │
//!           │  u32  │ u32  │ u64      │ u64       │ u32         │ len bytes │
//!           └───────┴──────┴──────────┴───────────┴─────────────┴───────────┘
//!           hdr crc = CRC32C(bytes 4..28); len ≤ RECORD_LEN_MAX (64 MiB);
//!           lsn = the record's start + 28 + len (its end, i.e. its LSN);
//!           durable = how far the log was fsynced when the record was appended
//! ```
//!
//! The byte layouts and their constants live in [`format`](mod@format); segment naming
//! and the record-checking cursor in `segment.rs`; reading in `reader.rs`;
//! opening and torn-tail repair in `open.rs`; appending, group commit and
//! poisoning in `append.rs`; rolling and removing segments in `rotation.rs`.
//! This file keeps the log's types, the state its mutex guards, and the
//! read-only views of it.
//!
//! The segment header names the segment's start (as does the file name), so a
//! segment from another place in the log, or a file that is not a segment, is
//! refused. The record's `lsn` field must match the position it is found at,
//! so a stale record is never taken as valid.
//!
//! A segment takes records until the next one would take it past
//! `segment_bytes` (a single record larger than that gets a segment of its
//! own); then the log **rolls**: the full segment is fsynced, the next one is
//! created (header written and fsynced, then the directory fsynced). A record
//! never spans two segments; a batch may.
//!
//! # Writing: directly at append time
//!
//! [`Wal::append`] encodes a batch and writes it to the current segment file
//! (`pwrite`) under the log's mutex, then advances `end`. The records are in
//! the OS page cache but not durable. [`Wal::read_from`] reads the files, so it
//! sees every appended record. Writing under the mutex keeps a batch
//! contiguous (never interleaved with another) and the file exactly as long as
//! the log says; a page-cache write is short next to an fsync, which is never
//! done under the mutex by a flush.
//!
//! # Group commit: the flush state machine
//!
//! One mutex guards `{end, durable, flushing, poisoned, segments}`; a condvar
//! (`flushed`) wakes waiters. [`Wal::flush`]`(lsn)`:
//!
//! ```text
//!           durable ≥ lsn: return Ok ◀──────────────────────────────┐
//!                 ▲                                                 │
//!  flush(lsn) ──▶ check ── flushing ──▶ WAITER: wait on `flushed` ──┘ (recheck)
//!                 │
//!                 └─ !flushing ──▶ LEADER: flushing = true, target = end,
//!                                  release the mutex, fsync the current segment,
//!                                  retake it, flushing = false,
//!                                  ok: durable = max(durable, target) │ err: poison
//!                                  notify_all; recheck ─────────────────────────┘
//! ```
//!
//! | state | event | next | made by |
//! |---|---|---|---|
//! | idle (`!flushing`) | `flush` with `lsn > durable` | leader flushing | `Wal::flush` |
//! | leader flushing | another `flush` with `lsn > durable` | it waits | `Wal::flush` |
//! | leader flushing | fsync succeeds | idle, `durable = target`, waiters woken | `Wal::flush` |
//! | idle, waiters woken | a woken waiter still not covered | it becomes the next leader | `Wal::flush` |
//! | any | fsync or write fails | poisoned (terminal) | `Wal::fail` |
//! | any | a segment rolls | `durable = end` (the full segment was fsynced) | `Wal::roll` |
//!
//! While the leader fsyncs, other threads append and queue behind it; the
//! next leader's one fsync then covers all of them. One fsync serves every
//! record appended before it started. Only the current segment can hold
//! unsynced data, because a roll fsyncs the segment it closes; so a flush
//! fsyncs exactly the current segment.
//!
//! # Failures: poisoning
//!
//! After a failed write or fsync the file's contents are unknown (and Linux
//! may drop the dirty pages and report success to a later fsync), so the log
//! **poisons itself**: that call returns [`Error::Io`], every later
//! [`Wal::append`], [`Wal::flush`] and [`Wal::remove_before`] returns
//! [`Error::Poisoned`], waiters wake with [`Error::Poisoned`], and `durable`
//! never advances again. Nothing is retried. The database recovers by
//! reopening, which finds the true end of the log.
//!
//! # Opening and torn tails
//!
//! [`Wal::open`] checks every segment's header and that each segment but the
//! last is exactly as long as the next one's start says (its records are
//! checked when read). It scans the last segment record by record. At the
//! first bytes that are not a valid record:
//! - if a valid record follows them whose `durable` field is past them (it
//!   was appended after they had been fsynced), or whose payload proves the
//!   log before it durable ([`WalOptions::proves_durable`]: a checkpoint), or
//!   the header's checksum holds but its length is impossible, the log is
//!   damaged, not torn: [`Error::CorruptLog`] naming the file and offset
//!   (cutting would silently lose acknowledged commits);
//! - otherwise they lie past the last point any record vouches for: bytes
//!   that were never fsynced when anything after them was written, so no
//!   commit depending on them was acknowledged before the crash — except
//!   the very last group commit, whose damage no later record can reveal
//!   (as in PostgreSQL and SQLite). They are the end of the log: the file
//!   is cut there (truncated and fsynced) and [`OpenReport::torn_tail`] says
//!   so. This includes a power loss that kept a later unsynced write and
//!   lost an earlier one.
//!
//! A last segment whose creation was cut short (no whole header) gets its
//! header rewritten. Then the last segment's bytes, header included, are
//! written again (after a failed fsync they may sit only in the OS cache)
//! and fsynced, and the log directory fsynced; the whole log is durable:
//! `durable = end`.
//!
//! # Invariants
//!
//! - `durable_lsn ≤ end_lsn`, and both only grow.
//! - Records are contiguous: each starts where the previous ended, across
//!   segments; segment `k + 1` starts where segment `k` ends.
//! - LSNs strictly increase (a record is at least 28 bytes).
//! - A record's `durable` field is at most its start.
//! - `durable ≥ start of the current segment`: only the current segment can
//!   hold unsynced bytes.
//! - The current segment file is exactly `48 + (end − its start)` bytes.
//! - A poisoned log never reports more durability than it had.
//!
//! [`Wal::check_invariants`] asserts these.
//!
//! # Assumptions about the disk
//!
//! - A successful fsync makes every completed write to that file durable, and
//!   a successful directory fsync makes created or removed names durable.
//! - A crash may keep or lose each unsynced write, or tear it at a sector
//!   boundary, in any combination. Unsynced bytes sit only in the last
//!   segment.
//! - Every file operation goes through the [`Vfs`] seam, so the simulated
//!   disk (`crate::sim`, `tests/crash_images/`) checks these claims.

mod append;
pub mod format;
mod open;
mod reader;
pub mod redo;
mod rotation;
pub(crate) mod segment;
mod sink;
#[cfg(test)]
mod tests;

pub use format::{RECORD_HEADER_SIZE, RECORD_LEN_MAX, SEGMENT_HEADER_SIZE, SEGMENT_MAGIC, WAL_FORMAT_VERSION};
pub use reader::WalReader;
pub use sink::LogSink;

use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use reader::SegmentSnapshot;

use crate::error::{Error, Result};
use crate::ids::Lsn;
use crate::io::{OsVfs, StorageFile, Vfs};

// Committing threads share one log.
const _: fn() = || {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Wal>();
    assert_send_sync::<WalReader>();
};

/// The log's directory inside a database directory.
pub const WAL_DIR: &str = "wal";
/// The default size at which a segment is rolled (16 MiB).
pub const SEGMENT_BYTES_DEFAULT: u64 = 16 << 20;

/// How to open the log.
#[derive(Clone, Debug)]
pub struct WalOptions {
    /// A segment is rolled before a record would take it past this many bytes
    /// (header included). A record larger than that gets a segment alone.
    pub segment_bytes: u64,
    /// The file system.
    pub vfs: Arc<dyn Vfs>,
    /// The creation id of the database the log belongs to: every segment
    /// header carries it, and a segment with another is refused
    /// ([`Error::ForeignLog`]).
    pub creation_id: u128,
    /// True for a payload whose presence proves the log before it durable
    /// (the database's CHECKPOINT records, written only after a flush). At
    /// open, a bad record followed by such a record is damage inside the
    /// durable log ([`Error::CorruptLog`]); a bad record followed only by
    /// others is the end of the log — bytes past the last durable point,
    /// never acknowledged, of which a power loss kept some and not others.
    pub proves_durable: fn(&[u8]) -> bool,
}

impl Default for WalOptions {
    /// A log in which every record counts as proof of durability: the most
    /// conservative reading, for a log used on its own.
    fn default() -> WalOptions {
        WalOptions {
            segment_bytes: SEGMENT_BYTES_DEFAULT,
            vfs: Arc::new(OsVfs),
            creation_id: 0,
            proves_durable: |_| true,
        }
    }
}

/// What [`Wal::open`] found and repaired.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct OpenReport {
    /// There was no segment: the log was created empty at LSN 0.
    pub created: bool,
    /// Segment files in the log.
    pub segment_count: usize,
    /// The oldest LSN still in the log (the first segment's start).
    pub first_lsn: Lsn,
    /// The end of the valid log.
    pub end_lsn: Lsn,
    /// Valid records found in the last segment.
    pub last_segment_records: u64,
    /// The torn tail cut off, if any.
    pub torn_tail: Option<TornTail>,
    /// The last segment whose header was rewritten because its creation was
    /// cut short, if any.
    pub rewritten_header: Option<PathBuf>,
}

/// A torn tail that [`Wal::open`] cut off the last segment.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct TornTail {
    /// The segment file.
    pub path: PathBuf,
    /// The file offset of the cut (the file's new length).
    pub offset: u64,
    /// The log position of the cut: the new end of the log.
    pub lsn: Lsn,
    /// Bytes removed.
    pub bytes_cut: u64,
    /// Why the bytes at the cut were not a valid record.
    pub reason: String,
}

/// Counters since the log was opened.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct WalStats {
    /// `append` calls that appended at least one record.
    pub appends: u64,
    /// Records appended.
    pub records_appended: u64,
    /// Log bytes appended (headers and payloads).
    pub bytes_appended: u64,
    /// `flush` calls.
    pub flush_calls: u64,
    /// `flush` calls that returned after waiting for another thread's fsync,
    /// without fsyncing themselves.
    pub flushes_waited: u64,
    /// fsyncs made by a flush leader (group commits).
    pub flush_rounds: u64,
    /// Every fsync of a segment file: flush rounds, plus two per roll (the
    /// closed segment and the new one's header), plus one at open.
    pub fsyncs: u64,
    /// fsyncs of the log directory.
    pub dir_syncs: u64,
    /// The most records one fsync made durable.
    pub records_per_fsync_max: u64,
    /// Segments created.
    pub segments_created: u64,
    /// Segments removed by `remove_before`.
    pub segments_removed: u64,
}

/// A segment of the log: where it starts and its file.
#[derive(Clone, Debug)]
struct SegmentMeta {
    start: Lsn,
    path: PathBuf,
}

/// Everything the log's mutex guards.
struct State {
    /// The end of the log: the LSN the next record starts at.
    end: Lsn,
    /// Everything below this is durable.
    durable: Lsn,
    /// A flush leader is fsyncing (without the mutex).
    flushing: bool,
    /// Why the log refuses work, after a failed write or fsync.
    poisoned: Option<String>,
    /// The segments, oldest first; the last is being written. Never empty.
    segments: Vec<SegmentMeta>,
    /// The last segment's open file.
    current: Arc<dyn StorageFile>,
    /// Records appended since open, and how many of them are durable (for
    /// `records_per_fsync_max`).
    records_total: u64,
    records_durable: u64,
    stats: WalStats,
}

impl State {
    fn current_segment(&self) -> &SegmentMeta {
        self.segments.last().expect("the log always has a segment")
    }

    /// The file offset in the current segment of log position `lsn`.
    fn current_offset(&self, lsn: Lsn) -> u64 {
        SEGMENT_HEADER_SIZE as u64 + (lsn.0 - self.current_segment().start.0)
    }
}

/// The write-ahead log. `Send + Sync`: committing threads share one.
pub struct Wal {
    dir: PathBuf,
    vfs: Arc<dyn Vfs>,
    segment_bytes: u64,
    creation_id: u128,
    state: Mutex<State>,
    /// Signalled when a flush round ends (or the log is poisoned).
    flushed: Condvar,
}

impl fmt::Debug for Wal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let st = self.lock_state();
        f.debug_struct("Wal")
            .field("dir", &self.dir)
            .field("end", &st.end)
            .field("durable", &st.durable)
            .field("segments", &st.segments.len())
            .field("poisoned", &st.poisoned)
            .finish()
    }
}

impl Wal {
    /// Everything below this LSN is durable.
    pub fn durable_lsn(&self) -> Lsn {
        self.lock_state().durable
    }

    /// The end of the log: the LSN of the last record appended (or the end of
    /// the log found by `open`).
    pub fn end_lsn(&self) -> Lsn {
        self.lock_state().end
    }

    /// The oldest LSN still in the log: records ending after it can be read.
    pub fn first_lsn(&self) -> Lsn {
        self.lock_state().segments[0].start
    }

    /// Reads the records whose LSN (end) is greater than `from`, in order, up
    /// to the end of the log now. `from` below [`Wal::first_lsn`] (records
    /// removed by [`Wal::remove_before`]) or past [`Wal::end_lsn`] is
    /// [`Error::InvalidArgument`]. Damage met while reading is
    /// [`Error::CorruptLog`] naming the file and offset.
    pub fn read_from(&self, from: Lsn) -> Result<WalReader> {
        let st = self.lock_state();
        let first = st.segments[0].start;
        if from < first {
            return Err(Error::InvalidArgument(format!(
                "log records ending after LSN {} were asked for, but the log was truncated: \
                 the oldest LSN kept is {}",
                from.0, first.0
            )));
        }
        if from > st.end {
            return Err(Error::InvalidArgument(format!(
                "log records after LSN {} were asked for, but the log ends at {}",
                from.0, st.end.0
            )));
        }
        let first_idx = st.segments.partition_point(|s| s.start <= from) - 1;
        let last_idx = st.segments.len() - 1;
        let snapshots = (first_idx..=last_idx)
            .map(|i| {
                let seg = &st.segments[i];
                let is_last = i == last_idx;
                SegmentSnapshot {
                    start: seg.start,
                    end: if is_last { st.end } else { st.segments[i + 1].start },
                    path: seg.path.clone(),
                    file: is_last.then(|| st.current.clone()),
                }
            })
            .collect();
        Ok(WalReader::new(self.vfs.clone(), snapshots, from, self.creation_id))
    }

    /// Counters since open.
    pub fn stats(&self) -> WalStats {
        self.lock_state().stats.clone()
    }

    /// Panics if the log's bookkeeping is inconsistent (see the module's
    /// invariants). Reads the current segment's length.
    pub fn check_invariants(&self) {
        let st = self.lock_state();
        assert!(st.durable <= st.end, "durable {:?} > end {:?}", st.durable, st.end);
        assert!(!st.segments.is_empty(), "the log has no segment");
        assert!(
            st.segments.windows(2).all(|w| w[0].start < w[1].start),
            "segments out of order"
        );
        let current = st.current_segment();
        assert!(
            current.start <= st.durable,
            "the current segment starts at {:?} above durable {:?}",
            current.start,
            st.durable
        );
        assert!(st.records_durable <= st.records_total);
        if st.poisoned.is_none() {
            let len = st.current.len().expect("length of the current segment");
            assert_eq!(
                len,
                st.current_offset(st.end),
                "the current segment's length disagrees with the end of the log"
            );
        }
    }

    /// Locks the state for inspection, whether poisoned or not.
    fn lock_state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Locks the state for new work: fails if the log is poisoned.
    fn lock_live(&self) -> Result<MutexGuard<'_, State>> {
        let st = self
            .state
            .lock()
            .map_err(|_| Error::Poisoned("a thread panicked inside the log".to_string()))?;
        match &st.poisoned {
            Some(reason) => Err(Error::Poisoned(reason.clone())),
            None => Ok(st),
        }
    }
}
