//! Read-only transactions at a snapshot on every client of `cairn serve`
//! (`Database::begin_read_only`): a snapshot reads the server's committed
//! state as of its beginning — objects, views and index lookups — takes no
//! lock at the server, so it never waits for another client's writer and
//! never makes one wait. A page client uses a page it caches under a right
//! only if the snapshot sees that image; object and adaptive clients read
//! what they kept under rights taken in before the snapshot began and
//! still held, and the rest from the server as of the snapshot.

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

/// A reader and a writer client of one server (a site in `dir`), 50 items
/// the writer made, all of them read once by the reader (kept, for clients
/// that keep what they read).
fn warm_reader_and_writer(backend: Backend, dir: &std::path::Path) -> (Site, Database, Database, Vec<Ref<Item>>) {
    let mut site = Site::new(backend, &dir.join("db"));
    let reader = site.open(common::opts());
    let writer = site.open(common::opts());
    let refs = fill(&writer, 50);
    warm(&reader, &refs);
    (site, reader, writer, refs)
}

fn warm(db: &Database, refs: &[Ref<Item>]) {
    let mut tx = db.begin().unwrap();
    for r in refs {
        tx.get(r).unwrap();
    }
    tx.find_one(&BY_KEY, &1).unwrap();
    tx.commit().unwrap();
}

/// Sums the values of `refs` in one snapshot: the sum, and the round trips
/// it took.
fn sum_at_a_snapshot(db: &Database, refs: &[Ref<Item>]) -> (i64, u64) {
    let before = db.remote_stats().unwrap();
    let mut ro = db.begin_read_only().unwrap();
    let sum: i64 = refs.iter().map(|r| ro.get(r).unwrap().value).sum();
    ro.commit().unwrap();
    (sum, db.remote_stats().unwrap().round_trips - before.round_trips)
}

/// Sets `r`'s value in a transaction of its own.
fn set_value(db: &Database, r: &Ref<Item>, value: i64) {
    let mut w = db.begin().unwrap();
    w.update(r, |i| i.value = value).unwrap();
    w.commit().unwrap();
}

/// Snapshots of `reader` that read only at snapshots come to keep what
/// they read: the first reads `refs` from the server, the second with no
/// round trip but the snapshot's own, and after `writer` changes one
/// object the change is seen and read again (`what` names the case).
fn snapshots_keep_what_they_read(reader: &Database, writer: &Database, refs: &[Ref<Item>], what: &str) {
    let (sum, cold) = sum_at_a_snapshot(reader, refs);
    assert_eq!(sum, 50 * 100, "{what}");
    assert!(cold > 1, "{what}: the first snapshot reads from the server");
    assert_eq!(
        sum_at_a_snapshot(reader, refs),
        (50 * 100, 1),
        "{what}: the second reads what it kept"
    );
    set_value(writer, &refs[7], 101);
    let (sum, after) = sum_at_a_snapshot(reader, refs);
    assert_eq!(sum, 50 * 100 + 1, "{what}: the change is seen (its right called back)");
    assert!(after > 1, "{what}: the changed object is read again");
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
    // Only the writer's commit asked for locks after that (a handful), and
    // the server's momentary S (IS on the page and S on the object, never
    // waited for) on each object a snapshot read from it whole, to grant a
    // right to it if it is the committed version.
    let momentary = 2 * refs.len() as u64;
    assert!(
        requests_after - requests < 40 + momentary,
        "{requests} → {requests_after}"
    );
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
        let (_site, reader, writer, refs) = warm_reader_and_writer(backend, dir.path());
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
    let (_site, reader, writer, refs) = warm_reader_and_writer(Backend::Page, dir.path());

    let mut old = reader.begin_read_only().unwrap();
    set_value(&writer, &refs[3], 9);
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
    snapshots_keep_what_they_read(&reader, &writer, &refs, "page client");
}

