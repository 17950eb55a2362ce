//! The Cairn systems' common part: OO1's typed model and its operations on
//! a [`Database`], the same code whether the database is embedded
//! (`cairn-embedded`, [`super::cairn_embedded`]) or behind `cairn serve`
//! (`cairn-page`, [`super::cairn_page`]). A [`Deployment`] says where the
//! database lives: how it is created, closed durably and opened cold. The
//! operations themselves are [`CairnOn`]'s, on any open [`Database`], so
//! `--clients` runs the same code on databases it opened itself (a session
//! per client, or one embedded database shared by every client thread).
//!
//! Schema: one object per part, holding its outgoing connections (with their
//! type and length) as `Ref`s and its incoming ones as a `List<Ref<Part>>`,
//! so both directions are followed by reference, never by a scan; a B+-tree
//! [`Index`] on `id` for lookups. Parts are created in id order in one group,
//! so the paper's locality by id becomes locality on pages.
//!
//! - **lookup**: `find` on the index, then `view` on the reference: the
//!   part read in place in its page image, no decode (`cairn::view`).
//! - **traversal / reverse**: the start part through the index, then `view`
//!   on the `Ref`s read in place from each part.
//! - **insert**: one transaction: each new part is `create`d (the index is
//!   updated by `create`), its targets found through the index (those
//!   created earlier in the batch: by the reference `create_in` gave) and their
//!   `from` lists updated; `commit` makes it durable.
//!
//! Each run is one transaction.

use cairn::{Database, Index, List, Options, Persistent, Ref, Transaction};

use crate::oo1::generate::{Check, Graph, PartSpec};
use crate::oo1::system::{Counters, Error, Result, System, Visits};

/// A connection, stored in the part it comes from.
#[derive(Persistent, Debug, Clone)]
pub struct Connection {
    /// The part connected to.
    pub to: Ref<Part>,
    /// `"conn-type0"` .. `"conn-type9"`.
    pub kind: String,
    /// In `[0, 99999]`.
    pub length: i32,
}

/// An OO1 part.
#[derive(Persistent, Debug, Clone)]
pub struct Part {
    /// The OO1 id, indexed.
    #[cairn(index)]
    pub id: u32,
    /// `"part-type0"` .. `"part-type9"`.
    pub kind: String,
    /// Position.
    pub x: i32,
    /// Position.
    pub y: i32,
    /// Build date, seconds since the Unix epoch.
    pub build: i64,
    /// Connections from this part.
    pub to: Vec<Connection>,
    /// The parts connected to this one (once per connection).
    pub from: List<Ref<Part>>,
}

const BY_ID: Index<u32, Part> = Index::on("id");
const GROUP: &str = "parts";

/// Where a Cairn system's database lives, and how it is created, closed and
/// opened cold; everything else is [`Cairn`]'s, the same for every
/// deployment.
pub trait Deployment {
    /// The system's name in reports.
    const NAME: &'static str;

    /// Parts the build creates (pass 1) or rewrites (pass 2) in one
    /// transaction.
    const BUILD_TXN_PARTS: usize;

    /// Creates a new, empty database (replacing any earlier one) and opens it.
    fn create(&mut self) -> Result<Database>;

    /// Closes `db` durably: a later [`Deployment::open_cold`] sees everything.
    fn close(&mut self, db: Database) -> Result<()>;

    /// Opens the closed database cold: empty caches, its files evicted from
    /// the operating system's page cache.
    fn open_cold(&mut self) -> Result<Database>;

    /// Bytes the database occupies on disk (called with it closed).
    fn size_on_disk_bytes(&self) -> Option<u64>;
}

/// The options every Cairn system opens its database with: room for the
/// large database in the object cache and the page buffer (the client's,
/// for a server client), and no background checkpoints in the middle of a
/// timed run (embedded; a server runs its own).
pub fn options() -> Options {
    let mut o = Options {
        cache_bytes: 1 << 30,
        client_buffer_pages: PAGE_FRAMES,
        // Remote deployments name their architecture (the default, the
        // adaptive client, is a system of its own).
        arch: cairn::Arch::Page,
        ..Options::default()
    };
    // Room for the large database's pages (about 40 MB) in the pool.
    o.storage.volume.buffer_frames = PAGE_FRAMES;
    o.storage.txn_memory_bytes = 256 << 20;
    o.storage.background = false;
    o
}

/// Page frames of the embedded buffer pool, and pages of a client's buffer.
pub const PAGE_FRAMES: usize = 32_768;

/// OO1 on Cairn's typed API, wherever `D` puts the database.
pub struct Cairn<D: Deployment> {
    deployment: D,
    db: Option<Database>,
}

