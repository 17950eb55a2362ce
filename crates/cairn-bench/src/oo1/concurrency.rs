//! `cairn bench oo1 --clients 1,4,16`: many clients at once, on every Cairn
//! architecture.
//!
//! After the normal run, each Cairn system of `--systems` opens its
//! database again, and for each N in the list N clients run the same number
//! of operations at once:
//!
//! - `cairn-page`, `cairn-file`, `cairn-object`, `cairn-adaptive`: one new
//!   `cairn serve` process on the system's directory; each client is a
//!   thread with its own [`cairn::Database::connect`] session, of the client
//!   kind the system's single-client deployment connects with
//!   ([`served_arch`]);
//! - `cairn-embedded` (and `cairn-embedded-pagelocks`, `cairn-embedded-keyranges`, if selected): the
//!   database opened once in this process; each client is a thread running
//!   its own transactions on that one shared [`cairn::Database`].
//!
//! Lookups and traversals run in read-only transactions at a snapshot
//! ([`cairn::Database::begin_read_only`]: no locks), as a user browsing
//! would, on every system; a snapshot reads from the client's cache what
//! it sees there (a page client the pages it caches under rights when the
//! snapshot sees their LSN; an object or adaptive client the objects and
//! lookups it kept under rights taken in before the snapshot began).
//!
//! The modes:
//!
//! - **reads**: OO1 lookups (1,000 random parts through the index) and
//!   forward traversals (7 hops), alternating;
//! - **cold reads**: the same reads, each begun with the client's cache
//!   dropped ([`cairn::Database::clear_caches`]), so every page it touches
//!   is fetched from the server: this is the mode that loads the server's
//!   shared state (lock table, buffer pool, callback table) from every
//!   session at once, where warm reads never reach the server. Embedded,
//!   the caches are the process's, shared by the threads: each drop empties
//!   them for all, and the pages come back from the operating system's cache;
//! - **mixed**: lookup, traversal, insert (100 new parts, committed) in turn;
//! - **browse** (browse while others write): client 0 is a designer browsing
//!   an assembly — it opens a part and walks everything it is built of, 7
//!   levels down (the OO1 traversal: 3,280 parts, one transaction that
//!   changes nothing), again and again from other parts — while clients
//!   1..N-1 each insert 100 parts per transaction. The reader keeps
//!   browsing as long as a writer is still at work (at least once), so its
//!   traversals are timed under the writers' load. The same run also
//!   measures the reader alone (browse with N = 1) and, for each N, its N-1
//!   writers without the reader (**writers alone**: the same inserts, with
//!   new ids), so that the reader's traversal time with writers against its
//!   time alone, and the writers' throughput against theirs without the
//!   reader, are ratios of one run.
//!
//! Every operation is the one the single-client harness runs — the very
//! operations of [`CairnOn`] that [`super::systems::cairn_typed::Cairn`]
//! runs. Each client first runs its read operations once untimed (warm),
//! then all start together at a barrier. A deadlock or lock timeout aborts
//! the operation's transaction (dropping it aborts it), and the operation is
//! retried and counted. The lock manager's counters — the server's, read
//! by a session of its own with [`cairn::Database::server_lock_stats`], or
//! the embedded database's — are read before and after each run, for the
//! time lock requests waited per operation.
//!
//! Invariant: every read operation visits exactly what the in-memory floor
//! visits for the same choices (inserted parts are only ever reached
//! backwards, and no read here goes backwards), so concurrent clients that
//! answered wrongly fail the run, on every system. Each client's choices
//! come from [`client_ops`], so a test can replay them on a single client.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Barrier;
use std::time::Instant;

use cairn::storage::lock::LockStats;
use cairn::{Arch, Database};

use super::generate::{self, Graph, PartSpec, TRAVERSAL_HOPS};
use super::rng::ParkMiller;
use super::system::{Counters, Error, Result, System, Visits};
use super::systems::cairn_page::{served_arch, serves_key_ranges, ServerProcess};
use super::systems::cairn_typed::{options, CairnOn, Part};
use super::systems::database_dir;
use super::systems::memory::InMemory;
use super::workload::{run_seed, Measure};

/// The systems `--clients` measures (those of `--systems` among them run).
pub const SYSTEMS: [&str; 11] = [
    "cairn-embedded",
    "cairn-embedded-pagelocks",
    "cairn-embedded-keyranges",
    "cairn-page",
    "cairn-file",
    "cairn-object",
    "cairn-adaptive",
    "cairn-page-keyranges",
    "cairn-file-keyranges",
    "cairn-object-keyranges",
    "cairn-adaptive-keyranges",
];

