//! The object server's OBJ_FETCH X takes its X locks in one global order
//! (OID order), whatever the order the client asked in.
//!
//! Deterministic without threads: the server's lock waits park
//! ([`Txn::set_parking`]), so "the second transaction waits" is an
//! answer of `fetch`, not a thread to watch.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use cairn_net::object_service::{FetchedObject, OBJ_X};
use cairn_storage::lock::{LockMode, LockOwner, Resource};
use cairn_storage::{ClientId, Db, DbOptions, GroupId, Oid};

use super::{fetch, OID_BYTES};
use crate::{lock, Core, PageServer, ServerConfig, SessionState};

/// An object session of `client` (its transactions lock single objects).
fn object_session(client: ClientId, core: &Core) -> SessionState {
    SessionState {
        client,
        peer: "test".into(),
        txns: Mutex::new(HashMap::new()),
        notifier: OnceLock::new(),
        file: false,
        object: true,
        role: crate::users::Role::Admin,
        restriction: cairn_storage::Restriction::default(),
        txns_bound: core.txns.clone(),
        waiting: crate::bounds::Bound::new("test waiting requests", 64),
        unwritten: Mutex::default(),
        turns: Mutex::default(),
    }
}

/// Runs OBJ_FETCH X of `oids` for the session's transaction 1: where it
/// parked (`Some(index)`) or `None` (done), and the OIDs of the parts sent,
/// in order.
fn fetch_x(core: &Core, state: &SessionState, oids: &[Oid]) -> (Option<usize>, Vec<Oid>) {
    let asked: Vec<[u8; OID_BYTES]> = oids.iter().map(|o| o.to_bytes()).collect();
    let (tx, mut rx) = tokio::sync::mpsc::channel(64);
    let parked = fetch(core, state, 1, OBJ_X, &asked, &tx);
    drop(tx);
    let mut sent = Vec::new();
    while let Ok(part) = rx.try_recv() {
        let part = part.expect("a part, not an error");
        sent.push(Oid::from_bytes(&FetchedObject::decode(&part).unwrap().oid));
    }
    (parked, sent)
}

fn owner_of(state: &SessionState) -> LockOwner {
    lock(&state.txn(1).expect("the session's transaction 1")).owner()
}

/// Ends the session's transaction 1 with a commit (it changed nothing).
fn commit(state: &SessionState) {
    let entry = lock(&state.txns).remove(&1).expect("transaction 1 is open");
    let txn = Arc::try_unwrap(entry.txn).expect("nobody else uses it");
    txn.into_inner().unwrap().commit().unwrap();
}

/// Two transactions lock the same two objects for update, asking in
/// opposite orders. The server takes each one's X locks in OID order, so
/// the second waits for the first object before it holds the other —
/// where, asking "b, a" and locking in that order, it would hold b while
/// the first asks for b: a deadlock. Both commit; no deadlock is counted.
/// The parts still come in the order asked.
#[test]
fn an_x_fetch_locks_in_oid_order_whatever_the_order_asked() {
    let dir = tempfile::tempdir().unwrap();
    let opts = DbOptions {
        background: false,
        ..DbOptions::default()
    };
    let db = Arc::new(Db::create(dir.path(), &opts).unwrap());
    let mut setup = db.begin().unwrap();
    let mut made = [
        setup.create(GroupId::DEFAULT, b"first").unwrap(),
        setup.create(GroupId::DEFAULT, b"second").unwrap(),
    ];
    setup.commit().unwrap();
    made.sort_unstable();
    let [a, b] = made;
    let server = PageServer::new(db.clone(), &ServerConfig::default());
    let core = &*server.core;
    let one = object_session(ClientId(1), core);
    let two = object_session(ClientId(2), core);

    // 1 locks a.
    assert_eq!(fetch_x(core, &one, &[a]), (None, vec![a]));
    // 2 asks for b, then a: it waits (parked) for a first, holding nothing.
    assert_eq!(fetch_x(core, &two, &[b, a]), (Some(0), vec![]));
    let x = |o: Oid| Resource::Object(o);
    assert!(
        !db.holds_lock(owner_of(&two), &x(b), LockMode::X),
        "b is not held while a is waited for"
    );
    // 1 asks for b, then a (the other order): granted, no wait.
    assert_eq!(fetch_x(core, &one, &[b, a]), (None, vec![b, a]));
    commit(&one);
    // 2's wait was granted when 1 ended; run again, the fetch completes.
    let t2 = two.txn(1).unwrap();
    let parked = lock(&t2).take_parked().expect("2 parked a lock");
    let request = parked.request();
    assert_eq!(request, (x(a), LockMode::X));
    let outcome = parked.time_out();
    lock(&t2).finish_parked(request, outcome).unwrap();
    drop(t2);
    assert_eq!(fetch_x(core, &two, &[b, a]), (None, vec![b, a]));
    assert!(db.holds_lock(owner_of(&two), &x(b), LockMode::X));
    commit(&two);

    let locks = db.stats().locks;
    assert_eq!((locks.deadlocks, locks.timeouts, locks.waits), (0, 0, 1), "{locks:?}");
}
