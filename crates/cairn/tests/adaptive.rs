//! The adaptive client (`remote/adaptive.rs`) against one real server
//! process: it fetches whole pages of objects while the application uses
//! much of each page, single objects once it uses one per page, and pages
//! again when access clusters again — counted in round trips and in its
//! counters, no timing. And what it keeps of a page stays correct: objects
//! another transaction is writing are not sent along, and objects that came
//! along are called back like any other. A transaction reading pages in
//! sequence has the next ones read ahead, and leaves nothing behind.

mod common;

use std::sync::Arc;

use cairn::storage::{GroupId, Oid};
use cairn::tools::{parse_url, FetchMode, ObjectStore};
use cairn::AdaptivePolicy;
use common::ServerChild;

fn url(server: &ServerChild) -> String {
    format!("cairn://{}", server.addr)
}

fn adaptive(server: &ServerChild, cache_bytes: usize) -> Arc<ObjectStore> {
    ObjectStore::connect_adaptive(
        parse_url(&url(server)).unwrap(),
        &cairn::tools::Connect::default(),
        cache_bytes,
        AdaptivePolicy::default(),
    )
    .expect("connect")
}

/// `n` objects of 100 bytes in creation order (about 35 to a page).
fn seed(store: &Arc<ObjectStore>, n: usize) -> Vec<Oid> {
    let mut t = store.begin().unwrap();
    let oids = (0..n)
        .map(|i| t.create(GroupId::DEFAULT, None, &[(i % 251) as u8; 100]).unwrap())
        .collect();
    t.commit().unwrap();
    oids
}

/// Reads `oids` in one transaction, checking each object's bytes.
fn read_all(store: &Arc<ObjectStore>, oids: &[Oid], all: &[Oid]) {
    let mut t = store.begin().unwrap();
    for o in oids {
        let i = all.iter().position(|x| x == o).unwrap();
        assert_eq!(t.read(*o).unwrap(), vec![(i % 251) as u8; 100], "object {i}");
    }
    t.commit().unwrap();
}

/// One object of each page, in page order.
fn one_per_page(oids: &[Oid]) -> Vec<Oid> {
    let mut out: Vec<Oid> = Vec::new();
    for o in oids {
        if out.last().is_none_or(|l| l.page != o.page) {
            out.push(*o);
        }
    }
    out
}

#[test]
fn it_switches_to_objects_on_scattered_access_and_back_to_pages_when_access_clusters() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::serve(dir.path());
    let oids = seed(&adaptive(&server, 1 << 20), 3500);
    let pages = one_per_page(&oids);
    assert!(pages.len() >= 80, "{} pages", pages.len());

    // Clustered: every object of every page, from a fresh client (nothing
    // cached): pages are fetched whole, about one round trip per page.
    let a = adaptive(&server, 4 << 20);
    let before = a.stats();
    read_all(&a, &oids, &oids);
    let s = a.stats();
    let trips = s.round_trips - before.round_trips;
    assert_eq!(s.adaptive.mode, FetchMode::Pages, "{s:?}");
    assert_eq!(s.adaptive.to_objects, 0, "{s:?}");
    // (Pages fetched, or read ahead and then wanted.)
    assert!(
        s.adaptive.page_fetches + s.adaptive.read_ahead_used >= pages.len() as u64 - 2,
        "{s:?}"
    );
    assert!(
        trips <= pages.len() as u64 + 10,
        "{trips} round trips for {} pages",
        pages.len()
    );
    assert!(
        s.adaptive.objects_with_pages as usize >= oids.len() - 2 * pages.len(),
        "{s:?}"
    );
    assert!(s.adaptive.used_fraction_milli > 800, "{s:?}");

    // Scattered: one object per page, again and again (the runs' means
    // come down over the passes; a fresh client each time would forget
    // them, so the same client, its cache emptied by giving rights back).
    let b = adaptive(&server, 4 << 20);
    for _ in 0..3 {
        read_all(&b, &pages, &oids);
    }
    let s = b.stats();
    assert!(s.adaptive.to_objects >= 1, "{s:?}");
    assert_eq!(s.adaptive.mode, FetchMode::Objects, "{s:?}");
    // Now single objects: a client whose cache holds about 17 pages of
    // objects learns the same, then reads the last object of every page —
    // not cached any more (its pages came whole while the runs still
    // fetched pages, and were evicted since): one object per round trip.
    let c = adaptive(&server, 64 << 10);
    for _ in 0..3 {
        read_all(&c, &pages, &oids);
    }
    let before = c.stats();
    let second: Vec<Oid> = pages
        .iter()
        .filter_map(|p| oids.iter().rev().find(|o| o.page == p.page).copied())
        .collect();
    read_all(&c, &second, &oids);
    let s = c.stats();
    let fetched = s.adaptive.object_fetches - before.adaptive.object_fetches;
    let paged = s.adaptive.page_fetches - before.adaptive.page_fetches;
    assert!(
        fetched > 0 && fetched as usize + paged as usize <= second.len() && paged * 4 <= fetched,
        "object fetches {fetched}, page fetches {paged}: {s:?}"
    );
    assert!(
        s.adaptive.objects_with_pages - before.adaptive.objects_with_pages <= paged * 40,
        "{s:?}"
    );

    // Clustered again: back to pages.
    for _ in 0..2 {
        read_all(&c, &oids, &oids);
    }
    let s = c.stats();
    assert!(s.adaptive.to_pages >= 1, "{s:?}");
    assert_eq!(s.adaptive.mode, FetchMode::Pages, "{s:?}");
}

