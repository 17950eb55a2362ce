//! Proven durability (issue 10), on the simulated disk (`cairn_storage::sim`):
//!
//! - **crash at every I/O index** of a workload (transactions of small and
//!   large objects, B+-tree splits, checkpoints, evictions, reopens; in the
//!   third workload they lock objects, and an interloper commits changes to
//!   other objects of the same pages while each is open): the
//!   power fails at operation `i`, and every disk image it could leave
//!   (unsynced writes all dropped, a random subset kept, the last write torn,
//!   all kept) recovers to a state the model accepts — every acknowledged
//!   commit whole, nothing of an unacknowledged one, the commit in flight all
//!   or nothing — and `check` finds nothing wrong;
//! - **crash during recovery**, three deep, ends where a clean recovery does;
//! - **I/O errors at every index** (EIO on a read, write or fsync; ENOSPC on
//!   a write or extend; a short write; once or forever): the operation fails
//!   with an error, never a panic; later work is refused (poisoned) until
//!   reopen; reopening — on the same disk or on a crash image of it — gives a
//!   state the model accepts;
//! - **bit flips** in any page of the volume or byte of the log, of a cleanly
//!   closed database and of one awaiting recovery: each is detected (open
//!   fails naming the page or log position, `check` reports it, or a read
//!   fails), never returned as data, never a panic;
//! - **crash while creating a database**, and a **leftover log** in a new
//!   database's directory.
//!
//! Environment: `CAIRN_CRASH_POINTS=N` crash points (and I/O-error points,
//! bit-flip trials) per workload, sampled evenly (default small, for CI);
//! `CAIRN_CRASH_SEED=S` the seed; `CAIRN_CRASH_INDEX=i` and
//! `CAIRN_CRASH_IMAGE=synced|random|torn-last|everything` replay one crash
//! point. Every failure prints the seed, the I/O index and the image kind;
//! a failure with the shape of a defect this suite found (see
//! `FIXED_DEFECTS`) names it, since it would be that fix regressing.

use std::collections::{BTreeMap, BTreeSet};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use cairn_storage::btree::BTree;
use cairn_storage::check::check_database;
use cairn_storage::io::Vfs;
use cairn_storage::lock::{LockMode, Resource};
use cairn_storage::sim::{mix64, Fault, FaultKind, ImageKind, OpKind, SimDisk, SimRng};
use cairn_storage::volume::VolumeOptions;
use cairn_storage::{Db, DbOptions, Error, GroupId, Oid, PageId};

const DB_DIR: &str = "/data/db";
const PAGE_SIZE: u64 = 4096;

fn db_path() -> PathBuf {
    PathBuf::from(DB_DIR)
}

fn opts(disk: &SimDisk) -> DbOptions {
    DbOptions {
        volume: VolumeOptions {
            vfs: Arc::new(disk.clone()),
            buffer_frames: 16,
            extent_pages: 4,
            ..VolumeOptions::default()
        },
        // Small segments and budgets: segments roll and are removed, and
        // transactions spill.
        wal_segment_bytes: 48 << 10,
        txn_memory_bytes: 8 * PAGE_SIZE as usize,
        background: false,
        ..DbOptions::default()
    }
}

fn check_opts(disk: &SimDisk) -> VolumeOptions {
    VolumeOptions {
        vfs: Arc::new(disk.clone()),
        ..VolumeOptions::default()
    }
}

/// A disk holding the same files, durably (a crash image has no pending
/// operations, so this is an exact copy of one).
fn copy(disk: &SimDisk) -> SimDisk {
    disk.image(ImageKind::Everything, 0)
}

// ---------------------------------------------------------------------------
// Configuration

struct Config {
    points: Option<usize>,
    seed: u64,
    index: Option<u64>,
    image: Option<ImageKind>,
}

fn config() -> Config {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let num = |k: &str| {
        var(k).map(|v| {
            let v = v.trim();
            match v.strip_prefix("0x") {
                Some(h) => u64::from_str_radix(h, 16),
                None => v.parse(),
            }
            .unwrap_or_else(|_| panic!("{k}={v} is not a number"))
        })
    };
    Config {
        points: num("CAIRN_CRASH_POINTS").map(|n| n as usize),
        seed: num("CAIRN_CRASH_SEED").unwrap_or(0xCA1E_0010),
        index: num("CAIRN_CRASH_INDEX"),
        image: var("CAIRN_CRASH_IMAGE")
            .map(|s| ImageKind::from_name(&s).unwrap_or_else(|| panic!("CAIRN_CRASH_IMAGE={s}: unknown kind"))),
    }
}

/// `CAIRN_SIM_VERBOSE=1`: say what each run did.
fn verbose() -> bool {
    std::env::var("CAIRN_SIM_VERBOSE").is_ok_and(|v| v != "0")
}

/// Up to `n` elements of `v`, evenly spread, first and last included.
fn sample<T: Copy>(v: &[T], n: usize) -> Vec<T> {
    if v.len() <= n {
        return v.to_vec();
    }
    if n <= 1 {
        return v.last().copied().into_iter().collect();
    }
    (0..n).map(|k| v[k * (v.len() - 1) / (n - 1)]).collect()
}

/// The engine defects this suite found (issue 10), all fixed, each with the
/// shape of failure it caused: a failure of that shape now names the fix
/// that regressed.
const FIXED_DEFECTS: &[(&str, &str)] = &[
    (
        "wal-hole",
        "a hole in the unsynced log tail followed by a valid record is CorruptLog at open, not the end of the log",
    ),
    (
        "commit-rollback",
        "a commit failing after its records are in the log is rolled back (pages freed) instead of poisoning",
    ),
    (
        "reopen-cached-log",
        "after a failed fsync, reopening trusts the log bytes in the page cache that were never made durable",
    ),
    (
        "dir-not-synced",
        "Db::create never fsyncs the parent of the database directory",
    ),
    (
        "create-retry",
        "after a crash during Db::create, open_or_create refuses (volume.cairn exists, no MANIFEST)",
    ),
    ("leftover-wal", "a leftover wal/ is replayed onto a new volume"),
    (
        "full-image-lsn",
        "a page whose LSN equals the checkpoint's redo LSN gets a diff, not a full image, at its next change, so a torn write of it cannot be repaired",
    ),
];

