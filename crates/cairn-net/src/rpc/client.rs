//! The client half: one connection, many requests in flight, usable from synchronous code.
//!
//! [`Client::invoke`] is PRIMA's `Remote_Service_Invocation`: it sends the request now and
//! returns a [`Call`]; [`Call::next`] is `Get_Service_Result` with the "complete or not" flag
//! ([`Part::last`]), and [`Call::wait`] / [`Client::call`] are the plain synchronous forms. Replies
//! are matched by request id and may arrive in any order.
//!
//! # Why a private current-thread runtime, driven by the callers
//!
//! Each client owns a tokio *current-thread* runtime and a reader task on it, and has no thread
//! of its own. The runtime only runs while some caller is inside `block_on`: a caller waiting for
//! a reply drives the reader task itself, so a synchronous call costs the same as the raw
//! exchange — write, then read on the calling thread — with no hand-off to another thread (a
//! dedicated reader thread would add a wake-up and a context switch to every call, about as much
//! as the round trip itself on a loaded two-core machine). When several threads wait at once,
//! one drives the reader and tokio wakes the others as their replies are dispatched (the
//! leader/follower pattern). Requests are written directly from the caller's thread with
//! `try_write`; only when the socket is full does the caller enter the runtime, which then also
//! drives the reader, so a client that sends much and reads little cannot deadlock against a
//! server that has stopped reading until its replies are taken.
//!
//! The price: replies are read only while someone waits or sends. They queue in the kernel in
//! the meantime, which is back-pressure the server respects (it bounds queued reply bytes). And
//! the client must not be used from inside another tokio runtime's worker (`block_on` would
//! panic); the async server-side code that needs a client should run it on a blocking thread.
//!
//! # A call's states
//!
//! ```text
//!   invoke ──► Pending ──(part)──► Pending ──(final / error reply)──► Done (slot removed by Call::next)
//!                 │                                                   ▲
//!                 └── Call dropped ──► Abandoned ──(final arrives)────┘ (slot removed by the reader)
//!                 └── connection closes ──► Failed (every pending call gets the same error)
//! ```

use std::collections::{HashMap, VecDeque};
use std::future::poll_fn;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Poll, Waker};
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::runtime::Runtime;

use crate::error::{Error, Result};
use crate::frame::{self, Flags, FrameDecoder, Kind, RequestId};
use crate::message::{Architecture, Hello, Message, Welcome};
use crate::transport::{Address, ReadHalf, Stream, WriteHalf};

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
    Failed(crate::message::Fault),
}

#[derive(Debug, Default)]
struct Slot {
    events: VecDeque<Event>,
    waker: Option<Waker>,
    /// The [`Call`] was dropped: discard what arrives, remove the slot at the final reply.
    abandoned: bool,
}

#[derive(Debug, Default)]
struct State {
    calls: HashMap<u64, Slot>,
    /// Set once, when the connection ends; every later wait fails with it.
    closed: Option<Error>,
}

/// The state the reader task shares with the callers.
#[derive(Debug, Default)]
struct Shared {
    state: Mutex<State>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves the map consistent (every change is one
        // insert/remove/push), so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Ends the connection for every caller.
    fn close(&self, error: Error) {
        let wakers: Vec<Waker> = {
            let mut st = self.lock();
            if st.closed.is_none() {
                st.closed = Some(error);
            }
            st.calls.values_mut().filter_map(|s| s.waker.take()).collect()
        };
        for w in wakers {
            w.wake();
        }
    }
}

struct Writer {
    half: WriteHalf,
    buf: Vec<u8>,
    next_id: u64,
}

struct Inner {
    /// `Some` until dropped.
    rt: Option<Runtime>,
    writer: Mutex<Writer>,
    shared: Arc<Shared>,
    welcome: Welcome,
}

impl Inner {
    fn rt(&self) -> &Runtime {
        self.rt.as_ref().expect("runtime lives as long as the client")
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.shared.close(Error::Disconnected);
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
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
    /// Connects, says HELLO and waits for WELCOME. A REFUSAL is [`Error::Refused`].
    pub fn connect(addr: &Address, opts: &ClientOptions) -> Result<Client> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .map_err(|e| Error::io("starting the client runtime", e))?;
        let (r, w, dec, welcome) = rt
            .block_on(async { tokio::time::timeout(opts.connect_timeout, handshake(addr, opts)).await })
            .map_err(|_| Error::Timeout("connecting and handshake"))??;
        let shared = Arc::new(Shared::default());
        rt.spawn(read_loop(r, dec, shared.clone()));
        Ok(Client {
            inner: Arc::new(Inner {
                rt: Some(rt),
                writer: Mutex::new(Writer {
                    half: w,
                    buf: Vec::new(),
                    next_id: 1,
                }),
                shared,
                welcome,
            }),
        })
    }

