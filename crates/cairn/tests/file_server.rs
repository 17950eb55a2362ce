//! File-server clients (`Arch::File`) of one real server process: they read
//! and write the volume file themselves, see page-server clients' commits
//! and are seen by them, and a client killed after its commit was logged but
//! before it wrote its pages loses nothing — the server repairs the pages
//! when the connection drops, or recovers them from its log if it dies too
//! (on a server that locks key ranges too, where the commit's index
//! changes are the server's).

mod common;

use std::process::Command;

use cairn::{Arch, Database, Options, Persistent, Ref};
use common::ServerChild;

#[derive(Persistent, Debug, Clone, PartialEq)]
struct Account {
    id: u32,
    balance: i64,
}

/// [`common::opts`] for a client of `arch`.
fn opts(arch: Arch) -> Options {
    Options { arch, ..common::opts() }
}

fn connect(server: &ServerChild, arch: Arch) -> Database {
    Database::connect(&format!("cairn://{}", server.addr), opts(arch)).expect("connect")
}

fn balance(db: &Database) -> i64 {
    let mut tx = db.begin().unwrap();
    let a: Ref<Account> = tx.root("a").unwrap();
    let b = tx.get(&a).unwrap().balance;
    tx.commit().unwrap();
    b
}

fn set_balance(db: &Database, to: i64) {
    let mut tx = db.begin().unwrap();
    let a: Ref<Account> = tx.root("a").unwrap();
    tx.update(&a, |x| x.balance = to).unwrap();
    tx.commit().unwrap();
}

fn seed(db: &Database) {
    let mut tx = db.begin().unwrap();
    let a = tx.create(Account { id: 1, balance: 100 }).unwrap();
    tx.set_root("a", &a).unwrap();
    tx.commit().unwrap();
}

#[test]
fn file_and_page_clients_see_each_others_commits() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::serve(&dir.path().join("db"));
    let file = connect(&server, Arch::File);
    let page = connect(&server, Arch::Page);
    seed(&file);
    assert_eq!(balance(&page), 100);
    set_balance(&page, 50);
    // The file client cached the page and its object: the next lock reads
    // the page again, its LSN changed, and the object is decoded anew.
    assert_eq!(balance(&file), 50);
    set_balance(&file, 70);
    // The page client held a right to cache the page: the file client's X
    // called it back.
    assert_eq!(balance(&page), 70);
    let f = file.remote_stats().unwrap();
    assert!(f.pages_written_direct > 0, "the file client writes pages itself: {f:?}");
    assert!(f.pages_read_direct > 0, "the file client reads pages itself: {f:?}");
    assert!(
        f.pages_revalidated > 0,
        "unchanged pages are revalidated, not decoded again: {f:?}"
    );
    drop((file, page));
    server.stop();
    let db = Database::open_with(dir.path().join("db"), opts(Arch::Page)).unwrap();
    assert_eq!(balance(&db), 70);
    db.close().unwrap();
}

cairn_testkit::child_entry_points!(
    dying_file_client_child_process,
    dying_indexing_file_client_child_process
);

#[derive(Persistent, Debug, Clone, PartialEq)]
struct Tagged {
    #[cairn(index)]
    tag: u32,
}

const BY_TAG: cairn::Index<u32, Tagged> = cairn::Index::on("tag");

/// A file-server client of the server `CAIRN_TEST_DYING_FILE_CLIENT`
/// names that kills itself (SIGKILL) once the server has logged its next
/// commit and before it writes the commit's pages.
fn file_client_that_dies_before_writing() -> Database {
    let url = std::env::var("CAIRN_TEST_DYING_FILE_CLIENT").unwrap();
    let db = Database::connect(&url, opts(Arch::File)).expect("connect");
    db.remote_store().expect("remote").inject_before_page_writes(|| {
        let _ = Command::new("kill")
            .args(["-9", &std::process::id().to_string()])
            .status();
        cairn_testkit::child::wait_to_be_killed();
    });
    db
}

/// The child side of the tests below (a child entry point, not a test): a
/// file-server client that sets the balance to 12345 and is killed
/// (SIGKILL, by itself) once the server has logged its commit and before it
/// writes the page.
fn dying_file_client_child_process() {
    let db = file_client_that_dies_before_writing();
    set_balance(&db, 12_345);
    panic!("the client outlived its own SIGKILL");
}

/// The child side of the key-range test below: a file-server client of a
/// server that locks key ranges creates 50 indexed objects (their index
/// entries go to the server as tree changes) and is killed once the server
/// has logged the commit and before it writes its pages.
fn dying_indexing_file_client_child_process() {
    let db = file_client_that_dies_before_writing();
    let mut tx = db.begin().unwrap();
    for tag in 0..50 {
        tx.create(Tagged { tag }).unwrap();
    }
    tx.commit().unwrap();
    panic!("the client outlived its own SIGKILL");
}

