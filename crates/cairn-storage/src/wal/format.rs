//! The log's bytes on disk: the segment header and the record header.
//!
//! All integers are little-endian and of fixed width.
//!
//! ```text
//!  segment header (SEGMENT_HEADER_SIZE = 48 bytes, at file offset 0)
//!  offset size field
//!  0      8    magic           b"CAIRNWAL"
//!  8      4    format_version  WAL_FORMAT_VERSION (2)
//!  12     4    flags           0
//!  16     8    start_lsn       LSN of the first record byte; also the file's name
//!  24     16   creation_id     the database's creation id (as in the manifest
//!                              and the volume header): a log is never replayed
//!                              onto another database's volume
//!  40     4    reserved        0
//!  44     4    checksum        CRC32C of bytes 0..44
//!
//!  record (RECORD_HEADER_SIZE = 28 bytes + len, at file offset 48 + (start − start_lsn))
//!  offset size field
//!  0      4    header_checksum  CRC32C of bytes 4..28
//!  4      4    len              payload bytes, ≤ RECORD_LEN_MAX
//!  8      8    lsn              the record's own LSN: start + 28 + len (its end)
//!  16     8    durable          the log was durable (fsynced) up to this LSN
//!                               when the record was appended
//!  24     4    payload_checksum CRC32C of the payload
//!  28     len  payload
//! ```
//!
//! The header has its own checksum so that its length can be trusted (and
//! bounds-checked) before any payload is read or any buffer allocated, and so
//! that scanning for a valid record after a damaged one costs a 16-byte
//! checksum per candidate offset. The `lsn` field must equal the position the
//! record is found at; a well-formed record anywhere else (stale bytes in a
//! reused file, a record copied into a payload) is never taken as valid.

use crate::bytes::{get_u128, get_u32, get_u64, put_u128, put_u32, put_u64};
use crate::ids::Lsn;

/// Bytes of the segment header at the start of every segment file.
pub const SEGMENT_HEADER_SIZE: usize = 48;
/// Bytes of the header in front of every record's payload.
pub const RECORD_HEADER_SIZE: usize = 28;
/// The largest log position a segment may start at (2^62 bytes of log):
/// positions read from file names and headers are refused past it, so sums
/// of a position and a length never overflow.
pub const LSN_MAX: u64 = 1 << 62;
/// The largest payload one record may carry (64 MiB).
pub const RECORD_LEN_MAX: u32 = 64 << 20;
/// The log format version this build reads and writes.
pub const WAL_FORMAT_VERSION: u32 = 2;
/// The magic at the start of every segment file.
pub const SEGMENT_MAGIC: &[u8; 8] = b"CAIRNWAL";

const SEG_OFF_MAGIC: usize = 0;
const SEG_OFF_VERSION: usize = 8;
const SEG_OFF_FLAGS: usize = 12;
const SEG_OFF_START: usize = 16;
const SEG_OFF_CREATION_ID: usize = 24;
const SEG_OFF_RESERVED: usize = 40;
const SEG_OFF_CHECKSUM: usize = 44;
const _: () = assert!(SEG_OFF_MAGIC + 8 == SEG_OFF_VERSION);
const _: () = assert!(SEG_OFF_FLAGS + 4 == SEG_OFF_START);
const _: () = assert!(SEG_OFF_START + 8 == SEG_OFF_CREATION_ID);
const _: () = assert!(SEG_OFF_CREATION_ID + 16 == SEG_OFF_RESERVED);
const _: () = assert!(SEG_OFF_CHECKSUM + 4 == SEGMENT_HEADER_SIZE);

const REC_OFF_CHECKSUM: usize = 0;
const REC_OFF_LEN: usize = 4;
const REC_OFF_LSN: usize = 8;
const REC_OFF_DURABLE: usize = 16;
const REC_OFF_PAYLOAD_CHECKSUM: usize = 24;
const _: () = assert!(REC_OFF_CHECKSUM + 4 == REC_OFF_LEN);
const _: () = assert!(REC_OFF_LEN + 4 == REC_OFF_LSN);
const _: () = assert!(REC_OFF_LSN + 8 == REC_OFF_DURABLE);
const _: () = assert!(REC_OFF_DURABLE + 8 == REC_OFF_PAYLOAD_CHECKSUM);
const _: () = assert!(REC_OFF_PAYLOAD_CHECKSUM + 4 == RECORD_HEADER_SIZE);
// A whole record (header and largest payload) fits a u32 and a usize on every
// supported platform, so sizes computed from a verified length never overflow.
const _: () = assert!(RECORD_LEN_MAX as u64 + RECORD_HEADER_SIZE as u64 <= u32::MAX as u64);

/// Bytes a record with a `len`-byte payload takes in the log.
pub fn record_size(len: u32) -> u64 {
    RECORD_HEADER_SIZE as u64 + u64::from(len)
}

/// A segment header's fields.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct SegmentHeader {
    /// The LSN of the segment's first record byte.
    pub start: Lsn,
    /// The creation id of the database the log belongs to.
    pub creation_id: u128,
}

