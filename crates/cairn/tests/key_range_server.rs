//! `cairn serve` with key-range locking (`key_range_locking = 1`): object
//! and adaptive clients' index changes lock entries and the gaps between
//! them on the server, not the index's pages, so two clients inserting
//! different keys at an index's end do not wait for each other, while a
//! scan still keeps every insert out of its range until it ends. Their
//! lookups are kept across transactions under rights on the gaps they
//! locked, called back by any insert or delete there. Page- and
//! file-server clients send their tree operations to such a server
//! (TREE_APPLY, TREE_GET, TREE_RANGE) instead of reading and changing the
//! tree's pages, so the same holds for them; a page client keeps its
//! lookups under gap rights too.
//!
//! Waits are counted by the server's lock manager (`server_lock_stats`):
//! a test that expects a wait yields until the counter moves, never sleeps.

mod common;

use std::ops::Bound::Included;

use cairn::{Database, Index, Persistent};
use common::{Backend, Site};

#[derive(Persistent, Debug, Clone, PartialEq)]
struct Item {
    #[cairn(index)]
    key: u32,
    value: i64,
}

const BY_KEY: Index<u32, Item> = Index::on("key");

fn site(backend: Backend, dir: &std::path::Path, key_ranges: bool) -> Site {
    let site = Site::new(backend, &dir.join("db")).server_env("CAIRN_TEST_LOCK_TIMEOUT_MS", "20000");
    if key_ranges {
        site.server_env("CAIRN_TEST_KEY_RANGES", "1")
    } else {
        site
    }
}

fn fill(db: &Database, n: u32) {
    fill_from(db, 0, n);
}

fn fill_from(db: &Database, from: u32, to: u32) {
    let mut tx = db.begin().unwrap();
    for k in from..to {
        tx.create(Item { key: k, value: 1 }).unwrap();
    }
    tx.commit().unwrap();
}

fn waits(db: &Database) -> u64 {
    db.server_lock_stats().unwrap().expect("a client of a server").waits
}

/// Yields until the server has counted a lock wait past `before`.
fn until_a_wait_past(db: &Database, before: u64) {
    while waits(db) == before {
        std::thread::yield_now();
    }
}

/// Client A inserts a key past the index's end and sends the change (its
/// own lookup of the key sends it); client B then inserts the next key.
/// Returns B's commit as it went, and whether B waited.
fn inserts_at_the_end(backend: Backend, key_ranges: bool) -> bool {
    let dir = tempfile::tempdir().unwrap();
    let mut site = site(backend, dir.path(), key_ranges);
    let a = site.open(common::opts());
    let b = site.open(common::opts());
    fill(&a, 200);

    let mut ta = a.begin().unwrap();
    ta.create(Item { key: 1_000, value: 2 }).unwrap();
    assert!(ta.find_one(&BY_KEY, &1_000).unwrap().is_some(), "A sees its own insert");
    let before = waits(&a);
    let waited = std::thread::scope(|s| {
        let inserter = s.spawn(|| {
            let mut tb = b.begin().unwrap();
            tb.create(Item { key: 1_001, value: 3 }).unwrap();
            assert!(tb.find_one(&BY_KEY, &1_001).unwrap().is_some(), "B sees its own insert");
            tb.commit().unwrap();
        });
        // B either finishes (no wait) or is counted waiting for A.
        let waited = loop {
            if inserter.is_finished() {
                break false;
            }
            if waits(&a) > before {
                break true;
            }
            std::thread::yield_now();
        };
        ta.commit().unwrap();
        inserter.join().unwrap();
        waited
    });

    let mut tx = a.begin().unwrap();
    for k in [0, 199, 1_000, 1_001] {
        assert!(tx.find_one(&BY_KEY, &k).unwrap().is_some(), "key {k} is found");
    }
    assert_eq!(
        tx.find_range(&BY_KEY, Included(&0), Included(&2_000)).unwrap().len(),
        202
    );
    tx.commit().unwrap();
    waited
}

#[test]
fn object_clients_inserting_at_an_index_end_do_not_wait_for_each_other() {
    assert!(
        !inserts_at_the_end(Backend::Object, true),
        "B waited for A under key-range locks"
    );
}