/// The tags 0..50 the dying indexing client committed, each found by its
/// index and read.
fn tags_found(db: &Database) -> Vec<u32> {
    let mut tx = db.begin().unwrap();
    let mut found = Vec::new();
    for tag in 0..50u32 {
        if let Some(r) = tx.find_one(&BY_TAG, &tag).unwrap() {
            found.push(tx.get(&r).unwrap().tag);
        }
    }
    tx.commit().unwrap();
    found
}

/// On a server that locks key ranges, a file client's commit changes the
/// index at the server (installed there once logged) and leaves the
/// objects' pages to the client. Killed before it writes them, the client
/// loses nothing: the server repairs its pages, so every index entry names
/// an object that is there — and, the server killed too, recovery redoes
/// both.
#[test]
fn a_file_client_of_a_key_range_server_killed_before_writing_loses_nothing() {
    for kill_server in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let server = common::serve_with(&dir.path().join("db"), &[("CAIRN_TEST_KEY_RANGES", "1")]);
        {
            // The class and its index, made before the dying client runs.
            let db = connect(&server, Arch::File);
            let mut tx = db.begin().unwrap();
            tx.create(Tagged { tag: 1_000 }).unwrap();
            tx.commit().unwrap();
        }
        run_to_its_death("dying_indexing_file_client_child_process", &server);
        let all: Vec<u32> = (0..50).collect();
        if kill_server {
            server.kill();
        } else {
            assert_eq!(
                tags_found(&connect(&server, Arch::Page)),
                all,
                "repaired, seen by a page client"
            );
            assert_eq!(
                tags_found(&connect(&server, Arch::File)),
                all,
                "repaired, seen by a file client"
            );
            server.stop();
        }
        let db = Database::open_with(dir.path().join("db"), opts(Arch::Page)).unwrap();
        assert_eq!(tags_found(&db), all, "server killed: {kill_server}");
        db.close().unwrap();
        let report = cairn::storage::check::check_database(
            &dir.path().join("db"),
            &cairn::storage::volume::VolumeOptions::default(),
        );
        assert!(report.is_ok(), "{:?}", report.problems);
    }
}

/// Starts a server with one account, runs the dying client against it and
/// waits for it to die.
fn run_dying_client() -> (tempfile::TempDir, ServerChild) {
    let dir = tempfile::tempdir().unwrap();
    let server = common::serve(&dir.path().join("db"));
    seed(&connect(&server, Arch::File));
    run_to_its_death("dying_file_client_child_process", &server);
    (dir, server)
}

/// Runs the child entry point `name` against `server` and waits until it
/// has killed itself.
fn run_to_its_death(name: &str, server: &ServerChild) {
    let child = cairn_testkit::child::spawn(name, &[("CAIRN_TEST_DYING_FILE_CLIENT", server.url())]);
    let (status, _) = child.wait();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(9), "the dying client was killed: {status}");
}

#[test]
fn a_file_client_killed_between_logging_and_writing_is_repaired_by_the_server() {
    let (dir, server) = run_dying_client();
    // Its commit is durable; the server repaired the page it never wrote
    // (and holds no lock for it any more): both kinds of client see it.
    assert_eq!(balance(&connect(&server, Arch::File)), 12_345);
    assert_eq!(balance(&connect(&server, Arch::Page)), 12_345);
    set_balance(&connect(&server, Arch::File), 1);
    server.stop();
    let db = Database::open_with(dir.path().join("db"), opts(Arch::Page)).unwrap();
    assert_eq!(balance(&db), 1);
    db.close().unwrap();
    let report = cairn::storage::check::check_database(
        &dir.path().join("db"),
        &cairn::storage::volume::VolumeOptions::default(),
    );
    assert!(report.is_ok(), "{:?}", report.problems);
}

#[test]
fn a_file_client_and_then_the_server_killed_before_the_page_is_written_lose_nothing() {
    let (dir, server) = run_dying_client();
    // The repair is in the server's buffer pool only: kill the server too.
    server.kill();
    let db = Database::open_with(dir.path().join("db"), opts(Arch::Page)).unwrap();
    assert_eq!(balance(&db), 12_345, "recovery redoes the logged commit");
    db.close().unwrap();
    let report = cairn::storage::check::check_database(
        &dir.path().join("db"),
        &cairn::storage::volume::VolumeOptions::default(),
    );
    assert!(report.is_ok(), "{:?}", report.problems);
}
