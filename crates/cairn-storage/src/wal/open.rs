//! Opening the log: checking every segment, finding where the valid log
//! ends, cutting a torn tail off the last segment (or refusing damage that a
//! later record proves was durable), and making the whole log durable before
//! the first append. See "Opening and torn tails" in the module docs.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};

use super::format::{RECORD_HEADER_SIZE as HEADER_BYTES, SEGMENT_HEADER_SIZE};
use super::segment::{
    check_segment_header, corrupt, create_segment, list_segments, write_segment_header, Cursor, Step,
};
use super::{OpenReport, SegmentMeta, State, TornTail, Wal, WalOptions, WalStats, WAL_DIR};
use crate::error::{Error, Result};
use crate::ids::Lsn;
use crate::io::{StorageFile, Vfs};

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
