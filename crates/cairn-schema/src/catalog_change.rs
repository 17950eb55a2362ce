//! Catalog changes as requests: every change to the catalog (creating it,
//! registering or evolving a class, adding or dropping an index, naming an
//! object) is one [`CatalogChange`], checked for meaning and applied by
//! [`apply`] in the process that keeps the catalog: the embedded engine's,
//! or the server's for a remote client, which sends the change (the
//! [`StoreOps::catalog_remote`] of its transaction) instead of writing the
//! catalog's pages itself. A server refuses every client lock that would
//! change the schema group's pages; only its own code runs [`apply`] on
//! them, inside the client's transaction (ARCHITECTURE.md, "Catalog
//! changes").
//!
//! What [`apply`] checks, beyond what the B+-trees check of their keys:
//!
//! - **create**: the meta object is made only where there is none;
//! - **register**: a class name that is not empty, fields with distinct,
//!   non-empty names; the evolution rules of [`catalog::register`] against
//!   the stored catalog (not the sender's copy of it);
//! - **add index**: the class exists and the field is one of its newest
//!   version's; it has no index yet; the tree is a B+-tree root of the
//!   group `cairn.index` that no other index entry names (a page client's
//!   new tree is checked at its commit, when the tree's pages arrive);
//! - **remove index**: the class has an index on the field;
//! - **set root**: a non-empty name, and the object it names exists (or,
//!   for a page client, whose new objects reach the server with its
//!   commit, is on a page its transaction holds X on).
//!
//! # Encoding
//!
//! A change is a tag byte, then its fields (strings and byte strings as a
//! LEB128 length and the bytes, integers little-endian):
//!
//! ```text
//!  1 create meta
//!  2 register     name | schema (catalog::encode_schema)
//!  3 add index    class u32 | field | root page u32
//!  4 remove index class u32 | field
//!  5 set root     name | 0, or 1 + OID (10 bytes)
//! ```
//!
//! An outcome is a tag byte: `1` meta (three root pages, u32 each), `2`
//! registered (class id u32, version u16, latest u8, new u8), `3` done,
//! `4` removed (the dropped index's root page u32).

use cairn_codec::{DecodeError, Reader, Writer};
use cairn_storage::btree::BTree;
use cairn_storage::txn::CommitCheck;
use cairn_storage::{GroupId, Oid, PageId};

use crate::catalog::{self, Catalog, ClassInfo, Meta};
use crate::error::{Error, Result};
use crate::store_ops::StoreOps;
use crate::types::FieldDesc;

/// One change to the catalog (see the module docs).
#[derive(Clone, Debug, PartialEq)]
pub enum CatalogChange {
    /// Creates the meta object and the catalog's trees, if there are none.
    CreateMeta,
    /// Registers type `name` with `fields` (a new class, or a new version).
    Register {
        /// The type's name.
        name: String,
        /// Its fields.
        fields: Vec<FieldDesc>,
    },
    /// Records the B+-tree at `root` as the index of (class, field).
    AddIndex {
        /// The class id.
        class: u32,
        /// The indexed field.
        field: String,
        /// The index tree's root page.
        root: PageId,
    },
    /// Forgets the index of (class, field); the caller frees its tree.
    RemoveIndex {
        /// The class id.
        class: u32,
        /// The indexed field.
        field: String,
    },
    /// Names `oid` as `name`, or (`None`) removes the name.
    SetRoot {
        /// The name.
        name: String,
        /// The object named.
        oid: Option<Oid>,
    },
}

/// What a [`CatalogChange`] made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The catalog's trees (found or created).
    Meta(Meta),
    /// The class registered, and whether it is new.
    Registered {
        /// The class as the registering type uses it.
        info: ClassInfo,
        /// True for a class no object of which can exist yet.
        new: bool,
    },
    /// An index's entry removed: the root of its tree, which the caller
    /// frees.
    Removed {
        /// The tree's root page.
        root: PageId,
    },
    /// Done; nothing to tell.
    Done,
}

