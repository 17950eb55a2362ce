//! The workloads: transactions of small and large objects, B+-tree
//! inserts and deletes, checkpoints, evictions and reopens, and in the
//! object-locking workload an interloper committing beside an open
//! transaction; each run keeps the model to what was acknowledged.

use std::collections::{BTreeMap, BTreeSet};
use std::panic::{catch_unwind, AssertUnwindSafe};

use cairn_storage::btree::BTree;
use cairn_storage::lock::{LockMode, Resource};
use cairn_storage::sim::{mix64, SimDisk, SimRng};
use cairn_storage::{Db, DbOptions, Error, GroupId, Oid};

use crate::harness::{db_path, opts, panic_message, Config};
use crate::model::{payload, registry_bytes, Model, State};

#[derive(Clone, Copy, Debug)]
pub(crate) struct Workload {
    pub(crate) seed: u64,
    pub(crate) txns: u64,
    /// Close the database at the end (else it is dropped: a crash).
    pub(crate) close_at_end: bool,
    /// Transactions lock objects, and an interloper (see [`interloper`])
    /// changes objects of the same pages while a transaction is open.
    pub(crate) object_locks: bool,
}

/// How a workload run ended.
pub(crate) struct Run {
    /// The database, if the run ended with it open.
    pub(crate) db: Option<Db>,
    /// The step that failed, and its error.
    pub(crate) failure: Option<(String, Error)>,
    /// The operation count when `Db::create` returned.
    pub(crate) create_end_op: u64,
}

pub(crate) fn pick<K: Clone, V>(m: &BTreeMap<K, V>, rng: &mut SimRng) -> Option<K> {
    if m.is_empty() {
        return None;
    }
    m.keys().nth(rng.below(m.len() as u64) as usize).cloned()
}

/// One workload transaction; `Err` is the failing step. Updates `work` as
/// each step succeeds.
pub(crate) fn step(what: &'static str) -> impl Fn(Error) -> (String, Error) {
    move |e| (what.to_string(), e)
}

pub(crate) fn txn_body(
    db: &Db,
    k: u64,
    rng: &mut SimRng,
    work: &mut State,
    ever: &mut BTreeSet<Oid>,
) -> Result<cairn_storage::Txn, (String, Error)> {
    let mut t = db.begin().map_err(step("begin"))?;
    if k == 1 {
        let reg = t
            .create(GroupId::DEFAULT, &registry_bytes(1))
            .map_err(step("create registry"))?;
        ever.insert(reg);
        work.registry = Some(reg);
        let side = t
            .create(GroupId::DEFAULT, &registry_bytes(0))
            .map_err(step("create side registry"))?;
        ever.insert(side);
        work.side_registry = Some(side);
        let g = db.group("index").map_err(step("group"))?;
        let tree = BTree::create(&mut t, g, true).map_err(step("create tree"))?;
        work.root = Some(tree.root());
    }
    let registry = work.registry.expect("the first transaction made it");
    let n_ops = rng.range(1, 7);
    for j in 0..n_ops {
        let choice = rng.below(100);
        match choice {
            0..=34 => {
                let len = if choice < 24 {
                    rng.range(16, 900)
                } else {
                    rng.range(1100, 24_000)
                };
                let data = payload(rng, len);
                let near = if choice < 8 { pick(&work.objects, rng) } else { None };
                let oid = match near {
                    Some(n) => t.create_near(n, &data).map_err(step("create_near"))?,
                    None => t.create(GroupId::DEFAULT, &data).map_err(step("create"))?,
                };
                ever.insert(oid);
                work.objects.insert(oid, data);
            }
            35..=49 => {
                let Some(oid) = pick(&work.objects, rng) else { continue };
                let len = if rng.chance(7, 10) {
                    rng.range(16, 900)
                } else {
                    rng.range(1100, 12_000)
                };
                let data = payload(rng, len);
                t.update(oid, &data).map_err(step("update"))?;
                work.objects.insert(oid, data);
            }
            50..=57 => {
                let Some(oid) = pick(&work.objects, rng) else { continue };
                let n = rng.range(1, 3000);
                let data = payload(rng, n);
                t.append(oid, &data).map_err(step("append"))?;
                work.objects.get_mut(&oid).expect("picked").extend_from_slice(&data);
            }
            58..=65 => {
                let Some(oid) = pick(&work.objects, rng) else { continue };
                let cur = work.objects[&oid].len() as u64;
                let off = rng.below(cur + 1);
                let n = rng.range(1, 2000);
                let data = payload(rng, n);
                t.write_range(oid, off, &data).map_err(step("write_range"))?;
                let v = work.objects.get_mut(&oid).expect("picked");
                let end = off as usize + data.len();
                if v.len() < end {
                    v.resize(end, 0);
                }
                v[off as usize..end].copy_from_slice(&data);
            }
            66..=73 => {
                let Some(oid) = pick(&work.objects, rng) else { continue };
                t.delete(oid).map_err(step("delete"))?;
                work.objects.remove(&oid);
            }
            74..=93 => {
                let root = work.root.expect("the first transaction made it");
                let tree = BTree::open(&mut t, root).map_err(step("open tree"))?;
                for x in 0..rng.range(1, 40) {
                    let mut key = format!("{k:05}.{j:02}.{x:03}.").into_bytes();
                    key.resize(key.len() + rng.below(50) as usize, b'k');
                    let n = rng.range(4, 120);
                    let value = payload(rng, n);
                    tree.insert(&mut t, &key, &value).map_err(step("tree insert"))?;
                    work.keys.insert(key, value);
                }
            }
            _ => {
                let root = work.root.expect("the first transaction made it");
                let Some(key) = pick(&work.keys, rng) else { continue };
                let tree = BTree::open(&mut t, root).map_err(step("open tree"))?;
                tree.delete(&mut t, &key, None).map_err(step("tree delete"))?;
                work.keys.remove(&key);
            }
        }
    }
    t.update(registry, &registry_bytes(k))
        .map_err(step("update registry"))?;
    work.seq = k;
    Ok(t)
}

