//! Several page-server clients of one real server process: a writer's
//! commit is seen by a reader that cached the page, a reader inside a
//! transaction makes the writer wait, transfers between accounts from many
//! clients (page- and file-server clients side by side) stay serializable,
//! and a killed client or server (of either kind) loses nothing.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use cairn::{Arch, Database, Error, Options, Persistent, Ref};
use common::ServerChild;

#[derive(Persistent, Debug, Clone, PartialEq)]
struct Account {
    id: u32,
    balance: i64,
}

/// [`common::opts`] for a page-server client: these are the page client's
/// tests (the others run the typed suite).
fn page_client_opts() -> Options {
    Options {
        arch: Arch::Page,
        ..common::opts()
    }
}

/// The architecture a child process is told to use (`CAIRN_TEST_ARCH`:
/// `file`, else page).
fn child_arch() -> Arch {
    match std::env::var("CAIRN_TEST_ARCH").as_deref() {
        Ok("file") => Arch::File,
        Ok("object") => Arch::Object,
        Ok("adaptive") => Arch::Adaptive,
        _ => Arch::Page,
    }
}

fn arch_name(arch: Arch) -> &'static str {
    match arch {
        Arch::File => "file",
        Arch::Page => "page",
        Arch::Object => "object",
        Arch::Adaptive => "adaptive",
    }
}

fn connect(server: &ServerChild) -> Database {
    Database::connect(&format!("cairn://{}", server.addr), page_client_opts()).expect("connect")
}

/// `n` accounts of `balance` each, named by root "accounts-<i>".
fn accounts(db: &Database, n: u32, balance: i64) -> Vec<Ref<Account>> {
    let mut tx = db.begin().unwrap();
    let refs: Vec<Ref<Account>> = (0..n).map(|id| tx.create(Account { id, balance }).unwrap()).collect();
    for (i, r) in refs.iter().enumerate() {
        tx.set_root(&format!("accounts-{i}"), r).unwrap();
    }
    tx.commit().unwrap();
    refs
}

fn total(db: &Database, refs: &[Ref<Account>]) -> i64 {
    let mut tx = db.begin().unwrap();
    let t = refs.iter().map(|r| tx.get(r).unwrap().balance).sum();
    tx.commit().unwrap();
    t
}

#[test]
fn a_writers_commit_reaches_a_reader_that_cached_the_page_and_a_reader_in_a_transaction_makes_it_wait() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::serve(&dir.path().join("db"));
    let writer = connect(&server);
    let reader = connect(&server);
    let a = accounts(&writer, 1, 100).remove(0);

    // The reader caches the page and the object.
    let mut tx = reader.begin().unwrap();
    assert_eq!(tx.get(&a).unwrap().balance, 100);
    tx.commit().unwrap();

    let mut tx = writer.begin().unwrap();
    tx.update(&a, |x| x.balance = 250).unwrap();
    tx.commit().unwrap();

    // The reader's next transaction sees the new value, never its cached one.
    let mut tx = reader.begin().unwrap();
    assert_eq!(tx.get(&a).unwrap().balance, 250);
    // ...and while it holds the page, the writer waits.
    let in_use_before = reader.remote_stats().unwrap().callbacks_in_use;
    let done = Arc::new(AtomicBool::new(false));
    let started = Arc::new(Barrier::new(2));
    let w = {
        let (done, started) = (done.clone(), started.clone());
        let a = a.clone();
        std::thread::spawn(move || {
            let mut tx = writer.begin().unwrap();
            started.wait();
            tx.update(&a, |x| x.balance = 300).unwrap();
            tx.commit().unwrap();
            done.store(true, Ordering::SeqCst);
        })
    };
    started.wait();
    // The writer's X calls the page back; the reader answers that its
    // transaction uses it, so the server cannot grant X until that ends.
    cairn_testkit::wait_until("the reader's in-use answer to the writer's callback", || {
        reader.remote_stats().unwrap().callbacks_in_use > in_use_before
    });
    assert!(
        !done.load(Ordering::SeqCst),
        "the writer must wait for the reader's shared lock"
    );
    assert_eq!(
        tx.get(&a).unwrap().balance,
        250,
        "repeatable read inside the transaction"
    );
    tx.commit().unwrap();
    w.join().unwrap();
    assert!(done.load(Ordering::SeqCst));
    let mut tx = reader.begin().unwrap();
    assert_eq!(tx.get(&a).unwrap().balance, 300);
    tx.commit().unwrap();
    let stats = reader.remote_stats().expect("a remote database");
    assert!(
        stats.callbacks >= 2 && stats.callbacks_in_use >= 1,
        "both writes called the reader back, the second while it read the page: {stats:?}"
    );
    drop(reader);
    server.stop();
}

