//! The typed API end to end on a real database: create, get, update, delete,
//! named roots, references in both directions, an index on a field, reopen,
//! a tiny object cache under a long traversal, and schema evolution.

mod common;

use cairn::{CachePolicy, Database, Error, Index, List, Options, Persistent, Ref};
use common::{Backend, Site};

on_every_backend!(
    create_follow_update_delete_roots_and_reopen,
    the_index_follows_creates_updates_and_deletes,
    a_tiny_cache_gives_the_same_answers_and_never_a_wrong_object,
    a_reference_to_another_type_is_an_error_not_a_wrong_object,
    schema_evolution_adds_fields_with_defaults_and_refuses_the_rest,
    a_reference_kept_across_a_reopen_never_yields_another_object,
    views_read_what_get_reads_and_follow_changes,
);

#[derive(Persistent, Debug, Clone, PartialEq)]
struct Connection {
    to: Ref<Part>,
    kind: String,
    length: i32,
}

#[derive(Persistent, Debug, Clone, PartialEq)]
struct Part {
    #[cairn(index)]
    id: u32,
    kind: String,
    x: i32,
    y: i32,
    build: i64,
    to: Vec<Connection>,
    from: List<Ref<Part>>,
}

const BY_ID: Index<u32, Part> = Index::on("id");

fn opts(cache_bytes: usize, policy: CachePolicy) -> Options {
    let mut o = Options {
        cache_bytes,
        cache_policy: policy,
        ..Options::default()
    };
    o.storage.background = false;
    o
}

/// A small graph: part i connects to (i*7+1) % n, (i*13+2) % n, (i*3+5) % n.
fn build(db: &Database, n: u32) -> Vec<Ref<Part>> {
    let mut tx = db.begin().unwrap();
    let parts: Vec<Ref<Part>> = (0..n)
        .map(|i| {
            tx.create_in(
                "parts",
                Part {
                    id: i,
                    kind: format!("part-type{}", i % 10),
                    x: i as i32,
                    y: -(i as i32),
                    build: i64::from(i) * 1000,
                    to: Vec::new(),
                    from: List::new(),
                },
            )
            .unwrap()
        })
        .collect();
    for i in 0..n {
        for (k, t) in [(i * 7 + 1) % n, (i * 13 + 2) % n, (i * 3 + 5) % n]
            .into_iter()
            .enumerate()
        {
            let target = parts[t as usize].clone();
            tx.update(&parts[i as usize], |p| {
                p.to.push(Connection {
                    to: target.clone(),
                    kind: format!("c{k}"),
                    length: (i + t) as i32,
                })
            })
            .unwrap();
            let source = parts[i as usize].clone();
            tx.update(&parts[t as usize], |p| p.from.push(source)).unwrap();
        }
    }
    tx.set_root("first-part", &parts[0]).unwrap();
    tx.commit().unwrap();
    parts
}

/// Depth-first over `to` from the root to `depth` hops: visited ids in order.
fn traverse(db: &Database, depth: u32) -> Vec<u32> {
    fn go(tx: &mut cairn::Transaction<'_>, r: &Ref<Part>, depth: u32, out: &mut Vec<u32>) {
        let p = tx.get(r).unwrap();
        out.push(p.id);
        if depth == 0 {
            return;
        }
        // Saying where it goes next changes nothing it reads.
        tx.prefetch(p.to.iter().map(|c| &c.to)).unwrap();
        for c in &p.to {
            go(tx, &c.to, depth - 1, out);
        }
    }
    let mut tx = db.begin().unwrap();
    let root: Ref<Part> = tx.root("first-part").unwrap();
    let mut out = Vec::new();
    go(&mut tx, &root, depth, &mut out);
    tx.commit().unwrap();
    out
}

