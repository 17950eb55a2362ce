//! Page formats of the group directory and of extent lists.
//!
//! A **group** is a named set of extents. The group directory is a chain of
//! `GroupDir` pages starting at the page the volume header names; each entry
//! names a group and the head and tail of its chain of `ExtentList` pages. An
//! extent list entry records an extent (first page, length) and a 64-bit map
//! of which of its pages are in use.
//!
//! ```text
//!  GroupDir page                      ExtentList page
//!  24  4  next page (0 = last)        24  4  next page (0 = last)
//!  28  4  entry count                 28  4  entry count
//!  32  .. entries, 80 bytes each:     32  4  owning group id
//!         0  4  group id              36  4  reserved
//!         4  1  name length           40  .. entries, 16 bytes each:
//!         5  3  reserved                     0  4  first page
//!         8  64 name (UTF-8)                 4  2  length in pages
//!         72 4  extent list head             6  2  reserved
//!         76 4  extent list tail             8  8  used-page map (bit i = page first+i)
//! ```
//!
//! The extent list of a group lives in its own extents: the first page of an
//! extent that needs a new list page becomes that list page.

use crate::bytes::{get_u32, put_u32};
use crate::error::{Error, Result};
use crate::ids::{GroupId, PageId};
use crate::page::{self, PageType, HEADER_SIZE};

/// Longest group name in bytes.
pub const GROUP_NAME_MAX: usize = 64;

const OFF_NEXT: usize = HEADER_SIZE;
const OFF_COUNT: usize = HEADER_SIZE + 4;
const DIR_ENTRIES: usize = HEADER_SIZE + 8;
const DIR_ENTRY_SIZE: usize = 80;
const LIST_OWNER: usize = HEADER_SIZE + 8;
const LIST_ENTRIES: usize = HEADER_SIZE + 16;
const LIST_ENTRY_SIZE: usize = 16;

/// Entries a group-directory page holds.
pub fn dir_capacity(page_size: usize) -> usize {
    (page_size - DIR_ENTRIES) / DIR_ENTRY_SIZE
}

/// Entries an extent-list page holds.
pub fn list_capacity(page_size: usize) -> usize {
    (page_size - LIST_ENTRIES) / LIST_ENTRY_SIZE
}

/// The next page of a chain (directory or extent list), if any.
pub fn next_page(buf: &[u8]) -> Option<PageId> {
    match get_u32(buf, OFF_NEXT) {
        0 => None,
        n => Some(PageId(n)),
    }
}

/// Links a chain page to the next one.
pub fn set_next_page(buf: &mut [u8], next: PageId) {
    put_u32(buf, OFF_NEXT, next.0);
}

/// Entry count of a chain page.
pub fn entry_count(buf: &[u8]) -> usize {
    get_u32(buf, OFF_COUNT) as usize
}

/// One group-directory entry.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct DirEntry {
    /// The group's id.
    pub id: GroupId,
    /// The group's name.
    pub name: String,
    /// First extent-list page (0 = the group has no extents yet).
    pub list_head: PageId,
    /// Last extent-list page.
    pub list_tail: PageId,
}

/// Formats an empty group-directory page.
pub fn init_dir(buf: &mut [u8], id: PageId) {
    page::format(buf, id, PageType::GroupDir);
}

/// Reads and validates every entry of a group-directory page.
pub fn read_dir(buf: &[u8], id: PageId) -> Result<Vec<DirEntry>> {
    page::expect_type(buf, id, PageType::GroupDir)?;
    let count = entry_count(buf);
    if count > dir_capacity(buf.len()) {
        return Err(Error::corrupt(
            id,
            format!(
                "group directory holds {count} entries, room for {}",
                dir_capacity(buf.len())
            ),
        ));
    }
    let mut out = Vec::with_capacity(count);
    for i in 0..count {
        let e = &buf[DIR_ENTRIES + i * DIR_ENTRY_SIZE..DIR_ENTRIES + (i + 1) * DIR_ENTRY_SIZE];
        let name_len = e[4] as usize;
        if name_len > GROUP_NAME_MAX {
            return Err(Error::corrupt(
                id,
                format!("group entry {i} has a name of {name_len} bytes"),
            ));
        }
        let name = std::str::from_utf8(&e[8..8 + name_len])
            .map_err(|_| Error::corrupt(id, format!("group entry {i} has a name that is not UTF-8")))?
            .to_string();
        out.push(DirEntry {
            id: GroupId(get_u32(e, 0)),
            name,
            list_head: PageId(get_u32(e, 72)),
            list_tail: PageId(get_u32(e, 76)),
        });
    }
    Ok(out)
}

