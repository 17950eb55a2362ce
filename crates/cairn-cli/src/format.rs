//! The self-describing records `cairn torture` writes and `cairn verify`
//! checks, and the commit digest that names what a transaction wrote.
//!
//! Nothing here trusts the database: a record carries everything needed to
//! tell whether it is whole, which transaction wrote it, and what else that
//! transaction wrote, so a verifier can check durability and atomicity from
//! the records and the log of acknowledged commits alone.
//!
//! # Records
//!
//! Every object of the `torture` group is a record (all integers
//! little-endian):
//!
//! ```text
//! offset  size  field
//!      0     8  magic "CAIRNTR1"
//!      8     1  kind: 1 = object, 2 = tombstone
//!      9     1  reserved, 0
//!     10     2  n: write-set entries
//!     12     4  checksum: CRC32C of the whole record with these 4 bytes zero
//!     16     8  key: unique for ever (run nonce << 32 | thread << 24 | counter)
//!     24     8  version: 1 at creation, +1 on every write; for a tombstone,
//!               the version the object had when it was deleted
//!     32     8  txid: the transaction that wrote this record
//!     40     8  len: the record's length in bytes
//!     48  16·n  write set: (key u64, version u64) of every object the
//!               transaction wrote; version u64::MAX marks a key it deleted
//!  48+16n  ...  filler (objects only): byte i is byte i % 8 of
//!               splitmix64(seed(key, version, len) ^ (i / 8))
//! ```
//!
//! Invariants a decoder checks: the magic, a known kind, `len` equals the
//! record's length, the write set fits, the checksum, the filler (so a torn
//! write or a page from another version is caught even where the checksum
//! would be unlucky), no key twice in the write set, and the record's own
//! entry in it (`(key, version)` for an object, `(key, DELETED)` for a
//! tombstone). A tombstone has no filler (`len = 48 + 16·n`).
//!
//! A **tombstone** is created in the same transaction that deletes an
//! object. Keys are never re-created, so a tombstone proves the deletion
//! committed even when the process was killed before it could acknowledge
//! it; without it, an unacknowledged delete would look exactly like a lost
//! object to the verifier.
//!
//! # Digest
//!
//! After each commit, torture prints `committed <txid> <digest>`, where the
//! digest lists the write set in order, comma-separated, without spaces:
//! `k<key as 16 hex digits>=v<version in decimal>:<record checksum as 8 hex
//! digits>` for a write and `k<key>=del` for a delete, e.g.
//! `committed 812 k5f3a09c100000007=v3:9ae0c2d1,k5f3a09c101000002=del`.
//!
//! The txid is the writing process's own name for the transaction: a
//! page-server client numbers its transactions from 1, so two processes
//! writing through one server print the same txids. A transaction is
//! therefore told apart by its txid *and* its write set, which every
//! record and every commit line carry.
//!
//! # Run records
//!
//! Every torture run registers in the group `torture-runs` (see
//! [`crate::torture`]) with one 32-byte record, little-endian:
//!
//! ```text
//! offset  size  field
//!      0     8  magic "CAIRNRN1"
//!      8     4  nonce: the run's key space (keys are nonce << 32 | …)
//!     12     4  owner: the nonce of the run that now owns these keys
//!               (the nonce itself until another run adopts them)
//!     16     8  token: random, tells two registrations of a nonce apart
//!     24     1  state: 1 = running (or killed), 2 = ended
//!     25     3  reserved, 0
//!     28     4  checksum: CRC32C of the record with these 4 bytes zero
//! ```

use std::fmt;

/// Magic bytes that open every record.
pub const MAGIC: [u8; 8] = *b"CAIRNTR1";
/// Bytes of the fixed header.
pub const HEADER_SIZE: usize = 48;
/// Bytes of one write-set entry.
pub const ENTRY_SIZE: usize = 16;
/// The version that marks a deleted key in a write set.
pub const DELETED: u64 = u64::MAX;
/// The most write-set entries a record may carry (torture writes far fewer).
pub const ENTRIES_MAX: usize = 64;

