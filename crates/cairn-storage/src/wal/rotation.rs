//! Segment turnover: rolling to a new segment when the current one is full
//! or a checkpoint asks for it, and deleting the old segments a checkpoint no
//! longer needs.

use super::segment::create_segment;
use super::{SegmentMeta, State, Wal};
use crate::error::{Error, Result};
use crate::ids::Lsn;

impl Wal {
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

    /// Closes the current segment (fsyncing it, which makes the whole log
    /// durable) and starts the next one at the end of the log. A failure
    /// poisons the log.
    pub(super) fn roll(&self, st: &mut State) -> Result<()> {
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
}
