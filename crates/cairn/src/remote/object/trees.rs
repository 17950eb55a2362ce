//! An object-protocol transaction's B+-trees, which the server walks.
//! Reads: a root checked, a tree created, a lookup (kept by the client
//! under rights on the leaves that enclose its key, where the server
//! grants them), a range. Changes: applied on the
//! server at once (TREE_APPLY, TREE_DESTROY), or — the changes the typed
//! layer makes to its indexes as objects change — kept by the client and
//! sent together in one TREE_APPLY per tree: before this transaction reads
//! the tree where they matter (a lookup of a key they change, a range),
//! before any change applied at once to the tree, before a server-side
//! method, at commit, and past a bound. An index insert so costs no round
//! trip of its own (OO1's insert: one per part before).

use std::sync::atomic::Ordering;

use cairn_net::object_service::{
    self as wire, decode_firsts, FetchedObject, ObjectRequest, ValuesAndObjects, TREE_KEYS_MAX, TREE_LIMIT_MAX,
};
use cairn_net::page_service::decode_pages;
use cairn_net::page_service::NO_GROUP;
use cairn_schema::TreeOp;
use cairn_storage::lock::Resource;
use cairn_storage::{Error, GroupId, Oid, PageId, Result};

use super::{ObjectTxn, Read};

/// The bytes a tree change takes in a TREE_APPLY, at most (a page
/// client's too, `page/trees.rs`).
pub(in crate::remote) fn op_size(op: &TreeOp) -> usize {
    16 + match op {
        TreeOp::Insert { key, value } => key.len() + value.len(),
        TreeOp::Delete { key, value } => key.len() + value.as_ref().map_or(0, Vec::len),
    }
}

/// A B+-tree change as TREE_APPLY carries it.
fn on_the_wire(op: TreeOp) -> wire::TreeOp {
    match op {
        TreeOp::Insert { key, value } => wire::TreeOp::Insert { key, value },
        TreeOp::Delete { key, value } => wire::TreeOp::Delete { key, value },
    }
}

/// `ops` as TREE_APPLY carries them, in batches of at most `per_message`
/// bytes each, in order (sent one after another, the same as one); an
/// error if one change alone is larger (each crosses in one message). A
/// page client's changes too (`page/trees.rs`).
pub(in crate::remote) fn apply_batches(ops: Vec<TreeOp>, per_message: usize) -> Result<Vec<Vec<wire::TreeOp>>> {
    if let Some(op) = ops.iter().find(|op| op_size(op) > per_message) {
        return Err(Error::LimitExceeded {
            what: "bytes of a B+-tree change (each crosses in one message)",
            value: op_size(op) as u64,
            limit: per_message as u64,
        });
    }
    let mut batches = Vec::new();
    let mut batch = Vec::new();
    let mut bytes = 0;
    for op in ops {
        let size = op_size(&op);
        if !batch.is_empty() && bytes + size > per_message {
            batches.push(std::mem::take(&mut batch));
            bytes = 0;
        }
        bytes += size;
        batch.push(on_the_wire(op));
    }
    if !batch.is_empty() {
        batches.push(batch);
    }
    Ok(batches)
}

/// The key a tree change is about.
fn op_key(op: &TreeOp) -> &[u8] {
    match op {
        TreeOp::Insert { key, .. } | TreeOp::Delete { key, .. } => key,
    }
}

impl ObjectTxn {
    /// Applies `ops` to the tree at `root`, in order, in one request (after
    /// the changes of that tree kept to send later).
    pub fn tree_apply(&mut self, root: PageId, ops: Vec<TreeOp>) -> Result<()> {
        self.refuse_if_snapshot()?;
        if ops.is_empty() {
            return Ok(());
        }
        self.check_active()?;
        self.send_tree_later(Some(root))?;
        self.apply_now(root, ops)
    }

