//! An object client's appends (OBJ_COMMIT and OBJ_FLUSH's
//! [`Change::Append`](cairn_net::object_service::Change::Append)): elements
//! added at the end of a list field of an object the client did not read.
//! The server places the field by its own catalog (what the client says of
//! the class, the field and the elements' type is checked against it) and
//! keeps the append under the object's append lock, which other appenders
//! share ([`Txn::merge`]); where it cannot be kept so (a large record, no
//! room on the page, the transaction changed the object whole) it applies
//! it under X at once ([`Txn::merge_whole`]: a large record whose list ends
//! it is edited in place, its head and tail pages only).

use std::collections::HashMap;
use std::sync::Arc;

use cairn_schema::append::{ListAppend, ListField};
use cairn_schema::catalog::{self, Catalog, Meta};
use cairn_storage::txn::RecordMerge;
use cairn_storage::{Error, Oid, Txn};

use crate::{lock, Core};

/// The catalog a transaction's appends are placed by, and the fields
/// placed so far (for one request).
pub(crate) struct Lists {
    catalog: Arc<Catalog>,
    fields: HashMap<(u32, String, Vec<u8>), Arc<ListField>>,
}

/// The server's copy of the catalog, for appends: the catalog's trees and
/// what was loaded from them, good while the stored epoch is the same.
pub(crate) type CatalogCopy = std::sync::Mutex<Option<(Meta, Arc<Catalog>)>>;

impl Lists {
    /// The catalog as `t` sees it: the server's copy if the stored epoch
    /// (read in `t`, which share-locks it to `t`'s end, so no class
    /// changes under the transaction) is the copy's, else loaded afresh.
    pub(crate) fn of(core: &Core, t: &mut Txn) -> Result<Lists, Error> {
        let cached = lock(&core.catalog).clone();
        let meta = match &cached {
            Some((meta, _)) => *meta,
            None => {
                let system = core.db.group(catalog::SYSTEM_GROUP)?;
                catalog::find_meta(t, system).map_err(|e| e.into_storage())?
            }
        };
        let epoch = catalog::epoch(t, &meta).map_err(|e| e.into_storage())?;
        let cat = match cached {
            Some((_, cat)) if cat.epoch == epoch => cat,
            _ => {
                let mut cat = Catalog::default();
                catalog::load(t, &meta, &mut cat).map_err(|e| e.into_storage())?;
                let cat = Arc::new(cat);
                *lock(&core.catalog) = Some((meta, Arc::clone(&cat)));
                cat
            }
        };
        Ok(Lists {
            catalog: cat,
            fields: HashMap::new(),
        })
    }

    /// The append a client's change names, checked against the catalog.
    pub(crate) fn append(
        &mut self,
        oid: Oid,
        class: u32,
        field: &str,
        elem: &[u8],
        count: u32,
        elems: &[u8],
    ) -> Result<ListAppend, Error> {
        ListAppend::from_wire(
            &self.catalog,
            &mut self.fields,
            class,
            field,
            elem,
            u64::from(count),
            elems.to_vec(),
        )
        .map_err(|e| Error::InvalidArgument(format!("an append to object {oid}: {e}")))
    }
}

/// Keeps `append` under the object's append lock, or applies it now under
/// X where it cannot be kept (a large record edited in place, any other
/// read and rewritten: [`Txn::merge_whole`]).
pub(super) fn append_to(t: &mut Txn, oid: Oid, append: ListAppend) -> Result<(), Error> {
    let append = Arc::new(append) as Arc<dyn RecordMerge>;
    if t.merge(oid, Arc::clone(&append))? {
        return Ok(());
    }
    t.merge_whole(oid, &[append])
}
