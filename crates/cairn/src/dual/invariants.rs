//! [`DualBuffer::check_invariants`].

use super::{Copying, DualBuffer, Granule, Relocation, Seg};

impl DualBuffer {
    /// Checks every invariant of the structure; panics naming the broken
    /// one (tests and debug builds).
    pub fn check_invariants(&self) {
        let (page_bytes, page_seg) = self.check_pages();
        let (object_bytes, object_seg) = self.check_objects();
        self.check_totals(page_bytes + object_bytes, page_seg, object_seg);
    }

    /// Checks each page descriptor; returns the bytes the pages' images
    /// hold and those of the page segment.
    fn check_pages(&self) -> (usize, usize) {
        let mut bytes = 0usize;
        let mut page_seg = 0usize;
        for (id, p) in &self.pages {
            if p.image.is_some() {
                bytes += self.cfg.page_size;
            }
            match p.seg {
                Seg::Own(t) => {
                    assert!(p.image.is_some(), "page {id} in the page segment without an image");
                    assert!(p.used >= t, "page {id} used before it was placed");
                    assert_eq!(self.page_lru.get(&t), Some(id), "page {id}'s LRU tick");
                    page_seg += self.cfg.page_size;
                }
                Seg::Free(t) => {
                    assert!(p.image.is_some(), "page {id} free without an image");
                    assert_eq!(self.free.get(&t), Some(&Granule::Page(*id)), "page {id}'s FIFO tick");
                }
                Seg::None => assert!(p.image.is_none(), "resident page {id} in no segment"),
            }
            assert!(
                p.image.is_some() || !p.chain.is_empty() || !p.changed_by.is_empty(),
                "an empty descriptor kept for page {id}"
            );
            assert!(
                p.image.is_some() || p.records.is_empty(),
                "page {id} knows records of no image"
            );
            for oid in &p.chain {
                let o = self
                    .objects
                    .get(oid)
                    .unwrap_or_else(|| panic!("page {id} chains {oid}, undescribed"));
                assert_eq!(o.page, *id, "object {oid} chained to page {id}");
            }
        }
        (bytes, page_seg)
    }

    /// Checks each object descriptor against its page and the strategy;
    /// returns the bytes its copies hold and those of the object segment.
    fn check_objects(&self) -> (usize, usize) {
        let mut bytes = 0usize;
        let mut object_seg = 0usize;
        for (oid, o) in &self.objects {
            let p = self
                .pages
                .get(&o.page)
                .unwrap_or_else(|| panic!("object {oid}'s page has no descriptor"));
            assert_eq!(
                p.chain.iter().filter(|x| *x == oid).count(),
                1,
                "object {oid} chained once"
            );
            if let Some(c) = &o.copy {
                bytes += Self::copy_charge(c.bytes.len());
            }
            if let Some((_, b)) = &o.modified {
                bytes += Self::copy_charge(b.len());
            }
            match o.seg {
                Seg::Own(t) => {
                    assert_eq!(self.object_lru.get(&t), Some(oid), "object {oid}'s LRU tick");
                    assert!(o.used >= t, "object {oid} used before it was placed");
                    object_seg += o.len;
                    assert!(
                        o.copy.is_some() || o.modified.is_some() || p.image.is_some(),
                        "object {oid} in the object segment with neither copy nor page"
                    );
                }
                Seg::Free(t) => {
                    assert_eq!(
                        self.free.get(&t),
                        Some(&Granule::Copy(*oid)),
                        "object {oid}'s FIFO tick"
                    );
                    assert!(
                        o.copy.is_some() || o.modified.is_some(),
                        "object {oid} free without a copy"
                    );
                }
                Seg::None => assert!(
                    o.modified.is_some() || o.flushed_by.is_some(),
                    "object {oid} described for nothing"
                ),
            }
            if self.cfg.strategy.relocation == Relocation::Eager && p.image.is_some() {
                assert!(o.copy.is_none(), "ERL: object {oid} is a duplicate");
            }
            if self.cfg.strategy.copying == Copying::Noc {
                assert!(
                    o.seg == Seg::None && o.copy.is_none() && o.modified.is_none(),
                    "NOC holds object {oid} for more than its transaction's flushed change"
                );
            }
        }
        (bytes, object_seg)
    }

    /// Checks the counters against what the descriptors add up to, and the
    /// segments' LRU and FIFO against the descriptors in them.
    fn check_totals(&self, bytes: usize, page_seg: usize, object_seg: usize) {
        assert_eq!(bytes, self.bytes, "bytes held");
        assert!(self.bytes <= self.cfg.budget_bytes, "over budget");
        assert_eq!(page_seg, self.page_seg_bytes, "page segment bytes");
        assert_eq!(object_seg, self.object_seg_bytes, "object segment bytes");
        assert_eq!(
            self.page_lru.len(),
            self.pages.values().filter(|p| matches!(p.seg, Seg::Own(_))).count()
        );
        assert_eq!(
            self.object_lru.len(),
            self.objects.values().filter(|o| matches!(o.seg, Seg::Own(_))).count()
        );
        assert_eq!(
            self.free.len(),
            self.pages.values().filter(|p| matches!(p.seg, Seg::Free(_))).count()
                + self.objects.values().filter(|o| matches!(o.seg, Seg::Free(_))).count()
        );
    }
}
