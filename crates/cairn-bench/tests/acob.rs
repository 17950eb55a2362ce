//! ACOB on every architecture (correctness and counters, never timing):
//! the same small sets stored by each, the same plans run after cold
//! restarts, the same records read and written everywhere; the client's
//! counters say what crossed the network. The client-server systems run a
//! real `cairn serve` child (see `common::cairn_exe`).

mod common;

use cairn_bench::acob::generate::{random_read, random_update, scan_order, AcobConfig, Set};
use cairn_bench::acob::systems::{Arch, Buffers, System};
use cairn_bench::oo1::rng::ParkMiller;

/// 150 objects a set: 30 pages, so the buffers of 10 pages are small.
fn sets() -> Vec<Set> {
    let config = AcobConfig {
        objects_per_set: 150,
        clustering: 30,
        region_pages: 5,
        smeared: true,
        seed: 3,
    };
    (0..2)
        .map(|n| {
            Set::generate(&AcobConfig {
                seed: config.seed + n,
                ..config
            })
            .unwrap()
        })
        .collect()
}

#[test]
fn every_architecture_stores_the_sets_and_runs_the_same_plans() {
    let sets = sets();
    let exe = common::cairn_exe();
    let buffers = Buffers {
        client_pages: 10,
        server_pages: 10,
    };
    let mut per_arch = Vec::new();
    for arch in Arch::ALL {
        let dir = tempfile::tempdir().unwrap();
        let mut sys = System::start(arch, &dir.path().join(arch.name()), &exe, buffers).unwrap();
        let stored = sys.load(&sets).unwrap();
        let mut counts = Vec::new();
        let mut trips = Vec::new();
        for (set, st) in sets.iter().zip(&stored) {
            for (plan, follows) in [
                (scan_order(set), false),
                (random_read(set, &mut ParkMiller::new(11)), true),
                (random_update(set, &mut ParkMiller::new(11)), true),
            ] {
                sys.cold().unwrap();
                let before = sys.remote_stats().round_trips;
                counts.push(sys.run(st, &plan, follows).unwrap());
                trips.push(sys.remote_stats().round_trips - before);
            }
        }
        if arch == Arch::Embedded {
            assert!(trips.iter().all(|t| *t == 0));
        } else {
            assert!(trips.iter().all(|t| *t > 0), "{}: {trips:?}", arch.name());
        }
        sys.stop().unwrap();
        per_arch.push((arch, counts, trips));
    }
    // The same records read and rewritten by every architecture.
    for (arch, counts, _) in &per_arch[1..] {
        assert_eq!(counts, &per_arch[0].1, "{}", arch.name());
    }
    // Round trips per step (scan, random read, random update; set A then
    // B), each after a cold restart: the object server fetches every record
    // of a scan on its own, the page server a page of them at a time.
    for (a, _, t) in &per_arch {
        eprintln!("{}: {t:?}", a.name());
    }
    let trips = |arch: Arch| per_arch.iter().find(|(a, ..)| *a == arch).unwrap().2.clone();
    let (page, object) = (trips(Arch::Page), trips(Arch::Object));
    let records = 150 * 7;
    assert!(object[0] >= records, "object scan: {object:?}");
    assert!(page[0] * 5 < object[0], "scans: page {page:?}, object {object:?}");
    // The adaptive client scans a page of records per round trip too.
    let adaptive = trips(Arch::Adaptive);
    assert!(
        adaptive[0] * 5 < object[0],
        "scans: adaptive {adaptive:?}, object {object:?}"
    );
}

#[test]
fn a_tiny_run_of_the_benchmark_measures_every_query_on_every_system() {
    use cairn_bench::acob::run::{self, AcobRun, Point, Query};
    let dir = tempfile::tempdir().unwrap();
    let cfg = AcobRun {
        systems: Arch::ALL.to_vec(),
        points: [10, 90]
            .map(|f| Point {
                sweep: "clustering",
                clustering: f,
                region: 1,
                client_buffer_pages: 8,
                smeared: false,
            })
            .to_vec(),
        queries: Query::ALL.to_vec(),
        objects_per_set: 100,
        server_buffer_pages: 8,
        seed: 5,
        // Each step twice, the median reported: still one row a step.
        repeat: 2,
        dir: dir.path().to_path_buf(),
        cairn_exe: common::cairn_exe(),
    };
    let rows = run::run(&cfg, |_| {}).unwrap();
    assert_eq!(rows.len(), 2 * Arch::ALL.len() * Query::ALL.len());
    for (q, f) in Query::ALL.into_iter().flat_map(|q| [(q, 10), (q, 90)]) {
        let of_q: Vec<_> = rows
            .iter()
            .filter(|r| r.query == q && r.point.clustering == f)
            .collect();
        let read = of_q[0].counters["records_read"];
        assert!(read > 0.0);
        assert!(of_q.iter().all(|r| r.counters["records_read"] == read), "{q:?}");
        let written = of_q[0].counters["records_written"];
        assert_eq!(written > 0.0, q == Query::RandomUpdate);
        assert!(of_q.iter().all(|r| r.counters["records_written"] == written), "{q:?}");
    }
    // Every step starts cold: the database's pool (the server's, or the
    // embedded engine's) reads pages from the volume during it.
    for r in &rows {
        assert!(
            r.counters["server_pages_read"] > 0.0,
            "{} {:?}",
            r.system.name(),
            r.query
        );
    }
    let table = run::table(&rows);
    assert_eq!(table.lines().count(), rows.len() + 1);
    let json = run::json(&cfg, &rows);
    assert_eq!(json["results"].as_array().unwrap().len(), rows.len());
    assert_eq!(json["benchmark"], "acob");
    // One figure per query of the clustering sweep (unsmeared only here).
    let figures = cairn_bench::acob::plot::draw(&dir.path().join("plots"), &rows).unwrap();
    assert_eq!(figures.len(), Query::ALL.len());
    assert!(figures.iter().all(|p| std::fs::metadata(p).unwrap().len() > 1000));
}
