//! `cairn bench rpc`: PRIMA's Remote Cooperation System measurement (`docs/benchmarks.md`, "RPC").
//!
//! N empty tasks from client processes to a server that replies at once, keeping K tasks in
//! flight per client (PRIMA's Figure 4.1 loop: invoke K, then one new invocation per result),
//! for 1–8 client processes, over a Unix socket and TCP loopback. Reported: elapsed / tasks.
//!
//! The floor, `raw-pingpong`, is the same 32-byte frame over the same kind of socket with no RPC
//! layer: blocking sockets, a thread per connection on the server echoing whatever whole frames
//! it has read in one write, and the same K-in-flight loop on the client. Also measured: one
//! request answered by a stream of partial replies (1,000 by default).
//!
//! The server (Cairn's [`cairn_net::rpc::run`] on a two-worker tokio runtime, and the raw echo
//! threads) runs in the benchmark's own process, which otherwise only waits; each client is a
//! separate process (`cairn bench rpc-client`, hidden) driven over its stdin/stdout. Every
//! client opens its connections before the clock starts; the parent times from the first `run`
//! command to the last `done`. Each setting is measured `reps` times, the systems interleaved,
//! and the median is reported with min–max.

use std::collections::VecDeque;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use cairn_net::frame::{self, Flags, HEADER_SIZE};
use cairn_net::message::{Fault, Hello};
use cairn_net::rpc::{self, Client, ClientOptions, Handler, Limits, Replier, Request};
use cairn_net::transport::{Address, Listener};
use cairn_net::{Kind, RequestId};

/// The empty task: replied to at once with an empty body.
pub const EMPTY: Kind = Kind(0x0100);
/// Body `n: u32`: `n` empty partial replies, then an empty final reply.
pub const STREAM: Kind = Kind(0x0101);

/// What to run.
#[derive(Clone, Debug)]
pub struct RpcOptions {
    /// The `cairn` binary, started as `cairn bench rpc-client` for each client process.
    pub exe: PathBuf,
    /// Tasks per measurement, over all client processes.
    pub tasks: usize,
    /// Tasks kept in flight per client.
    pub in_flight: Vec<usize>,
    /// Client process counts.
    pub clients: Vec<usize>,
    /// `"unix"`, `"tcp"`.
    pub transports: Vec<String>,
    /// Repetitions of each measurement.
    pub reps: usize,
    /// Parts of the streaming reply.
    pub stream_parts: usize,
    /// Streaming requests per measurement.
    pub stream_tasks: usize,
}

impl RpcOptions {
    /// The full run (`docs/benchmarks.md`).
    pub fn full(exe: PathBuf) -> RpcOptions {
        RpcOptions {
            exe,
            tasks: 10_000,
            in_flight: vec![1, 2, 5, 10, 20, 50, 100, 200],
            clients: vec![1, 2, 4, 8],
            transports: vec!["unix".into(), "tcp".into()],
            reps: 3,
            stream_parts: 1000,
            stream_tasks: 20,
        }
    }
}

