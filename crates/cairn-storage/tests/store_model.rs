//! Property test: random sequences of object operations in transactions
//! (committed, aborted, or cut off by a simulated crash) against a plain
//! in-memory model, with clean reopens and crash reopens (recovery), checking
//! every read, and ending with a clean `check`. `CAIRN_PROPTEST_CASES` scales
//! the number of cases (default 24).

use std::collections::HashMap;

use cairn_storage::buffer::Policy;
use cairn_storage::check::check_database;
use cairn_storage::volume::VolumeOptions;
use cairn_storage::{Db, DbOptions, Error, GroupId, Oid, Txn};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    Create {
        group: u8,
        len: usize,
        seed: u8,
    },
    CreateNear {
        target: usize,
        len: usize,
        seed: u8,
    },
    Read {
        target: usize,
    },
    Update {
        target: usize,
        len: usize,
        seed: u8,
    },
    Delete {
        target: usize,
    },
    WriteRange {
        target: usize,
        at_permille: u16,
        len: usize,
        seed: u8,
    },
    Append {
        target: usize,
        len: usize,
        seed: u8,
    },
    Truncate {
        target: usize,
        to_permille: u16,
    },
    ReadRange {
        target: usize,
        at_permille: u16,
        len: usize,
    },
    Commit,
    Abort,
    Reopen,
    Crash,
}

fn size() -> impl Strategy<Value = usize> {
    prop_oneof![
        6 => 0usize..40,
        6 => 40usize..1100,
        2 => 1100usize..9000,
        1 => 9000usize..60_000,
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u8..3, size(), any::<u8>()).prop_map(|(group, len, seed)| Op::Create { group, len, seed }),
        3 => (any::<usize>(), size(), any::<u8>()).prop_map(|(target, len, seed)| Op::CreateNear { target, len, seed }),
        4 => any::<usize>().prop_map(|target| Op::Read { target }),
        5 => (any::<usize>(), size(), any::<u8>()).prop_map(|(target, len, seed)| Op::Update { target, len, seed }),
        2 => any::<usize>().prop_map(|target| Op::Delete { target }),
        2 => (any::<usize>(), 0u16..=1000, 0usize..5000, any::<u8>())
            .prop_map(|(target, at_permille, len, seed)| Op::WriteRange { target, at_permille, len, seed }),
        2 => (any::<usize>(), 0usize..6000, any::<u8>()).prop_map(|(target, len, seed)| Op::Append { target, len, seed }),
        1 => (any::<usize>(), 0u16..=1000).prop_map(|(target, to_permille)| Op::Truncate { target, to_permille }),
        2 => (any::<usize>(), 0u16..=1000, 0usize..3000)
            .prop_map(|(target, at_permille, len)| Op::ReadRange { target, at_permille, len }),
        3 => Just(Op::Commit),
        1 => Just(Op::Abort),
        1 => Just(Op::Reopen),
        1 => Just(Op::Crash),
    ]
}

fn bytes(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| seed.wrapping_add((i % 251) as u8).wrapping_mul(31))
        .collect()
}

#[derive(Clone)]
struct Model {
    live: Vec<(Oid, Vec<u8>)>,
    index: HashMap<Oid, usize>,
    dead: Vec<Oid>,
}

impl Model {
    fn pick(&self, t: usize) -> Option<usize> {
        (!self.live.is_empty()).then(|| t % self.live.len())
    }
    fn add(&mut self, oid: Oid, data: Vec<u8>) {
        assert!(!self.index.contains_key(&oid), "OID {oid} handed out twice");
        self.index.insert(oid, self.live.len());
        self.live.push((oid, data));
    }
    fn remove(&mut self, i: usize) -> Oid {
        let (oid, _) = self.live.swap_remove(i);
        self.index.remove(&oid);
        if i < self.live.len() {
            let moved = self.live[i].0;
            self.index.insert(moved, i);
        }
        oid
    }
}