/// Failures collected over a test, printed together with replay commands.
struct Failures {
    test: &'static str,
    seed_var: String,
    list: Vec<String>,
}

impl Failures {
    fn new(test: &'static str, cfg: &Config) -> Failures {
        Failures {
            test,
            seed_var: format!("CAIRN_CRASH_SEED={:#x}", cfg.seed),
            list: Vec::new(),
        }
    }

    /// A failure with the shape of the fixed defect `bug` (see
    /// `FIXED_DEFECTS`): the message says which fix may have regressed.
    fn add_known(&mut self, bug: Option<&'static str>, at: String, msg: String) {
        let msg = match bug.and_then(|b| FIXED_DEFECTS.iter().find(|(k, _)| *k == b)) {
            Some((b, what)) => format!("{msg} [the shape of fixed defect {b}: {what}]"),
            None => msg,
        };
        self.add(at, msg)
    }

    fn add(&mut self, at: String, msg: String) {
        let replay = format!(
            "{} {at} cargo test --release -p cairn-storage --test crash_images {}",
            self.seed_var, self.test
        );
        self.list.push(format!("{msg}\n      replay: {replay}"));
    }

    /// Prints every failure (grouped: the first few of each message shape)
    /// and fails the test if there is any.
    fn finish(self) {
        if self.list.is_empty() {
            return;
        }
        let mut shapes: BTreeMap<String, Vec<&String>> = BTreeMap::new();
        for f in &self.list {
            let shape: String = f
                .lines()
                .next()
                .unwrap_or("")
                .chars()
                .filter(|c| !c.is_ascii_digit())
                .take(90)
                .collect();
            shapes.entry(shape).or_default().push(f);
        }
        eprintln!("\n{}: {} failures, {} kinds:", self.test, self.list.len(), shapes.len());
        for fs in shapes.values() {
            eprintln!("  [{} like this]", fs.len());
            for f in fs.iter().take(3) {
                eprintln!("  - {f}");
            }
        }
        panic!("{}: {} failures (see above)", self.test, self.list.len());
    }
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "(a panic without a message)".into()
    }
}

/// Runs `f`, turning a panic into an error naming it.
fn no_panic<T>(f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => Err(format!("PANIC: {}", panic_message(&*p))),
    }
}

// ---------------------------------------------------------------------------
// The model

/// What the database holds after some prefix of the workload's commits.
#[derive(Clone, Debug, Default)]
struct State {
    /// The workload transaction whose commit this is (the registry's value).
    seq: u64,
    /// The registry object: every transaction writes its number into it, so
    /// a recovered database says which state it is in.
    registry: Option<Oid>,
    /// The B+-tree's root.
    root: Option<PageId>,
    objects: BTreeMap<Oid, Vec<u8>>,
    keys: BTreeMap<Vec<u8>, Vec<u8>>,
    /// The interlopers' registry (workloads with object locking): every
    /// interloper writes its number into it.
    side_registry: Option<Oid>,
    /// The last interloper committed.
    side: u64,
}

#[derive(Clone, Debug, Default)]
struct Model {
    /// After the last commit that returned Ok.
    acked: State,
    /// After the commit that was called but did not return Ok (crash or
    /// error): recovery may find it whole, or not at all.
    in_flight: Option<State>,
    /// Every OID ever handed out; those not in the state must not read.
    ever: BTreeSet<Oid>,
    /// `Db::create` returned Ok.
    created: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Which {
    Acked,
    InFlight,
}

impl Model {
    fn state(&self, w: Which) -> &State {
        match w {
            Which::Acked => &self.acked,
            Which::InFlight => self.in_flight.as_ref().expect("in flight"),
        }
    }

    /// The model once recovery has decided the commit in flight.
    fn resolved(&self, w: Which) -> Model {
        Model {
            acked: self.state(w).clone(),
            in_flight: None,
            ever: self.ever.clone(),
            created: self.created,
        }
    }
}

fn registry_bytes(seq: u64) -> Vec<u8> {
    seq.to_le_bytes().repeat(8)
}

fn registry_seq(bytes: &[u8]) -> Option<u64> {
    let seq = u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?);
    (bytes == registry_bytes(seq)).then_some(seq)
}

fn payload(rng: &mut SimRng, len: u64) -> Vec<u8> {
    let mut v = vec![0u8; len as usize];
    rng.fill(&mut v);
    v
}

fn first_difference(a: &[u8], b: &[u8]) -> String {
    match a.iter().zip(b).position(|(x, y)| x != y) {
        Some(i) => format!(
            "{} bytes read, {} expected, first difference at byte {i}",
            a.len(),
            b.len()
        ),
        None => format!("{} bytes read, {} expected", a.len(), b.len()),
    }
}

// ---------------------------------------------------------------------------
// The workload

#[derive(Clone, Copy, Debug)]
struct Workload {
    seed: u64,
    txns: u64,
    /// Close the database at the end (else it is dropped: a crash).
    close_at_end: bool,
    /// Transactions lock objects, and an interloper (see [`interloper`])
    /// changes objects of the same pages while a transaction is open.
    object_locks: bool,
}

/// How a workload run ended.
struct Run {
    /// The database, if the run ended with it open.
    db: Option<Db>,
    /// The step that failed, and its error.
    failure: Option<(String, Error)>,
    /// The operation count when `Db::create` returned.
    create_end_op: u64,
}

fn pick<K: Clone, V>(m: &BTreeMap<K, V>, rng: &mut SimRng) -> Option<K> {
    if m.is_empty() {
        return None;
    }
    m.keys().nth(rng.below(m.len() as u64) as usize).cloned()
}

/// One workload transaction; `Err` is the failing step. Updates `work` as
/// each step succeeds.
fn step(what: &'static str) -> impl Fn(Error) -> (String, Error) {
    move |e| (what.to_string(), e)
}

