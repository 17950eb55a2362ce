//! Unit tests of the page service's encodings: every request and reply
//! round-trips, and truncation, extension and oversized counts are refused.

use super::*;

fn every_request() -> Vec<PageRequest> {
    vec![
        PageRequest::Fetch {
            txn: 7,
            mode: FETCH_TRY_INSERT | FETCH_CACHE,
            group: 3,
            pages: vec![(1, 0), (2, 99), (3, u64::MAX)],
        },
        PageRequest::Allocate {
            txn: 7,
            group: 1,
            near: NO_PAGE,
            page_type: 5,
        },
        PageRequest::Free { txn: 7, page: 9 },
        PageRequest::Commit {
            txn: 7,
            records: vec![vec![1, 2, 3], vec![], vec![9; 100]],
        },
        PageRequest::Stage {
            txn: 7,
            records: vec![vec![4; 10]],
        },
        PageRequest::Abort { txn: 7 },
        PageRequest::Volume,
        PageRequest::Lock {
            txn: 7,
            resource: RESOURCE_GROUP,
            id: 2,
            mode: LOCK_MODE_SIX,
            try_only: true,
        },
        PageRequest::GroupPages { txn: 7, group: 2 },
        PageRequest::Groups,
        PageRequest::Group {
            create: true,
            name: "parts".into(),
        },
        PageRequest::Read { page: 12 },
        PageRequest::VolumeFile,
        PageRequest::Written { txn: 7 },
        PageRequest::LockStats,
        PageRequest::Snapshot { txn: 8 },
        PageRequest::Fetch {
            txn: 8,
            mode: FETCH_SNAPSHOT,
            group: NO_GROUP,
            pages: vec![(4, 0)],
        },
        PageRequest::Place {
            txn: 9,
            cache: true,
            group: 2,
            need: 400,
            pages: vec![(10, 0), (11, 5), (9, 0)],
        },
        PageRequest::Append {
            txn: 9,
            appends: vec![an_append(3), an_append(1)],
        },
    ]
}

/// An append to an object on page `page`.
fn an_append(page: u8) -> crate::object_service::Change {
    let mut oid = [0u8; crate::object_service::OID_BYTES];
    oid[0] = page;
    crate::object_service::Change::Append {
        oid,
        class: 4,
        field: "parts".into(),
        elem: vec![1, 2],
        count: 2,
        elems: vec![9; 20],
    }
}

#[test]
fn requests_round_trip_and_every_truncation_or_extension_is_refused() {
    for req in every_request() {
        let (kind, body) = req.encode();
        assert_eq!(PageRequest::decode(kind, &body).unwrap(), Some(req.clone()));
        for cut in 0..body.len() {
            assert!(PageRequest::decode(kind, &body[..cut]).is_err(), "{req:?} cut at {cut}");
        }
        let mut longer = body.clone();
        longer.push(0);
        assert!(
            PageRequest::decode(kind, &longer).is_err(),
            "{req:?} with a trailing byte"
        );
    }
}

#[test]
fn fault_details_round_trip_and_damage_is_refused() {
    for d in [
        FaultDetail::LockTimeout {
            resource: "page 7".into(),
            mode: "X".into(),
            waited_ms: 1500,
        },
        FaultDetail::Deadlock {
            cycle: "txn 3 → txn 4 → txn 3".into(),
        },
        FaultDetail::Corrupt {
            page: 9,
            reason: "bad checksum".into(),
        },
        FaultDetail::SnapshotTooOld {
            lsn: 77,
            bytes_max: 1 << 20,
        },
    ] {
        let body = d.encode();
        assert_eq!(FaultDetail::decode(&body).unwrap(), d);
        for cut in 0..body.len() {
            assert!(FaultDetail::decode(&body[..cut]).is_err(), "{d:?} cut at {cut}");
        }
        let mut longer = body.clone();
        longer.push(0);
        assert!(FaultDetail::decode(&longer).is_err());
    }
    assert!(FaultDetail::decode(&[5]).is_err(), "unknown tag");
    let long = FaultDetail::Deadlock {
        cycle: "é".repeat(40_000),
    };
    let FaultDetail::Deadlock { cycle } = FaultDetail::decode(&long.encode()).unwrap() else {
        panic!("a deadlock");
    };
    assert!(cycle.len() <= u16::MAX as usize && cycle.chars().all(|c| c == 'é'));
}

