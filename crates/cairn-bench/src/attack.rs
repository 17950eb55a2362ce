//! `cairn bench attack`: an honest client's commit rate while another
//! client attacks the server without breaking a rule, as a ratio to its
//! rate with nobody attacking, measured in the same run against a fresh
//! `cairn serve` process for each case (the machine is shared and noisy).
//!
//! The honest client is a page client: it fetches one page X, changes the
//! bytes of one object on it and commits, `--commits` times. The attacks
//! are the ones that starved everybody before the server's bounds:
//!
//! - **trickle**: 32 sessions each announce a 16 MiB COMMIT and send one
//!   byte of it every 20 ms (the frame timeout runs from its first byte;
//!   request bytes are charged as they arrive);
//! - **idle connections**: 1,100 TCP connections that never say HELLO (32
//!   per address are let in, the rest refused);
//! - **lock waits**: one session holds X on another page and 600 of its
//!   transactions wait for that page (parked in the lock queue, no thread
//!   each);
//! - **open transactions**: one session opens 4,000 transactions, each
//!   holding S on another page;
//! - **silent callbacks**: sessions that cache the honest client's page and
//!   never answer a callback, one after another (each is ended when it has
//!   not answered in the lock timeout, and the next takes its place).
//!
//! The honest session is connected before each attack starts (the idle
//! connections fill their address's handshake slots).

