//! Why was the `sqlite` peer of `cairn bench oo1` slower than a plain
//! rusqlite program? This example measures it, so the comparison can be
//! repeated:
//!
//! ```sh
//! CARGO_TARGET_DIR=/work/target-peers cargo run --release -p cairn-bench --example sqlite_plain [-- PARTS [ROUNDS]]
//! ```
//!
//! It builds the OO1 database (seed 1, 20,000 parts by default) twice: a
//! plain `part` table (`INTEGER PRIMARY KEY`, the five columns, nothing
//! else, bulk-loaded alone) and the `sqlite` peer's own database (through
//! [`Sqlite::build`]). Then, for each of OO1's warm lookup runs (the
//! harness's run seeds, runs 2–10, each repeated so the cache is warm), it
//! times 1,000 lookups in one read transaction in several ways, interleaved
//! round by round so the machine's noise falls on every way alike:
//!
//! - `plain`: the plain program — the plain table, one statement prepared
//!   before the run and reused for every id;
//! - `peer`: the peer itself ([`System::lookup`], with its memory map on);
//! - `plain-db, cached per id`: the plain table, but `prepare_cached` called
//!   for every id (the old peer's access pattern);
//! - `peer-db, prepared once`: the peer's database with the plain program's
//!   access pattern (does the schema or the file layout matter?);
//! - `plain-db, execute_batch BEGIN`: the plain program, with the
//!   transaction begun and ended by `execute_batch` as the old peer did;
//! - `plain-db, mmap`: the plain program with `mmap_size` set;
//! - `plain WITHOUT ROWID`: the plain program on a `WITHOUT ROWID` table.
//!
//! Each line is the median over runs and rounds, in milliseconds per run of
//! 1,000 lookups, with the fastest and slowest.

use std::path::Path;
use std::time::Instant;

use cairn_bench::oo1::generate::{self, Graph};
use cairn_bench::oo1::rng::ParkMiller;
use cairn_bench::oo1::system::{null_proc, System, Visits};
use cairn_bench::oo1::systems::sqlite::Sqlite;
use cairn_bench::oo1::workload::{run_seed, Measure};
use rusqlite::{params, Connection};

const GET_PART: &str = "SELECT x, y, part_type FROM part WHERE id = ?1";

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Opens `path` as both programs do: WAL, `synchronous = FULL`, a 64 MiB
/// page cache; `mmap_bytes` > 0 also maps the file.
fn open(path: &Path, mmap_bytes: i64) -> Result<Connection> {
    let c = Connection::open(path)?;
    c.pragma_update(None, "journal_mode", "WAL")?;
    c.pragma_update(None, "synchronous", "FULL")?;
    c.pragma_update(None, "cache_size", -65_536)?;
    if mmap_bytes > 0 {
        c.pragma_update(None, "mmap_size", mmap_bytes)?;
    }
    Ok(c)
}

/// The plain table: one row per part, keyed by id, loaded in one
/// transaction; `without_rowid` makes it a `WITHOUT ROWID` table.
fn build_plain(path: &Path, graph: &Graph, without_rowid: bool) -> Result<()> {
    let c = open(path, 0)?;
    c.execute_batch(&format!(
        "CREATE TABLE part (id INTEGER PRIMARY KEY, part_type TEXT NOT NULL, x INTEGER NOT NULL, \
         y INTEGER NOT NULL, build INTEGER NOT NULL){}",
        if without_rowid { " WITHOUT ROWID" } else { "" }
    ))?;
    let tx = c.unchecked_transaction()?;
    {
        let mut st = tx.prepare("INSERT INTO part VALUES (?1, ?2, ?3, ?4, ?5)")?;
        for p in &graph.parts {
            st.execute(params![p.id, p.kind_str(), p.x, p.y, p.build])?;
        }
    }
    tx.commit()?;
    Ok(())
}

/// The plain program's run: one transaction, one statement prepared before
/// the loop.
fn lookup_prepared_once(c: &Connection, ids: &[u32]) -> Result<Visits> {
    let tx = c.unchecked_transaction()?;
    let mut v = Visits::default();
    {
        let mut st = tx.prepare_cached(GET_PART)?;
        for &id in ids {
            let mut rows = st.query([id])?;
            let row = rows.next()?.ok_or("missing part")?;
            v.visit(row.get(0)?, row.get(1)?, row.get_ref(2)?.as_str()?);
        }
    }
    tx.commit()?;
    Ok(v)
}

/// The old peer's run: `prepare_cached` looked up again for every id.
fn lookup_cached_per_id(c: &Connection, ids: &[u32]) -> Result<Visits> {
    let tx = c.unchecked_transaction()?;
    let mut v = Visits::default();
    for &id in ids {
        let mut st = tx.prepare_cached(GET_PART)?;
        let mut rows = st.query([id])?;
        let row = rows.next()?.ok_or("missing part")?;
        v.visit(row.get(0)?, row.get(1)?, row.get_ref(2)?.as_str()?);
    }
    tx.commit()?;
    Ok(v)
}

