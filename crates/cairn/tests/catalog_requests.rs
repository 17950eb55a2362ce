//! The schema catalog changes only by CATALOG requests the server checks
//! and makes itself, for every client kind, against a real server child:
//!
//! - typed clients of every kind register classes, add indexes and name
//!   roots through them, and see their own change at once in the same
//!   transaction (the server's images of the pages it changed);
//! - no client, an admin's included, may lock a catalog page X or change a
//!   catalog tree through the object service;
//! - each change that is wrong in meaning is refused with INVALID naming
//!   what is wrong, and changes nothing;
//! - a page client may not ship a record of a page the server changed for
//!   it;
//! - another transaction of the same client reading the catalog under the
//!   client's rights keeps what it read until it ends: the change waits
//!   for it.

mod common;

use cairn::{Arch, Database, Index, Options, Persistent, Ref};
use cairn_net::catalog_service::{CatalogReply, CatalogRequest};
use cairn_net::message::{Architecture, ErrorCode};
use cairn_net::object_service::{ObjectRequest, TreeOp};
use cairn_net::page_service::{PageRequest, FETCH_X, NO_GROUP};
use cairn_net::rpc::{Client, ClientOptions};
use cairn_net::Error as NetError;
use cairn_schema::catalog_change::{CatalogChange, Outcome};
use cairn_schema::types::{FieldDesc, TypeDesc};
use cairn_storage::wal::redo;
use cairn_storage::{Db, DbOptions, Oid, PageId, TxnId};

mod schema {
    #[derive(cairn::Persistent, Debug, PartialEq)]
    pub struct Part {
        #[cairn(index)]
        pub id: u64,
        pub name: String,
    }

    #[derive(cairn::Persistent, Debug, PartialEq)]
    pub struct Gear {
        #[cairn(index)]
        pub teeth: u32,
    }
}
use schema::{Gear, Part};

fn options(arch: Arch) -> Options {
    let mut o = Options::default();
    o.storage.background = false;
    o.arch = arch;
    o
}

/// A database with one `Part` named "first"; its catalog's pages: (the meta
/// object's page, the roots tree's root, the id index's root).
fn setup(path: &std::path::Path) -> (PageId, PageId, PageId) {
    {
        let db = Database::open(path).unwrap();
        let mut tx = db.begin().unwrap();
        let p = tx.create(Part {
            id: 1,
            name: "first".into(),
        });
        tx.set_root("first", &p.unwrap()).unwrap();
        tx.commit().unwrap();
        db.close().unwrap();
    }
    let db = Db::open(path, &DbOptions::default()).unwrap();
    let system = db.group("cairn.system").unwrap();
    let mut t = db.begin().unwrap();
    let meta = t.scan_all(system).unwrap()[0];
    let bytes = t.read(meta).unwrap();
    let page = |i: usize| PageId(u32::from_le_bytes(bytes[i..i + 4].try_into().unwrap()));
    let (roots, indexes) = (page(8), page(16));
    let mut index_root = None;
    let tree = cairn_storage::btree::BTree::open(&mut t, indexes).unwrap();
    t.tree_scan(&tree, std::ops::Bound::Unbounded, std::ops::Bound::Unbounded, |_, v| {
        index_root = Some(PageId(u32::from_le_bytes(v.try_into().unwrap())));
        false
    })
    .unwrap();
    drop(t);
    db.close().unwrap();
    (meta.page, roots, index_root.unwrap())
}

fn raw(server: &common::ServerChild, architecture: Architecture) -> Client {
    Client::connect(
        &server.addr,
        &ClientOptions {
            architecture,
            ..ClientOptions::default()
        },
    )
    .unwrap()
}

fn catalog(c: &Client, txn: u64, change: &CatalogChange) -> Result<CatalogReply, NetError> {
    let (kind, body) = CatalogRequest {
        txn,
        change: change.encode(),
    }
    .encode();
    let parts = c.invoke(kind, body)?.collect()?;
    Ok(CatalogReply::decode(&parts[0]).unwrap())
}

fn refused(r: Result<impl std::fmt::Debug, NetError>, code: ErrorCode, says: &str) {
    match r {
        Err(NetError::Remote(f)) => {
            assert_eq!(f.code, code, "{f}");
            assert!(f.message.contains(says), "{f} (expected it to say {says:?})");
        }
        other => panic!("expected {code:?} saying {says:?}, got {other:?}"),
    }
}

