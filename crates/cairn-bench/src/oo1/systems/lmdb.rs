//! `lmdb`: OO1 on LMDB (the `heed` crate), the B-tree key–value store of
//! today, written as a careful LMDB user would write it.
//!
//! Two databases in one environment (`lmdb/data.mdb`):
//!
//! - `parts`: key the part's id, big-endian (so memcmp order is id order
//!   and the build appends); value a fixed-width [`PART_VALUE_LEN`]-byte
//!   record holding the part's fields and its three outgoing connections
//!   (little-endian, [`encode_part`]). A lookup and a traversal step are one
//!   `get` each.
//! - `from`: the reverse edges, a `DUP_SORT | DUP_FIXED` database: key the
//!   target's id (big-endian), one 5-byte duplicate per incoming connection,
//!   the source's id (big-endian) and the connection's number 0..3 within
//!   its source (the same pair may be connected twice, and LMDB keeps equal
//!   duplicates once). A reverse step is one cursor positioned on the key.
//!
//! - **lookup**, **traversal**, **reverse traversal**: one read transaction
//!   per run; values are read in place from the memory map.
//! - **insert**: one write transaction (100 `parts` puts, 300 `from` puts)
//!   and one commit with LMDB's default durability (the data pages and then
//!   the meta page are synced before `commit` returns).
//! - **cold**: the environment is closed (every handle dropped, waited for),
//!   its files are evicted from the OS page cache, it is opened again with
//!   its two databases, and its data file is evicted once more: opening the
//!   databases read the main database's root through the map, and the
//!   kernel's read-ahead on that fault brought in the whole file (only the
//!   few pages the open mapped stay, about 19 of the small database's 527).
//!   LMDB's default read-ahead is kept, as a user whose database fits in
//!   memory keeps it: the cold run's first fault reads ahead.
//!
//! Counters: `major_faults`, the reads through the map that waited for the
//! disk (LMDB has no cache of its own to count).
//!
//! The map is [`MAP_BYTES`], far above the large database (200,000 parts,
//! about 20 MiB), so no run ever resizes it.

use std::path::PathBuf;

use heed::types::Bytes;
use heed::{CommitOrAbort, Database, DatabaseFlags, Env, EnvOpenOptions, PutFlags, RoTxn};

use crate::oo1::generate::{Check, Graph, PartSpec, CONNECTIONS_PER_PART, CONN_TYPES, PART_TYPES};
use crate::oo1::system::{
    dir_size_bytes, evict_file, evict_os_cache, major_faults, Counters, Error, Result, System, Visits,
};

/// The memory map's size: 1 GiB of address space (the file grows only as
/// pages are written).
pub const MAP_BYTES: usize = 1 << 30;

/// Bytes of a connection in a part's value: target id (u32), type (u8),
/// length (i32).
const CONN_LEN: usize = 9;

/// Bytes of a part's value: type (u8), x (i32), y (i32), build (i64), then
/// the three connections.
pub const PART_VALUE_LEN: usize = 1 + 4 + 4 + 8 + CONNECTIONS_PER_PART * CONN_LEN;
const _: () = assert!(PART_VALUE_LEN == 44);

/// Bytes of a reverse edge: the source's id (big-endian) and the
/// connection's number within its source.
const FROM_LEN: usize = 5;

type Db = Database<'static, Bytes, Bytes>;

/// The open environment and its two databases.
struct Open {
    env: Env,
    parts: Db,
    from: Db,
}

/// LMDB.
pub struct Lmdb {
    dir: PathBuf,
    open: Option<Open>,
}

/// A part's value: its fields and its outgoing connections.
pub fn encode_part(p: &PartSpec) -> [u8; PART_VALUE_LEN] {
    let mut v = [0u8; PART_VALUE_LEN];
    v[0] = p.kind;
    v[1..5].copy_from_slice(&p.x.to_le_bytes());
    v[5..9].copy_from_slice(&p.y.to_le_bytes());
    v[9..17].copy_from_slice(&p.build.to_le_bytes());
    for (k, c) in p.to.iter().enumerate() {
        let at = 17 + k * CONN_LEN;
        v[at..at + 4].copy_from_slice(&c.to.to_le_bytes());
        v[at + 4] = c.kind;
        v[at + 5..at + 9].copy_from_slice(&c.length.to_le_bytes());
    }
    v
}

