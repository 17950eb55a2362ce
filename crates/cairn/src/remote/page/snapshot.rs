//! Read-only transactions at a snapshot on the page and file clients.
//!
//! [`RemoteStore::begin_read_only`] sends SNAPSHOT: the server begins a
//! read-only transaction at a snapshot of its last committed state (its
//! version store keeps the page versions the snapshot reads) and answers
//! with the snapshot's window ([`SnapshotInfo`]). The client's [`Txn`] is
//! put at that snapshot ([`Txn::set_snapshot`]): it takes no lock, and
//! reads every page through [`Backend::read_at`](cairn_storage::txn::Backend::read_at),
//! answered here, in this order:
//!
//! 1. **What it read before**: a snapshot's version of a page never
//!    changes, so the transaction keeps each page it read (up to
//!    [`SNAPSHOT_PAGES_MAX`]; past that the oldest go, and are read again).
//! 2. **The pool, under a right**: if the client holds the right to cache
//!    the page (and none of its own transactions is writing it), the
//!    pool's image is the newest committed one, or was when the right was
//!    checked, after the snapshot began. No commit the snapshot sees can
//!    then be newer than it, so it is the snapshot's version exactly when
//!    the window sees its LSN. An image newer than the snapshot is never
//!    used for it. Nothing is registered under the right: a callback names
//!    no snapshot, so a writer never waits for one.
//! 3. **The server**: FETCH in mode [`FETCH_SNAPSHOT`], naming the LSN of
//!    the pool's copy (the server answers UNCHANGED when that is the
//!    snapshot's version). Several pages at once for a prefetch.
//!
//! What a page is (in use, its group) comes from the same places. The
//! images a snapshot fetches are kept with the transaction. One that is
//! the page's committed image comes with the right to cache it when no
//! writer is at the page (the server takes S for a moment to know): it
//! then goes into the pool under that right, as a FETCH's does, so a
//! client that reads only at snapshots warms its cache; an older version
//! never goes into the pool (which holds only committed images), nor is
//! the typed layer told of it. The transaction ends with ABORT (one way),
//! which ends the server's snapshot.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use cairn_net::page_service::{
    FetchStatus, Fetched, PageRequest, SnapshotInfo, FETCH_PAGES_MAX, FETCH_SNAPSHOT, NO_GROUP,
};
use cairn_storage::io::{OsVfs, Vfs};
use cairn_storage::lock::LockOwner;
use cairn_storage::page;
use cairn_storage::txn::{Backend, Snapshot};
use cairn_storage::{ClientId, Error, GroupId, Lsn, PageId, Result, Txn, TxnId};

use super::rights::{Cover, Facts, TxnView};
use super::RemoteStore;

/// Pages one snapshot transaction keeps; past it the oldest go (and are
/// read again if needed: a snapshot's version does not change).
pub(super) const SNAPSHOT_PAGES_MAX: usize = 4096;

/// A snapshot transaction's own state.
pub(super) struct SnapView {
    /// What it sees.
    pub(super) window: SnapshotInfo,
    /// The client's lookup clock when it was asked for: a lookup kept
    /// under rights taken in by then, and held, is what it sees
    /// (`trees.rs`).
    pub(super) asked: u64,
    /// The pages it read, as of the snapshot, in the order read.
    pages: cairn_storage::fxhash::FxHashMap<PageId, Arc<[u8]>>,
    order: std::collections::VecDeque<PageId>,
}

impl SnapView {
    fn keep(&mut self, id: PageId, image: Arc<[u8]>) {
        if self.pages.insert(id, image).is_none() {
            self.order.push_back(id);
        }
        while self.order.len() > SNAPSHOT_PAGES_MAX {
            if let Some(old) = self.order.pop_front() {
                self.pages.remove(&old);
            }
        }
    }
}

