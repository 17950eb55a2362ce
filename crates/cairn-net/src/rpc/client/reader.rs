//! The reading side, which the callers take in turns (the leader/follower pattern of the module
//! docs): a caller that needs a reply reads the socket itself or waits for the reader; each
//! round's frames go to their calls' slots and notices to the notice queue, and a failure closes
//! the connection and shuts its socket down.

use std::io;
use std::sync::atomic::Ordering;
use std::sync::MutexGuard;

use super::notices::queue_notice;
#[cfg(doc)]
use super::READ_POLL;
use super::{lock, Event, Inner, ReadSide, Round, State};
use crate::error::{Error, Result};
use crate::frame::Frame;
use crate::message::Message;

impl Inner {
    /// Takes the next event of call `id`, reading the socket (as the leader) or waiting for
    /// the reader (as a follower) until one is there.
    pub(super) fn next_event(&self, id: u64) -> Result<Event> {
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
    pub(super) fn read_round<'a>(&'a self, st: MutexGuard<'a, State>, mut side: ReadSide) -> MutexGuard<'a, State> {
        drop(st);
        let round = self.read_frames(&mut side, true);
        self.hand_out(lock(&self.state), side, round)
    }

    /// Reads the socket once (blocking up to [`READ_POLL`] when `wait`, not at all otherwise) and
    /// decodes every whole frame. Runs without the state's lock, holding the reading side.
    pub(super) fn read_frames(&self, side: &mut ReadSide, wait: bool) -> Round {
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
    pub(super) fn hand_out<'a>(
        &'a self,
        mut st: MutexGuard<'a, State>,
        side: ReadSide,
        round: Round,
    ) -> MutexGuard<'a, State> {
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
