//! The dual buffer (Kemper & Kossmann 1994, §2–§4; ARCHITECTURE.md, "Cache coherence, per client kind"): one
//! memory budget holding whole page images *and* objects copied out of
//! them, split into a page segment, an object segment and a free segment.
//!
//! # Segments
//!
//! - The **page segment** is the locality set of pages: the most recently
//!   used page images, up to its share of the budget (LRU).
//! - The **object segment** is the locality set of objects: the most
//!   recently used objects, up to its share of the budget (LRU), counted by
//!   their length whether they are read *in place* in their resident home
//!   page or from a *copy*. An object in place takes no space of its own:
//!   the segments overlap there, as in the paper's Fig. 1.
//! - The **free segment** holds the granules (page images, object copies)
//!   that left their locality set, first in first out; they are the first
//!   to go when room is needed, and come back to their segment when used.
//!
//! Only resident bytes count against the budget: page images (a page each)
//! and copies (their length plus [`COPY_OVERHEAD_BYTES`]). The budget holds
//! after every operation.
//!
//! # Descriptors
//!
//! Every page the buffer knows is a [`PageDesc`] in the resident page
//! table; every object it knows an `ObjDesc` in the resident object table.
//! A page descriptor chains the objects of that page that have descriptors
//! (the paper's Fig. 3), so displacing a page finds what to copy out (LOC)
//! and reloading it finds what to relocate (ERL); a page descriptor
//! outlives its image while objects of the page are still described.
//!
//! # The states of an object
//!
//! | state | what is held | reads come from |
//! |---|---|---|
//! | *absent* | no descriptor | — (an object fault) |
//! | *in page only* | descriptor in the object segment, home page resident, no copy | the page image |
//! | *copied* | a copy, home page not resident | the copy |
//! | *duplicate* | a copy, home page resident too (EOC, or LRL after a reload) | the copy |
//! | *modified copy* | a transaction's changed bytes (besides any committed copy) | that transaction: the changed bytes; others: the committed state |
//!
//! | from | to | by | when |
//! |---|---|---|---|
//! | absent | in page only | [`DualBuffer::access`] | an object fault under NOC or the LOC family (home page resident, or faulted in) |
//! | absent | duplicate | [`DualBuffer::access`] | an object fault under EOC: copied at once |
//! | in page only | copied | `displace_page` | its home page leaves the buffer while the object is in the object segment (LOC, LOC−, LOC+), unless LOC− and the page holds this transaction's changes |
//! | in page only | absent | `demote_object` | it leaves the object segment (it has no space of its own to free) |
//! | copied | duplicate | `load_page` | its home page is reloaded under LRL |
//! | copied, duplicate | in page only | `load_page` (ERL) | its home page is reloaded under ERL: the copy is given up (*relocated*) |
//! | copied, duplicate | absent | `evict` | the copy is chosen as the victim in the free segment |
//! | any | modified copy | [`DualBuffer::modify`] | a late update (home page not resident), or under EOC and LOC+ any update |
//! | in page only | in page only (page modified) | [`DualBuffer::modify`] | an early update under NOC, LOC, LOC−: written through to the transaction at once |
//! | modified copy | previous state | `flush_object` | relocated: its home page is reloaded (ERL), it is the free segment's victim, or its transaction commits: the bytes go to the transaction ([`Backing::flush_object`]); the home page is not loaded into the buffer (the transaction applies the change to its own copy of the page, a page fault counted only if it has none yet) |
//! | any | read from the transaction's own pages | [`DualBuffer::discard`] | its transaction deletes it: a modified copy is dropped |
//! | modified copy | previous state | [`DualBuffer::abort`] | its transaction aborts: the bytes are dropped |
//! | any | absent | [`DualBuffer::invalidate_page`] | a committed change to its page (this client's or another's): committed copies and the image go; modified copies stay |
//!
//! **No-steal.** A "flush" hands bytes to the owning transaction's private
//! pages ([`Backing::flush_object`]); nothing reaches the volume or the
//! server before that transaction commits, so the buffer never writes
//! anything anywhere itself and its committed images and copies stay
//! committed state. A flush may happen in any transaction's call (its
//! `make_room` chose another transaction's modified copy): the typed layer
//! queues the bytes for their owner, which writes them into its storage
//! transaction itself, outside the buffer's mutex, before it reads that
//! object from storage or commits (`crate::cache`, `database/write.rs`).
//! Pages flushed are counted once per commit (the pages the commit
//! writes or ships), the same under every strategy; the strategies differ
//! in the page faults a flush costs.
//!
//! # Strategies
//!
//! See [`Copying`] and [`Relocation`]; the *overlap ratio* of a page (the
//! bytes of its objects in the object segment read in place, over the page
//! size) above [`Strategy::overlap_ratio`] keeps it from being displaced
//! while another victim exists (paper §4.3).

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

