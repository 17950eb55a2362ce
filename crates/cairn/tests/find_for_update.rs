//! `Transaction::find_for_update`: the objects of some keys looked up and
//! locked for update in one order, before anything of them is read — so
//! two transactions updating one object wait for each other instead of
//! deadlocking. Looking them up with `find_one` and then locking them
//! (`prefetch_for_update`) reads them first on an object server's client
//! (the lookup brings each object under S): two such transactions that
//! found one object both hold S and both want X.
//!
//! Waits are counted by the server's lock manager: a test expecting one
//! yields until the counter moves, never sleeps.

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

fn fill(db: &Database, n: u32) {
    let mut tx = db.begin().unwrap();
    for k in 0..n {
        tx.create(Item { key: k, value: 0 }).unwrap();
    }
    tx.commit().unwrap();
}

fn waits(db: &Database) -> u64 {
    db.server_lock_stats().unwrap().expect("a client of a server").waits
}

fn two_clients(backend: Backend, dir: &std::path::Path) -> (Site, Database, Database) {
    two_clients_with(backend, dir, 50)
}

/// Two clients of one server, the first having filled `n` items.
fn two_clients_with(backend: Backend, dir: &std::path::Path, n: u32) -> (Site, Database, Database) {
    let mut site = Site::new(backend, &dir.join("db")).server_env("CAIRN_TEST_LOCK_TIMEOUT_MS", "20000");
    let a = site.open(common::opts());
    let b = site.open(common::opts());
    fill(&a, n);
    (site, a, b)
}

/// A and B both want to change key 7's object: B waits for A and then
/// sees A's change; neither is a deadlock victim.
fn updaters_of_one_object_wait_in_turn(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let (_site, a, b) = two_clients(backend, dir.path());
    let mut ta = a.begin().unwrap();
    let found = ta.find_for_update(&BY_KEY, &[7, 9, 1_000]).unwrap();
    assert!(found[0].is_some() && found[1].is_some(), "keys 7 and 9 are found");
    assert!(found[2].is_none(), "key 1000 is not");
    let seven: Ref<Item> = found[0].clone().unwrap();
    let before = waits(&a);
    std::thread::scope(|s| {
        let other = s.spawn(|| {
            let mut tb = b.begin().unwrap();
            let r = tb.find_for_update(&BY_KEY, &[7]).unwrap().remove(0).unwrap();
            tb.update(&r, |i| i.value += 10).unwrap();
            tb.commit().unwrap();
        });
        while waits(&a) == before {
            assert!(!other.is_finished(), "B changed the object A holds for update");
            std::thread::yield_now();
        }
        ta.update(&seven, |i| i.value += 1).unwrap();
        ta.commit().unwrap();
        other.join().unwrap();
    });
    let mut tx = a.begin().unwrap();
    let r = tx.find_one(&BY_KEY, &7).unwrap().unwrap();
    assert_eq!(tx.get(&r).unwrap().value, 11, "both changes, in turn");
    tx.commit().unwrap();
}

#[test]
fn object_clients_updating_one_object_wait_in_turn() {
    updaters_of_one_object_wait_in_turn(Backend::Object);
}

#[test]
fn adaptive_clients_updating_one_object_wait_in_turn() {
    updaters_of_one_object_wait_in_turn(Backend::Adaptive);
}

#[test]
fn page_clients_updating_one_object_wait_in_turn() {
    updaters_of_one_object_wait_in_turn(Backend::Page);
}

