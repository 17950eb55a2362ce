//! Large objects: records too big for a slotted page, kept in a page tree of
//! their own and read and written in byte ranges.
//!
//! **Tool interface** (see the crate docs): the upper layers read and write
//! large objects through [`crate::record::object`]; the page tree is public
//! for the fuzz targets and tests.
//!
//! An object's home slot (in a slotted page) holds only a fixed-size
//! [`LargeDescriptor`]: the length, the root page, the tree depth and an owner
//! tag. Everything else is in `LargeData` and `LargeIndex` pages reached from
//! the root. No operation holds the whole object in memory: reads, writes,
//! appends and truncates touch only the data pages in range plus the index
//! pages on their paths, and keep at most one page of child ids per tree level.
//!
//! # Definitions
//!
//! For page size `S`: every data page holds `P = S - 40` bytes of payload and
//! every index page up to `F = (S - 40) / 4` child ids (4 KiB pages: `P` =
//! 4056, `F` = 1014). An object of `len` bytes has `n = ceil(len / P)` data
//! pages; data page `i` holds bytes `i*P .. (i+1)*P`, so an offset maps to a
//! page by arithmetic. The *depth* is the smallest `d` with `F^d >= n` (0 when
//! `n <= 1`): at depth 0 the root is the only data page; at depth `d >= 1` the
//! root is an index page at level `d`, whose children are at level `d - 1`, down
//! to level 1, whose children are data pages (level 0).
//!
//! # Layout
//!
//! The descriptor, [`LargeDescriptor::ENCODED_SIZE`] bytes, little-endian:
//!
//! ```text
//!  offset size field
//!  0      8    len        object length in bytes (<= LARGE_OBJECT_LEN_MAX)
//!  8      4    root       root page id; 0 (no page) exactly when len = 0
//!  12     1    depth      tree depth; must equal the depth implied by len
//!  13     1    format     1
//!  14     2    reserved   0
//!  16     8    owner      owner tag of the object's pages (0: none taken yet)
//! ```
//!
//! Every large-object page starts with the common 24-byte page header (see
//! [`crate::page`]) and this 16-byte large-object header:
//!
//! ```text
//!  offset size field
//!  0      24   common page header (type LargeData or LargeIndex)
//!  24     8    owner      the object's owner tag
//!  32     4    first      number of the first data page under this page
//!                         (a data page: its own number)
//!  36     1    level      0 for data pages, 1.. for index pages
//!  37     1    reserved   0
//!  38     2    count      index page: number of children; data page: 0
//!  40     ..   body       data page:  P payload bytes
//!                         index page: F child page ids (u32), `count` used,
//!                                     the unused slots zero
//! ```
//!
//! # Invariants
//!
//! - **The shape is a function of `len`.** An index page at level `k` whose
//!   first data page is `f` covers data pages `f .. min(n, f + F^k)` and has
//!   exactly `ceil(min(n - f, F^k) / F^(k-1))` children; `f` is a multiple of
//!   `F^k`. So the checker knows every count, level and `first` in advance.
//! - **Every page knows its place.** The pair (`level`, `first`) differs for
//!   every position in the tree, and every page stores its own; a page reached
//!   from two places (or a pointer into the wrong position of the same object)
//!   fails at one of them, without a set of visited pages.
//! - **Every page knows its owner.** The owner tag is taken, when an object
//!   allocates its first page, from that page's uniquifier sequence (the
//!   common header's `uniq_seq`, which survives free and reuse): tag =
//!   `page_id << 32 | uniquifier`. No two objects ever get the same tag, so a
//!   pointer into another object's page is caught, and such a page is never
//!   freed or written.
//! - Bytes of the last data page past `len` are unspecified (truncate does not
//!   clear them); they are never read, and since writes leave no holes they are
//!   overwritten before the object grows over them.
//!
//! # Key operations
//!
//! - [`read()`] and the overwriting part of [`write()`] walk down from the root
//!   once and then keep the current path (one page of child ids per level), so
//!   a range touches each index page on it once.
//! - [`write()`] and [`append`] first *extend* the tree (allocating new data
//!   pages, each `near` the previous one, filling them, and adding index pages
//!   and a new root as needed), and only then overwrite the existing pages in
//!   range. If the extension fails (say the volume is full) the new pages are
//!   freed again and the object is as it was.
//! - [`truncate`] and [`destroy`] unlink pages from their parent before freeing
//!   them, and reduce the depth while the root has a single child.
//!
//! On any error the caller's descriptor is left as it was. Errors after pages
//! were changed (an I/O failure or damage found half-way) may leave those
//! changes behind; undoing them is the transaction's job.
//!
//! Nothing read from a page is trusted: page types, owner tags, levels,
//! `first`s, counts and child ids are all validated before use, and a bad one
//! is [`Error::Corrupt`]. When a pointer leads to a page that does not belong
//! at that place, the error names the page holding the pointer; when a page's
//! own contents are inconsistent, it names that page.

#[cfg(test)]
mod tests;

use crate::bytes::{get_u16, get_u32, get_u64, put_u16, put_u32};
use std::cmp::{max, min};
use std::fmt;

use crate::access::PageAccess;
use crate::error::{Error, Result};
use crate::ids::{GroupId, PageId};
use crate::page::{self, PageType, HEADER_SIZE, PAGE_SIZE_MAX, PAGE_SIZE_MIN};

/// The longest large object, in bytes (1 TiB).
pub const LARGE_OBJECT_LEN_MAX: u64 = 1 << 40;

/// The deepest page tree a descriptor may name. Objects up to
/// [`LARGE_OBJECT_LEN_MAX`] need depth 3 on 4 KiB pages; the slack is for the
/// tiny page sizes tests use.
pub const LARGE_DEPTH_MAX: u8 = 6;

