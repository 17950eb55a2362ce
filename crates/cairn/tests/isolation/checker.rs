//! An isolation checker for list-append histories, after Jepsen's Elle
//! (Kingsbury & Alvaro, "Elle: Inferring Isolation Anomalies from
//! Experimental Observations"), written from scratch with std only.
//!
//! A history is a set of transaction attempts over lists keyed by `u32`. A
//! transaction reads whole lists and appends `u64` values, each value appended
//! by exactly one attempt. Because every value is unique and lists only grow,
//! each read names the exact version it saw, and the final state read on a
//! quiet database after the run gives each key's *version order*.
//!
//! The checks, in order:
//!
//! 1. **Final state.** Every value in a final list must have been appended to
//!    that key by some attempt (else `UnknownValue`), and only once
//!    (`Duplicate`). Committed appends must be there (`LostWrite`), aborted ones
//!    must not (`AbortedWriteVisible`), and an `Unknown` attempt must have all
//!    or none of its appends there (`PartialUnknown`). An `Unknown` attempt with
//!    appends in the final state evidently committed: it joins the dependency
//!    graph like a committed one (its reads, which nobody vouches for, are
//!    ignored); otherwise it is ignored entirely.
//! 2. **Reads of committed attempts.** Each read must agree with the attempt's
//!    own earlier reads and appends of that key (`Internal`); must not contain
//!    values of attempts that never committed (`G1a`) nor end in a value its
//!    writer later overwrote with another append to that key (`G1b`); and, once
//!    such values are dropped, must be a prefix of the final list
//!    (`IncompatibleOrder`).
//! 3. **Dependency graph** over committed (and present-`Unknown`) attempts:
//!    * `ww`: consecutive values of a final list, writer to writer;
//!    * `wr`: a read that is a prefix of length `n` depends on the writer of the
//!      last of those `n` values written by someone else;
//!    * `rw`: the same read anti-depends on the writer of the first value after
//!      the prefix written by someone else (it did not see that append);
//!    * `rt` (committed attempts only): `T1 -> T2` when `T1.end < T2.begin`. Only
//!      a transitive reduction is added, with the "frontier" sweep Elle uses:
//!      when an attempt begins it is linked from every attempt in the frontier
//!      (completed attempts not yet followed by another completed one); when it
//!      ends it replaces those predecessors in the frontier. With `P`
//!      concurrent clients the frontier holds at most `P` attempts, so this adds
//!      `O(n * P)` edges and preserves reachability. Snapshots (step 5) stay out
//!      of the sweep: each gets edges *out* to the first later attempt of every
//!      process, and none *in* — a snapshot that missed a commit which returned
//!      before it began is reported as `StaleSnapshot` by a direct check, apart
//!      from the cycles, so that a run can tell it from every other anomaly.
//! 4. **Cycles.** Strongly connected components (iterative Tarjan) of the whole
//!    graph. Each nontrivial component is reported once, as the weakest
//!    anomaly that still has a cycle inside it: `G0` (`ww` only), `G1c` (`ww` +
//!    `wr`), `GSingle` (exactly one `rw` edge, the rest `ww`/`wr`), `G2Item`
//!    (`ww`/`wr`/`rw`), otherwise `RealTime` (every cycle needs an `rt` edge: a
//!    stale read). The anomaly names one shortest example cycle found by BFS.
//! 5. **Snapshots.** A committed attempt marked [`Txn::snapshot`] (a read-only
//!    transaction at a snapshot) is a node of the graph like any other, so a
//!    cycle through its reads is one of the anomalies above. Besides, each must
//!    have read one committed state (`Snapshot`): it appended nothing; each list
//!    it read is a state its key really had between commits (a prefix of the
//!    final list that ends where a writer's appends to the key end — not a list
//!    that never existed); and all those states were current together, at one
//!    point of the commit order. The version it saw of key `k` was current from
//!    the commit of its last writer `L(k)` until that of the next one `U(k)`:
//!    the interval `[L(k), U(k))`. The intervals intersect unless some
//!    interval ends before another begins: `U(a)` committed no later than
//!    `L(b)` (the same writer — a fractured read — or one that precedes it).
//!    The engine's commit order itself is not observable from outside, so
//!    "precedes" is what is known of it: a path of `ww`/`wr`/`rw` edges
//!    between two-phase-locked attempts (each orders their commits) and `rt`
//!    edges (a commit that returned before another attempt began comes first);
//!    the `wr`/`rw` edges of snapshots themselves are what is being judged and
//!    order nothing. A path is sought only forward in a topological order of
//!    that graph, under a budget, so the check stays cheap and reports nothing
//!    it cannot prove. Finally a snapshot must not have missed a commit that
//!    returned before it began (`StaleSnapshot`): no writer of a value after a
//!    version it read may have ended before the snapshot's begin. That is the
//!    real-time part of its judgement, kept apart from the cycles (step 3).

use std::cmp::Reverse;
use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet, VecDeque};
use std::fmt::Write as _;

/// One operation of a transaction, as issued and (for reads) as observed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// Read the whole list of `key`; `None` until it returned (or if the txn failed before).
    Read { key: u32, seen: Option<Vec<u64>> },
    /// Append `val` to `key`'s list.
    Append { key: u32, val: u64 },
}

/// How a transaction attempt ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The commit returned successfully.
    Committed,
    /// The attempt definitely had no effect.
    Aborted,
    /// The commit may or may not have taken effect (e.g. the connection was lost).
    Unknown,
}

/// One transaction attempt.
#[derive(Clone, Debug)]
pub struct Txn {
    /// Unique index in the history.
    pub id: usize,
    /// The client/thread that ran it.
    pub process: usize,
    /// The operations in issue order.
    pub ops: Vec<Op>,
    /// How the attempt ended.
    pub outcome: Outcome,
    /// Logical times from one global counter shared by all processes (an AtomicU64 fetch_add):
    /// `begin` taken just before the transaction's first request, `end` just after its commit/abort returned.
    pub begin: u64,
    /// See `begin`.
    pub end: u64,
    /// A read-only transaction at a snapshot (`Database::begin_read_only`): it
    /// must also have read one committed state (module docs, step 5).
    pub snapshot: bool,
}

/// A whole history: the attempts, and the final state read after all of them ended (every key's list,
/// read by one last transaction on a quiet database) — the version order.
#[derive(Clone, Debug, Default)]
pub struct History {
    /// Every transaction attempt.
    pub txns: Vec<Txn>,
    /// Each key's final list: the version order of its appends.
    pub final_state: BTreeMap<u32, Vec<u64>>,
}

/// The kinds of anomaly the checker reports.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// A cycle of write-write dependencies only.
    G0,
    /// A committed read saw a value of an attempt that never committed.
    G1a,
    /// A committed read saw another attempt's intermediate (overwritten) append.
    G1b,
    /// A cycle of ww and wr dependencies.
    G1c,
    /// A cycle with exactly one anti-dependency (rw), e.g. read skew.
    GSingle,
    /// A cycle with anti-dependencies (rw), e.g. write skew.
    G2Item,
    /// A cycle that needs at least one real-time edge (stale read / strict-serializability violation).
    RealTime,
    /// Inside one txn: a read disagreeing with the txn's own earlier reads/appends of that key.
    Internal,
    /// A committed read that is not a prefix of the final list (and not explained by G1a).
    IncompatibleOrder,
    /// A committed append missing from the final list.
    LostWrite,
    /// A value twice in a list (final or read), or appended by two operations.
    Duplicate,
    /// An aborted txn's append in the final list (G1a covers the read case).
    AbortedWriteVisible,
    /// An Unknown txn with some but not all of its appends in the final state.
    PartialUnknown,
    /// A value read/in final that no txn ever appended (to that key).
    UnknownValue,
    /// A snapshot transaction that did not read one committed state: it appended, read a state its
    /// key never had, or read states that were never current together (a fractured snapshot).
    Snapshot,
    /// A snapshot transaction that missed a commit which had returned before it began.
    StaleSnapshot,
}

/// One anomaly: its kind, the ids of the attempts involved, and a human-readable explanation.
#[derive(Clone, Debug)]
pub struct Anomaly {
    /// What went wrong.
    pub kind: Kind,
    /// Ids (`Txn::id`) of the attempts involved; for cycles, in cycle order.
    pub txns: Vec<usize>,
    /// Explanation; for cycles the example cycle with edge labels, e.g. `T3 -ww(k5)-> T9 -rw(k2)-> T3`.
    pub detail: String,
}

/// The checker's verdict on a history.
#[derive(Debug)]
pub struct Report {
    /// Every anomaly found, grouped by kind.
    pub anomalies: Vec<Anomaly>,
    /// Attempts whose outcome was `Committed`.
    pub committed: usize,
    /// Attempts whose outcome was `Aborted`.
    pub aborted: usize,
    /// Attempts whose outcome was `Unknown`.
    pub unknown: usize,
    /// Committed attempts that were snapshot transactions (counted in `committed` too).
    pub snapshots: usize,
}

impl Report {
    /// True when no anomaly was found.
    pub fn is_clean(&self) -> bool {
        self.anomalies.is_empty()
    }

    /// How many anomalies of `kind` were found.
    pub fn count(&self, kind: Kind) -> usize {
        self.anomalies.iter().filter(|a| a.kind == kind).count()
    }

