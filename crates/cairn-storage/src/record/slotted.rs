//! Slotted record pages: small objects, forwarding stubs and large-object
//! descriptors, each in a numbered slot of one page.
//!
//! **Tool interface** (see the crate docs): the upper layers store objects
//! through [`crate::record::object`]; the page format is public for the fuzz
//! targets and the damage tests.
//!
//! These are pure functions over a whole page image (4–64 KiB, a power of two)
//! whose common header ([`crate::page`]) says [`PageType::Slotted`]. Mutating
//! functions run inside `PageAccess::modify` on a copy of the page, so they may
//! return an error half-way without harm.
//!
//! # Layout
//!
//! ```text
//!  offset                size   field
//!  0                     24     common page header (page::HEADER_SIZE);
//!                               its uniq_seq is the next uniquifier handed out
//!  24                    2      slot_count  entries in the slot directory, live and free
//!  26                    2      flags       0 (reserved)
//!  28                    4      heap_size   bytes of the heap: [page_size - heap_size, page_size)
//!  32                    4      garbage     bytes inside the heap held by no live record
//!  36                    10·n   slot directory: entry i at 36 + 10·i, growing up
//!  36 + 10·n             ..     free gap (all zero)
//!  page_size - heap_size ..     heap: record payloads growing down from the page end,
//!                               in any order, with zeroed holes left by deletes
//!
//!  slot entry (10 bytes, little-endian)
//!  0      2      offset   first byte of the payload; 0 for an empty payload
//!  2      2      length   payload bytes
//!  4      4      uniq     uniquifier given to the slot when it was allocated
//!  8      1      kind     caller's tag; 0 = free slot (entry all zero)
//!  9      1      reserved 0
//! ```
//!
//! The header fields are u32 because a 64 KiB page can overflow a u16 there;
//! slot offsets and lengths fit u16 on every page size (a payload starts at
//! most at byte 65 535 and is at most [`max_payload`] bytes long), which keeps
//! the per-object overhead at 10 bytes.
//!
//! A page whose body is all zero (what `page::format` leaves) is a valid empty
//! slotted page; [`init`] produces exactly that.
//!
//! # Invariants (verified by [`check`])
//!
//! - `36 + 10·slot_count <= page_size - heap_size`: directory and heap never meet;
//!   `slot_count <= SLOT_COUNT_MAX`.
//! - A free slot's entry is all zero. A live slot has `kind != 0`, a uniquifier
//!   in `1..uniq_seq` that no other live slot has, and either length 0 and
//!   offset 0, or a payload that lies inside the heap.
//! - No two payloads overlap, and `garbage == heap_size - Σ live lengths`.
//! - The last directory entry is live: [`delete`] trims trailing free slots.
//! - The free gap and the holes in the heap are zero, so a page image shipped
//!   to a client never carries a deleted object's bytes.
//!
//! Every function that reads the page validates the header and each entry it
//! touches before using an offset from it, and reports damage as
//! [`Error::Corrupt`] naming the page and slot; no page content makes any of
//! them panic. Only [`check`] looks for damage in entries it was not asked
//! about (overlaps, duplicate uniquifiers, accounting).
//!
//! # Key operations
//!
//! - [`insert`] takes the lowest free slot (or appends one), the next
//!   uniquifier from the page's sequence, and room below the heap; if the gap
//!   is too small but gap + garbage suffices it compacts the heap first.
//! - [`update`] rewrites a live slot, keeping its uniquifier: a smaller payload
//!   stays where it was (end-aligned), a larger one is placed afresh.
//! - [`delete`] zeroes the payload and entry; a payload at the heap's low edge
//!   goes straight back to the gap, any other becomes garbage.
//! - Compaction slides every payload up against the page end, in place.

use crate::bytes::{get_u16, get_u32, put_u16, put_u32};
use std::iter::FusedIterator;

use crate::error::{Error, Result};
use crate::ids::{PageId, SlotIdx, Uniq};
use crate::page::{self, PageType};

/// The `kind` of a free slot. Callers tag live slots with any other value.
pub const KIND_FREE: u8 = 0;

/// Most slots a page's directory may hold. On a 64 KiB page this, not space,
/// is the limit for tiny records; it also bounds what a damaged header can
/// claim and keeps slot indexes in 12 bits.
pub const SLOT_COUNT_MAX: usize = 4096;

/// Bytes of the slotted header that follows the common page header.
pub const SLOTTED_HEADER_SIZE: usize = 12;

/// Bytes of one slot directory entry.
pub const SLOT_ENTRY_SIZE: usize = 10;

const OFF_SLOT_COUNT: usize = page::HEADER_SIZE;
const OFF_FLAGS: usize = OFF_SLOT_COUNT + 2;
const OFF_HEAP_SIZE: usize = OFF_FLAGS + 2;
const OFF_GARBAGE: usize = OFF_HEAP_SIZE + 4;
const DIR_START: usize = OFF_GARBAGE + 4;
const _: () = assert!(DIR_START == page::HEADER_SIZE + SLOTTED_HEADER_SIZE);

const ENT_OFFSET: usize = 0;
const ENT_LEN: usize = 2;
const ENT_UNIQ: usize = 4;
const ENT_KIND: usize = 8;
const ENT_RESERVED: usize = 9;
const _: () = assert!(ENT_RESERVED + 1 == SLOT_ENTRY_SIZE);

// Entry offsets and lengths are u16: a non-empty payload starts below the
// page end, and no payload is longer than an empty page's room.
const _: () = assert!(page::PAGE_SIZE_MAX - 1 <= u16::MAX as usize);
const _: () = assert!(page::PAGE_SIZE_MAX - DIR_START - SLOT_ENTRY_SIZE <= u16::MAX as usize);
// Slot indexes fit `SlotIdx`.
const _: () = assert!(SLOT_COUNT_MAX <= u16::MAX as usize);

/// A live slot as read from a page.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct SlotRef<'a> {
    /// The caller's tag (never [`KIND_FREE`]).
    pub kind: u8,
    /// The uniquifier the slot was given when it was allocated.
    pub uniq: Uniq,
    /// The payload.
    pub data: &'a [u8],
}

/// Sets up an empty slotted page body (zeroes everything after the common
/// header). The caller has already done `page::format(buf, id, Slotted)`,
/// which leaves the same result; this makes the intent explicit.
pub fn init(buf: &mut [u8]) {
    debug_assert!(page::validate_page_size(buf.len()).is_ok());
    if let Some(body) = buf.get_mut(page::HEADER_SIZE..) {
        body.fill(0);
    }
}

/// Largest payload an empty page of this size can hold (in one slot).
pub fn max_payload(page_size: usize) -> usize {
    page_size.saturating_sub(DIR_START + SLOT_ENTRY_SIZE)
}

