//! [`WalReader`]: the records of the log from a given LSN on, in order.
//!
//! A reader works on a snapshot taken by [`Wal::read_from`](super::Wal::read_from):
//! the segments and the end of the log at that moment. It reads the segment
//! files themselves (appended records are written to the file at append time,
//! so records not yet durable are seen too) and checks every record it
//! returns; damage is [`Error::CorruptLog`] naming the file and offset. After
//! an error the reader yields nothing more.

use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use super::segment::{check_segment_header, corrupt, Cursor, Step};
use crate::error::{Error, Result};
use crate::ids::Lsn;
use crate::io::{StorageFile, Vfs};

/// One segment as the reader's snapshot saw it.
#[derive(Debug)]
pub(super) struct SegmentSnapshot {
    /// The LSN of its first record byte.
    pub start: Lsn,
    /// Where its records end (the next segment's start, or the log's end).
    pub end: Lsn,
    /// Its file.
    pub path: PathBuf,
    /// The open file, for the segment being written; others are opened when
    /// the reader reaches them.
    pub file: Option<Arc<dyn StorageFile>>,
}

/// Iterates over `(record LSN, payload)` for every record whose LSN (end) is
/// greater than the `from` given to [`Wal::read_from`](super::Wal::read_from),
/// up to the end of the log when the reader was made.
pub struct WalReader {
    vfs: Arc<dyn Vfs>,
    segments: Vec<SegmentSnapshot>,
    next_segment_idx: usize,
    cursor: Option<Cursor>,
    from: Lsn,
    done: bool,
    creation_id: u128,
}

impl std::fmt::Debug for WalReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WalReader")
            .field("from", &self.from)
            .field("segments", &self.segments.len())
            .field("next_segment_idx", &self.next_segment_idx)
            .field("done", &self.done)
            .finish()
    }
}

impl WalReader {
    /// A reader over `segments` (in order, contiguous, the first starting at
    /// or before `from`).
    pub(super) fn new(vfs: Arc<dyn Vfs>, segments: Vec<SegmentSnapshot>, from: Lsn, creation_id: u128) -> WalReader {
        debug_assert!(segments.windows(2).all(|w| w[0].end == w[1].start));
        debug_assert!(segments.iter().take(1).all(|s| s.start <= from));
        WalReader {
            vfs,
            segments,
            next_segment_idx: 0,
            cursor: None,
            from,
            done: false,
            creation_id,
        }
    }

    /// The next record with its header's `durable` field (how far the log
    /// was durable when it was appended): what a test of the log's promises
    /// reads. `None` at the end.
    #[cfg(test)]
    pub(crate) fn next_with_durable(&mut self) -> Option<Result<(Lsn, Lsn, Vec<u8>)>> {
        self.advance().transpose()
    }

    /// The next record and its `durable` field, `Ok(None)` at the end.
    fn advance(&mut self) -> Result<Option<(Lsn, Lsn, Vec<u8>)>> {
        loop {
            let cursor = match &mut self.cursor {
                Some(c) => c,
                None => {
                    let Some(seg) = self.segments.get(self.next_segment_idx) else {
                        return Ok(None);
                    };
                    self.next_segment_idx += 1;
                    let file = match &seg.file {
                        Some(f) => f.clone(),
                        None => self.vfs.open(&seg.path, false).map_err(|e| {
                            if e.kind() == io::ErrorKind::NotFound {
                                Error::InvalidArgument(format!(
                                    "log segment {} (LSNs {}..{}) was removed while being read",
                                    seg.path.display(),
                                    seg.start.0,
                                    seg.end.0
                                ))
                            } else {
                                Error::io("open log segment", &seg.path, e)
                            }
                        })?,
                    };
                    check_segment_header(&*file, &seg.path, seg.start, self.creation_id)?;
                    self.cursor
                        .insert(Cursor::new(file, seg.path.clone(), seg.start, seg.end, self.from))
                }
            };
            let step = cursor
                .next()
                .map_err(|e| Error::io("read log segment", cursor.path(), e))?;
            match step {
                Step::Record {
                    lsn,
                    durable,
                    payload: Some(payload),
                } => {
                    debug_assert!(lsn > self.from);
                    return Ok(Some((lsn, durable, payload)));
                }
                Step::Record { payload: None, .. } => {}
                Step::End => self.cursor = None,
                Step::Bad(bad) => return Err(corrupt(cursor.path(), bad.offset, bad.reason)),
            }
        }
    }
}

impl Iterator for WalReader {
    type Item = Result<(Lsn, Vec<u8>)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.advance() {
            Ok(Some((lsn, _, payload))) => Some(Ok((lsn, payload))),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}