use cairn_storage::fxhash::FxHashMap;
use cairn_storage::{Oid, PageId};

use crate::error::{Error, Result};
use crate::view::CheckedAs;

mod invariants;
mod modified;
mod records;
mod segments;
mod strategy;
#[cfg(test)]
mod tests;

pub use strategy::{Copying, DualBufferOptions, DualConfig, Relocation, Strategy};

/// Bytes charged per object copy on top of its length.
pub const COPY_OVERHEAD_BYTES: usize = 32;

/// The smallest budget, in pages: a fault must always find room.
pub const BUDGET_PAGES_MIN: usize = 4;

/// What the buffer asks of the transaction it works for.
pub trait Backing {
    /// A page fault: the committed image of `page` (for the transaction
    /// that holds its lock).
    fn load(&mut self, page: PageId) -> Result<Arc<[u8]>>;
    /// Where `oid`'s record is in `image`, its home page's image: `None`
    /// if it is not there in a form read in place (moved away, large).
    fn locate(&mut self, image: &[u8], oid: Oid) -> Result<Option<Range<usize>>>;
    /// A modified object relocated (the paper's flush): its new record
    /// goes to `owner`'s private pages. `owner` may be another transaction
    /// than the one whose call caused the flush; the bytes must reach
    /// `owner`'s own pages, and no one else's, before it commits.
    fn flush_object(&mut self, owner: u64, oid: Oid, bytes: &[u8]) -> Result<()>;
}

/// Where an object's bytes are: `bytes[range]`.
#[derive(Clone, Debug)]
pub struct Located {
    /// A page image or a copy.
    pub bytes: Arc<[u8]>,
    /// The record's bytes in it.
    pub range: Range<usize>,
    /// Read in place in the page image (false: a copy).
    pub in_page: bool,
    /// What the caller noted the record was checked as
    /// ([`DualBuffer::note_checked`]): committed bytes only.
    pub checked: Option<CheckedAs>,
}

/// What the buffer holds of an object, without a fault.
#[derive(Clone, Debug)]
pub enum Probe {
    /// Its bytes.
    Hit(Located),
    /// The asking transaction's own flushed change: it reads the object
    /// from its own pages.
    Elsewhere,
    /// Not held: [`DualBuffer::access`] faults it in.
    Miss,
}