impl PartialEq for Meta {
    fn eq(&self, other: &Meta) -> bool {
        (self.roots.root(), self.classes.root(), self.indexes.root())
            == (other.roots.root(), other.classes.root(), other.indexes.root())
    }
}

impl Eq for Meta {}

fn put_str(w: &mut Writer, s: &[u8]) {
    w.put_len(s.len() as u64);
    w.put(s);
}

fn get_u32(r: &mut Reader<'_>, what: &str) -> std::result::Result<u32, DecodeError> {
    Ok(u32::from_le_bytes(r.take_array(what)?))
}

impl CatalogChange {
    /// The change's bytes (see the module docs).
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        match self {
            CatalogChange::CreateMeta => w.put_u8(1),
            CatalogChange::Register { name, fields } => {
                w.put_u8(2);
                put_str(&mut w, name.as_bytes());
                put_str(&mut w, &catalog::encode_schema(fields));
            }
            CatalogChange::AddIndex { class, field, root } => {
                w.put_u8(3);
                w.put_u32(*class);
                put_str(&mut w, field.as_bytes());
                w.put_u32(root.0);
            }
            CatalogChange::RemoveIndex { class, field } => {
                w.put_u8(4);
                w.put_u32(*class);
                put_str(&mut w, field.as_bytes());
            }
            CatalogChange::SetRoot { name, oid } => {
                w.put_u8(5);
                put_str(&mut w, name.as_bytes());
                match oid {
                    None => w.put_u8(0),
                    Some(oid) => {
                        w.put_u8(1);
                        w.put(&oid.to_bytes());
                    }
                }
            }
        }
        w.into_bytes()
    }

    /// Decodes a change; an error names the field that is wrong.
    pub fn decode(b: &[u8]) -> std::result::Result<CatalogChange, DecodeError> {
        let mut r = Reader::new(b);
        let change = match r.take(1, "a catalog change's kind")?[0] {
            1 => CatalogChange::CreateMeta,
            2 => {
                let name = catalog::decode_text(&mut r, "a class name")?;
                let schema = catalog::decode_len_bytes(&mut r, "a schema")?;
                CatalogChange::Register {
                    name,
                    fields: catalog::decode_schema(schema)?,
                }
            }
            3 => CatalogChange::AddIndex {
                class: get_u32(&mut r, "a class id")?,
                field: catalog::decode_text(&mut r, "a field name")?,
                root: PageId(get_u32(&mut r, "an index root")?),
            },
            4 => CatalogChange::RemoveIndex {
                class: get_u32(&mut r, "a class id")?,
                field: catalog::decode_text(&mut r, "a field name")?,
            },
            5 => {
                let name = catalog::decode_text(&mut r, "a root name")?;
                let oid = match r.take(1, "a root's OID flag")?[0] {
                    0 => None,
                    1 => Some(Oid::from_bytes(&r.take_array::<10>("a root's OID")?)),
                    other => return Err(r.error("a root's OID flag", format!("{other} is neither 0 nor 1"))),
                };
                CatalogChange::SetRoot { name, oid }
            }
            other => return Err(r.error("a catalog change's kind", format!("{other} is no catalog change"))),
        };
        r.finish("a catalog change")?;
        Ok(change)
    }

    /// What the change does, for errors and logs.
    pub fn describe(&self) -> String {
        match self {
            CatalogChange::CreateMeta => "create the catalog".into(),
            CatalogChange::Register { name, .. } => format!("register class {name}"),
            CatalogChange::AddIndex { class, field, root } => {
                format!("add the index on {field} of class {class} at page {root}")
            }
            CatalogChange::RemoveIndex { class, field } => format!("remove the index on {field} of class {class}"),
            CatalogChange::SetRoot { name, oid: Some(oid) } => format!("name {oid} as root {name:?}"),
            CatalogChange::SetRoot { name, oid: None } => format!("remove root {name:?}"),
        }
    }
}

