//! Server-side methods on a transaction ([`crate::methods`]): selection,
//! count and bounded traversal, run where the objects are — in this
//! process for an embedded, page- or file-server database, on the server
//! for an object-server client — always in this transaction, so they see
//! its own changes.

use super::source::Source as _;
use super::*;
use crate::methods::{Answer, Method, Predicate, Source};

impl Transaction<'_> {
    /// The objects of type `T` in `group` whose fields satisfy every
    /// predicate (see [`crate::methods`] for paths and comparisons), in the
    /// group's physical order. The group and every object read are locked
    /// shared, as a scan is. A predicate naming a field `T` does not have,
    /// or comparing it with a constant of another kind, is an error.
    pub fn select<T: Persistent>(&mut self, group: &str, preds: &[Predicate]) -> Result<Vec<Ref<T>>> {
        let m = Method::Select {
            class: T::NAME.to_string(),
            source: Source::Group(group.to_string()),
            preds: preds.to_vec(),
            count_only: false,
            limit: u32::MAX,
        };
        self.oids_of::<T>(&m)
    }

    /// How many objects [`Transaction::select`] would answer (only the
    /// count travels).
    pub fn count<T: Persistent>(&mut self, group: &str, preds: &[Predicate]) -> Result<u64> {
        let m = Method::Select {
            class: T::NAME.to_string(),
            source: Source::Group(group.to_string()),
            preds: preds.to_vec(),
            count_only: true,
            limit: u32::MAX,
        };
        match self.method::<T>(&m)? {
            Answer::Count(n) => Ok(n),
            Answer::Oids(_) => Err(Error::InvalidArgument("a count answered with objects".into())),
        }
    }

    /// The objects an index lists between `lo` and `hi` (in key order) that
    /// satisfy every predicate: a selection over an index range.
    pub fn select_in<K: IndexKey, T: Persistent>(
        &mut self,
        index: &Index<K, T>,
        lo: Bound<&K>,
        hi: Bound<&K>,
        preds: &[Predicate],
    ) -> Result<Vec<Ref<T>>> {
        // The field must be indexed, with keys of type K.
        check_key_type::<K, T>(index.field, &indexed_field_type::<T>(index.field)?)?;
        let enc = |b: Bound<&K>| -> Bound<Vec<u8>> {
            b.map(|k| {
                let mut v = Vec::new();
                k.key_bytes(&mut v);
                v
            })
        };
        let m = Method::Select {
            class: T::NAME.to_string(),
            source: Source::Index {
                field: index.field.to_string(),
                lo: enc(lo),
                hi: enc(hi),
            },
            preds: preds.to_vec(),
            count_only: false,
            limit: u32::MAX,
        };
        self.oids_of::<T>(&m)
    }

    /// The objects reachable from `start` in at most `depth` steps along
    /// `paths` (each a path to references, e.g. `"to.to"`), breadth first,
    /// each once, `start` first. They are taken to be `T`s: one of another
    /// type is reported when followed ([`Error::WrongType`]).
    pub fn traverse<T: Persistent>(&mut self, start: &Ref<T>, paths: &[&str], depth: u32) -> Result<Vec<Ref<T>>> {
        let m = Method::Traverse {
            start: start.oid(),
            paths: paths.iter().map(|p| p.to_string()).collect(),
            depth,
            limit: u32::MAX,
        };
        self.oids_of::<T>(&m)
    }

    fn oids_of<T: Persistent>(&mut self, m: &Method) -> Result<Vec<Ref<T>>> {
        match self.method::<T>(m)? {
            Answer::Oids(oids) => Ok(oids.into_iter().map(Ref::from_oid).collect()),
            Answer::Count(_) => Err(Error::InvalidArgument("a selection answered with a count".into())),
        }
    }

    /// Runs `m` in this transaction: its class registered, the catalog
    /// current, its changes held in the dual buffer handed over first.
    fn method<T: Persistent>(&mut self, m: &Method) -> Result<Answer> {
        self.class_of::<T>()?;
        self.flush()?;
        let cat = match &self.catalog {
            Some(c) => (**c).clone(),
            None => lock(&self.inner.catalog).clone(),
        };
        let inner = self.inner;
        let group = |name: &str| -> Result<GroupId> { Ok(inner.db.group(name, false)?) };
        self.txn.run_method(m, &inner.meta, &cat, &group)
    }
}
