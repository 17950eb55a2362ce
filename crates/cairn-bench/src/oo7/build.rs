//! Storing a generated [`Graph`] under one of the three clusterings of
//! Kemper & Kossmann §5.2, and the OIDs it got ([`Stored`]).
//!
//! The clustering is nothing but the order objects are created in, and the
//! group each goes to (a group fills its pages in creation order):
//!
//! - **TOC** (time of creation): OO7's `gendb` order, one group;
//! - **TB** (type-based): one group per class, each in `gendb` order;
//! - **RANDOM**: every object in one group, in a seeded random permutation
//!   of the `gendb` order.
//!
//! Two passes, as OO1's build does: first every object is created, in the
//! clustering's order, with placeholder references of the final size
//! (references are fixed-size, lists have their final length); then every
//! record is rewritten in place with the real references, now that every
//! OID is known. No record changes size, so none moves.

use std::str::FromStr;

use cairn::storage::{Oid, PageId, SlotIdx, Uniq};
use cairn::{Database, List, Persistent, Ref, Transaction};

use super::generate::{shuffle, Graph, Obj, TYPE_NAMES};
use super::schema::{
    Oo7AtomicPart, Oo7BaseAssembly, Oo7ComplexAssembly, Oo7CompositePart, Oo7Connection, Oo7Document, Oo7Module,
};
use crate::oo1::rng::ParkMiller;
use crate::oo1::system::Result;

/// Objects created (pass 1) or rewritten (pass 2) per transaction.
pub const BUILD_TXN_OBJECTS: usize = 10_000;

/// How objects are placed on pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Clustering {
    /// Time of creation: `gendb` order, one group.
    Toc,
    /// Type-based: one group per class.
    Tb,
    /// A random permutation, one group.
    Random,
}

impl Clustering {
    /// All three, in the order the sweep runs them.
    pub const ALL: [Clustering; 3] = [Clustering::Toc, Clustering::Tb, Clustering::Random];

    /// The name on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Clustering::Toc => "toc",
            Clustering::Tb => "tb",
            Clustering::Random => "random",
        }
    }

    /// The paper's name.
    pub fn label(self) -> &'static str {
        match self {
            Clustering::Toc => "TOC",
            Clustering::Tb => "TB",
            Clustering::Random => "RANDOM",
        }
    }

    /// The named root holding this clustering's module.
    pub fn root_name(self) -> String {
        format!("oo7-{}", self.name())
    }

    /// The group `obj` is created in.
    pub fn group(self, obj: Obj, g: &Graph) -> &'static str {
        match self {
            Clustering::Toc => "oo7-toc",
            Clustering::Random => "oo7-random",
            Clustering::Tb => match obj {
                Obj::Module => "oo7-tb-module",
                Obj::Assembly(a) if g.assemblies[a as usize].is_base() => "oo7-tb-base-assembly",
                Obj::Assembly(_) => "oo7-tb-complex-assembly",
                Obj::Composite(_) => "oo7-tb-composite-part",
                Obj::Document(_) => "oo7-tb-document",
                Obj::Atomic(_) => "oo7-tb-atomic-part",
                Obj::Connection(_) => "oo7-tb-connection",
            },
        }
    }

    /// True if `group` is one of this clustering's groups.
    pub fn owns_group(self, group: &str) -> bool {
        match self {
            Clustering::Toc => group == "oo7-toc",
            Clustering::Random => group == "oo7-random",
            Clustering::Tb => group.starts_with("oo7-tb-"),
        }
    }

    /// The order objects are created in (see the module documentation); a
    /// random permutation is drawn from `seed`.
    pub fn creation_order(self, g: &Graph, seed: u64) -> Vec<Obj> {
        let mut order = g.creation_order();
        match self {
            Clustering::Toc => {}
            // A stable sort by group keeps `gendb` order within each group;
            // the groups' own order does not matter (each has its pages).
            Clustering::Tb => order.sort_by_key(|&o| self.group(o, g)),
            Clustering::Random => shuffle(&mut ParkMiller::new(seed ^ 0x00c0_ffee), &mut order),
        }
        order
    }
}

impl FromStr for Clustering {
    type Err = String;

    /// `toc`, `tb` or `random`, in any case.
    fn from_str(s: &str) -> std::result::Result<Clustering, String> {
        let t = s.trim();
        Clustering::ALL
            .into_iter()
            .find(|c| c.name().eq_ignore_ascii_case(t))
            .ok_or_else(|| format!("unknown clustering {t:?}; the clusterings are toc, tb, random"))
    }
}

/// The OIDs every object got, by index.
#[derive(Clone, Debug)]
pub struct Stored {
    /// How the objects were placed.
    pub clustering: Clustering,
    /// The module.
    pub module: Oid,
    /// Assemblies, by index (complex or base by level).
    pub assemblies: Vec<Oid>,
    /// Composite parts.
    pub composites: Vec<Oid>,
    /// Documents, by composite part.
    pub documents: Vec<Oid>,
    /// Atomic parts.
    pub atomics: Vec<Oid>,
    /// Connections.
    pub connections: Vec<Oid>,
}

