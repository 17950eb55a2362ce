//! The log decoders on arbitrary bytes: the segment header, the record
//! header, and every redo record payload. None may panic; a decoded PAGE
//! record applied to a page must either apply or fail cleanly.

use cairn_storage::wal::format::{self, RecordHeader, RECORD_HEADER_SIZE, SEGMENT_HEADER_SIZE};
use cairn_storage::wal::redo::{self, Redo};
use cairn_storage::{Lsn, PageId};

/// Runs the target on one input; panics only on a bug.
pub fn run(data: &[u8]) {
    if data.len() >= SEGMENT_HEADER_SIZE {
        let b: &[u8; SEGMENT_HEADER_SIZE] = data[..SEGMENT_HEADER_SIZE].try_into().unwrap();
        let _ = format::decode_segment_header(b);
    }
    if data.len() >= RECORD_HEADER_SIZE {
        let b: &[u8; RECORD_HEADER_SIZE] = data[..RECORD_HEADER_SIZE].try_into().unwrap();
        let _ = RecordHeader::decode(b);
        let _ = RecordHeader::peek_len_lsn(b);
    }
    if let Ok(Redo::Page { page, full, runs, .. }) = Redo::decode(data, Lsn(1)) {
        let mut buf = vec![0u8; 4096];
        let _ = redo::apply(&mut buf, page, full, &runs, Lsn(2));
        let _ = PageId(0);
    }
}
