//! OO1 correctness (never timing): each measure's visit counts, the same
//! check on every system — `cairn-page` against a real `cairn serve` process
//! included — and a tiny run of the whole benchmark.
//!
//! `cairn-page` needs the `cairn` binary: `CAIRN_BIN` names it, else the one
//! cargo built beside this test is used (`cargo test --workspace`, or
//! `cargo test -p cairn-bench -p cairn-cli`, builds it; `-p cairn-bench`
//! alone does not, and may leave an old one there).

mod common;

use cairn_bench::oo1::concurrency::{self, Op};
use cairn_bench::oo1::generate::{self, Graph, TRAVERSAL_VISITS};
use cairn_bench::oo1::rng::ParkMiller;
use cairn_bench::oo1::system::System;
use cairn_bench::oo1::systems::{self, cairn_embedded::Embedded, cairn_typed::Cairn};
use cairn_bench::oo1::{Measure, Oo1Config};
use common::cairn_exe;

const PARTS: u32 = 500;

fn scratch(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("oo1-{name}-"))
        .tempdir()
        .unwrap()
}

#[test]
fn every_system_stores_the_same_graph_and_visits_the_same_parts() {
    let graph = Graph::generate(&mut ParkMiller::new(1), PARTS);
    let expected = graph.check();
    let dir = scratch("systems");
    let mut seen: Vec<(String, Vec<u64>)> = Vec::new();
    for name in systems::ALL {
        let mut sys = systems::by_name(name, dir.path(), Some(&cairn_exe())).unwrap();
        sys.build(&graph).unwrap();
        assert_eq!(sys.check().unwrap(), expected, "{name} stored the generated graph");
        sys.close().unwrap();
        sys.open_cold().unwrap();
        let ids = generate::lookup_ids(&mut ParkMiller::new(5), PARTS);
        let lookup = sys.lookup(&ids).unwrap();
        assert_eq!(lookup.count, 1_000, "{name}: lookup visits 1,000 parts");
        let mut digests = vec![lookup.digest];
        let mut reverse_counts = Vec::new();
        for start in [1, 2, PARTS / 2, PARTS - 1, PARTS] {
            let fwd = sys.traversal(start, generate::TRAVERSAL_HOPS).unwrap();
            assert_eq!(
                fwd.count, TRAVERSAL_VISITS,
                "{name}: 7 hops from {start} visit 3,280 parts"
            );
            let rev = sys.reverse_traversal(start, generate::TRAVERSAL_HOPS).unwrap();
            digests.extend([fwd.digest, rev.digest]);
            reverse_counts.push(rev.count);
        }
        digests.extend(reverse_counts);
        // Insert, then remove: the database is back as it was.
        let mut batch = generate::insert_batch(&mut ParkMiller::new(11), PARTS);
        // The rule can connect an inserted part to itself (N/100 odd): make sure one does.
        batch[1].to[2].to = batch[1].id;
        let ins = sys.insert(&batch).unwrap();
        assert_eq!(ins.count, 100);
        let grown = sys.check().unwrap();
        assert_eq!(
            (grown.parts, grown.connections, grown.reverse_connections),
            (600, 1_800, 1_800),
            "{name}"
        );
        // The new parts are reachable both ways.
        let last = sys.traversal(PARTS + 100, 1).unwrap();
        assert_eq!(last.count, 4, "{name}: a new part and its 3 targets");
        digests.push(sys.reverse_traversal(PARTS + 1, 7).unwrap().count);
        digests.push(grown.checksum);
        sys.remove(&batch).unwrap();
        assert_eq!(sys.check().unwrap(), expected, "{name}: the insert was undone exactly");
        sys.close().unwrap();
        seen.push((name.to_string(), digests));
    }
    assert_eq!(seen[0].0, "cairn-embedded");
    for (name, d) in &seen[1..] {
        assert_eq!(d, &seen[0].1, "{name} visited what {} visited", seen[0].0);
    }
}

