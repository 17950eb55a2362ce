//! The server half: [`run`] accepts connections on a [`Listener`] and serves each with a
//! [`Handler`] until a shutdown future completes.
//!
//! # A connection
//!
//! Each connection is two tokio tasks, plus one task per request that has to wait:
//!
//! - the *reader* (the connection task) decodes frames, answers PING itself, and starts each
//!   service request ([`Handler::handle`]): it polls the request once in place and spawns it as a
//!   task of its own only if it has to wait (`run_eagerly`), so cheap requests cost no task switch
//!   while requests that wait (locks, I/O, `spawn_blocking`) run concurrently. A handler must not
//!   block the thread for long without awaiting (tokio's rule), or it holds up its connection;
//! - the *writer* drains an unbounded channel of encoded frames into the socket, coalescing
//!   whatever is queued into one write (this is what makes pipelined replies cheap).
//!
//! Replies, partial replies, NOTICEs ([`Notifier::notice`]) and the connection's own messages all
//! go through that one channel, so they reach the wire in the order they were queued: a notice
//! queued after a reply is read by the client after that reply.
//!
//! ```text
//!            accept                 HELLO ok (Handler::open)          EOF / GOODBYE / shutdown / bad frame
//!   [limit?] ──────► Handshaking ─────────────────────────► Serving ─────────────────────────────────► Draining ──► Closed
//!      │ full            │ bad frame, wrong first message,               (no more reads; in-flight requests
//!      ▼                 │ refused, timeout                               finish, GOODBYE if we are the
//!   REFUSAL ──► Closed   ▼                                                 ones closing, Handler::closed)
//!                     REFUSAL ──► Closed
//! ```
//!
//! On a TLS listener ([`Listener::with_tls`]) Handshaking begins with the TLS handshake, in the
//! connection's own task and within the same [`Limits::handshake_timeout`] as the HELLO; a TLS
//! handshake that fails or times out closes that connection without a word (there is no channel
//! to say it on), except that a client sending frames without TLS gets a plain REFUSAL saying TLS
//! is required. A REFUSAL at the connection limit follows a TLS handshake too (bounded by a
//! second). Past the TLS handshake everything below is the same with and without TLS.
//!
//! | transition | made by |
//! |---|---|
//! | accept, or refuse at the connection limit | [`run`] |
//! | the TLS handshake, on a TLS listener | `secure` (by the handshake deadline) |
//! | Handshaking → Serving / Closed | `Connection::handshake` (timeout [`Limits::handshake_timeout`]); on Serving, `Connection::serve_session` hands [`Handler::attach`] its [`Notifier`] before the first request is read |
//! | Serving → Draining | `Connection::serve` returns (EOF, client GOODBYE, shutdown signal, bad input); `Connection::serve_session` marks the [`Notifier`]s closed |
//! | Draining → Closed | `Connection::serve_session` waits for in-flight (≤ [`Limits::shutdown_grace`]), then `connection::run` lets the writer flush and shut the socket |
//!
//! Notices can be sent only while Serving: from Draining on, the client can no longer answer one
//! (its requests are not read any more), so [`Notifier::notice`] fails with
//! [`Error::Disconnected`]. A [`Notifier`] kept past the connection's end (in a table of cached
//! pages, say) does not keep the connection's writer alive: it holds the channel weakly.
//!
//! # Bounds
//!
//! Per connection: at most [`Limits::in_flight_max`] requests run at once (the reader stops
//! reading until one finishes, so the rest wait in the socket: back-pressure, not an error);
//! request bodies being handled hold at most [`Limits::request_bytes_max`] bytes (permits are
//! taken as soon as a frame's header is known, before its body is read); replies queued for the
//! writer hold at most [`Limits::reply_bytes_max`] bytes (a handler streaming parts to a slow client
//! waits in [`Replier::part`]). The two budgets are separate so a request never waits for bytes
//! that only its own reply could free. Across connections: at most
//! [`Limits::connections_max`]; the next one gets a REFUSAL and is closed; and the request and
//! reply bytes of all connections together stay within [`Limits::server_request_bytes_max`] and
//! [`Limits::server_reply_bytes_max`] (each take is the connection's share first, then the
//! server's), so memory is bounded for the whole server, not only per connection.
//!
//! Notices are the exception: [`Notifier::notice`] never waits, so they take no budget, and a
//! client that does not read holds them in the writer's queue. Whoever sends notices bounds how
//! many it has outstanding per client.
//!
//! # Bad input
//!
//! A bad frame, an unknown kind or a message out of place ends the connection: an ERROR reply
//! to the request when the header was verified (so its id can be trusted), then a GOODBYE with
//! the reason, then close. Before HELLO the answer is a REFUSAL instead. A length field over the
//! limit is rejected from the header alone; nothing is allocated for it. After closing with an
//! error the server reads and discards what the client still sends for a short while (a
//! "lingering close") so that the client's kernel does not discard our GOODBYE on a reset.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, watch, Notify, OwnedSemaphorePermit, Semaphore, TryAcquireError};
use tokio::task::JoinSet;