/// `cairn bench rpc`'s arguments; the defaults are the full run of `docs/benchmarks.md`.
#[derive(Clone, Debug, clap::Args)]
pub struct RpcArgs {
    /// Tasks per measurement (over all client processes).
    #[arg(long, default_value_t = 10_000)]
    pub tasks: usize,
    /// Tasks kept in flight per client, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2,5,10,20,50,100,200")]
    pub in_flight: Vec<usize>,
    /// Client process counts, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8")]
    pub clients: Vec<usize>,
    /// Transports, comma-separated: unix, tcp.
    #[arg(long, value_delimiter = ',', default_value = "unix,tcp")]
    pub transport: Vec<String>,
    /// Repetitions of each measurement (the median is reported).
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// Partial replies in the streaming case (0 to skip it).
    #[arg(long, default_value_t = 1000)]
    pub stream_parts: usize,
    /// Streaming requests per measurement.
    #[arg(long, default_value_t = 20)]
    pub stream_tasks: usize,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// `cairn bench rpc`: runs with `args`, starting client processes from this executable.
pub fn cli_main(args: &RpcArgs) -> io::Result<()> {
    for t in &args.transport {
        if t != "unix" && t != "tcp" {
            return Err(err(format!("unknown transport {t:?} (unix, tcp)")));
        }
    }
    let opts = RpcOptions {
        exe: std::env::current_exe()?,
        tasks: args.tasks.max(1),
        in_flight: args.in_flight.iter().map(|&k| k.max(1)).collect(),
        clients: args.clients.clone(),
        transports: args.transport.clone(),
        reps: args.reps,
        stream_parts: args.stream_parts,
        stream_tasks: args.stream_tasks,
    };
    main(&opts, args.json.as_deref())
}

/// One measured setting.
#[derive(Clone, Debug, PartialEq)]
pub struct RpcResult {
    /// `"cairn-rpc"` or `"raw-pingpong"`.
    pub system: &'static str,
    /// `"unix"` or `"tcp"`.
    pub transport: String,
    /// `"each"` (every request written as it is made) or `"coalesced"` (requests made while
    /// working through received replies leave together).
    pub writes: &'static str,
    /// Client processes.
    pub clients: usize,
    /// Tasks in flight per client.
    pub in_flight: usize,
    /// Tasks per measurement.
    pub tasks: usize,
    /// Partial replies per task (0 for the plain task).
    pub parts_per_task: usize,
    /// Median over repetitions of elapsed / tasks, µs.
    pub mean_us_per_task: f64,
    /// Fastest repetition.
    pub min_us_per_task: f64,
    /// Slowest repetition.
    pub max_us_per_task: f64,
}

/// The whole run.
#[derive(Clone, Debug, Default)]
pub struct RpcReport {
    /// Every setting, plain tasks first, then the streaming ones.
    pub results: Vec<RpcResult>,
    /// Repetitions per setting.
    pub reps: usize,
}

impl RpcReport {
    fn find(
        &self,
        system: &str,
        writes: &str,
        transport: &str,
        clients: usize,
        in_flight: usize,
        parts: usize,
    ) -> Option<&RpcResult> {
        self.results.iter().find(|r| {
            r.system == system
                && (r.writes == writes || in_flight == 1)
                && r.transport == transport
                && r.clients == clients
                && r.in_flight == in_flight
                && r.parts_per_task == parts
        })
    }
}

fn err(msg: impl Into<String>) -> io::Error {
    io::Error::other(msg.into())
}

// ---------------------------------------------------------------------------------------------
// The servers.

struct BenchHandler;

impl Handler for BenchHandler {
    type Session = ();

    fn open(&self, _hello: &Hello, _peer: &str, _user: Option<&str>) -> Result<(), Fault> {
        Ok(())
    }

