//! Index consistency: random creates (one at a time and in bursts that
//! split leaves), key updates, deletes and lookups in transactions that
//! commit or abort (and occasional reopens), against a model; a lookup
//! inside a transaction sees its own changes, and after every transaction
//! the whole index, scanned in key order, equals the model's. This is also
//! the index cache's model test: lookups go through it.
//! `CAIRN_PROPTEST_CASES` scales the cases (default 16).
#![expect(
    clippy::mutable_key_type,
    reason = "a Ref's swizzle is interior-mutable, but its equality, order and hash are by OID alone"
)]

use std::collections::BTreeMap;
use std::ops::Bound;

use cairn::{Index, Options, Persistent, Ref};
use proptest::prelude::*;

#[derive(Persistent, Debug, Clone)]
struct Item {
    #[cairn(index)]
    key: i32,
    payload: String,
}

const BY_KEY: Index<i32, Item> = Index::on("key");
const KEY_MAX: i32 = 300;

#[derive(Clone, Debug)]
enum Op {
    Create(i32),
    /// 60 items with keys spread over the key range from a start.
    Burst(i32),
    Find(i32),
    Rekey(usize, i32),
    Delete(usize),
    Commit,
    Abort,
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (-20i32..KEY_MAX).prop_map(Op::Create),
        1 => (0i32..KEY_MAX).prop_map(Op::Burst),
        4 => (-20i32..KEY_MAX).prop_map(Op::Find),
        3 => (any::<usize>(), -20i32..KEY_MAX).prop_map(|(i, k)| Op::Rekey(i, k)),
        2 => any::<usize>().prop_map(Op::Delete),
        3 => Just(Op::Commit),
        1 => Just(Op::Abort),
        1 => Just(Op::Reopen),
    ]
}

/// The index as the model sees it: (key, oid) pairs in order.
fn expected(m: &BTreeMap<Ref<Item>, i32>) -> Vec<(i32, Ref<Item>)> {
    let mut v: Vec<(i32, Ref<Item>)> = m.iter().map(|(r, k)| (*k, r.clone())).collect();
    v.sort();
    v
}

mod common;

use common::{Backend, Site};

fn run(ops: Vec<Op>, backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let mut site = Site::new(backend, &path);
    let mut opts = Options {
        cache_bytes: 4_000,
        ..Options::default()
    };
    opts.storage.background = false;
    let mut committed: BTreeMap<Ref<Item>, i32> = BTreeMap::new();
    // Each run of operations between reopens uses one open database.
    for segment in ops.split(|o| matches!(o, Op::Reopen)) {
        let db = site.open(opts.clone());
        let mut current = committed.clone();
        let mut tx = None;
        for op in segment {
            if tx.is_none() {
                tx = Some(db.begin().unwrap());
            }
            match *op {
                Op::Create(k) => {
                    let r = tx
                        .as_mut()
                        .unwrap()
                        .create(Item {
                            key: k,
                            payload: format!("item {k}"),
                        })
                        .unwrap();
                    current.insert(r, k);
                }
                Op::Burst(start) => {
                    for j in 0..60 {
                        let k = (start + j * 7) % KEY_MAX;
                        let r = tx
                            .as_mut()
                            .unwrap()
                            .create(Item {
                                key: k,
                                payload: format!("burst {k}"),
                            })
                            .unwrap();
                        current.insert(r, k);
                    }
                }
                Op::Find(k) => {
                    let mut got = tx.as_mut().unwrap().find(&BY_KEY, &k).unwrap();
                    got.sort();
                    let want: Vec<Ref<Item>> = current
                        .iter()
                        .filter(|(_, v)| **v == k)
                        .map(|(r, _)| r.clone())
                        .collect();
                    assert_eq!(got, want, "find({k}) inside the transaction");
                }
                Op::Rekey(i, k) => {
                    let Some(r) = current.keys().nth(i % current.len().max(1)).cloned() else {
                        continue;
                    };
                    tx.as_mut().unwrap().update(&r, |it| it.key = k).unwrap();
                    current.insert(r, k);
                }
                Op::Delete(i) => {
                    let Some(r) = current.keys().nth(i % current.len().max(1)).cloned() else {
                        continue;
                    };
                    tx.as_mut().unwrap().delete(&r).unwrap();
                    current.remove(&r);
                }
                Op::Commit | Op::Abort => {
                    let t = tx.take().unwrap();
                    if matches!(op, Op::Commit) {
                        t.commit().unwrap();
                        committed = current.clone();
                    } else {
                        t.abort().unwrap();
                        current = committed.clone();
                    }
                    let mut check = db.begin().unwrap();
                    let all = check.find_range(&BY_KEY, Bound::Unbounded, Bound::Unbounded).unwrap();
                    let want: Vec<Ref<Item>> = expected(&committed).into_iter().map(|(_, r)| r).collect();
                    assert_eq!(all, want, "the index after {op:?}");
                    for k in -20..KEY_MAX {
                        let mut got = check.find(&BY_KEY, &k).unwrap();
                        got.sort();
                        let want: Vec<Ref<Item>> = committed
                            .iter()
                            .filter(|(_, v)| **v == k)
                            .map(|(r, _)| r.clone())
                            .collect();
                        assert_eq!(got, want, "find({k})");
                    }
                    for (r, k) in &committed {
                        assert_eq!(check.get(r).unwrap().key, *k);
                    }
                    check.commit().unwrap();
                }
                Op::Reopen => unreachable!(),
            }
        }
        // An open transaction at a reopen is dropped: it aborts.
        drop(tx);
        db.close().unwrap();
    }
}

fn cases() -> u32 {
    std::env::var("CAIRN_PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(16)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn the_index_matches_the_model(ops in proptest::collection::vec(op(), 1..80)) {
        run(ops, Backend::Embedded);
    }

    #[test]
    fn the_index_matches_the_model_through_a_page_server(ops in proptest::collection::vec(op(), 1..80)) {
        run(ops, Backend::Page);
    }

    #[test]
    fn the_index_matches_the_model_through_a_file_server(ops in proptest::collection::vec(op(), 1..80)) {
        run(ops, Backend::File);
    }

    #[test]
    fn the_index_matches_the_model_through_an_object_server(ops in proptest::collection::vec(op(), 1..80)) {
        run(ops, Backend::Object);
    }

    #[test]
    fn the_index_matches_the_model_through_an_adaptive_client(ops in proptest::collection::vec(op(), 1..80)) {
        run(ops, Backend::Adaptive);
    }

    #[test]
    fn the_index_matches_the_model_with_object_locks(ops in proptest::collection::vec(op(), 1..80)) {
        run(ops, Backend::EmbeddedObjectLocks);
    }

    #[test]
    fn the_index_matches_the_model_with_key_range_locks(ops in proptest::collection::vec(op(), 1..80)) {
        run(ops, Backend::EmbeddedKeyRanges);
    }
}