/// Counters for every figure of the paper.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DualStats {
    /// Pages loaded into the buffer ([`Backing::load`]).
    pub page_faults: u64,
    /// Of them, loads to relocate a modified copy whose page was out.
    pub flush_page_faults: u64,
    /// Objects asked for that had no descriptor.
    pub object_faults: u64,
    /// Objects found described (in place or copied).
    pub object_hits: u64,
    /// Objects copied out of pages.
    pub objects_copied: u64,
    /// Bytes copied out of pages.
    pub bytes_copied: u64,
    /// Copies given up into their home page (ERL on reload, or a modified
    /// copy flushed).
    pub relocations: u64,
    /// Modified objects handed to their transaction ([`Backing::flush_object`]).
    pub objects_flushed: u64,
    /// Pages changed by committing transactions: the pages their commits
    /// write (embedded) or ship to the server. Never more than once per
    /// commit: changes wait in the transaction's own pages (no-steal), so
    /// displacing a changed page's image flushes nothing.
    pub pages_flushed: u64,
    /// Pages displaced.
    pub pages_displaced: u64,
    /// Copies displaced.
    pub copies_displaced: u64,
    /// Pages kept because of their overlap ratio or LOC−, when chosen.
    pub pages_kept: u64,
    /// Copies whose home page is resident too, now.
    pub duplicates: u64,
    /// Page images held now.
    pub pages: u64,
    /// Copies held now (committed and modified).
    pub copies: u64,
    /// Bytes held now.
    pub bytes: u64,
    /// Bytes of the objects in the object segment (each counted once),
    /// now: `utilization` is this over `bytes`.
    pub referenced_bytes: u64,
}

impl DualStats {
    /// Bytes of referenced objects over bytes buffered (0 when empty).
    pub fn utilization(&self) -> f64 {
        if self.bytes == 0 {
            0.0
        } else {
            self.referenced_bytes as f64 / self.bytes as f64
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Seg {
    /// Not in any segment (a page descriptor kept for its chain).
    None,
    /// In its locality set, with its LRU tick.
    Own(u64),
    /// In the free segment, with its FIFO tick.
    Free(u64),
}

/// A page descriptor (the paper's Fig. 3).
#[derive(Debug)]
pub struct PageDesc {
    image: Option<Arc<[u8]>>,
    seg: Seg,
    /// Its last use (a tick): the LRU list is repaired lazily, when its
    /// head is looked at, so a use costs no list operation.
    used: u64,
    /// Objects of this page with descriptors.
    chain: Vec<Oid>,
    /// Transactions whose changes to objects of this page were written
    /// through (early updates) or flushed, not yet committed or aborted.
    changed_by: Vec<u64>,
    /// NOC only (it describes no objects): where records found in the
    /// image are and what they were checked as, so a record used again is
    /// neither looked for nor checked again. Emptied with the image.
    records: records::Records,
    /// The use it was last kept from displacement at (overlap ratio,
    /// LOC−): kept again only once used since, so pages that stay well
    /// used cannot make every `make_room` cycle through all of them.
    kept_at: Option<u64>,
}

impl PageDesc {
    /// A descriptor of a page with no image, no objects and no changes.
    fn empty() -> PageDesc {
        PageDesc {
            image: None,
            seg: Seg::None,
            used: 0,
            chain: Vec::new(),
            changed_by: Vec::new(),
            records: records::Records::default(),
            kept_at: None,
        }
    }
}

#[derive(Debug)]
struct Copy {
    bytes: Arc<[u8]>,
}

#[derive(Debug)]
struct ObjDesc {
    page: PageId,
    /// The record's length (in place or copied).
    len: usize,
    /// Its place in the object segment (`Own`), or `Free` (only a copy can
    /// be there), or `None` (only a modified copy keeps it).
    seg: Seg,
    /// Its last use (a tick), as for pages.
    used: u64,
    /// The committed copy.
    copy: Option<Copy>,
    /// A transaction's changed bytes, not yet flushed.
    modified: Option<(u64, Arc<[u8]>)>,
    /// The transaction whose change to it was flushed (written through):
    /// that transaction reads it from its own pages, not from here.
    flushed_by: Option<u64>,
    /// Where the record is in the resident home page's image (set when it
    /// is found there; the image never changes while it is resident).
    at: Option<Range<usize>>,
    /// What its committed bytes were checked as; they do not change until
    /// the page is invalidated.
    checked: Option<CheckedAs>,
}

/// A granule in the free segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Granule {
    Page(PageId),
    Copy(Oid),
}

/// The dual buffer: see the module documentation.
pub struct DualBuffer {
    cfg: DualConfig,
    page_locality: usize,
    object_locality: usize,
    pages: FxHashMap<PageId, PageDesc>,
    objects: FxHashMap<Oid, ObjDesc>,
    page_lru: BTreeMap<u64, PageId>,
    object_lru: BTreeMap<u64, Oid>,
    free: BTreeMap<u64, Granule>,
    tick: u64,
    /// Bytes of page images in the page segment's locality set.
    page_seg_bytes: usize,
    /// Bytes (lengths) of objects in the object segment's locality set.
    object_seg_bytes: usize,
    /// Bytes held: images and copies.
    bytes: usize,
    stats: DualStats,
}

impl std::fmt::Debug for DualBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DualBuffer")
            .field("strategy", &self.cfg.strategy.name())
            .field("budget_bytes", &self.cfg.budget_bytes)
            .field("stats", &self.stats())
            .finish()
    }
}

