//! The page service: what a page-server or file-server client asks of
//! `cairn serve` (FETCH, ALLOCATE, FREE, STAGE, COMMIT, LOCK, READ, the
//! callback answers, the volume and group requests, and LOCK_STATS), one
//! function per request. A request that needs no wait is answered on the
//! network thread ([`serve_without_waiting`]); the rest run on a blocking
//! thread ([`serve`]), their lock waits parked so that no thread waits for
//! a lock.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use cairn_net::message::{ErrorCode, Fault};
use cairn_net::object_service::Change;
use cairn_net::page_service::{
    encode_groups, encode_lsns, encode_page, encode_pages, CommitReply, FetchStatus, Fetched, KeptChange, LockCounters,
    PageRequest, SnapshotInfo, VolumeInfo, FETCH_CACHE, FETCH_S, FETCH_SNAPSHOT, FETCH_TRY_INSERT, FETCH_U, FETCH_X,
    LOCK_MODE_IS, LOCK_MODE_IX, LOCK_MODE_S, LOCK_MODE_SIX, LOCK_MODE_U, NO_GROUP, NO_PAGE, RESOURCE_PAGE,
    SNAPSHOT_EXCLUDED_MAX,
};
use cairn_net::rpc::Replier;
use cairn_storage::access::PageAccess;
use cairn_storage::lock::{LockMode, LockOwner, Resource};
use cairn_storage::page::{self, PageType};
use cairn_storage::record::object::ObjectSpace;
use cairn_storage::txn::{ObjectMerges, RecordMerge};
use cairn_storage::{ClientId, Db, Error, GroupId, Oid, PageId, Txn, TxnId};

use crate::objects::appends::Lists;
use crate::{await_parked, fault, lock, parking, run_blocking, run_parking, Core, SessionState};

/// Answers a page-service request of a page or file session (or GROUP,
/// GROUPS and VOLUME of an object session): one request of a transaction
/// at a time; without a thread when it needs no wait, else on a blocking
/// thread with its lock waits parked.
pub(crate) async fn handle(
    core: &Arc<Core>,
    state: &Arc<SessionState>,
    req: PageRequest,
    reply: &Replier,
) -> Result<Bytes, Fault> {
    // One request of a transaction at a time.
    let abort = matches!(req, PageRequest::Abort { .. });
    let _turn = state.turn_of(req.txn(), abort).await?;
    match snapshot_request(core, state, &req) {
        SnapshotRequest::Not => {}
        SnapshotRequest::Answered(answer) => return answer.map(Bytes::from),
        SnapshotRequest::Fetch { txn, cache, pages } => {
            let (c, s) = (core.clone(), state.clone());
            let parts = run_blocking(core, state, move || fetch_at_snapshot(&c, &s, txn, cache, &pages)).await??;
            for p in parts {
                reply
                    .part(p)
                    .await
                    .map_err(|e| Fault::new(ErrorCode::INTERNAL, e.to_string()))?;
            }
            return Ok(Bytes::new());
        }
    }
    // A read that needs no wait is answered here, on the network
    // thread: handing it to a blocking thread and back cost about
    // 90 µs of the ~150 µs a cold page fetch took (docs/history/benchmarks-notebook.md).
    let outcome = match without_waiting(core, state, &req).await? {
        Some(answer) => answer,
        None => match req {
            // Their lock waits are parked, holding no thread.
            PageRequest::Fetch { txn, .. }
            | PageRequest::Place { txn, .. }
            | PageRequest::Free { txn, .. }
            | PageRequest::Lock {
                txn, try_only: false, ..
            } => Ok(run_parking(core, state, txn, move |c, s| serve(c, s, req.clone())).await?),
            req => {
                let (c, s) = (core.clone(), state.clone());
                run_blocking(core, state, move || serve(&c, &s, req)).await?
            }
        },
    };
    match outcome? {
        Answer::Body(body) => Ok(Bytes::from(body)),
        Answer::Parts(parts) => {
            for p in parts {
                reply
                    .part(p)
                    .await
                    .map_err(|e| Fault::new(ErrorCode::INTERNAL, e.to_string()))?;
            }
            Ok(Bytes::new())
        }
    }
}

/// What [`snapshot_request`] made of a request.
enum SnapshotRequest {
    /// Not a snapshot's: served as usual.
    Not,
    /// Answered (SNAPSHOT), or refused.
    Answered(Result<Vec<u8>, Fault>),
    /// A snapshot's FETCH, to read on a blocking thread (`cache`: the
    /// client answers callbacks).
    Fetch {
        txn: u64,
        cache: bool,
        pages: Vec<(u32, u64)>,
    },
}

