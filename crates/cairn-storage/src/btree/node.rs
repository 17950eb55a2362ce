//! The b-tree node page: pure functions over one page image.
//!
//! The byte layout is drawn in the [module docs of `btree`](super). Every
//! function that reads a page validates the header ([`Node::parse`]) and each
//! cell it touches ([`Node::cell`]) before using an offset from it, and reports
//! damage as [`Error::Corrupt`] naming the page; no page content makes any of
//! them panic. Only [`check_page`] looks at cells it was not asked about
//! (overlaps, accounting, order, zeroed holes).
//!
//! Mutating functions run inside `PageAccess::modify` on a copy of the page,
//! so they may fail half-way without harm.

use crate::bytes::{get_u16, get_u32, put_u16, put_u32};
use std::cmp::Ordering;

use crate::error::{Error, Result};
use crate::ids::{GroupId, PageId};
use crate::page::{self, PageType};

/// Byte offset of the level (0 = leaf).
const OFF_LEVEL: usize = page::HEADER_SIZE;
/// Byte offset of the flags ([`FLAG_ROOT`], [`FLAG_UNIQUE`]).
const OFF_FLAGS: usize = OFF_LEVEL + 1;
/// Byte offset of the cell count (u16).
const OFF_COUNT: usize = OFF_FLAGS + 1;
/// Byte offset of the heap start (u32): the lowest cell byte, `page_size` when empty.
const OFF_HEAP_START: usize = OFF_COUNT + 2;
/// Byte offset of the garbage count (u32): heap bytes that no cell holds.
const OFF_GARBAGE: usize = OFF_HEAP_START + 4;
/// Byte offset of the left sibling (leaves; 0 = none).
const OFF_PREV: usize = OFF_GARBAGE + 4;
/// Byte offset of the right sibling (leaves; 0 = none).
const OFF_NEXT: usize = OFF_PREV + 4;
/// Byte offset of the leftmost child (inner nodes).
const OFF_CHILD0: usize = OFF_NEXT + 4;
/// Byte offset of the tree's group (the root only).
const OFF_GROUP: usize = OFF_CHILD0 + 4;
/// Byte offset of 4 reserved bytes (zero).
const OFF_RESERVED: usize = OFF_GROUP + 4;
/// Bytes of the common header plus the node header; the slot directory starts here.
pub const NODE_HEADER_SIZE: usize = OFF_RESERVED + 4;
const _: () = assert!(NODE_HEADER_SIZE == 56);

/// Bytes of one slot directory entry (the u16 offset of a cell).
pub const SLOT_SIZE: usize = 2;
/// Bytes before the key in a leaf cell: key length u16, value length u16.
pub const LEAF_CELL_HEADER: usize = 4;
/// Bytes before the key in an inner cell: key length u16, value length u16, child u32.
pub const INNER_CELL_HEADER: usize = 8;

/// Flag: this page is the root of its tree (the page that names the tree).
pub const FLAG_ROOT: u8 = 1;
/// Flag (root only): the tree holds at most one entry per key.
pub const FLAG_UNIQUE: u8 = 2;
const FLAGS_KNOWN: u8 = FLAG_ROOT | FLAG_UNIQUE;

/// Highest level a node may have. A root split needs a full root, so a tree
/// of height `h` once held about `2^h` entries; 64 is far beyond any volume.
pub const LEVEL_MAX: u8 = 64;

// Cell offsets are u16: a cell is at least 4 bytes and lies inside the page.
const _: () = assert!(page::PAGE_SIZE_MAX - LEAF_CELL_HEADER <= u16::MAX as usize);

/// Bytes of a page available to the slot directory and the cells.
pub fn capacity(page_size: usize) -> usize {
    page_size.saturating_sub(NODE_HEADER_SIZE)
}

/// The largest `key.len() + value.len()` a tree accepts on this page size:
/// four of the largest inner cells (a separator is never longer than the
/// entry it came from) with their slots fit one node, so every split of an
/// overfull node leaves two halves that fit.
pub fn key_value_max(page_size: usize) -> usize {
    (capacity(page_size) / 4).saturating_sub(SLOT_SIZE + INNER_CELL_HEADER)
}

/// Encodes a leaf cell. The caller has bounded `key.len() + value.len()`.
pub fn leaf_cell(key: &[u8], value: &[u8]) -> Vec<u8> {
    let mut c = Vec::with_capacity(LEAF_CELL_HEADER + key.len() + value.len());
    c.extend_from_slice(&(key.len() as u16).to_le_bytes());
    c.extend_from_slice(&(value.len() as u16).to_le_bytes());
    c.extend_from_slice(key);
    c.extend_from_slice(value);
    c
}

