//! Classes and the catalog, as a session and its transactions use them:
//! finding a type's class (registering it when it is new or changed), keeping
//! the session's copy of the catalog current through the stored epoch
//! (ARCHITECTURE.md, "The catalog is current in every transaction"), and
//! making a class's indexes those its newest type marks.

use super::*;

impl Inner {
    /// Makes a catalog change in `txn`: sent to the server for a remote
    /// store (which checks it and applies it in the same transaction), made
    /// here for an embedded one ([`catalog_change`]; ARCHITECTURE.md,
    /// "Catalog changes").
    pub(super) fn change_catalog(&self, txn: &mut Tx, change: CatalogChange) -> Result<Outcome> {
        let m = &self.meta;
        let trees = [m.roots.root(), m.classes.root(), m.indexes.root()];
        catalog_change::change(txn, &trees, &|name| self.group(name), &change)
    }

    /// Registers `T` in a transaction of its own, committed at once (so the
    /// catalog's pages are exclusively locked only briefly), one
    /// registration of this session at a time; retried on a deadlock with
    /// another client's.
    pub(super) fn register_alone<T: Persistent>(&self) -> Result<()> {
        let _one = lock(&self.registering);
        retry(|| {
            let mut tx = self.begin()?;
            tx.resolve::<T>()?;
            tx.commit()
        })
    }

    /// Makes the catalog's indexes of class `c` (registered by `txn`) those
    /// of `T::INDEXED_FIELDS`: an index of a field no longer marked is
    /// dropped and its tree freed (nothing maintains it any more, so it must
    /// not outlive the mark); a marked field without an index gets one, empty
    /// for a `new` class, else built from every object of the class in the
    /// database. Returns the trees of the indexed fields.
    ///
    /// Building reads (and share-locks) every object of every user group, so
    /// adding `#[cairn(index)]` to a populated class is best done before
    /// other transactions start (e.g. `Database::register::<T>()` at open).
    fn sync_indexes<T: Persistent>(
        &self,
        txn: &mut Tx,
        cat: &Catalog,
        c: ClassInfo,
        new: bool,
    ) -> Result<Vec<((u32, String), BTree)>> {
        let existing = if new {
            Vec::new()
        } else {
            catalog::indexes_of(txn, &self.meta, c.id)?
        };
        let mut trees = Vec::new();
        for (field, tree) in self.open_index_trees::<T>(txn, &existing)? {
            if T::INDEXED_FIELDS.contains(&field.as_str()) {
                trees.push(((c.id, field.clone()), tree));
                continue;
            }
            self.change_catalog(
                txn,
                CatalogChange::RemoveIndex {
                    class: c.id,
                    field: field.clone(),
                },
            )?;
            let mut pages = Vec::new();
            let r = txn.tree_destroy(tree, &mut pages);
            self.index_cache.tree(tree.root()).changed(&pages);
            r?;
        }
        let missing: Vec<&'static str> = T::INDEXED_FIELDS
            .iter()
            .copied()
            .filter(|f| !existing.iter().any(|(e, _)| e == f))
            .collect();
        if missing.is_empty() {
            return Ok(trees);
        }
        let group = self.group(catalog::INDEX_GROUP)?;
        let mut entries: Vec<Vec<(Vec<u8>, Vec<u8>)>> = vec![Vec::new(); missing.len()];
        if !new {
            self.collect_keys::<T>(txn, cat, c, &missing, &mut entries)?;
        }
        for (field, mut pairs) in missing.into_iter().zip(entries) {
            pairs.sort_unstable();
            let mut pages = Vec::new();
            let built = txn.tree_bulk_load(group, pairs, &mut pages);
            if let Ok(tree) = &built {
                self.index_cache.tree(tree.root()).changed(&pages);
            }
            let tree = built?;
            self.change_catalog(
                txn,
                CatalogChange::AddIndex {
                    class: c.id,
                    field: field.to_string(),
                    root: tree.root(),
                },
            )?;
            trees.push(((c.id, field.to_string()), tree));
        }
        Ok(trees)
    }

