//! `cairn serve` as a real child process, driven by raw page-service calls
//! over loopback TCP: a page fetched under X, changed by the client and
//! committed as redo records is what the next client reads and what the
//! database holds after a clean shutdown; a client's bad record is refused;
//! a vanished client leaves no locks behind; once users exist every
//! connection logs in and its role bounds what it may lock; a wrong
//! architecture, a wrong password and a non-loopback address without users
//! are refused.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use cairn_net::message::{Architecture, ErrorCode};
use cairn_net::page_service::PageRequest;
use cairn_net::rpc::{Client, ClientOptions};
use cairn_net::Error as NetError;
use cairn_storage::wal::redo;
use cairn_storage::{Db, DbOptions, GroupId, Oid, TxnId};

use cairn_server::users::{self, Role};
use common::{begin, call, fetch, remote_code, serve, serve_at};

/// A database with one object of 100 bytes of 7s.
fn setup(dir: &Path) -> Oid {
    let db = Db::create(dir, &DbOptions::default()).unwrap();
    let mut t = db.begin().unwrap();
    let oid = t.create(GroupId::DEFAULT, &[7u8; 100]).unwrap();
    t.commit().unwrap();
    db.close().unwrap();
    oid
}

fn change(image: &[u8], from: u8, to: u8) -> Vec<u8> {
    let mut after = image.to_vec();
    let at = after.windows(100).position(|w| w.iter().all(|&b| b == from)).unwrap();
    after[at..at + 100].fill(to);
    after
}

#[test]
fn a_committed_page_change_is_seen_by_the_next_client_and_survives_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let oid = setup(&path);
    let server = serve(&path, &[]);
    let writer = server.client().unwrap();
    let txn = begin(&writer);
    let base = fetch(&writer, txn, oid.page, true).unwrap();
    let after = change(&base, 7, 9);
    let rec = redo::page_record(TxnId(txn), oid.page, Some(&base), &after);
    call(
        &writer,
        &PageRequest::Commit {
            txn,
            records: vec![rec],
        },
    )
    .unwrap();

    let reader = server.client().unwrap();
    let t2 = begin(&reader);
    let seen = fetch(&reader, t2, oid.page, false).unwrap();
    assert!(
        seen.windows(100).any(|w| w.iter().all(|&b| b == 9)),
        "the reader sees the commit"
    );
    call(&reader, &PageRequest::Abort { txn: t2 }).unwrap();
    drop((writer, reader));
    server.stop();

    let db = Db::open(&path, &DbOptions::default()).unwrap();
    let mut t = db.begin().unwrap();
    assert_eq!(t.read(oid).unwrap(), vec![9u8; 100]);
}