/// Bytes of the large-object header that follows the common page header.
pub const LARGE_PAGE_HEADER_SIZE: usize = 16;

/// The id that stands for "no page" in a descriptor (page 0 is the volume
/// header, never part of an object).
const NO_PAGE: PageId = PageId(0);

const OFF_OWNER: usize = HEADER_SIZE;
const OFF_FIRST: usize = HEADER_SIZE + 8;
const OFF_LEVEL: usize = HEADER_SIZE + 12;
const OFF_RESERVED: usize = HEADER_SIZE + 13;
const OFF_COUNT: usize = HEADER_SIZE + 14;
const OFF_BODY: usize = HEADER_SIZE + LARGE_PAGE_HEADER_SIZE;
const CHILD_SIZE: usize = 4;
const _: () = assert!(OFF_COUNT + 2 == OFF_BODY);
const _: () = assert!(OFF_BODY == 40);

/// The smallest page size the tree works with: two children per index page.
const PAGE_SIZE_TREE_MIN: usize = OFF_BODY + 2 * CHILD_SIZE;

const fn payload_of(page_size: usize) -> u64 {
    (page_size - OFF_BODY) as u64
}

const fn fanout_of(page_size: usize) -> u64 {
    ((page_size - OFF_BODY) / CHILD_SIZE) as u64
}

// On the smallest volume page size, the longest object has its data-page
// numbers fit the u32 `first` field and its tree fit LARGE_DEPTH_MAX levels; on
// the largest, a child count fits the u16 `count` field.
const _: () = {
    let pages = LARGE_OBJECT_LEN_MAX.div_ceil(payload_of(PAGE_SIZE_MIN));
    assert!(pages <= u32::MAX as u64);
    let fanout = fanout_of(PAGE_SIZE_MIN);
    let mut capacity = 1u64;
    let mut depth = 0u8;
    while capacity < pages {
        capacity *= fanout;
        depth += 1;
    }
    assert!(depth <= LARGE_DEPTH_MAX);
    assert!(fanout_of(PAGE_SIZE_MAX) <= u16::MAX as u64);
};

/// Payload bytes of one data page for a page size.
pub fn data_payload_size(page_size: usize) -> usize {
    page_size.saturating_sub(OFF_BODY)
}

/// Child ids one index page holds for a page size.
pub fn index_fanout(page_size: usize) -> usize {
    page_size.saturating_sub(OFF_BODY) / CHILD_SIZE
}

/// What an object's home slot stores: enough to find and size its page tree.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct LargeDescriptor {
    /// Length of the object in bytes.
    pub len: u64,
    /// The root page: the only data page at depth 0, else the top index page.
    /// `PageId(0)` exactly when `len` is 0.
    pub root: PageId,
    /// Levels of index pages above the data pages.
    pub depth: u8,
    /// The tag every page of the object carries (see the module docs); 0 until
    /// the object first allocates a page.
    pub owner: u64,
}

impl LargeDescriptor {
    /// Bytes of an encoded descriptor.
    pub const ENCODED_SIZE: usize = 24;

    /// The format byte of this encoding.
    const FORMAT: u8 = 1;

    /// An empty object: no pages.
    pub const EMPTY: LargeDescriptor = LargeDescriptor {
        len: 0,
        root: NO_PAGE,
        depth: 0,
        owner: 0,
    };

    /// Encodes the descriptor in its fixed little-endian form.
    pub fn encode(&self) -> [u8; Self::ENCODED_SIZE] {
        let mut out = [0u8; Self::ENCODED_SIZE];
        out[0..8].copy_from_slice(&self.len.to_le_bytes());
        out[8..12].copy_from_slice(&self.root.0.to_le_bytes());
        out[12] = self.depth;
        out[13] = Self::FORMAT;
        out[16..24].copy_from_slice(&self.owner.to_le_bytes());
        out
    }

    /// Decodes and validates exactly [`Self::ENCODED_SIZE`] bytes. Nonsense
    /// (wrong size, format, reserved bytes, length over the limit, a root
    /// without a length or the other way round) is [`Error::Corrupt`] naming
    /// `page_for_errors`, the page the bytes came from.
    pub fn decode(bytes: &[u8], page_for_errors: PageId) -> Result<Self> {
        let bad = |reason: String| Error::corrupt(page_for_errors, format!("large-object descriptor: {reason}"));
        if bytes.len() != Self::ENCODED_SIZE {
            return Err(bad(format!("{} bytes, expected {}", bytes.len(), Self::ENCODED_SIZE)));
        }
        if bytes[13] != Self::FORMAT {
            return Err(bad(format!("unknown format {}", bytes[13])));
        }
        if bytes[14] != 0 || bytes[15] != 0 {
            return Err(bad("reserved bytes are not zero".to_string()));
        }
        let d = LargeDescriptor {
            len: get_u64(bytes, 0),
            root: PageId(get_u32(bytes, 8)),
            depth: bytes[12],
            owner: get_u64(bytes, 16),
        };
        if d.len > LARGE_OBJECT_LEN_MAX {
            return Err(bad(format!(
                "length {} exceeds the limit of {LARGE_OBJECT_LEN_MAX}",
                d.len
            )));
        }
        if d.depth > LARGE_DEPTH_MAX {
            return Err(bad(format!("depth {} exceeds the limit of {LARGE_DEPTH_MAX}", d.depth)));
        }
        if d.len == 0 {
            if d.root != NO_PAGE || d.depth != 0 {
                return Err(bad(format!(
                    "an empty object names root page {} at depth {}",
                    d.root, d.depth
                )));
            }
        } else {
            if d.root == NO_PAGE {
                return Err(bad(format!("an object of {} bytes has no root page", d.len)));
            }
            if d.owner == 0 {
                return Err(bad(format!("an object of {} bytes has no owner tag", d.len)));
            }
        }
        Ok(d)
    }
}

