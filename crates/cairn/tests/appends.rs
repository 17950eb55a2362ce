//! `Transaction::append`: adding to an object's list field without reading
//! it. On every backend it means what `update` pushing the value means (the
//! transaction reads its appends, commit keeps them, abort drops them, a
//! field that is not such a list is an error); where objects are locked
//! (embedded, by default) appenders of one object run at once and a reader
//! waits for them all.

mod common;

use std::time::Duration;

use cairn::{Error, List, Options, Persistent, Ref};
use common::{Backend, Site};

on_every_backend!(
    appends_read_back_commit_abort_and_refuse_what_is_not_a_list,
    a_copy_cached_while_an_append_waits_for_its_commit_is_not_read_after_it
);

#[derive(Persistent, Debug, Clone, PartialEq)]
struct Node {
    name: String,
    from: List<Ref<Node>>,
    tags: Vec<u16>,
    #[cairn(index)]
    code: Vec<u8>,
}

fn node(name: &str) -> Node {
    Node {
        name: name.into(),
        from: List::new(),
        tags: Vec::new(),
        code: Vec::new(),
    }
}

fn appends_read_back_commit_abort_and_refuse_what_is_not_a_list(b: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let mut site = Site::new(b, &path);
    let db = site.open(common::opts());
    let mut tx = db.begin().unwrap();
    let hub = tx.create(node("hub")).unwrap();
    let a = tx.create(node("a")).unwrap();
    let c = tx.create(node("c")).unwrap();
    tx.commit().unwrap();

    let mut tx = db.begin().unwrap();
    tx.append(&hub, "from", &a).unwrap();
    tx.append(&hub, "tags", &7u16).unwrap();
    tx.append(&hub, "from", &c).unwrap();
    // Read back in the transaction, by get and by view.
    let h = tx.get(&hub).unwrap();
    assert_eq!(
        (h.from.0.clone(), h.tags.clone()),
        (vec![a.clone(), c.clone()], vec![7])
    );
    assert_eq!(tx.view(&hub).unwrap().get().from().len(), 2);
    // An append after a read (the object is this transaction's own now),
    // and one to an indexed list, which keeps the index right.
    tx.append(&hub, "tags", &8u16).unwrap();
    tx.append(&hub, "code", &0x41u8).unwrap();
    tx.commit().unwrap();

    // Errors name what is wrong, and change nothing.
    let mut tx = db.begin().unwrap();
    for (field, err) in [
        ("name", "no field name"),
        ("nope", "no field nope"),
        ("tags", "no field tags of type Vec<Ref<Node>>"),
    ] {
        let e = tx.append(&hub, field, &a).unwrap_err();
        assert!(
            matches!(&e, Error::InvalidArgument(m) if m.contains(err)),
            "{field}: {e}"
        );
    }
    // An aborted append leaves nothing.
    tx.append(&hub, "from", &hub).unwrap();
    tx.abort().unwrap();

    let check = |db: &cairn::Database| {
        let mut tx = db.begin().unwrap();
        let h = tx.get(&hub).unwrap();
        assert_eq!(h.from.0, vec![a.clone(), c.clone()]);
        assert_eq!((h.tags.clone(), h.code.clone()), (vec![7, 8], vec![0x41]));
        let index = cairn::Index::<Vec<u8>, Node>::on("code");
        assert_eq!(tx.find(&index, &vec![0x41]).unwrap(), vec![hub.clone()]);
        tx.commit().unwrap();
    };
    check(&db);
    db.close().unwrap();
    let db = site.open(common::opts());
    check(&db);
    db.close().unwrap();
}

