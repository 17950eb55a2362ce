//! The page- and file-server client as a [`Backend`]: what a [`Txn`] asks
//! of [`RemoteStore`] (locks, committed pages, space, commit), answered from
//! its pool and rights to cache or with the server's page service.

use std::sync::atomic::Ordering;

use bytes::Bytes;

use cairn_net::page_service::{
    decode_commit_reply, decode_page, decode_pages, PageRequest, FETCH_S, FETCH_TRY_INSERT, FETCH_U, FETCH_X, NO_PAGE,
    RESOURCE_GROUP, RESOURCE_PAGE,
};
use cairn_storage::lock::{LockMode, LockOwner, Resource};
use cairn_storage::page::{self, PageType};
use cairn_storage::txn::{Backend, FillPages, ObjectMerges};
use cairn_storage::wal::redo;
use cairn_storage::{Error, GroupId, PageId, Result, Txn, TxnId};

use super::rights::Facts;
use super::{lock, wire_mode, RemoteStore};

impl RemoteStore {
    /// The FETCH mode that takes a page lock in `mode`. U is the server's
    /// to grant (a right to cache is an S in effect, and two updaters
    /// under it would both read and then deadlock on their upgrades to X).
    fn fetch_mode(&self, mode: LockMode) -> u8 {
        match mode {
            LockMode::X | LockMode::SIX | LockMode::IX | LockMode::A => FETCH_X,
            LockMode::U => FETCH_U,
            LockMode::S | LockMode::IS => FETCH_S,
        }
    }
}

impl Backend for RemoteStore {
    fn page_size(&self) -> usize {
        self.page_size
    }

    fn region_pages(&self) -> u32 {
        self.region_pages
    }

    fn check_usable(&self) -> Result<()> {
        if let Some(why) = &*lock(&self.broken) {
            return Err(Error::BackendLost {
                backend: self.conn.address.to_string(),
                reason: why.clone(),
            });
        }
        match self.conn.client.closed() {
            None => Ok(()),
            Some(e) => Err(self.conn.error(e)),
        }
    }

    fn lock(&self, owner: LockOwner, res: Resource, mode: LockMode) -> Result<()> {
        if self.holds(owner.txn, res, mode) {
            return Ok(());
        }
        match res {
            Resource::Page(p) => {
                let m = self.fetch_mode(mode);
                if m == FETCH_S && self.use_cover(owner.txn, p) {
                    return Ok(());
                }
                self.fetch(owner.txn, p, m, GroupId(0)).map(|_| ())
            }
            other => {
                let (resource, id) = match other {
                    Resource::Group(g) => (RESOURCE_GROUP, g.0),
                    _ => {
                        return Err(Error::InvalidArgument(format!(
                            "the page server locks pages and groups, not {other:?}"
                        )))
                    }
                };
                self.mark_on_server(owner.txn);
                self.conn.call_one(&PageRequest::Lock {
                    txn: owner.txn.0,
                    resource,
                    id,
                    mode: wire_mode(mode),
                    try_only: false,
                })?;
                let mut st = self.rights.lock();
                let held = st.txns.entry(owner.txn).or_default().locks.entry(res).or_insert(mode);
                *held = held.sup(mode);
                Ok(())
            }
        }
    }