/// Sorts out the requests of snapshots: SNAPSHOT begins one and answers its
/// window; a FETCH in [`FETCH_SNAPSHOT`] mode must name one, and a
/// snapshot sends nothing else but ABORT.
fn snapshot_request(core: &Core, state: &SessionState, req: &PageRequest) -> SnapshotRequest {
    let refuse = |m: String| SnapshotRequest::Answered(Err(Fault::new(ErrorCode::INVALID, m)));
    match req {
        PageRequest::Snapshot { txn } => SnapshotRequest::Answered(begin_snapshot(core, state, *txn)),
        PageRequest::Fetch { txn, mode, pages, .. } if mode & !FETCH_CACHE == FETCH_SNAPSHOT => {
            if state.is_snapshot(*txn) {
                SnapshotRequest::Fetch {
                    txn: *txn,
                    cache: mode & FETCH_CACHE != 0 && !state.file,
                    pages: pages.clone(),
                }
            } else {
                refuse(format!(
                    "a FETCH at a snapshot names transaction {txn}, which is not an open snapshot (begin one with SNAPSHOT)"
                ))
            }
        }
        PageRequest::Abort { .. } => SnapshotRequest::Not,
        req => match req.txn() {
            Some(txn) if state.is_snapshot(txn) => refuse(format!(
                "transaction {txn} is a read-only snapshot: it reads with FETCH at its snapshot and ends with ABORT"
            )),
            _ => SnapshotRequest::Not,
        },
    }
}

/// SNAPSHOT (and the object service's OBJ_SNAPSHOT): the transaction
/// begun at a snapshot; the reply is its window.
pub(crate) fn begin_snapshot(core: &Core, state: &SessionState, txn: u64) -> Result<Vec<u8>, Fault> {
    let t = state.begin_snapshot(&core.db, txn).map_err(fault)?;
    let window = core.db.snapshot_window(&lock(&t));
    let Some(w) = window.filter(|w| w.excluded.len() <= SNAPSHOT_EXCLUDED_MAX) else {
        lock(&state.txns).remove(&txn);
        return Err(Fault::new(
            ErrorCode::LIMIT,
            format!("too many commits in flight to begin a snapshot (at most {SNAPSHOT_EXCLUDED_MAX}); try again"),
        ));
    };
    let info = SnapshotInfo {
        low: w.low.0,
        high: w.high.0,
        excluded: w.excluded.iter().map(|(s, e)| (s.0, e.0)).collect(),
    };
    Ok(info.encode())
}

/// A snapshot's FETCH: each page as of the snapshot, one part each
/// (UNCHANGED when the version has the LSN the client named), without a
/// lock of the snapshot's. For a client that answers callbacks (`cache`),
/// a version that is the page's committed image comes with the right to
/// cache it, as a FETCH S's does ([`right_if_current`]): a client reading
/// only at snapshots still warms its cache.
fn fetch_at_snapshot(
    core: &Core,
    state: &SessionState,
    txn: u64,
    cache: bool,
    pages: &[(u32, u64)],
) -> Result<Vec<Vec<u8>>, Fault> {
    let t = state.txn(txn).ok_or_else(|| {
        Fault::new(
            ErrorCode::NOT_FOUND,
            format!("snapshot {txn} ended while its FETCH arrived"),
        )
    })?;
    let mut t = lock(&t);
    // Takes S for a moment, never waiting, to grant rights (its locks go
    // when it drops, at the end of the request).
    let mut locker = match cache {
        true => Some(core.db.begin_for(state.client).map_err(fault)?),
        false => None,
    };
    let mut parts = Vec::with_capacity(pages.len());
    for &(p, client_lsn) in pages {
        let id = PageId(p);
        let owner = t.group_of_page(id).map_err(fault)?;
        let mut part = Fetched {
            page: p,
            status: FetchStatus::NotInUse,
            group: owner.map_or(NO_GROUP, |g| g.0),
            page_count: t.page_count(),
            lsn: 0,
            cover: 0,
            image: &[],
        };
        if !t.is_page_in_use(id).map_err(fault)? {
            parts.push(part.encode());
            continue;
        }
        let mut image = t.snapshot_page(id).map_err(fault)?;
        part.lsn = page::lsn(&image).0;
        if let Some(l) = locker.as_mut().filter(|_| may_cache(core, &image)) {
            part.cover = right_if_current(core, state, l, id, part.lsn);
        }
        if client_lsn != 0 && client_lsn == part.lsn {
            part.status = FetchStatus::Unchanged;
            parts.push(part.encode());
            continue;
        }
        page::seal(&mut image);
        part.status = FetchStatus::Image;
        part.image = &image;
        parts.push(part.encode());
    }
    Ok(parts)
}

/// The right to cache page `id` if the image of LSN `lsn` a snapshot read
/// is the page's committed one and no writer is at the page: `locker` (a
/// transaction of the session's own) takes S without waiting — so nobody
/// holds X, and the image cannot change while the right is registered —
/// and the right outlives it, as a FETCH S's outlives its transaction. 0
/// (no right) otherwise.
fn right_if_current(core: &Core, state: &SessionState, locker: &mut Txn, id: PageId, lsn: u64) -> u64 {
    if !matches!(locker.try_lock_resource(Resource::Page(id), LockMode::S), Ok(true)) {
        return 0;
    }
    match core.db.read_committed(id) {
        Ok(current) if page::lsn(&current).0 == lsn => core.callbacks.register(state.client, Resource::Page(id)),
        _ => 0,
    }
}

/// A request's answer: one body, or parts streamed before an empty final
/// reply.
enum Answer {
    Body(Vec<u8>),
    Parts(Vec<Vec<u8>>),
}