/// Under page locking an append holds no lock until its transaction
/// commits, so another transaction reads the object meanwhile and the
/// cache keeps its copy; the appender's commit drops that copy under the
/// X it applies its appends under, so no later reader is served it (the
/// isolation checker found the stale read before it did).
fn a_copy_cached_while_an_append_waits_for_its_commit_is_not_read_after_it(b: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let mut site = Site::new(b, &dir.path().join("db"));
    let db = site.open(common::opts());
    let mut tx = db.begin().unwrap();
    let hub = tx.create(node("hub")).unwrap();
    tx.commit().unwrap();

    let mut appender = db.begin().unwrap();
    appender.append(&hub, "tags", &1u16).unwrap();
    if matches!(b, Backend::Embedded | Backend::Page | Backend::File) {
        // Page locking: the object is read (and cached) meanwhile.
        let mut reader = db.begin().unwrap();
        assert!(reader.get(&hub).unwrap().tags.is_empty());
        assert_eq!(reader.view(&hub).unwrap().get().tags().len(), 0);
        reader.commit().unwrap();
    }
    appender.commit().unwrap();
    let mut tx = db.begin().unwrap();
    assert_eq!(tx.get(&hub).unwrap().tags, vec![1]);
    assert_eq!(tx.view(&hub).unwrap().get().tags().len(), 1);
    tx.commit().unwrap();
    db.close().unwrap();
}

fn embedded(dir: &std::path::Path) -> cairn::Database {
    let mut o = Options::default();
    o.storage.background = false;
    o.storage.lock_timeout = Duration::from_millis(300);
    cairn::Database::open_with(dir, o).unwrap()
}

/// Embedded (objects locked): two transactions append to one object at
/// once — neither waits, or it would end in the 300 ms lock timeout — and
/// a reader of the object waits for both; afterwards the object holds
/// both appends, each transaction's together.
#[test]
fn appenders_of_one_object_do_not_wait_for_each_other_and_a_reader_waits_for_them() {
    let dir = tempfile::tempdir().unwrap();
    let db = embedded(dir.path());
    let mut tx = db.begin().unwrap();
    let hub = tx.create(node("hub")).unwrap();
    tx.commit().unwrap();

    let mut t1 = db.begin().unwrap();
    let mut t2 = db.begin().unwrap();
    t1.append(&hub, "tags", &1u16).unwrap();
    t2.append(&hub, "tags", &2u16).unwrap();
    t1.append(&hub, "tags", &3u16).unwrap();
    let mut reader = db.begin().unwrap();
    assert!(matches!(reader.get(&hub), Err(Error::LockTimeout { .. })));
    drop(reader);
    t2.commit().unwrap();
    t1.commit().unwrap();
    let mut tx = db.begin().unwrap();
    assert_eq!(tx.get(&hub).unwrap().tags, vec![2, 1, 3]);
    tx.commit().unwrap();
    db.close().unwrap();
}

#[test]
fn object_client_appends_are_kept_until_commit() {
    appends_of_remote_clients_are_kept_until_commit(Backend::Object);
}

#[test]
fn adaptive_client_appends_are_kept_until_commit() {
    appends_of_remote_clients_are_kept_until_commit(Backend::Adaptive);
}

#[test]
fn page_client_appends_are_kept_until_commit() {
    appends_of_remote_clients_are_kept_until_commit(Backend::Page);
}

#[test]
fn file_client_appends_are_kept_until_commit() {
    appends_of_remote_clients_are_kept_until_commit(Backend::File);
}

