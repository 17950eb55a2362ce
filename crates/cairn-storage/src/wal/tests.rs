//! Tests of the write-ahead log, on real files in temporary directories.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use proptest::prelude::*;

use super::format::{record_size, RecordHeader};
use super::segment::list_segments;
use super::*;
use crate::io::{FaultyVfs, FileOp};

/// Deterministic pseudo-random bytes (xorshift64), so a failure replays.
fn payload(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// A pseudo-random number in `0..n` from `seed`.
fn pick(seed: u64, n: u64) -> u64 {
    payload(seed, 8).iter().fold(0u64, |acc, b| acc << 8 | u64::from(*b)) % n
}

fn options(segment_bytes: u64) -> WalOptions {
    WalOptions {
        segment_bytes,
        ..WalOptions::default()
    }
}

fn open(dir: &Path, segment_bytes: u64) -> Result<(Wal, OpenReport)> {
    Wal::open(dir, options(segment_bytes))
}

type Model = Vec<(Lsn, Vec<u8>)>;

fn read_all(wal: &Wal, from: Lsn) -> Result<Model> {
    wal.read_from(from)?.collect()
}

/// Appends `records` as one batch and adds them to the model.
fn append(wal: &Wal, model: &mut Model, records: &[Vec<u8>]) -> Vec<Lsn> {
    let refs: Vec<&[u8]> = records.iter().map(|r| r.as_slice()).collect();
    let lsns = wal.append(&refs).unwrap();
    model.extend(lsns.iter().copied().zip(records.iter().cloned()));
    lsns
}

fn segments(dir: &Path) -> Vec<(Lsn, PathBuf)> {
    list_segments(&crate::io::OsVfs, &dir.join(WAL_DIR)).unwrap()
}

/// The segment file and file offset holding log position `lsn`.
fn locate(dir: &Path, lsn: Lsn) -> (PathBuf, u64) {
    let (start, path) = segments(dir)
        .into_iter()
        .rev()
        .find(|(start, _)| *start <= lsn)
        .expect("a segment holds the position");
    (path, SEGMENT_HEADER_SIZE as u64 + (lsn.0 - start.0))
}

/// The log position where the record `(lsn, payload)` starts.
fn record_start(lsn: Lsn, payload: &[u8]) -> Lsn {
    Lsn(lsn.0 - record_size(payload.len() as u32))
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap().len()
}

fn set_file_len(path: &Path, len: u64) {
    OpenOptions::new().write(true).open(path).unwrap().set_len(len).unwrap();
}

fn append_bytes(path: &Path, bytes: &[u8]) {
    OpenOptions::new()
        .append(true)
        .open(path)
        .unwrap()
        .write_all(bytes)
        .unwrap();
}

fn xor_byte(path: &Path, offset: u64, mask: u8) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[offset as usize] ^= mask;
    std::fs::write(path, bytes).unwrap();
}

fn write_at(path: &Path, offset: u64, data: &[u8]) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[offset as usize..offset as usize + data.len()].copy_from_slice(data);
    std::fs::write(path, bytes).unwrap();
}

/// Writes a log of `count` records of sizes below `size_max`, in batches of
/// one to four, flushes it and closes it.
fn build_log(dir: &Path, segment_bytes: u64, count: u64, size_max: u64, seed: u64) -> Model {
    let (wal, report) = open(dir, segment_bytes).unwrap();
    assert!(report.created);
    let mut model = Vec::new();
    let mut i = 0;
    while i < count {
        let batch = (1 + pick(seed ^ i, 4)).min(count - i);
        let records: Vec<Vec<u8>> = (i..i + batch)
            .map(|k| payload(seed + k, pick(seed * 31 + k, size_max) as usize))
            .collect();
        append(&wal, &mut model, &records);
        i += batch;
    }
    wal.flush(wal.end_lsn()).unwrap();
    wal.check_invariants();
    model
}

