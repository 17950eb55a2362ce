//! The OO1 measures and how they are run: for each system, build (timed as
//! the load), check, close; then for each measure, the paper's loop: open
//! cold, run `runs` times with new random choices each run (run 1 is the
//! cold run, runs 2.. the warm ones; each warm read run is repeated at once
//! with the same choices, the hot run), close. Inserted parts are removed
//! after each insert run (not timed), and the database is checked again
//! afterwards, so every run starts from the same database.
//!
//! The random choices of run `r` of measure `m` come from a Park–Miller
//! stream seeded from `(seed, m, r)`, the same for every system, so every
//! system does identical work; the harness compares the [`Visits`] of every
//! run across systems and fails on any difference.

use std::collections::HashMap;
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};

use super::generate::{self, Check, Graph, TRAVERSAL_HOPS, TRAVERSAL_VISITS};
use super::rng::ParkMiller;
use super::system::{Counters, Error, Result, System, Visits};

/// One of the four measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Measure {
    /// 1,000 random parts by id.
    Lookup,
    /// 7 hops forward from a random part.
    Traversal,
    /// 7 hops backward, time scaled to 3,280 visits.
    ReverseTraversal,
    /// 100 new parts, committed durably.
    Insert,
}

impl Measure {
    /// All four, in report order.
    pub const ALL: [Measure; 4] = [
        Measure::Lookup,
        Measure::Traversal,
        Measure::ReverseTraversal,
        Measure::Insert,
    ];

    /// The name in reports and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Measure::Lookup => "lookup",
            Measure::Traversal => "traversal",
            Measure::ReverseTraversal => "reverse_traversal",
            Measure::Insert => "insert",
        }
    }
}

/// One timed run.
#[derive(Clone, Debug)]
pub struct Sample {
    /// Milliseconds (for the reverse traversal, scaled to 3,280 visits).
    pub ms: f64,
    /// What the run visited.
    pub visits: Visits,
    /// The system's counters over the run.
    pub counters: Counters,
}

/// A system's results.
#[derive(Clone, Debug)]
pub struct SystemResult {
    /// The system's name.
    pub system: &'static str,
    /// Time to build the database, milliseconds.
    pub load_ms: f64,
    /// Size on disk after the build, if it has a disk.
    pub db_size_bytes: Option<u64>,
    /// What it stored.
    pub check: Check,
    /// Each measure's runs, in order.
    pub runs: Vec<(Measure, Vec<Sample>)>,
    /// Each read measure's hot runs: every warm run (2..) repeated at once
    /// with the same choices, so it needs no page it has not just used.
    pub hot: Vec<(Measure, Vec<Sample>)>,
}