/// Object-server clients keep appends and send them with the commit,
/// where the server applies them to the object as it then stands under
/// an append lock; page and file clients keep them to their commit, which
/// locks the objects' pages X together and applies them. Either way one
/// client's transaction appending to an object does not hold it, so
/// another client's append to it commits meanwhile (with the append made
/// a rewrite, the second would wait for the first's X until the server's
/// lock timeout). A server method sees the appends (they go ahead of it,
/// OBJ_FLUSH), and so does a read after it.
fn appends_of_remote_clients_are_kept_until_commit(b: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let mut site = Site::new(b, &dir.path().join("db")).server_env("CAIRN_TEST_LOCK_TIMEOUT_MS", "2000");
    let db1 = site.open(common::opts());
    let db2 = site.open(common::opts());
    let mut tx = db1.begin().unwrap();
    let hub = tx.create_in("nodes", node("hub")).unwrap();
    let spoke = tx.create_in("nodes", node("spoke")).unwrap();
    tx.commit().unwrap();

    let mut t1 = db1.begin().unwrap();
    t1.append(&hub, "tags", &1u16).unwrap();
    t1.append(&hub, "from", &spoke).unwrap();
    let mut t2 = db2.begin().unwrap();
    t2.append(&hub, "tags", &2u16).unwrap();
    t2.commit().unwrap();
    t1.append(&hub, "tags", &3u16).unwrap();
    t1.commit().unwrap();
    let mut tx = db2.begin().unwrap();
    let h = tx.get(&hub).unwrap();
    assert_eq!((h.tags.clone(), h.from.0.clone()), (vec![2, 1, 3], vec![spoke.clone()]));
    tx.commit().unwrap();

    // Sent ahead of a server method, which sees them; read back after it,
    // appended to again, committed.
    let mut tx = db1.begin().unwrap();
    tx.append(&hub, "tags", &4u16).unwrap();
    let tagged = [cairn::Predicate::new("name", cairn::Cmp::Eq, "hub")];
    assert_eq!(tx.count::<Node>("nodes", &tagged).unwrap(), 1);
    tx.append(&spoke, "tags", &9u16).unwrap();
    assert_eq!(tx.get(&hub).unwrap().tags, vec![2, 1, 3, 4]);
    tx.append(&hub, "tags", &5u16).unwrap();
    tx.commit().unwrap();
    for db in [&db1, &db2] {
        let mut tx = db.begin().unwrap();
        assert_eq!(tx.get(&hub).unwrap().tags, vec![2, 1, 3, 4, 5]);
        assert_eq!(tx.get(&spoke).unwrap().tags, vec![9]);
        tx.commit().unwrap();
    }
    db1.close().unwrap();
    db2.close().unwrap();
}

#[test]
fn object_client_appends_lock_before_its_reads_are_let_go() {
    appends_lock_before_the_reads_are_let_go(Backend::Object);
}

#[test]
fn adaptive_client_appends_lock_before_its_reads_are_let_go() {
    appends_lock_before_the_reads_are_let_go(Backend::Adaptive);
}

#[test]
fn page_client_appends_lock_before_its_reads_are_let_go() {
    appends_lock_before_the_reads_are_let_go(Backend::Page);
}

#[test]
fn file_client_appends_lock_before_its_reads_are_let_go() {
    appends_lock_before_the_reads_are_let_go(Backend::File);
}

/// Write skew through appends (found by the isolation checker): T1 reads
/// `b` under its client's right and appends to `a`; T2 reads `a` and
/// appends to `b`. Each read must hold off the other's append, so both
/// cannot commit. A client stops naming a transaction as a reader under
/// its rights once the transaction's end is on the way; were the appends'
/// locks taken in the commit, after that, T2's append to `b` would not
/// wait for T1 and both would commit. They are taken ahead of it (a page
/// or file client's, as its commit begins, before its pages go): T1's
/// waits for T2's read, T2's then waits for T1's, and one of them is a
/// deadlock victim.
fn appends_lock_before_the_reads_are_let_go(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let mut site = Site::new(backend, &dir.path().join("db"));
    let db1 = site.open(common::opts());
    let db2 = site.open(common::opts());
    let mut tx = db1.begin().unwrap();
    let a = tx.create_in("nodes", node("a")).unwrap();
    let b = tx.create_in("nodes", node("b")).unwrap();
    tx.commit().unwrap();
    // db1 keeps `b` under a right.
    let mut tx = db1.begin().unwrap();
    tx.get(&b).unwrap();
    tx.commit().unwrap();

    let mut t1 = db1.begin().unwrap();
    assert!(t1.get(&b).unwrap().tags.is_empty());
    t1.append(&a, "tags", &1u16).unwrap();
    let mut t2 = db2.begin().unwrap();
    assert!(t2.get(&a).unwrap().tags.is_empty());
    let waits = || db2.server_lock_stats().unwrap().expect("served").waits;
    let before = waits();
    let outcomes = std::thread::scope(|s| {
        let first = s.spawn(move || t1.commit());
        // T1's append waits for T2's read of `a` on the server.
        while waits() == before {
            std::thread::yield_now();
        }
        t2.append(&b, "tags", &2u16).unwrap();
        let second = t2.commit();
        [first.join().unwrap(), second]
    });
    let committed = outcomes.iter().filter(|r| r.is_ok()).count();
    assert_eq!(
        committed, 1,
        "both appends committed over each other's reads: {outcomes:?}"
    );
    for r in &outcomes {
        if let Err(e) = r {
            assert!(e.is_retryable(), "{e}");
        }
    }
    db1.close().unwrap();
    db2.close().unwrap();
}