/// [`serve_without_waiting`], with its lock waits parked: when a lock of
/// the request must wait it is queued, the wait awaited here (no thread
/// held), and the request tried again.
async fn without_waiting(
    core: &Core,
    state: &SessionState,
    req: &PageRequest,
) -> Result<Option<Result<Answer, Fault>>, Fault> {
    loop {
        match serve_without_waiting(core, state, req) {
            Some(Err(refused)) => match req.txn() {
                Some(txn) if await_parked(core, state, txn).await? => continue,
                _ => return Ok(Some(Err(refused))),
            },
            answer => return Ok(answer),
        }
    }
}

/// Answers `req` if it can be done without waiting for anything but a
/// short in-memory critical section or a lock: a FETCH (to read, or to
/// write a page no other client caches, so nobody is called back) whose
/// every page is in the server's buffer pool, or a LOCK that calls nobody
/// back. A lock that must wait is parked: the answer is then
/// [`Error::LockParked`], and the parked request is the transaction's to
/// await ([`without_waiting`]). `None` otherwise, and the
/// request goes to [`serve`] on a thread that may block; what was done
/// here by then (a transaction begun, locks taken, rights granted) is what
/// [`serve`] would do first anyway, so it is not done twice.
fn serve_without_waiting(core: &Core, state: &SessionState, req: &PageRequest) -> Option<Result<Answer, Fault>> {
    if let PageRequest::Lock {
        txn,
        resource,
        id,
        mode,
        try_only,
    } = *req
    {
        return lock_without_waiting(core, state, txn, lock_request(resource, id, mode), try_only);
    }
    let PageRequest::Fetch {
        txn,
        mode,
        group,
        pages,
    } = req
    else {
        return None;
    };

    if !matches!(mode & !FETCH_CACHE, FETCH_S | FETCH_X | FETCH_U) {
        return None;
    }
    let (server_id, t) = match state.txn_or_begin(&core.db, *txn) {
        Ok(x) => x,
        Err(e) => return Some(Err(fault(e))),
    };
    // Another request of this transaction is running: not waiting for it
    // here (a poisoned mutex goes the slow way too, which reports it).
    let mut t = t.try_lock().ok()?;
    let mut parts = Vec::with_capacity(pages.len());
    for &(p, lsn) in pages {
        let fetched = fetch_one(
            core,
            state,
            server_id,
            &mut t,
            PageId(p),
            *mode,
            GroupId(*group),
            lsn,
            false,
        );
        match fetched {
            Ok(Some(part)) => parts.push(part),
            Ok(None) => return None,
            Err(e) => return Some(Err(fault(e))),
        }
    }
    Some(Ok(Answer::Parts(parts)))
}

/// The resource and mode a LOCK request names.
fn lock_request(resource: u8, id: u32, mode: u8) -> (Resource, LockMode) {
    let res = if resource == RESOURCE_PAGE {
        Resource::Page(PageId(id))
    } else {
        Resource::Group(GroupId(id))
    };
    let mode = match mode {
        LOCK_MODE_IS => LockMode::IS,
        LOCK_MODE_IX => LockMode::IX,
        LOCK_MODE_S => LockMode::S,
        LOCK_MODE_SIX => LockMode::SIX,
        LOCK_MODE_U => LockMode::U,
        _ => LockMode::X,
    };
    (res, mode)
}

/// A LOCK answered on the network thread (see [`serve_without_waiting`]):
/// if no other client caches the page it would let this one change, and
/// (for the file server) the page needs no write-back. A wait parks.
fn lock_without_waiting(
    core: &Core,
    state: &SessionState,
    txn: u64,
    (res, mode): (Resource, LockMode),
    try_only: bool,
) -> Option<Result<Answer, Fault>> {
    let (_, t) = match state.txn_or_begin(&core.db, txn) {
        Ok(x) => x,
        Err(e) => return Some(Err(fault(e))),
    };
    let mut t = t.try_lock().ok()?;
    let _mark = match res {
        // U shares with readers (a right to cache stands for one): only a
        // lock that lets the page change calls back.
        Resource::Page(_) if !LockMode::U.covers(mode) => Some(core.callbacks.try_mark(state.client, res, true)?),
        _ => None,
    };
    let granted = if try_only {
        t.try_lock_resource(res, mode)
    } else {
        t.lock_or_park(res, mode)
    };
    match granted {
        // Refused for now (try) or needing a callback (not parked): the
        // slow path does what is left.
        Ok(false) if !try_only => None,
        Ok(granted) => match res {
            Resource::Page(p) if granted && state.file && core.db.needs_write_back(p) => None,
            _ => Some(Ok(Answer::Body(vec![u8::from(granted)]))),
        },
        Err(e) => Some(Err(fault(e))),
    }
}

