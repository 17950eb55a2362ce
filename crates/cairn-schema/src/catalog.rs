//! The schema catalog, named roots and index directory.
//!
//! All three live in B+-trees whose root pages are named by the *meta
//! object*, the first object of the group `cairn.system`:
//!
//! ```text
//!  meta object: "CAIRNMT1" | roots tree u32 | classes tree u32 | indexes tree u32
//!  roots tree   (unique): root name (UTF-8)                       → OID (10 bytes)
//!  classes tree (unique): "n" + type name                         → class id u32 | latest version u16
//!                         "s" + class id (BE u32) + version (BE u16) → schema (fields)
//!                         "c"                                     → next class id u32
//!  indexes tree (unique): class id (BE u32) + field name           → index tree root page u32
//! ```
//!
//! A schema is a field count (LEB128), then per field: name (LEB128 length +
//! UTF-8), `has_default` (u8), and its type descriptor (a tag byte, then the
//! element, key/value or struct-field descriptors; nesting is limited).
//!
//! Classes are registered on first use in a session, in a transaction of
//! their own (so user transactions never hold locks on the classes tree): a
//! new type gets the next class id and version 1 (running out of class ids
//! is `LimitExceeded`, never a wrap onto class 0); a type whose fields
//! changed gets a new version if every change is an added field with
//! `#[cairn(default)]`, and `SchemaMismatch` naming the field otherwise.
//!
//! The same transaction makes the indexes tree agree with the type's
//! `#[cairn(index)]` fields (`Persistent::INDEXED_FIELDS`; see
//! `database/classes.rs`): a new class gets an empty tree per indexed field, a field
//! newly marked gets a tree built from the existing objects of the class,
//! and the tree of a field no longer marked is freed and its entry removed.
//! So an index is never stale, whichever definitions opened the database
//! before, and registering is atomic with it.

use std::collections::HashMap;

use cairn_storage::btree::BTree;
use cairn_storage::{GroupId, Oid, PageId};

use crate::store_ops::{StoreOps, TreeOp};

use cairn_codec::{DecodeError, Reader, Writer};

use crate::error::{Error, Result};
use crate::types::{FieldDesc, TypeDesc};

/// The group holding the meta object and the catalog trees.
pub const SYSTEM_GROUP: &str = "cairn.system";
/// The group holding index trees.
pub const INDEX_GROUP: &str = "cairn.index";
const META_MAGIC: &[u8; 8] = b"CAIRNMT1";
const TYPE_DEPTH_MAX: usize = 32;

/// The catalog trees, by root page.
#[derive(Clone, Copy, Debug)]
pub struct Meta {
    /// Root name → OID.
    pub roots: BTree,
    /// Type name → class id and latest version; the schemas by version.
    pub classes: BTree,
    /// (class id, field) → the index tree's root page.
    pub indexes: BTree,
}

/// A registered class, as this session uses it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClassInfo {
    /// The class id (the first field of each of its records).
    pub id: u32,
    /// The schema version this program's type has (the newest, or an older
    /// one when a newer program has evolved the class since).
    pub version: u16,
    /// True if `version` is the class's newest: this program's type then
    /// decides the class's indexes ([`register`]).
    pub latest: bool,
    /// False for an older version whose type does not mark exactly the
    /// indexes the catalog keeps: it could not keep them right, so it may
    /// read the class's objects but not create, change or delete them.
    pub writable: bool,
}

/// The key of the catalog's epoch in the classes tree.
const EPOCH_KEY: &[u8] = b"e";

/// What the catalog knows, in memory.
///
/// `epoch` is the catalog's change counter this copy was read at: every
/// change to the classes or the index directory adds one in the changing
/// transaction (`bump_epoch`). A session's copy is good while the stored
/// epoch is the same; a transaction reads the stored epoch before it first
/// relies on the copy, and keeps the epoch share-locked until it ends, so no
/// other client can change the catalog under it (the typed layer's
/// `database` module).
#[derive(Clone, Debug, Default)]
pub struct Catalog {
    /// The stored epoch this copy was read at.
    pub epoch: u64,
    /// Type name → registered class (this session's version).
    pub registered: HashMap<String, ClassInfo>,
    /// Class id → name.
    pub names: HashMap<u32, String>,
    /// (class id, version) → fields.
    pub schemas: HashMap<(u32, u16), Vec<FieldDesc>>,
}