/// A record whose list is its last field: an append to it, once the
/// record is large, is an edit in place (its count and its end).
#[derive(Persistent, Debug, Clone, PartialEq)]
struct Hub {
    name: String,
    vals: List<u64>,
}

#[test]
fn page_client_commits_appends_to_large_lists_a_round_trip_per_level() {
    commits_appends_to_large_lists_a_round_trip_per_level(Backend::Page);
}

#[test]
fn file_client_commits_appends_to_large_lists_a_round_trip_per_level() {
    commits_appends_to_large_lists_a_round_trip_per_level(Backend::File);
}

/// The appends a page or file client keeps to commit, to lists kept as
/// large objects of two data pages and an index page: the commit locks
/// the homes in one round trip, the roots in one, and the first and last
/// data pages of them all in one, then sends COMMIT. Locked one by one
/// (each head read under S and upgraded, each last page on its own) it
/// took about two round trips per list. What the lists hold afterwards is
/// what `update` pushing the values would make, seen by another client.
fn commits_appends_to_large_lists_a_round_trip_per_level(b: Backend) {
    const LISTS: usize = 6;
    let dir = tempfile::tempdir().unwrap();
    let mut site = Site::new(b, &dir.path().join("db"));
    let loader = site.open(common::opts());
    let start: Vec<u64> = (0..1500).collect();
    let mut tx = loader.begin().unwrap();
    let hubs: Vec<Ref<Hub>> = (0..LISTS)
        .map(|i| {
            let hub = Hub {
                name: format!("hub {i}"),
                vals: List(start.clone()),
            };
            tx.create_in("hubs", hub).unwrap()
        })
        .collect();
    tx.commit().unwrap();

    let db = site.open(common::opts());
    let mut tx = db.begin().unwrap();
    for (i, hub) in hubs.iter().enumerate() {
        tx.append(hub, "vals", &(10_000 + i as u64)).unwrap();
    }
    let before = db.remote_stats().unwrap().round_trips;
    tx.commit().unwrap();
    let trips = db.remote_stats().unwrap().round_trips - before;
    assert!(
        trips <= 5,
        "{trips} round trips to commit appends to {LISTS} large lists (homes, roots, data pages, COMMIT)"
    );
    let mut tx = loader.begin().unwrap();
    for (i, hub) in hubs.iter().enumerate() {
        let vals = tx.get(hub).unwrap().vals.to_vec();
        assert_eq!(vals.len(), start.len() + 1);
        assert_eq!(vals[..start.len()], start[..]);
        assert_eq!(vals[start.len()], 10_000 + i as u64);
    }
    tx.commit().unwrap();
    db.close().unwrap();
    loader.close().unwrap();
}