/// Largest payload [`insert`] could place right now, counting a new slot entry
/// if no free slot can be reused and the space compaction would reclaim; `None`
/// if no insert is possible at all (no slot to be had, or the page's
/// uniquifier sequence is exhausted). An insert of exactly this size succeeds.
pub fn free_for_insert(buf: &[u8]) -> Result<Option<usize>> {
    let hdr = Header::read(buf)?;
    if hdr.uniq_seq == u32::MAX {
        return Ok(None);
    }
    let entry_cost = match slot_for_insert(buf, &hdr)? {
        Some((_, cost)) => cost,
        None => return Ok(None),
    };
    Ok((hdr.gap() + hdr.garbage).checked_sub(entry_cost))
}

/// Inserts a record of `kind` (not [`KIND_FREE`]): reuses the lowest free slot
/// or appends one, compacting the page if that makes room. The record gets the
/// page's next uniquifier, which is then advanced.
///
/// `Ok(None)` (page unchanged) if it does not fit, the directory is at
/// [`SLOT_COUNT_MAX`], or the uniquifier sequence is exhausted (`u32::MAX`):
/// such a page accepts no more inserts, ever, because a repeated uniquifier
/// would let an old OID alias a new object.
pub fn insert(buf: &mut [u8], kind: u8, data: &[u8]) -> Result<Option<(SlotIdx, Uniq)>> {
    if kind == KIND_FREE {
        return Err(Error::InvalidArgument(
            "slotted insert with kind 0 (the free-slot kind)".to_string(),
        ));
    }
    let mut hdr = Header::read(buf)?;
    if hdr.uniq_seq == u32::MAX {
        return Ok(None);
    }
    let Some((slot, entry_cost)) = slot_for_insert(buf, &hdr)? else {
        return Ok(None);
    };
    let need = data.len() + entry_cost;
    if need > hdr.gap() + hdr.garbage {
        return Ok(None);
    }
    if need > hdr.gap() {
        compact(buf, &mut hdr)?;
    }
    debug_assert!(need <= hdr.gap());
    if entry_cost > 0 {
        hdr.slot_count += 1;
        hdr.write(buf);
    }
    let offset = place(buf, &mut hdr, data);
    let uniq = hdr.uniq_seq;
    page::set_uniq_seq(buf, uniq + 1);
    write_entry(
        buf,
        slot,
        Entry {
            offset,
            len: data.len(),
            uniq,
            kind,
        },
    );
    Ok(Some((SlotIdx(to_u16(slot)), Uniq(uniq))))
}

/// The live slot `slot`, or `Ok(None)` if it is beyond the directory or free.
pub fn get(buf: &[u8], slot: SlotIdx) -> Result<Option<SlotRef<'_>>> {
    let hdr = Header::read(buf)?;
    let i = usize::from(slot.0);
    if i >= hdr.slot_count {
        return Ok(None);
    }
    let e = read_entry(buf, &hdr, i)?;
    if e.kind == KIND_FREE {
        return Ok(None);
    }
    Ok(Some(slot_ref(buf, e)))
}

/// Replaces the payload and kind of the live slot `slot`, keeping its
/// uniquifier; compacts the page if that makes room. `Ok(false)` (page
/// unchanged) if the new payload does not fit on this page. A free or
/// out-of-range slot is [`Error::InvalidArgument`].
pub fn update(buf: &mut [u8], slot: SlotIdx, kind: u8, data: &[u8]) -> Result<bool> {
    if kind == KIND_FREE {
        return Err(Error::InvalidArgument(
            "slotted update with kind 0 (the free-slot kind)".to_string(),
        ));
    }
    let mut hdr = Header::read(buf)?;
    let (i, old) = live_entry(buf, &hdr, slot)?;
    let new_len = data.len();
    if new_len <= old.len {
        // Shrink in place, keeping the payload's end so that freed bytes at
        // the heap's low edge go straight back to the gap.
        let offset = if new_len == 0 {
            0
        } else {
            old.offset + old.len - new_len
        };
        buf[offset..offset + new_len].copy_from_slice(data);
        release(buf, &mut hdr, old.offset, old.len - new_len)?;
        hdr.write(buf);
        write_entry(
            buf,
            i,
            Entry {
                offset,
                len: new_len,
                uniq: old.uniq,
                kind,
            },
        );
        return Ok(true);
    }
    if new_len > hdr.gap() + hdr.garbage + old.len {
        return Ok(false);
    }
    // Give up the old payload first (the slot is empty meanwhile, so
    // compaction leaves it alone), then place the new one.
    release(buf, &mut hdr, old.offset, old.len)?;
    hdr.write(buf);
    let empty = Entry {
        offset: 0,
        len: 0,
        ..old
    };
    write_entry(buf, i, empty);
    if new_len > hdr.gap() {
        compact(buf, &mut hdr)?;
    }
    debug_assert!(new_len <= hdr.gap());
    let offset = place(buf, &mut hdr, data);
    write_entry(
        buf,
        i,
        Entry {
            offset,
            len: new_len,
            uniq: old.uniq,
            kind,
        },
    );
    Ok(true)
}

/// Frees the live slot `slot`, zeroing its payload and entry, and trims
/// trailing free slots from the directory. A free or out-of-range slot is
/// [`Error::InvalidArgument`].
pub fn delete(buf: &mut [u8], slot: SlotIdx) -> Result<()> {
    let mut hdr = Header::read(buf)?;
    let (i, old) = live_entry(buf, &hdr, slot)?;
    release(buf, &mut hdr, old.offset, old.len)?;
    write_entry(buf, i, Entry::FREE);
    while hdr.slot_count > 0 && read_entry(buf, &hdr, hdr.slot_count - 1)?.kind == KIND_FREE {
        hdr.slot_count -= 1;
    }
    if hdr.slot_count == 0 {
        // No live record is left, so the whole heap is garbage; drop it.
        buf[hdr.heap_start..hdr.page_size].fill(0);
        hdr.heap_start = hdr.page_size;
        hdr.garbage = 0;
    }
    hdr.write(buf);
    Ok(())
}

/// The live slots in slot order. After the first error the iterator ends.
pub fn iter(buf: &[u8]) -> Iter<'_> {
    match Header::read(buf) {
        Ok(hdr) => Iter {
            buf,
            hdr: Some(hdr),
            pending: None,
            next: 0,
        },
        Err(e) => Iter {
            buf,
            hdr: None,
            pending: Some(e),
            next: 0,
        },
    }
}

/// Iterator over a page's live slots, made by [`iter`].
#[derive(Debug)]
pub struct Iter<'a> {
    buf: &'a [u8],
    hdr: Option<Header>,
    pending: Option<Error>,
    next: usize,
}

impl<'a> Iterator for Iter<'a> {
    type Item = Result<(SlotIdx, SlotRef<'a>)>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(e) = self.pending.take() {
            return Some(Err(e));
        }
        let hdr = self.hdr?;
        while self.next < hdr.slot_count {
            let i = self.next;
            self.next += 1;
            match read_entry(self.buf, &hdr, i) {
                Err(e) => {
                    self.hdr = None;
                    return Some(Err(e));
                }
                Ok(e) if e.kind == KIND_FREE => continue,
                Ok(e) => return Some(Ok((SlotIdx(to_u16(i)), slot_ref(self.buf, e)))),
            }
        }
        self.hdr = None;
        None
    }
}

