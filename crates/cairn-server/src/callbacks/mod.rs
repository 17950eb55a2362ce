//! Callback locking on the server (ARCHITECTURE.md, "Cache coherence, per
//! client kind"; Franklin & Carey's
//! callback locking, Soprano's callback daemon): which client caches which
//! page or object, and calling it back before a writer may lock it.
//!
//! A right covers a *key*: a page ([`Resource::Page`]: a page client's
//! cached page, or a B+-tree leaf an object client's index lookups were
//! answered from), an object ([`Resource::Object`]: an object client's
//! cached object), or on a server that locks key ranges a B+-tree's gap
//! ([`Resource::Gap`], [`Resource::TreeEnd`]: the gap locks that guarded
//! an index lookup the client keeps). A gap's right is called back before
//! IX or X on the gap and before X on its whole tree ([`Resource::Tree`]),
//! **from the writer's own client too** (which keeps lookups by key and
//! cannot tell which gap its own entry falls in), and none is granted
//! while any writer is marked on the gap or its tree. What follows says
//! "page"; an object's right works the same way, with these differences:
//!
//! - it is called back before X on the object, and before X or SIX on its
//!   (home) page — a page-level change may change any object of the page,
//!   so the table keeps the objects with rights by page; IX on the page
//!   (another object of it changed at object level) leaves it alone;
//! - no right to an object is granted while a writer of another client is
//!   marked on its page;
//! - a transaction reading it under the right is granted IS on its page
//!   and S on the object, the locks it held in effect.
//!
//! A client that fetched a page under a lock may keep it across its
//! transactions (the *right to cache*, or *cover*): its later transactions
//! read the page without asking, under a lock only the client knows of.
//! The server records each right with an *epoch* (unique, increasing) and
//! hands it to the client in the FETCH part. Before any transaction takes X
//! on the page (FETCH X, a try-insert, FREE, LOCK X), the server calls back
//! every *other* client holding a right, and waits for the answers:
//!
//! - **dropped**: the client gave the right up and no transaction of its
//!   own reads the page;
//! - **in use by T₁…Tₙ**: those transactions of the client read the page
//!   under the right. The server grants each an S lock ahead of waiters
//!   ([`Db::lock_ahead`](cairn_storage::Db::lock_ahead)): the lock they
//!   held in effect becomes a real one, so the writer then waits for them
//!   *in the lock table*, with the lock
//!   table's timeouts and deadlock detection (a cycle through a callback is
//!   a cycle like any other). The client has given up its right either way.
//!
//! A FETCH X of many pages (a page client's commit locking the pages of
//! its appends, a prefetch for update) calls them all back in one round
//! ([`Callbacks::call_back_all`]): every callback goes out before any
//! answer is waited for, and each page's lock request then finds nobody
//! left to call back.
//!
//! While a writer calls back a page (and until its lock request returns) no
//! other client gets a right to the page: its fetch takes the lock for its
//! transaction only (cover 0), so a right never appears behind the writer's
//! back. A client never calls itself back: its own transactions name the
//! others reading the page in the FETCH X (`also`), and the server grants
//! those the same way.
//!
//! # A callback's states (server)
//!
//! ```text
//!                 notice sent                      CALLBACK_REPLY (dropped / in use: S granted)
//!  writer ─────▶ Outstanding ───────────────────────────────────────────────▶ Answered ──▶ removed by the writer
//!   arrives        │  client gone (send fails or session closes) ──────────▶ Answered (dropped)
//!                  └─ no answer within the lock timeout ─▶ the silent session is ended
//!                     (GOODBYE SESSION_ENDED, its rights dropped): removed, the writer goes on
//! ```
//!
//! | transition | made by | effect on the right |
//! |---|---|---|
//! | (none) → Outstanding | [`Callbacks::call_back`] | still held until answered |
//! | Outstanding → Answered | [`Callbacks::answer`] | removed if its epoch is still the client's |
//! | Outstanding → Answered | [`Callbacks::session_closed`] | every right of the session removed |
//! | Outstanding → removed | [`Callbacks::call_back`] at the timeout (`end_silent`) | every right of the silent session removed, and the session ended: a client that may be reading under the right must never commit what it read, so the right cannot just be taken from a session that lives on |
//!
//! A right's states: `none ─register→ held(e) ─answer(e) / session closed→ none`;
//! a newer fetch by the same client replaces `held(e)` with `held(e')`, and
//! an answer for `e` then leaves `held(e')` alone.
//!
//! # Where the code is
//!
//! This file holds the table (rights by key and by client, writers' marks,
//! outstanding callbacks) and its counters. `grant.rs` grants rights and
//! takes back those given up; `writer.rs` is the writer's side (marking a
//! key, sending the callbacks, waiting for the answers); `answer.rs` is a
//! client's answer; `sessions.rs` is what a session opening or closing does
//! to the table, and the ending of a session that stays silent.

