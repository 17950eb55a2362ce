//! Commit, in three phases: **append** the redo records and the COMMIT,
//! **install** the pages once the log is durable, **free** the pages the
//! transaction emptied.
//!
//! The outcome is decided the moment the COMMIT record is appended: from
//! then on the transaction is never rolled back (a rollback would log FREE
//! for pages a durable commit wrote). A failure after that point — the fsync,
//! installing a page, reading a spilled page back, a deferred free — poisons
//! the database instead, and reopening redoes the commit from the log if its
//! COMMIT reached the disk. Only a failure *before* the COMMIT is appended
//! rolls the transaction back, which is safe: recovery ignores PAGE records
//! without a COMMIT.

use std::sync::atomic::Ordering;

use crate::error::{Error, Result};
use crate::ids::{Lsn, PageId};
use crate::page;
use crate::wal::redo::{self, Redo};

use super::db::{lock, Shared};
use super::Txn;

/// A batch of redo records is appended once it holds this many bytes, so a
/// transaction larger than memory never holds all its records at once.
const APPEND_BATCH_BYTES: usize = 4 << 20;

impl Txn {
    /// Commits: the transaction's changes are durable when this returns Ok.
    ///
    /// On an error before the outcome is decided the transaction is rolled
    /// back; after it (see the module docs) the database is poisoned and the
    /// error says so, and reopening the database tells whether the commit
    /// happened.
    pub fn commit(self) -> Result<()> {
        self.commit_with_lsns().map(|_| ())
    }

    /// Commits like [`Txn::commit`] and returns each page the commit
    /// installed with the LSN it got: what a page-server client stamps on
    /// its cached copies.
    pub fn commit_with_lsns(self) -> Result<Vec<(PageId, Lsn)>> {
        self.commit_with_diffs().map(|(lsns, _)| lsns)
    }

    /// Commits like [`Txn::commit_with_lsns`], and also returns how the
    /// commit changed the pages of its object-level changes
    /// ([`PageDiff`]), if [`Txn::report_object_diffs`] asked for them:
    /// what a server sends a page client whose appends it kept, so the
    /// client brings its cached copies up to date without a fetch.
    pub fn commit_with_diffs(mut self) -> Result<(InstalledLsns, Vec<PageDiff>)> {
        let lsns = self.commit_installing()?;
        Ok((lsns, self.object_diffs.take().unwrap_or_default()))
    }

    /// Asks the commit to note how it changes each page of the
    /// transaction's object-level changes ([`Txn::commit_with_diffs`]).
    pub fn report_object_diffs(&mut self) {
        self.object_diffs.get_or_insert_with(Vec::new);
    }

    fn commit_installing(&mut self) -> Result<Vec<(PageId, Lsn)>> {
        self.check_active()?;
        // Appends kept to commit under page locking: kept by the backend
        // at object grain, or applied under their pages' X locks taken
        // together now (`append.rs`).
        self.apply_deferred_at_commit()?;
        // A client's pages are checked as a whole before anything is
        // logged; a refusal drops (rolls back) the transaction.
        self.check_client_links()?;
        let db = self.db.clone();
        if self.pages.is_empty()
            && self.objects.is_empty()
            && self.key_trees.is_empty()
            && self.to_free.is_empty()
            && self.allocated.is_empty()
            && self.pages_kept_by_backend().is_empty()
        {
            self.finish();
            db.note_read_only();
            return Ok(Vec::new());
        }
        let result = db.commit(self);
        // Decided, or rolled back by the backend: release the locks.
        self.finish();
        result.map(|()| std::mem::take(&mut self.installed))
    }
}

/// Each page a commit installed, with the LSN it got.
pub type InstalledLsns = Vec<(PageId, Lsn)>;

/// How a commit changed a page at object grain ([`Txn::commit_with_diffs`]):
/// the LSN of the image it changed, and the byte runs of the new image
/// where it differs (past the page's first 16 bytes, as a PAGE record's).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PageDiff {
    /// The page.
    pub page: PageId,
    /// The LSN of the image the commit changed.
    pub base: Lsn,
    /// (offset, bytes) runs of the new image.
    pub runs: Vec<(u32, Vec<u8>)>,
}