#[test]
fn records_round_trip_across_segments_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let segment_bytes = 256 << 10;
    let mut model = build_log(dir.path(), segment_bytes, 100, 100 << 10, 7);
    // The extremes: an empty record and a 100 KiB one.
    let (wal, report) = open(dir.path(), segment_bytes).unwrap();
    assert_eq!(report.torn_tail, None);
    assert_eq!(report.end_lsn, model.last().unwrap().0);
    append(&wal, &mut model, &[Vec::new(), payload(1, 100 << 10), Vec::new()]);
    let end = wal.end_lsn();
    wal.flush(end).unwrap();
    drop(wal);
    assert!(segments(dir.path()).len() >= 5, "the log rolled several times");

    let (wal, report) = open(dir.path(), segment_bytes).unwrap();
    assert_eq!(report.torn_tail, None);
    assert_eq!(report.segment_count, segments(dir.path()).len());
    assert_eq!(wal.end_lsn(), end, "the end survives reopening");
    assert_eq!(wal.durable_lsn(), end);
    wal.check_invariants();
    assert_eq!(read_all(&wal, Lsn(0)).unwrap(), model);
    for k in [0, 1, 37, 50, model.len() - 2] {
        let mid = model[k].0;
        assert_eq!(read_all(&wal, mid).unwrap(), model[k + 1..], "from record {k}");
        // From inside a record: that record ends after `from`, so it is included.
        let inside = Lsn(mid.0 - 1);
        assert_eq!(read_all(&wal, inside).unwrap(), model[k..], "inside {k}");
    }
    assert!(read_all(&wal, end).unwrap().is_empty());
    assert!(matches!(wal.read_from(Lsn(end.0 + 1)), Err(Error::InvalidArgument(_))));
    // LSNs are contiguous: each record starts where the previous ended.
    let mut prev = Lsn(0);
    for (lsn, p) in &model {
        assert_eq!(record_start(*lsn, p), prev);
        prev = *lsn;
    }
}

#[test]
fn a_reader_sees_records_appended_but_not_yet_flushed() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = open(dir.path(), 4096).unwrap();
    let mut model = Vec::new();
    for i in 0..20 {
        append(&wal, &mut model, &[payload(i, 300)]);
    }
    assert!(wal.durable_lsn() < wal.end_lsn());
    assert_eq!(read_all(&wal, Lsn(0)).unwrap(), model);
    // A reader is a snapshot: records appended after it was made are not in it.
    let reader = wal.read_from(Lsn(0)).unwrap();
    append(&wal, &mut model, &[payload(99, 10)]);
    assert_eq!(reader.count(), 20);
}

#[test]
fn oversized_records_are_refused_and_nothing_is_appended() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = open(dir.path(), 1 << 20).unwrap();
    wal.append(&[b"before"]).unwrap();
    let end = wal.end_lsn();
    let big = vec![0u8; RECORD_LEN_MAX as usize + 1];
    let err = wal.append(&[b"ok", &big]).unwrap_err();
    assert!(matches!(err, Error::LimitExceeded { .. }), "{err}");
    assert_eq!(wal.end_lsn(), end);
    assert!(matches!(wal.flush(Lsn(end.0 + 1)), Err(Error::InvalidArgument(_))));
    wal.append(&[b"after"]).unwrap();
    wal.check_invariants();
}

/// Damages the tail of a flushed log with `damage(last segment path)`, reopens
/// it, and checks that the cut is reported, the prefix before `cut` is intact
/// and appending continues from the cut.
fn check_torn_tail(damage: impl FnOnce(&Path, &Model) -> Lsn) {
    let dir = tempfile::tempdir().unwrap();
    let segment_bytes = 8192;
    let mut model = build_log(dir.path(), segment_bytes, 40, 1500, 3);
    let (last_path, last_start) = {
        let segs = segments(dir.path());
        let (start, path) = segs.last().unwrap().clone();
        (path, start)
    };
    let cut = damage(&last_path, &model);
    let len_damaged = file_len(&last_path);
    assert!(cut >= last_start);
    let (wal, report) = open(dir.path(), segment_bytes).unwrap();
    let torn = report.torn_tail.clone().expect("the cut is reported");
    assert_eq!(torn.path, last_path);
    assert_eq!(torn.lsn, cut);
    assert_eq!(torn.offset, SEGMENT_HEADER_SIZE as u64 + (cut.0 - last_start.0));
    assert_eq!(file_len(&last_path), torn.offset, "the tail is cut off");
    assert_eq!(torn.bytes_cut, len_damaged - torn.offset);
    assert!(torn.bytes_cut > 0);
    model.retain(|(lsn, _)| *lsn <= cut);
    assert_eq!(wal.end_lsn(), cut);
    assert_eq!(read_all(&wal, Lsn(0)).unwrap(), model);
    // New records continue from the cut.
    let lsns = append(&wal, &mut model, &[payload(1000, 10), payload(1001, 0)]);
    assert_eq!(lsns[0], Lsn(cut.0 + record_size(10)));
    wal.flush(wal.end_lsn()).unwrap();
    wal.check_invariants();
    drop(wal);
    let (wal, report) = open(dir.path(), segment_bytes).unwrap();
    assert_eq!(report.torn_tail, None);
    assert_eq!(read_all(&wal, Lsn(0)).unwrap(), model);
}

