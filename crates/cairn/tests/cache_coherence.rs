//! The shared caches never show a transaction anything but committed state
//! (or its own changes): the index cache (key → OIDs, validated by leaf
//! locks) and the object cache's whole-page prefetch, single-threaded step by
//! step and under concurrent writers that keep an invariant.

mod common;

use common::{Backend, Site};

on_every_backend!(
    index_cache_follows_committed_key_changes,
    prefetched_objects_are_committed_state_only,
    concurrent_key_swaps_never_show_a_torn_index,
);

#[test]
fn embedded_views_in_cached_page_images_never_show_stale_or_uncommitted_state() {
    views_in_cached_page_images_never_show_stale_or_uncommitted_state(Backend::Embedded);
}

/// The page client's own transactions too: a writer's X came with the
/// right to cache the page, and its client's readers read around it (fixed
/// 2026-11-23, eighth session).
#[test]
fn page_views_in_cached_page_images_never_show_stale_or_uncommitted_state() {
    views_in_cached_page_images_never_show_stale_or_uncommitted_state(Backend::Page);
}

#[test]
fn file_views_in_cached_page_images_never_show_stale_or_uncommitted_state() {
    views_in_cached_page_images_never_show_stale_or_uncommitted_state(Backend::File);
}

#[test]
fn object_views_never_show_stale_or_uncommitted_state() {
    views_in_cached_page_images_never_show_stale_or_uncommitted_state(Backend::Object);
}

#[test]
fn adaptive_views_never_show_stale_or_uncommitted_state() {
    views_in_cached_page_images_never_show_stale_or_uncommitted_state(Backend::Adaptive);
}

#[test]
fn object_locking_views_never_show_stale_or_uncommitted_state() {
    views_in_cached_page_images_never_show_stale_or_uncommitted_state(Backend::EmbeddedObjectLocks);
}

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use cairn::{Database, Index, Options, Persistent, Ref};

#[derive(Persistent, Debug, Clone, PartialEq)]
struct Item {
    #[cairn(index)]
    key: u32,
    label: String,
    value: i64,
}

const BY_KEY: Index<u32, Item> = Index::on("key");

/// [`common::opts`] faulting whole pages, with a lock timeout (20 s) that
/// only a hung test reaches.
fn whole_page_opts() -> Options {
    let mut o = Options {
        fault_whole_pages: true,
        ..common::opts()
    };
    o.storage.lock_timeout = std::time::Duration::from_secs(20);
    o
}

fn item(key: u32, value: i64) -> Item {
    Item {
        key,
        label: format!("item-{key}"),
        value,
    }
}

/// `n` items with keys 0..n, in one group so they share pages.
fn fill(db: &Database, n: u32) -> Vec<Ref<Item>> {
    let mut tx = db.begin().unwrap();
    let refs = (0..n)
        .map(|k| tx.create_in("items", item(k, i64::from(k))).unwrap())
        .collect();
    tx.commit().unwrap();
    refs
}

