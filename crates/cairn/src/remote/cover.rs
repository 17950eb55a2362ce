//! Callback locking on the client: what its transactions hold and know, its rights to cache pages, the callback thread.

use std::sync::atomic::Ordering;
use std::sync::{Mutex, Weak};
use std::time::Duration;

use cairn_net::page_service::{Callback, CallbackReply, PageRequest, RELEASE_RIGHTS_MAX};
use cairn_net::rpc::Client;
use cairn_storage::fxhash::FxHashMap;
use cairn_storage::lock::{LockMode, Resource};
use cairn_storage::{Error, GroupId, PageId, Result, TxnId};

use super::{lock, RemoteStore};

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
    /// The server knows the transaction (a request named it, or a callback
    /// answer said it reads a page): its end must reach the server.
    pub(super) on_server: bool,
    /// The server's transaction is over (a COMMIT or ABORT was sent): a
    /// read-only commit, which sends neither, ends it with an ABORT.
    pub(super) ended_on_server: bool,
    /// Its COMMIT or ABORT is about to be sent: it reads nothing more, so a
    /// callback answer does not name it (the server would begin it again).
    pub(super) ending: bool,
    /// Callback answers naming it that the server has not acknowledged:
    /// its ABORT must not overtake them (the server would begin it again
    /// for the answer and keep its lock).
    pub(super) answers_in_flight: u32,
}

impl TxnView {
    /// It is named in a callback answer about to be sent: the server will
    /// know it, and it must not end before the answer is acknowledged.
    fn named_in_answer(&mut self) {
        self.on_server = true;
        self.answers_in_flight += 1;
    }
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
    /// Rights called back before the FETCH that granted them was taken in
    /// (the reply and the callback cross): the highest epoch called back
    /// per page. A right of that epoch or older is not taken. Only a FETCH
    /// in flight when the callback came can carry such a right (one sent
    /// later gets a newer epoch), so this is kept only while FETCHes are in
    /// flight, and emptied when none is: it holds at most the callbacks of
    /// one burst of fetches, not one entry per page ever called back.
    revoked: FxHashMap<PageId, u64>,
    /// FETCH requests (or prefetch batches) sent and not yet taken in.
    fetches_in_flight: usize,
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

    /// A FETCH is about to be sent.
    fn fetch_started(&mut self) {
        self.fetches_in_flight += 1;
    }

    /// A FETCH was taken in (or failed): with none left in flight, no
    /// reply can still carry a right called back already.
    fn fetch_done(&mut self) {
        self.fetches_in_flight -= 1;
        if self.fetches_in_flight == 0 {
            self.revoked.clear();
        }
    }

    /// A callback of `epoch` for `page`, which this client has no right to
    /// (yet): a FETCH in flight may be bringing it, and must not install it.
    fn revoke(&mut self, page: PageId, epoch: u64) {
        if self.fetches_in_flight > 0 {
            let r = self.revoked.entry(page).or_insert(0);
            *r = (*r).max(epoch);
        }
    }

    /// Whether a right of epoch `cover` to `page`, just taken in, may be
    /// used (it was not called back before it arrived).
    pub(super) fn take_right(&mut self, page: PageId, cover: u64) -> bool {
        if cover == 0 || self.revoked.get(&page).is_some_and(|r| *r >= cover) {
            return false;
        }
        self.revoked.remove(&page);
        true
    }
}

/// Counts a FETCH in flight from its creation (before the request is sent)
/// to its drop (after its reply is taken in, or it failed).
pub(super) struct FetchInFlight<'a>(&'a Mutex<ClientState>);

impl<'a> FetchInFlight<'a> {
    pub(super) fn start(state: &'a Mutex<ClientState>) -> FetchInFlight<'a> {
        lock(state).fetch_started();
        FetchInFlight(state)
    }
}

impl Drop for FetchInFlight<'_> {
    fn drop(&mut self) {
        lock(self.0).fetch_done();
    }
}