fn create_follow_update_delete_roots_and_reopen(b: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let mut site = Site::new(b, &path);
    let db = site.open(opts(64 << 20, CachePolicy::Lru));
    let parts = build(&db, 200);
    let visits = traverse(&db, 4);
    assert_eq!(visits.len(), 1 + 3 + 9 + 27 + 81);

    // Both directions: every `to` edge has the matching `from` entry.
    let mut tx = db.begin().unwrap();
    for r in &parts {
        let p = tx.get(r).unwrap();
        for c in &p.to {
            let q = tx.get(&c.to).unwrap();
            assert!(q.from.contains(r), "part {} lacks the reverse edge from {}", q.id, p.id);
        }
    }
    // Update, then read back in the same and a later transaction.
    tx.update(&parts[5], |p| p.x = 12345).unwrap();
    assert_eq!(tx.get(&parts[5]).unwrap().x, 12345);
    tx.commit().unwrap();
    let mut tx = db.begin().unwrap();
    assert_eq!(tx.get(&parts[5]).unwrap().x, 12345);
    // An aborted change leaves nothing.
    tx.update(&parts[6], |p| p.x = -1).unwrap();
    tx.abort().unwrap();
    let mut tx = db.begin().unwrap();
    assert_eq!(tx.get(&parts[6]).unwrap().x, 6);
    // Delete: the reference answers NotFound.
    tx.delete(&parts[7]).unwrap();
    assert!(matches!(tx.get(&parts[7]), Err(Error::NotFound { .. })));
    tx.commit().unwrap();
    let mut tx = db.begin().unwrap();
    // A dangling reference prefetched is reported when followed.
    tx.prefetch([&parts[7], &parts[150], &parts[199]]).unwrap();
    assert!(matches!(tx.get(&parts[7]), Err(Error::NotFound { .. })));
    assert_eq!(tx.get(&parts[150]).unwrap().id, 150);
    assert!(matches!(tx.root::<Part>("no-such-root"), Err(Error::NoRoot { .. })));
    tx.commit().unwrap();
    let stats = db.cache_stats();
    // An object-server client trusts no copy across transactions (it has
    // no callbacks yet): every transaction faults what it reads.
    let hits_across = !b.speaks_objects();
    assert!(
        (stats.hits > 0 || !hits_across) && stats.faults > 0 && stats.swizzles > 0,
        "{stats:?}"
    );
    db.close().unwrap();

    let db = site.open(opts(64 << 20, CachePolicy::Clock));
    assert_eq!(traverse(&db, 4), visits, "the same graph after reopening");
    let mut tx = db.begin().unwrap();
    assert_eq!(tx.get(&parts[5]).unwrap().x, 12345);
    assert!(matches!(tx.get(&parts[7]), Err(Error::NotFound { .. })));
    tx.commit().unwrap();
    db.close().unwrap();
    site.check();
}

fn the_index_follows_creates_updates_and_deletes(b: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let mut site = Site::new(b, &dir.path().join("db"));
    let db = site.open(opts(1 << 20, CachePolicy::Lru));
    let parts = build(&db, 100);
    let mut tx = db.begin().unwrap();
    assert_eq!(tx.find(&BY_ID, &42).unwrap(), vec![parts[42].clone()]);
    let range = tx
        .find_range(&BY_ID, std::ops::Bound::Included(&10), std::ops::Bound::Excluded(&20))
        .unwrap();
    assert_eq!(range, parts[10..20].to_vec());
    tx.update(&parts[42], |p| p.id = 4242).unwrap();
    assert!(tx.find(&BY_ID, &42).unwrap().is_empty());
    assert_eq!(tx.find(&BY_ID, &4242).unwrap(), vec![parts[42].clone()]);
    tx.delete(&parts[43]).unwrap();
    assert!(tx.find(&BY_ID, &43).unwrap().is_empty());
    tx.abort().unwrap();
    // The abort undid the index changes with the objects.
    let mut tx = db.begin().unwrap();
    assert_eq!(tx.find(&BY_ID, &42).unwrap(), vec![parts[42].clone()]);
    assert_eq!(tx.find(&BY_ID, &43).unwrap(), vec![parts[43].clone()]);
    assert!(tx.find(&BY_ID, &4242).unwrap().is_empty());
    tx.commit().unwrap();
}

fn a_tiny_cache_gives_the_same_answers_and_never_a_wrong_object(b: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let mut site = Site::new(b, &path);
    let db = site.open(opts(64 << 20, CachePolicy::Lru));
    build(&db, 300);
    let expected = traverse(&db, 6);
    db.close().unwrap();
    for policy in [CachePolicy::Lru, CachePolicy::Clock] {
        // Room for a handful of objects only: references are swizzled and
        // then their targets evicted, again and again.
        let db = site.open(opts(2_000, policy));
        assert_eq!(traverse(&db, 6), expected, "{policy:?}");
        assert_eq!(traverse(&db, 6), expected, "{policy:?}, second run");
        let s = db.cache_stats();
        assert!(s.evictions > 1000, "{policy:?}: {s:?}");
        assert!(s.objects <= 10, "{policy:?}: {s:?}");
        db.close().unwrap();
    }
}

