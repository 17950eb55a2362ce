//! `cairn-page`: the model and operations of [`super::cairn_typed`] — the
//! very code `cairn-embedded` runs — through [`Database::connect`], the
//! page-server client, against `cairn serve` in a **separate process** on
//! loopback TCP (no token: loopback only).
//!
//! The server is the `cairn` binary itself, started as
//! `cairn serve DIR --listen 127.0.0.1:0`; its first line on stdout,
//! `listening on ADDR`, gives the port. It is stopped with SIGTERM, on which
//! it checkpoints and closes the database, so the directory is then what a
//! closed embedded database's is.
//!
//! - **build**: a new server on an empty directory, the database generated
//!   through the client (the same two passes as embedded, in transactions
//!   of 10,000 parts: the COMMIT limit, below), so the load
//!   time is the page server's and the build exercises the client's write
//!   path at scale.
//! - **cold**: the client disconnects, the server is stopped (SIGTERM), the
//!   directory's files are evicted from the OS page cache (as for
//!   `cairn-embedded`), a new server is started and a new client connects:
//!   a new `Database`, whose object cache, index cache and page buffer are
//!   empty (a restarted server cannot be reached by the old connection
//!   anyway, so clearing the old client's caches would not be enough).
//! - **counters**: the client's [`cairn::RemoteStats`] next to its object
//!   cache's (`round_trips`, `bytes_shipped` = sent + received,
//!   `pages_shipped`, `pages_revalidated`).
//!
//! The client keeps what it read across transactions under rights the
//! server calls back (callback locking): a warm run that reads only pages
//! (or, for `cairn-object`, objects and lookups) it has seen makes no round
//! trip.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use cairn::{Arch, Database, Options};

use super::cairn_typed::{options, Cairn, Deployment};
use crate::oo1::system::{dir_size_bytes, evict_os_cache, Error, Result};

/// Cairn's page server, one client.
pub type CairnPage = Cairn<PageServer>;

/// Cairn's file server, one client.
pub type CairnFile = Cairn<FileServer>;

/// Cairn's object server, one client.
pub type CairnObject = Cairn<ObjectServer>;

/// A database served by `cairn serve` in its own process, one page-server
/// client.
pub struct PageServer {
    dir: PathBuf,
    exe: PathBuf,
    server: Option<ServerProcess>,
    arch: Arch,
    /// The server locks key ranges of its B+-trees (object and adaptive
    /// clients only).
    key_ranges: bool,
}

impl PageServer {
    /// The database in `dir`, served by the `cairn` binary `exe`.
    pub fn new(dir: PathBuf, exe: PathBuf) -> PageServer {
        PageServer {
            dir,
            exe,
            server: None,
            arch: Arch::Page,
            key_ranges: false,
        }
    }

    /// Starts a server on the directory and connects a new client to it.
    fn serve_and_connect(&mut self) -> Result<Database> {
        let server = self
            .server
            .insert(ServerProcess::start_locking(&self.exe, &self.dir, self.key_ranges)?);
        Ok(Database::connect(
            &server.url,
            Options {
                arch: self.arch,
                ..options()
            },
        )?)
    }

    fn stop_server(&mut self) -> Result<()> {
        match self.server.take() {
            Some(s) => s.stop(),
            None => Ok(()),
        }
    }
}

impl Deployment for PageServer {
    const NAME: &'static str = "cairn-page";
    /// The client sends a transaction's changes as one COMMIT message of at
    /// most 16 MiB (the frame limit): 10,000 parts are about 1.8 MB of page
    /// redo, while the large database's 200,000 in one transaction (35 MB)
    /// are refused.
    const BUILD_TXN_PARTS: usize = 10_000;

    fn create(&mut self) -> Result<Database> {
        self.stop_server()?;
        let _ = std::fs::remove_dir_all(&self.dir);
        self.serve_and_connect()
    }