#[test]
fn the_page_server_ships_pages_and_leaves_a_database_embedded_cairn_opens() {
    let graph = Graph::generate(&mut ParkMiller::new(1), PARTS);
    let dir = scratch("page");
    let mut page = systems::by_name("cairn-page", dir.path(), Some(&cairn_exe())).unwrap();
    page.build(&graph).unwrap();
    page.close().unwrap();
    page.open_cold().unwrap();
    let before = page.counters();
    let ids = generate::lookup_ids(&mut ParkMiller::new(5), PARTS);
    page.lookup(&ids).unwrap();
    let cold = page.counters().since(&before).0;
    assert!(cold["pages_shipped"] > 0, "a cold lookup fetches pages: {cold:?}");
    assert!(cold["round_trips"] >= cold["pages_shipped"], "{cold:?}");
    assert!(cold["bytes_shipped"] >= cold["pages_shipped"] * 4096, "{cold:?}");
    let before = page.counters();
    page.lookup(&ids).unwrap();
    let warm = page.counters().since(&before).0;
    assert_eq!(
        warm["pages_shipped"], 0,
        "the same lookups again find every page cached: {warm:?}"
    );
    assert_eq!(
        (warm["round_trips"], warm["pages_revalidated"]),
        (0, 0),
        "callback locking: a warm rerun reads every page under its right, with no message: {warm:?}"
    );
    assert!(warm["cache_hits"] > 0, "{warm:?}");
    assert_eq!(warm["object_faults"], 0, "{warm:?}");
    assert_eq!(
        warm["image_loads"], 0,
        "a warm rerun finds every page image cached: {warm:?}"
    );
    // SIGTERM made the server checkpoint and exit: the directory opens
    // embedded, holding the generated graph.
    page.close().unwrap();
    let mut embedded = Cairn::new(Embedded::new(dir.path().join("cairn-page")));
    embedded.open_cold().unwrap();
    assert_eq!(embedded.check().unwrap(), graph.check());
    embedded.close().unwrap();
}

#[test]
fn the_page_server_system_needs_the_cairn_binary() {
    let dir = scratch("no-exe");
    let err = systems::by_name("cairn-page", dir.path(), None).err().unwrap();
    assert!(err.to_string().contains("cairn serve"), "{err}");
}

