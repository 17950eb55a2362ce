//! The OO7 database as plain Rust structs, generated deterministically from
//! one Park–Miller stream before anything is stored, and the order OO7's
//! `gendb` creates its objects in.
//!
//! The *small* database (Carey, DeWitt & Naughton 1993; [`Params::SMALL`]):
//! one module; an assembly hierarchy of 7 levels with fan-out 3 (364
//! complex assemblies over 729 base assemblies, 1,093 in all); each base
//! assembly uses 3 composite parts drawn at random from 500; each composite
//! part has a 2,000-byte document and 20 atomic parts; each atomic part has
//! 3 outgoing connections to atomic parts of the same composite part — the
//! first to part `(i + 1) mod 20`, so the part graph is a connected ring,
//! the other two to random parts (possibly itself, as in OO7).
//!
//! Draws, in this order: for each composite part, its type, whether it is
//! young (one in ten) and its build date, then each of its atomic parts'
//! type, build date, x and y, then each connection's target (the random
//! ones), type and length; then the module's
//! type and date; then the assemblies in creation order (depth-first,
//! parent before children), each its type and date and, for a base
//! assembly, its 3 composite parts.
//!
//! **Creation order** ([`Graph::creation_order`]), as OO7's `gendb` creates
//! the objects: for each composite part, its document, the composite part,
//! its 20 atomic parts, its 60 connections (part 0's three, part 1's, …);
//! then the module; then the assemblies depth-first, each before its
//! children.

use super::super::oo1::rng::ParkMiller;

/// The sizes of an OO7 database.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Params {
    /// Levels of the assembly hierarchy (the last is base assemblies).
    pub levels: u32,
    /// Children of each complex assembly.
    pub fanout: u32,
    /// Composite parts in the module's library.
    pub composite_parts: u32,
    /// Atomic parts of each composite part.
    pub atomic_per_composite: u32,
    /// Outgoing connections of each atomic part.
    pub connections_per_atomic: u32,
    /// Composite parts each base assembly uses.
    pub composites_per_base: u32,
    /// Bytes of each composite part's document text.
    pub document_bytes: usize,
}

impl Params {
    /// OO7's *small* database.
    pub const SMALL: Params = Params {
        levels: 7,
        fanout: 3,
        composite_parts: 500,
        atomic_per_composite: 20,
        connections_per_atomic: 3,
        composites_per_base: 3,
        document_bytes: 2000,
    };

    /// A scaled-down database for quick tests (4 levels, 50 composite
    /// parts; parts, connections and documents as in the small one).
    pub const TINY: Params = Params {
        levels: 4,
        composite_parts: 50,
        ..Params::SMALL
    };

    /// Assemblies at `level` (0 = the design root).
    pub fn assemblies_at(&self, level: u32) -> u64 {
        u64::from(self.fanout).pow(level)
    }

    /// All assemblies: `1 + f + … + f^(levels−1)`.
    pub fn assemblies(&self) -> u64 {
        (0..self.levels).map(|l| self.assemblies_at(l)).sum()
    }

    /// Base assemblies (the last level).
    pub fn base_assemblies(&self) -> u64 {
        self.assemblies_at(self.levels - 1)
    }

    /// Atomic parts.
    pub fn atomic_parts(&self) -> u64 {
        u64::from(self.composite_parts) * u64::from(self.atomic_per_composite)
    }

    /// Connections.
    pub fn connections(&self) -> u64 {
        self.atomic_parts() * u64::from(self.connections_per_atomic)
    }

    /// Composite-part visits of T1: every base assembly's composite parts.
    pub fn t1_composite_visits(&self) -> u64 {
        self.base_assemblies() * u64::from(self.composites_per_base)
    }

    /// Atomic-part visits of T1: each composite-part visit reaches all its
    /// atomic parts (the graph is connected), each once.
    pub fn t1_atomic_visits(&self) -> u64 {
        self.t1_composite_visits() * u64::from(self.atomic_per_composite)
    }
}

