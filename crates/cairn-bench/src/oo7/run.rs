//! The sweep: build each clustering's database once, then for every
//! traversal × phase × strategy × buffer size, `runs` timed traversals.
//!
//! - **cold**: each run opens the database cold ([`Deployment::open_cold`])
//!   and times one traversal;
//! - **warm**: the database is opened cold once; each run is a T1 (not
//!   timed) and then the timed traversal, as in the paper (§6.1: "the T1
//!   traversal was run twice in succession and only the running time of the
//!   second run was measured"). A timed T1 serves as the next T1 run's
//!   warm-up.
//!
//! Every run's [`Visits`] are checked against [`traverse::expected`]
//! (counts and the null procedure's digest): a run that did other work
//! fails the benchmark. The counters are the database's, read before and
//! after the timed traversal.

use std::path::PathBuf;
use std::time::Instant;

use cairn::Database;
use indicatif::{ProgressBar, ProgressStyle};

use super::build::{self, Clustering};
use super::deploy::Deployment;
use super::generate::{Graph, Params};
use super::strategy::{Strategy, BUFFER_PAGES_MIN};
use super::traverse::{self, Traversal, Visits};
use crate::oo1::rng::ParkMiller;
use crate::oo1::system::{Counters, Error, Result};

/// Cold or warm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Phase {
    /// A cold open, then the traversal.
    Cold,
    /// A T1 first (not timed), then the traversal.
    Warm,
}

impl Phase {
    /// Both, in report order.
    pub const ALL: [Phase; 2] = [Phase::Cold, Phase::Warm];

    /// The name in reports and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Cold => "cold",
            Phase::Warm => "warm",
        }
    }
}

/// The default buffer sizes, as fractions of the largest database's pages:
/// very small, mid-range (where a dual buffer can pay: the traversals' pages
/// do not fit, about 60% of the database), and the whole database. Four
/// sizes keep the default sweep near four minutes on two busy cores (with
/// 75% too it took 4.7).
pub const DEFAULT_BUFFER_FRACTIONS: [f64; 4] = [0.10, 0.25, 0.50, 1.00];

/// How to run the sweep.
#[derive(Clone, Debug)]
pub struct Oo7Config {
    /// Clusterings, in order.
    pub clusterings: Vec<Clustering>,
    /// Strategies, in order.
    pub strategies: Vec<Strategy>,
    /// Traversals, in order.
    pub traversals: Vec<Traversal>,
    /// Phases, in order.
    pub phases: Vec<Phase>,
    /// Buffer sizes in pages; empty: [`DEFAULT_BUFFER_FRACTIONS`] of the
    /// largest database, measured after the build.
    pub buffer_pages: Vec<usize>,
    /// Timed runs per point (the report gives their median).
    pub runs: usize,
    /// The Park–Miller seed.
    pub seed: u64,
    /// Where the embedded databases go (a fresh directory under it, removed
    /// after; default the temp directory).
    pub dir: Option<PathBuf>,
    /// Run against `cairn serve` at this URL instead of embedded.
    pub connect: Option<String>,
    /// Show a progress bar on stderr.
    pub progress: bool,
    /// The dual buffer's page segment share (`None`: each strategy's
    /// default, [`cairn::Strategy::default_page_share`]).
    pub page_share: Option<f64>,
    /// The database's sizes: [`Params::SMALL`] for the benchmark; tests
    /// may scale it down.
    pub params: Params,
}

impl Default for Oo7Config {
    fn default() -> Self {
        Oo7Config {
            clusterings: Clustering::ALL.to_vec(),
            strategies: Strategy::ALL.to_vec(),
            traversals: Traversal::ALL.to_vec(),
            phases: Phase::ALL.to_vec(),
            buffer_pages: Vec::new(),
            runs: 3,
            seed: 1,
            dir: None,
            connect: None,
            page_share: None,
            progress: false,
            params: Params::SMALL,
        }
    }
}

/// One timed traversal.
#[derive(Clone, Debug)]
pub struct Sample {
    /// Milliseconds.
    pub ms: f64,
    /// What it did.
    pub visits: Visits,
    /// The database's counters over it.
    pub counters: Counters,
}

/// The runs of one point of the sweep.
#[derive(Clone, Debug)]
pub struct Point {
    /// The clustering.
    pub clustering: Clustering,
    /// The traversal.
    pub traversal: Traversal,
    /// Cold or warm.
    pub phase: Phase,
    /// The strategy.
    pub strategy: Strategy,
    /// Buffer size, pages.
    pub buffer_pages: usize,
    /// The timed runs.
    pub samples: Vec<Sample>,
}

/// One clustering's database.
#[derive(Clone, Debug)]
pub struct Built {
    /// The clustering.
    pub clustering: Clustering,
    /// Time to build it, milliseconds.
    pub load_ms: f64,
    /// Its size in pages ([`Deployment::database_pages`]).
    pub pages: u64,
    /// Bytes on disk after the build (embedded).
    pub size_on_disk_bytes: Option<u64>,
}

