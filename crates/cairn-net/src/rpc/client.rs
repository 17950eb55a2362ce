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
//! # A call's states
//!
//! ```text
//!   invoke ──► Pending ──(part)──► Pending ──(final / error reply)──► Done (slot removed by Call::next_part)
//!                 │                                                   ▲
//!                 └── Call dropped ──► Abandoned ──(final arrives)────┘ (slot removed by the reader)
//!                 └── connection closes ──► Failed (every pending call gets the same error)
//! ```

use std::collections::{HashMap, VecDeque};
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::error::{Error, Result};
use crate::frame::{self, Flags, Frame, FrameDecoder, Kind, RequestId};
use crate::message::{Architecture, Fault, Hello, Message, Welcome};
use crate::transport::Address;

/// How long a write may stall before its caller reads replies instead.
pub const WRITE_STALL: Duration = Duration::from_millis(1);
/// How long a reader blocks before it re-checks the connection's state.
pub const READ_POLL: Duration = Duration::from_millis(200);
/// Bytes a reader asks the socket for at once.
const READ_BUF: usize = 64 << 10;

/// How to connect.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// The architecture asked for in HELLO.
    pub architecture: Architecture,
    /// The auth token.
    pub token: Bytes,
    /// A name for the server's logs.
    pub client_name: String,
    /// Largest reply body accepted.
    pub body_max: u32,
    /// Time allowed for connecting and the handshake.
    pub connect_timeout: Duration,
}