impl Outcome {
    /// The outcome's bytes (see the module docs).
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        match self {
            Outcome::Meta(m) => {
                w.put_u8(1);
                for t in [m.roots, m.classes, m.indexes] {
                    w.put_u32(t.root().0);
                }
            }
            Outcome::Registered { info, new } => {
                w.put_u8(2);
                w.put_u32(info.id);
                w.put_u16(info.version);
                w.put_u8(u8::from(info.latest));
                w.put_u8(u8::from(*new));
            }
            Outcome::Done => w.put_u8(3),
            Outcome::Removed { root } => {
                w.put_u8(4);
                w.put_u32(root.0);
            }
        }
        w.into_bytes()
    }

    /// Decodes an outcome; the trees of a meta outcome are opened in
    /// `txn` (so checked to be B+-tree roots).
    pub fn decode<S: StoreOps>(txn: &mut S, b: &[u8]) -> Result<Outcome> {
        let bad = |e: DecodeError| Error::Internal(format!("the server's answer to a catalog change: {e}"));
        let mut r = Reader::new(b);
        let outcome = match r.take(1, "a catalog outcome's kind").map_err(bad)?[0] {
            1 => {
                let mut roots = [PageId(0); 3];
                for root in &mut roots {
                    *root = PageId(get_u32(&mut r, "a catalog tree's root").map_err(bad)?);
                }
                r.finish("a catalog outcome").map_err(bad)?;
                let mut open = |p| txn.tree_open(p).map(|(t, _)| t).map_err(Error::from);
                return Ok(Outcome::Meta(Meta {
                    roots: open(roots[0])?,
                    classes: open(roots[1])?,
                    indexes: open(roots[2])?,
                }));
            }
            2 => {
                let id = get_u32(&mut r, "a class id").map_err(bad)?;
                let version = u16::from_le_bytes(r.take_array("a class version").map_err(bad)?);
                let flags: [u8; 2] = r.take_array("a class's flags").map_err(bad)?;
                Outcome::Registered {
                    info: ClassInfo {
                        id,
                        version,
                        latest: flags[0] != 0,
                        writable: true,
                    },
                    new: flags[1] != 0,
                }
            }
            3 => Outcome::Done,
            4 => Outcome::Removed {
                root: PageId(get_u32(&mut r, "an index root").map_err(bad)?),
            },
            other => return Err(bad(r.error("a catalog outcome's kind", format!("{other} is unknown")))),
        };
        r.finish("a catalog outcome").map_err(bad)?;
        Ok(outcome)
    }
}

/// Makes `change` where the catalog is kept: sent to the server for a
/// remote transaction (`trees`: the catalog's tree roots, whose cached
/// lookups the change makes stale), else checked and applied here
/// ([`apply`]). `group` finds a group by name.
pub fn change<S: StoreOps>(
    txn: &mut S,
    trees: &[PageId],
    group: &dyn Fn(&str) -> Result<GroupId>,
    change: &CatalogChange,
) -> Result<Outcome> {
    match txn.catalog_remote(trees, &change.encode())? {
        Some(answer) => Outcome::decode(txn, &answer),
        None => apply(txn, group, change),
    }
}

