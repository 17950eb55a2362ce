//! Server-side methods (DeWitt et al. §2.2): operations that run where the
//! objects are and answer with OIDs or a count — a **selection** over a
//! group or an index range by a predicate on fields, a **count**, and a
//! bounded **traversal** along named reference fields.
//!
//! A method names fields, not code: the predicate and the paths travel as
//! data (`Method::encode`) and are evaluated against each record through
//! the catalog's schema of the record's own version (records are decoded
//! generically, [`crate::types::decode_value`]), so no application code is
//! linked into the server. Embedded, page- and file-server databases run a
//! method in their own storage transaction; an object-server client sends
//! its transaction's changes to the server first (in the transaction's
//! private scope, not committed) and the server runs the very same code
//! (`run`) in that transaction — so a method sees its transaction's
//! uncommitted changes and, by the transaction's locks, no other
//! transaction's.
//!
//! A **path** is a field name, or names joined by `.` into nested structs;
//! it passes through sequences, sets, maps (as (key, value) pairs: `0` and
//! `1`) and options, and matches if any value it reaches does (`to.to` of an
//! OO1 part is the target of each of its connections). A selection's
//! predicates are all required (a conjunction).

use std::cmp::Ordering;
use std::ops::Bound;

use cairn_storage::{GroupId, Oid};

use crate::catalog::{self, Catalog, Meta};
use cairn_codec::{DecodeError, Reader, Writer};

use crate::error::{Error, Result};
use crate::store_ops::StoreOps;
use crate::types::{decode_value, FieldDesc, TypeDesc, Value};

/// A comparison in a [`Predicate`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cmp {
    /// `=`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
}

/// A constant a field is compared with.
#[derive(Clone, Debug, PartialEq)]
pub enum Literal {
    /// A signed integer (compares with any integer field, exactly).
    Int(i64),
    /// An unsigned integer.
    UInt(u64),
    /// A float (compares with any number).
    Float(f64),
    /// A bool.
    Bool(bool),
    /// A string.
    Str(String),
}

impl From<i64> for Literal {
    fn from(v: i64) -> Literal {
        Literal::Int(v)
    }
}

impl From<i32> for Literal {
    fn from(v: i32) -> Literal {
        Literal::Int(i64::from(v))
    }
}

impl From<u32> for Literal {
    fn from(v: u32) -> Literal {
        Literal::UInt(u64::from(v))
    }
}

impl From<u64> for Literal {
    fn from(v: u64) -> Literal {
        Literal::UInt(v)
    }
}

impl From<f64> for Literal {
    fn from(v: f64) -> Literal {
        Literal::Float(v)
    }
}

impl From<bool> for Literal {
    fn from(v: bool) -> Literal {
        Literal::Bool(v)
    }
}

impl From<&str> for Literal {
    fn from(v: &str) -> Literal {
        Literal::Str(v.to_string())
    }
}

/// `path cmp value`: one condition of a selection.
#[derive(Clone, Debug, PartialEq)]
pub struct Predicate {
    /// The field's path (see the module docs).
    pub path: String,
    /// The comparison.
    pub cmp: Cmp,
    /// The constant.
    pub value: Literal,
}

impl Predicate {
    /// `path cmp value`.
    pub fn new(path: &str, cmp: Cmp, value: impl Into<Literal>) -> Predicate {
        Predicate {
            path: path.to_string(),
            cmp,
            value: value.into(),
        }
    }
}

/// Where a selection takes its candidates from.
#[derive(Clone, Debug, PartialEq)]
pub enum Source {
    /// Every object of the class in the group.
    Group(String),
    /// The objects an index of the class lists between two encoded keys.
    Index {
        /// The indexed field.
        field: String,
        /// The lower bound, an encoded key.
        lo: Bound<Vec<u8>>,
        /// The upper bound, an encoded key.
        hi: Bound<Vec<u8>>,
    },
}

/// A method, as it travels.
#[derive(Clone, Debug, PartialEq)]
pub enum Method {
    /// The objects of `class` from `source` that satisfy every predicate
    /// (at most `limit`), or how many do (`count_only`).
    Select {
        /// The class's name.
        class: String,
        /// Where the candidates come from.
        source: Source,
        /// The predicates, all required.
        preds: Vec<Predicate>,
        /// Answer the count, not the objects.
        count_only: bool,
        /// Most objects answered.
        limit: u32,
    },
    /// The objects reachable from `start` in at most `depth` steps along
    /// `paths` (each a path to references), breadth first, each once,
    /// `start` first; at most `limit`.
    Traverse {
        /// The first object.
        start: Oid,
        /// Paths to reference fields, followed from each object reached.
        paths: Vec<String>,
        /// Most steps from `start`.
        depth: u32,
        /// Most objects answered.
        limit: u32,
    },
}