fn run(ops: Vec<Op>, policy: Policy) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let opts = DbOptions {
        volume: VolumeOptions {
            buffer_frames: 12,
            extent_pages: 4,
            policy,
            ..VolumeOptions::default()
        },
        // Tiny budgets, so spilling and checkpoints happen in small runs.
        txn_memory_bytes: 6 * 4096,
        background: false,
        ..DbOptions::default()
    };
    let mut db = Some(Db::create(&path, &opts).unwrap());
    let groups = {
        let d = db.as_ref().unwrap();
        [
            GroupId::DEFAULT,
            d.create_group("a").unwrap(),
            d.create_group("b").unwrap(),
        ]
    };
    // `committed` is what the database holds; `m` adds the open transaction.
    let mut committed = Model {
        live: Vec::new(),
        index: HashMap::new(),
        dead: Vec::new(),
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
            Op::Create { group, len, seed } => {
                let data = bytes(len, seed);
                let oid = t.create(groups[group as usize], &data).unwrap();
                m.add(oid, data);
            }
            Op::CreateNear { target, len, seed } => {
                let Some(i) = m.pick(target) else { continue };
                let data = bytes(len, seed);
                let oid = t.create_near(m.live[i].0, &data).unwrap();
                m.add(oid, data);
            }
            Op::Read { target } => {
                let Some(i) = m.pick(target) else { continue };
                let (oid, data) = &m.live[i];
                assert_eq!(&t.read(*oid).unwrap(), data, "object {oid}");
                assert_eq!(t.len(*oid).unwrap(), data.len() as u64);
            }
            Op::Update { target, len, seed } => {
                let Some(i) = m.pick(target) else { continue };
                let data = bytes(len, seed);
                t.update(m.live[i].0, &data).unwrap();
                m.live[i].1 = data;
            }
            Op::Delete { target } => {
                let Some(i) = m.pick(target) else { continue };
                let oid = m.remove(i);
                t.delete(oid).unwrap();
                m.dead.push(oid);
            }
            Op::WriteRange {
                target,
                at_permille,
                len,
                seed,
            } => {
                let Some(i) = m.pick(target) else { continue };
                let oid = m.live[i].0;
                let cur = &mut m.live[i].1;
                let at = cur.len() * at_permille as usize / 1000;
                let data = bytes(len, seed);
                t.write_range(oid, at as u64, &data).unwrap();
                if at + len > cur.len() {
                    cur.resize(at + len, 0);
                }
                cur[at..at + len].copy_from_slice(&data);
            }
            Op::Append { target, len, seed } => {
                let Some(i) = m.pick(target) else { continue };
                let data = bytes(len, seed);
                t.append(m.live[i].0, &data).unwrap();
                m.live[i].1.extend_from_slice(&data);
            }
            Op::Truncate { target, to_permille } => {
                let Some(i) = m.pick(target) else { continue };
                let to = m.live[i].1.len() * to_permille as usize / 1000;
                t.truncate(m.live[i].0, to as u64).unwrap();
                m.live[i].1.truncate(to);
            }
            Op::ReadRange {
                target,
                at_permille,
                len,
            } => {
                let Some(i) = m.pick(target) else { continue };
                let (oid, data) = &m.live[i];
                let at = data.len() * at_permille as usize / 1000;
                let mut buf = vec![0u8; len];
                let r = t.read_range(*oid, at as u64, &mut buf);
                if at + len <= data.len() {
                    r.unwrap();
                    assert_eq!(&buf[..], &data[at..at + len]);
                } else {
                    assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
                }
            }
            Op::Commit | Op::Abort | Op::Reopen | Op::Crash => unreachable!(),
        }
    }
    if let Some(t) = txn.take() {
        t.commit().unwrap();
        committed = m.clone();
    }
    let db = db.unwrap();
    let mut t = db.begin().unwrap();
    for (oid, data) in &committed.live {
        assert_eq!(&t.read(*oid).unwrap(), data, "object {oid} at the end");
    }
    for oid in &committed.dead {
        assert!(
            matches!(t.read(*oid), Err(Error::NotFound { .. })),
            "deleted {oid} must stay NotFound"
        );
    }
    let mut scanned: Vec<Oid> = groups.iter().flat_map(|&g| t.scan_all(g).unwrap()).collect();
    scanned.sort();
    let mut expected: Vec<Oid> = committed.live.iter().map(|(o, _)| *o).collect();
    expected.sort();
    assert_eq!(scanned, expected, "group scans yield every live object exactly once");
    t.commit().unwrap();
    db.close().unwrap();
    let report = check_database(&path, &opts.volume);
    assert!(report.is_ok(), "check found problems: {:?}", report.problems);
    assert_eq!(report.objects, committed.live.len() as u64);
}

fn cases() -> u32 {
    std::env::var("CAIRN_PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(24)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn store_matches_model_clock(ops in proptest::collection::vec(op(), 1..120)) {
        run(ops, Policy::Clock);
    }

    #[test]
    fn store_matches_model_lru(ops in proptest::collection::vec(op(), 1..120)) {
        run(ops, Policy::Lru);
    }
}