/// A snapshot (SNAPSHOT, then FETCH at the snapshot) reads a page as of
/// its beginning while a writer holds X on it and after the writer
/// commits, without a lock; the window it is sent sees the page's old LSN
/// and not the new one; a cached LSN that is the snapshot's version comes
/// back UNCHANGED. It may send nothing but FETCH at its snapshot and
/// ABORT, and a FETCH at a snapshot must name one.
#[test]
fn a_snapshot_reads_as_of_its_beginning_without_locks_and_is_refused_anything_else() {
    use cairn_net::page_service::{FetchStatus, Fetched, SnapshotInfo, FETCH_S, FETCH_SNAPSHOT, NO_GROUP};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let oid = setup(&path);
    let server = serve(&path, &[]);
    let c = server.client().unwrap();
    let snap = begin(&c);
    let info = SnapshotInfo::decode(&call(&c, &PageRequest::Snapshot { txn: snap }).unwrap()[0]).unwrap();
    let read_at = |lsn: u64| {
        let parts = call(
            &c,
            &PageRequest::Fetch {
                txn: snap,
                mode: FETCH_SNAPSHOT,
                group: NO_GROUP,
                pages: vec![(oid.page.0, lsn)],
            },
        )
        .unwrap();
        let f = Fetched::decode(&parts[0]).unwrap();
        assert_eq!(f.cover, 0, "no right to cache at a snapshot");
        (f.status, f.lsn, f.image.to_vec())
    };
    let (status, old_lsn, old) = read_at(0);
    assert_eq!(status, FetchStatus::Image);
    assert!(info.sees(old_lsn));
    // A writer takes X and changes the page: the snapshot does not wait.
    let writer = server.client().unwrap();
    let w = begin(&writer);
    let base = fetch(&writer, w, oid.page, true).unwrap();
    assert_eq!(read_at(0).2, old);
    let rec = redo::page_record(TxnId(w), oid.page, Some(&base), &change(&base, 7, 9));
    call(
        &writer,
        &PageRequest::Commit {
            txn: w,
            records: vec![rec],
        },
    )
    .unwrap();
    let now = begin(&writer);
    let new = fetch(&writer, now, oid.page, false).unwrap();
    let new_lsn = cairn_storage::page::lsn(&new).0;
    assert!(
        new_lsn > old_lsn && !info.sees(new_lsn),
        "the window does not see the commit after it"
    );
    call(&writer, &PageRequest::Abort { txn: now }).unwrap();
    let (status, lsn, image) = read_at(0);
    assert_eq!(
        (status, lsn),
        (FetchStatus::Image, old_lsn),
        "the version as of the snapshot"
    );
    assert!(image.windows(100).any(|w| w.iter().all(|&b| b == 7)));
    assert_eq!(
        read_at(old_lsn).0,
        FetchStatus::Unchanged,
        "the client's copy is the snapshot's"
    );
    assert_eq!(
        read_at(new_lsn).0,
        FetchStatus::Image,
        "a newer copy is not the snapshot's"
    );
    // Nothing but reads at its snapshot and ABORT.
    for req in [
        PageRequest::Fetch {
            txn: snap,
            mode: FETCH_S,
            group: NO_GROUP,
            pages: vec![(oid.page.0, 0)],
        },
        PageRequest::Lock {
            txn: snap,
            resource: cairn_net::page_service::RESOURCE_PAGE,
            id: oid.page.0,
            mode: cairn_net::page_service::LOCK_MODE_S,
            try_only: false,
        },
        PageRequest::Commit {
            txn: snap,
            records: vec![],
        },
        PageRequest::Snapshot { txn: snap },
    ] {
        let e = call(&c, &req).unwrap_err();
        assert_eq!(remote_code(e), ErrorCode::INVALID, "{req:?}");
    }
    // A FETCH at a snapshot must name an open one.
    let other = begin(&c);
    let e = call(
        &c,
        &PageRequest::Fetch {
            txn: other,
            mode: FETCH_SNAPSHOT,
            group: NO_GROUP,
            pages: vec![(oid.page.0, 0)],
        },
    )
    .unwrap_err();
    assert_eq!(remote_code(e), ErrorCode::INVALID);
    call(&c, &PageRequest::Abort { txn: snap }).unwrap();
    let e = call(
        &c,
        &PageRequest::Fetch {
            txn: snap,
            mode: FETCH_SNAPSHOT,
            group: NO_GROUP,
            pages: vec![(oid.page.0, 0)],
        },
    )
    .unwrap_err();
    assert_eq!(remote_code(e), ErrorCode::INVALID, "an ended snapshot reads nothing");
}

/// An object session's snapshot (OBJ_SNAPSHOT): OBJ_FETCH S reads the
/// object as of the snapshot after another session committed a change to
/// it, with no right to cache; a fetch for update, a create and a commit
/// with changes are refused; OBJ_ABORT ends it.
#[test]
fn an_object_sessions_snapshot_reads_as_of_its_beginning_and_changes_nothing() {
    use cairn_net::object_service::{Change, FetchedObject, ObjectRequest, NO_OID, OBJ_S, OBJ_X};
    use cairn_net::page_service::SnapshotInfo;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let oid = setup(&path);
    let server = serve(&path, &[]);
    let c = Client::connect(
        &server.addr,
        &ClientOptions {
            architecture: Architecture::OBJECT,
            ..ClientOptions::default()
        },
    )
    .unwrap();
    let send = |req: &ObjectRequest| {
        let (kind, body) = req.encode();
        c.invoke(kind, body).and_then(|call| call.collect())
    };
    let snap = begin(&c);
    let window = send(&ObjectRequest::Snapshot { txn: snap }).unwrap();
    SnapshotInfo::decode(&window[0]).unwrap();
    // Another session changes the object and commits.
    let writer = server.client().unwrap();
    let w = begin(&writer);
    let base = fetch(&writer, w, oid.page, true).unwrap();
    let rec = redo::page_record(TxnId(w), oid.page, Some(&base), &change(&base, 7, 9));
    call(
        &writer,
        &PageRequest::Commit {
            txn: w,
            records: vec![rec],
        },
    )
    .unwrap();
    let parts = send(&ObjectRequest::Fetch {
        txn: snap,
        mode: OBJ_S,
        oids: vec![oid.to_bytes()],
    })
    .unwrap();
    let f = FetchedObject::decode(&parts[0]).unwrap();
    assert_eq!(f.bytes, &[7u8; 100][..], "the object as of the snapshot");
    assert_eq!(f.right, 0, "no right to cache a version older than the committed one");
    for req in [
        ObjectRequest::Fetch {
            txn: snap,
            mode: OBJ_X,
            oids: vec![oid.to_bytes()],
        },
        ObjectRequest::Create {
            txn: snap,
            group: 0,
            near: NO_OID,
            bytes: vec![1, 2, 3],
        },
        ObjectRequest::Commit {
            txn: snap,
            changes: vec![Change::Delete { oid: oid.to_bytes() }],
        },
        ObjectRequest::Snapshot { txn: snap },
    ] {
        let e = send(&req).unwrap_err();
        assert_eq!(remote_code(e), ErrorCode::INVALID, "{req:?}");
    }
    send(&ObjectRequest::Abort { txn: snap }).unwrap();
    // A new transaction sees the present.
    let now = begin(&c);
    let parts = send(&ObjectRequest::Fetch {
        txn: now,
        mode: OBJ_S,
        oids: vec![oid.to_bytes()],
    })
    .unwrap();
    assert_eq!(FetchedObject::decode(&parts[0]).unwrap().bytes, &[9u8; 100][..]);
}