fn stored(e: cairn_storage::Error) -> Error {
    Error::from(e)
}

fn corrupt_catalog(reason: impl Into<String>) -> Error {
    Error::Corrupt {
        page: PageId(0),
        reason: format!("catalog: {}", reason.into()),
    }
}

/// Finds the meta object and its trees; an error if there is none (a
/// database no typed client has opened yet).
pub fn find_meta<S: StoreOps>(txn: &mut S, system: GroupId) -> Result<Meta> {
    read_meta(txn, system)?.ok_or_else(|| corrupt_catalog("there is no meta object in the system group"))
}

/// The meta object's trees, if the group `system` has a meta object.
pub fn read_meta<S: StoreOps>(txn: &mut S, system: GroupId) -> Result<Option<Meta>> {
    let objs = txn.scan_all(system).map_err(stored)?;
    let Some(&first) = objs.first() else {
        return Ok(None);
    };
    let b = txn.read(first).map_err(stored)?;
    if b.len() != 20 || &b[..8] != META_MAGIC {
        return Err(corrupt_catalog(format!("object {first} is not the meta object")));
    }
    let page = |i: usize| PageId(u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes")));
    Ok(Some(Meta {
        roots: txn.tree_open(page(8)).map_err(stored)?.0,
        classes: txn.tree_open(page(12)).map_err(stored)?.0,
        indexes: txn.tree_open(page(16)).map_err(stored)?.0,
    }))
}

/// Finds or creates the meta object and its trees (a catalog change:
/// [`crate::catalog_change`] runs it where the catalog is kept).
pub fn open_meta<S: StoreOps>(txn: &mut S, system: GroupId) -> Result<Meta> {
    if let Some(meta) = read_meta(txn, system)? {
        return Ok(meta);
    }
    let roots = txn.tree_create(system, true).map_err(stored)?;
    let classes = txn.tree_create(system, true).map_err(stored)?;
    let indexes = txn.tree_create(system, true).map_err(stored)?;
    let mut b = META_MAGIC.to_vec();
    for t in [roots, classes, indexes] {
        b.extend_from_slice(&t.root().0.to_le_bytes());
    }
    txn.create(system, &b).map_err(stored)?;
    Ok(Meta {
        roots,
        classes,
        indexes,
    })
}

fn class_key(name: &str) -> Vec<u8> {
    let mut k = b"n".to_vec();
    k.extend_from_slice(name.as_bytes());
    k
}

fn schema_key(id: u32, version: u16) -> Vec<u8> {
    let mut k = b"s".to_vec();
    k.extend_from_slice(&id.to_be_bytes());
    k.extend_from_slice(&version.to_be_bytes());
    k
}

/// The catalog's epoch as stored (0 in a catalog never changed since the
/// epoch was introduced). Reading it share-locks its page until `txn` ends.
pub fn epoch<S: StoreOps>(txn: &mut S, meta: &Meta) -> Result<u64> {
    match txn.tree_get(&meta.classes, EPOCH_KEY).map_err(stored)? {
        None => Ok(0),
        Some(v) => v
            .get(..)
            .and_then(|b| <[u8; 8]>::try_from(b).ok())
            .map(u64::from_le_bytes)
            .ok_or_else(|| corrupt_catalog(format!("the catalog epoch has {} bytes, not 8", v.len()))),
    }
}

/// Adds one to the stored epoch: every change to the classes or the index
/// directory calls this in its transaction, so other sessions reload.
fn bump_epoch<S: StoreOps>(txn: &mut S, meta: &Meta) -> Result<()> {
    let e = epoch(txn, meta)?;
    let next = e
        .checked_add(1)
        .ok_or_else(|| corrupt_catalog("the catalog epoch is at its maximum"))?;
    put(txn, &meta.classes, EPOCH_KEY, &next.to_le_bytes())
}

/// Loads every class and schema version into memory, with the epoch they
/// were read at.
pub fn load<S: StoreOps>(txn: &mut S, meta: &Meta, cat: &mut Catalog) -> Result<()> {
    cat.epoch = epoch(txn, meta)?;
    use std::ops::Bound;
    let mut entries = Vec::new();
    txn.tree_scan(&meta.classes, Bound::Unbounded, Bound::Unbounded, |k, v| {
        entries.push((k.to_vec(), v.to_vec()));
        true
    })
    .map_err(stored)?;
    for (k, v) in entries {
        match k.first() {
            Some(b'n') => {
                let name =
                    String::from_utf8(k[1..].to_vec()).map_err(|_| corrupt_catalog("a class name is not UTF-8"))?;
                if v.len() != 6 {
                    return Err(corrupt_catalog(format!("class entry of {name} has {} bytes", v.len())));
                }
                let id = u32::from_le_bytes(v[..4].try_into().expect("4"));
                cat.names.insert(id, name);
            }
            Some(b's') if k.len() == 7 => {
                let id = u32::from_be_bytes(k[1..5].try_into().expect("4"));
                let ver = u16::from_be_bytes(k[5..7].try_into().expect("2"));
                let fields = decode_schema(&v).map_err(|e| corrupt_catalog(e.to_string()))?;
                cat.schemas.insert((id, ver), fields);
            }
            Some(b'c') => {}
            _ if k == EPOCH_KEY => {}
            _ => return Err(corrupt_catalog("unknown key in the classes tree")),
        }
    }
    Ok(())
}

/// Registers type `name` with `fields` in `txn`, applying the evolution
/// rules. Also says whether the class is new (so no object of it exists
/// yet).
///
/// A type of the same shape as the class's newest version uses it; one of
/// the shape of an older version uses that one (a program that has not
/// caught up with a newer one reads and writes the version it knows, and the
/// newer one reads those records with defaults); any other shape must be an
/// allowed evolution of the newest and becomes the next version. Writes only
/// to register something new, and then adds one to the epoch. (A catalog
/// change: a client finds what it can with [`find_registered`] and sends
/// the rest, [`crate::catalog_change`].)
pub fn register<S: StoreOps>(
    txn: &mut S,
    meta: &Meta,
    cat: &mut Catalog,
    name: &str,
    fields: &[FieldDesc],
) -> Result<(ClassInfo, bool)> {
    if let Some(info) = find_registered(txn, meta, cat, name, fields)? {
        return Ok((info, false));
    }
    let classes = meta.classes;
    let (id, version, new) = match class_entry(txn, meta, name)? {
        None => {
            let next = match txn.tree_get(&classes, b"c").map_err(stored)? {
                Some(v) if v.len() == 4 => u32::from_le_bytes(v[..4].try_into().expect("4")),
                Some(_) => return Err(corrupt_catalog("the class counter is malformed")),
                None => 1,
            };
            let after = next.checked_add(1).ok_or_else(|| class_ids_exhausted(next))?;
            put(txn, &classes, b"c", &after.to_le_bytes())?;
            (next, 1, true)
        }
        Some((id, latest)) => {
            let version = latest
                .checked_add(1)
                .ok_or_else(|| Error::InvalidArgument(format!("type {name} has run out of schema versions")))?;
            (id, version, false)
        }
    };
    let mut v = id.to_le_bytes().to_vec();
    v.extend_from_slice(&version.to_le_bytes());
    put(txn, &classes, &class_key(name), &v)?;
    put(txn, &classes, &schema_key(id, version), &encode_schema(fields))?;
    bump_epoch(txn, meta)?;
    cat.names.insert(id, name.to_string());
    cat.schemas.insert((id, version), fields.to_vec());
    let info = ClassInfo {
        id,
        version,
        latest: true,
        writable: true,
    };
    Ok((info, new))
}

/// The class entry of type `name`: its id and newest version.
fn class_entry<S: StoreOps>(txn: &mut S, meta: &Meta, name: &str) -> Result<Option<(u32, u16)>> {
    match txn.tree_get(&meta.classes, &class_key(name)).map_err(stored)? {
        None => Ok(None),
        Some(v) if v.len() == 6 => Ok(Some((
            u32::from_le_bytes(v[..4].try_into().expect("4")),
            u16::from_le_bytes(v[4..6].try_into().expect("2")),
        ))),
        Some(v) => Err(corrupt_catalog(format!("class entry of {name} has {} bytes", v.len()))),
    }
}

/// The registered class a type of `name` and `fields` uses, if registering
/// it needs no write (see [`register`]): `None` for a new class or a new
/// version, which must then be registered; an error if its fields are no
/// allowed evolution of the class's newest version. Reads only.
pub fn find_registered<S: StoreOps>(
    txn: &mut S,
    meta: &Meta,
    cat: &Catalog,
    name: &str,
    fields: &[FieldDesc],
) -> Result<Option<ClassInfo>> {
    let Some((id, latest)) = class_entry(txn, meta, name)? else {
        return Ok(None);
    };
    let stored_fields = match cat.schemas.get(&(id, latest)) {
        Some(f) => f.clone(),
        None => {
            let b = txn
                .tree_get(&meta.classes, &schema_key(id, latest))
                .map_err(stored)?
                .ok_or_else(|| corrupt_catalog(format!("schema {latest} of {name} is missing")))?;
            decode_schema(&b).map_err(|e| corrupt_catalog(e.to_string()))?
        }
    };
    let known = |version, latest| ClassInfo {
        id,
        version,
        latest,
        writable: true,
    };
    if same_shape(&stored_fields, fields) {
        return Ok(Some(known(latest, true)));
    }
    if let Some(older) = (1..latest)
        .rev()
        .find(|v| cat.schemas.get(&(id, *v)).is_some_and(|f| same_shape(f, fields)))
    {
        return Ok(Some(known(older, false)));
    }
    check_evolution(name, &stored_fields, fields)?;
    Ok(None)
}

/// The error for a class counter that cannot move on: every class id is used.
fn class_ids_exhausted(next: u32) -> Error {
    Error::Storage(cairn_storage::Error::LimitExceeded {
        what: "class ids in the catalog",
        value: u64::from(next) + 1,
        limit: u64::from(u32::MAX),
    })
}

fn same_shape(a: &[FieldDesc], b: &[FieldDesc]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.name == y.name && x.ty == y.ty)
}