    /// Opens every index tree the catalog names for `T`, checking that each
    /// root is a B+-tree root of the index group: a damaged entry must not
    /// make registering free (or later insert into) a tree that is no
    /// index, such as one of the catalog's own.
    fn open_index_trees<T: Persistent>(
        &self,
        txn: &mut Tx,
        existing: &[(String, cairn_storage::PageId)],
    ) -> Result<Vec<(String, BTree)>> {
        if existing.is_empty() {
            return Ok(Vec::new());
        }
        let index_group = self.group(catalog::INDEX_GROUP)?;
        let mut trees = Vec::new();
        for (field, root) in existing {
            let (tree, group) = txn.tree_open(*root)?;
            if group != Some(index_group) {
                return Err(Error::Corrupt {
                    page: *root,
                    reason: format!(
                        "catalog: the index on {}.{field} names page {root}, which is not in group {}",
                        T::NAME,
                        catalog::INDEX_GROUP
                    ),
                });
            }
            trees.push((field.clone(), tree));
        }
        Ok(trees)
    }

    /// Appends (key, OID) of every object of class `c` to `entries[i]` for
    /// each `fields[i]`, scanning every user group.
    fn collect_keys<T: Persistent>(
        &self,
        txn: &mut Tx,
        cat: &Catalog,
        c: ClassInfo,
        fields: &[&'static str],
        entries: &mut [Vec<(Vec<u8>, Vec<u8>)>],
    ) -> Result<()> {
        let class = c.id.to_le_bytes();
        for (id, name) in self.db.groups()? {
            if name == catalog::SYSTEM_GROUP || name == catalog::INDEX_GROUP {
                continue;
            }
            for oid in txn.scan_all(id)? {
                // Look at the class id first, so another class's (possibly
                // large) objects are never read whole.
                let len = txn.len(oid)?;
                let mut head = [0u8; 4];
                if len < HEADER_SIZE as u64 {
                    continue;
                }
                txn.read_range(oid, 0, &mut head)?;
                if head != class {
                    continue;
                }
                self.check_len(oid, len)?;
                let bytes = txn.read(oid)?;
                let value: T = decode_record(c, oid, &bytes, || cat)?;
                for (field, key) in value.index_keys() {
                    if let Some(i) = fields.iter().position(|f| *f == field) {
                        entries[i].push((key, oid.to_bytes().to_vec()));
                    }
                }
            }
        }
        Ok(())
    }
}

impl Transaction<'_> {
    /// The class of `T`, from this transaction's table when it is there,
    /// else from the catalog (registering `T` in this transaction if it is
    /// new or changed, [`Transaction::register`]).
    pub(super) fn class_of<T: Persistent>(&mut self) -> Result<ClassInfo> {
        let ty = TypeId::of::<T>();
        if let Some((_, c)) = self.classes.iter().find(|(t, _)| *t == ty) {
            return Ok(*c);
        }
        if self.catalog_epoch.is_none() && !lock(&self.inner.catalog).registered.contains_key(T::NAME) {
            // Not known to the session, and this transaction holds no lock
            // on the catalog yet: register in a short transaction of its own
            // rather than hold the catalog exclusively to this one's end.
            self.inner.register_alone::<T>()?;
        }
        let c = self.resolve::<T>()?;
        self.classes.push((ty, c));
        Ok(c)
    }

    /// The class of `T` as the catalog holds it at this transaction's
    /// epoch, registering `T` in this transaction if needed.
    fn resolve<T: Persistent>(&mut self) -> Result<ClassInfo> {
        self.ensure_catalog()?;
        let known = match &self.catalog {
            Some(cat) => cat.registered.get(T::NAME).copied(),
            None => lock(&self.inner.catalog).registered.get(T::NAME).copied(),
        };
        match known {
            Some(c) => Ok(c),
            None => self.register::<T>(),
        }
    }

    /// The class of `T` for a change to one of its objects: refused for an
    /// older schema version whose type does not keep the class's indexes.
    pub(super) fn writable_class_of<T: Persistent>(&mut self) -> Result<ClassInfo> {
        let c = self.class_of::<T>()?;
        if !c.writable {
            return Err(Error::SchemaMismatch {
                type_name: T::NAME.into(),
                field: String::new(),
                reason: format!(
                    "this program's type is schema version {} of the class, a newer program has \
                     registered a later one with other indexes, and this one cannot keep those \
                     indexes: it may read the class's objects but not create, change or delete them",
                    c.version
                ),
            });
        }
        Ok(c)
    }

