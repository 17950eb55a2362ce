//! `cairn bench acob`: the experiment of DeWitt et al. §5 on Cairn's
//! architectures — points of (clustering factor, region, client buffer,
//! smearing), each run on every system: the five sets built (by the
//! embedded engine, into the directory every system then opens: the same
//! placement for all), then the three steps, each from cold caches with the
//! seed reset — scans of A–E, random reads of A–E, random updates of A–E
//! (committed per set) — timed, with the client's counters.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use cairn::storage::{Db, DbOptions};

use super::generate::{random_read, random_update, scan_order, AcobConfig, Set, OBJECTS_PER_SET, SET_COUNT};
pub use super::measure::{Point, Query, Row};
use super::store::{self, StoredSet};
use super::systems::{Arch, Buffers, StepPages, System, SystemError};
use crate::oo1::rng::ParkMiller;
use cairn::RemoteStats;

/// The sweeps: the paper's (§5) and ours (`docs/benchmarks.md`, "ACOB").
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Sweep {
    /// One point (`--clustering`, `--region`, `--client-buffer`, `--smeared`).
    Point,
    /// Clustering factor 10–90%, buffers of 50 pages, smeared and not.
    Clustering,
    /// Regions of 1, 5 and 9 pages over clustering factors 10–90%.
    Region,
    /// Client buffer 50–300 pages at f = 30% and 90%.
    Buffer,
    /// All three.
    All,
}

/// What to run.
#[derive(Clone, Debug)]
pub struct AcobRun {
    /// The systems, in order.
    pub systems: Vec<Arch>,
    /// The points.
    pub points: Vec<Point>,
    /// The steps run at each point, in order (all three: [`Query::ALL`]).
    pub queries: Vec<Query>,
    /// Objects per set (the paper's 1,500; smaller for tests).
    pub objects_per_set: u32,
    /// The server's buffer pool, pages.
    pub server_buffer_pages: usize,
    /// The Park–Miller seed.
    pub seed: u64,
    /// Runs of each step (each from cold caches, the seed reset); the run
    /// of median time is reported (the machine is shared and noisy).
    pub repeat: usize,
    /// Where the scratch databases go.
    pub dir: PathBuf,
    /// The `cairn` binary serving the client-server systems.
    pub cairn_exe: PathBuf,
}

/// The points of `sweep`; `single` is the point of [`Sweep::Point`].
pub fn points(sweep: Sweep, single: Point) -> Vec<Point> {
    let factors = (1..=9).map(|k| k * 10);
    let mut out = Vec::new();
    if matches!(sweep, Sweep::Point) {
        out.push(single);
    }
    if matches!(sweep, Sweep::Clustering | Sweep::All) {
        for smeared in [false, true] {
            out.extend(factors.clone().map(|f| Point {
                sweep: "clustering",
                clustering: f,
                region: 5,
                client_buffer_pages: 50,
                smeared,
            }));
        }
    }
    if matches!(sweep, Sweep::Region | Sweep::All) {
        for region in [1, 5, 9] {
            out.extend(factors.clone().map(|f| Point {
                sweep: "region",
                clustering: f,
                region,
                client_buffer_pages: 50,
                smeared: false,
            }));
        }
    }
    if matches!(sweep, Sweep::Buffer | Sweep::All) {
        for f in [30, 90] {
            out.extend((1..=6).map(|k| Point {
                sweep: "buffer",
                clustering: f,
                region: 5,
                client_buffer_pages: 50 * k,
                smeared: false,
            }));
        }
    }
    out
}

/// Builds the five sets of `config` into a database in `dir` with the
/// embedded engine; the stored sets' OIDs are the same for every system
/// that opens the directory.
fn build(dir: &Path, sets: &[Set]) -> Result<Vec<StoredSet>, SystemError> {
    let db = Db::open_or_create(
        dir,
        &DbOptions {
            background: false,
            ..DbOptions::default()
        },
    )?;
    let mut stored = Vec::with_capacity(sets.len());
    for (n, set) in sets.iter().enumerate() {
        let group = db.create_group(&super::systems::group_name(n))?;
        let mut t = db.begin()?;
        stored.push(store::load(&mut t, group, set, n as u8)?);
        t.commit()?;
    }
    db.close()?;
    Ok(stored)
}

