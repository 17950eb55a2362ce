//! Tests of the deadlock victim rule: a request that closes a cycle ends
//! the wait of the member with the least work (fewest locks held), ties to
//! the requester, then to the youngest owner; waiters of both kinds
//! (threads in `lock_timeout`, parked [`LockWait`]s) as victims; owners
//! waiting for a callback never chosen; and a model test of queued and
//! parked requests with the victim rule.
//!
//! As in `tests.rs`, nothing is timed: what is asserted is who got what,
//! the queues the manager shows, and its counters (one deadlock per victim,
//! no timeout).

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::task::Poll;

use proptest::prelude::*;

use super::tests::{
    assert_still_waiting, lock_in_thread, manager, o, page, poll_wait, wait_until_queued, CountingWaker, HANG_GUARD,
};
use super::*;
use crate::error::Error;
use crate::ids::TxnId;

use LockMode::{S, X};

/// Locks each of `pages` X for `owner` (granted at once: nobody else holds
/// them), so that it holds that many locks.
fn hold(m: &LockManager, owner: LockOwner, pages: &[u32]) {
    for &p in pages {
        assert!(m.try_lock(owner, page(p), X).unwrap(), "{owner} takes page {p}");
    }
}

/// The deadlocks and timeouts counted so far.
fn counted(m: &LockManager) -> (u64, u64) {
    let st = m.stats();
    (st.deadlocks, st.timeouts)
}

/// The error is the deadlock of `txn`; its cycle text is returned.
fn deadlock_of(err: Error, txn: u64) -> String {
    match err {
        Error::Deadlock { txn: t, cycle } if t == TxnId(txn) => cycle,
        other => panic!("expected the deadlock of txn {txn}, got {other:?}"),
    }
}

fn ready<T>(p: Poll<T>) -> T {
    match p {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("still pending"),
    }
}

/// The requester holds three locks, the other member of the cycle one: the
/// other member is the victim (its blocked thread gets the deadlock), the
/// requester stays queued and is granted once the victim aborts.
#[test]
fn the_member_with_fewer_locks_is_the_victim_not_the_requester() {
    let m = manager();
    hold(&m, o(1), &[1]);
    hold(&m, o(2), &[2, 3, 4]);
    let rx1 = lock_in_thread(&m, o(1), page(2), X);
    wait_until_queued(&m, o(1), page(2));
    // 2 closes the cycle 2 → 1 → 2; 1 has done less.
    let rx2 = lock_in_thread(&m, o(2), page(1), X);
    let cycle = deadlock_of(rx1.recv_timeout(HANG_GUARD).unwrap().unwrap_err(), 1);
    assert!(cycle.contains("txn 1 of client 0 (wants X on page 2)"), "{cycle}");
    assert!(
        cycle.contains("txn 1 of client 0 held the fewest locks in the cycle (1 lock)"),
        "{cycle}"
    );
    // The victim's request is gone; its lock stays until it aborts, so the
    // requester waits for it.
    assert_eq!(m.waiters(&page(2)), vec![]);
    wait_until_queued(&m, o(2), page(1));
    assert_still_waiting(&m, &rx2, o(2), page(1), X);
    assert_eq!(m.held_mode(o(1), &page(1)), Some(X));
    assert_eq!(counted(&m), (1, 0));
    m.check_invariants();
    m.release_all(o(1));
    rx2.recv_timeout(HANG_GUARD).unwrap().unwrap();
    assert_eq!(m.holders(&page(1)), vec![(o(2), X)]);
    assert_eq!(counted(&m), (1, 0), "one victim, counted once");
    m.check_invariants();
}

/// Equal work: the requester is the victim, and the waiting member is left
/// alone (it goes on once the requester aborts).
#[test]
fn a_tie_makes_the_requester_the_victim() {
    let m = manager();
    hold(&m, o(1), &[1, 11]);
    hold(&m, o(2), &[2, 12]);
    let rx1 = lock_in_thread(&m, o(1), page(2), X);
    wait_until_queued(&m, o(1), page(2));
    let cycle = deadlock_of(m.lock(o(2), page(1), X).unwrap_err(), 2);
    assert!(
        cycle.contains("txn 2 of client 0 held the fewest locks in the cycle (2 locks)"),
        "{cycle}"
    );
    assert_still_waiting(&m, &rx1, o(1), page(2), X);
    assert_eq!(m.waiters(&page(1)), vec![], "the requester's request is withdrawn");
    assert_eq!(counted(&m), (1, 0));
    m.check_invariants();
    m.release_all(o(2));
    rx1.recv_timeout(HANG_GUARD).unwrap().unwrap();
    assert_eq!(counted(&m), (1, 0));
    m.check_invariants();
}

