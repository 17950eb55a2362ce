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
//! names each kept page with its new LSN; the copy in the pool (older) is
//! dropped and the typed layer told, before the appender ends, so no
//! transaction of this client reads the page without the appends.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use cairn_net::object_service::{Change, OID_BYTES};
use cairn_net::page_service::{decode_kept_pages, PageRequest};
use cairn_schema::append::ListAppend;
use cairn_storage::lock::LockOwner;
use cairn_storage::page;
use cairn_storage::txn::ObjectMerges;
use cairn_storage::{PageId, Result};

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

    /// After a commit the server acknowledged: page `id`, whose appends
    /// the server applied, is at `lsn` now; an older copy in the pool is
    /// dropped and the typed layer told (a newer one, fetched by another
    /// transaction since the server released the locks, stays).
    pub(super) fn forget_appended(&self, id: PageId, lsn: u64) -> Result<()> {
        let _one_at_a_time = super::lock(&self.installing);
        let stale = self.pool.read_cached(id)?.is_some_and(|g| page::lsn(&g).0 < lsn);
        if stale {
            self.pool.discard(id)?;
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