/// Encodes the header of a segment whose first record starts at `start`,
/// in the log of the database created as `creation_id`.
pub fn encode_segment_header(start: Lsn, creation_id: u128) -> [u8; SEGMENT_HEADER_SIZE] {
    let mut b = [0u8; SEGMENT_HEADER_SIZE];
    b[SEG_OFF_MAGIC..SEG_OFF_VERSION].copy_from_slice(SEGMENT_MAGIC);
    put_u32(&mut b, SEG_OFF_VERSION, WAL_FORMAT_VERSION);
    put_u64(&mut b, SEG_OFF_START, start.0);
    put_u128(&mut b, SEG_OFF_CREATION_ID, creation_id);
    let sum = crc32c::crc32c(&b[..SEG_OFF_CHECKSUM]);
    put_u32(&mut b, SEG_OFF_CHECKSUM, sum);
    b
}

/// Why a segment header was refused.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum SegmentHeaderError {
    /// The file does not start with [`SEGMENT_MAGIC`]: not a Cairn log segment.
    BadMagic,
    /// Written by another format version.
    Version(u32),
    /// The header's bytes are damaged.
    Checksum {
        /// The checksum stored in the header.
        stored: u32,
        /// The checksum of the bytes read.
        computed: u32,
    },
    /// A field that must be zero is not.
    Reserved,
}

impl std::fmt::Display for SegmentHeaderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SegmentHeaderError::BadMagic => write!(f, "not a Cairn log segment (bad magic)"),
            SegmentHeaderError::Version(v) => write!(f, "log format version {v}"),
            SegmentHeaderError::Checksum { stored, computed } => write!(
                f,
                "segment header checksum mismatch: stored {stored:#010x}, computed {computed:#010x}"
            ),
            SegmentHeaderError::Reserved => write!(f, "segment header has nonzero reserved bits"),
        }
    }
}

/// Decodes a segment header, returning the segment's starting LSN.
pub fn decode_segment_header(b: &[u8; SEGMENT_HEADER_SIZE]) -> Result<SegmentHeader, SegmentHeaderError> {
    if &b[SEG_OFF_MAGIC..SEG_OFF_VERSION] != SEGMENT_MAGIC {
        return Err(SegmentHeaderError::BadMagic);
    }
    let stored = get_u32(b, SEG_OFF_CHECKSUM);
    let computed = crc32c::crc32c(&b[..SEG_OFF_CHECKSUM]);
    if stored != computed {
        return Err(SegmentHeaderError::Checksum { stored, computed });
    }
    let version = get_u32(b, SEG_OFF_VERSION);
    if version != WAL_FORMAT_VERSION {
        return Err(SegmentHeaderError::Version(version));
    }
    if get_u32(b, SEG_OFF_FLAGS) != 0 || get_u32(b, SEG_OFF_RESERVED) != 0 {
        return Err(SegmentHeaderError::Reserved);
    }
    Ok(SegmentHeader {
        start: Lsn(get_u64(b, SEG_OFF_START)),
        creation_id: get_u128(b, SEG_OFF_CREATION_ID),
    })
}

/// A record's header, decoded.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct RecordHeader {
    /// Payload bytes.
    pub len: u32,
    /// The record's LSN: the log position just past its end.
    pub lsn: Lsn,
    /// How far the log was durable when the record was appended. A valid
    /// record whose `durable` is past a damaged one proves the damage lies
    /// in bytes that had been fsynced: damage, not a torn tail.
    pub durable: Lsn,
    /// CRC32C of the payload.
    pub payload_checksum: u32,
}

/// Why a record header was refused.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum RecordHeaderError {
    /// The header's bytes are damaged (or were never written: zeros).
    Checksum {
        /// The checksum stored in the header.
        stored: u32,
        /// The checksum of the bytes read.
        computed: u32,
    },
    /// The checksum holds but the length is over [`RECORD_LEN_MAX`]: no crash
    /// produces this, only damage or a foreign writer.
    TooLong(u32),
}

impl std::fmt::Display for RecordHeaderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RecordHeaderError::Checksum { stored, computed } => write!(
                f,
                "record header checksum mismatch: stored {stored:#010x}, computed {computed:#010x}"
            ),
            RecordHeaderError::TooLong(len) => write!(f, "record length {len} exceeds the maximum of {RECORD_LEN_MAX}"),
        }
    }
}

impl RecordHeader {
    /// The header of a record carrying `payload` that starts at `start`,
    /// appended when the log was durable up to `durable`.
    pub fn for_payload(start: Lsn, durable: Lsn, payload: &[u8]) -> RecordHeader {
        let len = u32::try_from(payload.len()).expect("payload length checked by the caller");
        assert!(len <= RECORD_LEN_MAX, "payload length checked by the caller");
        debug_assert!(
            durable <= start,
            "durable {durable:?} past the record's start {start:?}"
        );
        RecordHeader {
            len,
            lsn: Lsn(start.0 + record_size(len)),
            durable,
            payload_checksum: crc32c::crc32c(payload),
        }
    }