    /// TREE_APPLY of `ops`, in as many requests as the server's message
    /// bound asks (in order: the same as one); the pages each changed drop
    /// the lookups the client keeps under them.
    fn apply_now(&mut self, root: PageId, ops: Vec<TreeOp>) -> Result<()> {
        let batches = apply_batches(ops, self.changes_per_message())?;
        self.store.before_tree_write(self.id, root)?;
        self.wrote = true;
        for (i, ops) in batches.into_iter().enumerate() {
            let reply = self.tree_call(&ObjectRequest::TreeApply {
                txn: self.id.0,
                root: root.0,
                ops,
            });
            let body = match reply {
                Ok(body) => body,
                Err(e) => {
                    if i > 0 {
                        // Part of the changes applied: the transaction
                        // cannot go on knowing what it changed.
                        self.doomed = Some(format!("applying its B+-tree changes failed half-way: {e}"));
                    }
                    return Err(e);
                }
            };
            let pages = decode_pages(&body).map_err(|e| self.store.conn.error(cairn_net::Error::Message(e)))?;
            let pages: Vec<PageId> = pages.into_iter().map(PageId).collect();
            self.store.tree_written(self.id, root, Some(&pages));
        }
        Ok(())
    }

    /// Keeps `ops` to the tree at `root` to send later (see the module
    /// docs): this transaction sees them in every read of the tree, the
    /// server once they are sent; an error in them is reported by the
    /// request that sends them, and dooms the transaction. From now on no
    /// other transaction of the client uses a lookup of the tree it keeps.
    pub fn tree_apply_later(&mut self, root: PageId, ops: Vec<TreeOp>) -> Result<()> {
        self.refuse_if_snapshot()?;
        if ops.is_empty() {
            return Ok(());
        }
        self.check_active()?;
        self.store.before_tree_write(self.id, root)?;
        self.wrote = true;
        let size: usize = ops.iter().map(op_size).sum();
        if self.tree_later_bytes + size > self.changes_kept_max() {
            self.send_tree_later(None)?;
        }
        self.tree_later_bytes += size;
        self.tree_later_keys
            .extend(ops.iter().map(|op| (root, op_key(op).to_vec())));
        match self.tree_later.iter_mut().find(|(r, _)| *r == root) {
            Some((_, kept)) => kept.extend(ops),
            None => self.tree_later.push((root, ops)),
        }
        Ok(())
    }

    /// True if a change of the tree at `root` kept to send later is about
    /// `key` (a lookup of it must send them first).
    pub(super) fn tree_later_touches(&self, root: PageId, key: &[u8]) -> bool {
        !self.tree_later_keys.is_empty() && self.tree_later_keys.contains(&(root, key.to_vec()))
    }

    /// Sends the changes kept of the tree at `root` (of every tree:
    /// `None`), one TREE_APPLY per tree. A failure dooms the transaction
    /// (the server may hold part of them).
    pub(super) fn send_tree_later(&mut self, root: Option<PageId>) -> Result<()> {
        if self.tree_later.is_empty() {
            return Ok(());
        }
        let (send, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut self.tree_later)
            .into_iter()
            .partition(|(r, _)| root.is_none_or(|x| x == *r));
        self.tree_later = keep;
        self.tree_later_bytes = self.tree_later.iter().flat_map(|(_, ops)| ops).map(op_size).sum();
        self.tree_later_keys.retain(|(r, _)| root.is_some_and(|x| x != *r));
        for (r, ops) in send {
            if let Err(e) = self.apply_now(r, ops) {
                self.doomed = Some(format!("sending its index changes to the server failed: {e}"));
                return Err(e);
            }
        }
        Ok(())
    }

    /// A catalog change (the schema layer's bytes), made by the server in
    /// this transaction; its answer. `trees` are the catalog's trees: the
    /// other transactions' lookups of them are named first and kept off
    /// until this one ends, and the lookups under the pages the change
    /// made go.
    pub fn catalog_change(&mut self, trees: &[PageId], change: &[u8]) -> Result<Vec<u8>> {
        self.refuse_if_snapshot()?;
        self.check_active()?;
        self.send_tree_later(None)?;
        for &root in trees {
            self.store.before_tree_write(self.id, root)?;
        }
        self.wrote = true;
        self.on_server = true;
        let reply = self.store.conn.catalog(self.id, change)?;
        let pages: Vec<PageId> = reply.pages.iter().map(|p| PageId(*p)).collect();
        for &root in trees {
            self.store.tree_written(self.id, root, Some(&pages));
        }
        Ok(reply.outcome)
    }

    /// Frees every page of the tree at `root` (its changes kept to send
    /// later go with it).
    pub fn tree_destroy(&mut self, root: PageId) -> Result<()> {
        self.refuse_if_snapshot()?;
        self.check_active()?;
        if let Some(i) = self.tree_later.iter().position(|(r, _)| *r == root) {
            let (_, ops) = self.tree_later.swap_remove(i);
            self.tree_later_bytes -= ops.iter().map(op_size).sum::<usize>();
            self.tree_later_keys.retain(|(r, _)| *r != root);
        }
        self.store.before_tree_write(self.id, root)?;
        self.wrote = true;
        self.tree_call(&ObjectRequest::TreeDestroy {
            txn: self.id.0,
            root: root.0,
        })?;
        self.store.tree_written(self.id, root, None);
        Ok(())
    }
}

