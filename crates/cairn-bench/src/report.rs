//! `cairn bench report`: the markdown tables of `docs/benchmarks.md`, made
//! from the JSON documents the benchmarks write with `--json FILE`.
//!
//! The page shows the latest figures of every benchmark; regenerating it
//! means running the benchmark with `--json` and pasting what this prints,
//! rather than copying figures from a terminal by hand. Each document says
//! which benchmark wrote it (its `benchmark` field), which picks the
//! tables. Only the JSON is read, never the benchmark's code, so an old
//! result file renders as long as its fields are still there; a field that
//! is missing or of the wrong kind is an error naming the file and the
//! field.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::oo1::report::{fmt_bytes, fmt_ms};

/// A result file that could not be rendered: which file, and what is wrong
/// with it.
#[derive(Debug, thiserror::Error)]
#[error("{}: {what}", path.display())]
pub struct ReportError {
    /// The file.
    pub path: PathBuf,
    /// What is wrong with it.
    pub what: String,
}

/// The benchmarks whose `--json` documents this renders.
pub const BENCHMARKS: [&str; 8] = ["commit", "refs", "oo1", "oo7", "acob", "rpc", "connect", "attack"];

/// Reads the result file at `path` and renders its tables.
pub fn render_file(path: &Path) -> Result<String, ReportError> {
    let fail = |what: String| ReportError {
        path: path.to_path_buf(),
        what,
    };
    let text = std::fs::read_to_string(path).map_err(|e| fail(format!("cannot read it: {e}")))?;
    let doc: Value = serde_json::from_str(&text).map_err(|e| fail(format!("not JSON: {e}")))?;
    render(&doc).map_err(fail)
}

/// Renders one result document: its tables as markdown, then the machine
/// it ran on. The error says what is missing or wrong in the document.
pub fn render(doc: &Value) -> Result<String, String> {
    let benchmark = doc.get("benchmark").and_then(Value::as_str).ok_or_else(|| {
        "no \"benchmark\" field: not a result file written by a `cairn bench … --json` option".to_string()
    })?;
    let mut out = match benchmark {
        "commit" => commit(doc)?,
        "refs" => refs(doc)?,
        "oo1" => oo1(doc)?,
        "oo7" => oo7(doc)?,
        "acob" => acob(doc)?,
        "rpc" => rpc(doc)?,
        "connect" => connect(doc)?,
        "attack" => attack(doc)?,
        other => {
            return Err(format!(
                "unknown benchmark {other:?} (this reports {})",
                BENCHMARKS.join(", ")
            ))
        }
    };
    if let Some(line) = machine_line(doc) {
        let _ = writeln!(out, "\n{line}");
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Reading the document: every accessor names what it wanted, so a malformed
// file says where it is malformed.

fn field<'a>(v: &'a Value, key: &str, at: &str) -> Result<&'a Value, String> {
    v.get(key).ok_or_else(|| format!("{at} has no \"{key}\" field"))
}

fn num(v: &Value, key: &str, at: &str) -> Result<f64, String> {
    field(v, key, at)?
        .as_f64()
        .ok_or_else(|| format!("{at}.{key} is not a number"))
}

/// A number that may be absent or null (a ratio to a system not run).
fn opt_num(v: &Value, key: &str) -> Option<f64> {
    v.get(key).and_then(Value::as_f64)
}

fn text<'a>(v: &'a Value, key: &str, at: &str) -> Result<&'a str, String> {
    field(v, key, at)?
        .as_str()
        .ok_or_else(|| format!("{at}.{key} is not a string"))
}

fn array<'a>(v: &'a Value, key: &str, at: &str) -> Result<&'a [Value], String> {
    field(v, key, at)?
        .as_array()
        .map(Vec::as_slice)
        .ok_or_else(|| format!("{at}.{key} is not a list"))
}