/// Copies the database directory `from` (closed) into `to`.
fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        if e.file_type()?.is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()))?;
        } else {
            std::fs::copy(e.path(), to.join(e.file_name()))?;
        }
    }
    Ok(())
}

/// Runs every point on every system.
pub fn run(cfg: &AcobRun, mut progress: impl FnMut(&str)) -> Result<Vec<Row>, SystemError> {
    let io = |what: String, e: std::io::Error| SystemError::Server(format!("{what}: {e}"));
    let mut rows = Vec::new();
    for (i, p) in cfg.points.iter().enumerate() {
        let config = AcobConfig {
            objects_per_set: cfg.objects_per_set,
            clustering: p.clustering,
            region_pages: p.region,
            smeared: p.smeared,
            seed: cfg.seed,
        };
        let sets = super::generate::generate_sets(&config).map_err(store::StoreError::from)?;
        let point_dir = cfg.dir.join(format!("point-{i}"));
        let built = point_dir.join("built");
        let stored = build(&built, &sets)?;
        let buffers = Buffers {
            client_pages: p.client_buffer_pages,
            server_pages: cfg.server_buffer_pages,
        };
        // Every system's copy first, then each step run on one system
        // after the other, repeat by repeat: a drift of the shared
        // machine's speed falls on all the systems alike, not on the one
        // whose repeats it happens to overlap.
        let mut systems = Vec::with_capacity(cfg.systems.len());
        for &arch in &cfg.systems {
            let here = point_dir.join(arch.name());
            copy_dir(&built, &here.join("db")).map_err(|e| io(format!("copying {}", built.display()), e))?;
            let mut sys = System::start(arch, &here, &cfg.cairn_exe, buffers)?;
            sys.end_step()?;
            systems.push(sys);
        }
        let mut point_rows: Vec<Vec<Row>> = systems.iter().map(|_| Vec::new()).collect();
        for &query in &cfg.queries {
            let mut runs: Vec<Vec<Row>> = systems.iter().map(|_| Vec::new()).collect();
            for _ in 0..cfg.repeat.max(1) {
                for (sys, runs) in systems.iter_mut().zip(&mut runs) {
                    progress(&format!(
                        "{} f={} region={} client={} smeared={} {} {}",
                        p.sweep,
                        p.clustering,
                        p.region,
                        p.client_buffer_pages,
                        p.smeared,
                        query.name(),
                        sys.arch().name()
                    ));
                    runs.push(step(sys, *p, query, &sets, &stored, cfg.seed)?);
                }
            }
            for (runs, rows) in runs.into_iter().zip(&mut point_rows) {
                rows.push(median(runs));
            }
        }
        for sys in systems {
            sys.stop()?;
        }
        rows.extend(point_rows.into_iter().flatten());
        std::fs::remove_dir_all(&point_dir).map_err(|e| io(format!("removing {}", point_dir.display()), e))?;
    }
    Ok(rows)
}

/// The run of median time of `runs` (at least one), with its counters.
fn median(mut runs: Vec<Row>) -> Row {
    runs.sort_by(|a, b| a.ms.total_cmp(&b.ms));
    runs.swap_remove(runs.len() / 2)
}