/// A client's FREE of one of the volume's own pages (the header, the
/// space map, an extent list) is refused as INVALID before anything is
/// logged: it used to be logged, fail at commit and poison the server —
/// and a FREE of the extent-list page made every later open fail in
/// recovery. The server goes on serving and the database reopens.
#[test]
fn a_free_of_a_system_page_is_refused_and_the_database_still_opens() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let oid = setup(&path);
    let server = serve(&path, &[]);
    let c = server.client().unwrap();
    for page in 0..oid.page.0 {
        let txn = begin(&c);
        let freed = call(&c, &PageRequest::Free { txn, page });
        if let Err(e) = freed {
            assert_eq!(remote_code(e), ErrorCode::INVALID, "page {page}");
        }
        // Its commit then logs nothing the volume cannot apply (a refused
        // FREE doomed the transaction; the first pages are all system ones).
        let _ = call(
            &c,
            &PageRequest::Commit {
                txn,
                records: Vec::new(),
            },
        );
    }
    // The server still serves a change.
    let txn = begin(&c);
    let base = fetch(&c, txn, oid.page, true).unwrap();
    let rec = redo::page_record(TxnId(txn), oid.page, Some(&base), &change(&base, 7, 9));
    call(
        &c,
        &PageRequest::Commit {
            txn,
            records: vec![rec],
        },
    )
    .expect("the server is not poisoned");
    drop(c);
    server.stop();
    let db = Db::open(&path, &DbOptions::default()).expect("the database opens");
    db.close().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(["check", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
}

#[test]
fn a_bad_record_is_refused_and_a_vanished_client_leaves_no_locks() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let oid = setup(&path);
    let server = serve(&path, &[]);
    let c = server.client().unwrap();
    let txn = begin(&c);
    // Changing a page it only holds S on.
    let base = fetch(&c, txn, oid.page, false).unwrap();
    let rec = redo::page_record(TxnId(txn), oid.page, Some(&base), &change(&base, 7, 9));
    let err = call(
        &c,
        &PageRequest::Commit {
            txn,
            records: vec![rec],
        },
    )
    .unwrap_err();
    assert_eq!(remote_code(err), ErrorCode::INVALID);
    // The refused commit ended the transaction: its S lock is gone, so
    // another transaction gets X at once (else: a lock timeout).
    let other = begin(&c);
    fetch(&c, other, oid.page, true).expect("the refused transaction's lock is released");
    call(&c, &PageRequest::Abort { txn: other }).unwrap();

    // A client takes X and disappears without a word.
    let gone = server.client().unwrap();
    let t = begin(&gone);
    fetch(&gone, t, oid.page, true).unwrap();
    drop(gone);
    // Another client gets X on the same page: it may wait until the server
    // has noticed the disconnect, never until the lock timeout.
    let t = begin(&c);
    let started = std::time::Instant::now();
    fetch(&c, t, oid.page, true).expect("the vanished client's lock is released");
    assert!(
        started.elapsed() < Duration::from_secs(9),
        "granted by the release, not a timeout"
    );
    drop(c);
    server.stop();
}

