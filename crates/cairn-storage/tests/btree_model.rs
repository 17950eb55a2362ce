//! Property test: b-trees through real transactions on a real database,
//! against plain `BTreeMap` models. Random inserts, deletes, lookups, range
//! scans (both directions), whole-tree rebuilds (destroy + bulk load), and
//! commit / abort / crash (drop the `Db` without closing: recovery) / clean
//! reopen steps. The models follow commits only: aborted work disappears and
//! a crash loses the open transaction. A tiny buffer pool and transaction
//! budget force evictions and spills. `CAIRN_PROPTEST_CASES` scales the
//! number of cases (default 16).

use std::collections::btree_map::Entry;
use std::collections::BTreeMap;
use std::ops::Bound;

use cairn_storage::btree::{BTree, Direction};
use cairn_storage::check::check_database;
use cairn_storage::volume::VolumeOptions;
use cairn_storage::{Db, DbOptions, Error, GroupId, PageId, Txn};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    Insert {
        unique: bool,
        key: Vec<u8>,
        value: Vec<u8>,
    },
    Delete {
        unique: bool,
        key: Vec<u8>,
        value: Option<Vec<u8>>,
    },
    Get {
        unique: bool,
        key: Vec<u8>,
    },
    Range {
        unique: bool,
        lo: Bound<Vec<u8>>,
        hi: Bound<Vec<u8>>,
        dir: Direction,
    },
    /// Inserts `n` generated entries (keys of 20..120 bytes, 10-byte values
    /// like OIDs), so trees outgrow the buffer pool.
    InsertBatch {
        unique: bool,
        seed: u32,
        n: u32,
    },
    /// Deletes every key in a range, one key at a time (merges, collapses).
    DeleteRange {
        unique: bool,
        lo: Bound<Vec<u8>>,
        hi: Bound<Vec<u8>>,
    },
    /// Destroys the non-unique tree and bulk-loads it again (a new root).
    Rebuild,
    Check,
    Commit,
    Abort,
    Reopen,
    Crash,
}

/// Keys of 0..200 bytes, skewed to share prefixes.
fn key() -> impl Strategy<Value = Vec<u8>> {
    let prefixes: Vec<Vec<u8>> = vec![
        Vec::new(),
        b"k".to_vec(),
        b"key/".to_vec(),
        vec![b'x'; 60],
        vec![b'y'; 150],
    ];
    (
        prop::sample::select(prefixes),
        prop::collection::vec(prop::sample::select(vec![0u8, b'a', b'b', 0xff]), 0..6),
        prop_oneof![4 => Just(0usize), 1 => 0usize..60],
    )
        .prop_map(|(mut p, s, pad)| {
            p.extend(s);
            p.extend(vec![b'z'; pad]);
            p.truncate(200);
            p
        })
}

fn value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        8 => prop::collection::vec(prop::sample::select(vec![b'0', b'1']), 0..3),
        2 => prop::collection::vec(any::<u8>(), 10..11),
        1 => prop::collection::vec(any::<u8>(), 0..600),
    ]
}