use std::io::{self, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cairn::storage::wal::redo;
use cairn::storage::{Db, DbOptions, GroupId, PageId, TxnId};
use cairn_net::frame::{encode_frame, Flags};
use cairn_net::message::{Architecture, Hello, Message};
use cairn_net::page_service::{FetchStatus, Fetched, PageRequest, FETCH_CACHE, FETCH_S, FETCH_X, NO_GROUP};
use cairn_net::rpc::{Client, ClientOptions};
use cairn_net::{Address, RequestId};

/// What `cairn bench attack` was asked for.
#[derive(clap::Args, Debug, Clone)]
pub struct AttackArgs {
    /// Commits the honest client makes per measurement.
    #[arg(long, default_value_t = 1000)]
    pub commits: usize,
    /// The server's lock timeout, which is also how long it waits for a
    /// client to answer a callback (ms).
    #[arg(long, default_value_t = 2000)]
    pub lock_timeout_ms: u64,
    /// Only these attacks (comma-separated: trickle, idle, lock-waits,
    /// transactions, silent-callbacks); all by default.
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Also write the rates as JSON to this file (`cairn bench report`
    /// renders it).
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// The attacks, in report order.
pub const ATTACKS: [&str; 5] = ["trickle", "idle", "lock-waits", "transactions", "silent-callbacks"];

fn err(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(e.to_string())
}

/// The database: the honest client's object (100 bytes of 7s) on one page
/// and the attacker's on another.
struct Setup {
    honest: PageId,
    other: PageId,
}

fn setup(dir: &Path) -> io::Result<Setup> {
    let db = Db::create(dir, &DbOptions::default()).map_err(err)?;
    let elsewhere = db.create_group("elsewhere").map_err(err)?;
    let mut t = db.begin().map_err(err)?;
    let honest = t.create(GroupId::DEFAULT, &[7u8; 100]).map_err(err)?;
    let other = t.create(elsewhere, &[5u8; 100]).map_err(err)?;
    t.commit().map_err(err)?;
    db.close().map_err(err)?;
    Ok(Setup {
        honest: honest.page,
        other: other.page,
    })
}

/// A `cairn serve` child, stopped when dropped.
struct Server {
    child: Child,
    addr: Address,
}

impl Server {
    fn start(exe: &Path, dir: &Path, lock_timeout_ms: u64) -> io::Result<Server> {
        use std::io::BufRead;
        let config = dir.with_extension("conf");
        std::fs::write(&config, format!("lock_timeout_ms = {lock_timeout_ms}\n"))?;
        let mut child = Command::new(exe)
            .arg("serve")
            .arg(dir)
            .args(["--listen", "127.0.0.1:0", "--config"])
            .arg(&config)
            .env("CAIRN_LOG", "error")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let mut line = String::new();
        let stdout = child.stdout.take().ok_or_else(|| err("no stdout"))?;
        io::BufReader::new(stdout).read_line(&mut line)?;
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .ok_or_else(|| err(format!("cairn serve said {line:?}")))?
            .parse()
            .map_err(err)?;
        Ok(Server { child, addr })
    }

    fn client(&self) -> io::Result<Client> {
        let opts = ClientOptions {
            architecture: Architecture::PAGE,
            ..ClientOptions::default()
        };
        Client::connect(&self.addr, &opts).map_err(err)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Transaction ids: the client names its transactions.
fn next_txn() -> u64 {
    use std::sync::atomic::AtomicU64;
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

fn call(c: &Client, req: &PageRequest) -> io::Result<Vec<bytes::Bytes>> {
    let (kind, body) = req.encode();
    c.invoke(kind, body).map_err(err)?.collect().map_err(err)
}

fn fetch(c: &Client, txn: u64, page: PageId, mode: u8) -> io::Result<Vec<u8>> {
    let parts = call(
        c,
        &PageRequest::Fetch {
            txn,
            mode,
            group: NO_GROUP,
            pages: vec![(page.0, 0)],
        },
    )?;
    let part = Fetched::decode(parts.first().ok_or_else(|| err("no part"))?).map_err(err)?;
    if part.status != FetchStatus::Image {
        return Err(err(format!("page {page}: {:?}", part.status)));
    }
    Ok(part.image.to_vec())
}

/// The honest client: `n` commits, each changing its object's bytes;
/// commits per second.
fn honest(c: &Client, page: PageId, n: usize) -> io::Result<f64> {
    let start = Instant::now();
    for i in 0..n {
        let txn = next_txn();
        let image = fetch(c, txn, page, FETCH_X)?;
        // The object's 100 bytes are all one value; the next commit writes
        // the next value.
        let at = image
            .windows(100)
            .position(|w| w.iter().all(|&b| b == w[0]) && w[0] != 0)
            .ok_or_else(|| err("the object's bytes are not on the page"))?;
        let mut after = image.clone();
        after[at..at + 100].fill(10 + (i % 200) as u8);
        let rec = redo::page_record(TxnId(txn), page, Some(&image), &after);
        call(
            c,
            &PageRequest::Commit {
                txn,
                records: vec![rec],
            },
        )?;
    }
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

/// An attack running on its own threads until stopped.
struct Attack {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    /// Connections or sessions it keeps open (closed when it stops).
    _held: Vec<Box<dyn Send>>,
}

impl Attack {
    fn stop(self) {
        self.stop.store(true, Ordering::Release);
        for t in self.threads {
            let _ = t.join();
        }
    }
}

/// A session over a raw socket, after HELLO and WELCOME.
fn raw_session(addr: &Address) -> io::Result<TcpStream> {
    let Address::Tcp(a) = addr else {
        return Err(err("a TCP address"));
    };
    let mut s = TcpStream::connect(a)?;
    let mut hello = Vec::new();
    Message::Hello(Hello {
        architecture: Architecture::PAGE,
        auth: bytes::Bytes::new(),
        client_name: "trickler".into(),
    })
    .encode(&mut hello);
    s.write_all(&hello)?;
    let mut header = [0u8; cairn_net::frame::HEADER_SIZE];
    io::Read::read_exact(&mut s, &mut header)?;
    let h = cairn_net::frame::FrameHeader::decode(&header).map_err(err)?;
    let mut body = vec![0u8; h.body_len as usize];
    io::Read::read_exact(&mut s, &mut body)?;
    Ok(s)
}

fn trickle(server: &Server, _setup: &Setup) -> io::Result<Attack> {
    let stop = Arc::new(AtomicBool::new(false));
    // One 16 MiB COMMIT frame, shared by every trickler.
    let (kind, _) = PageRequest::Commit {
        txn: 1,
        records: Vec::new(),
    }
    .encode();
    let mut frame = Vec::new();
    encode_frame(kind, Flags::NONE, RequestId(1), &vec![0u8; 16 << 20], &mut frame);
    let frame = Arc::new(frame);
    let mut threads = Vec::new();
    for _ in 0..32 {
        let mut s = raw_session(&server.addr)?;
        let (stop, frame) = (stop.clone(), frame.clone());
        threads.push(std::thread::spawn(move || {
            for b in frame.iter() {
                if stop.load(Ordering::Acquire) || s.write_all(std::slice::from_ref(b)).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }));
    }
    Ok(Attack {
        stop,
        threads,
        _held: Vec::new(),
    })
}

fn idle(server: &Server, _setup: &Setup) -> io::Result<Attack> {
    let Address::Tcp(a) = server.addr.clone() else {
        return Err(err("a TCP address"));
    };
    let held: Vec<Box<dyn Send>> = (0..1100)
        .filter_map(|_| TcpStream::connect(a).ok())
        .map(|s| Box::new(s) as Box<dyn Send>)
        .collect();
    Ok(Attack {
        stop: Arc::new(AtomicBool::new(false)),
        threads: Vec::new(),
        _held: held,
    })
}

fn lock_waits(server: &Server, setup: &Setup) -> io::Result<Attack> {
    let c = server.client()?;
    fetch(&c, next_txn(), setup.other, FETCH_X)?;
    let mut calls = Vec::new();
    for _ in 0..600 {
        let (kind, body) = PageRequest::Fetch {
            txn: next_txn(),
            mode: FETCH_S,
            group: NO_GROUP,
            pages: vec![(setup.other.0, 0)],
        }
        .encode();
        calls.push(c.invoke(kind, body).map_err(err)?);
    }
    Ok(Attack {
        stop: Arc::new(AtomicBool::new(false)),
        threads: Vec::new(),
        _held: vec![Box::new(c), Box::new(calls)],
    })
}

fn transactions(server: &Server, setup: &Setup) -> io::Result<Attack> {
    let c = server.client()?;
    for _ in 0..4000 {
        fetch(&c, next_txn(), setup.other, FETCH_S)?;
    }
    Ok(Attack {
        stop: Arc::new(AtomicBool::new(false)),
        threads: Vec::new(),
        _held: vec![Box::new(c)],
    })
}

fn silent_callbacks(server: &Server, setup: &Setup) -> io::Result<Attack> {
    let stop = Arc::new(AtomicBool::new(false));
    let (addr, page) = (server.addr.clone(), setup.honest);
    let s = stop.clone();
    let thread = std::thread::spawn(move || {
        let opts = ClientOptions {
            architecture: Architecture::PAGE,
            ..ClientOptions::default()
        };
        while !s.load(Ordering::Acquire) {
            let Ok(c) = Client::connect(&addr, &opts) else {
                return;
            };
            let txn = next_txn();
            if fetch(&c, txn, page, FETCH_S | FETCH_CACHE).is_err() {
                continue;
            }
            let _ = call(&c, &PageRequest::Abort { txn });
            // Caches the page, answers nothing, until the server ends it.
            while !s.load(Ordering::Acquire) && call(&c, &PageRequest::Volume).is_ok() {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    });
    Ok(Attack {
        stop,
        threads: vec![thread],
        _held: Vec::new(),
    })
}

/// One case: a fresh database and server, the honest session, the attack
/// (none for the baseline), the honest rate.
fn case(exe: &Path, scratch: &Path, name: &str, args: &AttackArgs) -> io::Result<f64> {
    let dir = scratch.join(name);
    let _ = std::fs::remove_dir_all(&dir);
    let setup = setup(&dir)?;
    let server = Server::start(exe, &dir, args.lock_timeout_ms)?;
    let c = server.client()?;
    // Warm: the page in the server's pool, the session's first request done.
    honest(&c, setup.honest, 5)?;
    let attack = match name {
        "none" => None,
        "trickle" => Some(trickle(&server, &setup)?),
        "idle" => Some(idle(&server, &setup)?),
        "lock-waits" => Some(lock_waits(&server, &setup)?),
        "transactions" => Some(transactions(&server, &setup)?),
        "silent-callbacks" => Some(silent_callbacks(&server, &setup)?),
        other => {
            return Err(err(format!(
                "unknown attack {other:?}; the attacks are {}",
                ATTACKS.join(", ")
            )))
        }
    };
    let rate = honest(&c, setup.honest, args.commits);
    if let Some(a) = attack {
        a.stop();
    }
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
    rate
}

/// Runs the measurement and prints the table.
pub fn cli_main(args: &AttackArgs) -> io::Result<()> {
    let exe = std::env::current_exe()?;
    let scratch: PathBuf = std::env::temp_dir().join(format!("cairn-bench-attack-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;
    let attacks: Vec<&str> = if args.only.is_empty() {
        ATTACKS.to_vec()
    } else {
        args.only.iter().map(String::as_str).collect()
    };
    println!(
        "honest page client: {} commits (fetch X, change, commit) per case; lock timeout {} ms",
        args.commits, args.lock_timeout_ms
    );
    let base = case(&exe, &scratch, "none", args)?;
    println!("  {:<18} {base:>9.1} commits/s   1.00× (no attack)", "none");
    let mut rates = vec![("none", base)];
    for name in attacks {
        let rate = case(&exe, &scratch, name, args)?;
        println!("  {name:<18} {rate:>9.1} commits/s   {:>4.2}× no attack", rate / base);
        rates.push((name, rate));
    }
    let _ = std::fs::remove_dir_all(&scratch);
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&to_json(args, &rates)).map_err(err)?;
        std::fs::write(path, text + "\n").map_err(|e| io::Error::other(format!("{}: {e}", path.display())))?;
    }
    Ok(())
}

/// The `--json` document: the run's parameters and, per case (`none`
/// first), the honest client's commits per second and its ratio to `none`.
pub fn to_json(args: &AttackArgs, rates: &[(&str, f64)]) -> serde_json::Value {
    let m = crate::commit::machine();
    let base = rates.first().map_or(0.0, |r| r.1);
    serde_json::json!({
        "benchmark": "attack",
        "machine": { "cores": m.cores, "memory_bytes": m.memory_bytes },
        "config": { "commits": args.commits, "lock_timeout_ms": args.lock_timeout_ms },
        "results": rates.iter().map(|(name, rate)| serde_json::json!({
            "attack": name,
            "commits_per_s": rate,
            "ratio_to_no_attack": if base > 0.0 { Some(rate / base) } else { None },
        })).collect::<Vec<_>>(),
    })
}
