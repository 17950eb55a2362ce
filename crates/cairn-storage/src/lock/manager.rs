//! [`LockManager`]: the lock table under one mutex, per-owner condition
//! variables for waiting, deadlock detection and timeouts. The protocol is
//! described in the [module docs](super).

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use super::graph::find_cycle;
use super::mode::LockMode;
use super::queue::{Queue, Request, Ticket};
use super::resource::{LockOwner, Resource};
use crate::error::{Error, Result};

/// Lock manager settings.
#[derive(Clone, Debug)]
pub struct LockOptions {
    /// How long [`LockManager::lock`] waits before giving up with
    /// [`Error::LockTimeout`].
    pub timeout: Duration,
}

impl Default for LockOptions {
    fn default() -> LockOptions {
        LockOptions {
            timeout: Duration::from_secs(10),
        }
    }
}

/// Lock manager counters since it was created.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LockStats {
    /// Calls of `lock`, `lock_timeout` and `try_lock`.
    pub requests: u64,
    /// Requests that had to wait (each counted once).
    pub waits: u64,
    /// Deadlock victims, each counted once: requests (or external waits)
    /// refused because they closed a cycle, and waiting owners whose wait
    /// was ended because a cycle chose them (see [`LockManager::lock_timeout`]).
    pub deadlocks: u64,
    /// Waits that gave up at their timeout.
    pub timeouts: u64,
    /// Requests that asked to strengthen a lock the owner already held.
    pub upgrades: u64,
    /// Time requests spent waiting, in microseconds, summed over every wait
    /// that ended (granted, refused, timed out or withdrawn).
    pub wait_micros: u64,
}

/// What became of a waiting request, recorded by the thread that decided it
/// for the waiting thread to collect.
#[derive(Clone, PartialEq, Eq, Debug)]
enum Outcome {
    Granted,
    /// `release_all` ended the owner while it waited.
    Cancelled,
    /// The waiting owner was chosen as a deadlock victim: by a request
    /// that closed a cycle through it (it had done the least work), or by
    /// [`LockManager::lock_ahead`] so that a writer can go on. The cycle,
    /// described for [`Error::Deadlock`].
    Victim(String),
}

impl Outcome {
    /// What the waiter gets for this decision.
    fn result(self, owner: LockOwner) -> Result<()> {
        match self {
            Outcome::Granted => Ok(()),
            Outcome::Cancelled => Err(Error::TxnNotActive(owner.txn)),
            Outcome::Victim(cycle) => Err(Error::Deadlock { txn: owner.txn, cycle }),
        }
    }
}

/// An owner that holds or waits for something.
#[derive(Debug)]
struct OwnerState {
    /// The resources it holds, each once, in the order first granted (each
    /// has a `Grant` for it in its queue). A list, not a set: a request
    /// knows from the queue whether the owner held the resource already,
    /// and `release_all` only walks it.
    held: Vec<Resource>,
    /// The one request it waits on, if any.
    wait: Option<(Resource, Ticket)>,
    /// Where its waiting thread sleeps; only that thread waits on it.
    wakeup: Arc<Condvar>,
    /// The task to wake instead, when its wait is parked ([`LockWait`]).
    waker: Option<Waker>,
}

impl OwnerState {
    fn new() -> OwnerState {
        OwnerState {
            held: Default::default(),
            wait: None,
            wakeup: Arc::new(Condvar::new()),
            waker: None,
        }
    }

    /// Wakes whoever waits for this owner's request to be decided: its
    /// sleeping thread, or the task polling its parked [`LockWait`].
    fn wake(&mut self) {
        self.wakeup.notify_all();
        if let Some(w) = self.waker.take() {
            w.wake();
        }
    }
}

/// Emptied lock queues kept for reuse, at most.
const SPARE_QUEUES: usize = 4096;

/// Everything under the manager's mutex.
#[derive(Debug, Default)]
struct Table {
    /// A queue per resource held or waited for; empty queues are removed.
    queues: crate::fxhash::FxHashMap<Resource, Queue>,
    /// Every owner that holds or waits for a lock (and no other).
    owners: crate::fxhash::FxHashMap<LockOwner, OwnerState>,
    /// External waits-for edges (waits on callbacks): waiter → owners it
    /// waits for. No empty sets.
    external: crate::fxhash::FxHashMap<LockOwner, HashSet<LockOwner>>,
    /// Emptied queues kept for reuse, so a lock on a new resource does not
    /// allocate (bounded by [`SPARE_QUEUES`]).
    spare: Vec<Queue>,
    /// Decisions about waiting requests not yet collected by their thread.
    outcomes: HashMap<Ticket, Outcome>,
    next_ticket: Ticket,
    stats: LockStats,
}

/// The lock manager: strict two-phase locking for owners (transactions of
/// clients), with FIFO queues, conversions, deadlock detection on a
/// waits-for graph that includes external (callback) edges, and timeouts.
///
/// Shared by reference (it is `Send + Sync`); any thread may act for any
/// owner, but one owner makes one request at a time.
#[derive(Debug)]
pub struct LockManager {
    table: Mutex<Table>,
    opts: LockOptions,
}

