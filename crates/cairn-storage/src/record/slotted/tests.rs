//! Unit tests of slotted pages, and a model test against a plain `BTreeMap`.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;

const KIND_RECORD: u8 = 1;
const KIND_STUB: u8 = 2;

fn new_page(page_size: usize, id: u32) -> Vec<u8> {
    let mut buf = vec![0u8; page_size];
    page::format(&mut buf, PageId(id), PageType::Slotted);
    init(&mut buf);
    buf
}

fn bytes(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| seed.wrapping_add((i % 251) as u8) | 1).collect()
}

fn ins(buf: &mut [u8], data: &[u8]) -> (SlotIdx, Uniq) {
    insert(buf, KIND_RECORD, data).unwrap().expect("fits")
}

fn read(buf: &[u8], slot: SlotIdx) -> Option<(u8, Uniq, Vec<u8>)> {
    get(buf, slot).unwrap().map(|r| (r.kind, r.uniq, r.data.to_vec()))
}

fn assert_corrupt<T: std::fmt::Debug>(r: Result<T>, page: u32, needle: &str) {
    match r {
        Err(Error::Corrupt { page: p, reason }) => {
            assert_eq!(p, PageId(page), "{reason}");
            assert!(reason.contains(needle), "{reason:?} lacks {needle:?}");
        }
        other => panic!("expected Corrupt containing {needle:?}, got {other:?}"),
    }
}

#[test]
fn a_formatted_page_is_an_empty_slotted_page() {
    let mut buf = vec![0u8; 4096];
    page::format(&mut buf, PageId(3), PageType::Slotted);
    check(&buf).unwrap();
    assert_eq!(slot_count(&buf), 0);
    assert_eq!(live_count(&buf).unwrap(), 0);
    assert_eq!(get(&buf, SlotIdx(0)).unwrap(), None);
    assert_eq!(free_for_insert(&buf).unwrap(), Some(max_payload(4096)));
    assert_eq!(max_payload(4096), 4096 - 36 - 10);
}

#[test]
fn insert_then_get_returns_the_record() {
    let mut buf = new_page(4096, 1);
    let (s0, u0) = ins(&mut buf, b"hello");
    let (s1, u1) = insert(&mut buf, KIND_STUB, b"").unwrap().unwrap();
    let (s2, u2) = ins(&mut buf, b"world!");
    assert_eq!((s0, s1, s2), (SlotIdx(0), SlotIdx(1), SlotIdx(2)));
    assert!(u0 < u1 && u1 < u2);
    assert_eq!(read(&buf, s0), Some((KIND_RECORD, u0, b"hello".to_vec())));
    assert_eq!(read(&buf, s1), Some((KIND_STUB, u1, vec![])));
    assert_eq!(read(&buf, s2), Some((KIND_RECORD, u2, b"world!".to_vec())));
    assert_eq!(get(&buf, SlotIdx(3)).unwrap(), None);
    assert_eq!(get(&buf, SlotIdx(u16::MAX)).unwrap(), None);
    let all: Vec<_> = iter(&buf).map(|r| r.unwrap().0).collect();
    assert_eq!(all, vec![s0, s1, s2]);
    assert_eq!(live_count(&buf).unwrap(), 3);
    check(&buf).unwrap();
}