#[test]
fn objects_of_a_page_are_sent_along_only_when_free_and_are_called_back_like_any() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::serve(dir.path());
    let writer = ObjectStore::connect(
        parse_url(&url(&server)).unwrap(),
        &cairn::tools::Connect::default(),
        1 << 20,
    )
    .unwrap();
    let oids = seed(&writer, 20);
    assert!(oids.iter().all(|o| o.page == oids[0].page), "one page");

    // Another client's transaction is changing object 2: a page fetch does
    // not wait for it and does not send it.
    let mut w = writer.begin().unwrap();
    w.read_for_update(oids[2]).unwrap();
    w.update(oids[2], &[7; 100]).unwrap();
    let a = adaptive(&server, 1 << 20);
    let mut t = a.begin().unwrap();
    assert_eq!(t.read(oids[0]).unwrap(), vec![0; 100]);
    let s = a.stats();
    assert_eq!(s.adaptive.page_fetches, 1, "{s:?}");
    assert_eq!(
        s.adaptive.objects_with_pages, 18,
        "all but the one asked for and the one locked: {s:?}"
    );
    let trips = s.round_trips;
    for (i, o) in oids.iter().enumerate().skip(3) {
        assert_eq!(t.read(*o).unwrap(), vec![i as u8; 100]);
    }
    assert_eq!(a.stats().round_trips, trips, "the page's other objects came along");
    t.commit().unwrap();
    w.commit().unwrap();
    // Object 2 is read through its own OID: the committed change.
    let mut t = a.begin().unwrap();
    assert_eq!(t.read(oids[2]).unwrap(), vec![7; 100]);
    t.commit().unwrap();

    // An object that came along and was never read is kept under a right
    // across transactions, and called back when the other client changes
    // it: the next read sees the change.
    let b = adaptive(&server, 1 << 20);
    let mut t = b.begin().unwrap();
    assert_eq!(t.read(oids[5]).unwrap(), vec![5; 100]);
    t.commit().unwrap();
    let trips = b.stats().round_trips;
    let mut t = b.begin().unwrap();
    assert_eq!(t.read(oids[6]).unwrap(), vec![6; 100]);
    t.commit().unwrap();
    assert_eq!(b.stats().round_trips, trips, "object 6 came along with object 5's page");
    let mut w = writer.begin().unwrap();
    w.read_for_update(oids[6]).unwrap();
    w.update(oids[6], &[9; 100]).unwrap();
    w.commit().unwrap();
    let mut t = b.begin().unwrap();
    assert_eq!(t.read(oids[6]).unwrap(), vec![9; 100]);
    t.commit().unwrap();
    assert!(b.stats().callbacks >= 1, "{:?}", b.stats());
}

