//! `bench oo1`'s tables: load and size, milliseconds and round trips per
//! measure, and the many-clients run.

use std::fmt::Write as _;

use serde_json::Value;

use super::json::{array, counter, field, num, opt_num, results, text};
use super::table::{distinct, ratio, thousands, words, Table};
use crate::oo1::report::{fmt_bytes, fmt_ms};

/// `bench oo1`: load and size per system; milliseconds per measure and
/// phase, one column per system; round trips per run for the systems that
/// make any; and the `--clients` table if the run had one.
pub(super) fn oo1(doc: &Value) -> Result<String, String> {
    let mut out = String::new();
    let mut load = Table::new(&["system", ">load ms", ">size on disk"]);
    for (i, s) in array(doc, "systems", "the document")?.iter().enumerate() {
        let at = format!("systems[{i}]");
        let size = field(s, "db_size_bytes", &at)?.as_u64();
        load.row(vec![
            text(s, "system", &at)?.to_string(),
            fmt_ms(num(s, "load_ms", &at)?),
            fmt_bytes(size),
        ]);
    }
    load.render(&mut out);

    let mut rows = Vec::new();
    for (at, r) in results(doc)? {
        let label = format!("{} {}", words(text(r, "measure", &at)?), text(r, "phase", &at)?);
        rows.push((label, text(r, "system", &at)?, num(r, "median_ms", &at)?, r));
    }
    let systems = distinct(rows.iter().map(|r| r.1));
    let labels = distinct(rows.iter().map(|r| r.0.clone()));
    let cell = |label: &str, system: &str, f: &dyn Fn(f64, &Value) -> String| {
        rows.iter()
            .find(|r| r.0 == label && r.1 == system)
            .map_or_else(|| "–".to_string(), |r| f(r.2, r.3))
    };
    let mut head = vec!["measure".to_string()];
    head.extend(systems.iter().map(|s| format!(">{s}")));
    let mut ms = Table::new(&head);
    for label in &labels {
        let mut cells = vec![label.clone()];
        cells.extend(systems.iter().map(|s| cell(label, s, &|m, _| fmt_ms(m))));
        ms.row(cells);
    }
    let _ = writeln!(
        out,
        "\nMilliseconds (cold: run 1; warm and hot: the median of runs 2 on):\n"
    );
    ms.render(&mut out);

    let remote: Vec<&str> = systems
        .iter()
        .copied()
        .filter(|s| rows.iter().any(|r| r.1 == *s && counter(r.3, "round_trips") > 0.0))
        .collect();
    if !remote.is_empty() {
        let mut head = vec!["measure".to_string()];
        head.extend(remote.iter().map(|s| format!(">{s}")));
        let mut trips = Table::new(&head);
        for label in &labels {
            let mut cells = vec![label.clone()];
            cells.extend(
                remote
                    .iter()
                    .map(|s| cell(label, s, &|_, r| thousands(counter(r, "round_trips"), 0))),
            );
            trips.row(cells);
        }
        let _ = writeln!(out, "\nRound trips per run:\n");
        trips.render(&mut out);
    }
    if let Some(c) = doc.get("concurrency") {
        oo1_clients(c, &mut out)?;
    }
    Ok(out)
}

