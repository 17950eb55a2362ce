//! `cairn serve`: opens (recovers) a database and serves it to page-server
//! clients over TCP and/or a Unix socket until SIGINT or SIGTERM, then
//! checkpoints and closes it.
//!
//! **Secure by default:** clients log in as users of the database (`cairn
//! user add`, SCRAM-SHA-256; the users file is re-read when it changes).
//! While the database has no users, connections without a login are trusted
//! as `admin` — only when every listener is on loopback or a Unix socket,
//! and the server says so in its log; a non-loopback TCP address is refused
//! at start unless the database has users (and then every connection must
//! log in, whatever its address).
//!
//! The first line on stdout is `listening on ADDR` for each listener (the
//! real port when 0 was asked for), so a parent process can find it. At a
//! clean stop the last line is `served: pages_read=R pages_written=W`: the
//! pages its buffer pool read from and wrote to the volume while serving
//! (the final checkpoint's writes come after), which benchmarks report.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context};
use cairn_net::rpc::Limits;
use cairn_net::transport::{Address, Listener};
use cairn_server::users::UsersFile;
use cairn_server::{PageServer, ServerConfig};
use cairn_storage::{Db, DbOptions};

/// What `cairn serve` was asked for.
#[derive(Debug, Clone)]
pub struct ServeArgs {
    /// The database directory (created if missing).
    pub dir: PathBuf,
    /// TCP address (`HOST:PORT`); default `127.0.0.1:7411` unless only
    /// `unix` is given.
    pub listen: Option<String>,
    /// Unix socket path.
    pub unix: Option<PathBuf>,
    /// Gone (shared tokens were replaced by users): giving it is an error
    /// that says what to do instead.
    pub token_file: Option<PathBuf>,
    /// File of `key = value` limits (see [`read_config`]).
    pub config: Option<PathBuf>,
    /// TLS for the TCP listener: the certificate chain and the private key
    /// (PEM files). Both or neither.
    pub tls: Option<(PathBuf, PathBuf)>,
    /// Serve an open (non-loopback) address without TLS: only behind a
    /// tunnel or on a private network. Logins stay safe (SCRAM); the data
    /// does not.
    pub no_tls: bool,
}

/// The default TCP address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7411";

/// What a `--config` file sets: the RPC layer's limits and the database's
/// options.
#[derive(Clone, Debug)]
pub struct FileConfig {
    /// Connections, requests, bytes, timeouts of the RPC layer.
    pub limits: Limits,
    /// How the database is opened (the lock timeout).
    pub db: DbOptions,
    /// Bytes of redo records one transaction may send.
    pub txn_bytes_max: u64,
    /// Rights to cache pages held at once by all clients.
    pub callback_rights_max: usize,
    /// Transactions open at once on the server.
    pub txns_max: usize,
    /// Requests that may block a thread (not lock waits) running at once on the server.
    pub waiting_max: usize,
    /// The same, for one session.
    pub waiting_per_session_max: usize,
}

impl Default for FileConfig {
    fn default() -> FileConfig {
        FileConfig {
            limits: Limits::default(),
            db: DbOptions::default(),
            txn_bytes_max: cairn_server::TXN_BYTES_MAX_DEFAULT,
            callback_rights_max: cairn_server::callbacks::RIGHTS_MAX_DEFAULT,
            txns_max: cairn_server::TXNS_MAX_DEFAULT,
            waiting_max: cairn_server::WAITING_MAX_DEFAULT,
            waiting_per_session_max: cairn_server::WAITING_PER_SESSION_MAX_DEFAULT,
        }
    }
}