/// A method's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// The objects selected or reached, in order.
    Oids(Vec<Oid>),
    /// How many objects a counting selection found.
    Count(u64),
}

/// Most predicates or paths one method carries.
const TERMS_MAX: usize = 64;
/// Longest path, class name or literal string.
const TEXT_MAX: usize = 4096;

/// Runs `m` in a storage transaction, reading records through `cat` (a
/// catalog loaded in it, or kept current by the caller), finding groups by
/// name with `group`.
pub fn run<S: StoreOps>(
    store: &mut S,
    meta: &Meta,
    cat: &Catalog,
    group: &dyn Fn(&str) -> Result<GroupId>,
    m: &Method,
) -> Result<Answer> {
    match m {
        Method::Select {
            class,
            source,
            preds,
            count_only,
            limit,
        } => {
            let id = class_id(cat, class)?;
            check_paths(cat, id, class, preds.iter().map(|p| (&p.path[..], Some(&p.value))))?;
            let candidates = match source {
                Source::Group(name) => store.scan_all(group(name)?)?,
                Source::Index { field, lo, hi } => index_candidates(store, meta, id, class, field, lo, hi)?,
            };
            select(store, cat, id, candidates, preds, *count_only, *limit)
        }
        Method::Traverse {
            start,
            paths,
            depth,
            limit,
        } => traverse(store, cat, *start, paths, *depth, *limit),
    }
}

