//! Object-server sessions (DeWitt et al. §2.2): the server runs the storage
//! engine's object operations for the client, in one storage transaction
//! per client transaction that locks single objects
//! ([`Txn::set_object_locking`]), so two clients change different objects
//! of one page at the same time and each commit logs only its objects'
//! records (object-level redo). The requests are the object service's
//! ([`cairn_net::object_service`]).
//!
//! An OBJ_FETCH streams its objects as partial replies: a blocking thread
//! locks and reads them one at a time and hands each to the network side as
//! soon as it is read, so the client works on the first object while the
//! others are on their way. An object longer than [`WHOLE_OBJECT_MAX`]
//! travels as its length only; the client reads it in ranges.
//!
//! **Rights to cache.** An object read under S and sent whole (a small
//! object, not a large one: a large object's pages change without its home
//! record) comes with a right to cache it across the client's transactions
//! ([`crate::callbacks`], keyed by the object); an index lookup comes with
//! rights on the leaves that enclose its key; a page an adaptive client's
//! [`OBJ_S_PAGE`] fetch (or its read-ahead, [`OBJ_S_PAGE_AHEAD`]) gets
//! whole under the page's S lock, with a right on the page. The write-lock
//! hook calls them back before X on the object or X/SIX on its page (the
//! leaf), a page's right before any IX/X/SIX on it.

use std::sync::Arc;

use bytes::Bytes;
use cairn_net::message::{ErrorCode, Fault};
use cairn_net::object_service::{
    encode_entries, encode_fetched_batch, encode_firsts, encode_oids, Change, FetchedObject, FetchedPage,
    ObjectRequest, TreeOp, ValuesAndObjects, BATCH_OBJECTS_MAX, LOOKUP_LEAVES_MAX, NO_OID, OBJ_S_PAGE,
    OBJ_S_PAGE_AHEAD, OBJ_X, OID_BYTES,
};
use cairn_net::page_service::{encode_pages, NO_GROUP};
use cairn_net::rpc::Replier;
use cairn_storage::access::{PageAccess, Recording};
use cairn_storage::btree::BTree;
use cairn_storage::lock::{LockMode, Resource};
use cairn_storage::record::object::{small_max, ObjectSpace};
use cairn_storage::{Error, GroupId, Oid, PageId, Txn};

use crate::{fault, lock, Core, SessionState};

pub(crate) mod appends;
pub(crate) use appends::CatalogCopy;
mod pages;
#[cfg(test)]
mod tests;
mod tree;

use pages::{encode_batch, fetch_pages, fetch_pages_without_waiting, read_ahead, ImageFrom};
use tree::tree;

/// The longest object an OBJ_FETCH sends whole (1 MiB); a longer one is
/// read in ranges.
pub const WHOLE_OBJECT_MAX: u64 = 1 << 20;

fn oid_of(bytes: &[u8; OID_BYTES]) -> Oid {
    Oid::from_bytes(bytes)
}

