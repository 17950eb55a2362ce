//! Cairn: typed persistent objects in a transactional object database.
//!
//! ```ignore
//! #[derive(cairn::Persistent)]
//! struct Part { id: u32, x: i32, to: cairn::List<cairn::Ref<Part>> }
//!
//! let db = cairn::Database::open("parts.cairn")?;
//! let mut tx = db.begin()?;
//! let p = tx.create(Part { id: 1, x: 0, to: cairn::List::new() })?;
//! tx.set_root("first-part", &p)?;
//! tx.update(&p, |p| p.x += 1)?;
//! tx.commit()?;
//! ```
//!
//! - [`Database`] / [`Transaction`]: serializable transactions
//!   (`database/`), embedded ([`Database::open`]) or against `cairn serve`
//!   ([`Database::connect`]: the adaptive client by default, or the page-,
//!   file- or object-server client, [`Options::arch`]).
//! - [`Ref<T>`]: typed references, swizzled to object-cache slots (`reference.rs`).
//! - [`cache::ObjectCache`]: decoded objects bounded in bytes, LRU or CLOCK.
//! - [`List`], [`Set`], [`Map`] fields and [`Index`] (a B+-tree on a field).
//! - [`codec`], [`fields`]: the record encoding and `#[derive(Persistent)]`'s traits.
//! - [`view`]: objects read in place ([`Obj`], [`Transaction::view`]).
//! - the schema layer (`cairn-schema`): class ids and schema versions, named
//!   roots, the index directory, the server-side [`methods`].
//!
//! # What is API
//!
//! What this page lists is the API. Two modules are public for Cairn's
//! own tools, benchmarks and tests only, hidden from these docs and not
//! stable: `storage` (the whole storage crate) and `tools` (the clients'
//! machinery under the typed API). The clients and the dual buffer are
//! private; an application names what it needs of them, and of storage,
//! through the re-exports here:
//! [`DbOptions`] ([`Options::storage`]), [`Oid`] and [`GroupId`],
//! [`RemoteStats`] and [`AdaptiveStats`] (what a remote client counts),
//! [`AdaptivePolicy`] and [`DualBufferOptions`] with its [`Strategy`].

pub mod cache;
pub(crate) use cairn_schema::catalog;
pub mod codec;
pub mod collections;
mod database;
mod dual;
pub(crate) use cairn_schema::error;
pub mod fields;
mod index_cache;
pub use cairn_schema::methods;
mod reference;
mod remote;
pub(crate) use cairn_schema::store_ops;
pub mod view;

pub use cache::{CachePolicy, CacheStats};
pub use cairn_derive::Persistent;
/// A user name and password to log in to `cairn serve` with ([`Options::login`]).
pub use cairn_net::rpc::Login;
#[doc(hidden)]
pub use cairn_storage as storage;
pub use cairn_storage::{DbOptions, GroupId, Oid};
pub use codec::{DecodeError, Field, FieldDesc, Persistent, Reader, TypeDesc, Value, Writer};
pub use collections::{List, Map, Set};
pub use database::{Arch, Database, Index, Options, Transaction};
pub use dual::{DualBufferOptions, Strategy};
pub use error::{Error, Result};
pub use methods::{Cmp, Literal, Predicate};
pub use reference::Ref;
pub use remote::{AdaptivePolicy, AdaptiveStats, RemoteStats};
pub use view::Obj;

/// The clients' machinery below the typed API, for the command-line
/// tools, the benchmarks and the tests that work at that level (a storage
/// transaction over a page client, an object client's transaction, the
/// adaptive client's fetch policy). Not a stable API: an application uses
/// [`Database`] and the options and counters re-exported at the root.
#[doc(hidden)]
pub mod tools {
    pub use crate::remote::{
        parse_url, parse_url_login, Connect, FetchMode, ObjectLostHook, ObjectStore, ObjectTxn, RemoteDevice,
        RemoteStore, SharedBytes, TreeOp, CACHED_OBJECT_BYTES_DEFAULT, CHANGES_KEPT_MIN, READ_AHEAD_MAX,
    };
}

/// Decoders that are otherwise private, for the fuzz targets
/// (`fuzz/targets/catalog.rs`) and their corpus replay under `cargo test`.
/// Not a stable API.
#[doc(hidden)]
pub mod fuzzing {
    pub use crate::catalog::{decode_schema, encode_schema};

    /// Decodes `bytes` as a server-side method; if it decodes, checks it
    /// encodes back to the same bytes (panics if not).
    pub fn method_round_trip(bytes: &[u8]) {
        if let Ok(m) = crate::methods::Method::decode(bytes) {
            assert_eq!(m.encode(), bytes, "a decoded method encodes back to its bytes");
        }
    }

    /// As [`method_round_trip`], for a method's answer.
    pub fn answer_round_trip(bytes: &[u8]) {
        if let Ok(a) = crate::methods::Answer::decode(bytes) {
            assert_eq!(a.encode(), bytes, "a decoded answer encodes back to its bytes");
        }
    }

    /// Seeds of the `methods` fuzz target: real encodings of a selection
    /// over a group, one over an index range with a count, a traversal, and
    /// both kinds of answer (the selector byte first).
    pub fn method_seeds() -> Vec<(&'static str, Vec<u8>)> {
        use crate::methods::{Answer, Cmp, Method, Predicate, Source};
        let oid = cairn_storage::Oid::from_bytes(&[1, 0, 0, 0, 2, 0, 3, 0, 0, 0]);
        let with = |sel: u8, b: Vec<u8>| {
            let mut v = vec![sel];
            v.extend_from_slice(&b);
            v
        };
        vec![
            (
                "select-group",
                with(
                    0,
                    Method::Select {
                        class: "Part".into(),
                        source: Source::Group("parts".into()),
                        preds: vec![
                            Predicate::new("kind", Cmp::Eq, "part-type3"),
                            Predicate::new("x", Cmp::Lt, 100),
                            Predicate::new("to.length", Cmp::Ge, 1.5),
                            Predicate::new("flag", Cmp::Ne, true),
                            Predicate::new("build", Cmp::Gt, 7u64),
                        ],
                        count_only: false,
                        limit: 1000,
                    }
                    .encode(),
                ),
            ),
            (
                "count-index",
                with(
                    0,
                    Method::Select {
                        class: "Part".into(),
                        source: Source::Index {
                            field: "id".into(),
                            lo: std::ops::Bound::Included(vec![0, 0, 0, 1]),
                            hi: std::ops::Bound::Excluded(vec![0, 0, 0, 9]),
                        },
                        preds: vec![],
                        count_only: true,
                        limit: u32::MAX,
                    }
                    .encode(),
                ),
            ),
            (
                "traverse",
                with(
                    0,
                    Method::Traverse {
                        start: oid,
                        paths: vec!["to.to".into()],
                        depth: 7,
                        limit: 5000,
                    }
                    .encode(),
                ),
            ),
            ("answer-oids", with(1, Answer::Oids(vec![oid, oid]).encode())),
            ("answer-count", with(1, Answer::Count(42).encode())),
        ]
    }
}