impl LockManager {
    /// A lock manager with no locks.
    pub fn new(opts: LockOptions) -> LockManager {
        LockManager {
            table: Mutex::new(Table::default()),
            opts,
        }
    }

    /// The settings it was made with.
    pub fn options(&self) -> &LockOptions {
        &self.opts
    }

    /// Locks `res` in `mode` for `owner`, waiting up to the default timeout;
    /// see [`LockManager::lock_timeout`].
    pub fn lock(&self, owner: LockOwner, res: Resource, mode: LockMode) -> Result<()> {
        self.lock_timeout(owner, res, mode, self.opts.timeout)
    }

    /// Locks `res` in `mode` for `owner`, blocking until granted.
    ///
    /// If the owner already holds `res`, this is a conversion to
    /// `sup(held, mode)`; asking for a mode the held one covers returns at
    /// once. A conversion waits only for incompatible *holders* and goes
    /// ahead of waiting new requests; a new request also waits behind every
    /// earlier incompatible waiter (FIFO).
    ///
    /// **Deadlocks.** If the request closes a cycle in the waits-for graph,
    /// the victim is the owner in the cycle that has done the **least
    /// work** — the fewest locks held — among those whose wait can be ended
    /// here: the requester, and the other members waiting for a lock (a
    /// thread blocked here or a parked [`LockWait`]); a member waiting for
    /// a callback ([`LockManager::add_external_wait`]) waits outside the
    /// table and is never chosen. Ties go to the requester, then to the
    /// youngest owner (the largest transaction id), so the choice is
    /// deterministic; see the [module docs](super) for the measure. If the
    /// victim is another owner, its request is withdrawn and its waiter
    /// gets [`Error::Deadlock`], and the search runs again: this request
    /// stays queued (and may still wait) only once it closes no cycle.
    ///
    /// Errors:
    /// - [`Error::Deadlock`] if this request is the victim. Nothing it held
    ///   is released (a failed conversion keeps the old mode); the caller
    ///   must abort (`release_all`) and may retry the whole transaction.
    ///   The same error ends the wait of an owner chosen as the victim of a
    ///   later request's cycle.
    /// - [`Error::LockTimeout`] after `timeout`; the request leaves the
    ///   queue and held locks stay.
    /// - [`Error::TxnNotActive`] if `release_all` ended the owner meanwhile.
    /// - [`Error::InvalidArgument`] if the owner already waits (for a lock
    ///   or a callback): an owner makes one request at a time.
    pub fn lock_timeout(&self, owner: LockOwner, res: Resource, mode: LockMode, timeout: Duration) -> Result<()> {
        let mut t = self.lock_table();
        let Some((ticket, target)) = t.request(owner, res, mode)? else {
            return Ok(());
        };
        // The clock is read only by requests that wait.
        let start = Instant::now();
        let wakeup = Arc::clone(&t.owners[&owner].wakeup);
        let deadline = start.checked_add(timeout);
        loop {
            // A decision taken while we slept wins over the timeout.
            if let Some(outcome) = t.outcomes.remove(&ticket) {
                t.stats.wait_micros += micros_since(start);
                return outcome.result(owner);
            }
            // No outcome: the request is still in its queue.
            let now = Instant::now();
            let left = match deadline {
                Some(d) if now >= d => {
                    t.cancel(res, ticket);
                    t.stats.timeouts += 1;
                    t.stats.wait_micros += micros_since(start);
                    return Err(Error::LockTimeout {
                        txn: owner.txn,
                        resource: res.to_string(),
                        mode: target.to_string(),
                        waited_ms: u64::try_from(now.duration_since(start).as_millis()).unwrap_or(u64::MAX),
                    });
                }
                Some(d) => d - now,
                // A timeout too far away to represent: wait in long naps.
                None => Duration::from_secs(3600),
            };
            t = wakeup.wait_timeout(t, left).unwrap_or_else(PoisonError::into_inner).0;
        }
    }

    /// Locks `res` in `mode` for `owner` with no thread waiting for it:
    /// `Ok(None)` if granted now (or already covered); otherwise the request
    /// is queued exactly as [`LockManager::lock_timeout`] queues it (FIFO,
    /// conversions ahead, a deadlock search through it, the victim the
    /// member of the cycle with the least work — this request, or a waiting
    /// owner whose wait then ends) and `Ok(Some(wait))`: a [`LockWait`]
    /// future that resolves when the request is decided. A parked wait may
    /// itself be chosen as a later request's victim: it then resolves to
    /// [`Error::Deadlock`]. A server parks its clients' lock waits
    /// this way, so a thousand waits hold a thousand small table entries,
    /// not a thousand threads.
    ///
    /// Errors: as [`LockManager::lock_timeout`], at once ([`Error::Deadlock`],
    /// [`Error::InvalidArgument`]); the timeout is the caller's
    /// ([`LockWait::time_out`]).
    pub fn park(self: &Arc<Self>, owner: LockOwner, res: Resource, mode: LockMode) -> Result<Option<LockWait>> {
        let Some((ticket, target)) = self.lock_table().request(owner, res, mode)? else {
            return Ok(None);
        };
        Ok(Some(LockWait {
            manager: Arc::clone(self),
            owner,
            res,
            mode: target,
            ticket,
            start: Instant::now(),
            done: false,
        }))
    }

