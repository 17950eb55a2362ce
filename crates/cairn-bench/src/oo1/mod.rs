//! `cairn bench oo1`: the OO1 benchmark (Cattell & Skeen 1992; the
//! workload and its targets are written down in `docs/benchmarks.md`), on a
//! harness where each system
//! under test is one [`System`] implementation.
//!
//! Code map:
//!
//! | file | what it is |
//! |---|---|
//! | `rng.rs` | the Park–Miller generator |
//! | `generate.rs` | the database (parts, connections, the locality rule), each run's random choices, the [`Check`] |
//! | `system.rs` | the [`System`] trait, [`Visits`], [`Counters`], the null procedure, OS cache eviction |
//! | `systems/` | `cairn-embedded`, `cairn-page`, `cairn-file`, `cairn-object` and `cairn-adaptive` (one typed model and its operations, `cairn_typed.rs`, over five deployments), `in-memory` (the floor), `sqlite`, `lmdb` |
//! | `workload.rs` | the measures and the run loop (build, check, cold open, runs, cross-system comparison) |
//! | `report.rs` | the table, the target lines, the JSON |
//! | `plot.rs` | the PNG figure |
//! | `concurrency.rs` | `--clients`: many clients at once on each Cairn system (sessions of one server, or threads on one embedded database), in four modes |
//!
//! Invariant: every system builds the identical graph (same [`Check`]) and
//! does identical work in every run (same [`Visits`]); the run fails
//! otherwise. Timing is never asserted in tests.

pub mod concurrency;
pub mod generate;
pub mod plot;
pub mod report;
pub mod rng;
pub mod system;
pub mod systems;
pub mod workload;

use std::io::Write as _;
use std::path::{Path, PathBuf};

pub use generate::{Check, Graph};
pub use system::{Counters, Error, Result, System, Visits};
pub use workload::{Measure, SystemResult};

/// How to run the benchmark.
#[derive(Clone, Debug)]
pub struct Oo1Config {
    /// Parts in the database (small 20,000; large 200,000).
    pub parts: u32,
    /// Runs per measure (run 1 cold, the rest warm); at least 2.
    pub runs: usize,
    /// The Park–Miller seed.
    pub seed: u64,
    /// Systems, by name, in report order.
    pub systems: Vec<String>,
    /// Where the databases go (a fresh directory under it, removed after).
    pub dir: Option<PathBuf>,
    /// Show progress bars on stderr.
    pub progress: bool,
    /// The `cairn` binary, started as `cairn serve` (a separate process) for
    /// `cairn-page`; `cairn bench oo1` names itself.
    pub cairn_exe: Option<PathBuf>,
    /// After the normal run, each Cairn system of `systems` with each of
    /// these numbers of concurrent clients ([`concurrency`]); empty: not
    /// run.
    pub clients: Vec<usize>,
    /// Operations each concurrent client runs per mode and N (the browse
    /// reader: as long as its writers work).
    pub client_ops: usize,
}

impl Default for Oo1Config {
    fn default() -> Self {
        Oo1Config {
            parts: 20_000,
            runs: 10,
            seed: 1,
            systems: systems::ALL.iter().map(|s| s.to_string()).collect(),
            dir: None,
            progress: false,
            cairn_exe: None,
            clients: Vec::new(),
            client_ops: 20,
        }
    }
}

/// The machine the benchmark ran on.
#[derive(Clone, Debug)]
pub struct Machine {
    /// Cores available.
    pub cores: usize,
    /// Physical memory.
    pub memory_bytes: u64,
    /// The operating system.
    pub os: String,
}

/// This machine.
pub fn machine() -> Machine {
    let m = crate::commit::machine();
    let os = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|r| format!("{} {}", std::env::consts::OS, r.trim()))
        .unwrap_or_else(|_| std::env::consts::OS.to_string());
    Machine {
        cores: m.cores,
        memory_bytes: m.memory_bytes,
        os,
    }
}

/// Everything one run of the benchmark produced.
#[derive(Clone, Debug)]
pub struct Oo1Report {
    /// The configuration.
    pub config: Oo1Config,
    /// The machine.
    pub machine: Machine,
    /// The check of the generated graph.
    pub check: Check,
    /// Each system's results, in order.
    pub results: Vec<SystemResult>,
    /// The summary rows (cold and warm per measure and system).
    pub rows: Vec<report::Row>,
    /// The `--clients` rows (empty unless asked).
    pub concurrency: Vec<concurrency::ConcurrencyRow>,
}