/// The operations of `system` on `db`: lookups and traversals run in
/// read-only transactions at a snapshot (no locks), as a user would run
/// them, on every system — each reads from its client's cache what the
/// snapshot sees there (see the module docs).
fn on<'a>(system: &'static str, db: &'a cairn::Database) -> CairnOn<'a> {
    CairnOn::new(system, db).reading_at_snapshots()
}

/// What the clients run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Lookups and traversals.
    Reads,
    /// Lookups and traversals, each from an empty client cache.
    ColdReads,
    /// Lookups, traversals and inserts.
    Mixed,
    /// Client 0 traverses while the others insert (N = 1: the reader alone).
    Browse,
    /// Inserts only: the writers of a browse run without its reader.
    Writers,
}

impl Mode {
    /// The name in reports and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Reads => "reads",
            Mode::ColdReads => "cold reads",
            Mode::Mixed => "mixed",
            Mode::Browse => "browse",
            Mode::Writers => "writers alone",
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
/// In [`Mode::Browse`] client 0 traverses and the others insert; in
/// [`Mode::Writers`] client `c` makes the choices of browse's writer `c + 1`.
pub fn client_ops(seed: u64, n: u32, client: usize, count: usize, mode: Mode, first_new_id: u32) -> Vec<Op> {
    let kinds: &[Measure] = match mode {
        Mode::Reads | Mode::ColdReads => &[Measure::Lookup, Measure::Traversal],
        Mode::Mixed => &[Measure::Lookup, Measure::Traversal, Measure::Insert],
        Mode::Browse if client == 0 => &[Measure::Traversal],
        Mode::Browse | Mode::Writers => &[Measure::Insert],
    };
    let chooser = if mode == Mode::Writers { client + 1 } else { client };
    let mut next_id = first_new_id;
    (0..count)
        .map(|k| {
            let measure = kinds[k % kinds.len()];
            // Runs 1000.. are the harness's own runs' seeds never reach.
            let mut rng = ParkMiller::new(run_seed(seed, measure, 1_000 + chooser * count + k));
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
    /// The client's counters over the timed operations (embedded, the
    /// shared database's: every thread's together).
    pub counters: Counters,
    /// Seconds from the run's start (the first client's) to the end of its
    /// last operation.
    pub elapsed_s: f64,
}

/// Operations aborted and retried, by cause.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Retries {
    /// Chosen as a deadlock victim.
    pub deadlocks: u64,
    /// A lock wait timed out.
    pub lock_timeouts: u64,
}

/// Figures over some clients of a run: all of them, or a browse run's
/// reader or its writers.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Summary {
    /// Clients.
    pub clients: usize,
    /// Operations they ran.
    pub ops: usize,
    /// Seconds from the common start to the last of them ending.
    pub wall_s: f64,
    /// The median latency of one operation, milliseconds.
    pub median_ms: f64,
    /// The 99th percentile latency (nearest rank), milliseconds.
    pub p99_ms: f64,
    /// Deadlocks and lock timeouts they retried.
    pub retries: Retries,
    /// Round trips they made (a served system's).
    pub round_trips: u64,
    /// Callbacks their sessions answered (a served system's): rights to
    /// what they kept, taken back for another client's writer.
    pub callbacks: u64,
}

impl Summary {
    /// The figures of `clients`.
    fn of<'a>(clients: impl IntoIterator<Item = &'a ClientResult>) -> Summary {
        let mut s = Summary::default();
        let mut all = Vec::new();
        for c in clients {
            s.clients += 1;
            s.ops += c.latencies_ms.len();
            s.wall_s = s.wall_s.max(c.elapsed_s);
            s.retries.deadlocks += c.retries.deadlocks;
            s.retries.lock_timeouts += c.retries.lock_timeouts;
            let counter = |name| c.counters.0.get(name).copied().unwrap_or(0);
            s.round_trips += counter("round_trips");
            s.callbacks += counter("callbacks");
            all.extend_from_slice(&c.latencies_ms);
        }
        all.sort_by(f64::total_cmp);
        s.median_ms = all.get(all.len() / 2).copied().unwrap_or(0.0);
        // Nearest rank: the smallest latency at least 99% are not above.
        let rank = (all.len() * 99).div_ceil(100).max(1);
        s.p99_ms = all.get(rank - 1).copied().unwrap_or(0.0);
        s
    }