/// Callback locking: a warm client reads pages it cached in earlier
/// transactions without a single message to the server; a writer's X calls
/// the page back, and the reader's next transaction fetches the new image.
#[test]
fn a_warm_client_reads_without_asking_until_a_writer_calls_the_page_back() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::serve(&dir.path().join("db"));
    let writer = connect(&server);
    let reader = connect(&server);
    let refs = accounts(&writer, 50, 10);
    assert_eq!(total(&reader, &refs), 500, "cold: fetched from the server");
    let before = reader.remote_stats().unwrap();
    for _ in 0..3 {
        assert_eq!(total(&reader, &refs), 500);
    }
    let after = reader.remote_stats().unwrap();
    assert_eq!(
        (after.round_trips, after.one_way, after.bytes_sent),
        (before.round_trips, before.one_way, before.bytes_sent),
        "warm transactions send nothing at all: {before:?} → {after:?}"
    );
    assert!(after.cache_hits > before.cache_hits, "{after:?}");

    // A writer changes one account: the reader is called back (answered by
    // its callback thread while the reader does nothing) …
    let mut tx = writer.begin().unwrap();
    tx.update(&refs[7], |x| x.balance += 5).unwrap();
    tx.commit().unwrap();
    let called = reader.remote_stats().unwrap();
    assert!(called.callbacks > after.callbacks, "{called:?}");
    assert_eq!(called.callbacks_in_use, after.callbacks_in_use, "nothing was reading");
    // … and its next transaction asks the server for that page only.
    assert_eq!(total(&reader, &refs), 505, "never a stale page");
    let last = reader.remote_stats().unwrap();
    assert!(last.round_trips > called.round_trips);
    assert!(
        last.round_trips - called.round_trips <= 2,
        "only the called-back page is fetched again: {called:?} → {last:?}"
    );
    drop(reader);
    drop(writer);
    server.stop();
}

/// A server whose callback table is full (here: bounded at no rights at
/// all) still serves every page, under its lock alone: a client then
/// revalidates its cached pages by LSN in each transaction, is never called
/// back, and never reads a stale page.
#[test]
fn with_the_callback_table_full_pages_are_revalidated_and_never_stale() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::serve_with(&dir.path().join("db"), &[("CAIRN_TEST_CALLBACK_RIGHTS_MAX", "0")]);
    let writer = connect(&server);
    let reader = connect(&server);
    let refs = accounts(&writer, 50, 10);
    assert_eq!(total(&reader, &refs), 500);
    let before = reader.remote_stats().unwrap();
    assert_eq!(total(&reader, &refs), 500);
    let warm = reader.remote_stats().unwrap();
    assert!(
        warm.pages_revalidated > before.pages_revalidated,
        "{before:?} → {warm:?}"
    );
    assert_eq!(
        warm.pages_shipped, before.pages_shipped,
        "unchanged pages are not shipped again"
    );
    assert_eq!(warm.cache_hits, 0, "no right to read under");
    let mut tx = writer.begin().unwrap();
    tx.update(&refs[7], |x| x.balance += 5).unwrap();
    tx.commit().unwrap();
    assert_eq!(total(&reader, &refs), 505, "never a stale page");
    let after = reader.remote_stats().unwrap();
    assert_eq!(after.callbacks, 0, "nothing to call back");
    assert!(after.pages_shipped > warm.pages_shipped, "the changed page is shipped");
    drop(reader);
    drop(writer);
    server.stop();
}

#[derive(Persistent, Debug, Clone, PartialEq)]
struct Sheet {
    id: u32,
    text: String,
}

