//! `cairn bench refs`: the cost of following a reference, against the
//! in-memory floor.
//!
//! A ring of `nodes` objects in random order, each pointing at the next; a
//! walk of `steps` follows the pointers and sums a field. Five ways, timed in
//! the same run (the machines are noisy, so the ratios are what counts):
//!
//! - **floor**: a plain `Vec<Node>`, following an index (`nodes[next]`);
//! - **swizzled**: `Transaction::get` on the `Ref` stored in the cached
//!   object — bound to its cache slot after the first lap, so no hash lookup;
//! - **oid-lookup**: the same through a fresh, unswizzled `Ref` each step
//!   (a hash lookup in the object cache);
//! - **view**: `Transaction::view` on the `Ref` read in place from the
//!   current node's page (objects used in place, no decode: the dual
//!   buffer's slot table finds the record again; a view's references are
//!   OIDs read from the page, never swizzled);
//! - **storage-read**: reading and decoding the record from the buffer pool
//!   each step (no object cache).
//!
//! All cairn walks are warm (one lap first) and inside one transaction.

use std::sync::Arc;
use std::time::Instant;

use cairn::{Database, Options, Persistent, Ref};

#[derive(Persistent, Debug)]
struct Node {
    next: Ref<Node>,
    value: u64,
}

/// How to run.
#[derive(Clone, Debug)]
pub struct RefsOptions {
    /// Objects in the ring.
    pub nodes: usize,
    /// Steps per timed walk.
    pub steps: usize,
    /// Scratch directory (a temporary one if `None`).
    pub dir: Option<std::path::PathBuf>,
}

impl Default for RefsOptions {
    fn default() -> Self {
        RefsOptions {
            nodes: 10_000,
            steps: 1_000_000,
            dir: None,
        }
    }
}

/// One measured way of following references.
#[derive(Clone, Debug)]
pub struct RefsResult {
    /// "floor", "swizzled", "oid-lookup", "view" or "storage-read".
    pub system: &'static str,
    /// Nanoseconds per step.
    pub ns_per_step: f64,
    /// Ratio to the floor.
    pub ratio_to_floor: f64,
}

fn permutation(n: usize, mut seed: u64) -> Vec<usize> {
    let mut v: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let j = (seed >> 33) as usize % (i + 1);
        v.swap(i, j);
    }
    v
}

/// Runs the benchmark: the floor first, then the cairn walks on one ring,
/// in one transaction, in the order the ratios were always measured in.
pub fn run(opts: &RefsOptions) -> cairn::Result<Vec<RefsResult>> {
    let n = opts.nodes.max(2);
    let order = permutation(n, 42);
    // The floor: next[i] is the index of the node after i in the ring.
    let mut next_of = vec![0usize; n];
    for w in 0..n {
        next_of[order[w]] = order[(w + 1) % n];
    }
    let floor_ns = floor_walk(&order, &next_of, opts.steps);

    let tmp = tempdir(opts.dir.as_deref())?;
    let mut o = Options {
        cache_bytes: 1 << 30,
        ..Options::default()
    };
    o.storage.background = false;
    let db = Database::open_with(tmp.join("refs.cairn"), o)?;
    build_ring(&db, &order, &next_of)?;

    let mut tx = db.begin()?;
    let start: Ref<Node> = tx.root("ring")?;
    let (swizzled_ns, lookup_ns, swizzled_sum) = cached_walks(&mut tx, &start, n, opts.steps)?;
    let view_ns = view_walk(&mut tx, &start, n, opts.steps, swizzled_sum)?;
    let storage_ns = storage_walk(&mut tx, &start, (opts.steps / 10).max(n))?;
    tx.commit()?;
    db.close()?;
    let _ = std::fs::remove_dir_all(&tmp);
    let r = |system, ns: f64| RefsResult {
        system,
        ns_per_step: ns,
        ratio_to_floor: ns / floor_ns,
    };
    Ok(vec![
        r("floor", floor_ns),
        r("swizzled", swizzled_ns),
        r("oid-lookup", lookup_ns),
        r("view", view_ns),
        r("storage-read", storage_ns),
    ])
}

/// The floor: `steps` steps around the ring as a plain `Vec`, following
/// indexes; nanoseconds per step.
fn floor_walk(order: &[usize], next_of: &[usize], steps: usize) -> f64 {
    struct Plain {
        next: usize,
        value: u64,
    }
    let plain: Vec<Plain> = (0..next_of.len())
        .map(|i| Plain {
            next: next_of[i],
            value: i as u64,
        })
        .collect();
    let t = Instant::now();
    let (mut cur, mut sum) = (order[0], 0u64);
    for _ in 0..steps {
        sum = sum.wrapping_add(plain[cur].value);
        cur = plain[cur].next;
    }
    let floor_ns = t.elapsed().as_nanos() as f64 / steps as f64;
    std::hint::black_box(sum);
    floor_ns
}

/// Builds the ring in one transaction: creates every node (pointing at a
/// placeholder, since its successor may not exist yet), then points each at
/// its successor, and makes `order[0]` the root `ring`.
fn build_ring(db: &Database, order: &[usize], next_of: &[usize]) -> cairn::Result<()> {
    let n = next_of.len();
    let mut tx = db.begin()?;
    let placeholder = Ref::from_oid(cairn::storage::Oid {
        page: cairn::storage::PageId(0),
        slot: cairn::storage::SlotIdx(0),
        uniq: cairn::storage::Uniq(0),
    });
    let refs: Vec<Ref<Node>> = (0..n)
        .map(|i| {
            tx.create_in(
                "ring",
                Node {
                    next: placeholder.clone(),
                    value: i as u64,
                },
            )
        })
        .collect::<cairn::Result<_>>()?;
    for i in 0..n {
        let to = refs[next_of[i]].clone();
        tx.update(&refs[i], |node| node.next = to)?;
    }
    tx.set_root("ring", &refs[order[0]])?;
    tx.commit()
}