use crate::error::Error;
use crate::frame::{self, Flags, Kind, RequestId, HEADER_SIZE};
use crate::message::{Capabilities, ErrorCode, Fault, Hello, Message};
use crate::scram::{Decoy, Verifier};

use super::login::{self, Throttle};
use crate::transport::{Incoming, Listener, ReadHalf, Stream, WriteHalf};

/// The server's bounds. [`Limits::default`] suits a database server; tests shrink them.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Largest body accepted after the handshake (and largest reply a handler may send).
    pub body_max: u32,
    /// Largest body accepted before the handshake completes.
    pub handshake_body_max: u32,
    /// Connections served at once; one more is refused.
    pub connections_max: usize,
    /// Requests of one connection running at once.
    pub in_flight_max: u32,
    /// Bytes of request frames of one connection held while their handlers run. At least
    /// `body_max` + 32.
    pub request_bytes_max: u32,
    /// Bytes of reply frames of one connection queued for the socket. At least `body_max` + 32.
    pub reply_bytes_max: u32,
    /// Bytes of request frames held by all connections together (the per-connection budgets
    /// add up to more than a server should hold: 1,024 connections × 64 MiB). At least
    /// `body_max` + 32.
    pub server_request_bytes_max: u64,
    /// Bytes of reply frames queued by all connections together. At least `body_max` + 32.
    pub server_reply_bytes_max: u64,
    /// Time a new connection has, from its accept, to complete its TLS handshake (on a TLS
    /// listener) and its HELLO (with the login, if any), together.
    pub handshake_timeout: Duration,
    /// Time the rest of a frame may take once its first byte has arrived (a stalled frame is
    /// treated as truncated).
    pub frame_timeout: Duration,
    /// On shutdown, how long in-flight requests get to finish before their connection is closed
    /// under them.
    pub shutdown_grace: Duration,
    /// Failed logins one address may have at once before it must wait (`login.rs`).
    pub login_failures_burst: u32,
    /// Connections from one address that may be in their handshake (not yet welcomed) at
    /// once; one more is refused with TOO_MANY_CONNECTIONS, so idle connections from one
    /// address cannot take every slot of [`Limits::connections_max`].
    pub handshakes_per_address_max: usize,
    /// Time after which an address may fail one more login.
    pub login_failure_refill: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            body_max: frame::BODY_MAX_DEFAULT,
            handshake_body_max: frame::HANDSHAKE_BODY_MAX_DEFAULT,
            connections_max: 1024,
            in_flight_max: 256,
            request_bytes_max: 64 << 20,
            reply_bytes_max: 64 << 20,
            server_request_bytes_max: 512 << 20,
            server_reply_bytes_max: 512 << 20,
            handshake_timeout: Duration::from_secs(10),
            frame_timeout: Duration::from_secs(30),
            shutdown_grace: Duration::from_secs(30),
            login_failures_burst: 5,
            handshakes_per_address_max: 32,
            login_failure_refill: Duration::from_secs(6),
        }
    }
}