/// The plain program, but with the transaction begun and ended by
/// `execute_batch` (each call prepares its statement again).
fn lookup_execute_batch(c: &Connection, ids: &[u32]) -> Result<Visits> {
    c.execute_batch("BEGIN")?;
    let mut v = Visits::default();
    {
        let mut st = c.prepare_cached(GET_PART)?;
        for &id in ids {
            let mut rows = st.query([id])?;
            let row = rows.next()?.ok_or("missing part")?;
            v.visit(row.get(0)?, row.get(1)?, row.get_ref(2)?.as_str()?);
        }
    }
    c.execute_batch("COMMIT")?;
    Ok(v)
}

/// The floor of the loop itself: the null procedure on made-up values, no
/// SQLite at all.
fn lookup_null(ids: &[u32]) -> Visits {
    let mut v = Visits::default();
    for &id in ids {
        v.visit(id as i32, id as i32, "part-type0");
    }
    std::hint::black_box(null_proc(0, 0, ""));
    v
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let parts: u32 = args.next().map_or(Ok(20_000), |a| a.parse())?;
    let rounds: usize = args.next().map_or(Ok(5), |a| a.parse())?;
    let dir = tempfile::tempdir()?;
    let graph = Graph::generate(&mut ParkMiller::new(1), parts);

    let plain_path = dir.path().join("plain.sqlite");
    build_plain(&plain_path, &graph, false)?;
    let no_rowid_path = dir.path().join("without-rowid.sqlite");
    build_plain(&no_rowid_path, &graph, true)?;
    let mut peer = Sqlite::new(dir.path().join("peer"));
    peer.build(&graph)?;
    peer.close()?;
    peer.open_cold()?;
    let peer_path = dir.path().join("peer").join("oo1.sqlite");

    let plain = open(&plain_path, 0)?;
    let plain_mmap = open(&plain_path, 256 << 20)?;
    let peer_db = open(&peer_path, 0)?;
    let no_rowid = open(&no_rowid_path, 0)?;

    // The harness's warm lookup runs: run indexes 1..10 (runs 2–10).
    let runs: Vec<Vec<u32>> = (1..10)
        .map(|r| generate::lookup_ids(&mut ParkMiller::new(run_seed(1, Measure::Lookup, r)), parts))
        .collect();
    let names = [
        "plain (prepared once per run)",
        "peer (System::lookup)",
        "plain-db, prepare_cached per id",
        "peer-db, prepared once per run",
        "plain-db, execute_batch BEGIN/COMMIT",
        "plain-db, mmap_size 256 MiB",
        "plain WITHOUT ROWID table",
        "no SQLite (the loop and null procedure)",
    ];
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    for round in 0..=rounds {
        for ids in &runs {
            let mut digest = None;
            for (k, _) in names.iter().enumerate() {
                // Once to warm every cache, then timed.
                let mut run = || -> Result<Visits> {
                    match k {
                        0 => lookup_prepared_once(&plain, ids),
                        1 => Ok(peer.lookup(ids)?),
                        2 => lookup_cached_per_id(&plain, ids),
                        3 => lookup_prepared_once(&peer_db, ids),
                        4 => lookup_execute_batch(&plain, ids),
                        5 => lookup_prepared_once(&plain_mmap, ids),
                        6 => lookup_prepared_once(&no_rowid, ids),
                        _ => Ok(lookup_null(ids)),
                    }
                };
                run()?;
                let t = Instant::now();
                let v = run()?;
                let ms = t.elapsed().as_secs_f64() * 1e3;
                assert_eq!(v.count, generate::LOOKUP_IDS as u64);
                if k < names.len() - 1 {
                    // Every SQLite way visited the same parts.
                    assert_eq!(*digest.get_or_insert(v.digest), v.digest, "{}", names[k]);
                }
                // Round 0 only warms up.
                if round > 0 {
                    times[k].push(ms);
                }
            }
        }
    }
    println!(
        "{parts} parts, {} runs × {rounds} rounds of {} lookups each (median, min–max ms per run)",
        runs.len(),
        generate::LOOKUP_IDS
    );
    for (name, t) in names.iter().zip(&mut times) {
        let (lo, hi) = t
            .iter()
            .fold((f64::INFINITY, 0.0f64), |(a, b), &x| (a.min(x), b.max(x)));
        println!("  {name:<42} {:>7.3}  {lo:.3}–{hi:.3}", median(t));
    }
    peer.close()?;
    Ok(())
}
