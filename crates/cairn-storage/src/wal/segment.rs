//! Segment files: naming, listing, creation, and [`Cursor`], which walks the
//! records of one segment and checks each one.
//!
//! A segment is named for the LSN of its first record byte, in 16 lowercase
//! hex digits (`wal/0000000000001000.log`), and repeats that LSN in its header.
//! The record starting at LSN `p` in a segment starting at `s` lies at file
//! offset `SEGMENT_HEADER_SIZE + (p − s)`; the segment ends where the next one
//! starts (or, for the last one, at the log's end).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::format::{
    decode_segment_header, encode_segment_header, record_size, RecordHeader, RecordHeaderError, SegmentHeaderError,
    LSN_MAX, RECORD_HEADER_SIZE, SEGMENT_HEADER_SIZE,
};
use crate::error::{Error, Result};
use crate::ids::Lsn;
use crate::io::{StorageFile, Vfs};

const SEGMENT_SUFFIX: &str = ".log";
const SEGMENT_NAME_HEX_DIGITS: usize = 16;

/// The file name of the segment starting at `start`.
pub fn segment_file_name(start: Lsn) -> String {
    format!("{:016x}{SEGMENT_SUFFIX}", start.0)
}

/// The starting LSN a segment file name encodes, or `None` for any other name.
pub fn parse_segment_file_name(name: &str) -> Option<Lsn> {
    let hex = name.strip_suffix(SEGMENT_SUFFIX)?;
    if hex.len() != SEGMENT_NAME_HEX_DIGITS || !hex.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    u64::from_str_radix(hex, 16).ok().map(Lsn)
}

/// The segment files in `dir`, by starting LSN. Other files are ignored; a
/// segment named for a position past [`LSN_MAX`] is refused (no log grows
/// that long, and positions near `u64::MAX` would overflow).
pub fn list_segments(vfs: &dyn Vfs, dir: &Path) -> Result<Vec<(Lsn, PathBuf)>> {
    let names = vfs.list_dir(dir).map_err(|e| Error::io("list log directory", dir, e))?;
    let mut found = Vec::new();
    for name in names {
        if let Some(start) = name.to_str().and_then(parse_segment_file_name) {
            let path = dir.join(&name);
            if start.0 > LSN_MAX {
                return Err(corrupt(
                    &path,
                    0,
                    format!(
                        "the segment is named for LSN {}, past the largest log position {LSN_MAX}",
                        start.0
                    ),
                ));
            }
            found.push((start, path));
        }
    }
    found.sort_by_key(|(start, _)| *start);
    Ok(found)
}

/// Creates the segment starting at `start` in `dir` and makes it durable: the
/// header is written and synced, then the directory is synced. Returns the
/// open file and its path.
pub fn create_segment(
    vfs: &dyn Vfs,
    dir: &Path,
    start: Lsn,
    creation_id: u128,
) -> Result<(Arc<dyn StorageFile>, PathBuf)> {
    let path = dir.join(segment_file_name(start));
    let file = vfs
        .open(&path, true)
        .map_err(|e| Error::io("create log segment", &path, e))?;
    write_segment_header(&*file, &path, start, creation_id)?;
    vfs.sync_dir(dir)
        .map_err(|e| Error::io("fsync log directory", dir, e))?;
    Ok((file, path))
}

/// Writes a fresh header for the segment starting at `start`, cuts the file
/// to just the header and syncs it.
pub fn write_segment_header(file: &dyn StorageFile, path: &Path, start: Lsn, creation_id: u128) -> Result<()> {
    file.set_len(0)
        .map_err(|e| Error::io("truncate log segment", path, e))?;
    file.write_all_at(&encode_segment_header(start, creation_id), 0)
        .map_err(|e| Error::io("write log segment header", path, e))?;
    file.sync_data().map_err(|e| Error::io("fsync log segment", path, e))
}

/// Reads and checks the header of the segment at `path`, which is named for
/// `start` and must belong to the database created as `creation_id`.
pub fn check_segment_header(file: &dyn StorageFile, path: &Path, start: Lsn, creation_id: u128) -> Result<()> {
    let len = file.len().map_err(|e| Error::io("stat log segment", path, e))?;
    if len < SEGMENT_HEADER_SIZE as u64 {
        return Err(corrupt(
            path,
            0,
            format!("{len} bytes is too short for a segment header"),
        ));
    }
    let mut b = [0u8; SEGMENT_HEADER_SIZE];
    file.read_exact_at(&mut b, 0)
        .map_err(|e| Error::io("read log segment header", path, e))?;
    match decode_segment_header(&b) {
        Ok(found) if found.start != start => Err(corrupt(
            path,
            0,
            format!(
                "the header says the segment starts at LSN {}, its name says {}",
                found.start.0, start.0
            ),
        )),
        Ok(found) if found.creation_id != creation_id => Err(Error::ForeignLog {
            path: path.to_path_buf(),
            found: found.creation_id,
            expected: creation_id,
        }),
        Ok(_) => Ok(()),
        Err(SegmentHeaderError::Version(found)) => Err(Error::UnsupportedVersion {
            path: path.to_path_buf(),
            found,
            supported: super::format::WAL_FORMAT_VERSION,
        }),
        Err(e) => Err(corrupt(path, 0, e.to_string())),
    }
}

