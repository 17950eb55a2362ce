//! The hostile-client suite (issue 34): against a real `cairn serve`, a
//! client with a valid login (role `write`; every sixth session `admin`,
//! which may also send catalog changes) sends well-framed requests of
//! every page-service, object-service and catalog kind with random fields — system
//! pages, pages past the end, other sessions' transaction ids, bogus OIDs
//! and tree roots, wrong page kinds, random redo records, huge counts, and
//! random bodies under every service kind — while an honest client commits
//! known objects beside it. At the end the server still answers, every
//! honest commit is there whole, `cairn check` prints `ok`, and the
//! database reopens. No reply may say CORRUPT or INTERNAL: a request the
//! server refuses is the client's fault, never the database's.
//!
//! `CAIRN_HOSTILE_CASES` sets the number of hostile sessions (default 24),
//! each sending up to 40 requests; `CAIRN_HOSTILE_SEED` the seed.

mod common;

use std::collections::BTreeMap;
use std::process::Command;

use cairn_net::catalog_service::CatalogRequest;
use cairn_net::message::{Architecture, ErrorCode};
use cairn_net::object_service::{Change, ObjectRequest, TreeOp, OID_BYTES};
use cairn_net::page_service::PageRequest;
use cairn_net::rights::{CallbackReply, RightKey, RightsRequest};
use cairn_net::rpc::{Client, ClientOptions, Login};
use cairn_net::{Error as NetError, Kind};
use cairn_server::users::{self, Role};
use cairn_storage::wal::redo;
use cairn_storage::{Db, DbOptions, GroupId, Oid, PageId, TxnId};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRng, TestRunner};

use common::serve;

/// The typed class the catalog holds before the attack.
#[derive(cairn::Persistent, Debug)]
struct Part {
    #[cairn(index)]
    id: u64,
    name: String,
}

/// The fields of one request, drawn from the 64 bits proptest gives it
/// (splitmix64), so a failing case replays and shrinks.
struct Gen {
    state: u64,
}

impl Gen {
    fn new(seed: u64) -> Gen {
        Gen { state: seed }
    }
    fn u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.u64() % n.max(1)
    }
    fn bytes(&mut self, max: usize) -> Vec<u8> {
        let n = self.below(max as u64 + 1) as usize;
        (0..n).map(|_| self.u64() as u8).collect()
    }
    /// A page id: mostly inside the volume (system pages included), some past it, some absurd.
    fn page(&mut self, pages: u32) -> u32 {
        match self.below(10) {
            0 => u32::MAX - self.below(4) as u32,
            1 => pages + self.below(100) as u32,
            2 => self.below(4) as u32,
            _ => self.below(u64::from(pages)) as u32,
        }
    }
    /// A transaction id: its own few, or another session's.
    fn txn(&mut self) -> u64 {
        match self.below(6) {
            0 => 0,
            1 => self.u64(),
            _ => 1 + self.below(4),
        }
    }
    fn oid(&mut self, pages: u32) -> [u8; OID_BYTES] {
        let mut o = [0u8; OID_BYTES];
        o[..4].copy_from_slice(&self.page(pages).to_le_bytes());
        for b in &mut o[4..] {
            *b = self.u64() as u8;
        }
        o
    }
}

/// A page image the hostile session fetched under X: what its commits
/// change a few bytes of, so they reach the server's structural checks of
/// every page kind rather than stopping at the lock check.
struct Held {
    txn: u64,
    page: u32,
    image: Vec<u8>,
}

