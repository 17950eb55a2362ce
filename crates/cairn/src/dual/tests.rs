//! The dual buffer against a model: every strategy, any sequence of
//! access / modify / commit / abort / another client's commit / clear,
//! under page locks as the typed layer takes them.

use std::collections::{BTreeMap, HashMap};

use proptest::prelude::{any, prop_oneof, proptest, Just, ProptestConfig};
use proptest::strategy::Strategy as Gen;

use super::*;

const PAGE: usize = 256;
const PAGES: u32 = 10;
const PER_PAGE: u16 = 4;

/// The store under the buffer: committed records by page, and each
/// transaction's flushed (private) changes. Images carry a tiny directory
/// so `locate` finds records by slot.
#[derive(Clone, Debug, Default)]
struct Store {
    committed: BTreeMap<Oid, Vec<u8>>,
    private: HashMap<u64, BTreeMap<Oid, Vec<u8>>>,
    loads: u64,
}

fn oid(page: u32, slot: u16) -> Oid {
    Oid {
        page: PageId(page),
        slot: cairn_storage::SlotIdx(slot),
        uniq: cairn_storage::Uniq(1),
    }
}

impl Store {
    fn new() -> Store {
        let mut s = Store::default();
        for p in 0..PAGES {
            for k in 0..PER_PAGE {
                s.committed
                    .insert(oid(p, k), vec![(p * 16 + u32::from(k)) as u8; 8 + usize::from(k) * 6]);
            }
        }
        s
    }

    fn image(&self, page: PageId) -> Vec<u8> {
        let recs: Vec<(&Oid, &Vec<u8>)> = self.committed.iter().filter(|(o, _)| o.page == page).collect();
        let mut img = vec![0u8; PAGE];
        img[0] = recs.len() as u8;
        let mut at = 1 + recs.len() * 3;
        for (i, (o, b)) in recs.iter().enumerate() {
            img[1 + i * 3] = o.slot.0 as u8;
            img[2 + i * 3] = at as u8;
            img[3 + i * 3] = b.len() as u8;
            img[at..at + b.len()].copy_from_slice(b);
            at += b.len();
        }
        assert!(at <= PAGE);
        img
    }
}

impl Backing for Store {
    fn load(&mut self, page: PageId) -> Result<Arc<[u8]>> {
        self.loads += 1;
        Ok(Arc::from(self.image(page)))
    }

    fn locate(&mut self, image: &[u8], oid: Oid) -> Result<Option<Range<usize>>> {
        let n = usize::from(image[0]);
        for i in 0..n {
            if u16::from(image[1 + i * 3]) == oid.slot.0 {
                let at = usize::from(image[2 + i * 3]);
                return Ok(Some(at..at + usize::from(image[3 + i * 3])));
            }
        }
        Ok(None)
    }

    fn flush_object(&mut self, owner: u64, oid: Oid, bytes: &[u8]) -> Result<()> {
        self.private.entry(owner).or_default().insert(oid, bytes.to_vec());
        Ok(())
    }
}

#[derive(Clone, Debug)]
enum Op {
    Access {
        owner: u64,
        page: u32,
        slot: u16,
    },
    Modify {
        owner: u64,
        page: u32,
        slot: u16,
        len: u8,
        fill: u8,
    },
    /// The owner deletes the object: the buffer is told, and the record
    /// goes from its private pages (here: becomes empty).
    Delete {
        owner: u64,
        page: u32,
        slot: u16,
    },
    Commit {
        owner: u64,
    },
    Abort {
        owner: u64,
    },
    /// Another client commits a change to one object of `page` (no
    /// transaction here holds a lock on it): the page is called back.
    Remote {
        page: u32,
        slot: u16,
        fill: u8,
    },
    Clear,
}

fn op() -> impl Gen<Value = Op> {
    let owner = 0u64..3;
    let page = 0..PAGES;
    let slot = 0..PER_PAGE;
    prop_oneof![
        8 => (owner.clone(), page.clone(), slot.clone()).prop_map(|(owner, page, slot)| Op::Access { owner, page, slot }),
        3 => (owner.clone(), page.clone(), slot.clone(), 4u8..30, any::<u8>())
            .prop_map(|(owner, page, slot, len, fill)| Op::Modify { owner, page, slot, len, fill }),
        1 => (owner.clone(), page.clone(), slot.clone()).prop_map(|(owner, page, slot)| Op::Delete { owner, page, slot }),
        1 => owner.clone().prop_map(|owner| Op::Commit { owner }),
        1 => owner.prop_map(|owner| Op::Abort { owner }),
        1 => (page, slot, any::<u8>()).prop_map(|(page, slot, fill)| Op::Remote { page, slot, fill }),
        1 => Just(Op::Clear),
    ]
}

