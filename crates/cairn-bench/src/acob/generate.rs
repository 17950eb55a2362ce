//! The ACOB sets and query plans as plain data, generated deterministically
//! from one Park–Miller stream before anything is stored (DeWitt et al. 1990,
//! §4.2–4.3).
//!
//! **Physical layout.** Object `o` (0-based; the paper's key is `o + 1`) is
//! created on page `o / 5` of its set; its record `r` (0 the root, 1–2 the
//! interior records, 3–6 the leaves, in breadth-first order: the children of
//! `r` are `2r + 1` and `2r + 2`) is created in slot `(o mod 5) · 7 + r` of
//! that page, so a page has 35 slots. A [`Set`] keeps, per object, the
//! [`Place`] (page, slot) where each of its 7 records lives *now*: smearing
//! moves records, never objects, so the logical tree of an object stays as
//! built while its records end up on other pages.
//!
//! **Draws**, all from one stream, in this order:
//!
//! 1. Phase 1 (records and intra-object references) draws nothing.
//! 2. Phase 2, attachments: for each object in key order, for each leaf
//!    (records 3..=6), its `left` then its `right` component: `v = rand[1..100]
//!    − 1` (the paper's "random value between 0 and 99"); if `v < f` a target
//!    drawn uniformly among the objects of the clustering region, else one
//!    drawn uniformly from the whole set ([`clustering_region`]). The object
//!    itself is a possible target either way: the paper excludes nothing.
//! 3. Phase 3, smearing (optional): a partial Fisher–Yates shuffle picks
//!    exactly `⌊n / 4⌋` distinct objects; for each, in the order drawn, for each
//!    record 1..=6: `rand[1..100] − 1 < 25` moves it, by swapping its place
//!    with that of a record *of the same level* (interior with interior, leaf
//!    with leaf, the position within the level drawn at random) of another
//!    object drawn uniformly from the others. Each swap is kept
//!    ([`SmearSwap`]) so the result can be replayed and checked.
//!
//! **Interpretations of the paper** (it leaves these open):
//!
//! - *Clustering region at the ends of a set.* The region of an object on
//!   page `p` is pages `max(0, p − h) ..= min(P − 1, p + h)` with
//!   `h = (region − 1) / 2`: truncated, not shifted, so a clustered target is
//!   always within `h` pages, which is the paper's definition of "clustered
//!   near". At the ends the region is smaller (3 pages instead of 5 on the
//!   first page). Region sizes must be odd.
//! - *"Corresponding record" when smearing.* The paper's Figure 10 swaps A's
//!   right child with B's *left* child, and its footnote speaks of swapping
//!   "an internal record of one object with an internal record of another";
//!   so the partner is a record of the same level, not necessarily of the same
//!   position. Pages touched are the same either way. The partner object may
//!   happen to share the page, and a record may be moved again by a later
//!   swap.
//! - *Five identical sets.* The paper resets the seed at the start of each
//!   step and builds all five sets in step 1, so [`generate_sets`] draws A–E
//!   one after another from one stream: identical in parameters, not in
//!   their random choices.
//! - *Random read.* See [`random_read`]: each edge of the depth-6 tree is
//!   followed with probability 0.8, which gives Σ 1.6ᵈ ≈ 43.07 records per
//!   start, 1.6⁶ ≈ 16.78 of them at depth 6; the paper's "44" is the sum of
//!   the per-depth expectations each rounded to a whole record
//!   (1 + 2 + 3 + 4 + 7 + 10 + 17).

use crate::oo1::rng::ParkMiller;