impl DualBuffer {
    /// An empty buffer; the budget must hold [`BUDGET_PAGES_MIN`] pages.
    pub fn new(cfg: DualConfig) -> Result<DualBuffer> {
        if cfg.page_size == 0 || cfg.budget_bytes < BUDGET_PAGES_MIN * cfg.page_size {
            return Err(Error::InvalidArgument(format!(
                "a dual buffer of {} bytes holds fewer than {BUDGET_PAGES_MIN} pages of {} bytes",
                cfg.budget_bytes, cfg.page_size
            )));
        }
        let share = cfg.page_share.unwrap_or_else(|| cfg.strategy.default_page_share());
        if !(0.0..=1.0).contains(&share) {
            return Err(Error::InvalidArgument(format!(
                "a page segment share of {share} (between 0 and 1)"
            )));
        }
        if cfg.strategy.overlap_ratio.is_nan() || cfg.strategy.overlap_ratio < 0.0 {
            return Err(Error::InvalidArgument(format!(
                "an overlap ratio of {} (0 or more)",
                cfg.strategy.overlap_ratio
            )));
        }
        // The page segment holds at least one page.
        let page_locality = ((cfg.budget_bytes as f64 * share) as usize).max(cfg.page_size);
        let object_locality = match cfg.strategy.copying {
            Copying::Noc => 0,
            _ => cfg.budget_bytes.saturating_sub(page_locality),
        };
        Ok(DualBuffer {
            cfg,
            page_locality,
            object_locality,
            pages: FxHashMap::default(),
            objects: FxHashMap::default(),
            page_lru: BTreeMap::new(),
            object_lru: BTreeMap::new(),
            free: BTreeMap::new(),
            tick: 0,
            page_seg_bytes: 0,
            object_seg_bytes: 0,
            bytes: 0,
            stats: DualStats::default(),
        })
    }

    /// Its configuration.
    pub fn config(&self) -> &DualConfig {
        &self.cfg
    }

    /// The counters, with the gauges (pages, copies, bytes, duplicates,
    /// referenced bytes) as of now.
    pub fn stats(&self) -> DualStats {
        let mut s = self.stats;
        s.pages = self.pages.values().filter(|p| p.image.is_some()).count() as u64;
        s.copies = self
            .objects
            .values()
            .map(|o| u64::from(o.copy.is_some()) + u64::from(o.modified.is_some()))
            .sum();
        s.duplicates = self
            .objects
            .values()
            .filter(|o| o.copy.is_some() && self.resident(o.page))
            .count() as u64;
        s.bytes = self.bytes as u64;
        s.referenced_bytes = self.object_seg_bytes as u64;
        s
    }

    fn next_tick(&mut self) -> u64 {
        self.tick += 1;
        self.tick
    }

    /// Whether `page`'s image is held.
    pub fn is_resident(&self, page: PageId) -> bool {
        self.resident(page)
    }

    fn resident(&self, page: PageId) -> bool {
        self.pages.get(&page).is_some_and(|p| p.image.is_some())
    }

    fn copy_charge(len: usize) -> usize {
        len + COPY_OVERHEAD_BYTES
    }

