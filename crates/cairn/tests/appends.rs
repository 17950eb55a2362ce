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

on_every_backend!(appends_read_back_commit_abort_and_refuse_what_is_not_a_list);

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