impl FusedIterator for Iter<'_> {}

/// The number of directory entries (live and free) as stored, unvalidated;
/// 0 if `buf` is too short to hold the field. [`check`] validates it.
pub fn slot_count(buf: &[u8]) -> usize {
    buf.get(OFF_SLOT_COUNT..OFF_SLOT_COUNT + 2)
        .map_or(0, |b| usize::from(u16::from_le_bytes([b[0], b[1]])))
}

/// The number of live slots.
pub fn live_count(buf: &[u8]) -> Result<usize> {
    iter(buf).try_fold(0, |n, r| r.map(|_| n + 1))
}

/// Verifies the whole layout (see the module docs' invariants) and the page
/// type. Damage is [`Error::Corrupt`] naming the page and, where there is one,
/// the slot.
pub fn check(buf: &[u8]) -> Result<()> {
    let hdr = Header::read(buf)?;
    if page::page_type(buf) != Some(PageType::Slotted) {
        return Err(hdr.corrupt(format!(
            "expected a slotted page, found page type byte {}",
            page::page_type_byte(buf)
        )));
    }
    let mut uniqs = Vec::with_capacity(hdr.slot_count);
    for i in 0..hdr.slot_count {
        let e = read_entry(buf, &hdr, i)?;
        if e.kind != KIND_FREE {
            uniqs.push((e.uniq, i));
        } else if i + 1 == hdr.slot_count {
            return Err(hdr.corrupt(format!(
                "slot {i}: the last directory entry is free (trailing free slots are trimmed)"
            )));
        }
    }
    uniqs.sort_unstable();
    for w in uniqs.windows(2) {
        if w[0].0 == w[1].0 {
            return Err(hdr.corrupt(format!(
                "slot {}: uniquifier {} is also held by slot {}",
                w[1].1, w[1].0, w[0].1
            )));
        }
    }
    let recs = heap_records(buf, &hdr)?;
    if let Some(nz) = buf[hdr.dir_end()..hdr.heap_start].iter().position(|&b| b != 0) {
        return Err(hdr.corrupt(format!("stale byte in the free gap at offset {}", hdr.dir_end() + nz)));
    }
    // `recs` runs from the page end down; check the hole above each record.
    let mut hole_end = hdr.page_size;
    for r in recs.iter().chain(std::iter::once(&Rec {
        offset: hdr.heap_start,
        len: 0,
        slot: usize::MAX,
    })) {
        let hole_start = r.offset + r.len;
        if let Some(nz) = buf[hole_start..hole_end].iter().position(|&b| b != 0) {
            return Err(hdr.corrupt(format!(
                "stale byte in a freed part of the heap at offset {}",
                hole_start + nz
            )));
        }
        hole_end = r.offset;
    }
    Ok(())
}

/// The slotted header, validated.
#[derive(Clone, Copy, Debug)]
struct Header {
    page: PageId,
    page_size: usize,
    slot_count: usize,
    /// `page_size - heap_size`: the heap's low edge.
    heap_start: usize,
    garbage: usize,
    uniq_seq: u32,
}

impl Header {
    /// Reads and validates the header: the directory fits, the heap does not
    /// reach into it, the garbage fits in the heap.
    fn read(buf: &[u8]) -> Result<Header> {
        page::validate_page_size(buf.len())?;
        let page = page::page_id(buf);
        let page_size = buf.len();
        let slot_count = usize::from(get_u16(buf, OFF_SLOT_COUNT));
        let flags = get_u16(buf, OFF_FLAGS);
        let heap_size = get_u32(buf, OFF_HEAP_SIZE);
        let garbage = get_u32(buf, OFF_GARBAGE);
        let uniq_seq = page::uniq_seq(buf);
        let bad = |reason: String| Err(Error::corrupt(page, reason));
        if flags != 0 {
            return bad(format!("slotted header flags are {flags:#06x}, expected 0"));
        }
        if slot_count > SLOT_COUNT_MAX {
            return bad(format!(
                "slot directory claims {slot_count} entries, more than the limit {SLOT_COUNT_MAX}"
            ));
        }
        let dir_end = DIR_START + slot_count * SLOT_ENTRY_SIZE;
        if dir_end > page_size {
            return bad(format!(
                "slot directory of {slot_count} entries ends at {dir_end}, past the page end {page_size}"
            ));
        }
        let Some(heap_start) = usize::try_from(heap_size)
            .ok()
            .and_then(|h| page_size.checked_sub(h))
            .filter(|&s| s >= dir_end)
        else {
            return bad(format!(
                "heap of {heap_size} bytes overlaps the slot directory ending at {dir_end} \
                 (page size {page_size})"
            ));
        };
        if garbage > heap_size {
            return bad(format!(
                "{garbage} bytes of garbage claimed in a heap of {heap_size} bytes"
            ));
        }
        if uniq_seq == 0 {
            return bad("uniquifier sequence is 0".to_string());
        }
        Ok(Header {
            page,
            page_size,
            slot_count,
            heap_start,
            garbage: garbage as usize,
            uniq_seq,
        })
    }

    /// Stores slot_count, heap_size and garbage (the uniquifier sequence is
    /// stored by [`insert`] itself).
    fn write(&self, buf: &mut [u8]) {
        debug_assert!(self.dir_end() <= self.heap_start && self.heap_start <= self.page_size);
        debug_assert!(self.garbage <= self.page_size - self.heap_start);
        put_u16(buf, OFF_SLOT_COUNT, to_u16(self.slot_count));
        put_u32(buf, OFF_HEAP_SIZE, (self.page_size - self.heap_start) as u32);
        put_u32(buf, OFF_GARBAGE, self.garbage as u32);
    }

    fn dir_end(&self) -> usize {
        DIR_START + self.slot_count * SLOT_ENTRY_SIZE
    }

    /// Bytes between the directory and the heap.
    fn gap(&self) -> usize {
        self.heap_start - self.dir_end()
    }

    fn heap_size(&self) -> usize {
        self.page_size - self.heap_start
    }

    fn corrupt(&self, reason: String) -> Error {
        Error::corrupt(self.page, reason)
    }
}

/// One slot directory entry, validated against the header.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Entry {
    offset: usize,
    len: usize,
    uniq: u32,
    kind: u8,
}

impl Entry {
    const FREE: Entry = Entry {
        offset: 0,
        len: 0,
        uniq: 0,
        kind: KIND_FREE,
    };
}

/// A non-empty payload in the heap.
#[derive(Clone, Copy, Debug)]
struct Rec {
    offset: usize,
    len: usize,
    slot: usize,
}