/// The schema's group with one object in it, as a typed client's catalog
/// would be; returns the object.
fn schema_object(dir: &Path) -> Oid {
    let db = Db::open(dir, &DbOptions::default()).unwrap();
    let g = db.create_group("cairn.system").unwrap();
    let mut t = db.begin().unwrap();
    let oid = t.create(g, b"the catalog").unwrap();
    t.commit().unwrap();
    db.close().unwrap();
    oid
}

#[test]
fn logins_are_required_once_users_exist_and_each_role_changes_only_what_it_may() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let data = setup(&path);
    let schema = schema_object(&path);
    for (name, role) in [("ada", Role::Admin), ("wes", Role::Write), ("rita", Role::Read)] {
        users::add(&path, name, role, &format!("{name}-pw")).unwrap();
    }
    let server = serve(&path, &[]);
    let refused = |r: Result<Client, NetError>| match r {
        Err(NetError::Refused(f)) => f,
        Ok(_) => panic!("expected a refusal"),
        Err(e) => panic!("expected a refusal, got {e}"),
    };
    let f = refused(server.client());
    assert_eq!(f.code, ErrorCode::AUTH_FAILED);
    assert!(f.message.contains("requires a login"), "{f}");
    assert_eq!(
        refused(server.client_as(Some(("ada", "wrong")))).code,
        ErrorCode::AUTH_FAILED
    );
    assert_eq!(
        refused(server.client_as(Some(("nobody", "x")))).code,
        ErrorCode::AUTH_FAILED
    );
    let rpc_only = Client::connect(
        &server.addr,
        &ClientOptions {
            architecture: Architecture::RPC,
            login: Some(cairn_net::rpc::Login {
                user: "ada".into(),
                password: "ada-pw".into(),
            }),
            ..ClientOptions::default()
        },
    );
    assert_eq!(refused(rpc_only).code, ErrorCode::UNSUPPORTED_ARCHITECTURE);
    // Each role: may it lock the data page X, and the schema's page? No
    // role may: the schema changes only by CATALOG requests, which the
    // server makes itself (and only for an admin).
    for (user, data_ok, schema_ok) in [("ada", true, false), ("wes", true, false), ("rita", false, false)] {
        let c = server.client_as(Some((user, &format!("{user}-pw")))).unwrap();
        let t = begin(&c);
        assert!(fetch(&c, t, data.page, false).is_ok(), "{user} reads");
        call(&c, &PageRequest::Abort { txn: t }).unwrap();
        for (page, ok) in [(data.page, data_ok), (schema.page, schema_ok)] {
            let t = begin(&c);
            match fetch(&c, t, page, true) {
                Ok(_) => assert!(ok, "{user} may not lock page {page} X"),
                Err(e) => {
                    assert!(!ok, "{user} may lock page {page} X: {e}");
                    assert_eq!(remote_code(e), ErrorCode::DENIED);
                }
            }
            call(&c, &PageRequest::Abort { txn: t }).unwrap();
        }
    }
    server.stop();
}

/// A CA and a server certificate for 127.0.0.1 and localhost, written to
/// `dir`: (ca, cert chain, key).
fn test_pki(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(DnType::CommonName, "cairn test CA");
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().unwrap();
    let params = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
    let cert = params.signed_by(&key, &issuer).unwrap();
    let (ca, chain, k) = (dir.join("ca.pem"), dir.join("server.pem"), dir.join("server.key"));
    std::fs::write(&ca, ca_cert.pem()).unwrap();
    std::fs::write(&chain, format!("{}{}", cert.pem(), ca_cert.pem())).unwrap();
    std::fs::write(&k, key.serialize_pem()).unwrap();
    (ca, chain, k)
}