/// The reads of a B+-tree: its root checked, a new tree, a lookup (kept
/// under rights on its leaves where the server grants them), a range.
impl ObjectTxn {
    /// Checks that `root` is a B+-tree root; returns the group of its page.
    pub fn tree_open(&mut self, root: PageId) -> Result<Option<GroupId>> {
        let body = self.tree_call(&ObjectRequest::TreeOpen {
            txn: self.id.0,
            root: root.0,
        })?;
        let g: [u8; 4] = body[..]
            .try_into()
            .map_err(|_| self.store.conn.protocol("a TREE_OPEN reply of 4 bytes"))?;
        let g = u32::from_le_bytes(g);
        Ok((g != NO_GROUP).then_some(GroupId(g)))
    }

    /// Creates a B+-tree in `group`; returns its root page.
    pub fn tree_create(&mut self, group: GroupId, unique: bool) -> Result<PageId> {
        self.refuse_if_snapshot()?;
        self.wrote = true;
        let body = self.tree_call(&ObjectRequest::TreeCreate {
            txn: self.id.0,
            group: group.0,
            unique,
        })?;
        let r: [u8; 4] = body[..]
            .try_into()
            .map_err(|_| self.store.conn.protocol("a TREE_CREATE reply of 4 bytes"))?;
        Ok(PageId(u32::from_le_bytes(r)))
    }

    /// The values of `key` in the tree at `root`, at most `limit` (kept
    /// across transactions under a right on the leaf when the server gives
    /// one: then no round trip).
    pub fn tree_get(&mut self, root: PageId, key: &[u8], limit: u32) -> Result<Vec<Vec<u8>>> {
        self.check_active()?;
        if self.tree_later_touches(root, key) {
            self.send_tree_later(Some(root))?;
        }
        if let Some(mut values) = self.kept_lookup(root, key) {
            values.truncate(limit.max(1) as usize);
            return Ok(values);
        }
        self.lookup(root, key, limit, false)
    }

    /// The values of `key` in a tree of OIDs (an index), at most `limit`,
    /// with the objects they name read (share-locked) in the same round
    /// trip and kept as this transaction's reads: a lookup and the fetch of
    /// what it finds cost one round trip.
    ///
    /// The answer, and the objects it names, may be kept by the client
    /// under rights: then no round trip at all.
    pub fn tree_get_objects(&mut self, root: PageId, key: &[u8], limit: u32) -> Result<Vec<Vec<u8>>> {
        self.check_active()?;
        if self.tree_later_touches(root, key) {
            self.send_tree_later(Some(root))?;
        }
        self.trim();
        if let Some(values) = self.kept_lookup(root, key) {
            let in_hand = values
                .iter()
                .all(|v| Oid::from_exact(v).is_some_and(|o| self.changes.contains_key(&o) || self.local(o)));
            if in_hand {
                let mut values = values;
                values.truncate(limit.max(1) as usize);
                return Ok(values);
            }
        }
        self.lookup(root, key, limit, true)
    }

    /// The first value of each of `keys` in the tree at `root`, looked up
    /// to be changed next (TREE_GET_FOR_UPDATE): always at the server,
    /// never from a lookup kept under rights, which under page locking
    /// reads each key's leaf under an update lock (U), so two transactions
    /// that look keys up and then insert into the same leaf queue instead
    /// of deadlocking. The keys go in key order (one global order of the
    /// leaves across requests), the answers come back in the order asked.
    pub fn tree_get_for_update(&mut self, root: PageId, keys: &[Vec<u8>]) -> Result<Vec<Option<Vec<u8>>>> {
        self.check_active()?;
        self.refuse_if_snapshot()?;
        if keys.iter().any(|k| self.tree_later_touches(root, k)) {
            self.send_tree_later(Some(root))?;
        }
        let mut order: Vec<usize> = (0..keys.len()).collect();
        order.sort_by(|&a, &b| keys[a].cmp(&keys[b]));
        let mut out = vec![None; keys.len()];
        for chunk in order.chunks(TREE_KEYS_MAX) {
            let body = self.tree_call(&ObjectRequest::TreeGetForUpdate {
                txn: self.id.0,
                root: root.0,
                keys: chunk.iter().map(|&i| keys[i].clone()).collect(),
            })?;
            let conn = &self.store.conn;
            let firsts = decode_firsts(&body).map_err(|e| conn.error(cairn_net::Error::Message(e)))?;
            if firsts.len() != chunk.len() {
                return Err(conn.protocol("one answer per key of a TREE_GET_FOR_UPDATE"));
            }
            for (&i, first) in chunk.iter().zip(firsts) {
                out[i] = first;
            }
        }
        Ok(out)
    }

