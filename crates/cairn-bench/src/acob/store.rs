//! An ACOB set stored in Cairn, and its query plans run against a
//! transaction of any architecture.
//!
//! **Records.** Each of an object's 7 records is a Cairn object of
//! [`STORED_RECORD_BYTES`] bytes: the paper's 112-byte record with Cairn's
//! slot overhead taken out, so that 35 records — 5 complex objects — fill a
//! 4 KiB page exactly as in the paper (Cairn's slotted page has a 36-byte
//! header and 10 bytes of slot entry per record; 106 bytes is the largest
//! record for which 35 fit). A record holds its set, its object's key, its
//! index in the object, two references (a root's and an interior record's
//! children; a leaf's `left` and `right` components' roots) and an update
//! counter; the rest is filler.
//!
//! **Placement.** [`load`] creates the records in the order of the set's
//! physical layout ([`Set::layout`]) in a group of their own, so they land
//! in the pages the generator planned (smeared records included), and
//! checks that they did: every planned page is one Cairn page, and no two
//! share one. The references are written once every record has its OID
//! (an update in place: the size does not change).
//!
//! **Queries.** A plan is a list of [`Visit`]s; [`run`] reads each record
//! by its OID, checks that it is the record the plan names (a wrong
//! reference or a misplaced record is an error, not a quiet miscount), and
//! rewrites in place the records the plan marks for update.

use cairn::storage::{GroupId, Oid, Txn};
use cairn::tools::ObjectTxn;

use super::generate::{
    AcobError, ObjectIdx, RecordIdx, Set, Visit, ATTACHMENTS_PER_OBJECT, RECORDS_PER_OBJECT, SLOTS_PER_PAGE,
};

/// Bytes of a stored record: 35 fill a Cairn 4 KiB page (see the module
/// docs).
pub const STORED_RECORD_BYTES: usize = 106;

/// Where the fields of a stored record are.
const SET_AT: usize = 0;
const KEY_AT: usize = 1;
const RECORD_AT: usize = 5;
const REFS_AT: usize = 6;
const OID_LEN: usize = 10;
const COUNTER_AT: usize = REFS_AT + 2 * OID_LEN;
const FILLER: u8 = 0xAC;

/// The errors of storing and running ACOB.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The storage engine (or a server) failed.
    #[error(transparent)]
    Storage(#[from] cairn::storage::Error),
    /// The generator refused or broke an invariant.
    #[error(transparent)]
    Generator(#[from] AcobError),
    /// The database does not hold what the plan says: a record where
    /// another was expected, a page holding records of two planned pages.
    #[error("ACOB set {set}: {what}")]
    Mismatch {
        /// The set (0 for A).
        set: u8,
        /// What differs.
        what: String,
    },
}

/// The result of storing and running ACOB.
pub type Result<T> = std::result::Result<T, StoreError>;

/// What a system under test offers the benchmark: reading, rewriting and
/// creating objects in one transaction. Implemented for the page-based
/// storage transaction (embedded, page server, file server) and for the
/// object-server client's transaction.
pub trait AcobTxn {
    /// The object's bytes.
    fn read_object(&mut self, oid: Oid) -> cairn::storage::Result<Vec<u8>>;
    /// Replaces the object's bytes (same length here: in place).
    fn update_object(&mut self, oid: Oid, bytes: &[u8]) -> cairn::storage::Result<()>;
    /// Creates an object in `group`.
    fn create_object(&mut self, group: GroupId, bytes: &[u8]) -> cairn::storage::Result<Oid>;
}

impl AcobTxn for Txn {
    fn read_object(&mut self, oid: Oid) -> cairn::storage::Result<Vec<u8>> {
        self.read(oid)
    }

    fn update_object(&mut self, oid: Oid, bytes: &[u8]) -> cairn::storage::Result<()> {
        self.update(oid, bytes)
    }

    fn create_object(&mut self, group: GroupId, bytes: &[u8]) -> cairn::storage::Result<Oid> {
        self.create(group, bytes)
    }
}

impl AcobTxn for ObjectTxn {
    fn read_object(&mut self, oid: Oid) -> cairn::storage::Result<Vec<u8>> {
        self.read(oid)
    }

    fn update_object(&mut self, oid: Oid, bytes: &[u8]) -> cairn::storage::Result<()> {
        self.update(oid, bytes)
    }

    fn create_object(&mut self, group: GroupId, bytes: &[u8]) -> cairn::storage::Result<Oid> {
        self.create(group, None, bytes)
    }
}

/// A set as stored: its group and every record's OID.
#[derive(Clone, Debug)]
pub struct StoredSet {
    /// The set's number (0 for A).
    pub set: u8,
    /// The group holding its records.
    pub group: GroupId,
    /// Per object, its records' OIDs, indexed by [`RecordIdx::get`].
    pub oids: Vec<[Oid; RECORDS_PER_OBJECT]>,
}

impl StoredSet {
    /// The OID of `record` of `object`.
    pub fn oid(&self, object: ObjectIdx, record: RecordIdx) -> Option<Oid> {
        self.oids.get(object.0 as usize).map(|rs| rs[usize::from(record.get())])
    }
}

/// A stored record's fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoredRecord {
    /// The set's number.
    pub set: u8,
    /// The object's key (the paper's, `1 ..= objects`).
    pub key: u32,
    /// The record's index in its object.
    pub record: u8,
    /// Its two references (children, or a leaf's components' roots).
    pub refs: [Oid; 2],
    /// How many times a random update rewrote it.
    pub counter: u32,
}