/// The evolution rules: every stored field must still exist with the same
/// type; new fields must have a default.
fn check_evolution(name: &str, old: &[FieldDesc], new: &[FieldDesc]) -> Result<()> {
    for o in old {
        match new.iter().find(|n| n.name == o.name) {
            None => {
                return Err(Error::SchemaMismatch {
                    type_name: name.into(),
                    field: o.name.clone(),
                    reason: "the field was removed (removing a field needs a migration)".into(),
                })
            }
            Some(n) if n.ty != o.ty => {
                return Err(Error::SchemaMismatch {
                    type_name: name.into(),
                    field: o.name.clone(),
                    reason: format!(
                        "the field's type changed from {:?} to {:?} (needs a migration)",
                        o.ty, n.ty
                    ),
                })
            }
            Some(_) => {}
        }
    }
    for n in new {
        if !old.iter().any(|o| o.name == n.name) && !n.has_default {
            return Err(Error::SchemaMismatch {
                type_name: name.into(),
                field: n.name.clone(),
                reason: "a new field needs #[cairn(default)] so that older records can be read".into(),
            });
        }
    }
    Ok(())
}

fn put<S: StoreOps>(txn: &mut S, tree: &BTree, key: &[u8], value: &[u8]) -> Result<()> {
    let ops = vec![
        TreeOp::Delete {
            key: key.to_vec(),
            value: None,
        },
        TreeOp::Insert {
            key: key.to_vec(),
            value: value.to_vec(),
        },
    ];
    txn.tree_apply(tree, ops, &mut Vec::new()).map_err(stored)
}