/// Creates a large object holding `data`, its first page allocated `near` the
/// given page. An empty `data` allocates nothing.
pub fn create<A: PageAccess>(a: &mut A, group: GroupId, near: Option<PageId>, data: &[u8]) -> Result<LargeDescriptor> {
    let mut d = LargeDescriptor::EMPTY;
    write_at(a, &mut d, group, near, 0, data)?;
    Ok(d)
}

/// Checks, before anything is allocated for it, that the object `d`
/// describes could exist on this page size in a volume of `volume_pages`
/// pages: its length within the page size's limit, its depth the one its
/// length implies, and its data pages no more than the volume holds. A
/// descriptor that fails is damaged: [`Error::Corrupt`] naming
/// `page_for_errors`, the page holding the descriptor. No page is read.
pub fn check_fits(d: &LargeDescriptor, page_size: usize, volume_pages: u32, page_for_errors: PageId) -> Result<()> {
    let g = Geometry::new(page_size)?;
    let t = Tree::open(g, d).map_err(|e| match e {
        Error::Corrupt { reason, .. } => Error::corrupt(page_for_errors, reason),
        other => other,
    })?;
    if t.pages > u64::from(volume_pages) {
        return Err(Error::corrupt(
            page_for_errors,
            format!(
                "large-object descriptor: {} bytes need {} data pages, the volume has only {volume_pages} pages",
                d.len, t.pages
            ),
        ));
    }
    Ok(())
}

/// Reads `buf.len()` bytes at `offset`. A range reaching past the end is
/// [`Error::InvalidArgument`].
pub fn read<A: PageAccess>(a: &mut A, d: &LargeDescriptor, offset: u64, buf: &mut [u8]) -> Result<()> {
    let end = offset
        .checked_add(buf.len() as u64)
        .filter(|&end| end <= d.len)
        .ok_or_else(|| {
            Error::InvalidArgument(format!(
                "read of {} bytes at offset {offset} is past the end of a large object of {} bytes",
                buf.len(),
                d.len
            ))
        })?;
    if buf.is_empty() {
        return Ok(());
    }
    let g = Geometry::new(a.page_size())?;
    let t = Tree::open(g, d)?;
    let mut cursor = Cursor::default();
    let mut pos = offset;
    while pos < end {
        let (index, in_page, n) = g.chunk(pos, end);
        let (id, via) = cursor.data_page(a, &t, index)?;
        let start = usize_of(pos - offset);
        let dst = &mut buf[start..start + n];
        read_checked(a, id, via, |p| {
            check_data_page(p, id, &t, index, via)?;
            dst.copy_from_slice(&p[OFF_BODY + in_page..OFF_BODY + in_page + n]);
            Ok(())
        })?;
        pos += n as u64;
    }
    Ok(())
}

/// Writes `data` at `offset`, overwriting and, past the end, extending the
/// object (new pages come from `group`). `offset` may be at most `d.len`: an
/// object has no holes. A length over [`LARGE_OBJECT_LEN_MAX`] is
/// [`Error::LimitExceeded`], refused before any page is touched.
pub fn write<A: PageAccess>(
    a: &mut A,
    d: &mut LargeDescriptor,
    group: GroupId,
    offset: u64,
    data: &[u8],
) -> Result<()> {
    write_at(a, d, group, None, offset, data)
}

/// Appends `data` at the end of the object; see [`write()`].
pub fn append<A: PageAccess>(a: &mut A, d: &mut LargeDescriptor, group: GroupId, data: &[u8]) -> Result<()> {
    let offset = d.len;
    write_at(a, d, group, None, offset, data)
}

/// Shortens the object to `new_len` bytes, freeing the pages it no longer
/// needs and lowering the tree's depth as far as possible. Growing is
/// [`Error::InvalidArgument`]: use [`write()`] or [`append`].
pub fn truncate<A: PageAccess>(a: &mut A, d: &mut LargeDescriptor, new_len: u64) -> Result<()> {
    if new_len > d.len {
        return Err(Error::InvalidArgument(format!(
            "cannot truncate a large object of {} bytes to {new_len} bytes",
            d.len
        )));
    }
    if new_len == d.len {
        return Ok(());
    }
    let g = Geometry::new(a.page_size())?;
    let mut t = Tree::open(g, d)?;
    trim(a, &mut t, g.pages_for(new_len))?;
    *d = t.descriptor(new_len);
    Ok(())
}

/// Frees every page of the object.
pub fn destroy<A: PageAccess>(a: &mut A, d: LargeDescriptor) -> Result<()> {
    let mut d = d;
    truncate(a, &mut d, 0)
}

/// Every page of the object, each index page before its children, validated
/// as by [`check`]. This is for the volume checker: it holds one id per page.
pub fn pages<A: PageAccess>(a: &mut A, d: &LargeDescriptor) -> Result<Vec<PageId>> {
    let mut out = Vec::new();
    walk_all(a, d, &mut |id| out.push(id))?;
    Ok(out)
}

/// Walks the whole tree and validates it: page types, owner tags, levels,
/// `first`s, child counts against `len` and `depth`, unused slots, and (by the
/// `first`s) that no page is reached twice. Damage is [`Error::Corrupt`]
/// naming the bad page. Memory is bounded by one page of ids per level.
pub fn check<A: PageAccess>(a: &mut A, d: &LargeDescriptor) -> Result<()> {
    walk_all(a, d, &mut |_| {})
}

