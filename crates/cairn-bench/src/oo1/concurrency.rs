//! `cairn bench oo1 --clients 1,4,16`: many clients on one page server.
//!
//! After the normal run, `cairn-page`'s database is served by one new
//! `cairn serve` process; for each N in the list, N threads each open their
//! own [`cairn::Database::connect`] (their own session on the server) and run
//! the same number of operations, all at once, in two modes:
//!
//! - **reads**: OO1 lookups (1,000 random parts through the index) and
//!   forward traversals (7 hops), alternating;
//! - **cold reads**: the same reads, each begun with the client's cache
//!   dropped ([`cairn::Database::clear_caches`]), so every page it touches
//!   is fetched from the server: this is the mode that loads the server's
//!   shared state (lock table, buffer pool, callback table) from every
//!   session at once, where warm reads never reach the server;
//! - **mixed**: lookup, traversal, insert (100 new parts, committed) in turn.
//!
//! Every operation is the one the single-client harness runs — the very
//! [`System`] methods of [`Cairn`] — over a [`Connected`] deployment. Each
//! client first runs its read operations once untimed (warm), then all
//! start together at a barrier. A deadlock or lock timeout aborts the
//! operation's transaction (dropping it aborts it), and the operation is
//! retried and counted.
//!
//! Invariant: every read operation visits exactly what the in-memory floor
//! visits for the same choices (inserted parts are only ever reached
//! backwards, and no read here goes backwards), so concurrent sessions that
//! answered wrongly fail the run. Each client's choices come from
//! [`client_ops`], so a test can replay them on a single client.

use std::sync::Barrier;
use std::time::Instant;

use super::generate::{self, Graph, PartSpec, TRAVERSAL_HOPS};
use super::rng::ParkMiller;
use super::system::{Counters, Error, Result, System, Visits};
use super::systems::cairn_page::ServerProcess;
use super::systems::cairn_typed::{options, Cairn, Deployment};
use super::systems::memory::InMemory;
use super::workload::{run_seed, Measure};

/// What the clients run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Lookups and traversals.
    Reads,
    /// Lookups and traversals, each from an empty client cache.
    ColdReads,
    /// Lookups, traversals and inserts.
    Mixed,
}

impl Mode {
    /// The name in reports and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Reads => "reads",
            Mode::ColdReads => "cold reads",
            Mode::Mixed => "mixed",
        }
    }
}

/// One operation: one transaction of the single-client harness.
#[derive(Clone, Debug)]
pub enum Op {
    /// Fetch these parts by id.
    Lookup(Vec<u32>),
    /// Traverse forward from this part.
    Traversal(u32),
    /// Insert these parts.
    Insert(Vec<PartSpec>),
}

impl Op {
    /// Runs the operation on `sys`.
    pub fn run(&self, sys: &mut dyn System) -> Result<Visits> {
        match self {
            Op::Lookup(ids) => sys.lookup(ids),
            Op::Traversal(start) => sys.traversal(*start, TRAVERSAL_HOPS),
            Op::Insert(parts) => sys.insert(parts),
        }
    }
}

/// The `count` operations of client `client` in `mode`, on a database of
/// `n` parts. Inserted parts take ids from `first_new_id` on, 100 per
/// insert, so no two clients (given disjoint ranges) insert the same id.
pub fn client_ops(seed: u64, n: u32, client: usize, count: usize, mode: Mode, first_new_id: u32) -> Vec<Op> {
    let kinds: &[Measure] = match mode {
        Mode::Reads | Mode::ColdReads => &[Measure::Lookup, Measure::Traversal],
        Mode::Mixed => &[Measure::Lookup, Measure::Traversal, Measure::Insert],
    };
    let mut next_id = first_new_id;
    (0..count)
        .map(|k| {
            let measure = kinds[k % kinds.len()];
            // Runs 1000.. are the harness's own runs' seeds never reach.
            let mut rng = ParkMiller::new(run_seed(seed, measure, 1_000 + client * count + k));
            match measure {
                Measure::Lookup => Op::Lookup(generate::lookup_ids(&mut rng, n)),
                Measure::Insert => {
                    let batch = renumber(generate::insert_batch(&mut rng, n), n, next_id);
                    next_id += generate::INSERT_PARTS as u32;
                    Op::Insert(batch)
                }
                _ => Op::Traversal(rng.rand(n)),
            }
        })
        .collect()
}

/// Moves a batch made for ids `n+1..` to ids `first..`, keeping its
/// connections among its own parts.
fn renumber(mut batch: Vec<PartSpec>, n: u32, first: u32) -> Vec<PartSpec> {
    let shift = |id: u32| if id > n { id - n - 1 + first } else { id };
    for p in &mut batch {
        p.id = shift(p.id);
        for c in &mut p.to {
            c.to = shift(c.to);
        }
    }
    batch
}