/// A cycle of three: 1 waits for 2, 2 for 3, and 3 (the requester, three
/// locks) asks for what 1 holds. 2 holds the fewest and is the victim;
/// the other two wait on, and everyone is granted as the others abort.
#[test]
fn a_cycle_of_three_chooses_the_least_work_among_all_members() {
    let m = manager();
    hold(&m, o(1), &[1, 11]);
    hold(&m, o(2), &[2]);
    hold(&m, o(3), &[3, 13, 23]);
    let rx1 = lock_in_thread(&m, o(1), page(2), X);
    wait_until_queued(&m, o(1), page(2));
    let rx2 = lock_in_thread(&m, o(2), page(3), X);
    wait_until_queued(&m, o(2), page(3));
    let rx3 = lock_in_thread(&m, o(3), page(1), X);
    deadlock_of(rx2.recv_timeout(HANG_GUARD).unwrap().unwrap_err(), 2);
    wait_until_queued(&m, o(3), page(1));
    assert_still_waiting(&m, &rx1, o(1), page(2), X);
    assert_still_waiting(&m, &rx3, o(3), page(1), X);
    assert_eq!(counted(&m), (1, 0));
    m.check_invariants();
    // 2 aborts: 1 gets page 2; 1 commits: 3 gets page 1.
    m.release_all(o(2));
    rx1.recv_timeout(HANG_GUARD).unwrap().unwrap();
    assert_still_waiting(&m, &rx3, o(3), page(1), X);
    m.release_all(o(1));
    rx3.recv_timeout(HANG_GUARD).unwrap().unwrap();
    assert_eq!(counted(&m), (1, 0));
    m.check_invariants();
}

/// Two members other than the requester tie for the least work: the
/// youngest (the larger transaction id) is the victim.
#[test]
fn a_tie_between_other_members_goes_to_the_youngest() {
    let m = manager();
    hold(&m, o(1), &[1, 11]);
    hold(&m, o(2), &[2, 12]);
    hold(&m, o(3), &[3, 13, 23]);
    let w1 = m.park(o(1), page(2), X).unwrap().expect("1 waits for 2");
    let mut w2 = m.park(o(2), page(3), X).unwrap().expect("2 waits for 3");
    let w3 = m
        .park(o(3), page(1), X)
        .unwrap()
        .expect("3 waits for 1 once 2 is the victim");
    let wakes = Arc::new(CountingWaker::default());
    deadlock_of(ready(poll_wait(&mut w2, &wakes)).unwrap_err(), 2);
    assert_eq!(m.waiters(&page(2)), vec![(o(1), X)]);
    assert_eq!(m.waiters(&page(1)), vec![(o(3), X)]);
    assert_eq!(counted(&m), (1, 0));
    m.check_invariants();
    drop((w1, w3));
}

/// The victim is a parked wait (a server's client request, no thread): its
/// task is woken once and the wait resolves to the deadlock; the parked
/// requester is granted when the victim aborts.
#[test]
fn a_parked_wait_can_be_the_victim_of_a_parked_request() {
    let m = manager();
    hold(&m, o(1), &[1]);
    hold(&m, o(2), &[2, 3]);
    let mut w1 = m.park(o(1), page(2), X).unwrap().expect("1 waits for 2");
    let wakes1 = Arc::new(CountingWaker::default());
    assert!(poll_wait(&mut w1, &wakes1).is_pending());
    let mut w2 = m
        .park(o(2), page(1), X)
        .unwrap()
        .expect("2 waits for 1: 1 is the victim");
    assert_eq!(
        wakes1.0.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "the victim was woken"
    );
    deadlock_of(ready(poll_wait(&mut w1, &wakes1)).unwrap_err(), 1);
    let wakes2 = Arc::new(CountingWaker::default());
    assert!(poll_wait(&mut w2, &wakes2).is_pending());
    assert_eq!(counted(&m), (1, 0));
    m.check_invariants();
    m.release_all(o(1));
    assert_eq!(wakes2.0.load(std::sync::atomic::Ordering::SeqCst), 1);
    ready(poll_wait(&mut w2, &wakes2)).unwrap();
    assert_eq!(m.held_mode(o(2), &page(1)), Some(X));
    assert_eq!(counted(&m), (1, 0));
    m.check_invariants();
}