/// The interloper: a second object-locking transaction, begun while the
/// workload's transaction (whose changes are `work`) is still open. It
/// shrinks a few small objects that transaction did not touch, on the same
/// pages, taking each object's locks only if nobody is in the way (so it
/// never waits), and writes its number `n` into the side registry; it
/// commits first. `None` if the side registry is in the way. Returns the
/// transaction and its changes.
#[allow(clippy::type_complexity)]
pub(crate) fn interloper(
    db: &Db,
    n: u64,
    rng: &mut SimRng,
    acked: &State,
    work: &State,
) -> Result<Option<(cairn_storage::Txn, Vec<(Oid, Vec<u8>)>)>, (String, Error)> {
    let side = acked.side_registry.expect("the first transaction made it");
    let mut t = db.begin().map_err(step("interloper begin"))?;
    let free = |t: &mut cairn_storage::Txn, oid: Oid| -> Result<bool, (String, Error)> {
        Ok(t.try_lock_resource(Resource::Page(oid.page), LockMode::IX)
            .map_err(step("interloper lock"))?
            && t.try_lock_resource(Resource::Object(oid), LockMode::X)
                .map_err(step("interloper lock"))?)
    };
    if !free(&mut t, side)? {
        t.abort().map_err(step("interloper abort"))?;
        return Ok(None);
    }
    let mut changes = Vec::new();
    let untouched: Vec<Oid> = acked
        .objects
        .iter()
        .filter(|(oid, v)| v.len() <= 900 && work.objects.get(oid) == Some(v))
        .map(|(oid, _)| *oid)
        .collect();
    for _ in 0..rng.range(1, 4) {
        if untouched.is_empty() {
            break;
        }
        let oid = untouched[rng.below(untouched.len() as u64) as usize];
        if changes.iter().any(|(o, _)| *o == oid) || !free(&mut t, oid)? {
            continue;
        }
        let cur = acked.objects[&oid].len() as u64;
        let len = rng.range(cur.div_ceil(2), cur + 1);
        let data = payload(rng, len);
        t.update(oid, &data).map_err(step("interloper update"))?;
        changes.push((oid, data));
    }
    t.update(side, &registry_bytes(n))
        .map_err(step("interloper side registry"))?;
    Ok(Some((t, changes)))
}

