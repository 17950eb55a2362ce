//! The reply of an OBJ_FETCH of pages ([`OBJ_S_PAGE`](super::OBJ_S_PAGE), [`OBJ_S_PAGE_AHEAD`](super::OBJ_S_PAGE_AHEAD)):
//! objects, then whole page images.

use super::{malformed, FetchedObject, MessageError, Reader, Writer, FETCHED_OBJECT_HEADER, FETCH_OBJECTS_MAX};

/// Objects in the reply of an [`OBJ_S_PAGE`](super::OBJ_S_PAGE) fetch, at most.
pub const BATCH_OBJECTS_MAX: usize = 1 << 16;

/// Page images in the reply of an [`OBJ_S_PAGE`](super::OBJ_S_PAGE) fetch, at most (one per
/// page named).
pub const BATCH_PAGES_MAX: usize = FETCH_OBJECTS_MAX;

/// Bytes of a page image in the reply of an [`OBJ_S_PAGE`](super::OBJ_S_PAGE) fetch, at most
/// (the largest page size).
pub const PAGE_IMAGE_MAX: usize = 65536;

/// A page image in the reply of an [`OBJ_S_PAGE`](super::OBJ_S_PAGE) fetch: the committed
/// image of a page named, locked S as a whole for the transaction, sent
/// with a right to cache it (nonzero) instead of its objects one by one —
/// the client reads the page's small objects in place from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FetchedPage<'a> {
    /// The page.
    pub page: u32,
    /// The right to cache the image (an epoch, never 0).
    pub right: u64,
    /// The image.
    pub image: &'a [u8],
}

/// The reply of an [`OBJ_S_PAGE`](super::OBJ_S_PAGE) fetch, decoded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FetchedBatch<'a> {
    /// The objects asked for, in order, then objects of their pages.
    pub objects: Vec<FetchedObject<'a>>,
    /// Whole images of pages named.
    pub pages: Vec<FetchedPage<'a>>,
}

/// Encodes the reply of an [`OBJ_S_PAGE`](super::OBJ_S_PAGE) fetch (the objects asked for, in
/// order, then those that come along with their pages, then the pages sent
/// whole): `count u32, (len u32, FetchedObject) × count, pages u32, (page
/// u32, right u64, len u32, image) × pages`; at most [`BATCH_OBJECTS_MAX`]
/// objects and [`BATCH_PAGES_MAX`] pages (the rest are left out).
pub fn encode_fetched_batch(objects: &[Vec<u8>], pages: &[FetchedPage<'_>]) -> Vec<u8> {
    let n = objects.len().min(BATCH_OBJECTS_MAX);
    let m = pages.len().min(BATCH_PAGES_MAX);
    let mut w = Writer::with_capacity(
        8 + objects.iter().map(|o| 4 + o.len()).sum::<usize>()
            + pages.iter().map(|p| 16 + p.image.len()).sum::<usize>(),
    );
    w.put(&(n as u32).to_le_bytes());
    for o in &objects[..n] {
        w.put_bytes32(o);
    }
    w.put(&(m as u32).to_le_bytes());
    for p in &pages[..m] {
        w.put(&p.page.to_le_bytes());
        w.put(&p.right.to_le_bytes());
        w.put_bytes32(p.image);
    }
    w.into_bytes()
}

/// Decodes the reply of an [`OBJ_S_PAGE`](super::OBJ_S_PAGE) fetch.
pub fn decode_fetched_batch(body: &[u8]) -> Result<FetchedBatch<'_>, MessageError> {
    let what = "OBJ_FETCH reply of pages";
    let mut r = Reader::within(what, body);
    let n = r.u32("object count")? as usize;
    if n > BATCH_OBJECTS_MAX {
        return Err(malformed(what, "at most 65,536 objects"));
    }
    r.check_count("a count", n as u64, 4 + FETCHED_OBJECT_HEADER)?;
    let mut objects = Vec::with_capacity(n);
    for _ in 0..n {
        objects.push(FetchedObject::decode(r.bytes32("an object")?)?);
    }
    let m = r.u32("page count")? as usize;
    if m > BATCH_PAGES_MAX {
        return Err(malformed(what, "at most 1,024 page images"));
    }
    r.check_count("a count", m as u64, 16)?;
    let mut pages = Vec::with_capacity(m);
    for _ in 0..m {
        let page = r.u32("page")?;
        let right = r.u64("right")?;
        let len = r.u32("image length")? as usize;
        if right == 0 {
            return Err(malformed(what, "a page image sent without a right to cache it"));
        }
        if len > PAGE_IMAGE_MAX {
            return Err(malformed(what, "a page image of at most 64 KiB"));
        }
        pages.push(FetchedPage {
            page,
            right,
            image: r.take(len, "image")?,
        });
    }
    r.finish("the body")?;
    Ok(FetchedBatch { objects, pages })
}
