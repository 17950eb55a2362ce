//! Where the records a NOC page served are in its image, and what they were
//! checked as: a table indexed by slot, so finding a record used again is
//! one array read (a hash map cost two cache misses per object: the
//! control bytes and the bucket, the largest cost of a warm OO1 lookup).

use crate::view::CheckedAs;
use std::ops::Range;

use cairn_storage::Oid;

/// One slot's entry. `len == 0` and `uniq == 0` with `known == false`: no
/// entry.
#[derive(Clone, Copy, Debug, Default)]
struct Known {
    uniq: u32,
    start: u32,
    len: u32,
    class: u32,
    version: u16,
    known: bool,
    checked: bool,
}

/// Where a record lies in its page image, and the schema class and
/// version it was checked as, if it was.
pub(super) type KnownRecord = (Range<usize>, Option<CheckedAs>);

/// The known records of one page image, by slot.
#[derive(Debug, Default)]
pub(super) struct Records {
    slots: Vec<Known>,
}

impl Records {
    /// Where `oid`'s record is in the image, and the schema class and
    /// version it was checked as, if it was.
    pub(super) fn get(&self, oid: Oid) -> Option<KnownRecord> {
        let k = self.slots.get(usize::from(oid.slot.0))?;
        if !k.known || k.uniq != oid.uniq.0 {
            return None;
        }
        let start = k.start as usize;
        let checked = k.checked.then_some(CheckedAs {
            class: k.class,
            version: k.version,
        });
        Some((start..start + k.len as usize, checked))
    }

    /// Notes where `oid`'s record is (a range past `u32` is not noted: it
    /// is looked for again next time).
    pub(super) fn insert(&mut self, oid: Oid, range: Range<usize>, checked: Option<CheckedAs>) {
        let (Ok(start), Ok(len)) = (u32::try_from(range.start), u32::try_from(range.len())) else {
            return;
        };
        let slot = usize::from(oid.slot.0);
        if self.slots.len() <= slot {
            self.slots.resize(slot + 1, Known::default());
        }
        let (class, version) = checked.map_or((0, 0), |c| (c.class, c.version));
        self.slots[slot] = Known {
            uniq: oid.uniq.0,
            start,
            len,
            class,
            version,
            known: true,
            checked: checked.is_some(),
        };
    }

    /// Notes that `oid`'s known record was checked as `checked`.
    pub(super) fn set_checked(&mut self, oid: Oid, checked: CheckedAs) {
        if let Some(k) = self.slots.get_mut(usize::from(oid.slot.0)) {
            if k.known && k.uniq == oid.uniq.0 {
                k.class = checked.class;
                k.version = checked.version;
                k.checked = true;
            }
        }
    }

    /// Forgets every record.
    pub(super) fn clear(&mut self) {
        self.slots = Vec::new();
    }

    /// Whether no record is known (a scan: for invariant checks).
    pub(super) fn is_empty(&self) -> bool {
        !self.slots.iter().any(|k| k.known)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_storage::{PageId, SlotIdx, Uniq};
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn oid(slot: u16, uniq: u32) -> Oid {
        Oid {
            page: PageId(3),
            slot: SlotIdx(slot),
            uniq: Uniq(uniq),
        }
    }

    proptest! {
        /// Against a map of OIDs: inserts, checks and clears, then every
        /// OID probed answers as the model does.
        #[test]
        fn records_match_a_map(ops in proptest::collection::vec((0u8..3, 0u16..40, 0u32..3, 0usize..5000, 1usize..300), 0..200)) {
            let mut r = Records::default();
            let mut model: HashMap<(u16, u32), KnownRecord> = HashMap::new();
            for (op, slot, uniq, start, len) in ops {
                let o = oid(slot, uniq);
                match op {
                    0 => {
                        r.insert(o, start..start + len, None);
                        // A slot holds one record: another uniq's entry goes.
                        model.retain(|(s, _), _| *s != slot);
                        model.insert((slot, uniq), (start..start + len, None));
                    }
                    1 => {
                        let checked = CheckedAs {
                            class: start as u32,
                            version: len as u16,
                        };
                        r.set_checked(o, checked);
                        if let Some(e) = model.get_mut(&(slot, uniq)) {
                            e.1 = Some(checked);
                        }
                    }
                    _ => {
                        if len % 7 == 0 {
                            r.clear();
                            model.clear();
                        }
                    }
                }
                prop_assert_eq!(r.is_empty(), model.is_empty());
                for s in 0..40 {
                    for u in 0..3 {
                        prop_assert_eq!(r.get(oid(s, u)), model.get(&(s, u)).cloned());
                    }
                }
            }
        }
    }
}