#[test]
fn torn_tail_mid_payload_is_cut() {
    check_torn_tail(|path, model| {
        let (lsn, p) = model.last().unwrap();
        assert!(p.len() > 2, "the last record has a payload to tear");
        set_file_len(path, file_len(path) - 2);
        record_start(*lsn, p)
    });
}

#[test]
fn torn_tail_mid_header_is_cut() {
    check_torn_tail(|path, model| {
        let (lsn, p) = model.last().unwrap();
        let start = record_start(*lsn, p);
        let (_, offset) = locate(path.parent().unwrap().parent().unwrap(), start);
        set_file_len(path, offset + 7);
        start
    });
}

#[test]
fn zeros_after_the_last_record_are_cut() {
    check_torn_tail(|path, model| {
        append_bytes(path, &[0u8; 1000]);
        model.last().unwrap().0
    });
}

#[test]
fn garbage_after_the_last_record_is_cut() {
    check_torn_tail(|path, model| {
        append_bytes(path, &payload(42, 777));
        model.last().unwrap().0
    });
}

#[test]
fn a_failed_payload_checksum_in_the_last_record_is_a_torn_tail() {
    check_torn_tail(|path, model| {
        let (lsn, p) = model.last().unwrap();
        xor_byte(path, file_len(path) - 1, 0x10);
        record_start(*lsn, p)
    });
}

/// The index of a record in the last segment with at least two records after
/// it, and a non-empty payload.
fn middle_of_last_segment(dir: &Path, model: &Model) -> usize {
    let last_start = segments(dir).last().unwrap().0;
    (0..model.len() - 2)
        .find(|&k| record_start(model[k].0, &model[k].1) >= last_start && !model[k].1.is_empty())
        .expect("the last segment holds at least three records")
}

#[test]
fn a_bad_checksum_before_valid_records_is_corruption_not_a_tail() {
    for what in ["payload", "header"] {
        let dir = tempfile::tempdir().unwrap();
        let model = build_log(dir.path(), 1 << 20, 40, 1500, 11);
        let k = middle_of_last_segment(dir.path(), &model);
        let start = record_start(model[k].0, &model[k].1);
        let (path, offset) = locate(dir.path(), start);
        let at = if what == "payload" {
            offset + RECORD_HEADER_SIZE as u64
        } else {
            offset + 5 // the length field
        };
        xor_byte(&path, at, 0x01);
        let len_before = file_len(&path);
        match open(dir.path(), 1 << 20) {
            Err(Error::CorruptLog {
                path: p,
                offset: o,
                reason,
            }) => {
                assert_eq!((p, o), (path.clone(), offset), "{what}: {reason}");
                assert!(reason.contains("proves these bytes were durable"), "{reason}");
            }
            other => panic!("{what}: expected CorruptLog, got {other:?}"),
        }
        assert_eq!(file_len(&path), len_before, "nothing is cut");
    }
}

/// Defect 7 of the durability review: a power loss can keep a later unsynced
/// write and lose an earlier one. Records past the last durable point were
/// never acknowledged, so a hole followed by valid records that prove
/// nothing ends the log; it is not corruption.
#[test]
fn a_hole_in_the_unsynced_tail_ends_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let model = build_log(dir.path(), 1 << 20, 40, 1500, 11);
    let k = middle_of_last_segment(dir.path(), &model);
    let start = record_start(model[k].0, &model[k].1);
    let (path, offset) = locate(dir.path(), start);
    xor_byte(&path, offset + RECORD_HEADER_SIZE as u64, 0x01);
    // Only payloads starting with 0xCC prove durability; none in this log do.
    assert!(model.iter().all(|(_, p)| p.first() != Some(&0xCC)));
    let opts = WalOptions {
        proves_durable: |p| p.first() == Some(&0xCC),
        ..options(1 << 20)
    };
    let (wal, report) = Wal::open(dir.path(), opts).unwrap();
    let torn = report.torn_tail.expect("the hole ends the log");
    assert_eq!((torn.path, torn.offset, torn.lsn), (path.clone(), offset, start));
    assert_eq!(wal.end_lsn(), start);
    assert_eq!(read_all(&wal, Lsn(0)).unwrap(), model[..k].to_vec());
}