#[test]
fn objects_of_a_page_a_transaction_changes_stay_cached_past_the_bound_until_it_ends() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::serve(dir.path());
    let oids = seed(&adaptive(&server, 1 << 20), 3500);
    let on_page = |p: usize| -> Vec<Oid> {
        let page = one_per_page(&oids)[p].page;
        oids.iter().copied().filter(|o| o.page == page).collect()
    };
    let first = on_page(1);
    let others: Vec<Oid> = (2..42).flat_map(on_page).collect();
    // The bound holds about four pages of objects; the reads between go
    // far past it.
    let a = adaptive(&server, 16 << 10);
    let mut t = a.begin().unwrap();
    t.read(first[0]).unwrap();
    t.update(first[0], &[200; 100]).unwrap();
    for o in &others {
        t.read(*o).unwrap();
    }
    let trips = a.stats().round_trips;
    for o in &first[1..] {
        let i = oids.iter().position(|x| x == o).unwrap();
        assert_eq!(t.read(*o).unwrap(), vec![(i % 251) as u8; 100]);
    }
    assert_eq!(a.stats().round_trips, trips, "the changed page's objects stayed");
    t.commit().unwrap();

    // Its transaction ended: the page's objects age out like any.
    let mut t = a.begin().unwrap();
    for o in &others {
        t.read(*o).unwrap();
    }
    let trips = a.stats().round_trips;
    assert_eq!(t.read(first[0]).unwrap(), vec![200; 100], "the change committed");
    assert!(a.stats().round_trips > trips, "evicted once unpinned: {:?}", a.stats());
    t.commit().unwrap();
}

#[test]
fn a_page_kept_whole_is_read_in_place_and_called_back_and_its_readers_hold_writers_off() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::serve_with(&dir.path().join("db"), &[("CAIRN_TEST_LOCK_TIMEOUT_MS", "300")]);
    let writer = ObjectStore::connect(
        parse_url(&url(&server)).unwrap(),
        &cairn::tools::Connect::default(),
        1 << 20,
    )
    .unwrap();
    let oids = seed(&writer, 20);
    assert!(oids.iter().all(|o| o.page == oids[0].page), "one page");

    // Nobody writes the page: it comes whole, under one right.
    let a = adaptive(&server, 1 << 20);
    let mut t = a.begin().unwrap();
    assert_eq!(t.read(oids[0]).unwrap(), vec![0; 100]);
    t.commit().unwrap();
    let s = a.stats();
    assert_eq!((s.pages_shipped, s.objects_shipped), (1, 1), "{s:?}");
    assert!(
        a.cached_objects().1 >= 4096,
        "the image is kept: {:?}",
        a.cached_objects()
    );

    // A later transaction reads its objects in place, no round trip.
    let mut reader = a.begin().unwrap();
    assert_eq!(reader.read(oids[3]).unwrap(), vec![3; 100]);
    assert_eq!(a.stats().round_trips, s.round_trips);

    // Another client's writer of another object of the page calls the
    // page back; the reader is named and holds the writer off until it
    // ends (here: the writer times out).
    let mut w = writer.begin().unwrap();
    match w.read_for_update(oids[5]) {
        Err(cairn::storage::Error::LockTimeout { .. }) => {}
        other => panic!("the writer should wait for the reader under the page's right: {other:?}"),
    }
    drop(w);
    assert_eq!(reader.read(oids[3]).unwrap(), vec![3; 100]);
    reader.commit().unwrap();
    let mut w = writer.begin().unwrap();
    w.read_for_update(oids[5]).unwrap();
    w.update(oids[5], &[55; 100]).unwrap();
    w.commit().unwrap();

    // The image went with the callback: the change is read, and the
    // others are as they were.
    let mut t = a.begin().unwrap();
    assert_eq!(t.read(oids[5]).unwrap(), vec![55; 100]);
    assert_eq!(t.read(oids[6]).unwrap(), vec![6; 100]);
    t.commit().unwrap();
    assert!(a.stats().callbacks >= 1, "{:?}", a.stats());
    server.stop();
}

#[test]
fn a_page_kept_whole_goes_when_its_own_client_changes_an_object_of_it() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::serve(dir.path());
    let a = adaptive(&server, 1 << 20);
    let oids = seed(&a, 20);
    let mut t = a.begin().unwrap();
    assert_eq!(t.read(oids[0]).unwrap(), vec![0; 100]);
    t.commit().unwrap();
    let shipped = a.stats().pages_shipped;
    assert!(shipped >= 1, "{:?}", a.stats());

    let mut t = a.begin().unwrap();
    t.update(oids[1], &[11; 100]).unwrap();
    t.commit().unwrap();
    // A second client sees the change; so does this one, whose image of
    // the page (holding the old bytes) went with its commit.
    let b = adaptive(&server, 1 << 20);
    let mut t = b.begin().unwrap();
    assert_eq!(t.read(oids[1]).unwrap(), vec![11; 100]);
    t.commit().unwrap();
    let mut t = a.begin().unwrap();
    assert_eq!(t.read(oids[1]).unwrap(), vec![11; 100]);
    assert_eq!(t.read(oids[2]).unwrap(), vec![2; 100]);
    t.commit().unwrap();
    assert!(a.stats().pages_shipped > shipped, "fetched again: {:?}", a.stats());
    server.stop();
}