/// The `--clients` tables of an OO1 document: the reads, cold reads and
/// mixed runs, then the browse runs (the reader and its writers apart). A
/// document written before a field existed renders it as `–`, and one
/// without `system` was `cairn-page`'s, the only system measured then.
pub(super) fn oo1_clients(rows: &Value, out: &mut String) -> Result<(), String> {
    let rows = rows.as_array().ok_or("concurrency is not a list")?;
    let mut t = Table::new(&[
        "system",
        "mode",
        ">clients",
        ">ops/s",
        ">median ms per op",
        ">p99 ms",
        ">round trips per op",
        ">speed-up vs 1 client",
        ">deadlocks retried",
        ">per 100 ops",
        ">lock timeouts retried",
        ">lock wait ms per op",
    ]);
    let mut browse = Table::new(&[
        "system",
        "run",
        ">clients",
        ">ops/s",
        ">median ms",
        ">p99 ms",
        ">× alone",
        ">deadlocks retried",
        ">per 100 ops",
        ">lock timeouts retried",
        ">lock wait ms per op",
    ]);
    for (i, r) in rows.iter().enumerate() {
        let at = format!("concurrency[{i}]");
        let system = r
            .get("system")
            .and_then(Value::as_str)
            .unwrap_or("cairn-page")
            .to_string();
        let mode = text(r, "mode", &at)?;
        let clients = num(r, "clients", &at)?;
        if mode == "browse" || mode == "writers alone" {
            browse_rows(r, &at, &system, mode, clients, &mut browse)?;
            continue;
        }
        t.row(vec![
            system,
            mode.to_string(),
            thousands(clients, 0),
            thousands(num(r, "ops_per_s", &at)?, 1),
            format!("{:.2}", num(r, "median_ms", &at)?),
            opt_num(r, "p99_ms").map_or_else(|| "–".to_string(), |x| format!("{x:.2}")),
            thousands(num(r, "round_trips_per_op", &at)?, 0),
            ratio(opt_num(r, "speedup_vs_1_client")),
            thousands(num(r, "deadlocks_retried", &at)?, 0),
            opt_thousands(r, "deadlocks_per_100_ops", 2),
            opt_thousands(r, "lock_timeouts_retried", 0),
            opt_thousands(r, "lock_wait_ms_per_op", 3),
        ]);
    }
    if !t.is_empty() {
        let _ = writeln!(out, "\nMany clients (`--clients`):\n");
        t.render(out);
    }
    if !browse.is_empty() {
        let _ = writeln!(
            out,
            "\nBrowse while others write (× alone: the reader's median traversal over its median alone, target \
             ≤ 1.3; the writers' inserts/s without the reader over theirs with it, target ≤ 1.2):\n"
        );
        browse.render(out);
    }
    Ok(())
}

/// `key` of `r` with `decimals`, or `–` for a document written before it.
fn opt_thousands(r: &Value, key: &str, decimals: usize) -> String {
    opt_num(r, key).map_or_else(|| "–".to_string(), |x| thousands(x, decimals))
}

/// The rows of one browse run (`r`, at `at`): its reader and its writers,
/// each on a line of its own.
fn browse_rows(r: &Value, at: &str, system: &str, mode: &str, clients: f64, browse: &mut Table) -> Result<(), String> {
    let wait = opt_thousands(r, "lock_wait_ms_per_op", 3);
    for (key, ratio_key) in [
        ("reader", "reader_ratio_to_alone"),
        ("writers", "writers_ratio_to_alone"),
    ] {
        let Some(part) = r.get(key).filter(|p| p.is_object()) else {
            continue;
        };
        let at = format!("{at}.{key}");
        let n = num(part, "clients", &at)?;
        let writers = |n: f64| {
            let s = if n == 1.0 { "" } else { "s" };
            format!("{} writer{s}", thousands(n, 0))
        };
        let label = match (mode, key) {
            ("writers alone", _) => format!("{} alone", writers(n)),
            (_, "reader") if clients <= 1.0 => "reader alone".to_string(),
            (_, "reader") => format!("reader, {}", writers(clients - 1.0)),
            _ => format!("{}, with the reader", writers(n)),
        };
        browse.row(vec![
            system.to_string(),
            label,
            thousands(clients, 0),
            thousands(num(part, "ops_per_s", &at)?, 1),
            format!("{:.2}", num(part, "median_ms", &at)?),
            format!("{:.2}", num(part, "p99_ms", &at)?),
            ratio(opt_num(r, ratio_key)),
            thousands(num(part, "deadlocks_retried", &at)?, 0),
            opt_thousands(part, "deadlocks_per_100_ops", 2),
            thousands(num(part, "lock_timeouts_retried", &at)?, 0),
            wait.clone(),
        ]);
    }
    Ok(())
}