    /// Locks `res` in `mode` for `owner` only if that can be done now:
    /// `Ok(true)` if granted (or already covered), `Ok(false)` if it would
    /// have to wait; then nothing changes. The same FIFO rule as
    /// [`LockManager::lock`]: a new request does not overtake a waiter.
    ///
    /// Errors: [`Error::InvalidArgument`] if the owner already waits.
    pub fn try_lock(&self, owner: LockOwner, res: Resource, mode: LockMode) -> Result<bool> {
        Ok(self.lock_table().try_grant(owner, res, mode)?.is_none())
    }

    /// Grants `owner` a lock it already holds in effect elsewhere: a
    /// page-server client's transaction reading a page under the client's
    /// callback right, reported when the server calls the page back
    /// (callback locking: `cairn-server/src/callbacks/`). The lock goes ahead of waiting requests (it is not
    /// new: the transaction has been reading under it), so it is granted if
    /// it is compatible with the *granted* group, whoever waits.
    ///
    /// `Ok(true)`: held now (or already covered; a weaker mode held is
    /// raised to the supremum of both). If the owner itself waits for a
    /// stronger lock on `res` (it read under the right, then asked to
    /// change what it read), the lock is granted and its request becomes
    /// a conversion. `Ok(false)`, nothing changed: another owner holds an
    /// incompatible lock — the caller must not let the writer go on. The new grant adds waits-for edges into
    /// `owner` from requests already waiting for `res`; if one closes a
    /// cycle the grant is withdrawn and the answer is [`Error::Deadlock`]
    /// (the caller, the writer whose callback this answers, is the victim).
    ///
    /// `writer`: the transaction about to ask for a conflicting lock on
    /// `res` (the one that called the page back). If `owner` already waits,
    /// directly or not, for `writer`, that request would close a cycle
    /// whose victim is the writer whenever it holds no more locks than the
    /// reader (a tie goes to the requester): a writer facing a stream of
    /// readers could starve. So the *reader* is the victim at once,
    /// whatever its work: its waiting request is withdrawn and its waiter
    /// gets [`Error::Deadlock`] (counted as one deadlock); the lock granted
    /// here stays until its transaction aborts.
    pub fn lock_ahead(
        &self,
        owner: LockOwner,
        res: Resource,
        mode: LockMode,
        writer: Option<LockOwner>,
    ) -> Result<bool> {
        let mut t = self.lock_table();
        t.stats.requests += 1;
        if let Some((_, ticket)) = t.owners.get(&owner).and_then(|s| s.wait).filter(|(r, _)| *r == res) {
            return t.grant_to_waiter(owner, res, mode, ticket);
        }
        let t = &mut *t;
        let q = t.queues.entry(res).or_insert_with(|| t.spare.pop().unwrap_or_default());
        let prior = q.granted_mode(owner);
        if prior.is_some_and(|h| h.covers(mode)) {
            return Ok(true);
        }
        // A weaker mode held (IS on a page it reads an object of under a
        // lock, S on it in effect under a right) is raised to both.
        let target = prior.map_or(mode, |h| h.sup(mode));
        if q.granted.iter().any(|g| g.owner != owner && !g.mode.compatible(target)) {
            if q.is_empty() {
                t.drop_queue(res);
            }
            return Ok(false);
        }
        q.grant(owner, target);
        if prior.is_none() {
            t.owners.entry(owner).or_insert_with(OwnerState::new).held.push(res);
        }
        if let Some(cycle) = find_cycle(owner, |o| t.waits_for(o)) {
            let cycle = t.describe_cycle(&cycle);
            let q = t.queues.get_mut(&res).expect("just granted");
            match prior {
                Some(h) => q.grant(owner, h),
                None => {
                    q.granted.retain(|g| g.owner != owner);
                    let state = t.owners.get_mut(&owner).expect("just granted");
                    state.held.retain(|r| *r != res);
                    if state.held.is_empty() && state.wait.is_none() {
                        t.owners.remove(&owner);
                    }
                    if t.queues.get(&res).is_some_and(|q| q.is_empty()) {
                        t.drop_queue(res);
                    }
                }
            }
            t.stats.deadlocks += 1;
            return Err(Error::Deadlock { txn: owner.txn, cycle });
        }
        if let Some(w) = writer.filter(|w| *w != owner) {
            let waiting = t.owners.get(&owner).and_then(|s| s.wait);
            if let Some((on, ticket)) = waiting {
                if t.reaches(owner, w) {
                    let cycle = format!(
                        "{owner} waited (for {on}) on a writer, {w}, that waits for a page {owner} \
                         read under its client's callback right"
                    );
                    t.make_victim(owner, on, ticket, cycle);
                }
            }
        }
        Ok(true)
    }

