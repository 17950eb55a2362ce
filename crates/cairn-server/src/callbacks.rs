//! Callback locking on the server (ARCHITECTURE.md, "Cache coherence, per
//! client kind"; Franklin & Carey's
//! callback locking, Soprano's callback daemon): which client caches which
//! page or object, and calling it back before a writer may lock it.
//!
//! A right covers a *key*: a page ([`Resource::Page`]: a page client's
//! cached page, or a B+-tree leaf an object client's index lookups were
//! answered from) or an object ([`Resource::Object`]: an object client's
//! cached object). What follows says "page"; an object's right works the
//! same way, with these differences:
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
//!   ([`Db::lock_ahead`]): the lock they held in effect becomes a real one,
//!   so the writer then waits for them *in the lock table*, with the lock
//!   table's timeouts and deadlock detection (a cycle through a callback is
//!   a cycle like any other). The client has given up its right either way.
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

use cairn_storage::fxhash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use cairn_net::message::{ErrorCode, Fault};
use cairn_net::rights::{Callback, RightKey};
use cairn_storage::lock::{LockMode, LockOwner, Resource};
use cairn_storage::{ClientId, Db, Error, Oid, PageId, TxnId};

use crate::SessionState;

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
    outstanding: HashMap<u64, Outstanding>,
    next_id: u64,
    next_epoch: u64,
    /// Rights held now, all clients (the entries of `by_client`'s sets).
    rights: usize,
    /// Sessions opened from an address barred from rights ([`Bars`]): they
    /// are served under locks alone.
    no_rights: HashSet<ClientId>,
    /// Addresses whose sessions were ended for not answering a callback.
    bars: HashMap<String, Bar>,
}

/// An address barred from rights to cache: a session of it did not answer
/// a callback in time. Its sessions opened before `until` get no right, so
/// no writer waits on them; each new offence doubles the bar
/// ([`SILENT_BAR_FIRST`], at most [`SILENT_BAR_MAX`]).
#[derive(Debug, Clone, Copy)]
struct Bar {
    until: Instant,
    strikes: u32,
}

/// How long an address goes without rights to cache after its first
/// session ended for silence; each further one doubles it.
pub const SILENT_BAR_FIRST: Duration = Duration::from_secs(60);
/// The longest bar.
pub const SILENT_BAR_MAX: Duration = Duration::from_secs(3600);

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
    /// `objects`, to each object of the page `key` names.
    fn targets(&self, writer: ClientId, key: Resource, objects: bool) -> Vec<(Resource, ClientId, u64)> {
        let mut keys = vec![key];
        if let (true, Resource::Page(p)) = (objects, key) {
            if let Some(set) = self.objects_on.get(&p) {
                keys.extend(set.iter().map(|o| Resource::Object(*o)));
            }
        }
        let mut out = Vec::new();
        for k in keys {
            if let Some(r) = self.entries.get(&k) {
                out.extend(
                    r.cachers
                        .iter()
                        .filter(|(c, _)| **c != writer)
                        .map(|(c, e)| (k, *c, *e)),
                );
            }
        }
        out
    }

    /// True if a writer of a client other than `client` is marked on `key`,
    /// or (for an object) on its page.
    fn other_writer(&self, client: ClientId, key: Resource) -> bool {
        let marked = |k: Resource| {
            self.entries
                .get(&k)
                .is_some_and(|r| r.writers.iter().any(|w| *w != client))
        };
        marked(key) || matches!(key, Resource::Object(o) if marked(Resource::Page(o.page)))
    }
}

/// The wire form of a right's key (pages and objects only).
fn right_key(key: Resource) -> Option<RightKey> {
    match key {
        Resource::Page(p) => Some(RightKey::Page(p.0)),
        Resource::Object(o) => Some(RightKey::Object(o.to_bytes())),
        _ => None,
    }
}

/// The key a client's message names.
pub fn key_of(key: RightKey) -> Resource {
    match key {
        RightKey::Page(p) => Resource::Page(PageId(p)),
        RightKey::Object(o) => Resource::Object(Oid::from_bytes(&o)),
    }
}