impl Stored {
    fn empty(clustering: Clustering, g: &Graph) -> Stored {
        let none = placeholder_oid();
        Stored {
            clustering,
            module: none,
            assemblies: vec![none; g.assemblies.len()],
            composites: vec![none; g.composites.len()],
            documents: vec![none; g.composites.len()],
            atomics: vec![none; g.atomics.len()],
            connections: vec![none; g.connections.len()],
        }
    }

    /// The OID of `obj`.
    pub fn oid(&self, obj: Obj) -> Oid {
        match obj {
            Obj::Module => self.module,
            Obj::Assembly(i) => self.assemblies[i as usize],
            Obj::Composite(i) => self.composites[i as usize],
            Obj::Document(i) => self.documents[i as usize],
            Obj::Atomic(i) => self.atomics[i as usize],
            Obj::Connection(i) => self.connections[i as usize],
        }
    }

    fn set(&mut self, obj: Obj, oid: Oid) {
        let slot = match obj {
            Obj::Module => &mut self.module,
            Obj::Assembly(i) => &mut self.assemblies[i as usize],
            Obj::Composite(i) => &mut self.composites[i as usize],
            Obj::Document(i) => &mut self.documents[i as usize],
            Obj::Atomic(i) => &mut self.atomics[i as usize],
            Obj::Connection(i) => &mut self.connections[i as usize],
        };
        *slot = oid;
    }

    /// Atomic part `i`.
    pub fn atomic(&self, i: u32) -> Ref<Oo7AtomicPart> {
        Ref::from_oid(self.atomics[i as usize])
    }

    /// Every object's OID.
    pub fn all(&self) -> impl Iterator<Item = Oid> + '_ {
        std::iter::once(self.module)
            .chain(self.assemblies.iter().copied())
            .chain(self.composites.iter().copied())
            .chain(self.documents.iter().copied())
            .chain(self.atomics.iter().copied())
            .chain(self.connections.iter().copied())
    }

    /// Distinct pages holding the objects' records (their home slots; a
    /// large object's body pages are not counted).
    pub fn home_pages(&self) -> u64 {
        let mut pages: Vec<u32> = self.all().map(|o| o.page.0).collect();
        pages.sort_unstable();
        pages.dedup();
        pages.len() as u64
    }
}

/// An OID that names nothing.
fn placeholder_oid() -> Oid {
    Oid {
        page: PageId(0),
        slot: SlotIdx(0),
        uniq: Uniq(0),
    }
}

/// Where pass 1 takes references from (placeholders) and pass 2 (the OIDs).
struct Links<'a>(Option<&'a Stored>);

impl Links<'_> {
    fn get<T>(&self, obj: Obj) -> Ref<T> {
        Ref::from_oid(self.0.map_or_else(placeholder_oid, |s| s.oid(obj)))
    }

    fn list<T>(&self, objs: impl Iterator<Item = Obj>) -> List<Ref<T>> {
        objs.map(|o| self.get(o)).collect()
    }
}

/// Create in a group, or rewrite an object in place.
#[derive(Clone, Copy)]
enum Write<'a> {
    Create(&'a str),
    Put(Oid),
}

fn emit<T: Persistent>(tx: &mut Transaction<'_>, how: Write<'_>, value: T) -> Result<Oid> {
    match how {
        Write::Create(group) => Ok(tx.create_in(group, value)?.oid()),
        Write::Put(oid) => {
            tx.put(&Ref::<T>::from_oid(oid), value)?;
            Ok(oid)
        }
    }
}

fn kind(k: u8) -> String {
    TYPE_NAMES[k as usize].to_string()
}