/// The control: `find_one` then `prefetch_for_update` on object clients —
/// both read the object under S first, and one of them is a deadlock
/// victim. What `find_for_update` is for.
#[test]
fn object_clients_that_read_before_locking_for_update_deadlock() {
    let dir = tempfile::tempdir().unwrap();
    let (_site, a, b) = two_clients(Backend::Object, dir.path());
    let mut ta = a.begin().unwrap();
    let ra = ta.find_one(&BY_KEY, &7).unwrap().unwrap();
    let (read_tx, read_rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = std::sync::mpsc::channel();
    let outcomes = std::thread::scope(|s| {
        let b = &b;
        let other = s.spawn(move || {
            let mut tb = b.begin().unwrap();
            let rb = tb.find_one(&BY_KEY, &7).unwrap().unwrap();
            read_tx.send(()).unwrap();
            go_rx.recv().unwrap();
            tb.prefetch_for_update([&rb]).map(drop)
        });
        // Both hold S on the object; B asks for X and waits for A's S.
        read_rx.recv().unwrap();
        let before = waits(&a);
        go_tx.send(()).unwrap();
        while waits(&a) == before && !other.is_finished() {
            std::thread::yield_now();
        }
        let mine = ta.prefetch_for_update([&ra]).map(drop);
        drop(ta);
        [mine, other.join().unwrap()]
    });
    let victims = outcomes
        .iter()
        .filter(|r| matches!(r, Err(Error::Deadlock { .. })))
        .count();
    assert_eq!(victims, 1, "{outcomes:?}");
}

/// Embedded: the same call, one lock order, on threads.
#[test]
fn embedded_threads_updating_one_object_wait_in_turn() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open_with(dir.path().join("db"), common::opts()).unwrap();
    fill(&db, 50);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..25 {
                    let mut tx = db.begin().unwrap();
                    let r = tx.find_for_update(&BY_KEY, &[3, 7]).unwrap();
                    for r in r.iter().flatten() {
                        tx.update(r, |i| i.value += 1).unwrap();
                    }
                    tx.commit().unwrap();
                }
            });
        }
    });
    let mut tx = db.begin().unwrap();
    for k in [3, 7] {
        let r = tx.find_one(&BY_KEY, &k).unwrap().unwrap();
        assert_eq!(tx.get(&r).unwrap().value, 100, "key {k}: every increment, none lost");
    }
    tx.commit().unwrap();
}

/// A read-only transaction is refused.
#[test]
fn a_read_only_transaction_cannot_lock_for_update() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open_with(dir.path().join("db"), common::opts()).unwrap();
    fill(&db, 5);
    let mut ro = db.begin_read_only().unwrap();
    assert!(matches!(ro.find_for_update(&BY_KEY, &[1]), Err(Error::ReadOnly(_))));
}

/// Embedded, trees locked by page (the default): two transactions each
/// look a key up for update and then insert a key into the same leaf.
/// Each lookup reads the leaf under an update lock (U), which the second
/// lookup waits for, so the first goes on to change the leaf (U to X) and
/// commits, then the second; under S both would hold the leaf and both
/// ask for X, and one would be a deadlock victim.
#[test]
fn lookups_for_update_of_one_leaf_queue_instead_of_deadlocking() {
    for backend in [Backend::EmbeddedObjectLocks, Backend::Embedded] {
        let dir = tempfile::tempdir().unwrap();
        let mut site = Site::new(backend, &dir.path().join("db"));
        let mut opts = common::opts();
        opts.storage.lock_timeout = std::time::Duration::from_secs(20);
        let db = site.open(opts);
        // Enough keys for the index to have a root above its leaves; the
        // inserts go to the last leaf, which has room (a split would take
        // X on the root, which both lookups read under S).
        fill(&db, 3000);
        let waits = || db.storage().expect("embedded").stats().locks.waits;
        let mut ta = db.begin().unwrap();
        assert!(ta.find_for_update(&BY_KEY, &[2998]).unwrap()[0].is_some());
        let before = waits();
        let outcomes = std::thread::scope(|s| {
            let other = s.spawn(|| {
                let mut tb = db.begin()?;
                tb.find_for_update(&BY_KEY, &[2999])?;
                tb.create(Item { key: 2999, value: 2 })?;
                tb.commit()
            });
            // B waits: for A's U at its lookup (or, under S, for A's S at
            // its insert).
            while waits() == before {
                std::thread::yield_now();
            }
            let a = ta.create(Item { key: 2998, value: 1 }).and_then(|_| ta.commit());
            [a, other.join().unwrap()]
        });
        assert!(
            outcomes.iter().all(Result::is_ok),
            "{backend:?}: both commit, neither a deadlock victim: {outcomes:?}"
        );
        let mut tx = db.begin().unwrap();
        assert_eq!(tx.find(&BY_KEY, &2998).unwrap().len(), 2);
        assert_eq!(tx.find(&BY_KEY, &2999).unwrap().len(), 2);
        tx.commit().unwrap();
    }
}