/// Encodes an inner cell: a separator and the child holding entries at or above it.
pub fn inner_cell(key: &[u8], value: &[u8], child: PageId) -> Vec<u8> {
    let mut c = Vec::with_capacity(INNER_CELL_HEADER + key.len() + value.len());
    c.extend_from_slice(&(key.len() as u16).to_le_bytes());
    c.extend_from_slice(&(value.len() as u16).to_le_bytes());
    c.extend_from_slice(&child.0.to_le_bytes());
    c.extend_from_slice(key);
    c.extend_from_slice(value);
    c
}

/// Decodes a cell built by [`leaf_cell`] or [`inner_cell`] (or copied out of
/// a validated page): key, value, and the child of an inner cell.
pub fn decode_cell(cell: &[u8], leaf: bool, id: PageId) -> Result<(&[u8], &[u8], PageId)> {
    let hdr = if leaf { LEAF_CELL_HEADER } else { INNER_CELL_HEADER };
    if cell.len() < hdr {
        return Err(Error::corrupt(id, "b-tree cell shorter than its header"));
    }
    let klen = usize::from(get_u16(cell, 0));
    let vlen = usize::from(get_u16(cell, 2));
    if hdr + klen + vlen != cell.len() {
        return Err(Error::corrupt(id, "b-tree cell lengths disagree with its size"));
    }
    let child = if leaf { PageId(0) } else { PageId(get_u32(cell, 4)) };
    Ok((&cell[hdr..hdr + klen], &cell[hdr + klen..], child))
}

/// Where a search is going, as a position in the order of (key, value) pairs.
#[derive(Clone, Copy, Debug)]
pub enum Target<'a> {
    /// Before every pair.
    Min,
    /// After every pair.
    Max,
    /// At this exact pair (`Pair(k, &[])` is just before every pair of key `k`).
    Pair(&'a [u8], &'a [u8]),
    /// Just after every pair of this key.
    After(&'a [u8]),
}

impl Target<'_> {
    /// Where the pair `(key, value)` lies relative to the target.
    pub fn cmp_pair(&self, key: &[u8], value: &[u8]) -> Ordering {
        match *self {
            Target::Min => Ordering::Greater,
            Target::Max => Ordering::Less,
            Target::Pair(k, v) => (key, value).cmp(&(k, v)),
            Target::After(k) => {
                if key <= k {
                    Ordering::Less
                } else {
                    Ordering::Greater
                }
            }
        }
    }
}

/// The fields of a node header a rebuild needs ([`build`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// 0 for a leaf.
    pub level: u8,
    /// [`FLAG_ROOT`], [`FLAG_UNIQUE`].
    pub flags: u8,
    /// Left sibling (leaves).
    pub prev: PageId,
    /// Right sibling (leaves).
    pub next: PageId,
    /// Leftmost child (inner nodes).
    pub child0: PageId,
    /// The tree's group (root only).
    pub group: GroupId,
}

/// A validated view of a node page's header; cells are validated on access.
#[derive(Clone, Copy, Debug)]
pub struct Node<'a> {
    buf: &'a [u8],
    /// The page.
    pub id: PageId,
    /// 0 for a leaf.
    pub level: u8,
    /// Root and unique flags.
    pub flags: u8,
    /// Cells (entries of a leaf, separators of an inner node).
    pub count: usize,
    /// Offset of the lowest cell byte.
    pub heap_start: usize,
    /// Heap bytes held by no cell.
    pub garbage: usize,
    /// Left sibling (leaves).
    pub prev: PageId,
    /// Right sibling (leaves).
    pub next: PageId,
    /// Leftmost child (inner nodes).
    pub child0: PageId,
    /// The tree's group (root only).
    pub group: GroupId,
}

