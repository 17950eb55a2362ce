//! Unit tests of the b-tree over `MemPages`.

use std::collections::btree_map::Entry;
use std::collections::BTreeMap;
use std::ops::Bound;

use proptest::prelude::*;

use super::node::{self, NODE_HEADER_SIZE};
use super::*;
use crate::access::testing::MemPages;
use crate::page;

const PS: usize = 4096;
const G: GroupId = GroupId::DEFAULT;

fn mem() -> MemPages {
    MemPages::new(PS)
}

/// A key that sorts like `i` and is `len` bytes long (at least 4). The
/// number is at the end, so separators cannot be shortened much.
fn key(i: u32, len: usize) -> Vec<u8> {
    let mut k = vec![b'.'; len.saturating_sub(4)];
    k.extend_from_slice(&i.to_be_bytes());
    k
}

fn level(m: &mut MemPages, t: &BTree) -> u8 {
    let root = t.root();
    with_node(m, root, |n| Ok(n.level)).unwrap()
}

fn scan(m: &mut MemPages, t: &BTree, lo: Bound<&[u8]>, hi: Bound<&[u8]>, dir: Direction) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut c = t.range(m, lo, hi, dir).unwrap();
    let mut out = Vec::new();
    while let Some(e) = c.next(m).unwrap() {
        out.push(e);
    }
    out
}

fn all(m: &mut MemPages, t: &BTree) -> Vec<(Vec<u8>, Vec<u8>)> {
    scan(m, t, Bound::Unbounded, Bound::Unbounded, Direction::Forward)
}

/// The leaves from left to right, following child 0 then the sibling links.
fn leaves(m: &mut MemPages, t: &BTree) -> Vec<PageId> {
    let mut id = t.root();
    loop {
        let (leaf, c0) = with_node(m, id, |n| Ok((n.is_leaf(), n.child0))).unwrap();
        if leaf {
            break;
        }
        id = c0;
    }
    let mut out = vec![id];
    loop {
        let next = with_node(m, id, |n| Ok(n.next)).unwrap();
        if next == PageId(0) {
            return out;
        }
        out.push(next);
        id = next;
    }
}

/// A simple deterministic shuffle (xorshift), so failures replay.
fn shuffled(n: u32, seed: u64) -> Vec<u32> {
    let mut v: Vec<u32> = (0..n).collect();
    let mut s = seed | 1;
    for i in (1..v.len()).rev() {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        v.swap(i, (s % (i as u64 + 1)) as usize);
    }
    v
}

