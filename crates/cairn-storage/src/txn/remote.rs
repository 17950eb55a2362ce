//! The server's side of a remote transaction (a page-server client,
//! ARCHITECTURE.md): the client runs the record, large-object and B+-tree code over
//! pages it fetched, and at commit ships the PAGE redo records the embedded
//! commit would have built. The server keeps one [`Txn`] per client
//! transaction for its locks and allocations, and:
//!
//! - [`Txn::fetch_page`] locks a page (S, or X for a change) and hands out
//!   its committed image (the page service, lock piggy-backed);
//! - [`Txn::stage_redo`] verifies a client's PAGE records and turns them
//!   into this transaction's private pages, so that [`Txn::commit`] — the
//!   one commit algorithm — logs, makes durable and installs them.
//!
//! **The server trusts no client.** A record is refused (and nothing of the
//! batch is staged) unless it decodes, names this transaction, names a page
//! inside the volume that this transaction holds X on (a page it frees at
//! commit may carry a last change, as in the embedded commit), its
//! runs stay inside the page, the page is a kind a client may change
//! (slotted, large-object and B+-tree pages; never the header, space map,
//! group directory, extent lists or a free page) and stays the same kind (a
//! B+-tree root that splits turns from a leaf into an inner node in place),
//! and the page is well formed for its kind after the change; before the
//! commit is logged, the links between the changed pages are checked as a
//! whole (`client_check.rs` has every rule).

use crate::error::{Error, Result};
use crate::ids::{Lsn, PageId, TxnId};
use crate::lock::{LockMode, Resource};
use crate::page::{self, PageType};
use crate::record::object::ObjectSpace;
use crate::wal::redo::{self, Redo};

use super::client_check::{check_client_image, refuse};
use super::Txn;

impl Txn {
    /// Locks `id` for this transaction (X if `exclusive`, else S) and returns
    /// the page's committed image: what a page-server client caches and
    /// changes privately.
    pub fn fetch_page(&mut self, id: PageId, exclusive: bool) -> Result<Vec<u8>> {
        self.check_fetchable(id)?;
        self.lock_page(id, exclusive)?;
        // The committed image, never a private copy: a remote client keeps
        // its changes itself.
        self.committed_image(id)
    }

    /// [`Txn::fetch_page`], if it can be done **without waiting**: the
    /// lock (X if `exclusive`, else S) is granted at once (or held) and the
    /// committed image is in the buffer pool. `None` when either is not so;
    /// the caller then calls [`Txn::fetch_page`] where it may wait (a lock
    /// granted here stays held, so that asks nothing twice). A server
    /// answers a warm fetch on its network thread this way, without handing
    /// the request to a thread that may block.
    pub fn try_fetch_page(&mut self, id: PageId, exclusive: bool) -> Result<Option<Vec<u8>>> {
        self.check_fetchable(id)?;
        let mode = if exclusive { LockMode::X } else { LockMode::S };
        if !self.try_lock_resource(Resource::Page(id), mode)? {
            return Ok(None);
        }
        let mut image = Vec::new();
        let found = self.db.read_committed_cached(id, &mut |b| image = b.to_vec());
        if found.inspect_err(|e| self.doom_if_fatal(e))? {
            Ok(Some(image))
        } else {
            Ok(None)
        }
    }

    /// The image of `id` as this snapshot transaction sees it (see
    /// `txn::versions`): what a server sends a remote client reading at a
    /// snapshot. No lock; a transaction not at a snapshot is refused.
    pub fn snapshot_page(&mut self, id: PageId) -> Result<Vec<u8>> {
        self.check_active()?;
        let Some(snap) = self.snapshot else {
            return Err(Error::InvalidArgument(format!("{} is not at a snapshot", self.id)));
        };
        if id.0 >= self.page_count() {
            return Err(Error::InvalidArgument(format!(
                "page {id} is past the end of the volume ({} pages)",
                self.page_count()
            )));
        }
        let mut image = Vec::new();
        self.db.read_at(id, snap, &mut |b| image = b.to_vec())?;
        Ok(image)
    }

