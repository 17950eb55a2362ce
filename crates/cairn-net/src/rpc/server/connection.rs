//! One connection, from accept to close: a [`Connection`] reads the
//! handshake, then serves requests until the client leaves, the server
//! stops or the client breaks the protocol, then drains and closes (the
//! module docs of [`server`](super) have the state diagram). The
//! connection's parts (its reading half, frame reader, outgoing queue, the
//! server's shared state, its shutdown watch) are the struct's fields, so
//! each step is a method of a few lines rather than a function of many
//! arguments.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Poll, RawWaker, RawWakerVTable, Waker};
use std::time::Duration;

use bytes::Bytes;
use tokio::io::AsyncReadExt;
use tokio::sync::{mpsc, watch};

use super::login;
use super::{
    byte_semaphore, linger, secure, write_loop, Budget, Closer, Handler, HandshakeSlot, InFlight, Notifier, Outgoing,
    Permit, Replier, Request, Running, Shared, Unanswered, SMALL_FRAME,
};
use crate::frame::{self, Flags, Frame, FrameDecoder, FrameError, Kind, RequestId, HEADER_SIZE};
use crate::message::{Capabilities, ErrorCode, Fault, Hello, Message, MessageError, Welcome};
use crate::scram::ServerStart;
use crate::transport::{Incoming, ReadHalf};

/// Why the serving loop ended.
enum End {
    /// The client closed (EOF or GOODBYE): no reason to send.
    Client,
    /// We are closing with a reason (bad input or shutdown), already queued.
    Server {
        /// Whether to drain the socket before closing (bad input).
        linger: bool,
    },
}

/// A connection's parts while it is read.
struct Connection<H: Handler> {
    r: ReadHalf,
    frames: FrameReader,
    tx: mpsc::UnboundedSender<Outgoing>,
    shared: Arc<Shared<H>>,
    peer: String,
    stop: watch::Receiver<bool>,
    /// Whether to drain the socket before closing (we closed it for bad input).
    linger_after: bool,
}

/// What a connection serves once its handshake is done.
struct Serving<H: Handler> {
    session: Arc<H::Session>,
    in_flight: Arc<InFlight>,
    reply_bytes: Budget,
    closer: Arc<Closer>,
}

/// One connection, from accept to close.
pub(super) async fn run<H: Handler>(
    incoming: Incoming,
    shared: Arc<Shared<H>>,
    mut stop: watch::Receiver<bool>,
    slot: HandshakeSlot,
) {
    let limits = &shared.limits;
    // One deadline for the TLS handshake (if any) and the HELLO together.
    let deadline = tokio::time::Instant::now() + limits.handshake_timeout;
    let peer = incoming.peer().to_string();
    let stream = tokio::select! {
        biased;
        _ = stop.wait_for(|s| *s) => return,
        stream = secure(incoming, deadline) => match stream {
            Some(stream) => stream,
            None => return,
        },
    };
    let (r, w) = stream.into_split();
    let (tx, rx) = mpsc::unbounded_channel();
    let writer = tokio::spawn(write_loop(w, rx));
    let frames = FrameReader {
        dec: FrameDecoder::new(limits.handshake_body_max),
        frame_timeout: limits.frame_timeout,
        request_bytes: Budget {
            connection: byte_semaphore(u64::from(limits.request_bytes_max)),
            server: shared.request_bytes.clone(),
            waiting: shared.stats.requests_waiting_for_bytes.clone(),
        },
        pending: None,
        charged: 0,
        started: None,
    };
    let mut conn = Connection {
        r,
        frames,
        tx,
        shared,
        peer,
        stop,
        linger_after: false,
    };
    if let Some(session) = conn.handshake(deadline, slot).await {
        conn.serve_session(session).await;
    }
    let Connection {
        mut r,
        tx,
        linger_after,
        ..
    } = conn;
    drop(tx);
    // The writer ends once every sender is gone and the queue is empty.
    let _ = writer.await;
    if linger_after {
        linger(&mut r).await;
    }
}