    fn close(&mut self, db: Database) -> Result<()> {
        db.close()?;
        self.stop_server()
    }

    fn open_cold(&mut self) -> Result<Database> {
        self.stop_server()?;
        evict_os_cache(&self.dir)?;
        self.serve_and_connect()
    }

    fn size_on_disk_bytes(&self) -> Option<u64> {
        Some(dir_size_bytes(&self.dir))
    }
}

/// `cairn-file`: the same server process, one file-server client (it reads
/// and writes the volume file itself; the server locks, allocates and logs).
pub struct FileServer(PageServer);

impl FileServer {
    /// The database in `dir`, served by the `cairn` binary `exe`.
    pub fn new(dir: PathBuf, exe: PathBuf) -> FileServer {
        FileServer(PageServer {
            arch: Arch::File,
            ..PageServer::new(dir, exe)
        })
    }
}

delegating_deployment!(FileServer, PageServer, "cairn-file");

/// `cairn-object`: the same server process, one object-server client (the
/// server reads and changes objects and walks the B+-trees for it).
pub struct ObjectServer(PageServer);

impl ObjectServer {
    /// The database in `dir`, served by the `cairn` binary `exe`.
    pub fn new(dir: PathBuf, exe: PathBuf) -> ObjectServer {
        ObjectServer(PageServer {
            arch: Arch::Object,
            ..PageServer::new(dir, exe)
        })
    }
}

delegating_deployment!(ObjectServer, PageServer, "cairn-object");

/// `cairn-adaptive`: the same server process, one adaptive client (the
/// object protocol, fetching pages of objects or single objects as it
/// measures: `cairn::tools::adaptive`; `Database::connect`'s default).
pub struct AdaptiveClient(PageServer);

impl AdaptiveClient {
    /// The database in `dir`, served by the `cairn` binary `exe`.
    pub fn new(dir: PathBuf, exe: PathBuf) -> AdaptiveClient {
        AdaptiveClient(PageServer {
            arch: Arch::Adaptive,
            ..PageServer::new(dir, exe)
        })
    }
}

delegating_deployment!(AdaptiveClient, PageServer, "cairn-adaptive");

/// `cairn-object` on a server that locks key ranges of its B+-trees
/// (`key_range_locking = 1`).
pub struct ObjectKeyRanges(PageServer);

impl ObjectKeyRanges {
    /// The database in `dir`, served by the `cairn` binary `exe`.
    pub fn new(dir: PathBuf, exe: PathBuf) -> ObjectKeyRanges {
        ObjectKeyRanges(PageServer {
            arch: Arch::Object,
            key_ranges: true,
            ..PageServer::new(dir, exe)
        })
    }
}

delegating_deployment!(ObjectKeyRanges, PageServer, "cairn-object-keyranges");

/// `cairn-adaptive` on a server that locks key ranges of its B+-trees.
pub struct AdaptiveKeyRanges(PageServer);

impl AdaptiveKeyRanges {
    /// The database in `dir`, served by the `cairn` binary `exe`.
    pub fn new(dir: PathBuf, exe: PathBuf) -> AdaptiveKeyRanges {
        AdaptiveKeyRanges(PageServer {
            arch: Arch::Adaptive,
            key_ranges: true,
            ..PageServer::new(dir, exe)
        })
    }
}

delegating_deployment!(AdaptiveKeyRanges, PageServer, "cairn-adaptive-keyranges");

/// `cairn-page` on a server that locks key ranges of its B+-trees: the
/// page client sends its index operations to the server as tree requests.
pub struct PageKeyRanges(PageServer);

impl PageKeyRanges {
    /// The database in `dir`, served by the `cairn` binary `exe`.
    pub fn new(dir: PathBuf, exe: PathBuf) -> PageKeyRanges {
        PageKeyRanges(PageServer {
            key_ranges: true,
            ..PageServer::new(dir, exe)
        })
    }
}