/// Reads a limits file: one `key = value` per line, `#` comments. Keys:
/// `connections_max`, `in_flight_max`, `body_max`, `request_bytes_max`,
/// `reply_bytes_max`, `server_request_bytes_max`, `server_reply_bytes_max`,
/// `handshake_timeout_ms`, `frame_timeout_ms`, `shutdown_grace_ms`, and
/// `lock_timeout_ms` (how long a lock waits, and how long a writer waits for
/// a client to answer a callback), `key_range_locking` (1: B+-trees lock
/// keys and key ranges, not pages, so writers of different keys of one
/// index do not wait for each other; page- and file-server clients send
/// their tree operations to the server; 0, the default: page locks),
/// `txn_bytes_max` (redo bytes one
/// transaction may send over its STAGE and COMMIT messages),
/// `callback_rights_max` (rights to cache pages held at once by all clients;
/// past it pages are served under their lock alone), `buffer_frames` (pages
/// the server's buffer pool holds, at least 8: a benchmark sizes the
/// server's buffer this way), `login_failures_burst` and
/// `login_failure_refill_ms` (failed logins one address may have at once,
/// and the time after which it may fail one more), `handshakes_per_address_max`
/// (connections of one address in their handshake at once), `txns_max` (transactions
/// open at once on the server), `waiting_max` and `waiting_per_session_max`
/// (requests that may block a thread — a callback, I/O, a commit; not a lock
/// wait, which is parked — running at once, on the server and per session;
/// past either a request is refused with LIMIT). An unknown key or a bad number is an error
/// naming the line.
pub fn read_config(path: &Path) -> anyhow::Result<FileConfig> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut limits = Limits::default();
    let mut db = DbOptions::default();
    let mut txn_bytes_max = cairn_server::TXN_BYTES_MAX_DEFAULT;
    let mut callback_rights_max = cairn_server::callbacks::RIGHTS_MAX_DEFAULT;
    let mut txns_max = cairn_server::TXNS_MAX_DEFAULT;
    let mut waiting_max = cairn_server::WAITING_MAX_DEFAULT;
    let mut waiting_per_session_max = cairn_server::WAITING_PER_SESSION_MAX_DEFAULT;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let at = || format!("{}:{}", path.display(), i + 1);
        let (key, value) = line
            .split_once('=')
            .with_context(|| format!("{}: expected `key = value`, found {line:?}", at()))?;
        let (key, value) = (key.trim(), value.trim());
        let n: u64 = value
            .parse()
            .with_context(|| format!("{}: {key} wants a whole number, found {value:?}", at()))?;
        let small = |n: u64| u32::try_from(n).with_context(|| format!("{}: {key} = {n} is too large", at()));
        match key {
            "connections_max" => limits.connections_max = n as usize,
            "in_flight_max" => limits.in_flight_max = small(n)?,
            "body_max" => limits.body_max = small(n)?,
            "request_bytes_max" => limits.request_bytes_max = small(n)?,
            "reply_bytes_max" => limits.reply_bytes_max = small(n)?,
            "server_request_bytes_max" => limits.server_request_bytes_max = n,
            "server_reply_bytes_max" => limits.server_reply_bytes_max = n,
            "handshake_timeout_ms" => limits.handshake_timeout = std::time::Duration::from_millis(n),
            "frame_timeout_ms" => limits.frame_timeout = std::time::Duration::from_millis(n),
            "shutdown_grace_ms" => limits.shutdown_grace = std::time::Duration::from_millis(n),
            "login_failures_burst" => limits.login_failures_burst = small(n)?,
            "handshakes_per_address_max" => limits.handshakes_per_address_max = small(n)? as usize,
            "login_failure_refill_ms" => limits.login_failure_refill = std::time::Duration::from_millis(n),
            "lock_timeout_ms" => db.lock_timeout = std::time::Duration::from_millis(n),
            "key_range_locking" => {
                db.key_range_locking = match n {
                    0 => false,
                    1 => true,
                    _ => bail!("{}: key_range_locking is 0 (off) or 1 (on), not {n}", at()),
                }
            }
            "txn_bytes_max" => txn_bytes_max = n,
            "txns_max" => txns_max = small(n)? as usize,
            "waiting_max" => waiting_max = small(n)? as usize,
            "waiting_per_session_max" => waiting_per_session_max = small(n)? as usize,
            "buffer_frames" => {
                if n < 8 {
                    bail!("{}: buffer_frames = {n}: the buffer pool needs at least 8 pages", at());
                }
                db.volume.buffer_frames =
                    usize::try_from(n).with_context(|| format!("{}: {key} = {n} is too large", at()))?;
            }
            "callback_rights_max" => {
                callback_rights_max =
                    usize::try_from(n).with_context(|| format!("{}: {key} = {n} is too large", at()))?
            }
            other => bail!("{}: unknown key {other:?}", at()),
        }
    }
    Ok(FileConfig {
        limits: limits.validated(),
        db,
        txn_bytes_max,
        callback_rights_max,
        txns_max,
        waiting_max,
        waiting_per_session_max,
    })
}