fn txn_body(
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
fn interloper(
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

/// Runs the workload on `disk` (database at [`DB_DIR`]), keeping `model` to
/// what was acknowledged; stops at the first error.
fn run_workload(disk: &SimDisk, w: &Workload, model: &mut Model) -> Run {
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
fn fresh_disk() -> SimDisk {
    let d = SimDisk::new();
    d.make_durable_dir(&db_path());
    d
}

/// Runs a workload to the end with no faults; the disk and the model.
fn clean_run(w: &Workload) -> (SimDisk, Model, Run) {
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

// ---------------------------------------------------------------------------
// Verification

/// Reads the whole database back and compares it with the model; says which
/// state (acknowledged, or with the commit in flight) it is in.
fn verify_db(db: &Db, model: &Model) -> Result<Which, String> {
    let mut t = db.begin().map_err(|e| format!("begin: {e}"))?;
    let registry = model
        .acked
        .registry
        .or(model.in_flight.as_ref().and_then(|s| s.registry));
    let which = match registry {
        None => Which::Acked,
        Some(reg) => match t.read(reg) {
            Ok(bytes) => {
                let seq = registry_seq(&bytes)
                    .ok_or_else(|| format!("the registry {reg} reads garbled bytes ({} bytes)", bytes.len()))?;
                let side = match model.acked.side_registry {
                    Some(side) => {
                        let bytes = t.read(side).map_err(|e| format!("the side registry {side}: {e}"))?;
                        registry_seq(&bytes).ok_or_else(|| {
                            format!("the side registry {side} reads garbled bytes ({} bytes)", bytes.len())
                        })?
                    }
                    None => 0,
                };
                if model.acked.registry.is_some() && (seq, side) == (model.acked.seq, model.acked.side) {
                    Which::Acked
                } else if model.in_flight.as_ref().is_some_and(|s| (s.seq, s.side) == (seq, side)) {
                    Which::InFlight
                } else {
                    return Err(format!(
                        "the registries say transaction {seq}, interloper {side}; acknowledged: {} and {}, in flight: {:?}",
                        model.acked.seq,
                        model.acked.side,
                        model.in_flight.as_ref().map(|s| (s.seq, s.side))
                    ));
                }
            }
            Err(Error::NotFound { .. }) if model.acked.registry.is_none() => Which::Acked,
            Err(e) => return Err(format!("the registry {reg}: {e}")),
        },
    };
    let state = model.state(which);
    let what = |w: Which| match w {
        Which::Acked => format!("acknowledged state (txn {})", model.acked.seq),
        Which::InFlight => format!("in-flight commit (txn {})", state.seq),
    };
    for (oid, want) in &state.objects {
        match t.read(*oid) {
            Ok(got) if &got == want => {}
            Ok(got) => {
                return Err(format!(
                    "object {oid} of the {}: {}",
                    what(which),
                    first_difference(&got, want)
                ))
            }
            Err(e) => return Err(format!("object {oid} of the {}: {e}", what(which))),
        }
    }
    for oid in &model.ever {
        if state.objects.contains_key(oid) || state.registry == Some(*oid) || state.side_registry == Some(*oid) {
            continue;
        }
        match t.read(*oid) {
            Err(Error::NotFound { .. }) => {}
            Ok(got) => {
                return Err(format!(
                    "object {oid} must not exist in the {} but reads {} bytes",
                    what(which),
                    got.len()
                ))
            }
            Err(e) => return Err(format!("object {oid} (must not exist): {e}")),
        }
    }
    if let Some(root) = state.root {
        let tree = BTree::open(&mut t, root).map_err(|e| format!("B+-tree at {root}: {e}"))?;
        tree.check(&mut t).map_err(|e| format!("B+-tree check: {e}"))?;
        for (k, v) in &state.keys {
            match tree.get(&mut t, k) {
                Ok(Some(got)) if &got == v => {}
                Ok(got) => {
                    return Err(format!(
                        "B+-tree key {:?} of the {}: {:?}",
                        String::from_utf8_lossy(k),
                        what(which),
                        got.map(|g| first_difference(&g, v))
                    ))
                }
                Err(e) => return Err(format!("B+-tree key {:?}: {e}", String::from_utf8_lossy(k))),
            }
        }
        let n = tree.len(&mut t).map_err(|e| format!("B+-tree len: {e}"))?;
        if n != state.keys.len() as u64 {
            return Err(format!(
                "the B+-tree holds {n} keys, the {} {}",
                what(which),
                state.keys.len()
            ));
        }
    }
    t.commit().map_err(|e| format!("read-only commit: {e}"))?;
    Ok(which)
}

const AFTER_RECOVERY: &[u8] = b"written after recovery";

/// Opens (recovers) the database on `disk`, checks it against the model,
/// commits one more transaction, closes it and runs `check`.
fn recover_and_check(disk: &SimDisk, model: &Model) -> Result<Which, String> {
    recover_check_write(disk, model).map(|(w, _)| w)
}

/// [`recover_and_check`], also returning the object committed after recovery.
fn recover_check_write(disk: &SimDisk, model: &Model) -> Result<(Which, Oid), String> {
    no_panic(|| {
        let db = Db::open(&db_path(), &opts(disk)).map_err(|e| format!("open failed: {e}"))?;
        let which = verify_db(&db, model)?;
        let mut t = db.begin().map_err(|e| format!("begin after recovery: {e}"))?;
        let oid = t
            .create(GroupId::DEFAULT, AFTER_RECOVERY)
            .map_err(|e| format!("create after recovery: {e}"))?;
        t.commit().map_err(|e| format!("commit after recovery: {e}"))?;
        db.close().map_err(|e| format!("close after recovery: {e}"))?;
        let report = check_database(&db_path(), &check_opts(disk));
        if !report.is_ok() {
            let shown: Vec<String> = report.problems.iter().take(3).map(|p| p.to_string()).collect();
            return Err(format!(
                "check found {} problems: {}",
                report.problems.len(),
                shown.join("; ")
            ));
        }
        Ok((which, oid))
    })
}

fn workloads(cfg: &Config) -> Vec<Workload> {
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

// ---------------------------------------------------------------------------
// Crash at every I/O index

/// The mutating operations after `from` (a crash before a read leaves the
/// image a crash before the next mutation leaves), and the end.
fn crash_candidates(trace: &[OpKind], from: u64) -> Vec<u64> {
    let mut v: Vec<u64> = (from..trace.len() as u64)
        .filter(|&i| trace[i as usize].mutates())
        .collect();
    v.push(trace.len() as u64);
    v
}

/// Crashes `disk`'s database in the middle of `Db::open` (at a random
/// mutating operation) `depth` times over, each time on an image of the
/// last crash; returns the last image.
fn crash_recovery_nested(disk: &SimDisk, depth: u32, rng: &mut SimRng, log: &mut Vec<String>) -> SimDisk {
    let mut cur = copy(disk);
    for level in 0..depth {
        let probe = copy(&cur);
        probe.record_trace(true);
        let _ = no_panic(|| Db::open(&db_path(), &opts(&probe)).map(drop).map_err(|e| e.to_string()));
        let trace = probe.trace();
        let muts: Vec<u64> = (0..trace.len() as u64)
            .filter(|&i| trace[i as usize].mutates())
            .collect();
        if muts.is_empty() {
            break;
        }
        let at = muts[rng.below(muts.len() as u64) as usize];
        let run = copy(&cur);
        run.set_crash_at(Some(at));
        let _ = no_panic(|| Db::open(&db_path(), &opts(&run)).map(drop).map_err(|e| e.to_string()));
        let kind = ImageKind::ALL[rng.below(4) as usize];
        log.push(format!(
            "level {level}: crash at recovery op {at} of {}, image {kind}",
            trace.len()
        ));
        cur = run.image(kind, rng.next_u64());
    }
    cur
}

#[test]
fn crash_at_every_io_index() {
    let cfg = config();
    let started = Instant::now();
    let mut f = Failures::new("crash_at_every_io_index", &cfg);
    let (mut n_workloads, mut n_points, mut n_images, mut n_nested) = (0, 0, 0, 0);
    let mut outcomes = [0u64; 2];
    for w in workloads(&cfg) {
        n_workloads += 1;
        let (disk, clean, run) = clean_run(&w);
        if w.object_locks {
            assert!(
                clean.acked.side >= 5,
                "interlopers committed beside open transactions: {}",
                clean.acked.side
            );
        }
        let trace = disk.trace();
        let candidates = crash_candidates(&trace, run.create_end_op);
        let points = match cfg.index {
            Some(i) => vec![i],
            None => sample(&candidates, cfg.points.unwrap_or(300)),
        };
        eprintln!(
            "workload seed {:#x}: {} I/O operations, {} crash candidates, {} crash points",
            w.seed,
            trace.len(),
            candidates.len(),
            points.len()
        );
        for (pi, &at) in points.iter().enumerate() {
            n_points += 1;
            let disk = fresh_disk();
            disk.set_crash_at(Some(at));
            let mut model = Model::default();
            let ran = catch_unwind(AssertUnwindSafe(|| {
                let run = run_workload(&disk, &w, &mut model);
                drop(run.db);
            }));
            if let Err(p) = ran {
                f.add(
                    format!("CAIRN_CRASH_INDEX={at}"),
                    format!(
                        "workload {:#x} crash at op {at}: PANIC in the engine: {}",
                        w.seed,
                        panic_message(&*p)
                    ),
                );
                continue;
            }
            disk.crash_now();
            let kinds: Vec<ImageKind> = match cfg.image {
                Some(k) => vec![k],
                None => ImageKind::ALL.to_vec(),
            };
            for kind in kinds {
                n_images += 1;
                let img = disk.image(kind, mix64(w.seed ^ at ^ ((kind as u64) << 56)));
                let at_s = format!("CAIRN_CRASH_INDEX={at} CAIRN_CRASH_IMAGE={kind}");
                match recover_and_check(&copy(&img), &model) {
                    Ok(which) => {
                        outcomes[which as usize] += 1;
                        // Crash during recovery, three deep, for some points.
                        if pi % 6 == 0 && kind != ImageKind::Everything {
                            n_nested += 1;
                            let mut rng = SimRng::new(mix64(w.seed ^ at ^ 0x0E57));
                            let mut log = Vec::new();
                            let last = crash_recovery_nested(&img, 3, &mut rng, &mut log);
                            n_images += 1;
                            match recover_and_check(&last, &model) {
                                Ok(w2) if w2 == which => {}
                                Ok(w2) => f.add(
                                    at_s.clone(),
                                    format!(
                                        "workload {:#x} crash at op {at}, image {kind}, recovery crashed ({}): ends in {w2:?}, a clean recovery in {which:?}",
                                        w.seed,
                                        log.join("; ")
                                    ),
                                ),
                                Err(e) => f.add_known(
                                    e.contains("a valid record follows").then_some("wal-hole"),
                                    at_s.clone(),
                                    format!(
                                        "workload {:#x} crash at op {at}, image {kind}, recovery crashed ({}): {e}",
                                        w.seed,
                                        log.join("; ")
                                    ),
                                ),
                            }
                        }
                    }
                    Err(e) => f.add_known(
                        if kind == ImageKind::Random && e.contains("a valid record follows") {
                            Some("wal-hole")
                        } else {
                            e.contains("the log holds no full image").then_some("full-image-lsn")
                        },
                        at_s,
                        format!("workload {:#x} crash at op {at}, image {kind}: {e}", w.seed),
                    ),
                }
            }
        }
    }
    eprintln!(
        "crash_at_every_io_index: {n_workloads} workloads, {n_points} crash points, {n_images} images recovered \
         ({} acknowledged state, {} with the in-flight commit), {n_nested} nested recoveries (3 deep), {} failures, {:.1}s",
        outcomes[0],
        outcomes[1],
        f.list.len(),
        started.elapsed().as_secs_f64()
    );
    f.finish();
}

// ---------------------------------------------------------------------------
// I/O errors at every index

fn fault_candidates(trace: &[OpKind], from: u64, kind: FaultKind) -> Vec<u64> {
    (from..trace.len() as u64)
        .filter(|&i| {
            let op = trace[i as usize];
            match kind {
                FaultKind::ReadEio => op == OpKind::Read,
                FaultKind::WriteEio | FaultKind::WriteEnospc | FaultKind::ShortWrite => op == OpKind::Write,
                FaultKind::SyncEio => matches!(op, OpKind::SyncData | OpKind::SyncDir),
                FaultKind::ExtendEnospc => op == OpKind::SetLen,
            }
        })
        .collect()
}

#[test]
fn io_errors_at_every_index() {
    let cfg = config();
    let started = Instant::now();
    let mut f = Failures::new("io_errors_at_every_index", &cfg);
    let w = workloads(&cfg)[0];
    let (disk, _, run) = clean_run(&w);
    let trace = disk.trace();
    let (mut injected, mut not_fired, mut surfaced, mut swallowed, mut poisoned, mut usable_after) =
        (0u64, 0u64, 0u64, 0u64, 0u64, 0u64);
    let mut images = 0u64;
    // `CAIRN_FAULT=Kind/forever` (as printed) replays one fault kind only.
    let only = std::env::var("CAIRN_FAULT").ok();
    for kind in FaultKind::ALL {
        for forever in [false, true] {
            if only.as_ref().is_some_and(|o| *o != format!("{kind:?}/{forever}")) {
                continue;
            }
            let cands = fault_candidates(&trace, run.create_end_op, kind);
            let points = match cfg.index {
                Some(i) => vec![i],
                None => sample(&cands, cfg.points.map_or(60, |n| n / 4 + 1)),
            };
            for at in points {
                let tag = format!("{kind:?}{} at op {at}", if forever { " forever" } else { " once" });
                let at_s = format!("CAIRN_CRASH_INDEX={at} CAIRN_FAULT={kind:?}/{forever}");
                let disk = fresh_disk();
                disk.add_fault(Fault {
                    kind,
                    from_op: at,
                    forever,
                    path_contains: None,
                });
                let mut model = Model::default();
                let ran = catch_unwind(AssertUnwindSafe(|| run_workload(&disk, &w, &mut model)));
                let run = match ran {
                    Ok(r) => r,
                    Err(p) => {
                        f.add(at_s, format!("{tag}: PANIC in the engine: {}", panic_message(&*p)));
                        continue;
                    }
                };
                if disk.stats().faults_fired == 0 {
                    not_fired += 1;
                    continue;
                }
                injected += 1;
                match &run.failure {
                    None => swallowed += 1,
                    Some(_) => surfaced += 1,
                }
                if verbose() {
                    eprintln!(
                        "{tag}: fault hit op {:?}; the workload stopped at {:?}",
                        disk.stats().first_fault_op,
                        run.failure.as_ref().map(|(w, e)| format!("{w}: {e}"))
                    );
                }
                // Later work is refused until reopen.
                if let (Some(db), Some((what, err))) = (&run.db, &run.failure) {
                    let after = no_panic(|| {
                        let mut t = db.begin().map_err(|e| e.to_string())?;
                        let oid = t
                            .create(GroupId::DEFAULT, b"after the fault")
                            .map_err(|e| e.to_string())?;
                        t.commit().map_err(|e| e.to_string())?;
                        Ok(oid)
                    });
                    match after {
                        Ok(oid) => {
                            // Acknowledged: it must survive whatever state wins.
                            model.ever.insert(oid);
                            model.acked.objects.insert(oid, b"after the fault".to_vec());
                            if let Some(s) = &mut model.in_flight {
                                s.objects.insert(oid, b"after the fault".to_vec());
                            }
                            let on = disk.first_fault().map(|(_, _, p)| p).unwrap_or_default();
                            let durable_file =
                                on.ends_with("volume.cairn") || on.components().any(|c| c.as_os_str() == "wal");
                            if kind == FaultKind::ReadEio || !durable_file {
                                // A failed read, or a failed write of a
                                // transaction's spill file, leaves nothing
                                // durable in doubt.
                                usable_after += 1;
                            } else {
                                f.add(
                                    at_s.clone(),
                                    format!(
                                        "{tag}: {what} failed ({err}), yet a later commit succeeded (not poisoned)"
                                    ),
                                );
                            }
                        }
                        Err(e) if e.contains("PANIC") => f.add(at_s.clone(), format!("{tag}: after the error: {e}")),
                        Err(_) => poisoned += 1,
                    }
                }
                // A commit that failed (on its spill file, or reading a page).
                let spill = disk
                    .first_fault()
                    .is_some_and(|(_, _, p)| p.components().any(|c| c.as_os_str() == "tmp"));
                let in_commit = run.failure.as_ref().is_some_and(|(w, _)| w.ends_with(": commit"));
                let known_io = (in_commit || spill).then_some("commit-rollback");
                drop(run.db);
                let crash_image = disk.image(ImageKind::Synced, mix64(at));
                disk.clear_faults();
                // Reopen on the same disk (the machine stayed up) ...
                images += 1;
                match recover_check_write(&disk, &model) {
                    Ok((which, oid)) => {
                        // ... and then lose power: what the reopen made
                        // durable must hold.
                        images += 1;
                        let after = disk.image(ImageKind::Synced, mix64(at ^ 1));
                        let mut resolved = model.resolved(which);
                        resolved.ever.insert(oid);
                        resolved.acked.objects.insert(oid, AFTER_RECOVERY.to_vec());
                        if let Err(e) = recover_and_check(&after, &resolved) {
                            let cached = kind == FaultKind::SyncEio && e.contains("the log is corrupt");
                            f.add_known(
                                if cached { Some("reopen-cached-log") } else { known_io },
                                at_s.clone(),
                                format!("{tag}: reopened in place, then a power loss: {e}"),
                            );
                        }
                    }
                    Err(e) => f.add_known(
                        if e.contains("the log holds no full image") {
                            Some("full-image-lsn")
                        } else {
                            known_io
                        },
                        at_s.clone(),
                        format!("{tag}: reopen on the same disk: {e}"),
                    ),
                }
                // ... or lose power right after the error.
                images += 1;
                if let Err(e) = recover_and_check(&crash_image, &model) {
                    f.add_known(
                        if e.contains("the log holds no full image") {
                            Some("full-image-lsn")
                        } else {
                            known_io
                        },
                        at_s,
                        format!("{tag}: power loss after the error: {e}"),
                    );
                }
            }
        }
    }
    eprintln!(
        "io_errors_at_every_index: 1 workload, {injected} I/O errors injected ({not_fired} armed but never hit), \
         {surfaced} surfaced as errors, {swallowed} absorbed by the engine, {poisoned} refused later work, \
         {usable_after} read or spill-file errors left the database usable, {images} images recovered, {} failures, {:.1}s",
        f.list.len(),
        started.elapsed().as_secs_f64()
    );
    f.finish();
}

// ---------------------------------------------------------------------------
// Bit flips

#[derive(Default, Debug)]
struct FlipCounts {
    tried: u64,
    at_open: u64,
    at_open_named: u64,
    by_read: u64,
    by_check: u64,
    repaired: u64,
    harmless: u64,
    /// Flips in the last group commit's records, which no later record
    /// vouches for: the engine cannot tell them from a torn tail, and must
    /// treat them exactly as one (the log ends before the damaged record).
    tail_cut: u64,
}

enum FlipOutcome {
    Open { named: bool },
    Read,
    Check,
    Repaired,
    Harmless,
}

/// Where a flip went: the volume's page, or a log segment and offset.
#[derive(Clone, Debug)]
enum Target {
    Page(u32),
    Log(PathBuf),
}

/// Opens the flipped database and reads everything; wrong data returned as
/// Ok, a silent loss, or a panic is an `Err`.
fn flip_outcome(disk: &SimDisk, model: &Model, target: &Target) -> Result<FlipOutcome, String> {
    no_panic(|| {
        let db = match Db::open(&db_path(), &opts(disk)) {
            Err(e) => {
                let named = match (target, &e) {
                    (Target::Page(p), Error::Corrupt { page, .. }) => page.0 == *p,
                    (Target::Page(_), Error::CorruptFile { path, .. }) => path.ends_with("volume.cairn"),
                    (Target::Log(seg), Error::CorruptLog { path, .. }) => path == seg,
                    _ => false,
                };
                return Ok(FlipOutcome::Open { named });
            }
            Ok(db) => db,
        };
        let rebuilt = match target {
            Target::Page(p) => db.recovery().rebuilt.iter().any(|r| r.0 == *p),
            Target::Log(_) => false,
        };
        let mut read_error = false;
        let mut loss = Vec::new();
        let mut t = db.begin().map_err(|e| format!("begin: {e}"))?;
        let state = &model.acked;
        if let Some(reg) = state.registry {
            match t.read(reg) {
                Ok(b) if b == registry_bytes(state.seq) => {}
                Ok(b) => match registry_seq(&b) {
                    Some(seq) => loss.push(format!("the registry says txn {seq}, acknowledged {}", state.seq)),
                    None => return Err(format!("WRONG DATA: the registry {reg} reads garbled bytes")),
                },
                Err(_) => read_error = true,
            }
        }
        for (oid, want) in &state.objects {
            match t.read(*oid) {
                Ok(got) if &got == want => {}
                Ok(got) => return Err(format!("WRONG DATA: object {oid}: {}", first_difference(&got, want))),
                Err(Error::NotFound { .. }) => loss.push(format!("object {oid} not found")),
                Err(_) => read_error = true,
            }
        }
        if let Some(root) = state.root {
            match BTree::open(&mut t, root) {
                Ok(tree) => {
                    if tree.check(&mut t).is_err() {
                        read_error = true;
                    }
                    for (k, v) in &state.keys {
                        match tree.get(&mut t, k) {
                            Ok(Some(got)) if &got == v => {}
                            Ok(Some(got)) => {
                                return Err(format!(
                                    "WRONG DATA: key {:?}: {}",
                                    String::from_utf8_lossy(k),
                                    first_difference(&got, v)
                                ))
                            }
                            Ok(None) => loss.push(format!("key {:?} not found", String::from_utf8_lossy(k))),
                            Err(_) => read_error = true,
                        }
                    }
                }
                Err(_) => read_error = true,
            }
        }
        drop(t);
        let closed = db.close();
        let report = check_database(&db_path(), &check_opts(disk));
        if read_error {
            return Ok(FlipOutcome::Read);
        }
        if !report.is_ok() || closed.is_err() {
            return Ok(FlipOutcome::Check);
        }
        if !loss.is_empty() {
            return Err(format!("SILENT LOSS, nothing detected: {}", loss.join("; ")));
        }
        Ok(if rebuilt {
            FlipOutcome::Repaired
        } else {
            FlipOutcome::Harmless
        })
    })
}

/// In a log segment's bytes: the file offset from which no record is
/// vouched for (the `durable` field of the last valid record: every byte
/// before it had been fsynced when that record was appended), and the start
/// offset of every valid record.
fn segment_records(bytes: &[u8]) -> (u64, Vec<u64>) {
    let header = cairn_storage::wal::SEGMENT_HEADER_SIZE;
    let rec_header = cairn_storage::wal::RECORD_HEADER_SIZE;
    if bytes.len() < header {
        return (0, Vec::new());
    }
    let start = u64::from_le_bytes(bytes[16..24].try_into().unwrap());
    let (mut at, mut starts, mut vouched) = (header, Vec::new(), 0u64);
    while at + rec_header <= bytes.len() {
        let len = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap()) as usize;
        let durable = u64::from_le_bytes(bytes[at + 16..at + 24].try_into().unwrap());
        if at + rec_header + len > bytes.len() {
            break;
        }
        starts.push(at as u64);
        vouched = durable.saturating_sub(start) + header as u64;
        at += rec_header + len;
    }
    (vouched, starts)
}

/// Everything a database holds that the model knows of, as text: every OID
/// ever handed out (its bytes or its error kind) and every key.
fn snapshot(disk: &SimDisk, model: &Model) -> Result<String, String> {
    let db = Db::open(&db_path(), &opts(disk)).map_err(|e| format!("open: {e}"))?;
    let mut t = db.begin().map_err(|e| format!("begin: {e}"))?;
    let mut out = String::new();
    for oid in &model.ever {
        match t.read(*oid) {
            Ok(b) => out.push_str(&format!(
                "{oid}={:x}\n",
                mix64(b.iter().fold(b.len() as u64, |h, &x| mix64(h ^ u64::from(x))))
            )),
            Err(e) => out.push_str(&format!("{oid}: {e}\n")),
        }
    }
    if let Some(root) = model.acked.root {
        if let Ok(tree) = BTree::open(&mut t, root) {
            for k in model.acked.keys.keys() {
                out.push_str(&format!("{k:?}={:?}\n", tree.get(&mut t, k).map_err(|e| e.to_string())));
            }
        }
    }
    drop(t);
    db.close().map_err(|e| format!("close: {e}"))?;
    Ok(out)
}

fn flip_trials(base: &SimDisk, model: &Model, trials: u64, seed: u64, label: &str, f: &mut Failures) -> FlipCounts {
    let mut c = FlipCounts::default();
    let vol = db_path().join("volume.cairn");
    let segs: Vec<PathBuf> = base
        .file_paths()
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    for trial in 0..trials {
        let mut rng = SimRng::new(mix64(seed ^ mix64(trial)));
        let disk = copy(base);
        let multi = rng.chance(1, 3);
        let flips = if multi { rng.range(2, 9) } else { 1 };
        let (target, file, lo, hi) = if rng.chance(1, 2) || segs.is_empty() {
            let len = base.file_bytes(&vol).map_or(0, |b| b.len() as u64);
            let page = rng.below(len / PAGE_SIZE) as u32;
            let lo = u64::from(page) * PAGE_SIZE;
            (Target::Page(page), vol.clone(), lo, lo + PAGE_SIZE)
        } else {
            let seg = segs[rng.below(segs.len() as u64) as usize].clone();
            let len = base.file_bytes(&seg).map_or(0, |b| b.len() as u64);
            if len == 0 {
                continue;
            }
            let at = rng.below(len);
            // Multiple flips within one record's reach.
            let (lo, hi) = if multi { (at, (at + 64).min(len)) } else { (at, at + 1) };
            (Target::Log(seg.clone()), seg, lo, hi)
        };
        let mut spots = Vec::new();
        for _ in 0..flips {
            let off = rng.range(lo, hi);
            let bit = rng.below(8) as u8;
            disk.flip_bit(&file, off, bit);
            spots.push(format!("{off}.{bit}"));
        }
        c.tried += 1;
        // A flip in the last group commit's records, past what any record
        // vouches for: it must be handled exactly as a torn tail there.
        if let Target::Log(seg) = &target {
            let last_seg = segs.iter().max() == Some(seg);
            let bytes = base.file_bytes(seg).unwrap_or_default();
            let (vouched, starts) = segment_records(&bytes);
            let lowest = lo.min(hi.saturating_sub(1));
            let flipped_lowest = spots
                .iter()
                .filter_map(|s| s.split('.').next()?.parse::<u64>().ok())
                .min()
                .unwrap_or(lowest);
            if last_seg && flipped_lowest >= vouched {
                let cut = starts
                    .iter()
                    .copied()
                    .filter(|&r| r <= flipped_lowest)
                    .max()
                    .unwrap_or(vouched);
                let reference = copy(base);
                let file = reference.open(seg, false).expect("the segment");
                file.set_len(cut).expect("cut the reference's log");
                file.sync_data().expect("sync the reference");
                let outcome = no_panic(|| {
                    let want = snapshot(&reference, model)?;
                    let got = snapshot(&disk, model)?;
                    if got == want {
                        Ok(())
                    } else {
                        Err(format!(
                            "the log was not ended at the damaged record {cut}: {got} vs {want}"
                        ))
                    }
                });
                match outcome {
                    Ok(()) => c.tail_cut += 1,
                    Err(e) => f.add(
                        format!("CAIRN_FLIP_TRIAL={trial}"),
                        format!(
                            "{label}: flip trial {trial} in the unvouched tail of {}: {e}",
                            seg.display()
                        ),
                    ),
                }
                continue;
            }
        }
        match flip_outcome(&disk, model, &target) {
            Ok(FlipOutcome::Open { named }) => {
                c.at_open += 1;
                c.at_open_named += u64::from(named);
            }
            Ok(FlipOutcome::Read) => c.by_read += 1,
            Ok(FlipOutcome::Check) => c.by_check += 1,
            Ok(FlipOutcome::Repaired) => c.repaired += 1,
            Ok(FlipOutcome::Harmless) => c.harmless += 1,
            Err(e) => f.add(
                format!("CAIRN_FLIP_TRIAL={trial}"),
                format!(
                    "{label}: flip trial {trial} in {} (bytes.bits {}): {e}",
                    file.display(),
                    spots.join(",")
                ),
            ),
        }
    }
    c
}

#[test]
fn bit_flips_are_detected() {
    let cfg = config();
    let started = Instant::now();
    let mut f = Failures::new("bit_flips_are_detected", &cfg);
    let trials = cfg.points.map_or(300, |n| n as u64);
    // A cleanly closed database.
    let w = workloads(&cfg)[1];
    let (closed, model, _) = clean_run(&w);
    let closed = copy(&closed);
    let a = flip_trials(&closed, &model, trials, cfg.seed, "closed database", &mut f);
    // One awaiting recovery: a crash late in a workload, synced image.
    let w = workloads(&cfg)[0];
    let (disk, _, run) = clean_run(&w);
    let cands = crash_candidates(&disk.trace(), run.create_end_op);
    let at = cands[cands.len() * 4 / 5];
    let crashed = fresh_disk();
    crashed.set_crash_at(Some(at));
    let mut model = Model::default();
    drop(run_workload(&crashed, &w, &mut model).db);
    let awaiting = crashed.image(ImageKind::Synced, at);
    // The commit in flight, if any, is decided by a clean recovery; the
    // flips are judged against that.
    let which = recover_and_check(&copy(&awaiting), &model).expect("the unflipped image recovers");
    let model = model.resolved(which);
    let b = flip_trials(
        &awaiting,
        &model,
        trials,
        mix64(cfg.seed),
        "database awaiting recovery",
        &mut f,
    );
    for (label, c) in [("closed", &a), ("awaiting recovery", &b)] {
        eprintln!(
            "bit_flips_are_detected ({label}): {} flips tried, detected {} (at open {} of which {} named the page/log file, by a read {}, by check {}), \
             {} repaired from the log, {} harmless (never read), {} in the unvouched last group commit ended the log there as a torn tail would",
            c.tried,
            c.at_open + c.by_read + c.by_check,
            c.at_open,
            c.at_open_named,
            c.by_read,
            c.by_check,
            c.repaired,
            c.harmless,
            c.tail_cut
        );
    }
    eprintln!(
        "bit_flips_are_detected: {} failures, {:.1}s",
        f.list.len(),
        started.elapsed().as_secs_f64()
    );
    f.finish();
}

// ---------------------------------------------------------------------------
// Creating a database

/// A crash anywhere while a database is created (its directory included)
/// and its first commit made: once `Db::create` returned and the commit was
/// acknowledged, the commit survives; before that, `Db::open_or_create`
/// gives a working database.
#[test]
fn crash_while_creating_a_database() {
    let cfg = config();
    let mut f = Failures::new("crash_while_creating_a_database", &cfg);
    let run = |disk: &SimDisk, model: &mut Model| {
        let o = opts(disk);
        let db = Db::create(&db_path(), &o).map_err(|e| e.to_string())?;
        model.created = true;
        let mut t = db.begin().map_err(|e| e.to_string())?;
        let oid = t
            .create(GroupId::DEFAULT, &registry_bytes(1))
            .map_err(|e| e.to_string())?;
        model.ever.insert(oid);
        let mut s = State {
            seq: 1,
            registry: Some(oid),
            ..State::default()
        };
        model.in_flight = Some(s.clone());
        t.commit().map_err(|e| e.to_string())?;
        model.acked = std::mem::take(&mut s);
        model.in_flight = None;
        drop(db);
        Ok::<(), String>(())
    };
    let probe = SimDisk::new();
    probe.make_durable_dir(Path::new("/data"));
    probe.record_trace(true);
    run(&probe, &mut Model::default()).expect("creates without faults");
    let trace = probe.trace();
    let points = match cfg.index {
        Some(i) => vec![i],
        None => crash_candidates(&trace, 0),
    };
    let mut images = 0;
    for &at in &points {
        let disk = SimDisk::new();
        disk.make_durable_dir(Path::new("/data"));
        disk.set_crash_at(Some(at));
        let mut model = Model::default();
        let _ = no_panic(|| run(&disk, &mut model));
        disk.crash_now();
        for kind in ImageKind::ALL {
            images += 1;
            let img = disk.image(kind, at);
            let at_s = format!("CAIRN_CRASH_INDEX={at} CAIRN_CRASH_IMAGE={kind}");
            if model.acked.registry.is_some() || model.in_flight.is_some() {
                if let Err(e) = recover_and_check(&img, &model) {
                    f.add_known(
                        e.contains("no such directory").then_some("dir-not-synced"),
                        at_s,
                        format!("crash at op {at} after Db::create returned, image {kind}: {e}"),
                    );
                }
            } else {
                let r = no_panic(|| {
                    let db = Db::open_or_create(&db_path(), &opts(&img))
                        .map_err(|e| format!("open_or_create after a crash during create: {e}"))?;
                    db.close().map_err(|e| e.to_string())?;
                    let report = check_database(&db_path(), &check_opts(&img));
                    if report.is_ok() {
                        Ok(())
                    } else {
                        Err(format!("check: {:?}", report.problems))
                    }
                });
                if let Err(e) = r {
                    f.add_known(
                        e.contains("already exists").then_some("create-retry"),
                        at_s,
                        format!("crash at op {at} during Db::create, image {kind}: {e}"),
                    );
                }
            }
        }
    }
    eprintln!(
        "crash_while_creating_a_database: {} crash points, {images} images recovered, {} failures",
        points.len(),
        f.list.len()
    );
    f.finish();
}

/// A directory holding only a log left behind by an earlier database: a new
/// database created there must not replay it.
#[test]
fn a_new_database_does_not_replay_a_leftover_log() {
    let disk = fresh_disk();
    let o = opts(&disk);
    let db = Db::create(&db_path(), &o).unwrap();
    let mut t = db.begin().unwrap();
    let mut old = Vec::new();
    for i in 0..20u8 {
        old.push(t.create(GroupId::DEFAULT, &vec![i; 700]).unwrap());
    }
    t.commit().unwrap();
    drop(db); // a crash: the objects are only in the log
    for name in ["MANIFEST", "volume.cairn"] {
        disk.remove_file(&db_path().join(name)).unwrap();
    }
    let r = no_panic(|| {
        // Creating over the old log is refused with an error naming it; once
        // it is removed, the new database holds nothing of the old one. And
        // a leftover log that appears later is refused at open.
        match Db::create(&db_path(), &o) {
            Err(cairn_storage::Error::AlreadyExists { path }) if path.ends_with("wal") => {}
            Err(e) => {
                return Err(format!(
                    "create over a leftover log: expected AlreadyExists naming wal/, got {e}"
                ))
            }
            Ok(_) => return Err("create over a leftover log succeeded".into()),
        }
        let wal_dir = db_path().join("wal");
        let segments = disk.list_dir(&wal_dir).map_err(|e| e.to_string())?;
        let saved: Vec<(std::path::PathBuf, Vec<u8>)> = segments
            .iter()
            .map(|n| {
                let p = wal_dir.join(n);
                let f = disk.open(&p, false).unwrap();
                let mut b = vec![0u8; f.len().unwrap() as usize];
                f.read_exact_at(&mut b, 0).unwrap();
                (p, b)
            })
            .collect();
        for (p, _) in &saved {
            disk.remove_file(p).map_err(|e| e.to_string())?;
        }
        let db = Db::create(&db_path(), &o).map_err(|e| format!("create after removing the old log: {e}"))?;
        let mut t = db.begin().map_err(|e| e.to_string())?;
        for oid in &old {
            if let Ok(b) = t.read(*oid) {
                return Err(format!(
                    "object {oid} of the old database reads {} bytes in the new one",
                    b.len()
                ));
            }
        }
        drop(t);
        db.close().map_err(|e| e.to_string())?;
        let report = check_database(&db_path(), &check_opts(&disk));
        if !report.is_ok() {
            return Err(format!("check: {:?}", report.problems));
        }
        // An old segment copied over the new log's segment of the same name:
        // refused at open.
        let (p, b) = saved.first().ok_or("the old database had no log segment")?;
        let f = if disk.exists(p) {
            disk.open(p, false).map_err(|e| e.to_string())?
        } else {
            disk.open(p, true).map_err(|e| e.to_string())?
        };
        f.set_len(0).map_err(|e| e.to_string())?;
        f.write_all_at(b, 0).map_err(|e| e.to_string())?;
        f.sync_data().map_err(|e| e.to_string())?;
        match Db::open(&db_path(), &o) {
            Err(cairn_storage::Error::ForeignLog { .. }) => Ok(()),
            Err(e) => Err(format!("open with a foreign segment: expected ForeignLog, got {e}")),
            Ok(_) => Err("open with a foreign segment succeeded".into()),
        }
    });
    let mut f = Failures::new("a_new_database_does_not_replay_a_leftover_log", &config());
    if let Err(e) = r {
        f.add_known(Some("leftover-wal"), String::new(), e);
    }
    f.finish();
}
