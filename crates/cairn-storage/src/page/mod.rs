//! The common page format: every page of a volume starts with this header.
//!
//! ```text
//!  offset size field
//!  0      4    checksum   CRC32C of bytes 4..page_size (the whole page but itself)
//!  4      4    page_id    the page's own number; a page read from the wrong place fails
//!  8      8    lsn        LSN of the last logged change (0 = never logged)
//!  16     1    page_type  PageType
//!  17     1    flags      0 (reserved)
//!  18     2    reserved   0
//!  20     4    uniq_seq   next uniquifier this page hands out; survives free/reuse
//!  24     ..   body       type-specific
//! ```
//!
//! **Invariant:** a page image in memory may be anything; a page image is
//! [`seal`]ed (checksum computed) exactly when it goes to the volume file, and
//! [`verify`]ed on every read from it. A page that fails verification is
//! reported as [`Error::Corrupt`] naming the page and is never used.
//!
//! The uniquifier sequence lives in the common header rather than the slotted
//! page body so that it survives the page being freed and re-used with a new
//! type: a reused slot can never hand out a uniquifier an old OID still holds.

use crate::bytes::{get_u32, get_u64};
use crate::error::{Error, Result};
use crate::ids::{Lsn, PageId};

/// Bytes of the common page header.
pub const HEADER_SIZE: usize = 24;

/// Smallest page size a volume may have.
pub const PAGE_SIZE_MIN: usize = 4096;
/// Largest page size a volume may have.
pub const PAGE_SIZE_MAX: usize = 65536;
/// The page size used when none is given.
pub const PAGE_SIZE_DEFAULT: usize = 4096;

const OFF_CHECKSUM: usize = 0;
const OFF_PAGE_ID: usize = 4;
const OFF_LSN: usize = 8;
const OFF_TYPE: usize = 16;
const OFF_FLAGS: usize = 17;
const OFF_RESERVED: usize = 18;
const OFF_UNIQ_SEQ: usize = 20;
const _: () = assert!(OFF_UNIQ_SEQ + 4 == HEADER_SIZE);

/// What a page holds. Zero is deliberately not a type, so an all-zero page
/// (never written) is never mistaken for a valid one.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
#[repr(u8)]
pub enum PageType {
    /// Page 0: magic, format version, page size, creation id, high-water mark.
    VolumeHeader = 1,
    /// A bitmap of reserved pages for one interval of the volume.
    SpaceMap = 2,
    /// The directory of object groups (a chain of pages).
    GroupDir = 3,
    /// A chain page listing one group's extents.
    ExtentList = 4,
    /// Slotted record page holding small objects and forwarding stubs.
    Slotted = 5,
    /// Interior page of a large object's page tree.
    LargeIndex = 6,
    /// Data page of a large object.
    LargeData = 7,
    /// B+-tree leaf.
    BTreeLeaf = 8,
    /// B+-tree interior node.
    BTreeInner = 9,
    /// A page inside an extent that is not in use.
    Free = 10,
}

impl PageType {
    /// True for the kinds a transaction changes through the record layer
    /// (slotted, large-object and B+-tree pages), so a remote client may
    /// allocate and change them; every other kind is changed only by the
    /// volume's system actions.
    pub fn is_client_kind(self) -> bool {
        matches!(
            self,
            PageType::Slotted | PageType::LargeIndex | PageType::LargeData | PageType::BTreeLeaf | PageType::BTreeInner
        )
    }

    /// Decodes a page-type byte.
    pub fn from_u8(b: u8) -> Option<PageType> {
        Some(match b {
            1 => PageType::VolumeHeader,
            2 => PageType::SpaceMap,
            3 => PageType::GroupDir,
            4 => PageType::ExtentList,
            5 => PageType::Slotted,
            6 => PageType::LargeIndex,
            7 => PageType::LargeData,
            8 => PageType::BTreeLeaf,
            9 => PageType::BTreeInner,
            10 => PageType::Free,
            _ => return None,
        })
    }

    /// A short lowercase name for reports.
    pub fn name(self) -> &'static str {
        match self {
            PageType::VolumeHeader => "header",
            PageType::SpaceMap => "space-map",
            PageType::GroupDir => "group-dir",
            PageType::ExtentList => "extent-list",
            PageType::Slotted => "slotted",
            PageType::LargeIndex => "large-index",
            PageType::LargeData => "large-data",
            PageType::BTreeLeaf => "btree-leaf",
            PageType::BTreeInner => "btree-inner",
            PageType::Free => "free",
        }
    }
}

/// Checks that `page_size` is a power of two between 4 and 64 KiB.
pub fn validate_page_size(page_size: usize) -> Result<()> {
    if !(PAGE_SIZE_MIN..=PAGE_SIZE_MAX).contains(&page_size) || !page_size.is_power_of_two() {
        return Err(Error::InvalidArgument(format!(
            "page size {page_size} must be a power of two from {PAGE_SIZE_MIN} to {PAGE_SIZE_MAX} bytes"
        )));
    }
    Ok(())
}

/// Reads the page id stored in a page image.
pub fn page_id(buf: &[u8]) -> PageId {
    PageId(get_u32(buf, OFF_PAGE_ID))
}

/// Reads the LSN stored in a page image.
pub fn lsn(buf: &[u8]) -> Lsn {
    Lsn(get_u64(buf, OFF_LSN))
}

/// Stores the LSN of a page image.
pub fn set_lsn(buf: &mut [u8], lsn: Lsn) {
    buf[OFF_LSN..OFF_LSN + 8].copy_from_slice(&lsn.0.to_le_bytes());
}

/// Reads the raw page-type byte.
pub fn page_type_byte(buf: &[u8]) -> u8 {
    buf[OFF_TYPE]
}

