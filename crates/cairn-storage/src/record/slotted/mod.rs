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

#[cfg(test)]
mod tests;

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

/// Bytes the page's live records may still grow by in total: the free gap
/// plus the garbage compaction would reclaim (no new slot entry counted).
/// [`update`]s whose growths sum to at most this all succeed, in any order
/// that applies the shrinking ones first.
pub fn room(buf: &[u8]) -> Result<usize> {
    let hdr = Header::read(buf)?;
    Ok(hdr.gap() + hdr.garbage)
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