impl Default for ClientOptions {
    fn default() -> ClientOptions {
        ClientOptions {
            architecture: Architecture::RPC,
            token: Bytes::new(),
            client_name: format!("cairn-net client (pid {})", std::process::id()),
            body_max: frame::BODY_MAX_DEFAULT,
            connect_timeout: Duration::from_secs(10),
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

/// The socket, either kind. Reads and writes go through `&Sock`, so one thread can read while
/// another writes.
#[derive(Debug)]
enum Sock {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Sock {
    fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Sock::Tcp(s) => (&*s).read(buf),
            Sock::Unix(s) => (&*s).read(buf),
        }
    }

    fn write(&self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Sock::Tcp(s) => (&*s).write(buf),
            Sock::Unix(s) => (&*s).write(buf),
        }
    }

    fn set_timeouts(&self, read: Option<Duration>, write: Option<Duration>) -> io::Result<()> {
        match self {
            Sock::Tcp(s) => {
                s.set_read_timeout(read)?;
                s.set_write_timeout(write)
            }
            Sock::Unix(s) => {
                s.set_read_timeout(read)?;
                s.set_write_timeout(write)
            }
        }
    }

    fn shutdown(&self) {
        let _ = match self {
            Sock::Tcp(s) => s.shutdown(Shutdown::Both),
            Sock::Unix(s) => s.shutdown(Shutdown::Both),
        };
    }
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
    /// Callers blocked on the condition variable.
    waiters: usize,
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
    welcome: Welcome,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every change under these locks is a single insert/remove/push, so a panic while holding
    // one leaves the data consistent and a poisoned lock is still usable.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Inner {
    /// Takes the next event of call `id`, reading the socket (as the leader) or waiting for
    /// the reader (as a follower) until one is there. With `block` false, returns `Ok(None)`
    /// instead of waiting.
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
        let mut frames: Vec<Frame> = Vec::new();
        let mut failure: Option<Error> = None;
        match self.sock.read(&mut side.buf) {
            Ok(0) => {
                failure = Some(match side.dec.finish() {
                    Ok(()) => Error::Disconnected,
                    Err(e) => Error::Frame(e),
                })
            }
            Ok(n) => {
                side.dec.push(&side.buf[..n]);
                loop {
                    match side.dec.decode() {
                        Ok(Some(f)) => frames.push(f),
                        Ok(None) => break,
                        Err(e) => {
                            failure = Some(Error::Frame(e));
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
            Err(e) => failure = Some(Error::io("reading replies", e)),
        }
        let mut st = lock(&self.state);
        st.read_side = Some(side);
        for frame in frames {
            if let Err(e) = dispatch(&mut st, frame) {
                failure = Some(e);
                break;
            }
        }
        if let Some(e) = failure {
            if st.closed.is_none() {
                st.closed = Some(e);
            }
        }
        if st.waiters > 0 {
            self.changed.notify_all();
        }
        st
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
        if st.waiters > 0 {
            self.changed.notify_all();
        }
    }

    /// Writes all of `buf`; a stalled write reads replies before trying again.
    fn write_all(&self, buf: &[u8]) -> Result<()> {
        let mut off = 0;
        while off < buf.len() {
            match self.sock.write(&buf[off..]) {
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
        Ok(())
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.sock.shutdown();
    }
}

/// Hands one reply frame to its call.
fn dispatch(st: &mut State, frame: Frame) -> Result<()> {
    let (id, event) = match Message::from_frame(frame)? {
        Message::ReplyPart { id, body, .. } => (id, Event::Part(body)),
        Message::Reply { id, body, .. } => (id, Event::Final(body)),
        Message::ErrorReply { id, fault, .. } => (id, Event::Failed(fault)),
        Message::Goodbye { fault, .. } => return Err(Error::Closed(fault)),
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
    /// Connects, says HELLO and waits for WELCOME. A REFUSAL is [`Error::Refused`].
    pub fn connect(addr: &Address, opts: &ClientOptions) -> Result<Client> {
        let deadline = Instant::now() + opts.connect_timeout;
        let sock = match addr {
            Address::Tcp(a) => {
                let s = TcpStream::connect_timeout(a, opts.connect_timeout).map_err(|e| Error::io("connecting", e))?;
                s.set_nodelay(true).map_err(|e| Error::io("connecting", e))?;
                Sock::Tcp(s)
            }
            Address::Unix(p) => Sock::Unix(UnixStream::connect(p).map_err(|e| Error::io("connecting", e))?),
        };
        let (dec, welcome) = handshake(&sock, opts, deadline)?;
        sock.set_timeouts(Some(READ_POLL), Some(WRITE_STALL))
            .map_err(|e| Error::io("configuring the socket", e))?;
        Ok(Client {
            inner: Arc::new(Inner {
                sock,
                writer: Mutex::new(Writer {
                    queued: Vec::new(),
                    next_id: 1,
                }),
                has_queued: AtomicBool::new(false),
                state: Mutex::new(State {
                    calls: HashMap::new(),
                    closed: None,
                    read_side: Some(ReadSide {
                        dec,
                        buf: vec![0u8; READ_BUF].into_boxed_slice(),
                    }),
                    waiters: 0,
                }),
                changed: Condvar::new(),
                welcome,
            }),
        })
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

/// Says HELLO and reads up to WELCOME; returns the decoder (it may already hold frames that
/// followed the WELCOME) and the WELCOME.
fn handshake(sock: &Sock, opts: &ClientOptions, deadline: Instant) -> Result<(FrameDecoder, Welcome)> {
    let left = || {
        deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1))
    };
    sock.set_timeouts(Some(left()), Some(left()))
        .map_err(|e| Error::io("configuring the socket", e))?;
    let mut hello = Vec::new();
    Message::Hello(Hello {
        architecture: opts.architecture,
        token: opts.token.clone(),
        client_name: opts.client_name.clone(),
    })
    .encode(&mut hello);
    let mut off = 0;
    while off < hello.len() {
        match sock.write(&hello[off..]) {
            Ok(n) => off += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                return Err(Error::Timeout("sending HELLO"))
            }
            Err(e) => return Err(Error::io("sending HELLO", e)),
        }
    }
    let mut dec = FrameDecoder::new(opts.body_max);
    let mut buf = vec![0u8; 4096];
    loop {
        if let Some(frame) = dec.decode()? {
            return match Message::from_frame(frame)? {
                Message::Welcome(welcome) => Ok((dec, welcome)),
                Message::Refusal(fault) => Err(Error::Refused(fault)),
                Message::Goodbye { fault, .. } => Err(Error::Closed(fault)),
                other => Err(Error::Protocol(format!("expected WELCOME, got {other:?}"))),
            };
        }
        if Instant::now() >= deadline {
            return Err(Error::Timeout("waiting for WELCOME"));
        }
        sock.set_timeouts(Some(left()), Some(left()))
            .map_err(|e| Error::io("configuring the socket", e))?;
        match sock.read(&mut buf) {
            Ok(0) => {
                dec.finish()?;
                return Err(Error::Disconnected);
            }
            Ok(n) => dec.push(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                return Err(Error::Timeout("waiting for WELCOME"))
            }
            Err(e) => return Err(Error::io("reading WELCOME", e)),
        }
    }
}
