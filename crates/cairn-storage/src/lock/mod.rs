//! The lock manager: strict two-phase locking with intention modes, FIFO
//! queues, conversions, deadlock detection and timeouts.
//!
//! A lock is held by a [`LockOwner`] — a transaction of a client — never by a
//! thread: many threads run their own transactions on one embedded database,
//! and remote clients' transactions (page, object and file server sessions)
//! hold locks with no thread of their own here. Any thread may act for any
//! owner, but **an owner makes one request at a time**: a request from an
//! owner that already waits (for a lock or a callback) is refused with
//! [`Error::InvalidArgument`](crate::Error::InvalidArgument).
//!
//! Locks are released only by [`LockManager::release_all`], which commit and
//! abort both call (strict 2PL: nothing is released earlier).
//!
//! # Modes
//!
//! Compatibility ([`LockMode::compatible`]; ✓ = both may be held at once):
//!
//! | held \ asked | IS | IX | S | SIX | X | A | U |
//! |---|:-:|:-:|:-:|:-:|:-:|:-:|:-:|
//! | **IS**  | ✓ | ✓ | ✓ | ✓ | · | ✓ | ✓ |
//! | **IX**  | ✓ | ✓ | · | · | · | ✓ | · |
//! | **S**   | ✓ | · | ✓ | · | · | · | ✓ |
//! | **SIX** | ✓ | · | · | · | · | · | · |
//! | **X**   | · | · | · | · | · | · | · |
//! | **A**   | ✓ | ✓ | · | · | · | ✓ | · |
//! | **U**   | ✓ | · | ✓ | · | · | · | · |
//!
//! `A` (append) is taken only on objects: appenders of one object run at
//! once, and whoever reads or writes the object whole waits for them all.
//! `U` (update) is a read that may become a change: readers share it, a
//! second `U` waits (taken on B+-tree leaves by lookups for update).
//!
//! Supremum ([`LockMode::sup`]): what an owner holding the row's mode holds
//! after asking for the column's. The lattice is `IS < {IX, S} < SIX < X`
//! with `IX < A < SIX` and `S < U < SIX`.
//!
//! | sup | IS | IX | S | SIX | X | A | U |
//! |---|---|---|---|---|---|---|---|
//! | **IS**  | IS  | IX  | S   | SIX | X | A   | U   |
//! | **IX**  | IX  | IX  | SIX | SIX | X | A   | SIX |
//! | **S**   | S   | SIX | S   | SIX | X | SIX | U   |
//! | **SIX** | SIX | SIX | SIX | SIX | X | SIX | SIX |
//! | **X**   | X   | X   | X   | X   | X | X   | X   |
//! | **A**   | A   | A   | SIX | SIX | X | A   | SIX |
//! | **U**   | U   | SIX | U   | SIX | X | SIX | U   |
//!
//! # A request's states
//!
//! ```text
//!  (new) ──try_grant───────────────────────▶ Granted ───release_all───▶ (released)
//!    │                                      ▲  │  ▲
//!    │                               settle │  │  │ settle (the stronger mode),
//!    └──enqueue──▶ Waiting ─────────────────┘  │  │ cancel (the old mode kept)
//!                     │            enqueue     ▼  │
//!                     │         (stronger)  Converting
//!                     │ cancel,                │ release_all
//!                     │ release_all            │
//!                     └──────▶ Cancelled ◀─────┘
//! ```
//!
//! | from | to | made by | when |
//! |---|---|---|---|
//! | (new) | Granted | `Table::try_grant` (from `lock_timeout`, `try_lock`) | no holder or earlier waiter blocks it |
//! | Granted | Granted (stronger) | `Table::try_grant` | a conversion no other holder blocks |
//! | (new) | Waiting | `Table::enqueue` (from `lock_timeout`) | blocked; `try_lock` instead returns `false` |
//! | Granted | Converting | `Table::enqueue` | a blocked conversion; the old mode stays granted |
//! | Waiting / Converting | Granted | `Table::settle` (from `release_all`, `Table::cancel`) | its blockers are gone; the settler grants it and wakes its owner |
//! | Waiting | Cancelled | `Table::cancel` (from `lock_timeout`) | it closed a cycle and is the victim, or timed out |
//! | Converting | Granted (old mode) | `Table::cancel` (from `lock_timeout`) | it closed a cycle and is the victim, or timed out |
//! | Waiting / Converting | Cancelled (a converting owner keeps its old mode) | `Table::make_victim` (from `Table::break_cycles`, `lock_ahead`) | a later request (or external wait) closed a cycle through it and it did the least work; its waiter gets `Deadlock` |
//! | Waiting / Converting | Cancelled | `LockManager::release_all` | its owner ended; its thread gets `TxnNotActive` |
//! | Granted | (released) | `LockManager::release_all` | commit or abort |
//!
//! # Fairness
//!
//! Each resource has a queue: the granted group, then the waiting requests.
//! A **new request** is granted only if it is compatible with every holder
//! *and* with every request waiting ahead of it, so a stream of `S` requests
//! cannot starve a waiting `X`: they queue behind it. (A new request
//! compatible with everything ahead may pass a waiter it is compatible
//! with, e.g. `IS` past a waiting `S`: nothing is starved by that.) A
//! **conversion** (the owner already holds the resource) needs only to be
//! compatible with the *other holders*, and is queued ahead of all new
//! requests (after earlier conversions): making it wait behind requests
//! that wait for its own old mode to go would deadlock for nothing. This is
//! the usual practice (Gray & Reuter, *Transaction Processing*).
//!
//! The grant rule and the waits-for edges are one function,
//! `Queue::blockers`. Grants are made by the thread that removes a blocker
//! (`Table::settle`, under the mutex, in queue order): it re-checks each
//! waiter's compatibility, grants it and notifies that owner's condition
//! variable, so release wakes exactly the owners that may now proceed, and a
//! woken thread only collects its outcome. Waiting threads sleep on their
//! owner's condition variable with a deadline; they never spin.
//!
//! # Deadlocks: the least work is the victim
//!
//! The waits-for graph is computed from the lock table when needed: an edge
//! from each waiter to each owner in `Queue::blockers` of its request (the
//! incompatible holders, and for new requests the incompatible earlier
//! waiters), plus the external edges below. An edge appears when a request
//! is enqueued (from it, and into it from the waiters a conversion goes
//! ahead of), when a request is granted (only into its owner, which then
//! waits for nothing, so no cycle), or when an external edge is added. So a
//! cycle can only appear through the request being enqueued (or the external
//! waiter): right after enqueueing it, `Table::break_cycles` searches for a
//! cycle through the requester (depth first, each owner's edges in
//! ascending order, so the same table always yields the same cycle) and
//! picks a **victim** in it, at once (no timeout is involved):
//!
//! - **Who may be chosen:** the requester, and every other member that
//!   waits for a lock (in a cycle, every member but the requester waits for
//!   something). A member waiting for a *callback* (an external edge) waits
//!   outside the table — nothing here can end that wait — so it is never
//!   chosen; a cycle always has the requester to choose.
//! - **Least work:** the one holding the fewest locks (its `held` set: one
//!   count per resource, intention locks included). Under strict 2PL every
//!   page or object a transaction has read or changed is still locked, so
//!   the count is the table's own measure of how much it has done — and of
//!   what an abort throws away and a retry must do again — and costs
//!   nothing to read. (The table knows nothing else about the work: not
//!   the bytes changed, nor how long the owner ran.)
//! - **Ties** go to the requester — two equal owners converting S to X: the
//!   second to ask is the victim, as it always was — then to the youngest
//!   owner (the largest transaction id, then client id), so the choice is
//!   deterministic.
//!
//! A requester that is the victim has its request withdrawn and gets
//! `Error::Deadlock` naming the cycle. Another victim is a waiting owner:
//! its request is withdrawn (`Table::make_victim`, as `lock_ahead` does),
//! its waiter — a thread in `lock_timeout` or the task polling a parked
//! `LockWait` — wakes to `Error::Deadlock`, and the requests it alone
//! blocked are granted; the search then runs again, so the requester's
//! request stays queued only once it closes no cycle (it may be granted
//! right there, if the victim waited ahead of it). Each victim is counted
//! once in `LockStats::deadlocks`. A victim keeps what it holds until it
//! aborts with `release_all` (so the others proceed only then). A waiter is
//! only woken once its request is decided, so it is never "re-blocked" and
//! needs no second search; `check_invariants` asserts the graph is acyclic.
//!
//! `lock_ahead` keeps its own rule (a grant made for a callback's reader
//! that would close a cycle is withdrawn and refused; a reader waiting for
//! the writer is the victim), described there.
//!
//! # Timeouts
//!
//! A waiter whose deadline passes withdraws its request (`Table::cancel`),
//! which settles the queue: requests that waited only because of it are
//! granted and woken. Its held locks stay; it gets `Error::LockTimeout`.
//!
//! # Callback locking (designed in, used by the server later)
//!
//! Clients keep pages cached after their transactions commit, so before the
//! server grants an `X` lock on a page it calls back the other clients that
//! cache it (ARCHITECTURE.md, "Cache coherence, per client kind"). A client whose running transaction uses the page
//! answers "in use", and the requester then waits *for that transaction*,
//! outside the lock table. The server tells the lock manager with
//! [`LockManager::add_external_wait`]`(requester, user)` — one edge per
//! client still using the page — and removes each edge with
//! [`LockManager::remove_external_wait`] when that client answers "dropped".
//! The detector follows external edges like lock edges, so a cycle through a
//! callback is found: an edge `add_external_wait` adds that closes one is
//! broken as a lock request's cycle is (the victim by least work; the
//! waiter being it, its edge is refused with `Error::Deadlock`), and so is
//! a later lock request closing a cycle through an external edge — whose
//! waiter is never the victim chosen by another's request. The server's order for an `X` request is: call back and wait (with
//! external edges), remove the edges, then `lock` — an owner never waits on
//! a lock and a callback at once. External edges never block a grant
//! themselves; `release_all(owner)` drops the owner's own external edges.
//!
//! # Locking protocol and invariants
//!
//! One mutex guards the whole table (queues, owners, external edges,
//! outcomes, counters); it is never held while sleeping (the condition
//! variable releases it). [`LockManager::check_invariants`] asserts: per
//! resource, granted modes pairwise compatible and each owner granted at
//! most once; conversions ahead of new requests and strictly stronger than
//! the held mode; every waiter blocked by someone (queues are settled); each
//! owner waits on at most one thing, and its recorded wait and held set
//! match the queues; no empty queue or owner entry is kept; and the
//! waits-for graph, external edges included, has no cycle.

mod graph;
mod manager;
mod mode;
mod queue;
mod resource;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod victim_tests;

pub use manager::{LockManager, LockOptions, LockStats, LockWait};
pub use mode::LockMode;
pub use resource::{LockOwner, Resource};