impl Limits {
    /// The limits with every bound at least the least that works (one connection, one request,
    /// byte budgets that fit one largest frame).
    pub fn validated(&self) -> Limits {
        let frame_max = (self.body_max as u64 + HEADER_SIZE as u64).min(u32::MAX as u64) as u32;
        let body_max = frame_max - HEADER_SIZE as u32;
        Limits {
            body_max,
            handshake_body_max: self.handshake_body_max.min(body_max),
            connections_max: self.connections_max.max(1),
            in_flight_max: self.in_flight_max.max(1),
            request_bytes_max: self.request_bytes_max.max(frame_max),
            reply_bytes_max: self.reply_bytes_max.max(frame_max),
            server_request_bytes_max: self.server_request_bytes_max.max(u64::from(frame_max)),
            server_reply_bytes_max: self.server_reply_bytes_max.max(u64::from(frame_max)),
            ..self.clone()
        }
    }
}

/// A service request handed to the [`Handler`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// The service kind (at least [`Kind::SERVICE_MIN`]).
    pub kind: Kind,
    /// The client's id for it.
    pub id: RequestId,
    /// The body, checksum verified.
    pub body: Bytes,
}

/// What the server crate implements: admission of a connection, and the requests of its session.
pub trait Handler: Send + Sync + 'static {
    /// Per-connection state (the session: its transactions, locks, cache callbacks).
    type Session: Send + Sync + 'static;

    /// Decides on a HELLO: a session, or a refusal (e.g. [`ErrorCode::AUTH_FAILED`] for a
    /// server that wants a user, [`ErrorCode::UNSUPPORTED_ARCHITECTURE`]) that is sent before the
    /// connection closes. `user` is the user the client proved it is (a SCRAM login the RPC
    /// layer ran with [`Handler::credentials`]), or `None` for a HELLO without a login.
    fn open(&self, hello: &Hello, peer: &str, user: Option<&str>) -> Result<Self::Session, Fault>;

    /// What a login as `user` is checked against: the user's SCRAM verifier (`None` for a user
    /// the handler does not know) and the decoy that makes an unknown user look like a known one.
    /// `None` (the default): this handler has no users, and a HELLO asking to log in is refused.
    fn credentials(&self, user: &str) -> Option<(Option<Verifier>, Decoy)> {
        let _ = user;
        None
    }

    /// Called for a failed login from `peer` as `user`, the address's `failures`th, when it is
    /// to be logged (the 1st, 2nd, 4th, 8th, …: see `login.rs`). Default: does nothing.
    fn login_failed(&self, peer: &str, user: &str, failures: u64, error: &str) {
        let _ = (peer, user, failures, error);
    }

    /// Capability bits (above the low 16) to announce in the WELCOME.
    fn capabilities(&self) -> Capabilities {
        Capabilities(0)
    }

    /// Runs one request. Partial replies go out through `reply` as they are made; the returned
    /// value is the final reply (or an error reply). Requests of one session run concurrently.
    fn handle(
        &self,
        session: &Self::Session,
        request: Request,
        reply: &Replier,
    ) -> impl Future<Output = Result<Bytes, Fault>> + Send;

    /// Called once when the connection has ended and its last request has finished.
    fn closed(&self, session: &Self::Session) {
        let _ = session;
    }

    /// Called once, right after [`Handler::open`] accepted the connection and before its first
    /// request is handled, with the handle that sends NOTICEs to this client (the WELCOME is
    /// already queued, so a notice sent from here follows it). Default: does nothing.
    fn attach(&self, session: &Self::Session, notifier: Notifier) {
        let _ = (session, notifier);
    }
}