    /// Releases every lock `owner` holds and grants what that makes
    /// grantable. Commit and abort both call it (strict 2PL releases nothing
    /// earlier). It also cancels a request the owner is waiting on (its
    /// thread gets [`Error::TxnNotActive`]) and drops the owner's external
    /// waits. Releasing an unknown owner does nothing.
    pub fn release_all(&self, owner: LockOwner) {
        let mut t = self.lock_table();
        t.external.remove(&owner);
        let Some(mut state) = t.owners.remove(&owner) else {
            return;
        };
        let mut touched: Vec<Resource> = Vec::with_capacity(state.held.len() + 1);
        if let Some((res, ticket)) = state.wait {
            let q = t.queues.get_mut(&res).expect("a waiter's queue exists");
            q.remove_waiting(ticket).expect("a waiter is in its queue");
            t.outcomes.insert(ticket, Outcome::Cancelled);
            state.wake();
            touched.push(res);
        }
        let t = &mut *t;
        for res in state.held {
            let Entry::Occupied(mut e) = t.queues.entry(res) else {
                panic!("{owner} held {res}, which has no queue");
            };
            let q = e.get_mut();
            let before = q.granted.len();
            q.granted.retain(|g| g.owner != owner);
            assert_eq!(q.granted.len() + 1, before, "{owner} held {res} once");
            // Only a queue with waiters has anything to settle.
            if !q.waiting.is_empty() {
                touched.push(res);
            } else if q.granted.is_empty() {
                let q = e.remove();
                if t.spare.len() < SPARE_QUEUES {
                    t.spare.push(q);
                }
            }
        }
        for res in touched {
            t.settle(res);
        }
    }

    /// Lowers the mode `owner` holds on `res` to `mode`, which the held mode
    /// must cover, and grants what that makes grantable. Not a release —
    /// strict 2PL still holds what the owner used: a transaction de-escalates
    /// (`txn/objects.rs`) only after it has taken finer locks on everything
    /// it read under the coarse one, so what it read stays locked.
    ///
    /// Errors: [`Error::InvalidArgument`] if `owner` does not hold `res`, if
    /// the held mode does not cover `mode`, or if the owner waits (one
    /// request at a time).
    pub fn downgrade(&self, owner: LockOwner, res: Resource, mode: LockMode) -> Result<()> {
        let mut t = self.lock_table();
        if let Some((on, _)) = t.owners.get(&owner).and_then(|s| s.wait) {
            return Err(Error::InvalidArgument(format!(
                "{owner} waits for {on} and cannot lower its lock on {res}"
            )));
        }
        let Some(q) = t.queues.get_mut(&res) else {
            return Err(Error::InvalidArgument(format!(
                "{owner} holds no lock on {res} to lower"
            )));
        };
        let Some(held) = q.granted_mode(owner) else {
            return Err(Error::InvalidArgument(format!(
                "{owner} holds no lock on {res} to lower"
            )));
        };
        if !held.covers(mode) {
            return Err(Error::InvalidArgument(format!(
                "{owner} holds {held} on {res}, which {mode} is not lower than"
            )));
        }
        q.grant(owner, mode);
        t.settle(res);
        Ok(())
    }

    /// The mode `owner` holds on `res`, if any.
    pub fn held_mode(&self, owner: LockOwner, res: &Resource) -> Option<LockMode> {
        self.lock_table().queues.get(res)?.granted_mode(owner)
    }

    /// The granted group of `res`, in grant order.
    pub fn holders(&self, res: &Resource) -> Vec<(LockOwner, LockMode)> {
        self.lock_table()
            .queues
            .get(res)
            .map(|q| q.granted.iter().map(|g| (g.owner, g.mode)).collect())
            .unwrap_or_default()
    }

    /// The requests waiting for `res`, in queue order, with the mode each
    /// will hold once granted.
    pub fn waiters(&self, res: &Resource) -> Vec<(LockOwner, LockMode)> {
        self.lock_table()
            .queues
            .get(res)
            .map(|q| q.waiting.iter().map(|r| (r.owner, r.mode)).collect())
            .unwrap_or_default()
    }

    /// Records that `waiter` waits for `on` outside the lock table (for a
    /// callback; see the module docs), so that deadlock detection sees it.
    /// Adding an edge that is already there does nothing.
    ///
    /// A cycle the edge closes is broken as a lock request's is (see
    /// [`LockManager::lock_timeout`]): the victim is the member with the
    /// least work among `waiter` and the members waiting for a lock; a
    /// waiting member chosen gets [`Error::Deadlock`] and the edge stays.
    ///
    /// Errors: [`Error::Deadlock`] (and no edge) if `waiter` is the victim;
    /// [`Error::InvalidArgument`] if `waiter == on` or `waiter` is waiting
    /// for a lock.
    pub fn add_external_wait(&self, waiter: LockOwner, on: LockOwner) -> Result<()> {
        let mut t = self.lock_table();
        if waiter == on {
            return Err(Error::InvalidArgument(format!("{waiter} cannot wait for itself")));
        }
        if let Some((res, _)) = t.owners.get(&waiter).and_then(|s| s.wait) {
            return Err(Error::InvalidArgument(format!(
                "{waiter} waits for a lock on {res} and cannot also wait for a callback"
            )));
        }
        if !t.external.entry(waiter).or_default().insert(on) {
            return Ok(());
        }
        if let Err(e) = t.break_cycles(waiter) {
            t.remove_external(waiter, on);
            t.stats.deadlocks += 1;
            return Err(e);
        }
        Ok(())
    }