/// A part's value read in place: the accessors decode one field each.
#[derive(Clone, Copy)]
struct PartValue<'a>(&'a [u8; PART_VALUE_LEN]);

impl<'a> PartValue<'a> {
    /// Checks the length (every value `build` and `insert` write has it).
    fn new(id: u32, bytes: &'a [u8]) -> Result<PartValue<'a>> {
        bytes.try_into().map(PartValue).map_err(|_| {
            wrong(format!(
                "part {id}: a value of {} bytes, not {PART_VALUE_LEN}",
                bytes.len()
            ))
        })
    }

    fn kind(self) -> u8 {
        self.0[0]
    }

    fn i32_at(self, at: usize) -> i32 {
        i32::from_le_bytes([self.0[at], self.0[at + 1], self.0[at + 2], self.0[at + 3]])
    }

    fn x(self) -> i32 {
        self.i32_at(1)
    }

    fn y(self) -> i32 {
        self.i32_at(5)
    }

    fn build(self) -> i64 {
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.0[9..17]);
        i64::from_le_bytes(b)
    }

    /// Connection `k`: (target, type, length).
    fn conn(self, k: usize) -> (u32, u8, i32) {
        let at = 17 + k * CONN_LEN;
        let to = u32::from_le_bytes([self.0[at], self.0[at + 1], self.0[at + 2], self.0[at + 3]]);
        (to, self.0[at + 4], self.i32_at(at + 5))
    }

    fn visit(self, v: &mut Visits) -> Result<()> {
        let kind = PART_TYPES
            .get(usize::from(self.kind()))
            .ok_or_else(|| wrong(format!("a part type {} out of range", self.kind())))?;
        v.visit(self.x(), self.y(), kind);
        Ok(())
    }
}

fn wrong(reason: String) -> Error {
    Error::Wrong {
        system: "lmdb".into(),
        reason,
    }
}

fn missing(id: u32) -> Error {
    wrong(format!("no part {id}"))
}

/// A reverse edge's duplicate value.
fn from_value(from: u32, seq: usize) -> [u8; FROM_LEN] {
    let b = from.to_be_bytes();
    [b[0], b[1], b[2], b[3], seq as u8]
}

fn from_id(value: &[u8]) -> Result<u32> {
    match value {
        [a, b, c, d, _] => Ok(u32::from_be_bytes([*a, *b, *c, *d])),
        _ => Err(wrong(format!(
            "a reverse edge of {} bytes, not {FROM_LEN}",
            value.len()
        ))),
    }
}

impl Lmdb {
    /// A system whose environment lives in `dir` (created by `build`).
    pub fn new(dir: PathBuf) -> Lmdb {
        Lmdb { dir, open: None }
    }

    /// Opens the environment, creating the two databases if `create`.
    fn open(&mut self, create: bool) -> Result<()> {
        std::fs::create_dir_all(&self.dir).map_err(|e| Error::io(format!("creating {}", self.dir.display()), e))?;
        // SAFETY: the memory map is only read through LMDB's transactions,
        // and no one else (in this process or another) modifies the files
        // while it is open: the directory is this system's alone.
        let env = unsafe { EnvOpenOptions::new().map_size(MAP_BYTES).max_dbs(2).open(&self.dir)? };
        let (parts, from) = if create {
            let wtxn = env.write_txn()?;
            env.create_databases_and_commit(wtxn, |o, wtxn| -> heed::Result<_> {
                let parts = o
                    .database_options()
                    .types::<Bytes, Bytes>()
                    .name("parts")
                    .create(wtxn)?;
                let from = o
                    .database_options()
                    .types::<Bytes, Bytes>()
                    .name("from")
                    .flags(DatabaseFlags::DUP_SORT | DatabaseFlags::DUP_FIXED)
                    .create(wtxn)?;
                Ok(CommitOrAbort::<_, ()>::Commit((parts, from)))
            })?
            .unwrap_commit()
        } else {
            let rtxn = env.read_txn()?;
            let opened = env
                .open_databases_and_commit(rtxn, |o, rtxn| -> heed::Result<_> {
                    let parts = o.database_options().types::<Bytes, Bytes>().name("parts").open(rtxn)?;
                    let from = o
                        .database_options()
                        .types::<Bytes, Bytes>()
                        .name("from")
                        .flags(DatabaseFlags::DUP_SORT | DatabaseFlags::DUP_FIXED)
                        .open(rtxn)?;
                    Ok(CommitOrAbort::<_, ()>::Commit(parts.zip(from)))
                })?
                .unwrap_commit();
            opened.ok_or_else(|| wrong(format!("{} has no parts and from databases", self.dir.display())))?
        };
        self.open = Some(Open { env, parts, from });
        Ok(())
    }

