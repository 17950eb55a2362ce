//! `bench acob`'s tables: one per sweep, the adaptive client against the
//! page client per query, and the findings.

use std::fmt::Write as _;

use serde_json::Value;

use super::json::{counter, field, num, results, text};
use super::table::{distinct, findings, thousands, words, Table};

/// One ACOB step as the report reads it.
pub(super) struct AcobRow<'a> {
    system: &'a str,
    sweep: &'a str,
    /// The query, as the page writes it (`random read`).
    query: String,
    smeared: bool,
    clustering: f64,
    region: f64,
    buffer: f64,
    ms: f64,
    round_trips: f64,
}

impl AcobRow<'_> {
    /// The query, and whether the sets were smeared: `scan, smeared`.
    fn label(&self) -> String {
        if self.smeared {
            format!("{}, smeared", self.query)
        } else {
            self.query.clone()
        }
    }

    /// The columns that tell a step's point apart within its sweep.
    fn key(&self) -> Vec<String> {
        let (q, f, region, buffer) = (
            self.label(),
            format!("{}", self.clustering),
            format!("{}", self.region),
            format!("{}", self.buffer),
        );
        match self.sweep {
            "clustering" => vec![q, f],
            "region" => vec![q, region, f],
            "buffer" => vec![q, f, buffer],
            _ => vec![q, f, region, buffer],
        }
    }
}

pub(super) fn acob_rows(doc: &Value) -> Result<Vec<AcobRow<'_>>, String> {
    let mut rows = Vec::new();
    for (at, r) in results(doc)? {
        let smeared = field(r, "smeared", &at)?
            .as_bool()
            .ok_or_else(|| format!("{at}.smeared is not true or false"))?;
        rows.push(AcobRow {
            system: text(r, "system", &at)?,
            sweep: text(r, "sweep", &at)?,
            query: words(text(r, "query", &at)?),
            smeared,
            clustering: num(r, "clustering", &at)?,
            region: num(r, "region", &at)?,
            buffer: num(r, "client_buffer_pages", &at)?,
            ms: num(r, "ms", &at)?,
            round_trips: counter(r, "round_trips"),
        });
    }
    Ok(rows)
}

/// `bench acob`: per sweep, one row per (query, point) and one column per
/// system, "ms / round trips"; the adaptive client against the page
/// client when both ran; then the findings.
pub(super) fn acob(doc: &Value) -> Result<String, String> {
    let rows = acob_rows(doc)?;
    let systems = distinct(rows.iter().map(|r| r.system));
    let mut out = String::new();
    for sweep in distinct(rows.iter().map(|r| r.sweep)) {
        let mut head: Vec<String> = match sweep {
            "clustering" => vec!["query", "f"],
            "region" => vec!["query", "region", "f"],
            "buffer" => vec!["query", "f", "client buffer"],
            _ => vec!["query", "f", "region", "client buffer"],
        }
        .into_iter()
        .map(String::from)
        .collect();
        head.extend(systems.iter().map(|s| s.to_string()));
        let mut t = Table::new(&head);
        let in_sweep: Vec<&AcobRow> = rows.iter().filter(|r| r.sweep == sweep).collect();
        for key in distinct(in_sweep.iter().map(|r| r.key())) {
            let mut cells = key.clone();
            cells.extend(systems.iter().map(|s| {
                in_sweep.iter().find(|r| r.key() == key && r.system == *s).map_or_else(
                    || "–".to_string(),
                    |r| format!("{} / {}", thousands(r.ms, 0), thousands(r.round_trips, 0)),
                )
            }));
            t.row(cells);
        }
        if !out.is_empty() {
            out.push('\n');
        }
        let _ = writeln!(out, "Sweep `{sweep}`, ms / round trips per step:\n");
        t.render(&mut out);
    }
    adaptive_against_page(&rows, &mut out);
    findings(doc, &mut out)?;
    Ok(out)
}

/// The adaptive client's time over the page client's, per query over every
/// point both ran (smeared sets counted with their query): how many within
/// 10%, the median, best and worst ratio (with the worst point), and how
/// many faster.
pub(super) fn adaptive_against_page(rows: &[AcobRow], out: &mut String) {
    let mut t = Table::new(&["query", "within 10%", ">median", ">best", "worst", ">faster"]);
    for query in distinct(rows.iter().map(|r| r.query.clone())) {
        let mut ratios: Vec<(f64, &AcobRow, &AcobRow)> = rows
            .iter()
            .filter(|a| a.system == "adaptive" && a.query == query)
            .filter_map(|a| {
                let p = rows
                    .iter()
                    .find(|p| p.system == "page" && p.sweep == a.sweep && p.key() == a.key())?;
                (p.ms > 0.0).then(|| (a.ms / p.ms, a, p))
            })
            .collect();
        if ratios.is_empty() {
            continue;
        }
        ratios.sort_by(|x, y| x.0.total_cmp(&y.0));
        let n = ratios.len();
        let within = ratios.iter().filter(|r| r.0 <= 1.1).count();
        let faster = ratios.iter().filter(|r| r.0 < 1.0).count();
        let (worst, a, p) = ratios[n - 1];
        t.row(vec![
            query,
            format!("{within} of {n}"),
            format!("{:.2}", ratios[n / 2].0),
            format!("{:.2}", ratios[0].0),
            format!(
                "{worst:.2} ({} f = {}%, region {}, buffer {}{}: {} against {} ms)",
                a.sweep,
                a.clustering,
                a.region,
                a.buffer,
                if a.smeared { ", smeared" } else { "" },
                thousands(a.ms, 0),
                thousands(p.ms, 0)
            ),
            format!("{faster}"),
        ]);
    }
    if !t.is_empty() {
        let _ = writeln!(out, "\nThe adaptive client's time over the page client's, per query:\n");
        t.render(out);
    }
}
