//! The phantom workload: range scans of an index while other transactions
//! insert and delete objects whose keys fall inside the ranges, at their
//! edges and just outside them — what key-range locking must keep
//! serializable — recorded so that the list-append checker can judge it.
//!
//! **The data.** `SLOTS` index keys (slots). Each [`Row`] has an indexed
//! `slot` and a value unique in the run; each slot also has a [`Ledger`], an
//! object listing the slot's events in commit order: `ins(v)` when a row
//! of value `v` is created there, `del(d)` when its oldest row is deleted
//! (`d` another value unique in the run, naming the delete rather than the
//! row — a row an aborted delete chose is chosen again by the next one, and
//! every event must be appended once). An insert
//! creates the row and appends to the ledger in one transaction; a delete
//! appends to the ledger and deletes the slot's oldest row, and only while
//! the slot holds two or more (so no slot is ever empty, and its rows are
//! always a run of consecutive inserts: first in, first out). The load puts
//! one row in every slot.
//!
//! **The scans** (`find_range` over a few neighbouring slots, or `find`
//! of one slot's key half the time a scan covers one slot) read the
//! index only: they learn each row by its OID, never by reading it, so
//! that nothing but the index's key-range (or page) locks stands between
//! them and a concurrent insert or delete. A scan often shares its
//! transaction with inserts and deletes in or next to its range (but see
//! below), and sometimes scans the same range again at the end. Other
//! transactions insert and delete in random slots: inside the ranges being
//! scanned, at their edges and next to them.
//!
//! **The history.** Each slot is a key of the list-append model and its
//! ledger is the version order (the final state). An insert or delete is
//! an append of its event, a delete's look at the ledger a read of it.
//! A scan is a read of every slot in its range: the rows it found in a
//! slot are, first in first out and never empty, the rows the slot held
//! after exactly one prefix of its events — the version the scan read. A
//! phantom (a scan that misses an insert committed before it, or sees one
//! committed after it) is then an ordinary item anomaly: an anti-dependency
//! cycle (G-single, G2), a stale read, or an inconsistent second scan
//! (`Internal`). Rows a scan found that no slot state ever held make a read
//! that is no prefix (`IncompatibleOrder`). Things the model cannot say
//! (a row outside the range scanned, an OID nobody created, a second scan
//! that differs from the first by more than the transaction's own
//! changes, an index that disagrees with the ledgers at the end) are
//! reported as failures of the run.
//!
//! **Inserts in a scanner's own range.** A transaction that scanned a
//! range and then inserts into it (or just above it) splits a gap it holds:
//! the part below its new entry must stay its own, or another
//! transaction's insert just below it is a phantom (`repro.rs`, 3, found by
//! these runs and fixed: the new entry's gap inherits the scanner's S).
//! The runs make such inserts ([`Mode::own_range_inserts`]).
//!
//! **Snapshot scanners** (`Mode::snapshot_one_in`): some transactions only
//! scan, read-only at a snapshot; they hold no lock, and each must still
//! have read one committed state. On a server a lookup of one slot is kept
//! under rights on its leaves where the server grants them (a snapshot's
//! too, when the leaves it read are the committed ones), so rows appear
//! and vanish under rights that inserts and deletes must call back.
//!
//! **Unlocked scans** (a negative control): each scan runs in a read-only
//! snapshot of its own, begun just for it, so nothing holds its range until
//! its transaction commits — a simulation of an engine without phantom
//! protection, recorded as if the scan were part of the transaction. Its
//! histories must show anomalies. (Repeated scans follow only scans with no
//! change in between there, as a snapshot does not see its transaction's
//! own changes.)

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::ops::Bound;
use std::sync::Mutex;

use cairn::{Database, Error, Index, List, Oid, Persistent, Ref};

use crate::checker::{History, Op, Outcome, Txn};
use crate::workload::{classify_at, Recorder, Rng, Stop};

/// The slots (index keys) of a run.
pub const SLOTS: u32 = 32;

