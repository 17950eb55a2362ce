//! An OO1-style parts-and-connections graph (Cattell & Skeen): N parts, each
//! with exactly 3 connections, 90% of them to a part among the closest 1% by
//! id; lookups through an index on `id`, a 7-hop traversal from a random part,
//! and the reverse traversal over `from`.
//!
//! ```sh
//! cargo run --release -p cairn --example oo1_graph -- /tmp/oo1.cairn 20000
//! # without a directory: 2000 parts in a temporary one, removed at the end
//! cargo run --release -p cairn --example oo1_graph
//! # or against a running `cairn serve` (the directory argument is then unused):
//! cargo run --release -p cairn --example oo1_graph -- --connect cairn://127.0.0.1:7411 20000
//! ```

use cairn::{Database, Index, List, Persistent, Ref};

#[derive(Persistent, Debug, Clone)]
struct Connection {
    to: Ref<Part>,
    kind: String,
    length: i32,
}

#[derive(Persistent, Debug, Clone)]
struct Part {
    #[cairn(index)]
    id: u32,
    kind: String,
    x: i32,
    y: i32,
    build: i64,
    to: Vec<Connection>,
    from: List<Ref<Part>>,
}

const BY_ID: Index<u32, Part> = Index::on("id");

/// Park–Miller minimal standard generator.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0 * 16807 % 2_147_483_647;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn main() -> cairn::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let n: u32 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(2000);
    if args.get(1).map(String::as_str) == Some("--connect") {
        let url = args.get(2).cloned().unwrap_or_else(|| "cairn://127.0.0.1:7411".into());
        let n_at = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(2000);
        return run(Database::connect(&url, cairn::Options::default())?, n_at);
    }
    // Without a directory named, the database lives in a temporary one,
    // removed at the end (after `db`, declared below it, is dropped).
    let scratch = tempfile::tempdir().expect("a temporary directory");
    let db = {
        let dir = match args.get(1) {
            Some(dir) => std::path::PathBuf::from(dir),
            None => scratch.path().join("oo1-example.cairn"),
        };
        let _ = std::fs::remove_dir_all(&dir);
        Database::open(&dir)?
    };
    run(db, n)
}

/// Builds the graph in `db` and runs the queries.
fn run(db: Database, n: u32) -> cairn::Result<()> {
    let mut rng = Rng(1);
    let t = std::time::Instant::now();
    let mut tx = db.begin()?;
    let mut parts = Vec::with_capacity(n as usize);
    for id in 1..=n {
        let p = Part {
            id,
            kind: format!("part-type{}", rng.below(10)),
            x: rng.below(100_000) as i32,
            y: rng.below(100_000) as i32,
            build: rng.below(3650) as i64,
            to: Vec::new(),
            from: List::new(),
        };
        parts.push(tx.create_in("parts", p)?);
    }
    let near = (n / 100).max(1);
    for i in 0..n {
        for _ in 0..3 {
            let t = if rng.below(10) < 9 {
                // Among the closest 1% by id, doubled up at the ends.
                let lo = i.saturating_sub(near / 2).min(n - near);
                lo + rng.below(u64::from(near)) as u32
            } else {
                rng.below(u64::from(n)) as u32
            };
            let (src, dst) = (parts[i as usize].clone(), parts[t as usize].clone());
            let length = rng.below(100_000) as i32;
            tx.update(&src, |p| {
                p.to.push(Connection {
                    to: dst.clone(),
                    kind: "conn".into(),
                    length,
                })
            })?;
            tx.update(&dst, |p| p.from.push(src.clone()))?;
        }
    }
    tx.commit()?;
    println!("built {n} parts with {} connections in {:.2?}", 3 * n, t.elapsed());

    // Lookup: 1,000 random ids through the index.
    let t = std::time::Instant::now();
    let mut tx = db.begin()?;
    let mut sum = 0i64;
    for _ in 0..1000 {
        let id = 1 + rng.below(u64::from(n)) as u32;
        for r in tx.find(&BY_ID, &id)? {
            let p = tx.get(&r)?;
            sum += i64::from(p.x) + i64::from(p.y);
        }
    }
    println!("lookup: 1000 parts in {:.2?} (checksum {sum})", t.elapsed());

    // Traversal: 7 hops depth-first over `to` from a random part.
    fn go(tx: &mut cairn::Transaction<'_>, r: &Ref<Part>, depth: u32, visits: &mut u64) -> cairn::Result<()> {
        let p = tx.get(r)?;
        *visits += 1;
        if depth > 0 {
            for c in &p.to {
                go(tx, &c.to, depth - 1, visits)?;
            }
        }
        Ok(())
    }
    let start = parts[rng.below(u64::from(n)) as usize].clone();
    let t = std::time::Instant::now();
    let mut visits = 0;
    go(&mut tx, &start, 7, &mut visits)?;
    println!("traversal: {visits} visits in {:.2?}", t.elapsed());

    // Reverse traversal over `from`.
    fn back(tx: &mut cairn::Transaction<'_>, r: &Ref<Part>, depth: u32, visits: &mut u64) -> cairn::Result<()> {
        let p = tx.get(r)?;
        *visits += 1;
        if depth > 0 {
            for f in p.from.iter() {
                back(tx, f, depth - 1, visits)?;
            }
        }
        Ok(())
    }
    let t = std::time::Instant::now();
    let mut rvisits = 0;
    back(&mut tx, &start, 7, &mut rvisits)?;
    println!("reverse traversal: {rvisits} visits in {:.2?}", t.elapsed());
    tx.commit()?;
    println!("object cache: {:?}", db.cache_stats());
    db.close()
}
