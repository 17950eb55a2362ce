//! The list-append workload over the typed API, and its history recorder.
//!
//! `keys()` cells, each a `Cell { #[cairn(index)] key, vals: List<u64> }`
//! found through its index with `find_one`, as an application would. Each
//! process (a thread with its own client, or with the shared embedded
//! database) runs transactions of one to four operations, each a read of a
//! key's whole list (`get` or a `view`, chosen at random) or an append of a
//! value unique in the whole run. Every attempt is recorded as a
//! [`Txn`]: its operations as issued and observed, how it ended, and its
//! begin and end on one logical clock shared by all processes (a counter
//! taken before the first request and after the commit or abort returned:
//! real-time order without reading a wall clock).
//!
//! With snapshots on, about one transaction in `n` is a
//! read-only transaction at a snapshot (`Database::begin_read_only`) that
//! reads two to four keys and appends nothing, recorded with
//! [`Txn::snapshot`] set so that the checker also wants its reads to be one
//! committed state.
//!
//! Outcomes: a commit that returned is `Committed`; a deadlock victim or a
//! lock timeout is `Aborted`; a connection lost before the commit was sent
//! is `Aborted` (the server rolls back what it never saw committed), and
//! one lost during the commit is `Unknown` (the checker then wants all or
//! none of its appends). Any other error is a failure of the run, kept
//! with the transaction and reported by the test.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use cairn::{Database, Error, Index, List, Persistent, Ref};

use crate::checker::{Op, Outcome, Txn};