    /// One line per kind with counts, then up to `n` examples each with txns (ops, outcome, begin/end) explained.
    pub fn summary(&self, history: &History, n: usize) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{} committed, {} aborted, {} unknown; {} anomalies",
            self.committed,
            self.aborted,
            self.unknown,
            self.anomalies.len()
        );
        let mut counts: BTreeMap<&Kind, usize> = BTreeMap::new();
        for a in &self.anomalies {
            *counts.entry(&a.kind).or_default() += 1;
        }
        for (kind, count) in &counts {
            let _ = writeln!(out, "  {kind:?}: {count}");
        }
        // First occurrence wins should ids repeat; the summary must not panic on odd input.
        let mut by_id: HashMap<usize, &Txn> = HashMap::new();
        for t in &history.txns {
            by_id.entry(t.id).or_insert(t);
        }
        for kind in counts.keys() {
            let examples = self.anomalies.iter().filter(|a| &a.kind == *kind).take(n);
            for (i, a) in examples.enumerate() {
                let _ = writeln!(out, "{kind:?} #{}: {}", i + 1, a.detail);
                let mut shown = HashSet::new();
                for id in a.txns.iter().filter(|id| shown.insert(**id)) {
                    match by_id.get(id) {
                        Some(t) => {
                            let _ = writeln!(out, "    {}", describe_txn(t));
                        }
                        None => {
                            let _ = writeln!(out, "    T{id} (not in the history)");
                        }
                    }
                }
            }
        }
        out
    }
}

/// `T<id> p<process> <outcome> [<begin>,<end>] r(k)=[..] a(k,v) ...`
fn describe_txn(t: &Txn) -> String {
    let what = if t.snapshot { " snapshot" } else { "" };
    let mut s = format!("T{} p{} {:?}{what} [{},{}]", t.id, t.process, t.outcome, t.begin, t.end);
    for op in &t.ops {
        match op {
            Op::Read { key, seen: Some(seen) } => {
                let _ = write!(s, " r({key})={}", fmt_tail(seen, 4));
            }
            Op::Read { key, seen: None } => {
                let _ = write!(s, " r({key})=?");
            }
            Op::Append { key, val } => {
                let _ = write!(s, " a({key},{val})");
            }
        }
    }
    s
}

/// Formats a list showing only its last `n` values, e.g. `[..(12 more),5,6,7,8]`.
fn fmt_tail(list: &[u64], n: usize) -> String {
    let skip = list.len().saturating_sub(n);
    let tail: Vec<String> = list[skip..].iter().map(u64::to_string).collect();
    if skip == 0 {
        format!("[{}]", tail.join(","))
    } else {
        format!("[..({skip} more),{}]", tail.join(","))
    }
}

/// Checks a history; see the module documentation for what is checked.
pub fn check(history: &History) -> Report {
    let mut c = Checker::new(history);
    c.check_final_state();
    c.check_outcomes();
    for (pos, t) in history.txns.iter().enumerate() {
        if t.outcome == Outcome::Committed {
            c.check_reads(pos);
        }
    }
    c.add_ww_edges();
    c.add_rt_edges();
    c.add_snapshot_rt_edges();
    c.find_cycles();
    c.check_snapshots();
    let mut anomalies = c.anomalies;
    // Stable: within a kind, anomalies stay in discovery order.
    anomalies.sort_by(|a, b| a.kind.cmp(&b.kind));
    let count = |o: Outcome| history.txns.iter().filter(|t| t.outcome == o).count();
    Report {
        anomalies,
        committed: count(Outcome::Committed),
        aborted: count(Outcome::Aborted),
        unknown: count(Outcome::Unknown),
        snapshots: history
            .txns
            .iter()
            .filter(|t| t.snapshot && t.outcome == Outcome::Committed)
            .count(),
    }
}

/// A dependency edge type, weakest-to-strongest constraint order as Adya classifies cycles.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Dep {
    Ww,
    Wr,
    Rw,
    Rt,
}

const WW: &[Dep] = &[Dep::Ww];
const WW_WR: &[Dep] = &[Dep::Ww, Dep::Wr];
const NO_RT: &[Dep] = &[Dep::Ww, Dep::Wr, Dep::Rw];
const ALL: &[Dep] = &[Dep::Ww, Dep::Wr, Dep::Rw, Dep::Rt];

/// How many start edges to try when looking for a short example cycle.
const MAX_START_EDGES: usize = 8;
/// Edges the G-single search may examine per component, so a huge component stays cheap.
const GSINGLE_BUDGET: usize = 2_000_000;
/// Edges the commit-order search may examine per snapshot transaction.
const SNAPSHOT_BUDGET: usize = 200_000;

/// An edge of the dependency graph; `key` is `None` for real-time edges.
#[derive(Clone, Copy, Debug)]
struct Edge {
    to: usize,
    dep: Dep,
    key: Option<u32>,
}

/// A cycle as a list of steps `(from, edge)`; the last edge leads back to the first `from`.
type Cycle = Vec<(usize, Edge)>;

/// Adjacency lists over history positions, without duplicate `(from, to, dep)` edges.
struct Graph {
    out: Vec<Vec<Edge>>,
    seen: HashSet<(usize, usize, Dep)>,
}

impl Graph {
    fn new(n: usize) -> Self {
        Graph {
            out: vec![Vec::new(); n],
            seen: HashSet::new(),
        }
    }

    fn add(&mut self, from: usize, to: usize, dep: Dep, key: Option<u32>) {
        // Self-edges carry no ordering information.
        if from != to && self.seen.insert((from, to, dep)) {
            self.out[from].push(Edge { to, dep, key });
        }
    }
}

/// Who appended a value, and to which key.
#[derive(Clone, Copy)]
struct Writer {
    txn: usize,
    key: u32,
}

/// What a transaction knows of one key from its own operations: if it read the key, the list it
/// read (`base`) followed by its appends since (`own`); otherwise just that the list ends in `own`.
#[derive(Default)]
struct Known<'a> {
    base: Option<&'a [u64]>,
    own: Vec<u64>,
}

impl Known<'_> {
    fn consistent(&self, seen: &[u64]) -> bool {
        match self.base {
            Some(b) => seen.len() == b.len() + self.own.len() && seen.starts_with(b) && seen.ends_with(&self.own),
            None => seen.ends_with(&self.own),
        }
    }

    fn expected(&self) -> String {
        match self.base {
            Some(b) => fmt_tail(&[b, &self.own].concat(), 8),
            None => format!("a list ending in {}", fmt_tail(&self.own, 8)),
        }
    }
}

/// Working state of one `check` run. Attempts are named by their position in `History::txns`
/// internally and by `Txn::id` in anomalies.
struct Checker<'a> {
    h: &'a History,
    writers: HashMap<u64, Writer>,
    /// Each (txn, key)'s last appended value, for G1b.
    last_append: HashMap<(usize, u32), u64>,
    /// Where each value first occurs in the final state: (key, index).
    final_pos: HashMap<u64, (u32, usize)>,
    /// Per key, how long a prefix of the final list holds only values that are unique, appended to
    /// that key and not aborted: reads within it need no per-value checks (the common, fast case).
    clean_prefix: HashMap<u32, usize>,
    /// Whether each attempt is a node of the dependency graph.
    member: Vec<bool>,
    anomalies: Vec<Anomaly>,
    graph: Graph,
}

impl<'a> Checker<'a> {
    /// Indexes who appended what; a value appended twice is reported rather than trusted.
    fn new(h: &'a History) -> Self {
        let n = h.txns.len();
        let mut c = Checker {
            h,
            writers: HashMap::new(),
            last_append: HashMap::new(),
            final_pos: HashMap::new(),
            clean_prefix: HashMap::new(),
            member: vec![false; n],
            anomalies: Vec::new(),
            graph: Graph::new(n),
        };
        for (pos, t) in h.txns.iter().enumerate() {
            for op in &t.ops {
                let Op::Append { key, val } = *op else { continue };
                c.last_append.insert((pos, key), val);
                match c.writers.get(&val).copied() {
                    Some(first) => {
                        let detail = format!(
                            "value {val} appended twice: by T{} to k{} and by T{} to k{key}",
                            h.txns[first.txn].id, first.key, t.id
                        );
                        c.push(Kind::Duplicate, vec![first.txn, pos], detail);
                    }
                    None => {
                        c.writers.insert(val, Writer { txn: pos, key });
                    }
                }
            }
        }
        c
    }

    fn id(&self, pos: usize) -> usize {
        self.h.txns[pos].id
    }

    fn push(&mut self, kind: Kind, positions: Vec<usize>, detail: String) {
        let txns = positions.into_iter().map(|p| self.id(p)).collect();
        self.anomalies.push(Anomaly { kind, txns, detail });
    }

    fn in_final(&self, key: u32, val: u64) -> bool {
        matches!(self.final_pos.get(&val), Some(&(k, _)) if k == key)
    }

    /// A value whose writer never committed: aborted, or Unknown and absent from the final state.
    fn failed(&self, val: u64) -> bool {
        match self.writers.get(&val) {
            Some(w) => match self.h.txns[w.txn].outcome {
                Outcome::Committed => false,
                Outcome::Aborted => true,
                Outcome::Unknown => !self.in_final(w.key, val),
            },
            None => false,
        }
    }

    /// The graph node that wrote `val` to `key`, if it is a member.
    fn member_writer(&self, val: u64, key: u32) -> Option<usize> {
        self.writers
            .get(&val)
            .filter(|w| w.key == key && self.member[w.txn])
            .map(|w| w.txn)
    }

