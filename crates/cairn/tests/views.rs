//! Views against the decoder (`cairn::view`), on random objects and on
//! random damage to their bytes: `check` accepts exactly what `decode`
//! accepts, every field read in place equals the decoded field, and no
//! bytes make an accessor panic. The assertions are the fuzz target's
//! (`fuzz/targets/typed_records.rs`), driven here by proptest.
//! `PROPTEST_CASES` scales the run.

#[path = "../../../fuzz/targets/typed_records.rs"]
mod typed_records;

use std::collections::{BTreeMap, BTreeSet};

use cairn::codec::{Persistent, Writer};
use cairn::storage::{Oid, PageId, SlotIdx, Uniq};
use cairn::{List, Map, Obj, Ref, Set};
use proptest::prelude::*;
use typed_records::{Blob, Part, Point};

fn oid() -> impl Strategy<Value = Oid> {
    (any::<u32>(), any::<u16>(), any::<u32>()).prop_map(|(p, s, u)| Oid {
        page: PageId(p),
        slot: SlotIdx(s),
        uniq: Uniq(u),
    })
}

fn part() -> impl Strategy<Value = Part> {
    (
        any::<u32>(),
        "[a-zé☃ ]{0,12}",
        any::<f64>(),
        (any::<i32>(), any::<f64>()),
        proptest::option::of(oid()),
        proptest::collection::vec(oid(), 0..6),
        proptest::collection::btree_set("[a-z]{0,5}", 0..4),
        proptest::collection::btree_map(any::<u16>(), any::<i64>(), 0..4),
    )
        .prop_map(|(id, name, weight, (x, y), next, to, tags, sizes)| Part {
            id,
            name,
            weight,
            at: Point { x, y },
            next: next.map(Ref::from_oid),
            to: List(to.into_iter().map(Ref::from_oid).collect()),
            tags: Set(tags.into_iter().collect::<BTreeSet<_>>()),
            sizes: Map(sizes.into_iter().collect::<BTreeMap<_, _>>()),
        })
}

fn blob() -> impl Strategy<Value = Blob> {
    (
        proptest::collection::vec(any::<u8>(), 0..20),
        any::<bool>(),
        any::<u8>(),
        proptest::option::of(proptest::option::of(any::<i16>())),
        proptest::collection::vec(proptest::collection::vec(any::<u64>(), 0..3), 0..3),
        "[a-z]{0,8}",
    )
        .prop_map(|(bytes, flag, small, maybe, rows, note)| Blob {
            bytes,
            flag,
            small,
            maybe,
            rows,
            note,
        })
}

fn encode<T: Persistent>(v: &T) -> Vec<u8> {
    let mut w = Writer::new();
    v.encode_fields(&mut w);
    w.into_bytes()
}

/// Runs the target's checks on `body` as a record of the type `pick` selects.
fn run(pick: u8, body: &[u8]) {
    let mut input = vec![pick];
    input.extend_from_slice(body);
    typed_records::run(&input);
}

/// `body` with `flips` applied (position modulo the length, xor mask) and
/// cut to `keep` bytes if that is shorter.
fn damage(body: &[u8], flips: &[(usize, u8)], keep: usize) -> Vec<u8> {
    let mut b = body.to_vec();
    if !b.is_empty() {
        for &(at, mask) in flips {
            let n = b.len();
            b[at % n] ^= mask;
        }
    }
    b.truncate(keep);
    b
}

proptest! {
    #[test]
    fn a_part_read_in_place_is_the_decoded_part(p in part(), flips in proptest::collection::vec((any::<usize>(), 1u8..), 0..4), keep in any::<usize>()) {
        let body = encode(&p);
        run(0, &body);
        // Through an `Obj`, as a transaction gives it.
        let obj: Obj<Part> = Obj::new(body.clone().into(), 0..body.len(), Oid { page: PageId(1), slot: SlotIdx(0), uniq: Uniq(1) }).unwrap();
        prop_assert_eq!(obj.get().name(), p.name.as_str());
        prop_assert_eq!(obj.to_owned().unwrap().id, p.id);
        let bad = damage(&body, &flips, keep);
        run(0, &bad);
        let made = Obj::<Part>::new(bad.clone().into(), 0..bad.len(), obj.oid());
        let mut r = cairn::Reader::new(&bad);
        let decodes = Part::decode_fields(&mut r).and_then(|v| r.finish("record").map(|()| v)).is_ok();
        prop_assert_eq!(made.is_ok(), decodes, "an Obj is made exactly from bytes that decode");
    }

    #[test]
    fn a_blob_read_in_place_is_the_decoded_blob(b in blob(), flips in proptest::collection::vec((any::<usize>(), 1u8..), 0..4), keep in any::<usize>()) {
        let body = encode(&b);
        run(1, &body);
        run(1, &damage(&body, &flips, keep));
    }

    #[test]
    fn any_bytes_are_read_without_a_panic(pick in 0u8..3, body in proptest::collection::vec(any::<u8>(), 0..64)) {
        run(pick, &body);
    }
}

#[test]
fn an_obj_of_damaged_bytes_names_the_field_and_offset() {
    let p = Part {
        id: 7,
        name: "seven".into(),
        weight: 1.5,
        at: Point { x: 1, y: 2.0 },
        next: None,
        to: List::new(),
        tags: Set::new(),
        sizes: Map::new(),
    };
    let mut body = encode(&p);
    // The name's length byte claims more bytes than the record has.
    body[4] = 0x7f;
    let e = Obj::<Part>::new(
        body.clone().into(),
        0..body.len(),
        Oid {
            page: PageId(9),
            slot: SlotIdx(3),
            uniq: Uniq(1),
        },
    )
    .unwrap_err();
    assert!(e.what.contains("Part.name"), "{e}");
    // The same error, at the same offset (just past the length), as decoding gives.
    let mut r = cairn::Reader::new(&body);
    let d = Part::decode_fields(&mut r).unwrap_err();
    assert_eq!((e.offset, &e.reason), (d.offset, &d.reason));
    assert_eq!(e.offset, 5, "{e}");
    // A range outside the bytes is refused too.
    assert!(Obj::<Part>::new(
        body.clone().into(),
        0..body.len() + 1,
        Oid {
            page: PageId(9),
            slot: SlotIdx(3),
            uniq: Uniq(1)
        }
    )
    .is_err());
}
