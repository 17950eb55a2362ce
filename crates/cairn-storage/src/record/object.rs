//! Objects with physical OIDs, over any [`ObjectSpace`]: the operations
//! behind a transaction's create / read / update / delete.
//!
//! An object's *home slot* is the slot its OID names. What the home slot
//! holds depends on the object (the `kind` tag of the slotted page):
//!
//! | kind | name          | payload                                        |
//! |------|---------------|------------------------------------------------|
//! | 1    | SMALL         | the object's bytes (10 bytes or more)          |
//! | 6    | SMALL_PADDED  | bytes, zero padding to 9, then the length (u8) |
//! | 4    | LARGE         | a large-object descriptor                      |
//! | 2    | FORWARD       | the OID of the moved body record               |
//! | 3    | MOVED_SMALL   | (body, never a home) home OID, then the bytes  |
//! | 5    | MOVED_LARGE   | (body, never a home) home OID, then descriptor |
//!
//! Invariants:
//! - every home payload is at least [`FORWARD_SIZE`] bytes, so a home slot can
//!   always be turned into a forwarding stub in place, however full its page;
//! - a FORWARD stub points at a MOVED body whose back pointer is the stub's
//!   own OID; a body is reached only through its stub (one hop, never a
//!   chain: moving a moved record re-points the home stub);
//! - records up to [`small_max`] bytes are small, larger ones are large
//!   objects whose pages belong to the object's group;
//! - a lookup whose uniquifier does not match the slot's is `NotFound`: a
//!   deleted object's OID never reaches a newer object in a reused slot.
//!
//! The functions here are generic over [`ObjectSpace`], a [`PageAccess`] that
//! also answers questions about space (which group owns a page, which pages
//! are in use) and keeps the per-group fill hints; a transaction is one.

use crate::access::PageAccess;
use crate::error::{Error, Result};
use crate::ids::{GroupId, Oid, PageId};
use crate::page::{self, PageType};
use crate::record::large::{self, LargeDescriptor};
use crate::record::slotted;

/// Slot kind: a small object stored in its home slot.
pub const KIND_SMALL: u8 = 1;
/// Slot kind: a forwarding stub in the home slot.
pub const KIND_FORWARD: u8 = 2;
/// Slot kind: the body of a moved small object.
pub const KIND_MOVED_SMALL: u8 = 3;
/// Slot kind: a large-object descriptor in the home slot.
pub const KIND_LARGE: u8 = 4;
/// Slot kind: the body of a moved large-object descriptor.
pub const KIND_MOVED_LARGE: u8 = 5;
/// Slot kind: a small object shorter than a forwarding stub, padded.
pub const KIND_SMALL_PADDED: u8 = 6;
/// Payload bytes of a forwarding stub (an encoded OID).
pub const FORWARD_SIZE: usize = Oid::ENCODED_SIZE;
const _: () = assert!(LargeDescriptor::ENCODED_SIZE >= FORWARD_SIZE);

/// Where and how an object is stored.
#[derive(Clone, Debug)]
struct Located {
    /// The slot holding the object's record: the home slot, or the moved body.
    body: Oid,
    /// True if `body` is a moved body (the home slot is a forwarding stub).
    moved: bool,
    content: Content,
}

#[derive(Clone, Debug)]
enum Content {
    Small(Vec<u8>),
    Large(LargeDescriptor),
}

/// Encodes a home record for `bytes` of a small object: (kind, payload).
pub(crate) fn small_payload(bytes: &[u8]) -> (u8, std::borrow::Cow<'_, [u8]>) {
    if bytes.len() >= FORWARD_SIZE {
        (KIND_SMALL, std::borrow::Cow::Borrowed(bytes))
    } else {
        let mut p = vec![0u8; FORWARD_SIZE];
        p[..bytes.len()].copy_from_slice(bytes);
        p[FORWARD_SIZE - 1] = bytes.len() as u8;
        (KIND_SMALL_PADDED, std::borrow::Cow::Owned(p))
    }
}

pub(crate) fn decode_padded(p: &[u8], at: Oid) -> Result<Vec<u8>> {
    let n = *p.last().unwrap_or(&0) as usize;
    if p.len() != FORWARD_SIZE || n >= FORWARD_SIZE {
        return Err(Error::corrupt(
            at.page,
            format!("slot {} holds a padded record with bad length {n}", at.slot.0),
        ));
    }
    Ok(p[..n].to_vec())
}

/// Counters of the object layer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ObjectStats {
    /// Records moved off their home page (forwarding stubs created or re-pointed).
    pub records_moved: u64,
    /// Forwarding hops followed by reads.
    pub forwards_followed: u64,
}