/// Runs one request on a blocking thread.
fn serve(core: &Core, state: &SessionState, req: PageRequest) -> Result<Answer, Fault> {
    let db = &*core.db;
    let empty = || Ok(Answer::Body(Vec::new()));
    match req {
        PageRequest::Fetch {
            txn,
            mode,
            group,
            pages,
        } => fetch(core, state, txn, mode, GroupId(group), pages),
        PageRequest::Place {
            txn,
            cache,
            group,
            need,
            pages,
        } => place(core, state, txn, cache, GroupId(group), need, pages),
        PageRequest::Allocate {
            txn,
            group,
            near,
            page_type,
        } => allocate(core, state, txn, GroupId(group), near, page_type),
        PageRequest::Free { txn, page } => {
            let (server_id, t) = state.txn_or_begin(db, txn).map_err(fault)?;
            let mut t = lock(&t);
            let _mark = core.call_back(state.client, server_id, PageId(page)).map_err(fault)?;
            parking(&mut t, |t| t.free(PageId(page))).map_err(fault)?;
            empty()
        }
        PageRequest::Stage { txn, records } => stage(core, state, txn, &records).and_then(|()| empty()),
        PageRequest::Commit { txn, records } => commit(core, state, txn, &records),
        PageRequest::Abort { txn } => {
            let t = lock(&state.txns).remove(&txn);
            drop(t);
            empty()
        }
        PageRequest::Lock {
            txn,
            resource,
            id,
            mode,
            try_only,
        } => lock_resource(core, state, txn, lock_request(resource, id, mode), try_only),
        PageRequest::GroupPages { txn, group } => {
            let (_, t) = state.txn_or_begin(db, txn).map_err(fault)?;
            let pages = lock(&t).group_pages(GroupId(group)).map_err(fault)?;
            let pages: Vec<u32> = pages.into_iter().map(|p| p.0).collect();
            Ok(Answer::Body(encode_pages(&pages)))
        }
        PageRequest::Read { page } => read(core, state, PageId(page)),
        PageRequest::Written { txn } => {
            let u = lock(&state.unwritten).remove(&txn).ok_or_else(|| {
                Fault::new(
                    ErrorCode::NOT_FOUND,
                    format!("transaction {txn} has no commit waiting for its pages to be written"),
                )
            })?;
            u.written().map_err(fault)?;
            empty()
        }
        PageRequest::Volume | PageRequest::Groups | PageRequest::Group { .. } | PageRequest::VolumeFile => {
            serve_volume(db, req)
        }
        PageRequest::LockStats => Ok(Answer::Body(lock_counters(db).encode())),
        PageRequest::Snapshot { txn } => begin_snapshot(core, state, txn).map(Answer::Body),
        PageRequest::Append { txn, appends } => append(core, state, txn, &appends),
    }
}

/// APPEND: a page client's appends, kept at object grain — IX on the
/// page, A on the object — and applied at its commit to the records as
/// they then stand, so that clients appending to objects of one page do
/// not exclude each other. Each page's appends are kept all together or
/// not at all ([`Txn::keep_merges_on`]: records moved or large, no room,
/// an append that does not apply, a page the transaction changed as a
/// whole); the reply names the pages kept, and the client applies the
/// rest itself under X. Each append is checked against the server's
/// catalog as an object client's is. A file-server session applies its
/// own: the server never holds its pages' images.
fn append(core: &Core, state: &SessionState, txn: u64, appends: &[Change]) -> Result<Answer, Fault> {
    if state.file {
        return Err(Fault::new(
            ErrorCode::INVALID,
            "APPEND is for page-server sessions: a file-server client applies its appends itself",
        ));
    }
    let (_, t) = state.txn_or_begin(&core.db, txn).map_err(fault)?;
    let bytes: u64 = appends.iter().map(|c| c.data_len() as u64).sum();
    count_bytes(core, state, txn, bytes).map_err(fault)?;
    let mut t = lock(&t);
    let mut lists = Lists::of(core, &mut t).map_err(fault)?;
    let mut by_page: std::collections::BTreeMap<PageId, Vec<ObjectMerges>> = Default::default();
    for c in appends {
        let Change::Append {
            oid,
            class,
            field,
            elem,
            count,
            elems,
        } = c
        else {
            return Err(Fault::new(ErrorCode::INVALID, "an APPEND carries appends only"));
        };
        let oid = Oid::from_bytes(oid);
        let merge = Arc::new(lists.append(oid, *class, field, elem, *count, elems).map_err(fault)?);
        let list = by_page.entry(oid.page).or_default();
        match list.last_mut() {
            Some((o, merges)) if *o == oid => merges.push(merge),
            _ => list.push((oid, vec![merge as Arc<dyn RecordMerge>])),
        }
    }
    // One pass in page order, as a FETCH X of the pages took them: a page
    // whose appends are not kept is locked X here, in that order (the
    // client folds them under it next), never after the IX of a later
    // page — which two appenders, each failing to keep where the other's
    // reservation took the room, deadlocked on.
    let appended: std::collections::HashSet<Oid> = by_page.values().flatten().map(|(oid, _)| *oid).collect();
    let mut kept = Vec::new();
    for (page, list) in by_page {
        // A page holding the moved body of an object appended to here
        // (whose home cannot keep appends: a forwarding stub) is changed
        // by the client under X anyway: taken X now, in order.
        let bodies = t.is_page_in_use(page).map_err(fault)? && bodies_of(core, page, &appended).map_err(fault)?;
        if !bodies && t.keep_merges_on(page, &list).map_err(fault)? {
            kept.push(page.0);
        } else {
            t.lock_resource(Resource::Page(page), LockMode::X).map_err(fault)?;
        }
    }
    Ok(Answer::Body(encode_pages(&kept)))
}

