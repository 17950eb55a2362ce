//! Shrinking and walking: truncation down to a number of data pages, freeing
//! subtrees, and the validating walk behind [`super::check`] and
//! [`super::pages`].

use super::checked::{
    check_data_page, check_identity, child_offset, load_index, modify_checked, read_checked, usize_of,
};
use super::{Geometry, LargeDescriptor, Place, Tree, Via, NO_PAGE, OFF_COUNT};
use crate::access::PageAccess;
use crate::bytes::put_u16;
use crate::error::{Error, Result};
use crate::ids::PageId;

/// Cuts the tree down to its first `keep` data pages (at most the pages it
/// has), freeing the rest, and lowers the depth to the one `keep` needs. Counts
/// are read from the pages, so this also undoes a half-done extension.
pub(super) fn trim<A: PageAccess>(a: &mut A, t: &mut Tree, keep: u64) -> Result<()> {
    if t.root == NO_PAGE {
        return Ok(());
    }
    let top = Place {
        level: t.depth,
        first: 0,
    };
    if keep == 0 {
        free_subtree(a, t, t.root, top, Via::Descriptor)?;
        t.root = NO_PAGE;
        t.depth = 0;
        t.pages = 0;
        return Ok(());
    }
    if t.depth > 0 {
        trim_node(a, t, t.root, top, Via::Descriptor, keep)?;
    }
    let depth_keep = t.g.depth_for(keep);
    while t.depth > depth_keep {
        let root = t.root;
        let top = Place {
            level: t.depth,
            first: 0,
        };
        let children = load_index(a, t, root, top, Via::Descriptor, 1, 1)?;
        let child = children[0];
        let child_place = Place {
            level: t.depth - 1,
            first: 0,
        };
        let via = Via::Parent { page: root, slot: 0 };
        read_checked(a, child, via, |p| check_identity(p, child, t, child_place, via))?;
        a.free(root)?;
        t.root = child;
        t.depth -= 1;
    }
    t.pages = keep;
    Ok(())
}

/// Trims the subtree of index page `id` to the data pages before `keep`
/// (`keep > place.first`: the page itself stays).
fn trim_node<A: PageAccess>(a: &mut A, t: &Tree, id: PageId, place: Place, via: Via, keep: u64) -> Result<()> {
    let g = t.g;
    let count_keep = g.child_count(place.level, place.first, keep);
    let children = load_index(a, t, id, place, via, count_keep, g.fanout)?;
    let span = g.span(place.level - 1);
    let last = count_keep - 1;
    if place.level > 1 {
        let child_place = Place {
            level: place.level - 1,
            first: place.first + last * span,
        };
        let child_via = Via::Parent { page: id, slot: last };
        trim_node(a, t, children[usize_of(last)], child_place, child_via, keep)?;
    }
    let count = children.len() as u64;
    if count > count_keep {
        // Unlink first, so the tree never points at a freed page.
        let page_size = g.page_size;
        modify_checked(a, id, via, |p| {
            if p.len() != page_size {
                return Err(Error::corrupt(id, "page image has the wrong size"));
            }
            put_u16(p, OFF_COUNT, count_keep as u16);
            p[child_offset(count_keep)..child_offset(count)].fill(0);
            Ok(())
        })?;
        for slot in count_keep..count {
            let child_place = Place {
                level: place.level - 1,
                first: place.first + slot * span,
            };
            let child_via = Via::Parent { page: id, slot };
            free_subtree(a, t, children[usize_of(slot)], child_place, child_via)?;
        }
    }
    Ok(())
}

/// Frees page `id` and everything under it, after checking each page belongs
/// to this object at the expected place (a bad pointer never frees a page of
/// another object).
fn free_subtree<A: PageAccess>(a: &mut A, t: &Tree, id: PageId, place: Place, via: Via) -> Result<()> {
    if place.level == 0 {
        read_checked(a, id, via, |p| check_data_page(p, id, t, place.first, via))?;
        return a.free(id);
    }
    let children = load_index(a, t, id, place, via, 0, t.g.fanout)?;
    let span = t.g.span(place.level - 1);
    for (slot, &child) in children.iter().enumerate() {
        let slot = slot as u64;
        let child_place = Place {
            level: place.level - 1,
            first: place.first + slot * span,
        };
        free_subtree(a, t, child, child_place, Via::Parent { page: id, slot })?;
    }
    a.free(id)
}

pub(super) fn walk_all<A: PageAccess>(a: &mut A, d: &LargeDescriptor, visit: &mut dyn FnMut(PageId)) -> Result<()> {
    let g = Geometry::new(a.page_size())?;
    let t = Tree::open(g, d)?;
    if t.root == NO_PAGE {
        return Ok(());
    }
    let top = Place {
        level: t.depth,
        first: 0,
    };
    walk(a, &t, t.root, top, Via::Descriptor, visit)
}

/// Validates page `id` at `place` and everything under it, calling `visit`
/// on each page, parents first.
fn walk<A: PageAccess>(
    a: &mut A,
    t: &Tree,
    id: PageId,
    place: Place,
    via: Via,
    visit: &mut dyn FnMut(PageId),
) -> Result<()> {
    if place.level == 0 {
        read_checked(a, id, via, |p| check_data_page(p, id, t, place.first, via))?;
        visit(id);
        return Ok(());
    }
    let g = t.g;
    let count = g.child_count(place.level, place.first, t.pages);
    let children = load_index(a, t, id, place, via, count, count)?;
    visit(id);
    let span = g.span(place.level - 1);
    for (slot, &child) in children.iter().enumerate() {
        let slot = slot as u64;
        let child_place = Place {
            level: place.level - 1,
            first: place.first + slot * span,
        };
        walk(a, t, child, child_place, Via::Parent { page: id, slot }, visit)?;
    }
    Ok(())
}