    /// Operations per second.
    pub fn ops_per_s(&self) -> f64 {
        self.ops as f64 / self.wall_s.max(1e-9)
    }

    /// Deadlocks retried per 100 operations.
    pub fn deadlocks_per_100_ops(&self) -> f64 {
        100.0 * self.retries.deadlocks as f64 / self.ops.max(1) as f64
    }

    /// `n` per operation.
    pub fn per_op(&self, n: u64) -> f64 {
        n as f64 / self.ops.max(1) as f64
    }
}

/// One N of one mode on one system.
#[derive(Clone, Debug)]
pub struct ConcurrencyRow {
    /// The system.
    pub system: &'static str,
    /// Concurrent clients (browse: the reader and its writers).
    pub clients: usize,
    /// The mode.
    pub mode: Mode,
    /// Operations, all clients.
    pub ops: usize,
    /// Wall time from the first client's start to the last one's end,
    /// seconds.
    pub wall_s: f64,
    /// Each client's results (browse: client 0 is the reader).
    pub per_client: Vec<ClientResult>,
    /// The lock manager's counters over the run (the server's, or the
    /// embedded database's), every client's together.
    pub locks: LockStats,
}

impl ConcurrencyRow {
    /// Operations per second, all clients together.
    pub fn ops_per_s(&self) -> f64 {
        self.ops as f64 / self.wall_s.max(1e-9)
    }

    /// Every client's figures together.
    pub fn all(&self) -> Summary {
        Summary::of(&self.per_client)
    }

    /// The median latency of one operation, milliseconds.
    pub fn median_ms(&self) -> f64 {
        self.all().median_ms
    }

    /// The 99th percentile latency of one operation, milliseconds.
    pub fn p99_ms(&self) -> f64 {
        self.all().p99_ms
    }

    /// A browse run's reader (client 0).
    pub fn reader(&self) -> Option<Summary> {
        (self.mode == Mode::Browse).then(|| Summary::of(self.per_client.first()))
    }

    /// A browse run's writers (clients 1..), or a writers-alone run's.
    pub fn writers(&self) -> Option<Summary> {
        match self.mode {
            Mode::Browse if self.clients > 1 => Some(Summary::of(self.per_client.get(1..).unwrap_or_default())),
            Mode::Writers => Some(self.all()),
            _ => None,
        }
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
        self.all().retries
    }

    /// Deadlocks retried per 100 operations.
    pub fn deadlocks_per_100_ops(&self) -> f64 {
        self.all().deadlocks_per_100_ops()
    }

    /// Milliseconds lock requests waited (the lock manager's sum over every
    /// wait that ended in the run) per operation.
    pub fn lock_wait_ms_per_op(&self) -> f64 {
        self.locks.wait_micros as f64 / 1e3 / self.ops.max(1) as f64
    }
}