/// The widest range a scan covers, in slots.
const SCAN_WIDTH_MAX: u64 = 6;

/// A row: an index entry at `slot`, the value unique in the run.
#[derive(Persistent, Debug, Clone)]
pub struct Row {
    #[cairn(index)]
    pub slot: u32,
    pub val: u64,
}

/// A slot's events in commit order (`ins`, `del`): its version order.
#[derive(Persistent, Debug, Clone)]
pub struct Ledger {
    pub slot: u32,
    pub events: List<u64>,
}

/// The index scans go through.
pub fn by_slot() -> Index<u32, Row> {
    Index::on("slot")
}

/// The event of creating the row of value `v`.
pub fn ins(v: u64) -> u64 {
    2 * v
}

/// The event of the delete named `d` (of its slot's oldest row).
pub fn del(d: u64) -> u64 {
    2 * d + 1
}

/// An OID as a number (what the history records of a row a scan found).
pub fn pack(oid: Oid) -> u128 {
    let mut b = [0u8; 16];
    b[..Oid::ENCODED_SIZE].copy_from_slice(&oid.to_bytes());
    u128::from_le_bytes(b)
}

/// The rows a slot holds after `events`, oldest first.
pub fn live(events: &[u64]) -> Vec<u64> {
    let mut rows = VecDeque::new();
    for &e in events {
        if e % 2 == 0 {
            rows.push_back(e / 2);
        } else {
            rows.pop_front();
        }
    }
    rows.into()
}

/// One step of a phantom transaction, as issued and as observed.
#[derive(Clone, Debug)]
pub enum Step {
    /// `find_range` over slots `lo..=hi`: the OIDs it returned.
    Scan { lo: u32, hi: u32, seen: Option<Vec<u128>> },
    /// Create a row of value `val` in `slot` (its OID once created) and log `ins(val)`.
    Insert { slot: u32, val: u64, oid: Option<u128> },
    /// Read `slot`'s ledger (`ledger`, as found) and, if it holds two rows or more, log
    /// `del(name)` and delete the oldest row (`val`).
    Delete {
        slot: u32,
        name: u64,
        ledger: Option<Vec<u64>>,
        val: Option<u64>,
    },
}

/// One phantom transaction attempt; times as in [`Txn`].
#[derive(Clone, Debug)]
pub struct Attempt {
    pub id: usize,
    pub process: usize,
    pub steps: Vec<Step>,
    pub outcome: Outcome,
    pub begin: u64,
    pub end: u64,
    /// Read-only at a snapshot (`Mode::snapshot_one_in`).
    pub snapshot: bool,
}

/// What the processes of a phantom run share: the recorder (clock, ids,
/// values, conflicts, failures), the attempts, each row's OID by value (for
/// deletes) and the ledgers' OIDs by slot.
pub struct Phantoms {
    pub rec: Recorder,
    attempts: Mutex<Vec<Attempt>>,
    rows: Mutex<HashMap<u64, Oid>>,
    ledgers: Vec<Oid>,
}

impl Phantoms {
    /// Creates a row and a ledger in every slot, in one transaction recorded as the first attempt.
    pub fn load(db: &Database) -> Phantoms {
        let rec = Recorder::default();
        let id = rec.next_id();
        let begin = rec.tick();
        let mut tx = db.begin().expect("begin the load");
        let (mut steps, mut rows, mut ledgers) = (Vec::new(), HashMap::new(), Vec::new());
        for slot in 0..SLOTS {
            let val = rec.next_val();
            let row = tx.create(Row { slot, val }).expect("create a row");
            rows.insert(val, row.oid());
            let mut events = List::new();
            events.push(ins(val));
            ledgers.push(tx.create(Ledger { slot, events }).expect("create a ledger").oid());
            steps.push(Step::Insert {
                slot,
                val,
                oid: Some(pack(row.oid())),
            });
        }
        tx.commit().expect("commit the load");
        let end = rec.tick();
        rec.count_commit();
        let load = Attempt {
            id,
            process: 0,
            steps,
            outcome: Outcome::Committed,
            begin,
            end,
            snapshot: false,
        };
        Phantoms {
            rec,
            attempts: Mutex::new(vec![load]),
            rows: Mutex::new(rows),
            ledgers,
        }
    }