/// The document's `results`, each with its place for error messages.
fn results(doc: &Value) -> Result<impl Iterator<Item = (String, &Value)> + '_, String> {
    Ok(array(doc, "results", "the document")?
        .iter()
        .enumerate()
        .map(|(i, r)| (format!("results[{i}]"), r)))
}

/// A counter of a result row (0 when the row does not have it).
fn counter(r: &Value, key: &str) -> f64 {
    r.get("counters")
        .and_then(|c| c.get(key))
        .and_then(Value::as_f64)
        .unwrap_or(0.0)
}

fn machine_line(doc: &Value) -> Option<String> {
    let m = doc.get("machine")?;
    let mut parts = Vec::new();
    if let Some(c) = m.get("cores").and_then(Value::as_u64) {
        parts.push(format!("{c} cores"));
    }
    if let Some(b) = m.get("memory_bytes").and_then(Value::as_f64) {
        parts.push(format!("{:.1} GiB", b / f64::from(1 << 30)));
    }
    if let Some(os) = m.get("os").and_then(Value::as_str) {
        parts.push(os.to_string());
    }
    (!parts.is_empty()).then(|| format!("Machine: {}.", parts.join(", ")))
}

// ---------------------------------------------------------------------------------------------
// Formatting.

/// A markdown table: a header row, then rows; numeric columns right-aligned.
struct Table {
    head: Vec<String>,
    right: Vec<bool>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table whose columns are `head`; a column named with a leading `>`
    /// is right-aligned (the `>` is not shown).
    fn new<S: AsRef<str>>(head: &[S]) -> Table {
        let (head, right) = head
            .iter()
            .map(|h| {
                let h = h.as_ref();
                match h.strip_prefix('>') {
                    Some(rest) => (rest.to_string(), true),
                    None => (h.to_string(), false),
                }
            })
            .unzip();
        Table {
            head,
            right,
            rows: Vec::new(),
        }
    }

    fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    fn render(&self, out: &mut String) {
        let line = |out: &mut String, cells: &[String]| {
            let _ = writeln!(out, "| {} |", cells.join(" | "));
        };
        line(out, &self.head);
        let rule: Vec<String> = self
            .right
            .iter()
            .map(|&r| if r { "---:" } else { "---" }.to_string())
            .collect();
        let _ = writeln!(out, "|{}|", rule.join("|"));
        for r in &self.rows {
            line(out, r);
        }
    }
}

/// `x` rounded to `decimals`, with thousands separated by commas (as the
/// page writes them: 22,557).
pub fn thousands(x: f64, decimals: usize) -> String {
    let s = format!("{:.decimals$}", x.abs());
    let (int, frac) = s.split_once('.').map_or((s.as_str(), None), |(i, f)| (i, Some(f)));
    let mut grouped = String::new();
    for (i, c) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(c);
    }
    let sign = if x < 0.0 && s.chars().any(|c| c.is_ascii_digit() && c != '0') {
        "-"
    } else {
        ""
    };
    match frac {
        Some(f) => format!("{sign}{grouped}.{f}"),
        None => format!("{sign}{grouped}"),
    }
}

fn ratio(x: Option<f64>) -> String {
    x.map_or_else(|| "–".to_string(), |v| format!("{v:.2}"))
}

/// A name as the page writes it: `reverse_traversal` → `reverse traversal`.
fn words(name: &str) -> String {
    name.replace('_', " ")
}