fn bound() -> impl Strategy<Value = Bound<Vec<u8>>> {
    prop_oneof![
        1 => Just(Bound::Unbounded),
        2 => key().prop_map(Bound::Included),
        2 => key().prop_map(Bound::Excluded),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let dir = prop::sample::select(vec![Direction::Forward, Direction::Backward]);
    prop_oneof![
        30 => (any::<bool>(), key(), value()).prop_map(|(unique, key, value)| Op::Insert { unique, key, value }),
        10 => (any::<bool>(), key(), prop::option::of(value()))
            .prop_map(|(unique, key, value)| Op::Delete { unique, key, value }),
        6 => (any::<bool>(), key()).prop_map(|(unique, key)| Op::Get { unique, key }),
        4 => (any::<bool>(), bound(), bound(), dir).prop_map(|(unique, lo, hi, dir)| Op::Range { unique, lo, hi, dir }),
        3 => (any::<bool>(), any::<u32>(), 0u32..600).prop_map(|(unique, seed, n)| Op::InsertBatch { unique, seed, n }),
        2 => (any::<bool>(), bound(), bound()).prop_map(|(unique, lo, hi)| Op::DeleteRange { unique, lo, hi }),
        1 => Just(Op::Rebuild),
        2 => Just(Op::Check),
        6 => Just(Op::Commit),
        2 => Just(Op::Abort),
        1 => Just(Op::Reopen),
        1 => Just(Op::Crash),
    ]
}

/// What the database holds (or will, once the open transaction commits).
#[derive(Clone, Debug)]
struct Model {
    /// The unique tree: key → value.
    unique: BTreeMap<Vec<u8>, Vec<u8>>,
    /// The non-unique tree: (key, value) pairs.
    pairs: BTreeMap<(Vec<u8>, Vec<u8>), ()>,
    unique_root: PageId,
    pairs_root: PageId,
}

impl Model {
    fn entries(&self, unique: bool) -> Vec<(Vec<u8>, Vec<u8>)> {
        if unique {
            self.unique.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
        } else {
            self.pairs.keys().cloned().collect()
        }
    }

    /// Follows an insert into a tree, checking its result.
    fn insert(&mut self, unique: bool, key: Vec<u8>, value: Vec<u8>, r: Result<bool, Error>) {
        if !unique {
            assert_eq!(r.unwrap(), self.pairs.insert((key, value), ()).is_none());
            return;
        }
        match self.unique.entry(key) {
            Entry::Occupied(_) => assert!(matches!(r, Err(Error::DuplicateKey { .. })), "{r:?}"),
            Entry::Vacant(e) => {
                assert!(r.unwrap());
                e.insert(value);
            }
        }
    }

    fn root(&self, unique: bool) -> PageId {
        if unique {
            self.unique_root
        } else {
            self.pairs_root
        }
    }
}

/// Opens a tree by its root page id, which the test keeps outside the
/// database (as a catalog would).
fn open(t: &mut Txn, root: PageId, unique: bool) -> BTree {
    let tree = BTree::open(t, root).unwrap();
    assert_eq!(tree.is_unique(t).unwrap(), unique);
    tree
}

fn in_bounds(k: &[u8], lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>) -> bool {
    (match lo {
        Bound::Included(l) => k >= l.as_slice(),
        Bound::Excluded(l) => k > l.as_slice(),
        Bound::Unbounded => true,
    }) && (match hi {
        Bound::Included(h) => k <= h.as_slice(),
        Bound::Excluded(h) => k < h.as_slice(),
        Bound::Unbounded => true,
    })
}

fn scan(
    t: &mut Txn,
    tree: &BTree,
    lo: &Bound<Vec<u8>>,
    hi: &Bound<Vec<u8>>,
    dir: Direction,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut c = tree
        .range(t, lo.as_ref().map(Vec::as_slice), hi.as_ref().map(Vec::as_slice), dir)
        .unwrap();
    let mut out = Vec::new();
    while let Some(e) = c.next(t).unwrap() {
        out.push(e);
    }
    out
}

/// Entry `i` of batch `seed`: keys spread over the key space, sharing the
/// prefixes of [`key`] now and then.
fn batch_entry(seed: u32, i: u32) -> (Vec<u8>, Vec<u8>) {
    let h = (seed ^ i.wrapping_mul(0x9E37_79B9)).wrapping_mul(0x85EB_CA6B);
    let prefix: &[u8] = match h % 4 {
        0 => b"k",
        1 => b"key/",
        2 => b"b/",
        _ => b"",
    };
    let mut k = prefix.to_vec();
    k.extend_from_slice(format!("{h:08x}").as_bytes());
    k.resize(20 + (h % 100) as usize, b'-');
    let mut v = i.to_le_bytes().to_vec();
    v.extend_from_slice(&seed.to_le_bytes());
    v.extend_from_slice(&[0, 1]);
    (k, v)
}

fn verify_all(t: &mut Txn, m: &Model) {
    for unique in [true, false] {
        let root = m.root(unique);
        let tree = open(t, root, unique);
        tree.check(t).unwrap();
        let want = m.entries(unique);
        assert_eq!(tree.len(t).unwrap(), want.len() as u64);
        assert_eq!(
            scan(t, &tree, &Bound::Unbounded, &Bound::Unbounded, Direction::Forward),
            want
        );
    }
}

fn run(ops: Vec<Op>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let opts = DbOptions {
        volume: VolumeOptions {
            buffer_frames: 16,
            extent_pages: 4,
            ..VolumeOptions::default()
        },
        // Small budgets, so transactions spill and checkpoints come often.
        txn_memory_bytes: 8 * 4096,
        checkpoint_log_bytes: 256 << 10,
        background: false,
        ..DbOptions::default()
    };
    let mut db = Some(Db::create(&path, &opts).unwrap());
    let group = db.as_ref().unwrap().create_group("indexes").unwrap();
    let mut committed = {
        let mut t = db.as_ref().unwrap().begin().unwrap();
        let u = BTree::create(&mut t, group, true).unwrap();
        let p = BTree::create(&mut t, GroupId::DEFAULT, false).unwrap();
        t.commit().unwrap();
        Model {
            unique: BTreeMap::new(),
            pairs: BTreeMap::new(),
            unique_root: u.root(),
            pairs_root: p.root(),
        }
    };
    let mut m = committed.clone();
    let mut txn: Option<Txn> = None;
    for op in ops {
        if txn.is_none() && !matches!(op, Op::Reopen | Op::Crash) {
            txn = Some(db.as_ref().unwrap().begin().unwrap());
        }
        match op {
            Op::Commit => {
                txn.take().unwrap().commit().unwrap();
                committed = m.clone();
                continue;
            }
            Op::Abort => {
                txn.take().unwrap().abort().unwrap();
                m = committed.clone();
                continue;
            }
            Op::Reopen | Op::Crash => {
                drop(txn.take());
                m = committed.clone();
                let d = db.take().unwrap();
                if matches!(op, Op::Reopen) {
                    d.close().unwrap();
                } else {
                    // Dirty pages in the pool are lost; the log must carry them.
                    drop(d);
                }
                db = Some(Db::open(&path, &opts).unwrap());
                continue;
            }
            _ => {}
        }
        let t = txn.as_mut().unwrap();
        match op {
            Op::Insert { unique, key, value } => {
                let tree = open(t, m.root(unique), unique);
                let r = tree.insert(t, &key, &value);
                m.insert(unique, key, value, r);
            }
            Op::Delete { unique, key, value } => {
                let tree = open(t, m.root(unique), unique);
                let n = tree.delete(t, &key, value.as_deref()).unwrap();
                let want = if unique {
                    match (m.unique.get(&key), &value) {
                        (Some(have), Some(v)) if have != v => 0,
                        (Some(_), _) => {
                            m.unique.remove(&key);
                            1
                        }
                        (None, _) => 0,
                    }
                } else {
                    let before = m.pairs.len();
                    match value {
                        Some(v) => {
                            m.pairs.remove(&(key, v));
                        }
                        None => m.pairs.retain(|(k, _), _| *k != key),
                    }
                    before - m.pairs.len()
                };
                assert_eq!(n, want);
            }
            Op::Get { unique, key } => {
                let tree = open(t, m.root(unique), unique);
                let want: Vec<Vec<u8>> = m
                    .entries(unique)
                    .into_iter()
                    .filter(|(k, _)| *k == key)
                    .map(|(_, v)| v)
                    .collect();
                assert_eq!(tree.get(t, &key).unwrap(), want.first().cloned());
                assert_eq!(tree.get_all(t, &key).unwrap(), want);
                // The index cache's path: the key's leaf, scanned from there,
                // and that leaf's entries in order, holding the key's first
                // entry unless it starts in the next leaf.
                let leaf = tree.leaf_of(t, &key).unwrap();
                let mut from_leaf = Vec::new();
                tree.get_each_in(t, leaf, &key, |v| {
                    from_leaf.push(v.to_vec());
                    true
                })
                .unwrap();
                assert_eq!(from_leaf, want);
                let mut entries: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
                tree.leaf_entries(t, leaf, |k, v| entries.push((k.to_vec(), v.to_vec())))
                    .unwrap();
                assert!(entries.windows(2).all(|w| w[0] <= w[1]), "leaf entries out of order");
                let last_below = entries.last().is_none_or(|(k, _)| *k < key);
                if let Some(first) = want.first() {
                    assert!(
                        last_below || entries.iter().any(|(k, v)| *k == key && v == first),
                        "the key's first entry is neither in its leaf nor after it"
                    );
                }
            }
            Op::Range { unique, lo, hi, dir } => {
                let tree = open(t, m.root(unique), unique);
                let mut want = m.entries(unique);
                want.retain(|(k, _)| in_bounds(k, &lo, &hi));
                if dir == Direction::Backward {
                    want.reverse();
                }
                assert_eq!(scan(t, &tree, &lo, &hi, dir), want);
            }
            Op::InsertBatch { unique, seed, n } => {
                let tree = open(t, m.root(unique), unique);
                for i in 0..n {
                    let (key, value) = batch_entry(seed, i);
                    let r = tree.insert(t, &key, &value);
                    m.insert(unique, key, value, r);
                }
            }
            Op::DeleteRange { unique, lo, hi } => {
                let tree = open(t, m.root(unique), unique);
                let mut keys: Vec<Vec<u8>> = m
                    .entries(unique)
                    .into_iter()
                    .map(|(k, _)| k)
                    .filter(|k| in_bounds(k, &lo, &hi))
                    .collect();
                keys.dedup();
                for k in keys {
                    let n = tree.delete(t, &k, None).unwrap();
                    let before = m.unique.len() + m.pairs.len();
                    if unique {
                        m.unique.remove(&k);
                    } else {
                        m.pairs.retain(|(mk, _), _| *mk != k);
                    }
                    assert_eq!(n, before - m.unique.len() - m.pairs.len());
                }
            }
            Op::Rebuild => {
                let old = open(t, m.pairs_root, false);
                old.destroy(t).unwrap();
                let tree = BTree::bulk_load(t, GroupId::DEFAULT, false, m.entries(false)).unwrap();
                m.pairs_root = tree.root();
            }
            Op::Check => verify_all(t, &m),
            Op::Commit | Op::Abort | Op::Reopen | Op::Crash => unreachable!(),
        }
    }
    if let Some(t) = txn.take() {
        t.commit().unwrap();
        committed = m.clone();
    }
    let d = db.take().unwrap();
    let mut t = d.begin().unwrap();
    verify_all(&mut t, &committed);
    t.commit().unwrap();
    d.close().unwrap();

    // A crash right after a commit: recovery alone must rebuild the trees.
    let d = Db::open(&path, &opts).unwrap();
    let mut t = d.begin().unwrap();
    let tree = open(&mut t, committed.unique_root, true);
    tree.insert(&mut t, b"after-crash", b"1").unwrap();
    t.commit().unwrap();
    committed.unique.insert(b"after-crash".to_vec(), b"1".to_vec());
    drop(d);
    let d = Db::open(&path, &opts).unwrap();
    let mut t = d.begin().unwrap();
    verify_all(&mut t, &committed);
    t.commit().unwrap();
    d.close().unwrap();

    let report = check_database(&path, &opts.volume);
    eprintln!(
        "DBG pages={} u={} p={}",
        report.pages_checked,
        committed.unique.len(),
        committed.pairs.len()
    );
    assert!(report.is_ok(), "check found problems: {:?}", report.problems);
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
    fn btrees_in_transactions_match_the_model(ops in proptest::collection::vec(op(), 1..300)) {
        run(ops);
    }
}
