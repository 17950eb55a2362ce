//! Crash tests: `cairn torture` killed with SIGKILL at random moments, again
//! and again on one directory, and `cairn verify` proving after each kill
//! that every acknowledged commit is there whole and nothing is partial
//! (and, every fourth kill, `cairn check` recovering the killed database and
//! finding every page sound); plus a run to completion, and proof that
//! verify does catch damage.
//!
//! `CAIRN_CRASH_CYCLES` sets the number of kills (default 20). On a failure
//! the directory is kept and named in the message; with `CAIRN_CRASH_KEEP=1`
//! a copy of the database as the kill left it (before verify's recovery) is
//! kept too, so the failing recovery can be replayed.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use cairn_cli::format::{decode, encode, Entry, Kind};
use cairn_cli::torture::{Rng, GROUP};
use cairn_storage::{Db, DbOptions, Oid};

fn cairn() -> Command {
    Command::new(env!("CARGO_BIN_EXE_cairn"))
}

fn append(path: &Path) -> File {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("open log for append")
}

fn torture_cmd(db: &Path, log: &Path, err: &Path, seconds: &str, seed: u64) -> Command {
    let mut c = cairn();
    c.arg("torture")
        .arg(db)
        .args(["--seconds", seconds, "--threads", "4", "--seed", &seed.to_string()])
        .stdin(Stdio::null())
        .stdout(append(log))
        .stderr(append(err));
    c
}

fn verify(db: &Path, log: &Path) -> Output {
    cairn()
        .arg("verify")
        .arg(db)
        .arg("--log")
        .arg(log)
        .output()
        .expect("run verify")
}

/// `cairn check` on a database as a kill left it: it recovers first, so a
/// crashed database checks clean.
fn check(db: &Path) -> Output {
    cairn().arg("check").arg(db).output().expect("run check")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn tail(path: &Path, lines: usize) -> String {
    let s = std::fs::read_to_string(path).unwrap_or_default();
    let v: Vec<&str> = s.lines().collect();
    v[v.len().saturating_sub(lines)..].join("\n")
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), target).unwrap();
        }
    }
}

fn verified_ok(o: &Output) -> bool {
    o.status.code() == Some(0)
        && text(&o.stdout)
            .lines()
            .last()
            .is_some_and(|l| l.starts_with("verified ") && l.ends_with(" commits, 0 lost, 0 partial"))
}