/// Bytes of one record.
pub const RECORD_BYTES: u32 = 112;
/// Bytes of one page.
pub const PAGE_BYTES: u32 = 4096;
/// Records of one complex object: a root, 2 interior records, 4 leaves.
pub const RECORDS_PER_OBJECT: usize = 7;
/// Objects created on one page.
pub const OBJECTS_PER_PAGE: u32 = 5;
/// Record slots of one page.
pub const SLOTS_PER_PAGE: u32 = OBJECTS_PER_PAGE * RECORDS_PER_OBJECT as u32;
/// Leaf records of one object.
pub const LEAVES_PER_OBJECT: usize = 4;
/// Components attached to one object: `left` and `right` of each leaf.
pub const ATTACHMENTS_PER_OBJECT: usize = 2 * LEAVES_PER_OBJECT;
/// Objects of one set in the paper.
pub const OBJECTS_PER_SET: u32 = 1_500;
/// The most objects a set may have here (about 800 MB of records).
pub const OBJECTS_PER_SET_MAX: u32 = 1 << 20;
/// Sets built by the benchmark.
pub const SET_COUNT: usize = 5;
/// The sets' names, in build order.
pub const SET_NAMES: [&str; SET_COUNT] = ["A", "B", "C", "D", "E"];
/// Objects a random read or update starts from.
pub const RANDOM_OBJECTS: u32 = 300;
/// The deepest level a random read reaches (the start's root is at 0).
pub const DEPTH_MAX: u8 = 6;
/// Percent chance that a random read takes each step of its traversal.
pub const STEP_PERCENT: u32 = 80;
/// Percent chance that smearing moves each non-root record of a chosen
/// object.
pub const SMEAR_RECORD_PERCENT: u32 = 25;
/// Smearing chooses `1 / SMEAR_OBJECT_DIVISOR` of the objects (a quarter).
pub const SMEAR_OBJECT_DIVISOR: u32 = 4;

// Five 7-record objects fit a 4 KiB page and a sixth does not (the paper's
// "5 complex objects ... will fit on a single page").
const _: () = assert!(SLOTS_PER_PAGE * RECORD_BYTES <= PAGE_BYTES);
const _: () = assert!((SLOTS_PER_PAGE + RECORDS_PER_OBJECT as u32) * RECORD_BYTES > PAGE_BYTES);
// Slots are stored in a `u8`.
const _: () = assert!(SLOTS_PER_PAGE <= 256);

/// The generator's errors.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AcobError {
    /// A configuration value is outside what ACOB can build.
    #[error("ACOB configuration: {field} = {value} is out of range (expected {expected})")]
    OutOfRange {
        /// The [`AcobConfig`] field.
        field: &'static str,
        /// The value given.
        value: u64,
        /// What is allowed.
        expected: &'static str,
    },
    /// A generated set broke one of its invariants: a bug here, not in the
    /// input.
    #[error("ACOB generator internal error: {0}")]
    Internal(String),
}

/// The generator's result.
pub type Result<T> = std::result::Result<T, AcobError>;

/// How to build a set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AcobConfig {
    /// Complex objects per set (the paper: 1,500); `2 ..= OBJECTS_PER_SET_MAX`.
    pub objects_per_set: u32,
    /// The clustering factor `f`, a percentage `0 ..= 100`.
    pub clustering: u32,
    /// Pages of the clustering region: odd, at least 1 (the paper: 1, 5, 9).
    pub region_pages: u32,
    /// Whether phase 3 smears the set.
    pub smeared: bool,
    /// The Park–Miller seed.
    pub seed: u64,
}

impl Default for AcobConfig {
    /// The paper's set and its §5.3 region of 5 pages, unsmeared, at the 30%
    /// clustering factor of its Table 2 and §5.4; seed 1.
    fn default() -> Self {
        AcobConfig {
            objects_per_set: OBJECTS_PER_SET,
            clustering: 30,
            region_pages: 5,
            smeared: false,
            seed: 1,
        }
    }
}

impl AcobConfig {
    /// Checks every field, naming the first one out of range.
    pub fn validate(&self) -> Result<()> {
        if !(2..=OBJECTS_PER_SET_MAX).contains(&self.objects_per_set) {
            return Err(AcobError::OutOfRange {
                field: "objects_per_set",
                value: u64::from(self.objects_per_set),
                expected: "2 ..= 1048576 objects",
            });
        }
        if self.clustering > 100 {
            return Err(AcobError::OutOfRange {
                field: "clustering",
                value: u64::from(self.clustering),
                expected: "a percentage, 0 ..= 100",
            });
        }
        if self.region_pages.is_multiple_of(2) {
            return Err(AcobError::OutOfRange {
                field: "region_pages",
                value: u64::from(self.region_pages),
                expected: "an odd number of pages: the object's page and as many on each side",
            });
        }
        Ok(())
    }