/// One step: cold caches, the seed reset, the query over sets A–E (one
/// transaction each), timed.
fn step(
    sys: &mut System,
    point: Point,
    query: Query,
    sets: &[Set],
    stored: &[StoredSet],
    seed: u64,
) -> Result<Row, SystemError> {
    sys.cold()?;
    let mut rng = ParkMiller::new(seed);
    let plans: Vec<_> = sets
        .iter()
        .map(|s| match query {
            Query::Scan => scan_order(s),
            Query::RandomRead => random_read(s, &mut rng),
            Query::RandomUpdate => random_update(s, &mut rng),
        })
        .collect();
    let before = sys.remote_stats();
    let disk_before = sys.pages_read();
    let (mut read, mut written) = (0u64, 0u64);
    let start = Instant::now();
    for (plan, st) in plans.iter().zip(stored) {
        let c = sys.run(st, plan, query != Query::Scan)?;
        read += c.read;
        written += c.written;
    }
    let ms = start.elapsed().as_secs_f64() * 1e3;
    let after = sys.remote_stats();
    let disk_after = sys.pages_read();
    // The server stops here (the next step starts cold anyway) and says
    // what its pool read and wrote during the step.
    let pages = sys.end_step()?.unwrap_or_default();
    let mut counters = step_counters(
        read,
        written,
        &before,
        &after,
        disk_after.saturating_sub(disk_before),
        pages,
    );
    counters.extend(adaptive_counters(&before, &after));
    Ok(Row {
        system: sys.arch(),
        point,
        query,
        ms,
        counters,
    })
}

/// A step's counters of work done (records, round trips, bytes, pages and
/// objects shipped, disk and server pool pages): the differences of the
/// client's counters over the step, and the server's pool's own count.
fn step_counters(
    read: u64,
    written: u64,
    before: &RemoteStats,
    after: &RemoteStats,
    disk_pages_read: u64,
    pages: StepPages,
) -> BTreeMap<&'static str, f64> {
    let d = |a: u64, b: u64| a.saturating_sub(b) as f64;
    BTreeMap::from([
        ("records_read", read as f64),
        ("records_written", written as f64),
        ("round_trips", d(after.round_trips, before.round_trips)),
        (
            "bytes_shipped",
            d(
                after.bytes_sent + after.bytes_received,
                before.bytes_sent + before.bytes_received,
            ),
        ),
        ("pages_shipped", d(after.pages_shipped, before.pages_shipped)),
        (
            "pages_revalidated",
            d(after.pages_revalidated, before.pages_revalidated),
        ),
        (
            "pages_read_direct",
            d(after.pages_read_direct, before.pages_read_direct),
        ),
        (
            "pages_written_direct",
            d(after.pages_written_direct, before.pages_written_direct),
        ),
        ("cache_hits", d(after.cache_hits, before.cache_hits)),
        ("objects_shipped", d(after.objects_shipped, before.objects_shipped)),
        ("callbacks", d(after.callbacks, before.callbacks)),
        ("disk_pages_read", disk_pages_read as f64),
        // The database's buffer pool (the server's; embedded, its own).
        ("server_pages_read", pages.read as f64),
        ("server_pages_written", pages.written as f64),
    ])
}

