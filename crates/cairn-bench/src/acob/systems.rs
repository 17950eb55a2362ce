//! The systems ACOB compares (DeWitt et al. §3), each over one database
//! directory: **embedded** (the paper's single-site WiSS: the storage
//! engine in process), the **page**, **object** and **file** server
//! clients, and the **adaptive** client (the object protocol, fetching
//! whole pages of objects or single objects as it measures), each of a
//! `cairn serve` child process on loopback started from
//! the `cairn` binary. The client's and the server's buffers are sized in
//! pages as in the paper ([`Buffers`]): the server's buffer pool through
//! `cairn serve --config` (`buffer_frames`), a page or file client's pool
//! in pages (and a transaction's private pages in as many bytes), an object
//! client's cache in as many bytes (4 KiB a page), which bounds what one of
//! its transactions keeps too.
//!
//! [`System::cold`] makes every cache cold, as the paper does at the start
//! of each step: the client disconnects, the server stops (it checkpoints),
//! the directory's files leave the OS page cache, and a new server and a
//! new client start (embedded: the database is closed and opened again).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use cairn::storage::{Db, DbOptions, GroupId};
use cairn::tools::{parse_url, ObjectStore, RemoteStore};
use cairn::{AdaptivePolicy, RemoteStats};
use cairn_net::message::Architecture;

use super::generate::{Set, Visit, SET_NAMES};
use super::store::{self, AcobTxn, RunCounts, StoreError, StoredSet};
use crate::oo1::system::evict_os_cache;
use crate::oo1::systems::cairn_page::ServerProcess;

/// An architecture under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Arch {
    /// The storage engine in process (the paper's single-site WiSS).
    Embedded,
    /// A page-server client.
    Page,
    /// An object-server client.
    Object,
    /// A file-server client.
    File,
    /// The adaptive client (`cairn::tools::adaptive`): the object
    /// protocol, fetching whole pages of objects or single objects as it
    /// measures.
    Adaptive,
}

impl Arch {
    /// Every system, in the report's order.
    pub const ALL: [Arch; 5] = [Arch::Embedded, Arch::Page, Arch::Object, Arch::File, Arch::Adaptive];

    /// The fixed architectures (the paper's), in the report's order.
    pub const FIXED: [Arch; 4] = [Arch::Embedded, Arch::Page, Arch::Object, Arch::File];

    /// Its name in reports and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Arch::Embedded => "embedded",
            Arch::Page => "page",
            Arch::Object => "object",
            Arch::File => "file",
            Arch::Adaptive => "adaptive",
        }
    }

    /// The architecture named `name`.
    pub fn by_name(name: &str) -> Option<Arch> {
        Arch::ALL.into_iter().find(|a| a.name() == name)
    }
}

/// Buffer sizes in 4 KiB pages, as the paper gives them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Buffers {
    /// The client's buffer (embedded: the only one).
    pub client_pages: usize,
    /// The server's buffer pool.
    pub server_pages: usize,
}

/// Bytes of a page, for an object client's cache sized in pages.
const PAGE_BYTES: usize = 4096;

/// The errors of running a system.
#[derive(Debug, thiserror::Error)]
pub enum SystemError {
    /// Storing or running a plan failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The storage engine or a client failed.
    #[error(transparent)]
    Storage(#[from] cairn::storage::Error),
    /// Starting, stopping or reaching the server failed.
    #[error("{0}")]
    Server(String),
}

impl From<crate::oo1::system::Error> for SystemError {
    fn from(e: crate::oo1::system::Error) -> SystemError {
        SystemError::Server(e.to_string())
    }
}

/// The result of running a system.
pub type Result<T> = std::result::Result<T, SystemError>;

/// The name of set `n`'s group (`acob-A` for set 0).
pub fn group_name(n: usize) -> String {
    match SET_NAMES.get(n) {
        Some(name) => format!("acob-{name}"),
        None => format!("acob-{n}"),
    }
}

/// The connection of a running system.
enum Conn {
    Embedded(Db),
    Pages(ServerProcess, Arc<RemoteStore>),
    Objects(ServerProcess, Arc<ObjectStore>),
}

/// One architecture over one database directory.
pub struct System {
    arch: Arch,
    dir: PathBuf,
    exe: PathBuf,
    buffers: Buffers,
    config: PathBuf,
    conn: Option<Conn>,
}

/// Pages the database's buffer pool read from and wrote to the volume
/// during a step: the server's (client-server), or the engine's own
/// (embedded).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StepPages {
    /// Read from the volume.
    pub read: u64,
    /// Written to the volume.
    pub written: u64,
}

