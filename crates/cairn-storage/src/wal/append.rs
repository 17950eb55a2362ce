//! Appending records and making them durable: [`Wal::append`] writes a batch
//! to the current segment under the log's mutex, [`Wal::flush`] runs the
//! group-commit state machine (one leader fsyncs for every waiter), and a
//! failed write or fsync poisons the log. See "Writing", "Group commit" and
//! "Failures" in the module docs.

use std::io;
use std::path::Path;
use std::sync::PoisonError;

use super::format::{encode_record, record_size, RECORD_LEN_MAX, SEGMENT_HEADER_SIZE};
use super::{State, Wal};
use crate::error::{Error, Result};
use crate::ids::Lsn;

impl Wal {
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

    /// Records that the log is durable up to `lsn` (`records` records
    /// appended since open) and wakes the flush waiters.
    pub(super) fn mark_durable(&self, st: &mut State, lsn: Lsn, records: u64) {
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
    pub(super) fn fail(&self, st: &mut State, op: &'static str, path: &Path, e: io::Error) -> Error {
        self.poison(st, format!("{op} on {} failed: {e}", path.display()));
        Error::io(op, path, e)
    }

    /// Makes the log refuse all further work and wakes the flush waiters.
    pub(super) fn poison(&self, st: &mut State, reason: String) {
        if st.poisoned.is_none() {
            st.poisoned = Some(reason);
        }
        self.flushed.notify_all();
    }
}