/// A random well-framed page-service request; `held` are the images the
/// session fetched under X so far.
fn page_request(g: &mut Gen, pages: u32, held: &[Held]) -> PageRequest {
    if !held.is_empty() && g.below(3) == 0 {
        let h = &held[g.below(held.len() as u64) as usize];
        let mut after = h.image.clone();
        for _ in 0..1 + g.below(8) {
            let at = 16 + g.below(after.len() as u64 - 16) as usize;
            after[at] = g.u64() as u8;
        }
        let records = vec![redo::page_record(TxnId(h.txn), PageId(h.page), Some(&h.image), &after)];
        return if g.below(2) == 0 {
            PageRequest::Commit { txn: h.txn, records }
        } else {
            PageRequest::Stage { txn: h.txn, records }
        };
    }
    let txn = g.txn();
    match g.below(15) {
        0 => PageRequest::Fetch {
            txn,
            mode: g.below(8) as u8,
            group: g.below(4) as u32,
            pages: (0..1 + g.below(4)).map(|_| (g.page(pages), g.u64() % 3)).collect(),
        },
        // A well-formed fetch under X, whose image the next commits change.
        1 | 2 => PageRequest::Fetch {
            txn: 1 + g.below(4),
            mode: cairn_net::page_service::FETCH_X,
            group: cairn_net::page_service::NO_GROUP,
            pages: vec![(1 + g.below(u64::from(pages) - 1) as u32, 0)],
        },
        3 => PageRequest::Allocate {
            txn,
            group: g.below(5) as u32,
            near: g.page(pages),
            page_type: g.below(12) as u8,
        },
        4 => PageRequest::Free {
            txn,
            page: g.page(pages),
        },
        5 | 6 => {
            let records = (0..1 + g.below(3))
                .map(|_| {
                    if g.below(3) == 0 {
                        g.bytes(64)
                    } else {
                        let page = PageId(g.page(pages));
                        let mut after = vec![0u8; 4096];
                        for _ in 0..1 + g.below(4) {
                            let at = g.below(4096) as usize;
                            after[at] = g.u64() as u8;
                        }
                        redo::page_record(TxnId(txn), page, None, &after)
                    }
                })
                .collect();
            if g.below(2) == 0 {
                PageRequest::Commit { txn, records }
            } else {
                PageRequest::Stage { txn, records }
            }
        }
        7 => PageRequest::Abort { txn },
        8 => PageRequest::Lock {
            txn,
            resource: g.below(6) as u8,
            id: g.page(pages),
            mode: g.below(7) as u8,
            try_only: g.below(2) == 0,
        },
        9 => PageRequest::GroupPages {
            txn,
            group: g.below(6) as u32,
        },
        10 => PageRequest::Read { page: g.page(pages) },
        11 => PageRequest::Snapshot { txn },
        12 => PageRequest::Fetch {
            txn,
            mode: cairn_net::page_service::FETCH_SNAPSHOT,
            group: cairn_net::page_service::NO_GROUP,
            pages: (0..1 + g.below(4)).map(|_| (g.page(pages), g.u64() % 3)).collect(),
        },
        _ => PageRequest::Written { txn },
    }
}

/// A random key of a right: a page's, an object's or a B+-tree gap's.
fn right_key(g: &mut Gen, pages: u32) -> RightKey {
    match g.below(4) {
        0 => RightKey::Page(g.page(pages)),
        1 => RightKey::Object(g.oid(pages)),
        2 => RightKey::Gap(g.page(pages), g.u64()),
        _ => RightKey::TreeEnd(g.page(pages)),
    }
}

/// A random callback answer or RELEASE, from a session of either kind
/// (a page session's naming an object is refused).
fn rights_request(g: &mut Gen, pages: u32) -> RightsRequest {
    if g.below(2) == 0 {
        RightsRequest::CallbackReply(CallbackReply {
            id: g.below(4),
            key: right_key(g, pages),
            epoch: g.below(4),
            writer: if g.below(2) == 0 { 0 } else { g.txn() },
            in_use_by: (0..g.below(3)).map(|_| g.txn()).collect(),
        })
    } else {
        RightsRequest::Release {
            rights: (0..g.below(4)).map(|_| (right_key(g, pages), g.below(4))).collect(),
        }
    }
}