/// The items in the order they first appear, without repeats (the order
/// the benchmark ran them in).
fn distinct<T: PartialEq>(items: impl Iterator<Item = T>) -> Vec<T> {
    let mut out = Vec::new();
    for x in items {
        if !out.contains(&x) {
            out.push(x);
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// The benchmarks.

/// `bench commit`: one row per committer count.
fn commit(doc: &Value) -> Result<String, String> {
    let mut t = Table::new(&[
        ">committers",
        ">commits",
        ">commits/s",
        ">fsyncs",
        ">fsyncs/commit",
        ">mean µs",
        ">p99 µs",
    ]);
    for (at, r) in results(doc)? {
        t.row(vec![
            thousands(num(r, "threads", &at)?, 0),
            thousands(num(r, "commits", &at)?, 0),
            thousands(num(r, "commits_per_s", &at)?, 0),
            thousands(num(r, "fsyncs", &at)?, 0),
            format!("{:.3}", num(r, "fsyncs_per_commit", &at)?),
            thousands(num(r, "mean_us", &at)?, 0),
            thousands(num(r, "p99_us", &at)?, 0),
        ]);
    }
    let mut out = String::new();
    t.render(&mut out);
    Ok(out)
}

/// `bench refs`: one row per way of following a reference.
fn refs(doc: &Value) -> Result<String, String> {
    let mut t = Table::new(&["way", ">ns/step", ">× floor"]);
    for (at, r) in results(doc)? {
        t.row(vec![
            text(r, "way", &at)?.to_string(),
            format!("{:.1}", num(r, "ns_per_step", &at)?),
            format!("{:.2}", num(r, "ratio_to_floor", &at)?),
        ]);
    }
    let mut out = String::new();
    t.render(&mut out);
    Ok(out)
}

/// `bench connect`: µs per connection for each kind of session.
fn connect(doc: &Value) -> Result<String, String> {
    let mut t = Table::new(&[
        "session",
        ">µs per connection (connect, handshake, PING, close)",
        ">× plain",
    ]);
    for (at, r) in results(doc)? {
        t.row(vec![
            text(r, "session", &at)?.to_string(),
            thousands(num(r, "us_per_connection", &at)?, 0),
            format!("{:.1}", num(r, "ratio_to_plain", &at)?),
        ]);
    }
    let mut out = String::new();
    t.render(&mut out);
    Ok(out)
}

/// `bench attack`: the honest client's rate under each attack.
fn attack(doc: &Value) -> Result<String, String> {
    let mut t = Table::new(&["attack (within the rules)", ">honest commits/s", ">× no attack"]);
    for (at, r) in results(doc)? {
        t.row(vec![
            text(r, "attack", &at)?.to_string(),
            thousands(num(r, "commits_per_s", &at)?, 0),
            ratio(opt_num(r, "ratio_to_no_attack")),
        ]);
    }
    let mut out = String::new();
    t.render(&mut out);
    Ok(out)
}

/// `bench oo1`: load and size per system; milliseconds per measure and
/// phase, one column per system; round trips per run for the systems that
/// make any; and the `--clients` table if the run had one.
fn oo1(doc: &Value) -> Result<String, String> {
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

/// The `--clients` table of an OO1 document.
fn oo1_clients(rows: &Value, out: &mut String) -> Result<(), String> {
    let rows = rows.as_array().ok_or("concurrency is not a list")?;
    let mut t = Table::new(&[
        "mode",
        ">clients",
        ">ops/s",
        ">median ms per op",
        ">round trips per op",
        ">speed-up vs 1 client",
        ">deadlocks retried",
    ]);
    for (i, r) in rows.iter().enumerate() {
        let at = format!("concurrency[{i}]");
        t.row(vec![
            text(r, "mode", &at)?.to_string(),
            thousands(num(r, "clients", &at)?, 0),
            thousands(num(r, "ops_per_s", &at)?, 1),
            format!("{:.2}", num(r, "median_ms", &at)?),
            thousands(num(r, "round_trips_per_op", &at)?, 0),
            ratio(opt_num(r, "speedup_vs_1_client")),
            thousands(num(r, "deadlocks_retried", &at)?, 0),
        ]);
    }
    let _ = writeln!(out, "\nMany clients (`--clients`):\n");
    t.render(out);
    Ok(())
}

/// `bench oo7`: per clustering, traversal, buffer size (and phase, when
/// more than one ran), one column per strategy: page faults (faults to
/// flush) and milliseconds; then the findings.
fn oo7(doc: &Value) -> Result<String, String> {
    let mut rows = Vec::new();
    for (at, r) in results(doc)? {
        rows.push((
            text(r, "clustering", &at)?.to_uppercase(),
            text(r, "traversal", &at)?,
            num(r, "buffer_pages", &at)?,
            text(r, "phase", &at)?,
            text(r, "strategy", &at)?,
            num(r, "median_ms", &at)?,
            r,
        ));
    }
    let phases = distinct(rows.iter().map(|r| r.3));
    let label = |r: &(String, &str, f64, &str, &str, f64, &Value)| {
        let mut l = format!("{} {} {}", r.0, r.1, r.2);
        if phases.len() > 1 {
            l = format!("{l} {}", r.3);
        }
        l
    };
    let strategies = distinct(rows.iter().map(|r| r.4));
    let mut head = vec!["clustering, traversal, buffer pages".to_string()];
    head.extend(strategies.iter().map(|s| s.to_string()));
    let mut t = Table::new(&head);
    for l in distinct(rows.iter().map(label)) {
        let mut cells = vec![l.clone()];
        cells.extend(strategies.iter().map(|s| {
            rows.iter().find(|r| label(r) == l && r.4 == *s).map_or_else(
                || "–".to_string(),
                |r| {
                    format!(
                        "{} ({}) {}",
                        thousands(counter(r.6, "page_faults"), 0),
                        thousands(counter(r.6, "flush_page_faults"), 0),
                        thousands(r.5, 0)
                    )
                },
            )
        }));
        t.row(cells);
    }
    let mut out = String::from("Page faults (flush page faults) and milliseconds:\n\n");
    t.render(&mut out);
    findings(doc, &mut out)?;
    Ok(out)
}

/// The yes/no findings of an OO7 or ACOB document, if it has any.
fn findings(doc: &Value, out: &mut String) -> Result<(), String> {
    let Some(list) = doc.get("findings") else {
        return Ok(());
    };
    let list = list.as_array().ok_or("findings is not a list")?;
    if list.is_empty() {
        return Ok(());
    }
    let _ = writeln!(out, "\nFindings:\n");
    for (i, f) in list.iter().enumerate() {
        let at = format!("findings[{i}]");
        let holds = field(f, "holds", &at)?
            .as_bool()
            .ok_or_else(|| format!("{at}.holds is not true or false"))?;
        let _ = writeln!(
            out,
            "- **{}** {}: {}",
            if holds { "yes" } else { "no" },
            text(f, "finding", &at)?,
            text(f, "evidence", &at)?
        );
    }
    Ok(())
}

/// One ACOB step as the report reads it.
struct AcobRow<'a> {
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

fn acob_rows(doc: &Value) -> Result<Vec<AcobRow<'_>>, String> {
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
fn acob(doc: &Value) -> Result<String, String> {
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
fn adaptive_against_page(rows: &[AcobRow], out: &mut String) {
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
    if !t.rows.is_empty() {
        let _ = writeln!(out, "\nThe adaptive client's time over the page client's, per query:\n");
        t.render(out);
    }
}

/// One `bench rpc` measurement as the report reads it.
struct RpcRow<'a> {
    system: &'a str,
    transport: &'a str,
    writes: &'a str,
    clients: f64,
    in_flight: f64,
    /// Partial replies per request: 0 but for the streamed case.
    parts: f64,
    us: f64,
}

fn rpc_rows(doc: &Value) -> Result<Vec<RpcRow<'_>>, String> {
    let mut rows = Vec::new();
    for (at, r) in results(doc)? {
        rows.push(RpcRow {
            system: text(r, "system", &at)?,
            transport: text(r, "transport", &at)?,
            writes: text(r, "writes", &at)?,
            clients: num(r, "clients", &at)?,
            in_flight: num(r, "in_flight", &at)?,
            parts: opt_num(r, "parts_per_task").unwrap_or(0.0),
            us: num(r, "mean_us_per_task", &at)?,
        });
    }
    Ok(rows)
}

/// The µs per task of the plain (not streamed) measurement named.
fn rpc_us(rows: &[RpcRow], system: &str, writes: &str, transport: &str, clients: f64, k: f64) -> Option<f64> {
    rows.iter()
        .find(|r| {
            r.system == system
                && r.writes == writes
                && r.transport == transport
                && r.clients == clients
                && r.in_flight == k
                && r.parts == 0.0
        })
        .map(|r| r.us)
}

fn us2(x: Option<f64>) -> String {
    x.map_or_else(|| "–".to_string(), |v| format!("{v:.2}"))
}

fn rate1(x: Option<f64>) -> String {
    x.map_or_else(|| "–".to_string(), |v| format!("{v:.1}"))
}

/// `bench rpc`: per client count, µs per task of the raw floor and Cairn's
/// RPC in both write modes, with the ratios; then the streamed replies.
fn rpc(doc: &Value) -> Result<String, String> {
    let rows = rpc_rows(doc)?;
    let div = |a: Option<f64>, b: Option<f64>| a.zip(b).map(|(a, b)| a / b);
    let mut out = String::new();
    let calls: Vec<&RpcRow> = rows
        .iter()
        .filter(|r| r.system == "cairn-rpc" && r.writes == "each" && r.parts == 0.0)
        .collect();
    for clients in distinct(calls.iter().map(|r| r.clients)) {
        let mut t = Table::new(&[
            "socket",
            ">K",
            ">raw, each",
            ">rpc, each",
            ">rpc/raw",
            ">× sync rate",
            ">raw, coal",
            ">rpc, coal",
            ">× sync rate",
        ]);
        for r in calls.iter().filter(|r| r.clients == clients) {
            let (tr, k) = (r.transport, r.in_flight);
            let sync = rpc_us(&rows, "cairn-rpc", "each", tr, clients, 1.0);
            let (re, ce) = (rpc_us(&rows, "raw-pingpong", "each", tr, clients, k), Some(r.us));
            // One in flight has nothing to coalesce.
            let (rc, cc) = if k == 1.0 {
                (None, None)
            } else {
                (
                    rpc_us(&rows, "raw-pingpong", "coalesced", tr, clients, k),
                    rpc_us(&rows, "cairn-rpc", "coalesced", tr, clients, k),
                )
            };
            t.row(vec![
                tr.to_string(),
                format!("{k}"),
                us2(re),
                us2(ce),
                us2(div(ce, re)),
                rate1(div(sync, ce)),
                us2(rc),
                us2(cc),
                rate1(div(sync, cc)),
            ]);
        }
        if !out.is_empty() {
            out.push('\n');
        }
        let _ = writeln!(out, "{clients} client(s), mean µs per task:\n");
        t.render(&mut out);
    }
    rpc_streams(&rows, &mut out);
    Ok(out)
}

/// The streamed case of `bench rpc`: µs per partial reply, and the rate
/// against one synchronous call.
fn rpc_streams(rows: &[RpcRow], out: &mut String) {
    let mut t = Table::new(&["socket", ">partial replies", ">µs per part", ">× sync rate"]);
    for r in rows.iter().filter(|r| r.parts > 0.0) {
        let per_part = r.us / (r.parts + 1.0);
        let sync = rpc_us(rows, "cairn-rpc", "each", r.transport, 1.0, 1.0);
        t.row(vec![
            r.transport.to_string(),
            thousands(r.parts, 0),
            format!("{per_part:.2}"),
            rate1(sync.map(|s| s / per_part)),
        ]);
    }
    if !t.rows.is_empty() {
        let _ = writeln!(out, "\nOne request answered by a stream of partial replies:\n");
        t.render(out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn thousands_groups_and_rounds() {
        assert_eq!(thousands(22557.0, 0), "22,557");
        assert_eq!(thousands(7518.4, 0), "7,518");
        assert_eq!(thousands(999.0, 0), "999");
        assert_eq!(thousands(1234567.891, 1), "1,234,567.9");
        assert_eq!(thousands(-1500.0, 0), "-1,500");
        assert_eq!(thousands(-0.01, 0), "0");
    }

    #[test]
    fn a_commit_document_renders_the_pages_table() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(
            dir.path(),
            "commit.json",
            r#"{"benchmark": "commit", "machine": {"cores": 2, "memory_bytes": 25769803776},
                "results": [
                  {"threads": 1, "commits": 22557, "commits_per_s": 7518.2, "fsyncs": 22557,
                   "fsyncs_per_commit": 1.0, "mean_us": 132.4, "p99_us": 298.0, "retries": 0},
                  {"threads": 16, "commits": 74548, "commits_per_s": 24842.0, "fsyncs": 10208,
                   "fsyncs_per_commit": 0.1369, "mean_us": 643.0, "p99_us": 1383.0, "retries": 0}]}"#,
        );
        let out = render_file(&p).unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(
            lines[0],
            "| committers | commits | commits/s | fsyncs | fsyncs/commit | mean µs | p99 µs |"
        );
        assert_eq!(lines[1], "|---:|---:|---:|---:|---:|---:|---:|");
        assert_eq!(lines[2], "| 1 | 22,557 | 7,518 | 22,557 | 1.000 | 132 | 298 |");
        assert_eq!(lines[3], "| 16 | 74,548 | 24,842 | 10,208 | 0.137 | 643 | 1,383 |");
        assert!(out.ends_with("Machine: 2 cores, 24.0 GiB.\n"), "{out}");
    }

    #[test]
    fn an_oo1_document_gives_one_column_per_system_and_round_trips_for_remote_ones() {
        let doc = serde_json::json!({
            "benchmark": "oo1",
            "systems": [
                {"system": "cairn-embedded", "load_ms": 351.0, "db_size_bytes": 8388608},
                {"system": "cairn-page", "load_ms": 649.3, "db_size_bytes": null}],
            "results": [
                {"system": "cairn-embedded", "measure": "lookup", "phase": "cold", "median_ms": 12.9,
                 "counters": {"page_reads": 881.0}},
                {"system": "cairn-page", "measure": "lookup", "phase": "cold", "median_ms": 70.2,
                 "counters": {"round_trips": 650.0}},
                {"system": "cairn-embedded", "measure": "reverse_traversal", "phase": "warm", "median_ms": 1.09,
                 "counters": {}},
                {"system": "cairn-page", "measure": "reverse_traversal", "phase": "warm", "median_ms": 4.09,
                 "counters": {"round_trips": 27.0}}],
            "concurrency": [
                {"mode": "reads", "clients": 4, "ops": 80, "wall_s": 0.05, "ops_per_s": 1571.0,
                 "median_ms": 0.78, "round_trips_per_op": 0.0, "speedup_vs_1_client": 1.19,
                 "deadlocks_retried": 0, "lock_timeouts_retried": 0}]
        });
        let out = render(&doc).unwrap();
        assert!(out.contains("| cairn-embedded | 351.0 | 8.0 MiB |"), "{out}");
        assert!(out.contains("| cairn-page | 649.3 | - |"), "{out}");
        assert!(out.contains("| measure | cairn-embedded | cairn-page |"), "{out}");
        assert!(out.contains("| lookup cold | 12.90 | 70.20 |"), "{out}");
        assert!(out.contains("| reverse traversal warm | 1.09 | 4.09 |"), "{out}");
        // Round trips only for the system that makes any.
        assert!(
            out.contains("| measure | cairn-page |\n|---|---:|\n| lookup cold | 650 |"),
            "{out}"
        );
        assert!(out.contains("| reads | 4 | 1,571.0 | 0.78 | 0 | 1.19 | 0 |"), "{out}");
    }

    #[test]
    fn an_acob_document_gives_a_table_per_sweep_and_the_adaptive_ratios() {
        let step = |system: &str, sweep: &str, query: &str, f: u32, buffer: u32, ms: f64, trips: f64| {
            serde_json::json!({"system": system, "sweep": sweep, "clustering": f, "region": 5,
                "client_buffer_pages": buffer, "smeared": false, "query": query, "ms": ms,
                "counters": {"round_trips": trips}})
        };
        let smeared = |mut v: Value| {
            v["smeared"] = Value::Bool(true);
            v
        };
        let doc = serde_json::json!({
            "benchmark": "acob",
            "machine": {"cores": 2, "os": "linux"},
            "results": [
                step("page", "clustering", "scan", 10, 50, 167.0, 1500.0),
                step("adaptive", "clustering", "scan", 10, 50, 58.0, 1520.0),
                smeared(step("page", "clustering", "scan", 20, 50, 491.0, 5726.0)),
                smeared(step("adaptive", "clustering", "scan", 20, 50, 487.0, 5776.0)),
                step("page", "buffer", "random_read", 30, 300, 152.0, 1500.0),
                step("adaptive", "buffer", "random_read", 30, 300, 162.0, 1500.0)],
            "findings": [{"finding": "the page server improves with clustering", "holds": true,
                          "evidence": "page random read ms by f: 10: 2515"}]
        });
        let out = render(&doc).unwrap();
        assert!(out.contains("| query | f | page | adaptive |"), "{out}");
        assert!(out.contains("| scan | 10 | 167 / 1,500 | 58 / 1,520 |"), "{out}");
        assert!(out.contains("| query | f | client buffer | page | adaptive |"), "{out}");
        assert!(
            out.contains("| random read | 30 | 300 | 152 / 1,500 | 162 / 1,500 |"),
            "{out}"
        );
        assert!(
            out.contains("| scan, smeared | 20 | 491 / 5,726 | 487 / 5,776 |"),
            "{out}"
        );
        assert!(
            out.contains("| scan | 2 of 2 | 0.99 | 0.35 | 0.99 (clustering f = 20%, region 5, buffer 50, smeared: 487 against 491 ms) | 2 |"),
            "{out}"
        );
        assert!(
            out.contains("| random read | 1 of 1 | 1.07 | 1.07 | 1.07 (buffer f = 30%, region 5, buffer 300: 162 against 152 ms) | 0 |"),
            "{out}"
        );
        assert!(out.contains("- **yes** the page server improves with clustering: page random read"));
        assert!(out.ends_with("Machine: 2 cores, linux.\n"), "{out}");
    }

    #[test]
    fn rpc_refs_connect_attack_and_oo7_documents_render() {
        let rpc = serde_json::json!({"benchmark": "rpc", "results": [
            {"system": "raw-pingpong", "transport": "unix", "writes": "each", "clients": 1, "in_flight": 1, "mean_us_per_task": 17.32},
            {"system": "cairn-rpc", "transport": "unix", "writes": "each", "clients": 1, "in_flight": 1, "mean_us_per_task": 25.69},
            {"system": "raw-pingpong", "transport": "unix", "writes": "each", "clients": 1, "in_flight": 50, "mean_us_per_task": 1.56},
            {"system": "cairn-rpc", "transport": "unix", "writes": "each", "clients": 1, "in_flight": 50, "mean_us_per_task": 3.01},
            {"system": "raw-pingpong", "transport": "unix", "writes": "coalesced", "clients": 1, "in_flight": 50, "mean_us_per_task": 0.31},
            {"system": "cairn-rpc", "transport": "unix", "writes": "coalesced", "clients": 1, "in_flight": 50, "mean_us_per_task": 2.12},
            {"system": "cairn-rpc", "transport": "unix", "writes": "each", "clients": 1, "in_flight": 1, "mean_us_per_task": 400.0, "parts_per_task": 999}]});
        let out = render(&rpc).unwrap();
        assert!(
            out.contains("| unix | 1 | 17.32 | 25.69 | 1.48 | 1.0 | – | – | – |"),
            "{out}"
        );
        assert!(
            out.contains("| unix | 50 | 1.56 | 3.01 | 1.93 | 8.5 | 0.31 | 2.12 | 12.1 |"),
            "{out}"
        );
        assert!(out.contains("| unix | 999 | 0.40 | 64.2 |"), "{out}");

        let refs = serde_json::json!({"benchmark": "refs", "results": [
            {"way": "floor", "ns_per_step": 7.0, "ratio_to_floor": 1.0},
            {"way": "swizzled", "ns_per_step": 24.21, "ratio_to_floor": 3.4586}]});
        let out = render(&refs).unwrap();
        assert!(out.contains("| swizzled | 24.2 | 3.46 |"), "{out}");

        let connect = serde_json::json!({"benchmark": "connect", "results": [
            {"session": "plain, no login", "us_per_connection": 109.2, "ratio_to_plain": 1.0},
            {"session": "SCRAM-SHA-256 login", "us_per_connection": 3415.4, "ratio_to_plain": 31.28}]});
        let out = render(&connect).unwrap();
        assert!(out.contains("| SCRAM-SHA-256 login | 3,415 | 31.3 |"), "{out}");

        let attack = serde_json::json!({"benchmark": "attack", "results": [
            {"attack": "none", "commits_per_s": 3280.4, "ratio_to_no_attack": 1.0},
            {"attack": "idle", "commits_per_s": 3257.0, "ratio_to_no_attack": 0.9929}]});
        let out = render(&attack).unwrap();
        assert!(out.contains("| idle | 3,257 | 0.99 |"), "{out}");

        let oo7 = serde_json::json!({"benchmark": "oo7", "results": [
            {"strategy": "NOC", "clustering": "tb", "traversal": "T2a", "buffer_pages": 309, "phase": "cold",
             "median_ms": 177.2, "counters": {"page_faults": 1848, "flush_page_faults": 0}},
            {"strategy": "LOC/ERL", "clustering": "tb", "traversal": "T2a", "buffer_pages": 309, "phase": "cold",
             "median_ms": 203.0, "counters": {"page_faults": 1955, "flush_page_faults": 0}}],
            "findings": []});
        let out = render(&oo7).unwrap();
        assert!(
            out.contains("| clustering, traversal, buffer pages | NOC | LOC/ERL |"),
            "{out}"
        );
        assert!(out.contains("| TB T2a 309 | 1,848 (0) 177 | 1,955 (0) 203 |"), "{out}");
    }

    #[test]
    fn a_bad_file_is_an_error_naming_the_file_and_the_fault() {
        let dir = tempfile::tempdir().unwrap();
        let cases = [
            ("truncated.json", r#"{"benchmark": "commit", "results": ["#, "not JSON"),
            ("other.json", r#"{"name": "something else"}"#, "no \"benchmark\" field"),
            (
                "future.json",
                r#"{"benchmark": "tpc-c", "results": []}"#,
                "unknown benchmark \"tpc-c\"",
            ),
            (
                "missing.json",
                r#"{"benchmark": "commit", "results": [{"threads": 1}]}"#,
                "results[0] has no \"commits\" field",
            ),
            (
                "wrong-kind.json",
                r#"{"benchmark": "refs", "results": [{"way": "floor", "ns_per_step": "fast", "ratio_to_floor": 1}]}"#,
                "results[0].ns_per_step is not a number",
            ),
            (
                "no-results.json",
                r#"{"benchmark": "attack"}"#,
                "the document has no \"results\" field",
            ),
        ];
        for (name, text, what) in cases {
            let p = write(dir.path(), name, text);
            let e = render_file(&p).unwrap_err().to_string();
            assert!(e.starts_with(&p.display().to_string()), "{e}");
            assert!(e.contains(what), "{name}: {e}");
        }
        let gone = dir.path().join("absent.json");
        let e = render_file(&gone).unwrap_err().to_string();
        assert!(e.contains("absent.json: cannot read it"), "{e}");
    }
}