impl<H: Handler> Connection<H> {
    /// Queues a message for the client.
    fn send(&self, m: &Message) {
        let _ = self.tx.send(Outgoing::message(m));
    }

    /// Queues a REFUSAL (the handshake failed).
    fn refuse(&self, fault: Fault) {
        self.send(&Message::Refusal(fault));
    }

    /// Queues a GOODBYE for `request_id` with `fault`: we end the connection
    /// for bad input (and linger).
    fn goodbye(&self, request_id: RequestId, fault: Fault) -> End {
        self.send(&Message::Goodbye { request_id, fault });
        End::Server { linger: true }
    }

    /// Reads HELLO (and, for a login, answers CHALLENGE and reads AUTH), then answers WELCOME
    /// or REFUSAL. `None`: the connection is over. The whole exchange must end by `deadline`
    /// ([`Limits::handshake_timeout`](super::Limits::handshake_timeout) after the accept, the
    /// TLS handshake included).
    async fn handshake(&mut self, deadline: tokio::time::Instant, slot: HandshakeSlot) -> Option<H::Session> {
        let hello = match self.handshake_message(deadline, "HELLO").await {
            Ok(Message::Hello(hello)) => hello,
            Ok(_) => {
                self.refuse(Fault::new(ErrorCode::PROTOCOL, "the first message must be HELLO"));
                self.linger_after = true;
                return None;
            }
            Err(None) => return None,
            Err(Some(fault)) => {
                self.linger_after = fault.code != ErrorCode::SHUTTING_DOWN;
                self.refuse(fault);
                return None;
            }
        };
        let (user, server_final) = if hello.auth.is_empty() {
            (None, Bytes::new())
        } else {
            match self.log_in(&hello, deadline).await {
                Ok((user, server_final)) => (Some(user), server_final),
                Err(None) => return None,
                Err(Some(fault)) => {
                    self.refuse(fault);
                    self.linger_after = true;
                    return None;
                }
            }
        };
        match self.shared.handler.open(&hello, &self.peer, user.as_deref()) {
            Ok(session) => {
                // Given back before the WELCOME is queued, so a client that has read its
                // WELCOME finds its address's place free.
                drop(slot);
                self.send(&Message::Welcome(self.welcome(server_final)));
                self.frames.dec.set_body_max(self.shared.limits.body_max);
                Some(session)
            }
            Err(fault) => {
                self.refuse(fault);
                None
            }
        }
    }

    /// The WELCOME of a session opened (`auth`: the login's server-final message, if any).
    fn welcome(&self, auth: Bytes) -> Welcome {
        let limits = &self.shared.limits;
        Welcome {
            version: frame::PROTOCOL_VERSION as u16,
            capabilities: Capabilities(Capabilities::NET.0 | (self.shared.handler.capabilities().0 & !0xFFFF)),
            body_max: limits.body_max,
            in_flight_max: limits.in_flight_max,
            session: self.shared.sessions.fetch_add(1, Ordering::Relaxed),
            server_name: concat!("cairn ", env!("CARGO_PKG_VERSION")).to_string(),
            auth,
        }
    }

    /// One message of the handshake, read by `deadline`. `Err(None)`: the peer left (nothing
    /// to say); `Err(Some(fault))`: the refusal to send.
    async fn handshake_message(
        &mut self,
        deadline: tokio::time::Instant,
        what: &str,
    ) -> Result<Message, Option<Fault>> {
        let read = tokio::select! {
            biased;
            _ = self.stop.wait_for(|s| *s) => {
                return Err(Some(Fault::new(ErrorCode::SHUTTING_DOWN, "the server is shutting down")));
            }
            read = tokio::time::timeout_at(deadline, self.frames.read_frame(&mut self.r, false)) => read,
        };
        let frame = match read {
            Err(_elapsed) => {
                return Err(Some(Fault::new(
                    ErrorCode::HANDSHAKE_TIMEOUT,
                    format!("no {what} in time"),
                )))
            }
            Ok(Ok(Some((frame, _)))) => frame,
            Ok(Ok(None)) => return Err(None),
            Ok(Err(e)) => return Err(Some(frame_fault(&e))),
        };
        Message::from_frame(frame).map_err(|e| Some(message_fault(&e)))
    }