    /// Every attempt recorded, in id order.
    pub fn attempts(&self) -> Vec<Attempt> {
        let mut a = self.attempts.lock().expect("attempts").clone();
        a.sort_by_key(|a| a.id);
        a
    }

    fn ledger(&self, slot: u32) -> Ref<Ledger> {
        Ref::from_oid(self.ledgers[slot as usize])
    }
}

/// How a phantom run's transactions are made.
#[derive(Clone, Copy, Debug, Default)]
pub struct Mode {
    /// Scans are unlocked (module docs): the negative control.
    pub unlocked: bool,
    /// A transaction that scanned a range may insert into it or just above it (how the key-range
    /// defect of `repro.rs`, 3, let phantoms in before it was fixed); without it, a scanner's
    /// inserts go elsewhere (its deletes go anywhere).
    pub own_range_inserts: bool,
    /// About one transaction in this many is read-only at a snapshot
    /// (`Database::begin_read_only`) and only scans: its scans hold no
    /// lock and must still see one committed state.
    pub snapshot_one_in: Option<u64>,
}

/// Runs `txns_max` phantom transactions as process `process` on `db`, recording each.
pub fn run_process(db: &Database, ph: &Phantoms, process: usize, seed: u64, txns_max: usize, mode: Mode) {
    let mut rng = Rng::new(seed ^ (process as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    for _ in 0..txns_max {
        let snapshot = mode.snapshot_one_in.is_some_and(|n| rng.below(n) == 0);
        let mut steps = if snapshot {
            snapshot_plan(&mut rng)
        } else {
            plan(&mut rng, &ph.rec, mode)
        };
        let id = ph.rec.next_id();
        let begin = ph.rec.tick();
        let result = attempt(db, ph, &mut steps, &mut rng, mode.unlocked, snapshot);
        let end = ph.rec.tick();
        let outcome = match result {
            Ok(()) => {
                ph.rec.count_commit();
                Outcome::Committed
            }
            Err(Stop::Conflict(at)) => {
                ph.rec.conflicts_at[at].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                Outcome::Aborted
            }
            Err(Stop::Lost { .. }) => {
                ph.rec.fail(format!(
                    "T{id} (process {process}): an embedded database lost its connection"
                ));
                Outcome::Aborted
            }
            Err(Stop::Other(msg) | Stop::Torn(msg)) => {
                ph.rec.fail(format!("T{id} (process {process}): {msg}"));
                Outcome::Aborted
            }
        };
        let a = Attempt {
            id,
            process,
            steps,
            outcome,
            begin,
            end,
            snapshot,
        };
        ph.attempts.lock().expect("attempts").push(a);
    }
}

/// A transaction: most often a scan of one to `SCAN_WIDTH_MAX` slots, then up to two inserts or
/// deletes — half of them at a range's edges or just outside it (`Mode` says where inserts may
/// go) — and sometimes the same scan again (unlocked, only after no change); otherwise one or
/// two inserts or deletes anywhere.
fn plan(rng: &mut Rng, rec: &Recorder, mode: Mode) -> Vec<Step> {
    let mut steps = Vec::new();
    let scan = (rng.below(3) != 0).then(|| {
        let lo = rng.below(u64::from(SLOTS)) as u32;
        let hi = (lo + rng.below(SCAN_WIDTH_MAX) as u32).min(SLOTS - 1);
        (lo, hi)
    });
    let writes = match scan {
        Some((lo, hi)) => {
            steps.push(Step::Scan { lo, hi, seen: None });
            rng.below(3)
        }
        None => 1 + rng.below(2),
    };
    for _ in 0..writes {
        let slot = match scan {
            Some((lo, hi)) if rng.below(2) == 0 => near(rng, lo, hi),
            _ => rng.below(u64::from(SLOTS)) as u32,
        };
        let insert = rng.below(2) == 0;
        let slot = match scan {
            Some((lo, hi)) if insert && !mode.own_range_inserts => away(rng, slot, lo, hi),
            _ => slot,
        };
        steps.push(if insert {
            Step::Insert {
                slot,
                val: rec.next_val(),
                oid: None,
            }
        } else {
            Step::Delete {
                slot,
                name: rec.next_val(),
                ledger: None,
                val: None,
            }
        });
    }
    if let Some((lo, hi)) = scan.filter(|_| rng.below(3) == 0 && !(mode.unlocked && writes > 0)) {
        steps.push(Step::Scan { lo, hi, seen: None });
    }
    steps
}

/// One to three scans of random ranges, some of one slot: a snapshot
/// transaction's plan.
fn snapshot_plan(rng: &mut Rng) -> Vec<Step> {
    (0..1 + rng.below(3))
        .map(|_| {
            let lo = rng.below(u64::from(SLOTS)) as u32;
            let hi = (lo + rng.below(SCAN_WIDTH_MAX) as u32).min(SLOTS - 1);
            Step::Scan { lo, hi, seen: None }
        })
        .collect()
}

/// A slot at an edge of `lo..=hi`, just outside it, or inside it.
fn near(rng: &mut Rng, lo: u32, hi: u32) -> u32 {
    match rng.below(5) {
        0 => lo.saturating_sub(1),
        1 => lo,
        2 => hi,
        3 => (hi + 1).min(SLOTS - 1),
        _ => lo + rng.below(u64::from(hi - lo + 1)) as u32,
    }
}

/// `slot` if it lies outside `lo..=hi + 1`, else a random slot that does: where a transaction
/// that scanned `lo..=hi` may insert without meeting defect 3 of `repro.rs`.
fn away(rng: &mut Rng, slot: u32, lo: u32, hi: u32) -> u32 {
    let mut slot = slot;
    while (lo..=hi + 1).contains(&slot) {
        slot = rng.below(u64::from(SLOTS)) as u32;
    }
    slot
}

/// Runs one phantom transaction (its scans unlocked with `unlocked`; read-only at a snapshot
/// with `snapshot`); its steps fill in what they saw and did. A scan of one slot is a lookup of
/// its key half the time (`find`: on a server, answered with the rows and kept under rights on
/// the leaves where the server grants them), else a range.
fn attempt(
    db: &Database,
    ph: &Phantoms,
    steps: &mut [Step],
    rng: &mut Rng,
    unlocked: bool,
    snapshot: bool,
) -> Result<(), Stop> {
    let at = |n: usize| move |e: Error| classify_at(&e, false, n);
    let mut tx = if snapshot { db.begin_read_only() } else { db.begin() }.map_err(at(0))?;
    for step in steps.iter_mut() {
        match step {
            Step::Scan { lo, hi, seen } => {
                let range = (Bound::Included(&*lo), Bound::Included(&*hi));
                let lookup = lo == hi && rng.below(2) == 0;
                let read = |tx: &mut cairn::Transaction| match lookup {
                    true => tx.find(&by_slot(), &*lo),
                    false => tx.find_range(&by_slot(), range.0, range.1),
                };
                let found = if unlocked {
                    let mut ro = db.begin_read_only().map_err(at(0))?;
                    let found = read(&mut ro);
                    ro.commit().map_err(at(0))?;
                    found
                } else {
                    read(&mut tx)
                };
                *seen = Some(found.map_err(at(0))?.iter().map(|r| pack(r.oid())).collect());
            }
            Step::Insert { slot, val, oid } => {
                let (slot, val) = (*slot, *val);
                let row = tx.create(Row { slot, val }).map_err(at(1))?;
                *oid = Some(pack(row.oid()));
                ph.rows.lock().expect("rows").insert(val, row.oid());
                tx.update(&ph.ledger(slot), |l| l.events.push(ins(val)))
                    .map_err(at(1))?;
            }
            Step::Delete {
                slot,
                name,
                ledger,
                val,
            } => {
                // X on the ledger at once: reading it first and upgrading would deadlock two
                // deleters of one slot every time.
                let (mut events, mut oldest) = (Vec::new(), None);
                tx.update(&ph.ledger(*slot), |l| {
                    events = l.events.to_vec();
                    let rows = live(&events);
                    if rows.len() >= 2 {
                        oldest = Some(rows[0]);
                        l.events.push(del(*name));
                    }
                })
                .map_err(at(1))?;
                *ledger = Some(events);
                if let Some(v) = oldest {
                    let oid = ph.rows.lock().expect("rows").get(&v).copied();
                    let oid = oid.ok_or_else(|| Stop::Other(format!("no row of value {v} was ever created")))?;
                    tx.delete(&Ref::<Row>::from_oid(oid)).map_err(at(1))?;
                    *val = Some(v);
                }
            }
        }
    }
    tx.commit().map_err(|e| classify_at(&e, true, 2))
}

/// Reads the final state on a quiet database: every slot's ledger (the version order), and
/// whether the index holds exactly the rows the ledgers say (failures if not).
pub fn final_state(db: &Database, ph: &Phantoms) -> (BTreeMap<u32, Vec<u64>>, Vec<String>) {
    let mut tx = db.begin().expect("begin the final read");
    let (mut ledgers, mut problems) = (BTreeMap::new(), Vec::new());
    for slot in 0..SLOTS {
        let events = tx.get(&ph.ledger(slot)).expect("read a ledger").events.to_vec();
        let mut want = live(&events);
        want.sort_unstable();
        let mut have = Vec::new();
        for r in tx.find(&by_slot(), &slot).expect("find a slot's rows") {
            let row = tx.get(&r).expect("read a row");
            if row.slot != slot {
                problems.push(format!(
                    "the index has row {} of slot {} at slot {slot}",
                    row.val, row.slot
                ));
            }
            have.push(row.val);
        }
        have.sort_unstable();
        if have != want {
            problems.push(format!(
                "slot {slot}: the index holds rows {have:?}, its ledger says {want:?}"
            ));
        }
        ledgers.insert(slot, events);
    }
    tx.commit().expect("commit the final read");
    (ledgers, problems)
}

/// What the committed attempts did: scans (and how many repeated an earlier one), rows seen,
/// inserts, deletes (and how many found too few rows to delete).
pub fn counts(attempts: &[Attempt]) -> String {
    let (mut scans, mut again, mut rows, mut inserts, mut deletes, mut skipped) = (0, 0, 0, 0, 0, 0);
    // The load, the first attempt, is not counted.
    for a in attempts.iter().skip(1).filter(|a| a.outcome == Outcome::Committed) {
        let mut ranges = BTreeSet::new();
        for step in &a.steps {
            match step {
                Step::Scan { lo, hi, seen } => {
                    scans += 1;
                    again += usize::from(!ranges.insert((*lo, *hi)));
                    rows += seen.as_ref().map_or(0, Vec::len);
                }
                Step::Insert { .. } => inserts += 1,
                Step::Delete { val: Some(_), .. } => deletes += 1,
                Step::Delete { val: None, .. } => skipped += 1,
            }
        }
    }
    format!(
        "committed: {scans} scans ({again} repeated) finding {rows} rows, {inserts} inserts, {deletes} deletes ({skipped} more found too few rows)"
    )
}

/// Who created each OID: its slot and value, from a committed creator if there is one (an
/// aborted creation may have handed out the same OID before).
fn creations(attempts: &[Attempt]) -> HashMap<u128, (u32, u64)> {
    let mut out: HashMap<u128, (u32, u64, bool)> = HashMap::new();
    for a in attempts {
        let committed = a.outcome == Outcome::Committed;
        for step in &a.steps {
            let Step::Insert {
                slot,
                val,
                oid: Some(oid),
            } = *step
            else {
                continue;
            };
            let keep = out.get(&oid).is_none_or(|&(_, _, c)| committed && !c);
            if keep {
                out.insert(oid, (slot, val, committed));
            }
        }
    }
    out.into_iter().map(|(oid, (s, v, _))| (oid, (s, v))).collect()
}

/// Per slot: the length of the prefix of its events after which it held each set of rows
/// (values sorted), the first such prefix if a set recurs.
fn states(ledgers: &BTreeMap<u32, Vec<u64>>) -> HashMap<u32, HashMap<Vec<u64>, usize>> {
    let mut out = HashMap::new();
    for (&slot, events) in ledgers {
        let mut at = HashMap::new();
        for n in 0..=events.len() {
            let mut rows = live(&events[..n]);
            rows.sort_unstable();
            at.entry(rows).or_insert(n);
        }
        out.insert(slot, at);
    }
    out
}

/// Turns a phantom run into a list-append history (module docs), with the failures the model
/// cannot express.
pub fn to_history(attempts: &[Attempt], ledgers: BTreeMap<u32, Vec<u64>>) -> (History, Vec<String>) {
    let created = creations(attempts);
    let states = states(&ledgers);
    let mut problems = Vec::new();
    let mut txns = Vec::new();
    for a in attempts {
        let mut tr = Translation {
            created: &created,
            states: &states,
            ledgers: &ledgers,
            id: a.id,
            ops: Vec::new(),
            problems: &mut problems,
        };
        for step in &a.steps {
            tr.step(step);
        }
        let ops = tr.ops;
        if a.outcome == Outcome::Committed {
            check_repeated_scans(a, &created, &mut problems);
        }
        txns.push(Txn {
            id: a.id,
            process: a.process,
            ops,
            outcome: a.outcome,
            begin: a.begin,
            end: a.end,
            snapshot: a.snapshot,
        });
    }
    let history = History {
        txns,
        final_state: ledgers,
    };
    (history, problems)
}

/// The translation of one attempt's steps into list-append operations.
struct Translation<'a> {
    created: &'a HashMap<u128, (u32, u64)>,
    states: &'a HashMap<u32, HashMap<Vec<u64>, usize>>,
    ledgers: &'a BTreeMap<u32, Vec<u64>>,
    id: usize,
    ops: Vec<Op>,
    problems: &'a mut Vec<String>,
}

impl Translation<'_> {
    /// Appends the operations of one step: a scan's reads, an insert's append, a delete's read of
    /// the ledger and (if it deleted) its append.
    fn step(&mut self, step: &Step) {
        match step {
            Step::Scan {
                lo,
                hi,
                seen: Some(seen),
            } => self.scan(*lo, *hi, seen),
            Step::Scan { seen: None, .. } => {}
            Step::Insert { slot, val, .. } => self.ops.push(Op::Append {
                key: *slot,
                val: ins(*val),
            }),
            Step::Delete {
                slot,
                name,
                ledger,
                val,
            } => {
                if let Some(events) = ledger {
                    self.ops.push(Op::Read {
                        key: *slot,
                        seen: Some(events.clone()),
                    });
                }
                if val.is_some() {
                    self.ops.push(Op::Append {
                        key: *slot,
                        val: del(*name),
                    });
                }
            }
        }
    }

    /// A scan of `lo..=hi` that found `seen`: a read of each slot in the range.
    fn scan(&mut self, lo: u32, hi: u32, seen: &[u128]) {
        let rows = rows_by_slot(self.created, seen, lo, hi, self.id, self.problems);
        for slot in lo..=hi {
            let mut rows = rows.get(&slot).cloned().unwrap_or_default();
            rows.sort_unstable();
            let events: &[u64] = self.ledgers.get(&slot).map_or(&[], Vec::as_slice);
            let list = match self.states.get(&slot).and_then(|s| s.get(&rows)) {
                Some(&n) => events[..n].to_vec(),
                // A set of rows the slot never held: their inserts alone, which are no prefix of
                // its events (a prefix of inserts only would be a state it held).
                None => rows.iter().map(|&v| ins(v)).collect(),
            };
            self.ops.push(Op::Read {
                key: slot,
                seen: Some(list),
            });
        }
    }
}