/// The walks through the object cache: swizzled, then by OID lookup, after
/// one warming lap. Returns nanoseconds per step for each and the swizzled
/// walk's sum (the view walk must agree with it).
fn cached_walks(
    tx: &mut cairn::Transaction<'_>,
    start: &Ref<Node>,
    n: usize,
    steps: usize,
) -> cairn::Result<(f64, f64, u64)> {
    let walk = |tx: &mut cairn::Transaction<'_>, steps: usize, swizzle: bool| -> cairn::Result<u64> {
        let mut cur: Arc<Node> = tx.get(start)?;
        let mut sum = 0u64;
        for _ in 0..steps {
            let nxt = if swizzle {
                tx.get(&cur.next)?
            } else {
                tx.get(&Ref::<Node>::from_oid(cur.next.oid()))?
            };
            sum = sum.wrapping_add(nxt.value);
            cur = nxt;
        }
        Ok(sum)
    };
    walk(tx, n + 1, true)?;
    let t = Instant::now();
    let swizzled_sum = std::hint::black_box(walk(tx, steps, true)?);
    let swizzled_ns = t.elapsed().as_nanos() as f64 / steps as f64;
    let t = Instant::now();
    std::hint::black_box(walk(tx, steps, false)?);
    let lookup_ns = t.elapsed().as_nanos() as f64 / steps as f64;
    Ok((swizzled_ns, lookup_ns, swizzled_sum))
}

/// The walk through views: the next reference read in place, the next node
/// viewed in place, after one warming lap. Nanoseconds per step; an error if
/// its sum differs from `expected_sum` (the swizzled walk's).
fn view_walk(
    tx: &mut cairn::Transaction<'_>,
    start: &Ref<Node>,
    n: usize,
    steps: usize,
    expected_sum: u64,
) -> cairn::Result<f64> {
    let walk = |tx: &mut cairn::Transaction<'_>, steps: usize| -> cairn::Result<u64> {
        let mut cur = tx.view(start)?;
        let mut sum = 0u64;
        for _ in 0..steps {
            let nxt = tx.view(&cur.get().next())?;
            sum = sum.wrapping_add(nxt.get().value());
            cur = nxt;
        }
        Ok(sum)
    };
    walk(tx, n + 1)?;
    let t = Instant::now();
    let view_sum = std::hint::black_box(walk(tx, steps)?);
    let view_ns = t.elapsed().as_nanos() as f64 / steps as f64;
    if view_sum != expected_sum {
        return Err(cairn::Error::InvalidArgument(format!(
            "the walk through views summed {view_sum}, through get {expected_sum}: they read different rings"
        )));
    }
    Ok(view_ns)
}

/// Storage reads: record bytes from the buffer pool, decoded by hand each
/// step, no object cache. Nanoseconds per step.
fn storage_walk(tx: &mut cairn::Transaction<'_>, start: &Ref<Node>, steps: usize) -> cairn::Result<f64> {
    let st = tx.storage().expect("page-based");
    let mut oid = start.oid();
    let t = Instant::now();
    let mut sum = 0u64;
    for _ in 0..steps {
        let bytes = st.read(oid)?;
        // Skip the 6-byte header; the next OID and the value follow.
        let next = cairn::storage::Oid::from_slice(&bytes[6..]).expect("an OID");
        sum = sum.wrapping_add(u64::from_le_bytes(bytes[16..24].try_into().expect("8 bytes")));
        oid = next;
    }
    std::hint::black_box(sum);
    Ok(t.elapsed().as_nanos() as f64 / steps as f64)
}

/// The `--json` document of `cairn bench refs`: the run's parameters and
/// each way's nanoseconds per step and ratio to the floor.
pub fn to_json(opts: &RefsOptions, results: &[RefsResult]) -> serde_json::Value {
    let m = crate::commit::machine();
    serde_json::json!({
        "benchmark": "refs",
        "machine": { "cores": m.cores, "memory_bytes": m.memory_bytes },
        "config": { "nodes": opts.nodes, "steps": opts.steps },
        "results": results.iter().map(|r| serde_json::json!({
            "way": r.system,
            "ns_per_step": r.ns_per_step,
            "ratio_to_floor": r.ratio_to_floor,
        })).collect::<Vec<_>>(),
    })
}

fn tempdir(base: Option<&std::path::Path>) -> cairn::Result<std::path::PathBuf> {
    let base = base.map(|p| p.to_path_buf()).unwrap_or_else(std::env::temp_dir);
    let d = base.join(format!("cairn-bench-refs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).map_err(|e| cairn::Error::InvalidArgument(format!("{}: {e}", d.display())))?;
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tiny_run_measures_every_way() {
        let r = run(&RefsOptions {
            nodes: 50,
            steps: 500,
            dir: None,
        })
        .unwrap();
        let names: Vec<_> = r.iter().map(|x| x.system).collect();
        assert_eq!(names, ["floor", "swizzled", "oid-lookup", "view", "storage-read"]);
        assert!(r.iter().all(|x| x.ns_per_step > 0.0));
    }
}