fn a_reference_to_another_type_is_an_error_not_a_wrong_object(b: Backend) {
    #[derive(Persistent, Debug)]
    struct Other {
        name: String,
    }
    let dir = tempfile::tempdir().unwrap();
    let mut site = Site::new(b, &dir.path().join("db"));
    let db = site.open(opts(1 << 20, CachePolicy::Lru));
    let mut tx = db.begin().unwrap();
    let o = tx
        .create(Other {
            name: "not a part".into(),
        })
        .unwrap();
    tx.commit().unwrap();
    let mut tx = db.begin().unwrap();
    let wrong: Ref<Part> = o.cast();
    assert!(matches!(tx.get(&wrong), Err(Error::WrongType { .. })));
    assert_eq!(tx.get(&o).unwrap().name, "not a part");
    tx.commit().unwrap();
}

mod v1 {
    #[derive(cairn::Persistent, Debug)]
    pub struct Gadget {
        pub name: String,
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
        #[cairn(default)]
        pub tags: Vec<String>,
    }
}

mod v3_removed {
    #[derive(cairn::Persistent, Debug)]
    pub struct Gadget {
        pub name: String,
    }
}

mod v3_retyped {
    #[derive(cairn::Persistent, Debug)]
    pub struct Gadget {
        pub name: String,
        pub size: u64,
    }
}

mod v3_no_default {
    #[derive(cairn::Persistent, Debug)]
    pub struct Gadget {
        pub name: String,
        pub size: u32,
        #[cairn(default)]
        pub color: String,
        #[cairn(default)]
        pub tags: Vec<String>,
        pub weight: u32,
    }
}

fn schema_evolution_adds_fields_with_defaults_and_refuses_the_rest(b: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let mut site = Site::new(b, &path);
    let db = site.open(opts(1 << 20, CachePolicy::Lru));
    let mut tx = db.begin().unwrap();
    let g = tx
        .create(v1::Gadget {
            name: "widget".into(),
            size: 3,
        })
        .unwrap();
    tx.set_root("g", &g).unwrap();
    tx.commit().unwrap();
    db.close().unwrap();

    // Version 2 reads the version-1 record, with defaults for the new fields,
    // and writes version-2 records.
    let db = site.open(opts(1 << 20, CachePolicy::Lru));
    let mut tx = db.begin().unwrap();
    let g2: Ref<v2::Gadget> = tx.root("g").unwrap();
    let v = tx.get(&g2).unwrap();
    assert_eq!(
        (v.name.as_str(), v.size, v.color.as_str(), v.tags.len()),
        ("widget", 3, "", 0)
    );
    tx.update(&g2, |g| g.color = "red".into()).unwrap();
    tx.commit().unwrap();
    let mut tx = db.begin().unwrap();
    assert_eq!(tx.get(&g2).unwrap().color, "red");
    tx.commit().unwrap();
    db.close().unwrap();

    for (what, field_named, err) in [
        ("removed", "size", {
            // One opener at a time: the directory lock refuses a second.
            let db = site.open(opts(1 << 20, CachePolicy::Lru));
            db.register::<v3_removed::Gadget>()
        }),
        ("retyped", "size", {
            // One opener at a time: the directory lock refuses a second.
            let db = site.open(opts(1 << 20, CachePolicy::Lru));
            db.register::<v3_retyped::Gadget>()
        }),
        ("added without default", "weight", {
            // One opener at a time: the directory lock refuses a second.
            let db = site.open(opts(1 << 20, CachePolicy::Lru));
            db.register::<v3_no_default::Gadget>()
        }),
    ] {
        match err {
            Err(Error::SchemaMismatch { type_name, field, .. }) => {
                assert_eq!(type_name, "Gadget", "{what}");
                assert_eq!(field, field_named, "{what}");
            }
            other => panic!("{what}: expected SchemaMismatch, got {other:?}"),
        }
    }
}