#[test]
fn adaptive_clients_inserting_at_an_index_end_do_not_wait_for_each_other() {
    assert!(
        !inserts_at_the_end(Backend::Adaptive, true),
        "B waited for A under key-range locks"
    );
}

#[test]
fn page_clients_inserting_at_an_index_end_do_not_wait_for_each_other() {
    assert!(
        !inserts_at_the_end(Backend::Page, true),
        "B waited for A under key-range locks"
    );
}

#[test]
fn file_clients_inserting_at_an_index_end_do_not_wait_for_each_other() {
    assert!(
        !inserts_at_the_end(Backend::File, true),
        "B waited for A under key-range locks"
    );
}

/// The control: without key-range locking the second insert waits for the
/// first (X on the index's last leaf, held until A ends) — what the test
/// above shows gone.
#[test]
fn object_clients_inserting_at_an_index_end_wait_under_page_locks() {
    assert!(
        inserts_at_the_end(Backend::Object, false),
        "B did not wait for A under page locks"
    );
}

/// A scan keeps inserts into its range out until it ends; an insert
/// outside the range goes on at once.
fn a_scan_keeps_inserts_out_of_its_range(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let mut site = site(backend, dir.path(), true);
    let a = site.open(common::opts());
    let b = site.open(common::opts());
    fill(&a, 100);

    let mut scan = a.begin().unwrap();
    assert_eq!(
        scan.find_range(&BY_KEY, Included(&10), Included(&20)).unwrap().len(),
        11
    );

    // Outside the range: no wait.
    let before = waits(&a);
    let mut tb = b.begin().unwrap();
    tb.create(Item { key: 5_000, value: 1 }).unwrap();
    tb.commit().unwrap();
    assert_eq!(waits(&a), before, "an insert outside the scanned range waited");

    // Inside: B waits until the scan's transaction ends.
    let before = waits(&a);
    std::thread::scope(|s| {
        let inserter = s.spawn(|| {
            let mut tb = b.begin().unwrap();
            tb.create(Item { key: 15, value: 2 }).unwrap();
            tb.commit().unwrap();
        });
        until_a_wait_past(&a, before);
        assert!(
            !inserter.is_finished(),
            "the insert into the range went on before the scan ended"
        );
        // The range reads the same while the insert waits.
        assert_eq!(
            scan.find_range(&BY_KEY, Included(&10), Included(&20)).unwrap().len(),
            11
        );
        scan.commit().unwrap();
        inserter.join().unwrap();
    });
    let mut tx = a.begin().unwrap();
    assert_eq!(tx.find_range(&BY_KEY, Included(&10), Included(&20)).unwrap().len(), 12);
    tx.commit().unwrap();
}

#[test]
fn an_object_clients_scan_keeps_inserts_out_of_its_range() {
    a_scan_keeps_inserts_out_of_its_range(Backend::Object);
}

#[test]
fn an_adaptive_clients_scan_keeps_inserts_out_of_its_range() {
    a_scan_keeps_inserts_out_of_its_range(Backend::Adaptive);
}

#[test]
fn a_page_clients_scan_keeps_inserts_out_of_its_range() {
    a_scan_keeps_inserts_out_of_its_range(Backend::Page);
}

#[test]
fn a_file_clients_scan_keeps_inserts_out_of_its_range() {
    a_scan_keeps_inserts_out_of_its_range(Backend::File);
}

/// An insert sent to the server and then aborted leaves nothing behind,
/// and a key deleted by a commit is gone for the next transaction.
///
/// A lookup the aborted transaction made of its own insert is not kept
/// for the next one (its answer held the insert), whether the insert fell
/// into a gap the client kept a lookup under (key 30, after a lookup of
/// 31) or not (key 777).
#[test]
fn aborted_inserts_vanish_and_committed_deletes_hold() {
    for backend in [Backend::Object, Backend::Page, Backend::File] {
        aborted_inserts_vanish(backend);
    }
}