    /// The SCRAM exchange of a HELLO that asks to log in (see `login.rs`): the user proved,
    /// and the server-final message for the WELCOME.
    async fn log_in(
        &mut self,
        hello: &Hello,
        deadline: tokio::time::Instant,
    ) -> Result<(String, Bytes), Option<Fault>> {
        let shared = self.shared.clone();
        let address = login::address_of(&self.peer).to_string();
        if !shared.throttle.allows(&address, std::time::Instant::now()) {
            return Err(Some(Fault::new(
                ErrorCode::TOO_MANY_FAILED_LOGINS,
                "too many failed logins from this address; try again later",
            )));
        }
        let start = ServerStart::parse(&hello.auth).map_err(|e| {
            Some(Fault::new(
                ErrorCode::AUTH_FAILED,
                format!("the login message is malformed: {e}"),
            ))
        })?;
        let user = start.user().to_string();
        let Some((verifier, decoy)) = shared.handler.credentials(&user) else {
            return Err(Some(Fault::new(
                ErrorCode::AUTH_FAILED,
                "this server has no users to log in as",
            )));
        };
        let first = start.respond(verifier, &decoy).map_err(|e| {
            Some(Fault::new(
                ErrorCode::INTERNAL,
                format!("starting the login failed: {e}"),
            ))
        })?;
        self.send(&Message::Challenge(Bytes::copy_from_slice(first.message())));
        let answer = match self.handshake_message(deadline, "AUTH").await? {
            Message::Auth(answer) => answer,
            _ => return Err(Some(Fault::new(ErrorCode::PROTOCOL, "a CHALLENGE is answered by AUTH"))),
        };
        match first.verify_client_final(&answer) {
            Ok(done) => Ok((user, Bytes::copy_from_slice(done.message()))),
            Err(e) => {
                let n = shared.throttle.failed(&address, std::time::Instant::now());
                if login::logs_failure(n) {
                    shared.handler.login_failed(&self.peer, &user, n, &e.to_string());
                }
                Err(Some(Fault::new(ErrorCode::AUTH_FAILED, "authentication failed")))
            }
        }
    }

    /// Serves an opened session: hands the handler its [`Notifier`] before the first request
    /// is read, serves, then drains (in-flight requests finish within the shutdown grace), says
    /// GOODBYE if the server is the one closing, and tells the handler.
    async fn serve_session(&mut self, session: H::Session) {
        let limits = self.shared.limits.clone();
        let serving = Serving {
            session: Arc::new(session),
            in_flight: Arc::new(InFlight::new(limits.in_flight_max)),
            reply_bytes: Budget {
                connection: byte_semaphore(u64::from(limits.reply_bytes_max)),
                server: self.shared.reply_bytes.clone(),
                waiting: self.shared.stats.replies_waiting_for_bytes.clone(),
            },
            closer: Arc::new(Closer::default()),
        };
        let open = Arc::new(AtomicBool::new(true));
        self.shared.handler.attach(
            &serving.session,
            Notifier {
                tx: self.tx.downgrade(),
                serving: open.clone(),
                body_max: limits.body_max,
                closer: serving.closer.clone(),
            },
        );
        let end = self.serve(&serving).await;
        // The client can no longer answer a notice: its requests are not read any more.
        open.store(false, Ordering::Release);
        // Draining: every request already started finishes and queues its reply.
        let _ = tokio::time::timeout(limits.shutdown_grace, serving.in_flight.drained()).await;
        let shutting_down = match end {
            End::Client => false,
            End::Server { linger } => {
                self.linger_after = linger;
                !linger
            }
        };
        if shutting_down {
            self.send(&Message::Goodbye {
                request_id: RequestId::CONNECTION,
                fault: Fault::new(ErrorCode::SHUTTING_DOWN, "the server is shutting down"),
            });
        }
        self.shared.handler.closed(&serving.session);
    }

