//! The `cairn` binary end to end: create, inspect (table and JSON), check on a
//! sound database and on a damaged one.

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::{Command, Output};

use cairn_storage::{Db, DbOptions, GroupId};

fn cairn(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(args)
        .output()
        .expect("run cairn")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn populate(db: &Path) {
    let db = Db::open(db, &DbOptions::default()).unwrap();
    let g = db.create_group("parts").unwrap();
    let mut t = db.begin().unwrap();
    for i in 0..50u32 {
        t.create(g, &i.to_le_bytes().repeat(30)).unwrap();
    }
    t.create(GroupId::DEFAULT, &vec![7u8; 100_000]).unwrap();
    t.commit().unwrap();
    db.close().unwrap();
}

#[test]
fn create_inspect_check_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let db_s = db.to_str().unwrap();
    let o = cairn(&["create", db_s, "--page-size", "8192"]);
    assert!(o.status.success(), "{o:?}");
    populate(&db);

    let o = cairn(&["inspect", db_s, "--json"]);
    assert!(o.status.success(), "{o:?}");
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["page_size"], 8192);
    let groups = v["groups"].as_array().unwrap();
    let parts = groups.iter().find(|g| g["name"] == "parts").unwrap();
    assert_eq!(parts["objects"], 50);
    let default = groups.iter().find(|g| g["name"] == "default").unwrap();
    assert_eq!(default["objects"], 1);
    assert!(default["pages_used"].as_u64().unwrap() >= 100_000 / 8192);
    assert!(v["pages"].as_u64().unwrap() > v["free_pages"].as_u64().unwrap());

    let o = cairn(&["inspect", db_s]);
    assert!(o.status.success());
    assert!(stdout(&o).contains("parts"), "{}", stdout(&o));

    let o = cairn(&["check", db_s]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert_eq!(stdout(&o).trim(), "ok");
    let o = cairn(&["check", "--no-recover", db_s]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert_eq!(stdout(&o).trim(), "ok");
}

#[test]
fn check_names_a_damaged_page_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let db_s = db.to_str().unwrap();
    assert!(cairn(&["create", db_s]).status.success());
    populate(&db);
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(db.join("volume.cairn"))
        .unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, 5 * 4096 + 2000).unwrap();
    f.write_all_at(&[b[0] ^ 0xff], 5 * 4096 + 2000).unwrap();
    let o = cairn(&["check", db_s]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let out = stdout(&o);
    assert!(
        out.lines().any(|l| l.starts_with("page 5: ") && l.contains("checksum")),
        "{out}"
    );
}

#[test]
fn bad_arguments_and_non_databases_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let o = cairn(&["create", db.to_str().unwrap(), "--page-size", "5000"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("page size 5000"), "{o:?}");

    let o = cairn(&["check", dir.path().to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stdout(&o).contains("not a Cairn database"), "{o:?}");

    let o = cairn(&["inspect", dir.path().to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("not a Cairn database"),
        "{o:?}"
    );
}

/// `cairn check` and `cairn recover` on a database whose log holds a record
/// recovery cannot apply (a COMMIT freeing the volume header, written
/// straight into the log): check names the record's LSN and the way out,
/// `recover --stop-at` takes it and says what it left out and where it kept
/// it, and the database checks clean afterwards.
#[test]
fn recover_stop_at_opens_a_database_whose_log_holds_a_record_that_cannot_be_applied() {
    use cairn_storage::wal::redo::Redo;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let db_s = db.to_str().unwrap();
    assert!(cairn(&["create", db_s]).status.success());
    populate(&db);
    let manifest = cairn_storage::volume::manifest::Manifest::read(&cairn_storage::io::OsVfs, &db).unwrap();
    let (wal, _) = cairn_storage::wal::Wal::open(
        &db,
        cairn_storage::wal::WalOptions {
            creation_id: manifest.creation_id,
            ..Default::default()
        },
    )
    .unwrap();
    let stop = wal.end_lsn().0;
    let rec = Redo::Commit {
        txn: cairn_storage::TxnId(7_777),
        frees: vec![cairn_storage::PageId(0)],
    }
    .encode();
    let end = wal.append(&[&rec]).unwrap()[0];
    wal.flush(end).unwrap();
    drop(wal);

    let o = cairn(&["check", db_s]);
    assert!(!o.status.success());
    let out = stdout(&o);
    assert!(
        out.contains(&format!("LSN {stop}")) && out.contains("--stop-at"),
        "{out}"
    );
    let o = cairn(&["recover", db_s]);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains(&format!("--stop-at {stop}")),
        "{o:?}"
    );
    let o = cairn(&["recover", db_s, "--stop-at", &stop.to_string()]);
    assert!(o.status.success(), "{o:?}");
    let out = stdout(&o);
    assert!(out.contains("txn 7777") && out.contains("lost+found"), "{out}");
    let o = cairn(&["check", db_s]);
    assert_eq!(stdout(&o).trim(), "ok", "{o:?}");
    let o = cairn(&["recover", db_s]);
    assert!(o.status.success() && stdout(&o).contains("opens normally"), "{o:?}");
}

/// `bench report` renders what the benchmarks' `--json` options write (the
/// results page is regenerated that way), and a file it cannot render
/// stops it with exit code 2 and an error naming the file.
#[test]
fn bench_report_renders_the_json_of_bench_commit_and_refs_and_names_a_bad_file() {
    let dir = tempfile::tempdir().unwrap();
    let commit = dir.path().join("commit.json");
    let refs = dir.path().join("refs.json");
    let (commit_s, refs_s) = (commit.to_str().unwrap(), refs.to_str().unwrap());
    let o = cairn(&["bench", "commit", "--seconds", "0.05", "--json", commit_s]);
    assert!(o.status.success(), "{o:?}");
    let o = cairn(&["bench", "refs", "--nodes", "50", "--steps", "500", "--json", refs_s]);
    assert!(o.status.success(), "{o:?}");

    let o = cairn(&["bench", "report", commit_s, refs_s]);
    assert!(o.status.success(), "{o:?}");
    let out = stdout(&o);
    assert!(
        out.contains("| committers | commits | commits/s | fsyncs | fsyncs/commit | mean µs | p99 µs |"),
        "{out}"
    );
    for committers in [1, 4, 16] {
        assert!(out.contains(&format!("\n| {committers} | ")), "{out}");
    }
    for way in ["floor", "swizzled", "oid-lookup", "view", "storage-read"] {
        assert!(out.contains(&format!("\n| {way} | ")), "{out}");
    }

    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "{\"benchmark\": \"commit\", \"results\": [{\"threads\": 1}]}").unwrap();
    let o = cairn(&["bench", "report", commit_s, bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(o.stdout.is_empty(), "nothing printed before the error: {o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!("{}: results[0] has no \"commits\" field", bad.display())),
        "{err}"
    );
}