/// The model: committed values, each transaction's changes, its locks.
#[derive(Default)]
struct Model {
    committed: BTreeMap<Oid, Vec<u8>>,
    changes: HashMap<u64, BTreeMap<Oid, Vec<u8>>>,
    /// Page → (S holders, X holder).
    locks: HashMap<PageId, (Vec<u64>, Option<u64>)>,
}

impl Model {
    fn can_read(&self, owner: u64, page: PageId) -> bool {
        self.locks.get(&page).is_none_or(|(_, x)| x.is_none_or(|x| x == owner))
    }

    fn can_write(&self, owner: u64, page: PageId) -> bool {
        self.locks
            .get(&page)
            .is_none_or(|(s, x)| x.is_none_or(|x| x == owner) && s.iter().all(|t| *t == owner))
    }

    fn lock(&mut self, owner: u64, page: PageId, x: bool) {
        let l = self.locks.entry(page).or_default();
        if x {
            l.1 = Some(owner);
        } else if !l.0.contains(&owner) {
            l.0.push(owner);
        }
    }

    fn end(&mut self, owner: u64) {
        for l in self.locks.values_mut() {
            l.0.retain(|t| *t != owner);
            if l.1 == Some(owner) {
                l.1 = None;
            }
        }
        self.changes.remove(&owner);
    }

    fn sees(&self, owner: u64, o: Oid) -> &Vec<u8> {
        self.changes
            .get(&owner)
            .and_then(|c| c.get(&o))
            .unwrap_or(&self.committed[&o])
    }
}

fn run(strategy: Strategy, budget_pages: usize, ops: &[Op]) {
    let mut store = Store::new();
    let mut model = Model {
        committed: store.committed.clone(),
        ..Model::default()
    };
    let mut buf = DualBuffer::new(DualConfig::pages(budget_pages, PAGE, strategy)).unwrap();
    let mut checked: HashMap<Oid, Vec<u8>> = HashMap::new();
    for (i, op) in ops.iter().enumerate() {
        match *op {
            Op::Access { owner, page, slot } => {
                let o = oid(page, slot);
                if !model.can_read(owner, o.page) {
                    continue;
                }
                model.lock(owner, o.page, false);
                let got = buf.access(owner, o, &mut store).unwrap();
                let want = model.sees(owner, o);
                match got {
                    Some(l) => {
                        let bytes = &l.bytes[l.range.clone()];
                        assert_eq!(bytes, &want[..], "op {i}: {op:?}");
                        // A check noted on committed bytes holds for exactly
                        // those bytes.
                        match l.checked {
                            Some(_) => assert_eq!(checked.get(&o).map(|b| &b[..]), Some(bytes), "op {i}: stale check"),
                            None if bytes == &model.committed[&o][..] => {
                                buf.note_checked(o, crate::view::CheckedAs { class: 1, version: 0 });
                                checked.insert(o, bytes.to_vec());
                            }
                            None => {}
                        }
                    }
                    None => {
                        // Only its own flushed change is read elsewhere.
                        let own = store.private.get(&owner).and_then(|p| p.get(&o));
                        assert_eq!(own, Some(want), "op {i}: {op:?}: not found, not flushed either");
                    }
                }
            }
            Op::Modify {
                owner,
                page,
                slot,
                len,
                fill,
            } => {
                let o = oid(page, slot);
                if !model.can_write(owner, o.page) {
                    continue;
                }
                model.lock(owner, o.page, true);
                let bytes = vec![fill; usize::from(len)];
                model.changes.entry(owner).or_default().insert(o, bytes.clone());
                buf.modify(owner, o, Arc::from(bytes), &mut store).unwrap();
            }
            Op::Delete { owner, page, slot } => {
                let o = oid(page, slot);
                if !model.can_write(owner, o.page) {
                    continue;
                }
                model.lock(owner, o.page, true);
                buf.discard(owner, o).unwrap();
                store.private.entry(owner).or_default().insert(o, Vec::new());
                model.changes.entry(owner).or_default().insert(o, Vec::new());
            }
            Op::Commit { owner } => {
                buf.flush_for_commit(owner, &mut store).unwrap();
                // Everything it changed is in its private pages now.
                let private = store.private.remove(&owner).unwrap_or_default();
                let changes = model.changes.get(&owner).cloned().unwrap_or_default();
                assert_eq!(private, changes, "op {i}: flushed for commit");
                store.committed.extend(private);
                buf.committed(owner);
                model.committed.extend(changes);
                model.end(owner);
                assert_eq!(store.committed, model.committed, "op {i}: committed state");
            }
            Op::Abort { owner } => {
                buf.abort(owner);
                store.private.remove(&owner);
                model.end(owner);
            }
            Op::Remote { page, slot, fill } => {
                let o = oid(page, slot);
                if model
                    .locks
                    .get(&o.page)
                    .is_some_and(|(s, x)| !s.is_empty() || x.is_some())
                {
                    continue;
                }
                let len = store.committed[&o].len();
                store.committed.insert(o, vec![fill; len]);
                model.committed.insert(o, vec![fill; len]);
                buf.invalidate_page(o.page);
            }
            Op::Clear => buf.clear(),
        }
        buf.check_invariants();
        let s = buf.stats();
        assert!(s.bytes as usize <= budget_pages * PAGE, "op {i}: over budget: {s:?}");
        // A flush's page fault is the transaction reading the page it
        // changes, not a load into the buffer.
        assert_eq!(
            s.page_faults,
            store.loads + s.flush_page_faults,
            "op {i}: page faults counted"
        );
    }
    // Whatever is left commits: nothing is lost.
    for owner in 0..3 {
        buf.flush_for_commit(owner, &mut store).unwrap();
        let private = store.private.remove(&owner).unwrap_or_default();
        assert_eq!(private, model.changes.get(&owner).cloned().unwrap_or_default());
        store.committed.extend(private.clone());
        model.committed.extend(private);
        buf.committed(owner);
        model.end(owner);
        buf.check_invariants();
    }
    assert_eq!(store.committed, model.committed);
}

