//! `cairn torture`: random transactions from several threads, one stdout
//! line per acknowledged commit, made to be killed at any moment.
//!
//! Every object of the `torture` group is a self-describing record (see
//! [`crate::format`]): its key, version, writer and the writing transaction's
//! whole write set are inside it, so `cairn verify` can check the database
//! against the log of acknowledged commits without trusting anything else.
//!
//! # What a run does
//!
//! 1. Opens the directory with `Db::open_or_create` (recovering it if a
//!    previous run was killed) — or, with `--connect URL`, connects to a
//!    `cairn serve` as a page-server client (the same storage transactions,
//!    run over the client backend) —, creates the group if missing, scans it
//!    and adopts every live object, so runs build on each other's data. A
//!    lost server ends the run with an error (what it acknowledged stands).
//! 2. Picks a fresh 32-bit run nonce (not used by any record present), so
//!    keys (`nonce << 32 | thread << 24 | counter`) are never re-created.
//! 3. Runs `threads` workers until the time is up. Each transaction does 1
//!    to 6 steps on distinct objects: create (sometimes near another object
//!    of the transaction), replace (any new size: small ↔ large), grow
//!    (`write_range` over the old length, then `append`), shrink
//!    (`truncate`, then `write_range`), rewrite in pieces (`write_range`s in
//!    random order), delete (with a tombstone in the same transaction).
//!    Sizes run from 144 bytes to 320 KiB, crossing the large-object
//!    threshold both ways. About 10% of transactions end with `abort()`;
//!    half of those are then checked to have left nothing behind.
//! 4. Before changing an object a worker reads its header back and checks
//!    the version and length it expects (a lost update shows up at once).
//! 5. `Deadlock` and `LockTimeout` abort the transaction and start a new
//!    one; they are counted, never printed to stdout.
//! 6. After each `commit()` returns Ok, exactly one line
//!    `committed <txid> <digest>` goes to stdout, flushed at once. Nothing
//!    else is written to stdout; the seed and the summary go to stderr.
//!
//! Objects in use by one worker's open transaction are marked busy in the
//! shared map, so no two workers plan changes to the same object; workers
//! still collide on pages, which is what produces deadlocks.

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cairn::tools::RemoteStore;

use anyhow::{anyhow, bail, Context};
use cairn_storage::record::object::small_max;
use cairn_storage::{Db, DbOptions, Error, GroupId, Oid, Txn, VolumeOptions};

use crate::format::{
    decode, encode, format_commit_line, object_len_min, peek_header, splitmix64, DigestEntry, Entry, Kind, DELETED,
    HEADER_SIZE,
};

/// The group torture writes to and verify reads.
pub const GROUP: &str = "torture";
/// Steps in one transaction, at most.
pub const STEPS_MAX: usize = 6;
/// The largest object torture writes.
pub const LEN_MAX: u64 = 320 << 10;
/// Live objects torture aims to keep (creates and deletes balance around it).
const LIVE_TARGET: usize = 400;

/// A run's settings.
#[derive(Clone, Debug)]
pub struct Options {
    /// The database directory.
    pub dir: PathBuf,
    /// How long to run.
    pub seconds: f64,
    /// Worker threads (1 to 255).
    pub threads: usize,
    /// The random seed.
    pub seed: u64,
    /// Run against this server (`cairn://HOST:PORT`) instead of `dir`.
    pub connect: Option<String>,
    /// With `connect`: as a file-server client (reading and writing the
    /// served volume file) rather than a page-server client.
    pub file: bool,
}

/// Where the transactions run: the embedded engine, or a server.
enum Target {
    Local(Db),
    Remote(Arc<RemoteStore>),
}

impl Target {
    fn begin(&self) -> Result<Txn, Error> {
        match self {
            Target::Local(db) => db.begin(),
            Target::Remote(r) => r.begin(),
        }
    }

    fn page_size(&self) -> u64 {
        match self {
            Target::Local(db) => db.header().page_size as u64,
            Target::Remote(r) => r.page_size() as u64,
        }
    }
}

/// What a run did.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    /// Records found at start (objects, tombstones, undecodable).
    pub found: (u64, u64, u64),
    /// Transactions committed and acknowledged.
    pub commits: u64,
    /// Transactions ended with an explicit abort.
    pub aborts: u64,
    /// Aborted transactions checked to have left nothing.
    pub aborts_checked: u64,
    /// Transactions restarted after a deadlock.
    pub deadlocks: u64,
    /// Transactions restarted after a lock timeout.
    pub lock_timeouts: u64,
    /// Committed steps, by kind: create, replace, grow, shrink, rewrite, delete.
    pub steps: [u64; 6],
}