/// The keys of a run: 16, or `CAIRN_ISOLATION_KEYS` (more keys, fewer
/// conflicts: what the clients keep under rights stays theirs longer, so
/// more reads are served from it).
pub fn keys() -> u32 {
    std::env::var("CAIRN_ISOLATION_KEYS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(16)
}

/// One key's list.
#[derive(Persistent, Debug, Clone)]
pub struct Cell {
    #[cairn(index)]
    pub key: u32,
    pub vals: List<u64>,
}

/// The index the workload finds cells by.
pub fn by_key() -> Index<u32, Cell> {
    Index::on("key")
}

/// A small deterministic generator (splitmix64): a run replays from its
/// seed's choices, though not its interleaving.
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// What every process shares: the clock, the unique values, the recorded
/// history and the failures.
#[derive(Default)]
pub struct Recorder {
    clock: AtomicU64,
    next_val: AtomicU64,
    next_id: AtomicUsize,
    /// Transactions committed so far (what a killer counts to choose when to strike).
    pub committed: AtomicUsize,
    /// Conflicts (deadlock victims, lock timeouts) by where they struck:
    /// at a read, at an append, at the commit.
    pub conflicts_at: [AtomicUsize; 3],
    txns: Mutex<Vec<Txn>>,
    failures: Mutex<Vec<String>>,
    torn: Mutex<Vec<String>>,
}

impl Recorder {
    /// A tick of the logical clock.
    pub fn tick(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::SeqCst)
    }

    /// A fresh attempt id, unique in the run.
    pub fn next_id(&self) -> usize {
        self.next_id.fetch_add(1, Ordering::SeqCst)
    }

    /// A fresh value, unique in the run (never 0).
    pub fn next_val(&self) -> u64 {
        self.next_val.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Counts a commit (what a killer counts to choose when to strike).
    pub fn count_commit(&self) {
        self.committed.fetch_add(1, Ordering::SeqCst);
    }

    /// The history recorded, in id order.
    pub fn txns(&self) -> Vec<Txn> {
        let mut t = self.txns.lock().expect("recorder").clone();
        t.sort_by_key(|t| t.id);
        t
    }

    /// Errors that are neither a conflict nor a lost connection.
    pub fn failures(&self) -> Vec<String> {
        self.failures.lock().expect("recorder").clone()
    }

    /// Snapshot reads of an object that could not be decoded (`Stop::Torn`).
    pub fn torn(&self) -> Vec<String> {
        self.torn.lock().expect("recorder").clone()
    }

    fn record(&self, txn: Txn) {
        if txn.outcome == Outcome::Committed {
            self.count_commit();
        }
        self.txns.lock().expect("recorder").push(txn);
    }

    /// Keeps an error that is neither a conflict nor a lost connection: a failure of the run.
    pub fn fail(&self, what: String) {
        self.failures.lock().expect("recorder").push(what);
    }
}

/// Where a process gets its database from: a fixed one (embedded, shared
/// by the threads), or a server whose address may change (a restarted
/// server after a kill).
#[derive(Clone)]
pub enum Source {
    /// One embedded database shared by every process.
    Shared(Arc<Database>),
    /// `Database::connect` to the server at the address held, with these
    /// options' architecture.
    Server {
        addr: Arc<RwLock<String>>,
        arch: cairn::Arch,
    },
}

impl Source {
    /// A database handle for a process, connecting (again) if remote. A
    /// server being restarted is waited for: each refused connect is a
    /// yield, and `attempts_max` of them fail the run.
    pub fn open(&self) -> cairn::Result<Arc<Database>> {
        match self {
            Source::Shared(db) => Ok(db.clone()),
            Source::Server { addr, arch } => {
                let mut last = None;
                for _ in 0..20_000 {
                    let url = format!("cairn://{}", addr.read().expect("addr"));
                    match Database::connect(&url, client_options(*arch)) {
                        Ok(db) => return Ok(Arc::new(db)),
                        Err(e @ Error::Net { .. }) => {
                            last = Some(e);
                            std::thread::sleep(std::time::Duration::from_millis(5));
                        }
                        Err(e) => return Err(e),
                    }
                }
                Err(last.expect("tried"))
            }
        }
    }
}

/// The options a workload client connects with: the defaults a user gets,
/// a short lock timeout so that a stuck wait shows as aborts, not a hang.
pub fn client_options(arch: cairn::Arch) -> cairn::Options {
    let mut o = cairn::Options {
        arch,
        ..cairn::Options::default()
    };
    o.storage.background = false;
    o
}

/// Creates the cells, all empty, in one transaction.
pub fn load(db: &Database) {
    let mut tx = db.begin().expect("begin the load");
    for key in 0..keys() {
        tx.create(Cell { key, vals: List::new() }).expect("create a cell");
    }
    tx.commit().expect("commit the load");
}

/// Reads every key's list in one transaction: the version order.
pub fn final_state(db: &Database) -> BTreeMap<u32, Vec<u64>> {
    let mut tx = db.begin().expect("begin the final read");
    let mut out = BTreeMap::new();
    for key in 0..keys() {
        let cell = tx.find_one(&by_key(), &key).expect("find").expect("every cell exists");
        out.insert(key, tx.get(&cell).expect("read a cell").vals.to_vec());
    }
    tx.commit().expect("commit the final read");
    out
}

/// How an attempt ended when it did not commit.
pub enum Stop {
    /// A conflict (deadlock victim, lock timeout) at a read (0), an
    /// append (1) or the commit (2): aborted, try another.
    Conflict(usize),
    /// The connection is gone; `during_commit` if the commit was in flight.
    Lost { during_commit: bool },
    /// A snapshot read an object it could not decode: it saw a torn image of
    /// it (an engine defect, reproduced by `repro.rs`), kept apart from the
    /// other failures so that a run can tolerate it. The attempt is aborted.
    Torn(String),
    /// Anything else: a defect, recorded as a failure.
    Other(String),
}

fn classify(e: &Error, during_commit: bool) -> Stop {
    classify_at(e, during_commit, if during_commit { 2 } else { 0 })
}

/// A conflict struck at `at` (0: a read, 1: a change, 2: the commit), a lost connection, or
/// anything else.
pub fn classify_at(e: &Error, during_commit: bool, at: usize) -> Stop {
    match e {
        Error::Deadlock { .. } | Error::LockTimeout { .. } => Stop::Conflict(at),
        Error::Net { .. } => Stop::Lost { during_commit },
        other => Stop::Other(other.to_string()),
    }
}

/// Runs `txns_max` transactions as process `process`, recording each; with
/// `snapshot_one_in` = `Some(n)`, about one in `n` of them is a read-only
/// transaction at a snapshot.
pub fn run_process(
    source: &Source,
    rec: &Recorder,
    process: usize,
    seed: u64,
    txns_max: usize,
    snapshot_one_in: Option<u64>,
) {
    let mut rng = Rng::new(seed ^ (process as u64).wrapping_mul(0x2545_f491_4f6c_dd1d));
    let mut db = match source.open() {
        Ok(db) => db,
        Err(e) => return rec.fail(format!("process {process}: cannot open: {e}")),
    };
    // Cells found so far, by key: half the time a transaction follows
    // the reference it holds instead of looking the key up (as a program
    // navigating its objects does), so its reads come from what the
    // client keeps under rights, snapshots' too, and not only through
    // the index.
    let mut refs: BTreeMap<u32, Ref<Cell>> = BTreeMap::new();
    for _ in 0..txns_max {
        let snapshot = snapshot_one_in.is_some_and(|n| rng.below(n) == 0);
        let mut ops = if snapshot {
            snapshot_plan(&mut rng)
        } else {
            plan(&mut rng, rec)
        };
        let id = rec.next_id();
        let begin = rec.tick();
        let result = attempt(&db, &mut ops, &mut rng, &mut refs, snapshot);
        let end = rec.tick();
        let outcome = match result {
            Ok(()) => Outcome::Committed,
            Err(Stop::Conflict(at)) => {
                rec.conflicts_at[at].fetch_add(1, Ordering::Relaxed);
                Outcome::Aborted
            }
            Err(Stop::Lost { during_commit }) => {
                match source.open() {
                    Ok(again) => db = again,
                    Err(e) => rec.fail(format!("process {process}: cannot reconnect: {e}")),
                }
                if during_commit {
                    Outcome::Unknown
                } else {
                    Outcome::Aborted
                }
            }
            Err(Stop::Torn(msg)) => {
                rec.torn
                    .lock()
                    .expect("recorder")
                    .push(format!("T{id} (process {process}): {msg}"));
                Outcome::Aborted
            }
            Err(Stop::Other(msg)) => {
                let what = if snapshot { ", a snapshot" } else { "" };
                rec.fail(format!("T{id} (process {process}{what}): {msg}"));
                Outcome::Aborted
            }
        };
        rec.record(Txn {
            id,
            process,
            ops,
            outcome,
            begin,
            end,
            snapshot,
        });
    }
}

/// One to four operations on random keys, appends of fresh unique values.
fn plan(rng: &mut Rng, rec: &Recorder) -> Vec<Op> {
    let n = 1 + rng.below(4) as usize;
    (0..n)
        .map(|_| {
            let key = rng.below(keys() as u64) as u32;
            if rng.below(2) == 0 {
                Op::Read { key, seen: None }
            } else {
                Op::Append {
                    key,
                    val: rec.next_val(),
                }
            }
        })
        .collect()
}

/// Two to four reads of random keys: a snapshot transaction's plan.
fn snapshot_plan(rng: &mut Rng) -> Vec<Op> {
    let n = 2 + rng.below(3) as usize;
    (0..n)
        .map(|_| Op::Read {
            key: rng.below(keys() as u64) as u32,
            seen: None,
        })
        .collect()
}

/// Runs one transaction (read-only at a snapshot with `snapshot`); reads fill in what they saw.
fn attempt(
    db: &Database,
    ops: &mut [Op],
    rng: &mut Rng,
    refs: &mut BTreeMap<u32, Ref<Cell>>,
    snapshot: bool,
) -> Result<(), Stop> {
    let begun = if snapshot { db.begin_read_only() } else { db.begin() };
    let mut tx = begun.map_err(|e| classify(&e, false))?;
    let index = by_key();
    for op in ops.iter_mut() {
        let key = match op {
            Op::Read { key, .. } | Op::Append { key, .. } => *key,
        };
        let held = refs.get(&key).filter(|_| rng.below(2) == 0).cloned();
        let cell = match held {
            Some(cell) => cell,
            // An append's lookup is, half the time, one for update (its
            // leaf under U where the tree is locked by page).
            None => match if matches!(op, Op::Append { .. }) && rng.below(2) == 0 {
                tx.find_to_append(&index, &[key]).map(|mut f| f.remove(0))
            } else {
                tx.find_one(&index, &key)
            } {
                Ok(Some(cell)) => {
                    refs.insert(key, cell.clone());
                    cell
                }
                Ok(None) => return Err(Stop::Other(format!("key {key} not found"))),
                Err(e) => return Err(classify(&e, false)),
            },
        };
        // A snapshot's object that cannot be decoded is torn (`Stop::Torn`).
        let read_err = |e: Error| match e {
            Error::Decode { .. } if snapshot => Stop::Torn(e.to_string()),
            e => classify(&e, false),
        };
        match op {
            Op::Read { seen, .. } => {
                let vals = if rng.below(2) == 0 {
                    tx.get(&cell).map_err(read_err)?.vals.to_vec()
                } else {
                    let view = tx.view(&cell).map_err(read_err)?;
                    let vals = view.get().vals().to_vec();
                    vals.map_err(|e| {
                        let msg = format!("a view of key {key}: {e}");
                        if snapshot {
                            Stop::Torn(msg)
                        } else {
                            Stop::Other(msg)
                        }
                    })?
                };
                *seen = Some(vals);
            }
            Op::Append { val, .. } => {
                // Half as an append that commutes (kept under an append
                // lock where objects are locked), half read and rewritten.
                let val = *val;
                let done = if rng.below(2) == 0 {
                    tx.append(&cell, "vals", &val)
                } else {
                    tx.update(&cell, |c| c.vals.push(val))
                };
                done.map_err(|e| classify(&e, false))?;
            }
        }
    }
    tx.commit().map_err(|e| classify(&e, true))
}
