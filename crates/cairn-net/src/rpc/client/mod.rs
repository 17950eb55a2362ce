//! The client half: one connection, many requests in flight, usable from synchronous code.
//!
//! [`Client::invoke`] is PRIMA's `Remote_Service_Invocation`: it sends the request now and
//! returns a [`Call`]; [`Call::next_part`] is `Get_Service_Result` with the "complete or not" flag
//! ([`Part::last`]), and [`Call::wait`] / [`Client::call`] are the plain synchronous forms. Replies
//! are matched by request id and may arrive in any order.
//!
//! # Why blocking sockets and no thread of its own
//!
//! The client uses plain blocking std sockets and has no thread of its own: the callers take
//! turns reading (the leader/follower pattern). A caller that needs a reply and finds nobody
//! reading becomes the reader: it reads whatever has arrived, hands every reply to its call's
//! slot, and wakes the callers whose replies came (a condition variable, touched only when some
//! other thread is actually waiting). So a synchronous call costs what the raw exchange costs —
//! write, then a blocking read on the calling thread — with no hand-off to a reader thread or a
//! runtime (each hand-off is a wake-up and a context switch, about as much as the round trip
//! itself on a loaded two-core machine), and pipelined replies are taken a socket-buffer at a
//! time. An async runtime would add exactly those hand-offs, and async callers are not the
//! client's users (the application API above is synchronous).
//!
//! Requests are written from the caller's thread. Writes time out after [`WRITE_STALL`]: a
//! caller whose write stalls (the socket is full because nobody reads the replies and the server
//! has stopped reading until its replies are taken) reads replies itself before trying again, so
//! a client that sends much and reads little cannot deadlock against the server's back-pressure.
//! Reads time out after [`READ_POLL`] only so that a reader re-checks for a closed connection;
//! a timeout is not an error.
//!
//! The price: replies are read only while someone waits or sends. They queue in the kernel in the
//! meantime, which is back-pressure the server respects (it bounds queued reply bytes).
//!
//! # Notices
//!
//! The server may send a NOTICE at any time (cache callbacks). Whichever thread reads the socket
//! queues it in the client's state, in arrival order, apart from the calls' slots (a notice
//! carries id 0 and no flags, so it is never taken for a reply); [`Client::next_notice`] takes
//! them. Waiting for notices must not cost calls a hand-off, so a thread parked in
//! [`Client::next_notice`] is never a standing reader and never waits on the condition variable
//! readers signal every round:
//!
//! - while nobody reads, it watches the socket with poll(2), at most [`NOTICE_POLL`] at a time and
//!   never past its deadline, *without* taking the reading side (a caller that wants a reply
//!   meanwhile takes it and reads as usual). Only when data is there and the reading side is
//!   still free does it take the side for one round whose read does not block (`MSG_DONTWAIT`),
//!   so a caller that finds it reading waits for one non-blocking read at most;
//! - while a caller reads, it waits on a condition variable of its own (`noticed`), signalled
//!   only when a notice is queued or the connection closes, for at most [`NOTICE_POLL`], and then
//!   looks again (the reader may have stopped without a notice, leaving the socket unwatched);
//! - when its poll saw data but somebody else took it (the reply of a caller in the middle of a
//!   call), it next waits on `noticed` rather than polling again at once, so it does not fall
//!   into step with a stream of calls and wake on each reply.
//!
//! So a parked [`Client::next_notice`] adds at most a couple of wake-ups per [`NOTICE_POLL`],
//! whatever the call rate, and none to a call's own path. The queue is bounded
//! ([`NOTICES_MAX`] notices, [`NOTICE_BYTES_MAX`] bytes): a server that floods a client which does
//! not take its notices breaks the protocol, and the connection is closed with
//! [`Error::Protocol`] naming the limit and its socket shut down, so that the server sees the
//! client go instead of queueing more. Any failure that ends the connection (a bad frame or
//! message from the server, a failed read or write) shuts the socket down at once too: the
//! server then ends the session (aborting its transactions, releasing its locks) without
//! waiting for the application to drop the client.
//!
//! # TLS
//!
//! With [`ClientOptions::tls`] the socket is a TLS session (`client/tls.rs`) and all of the above
//! holds unchanged: readers still take turns, writes still stall after [`WRITE_STALL`], and
//! [`Client::next_notice`] still only polls. The one TLS state machine sits behind a lock that
//! nobody holds while blocked in the socket (waits are poll(2) calls outside it), and plaintext
//! already decrypted inside it counts as readable for `next_notice`. Without TLS nothing of it is
//! on the path: no lock, no copy.
//!
//! # A call's states
//!
//! ```text
//!   invoke ──► Pending ──(part)──► Pending ──(final / error reply)──► Done (slot removed by Call::next_part)
//!                 │                                                   ▲
//!                 └── Call dropped ──► Abandoned ──(final arrives)────┘ (slot removed by the reader)
//!                 └── connection closes ──► Failed (every pending call gets the same error;
//!                                                  the socket is shut down)
//! ```
//!
//! # How a notice flows
//!
//! ```text
//!   NOTICE (id 0) ──(read by a caller, or by next_notice when nobody reads)──► notices (FIFO)
//!       notices ──(Client::next_notice; each notice to one taker)──► taken
//!       notices full ──► connection Failed (Error::Protocol), socket shut down
//!       connection closes ──► next_notice takes what is queued, then gets the same error as calls
//! ```

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;