impl RemoteStore {
    /// Past [`RemoteStore::rights_max`] rights, gives the server back those
    /// no running transaction reads under and none of this client's writers
    /// marked: first the pages no longer in the pool, oldest right first,
    /// then the oldest of the rest, down to three quarters of the bound (so
    /// it happens once per quarter of the bound, not at every fetch). A
    /// right outlives its page's eviction (the page is read again without a
    /// lock), and the typed layer may still hold objects decoded from it,
    /// so rights are kept up to the bound rather than given back with each
    /// eviction.
    pub(super) fn give_back_rights(&self) {
        let candidates: Vec<(PageId, u64)> = {
            let st = lock(&self.state);
            if st.covers.len() <= self.rights_max {
                return;
            }
            let read: std::collections::HashSet<PageId> = st
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
        let mut ranked: Vec<(bool, u64, PageId)> = candidates
            .into_iter()
            .map(|(p, e)| (self.pool.is_cached(p), e, p))
            .collect();
        ranked.sort_unstable();
        let mut dropped = Vec::new();
        {
            let mut st = lock(&self.state);
            let st = &mut *st;
            let keep = self.rights_max / 4 * 3;
            for (_, epoch, page) in ranked {
                if st.covers.len() <= keep {
                    break;
                }
                // Unchanged since it was ranked, and still unread.
                let unchanged =
                    st.covers.get(&page).is_some_and(|c| c.epoch == epoch) && !st.writers.contains_key(&page);
                let read = st.txns.values().any(|v| v.locks.contains_key(&Resource::Page(page)));
                if unchanged && !read {
                    st.covers.remove(&page);
                    dropped.push((page.0, epoch));
                }
            }
        }
        self.release(&dropped);
    }

    /// Tells the server the rights `dropped` (page, epoch) are given up,
    /// with the next request (RELEASE needs no answer, and costs no round
    /// trip of its own). A lost connection took the rights with it.
    pub(super) fn release(&self, dropped: &[(u32, u64)]) {
        for chunk in dropped.chunks(RELEASE_RIGHTS_MAX) {
            let (kind, body) = PageRequest::Release { rights: chunk.to_vec() }.encode();
            self.conn.bytes_sent.fetch_add(body.len() as u64, Ordering::Relaxed);
            self.conn.one_way.fetch_add(1, Ordering::Relaxed);
            self.conn
                .rights_given_back
                .fetch_add(chunk.len() as u64, Ordering::Relaxed);
            drop(self.conn.client.invoke_deferred(kind, body));
        }
    }

    /// Before `txn` asks for X on page `id`: marks it the page's writer (the
    /// other transactions stop reading under the right) and names to the
    /// server the others that read it under the right already, so that the
    /// X waits for them. A round trip of its own (a CALLBACK_REPLY with
    /// callback id 0), acknowledged before any of them may end; nothing
    /// when no other transaction reads the page.
    pub(super) fn name_readers(&self, txn: TxnId, id: PageId) -> Result<()> {
        let readers: Vec<TxnId> = {
            let mut st = lock(&self.state);
            let st = &mut *st;
            st.add_writer(id, txn);
            if !st.covers.contains_key(&id) {
                return Ok(());
            }
            let mut readers = Vec::new();
            for (t, v) in st.txns.iter_mut() {
                if *t != txn && v.locks.contains_key(&Resource::Page(id)) && !v.ending {
                    v.named_in_answer();
                    readers.push(*t);
                }
            }
            readers
        };
        if readers.is_empty() {
            return Ok(());
        }
        let reply = CallbackReply {
            id: 0,
            page: id.0,
            epoch: 0,
            writer: txn.0,
            in_use_by: readers.iter().map(|t| t.0).collect(),
        };
        self.send_answer(reply, &readers, true).map_err(|e| match e {
            Error::Deadlock { cycle, .. } => Error::Deadlock { txn, cycle },
            other => other,
        })
    }

    /// Sends a CALLBACK_REPLY naming `readers` and waits for it to be
    /// acknowledged, then lets those transactions end (see
    /// [`RemoteStore::start_ending`]). `counted`: the application's round
    /// trip (a callback thread's answer is not one).
    fn send_answer(&self, reply: CallbackReply, readers: &[TxnId], counted: bool) -> Result<()> {
        let (kind, body) = PageRequest::CallbackReply(reply).encode();
        let sent = self.conn.answer(kind, body, counted);
        let mut st = lock(&self.state);
        for t in readers {
            if let Some(v) = st.txns.get_mut(t) {
                v.answers_in_flight -= 1;
            }
        }
        drop(st);
        self.answered.notify_all();
        sent
    }

    /// Takes S on page `id` for `txn` under the client's right to cache it,
    /// if it has one (and no transaction of its own is writing the page):
    /// no server call. `false`: the caller must ask the server.
    pub(super) fn use_cover(&self, txn: TxnId, id: PageId) -> bool {
        let mut st = lock(&self.state);
        let st = &mut *st;
        let Some(c) = st.covers.get(&id) else {
            return false;
        };
        if st.other_writer(id, txn) {
            return false;
        }
        let facts = c.facts;
        let view = st.txns.entry(txn).or_default();
        if view.ending {
            return false;
        }
        view.facts.insert(id, facts);
        view.locks.entry(Resource::Page(id)).or_insert(LockMode::S);
        self.conn.cache_hits.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Answers a callback (see [`callback_daemon`]).
    fn answer_callback(&self, cb: Callback) -> Result<()> {
        self.conn.callbacks.fetch_add(1, Ordering::Relaxed);
        let id = PageId(cb.page);
        let users: Vec<TxnId> = {
            let mut st = lock(&self.state);
            let st = &mut *st;
            match st.covers.get(&id) {
                Some(c) if c.epoch <= cb.epoch => {
                    let writers = st.writers.get(&id).cloned().unwrap_or_default();
                    st.covers.remove(&id);
                    let mut users: Vec<TxnId> = Vec::new();
                    for (t, v) in st.txns.iter_mut() {
                        let reads = v.locks.contains_key(&Resource::Page(id)) || writers.contains(t);
                        if reads && !v.ending {
                            v.named_in_answer();
                            users.push(*t);
                        }
                    }
                    users
                }
                // A newer right (granted after this callback's writer was
                // done): nothing reads under the old one.
                Some(_) => Vec::new(),
                // The FETCH granting it has not been taken in yet: it must
                // not be.
                None => {
                    st.revoke(id, cb.epoch);
                    Vec::new()
                }
            }
        };
        if !users.is_empty() {
            self.conn.callbacks_in_use.fetch_add(1, Ordering::Relaxed);
        }
        let reply = CallbackReply {
            id: cb.id,
            page: cb.page,
            epoch: cb.epoch,
            writer: 0,
            in_use_by: users.iter().map(|t| t.0).collect(),
        };
        self.send_answer(reply, &users, false)
    }
}

/// The callback daemon (Soprano's): a thread per connection that waits for
/// the server's callbacks and hands each to `answer` with the store,
/// reading the connection itself when no request is waiting for a reply.
/// It ends when the store is gone or the connection closes. Page- and
/// object-server clients both run it.
pub(super) fn callback_daemon<S>(client: Client, store: Weak<S>, answer: fn(&S, &[u8])) {
    loop {
        match client.next_notice(Duration::from_millis(200)) {
            Ok(Some(body)) => {
                let Some(store) = store.upgrade() else { return };
                answer(&store, &body);
            }
            Ok(None) => {
                if store.strong_count() == 0 {
                    return;
                }
            }
            Err(_) => return,
        }
    }
}

/// A page-server client's answer to a callback notice.
pub(super) fn answer_page_callback(store: &RemoteStore, body: &[u8]) {
    match Callback::decode(body) {
        Ok(cb) => {
            if let Err(e) = store.answer_callback(cb) {
                tracing::warn!(error = %e, "answering a callback failed");
            }
        }
        Err(e) => tracing::warn!(error = %e, "the server sent a notice that is not a callback"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A callback that crosses a FETCH reply keeps that reply's right out;
    /// with no FETCH in flight nothing is remembered, and what was is
    /// forgotten once the last FETCH is taken in.
    #[test]
    fn revoked_rights_are_kept_only_while_fetches_are_in_flight() {
        let state = Mutex::new(ClientState::default());
        // No FETCH in flight: a callback for a page without a right (given
        // up or evicted here) leaves nothing behind.
        lock(&state).revoke(PageId(1), 5);
        assert!(lock(&state).revoked.is_empty());
        {
            let _a = FetchInFlight::start(&state);
            let _b = FetchInFlight::start(&state);
            let mut st = lock(&state);
            st.revoke(PageId(2), 7);
            st.revoke(PageId(2), 6);
            assert!(!st.take_right(PageId(2), 7), "called back before it arrived");
            assert!(!st.take_right(PageId(2), 3));
            assert!(st.take_right(PageId(2), 8), "a newer right is good");
            assert!(st.take_right(PageId(2), 7), "and replaced what was called back");
            assert!(!st.take_right(PageId(3), 0), "0 is no right");
            st.revoke(PageId(4), 9);
            drop(st);
            drop(_a);
            assert_eq!(lock(&state).revoked.len(), 1, "one FETCH still in flight");
        }
        let st = lock(&state);
        assert!(st.revoked.is_empty());
        assert_eq!(st.fetches_in_flight, 0);
    }

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
}