    fn db(&self) -> Result<&Open> {
        self.open
            .as_ref()
            .ok_or_else(|| wrong("the database is not open".into()))
    }

    /// Runs `f` in one read transaction.
    fn read_run(&self, f: impl FnOnce(&Open, &RoTxn<'_>) -> Result<Visits>) -> Result<Visits> {
        let o = self.db()?;
        let rtxn = o.env.read_txn()?;
        f(o, &rtxn)
    }
}

impl Open {
    fn part<'t>(&self, rtxn: &'t RoTxn<'_>, id: u32) -> Result<PartValue<'t>> {
        let bytes = self.parts.get(rtxn, &id.to_be_bytes())?.ok_or_else(|| missing(id))?;
        PartValue::new(id, bytes)
    }

    fn traverse(&self, rtxn: &RoTxn<'_>, id: u32, hops: u32, v: &mut Visits) -> Result<()> {
        let p = self.part(rtxn, id)?;
        p.visit(v)?;
        if hops > 0 {
            for k in 0..CONNECTIONS_PER_PART {
                self.traverse(rtxn, p.conn(k).0, hops - 1, v)?;
            }
        }
        Ok(())
    }

    /// Visits `id`, then the parts connected to it for `hops` more hops.
    /// `stack` holds each level's sources above the caller's, so no cursor
    /// stays open across the recursion and a run allocates only while the
    /// stack first grows.
    fn reverse(&self, rtxn: &RoTxn<'_>, id: u32, hops: u32, v: &mut Visits, stack: &mut Vec<u32>) -> Result<()> {
        self.part(rtxn, id)?.visit(v)?;
        if hops == 0 {
            return Ok(());
        }
        let start = stack.len();
        if let Some(dups) = self.from.get_duplicates(rtxn, &id.to_be_bytes())? {
            for dup in dups {
                stack.push(from_id(dup?.1)?);
            }
        }
        for i in start..stack.len() {
            let n = stack[i];
            self.reverse(rtxn, n, hops - 1, v, stack)?;
        }
        stack.truncate(start);
        Ok(())
    }
}

impl System for Lmdb {
    fn name(&self) -> &'static str {
        "lmdb"
    }

    fn build(&mut self, graph: &Graph) -> Result<()> {
        self.close()?;
        let _ = std::fs::remove_dir_all(&self.dir);
        self.open(true)?;
        let o = self.db()?;
        // The reverse edges in key order, so both databases are appended to
        // (pages filled, not split in halves), as a bulk load should be.
        let mut edges: Vec<(u32, [u8; FROM_LEN])> = Vec::with_capacity(graph.parts.len() * CONNECTIONS_PER_PART);
        for p in &graph.parts {
            for (seq, c) in p.to.iter().enumerate() {
                edges.push((c.to, from_value(p.id, seq)));
            }
        }
        edges.sort_unstable();
        let mut wtxn = o.env.write_txn()?;
        for p in &graph.parts {
            o.parts
                .put_with_flags(&mut wtxn, PutFlags::APPEND, &p.id.to_be_bytes(), &encode_part(p))?;
        }
        for (to, from) in &edges {
            o.from
                .put_with_flags(&mut wtxn, PutFlags::APPEND_DUP, &to.to_be_bytes(), from)?;
        }
        wtxn.commit()?;
        Ok(())
    }

    fn close(&mut self) -> Result<()> {
        if let Some(o) = self.open.take() {
            // The last handle closes the environment; wait until it has.
            o.env.prepare_for_closing().wait();
        }
        Ok(())
    }

