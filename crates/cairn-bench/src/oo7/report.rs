//! The OO7 report: per clustering × traversal × phase, a table of strategy
//! × buffer size (median ms and the counters); the paper's space-time
//! tables 1–3; the findings; and the JSON document (`--json`).
//!
//! Times are the median of the runs with their min–max; each counter is its
//! median over the runs. A counter a run does not report (the engine's
//! page writes against a server) prints as `-` and is absent from JSON.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::build::Clustering;
use super::run::{Oo7Config, Phase, Point, Sweep};
use super::strategy::{Strategy, OBJECT_CACHE_BYTES};
use super::traverse::Traversal;
use crate::oo1::report::{fmt_bytes, fmt_ms};
use crate::oo1::Machine;

/// Bytes per page (Cairn's default page size, which the benchmark uses).
pub const PAGE_BYTES: usize = 4096;

/// Counters in the table, in order: (column, key).
pub const TABLE_COUNTERS: [(&str, &str); 9] = [
    ("page faults", "page_faults"),
    ("obj faults", "object_faults"),
    ("copied", "objects_copied"),
    ("bytes copied", "bytes_copied"),
    ("relocations", "relocations"),
    ("duplicates", "duplicates"),
    ("util ‰", "utilization_permille"),
    ("pages flushed", "pages_flushed"),
    ("page writes", "page_writes"),
];

/// One finding and whether the results show it.
#[derive(Clone, Debug, PartialEq)]
pub struct Finding {
    /// What the paper found.
    pub finding: String,
    /// Whether this sweep's results show it.
    pub holds: bool,
    /// The figures behind the answer.
    pub evidence: String,
}

impl Finding {
    pub(super) fn new(finding: &str, holds: bool, evidence: String) -> Finding {
        Finding {
            finding: finding.into(),
            holds,
            evidence,
        }
    }
}

/// One point's summary.
#[derive(Clone, Debug)]
pub struct Row {
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
    /// Median milliseconds.
    pub median_ms: f64,
    /// Fastest run.
    pub min_ms: f64,
    /// Slowest run.
    pub max_ms: f64,
    /// Each counter's median over the runs.
    pub counters: BTreeMap<&'static str, u64>,
}

impl Row {
    /// The space-time product, MB·s: response time × buffer size.
    pub fn space_time(&self) -> f64 {
        self.median_ms / 1e3 * (self.buffer_pages * PAGE_BYTES) as f64 / f64::from(1 << 20)
    }
}

fn median_f(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn median_u(v: &mut [u64]) -> u64 {
    v.sort_unstable();
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2
    }
}

/// The summary of one point (at least one sample).
pub fn row(p: &Point) -> Row {
    let mut ms: Vec<f64> = p.samples.iter().map(|s| s.ms).collect();
    let (min_ms, max_ms) = ms
        .iter()
        .fold((f64::INFINITY, 0.0f64), |(lo, hi), &x| (lo.min(x), hi.max(x)));
    let mut keys: Vec<&'static str> = p.samples.iter().flat_map(|s| s.counters.0.keys().copied()).collect();
    keys.sort_unstable();
    keys.dedup();
    let counters = keys
        .into_iter()
        .map(|k| {
            let mut v: Vec<u64> = p
                .samples
                .iter()
                .map(|s| s.counters.0.get(k).copied().unwrap_or(0))
                .collect();
            (k, median_u(&mut v))
        })
        .collect();
    Row {
        clustering: p.clustering,
        traversal: p.traversal,
        phase: p.phase,
        strategy: p.strategy,
        buffer_pages: p.buffer_pages,
        median_ms: median_f(&mut ms),
        min_ms,
        max_ms,
        counters,
    }
}

/// The row of (clustering, traversal, phase, strategy, buffer), if measured.
pub fn find(rows: &[Row], c: Clustering, t: Traversal, ph: Phase, s: Strategy, buffer_pages: usize) -> Option<&Row> {
    rows.iter().find(|r| {
        r.clustering == c && r.traversal == t && r.phase == ph && r.strategy == s && r.buffer_pages == buffer_pages
    })
}

/// The smallest space-time product of strategy `s` over the buffer sizes of
/// at least `min_pages` (the paper's "well-tuned" range: it took buffers
/// from half the database up, since tiny buffers minimise the product at
/// unacceptable response times); all sizes if none is that large.
pub fn min_space_time(
    rows: &[Row],
    c: Clustering,
    t: Traversal,
    ph: Phase,
    s: Strategy,
    min_pages: usize,
) -> Option<f64> {
    let mine = || {
        rows.iter()
            .filter(move |r| r.clustering == c && r.traversal == t && r.phase == ph && r.strategy == s)
    };
    let large = mine()
        .filter(|r| r.buffer_pages >= min_pages)
        .map(Row::space_time)
        .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.min(x))));
    large.or_else(|| {
        mine()
            .map(Row::space_time)
            .fold(None, |m, x| Some(m.map_or(x, |m: f64| m.min(x))))
    })
}

fn fmt_opt(x: Option<f64>) -> String {
    x.map_or_else(|| "-".into(), |v| format!("{v:.2}"))
}