/// Builds an [`Error::CorruptLog`].
pub fn corrupt(path: &Path, offset: u64, reason: impl Into<String>) -> Error {
    Error::CorruptLog {
        path: path.to_path_buf(),
        offset,
        reason: reason.into(),
    }
}

/// What [`Cursor::next`] found at the cursor's position.
#[derive(Debug)]
pub enum Step {
    /// A valid record. `payload` is `None` when the record ends at or before
    /// the cursor's `skip_to` (then only its header was checked).
    Record {
        /// The record's LSN (its end).
        lsn: Lsn,
        /// How far the log was durable when it was appended (its header's
        /// `durable` field).
        durable: Lsn,
        /// Its payload, checked against its checksum.
        payload: Option<Vec<u8>>,
    },
    /// The cursor reached its limit exactly, at a record boundary.
    End,
    /// No valid record starts at the cursor's position.
    Bad(BadRecord),
}

/// Where and why a cursor stopped at something that is not a valid record.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct BadRecord {
    /// The log position of the bad bytes.
    pub lsn: Lsn,
    /// Their offset in the segment file.
    pub offset: u64,
    /// What is wrong.
    pub reason: String,
    /// True when no crash can produce this (a header whose checksum holds but
    /// whose length is impossible): it is damage even at the tail.
    pub certain: bool,
}

/// Reads the records of one segment in order, up to `limit`, through a small
/// read-ahead buffer. Every record is checked: header checksum, length limit,
/// the stored LSN against its position, completeness, payload checksum.
pub struct Cursor {
    file: Arc<dyn StorageFile>,
    path: PathBuf,
    start: Lsn,
    pos: Lsn,
    limit: Lsn,
    skip_to: Lsn,
    buf: Vec<u8>,
    buf_start: Lsn,
}

/// Bytes read ahead at a time.
const READ_AHEAD_BYTES: usize = 256 << 10;
/// Bytes examined per window when scanning for a valid record after a bad one.
const SCAN_WINDOW_BYTES: usize = 1 << 20;

impl Cursor {
    /// A cursor over the segment starting at `start`, whose records end at
    /// `limit`. Payloads of records ending at or before `skip_to` are neither
    /// read nor checked.
    pub fn new(file: Arc<dyn StorageFile>, path: PathBuf, start: Lsn, limit: Lsn, skip_to: Lsn) -> Cursor {
        debug_assert!(start <= limit);
        Cursor {
            file,
            path,
            start,
            pos: start,
            limit,
            skip_to,
            buf: Vec::new(),
            buf_start: start,
        }
    }

    /// The segment file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The log position of the next record.
    pub fn pos(&self) -> Lsn {
        self.pos
    }

    /// The file offset of log position `lsn` in this segment.
    pub fn file_offset(&self, lsn: Lsn) -> u64 {
        SEGMENT_HEADER_SIZE as u64 + (lsn.0 - self.start.0)
    }

    /// Reads `out.len()` bytes at log position `at`; the range lies below
    /// `limit`.
    fn read(&mut self, at: Lsn, out: &mut [u8]) -> io::Result<()> {
        debug_assert!(at.0 + out.len() as u64 <= self.limit.0);
        if out.len() >= READ_AHEAD_BYTES {
            return self.file.read_exact_at(out, self.file_offset(at));
        }
        let buf_end = self.buf_start.0 + self.buf.len() as u64;
        if at < self.buf_start || at.0 + out.len() as u64 > buf_end {
            let n = (self.limit.0 - at.0).min(READ_AHEAD_BYTES as u64) as usize;
            self.buf.resize(n, 0);
            self.buf_start = at;
            let offset = self.file_offset(at);
            if let Err(e) = self.file.read_exact_at(&mut self.buf, offset) {
                self.buf.clear();
                return Err(e);
            }
        }
        let from = (at.0 - self.buf_start.0) as usize;
        out.copy_from_slice(&self.buf[from..from + out.len()]);
        Ok(())
    }