    /// UnknownValue and Duplicate in the final lists; records where each value sits.
    fn check_final_state(&mut self) {
        let h = self.h;
        for (&key, list) in &h.final_state {
            let (mut unknown, mut dups) = (Vec::new(), Vec::new());
            for (i, &v) in list.iter().enumerate() {
                match self.final_pos.entry(v) {
                    Entry::Occupied(_) => dups.push(v),
                    Entry::Vacant(slot) => {
                        slot.insert((key, i));
                    }
                }
                match self.writers.get(&v) {
                    Some(w) if w.key == key => {}
                    Some(w) => unknown.push(format!("{v} (appended by T{} to k{})", self.id(w.txn), w.key)),
                    None => unknown.push(v.to_string()),
                }
            }
            if !unknown.is_empty() {
                let detail = format!(
                    "final k{key} holds values no txn appended to it: {}",
                    unknown.join(", ")
                );
                self.push(Kind::UnknownValue, Vec::new(), detail);
            }
            if !dups.is_empty() {
                let detail = format!(
                    "final state holds {dups:?} more than once (k{key}={})",
                    fmt_tail(list, 8)
                );
                self.push(Kind::Duplicate, Vec::new(), detail);
            }
        }
        for (&key, list) in &h.final_state {
            let bad = |(i, v): (usize, &u64)| self.final_pos.get(v) != Some(&(key, i)) || self.failed(*v);
            let len = list.iter().enumerate().position(bad).unwrap_or(list.len());
            self.clean_prefix.insert(key, len);
        }
    }

    /// LostWrite, AbortedWriteVisible and PartialUnknown; decides graph membership.
    fn check_outcomes(&mut self) {
        let h = self.h;
        for (pos, t) in h.txns.iter().enumerate() {
            let (mut present, mut absent) = (Vec::new(), Vec::new());
            for op in &t.ops {
                if let Op::Append { key, val } = *op {
                    if self.in_final(key, val) {
                        present.push((key, val));
                    } else {
                        absent.push((key, val));
                    }
                }
            }
            let id = t.id;
            let found = match t.outcome {
                Outcome::Committed => {
                    self.member[pos] = true;
                    let detail = format!("committed T{id} appends (key, value) {absent:?} are not in the final state");
                    (!absent.is_empty()).then_some((Kind::LostWrite, detail))
                }
                Outcome::Aborted => {
                    let detail = format!("aborted T{id} appends (key, value) {present:?} are in the final state");
                    (!present.is_empty()).then_some((Kind::AbortedWriteVisible, detail))
                }
                Outcome::Unknown => {
                    // Any append in the final state shows it committed (a partial one is reported too).
                    self.member[pos] = !present.is_empty();
                    let detail =
                        format!("unknown T{id}: appends {present:?} are in the final state but {absent:?} are not");
                    (!present.is_empty() && !absent.is_empty()).then_some((Kind::PartialUnknown, detail))
                }
            };
            if let Some((kind, detail)) = found {
                self.push(kind, vec![pos], detail);
            }
        }
    }

    /// Internal consistency of one committed attempt, then the external checks of each read.
    fn check_reads(&mut self, pos: usize) {
        let h = self.h;
        let t = &h.txns[pos];
        let mut known: HashMap<u32, Known<'a>> = HashMap::new();
        for op in &t.ops {
            match op {
                Op::Append { key, val } => known.entry(*key).or_default().own.push(*val),
                Op::Read { key, seen: Some(seen) } => {
                    let k = known.entry(*key).or_default();
                    if !k.consistent(seen) {
                        let detail = format!(
                            "T{} read k{key}={} but its own earlier ops of k{key} imply {}",
                            t.id,
                            fmt_tail(seen, 8),
                            k.expected()
                        );
                        self.push(Kind::Internal, vec![pos], detail);
                    }
                    k.base = Some(seen.as_slice());
                    k.own.clear();
                    self.check_read(pos, *key, seen);
                }
                // A read that never returned tells us nothing.
                Op::Read { seen: None, .. } => {}
            }
        }
    }

    /// External checks of one committed read; its wr/rw edges if it is a prefix of the version order.
    fn check_read(&mut self, pos: usize, key: u32, seen: &[u64]) {
        let h = self.h;
        let final_list: &[u64] = h.final_state.get(&key).map_or(&[], Vec::as_slice);
        self.check_intermediate(pos, key, seen);
        let clean = self.clean_prefix.get(&key).copied().unwrap_or(0);
        if seen.len() <= clean && final_list.starts_with(seen) {
            self.add_read_edges(pos, key, seen.len(), final_list);
            return;
        }
        let me = self.id(pos);
        let (mut kept, mut unknown, mut failed, mut failed_by) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for &v in seen {
            match self.writers.get(&v) {
                Some(w) if w.key == key && self.failed(v) => {
                    failed.push(v);
                    failed_by.push(w.txn);
                }
                Some(w) if w.key == key => kept.push(v),
                _ => unknown.push(v),
            }
        }
        let mut distinct = HashSet::new();
        if !seen.iter().all(|v| distinct.insert(*v)) {
            let detail = format!("T{me} read k{key}={} holding a value twice", fmt_tail(seen, 8));
            self.push(Kind::Duplicate, vec![pos], detail);
        }
        if !unknown.is_empty() {
            let detail = format!("T{me} read k{key} values {unknown:?} that no txn appended to k{key}");
            self.push(Kind::UnknownValue, vec![pos], detail);
        }
        if !failed.is_empty() {
            failed_by.sort_unstable();
            failed_by.dedup();
            let who: Vec<String> = failed_by.iter().map(|&w| format!("T{}", self.id(w))).collect();
            let detail = format!(
                "T{me} read k{key} values {failed:?} appended by never-committed {}",
                who.join(", ")
            );
            self.push(Kind::G1a, [vec![pos], failed_by].concat(), detail);
        }
        if final_list.starts_with(&kept) {
            self.add_read_edges(pos, key, kept.len(), final_list);
        } else {
            let at = kept
                .iter()
                .zip(final_list)
                .position(|(a, b)| a != b)
                .unwrap_or(final_list.len());
            let detail = format!(
                "T{me} read k{key}={} (len {}), not a prefix of final k{key}={} (len {}): they differ at index {at}",
                fmt_tail(seen, 8),
                seen.len(),
                fmt_tail(final_list, 8),
                final_list.len()
            );
            self.push(Kind::IncompatibleOrder, vec![pos], detail);
        }
    }

    /// G1b: the read ends in another attempt's append that the same attempt overwrote later.
    fn check_intermediate(&mut self, pos: usize, key: u32, seen: &[u64]) {
        let Some(&last) = seen.last() else { return };
        let Some(&w) = self.writers.get(&last) else { return };
        if w.txn == pos || w.key != key || self.failed(last) {
            return;
        }
        match self.last_append.get(&(w.txn, key)) {
            Some(&fin) if fin != last => {
                let detail = format!(
                    "T{} read k{key}={} ending in {last}, an intermediate append of T{} whose last append to k{key} is {fin}",
                    self.id(pos),
                    fmt_tail(seen, 8),
                    self.id(w.txn)
                );
                self.push(Kind::G1b, vec![pos, w.txn], detail);
            }
            _ => {}
        }
    }

    /// wr and rw edges of a read that saw the first `n` values of `final_list`.
    fn add_read_edges(&mut self, pos: usize, key: u32, n: usize, final_list: &[u64]) {
        // The reader's own appends (and non-members) order nothing: look past them.
        let wrote = final_list[..n]
            .iter()
            .rev()
            .filter_map(|&v| self.member_writer(v, key))
            .find(|&w| w != pos);
        if let Some(w) = wrote {
            self.graph.add(w, pos, Dep::Wr, Some(key));
        }
        let missed = final_list[n..]
            .iter()
            .filter_map(|&v| self.member_writer(v, key))
            .find(|&w| w != pos);
        if let Some(w) = missed {
            self.graph.add(pos, w, Dep::Rw, Some(key));
        }
    }

    /// ww edges between the member writers of consecutive values of each final list.
    fn add_ww_edges(&mut self) {
        let h = self.h;
        for (&key, list) in &h.final_state {
            let mut prev = None;
            for &v in list {
                let Some(w) = self.member_writer(v, key) else { continue };
                if let Some(p) = prev {
                    self.graph.add(p, w, Dep::Ww, Some(key));
                }
                prev = Some(w);
            }
        }
    }

    /// Real-time edges between committed attempts, as a reachability-preserving reduction
    /// (the frontier sweep described in the module documentation).
    fn add_rt_edges(&mut self) {
        let mut events: Vec<(u64, bool, usize)> = Vec::new();
        for (pos, t) in self.h.txns.iter().enumerate() {
            // An interval running backwards is nonsense; it orders nothing. Snapshots have their
            // own edges (`add_snapshot_rt_edges`).
            if t.outcome == Outcome::Committed && t.begin <= t.end && !t.snapshot {
                events.push((t.begin, false, pos));
                events.push((t.end, true, pos));
            }
        }
        // At equal times begins sort before ends: an edge needs `end < begin` strictly.
        events.sort_unstable();
        let mut frontier: Vec<usize> = Vec::new();
        let mut preds: HashMap<usize, Vec<usize>> = HashMap::new();
        for (_, is_end, pos) in events {
            if is_end {
                let mut dominated = preds.remove(&pos).unwrap_or_default();
                dominated.sort_unstable();
                frontier.retain(|f| dominated.binary_search(f).is_err());
                frontier.push(pos);
            } else {
                for &f in &frontier {
                    self.graph.add(f, pos, Dep::Rt, None);
                }
                preds.insert(pos, frontier.clone());
            }
        }
    }