/// The values of the rows a scan of `lo..=hi` found, by slot; an OID nobody created or a row
/// outside the range is a problem.
fn rows_by_slot(
    created: &HashMap<u128, (u32, u64)>,
    seen: &[u128],
    lo: u32,
    hi: u32,
    id: usize,
    problems: &mut Vec<String>,
) -> BTreeMap<u32, Vec<u64>> {
    let mut out: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    for oid in seen {
        match created.get(oid) {
            Some(&(slot, val)) if (lo..=hi).contains(&slot) => out.entry(slot).or_default().push(val),
            Some(&(slot, val)) => problems.push(format!(
                "T{id} scanned slots {lo}..={hi} and found row {val} of slot {slot}"
            )),
            None => problems.push(format!(
                "T{id} scanned slots {lo}..={hi} and found OID {oid:#x} nobody created"
            )),
        }
    }
    out
}

/// A committed attempt that scanned one range twice must have found the same rows the second
/// time, but for its own inserts and deletes in the range between the two.
fn check_repeated_scans(a: &Attempt, created: &HashMap<u128, (u32, u64)>, problems: &mut Vec<String>) {
    let vals =
        |seen: &[u128]| -> BTreeSet<u64> { seen.iter().filter_map(|o| created.get(o)).map(|&(_, v)| v).collect() };
    let mut first: HashMap<(u32, u32), BTreeSet<u64>> = HashMap::new();
    for step in &a.steps {
        match step {
            Step::Scan {
                lo,
                hi,
                seen: Some(seen),
            } => {
                let now = vals(seen);
                match first.get(&(*lo, *hi)) {
                    Some(want) if *want != now => problems.push(format!(
                        "T{} scanned slots {lo}..={hi} twice: {want:?}, then {now:?}",
                        a.id
                    )),
                    Some(_) => {}
                    None => {
                        first.insert((*lo, *hi), now);
                    }
                }
            }
            // Own changes since an earlier scan of a range holding them are expected.
            Step::Insert { slot, val, .. } => first
                .iter_mut()
                .filter(|((lo, hi), _)| (*lo..=*hi).contains(slot))
                .for_each(|(_, rows)| {
                    rows.insert(*val);
                }),
            Step::Delete { slot, val: Some(v), .. } => first
                .iter_mut()
                .filter(|((lo, hi), _)| (*lo..=*hi).contains(slot))
                .for_each(|(_, rows)| {
                    rows.remove(v);
                }),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::{check, Kind};

    /// The load: row `k + 1` (OID `100 + k + 1`) in each of slots `0..4`.
    fn load() -> Attempt {
        let steps = (0..4)
            .map(|k| Step::Insert {
                slot: k,
                val: u64::from(k) + 1,
                oid: Some(101 + u128::from(k)),
            })
            .collect();
        attempt(0, (0, 1), steps)
    }

    fn attempt(id: usize, span: (u64, u64), steps: Vec<Step>) -> Attempt {
        Attempt {
            id,
            process: id,
            steps,
            outcome: Outcome::Committed,
            begin: span.0,
            end: span.1,
            snapshot: false,
        }
    }

    fn scan(lo: u32, hi: u32, seen: &[u128]) -> Step {
        Step::Scan {
            lo,
            hi,
            seen: Some(seen.to_vec()),
        }
    }

    fn insert(slot: u32, val: u64) -> Step {
        Step::Insert {
            slot,
            val,
            oid: Some(100 + u128::from(val)),
        }
    }

    /// Ledgers: the load's insert in each slot, then `more` events per slot.
    fn ledgers(more: &[(u32, &[u64])]) -> BTreeMap<u32, Vec<u64>> {
        let mut out: BTreeMap<u32, Vec<u64>> = (0..4).map(|k| (k, vec![ins(u64::from(k) + 1)])).collect();
        for &(slot, events) in more {
            out.entry(slot).or_default().extend_from_slice(events);
        }
        out
    }

    fn kinds(h: &History) -> BTreeSet<Kind> {
        check(h).anomalies.into_iter().map(|a| a.kind).collect()
    }

    #[test]
    fn a_phantom_between_two_scans_of_one_range() {
        // T2 inserts row 5 into slot 2 while T1 scans slots 0..=3 twice.
        let attempts = vec![
            load(),
            attempt(
                1,
                (2, 9),
                vec![
                    scan(0, 3, &[101, 102, 103, 104]),
                    scan(0, 3, &[101, 102, 103, 105, 104]),
                ],
            ),
            attempt(2, (3, 4), vec![insert(2, 5)]),
        ];
        let (h, problems) = to_history(&attempts, ledgers(&[(2, &[ins(5)])]));
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("twice"), "{problems:?}");
        let found = kinds(&h);
        assert!(found.contains(&Kind::Internal), "{found:?}");
    }

    #[test]
    fn predicate_write_skew_is_g2() {
        // T1 scans slots 0..=1 and inserts into slot 2; T2 scans slots 2..=3 and inserts into
        // slot 1: each missed the other's insert into its range.
        let attempts = vec![
            load(),
            attempt(1, (2, 9), vec![scan(0, 1, &[101, 102]), insert(2, 5)]),
            attempt(2, (3, 8), vec![scan(2, 3, &[103, 104]), insert(1, 6)]),
        ];
        let (h, problems) = to_history(&attempts, ledgers(&[(1, &[ins(6)]), (2, &[ins(5)])]));
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(kinds(&h), BTreeSet::from([Kind::G2Item]));
    }

    #[test]
    fn a_scan_missing_a_committed_delete_is_caught() {
        // T1 deleted row 1 from slot 0 (after inserting row 5 there) and returned; T2, which
        // began later, still found row 1.
        let attempts = vec![
            load(),
            attempt(1, (2, 3), vec![insert(0, 5)]),
            attempt(
                2,
                (4, 5),
                vec![Step::Delete {
                    slot: 0,
                    name: 6,
                    ledger: Some(vec![ins(1), ins(5)]),
                    val: Some(1),
                }],
            ),
            attempt(3, (6, 7), vec![scan(0, 0, &[101, 105])]),
        ];
        let (h, problems) = to_history(&attempts, ledgers(&[(0, &[ins(5), del(6)])]));
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(kinds(&h), BTreeSet::from([Kind::RealTime]));
    }

    #[test]
    fn rows_a_slot_never_held_together_and_rows_outside_the_range() {
        // Slot 0 held {1}, {1,5}, {5}, {5,7}: never {1,7}.
        let attempts = vec![
            load(),
            attempt(1, (2, 3), vec![insert(0, 5)]),
            attempt(2, (4, 5), vec![insert(0, 7)]),
            attempt(3, (6, 7), vec![scan(0, 0, &[101, 107]), scan(1, 1, &[102, 103])]),
        ];
        let (h, problems) = to_history(&attempts, ledgers(&[(0, &[ins(5), del(6), ins(7)])]));
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("found row 3 of slot 2"), "{problems:?}");
        assert!(kinds(&h).contains(&Kind::IncompatibleOrder), "{:?}", kinds(&h));
    }

    #[test]
    fn a_serial_phantom_history_is_clean() {
        let attempts = vec![
            load(),
            attempt(
                1,
                (2, 3),
                vec![scan(0, 1, &[101, 102]), insert(1, 5), scan(0, 1, &[101, 102, 105])],
            ),
            attempt(
                2,
                (4, 5),
                vec![
                    Step::Delete {
                        slot: 1,
                        name: 6,
                        ledger: Some(vec![ins(2), ins(5)]),
                        val: Some(2),
                    },
                    scan(1, 2, &[105, 103]),
                ],
            ),
        ];
        let (h, problems) = to_history(&attempts, ledgers(&[(1, &[ins(5), del(6)])]));
        assert!(problems.is_empty(), "{problems:?}");
        let report = check(&h);
        assert!(report.is_clean(), "{}", report.summary(&h, 3));
    }
}
