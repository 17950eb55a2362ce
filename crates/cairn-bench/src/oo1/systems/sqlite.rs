//! `sqlite`: OO1 on SQLite (the `rusqlite` crate, bundled), the embedded
//! relational peer, with the paper's Appendix B schema.
//!
//! Appendix B's clustered indexes become SQLite's clustered B+-trees: `part`
//! is keyed by `id` (`INTEGER PRIMARY KEY`, the unique clustered index
//! `ipart`), `connection` is a `WITHOUT ROWID` table keyed by `(frm, seq)`
//! (the clustered index `iconn` on `frm`; `seq` is the connection's number
//! 0..3 within its part, since the same pair may be connected twice), and
//! `rconn` is a secondary index on `too` for the reverse direction.
//!
//! - **lookup**: `SELECT x, y, part_type FROM part WHERE id = ?` per id.
//! - **traversal**: per part visited, the part's row by id, then
//!   `SELECT too FROM connection WHERE frm = ?` and recursion;
//!   **reverse**: `SELECT frm FROM connection WHERE too = ?` (through `rconn`).
//! - **insert**: one transaction of 100 part rows and 300 connection rows,
//!   committed with `synchronous = FULL` in WAL mode (the WAL is fsynced).
//! - **cold**: the connection is closed (checkpointing the WAL), the files are
//!   evicted from the OS page cache, and a new connection is opened, reads
//!   the schema, and only then turns its memory map on (`Sqlite::map`).
//!
//! Pragmas: WAL, `synchronous = FULL` (an insert is durable when its commit
//! returns), a 64 MiB page cache and a 256 MiB memory map. Each run is one
//! transaction, and takes each statement it needs from the connection's
//! statement cache once (not once per part: see `ReadStmts`).

use std::path::PathBuf;

use rusqlite::{params, CachedStatement, Connection, Statement};

use crate::oo1::generate::{Check, Graph, PartSpec};
use crate::oo1::system::{dir_size_bytes, evict_os_cache, major_faults, Counters, Error, Result, System, Visits};

const SCHEMA: &str = "
CREATE TABLE part (
  id INTEGER PRIMARY KEY,
  part_type TEXT NOT NULL,
  x INTEGER NOT NULL,
  y INTEGER NOT NULL,
  build INTEGER NOT NULL
);
CREATE TABLE connection (
  frm INTEGER NOT NULL,
  seq INTEGER NOT NULL,
  too INTEGER NOT NULL,
  conn_type TEXT NOT NULL,
  length INTEGER NOT NULL,
  PRIMARY KEY (frm, seq)
) WITHOUT ROWID;
CREATE INDEX rconn ON connection(too);
";

const GET_PART: &str = "SELECT x, y, part_type FROM part WHERE id = ?1";
const FORWARD: &str = "SELECT too FROM connection WHERE frm = ?1";
const BACKWARD: &str = "SELECT frm FROM connection WHERE too = ?1";
const INSERT_PART: &str = "INSERT INTO part (id, part_type, x, y, build) VALUES (?1, ?2, ?3, ?4, ?5)";
const INSERT_CONN: &str = "INSERT INTO connection (frm, seq, too, conn_type, length) VALUES (?1, ?2, ?3, ?4, ?5)";

/// SQLite's page cache: 64 MiB (negative `cache_size` is in KiB), enough for
/// the large database, like Cairn's buffer pool.
const CACHE_KIB: i64 = 65_536;

/// SQLite reads the database file through a memory map of up to 256 MiB
/// (the large database is about 32 MiB), as a careful user of a read-mostly
/// database sets it: a page read is a memory access, not a `pread` into
/// the page cache (warm runs 5–10% faster, cold traversals about a third
/// faster, measured). Writes still go through the WAL.
const MMAP_BYTES: i64 = 256 << 20;

/// SQLite.
pub struct Sqlite {
    dir: PathBuf,
    conn: Option<Connection>,
}

impl Sqlite {
    /// A system whose database lives in `dir` (created by `build`).
    pub fn new(dir: PathBuf) -> Sqlite {
        Sqlite { dir, conn: None }
    }

    fn open(&mut self) -> Result<()> {
        std::fs::create_dir_all(&self.dir).map_err(|e| Error::io(format!("creating {}", self.dir.display()), e))?;
        let c = Connection::open(self.dir.join("oo1.sqlite"))?;
        c.pragma_update(None, "journal_mode", "WAL")?;
        c.pragma_update(None, "synchronous", "FULL")?;
        c.pragma_update(None, "cache_size", -CACHE_KIB)?;
        c.set_prepared_statement_cache_capacity(16);
        self.conn = Some(c);
        Ok(())
    }

