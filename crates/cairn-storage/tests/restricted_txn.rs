//! A restricted transaction (how a server enforces a session's role) can
//! change nothing its restriction forbids, by any path: a read-only one no
//! object, page, allocation or free; one with protected pages nothing on
//! them, under page and under object locks. A refusal is PermissionDenied
//! and dooms the transaction; what it read stays readable elsewhere.

use std::sync::Arc;

use cairn_storage::lock::{LockMode, Resource};
use cairn_storage::{Db, DbOptions, Error, GroupId, Oid, Restriction, Txn};

fn setup() -> (tempfile::TempDir, Db, Oid, Oid) {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::create(&dir.path().join("db"), &DbOptions::default()).unwrap();
    let g = db.create_group("other").unwrap();
    let mut t = db.begin().unwrap();
    let a = t.create(GroupId::DEFAULT, b"alpha").unwrap();
    let b = t.create(g, b"beta").unwrap();
    t.commit().unwrap();
    assert_ne!(a.page, b.page);
    (dir, db, a, b)
}

fn denied<T: std::fmt::Debug>(r: Result<T, Error>) {
    match r {
        Err(Error::PermissionDenied(m)) => assert!(m.contains("may not lock"), "{m}"),
        other => panic!("expected PermissionDenied, got {other:?}"),
    }
}

fn read_only(db: &Db) -> Txn {
    let mut t = db.begin().unwrap();
    t.restrict(Restriction {
        read_only: true,
        protected: None,
    });
    t
}

#[test]
fn a_read_only_transaction_reads_and_every_change_is_refused() {
    let (_dir, db, a, _b) = setup();
    let mut t = read_only(&db);
    assert_eq!(t.read(a).unwrap(), b"alpha");
    t.commit().expect("a read-only transaction that read commits");
    type Attempt = Box<dyn Fn(&mut Txn) -> Result<(), Error>>;
    let attempts: Vec<Attempt> = vec![
        Box::new(move |t| t.update(a, b"changed")),
        Box::new(|t| t.create(GroupId::DEFAULT, b"new").map(|_| ())),
        Box::new(move |t| t.delete(a)),
        Box::new(move |t| t.lock_page(a.page, true)),
        Box::new(move |t| t.lock_resource(Resource::Group(GroupId::DEFAULT), LockMode::IX)),
        Box::new(move |t| t.try_lock_resource(Resource::Page(a.page), LockMode::X).map(|_| ())),
        Box::new(move |t| t.prefetch_pages_exclusive(&[a.page])),
        Box::new(move |t| t.lock_object(a, true)),
    ];
    for (i, attempt) in attempts.iter().enumerate() {
        let mut t = read_only(&db);
        denied(attempt(&mut t));
        assert!(t.read(a).is_err(), "attempt {i}: the refusal dooms the transaction");
    }
    let mut t = db.begin().unwrap();
    assert_eq!(t.read(a).unwrap(), b"alpha", "nothing changed");
}

#[test]
fn protected_pages_refuse_changes_under_page_and_object_locks_and_others_do_not() {
    let (_dir, db, a, b) = setup();
    let protected = a.page;
    let restrict = |t: &mut Txn| {
        t.restrict(Restriction {
            read_only: false,
            protected: Some(Arc::new(move |p| {
                (p == protected).then(|| "it holds the catalog".to_string())
            })),
        })
    };
    for object_locks in [false, true] {
        let mut t = db.begin().unwrap();
        t.set_object_locking(object_locks).unwrap();
        restrict(&mut t);
        assert_eq!(t.read(a).unwrap(), b"alpha");
        denied(t.update(a, b"changed"));
        let mut t = db.begin().unwrap();
        t.set_object_locking(object_locks).unwrap();
        restrict(&mut t);
        t.update(b, b"gamma").expect("an unprotected page changes");
        t.commit().unwrap();
    }
    let mut t = db.begin().unwrap();
    assert_eq!(t.read(a).unwrap(), b"alpha");
    assert_eq!(t.read(b).unwrap(), b"gamma");
}