    async fn handle(&self, _session: &(), request: Request, reply: &Replier) -> Result<Bytes, Fault> {
        if request.kind == STREAM && request.body.len() == 4 {
            let n = u32::from_le_bytes(request.body[..4].try_into().expect("4 bytes"));
            for _ in 0..n {
                if reply.part(Bytes::new()).await.is_err() {
                    break;
                }
            }
        }
        Ok(Bytes::new())
    }
}

/// The servers, running until dropped.
struct Servers {
    dir: PathBuf,
    cairn_unix: Address,
    cairn_tcp: Address,
    raw_unix: PathBuf,
    raw_tcp: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Servers {
    fn start() -> io::Result<Servers> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let dir = std::env::temp_dir().join(format!("cairn-bench-rpc-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let cairn_unix = Address::Unix(dir.join("cairn.sock"));
        let raw_unix = dir.join("raw.sock");

        // The raw echo servers: plain threads.
        let raw_u = UnixListener::bind(&raw_unix)?;
        std::thread::spawn(move || {
            for s in raw_u.incoming().flatten() {
                std::thread::spawn(move || raw_echo(s));
            }
        });
        let raw_t = TcpListener::bind("127.0.0.1:0")?;
        let raw_tcp = raw_t.local_addr()?;
        std::thread::spawn(move || {
            for s in raw_t.incoming().flatten() {
                let _ = s.set_nodelay(true);
                std::thread::spawn(move || raw_echo(s));
            }
        });

        // Cairn's server: rpc::run on a multi-threaded runtime, both transports.
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let unix = cairn_unix.clone();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .expect("server runtime");
            rt.block_on(async move {
                let handler = Arc::new(BenchHandler);
                let tcp = Listener::bind(&Address::Tcp("127.0.0.1:0".parse().expect("address")))
                    .await
                    .expect("bind tcp");
                let unix = Listener::bind(&unix).await.expect("bind unix");
                addr_tx
                    .send(tcp.local_addr().expect("tcp address"))
                    .expect("send address");
                let (stop_all, _) = tokio::sync::broadcast::channel::<()>(1);
                let mut s1 = stop_all.subscribe();
                let mut s2 = stop_all.subscribe();
                let a = tokio::spawn(rpc::run(
                    tcp,
                    async move {
                        let _ = s1.recv().await;
                    },
                    handler.clone(),
                    Limits::default(),
                ));
                let b = tokio::spawn(rpc::run(
                    unix,
                    async move {
                        let _ = s2.recv().await;
                    },
                    handler,
                    Limits::default(),
                ));
                let _ = stop_rx.await;
                let _ = stop_all.send(());
                let _ = a.await;
                let _ = b.await;
            });
        });
        let cairn_tcp = addr_rx.recv().map_err(|_| err("the server did not start"))?;
        Ok(Servers {
            dir,
            cairn_unix,
            cairn_tcp,
            raw_unix,
            raw_tcp,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }

    fn client_args(&self) -> Vec<String> {
        vec![
            "--cairn-unix".into(),
            self.cairn_unix.to_string(),
            "--cairn-tcp".into(),
            self.cairn_tcp.to_string(),
            "--raw-unix".into(),
            self.raw_unix.display().to_string(),
            "--raw-tcp".into(),
            self.raw_tcp.to_string(),
        ]
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The raw floor's server side: echo every whole frame read, in one write per read.
fn raw_echo<S: Read + Write>(mut s: S) {
    let mut buf = vec![0u8; 64 << 10];
    let mut have = 0;
    loop {
        let n = match s.read(&mut buf[have..]) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        have += n;
        let whole = have - have % HEADER_SIZE;
        if whole > 0 {
            if s.write_all(&buf[..whole]).is_err() {
                return;
            }
            buf.copy_within(whole..have, 0);
            have -= whole;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The client process.

/// Addresses a client process connects to (`cairn bench rpc-client`'s arguments).
#[derive(Clone, Debug, clap::Args)]
pub struct ClientArgs {
    /// Cairn's server on the Unix socket (`unix:PATH`).
    #[arg(long)]
    pub cairn_unix: String,
    /// Cairn's server on TCP.
    #[arg(long)]
    pub cairn_tcp: String,
    /// The raw echo server's Unix socket path.
    #[arg(long)]
    pub raw_unix: String,
    /// The raw echo server's TCP address.
    #[arg(long)]
    pub raw_tcp: String,
}

enum RawConn {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl RawConn {
    fn stream(&mut self) -> &mut dyn ReadWrite {
        match self {
            RawConn::Unix(s) => s,
            RawConn::Tcp(s) => s,
        }
    }
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

/// `cairn bench rpc-client`: connects to all four servers, then runs each `run SYSTEM TRANSPORT
/// K N` line from stdin and answers `done`; exits at end of input.
pub fn client_main(args: &ClientArgs) -> io::Result<()> {
    let parse = |s: &str| s.parse::<Address>().map_err(err);
    let opts = ClientOptions {
        client_name: "cairn bench rpc".into(),
        ..ClientOptions::default()
    };
    let connect = |a: &Address| Client::connect(a, &opts).map_err(|e| err(e.to_string()));
    let cairn_unix = connect(&parse(&args.cairn_unix)?)?;
    let cairn_tcp = connect(&parse(&args.cairn_tcp)?)?;
    let mut raw_unix = RawConn::Unix(UnixStream::connect(&args.raw_unix)?);
    let raw_tcp = TcpStream::connect(&args.raw_tcp)?;
    raw_tcp.set_nodelay(true)?;
    let mut raw_tcp = RawConn::Tcp(raw_tcp);
    let stdout = io::stdout();
    let mut out = stdout.lock();
    writeln!(out, "ready")?;
    out.flush()?;
    for line in io::stdin().lock().lines() {
        let line = line?;
        let words: Vec<&str> = line.split_whitespace().collect();
        let [cmd, system, writes, transport, k, n] = words[..] else {
            return Err(err(format!("bad command {line:?}")));
        };
        let k: usize = k.parse().map_err(|_| err("bad K"))?;
        let n: usize = n.parse().map_err(|_| err("bad N"))?;
        let coalesce = match writes {
            "each" => false,
            "coalesced" => true,
            _ => return Err(err(format!("bad command {line:?}"))),
        };
        match (cmd, system, transport) {
            ("run", "cairn-rpc", "unix") => run_cairn(&cairn_unix, k, n, coalesce)?,
            ("run", "cairn-rpc", "tcp") => run_cairn(&cairn_tcp, k, n, coalesce)?,
            ("run", "raw-pingpong", "unix") => run_raw(raw_unix.stream(), k, n, coalesce)?,
            ("run", "raw-pingpong", "tcp") => run_raw(raw_tcp.stream(), k, n, coalesce)?,
            ("stream", "cairn-rpc", "unix") => run_stream(&cairn_unix, k, n)?,
            ("stream", "cairn-rpc", "tcp") => run_stream(&cairn_tcp, k, n)?,
            _ => return Err(err(format!("bad command {line:?}"))),
        }
        writeln!(out, "done")?;
        out.flush()?;
    }
    Ok(())
}

/// PRIMA's client loop over Cairn's RPC: K invocations, then one per result. With `coalesce`,
/// the invocations made while working through replies already received are deferred
/// ([`Client::invoke_deferred`]) and leave together before the next wait that blocks.
fn run_cairn(c: &Client, k: usize, n: usize, coalesce: bool) -> io::Result<()> {
    let e = |e: cairn_net::Error| err(e.to_string());
    let mut q = VecDeque::with_capacity(k);
    let mut invoked = 0;
    while invoked < n.min(k) {
        q.push_back(c.invoke(EMPTY, Bytes::new()).map_err(e)?);
        invoked += 1;
    }
    while let Some(call) = q.pop_front() {
        call.wait().map_err(e)?;
        if invoked < n {
            let next = if coalesce {
                c.invoke_deferred(EMPTY, Bytes::new())
            } else {
                c.invoke(EMPTY, Bytes::new())
            };
            q.push_back(next.map_err(e)?);
            invoked += 1;
        }
    }
    Ok(())
}

/// `n` requests answered by `parts` partial replies each, one at a time.
fn run_stream(c: &Client, parts: usize, n: usize) -> io::Result<()> {
    let e = |e: cairn_net::Error| err(e.to_string());
    for _ in 0..n {
        let mut call = c
            .invoke(STREAM, Bytes::copy_from_slice(&(parts as u32).to_le_bytes()))
            .map_err(e)?;
        let mut got = 0;
        while let Some(p) = call.next_part().map_err(e)? {
            got += 1;
            if p.last {
                break;
            }
        }
        if got != parts + 1 {
            return Err(err(format!("stream gave {got} parts, expected {}", parts + 1)));
        }
    }
    Ok(())
}

/// The same loop with the bare frame over a blocking socket; with `coalesce`, the requests made
/// while replies are buffered leave in one write before the next blocking read.
fn run_raw(s: &mut dyn ReadWrite, k: usize, n: usize, coalesce: bool) -> io::Result<()> {
    let mut out: Vec<u8> = Vec::new();
    let ping = frame::encode_header(Kind::PING, Flags::NONE, RequestId(1), &[]);
    let mut buf = vec![0u8; 64 << 10];
    let mut have = 0usize;
    let mut invoked = 0;
    let mut done = 0;
    while invoked < n.min(k) {
        s.write_all(&ping)?;
        invoked += 1;
    }
    while done < n {
        if have < HEADER_SIZE {
            if !out.is_empty() {
                s.write_all(&out)?;
                out.clear();
            }
            let r = s.read(&mut buf[have..])?;
            if r == 0 {
                return Err(err("raw server closed"));
            }
            have += r;
            continue;
        }
        // One reply taken: shift it out and send the next request.
        buf.copy_within(HEADER_SIZE..have, 0);
        have -= HEADER_SIZE;
        done += 1;
        if invoked < n {
            if coalesce {
                out.extend_from_slice(&ping);
            } else {
                s.write_all(&ping)?;
            }
            invoked += 1;
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The driver.

struct ClientProc {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl ClientProc {
    fn expect_line(&mut self, want: &str) -> io::Result<()> {
        let mut line = String::new();
        self.stdout.read_line(&mut line)?;
        if line.trim() != want {
            return Err(err(format!("client process said {line:?}, expected {want:?}")));
        }
        Ok(())
    }
}

impl Drop for ClientProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn_clients(exe: &Path, servers: &Servers, count: usize) -> io::Result<Vec<ClientProc>> {
    let mut procs = Vec::with_capacity(count);
    for _ in 0..count {
        let mut child = Command::new(exe)
            .args(["bench", "rpc-client"])
            .args(servers.client_args())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let stdin = child.stdin.take().ok_or_else(|| err("no stdin"))?;
        let stdout = BufReader::new(child.stdout.take().ok_or_else(|| err("no stdout"))?);
        procs.push(ClientProc { child, stdin, stdout });
    }
    for p in &mut procs {
        p.expect_line("ready")?;
    }
    Ok(procs)
}

/// Sends one command to every client at once and returns the elapsed wall time in µs.
fn timed(procs: &mut [ClientProc], command: impl Fn(usize) -> String) -> io::Result<f64> {
    let start = Instant::now();
    for (i, p) in procs.iter_mut().enumerate() {
        writeln!(p.stdin, "{}", command(i))?;
        p.stdin.flush()?;
    }
    for p in procs.iter_mut() {
        p.expect_line("done")?;
    }
    Ok(start.elapsed().as_secs_f64() * 1e6)
}

fn median_min_max(mut xs: Vec<f64>) -> (f64, f64, f64) {
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    let median = if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    };
    (median, xs[0], xs[n - 1])
}

/// Runs the benchmark. Progress goes to stderr.
pub fn run(opts: &RpcOptions) -> io::Result<RpcReport> {
    let servers = Servers::start()?;
    let reps = opts.reps.max(1);
    let mut report = RpcReport {
        results: Vec::new(),
        reps,
    };
    for &clients in &opts.clients {
        let clients = clients.max(1);
        let mut procs = spawn_clients(&opts.exe, &servers, clients)?;
        // Tasks split over the clients; the first ones take the remainder.
        let share = |i: usize| opts.tasks / clients + usize::from(i < opts.tasks % clients);
        // Warm up every connection once.
        for t in &opts.transports {
            for sys in ["cairn-rpc", "raw-pingpong"] {
                timed(&mut procs, |i| format!("run {sys} each {t} 1 {}", share(i).min(200)))?;
            }
        }
        for t in &opts.transports {
            eprint!("rpc: {clients} client(s), {t}:");
            for &k in &opts.in_flight {
                // One synchronous setting; two write modes when there is something to coalesce.
                let settings: &[(&'static str, &'static str)] = if k == 1 {
                    &[("raw-pingpong", "each"), ("cairn-rpc", "each")]
                } else {
                    &[
                        ("raw-pingpong", "each"),
                        ("cairn-rpc", "each"),
                        ("raw-pingpong", "coalesced"),
                        ("cairn-rpc", "coalesced"),
                    ]
                };
                let mut samples = vec![Vec::new(); settings.len()];
                for _ in 0..reps {
                    for (s, (sys, writes)) in settings.iter().enumerate() {
                        let us = timed(&mut procs, |i| format!("run {sys} {writes} {t} {k} {}", share(i)))?;
                        samples[s].push(us / opts.tasks as f64);
                    }
                }
                for (s, &(sys, writes)) in settings.iter().enumerate() {
                    let (median, min, max) = median_min_max(samples[s].clone());
                    report.results.push(RpcResult {
                        system: sys,
                        transport: t.clone(),
                        writes,
                        clients,
                        in_flight: k,
                        tasks: opts.tasks,
                        parts_per_task: 0,
                        mean_us_per_task: median,
                        min_us_per_task: min,
                        max_us_per_task: max,
                    });
                }
                eprint!(" K={k}");
            }
            eprintln!();
        }
        if clients == 1 && opts.stream_parts > 0 && opts.stream_tasks > 0 {
            for t in &opts.transports {
                let mut samples = Vec::new();
                for _ in 0..reps {
                    let us = timed(&mut procs, |_| {
                        format!("stream cairn-rpc each {t} {} {}", opts.stream_parts, opts.stream_tasks)
                    })?;
                    samples.push(us / opts.stream_tasks as f64);
                }
                let (median, min, max) = median_min_max(samples);
                report.results.push(RpcResult {
                    system: "cairn-rpc",
                    transport: t.clone(),
                    writes: "each",
                    clients: 1,
                    in_flight: 1,
                    tasks: opts.stream_tasks,
                    parts_per_task: opts.stream_parts,
                    mean_us_per_task: median,
                    min_us_per_task: min,
                    max_us_per_task: max,
                });
            }
        }
        drop(procs);
    }
    Ok(report)
}

// ---------------------------------------------------------------------------------------------
// Reporting.

/// The human table: µs per task for the floor and Cairn in both write modes, the ratios to the
/// floor, and Cairn's rate against its own synchronous rate; then the streaming case and the two
/// targets.
pub fn print_table(report: &RpcReport, opts: &RpcOptions, out: &mut dyn Write) -> io::Result<()> {
    let m = crate::commit::machine();
    writeln!(
        out,
        "RPC: {} empty tasks per measurement, mean µs per task (median of {}); {} cores, {:.1} GiB; server: tokio, {} \
         workers",
        opts.tasks,
        report.reps,
        m.cores,
        m.memory_bytes as f64 / (1u64 << 30) as f64,
        m.cores
    )?;
    writeln!(
        out,
        "each: a write per request; coal: requests made while taking replies leave in one write (invoke_deferred)"
    )?;
    writeln!(
        out,
        "{:<4} {:>3} {:>4} | {:>8} {:>8} {:>7} {:>6} | {:>8} {:>8} {:>7} {:>6}",
        "sock", "cl", "K", "raw each", "rpc each", "rpc/raw", "×sync", "raw coal", "rpc coal", "rpc/raw", "×sync"
    )?;
    let f = |x: Option<f64>, prec: usize| x.map_or("-".to_string(), |v| format!("{v:.prec$}"));
    let ratio = |a: Option<f64>, b: Option<f64>| a.zip(b).map(|(a, b)| a / b);
    for r in report
        .results
        .iter()
        .filter(|r| r.system == "cairn-rpc" && r.parts_per_task == 0 && r.writes == "each")
    {
        let (t, c, k) = (r.transport.as_str(), r.clients, r.in_flight);
        let get = |sys: &str, writes: &str| report.find(sys, writes, t, c, k, 0).map(|x| x.mean_us_per_task);
        let sync = report.find("cairn-rpc", "each", t, c, 1, 0).map(|x| x.mean_us_per_task);
        let (re, ce) = (get("raw-pingpong", "each"), get("cairn-rpc", "each"));
        let (rc, cc) = if k == 1 {
            (None, None)
        } else {
            (get("raw-pingpong", "coalesced"), get("cairn-rpc", "coalesced"))
        };
        writeln!(
            out,
            "{:<4} {:>3} {:>4} | {:>8} {:>8} {:>7} {:>6} | {:>8} {:>8} {:>7} {:>6}",
            t,
            c,
            k,
            f(re, 2),
            f(ce, 2),
            f(ratio(ce, re), 2),
            f(ratio(sync, ce), 1),
            f(rc, 2),
            f(cc, 2),
            f(ratio(cc, rc), 2),
            f(ratio(sync, cc), 1),
        )?;
    }
    for r in report.results.iter().filter(|r| r.parts_per_task > 0) {
        let sync = report.find("cairn-rpc", "each", &r.transport, 1, 1, 0);
        let per_part = r.mean_us_per_task / (r.parts_per_task + 1) as f64;
        writeln!(
            out,
            "stream {:<4}: 1 request, {} partial replies + final: {:.1} µs per request, {:.3} µs per part{}",
            r.transport,
            r.parts_per_task,
            r.mean_us_per_task,
            per_part,
            sync.map_or(String::new(), |s| format!(
                " ({:.1}× the synchronous rate)",
                s.mean_us_per_task / per_part
            )),
        )?;
    }
    for t in report
        .results
        .iter()
        .map(|r| r.transport.clone())
        .collect::<std::collections::BTreeSet<_>>()
    {
        let raw = report.find("raw-pingpong", "each", &t, 1, 1, 0);
        let sync = report.find("cairn-rpc", "each", &t, 1, 1, 0);
        if let (Some(raw), Some(sync)) = (raw, sync) {
            let ratio = sync.mean_us_per_task / raw.mean_us_per_task;
            writeln!(
                out,
                "target {t}: synchronous call ≤ 1.5× raw ping-pong: {ratio:.2}× — {}",
                if ratio <= 1.5 { "met" } else { "NOT met" }
            )?;
        }
        for writes in ["each", "coalesced"] {
            if let (Some(sync), Some(k50)) = (sync, report.find("cairn-rpc", writes, &t, 1, 50, 0)) {
                let speedup = sync.mean_us_per_task / k50.mean_us_per_task;
                writeln!(
                    out,
                    "target {t}: 50 in flight ({writes}) ≥ 10× the synchronous rate: {speedup:.1}× — {}",
                    if speedup >= 10.0 { "met" } else { "NOT met" }
                )?;
            }
        }
    }
    Ok(())
}

/// The `--json` document.
pub fn to_json(report: &RpcReport) -> serde_json::Value {
    let m = crate::commit::machine();
    serde_json::json!({
        "benchmark": "rpc",
        "machine": { "cores": m.cores, "memory_bytes": m.memory_bytes },
        "reps": report.reps,
        "results": report.results.iter().map(|r| {
            let mut v = serde_json::json!({
                "system": r.system,
                "transport": r.transport,
                "writes": r.writes,
                "clients": r.clients,
                "in_flight": r.in_flight,
                "tasks": r.tasks,
                "mean_us_per_task": r.mean_us_per_task,
                "min_us_per_task": r.min_us_per_task,
                "max_us_per_task": r.max_us_per_task,
            });
            if r.parts_per_task > 0 {
                v["parts_per_task"] = serde_json::json!(r.parts_per_task);
                v["mean_us_per_part"] = serde_json::json!(r.mean_us_per_task / (r.parts_per_task + 1) as f64);
            }
            v
        }).collect::<Vec<_>>(),
    })
}

/// Runs, prints the table on stdout, and writes `json` if given: the whole `cairn bench rpc`.
pub fn main(opts: &RpcOptions, json: Option<&Path>) -> io::Result<()> {
    let report = run(opts)?;
    print_table(&report, opts, &mut io::stdout().lock())?;
    if let Some(path) = json {
        let mut f = std::fs::File::create(path)?;
        writeln!(
            f,
            "{}",
            serde_json::to_string_pretty(&to_json(&report)).map_err(io::Error::other)?
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even() {
        assert_eq!(median_min_max(vec![3.0, 1.0, 2.0]), (2.0, 1.0, 3.0));
        assert_eq!(median_min_max(vec![4.0, 1.0, 2.0, 3.0]), (2.5, 1.0, 4.0));
    }

    #[test]
    fn loops_run_against_real_servers() {
        let servers = Servers::start().unwrap();
        let c = Client::connect(&servers.cairn_unix, &ClientOptions::default()).unwrap();
        run_cairn(&c, 5, 100, false).unwrap();
        run_cairn(&c, 5, 100, true).unwrap();
        run_stream(&c, 10, 3).unwrap();
        let mut s = UnixStream::connect(&servers.raw_unix).unwrap();
        run_raw(&mut s, 5, 100, false).unwrap();
        run_raw(&mut s, 5, 100, true).unwrap();
    }
}