/// The database's lock-manager counters, as LOCK_STATS answers them.
fn lock_counters(db: &Db) -> LockCounters {
    let s = db.stats().locks;
    LockCounters {
        requests: s.requests,
        waits: s.waits,
        deadlocks: s.deadlocks,
        timeouts: s.timeouts,
        upgrades: s.upgrades,
        wait_micros: s.wait_micros,
    }
}

/// The requests about the volume and its groups, in no transaction.
fn serve_volume(db: &Db, req: PageRequest) -> Result<Answer, Fault> {
    match req {
        PageRequest::Volume => {
            let header = db.header();
            let info = VolumeInfo {
                page_size: header.page_size,
                page_count: db.page_counts().0,
                region_pages: header.region_pages,
            };
            Ok(Answer::Body(info.encode()))
        }
        PageRequest::Groups => {
            let groups: Vec<(u32, String)> = db.groups().into_iter().map(|g| (g.id.0, g.name)).collect();
            Ok(Answer::Body(encode_groups(&groups)))
        }
        PageRequest::Group { create, name } => {
            let g = match db.group(&name) {
                Ok(g) => g,
                Err(_) if create => match db.create_group(&name) {
                    Ok(g) => g,
                    // Another session made it first.
                    Err(Error::GroupExists(_)) => db.group(&name).map_err(fault)?,
                    Err(e) => return Err(fault(e)),
                },
                Err(e) => return Err(fault(e)),
            };
            Ok(Answer::Body(g.0.to_le_bytes().to_vec()))
        }
        PageRequest::VolumeFile => {
            use std::os::unix::ffi::OsStrExt;
            let path = db.volume_file();
            Ok(Answer::Body(path.as_os_str().as_bytes().to_vec()))
        }
        _ => unreachable!("serve_volume is called for volume requests only"),
    }
}

/// FETCH: each page locked (its lock wait parked) and sent as a part.
fn fetch(
    core: &Core,
    state: &SessionState,
    txn: u64,
    mode: u8,
    group: GroupId,
    pages: Vec<(u32, u64)>,
) -> Result<Answer, Fault> {
    let (server_id, t) = state.txn_or_begin(&core.db, txn).map_err(fault)?;
    let mut t = lock(&t);
    // The pages of an X fetch of many (a commit's appends, a prefetch for
    // update) are called back from the other clients all at once, not one
    // round of answers per page; each page's own lock request then finds
    // nobody left to call back (the marks keep new rights off them).
    let _marks = if mode & !FETCH_CACHE == FETCH_X && pages.len() > 1 {
        let ids: Vec<PageId> = pages.iter().map(|(p, _)| PageId(*p)).collect();
        Some(core.call_back_pages(state.client, server_id, &ids).map_err(fault)?)
    } else {
        None
    };
    let mut parts = Vec::with_capacity(pages.len());
    for (p, lsn) in pages {
        let page = PageId(p);
        if mode & !FETCH_CACHE == FETCH_TRY_INSERT && t.changed_at_object_grain(page) {
            // As in PLACE: not the client's to change as a whole.
            let in_use = t.is_page_in_use(page).map_err(fault)?;
            parts.push(passed_over(&mut t, page, in_use).map_err(fault)?);
            continue;
        }
        let part = parking(&mut t, |t| {
            fetch_one(core, state, server_id, t, page, mode, group, lsn, true)
        });
        match part.map_err(fault)? {
            Some(part) => parts.push(part),
            None => {
                return Err(Fault::new(
                    ErrorCode::INTERNAL,
                    format!("fetching page {page} gave up without being asked to"),
                ))
            }
        }
    }
    Ok(Answer::Parts(parts))
}

/// PLACE (the module docs of `cairn_net::page_service` say what it
/// answers): each candidate page is looked at before it is locked, so a
/// page without room for the insert is neither called back from the
/// clients caching it nor held X to the transaction's end, as a
/// try-insert FETCH of it would be.
fn place(
    core: &Core,
    state: &SessionState,
    txn: u64,
    cache: bool,
    group: GroupId,
    need: u32,
    pages: Vec<(u32, u64)>,
) -> Result<Answer, Fault> {
    let (server_id, t) = state.txn_or_begin(&core.db, txn).map_err(fault)?;
    let mut t = lock(&t);
    let mode = FETCH_TRY_INSERT | if cache { FETCH_CACHE } else { 0 };
    let mut parts = Vec::with_capacity(pages.len());
    for (p, lsn) in pages {
        let id = PageId(p);
        let in_use = t.is_page_in_use(id).map_err(fault)?;
        // A page whose appends this transaction keeps here at object
        // grain is never its client's to change as a whole.
        if !(in_use && !t.changed_at_object_grain(id) && has_room(core, id, need).map_err(fault)?) {
            parts.push(passed_over(&mut t, id, in_use).map_err(fault)?);
            continue;
        }
        let part = parking(&mut t, |t| {
            fetch_one(core, state, server_id, t, id, mode, group, lsn, true)
        })
        .map_err(fault)?
        .ok_or_else(|| {
            Fault::new(
                ErrorCode::INTERNAL,
                format!("placing on page {id} gave up without being asked to"),
            )
        })?;
        let locked = Fetched::decode(&part).is_ok_and(|f| f.status.is_locked());
        parts.push(part);
        // Under X nobody else changes the page: the look is the answer.
        if locked && has_room(core, id, need).map_err(fault)? {
            break;
        }
    }
    Ok(Answer::Parts(parts))
}