/// Whether each deadlock retried is printed with its cycle (to stderr):
/// `CAIRN_BENCH_DEADLOCKS=1`, to see which locks the clients meet on.
fn show_deadlocks() -> bool {
    static SHOW: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SHOW.get_or_init(|| std::env::var_os("CAIRN_BENCH_DEADLOCKS").is_some_and(|v| v == "1"))
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
                    if show_deadlocks() {
                        let what = match op {
                            Op::Lookup(_) => "lookup",
                            Op::Traversal(_) => "traversal",
                            Op::Insert(_) => "insert",
                        };
                        eprintln!("deadlock retried ({what}): {e}");
                    }
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

/// Where one system's clients run.
enum Site {
    /// `cairn serve` on the system's directory: each client its own session
    /// of `arch`; `observer`, a session of its own, reads the server's lock
    /// counters.
    Served {
        server: ServerProcess,
        arch: Arch,
        observer: Database,
    },
    /// The database opened once in this process, shared by every client
    /// thread.
    Embedded(Database),
}

/// How a client thread reaches its system's database.
#[derive(Clone, Copy)]
enum Target<'a> {
    /// Its own session of `arch` to the server at `url`.
    Session { url: &'a str, arch: Arch },
    /// The one database of the process.
    Shared(&'a Database),
}

impl Site {
    /// Opens system `name`'s (closed) database in `dir`: serves it with
    /// `exe`, or opens it embedded.
    fn open(name: &str, dir: &Path, exe: Option<&Path>) -> Result<Site> {
        if let Some(arch) = served_arch(name) {
            let exe = exe.ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "--clients on {name} starts `cairn serve`: name the `cairn` binary (Oo1Config::cairn_exe)"
                ))
            })?;
            let server = ServerProcess::start_locking(exe, dir, serves_key_ranges(name))?;
            // The observer speaks the system's protocol (a key-range server
            // serves no file-server session).
            let observer = Database::connect(&server.url, cairn::Options { arch, ..options() })?;
            return Ok(Site::Served { server, arch, observer });
        }
        let mut o = options();
        o.storage.object_locking = name != "cairn-embedded-pagelocks";
        o.storage.key_range_locking = name == "cairn-embedded-keyranges";
        let db = Database::open_with(dir, o)?;
        db.register::<Part>()?;
        Ok(Site::Embedded(db))
    }

    fn target(&self) -> Target<'_> {
        match self {
            Site::Served { server, arch, .. } => Target::Session {
                url: &server.url,
                arch: *arch,
            },
            Site::Embedded(db) => Target::Shared(db),
        }
    }

    /// The lock manager's counters now.
    fn lock_stats(&self) -> Result<LockStats> {
        match self {
            Site::Served { observer, .. } => observer
                .server_lock_stats()?
                .ok_or_else(|| Error::Server("a client of cairn serve got no lock counters".into())),
            Site::Embedded(db) => db
                .storage()
                .map(|s| s.stats().locks)
                .ok_or_else(|| Error::InvalidArgument("an embedded database without a storage engine".into())),
        }
    }

    /// Disconnects and stops the server (it checkpoints), or closes the
    /// embedded database.
    fn close(self) -> Result<()> {
        match self {
            Site::Served { server, observer, .. } => {
                observer.close()?;
                server.stop()
            }
            Site::Embedded(db) => Ok(db.close()?),
        }
    }
}

impl Target<'_> {
    /// The client's own session (None: it uses the shared database).
    fn session(self) -> Result<Option<Database>> {
        match self {
            Target::Session { url, arch } => {
                let db = Database::connect(url, cairn::Options { arch, ..options() })?;
                db.register::<Part>()?;
                Ok(Some(db))
            }
            Target::Shared(_) => Ok(None),
        }
    }

    /// The database the client runs on: its session's, or the shared one.
    fn database<'s>(self, own: &'s Option<Database>) -> Result<&'s Database>
    where
        Self: 's,
    {
        match (self, own) {
            (_, Some(db)) => Ok(db),
            (Target::Shared(db), None) => Ok(db),
            (Target::Session { .. }, None) => Err(Error::Server("a client without its session".into())),
        }
    }
}

/// Counts a writer out when it ends, however it ends, so the browse reader
/// never waits for a writer that is gone.
struct Leaving<'a>(Option<&'a AtomicUsize>);