/// A server whose bound on one session's waiting requests (here 1) is
/// below the callback answers a client sends at once: a writer's commit
/// locks the pages of 40 objects another client reads in an open
/// transaction, whose answers all name that reader and are served on
/// blocking threads. Those the server refuses for its bound are sent
/// again, so the writer waits for the reader's end (not for its lock
/// timeout, after which the server would end the reader's session as
/// silent), and both commit.
#[test]
fn page_client_answers_refused_for_the_servers_bound_are_sent_again() {
    let dir = tempfile::tempdir().unwrap();
    let mut site = Site::new(Backend::Page, &dir.path().join("db"))
        .server_env("CAIRN_TEST_WAITING_PER_SESSION_MAX", "1")
        .server_env("CAIRN_TEST_LOCK_TIMEOUT_MS", "20000");
    let writer = site.open(common::opts());
    let reader = site.open(common::opts());
    // About four to a page: the 40 lie on ten pages or so.
    let mut tx = writer.begin().unwrap();
    let nodes: Vec<Ref<Node>> = (0..40)
        .map(|i| {
            tx.create_in("nodes", node(&format!("{i:04}{}", "n".repeat(900))))
                .unwrap()
        })
        .collect();
    tx.commit().unwrap();

    let mut read = reader.begin().unwrap();
    for n in &nodes {
        assert!(read.get(n).unwrap().tags.is_empty());
    }
    let before = reader.remote_stats().unwrap();
    std::thread::scope(|s| {
        let w = s.spawn(|| {
            let mut tx = writer.begin().unwrap();
            for n in &nodes {
                tx.append(n, "tags", &1u16).unwrap();
            }
            tx.commit()
        });
        // The reader ends once its pages were called back (its answers
        // named it), not before.
        while reader.remote_stats().unwrap().callbacks_in_use == before.callbacks_in_use {
            assert!(!w.is_finished(), "the writer committed past the reader");
            std::thread::yield_now();
        }
        read.commit().unwrap();
        w.join().unwrap().expect("the writer commits once the reader ended");
    });
    let after = reader.remote_stats().unwrap();
    eprintln!(
        "pages {}, callbacks {}, answers naming the reader: {}, refused and sent again: {}",
        nodes
            .iter()
            .map(|n| n.oid().page)
            .collect::<std::collections::BTreeSet<_>>()
            .len(),
        after.callbacks - before.callbacks,
        after.callbacks_in_use - before.callbacks_in_use,
        after.answers_refused - before.answers_refused
    );
    let mut tx = reader.begin().unwrap();
    for n in &nodes {
        assert_eq!(tx.get(n).unwrap().tags, vec![1]);
    }
    tx.commit().unwrap();
    writer.close().unwrap();
    reader.close().unwrap();
}

/// A page client's appends are kept by its server at object grain
/// (APPEND): IX on the page and A on the object, as an object client's
/// are. So an object client's append to one object of a page, kept on the
/// server while its transaction runs on, does not hold up a page client's
/// commit of an append to another object of the page: it commits without
/// a lock wait (applying it under X on the page, the commit waited for the
/// object client's end: here, until the 2 s lock timeout failed it). A
/// third client that cached the page is called back, and every client
/// reads both appends once both committed. The appender brings its own
/// copy of the page up to date from its commit's reply.
#[test]
fn a_page_clients_append_commits_beside_another_clients_append_to_the_page() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::serve_with(&dir.path().join("db"), &[("CAIRN_TEST_LOCK_TIMEOUT_MS", "2000")]);
    let connect = |arch| cairn::Database::connect(&server.url(), Options { arch, ..common::opts() }).unwrap();
    let page = connect(cairn::Arch::Page);
    let object = connect(cairn::Arch::Object);
    let reader = connect(cairn::Arch::Page);
    let mut tx = page.begin().unwrap();
    let one = tx.create_in("nodes", node("one")).unwrap();
    let two = tx.create_in("nodes", node("two")).unwrap();
    tx.create_in("others", node("other")).unwrap();
    tx.commit().unwrap();
    assert_eq!(one.oid().page, two.oid().page, "both on one page");
    for db in [&page, &reader] {
        let mut tx = db.begin().unwrap();
        assert!(tx.get(&one).unwrap().tags.is_empty());
        tx.commit().unwrap();
    }

    // The object client's append goes to the server ahead of a method
    // (which reads only the other group) and is kept there.
    let mut kept = object.begin().unwrap();
    kept.append(&two, "tags", &2u16).unwrap();
    assert_eq!(kept.count::<Node>("others", &[]).unwrap(), 1);
    let waits = || page.server_lock_stats().unwrap().expect("served").waits;
    let (waits_before, stats_before) = (waits(), page.remote_stats().unwrap());
    let mut tx = page.begin().unwrap();
    tx.append(&one, "tags", &1u16).unwrap();
    tx.commit().unwrap();
    assert_eq!(waits(), waits_before, "the page client's commit waited for a lock");
    let stats = page.remote_stats().unwrap();
    assert_eq!(stats.appends_kept, stats_before.appends_kept + 1);
    // Its copy of the page was the image the commit changed: brought up
    // to date from the reply.
    assert_eq!(stats.appends_applied_here, stats_before.appends_applied_here + 1);
    kept.commit().unwrap();

    for db in [&page, &object, &reader] {
        let mut tx = db.begin().unwrap();
        assert_eq!(tx.get(&one).unwrap().tags, vec![1]);
        assert_eq!(tx.get(&two).unwrap().tags, vec![2]);
        tx.commit().unwrap();
    }
    for db in [page, object, reader] {
        db.close().unwrap();
    }
}