/// A parked victim, chosen by a thread's blocking request; a victim's
/// parked wait that times out afterwards keeps the deadlock as its answer.
#[test]
fn a_parked_wait_can_be_the_victim_of_a_blocking_request_and_keeps_that_answer() {
    let m = manager();
    hold(&m, o(1), &[1]);
    hold(&m, o(2), &[2, 3]);
    let w1 = m.park(o(1), page(2), X).unwrap().expect("1 waits for 2");
    let rx2 = lock_in_thread(&m, o(2), page(1), S);
    wait_until_queued(&m, o(2), page(1));
    assert_eq!(m.waiters(&page(2)), vec![], "1's request was withdrawn");
    deadlock_of(w1.time_out().unwrap_err(), 1);
    assert_still_waiting(&m, &rx2, o(2), page(1), S);
    assert_eq!(counted(&m), (1, 0), "a deadlock, not a timeout");
    m.release_all(o(1));
    rx2.recv_timeout(HANG_GUARD).unwrap().unwrap();
    m.check_invariants();
}

/// The victim waited ahead of the requester on the same resource and was
/// all that kept it waiting there: with the victim's request gone, the
/// request is granted on the spot (a parked one needs no wait at all).
#[test]
fn a_victim_waiting_ahead_of_the_requester_lets_it_be_granted_at_once() {
    let m = manager();
    // 3 reads page 1 and holds two more; 2 waits behind it for X on page 1
    // (one lock: page 7); 3 then waits for page 5, which 1 holds.
    assert!(m.try_lock(o(3), page(1), S).unwrap());
    hold(&m, o(3), &[8, 9]);
    hold(&m, o(2), &[7]);
    hold(&m, o(1), &[5, 6]);
    let w2 = m.park(o(2), page(1), X).unwrap().expect("X waits for 3's S");
    let w3 = m.park(o(3), page(5), S).unwrap().expect("3 waits for 1");
    // 1 asks for S on page 1: FIFO puts it behind 2's X, closing
    // 1 → 2 → 3 → 1. 2 holds the fewest; once it is gone, 1's S is
    // compatible with everything on page 1.
    assert!(m.park(o(1), page(1), S).unwrap().is_none(), "granted at once");
    assert_eq!(m.held_mode(o(1), &page(1)), Some(S));
    deadlock_of(w2.time_out().unwrap_err(), 2);
    assert_eq!(m.waiters(&page(5)), vec![(o(3), S)]);
    assert_eq!(counted(&m), (1, 0));
    m.check_invariants();
    m.release_all(o(1));
    w3.time_out().expect("granted when 1 committed");
    m.check_invariants();
}

/// An owner waiting for a callback holds fewer locks than the requester
/// but cannot be made to stop waiting from here: the requester is the
/// victim, and the callback wait stays.
#[test]
fn an_owner_waiting_for_a_callback_is_never_the_victim() {
    let m = manager();
    hold(&m, o(1), &[1, 9]);
    hold(&m, o(2), &[2]);
    m.add_external_wait(o(2), o(1)).unwrap();
    deadlock_of(m.lock(o(1), page(2), S).unwrap_err(), 1);
    assert!(m.remove_external_wait(o(2), o(1)), "the callback wait is untouched");
    assert_eq!(counted(&m), (1, 0));
    m.check_invariants();
}