const CHECKSUM_AT: usize = 12;
const _: () = assert!(HEADER_SIZE == 8 + 1 + 1 + 2 + 4 + 8 + 8 + 8 + 8);

/// What a record is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A live object: header, write set, filler.
    Object,
    /// The proof that the object with this key was deleted.
    Tombstone,
}

impl Kind {
    fn code(self) -> u8 {
        match self {
            Kind::Object => 1,
            Kind::Tombstone => 2,
        }
    }
}

/// One entry of a transaction's write set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Entry {
    /// The object's key.
    pub key: u64,
    /// The version written, or [`DELETED`].
    pub version: u64,
}

impl Entry {
    /// True if this entry records a deletion.
    pub fn is_delete(self) -> bool {
        self.version == DELETED
    }
}

/// A decoded record header and write set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Object or tombstone.
    pub kind: Kind,
    /// The object's key.
    pub key: u64,
    /// The object's version (for a tombstone, the version deleted).
    pub version: u64,
    /// The transaction that wrote the record.
    pub txid: u64,
    /// The record's length in bytes.
    pub len: u64,
    /// The record's CRC32C.
    pub checksum: u32,
    /// Everything the writing transaction wrote and deleted.
    pub write_set: Vec<Entry>,
}

/// Why bytes are not a whole record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Damage(pub String);

impl fmt::Display for Damage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn damage<T>(why: impl Into<String>) -> Result<T, Damage> {
    Err(Damage(why.into()))
}

/// The smallest object record that can carry `entries` write-set entries.
pub fn object_len_min(entries: usize) -> u64 {
    (HEADER_SIZE + ENTRY_SIZE * entries) as u64
}

/// SplitMix64's output function: a cheap, well-mixed bijection on u64.
pub fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn filler_seed(key: u64, version: u64, len: u64) -> u64 {
    splitmix64(key ^ splitmix64(version ^ splitmix64(len)))
}

/// Writes the filler bytes for positions `from..from + out.len()` of the
/// object `(key, version, len)` into `out`.
pub fn fill(out: &mut [u8], from: usize, key: u64, version: u64, len: u64) {
    let seed = filler_seed(key, version, len);
    let mut pos = from;
    let mut i = 0;
    while i < out.len() {
        let word = splitmix64(seed ^ (pos / 8) as u64).to_le_bytes();
        let take = (8 - pos % 8).min(out.len() - i);
        out[i..i + take].copy_from_slice(&word[pos % 8..pos % 8 + take]);
        i += take;
        pos += take;
    }
}

