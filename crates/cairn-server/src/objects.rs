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
    encode_entries, encode_fetched_batch, encode_oids, Change, FetchedObject, FetchedPage, ObjectRequest, RightKey,
    TreeOp, ValuesAndObjects, BATCH_OBJECTS_MAX, LOOKUP_LEAVES_MAX, NO_OID, OBJ_S_PAGE, OBJ_S_PAGE_AHEAD, OBJ_X,
    OID_BYTES,
};
use cairn_net::page_service::{encode_pages, NO_GROUP};
use cairn_net::rpc::Replier;
use cairn_storage::access::{PageAccess, Recording};
use cairn_storage::btree::{BTree, Direction};
use cairn_storage::lock::{LockMode, Resource};
use cairn_storage::record::object::{small_max, ObjectSpace};
use cairn_storage::{Error, GroupId, Oid, PageId, Txn};

use crate::callbacks::key_of;
use crate::{fault, lock, Core, SessionState};

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
    if let ObjectRequest::Release { rights } = req {
        // In memory only: here on the network thread, as the page
        // server's RELEASE (a blocking thread would cost more than it).
        give_back(core, state, rights);
        return Ok(Bytes::new());
    }
    // One request of a transaction at a time.
    let _turn = state
        .turn_of(req.txn(), matches!(req, ObjectRequest::Abort { .. }))
        .await?;
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

/// OBJ_RELEASE: the client gave these rights up.
fn give_back(core: &Core, state: &SessionState, rights: Vec<(RightKey, u64)>) {
    let rights: Vec<_> = rights.into_iter().map(|(k, e)| (key_of(k), e)).collect();
    core.callbacks.give_back(state.client, &rights);
}