use crate::error::{Error, Result};
use crate::frame::{Frame, FrameDecoder, Kind};
use crate::message::{Fault, Welcome};

mod call;
mod connect;
mod notices;
mod options;
mod poll;
mod reader;
mod sock;
mod tls;
mod writer;
use sock::Sock;

pub use call::{Call, Part};
pub use options::{ClientOptions, Login};

/// How long a write may stall before its caller reads replies instead.
pub const WRITE_STALL: Duration = Duration::from_millis(1);
/// How long a reader blocks before it re-checks the connection's state.
pub const READ_POLL: Duration = Duration::from_millis(200);
/// Bytes a reader asks the socket for at once.
const READ_BUF: usize = 64 << 10;
/// The longest a thread in [`Client::next_notice`] waits before it looks again at who is reading
/// (a poll of the socket, or a wait for the reader's hand-over). It bounds how late a notice can
/// be taken when it arrives as a caller stops reading.
pub const NOTICE_POLL: Duration = Duration::from_millis(20);
/// Notices the client holds before they are taken; one more closes the connection.
pub const NOTICES_MAX: usize = 65_536;
/// Bytes of notice bodies the client holds before they are taken; a notice past it closes the
/// connection (one notice alone is always accepted, whatever its size up to the body limit).
pub const NOTICE_BYTES_MAX: usize = 64 << 20;

/// What arrived for a call and has not been taken yet.
#[derive(Debug)]
enum Event {
    Part(Bytes),
    Final(Bytes),
    Failed(Fault),
}

#[derive(Debug, Default)]
struct Slot {
    events: VecDeque<Event>,
    /// The [`Call`] was dropped: discard what arrives, remove the slot at the final reply.
    abandoned: bool,
}

/// The reading side, owned by whichever caller is reading.
#[derive(Debug)]
struct ReadSide {
    dec: FrameDecoder,
    buf: Box<[u8]>,
}

#[derive(Debug)]
struct State {
    calls: HashMap<u64, Slot>,
    /// Set once, when the connection ends; every later wait fails with it.
    closed: Option<Error>,
    /// `None` while a caller is reading (it holds the reading side).
    read_side: Option<ReadSide>,
    /// Callers blocked on `changed`.
    waiters: usize,
    /// NOTICE bodies read and not yet taken, oldest first.
    notices: VecDeque<Bytes>,
    /// Bytes of the bodies in `notices`.
    notice_bytes: usize,
    /// Threads in [`Client::next_notice`] blocked on `noticed`.
    notice_waiters: usize,
    /// Threads in [`Client::next_notice`] at all.
    notice_callers: usize,
    /// The server sent more notices than the client holds ([`NOTICES_MAX`], [`NOTICE_BYTES_MAX`]):
    /// the connection is closed and its socket is to be shut down.
    flooded: bool,
}