/// Encodes a record. For an object `len` is its total length and must be at
/// least [`object_len_min`] of the write set; a tombstone's length is fixed
/// by its write set and `len` is ignored.
///
/// # Panics
///
/// If the write set is too long or the object too short (a torture bug).
pub fn encode(kind: Kind, key: u64, version: u64, txid: u64, len: u64, write_set: &[Entry]) -> Vec<u8> {
    assert!(write_set.len() <= ENTRIES_MAX, "write set too long");
    let head = HEADER_SIZE + ENTRY_SIZE * write_set.len();
    let len = match kind {
        Kind::Object => len,
        Kind::Tombstone => head as u64,
    };
    assert!(len >= head as u64, "object of {len} bytes cannot hold its header");
    let len_usize = usize::try_from(len).expect("record length fits in memory");
    let mut b = vec![0u8; len_usize];
    b[0..8].copy_from_slice(&MAGIC);
    b[8] = kind.code();
    b[10..12].copy_from_slice(&(write_set.len() as u16).to_le_bytes());
    b[16..24].copy_from_slice(&key.to_le_bytes());
    b[24..32].copy_from_slice(&version.to_le_bytes());
    b[32..40].copy_from_slice(&txid.to_le_bytes());
    b[40..48].copy_from_slice(&len.to_le_bytes());
    for (i, e) in write_set.iter().enumerate() {
        let at = HEADER_SIZE + ENTRY_SIZE * i;
        b[at..at + 8].copy_from_slice(&e.key.to_le_bytes());
        b[at + 8..at + 16].copy_from_slice(&e.version.to_le_bytes());
    }
    if kind == Kind::Object {
        fill(&mut b[head..], head, key, version, len);
    }
    let crc = crc32c::crc32c(&b);
    b[CHECKSUM_AT..CHECKSUM_AT + 4].copy_from_slice(&crc.to_le_bytes());
    b
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// The key and version of a record from its first [`HEADER_SIZE`] bytes,
/// after checking only the magic (torture's cheap read-back before a write).
pub fn peek_header(b: &[u8]) -> Option<(u64, u64)> {
    (b.len() >= HEADER_SIZE && b[0..8] == MAGIC).then(|| (u64_at(b, 16), u64_at(b, 24)))
}

/// Decodes and fully checks a record (see the module docs for the checks).
pub fn decode(b: &[u8]) -> Result<Record, Damage> {
    if b.len() < HEADER_SIZE {
        return damage(format!("{} bytes, shorter than a header", b.len()));
    }
    if b[0..8] != MAGIC {
        return damage("bad magic");
    }
    let kind = match b[8] {
        1 => Kind::Object,
        2 => Kind::Tombstone,
        k => return damage(format!("unknown kind {k}")),
    };
    if b[9] != 0 {
        return damage("reserved byte is not zero");
    }
    let n = usize::from(u16::from_le_bytes([b[10], b[11]]));
    let stored_crc = u32::from_le_bytes(b[CHECKSUM_AT..CHECKSUM_AT + 4].try_into().expect("4 bytes"));
    let key = u64_at(b, 16);
    let version = u64_at(b, 24);
    let txid = u64_at(b, 32);
    let len = u64_at(b, 40);
    if len != b.len() as u64 {
        return damage(format!("header says {len} bytes, the object has {}", b.len()));
    }
    if n > ENTRIES_MAX {
        return damage(format!("{n} write-set entries, more than {ENTRIES_MAX}"));
    }
    let head = HEADER_SIZE + ENTRY_SIZE * n;
    if head > b.len() {
        return damage(format!("write set of {n} entries runs past the end"));
    }
    if kind == Kind::Tombstone && head != b.len() {
        return damage("tombstone with trailing bytes");
    }
    let mut crc = crc32c::crc32c(&b[..CHECKSUM_AT]);
    crc = crc32c::crc32c_append(crc, &[0u8; 4]);
    crc = crc32c::crc32c_append(crc, &b[CHECKSUM_AT + 4..]);
    if crc != stored_crc {
        return damage(format!("checksum {crc:08x}, header says {stored_crc:08x}"));
    }
    if kind == Kind::Object {
        let mut want = vec![0u8; b.len() - head];
        fill(&mut want, head, key, version, len);
        if let Some(i) = want.iter().zip(&b[head..]).position(|(w, g)| w != g) {
            return damage(format!("filler differs at byte {}", head + i));
        }
        if version == 0 || version == DELETED {
            return damage(format!("object with version {version}"));
        }
    }
    let write_set: Vec<Entry> = (0..n)
        .map(|i| {
            let at = HEADER_SIZE + ENTRY_SIZE * i;
            Entry {
                key: u64_at(b, at),
                version: u64_at(b, at + 8),
            }
        })
        .collect();
    let mut keys: Vec<u64> = write_set.iter().map(|e| e.key).collect();
    keys.sort_unstable();
    if keys.windows(2).any(|w| w[0] == w[1]) {
        return damage("a key appears twice in the write set");
    }
    let own = match kind {
        Kind::Object => version,
        Kind::Tombstone => DELETED,
    };
    if !write_set.contains(&Entry { key, version: own }) {
        return damage("the write set does not name the record itself");
    }
    Ok(Record {
        kind,
        key,
        version,
        txid,
        len,
        checksum: stored_crc,
        write_set,
    })
}

/// Magic bytes that open every run record.
pub const RUN_MAGIC: [u8; 8] = *b"CAIRNRN1";
/// Bytes of a run record.
pub const RUN_SIZE: usize = 32;
const RUN_CHECKSUM_AT: usize = 28;

/// What became of a run, as far as its keys go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunState {
    /// Its owner is running, or was killed (nobody can tell which).
    Running,
    /// Its owner ended normally and gave its keys up: any run may adopt them.
    Ended,
}