/// Sends NOTICE frames to one client (cloneable, Send + Sync).
///
/// Notices share the connection's writer queue with its replies, so they reach the client in the
/// order they were queued relative to replies. `Ok` from [`Notifier::notice`] means queued, not
/// delivered: a connection that breaks afterwards loses it.
#[derive(Clone)]
pub struct Notifier {
    /// The connection's outgoing channel, held weakly so that a notifier kept after the
    /// connection's end does not keep its writer (and socket) alive.
    tx: mpsc::WeakUnboundedSender<Outgoing>,
    /// Cleared when the connection stops serving (see the module docs' state diagram).
    serving: Arc<AtomicBool>,
    body_max: u32,
    /// Ends the connection at the handler's word ([`Notifier::close`]).
    closer: Arc<Closer>,
}

/// The handler's request to end a connection: the reason, and a wake-up for its reader.
#[derive(Debug, Default)]
struct Closer {
    reason: std::sync::Mutex<Option<Fault>>,
    wake: Notify,
}

impl Closer {
    /// The reason, once the handler has asked to close.
    fn reason(&self) -> Option<Fault> {
        self.reason.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl std::fmt::Debug for Notifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notifier")
            .field("closed", &self.is_closed())
            .field("body_max", &self.body_max)
            .finish()
    }
}

impl Notifier {
    /// Queues a NOTICE for the client. Never blocks (it waits neither for the socket nor for a
    /// byte budget). Fails with [`Error::Disconnected`] once the connection's writer is gone or
    /// the connection has stopped serving, and with [`Error::TooLarge`] for a body over the
    /// connection's `body_max`.
    pub fn notice(&self, body: impl Into<Bytes>) -> Result<(), Error> {
        let body = body.into();
        if body.len() > self.body_max as usize {
            return Err(Error::TooLarge {
                len: body.len(),
                max: self.body_max,
            });
        }
        if !self.serving.load(Ordering::Acquire) {
            return Err(Error::Disconnected);
        }
        let tx = self.tx.upgrade().ok_or(Error::Disconnected)?;
        let out = Outgoing::new(Kind::NOTICE, Flags::NONE, RequestId::CONNECTION, body, None);
        tx.send(out).map_err(|_| Error::Disconnected)
    }

    /// Ends the connection from the server's side: no request of it is read any more, the
    /// client gets a GOODBYE with `fault`, its requests in flight finish, and the handler's
    /// [`Handler::closed`] runs as for any end (a server ends a client that does not answer
    /// its callbacks this way). Does nothing once the connection has ended.
    pub fn close(&self, fault: Fault) {
        let mut reason = self.closer.reason.lock().unwrap_or_else(|e| e.into_inner());
        if reason.is_none() {
            *reason = Some(fault);
            self.closer.wake.notify_one();
        }
    }

    /// Whether the connection has ended (a notice would not arrive): it stopped serving, or its
    /// writer is gone.
    pub fn is_closed(&self) -> bool {
        !self.serving.load(Ordering::Acquire) || self.tx.upgrade().is_none_or(|tx| tx.is_closed())
    }
}

/// An encoded frame queued for the writer, holding its share of the reply budget.
struct Outgoing {
    header: [u8; HEADER_SIZE],
    body: Bytes,
    _permit: Option<Permit>,
}

impl Outgoing {
    fn new(kind: Kind, flags: Flags, id: RequestId, body: Bytes, permit: Option<Permit>) -> Outgoing {
        Outgoing {
            header: frame::encode_header(kind, flags, id, &body),
            body,
            _permit: permit,
        }
    }

    fn message(m: &Message) -> Outgoing {
        let (kind, flags, id, body) = m.to_parts();
        Outgoing::new(kind, flags, id, body, None)
    }
}

/// The handle a [`Handler`] sends partial replies through.
pub struct Replier {
    kind: Kind,
    id: RequestId,
    tx: mpsc::UnboundedSender<Outgoing>,
    reply_bytes: Budget,
    body_max: u32,
}

impl Replier {
    /// The request's kind.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// The request's id.
    pub fn id(&self) -> RequestId {
        self.id
    }

