//! The typed layer's fuzz targets' corpora, replayed on stable (see
//! `fuzz/replay.rs`), and the generator of their seeds
//! (`cargo test --test fuzz_corpus -- --ignored`).

#[path = "../../../fuzz/replay.rs"]
mod replay;

#[path = "../../../fuzz/targets/catalog.rs"]
mod catalog;
#[path = "../../../fuzz/targets/catalog_change.rs"]
mod catalog_change;
#[path = "../../../fuzz/targets/methods.rs"]
mod methods;
#[path = "../../../fuzz/targets/typed_records.rs"]
mod typed_records;

use cairn::codec::{Persistent, Writer};
use cairn::fuzzing::encode_schema;
use cairn::{List, Map, Ref, Set};
use typed_records::{Blob, Part, Point};

#[test]
fn typed_records_corpus_replays_without_panics() {
    replay::replay("typed_records", typed_records::run);
}

#[test]
fn catalog_corpus_replays_without_panics() {
    replay::replay("catalog", catalog::run);
}

#[test]
fn catalog_change_corpus_replays_without_panics() {
    replay::replay("catalog_change", catalog_change::run);
}

/// Writes the `catalog_change` seeds from real encodings: each change, a
/// request and a reply (the selector byte first, see the target).
#[test]
#[ignore = "rewrites the seed inputs of fuzz/corpus/catalog_change"]
fn write_catalog_change_seeds() {
    use cairn::storage::{Oid, PageId};
    use cairn_net::catalog_service::{CatalogReply, CatalogRequest};
    use cairn_schema::catalog_change::CatalogChange;
    let changes = [
        ("create", CatalogChange::CreateMeta),
        (
            "register",
            CatalogChange::Register {
                name: "Part".into(),
                fields: Part::fields(),
            },
        ),
        (
            "add-index",
            CatalogChange::AddIndex {
                class: 3,
                field: "id".into(),
                root: PageId(12),
            },
        ),
        (
            "remove-index",
            CatalogChange::RemoveIndex {
                class: 3,
                field: "id".into(),
            },
        ),
        (
            "set-root",
            CatalogChange::SetRoot {
                name: "top".into(),
                oid: Some(Oid::from_bytes(&[4, 0, 0, 0, 1, 0, 2, 0, 0, 0])),
            },
        ),
    ];
    for (name, change) in &changes {
        let mut seed = vec![0];
        seed.extend(change.encode());
        replay::write_seed("catalog_change", name, &seed);
    }
    let mut seed = vec![1];
    seed.extend(
        CatalogRequest {
            txn: 9,
            change: changes[4].1.encode(),
        }
        .encode()
        .1,
    );
    replay::write_seed("catalog_change", "request", &seed);
    let mut seed = vec![2];
    seed.extend(
        CatalogReply {
            pages: vec![5, 6],
            images: vec![(5, vec![0xAB; 32])],
            outcome: vec![3],
        }
        .encode(),
    );
    replay::write_seed("catalog_change", "reply", &seed);
}

#[test]
fn methods_corpus_replays_without_panics() {
    replay::replay("methods", methods::run);
}

/// Writes the `methods` seeds (`cairn::fuzzing::method_seeds`).
#[test]
#[ignore = "rewrites the seed inputs of fuzz/corpus/methods"]
fn write_methods_seeds() {
    for (name, seed) in cairn::fuzzing::method_seeds() {
        replay::write_seed("methods", name, &seed);
    }
}

/// A `typed_records` input: the type's selector byte, then the record body.
fn record_seed<T: Persistent>(pick: u8, v: &T) -> Vec<u8> {
    let mut w = Writer::new();
    w.put(&[pick]);
    v.encode_fields(&mut w);
    w.into_bytes()
}

fn part() -> Part {
    Part {
        id: 7,
        name: "gear".into(),
        weight: -0.0,
        at: Point { x: -3, y: 2.5 },
        next: Some(Ref::from_oid(cairn::storage::Oid::from_bytes(&[
            1, 0, 0, 0, 2, 0, 3, 0, 0, 0,
        ]))),
        to: List(vec![Ref::from_oid(cairn::storage::Oid::from_bytes(&[9; 10]))]),
        tags: Set(["a".to_string(), "b\0c".to_string()].into_iter().collect()),
        sizes: Map([(1u16, -1i64), (500, i64::MAX)].into_iter().collect()),
    }
}