    /// Pages of one set: `⌈objects_per_set / 5⌉` (the last may be partly
    /// filled).
    pub fn page_count(&self) -> u32 {
        self.objects_per_set.div_ceil(OBJECTS_PER_PAGE)
    }
}

/// An object's index within its set, `0 .. objects_per_set`, in key (and
/// creation, and physical) order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectIdx(pub u32);

/// A page's index within its set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PageIdx(pub u32);

/// Where a record lives: a page of the set and a slot `0 .. SLOTS_PER_PAGE`
/// on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Place {
    /// The page.
    pub page: PageIdx,
    /// The slot on the page.
    pub slot: u8,
}

/// A record's index within its object, `0 .. 7`, breadth-first: 0 the root,
/// 1 and 2 the interior records, 3..=6 the leaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RecordIdx(u8);

impl RecordIdx {
    /// The root record.
    pub const ROOT: RecordIdx = RecordIdx(0);
    /// Every record, in breadth-first order.
    pub const ALL: [RecordIdx; RECORDS_PER_OBJECT] = [
        RecordIdx(0),
        RecordIdx(1),
        RecordIdx(2),
        RecordIdx(3),
        RecordIdx(4),
        RecordIdx(5),
        RecordIdx(6),
    ];

    /// The record `index`, if it is below 7.
    pub fn new(index: u8) -> Option<RecordIdx> {
        (usize::from(index) < RECORDS_PER_OBJECT).then_some(RecordIdx(index))
    }

    /// The index, `0 .. 7`.
    pub fn get(self) -> u8 {
        self.0
    }

    /// Its level in the object's tree: 0 root, 1 interior, 2 leaf.
    pub fn level(self) -> u8 {
        match self.0 {
            0 => 0,
            1 | 2 => 1,
            _ => 2,
        }
    }

    /// For a leaf, its number `0 .. 4`; its `left` and `right` components
    /// are attachments `2·l` and `2·l + 1` of [`ObjectSpec::attachments`].
    pub fn leaf_number(self) -> Option<usize> {
        (self.level() == 2).then(|| usize::from(self.0) - 3)
    }

    /// For the root or an interior record, its two children (left, right).
    pub fn children(self) -> Option<[RecordIdx; 2]> {
        (self.level() < 2).then(|| [RecordIdx(2 * self.0 + 1), RecordIdx(2 * self.0 + 2)])
    }

    fn index(self) -> usize {
        usize::from(self.0)
    }
}

impl ObjectIdx {
    /// The paper's key field, `1 ..= objects_per_set`.
    pub fn key(self) -> u32 {
        self.0 + 1
    }

    /// The page the object is created on, where its root always stays.
    pub fn home_page(self) -> PageIdx {
        PageIdx(self.0 / OBJECTS_PER_PAGE)
    }

    /// Where `record` of this object is created.
    pub fn home_place(self, record: RecordIdx) -> Place {
        // Below SLOTS_PER_PAGE ≤ 256 (asserted above), so the cast is exact.
        let slot = (self.0 % OBJECTS_PER_PAGE) * RECORDS_PER_OBJECT as u32 + u32::from(record.0);
        Place {
            page: self.home_page(),
            slot: slot as u8,
        }
    }
}

/// One complex object of a set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectSpec {
    /// Where each record lives, indexed by [`RecordIdx::get`].
    pub places: [Place; RECORDS_PER_OBJECT],
    /// The attached components: leaf `l`'s `left` is `[2·l]`, its `right`
    /// `[2·l + 1]` (leaf `l` is record `3 + l`). A reference is to the
    /// component's root record.
    pub attachments: [ObjectIdx; ATTACHMENTS_PER_OBJECT],
}