    /// Real-time edges out of snapshots: from each to the first committed attempt of every
    /// process that began after it ended, one among the process's snapshots and one among the
    /// rest (each reaches that process's later attempts of its kind). None lead into a snapshot:
    /// one that missed a commit that returned before it began is `StaleSnapshot` instead (step 5).
    fn add_snapshot_rt_edges(&mut self) {
        let h = self.h;
        let ok = |t: &Txn| t.outcome == Outcome::Committed && t.begin <= t.end;
        let mut lanes: HashMap<(usize, bool), Vec<(u64, usize)>> = HashMap::new();
        for (pos, t) in h.txns.iter().enumerate().filter(|(_, t)| ok(t)) {
            lanes.entry((t.process, t.snapshot)).or_default().push((t.begin, pos));
        }
        for lane in lanes.values_mut() {
            lane.sort_unstable();
        }
        for (pos, t) in h.txns.iter().enumerate().filter(|(_, t)| ok(t) && t.snapshot) {
            for lane in lanes.values() {
                let next = lane.partition_point(|&(begin, _)| begin <= t.end);
                if let Some(&(_, to)) = lane.get(next) {
                    self.graph.add(pos, to, Dep::Rt, None);
                }
            }
        }
    }

    /// Reports each nontrivial strongly connected component as its weakest cycle kind.
    fn find_cycles(&mut self) {
        let adj: Vec<Vec<usize>> = self
            .graph
            .out
            .iter()
            .map(|es| es.iter().map(|e| e.to).collect())
            .collect();
        for scc in sccs(&adj) {
            let set: HashSet<usize> = scc.iter().copied().collect();
            let anomaly = self.classify(&set);
            self.anomalies.push(anomaly);
        }
    }

    /// The weakest cycle kind inside one component, with a short example cycle.
    fn classify(&self, scc: &HashSet<usize>) -> Anomaly {
        let found = None
            .or_else(|| self.cycle_in(scc, WW, Dep::Ww).map(|c| (Kind::G0, c)))
            .or_else(|| self.cycle_in(scc, WW_WR, Dep::Wr).map(|c| (Kind::G1c, c)))
            .or_else(|| self.single_rw_cycle(scc).map(|c| (Kind::GSingle, c)))
            .or_else(|| self.cycle_in(scc, NO_RT, Dep::Rw).map(|c| (Kind::G2Item, c)))
            .or_else(|| self.cycle_in(scc, ALL, Dep::Rt).map(|c| (Kind::RealTime, c)));
        match found {
            Some((kind, cycle)) => {
                let detail = format!(
                    "{} (in a cycle component of {} txns)",
                    self.fmt_cycle(&cycle),
                    scc.len()
                );
                let txns = cycle.iter().map(|&(from, _)| self.id(from)).collect();
                Anomaly { kind, txns, detail }
            }
            // Unreachable for a genuine component; still report rather than panic.
            None => {
                let mut txns: Vec<usize> = scc.iter().map(|&p| self.id(p)).collect();
                txns.sort_unstable();
                txns.truncate(16);
                let detail = format!("a cycle component of {} txns with no example cycle found", scc.len());
                Anomaly {
                    kind: Kind::RealTime,
                    txns,
                    detail,
                }
            }
        }
    }

    /// A short cycle inside `scc` using only `allowed` edges, preferably through a `prefer` edge.
    fn cycle_in(&self, scc: &HashSet<usize>, allowed: &[Dep], prefer: Dep) -> Option<Cycle> {
        let mut nodes: Vec<usize> = scc.iter().copied().collect();
        nodes.sort_unstable();
        let local: HashMap<usize, usize> = nodes.iter().enumerate().map(|(i, &v)| (v, i)).collect();
        let adj: Vec<Vec<usize>> = nodes
            .iter()
            .map(|&v| {
                let out = self.graph.out[v].iter().filter(|e| allowed.contains(&e.dep));
                out.filter_map(|e| local.get(&e.to).copied()).collect()
            })
            .collect();
        // The smallest sub-component gives the most readable example.
        let sub = sccs(&adj).into_iter().min_by_key(Vec::len)?;
        let sub: HashSet<usize> = sub.into_iter().map(|i| nodes[i]).collect();
        let mut starts = self.edges_within(&sub, allowed);
        starts.sort_by_key(|&(from, e)| (e.dep != prefer, from, e.to));
        let mut best: Option<Cycle> = None;
        for (from, e) in starts.into_iter().take(MAX_START_EDGES) {
            let mut budget = usize::MAX;
            if let Some(path) = self.bfs(e.to, from, allowed, &|v| sub.contains(&v), &mut budget) {
                if best.as_ref().is_none_or(|b| path.len() + 1 < b.len()) {
                    best = Some([vec![(from, e)], path].concat());
                }
            }
        }
        best
    }

    /// A cycle with exactly one rw edge: an rw edge `a -> b` plus a ww/wr path `b ->* a`.
    ///
    /// Called once the ww/wr edges of `scc` are known to be acyclic, so they have a topological
    /// order: a path `b ->* a` needs `rank(b) < rank(a)` and only visits ranks up to `rank(a)`.
    /// That prunes most candidates and most of each search; a budget bounds the rest.
    fn single_rw_cycle(&self, scc: &HashSet<usize>) -> Option<Cycle> {
        let rank = self.topo_rank(scc, WW_WR);
        let rank_of = |v: usize| rank.get(&v).copied().unwrap_or(usize::MAX);
        let mut rws = self.edges_within(scc, &[Dep::Rw]);
        rws.retain(|&(a, e)| rank_of(e.to) < rank_of(a));
        // Close ranks first: their paths, if any, are short and cheap to find.
        rws.sort_by_key(|&(a, e)| (rank_of(a).saturating_sub(rank_of(e.to)), a, e.to));
        let mut budget = GSINGLE_BUDGET;
        let (mut best, mut found): (Option<Cycle>, usize) = (None, 0);
        for (a, e) in rws {
            if budget == 0 || found == MAX_START_EDGES {
                break;
            }
            let limit = rank_of(a);
            let within = |v: usize| rank_of(v) <= limit && scc.contains(&v);
            if let Some(path) = self.bfs(e.to, a, WW_WR, &within, &mut budget) {
                found += 1;
                if best.as_ref().is_none_or(|b| path.len() + 1 < b.len()) {
                    best = Some([vec![(a, e)], path].concat());
                }
            }
        }
        best
    }

    /// Topological ranks of `set` over its `allowed` edges (Kahn's algorithm, ties broken by
    /// history position). Nodes on a cycle get no rank.
    fn topo_rank(&self, set: &HashSet<usize>, allowed: &[Dep]) -> HashMap<usize, usize> {
        self.ranks_by(set, &|_, e| allowed.contains(&e.dep))
    }

    /// Topological ranks of `set` over the edges `edge_ok` accepts, as `topo_rank`. Nodes on a
    /// cycle, and every node reachable from one, get no rank.
    fn ranks_by(&self, set: &HashSet<usize>, edge_ok: &dyn Fn(usize, &Edge) -> bool) -> HashMap<usize, usize> {
        let mut indegree: HashMap<usize, usize> = set.iter().map(|&v| (v, 0)).collect();
        for &from in set {
            for e in self.graph.out[from].iter().filter(|e| edge_ok(from, e)) {
                if let Some(d) = indegree.get_mut(&e.to) {
                    *d += 1;
                }
            }
        }
        let mut ready: BinaryHeap<Reverse<usize>> = indegree
            .iter()
            .filter(|&(_, &d)| d == 0)
            .map(|(&v, _)| Reverse(v))
            .collect();
        let mut rank = HashMap::new();
        while let Some(Reverse(v)) = ready.pop() {
            rank.insert(v, rank.len());
            for e in self.graph.out[v].iter().filter(|e| edge_ok(v, e)) {
                if let Some(d) = indegree.get_mut(&e.to) {
                    *d = d.saturating_sub(1);
                    if *d == 0 {
                        ready.push(Reverse(e.to));
                    }
                }
            }
        }
        rank
    }

    /// Every `allowed` edge with both ends in `set`.
    fn edges_within(&self, set: &HashSet<usize>, allowed: &[Dep]) -> Vec<(usize, Edge)> {
        let mut edges = Vec::new();
        for &from in set {
            for e in &self.graph.out[from] {
                if allowed.contains(&e.dep) && set.contains(&e.to) {
                    edges.push((from, *e));
                }
            }
        }
        edges
    }

    /// Shortest path `from ->* to` over `allowed` edges between nodes `within` accepts, examining at
    /// most `budget` edges.
    fn bfs(
        &self,
        from: usize,
        to: usize,
        allowed: &[Dep],
        within: &dyn Fn(usize) -> bool,
        budget: &mut usize,
    ) -> Option<Cycle> {
        let edge_ok = |_: usize, e: &Edge| allowed.contains(&e.dep);
        self.bfs_by(from, &|v| v == to, &edge_ok, within, budget)
            .map(|(_, path)| path)
    }