/// Answers an object-service request of an object session.
pub(crate) async fn handle(
    core: &Arc<Core>,
    state: &Arc<SessionState>,
    req: ObjectRequest,
    reply: &Replier,
) -> Result<Bytes, Fault> {
    // One request of a transaction at a time.
    let _turn = state
        .turn_of(req.txn(), matches!(req, ObjectRequest::Abort { .. }))
        .await?;
    if let Some(answer) = snapshot_request(core, state, &req) {
        return answer.map(Bytes::from);
    }
    if let ObjectRequest::Fetch { txn, mode, oids } = req {
        if mode == OBJ_S_PAGE_AHEAD {
            // The pages in the pool here, the rest on a blocking thread.
            let mut pages: Vec<PageId> = oids.iter().map(|o| oid_of(o).page).collect();
            pages.sort_unstable();
            pages.dedup();
            let mut left = Vec::new();
            let mut whole = match read_ahead(core, state, txn, &pages, ImageFrom::Pool, &mut left) {
                Some(w) => w?,
                None => {
                    left = pages;
                    Vec::new()
                }
            };
            if !left.is_empty() {
                let (c, s) = (core.clone(), state.clone());
                let more = crate::run_blocking(core, state, move || {
                    read_ahead(&c, &s, txn, &left, ImageFrom::Disk, &mut Vec::new())
                })
                .await?;
                whole.extend(more.unwrap_or_else(|| Ok(Vec::new()))?);
            }
            return Ok(Bytes::from(encode_batch(&[], &whole)));
        }
        if mode == OBJ_S_PAGE {
            // Not streamed: the objects and their pages in one reply —
            // here on the network thread if nothing needs a wait (as a
            // page server's FETCH: a blocking thread costs more than the
            // read), else on a blocking thread.
            if let Some(answer) = fetch_pages_without_waiting(core, state, txn, &oids) {
                return answer.map(Bytes::from);
            }
            let oids = Arc::new(oids);
            let fetch = move |c: &Core, s: &SessionState| fetch_pages(c, s, txn, &oids);
            return crate::run_parking(core, state, txn, fetch).await.map(Bytes::from);
        }
        return fetch_streamed(core, state, txn, mode, oids, reply).await;
    }
    let (c, s) = (core.clone(), state.clone());
    crate::run_blocking(core, state, move || serve(&c, &s, req))
        .await?
        .map(Bytes::from)
}

/// OBJ_SNAPSHOT begins a snapshot (answered here); a snapshot's request
/// other than a read at it or its end is refused. `None`: served as usual
/// (a snapshot's reads take no lock and get no right: [`grant`],
/// `tree::leaf_rights`).
fn snapshot_request(core: &Core, state: &SessionState, req: &ObjectRequest) -> Option<Result<Vec<u8>, Fault>> {
    let txn = match req {
        ObjectRequest::Snapshot { txn } => return Some(crate::pages::begin_snapshot(core, state, *txn)),
        ObjectRequest::Abort { .. } => return None,
        req => req.txn()?,
    };
    if !state.is_snapshot(txn) {
        return None;
    }
    let allowed = match req {
        ObjectRequest::Fetch { mode, .. } => *mode == cairn_net::object_service::OBJ_S,
        ObjectRequest::ReadRange { .. }
        | ObjectRequest::TreeOpen { .. }
        | ObjectRequest::TreeGet { .. }
        | ObjectRequest::TreeRange { .. } => true,
        ObjectRequest::Commit { changes, .. } => changes.is_empty(),
        _ => false,
    };
    (!allowed).then(|| {
        Err(Fault::new(
            ErrorCode::INVALID,
            format!(
                "transaction {txn} is a read-only snapshot: it reads objects (OBJ_FETCH S, OBJ_READ_RANGE) and trees \
                 (TREE_OPEN, TREE_GET, TREE_RANGE) and ends with OBJ_ABORT"
            ),
        ))
    })
}

/// OBJ_FETCH (S or X, one part per object) on a blocking thread, each part
/// sent as it is read. An object lock that must wait parks: the thread
/// returns, the wait is awaited here without one, and the fetch goes on
/// from that object.
async fn fetch_streamed(
    core: &Arc<Core>,
    state: &Arc<SessionState>,
    txn: u64,
    mode: u8,
    oids: Vec<[u8; OID_BYTES]>,
    reply: &Replier,
) -> Result<Bytes, Fault> {
    let internal = |e: String| Fault::new(ErrorCode::INTERNAL, e);
    let oids = Arc::new(oids);
    let mut from = 0;
    loop {
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Result<Vec<u8>, Fault>>(64);
        let (c, s, o) = (core.clone(), state.clone(), oids.clone());
        let slots = (
            core.waiting.take().map_err(crate::fault)?,
            state.waiting.take().map_err(crate::fault)?,
        );
        let task = tokio::task::spawn_blocking(move || {
            let parked_at = fetch(&c, &s, txn, mode, &o[from..], &tx).map(|i| from + i);
            drop(slots);
            parked_at
        });
        while let Some(part) = rx.recv().await {
            reply.part(part?).await.map_err(|e| internal(e.to_string()))?;
        }
        let parked_at = task.await.map_err(|e| internal(format!("request task failed: {e}")))?;
        match parked_at {
            None => return Ok(Bytes::new()),
            Some(at) => {
                if !crate::await_parked(core, state, txn).await? {
                    return Err(internal(format!("the fetch of object {at} parked no lock request")));
                }
                from = at;
            }
        }
    }
}

