//! Server-side methods (`Transaction::select`, `count`, `select_in`,
//! `traverse`) on every backend: they read fields through the catalog's
//! schema, see the calling transaction's own uncommitted changes, and no
//! other transaction's (that one's locks make them wait).

mod common;

use std::ops::Bound;
use std::time::Duration;

use cairn::{Cmp, Database, Index, Options, Persistent, Predicate, Ref};
use common::{Backend, Site};

on_every_backend!(
    selections_counts_and_traversals_see_the_transactions_own_changes,
    a_method_sees_no_other_transactions_uncommitted_changes,
    a_predicate_on_a_missing_field_or_of_the_wrong_kind_is_an_error,
);

#[derive(Persistent, Debug, Clone, PartialEq)]
struct Link {
    to: Ref<Part>,
    length: i32,
}

#[derive(Persistent, Debug, Clone, PartialEq)]
struct Part {
    #[cairn(index)]
    id: u32,
    kind: String,
    x: i32,
    to: Vec<Link>,
}

const BY_ID: Index<u32, Part> = Index::on("id");
const N: u32 = 50;

/// [`common::opts`] with a 300 ms lock timeout, as the server's (see
/// [`site`]): a request that waits for a lock held here fails soon.
fn short_lock_timeout_opts() -> Options {
    let mut o = common::opts();
    o.storage.lock_timeout = Duration::from_millis(300);
    o
}

fn site(b: Backend, dir: &std::path::Path) -> Site {
    Site::new(b, &dir.join("db")).server_env("CAIRN_TEST_LOCK_TIMEOUT_MS", "300")
}

/// Parts 0..N in group "parts": kind "type{i % 5}", x = i, one link to the
/// next part (length i).
fn build(db: &Database) -> Vec<Ref<Part>> {
    let mut tx = db.begin().unwrap();
    let parts: Vec<Ref<Part>> = (0..N)
        .map(|i| {
            tx.create_in(
                "parts",
                Part {
                    id: i,
                    kind: format!("type{}", i % 5),
                    x: i as i32,
                    to: Vec::new(),
                },
            )
            .unwrap()
        })
        .collect();
    for i in 0..N {
        let to = parts[((i + 1) % N) as usize].clone();
        tx.update(&parts[i as usize], |p| p.to.push(Link { to, length: i as i32 }))
            .unwrap();
    }
    tx.commit().unwrap();
    parts
}

fn ids(tx: &mut cairn::Transaction<'_>, refs: &[Ref<Part>]) -> Vec<u32> {
    let mut v: Vec<u32> = refs.iter().map(|r| tx.get(r).unwrap().id).collect();
    v.sort_unstable();
    v
}

