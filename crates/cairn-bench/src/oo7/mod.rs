//! `cairn bench oo7`: the OO7 small database (Carey, DeWitt & Naughton
//! 1993) and its traversals T1, T2a and T2b, swept over clusterings,
//! dual-buffer strategies and buffer sizes as Kemper & Kossmann (1994) did
//! (targets: `docs/benchmarks.md`, "Targets").
//!
//! Code map:
//!
//! | file | what it is |
//! |---|---|
//! | `generate.rs` | the database as plain structs from one Park–Miller stream; OO7's creation order |
//! | `schema.rs` | OO7's classes as `#[derive(Persistent)]` types |
//! | `build.rs` | the clusterings (TOC, TB, RANDOM) and storing the graph in two passes |
//! | `traverse.rs` | T1, T2a, T2b over the typed API, and the visits they must make |
//! | `strategy.rs` | the six strategies and [`options_for`], the one place they become `cairn::Options` |
//! | `deploy.rs` | embedded or `--connect`: creating, opening cold, measuring the database |
//! | `run.rs` | the sweep: build once per clustering, then every point's runs |
//! | `report.rs` | the tables, the space-time tables 1–3, the JSON |
//! | `findings.rs` | the paper's findings as yes/no lines with their figures |
//! | `plot.rs` | the PNG figures |
//!
//! Invariant: every run does exactly the visits the definition gives (the
//! counts and the null procedure's digest, [`traverse::expected`]); the
//! sweep fails otherwise. Timing is never asserted in tests.

pub mod build;
pub mod deploy;
pub mod findings;
pub mod generate;
pub mod plot;
pub mod report;
pub mod run;
pub mod schema;
pub mod strategy;
pub mod traverse;

use std::io::Write as _;
use std::path::{Path, PathBuf};

pub use build::Clustering;
pub use findings::Finding;
pub use generate::{Graph, Params};
pub use run::{Oo7Config, Phase, Sweep};
pub use strategy::{options_for, Strategy};
pub use traverse::{Traversal, Visits};

use crate::oo1::system::{Error, Result};
use crate::oo1::Machine;

/// Everything one run of the benchmark produced.
#[derive(Clone, Debug)]
pub struct Oo7Report {
    /// The configuration.
    pub config: Oo7Config,
    /// The machine.
    pub machine: Machine,
    /// The raw measurements.
    pub sweep: Sweep,
    /// One summary row per point.
    pub rows: Vec<report::Row>,
    /// The paper's findings, checked.
    pub findings: Vec<Finding>,
}

impl Oo7Report {
    /// The human report.
    pub fn table(&self) -> String {
        report::table(&self.config, &self.machine, &self.sweep, &self.rows, &self.findings)
    }

    /// The JSON document.
    pub fn json(&self) -> serde_json::Value {
        report::json(&self.config, &self.machine, &self.sweep, &self.rows, &self.findings)
    }

    /// Writes the JSON document to `path`.
    pub fn write_json(&self, path: &Path) -> Result<()> {
        let mut f = std::fs::File::create(path).map_err(|e| Error::io(format!("creating {}", path.display()), e))?;
        let text = serde_json::to_string_pretty(&self.json()).map_err(|e| Error::Plot(e.to_string()))?;
        writeln!(f, "{text}").map_err(|e| Error::io(format!("writing {}", path.display()), e))
    }
}

/// Runs the benchmark: the sweep, then its summary and findings.
pub fn run(cfg: &Oo7Config) -> Result<Oo7Report> {
    let sweep = run::sweep(cfg)?;
    let rows: Vec<report::Row> = sweep.points.iter().map(report::row).collect();
    let findings = findings::findings(&rows, report::half_database(&sweep));
    Ok(Oo7Report {
        config: cfg.clone(),
        machine: crate::oo1::machine(),
        sweep,
        rows,
        findings,
    })
}

/// `cairn bench oo7`'s arguments.
#[derive(clap::Args, Debug, Clone)]
pub struct Oo7Args {
    /// Clusterings, comma-separated: toc (creation order), tb (one group per
    /// type), random.
    #[arg(long, value_delimiter = ',', default_value = "toc,tb,random")]
    pub clustering: Vec<Clustering>,
    /// Dual-buffer strategies, comma-separated (NOC, EOC/LRL, LOC/LRL,
    /// LOC/ERL, LOC-/ERL, LOC+/ERL; any case, or loc-erl style).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "NOC,EOC/LRL,LOC/LRL,LOC/ERL,LOC-/ERL,LOC+/ERL"
    )]
    pub strategies: Vec<Strategy>,
    /// Buffer sizes in pages, comma-separated (default: 10%, 25%, 50% and
    /// 100% of the largest database, measured after the build).
    #[arg(long, value_delimiter = ',')]
    pub buffer_pages: Vec<usize>,
    /// Run the cold phase (a cold open, then the traversal); with neither
    /// --cold nor --warm, both run.
    #[arg(long)]
    pub cold: bool,
    /// Run the warm phase (a T1, not timed, then the traversal).
    #[arg(long)]
    pub warm: bool,
    /// Traversals, comma-separated: T1, T2a, T2b.
    #[arg(long, value_delimiter = ',', default_value = "T1,T2a,T2b")]
    pub traversals: Vec<Traversal>,
    /// Timed runs per point (the report gives the median).
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// The Park–Miller seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Where to create the scratch databases (default: the temp directory).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// The dual buffer's page segment, as a share of the buffer (0–1;
    /// default: each strategy's own, all of it for NOC, a quarter for EOC,
    /// half for the LOC family).
    #[arg(long)]
    pub page_share: Option<f64>,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Also draw the figures (oo7-CLUSTERING-TRAVERSAL.png) into this directory.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Run as a page-server client of `cairn serve` at this URL
    /// (cairn://HOST:PORT or cairn+unix:///PATH) instead of embedded. The
    /// databases are added to the server's database on every run.
    #[arg(long)]
    pub connect: Option<String>,
}

impl Oo7Args {
    /// The configuration these arguments describe.
    pub fn config(&self) -> Oo7Config {
        let phases = match (self.cold, self.warm) {
            (true, false) => vec![Phase::Cold],
            (false, true) => vec![Phase::Warm],
            _ => Phase::ALL.to_vec(),
        };
        Oo7Config {
            clusterings: distinct(&self.clustering),
            strategies: distinct(&self.strategies),
            traversals: distinct(&self.traversals),
            phases,
            buffer_pages: self.buffer_pages.clone(),
            runs: self.runs,
            seed: self.seed,
            dir: self.dir.clone(),
            connect: self.connect.clone(),
            page_share: self.page_share,
            progress: true,
            params: Params::SMALL,
        }
    }
}

/// `v` without repeats, in first-seen order.
fn distinct<T: PartialEq + Copy>(v: &[T]) -> Vec<T> {
    let mut out: Vec<T> = Vec::with_capacity(v.len());
    for &x in v {
        if !out.contains(&x) {
            out.push(x);
        }
    }
    out
}

/// Runs `cairn bench oo7`: the report on stdout, progress on stderr, and
/// the JSON and figures if asked.
pub fn main(args: &Oo7Args) -> Result<()> {
    let cfg = args.config();
    let report = run(&cfg)?;
    print!("{}", report.table());
    if let Some(path) = &args.json {
        report.write_json(path)?;
        eprintln!("wrote {}", path.display());
    }
    if let Some(dir) = &args.plot {
        for path in plot::draw(dir, &report.rows)? {
            eprintln!("wrote {}", path.display());
        }
    }
    Ok(())
}