/// A page client's commit whose own appends, applied here, change a page
/// whose appends the server keeps: `moved`'s body lives on the page of
/// `neighbour`, so its append (applied here: the transaction changed its
/// home page) changes that page under X, and
/// the neighbour's append, kept by the server, is applied into the
/// client's image instead, which the commit ships. Both appends land
/// (the server refused such a commit before it learnt to let the image
/// replace what it kept).
#[test]
fn a_page_clients_append_to_a_moved_object_folds_the_kept_appends_of_its_bodys_page() {
    let dir = tempfile::tempdir().unwrap();
    let mut site = Site::new(Backend::Page, &dir.path().join("db"));
    let db = site.open(common::opts());
    let mut tx = db.begin().unwrap();
    let moved = tx.create_in("nodes", node("moved")).unwrap();
    let fillers: Vec<Ref<Node>> = (0..7)
        .map(|i| tx.create_in("nodes", node(&format!("{i}{}", "f".repeat(500)))).unwrap())
        .collect();
    tx.commit().unwrap();
    assert!(fillers.iter().all(|f| f.oid().page == moved.oid().page));
    // Too big for what the page has left: on a page of its own.
    let mut tx = db.begin().unwrap();
    let neighbour = tx.create_in("nodes", node(&"n".repeat(450))).unwrap();
    tx.commit().unwrap();
    assert_ne!(neighbour.oid().page, moved.oid().page);
    // Grown past its page's room: its body moves to the neighbour's page,
    // the one near it with room.
    let mut tx = db.begin().unwrap();
    tx.update(&moved, |n| n.tags = (0..300).collect()).unwrap();
    tx.commit().unwrap();
    let mut tx = db.begin().unwrap();
    let home = tx.storage().unwrap().page_image(moved.oid().page).unwrap().unwrap();
    let stub = cairn_storage::record::object::slot_in(&home, moved.oid())
        .unwrap()
        .unwrap();
    assert_eq!(
        stub.kind,
        cairn_storage::record::object::KIND_FORWARD,
        "moved off its page"
    );
    let body = cairn_storage::Oid::from_slice(stub.data).expect("a forwarding stub");
    tx.commit().unwrap();
    assert_eq!(neighbour.oid().page, body.page, "the neighbour shares the body's page");

    // The transaction changes `moved`'s home page itself (a filler), so
    // `moved`'s append is applied here, not offered; the neighbour's is
    // kept by the server.
    let mut tx = db.begin().unwrap();
    tx.update(&fillers[0], |n| n.tags = vec![1]).unwrap();
    tx.append(&moved, "tags", &7u16).unwrap();
    tx.append(&neighbour, "tags", &8u16).unwrap();
    tx.commit().unwrap();
    let mut tx = db.begin().unwrap();
    assert_eq!(tx.get(&moved).unwrap().tags.len(), 301);
    assert_eq!(tx.get(&neighbour).unwrap().tags, vec![8]);
    assert_eq!(tx.get(&fillers[0]).unwrap().tags, vec![1]);
    tx.commit().unwrap();
    db.close().unwrap();
}
