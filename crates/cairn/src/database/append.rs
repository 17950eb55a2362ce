//! Appending to an object's list field without reading the object
//! ([`Transaction::append`]): an append that commutes with other
//! transactions' appends to the same object, so that many transactions add
//! to one list at once (OO1's inserts each add a part to the reverse lists
//! of about 300 existing ones).

use cairn_schema::append::{ListAppend, ListField};

use super::source::Source as _;
use super::*;

impl Transaction<'_> {
    /// Adds `value` at the end of the list field `field` (a `List<V>` or
    /// `Vec<V>`) of the object, without reading it.
    ///
    /// Where the store locks objects (embedded, by default; the object
    /// and adaptive clients, whose server does) the append is
    /// kept and applied at commit to the object as it then stands, under
    /// an append lock that other appenders share: transactions appending
    /// to one object do not wait for each other, and one that reads or
    /// changes the object whole waits for them all. Each transaction's
    /// appends land together, in the order its commit applies them, after
    /// those of transactions that committed before it. Where the store
    /// locks pages (the page and file clients, the embedded engine with
    /// page locks) the append is kept to commit, which locks the pages of
    /// every object appended to X together, in page order, and applies
    /// each object's appends in order: the page locks are held while the
    /// transaction commits, not from the append on. When the object was
    /// already changed whole in this transaction, the field is indexed or
    /// (under object locking) the object's page has no room for the
    /// growth, it is the same as [`Transaction::update`] pushing `value`.
    /// This transaction reads its own appends either way. An append kept
    /// to commit that no longer applies there (the object was deleted by
    /// another transaction meanwhile, or is of a schema version without
    /// the field) fails the commit.
    ///
    /// A `field` that `T` does not have as a list of `V`s is
    /// [`Error::InvalidArgument`].
    pub fn append<T: Persistent, V: crate::codec::Field>(&mut self, r: &Ref<T>, field: &str, value: &V) -> Result<()> {
        self.refuse_if_read_only()?;
        let c = self.writable_class_of::<T>()?;
        let list = self.list_field::<T>(c, field, V::type_desc())?;
        let mut w = Writer::new();
        value.encode(&mut w);
        let append = Arc::new(ListAppend::new(list, w.into_bytes(), 1)?);
        let oid = r.oid();
        let commutes = !T::INDEXED_FIELDS.contains(&field) && !self.written.contains_key(&oid);
        if commutes && self.txn.append(oid, &append)? {
            // Nobody else reads the object until this transaction ends (the
            // append lock keeps them out); this one reads it afresh.
            self.inner.cache.invalidate(oid);
            self.appended.insert(oid);
            return Ok(());
        }
        if commutes && self.txn.append_whole(oid, &append)? {
            // Applied by the store under X (a large record edited in
            // place: its head and tail pages, not all of them). A copy
            // this transaction read before is stale now: a read of it
            // settles it as one of a kept append.
            self.inner.cache.invalidate(oid);
            self.appended.insert(oid);
            return Ok(());
        }
        self.txn.lock_to_change(oid)?;
        let value: T = self.load_own::<T>(oid)?;
        let old_keys = value.index_keys();
        let bytes = self.inner.encode(c, &value)?;
        let bytes = cairn_storage::txn::RecordMerge::apply(&*append, &bytes)
            .map_err(|why| Error::InvalidArgument(format!("appending to {} of object {oid}: {why}", field)))?;
        let value: T = self.inner.decode::<T>(c, oid, &bytes)?;
        self.write(oid, value, old_keys)
    }

    /// Before a read of an object this transaction appended to (the
    /// appends are kept by the store, not in any cache): reads it under X
    /// — which waits for every other appender — and keeps it as one of the
    /// transaction's own changes, so later reads answer from that.
    pub(super) fn settle_appends<T: Persistent>(&mut self, oid: Oid) -> Result<()> {
        if self.appended.is_empty() || !self.appended.contains(&oid) {
            return Ok(());
        }
        self.txn.settle_appends(oid)?;
        self.txn.lock_to_change(oid)?;
        let value: T = self.load_own::<T>(oid)?;
        let keys = value.index_keys();
        self.write(oid, value, keys)
    }

    /// `T`'s list field `field` of elements of type `elem`, placed in each
    /// schema version of `T`'s class (kept for the transaction).
    fn list_field<T: Persistent>(&mut self, c: ClassInfo, field: &str, elem: TypeDesc) -> Result<Arc<ListField>> {
        let ty = TypeId::of::<T>();
        if let Some((_, l)) = self.lists.iter().find(|(t, l)| *t == ty && l.name() == field) {
            if *l.elem() == elem {
                return Ok(Arc::clone(l));
            }
        }
        let list = match &self.catalog {
            Some(cat) => ListField::of(cat, c.id, field, &elem)?,
            None => ListField::of(&lock(&self.inner.catalog), c.id, field, &elem)?,
        };
        if !list.in_version(c.version) {
            return Err(Error::InvalidArgument(format!(
                "{} has no field {field} of type Vec<{elem}> to append to",
                T::NAME
            )));
        }
        let list = Arc::new(list);
        self.lists.push((ty, Arc::clone(&list)));
        Ok(list)
    }
}