impl Drop for Leaving<'_> {
    fn drop(&mut self) {
        if let Some(left) = self.0 {
            left.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// What a client does and with whom.
#[derive(Clone, Copy)]
struct Role<'a> {
    mode: Mode,
    /// The browse reader: it goes on (round its plan) while any of these
    /// writers is at work.
    until_writers_done: Option<&'a AtomicUsize>,
    /// A browse writer: counted out of these when it ends.
    writer_of: Option<&'a AtomicUsize>,
}

/// One client: connect (or share), warm up on the reads, wait for the
/// others, run; returns what it measured, and when it started and ended.
fn client(
    target: Target<'_>,
    system: &'static str,
    role: Role<'_>,
    plan: &[Op],
    jitter_seed: u64,
    ready: &Barrier,
    go: &Barrier,
) -> Result<(ClientResult, Instant, Instant)> {
    let _leaving = Leaving(role.writer_of);
    let mut jitter = ParkMiller::new(jitter_seed);
    let prepared = target.session().and_then(|own| {
        let mut sys = on(system, target.database(&own)?);
        let mut retries = Retries::default();
        for op in plan.iter().filter(|op| !matches!(op, Op::Insert(_))) {
            run_retrying(&mut sys, op, &mut jitter, &mut retries)?;
        }
        Ok(own)
    });
    // Everyone reaches both barriers, failed or not, so no thread waits
    // forever.
    ready.wait();
    go.wait();
    let started = Instant::now();
    let own = prepared?;
    let mut sys = on(system, target.database(&own)?);
    let mut out = ClientResult::default();
    let before = sys.counters();
    let mut k = 0;
    loop {
        let op = &plan[k % plan.len()];
        let t = Instant::now();
        if role.mode == Mode::ColdReads {
            sys.db().clear_caches()?;
        }
        let v = run_retrying(&mut sys, op, &mut jitter, &mut out.retries)?;
        out.latencies_ms.push(t.elapsed().as_secs_f64() * 1e3);
        out.visits.push(v);
        if let Op::Lookup(_) = op {
            out.lookup_digests.push(v.digest);
        }
        k += 1;
        let more = match role.until_writers_done {
            Some(left) => left.load(Ordering::Acquire) > 0,
            None => k < plan.len(),
        };
        if !more {
            break;
        }
    }
    let ended = Instant::now();
    out.counters = sys.counters().since(&before);
    if let Some(db) = own {
        db.close()?;
    }
    Ok((out, started, ended))
}

/// The counters of `after` less those of `before` (a counter the lock
/// manager may add later stays zero here).
#[allow(clippy::needless_update)]
fn lock_delta(before: &LockStats, after: &LockStats) -> LockStats {
    LockStats {
        requests: after.requests.saturating_sub(before.requests),
        waits: after.waits.saturating_sub(before.waits),
        deadlocks: after.deadlocks.saturating_sub(before.deadlocks),
        timeouts: after.timeouts.saturating_sub(before.timeouts),
        upgrades: after.upgrades.saturating_sub(before.upgrades),
        wait_micros: after.wait_micros.saturating_sub(before.wait_micros),
        ..LockStats::default()
    }
}

/// One run's choices: which ops, and whose.
struct Run<'a> {
    system: &'static str,
    graph: &'a Graph,
    seed: u64,
    clients: usize,
    ops: usize,
    mode: Mode,
    first_new_id: u32,
}

/// Runs `run.clients` clients at once on `site`, `run.ops` operations each
/// (the browse reader: as long as its writers), and checks their answers
/// against `floor`.
fn run_one(site: &Site, run: &Run<'_>, floor: &mut InMemory) -> Result<ConcurrencyRow> {
    let n = run.graph.part_count();
    let per_client_ids = (run.ops * generate::INSERT_PARTS) as u32;
    let plans: Vec<Vec<Op>> = (0..run.clients)
        .map(|c| {
            client_ops(
                run.seed,
                n,
                c,
                run.ops,
                run.mode,
                run.first_new_id + c as u32 * per_client_ids,
            )
        })
        .collect();
    let browsing = run.mode == Mode::Browse && run.clients > 1;
    let writers_left = AtomicUsize::new(run.clients.saturating_sub(1));
    let roles: Vec<Role<'_>> = (0..run.clients)
        .map(|c| Role {
            mode: run.mode,
            until_writers_done: (browsing && c == 0).then_some(&writers_left),
            writer_of: (browsing && c > 0).then_some(&writers_left),
        })
        .collect();
    let (ready, go) = (Barrier::new(run.clients + 1), Barrier::new(run.clients + 1));
    let target = site.target();
    let (joined, locks) = std::thread::scope(|s| {
        let handles: Vec<_> = plans
            .iter()
            .zip(&roles)
            .enumerate()
            .map(|(c, (plan, role))| {
                let (ready, go, role) = (&ready, &go, *role);
                let jitter = run_seed(run.seed, Measure::Insert, 100_000 + c);
                s.spawn(move || client(target, run.system, role, plan, jitter, ready, go))
            })
            .collect();
        ready.wait();
        let before = site.lock_stats();
        go.wait();
        let joined: Vec<_> = handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(Error::Server("a client thread panicked".into())))
            })
            .collect();
        let locks = before.and_then(|b| Ok(lock_delta(&b, &site.lock_stats()?)));
        (joined, locks)
    });
    let joined = joined.into_iter().collect::<Result<Vec<_>>>()?;
    // The run starts when the first client starts (this thread may be
    // scheduled after all of them have ended, on a busy machine) and ends
    // when the last one ends.
    let start = joined.iter().map(|j| j.1).min();
    let end = joined.iter().map(|j| j.2).max();
    let wall_s = match (start, end) {
        (Some(s), Some(e)) => e.saturating_duration_since(s).as_secs_f64(),
        _ => 0.0,
    };
    let per_client: Vec<ClientResult> = joined
        .into_iter()
        .map(|(mut r, _, ended)| {
            r.elapsed_s = start.map_or(0.0, |s| ended.saturating_duration_since(s).as_secs_f64());
            r
        })
        .collect();
    verify(run.system, floor, &plans, &per_client)?;
    Ok(ConcurrencyRow {
        system: run.system,
        clients: run.clients,
        mode: run.mode,
        ops: per_client.iter().map(|c| c.latencies_ms.len()).sum(),
        wall_s,
        per_client,
        locks: locks?,
    })
}

