//! A page client's B+-trees on a server that locks key ranges
//! ([`KEY_RANGES`] in its WELCOME): the server runs them
//! ([`TreeService`], `cairn_storage::txn::server_trees`). A file client's
//! too: it is a page client that reads and writes the volume file.
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
//! (locked as TREE_GET locks each); a destruction as TREE_DESTROY.
//!
//! **Changes sent together.** A transaction's changes are kept in it (in
//! order, per tree) and sent when it next reads or destroys that tree
//! (that tree's), makes a catalog change or commits (all), or once they
//! fill a message: creating a
//! hundred objects with an indexed field costs one TREE_APPLY, not a
//! hundred. Their locks are taken then, so their waits and conflicts come
//! then too; an error sending them dooms the transaction (the server may
//! hold part of them): it is reported by the request that sent them, and
//! again by every later one and by the commit.
//!
//! No page of such a tree is cached under a right (the server grants none, since
//! no callback would name it); a snapshot transaction looks up and scans
//! such a tree at the server too, at its snapshot, rather than fetch each
//! of the tree's pages.
//!
//! **Lookups kept.** A lookup's answer, when the server knows it whole,
//! comes with rights on the gaps its locks guarded (as an object client's
//! does): the client keeps it (`remote/lookups.rs`), and a later transaction
//! finds the key with no round trip, under S locks on those gaps only the
//! client knows of. Before any transaction inserts into one of those gaps
//! or deletes from it, this client's own among them, the server calls the
//! right back: the lookups under it go, and the transactions that read one
//! are named (the server grants them S on the gap, and the writer waits
//! for them). A snapshot reads a lookup whose rights came before it was
//! asked for and are still held: no commit has changed its gaps since. A
//! transaction that sent changes of a tree neither uses nor keeps a lookup
//! of it (an answer may hold its own changes, and it may abort).

use std::ops::Bound;
use std::sync::atomic::Ordering;

use cairn_net::object_service::{decode_firsts, ObjectRequest, ValuesAndObjects, TREE_KEYS_MAX};
use cairn_net::page_service::KEY_RANGES;
use cairn_storage::fxhash::FxHashSet;
use cairn_storage::lock::{LockMode, Resource};
use cairn_storage::txn::{Backend, TreeChange, TreeService};
use cairn_storage::{Error, PageId, Result, TxnId};

use super::RemoteStore;
use crate::remote::object::trees::{apply_batches, op_size};
use crate::remote::rights::{from_wire, release, Bound as RightsBound};