fn assert_corrupt<T: std::fmt::Debug>(r: Result<T>) -> PageId {
    match r {
        Err(Error::Corrupt { page, .. }) => page,
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

#[test]
fn insert_get_delete_in_a_small_tree() {
    let mut m = mem();
    let t = BTree::create(&mut m, G, true).unwrap();
    assert!(t.is_unique(&mut m).unwrap());
    assert!(t.is_empty(&mut m).unwrap());
    assert_eq!(t.get(&mut m, b"a").unwrap(), None);
    assert!(t.insert(&mut m, b"b", b"2").unwrap());
    assert!(t.insert(&mut m, b"a", b"1").unwrap());
    assert!(t.insert(&mut m, b"", b"empty key").unwrap());
    assert!(t.insert(&mut m, b"c", b"").unwrap());
    assert_eq!(t.get(&mut m, b"a").unwrap(), Some(b"1".to_vec()));
    assert_eq!(t.get(&mut m, b"").unwrap(), Some(b"empty key".to_vec()));
    assert_eq!(t.get(&mut m, b"c").unwrap(), Some(Vec::new()));
    assert_eq!(t.get(&mut m, b"ab").unwrap(), None);
    assert_eq!(t.len(&mut m).unwrap(), 4);
    assert_eq!(t.delete(&mut m, b"a", Some(b"wrong")).unwrap(), 0);
    assert_eq!(t.delete(&mut m, b"a", Some(b"1")).unwrap(), 1);
    assert_eq!(t.delete(&mut m, b"b", None).unwrap(), 1);
    assert_eq!(t.delete(&mut m, b"b", None).unwrap(), 0);
    assert_eq!(t.len(&mut m).unwrap(), 2);
    t.check(&mut m).unwrap();
    let again = BTree::open(&mut m, t.root()).unwrap();
    assert_eq!(again, t);
    assert_eq!(
        all(&mut m, &again),
        vec![(b"".to_vec(), b"empty key".to_vec()), (b"c".to_vec(), vec![])]
    );
}

#[test]
fn open_refuses_a_page_that_is_not_a_root() {
    let mut m = mem();
    let t = BTree::create(&mut m, G, false).unwrap();
    for i in 0..200 {
        t.insert(&mut m, &key(i, 100), b"v").unwrap();
    }
    let leaf = leaves(&mut m, &t)[0];
    assert_eq!(assert_corrupt(BTree::open(&mut m, leaf)), leaf);
    let other = m.allocate(G, None, PageType::Slotted).unwrap();
    assert_eq!(assert_corrupt(BTree::open(&mut m, other)), other);
    // The header check a server makes before a client's tree request.
    let root_page = |m: &mut MemPages, p: PageId| m.read(p, super::is_root_page).unwrap();
    assert!(root_page(&mut m, t.root()));
    assert!(!root_page(&mut m, leaf));
    assert!(!root_page(&mut m, other));
    assert!(!super::is_root_page(&[0u8; 10]), "too short to be a page");
}

#[test]
fn splits_reach_depth_three_and_the_root_never_moves() {
    for unique in [true, false] {
        let mut m = mem();
        let t = BTree::create(&mut m, G, unique).unwrap();
        let root = t.root();
        // ~900-byte keys: four entries per node, so 300 entries need 4 levels.
        let n = 300;
        for (step, i) in shuffled(n, 7).into_iter().enumerate() {
            assert!(t.insert(&mut m, &key(i, 900), &i.to_le_bytes()).unwrap());
            assert_eq!(t.root(), root);
            if step % 37 == 0 {
                t.check(&mut m).unwrap();
            }
        }
        t.check(&mut m).unwrap();
        assert!(level(&mut m, &t) >= 3, "depth {}", level(&mut m, &t));
        assert_eq!(t.len(&mut m).unwrap(), u64::from(n));
        for i in 0..n {
            assert_eq!(t.get(&mut m, &key(i, 900)).unwrap(), Some(i.to_le_bytes().to_vec()));
        }
        let got: Vec<Vec<u8>> = all(&mut m, &t).into_iter().map(|(k, _)| k).collect();
        let want: Vec<Vec<u8>> = (0..n).map(|i| key(i, 900)).collect();
        assert_eq!(got, want);
        // Delete everything: merges and root collapses give every page back.
        for (step, i) in shuffled(n, 11).into_iter().enumerate() {
            assert_eq!(t.delete(&mut m, &key(i, 900), None).unwrap(), 1);
            if step % 29 == 0 {
                t.check(&mut m).unwrap();
            }
        }
        t.check(&mut m).unwrap();
        assert_eq!(level(&mut m, &t), 0);
        assert_eq!(m.pages.len(), 1, "only the root is left");
        assert_eq!(m.pages.keys().next(), Some(&root));
    }
}

#[test]
fn ascending_inserts_fill_pages() {
    let mut m = mem();
    let t = BTree::create(&mut m, G, true).unwrap();
    let n = 20_000u32;
    for i in 0..n {
        t.insert(&mut m, &i.to_be_bytes(), &[7; 10]).unwrap();
    }
    t.check(&mut m).unwrap();
    // 2 + 4 + 4 + 10 bytes per entry: 252 per full leaf.
    let leaf_count = leaves(&mut m, &t).len();
    let full = node::capacity(PS) / 20;
    assert!(leaf_count <= (n as usize).div_ceil(full) + 1, "{leaf_count} leaves");
}

#[test]
fn unique_and_non_unique_semantics() {
    let mut m = mem();
    let u = BTree::create(&mut m, G, true).unwrap();
    u.insert(&mut m, b"k", b"1").unwrap();
    for v in [&b"1"[..], b"2", b""] {
        match u.insert(&mut m, b"k", v) {
            Err(Error::DuplicateKey { root, key }) => {
                assert_eq!(root, u.root());
                assert_eq!(key, "\"k\"");
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(u.get_all(&mut m, b"k").unwrap(), vec![b"1".to_vec()]);

    let n = BTree::create(&mut m, G, false).unwrap();
    assert!(!n.is_unique(&mut m).unwrap());
    assert!(n.insert(&mut m, b"k", b"2").unwrap());
    assert!(n.insert(&mut m, b"k", b"1").unwrap());
    assert!(!n.insert(&mut m, b"k", b"1").unwrap());
    assert!(n.insert(&mut m, b"j", b"9").unwrap());
    assert!(n.insert(&mut m, b"l", b"0").unwrap());
    assert_eq!(n.get(&mut m, b"k").unwrap(), Some(b"1".to_vec()));
    assert_eq!(n.get_all(&mut m, b"k").unwrap(), vec![b"1".to_vec(), b"2".to_vec()]);
    assert_eq!(n.delete(&mut m, b"k", Some(b"2")).unwrap(), 1);
    assert_eq!(n.get_all(&mut m, b"k").unwrap(), vec![b"1".to_vec()]);
    assert_eq!(n.len(&mut m).unwrap(), 3);

    // Many values under one key span several leaves; delete(None) takes all.
    for i in 0..2000u32 {
        n.insert(&mut m, b"dup", &i.to_be_bytes()).unwrap();
    }
    n.check(&mut m).unwrap();
    assert!(level(&mut m, &n) >= 1);
    let vals = n.get_all(&mut m, b"dup").unwrap();
    assert_eq!(vals, (0..2000u32).map(|i| i.to_be_bytes().to_vec()).collect::<Vec<_>>());
    assert_eq!(n.delete(&mut m, b"dup", None).unwrap(), 2000);
    n.check(&mut m).unwrap();
    assert_eq!(n.len(&mut m).unwrap(), 3);
    assert_eq!(level(&mut m, &n), 0);
}

#[test]
fn duplicate_key_prints_binary_keys_in_hex() {
    let mut m = mem();
    let u = BTree::create(&mut m, G, true).unwrap();
    u.insert(&mut m, &[0, 1, 0xff], b"").unwrap();
    let e = u.insert(&mut m, &[0, 1, 0xff], b"").unwrap_err();
    assert!(e.to_string().contains("0x0001ff"), "{e}");
}

fn in_bounds(k: &[u8], lo: Bound<&[u8]>, hi: Bound<&[u8]>) -> bool {
    (match lo {
        Bound::Included(l) => k >= l,
        Bound::Excluded(l) => k > l,
        Bound::Unbounded => true,
    }) && (match hi {
        Bound::Included(h) => k <= h,
        Bound::Excluded(h) => k < h,
        Bound::Unbounded => true,
    })
}

#[test]
fn range_scans_with_every_bound_both_directions() {
    for unique in [true, false] {
        let mut m = mem();
        let t = BTree::create(&mut m, G, unique).unwrap();
        let mut model = Vec::new();
        for i in 0..600u32 {
            let k = key(i * 2, 60);
            let copies = if unique { 1 } else { 1 + i % 3 };
            for c in 0..copies {
                t.insert(&mut m, &k, &[c as u8; 3]).unwrap();
                model.push((k.clone(), vec![c as u8; 3]));
            }
        }
        model.sort();
        t.check(&mut m).unwrap();
        assert!(level(&mut m, &t) >= 1);
        // Bounds on present keys, absent keys, and outside the whole range.
        let probes: Vec<Vec<u8>> = vec![
            Vec::new(),
            key(0, 60),
            key(1, 60),
            key(300, 60),
            key(301, 60),
            key(777, 60),
            key(1198, 60),
            key(5000, 60),
            key(300, 59),
        ];
        let kinds =
            |k: &[u8]| -> Vec<Bound<Vec<u8>>> { vec![Bound::Included(k.to_vec()), Bound::Excluded(k.to_vec())] };
        let mut bounds: Vec<Bound<Vec<u8>>> = vec![Bound::Unbounded];
        for p in &probes {
            bounds.extend(kinds(p));
        }
        for lo in &bounds {
            for hi in &bounds {
                let (lo, hi) = (lo.as_ref().map(Vec::as_slice), hi.as_ref().map(Vec::as_slice));
                let want: Vec<_> = model.iter().filter(|(k, _)| in_bounds(k, lo, hi)).cloned().collect();
                assert_eq!(scan(&mut m, &t, lo, hi, Direction::Forward), want, "{lo:?}..{hi:?}");
                let mut back = want.clone();
                back.reverse();
                assert_eq!(
                    scan(&mut m, &t, lo, hi, Direction::Backward),
                    back,
                    "{lo:?}..{hi:?} backward"
                );
            }
        }
    }
}

#[test]
fn a_cursor_continues_after_the_tree_changes_under_it() {
    let mut m = mem();
    let t = BTree::create(&mut m, G, true).unwrap();
    for i in 0..400u32 {
        t.insert(&mut m, &key(i * 10, 200), b"v").unwrap();
    }
    for dir in [Direction::Forward, Direction::Backward] {
        let mut c = t.range(&mut m, Bound::Unbounded, Bound::Unbounded, dir).unwrap();
        let mut seen = Vec::new();
        for _ in 0..100 {
            seen.push(c.next(&mut m).unwrap().unwrap().0);
        }
        // Reshape the tree: remove a lot (merges free the cursor's leaf),
        // add keys on both sides of the cursor.
        let last = seen.last().unwrap().clone();
        for i in 0..400u32 {
            let k = key(i * 10, 200);
            if i % 3 != 0 {
                t.delete(&mut m, &k, None).unwrap();
            }
            let _ = t.insert(&mut m, &key(i * 10 + 5, 200), b"new");
        }
        t.check(&mut m).unwrap();
        let mut rest = Vec::new();
        while let Some((k, _)) = c.next(&mut m).unwrap() {
            rest.push(k);
        }
        let mut want: Vec<Vec<u8>> = all(&mut m, &t).into_iter().map(|(k, _)| k).collect();
        match dir {
            Direction::Forward => want.retain(|k| *k > last),
            Direction::Backward => {
                want.retain(|k| *k < last);
                want.reverse();
            }
        }
        assert_eq!(rest, want, "{dir:?}");
        assert_eq!(c.next(&mut m).unwrap(), None);
    }
}

#[test]
fn bulk_load_builds_a_full_tree_that_then_takes_changes() {
    for unique in [true, false] {
        let mut m = mem();
        let n = 5000u32;
        let entries: Vec<(Vec<u8>, Vec<u8>)> = (0..n)
            .flat_map(|i| {
                let copies = if unique { 1 } else { 1 + i % 2 };
                (0..copies).map(move |c| (key(i, 40), vec![c as u8; 10]))
            })
            .collect();
        let t = BTree::bulk_load(&mut m, G, unique, entries.clone()).unwrap();
        t.check(&mut m).unwrap();
        assert!(t.is_unique(&mut m).unwrap() == unique);
        assert!(level(&mut m, &t) >= 2);
        assert_eq!(all(&mut m, &t), entries);
        // Pages are ~90 % full: 56 bytes per entry.
        let per_leaf = node::capacity(PS) * bulk::FILL_PERCENT / 100 / 56;
        let leaf_count = leaves(&mut m, &t).len();
        assert!(leaf_count <= entries.len().div_ceil(per_leaf), "{leaf_count}");
        let mut model: BTreeMap<(Vec<u8>, Vec<u8>), ()> = entries.into_iter().map(|e| (e, ())).collect();
        for i in shuffled(n, 3).into_iter().take(3000) {
            if i % 2 == 0 {
                let removed = t.delete(&mut m, &key(i, 40), None).unwrap();
                let before = model.len();
                model.retain(|(k, _), _| *k != key(i, 40));
                assert_eq!(removed, before - model.len());
            } else if !unique {
                let v = vec![9u8; 10];
                assert!(t.insert(&mut m, &key(i, 40), &v).unwrap());
                model.insert((key(i, 40), v), ());
            }
            let k = key(n + i, 40);
            t.insert(&mut m, &k, b"x").unwrap();
            model.insert((k, b"x".to_vec()), ());
        }
        t.check(&mut m).unwrap();
        let want: Vec<_> = model.into_keys().collect();
        assert_eq!(all(&mut m, &t), want);
    }
}

#[test]
fn bulk_load_edge_cases() {
    let mut m = mem();
    let t = BTree::bulk_load(&mut m, G, true, Vec::new()).unwrap();
    t.check(&mut m).unwrap();
    assert_eq!(t.len(&mut m).unwrap(), 0);
    t.insert(&mut m, b"a", b"").unwrap();
    let one = BTree::bulk_load(&mut m, G, false, vec![(b"x".to_vec(), b"y".to_vec())]).unwrap();
    assert_eq!(all(&mut m, &one), vec![(b"x".to_vec(), b"y".to_vec())]);

    let before = m.pages.len();
    let sorted_but_dup = (0..3000u32).map(|i| (key(i.min(2500), 20), vec![]));
    match BTree::bulk_load(&mut m, G, true, sorted_but_dup) {
        Err(Error::DuplicateKey { .. }) => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(m.pages.len(), before, "pages of a failed bulk load are given back");
    let unsorted = (0..3000u32).map(|i| (key(if i == 2000 { 5 } else { i }, 20), vec![]));
    assert!(matches!(
        BTree::bulk_load(&mut m, G, false, unsorted),
        Err(Error::InvalidArgument(_))
    ));
    let repeated_pair = vec![(b"a".to_vec(), b"1".to_vec()), (b"a".to_vec(), b"1".to_vec())];
    assert!(matches!(
        BTree::bulk_load(&mut m, G, false, repeated_pair),
        Err(Error::InvalidArgument(_))
    ));
    let too_big = vec![(vec![1; 10], vec![]), (vec![2; key_value_max(PS) + 1], vec![])];
    assert!(matches!(
        BTree::bulk_load(&mut m, G, false, too_big),
        Err(Error::LimitExceeded { .. })
    ));
    assert_eq!(m.pages.len(), before);
    // Largest entries: four per node.
    let big = (0..500u32).map(|i| (key(i, key_value_max(PS) - 1), vec![i as u8]));
    let t = BTree::bulk_load(&mut m, G, true, big).unwrap();
    t.check(&mut m).unwrap();
    assert_eq!(t.len(&mut m).unwrap(), 500);
}

#[test]
fn destroy_frees_every_page() {
    let mut m = mem();
    let keep = BTree::create(&mut m, G, true).unwrap();
    keep.insert(&mut m, b"keep", b"me").unwrap();
    let t = BTree::create(&mut m, G, false).unwrap();
    for i in 0..3000u32 {
        t.insert(&mut m, &key(i, 50), b"value").unwrap();
    }
    assert!(m.pages.len() > 40);
    t.destroy(&mut m).unwrap();
    assert_eq!(m.pages.len(), 1);
    keep.check(&mut m).unwrap();
    let b = BTree::bulk_load(&mut m, G, true, (0..3000u32).map(|i| (key(i, 50), vec![]))).unwrap();
    b.destroy(&mut m).unwrap();
    assert_eq!(m.pages.len(), 1);
}

#[test]
fn entries_over_the_limit_are_refused_and_change_nothing() {
    let mut m = mem();
    let max = key_value_max(PS);
    assert_eq!(max, 1000);
    assert_eq!(key_value_max(65536), 16360);
    let t = BTree::create(&mut m, G, false).unwrap();
    let before = m.modify_count;
    match t.insert(&mut m, &vec![1; max - 9], &[2; 10]) {
        Err(Error::LimitExceeded { value, limit, .. }) => assert_eq!((value, limit), (1001, 1000)),
        other => panic!("{other:?}"),
    }
    assert_eq!(m.modify_count, before);
    // Entries of exactly the limit split down to four per node.
    for i in 0..100u32 {
        t.insert(&mut m, &key(i, max - 2), &[i as u8, 0]).unwrap();
    }
    t.check(&mut m).unwrap();
    assert_eq!(t.len(&mut m).unwrap(), 100);
}

#[test]
fn sixty_four_kib_pages_work() {
    let mut m = MemPages::new(65536);
    let t = BTree::create(&mut m, G, true).unwrap();
    for i in shuffled(3000, 5) {
        t.insert(&mut m, &key(i, 5000), b"v").unwrap();
    }
    t.check(&mut m).unwrap();
    assert!(level(&mut m, &t) >= 2);
    for i in 0..3000 {
        assert_eq!(t.delete(&mut m, &key(i, 5000), None).unwrap(), 1);
    }
    t.check(&mut m).unwrap();
    assert_eq!(m.pages.len(), 1);
}

// ---- damage ----

fn damaged_tree() -> (MemPages, BTree) {
    let mut m = mem();
    let t = BTree::create(&mut m, G, false).unwrap();
    for i in 0..200u32 {
        t.insert(&mut m, &key(i, 300), b"v").unwrap();
    }
    t.check(&mut m).unwrap();
    assert!(level(&mut m, &t) >= 2);
    (m, t)
}

/// Every read-side operation on a damaged tree returns (Corrupt or not) and
/// never panics.
fn poke(m: &mut MemPages, t: &BTree) {
    let _ = t.check(m);
    let _ = t.len(m);
    let _ = t.get(m, &key(50, 300));
    let _ = t.get_all(m, &key(150, 300));
    for dir in [Direction::Forward, Direction::Backward] {
        if let Ok(mut c) = t.range(m, Bound::Unbounded, Bound::Unbounded, dir) {
            for _ in 0..10_000 {
                match c.next(m) {
                    Ok(Some(_)) => {}
                    _ => break,
                }
            }
        }
    }
}

#[test]
fn check_catches_swapped_keys() {
    let (mut m, t) = damaged_tree();
    let leaf = leaves(&mut m, &t)[1];
    let p = m.pages.get_mut(&leaf).unwrap();
    let (a, b) = (NODE_HEADER_SIZE, NODE_HEADER_SIZE + 2);
    let (x, y) = (p[a..a + 2].to_vec(), p[b..b + 2].to_vec());
    p[a..a + 2].copy_from_slice(&y);
    p[b..b + 2].copy_from_slice(&x);
    assert_eq!(assert_corrupt(t.check(&mut m)), leaf);
    assert_eq!(assert_corrupt(check_page(&m.pages[&leaf])), leaf);
    poke(&mut m, &t);
}

#[test]
fn check_catches_keys_outside_their_separators() {
    let (mut m, t) = damaged_tree();
    // Move a whole leaf's contents one leaf over: each page is fine alone.
    let ls = leaves(&mut m, &t);
    let (a, b) = (ls[1], ls[4]);
    let img = m.pages[&a].clone();
    let p = m.pages.get_mut(&b).unwrap();
    let (links, own_id) = (p[36..44].to_vec(), p[4..8].to_vec());
    p.copy_from_slice(&img);
    p[36..44].copy_from_slice(&links);
    p[4..8].copy_from_slice(&own_id);
    check_page(&m.pages[&b]).unwrap();
    assert_eq!(assert_corrupt(t.check(&mut m)), b);
    poke(&mut m, &t);
}

#[test]
fn check_catches_a_bad_sibling_link() {
    let (mut m, t) = damaged_tree();
    let ls = leaves(&mut m, &t);
    let id = ls[2];
    let to = ls[5];
    m.modify(id, |b| node::set_next(b, id, to)).unwrap();
    assert_eq!(assert_corrupt(t.check(&mut m)), id);
    check_page(&m.pages[&id]).unwrap();
    // A forward scan notices the next leaf does not link back.
    let mut c = t
        .range(&mut m, Bound::Unbounded, Bound::Unbounded, Direction::Forward)
        .unwrap();
    let err = loop {
        match c.next(&mut m) {
            Ok(Some(_)) => {}
            Ok(None) => panic!("scan ended over a broken chain"),
            Err(e) => break e,
        }
    };
    assert_eq!(err.page(), Some(to));
    // A consistent cycle of two leaves cannot make a scan loop either.
    let (x, y) = (ls[0], ls[1]);
    m.modify(y, |b| node::set_next(b, y, x)).unwrap();
    m.modify(x, |b| node::set_prev(b, x, y)).unwrap();
    poke(&mut m, &t);
    assert_corrupt(t.len(&mut m));
}

#[test]
fn check_catches_a_bad_child_pointer() {
    for target in ["leaf", "missing", "self", "root"] {
        let (mut m, t) = damaged_tree();
        let root = t.root();
        let to = match target {
            "leaf" => leaves(&mut m, &t)[0],
            "missing" => PageId(9999),
            "self" => root,
            _ => root,
        };
        let child = with_node(&mut m, root, |n| n.child(1)).unwrap();
        // Point the root's second child elsewhere (for "root", the child's own child).
        let at = if target == "root" { child } else { root };
        let p = m.pages.get_mut(&at).unwrap();
        let off = usize::from(u16::from_le_bytes([p[NODE_HEADER_SIZE], p[NODE_HEADER_SIZE + 1]]));
        p[off + 4..off + 8].copy_from_slice(&to.0.to_le_bytes());
        let bad = assert_corrupt(t.check(&mut m));
        assert!([root, child, to].contains(&bad), "{target}: {bad}");
        poke(&mut m, &t);
        let _ = t.insert(&mut m, &key(1000, 300), b"x");
        let _ = t.delete(&mut m, &key(120, 300), None);
    }
}

#[test]
fn check_catches_a_wrong_level_and_a_leaked_root_flag() {
    let (mut m, t) = damaged_tree();
    let root = t.root();
    m.pages.get_mut(&root).unwrap()[24] += 1;
    assert_corrupt(t.check(&mut m));
    poke(&mut m, &t);
    let (mut m, t) = damaged_tree();
    let leaf = leaves(&mut m, &t)[3];
    m.pages.get_mut(&leaf).unwrap()[25] = node::FLAG_ROOT;
    assert_eq!(assert_corrupt(t.check(&mut m)), leaf);
    assert_corrupt(t.get(&mut m, &key(99, 300)).and_then(|_| t.check(&mut m)));
}

// ---- garbage and random damage never panic ----

#[expect(clippy::too_many_arguments, reason = "one argument per header field under test")]
fn plausible_page(
    id: u32,
    ty: u8,
    lvl: u8,
    flags: u8,
    count: u16,
    heap: u32,
    garbage: u32,
    links: [u32; 3],
    body: &[u8],
) -> Vec<u8> {
    let mut b = vec![0u8; PS];
    page::format(&mut b, PageId(id), PageType::BTreeLeaf);
    b[16] = ty;
    b[NODE_HEADER_SIZE..].copy_from_slice(&body[..PS - NODE_HEADER_SIZE]);
    b[24] = lvl;
    b[25] = flags;
    b[26..28].copy_from_slice(&count.to_le_bytes());
    b[28..32].copy_from_slice(&heap.to_le_bytes());
    b[32..36].copy_from_slice(&garbage.to_le_bytes());
    for (i, l) in links.iter().enumerate() {
        b[36 + 4 * i..40 + 4 * i].copy_from_slice(&l.to_le_bytes());
    }
    b
}

fn poke_all(m: &mut MemPages, t: &BTree) {
    poke(m, t);
    let _ = t.is_unique(m);
    let _ = t.insert(m, b"key", b"value");
    let _ = t.insert(m, &[0xff; 300], &[1; 300]);
    let _ = t.delete(m, b"key", None);
    let _ = t.delete(m, &key(3, 4), Some(b"v"));
    for (lo, hi) in [(Bound::Included(&b"a"[..]), Bound::Excluded(&b"z"[..]))] {
        for dir in [Direction::Forward, Direction::Backward] {
            if let Ok(mut c) = t.range(m, lo, hi, dir) {
                for _ in 0..1000 {
                    if !matches!(c.next(m), Ok(Some(_))) {
                        break;
                    }
                }
            }
        }
    }
    let _ = t.destroy(m);
}

fn cases(default: u32) -> u32 {
    std::env::var("CAIRN_PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

// ---- model tests ----

#[derive(Clone, Debug)]
enum Op {
    Insert(Vec<u8>, Vec<u8>),
    Delete(Vec<u8>, Option<Vec<u8>>),
    Get(Vec<u8>),
    Range(Bound<Vec<u8>>, Bound<Vec<u8>>, Direction),
    Check,
}

/// Keys of 0..200 bytes, skewed to share prefixes (so separators truncate
/// and many keys repeat).
fn key_strategy() -> impl Strategy<Value = Vec<u8>> {
    let prefixes: Vec<Vec<u8>> = vec![
        Vec::new(),
        b"k".to_vec(),
        b"key/".to_vec(),
        vec![b'x'; 60],
        vec![b'y'; 150],
        vec![0; 20],
    ];
    (
        prop::sample::select(prefixes),
        prop::collection::vec(prop::sample::select(vec![0u8, b'a', b'b', 0xff]), 0..6),
        prop_oneof![4 => Just(0usize), 1 => 0usize..60],
    )
        .prop_map(|(mut p, s, pad)| {
            p.extend(s);
            p.extend(vec![b'z'; pad]);
            p.truncate(200);
            p
        })
}

/// Keys of 400..590 bytes that differ only in their last few bytes, so
/// separators stay long and inner nodes hold few: deep trees from few entries.
fn long_key_strategy() -> impl Strategy<Value = Vec<u8>> {
    (
        prop::sample::select(vec![540usize, 560, 580]),
        prop::collection::vec(prop::sample::select(vec![0u8, b'a', b'b', 0xff]), 0..8),
    )
        .prop_map(|(len, s)| {
            let mut k = vec![b'p'; len];
            k.extend(s);
            k.truncate(590);
            k
        })
}

fn value_strategy() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        8 => prop::collection::vec(prop::sample::select(vec![b'0', b'1']), 0..3),
        1 => prop::collection::vec(any::<u8>(), 0..400),
    ]
}

fn bound_strategy() -> impl Strategy<Value = Bound<Vec<u8>>> {
    prop_oneof![
        1 => Just(Bound::Unbounded),
        2 => key_strategy().prop_map(Bound::Included),
        2 => key_strategy().prop_map(Bound::Excluded),
    ]
}

fn op_strategy() -> impl Strategy<Value = Op> {
    op_strategy_with(key_strategy().boxed())
}

fn op_strategy_with(keys: BoxedStrategy<Vec<u8>>) -> impl Strategy<Value = Op> {
    prop_oneof![
        12 => (keys.clone(), value_strategy()).prop_map(|(k, v)| Op::Insert(k, v)),
        5 => (keys.clone(), prop::option::of(value_strategy())).prop_map(|(k, v)| Op::Delete(k, v)),
        3 => keys.prop_map(Op::Get),
        2 => (bound_strategy(), bound_strategy(), prop::sample::select(vec![Direction::Forward, Direction::Backward]))
            .prop_map(|(lo, hi, d)| Op::Range(lo, hi, d)),
        1 => Just(Op::Check),
    ]
}

fn as_ref(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    b.as_ref().map(Vec::as_slice)
}

/// The model: a set of pairs (a unique tree is a set with distinct keys).
fn run_model(unique: bool, ops: &[Op]) {
    let mut m = mem();
    let t = BTree::create(&mut m, G, unique).unwrap();
    let mut model: BTreeMap<(Vec<u8>, Vec<u8>), ()> = BTreeMap::new();
    let mut uniq: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    for (i, op) in ops.iter().enumerate() {
        match op {
            Op::Insert(k, v) => {
                let r = t.insert(&mut m, k, v);
                if unique {
                    match uniq.entry(k.clone()) {
                        Entry::Occupied(_) => assert!(matches!(r, Err(Error::DuplicateKey { .. })), "{r:?}"),
                        Entry::Vacant(e) => {
                            assert!(r.unwrap());
                            e.insert(v.clone());
                        }
                    }
                } else {
                    assert_eq!(r.unwrap(), model.insert((k.clone(), v.clone()), ()).is_none());
                }
            }
            Op::Delete(k, v) => {
                let n = t.delete(&mut m, k, v.as_deref()).unwrap();
                let want = if unique {
                    match (uniq.get(k), v) {
                        (Some(have), Some(v)) if have != v => 0,
                        (Some(_), _) => {
                            uniq.remove(k);
                            1
                        }
                        (None, _) => 0,
                    }
                } else {
                    let before = model.len();
                    match v {
                        Some(v) => {
                            model.remove(&(k.clone(), v.clone()));
                        }
                        None => model.retain(|(mk, _), _| mk != k),
                    }
                    before - model.len()
                };
                assert_eq!(n, want);
            }
            Op::Get(k) => {
                let want: Vec<Vec<u8>> = if unique {
                    uniq.get(k).cloned().into_iter().collect()
                } else {
                    model.keys().filter(|(mk, _)| mk == k).map(|(_, v)| v.clone()).collect()
                };
                assert_eq!(t.get(&mut m, k).unwrap(), want.first().cloned());
                assert_eq!(t.get_all(&mut m, k).unwrap(), want);
            }
            Op::Range(lo, hi, dir) => {
                let (lo, hi) = (as_ref(lo), as_ref(hi));
                let mut want: Vec<(Vec<u8>, Vec<u8>)> = if unique {
                    uniq.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
                } else {
                    model.keys().cloned().collect()
                };
                want.retain(|(k, _)| in_bounds(k, lo, hi));
                if *dir == Direction::Backward {
                    want.reverse();
                }
                assert_eq!(scan(&mut m, &t, lo, hi, *dir), want);
            }
            Op::Check => t.check(&mut m).unwrap(),
        }
        if i % 8 == 7 {
            t.check(&mut m).unwrap();
        }
    }
    t.check(&mut m).unwrap();
    let n = if unique { uniq.len() } else { model.len() };
    assert_eq!(t.len(&mut m).unwrap(), n as u64);
    let pages = m.pages.len();
    t.destroy(&mut m).unwrap();
    assert!(m.pages.is_empty(), "destroy freed {pages} pages");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(64), ..ProptestConfig::default() })]

    #[test]
    fn non_unique_tree_matches_model(ops in prop::collection::vec(op_strategy(), 1..400)) {
        run_model(false, &ops);
    }

    #[test]
    fn unique_tree_matches_model(ops in prop::collection::vec(op_strategy(), 1..400)) {
        run_model(true, &ops);
    }

    #[test]
    fn deep_non_unique_tree_matches_model(
        ops in prop::collection::vec(op_strategy_with(long_key_strategy().boxed()), 1..800),
    ) {
        run_model(false, &ops);
    }

    #[test]
    fn deep_unique_tree_matches_model(
        ops in prop::collection::vec(op_strategy_with(long_key_strategy().boxed()), 1..800),
    ) {
        run_model(true, &ops);
    }

    #[test]
    fn garbage_pages_are_corrupt_never_a_panic(
        body in prop::collection::vec(any::<u8>(), PS - NODE_HEADER_SIZE),
        ty in prop::sample::select(vec![8u8, 9, 5, 0]),
        lvl in 0u8..3,
        flags in 0u8..4,
        count in 0u16..300,
        heap in prop_oneof![Just(PS as u32), 3000u32..4200, any::<u32>()],
        garbage in 0u32..300,
        links in [0u32..5, 0u32..5, 0u32..5],
        sparse in any::<bool>(),
    ) {
        let mut body = body;
        if sparse {
            // Small slot offsets and lengths land inside the page more often.
            for (i, b) in body.iter_mut().enumerate() {
                if i % 2 == 1 { *b &= 0x0f; }
            }
        }
        let img = plausible_page(1, ty, lvl, flags, count, heap, garbage, links, &body);
        let _ = check_page(&img);
        let _ = check_page(&img[..100]);
        let _ = check_page(&[]);
        let mut m = mem();
        // Pages 1..=4: the garbage root and a few more garbage pages it may point to.
        for id in 1..=4u32 {
            let mut p = img.clone();
            p[4..8].copy_from_slice(&id.to_le_bytes());
            if id > 1 {
                p[25] = 0;
                p[24] = lvl.saturating_sub(1);
                p[16] = if p[24] == 0 { 8 } else { 9 };
            }
            m.pages.insert(PageId(id), p);
        }
        m.next = 5;
        let t = BTree { root: PageId(1) };
        let _ = BTree::open(&mut m, PageId(1));
        poke_all(&mut m, &t);
    }

    #[test]
    fn random_damage_to_a_valid_tree_is_never_a_panic(
        seed in any::<u64>(),
        damage in prop::collection::vec((any::<usize>(), 0usize..PS, any::<u8>()), 1..8),
        unique in any::<bool>(),
    ) {
        let mut m = mem();
        let t = BTree::create(&mut m, G, unique).unwrap();
        for i in shuffled(300, seed) {
            t.insert(&mut m, &key(i, 20 + (i as usize * 7) % 200), &[i as u8; 3]).unwrap();
        }
        t.check(&mut m).unwrap();
        let ids: Vec<PageId> = m.pages.keys().copied().collect();
        for (k, (which, pos, v)) in damage.iter().enumerate() {
            let id = ids[which % ids.len()];
            // Aim half of the damage at the node header and slot directory.
            let pos = if k % 2 == 0 { 24 + pos % 120 } else { *pos };
            m.pages.get_mut(&id).unwrap()[pos] = *v;
        }
        for id in &ids {
            let _ = check_page(&m.pages[id]);
        }
        poke_all(&mut m, &t);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(24)))]

    /// Every entry of a key that could ever be added lands in one of the
    /// leaves that enclose the key, and those leaves hold all its entries:
    /// what an object server's cached lookups rely on.
    #[test]
    fn a_keys_entries_stay_within_the_leaves_that_enclose_it(
        entries in proptest::collection::vec((0u32..40, 0u32..1000), 1..400),
        probes in proptest::collection::vec(0u32..1000, 1..8),
    ) {
        let mut m = mem();
        let t = BTree::create(&mut m, G, false).unwrap();
        let value = |v: u32| {
            let mut b = vec![7u8; 150];
            b.extend_from_slice(&v.to_be_bytes());
            b
        };
        for (k, v) in &entries {
            t.insert(&mut m, &key(*k, 8), &value(*v)).unwrap();
        }
        for k in 0..41u32 {
            let k = key(k, 8);
            let Some((enclosing, count)) = t.leaves_enclosing(&mut m, &k, 64).unwrap() else {
                continue;
            };
            prop_assert_eq!(count, t.get_all(&mut m, &k).unwrap().len());
            for p in &probes {
                let v = value(*p);
                let (target, _) = t.find_leaf(&mut m, Target::Pair(&k, &v)).unwrap();
                prop_assert!(enclosing.contains(&target), "a new entry of {:?} goes to {} outside {:?}", k, target, enclosing);
            }
        }
    }
}