impl System {
    /// Starts `arch` over a new database in `dir` (created), serving it
    /// with the `cairn` binary `exe` for the client-server architectures.
    pub fn start(arch: Arch, dir: &Path, exe: &Path, buffers: Buffers) -> Result<System> {
        let io = |what: &str, e: std::io::Error| SystemError::Server(format!("{what} {}: {e}", dir.display()));
        std::fs::create_dir_all(dir).map_err(|e| io("creating", e))?;
        let config = dir.with_extension("serve.conf");
        std::fs::write(&config, format!("buffer_frames = {}\n", buffers.server_pages.max(8)))
            .map_err(|e| io("writing the server configuration beside", e))?;
        let mut s = System {
            arch,
            dir: dir.join("db"),
            exe: exe.to_path_buf(),
            buffers,
            config,
            conn: None,
        };
        s.connect()?;
        Ok(s)
    }

    /// The architecture.
    pub fn arch(&self) -> Arch {
        self.arch
    }

    fn connect(&mut self) -> Result<()> {
        let b = self.buffers;
        let conn = match self.arch {
            Arch::Embedded => {
                let mut opts = DbOptions {
                    background: false,
                    ..DbOptions::default()
                };
                opts.volume.buffer_frames = b.client_pages.max(8);
                Conn::Embedded(Db::open_or_create(&self.dir, &opts)?)
            }
            Arch::Page | Arch::File => {
                let server = ServerProcess::start_with(&self.exe, &self.dir, Some(&self.config))?;
                let kind = if self.arch == Arch::File {
                    Architecture::FILE
                } else {
                    Architecture::PAGE
                };
                let store = RemoteStore::connect_as(
                    kind,
                    parse_url(&server.url)?,
                    &cairn::tools::Connect::default(),
                    b.client_pages.max(8),
                    // A transaction's changed pages count against the
                    // client's buffer too (past it they spill to a local
                    // file, not to the server: Cairn's client does not
                    // steal).
                    b.client_pages.max(8) * PAGE_BYTES,
                    (4 * b.client_pages).max(16),
                )?;
                Conn::Pages(server, store)
            }
            Arch::Object | Arch::Adaptive => {
                let server = ServerProcess::start_with(&self.exe, &self.dir, Some(&self.config))?;
                let (url, bytes) = (parse_url(&server.url)?, b.client_pages * PAGE_BYTES);
                let store = if self.arch == Arch::Adaptive {
                    ObjectStore::connect_adaptive(
                        url,
                        &cairn::tools::Connect::default(),
                        bytes,
                        AdaptivePolicy::default(),
                    )?
                } else {
                    ObjectStore::connect(url, &cairn::tools::Connect::default(), bytes)?
                };
                Conn::Objects(server, store)
            }
        };
        self.conn = Some(conn);
        Ok(())
    }

    /// Disconnects and stops the server (embedded: closes); what the
    /// database's pool read and wrote since it started (`None`: nothing
    /// was running, or the server did not say).
    fn disconnect(&mut self) -> Result<Option<StepPages>> {
        let served = |s: Option<crate::oo1::systems::cairn_page::ServedPages>| {
            s.map(|s| StepPages {
                read: s.read,
                written: s.written,
            })
        };
        Ok(match self.conn.take() {
            Some(Conn::Embedded(db)) => {
                let b = db.stats().buffer;
                db.close()?;
                Some(StepPages {
                    read: b.reads,
                    written: b.writes,
                })
            }
            Some(Conn::Pages(server, store)) => {
                drop(store);
                served(server.stop_with_stats()?)
            }
            Some(Conn::Objects(server, store)) => {
                drop(store);
                served(server.stop_with_stats()?)
            }
            None => None,
        })
    }