    /// Sends one partial reply (PRIMA's `Reply_Part_Of_Task`). Waits while the connection's
    /// reply budget is spent (a slow client slows its stream down). Fails with
    /// [`Error::Disconnected`] once the client is gone, so a handler can stop producing.
    pub async fn part(&self, body: impl Into<Bytes>) -> Result<(), Error> {
        let body = body.into();
        if body.len() > self.body_max as usize {
            return Err(Error::TooLarge {
                len: body.len(),
                max: self.body_max,
            });
        }
        let permit = self.reply_bytes.acquire(HEADER_SIZE + body.len()).await;
        let out = Outgoing::new(self.kind, Flags::REPLY.with(Flags::MORE), self.id, body, permit);
        self.tx.send(out).map_err(|_| Error::Disconnected)
    }
}

/// Sends an INTERNAL error reply if a request task ends without its final reply (the handler
/// panicked or the task was cancelled), so no client call waits forever.
struct Unanswered {
    kind: Kind,
    id: RequestId,
    tx: Option<mpsc::UnboundedSender<Outgoing>>,
}

impl Drop for Unanswered {
    fn drop(&mut self) {
        if let Some(tx) = self.tx.take() {
            let fault = Fault::new(
                ErrorCode::INTERNAL,
                "the request failed on the server without an answer",
            );
            let _ = tx.send(Outgoing::new(
                self.kind,
                Flags::REPLY.with(Flags::ERROR),
                self.id,
                fault.encode().into(),
                None,
            ));
        }
    }
}

/// Frames up to this size (header included) are not counted against the byte budgets: a
/// connection holds at most `in_flight_max` of them at once anyway, and skipping the budget saves
/// two atomic operations and a lock per request. So the bound per connection is the budget plus
/// `in_flight_max` × this.
const SMALL_FRAME: usize = 4096;

/// A byte budget: the connection's and the whole server's, taken together.
#[derive(Clone)]
struct Budget {
    connection: Arc<Semaphore>,
    server: Arc<Semaphore>,
    /// Counts the frames waiting for bytes of this budget now
    /// ([`ServerStats`]).
    waiting: Arc<AtomicUsize>,
}

/// Bytes held in a [`Budget`]; dropping it gives them back to both.
struct Permit {
    _connection: OwnedSemaphorePermit,
    _server: OwnedSemaphorePermit,
}

impl Permit {
    /// Adds `other`'s bytes to this permit (both from the same budget).
    fn merge(&mut self, other: Permit) {
        self._connection.merge(other._connection);
        self._server.merge(other._server);
    }
}

impl Budget {
    /// Takes `bytes` (nothing for a small frame), the connection's share first and then the
    /// server's, always in that order; `None` if a budget was closed.
    async fn acquire(&self, bytes: usize) -> Option<Permit> {
        if bytes <= SMALL_FRAME {
            return None;
        }
        self.acquire_exact(bytes).await
    }

    /// Takes exactly `bytes` (at least one), as [`Budget::acquire`] does.
    async fn acquire_exact(&self, bytes: usize) -> Option<Permit> {
        let n = u32::try_from(bytes).unwrap_or(u32::MAX);
        let connection = self.take(&self.connection, n).await?;
        let server = self.take(&self.server, n).await?;
        Some(Permit {
            _connection: connection,
            _server: server,
        })
    }

    /// `n` permits of `semaphore`, counted in `waiting` while they must be
    /// waited for.
    async fn take(&self, semaphore: &Arc<Semaphore>, n: u32) -> Option<OwnedSemaphorePermit> {
        match semaphore.clone().try_acquire_many_owned(n) {
            Ok(p) => Some(p),
            Err(TryAcquireError::Closed) => None,
            Err(TryAcquireError::NoPermits) => {
                self.waiting.fetch_add(1, Ordering::SeqCst);
                let p = semaphore.clone().acquire_many_owned(n).await.ok();
                self.waiting.fetch_sub(1, Ordering::SeqCst);
                p
            }
        }
    }
}