/// Reads the page type, or `None` if the byte is not a known type.
pub fn page_type(buf: &[u8]) -> Option<PageType> {
    PageType::from_u8(buf[OFF_TYPE])
}

/// Reads the next uniquifier the page will hand out.
pub fn uniq_seq(buf: &[u8]) -> u32 {
    get_u32(buf, OFF_UNIQ_SEQ)
}

/// Stores the next uniquifier the page will hand out.
pub fn set_uniq_seq(buf: &mut [u8], seq: u32) {
    buf[OFF_UNIQ_SEQ..OFF_UNIQ_SEQ + 4].copy_from_slice(&seq.to_le_bytes());
}

/// Turns `buf` into an empty page of the given type: header filled in, body
/// zeroed. The uniquifier sequence is kept (see the module docs); pass the
/// page's previous image in `buf` to keep it, or a zeroed buffer for a page
/// that never existed.
pub fn format(buf: &mut [u8], id: PageId, ty: PageType) {
    let seq = uniq_seq(buf);
    buf.fill(0);
    buf[OFF_PAGE_ID..OFF_PAGE_ID + 4].copy_from_slice(&id.0.to_le_bytes());
    buf[OFF_TYPE] = ty as u8;
    buf[OFF_FLAGS] = 0;
    buf[OFF_RESERVED..OFF_RESERVED + 2].copy_from_slice(&[0, 0]);
    set_uniq_seq(buf, seq.max(1));
}

/// Computes the checksum of a page image (over everything but the checksum).
pub fn compute_checksum(buf: &[u8]) -> u32 {
    crc32c::crc32c(&buf[OFF_CHECKSUM + 4..])
}

/// Writes the checksum into a page image; done just before it goes to disk.
pub fn seal(buf: &mut [u8]) {
    let sum = compute_checksum(buf);
    buf[OFF_CHECKSUM..OFF_CHECKSUM + 4].copy_from_slice(&sum.to_le_bytes());
}

/// True if every byte of the page is zero: a page that was never written.
pub fn is_zeroed(buf: &[u8]) -> bool {
    buf.iter().all(|&b| b == 0)
}

/// Verifies a page image read from the volume as page `expected`: checksum,
/// stored page id, and a known page type. Anything else is [`Error::Corrupt`].
pub fn verify(buf: &[u8], expected: PageId) -> Result<()> {
    let stored = get_u32(buf, OFF_CHECKSUM);
    let actual = compute_checksum(buf);
    if stored != actual {
        let reason = if is_zeroed(buf) {
            "page is all zeros (never written, or lost)".to_string()
        } else {
            format!("checksum mismatch: stored {stored:#010x}, computed {actual:#010x}")
        };
        return Err(Error::corrupt(expected, reason));
    }
    let id = page_id(buf);
    if id != expected {
        return Err(Error::corrupt(expected, format!("page claims to be page {id}")));
    }
    if page_type(buf).is_none() {
        return Err(Error::corrupt(expected, format!("unknown page type {}", buf[OFF_TYPE])));
    }
    Ok(())
}

/// Verifies that a page has the type the caller expects.
pub fn expect_type(buf: &[u8], id: PageId, ty: PageType) -> Result<()> {
    match page_type(buf) {
        Some(t) if t == ty => Ok(()),
        Some(t) => Err(Error::corrupt(
            id,
            format!("expected a {} page, found a {} page", ty.name(), t.name()),
        )),
        None => Err(Error::corrupt(id, format!("unknown page type {}", page_type_byte(buf)))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_page_verifies_and_any_flipped_byte_is_caught() {
        let mut buf = vec![0u8; PAGE_SIZE_DEFAULT];
        format(&mut buf, PageId(7), PageType::Slotted);
        buf[100] = 42;
        set_lsn(&mut buf, Lsn(99));
        seal(&mut buf);
        verify(&buf, PageId(7)).unwrap();
        assert_eq!(lsn(&buf), Lsn(99));
        for pos in [0usize, 3, 4, 17, 100, PAGE_SIZE_DEFAULT - 1] {
            let mut damaged = buf.clone();
            damaged[pos] ^= 0x10;
            let err = verify(&damaged, PageId(7)).unwrap_err();
            assert!(matches!(err, Error::Corrupt { page: PageId(7), .. }), "{err}");
        }
    }

    #[test]
    fn page_read_from_the_wrong_place_is_corrupt() {
        let mut buf = vec![0u8; PAGE_SIZE_DEFAULT];
        format(&mut buf, PageId(3), PageType::Free);
        seal(&mut buf);
        let err = verify(&buf, PageId(4)).unwrap_err();
        assert!(err.to_string().contains("claims to be page 3"), "{err}");
    }

    #[test]
    fn zeroed_page_is_reported_as_never_written() {
        let buf = vec![0u8; PAGE_SIZE_DEFAULT];
        let err = verify(&buf, PageId(5)).unwrap_err();
        assert!(err.to_string().contains("all zeros"), "{err}");
    }

    #[test]
    fn format_keeps_the_uniquifier_sequence() {
        let mut buf = vec![0u8; PAGE_SIZE_DEFAULT];
        format(&mut buf, PageId(1), PageType::Slotted);
        assert_eq!(uniq_seq(&buf), 1);
        set_uniq_seq(&mut buf, 500);
        format(&mut buf, PageId(1), PageType::Free);
        assert_eq!(uniq_seq(&buf), 500);
        assert_eq!(page_type(&buf), Some(PageType::Free));
    }

    #[test]
    fn page_sizes_are_validated() {
        assert!(validate_page_size(4096).is_ok());
        assert!(validate_page_size(65536).is_ok());
        assert!(validate_page_size(2048).is_err());
        assert!(validate_page_size(131072).is_err());
        assert!(validate_page_size(5000).is_err());
    }
}