/// OBJ_FETCH: locks (S, or X for [`OBJ_X`]) and reads each object in turn,
/// sending each part as it is read; an error is sent in place of the rest.
/// A lock that must wait is parked: the index of that object is returned,
/// nothing sent for it ([`fetch_streamed`] goes on from there). ([`OBJ_S_PAGE`]
/// is [`fetch_pages`].)
///
/// For [`OBJ_X`] (a client locking what it is about to change: its
/// prefetch for update) every X lock is taken first, in one global order
/// ([`lock_for_update_in_order`]), whatever the order the client asked
/// in; the objects are then read and sent in the order asked. A wait in
/// that first step parks before anything is sent (index 0).
fn fetch(
    core: &Core,
    state: &SessionState,
    txn: u64,
    mode: u8,
    oids: &[[u8; OID_BYTES]],
    out: &tokio::sync::mpsc::Sender<Result<Vec<u8>, Fault>>,
) -> Option<usize> {
    let t = match state.txn_or_begin(&core.db, txn) {
        Ok((_, t)) => t,
        Err(e) => {
            let _ = out.blocking_send(Err(fault(e)));
            return None;
        }
    };
    let mut t = lock(&t);
    if mode == OBJ_X {
        match crate::parking(&mut t, |t| lock_for_update_in_order(t, oids)) {
            Ok(()) => {}
            Err(Error::LockParked { .. }) => return Some(0),
            Err(e) => {
                let _ = out.blocking_send(Err(fault(e)));
                return None;
            }
        }
    }
    // A snapshot's reads: S taken for a moment by a transaction of its own
    // (`right_if_current`), made on the first object that may have a right.
    let mut locker = None;
    let page_size = t.page_size();
    for (i, o) in oids.iter().enumerate() {
        let read = crate::parking(&mut t, |t| read_one(t, oid_of(o), mode == OBJ_X));
        if matches!(read, Err(Error::LockParked { .. })) {
            return Some(i);
        }
        let part = read.map(|(len, bytes)| {
            let right = if mode == OBJ_X {
                0
            } else if t.is_snapshot() {
                right_if_current(core, state, &mut locker, page_size, oid_of(o), bytes.as_deref())
            } else {
                grant(core, state, &t, oid_of(o), &bytes)
            };
            fetched_part(o, len, bytes, right)
        });
        let failed = part.is_err();
        if out.blocking_send(part.map_err(fault)).is_err() || failed {
            return None;
        }
    }
    None
}

/// Takes X on every object of `oids` (IX on its page first, as
/// [`Txn::lock_object`] does) in OID order — page, then slot — each object
/// once, whatever the order of `oids`. The server does not rely on the
/// client's order (the client sorts too): two transactions locking the
/// same objects for update in opposite orders would otherwise each hold
/// one and wait for the other; in one order, the second waits for the
/// first object before it holds any. A lock that must wait parks
/// ([`Error::LockParked`]) holding the ones before it; run again, it finds
/// them held and goes on from there.
fn lock_for_update_in_order(t: &mut Txn, oids: &[[u8; OID_BYTES]]) -> Result<(), Error> {
    let mut ordered: Vec<Oid> = oids.iter().map(oid_of).collect();
    ordered.sort_unstable();
    ordered.dedup();
    for oid in ordered {
        t.lock_object(oid, true)?;
    }
    Ok(())
}

/// One object for a fetch: `(length, bytes)`, the bytes `None` if it is too
/// long to send whole; `(0, None)` if there is no such object.
fn read_one(t: &mut Txn, oid: Oid, exclusive: bool) -> Result<(u64, Option<Vec<u8>>), Error> {
    let locked = t.lock_object(oid, exclusive);
    let len = match locked.and_then(|()| t.len(oid)) {
        Ok(len) => len,
        Err(Error::NotFound { .. }) => return Ok((0, None)),
        Err(e) => return Err(e),
    };
    if len > WHOLE_OBJECT_MAX {
        return Ok((len, None));
    }
    let bytes = t.read(oid)?;
    // An empty object is found and whole: its length says 0, so mark it
    // found with empty bytes.
    Ok((bytes.len() as u64, Some(bytes)))
}