    /// Makes sure the session's catalog is the stored one before this
    /// transaction first relies on it: reads the stored epoch (its page stays
    /// share-locked until this transaction ends, so no other session can
    /// change the catalog meanwhile: a registration waits for it) and, if
    /// another session or client has changed the catalog since the session
    /// read it, reloads it and forgets the classes and index trees resolved
    /// at the old epoch.
    fn ensure_catalog(&mut self) -> Result<()> {
        if self.catalog_epoch.is_some() {
            return Ok(());
        }
        let inner = self.inner;
        let e = catalog::epoch(&mut self.txn, &inner.meta)?;
        if self.read_only {
            // At a snapshot: the catalog as of it only if it is newer than
            // the session's (a client whose session has not seen another
            // client's registration yet). An older one is not taken: the
            // session's copy has every class and version the snapshot's
            // objects were written with, and the shared copy must not go
            // back in time.
            let session = lock(&inner.catalog).epoch;
            if e > session {
                let mut fresh = Catalog::default();
                catalog::load(&mut self.txn, &inner.meta, &mut fresh)?;
                let mut cat = lock(&inner.catalog);
                if cat.epoch < e {
                    *cat = fresh;
                    lock(&inner.index_roots).clear();
                }
            }
            self.catalog_epoch = Some(e.max(session));
            return Ok(());
        }
        if lock(&inner.catalog).epoch != e {
            // Read without the session's mutex held: this may fetch pages.
            let mut fresh = Catalog::default();
            catalog::load(&mut self.txn, &inner.meta, &mut fresh)?;
            let mut cat = lock(&inner.catalog);
            if cat.epoch != e {
                *cat = fresh;
                lock(&inner.index_roots).clear();
            }
        }
        self.catalog_epoch = Some(e);
        Ok(())
    }

    /// Registers `T` in this transaction ([`catalog::register`]), and, if
    /// its type is the class's newest version, makes the class's indexes
    /// those `T` marks ([`Inner::sync_indexes`]). What registering only
    /// found goes into the session's catalog at once; what it had to write
    /// stays in this transaction's copy until it commits.
    fn register<T: Persistent>(&mut self) -> Result<ClassInfo> {
        let inner = self.inner;
        let meta = inner.meta;
        let epoch = self.catalog_epoch.expect("ensure_catalog ran");
        let private = self.catalog.is_some();
        let mut cat = match self.catalog.take() {
            Some(c) => c,
            None => Box::new(lock(&inner.catalog).clone()),
        };
        let fields = T::fields();
        let registered = (|| {
            let (mut info, new) = match catalog::find_registered(&mut self.txn, &meta, &cat, T::NAME, &fields)? {
                Some(info) => (info, false),
                None => {
                    let change = CatalogChange::Register {
                        name: T::NAME.to_string(),
                        fields: fields.clone(),
                    };
                    match inner.change_catalog(&mut self.txn, change)? {
                        Outcome::Registered { info, new } => {
                            cat.names.insert(info.id, T::NAME.to_string());
                            cat.schemas.insert((info.id, info.version), fields.clone());
                            (info, new)
                        }
                        other => return Err(Error::Internal(format!("registering {} answered {other:?}", T::NAME))),
                    }
                }
            };
            let trees = if info.latest {
                inner.sync_indexes::<T>(&mut self.txn, &cat, info, new)?
            } else {
                let existing = catalog::indexes_of(&mut self.txn, &meta, info.id)?;
                let opened = inner.open_index_trees::<T>(&mut self.txn, &existing)?;
                let mut marked: Vec<&str> = T::INDEXED_FIELDS.to_vec();
                marked.sort_unstable();
                info.writable =
                    marked.len() == existing.len() && marked.iter().zip(&existing).all(|(m, (f, _))| m == f);
                opened
                    .into_iter()
                    .filter(|(field, _)| marked.contains(&field.as_str()))
                    .map(|(field, tree)| ((info.id, field), tree))
                    .collect()
            };
            cat.registered.insert(T::NAME.to_string(), info);
            Ok::<_, Error>((info, trees))
        })();
        let (info, trees) = match registered {
            Ok(r) => r,
            Err(e) => {
                if private {
                    self.catalog = Some(cat);
                }
                return Err(e);
            }
        };
        let now = catalog::epoch(&mut self.txn, &meta)?;
        if private || now != epoch {
            cat.epoch = now;
            self.catalog = Some(cat);
            self.index_roots.extend(trees);
        } else {
            let mut session = lock(&inner.catalog);
            if session.epoch == epoch {
                session.registered.insert(T::NAME.to_string(), info);
                drop(session);
                lock(&inner.index_roots).extend(trees);
            }
        }
        Ok(info)
    }
}
