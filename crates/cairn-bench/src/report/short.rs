//! The benchmarks of one table each: `bench commit`, `refs`, `connect`
//! and `attack`.

use serde_json::Value;

use super::json::{num, opt_num, results, text};
use super::table::{ratio, thousands, Table};

/// `bench commit`: one row per committer count.
pub(super) fn commit(doc: &Value) -> Result<String, String> {
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
pub(super) fn refs(doc: &Value) -> Result<String, String> {
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
pub(super) fn connect(doc: &Value) -> Result<String, String> {
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
pub(super) fn attack(doc: &Value) -> Result<String, String> {
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