fn index_cache_follows_committed_key_changes(b: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let mut site = Site::new(b, &dir.path().join("db"));
    let db = site.open(whole_page_opts());
    let refs = fill(&db, 2000);

    // Warm the index cache: every key found once.
    let mut tx = db.begin().unwrap();
    for k in 0..2000 {
        assert_eq!(tx.find_one(&BY_KEY, &k).unwrap().as_ref(), Some(&refs[k as usize]));
    }
    tx.commit().unwrap();
    let warm = db.cache_stats();
    // (An object-server client has no index cache: the server walks the
    // tree for every lookup. The answers below hold for it all the same.)
    if !b.speaks_objects() {
        assert!(warm.index_misses > 0 && warm.index_misses < 100, "{warm:?}");
    }

    // Move key 500 to 5000; the changing transaction sees its own change.
    let mut tx = db.begin().unwrap();
    tx.update(&refs[500], |it| it.key = 5000).unwrap();
    assert_eq!(tx.find_one(&BY_KEY, &500).unwrap(), None);
    assert_eq!(tx.find_one(&BY_KEY, &5000).unwrap().as_ref(), Some(&refs[500]));
    tx.commit().unwrap();

    let mut tx = db.begin().unwrap();
    assert_eq!(tx.find_one(&BY_KEY, &500).unwrap(), None, "a stale cached entry");
    assert_eq!(tx.find(&BY_KEY, &5000).unwrap(), vec![refs[500].clone()]);
    assert_eq!(tx.find_one(&BY_KEY, &501).unwrap().as_ref(), Some(&refs[501]));
    tx.commit().unwrap();

    // An aborted change leaves the committed entries.
    let mut tx = db.begin().unwrap();
    tx.update(&refs[700], |it| it.key = 7000).unwrap();
    // Lookups on the changed leaf read the private copy (and must not
    // cache what they read there).
    assert_eq!(tx.find_one(&BY_KEY, &7000).unwrap().as_ref(), Some(&refs[700]));
    assert_eq!(tx.find_one(&BY_KEY, &701).unwrap().as_ref(), Some(&refs[701]));
    assert_eq!(tx.find_one(&BY_KEY, &700).unwrap(), None);
    tx.abort().unwrap();
    // A private change inside one leaf: key 801 twice, then a lookup of a
    // neighbour in the same leaf, then abort.
    let mut tx = db.begin().unwrap();
    tx.update(&refs[800], |it| it.key = 801).unwrap();
    assert_eq!(tx.find(&BY_KEY, &801).unwrap().len(), 2);
    assert_eq!(tx.find_one(&BY_KEY, &802).unwrap().as_ref(), Some(&refs[802]));
    tx.abort().unwrap();
    let mut tx = db.begin().unwrap();
    assert_eq!(
        tx.find(&BY_KEY, &801).unwrap(),
        vec![refs[801].clone()],
        "an aborted entry was cached"
    );
    assert_eq!(tx.find(&BY_KEY, &800).unwrap(), vec![refs[800].clone()]);
    tx.commit().unwrap();
    let mut tx = db.begin().unwrap();
    assert_eq!(tx.find_one(&BY_KEY, &700).unwrap().as_ref(), Some(&refs[700]));
    assert_eq!(tx.find_one(&BY_KEY, &7000).unwrap(), None);

    // Duplicates: a second object under an existing key is found with it.
    let extra = tx.create_in("items", item(900, -1)).unwrap();
    tx.commit().unwrap();
    let mut tx = db.begin().unwrap();
    let mut found = tx.find(&BY_KEY, &900).unwrap();
    found.sort_by_key(|r| r.oid());
    let mut want = vec![refs[900].clone(), extra];
    want.sort_by_key(|r| r.oid());
    assert_eq!(found, want);
    tx.commit().unwrap();
}