/// Object and adaptive clients: a snapshot reads the objects and lookups
/// the client kept under rights taken in before it was asked for, with no
/// round trip but OBJ_SNAPSHOT; what another client changed since (its
/// right called back) comes from the server, as of the snapshot.
#[test]
fn object_and_adaptive_snapshots_read_what_the_client_kept_before_them() {
    for backend in [Backend::Object, Backend::Adaptive] {
        let dir = tempfile::tempdir().unwrap();
        let (_site, reader, writer, refs) = warm_reader_and_writer(backend, dir.path());
        let read_all = |db: &Database| {
            let before = db.remote_stats().unwrap();
            let mut ro = db.begin_read_only().unwrap();
            let sum: i64 = refs.iter().map(|r| ro.get(r).unwrap().value).sum();
            let one = ro.find_one(&BY_KEY, &1).unwrap();
            ro.commit().unwrap();
            (sum, one, db.remote_stats().unwrap().round_trips - before.round_trips)
        };
        assert_eq!(
            read_all(&reader),
            (50 * 100, Some(refs[1].clone()), 1),
            "{backend:?}: kept objects and lookup, one round trip (OBJ_SNAPSHOT)"
        );
        set_value(&writer, &refs[7], 101);
        let (sum, one, trips) = read_all(&reader);
        assert_eq!(
            (sum, one),
            (50 * 100 + 1, Some(refs[1].clone())),
            "{backend:?}: the change is seen"
        );
        assert!(trips > 1, "{backend:?}: the changed object is read from the server");
    }
}

/// Object and adaptive clients that read only at snapshots still come to
/// keep what they read: an object a snapshot reads from the server comes
/// with a right when it is the committed version (the server takes S for
/// a moment, never waiting), so the next snapshot reads it with no round
/// trip but OBJ_SNAPSHOT — until another client changes it.
#[test]
fn object_and_adaptive_clients_reading_only_at_snapshots_warm_their_cache() {
    for backend in [Backend::Object, Backend::Adaptive] {
        let dir = tempfile::tempdir().unwrap();
        let mut site = Site::new(backend, &dir.path().join("db"));
        let reader = site.open(common::opts());
        let writer = site.open(common::opts());
        let refs = fill(&writer, 50);
        snapshots_keep_what_they_read(&reader, &writer, &refs, &format!("{backend:?}"));
    }
}

/// A snapshot's lookups (TREE_GET_OBJECTS) come with rights on their
/// leaves, and the objects they find with rights on them, when those are
/// the committed versions: the next snapshot finds the keys and follows
/// the references with no round trip but OBJ_SNAPSHOT; an object another
/// client changed since is read again, as it now is, and so is a lookup
/// whose leaf another client's insert changed.
#[test]
fn lookups_and_objects_a_snapshot_finds_by_key_are_kept_for_the_next() {
    for backend in [Backend::Object, Backend::Adaptive] {
        let dir = tempfile::tempdir().unwrap();
        let mut site = Site::new(backend, &dir.path().join("db"));
        let reader = site.open(common::opts());
        let writer = site.open(common::opts());
        let refs = fill(&writer, 20);
        let mut ro = reader.begin_read_only().unwrap();
        for k in 0..20u32 {
            let found = ro.find_one(&BY_KEY, &k).unwrap();
            assert_eq!(found.as_ref(), Some(&refs[k as usize]));
            assert_eq!(ro.get(&refs[k as usize]).unwrap().value, 100);
        }
        ro.commit().unwrap();
        let read_all = |db: &Database| sum_at_a_snapshot(db, &refs);
        assert_eq!(read_all(&reader), (20 * 100, 1), "{backend:?}: kept from the lookups");
        let find_all = |db: &Database, keys: u32| {
            let before = db.remote_stats().unwrap();
            let mut ro = db.begin_read_only().unwrap();
            let mut sum = 0;
            for k in 0..keys {
                let found = ro.find_one(&BY_KEY, &k).unwrap().expect("every key is there");
                sum += ro.get(&found).unwrap().value;
            }
            ro.commit().unwrap();
            (sum, db.remote_stats().unwrap().round_trips - before.round_trips)
        };
        assert_eq!(
            find_all(&reader, 20),
            (20 * 100, 1),
            "{backend:?}: the lookups were kept"
        );
        set_value(&writer, &refs[3], 103);
        let (sum, trips) = read_all(&reader);
        assert_eq!(sum, 20 * 100 + 3, "{backend:?}: the change is seen");
        assert!(trips > 1, "{backend:?}: the changed object is read again");
        let mut w = writer.begin().unwrap();
        w.create(Item { key: 20, value: 7 }).unwrap();
        w.commit().unwrap();
        let (sum, trips) = find_all(&reader, 21);
        assert_eq!(sum, 20 * 100 + 3 + 7, "{backend:?}: the new key is found");
        assert!(trips > 1, "{backend:?}: the changed leaf's lookups are asked again");
    }
}

