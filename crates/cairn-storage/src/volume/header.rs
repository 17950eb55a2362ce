//! Page 0: the volume header.
//!
//! ```text
//!  offset size field            (after the 24-byte common page header)
//!  24     8    magic            b"CAIRNVOL"
//!  32     4    format_version
//!  36     4    page_size
//!  40     16   creation_id      equals the manifest's
//!  56     4    page_count       pages in the volume (high-water mark)
//!  60     4    extent_pages     pages per extent (1..=64)
//!  64     4    group_dir_page   first page of the group directory chain
//!  68     4    next_group_id
//!  72     4    region_pages     default clustering region for create-near
//! ```
//!
//! The magic and page size sit at fixed offsets below 4 KiB, so they can be
//! read before the page size is trusted: a volume whose header claims another
//! page size than its manifest is reported as such, not as a bad checksum.

use crate::bytes::get_u32;
use std::path::Path;

use crate::error::{Error, Result};
use crate::ids::PageId;
use crate::page::{self, PageType};
use crate::volume::manifest::FORMAT_VERSION;

const MAGIC: &[u8; 8] = b"CAIRNVOL";
const OFF_MAGIC: usize = 24;
const OFF_VERSION: usize = 32;
const OFF_PAGE_SIZE: usize = 36;
const OFF_CREATION: usize = 40;
const OFF_PAGE_COUNT: usize = 56;
const OFF_EXTENT_PAGES: usize = 60;
const OFF_GROUP_DIR: usize = 64;
const OFF_NEXT_GROUP: usize = 68;
const OFF_REGION: usize = 72;
/// Bytes of the header page that carry fields.
pub const HEADER_FIELDS_END: usize = 76;
const _: () = assert!(HEADER_FIELDS_END <= page::PAGE_SIZE_MIN);

/// Largest extent: the extent list keeps a 64-bit used-page map per extent.
pub const EXTENT_PAGES_MAX: u32 = 64;

/// The decoded volume header.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct VolumeHeader {
    /// Bytes per page.
    pub page_size: u32,
    /// Equals the manifest's creation id.
    pub creation_id: u128,
    /// Pages in the volume.
    pub page_count: u32,
    /// Pages per extent.
    pub extent_pages: u32,
    /// First page of the group directory.
    pub group_dir_page: PageId,
    /// The id the next new group gets.
    pub next_group_id: u32,
    /// Default clustering region in pages.
    pub region_pages: u32,
}

impl VolumeHeader {
    /// Writes the header fields into a page-0 image (already formatted).
    pub fn store(&self, buf: &mut [u8]) {
        buf[OFF_MAGIC..OFF_MAGIC + 8].copy_from_slice(MAGIC);
        buf[OFF_VERSION..OFF_VERSION + 4].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        buf[OFF_PAGE_SIZE..OFF_PAGE_SIZE + 4].copy_from_slice(&self.page_size.to_le_bytes());
        buf[OFF_CREATION..OFF_CREATION + 16].copy_from_slice(&self.creation_id.to_le_bytes());
        buf[OFF_PAGE_COUNT..OFF_PAGE_COUNT + 4].copy_from_slice(&self.page_count.to_le_bytes());
        buf[OFF_EXTENT_PAGES..OFF_EXTENT_PAGES + 4].copy_from_slice(&self.extent_pages.to_le_bytes());
        buf[OFF_GROUP_DIR..OFF_GROUP_DIR + 4].copy_from_slice(&self.group_dir_page.0.to_le_bytes());
        buf[OFF_NEXT_GROUP..OFF_NEXT_GROUP + 4].copy_from_slice(&self.next_group_id.to_le_bytes());
        buf[OFF_REGION..OFF_REGION + 4].copy_from_slice(&self.region_pages.to_le_bytes());
    }

    /// Checks the magic, version and page size of raw (unverified) header
    /// bytes, before the checksum can be trusted. `path` names the volume.
    pub fn precheck(raw: &[u8], expected_page_size: u32, path: &Path) -> Result<()> {
        if raw.len() < HEADER_FIELDS_END || &raw[OFF_MAGIC..OFF_MAGIC + 8] != MAGIC {
            return Err(Error::NotADatabase {
                path: path.to_path_buf(),
                reason: "page 0 does not carry the Cairn volume magic".into(),
            });
        }
        let version = get_u32(raw, OFF_VERSION);
        if version != FORMAT_VERSION {
            return Err(Error::UnsupportedVersion {
                path: path.to_path_buf(),
                found: version,
                supported: FORMAT_VERSION,
            });
        }
        let ps = get_u32(raw, OFF_PAGE_SIZE);
        if ps != expected_page_size {
            return Err(Error::CorruptFile {
                path: path.to_path_buf(),
                reason: format!("the volume header says page size {ps}, the manifest says {expected_page_size}"),
            });
        }
        Ok(())
    }

    /// Decodes a verified page-0 image and checks it against the manifest.
    pub fn load(buf: &[u8], expected_page_size: u32, expected_creation: u128, path: &Path) -> Result<VolumeHeader> {
        page::expect_type(buf, PageId::HEADER, PageType::VolumeHeader)?;
        Self::precheck(buf, expected_page_size, path)?;
        let creation_id = u128::from_le_bytes(buf[OFF_CREATION..OFF_CREATION + 16].try_into().expect("16 bytes"));
        if creation_id != expected_creation {
            return Err(Error::CorruptFile {
                path: path.to_path_buf(),
                reason: "the volume belongs to another database (creation ids differ)".into(),
            });
        }
        let h = VolumeHeader {
            page_size: expected_page_size,
            creation_id,
            page_count: get_u32(buf, OFF_PAGE_COUNT),
            extent_pages: get_u32(buf, OFF_EXTENT_PAGES),
            group_dir_page: PageId(get_u32(buf, OFF_GROUP_DIR)),
            next_group_id: get_u32(buf, OFF_NEXT_GROUP),
            region_pages: get_u32(buf, OFF_REGION),
        };
        let bad = |reason: String| Err(Error::corrupt(PageId::HEADER, reason));
        if h.extent_pages == 0 || h.extent_pages > EXTENT_PAGES_MAX {
            return bad(format!(
                "extent size {} pages is outside 1..={EXTENT_PAGES_MAX}",
                h.extent_pages
            ));
        }
        if h.page_count < 3 {
            return bad(format!("page count {} is below the 3 system pages", h.page_count));
        }
        if h.group_dir_page.0 == 0 || h.group_dir_page.0 >= h.page_count {
            return bad(format!(
                "group directory page {} is outside the volume",
                h.group_dir_page
            ));
        }
        Ok(h)
    }
}