    /// Examines the record at the cursor and moves past it if it is valid.
    /// `Err` only for an I/O error; damage is [`Step::Bad`].
    pub fn next(&mut self) -> io::Result<Step> {
        let pos = self.pos;
        if pos == self.limit {
            return Ok(Step::End);
        }
        let bad = |this: &Cursor, reason: String, certain: bool| {
            Ok(Step::Bad(BadRecord {
                lsn: pos,
                offset: this.file_offset(pos),
                reason,
                certain,
            }))
        };
        let room = self.limit.0 - pos.0;
        if room < RECORD_HEADER_SIZE as u64 {
            return bad(
                self,
                format!("partial record header ({room} of {RECORD_HEADER_SIZE} bytes)"),
                false,
            );
        }
        let mut hb = [0u8; RECORD_HEADER_SIZE];
        self.read(pos, &mut hb)?;
        let header = match RecordHeader::decode(&hb) {
            Ok(h) => h,
            Err(e @ RecordHeaderError::TooLong(_)) => return bad(self, e.to_string(), true),
            Err(e) => return bad(self, e.to_string(), false),
        };
        let end = Lsn(pos.0 + record_size(header.len));
        if header.lsn != end {
            return bad(
                self,
                format!(
                    "the record says it ends at LSN {}, it would end at {} here (a stale record)",
                    header.lsn.0, end.0
                ),
                false,
            );
        }
        // The completeness check comes before the payload is allocated.
        if end > self.limit {
            return bad(
                self,
                format!(
                    "partial record: {} payload bytes declared, {} present",
                    header.len,
                    room - RECORD_HEADER_SIZE as u64
                ),
                false,
            );
        }
        let payload_start = Lsn(pos.0 + RECORD_HEADER_SIZE as u64);
        if end <= self.skip_to {
            self.pos = end;
            return Ok(Step::Record {
                lsn: end,
                durable: header.durable,
                payload: None,
            });
        }
        let mut payload = vec![0u8; header.len as usize];
        self.read(payload_start, &mut payload)?;
        let computed = crc32c::crc32c(&payload);
        if computed != header.payload_checksum {
            return bad(
                self,
                format!(
                    "payload checksum mismatch: stored {:#010x}, computed {computed:#010x}",
                    header.payload_checksum
                ),
                false,
            );
        }
        self.pos = end;
        Ok(Step::Record {
            lsn: end,
            durable: header.durable,
            payload: Some(payload),
        })
    }

    /// Looks for a valid record starting anywhere in `(after, limit)`, and
    /// returns where the first one starts. A valid record is one whose header
    /// checksum holds, whose LSN matches its position and whose payload is
    /// whole and matches its checksum. Used to tell a torn tail (nothing valid
    /// after the damage) from damage in the middle of the log.
    /// The length and `durable` fields of the record header at `at` (for a
    /// record [`Cursor::find_valid_record_after`] found valid).
    pub fn peek_header(&self, at: Lsn) -> io::Result<(u32, Lsn)> {
        let mut hb = [0u8; RECORD_HEADER_SIZE];
        self.file.read_exact_at(&mut hb, self.file_offset(at))?;
        let (len, _) = RecordHeader::peek_len_lsn(&hb);
        let durable = RecordHeader::decode(&hb).map(|h| h.durable).unwrap_or(Lsn(0));
        Ok((len, durable))
    }

    pub fn find_valid_record_after(&mut self, after: Lsn) -> io::Result<Option<Lsn>> {
        let header_size = RECORD_HEADER_SIZE as u64;
        let mut window_start = after.0 + 1;
        while window_start + header_size <= self.limit.0 {
            // The window holds SCAN_WINDOW_BYTES candidate offsets plus the
            // header of the last candidate.
            let window_end = self.limit.0.min(window_start + SCAN_WINDOW_BYTES as u64 + header_size);
            let mut window = vec![0u8; (window_end - window_start) as usize];
            self.file
                .read_exact_at(&mut window, self.file_offset(Lsn(window_start)))?;
            let candidates = (window.len() + 1 - RECORD_HEADER_SIZE).min(SCAN_WINDOW_BYTES);
            for i in 0..candidates {
                let pos = window_start + i as u64;
                let hb: &[u8; RECORD_HEADER_SIZE] = window[i..i + RECORD_HEADER_SIZE]
                    .try_into()
                    .expect("header-sized slice");
                // Cheap filters first: the LSN must match the position.
                let (len, lsn) = RecordHeader::peek_len_lsn(hb);
                if lsn.0 != pos.wrapping_add(record_size(len)) || lsn > self.limit {
                    continue;
                }
                let Ok(header) = RecordHeader::decode(hb) else {
                    continue;
                };
                let payload_at = i + RECORD_HEADER_SIZE;
                let payload_len = header.len as usize;
                let computed = if payload_at + payload_len <= window.len() {
                    crc32c::crc32c(&window[payload_at..payload_at + payload_len])
                } else {
                    let mut payload = vec![0u8; payload_len];
                    self.file
                        .read_exact_at(&mut payload, self.file_offset(Lsn(pos + header_size)))?;
                    crc32c::crc32c(&payload)
                };
                if computed == header.payload_checksum {
                    return Ok(Some(Lsn(pos)));
                }
            }
            window_start += SCAN_WINDOW_BYTES as u64;
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_names_round_trip_and_other_names_are_ignored() {
        assert_eq!(segment_file_name(Lsn(0x1000)), "0000000000001000.log");
        assert_eq!(parse_segment_file_name("00000000deadbeef.log"), Some(Lsn(0xdead_beef)));
        for other in [
            "0000000000001000.tmp",
            "1000.log",
            "00000000DEADBEEF.log",
            "000000000000100g.log",
            "+000000000001000.log",
        ] {
            assert_eq!(parse_segment_file_name(other), None, "{other}");
        }
    }
}