#[test]
fn a_tiny_run_of_the_whole_benchmark_reports_every_measure() {
    let dir = scratch("run");
    let report = cairn_bench::oo1::run(&Oo1Config {
        parts: PARTS,
        runs: 2,
        dir: Some(dir.path().to_path_buf()),
        cairn_exe: Some(cairn_exe()),
        ..Oo1Config::default()
    })
    .unwrap();
    assert_eq!(report.results.len(), systems::ALL.len());
    for r in &report.results {
        assert_eq!(r.check, report.check, "{}", r.system);
        assert_eq!(r.runs.len(), 4);
        for (m, samples) in &r.runs {
            assert_eq!(samples.len(), 2);
            if *m == Measure::Traversal {
                assert!(samples.iter().all(|s| s.visits.count == TRAVERSAL_VISITS));
            }
        }
    }
    // Every system × (4 measures × cold and warm + 3 read measures hot).
    assert_eq!(report.rows.len(), systems::ALL.len() * 11);
    for r in &report.results {
        assert_eq!(r.hot.len(), 3, "{}: every read measure has a hot run", r.system);
        assert!(r
            .hot
            .iter()
            .all(|(m, samples)| *m != Measure::Insert && samples.len() == 1));
    }
    let cairn = report.results.iter().find(|r| r.system == "cairn-embedded").unwrap();
    let insert = &cairn.runs.iter().find(|(m, _)| *m == Measure::Insert).unwrap().1;
    for s in insert {
        assert_eq!(s.counters.0["commits"], 1, "one commit per insert run");
        assert!(s.counters.0["fsyncs"] >= 1, "the insert commit is durable");
    }
    let cold_lookup = &cairn.runs[0].1[0];
    assert!(
        cold_lookup.counters.0["image_loads"] > 0,
        "a cold run brings page images in to read parts in place"
    );
    let page = report.results.iter().find(|r| r.system == "cairn-page").unwrap();
    // A hot run needs no page it has not just used: under callback rights
    // the client asks the server nothing.
    for (m, samples) in &page.hot {
        for s in samples {
            assert_eq!(s.counters.0["round_trips"], 0, "hot {}: {:?}", m.name(), s.counters);
        }
    }
    for (m, samples) in &page.runs {
        for s in samples {
            // Callback locking: a run asks the server only for pages new to
            // the client (and, for inserts, for locks and the commit).
            if *m != Measure::Insert {
                assert!(
                    s.counters.0["round_trips"] <= s.counters.0["pages_shipped"] + 2,
                    "{}: no round trip for a cached page: {:?}",
                    m.name(),
                    s.counters
                );
            }
        }
        assert!(
            samples[0].counters.0["pages_shipped"] > 0,
            "{}: a cold run fetches pages",
            m.name()
        );
    }
    let file = report.results.iter().find(|r| r.system == "cairn-file").unwrap();
    for (m, samples) in &file.runs {
        // The file-server client reads pages from the volume file: the
        // server ships none but the pages it allocates for inserts.
        for s in samples {
            if *m != Measure::Insert {
                assert_eq!(s.counters.0["pages_shipped"], 0, "{}: {:?}", m.name(), s.counters);
            }
        }
        assert!(
            samples[0].counters.0["pages_read_direct"] > 0,
            "{}: a cold run reads pages from the volume file",
            m.name()
        );
        if *m == Measure::Insert {
            assert!(samples.iter().all(|s| s.counters.0["pages_written_direct"] > 0));
        }
    }
    let object = report.results.iter().find(|r| r.system == "cairn-object").unwrap();
    for (m, samples) in &object.runs {
        // The object-server client ships objects, never pages.
        for s in samples {
            assert_eq!(s.counters.0["pages_shipped"], 0, "{}: {:?}", m.name(), s.counters);
            assert!(s.counters.0["round_trips"] > 0, "{}: {:?}", m.name(), s.counters);
        }
    }
    let adaptive = report.results.iter().find(|r| r.system == "cairn-adaptive").unwrap();
    for (m, samples) in &adaptive.runs {
        // The adaptive client ships pages (whole, or a page's worth of
        // objects) only in page fetches (a prefetch's may bring several),
        // else objects one by one, and says how it fetched them.
        for s in samples {
            let c = &s.counters.0;
            assert!(
                c["pages_shipped"] == 0 || c.get("adaptive_page_fetches").copied().unwrap_or(0) > 0,
                "{}: {:?}",
                m.name(),
                s.counters
            );
        }
        let fetches = |k: &str| {
            samples
                .iter()
                .map(|s| s.counters.0.get(k).copied().unwrap_or(0))
                .sum::<u64>()
        };
        // (A lookup fetches what the index finds in the lookup's own round
        // trip: no OBJ_FETCH.)
        assert!(
            !matches!(m, Measure::Traversal | Measure::ReverseTraversal)
                || fetches("adaptive_page_fetches") + fetches("adaptive_object_fetches") > 0,
            "{}: {:?}",
            m.name(),
            samples
        );
    }
    let table = report.table();
    assert!(
        table.contains("round trips"),
        "the page server's counters are in the table"
    );
    assert!(table.contains("× embedded"));
    assert!(table.contains("× lmdb"));
    assert!(
        table.contains("no slower than lmdb"),
        "the LMDB target lines are reported"
    );
    assert!(table.contains(&report.check.line()));
    assert!(table.contains("identical for every system"));
    for m in ["lookup", "traversal", "reverse_traversal", "insert"] {
        assert!(table.contains(m), "{m} in the table");
    }
    let json = report.json();
    assert_eq!(json["benchmark"], "oo1");
    assert_eq!(json["results"].as_array().unwrap().len(), report.rows.len());
    assert!(table.contains(" hot "), "hot rows in the table");
    assert_eq!(json["systems"][0]["system"], "cairn-embedded");
    assert!(json.get("concurrency").is_none(), "no --clients, no concurrency key");
    let plot_dir = dir.path().join("plot");
    let names: Vec<&str> = report.results.iter().map(|r| r.system).collect();
    let png = cairn_bench::oo1::plot::draw(&plot_dir, PARTS, &names, &report.rows).unwrap();
    assert!(std::fs::metadata(png).unwrap().len() > 1_000);
}

