//! Clients of one server learn of catalog changes other clients make after
//! they connected: a new schema version, an index added, an index dropped.
//! Each client here stands for a program built with its own version of the
//! type `Gadget` (the type's name is the class; the module is the version).

mod common;

use cairn::{Database, Error, Index, Options, Ref};
use common::ServerChild;

mod v1 {
    #[derive(cairn::Persistent, Debug)]
    pub struct Gadget {
        pub name: String,
        pub size: u32,
    }
}

mod v1_indexed {
    #[derive(cairn::Persistent, Debug)]
    pub struct Gadget {
        pub name: String,
        #[cairn(index)]
        pub size: u32,
    }
}

mod v2 {
    #[derive(cairn::Persistent, Debug)]
    pub struct Gadget {
        pub name: String,
        pub size: u32,
        #[cairn(default)]
        pub color: String,
    }
}

mod v2_indexed {
    #[derive(cairn::Persistent, Debug)]
    pub struct Gadget {
        pub name: String,
        #[cairn(index)]
        pub size: u32,
        #[cairn(default)]
        pub color: String,
    }
}

fn connect(server: &ServerChild) -> Database {
    let mut o = Options::default();
    o.storage.background = false;
    o.arch = cairn::Arch::Page;
    Database::connect(&format!("cairn://{}", server.addr), o).expect("connect")
}

#[test]
fn a_client_reads_a_schema_version_registered_after_it_connected_and_keeps_writing_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::serve(&dir.path().join("db"));
    let old = connect(&server);
    let mut tx = old.begin().unwrap();
    let g1 = tx
        .create(v1::Gadget {
            name: "one".into(),
            size: 1,
        })
        .unwrap();
    tx.commit().unwrap();

    // A newer program connects later and evolves the class.
    let new = connect(&server);
    let mut tx = new.begin().unwrap();
    let g2 = tx
        .create(v2::Gadget {
            name: "two".into(),
            size: 2,
            color: "red".into(),
        })
        .unwrap();
    let g1_new: Ref<v2::Gadget> = Ref::from_oid(g1.oid());
    assert_eq!(tx.get(&g1_new).unwrap().color, "", "a v1 record reads with the default");
    tx.commit().unwrap();

    // The old program reads the version-2 record (its session loaded the
    // catalog before version 2 existed) and still writes version 1.
    let mut tx = old.begin().unwrap();
    let g2_old: Ref<v1::Gadget> = Ref::from_oid(g2.oid());
    let v = tx
        .get(&g2_old)
        .expect("the old program reads a record of a version registered after it connected");
    assert_eq!((v.name.as_str(), v.size), ("two", 2));
    let g3 = tx
        .create(v1::Gadget {
            name: "three".into(),
            size: 3,
        })
        .unwrap();
    tx.update(&g1, |g| g.size = 10).unwrap();
    tx.commit().unwrap();

    let mut tx = new.begin().unwrap();
    let v = tx.get(&Ref::<v2::Gadget>::from_oid(g3.oid())).unwrap();
    assert_eq!((v.name.as_str(), v.size, v.color.as_str()), ("three", 3, ""));
    assert_eq!(tx.get(&g1_new).unwrap().size, 10);
    tx.commit().unwrap();
}

#[test]
fn an_index_added_by_another_client_stops_an_older_program_from_writing_but_not_from_reading() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::serve(&dir.path().join("db"));
    let old = connect(&server);
    let mut tx = old.begin().unwrap();
    let g1 = tx
        .create(v1::Gadget {
            name: "one".into(),
            size: 7,
        })
        .unwrap();
    tx.commit().unwrap();

    // The newer program adds a field and an index on `size`.
    let new = connect(&server);
    let by_size: Index<u32, v2_indexed::Gadget> = Index::on("size");
    let mut tx = new.begin().unwrap();
    let found = tx.find(&by_size, &7).unwrap();
    assert_eq!(
        found.iter().map(|r| r.oid()).collect::<Vec<_>>(),
        vec![g1.oid()],
        "the index is built from the objects already there"
    );
    tx.commit().unwrap();

    // The old program's type cannot keep that index: its writes would leave
    // it wrong, so they are refused, with the reason; reads go on.
    let mut tx = old.begin().unwrap();
    assert_eq!(tx.get(&g1).unwrap().size, 7);
    let err = tx
        .create(v1::Gadget {
            name: "two".into(),
            size: 7,
        })
        .unwrap_err();
    assert!(
        matches!(&err, Error::SchemaMismatch { type_name, reason, .. }
            if type_name == "Gadget" && reason.contains("indexes")),
        "{err}"
    );
    let err = tx.update(&g1, |g| g.size = 8).unwrap_err();
    assert!(matches!(err, Error::SchemaMismatch { .. }), "{err}");
    drop(tx);

    let mut tx = new.begin().unwrap();
    assert_eq!(
        tx.find(&by_size, &7).unwrap().len(),
        1,
        "nothing the old program tried reached the index"
    );
    assert!(tx.find(&by_size, &8).unwrap().is_empty());
    tx.commit().unwrap();
}

#[test]
fn an_index_dropped_and_rebuilt_by_other_clients_never_answers_stale() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::serve(&dir.path().join("db"));
    let indexed = connect(&server);
    let by_size: Index<u32, v1_indexed::Gadget> = Index::on("size");
    let mut tx = indexed.begin().unwrap();
    let a = tx
        .create(v1_indexed::Gadget {
            name: "a".into(),
            size: 1,
        })
        .unwrap();
    tx.commit().unwrap();
    let mut tx = indexed.begin().unwrap();
    assert_eq!(tx.find(&by_size, &1).unwrap().len(), 1);
    tx.commit().unwrap();

    // Another program of the same shape without the mark registers the
    // class: its registration drops the index (the newest shape decides the
    // indexes, and the last registration wins) and frees the tree's pages,
    // which its own objects may then reuse.
    let plain = connect(&server);
    let mut tx = plain.begin().unwrap();
    let mut made = Vec::new();
    for i in 0..200u32 {
        made.push(
            tx.create(v1::Gadget {
                name: format!("b{i}"),
                size: 1,
            })
            .unwrap(),
        );
    }
    tx.commit().unwrap();

    // The first client must neither read nor write the freed tree: it sees
    // the catalog move, registers again (rebuilding the index from every
    // object), and its index answers for all of them.
    let mut tx = indexed.begin().unwrap();
    let found = tx.find(&by_size, &1).unwrap();
    assert_eq!(
        found.len(),
        201,
        "the rebuilt index holds the other client's objects too"
    );
    let c = tx
        .create(v1_indexed::Gadget {
            name: "c".into(),
            size: 2,
        })
        .unwrap();
    tx.commit().unwrap();
    let mut tx = indexed.begin().unwrap();
    assert_eq!(
        tx.find(&by_size, &2)
            .unwrap()
            .iter()
            .map(|r| r.oid())
            .collect::<Vec<_>>(),
        vec![c.oid()]
    );
    assert!(tx.get(&a).is_ok());
    tx.commit().unwrap();
    drop((indexed, plain));
    server.stop();
    let report = cairn::storage::check::check_database(
        &dir.path().join("db"),
        &cairn::storage::volume::VolumeOptions::default(),
    );
    assert!(report.is_ok(), "{:?}", report.problems);
}