/// Regression: a reference swizzled in one database instance, kept across a
/// reopen, must not be taken at its old slot number in the new instance's
/// cache (where that slot holds another object).
fn a_reference_kept_across_a_reopen_never_yields_another_object(b: Backend) {
    #[derive(Persistent, Debug)]
    struct Named {
        name: String,
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let mut site = Site::new(b, &path);
    let db = site.open(opts(1 << 20, CachePolicy::Clock));
    let mut tx = db.begin().unwrap();
    let a = tx.create(Named { name: "a".into() }).unwrap();
    let b = tx.create(Named { name: "b".into() }).unwrap();
    tx.commit().unwrap();
    let mut tx = db.begin().unwrap();
    assert_eq!(tx.get(&a).unwrap().name, "a");
    assert!(a.is_swizzled());
    tx.commit().unwrap();
    db.close().unwrap();

    let db = site.open(opts(1 << 20, CachePolicy::Clock));
    let mut tx = db.begin().unwrap();
    // `b` faults first and takes the slot `a` was swizzled to before.
    assert_eq!(tx.get(&b).unwrap().name, "b");
    assert_eq!(tx.get(&a).unwrap().name, "a", "the stale swizzle must not yield b");
    tx.commit().unwrap();
}

/// `view` reads every field in place as `get` decodes it, follows
/// references the same way, sees the transaction's own changes and later
/// transactions' commits, and reports a deleted object as `get` does.
fn views_read_what_get_reads_and_follow_changes(b: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let mut site = Site::new(b, &dir.path().join("db"));
    let db = site.open(opts(64 << 20, CachePolicy::Clock));
    let parts = build(&db, 200);
    let mut tx = db.begin().unwrap();
    for r in &parts {
        let owned = tx.get(r).unwrap();
        let o = tx.view(r).unwrap();
        assert_eq!(o.oid(), r.oid());
        let v = o.get();
        assert_eq!(
            (v.id(), v.kind(), v.x(), v.y(), v.build()),
            (owned.id, owned.kind.as_str(), owned.x, owned.y, owned.build)
        );
        let to: Vec<(Ref<Part>, String, i32)> = v
            .to()
            .iter()
            .map(|c| (c.to(), c.kind().to_string(), c.length()))
            .collect();
        let owned_to: Vec<(Ref<Part>, String, i32)> = owned
            .to
            .iter()
            .map(|c| (c.to.clone(), c.kind.clone(), c.length))
            .collect();
        assert_eq!(to, owned_to);
        assert_eq!(v.from().iter().collect::<Vec<_>>(), owned.from.0);
        assert_eq!(o.to_owned().unwrap(), *owned);
        // The view of the next hop, through the reference read in place.
        if let Some(c) = v.to().iter().next() {
            assert_eq!(
                tx.view(&c.to()).unwrap().get().id(),
                tx.get(&owned.to[0].to).unwrap().id
            );
        }
    }
    // The transaction's own change, then a later transaction's view of it.
    tx.update(&parts[3], |p| p.kind = "changed".into()).unwrap();
    assert_eq!(tx.view(&parts[3]).unwrap().get().kind(), "changed");
    tx.commit().unwrap();
    let mut tx = db.begin().unwrap();
    assert_eq!(tx.view(&parts[3]).unwrap().get().kind(), "changed");
    // Aborted: nothing of it is seen afterwards.
    tx.update(&parts[4], |p| p.x = -44).unwrap();
    assert_eq!(tx.view(&parts[4]).unwrap().get().x(), -44);
    tx.abort().unwrap();
    let mut tx = db.begin().unwrap();
    assert_eq!(tx.view(&parts[4]).unwrap().get().x(), 4);
    tx.delete(&parts[9]).unwrap();
    assert!(matches!(tx.view(&parts[9]), Err(Error::NotFound { .. })));
    tx.commit().unwrap();
    let mut tx = db.begin().unwrap();
    assert!(matches!(tx.view(&parts[9]), Err(Error::NotFound { .. })));
    // A reference to another type is refused, as by `get`.
    let wrong: Ref<Connection> = parts[10].cast();
    assert!(matches!(tx.view(&wrong), Err(Error::WrongType { .. })));
    tx.commit().unwrap();
    let s = db.cache_stats();
    if !b.reads_page_images() {
        // No shared page images (an object-server client has no pages):
        // views read copies.
        assert_eq!(s.image_hits, 0, "{s:?}");
    } else {
        assert!(s.image_loads > 0 && s.image_hits > 0, "{s:?}");
    }
    db.close().unwrap();
    site.check();
}

/// A derived struct's least encoded size, known as a constant, is the one
/// its type descriptor gives (sequence counts are checked against it).
#[test]
fn a_derived_structs_least_size_is_its_descriptors() {
    use cairn::fields::min_encoded_size;
    use cairn::Field;
    #[derive(Persistent, Debug, Clone, PartialEq)]
    struct Fixed {
        a: u64,
        b: Ref<Part>,
        c: bool,
    }
    #[derive(Persistent, Debug, Clone, PartialEq)]
    struct Nested {
        fixed: Fixed,
        conns: Vec<Connection>,
        name: String,
        maybe: Option<u16>,
    }
    assert_eq!(Connection::MIN_SIZE, min_encoded_size(&Connection::type_desc()));
    assert_eq!(
        <Part as Field>::MIN_SIZE,
        min_encoded_size(&<Part as Field>::type_desc())
    );
    assert_eq!(Fixed::MIN_SIZE, min_encoded_size(&Fixed::type_desc()));
    assert_eq!(Fixed::MIN_SIZE, 8 + 10 + 1);
    assert_eq!(Nested::MIN_SIZE, min_encoded_size(&Nested::type_desc()));
    assert_eq!(Nested::MIN_SIZE, 19 + 1 + 1 + 1);
}