/// A client of a server that is already running: `cairn-page`'s model and
/// operations, one session.
pub struct Connected {
    url: String,
}

impl Deployment for Connected {
    const NAME: &'static str = "cairn-page";
    const BUILD_TXN_PARTS: usize = 10_000;

    fn create(&mut self) -> Result<cairn::Database> {
        Err(Error::InvalidArgument(
            "a concurrency client does not create databases".into(),
        ))
    }

    fn close(&mut self, db: cairn::Database) -> Result<()> {
        Ok(db.close()?)
    }

    fn open_cold(&mut self) -> Result<cairn::Database> {
        Ok(cairn::Database::connect(&self.url, options())?)
    }

    fn size_on_disk_bytes(&self) -> Option<u64> {
        None
    }
}

/// What one client measured.
#[derive(Clone, Debug, Default)]
pub struct ClientResult {
    /// Each timed operation's latency, milliseconds (retries included).
    pub latencies_ms: Vec<f64>,
    /// Each timed operation's visits, in order.
    pub visits: Vec<Visits>,
    /// The digests of the lookups among them, in order.
    pub lookup_digests: Vec<u64>,
    /// Deadlocks and lock timeouts retried.
    pub retries: Retries,
    /// The client's counters over the timed operations.
    pub counters: Counters,
}

/// Operations aborted and retried, by cause.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Retries {
    /// Chosen as a deadlock victim.
    pub deadlocks: u64,
    /// A lock wait timed out.
    pub lock_timeouts: u64,
}

/// One N in one mode.
#[derive(Clone, Debug)]
pub struct ConcurrencyRow {
    /// Concurrent clients.
    pub clients: usize,
    /// Reads, cold reads or mixed.
    pub mode: Mode,
    /// Operations, all clients.
    pub ops: usize,
    /// Wall time from the barrier to the last client's end, seconds.
    pub wall_s: f64,
    /// Each client's results.
    pub per_client: Vec<ClientResult>,
}

impl ConcurrencyRow {
    /// Operations per second, all clients together.
    pub fn ops_per_s(&self) -> f64 {
        self.ops as f64 / self.wall_s.max(1e-9)
    }

    /// The median latency of one operation, milliseconds.
    pub fn median_ms(&self) -> f64 {
        let mut all: Vec<f64> = self
            .per_client
            .iter()
            .flat_map(|c| c.latencies_ms.iter().copied())
            .collect();
        all.sort_by(f64::total_cmp);
        all.get(all.len() / 2).copied().unwrap_or(0.0)
    }

    /// Round trips per operation.
    pub fn round_trips_per_op(&self) -> f64 {
        let rt: u64 = self
            .per_client
            .iter()
            .map(|c| c.counters.0.get("round_trips").copied().unwrap_or(0))
            .sum();
        rt as f64 / self.ops.max(1) as f64
    }

    /// Deadlocks and lock timeouts retried, all clients.
    pub fn retries(&self) -> Retries {
        self.per_client.iter().fold(Retries::default(), |a, c| Retries {
            deadlocks: a.deadlocks + c.retries.deadlocks,
            lock_timeouts: a.lock_timeouts + c.retries.lock_timeouts,
        })
    }
}

/// Attempts of one operation before a deadlock or timeout is an error.
const ATTEMPTS_MAX: u32 = 100;

/// Runs `op`, retrying deadlocks and lock timeouts after a random pause of
/// up to 2^attempt ms (at most about 1 s) drawn from `jitter`: two inserts
/// that deadlock and retry at once deadlock again, every time (seen with two
/// clients: each takes the hot parts' page, then wants the index's), and 16
/// inserters still exhausted 100 attempts with pauses of at most 64 ms.
fn run_retrying(sys: &mut dyn System, op: &Op, jitter: &mut ParkMiller, retries: &mut Retries) -> Result<Visits> {
    let mut attempt = 1;
    loop {
        match op.run(sys) {
            Err(Error::Cairn(e)) if e.is_retryable() && attempt < ATTEMPTS_MAX => {
                if matches!(e, cairn::Error::Deadlock { .. }) {
                    retries.deadlocks += 1;
                } else {
                    retries.lock_timeouts += 1;
                }
                let pause_ms = jitter.rand(1 << attempt.min(10));
                std::thread::sleep(std::time::Duration::from_millis(u64::from(pause_ms)));
                attempt += 1;
            }
            other => return other,
        }
    }
}

/// Connects and runs the read operations of `ops` once, untimed.
fn warm_up(sys: &mut Cairn<Connected>, ops: &[Op], jitter: &mut ParkMiller) -> Result<()> {
    sys.open_cold()?;
    let mut retries = Retries::default();
    for op in ops.iter().filter(|op| !matches!(op, Op::Insert(_))) {
        run_retrying(sys, op, jitter, &mut retries)?;
    }
    Ok(())
}