impl Summary {
    fn add(&mut self, o: &Summary) {
        self.commits += o.commits;
        self.aborts += o.aborts;
        self.aborts_checked += o.aborts_checked;
        self.deadlocks += o.deadlocks;
        self.lock_timeouts += o.lock_timeouts;
        for (a, b) in self.steps.iter_mut().zip(o.steps) {
            *a += b;
        }
    }
}

/// The engine settings torture runs with: small buffer pool and private
/// memory (so pages are evicted and transactions spill), frequent
/// checkpoints, short lock waits.
pub fn db_options() -> DbOptions {
    DbOptions {
        volume: VolumeOptions {
            buffer_frames: 512,
            ..VolumeOptions::default()
        },
        lock_timeout: Duration::from_secs(2),
        txn_memory_bytes: 512 << 10,
        checkpoint_log_bytes: 4 << 20,
        background: true,
        ..DbOptions::default()
    }
}

/// A small deterministic generator (SplitMix64), one per worker.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let r = splitmix64(self.0);
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        r
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// A number in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }

    /// True with probability `pct` percent.
    pub fn chance(&mut self, pct: u64) -> bool {
        self.below(100) < pct
    }
}

/// Where a live object is and what torture last wrote to it.
#[derive(Clone, Copy, Debug)]
struct Slot {
    oid: Oid,
    version: u64,
    len: u64,
    busy: bool,
}

/// The live objects, shared by the workers.
#[derive(Default)]
struct Pool {
    live: HashMap<u64, Slot>,
    keys: Vec<u64>,
}

impl Pool {
    fn insert(&mut self, key: u64, slot: Slot) {
        if self.live.insert(key, slot).is_none() {
            self.keys.push(key);
        }
    }

    fn remove(&mut self, key: u64) {
        self.live.remove(&key);
        if let Some(i) = self.keys.iter().position(|k| *k == key) {
            self.keys.swap_remove(i);
        }
    }

    /// Marks a random idle object busy and returns it.
    fn reserve(&mut self, rng: &mut Rng) -> Option<(u64, Slot)> {
        if self.keys.is_empty() {
            return None;
        }
        for _ in 0..16 {
            let key = self.keys[rng.below(self.keys.len() as u64) as usize];
            let slot = self.live.get_mut(&key).expect("keys and live agree");
            if !slot.busy {
                slot.busy = true;
                return Some((key, *slot));
            }
        }
        None
    }

    fn release(&mut self, key: u64) {
        if let Some(s) = self.live.get_mut(&key) {
            s.busy = false;
        }
    }
}

/// What a step does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Action {
    Create,
    Replace,
    Grow,
    Shrink,
    Rewrite,
    Delete,
}

impl Action {
    fn index(self) -> usize {
        self as usize
    }
}

/// One planned step of a transaction.
#[derive(Clone, Copy, Debug)]
struct Step {
    action: Action,
    key: u64,
    /// The object's OID (None for a create until it is made).
    oid: Option<Oid>,
    old_version: u64,
    old_len: u64,
    new_len: u64,
}

impl Step {
    fn entry(&self) -> Entry {
        Entry {
            key: self.key,
            version: match self.action {
                Action::Delete => DELETED,
                _ => self.old_version + 1,
            },
        }
    }
}

/// Why a transaction attempt ended without committing.
enum Fail {
    Deadlock,
    LockTimeout,
    Fatal(anyhow::Error),
}

impl From<Error> for Fail {
    fn from(e: Error) -> Fail {
        match e {
            Error::Deadlock { .. } => Fail::Deadlock,
            Error::LockTimeout { .. } => Fail::LockTimeout,
            other => Fail::Fatal(anyhow!(other)),
        }
    }
}

/// Sizes, from the page size.
#[derive(Clone, Copy, Debug)]
struct Sizes {
    min: u64,
    small_max: u64,
    page: u64,
}

impl Sizes {
    fn pick(&self, rng: &mut Rng) -> u64 {
        match rng.below(100) {
            0..=59 => rng.range(self.min, self.small_max),
            60..=79 => rng.range(self.small_max + 1, 4 * self.page),
            80..=94 => rng.range(4 * self.page, 64 << 10),
            _ => rng.range(64 << 10, LEN_MAX),
        }
    }