    /// Removes the external edge `waiter → on` (the callback answered);
    /// `false` if there was none.
    pub fn remove_external_wait(&self, waiter: LockOwner, on: LockOwner) -> bool {
        self.lock_table().remove_external(waiter, on)
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> LockStats {
        self.lock_table().stats.clone()
    }

    /// Asserts the lock table's invariants (see the module docs); panics
    /// naming the first one broken.
    pub fn check_invariants(&self) {
        self.lock_table().check_invariants();
    }

    /// The table, even after a panic elsewhere: every change to it is made
    /// by code that panics only on a broken invariant, which tests report.
    fn lock_table(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Microseconds since `start`, saturating.
fn micros_since(start: Instant) -> u64 {
    u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX)
}

/// A lock request parked in its queue by [`LockManager::park`], with no
/// thread waiting for it. Polled as a future, it resolves when the request
/// is decided: `Ok(())` granted; [`Error::Deadlock`] if the owner was made
/// a victim while it waited; [`Error::TxnNotActive`] if
/// [`LockManager::release_all`] ended the owner. Whoever decides it (a
/// release, a cancel) wakes the polling task.
///
/// The wait has no deadline of its own: its holder calls
/// [`LockWait::time_out`] when its timeout passes. Dropped undecided, the
/// request is withdrawn from its queue (as a timeout, uncounted); dropped
/// after it was granted, the lock stays held until the owner's
/// `release_all`, as every lock.
#[derive(Debug)]
pub struct LockWait {
    manager: Arc<LockManager>,
    owner: LockOwner,
    res: Resource,
    mode: LockMode,
    ticket: Ticket,
    start: Instant,
    done: bool,
}

impl LockWait {
    /// The resource waited for.
    pub fn resource(&self) -> Resource {
        self.res
    }

    /// The mode the owner will hold once granted.
    pub fn mode(&self) -> LockMode {
        self.mode
    }

    /// Gives up the wait at its timeout: the request leaves its queue (and
    /// the requests it alone blocked are granted) and the answer is
    /// [`Error::LockTimeout`] — unless it was decided first, and then that
    /// decision is the answer.
    pub fn time_out(mut self) -> Result<()> {
        self.done = true;
        let mut t = self.manager.lock_table();
        t.stats.wait_micros += micros_since(self.start);
        if let Some(outcome) = t.outcomes.remove(&self.ticket) {
            return outcome.result(self.owner);
        }
        t.cancel(self.res, self.ticket);
        t.stats.timeouts += 1;
        Err(Error::LockTimeout {
            txn: self.owner.txn,
            resource: self.res.to_string(),
            mode: self.mode.to_string(),
            waited_ms: u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX),
        })
    }
}

impl Future for LockWait {
    type Output = Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(Err(Error::InvalidArgument(format!(
                "the wait of {} for {} was polled after it ended",
                this.owner, this.res
            ))));
        }
        let mut t = this.manager.lock_table();
        if let Some(outcome) = t.outcomes.remove(&this.ticket) {
            this.done = true;
            t.stats.wait_micros += micros_since(this.start);
            return Poll::Ready(outcome.result(this.owner));
        }
        // Undecided, so still queued: its owner is in the table.
        if let Some(state) = t.owners.get_mut(&this.owner) {
            state.waker = Some(cx.waker().clone());
        }
        Poll::Pending
    }
}

impl Drop for LockWait {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut t = self.manager.lock_table();
        t.stats.wait_micros += micros_since(self.start);
        if t.outcomes.remove(&self.ticket).is_none() {
            t.cancel(self.res, self.ticket);
        }
    }
}

impl Table {
    /// A lock request up to its wait: `Ok(None)` if granted now (or
    /// already covered); else it is queued and the cycles it closes are
    /// broken ([`Table::break_cycles`]) — the requester being the victim,
    /// it is withdrawn ([`Error::Deadlock`]); another victim's withdrawn
    /// request may let this one be granted at once (`Ok(None)` again) —
    /// and its ticket and target mode are returned.
    fn request(&mut self, owner: LockOwner, res: Resource, mode: LockMode) -> Result<Option<(Ticket, LockMode)>> {
        let Some(target) = self.try_grant(owner, res, mode)? else {
            return Ok(None);
        };
        let ticket = self.enqueue(owner, res, target);
        if let Err(e) = self.break_cycles(owner) {
            self.cancel(res, ticket);
            self.stats.deadlocks += 1;
            return Err(e);
        }
        if let Some(outcome) = self.outcomes.remove(&ticket) {
            // Granted when a victim's request ahead of it left the queue.
            debug_assert_eq!(outcome, Outcome::Granted);
            return Ok(None);
        }
        Ok(Some((ticket, target)))
    }