#[test]
fn a_system_that_is_not_known_is_refused() {
    let err = cairn_bench::oo1::run(&Oo1Config {
        parts: PARTS,
        runs: 2,
        systems: vec!["oracle".into()],
        ..Oo1Config::default()
    })
    .unwrap_err();
    assert!(err.to_string().contains("unknown system"));
}

/// A run that fails once databases exist keeps them and says where (a
/// failure worth a look with `cairn check`); a refusal before anything was
/// made leaves nothing behind.
#[test]
fn a_failed_run_keeps_its_databases_and_names_where() {
    let dir = scratch("kept");
    let err = cairn_bench::oo1::run(&Oo1Config {
        parts: PARTS,
        runs: 2,
        systems: vec!["cairn-embedded".into(), "cairn-page".into()],
        dir: Some(dir.path().to_path_buf()),
        // Not a cairn binary: the page server never starts.
        cairn_exe: Some(std::path::PathBuf::from("/bin/false")),
        ..Oo1Config::default()
    })
    .unwrap_err();
    let msg = err.to_string();
    let kept = msg
        .split("kept in ")
        .nth(1)
        .map(|rest| std::path::PathBuf::from(rest.trim_end_matches(')')));
    let kept = kept.unwrap_or_else(|| panic!("the error names the kept directory: {msg}"));
    assert!(kept.starts_with(dir.path()), "{msg}");
    assert!(
        std::fs::read_dir(&kept).unwrap().next().is_some(),
        "it holds the databases"
    );
    // Refused before any database: nothing kept.
    let empty = scratch("refused");
    let err = cairn_bench::oo1::run(&Oo1Config {
        parts: PARTS,
        runs: 2,
        systems: vec!["oracle".into()],
        dir: Some(empty.path().to_path_buf()),
        ..Oo1Config::default()
    })
    .unwrap_err();
    assert!(!err.to_string().contains("kept"), "{err}");
    assert_eq!(std::fs::read_dir(empty.path()).unwrap().count(), 0);
}