impl<'a> Node<'a> {
    /// Validates the header of page `id` and returns a view of it.
    pub fn parse(buf: &'a [u8], id: PageId) -> Result<Node<'a>> {
        if page::validate_page_size(buf.len()).is_err() {
            return Err(Error::corrupt(id, format!("b-tree page image of {} bytes", buf.len())));
        }
        let leaf = match page::page_type(buf) {
            Some(PageType::BTreeLeaf) => true,
            Some(PageType::BTreeInner) => false,
            Some(t) => {
                return Err(Error::corrupt(
                    id,
                    format!("expected a b-tree page, found a {} page", t.name()),
                ));
            }
            None => {
                return Err(Error::corrupt(
                    id,
                    format!("unknown page type {}", page::page_type_byte(buf)),
                ));
            }
        };
        let n = Node {
            buf,
            id,
            level: buf[OFF_LEVEL],
            flags: buf[OFF_FLAGS],
            count: usize::from(get_u16(buf, OFF_COUNT)),
            heap_start: get_u32(buf, OFF_HEAP_START) as usize,
            garbage: get_u32(buf, OFF_GARBAGE) as usize,
            prev: PageId(get_u32(buf, OFF_PREV)),
            next: PageId(get_u32(buf, OFF_NEXT)),
            child0: PageId(get_u32(buf, OFF_CHILD0)),
            group: GroupId(get_u32(buf, OFF_GROUP)),
        };
        if leaf != (n.level == 0) {
            return Err(Error::corrupt(
                id,
                format!("b-tree {} page has level {}", kind(leaf), n.level),
            ));
        }
        if n.level > LEVEL_MAX {
            return Err(Error::corrupt(
                id,
                format!("b-tree level {} exceeds {LEVEL_MAX}", n.level),
            ));
        }
        if n.flags & !FLAGS_KNOWN != 0 || (n.flags & FLAG_UNIQUE != 0 && n.flags & FLAG_ROOT == 0) {
            return Err(Error::corrupt(
                id,
                format!("b-tree page has bad flags {:#04x}", n.flags),
            ));
        }
        let dir_end = NODE_HEADER_SIZE + SLOT_SIZE * n.count;
        if dir_end > n.heap_start || n.heap_start > buf.len() {
            return Err(Error::corrupt(
                id,
                format!(
                    "b-tree page: {} slots (ending at {dir_end}) and heap start {} do not fit a {}-byte page",
                    n.count,
                    n.heap_start,
                    buf.len()
                ),
            ));
        }
        if n.garbage > buf.len() - n.heap_start {
            return Err(Error::corrupt(
                id,
                format!("b-tree page: garbage {} exceeds the heap", n.garbage),
            ));
        }
        if leaf && n.child0 != PageId(0) {
            return Err(Error::corrupt(id, "b-tree leaf has a child pointer"));
        }
        if !leaf && (n.prev != PageId(0) || n.next != PageId(0) || n.child0 == PageId(0)) {
            return Err(Error::corrupt(
                id,
                "b-tree inner page has sibling links or no first child",
            ));
        }
        Ok(n)
    }

    /// True for a leaf.
    pub fn is_leaf(&self) -> bool {
        self.level == 0
    }

    /// True for the root page of a tree.
    pub fn is_root(&self) -> bool {
        self.flags & FLAG_ROOT != 0
    }

    /// True for the root page of a unique tree.
    pub fn is_unique(&self) -> bool {
        self.flags & FLAG_UNIQUE != 0
    }

    /// The header fields, for a rebuild.
    pub fn header(&self) -> Header {
        Header {
            level: self.level,
            flags: self.flags,
            prev: self.prev,
            next: self.next,
            child0: self.child0,
            group: self.group,
        }
    }

    fn dir_end(&self) -> usize {
        NODE_HEADER_SIZE + SLOT_SIZE * self.count
    }

    /// Bytes of the slot directory and the live cells.
    pub fn used_bytes(&self) -> usize {
        capacity(self.buf.len()) - self.free_bytes()
    }

    /// Bytes an insert could use after a compaction (gap plus garbage).
    pub fn free_bytes(&self) -> usize {
        self.heap_start - self.dir_end() + self.garbage
    }

    /// The validated byte range of cell `i` in the page.
    pub fn cell_range(&self, i: usize) -> Result<(usize, usize)> {
        if i >= self.count {
            return Err(Error::corrupt(
                self.id,
                format!("b-tree cell {i} of {} asked for", self.count),
            ));
        }
        let off = usize::from(get_u16(self.buf, NODE_HEADER_SIZE + SLOT_SIZE * i));
        let hdr = if self.is_leaf() {
            LEAF_CELL_HEADER
        } else {
            INNER_CELL_HEADER
        };
        let len = self.buf.len();
        if off < self.heap_start || off + hdr > len {
            return Err(Error::corrupt(
                self.id,
                format!("b-tree slot {i} points at {off}, outside the heap"),
            ));
        }
        let end = off + hdr + usize::from(get_u16(self.buf, off)) + usize::from(get_u16(self.buf, off + 2));
        if end > len {
            return Err(Error::corrupt(
                self.id,
                format!("b-tree cell {i} at {off} runs past the page end ({end} > {len})"),
            ));
        }
        Ok((off, end))
    }

    /// The bytes of cell `i`.
    pub fn cell(&self, i: usize) -> Result<&'a [u8]> {
        let (s, e) = self.cell_range(i)?;
        Ok(&self.buf[s..e])
    }