/// The other side of defect 7: damage to bytes that were fsynced, with a
/// later record appended after that fsync, is corruption (never cut), even
/// when no record's payload proves anything: the later record's header
/// says how far the log was durable when it was written.
#[test]
fn damage_to_records_a_later_record_vouches_for_is_corruption() {
    let dir = tempfile::tempdir().unwrap();
    let opts = || WalOptions {
        proves_durable: |_| false,
        ..options(1 << 20)
    };
    let (wal, _) = Wal::open(dir.path(), opts()).unwrap();
    let first = wal.append(&[b"first commit".as_slice()]).unwrap()[0];
    wal.flush(first).unwrap();
    let second = wal.append(&[b"second commit".as_slice()]).unwrap()[0];
    wal.flush(second).unwrap();
    drop(wal);
    let start = Lsn(first.0 - record_size(12));
    let (path, offset) = locate(dir.path(), start);
    xor_byte(&path, offset + RECORD_HEADER_SIZE as u64 + 3, 0x04);
    match Wal::open(dir.path(), opts()) {
        Err(Error::CorruptLog { offset: o, reason, .. }) => {
            assert_eq!(o, offset);
            assert!(reason.contains("proves these bytes were durable"), "{reason}");
        }
        other => panic!("expected CorruptLog, got {other:?}"),
    }
}

/// Defect 4 of the durability review: a leftover `wal/` must not be replayed
/// onto another database's volume.
#[test]
fn a_log_of_another_database_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let with_id = |id: u128| WalOptions {
        creation_id: id,
        ..options(1 << 20)
    };
    let (wal, _) = Wal::open(dir.path(), with_id(7)).unwrap();
    let lsn = wal.append(&[b"a record"]).unwrap()[0];
    wal.flush(lsn).unwrap();
    drop(wal);
    match Wal::open(dir.path(), with_id(8)) {
        Err(Error::ForeignLog { found, expected, .. }) => assert_eq!((found, expected), (7, 8)),
        other => panic!("expected ForeignLog, got {other:?}"),
    }
    let (wal, _) = Wal::open(dir.path(), with_id(7)).unwrap();
    assert_eq!(read_all(&wal, Lsn(0)).unwrap(), vec![(lsn, b"a record".to_vec())]);
}

/// Defect 9 of the durability review: a segment named near `u64::MAX` must
/// be a clear error, not an overflow.
#[test]
fn a_segment_named_near_the_end_of_the_lsn_space_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    drop(open(dir.path(), 4096).unwrap());
    let bogus = dir
        .path()
        .join(WAL_DIR)
        .join(segment::segment_file_name(Lsn(u64::MAX - 3)));
    std::fs::write(&bogus, vec![0u8; 100]).unwrap();
    match open(dir.path(), 4096) {
        Err(Error::CorruptLog { path, reason, .. }) => {
            assert_eq!(path, bogus);
            assert!(reason.contains("past the largest log position"), "{reason}");
        }
        other => panic!("expected CorruptLog, got {other:?}"),
    }
}

#[test]
fn a_bad_checksum_in_an_older_segment_is_reported_when_read() {
    let dir = tempfile::tempdir().unwrap();
    let model = build_log(dir.path(), 8192, 40, 1500, 5);
    let first_seg_end = segments(dir.path())[1].0;
    let k = (0..model.len())
        .find(|&k| !model[k].1.is_empty() && model[k].0 < first_seg_end)
        .unwrap();
    let start = record_start(model[k].0, &model[k].1);
    let (path, offset) = locate(dir.path(), start);
    xor_byte(&path, offset + RECORD_HEADER_SIZE as u64, 0x80);
    let (wal, _) = open(dir.path(), 8192).unwrap();
    let mut reader = wal.read_from(Lsn(0)).unwrap();
    for (lsn, p) in &model[..k] {
        assert_eq!(reader.next().unwrap().unwrap(), (*lsn, p.clone()));
    }
    match reader.next() {
        Some(Err(Error::CorruptLog { path: p, offset: o, .. })) => assert_eq!((p, o), (path, offset)),
        other => panic!("expected CorruptLog, got {other:?}"),
    }
    assert!(reader.next().is_none(), "a reader stops after an error");
    // Reading from after the damage does not need the damaged payload.
    assert_eq!(read_all(&wal, model[k].0).unwrap(), model[k + 1..]);
}

