//! An index query whose key type is not the indexed field's type is
//! `Error::IndexKeyType` naming the type, the field and both types; it used
//! to be an empty answer, since a `u64` key's bytes never equal a `u32`'s
//! (issue 10, defect 10). Keys of the same stored type (`&str` for a
//! `String` field) are accepted.

mod common;

use common::{opts, Backend, Site};

on_every_backend!(wrong_index_key_type_is_an_error,);

use std::ops::Bound;

use cairn::{Error, Index, Persistent};

#[derive(Persistent, Debug, Clone)]
struct Part {
    #[cairn(index)]
    id: u32,
    #[cairn(index)]
    name: String,
}

const BY_ID_AS_U64: Index<u64, Part> = Index::on("id");
const BY_ID_AS_I32: Index<i32, Part> = Index::on("id");
const BY_NAME_AS_BYTES: Index<Vec<u8>, Part> = Index::on("name");
const BY_NAME_AS_STR: Index<&str, Part> = Index::on("name");
const BY_NAME: Index<String, Part> = Index::on("name");
const BY_ID: Index<u32, Part> = Index::on("id");

fn assert_key_type<T: std::fmt::Debug>(r: cairn::Result<T>, field: &str, field_type: &str, key_type: &str) {
    match r {
        Err(Error::IndexKeyType {
            ref type_name,
            field: ref f,
            field_type: ref ft,
            key_type: ref kt,
        }) => {
            assert_eq!((type_name.as_str(), f.as_str()), ("Part", field));
            assert_eq!((ft.as_str(), kt.as_str()), (field_type, key_type));
            let msg = r.unwrap_err().to_string();
            assert!(msg.contains(field_type) && msg.contains(key_type), "{msg}");
        }
        other => panic!("expected IndexKeyType, got {other:?}"),
    }
}

fn wrong_index_key_type_is_an_error(b: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let mut site = Site::new(b, &dir.path().join("db"));
    let db = site.open(opts());
    let mut tx = db.begin().unwrap();
    tx.create(Part {
        id: 7,
        name: "seven".into(),
    })
    .unwrap();
    tx.commit().unwrap();

    let mut tx = db.begin().unwrap();
    assert_key_type(tx.find(&BY_ID_AS_U64, &7), "id", "u32", "u64");
    assert_key_type(tx.find_one(&BY_ID_AS_I32, &7), "id", "u32", "i32");
    assert_key_type(
        tx.find_range(&BY_ID_AS_U64, Bound::Included(&0), Bound::Unbounded),
        "id",
        "u32",
        "u64",
    );
    assert_key_type(
        tx.find(&BY_NAME_AS_BYTES, &b"seven".to_vec()),
        "name",
        "String",
        "Vec<u8>",
    );
    // After the right key type has used the tree in this transaction too.
    assert_eq!(tx.find(&BY_ID, &7).unwrap().len(), 1);
    assert_key_type(tx.find(&BY_ID_AS_U64, &7), "id", "u32", "u64");
    // &str and String are the same stored type.
    assert_eq!(tx.find(&BY_NAME_AS_STR, &"seven").unwrap().len(), 1);
    assert_eq!(tx.find(&BY_NAME, &"seven".to_string()).unwrap().len(), 1);
}