fn aborted_inserts_vanish(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let mut site = site(backend, dir.path(), true);
    let a = site.open(common::opts());
    fill(&a, 50);
    let mut tx = a.begin().unwrap();
    let thirty = tx.find_one(&BY_KEY, &30).unwrap().expect("key 30");
    tx.delete(&thirty).unwrap();
    tx.commit().unwrap();
    let mut tx = a.begin().unwrap();
    assert!(tx.find_one(&BY_KEY, &31).unwrap().is_some());
    tx.commit().unwrap();
    let mut tx = a.begin().unwrap();
    for key in [777, 30] {
        tx.create(Item { key, value: 1 }).unwrap();
        assert!(
            tx.find_one(&BY_KEY, &key).unwrap().is_some(),
            "{backend:?}: its own insert"
        );
        assert_eq!(tx.find(&BY_KEY, &key).unwrap().len(), 1, "{backend:?}");
    }
    tx.abort().unwrap();
    let mut tx = a.begin().unwrap();
    for key in [777, 30] {
        assert!(
            tx.find_one(&BY_KEY, &key).unwrap().is_none(),
            "{backend:?}: an aborted insert of {key} was found"
        );
    }
    assert!(tx.find_one(&BY_KEY, &31).unwrap().is_some());
    let r = tx.find_one(&BY_KEY, &7).unwrap().expect("key 7");
    tx.delete(&r).unwrap();
    tx.commit().unwrap();
    let mut tx = a.begin().unwrap();
    assert!(tx.find_one(&BY_KEY, &7).unwrap().is_none(), "a deleted key was found");
    assert_eq!(tx.find_range(&BY_KEY, Included(&0), Included(&100)).unwrap().len(), 48);
    tx.commit().unwrap();
}

/// File-server clients are served by a key-range server, side by side with
/// page and object clients: their tree operations go to the server as a
/// page client's do, and their commits change the trees there while the
/// client writes its objects' pages into the volume file. Each sees the
/// others' keys, and a file client's aborted insert leaves nothing.
#[test]
fn file_page_and_object_clients_share_a_key_range_server() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::serve_with(&dir.path().join("db"), &[("CAIRN_TEST_KEY_RANGES", "1")]);
    let [file, page, object] = [cairn::Arch::File, cairn::Arch::Page, cairn::Arch::Object]
        .map(|arch| Database::connect(&server.url(), cairn::Options { arch, ..common::opts() }).expect("served"));
    fill_from(&file, 0, 3);
    fill_from(&page, 3, 6);
    fill_from(&object, 6, 9);
    fill_from(&file, 9, 12);
    let mut tx = file.begin().unwrap();
    tx.create(Item { key: 777, value: 1 }).unwrap();
    assert!(tx.find_one(&BY_KEY, &777).unwrap().is_some(), "its own insert");
    tx.abort().unwrap();
    for db in [&file, &page, &object] {
        let mut tx = db.begin().unwrap();
        assert_eq!(
            tx.find_range(&BY_KEY, Included(&0), Included(&1_000)).unwrap().len(),
            12
        );
        for k in [0, 4, 8, 11] {
            let item = tx.find_one(&BY_KEY, &k).unwrap().expect("a key of another client");
            assert_eq!(tx.get(&item).unwrap().key, k);
        }
        tx.commit().unwrap();
    }
    file.close().unwrap();
    page.close().unwrap();
    object.close().unwrap();
    server.stop();
}