fn call(c: &Client, req: &PageRequest) -> Result<Vec<bytes::Bytes>, NetError> {
    let (kind, body) = req.encode();
    c.invoke(kind, body)?.collect()
}

#[test]
fn every_client_kind_changes_the_catalog_by_requests_and_reads_its_own_change() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    setup(&path);
    let server = common::serve(&path);
    let url = format!("cairn://{}", server.addr);
    for (i, arch) in [Arch::Page, Arch::File, Arch::Object, Arch::Adaptive]
        .into_iter()
        .enumerate()
    {
        let db = Database::connect(&url, options(arch)).unwrap();
        let name = format!("gear-{i}");
        let mut tx = db.begin().unwrap();
        // A new class with an index (registered in a transaction of its
        // own), an object of it, and a name for it.
        let g = tx.create(Gear { teeth: 10 + i as u32 }).unwrap();
        tx.set_root(&name, &g).unwrap();
        assert_eq!(
            tx.root::<Gear>(&name).unwrap().oid(),
            g.oid(),
            "{arch:?} reads its own change"
        );
        tx.remove_root("first").unwrap_or(());
        assert!(
            tx.root::<Part>("first").is_err(),
            "{arch:?}: the removal is seen at once"
        );
        drop(tx);
        let mut tx = db.begin().unwrap();
        assert!(
            tx.root::<Gear>(&name).is_err(),
            "{arch:?}: an abort takes the change back"
        );
        let first = tx.root::<Part>("first").unwrap();
        assert_eq!(tx.get(&first).unwrap().id, 1);
        let g = tx.create(Gear { teeth: 10 + i as u32 }).unwrap();
        tx.set_root(&name, &g).unwrap();
        tx.commit().unwrap();
        // Another client sees the class, its index and the root.
        let other = Database::connect(&url, options(Arch::Page)).unwrap();
        let mut tx = other.begin().unwrap();
        let by_teeth: Index<u32, Gear> = Index::on("teeth");
        assert_eq!(tx.find(&by_teeth, &(10 + i as u32)).unwrap().len(), 1, "{arch:?}");
        let r: Ref<Gear> = tx.root(&name).unwrap();
        assert_eq!(r.oid(), g.oid());
        tx.commit().unwrap();
    }
    server.stop();
    let db = Database::open(&path).unwrap();
    let mut tx = db.begin().unwrap();
    let by_teeth: Index<u32, Gear> = Index::on("teeth");
    let all = tx
        .find_range(&by_teeth, std::ops::Bound::Unbounded, std::ops::Bound::Unbounded)
        .unwrap();
    assert_eq!(all.len(), 4);
    tx.commit().unwrap();
}