#[test]
fn killed_torture_loses_nothing() {
    let cycles: u64 = std::env::var("CAIRN_CRASH_CYCLES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let keep_pre = std::env::var("CAIRN_CRASH_KEEP").is_ok_and(|v| v == "1");
    let tmp = tempfile::tempdir().unwrap();
    let (db, log, err) = (
        tmp.path().join("db"),
        tmp.path().join("torture.log"),
        tmp.path().join("torture.err"),
    );
    let mut rng = Rng::new(0x5EED_C4A5_4000);
    let started = Instant::now();
    for cycle in 0..cycles {
        let mut child = torture_cmd(&db, &log, &err, "60", cycle)
            .spawn()
            .expect("spawn torture");
        std::thread::sleep(Duration::from_millis(rng.range(100, 1500)));
        if let Some(status) = child.try_wait().unwrap() {
            let kept: PathBuf = tmp.keep();
            panic!(
                "cycle {cycle}: torture exited by itself ({status}) in {}:\n{}",
                kept.display(),
                tail(&kept.join("torture.err"), 20)
            );
        }
        child.kill().unwrap();
        child.wait().unwrap();
        if keep_pre {
            let pre = tmp.path().join("pre");
            let _ = std::fs::remove_dir_all(&pre);
            copy_dir(&db, &pre);
        }
        if cycle % 4 == 1 {
            let o = check(&db);
            if o.status.code() != Some(0) || text(&o.stdout).trim() != "ok" {
                let kept: PathBuf = tmp.keep();
                panic!(
                    "cycle {cycle}: check of the killed database failed; directory kept at {}\n{}{}",
                    kept.display(),
                    text(&o.stdout),
                    text(&o.stderr)
                );
            }
        }
        let o = verify(&db, &log);
        if !verified_ok(&o) {
            let kept: PathBuf = tmp.keep();
            panic!(
                "cycle {cycle} (seed {cycle}): verify failed; directory kept at {}\nstdout:\n{}\nstderr:\n{}",
                kept.display(),
                text(&o.stdout).lines().take(40).collect::<Vec<_>>().join("\n"),
                text(&o.stderr)
            );
        }
        eprintln!("cycle {cycle}: {}", text(&o.stdout).trim_end());
    }
    eprintln!("{cycles} kills verified in {:.1} s", started.elapsed().as_secs_f64());
}

#[test]
fn torture_run_to_completion_verifies() {
    let tmp = tempfile::tempdir().unwrap();
    let (db, log, err) = (
        tmp.path().join("db"),
        tmp.path().join("torture.log"),
        tmp.path().join("torture.err"),
    );
    let status = torture_cmd(&db, &log, &err, "2", 7).status().unwrap();
    assert!(status.success(), "{status}: {}", tail(&err, 20));
    let lines = std::fs::read_to_string(&log).unwrap();
    assert!(lines.lines().count() > 10, "too few commits: {lines}");
    assert!(
        lines.lines().all(|l| l.starts_with("committed ")),
        "stdout holds only commit lines"
    );
    let stderr = std::fs::read_to_string(&err).unwrap();
    assert!(stderr.contains("seed 7"), "{stderr}");
    let o = verify(&db, &log);
    assert!(verified_ok(&o), "{o:?}");
    assert!(
        text(&o.stdout).contains(&format!("verified {} commits", lines.lines().count())),
        "{o:?}"
    );
}

/// Live torture objects of a database: (OID, key, version, length, txid).
fn live_objects(db: &Db) -> Vec<(Oid, u64, u64, u64, u64)> {
    let g = db.group(GROUP).unwrap();
    let mut t = db.begin().unwrap();
    let mut out = Vec::new();
    for oid in t.scan_all(g).unwrap() {
        let r = decode(&t.read(oid).unwrap()).unwrap();
        if r.kind == Kind::Object {
            out.push((oid, r.key, r.version, r.len, r.txid));
        }
    }
    t.commit().unwrap();
    out
}

#[test]
fn verify_names_lost_and_corrupt_objects() {
    let tmp = tempfile::tempdir().unwrap();
    let (db_dir, log, err) = (
        tmp.path().join("db"),
        tmp.path().join("torture.log"),
        tmp.path().join("torture.err"),
    );
    let status = torture_cmd(&db_dir, &log, &err, "1.5", 11).status().unwrap();
    assert!(status.success(), "{status}: {}", tail(&err, 20));
    assert!(verified_ok(&verify(&db_dir, &log)));

    // Damage three acknowledged objects through the API, each a different way.
    let opts = DbOptions {
        background: false,
        ..DbOptions::default()
    };
    let db = Db::open(&db_dir, &opts).unwrap();
    let live = live_objects(&db);
    let older = *live.iter().find(|o| o.2 >= 2).expect("an object written twice");
    let rest: Vec<_> = live.iter().filter(|o| o.1 != older.1).copied().collect();
    let (gone, flipped) = (rest[0], rest[1]);
    let mut t = db.begin().unwrap();
    // 1. Rolled back to the previous version: a well-formed record, just old.
    let v = older.2 - 1;
    t.update(
        older.0,
        &encode(
            Kind::Object,
            older.1,
            v,
            older.4,
            older.3,
            &[Entry {
                key: older.1,
                version: v,
            }],
        ),
    )
    .unwrap();
    // 2. Deleted without a tombstone.
    t.delete(gone.0).unwrap();
    // 3. One byte changed.
    let mut bytes = t.read(flipped.0).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    t.update(flipped.0, &bytes).unwrap();
    t.commit().unwrap();
    db.close().unwrap();

    let o = verify(&db_dir, &log);
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{out}");
    let key = |k: u64| format!("key {k:016x}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("lost: ") && l.contains(&key(older.1)) && l.contains(&format!("has v{v}"))),
        "rollback of {} not named:\n{out}",
        key(older.1)
    );
    assert!(
        out.lines()
            .any(|l| l.starts_with("lost: ") && l.contains(&key(gone.1)) && l.contains("no object and no tombstone")),
        "deletion of {} not named:\n{out}",
        key(gone.1)
    );
    assert!(
        out.lines()
            .any(|l| l.starts_with("corrupt: ") && l.contains(&format!("object {}", flipped.0))),
        "damage to object {} not named:\n{out}",
        flipped.0
    );
    let summary = out.lines().last().unwrap();
    assert!(summary.starts_with("FAILED: "), "{summary}");
    assert!(!summary.contains(" 0 lost"), "{summary}");
}
