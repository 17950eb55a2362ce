//! Space allocation, each step inside the caller's system action: new groups,
//! extents reserved at the end of the volume, and pages inside them.

use super::groups::{self, DirEntry, ExtentEntry, GROUP_NAME_MAX};
use super::header::EXTENT_PAGES_MAX;
use super::spacemap;
use super::{ExtentState, Volume, VOLUME_PAGES_MAX};
use crate::access::PageAccess;
use crate::error::{Error, Result};
use crate::ids::{GroupId, PageId};
use crate::page::{self, PageType};

impl Volume {
    pub(super) fn create_group_inner(&mut self, name: &str) -> Result<GroupId> {
        if name.is_empty() {
            return Err(Error::InvalidArgument("a group name must not be empty".into()));
        }
        if name.len() > GROUP_NAME_MAX {
            return Err(Error::LimitExceeded {
                what: "group name bytes",
                value: name.len() as u64,
                limit: GROUP_NAME_MAX as u64,
            });
        }
        if self.group_id(name).is_some() {
            return Err(Error::GroupExists(name.to_string()));
        }
        let id = GroupId(self.header.next_group_id);
        if id.0 == u32::MAX {
            return Err(Error::LimitExceeded {
                what: "groups created",
                value: u64::from(id.0),
                limit: u64::from(u32::MAX - 1),
            });
        }
        let entry = DirEntry {
            id,
            name: name.to_string(),
            list_head: PageId(0),
            list_tail: PageId(0),
        };
        let mut dir_page = *self.dir_pages.last().expect("the directory has a page");
        let mut index = self.read(dir_page, groups::entry_count)?;
        if index >= groups::dir_capacity(self.page_size()) {
            let new_page = self.allocate_page(GroupId::DEFAULT, Some(dir_page), PageType::GroupDir)?;
            self.change(new_page, false, |b| {
                groups::init_dir(b, new_page);
                Ok(())
            })?;
            self.change(dir_page, false, |b| {
                groups::set_next_page(b, new_page);
                Ok(())
            })?;
            self.dir_pages.push(new_page);
            dir_page = new_page;
            index = 0;
        }
        self.change(dir_page, false, |b| {
            groups::write_dir_entry(b, index, &entry);
            Ok(())
        })?;
        self.header.next_group_id += 1;
        self.store_header()?;
        self.add_group_state(&entry, dir_page, index, Vec::new(), 0)?;
        Ok(id)
    }

    fn store_header(&mut self) -> Result<()> {
        let h = self.header;
        self.change(PageId::HEADER, false, |b| {
            h.store(b);
            Ok(())
        })
    }

    pub(super) fn group_index(&self, id: GroupId) -> Result<usize> {
        self.group_by_id.get(&id).copied().ok_or(Error::UnknownGroupId(id))
    }

    /// Finds an unused page of group `gi`, near `near` if possible.
    fn find_free_page(&self, gi: usize, near: Option<PageId>) -> Option<(usize, u32)> {
        let g = &self.groups[gi];
        if let Some(near) = near {
            let half = self.header.region_pages / 2 + 1;
            let lo = near.0.saturating_sub(half + EXTENT_PAGES_MAX);
            let hi = near.0.saturating_add(half);
            let mut best: Option<(u32, usize, u32)> = None;
            for (_, &(ogi, xi)) in self.extent_by_start.range(lo..=hi) {
                if ogi != gi {
                    continue;
                }
                let x = &g.extents[xi];
                for i in 0..x.len {
                    if x.used >> i & 1 == 0 {
                        let d = (x.start.0 + i).abs_diff(near.0);
                        if d <= half && best.is_none_or(|(bd, _, _)| d < bd) {
                            best = Some((d, xi, i));
                        }
                    }
                }
            }
            if let Some((_, xi, i)) = best {
                return Some((xi, i));
            }
        }
        let &xi = g.with_free.last()?;
        let x = &g.extents[xi];
        let i = (!x.used).trailing_zeros();
        debug_assert!(i < x.len);
        Some((xi, i))
    }

    /// Reserves a new extent for group `gi` at the end of the volume, formats
    /// its pages as free pages and records it in the group's extent list.
    fn reserve_extent(&mut self, gi: usize) -> Result<usize> {
        let (start, len) = self.grow_by_extent()?;
        self.record_extent(gi, start, len)
    }

    /// Adds an extent's pages at the end of the volume, formatted as free
    /// pages and marked in use in the space map; returns its first page and
    /// length.
    fn grow_by_extent(&mut self) -> Result<(u32, u32)> {
        let ps = self.page_size();
        let mut len = self.header.extent_pages;
        // An extent never contains a space-map page, and the volume never
        // skips a page (every page below page_count is a valid page): an
        // extent that would reach the next interval's map page is cut short
        // before it, and the map page is created when the volume reaches it.
        let mut start = self.header.page_count;
        loop {
            if u64::from(start) + u64::from(len) > u64::from(VOLUME_PAGES_MAX) {
                return Err(Error::VolumeFull(format!(
                    "{} pages; no room for another extent",
                    self.header.page_count
                )));
            }
            match (start..start + len).find(|&p| spacemap::is_map_page(PageId(p), ps)) {
                None => break,
                Some(map) if map > start => {
                    len = map - start;
                    break;
                }
                Some(map) => {
                    let k = spacemap::interval_of(PageId(map), ps);
                    self.change(PageId(map), true, |b| {
                        spacemap::init(b, k);
                        Ok(())
                    })?;
                    self.header.page_count = map + 1;
                    self.store_header()?;
                    start = map + 1;
                }
            }
        }
        for p in start..start + len {
            self.change(PageId(p), true, |b| {
                page::format(b, PageId(p), PageType::Free);
                Ok(())
            })?;
        }
        let map = spacemap::map_page(spacemap::interval_of(PageId(start), ps), ps);
        self.change(map, false, |b| {
            for p in start..start + len {
                spacemap::set(b, PageId(p), true);
            }
            Ok(())
        })?;
        self.header.page_count = start + len;
        self.store_header()?;
        Ok((start, len))
    }