/// Runs the server; returns when it has shut down cleanly.
pub fn serve(args: &ServeArgs) -> anyhow::Result<()> {
    if let Some(f) = &args.token_file {
        bail!(
            "--token-file {} is no longer supported: shared tokens were replaced by users with passwords; \
             add one with `cairn user add {} NAME --role admin` and connect as cairn://NAME:PASSWORD@HOST:PORT",
            f.display(),
            args.dir.display()
        );
    }
    let tcp = tcp_address(args)?;
    let FileConfig {
        limits,
        db: db_options,
        txn_bytes_max,
        callback_rights_max,
        txns_max,
        waiting_max,
        waiting_per_session_max,
    } = match &args.config {
        Some(c) => read_config(c)?,
        None => FileConfig::default(),
    };
    let db = Arc::new(
        Db::open_or_create(&args.dir, &db_options).with_context(|| format!("opening {}", args.dir.display()))?,
    );
    tracing::info!(dir = %args.dir.display(), recovered = ?db.recovery().committed, "database open");
    let users = UsersFile::open(&args.dir).with_context(|| format!("reading the users of {}", args.dir.display()))?;
    let has_users = !users.current().context("reading the users file")?.is_empty();
    let (local_only, tls) = exposure(args, tcp.as_ref(), has_users)?;
    let config = ServerConfig {
        trust_without_login: local_only,
        limits: limits.clone(),
        txn_bytes_max,
        callback_rights_max,
        txns_max,
        waiting_max,
        waiting_per_session_max,
    };
    let server = Arc::new(PageServer::new(db.clone(), &config).with_users(users));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    rt.block_on(serve_until_signal(args, tcp.as_ref(), tls.as_ref(), &server, &limits))?;
    drop(server);
    if let Some(p) = &args.unix {
        let _ = std::fs::remove_file(p);
    }
    close(db)
}

/// The TCP address to listen on: `--listen`, the default unless only a
/// Unix socket is asked for, or none.
fn tcp_address(args: &ServeArgs) -> anyhow::Result<Option<Address>> {
    Ok(match (&args.listen, &args.unix) {
        (Some(l), _) => Some(l.parse().map_err(|e: String| anyhow::anyhow!(e))?),
        (None, None) => Some(DEFAULT_LISTEN.parse().expect("a valid address")),
        (None, Some(_)) => None,
    })
}

/// Who may reach the server, checked before anything listens: an address
/// other than loopback needs users (else anyone could connect as admin)
/// and TLS (else the data crosses the network in the clear; `--no-tls`
/// allows it behind a tunnel). Returns whether the server is reachable
/// locally only (then connections without a login are trusted while there
/// are no users) and the TLS settings.
fn exposure(
    args: &ServeArgs,
    tcp: Option<&Address>,
    has_users: bool,
) -> anyhow::Result<(bool, Option<cairn_net::transport::ServerTls>)> {
    let local_only = match tcp {
        Some(Address::Tcp(a)) => a.ip().is_loopback(),
        _ => true,
    };
    if let (false, false, Some(a)) = (local_only, has_users, tcp) {
        bail!(
            "refusing to listen on {a}: the database has no users, so anyone who can reach it could use it; \
             add one with `cairn user add {} NAME --role admin`, or listen on loopback",
            args.dir.display()
        );
    }
    let tls = match &args.tls {
        Some((cert, key)) => Some(
            cairn_net::transport::ServerTls::from_pem_files(cert, key).with_context(|| {
                format!(
                    "loading the TLS certificate {} and key {}",
                    cert.display(),
                    key.display()
                )
            })?,
        ),
        None => None,
    };
    if let (false, None, Some(a)) = (local_only, &tls, tcp) {
        if !args.no_tls {
            bail!(
                "refusing to listen on {a} without TLS: the session's data would cross the network in the clear; \
                 give --tls-cert and --tls-key (clients then connect to cairns://), or --no-tls behind a tunnel"
            );
        }
        tracing::warn!(%a, "serving an open address without TLS (--no-tls): logins are safe, the data is not");
    }
    if has_users {
        tracing::info!("every connection must log in (SCRAM-SHA-256)");
    } else {
        tracing::warn!(
            "no users: connections without a login are trusted as admin (loopback and Unix sockets only); \
             `cairn user add` turns logins on"
        );
    }
    Ok((local_only, tls))
}

