//! `bench report` against documents written by hand: each benchmark's tables, and
//! malformed files refused naming the file and the field.

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
    // A document from before the other systems, p99, lock waits and browse:
    // cairn-page's, the missing figures as dashes.
    assert!(
        out.contains("| cairn-page | reads | 4 | 1,571.0 | 0.78 | – | 0 | 1.19 | 0 | – | 0 | – |"),
        "{out}"
    );
    assert!(!out.contains("Browse while others write"), "{out}");
}

#[test]
fn an_oo1_document_with_every_system_and_browse_runs_renders_both_client_tables() {
    let part = |clients: u32, ops: u32, ops_per_s: f64, median: f64, p99: f64, deadlocks: u32| {
        serde_json::json!({"clients": clients, "ops": ops, "wall_s": 1.0, "ops_per_s": ops_per_s,
            "median_ms": median, "p99_ms": p99, "deadlocks_retried": deadlocks,
            "deadlocks_per_100_ops": 100.0 * f64::from(deadlocks) / f64::from(ops),
            "lock_timeouts_retried": 0})
    };
    let doc = serde_json::json!({
        "benchmark": "oo1",
        "systems": [{"system": "cairn-embedded", "load_ms": 351.0, "db_size_bytes": 8388608}],
        "results": [{"system": "cairn-embedded", "measure": "lookup", "phase": "cold", "median_ms": 12.9,
                     "counters": {}}],
        "concurrency": [
            {"system": "cairn-embedded", "mode": "mixed", "clients": 4, "ops": 80, "wall_s": 0.5,
             "ops_per_s": 160.0, "median_ms": 2.5, "p99_ms": 31.25, "round_trips_per_op": 0.0,
             "speedup_vs_1_client": 0.5, "deadlocks_retried": 8, "deadlocks_per_100_ops": 10.0,
             "lock_timeouts_retried": 1, "lock_wait_ms_per_op": 1.5},
            {"system": "cairn-object", "mode": "browse", "clients": 1, "ops": 20, "wall_s": 0.1,
             "ops_per_s": 200.0, "median_ms": 5.0, "p99_ms": 6.0, "round_trips_per_op": 3.0,
             "speedup_vs_1_client": null, "deadlocks_retried": 0, "lock_timeouts_retried": 0,
             "lock_wait_ms_per_op": 0.0, "reader": part(1, 20, 200.0, 5.0, 6.0, 0),
             "reader_ratio_to_alone": null},
            {"system": "cairn-object", "mode": "browse", "clients": 4, "ops": 70, "wall_s": 1.0,
             "ops_per_s": 70.0, "median_ms": 6.0, "p99_ms": 9.0, "round_trips_per_op": 3.0,
             "speedup_vs_1_client": null, "deadlocks_retried": 2, "lock_timeouts_retried": 0,
             "lock_wait_ms_per_op": 0.25, "reader": part(1, 10, 10.0, 6.0, 9.0, 0),
             "writers": part(3, 60, 60.0, 40.0, 80.0, 2), "reader_ratio_to_alone": 1.2,
             "writers_ratio_to_alone": 1.1},
            {"system": "cairn-object", "mode": "writers alone", "clients": 3, "ops": 60, "wall_s": 0.9,
             "ops_per_s": 66.0, "median_ms": 38.0, "p99_ms": 70.0, "round_trips_per_op": 5.0,
             "speedup_vs_1_client": null, "deadlocks_retried": 1, "lock_timeouts_retried": 0,
             "lock_wait_ms_per_op": 0.5, "writers": part(3, 60, 66.0, 38.0, 70.0, 1)}]
    });
    let out = render(&doc).unwrap();
    assert!(
        out.contains("| cairn-embedded | mixed | 4 | 160.0 | 2.50 | 31.25 | 0 | 0.50 | 8 | 10.00 | 1 | 1.500 |"),
        "{out}"
    );
    assert!(out.contains("Browse while others write"), "{out}");
    assert!(
        out.contains("| cairn-object | reader alone | 1 | 200.0 | 5.00 | 6.00 | – | 0 | 0.00 | 0 | 0.000 |"),
        "{out}"
    );
    assert!(
        out.contains("| cairn-object | reader, 3 writers | 4 | 10.0 | 6.00 | 9.00 | 1.20 | 0 | 0.00 | 0 | 0.250 |"),
        "{out}"
    );
    assert!(
        out.contains(
            "| cairn-object | 3 writers, with the reader | 4 | 60.0 | 40.00 | 80.00 | 1.10 | 2 | 3.33 | 0 | 0.250 |"
        ),
        "{out}"
    );
    assert!(
        out.contains("| cairn-object | 3 writers alone | 3 | 66.0 | 38.00 | 70.00 | – | 1 | 1.67 | 0 | 0.500 |"),
        "{out}"
    );
    // The browse runs are not in the first table.
    assert!(!out.contains("| cairn-object | browse |"), "{out}");
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