/// Counters of a running server ([`run_counted`]): what it is doing now,
/// for operators and for tests that observe an order or a count instead
/// of waiting for time to pass.
#[derive(Debug, Default)]
pub struct ServerStats {
    /// Connections holding one of the server's [`Limits::connections_max`]
    /// slots (accepted and not closed yet, in their handshake or served).
    pub connections: AtomicUsize,
    /// Request frames waiting for bytes of their connection's or the
    /// server's request budget ([`Limits::request_bytes_max`],
    /// [`Limits::server_request_bytes_max`]): back-pressure, not an error.
    pub requests_waiting_for_bytes: Arc<AtomicUsize>,
    /// Replies waiting for bytes of the reply budgets.
    pub replies_waiting_for_bytes: Arc<AtomicUsize>,
}

/// A semaphore of `bytes` permits (tokio's limit is far above any sane budget).
fn byte_semaphore(bytes: u64) -> Arc<Semaphore> {
    Arc::new(Semaphore::new(
        usize::try_from(bytes).unwrap_or(usize::MAX).min(Semaphore::MAX_PERMITS),
    ))
}

/// The requests of one connection now running, with a wake-up for the reader waiting for a free
/// slot (at the limit) or for the last one to finish (draining). Cheaper than a semaphore: the
/// common path is one atomic add and one atomic subtract.
struct InFlight {
    count: AtomicU32,
    max: u32,
    /// Whether the reader is waiting on `changed`.
    waiting: AtomicBool,
    changed: Notify,
}

impl InFlight {
    fn new(max: u32) -> InFlight {
        InFlight {
            count: AtomicU32::new(0),
            max,
            waiting: AtomicBool::new(false),
            changed: Notify::new(),
        }
    }

    /// Waits until `ready(count)` holds.
    async fn wait_until(&self, ready: impl Fn(u32) -> bool) {
        while !ready(self.count.load(Ordering::Acquire)) {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            self.waiting.store(true, Ordering::SeqCst);
            if ready(self.count.load(Ordering::SeqCst)) {
                break;
            }
            notified.await;
        }
        self.waiting.store(false, Ordering::SeqCst);
    }

    /// Takes a slot, waiting while all are taken (only the reader calls this).
    async fn start(self: &Arc<Self>) -> Running {
        let max = self.max;
        self.wait_until(|n| n < max).await;
        self.count.fetch_add(1, Ordering::AcqRel);
        Running(self.clone())
    }

    /// Waits until no request is running.
    async fn drained(&self) {
        self.wait_until(|n| n == 0).await;
    }
}

/// A running request's slot; given back when dropped.
struct Running(Arc<InFlight>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.count.fetch_sub(1, Ordering::SeqCst);
        if self.0.waiting.load(Ordering::SeqCst) {
            self.0.changed.notify_waiters();
        }
    }
}

/// What [`run`] shares with its connections.
struct Shared<H> {
    handler: Arc<H>,
    limits: Limits,
    sessions: AtomicU64,
    /// The server-wide request and reply byte budgets, shared by every connection.
    request_bytes: Arc<Semaphore>,
    reply_bytes: Arc<Semaphore>,
    /// Failed logins per address.
    throttle: Throttle,
    /// The server's counters.
    stats: Arc<ServerStats>,
    /// Connections in their handshake, per address.
    handshaking: Arc<std::sync::Mutex<HashMap<String, usize>>>,
}

/// A connection's place among its address's handshakes, given back when dropped.
struct HandshakeSlot {
    table: Arc<std::sync::Mutex<HashMap<String, usize>>>,
    address: String,
}

impl HandshakeSlot {
    /// A place for `address`, if it has fewer than `max` handshakes running.
    fn take(table: &Arc<std::sync::Mutex<HashMap<String, usize>>>, address: &str, max: usize) -> Option<HandshakeSlot> {
        let mut t = table.lock().unwrap_or_else(|e| e.into_inner());
        let n = t.entry(address.to_string()).or_insert(0);
        if *n >= max.max(1) {
            return None;
        }
        *n += 1;
        Some(HandshakeSlot {
            table: table.clone(),
            address: address.to_string(),
        })
    }
}