    fn try_lock(&self, owner: LockOwner, res: Resource, mode: LockMode) -> Result<bool> {
        if self.holds(owner.txn, res, mode) {
            return Ok(true);
        }
        let (resource, id) = match res {
            Resource::Page(p) => (RESOURCE_PAGE, p.0),
            Resource::Group(g) => (RESOURCE_GROUP, g.0),
            other => {
                return Err(Error::InvalidArgument(format!(
                    "the page server locks pages and groups, not {other:?}"
                )))
            }
        };
        if let Resource::Page(p) = res {
            if !LockMode::U.covers(mode) {
                // Another transaction of this client reading the page under
                // the right would not be seen by the server's lock: not now.
                let mut st = self.rights.lock();
                let others = st
                    .txns
                    .iter()
                    .any(|(t, v)| *t != owner.txn && v.locks.contains_key(&res));
                if others {
                    return Ok(false);
                }
                st.add_writer(p, owner.txn);
            }
        }
        self.mark_on_server(owner.txn);
        let body = self.conn.call_one(&PageRequest::Lock {
            txn: owner.txn.0,
            resource,
            id,
            mode: wire_mode(mode),
            try_only: true,
        })?;
        let granted = body[..] == [1];
        if let (true, Resource::Page(p)) = (granted, res) {
            self.refresh_from_file(p)?;
        }
        if granted {
            let mut st = self.rights.lock();
            let held = st.txns.entry(owner.txn).or_default().locks.entry(res).or_insert(mode);
            *held = held.sup(mode);
        }
        Ok(granted)
    }

    fn read_committed(&self, id: PageId, f: &mut dyn FnMut(&[u8])) -> Result<()> {
        let g = self.pool.read(id)?;
        f(&g);
        Ok(())
    }

    fn read_at(&self, id: PageId, snap: cairn_storage::txn::Snapshot, f: &mut dyn FnMut(&[u8])) -> Result<()> {
        self.read_at_snapshot(TxnId(snap.id), id, f)
    }

    fn page_count(&self) -> u32 {
        self.page_count.load(Ordering::Relaxed)
    }

    fn group_exists(&self, group: GroupId) -> bool {
        if lock(&self.groups).contains_key(&group) {
            return true;
        }
        self.refresh_groups()
            .is_ok_and(|gs| gs.iter().any(|(g, _)| *g == group))
    }

    fn group_of_page(&self, txn: TxnId, id: PageId) -> Result<Option<GroupId>> {
        Ok(self.facts(txn, id)?.group)
    }

    fn is_page_in_use(&self, txn: TxnId, id: PageId) -> Result<bool> {
        Ok(self.facts(txn, id)?.in_use)
    }

    fn group_pages(&self, txn: TxnId, group: GroupId) -> Result<Vec<PageId>> {
        if self.is_snapshot(txn) {
            return Err(Error::InvalidArgument(format!(
                "{txn} is a snapshot: scanning a group at a snapshot is not offered (a group's pages are known only as they are now)"
            )));
        }
        self.mark_on_server(txn);
        let body = self.conn.call_one(&PageRequest::GroupPages {
            txn: txn.0,
            group: group.0,
        })?;
        let pages: Vec<PageId> = decode_pages(&body)
            .map_err(|e| self.conn.error(cairn_net::Error::Message(e)))?
            .into_iter()
            .map(PageId)
            .collect();
        // A scan reads them all next: fetch them now, pipelined.
        self.fetch_shared(txn, &pages, 1)?;
        Ok(pages)
    }

    fn try_insert_page(&self, owner: LockOwner, group: GroupId, page: PageId) -> Result<bool> {
        if self.holds(owner.txn, Resource::Page(page), LockMode::X) {
            let f = self.facts(owner.txn, page)?;
            return Ok(f.in_use && f.group == Some(group));
        }
        let known = self
            .rights
            .lock()
            .txns
            .get(&owner.txn)
            .and_then(|v| v.facts.get(&page).copied());
        if known.is_some_and(|f| !f.in_use || f.group != Some(group)) {
            return Ok(false);
        }
        let status = self.fetch(owner.txn, page, FETCH_TRY_INSERT, group)?;
        Ok(status.is_locked())
    }