/// One client: connect, warm up on the reads, wait for the others, run.
fn client(url: &str, mode: Mode, ops: &[Op], jitter_seed: u64, start: &Barrier) -> Result<ClientResult> {
    let mut sys = Cairn::new(Connected { url: url.to_string() });
    let mut jitter = ParkMiller::new(jitter_seed);
    let ready = warm_up(&mut sys, ops, &mut jitter);
    // Everyone reaches the barrier, failed or not, so no thread waits forever.
    start.wait();
    ready?;
    let mut out = ClientResult::default();
    let before = sys.counters();
    for op in ops {
        let t = Instant::now();
        if mode == Mode::ColdReads {
            sys.clear_caches()?;
        }
        let v = run_retrying(&mut sys, op, &mut jitter, &mut out.retries)?;
        out.latencies_ms.push(t.elapsed().as_secs_f64() * 1e3);
        out.visits.push(v);
        if let Op::Lookup(_) = op {
            out.lookup_digests.push(v.digest);
        }
    }
    out.counters = sys.counters().since(&before);
    sys.close()?;
    Ok(out)
}

/// Runs `clients` clients at once in `mode`, `ops` operations each, new
/// parts from `first_new_id` on.
fn run_one(
    url: &str,
    graph: &Graph,
    seed: u64,
    clients: usize,
    ops: usize,
    mode: Mode,
    first_new_id: u32,
) -> Result<ConcurrencyRow> {
    let n = graph.part_count();
    let per_client_ids = (ops * generate::INSERT_PARTS) as u32;
    let plans: Vec<Vec<Op>> = (0..clients)
        .map(|c| client_ops(seed, n, c, ops, mode, first_new_id + c as u32 * per_client_ids))
        .collect();
    let start = Barrier::new(clients + 1);
    let (wall_s, results) = std::thread::scope(|s| {
        let handles: Vec<_> = plans
            .iter()
            .enumerate()
            .map(|(c, plan)| {
                let start = &start;
                s.spawn(move || client(url, mode, plan, run_seed(seed, Measure::Insert, 100_000 + c), start))
            })
            .collect();
        start.wait();
        let t = Instant::now();
        let results: Vec<Result<ClientResult>> = handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(Error::Server("a client thread panicked".into())))
            })
            .collect();
        (t.elapsed().as_secs_f64(), results)
    });
    let per_client = results.into_iter().collect::<Result<Vec<_>>>()?;
    verify(graph, &plans, &per_client)?;
    Ok(ConcurrencyRow {
        clients,
        mode,
        ops: clients * ops,
        wall_s,
        per_client,
    })
}

/// Fails unless every client's reads visited what the in-memory floor
/// visits, and every insert visited its 100 parts.
fn verify(graph: &Graph, plans: &[Vec<Op>], results: &[ClientResult]) -> Result<()> {
    let mut floor = InMemory::new();
    floor.build(graph)?;
    for (c, (plan, r)) in plans.iter().zip(results).enumerate() {
        for (k, (op, got)) in plan.iter().zip(&r.visits).enumerate() {
            let want = match op {
                Op::Insert(parts) => Visits {
                    count: parts.len() as u64,
                    digest: got.digest,
                },
                read => read.run(&mut floor)?,
            };
            if *got != want {
                return Err(Error::Wrong {
                    system: "cairn-page".into(),
                    reason: format!("client {c} operation {k} ({op:?}) visited {got:?}, the floor {want:?}"),
                });
            }
        }
    }
    Ok(())
}

/// Serves the (closed) `cairn-page` database in `dir` with `exe` and runs
/// every N of `clients` in both modes, `ops` operations per client.
pub fn run(
    exe: &std::path::Path,
    dir: &std::path::Path,
    graph: &Graph,
    seed: u64,
    clients: &[usize],
    ops: usize,
) -> Result<Vec<ConcurrencyRow>> {
    if clients.contains(&0) || ops == 0 {
        return Err(Error::InvalidArgument(
            "--clients and --client-ops must be at least 1".into(),
        ));
    }
    let server = ServerProcess::start(exe, dir)?;
    let mut rows = Vec::new();
    let mut first_new_id = graph.part_count() + 1;
    for mode in [Mode::Reads, Mode::ColdReads, Mode::Mixed] {
        for &n in clients {
            rows.push(run_one(&server.url, graph, seed, n, ops, mode, first_new_id)?);
            first_new_id += (n * ops * generate::INSERT_PARTS) as u32;
        }
    }
    server.stop()?;
    Ok(rows)
}