fn prefetched_objects_are_committed_state_only(b: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let mut site = Site::new(b, &dir.path().join("db"));
    let db = site.open(whole_page_opts());
    let refs = fill(&db, 200);
    // refs[0..3] share a page (created in a row, small).
    assert_eq!(refs[0].oid().page, refs[1].oid().page);
    assert_eq!(refs[0].oid().page, refs[2].oid().page);

    // One transaction faults item 0. Another changes item 2, then faults
    // item 1 from the same page: a refault, but the page is its private copy,
    // so nothing from it is prefetched.
    let mut tx = db.begin().unwrap();
    assert_eq!(tx.get(&refs[0]).unwrap().value, 0);
    tx.commit().unwrap();
    let mut tx = db.begin().unwrap();
    tx.update(&refs[2], |it| it.value = 999).unwrap();
    assert_eq!(tx.get(&refs[1]).unwrap().value, 1);
    tx.abort().unwrap();
    let before = db.cache_stats();
    assert_eq!(before.prefetches, 0);
    let mut tx = db.begin().unwrap();
    assert_eq!(
        tx.get(&refs[2]).unwrap().value,
        2,
        "an aborted change leaked into the cache"
    );
    tx.commit().unwrap();
    assert!(
        db.cache_stats().faults > before.faults,
        "item 2 must be read from the store"
    );

    // Two faults on one page in one transaction prefetch nothing; a fault
    // there in a later transaction prefetches the rest of the page (a
    // client locking whole pages only: an object-server client reads no
    // pages, and object-level locking decodes no page's other objects).
    if !b.prefetches_whole_pages() {
        return;
    }
    db.clear_caches().unwrap();
    let s0 = db.cache_stats();
    let mut tx = db.begin().unwrap();
    assert_eq!(tx.get(&refs[10]).unwrap().value, 10);
    assert_eq!(tx.get(&refs[11]).unwrap().value, 11);
    tx.commit().unwrap();
    assert_eq!(db.cache_stats().prefetches, s0.prefetches, "one transaction");
    let mut tx = db.begin().unwrap();
    assert_eq!(tx.get(&refs[12]).unwrap().value, 12);
    tx.commit().unwrap();
    let s1 = db.cache_stats();
    assert_eq!(s1.faults - s0.faults, 3);
    assert!(s1.prefetches > s0.prefetches, "{s1:?}");
    let page = refs[10].oid().page;
    let mut tx = db.begin().unwrap();
    for (k, r) in refs.iter().enumerate().filter(|(_, r)| r.oid().page == page) {
        assert_eq!(tx.get(r).unwrap().value, k as i64);
    }
    tx.commit().unwrap();
    assert_eq!(db.cache_stats().faults, s1.faults, "the page's objects were cached");

    // A committed change replaces the prefetched copy.
    let mut tx = db.begin().unwrap();
    tx.update(&refs[12], |it| it.value = -12).unwrap();
    tx.commit().unwrap();
    let mut tx = db.begin().unwrap();
    assert_eq!(tx.get(&refs[12]).unwrap().value, -12);
    tx.commit().unwrap();
}

/// Writers swap the keys of two items in one transaction; readers look keys
/// up and read the items: every committed state has each key exactly once,
/// on an item whose field says so.
fn concurrent_key_swaps_never_show_a_torn_index(b: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let mut site = Site::new(b, &dir.path().join("db"));
    let db = Arc::new(site.open(whole_page_opts()));
    const N: u32 = 600;
    let refs = Arc::new(fill(&db, N));
    let stop = Arc::new(AtomicBool::new(false));
    let rounds: u32 = std::env::var("CAIRN_KEY_SWAPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);

    let writer = {
        let (db, refs) = (Arc::clone(&db), Arc::clone(&refs));
        std::thread::spawn(move || {
            let mut x: u64 = 12345;
            let mut done = 0;
            while done < rounds {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let a = refs[(x >> 33) as usize % N as usize].clone();
                let b = refs[(x >> 45) as usize % N as usize].clone();
                if a == b {
                    continue;
                }
                let r = (|| -> cairn::Result<()> {
                    let mut tx = db.begin()?;
                    let ka = tx.get(&a)?.key;
                    let kb = tx.get(&b)?.key;
                    // Through a free key, so a unique-key check could never trip.
                    tx.update(&a, |it| it.key = 1_000_000)?;
                    tx.update(&b, |it| it.key = ka)?;
                    tx.update(&a, |it| it.key = kb)?;
                    tx.commit()
                })();
                match r {
                    Ok(()) => done += 1,
                    Err(e) if e.is_retryable() => {}
                    Err(e) => panic!("writer: {e}"),
                }
            }
        })
    };
    let readers: Vec<_> = (0..2)
        .map(|t| {
            let (db, stop) = (Arc::clone(&db), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut checked = 0u64;
                let mut k = t * 7;
                while !stop.load(Ordering::Relaxed) || checked < 2000 {
                    let r = (|| -> cairn::Result<()> {
                        let mut tx = db.begin()?;
                        for _ in 0..20 {
                            k = (k + 37) % N;
                            // Every value (a torn swap would show two), or
                            // the first: both are answered from the cache.
                            let found = if k % 2 == 0 {
                                tx.find(&BY_KEY, &k)?
                            } else {
                                tx.find_one(&BY_KEY, &k)?.into_iter().collect()
                            };
                            assert_eq!(found.len(), 1, "key {k} found {} times", found.len());
                            assert_eq!(tx.get(&found[0])?.key, k, "key {k} names an item with another key");
                            assert!(
                                tx.find(&BY_KEY, &1_000_000)?.is_empty(),
                                "an uncommitted key is visible"
                            );
                        }
                        tx.commit()
                    })();
                    match r {
                        Ok(()) => checked += 20,
                        Err(e) if e.is_retryable() => {}
                        Err(e) => panic!("reader: {e}"),
                    }
                }
                checked
            })
        })
        .collect();
    writer.join().unwrap();
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        assert!(r.join().unwrap() >= 2000);
    }
    // The final state, read afresh: each key once.
    db.clear_caches().unwrap();
    let mut tx = db.begin().unwrap();
    for k in 0..N {
        assert_eq!(tx.find(&BY_KEY, &k).unwrap().len(), 1);
    }
    let s = db.cache_stats();
    assert!(s.index_hits > 0 || b.speaks_objects(), "{s:?}");
}