    fn grow(&self, rng: &mut Rng, old: u64) -> u64 {
        let delta = match rng.below(100) {
            0..=59 => rng.range(1, 200),
            60..=84 => rng.range(200, self.page),
            _ => rng.range(self.page, 64 << 10),
        };
        (old + delta).min(LEN_MAX)
    }

    fn shrink(&self, rng: &mut Rng, old: u64) -> u64 {
        match rng.below(100) {
            0..=49 => rng.range(self.min, old - 1),
            50..=79 => old - rng.range(1, (old - self.min).min(200)),
            _ if old > self.small_max => rng.range(self.min, self.small_max),
            _ => rng.range(self.min, old - 1),
        }
    }
}

/// One worker's view.
struct Worker<'a> {
    db: &'a Target,
    group: GroupId,
    pool: &'a Mutex<Pool>,
    rng: Rng,
    sizes: Sizes,
    key_base: u64,
    counter: u64,
    stats: Summary,
}

fn lock_pool(p: &Mutex<Pool>) -> std::sync::MutexGuard<'_, Pool> {
    p.lock().unwrap_or_else(|e| e.into_inner())
}

impl Worker<'_> {
    /// Plans a transaction: picks actions and reserves the objects.
    fn plan(&mut self) -> Vec<Step> {
        let n = 1 + self.rng.below(STEPS_MAX as u64) as usize;
        let mut steps = Vec::with_capacity(n);
        let mut pool = lock_pool(self.pool);
        for _ in 0..n {
            let live = pool.live.len();
            let w_create = if live < LIVE_TARGET { 30 } else { 8 };
            let w_delete = if live > LIVE_TARGET { 25 } else { 6 };
            let weights = [
                (Action::Create, w_create),
                (Action::Replace, 20),
                (Action::Grow, 12),
                (Action::Shrink, 12),
                (Action::Rewrite, 12),
                (Action::Delete, w_delete),
            ];
            let total: u64 = weights.iter().map(|w| w.1).sum();
            let mut r = self.rng.below(total);
            let mut action = Action::Create;
            for (a, w) in weights {
                if r < w {
                    action = a;
                    break;
                }
                r -= w;
            }
            let existing = if action == Action::Create {
                None
            } else {
                pool.reserve(&mut self.rng)
            };
            let step = match existing {
                Some((key, slot)) => {
                    let mut action = action;
                    if action == Action::Grow && slot.len >= LEN_MAX {
                        action = Action::Shrink;
                    }
                    if action == Action::Shrink && slot.len <= self.sizes.min {
                        action = Action::Grow;
                    }
                    let new_len = match action {
                        Action::Replace => self.sizes.pick(&mut self.rng),
                        Action::Grow => self.sizes.grow(&mut self.rng, slot.len),
                        Action::Shrink => self.sizes.shrink(&mut self.rng, slot.len),
                        _ => slot.len,
                    };
                    Step {
                        action,
                        key,
                        oid: Some(slot.oid),
                        old_version: slot.version,
                        old_len: slot.len,
                        new_len,
                    }
                }
                None => {
                    if self.counter >= 1 << 24 {
                        continue;
                    }
                    self.counter += 1;
                    Step {
                        action: Action::Create,
                        key: self.key_base | self.counter,
                        oid: None,
                        old_version: 0,
                        old_len: 0,
                        new_len: self.sizes.pick(&mut self.rng),
                    }
                }
            };
            steps.push(step);
        }
        steps
    }

    fn release(&self, steps: &[Step]) {
        let mut pool = lock_pool(self.pool);
        for s in steps {
            pool.release(s.key);
        }
    }

    /// Checks that the object still holds what torture last wrote to it.
    fn check_current(txn: &mut Txn, s: &Step) -> Result<(), Fail> {
        let oid = s.oid.expect("an existing object has an OID");
        let mut h = [0u8; HEADER_SIZE];
        txn.read_range(oid, 0, &mut h)?;
        let len = txn.len(oid)?;
        if peek_header(&h) != Some((s.key, s.old_version)) || len != s.old_len {
            return Err(Fail::Fatal(anyhow!(
                "self-check failed in {}: object {oid} should be key {:016x} v{} of {} bytes, \
                 found {:?} (key, version) and {len} bytes",
                txn.id(),
                s.key,
                s.old_version,
                s.old_len,
                peek_header(&h).map(|(k, v)| (format!("{k:016x}"), v)),
            )));
        }
        Ok(())
    }

    /// Runs the steps in one transaction; commits (returning the digest and
    /// the new OIDs) or, if `abort`, aborts.
    fn attempt(&mut self, steps: &mut [Step], abort: bool) -> Result<Option<(u64, Vec<DigestEntry>)>, Fail> {
        let mut txn = self.db.begin()?;
        let txid = txn.id().0;
        let ws: Vec<Entry> = steps.iter().map(Step::entry).collect();
        let mut digest = Vec::with_capacity(steps.len());
        for i in 0..steps.len() {
            let s = steps[i];
            if s.action != Action::Create {
                Self::check_current(&mut txn, &s)?;
            }
            let e = s.entry();
            if s.action == Action::Delete {
                let oid = s.oid.expect("existing");
                txn.delete(oid)?;
                let tomb = encode(Kind::Tombstone, s.key, s.old_version, txid, 0, &ws);
                txn.create(self.group, &tomb)?;
                digest.push(DigestEntry::Delete { key: s.key });
                continue;
            }
            let data = encode(Kind::Object, s.key, e.version, txid, s.new_len, &ws);
            let crc = u32::from_le_bytes(data[12..16].try_into().expect("4 bytes"));
            let old = s.old_len as usize;
            match s.action {
                Action::Create => {
                    let near = steps[..i]
                        .iter()
                        .filter(|p| p.action != Action::Delete)
                        .find_map(|p| p.oid);
                    let oid = match near {
                        Some(n) if self.rng.chance(40) => txn.create_near(n, &data)?,
                        _ => txn.create(self.group, &data)?,
                    };
                    steps[i].oid = Some(oid);
                }
                Action::Replace => txn.update(s.oid.expect("existing"), &data)?,
                Action::Grow => {
                    let oid = s.oid.expect("existing");
                    if self.rng.chance(50) {
                        txn.write_range(oid, 0, &data[..old])?;
                        txn.append(oid, &data[old..])?;
                    } else {
                        txn.write_range(oid, 0, &data)?;
                    }
                }
                Action::Shrink => {
                    let oid = s.oid.expect("existing");
                    txn.truncate(oid, s.new_len)?;
                    txn.write_range(oid, 0, &data)?;
                }
                Action::Rewrite => {
                    let oid = s.oid.expect("existing");
                    let pieces = 1 + self.rng.below(4) as usize;
                    let mut cuts: Vec<usize> = (1..pieces)
                        .map(|_| self.rng.below(data.len() as u64) as usize)
                        .collect();
                    cuts.push(0);
                    cuts.push(data.len());
                    cuts.sort_unstable();
                    let mut ranges: Vec<(usize, usize)> = cuts.windows(2).map(|w| (w[0], w[1])).collect();
                    // Random order: a later piece may be written first.
                    for j in (1..ranges.len()).rev() {
                        ranges.swap(j, self.rng.below(j as u64 + 1) as usize);
                    }
                    for (a, b) in ranges {
                        if a < b {
                            txn.write_range(oid, a as u64, &data[a..b])?;
                        }
                    }
                }
                Action::Delete => unreachable!("handled above"),
            }
            digest.push(DigestEntry::Write {
                key: s.key,
                version: e.version,
                crc,
            });
        }
        if abort {
            txn.abort()?;
            return Ok(None);
        }
        txn.commit()?;
        Ok(Some((txid, digest)))
    }

    /// After an explicit abort: nothing the transaction did may be visible.
    fn check_aborted(&mut self, steps: &[Step]) -> Result<bool, Fail> {
        let mut txn = self.db.begin()?;
        for s in steps {
            let Some(oid) = s.oid else { continue };
            if s.action == Action::Create {
                // The OID may legitimately name a later object now (the
                // aborted page copy never advanced the page's uniquifier);
                // it must not be this key.
                if txn.exists(oid)? {
                    let mut h = [0u8; HEADER_SIZE];
                    if txn.len(oid)? >= HEADER_SIZE as u64 {
                        txn.read_range(oid, 0, &mut h)?;
                        if peek_header(&h).is_some_and(|(k, _)| k == s.key) {
                            return Err(Fail::Fatal(anyhow!(
                                "aborted create of key {:016x} is visible at {oid}",
                                s.key
                            )));
                        }
                    }
                }
            } else {
                Self::check_current(&mut txn, s)?;
            }
        }
        txn.commit()?;
        Ok(true)
    }

    fn run(&mut self, deadline: Instant, stop: &AtomicBool) -> anyhow::Result<()> {
        while Instant::now() < deadline && !stop.load(Ordering::Relaxed) {
            let mut steps = self.plan();
            if steps.is_empty() {
                continue;
            }
            let abort = self.rng.chance(10);
            let result = self.attempt(&mut steps, abort);
            match result {
                Ok(Some((txid, digest))) => {
                    {
                        let line = format!("{}\n", format_commit_line(txid, &digest));
                        let mut out = std::io::stdout().lock();
                        out.write_all(line.as_bytes()).context("writing to stdout")?;
                        out.flush().context("flushing stdout")?;
                    }
                    self.stats.commits += 1;
                    let mut pool = lock_pool(self.pool);
                    for s in &steps {
                        self.stats.steps[s.action.index()] += 1;
                        if s.action == Action::Delete {
                            pool.remove(s.key);
                        } else {
                            pool.insert(
                                s.key,
                                Slot {
                                    oid: s.oid.expect("made"),
                                    version: s.old_version + 1,
                                    len: s.new_len,
                                    busy: false,
                                },
                            );
                        }
                    }
                }
                Ok(None) => {
                    self.stats.aborts += 1;
                    if self.rng.chance(50) {
                        match self.check_aborted(&steps) {
                            Ok(_) => self.stats.aborts_checked += 1,
                            Err(Fail::Fatal(e)) => {
                                self.release(&steps);
                                return Err(e);
                            }
                            Err(_) => {}
                        }
                    }
                    self.release(&steps);
                }
                Err(Fail::Deadlock) => {
                    self.stats.deadlocks += 1;
                    self.release(&steps);
                }
                Err(Fail::LockTimeout) => {
                    self.stats.lock_timeouts += 1;
                    self.release(&steps);
                }
                Err(Fail::Fatal(e)) => {
                    self.release(&steps);
                    return Err(e);
                }
            }
        }
        Ok(())
    }
}