    /// The key and value of cell `i` (an entry of a leaf, a separator of an inner node).
    pub fn entry(&self, i: usize) -> Result<(&'a [u8], &'a [u8])> {
        let (k, v, _) = decode_cell(self.cell(i)?, self.is_leaf(), self.id)?;
        Ok((k, v))
    }

    /// Child `i` of an inner node, `0..=count` (child 0 is below the first separator).
    pub fn child(&self, i: usize) -> Result<PageId> {
        let c = if i == 0 {
            self.child0
        } else {
            decode_cell(self.cell(i - 1)?, false, self.id)?.2
        };
        if c == PageId(0) || c == self.id {
            return Err(Error::corrupt(self.id, format!("b-tree child {i} is page {c}")));
        }
        Ok(c)
    }

    /// Leaf: the index of the first entry at or after the target.
    pub fn lower_bound(&self, t: &Target<'_>) -> Result<usize> {
        let (mut lo, mut hi) = (0, self.count);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let (k, v) = self.entry(mid)?;
            if t.cmp_pair(k, v) == Ordering::Less {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        Ok(lo)
    }

    /// Inner node: the index of the child whose range holds the target (the
    /// number of separators at or before it).
    pub fn child_index(&self, t: &Target<'_>) -> Result<usize> {
        let (mut lo, mut hi) = (0, self.count);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let (k, v) = self.entry(mid)?;
            if t.cmp_pair(k, v) != Ordering::Greater {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        Ok(lo)
    }

    /// Copies of every cell, in order.
    pub fn cells(&self) -> Result<Vec<Vec<u8>>> {
        (0..self.count).map(|i| self.cell(i).map(<[u8]>::to_vec)).collect()
    }
}

fn kind(leaf: bool) -> &'static str {
    if leaf {
        "leaf"
    } else {
        "inner"
    }
}

/// Rewrites page `id` as a node with this header and these cells (in order),
/// switching its page type between leaf and inner as the level says. The
/// common header's LSN and uniquifier sequence are kept.
pub fn build(buf: &mut [u8], id: PageId, h: &Header, cells: &[Vec<u8>]) -> Result<()> {
    let need: usize = cells.iter().map(|c| SLOT_SIZE + c.len()).sum();
    if need > capacity(buf.len()) || cells.len() > usize::from(u16::MAX) {
        return Err(Error::corrupt(
            id,
            format!("b-tree node of {need} bytes does not fit the page (internal error)"),
        ));
    }
    let ty = if h.level == 0 {
        PageType::BTreeLeaf
    } else {
        PageType::BTreeInner
    };
    let lsn = page::lsn(buf);
    page::format(buf, id, ty);
    page::set_lsn(buf, lsn);
    buf[OFF_LEVEL] = h.level;
    buf[OFF_FLAGS] = h.flags;
    put_u32(buf, OFF_PREV, h.prev.0);
    put_u32(buf, OFF_NEXT, h.next.0);
    put_u32(buf, OFF_CHILD0, h.child0.0);
    put_u32(buf, OFF_GROUP, h.group.0);
    let mut heap = buf.len();
    for (i, c) in cells.iter().enumerate() {
        heap -= c.len();
        buf[heap..heap + c.len()].copy_from_slice(c);
        put_u16(buf, NODE_HEADER_SIZE + SLOT_SIZE * i, heap as u16);
    }
    put_u16(buf, OFF_COUNT, cells.len() as u16);
    put_u32(buf, OFF_HEAP_START, heap as u32);
    put_u32(buf, OFF_GARBAGE, 0);
    Ok(())
}

/// Slides every cell against the page end, turning garbage into gap.
fn compact(buf: &mut [u8], id: PageId) -> Result<()> {
    let n = Node::parse(buf, id)?;
    let (h, cells) = (n.header(), n.cells()?);
    build(buf, id, &h, &cells)
}

/// Inserts `cell` as cell `idx`, compacting first if the gap is too small.
/// Returns `false` (page unchanged) if it does not fit even then.
pub fn insert_cell(buf: &mut [u8], id: PageId, idx: usize, cell: &[u8]) -> Result<bool> {
    let n = Node::parse(buf, id)?;
    if idx > n.count {
        return Err(Error::corrupt(
            id,
            format!("b-tree insert at {idx} past {} cells", n.count),
        ));
    }
    let need = SLOT_SIZE + cell.len();
    if n.free_bytes() < need || n.count >= usize::from(u16::MAX) {
        return Ok(false);
    }
    if n.heap_start - n.dir_end() < need {
        compact(buf, id)?;
    }
    let n = Node::parse(buf, id)?;
    if n.heap_start - n.dir_end() < need {
        return Err(Error::corrupt(
            id,
            "b-tree page: its garbage count overstates the free space",
        ));
    }
    let (count, heap_start) = (n.count, n.heap_start);
    let off = heap_start - cell.len();
    buf[off..heap_start].copy_from_slice(cell);
    let slot = NODE_HEADER_SIZE + SLOT_SIZE * idx;
    buf.copy_within(slot..NODE_HEADER_SIZE + SLOT_SIZE * count, slot + SLOT_SIZE);
    put_u16(buf, slot, off as u16);
    put_u16(buf, OFF_COUNT, (count + 1) as u16);
    put_u32(buf, OFF_HEAP_START, off as u32);
    Ok(true)
}

/// Removes cell `idx`, zeroing its bytes; returns the cells left.
pub fn remove_cell(buf: &mut [u8], id: PageId, idx: usize) -> Result<usize> {
    let n = Node::parse(buf, id)?;
    let (s, e) = n.cell_range(idx)?;
    let (count, heap_start, garbage) = (n.count, n.heap_start, n.garbage);
    buf[s..e].fill(0);
    if s == heap_start {
        put_u32(buf, OFF_HEAP_START, e as u32);
    } else {
        put_u32(buf, OFF_GARBAGE, (garbage + (e - s)) as u32);
    }
    let slot = NODE_HEADER_SIZE + SLOT_SIZE * idx;
    let end = NODE_HEADER_SIZE + SLOT_SIZE * count;
    buf.copy_within(slot + SLOT_SIZE..end, slot);
    buf[end - SLOT_SIZE..end].fill(0);
    put_u16(buf, OFF_COUNT, (count - 1) as u16);
    Ok(count - 1)
}

/// Sets the left sibling of a leaf.
pub fn set_prev(buf: &mut [u8], id: PageId, prev: PageId) -> Result<()> {
    let n = Node::parse(buf, id)?;
    if !n.is_leaf() {
        return Err(Error::corrupt(id, "sibling link of a page that is not a b-tree leaf"));
    }
    put_u32(buf, OFF_PREV, prev.0);
    Ok(())
}

/// Sets the right sibling of a leaf.
pub fn set_next(buf: &mut [u8], id: PageId, next: PageId) -> Result<()> {
    let n = Node::parse(buf, id)?;
    if !n.is_leaf() {
        return Err(Error::corrupt(id, "sibling link of a page that is not a b-tree leaf"));
    }
    put_u32(buf, OFF_NEXT, next.0);
    Ok(())
}

/// Sets the leftmost child of an inner node.
pub fn set_child0(buf: &mut [u8], id: PageId, child: PageId) -> Result<()> {
    let n = Node::parse(buf, id)?;
    if n.is_leaf() || child == PageId(0) {
        return Err(Error::corrupt(
            id,
            "first child of a page that is not a b-tree inner page",
        ));
    }
    put_u32(buf, OFF_CHILD0, child.0);
    Ok(())
}

/// Verifies one b-tree page in isolation: header fields, every slot and cell
/// in bounds, cells disjoint and accounted for (`garbage` is exactly the heap
/// bytes no cell holds), gap and holes zero, entries strictly increasing by
/// (key, value) — by key alone on the root of a unique tree — and child and
/// sibling pointers that are not the page itself. It knows nothing of the
/// tree around the page; [`super::BTree::check`] does the rest.
pub fn check_page(buf: &[u8]) -> Result<()> {
    let id = if buf.len() >= page::HEADER_SIZE {
        page::page_id(buf)
    } else {
        PageId(0)
    };
    check_node(buf, id)
}

/// Whether `buf` is a b-tree page whose header says it is a tree's root.
/// Its type and header only, in constant time — what a server checks
/// before it runs a client's tree request from a page the client named;
/// the operation itself checks every node it reads, and the committed
/// pages were checked whole when they were committed.
pub fn is_root_page(buf: &[u8]) -> bool {
    buf.len() >= page::HEADER_SIZE && Node::parse(buf, page::page_id(buf)).is_ok_and(|n| n.is_root())
}

/// What a b-tree page says about its place in a tree: the fields a server
/// checks a client's image of the page against the pages around it
/// (`txn/client_check.rs`). Only for a page [`check_page`] accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PageLinks {
    /// 0 for a leaf.
    pub level: u8,
    /// The page is a tree's root.
    pub root: bool,
    /// The root of a unique tree.
    pub unique: bool,
    /// The tree's group (root only; else 0).
    pub group: GroupId,
    /// Left sibling (leaves; 0 for none).
    pub prev: PageId,
    /// Right sibling (leaves; 0 for none).
    pub next: PageId,
    /// The children of an inner node, in order (empty for a leaf).
    pub children: Vec<PageId>,
}