    fn try_insert_pages(
        &self,
        owner: LockOwner,
        group: GroupId,
        candidates: &[PageId],
        need: usize,
    ) -> Result<(Vec<PageId>, usize)> {
        // Pages this transaction knows are not in use or of another group
        // are passed over here; the rest go in one PLACE.
        let (asked, considered) = {
            let st = self.rights.lock();
            let facts = st.txns.get(&owner.txn).map(|v| &v.facts);
            let mut asked = Vec::new();
            let mut considered = candidates.len();
            for (i, &p) in candidates.iter().enumerate() {
                if asked.len() == cairn_net::page_service::FETCH_PAGES_MAX {
                    considered = i;
                    break;
                }
                let known = facts.and_then(|f| f.get(&p));
                if known.is_some_and(|f| !f.in_use || f.group != Some(group)) {
                    continue;
                }
                asked.push((i, p));
            }
            (asked, considered)
        };
        if asked.is_empty() {
            return Ok((Vec::new(), considered));
        }
        let pages: Vec<PageId> = asked.iter().map(|&(_, p)| p).collect();
        let statuses = self.place(owner.txn, group, need, &pages)?;
        let granted = pages
            .iter()
            .zip(&statuses)
            .filter(|(_, s)| s.is_locked())
            .map(|(p, _)| *p)
            .collect();
        // The server stops at the page it found: the candidates after it
        // were not tried.
        let tried = match statuses.len() < pages.len() {
            true => asked[statuses.len() - 1].0 + 1,
            false => considered,
        };
        Ok((granted, tried))
    }

    fn prefetch(&self, owner: LockOwner, pages: &[PageId], mode: LockMode) -> Result<bool> {
        if self.is_snapshot(owner.txn) {
            // Read as of the snapshot, all at once; nothing is locked.
            if mode == LockMode::S && pages.len() >= 2 {
                self.fetch_at_snapshot(owner.txn, pages)?;
            }
            return Ok(false);
        }
        // A single page to fetch is one round trip either way: it is
        // fetched when it is used (and only if it is).
        self.fetch_many(owner.txn, pages, self.fetch_mode(mode), 2)
    }

    /// Page and file clients alike: every lock is a round trip.
    fn keeps_merges(&self) -> bool {
        self.file.is_none()
    }

    fn keep_merges(&self, owner: LockOwner, merges: &[ObjectMerges]) -> Result<Vec<PageId>> {
        self.keep_appends(owner, merges)
    }

    fn locks_remotely(&self) -> bool {
        true
    }

    /// A page client of a server that locks key ranges (`trees.rs`).
    fn tree_service(&self) -> Option<&dyn cairn_storage::txn::TreeService> {
        self.trees_at_server()
            .then_some(self as &dyn cairn_storage::txn::TreeService)
    }

    fn fill_pages(&self) -> &FillPages {
        &self.fill
    }

    fn allocate(&self, owner: LockOwner, group: GroupId, near: Option<PageId>, ty: PageType) -> Result<PageId> {
        self.mark_on_server(owner.txn);
        let body = self.conn.call_one(&PageRequest::Allocate {
            txn: owner.txn.0,
            group: group.0,
            near: near.map_or(NO_PAGE, |p| p.0),
            page_type: ty as u8,
        })?;
        let (p, count, image) = decode_page(&body).map_err(|e| self.conn.error(cairn_net::Error::Message(e)))?;
        let id = PageId(p);
        page::verify(image, id)?;
        self.install_newest(id, image)?;
        self.conn.pages_shipped.fetch_add(1, Ordering::Relaxed);
        self.page_count.fetch_max(count, Ordering::Relaxed);
        let mut st = self.rights.lock();
        // A right to cache the page from before it was freed (this
        // client's own free is not called back) describes a page that is
        // no more: give it up.
        let stale = st.covers.remove(&id).map(|c| (id, c.epoch));
        let view = st.txns.entry(owner.txn).or_default();
        view.facts.insert(
            id,
            Facts {
                in_use: true,
                group: Some(group),
            },
        );
        view.locks.insert(Resource::Page(id), LockMode::X);
        let g = view.locks.entry(Resource::Group(group)).or_insert(LockMode::IX);
        *g = g.sup(LockMode::IX);
        drop(st);
        self.release_pages(stale);
        Ok(id)
    }