/// What the object layer needs besides pages.
pub trait ObjectSpace: PageAccess {
    /// Pages in the volume.
    fn page_count(&self) -> u32;
    /// True if the group exists.
    fn group_exists(&self, group: GroupId) -> bool;
    /// The group owning the extent of page `id`. (A remote backend may have
    /// to ask, and fail.)
    fn group_of_page(&self, id: PageId) -> Result<Option<GroupId>>;
    /// True if page `id` is allocated and usable (a transaction reports the
    /// pages it has freed as not in use); false beyond the volume's end.
    fn is_page_in_use(&self, id: PageId) -> Result<bool>;
    /// The clustering region, in pages, for create-near.
    fn region_pages(&self) -> u32;
    /// The in-use pages of a group in physical order.
    fn group_pages(&self, group: GroupId) -> Result<Vec<PageId>>;
    /// The page the next insert into `group` tries first.
    fn fill_page(&self, group: GroupId) -> Option<PageId>;
    /// Sets (or, with `None`, clears) the fill page of `group`.
    fn set_fill_page(&mut self, group: GroupId, page: Option<PageId>);
    /// Forgets `page` as a fill page of any group (it was freed).
    fn forget_fill_page(&mut self, page: PageId);
    /// Whether a candidate page for an insert into `group` may be tried now:
    /// it must be in use and belong to `group`, and a transaction answers
    /// false for a page another transaction has locked (so inserts go
    /// elsewhere instead of waiting), else takes its exclusive lock.
    fn try_insert_page(&mut self, group: GroupId, page: PageId) -> Result<bool>;
    /// The first page of `candidates` an insert into `group` of a payload
    /// of `need` bytes may use now ([`ObjectSpace::try_insert_page`]
    /// granted, a slotted page with the room): the default tries them in
    /// order. A transaction looks first at the pages it holds X on, which
    /// cost nothing, then asks its backend about the rest together
    /// (one round trip for a remote one).
    fn insert_page(&mut self, group: GroupId, candidates: &[PageId], need: usize) -> Result<Option<PageId>>
    where
        Self: Sized,
    {
        for &p in candidates {
            if self.try_insert_page(group, p)? && has_room(self, p, need)? {
                return Ok(Some(p));
            }
        }
        Ok(None)
    }
    /// The object-layer counters.
    fn stats_mut(&mut self) -> &mut ObjectStats;