    /// Records the extent of `len` pages at `start` in group `gi`'s list;
    /// its first page becomes a new list page when the group has none yet
    /// or the tail is full. Returns the extent's index in the group.
    fn record_extent(&mut self, gi: usize, start: u32, len: u32) -> Result<usize> {
        let ps = self.page_size();
        let g = &self.groups[gi];
        let (tail, tail_count) = (g.list_tail, g.list_tail_count);
        let mut x = ExtentState {
            start: PageId(start),
            len,
            used: 0,
            list_page: tail,
            list_index: tail_count,
        };
        if tail.0 == 0 || tail_count >= groups::list_capacity(ps) {
            let lp = PageId(start);
            self.start_list_page(gi, lp)?;
            x.used = 1;
            x.list_page = lp;
            x.list_index = 0;
        }
        self.write_extent(&x)?;
        let g = &mut self.groups[gi];
        g.list_tail_count += 1;
        let xi = g.extents.len();
        g.extents.push(x);
        if x.has_free() {
            g.with_free.insert(xi);
        }
        self.extent_by_start.insert(start, (gi, xi));
        self.view_pending.extents.insert(start);
        Ok(xi)
    }

    /// Makes `lp` group `gi`'s new tail list page: formatted, linked from
    /// the old tail, and named in the group's directory entry.
    fn start_list_page(&mut self, gi: usize, lp: PageId) -> Result<()> {
        let g = &self.groups[gi];
        let (group_id, tail) = (g.id, g.list_tail);
        self.change(lp, false, |b| {
            groups::init_list(b, lp, group_id);
            Ok(())
        })?;
        if tail.0 != 0 {
            self.change(tail, false, |b| {
                groups::set_next_page(b, lp);
                Ok(())
            })?;
        }
        let g = &mut self.groups[gi];
        if g.list_head.0 == 0 {
            g.list_head = lp;
        }
        g.list_tail = lp;
        g.list_tail_count = 0;
        let entry = DirEntry {
            id: g.id,
            name: g.name.clone(),
            list_head: g.list_head,
            list_tail: g.list_tail,
        };
        let (dp, di) = (g.dir_page, g.dir_index);
        self.change(dp, false, |b| {
            groups::write_dir_entry(b, di, &entry);
            Ok(())
        })
    }

    /// Writes an extent's entry into its extent-list page.
    fn write_extent(&mut self, x: &ExtentState) -> Result<()> {
        let entry = ExtentEntry {
            start: x.start,
            len: x.len,
            used: x.used,
        };
        let (page, index) = (x.list_page, x.list_index);
        self.change(page, false, |b| {
            groups::write_list_entry(b, index, &entry);
            Ok(())
        })
    }

    fn set_used(&mut self, gi: usize, xi: usize, bit: u32, used: bool) -> Result<()> {
        let mut x = self.groups[gi].extents[xi];
        if used {
            x.used |= 1 << bit;
        } else {
            x.used &= !(1 << bit);
        }
        self.write_extent(&x)?;
        let g = &mut self.groups[gi];
        g.extents[xi] = x;
        if x.has_free() {
            g.with_free.insert(xi);
        } else {
            g.with_free.remove(&xi);
        }
        self.view_pending.extents.insert(x.start.0);
        Ok(())
    }

    /// Allocates a page (inside a system action, if logged).
    pub(super) fn allocate_page(&mut self, group: GroupId, near: Option<PageId>, ty: PageType) -> Result<PageId> {
        let gi = self.group_index(group)?;
        let (xi, bit) = match self.find_free_page(gi, near) {
            Some(found) => found,
            // A new extent's first page may become the group's next
            // extent-list page; an extent of one page (extent_pages 1, or
            // one cut short before a space-map page) then has no page left,
            // and the next one is taken.
            None => loop {
                let xi = self.reserve_extent(gi)?;
                let x = &self.groups[gi].extents[xi];
                if x.has_free() {
                    break (xi, (!x.used).trailing_zeros());
                }
            },
        };
        let id = PageId(self.groups[gi].extents[xi].start.0 + bit);
        // Format first: if reading the free page fails, nothing is marked used.
        self.change(id, false, |b| {
            page::expect_type(b, id, PageType::Free)?;
            page::format(b, id, ty);
            Ok(())
        })?;
        self.set_used(gi, xi, bit, true)?;
        Ok(id)
    }

    /// Frees a page (inside a system action, if logged).
    pub(super) fn free_page(&mut self, id: PageId) -> Result<()> {
        let (gi, xi) = self
            .extent_of(id)
            .ok_or_else(|| Error::corrupt(id, "freeing a page that belongs to no extent"))?;
        let x = self.groups[gi].extents[xi];
        let bit = id.0 - x.start.0;
        if x.used >> bit & 1 == 0 {
            return Err(Error::corrupt(id, "freeing a page that is not in use"));
        }
        if x.list_page == id {
            return Err(Error::corrupt(id, "freeing an extent-list page"));
        }
        self.change(id, false, |b| {
            page::format(b, id, PageType::Free);
            Ok(())
        })?;
        self.set_used(gi, xi, bit, false)
    }
}