/// Objects read in place come from page images kept across transactions:
/// a writer moves amounts between items (the total stays the same) while
/// readers view every item; a stale image or an uncommitted change would
/// show another total.
fn views_in_cached_page_images_never_show_stale_or_uncommitted_state(b: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let mut site = Site::new(b, &dir.path().join("db"));
    let db = Arc::new(site.open(whole_page_opts()));
    const N: u32 = 300;
    let refs = Arc::new(fill(&db, N));
    let total: i64 = (0..i64::from(N)).sum();
    let stop = Arc::new(AtomicBool::new(false));
    let rounds: u32 = std::env::var("CAIRN_VIEW_TRANSFERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let writer = {
        let (db, refs) = (Arc::clone(&db), Arc::clone(&refs));
        std::thread::spawn(move || {
            let mut x: u64 = 777;
            let mut done = 0;
            while done < rounds {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let a = refs[(x >> 33) as usize % N as usize].clone();
                let b = refs[(x >> 45) as usize % N as usize].clone();
                if a == b {
                    continue;
                }
                let r = (|| -> cairn::Result<()> {
                    let mut tx = db.begin()?;
                    tx.update(&a, |it| it.value -= 5)?;
                    // The transaction's own change, read in place.
                    let own = tx.view(&a)?;
                    assert_eq!(own.get().value(), tx.get(&a)?.value);
                    tx.update(&b, |it| it.value += 5)?;
                    tx.commit()
                })();
                match r {
                    Ok(()) => done += 1,
                    Err(e) if e.is_retryable() => {}
                    Err(e) => panic!("writer: {e}"),
                }
            }
        })
    };
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (db, stop, refs) = (Arc::clone(&db), Arc::clone(&stop), Arc::clone(&refs));
            std::thread::spawn(move || {
                let mut sums = 0u64;
                while !stop.load(Ordering::Relaxed) || sums < 20 {
                    let r = (|| -> cairn::Result<()> {
                        let mut tx = db.begin()?;
                        let mut sum = 0i64;
                        for (k, r) in refs.iter().enumerate() {
                            let o = tx.view(r)?;
                            let v = o.get();
                            assert_eq!(v.key(), k as u32);
                            assert_eq!(v.label(), format!("item-{k}"));
                            sum += v.value();
                        }
                        assert_eq!(sum, total, "views summed to another total");
                        tx.commit()
                    })();
                    match r {
                        Ok(()) => sums += 1,
                        Err(e) if e.is_retryable() => {}
                        Err(e) => panic!("reader: {e}"),
                    }
                }
                sums
            })
        })
        .collect();
    writer.join().unwrap();
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        assert!(r.join().unwrap() >= 20);
    }
    let s = db.cache_stats();
    if !b.reads_page_images() {
        // An object-server client's views read the client's own cache (its
        // objects and images under rights): no dual-buffer image to count.
        return;
    }
    assert!(s.image_loads > 0 && s.image_hits > 0, "{s:?}");
    assert!(s.invalidations > 0, "committed changes dropped no image: {s:?}");
}

