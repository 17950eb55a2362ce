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

mod checked;
mod shrink;
mod write;

#[cfg(test)]
mod tests;

use crate::bytes::{get_u32, get_u64};
use std::cmp::min;
use std::fmt;

use crate::access::PageAccess;
use crate::error::{Error, Result};
use crate::ids::{GroupId, PageId};
use crate::page::{PageType, HEADER_SIZE, PAGE_SIZE_MAX, PAGE_SIZE_MIN};

use self::checked::{check_data_page, read_checked, usize_of, Cursor};
use self::shrink::{trim, walk_all};
use self::write::write_at;

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

/// What a large-object page says about its place in an object's tree: the
/// fields a server checks a client's image of the page against the pages
/// around it (`txn/client_check.rs`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LargePageLinks {
    /// The owner tag of the object the page belongs to.
    pub owner: u64,
    /// 0 for a data page, 1.. for an index page.
    pub level: u8,
    /// The number of the first data page under this page.
    pub first: u32,
    /// An index page's children, in order (empty for a data page).
    pub children: Vec<PageId>,
}

/// Checks large-object page image `p` on its own (the header, and an index
/// page's used child slots inside a volume of `volume_pages` pages and its
/// unused ones zero) and returns its links. A bad page is
/// [`Error::Corrupt`] naming it.
pub fn page_links(p: &[u8], volume_pages: u32) -> Result<LargePageLinks> {
    crate::page::validate_page_size(p.len())?;
    let id = crate::page::page_id(p);
    let bad = |reason: String| Error::corrupt(id, format!("large-object page: {reason}"));
    let index = match crate::page::page_type(p) {
        Some(PageType::LargeData) => false,
        Some(PageType::LargeIndex) => true,
        other => return Err(bad(format!("page type {other:?} is not a large-object kind"))),
    };
    let owner = get_u64(p, OFF_OWNER);
    let level = p[OFF_LEVEL];
    let count = usize::from(crate::bytes::get_u16(p, OFF_COUNT));
    if owner == 0 {
        return Err(bad("no owner tag".into()));
    }
    if p[OFF_RESERVED] != 0 {
        return Err(bad(format!("reserved header byte is {}", p[OFF_RESERVED])));
    }
    if !index {
        if level != 0 || count != 0 {
            return Err(bad(format!("a data page at level {level} with {count} children")));
        }
        return Ok(LargePageLinks {
            owner,
            level,
            first: get_u32(p, OFF_FIRST),
            children: Vec::new(),
        });
    }
    let fanout = index_fanout(p.len());
    if level == 0 || level > LARGE_DEPTH_MAX || count == 0 || count > fanout {
        return Err(bad(format!(
            "an index page at level {level} with {count} children (at most {fanout})"
        )));
    }
    let mut children = Vec::with_capacity(count);
    for slot in 0..fanout {
        let child = get_u32(p, OFF_BODY + CHILD_SIZE * slot);
        if slot >= count {
            if child != 0 {
                return Err(bad(format!("unused child slot {slot} holds page {child}")));
            }
        } else if child == 0 || child >= volume_pages || child == id.0 {
            return Err(bad(format!("child slot {slot} names page {child}")));
        } else {
            children.push(PageId(child));
        }
    }
    Ok(LargePageLinks {
        owner,
        level,
        first: get_u32(p, OFF_FIRST),
        children,
    })
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

/// The data pages an edit in place of the object changes: its first,
/// where a record's head is rewritten, and its last unless it is full,
/// where appended bytes go (a full one is left as it is: they go to a new
/// page). The index pages on the way are read, under the caller's locks.
/// Empty for an empty object.
pub fn edge_pages<A: PageAccess>(a: &mut A, d: &LargeDescriptor) -> Result<Vec<PageId>> {
    if d.len == 0 {
        return Ok(Vec::new());
    }
    let g = Geometry::new(a.page_size())?;
    let t = Tree::open(g, d)?;
    let mut cursor = Cursor::default();
    let mut out = vec![cursor.data_page(a, &t, 0)?.0];
    if t.pages > 1 && !d.len.is_multiple_of(g.payload) {
        out.push(cursor.data_page(a, &t, t.pages - 1)?.0);
    }
    Ok(out)
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