/// A random well-framed object-service request.
fn object_request(g: &mut Gen, pages: u32) -> ObjectRequest {
    let txn = g.txn();
    match g.below(10) {
        0 => ObjectRequest::Fetch {
            txn,
            mode: g.below(4) as u8,
            oids: (0..1 + g.below(4)).map(|_| g.oid(pages)).collect(),
        },
        1 => ObjectRequest::Create {
            txn,
            group: g.below(5) as u32,
            near: g.oid(pages),
            bytes: g.bytes(300),
        },
        2 | 3 => {
            let changes = (0..1 + g.below(3))
                .map(|_| match g.below(3) {
                    0 => Change::Update {
                        oid: g.oid(pages),
                        bytes: g.bytes(200),
                    },
                    1 => Change::Delete { oid: g.oid(pages) },
                    // Any class, field and type (the server places the
                    // field by its own catalog, and checks the elements).
                    _ => Change::Append {
                        oid: g.oid(pages),
                        class: g.below(4) as u32,
                        field: ["from", "to", "tags", ""][g.below(4) as usize].to_string(),
                        elem: g.bytes(6),
                        count: g.below(3) as u32,
                        elems: g.bytes(40),
                    },
                })
                .collect();
            if g.below(2) == 0 {
                ObjectRequest::Commit { txn, changes }
            } else {
                ObjectRequest::Flush { txn, changes }
            }
        }
        4 => ObjectRequest::Scan {
            txn,
            group: g.below(6) as u32,
        },
        5 => ObjectRequest::TreeOpen {
            txn,
            root: g.page(pages),
        },
        6 => ObjectRequest::TreeApply {
            txn,
            root: g.page(pages),
            ops: (0..1 + g.below(3))
                .map(|_| TreeOp::Insert {
                    key: g.bytes(20),
                    value: g.bytes(20),
                })
                .collect(),
        },
        7 => ObjectRequest::Method {
            txn,
            method: g.bytes(64),
        },
        8 => ObjectRequest::Snapshot { txn },
        9 if g.below(2) == 0 => ObjectRequest::TreeGetForUpdate {
            txn,
            root: g.page(pages),
            keys: (0..1 + g.below(3)).map(|_| g.bytes(8)).collect(),
        },
        _ => ObjectRequest::Abort { txn },
    }
}

/// Sends one request; a reply (of any code but CORRUPT and INTERNAL) or a
/// closed connection is fine. Returns the reply's parts (`Some(vec![])` for
/// a refusal), `None` once the connection is gone.
/// A random CATALOG request: a change of every kind with fields drawn from
/// a few real and wrong names, types, classes, pages and OIDs, or random
/// bytes as the change.
fn catalog_request(g: &mut Gen, pages: u32) -> (Kind, Vec<u8>) {
    use cairn_schema::catalog_change::CatalogChange;
    use cairn_schema::types::{FieldDesc, TypeDesc};
    const NAMES: [&str; 5] = ["Part", "Gear", "", "Part\u{0}", "x"];
    const FIELDS: [&str; 4] = ["id", "name", "", "id"];
    let pick = |g: &mut Gen, of: &[&str]| of[g.below(of.len() as u64) as usize].to_string();
    let ty = |g: &mut Gen| match g.below(4) {
        0 => TypeDesc::U32,
        1 => TypeDesc::String,
        2 => TypeDesc::Seq(Box::new(TypeDesc::U8)),
        _ => TypeDesc::U64,
    };
    let change = match g.below(7) {
        0 => CatalogChange::CreateMeta,
        1 => CatalogChange::Register {
            name: pick(g, &NAMES),
            fields: (0..g.below(4))
                .map(|_| FieldDesc {
                    name: pick(g, &FIELDS),
                    ty: ty(g),
                    has_default: g.below(2) == 0,
                })
                .collect(),
        },
        2 => CatalogChange::AddIndex {
            class: g.below(5) as u32,
            field: pick(g, &FIELDS),
            root: PageId(g.page(pages)),
        },
        3 => CatalogChange::RemoveIndex {
            class: g.below(5) as u32,
            field: pick(g, &FIELDS),
        },
        4 => CatalogChange::SetRoot {
            name: pick(g, &NAMES),
            oid: Some(Oid::from_bytes(&g.oid(pages))),
        },
        5 => CatalogChange::SetRoot {
            name: pick(g, &NAMES),
            oid: None,
        },
        _ => {
            let mut body = g.txn().to_le_bytes().to_vec();
            body.extend(g.bytes(48));
            return (Kind::CATALOG, body);
        }
    };
    CatalogRequest {
        txn: g.txn(),
        change: change.encode(),
    }
    .encode()
}