/// The page images a commit's tree changes made, by page.
pub(super) type TreeImages = Vec<(PageId, Vec<u8>)>;

/// A commit's tree changes applied ([`Shared::apply_trees`]): the trees'
/// latches, held until the pages they made are logged, and each tree's
/// root with the pages changed in it.
pub(super) struct AppliedTrees<'a> {
    latches: Vec<std::sync::RwLockWriteGuard<'a, super::keys::Pending>>,
    touched: Vec<(PageId, Vec<PageId>)>,
}

impl AppliedTrees<'_> {
    /// Lets the latches go once the pages are `logged` (or failed to be),
    /// first telling the tree hook (a server's: its callbacks) which pages
    /// of each tree changed if they were.
    pub(super) fn release(self, db: &Shared, logged: bool) {
        if let (true, Some(hook)) = (logged, db.tree_hook.get()) {
            for (root, pages) in &self.touched {
                hook(*root, pages);
            }
        }
        drop(self.latches);
    }
}

impl Shared {
    /// The embedded commit of `t` (see the module docs).
    pub(super) fn commit_txn(&self, t: &mut Txn) -> Result<()> {
        let trees = t.key_range_trees();
        let (applied, tree_images) = self.apply_trees(t, &trees)?;
        let decided = {
            let gate = self.sink.gate.read().unwrap_or_else(|e| e.into_inner());
            let appended = self.append_records(t, tree_images);
            applied.release(self, appended.is_ok());
            match appended {
                Err(e) => {
                    // The gate goes first: giving pages back takes the
                    // Volume mutex, and the lock order is Volume → gate (a
                    // checkpoint holds Volume and waits for the gate's write
                    // side; holding the read side here hung both forever
                    // when an append failed beside a checkpoint).
                    drop(gate);
                    t.pages.clear();
                    self.give_back(t);
                    self.commit_installed(t);
                    return Err(e);
                }
                Ok((lsns, commit_lsn)) => self.make_durable_and_install(t, &lsns, commit_lsn),
            }
        };
        if decided.is_ok() {
            if let Some(hook) = self.install_hook.get() {
                let pages: Vec<PageId> = t.installed.iter().map(|(p, _)| *p).collect();
                hook(&pages);
            }
        }
        self.commit_installed(t);
        let result = decided.and_then(|()| self.free_deferred(t));
        if let Err(e) = &result {
            self.poison(format!("{} failed after its COMMIT was logged: {e}", t.id));
        }
        if result.is_ok() {
            self.counters.commits.fetch_add(1, Ordering::Relaxed);
        }
        result
    }

