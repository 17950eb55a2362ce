//! A page client's B+-trees on a server that locks key ranges
//! ([`KEY_RANGES`] in its WELCOME): the server runs them
//! ([`TreeService`], `cairn_storage::txn::server_trees`).
//!
//! Such a server's commits change a tree's pages under the tree's latch
//! and no page lock, so the client never reads or writes the pages of a
//! tree its transaction did not make. Each change goes as TREE_APPLY (kept
//! in the client's transaction at the server, locked by key, applied at
//! its commit: inserts of different keys do not wait for each other, and
//! the server, not the client, builds the tree's pages); each lookup of a
//! key as TREE_GET (the server locks the gaps that guard its answer, not
//! the tree's end past a found key, so an inserter at the end does not
//! wait for it) and each range as TREE_RANGE (the server locks the entries
//! and gaps it reads, so no phantom appears in them before the transaction
//! ends); the keys of lookups for update together, as TREE_GET_FOR_UPDATE
//! (locked as TREE_GET locks each); a destruction as TREE_DESTROY. A lookup costs a round trip: no page of
//! such a tree is cached under a right (the server grants none, since no
//! callback would name it).

use std::ops::Bound;

use cairn_net::object_service::{decode_firsts, ObjectRequest, ValuesAndObjects, TREE_KEYS_MAX};
use cairn_net::page_service::KEY_RANGES;
use cairn_storage::txn::{Backend, TreeChange, TreeService};
use cairn_storage::{PageId, Result, TxnId};

use super::RemoteStore;
use crate::remote::object::trees::apply_batches;

impl RemoteStore {
    /// True if the server runs this client's B+-trees: a page-server
    /// client of a server that announced [`KEY_RANGES`].
    pub(super) fn trees_at_server(&self) -> bool {
        self.file.is_none() && self.conn.client.welcome().capabilities.0 & KEY_RANGES.0 != 0
    }

    /// One tree request of `txn`, its one reply body.
    fn tree_call(&self, txn: TxnId, req: &ObjectRequest) -> Result<bytes::Bytes> {
        self.check_usable()?;
        self.mark_on_server(txn);
        let (kind, body) = req.encode();
        let parts = self.conn.call_kind(kind, body, txn)?;
        self.conn.one_body(parts)
    }

    /// The entries of the tree at `root` from `lo` to `hi` (after the
    /// value `after` of the key `lo` names), in TREE_RANGE batches, to `f`
    /// until it says false.
    fn range(
        &self,
        txn: TxnId,
        root: PageId,
        lo: Bound<Vec<u8>>,
        hi: Bound<Vec<u8>>,
        after: Option<Vec<u8>>,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<()> {
        self.conn
            .tree_range_batches(txn, root, lo, hi, after, &mut |req| self.tree_call(txn, req), f)
    }

    /// The values of `key` after `after`, to `f` until it says false.
    fn scan_from(
        &self,
        txn: TxnId,
        root: PageId,
        key: &[u8],
        after: Option<Vec<u8>>,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<()> {
        let k = Bound::Included(key.to_vec());
        self.range(txn, root, k.clone(), k, after, f)
    }
}

impl TreeService for RemoteStore {
    fn apply(&self, txn: TxnId, root: PageId, changes: Vec<TreeChange>) -> Result<()> {
        // Room for the request's fixed part.
        let per_message = (self.conn.client.welcome().body_max as usize).saturating_sub(64);
        for ops in apply_batches(changes, per_message)? {
            self.tree_call(
                txn,
                &ObjectRequest::TreeApply {
                    txn: txn.0,
                    root: root.0,
                    ops,
                },
            )?;
        }
        Ok(())
    }

    fn scan(
        &self,
        txn: TxnId,
        root: PageId,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<()> {
        self.range(txn, root, lo.map(<[u8]>::to_vec), hi.map(<[u8]>::to_vec), None, f)
    }

    fn get(&self, txn: TxnId, root: PageId, key: &[u8], f: &mut dyn FnMut(&[u8]) -> bool) -> Result<()> {
        // The first value as `find_one` asks for it (the lookup reads on
        // one value without waiting, and never locks the tree's end past a
        // found key: an inserter there does not wait for it); the rest, if
        // the caller wants them, as a range of the key after it.
        let body = self.tree_call(
            txn,
            &ObjectRequest::TreeGet {
                txn: txn.0,
                root: root.0,
                limit: 1,
                key: key.to_vec(),
                objects: false,
            },
        )?;
        let answer = ValuesAndObjects::decode(&body).map_err(|e| self.conn.error(cairn_net::Error::Message(e)))?;
        if !answer.objects.is_empty() || !answer.rights.is_empty() || answer.values.len() > 1 {
            return Err(self
                .conn
                .protocol("a TREE_GET answer to a page session with one value at most"));
        }
        let Some(first) = answer.values.into_iter().next() else {
            return Ok(());
        };
        if !f(&first) {
            return Ok(());
        }
        self.scan_from(txn, root, key, Some(first), &mut |_, v| f(v))
    }

    fn get_firsts(&self, txn: TxnId, root: PageId, keys: &[Vec<u8>]) -> Result<Vec<Option<Vec<u8>>>> {
        let mut out = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(TREE_KEYS_MAX) {
            let body = self.tree_call(
                txn,
                &ObjectRequest::TreeGetForUpdate {
                    txn: txn.0,
                    root: root.0,
                    keys: chunk.to_vec(),
                },
            )?;
            let firsts = decode_firsts(&body).map_err(|e| self.conn.error(cairn_net::Error::Message(e)))?;
            if firsts.len() != chunk.len() {
                return Err(self.conn.protocol("one answer per key of a TREE_GET_FOR_UPDATE"));
            }
            out.extend(firsts);
        }
        Ok(out)
    }

    fn destroy(&self, txn: TxnId, root: PageId) -> Result<()> {
        self.tree_call(
            txn,
            &ObjectRequest::TreeDestroy {
                txn: txn.0,
                root: root.0,
            },
        )
        .map(|_| ())
    }
}