/// The links of b-tree page image `buf` (see [`PageLinks`]); an error for a
/// page that is not a well-formed b-tree node.
pub fn page_links(buf: &[u8]) -> Result<PageLinks> {
    check_page(buf)?;
    let id = page::page_id(buf);
    let n = Node::parse(buf, id)?;
    let children = if n.is_leaf() {
        Vec::new()
    } else {
        (0..=n.count).map(|i| n.child(i)).collect::<Result<Vec<_>>>()?
    };
    Ok(PageLinks {
        level: n.level,
        root: n.is_root(),
        unique: n.is_unique(),
        group: n.group,
        prev: n.prev,
        next: n.next,
        children,
    })
}

/// [`check_page`] for a page read as page `id`.
pub(super) fn check_node(buf: &[u8], id: PageId) -> Result<()> {
    let n = Node::parse(buf, id)?;
    if page::page_id(buf) != id {
        return Err(Error::corrupt(
            id,
            format!("page claims to be page {}", page::page_id(buf)),
        ));
    }
    if get_u32(buf, OFF_RESERVED) != 0 {
        return Err(Error::corrupt(id, "b-tree page: reserved header bytes are not zero"));
    }
    if !n.is_root() && n.group != GroupId(0) {
        return Err(Error::corrupt(id, "b-tree page that is not a root names a group"));
    }
    if n.prev == id || n.next == id {
        return Err(Error::corrupt(id, "b-tree leaf is its own sibling"));
    }
    if !buf[n.dir_end()..n.heap_start].iter().all(|&b| b == 0) {
        return Err(Error::corrupt(id, "b-tree page: free gap is not zero"));
    }
    let mut ranges = Vec::with_capacity(n.count);
    for i in 0..n.count {
        let (s, e) = n.cell_range(i)?;
        if !n.is_leaf() {
            n.child(i + 1)?;
        }
        ranges.push((s, e, i));
        if i > 0 {
            let (pk, pv) = n.entry(i - 1)?;
            let (k, v) = n.entry(i)?;
            let ordered = if n.is_unique() && n.is_leaf() {
                pk < k
            } else {
                (pk, pv) < (k, v)
            };
            if !ordered {
                return Err(Error::corrupt(
                    id,
                    format!("b-tree cells {} and {i} are out of order", i - 1),
                ));
            }
        }
    }
    if !n.is_leaf() {
        n.child(0)?;
    }
    ranges.sort_unstable();
    let mut at = n.heap_start;
    let mut holes = 0;
    for &(s, e, i) in &ranges {
        if s < at {
            return Err(Error::corrupt(id, format!("b-tree cell {i} overlaps another")));
        }
        if !buf[at..s].iter().all(|&b| b == 0) {
            return Err(Error::corrupt(id, "b-tree page: a hole in the heap is not zero"));
        }
        holes += s - at;
        at = e;
    }
    if !buf[at..].iter().all(|&b| b == 0) {
        return Err(Error::corrupt(id, "b-tree page: a hole in the heap is not zero"));
    }
    holes += buf.len() - at;
    if holes != n.garbage {
        return Err(Error::corrupt(
            id,
            format!("b-tree page: garbage is {} but {holes} heap bytes are free", n.garbage),
        ));
    }
    Ok(())
}