/// Creates or rewrites `obj` with its references taken from `links`.
fn write(
    tx: &mut Transaction<'_>,
    g: &Graph,
    incoming: &[Vec<u32>],
    obj: Obj,
    links: &Links<'_>,
    how: Write<'_>,
) -> Result<Oid> {
    match obj {
        Obj::Module => {
            let v = Oo7Module {
                id: 1,
                kind: kind(g.module_kind),
                build_date: g.module_build_date,
                design_root: links.get(Obj::Assembly(0)),
            };
            emit(tx, how, v)
        }
        Obj::Assembly(i) => {
            let a = &g.assemblies[i as usize];
            if a.is_base() {
                let v = Oo7BaseAssembly {
                    id: a.id,
                    kind: kind(a.kind),
                    build_date: a.build_date,
                    super_assembly: links.get(Obj::Assembly(a.parent.unwrap_or(0))),
                    module: links.get(Obj::Module),
                    components: links.list(a.components.iter().map(|&c| Obj::Composite(c))),
                };
                return emit(tx, how, v);
            }
            let children = a.children.iter().map(|&c| Obj::Assembly(c));
            let base_level = a.level + 2 == g.params.levels;
            let v = Oo7ComplexAssembly {
                id: a.id,
                kind: kind(a.kind),
                build_date: a.build_date,
                super_assembly: a.parent.map(|p| links.get(Obj::Assembly(p))),
                module: links.get(Obj::Module),
                complex_children: if base_level {
                    List::new()
                } else {
                    links.list(children.clone())
                },
                base_children: if base_level { links.list(children) } else { List::new() },
            };
            emit(tx, how, v)
        }
        Obj::Composite(c) => {
            let s = &g.composites[c as usize];
            let v = Oo7CompositePart {
                id: s.id,
                kind: kind(s.kind),
                build_date: s.build_date,
                documentation: links.get(Obj::Document(c)),
                used_in: links.list(s.used_in.iter().map(|&b| Obj::Assembly(b))),
                parts: links.list(g.parts_of(c).map(Obj::Atomic)),
                root_part: links.get(Obj::Atomic(g.parts_of(c).start)),
            };
            emit(tx, how, v)
        }
        Obj::Document(c) => {
            let v = Oo7Document {
                title: g.document_title(c),
                id: g.composites[c as usize].id,
                text: g.document_text(c),
                part: links.get(Obj::Composite(c)),
            };
            emit(tx, how, v)
        }
        Obj::Atomic(a) => {
            let s = &g.atomics[a as usize];
            let v = Oo7AtomicPart {
                id: s.id,
                kind: kind(s.kind),
                build_date: s.build_date,
                x: s.x,
                y: s.y,
                doc_id: s.doc_id,
                part_of: links.get(Obj::Composite(s.composite)),
                to: links.list(g.outgoing(a).map(Obj::Connection)),
                from: links.list(incoming[a as usize].iter().map(|&k| Obj::Connection(k))),
            };
            emit(tx, how, v)
        }
        Obj::Connection(k) => {
            let s = &g.connections[k as usize];
            let v = Oo7Connection {
                kind: kind(s.kind),
                length: s.length,
                from: links.get(Obj::Atomic(s.from)),
                to: links.get(Obj::Atomic(s.to)),
            };
            emit(tx, how, v)
        }
    }
}

/// Stores `g` in `db` under `clustering` (random permutations drawn from
/// `seed`), names the module [`Clustering::root_name`], and returns every
/// object's OID. Objects go [`BUILD_TXN_OBJECTS`] to a transaction.
pub fn build(db: &Database, g: &Graph, clustering: Clustering, seed: u64) -> Result<Stored> {
    let order = clustering.creation_order(g, seed);
    let incoming = g.incoming();
    let mut stored = Stored::empty(clustering, g);
    // Pass 1: every object, placeholders for references.
    for batch in order.chunks(BUILD_TXN_OBJECTS) {
        let mut tx = db.begin()?;
        for &obj in batch {
            let oid = write(
                &mut tx,
                g,
                &incoming,
                obj,
                &Links(None),
                Write::Create(clustering.group(obj, g)),
            )?;
            stored.set(obj, oid);
        }
        tx.commit()?;
    }
    // Pass 2: the real references, in the same order (each transaction's
    // changes stay within a run of pages).
    for batch in order.chunks(BUILD_TXN_OBJECTS) {
        let mut tx = db.begin()?;
        for &obj in batch {
            let oid = stored.oid(obj);
            write(&mut tx, g, &incoming, obj, &Links(Some(&stored)), Write::Put(oid))?;
        }
        tx.commit()?;
    }
    let mut tx = db.begin()?;
    tx.set_root(&clustering.root_name(), &Ref::<Oo7Module>::from_oid(stored.module))?;
    tx.commit()?;
    Ok(stored)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oo7::generate::Params;

    #[test]
    fn clusterings_parse_in_any_case() {
        for c in Clustering::ALL {
            assert_eq!(c.name().to_uppercase().parse::<Clustering>(), Ok(c));
            assert_eq!(c.label().parse::<Clustering>(), Ok(c));
        }
        assert!("tob".parse::<Clustering>().is_err());
    }

    #[test]
    fn tb_order_keeps_creation_order_within_each_type() {
        let g = Graph::generate(&mut ParkMiller::new(1), Params::TINY);
        let order = Clustering::Tb.creation_order(&g, 1);
        let atomics: Vec<u32> = order
            .iter()
            .filter_map(|o| match o {
                Obj::Atomic(a) => Some(*a),
                _ => None,
            })
            .collect();
        assert_eq!(atomics, (0..g.atomics.len() as u32).collect::<Vec<_>>());
        // Each group's objects are contiguous.
        let groups: Vec<&str> = order.iter().map(|&o| Clustering::Tb.group(o, &g)).collect();
        let mut runs = groups.clone();
        runs.dedup();
        let mut distinct = runs.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(runs.len(), distinct.len());
        assert_eq!(distinct.len(), 7);
    }
}