/// Whether in-use page `id` is a slotted page whose committed image has
/// room for a payload of `need` bytes (with its slot entry).
fn has_room(core: &Core, id: PageId, need: u32) -> Result<bool, Error> {
    let image = core.db.read_committed(id)?;
    cairn_storage::record::object::image_has_room(&image, need as usize)
}

/// The PLACE part of a page passed over, nothing locked: NOT_IN_USE, or
/// NOT_GRANTED for an in-use page without room.
fn passed_over(t: &mut Txn, id: PageId, in_use: bool) -> Result<Vec<u8>, Error> {
    let owner = t.group_of_page(id)?;
    Ok(Fetched {
        page: id.0,
        status: if in_use {
            FetchStatus::NotGranted
        } else {
            FetchStatus::NotInUse
        },
        group: owner.map_or(NO_GROUP, |g| g.0),
        page_count: t.page_count(),
        lsn: 0,
        cover: 0,
        image: &[],
    }
    .encode())
}

/// ALLOCATE: a page of a kind a client may hold, formatted, sent back.
fn allocate(
    core: &Core,
    state: &SessionState,
    txn: u64,
    group: GroupId,
    near: u32,
    page_type: u8,
) -> Result<Answer, Fault> {
    let ty = PageType::from_u8(page_type)
        .filter(|t| t.is_client_kind())
        .ok_or_else(|| {
            Fault::new(
                ErrorCode::INVALID,
                format!("a client may not allocate a page of type {page_type}"),
            )
        })?;
    let (_, t) = state.txn_or_begin(&core.db, txn).map_err(fault)?;
    let mut t = lock(&t);
    let near = (near != NO_PAGE).then_some(PageId(near));
    let p = t.allocate(group, near, ty).map_err(fault)?;
    let mut image = t.fetch_page(p, true).map_err(fault)?;
    if state.file {
        // The client writes the page at commit; the server must
        // never write its formatted image over that later.
        core.db.write_back(p).map_err(fault)?;
    }
    page::seal(&mut image);
    Ok(Answer::Body(encode_page(p.0, t.page_count(), &image)))
}

/// STAGE: a batch of the transaction's redo records, checked and kept.
/// A refused batch aborts the transaction.
fn stage(core: &Core, state: &SessionState, txn: u64, records: &[Vec<u8>]) -> Result<(), Fault> {
    let (_, t) = state.txn_or_begin(&core.db, txn).map_err(fault)?;
    let refused =
        count_sent(core, state, txn, records).and_then(|()| lock(&t).stage_redo(&records_of(records), TxnId(txn)));
    if let Err(e) = refused {
        drop(t);
        lock(&state.txns).remove(&txn);
        return Err(fault(e));
    }
    Ok(())
}

/// COMMIT: the last records, checked, logged and made durable (for a file
/// server, logged and left for the client to write); the reply lists the
/// pages' new LSNs.
fn commit(core: &Core, state: &SessionState, txn: u64, records: &[Vec<u8>]) -> Result<Answer, Fault> {
    // A transaction that never reached the server before has nothing
    // locked, so any record it sends is refused below.
    state.txn_or_begin(&core.db, txn).map_err(fault)?;
    if let Err(e) = count_sent(core, state, txn, records) {
        lock(&state.txns).remove(&txn);
        return Err(fault(e));
    }
    let (mut t, _slot) = state.take_for_commit(txn, "COMMIT")?;
    if state.file {
        let u = core
            .db
            .commit_unwritten(t, &records_of(records), TxnId(txn))
            .map_err(fault)?;
        let lsns: Vec<(u32, u64)> = u.lsns().iter().map(|(p, l)| (p.0, l.0)).collect();
        if !lsns.is_empty() {
            lock(&state.unwritten).insert(txn, u);
        }
        return Ok(Answer::Body(encode_lsns(&lsns)));
    }
    // A refused batch aborts the transaction (dropping it).
    t.stage_redo(&records_of(records), TxnId(txn)).map_err(fault)?;
    // The pages the client knows it changed: its own, those a catalog
    // request of it made here, and those whose appends APPEND kept here
    // (the reply says how the commit changed them, so the client brings
    // its copies up to date or drops them). On a server that locks key
    // ranges the commit also changes the pages of the trees its tree
    // requests changed, which are the server's alone (the client caches
    // none).
    let mut known: std::collections::HashSet<PageId> = t.changed_pages().into_iter().collect();
    for p in t.pages_changed_at_object_grain() {
        if !known.insert(p) {
            // The client changed the page itself after all (under X), and
            // its image has the appends kept here applied: the image
            // replaces them.
            t.forget_object_changes_on(p);
        }
    }
    if !t.pages_changed_at_object_grain().is_empty() {
        t.report_object_diffs();
    }
    let (lsns, diffs) = t.commit_with_diffs().map_err(fault)?;
    let lsns: Vec<(u32, u64)> = lsns
        .into_iter()
        .filter(|(p, _)| known.contains(p))
        .map(|(p, l)| (p.0, l.0))
        .collect();
    // Within the reply's bound: a page left out is fetched again by the
    // client (it drops its copy), never a reply too big to send for a
    // commit that is durable already.
    let mut room = core.reply_bytes_max.saturating_sub(4 + 12 * lsns.len() + 4);
    let mut changes = Vec::new();
    for d in diffs {
        let size = 16 + d.runs.iter().map(|(_, b)| 8 + b.len()).sum::<usize>();
        if size > room {
            continue;
        }
        room -= size;
        changes.push(KeptChange {
            page: d.page.0,
            base: d.base.0,
            runs: d.runs,
        });
    }
    Ok(Answer::Body(CommitReply { lsns, changes }.encode()))
}

