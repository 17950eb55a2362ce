//! Unit tests of the rights state (`object/rights.rs`).

use super::*;

fn oid(n: u32) -> Oid {
    Oid::from_bytes(&[n as u8, 0, 0, 0, 1, 0, 0, 0, 0, 0])
}

/// A right called back before it arrived is not taken; a newer one is.
#[test]
fn revoked_rights_are_refused_and_newer_ones_taken() {
    let mut st = RightsState::default();
    let k = Resource::Object(oid(1));
    st.revoked.revoke(k, 7);
    assert!(st.take_right(k, 7, None), "no fetch in flight: nothing was remembered");
    let mut st = RightsState::default();
    st.revoked().fetch_started_for_tests();
    st.revoked.revoke(k, 7);
    assert!(!st.take_right(k, 7, None));
    assert!(!st.take_right(k, 0, None), "0 is no right");
    assert!(st.take_right(k, 8, None));
    assert!(st.take_right(k, 7, None), "the newer right replaced what was revoked");
    // While a transaction of this client changes the object (or the
    // leaf, or has a change of its tree on the way), no right to it is
    // taken in.
    st.txns.entry(TxnId(5)).or_default().writes.insert(k);
    assert!(!st.take_right(k, 9, None));
    st.txns.entry(TxnId(5)).or_default().trees.insert(PageId(3));
    assert!(!st.take_right(Resource::Page(PageId(40)), 9, Some(PageId(3))));
    assert!(st.take_right(Resource::Page(PageId(40)), 9, Some(PageId(4))));
    st.txns
        .entry(TxnId(5))
        .or_default()
        .writes
        .insert(Resource::Page(PageId(41)));
    assert!(!st.take_right(Resource::Page(PageId(41)), 9, Some(PageId(4))));
}

/// Readers are named once each, never the writer itself nor an ending
/// transaction; dropping a leaf drops its lookups.
#[test]
fn readers_are_named_and_leaves_take_their_lookups_along() {
    let mut st = RightsState::default();
    let k = Resource::Object(oid(2));
    for (t, ending) in [(1u64, false), (2, false), (3, true)] {
        let v = st.txns.entry(TxnId(t)).or_default();
        v.reads.insert(k);
        v.answering.ending = ending;
    }
    let mut named = st.name_readers(k, TxnId(1));
    named.sort_unstable();
    assert_eq!(named, vec![TxnId(2)]);
    assert!(st.txns[&TxnId(2)].answering.on_server);
    assert!(!st.txns[&TxnId(1)].answering.on_server);
    let leaf = |p| Resource::Page(PageId(p));
    let gap = Resource::Gap(PageId(3), 77);
    let root = PageId(3);
    st.lookups.keep(root, b"a", &[(leaf(9), 4)], vec![vec![1]], 0);
    st.lookups
        .keep(root, b"b", &[(leaf(8), 4), (leaf(9), 4)], vec![vec![2]], 0);
    st.lookups.keep(root, b"c", &[(leaf(10), 4)], vec![vec![3]], 0);
    st.lookups
        .keep(root, b"d", &[(gap, 5), (Resource::TreeEnd(root), 5)], vec![vec![4]], 0);
    assert_eq!(st.held(gap), Some(5));
    assert_eq!(st.drop_key(leaf(9)), Some(4));
    assert_eq!(st.lookups.len(), 2);
    assert_eq!(st.drop_key(leaf(9)), None);
    // A gap's right goes with the lookups kept under it, and nothing else.
    assert_eq!(st.drop_key(gap), Some(5));
    assert_eq!(st.held(gap), None);
    assert!(st.lookups.get(root, b"c").is_some());
    assert_eq!(st.lookups.len(), 1);
}

/// A callback of a right's renewed epoch that overtakes the reply renewing
/// it drops the right held, and the renewal is refused when it comes: the
/// client answered "dropped", so the server no longer counts it. (Taken in,
/// its bytes would be kept with nothing to call them back.)
#[test]
fn a_renewal_overtaken_by_its_callback_is_refused() {
    let k = Resource::Object(oid(3));
    let mut st = RightsState::default();
    let c = st.new_entry(5, Arc::from(&b"old"[..]));
    st.objects.insert(oid(3), c);
    let rights = crate::remote::rights::Rights::new(st);
    let flight = rights.fetch();
    // The server renewed the right as epoch 6 and called 6 back.
    assert!(rights.called_back(k, 6).is_empty());
    assert!(!rights.lock().objects.contains_key(&oid(3)), "the right held goes");
    assert!(!rights.lock().take_right(k, 6, None), "the renewal is refused");
    assert!(rights.lock().take_right(k, 7, None), "a later grant is taken");
    drop(flight);
    // A callback of an older epoch leaves a newer right alone.
    let mut st = RightsState::default();
    let c = st.new_entry(9, Arc::from(&b"new"[..]));
    st.objects.insert(oid(3), c);
    let rights = crate::remote::rights::Rights::new(st);
    assert!(rights.called_back(k, 8).is_empty());
    assert!(rights.lock().objects.contains_key(&oid(3)));
}

/// A transaction that wrote an object ends: a reply in flight granting a
/// right to that object (read before the commit, under a lock held for one
/// request) is refused, since the client's own writer called nothing back.
#[test]
fn a_right_in_flight_to_what_an_ended_transaction_wrote_is_refused() {
    let k = Resource::Object(oid(4));
    let other = Resource::Object(oid(5));
    let mut st = RightsState::default();
    st.revoked().fetch_started_for_tests();
    st.txns.entry(TxnId(1)).or_default().writes.insert(k);
    assert!(!st.take_right(k, 3, None), "written now");
    assert!(st.forget_txn(TxnId(1)).is_some());
    assert!(
        !st.take_right(k, 3, None),
        "written by a transaction that ended while it was in flight"
    );
    assert!(st.take_right(other, 3, None));
}