impl Oo1Report {
    /// The human table.
    pub fn table(&self) -> String {
        let mut t = report::table(&self.config, &self.machine, &self.results, &self.rows);
        if !self.concurrency.is_empty() {
            t.push_str(&report::concurrency_table(&self.concurrency));
        }
        t
    }

    /// The JSON document.
    pub fn json(&self) -> serde_json::Value {
        let mut j = report::json(&self.config, &self.machine, &self.results, &self.rows);
        if !self.concurrency.is_empty() {
            j["concurrency"] = report::concurrency_json(&self.concurrency);
        }
        j
    }
}

/// A directory removed when dropped.
pub(crate) struct Scratch(pub(crate) PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        if !self.0.as_os_str().is_empty() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

impl Scratch {
    /// Keeps the directory (a failed run's databases, for a look with
    /// `cairn check` and `cairn inspect`) and returns its path.
    pub(crate) fn keep(mut self) -> PathBuf {
        std::mem::take(&mut self.0)
    }
}

/// A new scratch directory `cairn-bench-NAME-…` under `parent` (default:
/// the temp directory).
pub(crate) fn scratch(parent: Option<&Path>, name: &str) -> Result<Scratch> {
    let base = parent.map_or_else(std::env::temp_dir, Path::to_path_buf);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let dir = base.join(format!("cairn-bench-{name}-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
    Ok(Scratch(dir))
}

/// Runs the benchmark.
pub fn run(cfg: &Oo1Config) -> Result<Oo1Report> {
    if cfg.parts < generate::PARTS_MIN {
        return Err(Error::InvalidArgument(format!(
            "--parts must be at least {}",
            generate::PARTS_MIN
        )));
    }
    if cfg.runs < 2 {
        return Err(Error::InvalidArgument(
            "--runs must be at least 2 (1 cold, then warm)".into(),
        ));
    }
    if cfg.systems.is_empty() {
        return Err(Error::InvalidArgument("no systems to run".into()));
    }
    if !cfg.clients.is_empty() && !cfg.systems.iter().any(|s| concurrency::SYSTEMS.contains(&s.as_str())) {
        return Err(Error::InvalidArgument(format!(
            "--clients measures the Cairn systems ({}): include one in --systems",
            concurrency::SYSTEMS.join(", ")
        )));
    }
    if cfg.clients.contains(&0) || (!cfg.clients.is_empty() && cfg.client_ops == 0) {
        return Err(Error::InvalidArgument(
            "--clients and --client-ops must be at least 1".into(),
        ));
    }
    let dir = scratch(cfg.dir.as_deref(), "oo1")?;
    match run_in(cfg, &dir) {
        Ok(report) => Ok(report),
        // The databases of a failed run stay, so that what went wrong can
        // be looked at (`cairn check DIR/cairn-page`).
        Err(e) if is_empty_dir(&dir.0) => Err(e),
        Err(e) => Err(Error::Kept {
            source: Box::new(e),
            dir: dir.keep(),
        }),
    }
}

/// True if `dir` holds nothing (a run refused before any database was
/// made has nothing worth keeping).
fn is_empty_dir(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|mut entries| entries.next().is_none())
}

/// [`run`] with its scratch directory made.
fn run_in(cfg: &Oo1Config, dir: &Scratch) -> Result<Oo1Report> {
    let mut systems = cfg
        .systems
        .iter()
        .map(|name| systems::by_name(name, &dir.0, cfg.cairn_exe.as_deref()))
        .collect::<Result<Vec<_>>>()?;
    let bar = workload::progress(
        cfg.progress,
        (systems.len() * (1 + Measure::ALL.len() * cfg.runs)) as u64,
    );
    bar.set_message("generating");
    let graph = Graph::generate(&mut rng::ParkMiller::new(cfg.seed), cfg.parts);
    let check = graph.check();
    let mut results = Vec::with_capacity(systems.len());
    for sys in &mut systems {
        results.push(workload::run_system(
            sys.as_mut(),
            &graph,
            &check,
            cfg.seed,
            cfg.runs,
            &bar,
        )?);
    }
    bar.finish_and_clear();
    workload::compare_visits(&results)?;
    let rows = report::rows(&results);
    let mut conc = Vec::new();
    if !cfg.clients.is_empty() {
        // The normal run closed every system's database (and stopped its
        // server).
        if cfg.progress {
            eprintln!("oo1: the Cairn systems with {:?} concurrent clients", cfg.clients);
        }
        conc = concurrency::run(
            cfg.cairn_exe.as_deref(),
            &dir.0,
            &cfg.systems,
            &graph,
            cfg.seed,
            &cfg.clients,
            cfg.client_ops,
            cfg.progress,
        )?;
    }
    Ok(Oo1Report {
        config: cfg.clone(),
        machine: machine(),
        check,
        results,
        rows,
        concurrency: conc,
    })
}

/// `cairn bench oo1`'s arguments.
#[derive(clap::Args, Debug, Clone)]
pub struct Oo1Args {
    /// Parts in the database (small: 20000; large: 200000).
    #[arg(long, default_value_t = 20_000)]
    pub parts: u32,
    /// Systems to run, comma-separated: cairn-embedded (locking objects,
    /// the typed API's default), cairn-embedded-pagelocks (locking pages
    /// instead of objects),
    /// cairn-embedded-keyranges (locking objects, and index keys instead of
    /// index pages),
    /// cairn-page, cairn-file, cairn-object and cairn-adaptive (page-,
    /// file- and object-server clients and the adaptive client of `cairn
    /// serve` in a separate process), cairn-page-keyranges,
    /// cairn-file-keyranges, cairn-object-keyranges and
    /// cairn-adaptive-keyranges (those clients
    /// of a server that locks key ranges of its B+-trees), in-memory,
    /// sqlite, lmdb.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "cairn-embedded,cairn-page,cairn-file,cairn-object,cairn-adaptive,in-memory,sqlite,lmdb"
    )]
    pub systems: Vec<String>,
    /// Runs per measure (run 1 cold, the median of the rest warm).
    #[arg(long, default_value_t = 10)]
    pub runs: usize,
    /// The Park–Miller seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Also draw the figure (oo1.png) into this directory.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Where to create the scratch databases (default: the temp directory).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// After the normal run, run each Cairn system of --systems again with
    /// each of these numbers of concurrent clients, e.g. `--clients
    /// 1,4,16,32`: cairn-page, cairn-file, cairn-object and cairn-adaptive
    /// as sessions of their kind on one new `cairn serve`, cairn-embedded
    /// (and cairn-embedded-pagelocks, cairn-embedded-keyranges) as threads on
    /// one open database. Modes:
    /// reads (lookups and traversals), cold reads (each client's cache
    /// dropped before each operation), mixed (with inserts), and browse
    /// (client 0 repeats 7-hop traversals while the others insert; measured
    /// also as the reader alone and the writers without it). Prints ops/s,
    /// speed-up, median and p99 latency, deadlocks and lock timeouts retried
    /// and lock-wait time per operation.
    #[arg(long, value_delimiter = ',')]
    pub clients: Vec<usize>,
    /// Operations each concurrent client runs per mode and number of
    /// clients (with --clients; the browse reader runs as long as its
    /// writers).
    #[arg(long, default_value_t = 20)]
    pub client_ops: usize,
}