    /// What the buffer holds of `oid` for `owner`, with no page fault (only
    /// `backing.locate` may be called, to find an object in its resident
    /// page again): a hit counts as one.
    pub fn probe(&mut self, owner: u64, oid: Oid, backing: &mut dyn Backing) -> Result<Probe> {
        if let Some(o) = self.objects.get(&oid) {
            if let Some((by, bytes)) = &o.modified {
                if *by == owner {
                    let loc = Located {
                        range: 0..bytes.len(),
                        bytes: Arc::clone(bytes),
                        in_page: false,
                        checked: None,
                    };
                    self.stats.object_hits += 1;
                    self.touch_object(oid);
                    return Ok(Probe::Hit(loc));
                }
            }
            if o.flushed_by == Some(owner) {
                // Its change is in its own pages (an unflushed newer one
                // would be the modified copy above).
                return Ok(Probe::Elsewhere);
            }
            if let Some(c) = &o.copy {
                let loc = Located {
                    range: 0..c.bytes.len(),
                    bytes: Arc::clone(&c.bytes),
                    in_page: false,
                    checked: o.checked,
                };
                self.stats.object_hits += 1;
                self.touch_object(oid);
                return Ok(Probe::Hit(loc));
            }
            let image = self.pages.get(&o.page).and_then(|p| p.image.clone());
            if let (Seg::Own(_), Some(image)) = (o.seg, image) {
                let at = o.at.clone();
                let o_checked = o.checked;
                let range = match at {
                    Some(r) => Some(r),
                    None => backing.locate(&image, oid)?,
                };
                let Some(range) = range else {
                    return Ok(Probe::Miss);
                };
                self.objects.get_mut(&oid).expect("described").at = Some(range.clone());
                // The object's use, not the page's (paper §2: a page's
                // statistics change when it is used to find an object).
                self.stats.object_hits += 1;
                self.touch_object(oid);
                return Ok(Probe::Hit(Located {
                    bytes: image,
                    range,
                    in_page: true,
                    checked: o_checked,
                }));
            }
        }
        if self.cfg.strategy.copying == Copying::Noc {
            let found = self.pages.get(&oid.page).and_then(|p| {
                let image = p.image.as_ref()?;
                let (range, checked) = p.records.get(oid)?;
                Some(Located {
                    bytes: Arc::clone(image),
                    range,
                    in_page: true,
                    checked,
                })
            });
            if let Some(loc) = found {
                // Under NOC an object's use is its page's.
                self.stats.object_hits += 1;
                self.touch_page(oid.page);
                return Ok(Probe::Hit(loc));
            }
        }
        Ok(Probe::Miss)
    }

    /// The object `oid` (home page `oid.page`) for transaction `owner`:
    /// its modified copy if `owner` holds one, else its committed bytes, in
    /// place or copied. `None`: the record is not in its home page in a
    /// form read in place ([`Backing::locate`]); the caller reads it
    /// another way. The caller holds the lock that makes committed state
    /// stable.
    pub fn access(&mut self, owner: u64, oid: Oid, backing: &mut dyn Backing) -> Result<Option<Located>> {
        match self.probe(owner, oid, backing)? {
            Probe::Hit(l) => return Ok(Some(l)),
            Probe::Elsewhere => return Ok(None),
            Probe::Miss => {}
        }
        // An object fault: the home page is needed.
        self.stats.object_faults += 1;
        let image = self.page(oid.page, backing, false)?;
        let Some(range) = backing.locate(&image, oid)? else {
            return Ok(None);
        };
        match self.cfg.strategy.copying {
            Copying::Noc => {
                if let Some(p) = self.pages.get_mut(&oid.page) {
                    p.records.insert(oid, range.clone(), None);
                }
                Ok(Some(Located {
                    bytes: image,
                    range,
                    in_page: true,
                    checked: None,
                }))
            }
            Copying::Eoc => {
                let bytes: Arc<[u8]> = Arc::from(&image[range.clone()]);
                self.stats.objects_copied += 1;
                self.stats.bytes_copied += range.len() as u64;
                self.make_room(Self::copy_charge(range.len()), backing)?;
                self.describe(oid, range.len());
                self.put_copy(oid, Arc::clone(&bytes));
                self.rebalance(backing)?;
                Ok(Some(Located {
                    range: 0..bytes.len(),
                    bytes,
                    in_page: false,
                    checked: self.objects.get(&oid).and_then(|o| o.checked),
                }))
            }
            Copying::Loc | Copying::LocMinus | Copying::LocPlus => {
                self.describe(oid, range.len());
                self.objects.get_mut(&oid).expect("described").at = Some(range.clone());
                self.rebalance(backing)?;
                Ok(Some(Located {
                    bytes: image,
                    range,
                    in_page: true,
                    checked: self.objects.get(&oid).and_then(|o| o.checked),
                }))
            }
        }
    }

