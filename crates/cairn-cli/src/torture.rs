//! `cairn torture`: random transactions from several threads, one stdout
//! line per acknowledged commit, made to be killed at any moment — and run
//! from any number of processes at once against one server.
//!
//! Every object of the `torture` group is a self-describing record (see
//! [`crate::format`]): its key, version, writer and the writing transaction's
//! whole write set are inside it, so `cairn verify` can check the database
//! against the logs of acknowledged commits without trusting anything else.
//!
//! # What a run does
//!
//! 1. Opens the directory with `Db::open_or_create` (recovering it if a
//!    previous run was killed) — or, with `--connect URL`, connects to a
//!    `cairn serve` as a page-server client (the same storage transactions,
//!    run over the client backend) —, creates the groups `torture` and
//!    `torture-runs` if missing. A lost server ends the run with an error
//!    (what it acknowledged stands).
//! 2. Registers: picks a 32-bit run nonce and registers it in
//!    `torture-runs` (see *Key spaces* below), then adopts the key spaces
//!    it may take over, and scans the group: the objects of its key spaces
//!    are read whole and become its pool; the other live objects are another
//!    run's, remembered by key and version to be read later.
//! 3. Runs `threads` workers until the time is up. Each transaction does 1
//!    to 6 steps on distinct objects of its pool: create (keys `nonce << 32
//!    | thread << 24 | counter`, sometimes near another object of the
//!    transaction), replace (any new size: small ↔ large), grow
//!    (`write_range` over the old length, then `append`), shrink
//!    (`truncate`, then `write_range`), rewrite in pieces (`write_range`s in
//!    random order), delete (with a tombstone in the same transaction).
//!    Sizes run from 144 bytes to 320 KiB, crossing the large-object
//!    threshold both ways. About 10% of transactions end with `abort()`;
//!    half of those are then checked to have left nothing behind. A quarter
//!    of transactions first read an object of another run (below).
//! 4. Before changing an object a worker reads its header back and checks
//!    the version and length it expects (a lost update shows up at once).
//! 5. `Deadlock` and `LockTimeout` abort the transaction and start a new
//!    one; they are counted, never printed to stdout. The start (group
//!    creation, registration, adoption, the scan) retries them too.
//! 6. After each `commit()` returns Ok, exactly one line
//!    `committed <txid> <digest>` goes to stdout, flushed at once. Nothing
//!    else is written to stdout; the seed and the summary go to stderr.
//! 7. When the time is up and every worker ended without error, marks its
//!    key spaces *ended* in `torture-runs`, handing them to later runs.
//!
//! Objects in use by one worker's open transaction are marked busy in the
//! shared map, so no two workers plan changes to the same object; workers
//! still collide on pages, which is what produces deadlocks.
//!
//! # Key spaces: many processes at once
//!
//! The busy map covers one process's threads only. So that several
//! processes can torture one server at once, each process **owns key
//! spaces** — its own nonce, and the nonces it adopted — and creates,
//! changes and deletes only objects whose key lies in a space it owns. An
//! object of any other space is another process's (running, ended or
//! killed): a worker reads it now and then, and checks that it is a whole
//! record of the key it held and that its version never goes back below
//! one this process saw before (a stale page in a client cache shows up
//! here); it never changes it. It may be changed, deleted, or its OID reused
//! under the reader's feet: all of that is legitimate and only forgets it.
//! The self-checks on owned objects stay as strict as with one process:
//! nobody else may touch them.
//!
//! **Nonces are unique by construction.** The nonce is drawn from the
//! operating system's randomness (`/dev/urandom` and std's OS-seeded hash
//! keys, not the seed or the clock: two processes with one `--seed` started
//! together get different nonces), then registered: one transaction scans
//! `torture-runs` and creates the run record `(nonce, owner = nonce,
//! random token, running)` only if no record has that nonce; a second
//! transaction, after that commit, scans again and finds exactly one record
//! with the nonce, its own token (otherwise it withdraws and draws again);
//! the scan of `torture` then finds no record of that nonce (one left by a
//! run older than the registry would be the only way; again withdraw and
//! draw). The scans lock the group (S), so check and create are atomic,
//! and even without that, of two registrations of one nonce the later to
//! commit sees the earlier in its second scan: two running processes can
//! never share a nonce.
//!
//! **Adoption.** A run registered `running` may be running or may have been
//! killed, and over the network nothing can tell which: so a run adopts
//! (takes over) only key spaces it *knows* are free —
//!
//! - those marked *ended*: their owner reached its end and wrote so after
//!   its last commit. Adopting is one transaction that reads every record
//!   of the nonce, checks they are all ended and rewrites them `owner = me,
//!   running`; two runs adopting at once conflict on the records' locks,
//!   one retries and sees them taken. So sequential runs still build on
//!   each other's data, and a space has one owner at a time.
//! - without `--connect`, everything: the directory is open by this process
//!   alone (the engine locks it; a server holds that lock too), so no other
//!   torture process can be running on it. Killed runs' spaces and those of
//!   runs older than the registry (registered now, owned by this run) are
//!   taken over as well.
//! - with `--connect --adopt`, everything too, on the user's word that no
//!   other torture process is running against that server when this one
//!   starts: e.g. the first client after a killed server was restarted
//!   (every client of the killed server died with it). Others may be
//!   started once it printed its `torture: nonce` line (its adoption is
//!   done by then). A run whose space was taken from under it notices at
//!   its end and fails.
//!
//! Without `--adopt`, the spaces of clients killed while their server kept
//! running stay as they are (read by later runs, never changed) until a
//! run with `--adopt` or without `--connect` takes them over; a client that
//! stops on an error keeps its space too, as evidence.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
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
    decode, decode_run, encode, encode_run, format_commit_line, object_len_min, peek_header, splitmix64, DigestEntry,
    Entry, Kind, RunRecord, RunState, DELETED, HEADER_SIZE,
};