fn index_key(class: u32, field: &str) -> Vec<u8> {
    let mut key = class.to_be_bytes().to_vec();
    key.extend_from_slice(field.as_bytes());
    key
}

/// The indexes of class `class` the catalog records: (field, root page), in
/// field-name order.
pub fn indexes_of<S: StoreOps>(txn: &mut S, meta: &Meta, class: u32) -> Result<Vec<(String, PageId)>> {
    use std::ops::Bound;
    let prefix = class.to_be_bytes();
    let mut entries = Vec::new();
    txn.tree_scan(&meta.indexes, Bound::Included(&prefix[..]), Bound::Unbounded, |k, v| {
        let mine = k.starts_with(&prefix);
        if mine {
            entries.push((k.to_vec(), v.to_vec()));
        }
        mine
    })
    .map_err(stored)?;
    let mut out = Vec::new();
    for (k, v) in entries {
        let field = String::from_utf8(k[4..].to_vec())
            .map_err(|_| corrupt_catalog(format!("an index field name of class {class} is not UTF-8")))?;
        let root: [u8; 4] = v[..]
            .try_into()
            .map_err(|_| corrupt_catalog(format!("index entry for {field} has {} bytes", v.len())))?;
        out.push((field, PageId(u32::from_le_bytes(root))));
    }
    Ok(out)
}