/// A snapshot reads an index as of its beginning while another client's
/// commits insert and delete keys around it under key-range locking
/// (splitting the leaves it reads: the commits change the tree's pages at
/// commit, and the version store keeps what the snapshot needs).
fn a_snapshot_reads_the_index_as_it_was(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let mut site = site(backend, dir.path(), true);
    let reader = site.open(common::opts());
    // Embedded, one database (its directory is locked by the first).
    let second = (backend != Backend::EmbeddedKeyRanges).then(|| site.open(common::opts()));
    let writer = second.as_ref().unwrap_or(&reader);
    fill(writer, 100);
    let mut ro = reader.begin_read_only().unwrap();
    assert_eq!(
        ro.find_range(&BY_KEY, Included(&0), Included(&10_000)).unwrap().len(),
        100
    );
    for round in 0..4u32 {
        let mut w = writer.begin().unwrap();
        for k in 0..300 {
            w.create(Item {
                key: 1_000 + round * 1_000 + k,
                value: 5,
            })
            .unwrap();
        }
        for k in round * 10..round * 10 + 10 {
            let r = w.find_one(&BY_KEY, &k).unwrap().expect("a key of the fill");
            w.delete(&r).unwrap();
        }
        w.commit().unwrap();
        assert_eq!(
            ro.find_range(&BY_KEY, Included(&0), Included(&10_000)).unwrap().len(),
            100,
            "round {round}: the snapshot's range"
        );
        assert!(
            ro.find_one(&BY_KEY, &(round * 10)).unwrap().is_some(),
            "a key deleted since"
        );
        assert!(
            ro.find_one(&BY_KEY, &(1_000 + round * 1_000)).unwrap().is_none(),
            "a key inserted since"
        );
    }
    ro.commit().unwrap();
    let mut tx = reader.begin().unwrap();
    assert_eq!(
        tx.find_range(&BY_KEY, Included(&0), Included(&10_000)).unwrap().len(),
        100 + 1_200 - 40
    );
    tx.commit().unwrap();
}

#[test]
fn a_page_clients_snapshot_reads_the_index_as_it_was() {
    a_snapshot_reads_the_index_as_it_was(Backend::Page);
}

#[test]
fn a_file_clients_snapshot_reads_the_index_as_it_was() {
    a_snapshot_reads_the_index_as_it_was(Backend::File);
}

#[test]
fn an_object_clients_snapshot_reads_the_index_as_it_was() {
    a_snapshot_reads_the_index_as_it_was(Backend::Object);
}

#[test]
fn an_embedded_snapshot_reads_the_index_as_it_was_under_key_range_locks() {
    a_snapshot_reads_the_index_as_it_was(Backend::EmbeddedKeyRanges);
}

/// How many items each of `keys` finds, in one transaction (a snapshot
/// with `snapshot`), and the round trips it took.
fn find_counts(db: &Database, keys: &[u32], snapshot: bool) -> (Vec<usize>, u64) {
    let before = db.remote_stats().unwrap().round_trips;
    let mut tx = if snapshot {
        db.begin_read_only().unwrap()
    } else {
        db.begin().unwrap()
    };
    let counts = keys.iter().map(|k| tx.find(&BY_KEY, k).unwrap().len()).collect();
    tx.commit().unwrap();
    (counts, db.remote_stats().unwrap().round_trips - before)
}

