//! Repeats one OO1 read measure on `cairn-embedded` many times, warm, so a
//! profiler (`perf record`) sees the read path and not the load:
//! `cargo run --release -p cairn-bench --example oo1_profile -- lookup 2000`.
//! The measure is `lookup`, `traversal`, `reverse` or `insert` (100 parts,
//! removed again untimed); each round is one run
//! (one transaction) on fresh ids from the same generator as the benchmark.
//! `cold-lookup` and `cold-traversal` close the database, evict its files
//! and open it again before each round (that is timed too, separately).
//! `CAIRN_PROFILE_SYSTEM` names another system (`cairn-page`, `cairn-file`:
//! they start the `cairn` binary named by `CAIRN_BIN`, by default
//! `target/release/cairn`).

use std::time::Instant;

use cairn_bench::oo1::generate::{self, Graph};
use cairn_bench::oo1::rng::ParkMiller;
use cairn_bench::oo1::systems;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let measure = args.next().unwrap_or_else(|| "lookup".into());
    let rounds: usize = args.next().map(|s| s.parse()).transpose()?.unwrap_or(2000);
    let n = 20_000;
    let mut rng = ParkMiller::new(1);
    let graph = Graph::generate(&mut rng, n);
    let scratch = tempfile::tempdir()?;
    let system = std::env::var("CAIRN_PROFILE_SYSTEM").unwrap_or_else(|_| "cairn-embedded".into());
    let exe = std::path::PathBuf::from(std::env::var("CAIRN_BIN").unwrap_or_else(|_| "target/release/cairn".into()));
    let mut sys = systems::by_name(&system, scratch.path(), Some(&exe))?;
    sys.build(&graph)?;
    let mut took = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let cold = measure.starts_with("cold-");
        if cold {
            sys.open_cold()?;
        }
        let t = Instant::now();
        match measure.trim_start_matches("cold-") {
            "lookup" => {
                let ids = generate::lookup_ids(&mut rng, n);
                sys.lookup(&ids)?;
            }
            "traversal" => {
                let start = rng.rand(n);
                sys.traversal(start, 7)?;
            }
            "reverse" => {
                let start = rng.rand(n);
                sys.reverse_traversal(start, 7)?;
            }
            "insert" => {
                // 100 new parts, removed again untimed (as the benchmark does).
                let batch = generate::insert_batch(&mut rng, n);
                sys.insert(&batch)?;
                took.push(t.elapsed().as_secs_f64() * 1e3);
                sys.remove(&batch)?;
                continue;
            }
            other => return Err(format!("unknown measure {other:?}").into()),
        }
        took.push(t.elapsed().as_secs_f64() * 1e3);
    }
    took.sort_by(f64::total_cmp);
    println!("{measure}: {rounds} runs, median {:.3} ms", took[rounds / 2]);
    Ok(())
}