/// Checks `change` against the stored catalog and makes it in `txn` (see
/// the module docs): what the embedded engine runs, and the server for a
/// client's request. A refusal is [`Error::InvalidArgument`] (or the
/// evolution rules' [`Error::SchemaMismatch`]) naming what is wrong, and
/// changes nothing.
pub fn apply<S: StoreOps>(
    txn: &mut S,
    group: &dyn Fn(&str) -> Result<GroupId>,
    change: &CatalogChange,
) -> Result<Outcome> {
    let system = group(catalog::SYSTEM_GROUP)?;
    if let CatalogChange::CreateMeta = change {
        return catalog::open_meta(txn, system).map(Outcome::Meta);
    }
    // No catalog yet is the sender's mistake, not damage.
    let meta = catalog::read_meta(txn, system)?
        .ok_or_else(|| refused(change, "the database has no catalog yet (create it first)"))?;
    match change {
        CatalogChange::CreateMeta => unreachable!("handled above"),
        CatalogChange::Register { name, fields } => {
            check_class(name, fields)?;
            let mut cat = Catalog::default();
            catalog::load(txn, &meta, &mut cat)?;
            let (info, new) = catalog::register(txn, &meta, &mut cat, name, fields)?;
            Ok(Outcome::Registered { info, new })
        }
        CatalogChange::AddIndex { class, field, root } => {
            check_new_index(txn, group, &meta, *class, field, *root)?;
            catalog::add_index(txn, &meta, *class, field, &BTree::at_root(*root))?;
            Ok(Outcome::Done)
        }
        CatalogChange::RemoveIndex { class, field } => {
            let indexes = catalog::indexes_of(txn, &meta, *class)?;
            let Some(&(_, root)) = indexes.iter().find(|(f, _)| f == field) else {
                return Err(refused(change, "there is no such index"));
            };
            catalog::remove_index(txn, &meta, *class, field)?;
            Ok(Outcome::Removed { root })
        }
        CatalogChange::SetRoot { name, oid } => {
            if name.is_empty() {
                return Err(refused(change, "a root's name may not be empty"));
            }
            if let Some(oid) = oid {
                // Reading it share-locks it: it exists, and stays, until
                // the transaction ends. A page client's new object is not
                // here before its commit: it may only be on a page the
                // transaction holds X on.
                if let Err(e) = txn.read_with(*oid, |_| ()) {
                    if waited(&e) {
                        return Err(e.into());
                    }
                    if !txn.check_at_commit(CommitCheck::Object(*oid)) {
                        return Err(refused(change, &format!("the object cannot be read: {e}")));
                    }
                }
            }
            catalog::set_root(txn, &meta, name, *oid)?;
            Ok(Outcome::Done)
        }
    }
}

/// An error of a wait for a lock (or of the transaction), not of what was
/// read: it stands as it is, never as a refusal of the change.
fn waited(e: &cairn_storage::Error) -> bool {
    use cairn_storage::Error as S;
    matches!(
        e,
        S::Deadlock { .. } | S::LockTimeout { .. } | S::TxnDoomed { .. } | S::PermissionDenied(_) | S::Poisoned(_)
    )
}

fn refused(change: &CatalogChange, why: &str) -> Error {
    Error::InvalidArgument(format!("catalog change refused ({}): {why}", change.describe()))
}

/// A class name that is not empty, and fields with distinct, non-empty
/// names.
fn check_class(name: &str, fields: &[FieldDesc]) -> Result<()> {
    let bad = |why: String| Error::InvalidArgument(format!("catalog change refused (register class {name:?}): {why}"));
    if name.is_empty() {
        return Err(bad("the class name is empty".into()));
    }
    let mut names: Vec<&str> = fields.iter().map(|f| f.name.as_str()).collect();
    if names.contains(&"") {
        return Err(bad("a field has no name".into()));
    }
    names.sort_unstable();
    if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
        return Err(bad(format!("field {:?} appears twice", w[0])));
    }
    Ok(())
}