/// Everything the sweep measured.
#[derive(Clone, Debug)]
pub struct Sweep {
    /// Where the databases were.
    pub deployment: Deployment,
    /// The databases.
    pub built: Vec<Built>,
    /// The buffer sizes swept, pages.
    pub buffer_pages: Vec<usize>,
    /// Every point, in sweep order.
    pub points: Vec<Point>,
    /// Wall-clock seconds of the whole sweep (build included).
    pub elapsed_s: f64,
}

/// A directory removed when dropped.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn scratch(parent: Option<&std::path::Path>) -> Result<Scratch> {
    let base = parent.map_or_else(std::env::temp_dir, std::path::Path::to_path_buf);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let dir = base.join(format!("cairn-bench-oo7-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
    Ok(Scratch(dir))
}

fn validate(cfg: &Oo7Config) -> Result<()> {
    let bad = |m: &str| Err(Error::InvalidArgument(m.into()));
    if cfg.clusterings.is_empty() || cfg.strategies.is_empty() || cfg.traversals.is_empty() || cfg.phases.is_empty() {
        return bad("nothing to run: name at least one clustering, strategy, traversal and phase");
    }
    if cfg.runs == 0 {
        return bad("--runs must be at least 1");
    }
    if cfg.page_share.is_some_and(|f| !(0.0..=1.0).contains(&f)) {
        return bad("--page-share must be between 0 and 1");
    }
    if let Some(&b) = cfg.buffer_pages.iter().find(|&&b| b < BUFFER_PAGES_MIN) {
        return Err(Error::InvalidArgument(format!(
            "--buffer-pages {b} is below the smallest buffer, {BUFFER_PAGES_MIN} pages"
        )));
    }
    Ok(())
}

/// The buffer sizes: the configured ones, or the default fractions of
/// `largest` pages (at least [`BUFFER_PAGES_MIN`]), ascending, distinct.
pub fn buffer_sizes(configured: &[usize], largest: u64) -> Vec<usize> {
    let mut v: Vec<usize> = if configured.is_empty() {
        DEFAULT_BUFFER_FRACTIONS
            .iter()
            .map(|f| ((largest as f64 * f).round() as usize).max(BUFFER_PAGES_MIN))
            .collect()
    } else {
        configured.to_vec()
    };
    v.sort_unstable();
    v.dedup();
    v
}

/// A progress bar on stderr (hidden when `show` is false).
fn progress(show: bool, len: u64) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template("{spinner} oo7 [{elapsed_precise}] {bar:30} {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar
}

/// The database's counters now: the client's dual buffer (page and object
/// faults, copies, relocations, duplicates, utilization), the page buffer
/// under it (embedded: the engine's, standing for the server's; remote:
/// what the server shipped and the round trips).
pub fn counters(db: &Database) -> Counters {
    let mut c = Counters::default();
    let cache = db.cache_stats();
    let d = cache.dual;
    c.set("page_faults", d.page_faults)
        .set("object_faults", d.object_faults)
        .set("object_hits", d.object_hits)
        .set("objects_copied", d.objects_copied)
        .set("bytes_copied", d.bytes_copied)
        .set("relocations", d.relocations)
        .set("pages_displaced", d.pages_displaced)
        .set("pages_kept", d.pages_kept)
        .set("duplicates", d.duplicates)
        .set("objects_flushed", d.objects_flushed)
        .set("pages_flushed", d.pages_flushed)
        .set("flush_page_faults", d.flush_page_faults)
        .set("utilization_permille", (d.utilization() * 1000.0).round() as u64)
        .set("decoded_faults", cache.faults);
    if let Some(st) = db.storage().map(|s| s.stats()) {
        c.set("server_misses", st.buffer.misses)
            .set("page_reads", st.buffer.reads)
            .set("page_writes", st.buffer.writes)
            .set("fsyncs", st.wal.fsyncs);
    }
    if let Some(r) = db.remote_stats() {
        c.set("pages_shipped", r.pages_shipped)
            .set("pages_revalidated", r.pages_revalidated)
            .set("round_trips", r.round_trips)
            .set("bytes_shipped", r.bytes_sent + r.bytes_received);
    }
    c
}

fn check(what: &str, got: &Visits, expected: &Visits) -> Result<()> {
    if got == expected {
        return Ok(());
    }
    Err(Error::Wrong {
        system: "oo7".into(),
        reason: format!("{what} did {got:?}, not {expected:?}"),
    })
}

/// One timed traversal, checked.
fn timed(db: &Database, c: Clustering, t: Traversal, expected: &Visits) -> Result<Sample> {
    let before = counters(db);
    let start = Instant::now();
    let visits = traverse::run(db, &c.root_name(), t)?;
    let ms = start.elapsed().as_secs_f64() * 1e3;
    let counters = counters(db).since(&before);
    check(&format!("{} on {}", t.name(), c.label()), &visits, expected)?;
    Ok(Sample { ms, visits, counters })
}

/// Runs one point of the sweep.
fn point(dep: &Deployment, g: &Graph, cfg: &Oo7Config, p: &mut Point, bar: &ProgressBar) -> Result<()> {
    let expected = traverse::expected(g, p.traversal);
    let warmup = traverse::expected(g, Traversal::T1);
    match p.phase {
        Phase::Cold => {
            for _ in 0..cfg.runs {
                let db = dep.open_cold(p.clustering, p.strategy, p.buffer_pages, cfg.page_share)?;
                p.samples.push(timed(&db, p.clustering, p.traversal, &expected)?);
                dep.close(db)?;
                bar.inc(1);
            }
        }
        Phase::Warm => {
            let db = dep.open_cold(p.clustering, p.strategy, p.buffer_pages, cfg.page_share)?;
            for run in 0..cfg.runs {
                // A timed T1 is itself the next T1 run's warm-up.
                if run == 0 || p.traversal != Traversal::T1 {
                    let v = traverse::run(&db, &p.clustering.root_name(), Traversal::T1)?;
                    check("the warm-up T1", &v, &warmup)?;
                }
                p.samples.push(timed(&db, p.clustering, p.traversal, &expected)?);
                bar.inc(1);
            }
            dep.close(db)?;
        }
    }
    Ok(())
}

/// Builds each clustering's database; returns what was built.
fn build_all(dep: &Deployment, g: &Graph, cfg: &Oo7Config, bar: &ProgressBar) -> Result<Vec<Built>> {
    let mut built = Vec::with_capacity(cfg.clusterings.len());
    for &c in &cfg.clusterings {
        bar.set_message(format!("building {}", c.label()));
        let db = dep.create(c)?;
        let start = Instant::now();
        let stored = build::build(&db, g, c, cfg.seed)?;
        let load_ms = start.elapsed().as_secs_f64() * 1e3;
        let pages = dep.database_pages(&db, &stored)?;
        dep.close(db)?;
        built.push(Built {
            clustering: c,
            load_ms,
            pages,
            size_on_disk_bytes: dep.size_on_disk_bytes(c),
        });
        bar.inc(1);
    }
    Ok(built)
}

/// Runs the sweep.
pub fn sweep(cfg: &Oo7Config) -> Result<Sweep> {
    validate(cfg)?;
    let started = Instant::now();
    let scratch_dir;
    let dep = match &cfg.connect {
        Some(url) => Deployment::Remote { url: url.clone() },
        None => {
            scratch_dir = scratch(cfg.dir.as_deref())?;
            Deployment::Embedded {
                root: scratch_dir.0.clone(),
            }
        }
    };
    let g = Graph::generate(&mut ParkMiller::new(cfg.seed), cfg.params);
    let sizes_known = if cfg.buffer_pages.is_empty() {
        DEFAULT_BUFFER_FRACTIONS.len()
    } else {
        buffer_sizes(&cfg.buffer_pages, 0).len()
    };
    let per_clustering = cfg.traversals.len() * cfg.phases.len() * cfg.strategies.len() * sizes_known * cfg.runs;
    let bar = progress(cfg.progress, (cfg.clusterings.len() * (1 + per_clustering)) as u64);
    let built = build_all(&dep, &g, cfg, &bar)?;
    let largest = built.iter().map(|b| b.pages).max().unwrap_or(0);
    let buffers = buffer_sizes(&cfg.buffer_pages, largest);
    let mut points = Vec::new();
    for &c in &cfg.clusterings {
        for &t in &cfg.traversals {
            for &phase in &cfg.phases {
                for &s in &cfg.strategies {
                    for &b in &buffers {
                        bar.set_message(format!("{} {} {} {} {b} pages", c.label(), t.name(), phase.name(), s));
                        let mut p = Point {
                            clustering: c,
                            traversal: t,
                            phase,
                            strategy: s,
                            buffer_pages: b,
                            samples: Vec::with_capacity(cfg.runs),
                        };
                        point(&dep, &g, cfg, &mut p, &bar)?;
                        points.push(p);
                    }
                }
            }
        }
    }
    bar.finish_and_clear();
    Ok(Sweep {
        deployment: dep,
        built,
        buffer_pages: buffers,
        points,
        elapsed_s: started.elapsed().as_secs_f64(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_buffers_are_fractions_of_the_largest_database() {
        assert_eq!(buffer_sizes(&[], 1000), [100, 250, 500, 1000]);
        assert_eq!(buffer_sizes(&[], 40), [16, 20, 40]);
        assert_eq!(buffer_sizes(&[300, 100, 300], 1000), [100, 300]);
    }
}
