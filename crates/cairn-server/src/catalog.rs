//! CATALOG requests ([`cairn_net::catalog_service`]): the only way a
//! client of any kind changes the schema catalog. Every role's restriction
//! protects the schema group's pages from the client's own locks
//! ([`crate::access`]); an `admin` session sends a change, the server
//! checks it for meaning and makes it with the schema layer's code
//! ([`cairn_schema::catalog_change::apply`]) in the client's transaction,
//! with the restriction lifted for that code alone.
//!
//! The reply names the pages the change made or changed; a page or file
//! session gets their images too, which its transaction reads as private
//! pages and never ships back (the server refuses a client record of
//! them, [`Txn::note_server_pages`]). A change that fails after it changed
//! a page aborts the transaction: it cannot go on with half a change.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use cairn_net::catalog_service::{CatalogReply, CatalogRequest};
use cairn_net::message::{ErrorCode, Fault};
use cairn_schema::catalog_change::{self, CatalogChange};
use cairn_storage::{Error, GroupId, PageId, Txn};

use crate::users::Role;
use crate::{fault, lock, Core, SessionState};

/// Answers a CATALOG request of any session.
pub(crate) async fn handle(core: &Arc<Core>, state: &Arc<SessionState>, req: CatalogRequest) -> Result<Bytes, Fault> {
    if state.role != Role::Admin {
        return Err(Fault::new(
            ErrorCode::DENIED,
            format!(
                "the session's role is {}: only an admin may change the schema (classes, indexes, named roots)",
                state.role.name()
            ),
        ));
    }
    let _turn = state.turn_of(Some(req.txn), false).await?;
    let (c, s) = (core.clone(), state.clone());
    crate::run_blocking(core, state, move || serve(&c, &s, &req))
        .await?
        .map(Bytes::from)
}

/// Checks and makes the change in the client's transaction.
fn serve(core: &Core, state: &SessionState, req: &CatalogRequest) -> Result<Vec<u8>, Fault> {
    let change = CatalogChange::decode(&req.change)
        .map_err(|e| Fault::new(ErrorCode::INVALID, format!("CATALOG: the change does not decode: {e}")))?;
    let (_, t) = state.txn_or_begin(&core.db, req.txn).map_err(fault)?;
    let mut t = lock(&t);
    let before = page_sums(&mut t).map_err(fault)?;
    let restriction = t.take_restriction();
    let group = |name: &str| -> cairn_schema::Result<GroupId> { Ok(core.db.group(name)?) };
    let result = catalog_change::apply(&mut *t, &group, &change);
    t.restrict(restriction);
    let changed = changed_since(&mut t, &before).map_err(fault)?;
    t.note_server_pages(changed.iter().copied());
    let outcome = match result {
        Ok(o) => o,
        Err(e) => {
            let e = e.into_storage();
            if !changed.is_empty() {
                drop(t);
                lock(&state.txns).remove(&req.txn);
                return Err(fault(Error::TxnDoomed {
                    txn: cairn_storage::TxnId(req.txn),
                    cause: format!(
                        "{} failed half-way, and the transaction was aborted: {e}",
                        change.describe()
                    ),
                }));
            }
            return Err(fault(e));
        }
    };
    if let catalog_change::Outcome::Removed { root } = outcome {
        // The client frees the dropped index's tree.
        t.release_root(root);
    }
    let mut reply = CatalogReply {
        pages: changed.iter().map(|p| p.0).collect(),
        images: Vec::new(),
        outcome: outcome.encode(),
    };
    if !state.object {
        for &p in &changed {
            let image = t
                .private_page(p)
                .map_err(fault)?
                .ok_or_else(|| fault(Error::Internal(format!("page {p} changed and has no private image"))))?
                .to_vec();
            reply.images.push((p.0, image));
        }
    }
    let body = reply.encode();
    if body.len() > core.reply_bytes_max {
        return Err(fault(Error::LimitExceeded {
            what: "bytes of a CATALOG reply (the pages one catalog change made)",
            value: body.len() as u64,
            limit: core.reply_bytes_max as u64,
        }));
    }
    Ok(body)
}

/// A checksum of each private page of `t`.
fn page_sums(t: &mut Txn) -> cairn_storage::Result<HashMap<PageId, u32>> {
    let mut sums = HashMap::new();
    for p in t.changed_pages() {
        if let Some(image) = t.private_page(p)? {
            sums.insert(p, crc32c::crc32c(image));
        }
    }
    Ok(sums)
}

/// The private pages of `t` that are new or changed since `before`, in
/// page order.
fn changed_since(t: &mut Txn, before: &HashMap<PageId, u32>) -> cairn_storage::Result<Vec<PageId>> {
    let mut changed = Vec::new();
    for p in t.changed_pages() {
        let Some(image) = t.private_page(p)? else { continue };
        if before.get(&p) != Some(&crc32c::crc32c(image)) {
            changed.push(p);
        }
    }
    changed.sort_unstable();
    Ok(changed)
}