/// Runs `cairn bench oo1`: the table on stdout, progress on stderr, and the
/// JSON and figure if asked. It runs inside the `cairn` binary, which
/// therefore serves `cairn-page`'s database too.
pub fn main(args: &Oo1Args) -> Result<()> {
    let cairn_exe = std::env::current_exe().map_err(|e| Error::io("finding the cairn binary", e))?;
    let cfg = Oo1Config {
        parts: args.parts,
        runs: args.runs,
        seed: args.seed,
        systems: args.systems.iter().map(|s| s.trim().to_string()).collect(),
        dir: args.dir.clone(),
        progress: true,
        cairn_exe: Some(cairn_exe),
        clients: args.clients.clone(),
        client_ops: args.client_ops,
    };
    let report = run(&cfg)?;
    print!("{}", report.table());
    if let Some(path) = &args.json {
        let mut f = std::fs::File::create(path).map_err(|e| Error::io(format!("creating {}", path.display()), e))?;
        let text = serde_json::to_string_pretty(&report.json()).map_err(|e| Error::Plot(e.to_string()))?;
        writeln!(f, "{text}").map_err(|e| Error::io(format!("writing {}", path.display()), e))?;
        eprintln!("wrote {}", path.display());
    }
    if let Some(dir) = &args.plot {
        let names: Vec<&str> = report.results.iter().map(|r| r.system).collect();
        let path = plot::draw(dir, cfg.parts, &names, &report.rows)?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}