fn open_group(db: &Target) -> anyhow::Result<GroupId> {
    match db {
        Target::Local(db) => match db.group(GROUP) {
            Ok(g) => Ok(g),
            Err(Error::GroupNotFound(_)) => Ok(db.create_group(GROUP)?),
            Err(e) => Err(e.into()),
        },
        Target::Remote(r) => Ok(r.group(GROUP, true)?),
    }
}

/// Scans the group: the live objects, and every run nonce in use.
fn adopt(db: &Target, group: GroupId, summary: &mut Summary) -> anyhow::Result<(Pool, HashSet<u32>)> {
    let mut pool = Pool::default();
    let mut nonces = HashSet::new();
    let mut txn = db.begin()?;
    for oid in txn.scan_all(group)? {
        let bytes = txn.read(oid).with_context(|| format!("reading object {oid}"))?;
        match decode(&bytes) {
            Ok(r) => {
                nonces.insert((r.key >> 32) as u32);
                if r.kind == Kind::Object {
                    summary.found.0 += 1;
                    pool.insert(
                        r.key,
                        Slot {
                            oid,
                            version: r.version,
                            len: r.len,
                            busy: false,
                        },
                    );
                } else {
                    summary.found.1 += 1;
                }
            }
            Err(d) => {
                // Left alone for `cairn verify` to report.
                summary.found.2 += 1;
                eprintln!("torture: object {oid} is not a whole record ({d}); leaving it alone");
            }
        }
    }
    txn.commit()?;
    Ok((pool, nonces))
}