/// Binds the listeners, prints their addresses, serves until SIGTERM or
/// SIGINT, then stops them and waits for their connections to finish.
async fn serve_until_signal(
    args: &ServeArgs,
    tcp: Option<&Address>,
    tls: Option<&cairn_net::transport::ServerTls>,
    server: &Arc<PageServer>,
    limits: &Limits,
) -> anyhow::Result<()> {
    let mut listeners = Vec::new();
    if let Some(a) = tcp {
        let l = Listener::bind(a).await.with_context(|| format!("binding {a}"))?;
        let l = match tls {
            Some(t) => l.with_tls(t.clone()).context("setting up TLS on the TCP listener")?,
            None => l,
        };
        listeners.push(l);
    }
    if let Some(p) = &args.unix {
        let a = Address::Unix(p.clone());
        listeners.push(Listener::bind(&a).await.with_context(|| format!("binding {a}"))?);
    }
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut tasks = Vec::new();
    for l in listeners {
        let addr = l.local_addr().context("the listener's address")?;
        println!("listening on {addr}");
        let mut stop = stop_rx.clone();
        let shutdown = async move {
            let _ = stop.wait_for(|s| *s).await;
        };
        tasks.push(tokio::spawn(cairn_server::run(
            l,
            shutdown,
            server.clone(),
            limits.clone(),
        )));
    }
    std::io::stdout().flush().ok();
    wait_for_signal().await;
    tracing::info!("shutting down");
    let _ = stop_tx.send(true);
    for t in tasks {
        let _ = t.await;
    }
    Ok(())
}

/// Prints what the server read and wrote, and closes the database with its
/// final checkpoint.
fn close(db: Arc<Db>) -> anyhow::Result<()> {
    let db = Arc::try_unwrap(db).map_err(|_| anyhow::anyhow!("the database is still in use after shutdown"))?;
    let pool = db.stats().buffer;
    // (A parent that stopped reading our stdout is no reason to fail.)
    let mut out = std::io::stdout();
    let _ = writeln!(out, "served: pages_read={} pages_written={}", pool.reads, pool.writes);
    let _ = out.flush();
    db.close().context("the final checkpoint")?;
    tracing::info!("closed cleanly");
    Ok(())
}

async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        // Without signal handlers the server runs until killed.
        std::future::pending::<()>().await;
        return;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config_of(text: &str) -> anyhow::Result<FileConfig> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("serve.conf");
        std::fs::write(&path, text).unwrap();
        read_config(&path)
    }

    #[test]
    fn a_config_file_sets_the_server_bounds_and_names_a_bad_line() {
        let c = config_of(
            "# bounds\ncallback_rights_max = 64\ntxn_bytes_max = 4096 # small\nlock_timeout_ms = 1500\nbuffer_frames = 50\n",
        )
        .unwrap();
        assert_eq!(c.db.volume.buffer_frames, 50);
        assert_eq!(c.callback_rights_max, 64);
        assert_eq!(c.txn_bytes_max, 4096);
        assert_eq!(c.db.lock_timeout, std::time::Duration::from_millis(1500));
        let defaults = config_of("").unwrap();
        assert_eq!(
            defaults.callback_rights_max,
            cairn_server::callbacks::RIGHTS_MAX_DEFAULT
        );
        let e = config_of("connections_max = 4\ncallback_rights = 1\n").unwrap_err();
        assert!(e.to_string().contains(":2: unknown key"), "{e}");
        let e = config_of("buffer_frames = 3\n").unwrap_err();
        assert!(e.to_string().contains("at least 8 pages"), "{e}");
        let e = config_of("callback_rights_max = many\n").unwrap_err();
        assert!(
            e.to_string().contains("callback_rights_max wants a whole number"),
            "{e}"
        );
    }

    #[test]
    fn key_range_locking_is_switched_on_by_the_config_and_off_by_default() {
        assert!(!config_of("").unwrap().db.key_range_locking);
        assert!(config_of("key_range_locking = 1\n").unwrap().db.key_range_locking);
        assert!(!config_of("key_range_locking = 0\n").unwrap().db.key_range_locking);
        let e = config_of("lock_timeout_ms = 10\nkey_range_locking = 2\n").unwrap_err();
        assert!(
            e.to_string().contains(":2: key_range_locking is 0 (off) or 1 (on)"),
            "{e}"
        );
    }
}