#[test]
fn an_open_address_needs_users_and_tls_and_the_token_file_is_gone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    setup(&path);
    let serve = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_cairn"))
            .arg("serve")
            .arg(&path)
            .args(extra)
            .output()
            .unwrap()
    };
    let out = serve(&["--listen", "0.0.0.0:0"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("has no users"), "{err}");
    let token = dir.path().join("token");
    std::fs::write(&token, "s3cret\n").unwrap();
    let out = serve(&["--token-file", token.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cairn user add"));
    users::add(&path, "ada", Role::Admin, "ada-pw").unwrap();
    // Users but no TLS: refused, unless asked for explicitly.
    let out = serve(&["--listen", "0.0.0.0:0"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("without TLS") && err.contains("--tls-cert"), "{err}");
    let server = serve_at(&path, "0.0.0.0:0", &["--no-tls"]);
    assert!(matches!(server.client(), Err(NetError::Refused(f)) if f.code == ErrorCode::AUTH_FAILED));
    server.client_as(Some(("ada", "ada-pw"))).unwrap();
    server.stop();
    // With TLS: a typed client over cairns:// trusting the CA, logged in.
    let (ca, cert, key) = test_pki(dir.path());
    let server = serve_at(
        &path,
        "0.0.0.0:0",
        &["--tls-cert", cert.to_str().unwrap(), "--tls-key", key.to_str().unwrap()],
    );
    let cairn_net::transport::Address::Tcp(sock) = &server.addr else {
        panic!("a TCP listener")
    };
    let url = format!("cairns://ada:ada-pw@127.0.0.1:{}", sock.port());
    let mut o = cairn::Options::default();
    o.storage.background = false;
    o.arch = cairn::Arch::Page;
    o.tls_ca = Some(ca.clone());
    let db = cairn::Database::connect(&url, o.clone()).expect("a TLS client with the CA connects");
    drop(db);
    // A plain client at the TLS listener is told, and one trusting no such CA is refused.
    assert!(cairn::Database::connect(&url.replace("cairns://", "cairn://"), o.clone()).is_err());
    let other = dir.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    let (other_ca, _, _) = test_pki(&other);
    o.tls_ca = Some(other_ca);
    let Err(e) = cairn::Database::connect(&url, o) else {
        panic!("another CA is refused")
    };
    assert!(e.to_string().contains("certificate"), "{e}");
    server.stop();
}

/// A client that asks for the right to cache a page (FETCH_CACHE) must
/// answer callbacks. One that never does (stopped, hung, hostile) used to
/// hold every writer of its pages up to the lock timeout, and again on every
/// retry, for as long as its connection stayed open; now the first writer
/// waits one lock timeout, the silent session is ended (GOODBYE
/// SESSION_ENDED, its rights dropped) and the writer gets X; the next writer
/// has nobody to call back.
#[test]
fn a_client_that_never_answers_a_callback_is_ended_and_the_writer_goes_on() {
    use cairn_net::page_service::{FetchStatus, Fetched, FETCH_CACHE, FETCH_S, NO_GROUP};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let oid = setup(&path);
    let config = dir.path().join("serve.conf");
    std::fs::write(&config, "lock_timeout_ms = 500\n").unwrap();
    let server = serve(&path, &["--config", config.to_str().unwrap()]);

    // The silent client reads the page, asks for the right to cache it and
    // ends its transaction; it has no callback thread.
    let silent = server.client().unwrap();
    let t = begin(&silent);
    let parts = call(
        &silent,
        &PageRequest::Fetch {
            txn: t,
            mode: FETCH_S | FETCH_CACHE,
            group: NO_GROUP,
            pages: vec![(oid.page.0, 0)],
        },
    )
    .unwrap();
    let part = Fetched::decode(&parts[0]).unwrap();
    assert_eq!(part.status, FetchStatus::Image);
    assert_ne!(part.cover, 0, "the right to cache was granted");
    call(&silent, &PageRequest::Abort { txn: t }).unwrap();

    // A writer is held up by the unanswered callback, then goes on.
    let writer = server.client().unwrap();
    let w = begin(&writer);
    fetch(&writer, w, oid.page, true).expect("X once the silent session is ended");
    call(&writer, &PageRequest::Abort { txn: w }).unwrap();
    // The silent session was told why, and is gone.
    match call(&silent, &PageRequest::Volume) {
        Err(NetError::Closed(f)) => assert_eq!(f.code, ErrorCode::SESSION_ENDED, "{f}"),
        other => panic!("expected the session to be ended, got {other:?}"),
    }
    // Later writers have nobody to call back.
    for _ in 0..3 {
        let w = begin(&writer);
        fetch(&writer, w, oid.page, true).unwrap();
        call(&writer, &PageRequest::Abort { txn: w }).unwrap();
    }
    // The silent client's address is barred from rights for a while: it
    // reconnects and reads the page again, but gets no right to cache it,
    // so it cannot hold up the next writer as well.
    let again = server.client().unwrap();
    let t = begin(&again);
    let parts = call(
        &again,
        &PageRequest::Fetch {
            txn: t,
            mode: FETCH_S | FETCH_CACHE,
            group: NO_GROUP,
            pages: vec![(oid.page.0, 0)],
        },
    )
    .unwrap();
    let part = Fetched::decode(&parts[0]).unwrap();
    assert_eq!(part.status, FetchStatus::Image);
    assert_eq!(part.cover, 0, "no right for a barred address");
    call(&again, &PageRequest::Abort { txn: t }).unwrap();
    let w = begin(&writer);
    fetch(&writer, w, oid.page, true).expect("nobody to call back");
    call(&writer, &PageRequest::Abort { txn: w }).unwrap();
    call(&again, &PageRequest::Volume).expect("the barred session was not called back, so not ended");
    drop(writer);
    server.stop();
}

/// READ (the page client's refill of its pool) is served only for a page
/// the session holds a lock on, or a right to cache: it used to return any
/// page to anyone, under no lock.
#[test]
fn a_read_is_served_only_under_a_lock_or_a_right() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let oid = setup(&path);
    let server = serve(&path, &[]);
    let c = server.client().unwrap();
    let read = |c: &Client| call(c, &PageRequest::Read { page: oid.page.0 });
    let e = read(&c).expect_err("no lock, no right");
    assert_eq!(remote_code(e), ErrorCode::INVALID);
    let t = begin(&c);
    fetch(&c, t, oid.page, false).unwrap();
    let image = read(&c).expect("under the transaction's S lock").pop().unwrap();
    assert_eq!(image.len(), 4096);
    call(&c, &PageRequest::Abort { txn: t }).unwrap();
    let e = read(&c).expect_err("the lock went with the transaction");
    assert_eq!(remote_code(e), ErrorCode::INVALID);
    // Another session's lock is not this one's.
    let other = server.client().unwrap();
    let t = begin(&other);
    fetch(&other, t, oid.page, false).unwrap();
    assert_eq!(remote_code(read(&c).unwrap_err()), ErrorCode::INVALID);
    server.stop();
}

/// Callback locking's messages are one set for every session kind, keyed
/// by what a right covers: a page session may name pages only. Its
/// CALLBACK_REPLY or RELEASE naming an object is refused (INVALID), one
/// naming a page is taken, and a malformed one is a PROTOCOL error.
#[test]
fn a_page_session_names_only_pages_in_its_rights_messages() {
    use cairn_net::rights::{CallbackReply, RightKey, RightsRequest};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let oid = setup(&path);
    let server = serve(&path, &[]);
    let c = server.client().unwrap();
    let send = |req: RightsRequest| {
        let (kind, body) = req.encode();
        c.invoke(kind, body).unwrap().collect()
    };
    let answer = |key| {
        RightsRequest::CallbackReply(CallbackReply {
            id: 0,
            key,
            epoch: 0,
            writer: 0,
            in_use_by: vec![],
        })
    };
    let release = |key| RightsRequest::Release { rights: vec![(key, 1)] };
    let object = RightKey::Object(oid.to_bytes());
    let page = RightKey::Page(oid.page.0);
    for req in [answer(object), release(object)] {
        let e = send(req.clone()).expect_err("an object key from a page session");
        assert_eq!(remote_code(e), ErrorCode::INVALID, "{req:?}");
    }
    for req in [answer(page), release(page)] {
        let parts = send(req.clone()).expect("a page key");
        assert!(parts.iter().all(|p| p.is_empty()), "{req:?}: {parts:?}");
    }
    let (kind, mut body) = release(page).encode();
    body.push(0);
    let e = c.invoke(kind, body).unwrap().collect().expect_err("a byte too many");
    assert_eq!(remote_code(e), ErrorCode::PROTOCOL);
    // The session still serves.
    let t = begin(&c);
    fetch(&c, t, oid.page, false).unwrap();
    call(&c, &PageRequest::Abort { txn: t }).unwrap();
    server.stop();
}

/// A READ checks the session's locks without holding its transactions:
/// it used to keep a clone of every open transaction of the session while
/// it looked, so a COMMIT of one of them, running meanwhile on another
/// thread, was refused with "transaction N has a request still running"
/// (seen once in CI, as a page client's torture run stopping early; here
/// 6 runs in 6 before the fix). 3,000 READs and 3,000 transactions'
/// FETCH + COMMIT pairs are pipelined together on one session, 40 of each
/// at a time: every COMMIT succeeds.
#[test]
fn reads_do_not_hold_up_the_commits_of_their_session() {
    const ROUNDS: usize = 3000;
    const WINDOW: usize = 40;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let oid = setup(&path);
    let server = serve(&path, &[]);
    let c = server.client().unwrap();
    // A transaction whose S lock lets the session READ the page.
    let holder = begin(&c);
    fetch(&c, holder, oid.page, false).unwrap();
    let invoke = |req: PageRequest| {
        let (kind, body) = req.encode();
        c.invoke(kind, body).unwrap()
    };
    let refused = |calls| error_codes(calls).into_iter().flatten().collect::<Vec<_>>();
    // In windows of 40 rounds: a session's requests that run on blocking
    // threads are bounded (`waiting_per_session_max`), and past it the
    // server refuses with LIMIT, which is not what this test is about.
    for _ in 0..ROUNDS / WINDOW {
        let mut reads = Vec::new();
        let mut commits = Vec::new();
        for _ in 0..WINDOW {
            let t = begin(&c);
            reads.push(invoke(PageRequest::Read { page: oid.page.0 }));
            let fetched = invoke(PageRequest::Fetch {
                txn: t,
                mode: cairn_net::page_service::FETCH_S,
                group: cairn_net::page_service::NO_GROUP,
                pages: vec![(oid.page.0, 0)],
            });
            reads.push(fetched);
            commits.push(invoke(PageRequest::Commit {
                txn: t,
                records: Vec::new(),
            }));
        }
        assert_eq!(refused(reads), vec![], "every READ and FETCH served");
        assert_eq!(refused(commits), vec![], "every COMMIT committed");
    }
    call(&c, &PageRequest::Abort { txn: holder }).unwrap();
    server.stop();
}

/// `n` FETCHes of `page` in `mode`, each in a transaction of its own, all
/// sent before any reply is read.
fn pipelined_fetches(c: &Client, n: usize, page: cairn_storage::PageId, mode: u8) -> Vec<cairn_net::rpc::Call> {
    (0..n)
        .map(|_| {
            let (kind, body) = PageRequest::Fetch {
                txn: begin(c),
                mode,
                group: cairn_net::page_service::NO_GROUP,
                pages: vec![(page.0, 0)],
            }
            .encode();
            c.invoke(kind, body).unwrap()
        })
        .collect()
}

/// Each call's error code, `None` for a call answered without one.
fn error_codes(calls: Vec<cairn_net::rpc::Call>) -> Vec<Option<ErrorCode>> {
    calls
        .into_iter()
        .map(|c| match c.collect() {
            Ok(_) => None,
            Err(NetError::Remote(f)) => Some(f.code),
            Err(e) => panic!("{e}"),
        })
        .collect()
}

/// The threads of process `pid` now.
fn threads_of(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, |d| d.count())
}

/// Lock waits park in the lock manager's queue and hold no thread: 600
/// FETCH waits pipelined by one session, far past the bound on a session's
/// requests running on threads (`waiting_per_session_max`, 4 here), all
/// wait, none is refused; the server gains no thread while they stand; a
/// bystander commits meanwhile; and each is granted once the holder lets
/// go. (Every lock wait used to hold a thread: 768 waits from one client
/// grew the server to 516 threads and 754 MB; then the bound refused all
/// but a session's first 128.)
#[test]
fn lock_waits_park_without_threads_and_a_bystander_commits() {
    const WAITS: usize = 600;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let oid = setup(&path);
    let other = {
        let db = Db::open(&path, &DbOptions::default()).unwrap();
        let g = db.create_group("elsewhere").unwrap();
        let mut t = db.begin().unwrap();
        let o = t.create(g, &[5u8; 100]).unwrap();
        t.commit().unwrap();
        db.close().unwrap();
        o
    };
    assert_ne!(other.page, oid.page);
    let config = dir.path().join("serve.conf");
    std::fs::write(&config, "lock_timeout_ms = 600000\nwaiting_per_session_max = 4\n").unwrap();
    let server = serve(&path, &["--config", config.to_str().unwrap()]);
    let pid = server.pid();
    let holder = server.client().unwrap();
    let h = begin(&holder);
    fetch(&holder, h, oid.page, true).unwrap();
    // The bystander's page is read once, so its commit below needs no read.
    let bystander = server.client().unwrap();
    let b = begin(&bystander);
    let image = fetch(&bystander, b, other.page, true).unwrap();
    let idle = threads_of(pid);
    assert!(idle > 0, "the server's threads are readable");

    // The threads the server has at most while the waits stand.
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let done = done.clone();
        std::thread::spawn(move || {
            let mut most = 0;
            while !done.load(std::sync::atomic::Ordering::Acquire) {
                most = most.max(threads_of(pid));
                std::thread::yield_now();
            }
            most.max(threads_of(pid))
        })
    };
    let attacker = server.client().unwrap();
    let calls = pipelined_fetches(&attacker, WAITS, oid.page, cairn_net::page_service::FETCH_S);
    let outcomes = std::thread::spawn(move || {
        let codes = error_codes(calls);
        (attacker, codes)
    });

    // The bystander changes its page and commits while the waits stand
    // (none can be granted before the holder lets go).
    let after = change(&image, 5, 6);
    let rec = redo::page_record(TxnId(b), other.page, Some(&image), &after);
    call(
        &bystander,
        &PageRequest::Commit {
            txn: b,
            records: vec![rec],
        },
    )
    .expect("the bystander commits");

    // The holder lets go; every wait gets its lock.
    call(&holder, &PageRequest::Abort { txn: h }).unwrap();
    let (_attacker, codes) = outcomes.join().unwrap();
    done.store(true, std::sync::atomic::Ordering::Release);
    let most = sampler.join().unwrap();
    let granted = codes.iter().filter(|c| c.is_none()).count();
    assert_eq!(granted, WAITS, "{:?}", codes.iter().flatten().collect::<Vec<_>>());
    // A blocking thread lingers seconds after its last task, so one a wait
    // took would still be counted at the end. The commit may take one or
    // two; a thread per wait would be hundreds.
    assert!(
        most <= idle + 8,
        "{most} threads at most, {idle} idle, for {WAITS} waits"
    );
    server.stop();
}