/// A client that has read more pages than its bound on rights to cache
/// gives the oldest back to the server (RELEASE, sent with its next
/// request). The server's table, bounded here at 48 rights, then has room
/// for another client, which caches its pages across transactions; before,
/// the first client kept every right it was ever granted (until called
/// back), filled the table, and every other client revalidated each page
/// in each transaction. A page whose right was given back is never read
/// stale.
#[test]
fn a_client_past_its_bound_on_rights_gives_the_oldest_back_and_makes_room_for_others() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::serve_with(&dir.path().join("db"), &[("CAIRN_TEST_CALLBACK_RIGHTS_MAX", "48")]);
    let url = format!("cairn://{}", server.addr);
    // 240 sheets of 800 bytes, four to a page: 60 pages. The writer's
    // session ends, and its rights with it.
    let refs: Vec<Ref<Sheet>> = {
        let writer = connect(&server);
        let mut tx = writer.begin().unwrap();
        let refs = (0..240)
            .map(|id| {
                tx.create(Sheet {
                    id,
                    text: "x".repeat(800),
                })
                .unwrap()
            })
            .collect();
        tx.commit().unwrap();
        refs
    };
    let mut o = page_client_opts();
    o.client_buffer_pages = 16;
    o.client_rights_max = 32;
    let big = Database::connect(&url, o).unwrap();
    for chunk in refs.chunks(10) {
        let mut tx = big.begin().unwrap();
        for r in chunk {
            assert_eq!(tx.get(r).unwrap().text.len(), 800);
        }
        tx.commit().unwrap();
    }
    let given = big.remote_stats().unwrap();
    assert!(given.rights_given_back >= 20, "{given:?}");

    // Room for another client's rights: its second reading asks nothing.
    let other = connect(&server);
    let read_some = |db: &Database| {
        let mut tx = db.begin().unwrap();
        let n: usize = refs[100..104].iter().map(|r| tx.get(r).unwrap().text.len()).sum();
        tx.commit().unwrap();
        n
    };
    assert_eq!(read_some(&other), 3200);
    let before = other.remote_stats().unwrap();
    assert_eq!(read_some(&other), 3200);
    let after = other.remote_stats().unwrap();
    assert_eq!(
        after.round_trips, before.round_trips,
        "the other client was granted rights: {before:?} → {after:?}"
    );
    assert!(after.cache_hits > before.cache_hits, "{after:?}");

    // A change to a sheet whose right the big client gave back reaches it.
    let mut tx = other.begin().unwrap();
    tx.update(&refs[0], |s| s.text = "changed".into()).unwrap();
    tx.commit().unwrap();
    let mut tx = big.begin().unwrap();
    assert_eq!(tx.get(&refs[0]).unwrap().text, "changed");
    tx.commit().unwrap();
    drop(big);
    drop(other);
    server.stop();
}

/// A traversal that says where it goes next (`Transaction::prefetch`)
/// fetches those pages in one round trip, not one per page; following the
/// references then asks nothing more, and reads what another client
/// committed before.
#[test]
fn prefetched_references_cost_one_round_trip_for_many_pages() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::serve(&dir.path().join("db"));
    let writer = connect(&server);
    let refs: Vec<Ref<Sheet>> = {
        let mut tx = writer.begin().unwrap();
        let refs = (0..40)
            .map(|id| {
                tx.create(Sheet {
                    id,
                    text: "y".repeat(800),
                })
                .unwrap()
            })
            .collect();
        tx.commit().unwrap();
        refs
    };
    let mut tx = writer.begin().unwrap();
    tx.update(&refs[39], |s| s.text = "last".into()).unwrap();
    tx.commit().unwrap();
    let pages: std::collections::HashSet<_> = refs.iter().map(|r| r.oid().page).collect();
    assert!(pages.len() >= 8, "{} pages", pages.len());

    let reader = connect(&server);
    // The catalog first (its own fetches), then the sheets.
    let mut tx = reader.begin().unwrap();
    assert_eq!(tx.get(&refs[0]).unwrap().id, 0);
    let before = reader.remote_stats().unwrap();
    tx.prefetch(refs.iter()).unwrap();
    let fetched = reader.remote_stats().unwrap();
    assert_eq!(fetched.round_trips - before.round_trips, 1, "{before:?} → {fetched:?}");
    assert_eq!(
        fetched.pages_shipped - before.pages_shipped,
        pages.len() as u64 - 1,
        "every page but the one read already"
    );
    for (i, r) in refs.iter().enumerate() {
        let s = tx.get(r).unwrap();
        assert_eq!(s.id, i as u32);
        assert_eq!(s.text.len(), if i == 39 { 4 } else { 800 });
    }
    tx.commit().unwrap();
    assert_eq!(
        reader.remote_stats().unwrap().round_trips,
        fetched.round_trips,
        "following prefetched references asks nothing (a read-only end is one-way)"
    );
    drop(reader);
    drop(writer);
    server.stop();
}