/// Records `tree` as the index of (class, field).
pub fn add_index<S: StoreOps>(txn: &mut S, meta: &Meta, class: u32, field: &str, tree: &BTree) -> Result<()> {
    put(
        txn,
        &meta.indexes,
        &index_key(class, field),
        &tree.root().0.to_le_bytes(),
    )?;
    bump_epoch(txn, meta)
}

/// Forgets the index of (class, field); the caller frees its tree.
pub fn remove_index<S: StoreOps>(txn: &mut S, meta: &Meta, class: u32, field: &str) -> Result<()> {
    let ops = vec![TreeOp::Delete {
        key: index_key(class, field),
        value: None,
    }];
    txn.tree_apply(&meta.indexes, ops, &mut Vec::new()).map_err(stored)?;
    bump_epoch(txn, meta)
}

/// The index tree of (class, field), if the class has one.
pub fn index_tree<S: StoreOps>(txn: &mut S, meta: &Meta, class: u32, field: &str) -> Result<Option<BTree>> {
    let key = index_key(class, field);
    let Some(v) = txn.tree_get(&meta.indexes, &key).map_err(stored)? else {
        return Ok(None);
    };
    if v.len() != 4 {
        return Err(corrupt_catalog(format!(
            "index entry for {field} has {} bytes",
            v.len()
        )));
    }
    let root = PageId(u32::from_le_bytes(v[..4].try_into().expect("4")));
    Ok(Some(txn.tree_open(root).map_err(stored)?.0))
}

/// Reads a named root.
pub fn get_root<S: StoreOps>(txn: &mut S, meta: &Meta, name: &str) -> Result<Option<Oid>> {
    match txn.tree_get(&meta.roots, name.as_bytes()).map_err(stored)? {
        None => Ok(None),
        Some(v) => Oid::from_exact(&v)
            .map(Some)
            .ok_or_else(|| corrupt_catalog(format!("root {name:?} is malformed"))),
    }
}

/// Sets (or, with `None`, removes) a named root.
pub fn set_root<S: StoreOps>(txn: &mut S, meta: &Meta, name: &str, oid: Option<Oid>) -> Result<()> {
    let mut ops = vec![TreeOp::Delete {
        key: name.as_bytes().to_vec(),
        value: None,
    }];
    if let Some(oid) = oid {
        ops.push(TreeOp::Insert {
            key: name.as_bytes().to_vec(),
            value: oid.to_bytes().to_vec(),
        });
    }
    txn.tree_apply(&meta.roots, ops, &mut Vec::new()).map_err(stored)
}