fn pick_nonce(seed: u64, used: &HashSet<u32>) -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let mut x = t ^ (u64::from(std::process::id()) << 32) ^ splitmix64(seed);
    loop {
        x = splitmix64(x);
        let n = (x >> 32) as u32;
        if n != 0 && !used.contains(&n) {
            return n;
        }
    }
}

/// Runs torture as described in the module docs.
pub fn run(opts: &Options) -> anyhow::Result<Summary> {
    if !(1..=255).contains(&opts.threads) {
        bail!("--threads must be 1 to 255");
    }
    let db = match &opts.connect {
        None => Target::Local(
            Db::open_or_create(&opts.dir, &db_options()).with_context(|| format!("opening {}", opts.dir.display()))?,
        ),
        Some(url) => {
            let (address, connect) = cairn::tools::parse_url_login(url, None)?;
            let o = db_options();
            let arch = if opts.file {
                cairn_net::message::Architecture::FILE
            } else {
                cairn_net::message::Architecture::PAGE
            };
            Target::Remote(
                RemoteStore::connect_as(arch, address, &connect, 1024, o.txn_memory_bytes, 4096)
                    .with_context(|| format!("connecting to {url}"))?,
            )
        }
    };
    let group = open_group(&db)?;
    let mut summary = Summary::default();
    let (pool, nonces) = adopt(&db, group, &mut summary)?;
    let nonce = pick_nonce(opts.seed, &nonces);
    let page = db.page_size();
    let sizes = Sizes {
        min: object_len_min(STEPS_MAX),
        small_max: small_max(page as usize) as u64,
        page,
    };
    eprintln!(
        "torture: nonce {nonce:08x}, {} objects and {} tombstones found, {} threads for {} s",
        summary.found.0, summary.found.1, opts.threads, opts.seconds
    );
    let pool = Mutex::new(pool);
    let stop = AtomicBool::new(false);
    let deadline = Instant::now() + Duration::from_secs_f64(opts.seconds.max(0.0));
    let results: Vec<anyhow::Result<Summary>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..opts.threads)
            .map(|t| {
                let mut w = Worker {
                    db: &db,
                    group,
                    pool: &pool,
                    rng: Rng::new(splitmix64(
                        opts.seed ^ (t as u64 + 1).wrapping_mul(0xA24B_AED4_963E_E407),
                    )),
                    sizes,
                    key_base: (u64::from(nonce) << 32) | ((t as u64) << 24),
                    counter: 0,
                    stats: Summary::default(),
                };
                let stop = &stop;
                scope.spawn(move || {
                    let r = w.run(deadline, stop);
                    if r.is_err() {
                        stop.store(true, Ordering::Relaxed);
                    }
                    r.map(|()| w.stats)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(anyhow!("a worker panicked"))))
            .collect()
    });
    for r in results {
        summary.add(&r?);
    }
    let (checkpoints, spilled) = match db {
        Target::Local(db) => {
            let stats = db.stats();
            db.close()?;
            (stats.checkpoints, stats.pages_spilled)
        }
        Target::Remote(_) => (0, 0),
    };
    eprintln!(
        "torture: {} commits, {} aborts ({} checked), {} deadlocks, {} lock timeouts; steps: \
         {} create, {} replace, {} grow, {} shrink, {} rewrite, {} delete; {} checkpoints, {} pages spilled",
        summary.commits,
        summary.aborts,
        summary.aborts_checked,
        summary.deadlocks,
        summary.lock_timeouts,
        summary.steps[0],
        summary.steps[1],
        summary.steps[2],
        summary.steps[3],
        summary.steps[4],
        summary.steps[5],
        checkpoints,
        spilled,
    );
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_stay_in_bounds() {
        let sizes = Sizes {
            min: object_len_min(STEPS_MAX),
            small_max: 1018,
            page: 4096,
        };
        let mut rng = Rng::new(1);
        let (mut small, mut large) = (0, 0);
        for _ in 0..10_000 {
            let l = sizes.pick(&mut rng);
            assert!((sizes.min..=LEN_MAX).contains(&l));
            if l <= 1018 {
                small += 1;
            } else {
                large += 1;
            }
            let g = sizes.grow(&mut rng, l);
            assert!(g >= l && g <= LEN_MAX);
            if l > sizes.min {
                let s = sizes.shrink(&mut rng, l);
                assert!(s >= sizes.min && s < l, "{l} -> {s}");
            }
        }
        assert!(small > 1000 && large > 1000);
    }

    #[test]
    fn steps_name_their_versions() {
        let s = Step {
            action: Action::Delete,
            key: 5,
            oid: None,
            old_version: 3,
            old_len: 200,
            new_len: 200,
        };
        assert_eq!(
            s.entry(),
            Entry {
                key: 5,
                version: DELETED
            }
        );
        let s = Step {
            action: Action::Grow,
            ..s
        };
        assert_eq!(s.entry(), Entry { key: 5, version: 4 });
    }
}