impl<D: Deployment> Cairn<D> {
    /// A system over `deployment`, with no database open yet.
    pub fn new(deployment: D) -> Cairn<D> {
        Cairn { deployment, db: None }
    }

    fn db(&self) -> Result<&Database> {
        self.db
            .as_ref()
            .ok_or_else(|| wrong(D::NAME, "the database is not open"))
    }

    /// Drops every page and object the client caches (a remote client's
    /// callback rights with them), so the next operation starts cold on
    /// this side while the server stays warm.
    pub fn clear_caches(&mut self) -> Result<()> {
        Ok(self.db()?.clear_caches()?)
    }
}

fn wrong(system: &str, reason: impl Into<String>) -> Error {
    Error::Wrong {
        system: system.into(),
        reason: reason.into(),
    }
}

fn find(system: &str, tx: &mut Transaction<'_>, id: u32) -> Result<Ref<Part>> {
    tx.find_one(&BY_ID, &id)?
        .ok_or_else(|| wrong(system, format!("no part {id} in the index")))
}

/// Fetches, before a traversal from `r` of `hops` hops visits anything,
/// the pages of its parts a level at a time (`reverse`: the `from` lists'),
/// as a careful user of a client-server database would
/// ([`Transaction::prefetch`]): a page or file client then asks for each
/// level's pages not cached in one pipelined request, and an object client
/// for its objects, not one round trip per reference followed. The visits
/// themselves stay depth-first, after it. A level past the first few that
/// was all cached (no round trip) ends it: the traversal is likely hot,
/// and reading its parts twice would only cost.
fn prefetch_levels(db: &Database, tx: &mut Transaction<'_>, r: &Ref<Part>, hops: u32, reverse: bool) -> Result<()> {
    let trips = || db.remote_stats().map_or(0, |s| s.round_trips);
    let mut level = vec![r.clone()];
    for _ in 0..hops {
        let before = trips();
        tx.prefetch(&level)?;
        if level.len() >= 27 && trips() == before {
            return Ok(());
        }
        let mut next = Vec::with_capacity(level.len() * 3);
        for r in &level {
            let o = tx.view(r)?;
            let p = o.get();
            if reverse {
                next.extend(p.from());
            } else {
                next.extend(p.to().into_iter().map(|c| c.to()));
            }
        }
        next.sort_unstable_by_key(|r| r.oid());
        next.dedup_by_key(|r| r.oid());
        level = next;
    }
    tx.prefetch(&level)?;
    Ok(())
}

fn forward(tx: &mut Transaction<'_>, r: &Ref<Part>, hops: u32, v: &mut Visits) -> Result<()> {
    let o = tx.view(r)?;
    let p = o.get();
    v.visit(p.x(), p.y(), p.kind());
    if hops > 0 {
        for c in p.to() {
            forward(tx, &c.to(), hops - 1, v)?;
        }
    }
    Ok(())
}

fn backward(tx: &mut Transaction<'_>, r: &Ref<Part>, hops: u32, v: &mut Visits) -> Result<()> {
    let o = tx.view(r)?;
    let p = o.get();
    v.visit(p.x(), p.y(), p.kind());
    if hops > 0 {
        for f in p.from() {
            backward(tx, &f, hops - 1, v)?;
        }
    }
    Ok(())
}

/// A reference to nothing, the same size as a real one: records are created
/// with these in place and rewritten in place once every OID is known.
fn placeholder() -> Ref<Part> {
    Ref::from_oid(cairn::storage::Oid {
        page: cairn::storage::PageId(0),
        slot: cairn::storage::SlotIdx(0),
        uniq: cairn::storage::Uniq(0),
    })
}

/// Creates the parts of `graph` in id order in one group, with their
/// references both ways, `txn_parts` parts to a transaction.
fn build(db: &Database, graph: &Graph, txn_parts: usize) -> Result<()> {
    let reverse = graph.reverse();
    let batches = || graph.parts.chunks(txn_parts).zip(reverse.chunks(txn_parts));
    // Pass 1: every part in id order, with placeholder references of the
    // final count, so pass 2 rewrites each record in place at its size.
    let mut refs = Vec::with_capacity(graph.parts.len());
    for (parts, reverse) in batches() {
        let mut tx = db.begin()?;
        for (p, from) in parts.iter().zip(reverse) {
            let to =
                p.to.iter()
                    .map(|c| Connection {
                        to: placeholder(),
                        kind: c.kind_str().to_string(),
                        length: c.length,
                    })
                    .collect();
            let from = List(vec![placeholder(); from.len()]);
            refs.push(tx.create_in(GROUP, part_value(p, to, from))?);
        }
        tx.commit()?;
    }
    // Pass 2: the real references, both ways.
    for (parts, reverse) in batches() {
        let mut tx = db.begin()?;
        for (p, from) in parts.iter().zip(reverse) {
            let to =
                p.to.iter()
                    .map(|c| Connection {
                        to: refs[c.to as usize - 1].clone(),
                        kind: c.kind_str().to_string(),
                        length: c.length,
                    })
                    .collect();
            let from = from.iter().map(|&f| refs[f as usize - 1].clone()).collect();
            tx.put(&refs[p.id as usize - 1], part_value(p, to, from))?;
        }
        tx.commit()?;
    }
    Ok(())
}