    /// Calls `f` with the live record `at` names ([`slot_in`]: `None` if
    /// its page is no object page, or the slot is free or holds another
    /// uniquifier). A transaction locking objects rather than pages locks
    /// the record alone here (and reads its own change to it, if any).
    fn with_slot<R>(&mut self, at: Oid, f: impl FnOnce(Option<slotted::SlotRef<'_>>) -> R) -> Result<R>
    where
        Self: Sized,
    {
        self.read(at.page, |b| -> Result<R> { Ok(f(slot_in(b, at)?)) })?
    }

    /// Replaces the payload and kind of the live record `at` (located
    /// first by the caller); false if it does not fit its page (see
    /// [`slotted::update`]). A transaction locking objects changes the
    /// record alone here, not its page.
    fn update_slot(&mut self, at: Oid, kind: u8, payload: &[u8]) -> Result<bool> {
        self.modify(at.page, |b| change_in_page(b, at, Some((kind, payload))))
    }

    /// Frees the live record `at`; true if its page now holds no live
    /// record (the caller frees the page). A transaction locking objects
    /// frees the record alone and answers false.
    fn delete_slot(&mut self, at: Oid) -> Result<bool> {
        self.modify(at.page, |b| change_in_page(b, at, None))
    }
}

/// The page-level change behind [`ObjectSpace::update_slot`] (`after` the
/// new kind and payload: true if it fit) and [`ObjectSpace::delete_slot`]
/// (`None`: true if the page is now empty), on an image of `at.page`.
pub(crate) fn change_in_page(image: &mut [u8], at: Oid, after: Option<(u8, &[u8])>) -> Result<bool> {
    match after {
        Some((kind, payload)) => slotted::update(image, at.slot, kind, payload),
        None => {
            slotted::delete(image, at.slot)?;
            Ok(slotted::live_count(image)? == 0)
        }
    }
}

/// The live record `at` names in `image` (an image of `at.page`): `None`
/// if the image is no object (slotted) page, or the slot is free or holds
/// another uniquifier. A damaged slot directory is [`Error::Corrupt`].
pub fn slot_in(image: &[u8], at: Oid) -> Result<Option<slotted::SlotRef<'_>>> {
    if page::page_type(image) != Some(PageType::Slotted) {
        return Ok(None);
    }
    Ok(slotted::get(image, at.slot)?.filter(|r| r.uniq == at.uniq))
}

/// Creates an object in `group`.
pub fn create<S: ObjectSpace>(s: &mut S, group: GroupId, data: &[u8]) -> Result<Oid> {
    create_at(s, group, None, data)
}

/// Creates an object near `near`: on its page if it fits, else within the
/// clustering region around it, in `near`'s group.
pub fn create_near<S: ObjectSpace>(s: &mut S, near: Oid, data: &[u8]) -> Result<Oid> {
    locate(s, near)?;
    let group = s.group_of_page(near.page)?.ok_or(Error::NotFound { oid: near })?;
    create_at(s, group, Some(near.page), data)
}

fn create_at<S: ObjectSpace>(s: &mut S, group: GroupId, near: Option<PageId>, data: &[u8]) -> Result<Oid> {
    if !s.group_exists(group) {
        return Err(Error::UnknownGroupId(group));
    }
    if data.len() <= small_max(s.page_size()) {
        let (kind, payload) = small_payload(data);
        return place(s, group, near, kind, &payload);
    }
    let desc = large::create(s, group, near, data)?;
    match place(s, group, near, KIND_LARGE, &desc.encode()) {
        Ok(oid) => Ok(oid),
        Err(e) => {
            // Give the pages back; the error that matters is the first one.
            let _ = large::destroy(s, desc);
            Err(e)
        }
    }
}

/// Whether page `p` is a slotted page an insert of a payload of `need`
/// bytes fits now ([`image_has_room`]).
pub fn has_room<S: PageAccess>(s: &mut S, p: PageId, need: usize) -> Result<bool> {
    s.read(p, |b| image_has_room(b, need))?
}

/// Whether `image` is a slotted page an insert of a payload of `need`
/// bytes fits now ([`slotted::free_for_insert`]); a damaged slot
/// directory is [`Error::Corrupt`].
pub fn image_has_room(image: &[u8], need: usize) -> Result<bool> {
    if page::page_type(image) != Some(PageType::Slotted) {
        return Ok(false);
    }
    Ok(slotted::free_for_insert(image)?.is_some_and(|f| f >= need))
}

/// Inserts a record into a page of `group`, trying: the page `near` (if
/// given) and pages of the clustering region around it, or else the
/// group's current fill page ([`ObjectSpace::insert_page`]), then a newly
/// allocated page.
fn place<S: ObjectSpace>(s: &mut S, group: GroupId, near: Option<PageId>, kind: u8, payload: &[u8]) -> Result<Oid> {
    let mut candidates = Vec::new();
    if let Some(n) = near {
        candidates.push(n);
        let half = s.region_pages() / 2;
        for d in 1..=half {
            candidates.push(PageId(n.0.saturating_add(d)));
            if let Some(p) = n.0.checked_sub(d) {
                candidates.push(PageId(p));
            }
        }
    } else if let Some(&p) = s.fill_page(group).as_ref() {
        candidates.push(p);
    }
    while let Some(p) = s.insert_page(group, &candidates, payload.len())? {
        if let Some((slot, uniq)) = s.modify(p, |b| slotted::insert(b, kind, payload))? {
            if near.is_none() {
                s.set_fill_page(group, Some(p));
            }
            return Ok(Oid { page: p, slot, uniq });
        }
        // (Its room was looked at: not reached unless that look was wrong.)
        candidates.retain(|&c| c != p);
    }
    // A new page comes formatted (an empty slotted page); it is not
    // re-initialised here, since another transaction may already have used it.
    let p = s.allocate(group, near, PageType::Slotted)?;
    let placed = s.modify(p, |b| slotted::insert(b, kind, payload))?;
    let (slot, uniq) = placed.ok_or_else(|| {
        Error::corrupt(
            p,
            format!(
                "a record of {} bytes does not fit a newly allocated page",
                payload.len()
            ),
        )
    })?;
    s.set_fill_page(group, Some(p));
    Ok(Oid { page: p, slot, uniq })
}

/// Reads the raw slot `oid` names, checking the uniquifier.
fn slot<S: ObjectSpace>(s: &mut S, oid: Oid) -> Result<Option<(u8, Vec<u8>)>> {
    if !s.is_page_in_use(oid.page)? {
        return Ok(None);
    }
    s.with_slot(oid, |r| r.map(|r| (r.kind, r.data.to_vec())))
}

/// Finds where an object's record lives and what it holds.
fn locate<S: ObjectSpace>(s: &mut S, oid: Oid) -> Result<Located> {
    let (kind, data) = slot(s, oid)?.ok_or(Error::NotFound { oid })?;
    match kind {
        KIND_SMALL => Ok(Located {
            body: oid,
            moved: false,
            content: Content::Small(data),
        }),
        KIND_SMALL_PADDED => Ok(Located {
            body: oid,
            moved: false,
            content: Content::Small(decode_padded(&data, oid)?),
        }),
        KIND_LARGE => Ok(Located {
            body: oid,
            moved: false,
            content: Content::Large(LargeDescriptor::decode(&data, oid.page)?),
        }),
        KIND_FORWARD => {
            let target = Oid::from_slice(&data)
                .filter(|_| data.len() == FORWARD_SIZE)
                .ok_or_else(|| {
                    Error::corrupt(
                        oid.page,
                        format!("slot {} holds a malformed forwarding stub", oid.slot.0),
                    )
                })?;
            let bad = |why: &str| {
                Error::corrupt(
                    oid.page,
                    format!("forwarding stub in slot {} points to {target}, {why}", oid.slot.0),
                )
            };
            let Some((tkind, tdata)) = slot(s, target)? else {
                // The LSNs of the two page images read say which is older
                // (a reader at a snapshot given mismatched versions).
                let lsn_of = |s: &mut S, p: crate::ids::PageId| {
                    s.read(p, |b| crate::page::lsn(b).0)
                        .map_or_else(|e| format!("unreadable: {e}"), |l| l.to_string())
                };
                let (home, there) = (lsn_of(s, oid.page), lsn_of(s, target.page));
                return Err(bad(&format!(
                    "which does not exist (page {} read at LSN {home}, page {} at LSN {there})",
                    oid.page, target.page
                )));
            };
            if !matches!(tkind, KIND_MOVED_SMALL | KIND_MOVED_LARGE) {
                return Err(bad("which is not a moved record (a forwarding loop or chain)"));
            }
            if Oid::from_slice(&tdata) != Some(oid) {
                return Err(bad("whose back pointer names another object"));
            }
            s.stats_mut().forwards_followed += 1;
            let body = tdata[FORWARD_SIZE..].to_vec();
            let content = if tkind == KIND_MOVED_SMALL {
                Content::Small(body)
            } else {
                Content::Large(LargeDescriptor::decode(&body, target.page)?)
            };
            Ok(Located {
                body: target,
                moved: true,
                content,
            })
        }
        // An OID naming a moved body directly is no object's OID.
        KIND_MOVED_SMALL | KIND_MOVED_LARGE => Err(Error::NotFound { oid }),
        other => Err(Error::corrupt(
            oid.page,
            format!("slot {} has unknown kind {other}", oid.slot.0),
        )),
    }
}

/// Calls `f` with the OID and bytes of every small object stored whole in
/// its home slot on `page`: the objects that reading one of them brings into
/// memory anyway. Forwarding stubs, moved bodies and large objects are
/// skipped (each is read through its own OID). A page that is not an object
/// page in use yields nothing.
pub fn page_objects<S: ObjectSpace>(s: &mut S, page: PageId, f: impl FnMut(Oid, &[u8])) -> Result<()> {
    if !s.is_page_in_use(page)? {
        return Ok(());
    }
    s.read(page, |b| image_objects(page, b, f))?
}

/// [`page_objects`] over an image of `page` already in hand (a committed
/// image read without a lock, say: the caller locks each object before it
/// trusts its bytes). Anything but a slotted page yields nothing.
pub fn image_objects(page: PageId, b: &[u8], mut f: impl FnMut(Oid, &[u8])) -> Result<()> {
    if page::page_type(b) != Some(PageType::Slotted) {
        return Ok(());
    }
    for r in slotted::iter(b) {
        let (slot, rec) = r?;
        let oid = Oid {
            page,
            slot,
            uniq: rec.uniq,
        };
        match rec.kind {
            KIND_SMALL => f(oid, rec.data),
            KIND_SMALL_PADDED => f(oid, &decode_padded(rec.data, oid)?),
            _ => {}
        }
    }
    Ok(())
}

/// The home OIDs of the moved bodies an image of `page` holds (whose
/// objects' changes change this page too). Anything but a slotted page
/// holds none; a body too short for its back pointer is reported.
pub fn image_moved_homes(page: PageId, b: &[u8]) -> Result<Vec<Oid>> {
    if page::page_type(b) != Some(PageType::Slotted) {
        return Ok(Vec::new());
    }
    let mut homes = Vec::new();
    for r in slotted::iter(b) {
        let (slot, rec) = r?;
        if rec.kind == KIND_MOVED_SMALL {
            let home = Oid::from_slice(rec.data).ok_or_else(|| {
                Error::corrupt(
                    page,
                    format!("the moved body in slot {slot:?} is too short for its home's OID"),
                )
            })?;
            homes.push(home);
        }
    }
    Ok(homes)
}

/// A copy of `page` as it reads now, if it is an object (slotted) page in
/// use: the image a client keeps to read objects in place
/// ([`home_record`] finds one in it). `None` for any other page.
pub fn page_image<S: ObjectSpace>(s: &mut S, page: PageId) -> Result<Option<std::sync::Arc<[u8]>>> {
    if !s.is_page_in_use(page)? {
        return Ok(None);
    }
    s.read(page, |b| {
        (page::page_type(b) == Some(PageType::Slotted)).then(|| std::sync::Arc::from(b))
    })
}

/// Where `oid`'s bytes are in `image` (an image of its home page from
/// [`page_image`]), if it is a small object stored whole in its home slot.
/// `Ok(None)` for anything else (moved, padded, large or missing: read
/// those through [`read`], which says which); a damaged slot directory is
/// [`Error::Corrupt`] naming the page.
pub fn home_record(image: &[u8], oid: Oid) -> Result<Option<std::ops::Range<usize>>> {
    if page::page_type(image) != Some(PageType::Slotted) {
        return Ok(None);
    }
    Ok(match slotted::get(image, oid.slot)? {
        Some(r) if r.uniq == oid.uniq && r.kind == KIND_SMALL => {
            // `r.data` is a sub-slice of `image`: its offset is the
            // difference of their addresses.
            let start = (r.data.as_ptr() as usize).wrapping_sub(image.as_ptr() as usize);
            let end = start.saturating_add(r.data.len());
            (end <= image.len()).then_some(start..end)
        }
        _ => None,
    })
}

/// True if `oid` names a live object.
pub fn exists<S: ObjectSpace>(s: &mut S, oid: Oid) -> Result<bool> {
    match locate(s, oid) {
        Ok(_) => Ok(true),
        Err(Error::NotFound { .. }) => Ok(false),
        Err(e) => Err(e),
    }
}

/// True if the object is stored as a large object.
pub fn is_large<S: ObjectSpace>(s: &mut S, oid: Oid) -> Result<bool> {
    Ok(large_descriptor(s, oid)?.is_some())
}

/// The descriptor of the object if it is stored as a large object.
pub fn large_descriptor<S: ObjectSpace>(s: &mut S, oid: Oid) -> Result<Option<LargeDescriptor>> {
    Ok(match locate(s, oid)?.content {
        Content::Large(d) => Some(d),
        Content::Small(_) => None,
    })
}

/// The object's length in bytes.
pub fn len<S: ObjectSpace>(s: &mut S, oid: Oid) -> Result<u64> {
    Ok(match locate(s, oid)?.content {
        Content::Small(d) => d.len() as u64,
        Content::Large(d) => d.len,
    })
}

/// The longest object [`read`] (and [`read_with`] off its in-place path)
/// reads whole: 1 GiB. A longer one is [`Error::ObjectTooLarge`]; read it in
/// pieces with [`read_range`], or pass another limit to [`read_at_most`].
pub const READ_WHOLE_LEN_MAX: u64 = 1 << 30;

/// Reads a whole object of at most [`READ_WHOLE_LEN_MAX`] bytes. For large
/// objects prefer [`read_range`].
pub fn read<S: ObjectSpace>(s: &mut S, oid: Oid) -> Result<Vec<u8>> {
    read_at_most(s, oid, READ_WHOLE_LEN_MAX)
}

/// Reads a whole object of at most `len_max` bytes; a longer one is
/// [`Error::ObjectTooLarge`]. A large object's descriptor is checked against
/// the volume ([`large::check_fits`]) before its buffer is allocated, so a
/// damaged length is [`Error::Corrupt`] naming the page holding the
/// descriptor, never an allocation of what it claims.
pub fn read_at_most<S: ObjectSpace>(s: &mut S, oid: Oid, len_max: u64) -> Result<Vec<u8>> {
    let loc = locate(s, oid)?;
    let too_large = |len: u64| Error::ObjectTooLarge {
        oid,
        len,
        limit: len_max,
    };
    match loc.content {
        Content::Small(d) if d.len() as u64 > len_max => Err(too_large(d.len() as u64)),
        Content::Small(d) => Ok(d),
        Content::Large(d) => {
            large::check_fits(&d, s.page_size(), s.page_count(), loc.body.page)?;
            if d.len > len_max {
                return Err(too_large(d.len));
            }
            let len = usize::try_from(d.len).map_err(|_| too_large(d.len))?;
            let mut buf = vec![0u8; len];
            large::read(s, &d, 0, &mut buf)?;
            Ok(buf)
        }
    }
}

/// Calls `f` with the object's bytes: in place in its page (no copy) when
/// it is a small object in its home slot, else from a copy made by [`read`].
/// `f` runs while the page is latched for reading, so it must not block.
pub fn read_with<S: ObjectSpace, R>(s: &mut S, oid: Oid, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
    let mut f = Some(f);
    if s.is_page_in_use(oid.page)? {
        let direct = s.with_slot(oid, |r| match r {
            Some(r) if r.kind == KIND_SMALL => f.take().map(|f| f(r.data)),
            _ => None,
        })?;
        if let Some(r) = direct {
            return Ok(r);
        }
    }
    // Padded, forwarded, large or missing: the general path says which.
    let bytes = read(s, oid)?;
    f.take()
        .map(|f| f(&bytes))
        .ok_or_else(|| Error::corrupt(oid.page, "an object was read twice"))
}

/// Reads `buf.len()` bytes of the object starting at `offset`.
pub fn read_range<S: ObjectSpace>(s: &mut S, oid: Oid, offset: u64, buf: &mut [u8]) -> Result<()> {
    match locate(s, oid)?.content {
        Content::Small(d) => {
            let end = offset
                .checked_add(buf.len() as u64)
                .filter(|&e| e <= d.len() as u64)
                .ok_or_else(|| {
                    Error::InvalidArgument(format!(
                        "range {offset}+{} is past the end of object {oid} ({} bytes)",
                        buf.len(),
                        d.len()
                    ))
                })?;
            buf.copy_from_slice(&d[offset as usize..end as usize]);
            Ok(())
        }
        Content::Large(d) => large::read(s, &d, offset, buf),
    }
}

/// Replaces an object's bytes. It may grow or shrink, move to another page
/// (leaving a forwarding stub), or become a large object or a small one.
pub fn update<S: ObjectSpace>(s: &mut S, oid: Oid, data: &[u8]) -> Result<()> {
    let loc = locate(s, oid)?;
    let group = group_of(s, oid)?;
    if data.len() <= small_max(s.page_size()) {
        let (kind, payload) = small_payload(data);
        store_record(s, oid, &loc, kind, &payload)?;
        if let Content::Large(d) = loc.content {
            large::destroy(s, d)?;
        }
        return Ok(());
    }
    match loc.content {
        Content::Large(mut d) => {
            let old = d;
            large::write(s, &mut d, group, 0, data)?;
            if d.len > data.len() as u64 {
                large::truncate(s, &mut d, data.len() as u64)?;
            }
            if d != old {
                store_record(s, oid, &loc, KIND_LARGE, &d.encode())?;
            }
            Ok(())
        }
        Content::Small(_) => {
            let d = large::create(s, group, Some(oid.page), data)?;
            if let Err(e) = store_record(s, oid, &loc, KIND_LARGE, &d.encode()) {
                let _ = large::destroy(s, d);
                return Err(e);
            }
            Ok(())
        }
    }
}

fn group_of<S: ObjectSpace>(s: &S, oid: Oid) -> Result<GroupId> {
    s.group_of_page(oid.page)?.ok_or(Error::NotFound { oid })
}

/// Stores a home record (`kind` SMALL, SMALL_PADDED or LARGE) for the
/// object at `oid`: in its home slot if it fits, else in its moved body
/// if it fits there, else in a new body near home, re-pointing the stub.
fn store_record<S: ObjectSpace>(s: &mut S, oid: Oid, loc: &Located, kind: u8, payload: &[u8]) -> Result<()> {
    if s.update_slot(oid, kind, payload)? {
        if loc.moved {
            free_slot(s, loc.body)?;
        }
        return Ok(());
    }
    let body_kind = if kind == KIND_LARGE {
        KIND_MOVED_LARGE
    } else {
        KIND_MOVED_SMALL
    };
    let body_payload = match kind {
        KIND_SMALL_PADDED => {
            // A body needs no padding: it is never turned into a stub.
            let mut p = oid.to_bytes().to_vec();
            p.extend_from_slice(&decode_padded(payload, oid)?);
            p
        }
        _ => {
            let mut p = oid.to_bytes().to_vec();
            p.extend_from_slice(payload);
            p
        }
    };
    if loc.moved {
        let b = loc.body;
        if s.update_slot(b, body_kind, &body_payload)? {
            return Ok(());
        }
    }
    let group = group_of(s, oid)?;
    let body = place(s, group, Some(oid.page), body_kind, &body_payload)?;
    let stub = body.to_bytes();
    let ok = s.update_slot(oid, KIND_FORWARD, &stub)?;
    if !ok {
        return Err(Error::corrupt(
            oid.page,
            format!("slot {} cannot hold a forwarding stub", oid.slot.0),
        ));
    }
    s.stats_mut().records_moved += 1;
    if loc.moved {
        free_slot(s, loc.body)?;
    }
    Ok(())
}

/// Frees one slot; frees its page when it was the page's last record.
fn free_slot<S: ObjectSpace>(s: &mut S, at: Oid) -> Result<()> {
    let empty = s.delete_slot(at)?;
    if empty {
        s.forget_fill_page(at.page);
        s.free(at.page)?;
    }
    Ok(())
}

/// Deletes an object: its home slot, its moved body and its large-object
/// pages. Its OID answers `NotFound` from now on.
pub fn delete<S: ObjectSpace>(s: &mut S, oid: Oid) -> Result<()> {
    let loc = locate(s, oid)?;
    if let Content::Large(d) = loc.content {
        large::destroy(s, d)?;
    }
    if loc.moved {
        free_slot(s, loc.body)?;
    }
    free_slot(s, oid)
}

/// Writes `data` at `offset` of the object, extending it if the range
/// runs past the end (`offset` may not be past the end).
pub fn write_range<S: ObjectSpace>(s: &mut S, oid: Oid, offset: u64, data: &[u8]) -> Result<()> {
    let loc = locate(s, oid)?;
    match loc.content {
        Content::Small(mut bytes) => {
            let off = usize::try_from(offset)
                .ok()
                .filter(|&o| o <= bytes.len())
                .ok_or_else(|| {
                    Error::InvalidArgument(format!(
                        "offset {offset} is past the end of object {oid} ({} bytes)",
                        bytes.len()
                    ))
                })?;
            let end = off
                .checked_add(data.len())
                .ok_or_else(|| Error::InvalidArgument("range overflows".into()))?;
            if end > bytes.len() {
                bytes.resize(end, 0);
            }
            bytes[off..end].copy_from_slice(data);
            update(s, oid, &bytes)
        }
        Content::Large(mut d) => {
            let old = d;
            let group = group_of(s, oid)?;
            large::write(s, &mut d, group, offset, data)?;
            if d != old {
                store_record(s, oid, &loc, KIND_LARGE, &d.encode())?;
            }
            Ok(())
        }
    }
}

/// Appends `data` to the object.
pub fn append<S: ObjectSpace>(s: &mut S, oid: Oid, data: &[u8]) -> Result<()> {
    let len = len(s, oid)?;
    write_range(s, oid, len, data)
}

/// Cuts the object to `new_len` bytes (which may not exceed its length).
/// A large object cut below the small limit stays large.
pub fn truncate<S: ObjectSpace>(s: &mut S, oid: Oid, new_len: u64) -> Result<()> {
    let loc = locate(s, oid)?;
    match loc.content {
        Content::Small(mut bytes) => {
            if new_len > bytes.len() as u64 {
                return Err(Error::InvalidArgument(format!(
                    "cannot truncate object {oid} of {} bytes to {new_len}",
                    bytes.len()
                )));
            }
            bytes.truncate(new_len as usize);
            update(s, oid, &bytes)
        }
        Content::Large(mut d) => {
            let old = d;
            large::truncate(s, &mut d, new_len)?;
            if d != old {
                store_record(s, oid, &loc, KIND_LARGE, &d.encode())?;
            }
            Ok(())
        }
    }
}

/// Starts a scan of `group`'s objects in physical order (page by page,
/// slot by slot of each object's home slot).
pub fn scan<S: ObjectSpace>(s: &mut S, group: GroupId) -> Result<GroupScan> {
    let mut pages = s.group_pages(group)?;
    pages.reverse();
    Ok(GroupScan {
        pages,
        current: Vec::new(),
    })
}

/// Every object of a group, in physical order.
pub fn scan_all<S: ObjectSpace>(s: &mut S, group: GroupId) -> Result<Vec<Oid>> {
    let mut scan = scan(s, group)?;
    let mut out = Vec::new();
    while let Some(oid) = scan.next(s)? {
        out.push(oid);
    }
    Ok(out)
}

/// The largest small object for a page size: about a quarter page.
pub fn small_max(page_size: usize) -> usize {
    (page_size - page::HEADER_SIZE) / 4
}

/// True for slot kinds that are an object's home (as opposed to moved bodies).
pub fn is_home_kind(kind: u8) -> bool {
    matches!(kind, KIND_SMALL | KIND_SMALL_PADDED | KIND_LARGE | KIND_FORWARD)
}

/// A cursor over a group's objects; see [`scan`].
#[derive(Debug)]
pub struct GroupScan {
    /// Pages still to visit, last first.
    pages: Vec<PageId>,
    /// OIDs of the current page still to yield, last first.
    current: Vec<Oid>,
}

impl GroupScan {
    /// The next object, or `None` at the end of the group.
    pub fn next<S: ObjectSpace>(&mut self, s: &mut S) -> Result<Option<Oid>> {
        loop {
            if let Some(oid) = self.current.pop() {
                return Ok(Some(oid));
            }
            let Some(p) = self.pages.pop() else {
                return Ok(None);
            };
            let mut oids = s.read(p, |b| -> Result<Vec<Oid>> {
                if page::page_type(b) != Some(PageType::Slotted) {
                    return Ok(Vec::new());
                }
                let mut v = Vec::new();
                for entry in slotted::iter(b) {
                    let (slot, r) = entry?;
                    if is_home_kind(r.kind) {
                        v.push(Oid {
                            page: p,
                            slot,
                            uniq: r.uniq,
                        });
                    }
                }
                Ok(v)
            })??;
            oids.reverse();
            self.current = oids;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::txn::{Db, DbOptions, Txn};

    fn with_txn(f: impl FnOnce(&mut Txn)) {
        let dir = tempfile::tempdir().unwrap();
        let opts = DbOptions {
            background: false,
            ..DbOptions::default()
        };
        let db = Db::create(&dir.path().join("db"), &opts).unwrap();
        let mut txn = db.begin().unwrap();
        f(&mut txn);
        txn.abort().unwrap();
        db.close().unwrap();
    }

    /// A descriptor claiming 1 TiB (with the depth that length implies, so
    /// it decodes) in a volume of a few pages: reading the object whole must
    /// report the damage, not allocate 1 TiB and abort.
    #[test]
    fn large_descriptor_length_is_checked_before_allocating() {
        with_txn(|txn| {
            let oid = txn.create(GroupId::DEFAULT, &vec![7u8; 10_000]).unwrap();
            let Content::Large(d) = locate(txn, oid).unwrap().content else {
                panic!("expected a large object");
            };
            let probe = LargeDescriptor {
                len: large::LARGE_OBJECT_LEN_MAX,
                depth: 0,
                ..d
            };
            // The depth a 1 TiB object needs on this page size.
            let depth = (0..=large::LARGE_DEPTH_MAX)
                .find(|&depth| {
                    large::check_fits(&LargeDescriptor { depth, ..probe }, txn.page_size(), u32::MAX, oid.page).is_ok()
                })
                .unwrap();
            let damaged = LargeDescriptor { depth, ..probe };
            let ok = txn
                .modify(oid.page, |b| {
                    slotted::update(b, oid.slot, KIND_LARGE, &damaged.encode())
                })
                .unwrap();
            assert!(ok);
            let err = read(txn, oid).unwrap_err();
            assert!(matches!(err, Error::Corrupt { page, .. } if page == oid.page), "{err}");
            let err = read_with(txn, oid, |b| b.len()).unwrap_err();
            assert!(matches!(err, Error::Corrupt { .. }), "{err}");
        });
    }

    #[test]
    fn huge_object_read_whole_is_refused() {
        with_txn(|txn| {
            let data: Vec<u8> = (0..12_000u32).map(|i| i as u8).collect();
            let oid = txn.create(GroupId::DEFAULT, &data).unwrap();
            let err = read_at_most(txn, oid, 10_000).unwrap_err();
            assert!(
                matches!(err, Error::ObjectTooLarge { oid: o, len: 12_000, limit: 10_000 } if o == oid),
                "{err}"
            );
            assert!(err.to_string().contains("read_range"), "{err}");
            // The same object reads in ranges, and whole under the default limit.
            let mut part = vec![0u8; 5_000];
            read_range(txn, oid, 7_000, &mut part).unwrap();
            assert_eq!(part, data[7_000..]);
            assert_eq!(read(txn, oid).unwrap(), data);
            // Small objects obey the limit too.
            let small = txn.create(GroupId::DEFAULT, b"twelve bytes").unwrap();
            let err = read_at_most(txn, small, 5).unwrap_err();
            assert!(matches!(err, Error::ObjectTooLarge { len: 12, .. }), "{err}");
        });
    }
}