/// A catalog entry of the `catalog` input: tree, key, value.
fn entry(out: &mut Vec<u8>, tree: u8, key: &[u8], value: &[u8]) {
    out.push(tree);
    out.push(u8::try_from(key.len()).unwrap());
    out.extend_from_slice(key);
    out.push(u8::try_from(value.len()).unwrap());
    out.extend_from_slice(value);
}

/// The classes-tree entries of class `id` named `name` at `version`.
fn class_entries(out: &mut Vec<u8>, name: &str, id: u32, version: u16, schema: &[u8], next: u32) {
    let mut v = id.to_le_bytes().to_vec();
    v.extend_from_slice(&version.to_le_bytes());
    entry(out, 1, &[b"n", name.as_bytes()].concat(), &v);
    let mut k = b"s".to_vec();
    k.extend_from_slice(&id.to_be_bytes());
    k.extend_from_slice(&version.to_be_bytes());
    entry(out, 1, &k, schema);
    entry(out, 1, b"c", &next.to_le_bytes());
}

#[test]
#[ignore = "rewrites the seed inputs of fuzz/corpus/{typed_records,catalog}"]
fn write_typed_seeds() {
    replay::write_seed("typed_records", "part", &record_seed(0, &part()));
    let blob = Blob {
        bytes: vec![0, 1, 255],
        flag: true,
        small: 200,
        maybe: Some(None),
        rows: vec![vec![], vec![u64::MAX, 0]],
        note: "n".into(),
    };
    replay::write_seed("typed_records", "blob", &record_seed(1, &blob));
    replay::write_seed("typed_records", "point", &record_seed(2, &Point { x: 1, y: f64::NAN }));

    let schema = encode_schema(&catalog::Part::fields());
    replay::write_seed("catalog", "schema_only", &[&[0u8][..], &schema].concat());
    // The catalog a database holds after registering `Part` (class 1).
    let mut same = vec![1u8];
    class_entries(&mut same, "Part", 1, 1, &schema, 2);
    replay::write_seed("catalog", "registered_part", &same);
    // An older version without `name`: registering `Part` is a mismatch.
    let old = encode_schema(&catalog::Part::fields()[..1]);
    let mut older = vec![1u8];
    class_entries(&mut older, "Part", 1, 1, &old, 2);
    replay::write_seed("catalog", "older_schema", &older);
    // Another class, a counter at its limit, a root and an index entry
    // naming pages that are no index.
    let mut full = vec![1u8];
    class_entries(&mut full, "Other", 5, 3, &schema, u32::MAX);
    entry(&mut full, 0, b"part", &[1, 0, 0, 0, 0, 0, 1, 0, 0, 0]);
    entry(
        &mut full,
        2,
        &[&5u32.to_be_bytes()[..], b"id"].concat(),
        &2u32.to_le_bytes(),
    );
    entry(
        &mut full,
        2,
        &[&1u32.to_be_bytes()[..], b"id"].concat(),
        &3u32.to_le_bytes(),
    );
    replay::write_seed("catalog", "counter_at_limit_and_stray_index", &full);
    // Part registered with index entries naming the roots tree (page 4 of a
    // new database) for a field it does not index, which registering would
    // drop and free, and the classes tree (page 5) for its indexed field,
    // which creating a Part would insert into.
    let mut stray = vec![1u8];
    class_entries(&mut stray, "Part", 1, 1, &schema, 2);
    entry(
        &mut stray,
        2,
        &[&1u32.to_be_bytes()[..], b"gone"].concat(),
        &4u32.to_le_bytes(),
    );
    replay::write_seed("catalog", "dropped_index_names_a_catalog_tree", &stray);
    let mut stray = vec![1u8];
    class_entries(&mut stray, "Part", 1, 1, &schema, 2);
    entry(
        &mut stray,
        2,
        &[&1u32.to_be_bytes()[..], b"id"].concat(),
        &5u32.to_le_bytes(),
    );
    replay::write_seed("catalog", "index_names_a_catalog_tree", &stray);
}