/// Key ranges: a cached answer of a key is validated by the gap locks a
/// lookup that found its values takes, but an insert of the key registered
/// before them may hold its IX on a gap the cached answer does not name —
/// the gap below a third transaction's uncommitted entry of the key, which
/// that one's abort then removes. A scan of the tree meets the insert and
/// waits for it; the cache must too, or the reader sees the inserted entry
/// appear later in the same transaction (a phantom the isolation checker
/// found about one 20,000-transaction run in two before the fix).
#[test]
fn key_range_cached_answer_waits_for_an_insert_under_an_aborted_neighbour() {
    let dir = tempfile::tempdir().unwrap();
    let mut site = Site::new(Backend::EmbeddedKeyRanges, &dir.path().join("db"));
    let db = site.open(whole_page_opts());
    const K: u32 = 7;
    // Index values are OIDs compared as bytes: the three lowest become the
    // committed entry (v1), the late insert (a) and the aborted one (b),
    // so that v1 < a < b under key K.
    let mut refs = fill(&db, 40);
    refs.sort_by_key(|r| r.oid().to_bytes());
    let (v1, a, b) = (refs[0].clone(), refs[1].clone(), refs[2].clone());
    let mut tx = db.begin().unwrap();
    let k_owner = tx.find_one(&BY_KEY, &K).unwrap().expect("key K is filled");
    tx.update(&k_owner, |it| it.key = 1_000).unwrap();
    tx.update(&v1, |it| it.key = K).unwrap();
    tx.commit().unwrap();
    // The cache learns K → [v1], and answers it.
    for _ in 0..2 {
        let mut tx = db.begin().unwrap();
        assert_eq!(tx.find(&BY_KEY, &K).unwrap(), vec![v1.clone()]);
        tx.commit().unwrap();
    }
    let hits = db.cache_stats().index_hits;
    assert!(hits > 0, "the index cache never answered K");

    // b's insert of K first, then a's just below it (its IX on the gap
    // below b's entry); then b's transaction aborts.
    let mut tb = db.begin().unwrap();
    tb.update(&b, |it| it.key = K).unwrap();
    let mut ta = db.begin().unwrap();
    ta.update(&a, |it| it.key = K).unwrap();
    tb.abort().unwrap();
    let waits = || db.storage().expect("embedded").stats().locks.waits;
    let waits_before = waits();

    let (found_tx, found_rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|s| {
        let db = &db;
        let reader = s.spawn(move || {
            let mut tx = db.begin().unwrap();
            let first = tx.find(&BY_KEY, &K).unwrap();
            found_tx.send(()).unwrap();
            go_rx.recv().unwrap();
            let second = tx.find(&BY_KEY, &K).unwrap();
            tx.commit().unwrap();
            (first, second)
        });
        // The reader either waits for a's insert (a lock wait) or answers
        // without it; a commits once one of the two has happened.
        loop {
            if found_rx.try_recv().is_ok() || waits() > waits_before {
                break;
            }
            std::thread::yield_now();
        }
        ta.commit().unwrap();
        go_tx.send(()).unwrap();
        let (first, second) = reader.join().unwrap();
        assert_eq!(
            first, second,
            "a key's entries changed within one transaction (a phantom)"
        );
        let mut both = vec![v1.clone(), a.clone()];
        both.sort_by_key(|r| r.oid().to_bytes());
        assert_eq!(second, both);
    });
}