mod answer;
mod grant;
mod sessions;
mod writer;

pub use sessions::{SILENT_BAR_FIRST, SILENT_BAR_MAX};
pub use writer::WriterMark;

use cairn_storage::fxhash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::sync::{Condvar, Mutex, MutexGuard};

use cairn_net::rights::RightKey;
use cairn_storage::lock::{LockOwner, Resource};
use cairn_storage::{ClientId, Error, Oid, PageId};

use sessions::Bar;

/// One key's rights and writers.
#[derive(Default, Debug)]
struct Rights {
    /// Clients holding a right, with its epoch.
    cachers: HashMap<ClientId, u64>,
    /// Clients with a writer calling the page back or locking it (a
    /// multiset: one entry per writer).
    writers: Vec<ClientId>,
}

/// A callback sent and not yet collected by its writer.
#[derive(Debug)]
struct Outstanding {
    client: ClientId,
    key: Resource,
    /// The writer's transaction (its readers are granted S with it named).
    writer: LockOwner,
    /// `None` until answered; then what granting the readers' locks gave.
    outcome: Option<Result<(), Error>>,
}

#[derive(Default, Debug)]
struct Table {
    entries: HashMap<Resource, Rights>,
    by_client: HashMap<ClientId, HashSet<Resource>>,
    /// The objects some client holds a right to, by (home) page: a
    /// page-level writer calls them back.
    objects_on: HashMap<PageId, HashSet<Oid>>,
    /// The gaps (and tree ends) some client holds a right to, by tree
    /// root: the tree's destroyer calls them back.
    gaps_on: HashMap<PageId, HashSet<Resource>>,
    outstanding: HashMap<u64, Outstanding>,
    next_id: u64,
    next_epoch: u64,
    /// Rights held now, all clients (the entries of `by_client`'s sets).
    rights: usize,
    /// Sessions opened from an address barred from rights ([`Bar`]): they
    /// are served under locks alone.
    no_rights: HashSet<ClientId>,
    /// Addresses whose sessions were ended for not answering a callback.
    bars: HashMap<String, Bar>,
}

impl Table {
    fn unregister(&mut self, client: ClientId, key: Resource, epoch: Option<u64>) {
        let Some(rights) = self.entries.get_mut(&key) else {
            return;
        };
        if let Some(&e) = rights.cachers.get(&client) {
            if epoch.is_none_or(|want| want == e) {
                rights.cachers.remove(&client);
                self.rights -= 1;
                if let Some(set) = self.by_client.get_mut(&client) {
                    set.remove(&key);
                }
            }
        }
        let no_cachers = rights.cachers.is_empty();
        if no_cachers && rights.writers.is_empty() {
            self.entries.remove(&key);
        }
        if let (true, Resource::Object(o)) = (no_cachers, key) {
            if let Some(set) = self.objects_on.get_mut(&o.page) {
                set.remove(&o);
                if set.is_empty() {
                    self.objects_on.remove(&o.page);
                }
            }
        }
        if let (true, Some(root)) = (no_cachers, key.tree()) {
            if let Some(set) = self.gaps_on.get_mut(&root) {
                set.remove(&key);
                if set.is_empty() {
                    self.gaps_on.remove(&root);
                }
            }
        }
    }

    /// Removes `key`'s entry if nothing is left in it.
    fn tidy(&mut self, key: Resource) {
        if self
            .entries
            .get(&key)
            .is_some_and(|r| r.cachers.is_empty() && r.writers.is_empty())
        {
            self.entries.remove(&key);
        }
    }

