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

use std::ops::Bound;

use cairn_storage::{GroupId, Oid};

use crate::catalog::{self, Catalog, Meta};

use crate::error::Result;
use crate::store_ops::StoreOps;

mod eval;
mod wire;

use eval::{check_paths, class_id, index_candidates, select, traverse};

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
