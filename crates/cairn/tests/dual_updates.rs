//! Changes through the client's dual buffer, under every strategy, with a
//! buffer much smaller than the objects so pages are displaced, objects
//! copied, and changes held as modified copies and flushed: a transaction
//! always reads its own changes, others only committed state, and what
//! commits is what a model says, across a reopen; concurrent transfers
//! keep their total whichever transaction's work flushes whose change.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use cairn::Strategy;
use cairn::{Database, DualBufferOptions, Options, Persistent, Ref};

#[derive(Persistent, Debug, Clone, PartialEq)]
struct Cell {
    key: u32,
    value: i64,
    /// Padding that changes length, so a change may move the record.
    label: String,
}

const N: u32 = 400;
const PAGE: usize = 4096;

fn opts(strategy: Strategy) -> Options {
    let mut o = Options {
        dual_buffer: DualBufferOptions {
            bytes: 6 * PAGE,
            strategy,
            page_share: None,
        },
        ..Options::default()
    };
    o.storage.background = false;
    o.storage.lock_timeout = std::time::Duration::from_secs(20);
    o
}

fn label(k: u32, n: u64) -> String {
    format!("cell-{k}-{}", "x".repeat(100 + (n % 90) as usize))
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Every cell as the model has it, read through `get` and `view` in a
/// fresh transaction.
fn check(db: &Database, refs: &[Ref<Cell>], model: &BTreeMap<u32, Option<(i64, String)>>, when: &str) {
    let mut tx = db.begin().unwrap();
    for (k, r) in refs.iter().enumerate() {
        let k = k as u32;
        match &model[&k] {
            Some((value, label)) => {
                let v = tx.view(r).unwrap_or_else(|e| panic!("{when}: view of cell {k}: {e}"));
                assert_eq!(
                    (v.get().key(), v.get().value(), v.get().label()),
                    (k, *value, &label[..]),
                    "{when}: view of cell {k}"
                );
                let g = tx.get(r).unwrap();
                assert_eq!(
                    (g.key, g.value, &g.label),
                    (k, *value, label),
                    "{when}: get of cell {k}"
                );
            }
            None => assert!(tx.get(r).is_err(), "{when}: cell {k} was deleted"),
        }
    }
    tx.commit().unwrap();
}

fn changes_commit_as_the_model_says(strategy: Strategy) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let db = Database::open_with(&path, opts(strategy)).unwrap();
    let mut model: BTreeMap<u32, Option<(i64, String)>> = BTreeMap::new();
    let mut tx = db.begin().unwrap();
    let refs: Vec<Ref<Cell>> = (0..N)
        .map(|k| {
            model.insert(k, Some((i64::from(k), label(k, 0))));
            tx.create_in(
                "cells",
                Cell {
                    key: k,
                    value: i64::from(k),
                    label: label(k, 0),
                },
            )
            .unwrap()
        })
        .collect();
    tx.commit().unwrap();
    let mut rng = Rng(0x5eed ^ strategy.name().len() as u64);
    for round in 0..60 {
        let mut tx = db.begin().unwrap();
        let mut mine = model.clone();
        for _ in 0..40 {
            let k = rng.below(u64::from(N)) as u32;
            let r = &refs[k as usize];
            match rng.below(10) {
                // Reads move pages through the small buffer.
                0..=4 => match &mine[&k] {
                    Some((value, label)) => {
                        let v = tx.view(r).unwrap();
                        assert_eq!(
                            (v.get().value(), v.get().label()),
                            (*value, &label[..]),
                            "round {round}: own view of {k}"
                        );
                    }
                    None => assert!(tx.view(r).is_err(), "round {round}: {k} deleted by this transaction"),
                },
                5..=8 => {
                    let Some((value, _)) = mine[&k].clone() else { continue };
                    let n = rng.next();
                    let new = (value + 1, label(k, n));
                    let l = new.1.clone();
                    tx.update(r, |c| {
                        c.value += 1;
                        c.label = l;
                    })
                    .unwrap();
                    mine.insert(k, Some(new));
                }
                _ => {
                    if mine[&k].is_none() || rng.below(4) != 0 {
                        continue;
                    }
                    tx.delete(r).unwrap();
                    mine.insert(k, None);
                }
            }
        }
        if rng.below(5) == 0 {
            tx.abort().unwrap();
        } else {
            tx.commit().unwrap();
            model = mine;
        }
        if round % 15 == 14 {
            check(&db, &refs, &model, &format!("{} round {round}", strategy.name()));
        }
    }
    let s = db.cache_stats().dual;
    if strategy.name() != "NOC" {
        assert!(
            s.objects_copied > 0,
            "{}: the buffer copied nothing: {s:?}",
            strategy.name()
        );
    }
    assert!(
        s.objects_flushed > 0 && s.pages_flushed > 0,
        "{}: {s:?}",
        strategy.name()
    );
    db.close().unwrap();
    let db = Database::open_with(&path, opts(strategy)).unwrap();
    check(&db, &refs, &model, &format!("{} after reopen", strategy.name()));
}