impl StoredRecord {
    /// The record's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![FILLER; STORED_RECORD_BYTES];
        b[SET_AT] = self.set;
        b[KEY_AT..KEY_AT + 4].copy_from_slice(&self.key.to_le_bytes());
        b[RECORD_AT] = self.record;
        for (i, r) in self.refs.iter().enumerate() {
            let at = REFS_AT + i * OID_LEN;
            b[at..at + OID_LEN].copy_from_slice(&r.to_bytes());
        }
        b[COUNTER_AT..COUNTER_AT + 4].copy_from_slice(&self.counter.to_le_bytes());
        b
    }

    /// Reads a record back; `None` if `bytes` is not one.
    pub fn decode(bytes: &[u8]) -> Option<StoredRecord> {
        if bytes.len() != STORED_RECORD_BYTES {
            return None;
        }
        let u32_at = |at: usize| {
            bytes
                .get(at..at + 4)
                .and_then(|b| b.try_into().ok())
                .map(u32::from_le_bytes)
        };
        let oid_at = |at: usize| bytes.get(at..at + OID_LEN).and_then(Oid::from_exact);
        Some(StoredRecord {
            set: bytes[SET_AT],
            key: u32_at(KEY_AT)?,
            record: bytes[RECORD_AT],
            refs: [oid_at(REFS_AT)?, oid_at(REFS_AT + OID_LEN)?],
            counter: u32_at(COUNTER_AT)?,
        })
    }
}

/// The OID a record's fields are stored with before its references are
/// known (all zero: names no object).
fn no_oid() -> Oid {
    Oid::from_bytes(&[0; OID_LEN])
}

/// Stores `set` (number `set_no`) in `group` (an empty group of its own)
/// through `txn`, in its physical layout order, and checks the placement;
/// the caller commits.
pub fn load<T: AcobTxn + ?Sized>(txn: &mut T, group: GroupId, set: &Set, set_no: u8) -> Result<StoredSet> {
    let mismatch = |what: String| StoreError::Mismatch { set: set_no, what };
    let layout = set.layout()?;
    let objects = set.object_count() as usize;
    let mut oids: Vec<Option<[Oid; RECORDS_PER_OBJECT]>> = vec![None; objects];
    let mut slots: Vec<[Option<Oid>; RECORDS_PER_OBJECT]> = vec![[None; RECORDS_PER_OBJECT]; objects];
    // Planned page → Cairn page, and back.
    let mut page_of = std::collections::HashMap::new();
    let mut planned_of = std::collections::HashMap::new();
    for (at, cell) in layout.iter().enumerate() {
        let Some((object, record)) = cell else { continue };
        let stored = StoredRecord {
            set: set_no,
            key: object.key(),
            record: record.get(),
            refs: [no_oid(), no_oid()],
            counter: 0,
        };
        let oid = txn.create_object(group, &stored.encode())?;
        let planned = at / SLOTS_PER_PAGE as usize;
        if *page_of.entry(planned).or_insert(oid.page) != oid.page
            || *planned_of.entry(oid.page).or_insert(planned) != planned
        {
            return Err(mismatch(format!(
                "object {} record {} was planned on page {planned} and landed on Cairn page {} with records of \
                 another planned page",
                object.0,
                record.get(),
                oid.page
            )));
        }
        slots[object.0 as usize][usize::from(record.get())] = Some(oid);
    }
    for (o, rs) in slots.iter().enumerate() {
        let mut all = [no_oid(); RECORDS_PER_OBJECT];
        for (i, r) in rs.iter().enumerate() {
            all[i] = r.ok_or_else(|| mismatch(format!("object {o} record {i} is not in the layout")))?;
        }
        oids[o] = Some(all);
    }
    let oids: Vec<[Oid; RECORDS_PER_OBJECT]> = oids.into_iter().flatten().collect();
    // The references, now that every record has its OID.
    for (o, spec) in set.objects().iter().enumerate() {
        for record in RecordIdx::ALL {
            let refs = match (record.children(), record.leaf_number()) {
                (Some([l, r]), _) => [oids[o][usize::from(l.get())], oids[o][usize::from(r.get())]],
                (None, Some(leaf)) => {
                    let component = |k: usize| {
                        spec.attachments
                            .get(k)
                            .and_then(|c| oids.get(c.0 as usize))
                            .map(|rs| rs[0])
                            .ok_or_else(|| {
                                mismatch(format!("object {o} leaf {leaf}: attachment {k} is not in the set"))
                            })
                    };
                    debug_assert!(2 * leaf + 1 < ATTACHMENTS_PER_OBJECT);
                    [component(2 * leaf)?, component(2 * leaf + 1)?]
                }
                (None, None) => return Err(mismatch(format!("record {} is neither inner nor leaf", record.get()))),
            };
            let stored = StoredRecord {
                set: set_no,
                key: ObjectIdx(o as u32).key(),
                record: record.get(),
                refs,
                counter: 0,
            };
            txn.update_object(oids[o][usize::from(record.get())], &stored.encode())?;
        }
    }
    Ok(StoredSet {
        set: set_no,
        group,
        oids,
    })
}

