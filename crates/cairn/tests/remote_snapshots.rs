//! Read-only transactions at a snapshot on every client of `cairn serve`
//! (`Database::begin_read_only`): a snapshot reads the server's committed
//! state as of its beginning — objects, views and index lookups — takes no
//! lock at the server, so it never waits for another client's writer and
//! never makes one wait. A page client uses a page it caches under a right
//! only if the snapshot sees that image; object and adaptive clients read
//! around what they keep under rights (the present).

mod common;

use cairn::{Database, Error, Index, Persistent, Ref};
use common::{Backend, Site};

#[derive(Persistent, Debug, Clone, PartialEq)]
struct Item {
    #[cairn(index)]
    key: u32,
    value: i64,
}

const BY_KEY: Index<u32, Item> = Index::on("key");

fn fill(db: &Database, n: u32) -> Vec<Ref<Item>> {
    let mut tx = db.begin().unwrap();
    let refs = (0..n)
        .map(|k| tx.create(Item { key: k, value: 100 }).unwrap())
        .collect();
    tx.commit().unwrap();
    refs
}

fn warm(db: &Database, refs: &[Ref<Item>]) {
    let mut tx = db.begin().unwrap();
    for r in refs {
        tx.get(r).unwrap();
    }
    tx.find_one(&BY_KEY, &1).unwrap();
    tx.commit().unwrap();
}

fn lock_counts(db: &Database) -> (u64, u64) {
    let l = db.server_lock_stats().unwrap().expect("a client");
    (l.requests, l.waits)
}

fn a_snapshot_sees_its_state_and_neither_waits_nor_blocks(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let mut site = Site::new(backend, &dir.path().join("db")).server_env("CAIRN_TEST_LOCK_TIMEOUT_MS", "5000");
    let reader = site.open(common::opts());
    let writer = site.open(common::opts());
    let refs = fill(&writer, 200);
    warm(&reader, &refs);

    let mut ro = reader.begin_read_only().unwrap();
    // Another client changes an object and a key and holds its locks: the
    // snapshot reads both without waiting.
    let mut w = writer.begin().unwrap();
    w.update(&refs[0], |i| i.value = 7).unwrap();
    w.update(&refs[1], |i| i.key = 5_000).unwrap();
    let (requests, waits) = lock_counts(&writer);
    assert_eq!(ro.get(&refs[0]).unwrap().value, 100);
    assert_eq!(ro.find_one(&BY_KEY, &1).unwrap().as_ref(), Some(&refs[1]));
    // It holds nothing, so the writer's commit does not wait for it.
    w.commit().unwrap();
    assert_eq!(ro.get(&refs[0]).unwrap().value, 100);
    assert_eq!(ro.view(&refs[0]).unwrap().get().value(), 100);
    assert_eq!(ro.find_one(&BY_KEY, &1).unwrap().as_ref(), Some(&refs[1]));
    assert_eq!(ro.find_one(&BY_KEY, &5_000).unwrap(), None);
    for r in &refs[2..] {
        assert_eq!(ro.get(r).unwrap().value, 100);
    }
    let (requests_after, waits_after) = lock_counts(&writer);
    assert_eq!(waits_after, waits, "nobody waited");
    // Only the writer's commit asked for locks after that (a handful).
    assert!(requests_after - requests < 40, "{requests} → {requests_after}");
    assert!(matches!(
        ro.put(&refs[2], Item { key: 2, value: 0 }),
        Err(Error::ReadOnly(_))
    ));
    ro.commit().unwrap();

    // The reader's own transactions see the present.
    let mut now = reader.begin().unwrap();
    assert_eq!(now.get(&refs[0]).unwrap().value, 7);
    assert_eq!(now.find_one(&BY_KEY, &1).unwrap(), None);
    assert_eq!(now.find_one(&BY_KEY, &5_000).unwrap().as_ref(), Some(&refs[1]));
    now.commit().unwrap();
}

#[test]
fn a_page_client_snapshot_sees_its_state_and_neither_waits_nor_blocks() {
    a_snapshot_sees_its_state_and_neither_waits_nor_blocks(Backend::Page);
}

#[test]
fn a_file_client_snapshot_sees_its_state_and_neither_waits_nor_blocks() {
    a_snapshot_sees_its_state_and_neither_waits_nor_blocks(Backend::File);
}

#[test]
fn an_object_client_snapshot_sees_its_state_and_neither_waits_nor_blocks() {
    a_snapshot_sees_its_state_and_neither_waits_nor_blocks(Backend::Object);
}

#[test]
fn an_adaptive_client_snapshot_sees_its_state_and_neither_waits_nor_blocks() {
    a_snapshot_sees_its_state_and_neither_waits_nor_blocks(Backend::Adaptive);
}