    /// Turns the memory map on. `open_cold` does it after reading the
    /// schema: a first read through the map makes the kernel read ahead (on
    /// this machine's disk, 8 MiB: the whole file), and the open would then
    /// leave the cold run nothing to read. (Evicting the files again with
    /// the connection open is no way out: closing our descriptor of a file
    /// drops every POSIX lock SQLite holds on it.)
    fn map(&self) -> Result<()> {
        self.conn()?.pragma_update(None, "mmap_size", MMAP_BYTES)?;
        Ok(())
    }

    fn conn(&self) -> Result<&Connection> {
        self.conn.as_ref().ok_or_else(|| Error::Wrong {
            system: "sqlite".into(),
            reason: "the database is not open".into(),
        })
    }
}

fn missing(id: u32) -> Error {
    Error::Wrong {
        system: "sqlite".into(),
        reason: format!("no part {id}"),
    }
}

/// Fetches part `id` with `st` ([`GET_PART`]) and visits it.
fn visit_part(st: &mut Statement<'_>, id: u32, v: &mut Visits) -> Result<()> {
    let mut rows = st.query([id])?;
    let row = rows.next()?.ok_or_else(|| missing(id))?;
    let kind = row.get_ref(2)?.as_str().map_err(rusqlite::Error::from)?;
    v.visit(row.get(0)?, row.get(1)?, kind);
    Ok(())
}

/// The statements of one read run, taken from the connection's statement
/// cache once per run and reused for every part: looking a statement up in
/// rusqlite's cache (`prepare_cached`: hash the SQL, take it out of the LRU,
/// reset and put it back) costs about 0.16 µs, a fifth of a warm lookup's
/// whole cost, so doing it per part was most of what made this peer slower
/// than a plain program (`examples/sqlite_plain.rs` measures it).
struct ReadStmts<'c> {
    part: CachedStatement<'c>,
    next: CachedStatement<'c>,
}

impl<'c> ReadStmts<'c> {
    /// `next_sql` is [`FORWARD`] or [`BACKWARD`] (unused by lookups).
    fn new(c: &'c Connection, next_sql: &str) -> Result<ReadStmts<'c>> {
        Ok(ReadStmts {
            part: c.prepare_cached(GET_PART)?,
            next: c.prepare_cached(next_sql)?,
        })
    }

    /// Visits `id`, then the parts connected from it (or to it, by
    /// `next`'s direction) for `hops` more hops. `stack` holds each level's
    /// neighbours above the caller's, so a run allocates only while the
    /// stack first grows.
    fn traverse(&mut self, id: u32, hops: u32, v: &mut Visits, stack: &mut Vec<u32>) -> Result<()> {
        visit_part(&mut self.part, id, v)?;
        if hops == 0 {
            return Ok(());
        }
        let start = stack.len();
        {
            let mut rows = self.next.query([id])?;
            while let Some(r) = rows.next()? {
                stack.push(r.get(0)?);
            }
        }
        // The range is fixed here; deeper levels push above it and truncate
        // back to their own start.
        for i in start..stack.len() {
            let n = stack[i];
            self.traverse(n, hops - 1, v, stack)?;
        }
        stack.truncate(start);
        Ok(())
    }
}

impl Sqlite {
    fn read_run(&self, f: impl FnOnce(&Connection) -> Result<Visits>) -> Result<Visits> {
        let c = self.conn()?;
        c.execute_batch("BEGIN")?;
        let v = f(c);
        c.execute_batch("COMMIT")?;
        v
    }

    /// SQLite's page-cache counters for this connection (hits, misses).
    fn cache_counters(&self) -> (u64, u64) {
        let Some(c) = &self.conn else { return (0, 0) };
        let get = |op| {
            let (mut cur, mut high) = (0, 0);
            // SAFETY: the handle is the open connection's, used on this
            // thread only for the duration of the call; the out-pointers are
            // to locals.
            let rc = unsafe { rusqlite::ffi::sqlite3_db_status(c.handle(), op, &mut cur, &mut high, 0) };
            if rc == 0 {
                cur.max(0) as u64
            } else {
                0
            }
        };
        (
            get(rusqlite::ffi::SQLITE_DBSTATUS_CACHE_HIT),
            get(rusqlite::ffi::SQLITE_DBSTATUS_CACHE_MISS),
        )
    }
}

impl System for Sqlite {
    fn name(&self) -> &'static str {
        "sqlite"
    }

    fn build(&mut self, graph: &Graph) -> Result<()> {
        let _ = std::fs::remove_dir_all(&self.dir);
        self.open()?;
        self.map()?;
        let c = self.conn()?;
        c.execute_batch(SCHEMA)?;
        c.execute_batch("BEGIN")?;
        {
            let mut part = c.prepare_cached(INSERT_PART)?;
            let mut conn = c.prepare_cached(INSERT_CONN)?;
            for p in &graph.parts {
                part.execute(params![p.id, p.kind_str(), p.x, p.y, p.build])?;
                for (seq, k) in p.to.iter().enumerate() {
                    conn.execute(params![p.id, seq as u32, k.to, k.kind_str(), k.length])?;
                }
            }
        }
        c.execute_batch("COMMIT")?;
        Ok(())
    }