    /// Encodes the header.
    pub fn encode(&self) -> [u8; RECORD_HEADER_SIZE] {
        let mut b = [0u8; RECORD_HEADER_SIZE];
        b[REC_OFF_LEN..REC_OFF_LSN].copy_from_slice(&self.len.to_le_bytes());
        b[REC_OFF_LSN..REC_OFF_DURABLE].copy_from_slice(&self.lsn.0.to_le_bytes());
        b[REC_OFF_DURABLE..REC_OFF_PAYLOAD_CHECKSUM].copy_from_slice(&self.durable.0.to_le_bytes());
        b[REC_OFF_PAYLOAD_CHECKSUM..].copy_from_slice(&self.payload_checksum.to_le_bytes());
        let sum = crc32c::crc32c(&b[REC_OFF_LEN..]);
        b[REC_OFF_CHECKSUM..REC_OFF_LEN].copy_from_slice(&sum.to_le_bytes());
        b
    }

    /// The `(len, lsn)` fields without any check: a cheap filter when
    /// scanning for a record at unknown offsets.
    pub fn peek_len_lsn(b: &[u8; RECORD_HEADER_SIZE]) -> (u32, Lsn) {
        (get_u32(b, REC_OFF_LEN), Lsn(get_u64(b, REC_OFF_LSN)))
    }

    /// Decodes and checks a header: its checksum, then its length against
    /// [`RECORD_LEN_MAX`]. The caller checks the LSN against the position.
    pub fn decode(b: &[u8; RECORD_HEADER_SIZE]) -> Result<RecordHeader, RecordHeaderError> {
        let stored = get_u32(b, REC_OFF_CHECKSUM);
        let computed = crc32c::crc32c(&b[REC_OFF_LEN..]);
        if stored != computed {
            return Err(RecordHeaderError::Checksum { stored, computed });
        }
        let (len, lsn) = RecordHeader::peek_len_lsn(b);
        if len > RECORD_LEN_MAX {
            return Err(RecordHeaderError::TooLong(len));
        }
        Ok(RecordHeader {
            len,
            lsn,
            durable: Lsn(get_u64(b, REC_OFF_DURABLE)),
            payload_checksum: get_u32(b, REC_OFF_PAYLOAD_CHECKSUM),
        })
    }
}

/// Appends the record for `payload`, starting at log position `start` while
/// the log is durable up to `durable`, to `out`; returns its LSN (its end).
pub fn encode_record(out: &mut Vec<u8>, start: Lsn, durable: Lsn, payload: &[u8]) -> Lsn {
    let header = RecordHeader::for_payload(start, durable, payload);
    out.extend_from_slice(&header.encode());
    out.extend_from_slice(payload);
    header.lsn
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_header_round_trips_and_refuses_damage() {
        let b = encode_segment_header(Lsn(0x1234), 0xfeed_u128 << 64);
        assert_eq!(
            decode_segment_header(&b),
            Ok(SegmentHeader {
                start: Lsn(0x1234),
                creation_id: 0xfeed_u128 << 64
            })
        );
        let mut bad = b;
        bad[17] ^= 1;
        assert!(matches!(
            decode_segment_header(&bad),
            Err(SegmentHeaderError::Checksum { .. })
        ));
        bad = b;
        bad[0] = b'X';
        assert_eq!(decode_segment_header(&bad), Err(SegmentHeaderError::BadMagic));
        assert_eq!(
            decode_segment_header(&[0u8; SEGMENT_HEADER_SIZE]),
            Err(SegmentHeaderError::BadMagic)
        );
    }

    #[test]
    fn record_header_round_trips_and_refuses_damage_and_overlong_lengths() {
        let mut out = Vec::new();
        let end = encode_record(&mut out, Lsn(100), Lsn(60), b"hello");
        assert_eq!(end, Lsn(100 + 28 + 5));
        let hb: [u8; RECORD_HEADER_SIZE] = out[..RECORD_HEADER_SIZE].try_into().unwrap();
        let h = RecordHeader::decode(&hb).unwrap();
        assert_eq!((h.len, h.lsn, h.durable), (5, end, Lsn(60)));
        assert_eq!(h.payload_checksum, crc32c::crc32c(b"hello"));

        let mut bad = hb;
        bad[REC_OFF_LEN] ^= 0x40;
        assert!(matches!(
            RecordHeader::decode(&bad),
            Err(RecordHeaderError::Checksum { .. })
        ));
        assert!(RecordHeader::decode(&[0u8; RECORD_HEADER_SIZE]).is_err());

        // A header whose checksum holds but whose length is absurd.
        let forged = RecordHeader {
            len: u32::MAX,
            lsn: Lsn(7),
            durable: Lsn(0),
            payload_checksum: 0,
        }
        .encode();
        assert_eq!(RecordHeader::decode(&forged), Err(RecordHeaderError::TooLong(u32::MAX)));
    }
}