/// A lock wait that times out on the server reaches the client as the
/// same error an embedded wait gives, fields and all (the mode, the
/// resource, how long it waited), not a message to parse.
#[test]
fn a_lock_timeout_on_the_server_keeps_its_fields() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::serve_with(&dir.path().join("db"), &[("CAIRN_TEST_LOCK_TIMEOUT_MS", "300")]);
    let reader = connect(&server);
    let writer = connect(&server);
    let a = accounts(&writer, 1, 100).remove(0);
    let mut held = reader.begin().unwrap();
    assert_eq!(held.get(&a).unwrap().balance, 100);
    let mut tx = writer.begin().unwrap();
    let e = tx.update(&a, |x| x.balance = 1).unwrap_err();
    match &e {
        Error::LockTimeout {
            resource,
            mode,
            waited_ms,
            ..
        } => {
            assert!(*waited_ms >= 300, "{e}");
            assert_eq!(mode, "X", "{e}");
            assert!(resource.contains("page"), "{e}");
        }
        other => panic!("a lock timeout, not {other:?}"),
    }
    drop(tx);
    held.commit().unwrap();
    let mut tx = writer.begin().unwrap();
    tx.update(&a, |x| x.balance = 1).unwrap();
    tx.commit().unwrap();
    drop(reader);
    drop(writer);
    server.stop();
}

/// Any session reads the server's lock counters (LOCK_STATS), and they
/// count the waits clients provoke: a reader that must wait for a writer's
/// X shows as one more wait, and its time is added once the wait ends. An
/// embedded database has no server to ask.
#[test]
fn a_client_reads_the_servers_lock_counters_and_they_count_a_wait_it_provoked() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::serve(&dir.path().join("db"));
    let writer = connect(&server);
    let reader = connect(&server);
    // An object-server session asks too (it has no page requests otherwise).
    let observer = Database::connect(
        &format!("cairn://{}", server.addr),
        Options {
            arch: Arch::Object,
            ..common::opts()
        },
    )
    .expect("connect");
    let stats = || observer.server_lock_stats().unwrap().expect("a client of a server");
    let a = accounts(&writer, 1, 100).remove(0);
    let before = stats();
    assert!(before.requests > 0, "creating the accounts took locks: {before:?}");
    let mut tx = writer.begin().unwrap();
    tx.update(&a, |x| x.balance = 200).unwrap();
    let r = {
        let a = a.clone();
        std::thread::spawn(move || {
            let mut tx = reader.begin().unwrap();
            let balance = tx.get(&a).unwrap().balance;
            tx.commit().unwrap();
            balance
        })
    };
    // The reader's S waits behind the writer's X: the server counts it.
    cairn_testkit::wait_until("the reader's lock wait on the server", || stats().waits > before.waits);
    let waiting = stats();
    assert_eq!(
        (waiting.deadlocks, waiting.timeouts),
        (before.deadlocks, before.timeouts),
        "{before:?} → {waiting:?}"
    );
    tx.commit().unwrap();
    assert_eq!(r.join().unwrap(), 200, "the reader read after the writer's commit");
    let after = stats();
    assert!(after.requests > before.requests, "{before:?} → {after:?}");
    assert!(after.waits >= waiting.waits, "{waiting:?} → {after:?}");
    // The wait lasted from before the observer's round trip that saw it
    // to the writer's commit: its time is in the sum once it ended.
    assert!(after.wait_micros > before.wait_micros, "{before:?} → {after:?}");
    let embedded = Database::open_with(dir.path().join("embedded"), common::opts()).unwrap();
    assert!(embedded.server_lock_stats().unwrap().is_none());
    embedded.close().unwrap();
    drop((writer, observer));
    server.stop();
}