/// One move of phase 3: `record` of `object` and `partner_record` of
/// `partner` exchanged places.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SmearSwap {
    /// The smeared object (one of [`Set::smeared_objects`]).
    pub object: ObjectIdx,
    /// Its record that moved.
    pub record: RecordIdx,
    /// The other object, never `object`.
    pub partner: ObjectIdx,
    /// The partner's record, of the same level as `record`.
    pub partner_record: RecordIdx,
}

/// One generated set: its objects, where their records live and what they
/// reference.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Set {
    config: AcobConfig,
    objects: Vec<ObjectSpec>,
    smeared: Vec<ObjectIdx>,
    swaps: Vec<SmearSwap>,
}

/// One record read by a query plan, in the order the plan reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Visit {
    /// The object the record belongs to.
    pub object: ObjectIdx,
    /// Which of its records.
    pub record: RecordIdx,
    /// Depth in the traversal: the start's root 0, its interior records 1,
    /// leaves 2, components' roots 3, and so on to [`DEPTH_MAX`]; a scan
    /// gives each record its level (0–2).
    pub depth: u8,
    /// Where the record lives.
    pub place: Place,
    /// Whether the record is rewritten in place after it is read (random
    /// update, depth 6).
    pub update: bool,
}

/// A draw in `0 .. k`; `k ≥ 1`.
fn below(rng: &mut ParkMiller, k: u32) -> u32 {
    rng.rand(k) - 1
}

/// The paper's "random value between 0 and 99".
fn percent(rng: &mut ParkMiller) -> u32 {
    below(rng, 100)
}

/// The clustering region of an object on `page`, as its first and last
/// pages: the page and `(region_pages − 1) / 2` pages on each side,
/// truncated at the ends of a set of `page_count` pages (never shifted, so
/// every page of it is within that distance of `page`).
pub fn clustering_region(page: PageIdx, region_pages: u32, page_count: u32) -> (PageIdx, PageIdx) {
    let half = region_pages / 2;
    let last = page_count.saturating_sub(1);
    (
        PageIdx(page.0.saturating_sub(half)),
        PageIdx(page.0.saturating_add(half).min(last)),
    )
}

impl Set {
    /// Builds one set from a fresh stream seeded with `config.seed`.
    pub fn generate(config: &AcobConfig) -> Result<Set> {
        Set::generate_from(config, &mut ParkMiller::new(config.seed))
    }

    /// Builds one set, drawing from `rng` (phases 2 and 3; `config.seed` is
    /// not used).
    pub fn generate_from(config: &AcobConfig, rng: &mut ParkMiller) -> Result<Set> {
        config.validate()?;
        let mut set = Set {
            config: *config,
            objects: build_objects(config.objects_per_set),
            smeared: Vec::new(),
            swaps: Vec::new(),
        };
        set.attach(rng);
        if config.smeared {
            set.smear(rng);
        }
        if cfg!(debug_assertions) {
            set.check_invariants()?;
        }
        Ok(set)
    }

    /// Phase 2: every leaf's `left` and `right` components.
    fn attach(&mut self, rng: &mut ParkMiller) {
        let n = self.config.objects_per_set;
        let page_count = self.config.page_count();
        for (o, spec) in (0..n).zip(self.objects.iter_mut()) {
            let (first, last) = clustering_region(ObjectIdx(o).home_page(), self.config.region_pages, page_count);
            // Objects of the region; non-empty, as it holds `o`.
            let lo = first.0 * OBJECTS_PER_PAGE;
            let hi = (last.0.saturating_add(1).saturating_mul(OBJECTS_PER_PAGE)).min(n);
            for target in spec.attachments.iter_mut() {
                *target = if percent(rng) < self.config.clustering {
                    ObjectIdx(lo + below(rng, hi - lo))
                } else {
                    ObjectIdx(below(rng, n))
                };
            }
        }
    }