#[test]
fn kind_free_is_refused() {
    let mut buf = new_page(4096, 1);
    assert!(matches!(
        insert(&mut buf, KIND_FREE, b"x"),
        Err(Error::InvalidArgument(_))
    ));
    let (s, _) = ins(&mut buf, b"x");
    assert!(matches!(
        update(&mut buf, s, KIND_FREE, b"x"),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn update_grows_and_shrinks_keeping_the_uniquifier() {
    let mut buf = new_page(4096, 1);
    let (a, ua) = ins(&mut buf, &bytes(100, 1));
    let (b, ub) = ins(&mut buf, &bytes(50, 2));
    assert!(update(&mut buf, a, KIND_STUB, &bytes(300, 3)).unwrap());
    check(&buf).unwrap();
    assert_eq!(read(&buf, a), Some((KIND_STUB, ua, bytes(300, 3))));
    assert_eq!(read(&buf, b), Some((KIND_RECORD, ub, bytes(50, 2))));
    assert!(update(&mut buf, a, KIND_RECORD, &bytes(10, 4)).unwrap());
    check(&buf).unwrap();
    assert_eq!(read(&buf, a), Some((KIND_RECORD, ua, bytes(10, 4))));
    assert!(update(&mut buf, a, KIND_RECORD, b"").unwrap());
    check(&buf).unwrap();
    assert_eq!(read(&buf, a), Some((KIND_RECORD, ua, vec![])));
    // Growing the record at the heap's low edge reuses its own bytes.
    assert!(update(&mut buf, b, KIND_RECORD, &bytes(max_payload(4096) - 10, 5)).unwrap());
    check(&buf).unwrap();
    assert_eq!(read(&buf, b).unwrap().2, bytes(max_payload(4096) - 10, 5));
    assert_eq!(page::uniq_seq(&buf), ub.0 + 1, "update takes no uniquifier");
}

#[test]
fn update_that_does_not_fit_leaves_the_page_unchanged() {
    let mut buf = new_page(4096, 1);
    let (a, _) = ins(&mut buf, &bytes(1000, 1));
    let (_b, _) = ins(&mut buf, &bytes(2000, 2));
    let before = buf.clone();
    assert!(!update(&mut buf, a, KIND_RECORD, &bytes(2100, 3)).unwrap());
    assert_eq!(buf, before);
    assert!(update(&mut buf, a, KIND_RECORD, &bytes(4096 - 36 - 20 - 2000, 3)).unwrap());
    check(&buf).unwrap();
}

#[test]
fn deleted_slot_is_reused_with_a_new_uniquifier() {
    let mut buf = new_page(4096, 1);
    let (a, _) = ins(&mut buf, b"a");
    let (b, ub) = ins(&mut buf, b"b");
    let (c, _) = ins(&mut buf, b"c");
    delete(&mut buf, b).unwrap();
    check(&buf).unwrap();
    assert_eq!(get(&buf, b).unwrap(), None);
    assert_eq!(slot_count(&buf), 3);
    let (b2, ub2) = ins(&mut buf, b"bb");
    assert_eq!(b2, b, "lowest free slot is reused");
    assert!(ub2 > ub, "an old OID to slot {b:?} must not match the new occupant");
    assert_eq!(read(&buf, a).unwrap().2, b"a");
    assert_eq!(read(&buf, c).unwrap().2, b"c");
    check(&buf).unwrap();
}

#[test]
fn trailing_free_slots_are_trimmed_and_an_empty_page_resets() {
    let mut buf = new_page(4096, 1);
    let slots: Vec<_> = (0..5).map(|i| ins(&mut buf, &bytes(20, i)).0).collect();
    delete(&mut buf, slots[3]).unwrap();
    assert_eq!(slot_count(&buf), 5);
    delete(&mut buf, slots[4]).unwrap();
    assert_eq!(slot_count(&buf), 3, "slots 3 and 4 trimmed");
    check(&buf).unwrap();
    for s in &slots[..3] {
        delete(&mut buf, *s).unwrap();
    }
    assert_eq!(slot_count(&buf), 0);
    check(&buf).unwrap();
    let mut fresh = new_page(4096, 1);
    page::set_uniq_seq(&mut fresh, page::uniq_seq(&buf));
    assert_eq!(buf, fresh, "an emptied page is a fresh page");
}

#[test]
fn delete_of_a_free_or_missing_slot_is_an_error() {
    let mut buf = new_page(4096, 1);
    let (a, _) = ins(&mut buf, b"a");
    ins(&mut buf, b"b");
    delete(&mut buf, a).unwrap();
    assert!(matches!(delete(&mut buf, a), Err(Error::InvalidArgument(_))));
    assert!(matches!(delete(&mut buf, SlotIdx(9)), Err(Error::InvalidArgument(_))));
    assert!(matches!(
        update(&mut buf, a, KIND_RECORD, b"x"),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn compaction_reclaims_holes() {
    let mut buf = new_page(4096, 1);
    let mut slots = Vec::new();
    while let Some((s, _)) = insert(&mut buf, KIND_RECORD, &bytes(100, slots.len() as u8)).unwrap() {
        slots.push(s);
    }
    assert_eq!(slots.len(), (4096 - 36) / 110);
    for s in slots.iter().step_by(2) {
        delete(&mut buf, *s).unwrap();
    }
    check(&buf).unwrap();
    let free = free_for_insert(&buf).unwrap().unwrap();
    assert!(free > 1000, "{free}");
    // No hole is this big, so only compaction makes room.
    let (big, _) = ins(&mut buf, &bytes(free, 77));
    assert_eq!(big, slots[0]);
    check(&buf).unwrap();
    assert_eq!(read(&buf, big).unwrap().2, bytes(free, 77));
    for (i, s) in slots.iter().enumerate().skip(1).step_by(2) {
        assert_eq!(read(&buf, *s).unwrap().2, bytes(100, i as u8));
    }
    assert_eq!(free_for_insert(&buf).unwrap(), Some(0));
}

#[test]
fn full_page_refuses_insert_and_is_unchanged() {
    for page_size in [4096, 8192, 65536] {
        let mut buf = new_page(page_size, 1);
        let before = buf.clone();
        assert_eq!(
            insert(&mut buf, KIND_RECORD, &bytes(max_payload(page_size) + 1, 0)).unwrap(),
            None
        );
        assert_eq!(buf, before);
        ins(&mut buf, &bytes(max_payload(page_size), 0));
        check(&buf).unwrap();
        assert_eq!(free_for_insert(&buf).unwrap(), None);
        let before = buf.clone();
        assert_eq!(insert(&mut buf, KIND_RECORD, b"").unwrap(), None);
        assert_eq!(buf, before);
    }
}

#[test]
fn exhausted_uniquifier_sequence_refuses_inserts_forever() {
    let mut buf = new_page(4096, 1);
    page::set_uniq_seq(&mut buf, u32::MAX - 1);
    let (s, u) = ins(&mut buf, b"last");
    assert_eq!(u, Uniq(u32::MAX - 1));
    assert_eq!(page::uniq_seq(&buf), u32::MAX);
    check(&buf).unwrap();
    assert_eq!(free_for_insert(&buf).unwrap(), None);
    assert_eq!(insert(&mut buf, KIND_RECORD, b"x").unwrap(), None);
    delete(&mut buf, s).unwrap();
    assert_eq!(insert(&mut buf, KIND_RECORD, b"x").unwrap(), None);
    // A reformatted page keeps the sequence, so it stays closed.
    page::format(&mut buf, PageId(1), PageType::Slotted);
    assert_eq!(insert(&mut buf, KIND_RECORD, b"x").unwrap(), None);
}

#[test]
fn large_pages_use_u32_header_fields_and_cap_the_directory() {
    let mut buf = new_page(65536, 9);
    let big = bytes(max_payload(65536), 3);
    let (s, _) = ins(&mut buf, &big);
    check(&buf).unwrap();
    assert_eq!(read(&buf, s).unwrap().2, big);
    delete(&mut buf, s).unwrap();
    let (a, _) = ins(&mut buf, &bytes(40000, 1));
    let (b, _) = ins(&mut buf, &bytes(20000, 2));
    delete(&mut buf, a).unwrap();
    assert!(update(&mut buf, b, KIND_RECORD, &bytes(60000, 4)).unwrap());
    check(&buf).unwrap();
    assert_eq!(read(&buf, b).unwrap().2, bytes(60000, 4));
    delete(&mut buf, b).unwrap();
    // Tiny records: the slot limit binds before space does.
    for i in 0..SLOT_COUNT_MAX {
        assert_eq!(ins(&mut buf, &[1]).0, SlotIdx(i as u16));
    }
    assert_eq!(free_for_insert(&buf).unwrap(), None);
    assert_eq!(insert(&mut buf, KIND_RECORD, b"").unwrap(), None);
    check(&buf).unwrap();
    delete(&mut buf, SlotIdx(17)).unwrap();
    assert_eq!(ins(&mut buf, b"again").0, SlotIdx(17));
    check(&buf).unwrap();
}

#[test]
fn specific_damage_is_reported_not_panicked_on() {
    let mut good = new_page(4096, 42);
    let (a, _) = ins(&mut good, &bytes(100, 1));
    let (b, _) = ins(&mut good, &bytes(100, 2));
    let entry = |s: SlotIdx| DIR_START + usize::from(s.0) * SLOT_ENTRY_SIZE;

    // Slot offset past the page end.
    let mut buf = good.clone();
    put_u16(&mut buf, entry(b) + ENT_OFFSET, 4090);
    assert_corrupt(
        check(&buf),
        42,
        "slot 1: record at 4090..4190 extends past the page end",
    );
    assert_corrupt(get(&buf, b), 42, "slot 1");
    assert_corrupt(delete(&mut buf.clone(), b), 42, "slot 1");
    assert_corrupt(update(&mut buf.clone(), b, 1, b"x"), 42, "slot 1");
    assert_corrupt(iter(&buf).collect::<Result<Vec<_>>>(), 42, "slot 1");
    assert!(get(&buf, a).unwrap().is_some(), "other slots stay readable");

    // Overlapping slots: get cannot see it, check and compaction do.
    let mut buf = good.clone();
    let (c, _) = ins(&mut buf, &bytes(100, 3));
    let (_d, _) = ins(&mut buf, &bytes(100, 4));
    delete(&mut buf, c).unwrap(); // leaves garbage, so a big insert compacts
    let off_a = get_u16(&buf, entry(a) + ENT_OFFSET);
    put_u16(&mut buf, entry(b) + ENT_OFFSET, off_a - 50);
    assert_corrupt(check(&buf), 42, "slot 1: record at");
    assert_corrupt(check(&buf), 42, "overlaps slot 0");
    assert_eq!(get(&buf, b).unwrap().unwrap().data.len(), 100);
    let free = free_for_insert(&buf).unwrap().unwrap();
    assert_corrupt(insert(&mut buf.clone(), 1, &bytes(free, 0)), 42, "overlaps");

    // Record reaching into the free gap / directory.
    let mut buf = good.clone();
    put_u16(&mut buf, entry(b) + ENT_OFFSET, 40);
    assert_corrupt(check(&buf), 42, "starts below the heap");
    assert_corrupt(get(&buf, b), 42, "slot 1");

    // Header damage.
    for (field, value, needle) in [
        (OFF_SLOT_COUNT, 5000u32, "limit"),
        (OFF_SLOT_COUNT, 400, "overlaps the slot directory"),
        (OFF_HEAP_SIZE, 4096, "overlaps the slot directory"),
        (OFF_HEAP_SIZE, u32::MAX, "overlaps the slot directory"),
        (OFF_GARBAGE, 300, "garbage claimed"),
        (OFF_GARBAGE, 7, "accounting"),
        (OFF_FLAGS, 1, "flags"),
    ] {
        let mut buf = good.clone();
        if field == OFF_SLOT_COUNT || field == OFF_FLAGS {
            put_u16(&mut buf, field, value as u16);
        } else {
            put_u32(&mut buf, field, value);
        }
        assert_corrupt(check(&buf), 42, needle);
        if needle != "accounting" {
            assert_corrupt(get(&buf, a), 42, needle);
            assert_corrupt(insert(&mut buf.clone(), 1, b"x"), 42, needle);
        }
    }

    // Entry damage.
    let mut buf = good.clone();
    put_u32(&mut buf, entry(b) + ENT_UNIQ, 1000);
    assert_corrupt(get(&buf, b), 42, "never handed out");
    let mut buf = good.clone();
    let ua = get_u32(&buf, entry(a) + ENT_UNIQ);
    put_u32(&mut buf, entry(b) + ENT_UNIQ, ua);
    assert_corrupt(check(&buf), 42, "slot 1: uniquifier 1 is also held by slot 0");
    let mut buf = good.clone();
    buf[entry(b) + ENT_KIND] = 0;
    assert_corrupt(check(&buf), 42, "slot 1: free slot has offset");
    assert_corrupt(get(&buf, b), 42, "slot 1: free slot");
    let mut buf = good.clone();
    buf[entry(a) + ENT_RESERVED] = 3;
    assert_corrupt(check(&buf), 42, "slot 0: reserved byte");
    let mut buf = good.clone();
    buf[2000] = 9;
    assert_corrupt(check(&buf), 42, "free gap at offset 2000");
    let mut buf = good.clone();
    page::set_uniq_seq(&mut buf, 0);
    assert_corrupt(check(&buf), 42, "sequence is 0");
    let mut buf = good.clone();
    page::format(&mut buf, PageId(42), PageType::Free);
    assert_corrupt(check(&buf), 42, "expected a slotted page");
}

#[test]
fn overstated_garbage_count_is_corrupt_not_a_failed_assertion() {
    // Found by `damaged_valid_page_is_never_a_panic`: a damaged garbage
    // count that still fits the heap tripped a debug assertion when a
    // delete or shrink added to it.
    let mut good = new_page(4096, 11);
    let (a, _) = ins(&mut good, &bytes(100, 1));
    let (b, _) = ins(&mut good, &bytes(100, 2));
    put_u32(&mut good, OFF_GARBAGE, 150);
    assert_corrupt(check(&good), 11, "accounting");
    assert_corrupt(delete(&mut good.clone(), b), 11, "accounting");
    assert_corrupt(delete(&mut good.clone(), a), 11, "accounting");
    assert_corrupt(update(&mut good.clone(), a, 1, b""), 11, "accounting");
    assert_corrupt(update(&mut good.clone(), b, 1, &[1; 500]), 11, "accounting");
}

/// Runs every read and write entry point on `buf` (writes on copies) and
/// checks that each either succeeds or reports the page as corrupt; if
/// `check` passes, nothing may report corruption.
fn poke_everywhere(buf: &[u8], slots: &[u16]) {
    let page = page::page_id(buf);
    let healthy = check(buf).is_ok();
    let ok_or_corrupt = |what: &str, r: Result<()>, caller_error_ok: bool| match r {
        Ok(()) => {}
        Err(Error::Corrupt { page: p, reason }) => {
            assert_eq!(p, page);
            assert!(!healthy, "{what} reports {reason:?} on a page check() passes");
        }
        Err(Error::InvalidArgument(_)) if caller_error_ok => {}
        Err(e) => panic!("{what}: unexpected error {e}"),
    };
    ok_or_corrupt("live_count", live_count(buf).map(drop), false);
    ok_or_corrupt("iter", iter(buf).try_for_each(|r| r.map(drop)), false);
    let free = free_for_insert(buf);
    ok_or_corrupt("free_for_insert", free.as_ref().map(drop).map_err(clone_err), false);
    let _ = slot_count(buf);
    for &s in slots {
        ok_or_corrupt("get", get(buf, SlotIdx(s)).map(drop), false);
        let mut copy = buf.to_vec();
        ok_or_corrupt("update", update(&mut copy, SlotIdx(s), 1, &[5; 300]).map(drop), true);
        let mut copy = buf.to_vec();
        ok_or_corrupt("delete", delete(&mut copy, SlotIdx(s)), true);
    }
    for len in [0, 1, 1000] {
        let mut copy = buf.to_vec();
        ok_or_corrupt("insert", insert(&mut copy, 1, &vec![7; len]).map(drop), false);
    }
    if let Ok(Some(n)) = free {
        let mut copy = buf.to_vec();
        ok_or_corrupt(
            "insert free_for_insert",
            insert(&mut copy, 1, &vec![7; n]).map(drop),
            false,
        );
    }
}

fn clone_err(e: &Error) -> Error {
    match e {
        Error::Corrupt { page, reason } => Error::corrupt(*page, reason.clone()),
        other => Error::InvalidArgument(other.to_string()),
    }
}

#[derive(Clone, Debug)]
enum Op {
    Insert {
        kind: u8,
        len: usize,
        seed: u8,
    },
    Update {
        pick: prop::sample::Index,
        kind: u8,
        len: usize,
        seed: u8,
    },
    Delete {
        pick: prop::sample::Index,
    },
}

fn op_strategy(page_size: usize) -> impl Strategy<Value = Op> {
    let len = 0..page_size / 2;
    let small = 0usize..64;
    prop_oneof![
        3 => (1u8..=4, prop_oneof![len.clone(), small.clone()], any::<u8>())
            .prop_map(|(kind, len, seed)| Op::Insert { kind, len, seed }),
        2 => (any::<prop::sample::Index>(), 1u8..=4, prop_oneof![len, small], any::<u8>())
            .prop_map(|(pick, kind, len, seed)| Op::Update { pick, kind, len, seed }),
        2 => any::<prop::sample::Index>().prop_map(|pick| Op::Delete { pick }),
    ]
}

type Model = BTreeMap<SlotIdx, (u8, Uniq, Vec<u8>)>;

fn run_model(page_size: usize, ops: &[Op]) {
    let mut buf = new_page(page_size, 7);
    let mut model = Model::new();
    let mut last_uniq = Uniq(0);
    for op in ops {
        match op {
            Op::Insert { kind, len, seed } => {
                let data = bytes(*len, *seed);
                let free = free_for_insert(&buf).unwrap();
                let got = insert(&mut buf, *kind, &data).unwrap();
                assert_eq!(got.is_some(), free.is_some_and(|n| *len <= n), "{free:?}");
                if let Some((slot, uniq)) = got {
                    let lowest_free = (0u16..).find(|i| !model.contains_key(&SlotIdx(*i)));
                    assert_eq!(Some(slot.0), lowest_free);
                    assert!(uniq > last_uniq);
                    last_uniq = uniq;
                    model.insert(slot, (*kind, uniq, data));
                }
            }
            Op::Update { pick, kind, len, seed } => {
                if model.is_empty() {
                    continue;
                }
                let slot = *model.keys().nth(pick.index(model.len())).unwrap();
                let data = bytes(*len, *seed);
                let hdr = Header::read(&buf).unwrap();
                let old_len = model[&slot].2.len();
                let room = hdr.gap() + hdr.garbage + old_len;
                let before = buf.clone();
                let fits = update(&mut buf, slot, *kind, &data).unwrap();
                assert_eq!(fits, *len <= room);
                if fits {
                    let e = model.get_mut(&slot).unwrap();
                    e.0 = *kind;
                    e.2 = data;
                } else {
                    assert_eq!(buf, before);
                }
            }
            Op::Delete { pick } => {
                if model.is_empty() {
                    continue;
                }
                let slot = *model.keys().nth(pick.index(model.len())).unwrap();
                delete(&mut buf, slot).unwrap();
                model.remove(&slot);
            }
        }
        check(&buf).unwrap();
        for (slot, want) in &model {
            assert_eq!(read(&buf, *slot).as_ref(), Some(want), "{slot:?}");
        }
        let listed: Vec<_> = iter(&buf)
            .map(|r| {
                let (s, r) = r.unwrap();
                (s, (r.kind, r.uniq, r.data.to_vec()))
            })
            .collect();
        assert_eq!(listed, model.clone().into_iter().collect::<Vec<_>>());
        let expect_count = model.keys().next_back().map_or(0, |s| usize::from(s.0) + 1);
        assert_eq!(slot_count(&buf), expect_count);
        // free_for_insert is exact: that many bytes fit, one more does not.
        if let Some(n) = free_for_insert(&buf).unwrap() {
            let mut copy = buf.clone();
            assert!(insert(&mut copy, 1, &vec![3; n]).unwrap().is_some(), "{n}");
            check(&copy).unwrap();
            let mut copy = buf.clone();
            assert!(insert(&mut copy, 1, &vec![3; n + 1]).unwrap().is_none(), "{n}");
        } else {
            assert!(insert(&mut buf.clone(), 1, b"").unwrap().is_none());
        }
    }
}

proptest! {
    #[test]
    fn model_4k(ops in prop::collection::vec(op_strategy(4096), 1..120)) {
        run_model(4096, &ops);
    }

    #[test]
    fn model_16k(ops in prop::collection::vec(op_strategy(16384), 1..120)) {
        run_model(16384, &ops);
    }

    #[test]
    fn random_body_is_corrupt_not_a_panic(body in prop::collection::vec(any::<u8>(), 4096 - 24)) {
        let mut buf = new_page(4096, 5);
        buf[24..].copy_from_slice(&body);
        prop_assert!(check(&buf).is_err());
        poke_everywhere(&buf, &[0, 1, 2, 100, 4095, u16::MAX]);
    }

    #[test]
    fn plausible_header_over_random_entries_is_never_a_panic(
        body in prop::collection::vec(any::<u8>(), 4096 - 24),
        slot_count in 0u16..=400,
        heap_size in 0u32..=4096,
        garbage in 0u32..=4096,
        uniq_seq in any::<u32>(),
        sparse in any::<bool>(),
    ) {
        let mut buf = new_page(4096, 6);
        buf[24..].copy_from_slice(&body);
        if sparse {
            // Mostly-zero entries make free slots and empty records likely.
            for (i, b) in buf[DIR_START..].iter_mut().enumerate() {
                if i % 3 != 0 { *b = 0; }
            }
        }
        put_u16(&mut buf, OFF_SLOT_COUNT, slot_count);
        put_u16(&mut buf, OFF_FLAGS, 0);
        put_u32(&mut buf, OFF_HEAP_SIZE, heap_size);
        put_u32(&mut buf, OFF_GARBAGE, garbage.min(heap_size));
        page::set_uniq_seq(&mut buf, uniq_seq);
        poke_everywhere(&buf, &[0, 1, 2, slot_count.saturating_sub(1), slot_count, 399]);
    }

    #[test]
    fn damaged_valid_page_is_never_a_panic(
        ops in prop::collection::vec(op_strategy(4096), 1..40),
        damage in prop::collection::vec((24usize..4096, any::<u8>()), 1..6),
    ) {
        let mut buf = new_page(4096, 8);
        for op in &ops {
            if let Op::Insert { kind, len, seed } = op {
                let _ = insert(&mut buf, *kind, &bytes(*len, *seed)).unwrap();
            } else if let Op::Delete { pick } = op {
                let n = slot_count(&buf);
                if n > 0 {
                    let _ = delete(&mut buf, SlotIdx(pick.index(n) as u16));
                }
            }
        }
        check(&buf).unwrap();
        // Aim half of the damage at the header and directory.
        for (k, (pos, v)) in damage.iter().enumerate() {
            let pos = if k % 2 == 0 { 24 + pos % 120 } else { *pos };
            buf[pos] = *v;
        }
        let n = slot_count(&buf) as u16;
        poke_everywhere(&buf, &[0, 1, 2, n.saturating_sub(1), n]);
    }
}
