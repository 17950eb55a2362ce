//! Child-process entry points: run in a child of this very binary, not
//! listed or counted as tests, and their outcome reaches the parent.

use std::os::unix::process::ExitStatusExt;

use cairn_testkit::child::{self, LOCKED};

cairn_testkit::child_entry_points!(says_hello, panics, holds_until_killed, listens_on_the_second_start);

fn says_hello() {
    println!("CAIRN-TEST-HELLO {}", std::env::var("GREETING").unwrap());
}

fn panics() {
    panic!("on purpose");
}

/// A "server" whose first start fails, as one refused a database another
/// process briefly holds: it exits before listening unless `MARK` exists,
/// and makes `MARK` as it fails.
fn listens_on_the_second_start() {
    let mark = std::path::PathBuf::from(std::env::var("MARK").unwrap());
    if !mark.exists() {
        std::fs::write(&mark, b"").unwrap();
        std::process::exit(1);
    }
    println!("{}127.0.0.1:1", cairn_testkit::LISTENING);
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
}

fn holds_until_killed() {
    child::say_locked();
    child::wait_to_be_killed();
}

#[test]
fn an_entry_point_runs_in_a_child_and_says_what_it_was_told() {
    let mut c = child::spawn("says_hello", &[("GREETING", "hi".to_string())]);
    assert_eq!(c.wait_for("CAIRN-TEST-HELLO "), "hi");
    let (status, _) = c.wait();
    assert!(status.success(), "{status}");
}

#[test]
fn a_panicking_entry_point_fails_its_child() {
    let (status, _) = child::spawn("panics", &[]).wait();
    assert_eq!(status.code(), Some(101));
}

#[test]
fn a_child_killed_once_locked_dies_of_the_signal() {
    let mut c = child::spawn("holds_until_killed", &[]);
    assert_eq!(c.wait_for(LOCKED), "");
    let pid = c.id();
    c.kill();
    // Reaped: the process is gone.
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
}

#[test]
fn a_child_let_go_without_a_kill_fails_instead_of_waiting_forever() {
    let mut c = child::spawn("holds_until_killed", &[]);
    c.wait_for(LOCKED);
    // Closing its stdin is what the parent's death does too.
    let (status, _) = c.close_stdin_and_wait();
    assert_eq!(status.code(), Some(101), "{status:?}");
    assert_eq!(status.signal(), None);
}

#[test]
fn an_unknown_entry_point_runs_no_test_and_says_no_marker() {
    let mut c = child::spawn("no_such_entry_point", &[]);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| c.wait_for(LOCKED)));
    assert!(r.is_err(), "no marker from a binary without that entry point");
}

#[test]
fn entry_points_are_not_listed_as_tests() {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--list", "--format", "terse"])
        .output()
        .unwrap();
    let list = String::from_utf8(out.stdout).unwrap();
    assert!(list.contains("entry_points_are_not_listed_as_tests: test"), "{list}");
    for name in ["says_hello", "panics", "holds_until_killed"] {
        assert!(!list.lines().any(|l| l.starts_with(name)), "{name} is listed:\n{list}");
    }
}

#[test]
fn a_server_child_that_ends_before_it_listens_is_started_again() {
    let mark = std::env::temp_dir().join(format!("cairn-testkit-failed-once-{}", std::process::id()));
    let _ = std::fs::remove_file(&mark);
    let server = cairn_testkit::ServerChild::entry_point("listens_on_the_second_start", [("MARK", mark.as_os_str())]);
    assert!(mark.exists(), "the first start failed and left its mark");
    assert_eq!(server.url(), "cairn://127.0.0.1:1");
    drop(server);
    std::fs::remove_file(&mark).unwrap();
}