fn part_value(p: &PartSpec, to: Vec<Connection>, from: List<Ref<Part>>) -> Part {
    Part {
        id: p.id,
        kind: p.kind_str().to_string(),
        x: p.x,
        y: p.y,
        build: p.build,
        to,
        from,
    }
}

/// OO1's operations on a [`Database`] opened elsewhere — the very code
/// every Cairn system runs ([`Cairn`] runs them through this): one thread of
/// many sharing an embedded database, or a client session opened by its
/// caller (`--clients`). It neither creates, opens nor closes a database.
#[derive(Clone, Copy)]
pub struct CairnOn<'a> {
    name: &'static str,
    db: &'a Database,
    /// Lookups and traversals run in read-only transactions at a snapshot
    /// ([`CairnOn::reading_at_snapshots`]).
    read_only: bool,
}

impl<'a> CairnOn<'a> {
    /// The operations on `db`, reported (and named in errors) as `name`.
    /// The caller has registered [`Part`] (`db.register::<Part>()`).
    pub fn new(name: &'static str, db: &'a Database) -> CairnOn<'a> {
        CairnOn {
            name,
            db,
            read_only: false,
        }
    }

    /// The same, running lookups and traversals in read-only transactions
    /// ([`Database::begin_read_only`]: a snapshot, no locks), as a user
    /// browsing would.
    pub fn reading_at_snapshots(mut self) -> CairnOn<'a> {
        self.read_only = true;
        self
    }

    /// A transaction for a read operation.
    fn begin_read(&self) -> Result<cairn::Transaction<'a>> {
        Ok(if self.read_only {
            self.db.begin_read_only()?
        } else {
            self.db.begin()?
        })
    }

    /// Whether traversals say ahead which parts they will read
    /// ([`Transaction::prefetch`]): on a client of a server, where it
    /// saves round trips; embedded it would only read the parts twice.
    fn prefetches(&self) -> bool {
        self.db.remote_stats().is_some()
    }

    /// The database.
    pub fn db(&self) -> &'a Database {
        self.db
    }

    /// [`System::lookup`].
    pub fn lookup(&self, ids: &[u32]) -> Result<Visits> {
        let mut tx = self.begin_read()?;
        let mut v = Visits::default();
        for &id in ids {
            let r = find(self.name, &mut tx, id)?;
            let o = tx.view(&r)?;
            let p = o.get();
            v.visit(p.x(), p.y(), p.kind());
        }
        tx.commit()?;
        Ok(v)
    }

    /// [`System::traversal`].
    pub fn traversal(&self, start: u32, hops: u32) -> Result<Visits> {
        let mut tx = self.begin_read()?;
        let mut v = Visits::default();
        let r = find(self.name, &mut tx, start)?;
        if self.prefetches() {
            prefetch_levels(self.db, &mut tx, &r, hops, false)?;
        }
        forward(&mut tx, &r, hops, &mut v)?;
        tx.commit()?;
        Ok(v)
    }

    /// [`System::reverse_traversal`].
    pub fn reverse_traversal(&self, start: u32, hops: u32) -> Result<Visits> {
        let mut tx = self.begin_read()?;
        let mut v = Visits::default();
        let r = find(self.name, &mut tx, start)?;
        if self.prefetches() {
            prefetch_levels(self.db, &mut tx, &r, hops, true)?;
        }
        backward(&mut tx, &r, hops, &mut v)?;
        tx.commit()?;
        Ok(v)
    }

    /// [`System::insert`].
    pub fn insert(&self, parts: &[PartSpec]) -> Result<Visits> {
        let db = self.db;
        let mut tx = db.begin()?;
        let mut v = Visits::default();
        // The parts the new ones connect to that exist already get the new
        // parts in their `from` lists: looked up once each, and appended to
        // (appends that commute where objects are locked; elsewhere they
        // are locked for update here together, in one order, before any is
        // read: one round trip for the locks on a client of a server).
        let new_ids: std::collections::HashSet<u32> = parts.iter().map(|p| p.id).collect();
        let mut ids: Vec<u32> = parts
            .iter()
            .flat_map(|p| &p.to)
            .map(|c| c.to)
            .filter(|id| !new_ids.contains(id))
            .collect();
        ids.sort_unstable();
        ids.dedup();
        let mut targets = std::collections::HashMap::with_capacity(ids.len());
        for (id, r) in ids.iter().zip(tx.find_to_append(&BY_ID, &ids)?) {
            let r = r.ok_or_else(|| wrong(self.name, format!("no part {id} in the index")))?;
            targets.insert(*id, r);
        }
        // A part created earlier in this batch is connected to by the
        // reference `create_in` gave, as an application holds what it just
        // made (OO1 connects most new parts to the newest ones, often of
        // the same batch): looking it up would read this transaction's own
        // index changes, which a client of a key-range server must first
        // send to the server.
        let mut created: std::collections::HashMap<u32, Ref<Part>> =
            std::collections::HashMap::with_capacity(parts.len());
        let target_of = |tx: &mut Transaction<'_>,
                         created: &std::collections::HashMap<u32, Ref<Part>>,
                         id: u32|
         -> Result<Ref<Part>> {
            match targets.get(&id).or_else(|| created.get(&id)) {
                Some(r) => Ok(r.clone()),
                None => find(self.name, tx, id),
            }
        };
        for p in parts {
            v.visit(p.x, p.y, p.kind_str());
            let mut to = Vec::with_capacity(p.to.len());
            for c in &p.to {
                // A connection to the part itself gets its reference once
                // the part exists.
                let target = if c.to == p.id {
                    placeholder()
                } else {
                    target_of(&mut tx, &created, c.to)?
                };
                to.push(Connection {
                    to: target,
                    kind: c.kind_str().to_string(),
                    length: c.length,
                });
            }
            let r = tx.create_in(GROUP, part_value(p, to, List::new()))?;
            let loops: Vec<usize> = (0..p.to.len()).filter(|&k| p.to[k].to == p.id).collect();
            if !loops.is_empty() {
                tx.update(&r, |me| {
                    for &k in &loops {
                        me.to[k].to = r.clone();
                    }
                })?;
            }
            for c in &p.to {
                let target = if c.to == p.id {
                    r.clone()
                } else {
                    target_of(&mut tx, &created, c.to)?
                };
                tx.append(&target, "from", &r)?;
            }
            created.insert(p.id, r);
        }
        tx.commit()?;
        Ok(v)
    }

    /// [`System::remove`].
    pub fn remove(&self, parts: &[PartSpec]) -> Result<()> {
        let db = self.db;
        let mut tx = db.begin()?;
        for p in parts.iter().rev() {
            let r = find(self.name, &mut tx, p.id)?;
            let part = tx.get(&r)?;
            for c in &part.to {
                if c.to != r {
                    tx.update(&c.to, |target| {
                        if let Some(k) = target.from.iter().rposition(|f| *f == r) {
                            target.from.remove(k);
                        }
                    })?;
                }
            }
            tx.delete(&r)?;
        }
        tx.commit()?;
        Ok(())
    }

    /// [`System::check`].
    pub fn check(&self) -> Result<Check> {
        let db = self.db;
        let mut tx = db.begin()?;
        let mut c = Check::default();
        let all = tx.find_range(&BY_ID, std::ops::Bound::Unbounded, std::ops::Bound::Unbounded)?;
        for r in &all {
            let p = tx.get(r)?;
            c.add_part(p.id, &p.kind, p.x, p.y, p.build);
            for k in &p.to {
                let t = tx.get(&k.to)?;
                c.add_connection(p.id, t.id, &k.kind, k.length);
            }
            for f in p.from.iter() {
                let s = tx.get(f)?;
                c.add_reverse(s.id, p.id);
            }
        }
        tx.commit()?;
        Ok(c)
    }

    /// [`System::counters`].
    pub fn counters(&self) -> Counters {
        let db = self.db;
        let mut c = Counters::default();
        let cache = db.cache_stats();
        c.set("object_faults", cache.faults)
            .set("object_hits", cache.hits)
            .set("image_loads", cache.image_loads)
            .set("image_hits", cache.image_hits)
            .set("index_hits", cache.index_hits)
            .set("index_misses", cache.index_misses);
        if let Some(st) = db.storage().map(|s| s.stats()) {
            c.set("page_reads", st.buffer.reads)
                .set("page_hits", st.buffer.hits)
                .set("fsyncs", st.wal.fsyncs)
                .set("commits", st.commits);
        }
        if let Some(r) = db.remote_stats() {
            c.set("round_trips", r.round_trips)
                .set("bytes_shipped", r.bytes_sent + r.bytes_received)
                .set("pages_shipped", r.pages_shipped)
                .set("pages_revalidated", r.pages_revalidated)
                .set("cache_hits", r.cache_hits)
                .set("callbacks", r.callbacks)
                .set("pages_read_direct", r.pages_read_direct)
                .set("pages_written_direct", r.pages_written_direct)
                .set("objects_shipped", r.objects_shipped);
            if r.adaptive != cairn::AdaptiveStats::default() {
                let a = r.adaptive;
                c.set("adaptive_page_fetches", a.page_fetches)
                    .set("adaptive_object_fetches", a.object_fetches)
                    .set("adaptive_switches", a.to_pages + a.to_objects);
            }
        }
        c
    }
}