    /// Shortest path from `from` to the nearest node `is_target` accepts, over edges `edge_ok`
    /// accepts between nodes `within` accepts, examining at most `budget` edges: that node and
    /// the path.
    fn bfs_by(
        &self,
        from: usize,
        is_target: &dyn Fn(usize) -> bool,
        edge_ok: &dyn Fn(usize, &Edge) -> bool,
        within: &dyn Fn(usize) -> bool,
        budget: &mut usize,
    ) -> Option<(usize, Cycle)> {
        let mut parent: HashMap<usize, (usize, Edge)> = HashMap::new();
        let mut queue = VecDeque::from([from]);
        while let Some(v) = queue.pop_front() {
            for e in &self.graph.out[v] {
                if *budget == 0 {
                    return None;
                }
                *budget -= 1;
                if !edge_ok(v, e) || !within(e.to) || e.to == from || parent.contains_key(&e.to) {
                    continue;
                }
                parent.insert(e.to, (v, *e));
                if is_target(e.to) {
                    return Some((e.to, unwind(&parent, from, e.to)));
                }
                queue.push_back(e.to);
            }
        }
        None
    }

    /// `T3 -ww(k5)-> T9 -rw(k2)-> T3`
    fn fmt_cycle(&self, cycle: &[(usize, Edge)]) -> String {
        match cycle.first() {
            Some(&(first, _)) => self.fmt_path(cycle, first),
            None => String::new(),
        }
    }

    /// `T3 -ww(k5)-> T9 -rt-> T4`: the steps of `path`, then the node it ends at.
    fn fmt_path(&self, path: &[(usize, Edge)], end: usize) -> String {
        let mut s = String::new();
        for &(from, e) in path {
            let label = match (e.dep, e.key) {
                (Dep::Rt, _) | (_, None) => format!("{:?}", e.dep).to_lowercase(),
                (dep, Some(k)) => format!("{}(k{k})", format!("{dep:?}").to_lowercase()),
            };
            let _ = write!(s, "T{} -{label}-> ", self.id(from));
        }
        let _ = write!(s, "T{}", self.id(end));
        s
    }
}

/// Snapshot transactions (module docs, step 5).
impl Checker<'_> {
    /// Checks every committed snapshot transaction against what is known of the commit order.
    fn check_snapshots(&mut self) {
        let h = self.h;
        let snaps: Vec<usize> = (0..h.txns.len())
            .filter(|&p| h.txns[p].snapshot && h.txns[p].outcome == Outcome::Committed)
            .collect();
        if snaps.is_empty() {
            return;
        }
        let nodes: HashSet<usize> = (0..h.txns.len()).filter(|&p| self.member[p]).collect();
        let rank = self.ranks_by(&nodes, &|from, e| self.orders_commits(from, e));
        let first_end = self.first_ends();
        for pos in snaps {
            self.check_snapshot(pos, &rank);
            self.check_stale(pos, &first_end);
        }
    }

    /// Per key and index `i` of its final list, the earliest `end` of a committed attempt that
    /// appended one of the values from `i` on (`u64::MAX` if none): a snapshot that read the
    /// first `i` values and began after it is stale.
    fn first_ends(&self) -> HashMap<u32, Vec<u64>> {
        let h = self.h;
        let mut out = HashMap::new();
        for (&key, list) in &h.final_state {
            let mut min = vec![u64::MAX; list.len() + 1];
            for i in (0..list.len()).rev() {
                let end = self
                    .member_writer(list[i], key)
                    .map(|w| &h.txns[w])
                    .filter(|t| t.outcome == Outcome::Committed)
                    .map_or(u64::MAX, |t| t.end);
                min[i] = min[i + 1].min(end);
            }
            out.insert(key, min);
        }
        out
    }

    /// `StaleSnapshot`: the snapshot at `pos` read a key without a value whose writer's commit
    /// had returned before the snapshot began. Reported once per snapshot.
    fn check_stale(&mut self, pos: usize, first_end: &HashMap<u32, Vec<u64>>) {
        let h = self.h;
        let t = &h.txns[pos];
        for op in &t.ops {
            let Op::Read { key, seen: Some(seen) } = op else {
                continue;
            };
            let fin: &[u64] = h.final_state.get(key).map_or(&[], Vec::as_slice);
            let early = first_end.get(key).and_then(|m| m.get(seen.len())).copied();
            if !fin.starts_with(seen) || early.is_none_or(|end| end >= t.begin) {
                continue;
            }
            let missed = fin[seen.len()..].iter().find_map(|&v| {
                let w = self.member_writer(v, *key)?;
                let wt = &h.txns[w];
                (wt.outcome == Outcome::Committed && wt.end < t.begin).then_some((v, w))
            });
            if let Some((v, w)) = missed {
                let detail = format!(
                    "snapshot T{} began at {} and read k{key}={} without {v}, appended by T{} whose commit returned at {}",
                    t.id,
                    t.begin,
                    fmt_tail(seen, 4),
                    h.txns[w].id,
                    h.txns[w].end
                );
                self.push(Kind::StaleSnapshot, vec![pos, w], detail);
                return;
            }
        }
    }

    /// Whether an edge is known to order two commits: a real-time edge always, a dependency
    /// unless a snapshot is at either end (its reads are what is being judged).
    fn orders_commits(&self, from: usize, e: &Edge) -> bool {
        let snapshot = |p: usize| self.h.txns[p].snapshot;
        e.dep == Dep::Rt || !(snapshot(from) || snapshot(e.to))
    }

    /// One snapshot: it appended nothing, each read is a committed state of its key, and the
    /// intervals those states were current in intersect.
    fn check_snapshot(&mut self, pos: usize, rank: &HashMap<usize, usize>) {
        let h = self.h;
        let t = &h.txns[pos];
        let me = t.id;
        let appended: Vec<(u32, u64)> = t
            .ops
            .iter()
            .filter_map(|op| match *op {
                Op::Append { key, val } => Some((key, val)),
                Op::Read { .. } => None,
            })
            .collect();
        if !appended.is_empty() {
            let detail = format!("snapshot T{me} appended (key, value) {appended:?}");
            self.push(Kind::Snapshot, vec![pos], detail);
        }
        // Each interval's start (the last writer seen) and end (the first writer not seen).
        let mut starts: Vec<(usize, u32)> = Vec::new();
        let mut ends: Vec<(usize, u32)> = Vec::new();
        for op in &t.ops {
            let Op::Read { key, seen: Some(seen) } = op else {
                continue;
            };
            let key = *key;
            if let Err(why) = self.committed_state(key, seen) {
                let detail = format!("snapshot T{me} read k{key}={}: {why}", fmt_tail(seen, 8));
                self.push(Kind::Snapshot, vec![pos], detail);
                continue;
            }
            let fin: &[u64] = h.final_state.get(&key).map_or(&[], Vec::as_slice);
            let (before, after) = fin.split_at(seen.len());
            if let Some(w) = before.iter().rev().find_map(|&v| self.member_writer(v, key)) {
                starts.push((w, key));
            }
            if let Some(w) = after.iter().find_map(|&v| self.member_writer(v, key)) {
                ends.push((w, key));
            }
        }
        let mut budget = SNAPSHOT_BUDGET;
        for &(end, end_key) in &ends {
            let Some((start, start_key, path)) = self.no_later(end, &starts, rank, &mut budget) else {
                continue;
            };
            let (e, s) = (self.id(end), self.id(start));
            let (detail, txns) = if path.is_empty() {
                let detail = format!(
                    "snapshot T{me} read k{end_key} as before T{e} committed but k{start_key} as after it did: a fractured read of one commit"
                );
                (detail, vec![pos, end])
            } else {
                let detail = format!(
                    "snapshot T{me} read k{end_key} as before T{e} committed but k{start_key} as after T{s} did, which committed later: {}",
                    self.fmt_path(&path, start)
                );
                (detail, vec![pos, end, start])
            };
            self.push(Kind::Snapshot, txns, detail);
            return;
        }
    }

    /// `Ok` if `seen` is a state `key` had between commits: a prefix of its final list whose
    /// values committed attempts appended, ending where its last writer's appends to `key` end
    /// (not half of one commit). Otherwise why not.
    fn committed_state(&self, key: u32, seen: &[u64]) -> Result<(), String> {
        let fin: &[u64] = self.h.final_state.get(&key).map_or(&[], Vec::as_slice);
        if !fin.starts_with(seen) {
            return Err(format!(
                "not a prefix of final k{key}={}: a state k{key} never had",
                fmt_tail(fin, 8)
            ));
        }
        let clean = self.clean_prefix.get(&key).copied().unwrap_or(0);
        if seen.len() > clean {
            if let Some(v) = seen.iter().find(|&&v| self.member_writer(v, key).is_none()) {
                return Err(format!("it holds {v}, which no committed txn appended to k{key}"));
            }
        }
        let Some(&last) = seen.last() else { return Ok(()) };
        let Some(w) = self.member_writer(last, key) else {
            return Ok(());
        };
        match self.last_append.get(&(w, key)) {
            Some(&fin_last) if fin_last != last => Err(format!(
                "it ends in {last}, but T{} appended {fin_last} to k{key} after it: half of one commit",
                self.id(w)
            )),
            _ => Ok(()),
        }
    }

    /// A start among `starts` that the writer `end` committed no later than — itself, or one it
    /// reaches over edges that order commits — with the key and the path. Only forward in `rank`
    /// (no path runs from a rank to a lower one), within `budget` edges examined.
    fn no_later(
        &self,
        end: usize,
        starts: &[(usize, u32)],
        rank: &HashMap<usize, usize>,
        budget: &mut usize,
    ) -> Option<(usize, u32, Cycle)> {
        if let Some(&(w, key)) = starts.iter().find(|&&(w, _)| w == end) {
            return Some((w, key, Vec::new()));
        }
        let rank_of = |v: usize| rank.get(&v).copied();
        // Unranked nodes lie on (or after) a cycle, already reported: search them unpruned.
        let targets: Vec<(usize, u32)> = match rank_of(end) {
            Some(r) => starts
                .iter()
                .copied()
                .filter(|&(w, _)| rank_of(w).is_none_or(|rw| rw > r))
                .collect(),
            None => starts.to_vec(),
        };
        let ranks: Option<Vec<usize>> = targets.iter().map(|&(w, _)| rank_of(w)).collect();
        let limit = ranks
            .and_then(|r| r.into_iter().max())
            .filter(|_| rank_of(end).is_some());
        if targets.is_empty() {
            return None;
        }
        let within = |v: usize| limit.is_none_or(|lim| rank_of(v).is_some_and(|r| r <= lim));
        let is_target = |v: usize| targets.iter().any(|&(w, _)| w == v);
        let edge_ok = |from: usize, e: &Edge| self.orders_commits(from, e);
        let (hit, path) = self.bfs_by(end, &is_target, &edge_ok, &within, budget)?;
        let key = targets.iter().find(|&&(w, _)| w == hit).map_or(0, |&(_, k)| k);
        Some((hit, key, path))
    }
}