    /// The committed image of `page` if it is in the buffer pool now (no
    /// read from disk, no lock: the caller locks what it trusts of it);
    /// `None` if it is not, or is past the end of the volume.
    pub fn try_committed_page_image(&mut self, page: PageId) -> Result<Option<Vec<u8>>> {
        if page.0 >= self.page_count() {
            return Ok(None);
        }
        let mut image = Vec::new();
        let found = self.db.read_committed_cached(page, &mut |b| image = b.to_vec());
        Ok(found.inspect_err(|e| self.doom_if_fatal(e))?.then_some(image))
    }

    /// Refuses a fetch in a transaction that has ended, or of a page past
    /// the end of the volume (an error naming the page).
    fn check_fetchable(&self, id: PageId) -> Result<()> {
        self.check_active()?;
        if self.snapshot.is_some() {
            // Its pages are the snapshot's (`Txn::snapshot_page`), and it
            // locks nothing.
            return Err(Error::InvalidArgument(format!(
                "{} is a snapshot: it reads pages as of its snapshot, without locks",
                self.id
            )));
        }
        if id.0 >= self.page_count() {
            return Err(Error::InvalidArgument(format!(
                "page {id} is past the end of the volume ({} pages)",
                self.page_count()
            )));
        }
        Ok(())
    }

    /// Verifies a client's PAGE redo records (see the module docs) and stages
    /// each as this transaction's private page. Each record must name
    /// `named`, the id the client knows this transaction by (the server's
    /// own id for it, [`Txn::id`], is what its log records carry). All or
    /// nothing: a refused record stages none of the batch, and the error
    /// names the page and why.
    pub fn stage_redo(&mut self, records: &[&[u8]], named: TxnId) -> Result<()> {
        self.check_active()?;
        if self.snapshot.is_some() && !records.is_empty() {
            return Err(Error::ReadOnlyTxn(self.id));
        }
        let mut staged: Vec<(PageId, Vec<u8>)> = Vec::with_capacity(records.len());
        for (i, bytes) in records.iter().enumerate() {
            let (id, after) = self.verify_record(bytes, i, &staged, named)?;
            stage_one(&mut staged, id, after);
        }
        self.stage_pages(staged)
    }

    /// Puts verified after-images into the private pages (the last of each
    /// page wins). Straight in: a page the transaction frees at commit may
    /// carry a last change too (the embedded commit installs it before the
    /// free, see `PageAccess::free`).
    pub(super) fn stage_pages(&mut self, staged: Vec<(PageId, Vec<u8>)>) -> Result<()> {
        for (id, after) in staged {
            self.changes += 1;
            self.client_pages.insert(id);
            self.client_checked = true;
            self.put_private(id, &after)?;
        }
        Ok(())
    }

    /// Makes `image` this transaction's private copy of page `id`.
    fn put_private(&mut self, id: PageId, image: &[u8]) -> Result<()> {
        match self.pages.get_mut(id)? {
            Some(p) => p.copy_from_slice(image),
            None => {
                let spilled = self.pages.insert(id, image)?;
                self.db.note_spilled(spilled);
            }
        }
        Ok(())
    }

    /// Checks one record and returns the page it names with its new image.
    fn verify_record(
        &mut self,
        bytes: &[u8],
        index: usize,
        staged: &[(PageId, Vec<u8>)],
        named: TxnId,
    ) -> Result<(PageId, Vec<u8>)> {
        let ClientRecord { id, full, runs } = self.client_record(bytes, index, named)?;
        let base = match staged.iter().find(|(p, _)| *p == id) {
            Some((_, img)) => img.clone(),
            None => self.current_image(id)?,
        };
        let base_type = page::page_type(&base);
        if !base_type.is_some_and(PageType::is_client_kind) {
            return Err(refuse(
                index,
                id,
                format!("a client may not change a page of kind {base_type:?}"),
            ));
        }
        let mut after = base.clone();
        redo::apply(&mut after, id, full, &runs, page::lsn(&base)).map_err(|e| malformed(index, id, &e))?;
        self.check_client_after(index, id, &after)?;
        Ok((id, after))
    }

    /// Runs a catalog change through the backend ([`super::Backend::catalog_change`]):
    /// the server's answer for a remote client, `None` where the caller
    /// runs the change itself.
    pub fn catalog_change(&mut self, change: &[u8]) -> Result<Option<Vec<u8>>> {
        self.check_active()?;
        let backend = self.db.clone();
        backend.catalog_change(self, change)
    }