    /// A lookup the client keeps under rights, read under them from now
    /// on; at a snapshot, only one kept since before it was asked for
    /// (`ObjectStore::use_lookup_before`).
    fn kept_lookup(&self, root: PageId, key: &[u8]) -> Option<Vec<Vec<u8>>> {
        if self.snapshot {
            self.store.use_lookup_before(root, key, self.snapshot_clock)
        } else {
            self.store.use_lookup(self.id, root, key)
        }
    }

    /// TREE_GET (with `objects`, TREE_GET_OBJECTS): the values, the objects
    /// they name kept as this transaction's reads (and across transactions
    /// if sent with rights), the answer kept under the leaves' rights, all
    /// taken in while the request counts as a fetch in flight.
    fn lookup(&mut self, root: PageId, key: &[u8], limit: u32, objects: bool) -> Result<Vec<Vec<u8>>> {
        let store = self.store.clone();
        let conn = &store.conn;
        let _flight = store.rights.fetch();
        let body = self.tree_call(&ObjectRequest::TreeGet {
            txn: self.id.0,
            root: root.0,
            limit: limit.clamp(1, TREE_LIMIT_MAX),
            key: key.to_vec(),
            objects,
        })?;
        let reply = ValuesAndObjects::decode(&body).map_err(|e| conn.error(cairn_net::Error::Message(e)))?;
        let sent = if objects { reply.values.len() } else { 0 };
        if reply.objects.len() != sent {
            return Err(conn.protocol("one object per value for TREE_GET_OBJECTS, none for TREE_GET"));
        }
        for (v, part) in reply.values.iter().zip(&reply.objects) {
            let f = FetchedObject::decode(part).map_err(|e| conn.error(cairn_net::Error::Message(e)))?;
            conn.objects_shipped.fetch_add(1, Ordering::Relaxed);
            if f.oid[..] != v[..] {
                return Err(conn.protocol("the objects the values name, in order"));
            }
            let oid = Oid::from_bytes(&f.oid);
            let read = Read::of(&f);
            // A snapshot's objects come with rights when their version is
            // the committed one (the server took S for a moment): kept for
            // later transactions, as OBJ_FETCH's are.
            if let (Read::Whole(bytes), r @ 1..) = (&read, f.right) {
                if !self.exclusive.contains_key(&oid) {
                    store.take_object(oid, r, bytes);
                }
            }
            if self.changes.contains_key(&oid) || self.read.contains_key(&oid) {
                continue;
            }
            self.keep(oid, read);
        }
        if !reply.rights.is_empty() {
            let rights: Vec<(Resource, u64)> = reply
                .rights
                .iter()
                .map(|(k, e)| (crate::remote::rights::from_wire(*k), *e))
                .collect();
            if rights.iter().any(|(k, _)| k.tree().is_some_and(|r| r != root)) {
                return Err(conn.protocol("rights on the gaps of the tree looked up, not another's"));
            }
            store.take_lookup(root, key, &rights, reply.values.clone());
        }
        Ok(reply.values)
    }

    /// Calls `f` with each entry between `lo` and `hi` in (key, value)
    /// order until it says false, asking for up to 4,096 entries a request.
    pub fn tree_range(
        &mut self,
        root: PageId,
        lo: std::ops::Bound<Vec<u8>>,
        hi: std::ops::Bound<Vec<u8>>,
        mut f: impl FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<()> {
        self.send_tree_later(Some(root))?;
        let conn = self.store.conn.clone();
        let id = self.id;
        conn.tree_range_batches(id, root, lo, hi, None, &mut |req| self.tree_call(req), &mut f)
    }

    pub(super) fn tree_call(&mut self, req: &ObjectRequest) -> Result<bytes::Bytes> {
        self.check_active()?;
        self.on_server = true;
        self.store.call_one(req, self.id)
    }
}