/// The header: what ran, where, on what.
fn header(o: &mut String, cfg: &Oo7Config, machine: &Machine, sweep: &Sweep) {
    let p = cfg.params;
    let _ = writeln!(
        o,
        "OO7 (Carey, DeWitt & Naughton 1993) for dual buffering (Kemper & Kossmann 1994): seed {}, median of {} \
         run(s) per point",
        cfg.seed, cfg.runs
    );
    let _ = writeln!(
        o,
        "database: 1 module, {} assemblies ({} base), {} composite parts with {}-byte documents, {} atomic parts, \
         {} connections",
        p.assemblies(),
        p.base_assemblies(),
        p.composite_parts,
        p.document_bytes,
        p.atomic_parts(),
        p.connections()
    );
    let _ = writeln!(
        o,
        "machine: {} cores, {:.1} GiB, {}; {}",
        machine.cores,
        machine.memory_bytes as f64 / f64::from(1 << 30),
        machine.os,
        sweep.deployment.describe()
    );
    let _ = writeln!(
        o,
        "T1 visits {} assemblies, {} composite-part visits, {} atomic-part visits (checked in every run, with the \
         null procedure's digest); warm = a T1 first, not timed",
        p.assemblies(),
        p.t1_composite_visits(),
        p.t1_atomic_visits()
    );
    let _ = writeln!(
        o,
        "client buffer: the dual buffer (page faults, copies, relocations, duplicates, utilization are its \
         counters), {} KiB of decoded objects beside it; updates go through it (written through, or held as \
         modified copies, by the strategy); pages flushed = the pages each commit writes (no-steal)",
        OBJECT_CACHE_BYTES / 1024
    );
    let _ = writeln!(o);
    let _ = writeln!(
        o,
        "{:<10} {:>10} {:>8} {:>13}",
        "clustering", "load ms", "pages", "size on disk"
    );
    for b in &sweep.built {
        let _ = writeln!(
            o,
            "{:<10} {:>10} {:>8} {:>13}",
            b.clustering.label(),
            fmt_ms(b.load_ms),
            b.pages,
            fmt_bytes(b.size_on_disk_bytes)
        );
    }
    let largest = sweep.built.iter().map(|b| b.pages).max().unwrap_or(1).max(1);
    let sizes: Vec<String> = sweep
        .buffer_pages
        .iter()
        .map(|&b| format!("{b} ({:.0}%)", 100.0 * b as f64 / largest as f64))
        .collect();
    let _ = writeln!(
        o,
        "buffer sizes, pages (% of the largest database): {}",
        sizes.join(", ")
    );
}

/// The tables of one clustering × traversal × phase.
fn point_tables(o: &mut String, cfg: &Oo7Config, sweep: &Sweep, rows: &[Row]) {
    for &c in &cfg.clusterings {
        for &t in &cfg.traversals {
            for &ph in &cfg.phases {
                let _ = writeln!(o);
                let _ = writeln!(o, "{} {} {}", c.label(), t.name(), ph.name());
                let _ = write!(
                    o,
                    "{:<9} {:>7} {:>10} {:>19}",
                    "strategy", "buffer", "median ms", "min–max ms"
                );
                for (label, _) in TABLE_COUNTERS {
                    let _ = write!(o, " {label:>13}");
                }
                let _ = writeln!(o);
                for &s in &cfg.strategies {
                    for &b in &sweep.buffer_pages {
                        let Some(r) = find(rows, c, t, ph, s, b) else {
                            continue;
                        };
                        let _ = write!(
                            o,
                            "{:<9} {:>7} {:>10} {:>19}",
                            s.name(),
                            b,
                            fmt_ms(r.median_ms),
                            format!("{}–{}", fmt_ms(r.min_ms), fmt_ms(r.max_ms))
                        );
                        for (_, key) in TABLE_COUNTERS {
                            let v = r.counters.get(key).map_or_else(|| "-".to_string(), |v| v.to_string());
                            let _ = write!(o, " {v:>13}");
                        }
                        let _ = writeln!(o);
                    }
                }
            }
        }
    }
}

/// The paper's clustering order in its tables.
const PAPER_ORDER: [Clustering; 3] = [Clustering::Tb, Clustering::Toc, Clustering::Random];