    /// Marks `pages` as changed (or allocated) by the server's own code for
    /// this client transaction (a catalog request): no client record may
    /// change them ([`Txn::stage_redo`] refuses one), and the commit's check
    /// of the client's links takes the server's word for theirs.
    pub fn note_server_pages(&mut self, pages: impl IntoIterator<Item = PageId>) {
        self.server_pages.extend(pages);
    }

    /// A client's side of a catalog request: the server's images of the
    /// pages it changed in this transaction become private pages the
    /// transaction reads, and its commit does not ship
    /// ([`Txn::server_pages`]); they are the server's, committed or
    /// dropped with the transaction there.
    pub fn stage_server_pages(&mut self, images: Vec<(PageId, Vec<u8>)>) -> Result<()> {
        self.check_active()?;
        for (id, image) in &images {
            if image.len() != self.db.page_size() {
                return Err(Error::InvalidArgument(format!(
                    "the server's image of page {id} has {} bytes, not {}",
                    image.len(),
                    self.db.page_size()
                )));
            }
        }
        for (id, image) in images {
            self.changes += 1;
            self.server_pages.insert(id);
            self.put_private(id, &image)?;
        }
        Ok(())
    }

    /// The pages the server changed for this transaction (see
    /// [`Txn::note_server_pages`], [`Txn::stage_server_pages`]).
    pub fn server_pages(&self) -> &std::collections::BTreeSet<PageId> {
        &self.server_pages
    }

    /// Decodes a client's record `index` and checks what every client
    /// record must be: a PAGE record naming `named`, of a page inside the
    /// volume that this transaction holds X on.
    pub(super) fn client_record(&self, bytes: &[u8], index: usize, named: TxnId) -> Result<ClientRecord> {
        let Redo::Page {
            txn,
            page: id,
            full,
            runs,
        } = Redo::decode(bytes, Lsn(0)).map_err(|e| {
            // A client's bytes that do not decode are the client's fault,
            // not damage to the log: INVALID, never CORRUPT.
            Error::InvalidArgument(format!("redo record {index} does not decode: {}", reason_of(&e)))
        })?
        else {
            return Err(Error::InvalidArgument(format!(
                "redo record {index} is not a PAGE record"
            )));
        };
        if txn != named {
            return Err(refuse(
                index,
                id,
                format!("it names {txn}, the session's transaction is {named}"),
            ));
        }
        if id.0 >= self.page_count() {
            return Err(refuse(index, id, "past the end of the volume".into()));
        }
        if !self.holds(Resource::Page(id), LockMode::X) {
            return Err(refuse(index, id, "the transaction does not hold X on the page".into()));
        }
        if self.server_pages.contains(&id) {
            return Err(refuse(
                index,
                id,
                "the server changed it for a catalog request of this transaction; no client record may".into(),
            ));
        }
        if let Some(why) = self.protected_reason(id) {
            return Err(refuse(index, id, why));
        }
        Ok(ClientRecord { id, full, runs })
    }
}

/// What a server checks at commit of a page whose image a page client
/// sends only then ([`Txn::check_at_commit`]): a catalog change named it
/// before the server could read it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommitCheck {
    /// The object exists (a named root names it).
    Object(crate::ids::Oid),
    /// The page is a B+-tree root in `group` (an index names it).
    TreeRoot {
        /// The root page.
        page: PageId,
        /// The group it must be in.
        group: crate::ids::GroupId,
    },
}

impl CommitCheck {
    fn page(&self) -> PageId {
        match self {
            CommitCheck::Object(oid) => oid.page,
            CommitCheck::TreeRoot { page, .. } => *page,
        }
    }
}

impl Txn {
    /// For a page client's transaction on the server: if the client sends
    /// `check`'s page with its commit (the transaction holds X on it, and
    /// the page is not one the server changed for it), keeps `check` to be
    /// made then, before anything is logged, and says true. False
    /// otherwise: the page is readable here as it is.
    pub fn check_at_commit(&mut self, check: CommitCheck) -> bool {
        let page = check.page();
        if !self.client_checked || self.server_pages.contains(&page) || !self.holds(Resource::Page(page), LockMode::X) {
            return false;
        }
        self.commit_checks.push(check);
        true
    }

