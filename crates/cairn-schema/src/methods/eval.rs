//! Evaluating a method against records: the candidates a selection reads
//! (a group's objects or an index range), its predicates checked against
//! each record decoded through the catalog's schema of the record's own
//! version, the bounded traversal along reference paths, and the checks
//! that a method's paths and literals fit the class before anything runs.

use std::cmp::Ordering;
use std::ops::Bound;

use cairn_codec::Reader;
use cairn_storage::Oid;

use super::{Answer, Cmp, Literal, Predicate};
use crate::catalog::{self, Catalog, Meta};
use crate::error::{Error, Result};
use crate::store_ops::StoreOps;
use crate::types::{decode_value, FieldDesc, TypeDesc, Value};

/// The OIDs the index of class `id` (named `class`) on `field` lists
/// between `lo` and `hi`, in key order; a value that is not an OID is
/// corruption of the index.
pub(super) fn index_candidates<S: StoreOps>(
    store: &mut S,
    meta: &Meta,
    id: u32,
    class: &str,
    field: &str,
    lo: &Bound<Vec<u8>>,
    hi: &Bound<Vec<u8>>,
) -> Result<Vec<Oid>> {
    let tree = catalog::index_tree(store, meta, id, field)?.ok_or_else(|| Error::NoIndex {
        type_name: class.to_owned(),
        field: field.to_owned(),
        indexed: "those the catalog lists".into(),
    })?;
    let mut oids = Vec::new();
    let mut bad = false;
    store.tree_scan(
        &tree,
        lo.as_ref().map(|k| &k[..]),
        hi.as_ref().map(|k| &k[..]),
        |_, v| {
            match Oid::from_exact(v) {
                Some(o) => oids.push(o),
                None => bad = true,
            }
            !bad
        },
    )?;
    if bad {
        return Err(Error::Corrupt {
            page: tree.root(),
            reason: format!("index on {class}.{field} holds a malformed OID"),
        });
    }
    Ok(oids)
}

/// The `candidates` that are objects of class `id` and satisfy every
/// predicate, in order (at most `limit`), or how many do (`count_only`).
pub(super) fn select<S: StoreOps>(
    store: &mut S,
    cat: &Catalog,
    id: u32,
    candidates: Vec<Oid>,
    preds: &[Predicate],
    count_only: bool,
    limit: u32,
) -> Result<Answer> {
    let mut out = Vec::new();
    let mut n = 0u64;
    for oid in candidates {
        let Some(record) = record_of_class(store, cat, id, oid)? else {
            continue;
        };
        if preds.iter().all(|p| matches(&record, p)) {
            n += 1;
            if !count_only {
                out.push(oid);
                if out.len() >= limit as usize {
                    break;
                }
            }
        }
    }
    Ok(if count_only {
        Answer::Count(n)
    } else {
        Answer::Oids(out)
    })
}

/// The objects reachable from `start` in at most `depth` steps along
/// `paths`, breadth first, each once, `start` first; at most `limit`.
pub(super) fn traverse<S: StoreOps>(
    store: &mut S,
    cat: &Catalog,
    start: Oid,
    paths: &[String],
    depth: u32,
    limit: u32,
) -> Result<Answer> {
    let mut seen = std::collections::HashSet::new();
    let mut out = vec![start];
    seen.insert(start);
    let mut frontier = vec![start];
    for _ in 0..depth {
        let mut next = Vec::new();
        for oid in frontier {
            let bytes = store.read(oid)?;
            let record = decode_record(cat, oid, &bytes)?;
            for p in paths {
                for v in record.collect(&split(p)) {
                    if let Value::Ref(to) = v {
                        if out.len() < limit as usize && seen.insert(*to) {
                            out.push(*to);
                            next.push(*to);
                        }
                    }
                }
            }
        }
        frontier = next;
        if frontier.is_empty() || out.len() >= limit as usize {
            break;
        }
    }
    Ok(Answer::Oids(out))
}