impl Drop for HandshakeSlot {
    fn drop(&mut self) {
        let mut t = self.table.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = t.get_mut(&self.address) {
            *n -= 1;
            if *n == 0 {
                t.remove(&self.address);
            }
        }
    }
}

/// Serves `listener` with `handler` until `shutdown` completes, then stops accepting, lets each
/// connection finish its in-flight requests (within [`Limits::shutdown_grace`]), says GOODBYE,
/// and returns when every connection has closed. Must run inside a tokio runtime (multi-threaded
/// for requests to run in parallel). A listener with TLS ([`Listener::with_tls`]) is served the
/// same way, each connection's TLS handshake running in its own task first.
pub async fn run<H: Handler>(listener: Listener, shutdown: impl Future<Output = ()>, handler: Arc<H>, limits: Limits) {
    run_counted(listener, shutdown, handler, limits, Arc::default()).await;
}

/// [`run`], keeping `stats` current as it goes.
pub async fn run_counted<H: Handler>(
    listener: Listener,
    shutdown: impl Future<Output = ()>,
    handler: Arc<H>,
    limits: Limits,
    stats: Arc<ServerStats>,
) {
    let limits = limits.validated();
    let shared = Arc::new(Shared {
        handler,
        request_bytes: byte_semaphore(limits.server_request_bytes_max),
        reply_bytes: byte_semaphore(limits.server_reply_bytes_max),
        throttle: Throttle::new(limits.login_failures_burst, limits.login_failure_refill),
        handshaking: Arc::default(),
        limits,
        sessions: AtomicU64::new(1),
        stats,
    });
    let (stop_tx, stop_rx) = watch::channel(false);
    let connections = Arc::new(Semaphore::new(shared.limits.connections_max));
    // Refusing is cheap but not free: past this many refusals at once, extra connections are
    // simply closed.
    let refusals = Arc::new(Semaphore::new(64));
    let mut tasks = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            biased;
            () = &mut shutdown => break,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok(incoming) => {
                    let address = login::address_of(incoming.peer()).to_string();
                    let slot = HandshakeSlot::take(&shared.handshaking, &address, shared.limits.handshakes_per_address_max);
                    match (slot, connections.clone().try_acquire_owned()) {
                        (Some(slot), Ok(permit)) => {
                            let shared = shared.clone();
                            let stop = stop_rx.clone();
                            shared.stats.connections.fetch_add(1, Ordering::SeqCst);
                            tasks.spawn(async move {
                                connection::run(incoming, shared.clone(), stop, slot).await;
                                shared.stats.connections.fetch_sub(1, Ordering::SeqCst);
                                drop(permit);
                            });
                        }
                        (slot, _) => {
                            let fault = if slot.is_none() {
                                Fault::new(
                                    ErrorCode::TOO_MANY_CONNECTIONS,
                                    "too many connections from this address are in their handshake",
                                )
                            } else {
                                Fault::new(ErrorCode::TOO_MANY_CONNECTIONS, "the server is at its connection limit")
                            };
                            if let Ok(permit) = refusals.clone().try_acquire_owned() {
                                let within = shared.limits.handshake_timeout.min(REFUSAL_TIME);
                                tasks.spawn(async move {
                                    refuse_busy(incoming, within, fault).await;
                                    drop(permit);
                                });
                            }
                        }
                    }
                }
                // Out of file descriptors and the like: pause rather than spin.
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            },
        }
    }
    let _ = stop_tx.send(true);
    drop(listener);
    while tasks.join_next().await.is_some() {}
}

/// The most time spent on refusing one connection: its TLS handshake (if any), and then
/// writing the REFUSAL.
const REFUSAL_TIME: Duration = Duration::from_secs(1);