/// OO7's date ranges (build dates are plain numbers in OO7).
const ATOMIC_DATES: (i64, u32) = (1000, 1000);
/// Assemblies and the module.
const ASSEMBLY_DATES: (i64, u32) = (1000, 1000);
/// Young composite parts (one in ten) and old ones.
const YOUNG_COMPOSITE_DATES: (i64, u32) = (2000, 1000);
const OLD_COMPOSITE_DATES: (i64, u32) = (0, 1000);
/// Type names `type000` .. `type009`.
const TYPES: u32 = 10;
/// x, y and connection lengths are in `[0, XY_RANGE)`.
const XY_RANGE: u32 = 100_000;

/// The type strings, so builders need not format them.
pub const TYPE_NAMES: [&str; TYPES as usize] = [
    "type000", "type001", "type002", "type003", "type004", "type005", "type006", "type007", "type008", "type009",
];

/// One atomic part.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AtomicSpec {
    /// Id, 1-based over the database.
    pub id: u32,
    /// Type index into [`TYPE_NAMES`].
    pub kind: u8,
    /// Build date.
    pub build_date: i64,
    /// Position.
    pub x: i32,
    /// Position.
    pub y: i32,
    /// The id of its composite part's document.
    pub doc_id: u32,
    /// Index of its composite part.
    pub composite: u32,
}

/// One connection, from an atomic part to one of the same composite part.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnSpec {
    /// Type index into [`TYPE_NAMES`].
    pub kind: u8,
    /// Length.
    pub length: i32,
    /// Index of the atomic part it leaves.
    pub from: u32,
    /// Index of the atomic part it reaches.
    pub to: u32,
}

/// One composite part (its document has the same id).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompositeSpec {
    /// Id, 1-based.
    pub id: u32,
    /// Type index into [`TYPE_NAMES`].
    pub kind: u8,
    /// Build date.
    pub build_date: i64,
    /// Indices of the base assemblies that use it, once per use.
    pub used_in: Vec<u32>,
}

/// One assembly: complex (children) or base (composite parts).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AssemblySpec {
    /// Id, 1-based, in creation order.
    pub id: u32,
    /// Type index into [`TYPE_NAMES`].
    pub kind: u8,
    /// Build date.
    pub build_date: i64,
    /// Level, 0 for the design root.
    pub level: u32,
    /// Index of the assembly above it (none for the design root).
    pub parent: Option<u32>,
    /// Indices of its child assemblies (complex assemblies only).
    pub children: Vec<u32>,
    /// Indices of the composite parts it uses (base assemblies only).
    pub components: Vec<u32>,
}

impl AssemblySpec {
    /// True for a base assembly.
    pub fn is_base(&self) -> bool {
        self.children.is_empty()
    }
}

/// One object of the database, by kind and index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Obj {
    /// The module.
    Module,
    /// An assembly (complex or base) by index.
    Assembly(u32),
    /// A composite part by index.
    Composite(u32),
    /// A composite part's document, by the composite part's index.
    Document(u32),
    /// An atomic part by index.
    Atomic(u32),
    /// A connection by index.
    Connection(u32),
}

/// The whole database.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Graph {
    /// Its sizes.
    pub params: Params,
    /// The module's type index.
    pub module_kind: u8,
    /// The module's build date.
    pub module_build_date: i64,
    /// Assemblies in creation order; index 0 is the design root.
    pub assemblies: Vec<AssemblySpec>,
    /// Composite parts.
    pub composites: Vec<CompositeSpec>,
    /// Atomic parts; composite part `c`'s are `c·n .. (c+1)·n`, the first
    /// its root part.
    pub atomics: Vec<AtomicSpec>,
    /// Connections; atomic part `a`'s are `a·k .. (a+1)·k`.
    pub connections: Vec<ConnSpec>,
}

fn draw(rng: &mut ParkMiller, (lo, n): (i64, u32)) -> i64 {
    lo + i64::from(rng.rand(n) - 1)
}

