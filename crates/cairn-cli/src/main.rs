//! The `cairn` command-line tool: create, inspect and check databases;
//! `torture` and `verify` for crash testing; `user` for the users who may
//! log in (`users.rs`); the benchmarks (`bench commit, refs, rpc, oo1, oo7,
//! acob, connect, attack`) and `bench report`, which renders their `--json`
//! files as the tables of docs/benchmarks.md.
//!
//! The binary allocates with mimalloc: the typed layer decodes objects into
//! ordinary Rust values (a `String` or `Vec` per field), and glibc's malloc
//! made a third of an object fault's cost (measured with `bench oo1`).
//!
//! Exit codes: 0 success, 1 problems found (`check`, `verify`), 2 the
//! command could not run.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
use cairn_bench::commit::{self, CommitOptions, CommitReport};
use cairn_cli::{torture, verify};
use cairn_storage::check::check_database;
use cairn_storage::{Db, DbOptions, VolumeOptions};
use clap::{Parser, Subcommand};

mod users;

/// Cairn, an object database.
#[derive(Parser, Debug)]
#[command(name = "cairn", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Create a new, empty database directory.
    Create {
        /// The database directory (created if missing; must not hold a database).
        dir: PathBuf,
        /// Page size in bytes: a power of two from 4096 to 65536.
        #[arg(long, default_value_t = 4096)]
        page_size: usize,
        /// Pages per extent (1 to 64).
        #[arg(long, default_value_t = 8)]
        extent_pages: u32,
    },
    /// Show a database's page size, pages, free pages and groups.
    Inspect {
        /// The database directory.
        dir: PathBuf,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Verify every page and structure; print `ok`, or one line per problem.
    Check {
        /// The database directory.
        dir: PathBuf,
        /// Check the files exactly as they are: without first opening the
        /// database, which recovers it after a crash (the log's committed
        /// work goes into the volume) and takes a checkpoint.
        #[arg(long)]
        no_recover: bool,
    },
    /// Open a database whose recovery stops at a log record it cannot apply:
    /// without --stop-at, recover and report (the error names the record's
    /// LSN); with it, copy the log from that LSN on to DIR/lost+found, list
    /// the transactions left out, and open the database as of just before it.
    Recover {
        /// The database directory.
        dir: PathBuf,
        /// The LSN the recovery error named: the log is taken to end there.
        #[arg(long)]
        stop_at: Option<u64>,
    },
    /// Run random transactions for a while, printing `committed <txid>
    /// <digest>` on stdout after each acknowledged commit (kill it at will).
    Torture {
        /// The database directory (created if missing, reused if not).
        dir: PathBuf,
        /// How long to run.
        #[arg(long)]
        seconds: f64,
        /// Concurrent worker threads.
        #[arg(long, default_value_t = 4)]
        threads: usize,
        /// Random seed (default: from the clock; printed to stderr).
        #[arg(long)]
        seed: Option<u64>,
        /// Run against `cairn serve` at this URL (`cairn://HOST:PORT`) as a
        /// page-server client; DIR is then only a label.
        #[arg(long)]
        connect: Option<String>,
        /// With --connect: as a file-server client (pages read and written
        /// in the served volume file, which must be reachable at the
        /// server's path).
        #[arg(long, requires = "connect")]
        file: bool,
        /// Take over every other run's objects, also those of runs that may
        /// still be running (killed ones): give it only when no other
        /// torture process is running against the server, e.g. to the
        /// first client after a restart (start others once it printed its
        /// `torture: nonce` line). Always so without --connect. Without it,
        /// a run changes only its own objects and those of runs that ended.
        #[arg(long)]
        adopt: bool,
    },
    /// Check a tortured database against the logs of acknowledged commits
    /// (one per torture process, or one that many runs appended to):
    /// nothing lost, nothing partial, nothing corrupt.
    Verify {
        /// The database directory.
        dir: PathBuf,
        /// The files torture's stdout went to (the same as --log).
        logs: Vec<PathBuf>,
        /// A file torture's stdout was appended to (repeatable).
        #[arg(long = "log")]
        log: Vec<PathBuf>,
    },
    /// Serve a database to page-, file- and object-server clients until SIGINT/SIGTERM, then
    /// checkpoint and close it. Once the database has users (`cairn user add`) every
    /// connection logs in; without users it trusts local connections only and refuses
    /// a non-loopback address.
    Serve {
        /// The database directory (created if missing).
        dir: PathBuf,
        /// TCP address to listen on (default 127.0.0.1:7411 unless only
        /// --unix is given; port 0 picks a free one).
        #[arg(long)]
        listen: Option<String>,
        /// Unix socket path to listen on.
        #[arg(long)]
        unix: Option<PathBuf>,
        /// Removed: shared tokens were replaced by users (`cairn user add`); giving it
        /// is an error that says so.
        #[arg(long, hide = true)]
        token_file: Option<PathBuf>,
        /// TLS certificate chain (PEM) for the TCP listener; clients connect
        /// to cairns://HOST:PORT. Needs --tls-key.
        #[arg(long, requires = "tls_key")]
        tls_cert: Option<PathBuf>,
        /// TLS private key (PEM) matching --tls-cert.
        #[arg(long, requires = "tls_cert")]
        tls_key: Option<PathBuf>,
        /// Serve a non-loopback address without TLS (behind a tunnel or on a
        /// private network only): logins stay safe, the data does not.
        #[arg(long)]
        no_tls: bool,
        /// File of `key = value` server limits.
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Manage the users who may log in (SCRAM-SHA-256) and their roles:
    /// add, passwd, role, remove, list. A running server picks changes up
    /// at the next login.
    User {
        #[command(subcommand)]
        which: users::UserCommand,
    },
    /// Benchmarks.
    Bench {
        #[command(subcommand)]
        which: BenchCommand,
    },
}

#[derive(Subcommand, Debug)]
enum BenchCommand {
    /// Commits per second and fsyncs per commit with 1, 4 and 16 committers.
    Commit {
        /// Measured seconds per committer count.
        #[arg(long, default_value_t = 3.0)]
        seconds: f64,
        /// Where to create the scratch databases (default: the temp directory).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Also write the results as JSON to this file.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// Following a reference: swizzled, by OID lookup, from storage, against a plain Vec.
    Refs {
        /// Objects in the ring.
        #[arg(long, default_value_t = 10_000)]
        nodes: usize,
        /// Steps per timed walk.
        #[arg(long, default_value_t = 1_000_000)]
        steps: usize,
        /// Also write the results as JSON to this file.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// OO1 (Cattell & Skeen): lookup, traversal, reverse traversal and insert,
    /// cold and warm, for Cairn against the in-memory floor and SQLite.
    Oo1(cairn_bench::oo1::Oo1Args),
    /// OO7 (Carey, DeWitt & Naughton) for dual buffering (Kemper & Kossmann):
    /// T1, T2a, T2b over clusterings, strategies and buffer sizes, cold and warm.
    Oo7(cairn_bench::oo7::Oo7Args),
    /// ACOB (DeWitt et al.): the embedded engine and the page-, object- and
    /// file-server clients on complex objects, by clustering factor,
    /// region and buffer size; scans, random reads and random updates.
    Acob(cairn_bench::acob::run::AcobArgs),
    /// RPC (PRIMA): empty tasks, 1–200 in flight, 1–8 client processes, Unix and TCP, against
    /// the raw ping-pong floor; and a streamed reply.
    Rpc(cairn_bench::rpc::RpcArgs),
    /// Opening a session: plain, with a SCRAM-SHA-256 login, and with the
    /// login inside TLS, as µs per connection and ratios to plain.
    Connect(cairn_bench::connect::ConnectArgs),
    /// An honest client's commit rate while another attacks the server
    /// within the rules (trickled frames, idle connections, lock waits,
    /// open transactions, silent callbacks), as ratios to no attack.
    Attack(cairn_bench::attack::AttackArgs),
    /// Print the markdown tables of docs/benchmarks.md from result files
    /// written by the benchmarks' --json options (commit, refs, oo1, oo7,
    /// acob, rpc, connect, attack).
    Report {
        /// The JSON result files, rendered one after the other.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// A client process of `bench rpc` (started by it; commands on stdin).
    #[command(hide = true)]
    RpcClient(cairn_bench::rpc::ClientArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Create {
            dir,
            page_size,
            extent_pages,
        } => create(&dir, page_size, extent_pages),
        Command::Inspect { dir, json } => inspect(&dir, json),
        Command::Serve {
            dir,
            listen,
            unix,
            token_file,
            config,
            tls_cert,
            tls_key,
            no_tls,
        } => {
            tracing_subscriber::fmt()
                .with_writer(std::io::stderr)
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
                .with_env_filter(
                    tracing_subscriber::EnvFilter::try_from_env("CAIRN_LOG")
                        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
                )
                .init();
            cairn_cli::serve::serve(&cairn_cli::serve::ServeArgs {
                dir,
                listen,
                unix,
                token_file,
                config,
                tls: tls_cert.zip(tls_key),
                no_tls,
            })
        }
        Command::Check { dir, no_recover } => return check(&dir, !no_recover),
        Command::Recover { dir, stop_at } => recover(&dir, stop_at),
        Command::Torture {
            dir,
            seconds,
            threads,
            seed,
            connect,
            file,
            adopt,
        } => run_torture(dir, seconds, threads, seed, connect, file, adopt),
        Command::Verify { dir, logs, log } => {
            let all: Vec<PathBuf> = log.into_iter().chain(logs).collect();
            return run_verify(&dir, &all);
        }
        Command::User { which } => users::run(which),
        Command::Bench {
            which: BenchCommand::Commit { seconds, dir, json },
        } => bench_commit(seconds, dir, json.as_deref()),
        Command::Bench {
            which: BenchCommand::Refs { nodes, steps, json },
        } => bench_refs(nodes, steps, json.as_deref()),
        Command::Bench {
            which: BenchCommand::Report { files },
        } => bench_report(&files),
        Command::Bench {
            which: BenchCommand::Oo1(args),
        } => cairn_bench::oo1::main(&args).map_err(Into::into),
        Command::Bench {
            which: BenchCommand::Oo7(args),
        } => cairn_bench::oo7::main(&args).map_err(Into::into),
        Command::Bench {
            which: BenchCommand::Acob(args),
        } => cairn_bench::acob::run::main(&args).map_err(Into::into),
        Command::Bench {
            which: BenchCommand::Rpc(args),
        } => cairn_bench::rpc::cli_main(&args).map_err(Into::into),
        Command::Bench {
            which: BenchCommand::Attack(args),
        } => cairn_bench::attack::cli_main(&args).map_err(Into::into),
        Command::Bench {
            which: BenchCommand::Connect(args),
        } => cairn_bench::connect::cli_main(&args).map_err(Into::into),
        Command::Bench {
            which: BenchCommand::RpcClient(args),
        } => cairn_bench::rpc::client_main(&args).map_err(Into::into),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn create(dir: &Path, page_size: usize, extent_pages: u32) -> anyhow::Result<()> {
    let opts = DbOptions {
        volume: VolumeOptions {
            page_size,
            extent_pages,
            ..VolumeOptions::default()
        },
        background: false,
        ..DbOptions::default()
    };
    let db = Db::create(dir, &opts).with_context(|| format!("creating {}", dir.display()))?;
    db.close()?;
    println!("created {} (page size {page_size})", dir.display());
    Ok(())
}

fn inspect(dir: &Path, json: bool) -> anyhow::Result<()> {
    let opts = DbOptions {
        background: false,
        ..DbOptions::default()
    };
    let db = Db::open(dir, &opts).with_context(|| format!("opening {}", dir.display()))?;
    let header = db.header();
    let (_, free) = db.page_counts();
    let mut groups = Vec::new();
    let mut txn = db.begin()?;
    for g in db.groups() {
        let objects = txn.scan_all(g.id)?.len();
        groups.push((g, objects));
    }
    txn.commit()?;
    if json {
        let out = serde_json::json!({
            "page_size": header.page_size,
            "pages": header.page_count,
            "free_pages": free,
            "extent_pages": header.extent_pages,
            "region_pages": header.region_pages,
            "groups": groups.iter().map(|(g, n)| serde_json::json!({
                "id": g.id.0,
                "name": g.name,
                "objects": n,
                "pages_used": g.pages_used,
                "pages_reserved": g.pages_reserved,
                "extents": g.extents,
            })).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        println!("database     {}", dir.display());
        println!("page size    {} bytes", header.page_size);
        println!("pages        {}", header.page_count);
        println!("free pages   {free}");
        println!("extent size  {} pages", header.extent_pages);
        println!();
        println!(
            "{:>5}  {:<24} {:>10} {:>10} {:>10} {:>8}",
            "id", "group", "objects", "pages", "reserved", "extents"
        );
        for (g, n) in &groups {
            println!(
                "{:>5}  {:<24} {:>10} {:>10} {:>10} {:>8}",
                g.id.0, g.name, n, g.pages_used, g.pages_reserved, g.extents
            );
        }
    }
    db.close()?;
    Ok(())
}

/// `cairn check`: recovers the database (unless `recover` is false), then
/// verifies every page. A database that crashed holds committed work only in
/// its log until it is opened; checking its volume as it is would report
/// pages that recovery is about to rewrite.
/// `cairn recover`: see the command's help and `Db::recover_stopping_at`.
fn recover(dir: &Path, stop_at: Option<u64>) -> anyhow::Result<()> {
    let opts = DbOptions {
        background: false,
        ..DbOptions::default()
    };
    let Some(stop) = stop_at else {
        let db = Db::open(dir, &opts).with_context(|| format!("recovering {}", dir.display()))?;
        let r = db.recovery().clone();
        db.close()?;
        println!(
            "recovered: {} committed transactions replayed ({} page records applied); the database opens normally",
            r.committed, r.applied
        );
        return Ok(());
    };
    let (db, s) = Db::recover_stopping_at(dir, &opts, cairn_storage::Lsn(stop))
        .with_context(|| format!("recovering {} up to LSN {stop}", dir.display()))?;
    db.close()?;
    println!("the log was taken to end at LSN {} (it ended at {})", s.stop.0, s.end.0);
    println!(
        "left out: {} log records, {} committed transactions{}",
        s.records,
        s.commits.len(),
        if s.commits.is_empty() {
            String::new()
        } else {
            format!(
                " ({})",
                s.commits
                    .iter()
                    .map(|(t, l)| format!("txn {} committed at LSN {}", t.0, l.0))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }
    );
    if let Some(k) = &s.kept_in {
        println!("kept in {} (the log segments and dropped.txt)", k.display());
    }
    println!("the database opens normally now; run `cairn check {}`", dir.display());
    Ok(())
}

fn check(dir: &Path, recover: bool) -> ExitCode {
    let mut problems = Vec::new();
    if recover && dir.join(cairn_storage::volume::manifest::MANIFEST_FILE).exists() {
        let opts = DbOptions {
            background: false,
            ..DbOptions::default()
        };
        match Db::open(dir, &opts) {
            Ok(db) => {
                if let Err(e) = db.close() {
                    problems.push(format!("recovery: closing the recovered database failed: {e}"));
                }
            }
            Err(e) => problems.push(format!("recovery failed ({e}); the files are checked as they are")),
        }
    }
    let report = check_database(dir, &VolumeOptions::default());
    problems.extend(report.problems.iter().map(|p| p.to_string()));
    if problems.is_empty() {
        println!("ok");
        ExitCode::SUCCESS
    } else {
        for p in &problems {
            println!("{p}");
        }
        ExitCode::from(1)
    }
}

fn run_torture(
    dir: PathBuf,
    seconds: f64,
    threads: usize,
    seed: Option<u64>,
    connect: Option<String>,
    file: bool,
    adopt: bool,
) -> anyhow::Result<()> {
    let seed = seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    });
    eprintln!("torture: seed {seed}");
    torture::run(&torture::Options {
        dir,
        seconds,
        threads,
        seed,
        connect,
        file,
        adopt,
    })?;
    Ok(())
}

fn run_verify(dir: &Path, logs: &[PathBuf]) -> ExitCode {
    if logs.is_empty() {
        eprintln!("error: cairn verify needs at least one log: cairn verify DIR LOG… or --log LOG");
        return ExitCode::from(2);
    }
    match verify::run(dir, logs) {
        Ok(report) => {
            for line in report.problem_lines() {
                println!("{line}");
            }
            eprintln!(
                "verify: {} logs, {} objects, {} tombstones, {} runs registered, {} torn commit lines ignored",
                logs.len(),
                report.objects,
                report.tombstones,
                report.runs,
                report.malformed_lines
            );
            println!("{}", report.summary_line());
            if report.is_ok() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn bench_commit(seconds: f64, dir: Option<PathBuf>, json: Option<&Path>) -> anyhow::Result<()> {
    let report = commit::run(&CommitOptions {
        dir,
        seconds,
        ..CommitOptions::default()
    })?;
    print_commit_table(&report);
    if let Some(path) = json {
        let m = commit::machine();
        let out = serde_json::json!({
            "benchmark": "commit",
            "machine": { "cores": m.cores, "memory_bytes": m.memory_bytes },
            "results": report.results.iter().map(|r| serde_json::json!({
                "threads": r.threads,
                "commits": r.commits,
                "commits_per_s": r.commits_per_s,
                "fsyncs": r.fsyncs,
                "fsyncs_per_commit": r.fsyncs_per_commit,
                "mean_us": r.mean_us,
                "p99_us": r.p99_us,
                "retries": r.retries,
            })).collect::<Vec<_>>(),
        });
        let mut f = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
        writeln!(f, "{}", serde_json::to_string_pretty(&out)?)?;
    }
    Ok(())
}

fn bench_refs(nodes: usize, steps: usize, json: Option<&Path>) -> anyhow::Result<()> {
    let opts = cairn_bench::refs::RefsOptions {
        nodes,
        steps,
        dir: None,
    };
    let results = cairn_bench::refs::run(&opts)?;
    println!("following a reference: {nodes} objects in a ring, {steps} steps, warm");
    println!("{:<14} {:>10} {:>10}", "way", "ns/step", "× floor");
    for r in &results {
        println!("{:<14} {:>10.1} {:>10.2}", r.system, r.ns_per_step, r.ratio_to_floor);
    }
    if let Some(path) = json {
        let out = cairn_bench::refs::to_json(&opts, &results);
        std::fs::write(path, serde_json::to_string_pretty(&out)? + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// `cairn bench report FILE...`: each file's tables on stdout, in the
/// order given, separated by a line naming the file. Every file is
/// rendered before any is printed, so a bad one stops the command without
/// half a page on stdout.
fn bench_report(files: &[PathBuf]) -> anyhow::Result<()> {
    let pages = files
        .iter()
        .map(|f| cairn_bench::report::render_file(f))
        .collect::<Result<Vec<_>, _>>()?;
    for (i, (file, page)) in files.iter().zip(pages).enumerate() {
        if files.len() > 1 {
            if i > 0 {
                println!();
            }
            println!("<!-- {} -->", file.display());
        }
        print!("{page}");
    }
    Ok(())
}

fn print_commit_table(report: &CommitReport) {
    println!(
        "{:>7} {:>9} {:>10} {:>8} {:>13} {:>10} {:>10}",
        "threads", "commits", "commits/s", "fsyncs", "fsyncs/commit", "mean µs", "p99 µs"
    );
    for r in &report.results {
        println!(
            "{:>7} {:>9} {:>10.0} {:>8} {:>13.3} {:>10.0} {:>10.0}",
            r.threads, r.commits, r.commits_per_s, r.fsyncs, r.fsyncs_per_commit, r.mean_us, r.p99_us
        );
    }
}