/// The checks of an index about to be recorded (see the module docs).
fn check_new_index<S: StoreOps>(
    txn: &mut S,
    group: &dyn Fn(&str) -> Result<GroupId>,
    meta: &Meta,
    class: u32,
    field: &str,
    root: PageId,
) -> Result<()> {
    let change = CatalogChange::AddIndex {
        class,
        field: field.to_string(),
        root,
    };
    let mut cat = Catalog::default();
    catalog::load(txn, meta, &mut cat)?;
    let newest = cat
        .schemas
        .iter()
        .filter(|((id, _), _)| *id == class)
        .max_by_key(|((_, v), _)| *v)
        .map(|(_, fields)| fields);
    let Some(fields) = newest else {
        return Err(refused(&change, "there is no such class"));
    };
    if !fields.iter().any(|f| f.name == field) {
        return Err(refused(&change, "the class has no such field"));
    }
    let index_group = group(catalog::INDEX_GROUP)?;
    match txn.tree_open(root) {
        Ok((_, in_group)) if in_group == Some(index_group) => {}
        Ok(_) => {
            return Err(refused(
                &change,
                &format!("page {root} is not in group {}", catalog::INDEX_GROUP),
            ))
        }
        Err(e) if waited(&e) => return Err(e.into()),
        // A page client's new tree reaches the server with its commit.
        Err(_)
            if txn.check_at_commit(CommitCheck::TreeRoot {
                page: root,
                group: index_group,
            }) => {}
        Err(e) => return Err(refused(&change, &format!("page {root} is no B+-tree root: {e}"))),
    }
    let mut named = None;
    txn.tree_scan(
        &meta.indexes,
        std::ops::Bound::Unbounded,
        std::ops::Bound::Unbounded,
        |k, v| {
            if v == root.0.to_le_bytes() {
                named = Some(k.to_vec());
            }
            named.is_none()
        },
    )?;
    if let Some(k) = named {
        let same = k.get(..4) == Some(&class.to_be_bytes()[..]) && k.get(4..) == Some(field.as_bytes());
        return Err(refused(
            &change,
            if same {
                "the class has an index on the field already"
            } else {
                "another index entry names that tree"
            },
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::TypeDesc;

    fn changes() -> Vec<CatalogChange> {
        vec![
            CatalogChange::CreateMeta,
            CatalogChange::Register {
                name: "Part".into(),
                fields: vec![FieldDesc {
                    name: "id".into(),
                    ty: TypeDesc::U32,
                    has_default: false,
                }],
            },
            CatalogChange::AddIndex {
                class: 7,
                field: "id".into(),
                root: PageId(42),
            },
            CatalogChange::RemoveIndex {
                class: 7,
                field: "id".into(),
            },
            CatalogChange::SetRoot {
                name: "top".into(),
                oid: Some(Oid::from_bytes(&[1, 0, 0, 0, 2, 0, 3, 0, 0, 0])),
            },
            CatalogChange::SetRoot {
                name: "top".into(),
                oid: None,
            },
        ]
    }

    #[test]
    fn changes_round_trip_and_every_cut_or_extension_is_an_error() {
        for c in changes() {
            let b = c.encode();
            assert_eq!(CatalogChange::decode(&b).unwrap(), c);
            for cut in 0..b.len() {
                assert!(CatalogChange::decode(&b[..cut]).is_err(), "{c:?} cut at {cut}");
            }
            let mut longer = b.clone();
            longer.push(0);
            assert!(CatalogChange::decode(&longer).is_err(), "{c:?} with a byte more");
        }
        assert!(CatalogChange::decode(&[9]).is_err());
        assert!(CatalogChange::decode(&[5, 1, b'x', 2]).is_err());
    }

    #[test]
    fn class_checks_refuse_empty_and_repeated_names() {
        let f = |n: &str| FieldDesc {
            name: n.into(),
            ty: TypeDesc::U32,
            has_default: false,
        };
        assert!(check_class("A", &[f("a"), f("b")]).is_ok());
        assert!(check_class("", &[f("a")]).is_err());
        assert!(check_class("A", &[f("")]).is_err());
        let e = check_class("A", &[f("a"), f("b"), f("a")]).unwrap_err();
        assert!(e.to_string().contains("\"a\" appears twice"), "{e}");
    }

    proptest::proptest! {
        #[test]
        fn no_bytes_make_the_decoder_panic(b in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64)) {
            let _ = CatalogChange::decode(&b);
        }
    }
}