impl Graph {
    /// Generates the database `params` describes from `rng`.
    pub fn generate(rng: &mut ParkMiller, params: Params) -> Graph {
        assert!(
            params.levels >= 2 && params.fanout >= 1,
            "an OO7 hierarchy has complex and base levels"
        );
        assert!(params.atomic_per_composite >= 1 && params.composite_parts >= 1);
        let n = params.atomic_per_composite;
        let mut composites = Vec::with_capacity(params.composite_parts as usize);
        let mut atomics = Vec::with_capacity(params.atomic_parts() as usize);
        let mut connections = Vec::with_capacity(params.connections() as usize);
        for c in 0..params.composite_parts {
            let kind = (rng.rand(TYPES) - 1) as u8;
            let dates = if rng.rand(10) == 1 {
                YOUNG_COMPOSITE_DATES
            } else {
                OLD_COMPOSITE_DATES
            };
            composites.push(CompositeSpec {
                id: c + 1,
                kind,
                build_date: draw(rng, dates),
                used_in: Vec::new(),
            });
            let first = c * n;
            for i in 0..n {
                atomics.push(AtomicSpec {
                    id: first + i + 1,
                    kind: (rng.rand(TYPES) - 1) as u8,
                    build_date: draw(rng, ATOMIC_DATES),
                    x: (rng.rand(XY_RANGE) - 1) as i32,
                    y: (rng.rand(XY_RANGE) - 1) as i32,
                    doc_id: c + 1,
                    composite: c,
                });
            }
            for i in 0..n {
                for k in 0..params.connections_per_atomic {
                    let to = if k == 0 { (i + 1) % n } else { rng.rand(n) - 1 };
                    connections.push(ConnSpec {
                        kind: (rng.rand(TYPES) - 1) as u8,
                        length: (rng.rand(XY_RANGE) - 1) as i32,
                        from: first + i,
                        to: first + to,
                    });
                }
            }
        }
        let module_kind = (rng.rand(TYPES) - 1) as u8;
        let module_build_date = draw(rng, ASSEMBLY_DATES);
        let mut g = Graph {
            params,
            module_kind,
            module_build_date,
            assemblies: Vec::with_capacity(params.assemblies() as usize),
            composites,
            atomics,
            connections,
        };
        g.assembly(rng, 0, None);
        g
    }

    /// Creates the assembly at `level` under `parent` and, depth-first, its
    /// children; returns its index.
    fn assembly(&mut self, rng: &mut ParkMiller, level: u32, parent: Option<u32>) -> u32 {
        let me = self.assemblies.len() as u32;
        self.assemblies.push(AssemblySpec {
            id: me + 1,
            kind: (rng.rand(TYPES) - 1) as u8,
            build_date: draw(rng, ASSEMBLY_DATES),
            level,
            parent,
            children: Vec::new(),
            components: Vec::new(),
        });
        if level + 1 == self.params.levels {
            for _ in 0..self.params.composites_per_base {
                let c = rng.rand(self.params.composite_parts) - 1;
                self.assemblies[me as usize].components.push(c);
                self.composites[c as usize].used_in.push(me);
            }
        } else {
            for _ in 0..self.params.fanout {
                let child = self.assembly(rng, level + 1, Some(me));
                self.assemblies[me as usize].children.push(child);
            }
        }
        me
    }

    /// Composite part `c`'s atomic parts, as indices (the first is its root).
    pub fn parts_of(&self, c: u32) -> std::ops::Range<u32> {
        let n = self.params.atomic_per_composite;
        c * n..(c + 1) * n
    }

    /// Atomic part `a`'s outgoing connections, as indices.
    pub fn outgoing(&self, a: u32) -> std::ops::Range<u32> {
        let k = self.params.connections_per_atomic;
        a * k..(a + 1) * k
    }

    /// For each atomic part, the indices of the connections that reach it.
    pub fn incoming(&self) -> Vec<Vec<u32>> {
        let mut inc = vec![Vec::new(); self.atomics.len()];
        for (i, c) in self.connections.iter().enumerate() {
            inc[c.to as usize].push(i as u32);
        }
        inc
    }

    /// Composite part `c`'s document title, as OO7 writes it.
    pub fn document_title(&self, c: u32) -> String {
        format!("Composite Part {:08}", c + 1)
    }

    /// Composite part `c`'s document text: OO7's sentence repeated to
    /// exactly [`Params::document_bytes`] bytes.
    pub fn document_text(&self, c: u32) -> String {
        let sentence = format!("I am the documentation for composite part {}. ", c + 1);
        sentence.chars().cycle().take(self.params.document_bytes).collect()
    }