    /// The committed state of `page` changed (a commit of this client, or
    /// another client's, called back): its image and the committed copies
    /// of its objects go. Modified copies stay (their transaction holds the
    /// page's exclusive lock, so no other commit can have changed it).
    pub fn invalidate_page(&mut self, page: PageId) -> bool {
        let had = self
            .pages
            .get(&page)
            .is_some_and(|p| p.image.is_some() || !p.chain.is_empty());
        let chain = self.pages.get(&page).map(|p| p.chain.clone()).unwrap_or_default();
        for oid in chain {
            if let Some(o) = self.objects.get_mut(&oid) {
                o.checked = None;
                if let Some(c) = o.copy.take() {
                    self.bytes -= Self::copy_charge(c.bytes.len());
                }
            }
            self.leave_segment(oid);
            self.forget_if_unused(oid);
        }
        self.drop_image(page);
        self.forget_page_if_unused(page);
        had
    }

    /// Notes that `oid`'s committed record, as held now, was checked as
    /// `checked`: later hits say so ([`Located::checked`]) until its page is
    /// invalidated.
    pub fn note_checked(&mut self, oid: Oid, checked: CheckedAs) {
        if let Some(o) = self.objects.get_mut(&oid) {
            o.checked = Some(checked);
        }
        if let Some(p) = self.pages.get_mut(&oid.page) {
            p.records.set_checked(oid, checked);
        }
    }

    /// Empties the buffer but for modified copies (a cold start).
    pub fn clear(&mut self) {
        let pages: Vec<PageId> = self.pages.keys().copied().collect();
        for p in pages {
            self.invalidate_page(p);
        }
    }

    // ----- pages -----

    /// The image of `page`, faulted in if it is out; `for_flush`: the
    /// fault is to relocate a modified copy.
    fn page(&mut self, page: PageId, backing: &mut dyn Backing, for_flush: bool) -> Result<Arc<[u8]>> {
        if let Some(img) = self.pages.get(&page).and_then(|p| p.image.clone()) {
            self.touch_page(page);
            return Ok(img);
        }
        self.make_room(self.cfg.page_size, backing)?;
        if let Some(img) = self.pages.get(&page).and_then(|p| p.image.clone()) {
            // Making room flushed a modified copy of this page, which
            // brought it in.
            self.touch_page(page);
            return Ok(img);
        }
        let image = backing.load(page)?;
        self.stats.page_faults += 1;
        if for_flush {
            self.stats.flush_page_faults += 1;
        }
        let t = self.next_tick();
        let p = self.pages.entry(page).or_insert_with(PageDesc::empty);
        p.image = Some(Arc::clone(&image));
        p.seg = Seg::Own(t);
        p.used = t;
        self.page_lru.insert(t, page);
        self.page_seg_bytes += self.cfg.page_size;
        self.bytes += self.cfg.page_size;
        if self.cfg.strategy.relocation == Relocation::Eager {
            self.relocate_chain(page, backing)?;
        }
        self.rebalance(backing)?;
        Ok(image)
    }

