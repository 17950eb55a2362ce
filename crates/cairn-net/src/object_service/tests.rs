//! Unit tests of the object service's encodings: every request and reply
//! round-trips, and truncation, extension, bad codes and oversized counts
//! are refused.

use std::ops::Bound;

use super::*;

fn o(n: u8) -> [u8; OID_BYTES] {
    [n; OID_BYTES]
}

fn every_request() -> Vec<ObjectRequest> {
    vec![
        ObjectRequest::Fetch {
            txn: 3,
            mode: OBJ_X,
            oids: vec![o(1), o(2)],
        },
        ObjectRequest::Fetch {
            txn: 4,
            mode: OBJ_S_PAGE,
            oids: vec![o(5)],
        },
        ObjectRequest::Create {
            txn: 3,
            group: 7,
            near: NO_OID,
            bytes: b"hello".to_vec(),
        },
        ObjectRequest::Commit {
            txn: 3,
            changes: vec![
                Change::Update {
                    oid: o(4),
                    bytes: vec![9; 20],
                },
                Change::Delete { oid: o(5) },
                Change::Update {
                    oid: o(6),
                    bytes: vec![],
                },
                Change::Append {
                    oid: o(7),
                    class: 3,
                    field: "from".into(),
                    elem: vec![18, 4, b'P', b'a', b'r', b't'],
                    count: 1,
                    elems: vec![1; 10],
                },
            ],
        },
        ObjectRequest::Abort { txn: 3 },
        ObjectRequest::Snapshot { txn: 6 },
        ObjectRequest::TreeGetForUpdate {
            txn: 3,
            root: 12,
            keys: vec![b"a".to_vec(), vec![], b"zz".to_vec()],
        },
        ObjectRequest::Flush {
            txn: 3,
            changes: vec![Change::Delete { oid: o(2) }],
        },
        ObjectRequest::Method {
            txn: 3,
            method: vec![1, 2, 3],
        },
        ObjectRequest::Scan { txn: 3, group: 1 },
        ObjectRequest::ReadRange {
            txn: 3,
            oid: o(8),
            offset: 1 << 33,
            len: 4096,
        },
        ObjectRequest::TreeOpen { txn: 3, root: 9 },
        ObjectRequest::TreeCreate {
            txn: 3,
            group: 2,
            unique: true,
        },
        ObjectRequest::TreeApply {
            txn: 3,
            root: 9,
            ops: vec![
                TreeOp::Insert {
                    key: b"k".to_vec(),
                    value: b"v".to_vec(),
                },
                TreeOp::Delete {
                    key: b"k".to_vec(),
                    value: None,
                },
                TreeOp::Delete {
                    key: vec![],
                    value: Some(vec![1; 10]),
                },
            ],
        },
        ObjectRequest::TreeGet {
            txn: 3,
            root: 9,
            limit: 1,
            key: b"key".to_vec(),
            objects: false,
        },
        ObjectRequest::TreeGet {
            txn: 3,
            root: 9,
            limit: 7,
            key: vec![],
            objects: true,
        },
        ObjectRequest::TreeRange {
            txn: 3,
            root: 9,
            limit: 100,
            lo: Bound::Included(b"a".to_vec()),
            hi: Bound::Unbounded,
            after: Some(b"oid".to_vec()),
        },
        ObjectRequest::TreeRange {
            txn: 3,
            root: 9,
            limit: TREE_LIMIT_MAX,
            lo: Bound::Unbounded,
            hi: Bound::Excluded(b"z".to_vec()),
            after: None,
        },
        ObjectRequest::TreeDestroy { txn: 3, root: 9 },
    ]
}

