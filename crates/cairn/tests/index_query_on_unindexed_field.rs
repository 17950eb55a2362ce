//! An index query on a field without `#[cairn(index)]` — misspelled, or a
//! real field that is not indexed — is `Error::NoIndex` naming the type, the
//! field and the indexed fields, for every kind of query; it used to be an
//! empty answer (issue 10, defect 10).

mod common;

use common::{opts, Backend, Site};

on_every_backend!(misspelled_index_field_is_an_error,);

use std::ops::Bound;

use cairn::{Error, Index, Persistent};

#[derive(Persistent, Debug, Clone)]
struct Part {
    #[cairn(index)]
    id: u32,
    x: u32,
}

const MISSPELLED: Index<u32, Part> = Index::on("idd");
const NOT_INDEXED: Index<u32, Part> = Index::on("x");
const BY_ID: Index<u32, Part> = Index::on("id");

fn assert_no_index<T: std::fmt::Debug>(r: cairn::Result<T>, field: &str) {
    match r {
        Err(Error::NoIndex {
            ref type_name,
            field: ref f,
            ref indexed,
        }) => {
            assert_eq!(type_name, "Part");
            assert_eq!(f, field);
            assert_eq!(indexed, "id");
            let msg = r.unwrap_err().to_string();
            assert!(msg.contains("Part") && msg.contains(field), "{msg}");
        }
        other => panic!("expected NoIndex for {field}, got {other:?}"),
    }
}

fn misspelled_index_field_is_an_error(b: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let mut site = Site::new(b, &dir.path().join("db"));
    let db = site.open(opts());
    let mut tx = db.begin().unwrap();
    // Before any object exists (no tree yet) and after.
    assert_no_index(tx.find(&MISSPELLED, &1), "idd");
    tx.create(Part { id: 1, x: 1 }).unwrap();
    assert_no_index(tx.find(&MISSPELLED, &1), "idd");
    assert_no_index(tx.find_one(&MISSPELLED, &1), "idd");
    assert_no_index(tx.find_range(&MISSPELLED, Bound::Unbounded, Bound::Unbounded), "idd");
    assert_no_index(tx.find(&NOT_INDEXED, &1), "x");
    // The real index still answers, in this transaction and after commit.
    assert_eq!(tx.find(&BY_ID, &1).unwrap().len(), 1);
    tx.commit().unwrap();
    let mut tx = db.begin().unwrap();
    assert_no_index(tx.find(&MISSPELLED, &1), "idd");
    assert_eq!(tx.find(&BY_ID, &1).unwrap().len(), 1);
}