    /// Ends a step: the client disconnects and the server stops (the next
    /// [`System::cold`] starts them again); what the database's pool read
    /// and wrote during the step, since the cold start.
    pub fn end_step(&mut self) -> Result<Option<StepPages>> {
        self.disconnect()
    }

    /// Makes every cache cold: client, server and the OS's (see the module
    /// docs).
    pub fn cold(&mut self) -> Result<()> {
        self.disconnect()?;
        evict_os_cache(&self.dir)?;
        self.connect()
    }

    /// Stops the system (the server checkpoints; embedded closes).
    pub fn stop(mut self) -> Result<()> {
        self.disconnect().map(|_| ())
    }

    fn conn(&self) -> Result<&Conn> {
        self.conn
            .as_ref()
            .ok_or_else(|| SystemError::Server(format!("{} is not running", self.arch.name())))
    }

    /// The group of set `n` (A = 0), created if `create`.
    fn group(&self, n: usize, create: bool) -> Result<GroupId> {
        let name = group_name(n);
        Ok(match self.conn()? {
            Conn::Embedded(db) => match db.group(&name) {
                Ok(g) => g,
                Err(_) if create => db.create_group(&name)?,
                Err(e) => return Err(e.into()),
            },
            Conn::Pages(_, s) => s.group(&name, create)?,
            Conn::Objects(_, s) => s.group(&name, create)?,
        })
    }

    /// Runs `f` in one transaction of the system and commits it.
    fn in_txn<R>(&self, f: impl FnOnce(&mut dyn AcobTxn) -> Result<R>) -> Result<R> {
        match self.conn()? {
            Conn::Embedded(db) => {
                let mut t = db.begin()?;
                let r = f(&mut t)?;
                t.commit()?;
                Ok(r)
            }
            Conn::Pages(_, s) => {
                let mut t = s.begin()?;
                let r = f(&mut t)?;
                t.commit()?;
                Ok(r)
            }
            Conn::Objects(_, s) => {
                let mut t = s.begin()?;
                let r = f(&mut t)?;
                t.commit()?;
                Ok(r)
            }
        }
    }

    /// Stores `sets` (A, B, … in order), each in its group and one
    /// transaction.
    pub fn load(&mut self, sets: &[Set]) -> Result<Vec<StoredSet>> {
        let mut out = Vec::with_capacity(sets.len());
        for (n, set) in sets.iter().enumerate() {
            let group = self.group(n, true)?;
            let no = u8::try_from(n).map_err(|_| SystemError::Server(format!("set {n}: at most 256 sets")))?;
            out.push(self.in_txn(|t| Ok(store::load(t, group, set, no)?))?);
        }
        Ok(out)
    }

    /// Runs one query plan over a stored set in one transaction (see
    /// [`store::run`]).
    pub fn run(&mut self, stored: &StoredSet, visits: &[Visit], follows: bool) -> Result<RunCounts> {
        self.in_txn(|t| Ok(store::run(t, stored, visits, follows)?))
    }

    /// The client's counters (zero for embedded, which has no client).
    pub fn remote_stats(&self) -> RemoteStats {
        match &self.conn {
            Some(Conn::Pages(_, s)) => s.stats(),
            Some(Conn::Objects(_, s)) => s.stats(),
            _ => RemoteStats::default(),
        }
    }

    /// Pages read from disk by the buffer pool in this process (embedded
    /// only; a server's are its own).
    pub fn pages_read(&self) -> u64 {
        match &self.conn {
            Some(Conn::Embedded(db)) => db.stats().buffer.reads,
            _ => 0,
        }
    }
}

impl Drop for System {
    fn drop(&mut self) {
        // A system dropped without `stop` (a failed run): its server is
        // killed by `ServerProcess`'s own drop.
        if let Some(Conn::Embedded(db)) = self.conn.take() {
            let _ = db.close();
        }
    }
}
