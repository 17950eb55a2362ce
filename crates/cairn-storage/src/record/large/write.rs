//! Writing: extending the tree with new pages, then overwriting the pages
//! already in range.

use std::cmp::{max, min};

use super::checked::{check_data_page, check_len, child_offset, load_index, modify_checked, usize_of, Cursor};
use super::shrink::trim;
use super::{
    fanout_of, Geometry, LargeDescriptor, Place, Tree, Via, LARGE_OBJECT_LEN_MAX, NO_PAGE, OFF_BODY, OFF_COUNT,
    OFF_FIRST, OFF_LEVEL, OFF_OWNER,
};
use crate::access::PageAccess;
use crate::bytes::{get_u16, put_u16, put_u32};
use crate::error::{Error, Result};
use crate::ids::{GroupId, PageId};
use crate::page;

/// The bytes being written, at `offset` in the object.
struct Source<'d> {
    data: &'d [u8],
    offset: u64,
    payload: u64,
}

impl<'d> Source<'d> {
    /// The bytes of data page `index`, which must start at or after `offset`
    /// and before the end of the data.
    fn page(&self, index: u64) -> &'d [u8] {
        let start = index * self.payload - self.offset;
        let end = min(start + self.payload, self.data.len() as u64);
        &self.data[usize_of(start)..usize_of(end)]
    }
}

pub(super) fn write_at<A: PageAccess>(
    a: &mut A,
    d: &mut LargeDescriptor,
    group: GroupId,
    near: Option<PageId>,
    offset: u64,
    data: &[u8],
) -> Result<()> {
    if offset > d.len {
        return Err(Error::InvalidArgument(format!(
            "write at offset {offset} would leave a hole after the end of a large object of {} bytes",
            d.len
        )));
    }
    let limit_exceeded = |value: u64, limit: u64| Error::LimitExceeded {
        what: "large object length",
        value,
        limit,
    };
    let end = offset
        .checked_add(data.len() as u64)
        .ok_or_else(|| limit_exceeded(u64::MAX, LARGE_OBJECT_LEN_MAX))?;
    if end > LARGE_OBJECT_LEN_MAX {
        return Err(limit_exceeded(end, LARGE_OBJECT_LEN_MAX));
    }
    if data.is_empty() {
        return Ok(());
    }
    let g = Geometry::new(a.page_size())?;
    if end > g.len_max() {
        return Err(limit_exceeded(end, g.len_max()));
    }
    let mut t = Tree::open(g, d)?;
    let pages_old = t.pages;
    let pages_new = max(pages_old, g.pages_for(end));
    let src = Source {
        data,
        offset,
        payload: g.payload,
    };
    extend(a, &mut t, group, near, pages_new, &src)?;
    // The part of the range on pages that existed before.
    let overwrite_end = min(end, pages_old * g.payload);
    if offset < overwrite_end {
        let part = &data[..usize_of(overwrite_end - offset)];
        if let Err(e) = overwrite(a, &t, offset, part) {
            // Give back the pages the extension added; the error is what counts.
            let _ = trim(a, &mut t, pages_old);
            return Err(e);
        }
    }
    *d = t.descriptor(max(d.len, end));
    Ok(())
}

/// Writes `data` at `offset` over existing data pages.
fn overwrite<A: PageAccess>(a: &mut A, t: &Tree, offset: u64, data: &[u8]) -> Result<()> {
    let g = t.g;
    let end = offset + data.len() as u64;
    let mut cursor = Cursor::default();
    let mut pos = offset;
    while pos < end {
        let (index, in_page, n) = g.chunk(pos, end);
        let (id, via) = cursor.data_page(a, t, index)?;
        let start = usize_of(pos - offset);
        let src = &data[start..start + n];
        modify_checked(a, id, via, |p| {
            check_data_page(p, id, t, index, via)?;
            p[OFF_BODY + in_page..OFF_BODY + in_page + n].copy_from_slice(src);
            Ok(())
        })?;
        pos += n as u64;
    }
    Ok(())
}

/// Grows the tree to `pages_new` data pages filled from `src`. On failure the
/// pages added are freed again and `t` is as it was.
fn extend<A: PageAccess>(
    a: &mut A,
    t: &mut Tree,
    group: GroupId,
    near: Option<PageId>,
    pages_new: u64,
    src: &Source<'_>,
) -> Result<()> {
    let pages_old = t.pages;
    if pages_new <= pages_old {
        return Ok(());
    }
    match extend_tree(a, t, group, near, pages_new, src) {
        Ok(()) => {
            t.pages = pages_new;
            Ok(())
        }
        Err(e) => {
            // Best effort; the first error is the one to report.
            let _ = trim(a, t, pages_old);
            Err(e)
        }
    }
}

fn extend_tree<A: PageAccess>(
    a: &mut A,
    t: &mut Tree,
    group: GroupId,
    near: Option<PageId>,
    pages_new: u64,
    src: &Source<'_>,
) -> Result<()> {
    let depth_new = t.g.depth_for(pages_new);
    if t.root == NO_PAGE {
        let top = Place {
            level: depth_new,
            first: 0,
        };
        let payload = if depth_new == 0 { src.page(0) } else { &[] };
        t.root = alloc_page(a, t, group, near, top, &[], payload)?;
        t.depth = depth_new;
        if depth_new == 0 {
            return Ok(());
        }
    }
    while t.depth < depth_new {
        let top = Place {
            level: t.depth + 1,
            first: 0,
        };
        let old_root = t.root;
        t.root = alloc_page(a, t, group, Some(old_root), top, &[old_root], &[])?;
        t.depth += 1;
    }
    let top = Place {
        level: t.depth,
        first: 0,
    };
    let mut grow = Grow {
        group,
        pages_new,
        src,
        prev: near,
    };
    extend_node(a, t, &mut grow, t.root, top, Via::Descriptor)
}

