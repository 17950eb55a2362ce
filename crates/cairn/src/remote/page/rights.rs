//! Callback locking on the page and file clients: what their transactions
//! hold and know, and their rights to cache pages — the [`Table`] of
//! `remote::rights`, which has what every client shares.

use std::sync::atomic::Ordering;

use cairn_net::rights::Callback;
use cairn_storage::fxhash::{FxHashMap, FxHashSet};
use cairn_storage::lock::{LockMode, Resource};
use cairn_storage::txn::TreeChange;
use cairn_storage::{GroupId, PageId, Result, TxnId};

use super::RemoteStore;
use crate::remote::lookups::KeptLookups;
use crate::remote::rights::{release, Answering, Bound, Revoked, Table};

/// What one transaction has learnt of a page from the server.
#[derive(Clone, Copy, Debug)]
pub(super) struct Facts {
    pub(super) in_use: bool,
    pub(super) group: Option<GroupId>,
}

/// A running transaction's locks and page facts.
#[derive(Default)]
pub(super) struct TxnView {
    /// Its locks: the server's, and S on pages read under the client's
    /// right to cache them (known to the server only if called back).
    pub(super) locks: FxHashMap<Resource, LockMode>,
    pub(super) facts: FxHashMap<PageId, Facts>,
    /// Whether the server knows it, whether it is ending, and the answers
    /// naming it in flight.
    pub(super) answering: Answering,
    /// The server's transaction is over (a COMMIT or ABORT was sent): a
    /// read-only commit, which sends neither, ends it with an ABORT.
    pub(super) ended_on_server: bool,
    /// A read-only transaction at a snapshot: what it sees and read
    /// (`snapshot.rs`). It holds no lock, so no callback names it.
    pub(super) snapshot: Option<Box<super::snapshot::SnapView>>,
    /// B+-trees (by root) it sent changes of to the server (`trees.rs`):
    /// it neither uses nor keeps a lookup of them, whose answer may hold
    /// its own changes.
    pub(super) trees: FxHashSet<PageId>,
    /// Its tree changes not sent yet (`trees.rs`): by tree, in order.
    pub(super) later: Vec<(PageId, TreeChange)>,
    /// Their bytes, about as TREE_APPLY counts them.
    pub(super) later_bytes: usize,
    /// Why sending them failed, if it did: the transaction cannot commit.
    pub(super) later_failed: Option<String>,
}

/// The client's right to cache a page across transactions (callback
/// locking), granted by a FETCH.
#[derive(Clone, Debug)]
pub(super) struct Cover {
    /// The right's epoch (the server calls back this epoch).
    pub(super) epoch: u64,
    /// What the FETCH that granted it said of the page; stable while the
    /// right lasts (a free or an allocation takes X, which calls it back).
    pub(super) facts: Facts,
}

/// What the transactions of a client and its callbacks share.
#[derive(Default)]
pub(super) struct ClientState {
    pub(super) txns: FxHashMap<TxnId, TxnView>,
    /// Pages this client may read without asking.
    pub(super) covers: FxHashMap<PageId, Cover>,
    /// Rights called back before the FETCH that granted them was taken in.
    revoked: Revoked,
    /// Index lookups kept under rights on the gaps that guard them (a
    /// key-range server's, `trees.rs`).
    pub(super) lookups: KeptLookups,
    /// Ticks at every lookup taken in: a snapshot asked for after a
    /// lookup's tick may read it ([`KeptLookups`]).
    pub(super) clock: u64,
    /// Per page, the transactions of this client that asked for X on it
    /// (from just before the request is sent until they end): the others
    /// go to the server (and wait there) instead of reading the page under
    /// a right, or they would read around that X and see its commit only
    /// on the pages they read later. Kept apart from the rights: a right
    /// taken in while the X is asked (a reader's FETCH crossing the
    /// writer's) is covered too; a right kept only in the cover it came
    /// with was not, and a reader read around the writer's X.
    pub(super) writers: FxHashMap<PageId, Vec<TxnId>>,
}

impl ClientState {
    /// Notes that `txn` asks for X on `id` (see [`ClientState::writers`]).
    pub(super) fn add_writer(&mut self, id: PageId, txn: TxnId) {
        let ws = self.writers.entry(id).or_default();
        if !ws.contains(&txn) {
            ws.push(txn);
        }
    }

    /// Whether a transaction of this client other than `txn` asked for X
    /// on `id` and has not ended.
    pub(super) fn other_writer(&self, id: PageId, txn: TxnId) -> bool {
        // Usually no transaction writes at all: no hashing then.
        !self.writers.is_empty() && self.writers.get(&id).is_some_and(|ws| ws.iter().any(|w| *w != txn))
    }

    /// `txn` ended: it writes no page any more.
    pub(super) fn writer_ended(&mut self, txn: TxnId) {
        self.writers.retain(|_, ws| {
            ws.retain(|w| *w != txn);
            !ws.is_empty()
        });
    }

    /// Whether a right of epoch `cover` to `page`, just taken in, may be
    /// used (it was not called back before it arrived).
    pub(super) fn take_right(&mut self, page: PageId, cover: u64) -> bool {
        self.revoked.admits(Resource::Page(page), cover)
    }