// ---------------------------------------------------------------------------
// Geometry and tree state.

/// Sizes derived from the page size.
#[derive(Clone, Copy, Debug)]
struct Geometry {
    page_size: usize,
    /// Payload bytes per data page (`P`).
    payload: u64,
    /// Child ids per index page (`F`).
    fanout: u64,
}

impl Geometry {
    fn new(page_size: usize) -> Result<Geometry> {
        if !(PAGE_SIZE_TREE_MIN..=PAGE_SIZE_MAX).contains(&page_size) {
            return Err(Error::InvalidArgument(format!(
                "large objects need a page size from {PAGE_SIZE_TREE_MIN} to {PAGE_SIZE_MAX} bytes, not {page_size}"
            )));
        }
        Ok(Geometry {
            page_size,
            payload: payload_of(page_size),
            fanout: fanout_of(page_size),
        })
    }

    /// Data pages of an object of `len` bytes.
    fn pages_for(&self, len: u64) -> u64 {
        len.div_ceil(self.payload)
    }

    /// Data pages under one page at `level` (`F^level`, saturating).
    fn span(&self, level: u8) -> u64 {
        let mut span = 1u64;
        for _ in 0..level {
            span = span.saturating_mul(self.fanout);
        }
        span
    }

    /// The depth of a tree over `pages` data pages.
    fn depth_for(&self, pages: u64) -> u8 {
        let mut depth = 0u8;
        let mut capacity = 1u64;
        while capacity < pages {
            capacity = capacity.saturating_mul(self.fanout);
            depth += 1;
        }
        depth
    }

    /// Children of the index page at `level` (>= 1) whose first data page is
    /// `first`, in a tree of `pages` data pages.
    fn child_count(&self, level: u8, first: u64, pages: u64) -> u64 {
        if pages <= first {
            return 0;
        }
        min(pages - first, self.span(level)).div_ceil(self.span(level - 1))
    }

    /// The longest object this page size supports: the global limit, unless
    /// u32 data-page numbers or [`LARGE_DEPTH_MAX`] levels run out first.
    fn len_max(&self) -> u64 {
        let pages_max = min(u64::from(u32::MAX), self.span(LARGE_DEPTH_MAX));
        min(LARGE_OBJECT_LEN_MAX, pages_max.saturating_mul(self.payload))
    }

    /// For a position `pos < end`: the data page holding it, the offset in
    /// that page, and how many bytes of `pos..end` lie in that page.
    fn chunk(&self, pos: u64, end: u64) -> (u64, usize, usize) {
        let index = pos / self.payload;
        let in_page = pos - index * self.payload;
        let n = min(end - pos, self.payload - in_page);
        (index, usize_of(in_page), usize_of(n))
    }
}

/// A page's expected position in the tree.
#[derive(Clone, Copy, Debug)]
struct Place {
    level: u8,
    first: u64,
}

impl Place {
    fn page_type(self) -> PageType {
        if self.level == 0 {
            PageType::LargeData
        } else {
            PageType::LargeIndex
        }
    }
}

/// How a page was reached, for error reports.
#[derive(Clone, Copy, Debug)]
enum Via {
    /// It is the root named by the descriptor.
    Descriptor,
    /// Child slot `slot` of index page `page` points to it.
    Parent { page: PageId, slot: u64 },
}

impl Via {
    /// The error for page `id`, reached this way, not belonging here: it names
    /// the page holding the pointer (the root itself if there is none).
    fn misplaced(self, id: PageId, what: impl fmt::Display) -> Error {
        match self {
            Via::Descriptor => Error::corrupt(id, format!("large-object root page {what}")),
            Via::Parent { page, slot } => {
                Error::corrupt(page, format!("child slot {slot} points to page {id}, which {what}"))
            }
        }
    }

    /// Adds the path to an error about page `id` itself.
    fn context(self, id: PageId, e: Error) -> Error {
        match (self, e) {
            (Via::Parent { page, slot }, Error::Corrupt { page: bad, reason }) if bad == id => Error::Corrupt {
                page: bad,
                reason: format!("{reason} (reached from page {page}, child slot {slot})"),
            },
            (_, e) => e,
        }
    }
}

/// The working copy of a descriptor during an operation.
#[derive(Clone, Copy, Debug)]
struct Tree {
    g: Geometry,
    root: PageId,
    depth: u8,
    /// Data pages currently linked into the tree.
    pages: u64,
    owner: u64,
}

impl Tree {
    /// Validates `d` against the page size (the depth must be the one its
    /// length implies) and starts working on it.
    fn open(g: Geometry, d: &LargeDescriptor) -> Result<Tree> {
        let bad = |reason: String| Error::corrupt(d.root, format!("large-object descriptor: {reason}"));
        if d.len > g.len_max() {
            return Err(bad(format!(
                "length {} exceeds the limit of {} for {}-byte pages",
                d.len,
                g.len_max(),
                g.page_size
            )));
        }
        let pages = g.pages_for(d.len);
        let depth = g.depth_for(pages);
        if d.depth != depth {
            return Err(bad(format!(
                "depth {} for {} bytes, which need depth {depth}",
                d.depth, d.len
            )));
        }
        if (d.len == 0) != (d.root == NO_PAGE) {
            return Err(bad(format!("root page {} for {} bytes", d.root, d.len)));
        }
        if d.len > 0 && d.owner == 0 {
            return Err(bad(format!("no owner tag for {} bytes", d.len)));
        }
        Ok(Tree {
            g,
            root: d.root,
            depth: d.depth,
            pages,
            owner: d.owner,
        })
    }

    fn descriptor(&self, len: u64) -> LargeDescriptor {
        LargeDescriptor {
            len,
            root: self.root,
            depth: self.depth,
            owner: self.owner,
        }
    }
}