    /// ERL on reload: every copy of an object of `page` is given up (a
    /// modified one flushed first); the objects are read in place again.
    fn relocate_chain(&mut self, page: PageId, backing: &mut dyn Backing) -> Result<()> {
        let (chain, image) = match self.pages.get(&page) {
            Some(p) => (p.chain.clone(), p.image.clone()),
            None => return Ok(()),
        };
        for oid in chain {
            if self.objects.get(&oid).is_some_and(|o| o.modified.is_some()) {
                self.flush_object(oid, backing)?;
            }
            if self.objects.get(&oid).is_none_or(|o| o.copy.is_none()) {
                self.forget_if_unused(oid);
                continue;
            }
            // Where it is in the page now: an object relocated and still in
            // the object segment is copied again if the page goes again.
            let at = match &image {
                Some(img) => backing.locate(img, oid)?,
                None => None,
            };
            let Some(o) = self.objects.get_mut(&oid) else { continue };
            if let Some(c) = o.copy.take() {
                self.bytes -= Self::copy_charge(c.bytes.len());
                self.stats.relocations += 1;
                o.at = at;
                if let Seg::Free(t) = o.seg {
                    // A copy that had left the object segment: nothing
                    // describes the object any more.
                    self.free.remove(&t);
                    o.seg = Seg::None;
                }
            }
            self.forget_if_unused(oid);
        }
        Ok(())
    }

    /// The overlap ratio of `page`: bytes of its objects in the object
    /// segment read in place, over the page size.
    fn overlap(&self, page: &PageDesc) -> f64 {
        let inplace: usize = page
            .chain
            .iter()
            .filter_map(|o| self.objects.get(o))
            .filter(|o| matches!(o.seg, Seg::Own(_)) && o.copy.is_none())
            .map(|o| o.len)
            .sum();
        inplace as f64 / self.cfg.page_size as f64
    }

    /// Whether displacing `page` now should wait: its overlap ratio is
    /// over the threshold, or (LOC−) it holds running transactions' changes.
    fn keep_page(&self, page: PageId) -> bool {
        let Some(p) = self.pages.get(&page) else { return false };
        if p.kept_at == Some(p.used) {
            // Kept before and not used since.
            return false;
        }
        if self.cfg.strategy.copying == Copying::LocMinus && !p.changed_by.is_empty() {
            // LOC−: not while the page's changed objects are in the object
            // segment's locality set (paper §3.2); once they leave it, the
            // page goes like any other, its objects not copied.
            let hot_change = p.chain.iter().any(|o| {
                self.objects
                    .get(o)
                    .is_some_and(|d| d.flushed_by.is_some() && matches!(d.seg, Seg::Own(_)))
            });
            if hot_change {
                return true;
            }
        }
        self.cfg.strategy.copying != Copying::Noc
            && self.cfg.strategy.copying != Copying::Eoc
            && self.overlap(p) > self.cfg.strategy.overlap_ratio
    }

    /// Displaces `page` (in the free segment): under the LOC family its
    /// objects still in the object segment are copied out first.
    fn displace_page(&mut self, page: PageId) {
        let lazy = matches!(
            self.cfg.strategy.copying,
            Copying::Loc | Copying::LocMinus | Copying::LocPlus
        );
        let (image, chain, changed) = {
            let p = &self.pages[&page];
            (
                p.image.clone().expect("displaced page is resident"),
                p.chain.clone(),
                !p.changed_by.is_empty(),
            )
        };
        let minus_keeps = self.cfg.strategy.copying == Copying::LocMinus && changed;
        if lazy && !minus_keeps {
            for oid in chain {
                let Some(o) = self.objects.get_mut(&oid) else { continue };
                if !matches!(o.seg, Seg::Own(_)) || o.copy.is_some() {
                    continue;
                }
                if let Some(range) = o.at.clone() {
                    let bytes: Arc<[u8]> = Arc::from(&image[range]);
                    self.stats.objects_copied += 1;
                    self.stats.bytes_copied += bytes.len() as u64;
                    self.bytes += Self::copy_charge(bytes.len());
                    o.copy = Some(Copy { bytes });
                }
            }
        }
        // (A changed page flushes nothing when it goes: the change is in
        // its transaction's own copy of the page, outside the buffer.)
        self.stats.pages_displaced += 1;
        self.drop_image(page);
        // In-place objects of a page that left lose their place: they had
        // no copy (LOC− keeping the page's changes, or NOC/EOC).
        let chain = self.pages.get(&page).map(|p| p.chain.clone()).unwrap_or_default();
        for oid in chain {
            let uncopied = self
                .objects
                .get(&oid)
                .is_some_and(|o| o.copy.is_none() && matches!(o.seg, Seg::Own(_)));
            if uncopied {
                self.leave_segment(oid);
            }
            self.forget_if_unused(oid);
        }
        self.forget_page_if_unused(page);
    }