impl<D: Deployment> Cairn<D> {
    fn on(&self) -> Result<CairnOn<'_>> {
        Ok(CairnOn::new(D::NAME, self.db()?))
    }
}

impl<D: Deployment> System for Cairn<D> {
    fn name(&self) -> &'static str {
        D::NAME
    }

    fn build(&mut self, graph: &Graph) -> Result<()> {
        self.close()?;
        let db = self.deployment.create()?;
        build(&db, graph, D::BUILD_TXN_PARTS)?;
        self.db = Some(db);
        Ok(())
    }

    fn close(&mut self) -> Result<()> {
        match self.db.take() {
            Some(db) => self.deployment.close(db),
            None => Ok(()),
        }
    }

    fn open_cold(&mut self) -> Result<()> {
        self.close()?;
        let db = self.deployment.open_cold()?;
        db.register::<Part>()?;
        self.db = Some(db);
        Ok(())
    }

    fn lookup(&mut self, ids: &[u32]) -> Result<Visits> {
        self.on()?.lookup(ids)
    }

    fn traversal(&mut self, start: u32, hops: u32) -> Result<Visits> {
        self.on()?.traversal(start, hops)
    }

    fn reverse_traversal(&mut self, start: u32, hops: u32) -> Result<Visits> {
        self.on()?.reverse_traversal(start, hops)
    }

    fn insert(&mut self, parts: &[PartSpec]) -> Result<Visits> {
        self.on()?.insert(parts)
    }

    fn remove(&mut self, parts: &[PartSpec]) -> Result<()> {
        self.on()?.remove(parts)
    }

    fn check(&mut self) -> Result<Check> {
        self.on()?.check()
    }

    fn size_on_disk_bytes(&self) -> Option<u64> {
        self.deployment.size_on_disk_bytes()
    }

    fn counters(&self) -> Counters {
        self.on().map_or_else(|_| Counters::default(), |on| on.counters())
    }
}