/// Whether the committed image of in-use page `page` holds the moved
/// body of an object of `objects` whose home is another page (read
/// without a lock: a hint).
fn bodies_of(core: &Core, page: PageId, objects: &std::collections::HashSet<Oid>) -> Result<bool, Error> {
    let image = core.db.read_committed(page)?;
    let homes = cairn_storage::record::object::image_moved_homes(page, &image)?;
    Ok(homes.iter().any(|h| h.page != page && objects.contains(h)))
}

/// LOCK: a page or group lock (a page's X after its callbacks); a try
/// that is not granted takes nothing.
fn lock_resource(
    core: &Core,
    state: &SessionState,
    txn: u64,
    (res, mode): (Resource, LockMode),
    try_only: bool,
) -> Result<Answer, Fault> {
    let (server_id, t) = state.txn_or_begin(&core.db, txn).map_err(fault)?;
    let mut t = lock(&t);
    let _mark = match res {
        Resource::Page(p) if !LockMode::U.covers(mode) => {
            Some(core.call_back(state.client, server_id, p).map_err(fault)?)
        }
        _ => None,
    };
    let granted = if try_only {
        t.try_lock_resource(res, mode).map_err(fault)?
    } else {
        parking(&mut t, |t| t.lock_resource(res, mode)).map_err(fault)?;
        true
    };
    if let (true, true, Resource::Page(p)) = (state.file, granted, res) {
        // The client reads the page from the volume file next.
        core.db.write_back(p).map_err(fault)?;
    }
    Ok(Answer::Body(vec![u8::from(granted)]))
}

/// READ: only a page the session may see now: one a transaction of it
/// holds a lock on (the page's, or its group's), or one it holds a right
/// to cache (an evicted page it refills).
fn read(core: &Core, state: &SessionState, p: PageId) -> Result<Answer, Fault> {
    if !may_read(core, state, p) {
        return Err(Fault::new(
            ErrorCode::INVALID,
            format!("READ of page {p}: the session holds no lock on it and no right to cache it"),
        ));
    }
    let mut image = core.db.read_committed(p).map_err(fault)?;
    page::seal(&mut image);
    Ok(Answer::Body(image))
}

/// The records as slices.
fn records_of(records: &[Vec<u8>]) -> Vec<&[u8]> {
    records.iter().map(|r| &r[..]).collect()
}

/// Counts the bytes of `records` against the transaction's limit.
fn count_sent(core: &Core, state: &SessionState, txn: u64, records: &[Vec<u8>]) -> Result<(), Error> {
    count_bytes(core, state, txn, records.iter().map(|r| r.len() as u64).sum())
}

/// Counts `bytes` more sent for `txn` (redo records, or appends' elements)
/// against the bound on a transaction's bytes.
fn count_bytes(core: &Core, state: &SessionState, txn: u64, bytes: u64) -> Result<(), Error> {
    let Some(entry) = lock(&state.txns).get(&txn).cloned() else {
        return Ok(());
    };
    let total = entry.sent.fetch_add(bytes, Ordering::Relaxed) + bytes;
    if total > core.txn_bytes_max {
        return Err(Error::LimitExceeded {
            what: "bytes of redo records and appends in one transaction (txn_bytes_max)",
            value: total,
            limit: core.txn_bytes_max,
        });
    }
    Ok(())
}

