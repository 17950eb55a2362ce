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
use std::io;
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::error::{Error, Result};
use crate::frame::{self, Flags, Frame, FrameDecoder, Kind, RequestId};
use crate::message::{Architecture, ErrorCode, Fault, Hello, Message, Welcome};
use crate::scram::ClientFirst;
use crate::transport::{Address, ClientTls};

mod sock;
mod tls;
use sock::Sock;

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

/// How to connect.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// The architecture asked for in HELLO.
    pub architecture: Architecture,
    /// The user to log in as (SCRAM-SHA-256), or `None` for a server that trusts this
    /// connection (a server without users, on loopback).
    pub login: Option<Login>,
    /// A name for the server's logs.
    pub client_name: String,
    /// Largest reply body accepted.
    pub body_max: u32,
    /// Time allowed for connecting and the handshake (the TLS handshake included).
    pub connect_timeout: Duration,
    /// TLS for a TCP connection (`None`: none). The server's certificate must verify against
    /// [`ClientTls::roots`] for [`ClientTls::server_name`], which defaults to the IP address
    /// connected to: a caller that resolved a DNS name must pass that name. A Unix socket with
    /// TLS is refused ([`Error::Tls`]).
    pub tls: Option<ClientTls>,
}

/// A user name and password to log in with. The password never crosses the wire (SCRAM), and
/// `Debug` does not print it.
#[derive(Clone, PartialEq, Eq)]
pub struct Login {
    /// The user.
    pub user: String,
    /// The user's password.
    pub password: String,
}

impl std::fmt::Debug for Login {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Login")
            .field("user", &self.user)
            .field("password", &"…")
            .finish()
    }
}

impl Default for ClientOptions {
    fn default() -> ClientOptions {
        ClientOptions {
            architecture: Architecture::RPC,
            login: None,
            client_name: format!("cairn-net client (pid {})", std::process::id()),
            body_max: frame::BODY_MAX_DEFAULT,
            connect_timeout: Duration::from_secs(10),
            tls: None,
        }
    }
}

/// One piece of a reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part {
    /// The bytes.
    pub body: Bytes,
    /// Whether this is the final reply (no more parts follow).
    pub last: bool,
}

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

impl Inner {
    /// Takes the next event of call `id`, reading the socket (as the leader) or waiting for
    /// the reader (as a follower) until one is there.
    fn next_event(&self, id: u64) -> Result<Event> {
        let mut st = lock(&self.state);
        loop {
            match st.calls.get_mut(&id) {
                Some(slot) => {
                    if let Some(ev) = slot.events.pop_front() {
                        return Ok(ev);
                    }
                }
                None => return Err(st.closed.clone().unwrap_or(Error::Disconnected)),
            }
            if let Some(e) = &st.closed {
                return Err(e.clone());
            }
            // About to block: deferred requests go out first (the reply may depend on them).
            if self.has_queued.load(Ordering::Acquire) {
                drop(st);
                self.flush()?;
                st = lock(&self.state);
                continue;
            }
            st = match st.read_side.take() {
                Some(side) => self.read_round(st, side),
                None => {
                    st.waiters += 1;
                    let mut st = self.changed.wait(st).unwrap_or_else(|p| p.into_inner());
                    st.waiters -= 1;
                    st
                }
            };
        }
    }

    /// One turn as the reader: read what has arrived (blocking up to [`READ_POLL`]), hand every
    /// whole frame to its call, give the reading side back, wake waiting callers.
    fn read_round<'a>(&'a self, st: MutexGuard<'a, State>, mut side: ReadSide) -> MutexGuard<'a, State> {
        drop(st);
        let round = self.read_frames(&mut side, true);
        self.hand_out(lock(&self.state), side, round)
    }