delegating_deployment!(PageKeyRanges, PageServer, "cairn-page-keyranges");

/// `cairn-file` on a server that locks key ranges of its B+-trees: the
/// file client sends its index operations to the server as tree requests.
pub struct FileKeyRanges(PageServer);

impl FileKeyRanges {
    /// The database in `dir`, served by the `cairn` binary `exe`.
    pub fn new(dir: PathBuf, exe: PathBuf) -> FileKeyRanges {
        FileKeyRanges(PageServer {
            arch: Arch::File,
            key_ranges: true,
            ..PageServer::new(dir, exe)
        })
    }
}

delegating_deployment!(FileKeyRanges, PageServer, "cairn-file-keyranges");

/// True for the served systems whose server locks key ranges.
pub fn serves_key_ranges(system: &str) -> bool {
    matches!(
        system,
        "cairn-page-keyranges" | "cairn-file-keyranges" | "cairn-object-keyranges" | "cairn-adaptive-keyranges"
    )
}

/// The client architecture each system served by `cairn serve` connects
/// with, by system name: what its deployment above puts in
/// [`Options::arch`] (`--clients` connects its sessions the same way).
pub fn served_arch(system: &str) -> Option<Arch> {
    match system {
        "cairn-page" => Some(Arch::Page),
        "cairn-file" => Some(Arch::File),
        "cairn-object" => Some(Arch::Object),
        "cairn-adaptive" => Some(Arch::Adaptive),
        "cairn-page-keyranges" => Some(Arch::Page),
        "cairn-file-keyranges" => Some(Arch::File),
        "cairn-object-keyranges" => Some(Arch::Object),
        "cairn-adaptive-keyranges" => Some(Arch::Adaptive),
        _ => None,
    }
}

/// How long a server may take to checkpoint and exit after SIGTERM.
const STOP_TIMEOUT: Duration = Duration::from_secs(120);

/// A running `cairn serve DIR --listen 127.0.0.1:0`. Dropped without
/// [`ServerProcess::stop`] (a failed run), it is killed.
pub struct ServerProcess {
    child: Child,
    /// `cairn://127.0.0.1:PORT`.
    pub url: String,
    /// The server's stdout, kept open: a server whose stdout was closed
    /// would fail on its next line (and its last says what it read and
    /// wrote: [`ServerProcess::stop_with_stats`]).
    stdout: BufReader<ChildStdout>,
}

/// What a stopped server's buffer pool read from and wrote to its volume
/// while it served (`cairn serve`'s last line).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServedPages {
    /// Pages read from the volume.
    pub read: u64,
    /// Pages written to the volume (evictions and checkpoints while
    /// serving; the final checkpoint's come after).
    pub written: u64,
}

impl ServedPages {
    /// Parses `served: pages_read=R pages_written=W`.
    fn parse(line: &str) -> Option<ServedPages> {
        let rest = line.trim().strip_prefix("served: ")?;
        let mut it = rest.split_whitespace();
        let read = it.next()?.strip_prefix("pages_read=")?.parse().ok()?;
        let written = it.next()?.strip_prefix("pages_written=")?.parse().ok()?;
        Some(ServedPages { read, written })
    }
}

impl ServerProcess {
    /// Starts `exe serve dir --listen 127.0.0.1:0` and waits for the address
    /// it prints. The server's log goes to this process's stderr, errors only
    /// unless `CAIRN_LOG` says otherwise.
    pub fn start(exe: &Path, dir: &Path) -> Result<ServerProcess> {
        ServerProcess::start_with(exe, dir, None)
    }

    /// [`ServerProcess::start`], with `key_range_locking = 1` in a config
    /// file next to `dir` if `key_ranges`.
    pub fn start_locking(exe: &Path, dir: &Path, key_ranges: bool) -> Result<ServerProcess> {
        if !key_ranges {
            return ServerProcess::start(exe, dir);
        }
        let config = dir.with_extension("keyranges.conf");
        std::fs::write(&config, "key_range_locking = 1\n")
            .map_err(|e| Error::io(format!("writing {}", config.display()), e))?;
        ServerProcess::start_with(exe, dir, Some(&config))
    }