#[test]
fn counts_are_checked_before_allocating() {
    let mut body = 7u64.to_le_bytes().to_vec();
    body.extend_from_slice(&COMMIT_RECORDS_MAX.to_le_bytes());
    assert!(PageRequest::decode(Kind::COMMIT, &body).is_err());
    let mut body = 7u64.to_le_bytes().to_vec();
    body.push(0);
    body.extend_from_slice(&NO_GROUP.to_le_bytes());
    body.extend_from_slice(&300u16.to_le_bytes());
    assert!(PageRequest::decode(Kind::FETCH, &body).is_err());
    let place = |cache: u8, count: u16| {
        let mut body = 7u64.to_le_bytes().to_vec();
        body.push(cache);
        body.extend_from_slice(&2u32.to_le_bytes());
        body.extend_from_slice(&100u32.to_le_bytes());
        body.extend_from_slice(&count.to_le_bytes());
        for p in 0..count {
            body.extend_from_slice(&u32::from(p).to_le_bytes());
            body.extend_from_slice(&0u64.to_le_bytes());
        }
        PageRequest::decode(Kind::PLACE, &body)
    };
    assert!(place(1, 256).unwrap().is_some(), "256 candidates");
    assert!(place(1, 257).is_err(), "more than a FETCH may name");
    assert!(place(1, 0).is_err(), "no candidate");
    assert!(place(2, 3).is_err(), "a cache flag of 2");
    let append = |changes: &[crate::object_service::Change], count: u32| {
        let (_, mut body) = PageRequest::Append {
            txn: 7,
            appends: changes.to_vec(),
        }
        .encode();
        body[8..12].copy_from_slice(&count.to_le_bytes());
        PageRequest::decode(Kind::APPEND, &body)
    };
    assert!(append(&[an_append(1)], 1).unwrap().is_some());
    assert!(append(&[], 0).is_err(), "no append");
    assert!(append(&[an_append(1)], u32::MAX).is_err(), "a count past the limit");
    assert!(append(&[an_append(1)], 1000).is_err(), "a count past the body");
    let update = crate::object_service::Change::Update {
        oid: [0; crate::object_service::OID_BYTES],
        bytes: vec![1],
    };
    assert!(append(&[update], 1).is_err(), "a change that is not an append");
    assert_eq!(
        PageRequest::decode(Kind(0x0100), b"").unwrap(),
        None,
        "BEGIN is retired"
    );
    assert_eq!(PageRequest::decode(Kind(0x0999), b"").unwrap(), None);
}

#[test]
fn replies_round_trip_and_damage_is_refused() {
    let part = Fetched {
        page: 5,
        status: FetchStatus::Image,
        group: 2,
        page_count: 40,
        lsn: 1234,
        cover: 17,
        image: &[7u8; 64],
    };
    let bytes = part.encode();
    assert_eq!(Fetched::decode(&bytes).unwrap(), part);
    assert!(
        Fetched::decode(&bytes[..FETCHED_HEADER]).is_err(),
        "an image status without an image"
    );
    let unchanged = Fetched {
        status: FetchStatus::Unchanged,
        image: &[],
        ..part.clone()
    };
    assert_eq!(Fetched::decode(&unchanged.encode()).unwrap(), unchanged);
    let mut bad = unchanged.encode();
    bad[4] = 9;
    assert!(Fetched::decode(&bad).is_err(), "an unknown status");
    for cut in 0..FETCHED_HEADER {
        assert!(Fetched::decode(&unchanged.encode()[..cut]).is_err());
    }
    let lsns = vec![(1, 2), (3, u64::MAX)];
    assert_eq!(decode_lsns(&encode_lsns(&lsns)).unwrap(), lsns);
    let reply = CommitReply {
        lsns: lsns.clone(),
        changes: vec![KeptChange {
            page: 3,
            base: 40,
            runs: vec![(16, vec![1, 2, 3]), (200, vec![9])],
        }],
    };
    let body = reply.encode();
    assert_eq!(decode_commit_reply(&body).unwrap(), reply);
    assert!(decode_lsns(&body).is_err(), "changes where none were kept");
    for cut in encode_lsns(&lsns).len() + 1..body.len() {
        assert!(decode_commit_reply(&body[..cut]).is_err(), "cut at {cut}");
    }
    let mut empty = encode_lsns(&lsns);
    empty.extend_from_slice(&0u32.to_le_bytes());
    assert!(decode_commit_reply(&empty).is_err(), "an empty list of changes");
    let plain = CommitReply {
        lsns: lsns.clone(),
        changes: Vec::new(),
    };
    assert_eq!(plain.encode(), encode_lsns(&lsns));
    assert!(decode_lsns(&encode_lsns(&lsns)[..20]).is_err());
    assert_eq!(decode_pages(&encode_pages(&[4, 5, 6])).unwrap(), vec![4, 5, 6]);
    assert_eq!(decode_kept_pages(&encode_pages(&[7])).unwrap(), vec![7]);
    assert!(
        decode_kept_pages(&encode_pages(&[7])[..6]).is_err(),
        "a short APPEND reply"
    );
    assert!(decode_pages(&u32::MAX.to_le_bytes()).is_err(), "a count past the body");
    let groups = vec![(0, "default".to_string()), (9, "ünïcode".to_string())];
    assert_eq!(decode_groups(&encode_groups(&groups)).unwrap(), groups);
    let alloc = encode_page(3, 70, &[1, 2]);
    let (p, n, img) = decode_page(&alloc).unwrap();
    assert_eq!((p, n, img), (3, 70, &[1u8, 2][..]));
}