/// What running a plan did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunCounts {
    /// Records read.
    pub read: u64,
    /// Records rewritten.
    pub written: u64,
}

/// Runs `visits` (a plan of [`super::generate`]) against `stored` through
/// `txn`: reads each record, checks it is the one the plan names and, with
/// `follows` (a depth-first plan: random read and update, where each visit
/// below the start is a child of the last one read a level up), that the
/// reference it was reached by leads to it; rewrites the records the plan
/// marks (their update counter goes up by one). The caller commits.
pub fn run<T: AcobTxn + ?Sized>(txn: &mut T, stored: &StoredSet, visits: &[Visit], follows: bool) -> Result<RunCounts> {
    let mismatch = |what: String| StoreError::Mismatch { set: stored.set, what };
    let mut counts = RunCounts::default();
    // The references of the record read last at each depth: the next
    // visit one deeper must be one of them.
    let mut refs_at: Vec<[Oid; 2]> = Vec::new();
    for v in visits {
        let oid = stored
            .oid(v.object, v.record)
            .ok_or_else(|| mismatch(format!("object {} is not in the set", v.object.0)))?;
        let depth = usize::from(v.depth);
        if follows && depth > 0 {
            let parent = refs_at.get(depth - 1).ok_or_else(|| {
                mismatch(format!(
                    "a visit at depth {depth} with none at depth {} before it",
                    depth - 1
                ))
            })?;
            if !parent.contains(&oid) {
                return Err(mismatch(format!(
                    "object {} record {} at depth {depth} is not referenced by the record read a level up",
                    v.object.0,
                    v.record.get()
                )));
            }
        }
        let bytes = txn.read_object(oid)?;
        let mut rec = StoredRecord::decode(&bytes)
            .ok_or_else(|| mismatch(format!("the record at {oid} is not an ACOB record")))?;
        if rec.set != stored.set || rec.key != v.object.key() || rec.record != v.record.get() {
            return Err(mismatch(format!(
                "{oid} holds set {} key {} record {}, the plan says key {} record {}",
                rec.set,
                rec.key,
                rec.record,
                v.object.key(),
                v.record.get()
            )));
        }
        counts.read += 1;
        refs_at.truncate(depth);
        refs_at.push(rec.refs);
        if v.update {
            rec.counter = rec.counter.wrapping_add(1);
            txn.update_object(oid, &rec.encode())?;
            counts.written += 1;
        }
    }
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acob::generate::{random_read, random_update, scan_order, AcobConfig};
    use crate::oo1::rng::ParkMiller;
    use cairn::storage::{Db, DbOptions};

    fn db(dir: &std::path::Path) -> Db {
        Db::open_or_create(
            dir,
            &DbOptions {
                background: false,
                ..DbOptions::default()
            },
        )
        .unwrap()
    }

    fn stored_set(db: &Db, name: &str, config: &AcobConfig) -> (Set, StoredSet) {
        let set = Set::generate(config).unwrap();
        let group = db.create_group(name).unwrap();
        let mut t = db.begin().unwrap();
        let stored = load(&mut t, group, &set, 0).unwrap();
        t.commit().unwrap();
        (set, stored)
    }

    #[test]
    fn records_round_trip_and_a_short_one_is_refused() {
        let r = StoredRecord {
            set: 3,
            key: 1500,
            record: 6,
            refs: [Oid::from_bytes(&[1; 10]), Oid::from_bytes(&[2; 10])],
            counter: 9,
        };
        assert_eq!(StoredRecord::decode(&r.encode()), Some(r));
        assert_eq!(StoredRecord::decode(&r.encode()[..50]), None);
    }

    #[test]
    fn a_set_lands_on_the_pages_its_layout_plans_smeared_or_not() {
        let dir = tempfile::tempdir().unwrap();
        let db = db(dir.path());
        for (name, smeared) in [("plain", false), ("smeared", true)] {
            let config = AcobConfig {
                smeared,
                ..AcobConfig::default()
            };
            let (set, stored) = stored_set(&db, name, &config);
            // Every object's records on the pages the generator placed them:
            // two records share a Cairn page exactly when they share a
            // planned page.
            let mut cairn_page = std::collections::HashMap::new();
            for (o, rs) in stored.oids.iter().enumerate() {
                for record in RecordIdx::ALL {
                    let planned = set.place(ObjectIdx(o as u32), record).unwrap().page;
                    let page = rs[usize::from(record.get())].page;
                    assert_eq!(*cairn_page.entry(planned).or_insert(page), page);
                }
            }
            let distinct: std::collections::HashSet<_> = cairn_page.values().collect();
            assert_eq!(distinct.len(), cairn_page.len(), "one Cairn page per planned page");
            assert_eq!(cairn_page.len(), set.page_count() as usize);
            // An unsmeared object is on one page; a smeared set moved some.
            let split = stored
                .oids
                .iter()
                .filter(|rs| rs.iter().any(|o| o.page != rs[0].page))
                .count();
            assert_eq!(split == 0, !smeared, "{name}: {split} objects span pages");
        }
    }

    #[test]
    fn plans_run_against_the_stored_set_and_updates_stick() {
        let dir = tempfile::tempdir().unwrap();
        let db = db(dir.path());
        let (set, stored) = stored_set(&db, "a", &AcobConfig::default());
        let mut t = db.begin().unwrap();
        let scan = run(&mut t, &stored, &scan_order(&set), false).unwrap();
        assert_eq!(scan.read, set.object_count() as u64 * RECORDS_PER_OBJECT as u64);
        let read_plan = random_read(&set, &mut ParkMiller::new(7));
        let reads = run(&mut t, &stored, &read_plan, true).unwrap();
        assert_eq!((reads.read, reads.written), (read_plan.len() as u64, 0));
        t.commit().unwrap();
        let plan = random_update(&set, &mut ParkMiller::new(7));
        let marked = plan.iter().filter(|v| v.update).count() as u64;
        assert!(marked > 0);
        let mut t = db.begin().unwrap();
        let done = run(&mut t, &stored, &plan, true).unwrap();
        assert_eq!(done.written, marked);
        t.commit().unwrap();
        // Each rewritten record's counter says how often the plan marked it.
        let mut times = std::collections::HashMap::new();
        for v in plan.iter().filter(|v| v.update) {
            *times.entry(stored.oid(v.object, v.record).unwrap()).or_insert(0u32) += 1;
        }
        let mut t = db.begin().unwrap();
        for (oid, n) in times {
            let rec = StoredRecord::decode(&t.read(oid).unwrap()).unwrap();
            assert_eq!(rec.counter, n, "{oid}");
        }
        t.commit().unwrap();
    }

    #[test]
    fn a_plan_for_another_set_is_refused_naming_what_differs() {
        let dir = tempfile::tempdir().unwrap();
        let db = db(dir.path());
        let (_, stored) = stored_set(&db, "a", &AcobConfig::default());
        let other = Set::generate(&AcobConfig {
            seed: 99,
            ..AcobConfig::default()
        })
        .unwrap();
        let mut t = db.begin().unwrap();
        // The other set's attachments differ: following its plan here
        // reaches records the stored references do not lead to.
        let err = run(&mut t, &stored, &random_read(&other, &mut ParkMiller::new(1)), true).unwrap_err();
        assert!(matches!(err, StoreError::Mismatch { .. }), "{err}");
    }
}
