//! OO7's traversals T1, T2a and T2b on Cairn's typed API.
//!
//! **T1**: from the module's design root, every assembly depth-first; for
//! each base assembly, each of its composite parts; for each composite-part
//! visit, a depth-first search over its atomic-part graph from the root
//! part along outgoing connections (each connection object is read for its
//! `to`), visiting each atomic part once per composite-part visit and
//! calling the null procedure on its x and y. **T2a** is T1 and, at each
//! composite-part visit, swaps x and y of the root atomic part; **T2b**
//! swaps them in every atomic part visited. Each traversal is one
//! transaction, committed at the end.
//!
//! Objects are read in place ([`cairn::Transaction::view`]); an update goes
//! through [`cairn::Transaction::update`].

use std::str::FromStr;

use cairn::storage::Oid;
use cairn::{Database, Ref, Transaction};

use super::schema::{Oo7AtomicPart, Oo7BaseAssembly, Oo7ComplexAssembly, Oo7CompositePart, Oo7Module};
use crate::oo1::system::Result;

/// One of OO7's traversals.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Traversal {
    /// Read-only.
    T1,
    /// T1, updating each composite part's root atomic part.
    T2a,
    /// T1, updating every atomic part visited.
    T2b,
}

impl Traversal {
    /// All three, in report order.
    pub const ALL: [Traversal; 3] = [Traversal::T1, Traversal::T2a, Traversal::T2b];

    /// The name on the command line, in reports and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Traversal::T1 => "T1",
            Traversal::T2a => "T2a",
            Traversal::T2b => "T2b",
        }
    }
}

impl FromStr for Traversal {
    type Err = String;

    /// `T1`, `T2a` or `T2b`, in any case.
    fn from_str(s: &str) -> std::result::Result<Traversal, String> {
        let t = s.trim();
        Traversal::ALL
            .into_iter()
            .find(|x| x.name().eq_ignore_ascii_case(t))
            .ok_or_else(|| format!("unknown traversal {t:?}; the traversals are T1, T2a, T2b"))
    }
}

/// What a traversal did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Visits {
    /// Assemblies visited (complex and base).
    pub assemblies: u64,
    /// Composite-part visits (a composite part used by several base
    /// assemblies is visited once per use).
    pub composite_visits: u64,
    /// Atomic-part visits.
    pub atomic_visits: u64,
    /// Atomic parts updated (x and y swapped).
    pub updates: u64,
    /// Wrapping sum of [`null_proc`] over the atomic parts visited.
    pub digest: u64,
}

/// OO7's null procedure, called with each visited atomic part's x and y.
/// It is never inlined, so the call is paid as in OO7; its answer is
/// symmetric in x and y, so a swap by T2a or T2b leaves the traversal's
/// digest unchanged and every run can be checked against the generated
/// database.
#[inline(never)]
pub fn null_proc(x: i32, y: i32) -> u64 {
    let mix = |v: i32| (v as u32 as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(17);
    mix(x) ^ mix(y)
}

/// The state of one traversal.
struct Walk {
    traversal: Traversal,
    visits: Visits,
    /// Atomic parts visited in the current composite-part visit (at most
    /// 20: a scan beats hashing).
    seen: Vec<Oid>,
}

/// Runs `traversal` over the database whose module is the root
/// `root_name`, in one transaction, and commits.
pub fn run(db: &Database, root_name: &str, traversal: Traversal) -> Result<Visits> {
    let mut tx = db.begin()?;
    let module: Ref<Oo7Module> = tx.root(root_name)?;
    let design_root = tx.view(&module)?.get().design_root();
    let mut w = Walk {
        traversal,
        visits: Visits::default(),
        seen: Vec::with_capacity(32),
    };
    complex(&mut tx, &design_root, &mut w)?;
    tx.commit()?;
    Ok(w.visits)
}

fn complex(tx: &mut Transaction<'_>, r: &Ref<Oo7ComplexAssembly>, w: &mut Walk) -> Result<()> {
    let o = tx.view(r)?;
    let a = o.get();
    w.visits.assemblies += 1;
    for c in a.complex_children() {
        complex(tx, &c, w)?;
    }
    for b in a.base_children() {
        base(tx, &b, w)?;
    }
    Ok(())
}

fn base(tx: &mut Transaction<'_>, r: &Ref<Oo7BaseAssembly>, w: &mut Walk) -> Result<()> {
    let o = tx.view(r)?;
    w.visits.assemblies += 1;
    for c in o.get().components() {
        composite(tx, &c, w)?;
    }
    Ok(())
}

fn composite(tx: &mut Transaction<'_>, r: &Ref<Oo7CompositePart>, w: &mut Walk) -> Result<()> {
    let root = tx.view(r)?.get().root_part();
    w.visits.composite_visits += 1;
    w.seen.clear();
    atomic(tx, root, true, w)
}

fn atomic(tx: &mut Transaction<'_>, r: Ref<Oo7AtomicPart>, is_root: bool, w: &mut Walk) -> Result<()> {
    if w.seen.contains(&r.oid()) {
        return Ok(());
    }
    w.seen.push(r.oid());
    let o = tx.view(&r)?;
    let p = o.get();
    w.visits.atomic_visits += 1;
    w.visits.digest = w.visits.digest.wrapping_add(null_proc(p.x(), p.y()));
    let update = match w.traversal {
        Traversal::T1 => false,
        Traversal::T2a => is_root,
        Traversal::T2b => true,
    };
    if update {
        tx.update(&r, |a| std::mem::swap(&mut a.x, &mut a.y))?;
        w.visits.updates += 1;
    }
    for c in p.to() {
        let to = tx.view(&c)?.get().to();
        atomic(tx, to, false, w)?;
    }
    Ok(())
}

/// What `traversal` must do on the generated database: counts from the
/// definition (every assembly; each base assembly's composite parts; every
/// atomic part of each, the part graphs being connected), and the digest
/// from the generated x and y.
pub fn expected(g: &super::generate::Graph, traversal: Traversal) -> Visits {
    let p = g.params;
    let mut digest = 0u64;
    for (c, visits) in g.composite_visit_counts().into_iter().enumerate() {
        let sum = g
            .parts_of(c as u32)
            .map(|a| null_proc(g.atomics[a as usize].x, g.atomics[a as usize].y))
            .fold(0u64, u64::wrapping_add);
        digest = digest.wrapping_add(sum.wrapping_mul(u64::from(visits)));
    }
    Visits {
        assemblies: p.assemblies(),
        composite_visits: p.t1_composite_visits(),
        atomic_visits: p.t1_atomic_visits(),
        updates: match traversal {
            Traversal::T1 => 0,
            Traversal::T2a => p.t1_composite_visits(),
            Traversal::T2b => p.t1_atomic_visits(),
        },
        digest,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_null_procedure_does_not_see_a_swap() {
        assert_eq!(null_proc(3, 99_000), null_proc(99_000, 3));
        assert_ne!(null_proc(3, 99_000), null_proc(4, 99_000));
    }

    #[test]
    fn traversals_parse_in_any_case() {
        for t in Traversal::ALL {
            assert_eq!(t.name().to_lowercase().parse::<Traversal>(), Ok(t));
        }
        assert!("T3".parse::<Traversal>().is_err());
    }
}