#[test]
fn no_client_writes_the_catalog_and_each_wrong_change_is_refused_with_nothing_changed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let (meta_page, roots_root, id_index) = setup(&path);
    let server = common::serve(&path);
    let c = raw(&server, Architecture::PAGE);

    // No lock that would change a catalog page, an admin's (a trusted
    // local session) included.
    for page in [meta_page, roots_root, id_index] {
        let t = 100 + u64::from(page.0);
        let r = call(
            &c,
            &PageRequest::Fetch {
                txn: t,
                mode: FETCH_X,
                group: NO_GROUP,
                pages: vec![(page.0, 0)],
            },
        );
        if page == id_index {
            // The index's own tree is in cairn.index: objects' entries.
            r.unwrap();
        } else {
            refused(r, ErrorCode::DENIED, "only by CATALOG requests");
        }
        call(&c, &PageRequest::Abort { txn: t }).unwrap();
    }
    let o = raw(&server, Architecture::OBJECT);
    let (kind, body) = ObjectRequest::TreeApply {
        txn: 1,
        root: roots_root.0,
        ops: vec![TreeOp::Insert {
            key: b"sneaky".to_vec(),
            value: vec![0; 10],
        }],
    }
    .encode();
    refused(
        o.invoke(kind, body).and_then(|p| p.collect()),
        ErrorCode::DENIED,
        "only by CATALOG requests",
    );
    // The refusal doomed the transaction; ending it lets its S lock go.
    let (kind, body) = ObjectRequest::Abort { txn: 1 }.encode();
    o.invoke(kind, body).and_then(|p| p.collect()).unwrap();

    // The class as registered: asking again changes nothing and says which.
    let fields = Part::fields();
    let txn = 7;
    let registered = catalog(
        &c,
        txn,
        &CatalogChange::Register {
            name: "Part".into(),
            fields: fields.clone(),
        },
    )
    .unwrap();
    assert!(registered.pages.is_empty(), "a class already registered writes nothing");
    let class = match Outcome::decode(&mut NoStore, &registered.outcome).unwrap() {
        Outcome::Registered { info, new } => {
            assert!(!new && info.latest);
            info.id
        }
        other => panic!("{other:?}"),
    };
    let field = |name: &str, ty: TypeDesc| FieldDesc {
        name: name.into(),
        ty,
        has_default: false,
    };
    let bogus = Oid::from_bytes(&[1, 0, 0, 0, 99, 0, 1, 0, 0, 0]);
    let wrong = [
        (
            CatalogChange::Register {
                name: "Part".into(),
                fields: vec![field("id", TypeDesc::String), field("name", TypeDesc::String)],
            },
            "type changed",
        ),
        (
            CatalogChange::Register {
                name: "Twice".into(),
                fields: vec![field("a", TypeDesc::U32), field("a", TypeDesc::U32)],
            },
            "appears twice",
        ),
        (
            CatalogChange::Register {
                name: String::new(),
                fields: vec![],
            },
            "class name is empty",
        ),
        (
            CatalogChange::AddIndex {
                class: 9999,
                field: "id".into(),
                root: id_index,
            },
            "no such class",
        ),
        (
            CatalogChange::AddIndex {
                class,
                field: "colour".into(),
                root: id_index,
            },
            "no such field",
        ),
        (
            CatalogChange::AddIndex {
                class,
                field: "name".into(),
                root: roots_root,
            },
            "not in group cairn.index",
        ),
        (
            CatalogChange::AddIndex {
                class,
                field: "name".into(),
                root: id_index,
            },
            "another index entry names that tree",
        ),
        (
            CatalogChange::RemoveIndex {
                class,
                field: "name".into(),
            },
            "no such index",
        ),
        (
            CatalogChange::SetRoot {
                name: String::new(),
                oid: None,
            },
            "may not be empty",
        ),
        (
            CatalogChange::SetRoot {
                name: "dangling".into(),
                oid: Some(bogus),
            },
            "cannot be read",
        ),
    ];
    for (change, says) in &wrong {
        refused(catalog(&c, txn, change), ErrorCode::INVALID, says);
    }
    let (kind, body) = CatalogRequest {
        txn,
        change: vec![9, 9],
    }
    .encode();
    refused(
        c.invoke(kind, body).and_then(|p| p.collect()),
        ErrorCode::INVALID,
        "does not decode",
    );
    // Every refusal left the transaction as it was: it commits nothing.
    call(&c, &PageRequest::Commit { txn, records: vec![] }).unwrap();

    // A change the server made for a page client is the server's: a record
    // of one of its pages is refused, and nothing of the commit is logged.
    let txn = 8;
    let first = {
        let db = Database::connect(&format!("cairn://{}", server.addr), options(Arch::Page)).unwrap();
        let mut tx = db.begin().unwrap();
        let r = tx.root::<Part>("first").unwrap().oid();
        tx.commit().unwrap();
        r
    };
    let made = catalog(
        &c,
        txn,
        &CatalogChange::SetRoot {
            name: "second".into(),
            oid: Some(first),
        },
    )
    .unwrap();
    assert!(
        !made.images.is_empty(),
        "a page session gets the images of what changed"
    );
    let (page, image) = &made.images[0];
    let mut after = image.clone();
    let last = after.len() - 1;
    after[last] ^= 0xFF;
    let record = redo::page_record(TxnId(txn), PageId(*page), Some(image), &after);
    refused(
        call(
            &c,
            &PageRequest::Commit {
                txn,
                records: vec![record],
            },
        ),
        ErrorCode::INVALID,
        "the server changed it for a catalog request",
    );

    // Nothing of it all reached the database.
    server.stop();
    let db = Database::open(&path).unwrap();
    let mut tx = db.begin().unwrap();
    assert!(tx.root::<Part>("second").is_err());
    assert!(tx.root::<Part>("dangling").is_err());
    let by_id: Index<u64, Part> = Index::on("id");
    assert_eq!(tx.find(&by_id, &1).unwrap().len(), 1);
    tx.commit().unwrap();
    db.close().unwrap();
    let report = cairn::storage::check::check_database(&path, &cairn::storage::volume::VolumeOptions::default());
    assert!(report.is_ok(), "{:?}", report.problems);
}