    /// A catalog change of this transaction let go of the B+-tree at
    /// `root` (an index dropped): the client may free its pages, its root
    /// among them, which no client may otherwise free under a restriction.
    pub fn release_root(&mut self, root: PageId) {
        self.released_roots.insert(root);
    }

    /// Makes the checks [`Txn::check_at_commit`] kept, on the pages as the
    /// client's records left them.
    pub(super) fn make_commit_checks(&mut self) -> Result<()> {
        for check in std::mem::take(&mut self.commit_checks) {
            let page = check.page();
            let image = self.current_image(page)?;
            let why = match check {
                CommitCheck::Object(oid) => {
                    let home = page::page_type(&image) == Some(PageType::Slotted)
                        && crate::record::slotted::get(&image, oid.slot).is_ok_and(|r| {
                            r.is_some_and(|r| {
                                r.uniq == oid.uniq
                                    && matches!(
                                        r.kind,
                                        crate::record::object::KIND_SMALL
                                            | crate::record::object::KIND_SMALL_PADDED
                                            | crate::record::object::KIND_FORWARD
                                            | crate::record::object::KIND_LARGE
                                    )
                            })
                        });
                    (!home).then(|| format!("a named root names object {oid}, which the commit does not hold"))
                }
                CommitCheck::TreeRoot { group, .. } => {
                    let root = crate::btree::page_links(&image).is_ok_and(|l| l.root);
                    let in_group = self.group_of_page(page)? == Some(group);
                    (!root || !in_group).then(|| {
                        format!(
                            "an index names page {page}, which the commit leaves no B+-tree root of group {}",
                            group.0
                        )
                    })
                }
            };
            if let Some(why) = why {
                return Err(Error::InvalidArgument(format!(
                    "{} refused: {why} (the catalog change was made on the client's word)",
                    self.id
                )));
            }
        }
        Ok(())
    }
}

/// A client's PAGE record, decoded ([`Txn::client_record`]).
pub(super) struct ClientRecord {
    pub(super) id: PageId,
    pub(super) full: bool,
    pub(super) runs: Vec<(u32, Vec<u8>)>,
}

/// The error refusing a client's record `index` of page `page` whose runs do
/// not apply to the page.
pub(super) fn malformed(index: usize, page: PageId, e: &Error) -> Error {
    refuse(
        index,
        page,
        format!("its changes do not apply to the page: {}", reason_of(e)),
    )
}

/// What an error says, without the place a storage error prefixes.
fn reason_of(e: &Error) -> String {
    match e {
        Error::Corrupt { reason, .. } | Error::CorruptLog { reason, .. } => reason.clone(),
        other => other.to_string(),
    }
}

impl Txn {
    /// Checks a page as a client's record `index` leaves it, on its own and
    /// against its committed image (`client_check.rs`).
    pub(super) fn check_client_after(&mut self, index: usize, id: PageId, after: &[u8]) -> Result<()> {
        let before = self.committed_image(id)?;
        let allocated = self.allocated.contains(&id);
        let tree_page = matches!(
            crate::page::page_type(&before),
            Some(crate::page::PageType::BTreeLeaf | crate::page::PageType::BTreeInner)
        );
        if tree_page && !allocated && self.db.key_ranges().is_some() {
            // Its entries change at commits under the tree's latch and no
            // page lock (`server_trees.rs`): a client's image of it would
            // undo every entry applied since the client read it.
            return Err(refuse(
                index,
                id,
                "it is a page of a B+-tree, and this server locks key ranges: a tree the transaction did not make \
                 changes only through its tree requests (TREE_APPLY, TREE_DESTROY)"
                    .into(),
            ));
        }
        check_client_image(index, id, &before, after, allocated, self.page_count())
    }
}

/// Adds `after` as page `id`'s image to a batch being verified, replacing
/// an earlier one of the same page.
pub(super) fn stage_one(staged: &mut Vec<(PageId, Vec<u8>)>, id: PageId, after: Vec<u8>) {
    match staged.iter_mut().find(|(p, _)| *p == id) {
        Some((_, img)) => *img = after,
        None => staged.push((id, after)),
    }
}