    /// What the server said in its WELCOME.
    pub fn welcome(&self) -> &Welcome {
        &self.inner.welcome
    }

    /// Sends a request now and returns its [`Call`], to collect the reply later
    /// (`Remote_Service_Invocation`). Any number may be in flight.
    pub fn invoke(&self, kind: Kind, body: impl Into<Bytes>) -> Result<Call> {
        if !(kind.is_service() || kind == Kind::PING) {
            return Err(Error::NotARequest(kind.0));
        }
        let body = body.into();
        if body.len() > self.inner.welcome.body_max as usize {
            return Err(Error::TooLarge {
                len: body.len(),
                max: self.inner.welcome.body_max,
            });
        }
        let mut w = self.inner.writer.lock().unwrap_or_else(|p| p.into_inner());
        let id = RequestId(w.next_id);
        w.next_id += 1;
        {
            let mut st = self.inner.shared.lock();
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
        let Writer { half, buf, .. } = &mut *w;
        buf.clear();
        frame::encode_frame(kind, Flags::NONE, id, &body, buf);
        if let Err(e) = write_all(self.inner.rt(), half, buf) {
            self.inner.shared.close(e.clone());
            return Err(e);
        }
        Ok(call)
    }

    /// A synchronous call: invoke and wait for the final reply (parts before it are dropped; use
    /// [`Client::invoke`] and [`Call::next`] for streamed replies).
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
        self.inner.shared.lock().calls.len()
    }

    /// Whether the connection has ended (and why).
    pub fn closed(&self) -> Option<Error> {
        self.inner.shared.lock().closed.clone()
    }