    fn free(&self, owner: LockOwner, page: PageId) -> Result<()> {
        self.mark_on_server(owner.txn);
        self.conn.call_one(&PageRequest::Free {
            txn: owner.txn.0,
            page: page.0,
        })?;
        // The right to cache it says the page is in use, in its group: not
        // after this commits (the server does not call back the freeing
        // client). The others go to the server, and wait for this one.
        let stale = self.rights.lock().covers.remove(&page).map(|c| (page, c.epoch));
        self.release_pages(stale);
        Ok(())
    }

    /// Commits `txn`: its PAGE redo records (each page's changed byte runs
    /// against the committed image) go in one COMMIT message, or, for a
    /// transaction larger than one message, in STAGE messages (one round
    /// trip each, built and sent one at a time, so the client never holds
    /// more than a message of them) and a last COMMIT. The reply's LSNs
    /// stamp the after-images, read again from the transaction's private
    /// pages, as they are installed in the pool.
    /// A catalog change: sent to the server, which makes it in this
    /// transaction (the catalog's pages are never the client's to write).
    /// First the client's other transactions reading the schema's pages
    /// under its rights are named, so the server's X waits for them; the
    /// pages the server changed come back as images this transaction reads
    /// and does not ship (`commit` drops them from the pool once decided).
    fn catalog_change(&self, txn: &mut Txn, change: &[u8]) -> Result<Option<Vec<u8>>> {
        let id = txn.id();
        let schema = lock(&self.groups)
            .iter()
            .find(|(_, name)| name.as_str() == crate::catalog::SYSTEM_GROUP)
            .map(|(g, _)| *g);
        let schema = match schema {
            Some(g) => g,
            None => self.group(crate::catalog::SYSTEM_GROUP, false)?,
        };
        self.name_readers_of(id, &self.covered_pages_of(schema))?;
        // A catalog change may read the trees this transaction changed.
        self.send_later(id, None)?;
        let reply = self.conn.catalog(id, change)?;
        let pages: Vec<PageId> = reply.pages.iter().map(|p| PageId(*p)).collect();
        self.name_readers_of(id, &pages)?;
        let images = reply.images.into_iter().map(|(p, i)| (PageId(p), i)).collect();
        txn.stage_server_pages(images)?;
        Ok(Some(reply.outcome))
    }