/// The group torture writes to and verify reads.
pub const GROUP: &str = "torture";
/// The group of run records: who owns which key space (see the module docs).
pub const RUNS_GROUP: &str = "torture-runs";
/// Attempts of each step of a run's start before a deadlock or lock
/// timeout there ends the run.
const START_ATTEMPTS: u32 = 200;
/// Objects read per transaction by the scan at the start.
const SCAN_BATCH: usize = 32;
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
    /// Adopt every other run's key space, not only the ended ones: the
    /// caller promises no other torture process is running on the database
    /// (always so without `connect`; see the module docs).
    pub adopt: bool,
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
    /// The run's nonce (its own key space).
    pub nonce: u32,
    /// The key spaces it adopted (other runs' nonces), in order.
    pub adopted: Vec<u32>,
    /// Records of its key spaces found at start (objects, tombstones),
    /// and records of any run that were not whole.
    pub found: (u64, u64, u64),
    /// Live objects of other runs found at start (read, never changed).
    pub foreign: u64,
    /// Reads of other runs' objects, checked.
    pub foreign_reads: u64,
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
        self.foreign_reads += o.foreign_reads;
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

/// Live objects of key spaces this run does not own: read and checked,
/// never changed. Each with the highest version this process has seen.
#[derive(Default)]
struct Foreign {
    seen: HashMap<u64, (Oid, u64)>,
    keys: Vec<u64>,
}

impl Foreign {
    fn insert(&mut self, key: u64, oid: Oid, version: u64) {
        if self.seen.insert(key, (oid, version)).is_none() {
            self.keys.push(key);
        }
    }

    fn remove(&mut self, key: u64) {
        if self.seen.remove(&key).is_some() {
            if let Some(i) = self.keys.iter().position(|k| *k == key) {
                self.keys.swap_remove(i);
            }
        }
    }

    /// A random object: its key, OID and the version seen so far.
    fn pick(&self, rng: &mut Rng) -> Option<(u64, Oid, u64)> {
        if self.keys.is_empty() {
            return None;
        }
        let key = self.keys[rng.below(self.keys.len() as u64) as usize];
        let (oid, version) = self.seen[&key];
        Some((key, oid, version))
    }