#[test]
fn an_oversized_length_field_is_corruption_without_allocating_it() {
    // At the tail: a header whose checksum holds but whose length is 4 GiB.
    let dir = tempfile::tempdir().unwrap();
    let model = build_log(dir.path(), 1 << 20, 10, 100, 1);
    let end = model.last().unwrap().0;
    let forged = RecordHeader {
        len: u32::MAX,
        lsn: Lsn(end.0 + record_size(u32::MAX)),
        durable: Lsn(0),
        payload_checksum: 0,
    }
    .encode();
    let (path, offset) = locate(dir.path(), end);
    append_bytes(&path, &forged);
    match open(dir.path(), 1 << 20) {
        Err(Error::CorruptLog {
            path: p,
            offset: o,
            reason,
        }) => {
            assert_eq!((p, o), (path.clone(), offset));
            assert!(reason.contains("exceeds the maximum"), "{reason}");
        }
        other => panic!("expected CorruptLog, got {other:?}"),
    }

    // In an older segment, met by a reader.
    let dir = tempfile::tempdir().unwrap();
    let model = build_log(dir.path(), 4096, 30, 1000, 2);
    let start = record_start(model[1].0, &model[1].1);
    let (path, offset) = locate(dir.path(), start);
    assert_ne!(path, segments(dir.path()).last().unwrap().1);
    let forged = RecordHeader {
        len: RECORD_LEN_MAX + 1,
        lsn: Lsn(start.0 + record_size(RECORD_LEN_MAX + 1)),
        durable: Lsn(0),
        payload_checksum: 0,
    }
    .encode();
    write_at(&path, offset, &forged);
    let (wal, _) = open(dir.path(), 4096).unwrap();
    let err = read_all(&wal, Lsn(0)).unwrap_err();
    assert!(
        matches!(&err, Error::CorruptLog { path: p, offset: o, .. } if *p == path && *o == offset),
        "{err}"
    );
}

#[test]
fn a_segment_whose_creation_was_cut_short_gets_its_header_rewritten() {
    for content in [&[][..], &[0u8; SEGMENT_HEADER_SIZE][..], &[0x43u8; 9][..]] {
        let dir = tempfile::tempdir().unwrap();
        let mut model = build_log(dir.path(), 4096, 12, 800, 9);
        let end = model.last().unwrap().0;
        let path = dir.path().join(WAL_DIR).join(segment::segment_file_name(end));
        std::fs::write(&path, content).unwrap();
        let (wal, report) = open(dir.path(), 4096).unwrap();
        assert_eq!(report.rewritten_header, Some(path.clone()));
        assert_eq!(wal.end_lsn(), end);
        wal.check_invariants();
        append(&wal, &mut model, &[payload(5, 5)]);
        wal.flush(wal.end_lsn()).unwrap();
        drop(wal);
        let (wal, report) = open(dir.path(), 4096).unwrap();
        assert_eq!(report.rewritten_header, None);
        assert_eq!(read_all(&wal, Lsn(0)).unwrap(), model);
    }
}

#[test]
fn a_segment_from_elsewhere_in_the_log_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    build_log(dir.path(), 4096, 30, 1000, 4);
    let segs = segments(dir.path());
    // A segment renamed to another start: its header disagrees with its name.
    let (_, path) = &segs[1];
    let bogus = dir
        .path()
        .join(WAL_DIR)
        .join(segment::segment_file_name(Lsn(segs.last().unwrap().0 .0 + 1_000_000)));
    std::fs::copy(path, &bogus).unwrap();
    match open(dir.path(), 4096) {
        Err(Error::CorruptLog { path: p, .. }) => {
            // The copy is now the last segment, or the previous one's length
            // no longer matches: either way a segment file is named.
            assert!(p == bogus || segs.iter().any(|(_, s)| *s == p), "{p:?}");
        }
        other => panic!("expected CorruptLog, got {other:?}"),
    }
    std::fs::remove_file(&bogus).unwrap();
    // A segment missing from the middle of the chain.
    std::fs::remove_file(&segs[2].1).unwrap();
    match open(dir.path(), 4096) {
        Err(Error::CorruptLog { path: p, .. }) => assert_eq!(p, segs[1].1),
        other => panic!("expected CorruptLog, got {other:?}"),
    }
}

#[test]
fn remove_before_removes_only_whole_old_segments() {
    let dir = tempfile::tempdir().unwrap();
    let model = build_log(dir.path(), 4096, 60, 1000, 8);
    let (wal, _) = open(dir.path(), 4096).unwrap();
    let before = segments(dir.path());
    assert!(before.len() >= 6);
    assert_eq!(wal.remove_before(Lsn(0)).unwrap(), 0);
    // A checkpoint inside segment 3: segments 0..3 hold only older records.
    let checkpoint = Lsn(before[3].0 .0 + 10);
    assert_eq!(wal.remove_before(checkpoint).unwrap(), 3);
    let after = segments(dir.path());
    assert_eq!(after, before[3..]);
    assert_eq!(wal.first_lsn(), before[3].0);
    assert_eq!(wal.stats().segments_removed, 3);
    wal.check_invariants();
    let kept: Model = model.iter().filter(|(lsn, _)| *lsn > before[3].0).cloned().collect();
    assert_eq!(read_all(&wal, wal.first_lsn()).unwrap(), kept);
    match wal.read_from(Lsn(before[3].0 .0 - 1)) {
        Err(Error::InvalidArgument(msg)) => assert!(msg.contains("truncated"), "{msg}"),
        other => panic!("expected an error for a removed LSN, got {other:?}"),
    }
    // Everything before the end: the segment being written stays.
    let end = wal.end_lsn();
    assert_eq!(wal.remove_before(end).unwrap() as usize, after.len() - 1);
    assert_eq!(segments(dir.path()).len(), 1);
    wal.append(&[b"more"]).unwrap();
    wal.flush(wal.end_lsn()).unwrap();
    wal.check_invariants();
    drop(wal);
    let (wal, report) = open(dir.path(), 4096).unwrap();
    assert_eq!(report.first_lsn, segments(dir.path())[0].0);
    let tail = read_all(&wal, wal.first_lsn()).unwrap();
    assert_eq!(tail.last().unwrap().1, b"more");
}

