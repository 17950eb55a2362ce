//! The `frame`, `page_service`, `object_service` and `rights` fuzz targets' corpora,
//! replayed on stable (see `fuzz/replay.rs`).

#[path = "../../../fuzz/replay.rs"]
mod replay;

#[path = "../../../fuzz/targets/frame.rs"]
mod frame;

#[path = "../../../fuzz/targets/page_service.rs"]
mod page_service;

#[path = "../../../fuzz/targets/object_service.rs"]
mod object_service;

#[path = "../../../fuzz/targets/rights.rs"]
mod rights;

use cairn_net::page_service::{
    encode_groups, encode_lsns, encode_page, encode_pages, FetchStatus, Fetched, PageRequest, VolumeInfo, FETCH_X,
    LOCK_MODE_X, RESOURCE_GROUP,
};

#[test]
fn frame_corpus_replays_without_panics() {
    replay::replay("frame", frame::run);
}

#[test]
fn page_service_corpus_replays_without_panics() {
    replay::replay("page_service", page_service::run);
}

#[test]
fn object_service_corpus_replays_without_panics() {
    replay::replay("object_service", object_service::run);
}

#[test]
fn rights_corpus_replays_without_panics() {
    replay::replay("rights", rights::run);
}

/// Writes the `rights` seeds from real encodings: one per message (the
/// selector byte first, see the target).
#[test]
#[ignore = "rewrites the seed inputs of fuzz/corpus/rights"]
fn write_rights_seeds() {
    use cairn_net::rights::{Callback, CallbackReply, RightKey, RightsRequest};
    let o = |n: u8| [n; 10];
    let seeds: [(u8, &str, Vec<u8>); 7] = [
        (
            0,
            "callback-reply-object",
            RightsRequest::CallbackReply(CallbackReply {
                id: 4,
                key: RightKey::Object(o(3)),
                epoch: 17,
                writer: 0,
                in_use_by: vec![2, 5],
            })
            .encode()
            .1,
        ),
        (
            0,
            "callback-reply-page-naming",
            RightsRequest::CallbackReply(CallbackReply {
                id: 0,
                key: RightKey::Page(3),
                epoch: 0,
                writer: 7,
                in_use_by: vec![8],
            })
            .encode()
            .1,
        ),
        (
            1,
            "release",
            RightsRequest::Release {
                rights: vec![(RightKey::Object(o(1)), 3), (RightKey::Page(8), 4)],
            }
            .encode()
            .1,
        ),
        (
            2,
            "callback-page",
            Callback {
                id: 5,
                key: RightKey::Page(3),
                epoch: 11,
            }
            .encode(),
        ),
        (
            2,
            "callback-gap",
            Callback {
                id: 6,
                key: RightKey::Gap(4, 0xdead_beef),
                epoch: 12,
            }
            .encode(),
        ),
        (
            1,
            "release-gaps",
            RightsRequest::Release {
                rights: vec![(RightKey::Gap(4, 1), 3), (RightKey::TreeEnd(4), 4)],
            }
            .encode()
            .1,
        ),
        (
            2,
            "callback-object",
            Callback {
                id: 1,
                key: RightKey::Object(o(2)),
                epoch: 5,
            }
            .encode(),
        ),
    ];
    for (selector, name, body) in seeds {
        let mut seed = vec![selector];
        seed.extend_from_slice(&body);
        replay::write_seed("rights", name, &seed);
    }
}