fn encode_type(t: &TypeDesc, w: &mut Writer) {
    let put_str = |w: &mut Writer, s: &str| {
        w.put_len(s.len() as u64);
        w.put(s.as_bytes());
    };
    match t {
        TypeDesc::Bool => w.put(&[1]),
        TypeDesc::U8 => w.put(&[2]),
        TypeDesc::U16 => w.put(&[3]),
        TypeDesc::U32 => w.put(&[4]),
        TypeDesc::U64 => w.put(&[5]),
        TypeDesc::I8 => w.put(&[6]),
        TypeDesc::I16 => w.put(&[7]),
        TypeDesc::I32 => w.put(&[8]),
        TypeDesc::I64 => w.put(&[9]),
        TypeDesc::F32 => w.put(&[10]),
        TypeDesc::F64 => w.put(&[11]),
        TypeDesc::String => w.put(&[12]),
        TypeDesc::Seq(e) => {
            w.put(&[13]);
            encode_type(e, w);
        }
        TypeDesc::Set(e) => {
            w.put(&[14]);
            encode_type(e, w);
        }
        TypeDesc::Map(k, v) => {
            w.put(&[15]);
            encode_type(k, w);
            encode_type(v, w);
        }
        TypeDesc::Option(e) => {
            w.put(&[16]);
            encode_type(e, w);
        }
        TypeDesc::Struct(name, fields) => {
            w.put(&[17]);
            put_str(w, name);
            w.put_len(fields.len() as u64);
            for (n, t) in fields {
                put_str(w, n);
                encode_type(t, w);
            }
        }
        TypeDesc::Ref(name) => {
            w.put(&[18]);
            put_str(w, name);
        }
    }
}

fn decode_str(r: &mut Reader<'_>) -> Result<String, DecodeError> {
    decode_text(r, "name")
}

/// A LEB128 length and that many bytes (`what`: for errors).
pub(crate) fn decode_len_bytes<'a>(r: &mut Reader<'a>, what: &str) -> Result<&'a [u8], DecodeError> {
    let n = r.get_count(what, 1)?;
    r.take(n, what)
}

/// [`decode_len_bytes`] holding UTF-8.
pub(crate) fn decode_text(r: &mut Reader<'_>, what: &str) -> Result<String, DecodeError> {
    let b = decode_len_bytes(r, what)?;
    String::from_utf8(b.to_vec()).map_err(|_| r.error(what, "not UTF-8"))
}

fn decode_type(r: &mut Reader<'_>, depth: usize) -> Result<TypeDesc, DecodeError> {
    if depth > TYPE_DEPTH_MAX {
        return Err(r.error("type", "nested too deeply"));
    }
    let tag = r.take(1, "type tag")?[0];
    Ok(match tag {
        1 => TypeDesc::Bool,
        2 => TypeDesc::U8,
        3 => TypeDesc::U16,
        4 => TypeDesc::U32,
        5 => TypeDesc::U64,
        6 => TypeDesc::I8,
        7 => TypeDesc::I16,
        8 => TypeDesc::I32,
        9 => TypeDesc::I64,
        10 => TypeDesc::F32,
        11 => TypeDesc::F64,
        12 => TypeDesc::String,
        13 => TypeDesc::Seq(Box::new(decode_type(r, depth + 1)?)),
        14 => TypeDesc::Set(Box::new(decode_type(r, depth + 1)?)),
        15 => TypeDesc::Map(
            Box::new(decode_type(r, depth + 1)?),
            Box::new(decode_type(r, depth + 1)?),
        ),
        16 => TypeDesc::Option(Box::new(decode_type(r, depth + 1)?)),
        17 => {
            let name = decode_str(r)?;
            let n = r.get_count("struct fields", 2)?;
            let mut fields = Vec::with_capacity(n);
            for _ in 0..n {
                let f = decode_str(r)?;
                fields.push((f, decode_type(r, depth + 1)?));
            }
            TypeDesc::Struct(name, fields)
        }
        18 => TypeDesc::Ref(decode_str(r)?),
        other => return Err(r.error("type tag", format!("unknown tag {other}"))),
    })
}

/// Encodes a type descriptor as a schema stores it (an object client's
/// append names its elements' type so).
pub fn encode_type_desc(t: &TypeDesc) -> Vec<u8> {
    let mut w = Writer::new();
    encode_type(t, &mut w);
    w.into_bytes()
}