    /// Phase 3: a quarter of the objects, each non-root record moved with
    /// probability 0.25 by a swap with a record of the same level of another
    /// object.
    fn smear(&mut self, rng: &mut ParkMiller) {
        let n = self.config.objects_per_set;
        let chosen_count = n / SMEAR_OBJECT_DIVISOR;
        let mut order: Vec<u32> = (0..n).collect();
        for i in 0..chosen_count {
            let j = i + below(rng, n - i);
            order.swap(i as usize, j as usize);
        }
        let chosen: Vec<ObjectIdx> = order
            .iter()
            .take(chosen_count as usize)
            .map(|&o| ObjectIdx(o))
            .collect();
        for &object in &chosen {
            for record in RecordIdx::ALL.into_iter().skip(1) {
                if percent(rng) >= SMEAR_RECORD_PERCENT {
                    continue;
                }
                let mut partner = below(rng, n - 1);
                if partner >= object.0 {
                    partner += 1;
                }
                let partner_record = if record.level() == 1 {
                    RecordIdx(1 + below(rng, 2) as u8)
                } else {
                    RecordIdx(3 + below(rng, LEAVES_PER_OBJECT as u32) as u8)
                };
                let swap = SmearSwap {
                    object,
                    record,
                    partner: ObjectIdx(partner),
                    partner_record,
                };
                apply_swap(&mut self.objects, &swap);
                self.swaps.push(swap);
            }
        }
        self.smeared = chosen;
    }

    /// The configuration it was built with.
    pub fn config(&self) -> &AcobConfig {
        &self.config
    }

    /// Objects in the set.
    pub fn object_count(&self) -> u32 {
        self.config.objects_per_set
    }

    /// Pages the set spans.
    pub fn page_count(&self) -> u32 {
        self.config.page_count()
    }

    /// Every object, indexed by [`ObjectIdx`].
    pub fn objects(&self) -> &[ObjectSpec] {
        &self.objects
    }

    /// One object, if `object` is in the set.
    pub fn object(&self, object: ObjectIdx) -> Option<&ObjectSpec> {
        self.objects.get(object.0 as usize)
    }

    /// Where `record` of `object` lives, if `object` is in the set.
    pub fn place(&self, object: ObjectIdx, record: RecordIdx) -> Option<Place> {
        self.object(object).map(|spec| spec.places[record.index()])
    }

    /// The objects phase 3 chose, in the order drawn (empty if not smeared).
    pub fn smeared_objects(&self) -> &[ObjectIdx] {
        &self.smeared
    }

    /// Every move of phase 3, in order (empty if not smeared).
    pub fn swaps(&self) -> &[SmearSwap] {
        &self.swaps
    }

    /// Objects with at least one record off their home page (the paper
    /// estimates 3/8 of a smeared set).
    pub fn displaced_object_count(&self) -> u32 {
        let displaced = (0..self.object_count())
            .zip(&self.objects)
            .filter(|&(o, spec)| spec.places.iter().any(|p| p.page != ObjectIdx(o).home_page()))
            .count();
        // At most objects_per_set, a u32.
        displaced as u32
    }

    /// What each slot of the set holds, indexed by `page · 35 + slot`:
    /// the order a builder writes the records in. `None` only for the
    /// unused slots of a partly filled last page.
    pub fn layout(&self) -> Result<Vec<Option<(ObjectIdx, RecordIdx)>>> {
        let slot_count = self.page_count() as usize * SLOTS_PER_PAGE as usize;
        let mut layout = vec![None; slot_count];
        for (o, spec) in (0..self.object_count()).zip(&self.objects) {
            for record in RecordIdx::ALL {
                let place = spec.places[record.index()];
                let at = place.page.0 as usize * SLOTS_PER_PAGE as usize + usize::from(place.slot);
                let broken = |what: &str| AcobError::Internal(format!("object {o} record {}: {what}", record.0));
                if u32::from(place.slot) >= SLOTS_PER_PAGE {
                    return Err(broken("slot out of range"));
                }
                let cell = layout.get_mut(at).ok_or_else(|| broken("page out of range"))?;
                if let Some((other, other_record)) = cell.replace((ObjectIdx(o), record)) {
                    return Err(broken(&format!(
                        "shares its slot with object {} record {}",
                        other.0, other_record.0
                    )));
                }
            }
        }
        Ok(layout)
    }