    fn open_cold(&mut self) -> Result<()> {
        self.close()?;
        evict_os_cache(&self.dir)?;
        self.open(false)?;
        // Opening the databases read the main database's root through the
        // map, and the kernel's read-ahead on that first fault (8 MiB on this
        // machine's disk) brought in the whole file: evict it again, or the
        // cold run would read nothing from the disk. Only the data file:
        // LMDB's POSIX lock is on `lock.mdb`, and closing a descriptor of a
        // file would release it.
        evict_file(&self.dir.join("data.mdb"))
    }

    fn lookup(&mut self, ids: &[u32]) -> Result<Visits> {
        self.read_run(|o, rtxn| {
            let mut v = Visits::default();
            for &id in ids {
                o.part(rtxn, id)?.visit(&mut v)?;
            }
            Ok(v)
        })
    }

    fn traversal(&mut self, start: u32, hops: u32) -> Result<Visits> {
        self.read_run(|o, rtxn| {
            let mut v = Visits::default();
            o.traverse(rtxn, start, hops, &mut v)?;
            Ok(v)
        })
    }

    fn reverse_traversal(&mut self, start: u32, hops: u32) -> Result<Visits> {
        self.read_run(|o, rtxn| {
            let mut v = Visits::default();
            o.reverse(rtxn, start, hops, &mut v, &mut Vec::with_capacity(64))?;
            Ok(v)
        })
    }

    fn insert(&mut self, parts: &[PartSpec]) -> Result<Visits> {
        let o = self.db()?;
        let mut v = Visits::default();
        let mut wtxn = o.env.write_txn()?;
        for p in parts {
            v.visit(p.x, p.y, p.kind_str());
            o.parts.put(&mut wtxn, &p.id.to_be_bytes(), &encode_part(p))?;
            for (seq, c) in p.to.iter().enumerate() {
                o.from.put(&mut wtxn, &c.to.to_be_bytes(), &from_value(p.id, seq))?;
            }
        }
        wtxn.commit()?;
        Ok(v)
    }

    fn remove(&mut self, parts: &[PartSpec]) -> Result<()> {
        let o = self.db()?;
        let mut wtxn = o.env.write_txn()?;
        for p in parts {
            o.parts.delete(&mut wtxn, &p.id.to_be_bytes())?;
            for (seq, c) in p.to.iter().enumerate() {
                o.from
                    .delete_one_duplicate(&mut wtxn, &c.to.to_be_bytes(), &from_value(p.id, seq))?;
            }
        }
        wtxn.commit()?;
        Ok(())
    }

    fn check(&mut self) -> Result<Check> {
        let o = self.db()?;
        let rtxn = o.env.read_txn()?;
        let mut check = Check::default();
        for entry in o.parts.iter(&rtxn)? {
            let (key, value) = entry?;
            let key: [u8; 4] = key
                .try_into()
                .map_err(|_| wrong(format!("a part key of {} bytes", key.len())))?;
            let id = u32::from_be_bytes(key);
            let p = PartValue::new(id, value)?;
            let kind = PART_TYPES
                .get(usize::from(p.kind()))
                .ok_or_else(|| wrong(format!("part {id}: type {} out of range", p.kind())))?;
            check.add_part(id, kind, p.x(), p.y(), p.build());
            for k in 0..CONNECTIONS_PER_PART {
                let (to, ckind, length) = p.conn(k);
                let ckind = CONN_TYPES
                    .get(usize::from(ckind))
                    .ok_or_else(|| wrong(format!("part {id}: connection type {ckind} out of range")))?;
                check.add_connection(id, to, ckind, length);
            }
        }
        // The reverse direction, read from its own database.
        for entry in o.from.iter(&rtxn)? {
            let (key, value) = entry?;
            let key: [u8; 4] = key
                .try_into()
                .map_err(|_| wrong(format!("a reverse key of {} bytes", key.len())))?;
            check.add_reverse(from_id(value)?, u32::from_be_bytes(key));
        }
        Ok(check)
    }

    fn size_on_disk_bytes(&self) -> Option<u64> {
        Some(dir_size_bytes(&self.dir))
    }

    fn counters(&self) -> Counters {
        let mut c = Counters::default();
        c.set("major_faults", major_faults());
        c
    }
}