/// Decodes a type descriptor [`encode_type_desc`] encoded: all of `b`,
/// nothing left over.
pub fn decode_type_desc(b: &[u8]) -> Result<TypeDesc, DecodeError> {
    let mut r = Reader::within("type descriptor", b);
    let t = decode_type(&mut r, 0)?;
    r.finish("type descriptor")?;
    Ok(t)
}

/// Encodes a schema (field list).
pub fn encode_schema(fields: &[FieldDesc]) -> Vec<u8> {
    let mut w = Writer::new();
    w.put_len(fields.len() as u64);
    for f in fields {
        w.put_len(f.name.len() as u64);
        w.put(f.name.as_bytes());
        w.put(&[u8::from(f.has_default)]);
        encode_type(&f.ty, &mut w);
    }
    w.into_bytes()
}

/// Decodes a schema.
pub fn decode_schema(b: &[u8]) -> Result<Vec<FieldDesc>, DecodeError> {
    let mut r = Reader::new(b);
    let n = r.get_count("schema", 3)?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let name = decode_str(&mut r)?;
        let has_default = match r.take(1, "default flag")?[0] {
            0 => false,
            1 => true,
            other => return Err(r.error("default flag", format!("{other} is neither 0 nor 1"))),
        };
        out.push(FieldDesc {
            name,
            ty: decode_type(&mut r, 0)?,
            has_default,
        });
    }
    r.finish("schema")?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemas_round_trip_and_damage_is_an_error() {
        let fields = vec![
            FieldDesc {
                name: "id".into(),
                ty: TypeDesc::U32,
                has_default: false,
            },
            FieldDesc {
                name: "to".into(),
                ty: TypeDesc::Seq(Box::new(TypeDesc::Struct(
                    "Connection".into(),
                    vec![
                        ("to".into(), TypeDesc::Ref("Part".into())),
                        ("length".into(), TypeDesc::I32),
                    ],
                ))),
                has_default: false,
            },
            FieldDesc {
                name: "m".into(),
                ty: TypeDesc::Map(
                    Box::new(TypeDesc::String),
                    Box::new(TypeDesc::Option(Box::new(TypeDesc::F64))),
                ),
                has_default: true,
            },
        ];
        let b = encode_schema(&fields);
        assert_eq!(decode_schema(&b).unwrap(), fields);
        for cut in 0..b.len() {
            assert!(decode_schema(&b[..cut]).is_err());
        }
        let mut deep = vec![1u8];
        deep.extend(std::iter::repeat_n(13u8, 100));
        assert!(decode_schema(&[&[1, 1, b'x', 0][..], &deep[1..]].concat()).is_err());
    }

    /// A new database with the system group, a transaction and the meta
    /// object's trees in it.
    fn scratch() -> (tempfile::TempDir, cairn_storage::Db, GroupId, cairn_storage::Txn, Meta) {
        let dir = tempfile::tempdir().unwrap();
        let opts = cairn_storage::DbOptions {
            background: false,
            ..cairn_storage::DbOptions::default()
        };
        let db = cairn_storage::Db::create(&dir.path().join("db"), &opts).unwrap();
        let system = db.create_group(SYSTEM_GROUP).unwrap();
        let mut txn = db.begin().unwrap();
        let meta = open_meta(&mut txn, system).unwrap();
        (dir, db, system, txn, meta)
    }

    /// A class counter at `u32::MAX` cannot move on: registering another
    /// class is `LimitExceeded`, and nothing wraps to class id 0.
    #[test]
    fn class_counter_overflow_is_an_error() {
        let (_dir, _db, _, mut txn, meta) = scratch();
        let mut cat = Catalog::default();
        let fields = vec![FieldDesc {
            name: "a".into(),
            ty: TypeDesc::U32,
            has_default: false,
        }];
        let (first, new) = register(&mut txn, &meta, &mut cat, "First", &fields).unwrap();
        assert_eq!((first.id, new), (1, true));
        put(&mut txn, &meta.classes, b"c", &(u32::MAX - 1).to_le_bytes()).unwrap();
        let (last, _) = register(&mut txn, &meta, &mut cat, "Last", &fields).unwrap();
        assert_eq!(last.id, u32::MAX - 1);
        let e = register(&mut txn, &meta, &mut cat, "OneTooMany", &fields).unwrap_err();
        assert!(
            matches!(
                e,
                Error::Storage(cairn_storage::Error::LimitExceeded {
                    what: "class ids in the catalog",
                    ..
                })
            ),
            "{e}"
        );
        // Known classes still register.
        let (again, new) = register(&mut txn, &meta, &mut cat, "First", &fields).unwrap();
        assert_eq!((again.id, new), (1, false));
        txn.abort().unwrap();
    }

    /// The epoch moves with every change to classes or indexes and with
    /// nothing else; a type of an older version's shape gets that version.
    #[test]
    fn the_epoch_counts_changes_and_an_older_shape_keeps_its_version() {
        let (_dir, _db, system, mut txn, meta) = scratch();
        let mut cat = Catalog::default();
        let f = |n: &str, d: bool| FieldDesc {
            name: n.into(),
            ty: TypeDesc::U32,
            has_default: d,
        };
        let v1 = vec![f("a", false)];
        let v2 = vec![f("a", false), f("b", true)];
        assert_eq!(epoch(&mut txn, &meta).unwrap(), 0);
        let (c, _) = register(&mut txn, &meta, &mut cat, "T", &v1).unwrap();
        assert_eq!((c.version, c.latest, epoch(&mut txn, &meta).unwrap()), (1, true, 1));
        let (c, _) = register(&mut txn, &meta, &mut cat, "T", &v1).unwrap();
        assert_eq!(
            (c.version, epoch(&mut txn, &meta).unwrap()),
            (1, 1),
            "nothing new: no change"
        );
        let (c, _) = register(&mut txn, &meta, &mut cat, "T", &v2).unwrap();
        assert_eq!((c.version, c.latest, epoch(&mut txn, &meta).unwrap()), (2, true, 2));
        let (c, _) = register(&mut txn, &meta, &mut cat, "T", &v1).unwrap();
        assert_eq!(
            (c.version, c.latest, epoch(&mut txn, &meta).unwrap()),
            (1, false, 2),
            "an older program keeps its version and changes nothing"
        );
        let tree = txn.tree_create(system, false).unwrap();
        add_index(&mut txn, &meta, c.id, "a", &tree).unwrap();
        remove_index(&mut txn, &meta, c.id, "a").unwrap();
        assert_eq!(epoch(&mut txn, &meta).unwrap(), 4);
        let mut loaded = Catalog::default();
        load(&mut txn, &meta, &mut loaded).unwrap();
        assert_eq!((loaded.epoch, loaded.schemas.len()), (4, 2));
        txn.abort().unwrap();
    }

    #[test]
    fn evolution_rules() {
        let f = |n: &str, t: TypeDesc, d: bool| FieldDesc {
            name: n.into(),
            ty: t,
            has_default: d,
        };
        let v1 = vec![f("a", TypeDesc::U32, false), f("b", TypeDesc::String, false)];
        let added = vec![
            f("a", TypeDesc::U32, false),
            f("b", TypeDesc::String, false),
            f("c", TypeDesc::I64, true),
        ];
        assert!(check_evolution("T", &v1, &added).is_ok());
        let no_default = vec![
            f("a", TypeDesc::U32, false),
            f("b", TypeDesc::String, false),
            f("c", TypeDesc::I64, false),
        ];
        let e = check_evolution("T", &v1, &no_default).unwrap_err();
        assert!(
            matches!(e, Error::SchemaMismatch { ref field, .. } if field == "c"),
            "{e}"
        );
        let removed = vec![f("a", TypeDesc::U32, false)];
        let e = check_evolution("T", &v1, &removed).unwrap_err();
        assert!(
            matches!(e, Error::SchemaMismatch { ref field, .. } if field == "b"),
            "{e}"
        );
        let retyped = vec![f("a", TypeDesc::U64, false), f("b", TypeDesc::String, false)];
        let e = check_evolution("T", &v1, &retyped).unwrap_err();
        assert!(
            matches!(e, Error::SchemaMismatch { ref field, .. } if field == "a"),
            "{e}"
        );
    }
}