    /// Checks the set's invariants: the records occupy exactly the slots
    /// they were created in, each slot once (a permutation of the created
    /// layout), roots are on their home place, attachments are in the
    /// set, an unsmeared set has every record at home and swaps only join
    /// records of one level.
    pub fn check_invariants(&self) -> Result<()> {
        let internal = |what: String| Err(AcobError::Internal(what));
        let n = self.object_count();
        if self.objects.len() != n as usize {
            return internal(format!("{} objects, expected {n}", self.objects.len()));
        }
        let layout = self.layout()?;
        // Created records fill slots `0 .. 7n` in order (`home_place`), so the
        // set is a permutation of them if those slots, and no others, are used.
        let record_count = n as usize * RECORDS_PER_OBJECT;
        let used = layout.iter().take(record_count).filter(|cell| cell.is_some()).count();
        if used != record_count || layout.iter().skip(record_count).any(Option::is_some) {
            return internal(format!(
                "{used} of the {record_count} created slots used, or a record past them"
            ));
        }
        for (o, spec) in (0..n).map(ObjectIdx).zip(&self.objects) {
            if spec.places[0] != o.home_place(RecordIdx::ROOT) {
                return internal(format!("the root of object {} moved", o.0));
            }
            if let Some(t) = spec.attachments.iter().find(|t| t.0 >= n) {
                return internal(format!("object {} attaches object {}, not in the set", o.0, t.0));
            }
            let all_home = RecordIdx::ALL
                .iter()
                .all(|&r| spec.places[r.index()] == o.home_place(r));
            if !self.config.smeared && !all_home {
                return internal(format!("object {} of an unsmeared set has a record away", o.0));
            }
        }
        for s in &self.swaps {
            if s.object == s.partner || s.record.level() != s.partner_record.level() || s.record == RecordIdx::ROOT {
                return internal(format!("bad smear swap {s:?}"));
            }
        }
        Ok(())
    }
}

/// Phase 1: `n` objects, each record on its home place, attachments unset.
fn build_objects(n: u32) -> Vec<ObjectSpec> {
    (0..n)
        .map(ObjectIdx)
        .map(|o| ObjectSpec {
            places: RecordIdx::ALL.map(|r| o.home_place(r)),
            attachments: [ObjectIdx(0); ATTACHMENTS_PER_OBJECT],
        })
        .collect()
}

/// Exchanges the places of the two records `swap` names (distinct objects).
pub(crate) fn apply_swap(objects: &mut [ObjectSpec], swap: &SmearSwap) {
    let (a, b) = (swap.object.0 as usize, swap.partner.0 as usize);
    let (ra, rb) = (swap.record.index(), swap.partner_record.index());
    let (Some(pa), Some(pb)) = (
        objects.get(a).map(|s| s.places[ra]),
        objects.get(b).map(|s| s.places[rb]),
    ) else {
        return;
    };
    if let Some(s) = objects.get_mut(a) {
        s.places[ra] = pb;
    }
    if let Some(s) = objects.get_mut(b) {
        s.places[rb] = pa;
    }
}

/// Builds the five sets A–E in order from one stream seeded with
/// `config.seed` (the paper's step 1).
pub fn generate_sets(config: &AcobConfig) -> Result<Vec<Set>> {
    let mut rng = ParkMiller::new(config.seed);
    (0..SET_COUNT).map(|_| Set::generate_from(config, &mut rng)).collect()
}

/// The scan query's plan: every object in physical (key) order — roots never
/// move, so this is page order — and for each its 7 records breadth-first,
/// at depths 0–2. Components are not read, so each record is read once.
pub fn scan_order(set: &Set) -> Vec<Visit> {
    let mut visits = Vec::with_capacity(set.objects.len() * RECORDS_PER_OBJECT);
    for (o, spec) in (0..set.object_count()).map(ObjectIdx).zip(&set.objects) {
        for record in RecordIdx::ALL {
            visits.push(Visit {
                object: o,
                record,
                depth: record.level(),
                place: spec.places[record.index()],
                update: false,
            });
        }
    }
    visits
}

