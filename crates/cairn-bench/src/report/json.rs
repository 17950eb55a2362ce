//! Reading a result document: every accessor names what it wanted, so a
//! malformed file says where it is malformed.

use serde_json::Value;

pub(super) fn field<'a>(v: &'a Value, key: &str, at: &str) -> Result<&'a Value, String> {
    v.get(key).ok_or_else(|| format!("{at} has no \"{key}\" field"))
}

pub(super) fn num(v: &Value, key: &str, at: &str) -> Result<f64, String> {
    field(v, key, at)?
        .as_f64()
        .ok_or_else(|| format!("{at}.{key} is not a number"))
}

/// A number that may be absent or null (a ratio to a system not run).
pub(super) fn opt_num(v: &Value, key: &str) -> Option<f64> {
    v.get(key).and_then(Value::as_f64)
}

pub(super) fn text<'a>(v: &'a Value, key: &str, at: &str) -> Result<&'a str, String> {
    field(v, key, at)?
        .as_str()
        .ok_or_else(|| format!("{at}.{key} is not a string"))
}

pub(super) fn array<'a>(v: &'a Value, key: &str, at: &str) -> Result<&'a [Value], String> {
    field(v, key, at)?
        .as_array()
        .map(Vec::as_slice)
        .ok_or_else(|| format!("{at}.{key} is not a list"))
}

/// The document's `results`, each with its place for error messages.
pub(super) fn results(doc: &Value) -> Result<impl Iterator<Item = (String, &Value)> + '_, String> {
    Ok(array(doc, "results", "the document")?
        .iter()
        .enumerate()
        .map(|(i, r)| (format!("results[{i}]"), r)))
}

/// A counter of a result row (0 when the row does not have it).
pub(super) fn counter(r: &Value, key: &str) -> f64 {
    r.get("counters")
        .and_then(|c| c.get(key))
        .and_then(Value::as_f64)
        .unwrap_or(0.0)
}

pub(super) fn machine_line(doc: &Value) -> Option<String> {
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