/// Answers a connection over the limit with a REFUSAL and closes it (after its TLS handshake,
/// which must end `within`, on a TLS listener: the client reads the refusal through TLS).
async fn refuse_busy(incoming: Incoming, within: Duration, fault: Fault) {
    let Some(stream) = secure(incoming, tokio::time::Instant::now() + within).await else {
        return;
    };
    refuse(stream, fault).await;
}

/// Sends a REFUSAL on a connection nothing else has been sent on, and closes it.
async fn refuse(stream: Stream, fault: Fault) {
    let (mut r, mut w) = stream.into_split();
    let mut bytes = Vec::new();
    Message::Refusal(fault).encode(&mut bytes);
    let _ = tokio::time::timeout(REFUSAL_TIME, async {
        w.write_all(&bytes).await?;
        w.shutdown().await
    })
    .await;
    linger(&mut r).await;
}

/// The connection's stream ready for frames: on a TLS listener, after its TLS handshake, which
/// must end by `deadline`. `None`: the connection is over (the handshake failed or timed out; the
/// failure is this connection's alone). A client that speaks the protocol without TLS to a TLS
/// listener (its first byte is the frame magic's, which no TLS record starts with) is told so in
/// a plain REFUSAL rather than left with a TLS alert it cannot read.
async fn secure(incoming: Incoming, deadline: tokio::time::Instant) -> Option<Stream> {
    if !incoming.is_tls() {
        return Some(incoming.stream);
    }
    if let Stream::Tcp(tcp) = &incoming.stream {
        let mut first = [0u8; 1];
        match tokio::time::timeout_at(deadline, tcp.peek(&mut first)).await {
            Ok(Ok(1)) if first[0] == frame::MAGIC.to_le_bytes()[0] => {
                refuse(
                    incoming.stream,
                    Fault::new(
                        ErrorCode::PROTOCOL,
                        "this server accepts only TLS connections on this address; connect with TLS",
                    ),
                )
                .await;
                return None;
            }
            Ok(Ok(1..)) => {}
            // The peer left, failed, or sent nothing in time.
            Ok(Ok(0) | Err(_)) | Err(_) => return None,
        }
    }
    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
    incoming.establish(left).await.ok()
}

/// Reads and discards what the peer still sends, for a little while, after we closed our side:
/// closing a socket with unread data makes the kernel send a reset, which can destroy the reason
/// we just sent before the peer reads it.
async fn linger(r: &mut ReadHalf) {
    let mut sink = [0u8; 8192];
    let mut left = 1usize << 20;
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        while left > 0 {
            match r.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    })
    .await;
}

/// Writes queued frames, coalescing everything already queued into one write.
async fn write_loop(mut w: WriteHalf, mut rx: mpsc::UnboundedReceiver<Outgoing>) {
    const COALESCE_MAX: usize = 64 << 10;
    let mut buf: Vec<u8> = Vec::with_capacity(COALESCE_MAX);
    let mut held: Vec<Outgoing> = Vec::new();
    while let Some(first) = rx.recv().await {
        let mut next = Some(first);
        while let Some(out) = next {
            buf.extend_from_slice(&out.header);
            buf.extend_from_slice(&out.body);
            held.push(out);
            next = if buf.len() < COALESCE_MAX {
                rx.try_recv().ok()
            } else {
                None
            };
        }
        // The flush matters over TLS only (the last records of a batch may still sit inside the
        // TLS session, and nothing else would send them before the next batch); on a plain
        // socket it returns at once.
        if w.write_all(&buf).await.is_err() || w.flush().await.is_err() {
            // The client is gone: dropping the receiver makes further sends fail, which tells
            // streaming handlers to stop.
            return;
        }
        buf.clear();
        if buf.capacity() > 4 * COALESCE_MAX {
            buf.shrink_to(COALESCE_MAX);
        }
        // Frames written: their budget goes back.
        held.clear();
    }
    let _ = w.shutdown().await;
}

mod connection;