/// Counters of the callback table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CallbackStats {
    /// Rights granted with a FETCH.
    pub rights_granted: u64,
    /// Callbacks sent.
    pub callbacks_sent: u64,
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

/// A writer's mark on a page or object: while it lives no other client
/// gets a right to it (nor, for a page, to its objects). Dropped after the
/// writer's lock request returns.
pub struct WriterMark<'a> {
    callbacks: &'a Callbacks,
    client: ClientId,
    key: Resource,
}

impl Drop for WriterMark<'_> {
    fn drop(&mut self) {
        self.callbacks.unmark(self.client, self.key);
    }
}

impl WriterMark<'_> {
    /// The mark's (writer, key), the mark kept: whoever takes it must call
    /// [`Callbacks::unmark`] once the writer's lock request is over.
    pub fn keep(self) -> (ClientId, Resource) {
        let parts = (self.client, self.key);
        std::mem::forget(self);
        parts
    }
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

    /// Whether `client` holds a right to cache `key` now.
    pub fn has_right(&self, client: ClientId, key: Resource) -> bool {
        lock(&self.table)
            .by_client
            .get(&client)
            .is_some_and(|keys| keys.contains(&key))
    }

    /// Gives `client` the right to cache `key` (a page or an object; its
    /// transaction holds a lock on it now) and returns the right's epoch,
    /// or 0 if a writer of another client is calling it back or locking it
    /// (or, for an object, its page), or if the table holds its maximum of
    /// rights (a right already held is renewed even then).
    pub fn register(&self, client: ClientId, key: Resource) -> u64 {
        self.register_many(client, &[key])[0]
    }

    /// [`Callbacks::register`] for each of `keys` under one lock (the
    /// objects of a page an adaptive client fetches together): the epochs
    /// in order.
    pub fn register_many(&self, client: ClientId, keys: &[Resource]) -> Vec<u64> {
        let mut t = lock(&self.table);
        let (mut granted, mut refused) = (0, 0);
        let epochs = keys
            .iter()
            .map(|&key| {
                if right_key(key).is_none() || t.other_writer(client, key) {
                    return 0;
                }
                if !t.no_rights.is_empty() && t.no_rights.contains(&client) {
                    return 0;
                }
                let renewal = t.entries.get(&key).is_some_and(|r| r.cachers.contains_key(&client));
                if !renewal && t.rights >= self.rights_max {
                    // The table is full: the page is served under the lock
                    // alone and the client revalidates it by LSN next time
                    // (correct, one round trip more); a right given up
                    // makes room again.
                    refused += 1;
                    return 0;
                }
                t.next_epoch += 1;
                let epoch = t.next_epoch;
                t.entries.entry(key).or_default().cachers.insert(client, epoch);
                t.by_client.entry(client).or_default().insert(key);
                if let Resource::Object(o) = key {
                    t.objects_on.entry(o.page).or_default().insert(o);
                }
                if !renewal {
                    t.rights += 1;
                }
                granted += 1;
                epoch
            })
            .collect();
        drop(t);
        if granted + refused > 0 {
            let mut st = lock(&self.stats);
            st.rights_granted += granted;
            st.rights_refused_full += refused;
        }
        epochs
    }

    /// Ends a writer's mark on `key` (see [`WriterMark::keep`]).
    pub fn unmark(&self, client: ClientId, key: Resource) {
        let mut t = lock(&self.table);
        if let Some(rights) = t.entries.get_mut(&key) {
            if let Some(i) = rights.writers.iter().position(|c| *c == client) {
                rights.writers.swap_remove(i);
            }
            t.tidy(key);
        }
    }

    /// The writer's mark [`Callbacks::call_back`] would return, if there is
    /// no one to call back: no client but `writer` holds a right to `key`
    /// (nor, with `objects`, to an object of the page `key` names). `None`
    /// otherwise (nothing is changed); the caller then calls back, where it
    /// may wait. Never waits.
    pub fn try_mark(&self, writer: ClientId, key: Resource, objects: bool) -> Option<WriterMark<'_>> {
        let mut t = lock(&self.table);
        if !t.targets(writer, key, objects).is_empty() {
            return None;
        }
        t.entries.entry(key).or_default().writers.push(writer);
        Some(WriterMark {
            callbacks: self,
            client: writer,
            key,
        })
    }

    /// Calls `key` back from every client but `writer` holding a right to
    /// it (and, with `objects`, every object of the page `key` names) and
    /// waits (up to `timeout`) for every answer; see the module docs. The
    /// returned mark keeps other clients from getting a right until the
    /// caller's lock request is over.
    ///
    /// Errors: [`Error::LockTimeout`] if a client did not answer in time;
    /// [`Error::Deadlock`] if granting a reader's lock closed a cycle (the
    /// writer `txn` is the victim).
    #[allow(clippy::too_many_arguments)]
    pub fn call_back<'a>(
        &'a self,
        sessions: &dyn Fn(ClientId) -> Option<Arc<SessionState>>,
        writer: ClientId,
        txn: TxnId,
        key: Resource,
        objects: bool,
        timeout: Duration,
    ) -> Result<WriterMark<'a>, Error> {
        let mut t = lock(&self.table);
        t.entries.entry(key).or_default().writers.push(writer);
        let mark = WriterMark {
            callbacks: self,
            client: writer,
            key,
        };
        let targets = t.targets(writer, key, objects);
        if targets.is_empty() {
            return Ok(mark);
        }
        let mut ids = Vec::with_capacity(targets.len());
        for (k, client, epoch) in targets {
            t.next_id += 1;
            let id = t.next_id;
            t.outstanding.insert(
                id,
                Outstanding {
                    client,
                    key: k,
                    writer: LockOwner::new(writer, txn),
                    outcome: None,
                },
            );
            ids.push((id, k, client, epoch));
        }
        drop(t);
        lock(&self.stats).callbacks_sent += ids.len() as u64;
        self.send_notices(sessions, &ids);
        let silent = self.wait_for_answers(&ids, timeout)?;
        if !silent.is_empty() {
            self.end_silent(sessions, &silent, key);
        }
        Ok(mark)
    }

    /// Sends each callback of `ids` (id, key, client, epoch) to its client;
    /// one whose client is gone is answered at once (its right went with it).
    fn send_notices(
        &self,
        sessions: &dyn Fn(ClientId) -> Option<Arc<SessionState>>,
        ids: &[(u64, Resource, ClientId, u64)],
    ) {
        for &(id, k, client, epoch) in ids {
            let sent = sessions(client).is_some_and(|s| {
                let notice = match (s.object, k, right_key(k)) {
                    // A page session holds no object rights.
                    (false, Resource::Object(_), _) | (_, _, None) => return false,
                    (_, _, Some(key)) => Callback { id, key, epoch }.encode(),
                };
                s.notifier.get().is_some_and(|n| n.notice(notice).is_ok())
            });
            if !sent {
                let mut t = lock(&self.table);
                t.unregister(client, k, Some(epoch));
                if let Some(o) = t.outstanding.get_mut(&id) {
                    o.outcome = Some(Ok(()));
                }
            }
        }
    }

    /// Ends the sessions of `silent` clients, which did not answer a
    /// callback for `key` within the lock timeout: each gets a GOODBYE and
    /// its connection closes (its transactions abort when it has), and its
    /// rights are dropped now, so the writer goes on. Ending the session,
    /// not just taking the right, is what keeps this safe: the client may
    /// be reading under the right, and a session that is gone can commit
    /// nothing it read.
    ///
    /// Its address is barred from rights for a while ([`Bar`]): a client
    /// that reconnects at once to cache the page again cannot make the next
    /// writer wait a lock timeout too.
    fn end_silent(&self, sessions: &dyn Fn(ClientId) -> Option<Arc<SessionState>>, silent: &[ClientId], key: Resource) {
        for &client in silent {
            let state = sessions(client);
            let peer = state.as_ref().map_or("", |s| s.peer.as_str());
            let bar = self.bar(peer);
            tracing::warn!(client = client.0, %key, peer, bar_s = bar.as_secs(), "ending a session that did not answer a callback in time; its address gets no rights to cache for a while");
            if let Some(n) = state.and_then(|s| s.notifier.get().cloned()) {
                n.close(Fault::new(
                    ErrorCode::SESSION_ENDED,
                    format!("the session did not answer a callback for {key} within the lock timeout"),
                ));
            }
            self.session_closed(client);
            lock(&self.stats).sessions_ended_silent += 1;
        }
    }

    /// Waits (up to `timeout`) until every callback of `ids` is answered
    /// and collects them: the first answer that failed (granting a reader
    /// closed a cycle, or could not be granted) is the writer's error. The
    /// clients that did not answer in time are returned (their callbacks
    /// are forgotten): [`Callbacks::end_silent`] ends them.
    fn wait_for_answers(
        &self,
        ids: &[(u64, Resource, ClientId, u64)],
        timeout: Duration,
    ) -> Result<Vec<ClientId>, Error> {
        let start = Instant::now();
        let deadline = start + timeout;
        let mut t = lock(&self.table);
        loop {
            let pending: Vec<u64> = ids
                .iter()
                .filter(|(id, ..)| t.outstanding.get(id).is_some_and(|o| o.outcome.is_none()))
                .map(|(id, ..)| *id)
                .collect();
            if pending.is_empty() {
                break;
            }
            let now = Instant::now();
            if now >= deadline {
                let mut silent: Vec<ClientId> = pending
                    .iter()
                    .filter_map(|id| t.outstanding.get(id).map(|o| o.client))
                    .collect();
                silent.sort_unstable_by_key(|c| c.0);
                silent.dedup();
                return take_outcomes(&mut t, ids).map(|()| silent);
            }
            t = self
                .answered
                .wait_timeout(t, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        take_outcomes(&mut t, ids).map(|()| Vec::new())
    }

    /// A client's answer to callback `id` for `key` and `epoch`: grants
    /// each transaction in `in_use_by` S on the page (IS on its page and S
    /// on an object) ahead of waiters, drops
    /// the client's right (if it is still the one called back) and wakes the
    /// writer. An answer to a callback that is no longer outstanding (the
    /// writer gave up) still drops the right and grants the locks: both are
    /// what the client now assumes.
    ///
    /// Id 0 answers no callback (the client names its readers before its
    /// own transaction `own_writer` takes X): the right stays, and an error
    /// granting the locks (a deadlock) is returned to the client.
    ///
    /// A reader already waiting for the writer is made the deadlock victim
    /// ([`Db::lock_ahead`]), else the writer would always be.
    #[allow(clippy::too_many_arguments)]
    pub fn answer(
        &self,
        db: &Db,
        session: &SessionState,
        id: u64,
        key: Resource,
        epoch: u64,
        own_writer: u64,
        in_use_by: &[u64],
    ) -> Result<(), Error> {
        let grants: &[(Resource, LockMode)] = match key {
            Resource::Page(_) => &[(key, LockMode::S)],
            Resource::Object(o) => &[(Resource::Page(o.page), LockMode::IS), (key, LockMode::S)],
            _ => return Err(Error::InvalidArgument(format!("a callback answer for {key}"))),
        };
        let writer = if id == 0 {
            match own_writer {
                0 => None,
                w => Some(LockOwner::new(session.client, session.txn_or_begin(db, w)?.0)),
            }
        } else {
            lock(&self.table).outstanding.get(&id).map(|o| o.writer)
        };
        let mut outcome = Ok(());
        'txns: for &u in in_use_by {
            for &(res, mode) in grants {
                let granted = session.txn_or_begin(db, u).and_then(|(server_id, _)| {
                    db.lock_ahead(LockOwner::new(session.client, server_id), res, mode, writer)
                });
                match granted {
                    Ok(true) => {}
                    // Fail closed: the reader read under the right, so the
                    // writer may not go on past it; it fails (retryable)
                    // and the right stays registered, so the next writer
                    // calls it back again until the reader is gone.
                    Ok(false) => {
                        lock(&self.stats).readers_not_granted += 1;
                        outcome = Err(Error::Deadlock {
                            txn: writer.map_or(TxnId(u), |w| w.txn),
                            cycle: format!(
                                "transaction {u} of client {} reads {res} under a callback right and cannot be granted {mode:?} on it now",
                                session.client.0
                            ),
                        });
                        break 'txns;
                    }
                    Err(e) => {
                        outcome = Err(e);
                        break 'txns;
                    }
                }
            }
        }
        if id == 0 {
            return outcome;
        }
        if !in_use_by.is_empty() {
            lock(&self.stats).answered_in_use += 1;
        }
        let mut t = lock(&self.table);
        if outcome.is_ok() {
            t.unregister(session.client, key, Some(epoch));
        }
        if let Some(o) = t.outstanding.get_mut(&id) {
            if o.client == session.client && o.key == key && o.outcome.is_none() {
                o.outcome = Some(outcome);
            }
        }
        self.answered.notify_all();
        Ok(())
    }

    /// `client` gives its rights to cache `rights` back unasked (it no
    /// longer caches those pages): each goes if its epoch is still the one
    /// named (a right renewed since stays). A callback already sent for
    /// one of them is answered as usual (the client answers "dropped").
    pub fn give_back(&self, client: ClientId, rights: &[(Resource, u64)]) {
        let mut t = lock(&self.table);
        let before = t.rights;
        for &(key, epoch) in rights {
            t.unregister(client, key, Some(epoch));
        }
        let n = (before - t.rights) as u64;
        drop(t);
        lock(&self.stats).rights_given_back += n;
    }

    /// Bars the address of `peer` from rights (another strike), and
    /// returns for how long.
    fn bar(&self, peer: &str) -> Duration {
        let mut t = lock(&self.table);
        let now = Instant::now();
        let host = cairn_net::rpc::address_of(peer).to_string();
        let strikes = t.bars.get(&host).map_or(0, |b| b.strikes) + 1;
        let bar = SILENT_BAR_FIRST
            .saturating_mul(1u32 << (strikes - 1).min(16))
            .min(SILENT_BAR_MAX);
        t.bars.insert(
            host,
            Bar {
                until: now + bar,
                strikes,
            },
        );
        // Bars that ended long ago are forgotten (they bound the table).
        t.bars.retain(|_, b| b.until + SILENT_BAR_MAX > now);
        bar
    }

    /// A session `client` opened from `peer`: false (and the session gets
    /// no rights to cache; it is served under locks alone) if the address
    /// is barred now.
    pub fn session_opened(&self, client: ClientId, peer: &str) -> bool {
        let mut t = lock(&self.table);
        let barred = t
            .bars
            .get(cairn_net::rpc::address_of(peer))
            .is_some_and(|b| b.until > Instant::now());
        if barred {
            t.no_rights.insert(client);
            drop(t);
            lock(&self.stats).sessions_without_rights += 1;
        }
        !barred
    }

    /// A session ended: its rights go, and callbacks waiting for it are
    /// answered (its transactions were aborted, their locks released).
    pub fn session_closed(&self, client: ClientId) {
        let mut t = lock(&self.table);
        t.no_rights.remove(&client);
        let keys = t.by_client.remove(&client).unwrap_or_default();
        for k in keys {
            t.unregister(client, k, None);
        }
        for o in t.outstanding.values_mut() {
            if o.client == client && o.outcome.is_none() {
                o.outcome = Some(Ok(()));
            }
        }
        self.answered.notify_all();
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

/// Removes the callbacks of `ids` from the table; the first answer that
/// failed is the writer's error.
fn take_outcomes(t: &mut MutexGuard<'_, Table>, ids: &[(u64, Resource, ClientId, u64)]) -> Result<(), Error> {
    let mut result = Ok(());
    for (id, ..) in ids {
        if let Some(Outstanding {
            outcome: Some(Err(e)), ..
        }) = t.outstanding.remove(id)
        {
            if result.is_ok() {
                result = Err(e);
            }
        }
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(client: ClientId) -> SessionState {
        SessionState {
            client,
            peer: "test".into(),
            txns: Mutex::default(),
            notifier: std::sync::OnceLock::new(),
            file: false,
            object: false,
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