    /// Counts a request and grants it now if nothing blocks it: `Ok(None)`
    /// if granted (or the owner already holds a mode covering `mode`), else
    /// the mode it will hold once granted (nothing changed; its queue, which
    /// holds a blocker, exists). Refuses an owner that already waits.
    ///
    /// The fast path of every request: one lookup of the owner, one of the
    /// queue. The owner waits for nothing (checked here), so the edges a
    /// grant may add *into* it (from waiters now incompatible with it)
    /// cannot close a cycle.
    fn try_grant(&mut self, owner: LockOwner, res: Resource, mode: LockMode) -> Result<Option<LockMode>> {
        self.stats.requests += 1;
        let state = self.owners.get_mut(&owner);
        if let Some((waiting_on, _)) = state.as_ref().and_then(|s| s.wait) {
            return Err(Error::InvalidArgument(format!(
                "{owner} already waits for {waiting_on}; an owner makes one request at a time"
            )));
        }
        if !self.external.is_empty() && self.external.contains_key(&owner) {
            return Err(Error::InvalidArgument(format!(
                "{owner} waits for a callback; an owner makes one request at a time"
            )));
        }
        let spare = &mut self.spare;
        let q = self
            .queues
            .entry(res)
            .or_insert_with(|| spare.pop().unwrap_or_default());
        let prior = q.granted_mode(owner);
        let target = match prior {
            Some(held) if held.covers(mode) => return Ok(None),
            Some(held) => {
                self.stats.upgrades += 1;
                held.sup(mode)
            }
            None => mode,
        };
        // A conversion only has to be compatible with the other holders.
        let ahead = if prior.is_some() { 0 } else { q.waiting.len() };
        if q.is_blocked(owner, target, ahead) {
            return Ok(Some(target));
        }
        q.grant(owner, target);
        if prior.is_none() {
            match state {
                Some(s) => s.held.push(res),
                None => {
                    let mut s = OwnerState::new();
                    s.held.push(res);
                    self.owners.insert(owner, s);
                }
            }
        }
        Ok(None)
    }

    /// [`LockManager::lock_ahead`] for an owner that is itself waiting on
    /// `res` (it read under a callback right and then asked for a stronger
    /// lock on the same resource): the lock it held in effect is granted
    /// now if no other holder conflicts, and its waiting request becomes a
    /// conversion to the supremum of both (ahead of new requests, as any
    /// conversion) — or is granted outright if the grant covers it. False,
    /// with nothing changed, if another holder conflicts; the caller must
    /// then not let the writer go on (fail closed). A cycle the grant
    /// closes makes the waiting owner the victim.
    fn grant_to_waiter(&mut self, owner: LockOwner, res: Resource, mode: LockMode, ticket: Ticket) -> Result<bool> {
        let q = self.queues.get_mut(&res).expect("a waiter's queue exists");
        if q.granted.iter().any(|g| g.owner != owner && !g.mode.compatible(mode)) {
            return Ok(false);
        }
        let prior = q.granted_mode(owner);
        let held = prior.map_or(mode, |h| h.sup(mode));
        let mut request = q.remove_waiting(ticket).expect("a waiter is in its queue");
        q.grant(owner, held);
        request.mode = request.mode.sup(held);
        let state = self.owners.get_mut(&owner).expect("a waiter is an owner");
        if prior.is_none() {
            state.held.push(res);
        }
        if held.covers(request.mode) {
            state.wait = None;
            state.wake();
            self.outcomes.insert(ticket, Outcome::Granted);
        } else {
            request.converting = true;
            self.queues.get_mut(&res).expect("still there").enqueue(request);
        }
        self.settle(res);
        if self
            .owners
            .get(&owner)
            .and_then(|s| s.wait)
            .is_some_and(|(_, t)| t == ticket)
        {
            if let Some(cycle) = find_cycle(owner, |o| self.waits_for(o)) {
                // Its S stays until it aborts; its wait ends as a victim.
                let cycle = self.describe_cycle(&cycle);
                self.make_victim(owner, res, ticket, cycle);
            }
        }
        Ok(true)
    }

    /// Ends `owner`'s wait for `res` (request `ticket`) as a deadlock
    /// victim of `cycle` (its description): the request leaves the queue,
    /// its waiter — a thread in `lock_timeout` or the task polling its
    /// parked [`LockWait`] — wakes to [`Error::Deadlock`], what it held
    /// stays until it aborts, and the requests behind it are granted if it
    /// was all that blocked them. Counted as one deadlock.
    fn make_victim(&mut self, owner: LockOwner, res: Resource, ticket: Ticket, cycle: String) {
        let q = self.queues.get_mut(&res).expect("a waiter's queue exists");
        q.remove_waiting(ticket).expect("a waiter is in its queue");
        let state = self.owners.get_mut(&owner).expect("a waiter is an owner");
        state.wait = None;
        state.wake();
        // A victim that held nothing (it waited behind others for its
        // first lock) leaves the table, as a withdrawn request's owner does.
        if state.held.is_empty() {
            self.owners.remove(&owner);
        }
        self.outcomes.insert(ticket, Outcome::Victim(cycle));
        self.stats.deadlocks += 1;
        self.settle(res);
    }

    /// The victim of `cycle`, which `requester`'s new edge closed: the
    /// member with the least work (fewest locks held) among the requester
    /// and the members waiting for a lock (their wait can be ended here;
    /// an owner waiting for a callback cannot, and is never chosen). Ties
    /// go to the requester, then to the largest transaction id (then
    /// client id). With its lock count.
    fn choose_victim(&self, cycle: &[LockOwner], requester: LockOwner) -> (LockOwner, usize) {
        let work = |o: &LockOwner| self.owners.get(o).map_or(0, |s| s.held.len());
        cycle
            .iter()
            .filter(|&&o| o == requester || self.owners.get(&o).is_some_and(|s| s.wait.is_some()))
            .map(|&o| (o, work(&o)))
            .min_by_key(|&(o, n)| (n, o != requester, std::cmp::Reverse((o.txn, o.client))))
            .expect("the requester is in its own cycle")
    }