#[test]
fn tree_replies_round_trip() {
    let values = vec![b"one".to_vec(), vec![], vec![7; 300]];
    assert_eq!(decode_values(&encode_values(&values)).unwrap(), values);
    let objects = vec![vec![1; 19], vec![2; 30], vec![3; 19]];
    let reply = ValuesAndObjects {
        values: values.clone(),
        objects: objects.clone(),
        rights: vec![
            (crate::rights::RightKey::Page(44), 9),
            (crate::rights::RightKey::Gap(45, 1 << 60), 10),
            (crate::rights::RightKey::TreeEnd(45), 11),
        ],
    };
    let both = reply.encode();
    assert_eq!(ValuesAndObjects::decode(&both).unwrap(), reply);
    let short = ValuesAndObjects {
        objects: objects[..2].to_vec(),
        ..reply.clone()
    };
    assert!(ValuesAndObjects::decode(&short.encode()).is_err());
    let values_only = ValuesAndObjects {
        objects: Vec::new(),
        ..reply.clone()
    };
    assert_eq!(ValuesAndObjects::decode(&values_only.encode()).unwrap(), values_only);
    for cut in 0..both.len() {
        assert!(ValuesAndObjects::decode(&both[..cut]).is_err());
    }
    let entries = vec![(b"a".to_vec(), b"1".to_vec()), (vec![], vec![2; 40])];
    for more in [false, true] {
        let enc = encode_entries(&entries, more);
        assert_eq!(decode_entries(&enc).unwrap(), (entries.clone(), more));
        for cut in 0..enc.len() {
            assert!(decode_entries(&enc[..cut]).is_err());
        }
    }
    let mut zero = 1u64.to_le_bytes().to_vec();
    zero.extend_from_slice(&[9, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    assert!(ObjectRequest::decode(Kind::TREE_GET, &zero).is_err(), "limit 0");
    // TREE_GET_FOR_UPDATE: each key's first value or none; 1 to 1,024 keys.
    let firsts = vec![Some(b"v".to_vec()), None, Some(vec![])];
    let enc = encode_firsts(&firsts);
    assert_eq!(decode_firsts(&enc).unwrap(), firsts);
    for cut in 0..enc.len() {
        assert!(decode_firsts(&enc[..cut]).is_err());
    }
    let mut flag = enc.clone();
    flag[4] = 2;
    assert!(decode_firsts(&flag).is_err(), "a found flag of 2");
    for n in [0u32, TREE_KEYS_MAX as u32 + 1] {
        let mut body = 1u64.to_le_bytes().to_vec();
        body.extend_from_slice(&9u32.to_le_bytes());
        body.extend_from_slice(&n.to_le_bytes());
        assert!(
            ObjectRequest::decode(Kind::TREE_GET_FOR_UPDATE, &body).is_err(),
            "{n} keys"
        );
    }
}

#[test]
fn requests_round_trip_and_every_truncation_or_extension_is_refused() {
    for req in every_request() {
        let (kind, body) = req.encode();
        assert_eq!(ObjectRequest::decode(kind, &body).unwrap(), Some(req.clone()));
        for cut in 0..body.len() {
            assert!(
                ObjectRequest::decode(kind, &body[..cut]).is_err(),
                "{req:?} cut at {cut}"
            );
        }
        let mut longer = body.clone();
        longer.push(0);
        assert!(ObjectRequest::decode(kind, &longer).is_err(), "{req:?} + 1 byte");
    }
    assert_eq!(ObjectRequest::decode(Kind(0x0101), &[]).unwrap(), None);
}

#[test]
fn limits_and_bad_codes_are_refused() {
    let (kind, mut body) = ObjectRequest::Fetch {
        txn: 1,
        mode: OBJ_S,
        oids: vec![o(1)],
    }
    .encode();
    body[8] = OBJ_S_PAGE;
    assert!(ObjectRequest::decode(kind, &body).is_ok(), "mode 2 (S with the page)");
    body[8] = OBJ_S_PAGE_AHEAD;
    assert!(ObjectRequest::decode(kind, &body).is_ok(), "mode 3 (pages read ahead)");
    body[8] = 4;
    assert!(ObjectRequest::decode(kind, &body).is_err(), "mode 4");
    let mut none = 1u64.to_le_bytes().to_vec();
    none.extend_from_slice(&[0, 0, 0]);
    assert!(ObjectRequest::decode(Kind::OBJ_FETCH, &none).is_err(), "no objects");
    let (kind, mut body) = ObjectRequest::ReadRange {
        txn: 1,
        oid: o(1),
        offset: 0,
        len: 1,
    }
    .encode();
    let n = body.len();
    body[n - 4..].copy_from_slice(&(READ_RANGE_MAX + 1).to_le_bytes());
    assert!(ObjectRequest::decode(kind, &body).is_err(), "range too long");
    let (kind, mut body) = ObjectRequest::Commit {
        txn: 1,
        changes: vec![Change::Delete { oid: o(1) }],
    }
    .encode();
    let n = body.len();
    body[n - 1] = 7;
    assert!(ObjectRequest::decode(kind, &body).is_err(), "op 7");
    // A count that the bytes cannot hold is refused before allocating.
    let mut huge = 1u64.to_le_bytes().to_vec();
    huge.extend_from_slice(&COMMIT_CHANGES_MAX.to_le_bytes());
    assert!(ObjectRequest::decode(Kind::OBJ_COMMIT, &huge).is_err());
}

#[test]
fn fetched_objects_round_trip_and_inconsistent_parts_are_refused() {
    let bytes = vec![5u8; 33];
    for part in [
        FetchedObject {
            oid: o(1),
            found: true,
            total_len: 33,
            bytes: &bytes,
            right: 5,
        },
        FetchedObject {
            oid: o(2),
            found: false,
            total_len: 0,
            bytes: &[],
            right: 0,
        },
        FetchedObject {
            oid: o(3),
            found: true,
            total_len: 1 << 40,
            bytes: &[],
            right: 0,
        },
    ] {
        let enc = part.encode();
        assert_eq!(FetchedObject::decode(&enc).unwrap(), part);
        for cut in 0..FETCHED_OBJECT_HEADER {
            assert!(FetchedObject::decode(&enc[..cut]).is_err());
        }
    }
    let mut bad = FetchedObject {
        oid: o(1),
        found: true,
        total_len: 40,
        bytes: &bytes,
        right: 0,
    }
    .encode();
    assert!(FetchedObject::decode(&bad).is_err(), "33 bytes of 40");
    bad[OID_BYTES] = 1;
    assert!(FetchedObject::decode(&bad).is_err(), "not found, with bytes");
    // A right comes only with an object sent whole.
    let long = FetchedObject {
        oid: o(3),
        found: true,
        total_len: 1 << 40,
        bytes: &[],
        right: 2,
    };
    assert!(
        FetchedObject::decode(&long.encode()).is_err(),
        "a right without the bytes"
    );
    let oids = vec![o(1), o(9)];
    assert_eq!(decode_oids(&encode_oids(&oids)).unwrap(), oids);
    assert!(decode_oids(&encode_oids(&oids)[..15]).is_err());
}

#[test]
fn a_batch_part_round_trips_and_damage_is_refused() {
    let objects: Vec<Vec<u8>> = (1..4u8)
        .map(|n| {
            FetchedObject {
                oid: o(n),
                found: true,
                total_len: u64::from(n),
                bytes: &[n; 3][..usize::from(n)],
                right: u64::from(n) * 10,
            }
            .encode()
        })
        .collect();
    let image = [9u8; 64];
    let pages = [FetchedPage {
        page: 12,
        right: 5,
        image: &image,
    }];
    let body = encode_fetched_batch(&objects, &pages);
    let back = decode_fetched_batch(&body).unwrap();
    assert_eq!(back.objects.len(), 3);
    for (b, o) in back.objects.iter().zip(&objects) {
        assert_eq!(&b.encode(), o);
    }
    assert_eq!(back.pages, pages);
    assert_eq!(
        decode_fetched_batch(&encode_fetched_batch(&[], &[])).unwrap(),
        FetchedBatch::default()
    );
    for cut in 0..body.len() {
        assert!(decode_fetched_batch(&body[..cut]).is_err(), "cut at {cut}");
    }
    let mut longer = body.clone();
    longer.push(0);
    assert!(decode_fetched_batch(&longer).is_err(), "a byte past the end");
    let no_right = encode_fetched_batch(
        &[],
        &[FetchedPage {
            page: 1,
            right: 0,
            image: &image,
        }],
    );
    assert!(decode_fetched_batch(&no_right).is_err(), "an image without a right");
    let mut many = body.clone();
    many[..4].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(decode_fetched_batch(&many).is_err(), "too many");
    let mut pages_many = encode_fetched_batch(&[], &[]);
    pages_many[4..].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(decode_fetched_batch(&pages_many).is_err(), "too many pages");
}