/// Reads entry `slot` (which must be below `hdr.slot_count`) and checks it on
/// its own: free entries are all zero; live ones have a handed-out uniquifier
/// and a payload inside the heap.
fn read_entry(buf: &[u8], hdr: &Header, slot: usize) -> Result<Entry> {
    debug_assert!(slot < hdr.slot_count);
    let at = DIR_START + slot * SLOT_ENTRY_SIZE;
    let e = Entry {
        offset: usize::from(get_u16(buf, at + ENT_OFFSET)),
        len: usize::from(get_u16(buf, at + ENT_LEN)),
        uniq: get_u32(buf, at + ENT_UNIQ),
        kind: buf[at + ENT_KIND],
    };
    let reserved = buf[at + ENT_RESERVED];
    let bad = |reason: String| Err(hdr.corrupt(format!("slot {slot}: {reason}")));
    if reserved != 0 {
        return bad(format!("reserved byte is {reserved}, expected 0"));
    }
    if e.kind == KIND_FREE {
        if e != Entry::FREE {
            return bad(format!(
                "free slot has offset {}, length {}, uniquifier {} (expected all zero)",
                e.offset, e.len, e.uniq
            ));
        }
        return Ok(e);
    }
    if e.uniq == 0 || e.uniq >= hdr.uniq_seq {
        return bad(format!(
            "uniquifier {} was never handed out (the page's sequence is at {})",
            e.uniq, hdr.uniq_seq
        ));
    }
    let end = e.offset + e.len;
    if e.len == 0 {
        if e.offset != 0 {
            return bad(format!("empty record has offset {}, expected 0", e.offset));
        }
    } else if e.offset < hdr.heap_start {
        return bad(format!(
            "record at {}..{end} starts below the heap, which begins at {}",
            e.offset, hdr.heap_start
        ));
    } else if end > hdr.page_size {
        return bad(format!(
            "record at {}..{end} extends past the page end {}",
            e.offset, hdr.page_size
        ));
    }
    Ok(e)
}

fn write_entry(buf: &mut [u8], slot: usize, e: Entry) {
    debug_assert!(e.kind != KIND_FREE || e == Entry::FREE);
    let at = DIR_START + slot * SLOT_ENTRY_SIZE;
    put_u16(buf, at + ENT_OFFSET, to_u16(e.offset));
    put_u16(buf, at + ENT_LEN, to_u16(e.len));
    put_u32(buf, at + ENT_UNIQ, e.uniq);
    buf[at + ENT_KIND] = e.kind;
    buf[at + ENT_RESERVED] = 0;
}

fn slot_ref(buf: &[u8], e: Entry) -> SlotRef<'_> {
    SlotRef {
        kind: e.kind,
        uniq: Uniq(e.uniq),
        data: &buf[e.offset..e.offset + e.len],
    }
}

/// The live entry for a caller-supplied slot, or `InvalidArgument`.
fn live_entry(buf: &[u8], hdr: &Header, slot: SlotIdx) -> Result<(usize, Entry)> {
    let i = usize::from(slot.0);
    if i < hdr.slot_count {
        let e = read_entry(buf, hdr, i)?;
        if e.kind != KIND_FREE {
            return Ok((i, e));
        }
    }
    Err(Error::InvalidArgument(format!(
        "slot {} of page {} is not a live slot",
        slot.0, hdr.page
    )))
}

/// The slot an insert would use and the directory bytes it costs: the lowest
/// free slot (0 bytes) or a new one at the end; `None` if the directory is full.
fn slot_for_insert(buf: &[u8], hdr: &Header) -> Result<Option<(usize, usize)>> {
    for i in 0..hdr.slot_count {
        if read_entry(buf, hdr, i)?.kind == KIND_FREE {
            return Ok(Some((i, 0)));
        }
    }
    if hdr.slot_count >= SLOT_COUNT_MAX {
        return Ok(None);
    }
    Ok(Some((hdr.slot_count, SLOT_ENTRY_SIZE)))
}

/// Copies `data` to just below the heap and returns its offset (0 for empty
/// data). The caller has made sure it fits in the gap.
fn place(buf: &mut [u8], hdr: &mut Header, data: &[u8]) -> usize {
    if data.is_empty() {
        return 0;
    }
    debug_assert!(data.len() <= hdr.gap());
    let offset = hdr.heap_start - data.len();
    buf[offset..hdr.heap_start].copy_from_slice(data);
    hdr.heap_start = offset;
    hdr.write(buf);
    offset
}

/// Zeroes a freed part of the heap and accounts for it: at the heap's low edge
/// it rejoins the gap, anywhere else it becomes garbage. The caller stores the
/// header. A garbage count that no longer fits the heap afterwards means the
/// header's count was wrong: the page is corrupt.
fn release(buf: &mut [u8], hdr: &mut Header, offset: usize, len: usize) -> Result<()> {
    if len == 0 {
        return Ok(());
    }
    buf[offset..offset + len].fill(0);
    if offset == hdr.heap_start {
        hdr.heap_start += len;
    } else {
        hdr.garbage += len;
    }
    if hdr.garbage > hdr.heap_size() {
        return Err(hdr.corrupt(format!(
            "free-space accounting: freeing {len} bytes at {offset} leaves {} bytes of \
             garbage in a heap of {} bytes",
            hdr.garbage,
            hdr.heap_size()
        )));
    }
    Ok(())
}

/// The non-empty live payloads sorted from the page end down, after checking
/// that none overlaps another and that the header's garbage count is right.
fn heap_records(buf: &[u8], hdr: &Header) -> Result<Vec<Rec>> {
    let mut recs = Vec::with_capacity(hdr.slot_count);
    for i in 0..hdr.slot_count {
        let e = read_entry(buf, hdr, i)?;
        if e.kind != KIND_FREE && e.len > 0 {
            recs.push(Rec {
                offset: e.offset,
                len: e.len,
                slot: i,
            });
        }
    }
    recs.sort_unstable_by_key(|r| std::cmp::Reverse(r.offset));
    let mut live = 0;
    for (k, r) in recs.iter().enumerate() {
        if k > 0 {
            let above = recs[k - 1];
            if r.offset + r.len > above.offset {
                return Err(hdr.corrupt(format!(
                    "slot {}: record at {}..{} overlaps slot {} at {}..{}",
                    r.slot,
                    r.offset,
                    r.offset + r.len,
                    above.slot,
                    above.offset,
                    above.offset + above.len
                )));
            }
        }
        live += r.len;
    }
    // Non-overlapping records inside the heap cannot exceed it.
    let expected = hdr.heap_size() - live;
    if hdr.garbage != expected {
        return Err(hdr.corrupt(format!(
            "free-space accounting: a heap of {} bytes holds {live} bytes of records, \
             so {expected} bytes of garbage, but the header says {}",
            hdr.heap_size(),
            hdr.garbage
        )));
    }
    Ok(recs)
}

/// Slides every payload up against the page end, keeping their order, so the
/// gap absorbs all garbage. Checks overlap and accounting first, so a damaged
/// page is reported rather than scrambled further.
fn compact(buf: &mut [u8], hdr: &mut Header) -> Result<()> {
    let recs = heap_records(buf, hdr)?;
    let mut end = hdr.page_size;
    for r in &recs {
        // Records are visited from the page end down and each moves up (or
        // stays), so a record never overwrites one not yet moved.
        let to = end - r.len;
        debug_assert!(to >= r.offset);
        buf.copy_within(r.offset..r.offset + r.len, to);
        put_u16(buf, DIR_START + r.slot * SLOT_ENTRY_SIZE + ENT_OFFSET, to_u16(to));
        end = to;
    }
    buf[hdr.heap_start..end].fill(0);
    hdr.heap_start = end;
    hdr.garbage = 0;
    hdr.write(buf);
    Ok(())
}