    /// Breaks every cycle through `requester`, whose new edge (a queued
    /// request, or an external wait) may have closed some: while a cycle
    /// through it is found, its victim is chosen ([`Table::choose_victim`]).
    /// Another owner's wait is ended ([`Table::make_victim`]) and the search
    /// runs again; the requester being the victim is returned as its
    /// [`Error::Deadlock`] — the caller withdraws its edge and counts it.
    ///
    /// Ends: each round either returns or takes one waiting owner out of
    /// the graph. Only cycles through the requester can exist (the graph
    /// was acyclic before its edge, and withdrawing a request or granting
    /// one adds no edge out of a waiter).
    fn break_cycles(&mut self, requester: LockOwner) -> Result<()> {
        while let Some(cycle) = find_cycle(requester, |o| self.waits_for(o)) {
            let (victim, held) = self.choose_victim(&cycle, requester);
            let noun = if held == 1 { "lock" } else { "locks" };
            let described = format!(
                "{}; {victim} held the fewest locks in the cycle ({held} {noun})",
                self.describe_cycle(&cycle)
            );
            if victim == requester {
                return Err(Error::Deadlock {
                    txn: requester.txn,
                    cycle: described,
                });
            }
            let (res, ticket) = self.owners[&victim]
                .wait
                .expect("a victim other than the requester waits");
            self.make_victim(victim, res, ticket, described);
        }
        Ok(())
    }

    /// Puts a request that must wait into its queue and returns its ticket.
    fn enqueue(&mut self, owner: LockOwner, res: Resource, target: LockMode) -> Ticket {
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        self.stats.waits += 1;
        let q = self.queues.entry(res).or_default();
        let converting = q.granted_mode(owner).is_some();
        q.enqueue(Request {
            owner,
            mode: target,
            converting,
            ticket,
        });
        let state = self.owners.entry(owner).or_insert_with(OwnerState::new);
        debug_assert!(state.wait.is_none(), "try_grant refused a waiting owner");
        state.wait = Some((res, ticket));
        ticket
    }

    /// The waiting thread withdraws its own request (victim or timeout):
    /// out of the queue, the owner's wait cleared, and the requests behind
    /// it granted if it was all that blocked them.
    fn cancel(&mut self, res: Resource, ticket: Ticket) {
        let q = self.queues.get_mut(&res).expect("a waiter's queue exists");
        let r = q.remove_waiting(ticket).expect("a waiter is in its queue");
        let state = self.owners.get_mut(&r.owner).expect("a waiter is an owner");
        state.wait = None;
        state.waker = None;
        if state.held.is_empty() {
            self.owners.remove(&r.owner);
        }
        self.settle(res);
    }

    /// Grants what has become grantable on `res`, wakes exactly those
    /// owners, and drops the queue if it is empty.
    fn settle(&mut self, res: Resource) {
        let Some(q) = self.queues.get_mut(&res) else {
            return;
        };
        let granted = q.settle();
        if q.is_empty() {
            self.drop_queue(res);
        }
        for r in granted {
            let state = self.owners.get_mut(&r.owner).expect("a waiter is an owner");
            state.wait = None;
            if !r.converting {
                state.held.push(res);
            }
            self.outcomes.insert(r.ticket, Outcome::Granted);
            state.wake();
        }
    }

    /// Removes the (empty) queue of `res`, keeping it for reuse.
    fn drop_queue(&mut self, res: Resource) {
        if let Some(q) = self.queues.remove(&res) {
            if self.spare.len() < SPARE_QUEUES {
                self.spare.push(q);
            }
        }
    }

    fn remove_external(&mut self, waiter: LockOwner, on: LockOwner) -> bool {
        let Some(set) = self.external.get_mut(&waiter) else {
            return false;
        };
        let removed = set.remove(&on);
        if set.is_empty() {
            self.external.remove(&waiter);
        }
        removed
    }

    /// Whether `to` is reachable from `from` along waits-for edges.
    fn reaches(&self, from: LockOwner, to: LockOwner) -> bool {
        let mut seen = HashSet::new();
        let mut stack = vec![from];
        while let Some(o) = stack.pop() {
            for next in self.waits_for(o) {
                if next == to {
                    return true;
                }
                if seen.insert(next) {
                    stack.push(next);
                }
            }
        }
        false
    }

    /// The owners `owner` waits for: the blockers of its queued request and
    /// its external edges, each in ascending order, so the cycle search (and
    /// with it the choice of a victim) is the same for the same table.
    fn waits_for(&self, owner: LockOwner) -> Vec<LockOwner> {
        let mut out = Vec::new();
        if let Some((res, ticket)) = self.owners.get(&owner).and_then(|s| s.wait) {
            let q = &self.queues[&res];
            let at = q.position(ticket).expect("a waiter is in its queue");
            out = q.blockers_of(at);
        }
        if let Some(set) = self.external.get(&owner) {
            let from = out.len();
            out.extend(set.iter().copied());
            out[from..].sort_unstable();
        }
        out
    }

