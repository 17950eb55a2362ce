//! Writing the page's markdown: a table with right-aligned numbers, the
//! page's number formats, and the yes/no findings an OO7 or ACOB document
//! carries.

use std::fmt::Write as _;

use serde_json::Value;

use super::json::{field, text};

/// A markdown table: a header row, then rows; numeric columns right-aligned.
pub(super) struct Table {
    head: Vec<String>,
    right: Vec<bool>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table whose columns are `head`; a column named with a leading `>`
    /// is right-aligned (the `>` is not shown).
    pub(super) fn new<S: AsRef<str>>(head: &[S]) -> Table {
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

    /// Whether no row was added.
    pub(super) fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    pub(super) fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub(super) fn render(&self, out: &mut String) {
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

pub(super) fn ratio(x: Option<f64>) -> String {
    x.map_or_else(|| "–".to_string(), |v| format!("{v:.2}"))
}

/// A name as the page writes it: `reverse_traversal` → `reverse traversal`.
pub(super) fn words(name: &str) -> String {
    name.replace('_', " ")
}

/// The items in the order they first appear, without repeats (the order
/// the benchmark ran them in).
pub(super) fn distinct<T: PartialEq>(items: impl Iterator<Item = T>) -> Vec<T> {
    let mut out = Vec::new();
    for x in items {
        if !out.contains(&x) {
            out.push(x);
        }
    }
    out
}

/// The yes/no findings of an OO7 or ACOB document, if it has any.
pub(super) fn findings(doc: &Value, out: &mut String) -> Result<(), String> {
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