fn selections_counts_and_traversals_see_the_transactions_own_changes(b: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let mut site = site(b, dir.path());
    let db = site.open(short_lock_timeout_opts());
    let parts = build(&db);
    let type3 = [Predicate::new("kind", Cmp::Eq, "type3")];

    let mut tx = db.begin().unwrap();
    let found = tx.select::<Part>("parts", &type3).unwrap();
    assert_eq!(ids(&mut tx, &found), vec![3, 8, 13, 18, 23, 28, 33, 38, 43, 48]);
    assert_eq!(
        tx.count::<Part>("parts", &[Predicate::new("x", Cmp::Lt, 10)]).unwrap(),
        10
    );
    let both = [
        Predicate::new("kind", Cmp::Eq, "type1"),
        Predicate::new("x", Cmp::Ge, 20),
    ];
    let found = tx.select::<Part>("parts", &both).unwrap();
    assert_eq!(ids(&mut tx, &found), vec![21, 26, 31, 36, 41, 46]);
    // A path into a sequence of nested structs.
    assert_eq!(
        tx.count::<Part>("parts", &[Predicate::new("to.length", Cmp::Ge, 45)])
            .unwrap(),
        5
    );
    // An index range with a predicate, in key order.
    let found = tx
        .select_in(
            &BY_ID,
            Bound::Included(&10),
            Bound::Excluded(&20),
            &[Predicate::new("kind", Cmp::Eq, "type0")],
        )
        .unwrap();
    let got: Vec<u32> = found.iter().map(|r| tx.get(r).unwrap().id).collect();
    assert_eq!(got, vec![10, 15]);
    // A bounded traversal along the links.
    let reached = tx.traverse(&parts[0], &["to.to"], 3).unwrap();
    let got: Vec<u32> = reached.iter().map(|r| tx.get(r).unwrap().id).collect();
    assert_eq!(got, vec![0, 1, 2, 3]);

    // The transaction's own changes, not committed: a changed field, a new
    // object, a deleted one.
    tx.update(&parts[7], |p| p.kind = "type3".into()).unwrap();
    let new = tx
        .create_in(
            "parts",
            Part {
                id: 1000,
                kind: "type3".into(),
                x: -1,
                to: Vec::new(),
            },
        )
        .unwrap();
    tx.delete(&parts[3]).unwrap();
    let found = tx.select::<Part>("parts", &type3).unwrap();
    assert!(found.contains(&parts[7]) && found.contains(&new) && !found.contains(&parts[3]));
    assert_eq!(found.len(), 11);
    assert_eq!(tx.count::<Part>("parts", &type3).unwrap(), 11);
    // A traversal from the new object's neighbour sees the change to it.
    tx.update(&new, |p| {
        p.to.push(Link {
            to: parts[40].clone(),
            length: 0,
        })
    })
    .unwrap();
    let reached = tx.traverse(&new, &["to.to"], 1).unwrap();
    assert_eq!(reached, vec![new.clone(), parts[40].clone()]);
    tx.abort().unwrap();

    // Aborted: none of it is seen.
    let mut tx = db.begin().unwrap();
    assert_eq!(tx.count::<Part>("parts", &type3).unwrap(), 10);
    tx.commit().unwrap();
    drop(db);
    site.check();
}

fn a_method_sees_no_other_transactions_uncommitted_changes(b: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let mut site = site(b, dir.path());
    let db = site.open(short_lock_timeout_opts());
    let parts = build(&db);
    let type4 = [Predicate::new("kind", Cmp::Eq, "type4")];
    // A changes part 8 and stays open.
    let mut a = db.begin().unwrap();
    a.update(&parts[8], |p| p.kind = "type4".into()).unwrap();
    // B's selection must read part 8: it waits for A's lock (here until the
    // lock timeout) rather than see A's uncommitted change.
    // Another client (embedded: another transaction of the one process).
    let embedded = matches!(
        b,
        Backend::Embedded | Backend::EmbeddedObjectLocks | Backend::EmbeddedKeyRanges
    );
    let second = (!embedded).then(|| site.open(short_lock_timeout_opts()));
    let other = second.as_ref().unwrap_or(&db);
    let mut tx = other.begin().unwrap();
    match tx.select::<Part>("parts", &type4) {
        Err(e) if e.is_retryable() => {}
        Ok(found) => panic!("a selection saw another transaction's state: {} objects", found.len()),
        Err(e) => panic!("unexpected error: {e}"),
    }
    drop(tx);
    a.abort().unwrap();
    let mut tx = other.begin().unwrap();
    let found = tx.select::<Part>("parts", &type4).unwrap();
    assert_eq!(found.len(), 10);
    assert!(!found.contains(&parts[8]));
    tx.commit().unwrap();
    drop(second);
    drop(db);
    site.check();
}

fn a_predicate_on_a_missing_field_or_of_the_wrong_kind_is_an_error(b: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let mut site = site(b, dir.path());
    let db = site.open(short_lock_timeout_opts());
    build(&db);
    let mut tx = db.begin().unwrap();
    let e = tx
        .select::<Part>("parts", &[Predicate::new("colour", Cmp::Eq, "red")])
        .unwrap_err();
    assert!(e.to_string().contains("colour"), "{e}");
    let e = tx
        .select::<Part>("parts", &[Predicate::new("kind", Cmp::Lt, 3)])
        .unwrap_err();
    assert!(e.to_string().contains("kind"), "{e}");
    let e = tx.select::<Part>("no-such-group", &[]).unwrap_err();
    assert!(e.to_string().contains("no-such-group"), "{e}");
    drop(tx);
    drop(db);
    site.check();
}