#[test]
fn volume_info_round_trips() {
    let v = VolumeInfo {
        page_size: 4096,
        page_count: 77,
        region_pages: 9,
    };
    assert_eq!(VolumeInfo::decode(&v.encode()).unwrap(), v);
    assert!(VolumeInfo::decode(&v.encode()[..11]).is_err());
}

#[test]
fn lock_counters_round_trip_and_a_short_or_long_body_is_refused() {
    let c = LockCounters {
        requests: 1,
        waits: 2,
        deadlocks: 3,
        timeouts: 4,
        upgrades: 5,
        wait_micros: u64::MAX,
    };
    let body = c.encode();
    assert_eq!(body.len(), LOCK_COUNTERS_BYTES);
    assert_eq!(LockCounters::decode(&body).unwrap(), c);
    for cut in 0..body.len() {
        assert!(LockCounters::decode(&body[..cut]).is_err(), "cut at {cut}");
    }
    let mut longer = body;
    longer.push(0);
    assert!(LockCounters::decode(&longer).is_err());
    // The request has no body: a byte after it is refused.
    assert!(PageRequest::decode(Kind::LOCK_STATS, &[0]).is_err());
    assert_eq!(PageRequest::LockStats.txn(), None);
}

#[test]
fn a_snapshot_window_round_trips_and_a_window_that_makes_no_sense_is_refused() {
    let w = SnapshotInfo {
        low: 100,
        high: 500,
        excluded: vec![(100, 130), (200, 260)],
    };
    let body = w.encode();
    assert_eq!(SnapshotInfo::decode(&body).unwrap(), w);
    for cut in 0..body.len() {
        assert!(SnapshotInfo::decode(&body[..cut]).is_err(), "cut at {cut}");
    }
    let mut longer = body.clone();
    longer.push(0);
    assert!(SnapshotInfo::decode(&longer).is_err());
    // What it sees: at or below low; above, up to high outside the ranges.
    assert!(w.sees(100) && w.sees(140) && w.sees(500) && w.sees(200));
    assert!(!w.sees(101) && !w.sees(130) && !w.sees(201) && !w.sees(501));
    for bad in [
        SnapshotInfo {
            low: 600,
            high: 500,
            excluded: vec![],
        },
        SnapshotInfo {
            low: 100,
            high: 500,
            excluded: vec![(90, 130)],
        },
        SnapshotInfo {
            low: 100,
            high: 500,
            excluded: vec![(130, 130)],
        },
        SnapshotInfo {
            low: 100,
            high: 500,
            excluded: vec![(400, 501)],
        },
    ] {
        assert!(SnapshotInfo::decode(&bad.encode()).is_err(), "{bad:?}");
    }
    let too_many = SnapshotInfo {
        low: 0,
        high: u64::MAX,
        excluded: (0..=SNAPSHOT_EXCLUDED_MAX as u64).map(|i| (i, i + 1)).collect(),
    };
    assert!(SnapshotInfo::decode(&too_many.encode()).is_err());
    let mut bad_mode = PageRequest::Fetch {
        txn: 8,
        mode: FETCH_SNAPSHOT,
        group: NO_GROUP,
        pages: vec![(4, 0)],
    }
    .encode()
    .1;
    bad_mode[8] = FETCH_U;
    assert!(PageRequest::decode(Kind::FETCH, &bad_mode).is_ok(), "mode 4 (U)");
    bad_mode[8] = FETCH_U + 1;
    assert!(PageRequest::decode(Kind::FETCH, &bad_mode).is_err(), "mode 5");
    bad_mode[8] = (FETCH_U + 1) | FETCH_CACHE;
    assert!(
        PageRequest::decode(Kind::FETCH, &bad_mode).is_err(),
        "mode 5 with the cache flag"
    );
}

#[test]
fn lock_mode_u_is_the_last_lock_mode() {
    let lock = |mode| PageRequest::Lock {
        txn: 3,
        resource: RESOURCE_PAGE,
        id: 9,
        mode,
        try_only: false,
    };
    let (kind, body) = lock(LOCK_MODE_U).encode();
    assert_eq!(PageRequest::decode(kind, &body).unwrap(), Some(lock(LOCK_MODE_U)));
    let (kind, body) = lock(LOCK_MODE_U + 1).encode();
    assert!(PageRequest::decode(kind, &body).is_err(), "lock mode 6");
}
