//! The B+-tree's page decoders on arbitrary bytes. `btree::check_page` (the
//! full check of one node page) runs on each page image, as is and with a
//! valid common header of a leaf and of an inner node, so the node header
//! and cells are reached. Then the whole-tree code — `BTree::open`,
//! `check`, `len`, lookups, range scans both ways, an insert and a delete on
//! a copy, `destroy` — runs on the tree rooted at page 1, and on each other
//! page made a root (its root flag set), which drives every node decoder
//! (`Node::parse`, cells, children, searches) over every page. None may
//! panic or loop; damage is `Error::Corrupt`.

use std::ops::Bound;

use cairn_storage::btree::{check_page, BTree, Direction, NODE_HEADER_SIZE};
use cairn_storage::page::{self, PageType};
use cairn_storage::PageId;

#[path = "mem_pages.rs"]
pub mod mem_pages;

use mem_pages::MemPages;

/// The page size of the trees (the smallest a volume has).
pub const PAGE_SIZE: usize = 4096;
/// Pages taken from one input.
const PAGES_MAX: usize = 8;
/// Steps of one range scan: a scan of a damaged tree must end by itself long
/// before this; the cap only keeps a regression from hanging the replay.
const SCAN_STEPS_MAX: usize = 100_000;
/// Byte offset of a node's flags (after the common header and the level).
const OFF_FLAGS: usize = page::HEADER_SIZE + 1;
/// The root flag.
const FLAG_ROOT: u8 = 1;
const _: () = assert!(OFF_FLAGS < NODE_HEADER_SIZE);

/// Keys looked up in every tree.
const PROBES: [&[u8]; 5] = [b"", b"\0", b"key-0005", b"m", b"\xff\xff"];

/// Runs the target on one input; panics only on a bug.
pub fn run(data: &[u8]) {
    let store = MemPages::from_bytes(data, PAGE_SIZE, PAGES_MAX);
    for image in store.pages.values() {
        let _ = check_page(image);
        for ty in [PageType::BTreeLeaf, PageType::BTreeInner] {
            let _ = check_page(&with_type(image, ty));
        }
    }
    walk_tree(store.clone(), PageId(1));
    for &id in store.pages.keys().skip(1) {
        let mut copy = store.clone();
        if let Some(p) = copy.pages.get_mut(&id) {
            p[OFF_FLAGS] |= FLAG_ROOT;
        }
        walk_tree(copy, id);
    }
}

/// `image` with the common header of an empty page of type `ty` (same id).
fn with_type(image: &[u8], ty: PageType) -> Vec<u8> {
    let mut header = vec![0u8; image.len()];
    page::format(&mut header, page::page_id(image), ty);
    let mut p = image.to_vec();
    p[..page::HEADER_SIZE].copy_from_slice(&header[..page::HEADER_SIZE]);
    p
}

/// The whole-tree operations on the tree rooted at `root`.
fn walk_tree(mut store: MemPages, root: PageId) {
    let Ok(tree) = BTree::open(&mut store, root) else {
        return;
    };
    let _ = tree.is_unique(&mut store);
    let _ = tree.check(&mut store);
    let _ = tree.len(&mut store);
    let _ = tree.is_empty(&mut store);
    for probe in PROBES {
        let _ = tree.get(&mut store, probe);
        let _ = tree.get_all(&mut store, probe);
        let _ = tree.get_each(&mut store, probe, |_| true);
        if let Ok(leaf) = tree.leaf_of(&mut store, probe) {
            let _ = tree.leaf_entries(&mut store, leaf, |_, _| {});
            let _ = tree.get_each_in(&mut store, leaf, probe, |_| true);
        }
    }
    for dir in [Direction::Forward, Direction::Backward] {
        for (lo, hi) in [
            (Bound::Unbounded, Bound::Unbounded),
            (Bound::Included(&b"key-0003"[..]), Bound::Excluded(&b"key-0007"[..])),
        ] {
            if let Ok(mut cur) = tree.range(&mut store, lo, hi, dir) {
                for _ in 0..SCAN_STEPS_MAX {
                    match cur.next(&mut store) {
                        Ok(Some(_)) => {}
                        _ => break,
                    }
                }
            }
        }
    }
    let mut copy = store.clone();
    if tree.insert(&mut copy, b"key-0005", b"fuzz").is_ok() {
        let _ = tree.check(&mut copy);
    }
    let mut copy = store.clone();
    if tree.delete(&mut copy, b"key-0005", None).is_ok() {
        let _ = tree.check(&mut copy);
    }
    let _ = tree.destroy(&mut store);
}