/// Two clients each read one page under a callback right inside a
/// transaction and then want to write the other's: each write calls the
/// other's page back, the answers "in use" turn into locks, and the cycle
/// they close is found like any deadlock: one victim, the other commits.
#[test]
fn a_deadlock_through_callbacks_is_detected() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::serve(&dir.path().join("db"));
    let one = connect(&server);
    let two = connect(&server);
    let (a, b) = {
        let mut tx = one.begin().unwrap();
        let a = tx.create_in("left", Account { id: 1, balance: 1 }).unwrap();
        let b = tx.create_in("right", Account { id: 2, balance: 2 }).unwrap();
        tx.commit().unwrap();
        (a, b)
    };
    assert_ne!(a.oid().page, b.oid().page);
    // Both clients cache both pages.
    for db in [&one, &two] {
        let mut tx = db.begin().unwrap();
        tx.get(&a).unwrap();
        tx.get(&b).unwrap();
        tx.commit().unwrap();
    }
    let barrier = Arc::new(Barrier::new(2));
    let run = |db: Database, mine: Ref<Account>, theirs: Ref<Account>, barrier: Arc<Barrier>| {
        std::thread::spawn(move || {
            let mut tx = db.begin().unwrap();
            let trips = db.remote_stats().unwrap().round_trips;
            tx.get(&mine).unwrap();
            assert_eq!(
                db.remote_stats().unwrap().round_trips,
                trips,
                "read under the callback right"
            );
            barrier.wait();
            let r = tx.update(&theirs, |x| x.balance += 10);
            let r = r.and_then(|()| tx.commit().map(|()| "committed"));
            (r, db.remote_stats().unwrap())
        })
    };
    let t1 = run(one, a.clone(), b.clone(), barrier.clone());
    let t2 = run(two, b, a, barrier);
    let (r1, s1) = t1.join().unwrap();
    let (r2, s2) = t2.join().unwrap();
    let results = [r1, r2];
    let deadlocks = results
        .iter()
        .filter(|r| matches!(r, Err(Error::Deadlock { .. })))
        .count();
    assert_eq!(deadlocks, 1, "one victim, reported as a deadlock: {results:?}");
    assert!(
        results.iter().any(|r| matches!(r, Ok("committed"))),
        "the other commits: {results:?}"
    );
    assert!(
        s1.callbacks_in_use + s2.callbacks_in_use >= 1,
        "a page was in use when called back: {s1:?} {s2:?}"
    );
    server.stop();
}

const TRANSFER_ACCOUNTS: u32 = 6;

cairn_testkit::child_entry_points!(transfer_client_child_process, locking_client_child_process);

/// The child side of the transfer test (a child entry point, not a test):
/// one client process moving money between the accounts, retrying
/// deadlocks; prints its retries.
fn transfer_client_child_process() {
    let url = std::env::var("CAIRN_TEST_TRANSFER_CLIENT").unwrap();
    let c: u64 = std::env::var("CAIRN_TEST_TRANSFER_SEED").unwrap().parse().unwrap();
    let transfers: usize = std::env::var("CAIRN_CLIENT_TRANSFERS").unwrap().parse().unwrap();
    let db = Database::connect(
        &url,
        Options {
            arch: child_arch(),
            ..page_client_opts()
        },
    )
    .expect("connect");
    let refs: Vec<Ref<Account>> = {
        let mut tx = db.begin().unwrap();
        let refs = (0..TRANSFER_ACCOUNTS)
            .map(|i| tx.root(&format!("accounts-{i}")).unwrap())
            .collect();
        tx.commit().unwrap();
        refs
    };
    let mut seed = 0x9e37_79b9_7f4a_7c15u64 ^ (c + 1);
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let (mut done, mut retries) = (0, 0u64);
    while done < transfers {
        let from = (next() % u64::from(TRANSFER_ACCOUNTS)) as usize;
        let to = (next() % u64::from(TRANSFER_ACCOUNTS)) as usize;
        let amount = (next() % 50) as i64;
        let r = (|| -> cairn::Result<()> {
            let mut tx = db.begin()?;
            tx.update(&refs[from], |a| a.balance -= amount)?;
            tx.update(&refs[to], |a| a.balance += amount)?;
            tx.commit()
        })();
        match r {
            Ok(()) => done += 1,
            Err(e) if e.is_retryable() => retries += 1,
            Err(e) => panic!("client {c}: {e}"),
        }
    }
    println!("CAIRN-TEST-RETRIES {retries}");
}