impl State {
    fn new(read_side: ReadSide) -> State {
        State {
            calls: HashMap::new(),
            closed: None,
            read_side: Some(read_side),
            waiters: 0,
            notices: VecDeque::new(),
            notice_bytes: 0,
            notice_waiters: 0,
            notice_callers: 0,
            flooded: false,
        }
    }
}

/// What one read of the socket turned up.
struct Round {
    frames: Vec<Frame>,
    /// Why the connection ended, if it did.
    failure: Option<Error>,
    /// Bytes read (0 when nothing was there).
    bytes: usize,
}

struct Writer {
    /// Frames not yet written: deferred requests ([`Client::invoke_deferred`]), then the one
    /// being sent.
    queued: Vec<u8>,
    next_id: u64,
}

/// Deferred requests are written at the latest when this many bytes are queued.
const QUEUED_MAX: usize = 64 << 10;

struct Inner {
    sock: Sock,
    writer: Mutex<Writer>,
    /// Whether `writer.queued` holds deferred requests (read without the writer's lock).
    has_queued: AtomicBool,
    state: Mutex<State>,
    /// Signalled when replies have been handed out or the reading side is free again.
    changed: Condvar,
    /// Signalled only when a notice is queued or the connection closes (never per reply, so a
    /// thread waiting for notices costs calls nothing).
    noticed: Condvar,
    welcome: Welcome,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every change under these locks is a single insert/remove/push, so a panic while holding
    // one leaves the data consistent and a poisoned lock is still usable.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.sock.shutdown();
    }
}

/// A connection to a Cairn server. Cheap to clone (clones share the connection) and usable from
/// any number of threads.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").field("welcome", &self.inner.welcome).finish()
    }
}

impl Client {
    /// What the server said in its WELCOME.
    pub fn welcome(&self) -> &Welcome {
        &self.inner.welcome
    }

    /// A synchronous call: invoke and wait for the final reply (parts before it are dropped; use
    /// [`Client::invoke`] and [`Call::next_part`] for streamed replies).
    pub fn call(&self, kind: Kind, body: impl Into<Bytes>) -> Result<Bytes> {
        self.invoke(kind, body)?.wait()
    }

    /// A PING round trip, answered by the server's RPC layer itself.
    pub fn ping(&self) -> Result<()> {
        self.call(Kind::PING, Bytes::new()).map(|_| ())
    }

    /// Requests sent whose final reply has not been taken (including abandoned ones whose final
    /// reply has not arrived).
    pub fn pending(&self) -> usize {
        lock(&self.inner.state).calls.len()
    }

    /// Whether the connection has ended (and why).
    pub fn closed(&self) -> Option<Error> {
        lock(&self.inner.state).closed.clone()
    }

    /// Checks the client's invariants (tests and debug builds).
    pub fn check_invariants(&self) {
        let st = lock(&self.inner.state);
        for (id, slot) in &st.calls {
            assert!(*id != 0, "request id 0 is the connection's");
            assert!(
                !slot.abandoned || slot.events.is_empty(),
                "abandoned call {id} holds replies"
            );
            let finals = slot
                .events
                .iter()
                .filter(|e| matches!(e, Event::Final(_) | Event::Failed(_)))
                .count();
            assert!(finals <= 1, "call {id} has {finals} final replies");
            if finals == 1 {
                assert!(
                    matches!(slot.events.back(), Some(Event::Final(_) | Event::Failed(_))),
                    "call {id} has parts after its final reply"
                );
            }
        }
        if let Some(side) = &st.read_side {
            side.dec.check_invariants();
        }
        assert_eq!(
            st.notice_bytes,
            st.notices.iter().map(Bytes::len).sum::<usize>(),
            "notice bytes out of step with the queued notices"
        );
        assert!(
            st.notices.len() <= NOTICES_MAX,
            "{} notices queued, over {NOTICES_MAX}",
            st.notices.len()
        );
        assert!(
            st.notices.len() <= 1 || st.notice_bytes <= NOTICE_BYTES_MAX,
            "{} bytes of notices queued, over {NOTICE_BYTES_MAX}",
            st.notice_bytes
        );
        assert!(!st.flooded || st.closed.is_some(), "flooded by notices but not closed");
    }
}