/// One page of a FETCH: its part (see [`Fetched`]). A page not in use for
/// the transaction is reported, not locked; a try-insert that is not
/// granted takes nothing. Before an X lock the page is called back from
/// the other clients caching it; a page locked and sent (or revalidated)
/// comes with the right to cache it when no other client's writer is at it.
///
/// For a file-server session the page is written back first if the
/// server's buffer pool holds a change the volume file lacks (the client
/// reads the committed page there), and the part ships no image and grants
/// no right to cache ([`FetchStatus::Locked`]).
#[allow(clippy::too_many_arguments)]
fn fetch_one(
    core: &Core,
    state: &SessionState,
    server_id: TxnId,
    t: &mut Txn,
    id: PageId,
    mode: u8,
    group: GroupId,
    client_lsn: u64,
    wait: bool,
) -> Result<Option<Vec<u8>>, Error> {
    let client = state.client;
    let cache = mode & FETCH_CACHE != 0 && !state.file;
    let mode = mode & !FETCH_CACHE;
    let page_count = t.page_count();
    let owner = t.group_of_page(id)?;
    let mut part = Fetched {
        page: id.0,
        status: FetchStatus::NotInUse,
        group: owner.map_or(NO_GROUP, |g| g.0),
        page_count,
        lsn: 0,
        cover: 0,
        image: &[],
    };
    if !t.is_page_in_use(id)? {
        return Ok(Some(part.encode()));
    }
    if !wait {
        // X only if no other client caches the page (nobody to call back);
        // the mark then keeps any from getting a right until this one's is
        // registered, as `call_back`'s does below.
        let _mark = match mode {
            FETCH_S | FETCH_U => None,
            FETCH_X => match core.callbacks.try_mark(client, Resource::Page(id), true) {
                Some(mark) => Some(mark),
                None => return Ok(None),
            },
            _ => return Ok(None),
        };
        // A lock wait parks here (`Error::LockParked`), with no thread.
        let m = fetch_lock_mode(mode);
        if !t.lock_or_park(Resource::Page(id), m)? {
            return Ok(None);
        }
        if state.file {
            if core.db.needs_write_back(id) {
                return Ok(None);
            }
            part.status = FetchStatus::Locked;
            return Ok(Some(part.encode()));
        }
        return match t.try_fetch_page(id, mode == FETCH_X)? {
            Some(mut image) => Ok(Some(finish_fetch(
                core, client, id, cache, client_lsn, part, &mut image,
            ))),
            None => Ok(None),
        };
    }
    let _mark = if matches!(mode, FETCH_S | FETCH_U) {
        None
    } else {
        Some(core.call_back(client, server_id, id)?)
    };
    let granted = match mode {
        FETCH_TRY_INSERT => t.try_insert_page(group, id)?,
        FETCH_S | FETCH_X | FETCH_U => {
            t.lock_resource(Resource::Page(id), fetch_lock_mode(mode))?;
            true
        }
        _ => return Err(Error::InvalidArgument(format!("FETCH mode {mode}"))),
    };
    if !granted {
        part.status = FetchStatus::NotGranted;
        return Ok(Some(part.encode()));
    }
    if state.file {
        core.db.write_back(id)?;
        part.status = FetchStatus::Locked;
        return Ok(Some(part.encode()));
    }
    // (Under U the page is read as under S, which U covers.)
    let mut image = t.fetch_page(id, matches!(mode, FETCH_X | FETCH_TRY_INSERT))?;
    // (The writer's mark, if any, lasts until its right is registered.)
    Ok(Some(finish_fetch(
        core, client, id, cache, client_lsn, part, &mut image,
    )))
}

/// The lock a FETCH in `mode` (S, X or U) takes on its pages.
fn fetch_lock_mode(mode: u8) -> LockMode {
    match mode {
        FETCH_X => LockMode::X,
        FETCH_U => LockMode::U,
        _ => LockMode::S,
    }
}

/// The FETCH part of a page locked and read: its LSN, the right to cache it
/// if asked for, and its image unless the client's copy is current.
fn finish_fetch<'a>(
    core: &Core,
    client: ClientId,
    id: PageId,
    cache: bool,
    client_lsn: u64,
    mut part: Fetched<'a>,
    image: &'a mut [u8],
) -> Vec<u8> {
    part.lsn = page::lsn(image).0;
    if cache && may_cache(core, image) {
        part.cover = core.callbacks.register(client, Resource::Page(id));
    }
    if client_lsn != 0 && part.lsn == client_lsn {
        part.status = FetchStatus::Unchanged;
        return part.encode();
    }
    page::seal(image);
    part.status = FetchStatus::Image;
    part.image = image;
    part.encode()
}

/// Whether a client may cache `image` under a right: not a B+-tree page
/// on a server that locks key ranges, whose commits change a tree's pages
/// under no page lock, so no callback would ever name it (its page
/// clients send their tree operations here instead).
fn may_cache(core: &Core, image: &[u8]) -> bool {
    !(core.db.locks_key_ranges() && matches!(page::page_type(image), Some(PageType::BTreeLeaf | PageType::BTreeInner)))
}

/// Whether a READ of `page` is the session's to make (see the READ arm).
fn may_read(core: &Core, state: &SessionState, page: PageId) -> bool {
    if core.callbacks.has_right(state.client, Resource::Page(page)) {
        return true;
    }
    let group = core.db.group_of_page(page);
    // Asked of the lock manager by transaction id: a clone of a `Txn`
    // held here would make a COMMIT of it, on another thread, find "a
    // request still running", and locking one would wait for its request.
    let ids: Vec<TxnId> = lock(&state.txns).values().map(|e| e.id).collect();
    ids.into_iter().any(|id| {
        let owner = LockOwner::new(state.client, id);
        core.db.holds_lock(owner, &Resource::Page(page), LockMode::S)
            || group.is_some_and(|g| core.db.holds_lock(owner, &Resource::Group(g), LockMode::S))
    })
}