    /// Reads the socket once (blocking up to [`READ_POLL`] when `wait`, not at all otherwise) and
    /// decodes every whole frame. Runs without the state's lock, holding the reading side.
    fn read_frames(&self, side: &mut ReadSide, wait: bool) -> Round {
        let mut round = Round {
            frames: Vec::new(),
            failure: None,
            bytes: 0,
        };
        let read = if wait {
            self.sock.read(&mut side.buf)
        } else {
            self.sock.read_now(&mut side.buf)
        };
        match read {
            Ok(0) => {
                round.failure = Some(match side.dec.finish() {
                    Ok(()) => Error::Disconnected,
                    Err(e) => Error::Frame(e),
                })
            }
            Ok(n) => {
                round.bytes = n;
                side.dec.push(&side.buf[..n]);
                loop {
                    match side.dec.decode() {
                        Ok(Some(f)) => round.frames.push(f),
                        Ok(None) => break,
                        Err(e) => {
                            round.failure = Some(Error::Frame(e));
                            break;
                        }
                    }
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
                ) => {}
            Err(e) => round.failure = Some(Error::io("reading replies", e)),
        }
        round
    }

    /// The end of a reader's turn, under the state's lock: gives the reading side back, hands
    /// every frame to its call (notices to the notice queue), records why the connection ended,
    /// and wakes who waits: callers on `changed` as before, and threads waiting for notices on
    /// `noticed` only if a notice came or the connection closed.
    fn hand_out<'a>(&'a self, mut st: MutexGuard<'a, State>, side: ReadSide, round: Round) -> MutexGuard<'a, State> {
        let Round {
            frames, mut failure, ..
        } = round;
        let notices_before = st.notices.len();
        st.read_side = Some(side);
        for frame in frames {
            if let Err(e) = dispatch(&mut st, frame) {
                failure = Some(e);
                break;
            }
        }
        let failed = failure.is_some();
        if let Some(e) = failure {
            if st.closed.is_none() {
                st.closed = Some(e);
            }
        }
        if failed || st.flooded {
            // The connection is over for this client (every later call gets
            // the error): make the server see it go now, so that the
            // session's transactions and locks are released there, not
            // when this client is dropped.
            self.sock.shutdown();
        }
        if st.waiters > 0 {
            self.changed.notify_all();
        }
        if st.notice_waiters > 0 && (st.notices.len() > notices_before || st.closed.is_some()) {
            self.noticed.notify_all();
        }
        st
    }

    /// [`Client::next_notice`]: see the module docs for why it watches the socket with poll(2)
    /// instead of reading it, and waits on `noticed` rather than `changed`.
    fn next_notice(&self, timeout: Duration) -> Result<Option<Bytes>> {
        let start = Instant::now();
        let mut st = lock(&self.state);
        // Whether the socket has been looked at once (so a zero timeout still takes what has
        // arrived), and whether the last look saw data that somebody else was reading.
        let mut looked = false;
        let mut back_off = false;
        loop {
            if let Some(body) = st.notices.pop_front() {
                st.notice_bytes -= body.len();
                return Ok(Some(body));
            }
            if let Some(e) = &st.closed {
                return Err(e.clone());
            }
            let left = timeout.saturating_sub(start.elapsed());
            if looked && left.is_zero() {
                return Ok(None);
            }
            looked = true;
            if st.read_side.is_none() || back_off {
                // A caller is reading (or was, a moment ago): it hands notices over.
                back_off = false;
                if left.is_zero() {
                    continue;
                }
                st.notice_waiters += 1;
                let (guard, _) = self
                    .noticed
                    .wait_timeout(st, left.min(NOTICE_POLL))
                    .unwrap_or_else(|p| p.into_inner());
                st = guard;
                st.notice_waiters -= 1;
                continue;
            }
            // Nobody reads: watch the socket without taking the reading side.
            drop(st);
            let ready = self
                .sock
                .poll_readable(left.min(NOTICE_POLL))
                .map_err(|e| Error::io("waiting for a notice", e))?;
            st = lock(&self.state);
            if !ready {
                continue;
            }
            match st.read_side.take() {
                Some(mut side) => {
                    drop(st);
                    let round = self.read_frames(&mut side, false);
                    back_off = round.bytes == 0 && round.failure.is_none();
                    st = self.hand_out(lock(&self.state), side, round);
                }
                None => back_off = true,
            }
        }
    }

    /// Writes the deferred requests.
    fn flush(&self) -> Result<()> {
        let mut w = lock(&self.writer);
        self.send_queued(&mut w)
    }

    /// Writes everything queued (the writer's lock held).
    fn send_queued(&self, w: &mut Writer) -> Result<()> {
        self.has_queued.store(false, Ordering::Release);
        let result = self.write_all(&w.queued);
        w.queued.clear();
        if w.queued.capacity() > 4 * QUEUED_MAX {
            w.queued.shrink_to(QUEUED_MAX);
        }
        match result {
            Ok(()) => Ok(()),
            Err(e) => {
                let e = self.why_broken(e);
                self.close(e.clone());
                Err(e)
            }
        }
    }

    /// A write failed because the peer closed the connection: the server
    /// may have said why first (GOODBYE after a shutdown), so read what is
    /// left and report that instead of the bare broken pipe.
    fn why_broken(&self, e: Error) -> Error {
        let broken = matches!(&e, Error::Io { source, .. }
            if matches!(source.kind(), io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset));
        if !broken {
            return e;
        }
        let mut st = lock(&self.state);
        // A few read turns at most: the frames are already in the socket.
        for _ in 0..4 {
            if st.closed.is_some() {
                break;
            }
            let Some(side) = st.read_side.take() else { break };
            st = self.read_round(st, side);
        }
        match &st.closed {
            Some(closed @ Error::Closed(_)) => closed.clone(),
            _ => e,
        }
    }

    fn close(&self, error: Error) {
        let mut st = lock(&self.state);
        if st.closed.is_none() {
            st.closed = Some(error);
        }
        self.sock.shutdown();
        if st.waiters > 0 {
            self.changed.notify_all();
        }
        if st.notice_waiters > 0 {
            self.noticed.notify_all();
        }
    }

    /// Writes all of `buf` (over TLS: and sends its last records, which a write may leave queued
    /// in the TLS session); a stalled write reads replies before trying again.
    fn write_all(&self, buf: &[u8]) -> Result<()> {
        let mut off = 0;
        loop {
            let written = if off < buf.len() {
                self.sock.write(&buf[off..])
            } else {
                match self.sock.flush() {
                    Ok(()) => return Ok(()),
                    Err(e) => Err(e),
                }
            };
            match written {
                Ok(0) => return Err(Error::io("sending a request", io::ErrorKind::WriteZero.into())),
                Ok(n) => off += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                    // The socket is full: take replies off it if nobody else is, so the server
                    // can go on reading.
                    let mut st = lock(&self.state);
                    if let Some(e) = &st.closed {
                        return Err(e.clone());
                    }
                    if let Some(side) = st.read_side.take() {
                        st = self.read_round(st, side);
                    }
                    drop(st);
                }
                Err(e) => return Err(Error::io("sending a request", e)),
            }
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.sock.shutdown();
    }
}

/// Hands one reply frame to its call, or a NOTICE to the notice queue.
fn dispatch(st: &mut State, frame: Frame) -> Result<()> {
    let (id, event) = match Message::from_frame(frame)? {
        Message::ReplyPart { id, body, .. } => (id, Event::Part(body)),
        Message::Reply { id, body, .. } => (id, Event::Final(body)),
        Message::ErrorReply { id, fault, .. } => (id, Event::Failed(fault)),
        Message::Goodbye { fault, .. } => return Err(Error::Closed(fault)),
        Message::Notice { body } => return queue_notice(st, body),
        other => return Err(Error::Protocol(format!("unexpected message {other:?}"))),
    };
    let is_final = !matches!(event, Event::Part(_));
    let Some(slot) = st.calls.get_mut(&id.0) else {
        return Err(Error::Protocol(format!("reply to unknown request {}", id.0)));
    };
    if slot.abandoned {
        if is_final {
            st.calls.remove(&id.0);
        }
    } else {
        slot.events.push_back(event);
    }
    Ok(())
}

/// Queues a notice, or fails (and marks the state flooded) past the queue's bounds.
fn queue_notice(st: &mut State, body: Bytes) -> Result<()> {
    if st.notices.len() >= NOTICES_MAX {
        st.flooded = true;
        return Err(Error::Protocol(format!(
            "the server sent more than {NOTICES_MAX} notices that were not taken (NOTICES_MAX)"
        )));
    }
    if !st.notices.is_empty() && st.notice_bytes + body.len() > NOTICE_BYTES_MAX {
        st.flooded = true;
        return Err(Error::Protocol(format!(
            "the server sent notices of more than {NOTICE_BYTES_MAX} bytes that were not taken (NOTICE_BYTES_MAX)"
        )));
    }
    // A copy: the body is a slice of the read buffer, and a small notice left untaken for long
    // would otherwise keep that whole buffer alive.
    let body = Bytes::copy_from_slice(&body);
    st.notice_bytes += body.len();
    st.notices.push_back(body);
    Ok(())
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
    /// Connects (with TLS when [`ClientOptions::tls`] asks for it), says HELLO and waits for
    /// WELCOME, all within [`ClientOptions::connect_timeout`]. A REFUSAL is [`Error::Refused`]; a
    /// TLS failure (a certificate that does not verify, a server without TLS, a CA file that
    /// cannot be used) is [`Error::Tls`], saying why.
    pub fn connect(addr: &Address, opts: &ClientOptions) -> Result<Client> {
        let deadline = Instant::now() + opts.connect_timeout;
        let sock = match (addr, &opts.tls) {
            (Address::Tcp(a), settings) => {
                // The TLS settings first: a CA file that cannot be used fails before connecting.
                let tls_config = match settings {
                    Some(settings) => Some(settings.config(a.ip()).map_err(|e| Error::Tls(e.to_string()))?),
                    None => None,
                };
                let s = TcpStream::connect_timeout(a, opts.connect_timeout).map_err(|e| Error::io("connecting", e))?;
                s.set_nodelay(true).map_err(|e| Error::io("connecting", e))?;
                match tls_config {
                    Some((config, name)) => Sock::Tls(Box::new(tls::TlsSock::connect(s, config, name, deadline)?)),
                    None => Sock::Tcp(s),
                }
            }
            (Address::Unix(p), Some(_)) => {
                return Err(Error::Tls(format!(
                    "TLS is for TCP connections; {} is a Unix socket",
                    p.display()
                )))
            }
            (Address::Unix(p), None) => Sock::Unix(UnixStream::connect(p).map_err(|e| Error::io("connecting", e))?),
        };
        let (mut dec, welcome) = handshake(&sock, opts, deadline)?;
        sock.set_timeouts(Some(READ_POLL), Some(WRITE_STALL))
            .map_err(|e| Error::io("configuring the socket", e))?;
        // Frames that came in the same read as the WELCOME (a notice sent as the connection was
        // accepted) are handed out now: the reader decodes only after reading, and a poll of the
        // socket would not see them.
        let mut round = Round {
            frames: Vec::new(),
            failure: None,
            bytes: 0,
        };
        loop {
            match dec.decode() {
                Ok(Some(f)) => round.frames.push(f),
                Ok(None) => break,
                Err(e) => {
                    round.failure = Some(Error::Frame(e));
                    break;
                }
            }
        }
        let side = ReadSide {
            dec,
            buf: vec![0u8; READ_BUF].into_boxed_slice(),
        };
        let inner = Arc::new(Inner {
            sock,
            writer: Mutex::new(Writer {
                queued: Vec::new(),
                next_id: 1,
            }),
            has_queued: AtomicBool::new(false),
            state: Mutex::new(State::new(side)),
            changed: Condvar::new(),
            noticed: Condvar::new(),
            welcome,
        });
        if !round.frames.is_empty() || round.failure.is_some() {
            let mut st = lock(&inner.state);
            let side = st.read_side.take().expect("a new client's reading side is free");
            drop(inner.hand_out(st, side, round));
        }
        Ok(Client { inner })
    }

    /// What the server said in its WELCOME.
    pub fn welcome(&self) -> &Welcome {
        &self.inner.welcome
    }

    /// Sends a request now and returns its [`Call`], to collect the reply later
    /// (`Remote_Service_Invocation`). Any number may be in flight. Requests deferred earlier go
    /// out with it, in order.
    pub fn invoke(&self, kind: Kind, body: impl Into<Bytes>) -> Result<Call> {
        self.enqueue(kind, body.into(), true)
    }

    /// Queues a request without writing it: it goes out with the next [`Client::invoke`] or
    /// [`Client::flush`], before any wait for a reply has to block, or once 64 KiB are queued.
    /// A caller working through a batch of replies that invokes one new request per reply (the
    /// PRIMA loop) sends them all in one write this way, instead of one write each.
    pub fn invoke_deferred(&self, kind: Kind, body: impl Into<Bytes>) -> Result<Call> {
        self.enqueue(kind, body.into(), false)
    }

    /// Writes the deferred requests now.
    pub fn flush(&self) -> Result<()> {
        self.inner.flush()
    }

    fn enqueue(&self, kind: Kind, body: Bytes, now: bool) -> Result<Call> {
        if !(kind.is_service() || kind == Kind::PING) {
            return Err(Error::NotARequest(kind.0));
        }
        if body.len() > self.inner.welcome.body_max as usize {
            return Err(Error::TooLarge {
                len: body.len(),
                max: self.inner.welcome.body_max,
            });
        }
        let mut w = lock(&self.inner.writer);
        let id = RequestId(w.next_id);
        w.next_id += 1;
        {
            let mut st = lock(&self.inner.state);
            if let Some(e) = &st.closed {
                return Err(e.clone());
            }
            st.calls.insert(id.0, Slot::default());
        }
        // From here the slot exists, so a reply can never arrive for an unknown id.
        let call = Call {
            inner: self.inner.clone(),
            id,
            done: false,
        };
        frame::encode_frame(kind, Flags::NONE, id, &body, &mut w.queued);
        if now || w.queued.len() >= QUEUED_MAX {
            self.inner.send_queued(&mut w)?;
        } else {
            self.inner.has_queued.store(true, Ordering::Release);
        }
        Ok(call)
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

    /// Waits up to `timeout` for the next NOTICE from the server and returns its body (`Ok(None)`
    /// if none came in time; a zero timeout still takes one that has already arrived). When no
    /// caller is reading the socket, this reads it itself (it polls the socket with poll(2) and
    /// reads only when data is there and nobody else reads), so notices reach a client that is
    /// otherwise idle; when a caller is reading, it waits for that reader to hand notices over.
    /// `Err(e)` once the connection is closed (the same error pending calls get), after the
    /// notices already queued have been taken.
    ///
    /// Notices are taken in arrival order; with several threads in here, each notice goes to one
    /// of them. A thread waiting here costs calls nothing: see the module docs. Deferred requests
    /// ([`Client::invoke_deferred`]) are not flushed by it.
    pub fn next_notice(&self, timeout: Duration) -> Result<Option<Bytes>> {
        lock(&self.inner.state).notice_callers += 1;
        let got = self.inner.next_notice(timeout);
        lock(&self.inner.state).notice_callers -= 1;
        got
    }

    /// How many threads are in [`Client::next_notice`] now (diagnostics,
    /// and tests that must know a thread waits there before they act).
    pub fn notice_callers(&self) -> usize {
        lock(&self.inner.state).notice_callers
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

/// A request in flight: collect its reply with [`Call::next_part`] (parts, for a streamed reply) or
/// [`Call::wait`]. Dropping it abandons the reply.
pub struct Call {
    inner: Arc<Inner>,
    id: RequestId,
    done: bool,
}

impl std::fmt::Debug for Call {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Call")
            .field("id", &self.id)
            .field("done", &self.done)
            .finish()
    }
}

impl Call {
    /// The request's id.
    pub fn id(&self) -> RequestId {
        self.id
    }

    /// The next part of the reply, waiting for it (`Get_Service_Result`); `None` after the final
    /// part. An error reply is [`Error::Remote`]; a lost connection fails every pending call.
    pub fn next_part(&mut self) -> Result<Option<Part>> {
        if self.done {
            return Ok(None);
        }
        match self.inner.next_event(self.id.0) {
            Ok(Event::Part(body)) => Ok(Some(Part { body, last: false })),
            Ok(Event::Final(body)) => {
                self.finish();
                Ok(Some(Part { body, last: true }))
            }
            Ok(Event::Failed(fault)) => {
                self.finish();
                Err(Error::Remote(fault))
            }
            Err(e) => {
                self.finish();
                Err(e)
            }
        }
    }

    /// Waits for the final reply and returns it; parts not yet taken with [`Call::next_part`] are
    /// dropped.
    pub fn wait(mut self) -> Result<Bytes> {
        loop {
            match self.next_part()? {
                Some(Part { body, last: true }) => return Ok(body),
                Some(_) => {}
                None => return Err(Error::Protocol("reply already taken".into())),
            }
        }
    }

    /// Every part of the reply in order, the final one last.
    pub fn collect(mut self) -> Result<Vec<Bytes>> {
        let mut parts = Vec::new();
        while let Some(p) = self.next_part()? {
            parts.push(p.body);
        }
        Ok(parts)
    }

    fn finish(&mut self) {
        self.done = true;
        lock(&self.inner.state).calls.remove(&self.id.0);
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut st = lock(&self.inner.state);
        let finished = match st.calls.get_mut(&self.id.0) {
            Some(slot) => {
                let finished = slot
                    .events
                    .iter()
                    .any(|e| matches!(e, Event::Final(_) | Event::Failed(_)));
                slot.events.clear();
                slot.abandoned = true;
                finished
            }
            None => false,
        };
        if finished || st.closed.is_some() {
            st.calls.remove(&self.id.0);
        }
    }
}

/// Says HELLO (and, to log in, answers the server's CHALLENGE with AUTH) and reads up to
/// WELCOME; returns the decoder (it may already hold frames that followed the WELCOME) and the
/// WELCOME. After a login the WELCOME must carry the server's proof that it knows the password.
fn handshake(sock: &Sock, opts: &ClientOptions, deadline: Instant) -> Result<(FrameDecoder, Welcome)> {
    let first = match &opts.login {
        Some(login) => Some(
            ClientFirst::new(&login.user)
                .map_err(|e| Error::Protocol(format!("cannot log in as {:?}: {e}", login.user)))?,
        ),
        None => None,
    };
    send_message(
        sock,
        &Message::Hello(Hello {
            architecture: opts.architecture,
            auth: first
                .as_ref()
                .map_or_else(Bytes::new, |f| Bytes::copy_from_slice(f.message())),
            client_name: opts.client_name.clone(),
        }),
        deadline,
        "sending HELLO",
    )?;
    let mut dec = FrameDecoder::new(opts.body_max);
    let mut pending = first;
    let mut proving = None;
    loop {
        match read_message(sock, &mut dec, deadline, "waiting for WELCOME")? {
            Message::Challenge(server_first) => {
                let (Some(first), Some(login)) = (pending.take(), &opts.login) else {
                    return Err(Error::Protocol(
                        "the server sent a CHALLENGE that nothing asked for".into(),
                    ));
                };
                let last = first
                    .receive_server_first(&server_first, &login.password)
                    .map_err(|e| Error::Protocol(format!("the server's login challenge: {e}")))?;
                let auth = Message::Auth(Bytes::copy_from_slice(last.message()));
                send_message(sock, &auth, deadline, "sending AUTH")?;
                proving = Some(last);
            }
            Message::Welcome(welcome) => {
                if pending.is_some() {
                    return Err(Error::Refused(Fault::new(
                        ErrorCode::AUTH_FAILED,
                        "the server accepted the connection without checking the password",
                    )));
                }
                if let Some(last) = proving {
                    last.verify_server_final(&welcome.auth).map_err(|e| {
                        Error::Refused(Fault::new(
                            ErrorCode::AUTH_FAILED,
                            format!("the server did not prove it knows the password: {e}"),
                        ))
                    })?;
                }
                return Ok((dec, welcome));
            }
            Message::Refusal(fault) => return Err(Error::Refused(fault)),
            Message::Goodbye { fault, .. } => return Err(Error::Closed(fault)),
            other => return Err(Error::Protocol(format!("expected WELCOME, got {other:?}"))),
        }
    }
}

/// Writes one handshake message whole by `deadline`.
fn send_message(sock: &Sock, m: &Message, deadline: Instant, what: &'static str) -> Result<()> {
    let mut bytes = Vec::new();
    m.encode(&mut bytes);
    let mut off = 0;
    loop {
        sock.set_timeouts(Some(time_left(deadline)), Some(time_left(deadline)))
            .map_err(|e| Error::io("configuring the socket", e))?;
        // Over TLS the last records may stay queued after the writes: the flush sends them.
        let written = if off < bytes.len() {
            sock.write(&bytes[off..])
        } else {
            sock.flush().map(|()| 0)
        };
        match written {
            Ok(0) if off >= bytes.len() => return Ok(()),
            Ok(n) => off += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                return Err(Error::Timeout(what))
            }
            Err(e) => return Err(Error::io(what, e)),
        }
    }
}

/// Reads the next handshake message by `deadline`.
fn read_message(sock: &Sock, dec: &mut FrameDecoder, deadline: Instant, what: &'static str) -> Result<Message> {
    let mut buf = vec![0u8; 4096];
    loop {
        if let Some(frame) = dec.decode()? {
            return Ok(Message::from_frame(frame)?);
        }
        if Instant::now() >= deadline {
            return Err(Error::Timeout(what));
        }
        sock.set_timeouts(Some(time_left(deadline)), Some(time_left(deadline)))
            .map_err(|e| Error::io("configuring the socket", e))?;
        match sock.read(&mut buf) {
            Ok(0) => {
                dec.finish()?;
                return Err(Error::Disconnected);
            }
            Ok(n) => dec.push(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                return Err(Error::Timeout(what))
            }
            Err(e) => return Err(Error::io(what, e)),
        }
    }
}

/// The time left until `deadline` (at least a millisecond: a zero timeout means none).
fn time_left(deadline: Instant) -> Duration {
    deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1))
}