    fn saw(&mut self, key: u64, version: u64) {
        if let Some(e) = self.seen.get_mut(&key) {
            e.1 = e.1.max(version);
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
    foreign: &'a Mutex<Foreign>,
    rng: Rng,
    sizes: Sizes,
    key_base: u64,
    counter: u64,
    stats: Summary,
}

fn lock_pool<T>(p: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
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

    /// Reads a random object of another run and checks it: a whole record
    /// of the key it held, at a version no lower than this process saw.
    /// Its owner may have changed or deleted it (and its OID may name a
    /// newer object): that only updates or forgets what is known of it.
    fn read_foreign(&mut self, txn: &mut Txn) -> Result<(), Fail> {
        let Some((key, oid, least)) = lock_pool(self.foreign).pick(&mut self.rng) else {
            return Ok(());
        };
        let bytes = match txn.read(oid) {
            Ok(b) => b,
            Err(Error::NotFound { .. }) => {
                lock_pool(self.foreign).remove(key);
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        };
        self.stats.foreign_reads += 1;
        let r = match decode(&bytes) {
            Ok(r) => r,
            // A record of that key, not whole: a torn or mixed write.
            Err(d) if peek_header(&bytes).is_some_and(|(k, _)| k == key) => {
                return Err(Fail::Fatal(anyhow!(
                    "check of another run's object failed in {}: object {oid} holds key {key:016x} \
                     but is not a whole record: {d}",
                    txn.id()
                )))
            }
            // Something else lives at that OID now.
            Err(_) => {
                lock_pool(self.foreign).remove(key);
                return Ok(());
            }
        };
        if r.key != key {
            lock_pool(self.foreign).remove(key);
            return Ok(());
        }
        if r.version < least {
            return Err(Fail::Fatal(anyhow!(
                "check of another run's object failed in {}: object {oid} (key {key:016x}) reads v{} \
                 (txn {}), but this process already saw v{least}",
                txn.id(),
                r.version,
                r.txid
            )));
        }
        let mut foreign = lock_pool(self.foreign);
        match r.kind {
            Kind::Object => foreign.saw(key, r.version),
            // Deleted, and the tombstone took the slot.
            Kind::Tombstone => foreign.remove(key),
        }
        Ok(())
    }

    /// Runs the steps in one transaction; commits (returning the digest and
    /// the new OIDs) or, if `abort`, aborts.
    fn attempt(&mut self, steps: &mut [Step], abort: bool) -> Result<Option<(u64, Vec<DigestEntry>)>, Fail> {
        let mut txn = self.db.begin()?;
        let txid = txn.id().0;
        if self.rng.chance(25) {
            self.read_foreign(&mut txn)?;
        }
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

/// Runs `f` until it does not end in a deadlock or lock timeout (at most
/// [`START_ATTEMPTS`] times, pausing a little longer each time).
fn retrying<T>(backoff: &mut Rng, what: &str, mut f: impl FnMut() -> Result<T, Fail>) -> anyhow::Result<T> {
    let mut attempt = 0u32;
    loop {
        attempt += 1;
        match f() {
            Ok(v) => return Ok(v),
            Err(Fail::Fatal(e)) => return Err(e.context(what.to_string())),
            Err(_) if attempt < START_ATTEMPTS => {
                let ms = 1 + backoff.below(5 * u64::from(attempt.min(20)));
                std::thread::sleep(Duration::from_millis(ms));
            }
            Err(_) => bail!("{what}: still deadlocked or timed out after {START_ATTEMPTS} attempts"),
        }
    }
}

fn open_group(db: &Target, name: &str) -> Result<GroupId, Fail> {
    match db {
        Target::Local(db) => match db.group(name) {
            Ok(g) => Ok(g),
            Err(Error::GroupNotFound(_)) => match db.create_group(name) {
                Ok(g) => Ok(g),
                Err(Error::GroupExists(_)) => Ok(db.group(name)?),
                Err(e) => Err(e.into()),
            },
            Err(e) => Err(e.into()),
        },
        Target::Remote(r) => Ok(r.group(name, true)?),
    }
}

/// 64 random bits from the operating system: `/dev/urandom`, mixed with
/// std's hash keys (which std draws from the OS), the clock and the pid.
fn os_random() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    let mut b = [0u8; 8];
    let dev = std::fs::File::open("/dev/urandom").and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b));
    h.finish() ^ if dev.is_ok() { u64::from_le_bytes(b) } else { 0 }
}

/// Every run record.
fn read_runs(txn: &mut Txn, runs: GroupId) -> Result<Vec<(Oid, RunRecord)>, Fail> {
    let mut out = Vec::new();
    for oid in txn.scan_all(runs)? {
        let bytes = txn.read(oid)?;
        let r = decode_run(&bytes).map_err(|d| Fail::Fatal(anyhow!("run record {oid} is damaged: {d}")))?;
        out.push((oid, r));
    }
    Ok(out)
}

/// Registers a fresh nonce: one no run record has (nor `avoid`), drawn
/// from `pick`, created in the transaction that checked it is free.
fn register(db: &Target, runs: GroupId, token: u64, avoid: &HashSet<u32>, pick: &mut Rng) -> Result<u32, Fail> {
    let mut txn = db.begin()?;
    let used: HashSet<u32> = read_runs(&mut txn, runs)?.iter().map(|(_, r)| r.nonce).collect();
    let nonce = loop {
        let n = (pick.next_u64() >> 32) as u32;
        if n != 0 && !used.contains(&n) && !avoid.contains(&n) {
            break n;
        }
    };
    let record = RunRecord {
        nonce,
        owner: nonce,
        token,
        state: RunState::Running,
    };
    txn.create(runs, &encode_run(&record))?;
    txn.commit()?;
    Ok(nonce)
}

/// After registering: checks the nonce is this run's alone (`None` if
/// not) and adopts the key spaces it may (every other one if `all`, else
/// those whose records are all ended). Returns the adopted nonces and
/// every nonce registered.
fn claim(db: &Target, runs: GroupId, nonce: u32, token: u64, all: bool) -> Result<Option<ClaimedRuns>, Fail> {
    let mut txn = db.begin()?;
    let records = read_runs(&mut txn, runs)?;
    let mine = records.iter().filter(|(_, r)| r.nonce == nonce).collect::<Vec<_>>();
    if mine.len() != 1 || mine[0].1.token != token {
        txn.commit()?;
        return Ok(None);
    }
    let mut by_nonce: BTreeMap<u32, Vec<(Oid, RunRecord)>> = BTreeMap::new();
    for (oid, r) in records {
        by_nonce.entry(r.nonce).or_default().push((oid, r));
    }
    let mut adopted = Vec::new();
    for (&other, records) in &by_nonce {
        if other == nonce || !(all || records.iter().all(|(_, r)| r.state == RunState::Ended)) {
            continue;
        }
        for (oid, r) in records {
            let taken = RunRecord {
                owner: nonce,
                state: RunState::Running,
                ..*r
            };
            txn.update(*oid, &encode_run(&taken))?;
        }
        adopted.push(other);
    }
    txn.commit()?;
    Ok(Some(ClaimedRuns {
        adopted,
        registered: by_nonce.into_keys().collect(),
    }))
}

/// What [`claim`] adopted and saw.
struct ClaimedRuns {
    adopted: Vec<u32>,
    registered: BTreeSet<u32>,
}

/// Gives a registration up (its nonce turned out to be in use): deletes the
/// record and hands the adopted key spaces on, ended (nothing was changed).
fn withdraw(db: &Target, runs: GroupId, nonce: u32, token: u64, adopted: &[u32]) -> Result<(), Fail> {
    let mut txn = db.begin()?;
    for (oid, r) in read_runs(&mut txn, runs)? {
        if r.nonce == nonce && r.token == token {
            txn.delete(oid)?;
        } else if adopted.contains(&r.nonce) && r.owner == nonce {
            let ended = RunRecord {
                state: RunState::Ended,
                ..r
            };
            txn.update(oid, &encode_run(&ended))?;
        }
    }
    txn.commit()?;
    Ok(())
}

/// With `all` adoption: registers the nonces found in the group that have no
/// run record (runs older than the registry) as owned by this run. Returns
/// those it registered; one registered meanwhile by somebody else stays
/// theirs.
fn register_unregistered(db: &Target, runs: GroupId, nonce: u32, found: &BTreeSet<u32>) -> Result<Vec<u32>, Fail> {
    let mut txn = db.begin()?;
    let registered: HashSet<u32> = read_runs(&mut txn, runs)?.iter().map(|(_, r)| r.nonce).collect();
    let mut taken = Vec::new();
    for &n in found {
        if n != nonce && !registered.contains(&n) {
            let record = RunRecord {
                nonce: n,
                owner: nonce,
                token: os_random(),
                state: RunState::Running,
            };
            txn.create(runs, &encode_run(&record))?;
            taken.push(n);
        }
    }
    txn.commit()?;
    Ok(taken)
}

/// At a clean end: marks every key space this run owns ended, so a later
/// run may adopt it. Fails if one was taken from under it.
fn end_runs(db: &Target, runs: GroupId, nonce: u32, owned: &BTreeSet<u32>) -> Result<(), Fail> {
    let mut txn = db.begin()?;
    for (oid, r) in read_runs(&mut txn, runs)? {
        if !owned.contains(&r.nonce) {
            continue;
        }
        if r.owner != nonce {
            return Err(Fail::Fatal(anyhow!(
                "the key space {:08x} this run owned was adopted by run {:08x} while this run was running \
                 (was --adopt given while other torture processes ran?)",
                r.nonce,
                r.owner
            )));
        }
        let ended = RunRecord {
            state: RunState::Ended,
            ..r
        };
        txn.update(oid, &encode_run(&ended))?;
    }
    txn.commit()?;
    Ok(())
}

/// What the scan at the start found at one OID.
enum Seen {
    /// A whole record of an owned key space.
    Owned(Oid, crate::format::Record),
    /// Another key space's record, from its header: key, version, and
    /// whether it is a tombstone.
    Other(Oid, u64, u64, bool),
    /// Not a whole record (reported on stderr, counted, left alone).
    Damaged,
}

/// Reads one object of the group: whole if `owned` says its key space is
/// this run's, else its header only.
fn scan_one(txn: &mut Txn, oid: Oid, owned: &dyn Fn(u32) -> bool) -> Result<Seen, Error> {
    let len = txn.len(oid)?;
    let mut h = [0u8; HEADER_SIZE];
    if len >= HEADER_SIZE as u64 {
        txn.read_range(oid, 0, &mut h)?;
    }
    let Some((key, version)) = peek_header(&h) else {
        eprintln!("torture: object {oid} is not a record ({len} bytes, no magic); leaving it alone");
        return Ok(Seen::Damaged);
    };
    if !owned((key >> 32) as u32) {
        return Ok(Seen::Other(oid, key, version, h[8] == 2));
    }
    let bytes = txn.read(oid)?;
    match decode(&bytes) {
        Ok(r) => Ok(Seen::Owned(oid, r)),
        Err(d) => {
            // Left alone for `cairn verify` to report.
            eprintln!("torture: object {oid} is not a whole record ({d}); leaving it alone");
            Ok(Seen::Damaged)
        }
    }
}

/// Scans the group: every object, read in small transactions (another
/// process may be writing meanwhile; owned key spaces are this run's alone,
/// and another's objects are only remembered).
fn scan_group(
    db: &Target,
    group: GroupId,
    owned: &dyn Fn(u32) -> bool,
    backoff: &mut Rng,
) -> anyhow::Result<Vec<Seen>> {
    let oids = retrying(backoff, "listing the torture group", || {
        let mut txn = db.begin()?;
        let oids = txn.scan_all(group)?;
        txn.commit()?;
        Ok(oids)
    })?;
    let mut seen = Vec::with_capacity(oids.len());
    for batch in oids.chunks(SCAN_BATCH) {
        let part = retrying(backoff, "reading the torture group", || {
            let mut txn = db.begin()?;
            let mut part = Vec::with_capacity(batch.len());
            for &oid in batch {
                match scan_one(&mut txn, oid, owned) {
                    Ok(s) => part.push(s),
                    // Deleted by its owner since the listing.
                    Err(Error::NotFound { .. }) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            txn.commit()?;
            Ok(part)
        })?;
        seen.extend(part);
    }
    Ok(seen)
}

/// What a run starts with.
struct Start {
    nonce: u32,
    /// The key spaces it changes: its nonce and the adopted ones.
    owned: BTreeSet<u32>,
    pool: Pool,
    foreign: Foreign,
}

/// Registers the run, adopts what it may, and scans the group (see the
/// module docs).
fn start(db: &Target, group: GroupId, runs: GroupId, all: bool, summary: &mut Summary) -> anyhow::Result<Start> {
    let token = os_random();
    let mut pick = Rng::new(token);
    let mut backoff = Rng::new(splitmix64(token));
    let mut avoid = HashSet::new();
    for _ in 0..8 {
        let nonce = retrying(&mut backoff, "registering the run", || {
            register(db, runs, token, &avoid, &mut pick)
        })?;
        let Some(claimed) = retrying(&mut backoff, "adopting key spaces", || {
            claim(db, runs, nonce, token, all)
        })?
        else {
            eprintln!("torture: nonce {nonce:08x} is registered twice; drawing another");
            retrying(&mut backoff, "withdrawing", || withdraw(db, runs, nonce, token, &[]))?;
            avoid.insert(nonce);
            continue;
        };
        let mut adopted = claimed.adopted;
        let owns = |n: u32| n == nonce || all || adopted.contains(&n);
        let seen = scan_group(db, group, &owns, &mut backoff)?;
        let nonce_of = |s: &Seen| match s {
            Seen::Owned(_, r) => Some((r.key >> 32) as u32),
            Seen::Other(_, key, ..) => Some((key >> 32) as u32),
            Seen::Damaged => None,
        };
        if seen.iter().any(|s| nonce_of(s) == Some(nonce)) {
            eprintln!("torture: nonce {nonce:08x} is used by an unregistered run; drawing another");
            retrying(&mut backoff, "withdrawing", || {
                withdraw(db, runs, nonce, token, &adopted)
            })?;
            avoid.insert(nonce);
            continue;
        }
        if all {
            let found: BTreeSet<u32> = seen
                .iter()
                .filter_map(nonce_of)
                .filter(|n| !claimed.registered.contains(n))
                .collect();
            if !found.is_empty() {
                let taken = retrying(&mut backoff, "registering older runs", || {
                    register_unregistered(db, runs, nonce, &found)
                })?;
                adopted.extend(taken);
                adopted.sort_unstable();
            }
        }
        let mut owned: BTreeSet<u32> = adopted.iter().copied().collect();
        owned.insert(nonce);
        let mut pool = Pool::default();
        let mut foreign = Foreign::default();
        for s in seen {
            match s {
                Seen::Owned(oid, r) if owned.contains(&((r.key >> 32) as u32)) => {
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
                Seen::Owned(oid, r) => {
                    if r.kind == Kind::Object {
                        foreign.insert(r.key, oid, r.version);
                    }
                }
                Seen::Other(oid, key, version, tombstone) => {
                    if !tombstone {
                        foreign.insert(key, oid, version);
                    }
                }
                Seen::Damaged => summary.found.2 += 1,
            }
        }
        summary.nonce = nonce;
        summary.adopted = adopted;
        summary.foreign = foreign.keys.len() as u64;
        return Ok(Start {
            nonce,
            owned,
            pool,
            foreign,
        });
    }
    bail!("could not register a nonce of its own")
}

/// Runs torture as described in the module docs.
pub fn run(opts: &Options) -> anyhow::Result<Summary> {
    if !(1..=255).contains(&opts.threads) {
        bail!("--threads must be 1 to 255");
    }
    let db = open_target(opts)?;
    let mut backoff = Rng::new(splitmix64(opts.seed ^ os_random()));
    let group = retrying(&mut backoff, "opening the torture group", || open_group(&db, GROUP))?;
    let runs = retrying(&mut backoff, "opening the run records' group", || {
        open_group(&db, RUNS_GROUP)
    })?;
    let mut summary = Summary::default();
    // Without --connect this process has the directory to itself.
    let all = opts.adopt || opts.connect.is_none();
    let started = start(&db, group, runs, all, &mut summary)?;
    announce(started.nonce, &summary, opts);
    let nonce = started.nonce;
    let owned = started.owned.clone();
    summary.add(&run_workers(&db, group, started, opts)?);
    retrying(&mut backoff, "marking the run ended", || {
        end_runs(&db, runs, nonce, &owned)
    })?;
    let (checkpoints, spilled) = match db {
        Target::Local(db) => {
            let stats = db.stats();
            db.close()?;
            (stats.checkpoints, stats.pages_spilled)
        }
        Target::Remote(_) => (0, 0),
    };
    report(&summary, checkpoints, spilled);
    Ok(summary)
}

/// The database in `opts.dir`, or the server `opts.connect` names.
fn open_target(opts: &Options) -> anyhow::Result<Target> {
    Ok(match &opts.connect {
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
    })
}

/// The start's line on stderr: the nonce, what was adopted and found.
fn announce(nonce: u32, summary: &Summary, opts: &Options) {
    let adopted: Vec<String> = summary.adopted.iter().map(|n| format!("{n:08x}")).collect();
    eprintln!(
        "torture: nonce {nonce:08x}, adopted {} runs: {}",
        adopted.len(),
        if adopted.is_empty() {
            "none".to_string()
        } else {
            adopted.join(" ")
        }
    );
    eprintln!(
        "torture: {} objects and {} tombstones of its own, {} objects of other runs to read, {} not whole; \
         {} threads for {} s",
        summary.found.0, summary.found.1, summary.foreign, summary.found.2, opts.threads, opts.seconds
    );
}

/// Runs the worker threads until the deadline (or the first error) and
/// adds up what they did.
fn run_workers(db: &Target, group: GroupId, started: Start, opts: &Options) -> anyhow::Result<Summary> {
    let page = db.page_size();
    let sizes = Sizes {
        min: object_len_min(STEPS_MAX),
        small_max: small_max(page as usize) as u64,
        page,
    };
    let nonce = started.nonce;
    let pool = Mutex::new(started.pool);
    let foreign = Mutex::new(started.foreign);
    let stop = AtomicBool::new(false);
    let deadline = Instant::now() + Duration::from_secs_f64(opts.seconds.max(0.0));
    let results: Vec<anyhow::Result<Summary>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..opts.threads)
            .map(|t| {
                let mut w = Worker {
                    db,
                    group,
                    pool: &pool,
                    foreign: &foreign,
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
    let mut total = Summary::default();
    for r in results {
        total.add(&r?);
    }
    Ok(total)
}

/// The summary line on stderr.
fn report(summary: &Summary, checkpoints: u64, spilled: u64) {
    eprintln!(
        "torture: {} commits, {} aborts ({} checked), {} reads of other runs' objects, {} deadlocks, \
         {} lock timeouts; steps: {} create, {} replace, {} grow, {} shrink, {} rewrite, {} delete; \
         {} checkpoints, {} pages spilled",
        summary.commits,
        summary.aborts,
        summary.aborts_checked,
        summary.foreign_reads,
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