    /// Names the transactions (not ending) that hold a lock on `key`, under
    /// a right or the server's, in an answer about to be sent.
    fn name_readers(&mut self, key: Resource) -> Vec<TxnId> {
        let mut users = Vec::new();
        for (t, v) in self.txns.iter_mut() {
            if v.locks.contains_key(&key) && !v.answering.ending {
                v.answering.name();
                users.push(*t);
            }
        }
        users
    }

    /// Whether every right of `rights` (gap, epoch), just taken in with a
    /// lookup, may be used.
    pub(super) fn take_gap_rights(&mut self, rights: &[(Resource, u64)]) -> bool {
        rights.iter().all(|&(k, e)| self.revoked.admits(k, e))
    }
}

impl Table for ClientState {
    fn revoked(&mut self) -> &mut Revoked {
        &mut self.revoked
    }

    fn answering(&mut self, txn: TxnId) -> Option<&mut Answering> {
        self.txns.get_mut(&txn).map(|v| &mut v.answering)
    }

    fn held(&self, key: Resource) -> Option<u64> {
        match key {
            Resource::Page(p) => self.covers.get(&p).map(|c| c.epoch),
            Resource::Gap(..) | Resource::TreeEnd(_) => self.lookups.epoch(key),
            _ => None,
        }
    }

    /// The right goes; its readers are the transactions holding a lock on
    /// the page (under the right or the server's). A writer of the page
    /// that has not read it is not one: its X, asked of the server, reads
    /// the page there; named, it would be granted S ahead of the caller's
    /// writer and then upgrade, and two such writers deadlock.
    ///
    /// A gap's right goes with the lookups kept under it; its readers are
    /// the transactions that read one of them.
    fn call_back(&mut self, key: Resource) -> Vec<TxnId> {
        match key {
            Resource::Page(id) => {
                self.covers.remove(&id);
            }
            Resource::Gap(..) | Resource::TreeEnd(_) => {
                self.lookups.drop_guard(key);
            }
            _ => return Vec::new(),
        }
        self.name_readers(key)
    }

    /// A right goes with its readers named, but the server may not have
    /// granted them their locks: a callback of the same right from a
    /// second writer, or the answer naming them refused (a reader that
    /// could not be granted S fails the writer, and the right stays
    /// registered). Answered "dropped" then, the next writer would go on
    /// past readers the server does not know of; so the transactions
    /// holding a lock on the page (or, for a gap, that read a lookup under
    /// it) are named again. Naming one the server granted already changes
    /// nothing.
    fn readers_without_right(&mut self, key: Resource) -> Vec<TxnId> {
        self.name_readers(key)
    }
}

impl RemoteStore {
    /// Past [`RemoteStore::rights_max`] rights, gives the server back those
    /// no running transaction reads under and none of this client's writers
    /// marked: first the pages no longer in the pool, oldest right first,
    /// then the oldest of the rest, down to three quarters of the bound
    /// ([`Bound::count`]). A right outlives its page's eviction (the page
    /// is read again without a lock), and the typed layer may still hold
    /// objects decoded from it, so rights are kept up to the bound rather
    /// than given back with each eviction.
    pub(super) fn give_back_rights(&self) {
        let bound = Bound::count(self.rights_max);
        let candidates: Vec<(PageId, u64)> = {
            let st = self.rights.lock();
            if !bound.passed(st.covers.len(), 0) {
                return;
            }
            let read: FxHashSet<PageId> = st
                .txns
                .values()
                .flat_map(|v| v.locks.keys())
                .filter_map(|r| match r {
                    Resource::Page(p) => Some(*p),
                    _ => None,
                })
                .collect();
            st.covers
                .iter()
                .filter(|(p, _)| !st.writers.contains_key(p) && !read.contains(p))
                .map(|(p, c)| (*p, c.epoch))
                .collect()
        };
        // The pool is asked outside the state's mutex.
        let ranked: Vec<((bool, u64), (PageId, u64))> = candidates
            .into_iter()
            .map(|(p, e)| ((self.pool.is_cached(p), e), (p, e)))
            .collect();
        let mut dropped = Vec::new();
        {
            let mut st = self.rights.lock();
            let st = &mut *st;
            bound.give_back(st.covers.len(), 0, ranked, |(page, epoch)| {
                // Unchanged since it was ranked, and still unread.
                let unchanged =
                    st.covers.get(&page).is_some_and(|c| c.epoch == epoch) && !st.writers.contains_key(&page);
                let read = st.txns.values().any(|v| v.locks.contains_key(&Resource::Page(page)));
                if !unchanged || read {
                    return 0;
                }
                st.covers.remove(&page);
                dropped.push((Resource::Page(page), epoch));
                1
            });
        }
        release(&self.conn, &dropped);
    }

    /// Gives the rights to cache `pages` (page, epoch) back to the server
    /// with the next request ([`release`]).
    pub(super) fn release_pages(&self, pages: impl IntoIterator<Item = (PageId, u64)>) {
        let dropped: Vec<(Resource, u64)> = pages.into_iter().map(|(p, e)| (Resource::Page(p), e)).collect();
        release(&self.conn, &dropped);
    }