/// A run's registration: which run owns the keys of `nonce` and whether
/// that run is known to have ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunRecord {
    /// The key space (the high 32 bits of its keys).
    pub nonce: u32,
    /// The nonce of the run that owns the key space now.
    pub owner: u32,
    /// Random: two registrations of one nonce differ in it.
    pub token: u64,
    /// Running or ended.
    pub state: RunState,
}

/// Encodes a run record ([`RUN_SIZE`] bytes).
pub fn encode_run(r: &RunRecord) -> Vec<u8> {
    let mut b = vec![0u8; RUN_SIZE];
    b[0..8].copy_from_slice(&RUN_MAGIC);
    b[8..12].copy_from_slice(&r.nonce.to_le_bytes());
    b[12..16].copy_from_slice(&r.owner.to_le_bytes());
    b[16..24].copy_from_slice(&r.token.to_le_bytes());
    b[24] = match r.state {
        RunState::Running => 1,
        RunState::Ended => 2,
    };
    let crc = crc32c::crc32c(&b);
    b[RUN_CHECKSUM_AT..RUN_CHECKSUM_AT + 4].copy_from_slice(&crc.to_le_bytes());
    b
}

/// Decodes and checks a run record.
pub fn decode_run(b: &[u8]) -> Result<RunRecord, Damage> {
    if b.len() != RUN_SIZE {
        return damage(format!("run record of {} bytes, not {RUN_SIZE}", b.len()));
    }
    if b[0..8] != RUN_MAGIC {
        return damage("bad run record magic");
    }
    let mut z = b.to_vec();
    z[RUN_CHECKSUM_AT..RUN_CHECKSUM_AT + 4].fill(0);
    let stored = u32::from_le_bytes(b[RUN_CHECKSUM_AT..].try_into().expect("4 bytes"));
    let crc = crc32c::crc32c(&z);
    if crc != stored {
        return damage(format!("run record checksum {crc:08x}, header says {stored:08x}"));
    }
    if b[25..28] != [0, 0, 0] {
        return damage("run record reserved bytes are not zero");
    }
    let state = match b[24] {
        1 => RunState::Running,
        2 => RunState::Ended,
        s => return damage(format!("unknown run state {s}")),
    };
    let u32_at = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"));
    Ok(RunRecord {
        nonce: u32_at(8),
        owner: u32_at(12),
        token: u64_at(b, 16),
        state,
    })
}

/// One entry of a commit digest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DigestEntry {
    /// The transaction wrote `version` of `key`, a record with checksum `crc`.
    Write {
        /// The object's key.
        key: u64,
        /// The version written.
        version: u64,
        /// The checksum of the record written.
        crc: u32,
    },
    /// The transaction deleted `key`.
    Delete {
        /// The object's key.
        key: u64,
    },
}

/// Formats a digest (see the module docs).
pub fn format_digest(entries: &[DigestEntry]) -> String {
    let parts: Vec<String> = entries
        .iter()
        .map(|e| match *e {
            DigestEntry::Write { key, version, crc } => format!("k{key:016x}=v{version}:{crc:08x}"),
            DigestEntry::Delete { key } => format!("k{key:016x}=del"),
        })
        .collect();
    parts.join(",")
}

fn parse_hex_exact(s: &str, digits: usize) -> Option<u64> {
    (s.len() == digits && s.bytes().all(|c| c.is_ascii_hexdigit()))
        .then(|| u64::from_str_radix(s, 16).ok())
        .flatten()
}

fn parse_dec(s: &str) -> Option<u64> {
    (!s.is_empty() && s.bytes().all(|c| c.is_ascii_digit()))
        .then(|| s.parse().ok())
        .flatten()
}