    fn close(&mut self) -> Result<()> {
        if let Some(c) = self.conn.take() {
            c.close().map_err(|(_, e)| e)?;
        }
        Ok(())
    }

    fn open_cold(&mut self) -> Result<()> {
        self.close()?;
        evict_os_cache(&self.dir)?;
        self.open()?;
        // Parse the schema now, as Cairn's open loads its catalog.
        self.conn()?
            .query_row("SELECT count(*) FROM sqlite_master", [], |_| Ok(()))?;
        self.map()
    }

    fn lookup(&mut self, ids: &[u32]) -> Result<Visits> {
        self.read_run(|c| {
            let mut st = c.prepare_cached(GET_PART)?;
            let mut v = Visits::default();
            for &id in ids {
                visit_part(&mut st, id, &mut v)?;
            }
            Ok(v)
        })
    }

    fn traversal(&mut self, start: u32, hops: u32) -> Result<Visits> {
        self.read_run(|c| {
            let mut v = Visits::default();
            ReadStmts::new(c, FORWARD)?.traverse(start, hops, &mut v, &mut Vec::with_capacity(64))?;
            Ok(v)
        })
    }

    fn reverse_traversal(&mut self, start: u32, hops: u32) -> Result<Visits> {
        self.read_run(|c| {
            let mut v = Visits::default();
            ReadStmts::new(c, BACKWARD)?.traverse(start, hops, &mut v, &mut Vec::with_capacity(64))?;
            Ok(v)
        })
    }

    fn insert(&mut self, parts: &[PartSpec]) -> Result<Visits> {
        let c = self.conn()?;
        let mut v = Visits::default();
        c.execute_batch("BEGIN IMMEDIATE")?;
        {
            let mut part = c.prepare_cached(INSERT_PART)?;
            let mut conn = c.prepare_cached(INSERT_CONN)?;
            for p in parts {
                v.visit(p.x, p.y, p.kind_str());
                part.execute(params![p.id, p.kind_str(), p.x, p.y, p.build])?;
                for (seq, k) in p.to.iter().enumerate() {
                    conn.execute(params![p.id, seq as u32, k.to, k.kind_str(), k.length])?;
                }
            }
        }
        c.execute_batch("COMMIT")?;
        Ok(v)
    }

    fn remove(&mut self, parts: &[PartSpec]) -> Result<()> {
        let c = self.conn()?;
        c.execute_batch("BEGIN IMMEDIATE")?;
        for p in parts {
            c.prepare_cached("DELETE FROM part WHERE id = ?1")?.execute([p.id])?;
            c.prepare_cached("DELETE FROM connection WHERE frm = ?1")?
                .execute([p.id])?;
        }
        c.execute_batch("COMMIT")?;
        Ok(())
    }

    fn check(&mut self) -> Result<Check> {
        let c = self.conn()?;
        let mut check = Check::default();
        let mut st = c.prepare("SELECT id, part_type, x, y, build FROM part")?;
        let mut rows = st.query([])?;
        while let Some(r) = rows.next()? {
            check.add_part(
                r.get(0)?,
                r.get_ref(1)?.as_str().map_err(rusqlite::Error::from)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
            );
        }
        let mut st = c.prepare("SELECT frm, too, conn_type, length FROM connection")?;
        let mut rows = st.query([])?;
        while let Some(r) = rows.next()? {
            let (frm, too): (u32, u32) = (r.get(0)?, r.get(1)?);
            check.add_connection(
                frm,
                too,
                r.get_ref(2)?.as_str().map_err(rusqlite::Error::from)?,
                r.get(3)?,
            );
        }
        // The reverse direction, read through its own index.
        let mut st = c.prepare("SELECT frm, too FROM connection INDEXED BY rconn ORDER BY too")?;
        let mut rows = st.query([])?;
        while let Some(r) = rows.next()? {
            check.add_reverse(r.get(0)?, r.get(1)?);
        }
        Ok(check)
    }

    fn size_on_disk_bytes(&self) -> Option<u64> {
        Some(dir_size_bytes(&self.dir))
    }

    fn counters(&self) -> Counters {
        // Pages read through the memory map bypass SQLite's page cache (and
        // its counters, which then count only the WAL's and the schema's
        // pages): the map's reads from the disk are the major faults.
        let (hits, misses) = self.cache_counters();
        let mut c = Counters::default();
        c.set("page_hits", hits)
            .set("page_reads", misses)
            .set("major_faults", major_faults());
        c
    }
}