/// The adaptive client's decisions over the step and the measure behind
/// them (zero for the other clients).
fn adaptive_counters(before: &RemoteStats, after: &RemoteStats) -> [(&'static str, f64); 10] {
    let (a, b) = (&after.adaptive, &before.adaptive);
    let d = |a: u64, b: u64| a.saturating_sub(b) as f64;
    [
        ("adaptive_page_fetches", d(a.page_fetches, b.page_fetches)),
        ("adaptive_object_fetches", d(a.object_fetches, b.object_fetches)),
        (
            "adaptive_objects_with_pages",
            d(a.objects_with_pages, b.objects_with_pages),
        ),
        ("adaptive_pages_read_ahead", d(a.pages_read_ahead, b.pages_read_ahead)),
        ("adaptive_read_ahead_used", d(a.read_ahead_used, b.read_ahead_used)),
        (
            "adaptive_switches",
            d(a.to_pages + a.to_objects, b.to_pages + b.to_objects),
        ),
        ("adaptive_used_per_visit", a.used_per_visit_milli as f64 / 1000.0),
        ("adaptive_used_fraction", a.used_fraction_milli as f64 / 1000.0),
        ("adaptive_runs_fetching_pages", a.runs_fetching_pages as f64),
        ("adaptive_runs", a.runs as f64),
    ]
}

/// The report: one line per (point, query, system), with the counters that
/// explain it: round trips, bytes shipped, the client's page faults (pages
/// shipped or read from the volume file; embedded: read from disk) and
/// object faults (objects shipped), and the pages the server's pool read
/// from and wrote to the volume during the step.
pub fn table(rows: &[Row]) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{:<10} {:>3} {:>3} {:>6} {:>7} {:<13} {:<9} {:>10} {:>8} {:>10} {:>7} {:>7} {:>7} {:>7}",
        "sweep",
        "f",
        "reg",
        "client",
        "smeared",
        "query",
        "system",
        "ms",
        "RTs",
        "KiB",
        "pages",
        "objects",
        "srv rd",
        "srv wr"
    );
    for r in rows {
        let c = |k: &str| r.counters.get(k).copied().unwrap_or(0.0);
        let _ = writeln!(
            o,
            "{:<10} {:>3} {:>3} {:>6} {:>7} {:<13} {:<9} {:>10.1} {:>8.0} {:>10.1} {:>7.0} {:>7.0} {:>7.0} {:>7.0}",
            r.point.sweep,
            r.point.clustering,
            r.point.region,
            r.point.client_buffer_pages,
            r.point.smeared,
            r.query.name(),
            r.system.name(),
            r.ms,
            c("round_trips"),
            c("bytes_shipped") / 1024.0,
            c("pages_shipped") + c("pages_read_direct") + c("disk_pages_read"),
            c("objects_shipped"),
            c("server_pages_read"),
            c("server_pages_written"),
        );
    }
    o
}

/// The JSON document (`--json`): config, results and findings as issue 14
/// names them.
pub fn json(cfg: &AcobRun, rows: &[Row]) -> serde_json::Value {
    let findings: Vec<serde_json::Value> = super::findings::check(rows)
        .into_iter()
        .map(|f| serde_json::json!({"finding": f.finding, "holds": f.holds, "evidence": f.evidence}))
        .collect();
    serde_json::json!({
        "benchmark": "acob",
        "machine": {
            "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
            "os": std::env::consts::OS,
        },
        "config": {
            "objects_per_set": cfg.objects_per_set,
            "sets": SET_COUNT,
            "server_buffer_pages": cfg.server_buffer_pages,
            "seed": cfg.seed,
            "repeat": cfg.repeat.max(1),
            "queries": cfg.queries.iter().map(|q| q.name()).collect::<Vec<_>>(),
            "systems": cfg.systems.iter().map(|a| a.name()).collect::<Vec<_>>(),
            "paper_objects_per_set": OBJECTS_PER_SET,
        },
        "results": rows.iter().map(|r| serde_json::json!({
            "system": r.system.name(),
            "sweep": r.point.sweep,
            "clustering": r.point.clustering,
            "region": r.point.region,
            "client_buffer_pages": r.point.client_buffer_pages,
            "smeared": r.point.smeared,
            "query": r.query.name(),
            "ms": r.ms,
            "counters": r.counters,
        })).collect::<Vec<_>>(),
        "findings": findings,
    })
}

/// `cairn bench acob`'s arguments.
#[derive(Clone, Debug, clap::Args)]
pub struct AcobArgs {
    /// The sweep: one point, or the paper's clustering, region or buffer
    /// sweep, or all three.
    #[arg(long, value_enum, default_value = "point")]
    pub sweep: Sweep,
    /// Systems, comma-separated: embedded, page, object, file, adaptive.
    #[arg(long, value_delimiter = ',', default_value = "embedded,page,object,file,adaptive")]
    pub systems: Vec<String>,
    /// Steps, comma-separated: scan, random_read, random_update.
    #[arg(long, value_delimiter = ',', default_value = "scan,random_read,random_update")]
    pub queries: Vec<String>,
    /// Clustering factor of `--sweep point`, percent.
    #[arg(long, default_value_t = 30)]
    pub clustering: u32,
    /// Clustering region of `--sweep point`, pages (odd).
    #[arg(long, default_value_t = 5)]
    pub region: u32,
    /// Client buffer of `--sweep point`, pages.
    #[arg(long, default_value_t = 50)]
    pub client_buffer: usize,
    /// Smeared sets for `--sweep point`.
    #[arg(long)]
    pub smeared: bool,
    /// The server's buffer pool, pages.
    #[arg(long, default_value_t = 50)]
    pub server_buffer: usize,
    /// Objects per set (the paper: 1,500).
    #[arg(long, default_value_t = OBJECTS_PER_SET)]
    pub objects: u32,
    /// The Park–Miller seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Runs of each step, from cold caches each, the systems taking turns
    /// run by run; the median is reported (the machines are shared and
    /// noisy).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=99))]
    pub repeat: u32,
    /// Where to create the scratch databases (default: the temp directory).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Also draw the figures (PNG) into this directory.
    #[arg(long)]
    pub plot: Option<PathBuf>,
}