impl RemoteStore {
    /// Starts a read-only transaction at a snapshot of the server's last
    /// committed state (one round trip, SNAPSHOT): it sees every commit
    /// that returned before it began and none after, takes no lock, never
    /// waits for a writer nor makes one wait, and never aborts for a
    /// conflict. It reads pages this client caches under a right when the
    /// snapshot sees them, else asks the server for them as of the
    /// snapshot (see the module docs). A change is
    /// [`Error::ReadOnlyTxn`]; a snapshot that outlives the server's version
    /// store fails with [`Error::SnapshotTooOld`].
    pub fn begin_read_only(self: &Arc<Self>) -> Result<Txn> {
        self.check_usable()?;
        let id = TxnId(self.next_txn.fetch_add(1, Ordering::Relaxed));
        let asked = self.rights.lock().clock;
        let body = self.conn.call_one(&PageRequest::Snapshot { txn: id.0 })?;
        let window = SnapshotInfo::decode(&body).map_err(|e| self.conn.error(cairn_net::Error::Message(e)))?;
        let low = window.low;
        let mut view = TxnView::default();
        // The server knows it: its end sends ABORT, which ends the snapshot.
        view.answering.on_server = true;
        view.snapshot = Some(Box::new(SnapView {
            window,
            asked,
            pages: Default::default(),
            order: Default::default(),
        }));
        self.rights.lock().txns.insert(id, view);
        let backend: Arc<dyn Backend> = self.clone();
        let vfs: Arc<dyn Vfs> = Arc::new(OsVfs);
        let mut txn = Txn::on_backend(
            backend,
            LockOwner::new(ClientId(0), id),
            self.txn_memory_bytes,
            Some((vfs, self.spill_dir.path())),
        );
        txn.set_snapshot(Snapshot {
            id: id.0,
            lsn: Lsn(low),
        })?;
        Ok(txn)
    }

    /// Whether `txn` is a snapshot transaction of this client.
    pub(super) fn is_snapshot(&self, txn: TxnId) -> bool {
        self.rights.lock().txns.get(&txn).is_some_and(|v| v.snapshot.is_some())
    }

    /// [`Backend::read_at`]: page `id` as snapshot `txn` sees it (see the
    /// module docs for where it comes from).
    pub(super) fn read_at_snapshot(&self, txn: TxnId, id: PageId, f: &mut dyn FnMut(&[u8])) -> Result<()> {
        // A second fetch only if the pool's copy the server called the
        // snapshot's was replaced meanwhile.
        for _ in 0..3 {
            if let Some(image) = self.snapshot_image(txn, id)? {
                f(&image);
                return Ok(());
            }
            let known = self
                .rights
                .lock()
                .txns
                .get(&txn)
                .and_then(|v| v.facts.get(&id).copied());
            if known.is_some_and(|f| !f.in_use) {
                return Err(Error::InvalidArgument(format!(
                    "page {id} is not in use (read at snapshot {txn})"
                )));
            }
            self.fetch_at_snapshot(txn, &[id])?;
        }
        Err(Error::Internal(format!(
            "page {id} read at snapshot {txn} did not stay with the snapshot"
        )))
    }

    /// The image of `id` snapshot `txn` read before, or the pool's under a
    /// right if the snapshot sees it (kept with the snapshot then); `None`
    /// if neither.
    fn snapshot_image(&self, txn: TxnId, id: PageId) -> Result<Option<Arc<[u8]>>> {
        let covered = {
            let st = self.rights.lock();
            let view = st.txns.get(&txn).ok_or_else(|| not_running(txn))?;
            let snap = view.snapshot.as_ref().ok_or_else(|| not_snapshot(txn))?;
            if let Some(image) = snap.pages.get(&id) {
                return Ok(Some(image.clone()));
            }
            // The right is checked before the pool is read: the image
            // then read is the one current at the check, after the
            // snapshot began, or a newer one.
            st.covers
                .get(&id)
                .filter(|_| !st.other_writer(id, txn))
                .map(|c| c.facts)
        };
        let Some(facts) = covered else {
            return Ok(None);
        };
        let Some(g) = self.pool.read_cached(id)? else {
            return Ok(None);
        };
        let mut st = self.rights.lock();
        let view = st.txns.get_mut(&txn).ok_or_else(|| not_running(txn))?;
        let snap = view.snapshot.as_mut().ok_or_else(|| not_snapshot(txn))?;
        if !snap.window.sees(page::lsn(&g).0) {
            return Ok(None);
        }
        let image: Arc<[u8]> = Arc::from(&g[..]);
        drop(g);
        snap.keep(id, image.clone());
        view.facts.insert(id, facts);
        self.conn.cache_hits.fetch_add(1, Ordering::Relaxed);
        Ok(Some(image))
    }

    /// What snapshot `txn` knows of page `id` (in use, its group), read at
    /// the snapshot if nothing yet.
    pub(super) fn snapshot_facts(&self, txn: TxnId, id: PageId) -> Result<Facts> {
        for _ in 0..3 {
            if let Some(f) = self
                .rights
                .lock()
                .txns
                .get(&txn)
                .and_then(|v| v.facts.get(&id).copied())
            {
                return Ok(f);
            }
            if self.snapshot_image(txn, id)?.is_none() {
                self.fetch_at_snapshot(txn, &[id])?;
            }
        }
        Err(Error::Internal(format!(
            "a read of page {id} at snapshot {txn} left nothing known of it"
        )))
    }