#[test]
fn group_commit_shares_fsyncs_between_threads() {
    const THREADS: u64 = 16;
    const PER_THREAD: u64 = 200;
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = open(dir.path(), SEGMENT_BYTES_DEFAULT).unwrap();
    let wal = Arc::new(wal);
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let wal = wal.clone();
            std::thread::spawn(move || {
                for i in 0..PER_THREAD {
                    let mut record = t.to_le_bytes().to_vec();
                    record.extend_from_slice(&i.to_le_bytes());
                    record.extend_from_slice(&payload(t * 1000 + i, 100));
                    let redo = payload(i, 50);
                    let lsns = wal.append(&[&redo, &record]).unwrap();
                    assert_eq!(lsns[1].0, lsns[0].0 + record_size(record.len() as u32));
                    wal.flush(lsns[1]).unwrap();
                    assert!(wal.durable_lsn() >= lsns[1]);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let stats = wal.stats();
    println!(
        "group commit: {} flushes, {} fsyncs ({} flush rounds), {:.3} fsyncs per flush, \
         {} flushes waited, at most {} records per fsync",
        stats.flush_calls,
        stats.fsyncs,
        stats.flush_rounds,
        stats.fsyncs as f64 / stats.flush_calls as f64,
        stats.flushes_waited,
        stats.records_per_fsync_max
    );
    assert_eq!(stats.flush_calls, THREADS * PER_THREAD);
    assert_eq!(stats.records_appended, 2 * THREADS * PER_THREAD);
    assert!(
        stats.fsyncs * 2 <= stats.flush_calls,
        "fsyncs must be shared: {stats:?}"
    );
    assert_eq!(wal.durable_lsn(), wal.end_lsn());
    wal.check_invariants();
    // Each batch is contiguous, and each thread's records are in its order.
    let records = read_all(&wal, Lsn(0)).unwrap();
    assert_eq!(records.len() as u64, 2 * THREADS * PER_THREAD);
    let mut next = vec![0u64; THREADS as usize];
    for pair in records.chunks(2) {
        let r = &pair[1].1;
        let t = u64::from_le_bytes(r[0..8].try_into().unwrap());
        let i = u64::from_le_bytes(r[8..16].try_into().unwrap());
        assert_eq!(pair[0].1, payload(i, 50), "a batch was interleaved");
        assert_eq!(i, next[t as usize]);
        next[t as usize] += 1;
    }
}

fn faulty(dir: &Path, segment_bytes: u64) -> (Arc<FaultyVfs>, Wal) {
    let vfs = Arc::new(FaultyVfs::new(Arc::new(crate::io::OsVfs)));
    let (wal, _) = Wal::open(
        dir,
        WalOptions {
            segment_bytes,
            vfs: vfs.clone(),
            ..Default::default()
        },
    )
    .unwrap();
    (vfs, wal)
}

fn fail_op(vfs: &FaultyVfs, failing: FileOp) {
    vfs.set_rule(Some(Arc::new(move |op, _p: &Path, _n| op == failing)));
}

#[test]
fn a_failed_fsync_poisons_the_log_and_reopening_finds_a_consistent_log() {
    let dir = tempfile::tempdir().unwrap();
    let (vfs, wal) = faulty(dir.path(), 4096);
    let mut model = Vec::new();
    for i in 0..10 {
        append(&wal, &mut model, &[payload(i, 700)]);
    }
    wal.flush(wal.end_lsn()).unwrap();
    let durable = wal.durable_lsn();
    let lsn = append(&wal, &mut model, &[payload(77, 100)])[0];
    fail_op(&vfs, FileOp::Sync);
    let err = wal.flush(lsn).unwrap_err();
    assert!(matches!(err, Error::Io { .. }), "{err}");
    assert_eq!(wal.durable_lsn(), durable, "no durability is claimed");
    vfs.set_rule(None);
    assert!(matches!(wal.flush(lsn), Err(Error::Poisoned(_))));
    assert!(matches!(wal.append(&[b"x"]), Err(Error::Poisoned(_))));
    assert!(matches!(wal.remove_before(lsn), Err(Error::Poisoned(_))));
    wal.check_invariants();
    drop(wal);
    let (wal, report) = open(dir.path(), 4096).unwrap();
    // The page cache still held the write, so every record is there; the
    // model's records form exactly the log.
    assert_eq!(report.torn_tail, None);
    assert_eq!(read_all(&wal, Lsn(0)).unwrap(), model);
}

#[test]
fn a_failed_write_poisons_the_log_and_the_record_is_not_kept() {
    let dir = tempfile::tempdir().unwrap();
    let (vfs, wal) = faulty(dir.path(), 1 << 20);
    let mut model = Vec::new();
    append(&wal, &mut model, &[payload(1, 10), payload(2, 20)]);
    fail_op(&vfs, FileOp::Write);
    let end = wal.end_lsn();
    assert!(matches!(wal.append(&[b"lost"]), Err(Error::Io { .. })));
    assert_eq!(wal.end_lsn(), end);
    vfs.set_rule(None);
    assert!(matches!(wal.append(&[b"x"]), Err(Error::Poisoned(_))));
    assert!(matches!(wal.flush(end), Err(Error::Poisoned(_))));
    drop(wal);
    let (wal, _) = open(dir.path(), 1 << 20).unwrap();
    assert_eq!(read_all(&wal, Lsn(0)).unwrap(), model);
}

#[test]
fn a_failed_roll_poisons_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let (vfs, wal) = faulty(dir.path(), 2048);
    let mut model = Vec::new();
    append(&wal, &mut model, &[payload(1, 1500)]);
    // The next record does not fit: the roll's fsync fails.
    fail_op(&vfs, FileOp::Sync);
    assert!(matches!(wal.append(&[&payload(2, 1500)]), Err(Error::Io { .. })));
    vfs.set_rule(None);
    assert!(matches!(wal.append(&[b"x"]), Err(Error::Poisoned(_))));
    drop(wal);
    let (wal, _) = open(dir.path(), 2048).unwrap();
    assert_eq!(read_all(&wal, Lsn(0)).unwrap(), model);
}

#[test]
fn waiters_on_a_failing_fsync_all_get_errors() {
    let dir = tempfile::tempdir().unwrap();
    let (vfs, wal) = faulty(dir.path(), 1 << 20);
    let wal = Arc::new(wal);
    fail_op(&vfs, FileOp::Sync);
    let handles: Vec<_> = (0..8u64)
        .map(|t| {
            let wal = wal.clone();
            std::thread::spawn(move || -> Result<()> {
                for i in 0..20 {
                    let lsn = wal.append(&[&payload(t * 100 + i, 64)])?[0];
                    wal.flush(lsn)?;
                }
                Ok(())
            })
        })
        .collect();
    let mut io_errors = 0;
    for h in handles {
        match h.join().unwrap() {
            Err(Error::Io { .. }) => io_errors += 1,
            Err(Error::Poisoned(_)) => {}
            other => panic!("a flush on a failing disk must fail, got {other:?}"),
        }
    }
    assert_eq!(io_errors, 1, "only the call that met the failure sees Io");
    assert_eq!(wal.durable_lsn(), Lsn(0));
    assert_eq!(wal.stats().flush_rounds, 1);
}

/// One step of the model test.
#[derive(Clone, Debug)]
enum Op {
    /// Append a batch of records of these sizes.
    Append(Vec<usize>),
    /// Flush to the end of the log.
    Flush,
    /// Close and reopen cleanly.
    Reopen,
    /// Crash: keep the durable prefix, cut the unsynced bytes at a point
    /// (`keep` chooses it), optionally add zeros or garbage, then reopen.
    Crash { keep: u64, junk: Junk },
    /// Remove the segments before the LSN of the record `pick` chooses.
    RemoveBefore(u64),
}

#[derive(Clone, Copy, Debug)]
enum Junk {
    None,
    Zeros(usize),
    Garbage(usize),
}

fn op_strategy() -> impl Strategy<Value = Op> {
    let size = prop_oneof![0usize..64, 64usize..3000, Just(0usize)];
    prop_oneof![
        5 => prop::collection::vec(size, 1..5).prop_map(Op::Append),
        2 => Just(Op::Flush),
        1 => Just(Op::Reopen),
        2 => (any::<u64>(), prop_oneof![
            Just(Junk::None),
            (1usize..300).prop_map(Junk::Zeros),
            (1usize..300).prop_map(Junk::Garbage),
        ])
            .prop_map(|(keep, junk)| Op::Crash { keep, junk }),
        1 => any::<u64>().prop_map(Op::RemoveBefore),
    ]
}

fn run_model(segment_bytes: u64, ops: Vec<Op>) {
    let dir = tempfile::tempdir().unwrap();
    let (mut wal, _) = open(dir.path(), segment_bytes).unwrap();
    // Every record ever appended that the log still holds (removed segments'
    // records included: the comparison reads from `first_lsn`).
    let mut model: Model = Vec::new();
    let mut seed = 0u64;
    for op in ops {
        match op {
            Op::Append(sizes) => {
                let records: Vec<Vec<u8>> = sizes
                    .iter()
                    .map(|&n| {
                        seed += 1;
                        payload(seed, n)
                    })
                    .collect();
                let before = wal.end_lsn();
                let lsns = append(&wal, &mut model, &records);
                assert_eq!(
                    lsns.last().unwrap().0 - before.0,
                    sizes.iter().map(|&n| record_size(n as u32)).sum::<u64>()
                );
            }
            Op::Flush => {
                wal.flush(wal.end_lsn()).unwrap();
                assert_eq!(wal.durable_lsn(), wal.end_lsn());
            }
            Op::Reopen => {
                drop(wal);
                let report;
                (wal, report) = open(dir.path(), segment_bytes).unwrap();
                assert_eq!(report.torn_tail, None);
            }
            Op::Crash { keep, junk } => {
                let durable = wal.durable_lsn();
                let end = wal.end_lsn();
                drop(wal);
                let (last_start, last_path) = segments(dir.path()).last().unwrap().clone();
                assert!(durable >= last_start, "unsynced bytes only in the last segment");
                let original = std::fs::read(&last_path).unwrap();
                // A crash keeps the durable prefix and any part of the rest.
                let kept = Lsn(durable.0 + keep % (end.0 - durable.0 + 1));
                set_file_len(&last_path, SEGMENT_HEADER_SIZE as u64 + (kept.0 - last_start.0));
                match junk {
                    Junk::None => {}
                    Junk::Zeros(n) => append_bytes(&last_path, &vec![0u8; n]),
                    Junk::Garbage(n) => {
                        seed += 1;
                        append_bytes(&last_path, &payload(seed, n));
                    }
                }
                // A record survives if all its bytes are still there (junk may
                // happen to equal the lost bytes: zeros often do).
                let damaged = std::fs::read(&last_path).unwrap();
                let offset = |lsn: Lsn| SEGMENT_HEADER_SIZE + (lsn.0 - last_start.0) as usize;
                let survives = |(lsn, p): &(Lsn, Vec<u8>)| {
                    if *lsn <= last_start {
                        return true;
                    }
                    let range = offset(record_start(*lsn, p))..offset(*lsn);
                    range.end <= damaged.len() && damaged[range.clone()] == original[range]
                };
                let kept_count = model.iter().take_while(|r| survives(r)).count();
                model.truncate(kept_count);
                let cut = model.last().map_or(Lsn(0), |r| r.0).max(last_start);
                assert!(cut >= durable.min(kept));
                let report;
                (wal, report) = open(dir.path(), segment_bytes).unwrap();
                assert_eq!(wal.end_lsn(), cut);
                let extra = (damaged.len() - offset(cut)) as u64;
                match &report.torn_tail {
                    Some(torn) => {
                        assert_eq!(torn.lsn, cut);
                        assert_eq!(torn.bytes_cut, extra);
                    }
                    None => assert_eq!(extra, 0),
                }
            }
            Op::RemoveBefore(pick_idx) => {
                if model.is_empty() {
                    continue;
                }
                let lsn = model[(pick_idx % model.len() as u64) as usize].0;
                let first_before = wal.first_lsn();
                wal.remove_before(lsn).unwrap();
                assert!(wal.first_lsn() <= lsn.max(first_before));
                assert!(wal.first_lsn() >= first_before);
            }
        }
        wal.check_invariants();
        let first = wal.first_lsn();
        let expected: Model = model.iter().filter(|r| r.0 > first).cloned().collect();
        assert_eq!(read_all(&wal, first).unwrap(), expected);
        assert_eq!(wal.end_lsn(), model.last().map_or(first, |r| r.0).max(first));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn the_log_matches_a_model_across_reopens_and_crashes(
        segment_bytes in prop_oneof![Just(1024u64), Just(4096u64), Just(65536u64)],
        ops in prop::collection::vec(op_strategy(), 1..40),
    ) {
        run_model(segment_bytes, ops);
    }
}