impl System for CairnOn<'_> {
    fn name(&self) -> &'static str {
        self.name
    }

    fn build(&mut self, _graph: &Graph) -> Result<()> {
        Err(not_here(self.name, "build"))
    }

    /// Nothing to close: the database is its opener's.
    fn close(&mut self) -> Result<()> {
        Ok(())
    }

    fn open_cold(&mut self) -> Result<()> {
        Err(not_here(self.name, "open cold"))
    }

    fn lookup(&mut self, ids: &[u32]) -> Result<Visits> {
        CairnOn::lookup(self, ids)
    }

    fn traversal(&mut self, start: u32, hops: u32) -> Result<Visits> {
        CairnOn::traversal(self, start, hops)
    }

    fn reverse_traversal(&mut self, start: u32, hops: u32) -> Result<Visits> {
        CairnOn::reverse_traversal(self, start, hops)
    }

    fn insert(&mut self, parts: &[PartSpec]) -> Result<Visits> {
        CairnOn::insert(self, parts)
    }

    fn remove(&mut self, parts: &[PartSpec]) -> Result<()> {
        CairnOn::remove(self, parts)
    }

    fn check(&mut self) -> Result<Check> {
        CairnOn::check(self)
    }

    fn size_on_disk_bytes(&self) -> Option<u64> {
        None
    }

    fn counters(&self) -> Counters {
        CairnOn::counters(self)
    }
}

/// The error of a life-cycle step a [`CairnOn`] leaves to its database's
/// opener.
fn not_here(system: &str, step: &str) -> Error {
    Error::InvalidArgument(format!(
        "{system}: a system on a database opened elsewhere does not {step} it"
    ))
}