/// Writes the `object_service` seeds from real encodings: one per request
/// kind and reply decoder (the selector byte first, see the target).
#[test]
#[ignore = "rewrites the seed inputs of fuzz/corpus/object_service"]
fn write_object_service_seeds() {
    use cairn_net::object_service::{
        encode_entries, encode_firsts, encode_oids, encode_values, Change, FetchedObject, ObjectRequest, TreeOp,
        ValuesAndObjects,
    };
    use std::ops::Bound;
    let o = |n: u8| [n; 10];
    let requests = [
        ObjectRequest::Fetch {
            txn: 3,
            mode: 1,
            oids: vec![o(1), o(2)],
        },
        ObjectRequest::Create {
            txn: 3,
            group: 2,
            near: o(1),
            bytes: b"object".to_vec(),
        },
        ObjectRequest::Commit {
            txn: 3,
            changes: vec![
                Change::Update {
                    oid: o(1),
                    bytes: vec![5; 20],
                },
                Change::Delete { oid: o(2) },
                Change::Append {
                    oid: o(4),
                    class: 2,
                    field: "to".into(),
                    elem: vec![4],
                    count: 2,
                    elems: vec![7; 8],
                },
            ],
        },
        ObjectRequest::Abort { txn: 3 },
        ObjectRequest::Scan { txn: 3, group: 2 },
        ObjectRequest::ReadRange {
            txn: 3,
            oid: o(1),
            offset: 4096,
            len: 100,
        },
        ObjectRequest::Flush {
            txn: 3,
            changes: vec![Change::Delete { oid: o(3) }],
        },
        ObjectRequest::Method {
            txn: 3,
            method: vec![2, 1, 2, 3],
        },
        ObjectRequest::TreeOpen { txn: 3, root: 9 },
        ObjectRequest::TreeCreate {
            txn: 3,
            group: 2,
            unique: false,
        },
        ObjectRequest::TreeApply {
            txn: 3,
            root: 9,
            ops: vec![
                TreeOp::Insert {
                    key: b"k".to_vec(),
                    value: o(1).to_vec(),
                },
                TreeOp::Delete {
                    key: b"j".to_vec(),
                    value: Some(o(2).to_vec()),
                },
            ],
        },
        ObjectRequest::TreeGet {
            txn: 3,
            root: 9,
            limit: 5,
            key: b"k".to_vec(),
            objects: false,
        },
        ObjectRequest::TreeRange {
            txn: 3,
            root: 9,
            limit: 100,
            lo: Bound::Included(b"a".to_vec()),
            hi: Bound::Excluded(b"z".to_vec()),
            after: Some(o(1).to_vec()),
        },
        ObjectRequest::TreeDestroy { txn: 3, root: 9 },
        ObjectRequest::TreeGet {
            txn: 3,
            root: 9,
            limit: 1,
            key: b"k".to_vec(),
            objects: true,
        },
        ObjectRequest::Snapshot { txn: 3 },
        ObjectRequest::TreeGetForUpdate {
            txn: 3,
            root: 9,
            keys: vec![b"a".to_vec(), b"k".to_vec()],
        },
    ];
    for (i, req) in requests.into_iter().enumerate() {
        let (kind, body) = req.encode();
        let mut seed = vec![i as u8];
        seed.extend_from_slice(&body);
        replay::write_seed("object_service", &format!("request-{:04x}", kind.0), &seed);
    }
    let bytes = vec![7u8; 30];
    let part = FetchedObject {
        oid: o(1),
        found: true,
        total_len: 30,
        bytes: &bytes,
        right: 3,
    }
    .encode();
    let values = vec![o(1).to_vec(), o(2).to_vec()];
    let replies: [(u8, &str, Vec<u8>); 6] = [
        (17, "fetched", part.clone()),
        (18, "oids", encode_oids(&[o(1), o(2)])),
        (19, "values", encode_values(&values)),
        (19, "entries", encode_entries(&[(b"k".to_vec(), o(1).to_vec())], true)),
        (19, "firsts", encode_firsts(&[Some(o(1).to_vec()), None])),
        (
            20,
            "values-and-objects",
            ValuesAndObjects {
                values: values.clone(),
                objects: vec![part.clone(), part],
                rights: vec![
                    (cairn_net::rights::RightKey::Page(4), 2),
                    (cairn_net::rights::RightKey::Gap(4, 99), 3),
                    (cairn_net::rights::RightKey::TreeEnd(4), 5),
                ],
            }
            .encode(),
        ),
    ];
    for (selector, name, body) in replies {
        let mut seed = vec![selector];
        seed.extend_from_slice(&body);
        replay::write_seed("object_service", &format!("reply-{name}"), &seed);
    }
}