/// The seed of run `run` of `measure`: SplitMix64 over the three, so nearby
/// runs get unrelated Park–Miller streams.
pub fn run_seed(seed: u64, measure: Measure, run: usize) -> u64 {
    let mut z = seed ^ ((measure as u64 + 1) << 40) ^ (run as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A progress bar on stderr (hidden when `show` is false).
pub fn progress(show: bool, len: u64) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template("{spinner} oo1 [{elapsed_precise}] {bar:30} {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar
}

fn wrong(system: &dyn System, reason: String) -> Error {
    Error::Wrong {
        system: system.name().into(),
        reason,
    }
}

/// Runs one measure once on `sys` with the choices of `(seed, measure, run)`.
fn run_once(sys: &mut dyn System, graph: &Graph, seed: u64, measure: Measure, run: usize) -> Result<Sample> {
    let n = graph.part_count();
    let mut rng = ParkMiller::new(run_seed(seed, measure, run));
    let before = sys.counters();
    let (elapsed_ms, visits, batch) = match measure {
        Measure::Lookup => {
            let ids = generate::lookup_ids(&mut rng, n);
            let t = Instant::now();
            let v = sys.lookup(&ids)?;
            (t.elapsed().as_secs_f64() * 1e3, v, None)
        }
        Measure::Traversal | Measure::ReverseTraversal => {
            let start = rng.rand(n);
            let t = Instant::now();
            let v = if measure == Measure::Traversal {
                sys.traversal(start, TRAVERSAL_HOPS)?
            } else {
                sys.reverse_traversal(start, TRAVERSAL_HOPS)?
            };
            (t.elapsed().as_secs_f64() * 1e3, v, None)
        }
        Measure::Insert => {
            let batch = generate::insert_batch(&mut rng, n);
            let t = Instant::now();
            let v = sys.insert(&batch)?;
            (t.elapsed().as_secs_f64() * 1e3, v, Some(batch))
        }
    };
    let counters = sys.counters().since(&before);
    if let Some(batch) = batch {
        sys.remove(&batch)?;
    }
    let expected = match measure {
        Measure::Lookup => Some(generate::LOOKUP_IDS as u64),
        Measure::Traversal => Some(TRAVERSAL_VISITS),
        Measure::ReverseTraversal => None,
        Measure::Insert => Some(generate::INSERT_PARTS as u64),
    };
    if let Some(e) = expected.filter(|&e| e != visits.count) {
        return Err(wrong(
            sys,
            format!(
                "{} run {} visited {} parts, not {e}",
                measure.name(),
                run + 1,
                visits.count
            ),
        ));
    }
    let ms = if measure == Measure::ReverseTraversal {
        // The paper's normalisation: time × 3280 / visits.
        elapsed_ms * TRAVERSAL_VISITS as f64 / visits.count.max(1) as f64
    } else {
        elapsed_ms
    };
    Ok(Sample { ms, visits, counters })
}

/// Builds, checks and measures one system.
pub fn run_system(
    sys: &mut dyn System,
    graph: &Graph,
    expected: &Check,
    seed: u64,
    runs: usize,
    bar: &ProgressBar,
) -> Result<SystemResult> {
    bar.set_message(format!("{}: building", sys.name()));
    let t = Instant::now();
    sys.build(graph)?;
    let load_ms = t.elapsed().as_secs_f64() * 1e3;
    bar.inc(1);
    let check = sys.check()?;
    if check != *expected {
        return Err(wrong(
            sys,
            format!("{} differs from the generated {}", check.line(), expected.line()),
        ));
    }
    sys.close()?;
    let db_size_bytes = sys.size_on_disk_bytes();
    let mut out = Vec::new();
    let mut hot = Vec::new();
    for m in Measure::ALL {
        bar.set_message(format!("{}: {}", sys.name(), m.name()));
        sys.open_cold()?;
        let mut samples = Vec::with_capacity(runs);
        let mut hot_samples = Vec::new();
        for r in 0..runs {
            samples.push(run_once(sys, graph, seed, m, r)?);
            if r > 0 && m != Measure::Insert {
                let again = run_once(sys, graph, seed, m, r)?;
                if again.visits != samples[r].visits {
                    return Err(wrong(
                        sys,
                        format!("{} run {} visited other parts when repeated", m.name(), r + 1),
                    ));
                }
                hot_samples.push(again);
            }
            bar.inc(1);
        }
        if !hot_samples.is_empty() {
            hot.push((m, hot_samples));
        }
        if m == Measure::Insert {
            let after = sys.check()?;
            if after != *expected {
                return Err(wrong(
                    sys,
                    format!(
                        "after the insert runs, {} differs from {}",
                        after.line(),
                        expected.line()
                    ),
                ));
            }
        }
        sys.close()?;
        out.push((m, samples));
    }
    Ok(SystemResult {
        system: sys.name(),
        load_ms,
        db_size_bytes,
        check,
        runs: out,
        hot,
    })
}

/// Fails unless every system visited the same parts in every run.
pub fn compare_visits(results: &[SystemResult]) -> Result<()> {
    let mut first: HashMap<(Measure, usize), (&str, Visits)> = HashMap::new();
    for s in results {
        for (m, samples) in &s.runs {
            for (r, x) in samples.iter().enumerate() {
                let (who, v) = *first.entry((*m, r)).or_insert((s.system, x.visits));
                if v != x.visits {
                    return Err(Error::Wrong {
                        system: s.system.into(),
                        reason: format!(
                            "{} run {} visited {:?}, but {who} visited {v:?}",
                            m.name(),
                            r + 1,
                            x.visits
                        ),
                    });
                }
            }
        }
    }
    Ok(())
}
