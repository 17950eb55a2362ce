//! The segments' bookkeeping: uses, demotions from the page and object
//! segments into the free segment, and the victims chosen to make room.

use std::collections::BTreeMap;

use cairn_storage::{Oid, PageId};

use super::{Backing, Copying, DualBuffer, Granule, Seg, COPY_OVERHEAD_BYTES};
use crate::error::{Error, Result};

impl DualBuffer {
    pub(super) fn touch_page(&mut self, page: PageId) {
        let t = self.next_tick();
        let p = self.pages.get_mut(&page).expect("touched page");
        p.used = t;
        match p.seg {
            // Already in its segment: its place is repaired when it reaches
            // the head of the list (`demote_page`).
            Seg::Own(_) => return,
            Seg::Free(old) => {
                self.free.remove(&old);
                self.page_seg_bytes += self.cfg.page_size;
            }
            Seg::None => unreachable!("a resident page is in a segment"),
        }
        p.seg = Seg::Own(t);
        self.page_lru.insert(t, page);
    }

    pub(super) fn touch_object(&mut self, oid: Oid) {
        if self.cfg.strategy.copying == Copying::Noc {
            return;
        }
        let t = self.next_tick();
        let o = self.objects.get_mut(&oid).expect("touched object");
        o.used = t;
        match o.seg {
            Seg::Own(_) => return,
            Seg::Free(old) => {
                self.free.remove(&old);
                self.object_seg_bytes += o.len;
            }
            Seg::None => {
                self.object_seg_bytes += o.len;
            }
        }
        o.seg = Seg::Own(t);
        self.object_lru.insert(t, oid);
    }

    /// Takes `oid` out of whichever segment holds it: its place in the
    /// object segment (and that segment's bytes) or its granule in the
    /// free segment.
    pub(super) fn leave_segment(&mut self, oid: Oid) {
        let Some(o) = self.objects.get_mut(&oid) else { return };
        match std::mem::replace(&mut o.seg, Seg::None) {
            Seg::Own(t) => {
                self.object_lru.remove(&t);
                self.object_seg_bytes -= o.len;
            }
            Seg::Free(t) => {
                self.free.remove(&t);
            }
            Seg::None => {}
        }
    }

    /// Moves the object segment's least recently used object out of it: a
    /// copy (committed or modified) to the free segment, an object in place
    /// nowhere.
    pub(super) fn demote_object(&mut self) {
        let objects = &mut self.objects;
        let Some(oid) = pop_least_used(&mut self.object_lru, |oid, placed| {
            let o = objects.get_mut(&oid).expect("in the object segment");
            (o.used > placed).then(|| {
                o.seg = Seg::Own(o.used);
                o.used
            })
        }) else {
            return;
        };
        let len = self.objects[&oid].len;
        self.object_seg_bytes -= len;
        let o = &self.objects[&oid];
        if o.copy.is_some() || o.modified.is_some() {
            let t = self.next_tick();
            self.objects.get_mut(&oid).expect("in the object segment").seg = Seg::Free(t);
            self.free.insert(t, Granule::Copy(oid));
        } else {
            self.objects.get_mut(&oid).expect("in the object segment").seg = Seg::None;
            self.forget_if_unused(oid);
        }
    }

    /// Moves the page segment's least recently used page to the free
    /// segment.
    pub(super) fn demote_page(&mut self) {
        let pages = &mut self.pages;
        let Some(page) = pop_least_used(&mut self.page_lru, |page, placed| {
            let p = pages.get_mut(&page).expect("in the page segment");
            (p.used > placed).then(|| {
                p.seg = Seg::Own(p.used);
                p.used
            })
        }) else {
            return;
        };
        self.page_seg_bytes -= self.cfg.page_size;
        let t = self.next_tick();
        self.pages.get_mut(&page).expect("in the page segment").seg = Seg::Free(t);
        self.free.insert(t, Granule::Page(page));
    }

    /// What the object segment's locality set holds, as it would be
    /// charged copied: the objects' lengths plus a copy's overhead each (an
    /// object in place costs nothing now, but is copied when its page goes).
    pub(super) fn object_seg_charge(&self) -> usize {
        self.object_seg_bytes + self.object_lru.len() * COPY_OVERHEAD_BYTES
    }