    fn drop_image(&mut self, page: PageId) {
        let Some(p) = self.pages.get_mut(&page) else { return };
        p.records.clear();
        for oid in &p.chain {
            if let Some(o) = self.objects.get_mut(oid) {
                o.at = None;
            }
        }
        if p.image.take().is_some() {
            self.bytes -= self.cfg.page_size;
            match p.seg {
                Seg::Own(t) => {
                    self.page_lru.remove(&t);
                    self.page_seg_bytes -= self.cfg.page_size;
                }
                Seg::Free(t) => {
                    self.free.remove(&t);
                }
                Seg::None => {}
            }
            p.seg = Seg::None;
        }
    }

    fn forget_page_if_unused(&mut self, page: PageId) {
        if self
            .pages
            .get(&page)
            .is_some_and(|p| p.image.is_none() && p.chain.is_empty() && p.changed_by.is_empty())
        {
            self.pages.remove(&page);
        }
    }

    // ----- objects -----

    /// Puts `oid` (of length `len`) in the object segment (most recently
    /// used), describing it if it was not; chained to its page.
    fn describe(&mut self, oid: Oid, len: usize) {
        if self.cfg.strategy.copying == Copying::Noc {
            return;
        }
        self.ensure_described(oid, len);
        let o = self.objects.get_mut(&oid).expect("described");
        if matches!(o.seg, Seg::Own(_)) && o.len != len {
            self.object_seg_bytes = self.object_seg_bytes - o.len + len;
        }
        o.len = len;
        self.touch_object(oid);
    }

    fn put_copy(&mut self, oid: Oid, bytes: Arc<[u8]>) {
        let o = self.objects.get_mut(&oid).expect("described");
        if let Some(old) = o.copy.take() {
            self.bytes -= Self::copy_charge(old.bytes.len());
        }
        self.bytes += Self::copy_charge(bytes.len());
        o.copy = Some(Copy { bytes });
    }

    /// A descriptor for `oid` (in no segment, holding nothing, of length
    /// `len`) if it has none, chained to its page's.
    fn ensure_described(&mut self, oid: Oid, len: usize) {
        if let std::collections::hash_map::Entry::Vacant(v) = self.objects.entry(oid) {
            v.insert(ObjDesc {
                page: oid.page,
                len,
                seg: Seg::None,
                used: 0,
                copy: None,
                modified: None,
                flushed_by: None,
                at: None,
                checked: None,
            });
            self.pages
                .entry(oid.page)
                .or_insert_with(PageDesc::empty)
                .chain
                .push(oid);
        }
    }

    /// Removes `oid`'s descriptor if nothing is left of it.
    fn forget_if_unused(&mut self, oid: Oid) {
        let unused = self
            .objects
            .get(&oid)
            .is_some_and(|o| o.seg == Seg::None && o.copy.is_none() && o.modified.is_none() && o.flushed_by.is_none());
        if unused {
            let o = self.objects.remove(&oid).expect("checked");
            if let Some(p) = self.pages.get_mut(&o.page) {
                p.chain.retain(|x| *x != oid);
            }
            self.forget_page_if_unused(o.page);
        }
    }
}