/// The OIDs the index of class `id` (named `class`) on `field` lists
/// between `lo` and `hi`, in key order; a value that is not an OID is
/// corruption of the index.
fn index_candidates<S: StoreOps>(
    store: &mut S,
    meta: &Meta,
    id: u32,
    class: &str,
    field: &str,
    lo: &Bound<Vec<u8>>,
    hi: &Bound<Vec<u8>>,
) -> Result<Vec<Oid>> {
    let tree = catalog::index_tree(store, meta, id, field, None)?.ok_or_else(|| Error::NoIndex {
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
fn select<S: StoreOps>(
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
fn traverse<S: StoreOps>(
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

fn class_id(cat: &Catalog, class: &str) -> Result<u32> {
    cat.names
        .iter()
        .find(|(_, n)| *n == class)
        .map(|(id, _)| *id)
        .ok_or_else(|| Error::InvalidArgument(format!("no class {class:?} in the catalog")))
}

/// Checks each path against the newest schema of class `id`: it names
/// fields that exist, and a literal compared with it has a fitting type.
fn check_paths<'a>(
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

/// A method's bytes that do not decode: the error names what is wrong.
fn malformed(e: DecodeError) -> Error {
    Error::InvalidArgument(format!("malformed method: {e}"))
}

/// A `u16` length, then at most [`TEXT_MAX`] bytes.
fn bytes16(r: &mut Reader<'_>, what: &str) -> std::result::Result<Vec<u8>, DecodeError> {
    let b = r.bytes16(what)?;
    if b.len() > TEXT_MAX {
        return Err(r.error(what, format!("is longer than {TEXT_MAX} bytes")));
    }
    Ok(b.to_vec())
}

/// [`bytes16`] as UTF-8 text.
fn text(r: &mut Reader<'_>, what: &str) -> std::result::Result<String, DecodeError> {
    String::from_utf8(bytes16(r, what)?).map_err(|_| r.error(what, "is not UTF-8"))
}

fn oid(r: &mut Reader<'_>, what: &str) -> std::result::Result<Oid, DecodeError> {
    Ok(Oid::from_exact(r.take(Oid::ENCODED_SIZE, what)?).expect("10 bytes"))
}

fn bound(r: &mut Reader<'_>) -> std::result::Result<Bound<Vec<u8>>, DecodeError> {
    Ok(match r.u8("a bound")? {
        0 => Bound::Unbounded,
        1 => Bound::Included(bytes16(r, "a key")?),
        2 => Bound::Excluded(bytes16(r, "a key")?),
        _ => return Err(r.error("a bound", "is 0, 1 or 2")),
    })
}

/// A `u16` count of at most [`TERMS_MAX`] terms.
fn terms(r: &mut Reader<'_>, what: &str) -> std::result::Result<usize, DecodeError> {
    let n = r.u16(what)? as usize;
    if n > TERMS_MAX {
        return Err(r.error(what, format!("more than {TERMS_MAX}")));
    }
    Ok(n)
}

/// A text, cut at [`TEXT_MAX`] bytes (the decoder refuses more).
fn put_text(w: &mut Writer, b: &[u8]) {
    w.put_bytes16(&b[..b.len().min(TEXT_MAX)]);
}

fn put_bound(w: &mut Writer, b: &Bound<Vec<u8>>) {
    match b {
        Bound::Unbounded => w.put_u8(0),
        Bound::Included(k) => {
            w.put_u8(1);
            put_text(w, k);
        }
        Bound::Excluded(k) => {
            w.put_u8(2);
            put_text(w, k);
        }
    }
}

impl Method {
    /// The method as it travels: `tag u8` (1 select, 2 traverse), then for
    /// a selection `count_only u8, limit u32, class text, source (1 group:
    /// text | 2 index: field text, lo bound, hi bound), count u16,
    /// (path text, cmp u8, literal) × count`; for a traversal `start oid,
    /// depth u32, limit u32, count u16, path text × count`. (`text` is `len
    /// u16, UTF-8`; a literal is `tag u8` 1 i64, 2 u64, 3 f64, 4 bool u8,
    /// 5 text.)
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        match self {
            Method::Select {
                class,
                source,
                preds,
                count_only,
                limit,
            } => {
                w.put_u8(1);
                w.put_u8(u8::from(*count_only));
                w.put_u32(*limit);
                put_text(&mut w, class.as_bytes());
                match source {
                    Source::Group(g) => {
                        w.put_u8(1);
                        put_text(&mut w, g.as_bytes());
                    }
                    Source::Index { field, lo, hi } => {
                        w.put_u8(2);
                        put_text(&mut w, field.as_bytes());
                        put_bound(&mut w, lo);
                        put_bound(&mut w, hi);
                    }
                }
                let preds = &preds[..preds.len().min(TERMS_MAX)];
                w.put_u16(preds.len() as u16);
                for p in preds {
                    put_text(&mut w, p.path.as_bytes());
                    w.put_u8(p.cmp as u8);
                    match &p.value {
                        Literal::Int(v) => {
                            w.put_u8(1);
                            w.put(&v.to_le_bytes());
                        }
                        Literal::UInt(v) => {
                            w.put_u8(2);
                            w.put(&v.to_le_bytes());
                        }
                        Literal::Float(v) => {
                            w.put_u8(3);
                            w.put(&v.to_le_bytes());
                        }
                        Literal::Bool(v) => {
                            w.put_u8(4);
                            w.put_u8(u8::from(*v));
                        }
                        Literal::Str(v) => {
                            w.put_u8(5);
                            put_text(&mut w, v.as_bytes());
                        }
                    }
                }
            }
            Method::Traverse {
                start,
                paths,
                depth,
                limit,
            } => {
                w.put_u8(2);
                w.put(&start.to_bytes());
                w.put_u32(*depth);
                w.put_u32(*limit);
                let paths = &paths[..paths.len().min(TERMS_MAX)];
                w.put_u16(paths.len() as u16);
                for p in paths {
                    put_text(&mut w, p.as_bytes());
                }
            }
        }
        w.into_bytes()
    }

    /// Decodes [`Method::encode`]'s bytes; anything else is an error naming
    /// what is wrong.
    pub fn decode(b: &[u8]) -> Result<Method> {
        let mut r = Reader::within("a method", b);
        let m = Method::read(&mut r).map_err(malformed)?;
        r.finish("its end").map_err(malformed)?;
        Ok(m)
    }

    fn read(c: &mut Reader<'_>) -> std::result::Result<Method, DecodeError> {
        Ok(match c.u8("the method tag")? {
            1 => {
                let count_only = match c.u8("the count flag")? {
                    0 => false,
                    1 => true,
                    _ => return Err(c.error("the count flag", "is 0 or 1")),
                };
                let limit = c.u32("the limit")?;
                let class = text(c, "the class name")?;
                let source = match c.u8("the source tag")? {
                    1 => Source::Group(text(c, "the group name")?),
                    2 => Source::Index {
                        field: text(c, "the index field")?,
                        lo: bound(c)?,
                        hi: bound(c)?,
                    },
                    _ => return Err(c.error("the source tag", "is 1 (group) or 2 (index)")),
                };
                let n = terms(c, "predicates")?;
                let mut preds = Vec::with_capacity(n);
                for _ in 0..n {
                    let path = text(c, "a path")?;
                    let cmp = match c.u8("a comparison")? {
                        0 => Cmp::Eq,
                        1 => Cmp::Ne,
                        2 => Cmp::Lt,
                        3 => Cmp::Le,
                        4 => Cmp::Gt,
                        5 => Cmp::Ge,
                        _ => return Err(c.error("a comparison", "is 0 to 5")),
                    };
                    let value = match c.u8("a literal tag")? {
                        1 => Literal::Int(c.u64("an i64")? as i64),
                        2 => Literal::UInt(c.u64("a u64")?),
                        3 => Literal::Float(f64::from_bits(c.u64("an f64")?)),
                        4 => Literal::Bool(match c.u8("a bool")? {
                            0 => false,
                            1 => true,
                            _ => return Err(c.error("a bool", "is 0 or 1")),
                        }),
                        5 => Literal::Str(text(c, "a string")?),
                        _ => return Err(c.error("a literal tag", "is 1 to 5")),
                    };
                    preds.push(Predicate { path, cmp, value });
                }
                Method::Select {
                    class,
                    source,
                    preds,
                    count_only,
                    limit,
                }
            }
            2 => {
                let start = oid(c, "the start")?;
                let depth = c.u32("the depth")?;
                let limit = c.u32("the limit")?;
                let n = terms(c, "paths")?;
                let paths = (0..n)
                    .map(|_| text(c, "a path"))
                    .collect::<std::result::Result<_, _>>()?;
                Method::Traverse {
                    start,
                    paths,
                    depth,
                    limit,
                }
            }
            _ => return Err(c.error("the method tag", "is 1 (select) or 2 (traverse)")),
        })
    }
}

impl Answer {
    /// `tag u8` (1 OIDs: `count u32, oid × count`; 2 count: `u64`).
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        match self {
            Answer::Oids(oids) => {
                w.put_u8(1);
                w.put_u32(oids.len() as u32);
                for o in oids {
                    w.put(&o.to_bytes());
                }
            }
            Answer::Count(n) => {
                w.put_u8(2);
                w.put_u64(*n);
            }
        }
        w.into_bytes()
    }

    /// Decodes what [`Answer::encode`] wrote.
    pub fn decode(b: &[u8]) -> Result<Answer> {
        let mut r = Reader::within("a method's answer", b);
        let a = Answer::read(&mut r).map_err(malformed)?;
        r.finish("its end").map_err(malformed)?;
        Ok(a)
    }

    fn read(c: &mut Reader<'_>) -> std::result::Result<Answer, DecodeError> {
        Ok(match c.u8("the answer tag")? {
            1 => {
                let n = c.count32("the OID count", Oid::ENCODED_SIZE)?;
                let oids = (0..n)
                    .map(|_| oid(c, "an OID"))
                    .collect::<std::result::Result<_, _>>()?;
                Answer::Oids(oids)
            }
            2 => Answer::Count(c.u64("the count")?),
            _ => return Err(c.error("the answer tag", "is 1 or 2")),
        })
    }
}

/// The server's side of a method (an object-server client's request):
/// decodes `request`, loads the catalog in `txn` and runs the method there —
/// in the client's own transaction, which holds its changes — and encodes
/// the answer. Groups are found by name with `group`.
pub fn serve(txn: &mut cairn_storage::Txn, group: &dyn Fn(&str) -> Result<GroupId>, request: &[u8]) -> Result<Vec<u8>> {
    let m = Method::decode(request)?;
    let system = group(catalog::SYSTEM_GROUP)?;
    let meta = catalog::find_meta(txn, system)?;
    let mut cat = Catalog::default();
    catalog::load(txn, &meta, &mut cat)?;
    Ok(run(txn, &meta, &cat, group, &m)?.encode())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn methods_and_answers_round_trip_and_damage_is_refused() {
        let oid = Oid::from_bytes(&[3; 10]);
        let methods = vec![
            Method::Select {
                class: "Part".into(),
                source: Source::Group("parts".into()),
                preds: vec![
                    Predicate::new("x", Cmp::Lt, 10),
                    Predicate::new("kind", Cmp::Eq, "part-type3"),
                    Predicate::new("to.length", Cmp::Ge, 2.5),
                    Predicate::new("flag", Cmp::Ne, true),
                    Predicate::new("build", Cmp::Gt, 7u64),
                ],
                count_only: false,
                limit: 100,
            },
            Method::Select {
                class: "Part".into(),
                source: Source::Index {
                    field: "id".into(),
                    lo: Bound::Included(vec![0, 1]),
                    hi: Bound::Excluded(vec![9]),
                },
                preds: vec![],
                count_only: true,
                limit: u32::MAX,
            },
            Method::Traverse {
                start: oid,
                paths: vec!["to.to".into(), "from".into()],
                depth: 7,
                limit: 5000,
            },
        ];
        for m in methods {
            let b = m.encode();
            assert_eq!(Method::decode(&b).unwrap(), m);
            for cut in 0..b.len() {
                assert!(Method::decode(&b[..cut]).is_err(), "{m:?} cut at {cut}");
            }
            let mut longer = b.clone();
            longer.push(0);
            assert!(Method::decode(&longer).is_err());
        }
        for a in [Answer::Oids(vec![oid, oid]), Answer::Oids(vec![]), Answer::Count(42)] {
            let b = a.encode();
            assert_eq!(Answer::decode(&b).unwrap(), a);
            for cut in 0..b.len() {
                assert!(Answer::decode(&b[..cut]).is_err());
            }
        }
        assert!(Method::decode(&[9]).is_err());
        let mut huge = vec![1u8];
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(Answer::decode(&huge).is_err(), "a count the bytes cannot hold");
    }
}