/// Tables 1–3: minimum space-time products.
fn space_time_tables(o: &mut String, cfg: &Oo7Config, rows: &[Row], min_pages: usize) {
    let cols: Vec<Clustering> = PAPER_ORDER
        .into_iter()
        .filter(|c| cfg.clusterings.contains(c))
        .collect();
    let _ = writeln!(o);
    let _ = writeln!(
        o,
        "minimum space-time products [MB·s] = median time × buffer size, over buffers of at least {min_pages} pages \
         (half the database, the paper's tuned range)"
    );
    let tables: [(&str, Vec<(Traversal, Phase)>); 3] = [
        ("Table 1: cold T1", vec![(Traversal::T1, Phase::Cold)]),
        ("Table 2: warm T1", vec![(Traversal::T1, Phase::Warm)]),
        (
            "Table 3: cold T2a | cold T2b | warm T2a | warm T2b",
            vec![
                (Traversal::T2a, Phase::Cold),
                (Traversal::T2b, Phase::Cold),
                (Traversal::T2a, Phase::Warm),
                (Traversal::T2b, Phase::Warm),
            ],
        ),
    ];
    for (title, blocks) in tables {
        let blocks: Vec<(Traversal, Phase)> = blocks
            .into_iter()
            .filter(|(t, ph)| cfg.traversals.contains(t) && cfg.phases.contains(ph))
            .collect();
        if blocks.is_empty() {
            continue;
        }
        let _ = writeln!(o);
        let _ = writeln!(o, "{title}");
        let _ = write!(o, "{:<9}", "");
        for (k, _) in blocks.iter().enumerate() {
            if k > 0 {
                let _ = write!(o, " |");
            }
            for c in &cols {
                let _ = write!(o, " {:>8}", c.label());
            }
        }
        let _ = writeln!(o);
        for &s in &cfg.strategies {
            let _ = write!(o, "{:<9}", s.name());
            for (k, &(t, ph)) in blocks.iter().enumerate() {
                if k > 0 {
                    let _ = write!(o, " |");
                }
                for &c in &cols {
                    let _ = write!(o, " {:>8}", fmt_opt(min_space_time(rows, c, t, ph, s, min_pages)));
                }
            }
            let _ = writeln!(o);
        }
    }
}

/// The human report.
pub fn table(cfg: &Oo7Config, machine: &Machine, sweep: &Sweep, rows: &[Row], findings: &[Finding]) -> String {
    let mut o = String::new();
    header(&mut o, cfg, machine, sweep);
    point_tables(&mut o, cfg, sweep, rows);
    space_time_tables(&mut o, cfg, rows, half_database(sweep));
    let _ = writeln!(o);
    let _ = writeln!(o, "findings (Kemper & Kossmann §6):");
    for f in findings {
        let _ = writeln!(
            o,
            "  {:<3} {}: {}",
            if f.holds { "yes" } else { "no" },
            f.finding,
            f.evidence
        );
    }
    let _ = writeln!(o);
    let _ = writeln!(o, "sweep: {:.1} s", sweep.elapsed_s);
    o
}

/// Half the largest database, in pages: the lower end of the space-time
/// tables' buffer range.
pub fn half_database(sweep: &Sweep) -> usize {
    (sweep.built.iter().map(|b| b.pages).max().unwrap_or(0) as usize).div_ceil(2)
}

/// The JSON document.
pub fn json(
    cfg: &Oo7Config,
    machine: &Machine,
    sweep: &Sweep,
    rows: &[Row],
    findings: &[Finding],
) -> serde_json::Value {
    let p = cfg.params;
    serde_json::json!({
        "benchmark": "oo7",
        "machine": {
            "cores": machine.cores,
            "memory_bytes": machine.memory_bytes,
            "os": machine.os,
        },
        "config": {
            "deployment": sweep.deployment.name(),
            "seed": cfg.seed,
            "runs": cfg.runs,
            "clusterings": cfg.clusterings.iter().map(|c| c.name()).collect::<Vec<_>>(),
            "strategies": cfg.strategies.iter().map(|s| s.name()).collect::<Vec<_>>(),
            "traversals": cfg.traversals.iter().map(|t| t.name()).collect::<Vec<_>>(),
            "phases": cfg.phases.iter().map(|ph| ph.name()).collect::<Vec<_>>(),
            "buffer_pages": sweep.buffer_pages,
            "page_bytes": PAGE_BYTES,
            "object_cache_bytes": OBJECT_CACHE_BYTES,
            "page_share": cfg.page_share,
            "strategies_wired": true,
            "database": {
                "assemblies": p.assemblies(),
                "base_assemblies": p.base_assemblies(),
                "composite_parts": p.composite_parts,
                "atomic_parts": p.atomic_parts(),
                "connections": p.connections(),
                "document_bytes": p.document_bytes,
            },
            "built": sweep.built.iter().map(|b| serde_json::json!({
                "clustering": b.clustering.name(),
                "load_ms": b.load_ms,
                "pages": b.pages,
                "size_on_disk_bytes": b.size_on_disk_bytes,
            })).collect::<Vec<_>>(),
            "sweep_s": sweep.elapsed_s,
        },
        "results": rows.iter().map(|r| {
            let counters: serde_json::Map<String, serde_json::Value> = r
                .counters
                .iter()
                .map(|(k, v)| ((*k).to_string(), serde_json::json!(v)))
                .collect();
            serde_json::json!({
                "strategy": r.strategy.name(),
                "clustering": r.clustering.name(),
                "traversal": r.traversal.name(),
                "buffer_pages": r.buffer_pages,
                "phase": r.phase.name(),
                "median_ms": r.median_ms,
                "counters": counters,
            })
        }).collect::<Vec<_>>(),
        "findings": findings.iter().map(|f| serde_json::json!({
            "finding": f.finding,
            "holds": f.holds,
            "evidence": f.evidence,
        })).collect::<Vec<_>>(),
    })
}