// ---------------------------------------------------------------------------
// Page access with validation.

fn usize_of(n: u64) -> usize {
    // Callers pass page offsets or lengths bounded by a caller's slice.
    usize::try_from(n).unwrap_or(usize::MAX)
}

fn child_offset(slot: u64) -> usize {
    OFF_BODY + CHILD_SIZE * usize_of(slot)
}

/// Reads page `id` with `f`, adding the path to errors about the page.
fn read_checked<A: PageAccess, R>(a: &mut A, id: PageId, via: Via, f: impl FnOnce(&[u8]) -> Result<R>) -> Result<R> {
    match a.read(id, f) {
        Ok(Ok(r)) => Ok(r),
        Ok(Err(e)) | Err(e) => Err(via.context(id, e)),
    }
}

/// Changes page `id` with `f`, adding the path to errors about the page.
fn modify_checked<A: PageAccess, R>(
    a: &mut A,
    id: PageId,
    via: Via,
    f: impl FnOnce(&mut [u8]) -> Result<R>,
) -> Result<R> {
    a.modify(id, f).map_err(|e| via.context(id, e))
}

fn check_len(p: &[u8], id: PageId, g: &Geometry) -> Result<()> {
    if p.len() != g.page_size {
        return Err(Error::corrupt(
            id,
            format!("page image is {} bytes, expected {}", p.len(), g.page_size),
        ));
    }
    Ok(())
}

/// Checks that page image `p` is the page of this object at `place`.
fn check_identity(p: &[u8], id: PageId, t: &Tree, place: Place, via: Via) -> Result<()> {
    check_len(p, id, &t.g)?;
    let want = place.page_type();
    match page::page_type(p) {
        Some(ty) if ty == want => {}
        Some(ty) => {
            return Err(via.misplaced(
                id,
                format_args!("is a {} page, expected a {} page", ty.name(), want.name()),
            ))
        }
        None => return Err(via.misplaced(id, format_args!("has unknown page type {}", page::page_type_byte(p)))),
    }
    let owner = get_u64(p, OFF_OWNER);
    if owner != t.owner {
        return Err(via.misplaced(
            id,
            format_args!("belongs to large object {owner:#018x}, not {:#018x}", t.owner),
        ));
    }
    let level = p[OFF_LEVEL];
    if level != place.level {
        return Err(via.misplaced(id, format_args!("is at level {level}, expected level {}", place.level)));
    }
    let first = u64::from(get_u32(p, OFF_FIRST));
    if first != place.first {
        return Err(via.misplaced(
            id,
            format_args!("starts at data page {first}, expected data page {}", place.first),
        ));
    }
    if p[OFF_RESERVED] != 0 {
        return Err(Error::corrupt(
            id,
            format!("reserved large-object header byte is {}", p[OFF_RESERVED]),
        ));
    }
    Ok(())
}

/// Checks that `p` is data page `index` of this object.
fn check_data_page(p: &[u8], id: PageId, t: &Tree, index: u64, via: Via) -> Result<()> {
    check_identity(p, id, t, Place { level: 0, first: index }, via)?;
    let count = get_u16(p, OFF_COUNT);
    if count != 0 {
        return Err(Error::corrupt(id, format!("data page has child count {count}")));
    }
    Ok(())
}

/// Reads index page `id`, expected at `place` with between `count_min` and
/// `count_max` children, and returns its children.
fn load_index<A: PageAccess>(
    a: &mut A,
    t: &Tree,
    id: PageId,
    place: Place,
    via: Via,
    count_min: u64,
    count_max: u64,
) -> Result<Vec<PageId>> {
    let fanout = t.g.fanout;
    read_checked(a, id, via, |p| {
        check_identity(p, id, t, place, via)?;
        let count = u64::from(get_u16(p, OFF_COUNT));
        let count_max = min(count_max, fanout);
        if count < count_min || count > count_max {
            let expected = if count_min == count_max {
                format!("{count_min}")
            } else {
                format!("{count_min} to {count_max}")
            };
            return Err(Error::corrupt(
                id,
                format!(
                    "index page at level {} has {count} children, expected {expected}",
                    place.level
                ),
            ));
        }
        let mut children = Vec::with_capacity(usize_of(count));
        for slot in 0..fanout {
            let child = get_u32(p, child_offset(slot));
            if slot < count {
                if child == NO_PAGE.0 {
                    return Err(Error::corrupt(id, format!("child slot {slot} is empty")));
                }
                children.push(PageId(child));
            } else if child != NO_PAGE.0 {
                return Err(Error::corrupt(
                    id,
                    format!("unused child slot {slot} holds page {child}"),
                ));
            }
        }
        Ok(children)
    })
}

/// The index pages on the path to the last data page looked up, so a range
/// reads each index page once. Only valid while the tree is not changed.
#[derive(Default)]
struct Cursor {
    /// `path[j]` is at level `depth - j`; `path[0]` is the root.
    path: Vec<CachedIndex>,
}

struct CachedIndex {
    id: PageId,
    first: u64,
    children: Vec<PageId>,
}