/// Transfers between accounts from four client *processes* (two page-server
/// clients, two file-server clients) while this process audits the total in
/// read-only transactions (reading under callback rights the writers keep
/// calling back): every audit and the end state see the same total, so the
/// clients' transactions were serializable across the architectures.
#[test]
fn transfers_from_many_clients_keep_the_total_and_deadlocks_are_retried() {
    const CLIENTS: u64 = 4;
    let transfers: usize = std::env::var("CAIRN_CLIENT_TRANSFERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40);
    let dir = tempfile::tempdir().unwrap();
    let server = common::serve(&dir.path().join("db"));
    let setup = connect(&server);
    let refs = accounts(&setup, TRANSFER_ACCOUNTS, 1_000);
    let expected = total(&setup, &refs);
    let children: Vec<_> = (0..CLIENTS)
        .map(|c| {
            cairn_testkit::child::spawn(
                "transfer_client_child_process",
                &[
                    ("CAIRN_TEST_TRANSFER_CLIENT", server.url()),
                    ("CAIRN_TEST_TRANSFER_SEED", c.to_string()),
                    (
                        "CAIRN_TEST_ARCH",
                        (if c % 2 == 1 { "file" } else { "page" }).to_string(),
                    ),
                    ("CAIRN_CLIENT_TRANSFERS", transfers.to_string()),
                ],
            )
        })
        .collect();
    // Audit while they run.
    let finished = Arc::new(AtomicBool::new(false));
    let auditor = {
        let (finished, refs) = (finished.clone(), refs.clone());
        let db = connect(&server);
        std::thread::spawn(move || {
            let mut audits = 0u64;
            while !finished.load(Ordering::Relaxed) {
                let r = (|| -> cairn::Result<i64> {
                    let mut tx = db.begin()?;
                    let mut t = 0;
                    for r in &refs {
                        t += tx.get(r)?.balance;
                    }
                    tx.commit()?;
                    Ok(t)
                })();
                match r {
                    Ok(t) => {
                        assert_eq!(t, expected, "an audit saw money made or lost");
                        audits += 1;
                    }
                    Err(e) if e.is_retryable() => {}
                    Err(e) => panic!("auditor: {e}"),
                }
            }
            (audits, db.remote_stats().unwrap())
        })
    };
    let mut retries = 0u64;
    for child in children {
        let (status, out) = child.wait();
        assert!(status.success(), "a client process failed:\n{out}");
        let line = out
            .lines()
            .find_map(|l| l.split("CAIRN-TEST-RETRIES ").nth(1))
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("no retry count from a client:\n{out}"));
        retries += line.parse::<u64>().unwrap();
    }
    finished.store(true, Ordering::Relaxed);
    let (audits, stats) = auditor.join().unwrap();
    assert!(audits > 0, "the auditor ran");
    assert_eq!(total(&setup, &refs), expected, "money was made or lost");
    eprintln!("{CLIENTS} client processes, {retries} deadlocks retried, {audits} audits; auditor: {stats:?}");
    drop(setup);
    server.stop();
    // And the server's database agrees once it is opened embedded.
    let db = Database::open_with(dir.path().join("db"), page_client_opts()).unwrap();
    assert_eq!(total(&db, &refs), expected);
    db.close().unwrap();
}

/// The child side of the killed-client test (a child entry point, not a
/// test): connects, locks an account for update, says so on stdout and
/// waits to be killed.
fn locking_client_child_process() {
    let url = std::env::var("CAIRN_TEST_LOCKING_CLIENT").unwrap();
    let db = Database::connect(
        &url,
        Options {
            arch: child_arch(),
            ..page_client_opts()
        },
    )
    .expect("connect");
    let mut tx = db.begin().unwrap();
    let a: Ref<Account> = tx.root("accounts-0").unwrap();
    tx.update(&a, |x| x.balance = -1).unwrap();
    cairn_testkit::child::say_locked();
    cairn_testkit::child::wait_to_be_killed();
}

#[test]
fn a_killed_client_leaves_no_locks_and_nothing_partial() {
    for arch in [Arch::Page, Arch::File] {
        a_killed_client_of(arch);
    }
}