    /// The serving loop: read requests and start them until the client leaves, the server
    /// stops, or the client breaks the protocol.
    async fn serve(&mut self, s: &Serving<H>) -> End {
        loop {
            if let Some(fault) = s.closer.reason() {
                return self.goodbye(RequestId::CONNECTION, fault);
            }
            // A frame already buffered is taken without arming the shutdown watch (the common
            // case when requests come in batches); the check happens whenever the reader must
            // wait.
            let read = match self.frames.dec.decode() {
                Ok(Some(frame)) => Ok(Some(self.frames.with_budget(frame, true).await)),
                Ok(None) => tokio::select! {
                    biased;
                    _ = self.stop.wait_for(|s| *s) => return End::Server { linger: false },
                    _ = s.closer.wake.notified() => continue,
                    read = self.frames.read_frame(&mut self.r, true) => read,
                },
                Err(e) => Err(e),
            };
            let end = match read {
                Ok(Some((frame, permit))) => self.dispatch(s, frame, permit).await,
                Ok(None) => Some(End::Client),
                Err(e) => Some(self.bad_frame(&e)),
            };
            if let Some(end) = end {
                return end;
            }
        }
    }

    /// Answers or starts one message of a serving connection; `Some` ends the connection.
    async fn dispatch(&self, s: &Serving<H>, frame: Frame, permit: Option<Permit>) -> Option<End> {
        let id = frame.header.request_id;
        match Message::from_frame(frame) {
            Ok(Message::Request {
                kind: Kind::PING, id, ..
            }) => {
                let _ = self
                    .tx
                    .send(Outgoing::new(Kind::PING, Flags::REPLY, id, Bytes::new(), None));
                None
            }
            Ok(Message::Request { kind, id, body }) => {
                // Back-pressure: at the limit, stop reading until a request finishes.
                let running = s.in_flight.start().await;
                let replier = Replier {
                    kind,
                    id,
                    tx: self.tx.clone(),
                    reply_bytes: s.reply_bytes.clone(),
                    body_max: self.shared.limits.body_max,
                };
                let request = Request { kind, id, body };
                let task = answer(
                    self.shared.clone(),
                    s.session.clone(),
                    request,
                    replier,
                    permit,
                    running,
                );
                run_eagerly(Box::pin(task));
                None
            }
            Ok(Message::Goodbye { .. }) => Some(End::Client),
            Ok(other) => {
                let what = match other {
                    Message::Hello(_) => "HELLO after the handshake",
                    _ => "a server-to-client message",
                };
                Some(self.goodbye(id, Fault::new(ErrorCode::PROTOCOL, format!("unexpected {what}"))))
            }
            Err(e) => Some(self.bad_message(id, e)),
        }
    }

    /// Ends the connection for a frame that does not decode: an error reply to its request if
    /// its header was verified (so its id can be trusted), then GOODBYE.
    fn bad_frame(&self, e: &FrameError) -> End {
        let fault = frame_fault(e);
        if let Some((kind, id)) = e.request() {
            if kind.is_service() || kind == Kind::PING {
                self.send(&Message::ErrorReply {
                    kind,
                    id,
                    fault: fault.clone(),
                });
            }
            return self.goodbye(id, fault);
        }
        self.goodbye(RequestId::CONNECTION, fault)
    }

    /// Ends the connection for a message that is not one (an unknown kind, a bad body): an
    /// error reply to a request of an unknown kind, then GOODBYE.
    fn bad_message(&self, id: RequestId, e: MessageError) -> End {
        let fault = message_fault(&e);
        if let MessageError::UnknownKind {
            kind,
            flags,
            request_id,
        } = e
        {
            if flags == 0 && request_id != RequestId::CONNECTION {
                self.send(&Message::ErrorReply {
                    kind,
                    id: request_id,
                    fault: fault.clone(),
                });
            }
        }
        self.goodbye(id, fault)
    }
}

