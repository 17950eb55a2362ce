//! A record longer than `Options::object_bytes_max` is refused with
//! `Error::ObjectTooLarge` when a transaction would fault it in, before its
//! bytes are read or allocated (issue 10, defect 9); one within the limit
//! reads as before.

use cairn::{Database, Error, Options, Persistent};

#[derive(Persistent, Debug, Clone, PartialEq)]
struct Blob {
    name: String,
    bytes: Vec<u8>,
}

#[test]
fn huge_object_read_whole_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let mut opts = Options::default();
    opts.storage.background = false;
    let db = Database::open_with(&path, opts.clone()).unwrap();
    let mut tx = db.begin().unwrap();
    let big = tx
        .create(Blob {
            name: "big".into(),
            bytes: vec![1; 50_000],
        })
        .unwrap();
    let small = tx
        .create(Blob {
            name: "small".into(),
            bytes: vec![2; 100],
        })
        .unwrap();
    tx.commit().unwrap();
    db.close().unwrap();

    opts.object_bytes_max = 10_000;
    let db = Database::open_with(&path, opts).unwrap();
    let mut tx = db.begin().unwrap();
    let err = tx.get(&big).unwrap_err();
    assert!(
        matches!(err, Error::ObjectTooLarge { oid, len, limit: 10_000 } if oid == big.oid() && len > 50_000),
        "{err}"
    );
    // Changing it needs it decoded, too.
    assert!(matches!(
        tx.update(&big, |b| b.bytes.clear()),
        Err(Error::ObjectTooLarge { .. })
    ));
    assert_eq!(tx.get(&small).unwrap().bytes.len(), 100);
    // The bytes are still there for a ranged read.
    let mut head = [0u8; 6];
    tx.storage()
        .expect("page-based")
        .read_range(big.oid(), 0, &mut head)
        .unwrap();
}