/// A request that holds a thread while it waits (here a FETCH X waiting
/// for a client that does not answer its callback) counts against the
/// session's bound (`waiting_per_session_max`): past it, the next such
/// request is refused with LIMIT at once instead of taking a thread.
#[test]
fn requests_waiting_on_threads_are_bounded_per_session() {
    use cairn_net::page_service::{FETCH_CACHE, FETCH_S, FETCH_X, NO_GROUP};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let oid = setup(&path);
    let config = dir.path().join("serve.conf");
    std::fs::write(&config, "lock_timeout_ms = 3000\nwaiting_per_session_max = 1\n").unwrap();
    let server = serve(&path, &["--config", config.to_str().unwrap()]);
    // A client caches the page and will never answer a callback.
    let silent = server.client().unwrap();
    let t = begin(&silent);
    let fetched = PageRequest::Fetch {
        txn: t,
        mode: FETCH_S | FETCH_CACHE,
        group: NO_GROUP,
        pages: vec![(oid.page.0, 0)],
    };
    call(&silent, &fetched).unwrap();
    call(&silent, &PageRequest::Abort { txn: t }).unwrap();
    // Two writers' FETCH X from one session, pipelined: each must call the
    // page back, which holds a thread; the bound lets one.
    let writer = server.client().unwrap();
    let codes = error_codes(pipelined_fetches(&writer, 2, oid.page, FETCH_X));
    assert!(codes.contains(&Some(ErrorCode::LIMIT)), "{codes:?}");
    server.stop();
}

/// Transactions open at once on the server are bounded (`txns_max`): one
/// more is refused with LIMIT naming the bound, and a transaction that ends
/// gives its place back.
#[test]
fn open_transactions_are_bounded_server_wide() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let oid = setup(&path);
    let config = dir.path().join("serve.conf");
    std::fs::write(&config, "txns_max = 5\n").unwrap();
    let server = serve(&path, &["--config", config.to_str().unwrap()]);
    let (a, b) = (server.client().unwrap(), server.client().unwrap());
    let mut open = Vec::new();
    for i in 0..5 {
        let c = if i % 2 == 0 { &a } else { &b };
        let t = begin(c);
        fetch(c, t, oid.page, false).unwrap();
        open.push((c, t));
    }
    let t = begin(&b);
    let e = fetch(&b, t, oid.page, false).unwrap_err();
    let NetError::Remote(f) = e else {
        panic!("expected an error reply, got {e}")
    };
    assert_eq!(f.code, ErrorCode::LIMIT);
    assert!(f.message.contains("txns_max"), "{f}");
    let (c, t0) = open.pop().unwrap();
    call(c, &PageRequest::Abort { txn: t0 }).unwrap();
    fetch(&b, t, oid.page, false).expect("a place was given back");
    server.stop();
}