fn a_killed_client_of(arch: Arch) {
    let dir = tempfile::tempdir().unwrap();
    let server = common::serve(&dir.path().join("db"));
    let db = connect(&server);
    let a = accounts(&db, 1, 100).remove(0);
    common::kill_child_once_locked(
        "locking_client_child_process",
        &[
            ("CAIRN_TEST_LOCKING_CLIENT", format!("cairn://{}", server.addr)),
            ("CAIRN_TEST_ARCH", arch_name(arch).to_string()),
        ],
    );
    // Its X lock is gone with its connection: this update does not wait out
    // the lock timeout, and the killed client's change is nowhere.
    let started = Instant::now();
    let mut tx = db.begin().unwrap();
    assert_eq!(
        tx.get(&a).unwrap().balance,
        100,
        "nothing of the killed client's transaction"
    );
    tx.update(&a, |x| x.balance = 7).unwrap();
    tx.commit().unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the lock was released when the client died"
    );
    drop(db);
    server.stop();
}

#[test]
fn connecting_to_nothing_or_a_bad_url_is_a_clear_error() {
    for url in ["http://localhost:1", "cairn+unix://relative", "cairn://"] {
        let e = Database::connect(url, page_client_opts()).unwrap_err();
        assert!(e.to_string().contains("URL"), "{url}: {e}");
    }
    // A port nobody listens on (bound and closed again).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let e = Database::connect(&format!("cairn://127.0.0.1:{port}"), page_client_opts()).unwrap_err();
    assert!(matches!(e, Error::Net { .. }), "{e}");
    assert!(e.to_string().contains("cannot connect"), "{e}");
}

#[test]
fn a_server_killed_under_a_transaction_is_a_net_error_and_loses_no_acknowledged_commit() {
    for arch in [Arch::Page, Arch::File] {
        a_server_killed_under(arch);
    }
}

fn a_server_killed_under(arch: Arch) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let server = common::serve(&path);
    let db = Database::connect(
        &format!("cairn://{}", server.addr),
        Options {
            arch,
            ..page_client_opts()
        },
    )
    .expect("connect");
    let a = accounts(&db, 1, 100).remove(0);
    let mut tx = db.begin().unwrap();
    tx.update(&a, |x| x.balance = 5).unwrap();
    server.kill();
    let e = tx.commit().unwrap_err();
    assert!(matches!(e, Error::Net { .. }), "{e}");
    let e = db.begin().expect_err("no transaction without a server");
    assert!(matches!(e, Error::Net { .. }), "{e}");
    drop(db);
    // The acknowledged commit is there; the one cut off is not.
    let db = Database::open_with(&path, page_client_opts()).unwrap();
    let mut tx = db.begin().unwrap();
    assert_eq!(tx.get(&a).unwrap().balance, 100);
    tx.commit().unwrap();
    db.close().unwrap();
}

#[derive(Persistent, Debug)]
struct Blob {
    bytes: Vec<u8>,
}

fn blob(mib: u32) -> Blob {
    Blob {
        bytes: (0..mib << 20).map(|i| (i % 251) as u8).collect(),
    }
}

/// A transaction larger than one message (16 MiB) commits: its records go
/// ahead in STAGE messages, and the COMMIT carries the last of them.
#[test]
fn a_transaction_larger_than_one_message_commits_in_stages() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::serve(&dir.path().join("db"));
    let db = connect(&server);
    let mut tx = db.begin().unwrap();
    let big = tx.create(blob(40)).unwrap();
    let before = db.remote_stats().unwrap();
    tx.commit().unwrap();
    let after = db.remote_stats().unwrap();
    assert!(
        after.round_trips - before.round_trips >= 3,
        "40 MiB take at least two STAGEs and the COMMIT: {before:?} → {after:?}"
    );
    drop(db);
    // Another client reads it back whole.
    let other = connect(&server);
    let mut tx = other.begin().unwrap();
    assert_eq!(tx.get(&big).unwrap().bytes, blob(40).bytes);
    tx.commit().unwrap();
    drop(other);
    server.stop();
}