/// Runs one request through the handler and queues its final reply (an error reply if the
/// handler failed or its reply is over the body limit; INTERNAL if the task ends without one).
async fn answer<H: Handler>(
    shared: Arc<Shared<H>>,
    session: Arc<H::Session>,
    request: Request,
    replier: Replier,
    permit: Option<Permit>,
    running: Running,
) {
    let (kind, id) = (request.kind, request.id);
    let guard = Unanswered {
        kind,
        id,
        tx: Some(replier.tx.clone()),
    };
    let result = shared.handler.handle(&session, request, &replier).await;
    drop(permit);
    let (flags, body) = match result {
        Ok(body) if body.len() <= shared.limits.body_max as usize => (Flags::REPLY, body),
        Ok(body) => {
            let fault = Fault::new(
                ErrorCode::TOO_LARGE,
                format!(
                    "reply of {} bytes exceeds the limit of {}",
                    body.len(),
                    shared.limits.body_max
                ),
            );
            (Flags::REPLY.with(Flags::ERROR), fault.encode().into())
        }
        Err(fault) => (Flags::REPLY.with(Flags::ERROR), fault.encode().into()),
    };
    let permit = replier.reply_bytes.acquire(HEADER_SIZE + body.len()).await;
    let mut guard = guard;
    guard.tx = None;
    let _ = replier.tx.send(Outgoing::new(kind, flags, id, body, permit));
    drop(running);
}

/// Polls a request's task once right here, in the reader, and spawns it only if it has to wait.
///
/// A request that completes without waiting (the common, cheap case) then costs no task switch,
/// and the replies of a batch of such requests read together reach the writer together and leave
/// in one write. Polling first with a waker that does nothing is sound because a future must
/// arrange to wake the waker of its *latest* poll, and the spawned task polls it again at once.
/// A panic in the handler is contained here; the request's `Unanswered` guard has then already
/// queued an INTERNAL error reply.
fn run_eagerly(mut task: Pin<Box<impl Future<Output = ()> + Send + 'static>>) {
    let waker = noop_waker();
    let mut cx = std::task::Context::from_waker(&waker);
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| task.as_mut().poll(&mut cx))) {
        Ok(Poll::Ready(())) | Err(_) => {}
        Ok(Poll::Pending) => {
            tokio::spawn(task);
        }
    }
}

fn noop_waker() -> Waker {
    const VTABLE: RawWakerVTable = RawWakerVTable::new(|_| RAW, |_| {}, |_| {}, |_| {});
    const RAW: RawWaker = RawWaker::new(std::ptr::null(), &VTABLE);
    // SAFETY: every function of the vtable ignores the (null) data pointer and does nothing, so
    // the RawWaker contract (clone returns an equivalent waker; wake/drop release nothing) holds.
    unsafe { Waker::from_raw(RAW) }
}

/// The reading side of a connection: the frame decoder and the request-byte budget.
struct FrameReader {
    dec: FrameDecoder,
    frame_timeout: Duration,
    request_bytes: Budget,
    /// Budget taken for the bytes of the frame now arriving: charged as they arrive (not when
    /// its header announces its length), so a client that announces a large frame and trickles
    /// it holds only what it sent.
    pending: Option<Permit>,
    /// Bytes of the arriving frame that `pending` covers.
    charged: usize,
    /// When the first byte of the arriving frame came: the whole frame must arrive within
    /// `frame_timeout` of it (plus any time the server itself made it wait for budget), however
    /// the client spaces its bytes.
    started: Option<tokio::time::Instant>,
}

