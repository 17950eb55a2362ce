//! The model of what the database holds (the acknowledged state and the
//! commit in flight), and the verification of a recovered database
//! against it: every acknowledged commit whole, nothing of an
//! unacknowledged one, the commit in flight all or nothing, and `check`
//! finding nothing wrong.

use std::collections::{BTreeMap, BTreeSet};

use cairn_storage::btree::BTree;
use cairn_storage::check::check_database;
use cairn_storage::sim::{SimDisk, SimRng};
use cairn_storage::{Db, Error, GroupId, Oid, PageId};

use crate::harness::{check_opts, db_path, no_panic, opts};

/// What the database holds after some prefix of the workload's commits.
#[derive(Clone, Debug, Default)]
pub(crate) struct State {
    /// The workload transaction whose commit this is (the registry's value).
    pub(crate) seq: u64,
    /// The registry object: every transaction writes its number into it, so
    /// a recovered database says which state it is in.
    pub(crate) registry: Option<Oid>,
    /// The B+-tree's root.
    pub(crate) root: Option<PageId>,
    pub(crate) objects: BTreeMap<Oid, Vec<u8>>,
    pub(crate) keys: BTreeMap<Vec<u8>, Vec<u8>>,
    /// The interlopers' registry (workloads with object locking): every
    /// interloper writes its number into it.
    pub(crate) side_registry: Option<Oid>,
    /// The last interloper committed.
    pub(crate) side: u64,
}

#[derive(Clone, Debug, Default)]
pub(crate) struct Model {
    /// After the last commit that returned Ok.
    pub(crate) acked: State,
    /// After the commit that was called but did not return Ok (crash or
    /// error): recovery may find it whole, or not at all.
    pub(crate) in_flight: Option<State>,
    /// Every OID ever handed out; those not in the state must not read.
    pub(crate) ever: BTreeSet<Oid>,
    /// `Db::create` returned Ok.
    pub(crate) created: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Which {
    Acked,
    InFlight,
}

impl Model {
    pub(crate) fn state(&self, w: Which) -> &State {
        match w {
            Which::Acked => &self.acked,
            Which::InFlight => self.in_flight.as_ref().expect("in flight"),
        }
    }

    /// The model once recovery has decided the commit in flight.
    pub(crate) fn resolved(&self, w: Which) -> Model {
        Model {
            acked: self.state(w).clone(),
            in_flight: None,
            ever: self.ever.clone(),
            created: self.created,
        }
    }
}

pub(crate) fn registry_bytes(seq: u64) -> Vec<u8> {
    seq.to_le_bytes().repeat(8)
}

pub(crate) fn registry_seq(bytes: &[u8]) -> Option<u64> {
    let seq = u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?);
    (bytes == registry_bytes(seq)).then_some(seq)
}

pub(crate) fn payload(rng: &mut SimRng, len: u64) -> Vec<u8> {
    let mut v = vec![0u8; len as usize];
    rng.fill(&mut v);
    v
}

pub(crate) fn first_difference(a: &[u8], b: &[u8]) -> String {
    match a.iter().zip(b).position(|(x, y)| x != y) {
        Some(i) => format!(
            "{} bytes read, {} expected, first difference at byte {i}",
            a.len(),
            b.len()
        ),
        None => format!("{} bytes read, {} expected", a.len(), b.len()),
    }
}

// ---------------------------------------------------------------------------
// Verification