    /// Applies `t`'s tree changes under key-range locking (`trees`, from
    /// [`Txn::key_range_trees`]) now, under each tree's exclusive latch,
    /// held ([`AppliedTrees`]) until the pages they made are logged and
    /// registered as the newest images (`keys.rs`). The groups' intention
    /// locks come first: a split allocates in the tree's group, and
    /// nothing waits for a lock under a latch. Returns the latches and the
    /// images made. On a failure nothing is logged and `t`'s private pages
    /// and allocations are given back.
    pub(super) fn apply_trees<'a>(
        &self,
        t: &mut Txn,
        trees: &'a [(crate::btree::BTree, std::sync::Arc<super::TreeState>)],
    ) -> Result<(AppliedTrees<'a>, TreeImages)> {
        let prepared = self.lock_tree_groups(t, trees);
        let latches: Vec<_> = if prepared.is_ok() {
            trees.iter().map(|(_, state)| state.write()).collect()
        } else {
            Vec::new()
        };
        let mut touched: Vec<(PageId, Vec<PageId>)> = Vec::new();
        let tree_images = prepared.and_then(|()| {
            let mut images = std::collections::BTreeMap::new();
            for (tree, _) in trees {
                let pages = t.apply_key_ranges(tree, &mut images)?;
                touched.push((tree.root(), pages));
            }
            Ok(images.into_iter().collect::<Vec<_>>())
        });
        match tree_images {
            Ok(images) => Ok((AppliedTrees { latches, touched }, images)),
            Err(e) => {
                drop(latches);
                t.pages.clear();
                self.give_back(t);
                Err(e)
            }
        }
    }

    /// Appends a batch of `t`'s commit records, registering the commit as in
    /// flight for snapshots from its first batch on (`versions.rs`): a
    /// snapshot beginning from here until the commit is installed sees
    /// none of it.
    fn append_in_flight(&self, t: &mut Txn, refs: &[&[u8]]) -> Result<Vec<Lsn>> {
        self.versions.append_in_flight(&mut t.in_flight, || {
            // At or before the start of the batch's first record (a
            // record's LSN is where it ends).
            let start = self.wal.end_lsn();
            let got = self
                .wal
                .append(refs)
                .inspect_err(|e| self.poison(format!("log append failed: {e}")))?;
            let end = got.last().copied().unwrap_or(start);
            Ok((start, end, got))
        })
    }

    /// The commit of `t` is installed (or failed): no longer in flight.
    pub(super) fn commit_installed(&self, t: &mut Txn) {
        if let Some(first) = t.in_flight.take() {
            if std::mem::take(&mut t.built_on_pending) {
                self.versions.wait_for_older(first, self.locks.options().timeout);
            }
            self.versions.commit_done(first, self.wal.end_lsn());
        }
    }

    /// IX on the group of each tree a commit applies key-range changes to.
    fn lock_tree_groups(
        &self,
        t: &mut Txn,
        trees: &[(crate::btree::BTree, std::sync::Arc<super::TreeState>)],
    ) -> Result<()> {
        for (tree, _) in trees {
            if let Some(g) = self.space.group_of_page(tree.root()) {
                t.lock(crate::lock::Resource::Group(g), crate::lock::LockMode::IX)?;
            }
        }
        Ok(())
    }

    /// Phase 1: appends one PAGE record per private page, then the COMMIT
    /// with the pages to free, and registers those frees (under the gate,
    /// with the COMMIT, so a checkpoint sees both or neither). Returns each
    /// page's LSN and the COMMIT's LSN. Nothing is decided if this fails.
    /// `tree_images` are the pages the transaction's key-range tree changes
    /// made (`keys.rs`), logged and registered as object-level pages are.
    pub(super) fn append_records(&self, t: &mut Txn, tree_images: TreeImages) -> Result<(Vec<(PageId, Lsn)>, Lsn)> {
        let db = self;
        let ids = t.pages.ids();
        let frees: Vec<PageId> = t.to_free.iter().copied().collect();
        let mut lsns: Vec<(PageId, Lsn)> = Vec::with_capacity(ids.len());
        let mut batch: Vec<Vec<u8>> = Vec::new();
        let mut batch_ids: Vec<PageId> = Vec::new();
        let mut batch_bytes = 0usize;
        for (i, &id) in ids.iter().enumerate() {
            let rec = {
                let after = t
                    .pages
                    .get(id)?
                    .ok_or_else(|| Error::Internal(format!("private page {id} vanished before commit")))?;
                if t.full_images {
                    // A file-server commit: its client writes the page.
                    redo::page_record(t.id, id, None, after)
                } else {
                    let base = db.pool.read(id)?;
                    let full = db.sink.needs_full_image(page::lsn(&base));
                    redo::page_record(t.id, id, (!full).then_some(&base[..]), after)
                }
            };
            batch_bytes += rec.len();
            batch.push(rec);
            batch_ids.push(id);
            if batch_bytes >= APPEND_BATCH_BYTES && i + 1 < ids.len() {
                let refs: Vec<&[u8]> = batch.iter().map(|r| &r[..]).collect();
                let got = db.append_in_flight(t, &refs)?;
                lsns.extend(batch_ids.drain(..).zip(got));
                batch.clear();
                batch_bytes = 0;
            }
        }
        // Object-level changes go last, in the COMMIT's batch, applied to
        // each page's newest image under `newest`: the next commit to the
        // page must see this one's image as its base, and nothing may fail
        // between registering the image and appending the COMMIT.
        let mut newest = (!t.objects.is_empty() || !tree_images.is_empty()).then(|| lock(&db.newest));
        let rebased = match &newest {
            Some(newest) => db.rebase_records(t, newest, tree_images, &mut batch, &mut batch_ids)?,
            None => Vec::new(),
        };
        batch.push(
            Redo::Commit {
                txn: t.id,
                frees: frees.clone(),
            }
            .encode(),
        );
        let refs: Vec<&[u8]> = batch.iter().map(|r| &r[..]).collect();
        let got = db.append_in_flight(t, &refs)?;
        let commit_lsn = *got.last().expect("the batch holds the COMMIT");
        t.commit_lsn = Some(commit_lsn);
        let first_rebased = batch_ids.len() - rebased.len();
        if let Some(newest) = &mut newest {
            for ((id, mut after), &lsn) in rebased.into_iter().zip(&got[first_rebased..]) {
                page::set_lsn(&mut after, lsn);
                let image: std::sync::Arc<[u8]> = after.into();
                newest.insert(id, (lsn, image.clone()));
                lock(&db.pending_images)
                    .entry(id)
                    .or_default()
                    .insert(lsn, image.clone());
                t.rebased.push((id, lsn, image));
            }
        }
        drop(newest);
        lsns.extend(batch_ids.drain(..).zip(got));
        // Decided. Its allocations are committed pages now; its frees are
        // owed until the FREE actions run.
        db.drop_pending_allocations(t.id, &t.allocated);
        let mut pending = lock(&db.pending_frees);
        for p in frees {
            pending.insert(p, t.id);
        }
        Ok((lsns, commit_lsn))
    }

    /// The object-level and key-range changes of `t` applied to each page's
    /// newest image (`newest`'s, else the committed one): their PAGE records
    /// go into `batch`, and the pages' new images are returned, in order.
    /// Sets [`Txn::built_on_pending`](super::Txn) when an image built on was
    /// made by a commit still in flight.
    fn rebase_records(
        &self,
        t: &mut Txn,
        newest: &crate::fxhash::FxHashMap<PageId, super::db::NewestImage>,
        tree_images: TreeImages,
        batch: &mut Vec<Vec<u8>>,
        batch_ids: &mut Vec<PageId>,
    ) -> Result<Vec<(PageId, Vec<u8>)>> {
        let base_of = |id: PageId| -> Result<Vec<u8>> {
            Ok(match newest.get(&id) {
                Some((_, image)) => image.to_vec(),
                None => self.pool.read(id)?.to_vec(),
            })
        };
        let mut rebased = Vec::new();
        let mut bases = Vec::new();
        let objects: Vec<(PageId, Option<Vec<u8>>)> = t.objects.page_ids().into_iter().map(|id| (id, None)).collect();
        let trees = tree_images.into_iter().map(|(id, after)| (id, Some(after)));
        for (id, after) in objects.into_iter().chain(trees) {
            let base = base_of(id)?;
            bases.push(page::lsn(&base));
            let after = match after {
                Some(after) => after,
                None => {
                    let after = t.rebase(id, &base)?;
                    if let Some(diffs) = &mut t.object_diffs {
                        diffs.push(PageDiff {
                            page: id,
                            base: page::lsn(&base),
                            runs: redo::diff(Some(&base), &after),
                        });
                    }
                    after
                }
            };
            let full = self.sink.needs_full_image(page::lsn(&base));
            batch.push(redo::page_record(t.id, id, (!full).then_some(&base[..]), &after));
            batch_ids.push(id);
            rebased.push((id, after));
        }
        // Built on an image another commit still in flight made (one not
        // installed yet, or installed while that commit installs its other
        // pages): this one ends only after that one (`commit_installed`),
        // or a snapshot could see this image, with part of the other in
        // it, and not the rest of the other.
        t.built_on_pending = self.versions.any_in_flight(&bases);
        Ok(rebased)
    }

    /// Phase 2: waits for the log to be durable up to the COMMIT (group
    /// commit), then installs every page in the buffer pool stamped with its
    /// record's LSN. Called under the gate.
    pub(super) fn make_durable_and_install(&self, t: &mut Txn, lsns: &[(PageId, Lsn)], commit_lsn: Lsn) -> Result<()> {
        self.wal.flush(commit_lsn)?;
        t.installed = lsns.to_vec();
        self.install_rebased(t)?;
        for &(id, lsn) in lsns {
            if !t.pages.contains(id) {
                continue;
            }
            let after = t
                .pages
                .get(id)?
                .ok_or_else(|| Error::Internal(format!("private page {id} vanished during commit")))?;
            let mut g = self.pool.write(id)?;
            // Kept before it is replaced: a snapshot that sees the new
            // image (it is newer than the snapshot) finds the old one.
            self.versions.keep(id, page::lsn(&g), lsn, &g, self.wal.end_lsn());
            g.copy_from_slice(after);
            page::set_lsn(&mut g, lsn);
        }
        Ok(())
    }

    /// Installs the images of `t`'s object-level and key-range changes
    /// (made on each page's newest image, `append_records`) in the buffer
    /// pool, each stamped with its record's LSN, once the log is durable up
    /// to its COMMIT.
    pub(super) fn install_rebased(&self, t: &mut Txn) -> Result<()> {
        for (id, lsn, image) in std::mem::take(&mut t.rebased) {
            // A later commit to the page may have installed its image (built
            // on this one) first: then this one is in it already.
            {
                let mut g = self.pool.write(id)?;
                if page::lsn(&g) < lsn {
                    self.keep_replaced(id, &g, lsn);
                    g.copy_from_slice(&image);
                }
                let mut pending = lock(&self.pending_images);
                if let Some(m) = pending.get_mut(&id) {
                    m.remove(&lsn);
                    if m.is_empty() {
                        pending.remove(&id);
                    }
                }
            }
            let mut newest = lock(&self.newest);
            if newest.get(&id).is_some_and(|(l, _)| *l == lsn) {
                newest.remove(&id);
            }
        }
        Ok(())
    }

    /// Hands the version store the committed image `g` of page `id` that
    /// the image of LSN `lsn` replaces — and, between them, the images of
    /// earlier commits to the page logged but not installed yet (this one
    /// was built on them, and installs first): each valid from its LSN to
    /// the next, so a snapshot that sees an earlier commit and not this one
    /// finds the page as that commit left it.
    fn keep_replaced(&self, id: PageId, g: &[u8], lsn: Lsn) {
        let end = self.wal.end_lsn();
        let cur = page::lsn(g);
        let between: Vec<(Lsn, std::sync::Arc<[u8]>)> = lock(&self.pending_images)
            .get(&id)
            .map(|m| {
                m.range((std::ops::Bound::Excluded(cur), std::ops::Bound::Excluded(lsn)))
                    .map(|(l, i)| (*l, i.clone()))
                    .collect()
            })
            .unwrap_or_default();
        let mut from = cur;
        let mut image: &[u8] = g;
        for (l, next) in &between {
            self.versions.keep(id, from, *l, image, end);
            from = *l;
            image = next;
        }
        self.versions.keep(id, from, lsn, image, end);
    }

    /// Phase 3: the deferred frees, each a system action; each page leaves
    /// the pending list under the Volume mutex together with its FREE, so a
    /// checkpoint never records a page as owed that was already freed (and
    /// maybe allocated again).
    pub(super) fn free_deferred(&self, t: &mut Txn) -> Result<()> {
        if t.to_free.is_empty() {
            return Ok(());
        }
        // Before the space map lets them go: a snapshot that does not see
        // this commit still finds each page in use, and its last image
        // (the free formats it anew).
        if let Some(at) = t.commit_lsn {
            let end = self.wal.end_lsn();
            for &p in &t.to_free {
                self.versions.note_freed(p, at);
                let g = self.pool.read(p)?;
                self.versions.keep(p, page::lsn(&g), at, &g, end);
            }
        }
        let mut vol = lock(&self.vol);
        for p in std::mem::take(&mut t.to_free) {
            vol.free_logged(p)?;
            lock(&self.pending_frees).remove(&p);
        }
        Ok(())
    }

    /// Gives back what an aborting transaction allocated (each a logged
    /// FREE); a failure poisons the database.
    pub(super) fn give_back(&self, t: &Txn) {
        if !t.allocated.is_empty() {
            let mut vol = lock(&self.vol);
            for &p in &t.allocated {
                if vol.is_page_in_use(p) {
                    if let Err(e) = vol.free_logged(p) {
                        self.poison(format!("giving back page {p} at abort failed: {e}"));
                        break;
                    }
                }
            }
        }
        self.counters.aborts.fetch_add(1, Ordering::Relaxed);
    }

    /// [`Backend::reserve_room`](super::Backend::reserve_room): grants
    /// `bytes` on `page` to `txn` if the room of the page's newest image
    /// covers them besides every other transaction's reservation. Holding
    /// `reserved` while the room is read keeps the count safe: a commit
    /// installs its changes before its transaction's reservation ends, so
    /// at worst they are counted twice, never not at all.
    pub(super) fn reserve_room_for(&self, txn: crate::ids::TxnId, page: PageId, bytes: usize) -> Result<bool> {
        let mut reserved = lock(&self.reserved);
        let newest = lock(&self.newest).get(&page).map(|(_, image)| image.clone());
        let room = match newest {
            Some(image) => crate::record::slotted::room(&image)?,
            None => crate::record::slotted::room(&self.pool.read(page)?)?,
        };
        let entry = reserved.entry(page).or_default();
        let others: usize = entry.iter().filter(|(t, _)| *t != txn).map(|(_, b)| b).sum();
        if others.saturating_add(bytes) > room {
            return Ok(false);
        }
        entry.retain(|(t, _)| *t != txn);
        entry.push((txn, bytes));
        Ok(true)
    }

    /// The room [`Shared::reserve_room_for`] would grant `txn` on `page`
    /// now: the newest image's room less every other transaction's
    /// reservation there.
    pub(super) fn room_left_for(&self, txn: crate::ids::TxnId, page: PageId) -> Result<usize> {
        let reserved = lock(&self.reserved);
        let newest = lock(&self.newest).get(&page).map(|(_, image)| image.clone());
        let room = match newest {
            Some(image) => crate::record::slotted::room(&image)?,
            None => crate::record::slotted::room(&self.pool.read(page)?)?,
        };
        let others: usize = reserved
            .get(&page)
            .map_or(0, |e| e.iter().filter(|(t, _)| *t != txn).map(|(_, b)| b).sum());
        Ok(room.saturating_sub(others))
    }

    /// Ends `txn`'s reservations of room (it committed or rolled back).
    pub(super) fn release_room(&self, txn: crate::ids::TxnId) {
        let mut reserved = lock(&self.reserved);
        if reserved.is_empty() {
            return;
        }
        reserved.retain(|_, entry| {
            entry.retain(|(t, _)| *t != txn);
            !entry.is_empty()
        });
    }

    /// Forgets `txn`'s entries in the pending allocations (only its own: a
    /// page it freed may already be another's). Called under the commit
    /// gate right after the COMMIT record is appended, and at the end.
    pub(super) fn drop_pending_allocations(&self, txn: crate::ids::TxnId, allocated: &[PageId]) {
        let mut pending = lock(&self.pending_alloc);
        for p in allocated {
            if pending.get(p) == Some(&txn) {
                pending.remove(p);
            }
        }
    }
}