/// On a key-range server a lookup comes with rights on the gaps it locked
/// (the gap below each value found, the gap past them), a snapshot's too
/// when its answer is the present's: the client keeps the answers, and the
/// next transaction finds the keys with no round trip per lookup. Another
/// client's insert of a new value of a key, its delete of one, and an
/// insert by the reader's own client each call back the gap it falls in,
/// so the next lookup of that key is asked again and sees the change.
/// (Fails if an insert into a gap nobody holds S on does not ask for it
/// when a right covers it, or if the writer's own client is not called
/// back.)
#[test]
fn lookups_are_kept_under_gap_rights_until_an_insert_or_delete_calls_them_back() {
    for backend in [Backend::Object, Backend::Adaptive, Backend::Page] {
        for snapshot in [false, true] {
            let what = format!("{backend:?}, snapshot {snapshot}");
            let dir = tempfile::tempdir().unwrap();
            let mut site = site(backend, dir.path(), true);
            let reader = site.open(common::opts());
            let writer = site.open(common::opts());
            fill(&writer, 20);
            let keys: Vec<u32> = (0..20).collect();
            let (counts, first) = find_counts(&reader, &keys, snapshot);
            assert_eq!(counts, vec![1; 20], "{what}");
            let (counts, kept) = find_counts(&reader, &keys, snapshot);
            assert_eq!(counts, vec![1; 20], "{what}");
            // A page client looks a key up as `find_one` does (one value,
            // never locking the tree's end past it): the last key's answer
            // is not known whole, so not kept — its TREE_GET and TREE_RANGE
            // come again. Besides that, a snapshot's begin at most.
            let last_key = if backend == Backend::Page { 2 } else { 0 };
            assert!(
                kept <= 2 + last_key && first >= 20,
                "{what}: {first} round trips, then {kept}"
            );
            if snapshot {
                // A snapshot's `find_one` of a key of one value is kept
                // too: its rights' lookup read one value past the limit.
                let one_each = |db: &Database| {
                    let before = db.remote_stats().unwrap().round_trips;
                    let mut ro = db.begin_read_only().unwrap();
                    for k in 20..40u32 {
                        assert!(ro.find_one(&BY_KEY, &k).unwrap().is_some(), "{what}");
                    }
                    ro.commit().unwrap();
                    db.remote_stats().unwrap().round_trips - before
                };
                fill_from(&writer, 20, 40);
                let (first, kept) = (one_each(&reader), one_each(&reader));
                assert!(
                    kept <= 2 && first >= 20,
                    "{what}: find_one, {first} round trips, then {kept}"
                );
            }
            // Another client adds a value of key 5 and deletes key 7's.
            let mut w = writer.begin().unwrap();
            w.create(Item { key: 5, value: 2 }).unwrap();
            let seven = w.find(&BY_KEY, &7).unwrap();
            w.delete(&seven[0]).unwrap();
            w.commit().unwrap();
            let (counts, _) = find_counts(&reader, &[5, 7], snapshot);
            assert_eq!(counts, vec![2, 0], "{what}: the insert and the delete are seen");
            // The reader's own client adds a value of key 9.
            let mut own = reader.begin().unwrap();
            assert_eq!(own.find(&BY_KEY, &9).unwrap().len(), 1, "{what}");
            own.create(Item { key: 9, value: 3 }).unwrap();
            own.commit().unwrap();
            let (counts, _) = find_counts(&reader, &[9], snapshot);
            assert_eq!(counts, vec![2], "{what}: its own client's insert is seen");
            // Keys whose gaps nobody wrote are still kept.
            let (counts, trips) = find_counts(&reader, &[0, 1, 2, 15, 16, 17], snapshot);
            assert_eq!(counts, vec![1; 6], "{what}");
            assert!(trips <= 2, "{what}: {trips} round trips for lookups nobody changed");
        }
    }
}

/// A transaction that changed the index does not keep its own lookups
/// (their answers may hold its changes). Its lookups of keys next to one
/// the client keeps come with rights on the gaps that one is kept under
/// too — the server's same right, renewed. Giving those back would leave
/// the kept lookup with no callback to come: another client's insert of
/// a second value of the key would go unseen. (Fails if the rights of a
/// lookup not kept are all given back.)
#[test]
fn a_writers_lookups_not_kept_leave_the_clients_other_lookups_called_back() {
    for backend in [Backend::Page, Backend::Object] {
        let dir = tempfile::tempdir().unwrap();
        let mut site = site(backend, dir.path(), true);
        let reader = site.open(common::opts());
        let writer = site.open(common::opts());
        fill(&writer, 20);
        assert_eq!(find_counts(&reader, &[5], false).0, vec![1]);
        let mut own = reader.begin().unwrap();
        own.create(Item { key: 100, value: 1 }).unwrap();
        for k in [4, 6] {
            assert_eq!(own.find(&BY_KEY, &k).unwrap().len(), 1, "{backend:?}");
        }
        own.commit().unwrap();
        let mut w = writer.begin().unwrap();
        w.create(Item { key: 5, value: 2 }).unwrap();
        w.commit().unwrap();
        assert_eq!(
            find_counts(&reader, &[5], false).0,
            vec![2],
            "{backend:?}: the second value of key 5 went unseen"
        );
    }
}

#[derive(Persistent, Debug, Clone, PartialEq)]
struct Named {
    #[cairn(index)]
    name: String,
}

const BY_NAME: Index<String, Named> = Index::on("name");

