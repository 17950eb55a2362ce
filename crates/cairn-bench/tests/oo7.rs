//! OO7 correctness (never timing): the generator against the paper's
//! counts, the traversals' visits and updates on the real small database,
//! updates surviving a reopen, the three clusterings placing objects as they
//! should, and a tiny sweep end to end — embedded, and as a page-server
//! client of a real `cairn serve` process.
//!
//! The server test needs the `cairn` binary: `CAIRN_BIN` names it, else the
//! one cargo built beside this test is used (`cargo test --workspace`, or
//! `cargo test -p cairn-bench -p cairn-cli`, builds it; `-p cairn-bench`
//! alone does not, and may leave an old one there).

mod common;

use std::path::Path;

use cairn::{Database, Ref};
use cairn_bench::oo1::rng::ParkMiller;
use cairn_bench::oo1::systems::cairn_page::ServerProcess;
use cairn_bench::oo7::build::{self, Stored};
use cairn_bench::oo7::schema::Oo7AtomicPart;
use cairn_bench::oo7::{self, options_for, traverse, Clustering, Graph, Oo7Config, Params, Phase, Strategy, Traversal};
use common::cairn_exe;

const SEED: u64 = 1;

fn scratch(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("oo7-{name}-"))
        .tempdir()
        .unwrap()
}

fn small() -> Graph {
    Graph::generate(&mut ParkMiller::new(SEED), Params::SMALL)
}

/// A database of `g` under clustering `c` in `dir`, built and reopened cold.
fn built(dir: &Path, g: &Graph, c: Clustering) -> (Database, Stored) {
    let db = Database::open_with(dir, options_for(Strategy::Noc, 4096)).unwrap();
    let stored = build::build(&db, g, c, SEED).unwrap();
    db.close().unwrap();
    (
        Database::open_with(dir, options_for(Strategy::Noc, 4096)).unwrap(),
        stored,
    )
}

#[test]
fn the_generator_makes_the_small_database_of_the_paper() {
    let g = small();
    let base: Vec<_> = g.assemblies.iter().filter(|a| a.is_base()).collect();
    assert_eq!(g.assemblies.len(), 1_093, "7 levels of fan-out 3: 1 + 3 + … + 729");
    assert_eq!(base.len(), 729);
    assert!(base.iter().all(|a| a.level == 6 && a.components.len() == 3));
    assert!(g
        .assemblies
        .iter()
        .filter(|a| !a.is_base())
        .all(|a| a.children.len() == 3 && a.components.is_empty()));
    assert_eq!(g.composites.len(), 500);
    assert_eq!(g.atomics.len(), 10_000);
    assert_eq!(g.connections.len(), 30_000);
    let documents: Vec<String> = (0..500).map(|c| g.document_text(c)).collect();
    assert_eq!(documents.len(), 500);
    assert!(documents.iter().all(|d| d.len() == 2_000));
    for (c, spec) in g.composites.iter().enumerate() {
        let c = c as u32;
        assert!(g.is_connected(c), "composite part {} is connected", spec.id);
        for (i, a) in g.parts_of(c).enumerate() {
            let out: Vec<_> = g.outgoing(a).map(|k| g.connections[k as usize]).collect();
            assert_eq!(out.len(), 3);
            assert!(out.iter().all(|k| k.from == a && g.parts_of(c).contains(&k.to)));
            assert_eq!(
                out[0].to,
                g.parts_of(c).start + (i as u32 + 1) % 20,
                "the ring comes first"
            );
            assert_eq!(g.atomics[a as usize].composite, c);
        }
    }
    let uses: usize = g.composites.iter().map(|c| c.used_in.len()).sum();
    assert_eq!(uses, 729 * 3);
}

#[test]
fn t1_on_the_small_database_visits_what_the_definition_says() {
    // From the definition: every assembly of 7 levels with fan-out 3; each
    // of the 729 base assemblies' 3 composite parts; all 20 atomic parts of
    // each composite-part visit (the ring makes each part graph connected).
    let assemblies: u64 = (0..7).map(|l| 3u64.pow(l)).sum();
    let composite_visits = 3u64.pow(6) * 3;
    let atomic_visits = composite_visits * 20;
    assert_eq!((assemblies, composite_visits, atomic_visits), (1_093, 2_187, 43_740));

    let g = small();
    let dir = scratch("t1");
    let (db, _) = built(dir.path(), &g, Clustering::Toc);
    let v = traverse::run(&db, &Clustering::Toc.root_name(), Traversal::T1).unwrap();
    assert_eq!(v.assemblies, assemblies);
    assert_eq!(v.composite_visits, composite_visits);
    assert_eq!(v.atomic_visits, atomic_visits);
    assert_eq!(v.updates, 0);
    assert_eq!(
        v,
        traverse::expected(&g, Traversal::T1),
        "and the null procedure saw the generated x, y"
    );
    db.close().unwrap();
}