#[test]
fn object_client_lookups_for_update_of_one_leaf_queue_instead_of_deadlocking() {
    remote_lookups_for_update_of_one_leaf_queue(Backend::Object);
}

#[test]
fn adaptive_client_lookups_for_update_of_one_leaf_queue_instead_of_deadlocking() {
    remote_lookups_for_update_of_one_leaf_queue(Backend::Adaptive);
}

/// [`lookups_for_update_of_one_leaf_queue_instead_of_deadlocking`] for
/// two clients of a server that locks its trees by page: the lookups go
/// to the server (TREE_GET_FOR_UPDATE, never a lookup kept under a right),
/// which reads each leaf under U.
fn remote_lookups_for_update_of_one_leaf_queue(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let (_site, a, b) = two_clients_with(backend, dir.path(), 3000);
    // Both clients keep the lookups under rights first.
    for db in [&a, &b] {
        let mut tx = db.begin().unwrap();
        tx.find_one(&BY_KEY, &2998).unwrap();
        tx.find_one(&BY_KEY, &2999).unwrap();
        tx.commit().unwrap();
    }
    let mut ta = a.begin().unwrap();
    assert!(ta.find_for_update(&BY_KEY, &[2998]).unwrap()[0].is_some());
    let before = waits(&a);
    let outcomes = std::thread::scope(|s| {
        let other = s.spawn(|| {
            let mut tb = b.begin()?;
            tb.find_for_update(&BY_KEY, &[2999])?;
            tb.create(Item { key: 2999, value: 2 })?;
            tb.commit()
        });
        while waits(&a) == before {
            std::thread::yield_now();
        }
        let r = ta.create(Item { key: 2998, value: 1 }).and_then(|_| ta.commit());
        [r, other.join().unwrap()]
    });
    assert!(
        outcomes.iter().all(Result::is_ok),
        "{backend:?}: both commit, neither a deadlock victim: {outcomes:?}"
    );
    let mut tx = b.begin().unwrap();
    assert_eq!(tx.find(&BY_KEY, &2998).unwrap().len(), 2);
    assert_eq!(tx.find(&BY_KEY, &2999).unwrap().len(), 2);
    tx.commit().unwrap();
}

#[test]
fn page_client_lookups_for_update_of_one_leaf_queue_instead_of_deadlocking() {
    remote_lookups_for_update_of_one_leaf_queue(Backend::Page);
}

#[test]
fn file_client_lookups_for_update_of_one_leaf_queue_instead_of_deadlocking() {
    remote_lookups_for_update_of_one_leaf_queue(Backend::File);
}

/// A page client's lookups for update of keys in many leaves lock the
/// root and then all the leaves under U in one FETCH, not one round trip a
/// leaf (and never through its rights to cache the leaves, which it holds
/// here: a right is an S in effect).
#[test]
fn page_client_lookups_for_update_of_many_leaves_lock_them_together() {
    let dir = tempfile::tempdir().unwrap();
    let (_site, a, _b) = two_clients_with(Backend::Page, dir.path(), 3000);
    let keys: Vec<u32> = (0..3000).step_by(150).collect();
    // Every leaf and inner page cached under a right, and how many leaves
    // the keys lie in, counted as a lookup of each alone fetches them.
    let mut tx = a.begin().unwrap();
    for k in &keys {
        assert!(tx.find_one(&BY_KEY, k).unwrap().is_some());
    }
    tx.commit().unwrap();
    let mut tx = a.begin().unwrap();
    let before = a.remote_stats().unwrap().round_trips;
    let found = tx.find_for_update(&BY_KEY, &keys).unwrap();
    let after = a.remote_stats().unwrap().round_trips;
    assert!(found.iter().all(Option::is_some), "every key is found");
    tx.commit().unwrap();
    // One for the root's U, one for the leaves', one for the X locks of
    // the objects' pages.
    assert!(
        after - before <= 3,
        "{} round trips for lookups for update of {} keys in many leaves",
        after - before,
        keys.len()
    );
    // The locks were the server's: a second client's lookup for update of
    // one key waits until this one's transaction ends (checked by the
    // single-leaf tests), and reads see every object unchanged.
    let mut tx = a.begin().unwrap();
    assert_eq!(tx.find(&BY_KEY, &150).unwrap().len(), 1);
    tx.commit().unwrap();
}
