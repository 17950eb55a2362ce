//! OO7's classes as Cairn types, with OO7's fields (Carey, DeWitt &
//! Naughton 1993, figure 1): design objects carry an id, a type and a build
//! date; references go both ways where OO7 has both directions.
//!
//! The classes are named `Oo7…` because a class name is global in a
//! database: the prefix keeps them apart from OO1's `Part` and `Connection`
//! and the examples' `AtomicPart` when one `cairn serve` holds them all
//! (`--connect`).
//!
//! OO7's manual (a 100 KB text per module) is left out: no traversal reads
//! it. A complex assembly's children are kept in two typed lists (complex
//! or base, by level) where OO7 has one list of `Assembly`.

use cairn::{List, Persistent, Ref};

/// The module: the root of the design.
#[derive(Persistent, Debug, Clone)]
pub struct Oo7Module {
    /// Id.
    pub id: u32,
    /// OO7's type, `type000` .. `type009`.
    pub kind: String,
    /// Build date.
    pub build_date: i64,
    /// The top of the assembly hierarchy.
    pub design_root: Ref<Oo7ComplexAssembly>,
}

/// An assembly made of assemblies.
#[derive(Persistent, Debug, Clone)]
pub struct Oo7ComplexAssembly {
    /// Id.
    pub id: u32,
    /// OO7's type.
    pub kind: String,
    /// Build date.
    pub build_date: i64,
    /// The assembly above (none for the design root).
    pub super_assembly: Option<Ref<Oo7ComplexAssembly>>,
    /// The module it belongs to.
    pub module: Ref<Oo7Module>,
    /// Children one level down, when that level is complex.
    pub complex_children: List<Ref<Oo7ComplexAssembly>>,
    /// Children one level down, when that level is the base level.
    pub base_children: List<Ref<Oo7BaseAssembly>>,
}

/// An assembly at the bottom of the hierarchy, made of composite parts.
#[derive(Persistent, Debug, Clone)]
pub struct Oo7BaseAssembly {
    /// Id.
    pub id: u32,
    /// OO7's type.
    pub kind: String,
    /// Build date.
    pub build_date: i64,
    /// The assembly above.
    pub super_assembly: Ref<Oo7ComplexAssembly>,
    /// The module it belongs to.
    pub module: Ref<Oo7Module>,
    /// The composite parts it uses (OO7's `componentsPriv`).
    pub components: List<Ref<Oo7CompositePart>>,
}

/// A composite part: a graph of atomic parts with a document.
#[derive(Persistent, Debug, Clone)]
pub struct Oo7CompositePart {
    /// Id.
    pub id: u32,
    /// OO7's type.
    pub kind: String,
    /// Build date.
    pub build_date: i64,
    /// Its document.
    pub documentation: Ref<Oo7Document>,
    /// The base assemblies that use it, once per use (OO7's `usedInPriv`).
    pub used_in: List<Ref<Oo7BaseAssembly>>,
    /// Its atomic parts.
    pub parts: List<Ref<Oo7AtomicPart>>,
    /// Where a traversal of its part graph starts.
    pub root_part: Ref<Oo7AtomicPart>,
}

/// A composite part's document.
#[derive(Persistent, Debug, Clone)]
pub struct Oo7Document {
    /// Title.
    pub title: String,
    /// Id (the composite part's).
    pub id: u32,
    /// The text (2,000 bytes in the small database).
    pub text: String,
    /// The composite part it documents.
    pub part: Ref<Oo7CompositePart>,
}

/// An atomic part.
#[derive(Persistent, Debug, Clone)]
pub struct Oo7AtomicPart {
    /// Id.
    pub id: u32,
    /// OO7's type.
    pub kind: String,
    /// Build date.
    pub build_date: i64,
    /// Position; T2a and T2b swap `x` and `y`.
    pub x: i32,
    /// Position.
    pub y: i32,
    /// The id of its composite part's document.
    pub doc_id: u32,
    /// Its composite part.
    pub part_of: Ref<Oo7CompositePart>,
    /// Connections leaving it.
    pub to: List<Ref<Oo7Connection>>,
    /// Connections reaching it.
    pub from: List<Ref<Oo7Connection>>,
}

/// A connection between two atomic parts of one composite part.
#[derive(Persistent, Debug, Clone)]
pub struct Oo7Connection {
    /// OO7's type.
    pub kind: String,
    /// Length.
    pub length: i32,
    /// The part it leaves.
    pub from: Ref<Oo7AtomicPart>,
    /// The part it reaches.
    pub to: Ref<Oo7AtomicPart>,
}