impl Cursor {
    /// The page holding data page `index` (< `t.pages`) and how it was reached.
    fn data_page<A: PageAccess>(&mut self, a: &mut A, t: &Tree, index: u64) -> Result<(PageId, Via)> {
        if t.depth == 0 {
            return Ok((t.root, Via::Descriptor));
        }
        let g = t.g;
        // Climb to the lowest cached page covering `index`.
        while let Some(node) = self.path.last() {
            let level = t.depth - (self.path.len() as u8 - 1);
            if index >= node.first && index - node.first < g.span(level) {
                break;
            }
            self.path.pop();
        }
        if self.path.is_empty() {
            let count = g.child_count(t.depth, 0, t.pages);
            let place = Place {
                level: t.depth,
                first: 0,
            };
            let children = load_index(a, t, t.root, place, Via::Descriptor, count, count)?;
            self.path.push(CachedIndex {
                id: t.root,
                first: 0,
                children,
            });
        }
        loop {
            let node = &self.path[self.path.len() - 1];
            let level = t.depth - (self.path.len() as u8 - 1);
            let span = g.span(level - 1);
            let slot = (index - node.first) / span;
            let via = Via::Parent { page: node.id, slot };
            let Some(&child) = node.children.get(usize_of(slot)) else {
                return Err(Error::corrupt(node.id, format!("no child for data page {index}")));
            };
            if level == 1 {
                return Ok((child, via));
            }
            let place = Place {
                level: level - 1,
                first: node.first + slot * span,
            };
            let count = g.child_count(place.level, place.first, t.pages);
            let children = load_index(a, t, child, place, via, count, count)?;
            self.path.push(CachedIndex {
                id: child,
                first: place.first,
                children,
            });
        }
    }
}

// ---------------------------------------------------------------------------
// Writing.

/// The bytes being written, at `offset` in the object.
struct Source<'d> {
    data: &'d [u8],
    offset: u64,
    payload: u64,
}

impl<'d> Source<'d> {
    /// The bytes of data page `index`, which must start at or after `offset`
    /// and before the end of the data.
    fn page(&self, index: u64) -> &'d [u8] {
        let start = index * self.payload - self.offset;
        let end = min(start + self.payload, self.data.len() as u64);
        &self.data[usize_of(start)..usize_of(end)]
    }
}

fn write_at<A: PageAccess>(
    a: &mut A,
    d: &mut LargeDescriptor,
    group: GroupId,
    near: Option<PageId>,
    offset: u64,
    data: &[u8],
) -> Result<()> {
    if offset > d.len {
        return Err(Error::InvalidArgument(format!(
            "write at offset {offset} would leave a hole after the end of a large object of {} bytes",
            d.len
        )));
    }
    let limit_exceeded = |value: u64, limit: u64| Error::LimitExceeded {
        what: "large object length",
        value,
        limit,
    };
    let end = offset
        .checked_add(data.len() as u64)
        .ok_or_else(|| limit_exceeded(u64::MAX, LARGE_OBJECT_LEN_MAX))?;
    if end > LARGE_OBJECT_LEN_MAX {
        return Err(limit_exceeded(end, LARGE_OBJECT_LEN_MAX));
    }
    if data.is_empty() {
        return Ok(());
    }
    let g = Geometry::new(a.page_size())?;
    if end > g.len_max() {
        return Err(limit_exceeded(end, g.len_max()));
    }
    let mut t = Tree::open(g, d)?;
    let pages_old = t.pages;
    let pages_new = max(pages_old, g.pages_for(end));
    let src = Source {
        data,
        offset,
        payload: g.payload,
    };
    extend(a, &mut t, group, near, pages_new, &src)?;
    // The part of the range on pages that existed before.
    let overwrite_end = min(end, pages_old * g.payload);
    if offset < overwrite_end {
        let part = &data[..usize_of(overwrite_end - offset)];
        if let Err(e) = overwrite(a, &t, offset, part) {
            // Give back the pages the extension added; the error is what counts.
            let _ = trim(a, &mut t, pages_old);
            return Err(e);
        }
    }
    *d = t.descriptor(max(d.len, end));
    Ok(())
}

/// Writes `data` at `offset` over existing data pages.
fn overwrite<A: PageAccess>(a: &mut A, t: &Tree, offset: u64, data: &[u8]) -> Result<()> {
    let g = t.g;
    let end = offset + data.len() as u64;
    let mut cursor = Cursor::default();
    let mut pos = offset;
    while pos < end {
        let (index, in_page, n) = g.chunk(pos, end);
        let (id, via) = cursor.data_page(a, t, index)?;
        let start = usize_of(pos - offset);
        let src = &data[start..start + n];
        modify_checked(a, id, via, |p| {
            check_data_page(p, id, t, index, via)?;
            p[OFF_BODY + in_page..OFF_BODY + in_page + n].copy_from_slice(src);
            Ok(())
        })?;
        pos += n as u64;
    }
    Ok(())
}

/// Grows the tree to `pages_new` data pages filled from `src`. On failure the
/// pages added are freed again and `t` is as it was.
fn extend<A: PageAccess>(
    a: &mut A,
    t: &mut Tree,
    group: GroupId,
    near: Option<PageId>,
    pages_new: u64,
    src: &Source<'_>,
) -> Result<()> {
    let pages_old = t.pages;
    if pages_new <= pages_old {
        return Ok(());
    }
    match extend_tree(a, t, group, near, pages_new, src) {
        Ok(()) => {
            t.pages = pages_new;
            Ok(())
        }
        Err(e) => {
            // Best effort; the first error is the one to report.
            let _ = trim(a, t, pages_old);
            Err(e)
        }
    }
}

fn extend_tree<A: PageAccess>(
    a: &mut A,
    t: &mut Tree,
    group: GroupId,
    near: Option<PageId>,
    pages_new: u64,
    src: &Source<'_>,
) -> Result<()> {
    let depth_new = t.g.depth_for(pages_new);
    if t.root == NO_PAGE {
        let top = Place {
            level: depth_new,
            first: 0,
        };
        let payload = if depth_new == 0 { src.page(0) } else { &[] };
        t.root = alloc_page(a, t, group, near, top, &[], payload)?;
        t.depth = depth_new;
        if depth_new == 0 {
            return Ok(());
        }
    }
    while t.depth < depth_new {
        let top = Place {
            level: t.depth + 1,
            first: 0,
        };
        let old_root = t.root;
        t.root = alloc_page(a, t, group, Some(old_root), top, &[old_root], &[])?;
        t.depth += 1;
    }
    let top = Place {
        level: t.depth,
        first: 0,
    };
    let mut grow = Grow {
        group,
        pages_new,
        src,
        prev: near,
    };
    extend_node(a, t, &mut grow, t.root, top, Via::Descriptor)
}