/// The path `from ->* to` recorded in BFS `parent` links, as steps in forward order.
fn unwind(parent: &HashMap<usize, (usize, Edge)>, from: usize, to: usize) -> Cycle {
    let mut path = Vec::new();
    let mut at = to;
    while at != from {
        let Some(&(prev, e)) = parent.get(&at) else { break };
        path.push((prev, e));
        at = prev;
    }
    path.reverse();
    path
}

/// Nontrivial strongly connected components (more than one node) of `adj`, by an iterative
/// Tarjan: histories have tens of thousands of nodes, too deep for recursion.
fn sccs(adj: &[Vec<usize>]) -> Vec<Vec<usize>> {
    let mut t = Tarjan {
        index: vec![usize::MAX; adj.len()],
        low: vec![0; adj.len()],
        on_stack: vec![false; adj.len()],
        stack: Vec::new(),
        call: Vec::new(),
        next: 0,
    };
    let mut out = Vec::new();
    for root in 0..adj.len() {
        if t.index[root] == usize::MAX {
            t.visit(root);
            t.run(adj, &mut out);
        }
    }
    out
}

/// State of the iterative Tarjan in `sccs`; `call` replaces the recursion stack with
/// (node, next edge to follow) frames.
struct Tarjan {
    index: Vec<usize>,
    low: Vec<usize>,
    on_stack: Vec<bool>,
    stack: Vec<usize>,
    call: Vec<(usize, usize)>,
    next: usize,
}

impl Tarjan {
    fn visit(&mut self, v: usize) {
        self.index[v] = self.next;
        self.low[v] = self.next;
        self.next += 1;
        self.stack.push(v);
        self.on_stack[v] = true;
        self.call.push((v, 0));
    }