/// Fails unless every client's reads visited what the in-memory floor
/// visits (operation `k` of a client is `plan[k % plan.len()]`: the browse
/// reader goes round its plan), and every insert visited its 100 parts.
fn verify(system: &str, floor: &mut InMemory, plans: &[Vec<Op>], results: &[ClientResult]) -> Result<()> {
    for (c, (plan, r)) in plans.iter().zip(results).enumerate() {
        if r.visits.len() < plan.len().min(1) {
            return Err(Error::Wrong {
                system: system.into(),
                reason: format!("client {c} ran no operation"),
            });
        }
        for (k, got) in r.visits.iter().enumerate() {
            let op = &plan[k % plan.len()];
            let want = match op {
                Op::Insert(parts) => Visits {
                    count: parts.len() as u64,
                    digest: got.digest,
                },
                read => read.run(floor)?,
            };
            if *got != want {
                return Err(Error::Wrong {
                    system: system.into(),
                    reason: format!("client {c} operation {k} ({op:?}) visited {got:?}, the floor {want:?}"),
                });
            }
        }
    }
    Ok(())
}

/// For each Cairn system of `systems` ([`SYSTEMS`]), in order: opens its
/// (closed) database under `scratch` again — served by `exe` in a new
/// process, or embedded — and runs every N of `clients` in every mode,
/// `ops` operations per client (the browse reader: as long as its writers
/// work). `progress` says on stderr which system and mode run.
#[allow(clippy::too_many_arguments)]
pub fn run(
    exe: Option<&Path>,
    scratch: &Path,
    systems: &[String],
    graph: &Graph,
    seed: u64,
    clients: &[usize],
    ops: usize,
    progress: bool,
) -> Result<Vec<ConcurrencyRow>> {
    if clients.is_empty() || clients.contains(&0) || ops == 0 {
        return Err(Error::InvalidArgument(
            "--clients and --client-ops must be at least 1".into(),
        ));
    }
    let mut floor = InMemory::new();
    floor.build(graph)?;
    let mut rows = Vec::new();
    for name in systems {
        let Some(system) = SYSTEMS.iter().copied().find(|s| s == name) else {
            continue;
        };
        let site = Site::open(system, &database_dir(system, scratch), exe)?;
        let measured = run_system(&site, system, graph, seed, clients, ops, progress, &mut floor);
        // The database is closed (the server stopped) even after a failure,
        // so that it can be looked at.
        let closed = site.close();
        rows.extend(measured?);
        closed?;
    }
    Ok(rows)
}

/// Every mode and N of one system on `site`.
#[allow(clippy::too_many_arguments)]
fn run_system(
    site: &Site,
    system: &'static str,
    graph: &Graph,
    seed: u64,
    clients: &[usize],
    ops: usize,
    progress: bool,
    floor: &mut InMemory,
) -> Result<Vec<ConcurrencyRow>> {
    let mut first_new_id = graph.part_count() + 1;
    let mut runs: Vec<(Mode, usize)> = Vec::new();
    for mode in [Mode::Reads, Mode::ColdReads, Mode::Mixed] {
        runs.extend(clients.iter().map(|&n| (mode, n)));
    }
    // Browse: the reader alone, then each N with its writers, and those
    // writers without it.
    runs.push((Mode::Browse, 1));
    for &n in clients.iter().filter(|&&n| n > 1) {
        runs.extend([(Mode::Browse, n), (Mode::Writers, n - 1)]);
    }
    let mut rows = Vec::with_capacity(runs.len());
    for (mode, n) in runs {
        if progress {
            eprintln!("oo1 --clients: {system}, {} with {n}", mode.name());
        }
        let run = Run {
            system,
            graph,
            seed,
            clients: n,
            ops,
            mode,
            first_new_id,
        };
        rows.push(run_one(site, &run, floor)?);
        first_new_id += (n * ops * generate::INSERT_PARTS) as u32;
    }
    Ok(rows)
}
