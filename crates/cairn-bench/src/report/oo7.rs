//! `bench oo7`'s table: page faults and milliseconds per point and
//! strategy, and its findings.

use serde_json::Value;

use super::json::{counter, num, results, text};
use super::table::{distinct, findings, thousands, Table};

/// `bench oo7`: per clustering, traversal, buffer size (and phase, when
/// more than one ran), one column per strategy: page faults (faults to
/// flush) and milliseconds; then the findings.
pub(super) fn oo7(doc: &Value) -> Result<String, String> {
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