/// Parses a digest; `None` if any part of it is malformed.
pub fn parse_digest(s: &str) -> Option<Vec<DigestEntry>> {
    s.split(',')
        .map(|part| {
            let (key, what) = part.strip_prefix('k')?.split_once('=')?;
            let key = parse_hex_exact(key, 16)?;
            if what == "del" {
                return Some(DigestEntry::Delete { key });
            }
            let (version, crc) = what.strip_prefix('v')?.split_once(':')?;
            Some(DigestEntry::Write {
                key,
                version: parse_dec(version)?,
                crc: u32::try_from(parse_hex_exact(crc, 8)?).ok()?,
            })
        })
        .collect()
}

/// An acknowledged commit, as read back from a torture log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Commit {
    /// The transaction's id.
    pub txid: u64,
    /// What it wrote and deleted.
    pub entries: Vec<DigestEntry>,
}

/// Formats the line torture prints after a commit (without the newline).
pub fn format_commit_line(txid: u64, entries: &[DigestEntry]) -> String {
    format!("committed {txid} {}", format_digest(entries))
}

/// Parses one log line: `None` if it is not a commit line at all, `Some(Err)`
/// if it starts like one but is malformed (a line torn by a kill and
/// continued by the next run), else the commit.
pub fn parse_commit_line(line: &str) -> Option<Result<Commit, String>> {
    let rest = line.strip_prefix("committed")?;
    let parsed = (|| {
        let (txid, digest) = rest.strip_prefix(' ')?.split_once(' ')?;
        Some(Commit {
            txid: parse_dec(txid)?,
            entries: parse_digest(digest)?,
        })
    })();
    Some(parsed.ok_or_else(|| format!("malformed commit line {line:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_ws() -> Vec<Entry> {
        vec![
            Entry { key: 7, version: 3 },
            Entry {
                key: 9,
                version: DELETED,
            },
            Entry { key: 11, version: 1 },
        ]
    }

    #[test]
    fn object_round_trips() {
        for len in [object_len_min(3), object_len_min(3) + 1, 1019, 5000, 70_001] {
            let b = encode(Kind::Object, 7, 3, 42, len, &sample_ws());
            assert_eq!(b.len() as u64, len);
            let r = decode(&b).unwrap();
            assert_eq!(r.kind, Kind::Object);
            assert_eq!((r.key, r.version, r.txid, r.len), (7, 3, 42, len));
            assert_eq!(r.write_set, sample_ws());
            assert_eq!(r.checksum, u32::from_le_bytes(b[12..16].try_into().unwrap()));
            assert_eq!(peek_header(&b), Some((7, 3)));
        }
    }

    #[test]
    fn tombstone_round_trips() {
        let b = encode(Kind::Tombstone, 9, 5, 42, 0, &sample_ws());
        assert_eq!(b.len() as u64, object_len_min(3));
        let r = decode(&b).unwrap();
        assert_eq!((r.kind, r.key, r.version), (Kind::Tombstone, 9, 5));
    }

    #[test]
    fn every_flipped_byte_is_detected() {
        let b = encode(Kind::Object, 7, 3, 42, 600, &sample_ws());
        for i in 0..b.len() {
            let mut d = b.clone();
            d[i] ^= 0x20;
            assert!(decode(&d).is_err(), "flip at {i} not detected");
        }
    }

    #[test]
    fn torn_and_mixed_content_is_detected() {
        let old = encode(Kind::Object, 7, 2, 41, 9000, &[Entry { key: 7, version: 2 }]);
        let new = encode(Kind::Object, 7, 3, 42, 9000, &sample_ws());
        // The new header over an old page (a torn large-object write).
        let mut mixed = new.clone();
        mixed[4096..8192].copy_from_slice(&old[4096..8192]);
        assert!(decode(&mixed).unwrap_err().0.contains("checksum"));
        // Truncated and extended.
        assert!(decode(&new[..8999]).is_err());
        let mut longer = new.clone();
        longer.push(0);
        assert!(decode(&longer).is_err());
        assert!(decode(&new[..10]).is_err());
        assert!(decode(&[]).is_err());
    }

    #[test]
    fn filler_is_checked_independently_of_the_checksum() {
        // Filler from another version, with a checksum recomputed to match:
        // only the filler check can catch it.
        let ws = [Entry { key: 7, version: 3 }];
        let mut b = encode(Kind::Object, 7, 3, 42, 500, &ws);
        let other = encode(Kind::Object, 7, 2, 42, 500, &[Entry { key: 7, version: 2 }]);
        b[100..500].copy_from_slice(&other[100..500]);
        b[12..16].fill(0);
        let crc = crc32c::crc32c(&b);
        b[12..16].copy_from_slice(&crc.to_le_bytes());
        assert!(decode(&b).unwrap_err().0.contains("filler"));
    }

    #[test]
    fn a_record_must_name_itself() {
        let b = encode(Kind::Object, 7, 4, 42, 300, &sample_ws());
        assert!(decode(&b).unwrap_err().0.contains("itself"));
        let b = encode(Kind::Tombstone, 7, 3, 42, 0, &sample_ws());
        assert!(decode(&b).unwrap_err().0.contains("itself"));
    }

    #[test]
    fn fill_is_position_based() {
        let mut whole = vec![0u8; 100];
        fill(&mut whole, 0, 1, 2, 100);
        for from in 0..100 {
            let mut part = vec![0u8; 100 - from];
            fill(&mut part, from, 1, 2, 100);
            assert_eq!(part, whole[from..]);
        }
    }

    #[test]
    fn digest_round_trips() {
        let e = vec![
            DigestEntry::Write {
                key: 0x5f3a_09c1_0000_0007,
                version: 3,
                crc: 0x9ae0_c2d1,
            },
            DigestEntry::Delete {
                key: 0x5f3a_09c1_0100_0002,
            },
            DigestEntry::Write {
                key: 1,
                version: u64::MAX - 1,
                crc: 0,
            },
        ];
        let line = format_commit_line(812, &e);
        assert!(line.starts_with("committed 812 k5f3a09c100000007=v3:9ae0c2d1,k5f3a09c101000002=del,"));
        assert!(!line.contains(' ') || line.matches(' ').count() == 2);
        assert_eq!(parse_commit_line(&line), Some(Ok(Commit { txid: 812, entries: e })));
    }

    #[test]
    fn run_records_round_trip_and_catch_damage() {
        for state in [RunState::Running, RunState::Ended] {
            let r = RunRecord {
                nonce: 0x5f3a_09c1,
                owner: 0x1234_5678,
                token: 0xdead_beef_0bad_f00d,
                state,
            };
            let b = encode_run(&r);
            assert_eq!(b.len(), RUN_SIZE);
            assert_eq!(decode_run(&b), Ok(r));
            for i in 0..b.len() {
                let mut d = b.clone();
                d[i] ^= 0x04;
                assert!(decode_run(&d).is_err(), "flip at {i} not detected");
            }
            assert!(decode_run(&b[..RUN_SIZE - 1]).is_err());
            // A torture object record is not a run record.
            assert!(decode_run(&encode(
                Kind::Tombstone,
                1,
                1,
                1,
                0,
                &[Entry {
                    key: 1,
                    version: DELETED
                }]
            ))
            .is_err());
        }
    }

    #[test]
    fn malformed_lines_are_rejected() {
        assert_eq!(parse_commit_line("torture: seed 5"), None);
        for bad in [
            "committed",
            "committed 12",
            "committed 12 ",
            "committed x k0000000000000001=del",
            "committed 12 k0000000000000001=v3:9ae0c2d",
            "committed 12 k0000000000000001=v3:9ae0c2d1committed 13 k0000000000000002=del",
            "committed 12 k000000000000001=del",
            "committed 12 k0000000000000001=v:00000000",
            "committed 12 k0000000000000001=del,",
            "committed 12 k0000000000000001=del k0000000000000002=del",
        ] {
            assert!(matches!(parse_commit_line(bad), Some(Err(_))), "{bad}");
        }
    }
}
