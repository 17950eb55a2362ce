//! The large-object tree on arbitrary bytes: the input is a descriptor (24
//! bytes) followed by 128-byte page images numbered 1, 2, …; the descriptor
//! is decoded, checked against the pages, and the tree is walked (`check`,
//! `pages`), read in ranges, and written, appended to and truncated on
//! copies. Small pages give deep trees from small inputs. None may panic;
//! damage is `Error::Corrupt`.

use cairn_storage::record::large::{self, LargeDescriptor};
use cairn_storage::{GroupId, PageId};

#[path = "mem_pages.rs"]
pub mod mem_pages;

use mem_pages::MemPages;

/// The page size of the trees: 88 payload bytes and 22 children a page.
pub const PAGE_SIZE: usize = 128;
/// Pages taken from one input.
const PAGES_MAX: usize = 1024;
/// The most bytes one read or write touches.
const RANGE_MAX: u64 = 2048;

/// Runs the target on one input; panics only on a bug.
pub fn run(data: &[u8]) {
    let (desc, pages) = data.split_at(data.len().min(LargeDescriptor::ENCODED_SIZE));
    let Ok(d) = LargeDescriptor::decode(desc, PageId(0)) else {
        return;
    };
    let store = MemPages::from_bytes(pages, PAGE_SIZE, PAGES_MAX);
    let page_count = store.pages.len() as u32 + 1;
    let _ = large::check_fits(&d, PAGE_SIZE, page_count, PageId(0));
    let mut a = store.clone();
    let _ = large::check(&mut a, &d);
    let _ = large::pages(&mut a, &d);
    // Ranges at both ends and in the middle.
    for offset in [0, d.len / 2, d.len.saturating_sub(RANGE_MAX), d.len] {
        let n = RANGE_MAX.min(d.len - offset.min(d.len)) as usize;
        let mut buf = vec![0u8; n];
        let _ = large::read(&mut a, &d, offset, &mut buf);
    }
    // A read past the end is an error, never a panic.
    let _ = large::read(&mut a, &d, d.len, &mut [0u8; 1]);
    let _ = large::read(&mut a, &d, u64::MAX, &mut [0u8; 1]);
    // Changes, each on its own copy of the pages.
    let g = GroupId::DEFAULT;
    let mut c = (store.clone(), d);
    let _ = large::write(&mut c.0, &mut c.1, g, d.len / 2, &[0xAB; 300]);
    let mut c = (store.clone(), d);
    let _ = large::append(&mut c.0, &mut c.1, g, &[0xCD; 200]);
    let mut c = (store.clone(), d);
    let _ = large::truncate(&mut c.0, &mut c.1, d.len / 3);
    let mut c = store;
    let _ = large::destroy(&mut c, d);
}
