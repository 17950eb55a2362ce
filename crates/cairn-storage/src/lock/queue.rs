//! One resource's lock queue: the granted group and the waiting requests.
//!
//! This is plain data with no synchronisation; [`super::LockManager`] keeps
//! every queue under its one mutex. The grant rule and the waits-for edges
//! are the *same* function, [`Queue::blockers`], so the deadlock detector
//! sees exactly what keeps a request from being granted.

use std::collections::VecDeque;

use super::mode::LockMode;
use super::resource::LockOwner;

/// Identifies one waiting request, so that the waiting thread can find out
/// what became of it (granted or cancelled by another thread).
pub(crate) type Ticket = u64;

/// An owner's granted lock on the resource.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Grant {
    pub(crate) owner: LockOwner,
    pub(crate) mode: LockMode,
}

/// A request waiting in the queue.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Request {
    pub(crate) owner: LockOwner,
    /// The mode the owner will hold once granted (for a conversion, the
    /// supremum of the held mode and the mode asked for).
    pub(crate) mode: LockMode,
    /// A conversion: the owner already holds the resource in a weaker mode.
    pub(crate) converting: bool,
    pub(crate) ticket: Ticket,
}

/// The lock queue of one resource.
///
/// Invariants (asserted by `LockManager::check_invariants`): granted modes
/// are pairwise compatible; an owner appears at most once in `granted` and at
/// most once in `waiting`; conversions come before new requests in
/// `waiting`; a converting request's owner is in `granted` with a strictly
/// weaker mode; and the queue is *settled*: no waiting request is grantable
/// ([`Queue::blockers`] of each is non-empty).
#[derive(Debug, Default)]
pub(crate) struct Queue {
    pub(crate) granted: Vec<Grant>,
    pub(crate) waiting: VecDeque<Request>,
}

impl Queue {
    /// The mode `owner` holds here, if any.
    pub(crate) fn granted_mode(&self, owner: LockOwner) -> Option<LockMode> {
        self.granted.iter().find(|g| g.owner == owner).map(|g| g.mode)
    }

    /// Whether nobody holds or waits for the resource.
    pub(crate) fn is_empty(&self) -> bool {
        self.granted.is_empty() && self.waiting.is_empty()
    }

    /// How many waiting requests are conversions (they form the front).
    pub(crate) fn conversion_count(&self) -> usize {
        self.waiting.iter().take_while(|r| r.converting).count()
    }

    /// The position of the waiting request with `ticket`.
    pub(crate) fn position(&self, ticket: Ticket) -> Option<usize> {
        self.waiting.iter().position(|r| r.ticket == ticket)
    }

    /// The owners that keep a request of `owner` for `mode` from being
    /// granted, when it stands behind the first `ahead` waiting requests.
    /// Empty means grantable. These are also the request's waits-for edges.
    ///
    /// - Every *other* holder whose granted mode is incompatible with `mode`.
    /// - Every one of the `ahead` earlier waiters whose mode is incompatible
    ///   with `mode` (FIFO: a new request does not overtake an incompatible
    ///   waiter). A conversion is placed with `ahead == 0`: it only has to be
    ///   compatible with the granted group, so it goes ahead of new requests.
    pub(crate) fn blockers(&self, owner: LockOwner, mode: LockMode, ahead: usize) -> Vec<LockOwner> {
        let holders = self
            .granted
            .iter()
            .filter(|g| g.owner != owner && !g.mode.compatible(mode))
            .map(|g| g.owner);
        let waiters = self
            .waiting
            .iter()
            .take(ahead)
            .filter(|r| r.owner != owner && !r.mode.compatible(mode))
            .map(|r| r.owner);
        let mut out: Vec<LockOwner> = holders.chain(waiters).collect();
        // An earlier conversion's owner is also a holder; name it once.
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Whether [`Queue::blockers`] would name anyone: the grant rule alone,
    /// without collecting the edges.
    pub(crate) fn is_blocked(&self, owner: LockOwner, mode: LockMode, ahead: usize) -> bool {
        self.granted
            .iter()
            .any(|g| g.owner != owner && !g.mode.compatible(mode))
            || self
                .waiting
                .iter()
                .take(ahead)
                .any(|r| r.owner != owner && !r.mode.compatible(mode))
    }

    /// The blockers of the waiting request at `index` (its waits-for edges).
    pub(crate) fn blockers_of(&self, index: usize) -> Vec<LockOwner> {
        let r = self.waiting[index];
        let ahead = if r.converting { 0 } else { index };
        self.blockers(r.owner, r.mode, ahead)
    }

    /// Where a new waiting request goes: conversions after the other
    /// conversions (ahead of all new requests), new requests at the back.
    pub(crate) fn enqueue(&mut self, request: Request) {
        let at = if request.converting {
            self.conversion_count()
        } else {
            self.waiting.len()
        };
        self.waiting.insert(at, request);
    }

    /// Grants `mode` to `owner` now: a conversion raises the held mode, a new
    /// request joins the granted group. The caller has checked
    /// [`Queue::blockers`].
    pub(crate) fn grant(&mut self, owner: LockOwner, mode: LockMode) {
        match self.granted.iter_mut().find(|g| g.owner == owner) {
            Some(g) => g.mode = mode,
            None => self.granted.push(Grant { owner, mode }),
        }
    }

    /// Grants, in queue order, every waiting request that has become
    /// grantable, and returns them. One pass suffices: granting a request
    /// never makes an earlier one grantable (it only adds to the granted
    /// group what the waiter already counted against the requests behind it).
    pub(crate) fn settle(&mut self) -> Vec<Request> {
        let mut granted = Vec::new();
        let mut i = 0;
        while i < self.waiting.len() {
            if self.blockers_of(i).is_empty() {
                let r = self.waiting.remove(i).expect("index checked");
                self.grant(r.owner, r.mode);
                granted.push(r);
            } else {
                i += 1;
            }
        }
        granted
    }

    /// Removes the waiting request with `ticket`; a cancelled conversion
    /// leaves the owner holding its old mode.
    pub(crate) fn remove_waiting(&mut self, ticket: Ticket) -> Option<Request> {
        let at = self.position(ticket)?;
        self.waiting.remove(at)
    }
}