/// What an extension carries down the tree.
struct Grow<'s, 'd> {
    group: GroupId,
    /// Data pages the tree is growing to.
    pages_new: u64,
    src: &'s Source<'d>,
    /// The last data page so far: the allocation hint for the next page.
    prev: Option<PageId>,
}

/// Adds children to index page `id` (and below) until the subtree covers
/// its share of `grow.pages_new` data pages.
fn extend_node<A: PageAccess>(
    a: &mut A,
    t: &mut Tree,
    grow: &mut Grow<'_, '_>,
    id: PageId,
    place: Place,
    via: Via,
) -> Result<()> {
    let g = t.g;
    let count_old = g.child_count(place.level, place.first, t.pages);
    let children = load_index(a, t, id, place, via, count_old, count_old)?;
    let count_new = g.child_count(place.level, place.first, grow.pages_new);
    if place.level == 1 {
        if let Some(&last) = children.last() {
            grow.prev = Some(last);
        }
        // Allocate and fill the new data pages, then link them in one change.
        let mut added = Vec::with_capacity(usize_of(count_new - count_old));
        let mut result = Ok(());
        for slot in count_old..count_new {
            let index = place.first + slot;
            let data_place = Place { level: 0, first: index };
            let payload = grow.src.page(index);
            match alloc_page(a, t, grow.group, grow.prev, data_place, &[], payload) {
                Ok(page) => {
                    added.push(page);
                    grow.prev = Some(page);
                }
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        if result.is_ok() {
            result = link_children(a, id, via, count_old, &added);
        }
        if result.is_err() {
            for page in added {
                let _ = a.free(page);
            }
        }
        return result;
    }
    let span = g.span(place.level - 1);
    if count_old > 0 {
        let slot = count_old - 1;
        let child_place = Place {
            level: place.level - 1,
            first: place.first + slot * span,
        };
        let child_via = Via::Parent { page: id, slot };
        extend_node(a, t, grow, children[usize_of(slot)], child_place, child_via)?;
    }
    for slot in count_old..count_new {
        let child_place = Place {
            level: place.level - 1,
            first: place.first + slot * span,
        };
        let child = alloc_page(a, t, grow.group, grow.prev, child_place, &[], &[])?;
        if let Err(e) = link_children(a, id, via, slot, &[child]) {
            let _ = a.free(child);
            return Err(e);
        }
        let child_via = Via::Parent { page: id, slot };
        extend_node(a, t, grow, child, child_place, child_via)?;
    }
    Ok(())
}

/// Appends `new` to the children of index page `id`, which has `count_before`.
fn link_children<A: PageAccess>(a: &mut A, id: PageId, via: Via, count_before: u64, new: &[PageId]) -> Result<()> {
    if new.is_empty() {
        return Ok(());
    }
    let page_size = a.page_size();
    let fanout = fanout_of(page_size);
    let count_after = count_before + new.len() as u64;
    modify_checked(a, id, via, |p| {
        if p.len() != page_size {
            return Err(Error::corrupt(id, "page image has the wrong size"));
        }
        let count = u64::from(get_u16(p, OFF_COUNT));
        if count != count_before || count_after > fanout {
            return Err(Error::corrupt(
                id,
                format!("index page has {count} children, expected {count_before}"),
            ));
        }
        for (k, child) in new.iter().enumerate() {
            put_u32(p, child_offset(count_before + k as u64), child.0);
        }
        put_u16(p, OFF_COUNT, count_after as u16);
        Ok(())
    })
}

/// Allocates a large-object page at `place`, with the given children (index
/// pages) or payload (data pages). The first page an object ever allocates
/// gives it its owner tag.
fn alloc_page<A: PageAccess>(
    a: &mut A,
    t: &mut Tree,
    group: GroupId,
    near: Option<PageId>,
    place: Place,
    children: &[PageId],
    payload: &[u8],
) -> Result<PageId> {
    let first = u32::try_from(place.first).map_err(|_| Error::LimitExceeded {
        what: "large object data pages",
        value: place.first + 1,
        limit: u64::from(u32::MAX),
    })?;
    let ty = place.page_type();
    let id = a.allocate(group, near, ty)?;
    let g = t.g;
    let owner_now = t.owner;
    let written = a.modify(id, |p| {
        check_len(p, id, &g)?;
        page::expect_type(p, id, ty)?;
        let owner = if owner_now != 0 {
            owner_now
        } else {
            let uniq = page::uniq_seq(p);
            let next = uniq.checked_add(1).ok_or(Error::LimitExceeded {
                what: "page uniquifier sequence",
                value: u64::from(uniq) + 1,
                limit: u64::from(u32::MAX),
            })?;
            page::set_uniq_seq(p, next);
            (u64::from(id.0) << 32) | u64::from(uniq)
        };
        p[OFF_OWNER..].fill(0);
        p[OFF_OWNER..OFF_OWNER + 8].copy_from_slice(&owner.to_le_bytes());
        put_u32(p, OFF_FIRST, first);
        p[OFF_LEVEL] = place.level;
        put_u16(p, OFF_COUNT, children.len() as u16);
        for (slot, child) in children.iter().enumerate() {
            put_u32(p, child_offset(slot as u64), child.0);
        }
        p[OFF_BODY..OFF_BODY + payload.len()].copy_from_slice(payload);
        Ok(owner)
    });
    match written {
        Ok(owner) => {
            t.owner = owner;
            Ok(id)
        }
        Err(e) => {
            let _ = a.free(id);
            Err(e)
        }
    }
}

// ---------------------------------------------------------------------------
// Shrinking and walking.

/// Cuts the tree down to its first `keep` data pages (at most the pages it
/// has), freeing the rest, and lowers the depth to the one `keep` needs. Counts
/// are read from the pages, so this also undoes a half-done extension.
fn trim<A: PageAccess>(a: &mut A, t: &mut Tree, keep: u64) -> Result<()> {
    if t.root == NO_PAGE {
        return Ok(());
    }
    let top = Place {
        level: t.depth,
        first: 0,
    };
    if keep == 0 {
        free_subtree(a, t, t.root, top, Via::Descriptor)?;
        t.root = NO_PAGE;
        t.depth = 0;
        t.pages = 0;
        return Ok(());
    }
    if t.depth > 0 {
        trim_node(a, t, t.root, top, Via::Descriptor, keep)?;
    }
    let depth_keep = t.g.depth_for(keep);
    while t.depth > depth_keep {
        let root = t.root;
        let top = Place {
            level: t.depth,
            first: 0,
        };
        let children = load_index(a, t, root, top, Via::Descriptor, 1, 1)?;
        let child = children[0];
        let child_place = Place {
            level: t.depth - 1,
            first: 0,
        };
        let via = Via::Parent { page: root, slot: 0 };
        read_checked(a, child, via, |p| check_identity(p, child, t, child_place, via))?;
        a.free(root)?;
        t.root = child;
        t.depth -= 1;
    }
    t.pages = keep;
    Ok(())
}

/// Trims the subtree of index page `id` to the data pages before `keep`
/// (`keep > place.first`: the page itself stays).
fn trim_node<A: PageAccess>(a: &mut A, t: &Tree, id: PageId, place: Place, via: Via, keep: u64) -> Result<()> {
    let g = t.g;
    let count_keep = g.child_count(place.level, place.first, keep);
    let children = load_index(a, t, id, place, via, count_keep, g.fanout)?;
    let span = g.span(place.level - 1);
    let last = count_keep - 1;
    if place.level > 1 {
        let child_place = Place {
            level: place.level - 1,
            first: place.first + last * span,
        };
        let child_via = Via::Parent { page: id, slot: last };
        trim_node(a, t, children[usize_of(last)], child_place, child_via, keep)?;
    }
    let count = children.len() as u64;
    if count > count_keep {
        // Unlink first, so the tree never points at a freed page.
        let page_size = g.page_size;
        modify_checked(a, id, via, |p| {
            if p.len() != page_size {
                return Err(Error::corrupt(id, "page image has the wrong size"));
            }
            put_u16(p, OFF_COUNT, count_keep as u16);
            p[child_offset(count_keep)..child_offset(count)].fill(0);
            Ok(())
        })?;
        for slot in count_keep..count {
            let child_place = Place {
                level: place.level - 1,
                first: place.first + slot * span,
            };
            let child_via = Via::Parent { page: id, slot };
            free_subtree(a, t, children[usize_of(slot)], child_place, child_via)?;
        }
    }
    Ok(())
}

/// Frees page `id` and everything under it, after checking each page belongs
/// to this object at the expected place (a bad pointer never frees a page of
/// another object).
fn free_subtree<A: PageAccess>(a: &mut A, t: &Tree, id: PageId, place: Place, via: Via) -> Result<()> {
    if place.level == 0 {
        read_checked(a, id, via, |p| check_data_page(p, id, t, place.first, via))?;
        return a.free(id);
    }
    let children = load_index(a, t, id, place, via, 0, t.g.fanout)?;
    let span = t.g.span(place.level - 1);
    for (slot, &child) in children.iter().enumerate() {
        let slot = slot as u64;
        let child_place = Place {
            level: place.level - 1,
            first: place.first + slot * span,
        };
        free_subtree(a, t, child, child_place, Via::Parent { page: id, slot })?;
    }
    a.free(id)
}

fn walk_all<A: PageAccess>(a: &mut A, d: &LargeDescriptor, visit: &mut dyn FnMut(PageId)) -> Result<()> {
    let g = Geometry::new(a.page_size())?;
    let t = Tree::open(g, d)?;
    if t.root == NO_PAGE {
        return Ok(());
    }
    let top = Place {
        level: t.depth,
        first: 0,
    };
    walk(a, &t, t.root, top, Via::Descriptor, visit)
}

/// Validates page `id` at `place` and everything under it, calling `visit`
/// on each page, parents first.
fn walk<A: PageAccess>(
    a: &mut A,
    t: &Tree,
    id: PageId,
    place: Place,
    via: Via,
    visit: &mut dyn FnMut(PageId),
) -> Result<()> {
    if place.level == 0 {
        read_checked(a, id, via, |p| check_data_page(p, id, t, place.first, via))?;
        visit(id);
        return Ok(());
    }
    let g = t.g;
    let count = g.child_count(place.level, place.first, t.pages);
    let children = load_index(a, t, id, place, via, count, count)?;
    visit(id);
    let span = g.span(place.level - 1);
    for (slot, &child) in children.iter().enumerate() {
        let slot = slot as u64;
        let child_place = Place {
            level: place.level - 1,
            first: place.first + slot * span,
        };
        walk(a, t, child, child_place, Via::Parent { page: id, slot }, visit)?;
    }
    Ok(())
}