/// An external wait that closes a cycle is broken the same way: the lock
/// waiter with less work is the victim, and the edge stays.
#[test]
fn an_external_wait_closing_a_cycle_can_end_a_lock_waiter() {
    let m = manager();
    hold(&m, o(1), &[1]);
    hold(&m, o(2), &[2, 3]);
    let rx1 = lock_in_thread(&m, o(1), page(2), X);
    wait_until_queued(&m, o(1), page(2));
    m.add_external_wait(o(2), o(1)).unwrap();
    deadlock_of(rx1.recv_timeout(HANG_GUARD).unwrap().unwrap_err(), 1);
    assert_eq!(m.waiters(&page(2)), vec![]);
    assert_eq!(counted(&m), (1, 0));
    m.check_invariants();
    assert!(m.remove_external_wait(o(2), o(1)), "the edge was kept");
    m.check_invariants();
}

/// The message says what to do: abort this transaction and retry it whole.
#[test]
fn the_deadlock_error_says_to_abort_and_retry() {
    let m = manager();
    hold(&m, o(1), &[1]);
    hold(&m, o(2), &[2]);
    let _w = m.park(o(1), page(2), X).unwrap().expect("1 waits for 2");
    let text = m.park(o(2), page(1), X).unwrap_err().to_string().to_lowercase();
    for needle in [
        "txn 2 was chosen as a deadlock victim",
        "txn 2 of client 0 (wants x on page 1)",
        "nothing of the other transactions was rolled back",
        "abort this transaction",
        "retry it whole, as a new transaction",
        "short random pause",
        "locks in one order",
    ] {
        assert!(text.contains(needle), "{needle:?} not in {text:?}");
    }
}

// ---- model test -------------------------------------------------------------

/// The lock table of the model: plain vectors, the rules written out again.
#[derive(Default, Debug)]
struct Model {
    /// Per page: (owner, mode) granted.
    granted: BTreeMap<u32, Vec<(u64, LockMode)>>,
    /// Per page: waiting requests in queue order, (owner, mode, converting).
    waiting: BTreeMap<u32, Vec<(u64, LockMode, bool)>>,
    /// Decisions about waits not collected yet: owner → what its wait gets.
    decided: HashMap<u64, Expect>,
    deadlocks: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expect {
    Granted,
    Victim,
    Cancelled,
}

impl Model {
    fn held(&self, owner: u64, res: u32) -> Option<LockMode> {
        self.granted.get(&res)?.iter().find(|g| g.0 == owner).map(|g| g.1)
    }

    fn work(&self, owner: u64) -> usize {
        self.granted.values().filter(|g| g.iter().any(|x| x.0 == owner)).count()
    }

    fn waits_on(&self, owner: u64) -> Option<u32> {
        self.waiting
            .iter()
            .find(|(_, q)| q.iter().any(|r| r.0 == owner))
            .map(|(&res, _)| res)
    }

