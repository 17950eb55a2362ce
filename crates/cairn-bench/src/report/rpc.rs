//! `bench rpc`'s tables: µs per task of the raw floor and the RPC layer
//! per socket, clients and requests in flight, and the streamed replies.

use std::fmt::Write as _;

use serde_json::Value;

use super::json::{num, opt_num, results, text};
use super::table::{distinct, thousands, Table};

/// One `bench rpc` measurement as the report reads it.
pub(super) struct RpcRow<'a> {
    system: &'a str,
    transport: &'a str,
    writes: &'a str,
    clients: f64,
    in_flight: f64,
    /// Partial replies per request: 0 but for the streamed case.
    parts: f64,
    us: f64,
}

pub(super) fn rpc_rows(doc: &Value) -> Result<Vec<RpcRow<'_>>, String> {
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
pub(super) fn rpc_us(
    rows: &[RpcRow],
    system: &str,
    writes: &str,
    transport: &str,
    clients: f64,
    k: f64,
) -> Option<f64> {
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

pub(super) fn us2(x: Option<f64>) -> String {
    x.map_or_else(|| "–".to_string(), |v| format!("{v:.2}"))
}

pub(super) fn rate1(x: Option<f64>) -> String {
    x.map_or_else(|| "–".to_string(), |v| format!("{v:.1}"))
}

/// `bench rpc`: per client count, µs per task of the raw floor and Cairn's
/// RPC in both write modes, with the ratios; then the streamed replies.
pub(super) fn rpc(doc: &Value) -> Result<String, String> {
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
pub(super) fn rpc_streams(rows: &[RpcRow], out: &mut String) {
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
    if !t.is_empty() {
        let _ = writeln!(out, "\nOne request answered by a stream of partial replies:\n");
        t.render(out);
    }
}