/// Narrows a value the layout guarantees fits a u16 (see the const asserts).
fn to_u16(v: usize) -> u16 {
    debug_assert!(v <= usize::from(u16::MAX), "{v} does not fit a u16");
    v as u16
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    const KIND_RECORD: u8 = 1;
    const KIND_STUB: u8 = 2;

    fn new_page(page_size: usize, id: u32) -> Vec<u8> {
        let mut buf = vec![0u8; page_size];
        page::format(&mut buf, PageId(id), PageType::Slotted);
        init(&mut buf);
        buf
    }

    fn bytes(len: usize, seed: u8) -> Vec<u8> {
        (0..len).map(|i| seed.wrapping_add((i % 251) as u8) | 1).collect()
    }

    fn ins(buf: &mut [u8], data: &[u8]) -> (SlotIdx, Uniq) {
        insert(buf, KIND_RECORD, data).unwrap().expect("fits")
    }

    fn read(buf: &[u8], slot: SlotIdx) -> Option<(u8, Uniq, Vec<u8>)> {
        get(buf, slot).unwrap().map(|r| (r.kind, r.uniq, r.data.to_vec()))
    }

    fn assert_corrupt<T: std::fmt::Debug>(r: Result<T>, page: u32, needle: &str) {
        match r {
            Err(Error::Corrupt { page: p, reason }) => {
                assert_eq!(p, PageId(page), "{reason}");
                assert!(reason.contains(needle), "{reason:?} lacks {needle:?}");
            }
            other => panic!("expected Corrupt containing {needle:?}, got {other:?}"),
        }
    }

    #[test]
    fn a_formatted_page_is_an_empty_slotted_page() {
        let mut buf = vec![0u8; 4096];
        page::format(&mut buf, PageId(3), PageType::Slotted);
        check(&buf).unwrap();
        assert_eq!(slot_count(&buf), 0);
        assert_eq!(live_count(&buf).unwrap(), 0);
        assert_eq!(get(&buf, SlotIdx(0)).unwrap(), None);
        assert_eq!(free_for_insert(&buf).unwrap(), Some(max_payload(4096)));
        assert_eq!(max_payload(4096), 4096 - 36 - 10);
    }

    #[test]
    fn insert_then_get_returns_the_record() {
        let mut buf = new_page(4096, 1);
        let (s0, u0) = ins(&mut buf, b"hello");
        let (s1, u1) = insert(&mut buf, KIND_STUB, b"").unwrap().unwrap();
        let (s2, u2) = ins(&mut buf, b"world!");
        assert_eq!((s0, s1, s2), (SlotIdx(0), SlotIdx(1), SlotIdx(2)));
        assert!(u0 < u1 && u1 < u2);
        assert_eq!(read(&buf, s0), Some((KIND_RECORD, u0, b"hello".to_vec())));
        assert_eq!(read(&buf, s1), Some((KIND_STUB, u1, vec![])));
        assert_eq!(read(&buf, s2), Some((KIND_RECORD, u2, b"world!".to_vec())));
        assert_eq!(get(&buf, SlotIdx(3)).unwrap(), None);
        assert_eq!(get(&buf, SlotIdx(u16::MAX)).unwrap(), None);
        let all: Vec<_> = iter(&buf).map(|r| r.unwrap().0).collect();
        assert_eq!(all, vec![s0, s1, s2]);
        assert_eq!(live_count(&buf).unwrap(), 3);
        check(&buf).unwrap();
    }

    #[test]
    fn kind_free_is_refused() {
        let mut buf = new_page(4096, 1);
        assert!(matches!(
            insert(&mut buf, KIND_FREE, b"x"),
            Err(Error::InvalidArgument(_))
        ));
        let (s, _) = ins(&mut buf, b"x");
        assert!(matches!(
            update(&mut buf, s, KIND_FREE, b"x"),
            Err(Error::InvalidArgument(_))
        ));
    }

    #[test]
    fn update_grows_and_shrinks_keeping_the_uniquifier() {
        let mut buf = new_page(4096, 1);
        let (a, ua) = ins(&mut buf, &bytes(100, 1));
        let (b, ub) = ins(&mut buf, &bytes(50, 2));
        assert!(update(&mut buf, a, KIND_STUB, &bytes(300, 3)).unwrap());
        check(&buf).unwrap();
        assert_eq!(read(&buf, a), Some((KIND_STUB, ua, bytes(300, 3))));
        assert_eq!(read(&buf, b), Some((KIND_RECORD, ub, bytes(50, 2))));
        assert!(update(&mut buf, a, KIND_RECORD, &bytes(10, 4)).unwrap());
        check(&buf).unwrap();
        assert_eq!(read(&buf, a), Some((KIND_RECORD, ua, bytes(10, 4))));
        assert!(update(&mut buf, a, KIND_RECORD, b"").unwrap());
        check(&buf).unwrap();
        assert_eq!(read(&buf, a), Some((KIND_RECORD, ua, vec![])));
        // Growing the record at the heap's low edge reuses its own bytes.
        assert!(update(&mut buf, b, KIND_RECORD, &bytes(max_payload(4096) - 10, 5)).unwrap());
        check(&buf).unwrap();
        assert_eq!(read(&buf, b).unwrap().2, bytes(max_payload(4096) - 10, 5));
        assert_eq!(page::uniq_seq(&buf), ub.0 + 1, "update takes no uniquifier");
    }

    #[test]
    fn update_that_does_not_fit_leaves_the_page_unchanged() {
        let mut buf = new_page(4096, 1);
        let (a, _) = ins(&mut buf, &bytes(1000, 1));
        let (_b, _) = ins(&mut buf, &bytes(2000, 2));
        let before = buf.clone();
        assert!(!update(&mut buf, a, KIND_RECORD, &bytes(2100, 3)).unwrap());
        assert_eq!(buf, before);
        assert!(update(&mut buf, a, KIND_RECORD, &bytes(4096 - 36 - 20 - 2000, 3)).unwrap());
        check(&buf).unwrap();
    }

    #[test]
    fn deleted_slot_is_reused_with_a_new_uniquifier() {
        let mut buf = new_page(4096, 1);
        let (a, _) = ins(&mut buf, b"a");
        let (b, ub) = ins(&mut buf, b"b");
        let (c, _) = ins(&mut buf, b"c");
        delete(&mut buf, b).unwrap();
        check(&buf).unwrap();
        assert_eq!(get(&buf, b).unwrap(), None);
        assert_eq!(slot_count(&buf), 3);
        let (b2, ub2) = ins(&mut buf, b"bb");
        assert_eq!(b2, b, "lowest free slot is reused");
        assert!(ub2 > ub, "an old OID to slot {b:?} must not match the new occupant");
        assert_eq!(read(&buf, a).unwrap().2, b"a");
        assert_eq!(read(&buf, c).unwrap().2, b"c");
        check(&buf).unwrap();
    }

    #[test]
    fn trailing_free_slots_are_trimmed_and_an_empty_page_resets() {
        let mut buf = new_page(4096, 1);
        let slots: Vec<_> = (0..5).map(|i| ins(&mut buf, &bytes(20, i)).0).collect();
        delete(&mut buf, slots[3]).unwrap();
        assert_eq!(slot_count(&buf), 5);
        delete(&mut buf, slots[4]).unwrap();
        assert_eq!(slot_count(&buf), 3, "slots 3 and 4 trimmed");
        check(&buf).unwrap();
        for s in &slots[..3] {
            delete(&mut buf, *s).unwrap();
        }
        assert_eq!(slot_count(&buf), 0);
        check(&buf).unwrap();
        let mut fresh = new_page(4096, 1);
        page::set_uniq_seq(&mut fresh, page::uniq_seq(&buf));
        assert_eq!(buf, fresh, "an emptied page is a fresh page");
    }

    #[test]
    fn delete_of_a_free_or_missing_slot_is_an_error() {
        let mut buf = new_page(4096, 1);
        let (a, _) = ins(&mut buf, b"a");
        ins(&mut buf, b"b");
        delete(&mut buf, a).unwrap();
        assert!(matches!(delete(&mut buf, a), Err(Error::InvalidArgument(_))));
        assert!(matches!(delete(&mut buf, SlotIdx(9)), Err(Error::InvalidArgument(_))));
        assert!(matches!(
            update(&mut buf, a, KIND_RECORD, b"x"),
            Err(Error::InvalidArgument(_))
        ));
    }

    #[test]
    fn compaction_reclaims_holes() {
        let mut buf = new_page(4096, 1);
        let mut slots = Vec::new();
        while let Some((s, _)) = insert(&mut buf, KIND_RECORD, &bytes(100, slots.len() as u8)).unwrap() {
            slots.push(s);
        }
        assert_eq!(slots.len(), (4096 - 36) / 110);
        for s in slots.iter().step_by(2) {
            delete(&mut buf, *s).unwrap();
        }
        check(&buf).unwrap();
        let free = free_for_insert(&buf).unwrap().unwrap();
        assert!(free > 1000, "{free}");
        // No hole is this big, so only compaction makes room.
        let (big, _) = ins(&mut buf, &bytes(free, 77));
        assert_eq!(big, slots[0]);
        check(&buf).unwrap();
        assert_eq!(read(&buf, big).unwrap().2, bytes(free, 77));
        for (i, s) in slots.iter().enumerate().skip(1).step_by(2) {
            assert_eq!(read(&buf, *s).unwrap().2, bytes(100, i as u8));
        }
        assert_eq!(free_for_insert(&buf).unwrap(), Some(0));
    }

    #[test]
    fn full_page_refuses_insert_and_is_unchanged() {
        for page_size in [4096, 8192, 65536] {
            let mut buf = new_page(page_size, 1);
            let before = buf.clone();
            assert_eq!(
                insert(&mut buf, KIND_RECORD, &bytes(max_payload(page_size) + 1, 0)).unwrap(),
                None
            );
            assert_eq!(buf, before);
            ins(&mut buf, &bytes(max_payload(page_size), 0));
            check(&buf).unwrap();
            assert_eq!(free_for_insert(&buf).unwrap(), None);
            let before = buf.clone();
            assert_eq!(insert(&mut buf, KIND_RECORD, b"").unwrap(), None);
            assert_eq!(buf, before);
        }
    }

    #[test]
    fn exhausted_uniquifier_sequence_refuses_inserts_forever() {
        let mut buf = new_page(4096, 1);
        page::set_uniq_seq(&mut buf, u32::MAX - 1);
        let (s, u) = ins(&mut buf, b"last");
        assert_eq!(u, Uniq(u32::MAX - 1));
        assert_eq!(page::uniq_seq(&buf), u32::MAX);
        check(&buf).unwrap();
        assert_eq!(free_for_insert(&buf).unwrap(), None);
        assert_eq!(insert(&mut buf, KIND_RECORD, b"x").unwrap(), None);
        delete(&mut buf, s).unwrap();
        assert_eq!(insert(&mut buf, KIND_RECORD, b"x").unwrap(), None);
        // A reformatted page keeps the sequence, so it stays closed.
        page::format(&mut buf, PageId(1), PageType::Slotted);
        assert_eq!(insert(&mut buf, KIND_RECORD, b"x").unwrap(), None);
    }

    #[test]
    fn large_pages_use_u32_header_fields_and_cap_the_directory() {
        let mut buf = new_page(65536, 9);
        let big = bytes(max_payload(65536), 3);
        let (s, _) = ins(&mut buf, &big);
        check(&buf).unwrap();
        assert_eq!(read(&buf, s).unwrap().2, big);
        delete(&mut buf, s).unwrap();
        let (a, _) = ins(&mut buf, &bytes(40000, 1));
        let (b, _) = ins(&mut buf, &bytes(20000, 2));
        delete(&mut buf, a).unwrap();
        assert!(update(&mut buf, b, KIND_RECORD, &bytes(60000, 4)).unwrap());
        check(&buf).unwrap();
        assert_eq!(read(&buf, b).unwrap().2, bytes(60000, 4));
        delete(&mut buf, b).unwrap();
        // Tiny records: the slot limit binds before space does.
        for i in 0..SLOT_COUNT_MAX {
            assert_eq!(ins(&mut buf, &[1]).0, SlotIdx(i as u16));
        }
        assert_eq!(free_for_insert(&buf).unwrap(), None);
        assert_eq!(insert(&mut buf, KIND_RECORD, b"").unwrap(), None);
        check(&buf).unwrap();
        delete(&mut buf, SlotIdx(17)).unwrap();
        assert_eq!(ins(&mut buf, b"again").0, SlotIdx(17));
        check(&buf).unwrap();
    }

    #[test]
    fn specific_damage_is_reported_not_panicked_on() {
        let mut good = new_page(4096, 42);
        let (a, _) = ins(&mut good, &bytes(100, 1));
        let (b, _) = ins(&mut good, &bytes(100, 2));
        let entry = |s: SlotIdx| DIR_START + usize::from(s.0) * SLOT_ENTRY_SIZE;

        // Slot offset past the page end.
        let mut buf = good.clone();
        put_u16(&mut buf, entry(b) + ENT_OFFSET, 4090);
        assert_corrupt(
            check(&buf),
            42,
            "slot 1: record at 4090..4190 extends past the page end",
        );
        assert_corrupt(get(&buf, b), 42, "slot 1");
        assert_corrupt(delete(&mut buf.clone(), b), 42, "slot 1");
        assert_corrupt(update(&mut buf.clone(), b, 1, b"x"), 42, "slot 1");
        assert_corrupt(iter(&buf).collect::<Result<Vec<_>>>(), 42, "slot 1");
        assert!(get(&buf, a).unwrap().is_some(), "other slots stay readable");

        // Overlapping slots: get cannot see it, check and compaction do.
        let mut buf = good.clone();
        let (c, _) = ins(&mut buf, &bytes(100, 3));
        let (_d, _) = ins(&mut buf, &bytes(100, 4));
        delete(&mut buf, c).unwrap(); // leaves garbage, so a big insert compacts
        let off_a = get_u16(&buf, entry(a) + ENT_OFFSET);
        put_u16(&mut buf, entry(b) + ENT_OFFSET, off_a - 50);
        assert_corrupt(check(&buf), 42, "slot 1: record at");
        assert_corrupt(check(&buf), 42, "overlaps slot 0");
        assert_eq!(get(&buf, b).unwrap().unwrap().data.len(), 100);
        let free = free_for_insert(&buf).unwrap().unwrap();
        assert_corrupt(insert(&mut buf.clone(), 1, &bytes(free, 0)), 42, "overlaps");

        // Record reaching into the free gap / directory.
        let mut buf = good.clone();
        put_u16(&mut buf, entry(b) + ENT_OFFSET, 40);
        assert_corrupt(check(&buf), 42, "starts below the heap");
        assert_corrupt(get(&buf, b), 42, "slot 1");

        // Header damage.
        for (field, value, needle) in [
            (OFF_SLOT_COUNT, 5000u32, "limit"),
            (OFF_SLOT_COUNT, 400, "overlaps the slot directory"),
            (OFF_HEAP_SIZE, 4096, "overlaps the slot directory"),
            (OFF_HEAP_SIZE, u32::MAX, "overlaps the slot directory"),
            (OFF_GARBAGE, 300, "garbage claimed"),
            (OFF_GARBAGE, 7, "accounting"),
            (OFF_FLAGS, 1, "flags"),
        ] {
            let mut buf = good.clone();
            if field == OFF_SLOT_COUNT || field == OFF_FLAGS {
                put_u16(&mut buf, field, value as u16);
            } else {
                put_u32(&mut buf, field, value);
            }
            assert_corrupt(check(&buf), 42, needle);
            if needle != "accounting" {
                assert_corrupt(get(&buf, a), 42, needle);
                assert_corrupt(insert(&mut buf.clone(), 1, b"x"), 42, needle);
            }
        }

        // Entry damage.
        let mut buf = good.clone();
        put_u32(&mut buf, entry(b) + ENT_UNIQ, 1000);
        assert_corrupt(get(&buf, b), 42, "never handed out");
        let mut buf = good.clone();
        let ua = get_u32(&buf, entry(a) + ENT_UNIQ);
        put_u32(&mut buf, entry(b) + ENT_UNIQ, ua);
        assert_corrupt(check(&buf), 42, "slot 1: uniquifier 1 is also held by slot 0");
        let mut buf = good.clone();
        buf[entry(b) + ENT_KIND] = 0;
        assert_corrupt(check(&buf), 42, "slot 1: free slot has offset");
        assert_corrupt(get(&buf, b), 42, "slot 1: free slot");
        let mut buf = good.clone();
        buf[entry(a) + ENT_RESERVED] = 3;
        assert_corrupt(check(&buf), 42, "slot 0: reserved byte");
        let mut buf = good.clone();
        buf[2000] = 9;
        assert_corrupt(check(&buf), 42, "free gap at offset 2000");
        let mut buf = good.clone();
        page::set_uniq_seq(&mut buf, 0);
        assert_corrupt(check(&buf), 42, "sequence is 0");
        let mut buf = good.clone();
        page::format(&mut buf, PageId(42), PageType::Free);
        assert_corrupt(check(&buf), 42, "expected a slotted page");
    }

    #[test]
    fn overstated_garbage_count_is_corrupt_not_a_failed_assertion() {
        // Found by `damaged_valid_page_is_never_a_panic`: a damaged garbage
        // count that still fits the heap tripped a debug assertion when a
        // delete or shrink added to it.
        let mut good = new_page(4096, 11);
        let (a, _) = ins(&mut good, &bytes(100, 1));
        let (b, _) = ins(&mut good, &bytes(100, 2));
        put_u32(&mut good, OFF_GARBAGE, 150);
        assert_corrupt(check(&good), 11, "accounting");
        assert_corrupt(delete(&mut good.clone(), b), 11, "accounting");
        assert_corrupt(delete(&mut good.clone(), a), 11, "accounting");
        assert_corrupt(update(&mut good.clone(), a, 1, b""), 11, "accounting");
        assert_corrupt(update(&mut good.clone(), b, 1, &[1; 500]), 11, "accounting");
    }

    /// Runs every read and write entry point on `buf` (writes on copies) and
    /// checks that each either succeeds or reports the page as corrupt; if
    /// `check` passes, nothing may report corruption.
    fn poke_everywhere(buf: &[u8], slots: &[u16]) {
        let page = page::page_id(buf);
        let healthy = check(buf).is_ok();
        let ok_or_corrupt = |what: &str, r: Result<()>, caller_error_ok: bool| match r {
            Ok(()) => {}
            Err(Error::Corrupt { page: p, reason }) => {
                assert_eq!(p, page);
                assert!(!healthy, "{what} reports {reason:?} on a page check() passes");
            }
            Err(Error::InvalidArgument(_)) if caller_error_ok => {}
            Err(e) => panic!("{what}: unexpected error {e}"),
        };
        ok_or_corrupt("live_count", live_count(buf).map(drop), false);
        ok_or_corrupt("iter", iter(buf).try_for_each(|r| r.map(drop)), false);
        let free = free_for_insert(buf);
        ok_or_corrupt("free_for_insert", free.as_ref().map(drop).map_err(clone_err), false);
        let _ = slot_count(buf);
        for &s in slots {
            ok_or_corrupt("get", get(buf, SlotIdx(s)).map(drop), false);
            let mut copy = buf.to_vec();
            ok_or_corrupt("update", update(&mut copy, SlotIdx(s), 1, &[5; 300]).map(drop), true);
            let mut copy = buf.to_vec();
            ok_or_corrupt("delete", delete(&mut copy, SlotIdx(s)), true);
        }
        for len in [0, 1, 1000] {
            let mut copy = buf.to_vec();
            ok_or_corrupt("insert", insert(&mut copy, 1, &vec![7; len]).map(drop), false);
        }
        if let Ok(Some(n)) = free {
            let mut copy = buf.to_vec();
            ok_or_corrupt(
                "insert free_for_insert",
                insert(&mut copy, 1, &vec![7; n]).map(drop),
                false,
            );
        }
    }

    fn clone_err(e: &Error) -> Error {
        match e {
            Error::Corrupt { page, reason } => Error::corrupt(*page, reason.clone()),
            other => Error::InvalidArgument(other.to_string()),
        }
    }

    #[derive(Clone, Debug)]
    enum Op {
        Insert {
            kind: u8,
            len: usize,
            seed: u8,
        },
        Update {
            pick: prop::sample::Index,
            kind: u8,
            len: usize,
            seed: u8,
        },
        Delete {
            pick: prop::sample::Index,
        },
    }

    fn op_strategy(page_size: usize) -> impl Strategy<Value = Op> {
        let len = 0..page_size / 2;
        let small = 0usize..64;
        prop_oneof![
            3 => (1u8..=4, prop_oneof![len.clone(), small.clone()], any::<u8>())
                .prop_map(|(kind, len, seed)| Op::Insert { kind, len, seed }),
            2 => (any::<prop::sample::Index>(), 1u8..=4, prop_oneof![len, small], any::<u8>())
                .prop_map(|(pick, kind, len, seed)| Op::Update { pick, kind, len, seed }),
            2 => any::<prop::sample::Index>().prop_map(|pick| Op::Delete { pick }),
        ]
    }

    type Model = BTreeMap<SlotIdx, (u8, Uniq, Vec<u8>)>;

    fn run_model(page_size: usize, ops: &[Op]) {
        let mut buf = new_page(page_size, 7);
        let mut model = Model::new();
        let mut last_uniq = Uniq(0);
        for op in ops {
            match op {
                Op::Insert { kind, len, seed } => {
                    let data = bytes(*len, *seed);
                    let free = free_for_insert(&buf).unwrap();
                    let got = insert(&mut buf, *kind, &data).unwrap();
                    assert_eq!(got.is_some(), free.is_some_and(|n| *len <= n), "{free:?}");
                    if let Some((slot, uniq)) = got {
                        let lowest_free = (0u16..).find(|i| !model.contains_key(&SlotIdx(*i)));
                        assert_eq!(Some(slot.0), lowest_free);
                        assert!(uniq > last_uniq);
                        last_uniq = uniq;
                        model.insert(slot, (*kind, uniq, data));
                    }
                }
                Op::Update { pick, kind, len, seed } => {
                    if model.is_empty() {
                        continue;
                    }
                    let slot = *model.keys().nth(pick.index(model.len())).unwrap();
                    let data = bytes(*len, *seed);
                    let hdr = Header::read(&buf).unwrap();
                    let old_len = model[&slot].2.len();
                    let room = hdr.gap() + hdr.garbage + old_len;
                    let before = buf.clone();
                    let fits = update(&mut buf, slot, *kind, &data).unwrap();
                    assert_eq!(fits, *len <= room);
                    if fits {
                        let e = model.get_mut(&slot).unwrap();
                        e.0 = *kind;
                        e.2 = data;
                    } else {
                        assert_eq!(buf, before);
                    }
                }
                Op::Delete { pick } => {
                    if model.is_empty() {
                        continue;
                    }
                    let slot = *model.keys().nth(pick.index(model.len())).unwrap();
                    delete(&mut buf, slot).unwrap();
                    model.remove(&slot);
                }
            }
            check(&buf).unwrap();
            for (slot, want) in &model {
                assert_eq!(read(&buf, *slot).as_ref(), Some(want), "{slot:?}");
            }
            let listed: Vec<_> = iter(&buf)
                .map(|r| {
                    let (s, r) = r.unwrap();
                    (s, (r.kind, r.uniq, r.data.to_vec()))
                })
                .collect();
            assert_eq!(listed, model.clone().into_iter().collect::<Vec<_>>());
            let expect_count = model.keys().next_back().map_or(0, |s| usize::from(s.0) + 1);
            assert_eq!(slot_count(&buf), expect_count);
            // free_for_insert is exact: that many bytes fit, one more does not.
            if let Some(n) = free_for_insert(&buf).unwrap() {
                let mut copy = buf.clone();
                assert!(insert(&mut copy, 1, &vec![3; n]).unwrap().is_some(), "{n}");
                check(&copy).unwrap();
                let mut copy = buf.clone();
                assert!(insert(&mut copy, 1, &vec![3; n + 1]).unwrap().is_none(), "{n}");
            } else {
                assert!(insert(&mut buf.clone(), 1, b"").unwrap().is_none());
            }
        }
    }

    proptest! {
        #[test]
        fn model_4k(ops in prop::collection::vec(op_strategy(4096), 1..120)) {
            run_model(4096, &ops);
        }

        #[test]
        fn model_16k(ops in prop::collection::vec(op_strategy(16384), 1..120)) {
            run_model(16384, &ops);
        }

        #[test]
        fn random_body_is_corrupt_not_a_panic(body in prop::collection::vec(any::<u8>(), 4096 - 24)) {
            let mut buf = new_page(4096, 5);
            buf[24..].copy_from_slice(&body);
            prop_assert!(check(&buf).is_err());
            poke_everywhere(&buf, &[0, 1, 2, 100, 4095, u16::MAX]);
        }

        #[test]
        fn plausible_header_over_random_entries_is_never_a_panic(
            body in prop::collection::vec(any::<u8>(), 4096 - 24),
            slot_count in 0u16..=400,
            heap_size in 0u32..=4096,
            garbage in 0u32..=4096,
            uniq_seq in any::<u32>(),
            sparse in any::<bool>(),
        ) {
            let mut buf = new_page(4096, 6);
            buf[24..].copy_from_slice(&body);
            if sparse {
                // Mostly-zero entries make free slots and empty records likely.
                for (i, b) in buf[DIR_START..].iter_mut().enumerate() {
                    if i % 3 != 0 { *b = 0; }
                }
            }
            put_u16(&mut buf, OFF_SLOT_COUNT, slot_count);
            put_u16(&mut buf, OFF_FLAGS, 0);
            put_u32(&mut buf, OFF_HEAP_SIZE, heap_size);
            put_u32(&mut buf, OFF_GARBAGE, garbage.min(heap_size));
            page::set_uniq_seq(&mut buf, uniq_seq);
            poke_everywhere(&buf, &[0, 1, 2, slot_count.saturating_sub(1), slot_count, 399]);
        }

        #[test]
        fn damaged_valid_page_is_never_a_panic(
            ops in prop::collection::vec(op_strategy(4096), 1..40),
            damage in prop::collection::vec((24usize..4096, any::<u8>()), 1..6),
        ) {
            let mut buf = new_page(4096, 8);
            for op in &ops {
                if let Op::Insert { kind, len, seed } = op {
                    let _ = insert(&mut buf, *kind, &bytes(*len, *seed)).unwrap();
                } else if let Op::Delete { pick } = op {
                    let n = slot_count(&buf);
                    if n > 0 {
                        let _ = delete(&mut buf, SlotIdx(pick.index(n) as u16));
                    }
                }
            }
            check(&buf).unwrap();
            // Aim half of the damage at the header and directory.
            for (k, (pos, v)) in damage.iter().enumerate() {
                let pos = if k % 2 == 0 { 24 + pos % 120 } else { *pos };
                buf[pos] = *v;
            }
            let n = slot_count(&buf) as u16;
            poke_everywhere(&buf, &[0, 1, 2, n.saturating_sub(1), n]);
        }
    }
}