/// A page or file client's index changes wait in its transaction and go to
/// the server together: a hundred objects created with an indexed field
/// cost a few round trips, not one each (fails if every change is sent as
/// it is made). An index change the server refuses (a key too long for
/// the tree) fails the request that sends it — here the commit, which
/// leaves nothing behind — and a read after such a failure is refused.
#[test]
fn a_page_or_file_clients_index_changes_go_to_the_server_together() {
    for backend in [Backend::Page, Backend::File] {
        let dir = tempfile::tempdir().unwrap();
        let mut site = site(backend, dir.path(), true);
        let db = site.open(common::opts());
        fill(&db, 1);
        let trips = || db.remote_stats().unwrap().round_trips;
        let before = trips();
        let mut tx = db.begin().unwrap();
        for k in 100..200 {
            tx.create(Item { key: k, value: 1 }).unwrap();
        }
        tx.commit().unwrap();
        let spent = trips() - before;
        assert!(spent <= 10, "{backend:?}: {spent} round trips for 100 creates");
        let mut tx = db.begin().unwrap();
        assert_eq!(
            tx.find_range(&BY_KEY, Included(&100), Included(&199)).unwrap().len(),
            100
        );
        tx.commit().unwrap();

        let mut tx = db.begin().unwrap();
        tx.create(Named { name: "short".into() }).unwrap();
        tx.commit().unwrap();
        let mut tx = db.begin().unwrap();
        tx.create(Named {
            name: "x".repeat(2_000),
        })
        .unwrap();
        tx.create(Item { key: 300, value: 1 }).unwrap();
        let e = tx.commit().expect_err("a key too long for the tree").to_string();
        assert!(e.contains("exceeds the limit"), "{backend:?}: {e}");
        let mut tx = db.begin().unwrap();
        tx.create(Named {
            name: "y".repeat(2_000),
        })
        .unwrap();
        let e = tx
            .find_one(&BY_NAME, &"short".to_string())
            .expect_err("refused when sent")
            .to_string();
        assert!(e.contains("exceeds the limit"), "{backend:?}: {e}");
        let e = tx.find_one(&BY_KEY, &0).expect_err("doomed").to_string();
        assert!(e.contains("doomed"), "{backend:?}: {e}");
        drop(tx);
        let mut tx = db.begin().unwrap();
        assert!(
            tx.find_one(&BY_KEY, &300).unwrap().is_none(),
            "{backend:?}: a failed commit's key"
        );
        assert_eq!(
            tx.find_range(&BY_NAME, Included(&String::new()), Included(&"z".to_string()))
                .unwrap()
                .len(),
            1
        );
        tx.commit().unwrap();
    }
}

/// A page client of a key-range server looks the keys of a lookup for
/// update up at the server together (TREE_GET_FOR_UPDATE), not one
/// request a key, and a second client's insert of another key goes on
/// while the first holds them.
#[test]
fn a_page_clients_lookups_for_update_go_to_the_server_together() {
    let dir = tempfile::tempdir().unwrap();
    let mut site = site(Backend::Page, dir.path(), true);
    let a = site.open(common::opts());
    let b = site.open(common::opts());
    fill(&a, 3_000);
    let keys: Vec<u32> = (0..3_000).step_by(150).collect();
    let mut tx = a.begin().unwrap();
    let before = a.remote_stats().unwrap().round_trips;
    let found = tx.find_for_update(&BY_KEY, &keys).unwrap();
    let after = a.remote_stats().unwrap().round_trips;
    assert!(found.iter().all(Option::is_some), "every key is found");
    // The index's root read to open it (its header: no right covers a
    // tree page here), the lookups, the X locks of the objects' pages.
    assert!(
        after - before <= 3,
        "{} round trips for lookups for update of {} keys",
        after - before,
        keys.len()
    );
    let waited_before = waits(&b);
    fill_from(&b, 5_000, 5_001);
    assert_eq!(waits(&b), waited_before, "an insert of another key waited");
    tx.commit().unwrap();
    let mut tx = b.begin().unwrap();
    assert_eq!(
        tx.find_range(&BY_KEY, Included(&0), Included(&10_000)).unwrap().len(),
        3_001
    );
    tx.commit().unwrap();
}