/// A store for decoding an outcome that opens no tree.
struct NoStore;

impl cairn_schema::StoreOps for NoStore {
    fn create(&mut self, _: cairn_storage::GroupId, _: &[u8]) -> cairn_storage::Result<Oid> {
        unreachable!()
    }
    fn read(&mut self, _: Oid) -> cairn_storage::Result<Vec<u8>> {
        unreachable!()
    }
    fn read_with<R>(&mut self, _: Oid, _: impl FnOnce(&[u8]) -> R) -> cairn_storage::Result<R> {
        unreachable!()
    }
    fn scan_all(&mut self, _: cairn_storage::GroupId) -> cairn_storage::Result<Vec<Oid>> {
        unreachable!()
    }
    fn tree_open(
        &mut self,
        _: PageId,
    ) -> cairn_storage::Result<(cairn_storage::btree::BTree, Option<cairn_storage::GroupId>)> {
        unreachable!()
    }
    fn tree_create(
        &mut self,
        _: cairn_storage::GroupId,
        _: bool,
    ) -> cairn_storage::Result<cairn_storage::btree::BTree> {
        unreachable!()
    }
    fn tree_get(&mut self, _: &cairn_storage::btree::BTree, _: &[u8]) -> cairn_storage::Result<Option<Vec<u8>>> {
        unreachable!()
    }
    fn tree_apply(
        &mut self,
        _: &cairn_storage::btree::BTree,
        _: Vec<cairn_schema::TreeOp>,
        _: &mut Vec<PageId>,
    ) -> cairn_storage::Result<()> {
        unreachable!()
    }
    fn tree_scan(
        &mut self,
        _: &cairn_storage::btree::BTree,
        _: std::ops::Bound<&[u8]>,
        _: std::ops::Bound<&[u8]>,
        _: impl FnMut(&[u8], &[u8]) -> bool,
    ) -> cairn_storage::Result<()> {
        unreachable!()
    }
}

#[test]
fn a_change_waits_for_the_clients_other_transaction_reading_the_catalog() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    setup(&path);
    let server = common::serve(&path);
    for arch in [Arch::Page, Arch::Object] {
        let db = std::sync::Arc::new(Database::connect(&format!("cairn://{}", server.addr), options(arch)).unwrap());
        // Read once, so the client caches the catalog under its rights: the
        // reader below then reads it with no lock on the server.
        let mut warm = db.begin().unwrap();
        warm.root::<Part>("first").unwrap();
        warm.commit().unwrap();
        let mut reader = db.begin().unwrap();
        let first = reader.root::<Part>("first").unwrap();
        let waits_before = db.server_lock_stats().unwrap().unwrap().waits;
        let writer = {
            let db = db.clone();
            std::thread::spawn(move || {
                let mut tx = db.begin().unwrap();
                tx.remove_root("first").unwrap();
                tx.commit().unwrap();
            })
        };
        // The change must wait for the reader in the server's lock table.
        while db.server_lock_stats().unwrap().unwrap().waits == waits_before && !writer.is_finished() {
            std::thread::yield_now();
        }
        assert!(
            !writer.is_finished(),
            "{arch:?}: the change did not wait for the reader"
        );
        assert_eq!(
            reader.root::<Part>("first").unwrap().oid(),
            first.oid(),
            "{arch:?}: the reader keeps what it read"
        );
        reader.commit().unwrap();
        writer.join().unwrap();
        let mut tx = db.begin().unwrap();
        assert!(tx.root::<Part>("first").is_err(), "{arch:?}");
        let p = tx.get(&first).unwrap();
        tx.set_root("first", &first).unwrap();
        assert_eq!(p.id, 1);
        tx.commit().unwrap();
    }
    server.stop();
}