    /// "txn 1 of client 0 (wants X on page 2) → txn 2 of client 0 (…) → txn 1 of client 0"
    /// (", holding S" after a wait to upgrade a lock held).
    fn describe_cycle(&self, cycle: &[LockOwner]) -> String {
        let mut s = String::new();
        for &o in cycle {
            let what = match self.owners.get(&o).and_then(|st| st.wait) {
                Some((res, ticket)) => {
                    let q = &self.queues[&res];
                    let mode = q.waiting[q.position(ticket).expect("queued")].mode;
                    match q.granted.iter().find(|g| g.owner == o) {
                        // An upgrade: what it holds there already.
                        Some(g) => format!("wants {mode} on {res}, holding {}", g.mode),
                        None => format!("wants {mode} on {res}"),
                    }
                }
                None => "waits for a callback".to_string(),
            };
            s.push_str(&format!("{o} ({what}) → "));
        }
        s.push_str(&cycle[0].to_string());
        s
    }

    fn check_invariants(&self) {
        let mut waits_seen: HashMap<LockOwner, (Resource, Ticket)> = HashMap::new();
        let held_sets: HashMap<LockOwner, HashSet<Resource>> = self
            .owners
            .iter()
            .map(|(o, st)| (*o, st.held.iter().copied().collect()))
            .collect();
        let mut grants_seen: HashMap<LockOwner, usize> = HashMap::new();
        for (res, q) in &self.queues {
            assert!(!q.is_empty(), "{res}: empty queue kept");
            for (i, a) in q.granted.iter().enumerate() {
                *grants_seen.entry(a.owner).or_default() += 1;
                assert!(
                    held_sets.get(&a.owner).is_some_and(|s| s.contains(res)),
                    "{res}: holder {} does not list it as held",
                    a.owner
                );
                for b in &q.granted[i + 1..] {
                    assert_ne!(a.owner, b.owner, "{res}: {} granted twice", a.owner);
                    assert!(
                        a.mode.compatible(b.mode),
                        "{res}: {} holds {} and {} holds {}",
                        a.owner,
                        a.mode,
                        b.owner,
                        b.mode
                    );
                }
            }
            let conversions = q.conversion_count();
            for (i, r) in q.waiting.iter().enumerate() {
                assert_eq!(
                    r.converting,
                    i < conversions,
                    "{res}: conversions must precede new requests"
                );
                match q.granted_mode(r.owner) {
                    Some(held) => {
                        assert!(r.converting, "{res}: holder {} waits as new", r.owner);
                        assert!(
                            r.mode.covers(held) && r.mode != held,
                            "{res}: {} converts {held} to {}, not stronger",
                            r.owner,
                            r.mode
                        );
                    }
                    None => assert!(!r.converting, "{res}: {} converts nothing", r.owner),
                }
                assert!(
                    waits_seen.insert(r.owner, (*res, r.ticket)).is_none(),
                    "{} waits on two things",
                    r.owner
                );
                assert!(
                    !self.outcomes.contains_key(&r.ticket),
                    "{res}: queued request of {} already decided",
                    r.owner
                );
                assert!(
                    !q.blockers_of(i).is_empty(),
                    "{res}: {} waits for {} but nothing blocks it",
                    r.owner,
                    r.mode
                );
            }
        }
        self.check_owners_and_waits(&grants_seen, &held_sets, &waits_seen);
    }

    /// The owner and wait half of [`Table::check_invariants`]: each owner's
    /// held list against the granted groups (`grants_seen`, `held_sets`),
    /// its recorded wait against the queues (`waits_seen`), the external
    /// edges, and no cycle.
    fn check_owners_and_waits(
        &self,
        grants_seen: &HashMap<LockOwner, usize>,
        held_sets: &HashMap<LockOwner, HashSet<Resource>>,
        waits_seen: &HashMap<LockOwner, (Resource, Ticket)>,
    ) {
        for (owner, state) in &self.owners {
            assert!(
                !state.held.is_empty() || state.wait.is_some(),
                "{owner}: kept with nothing held or awaited"
            );
            assert_eq!(
                grants_seen.get(owner).copied().unwrap_or(0),
                state.held.len(),
                "{owner}: held set and granted groups disagree"
            );
            assert_eq!(
                held_sets[owner].len(),
                state.held.len(),
                "{owner}: a resource listed as held twice"
            );
            assert_eq!(
                state.wait,
                waits_seen.get(owner).copied(),
                "{owner}: recorded wait and queues disagree"
            );
        }
        assert!(
            waits_seen.keys().all(|o| self.owners.contains_key(o)),
            "a waiter is not an owner"
        );
        for (waiter, set) in &self.external {
            assert!(!set.is_empty(), "{waiter}: empty external set kept");
            assert!(!set.contains(waiter), "{waiter}: waits for itself");
            assert!(
                !waits_seen.contains_key(waiter),
                "{waiter} waits on a lock and a callback at once"
            );
        }
        // Every cycle is refused when its last edge appears, so there is none.
        let nodes = waits_seen.keys().chain(self.external.keys());
        for &node in nodes {
            if let Some(cycle) = find_cycle(node, |o| self.waits_for(o)) {
                panic!("waits-for cycle left in place: {}", self.describe_cycle(&cycle));
            }
        }
    }
}
