//! A page client's appends kept at object grain by its server (APPEND;
//! `Txn::apply_deferred_at_commit`): at commit, the list appends on pages
//! the transaction neither changed nor holds X on go to the server, which
//! keeps them under append locks — IX on the page, A on the object — and
//! applies them at the commit to the records as they then stand, so the
//! clients appending to objects of one page (OO1's inserts, adding to the
//! reverse lists of the newest parts) no longer exclude each other there
//! with X, and never deadlock on those pages' order.
//!
//! **This client's other transactions.** The server calls back the other
//! clients' rights to the pages before it grants IX, not this client's:
//! this client's transactions reading a page under its right are named
//! first, and kept off the right until the appender ends, as before an X
//! (`RemoteStore::name_readers_of`), so the appender's IX waits for them
//! in the server's lock table.
//!
//! **The client's copy is stale after the commit.** The commit's reply
//! names each kept page with its new LSN and, within the reply's bound,
//! how the commit changed it (the byte runs of its log record, and the
//! LSN of the image it changed). Before the appender ends, a copy in the
//! pool that is that very image gets the runs applied; any other older
//! copy is dropped (fetched again when next read); the typed layer is
//! told. So no transaction of this client reads the page without the
//! appends, and the appender's own next reads of it cost no fetch.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use cairn_net::object_service::{Change, OID_BYTES};
use cairn_net::page_service::{decode_kept_pages, CommitReply, KeptChange, PageRequest};
use cairn_schema::append::ListAppend;
use cairn_storage::lock::LockOwner;
use cairn_storage::page;
use cairn_storage::txn::ObjectMerges;
use cairn_storage::wal::redo;
use cairn_storage::{Lsn, PageId, Result, Txn};

use super::RemoteStore;
use crate::remote::object::wire_append;

/// The bytes an append takes in an APPEND.
fn encoded_size(c: &Change) -> usize {
    match c {
        Change::Append { field, elem, elems, .. } => {
            OID_BYTES + 1 + 4 + 2 + field.len() + 2 + elem.len() + 4 + 4 + elems.len()
        }
        _ => 0,
    }
}

/// The most appends one APPEND carries.
const APPENDS_PER_REQUEST_MAX: usize = cairn_net::object_service::COMMIT_CHANGES_MAX as usize;

impl RemoteStore {
    /// [`cairn_storage::txn::Backend::keep_merges`]: the pages of `merges`
    /// whose appends are all list appends that fit a message go to the
    /// server in APPENDs (each page's in one), after this client's readers
    /// of them are named; returns the pages the server keeps.
    pub(super) fn keep_appends(&self, owner: LockOwner, merges: &[ObjectMerges]) -> Result<Vec<PageId>> {
        if self.file.is_some() {
            return Ok(Vec::new());
        }
        let limit = (self.conn.client.welcome().body_max as usize).saturating_sub(64);
        let by_page = offered_by_page(merges, limit);
        if by_page.is_empty() {
            return Ok(Vec::new());
        }
        let pages: Vec<PageId> = by_page.keys().copied().collect();
        self.name_readers_of(owner.txn, &pages)?;
        self.mark_on_server(owner.txn);
        let mut kept = Vec::new();
        let mut batch: Vec<Change> = Vec::new();
        let mut batch_pages = Vec::new();
        let mut bytes = 0usize;
        for (page, (changes, size)) in by_page {
            if !batch.is_empty() && (bytes + size > limit || batch.len() + changes.len() > APPENDS_PER_REQUEST_MAX) {
                kept.extend(self.send_appends(owner, std::mem::take(&mut batch), &batch_pages)?);
                batch_pages.clear();
                bytes = 0;
            }
            bytes += size;
            batch.extend(changes);
            batch_pages.push(page);
        }
        kept.extend(self.send_appends(owner, batch, &batch_pages)?);
        Ok(kept)
    }