fn strategy() -> impl Gen<Value = Strategy> {
    (0..Strategy::ALL.len(), prop_oneof![Just(0.6), Just(0.2), Just(2.0)]).prop_map(|(i, r)| Strategy {
        overlap_ratio: r,
        ..Strategy::ALL[i]
    })
}

fn cases() -> u32 {
    std::env::var("CAIRN_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn every_strategy_keeps_one_authoritative_version_within_budget(
        s in strategy(),
        budget in 4usize..9,
        ops in proptest::collection::vec(op(), 1..160),
    ) {
        run(s, budget, &ops);
    }
}

/// A sequence of objects scattered one per page, reread: LOC keeps them
/// as copies when their pages go, NOC faults the pages again.
#[test]
fn lazy_copying_keeps_scattered_objects_that_pages_alone_lose() {
    let hot: Vec<Oid> = (0..PAGES).map(|p| oid(p, 0)).collect();
    let mut faults = HashMap::new();
    for s in [Strategy::NOC, Strategy::LOC_ERL, Strategy::EOC_LRL] {
        let mut store = Store::new();
        let mut buf = DualBuffer::new(DualConfig::pages(5, PAGE, s)).unwrap();
        for _ in 0..3 {
            for o in &hot {
                let l = buf.access(0, *o, &mut store).unwrap().unwrap();
                assert_eq!(&l.bytes[l.range], &store.committed[o][..]);
            }
            buf.check_invariants();
        }
        faults.insert(s.name(), buf.stats());
    }
    let noc = faults["NOC"];
    let loc = faults["LOC/ERL"];
    let eoc = faults["EOC/LRL"];
    assert_eq!(noc.page_faults, 30, "NOC refaults every page: {noc:?}");
    assert_eq!(loc.page_faults, 10, "LOC faults each page once: {loc:?}");
    assert_eq!(eoc.page_faults, 10, "{eoc:?}");
    assert!(
        loc.objects_copied > 0 && loc.objects_copied < eoc.objects_copied,
        "{loc:?} {eoc:?}"
    );
    assert_eq!(eoc.objects_copied, 10);
}

/// ERL gives copies up when their page comes back; LRL keeps duplicates.
#[test]
fn eager_relocation_leaves_no_duplicates_and_lazy_does() {
    for (s, dups) in [(Strategy::LOC_ERL, false), (Strategy::LOC_LRL, true)] {
        let mut store = Store::new();
        let mut buf = DualBuffer::new(DualConfig::pages(4, PAGE, s)).unwrap();
        let a = oid(0, 1);
        buf.access(0, a, &mut store).unwrap();
        // Push page 0 out (its object is copied), then read a neighbour.
        for p in 1..PAGES {
            buf.access(0, oid(p, 2), &mut store).unwrap();
            buf.access(0, a, &mut store).unwrap();
        }
        let before = buf.stats();
        assert!(before.objects_copied > 0, "{s:?}: {before:?}");
        buf.access(0, oid(0, 3), &mut store).unwrap();
        let after = buf.stats();
        buf.check_invariants();
        assert_eq!(after.duplicates > 0, dups, "{}: {after:?}", s.name());
        assert_eq!(after.relocations > before.relocations, !dups, "{}: {after:?}", s.name());
    }
}

