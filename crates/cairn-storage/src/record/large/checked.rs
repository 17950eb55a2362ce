//! Page access with validation: each page read is checked against the place
//! it must hold in the tree, and the cursor that keeps the current path.

use std::cmp::min;

use super::{
    Geometry, Place, Tree, Via, CHILD_SIZE, NO_PAGE, OFF_BODY, OFF_COUNT, OFF_FIRST, OFF_LEVEL, OFF_OWNER, OFF_RESERVED,
};
use crate::access::PageAccess;
use crate::bytes::{get_u16, get_u32, get_u64};
use crate::error::{Error, Result};
use crate::ids::PageId;
use crate::page;

pub(super) fn usize_of(n: u64) -> usize {
    // Callers pass page offsets or lengths bounded by a caller's slice.
    usize::try_from(n).unwrap_or(usize::MAX)
}

pub(super) fn child_offset(slot: u64) -> usize {
    OFF_BODY + CHILD_SIZE * usize_of(slot)
}

/// Reads page `id` with `f`, adding the path to errors about the page.
pub(super) fn read_checked<A: PageAccess, R>(
    a: &mut A,
    id: PageId,
    via: Via,
    f: impl FnOnce(&[u8]) -> Result<R>,
) -> Result<R> {
    match a.read(id, f) {
        Ok(Ok(r)) => Ok(r),
        Ok(Err(e)) | Err(e) => Err(via.context(id, e)),
    }
}

/// Changes page `id` with `f`, adding the path to errors about the page.
pub(super) fn modify_checked<A: PageAccess, R>(
    a: &mut A,
    id: PageId,
    via: Via,
    f: impl FnOnce(&mut [u8]) -> Result<R>,
) -> Result<R> {
    a.modify(id, f).map_err(|e| via.context(id, e))
}

pub(super) fn check_len(p: &[u8], id: PageId, g: &Geometry) -> Result<()> {
    if p.len() != g.page_size {
        return Err(Error::corrupt(
            id,
            format!("page image is {} bytes, expected {}", p.len(), g.page_size),
        ));
    }
    Ok(())
}

/// Checks that page image `p` is the page of this object at `place`.
pub(super) fn check_identity(p: &[u8], id: PageId, t: &Tree, place: Place, via: Via) -> Result<()> {
    check_len(p, id, &t.g)?;
    let want = place.page_type();
    match page::page_type(p) {
        Some(ty) if ty == want => {}
        Some(ty) => {
            return Err(via.misplaced(
                id,
                format_args!("is a {} page, expected a {} page", ty.name(), want.name()),
            ))
        }
        None => return Err(via.misplaced(id, format_args!("has unknown page type {}", page::page_type_byte(p)))),
    }
    let owner = get_u64(p, OFF_OWNER);
    if owner != t.owner {
        return Err(via.misplaced(
            id,
            format_args!("belongs to large object {owner:#018x}, not {:#018x}", t.owner),
        ));
    }
    let level = p[OFF_LEVEL];
    if level != place.level {
        return Err(via.misplaced(id, format_args!("is at level {level}, expected level {}", place.level)));
    }
    let first = u64::from(get_u32(p, OFF_FIRST));
    if first != place.first {
        return Err(via.misplaced(
            id,
            format_args!("starts at data page {first}, expected data page {}", place.first),
        ));
    }
    if p[OFF_RESERVED] != 0 {
        return Err(Error::corrupt(
            id,
            format!("reserved large-object header byte is {}", p[OFF_RESERVED]),
        ));
    }
    Ok(())
}

/// Checks that `p` is data page `index` of this object.
pub(super) fn check_data_page(p: &[u8], id: PageId, t: &Tree, index: u64, via: Via) -> Result<()> {
    check_identity(p, id, t, Place { level: 0, first: index }, via)?;
    let count = get_u16(p, OFF_COUNT);
    if count != 0 {
        return Err(Error::corrupt(id, format!("data page has child count {count}")));
    }
    Ok(())
}

/// Reads index page `id`, expected at `place` with between `count_min` and
/// `count_max` children, and returns its children.
pub(super) fn load_index<A: PageAccess>(
    a: &mut A,
    t: &Tree,
    id: PageId,
    place: Place,
    via: Via,
    count_min: u64,
    count_max: u64,
) -> Result<Vec<PageId>> {
    let fanout = t.g.fanout;
    read_checked(a, id, via, |p| {
        check_identity(p, id, t, place, via)?;
        let count = u64::from(get_u16(p, OFF_COUNT));
        let count_max = min(count_max, fanout);
        if count < count_min || count > count_max {
            let expected = if count_min == count_max {
                format!("{count_min}")
            } else {
                format!("{count_min} to {count_max}")
            };
            return Err(Error::corrupt(
                id,
                format!(
                    "index page at level {} has {count} children, expected {expected}",
                    place.level
                ),
            ));
        }
        let mut children = Vec::with_capacity(usize_of(count));
        for slot in 0..fanout {
            let child = get_u32(p, child_offset(slot));
            if slot < count {
                if child == NO_PAGE.0 {
                    return Err(Error::corrupt(id, format!("child slot {slot} is empty")));
                }
                children.push(PageId(child));
            } else if child != NO_PAGE.0 {
                return Err(Error::corrupt(
                    id,
                    format!("unused child slot {slot} holds page {child}"),
                ));
            }
        }
        Ok(children)
    })
}

/// The index pages on the path to the last data page looked up, so a range
/// reads each index page once. Only valid while the tree is not changed.
#[derive(Default)]
pub(super) struct Cursor {
    /// `path[j]` is at level `depth - j`; `path[0]` is the root.
    path: Vec<CachedIndex>,
}

struct CachedIndex {
    id: PageId,
    first: u64,
    children: Vec<PageId>,
}

impl Cursor {
    /// The page holding data page `index` (< `t.pages`) and how it was reached.
    pub(super) fn data_page<A: PageAccess>(&mut self, a: &mut A, t: &Tree, index: u64) -> Result<(PageId, Via)> {
        if t.depth == 0 {
            return Ok((t.root, Via::Descriptor));
        }
        let g = t.g;
        // Climb to the lowest cached page covering `index`.
        while let Some(node) = self.path.last() {
            let level = t.depth - (self.path.len() as u8 - 1);
            if index >= node.first && index - node.first < g.span(level) {
                break;
            }
            self.path.pop();
        }
        if self.path.is_empty() {
            let count = g.child_count(t.depth, 0, t.pages);
            let place = Place {
                level: t.depth,
                first: 0,
            };
            let children = load_index(a, t, t.root, place, Via::Descriptor, count, count)?;
            self.path.push(CachedIndex {
                id: t.root,
                first: 0,
                children,
            });
        }
        loop {
            let node = &self.path[self.path.len() - 1];
            let level = t.depth - (self.path.len() as u8 - 1);
            let span = g.span(level - 1);
            let slot = (index - node.first) / span;
            let via = Via::Parent { page: node.id, slot };
            let Some(&child) = node.children.get(usize_of(slot)) else {
                return Err(Error::corrupt(node.id, format!("no child for data page {index}")));
            };
            if level == 1 {
                return Ok((child, via));
            }
            let place = Place {
                level: level - 1,
                first: node.first + slot * span,
            };
            let count = g.child_count(place.level, place.first, t.pages);
            let children = load_index(a, t, child, place, via, count, count)?;
            self.path.push(CachedIndex {
                id: child,
                first: place.first,
                children,
            });
        }
    }
}
