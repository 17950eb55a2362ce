//! The `cairn` command-line tool: create, inspect and check databases (and,
//! in later issues, serve, bench, torture and verify).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use cairn_storage::check::check_database;
use cairn_storage::volume::VolumeOptions;
use cairn_storage::{Db, DbOptions};
use clap::{Parser, Subcommand};

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
    },
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
        Command::Check { dir } => return check(&dir),
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

fn check(dir: &Path) -> ExitCode {
    let report = check_database(dir, &VolumeOptions::default());
    if report.is_ok() {
        println!("ok");
        ExitCode::SUCCESS
    } else {
        for p in &report.problems {
            println!("{p}");
        }
        ExitCode::from(1)
    }
}