impl RemoteStore {
    /// True if the server runs this client's B+-trees: a page- or
    /// file-server client of a server that announced [`KEY_RANGES`].
    pub(super) fn trees_at_server(&self) -> bool {
        self.conn.client.welcome().capabilities.0 & KEY_RANGES.0 != 0
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

    /// The values of `key` in the tree at `root` if this client keeps its
    /// lookup (see the module docs): read by `txn` under the lookup's
    /// rights from now on, or, at a snapshot, if they came before it was
    /// asked for.
    fn use_lookup(&self, txn: TxnId, root: PageId, key: &[u8]) -> Option<Vec<Vec<u8>>> {
        let mut st = self.rights.lock();
        let st = &mut *st;
        let kept = st.lookups.get(root, key)?;
        let values = match st.txns.get(&txn).and_then(|v| v.snapshot.as_ref()) {
            Some(snap) if kept.since > snap.asked => return None,
            Some(_) => kept.values.clone(),
            None => {
                let (guards, values) = (kept.guards.clone(), kept.values.clone());
                let v = st.txns.entry(txn).or_default();
                if v.answering.ending || v.trees.contains(&root) {
                    return None;
                }
                for g in guards {
                    v.locks.entry(g).or_insert(LockMode::S);
                }
                values
            }
        };
        self.conn.cache_hits.fetch_add(1, Ordering::Relaxed);
        Some(values)
    }

    /// Keeps the answer of `txn`'s lookup of `key` (`values`, all of them)
    /// under `rights` (gap, epoch) — unless one was called back before it
    /// came, or `txn` changes the tree; what the bound makes go is given
    /// back, and so are the rights of a lookup not kept that the client
    /// held for no other (one it holds stays: the server keeps one right
    /// per client and gap, and given back, the other lookups under it
    /// would never be called back).
    fn take_lookup(&self, txn: TxnId, root: PageId, key: &[u8], rights: &[(Resource, u64)], values: Vec<Vec<u8>>) {
        let dropped = {
            let mut st = self.rights.lock();
            let st = &mut *st;
            let own = st.txns.get(&txn).is_some_and(|v| v.trees.contains(&root));
            if own || !st.take_gap_rights(rights) {
                rights
                    .iter()
                    .filter(|&&(g, e)| !st.lookups.renew(g, e))
                    .copied()
                    .collect()
            } else {
                st.clock += 1;
                st.lookups.keep(root, key, rights, values, st.clock);
                self.trim_lookups(st)
            }
        };
        release(&self.conn, &dropped);
    }

    /// Past the bound on kept lookups (the bound on page rights), gives
    /// back the gaps nobody reads under (and their lookups), oldest right
    /// first; what went, to give back.
    fn trim_lookups(&self, st: &mut super::rights::ClientState) -> Vec<(Resource, u64)> {
        let bound = RightsBound::count(self.rights_max.max(64));
        if !bound.passed(st.lookups.len(), 0) {
            return Vec::new();
        }
        let victims = st.lookups.unread(&read_gaps(st));
        let mut out = Vec::new();
        let lookups = &mut st.lookups;
        bound.give_back(lookups.len(), 0, victims, |g| {
            let before = lookups.len();
            if let Some(e) = lookups.drop_guard(g) {
                out.push((g, e));
            }
            before - lookups.len()
        });
        out
    }

    /// Gives back every kept lookup's rights nobody reads under (a cold
    /// start).
    pub(super) fn evict_lookups(&self) {
        let dropped = {
            let mut st = self.rights.lock();
            let st = &mut *st;
            let victims = st.lookups.unread(&read_gaps(st));
            let mut out = Vec::with_capacity(victims.len());
            for (_, g) in victims {
                if let Some(e) = st.lookups.drop_guard(g) {
                    out.push((g, e));
                }
            }
            out
        };
        release(&self.conn, &dropped);
    }

    /// `txn` sends a change of the tree at `root` (see
    /// [`super::rights::TxnView::trees`]).
    fn tree_changed(&self, txn: TxnId, root: PageId) {
        self.rights.lock().txns.entry(txn).or_default().trees.insert(root);
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

/// The gaps running transactions read kept lookups under.
fn read_gaps(st: &super::rights::ClientState) -> FxHashSet<Resource> {
    st.txns
        .values()
        .flat_map(|v| v.locks.keys())
        .filter(|k| matches!(k, Resource::Gap(..) | Resource::TreeEnd(_)))
        .copied()
        .collect()
}

impl RemoteStore {
    /// Keeps `changes` of the tree at `root` in `txn` to send later (see
    /// the module docs), sending what is kept once it fills a message.
    fn apply_later(&self, txn: TxnId, root: PageId, changes: Vec<TreeChange>) -> Result<()> {
        let full = {
            let mut st = self.rights.lock();
            let v = st.txns.entry(txn).or_default();
            v.trees.insert(root);
            for c in changes {
                v.later_bytes += op_size(&c);
                v.later.push((root, c));
            }
            v.later_bytes >= self.per_message()
        };
        if full {
            self.send_later(txn, None)?;
        }
        Ok(())
    }

    /// Sends `txn`'s tree changes kept to send later — those of the tree
    /// at `root` only, or all — each tree's in order, as TREE_APPLY
    /// requests a message each. A failure is kept: the server may hold
    /// part of them, so the transaction cannot commit (it is reported
    /// again, by every later call of this and by its COMMIT).
    pub(super) fn send_later(&self, txn: TxnId, root: Option<PageId>) -> Result<()> {
        let later = {
            let mut st = self.rights.lock();
            let Some(v) = st.txns.get_mut(&txn) else {
                return Ok(());
            };
            if let Some(cause) = &v.later_failed {
                return Err(Error::TxnDoomed {
                    txn,
                    cause: format!("sending its B+-tree changes failed: {cause}"),
                });
            }
            match root {
                None => {
                    v.later_bytes = 0;
                    std::mem::take(&mut v.later)
                }
                Some(r) => {
                    let (now, rest): (Vec<_>, Vec<_>) =
                        std::mem::take(&mut v.later).into_iter().partition(|(t, _)| *t == r);
                    v.later = rest;
                    v.later_bytes = v.later.iter().map(|(_, c)| op_size(c)).sum();
                    now
                }
            }
        };
        if later.is_empty() {
            return Ok(());
        }
        let sent = self.send_changes(txn, later);
        if let Err(e) = &sent {
            if let Some(v) = self.rights.lock().txns.get_mut(&txn) {
                v.later_failed = Some(e.to_string());
            }
        }
        sent
    }

    /// TREE_APPLY of `changes` (tree, change), a run of one tree's at a
    /// time, in order.
    fn send_changes(&self, txn: TxnId, changes: Vec<(PageId, TreeChange)>) -> Result<()> {
        let mut runs: Vec<(PageId, Vec<TreeChange>)> = Vec::new();
        for (root, c) in changes {
            match runs.last_mut() {
                Some((r, run)) if *r == root => run.push(c),
                _ => runs.push((root, vec![c])),
            }
        }
        for (root, run) in runs {
            for ops in apply_batches(run, self.per_message())? {
                self.tree_call(
                    txn,
                    &ObjectRequest::TreeApply {
                        txn: txn.0,
                        root: root.0,
                        ops,
                    },
                )?;
            }
        }
        Ok(())
    }

    /// Bytes of tree changes one TREE_APPLY carries at most: the server's
    /// message bound less room for the request's fixed part.
    fn per_message(&self) -> usize {
        (self.conn.client.welcome().body_max as usize).saturating_sub(64)
    }
}

impl TreeService for RemoteStore {
    fn apply(&self, txn: TxnId, root: PageId, changes: Vec<TreeChange>) -> Result<()> {
        self.apply_later(txn, root, changes)
    }

    fn scan(
        &self,
        txn: TxnId,
        root: PageId,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<()> {
        self.send_later(txn, Some(root))?;
        self.range(txn, root, lo.map(<[u8]>::to_vec), hi.map(<[u8]>::to_vec), None, f)
    }

    fn get(&self, txn: TxnId, root: PageId, key: &[u8], f: &mut dyn FnMut(&[u8]) -> bool) -> Result<()> {
        self.send_later(txn, Some(root))?;
        if let Some(values) = self.use_lookup(txn, root, key) {
            for v in &values {
                if !f(v) {
                    break;
                }
            }
            return Ok(());
        }
        // The first value as `find_one` asks for it (the lookup reads on
        // one value without waiting, and never locks the tree's end past a
        // found key: an inserter there does not wait for it); the rest, if
        // the caller wants them, as a range of the key after it — unless
        // the answer came with rights, which the server grants only to an
        // answer it knows whole.
        let flight = self.rights.fetch();
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
        let rights: Vec<(Resource, u64)> = answer.rights.iter().map(|(k, e)| (from_wire(*k), *e)).collect();
        let on_its_gaps = rights
            .iter()
            .all(|(k, _)| matches!(k, Resource::Gap(..) | Resource::TreeEnd(_)) && k.tree() == Some(root));
        if !answer.objects.is_empty() || answer.values.len() > 1 || !on_its_gaps {
            return Err(self.conn.protocol(
                "a TREE_GET answer to a page session with one value at most and rights on its tree's gaps only",
            ));
        }
        let whole = !rights.is_empty();
        if whole {
            self.take_lookup(txn, root, key, &rights, answer.values.clone());
        }
        drop(flight);
        let Some(first) = answer.values.into_iter().next() else {
            return Ok(());
        };
        if !f(&first) || whole {
            return Ok(());
        }
        self.scan_from(txn, root, key, Some(first), &mut |_, v| f(v))
    }

    fn get_firsts(&self, txn: TxnId, root: PageId, keys: &[Vec<u8>]) -> Result<Vec<Option<Vec<u8>>>> {
        self.send_later(txn, Some(root))?;
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
        self.tree_changed(txn, root);
        self.send_later(txn, Some(root))?;
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
