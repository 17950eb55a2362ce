//! Adding `#[cairn(index)]` to a field of a class that already has objects
//! builds the index from them when the new definition is first registered,
//! so `find` returns the old objects (it used to return nothing for them,
//! forever: issue 10, defect 10). Removing the mark drops the index, so it is
//! not left stale: marking the field again later rebuilds it from the objects
//! as they are then.

mod common;

use common::{opts, Backend, Site};

on_every_backend!(index_added_to_existing_class_finds_old_objects,);

use cairn::Ref;

/// The first definition: no index.
mod v1 {
    #[derive(cairn::Persistent, Debug, Clone, PartialEq)]
    pub struct Part {
        pub id: u32,
        pub x: i32,
    }
}

/// The same class (same name and fields), now indexed on `id`.
mod v2 {
    #[derive(cairn::Persistent, Debug, Clone, PartialEq)]
    pub struct Part {
        #[cairn(index)]
        pub id: u32,
        pub x: i32,
    }

    pub const BY_ID: cairn::Index<u32, Part> = cairn::Index::on("id");
}

fn index_added_to_existing_class_finds_old_objects(b: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let mut site = Site::new(b, &path);
    let n = 500u32;

    // Objects written without the index, in two groups.
    let db = site.open(opts());
    let mut tx = db.begin().unwrap();
    let mut old: Vec<Ref<v1::Part>> = Vec::new();
    for i in 0..n {
        let group = if i % 2 == 0 { "even" } else { "odd" };
        old.push(
            tx.create_in(
                group,
                v1::Part {
                    id: i % 100,
                    x: i as i32,
                },
            )
            .unwrap(),
        );
    }
    tx.commit().unwrap();
    db.close().unwrap();

    // Reopened with the index: the old objects are found.
    let db = site.open(opts());
    let mut tx = db.begin().unwrap();
    let mut found: Vec<i32> = tx
        .find(&v2::BY_ID, &42)
        .unwrap()
        .iter()
        .map(|r| tx.get(r).unwrap().x)
        .collect();
    found.sort();
    assert_eq!(found, vec![42, 142, 242, 342, 442]);
    assert_eq!(tx.find(&v2::BY_ID, &100).unwrap().len(), 0);
    // And maintained from now on.
    tx.create_in("odd", v2::Part { id: 42, x: -1 }).unwrap();
    assert_eq!(tx.find(&v2::BY_ID, &42).unwrap().len(), 6);
    tx.commit().unwrap();
    db.close().unwrap();

    // Back to the definition without the index: changes made now are not
    // indexed, so the index is dropped rather than left stale...
    let db = site.open(opts());
    let mut tx = db.begin().unwrap();
    for r in &old[..100] {
        tx.update(r, |p| p.id += 1000).unwrap();
    }
    tx.commit().unwrap();
    db.close().unwrap();

    // ...and rebuilt, right, when the mark comes back.
    let db = site.open(opts());
    let mut tx = db.begin().unwrap();
    assert_eq!(tx.find(&v2::BY_ID, &42).unwrap().len(), 5, "old 42 moved to 1042");
    assert_eq!(tx.find(&v2::BY_ID, &1042).unwrap().len(), 1);
    let all = tx
        .find_range(&v2::BY_ID, std::ops::Bound::Unbounded, std::ops::Bound::Unbounded)
        .unwrap();
    assert_eq!(all.len(), n as usize + 1);
    tx.commit().unwrap();
    db.close().unwrap();
}