/// Runs `cairn bench acob`: progress on stderr, the table on stdout, the
/// JSON if asked. The client-server systems are served by this binary.
pub fn main(args: &AcobArgs) -> Result<(), SystemError> {
    let systems = args
        .systems
        .iter()
        .map(|s| Arch::by_name(s).ok_or_else(|| SystemError::Server(format!("unknown system {s:?}"))))
        .collect::<Result<Vec<_>, _>>()?;
    let queries = args
        .queries
        .iter()
        .map(|s| Query::by_name(s).ok_or_else(|| SystemError::Server(format!("unknown query {s:?}"))))
        .collect::<Result<Vec<_>, _>>()?;
    let scratch = crate::oo1::scratch(args.dir.as_deref(), "acob")?;
    let cairn_exe =
        std::env::current_exe().map_err(|e| SystemError::Server(format!("finding the cairn binary: {e}")))?;
    let cfg = AcobRun {
        systems,
        points: points(
            args.sweep,
            Point {
                sweep: "point",
                clustering: args.clustering,
                region: args.region,
                client_buffer_pages: args.client_buffer,
                smeared: args.smeared,
            },
        ),
        queries,
        objects_per_set: args.objects,
        server_buffer_pages: args.server_buffer,
        seed: args.seed,
        repeat: args.repeat as usize,
        dir: scratch.0.clone(),
        cairn_exe,
    };
    let rows = run(&cfg, |what| eprintln!("acob: {what}"))?;
    print!("{}", table(&rows));
    print!("{}", super::findings::lines(&super::findings::check(&rows)));
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&json(&cfg, &rows))
            .map_err(|e| SystemError::Server(format!("encoding the JSON: {e}")))?;
        std::fs::write(path, text + "\n")
            .map_err(|e| SystemError::Server(format!("writing {}: {e}", path.display())))?;
        eprintln!("wrote {}", path.display());
    }
    if let Some(dir) = &args.plot {
        for path in super::plot::draw(dir, &rows)? {
            eprintln!("wrote {}", path.display());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sweeps_have_the_papers_points() {
        let one = Point {
            sweep: "point",
            clustering: 30,
            region: 5,
            client_buffer_pages: 50,
            smeared: false,
        };
        assert_eq!(points(Sweep::Point, one), vec![one]);
        let c = points(Sweep::Clustering, one);
        assert_eq!(c.len(), 18);
        assert!(c
            .iter()
            .all(|p| p.client_buffer_pages == 50 && (10..=90).contains(&p.clustering)));
        assert_eq!(c.iter().filter(|p| p.smeared).count(), 9);
        let r = points(Sweep::Region, one);
        assert_eq!(r.len(), 27);
        for region in [1, 5, 9] {
            assert_eq!(r.iter().filter(|p| p.region == region).count(), 9);
        }
        let b = points(Sweep::Buffer, one);
        assert_eq!(b.len(), 12);
        assert_eq!(
            b.iter().map(|p| p.client_buffer_pages).max(),
            Some(300),
            "client buffers 50..=300"
        );
        assert!(b.iter().all(|p| p.clustering == 30 || p.clustering == 90));
        assert_eq!(points(Sweep::All, one).len(), 18 + 27 + 12);
    }
}