/// A right to cache an object just read under S (its lock is held now):
/// only a small object sent whole has one (a large object's pages change
/// without its home record, under locks on those pages), and none read at a
/// snapshot.
fn grant(core: &Core, state: &SessionState, t: &Txn, oid: Oid, bytes: &Option<Vec<u8>>) -> u64 {
    if t.is_snapshot() {
        // Read as of the snapshot, not the present: nothing to cache.
        return 0;
    }
    match bytes {
        Some(b) if b.len() <= small_max(t.page_size()) => core.callbacks.register(state.client, Resource::Object(oid)),
        _ => 0,
    }
}

/// A right to cache an object a snapshot read, when those `bytes` are the
/// object's committed version and S can be taken without waiting (by
/// `locker`, a transaction of the session's own, begun here if `None`,
/// ended with the request): as the page server's snapshot fetch does, so a
/// client that reads only at snapshots still comes to keep what it reads.
/// Only a small object whose home record is its bytes (not a forwarding
/// stub) has one. 0 otherwise.
pub(super) fn right_if_current(
    core: &Core,
    state: &SessionState,
    locker: &mut Option<Txn>,
    page_size: usize,
    oid: Oid,
    bytes: Option<&[u8]>,
) -> u64 {
    let Some(bytes) = bytes.filter(|b| b.len() <= small_max(page_size)) else {
        return 0;
    };
    let Ok(l) = momentary_locker(core, state, locker) else {
        return 0;
    };
    let mut locked = |res, mode| matches!(l.try_lock_resource(res, mode), Ok(true));
    if !locked(Resource::Page(oid.page), LockMode::IS) || !locked(Resource::Object(oid), LockMode::S) {
        return 0;
    }
    let Ok(image) = core.db.read_committed(oid.page) else {
        return 0;
    };
    match cairn_storage::record::object::home_record(&image, oid) {
        Ok(Some(range)) if image.get(range.clone()) == Some(bytes) => {
            core.callbacks.register(state.client, Resource::Object(oid))
        }
        _ => 0,
    }
}

/// The transaction of the session's own that takes a snapshot's momentary
/// locks (`right_if_current`, `tree::leaves_current`): `locker`, begun now
/// if it is `None`; it holds them until it drops, at the end of the
/// request.
pub(super) fn momentary_locker<'a>(
    core: &Core,
    state: &SessionState,
    locker: &'a mut Option<Txn>,
) -> Result<&'a mut Txn, Error> {
    match locker {
        Some(l) => Ok(l),
        None => Ok(locker.insert(core.db.begin_for(state.client)?)),
    }
}

/// The OBJ_FETCH part of what [`read_one`] read, with the right to cache it.
fn fetched_part(oid: &[u8; OID_BYTES], len: u64, bytes: Option<Vec<u8>>, right: u64) -> Vec<u8> {
    FetchedObject {
        oid: *oid,
        // An empty object is found: its bytes are `Some(empty)`.
        found: bytes.is_some() || len > 0,
        total_len: len,
        bytes: bytes.as_deref().unwrap_or(&[]),
        right,
    }
    .encode()
}

