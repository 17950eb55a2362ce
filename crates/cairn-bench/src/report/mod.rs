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

mod acob;
mod json;
mod oo1;
mod oo7;
mod rpc;
mod short;
mod table;
#[cfg(test)]
mod tests;

pub use table::thousands;

use json::machine_line;

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
        "commit" => short::commit(doc)?,
        "refs" => short::refs(doc)?,
        "oo1" => oo1::oo1(doc)?,
        "oo7" => oo7::oo7(doc)?,
        "acob" => acob::acob(doc)?,
        "rpc" => rpc::rpc(doc)?,
        "connect" => short::connect(doc)?,
        "attack" => short::attack(doc)?,
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