/// The random read query's plan: [`RANDOM_OBJECTS`] objects drawn uniformly
/// (with replacement, `rand[1..n] − 1`), and from each a partial depth-first
/// traversal to depth 6.
///
/// The traversal reads the start's root (depth 0, always), then, for each
/// child of a record read at depth `d < 6`, left before right, draws
/// `rand[1..100] − 1 < 80` and, if taken, reads the child and its subtree
/// before the next child's draw. Within an object the children of a record
/// are its two records of the next level (depths 0→1→2, 3→4→5); the children
/// of a leaf are the roots of its `left` and `right` components (depths
/// 2→3, 5→6). So the tree over which steps are drawn is the paper's: the
/// object (7 records), its 8 components (56) and their 64 components' roots,
/// 127 records, a record at depth `d` read with probability 0.8ᵈ, and
/// Σ₀⁶ (2 · 0.8)ᵈ ≈ 43.07 records expected per start, 1.6⁶ ≈ 16.78 at depth 6.
/// The visits are references: an object reached twice is read twice, as the
/// paper counts record references.
///
/// The caller gives the stream: the benchmark resets it to the seed at the
/// start of the step and runs sets A–E from it in order.
pub fn random_read(set: &Set, rng: &mut ParkMiller) -> Vec<Visit> {
    random_plan(set, rng, false)
}

/// The random update query's plan: exactly [`random_read`]'s visits for the
/// same stream, with every record read at depth 6 marked for rewriting in
/// place ([`Visit::update`]); the caller commits at the end.
pub fn random_update(set: &Set, rng: &mut ParkMiller) -> Vec<Visit> {
    random_plan(set, rng, true)
}

fn random_plan(set: &Set, rng: &mut ParkMiller, update: bool) -> Vec<Visit> {
    let mut visits = Vec::with_capacity(RANDOM_OBJECTS as usize * 48);
    let mut traversal = Traversal {
        set,
        rng,
        update,
        visits: &mut visits,
    };
    for _ in 0..RANDOM_OBJECTS {
        let start = ObjectIdx(below(traversal.rng, set.object_count()));
        traversal.read(start, RecordIdx::ROOT, 0);
    }
    visits
}

/// One random read or update in progress.
struct Traversal<'a> {
    set: &'a Set,
    rng: &'a mut ParkMiller,
    update: bool,
    visits: &'a mut Vec<Visit>,
}

impl Traversal<'_> {
    /// Reads `record` of `object` at `depth`, then each child with
    /// probability 0.8, depth-first.
    fn read(&mut self, object: ObjectIdx, record: RecordIdx, depth: u8) {
        // Attachments are in the set by construction (`check_invariants`).
        let Some(spec) = self.set.object(object) else {
            return;
        };
        self.visits.push(Visit {
            object,
            record,
            depth,
            place: spec.places[record.index()],
            update: self.update && depth == DEPTH_MAX,
        });
        if depth == DEPTH_MAX {
            return;
        }
        let children = match (record.children(), record.leaf_number()) {
            (Some([left, right]), _) => [(object, left), (object, right)],
            (None, Some(leaf)) => [
                (spec.attachments[2 * leaf], RecordIdx::ROOT),
                (spec.attachments[2 * leaf + 1], RecordIdx::ROOT),
            ],
            (None, None) => return,
        };
        for (child_object, child_record) in children {
            if percent(self.rng) < STEP_PERCENT {
                self.read(child_object, child_record, depth + 1);
            }
        }
    }
}

/// The expected records read per start of a random read at `depth`:
/// `(2 · 0.8)^depth`.
pub fn expected_reads_at_depth(depth: u8) -> f64 {
    (2.0 * f64::from(STEP_PERCENT) / 100.0).powi(i32::from(depth))
}

/// The expected records read per start of a random read, all depths.
pub fn expected_reads_per_start() -> f64 {
    (0..=DEPTH_MAX).map(expected_reads_at_depth).sum()
}