/// Whether atomic part `a` should have x and y swapped after T2a (if
/// `t2a`) and then T2b (if `t2b`): each composite-part visit swaps the root
/// part under T2a and every part under T2b.
fn swapped(g: &Graph, a: u32, t2a: bool, t2b: bool) -> bool {
    let c = g.atomics[a as usize].composite;
    let visits = g.composites[c as usize].used_in.len();
    let is_root = a == g.parts_of(c).start;
    let swaps = if t2a && is_root { visits } else { 0 } + if t2b { visits } else { 0 };
    swaps % 2 == 1
}

fn check_positions(db: &Database, g: &Graph, stored: &Stored, t2a: bool, t2b: bool) {
    let mut tx = db.begin().unwrap();
    let mut swaps = 0;
    for a in 0..g.atomics.len() as u32 {
        let r: Ref<Oo7AtomicPart> = stored.atomic(a);
        let p = tx.get(&r).unwrap();
        let spec = &g.atomics[a as usize];
        let want = if swapped(g, a, t2a, t2b) {
            swaps += 1;
            (spec.y, spec.x)
        } else {
            (spec.x, spec.y)
        };
        assert_eq!((p.x, p.y), want, "atomic part {} after T2a {t2a}, T2b {t2b}", spec.id);
    }
    tx.commit().unwrap();
    assert!(swaps > 0, "some parts are swapped");
}

#[test]
fn t2a_and_t2b_update_what_they_should_and_the_updates_are_committed() {
    let g = small();
    let dir = scratch("t2");
    let (db, stored) = built(dir.path(), &g, Clustering::Tb);
    let root = Clustering::Tb.root_name();
    let v = traverse::run(&db, &root, Traversal::T2a).unwrap();
    assert_eq!(v.updates, 2_187, "one root part per composite-part visit");
    assert_eq!(v.atomic_visits, 43_740);
    db.close().unwrap();

    let db = Database::open_with(dir.path(), options_for(Strategy::Noc, 256)).unwrap();
    check_positions(&db, &g, &stored, true, false);
    let v = traverse::run(&db, &root, Traversal::T2b).unwrap();
    assert_eq!(v.updates, 43_740, "every atomic-part visit");
    assert_eq!(
        v,
        traverse::expected(&g, Traversal::T2b),
        "the swaps leave the digest alone"
    );
    db.close().unwrap();

    let db = Database::open_with(dir.path(), options_for(Strategy::Noc, 256)).unwrap();
    check_positions(&db, &g, &stored, true, true);
    db.close().unwrap();
}

/// Of each composite part's atomic parts `i, i+1`, the fraction on one page.
fn consecutive_on_one_page(g: &Graph, stored: &Stored) -> f64 {
    let (mut same, mut pairs) = (0, 0);
    for c in 0..g.composites.len() as u32 {
        let parts: Vec<u32> = g.parts_of(c).collect();
        for w in parts.windows(2) {
            pairs += 1;
            if stored.atomic(w[0]).oid().page == stored.atomic(w[1]).oid().page {
                same += 1;
            }
        }
    }
    f64::from(same) / f64::from(pairs)
}

#[test]
fn the_clusterings_place_objects_differently() {
    let g = small();
    let dir = scratch("clustering");
    let mut fractions = Vec::new();
    for c in Clustering::ALL {
        let (db, stored) = built(&dir.path().join(c.name()), &g, c);
        let atomic_pages: std::collections::BTreeSet<u32> = stored.atomics.iter().map(|o| o.page.0).collect();
        let others: Vec<_> = stored
            .all()
            .filter(|o| !stored.atomics.contains(o))
            .map(|o| o.page.0)
            .collect();
        let shared = others.iter().filter(|p| atomic_pages.contains(p)).count();
        if c == Clustering::Tb {
            assert_eq!(shared, 0, "under TB an atomic part's page holds only atomic parts");
        } else {
            assert!(
                shared > 0,
                "under {} atomic parts share pages with other objects",
                c.label()
            );
        }
        fractions.push((c, consecutive_on_one_page(&g, &stored)));
        db.close().unwrap();
    }
    for (c, f) in fractions {
        match c {
            Clustering::Random => assert!(f < 0.1, "RANDOM: {f:.3} of consecutive parts share a page"),
            _ => assert!(f > 0.8, "{}: {f:.3} of consecutive parts share a page", c.label()),
        }
    }
}