    /// Runs the depth-first search until the call stack empties, collecting components into `out`.
    fn run(&mut self, adj: &[Vec<usize>], out: &mut Vec<Vec<usize>>) {
        while let Some(&(v, i)) = self.call.last() {
            if let Some(&w) = adj[v].get(i) {
                if let Some(frame) = self.call.last_mut() {
                    frame.1 += 1;
                }
                if self.index[w] == usize::MAX {
                    self.visit(w);
                } else if self.on_stack[w] {
                    self.low[v] = self.low[v].min(self.index[w]);
                }
                continue;
            }
            self.call.pop();
            if let Some(&(parent, _)) = self.call.last() {
                self.low[parent] = self.low[parent].min(self.low[v]);
            }
            if self.low[v] == self.index[v] {
                let mut comp = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack[w] = false;
                    comp.push(w);
                    if w == v {
                        break;
                    }
                }
                if comp.len() > 1 {
                    out.push(comp);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    use Outcome::{Aborted, Committed, Unknown};

    fn txn(id: usize, outcome: Outcome, span: (u64, u64), ops: Vec<Op>) -> Txn {
        Txn {
            id,
            process: id,
            ops,
            outcome,
            begin: span.0,
            end: span.1,
            snapshot: false,
        }
    }

    fn ok(id: usize, span: (u64, u64), ops: Vec<Op>) -> Txn {
        txn(id, Committed, span, ops)
    }

    fn r(key: u32, seen: &[u64]) -> Op {
        Op::Read {
            key,
            seen: Some(seen.to_vec()),
        }
    }

    fn a(key: u32, val: u64) -> Op {
        Op::Append { key, val }
    }

    fn hist(txns: Vec<Txn>, fin: &[(u32, &[u64])]) -> History {
        History {
            txns,
            final_state: fin.iter().map(|&(k, l)| (k, l.to_vec())).collect(),
        }
    }

    fn kinds(report: &Report) -> BTreeSet<Kind> {
        report.anomalies.iter().map(|a| a.kind.clone()).collect()
    }

    /// Checks `h` and asserts the set of anomaly kinds is exactly `expected`.
    fn assert_kinds(h: &History, expected: &[Kind]) -> Report {
        let report = check(h);
        let want: BTreeSet<Kind> = expected.iter().cloned().collect();
        assert_eq!(kinds(&report), want, "{}", report.summary(h, 5));
        report
    }

    fn only(report: &Report, kind: Kind) -> &Anomaly {
        let found: Vec<&Anomaly> = report.anomalies.iter().filter(|a| a.kind == kind).collect();
        assert_eq!(found.len(), 1, "expected one {kind:?}: {:?}", report.anomalies);
        found[0]
    }

    fn sorted(ids: &[usize]) -> Vec<usize> {
        let mut v = ids.to_vec();
        v.sort_unstable();
        v
    }

    #[test]
    fn clean_serial_history_of_several_processes_and_keys() {
        let h = hist(
            vec![
                Txn {
                    process: 0,
                    ..ok(0, (1, 2), vec![a(0, 1), a(1, 2)])
                },
                Txn {
                    process: 1,
                    ..ok(1, (3, 4), vec![r(0, &[1]), a(0, 3)])
                },
                Txn {
                    process: 2,
                    ..ok(2, (5, 6), vec![r(1, &[2]), r(0, &[1, 3]), a(2, 4)])
                },
                Txn {
                    process: 0,
                    ..ok(3, (7, 8), vec![r(2, &[4]), a(1, 5), r(1, &[2, 5])])
                },
                Txn {
                    process: 1,
                    ..txn(4, Aborted, (9, 10), vec![a(0, 99), r(0, &[1, 3, 99])])
                },
                Txn {
                    process: 2,
                    ..ok(5, (11, 12), vec![r(0, &[1, 3]), r(1, &[2, 5]), r(2, &[4])])
                },
                // Concurrent: T7 serializes before T6 although it ends later.
                Txn {
                    process: 0,
                    ..ok(6, (13, 16), vec![a(2, 6)])
                },
                Txn {
                    process: 1,
                    ..ok(7, (14, 17), vec![r(2, &[4])])
                },
                Txn {
                    process: 2,
                    ..txn(8, Unknown, (18, 19), vec![a(0, 7)])
                },
                Txn {
                    process: 0,
                    ..txn(9, Unknown, (20, 21), vec![a(1, 8), r(9, &[])])
                },
            ],
            &[(0, &[1, 3]), (1, &[2, 5, 8]), (2, &[4, 6])],
        );
        let report = assert_kinds(&h, &[]);
        assert!(report.is_clean());
        assert_eq!((report.committed, report.aborted, report.unknown), (7, 1, 2));
    }

    #[test]
    fn g0_two_txns_append_to_two_keys_in_opposite_orders() {
        let h = hist(
            vec![
                ok(0, (1, 10), vec![a(0, 1), a(1, 2)]),
                ok(1, (2, 9), vec![a(0, 3), a(1, 4)]),
            ],
            &[(0, &[1, 3]), (1, &[4, 2])],
        );
        let report = assert_kinds(&h, &[Kind::G0]);
        let g0 = only(&report, Kind::G0);
        assert_eq!(sorted(&g0.txns), vec![0, 1]);
        assert!(g0.detail.contains("T0 -ww(k0)-> T1 -ww(k1)-> T0"), "{}", g0.detail);
    }

    #[test]
    fn g1a_committed_read_of_an_aborted_append() {
        let h = hist(
            vec![txn(0, Aborted, (1, 2), vec![a(0, 1)]), ok(1, (3, 4), vec![r(0, &[1])])],
            &[(0, &[])],
        );
        let report = assert_kinds(&h, &[Kind::G1a]);
        assert_eq!(only(&report, Kind::G1a).txns, vec![1, 0]);
    }

    #[test]
    fn g1a_committed_read_of_an_unknown_append_absent_from_final() {
        let h = hist(
            vec![txn(0, Unknown, (1, 2), vec![a(0, 1)]), ok(1, (3, 4), vec![r(0, &[1])])],
            &[],
        );
        assert_kinds(&h, &[Kind::G1a]);
    }

    #[test]
    fn present_unknown_txn_counts_as_committed() {
        let h = hist(
            vec![
                txn(0, Unknown, (1, 2), vec![a(0, 1)]),
                ok(1, (3, 4), vec![r(0, &[1]), a(0, 2)]),
            ],
            &[(0, &[1, 2])],
        );
        let report = assert_kinds(&h, &[]);
        assert_eq!(report.unknown, 1);
    }

    #[test]
    fn present_unknown_txn_joins_the_dependency_graph() {
        // Read skew against an unknown-but-present writer: T1 sees T0's k0 append but not its k1 one.
        let h = hist(
            vec![
                txn(0, Unknown, (1, 10), vec![a(0, 1), a(1, 2)]),
                ok(1, (2, 9), vec![r(0, &[1]), r(1, &[])]),
            ],
            &[(0, &[1]), (1, &[2])],
        );
        let report = assert_kinds(&h, &[Kind::GSingle]);
        assert_eq!(sorted(&only(&report, Kind::GSingle).txns), vec![0, 1]);
    }

    #[test]
    fn g1b_intermediate_read() {
        let h = hist(
            vec![ok(0, (1, 10), vec![a(0, 1), a(0, 2)]), ok(1, (2, 9), vec![r(0, &[1])])],
            &[(0, &[1, 2])],
        );
        // Reading T0's intermediate state also means T1 both follows and precedes T0: a G-single cycle.
        let report = assert_kinds(&h, &[Kind::G1b, Kind::GSingle]);
        assert_eq!(only(&report, Kind::G1b).txns, vec![1, 0]);
    }

    #[test]
    fn g1c_circular_information_flow() {
        let h = hist(
            vec![
                ok(0, (1, 10), vec![a(0, 1), r(1, &[2])]),
                ok(1, (2, 9), vec![a(1, 2), r(0, &[1])]),
            ],
            &[(0, &[1]), (1, &[2])],
        );
        let report = assert_kinds(&h, &[Kind::G1c]);
        let detail = &only(&report, Kind::G1c).detail;
        assert!(detail.contains("-wr(k0)->") && detail.contains("-wr(k1)->"), "{detail}");
    }

    #[test]
    fn g_single_read_skew() {
        let h = hist(
            vec![
                ok(0, (1, 10), vec![a(0, 1), a(1, 2)]),
                ok(1, (2, 9), vec![r(0, &[]), r(1, &[2])]),
            ],
            &[(0, &[1]), (1, &[2])],
        );
        let report = assert_kinds(&h, &[Kind::GSingle]);
        let detail = &only(&report, Kind::GSingle).detail;
        assert!(detail.contains("T1 -rw(k0)-> T0 -wr(k1)-> T1"), "{detail}");
    }

    #[test]
    fn g2_item_write_skew() {
        let h = hist(
            vec![
                ok(0, (1, 10), vec![r(0, &[]), a(1, 1)]),
                ok(1, (2, 9), vec![r(1, &[]), a(0, 2)]),
            ],
            &[(0, &[2]), (1, &[1])],
        );
        let report = assert_kinds(&h, &[Kind::G2Item]);
        assert_eq!(only(&report, Kind::G2Item).detail.matches("-rw(").count(), 2);
    }

    #[test]
    fn real_time_stale_read() {
        let h = hist(
            vec![ok(0, (1, 2), vec![a(0, 1)]), ok(1, (3, 4), vec![r(0, &[])])],
            &[(0, &[1])],
        );
        let report = assert_kinds(&h, &[Kind::RealTime]);
        let detail = &only(&report, Kind::RealTime).detail;
        assert!(detail.contains("-rt->") && detail.contains("-rw(k0)->"), "{detail}");
    }

    #[test]
    fn real_time_order_is_transitive_through_other_processes() {
        // T0 ends before T1 begins, T1 ends before T2 begins: the reduction links T0 to T2 via T1.
        let h = hist(
            vec![
                ok(0, (1, 2), vec![a(0, 1)]),
                ok(1, (3, 5), vec![r(1, &[])]),
                ok(2, (6, 7), vec![r(0, &[])]),
            ],
            &[(0, &[1])],
        );
        let report = assert_kinds(&h, &[Kind::RealTime]);
        let rt = only(&report, Kind::RealTime);
        assert_eq!(sorted(&rt.txns), vec![0, 1, 2], "{}", rt.detail);
    }

    #[test]
    fn overlapping_txns_have_no_real_time_order() {
        // Equal end/begin times do not order txns: T1 may serialize first.
        let h = hist(
            vec![ok(0, (1, 3), vec![a(0, 1)]), ok(1, (3, 4), vec![r(0, &[])])],
            &[(0, &[1])],
        );
        assert_kinds(&h, &[]);
    }

    #[test]
    fn internal_inconsistency_within_one_txn() {
        let h = hist(vec![ok(0, (1, 2), vec![a(0, 1), r(0, &[])])], &[(0, &[1])]);
        let report = assert_kinds(&h, &[Kind::Internal]);
        assert_eq!(only(&report, Kind::Internal).txns, vec![0]);
        // A second read must equal the first plus the txn's own appends since.
        let h = hist(
            vec![ok(0, (1, 2), vec![a(0, 1)]), ok(1, (3, 4), vec![r(0, &[]), r(0, &[1])])],
            &[(0, &[1])],
        );
        assert_eq!(check(&h).count(Kind::Internal), 1);
        let h = hist(
            vec![ok(
                0,
                (1, 2),
                vec![r(0, &[]), a(0, 1), r(0, &[1]), a(0, 2), r(0, &[1, 2])],
            )],
            &[(0, &[1, 2])],
        );
        assert_kinds(&h, &[]);
    }

    #[test]
    fn incompatible_order_read_not_a_prefix() {
        let h = hist(
            vec![
                ok(0, (1, 2), vec![a(0, 1)]),
                ok(1, (3, 4), vec![a(0, 2)]),
                ok(2, (5, 6), vec![r(0, &[2])]),
            ],
            &[(0, &[1, 2])],
        );
        let report = assert_kinds(&h, &[Kind::IncompatibleOrder]);
        assert_eq!(only(&report, Kind::IncompatibleOrder).txns, vec![2]);
    }

    #[test]
    fn lost_write() {
        let h = hist(vec![ok(0, (1, 2), vec![a(0, 1), a(1, 2)])], &[(0, &[]), (1, &[2])]);
        let report = assert_kinds(&h, &[Kind::LostWrite]);
        assert!(only(&report, Kind::LostWrite).detail.contains("(0, 1)"));
    }

    #[test]
    fn duplicate_in_final_and_in_read() {
        let h = hist(vec![ok(0, (1, 2), vec![a(0, 1)])], &[(0, &[1, 1])]);
        assert_kinds(&h, &[Kind::Duplicate]);
        let h = hist(
            vec![ok(0, (1, 2), vec![a(0, 1)]), ok(1, (3, 4), vec![r(0, &[1, 1])])],
            &[(0, &[1, 1])],
        );
        assert_eq!(check(&h).count(Kind::Duplicate), 2);
    }

    #[test]
    fn aborted_write_visible_in_final() {
        let h = hist(vec![txn(0, Aborted, (1, 2), vec![a(0, 1)])], &[(0, &[1])]);
        let report = assert_kinds(&h, &[Kind::AbortedWriteVisible]);
        assert_eq!(only(&report, Kind::AbortedWriteVisible).txns, vec![0]);
    }

    #[test]
    fn partial_unknown() {
        let h = hist(
            vec![txn(0, Unknown, (1, 2), vec![a(0, 1), a(1, 2)])],
            &[(0, &[1]), (1, &[])],
        );
        let report = assert_kinds(&h, &[Kind::PartialUnknown]);
        assert_eq!(only(&report, Kind::PartialUnknown).txns, vec![0]);
    }

    #[test]
    fn unknown_value_in_final_and_in_read_does_not_panic() {
        let h = hist(vec![ok(0, (1, 2), vec![a(0, 1)])], &[(0, &[1, 7])]);
        assert_kinds(&h, &[Kind::UnknownValue]);
        let h = hist(vec![ok(0, (1, 2), vec![r(0, &[99]), r(5, &[])])], &[]);
        let report = assert_kinds(&h, &[Kind::UnknownValue]);
        assert!(only(&report, Kind::UnknownValue).detail.contains("99"));
    }

    #[test]
    fn summary_names_kinds_cycles_and_txns() {
        let h = hist(
            vec![ok(0, (1, 2), vec![a(0, 1)]), ok(1, (3, 4), vec![r(0, &[])])],
            &[(0, &[1])],
        );
        let summary = check(&h).summary(&h, 3);
        assert!(summary.contains("  RealTime: 1"), "{summary}");
        assert!(summary.contains("RealTime #1: T"), "{summary}");
        assert!(summary.contains("T0 p0 Committed [1,2] a(0,1)"), "{summary}");
        assert!(summary.contains("T1 p1 Committed [3,4] r(0)=[]"), "{summary}");
        assert_eq!(fmt_tail(&[1, 2, 3, 4, 5, 6], 4), "[..(2 more),3,4,5,6]");
    }

    #[test]
    fn sccs_is_iterative_on_a_long_cycle_and_ignores_chains() {
        let n = 100_000;
        let ring: Vec<Vec<usize>> = (0..n).map(|i| vec![(i + 1) % n]).collect();
        let comps = sccs(&ring);
        assert_eq!(comps.len(), 1);
        assert_eq!(comps[0].len(), n);
        let chain: Vec<Vec<usize>> = (0..n).map(|i| if i + 1 < n { vec![i + 1] } else { vec![] }).collect();
        assert!(sccs(&chain).is_empty());
    }

    /// xorshift64: deterministic and dependency-free.
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
    }

    /// A history from a serial simulator: each txn takes effect atomically at a linearization
    /// point inside its [begin, end] interval, so intervals of the processes overlap in time
    /// while the effects stay serial (and consistent with real time).
    fn serial_history(n_txns: usize, processes: usize, keys: u32, seed: u64) -> History {
        let mut rng = Rng(seed);
        let mut state: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
        let (mut last_end, mut clock, mut next_val) = (vec![0u64; processes], 100u64, 1u64);
        let mut txns = Vec::new();
        while txns.len() < n_txns {
            clock += 4;
            let start = rng.below(processes as u64) as usize;
            let idle = (0..processes)
                .map(|i| (start + i) % processes)
                .find(|&p| last_end[p] + 1 < clock);
            let Some(p) = idle else { continue };
            let begin = (last_end[p] + 1).max(clock - 1 - rng.below(20));
            let end = clock + 1 + rng.below(20);
            last_end[p] = end;
            let outcome = match rng.below(10) {
                0 => Aborted,
                1 => Unknown,
                _ => Committed,
            };
            let applied = outcome == Committed || (outcome == Unknown && rng.below(2) == 0);
            let mut own: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
            let mut ops = Vec::new();
            for _ in 0..1 + rng.below(4) {
                let key = rng.below(u64::from(keys)) as u32;
                if rng.below(2) == 0 {
                    let seen = [
                        state.get(&key).map_or(&[][..], Vec::as_slice),
                        own.get(&key).map_or(&[][..], Vec::as_slice),
                    ]
                    .concat();
                    ops.push(r(key, &seen));
                } else {
                    own.entry(key).or_default().push(next_val);
                    ops.push(a(key, next_val));
                    next_val += 1;
                }
            }
            if applied {
                for (key, vals) in own {
                    state.entry(key).or_default().extend(vals);
                }
            }
            txns.push(Txn {
                process: p,
                ..txn(txns.len(), outcome, (begin, end), ops)
            });
        }
        History {
            txns,
            final_state: state,
        }
    }

    /// A committed snapshot transaction.
    fn snap(id: usize, span: (u64, u64), ops: Vec<Op>) -> Txn {
        Txn {
            snapshot: true,
            ..ok(id, span, ops)
        }
    }

    #[test]
    fn snapshot_with_a_fractured_read_of_one_commit() {
        // T0 appends to k0 and k1 in one commit; the snapshot sees k1 after it and k0 before.
        let h = hist(
            vec![
                ok(0, (1, 10), vec![a(0, 1), a(1, 2)]),
                snap(1, (2, 9), vec![r(0, &[]), r(1, &[2])]),
            ],
            &[(0, &[1]), (1, &[2])],
        );
        let report = assert_kinds(&h, &[Kind::Snapshot, Kind::GSingle]);
        let found = only(&report, Kind::Snapshot);
        assert_eq!(found.txns, vec![1, 0]);
        assert!(found.detail.contains("fractured"), "{}", found.detail);
    }

    #[test]
    fn snapshot_with_a_fractured_read_across_dependent_commits() {
        // T1 read T0's append before its own: a state with T1's commit but not T0's never existed.
        let h = hist(
            vec![
                ok(0, (1, 10), vec![a(0, 1)]),
                ok(1, (2, 11), vec![r(0, &[1]), a(1, 2)]),
                snap(2, (3, 12), vec![r(0, &[]), r(1, &[2])]),
            ],
            &[(0, &[1]), (1, &[2])],
        );
        let report = assert_kinds(&h, &[Kind::Snapshot, Kind::GSingle]);
        let detail = &only(&report, Kind::Snapshot).detail;
        assert!(detail.contains("T0 -wr(k0)-> T1"), "{detail}");
    }

    #[test]
    fn snapshot_fractured_across_commits_ordered_only_by_real_time() {
        // T0 returned before T1 began; the snapshot overlaps both and sees T1 without T0.
        let h = hist(
            vec![
                ok(0, (1, 3), vec![a(0, 1)]),
                ok(1, (4, 5), vec![a(1, 2)]),
                snap(2, (2, 6), vec![r(0, &[]), r(1, &[2])]),
            ],
            &[(0, &[1]), (1, &[2])],
        );
        let report = assert_kinds(&h, &[Kind::Snapshot, Kind::RealTime]);
        let detail = &only(&report, Kind::Snapshot).detail;
        assert!(detail.contains("T0 -rt-> T1"), "{detail}");
    }

    #[test]
    fn snapshot_reading_a_list_that_never_existed() {
        // k0 went [] -> [1] -> [1, 2]: [2] was never its state.
        let h = hist(
            vec![
                ok(0, (1, 2), vec![a(0, 1)]),
                ok(1, (3, 4), vec![a(0, 2)]),
                snap(2, (5, 6), vec![r(0, &[2])]),
            ],
            &[(0, &[1, 2])],
        );
        let report = assert_kinds(&h, &[Kind::Snapshot, Kind::IncompatibleOrder]);
        assert!(only(&report, Kind::Snapshot).detail.contains("never had"));
        // Half of one commit: T0 appended 1 and 2 to k0 together.
        let h = hist(
            vec![
                ok(0, (1, 10), vec![a(0, 1), a(0, 2)]),
                snap(1, (2, 9), vec![r(0, &[1])]),
            ],
            &[(0, &[1, 2])],
        );
        let report = assert_kinds(&h, &[Kind::Snapshot, Kind::G1b, Kind::GSingle]);
        assert!(only(&report, Kind::Snapshot).detail.contains("half of one commit"));
    }

    #[test]
    fn snapshot_that_changed_something() {
        let h = hist(vec![snap(0, (1, 2), vec![a(0, 1)])], &[(0, &[1])]);
        assert_kinds(&h, &[Kind::Snapshot]);
    }

    #[test]
    fn snapshot_of_unordered_commits_in_either_order_is_clean() {
        // T0 and T1 overlap and touch different keys: the snapshot may see T1 and not T0.
        let h = hist(
            vec![
                ok(0, (1, 5), vec![a(0, 1)]),
                ok(1, (2, 4), vec![a(1, 2)]),
                snap(2, (3, 6), vec![r(0, &[]), r(1, &[2])]),
                snap(3, (7, 8), vec![r(0, &[1]), r(1, &[2])]),
            ],
            &[(0, &[1]), (1, &[2])],
        );
        let report = assert_kinds(&h, &[]);
        assert_eq!(report.snapshots, 2);
    }

    #[test]
    fn stale_snapshot_is_its_own_kind_and_reading_the_future_is_a_cycle() {
        // The snapshot began after T0's commit returned but did not see it.
        let h = hist(
            vec![ok(0, (1, 2), vec![a(0, 1)]), snap(1, (3, 4), vec![r(0, &[])])],
            &[(0, &[1])],
        );
        let report = assert_kinds(&h, &[Kind::StaleSnapshot]);
        assert_eq!(only(&report, Kind::StaleSnapshot).txns, vec![1, 0]);
        // The snapshot ended before T1 began but saw its append.
        let h = hist(
            vec![snap(0, (1, 2), vec![r(0, &[1])]), ok(1, (3, 4), vec![a(0, 1)])],
            &[(0, &[1])],
        );
        assert_kinds(&h, &[Kind::RealTime]);
    }

    #[test]
    fn long_generated_serial_history_is_clean() {
        let h = serial_history(5_000, 8, 10, 0x9E37_79B9_7F4A_7C15);
        let report = check(&h);
        assert!(report.is_clean(), "{}", report.summary(&h, 3));
        assert_eq!(report.committed + report.aborted + report.unknown, 5_000);
        assert!(report.committed > 3_500, "{} committed", report.committed);
    }

    #[test]
    fn long_generated_serial_history_with_its_readers_as_snapshots_is_clean() {
        // Each read-only txn read the state at its linearization point: a legal snapshot.
        let mut h = serial_history(5_000, 8, 10, 0x5EED);
        for t in &mut h.txns {
            t.snapshot = t.outcome == Committed && t.ops.iter().all(|op| matches!(op, Op::Read { .. }));
        }
        let report = check(&h);
        assert!(report.is_clean(), "{}", report.summary(&h, 3));
        assert!(report.snapshots > 500, "{} snapshots", report.snapshots);
    }

    /// A committed txn whose first op reads more than 5 values of a key it touches nowhere else.
    fn lone_long_first_read(t: &Txn) -> bool {
        let Some(Op::Read { key, seen: Some(seen) }) = t.ops.first() else {
            return false;
        };
        let touches = |op: &&Op| matches!(op, Op::Read { key: k, .. } | Op::Append { key: k, .. } if k == key);
        t.outcome == Committed && seen.len() > 5 && t.ops.iter().filter(touches).count() == 1
    }

    #[test]
    fn stale_read_injected_into_a_generated_history_is_a_cycle() {
        let mut h = serial_history(2_000, 8, 4, 42);
        // A late committed txn whose only op on some key is a long read: make it see nothing.
        let target = (1_000..h.txns.len()).find(|&i| lone_long_first_read(&h.txns[i]));
        let Some(i) = target else {
            panic!("the generator produced no suitable read")
        };
        if let Some(Op::Read { seen, .. }) = h.txns[i].ops.first_mut() {
            *seen = Some(Vec::new());
        }
        let report = check(&h);
        let cycles = [Kind::G0, Kind::G1c, Kind::GSingle, Kind::G2Item, Kind::RealTime];
        let hit = report
            .anomalies
            .iter()
            .any(|a| cycles.contains(&a.kind) && a.txns.contains(&h.txns[i].id));
        assert!(hit, "{}", report.summary(&h, 3));
    }
}
