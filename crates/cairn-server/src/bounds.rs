//! Server-wide bounds, so that no client — honest, buggy or hostile — can
//! take what the others need:
//!
//! - **open transactions**: each holds a few kilobytes (its lock table
//!   entries, private pages' index, the session's entry) until it ends; a
//!   session may have [`crate::TXNS_PER_SESSION_MAX`] open, and the server
//!   [`ServerConfig::txns_max`] in all. One more is refused with LIMIT.
//! - **requests that may block** (a callback, volume I/O, a commit, a
//!   B+-tree operation): each runs on a thread of tokio's blocking pool for
//!   as long as it waits. The server runs at most
//!   [`ServerConfig::waiting_max`] of them at once and one session at most
//!   [`ServerConfig::waiting_per_session_max`]; past either the request is
//!   refused with LIMIT at once (a retryable condition for the client), so
//!   one client cannot take every thread, and a bystander's request always
//!   finds one.
//!
//! Requests answered without blocking (a warm FETCH on the network thread)
//! take no slot, and neither does a lock wait: it is parked in the lock
//! manager's queue with no thread (`run_parking`), its request's slot given
//! back until the lock is granted.
//!
//! [`ServerConfig::txns_max`]: crate::ServerConfig::txns_max
//! [`ServerConfig::waiting_max`]: crate::ServerConfig::waiting_max
//! [`ServerConfig::waiting_per_session_max`]: crate::ServerConfig::waiting_per_session_max

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use cairn_storage::Error;

/// A count with a maximum; a [`Slot`] holds one unit of it until dropped.
#[derive(Debug)]
pub(crate) struct Bound {
    what: &'static str,
    used: AtomicUsize,
    max: usize,
}

/// One unit of a [`Bound`], given back when dropped.
#[derive(Debug)]
pub(crate) struct Slot(Arc<Bound>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.used.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Bound {
    pub(crate) fn new(what: &'static str, max: usize) -> Arc<Bound> {
        Arc::new(Bound {
            what,
            used: AtomicUsize::new(0),
            max: max.max(1),
        })
    }

    /// A unit, or LIMIT naming the bound when all are taken.
    pub(crate) fn take(self: &Arc<Bound>) -> Result<Slot, Error> {
        let mut used = self.used.load(Ordering::Acquire);
        loop {
            if used >= self.max {
                return Err(Error::LimitExceeded {
                    what: self.what,
                    value: used as u64 + 1,
                    limit: self.max as u64,
                });
            }
            match self
                .used
                .compare_exchange_weak(used, used + 1, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Ok(Slot(self.clone())),
                Err(now) => used = now,
            }
        }
    }

    /// Units taken now.
    #[cfg(test)]
    pub(crate) fn used(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bound_refuses_past_its_max_and_a_dropped_slot_gives_its_unit_back() {
        let b = Bound::new("things", 2);
        let one = b.take().unwrap();
        let _two = b.take().unwrap();
        match b.take() {
            Err(Error::LimitExceeded { what, value, limit }) => assert_eq!((what, value, limit), ("things", 3, 2)),
            other => panic!("expected LimitExceeded, got {other:?}"),
        }
        drop(one);
        assert_eq!(b.used(), 1);
        let _three = b.take().expect("a unit was given back");
    }

    #[test]
    fn concurrent_takers_never_exceed_the_max() {
        let b = Bound::new("things", 8);
        let held: Vec<Slot> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..32).map(|_| s.spawn(|| b.take().ok())).collect();
            handles.into_iter().filter_map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(held.len(), 8);
        assert_eq!(b.used(), 8);
    }
}