fn tiny_config(dir: &Path) -> Oo7Config {
    Oo7Config {
        clusterings: vec![Clustering::Random],
        strategies: vec![Strategy::Noc, Strategy::LocErl],
        traversals: vec![Traversal::T1, Traversal::T2a],
        phases: Phase::ALL.to_vec(),
        buffer_pages: vec![32, 64],
        runs: 1,
        seed: SEED,
        dir: Some(dir.to_path_buf()),
        connect: None,
        page_share: None,
        progress: false,
        params: Params::TINY,
    }
}

/// Checks the JSON document's schema; returns its results.
fn check_json(path: &Path) -> Vec<serde_json::Value> {
    let doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_eq!(doc["benchmark"], "oo7");
    assert!(doc["machine"]["cores"].as_u64().unwrap() >= 1);
    assert!(doc["config"].is_object());
    let results = doc["results"].as_array().unwrap().clone();
    assert_eq!(
        results.len(),
        2 * 2 * 2 * 2,
        "strategies × buffers × traversals × phases"
    );
    for r in &results {
        let keys: std::collections::BTreeSet<&str> = r.as_object().unwrap().keys().map(String::as_str).collect();
        let want = [
            "buffer_pages",
            "clustering",
            "counters",
            "median_ms",
            "phase",
            "strategy",
            "traversal",
        ];
        assert_eq!(keys, want.into_iter().collect());
        assert!(["NOC", "LOC/ERL"].contains(&r["strategy"].as_str().unwrap()));
        assert_eq!(r["clustering"], "random");
        assert!(["T1", "T2a"].contains(&r["traversal"].as_str().unwrap()));
        assert!(["cold", "warm"].contains(&r["phase"].as_str().unwrap()));
        assert!([32, 64].contains(&r["buffer_pages"].as_u64().unwrap()));
        assert!(r["median_ms"].as_f64().unwrap() > 0.0);
        assert!(r["counters"]["page_faults"].is_u64());
        assert!(r["counters"]["bytes_copied"].is_u64());
        assert!(r["counters"]["utilization_permille"].is_u64());
        // T1 changes nothing; T2a's one commit writes the pages it changed.
        let flushed = r["counters"]["pages_flushed"].as_u64().unwrap();
        if r["traversal"] == "T1" {
            assert_eq!(flushed, 0, "{r}");
        } else {
            assert!(flushed > 0, "{r}");
        }
    }
    let findings = doc["findings"].as_array().unwrap();
    assert_eq!(findings.len(), 5);
    for f in findings {
        assert!(f["finding"].is_string() && f["holds"].is_boolean() && f["evidence"].is_string());
    }
    results
}

#[test]
fn a_tiny_sweep_writes_json_with_the_schema() {
    let dir = scratch("sweep");
    let report = oo7::run(&tiny_config(dir.path())).unwrap();
    let path = dir.path().join("oo7.json");
    report.write_json(&path).unwrap();
    let results = check_json(&path);
    let cold_t1: Vec<_> = results
        .iter()
        .filter(|r| r["phase"] == "cold" && r["traversal"] == "T1")
        .collect();
    assert!(
        cold_t1
            .iter()
            .all(|r| r["counters"]["page_faults"].as_u64().unwrap() > 0),
        "a cold traversal faults pages in"
    );
    let table = report.table();
    assert!(table.contains("RANDOM T1 cold") && table.contains("Table 1") && table.contains("findings"));
    let figures = oo7::plot::draw(&dir.path().join("plots"), &report.rows).unwrap();
    assert_eq!(figures.len(), 2, "one per clustering × traversal");
}

#[test]
fn a_tiny_sweep_runs_against_cairn_serve() {
    let dir = scratch("connect");
    let server = ServerProcess::start(&cairn_exe(), &dir.path().join("served")).unwrap();
    let mut cfg = tiny_config(dir.path());
    cfg.connect = Some(server.url.clone());
    let report = oo7::run(&cfg).unwrap();
    let path = dir.path().join("oo7.json");
    report.write_json(&path).unwrap();
    let results = check_json(&path);
    assert!(
        results
            .iter()
            .filter(|r| r["phase"] == "cold")
            .all(|r| r["counters"]["page_faults"].as_u64().unwrap() > 0),
        "a new client is shipped pages"
    );
    server.stop().unwrap();
}