    /// One APPEND of `appends` (on `pages`): the pages the server keeps,
    /// checked to be among them.
    fn send_appends(&self, owner: LockOwner, appends: Vec<Change>, pages: &[PageId]) -> Result<Vec<PageId>> {
        let body = self.conn.call_one(&PageRequest::Append {
            txn: owner.txn.0,
            appends,
        })?;
        let kept = decode_kept_pages(&body).map_err(|e| self.conn.error(cairn_net::Error::Message(e)))?;
        let kept: Vec<PageId> = kept.into_iter().map(PageId).collect();
        if kept.iter().any(|p| !pages.contains(p)) || kept.windows(2).any(|w| w[0] >= w[1]) {
            return Err(self
                .conn
                .protocol("an APPEND reply names pages of the request, in order, once each"));
        }
        self.conn.appends_kept.fetch_add(kept.len() as u64, Ordering::Relaxed);
        Ok(kept)
    }

    /// After a commit the server acknowledged with `reply`: each page of
    /// `txn` whose appends the server kept, and did not ship (`changed`),
    /// taken in ([`RemoteStore::take_in_appended`]); returns the LSNs of
    /// the other pages.
    pub(super) fn take_in_kept(
        &self,
        txn: &Txn,
        reply: CommitReply,
        changed: &std::collections::HashSet<PageId>,
    ) -> Result<Vec<(u32, u64)>> {
        let kept = txn.pages_kept_by_backend();
        if kept.is_empty() {
            return Ok(reply.lsns);
        }
        let mut rest = Vec::with_capacity(reply.lsns.len());
        for (p, lsn) in reply.lsns {
            if kept.contains(&PageId(p)) && !changed.contains(&PageId(p)) {
                let change = reply.changes.iter().find(|c| c.page == p);
                self.take_in_appended(PageId(p), lsn, change)?;
            } else {
                rest.push((p, lsn));
            }
        }
        Ok(rest)
    }

    /// After a commit the server acknowledged: page `id`, whose appends
    /// the server applied, is at `lsn` now. If the pool holds the very
    /// image the commit changed (`change`'s base), the change is applied
    /// to it (the byte runs the server's log has for it), so the page need
    /// not be fetched again; else an older copy is dropped (a newer one,
    /// fetched by another transaction since the server released the
    /// locks, stays). The typed layer is told either way.
    pub(super) fn take_in_appended(&self, id: PageId, lsn: u64, change: Option<&KeptChange>) -> Result<()> {
        let _one_at_a_time = super::lock(&self.installing);
        let cached = self.pool.read_cached(id)?.map(|g| g.to_vec());
        match (cached, change) {
            (Some(mut image), Some(c)) if page::lsn(&image).0 == c.base => {
                redo::apply(&mut image, id, false, &c.runs, Lsn(lsn))?;
                page::seal(&mut image);
                self.pool.install(id, &image)?;
                self.conn.appends_applied_here.fetch_add(1, Ordering::Relaxed);
            }
            (Some(image), _) if page::lsn(&image).0 < lsn => {
                self.pool.discard(id)?;
            }
            _ => {}
        }
        drop(_one_at_a_time);
        self.new_image(id);
        Ok(())
    }
}

/// The appends of `merges` as APPEND carries them, by page, with their
/// bytes: only pages whose every append is a list append (the one kind a
/// server knows how to apply) and whose appends fit one message of
/// `limit` bytes.
fn offered_by_page(merges: &[ObjectMerges], limit: usize) -> BTreeMap<PageId, (Vec<Change>, usize)> {
    let mut by_page: BTreeMap<PageId, (Vec<Change>, usize)> = BTreeMap::new();
    let mut refused = Vec::new();
    for (oid, list) in merges {
        for m in list {
            let append = m.as_any().and_then(|a| a.downcast_ref::<ListAppend>());
            match append {
                Some(a) if u32::try_from(a.count()).is_ok() => {
                    let c = wire_append(*oid, a);
                    let e = by_page.entry(oid.page).or_default();
                    e.1 += encoded_size(&c);
                    e.0.push(c);
                }
                _ => refused.push(oid.page),
            }
        }
    }
    by_page.retain(|p, (changes, size)| {
        !refused.contains(p) && *size <= limit && changes.len() <= APPENDS_PER_REQUEST_MAX
    });
    by_page
}