impl FrameReader {
    /// Pairs a whole frame with its share of the request budget (taken while its body arrived,
    /// or now).
    async fn with_budget(&mut self, frame: Frame, budget: bool) -> (Frame, Option<Permit>) {
        let size = HEADER_SIZE + frame.body.len();
        let charged = std::mem::take(&mut self.charged);
        let mut permit = self.pending.take();
        if budget && size > SMALL_FRAME && size > charged {
            match (permit.as_mut(), self.request_bytes.acquire_exact(size - charged).await) {
                (Some(p), Some(more)) => p.merge(more),
                (None, more) => permit = more,
                (Some(_), None) => {}
            }
        }
        (frame, permit)
    }

    /// Charges the budget for the bytes of the arriving frame that came since the last charge
    /// (frames up to [`SMALL_FRAME`] are not charged). A wait for budget is the server's doing,
    /// so it moves the frame's deadline back by as long.
    async fn charge_arrived(&mut self) {
        let Some(h) = self.dec.current() else { return };
        let size = HEADER_SIZE + h.body_len as usize;
        let arrived = self.dec.buffered().min(size);
        if size <= SMALL_FRAME || arrived <= self.charged {
            return;
        }
        let before = tokio::time::Instant::now();
        let more = self.request_bytes.acquire_exact(arrived - self.charged).await;
        if let Some(s) = self.started.as_mut() {
            *s += before.elapsed();
        }
        self.charged = arrived;
        match (self.pending.as_mut(), more) {
            (Some(p), Some(more)) => p.merge(more),
            (None, more) => self.pending = more,
            (Some(_), None) => {}
        }
    }

    /// The next whole frame (with its budget when `budget`), `None` at a clean end of stream.
    /// Cancel-safe: the decoder and any budget already taken stay in `self`.
    async fn read_frame(
        &mut self,
        r: &mut ReadHalf,
        budget: bool,
    ) -> Result<Option<(Frame, Option<Permit>)>, FrameError> {
        loop {
            if let Some(frame) = self.dec.decode()? {
                let out = self.with_budget(frame, budget).await;
                // Bytes of the next frame may be here already: its clock runs from now.
                self.started = (self.dec.buffered() > 0).then(tokio::time::Instant::now);
                return Ok(Some(out));
            }
            if budget {
                self.charge_arrived().await;
            }
            self.dec.read_hint();
            let read = if self.dec.buffered() == 0 {
                let read = r.read_buf(self.dec.buffer_mut()).await;
                self.started = Some(tokio::time::Instant::now());
                read
            } else {
                let deadline = *self.started.get_or_insert_with(tokio::time::Instant::now) + self.frame_timeout;
                match tokio::time::timeout_at(deadline, r.read_buf(self.dec.buffer_mut())).await {
                    Ok(read) => read,
                    Err(_stalled) => {
                        return Err(FrameError::Truncated {
                            have: self.dec.buffered(),
                            need: self
                                .dec
                                .current()
                                .map_or(HEADER_SIZE, |h| HEADER_SIZE + h.body_len as usize),
                        })
                    }
                }
            };
            match read {
                Ok(0) => {
                    self.dec.finish()?;
                    return Ok(None);
                }
                Ok(_) => {}
                // A reset or similar: the client is gone; nothing to answer.
                Err(_) => return Ok(None),
            }
        }
    }
}

fn frame_fault(e: &FrameError) -> Fault {
    let code = match e {
        FrameError::UnsupportedVersion { .. } => ErrorCode::UNSUPPORTED_VERSION,
        FrameError::TooLarge { .. } => ErrorCode::TOO_LARGE,
        FrameError::BodyChecksum { .. } => ErrorCode::BAD_CHECKSUM,
        FrameError::Truncated { .. } => ErrorCode::TRUNCATED,
        _ => ErrorCode::BAD_FRAME,
    };
    Fault::new(code, e.to_string())
}

fn message_fault(e: &MessageError) -> Fault {
    let code = match e {
        MessageError::UnknownKind { .. } => ErrorCode::UNKNOWN_KIND,
        _ => ErrorCode::PROTOCOL,
    };
    Fault::new(code, e.to_string())
}
