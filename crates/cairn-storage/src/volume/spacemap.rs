//! Space-map pages: one bit per page, set when the page is *reserved* — a
//! system page or part of an extent owned by a group.
//!
//! The volume is cut into intervals of [`bits_per_page`] pages; interval `k`
//! covers pages `k*B .. (k+1)*B` and its space-map page is its first page,
//! `k*B` (page 1 for the first interval, since page 0 is the header). The
//! location is arithmetic, so no chain has to be followed, a damaged
//! space-map page damages only its own interval, and a volume growing page by
//! page always meets an interval's map page before any page it maps.
//!
//! ```text
//!  offset size field            (after the 24-byte common page header)
//!  24     4    interval         k
//!  28     4    reserved         0
//!  32     ..   bitmap           bit i (byte i/8, bit i%8) = page k*B + i reserved
//! ```

use crate::error::{Error, Result};
use crate::ids::PageId;
use crate::page::{self, PageType, HEADER_SIZE};

const OFF_INTERVAL: usize = HEADER_SIZE;
const OFF_BITMAP: usize = HEADER_SIZE + 8;

/// Pages covered by one space-map page.
pub fn bits_per_page(page_size: usize) -> u32 {
    u32::try_from((page_size - OFF_BITMAP) * 8).expect("page size at most 64 KiB")
}

/// The interval a page belongs to.
pub fn interval_of(id: PageId, page_size: usize) -> u32 {
    id.0 / bits_per_page(page_size)
}

/// The space-map page of interval `k`.
pub fn map_page(k: u32, page_size: usize) -> PageId {
    if k == 0 {
        PageId(1)
    } else {
        PageId(k * bits_per_page(page_size))
    }
}

/// True if `id` is the space-map page of its interval.
pub fn is_map_page(id: PageId, page_size: usize) -> bool {
    map_page(interval_of(id, page_size), page_size) == id
}

/// Formats a space-map page for interval `k`; marks the map page itself.
pub fn init(buf: &mut [u8], k: u32) {
    let id = map_page(k, buf.len());
    page::format(buf, id, PageType::SpaceMap);
    buf[OFF_INTERVAL..OFF_INTERVAL + 4].copy_from_slice(&k.to_le_bytes());
    set(buf, id, true);
}

fn position(buf: &[u8], id: PageId) -> (usize, u8) {
    let i = (id.0 % bits_per_page(buf.len())) as usize;
    (OFF_BITMAP + i / 8, 1u8 << (i % 8))
}

/// Whether page `id` (which must lie in this map's interval) is reserved.
pub fn get(buf: &[u8], id: PageId) -> bool {
    let (byte, mask) = position(buf, id);
    buf[byte] & mask != 0
}

/// Marks page `id` reserved or not.
pub fn set(buf: &mut [u8], id: PageId, reserved: bool) {
    let (byte, mask) = position(buf, id);
    if reserved {
        buf[byte] |= mask;
    } else {
        buf[byte] &= !mask;
    }
}

/// Verifies a space-map page read as interval `k`.
pub fn check(buf: &[u8], k: u32) -> Result<()> {
    let id = map_page(k, buf.len());
    page::expect_type(buf, id, PageType::SpaceMap)?;
    let stored = u32::from_le_bytes(buf[OFF_INTERVAL..OFF_INTERVAL + 4].try_into().expect("4 bytes"));
    if stored != k {
        return Err(Error::corrupt(
            id,
            format!("space map claims interval {stored}, expected {k}"),
        ));
    }
    if !get(buf, id) {
        return Err(Error::corrupt(id, "space map does not mark its own page reserved"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_and_bits() {
        let ps = 4096;
        let b = bits_per_page(ps);
        assert_eq!(b, (4096 - 32) * 8);
        assert_eq!(map_page(0, ps), PageId(1));
        assert_eq!(map_page(2, ps), PageId(2 * b));
        assert!(is_map_page(PageId(b), ps));
        assert!(is_map_page(PageId(1), ps));
        assert!(!is_map_page(PageId(0), ps));
        assert!(!is_map_page(PageId(b + 1), ps));
        let mut buf = vec![0u8; ps];
        init(&mut buf, 1);
        check(&buf, 1).unwrap();
        assert!(check(&buf, 0).is_err());
        let p = PageId(b + 77);
        assert!(!get(&buf, p));
        set(&mut buf, p, true);
        assert!(get(&buf, p));
        set(&mut buf, p, false);
        assert!(!get(&buf, p));
    }
}