    /// The rights a writer of `writer` on `key` must call back: (key,
    /// client, epoch) of every other client's right to `key` and, with
    /// `objects`, to each object of the page `key` names. A gap's right
    /// (and, for a whole tree, the rights on each of its gaps) is called
    /// back from the writer's own client too: its lookups are kept per key,
    /// and only the server knows which gap an entry falls in.
    fn targets(&self, writer: ClientId, key: Resource, objects: bool) -> Vec<(Resource, ClientId, u64)> {
        let mut keys = vec![key];
        if let (true, Resource::Page(p)) = (objects, key) {
            if let Some(set) = self.objects_on.get(&p) {
                keys.extend(set.iter().map(|o| Resource::Object(*o)));
            }
        }
        if let Resource::Tree(root) = key {
            if let Some(set) = self.gaps_on.get(&root) {
                keys.extend(set.iter().copied());
            }
        }
        let mut out = Vec::new();
        for k in keys {
            if let Some(r) = self.entries.get(&k) {
                out.extend(
                    r.cachers
                        .iter()
                        .filter(|(c, _)| **c != writer || k.tree().is_some())
                        .map(|(c, e)| (k, *c, *e)),
                );
            }
        }
        out
    }

    /// True if a writer of a client other than `client` is marked on `key`,
    /// or (for an object) on its page; for a gap, a writer of any client,
    /// on the gap or on its whole tree.
    fn other_writer(&self, client: ClientId, key: Resource) -> bool {
        let own_too = key.tree().is_some();
        let marked = |k: Resource| {
            self.entries
                .get(&k)
                .is_some_and(|r| r.writers.iter().any(|w| own_too || *w != client))
        };
        marked(key)
            || matches!(key, Resource::Object(o) if marked(Resource::Page(o.page)))
            || key.tree().is_some_and(|root| marked(Resource::Tree(root)))
    }
}

/// The wire form of a right's key (pages, objects, and a B+-tree's gaps
/// under key-range locking).
pub(crate) fn right_key(key: Resource) -> Option<RightKey> {
    match key {
        Resource::Page(p) => Some(RightKey::Page(p.0)),
        Resource::Object(o) => Some(RightKey::Object(o.to_bytes())),
        Resource::Gap(root, hash) => Some(RightKey::Gap(root.0, hash)),
        Resource::TreeEnd(root) => Some(RightKey::TreeEnd(root.0)),
        _ => None,
    }
}

/// The key a client's message names.
pub fn key_of(key: RightKey) -> Resource {
    match key {
        RightKey::Page(p) => Resource::Page(PageId(p)),
        RightKey::Object(o) => Resource::Object(Oid::from_bytes(&o)),
        RightKey::Gap(root, hash) => Resource::Gap(PageId(root), hash),
        RightKey::TreeEnd(root) => Resource::TreeEnd(PageId(root)),
    }
}

/// Counters of the callback table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CallbackStats {
    /// Rights granted with a FETCH.
    pub rights_granted: u64,
    /// Callbacks sent.
    pub callbacks_sent: u64,
    /// Rounds of callbacks a writer waited for the answers of: one per
    /// lock request, or one for all the pages of a FETCH X of many.
    pub callback_rounds: u64,
    /// Callbacks answered "in use".
    pub answered_in_use: u64,
    /// Readers named in an answer that could not be granted their lock
    /// (another holder conflicts): the writer failed instead of going on.
    pub readers_not_granted: u64,
    /// Rights not granted because the table held its maximum.
    pub rights_refused_full: u64,
    /// Rights a client gave back unasked (RELEASE).
    pub rights_given_back: u64,
    /// Sessions ended because they did not answer a callback within the
    /// lock timeout (their rights dropped, so the writer went on).
    pub sessions_ended_silent: u64,
    /// Sessions opened from an address barred for such silence, served
    /// without rights to cache.
    pub sessions_without_rights: u64,
}

/// Default [`Callbacks::new`] bound: rights held at once by all clients
/// together, about 150 MiB of table (4 GiB of cached 4 KiB pages).
pub const RIGHTS_MAX_DEFAULT: usize = 1 << 20;

/// The server's callback table; see the module docs.
#[derive(Debug)]
pub struct Callbacks {
    table: Mutex<Table>,
    answered: Condvar,
    stats: Mutex<CallbackStats>,
    rights_max: usize,
}