/// OBJ_FETCH: locks (S, or X for [`OBJ_X`]) and reads each object in turn,
/// sending each part as it is read; an error is sent in place of the rest.
/// A lock that must wait is parked: the index of that object is returned,
/// nothing sent for it ([`fetch_streamed`] goes on from there). ([`OBJ_S_PAGE`]
/// is [`fetch_pages`].)
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
    for (i, o) in oids.iter().enumerate() {
        let read = crate::parking(&mut t, |t| read_one(t, oid_of(o), mode == OBJ_X));
        if matches!(read, Err(Error::LockParked { .. })) {
            return Some(i);
        }
        let part = read.map(|(len, bytes)| {
            let right = if mode == OBJ_X {
                0
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

/// [`fetch_pages`] if it needs no wait: every page named in the server's
/// buffer pool and not changed by this transaction, every object named a
/// small one stored whole there and lockable S at once. `None` otherwise
/// (the locks taken by then are what [`fetch_pages`] takes first anyway).
fn fetch_pages_without_waiting(
    core: &Core,
    state: &SessionState,
    txn: u64,
    oids: &[[u8; OID_BYTES]],
) -> Option<Result<Vec<u8>, Fault>> {
    let t = match state.txn_or_begin(&core.db, txn) {
        Ok((_, t)) => t,
        Err(e) => return Some(Err(fault(e))),
    };
    let mut t = t.try_lock().ok()?;
    let max = small_max(t.page_size());
    let named: Vec<Oid> = oids.iter().map(oid_of).collect();
    let mut pages: Vec<PageId> = named.iter().map(|o| o.page).collect();
    pages.sort_unstable();
    pages.dedup();
    for &page in &pages {
        if t.has_private_copy(page) {
            return None;
        }
    }
    if let [page] = pages[..] {
        match page_whole(core, state, &mut t, &named, page, ImageFrom::Pool) {
            Whole::Goes(parts, whole) => return Some(Ok(encode_batch(&parts, &[whole]))),
            Whole::Failed(e) => return Some(Err(fault(e))),
            // Read from the disk on a blocking thread, the page whole
            // still (no object locks taken here first for nothing).
            Whole::NotInPool => return None,
            Whole::Cannot => {}
        }
    }
    for &oid in &named {
        let locked = t
            .try_lock_resource(Resource::Page(oid.page), LockMode::IS)
            .and_then(|ok| Ok(ok && t.try_lock_resource(Resource::Object(oid), LockMode::S)?));
        match locked {
            Ok(true) => {}
            Ok(false) => return None,
            Err(e) => return Some(Err(fault(e))),
        }
    }
    // The images once the objects are locked: a commit before the locks
    // is in them, none can come after.
    let mut images = std::collections::HashMap::with_capacity(pages.len());
    for &page in &pages {
        match t.try_committed_page_image(page) {
            Ok(Some(image)) => images.insert(page, image),
            Ok(None) => return None,
            Err(e) => return Some(Err(fault(e))),
        };
    }
    let mut reads = Vec::with_capacity(named.len());
    for &oid in &named {
        let mut bytes = None;
        let listed = cairn_storage::record::object::image_objects(oid.page, &images[&oid.page], |o, b| {
            if o == oid && b.len() <= max {
                bytes = Some(b.to_vec());
            }
        });
        if let Err(e) = listed {
            return Some(Err(fault(e)));
        }
        // Moved, large, padded or gone: the slow path says which.
        let bytes = bytes?;
        reads.push((oid, bytes.len() as u64, Some(bytes)));
    }
    Some(page_batch(core, state, &mut t, reads).map_err(fault))
}

/// Where [`one_page_whole`] may read the page's image from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ImageFrom {
    /// The buffer pool only (the network thread: no disk read).
    Pool,
    /// The pool, or the disk into the pool (a blocking-pool thread).
    Disk,
}

/// The common case of OBJ_S_PAGE: the objects named all on `page`, not
/// changed by this transaction, the page lockable S at once (and in the
/// pool for [`ImageFrom::Pool`]), each named object a small one stored
/// whole in its home slot, and a right to the page to be had — then the
/// page goes whole and the named objects' bytes come from its image (the
/// page's lock covers them): one lock and one read, as a page server's
/// FETCH. `None` otherwise (the page lock taken by then is what the slower
/// paths take anyway).
fn one_page_whole(
    core: &Core,
    state: &SessionState,
    t: &mut Txn,
    named: &[Oid],
    page: PageId,
    from: ImageFrom,
) -> Option<Result<Vec<u8>, Fault>> {
    match page_whole(core, state, t, named, page, from) {
        Whole::Goes(parts, whole) => Some(Ok(encode_batch(&parts, &[whole]))),
        Whole::Failed(e) => Some(Err(fault(e))),
        Whole::NotInPool | Whole::Cannot => None,
    }
}

/// What [`page_whole`] found.
enum Whole {
    /// The page goes whole: the named objects' parts (no right of their
    /// own) and the page under a right.
    Goes(Vec<Vec<u8>>, WholePage),
    /// The page could go but is not in the pool ([`ImageFrom::Pool`]): a
    /// blocking thread may read it from the disk.
    NotInPool,
    /// It cannot go whole now (changed by this transaction, not lockable S
    /// at once, not an object page, a named object not whole in its home
    /// slot, or no right to be had): the slower path says why.
    Cannot,
    /// Reading it failed.
    Failed(Error),
}

/// [`one_page_whole`]'s work: the named objects' parts and the page whole
/// under a right, if the page is an object page that can go whole now.
fn page_whole(core: &Core, state: &SessionState, t: &mut Txn, named: &[Oid], page: PageId, from: ImageFrom) -> Whole {
    if t.has_private_copy(page) {
        return Whole::Cannot;
    }
    match t.try_lock_resource(Resource::Page(page), LockMode::S) {
        Ok(true) => {}
        Ok(false) => return Whole::Cannot,
        Err(e) => return Whole::Failed(e),
    }
    let image = match from {
        ImageFrom::Pool => t.try_committed_page_image(page),
        ImageFrom::Disk => t.committed_page_image(page).map(|i| i.map(|i| i.to_vec())),
    };
    let image = match image {
        Ok(Some(image)) => image,
        // (Past the volume's end answers `None` from the disk too.)
        Ok(None) if from == ImageFrom::Pool && page.0 < t.page_count() => return Whole::NotInPool,
        Ok(None) => return Whole::Cannot,
        Err(e) => return Whole::Failed(e),
    };
    if cairn_storage::page::page_type(&image) != Some(cairn_storage::page::PageType::Slotted) {
        return Whole::Cannot;
    }
    let mut parts = Vec::with_capacity(named.len());
    for &oid in named {
        // Moved, padded, large, gone or damaged: the slower path says which.
        let Some(range) = cairn_storage::record::object::home_record(&image, oid).ok().flatten() else {
            return Whole::Cannot;
        };
        let bytes = image[range].to_vec();
        parts.push(fetched_part(&oid.to_bytes(), bytes.len() as u64, Some(bytes), 0));
    }
    let right = core.callbacks.register(state.client, Resource::Page(page));
    if right == 0 {
        return Whole::Cannot;
    }
    Whole::Goes(parts, (page, right, image))
}

/// OBJ_FETCH in [`OBJ_S_PAGE_AHEAD`]: each page named that can go whole
/// without a wait ([`page_whole`]), from the pool on the network thread
/// (`from` [`ImageFrom::Pool`]; `None` if the transaction is busy) or
/// from the disk too on a blocking thread; with `left`, the pages the pool
/// did not have. A page that cannot go is left out.
fn read_ahead(
    core: &Core,
    state: &SessionState,
    txn: u64,
    pages: &[PageId],
    from: ImageFrom,
    left: &mut Vec<PageId>,
) -> Option<Result<Vec<WholePage>, Fault>> {
    let t = match state.txn_or_begin(&core.db, txn) {
        Ok((_, t)) => t,
        Err(e) => return Some(Err(fault(e))),
    };
    let mut t = match from {
        ImageFrom::Pool => t.try_lock().ok()?,
        ImageFrom::Disk => lock(&t),
    };
    let mut whole = Vec::with_capacity(pages.len());
    for &page in pages {
        match page_whole(core, state, &mut t, &[], page, from) {
            Whole::Goes(_, w) => whole.push(w),
            Whole::Failed(e) => return Some(Err(fault(e))),
            Whole::NotInPool => left.push(page),
            Whole::Cannot => {}
        }
    }
    Some(Ok(whole))
}

/// OBJ_FETCH in [`OBJ_S_PAGE`]: the named objects locked S and read, then
/// per page named its other objects ([`neighbours`]), all in one reply
/// body ([`encode_fetched_batch`]): a page of objects costs the client one
/// message, as a page server's page does.
fn fetch_pages(core: &Core, state: &SessionState, txn: u64, oids: &[[u8; OID_BYTES]]) -> Result<Vec<u8>, Fault> {
    let (_, t) = state.txn_or_begin(&core.db, txn).map_err(fault)?;
    let mut t = lock(&t);
    let named: Vec<Oid> = oids.iter().map(oid_of).collect();
    if let Some(&first) = named.first() {
        if named.iter().all(|o| o.page == first.page) {
            if let Some(answer) = one_page_whole(core, state, &mut t, &named, first.page, ImageFrom::Disk) {
                return answer;
            }
        }
    }
    let mut reads = Vec::with_capacity(oids.len());
    for o in oids {
        // A lock wait parks (`run_parking` runs this again then).
        let (len, bytes) = crate::parking(&mut t, |t| read_one(t, oid_of(o), false)).map_err(fault)?;
        reads.push((oid_of(o), len, bytes));
    }
    page_batch(core, state, &mut t, reads).map_err(fault)
}

/// The [`OBJ_S_PAGE`] reply: the objects named, read and locked S by the
/// caller (`reads`: OID, length, bytes if sent whole), then per page named
/// its other objects or the page whole ([`add_neighbours`]). A named
/// object on a page sent whole has no right of its own: the client reads
/// it from the image across transactions.
fn page_batch(
    core: &Core,
    state: &SessionState,
    t: &mut Txn,
    reads: Vec<(Oid, u64, Option<Vec<u8>>)>,
) -> Result<Vec<u8>, Error> {
    let named: Vec<Oid> = reads.iter().map(|r| r.0).collect();
    let (mut more, mut pages) = (Vec::new(), Vec::new());
    add_neighbours(core, state, t, &named, &mut more, &mut pages)?;
    let mut parts = Vec::with_capacity(reads.len() + more.len());
    for (oid, len, bytes) in reads {
        let right = if pages.iter().any(|(p, _, _)| *p == oid.page) {
            0
        } else {
            grant(core, state, t, oid, &bytes)
        };
        parts.push(fetched_part(&oid.to_bytes(), len, bytes, right));
    }
    parts.extend(more);
    Ok(encode_batch(&parts, &pages))
}

/// A page sent whole in an [`OBJ_S_PAGE`] reply: (page, right, image).
type WholePage = (PageId, u64, Vec<u8>);

/// The [`OBJ_S_PAGE`] reply: the objects' parts and the pages sent whole.
fn encode_batch(parts: &[Vec<u8>], pages: &[WholePage]) -> Vec<u8> {
    let pages: Vec<FetchedPage<'_>> = pages
        .iter()
        .map(|(page, right, image)| FetchedPage {
            page: page.0,
            right: *right,
            image,
        })
        .collect();
    encode_fetched_batch(parts, &pages)
}

/// Appends to `parts` the other objects of every page `named` names (their
/// parts follow those of the named), page by page ([`neighbours`]), or to
/// `whole` the page whole. They are optional: past the reply's bound the
/// rest stay behind (read through their own OIDs if wanted).
fn add_neighbours(
    core: &Core,
    state: &SessionState,
    t: &mut Txn,
    named: &[Oid],
    parts: &mut Vec<Vec<u8>>,
    whole: &mut Vec<WholePage>,
) -> Result<(), Error> {
    let mut pages: Vec<PageId> = named.iter().map(|o| o.page).collect();
    pages.sort_unstable();
    pages.dedup();
    let named: std::collections::HashSet<Oid> = named.iter().copied().collect();
    for page in pages {
        let room = BATCH_OBJECTS_MAX.saturating_sub(named.len() + parts.len());
        match neighbours(core, state, t, page, &named, room)? {
            Neighbours::Objects(more) => parts.extend(more),
            Neighbours::Page(right, image) => whole.push((page, right, image)),
        }
    }
    Ok(())
}

/// What [`neighbours`] sends of a page.
enum Neighbours {
    /// Its other objects' parts, each with its own right.
    Objects(Vec<Vec<u8>>),
    /// The page whole, with a right to cache it (its objects are read in
    /// place by the client).
    Page(u64, Vec<u8>),
}

/// [`OBJ_S_PAGE`]: the other small objects of `page` (not in `named`).
/// If the page's S lock needs no wait it covers them all (hierarchical
/// locking, as a page server's lock does) and the page goes whole, under a
/// right on the page that any writer of another client calls back (its IX
/// or X on the page); else each object is locked S if that needs no wait
/// (one in another transaction's way is skipped: the client reads it
/// through its own OID when it wants it), at most `room` of them, encoded
/// as OBJ_FETCH parts with a right to cache each.
fn neighbours(
    core: &Core,
    state: &SessionState,
    t: &mut Txn,
    page: PageId,
    named: &std::collections::HashSet<Oid>,
    room: usize,
) -> Result<Neighbours, Error> {
    // The page S if no writer is on it (one lock covers its objects, as a
    // page server's does; hierarchical locking), else each object S that
    // needs no wait.
    let page_locked = t.try_lock_resource(Resource::Page(page), LockMode::S)?;
    // Whole, under a right to the page, unless this transaction changed it
    // (its own changes are not the committed image) or no right can be had
    // now (a writer of another client is calling it back).
    if page_locked && !t.has_private_copy(page) {
        if let Some(image) = t.committed_page_image(page)? {
            let right = core.callbacks.register(state.client, Resource::Page(page));
            if right != 0 {
                return Ok(Neighbours::Page(right, image.to_vec()));
            }
        }
    }
    // The committed image, read without a lock (a page lock would wait
    // for the page's object-level writers): it lists the objects, and
    // gives their bytes once each is locked — unless this transaction
    // changed the page (its own changes are read through `Txn::read`).
    let Some(image) = t.committed_page_image(page)? else {
        return Ok(Neighbours::Objects(Vec::new()));
    };
    let mut listed = Vec::new();
    cairn_storage::record::object::image_objects(page, &image, |oid, _| {
        if !named.contains(&oid) && listed.len() < room {
            listed.push(oid);
        }
    })?;
    let mut locked = Vec::with_capacity(listed.len());
    if page_locked {
        locked = listed;
    } else {
        for oid in listed {
            if t.try_lock_resource(Resource::Object(oid), LockMode::S)? {
                locked.push(oid);
            }
        }
    }
    // The image again, now that the locks hold the objects still: a
    // commit between the listing and the locks changed it.
    locked.sort_unstable();
    let image = if t.has_private_copy(page) {
        None
    } else {
        t.committed_page_image(page)?
    };
    let max = small_max(t.page_size());
    let mut parts = Vec::with_capacity(locked.len());
    let mut from_image = Vec::new();
    if let Some(image) = &image {
        cairn_storage::record::object::image_objects(page, image, |oid, bytes| {
            if bytes.len() <= max && locked.binary_search(&oid).is_ok() {
                from_image.push((oid, bytes.to_vec()));
            }
        })?;
    } else {
        for &oid in &locked {
            match t.read(oid) {
                Ok(b) if b.len() <= max => from_image.push((oid, b)),
                Ok(_) | Err(Error::NotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
    }
    // (Every one is small: a right each, registered together.)
    let keys: Vec<Resource> = from_image.iter().map(|(o, _)| Resource::Object(*o)).collect();
    let rights = core.callbacks.register_many(state.client, &keys);
    for ((oid, bytes), right) in from_image.into_iter().zip(rights) {
        let len = bytes.len() as u64;
        parts.push(fetched_part(&oid.to_bytes(), len, Some(bytes), right));
    }
    Ok(Neighbours::Objects(parts))
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
/// without its home record, under locks on those pages).
fn grant(core: &Core, state: &SessionState, t: &Txn, oid: Oid, bytes: &Option<Vec<u8>>) -> u64 {
    match bytes {
        Some(b) if b.len() <= small_max(t.page_size()) => core.callbacks.register(state.client, Resource::Object(oid)),
        _ => 0,
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
        ObjectRequest::CallbackReply(c) => {
            // Id 0 answers no callback: the client names its transactions
            // reading under a right before another of them changes it.
            core.callbacks
                .answer(db, state, c.id, key_of(c.key), c.epoch, c.writer, &c.in_use_by)
                .map_err(fault)?;
            Ok(Vec::new())
        }
        ObjectRequest::Release { rights } => {
            give_back(core, state, rights);
            Ok(Vec::new())
        }
        ObjectRequest::Flush { txn, changes } => {
            let (_, t) = state.txn_or_begin(db, txn).map_err(fault)?;
            let mut t = lock(&t);
            apply(&mut t, &changes).map_err(fault)?;
            Ok(Vec::new())
        }
        ObjectRequest::Method { txn, method } => {
            let (_, t) = state.txn_or_begin(db, txn).map_err(fault)?;
            let mut t = lock(&t);
            let group = |name: &str| -> cairn::Result<GroupId> { Ok(db.group(name)?) };
            cairn::methods::serve(&mut t, &group, &method).map_err(|e| fault(e.into_storage()))
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
    let bytes: u64 = changes
        .iter()
        .map(|c| match c {
            Change::Update { bytes, .. } => bytes.len() as u64,
            Change::Delete { .. } => 0,
        })
        .sum();
    if bytes > core.txn_bytes_max {
        return Err(fault(Error::LimitExceeded {
            what: "bytes of object changes in one transaction (txn_bytes_max)",
            value: bytes,
            limit: core.txn_bytes_max,
        }));
    }
    apply(&mut t, changes).map_err(fault)?;
    t.commit().map_err(fault)?;
    Ok(Vec::new())
}

/// The B+-tree requests: the tree is opened (and so checked) from its root
/// for each, in the client's transaction.
fn tree(core: &Core, state: &SessionState, req: ObjectRequest) -> Result<Vec<u8>, Error> {
    let Some(txn) = req.txn() else {
        return Err(Error::Internal("not a tree request".into()));
    };
    let (_, t) = state.txn_or_begin(&core.db, txn)?;
    let mut t = lock(&t);
    let t = &mut *t;
    match req {
        ObjectRequest::TreeOpen { root, .. } => {
            open_client_tree(t, root)?;
            let group = t.group_of_page(PageId(root))?.map_or(NO_GROUP, |g| g.0);
            Ok(group.to_le_bytes().to_vec())
        }
        ObjectRequest::TreeCreate { group, unique, .. } => {
            let tree = BTree::create(t, GroupId(group), unique)?;
            Ok(tree.root().0.to_le_bytes().to_vec())
        }
        ObjectRequest::TreeApply { root, ops, .. } => tree_apply(t, root, &ops),
        ObjectRequest::TreeGet {
            root,
            limit,
            key,
            objects,
            ..
        } => tree_get(core, state, t, root, limit, &key, objects),
        ObjectRequest::TreeRange {
            root,
            limit,
            lo,
            hi,
            after,
            ..
        } => tree_range(core, t, root, limit, &lo, &hi, after.as_deref()),
        ObjectRequest::TreeDestroy { root, .. } => {
            open_client_tree(t, root)?.destroy(t)?;
            Ok(Vec::new())
        }
        _ => Err(Error::Internal("not a tree request".into())),
    }
}

/// TREE_APPLY: the changes made; the reply lists the pages they changed,
/// which are the client's to know: it drops the lookups it keeps under
/// them (its own changes are not called back).
fn tree_apply(t: &mut Txn, root: u32, ops: &[TreeOp]) -> Result<Vec<u8>, Error> {
    let tree = open_client_tree(t, root)?;
    let mut changed = Vec::new();
    let mut rec = Recording {
        inner: t,
        pages: &mut changed,
    };
    for op in ops {
        match op {
            TreeOp::Insert { key, value } => {
                tree.insert(&mut rec, key, value)?;
            }
            TreeOp::Delete { key, value } => {
                tree.delete(&mut rec, key, value.as_deref())?;
            }
        }
    }
    let mut pages: Vec<u32> = changed.iter().map(|p| p.0).collect();
    pages.sort_unstable();
    pages.dedup();
    Ok(encode_pages(&pages))
}

/// TREE_GET and TREE_GET_OBJECTS: the key's values (at most `limit`),
/// rights on the leaves that enclose the key, and for TREE_GET_OBJECTS the
/// object each value names.
fn tree_get(
    core: &Core,
    state: &SessionState,
    t: &mut Txn,
    root: u32,
    limit: u32,
    key: &[u8],
    objects: bool,
) -> Result<Vec<u8>, Error> {
    let tree = open_client_tree(t, root)?;
    let mut values = Vec::new();
    let mut bytes = 0usize;
    tree.get_each(t, key, |v| {
        bytes += v.len() + 8;
        values.push(v.to_vec());
        values.len() < limit as usize
    })?;
    // No "more" in this reply: values past the message bound are
    // an error, not left out (a range reads any number).
    if bytes > core.reply_bytes_max {
        return Err(Error::LimitExceeded {
            what: "bytes of one key's values in a TREE_GET reply (ask for fewer, or read them as a range)",
            value: bytes as u64,
            limit: core.reply_bytes_max as u64,
        });
    }
    let leaves = match values.len() {
        0 => Vec::new(),
        n => leaf_rights(core, state, t, &tree, key, n)?,
    };
    let objects = if objects {
        values_objects(core, state, t, root, &values, bytes)?
    } else {
        Vec::new()
    };
    Ok(ValuesAndObjects {
        values,
        objects,
        leaves,
    }
    .encode())
}

/// The OBJ_FETCH part of the object each value (an OID) names, read under
/// S with its right to cache it; past the message bound (`bytes` of the
/// reply so far) the rest go as their lengths alone (read by range, or
/// fetched, when wanted).
fn values_objects(
    core: &Core,
    state: &SessionState,
    t: &mut Txn,
    root: u32,
    values: &[Vec<u8>],
    mut bytes: usize,
) -> Result<Vec<Vec<u8>>, Error> {
    let mut parts = Vec::with_capacity(values.len());
    for v in values {
        let o: [u8; OID_BYTES] = v[..].try_into().map_err(|_| Error::Corrupt {
            page: PageId(root),
            reason: format!("a value of {} bytes in a tree of OIDs", v.len()),
        })?;
        let (len, mut whole) = read_one(t, oid_of(&o), false)?;
        let size = whole.as_ref().map_or(0, Vec::len) + 64;
        if bytes + size > core.reply_bytes_max {
            whole = None;
        } else {
            bytes += size;
        }
        let right = grant(core, state, t, oid_of(&o), &whole);
        parts.push(fetched_part(&o, len, whole, right));
    }
    Ok(parts)
}

/// TREE_RANGE: entries from `lo` to `hi` (after the entry `after` of the
/// key `lo` names, when resuming), at most `limit` and within the message
/// bound; "more" tells the client to ask again from the last entry sent.
fn tree_range(
    core: &Core,
    t: &mut Txn,
    root: u32,
    limit: u32,
    lo: &std::ops::Bound<Vec<u8>>,
    hi: &std::ops::Bound<Vec<u8>>,
    after: Option<&[u8]>,
) -> Result<Vec<u8>, Error> {
    let tree = open_client_tree(t, root)?;
    let mut cur = tree.range(
        t,
        lo.as_ref().map(|k| &k[..]),
        hi.as_ref().map(|k| &k[..]),
        Direction::Forward,
    )?;
    let mut entries = Vec::new();
    let mut bytes = 0usize;
    let mut more = false;
    let resume_key = match (lo, after) {
        (std::ops::Bound::Included(k), Some(_)) => Some(k.clone()),
        _ => None,
    };
    while let Some(e) = cur.next(t)? {
        if let (Some(k), Some(v)) = (&resume_key, after) {
            if e.0 == *k && e.1[..] <= *v {
                continue;
            }
        }
        // Past the count asked for or the message bound: the
        // client asks again from the last entry sent.
        let size = e.0.len() + e.1.len() + 8;
        if entries.len() == limit as usize || (!entries.is_empty() && bytes + size > core.reply_bytes_max) {
            more = true;
            break;
        }
        bytes += size;
        entries.push(e);
    }
    Ok(encode_entries(&entries, more))
}

/// Rights on the leaves that enclose `key` ([`BTree::leaves_enclosing`]:
/// any change to its entries takes X on one of them; their locks are held
/// now), when they hold no more entries of it than were answered; none
/// otherwise, or if any right is refused (those granted go back).
fn leaf_rights(
    core: &Core,
    state: &SessionState,
    t: &mut Txn,
    tree: &BTree,
    key: &[u8],
    answered: usize,
) -> Result<Vec<(u32, u64)>, Error> {
    let Some((leaves, count)) = tree.leaves_enclosing(t, key, LOOKUP_LEAVES_MAX)? else {
        return Ok(Vec::new());
    };
    if count != answered {
        return Ok(Vec::new());
    }
    let rights: Vec<(u32, u64)> = leaves
        .iter()
        .map(|l| (l.0, core.callbacks.register(state.client, Resource::Page(*l))))
        .collect();
    if rights.iter().any(|(_, e)| *e == 0) {
        let granted: Vec<(Resource, u64)> = rights
            .iter()
            .filter(|(_, e)| *e != 0)
            .map(|(l, e)| (Resource::Page(PageId(*l)), *e))
            .collect();
        core.callbacks.give_back(state.client, &granted);
        return Ok(Vec::new());
    }
    Ok(rights)
}

/// Applies a client's after-images (or deletions) in order.
fn apply(t: &mut Txn, changes: &[Change]) -> Result<(), Error> {
    for c in changes {
        match c {
            Change::Update { oid, bytes } => t.update(oid_of(oid), bytes)?,
            Change::Delete { oid } => t.delete(oid_of(oid))?,
        }
    }
    Ok(())
}

/// Opens the B+-tree a client names by its root page. A page that is not a
/// tree's root — past the volume, of another kind, a node below a root — is
/// the client's mistake (INVALID), never reported as damage: only a page
/// that is a root and then fails to read is [`Error::Corrupt`].
fn open_client_tree(t: &mut Txn, root: u32) -> Result<BTree, Error> {
    use cairn_storage::access::PageAccess;
    let id = PageId(root);
    if root == 0 || root >= cairn_storage::record::object::ObjectSpace::page_count(t) {
        return Err(Error::InvalidArgument(format!(
            "page {id} names no B+-tree root: it is outside the volume"
        )));
    }
    // The header only: a whole-node check here cost every TREE_GET ~6 µs
    // (the adaptive client's warm lookups 1.09×); the operation checks the
    // nodes it reads.
    let is_root = PageAccess::read(t, id, cairn_storage::btree::is_root_page)?;
    if !is_root {
        return Err(Error::InvalidArgument(format!(
            "page {id} is not the root of a B+-tree"
        )));
    }
    BTree::open(t, id)
}