fn send(c: &Client, kind: Kind, body: Vec<u8>, faults: &mut BTreeMap<u16, u64>) -> Option<Vec<bytes::Bytes>> {
    let call = match c.invoke(kind, body) {
        Ok(call) => call,
        Err(_) => return None,
    };
    match call.collect() {
        Ok(parts) => Some(parts),
        Err(NetError::Remote(f)) => {
            assert!(
                f.code != ErrorCode::CORRUPT && f.code != ErrorCode::INTERNAL,
                "a hostile request of kind {:#06x} was answered {}: {f}",
                kind.0,
                f.code.0
            );
            *faults.entry(f.code.0).or_default() += 1;
            Some(Vec::new())
        }
        Err(_) => None,
    }
}

fn login(user: &str, arch: Architecture) -> ClientOptions {
    ClientOptions {
        architecture: arch,
        login: Some(Login {
            user: user.into(),
            password: format!("{user}-pw"),
        }),
        ..ClientOptions::default()
    }
}

#[test]
fn hostile_requests_of_every_kind_leave_the_honest_data_whole_and_the_database_sound() {
    let cases: u32 = std::env::var("CAIRN_HOSTILE_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(24);
    let seed: u64 = std::env::var("CAIRN_HOSTILE_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x5eed);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let honest_group = {
        let db = Db::create(&path, &DbOptions::default()).unwrap();
        let g = db.create_group("honest").unwrap();
        // Pages of every client kind outside the honest group, for the
        // hostile commits to change: objects, a large object, a B+-tree.
        let mut t = db.begin().unwrap();
        for i in 0..40u32 {
            t.create(GroupId::DEFAULT, &i.to_le_bytes().repeat(25)).unwrap();
        }
        t.create(GroupId::DEFAULT, &vec![9u8; 30_000]).unwrap();
        let tree = cairn_storage::btree::BTree::create(&mut t, GroupId::DEFAULT, false).unwrap();
        for i in 0..400u32 {
            tree.insert(&mut t, format!("key {i:06}").as_bytes(), b"value").unwrap();
        }
        t.commit().unwrap();
        db.close().unwrap();
        g
    };
    {
        // A typed catalog with a class and an index, for the catalog
        // changes to meet.
        let db = cairn::Database::open(&path).unwrap();
        let mut tx = db.begin().unwrap();
        let p = tx
            .create(Part {
                id: 1,
                name: "one".into(),
            })
            .unwrap();
        tx.set_root("first", &p).unwrap();
        tx.commit().unwrap();
        db.close().unwrap();
    }
    users::add(&path, "honest", Role::Write, "honest-pw").unwrap();
    users::add(&path, "eve", Role::Write, "eve-pw").unwrap();
    users::add(&path, "mallory", Role::Admin, "mallory-pw").unwrap();
    let server = serve(&path, &[]);
    let addr = server.addr.clone();

    // The honest client: creates objects of known bytes, one commit each,
    // through the storage engine's own client code (a page client).
    let honest = std::thread::spawn({
        let addr = addr.clone();
        move || {
            let connect = cairn::tools::Connect {
                login: Some(Login {
                    user: "honest".into(),
                    password: "honest-pw".into(),
                }),
                tls: None,
            };
            let store = cairn::tools::RemoteStore::connect(addr, &connect, 256, 1 << 20, 1024).unwrap();
            let group = honest_group;
            let mut committed: Vec<(Oid, Vec<u8>)> = Vec::new();
            for i in 0..60u32 {
                let bytes = format!("honest object {i} ").repeat(1 + (i as usize % 7)).into_bytes();
                let mut t = store.begin().unwrap();
                let made = t.create(group, &bytes).and_then(|oid| t.commit().map(|()| oid));
                if let Ok(oid) = made {
                    committed.push((oid, bytes));
                }
            }
            committed
        }
    });

    let faults = std::cell::RefCell::new(BTreeMap::<u16, u64>::new());
    let sent = std::cell::Cell::new(0u64);
    let session = std::cell::Cell::new(0u32);
    let (images, accepted) = (std::cell::Cell::new(0u64), std::cell::Cell::new(0u64));
    let (catalogs, catalogs_made) = (std::cell::Cell::new(0u64), std::cell::Cell::new(0u64));
    let pages = 64u32;
    let config = Config {
        cases,
        failure_persistence: None,
        rng_algorithm: proptest::test_runner::RngAlgorithm::ChaCha,
        ..Config::default()
    };
    let mut seed_bytes = [0u8; 32];
    seed_bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let mut runner = TestRunner::new_with_rng(
        config,
        TestRng::from_seed(proptest::test_runner::RngAlgorithm::ChaCha, &seed_bytes),
    );
    runner
        .run(&proptest::collection::vec(any::<u64>(), 1..40), |requests| {
            let n = session.get();
            session.set(n + 1);
            let arch = if n % 3 == 2 {
                Architecture::OBJECT
            } else {
                Architecture::PAGE
            };
            let admin = n % 6 == 5;
            let user = if admin { "mallory" } else { "eve" };
            let Ok(c) = Client::connect(&addr, &login(user, arch)) else {
                return Ok(());
            };
            let mut held: Vec<Held> = Vec::new();
            for r in requests {
                let mut g = Gen::new(r);
                let catalog = (admin || g.below(16) == 0) && g.below(2) == 0;
                let req = (arch == Architecture::PAGE && !catalog && g.below(8) != 0)
                    .then(|| page_request(&mut g, pages, &held));
                let (kind, body): (Kind, Vec<u8>) = match (&req, arch == Architecture::OBJECT) {
                    (Some(req), _) => req.encode(),
                    (None, _) if catalog => catalog_request(&mut g, pages),
                    (None, _) if g.below(4) == 0 => rights_request(&mut g, pages).encode(),
                    (None, true) if g.below(8) != 0 => object_request(&mut g, pages).encode(),
                    (None, _) => (Kind(0x0100 + g.below(0x60) as u16), g.bytes(128)),
                };
                sent.set(sent.get() + 1);
                let before = faults.borrow().values().sum::<u64>();
                let Some(parts) = send(&c, kind, body, &mut faults.borrow_mut()) else {
                    break;
                };
                let refused = faults.borrow().values().sum::<u64>() != before;
                if matches!(req, Some(PageRequest::Commit { .. })) && !refused {
                    accepted.set(accepted.get() + 1);
                }
                if kind == Kind::CATALOG {
                    catalogs.set(catalogs.get() + 1);
                    catalogs_made.set(catalogs_made.get() + u64::from(!refused));
                }
                if let Some(PageRequest::Fetch { txn, mode, .. }) = req {
                    if mode & cairn_net::page_service::FETCH_X != 0 {
                        for p in &parts {
                            if let Ok(f) = cairn_net::page_service::Fetched::decode(p) {
                                // Not the honest client's pages: a `write` user
                                // may change any object (there are no per-object
                                // rights), and the check below is of the server's
                                // structure, not of who owns what.
                                if f.image.len() > 16 && f.group != honest_group.0 {
                                    held.push(Held {
                                        txn,
                                        page: f.page,
                                        image: f.image.to_vec(),
                                    });
                                    images.set(images.get() + 1);
                                }
                            }
                        }
                    }
                }
            }
            Ok(())
        })
        .unwrap();
    let (faults, sent) = (faults.into_inner(), sent.get());
    let committed = honest.join().unwrap();
    assert!(
        committed.len() >= 50,
        "the honest client committed {} of 60",
        committed.len()
    );

    // The server still answers, and every honest commit is there whole.
    let check = Client::connect(&addr, &login("honest", Architecture::PAGE)).expect("the server still answers");
    common::call(&check, &PageRequest::Volume).unwrap();
    drop(check);
    server.stop();
    let db = Db::open(&path, &DbOptions::default()).expect("the database reopens");
    let mut t = db.begin().unwrap();
    for (oid, bytes) in &committed {
        assert_eq!(&t.read(*oid).unwrap(), bytes, "honest object {oid}");
    }
    t.abort().unwrap();
    db.close().unwrap();
    // The catalog still loads, and the typed data is there.
    {
        let db = cairn::Database::open(&path).expect("the typed layer opens the database");
        let mut tx = db.begin().unwrap();
        let by_id: cairn::Index<u64, Part> = cairn::Index::on("id");
        assert!(tx.find(&by_id, &1).is_ok());
        tx.commit().unwrap();
        db.close().unwrap();
    }
    let out = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .arg("check")
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok", "{out:?}");
    eprintln!(
        "hostile suite: {cases} sessions, {sent} requests, {} page images changed from, {} hostile commits accepted, {} catalog changes sent ({} made), refusals by code {faults:?}",
        images.get(),
        accepted.get(),
        catalogs.get(),
        catalogs_made.get()
    );
}