#[test]
fn every_strategy_commits_what_the_model_says() {
    for s in Strategy::ALL {
        changes_commit_as_the_model_says(s);
    }
}

/// Two writers move value between cells while a reader sums them through
/// views: under every strategy the sum never changes, though one
/// transaction's work may flush another's modified copy.
#[test]
fn concurrent_transfers_keep_their_total_under_every_strategy() {
    for strategy in Strategy::ALL {
        let dir = tempfile::tempdir().unwrap();
        let db = Arc::new(Database::open_with(dir.path().join("db"), opts(strategy)).unwrap());
        let mut tx = db.begin().unwrap();
        let refs: Arc<Vec<Ref<Cell>>> = Arc::new(
            (0..N)
                .map(|k| {
                    tx.create_in(
                        "cells",
                        Cell {
                            key: k,
                            value: 100,
                            label: label(k, 0),
                        },
                    )
                    .unwrap()
                })
                .collect(),
        );
        tx.commit().unwrap();
        let total = 100 * i64::from(N);
        let stop = Arc::new(AtomicBool::new(false));
        let writers: Vec<_> = (0..2u64)
            .map(|w| {
                let (db, refs) = (Arc::clone(&db), Arc::clone(&refs));
                std::thread::spawn(move || {
                    let mut rng = Rng(w * 7919 + 1);
                    let mut done = 0;
                    while done < 60 {
                        let a = rng.below(u64::from(N)) as usize;
                        let b = rng.below(u64::from(N)) as usize;
                        if a == b {
                            continue;
                        }
                        let n = rng.next();
                        let r = (|| -> cairn::Result<()> {
                            let mut tx = db.begin()?;
                            // Reads first, so the buffer moves pages.
                            for k in 0..8 {
                                tx.view(&refs[(a + k * 37) % N as usize])?;
                            }
                            tx.update(&refs[a], |c| c.value -= 3)?;
                            tx.update(&refs[b], |c| {
                                c.value += 3;
                                c.label = label(c.key, n);
                            })?;
                            assert_eq!(tx.view(&refs[b])?.get().label(), label(b as u32, n));
                            tx.commit()
                        })();
                        match r {
                            Ok(()) => done += 1,
                            Err(e) if e.is_retryable() => {}
                            Err(e) => panic!("writer: {e}"),
                        }
                    }
                })
            })
            .collect();
        let reader = {
            let (db, refs, stop) = (Arc::clone(&db), Arc::clone(&refs), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut sums = 0;
                while !stop.load(Ordering::Relaxed) || sums < 3 {
                    let r = (|| -> cairn::Result<i64> {
                        let mut tx = db.begin()?;
                        let mut sum = 0;
                        for r in refs.iter() {
                            sum += tx.view(r)?.get().value();
                        }
                        tx.commit()?;
                        Ok(sum)
                    })();
                    match r {
                        Ok(sum) => {
                            assert_eq!(sum, total, "views summed to another total");
                            sums += 1;
                        }
                        Err(e) if e.is_retryable() => {}
                        Err(e) => panic!("reader: {e}"),
                    }
                }
            })
        };
        for w in writers {
            w.join().unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        reader.join().unwrap();
        let mut tx = db.begin().unwrap();
        let sum: i64 = refs.iter().map(|r| tx.get(r).unwrap().value).sum();
        assert_eq!(sum, total, "{}: committed total", strategy.name());
        tx.commit().unwrap();
    }
}

/// Under LOC+ a change is held as a modified copy: the storage
/// transaction holds the old record until `flush` hands the change over,
/// and commit does so itself.
#[test]
fn flush_hands_held_changes_to_the_storage_transaction() {
    let strategy = Strategy::parse("loc+/erl").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open_with(dir.path().join("db"), opts(strategy)).unwrap();
    let mut tx = db.begin().unwrap();
    let r = tx
        .create_in(
            "cells",
            Cell {
                key: 1,
                value: 10,
                label: label(1, 0),
            },
        )
        .unwrap();
    tx.commit().unwrap();
    let mut tx = db.begin().unwrap();
    assert_eq!(tx.view(&r).unwrap().get().value(), 10);
    let before = tx.storage().expect("page-based").read(r.oid()).unwrap();
    tx.update(&r, |c| c.value = 11).unwrap();
    assert_eq!(
        tx.storage().expect("page-based").read(r.oid()).unwrap(),
        before,
        "LOC+ holds the change"
    );
    assert_eq!(tx.get(&r).unwrap().value, 11, "the transaction reads its own change");
    tx.flush().unwrap();
    assert_ne!(
        tx.storage().expect("page-based").read(r.oid()).unwrap(),
        before,
        "flushed into the transaction"
    );
    tx.update(&r, |c| c.value = 12).unwrap();
    tx.commit().unwrap();
    let mut tx = db.begin().unwrap();
    assert_eq!(tx.get(&r).unwrap().value, 12);
    assert_eq!(tx.view(&r).unwrap().get().value(), 12);
    tx.commit().unwrap();
}
