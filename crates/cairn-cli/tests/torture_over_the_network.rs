//! `cairn torture --connect [--file]`: random transactions from a
//! page-server (or file-server) client while the *server* is killed with SIGKILL, again and again on one
//! directory; after each kill the server is restarted (it recovers) and at
//! the end `cairn verify` proves every commit the client saw acknowledged is
//! there whole and nothing is partial. A client that loses its server stops
//! with an error, never with a false acknowledgement.
//!
//! `CAIRN_SERVER_KILLS` sets the number of kills (default 10 here). This
//! test found a client that installed the last image of a page its commit
//! freed over the fresh image another of its threads had just allocated
//! (a wrong diff base, so a corrupt page on the server): about one run in
//! three at 15 kills before the fix, none in five after.

mod common;

use std::fs::OpenOptions;
use std::process::{Command, Stdio};
use std::time::Duration;

use cairn_cli::torture::Rng;
use common::serve;

#[test]
fn torture_through_a_killed_server_loses_nothing() {
    torture_through_kills(false);
}

/// The same with a file-server client: its commits are logged by the
/// server and written into the volume file by the client.
#[test]
fn torture_of_a_file_server_client_through_a_killed_server_loses_nothing() {
    torture_through_kills(true);
}

fn torture_through_kills(file: bool) {
    let cycles: u64 = std::env::var("CAIRN_SERVER_KILLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let tmp = tempfile::tempdir().unwrap();
    let (db, log, err) = (
        tmp.path().join("db"),
        tmp.path().join("torture.log"),
        tmp.path().join("torture.err"),
    );
    let append = |p: &std::path::Path| OpenOptions::new().create(true).append(true).open(p).unwrap();
    let mut rng = Rng::new(0x0005_E4E4_C0DE);
    for cycle in 0..cycles {
        let server = serve(&db, &[]);
        let mut torture = Command::new(env!("CARGO_BIN_EXE_cairn"))
            .arg("torture")
            .arg(&db)
            .args(["--seconds", "60", "--threads", "3", "--seed", &cycle.to_string()])
            .arg("--connect")
            .arg(format!("cairn://{}", server.addr))
            .args(if file { &["--file"][..] } else { &[][..] })
            .stdin(Stdio::null())
            .stdout(append(&log))
            .stderr(append(&err))
            .spawn()
            .expect("spawn torture");
        std::thread::sleep(Duration::from_millis(rng.range(400, 1500)));
        assert!(
            torture.try_wait().unwrap().is_none(),
            "cycle {cycle}: torture ended before the kill:\n{}",
            std::fs::read_to_string(&err).unwrap_or_default()
        );
        server.kill();
        // The client notices and stops by itself, with an error.
        let status = torture.wait().unwrap();
        assert!(
            !status.success(),
            "cycle {cycle}: torture must fail when its server dies"
        );
    }
    let committed = std::fs::read_to_string(&log).unwrap().lines().count();
    eprintln!("{committed} commits acknowledged over {cycles} server kills");
    assert!(committed > 0, "no commit was acknowledged in {cycles} cycles");
    let o = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .arg("verify")
        .arg(&db)
        .arg("--log")
        .arg(&log)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && out.trim_end().ends_with("commits, 0 lost, 0 partial"),
        "verify failed:\n{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
}