/// What an extension carries down the tree.
struct Grow<'s, 'd> {
    group: GroupId,
    /// Data pages the tree is growing to.
    pages_new: u64,
    src: &'s Source<'d>,
    /// The last data page so far: the allocation hint for the next page.
    prev: Option<PageId>,
}

/// Adds children to index page `id` (and below) until the subtree covers
/// its share of `grow.pages_new` data pages.
fn extend_node<A: PageAccess>(
    a: &mut A,
    t: &mut Tree,
    grow: &mut Grow<'_, '_>,
    id: PageId,
    place: Place,
    via: Via,
) -> Result<()> {
    let g = t.g;
    let count_old = g.child_count(place.level, place.first, t.pages);
    let children = load_index(a, t, id, place, via, count_old, count_old)?;
    let count_new = g.child_count(place.level, place.first, grow.pages_new);
    if place.level == 1 {
        if let Some(&last) = children.last() {
            grow.prev = Some(last);
        }
        // Allocate and fill the new data pages, then link them in one change.
        let mut added = Vec::with_capacity(usize_of(count_new - count_old));
        let mut result = Ok(());
        for slot in count_old..count_new {
            let index = place.first + slot;
            let data_place = Place { level: 0, first: index };
            let payload = grow.src.page(index);
            match alloc_page(a, t, grow.group, grow.prev, data_place, &[], payload) {
                Ok(page) => {
                    added.push(page);
                    grow.prev = Some(page);
                }
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        if result.is_ok() {
            result = link_children(a, id, via, count_old, &added);
        }
        if result.is_err() {
            for page in added {
                let _ = a.free(page);
            }
        }
        return result;
    }
    let span = g.span(place.level - 1);
    if count_old > 0 {
        let slot = count_old - 1;
        let child_place = Place {
            level: place.level - 1,
            first: place.first + slot * span,
        };
        let child_via = Via::Parent { page: id, slot };
        extend_node(a, t, grow, children[usize_of(slot)], child_place, child_via)?;
    }
    for slot in count_old..count_new {
        let child_place = Place {
            level: place.level - 1,
            first: place.first + slot * span,
        };
        let child = alloc_page(a, t, grow.group, grow.prev, child_place, &[], &[])?;
        if let Err(e) = link_children(a, id, via, slot, &[child]) {
            let _ = a.free(child);
            return Err(e);
        }
        let child_via = Via::Parent { page: id, slot };
        extend_node(a, t, grow, child, child_place, child_via)?;
    }
    Ok(())
}

/// Appends `new` to the children of index page `id`, which has `count_before`.
fn link_children<A: PageAccess>(a: &mut A, id: PageId, via: Via, count_before: u64, new: &[PageId]) -> Result<()> {
    if new.is_empty() {
        return Ok(());
    }
    let page_size = a.page_size();
    let fanout = fanout_of(page_size);
    let count_after = count_before + new.len() as u64;
    modify_checked(a, id, via, |p| {
        if p.len() != page_size {
            return Err(Error::corrupt(id, "page image has the wrong size"));
        }
        let count = u64::from(get_u16(p, OFF_COUNT));
        if count != count_before || count_after > fanout {
            return Err(Error::corrupt(
                id,
                format!("index page has {count} children, expected {count_before}"),
            ));
        }
        for (k, child) in new.iter().enumerate() {
            put_u32(p, child_offset(count_before + k as u64), child.0);
        }
        put_u16(p, OFF_COUNT, count_after as u16);
        Ok(())
    })
}

/// Allocates a large-object page at `place`, with the given children (index
/// pages) or payload (data pages). The first page an object ever allocates
/// gives it its owner tag.
fn alloc_page<A: PageAccess>(
    a: &mut A,
    t: &mut Tree,
    group: GroupId,
    near: Option<PageId>,
    place: Place,
    children: &[PageId],
    payload: &[u8],
) -> Result<PageId> {
    let first = u32::try_from(place.first).map_err(|_| Error::LimitExceeded {
        what: "large object data pages",
        value: place.first + 1,
        limit: u64::from(u32::MAX),
    })?;
    let ty = place.page_type();
    let id = a.allocate(group, near, ty)?;
    let g = t.g;
    let owner_now = t.owner;
    let written = a.modify(id, |p| {
        check_len(p, id, &g)?;
        page::expect_type(p, id, ty)?;
        let owner = if owner_now != 0 {
            owner_now
        } else {
            let uniq = page::uniq_seq(p);
            let next = uniq.checked_add(1).ok_or(Error::LimitExceeded {
                what: "page uniquifier sequence",
                value: u64::from(uniq) + 1,
                limit: u64::from(u32::MAX),
            })?;
            page::set_uniq_seq(p, next);
            (u64::from(id.0) << 32) | u64::from(uniq)
        };
        p[OFF_OWNER..].fill(0);
        p[OFF_OWNER..OFF_OWNER + 8].copy_from_slice(&owner.to_le_bytes());
        put_u32(p, OFF_FIRST, first);
        p[OFF_LEVEL] = place.level;
        put_u16(p, OFF_COUNT, children.len() as u16);
        for (slot, child) in children.iter().enumerate() {
            put_u32(p, child_offset(slot as u64), child.0);
        }
        p[OFF_BODY..OFF_BODY + payload.len()].copy_from_slice(payload);
        Ok(owner)
    });
    match written {
        Ok(owner) => {
            t.owner = owner;
            Ok(id)
        }
        Err(e) => {
            let _ = a.free(id);
            Err(e)
        }
    }
}
