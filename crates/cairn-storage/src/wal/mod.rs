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
//! and the record-checking cursor in `segment.rs`; reading in `reader.rs`.
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

pub mod format;
mod reader;
pub mod redo;
pub(crate) mod segment;
mod sink;
#[cfg(test)]
mod tests;

pub use format::{RECORD_HEADER_SIZE, RECORD_LEN_MAX, SEGMENT_HEADER_SIZE, SEGMENT_MAGIC, WAL_FORMAT_VERSION};
pub use reader::WalReader;
pub use sink::LogSink;

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use format::RECORD_HEADER_SIZE as HEADER_BYTES;
use format::{encode_record, record_size};
use reader::SegmentSnapshot;
use segment::{check_segment_header, corrupt, create_segment, list_segments, write_segment_header, Cursor, Step};

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
    /// Opens the log in `db_dir/wal` (creating the directory and a first
    /// segment if there is none), finds the end of the valid log and cuts a
    /// torn tail; see the module docs. A bad record with a valid record after
    /// it is [`Error::CorruptLog`] naming the segment file and offset.
    pub fn open(db_dir: &Path, opts: WalOptions) -> Result<(Wal, OpenReport)> {
        if opts.segment_bytes == 0 {
            return Err(Error::InvalidArgument(
                "the log's segment_bytes must be positive".into(),
            ));
        }
        let vfs = opts.vfs;
        let creation_id = opts.creation_id;
        let dir = db_dir.join(WAL_DIR);
        let existed = vfs.exists(&dir);
        vfs.create_dir_all(&dir)
            .map_err(|e| Error::io("create log directory", &dir, e))?;
        if !existed {
            vfs.sync_dir(db_dir)
                .map_err(|e| Error::io("fsync database directory", db_dir, e))?;
        }
        let mut report = OpenReport::default();
        let mut stats = WalStats::default();
        let listed = list_segments(&*vfs, &dir)?;
        refuse_foreign_segments(&*vfs, &listed, creation_id)?;
        let (segments, current, end) = match listed.split_last() {
            None => {
                let (file, path) = create_segment(&*vfs, &dir, Lsn(0), creation_id)?;
                report.created = true;
                stats.segments_created = 1;
                stats.fsyncs += 1;
                stats.dir_syncs += 1;
                (vec![SegmentMeta { start: Lsn(0), path }], file, Lsn(0))
            }
            Some(((last_start, last_path), older)) => {
                for (i, (start, path)) in older.iter().enumerate() {
                    let next_start = listed[i + 1].0;
                    check_full_segment(&*vfs, path, *start, next_start, creation_id)?;
                }
                let file = vfs
                    .open(last_path, false)
                    .map_err(|e| Error::io("open log segment", last_path, e))?;
                let last = LastSegment {
                    dir: &dir,
                    file: &file,
                    path: last_path,
                    start: *last_start,
                    creation_id,
                    proves_durable: opts.proves_durable,
                };
                let (end, records, vouched) = last.scan(&*vfs, &mut report)?;
                // Bytes read back from the OS cache may never have reached
                // the disk (a failed fsync leaves them cached but clean, and
                // a later fsync reports success without writing them):
                // written again, they are dirty, and the fsync below makes
                // them durable or fails. Only bytes no record vouches for
                // need it: a record's `durable` field is advanced by
                // successful fsyncs alone (the log is poisoned by the first
                // failure), so the bytes before it are on the disk.
                last.rewrite(vouched, end)?;
                file.sync_data()
                    .map_err(|e| Error::io("fsync log segment", last_path, e))?;
                stats.fsyncs += 1;
                // Its name too: a segment whose creation failed half-way may
                // exist only in the cache, and records will be appended to it.
                vfs.sync_dir(&dir)
                    .map_err(|e| Error::io("fsync log directory", &dir, e))?;
                stats.dir_syncs += 1;
                report.last_segment_records = records;
                let segments = listed
                    .iter()
                    .map(|(start, path)| SegmentMeta {
                        start: *start,
                        path: path.clone(),
                    })
                    .collect();
                (segments, file, end)
            }
        };
        report.segment_count = segments.len();
        report.first_lsn = segments[0].start;
        report.end_lsn = end;
        let wal = Wal {
            dir,
            vfs,
            segment_bytes: opts.segment_bytes,
            creation_id,
            state: Mutex::new(State {
                end,
                durable: end,
                flushing: false,
                poisoned: None,
                segments,
                current,
                records_total: 0,
                records_durable: 0,
                stats,
            }),
            flushed: Condvar::new(),
        };
        Ok((wal, report))
    }

    /// Appends `records` contiguously, as one batch never interleaved with
    /// another, and returns each record's LSN (its end). The records are
    /// written to the segment file but not durable until [`Wal::flush`].
    ///
    /// A payload over [`RECORD_LEN_MAX`] is [`Error::LimitExceeded`] and
    /// nothing is appended. A failed write poisons the log.
    pub fn append(&self, records: &[&[u8]]) -> Result<Vec<Lsn>> {
        for payload in records {
            if payload.len() as u64 > u64::from(RECORD_LEN_MAX) {
                return Err(Error::LimitExceeded {
                    what: "log record payload bytes",
                    value: payload.len() as u64,
                    limit: u64::from(RECORD_LEN_MAX),
                });
            }
        }
        let mut st = self.lock_live()?;
        if records.is_empty() {
            return Ok(Vec::new());
        }
        let mut lsns = Vec::with_capacity(records.len());
        // Encoded records not yet written; they start at `st.end`.
        let mut run = Vec::new();
        let mut run_records = 0u64;
        for payload in records {
            let size = record_size(payload.len() as u32);
            let used = st.end.0 - st.current_segment().start.0 + run.len() as u64;
            if used > 0 && SEGMENT_HEADER_SIZE as u64 + used + size > self.segment_bytes {
                self.write_run(&mut st, &run, run_records)?;
                run.clear();
                run_records = 0;
                self.roll(&mut st)?;
            }
            let start = Lsn(st.end.0 + run.len() as u64);
            lsns.push(encode_record(&mut run, start, st.durable, payload));
            run_records += 1;
        }
        self.write_run(&mut st, &run, run_records)?;
        st.stats.appends += 1;
        debug_assert_eq!(lsns.last(), Some(&st.end));
        debug_assert!(lsns.windows(2).all(|w| w[0] < w[1]));
        Ok(lsns)
    }

    /// Makes the log durable up to at least `lsn` (at most [`Wal::end_lsn`]),
    /// sharing fsyncs between concurrent callers (group commit; see the
    /// module docs). A failed fsync poisons the log.
    pub fn flush(&self, lsn: Lsn) -> Result<()> {
        let mut st = self.lock_live()?;
        st.stats.flush_calls += 1;
        if lsn > st.end {
            return Err(Error::InvalidArgument(format!(
                "cannot flush the log to LSN {}: it ends at {}",
                lsn.0, st.end.0
            )));
        }
        let mut waited = false;
        loop {
            if let Some(reason) = &st.poisoned {
                return Err(Error::Poisoned(reason.clone()));
            }
            if st.durable >= lsn {
                if waited {
                    st.stats.flushes_waited += 1;
                }
                return Ok(());
            }
            if st.flushing {
                st = self.flushed.wait(st).unwrap_or_else(PoisonError::into_inner);
                waited = true;
                continue;
            }
            // Lead: one fsync for everything appended so far. Only the current
            // segment can hold unsynced bytes (a roll syncs the one it closes).
            debug_assert!(st.durable >= st.current_segment().start);
            st.flushing = true;
            let target = st.end;
            let records = st.records_total;
            let file = st.current.clone();
            let path = st.current_segment().path.clone();
            drop(st);
            let synced = file.sync_data();
            st = self.lock_state();
            st.flushing = false;
            st.stats.fsyncs += 1;
            st.stats.flush_rounds += 1;
            if let Err(e) = synced {
                return Err(self.fail(&mut st, "fsync log segment", &path, e));
            }
            // A log poisoned meanwhile (a failed append) claims nothing more.
            if st.poisoned.is_none() {
                self.mark_durable(&mut st, target, records);
            }
        }
    }

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

    /// Deletes the segment files holding only records that end at or before
    /// `lsn` (after a checkpoint at `lsn`), oldest first, fsyncing the
    /// directory after each. The segment being written is never deleted. Returns how
    /// many segments were removed.
    ///
    /// A failure to remove a file leaves it (and the newer ones) on disk; the
    /// next open takes them back as the head of the log, which is harmless,
    /// so it does not poison the log.
    pub fn remove_before(&self, lsn: Lsn) -> Result<u64> {
        let mut st = self.lock_live()?;
        // Segment i ends where segment i + 1 starts; the last one is excluded.
        let count = st.segments.windows(2).take_while(|w| w[1].start <= lsn).count();
        if count == 0 {
            return Ok(0);
        }
        let removed: Vec<SegmentMeta> = st.segments.drain(..count).collect();
        drop(st);
        // Readers made from now on no longer see these segments; the files are
        // deleted without the mutex.
        // Oldest first, each removal made durable before the next: a crash
        // can bring back at most the one in flight, so the segments on disk
        // stay one contiguous run (a gap would be damage).
        let mut done = 0u64;
        let mut syncs = 0u64;
        let mut outcome = Ok(());
        for seg in &removed {
            if let Err(e) = self.vfs.remove_file(&seg.path) {
                outcome = Err(Error::io("remove log segment", &seg.path, e));
                break;
            }
            done += 1;
            syncs += 1;
            if let Err(e) = self.vfs.sync_dir(&self.dir) {
                outcome = Err(Error::io("fsync log directory", &self.dir, e));
                break;
            }
        }
        let mut st = self.lock_state();
        st.stats.segments_removed += done;
        st.stats.dir_syncs += syncs;
        drop(st);
        outcome?;
        Ok(done)
    }

    /// Starts a new segment at `lsn` if the log ends there (nothing was
    /// appended since the caller looked) and the current segment holds at
    /// least `min_bytes` of records: a checkpoint whose redo LSN is `lsn`
    /// then logs its record in the new segment and removes every older one,
    /// so the next open scans one short segment instead of a long one whose
    /// records recovery no longer needs. True if it rolled. A failure
    /// poisons the log.
    pub fn roll_at(&self, lsn: Lsn, min_bytes: u64) -> Result<bool> {
        let mut st = self.lock_live()?;
        let start = st.current_segment().start;
        if st.end != lsn || st.end.0 - start.0 < min_bytes.max(1) {
            return Ok(false);
        }
        self.roll(&mut st)?;
        Ok(true)
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

    /// Writes the encoded records `run` at the end of the current segment and
    /// advances the end of the log. A failure poisons the log.
    fn write_run(&self, st: &mut State, run: &[u8], run_records: u64) -> Result<()> {
        if run.is_empty() {
            return Ok(());
        }
        let offset = st.current_offset(st.end);
        if let Err(e) = st.current.write_all_at(run, offset) {
            let path = st.current_segment().path.clone();
            return Err(self.fail(st, "write log segment", &path, e));
        }
        st.end = Lsn(st.end.0 + run.len() as u64);
        st.records_total += run_records;
        st.stats.records_appended += run_records;
        st.stats.bytes_appended += run.len() as u64;
        Ok(())
    }

    /// Closes the current segment (fsyncing it, which makes the whole log
    /// durable) and starts the next one at the end of the log. A failure
    /// poisons the log.
    fn roll(&self, st: &mut State) -> Result<()> {
        let path = st.current_segment().path.clone();
        if let Err(e) = st.current.sync_data() {
            return Err(self.fail(st, "fsync log segment", &path, e));
        }
        st.stats.fsyncs += 1;
        let (end, records) = (st.end, st.records_total);
        self.mark_durable(st, end, records);
        let (file, path) = match create_segment(&*self.vfs, &self.dir, end, self.creation_id) {
            Ok(created) => created,
            Err(e) => {
                self.poison(st, e.to_string());
                return Err(e);
            }
        };
        st.stats.fsyncs += 1;
        st.stats.dir_syncs += 1;
        st.stats.segments_created += 1;
        st.segments.push(SegmentMeta { start: end, path });
        st.current = file;
        Ok(())
    }

    /// Records that the log is durable up to `lsn` (`records` records
    /// appended since open) and wakes the flush waiters.
    fn mark_durable(&self, st: &mut State, lsn: Lsn, records: u64) {
        if lsn > st.durable {
            debug_assert!(lsn <= st.end);
            let batch = records - st.records_durable;
            st.stats.records_per_fsync_max = st.stats.records_per_fsync_max.max(batch);
            st.durable = lsn;
            st.records_durable = records;
        }
        self.flushed.notify_all();
    }

    /// Poisons the log after a failed I/O call and returns the error for it.
    fn fail(&self, st: &mut State, op: &'static str, path: &Path, e: io::Error) -> Error {
        self.poison(st, format!("{op} on {} failed: {e}", path.display()));
        Error::io(op, path, e)
    }

    /// Makes the log refuse all further work and wakes the flush waiters.
    fn poison(&self, st: &mut State, reason: String) {
        if st.poisoned.is_none() {
            st.poisoned = Some(reason);
        }
        self.flushed.notify_all();
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

/// Checks a segment that is not the last: its header, and that it is exactly
/// as long as the next segment's start says.
fn check_full_segment(vfs: &dyn Vfs, path: &Path, start: Lsn, next_start: Lsn, creation_id: u128) -> Result<()> {
    let file = vfs
        .open(path, false)
        .map_err(|e| Error::io("open log segment", path, e))?;
    check_segment_header(&*file, path, start, creation_id)?;
    let len = file.len().map_err(|e| Error::io("stat log segment", path, e))?;
    let expected = SEGMENT_HEADER_SIZE as u64 + (next_start.0 - start.0);
    if len != expected {
        return Err(corrupt(
            path,
            len.min(expected),
            format!(
                "the segment is {len} bytes, but the next segment starts at LSN {}, \
                 so it must be {expected}",
                next_start.0
            ),
        ));
    }
    Ok(())
}

/// The last segment at open: what scanning and repairing it needs.
struct LastSegment<'a> {
    dir: &'a Path,
    file: &'a Arc<dyn StorageFile>,
    path: &'a Path,
    start: Lsn,
    creation_id: u128,
    proves_durable: fn(&[u8]) -> bool,
}

impl LastSegment<'_> {
    /// Scans the segment, cuts a torn tail, and returns the end of the valid
    /// log, the number of valid records in the segment, and how far its last
    /// valid record vouches the log durable (its `durable` field; 0 without
    /// a record).
    fn scan(&self, vfs: &dyn Vfs, report: &mut OpenReport) -> Result<(Lsn, u64, Lsn)> {
        let (file, path, start) = (self.file, self.path, self.start);
        let len = file.len().map_err(|e| Error::io("stat log segment", path, e))?;
        if len <= SEGMENT_HEADER_SIZE as u64 && check_segment_header(&**file, path, start, self.creation_id).is_err() {
            // The segment's creation was cut short by a crash before its header
            // was durable: nothing was ever written after it.
            write_segment_header(&**file, path, start, self.creation_id)?;
            vfs.sync_dir(self.dir)
                .map_err(|e| Error::io("fsync log directory", self.dir, e))?;
            report.rewritten_header = Some(path.to_path_buf());
            return Ok((start, 0, Lsn(0)));
        }
        check_segment_header(&**file, path, start, self.creation_id)?;
        let limit = Lsn(start.0 + (len - SEGMENT_HEADER_SIZE as u64));
        let mut cursor = Cursor::new(file.clone(), path.to_path_buf(), start, limit, Lsn(0));
        let read_err = |e| Error::io("read log segment", path, e);
        let vouched_by = |cursor: &Cursor, last: Option<Lsn>| match last {
            Some(at) => cursor.peek_header(at).map(|(_, durable)| durable).map_err(read_err),
            None => Ok(Lsn(0)),
        };
        let mut records = 0u64;
        // The start of the last valid record, and where the next one starts.
        let (mut last_record, mut next_start) = (None, start);
        loop {
            match cursor.next().map_err(read_err)? {
                Step::Record { lsn, .. } => {
                    records += 1;
                    last_record = Some(next_start);
                    next_start = lsn;
                }
                Step::End => return Ok((cursor.pos(), records, vouched_by(&cursor, last_record)?)),
                Step::Bad(bad) => {
                    if bad.certain {
                        return Err(corrupt(path, bad.offset, bad.reason));
                    }
                    if let Some(proof) = self.durable_record_after(&mut cursor, bad.lsn).map_err(read_err)? {
                        return Err(corrupt(
                            path,
                            bad.offset,
                            format!(
                                "{}; the record at offset {} proves these bytes were durable, \
                                 so this is damage, not the end of the log",
                                bad.reason,
                                cursor.file_offset(proof)
                            ),
                        ));
                    }
                    file.set_len(bad.offset)
                        .map_err(|e| Error::io("truncate log segment", path, e))?;
                    report.torn_tail = Some(TornTail {
                        path: path.to_path_buf(),
                        offset: bad.offset,
                        lsn: bad.lsn,
                        bytes_cut: len - bad.offset,
                        reason: bad.reason,
                    });
                    return Ok((bad.lsn, records, vouched_by(&cursor, last_record)?));
                }
            }
        }
    }

    /// The start of the first valid record after `after` that proves the
    /// bytes at `after` durable, if any: one appended when the log was
    /// already durable past them (its header's `durable` field), or one
    /// whose payload proves it (a checkpoint). Valid records that prove
    /// nothing (commits a power loss kept while losing earlier unsynced
    /// bytes) are passed over.
    fn durable_record_after(&self, cursor: &mut Cursor, after: Lsn) -> std::io::Result<Option<Lsn>> {
        let mut probe = after;
        while let Some(found) = cursor.find_valid_record_after(probe)? {
            let (len, durable) = cursor.peek_header(found)?;
            // Appended when the damaged bytes were already fsynced.
            if durable > after {
                return Ok(Some(found));
            }
            let mut payload = vec![0u8; len as usize];
            self.file
                .read_exact_at(&mut payload, cursor.file_offset(found) + HEADER_BYTES as u64)?;
            if (self.proves_durable)(&payload) {
                return Ok(Some(found));
            }
            probe = found;
        }
        Ok(None)
    }

    /// Writes again the segment's bytes from `vouched` to `end`, and its
    /// header too unless `vouched` reaches into the segment (see
    /// [`Wal::open`]).
    fn rewrite(&self, vouched: Lsn, end: Lsn) -> Result<()> {
        let from = if vouched < self.start {
            0
        } else {
            SEGMENT_HEADER_SIZE as u64 + (vouched.min(end).0 - self.start.0)
        };
        let total = SEGMENT_HEADER_SIZE as u64 + (end.0 - self.start.0) - from;
        let mut buf = vec![0u8; (total.min(1 << 20)) as usize];
        let mut done = 0u64;
        while done < total {
            let n = (total - done).min(buf.len() as u64) as usize;
            let at = from + done;
            self.file
                .read_exact_at(&mut buf[..n], at)
                .map_err(|e| Error::io("read log segment", self.path, e))?;
            self.file
                .write_all_at(&buf[..n], at)
                .map_err(|e| Error::io("rewrite log segment", self.path, e))?;
            done += n as u64;
        }
        Ok(())
    }
}

/// Refuses the log if any segment belongs to another database, before any
/// other check could describe a leftover `wal/` as mere damage.
fn refuse_foreign_segments(vfs: &dyn Vfs, listed: &[(Lsn, PathBuf)], creation_id: u128) -> Result<()> {
    for (start, path) in listed {
        let file = vfs
            .open(path, false)
            .map_err(|e| Error::io("open log segment", path, e))?;
        if let Err(e @ Error::ForeignLog { .. }) = check_segment_header(&*file, path, *start, creation_id) {
            return Err(e);
        }
    }
    Ok(())
}
