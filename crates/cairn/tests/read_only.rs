//! Read-only transactions at a snapshot (`Database::begin_read_only`): a
//! reader sees the committed state as of its beginning — objects, views and
//! index lookups alike — takes no lock, so it never waits for a writer
//! and never makes one wait, changes nothing, and leaves the shared caches
//! holding the present for every other transaction. Threads moving value
//! between objects check that every snapshot sees one consistent state.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use cairn::{Database, Error, Index, Options, Persistent, Ref};

#[derive(Persistent, Debug, Clone, PartialEq)]
struct Item {
    #[cairn(index)]
    key: u32,
    value: i64,
}

const BY_KEY: Index<u32, Item> = Index::on("key");

fn opts() -> Options {
    let mut o = Options::default();
    o.storage.background = false;
    o.storage.lock_timeout = std::time::Duration::from_secs(10);
    o
}

fn fill(db: &Database, n: u32) -> Vec<Ref<Item>> {
    let mut tx = db.begin().unwrap();
    let refs = (0..n)
        .map(|k| tx.create(Item { key: k, value: 100 }).unwrap())
        .collect();
    tx.commit().unwrap();
    refs
}

fn lock_requests(db: &Database) -> (u64, u64) {
    let l = db.storage().unwrap().stats().locks;
    (l.requests, l.waits)
}

#[test]
fn a_read_only_transaction_sees_its_snapshot_and_neither_waits_nor_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open_with(dir.path(), opts()).unwrap();
    let refs = fill(&db, 200);
    // Warm the shared caches with the present.
    let mut tx = db.begin().unwrap();
    for r in &refs {
        tx.get(r).unwrap();
    }
    tx.commit().unwrap();

    let mut ro = db.begin_read_only().unwrap();
    let (requests, waits) = lock_requests(&db);
    // A writer changes an object and a key, and holds its locks: the
    // reader reads both without waiting.
    let mut w = db.begin().unwrap();
    w.update(&refs[0], |i| i.value = 7).unwrap();
    w.update(&refs[1], |i| i.key = 5_000).unwrap();
    assert_eq!(ro.get(&refs[0]).unwrap().value, 100);
    assert_eq!(ro.find_one(&BY_KEY, &1).unwrap().as_ref(), Some(&refs[1]));
    w.commit().unwrap();
    // Committed after the snapshot: still invisible to it, through the
    // object, a view and the index.
    assert_eq!(ro.get(&refs[0]).unwrap().value, 100);
    assert_eq!(ro.view(&refs[0]).unwrap().get().value(), 100);
    assert_eq!(ro.find_one(&BY_KEY, &1).unwrap().as_ref(), Some(&refs[1]));
    assert_eq!(ro.find_one(&BY_KEY, &5_000).unwrap(), None);
    let (requests_after, waits_after) = lock_requests(&db);
    assert_eq!(waits_after, waits, "nobody waited");
    // Only the writer asked for locks (its own, at most a handful each).
    assert!(requests_after - requests < 40, "{requests} → {requests_after}");
    // It changes nothing.
    assert!(matches!(
        ro.put(&refs[2], Item { key: 2, value: 0 }),
        Err(Error::ReadOnly(_))
    ));
    assert!(matches!(
        ro.create(Item { key: 9_999, value: 0 }),
        Err(Error::ReadOnly(_))
    ));
    ro.commit().unwrap();

    // The shared caches hold the present for everyone else.
    let mut now = db.begin().unwrap();
    assert_eq!(now.get(&refs[0]).unwrap().value, 7);
    assert_eq!(now.view(&refs[0]).unwrap().get().value(), 7);
    assert_eq!(now.find_one(&BY_KEY, &1).unwrap(), None);
    assert_eq!(now.find_one(&BY_KEY, &5_000).unwrap().as_ref(), Some(&refs[1]));
    now.commit().unwrap();
    assert_eq!(db.storage().unwrap().version_stats().versions, 0);
}

#[test]
fn every_read_only_transaction_sees_one_consistent_state_while_threads_move_value() {
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(Database::open_with(dir.path(), opts()).unwrap());
    const N: u32 = 30;
    let refs = fill(&db, N);
    let done = AtomicUsize::new(0);
    let snapshots = std::thread::scope(|s| {
        for w in 0..3u64 {
            let (db, refs, done) = (&db, &refs, &done);
            s.spawn(move || {
                let mut x = w * 11 + 3;
                for _ in 0..150 {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    let (a, b) = (((x >> 33) % u64::from(N)) as usize, ((x >> 17) % u64::from(N)) as usize);
                    if a == b {
                        continue;
                    }
                    let mut tx = db.begin().unwrap();
                    let r = (|| -> cairn::Result<()> {
                        let va = tx.get(&refs[a])?.value;
                        let moved = va.min(3);
                        tx.update(&refs[a], |i| i.value -= moved)?;
                        tx.update(&refs[b], |i| i.value += moved)?;
                        Ok(())
                    })();
                    match r {
                        Ok(()) => match tx.commit() {
                            Ok(()) => {}
                            Err(e) if e.is_retryable() => {}
                            Err(e) => panic!("writer: {e}"),
                        },
                        Err(e) if e.is_retryable() => drop(tx),
                        Err(e) => panic!("writer: {e}"),
                    }
                }
                done.fetch_add(1, Ordering::SeqCst);
            });
        }
        let (db, refs, done) = (&db, &refs, &done);
        s.spawn(move || {
            let mut n = 0u32;
            while done.load(Ordering::SeqCst) < 3 || n < 10 {
                let mut ro = db.begin_read_only().unwrap();
                let total: i64 = refs.iter().map(|r| ro.get(r).unwrap().value).sum();
                assert_eq!(total, i64::from(N) * 100, "a snapshot saw value appear or vanish");
                ro.commit().unwrap();
                n += 1;
            }
            n
        })
        .join()
        .unwrap()
    });
    assert!(snapshots >= 10);
}