    /// True if every atomic part of composite part `c` is reachable from
    /// its root part along outgoing connections.
    pub fn is_connected(&self, c: u32) -> bool {
        let parts = self.parts_of(c);
        let mut seen = vec![false; parts.len()];
        let mut stack = vec![parts.start];
        seen[0] = true;
        while let Some(a) = stack.pop() {
            for k in self.outgoing(a) {
                let to = self.connections[k as usize].to;
                let i = (to - parts.start) as usize;
                if !seen[i] {
                    seen[i] = true;
                    stack.push(to);
                }
            }
        }
        seen.iter().all(|&s| s)
    }

    /// Every object once, in the order OO7's `gendb` creates them (see the
    /// module documentation).
    pub fn creation_order(&self) -> Vec<Obj> {
        let mut out = Vec::with_capacity(
            1 + self.assemblies.len() + 2 * self.composites.len() + self.atomics.len() + self.connections.len(),
        );
        for c in 0..self.composites.len() as u32 {
            out.push(Obj::Document(c));
            out.push(Obj::Composite(c));
            out.extend(self.parts_of(c).map(Obj::Atomic));
            for a in self.parts_of(c) {
                out.extend(self.outgoing(a).map(Obj::Connection));
            }
        }
        out.push(Obj::Module);
        // Assemblies are stored in creation order already.
        out.extend((0..self.assemblies.len() as u32).map(Obj::Assembly));
        out
    }

    /// How many times T1 visits each composite part: once per use by a
    /// base assembly.
    pub fn composite_visit_counts(&self) -> Vec<u32> {
        self.composites.iter().map(|c| c.used_in.len() as u32).collect()
    }
}

/// `items` in a random order drawn from `rng` (Fisher–Yates).
pub fn shuffle<T>(rng: &mut ParkMiller, items: &mut [T]) {
    for i in (1..items.len()).rev() {
        let j = (rng.rand(i as u32 + 1) - 1) as usize;
        items.swap(i, j);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_small_database_has_the_papers_counts() {
        let p = Params::SMALL;
        assert_eq!(p.assemblies(), 1_093);
        assert_eq!(p.base_assemblies(), 729);
        assert_eq!(p.atomic_parts(), 10_000);
        assert_eq!(p.connections(), 30_000);
        assert_eq!(p.t1_composite_visits(), 2_187);
        assert_eq!(p.t1_atomic_visits(), 43_740);
    }

    #[test]
    fn creation_order_names_every_object_once() {
        let g = Graph::generate(&mut ParkMiller::new(3), Params::TINY);
        let order = g.creation_order();
        let mut sorted = order.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), order.len());
        let p = g.params;
        let expected = 1 + p.assemblies() + 2 * u64::from(p.composite_parts) + p.atomic_parts() + p.connections();
        assert_eq!(order.len() as u64, expected);
        assert_eq!(order[0], Obj::Document(0));
        assert_eq!(order[1], Obj::Composite(0));
        assert_eq!(order[2], Obj::Atomic(0));
    }

    #[test]
    fn the_same_seed_gives_the_same_graph_and_another_seed_another() {
        let a = Graph::generate(&mut ParkMiller::new(1), Params::TINY);
        let b = Graph::generate(&mut ParkMiller::new(1), Params::TINY);
        let c = Graph::generate(&mut ParkMiller::new(2), Params::TINY);
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn shuffle_is_a_permutation() {
        let mut v: Vec<u32> = (0..1000).collect();
        shuffle(&mut ParkMiller::new(9), &mut v);
        assert_ne!(v, (0..1000).collect::<Vec<_>>());
        v.sort_unstable();
        assert_eq!(v, (0..1000).collect::<Vec<_>>());
    }

    #[test]
    fn documents_have_exactly_their_size() {
        let g = Graph::generate(&mut ParkMiller::new(1), Params::TINY);
        assert_eq!(g.document_text(7).len(), 2000);
        assert!(g
            .document_text(7)
            .starts_with("I am the documentation for composite part 8."));
    }
}