    /// Fetches `pages` at snapshot `txn` ([`FETCH_SNAPSHOT`]), those it has
    /// not read yet, [`FETCH_PAGES_MAX`] a request, every request sent
    /// before the first reply is read; keeps what comes with the snapshot.
    pub(super) fn fetch_at_snapshot(&self, txn: TxnId, pages: &[PageId]) -> Result<()> {
        let mut todo = Vec::new();
        for &p in pages {
            if !todo.contains(&p) && self.snapshot_image(txn, p)?.is_none() {
                todo.push(p);
            }
        }
        if todo.is_empty() {
            return Ok(());
        }
        // Rights may come with the parts: callbacks that overtake them are
        // remembered meanwhile.
        let _in_flight = self.rights.fetch();
        let mut calls = Vec::new();
        for chunk in todo.chunks(FETCH_PAGES_MAX) {
            let mut named = Vec::with_capacity(chunk.len());
            for &p in chunk {
                named.push((p.0, self.cached_lsn(p)?));
            }
            let call = self.send_fetch(txn, FETCH_SNAPSHOT | self.cache_flag(), &named)?;
            calls.push((call, named));
        }
        for (call, named) in calls {
            let parts = self.fetch_reply(txn, call)?;
            self.take_snapshot_parts(txn, &named, &parts)?;
        }
        self.give_back_rights();
        Ok(())
    }

    /// Takes in the parts of a snapshot's FETCH that named `named` (page,
    /// LSN of the pool's copy): each image (or the pool's copy it says is
    /// the snapshot's) kept with the snapshot, with what the page is.
    fn take_snapshot_parts(&self, txn: TxnId, named: &[(u32, u64)], parts: &[Bytes]) -> Result<()> {
        if parts.len() != named.len() + 1 || !parts[named.len()].is_empty() {
            return Err(self.conn.protocol("one FETCH part per page, then an empty final reply"));
        }
        for (part, &(p, lsn)) in parts.iter().zip(named) {
            let id = PageId(p);
            let f = Fetched::decode(part).map_err(|e| self.conn.error(cairn_net::Error::Message(e)))?;
            if f.page != p || (f.cover != 0 && (self.file.is_some() || f.status == FetchStatus::NotInUse)) {
                return Err(self
                    .conn
                    .protocol("the pages asked for, in order, a right only with a page"));
            }
            self.page_count.fetch_max(f.page_count, Ordering::Relaxed);
            let image: Option<Arc<[u8]>> = match f.status {
                FetchStatus::Image => {
                    page::verify(f.image, id)?;
                    self.conn.pages_shipped.fetch_add(1, Ordering::Relaxed);
                    if f.cover != 0 {
                        // The committed image (the server vouched): cached
                        // as a FETCH's is, the typed layer told.
                        self.install_newest(id, f.image)?;
                        self.new_image(id);
                    }
                    Some(Arc::from(f.image))
                }
                FetchStatus::Unchanged => {
                    if lsn == 0 || f.lsn != lsn {
                        return Err(self.conn.protocol("\"unchanged\" only for the LSN the client named"));
                    }
                    self.conn.pages_revalidated.fetch_add(1, Ordering::Relaxed);
                    // The pool's copy, if it is still that one (else the
                    // page is asked for again).
                    self.pool
                        .read_cached(id)?
                        .filter(|g| page::lsn(g).0 == lsn)
                        .map(|g| Arc::from(&g[..]))
                }
                FetchStatus::NotInUse => None,
                FetchStatus::NotGranted | FetchStatus::Locked => {
                    return Err(self
                        .conn
                        .protocol("a page image, UNCHANGED or NOT_IN_USE at a snapshot"));
                }
            };
            let mut st = self.rights.lock();
            let view = st.txns.get_mut(&txn).ok_or_else(|| not_running(txn))?;
            let in_use = f.status != FetchStatus::NotInUse;
            let group = (f.group != NO_GROUP).then_some(GroupId(f.group));
            let facts = Facts { in_use, group };
            if let Some(image) = image {
                view.facts.insert(id, facts);
                view.snapshot.as_mut().ok_or_else(|| not_snapshot(txn))?.keep(id, image);
            } else if !in_use {
                view.facts.insert(id, facts);
            }
            if f.cover != 0 && st.take_right(id, f.cover) {
                st.covers.insert(id, Cover { epoch: f.cover, facts });
            }
        }
        Ok(())
    }
}

fn not_running(txn: TxnId) -> Error {
    Error::TxnNotActive(txn)
}

fn not_snapshot(txn: TxnId) -> Error {
    Error::Internal(format!("{txn} is not a snapshot transaction"))
}