/// A snapshot whose lookup read a leaf that changed after it began keeps
/// no right on it: the next snapshot asks again and finds the present.
/// (Fails if the server grants a snapshot's leaf rights without comparing
/// the leaf's LSN with the committed one.)
#[test]
fn a_lookup_a_snapshot_answered_from_an_older_leaf_is_not_kept() {
    for backend in [Backend::Object, Backend::Adaptive] {
        let dir = tempfile::tempdir().unwrap();
        let mut site = Site::new(backend, &dir.path().join("db"));
        let reader = site.open(common::opts());
        let writer = site.open(common::opts());
        fill(&writer, 20);
        let mut old = reader.begin_read_only().unwrap();
        let mut w = writer.begin().unwrap();
        w.create(Item { key: 5, value: 9 }).unwrap();
        w.commit().unwrap();
        assert_eq!(
            old.find(&BY_KEY, &5).unwrap().len(),
            1,
            "{backend:?}: as of the snapshot"
        );
        old.commit().unwrap();
        let mut new = reader.begin_read_only().unwrap();
        assert_eq!(new.find(&BY_KEY, &5).unwrap().len(), 2, "{backend:?}: as of now");
        new.commit().unwrap();
    }
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

/// Object and adaptive clients: a snapshot under way goes on reading,
/// with no round trip, a kept object whose right another client's writer
/// has called back since the snapshot began (the copy is still the
/// snapshot's version: the writer commits after the callback), and the
/// writer's value never shows; a snapshot begun after the callback reads
/// the new value. Before, every object a writer touched was read again
/// from the server, and a long snapshot traversal under many writers ran
/// many times slower than alone.
#[test]
fn a_snapshot_keeps_reading_what_a_writer_called_back_after_it_began() {
    for backend in [Backend::Object, Backend::Adaptive] {
        let dir = tempfile::tempdir().unwrap();
        let (_site, reader, writer, refs) = warm_reader_and_writer(backend, dir.path());
        let sum = |ro: &mut cairn::Transaction<'_>| -> i64 { refs.iter().map(|r| ro.get(r).unwrap().value).sum() };

        let before = reader.remote_stats().unwrap();
        let mut ro = reader.begin_read_only().unwrap();
        // The writer's update calls the reader's rights back (the object's,
        // or an adaptive client's page's), then commits.
        let callbacks = reader.remote_stats().unwrap().callbacks;
        set_value(&writer, &refs[7], 101);
        set_value(&writer, &refs[30], 99);
        assert!(
            reader.remote_stats().unwrap().callbacks > callbacks,
            "{backend:?}: the writer called the reader's rights back"
        );
        assert_eq!(sum(&mut ro), 50 * 100, "{backend:?}: the snapshot's state");
        ro.commit().unwrap();
        let trips = reader.remote_stats().unwrap().round_trips - before.round_trips;
        assert_eq!(trips, 1, "{backend:?}: no round trip but OBJ_SNAPSHOT");

        let mut ro = reader.begin_read_only().unwrap();
        assert_eq!(sum(&mut ro), 50 * 100 + 1 - 1, "{backend:?}: the new state");
        assert_eq!(ro.get(&refs[7]).unwrap().value, 101);
        ro.commit().unwrap();
    }
}