    /// Holders incompatible with `mode`, and the first `ahead` waiters
    /// incompatible with it; others only, ascending, once each.
    fn blockers(&self, res: u32, owner: u64, mode: LockMode, ahead: usize) -> Vec<u64> {
        let mut out: Vec<u64> = self
            .granted
            .get(&res)
            .into_iter()
            .flatten()
            .filter(|g| g.0 != owner && !g.1.compatible(mode))
            .map(|g| g.0)
            .chain(
                self.waiting
                    .get(&res)
                    .into_iter()
                    .flatten()
                    .take(ahead)
                    .filter(|r| r.0 != owner && !r.1.compatible(mode))
                    .map(|r| r.0),
            )
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    fn edges(&self, owner: u64) -> Vec<u64> {
        let Some(res) = self.waits_on(owner) else {
            return Vec::new();
        };
        let q = &self.waiting[&res];
        let i = q.iter().position(|r| r.0 == owner).unwrap();
        let (_, mode, converting) = q[i];
        self.blockers(res, owner, mode, if converting { 0 } else { i })
    }

    /// The cycle through `start` a depth-first search meets first, each
    /// owner's edges taken in ascending order.
    fn cycle(&self, start: u64) -> Option<Vec<u64>> {
        let mut explored = vec![start];
        let mut path: Vec<(u64, Vec<u64>, usize)> = vec![(start, self.edges(start), 0)];
        while let Some((_, out, next)) = path.last_mut() {
            let Some(&to) = out.get(*next) else {
                path.pop();
                continue;
            };
            *next += 1;
            if to == start {
                return Some(path.iter().map(|p| p.0).collect());
            }
            if !explored.contains(&to) {
                explored.push(to);
                let out = self.edges(to);
                path.push((to, out, 0));
            }
        }
        None
    }

    fn grant(&mut self, res: u32, owner: u64, mode: LockMode) {
        let g = self.granted.entry(res).or_default();
        match g.iter_mut().find(|x| x.0 == owner) {
            Some(x) => x.1 = mode,
            None => g.push((owner, mode)),
        }
    }

    /// Grants, in queue order, each waiter nothing blocks any more.
    fn settle(&mut self, res: u32) {
        let mut i = 0;
        while i < self.waiting.get(&res).map_or(0, Vec::len) {
            let (owner, mode, converting) = self.waiting[&res][i];
            if self
                .blockers(res, owner, mode, if converting { 0 } else { i })
                .is_empty()
            {
                self.waiting.get_mut(&res).unwrap().remove(i);
                self.grant(res, owner, mode);
                self.decided.insert(owner, Expect::Granted);
            } else {
                i += 1;
            }
        }
    }

    fn withdraw(&mut self, owner: u64) -> u32 {
        let res = self.waits_on(owner).unwrap();
        self.waiting.get_mut(&res).unwrap().retain(|r| r.0 != owner);
        res
    }

    /// What `park` answers: `Err(())` for a deadlock of the requester,
    /// `Ok(true)` granted now, `Ok(false)` queued; `None`: refused (the
    /// owner already waits).
    fn park(&mut self, owner: u64, res: u32, mode: LockMode) -> Option<Result<bool, ()>> {
        if self.waits_on(owner).is_some() {
            return None;
        }
        let held = self.held(owner, res);
        if held.is_some_and(|h| h.covers(mode)) {
            return Some(Ok(true));
        }
        let target = held.map_or(mode, |h| h.sup(mode));
        let converting = held.is_some();
        let q = self.waiting.entry(res).or_default();
        let ahead = if converting { 0 } else { q.len() };
        if self.blockers(res, owner, target, ahead).is_empty() {
            self.grant(res, owner, target);
            return Some(Ok(true));
        }
        let q = self.waiting.get_mut(&res).unwrap();
        let at = if converting {
            q.iter().take_while(|r| r.2).count()
        } else {
            q.len()
        };
        q.insert(at, (owner, target, converting));
        // The victim rule: fewest locks held, then the requester, then the
        // largest transaction id.
        while let Some(cycle) = self.cycle(owner) {
            let victim = *cycle
                .iter()
                .min_by_key(|&&v| (self.work(v), v != owner, Reverse(v)))
                .unwrap();
            self.deadlocks += 1;
            let at = self.withdraw(victim);
            self.settle(at);
            if victim == owner {
                return Some(Err(()));
            }
            self.decided.insert(victim, Expect::Victim);
        }
        // Granted in the settling of a victim's queue: not a wait.
        if self.decided.remove(&owner) == Some(Expect::Granted) {
            return Some(Ok(true));
        }
        Some(Ok(false))
    }

    fn try_lock(&mut self, owner: u64, res: u32, mode: LockMode) -> Option<bool> {
        if self.waits_on(owner).is_some() {
            return None;
        }
        let held = self.held(owner, res);
        if held.is_some_and(|h| h.covers(mode)) {
            return Some(true);
        }
        let target = held.map_or(mode, |h| h.sup(mode));
        let ahead = if held.is_some() {
            0
        } else {
            self.waiting.get(&res).map_or(0, Vec::len)
        };
        let ok = self.blockers(res, owner, target, ahead).is_empty();
        if ok {
            self.grant(res, owner, target);
        }
        Some(ok)
    }

    fn release(&mut self, owner: u64) {
        let mut touched: Vec<u32> = Vec::new();
        if self.waits_on(owner).is_some() {
            touched.push(self.withdraw(owner));
            self.decided.insert(owner, Expect::Cancelled);
        }
        for (res, g) in &mut self.granted {
            if g.iter().any(|x| x.0 == owner) {
                g.retain(|x| x.0 != owner);
                touched.push(*res);
            }
        }
        for res in touched {
            self.settle(res);
        }
    }
}

#[derive(Clone, Debug)]
enum Op {
    Park { owner: u64, res: u32, mode: LockMode },
    TryLock { owner: u64, res: u32, mode: LockMode },
    Release { owner: u64 },
}

fn op() -> impl Strategy<Value = Op> {
    // S and X most of the time: they make the cycles.
    let mode = prop_oneof![
        3 => Just(S),
        3 => Just(X),
        1 => prop::sample::select(LockMode::ALL.to_vec()),
    ];
    prop_oneof![
        6 => (0..4u64, 0..3u32, mode.clone()).prop_map(|(owner, res, mode)| Op::Park { owner, res, mode }),
        2 => (0..4u64, 0..3u32, mode).prop_map(|(owner, res, mode)| Op::TryLock { owner, res, mode }),
        2 => (0..4u64).prop_map(|owner| Op::Release { owner }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Parked requests, try-locks and releases against the model: after
    /// each step the same locks are held, the same requests wait in the
    /// same order, every wait the model decided (granted, a victim, its
    /// owner ended) resolves to that and no other does, and as many
    /// deadlocks are counted.
    #[test]
    fn parked_waits_and_victims_match_a_model(ops in proptest::collection::vec(op(), 1..80)) {
        let m = manager();
        let mut model = Model::default();
        let wakes = Arc::new(CountingWaker::default());
        let mut waits: Vec<(u64, LockWait)> = Vec::new();
        for op in ops {
            match op {
                Op::Park { owner, res, mode } => {
                    let got = m.park(o(owner), page(res), mode);
                    match (model.park(owner, res, mode), got) {
                        (None, Err(Error::InvalidArgument(_))) => {}
                        (Some(Ok(true)), Ok(None)) => {}
                        (Some(Ok(false)), Ok(Some(w))) => waits.push((owner, w)),
                        (Some(Err(())), Err(Error::Deadlock { txn, .. })) => prop_assert_eq!(txn, TxnId(owner)),
                        (want, got) => prop_assert!(false, "{:?}: model {:?}, manager {:?}", op, want, got),
                    }
                }
                Op::TryLock { owner, res, mode } => {
                    let want = model.try_lock(owner, res, mode);
                    match (want, m.try_lock(o(owner), page(res), mode)) {
                        (None, Err(Error::InvalidArgument(_))) => {}
                        (Some(w), Ok(g)) => prop_assert_eq!(w, g, "{:?}", op),
                        (want, got) => prop_assert!(false, "{:?}: model {:?}, manager {:?}", op, want, got),
                    }
                }
                Op::Release { owner } => {
                    m.release_all(o(owner));
                    model.release(owner);
                }
            }
            m.check_invariants();
            let mut still = Vec::new();
            for (owner, mut w) in waits.drain(..) {
                let polled = poll_wait(&mut w, &wakes);
                match (model.decided.remove(&owner), polled) {
                    (None, Poll::Pending) => still.push((owner, w)),
                    (Some(Expect::Granted), Poll::Ready(Ok(()))) => {}
                    (Some(Expect::Victim), Poll::Ready(Err(Error::Deadlock { txn, .. }))) => {
                        prop_assert_eq!(txn, TxnId(owner));
                    }
                    (Some(Expect::Cancelled), Poll::Ready(Err(Error::TxnNotActive(_)))) => {}
                    (want, got) => prop_assert!(false, "wait of {}: model {:?}, manager {:?}", owner, want, got),
                }
            }
            waits = still;
            prop_assert!(model.decided.is_empty(), "decided without a wait: {:?}", model.decided);
            for res in 0..3 {
                for owner in 0..4 {
                    prop_assert_eq!(m.held_mode(o(owner), &page(res)), model.held(owner, res));
                }
                let queued: Vec<(LockOwner, LockMode)> = model
                    .waiting
                    .get(&res)
                    .into_iter()
                    .flatten()
                    .map(|r| (o(r.0), r.1))
                    .collect();
                prop_assert_eq!(m.waiters(&page(res)), queued);
            }
            prop_assert_eq!(m.stats().deadlocks, model.deadlocks);
        }
    }
}