pub(super) fn class_id(cat: &Catalog, class: &str) -> Result<u32> {
    cat.names
        .iter()
        .find(|(_, n)| *n == class)
        .map(|(id, _)| *id)
        .ok_or_else(|| Error::InvalidArgument(format!("no class {class:?} in the catalog")))
}

/// Checks each path against the newest schema of class `id`: it names
/// fields that exist, and a literal compared with it has a fitting type.
pub(super) fn check_paths<'a>(
    cat: &Catalog,
    id: u32,
    class: &str,
    paths: impl Iterator<Item = (&'a str, Option<&'a Literal>)>,
) -> Result<()> {
    let newest = (1..=u16::MAX)
        .rev()
        .find_map(|v| cat.schemas.get(&(id, v)))
        .ok_or_else(|| Error::InvalidArgument(format!("class {class:?} has no schema")))?;
    for (path, lit) in paths {
        let ty = type_at(newest, &split(path)).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "class {class} has no field {path:?} (a path of field names joined by '.')"
            ))
        })?;
        if let Some(lit) = lit {
            if !fits(ty, lit) {
                return Err(Error::InvalidArgument(format!(
                    "field {class}.{path} is {ty}: it cannot be compared with {lit:?}"
                )));
            }
        }
    }
    Ok(())
}

fn split(path: &str) -> Vec<&str> {
    path.split('.').collect()
}

/// The type a path reaches, passing through sequences, maps and options.
fn type_at<'a>(fields: &'a [FieldDesc], path: &[&str]) -> Option<&'a TypeDesc> {
    let (first, rest) = path.split_first()?;
    let f = fields.iter().find(|f| f.name == *first)?;
    descend(&f.ty, rest)
}

fn descend<'a>(ty: &'a TypeDesc, path: &[&str]) -> Option<&'a TypeDesc> {
    match ty {
        TypeDesc::Seq(t) | TypeDesc::Set(t) | TypeDesc::Option(t) => descend(t, path),
        TypeDesc::Map(k, v) => match path.split_first() {
            None => Some(ty),
            Some((&"0", rest)) => descend(k, rest),
            Some((&"1", rest)) => descend(v, rest),
            Some(_) => None,
        },
        TypeDesc::Struct(_, fields) => match path.split_first() {
            None => Some(ty),
            Some((name, rest)) => fields
                .iter()
                .find(|(n, _)| n == name)
                .and_then(|(_, t)| descend(t, rest)),
        },
        _ if path.is_empty() => Some(ty),
        _ => None,
    }
}

fn fits(ty: &TypeDesc, lit: &Literal) -> bool {
    use TypeDesc as T;
    match lit {
        Literal::Int(_) | Literal::UInt(_) | Literal::Float(_) => matches!(
            ty,
            T::U8 | T::U16 | T::U32 | T::U64 | T::I8 | T::I16 | T::I32 | T::I64 | T::F32 | T::F64
        ),
        Literal::Bool(_) => *ty == T::Bool,
        Literal::Str(_) => *ty == T::String,
    }
}

/// A record decoded through its version's schema.
struct Record<'c> {
    schema: &'c [FieldDesc],
    values: Vec<Value>,
}

impl Record<'_> {
    /// Every value `path` reaches.
    fn collect(&self, path: &[&str]) -> Vec<&Value> {
        let mut out = Vec::new();
        if let Some((first, rest)) = path.split_first() {
            if let Some(i) = self.schema.iter().position(|f| f.name == *first) {
                collect(&self.values[i], &self.schema[i].ty, rest, &mut out);
            }
        }
        out
    }
}