#[test]
fn concurrent_page_clients_see_what_one_client_sees() {
    let dir = scratch("clients");
    let ops = 6;
    let report = cairn_bench::oo1::run(&Oo1Config {
        parts: PARTS,
        runs: 2,
        systems: vec!["cairn-page".into()],
        dir: Some(dir.path().to_path_buf()),
        cairn_exe: Some(cairn_exe()),
        clients: vec![1, 2],
        client_ops: ops,
        ..Oo1Config::default()
    })
    .unwrap();
    // Reads, cold reads, then mixed, each with 1 and 2 clients; then the
    // browse reader alone, with a writer, and that writer alone.
    let shape: Vec<(&str, &str, usize)> = report
        .concurrency
        .iter()
        .map(|r| (r.system, r.mode.name(), r.clients))
        .collect();
    assert_eq!(
        shape,
        [
            ("cairn-page", "reads", 1),
            ("cairn-page", "reads", 2),
            ("cairn-page", "cold reads", 1),
            ("cairn-page", "cold reads", 2),
            ("cairn-page", "mixed", 1),
            ("cairn-page", "mixed", 2),
            ("cairn-page", "browse", 1),
            ("cairn-page", "browse", 2),
            ("cairn-page", "writers alone", 1),
        ]
    );
    // One client on its own server replays every client's lookups.
    let graph = Graph::generate(&mut ParkMiller::new(1), PARTS);
    let mut alone = systems::by_name("cairn-page", dir.path(), Some(&cairn_exe())).unwrap();
    alone.build(&graph).unwrap();
    for row in report
        .concurrency
        .iter()
        .filter(|r| r.mode.name() != "browse" && r.mode.name() != "writers alone")
    {
        assert_eq!(row.per_client.len(), row.clients);
        match row.mode.name() {
            "mixed" => assert!(row.round_trips_per_op() > 0.0, "inserts talk to the server"),
            // Every operation starts with an empty cache, so it fetches.
            "cold reads" => assert!(row.round_trips_per_op() >= 1.0, "{}", row.round_trips_per_op()),
            _ => {}
        }
        for (c, got) in row.per_client.iter().enumerate() {
            assert_eq!(got.latencies_ms.len(), ops);
            let want: Vec<u64> = concurrency::client_ops(1, PARTS, c, ops, row.mode, PARTS + 1)
                .iter()
                .filter(|op| matches!(op, Op::Lookup(_)))
                .map(|op| op.run(alone.as_mut()).unwrap().digest)
                .collect();
            assert!(!want.is_empty());
            assert_eq!(
                got.lookup_digests,
                want,
                "{} with {} clients: client {c}'s lookups",
                row.mode.name(),
                row.clients
            );
        }
    }
    alone.close().unwrap();
    // Two clients of one mode look up different parts.
    assert_ne!(
        report.concurrency[1].per_client[0].lookup_digests,
        report.concurrency[1].per_client[1].lookup_digests
    );
    // The server's lock counters were read around every run: inserts lock.
    let mixed = &report.concurrency[5];
    assert!(mixed.locks.requests > 0, "{:?}", mixed.locks);
    let table = report.table();
    assert!(table.contains("Concurrent clients"), "{table}");
    assert!(table.contains("Browse while others write"), "{table}");
    assert!(
        table.contains("cairn-page with 1 writer: the reader's traversal"),
        "{table}"
    );
    let json = report.json();
    let conc = json["concurrency"].as_array().unwrap();
    assert_eq!(conc.len(), 9);
    assert_eq!(conc[0]["speedup_vs_1_client"], 1.0);
    assert_eq!(conc[0]["system"], "cairn-page");
    assert!(conc[5]["deadlocks_retried"].is_u64() && conc[3]["lock_timeouts_retried"].is_u64());
    assert!(conc[5]["p99_ms"].is_f64() && conc[5]["lock_wait_ms_per_op"].is_f64());
    assert!(conc[5]["locks"]["requests"].as_u64().unwrap() > 0);
    assert!(conc[7]["reader"]["ops"].as_u64().unwrap() >= 1);
    assert_eq!(conc[7]["writers"]["ops"], ops);
    assert!(conc[7]["reader_ratio_to_alone"].is_f64() && conc[7]["writers_ratio_to_alone"].is_f64());
}