    /// Checks the client's invariants (tests and debug builds).
    pub fn check_invariants(&self) {
        let st = self.inner.shared.lock();
        for (id, slot) in &st.calls {
            assert!(*id != 0, "request id 0 is the connection's");
            assert!(
                !(slot.abandoned && !slot.events.is_empty()),
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
    }
}

/// Writes all of `buf`, directly while the socket takes it, else inside the runtime (which then
/// also drives the reader, so replies keep being drained while we wait).
fn write_all(rt: &Runtime, half: &mut WriteHalf, buf: &[u8]) -> Result<()> {
    let mut off = 0;
    while off < buf.len() {
        match half.try_write(&buf[off..]) {
            Ok(0) => return Err(Error::io("sending a request", io::ErrorKind::WriteZero.into())),
            Ok(n) => off += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                let rest = &buf[off..];
                return rt
                    .block_on(half.write_all(rest))
                    .map_err(|e| Error::io("sending a request", e));
            }
            Err(e) => return Err(Error::io("sending a request", e)),
        }
    }
    Ok(())
}

/// A request in flight: collect its reply with [`Call::next`] (parts, for a streamed reply) or
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
    pub fn next(&mut self) -> Result<Option<Part>> {
        if self.done {
            return Ok(None);
        }
        let taken = self.try_take();
        let event = match taken {
            Some(ev) => ev,
            None => self.inner.rt().block_on(poll_fn(|cx| {
                let mut st = self.inner.shared.lock();
                let st = &mut *st;
                let Some(slot) = st.calls.get_mut(&self.id.0) else {
                    return Poll::Ready(Err(st.closed.clone().unwrap_or(Error::Disconnected)));
                };
                if let Some(ev) = slot.events.pop_front() {
                    return Poll::Ready(Ok(ev));
                }
                if let Some(e) = &st.closed {
                    return Poll::Ready(Err(e.clone()));
                }
                match &slot.waker {
                    Some(w) if w.will_wake(cx.waker()) => {}
                    _ => slot.waker = Some(cx.waker().clone()),
                }
                Poll::Pending
            })),
        };
        match event {
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

    /// Waits for the final reply and returns it; parts not yet taken with [`Call::next`] are
    /// dropped.
    pub fn wait(mut self) -> Result<Bytes> {
        loop {
            match self.next()? {
                Some(Part { body, last: true }) => return Ok(body),
                Some(_) => {}
                None => return Err(Error::Protocol("reply already taken".into())),
            }
        }
    }

    /// Every part of the reply in order, the final one last.
    pub fn collect(mut self) -> Result<Vec<Bytes>> {
        let mut parts = Vec::new();
        while let Some(p) = self.next()? {
            parts.push(p.body);
        }
        Ok(parts)
    }

    /// An event already received, without waiting.
    fn try_take(&self) -> Option<Result<Event>> {
        let mut st = self.inner.shared.lock();
        let st = &mut *st;
        match st.calls.get_mut(&self.id.0) {
            Some(slot) => match slot.events.pop_front() {
                Some(ev) => Some(Ok(ev)),
                None => st.closed.clone().map(Err),
            },
            None => Some(Err(st.closed.clone().unwrap_or(Error::Disconnected))),
        }
    }

    fn finish(&mut self) {
        self.done = true;
        self.inner.shared.lock().calls.remove(&self.id.0);
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut st = self.inner.shared.lock();
        let finished = match st.calls.get_mut(&self.id.0) {
            Some(slot) => {
                let finished = slot
                    .events
                    .iter()
                    .any(|e| matches!(e, Event::Final(_) | Event::Failed(_)));
                slot.events.clear();
                slot.abandoned = true;
                slot.waker = None;
                finished
            }
            None => false,
        };
        if finished || st.closed.is_some() {
            st.calls.remove(&self.id.0);
        }
    }
}

/// Connects and runs the handshake; returns the halves, the decoder (it may already hold frames
/// that followed the WELCOME) and the WELCOME.
async fn handshake(addr: &Address, opts: &ClientOptions) -> Result<(ReadHalf, WriteHalf, FrameDecoder, Welcome)> {
    let stream = Stream::connect(addr).await.map_err(|e| Error::io("connecting", e))?;
    let (mut r, mut w) = stream.into_split();
    let mut hello = Vec::new();
    Message::Hello(Hello {
        architecture: opts.architecture,
        token: opts.token.clone(),
        client_name: opts.client_name.clone(),
    })
    .encode(&mut hello);
    w.write_all(&hello).await.map_err(|e| Error::io("sending HELLO", e))?;
    let mut dec = FrameDecoder::new(opts.body_max);
    loop {
        if let Some(frame) = dec.decode()? {
            return match Message::from_frame(frame)? {
                Message::Welcome(welcome) => Ok((r, w, dec, welcome)),
                Message::Refusal(fault) => Err(Error::Refused(fault)),
                Message::Goodbye { fault, .. } => Err(Error::Closed(fault)),
                other => Err(Error::Protocol(format!("expected WELCOME, got {other:?}"))),
            };
        }
        dec.read_hint();
        let n = r
            .read_buf(dec.buffer_mut())
            .await
            .map_err(|e| Error::io("reading WELCOME", e))?;
        if n == 0 {
            dec.finish()?;
            return Err(Error::Disconnected);
        }
    }
}

/// The reader task: decodes replies and hands them to their calls until the connection ends.
async fn read_loop(mut r: ReadHalf, mut dec: FrameDecoder, shared: Arc<Shared>) {
    let mut wake: Vec<Waker> = Vec::new();
    let error = 'conn: loop {
        // Dispatch every whole frame buffered under one lock, then wake their callers.
        {
            let mut st = shared.lock();
            loop {
                let frame = match dec.decode() {
                    Ok(Some(frame)) => frame,
                    Ok(None) => break,
                    Err(e) => break 'conn Error::Frame(e),
                };
                let (id, event) = match Message::from_frame(frame) {
                    Ok(Message::ReplyPart { id, body, .. }) => (id, Event::Part(body)),
                    Ok(Message::Reply { id, body, .. }) => (id, Event::Final(body)),
                    Ok(Message::ErrorReply { id, fault, .. }) => (id, Event::Failed(fault)),
                    Ok(Message::Goodbye { fault, .. }) => break 'conn Error::Closed(fault),
                    Ok(other) => break 'conn Error::Protocol(format!("unexpected message {other:?}")),
                    Err(e) => break 'conn Error::Message(e),
                };
                let is_final = !matches!(event, Event::Part(_));
                let Some(slot) = st.calls.get_mut(&id.0) else {
                    break 'conn Error::Protocol(format!("reply to unknown request {}", id.0));
                };
                if slot.abandoned {
                    if is_final {
                        st.calls.remove(&id.0);
                    }
                    continue;
                }
                slot.events.push_back(event);
                if let Some(w) = slot.waker.take() {
                    wake.push(w);
                }
            }
        }
        for w in wake.drain(..) {
            w.wake();
        }
        dec.read_hint();
        match r.read_buf(dec.buffer_mut()).await {
            Ok(0) => match dec.finish() {
                Ok(()) => break Error::Disconnected,
                Err(e) => break Error::Frame(e),
            },
            Ok(_) => {}
            Err(e) => break Error::io("reading replies", e),
        }
    };
    for w in wake.drain(..) {
        w.wake();
    }
    shared.close(error);
}