    fn commit(&self, txn: &mut Txn) -> Result<()> {
        let id = txn.id();
        // Its tree changes kept to send later go first (`trees.rs`); a
        // failure leaves the transaction for `end` to abort.
        self.send_later(id, None)?;
        // Every page it changed, the server's (a catalog change's) among
        // them: those are not shipped (the server has them), but their
        // images are installed with the LSNs the commit gives them like the
        // others' (or discarded if the outcome is unknown).
        let pages = txn.changed_pages();
        let freed: Vec<PageId> = txn.allocations().1.iter().copied().collect();
        self.start_ending(id);
        // Room for the body's fixed part and a record's length.
        let limit = (self.conn.client.welcome().body_max as usize).saturating_sub(64);
        let mut batch: Vec<Vec<u8>> = Vec::new();
        let mut batch_bytes = 0usize;
        let mut reply: Result<Bytes> = Ok(Bytes::new());
        for &p in &pages {
            if txn.server_pages().contains(&p) {
                continue;
            }
            let after = txn
                .private_page(p)?
                .ok_or_else(|| Error::Internal(format!("private page {p} vanished before commit")))?
                .to_vec();
            let rec = if self.file.is_some() {
                // The client writes the page itself: the log needs it whole
                // (see `cairn_storage::txn::Unwritten`).
                redo::page_record(id, p, None, &after)
            } else {
                let mut rec = Ok(Vec::new());
                self.read_committed(p, &mut |base| rec = Ok(redo::page_record(id, p, Some(base), &after)))?;
                rec?
            };
            if !batch.is_empty() && batch_bytes + 4 + rec.len() > limit {
                let records = std::mem::take(&mut batch);
                batch_bytes = 0;
                if let Err(e) = self.conn.call_one(&PageRequest::Stage { txn: id.0, records }) {
                    reply = Err(e);
                    break;
                }
            }
            batch_bytes += 4 + rec.len();
            batch.push(rec);
        }
        if reply.is_ok() {
            reply = self.conn.call_one(&PageRequest::Commit {
                txn: id.0,
                records: batch,
            });
        }
        // A COMMIT or STAGE that reached the server ended the transaction
        // there if it failed (and a lost connection ends it too); one
        // refused before sending (a record over the message limit) did not,
        // and `end` aborts it.
        if !matches!(reply, Err(Error::LimitExceeded { .. })) {
            if let Some(v) = self.rights.lock().txns.get_mut(&id) {
                v.ended_on_server = true;
            }
        }
        // The pages it freed are the server's to format and hand out again:
        // never cache the last image this transaction gave them.
        for p in &freed {
            self.pool.discard(*p)?;
        }
        let body = match reply {
            Ok(body) => body,
            Err(e) => {
                // The outcome may be unknown: forget the pages it changed,
                // and those whose appends the server kept.
                for p in &pages {
                    self.pool.discard(*p)?;
                }
                for p in txn.pages_kept_by_backend() {
                    self.take_in_appended(*p, u64::MAX, None)?;
                }
                return Err(e);
            }
        };
        let reply = decode_commit_reply(&body).map_err(|e| self.conn.error(cairn_net::Error::Message(e)))?;
        let changed: std::collections::HashSet<PageId> = pages.iter().copied().collect();
        let freed: std::collections::HashSet<PageId> = freed.into_iter().collect();
        if self.file.is_some() {
            // Written by the client, then installed, in one pass.
            return self.write_pages(txn, &reply.lsns, &changed, &freed);
        }
        // The pages whose appends the server applied first (`appends.rs`),
        // then those it shipped.
        let lsns = self.take_in_kept(txn, reply, &changed)?;
        for (p, lsn) in lsns {
            if let Some((id, after)) = self.stamped_after(txn, p, lsn, &changed, &freed)? {
                // Another transaction of this client may have fetched a
                // newer image since the server released the locks: newest
                // wins.
                self.install_newest(id, &after)?;
            }
        }
        Ok(())
    }

    fn rollback(&self, txn: &mut Txn) {
        // The server aborts it (and gives its pages back); if the connection
        // is gone the server aborted it already.
        let known = self.start_ending(txn.id());
        if let Some(v) = self.rights.lock().txns.get_mut(&txn.id()) {
            v.ended_on_server = true;
        }
        if known {
            let _ = self.conn.call_one(&PageRequest::Abort { txn: txn.id().0 });
        }
        for p in txn.allocations().0 {
            let _ = self.pool.discard(*p);
        }
    }

    fn end(&self, owner: LockOwner, _allocated: &[PageId]) {
        self.start_ending(owner.txn);
        let view = {
            let mut st = self.rights.lock();
            st.writer_ended(owner.txn);
            st.txns.remove(&owner.txn)
        };
        if view.is_some_and(|v| v.answering.on_server && !v.ended_on_server) {
            // A read-only transaction: releasing its locks is all its commit
            // is, so nobody waits for the answer (the call is sent and
            // dropped; the reply is discarded when it comes). If the
            // connection is gone, the server released them already.
            let (kind, body) = PageRequest::Abort { txn: owner.txn.0 }.encode();
            self.conn.bytes_sent.fetch_add(body.len() as u64, Ordering::Relaxed);
            self.conn.one_way.fetch_add(1, Ordering::Relaxed);
            drop(self.conn.client.invoke(kind, body));
        }
    }
}