/// A late update waits as a modified copy and reaches the transaction
/// (faulting its page back) at commit; an early one is written through.
#[test]
fn late_updates_are_flushed_at_commit_early_ones_at_once() {
    let mut store = Store::new();
    let mut buf = DualBuffer::new(DualConfig::pages(4, PAGE, Strategy::LOC_LRL)).unwrap();
    let a = oid(0, 0);
    buf.access(7, a, &mut store).unwrap();
    buf.modify(7, a, Arc::from(vec![1u8; 5]), &mut store).unwrap();
    assert_eq!(store.private[&7][&a], vec![1u8; 5], "early: written through");
    assert!(
        buf.access(7, a, &mut store).unwrap().is_none(),
        "read from its own pages"
    );
    let b = oid(1, 0);
    buf.access(7, b, &mut store).unwrap();
    for p in 2..PAGES {
        buf.access(7, oid(p, 1), &mut store).unwrap();
        buf.access(7, b, &mut store).unwrap();
    }
    assert!(!buf.resident(b.page), "page 1 was displaced, {b} copied");
    buf.modify(7, b, Arc::from(vec![2u8; 9]), &mut store).unwrap();
    assert!(!store.private[&7].contains_key(&b), "late: held as a modified copy");
    let l = buf.access(7, b, &mut store).unwrap().unwrap();
    assert_eq!(&l.bytes[l.range], &[2u8; 9]);
    let other = buf.access(8, b, &mut store).unwrap().unwrap();
    assert_eq!(
        &other.bytes[other.range],
        &store.committed[&b][..],
        "others read committed state"
    );
    let faults = buf.stats().page_faults;
    buf.flush_for_commit(7, &mut store).unwrap();
    assert_eq!(store.private[&7][&b], vec![2u8; 9]);
    let s = buf.stats();
    assert!(s.flush_page_faults >= 1 && s.page_faults > faults, "{s:?}");
    buf.committed(7);
    buf.check_invariants();
    assert!(buf.stats().pages_flushed >= 2);
}

#[test]
fn strategy_names_parse_back() {
    for s in Strategy::ALL {
        assert_eq!(Strategy::parse(&s.name()).unwrap(), s);
    }
    assert_eq!(Strategy::parse("loc").unwrap(), Strategy::LOC_ERL);
    assert_eq!(Strategy::parse("eoc").unwrap(), Strategy::EOC_LRL);
    let e = Strategy::parse("LRU").unwrap_err().to_string();
    assert!(e.contains("LRU"), "{e}");
    assert!(DualBuffer::new(DualConfig::pages(3, PAGE, Strategy::NOC)).is_err());
}

/// Under ERL a relocated object still in the object segment is copied
/// again when its page goes again, though it was not used in between.
#[test]
fn eager_relocation_copies_a_relocated_object_again() {
    let mut store = Store::new();
    let mut buf = DualBuffer::new(DualConfig::pages(4, PAGE, Strategy::LOC_ERL)).unwrap();
    let a = oid(0, 1);
    let push_out = |buf: &mut DualBuffer, store: &mut Store| {
        for p in 1..PAGES {
            buf.access(0, oid(p, 2), store).unwrap();
            buf.access(0, a, store).unwrap();
        }
    };
    buf.access(0, a, &mut store).unwrap();
    push_out(&mut buf, &mut store);
    assert!(!buf.resident(a.page));
    buf.access(0, oid(0, 3), &mut store).unwrap();
    let reloaded = buf.stats();
    assert!(reloaded.relocations > 0, "{reloaded:?}");
    // Page 0 out again (other objects fault their pages in), `a` never
    // touched while it was in.
    for p in 1..PAGES {
        buf.access(0, oid(p, 0), &mut store).unwrap();
    }
    assert!(!buf.resident(a.page), "{:?}", buf.stats());
    let faults = buf.stats().page_faults;
    let l = buf.access(0, a, &mut store).unwrap().unwrap();
    assert!(!l.in_page, "read from its copy");
    assert_eq!(buf.stats().page_faults, faults, "no page fault for a copied object");
    assert_eq!(&l.bytes[l.range], &store.committed[&a][..]);
    buf.check_invariants();
}