/// Every other request, on a blocking thread.
fn serve(core: &Core, state: &SessionState, req: ObjectRequest) -> Result<Vec<u8>, Fault> {
    let db = &*core.db;
    match req {
        ObjectRequest::Fetch { .. } => unreachable!("OBJ_FETCH streams (handle)"),
        ObjectRequest::Snapshot { txn } => crate::pages::begin_snapshot(core, state, txn),
        ObjectRequest::Create {
            txn,
            group,
            near,
            bytes,
        } => {
            let (_, t) = state.txn_or_begin(db, txn).map_err(fault)?;
            let mut t = lock(&t);
            let oid = if near == NO_OID {
                t.create(GroupId(group), &bytes)
            } else {
                t.create_near(oid_of(&near), &bytes)
            }
            .map_err(fault)?;
            Ok(oid.to_bytes().to_vec())
        }
        ObjectRequest::Commit { txn, changes } => commit(core, state, txn, &changes),
        ObjectRequest::Abort { txn } => {
            let t = lock(&state.txns).remove(&txn);
            drop(t);
            Ok(Vec::new())
        }
        ObjectRequest::Flush { txn, changes } => {
            let (_, t) = state.txn_or_begin(db, txn).map_err(fault)?;
            let mut t = lock(&t);
            apply(core, &mut t, &changes).map_err(fault)?;
            Ok(Vec::new())
        }
        ObjectRequest::Method { txn, method } => {
            let (_, t) = state.txn_or_begin(db, txn).map_err(fault)?;
            let mut t = lock(&t);
            let group = |name: &str| -> cairn_schema::Result<GroupId> { Ok(db.group(name)?) };
            cairn_schema::methods::serve(&mut t, &group, &method).map_err(|e| fault(e.into_storage()))
        }
        ObjectRequest::Scan { txn, group } => {
            let (_, t) = state.txn_or_begin(db, txn).map_err(fault)?;
            let oids = lock(&t).scan_all(GroupId(group)).map_err(fault)?;
            let oids: Vec<[u8; OID_BYTES]> = oids.into_iter().map(Oid::to_bytes).collect();
            Ok(encode_oids(&oids))
        }
        ObjectRequest::TreeOpen { .. }
        | ObjectRequest::TreeCreate { .. }
        | ObjectRequest::TreeApply { .. }
        | ObjectRequest::TreeGet { .. }
        | ObjectRequest::TreeGetForUpdate { .. }
        | ObjectRequest::TreeRange { .. }
        | ObjectRequest::TreeDestroy { .. } => tree(core, state, req).map_err(fault),
        ObjectRequest::ReadRange { txn, oid, offset, len } => {
            let (_, t) = state.txn_or_begin(db, txn).map_err(fault)?;
            let mut t = lock(&t);
            let oid = oid_of(&oid);
            let total = t.len(oid).map_err(fault)?;
            let n = total.saturating_sub(offset).min(u64::from(len)) as usize;
            let mut buf = vec![0u8; n];
            if n > 0 {
                t.read_range(oid, offset, &mut buf).map_err(fault)?;
            }
            Ok(buf)
        }
    }
}

/// OBJ_COMMIT: the changes applied under X locks, logged and made durable;
/// any error rolls the transaction back.
fn commit(core: &Core, state: &SessionState, txn: u64, changes: &[Change]) -> Result<Vec<u8>, Fault> {
    state.txn_or_begin(&core.db, txn).map_err(fault)?;
    // Any error drops `t`: the transaction is rolled back.
    let (mut t, _slot) = state.take_for_commit(txn, "OBJ_COMMIT")?;
    let bytes: u64 = changes.iter().map(|c| c.data_len() as u64).sum();
    if bytes > core.txn_bytes_max {
        return Err(fault(Error::LimitExceeded {
            what: "bytes of object changes in one transaction (txn_bytes_max)",
            value: bytes,
            limit: core.txn_bytes_max,
        }));
    }
    apply(core, &mut t, changes).map_err(fault)?;
    t.commit().map_err(fault)?;
    Ok(Vec::new())
}

/// Applies a client's after-images, deletions and appends
/// (`appends.rs`) in order.
fn apply(core: &Core, t: &mut Txn, changes: &[Change]) -> Result<(), Error> {
    let mut lists = None;
    for c in changes {
        match c {
            Change::Update { oid, bytes } => t.update(oid_of(oid), bytes)?,
            Change::Delete { oid } => t.delete(oid_of(oid))?,
            Change::Append {
                oid,
                class,
                field,
                elem,
                count,
                elems,
            } => {
                let lists = match &mut lists {
                    Some(l) => l,
                    None => lists.insert(appends::Lists::of(core, t)?),
                };
                let oid = oid_of(oid);
                let append = lists.append(oid, *class, field, elem, *count, elems)?;
                appends::append_to(t, oid, append)?;
            }
        }
    }
    Ok(())
}