    /// Before `txn` asks for X on page `id`: marks it the page's writer (the
    /// other transactions stop reading under the right) and names to the
    /// server the others that read it under the right already, so that the
    /// X waits for them. A round trip of its own (a CALLBACK_REPLY with
    /// callback id 0), acknowledged before any of them may end; nothing
    /// when no other transaction reads the page.
    pub(super) fn name_readers(&self, txn: TxnId, id: PageId) -> Result<()> {
        self.name_readers_of(txn, &[id])
    }

    /// [`RemoteStore::name_readers`] of every page of `pages`, in one
    /// round trip (none when no other transaction reads any of them).
    pub(super) fn name_readers_of(&self, txn: TxnId, pages: &[PageId]) -> Result<()> {
        let named: Vec<(Resource, Vec<TxnId>)> = {
            let mut st = self.rights.lock();
            let st = &mut *st;
            let mut named = Vec::new();
            for &id in pages {
                st.add_writer(id, txn);
                if !st.covers.contains_key(&id) {
                    continue;
                }
                let mut readers = Vec::new();
                for (t, v) in st.txns.iter_mut() {
                    if *t != txn && v.locks.contains_key(&Resource::Page(id)) && !v.answering.ending {
                        v.answering.name();
                        readers.push(*t);
                    }
                }
                if !readers.is_empty() {
                    named.push((Resource::Page(id), readers));
                }
            }
            named
        };
        if named.is_empty() {
            return Ok(());
        }
        self.rights.name(&self.conn, txn, named)
    }

    /// The pages of `group` this client holds a right to cache.
    pub(super) fn covered_pages_of(&self, group: GroupId) -> Vec<PageId> {
        let st = self.rights.lock();
        st.covers
            .iter()
            .filter(|(_, c)| c.facts.group == Some(group))
            .map(|(p, _)| *p)
            .collect()
    }

    /// Takes S on page `id` for `txn` under the client's right to cache it,
    /// if it has one (and no transaction of its own is writing the page):
    /// no server call. `false`: the caller must ask the server.
    pub(super) fn use_cover(&self, txn: TxnId, id: PageId) -> bool {
        let mut st = self.rights.lock();
        let st = &mut *st;
        let Some(c) = st.covers.get(&id) else {
            return false;
        };
        if st.other_writer(id, txn) {
            return false;
        }
        let facts = c.facts;
        let view = st.txns.entry(txn).or_default();
        if view.answering.ending {
            return false;
        }
        view.facts.insert(id, facts);
        view.locks.entry(Resource::Page(id)).or_insert(LockMode::S);
        self.conn.cache_hits.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Answers callbacks that came together (on the callback thread,
    /// `remote::rights::callback_daemon`).
    pub(super) fn answer_callback(&self, cbs: Vec<Callback>) -> Result<()> {
        self.rights.answer(&self.conn, cbs, || {})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer asks for X on a page this client holds no right to; a
    /// reader's FETCH crossing it brings a right. The others must still not
    /// read under that right until the writer ends: they read around its X
    /// otherwise (the writer was kept in the cover it found, so a right
    /// taken in after it asked did not know it, and a reader summed one
    /// side of a transfer: `cache_coherence page_views_…`).
    #[test]
    fn a_writer_asked_before_the_right_arrived_still_keeps_readers_off_it() {
        let mut st = ClientState::default();
        let (page, writer, reader) = (PageId(7), TxnId(1), TxnId(2));
        st.add_writer(page, writer);
        st.covers.insert(
            page,
            Cover {
                epoch: 3,
                facts: Facts {
                    in_use: true,
                    group: None,
                },
            },
        );
        assert!(st.other_writer(page, reader), "the reader must go to the server");
        assert!(!st.other_writer(page, writer), "the writer reads its own page");
        st.writer_ended(writer);
        assert!(!st.other_writer(page, reader));
        assert!(st.writers.is_empty(), "nothing kept for a writer that ended");
    }

    /// Another client's writer calls back a page this client caches, while
    /// a transaction of its own has asked for X on it (its FETCH on the
    /// way) without having read it. The answer names only the transaction
    /// that read the page: named too, the writer would be granted S ahead
    /// of the other and then upgrade to X, and two inserters of one page
    /// so named deadlock (OO1's mixed work with page clients on a
    /// key-range server: about 35 deadlocks per 100 operations at 4
    /// clients).
    #[test]
    fn a_callback_names_the_readers_of_the_page_not_its_writers() {
        let mut st = ClientState::default();
        let (page, writer, reader) = (PageId(7), TxnId(1), TxnId(2));
        let facts = Facts {
            in_use: true,
            group: None,
        };
        st.covers.insert(page, Cover { epoch: 3, facts });
        st.txns.entry(writer).or_default();
        st.add_writer(page, writer);
        st.txns
            .entry(reader)
            .or_default()
            .locks
            .insert(Resource::Page(page), LockMode::S);
        assert_eq!(st.call_back(Resource::Page(page)), vec![reader]);
        assert!(!st.covers.contains_key(&page), "the right goes with the callback");
    }
}