impl Default for Callbacks {
    fn default() -> Callbacks {
        Callbacks::new(RIGHTS_MAX_DEFAULT)
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Callbacks {
    /// An empty table that holds at most `rights_max` rights at once (all
    /// clients together): the server's memory for callback locking is
    /// bounded whatever the clients fetch.
    pub fn new(rights_max: usize) -> Callbacks {
        Callbacks {
            table: Mutex::default(),
            answered: Condvar::new(),
            stats: Mutex::default(),
            rights_max,
        }
    }

    /// The counters.
    pub fn stats(&self) -> CallbackStats {
        *lock(&self.stats)
    }

    /// Rights held now (all clients).
    pub fn rights_held(&self) -> usize {
        lock(&self.table).rights
    }

    /// Asserts the table's invariants (tests): every right is listed under
    /// its client and back, no page entry is empty.
    pub fn check_invariants(&self) {
        let t = lock(&self.table);
        for (key, rights) in &t.entries {
            assert!(
                !rights.cachers.is_empty() || !rights.writers.is_empty(),
                "an empty entry for {key}"
            );
            for client in rights.cachers.keys() {
                assert!(
                    t.by_client.get(client).is_some_and(|s| s.contains(key)),
                    "client {} holds {key} but is not listed",
                    client.0
                );
            }
            if let (false, Resource::Object(o)) = (rights.cachers.is_empty(), key) {
                assert!(
                    t.objects_on.get(&o.page).is_some_and(|s| s.contains(o)),
                    "{key} has rights but is not listed under its page"
                );
            }
        }
        for (page, objects) in &t.objects_on {
            for o in objects {
                assert!(
                    o.page == *page
                        && t.entries
                            .get(&Resource::Object(*o))
                            .is_some_and(|r| !r.cachers.is_empty()),
                    "object {o} listed under page {page} without a right"
                );
            }
        }
        for (key, rights) in &t.entries {
            if let (false, Some(root)) = (rights.cachers.is_empty(), key.tree()) {
                assert!(
                    t.gaps_on.get(&root).is_some_and(|s| s.contains(key)),
                    "{key} has rights but is not listed under its tree"
                );
            }
        }
        for (root, gaps) in &t.gaps_on {
            for g in gaps {
                assert!(
                    g.tree() == Some(*root) && t.entries.get(g).is_some_and(|r| !r.cachers.is_empty()),
                    "{g} listed under tree {root} without a right"
                );
            }
        }
        let held: usize = t.entries.values().map(|r| r.cachers.len()).sum();
        assert_eq!(held, t.rights, "the count of rights");
        assert!(t.rights <= self.rights_max, "more rights than the bound");
        for (client, keys) in &t.by_client {
            for k in keys {
                assert!(
                    t.entries.get(k).is_some_and(|r| r.cachers.contains_key(client)),
                    "client {} lists {k} without a right",
                    client.0
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SessionState;
    use cairn_storage::lock::LockMode;
    use cairn_storage::{Db, TxnId};

    fn session(client: ClientId) -> SessionState {
        SessionState {
            client,
            peer: "test".into(),
            txns: Mutex::default(),
            notifier: std::sync::OnceLock::new(),
            file: false,
            object: false,
            role: crate::users::Role::Admin,
            restriction: cairn_storage::Restriction::default(),
            txns_bound: crate::bounds::Bound::new("test transactions", 64),
            waiting: crate::bounds::Bound::new("test waiting requests", 64),
            unwritten: Mutex::default(),
            turns: Mutex::default(),
        }
    }

    /// A callback `id` for page 10 sent to `client` on behalf of `writer`,
    /// not answered yet (as `call_back` leaves it).
    fn outstanding(cb: &Callbacks, id: u64, client: ClientId, writer: LockOwner) {
        lock(&cb.table).outstanding.insert(
            id,
            Outstanding {
                client,
                key: pg(10),
                writer,
                outcome: None,
            },
        );
    }

    /// A reader named in an answer that cannot be granted its lock
    /// (another transaction holds X) fails the writer — a retryable
    /// deadlock — and the right stays, so the next writer calls it back
    /// again. It used to log a warning, drop the right and let the writer
    /// go on past a read no lock covered.
    #[test]
    fn an_answer_whose_reader_cannot_be_granted_fails_the_writer_and_keeps_the_right() {
        let dir = tempfile::tempdir().unwrap();
        let opts = cairn_storage::DbOptions {
            background: false,
            ..cairn_storage::DbOptions::default()
        };
        let db = Db::create(dir.path(), &opts).unwrap();
        let cb = Callbacks::new(16);
        let (reader_client, writer_client, holder_client) = (ClientId(1), ClientId(2), ClientId(3));
        let reading = session(reader_client);
        let epoch = cb.register(reader_client, pg(10));
        let mut holder = db.begin_for(holder_client).unwrap();
        holder.lock_resource(pg(10), LockMode::X).unwrap();
        let writer = LockOwner::new(writer_client, TxnId(99));
        outstanding(&cb, 7, reader_client, writer);
        cb.answer(&db, &reading, 7, pg(10), epoch, 0, &[5]).unwrap();
        let outcome = lock(&cb.table).outstanding.remove(&7).and_then(|o| o.outcome);
        assert!(matches!(outcome, Some(Err(Error::Deadlock { .. }))), "{outcome:?}");
        assert_eq!(cb.rights_held(), 1, "the right stays registered");
        assert_eq!(cb.stats().readers_not_granted, 1);
        // The client's own writer naming a reader: refused the same way.
        let own = cb.answer(&db, &reading, 0, pg(10), 0, 6, &[5]);
        assert!(matches!(own, Err(Error::Deadlock { .. })), "{own:?}");
        holder.abort().unwrap();
        // Once nothing conflicts, the reader is granted and the right goes.
        outstanding(&cb, 8, reader_client, writer);
        cb.answer(&db, &reading, 8, pg(10), epoch, 0, &[5]).unwrap();
        let outcome = lock(&cb.table).outstanding.remove(&8).and_then(|o| o.outcome);
        assert!(matches!(outcome, Some(Ok(()))), "{outcome:?}");
        assert_eq!(cb.rights_held(), 0);
        cb.check_invariants();
    }

    fn pg(n: u32) -> Resource {
        Resource::Page(PageId(n))
    }

    /// The pages of a FETCH X of many are called back in one round: every
    /// callback goes out before any answer is waited for.
    #[test]
    fn many_keys_are_called_back_in_one_round_of_answers() {
        let cb = Callbacks::new(16);
        let (reader, writer) = (ClientId(1), ClientId(2));
        for p in [10, 11, 12] {
            assert_ne!(cb.register(reader, pg(p)), 0);
        }
        assert_ne!(cb.register(writer, pg(13)), 0);
        // (A client that is gone answers at once: its rights go.)
        let gone = |_: ClientId| None;
        let keys = [pg(10), pg(11), pg(12), pg(13)];
        let marks = cb
            .call_back_all(&gone, writer, TxnId(1), &keys, true, std::time::Duration::from_secs(1))
            .unwrap();
        assert_eq!(marks.len(), 4);
        assert_eq!(cb.register(reader, pg(11)), 0, "no right while the writer is marked");
        drop(marks);
        let st = cb.stats();
        assert_eq!((st.callbacks_sent, st.callback_rounds), (3, 1), "{st:?}");
        assert_eq!(cb.rights_held(), 1, "the writer's own right stays");
        // One key at a time: a round each.
        for p in [20, 21] {
            assert_ne!(cb.register(reader, pg(p)), 0);
            drop(cb.call_back(&gone, writer, TxnId(1), pg(p), true, std::time::Duration::from_secs(1)));
        }
        assert_eq!(cb.stats().callback_rounds, 3);
        cb.check_invariants();
    }

    #[test]
    fn a_full_table_grants_no_new_right_until_one_is_given_up() {
        let cb = Callbacks::new(2);
        let (a, b) = (ClientId(1), ClientId(2));
        assert_ne!(cb.register(a, pg(10)), 0);
        assert_ne!(cb.register(b, pg(10)), 0);
        // Full: no third right, for either client, on any page.
        assert_eq!(cb.register(a, pg(11)), 0);
        assert_eq!(cb.register(b, pg(12)), 0);
        // A right already held is renewed, full or not.
        let renewed = cb.register(a, pg(10));
        assert_ne!(renewed, 0);
        assert_eq!(cb.rights_held(), 2);
        assert_eq!(cb.stats().rights_refused_full, 2);
        cb.check_invariants();
        // A session that ends gives its rights up: room again.
        cb.session_closed(b);
        assert_eq!(cb.rights_held(), 1);
        assert_ne!(cb.register(a, pg(11)), 0);
        assert_eq!(cb.register(b, pg(12)), 0, "full again");
        cb.check_invariants();
    }

    #[test]
    fn a_writer_is_marked_without_waiting_only_when_no_other_client_caches_the_page() {
        let cb = Callbacks::new(16);
        let (a, b) = (ClientId(1), ClientId(2));
        // Nobody caches page 10, then only the writer itself does: marked.
        drop(cb.try_mark(a, pg(10), true).expect("nobody to call back"));
        assert_ne!(cb.register(a, pg(10)), 0);
        let mark = cb.try_mark(a, pg(10), true).expect("its own right needs no callback");
        // While the mark lives no other client gets a right to the page.
        assert_eq!(cb.register(b, pg(10)), 0);
        drop(mark);
        cb.check_invariants();
        // Another client's right: no mark, and nothing changed.
        assert_ne!(cb.register(b, pg(10)), 0);
        assert!(cb.try_mark(a, pg(10), true).is_none());
        assert!(cb.try_mark(b, pg(10), true).is_none(), "a caches it too");
        assert_ne!(cb.register(b, pg(11)), 0, "no mark left behind");
        cb.check_invariants();
        assert_eq!(cb.rights_held(), 3);
    }

    #[test]
    fn a_right_given_back_goes_only_with_its_own_epoch_and_makes_room() {
        let cb = Callbacks::new(2);
        let (a, b) = (ClientId(1), ClientId(2));
        let old = cb.register(a, pg(10));
        let renewed = cb.register(a, pg(10));
        let other = cb.register(b, pg(10));
        assert!(old != 0 && renewed > old && other != 0);
        assert_eq!(cb.register(a, pg(11)), 0, "full");
        // The epoch the client gave back was renewed since: kept. Another
        // client's right, and a page without rights, are not touched.
        cb.give_back(a, &[(pg(10), old), (pg(12), 1)]);
        assert_eq!(cb.rights_held(), 2);
        assert!(cb.try_mark(b, pg(10), true).is_none(), "a still caches it");
        cb.give_back(a, &[(pg(10), renewed)]);
        assert_eq!(cb.rights_held(), 1);
        assert_eq!(cb.stats().rights_given_back, 1);
        drop(cb.try_mark(b, pg(10), true).expect("only b's own right is left"));
        assert_ne!(cb.register(a, pg(11)), 0, "room again");
        // Giving back a right twice, or another client's, changes nothing.
        cb.give_back(a, &[(pg(10), renewed)]);
        cb.give_back(b, &[(pg(11), 0)]);
        assert_eq!(cb.rights_held(), 2);
        cb.check_invariants();
    }

    #[test]
    fn object_rights_are_called_back_by_their_page_writers_but_not_by_intention_locks() {
        let cb = Callbacks::new(16);
        let (a, b) = (ClientId(1), ClientId(2));
        let o = |slot: u16| {
            Resource::Object(Oid {
                page: PageId(10),
                slot: cairn_storage::SlotIdx(slot),
                uniq: cairn_storage::Uniq(1),
            })
        };
        assert_ne!(cb.register(a, o(1)), 0);
        assert_ne!(cb.register(a, o(2)), 0);
        cb.check_invariants();
        // X or SIX on the page (objects): a's objects must be called back.
        assert!(cb.try_mark(b, pg(10), true).is_none());
        // IX on the page (objects false) calls back page rights only.
        let mark = cb.try_mark(b, pg(10), false).expect("no page right to call back");
        // While b's writer is marked on the page, no object of it gets a right.
        assert_eq!(cb.register(a, o(3)), 0);
        assert_ne!(cb.register(b, o(3)), 0, "the writer's own client may");
        drop(mark);
        // X on one object calls back that object alone.
        assert!(cb.try_mark(b, o(1), false).is_none());
        drop(cb.try_mark(b, o(4), false).expect("nobody caches object 4"));
        // Given back, the page has no object rights of a left to call back.
        cb.give_back(a, &[(o(1), 1), (o(2), 2)]);
        cb.check_invariants();
        drop(cb.try_mark(b, pg(10), true).expect("only b's own right is left"));
        cb.session_closed(b);
        assert_eq!(cb.rights_held(), 0);
        cb.check_invariants();
    }
}