/// Object and adaptive clients keep objects and lookups under rights: a
/// copy newer than a running snapshot (the client's own later transaction
/// read it after another client's commit) is not used for it, and nothing
/// the snapshot reads is kept for later transactions.
#[test]
fn object_and_adaptive_clients_read_around_what_they_keep_at_a_snapshot() {
    for backend in [Backend::Object, Backend::Adaptive] {
        let dir = tempfile::tempdir().unwrap();
        let mut site = Site::new(backend, &dir.path().join("db"));
        let reader = site.open(common::opts());
        let writer = site.open(common::opts());
        let refs = fill(&writer, 50);
        warm(&reader, &refs);
        let mut old = reader.begin_read_only().unwrap();
        let mut w = writer.begin().unwrap();
        w.update(&refs[3], |i| i.value = 9).unwrap();
        w.update(&refs[4], |i| i.key = 9_000).unwrap();
        w.commit().unwrap();
        let mut now = reader.begin().unwrap();
        assert_eq!(now.get(&refs[3]).unwrap().value, 9);
        assert_eq!(now.find_one(&BY_KEY, &9_000).unwrap().as_ref(), Some(&refs[4]));
        now.commit().unwrap();
        assert_eq!(old.get(&refs[3]).unwrap().value, 100, "{backend:?}");
        assert_eq!(old.view(&refs[3]).unwrap().get().value(), 100, "{backend:?}");
        assert_eq!(
            old.find_one(&BY_KEY, &4).unwrap().as_ref(),
            Some(&refs[4]),
            "{backend:?}"
        );
        assert_eq!(old.find_one(&BY_KEY, &9_000).unwrap(), None, "{backend:?}");
        assert!(matches!(
            old.put(&refs[5], Item { key: 5, value: 0 }),
            Err(Error::ReadOnly(_))
        ));
        old.commit().unwrap();
        let mut later = reader.begin().unwrap();
        assert_eq!(
            later.get(&refs[3]).unwrap().value,
            9,
            "{backend:?}: the present, after the snapshot"
        );
        later.commit().unwrap();
    }
}

/// The page client caches a page under a right whose image is newer than
/// a running snapshot (its own later transaction read it after another
/// client's commit): the snapshot does not use it and reads the version as
/// of its beginning from the server. A snapshot begun after the commit
/// reads the same cached page with no round trip but SNAPSHOT.
#[test]
fn a_cached_page_newer_than_the_snapshot_is_not_used_for_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut site = Site::new(Backend::Page, &dir.path().join("db"));
    let reader = site.open(common::opts());
    let writer = site.open(common::opts());
    let refs = fill(&writer, 50);
    warm(&reader, &refs);

    let mut old = reader.begin_read_only().unwrap();
    let mut w = writer.begin().unwrap();
    w.update(&refs[3], |i| i.value = 9).unwrap();
    w.commit().unwrap();
    // The reader's next transaction brings the new image and a right.
    let mut now = reader.begin().unwrap();
    assert_eq!(now.get(&refs[3]).unwrap().value, 9);
    now.commit().unwrap();
    assert_eq!(
        old.get(&refs[3]).unwrap().value,
        100,
        "the snapshot's version, not the cached one"
    );
    assert_eq!(old.view(&refs[3]).unwrap().get().value(), 100);
    old.commit().unwrap();

    let before = reader.remote_stats().unwrap();
    let mut fresh = reader.begin_read_only().unwrap();
    assert_eq!(fresh.get(&refs[3]).unwrap().value, 9);
    fresh.commit().unwrap();
    let after = reader.remote_stats().unwrap();
    assert_eq!(
        after.round_trips - before.round_trips,
        1,
        "SNAPSHOT only: the page came from the cache"
    );
    assert!(after.cache_hits > before.cache_hits);
}

/// A page client that reads only at snapshots still warms its cache: a
/// snapshot's page that is the committed image comes with the right to
/// cache it, so the next snapshot reads it with no round trip but
/// SNAPSHOT — until another client changes the page, which calls the right
/// back.
#[test]
fn a_page_client_reading_only_at_snapshots_warms_its_cache() {
    let dir = tempfile::tempdir().unwrap();
    let mut site = Site::new(Backend::Page, &dir.path().join("db"));
    let reader = site.open(common::opts());
    let writer = site.open(common::opts());
    let refs = fill(&writer, 50);
    let read_all = |db: &Database| {
        let before = db.remote_stats().unwrap();
        let mut ro = db.begin_read_only().unwrap();
        let sum: i64 = refs.iter().map(|r| ro.get(r).unwrap().value).sum();
        ro.commit().unwrap();
        (sum, db.remote_stats().unwrap().round_trips - before.round_trips)
    };
    let (sum, cold) = read_all(&reader);
    assert_eq!(sum, 50 * 100);
    assert!(cold > 1, "the first snapshot fetches its pages");
    assert_eq!(read_all(&reader), (50 * 100, 1), "the second reads them under rights");
    let mut w = writer.begin().unwrap();
    w.update(&refs[7], |i| i.value = 101).unwrap();
    w.commit().unwrap();
    let (sum, after) = read_all(&reader);
    assert_eq!(sum, 50 * 100 + 1, "the change is seen: its page was called back");
    assert!(after > 1, "and fetched again");
}

/// Scans of a group are not offered at a snapshot (as embedded): the
/// error says so, and the transaction is still a snapshot afterwards.
#[test]
fn a_scan_at_a_snapshot_is_refused_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut site = Site::new(Backend::Page, &dir.path().join("db"));
    let db = site.open(common::opts());
    let refs = fill(&db, 5);
    let mut ro = db.begin_read_only().unwrap();
    let e = ro.count::<Item>("default", &[]).unwrap_err();
    assert!(e.to_string().contains("snapshot"), "{e}");
    drop(ro);
    let mut ro = db.begin_read_only().unwrap();
    assert_eq!(ro.get(&refs[4]).unwrap().value, 100);
    ro.commit().unwrap();
}