/// Writes entry `index` of a directory page (appending if `index` equals the
/// count). The caller checks capacity and name length first.
pub fn write_dir_entry(buf: &mut [u8], index: usize, entry: &DirEntry) {
    assert!(index < dir_capacity(buf.len()) && entry.name.len() <= GROUP_NAME_MAX);
    let off = DIR_ENTRIES + index * DIR_ENTRY_SIZE;
    let e = &mut buf[off..off + DIR_ENTRY_SIZE];
    e.fill(0);
    put_u32(e, 0, entry.id.0);
    e[4] = entry.name.len() as u8;
    e[8..8 + entry.name.len()].copy_from_slice(entry.name.as_bytes());
    put_u32(e, 72, entry.list_head.0);
    put_u32(e, 76, entry.list_tail.0);
    if index >= entry_count(buf) {
        put_u32(buf, OFF_COUNT, (index + 1) as u32);
    }
}

/// One extent-list entry.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ExtentEntry {
    /// First page of the extent.
    pub start: PageId,
    /// Pages in the extent (1..=64).
    pub len: u32,
    /// Bit i set = page `start + i` in use.
    pub used: u64,
}

/// Formats an empty extent-list page owned by `group`.
pub fn init_list(buf: &mut [u8], id: PageId, group: GroupId) {
    page::format(buf, id, PageType::ExtentList);
    put_u32(buf, LIST_OWNER, group.0);
}

/// Reads and validates an extent-list page: its owner and its entries.
pub fn read_list(buf: &[u8], id: PageId) -> Result<(GroupId, Vec<ExtentEntry>)> {
    page::expect_type(buf, id, PageType::ExtentList)?;
    let count = entry_count(buf);
    if count > list_capacity(buf.len()) {
        return Err(Error::corrupt(
            id,
            format!(
                "extent list holds {count} entries, room for {}",
                list_capacity(buf.len())
            ),
        ));
    }
    let mut out = Vec::with_capacity(count);
    for i in 0..count {
        let off = LIST_ENTRIES + i * LIST_ENTRY_SIZE;
        let len = u32::from(u16::from_le_bytes([buf[off + 4], buf[off + 5]]));
        let used = u64::from_le_bytes(buf[off + 8..off + 16].try_into().expect("8 bytes"));
        if len == 0 || len > 64 {
            return Err(Error::corrupt(id, format!("extent entry {i} has length {len}")));
        }
        if len < 64 && used >> len != 0 {
            return Err(Error::corrupt(
                id,
                format!("extent entry {i} marks pages beyond its length in use"),
            ));
        }
        out.push(ExtentEntry {
            start: PageId(get_u32(buf, off)),
            len,
            used,
        });
    }
    Ok((GroupId(get_u32(buf, LIST_OWNER)), out))
}

/// Writes entry `index` of an extent-list page (appending if `index` equals
/// the count).
pub fn write_list_entry(buf: &mut [u8], index: usize, e: &ExtentEntry) {
    assert!(index < list_capacity(buf.len()) && (1..=64).contains(&e.len));
    let off = LIST_ENTRIES + index * LIST_ENTRY_SIZE;
    put_u32(buf, off, e.start.0);
    buf[off + 4..off + 6].copy_from_slice(&(e.len as u16).to_le_bytes());
    buf[off + 6..off + 8].copy_from_slice(&[0, 0]);
    buf[off + 8..off + 16].copy_from_slice(&e.used.to_le_bytes());
    if index >= entry_count(buf) {
        put_u32(buf, OFF_COUNT, (index + 1) as u32);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dir_and_list_entries_round_trip() {
        let mut buf = vec![0u8; 4096];
        init_dir(&mut buf, PageId(2));
        let e = DirEntry {
            id: GroupId(3),
            name: "parts".into(),
            list_head: PageId(9),
            list_tail: PageId(17),
        };
        write_dir_entry(&mut buf, 0, &e);
        assert_eq!(read_dir(&buf, PageId(2)).unwrap(), vec![e]);
        buf[OFF_COUNT] = 200;
        assert!(read_dir(&buf, PageId(2)).is_err());

        let mut buf = vec![0u8; 4096];
        init_list(&mut buf, PageId(9), GroupId(3));
        let x = ExtentEntry {
            start: PageId(9),
            len: 8,
            used: 0b101,
        };
        write_list_entry(&mut buf, 0, &x);
        assert_eq!(read_list(&buf, PageId(9)).unwrap(), (GroupId(3), vec![x]));
        buf[LIST_ENTRIES + 8] = 0xff;
        buf[LIST_ENTRIES + 9] = 0xff;
        assert!(
            read_list(&buf, PageId(9)).is_err(),
            "used bits past the extent's length"
        );
    }
}