    /// [`ServerProcess::start`] with `cairn serve --config FILE` (server
    /// limits and its buffer pool's size: `buffer_frames`).
    pub fn start_with(exe: &Path, dir: &Path, config: Option<&Path>) -> Result<ServerProcess> {
        let mut cmd = Command::new(exe);
        cmd.arg("serve")
            .arg(dir)
            .args(["--listen", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if let Some(c) = config {
            cmd.arg("--config").arg(c);
        }
        if std::env::var_os("CAIRN_LOG").is_none() {
            cmd.env("CAIRN_LOG", "error");
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| Error::io(format!("starting {} serve", exe.display()), e))?;
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout is piped"));
        let mut line = String::new();
        let addr = match stdout.read_line(&mut line) {
            Ok(_) => line.trim().strip_prefix("listening on ").map(str::to_string),
            Err(_) => None,
        };
        let Some(addr) = addr else {
            let _ = child.kill();
            let status = child.wait().map_or_else(|e| e.to_string(), |s| s.to_string());
            return Err(Error::Server(format!(
                "{} serve {} printed {:?}, not `listening on ADDR` ({status})",
                exe.display(),
                dir.display(),
                line.trim()
            )));
        };
        Ok(ServerProcess {
            child,
            url: format!("cairn://{addr}"),
            stdout,
        })
    }

    /// SIGTERM, then waits for the server to checkpoint and exit; an exit
    /// other than success is an error.
    pub fn stop(self) -> Result<()> {
        self.stop_with_stats().map(|_| ())
    }

    /// [`ServerProcess::stop`], with what the server read and wrote while
    /// it served (`None` if it did not say).
    pub fn stop_with_stats(mut self) -> Result<Option<ServedPages>> {
        self.stop_child()?;
        let mut out = String::new();
        let _ = self.stdout.read_to_string(&mut out);
        Ok(out.lines().rev().find_map(ServedPages::parse))
    }

    fn stop_child(&mut self) -> Result<()> {
        let pid = libc::pid_t::try_from(self.child.id())
            .map_err(|_| Error::Server(format!("pid {} does not fit a pid_t", self.child.id())))?;
        // SAFETY: kill(2) reads no memory of ours; `pid` is our child, not
        // yet waited for, so the id cannot have been reused by another
        // process.
        if unsafe { libc::kill(pid, libc::SIGTERM) } != 0 {
            return Err(Error::io(
                "sending SIGTERM to cairn serve",
                std::io::Error::last_os_error(),
            ));
        }
        let start = Instant::now();
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) if status.success() => return Ok(()),
                Ok(Some(status)) => return Err(Error::Server(format!("cairn serve exited with {status} on SIGTERM"))),
                Ok(None) if start.elapsed() < STOP_TIMEOUT => std::thread::sleep(Duration::from_millis(5)),
                Ok(None) => {
                    return Err(Error::Server(format!(
                        "cairn serve did not exit within {} s of SIGTERM",
                        STOP_TIMEOUT.as_secs()
                    )))
                }
                Err(e) => return Err(Error::io("waiting for cairn serve", e)),
            }
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ServedPages;

    #[test]
    fn the_served_line_parses_and_others_do_not() {
        assert_eq!(
            ServedPages::parse("served: pages_read=12 pages_written=3\n"),
            Some(ServedPages { read: 12, written: 3 })
        );
        assert_eq!(ServedPages::parse("listening on 127.0.0.1:1"), None);
        assert_eq!(ServedPages::parse("served: pages_read=x pages_written=3"), None);
        assert_eq!(ServedPages::parse("served: pages_written=3 pages_read=1"), None);
    }
}
