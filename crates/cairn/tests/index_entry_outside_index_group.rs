//! A damaged index entry in the catalog that names a page outside the index
//! group — here the root of the catalog's own roots or classes tree — is
//! `Error::Corrupt` when the class is registered. Before, registering a type
//! that no longer indexes the field freed that tree (losing every named
//! root), and one that does index it inserted index keys into it. Found by
//! the `catalog` fuzz target's seeds.

#[path = "../../../fuzz/targets/catalog.rs"]
#[expect(dead_code, reason = "only Part and write_entries of the fuzz target are used here")]
mod catalog;
mod common;

use cairn::{Database, Error};
use catalog::Part;
use common::opts;

/// The catalog input of one entry of the indexes tree: (class 1, `field`) →
/// `page`, written into a database where `Part` is class 1 with a root.
fn damaged_database(field: &str, page: u32) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let db = Database::open_with(&path, opts()).unwrap();
    let mut tx = db.begin().unwrap();
    let r = tx
        .create(Part {
            id: 1,
            name: "first".into(),
        })
        .unwrap();
    tx.set_root("part", &r).unwrap();
    tx.commit().unwrap();
    db.close().unwrap();
    let mut key = 1u32.to_be_bytes().to_vec();
    key.extend_from_slice(field.as_bytes());
    let mut input = vec![2u8, key.len() as u8];
    input.extend_from_slice(&key);
    input.push(4);
    input.extend_from_slice(&page.to_le_bytes());
    catalog::write_entries(&path, &opts().storage, &input);
    (dir, path)
}

fn assert_corrupt(r: cairn::Result<()>, page: u32) {
    match r {
        Err(Error::Corrupt { page: p, ref reason }) => {
            assert_eq!(p.0, page);
            assert!(reason.contains("cairn.index"), "{reason}");
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

#[test]
fn index_entry_naming_a_catalog_tree_is_corrupt_not_freed() {
    // Pages 4 and 5 are the roots and classes trees of a new database.
    for (field, page) in [("gone", 4u32), ("id", 5)] {
        let (_dir, path) = damaged_database(field, page);
        let db = Database::open_with(&path, opts()).unwrap();
        assert_corrupt(db.register::<Part>(), page);
        // Nothing was freed or written: the named root is still there.
        let mut tx = db.begin().unwrap();
        let r = tx.root::<Part>("part");
        assert!(r.is_ok(), "{:?}", r.err());
    }
}