/// `--clients` on every other architecture at a tiny size: each system's
/// clients (sessions of its own server, or threads on one embedded
/// database) answer what the floor answers in every mode — the run checks
/// every visit and fails otherwise — and the browse runs split the reader
/// from its writers.
#[test]
fn concurrent_clients_of_every_architecture_answer_what_the_floor_answers() {
    let dir = scratch("clients-all");
    let ops = 2;
    let names = ["cairn-embedded", "cairn-file", "cairn-object", "cairn-adaptive"];
    let report = cairn_bench::oo1::run(&Oo1Config {
        parts: PARTS,
        runs: 2,
        systems: names
            .iter()
            .map(|s| s.to_string())
            .chain(["in-memory".to_string()])
            .collect(),
        dir: Some(dir.path().to_path_buf()),
        cairn_exe: Some(cairn_exe()),
        clients: vec![2],
        client_ops: ops,
        ..Oo1Config::default()
    })
    .unwrap();
    let graph = Graph::generate(&mut ParkMiller::new(1), PARTS);
    let mut floor = systems::by_name("in-memory", dir.path(), None).unwrap();
    floor.build(&graph).unwrap();
    for name in names {
        let rows: Vec<_> = report.concurrency.iter().filter(|r| r.system == name).collect();
        let shape: Vec<(&str, usize)> = rows.iter().map(|r| (r.mode.name(), r.clients)).collect();
        assert_eq!(
            shape,
            [
                ("reads", 2),
                ("cold reads", 2),
                ("mixed", 2),
                ("browse", 1),
                ("browse", 2),
                ("writers alone", 1)
            ],
            "{name}"
        );
        for row in &rows {
            assert_eq!(row.per_client.len(), row.clients, "{name}");
            if matches!(row.mode.name(), "reads" | "cold reads" | "mixed") {
                for (c, got) in row.per_client.iter().enumerate() {
                    let want: Vec<u64> = concurrency::client_ops(1, PARTS, c, ops, row.mode, PARTS + 1)
                        .iter()
                        .filter(|op| matches!(op, Op::Lookup(_)))
                        .map(|op| op.run(floor.as_mut()).unwrap().digest)
                        .collect();
                    assert_eq!(got.lookup_digests, want, "{name} {}: client {c}", row.mode.name());
                }
            }
        }
        // Inserts take locks, wherever the lock manager is (the mixed runs
        // of 2 operations insert nothing).
        assert!(rows[5].locks.requests > 0, "{name}: {:?}", rows[5].locks);
        let (alone, browse, writers) = (rows[3], rows[4], rows[5]);
        assert_eq!(
            alone.reader().unwrap().ops,
            ops,
            "{name}: the reader alone runs its plan"
        );
        assert!(alone.writers().is_none());
        let reader = &browse.per_client[0];
        assert!(!reader.visits.is_empty(), "{name}");
        assert!(
            reader.visits.iter().all(|v| v.count == TRAVERSAL_VISITS),
            "{name}: the reader's traversals visit 3,280 parts each"
        );
        assert_eq!(browse.writers().unwrap().ops, ops, "{name}");
        assert!(browse.per_client[1].visits.iter().all(|v| v.count == 100), "{name}");
        assert_eq!(writers.writers().unwrap().ops, ops, "{name}");
        assert!(writers.reader().is_none());
    }
    // The in-memory floor is not a Cairn system: no --clients rows.
    assert!(report.concurrency.iter().all(|r| r.system != "in-memory"));
    let table = report.table();
    for name in names {
        assert!(table.contains(&format!("{name} with 1 writer:")), "{table}");
    }
    let json = report.json();
    let conc = json["concurrency"].as_array().unwrap();
    assert_eq!(conc.len(), 4 * 6);
    assert!(conc.iter().all(|r| r["lock_wait_ms_per_op"].is_f64()));
}

#[test]
fn clients_without_a_cairn_system_are_refused() {
    let err = cairn_bench::oo1::run(&Oo1Config {
        parts: PARTS,
        runs: 2,
        systems: vec!["in-memory".into()],
        clients: vec![1],
        ..Oo1Config::default()
    })
    .unwrap_err();
    assert!(err.to_string().contains("--clients"), "{err}");
    let err = cairn_bench::oo1::run(&Oo1Config {
        parts: PARTS,
        runs: 2,
        systems: vec!["cairn-embedded".into()],
        clients: vec![0, 2],
        ..Oo1Config::default()
    })
    .unwrap_err();
    assert!(err.to_string().contains("at least 1"), "{err}");
}