    /// Keeps each locality set within its share: the least recently used
    /// granules move to the free segment.
    pub(super) fn rebalance(&mut self, backing: &mut dyn Backing) -> Result<()> {
        while self.page_seg_bytes > self.page_locality && self.page_lru.len() > 1 {
            self.demote_page();
        }
        while self.object_seg_charge() > self.object_locality && !self.object_lru.is_empty() {
            self.demote_object();
        }
        self.make_room(0, backing)
    }

    /// Frees room for `need` more bytes: victims from the free segment
    /// first (FIFO), demoting the segments' least recently used granules
    /// into it when it is empty.
    pub(super) fn make_room(&mut self, need: usize, backing: &mut dyn Backing) -> Result<()> {
        while self.bytes + need > self.cfg.budget_bytes {
            if let Some((&t, &g)) = self.free.iter().next() {
                match g {
                    Granule::Page(page) => {
                        if self.keep_page(page) {
                            // Well used (or LOC−): back to its segment,
                            // once until it is used again (`keep_page`), so
                            // room is always found.
                            self.stats.pages_kept += 1;
                            self.free.remove(&t);
                            let t2 = self.next_tick();
                            let p = self.pages.get_mut(&page).expect("free page");
                            p.seg = Seg::Own(t2);
                            // Placed as if used now, but remembered as not
                            // used since it was kept.
                            p.used = t2;
                            p.kept_at = Some(t2);
                            self.page_lru.insert(t2, page);
                            self.page_seg_bytes += self.cfg.page_size;
                            continue;
                        }
                        self.displace_page(page);
                    }
                    Granule::Copy(oid) => {
                        self.free.remove(&t);
                        if let Some(o) = self.objects.get_mut(&oid) {
                            o.seg = Seg::None;
                        }
                        if self.objects.get(&oid).is_some_and(|o| o.modified.is_some()) {
                            self.flush_object(oid, backing)?;
                        }
                        if let Some(o) = self.objects.get_mut(&oid) {
                            if let Some(c) = o.copy.take() {
                                self.bytes -= Self::copy_charge(c.bytes.len());
                                self.stats.copies_displaced += 1;
                            }
                        }
                        self.forget_if_unused(oid);
                    }
                }
                continue;
            }
            // Nothing free: demote from whichever segment is over its share
            // the most (pages first on a tie).
            let page_over = self.page_seg_bytes as f64 / self.page_locality.max(1) as f64;
            let object_over = self.object_seg_charge() as f64 / self.object_locality.max(1) as f64;
            let copies_in_objects = self
                .object_lru
                .values()
                .any(|o| self.objects.get(o).is_some_and(|d| d.copy.is_some()));
            if !self.page_lru.is_empty() && (page_over >= object_over || !copies_in_objects) {
                self.demote_page();
            } else if !self.object_lru.is_empty() {
                self.demote_object();
            } else if let Some(oid) = self
                .objects
                .iter()
                .find(|(_, o)| o.modified.is_some())
                .map(|(oid, _)| *oid)
            {
                // Only modified copies are left: flush one.
                self.flush_object(oid, backing)?;
            } else {
                return Err(Error::Internal(format!(
                    "the dual buffer cannot free {need} bytes: {} held of {}",
                    self.bytes, self.cfg.budget_bytes
                )));
            }
        }
        Ok(())
    }
}

/// Takes the least recently used key off `lru` (keyed by the tick it was
/// placed at). Uses only stamp their granule, so the head may have been
/// used since it was placed: `moved(key, placed)` then re-stamps its
/// segment and gives its last use, it goes to that place, and the new head
/// is looked at.
fn pop_least_used<K: Copy>(lru: &mut BTreeMap<u64, K>, mut moved: impl FnMut(K, u64) -> Option<u64>) -> Option<K> {
    loop {
        let (&placed, &key) = lru.iter().next()?;
        lru.remove(&placed);
        match moved(key, placed) {
            Some(used) => {
                lru.insert(used, key);
            }
            None => return Some(key),
        }
    }
}