/// Reads the whole database back and compares it with the model; says which
/// state (acknowledged, or with the commit in flight) it is in.
pub(crate) fn verify_db(db: &Db, model: &Model) -> Result<Which, String> {
    let mut t = db.begin().map_err(|e| format!("begin: {e}"))?;
    let registry = model
        .acked
        .registry
        .or(model.in_flight.as_ref().and_then(|s| s.registry));
    let which = match registry {
        None => Which::Acked,
        Some(reg) => match t.read(reg) {
            Ok(bytes) => {
                let seq = registry_seq(&bytes)
                    .ok_or_else(|| format!("the registry {reg} reads garbled bytes ({} bytes)", bytes.len()))?;
                let side = match model.acked.side_registry {
                    Some(side) => {
                        let bytes = t.read(side).map_err(|e| format!("the side registry {side}: {e}"))?;
                        registry_seq(&bytes).ok_or_else(|| {
                            format!("the side registry {side} reads garbled bytes ({} bytes)", bytes.len())
                        })?
                    }
                    None => 0,
                };
                if model.acked.registry.is_some() && (seq, side) == (model.acked.seq, model.acked.side) {
                    Which::Acked
                } else if model.in_flight.as_ref().is_some_and(|s| (s.seq, s.side) == (seq, side)) {
                    Which::InFlight
                } else {
                    return Err(format!(
                        "the registries say transaction {seq}, interloper {side}; acknowledged: {} and {}, in flight: {:?}",
                        model.acked.seq,
                        model.acked.side,
                        model.in_flight.as_ref().map(|s| (s.seq, s.side))
                    ));
                }
            }
            Err(Error::NotFound { .. }) if model.acked.registry.is_none() => Which::Acked,
            Err(e) => return Err(format!("the registry {reg}: {e}")),
        },
    };
    let state = model.state(which);
    let what = |w: Which| match w {
        Which::Acked => format!("acknowledged state (txn {})", model.acked.seq),
        Which::InFlight => format!("in-flight commit (txn {})", state.seq),
    };
    for (oid, want) in &state.objects {
        match t.read(*oid) {
            Ok(got) if &got == want => {}
            Ok(got) => {
                return Err(format!(
                    "object {oid} of the {}: {}",
                    what(which),
                    first_difference(&got, want)
                ))
            }
            Err(e) => return Err(format!("object {oid} of the {}: {e}", what(which))),
        }
    }
    for oid in &model.ever {
        if state.objects.contains_key(oid) || state.registry == Some(*oid) || state.side_registry == Some(*oid) {
            continue;
        }
        match t.read(*oid) {
            Err(Error::NotFound { .. }) => {}
            Ok(got) => {
                return Err(format!(
                    "object {oid} must not exist in the {} but reads {} bytes",
                    what(which),
                    got.len()
                ))
            }
            Err(e) => return Err(format!("object {oid} (must not exist): {e}")),
        }
    }
    if let Some(root) = state.root {
        let tree = BTree::open(&mut t, root).map_err(|e| format!("B+-tree at {root}: {e}"))?;
        tree.check(&mut t).map_err(|e| format!("B+-tree check: {e}"))?;
        for (k, v) in &state.keys {
            match tree.get(&mut t, k) {
                Ok(Some(got)) if &got == v => {}
                Ok(got) => {
                    return Err(format!(
                        "B+-tree key {:?} of the {}: {:?}",
                        String::from_utf8_lossy(k),
                        what(which),
                        got.map(|g| first_difference(&g, v))
                    ))
                }
                Err(e) => return Err(format!("B+-tree key {:?}: {e}", String::from_utf8_lossy(k))),
            }
        }
        let n = tree.len(&mut t).map_err(|e| format!("B+-tree len: {e}"))?;
        if n != state.keys.len() as u64 {
            return Err(format!(
                "the B+-tree holds {n} keys, the {} {}",
                what(which),
                state.keys.len()
            ));
        }
    }
    t.commit().map_err(|e| format!("read-only commit: {e}"))?;
    Ok(which)
}

pub(crate) const AFTER_RECOVERY: &[u8] = b"written after recovery";

/// Opens (recovers) the database on `disk`, checks it against the model,
/// commits one more transaction, closes it and runs `check`.
pub(crate) fn recover_and_check(disk: &SimDisk, model: &Model) -> Result<Which, String> {
    recover_check_write(disk, model).map(|(w, _)| w)
}

/// [`recover_and_check`], also returning the object committed after recovery.
pub(crate) fn recover_check_write(disk: &SimDisk, model: &Model) -> Result<(Which, Oid), String> {
    no_panic(|| {
        let db = Db::open(&db_path(), &opts(disk)).map_err(|e| format!("open failed: {e}"))?;
        let which = verify_db(&db, model)?;
        let mut t = db.begin().map_err(|e| format!("begin after recovery: {e}"))?;
        let oid = t
            .create(GroupId::DEFAULT, AFTER_RECOVERY)
            .map_err(|e| format!("create after recovery: {e}"))?;
        t.commit().map_err(|e| format!("commit after recovery: {e}"))?;
        db.close().map_err(|e| format!("close after recovery: {e}"))?;
        let report = check_database(&db_path(), &check_opts(disk));
        if !report.is_ok() {
            let shown: Vec<String> = report.problems.iter().take(3).map(|p| p.to_string()).collect();
            return Err(format!(
                "check found {} problems: {}",
                report.problems.len(),
                shown.join("; ")
            ));
        }
        Ok((which, oid))
    })
}