/// The record of `oid` if it is an object of class `id` (else `None`).
fn record_of_class<'c, S: StoreOps>(store: &mut S, cat: &'c Catalog, id: u32, oid: Oid) -> Result<Option<Record<'c>>> {
    let bytes = match store.read(oid) {
        Ok(b) => b,
        Err(cairn_storage::Error::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    if bytes.get(..4) != Some(&id.to_le_bytes()[..]) {
        return Ok(None);
    }
    decode_record(cat, oid, &bytes).map(Some)
}

fn decode_record<'c>(cat: &'c Catalog, oid: Oid, bytes: &[u8]) -> Result<Record<'c>> {
    let (Some(class), Some(version)) = (bytes.get(..4), bytes.get(4..6)) else {
        return Err(Error::Corrupt {
            page: oid.page,
            reason: format!("object {oid} is shorter than a record header"),
        });
    };
    let class = u32::from_le_bytes(class.try_into().expect("4 bytes"));
    let version = u16::from_le_bytes(version.try_into().expect("2 bytes"));
    let schema = cat.schemas.get(&(class, version)).ok_or_else(|| Error::Corrupt {
        page: oid.page,
        reason: format!("object {oid} names class {class} version {version}, which the catalog does not have"),
    })?;
    let mut r = Reader::new(&bytes[6..]);
    let mut values = Vec::with_capacity(schema.len());
    for f in schema {
        values.push(decode_value(&f.ty, &mut r).map_err(|source| Error::Decode { oid, source })?);
    }
    Ok(Record { schema, values })
}

/// Every value `path` reaches from `v`, of type `ty`.
fn collect<'a>(v: &'a Value, ty: &TypeDesc, path: &[&str], out: &mut Vec<&'a Value>) {
    match (ty, v) {
        (TypeDesc::Seq(t) | TypeDesc::Set(t), Value::Seq(items)) => {
            for x in items {
                collect(x, t, path, out);
            }
        }
        (TypeDesc::Map(k, val), Value::Seq(pairs)) => {
            let (pick, t) = match path.split_first() {
                Some((&"0", _)) => (0, k),
                Some((&"1", _)) => (1, val),
                _ => return,
            };
            for p in pairs {
                if let Value::Seq(kv) = p {
                    if let Some(x) = kv.get(pick) {
                        collect(x, t, &path[1..], out);
                    }
                }
            }
        }
        (TypeDesc::Option(t), Value::Opt(Some(x))) => collect(x, t, path, out),
        (TypeDesc::Struct(_, fields), Value::Struct(vals)) => match path.split_first() {
            None => out.push(v),
            Some((name, rest)) => {
                if let (Some((_, t)), Some((_, x))) = (
                    fields.iter().find(|(n, _)| n == name),
                    vals.iter().find(|(n, _)| n == name),
                ) {
                    collect(x, t, rest, out);
                }
            }
        },
        _ if path.is_empty() => out.push(v),
        _ => {}
    }
}

fn matches(record: &Record<'_>, p: &Predicate) -> bool {
    record.collect(&split(&p.path)).into_iter().any(|v| {
        compare(v, &p.value).is_some_and(|o| match p.cmp {
            Cmp::Eq => o == Ordering::Equal,
            Cmp::Ne => o != Ordering::Equal,
            Cmp::Lt => o == Ordering::Less,
            Cmp::Le => o != Ordering::Greater,
            Cmp::Gt => o == Ordering::Greater,
            Cmp::Ge => o != Ordering::Less,
        })
    })
}

/// `v` against the literal; `None` for different kinds (or NaN).
fn compare(v: &Value, lit: &Literal) -> Option<Ordering> {
    let int = |v: &Value| match v {
        Value::U(x) => Some(i128::from(*x)),
        Value::I(x) => Some(i128::from(*x)),
        _ => None,
    };
    match lit {
        Literal::Int(b) => match v {
            Value::F(a) => a.partial_cmp(&(*b as f64)),
            _ => int(v).map(|a| a.cmp(&i128::from(*b))),
        },
        Literal::UInt(b) => match v {
            Value::F(a) => a.partial_cmp(&(*b as f64)),
            _ => int(v).map(|a| a.cmp(&i128::from(*b))),
        },
        Literal::Float(b) => match v {
            Value::F(a) => a.partial_cmp(b),
            _ => int(v).and_then(|a| (a as f64).partial_cmp(b)),
        },
        Literal::Bool(b) => match v {
            Value::U(a) => Some(a.cmp(&u64::from(*b))),
            _ => None,
        },
        Literal::Str(b) => match v {
            Value::Str(a) => Some(a.as_str().cmp(b.as_str())),
            _ => None,
        },
    }
}