/// Writes the `frame` seeds of the NOTICE message (the piece-size byte first, see the target):
/// a notice, and a notice followed by a reply, so the fuzzer starts from both decoder paths.
#[test]
#[ignore = "rewrites the NOTICE seed inputs of fuzz/corpus/frame"]
fn write_frame_notice_seeds() {
    use bytes::Bytes;
    use cairn_net::message::Message;
    use cairn_net::{Kind, RequestId};
    let notice = Message::Notice {
        body: Bytes::from_static(b"callback page 7"),
    };
    let mut seed = vec![7u8];
    notice.encode(&mut seed);
    replay::write_seed("frame", "notice", &seed);
    Message::Reply {
        kind: Kind(0x0101),
        id: RequestId(3),
        body: Bytes::from_static(b"reply"),
    }
    .encode(&mut seed);
    replay::write_seed("frame", "notice_then_reply", &seed);
}

/// Rewrites the `page_service` seeds from real encodings: one per request
/// kind and reply decoder (the selector byte first, see the target).
#[test]
#[ignore = "rewrites the seed inputs of fuzz/corpus/page_service"]
fn write_page_service_seeds() {
    let requests = [
        PageRequest::Fetch {
            txn: 7,
            mode: FETCH_X,
            group: 2,
            pages: vec![(3, 0), (4, 99)],
        },
        PageRequest::Allocate {
            txn: 7,
            group: 2,
            near: 9,
            page_type: 5,
        },
        PageRequest::Free { txn: 7, page: 3 },
        PageRequest::Commit {
            txn: 7,
            records: vec![vec![1, 2, 3], vec![4; 40]],
        },
        PageRequest::Stage {
            txn: 7,
            records: vec![vec![5; 30]],
        },
        PageRequest::Abort { txn: 7 },
        PageRequest::Volume,
        PageRequest::Lock {
            txn: 7,
            resource: RESOURCE_GROUP,
            id: 2,
            mode: LOCK_MODE_X,
            try_only: true,
        },
        PageRequest::GroupPages { txn: 7, group: 2 },
        PageRequest::Groups,
        PageRequest::Group {
            create: true,
            name: "parts".into(),
        },
        PageRequest::Read { page: 3 },
    ];
    for req in requests {
        let (kind, body) = req.encode();
        let mut seed = vec![(kind.0 - 0x0100) as u8];
        seed.extend_from_slice(&body);
        replay::write_seed("page_service", &format!("request-{:04x}", kind.0), &seed);
    }
    let image = vec![0xabu8; 64];
    let part = Fetched {
        page: 3,
        status: FetchStatus::Image,
        group: 2,
        page_count: 40,
        lsn: 77,
        cover: 12,
        image: &image,
    };
    let replies: [(u8, &str, Vec<u8>); 5] = [
        (17, "fetched", part.encode()),
        (18, "lsns", encode_lsns(&[(3, 77), (4, 78)])),
        (19, "pages", encode_pages(&[3, 4, 5])),
        (
            20,
            "groups",
            encode_groups(&[(0, "default".into()), (2, "parts".into())]),
        ),
        (
            22,
            "volume",
            VolumeInfo {
                page_size: 4096,
                page_count: 40,
                region_pages: 8,
            }
            .encode(),
        ),
    ];
    for (selector, name, body) in replies {
        let mut seed = vec![selector];
        seed.extend_from_slice(&body);
        replay::write_seed("page_service", &format!("reply-{name}"), &seed);
    }
    let mut alloc = vec![19u8];
    alloc.extend_from_slice(&encode_page(3, 40, &image));
    replay::write_seed("page_service", "reply-allocate", &alloc);
    let mut snapshot = vec![24u8];
    snapshot.extend_from_slice(&PageRequest::Snapshot { txn: 9 }.encode().1);
    replay::write_seed("page_service", "request-snapshot", &snapshot);
    let mut window = vec![25u8];
    window.extend_from_slice(
        &cairn_net::page_service::SnapshotInfo {
            low: 100,
            high: 400,
            excluded: vec![(100, 150), (200, 260)],
        }
        .encode(),
    );
    replay::write_seed("page_service", "reply-snapshot", &window);
}
