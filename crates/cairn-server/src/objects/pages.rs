//! The adaptive client's page-whole fetches on the object server: an
//! OBJ_FETCH in mode [`OBJ_S_PAGE`] (the objects asked for and, per page,
//! its other small objects or the page whole under a right on it) and the
//! pages read ahead ([`OBJ_S_PAGE_AHEAD`]).

use super::*;

/// [`fetch_pages`] if it needs no wait: every page named in the server's
/// buffer pool and not changed by this transaction, every object named a
/// small one stored whole there and lockable S at once. `None` otherwise
/// (the locks taken by then are what [`fetch_pages`] takes first anyway).
pub(super) fn fetch_pages_without_waiting(
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
pub(super) enum ImageFrom {
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
pub(super) fn read_ahead(
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
pub(super) fn fetch_pages(
    core: &Core,
    state: &SessionState,
    txn: u64,
    oids: &[[u8; OID_BYTES]],
) -> Result<Vec<u8>, Fault> {
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
pub(super) fn encode_batch(parts: &[Vec<u8>], pages: &[WholePage]) -> Vec<u8> {
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