/// Runs the workload on `disk` (database at
/// [`DB_DIR`](crate::harness::DB_DIR)), keeping `model` to what was
/// acknowledged; stops at the first error.
pub(crate) fn run_workload(disk: &SimDisk, w: &Workload, model: &mut Model) -> Run {
    let o = DbOptions {
        object_locking: w.object_locks,
        ..opts(disk)
    };
    let mut run = Run {
        db: None,
        failure: None,
        create_end_op: 0,
    };
    macro_rules! fail {
        ($what:expr, $e:expr) => {{
            run.failure = Some(($what.to_string(), $e));
            return run;
        }};
    }
    match Db::create(&db_path(), &o) {
        Ok(db) => run.db = Some(db),
        Err(e) => fail!("Db::create", e),
    }
    model.created = true;
    run.create_end_op = disk.stats().ops;
    if let Err(e) = run.db.as_ref().expect("open").create_group("index") {
        fail!("create_group", e)
    }
    for k in 1..=w.txns {
        let db = run.db.as_ref().expect("open between steps");
        let mut rng = SimRng::new(mix64(w.seed ^ mix64(k)));
        let mut work = model.acked.clone();
        let t = match txn_body(db, k, &mut rng, &mut work, &mut model.ever) {
            Ok(t) => t,
            Err((what, e)) => fail!(format!("txn {k}: {what}"), e),
        };
        if w.object_locks && k > 1 && rng.chance(1, 2) {
            let side = model.acked.side + 1;
            match interloper(db, side, &mut rng, &model.acked, &work) {
                Ok(None) => {}
                Ok(Some((t2, changes))) => {
                    let mut after = model.acked.clone();
                    after.side = side;
                    for (oid, data) in &changes {
                        after.objects.insert(*oid, data.clone());
                        work.objects.insert(*oid, data.clone());
                    }
                    work.side = side;
                    model.in_flight = Some(after.clone());
                    match t2.commit() {
                        Ok(()) => {
                            model.acked = after;
                            model.in_flight = None;
                        }
                        Err(e) => fail!(format!("txn {k}: interloper commit"), e),
                    }
                }
                Err((what, e)) => fail!(format!("txn {k}: {what}"), e),
            }
        }
        if k > 1 && rng.chance(1, 10) {
            if let Err(e) = t.abort() {
                fail!(format!("txn {k}: abort"), e)
            }
            continue;
        }
        model.in_flight = Some(work.clone());
        match t.commit() {
            Ok(()) => {
                model.acked = work;
                model.in_flight = None;
            }
            Err(e) => fail!(format!("txn {k}: commit"), e),
        }
        let r = rng.below(30);
        if r < 5 {
            if let Err(e) = db.checkpoint() {
                fail!(format!("after txn {k}: checkpoint"), e)
            }
        } else if r < 8 {
            if let Err(e) = db.evict_cache() {
                fail!(format!("after txn {k}: evict_cache"), e)
            }
        } else if r < 10 {
            let db = run.db.take().expect("open");
            if let Err(e) = db.close() {
                fail!(format!("after txn {k}: close"), e)
            }
            match Db::open(&db_path(), &o) {
                Ok(db) => run.db = Some(db),
                Err(e) => fail!(format!("after txn {k}: reopen"), e),
            }
        }
    }
    if w.close_at_end {
        if let Err(e) = run.db.take().expect("open").close() {
            fail!("final close", e)
        }
    }
    run
}

/// A fresh disk with the database's directory already there, durably.
pub(crate) fn fresh_disk() -> SimDisk {
    let d = SimDisk::new();
    d.make_durable_dir(&db_path());
    d
}

/// Runs a workload to the end with no faults; the disk and the model.
pub(crate) fn clean_run(w: &Workload) -> (SimDisk, Model, Run) {
    let disk = fresh_disk();
    disk.record_trace(true);
    let mut model = Model::default();
    let run = catch_unwind(AssertUnwindSafe(|| run_workload(&disk, w, &mut model)))
        .unwrap_or_else(|p| panic!("the workload panicked without faults: {}", panic_message(&*p)));
    if let Some((what, e)) = &run.failure {
        panic!("the workload failed without faults at {what}: {e}");
    }
    (disk, model, run)
}

pub(crate) fn workloads(cfg: &Config) -> Vec<Workload> {
    vec![
        Workload {
            seed: cfg.seed,
            txns: 40,
            close_at_end: false,
            object_locks: false,
        },
        Workload {
            seed: mix64(cfg.seed ^ 1),
            txns: 25,
            close_at_end: true,
            object_locks: false,
        },
        Workload {
            seed: mix64(cfg.seed ^ 2),
            txns: 25,
            close_at_end: false,
            object_locks: true,
        },
    ]
}