/// The objects of `pages` (page numbers in `oids`' order), in order.
fn objects_of(oids: &[Oid], pages: &[Oid]) -> Vec<Oid> {
    oids.iter()
        .filter(|o| pages.iter().any(|p| p.page == o.page))
        .copied()
        .collect()
}

#[test]
fn a_transaction_reading_pages_in_sequence_reads_ahead_and_leaves_nothing_behind_on_the_server() {
    let dir = tempfile::tempdir().unwrap();
    // A small server pool: pages read ahead come from the disk, on
    // blocking threads (a request ending the transaction could overtake
    // them if the client did not wait for them first).
    let server = common::serve_with(
        &dir.path().join("db"),
        &[
            ("CAIRN_TEST_LOCK_TIMEOUT_MS", "300"),
            ("CAIRN_TEST_BUFFER_FRAMES", "16"),
        ],
    );
    let writer = ObjectStore::connect(
        parse_url(&url(&server)).unwrap(),
        &cairn::tools::Connect::default(),
        1 << 20,
    )
    .unwrap();
    let oids = seed(&writer, 3500);
    let pages = one_per_page(&oids);
    assert!(pages.len() >= 60, "{} pages", pages.len());
    let ahead = AdaptivePolicy::default().read_ahead_pages as u64;

    // Every object of 20 pages, in order: after the first pages of the
    // sequence the rest come read ahead (asked for before they are
    // wanted), and at most the read-ahead window more than the pages read
    // comes at all.
    let a = adaptive(&server, 4 << 20);
    read_all(&a, &objects_of(&oids, &pages[..20]), &oids);
    let s = a.stats();
    let policy = AdaptivePolicy::default();
    assert!(
        s.adaptive.read_ahead_used >= 20 - u64::from(policy.sequence_pages) - 1,
        "{s:?}"
    );
    assert!(
        s.adaptive.pages_read_ahead <= s.adaptive.read_ahead_used + ahead,
        "{s:?}"
    );
    assert!(s.adaptive.page_fetches <= u64::from(policy.sequence_pages) + 1, "{s:?}");
    assert!((20..=20 + ahead).contains(&s.pages_shipped), "{s:?}");

    // The transaction committed with pages asked for beyond those it read:
    // nothing of it is left on the server (no lock of it holds a writer
    // off), and the page's image goes with the writer's callback.
    let beyond = pages[21];
    let mut w = writer.begin().unwrap();
    w.read_for_update(beyond).unwrap();
    w.update(beyond, &[7; 100]).unwrap();
    w.commit().unwrap();
    let mut t = a.begin().unwrap();
    assert_eq!(t.read(beyond).unwrap(), vec![7; 100]);
    t.commit().unwrap();

    // The same for a transaction that is dropped (aborted) mid-sequence.
    let b = adaptive(&server, 4 << 20);
    let mut t = b.begin().unwrap();
    for o in objects_of(&oids, &pages[30..40]) {
        t.read(o).unwrap();
    }
    assert!(b.stats().adaptive.pages_read_ahead > 0, "{:?}", b.stats());
    drop(t);
    let mut w = writer.begin().unwrap();
    w.read_for_update(pages[41]).unwrap();
    w.update(pages[41], &[9; 100]).unwrap();
    w.commit().unwrap();

    // Pages come to out of sequence (backwards): nothing is read ahead.
    let c = adaptive(&server, 4 << 20);
    let backwards: Vec<Oid> = pages[45..60].iter().rev().copied().collect();
    read_all(&c, &backwards, &oids);
    let s = c.stats();
    assert_eq!(s.adaptive.pages_read_ahead, 0, "{s:?}");
    assert_eq!(s.pages_shipped, 15, "{s:?}");
    server.stop();
}