/// Past the server's limit on one transaction's redo bytes the commit fails
/// with a clear limit error, nothing of it remains, and the connection
/// works on.
#[test]
fn a_transaction_over_the_servers_size_limit_fails_clearly_and_the_connection_stays_usable() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::serve_with(&dir.path().join("db"), &[("CAIRN_TEST_TXN_BYTES_MAX", "25000000")]);
    let db = connect(&server);
    let mut tx = db.begin().unwrap();
    let big = tx.create(blob(40)).unwrap();
    let e = tx.commit().unwrap_err();
    assert!(e.to_string().contains("txn_bytes_max"), "{e}");
    assert!(!matches!(e, Error::Net { .. }), "not a lost connection: {e}");
    // Nothing of it is there, and the same connection works on.
    let mut tx = db.begin().unwrap();
    assert!(
        matches!(tx.get(&big), Err(Error::NotFound { .. })),
        "nothing of the refused commit"
    );
    let a = tx.create(Account { id: 1, balance: 2 }).unwrap();
    tx.commit().unwrap();
    let mut tx = db.begin().unwrap();
    assert_eq!(tx.get(&a).unwrap().balance, 2);
    tx.commit().unwrap();
    drop(db);
    server.stop();
}

/// Reading an object through the storage transaction asks first whether its
/// page is in use, which a page-server client answers by locking and
/// fetching the page: a deadlock there must be a deadlock, never a "no such
/// object".
#[test]
fn a_deadlock_on_a_pages_first_read_is_a_deadlock_not_a_missing_object() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::serve(&dir.path().join("db"));
    let one = connect(&server);
    let two = connect(&server);
    let (a, b) = {
        let mut tx = one.begin().unwrap();
        let a = tx.create_in("left", Account { id: 1, balance: 1 }).unwrap();
        let b = tx.create_in("right", Account { id: 2, balance: 2 }).unwrap();
        tx.commit().unwrap();
        (a, b)
    };
    assert_ne!(a.oid().page, b.oid().page);
    let barrier = Arc::new(Barrier::new(2));
    let run = |db: Database, mine: Ref<Account>, theirs: Ref<Account>, barrier: Arc<Barrier>| {
        std::thread::spawn(move || {
            let mut tx = db.begin().unwrap();
            tx.update(&mine, |x| x.balance += 10).unwrap();
            barrier.wait();
            let r = tx.storage().expect("page-based").read(theirs.oid());
            match r {
                Ok(_) => tx.commit().map(|()| "committed"),
                Err(e) => Err(cairn::Error::from(e)),
            }
        })
    };
    let t1 = run(one, a.clone(), b.clone(), barrier.clone());
    let t2 = run(two, b, a, barrier);
    let results = [t1.join().unwrap(), t2.join().unwrap()];
    let deadlocks = results
        .iter()
        .filter(|r| matches!(r, Err(Error::Deadlock { .. })))
        .count();
    assert_eq!(deadlocks, 1, "one victim, reported as a deadlock: {results:?}");
    assert!(
        results.iter().any(|r| matches!(r, Ok("committed"))),
        "the other commits: {results:?}"
    );
    server.stop();
}

/// A group scan knows its pages in advance: a page-server client fetches
/// them in pipelined batches, so reading every object of ~100 pages costs a
/// handful of round trips, not one per page (or per object).
#[test]
fn a_scan_fetches_its_pages_in_batches() {
    #[derive(Persistent, Debug)]
    struct Note {
        text: String,
    }
    let dir = tempfile::tempdir().unwrap();
    let server = common::serve(&dir.path().join("db"));
    let writer = connect(&server);
    let mut tx = writer.begin().unwrap();
    for i in 0..2_000 {
        tx.create(Note {
            text: format!("{i:0>200}"),
        })
        .unwrap();
    }
    tx.commit().unwrap();
    drop(writer);

    let reader = connect(&server);
    let mut tx = reader.begin().unwrap();
    let before = reader.remote_stats().unwrap();
    let st = tx.storage().expect("page-based");
    let oids = st.scan_all(cairn::storage::GroupId::DEFAULT).unwrap();
    let mut pages = std::collections::BTreeSet::new();
    for oid in &oids {
        assert!(st.read(*oid).unwrap().len() > 200, "the whole record");
        pages.insert(oid.page);
    }
    let after = reader.remote_stats().unwrap();
    tx.commit().unwrap();
    assert_eq!(oids.len(), 2_000);
    assert!(pages.len() > 50, "the objects span many pages: {}", pages.len());
    let trips = after.round_trips - before.round_trips;
    assert!(
        trips <= 4,
        "{trips} round trips to scan {} pages (lock, page list, one FETCH batch)",
        pages.len()
    );
    assert!(after.pages_shipped - before.pages_shipped >= pages.len() as u64);
    drop(reader);
    server.stop();
}
