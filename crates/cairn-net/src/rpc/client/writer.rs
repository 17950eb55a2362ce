//! The writing side: [`Client::invoke`] and [`Client::invoke_deferred`] give a request its id and
//! its slot and queue its frame, written at once or with the next flush; a write that stalls
//! reads replies before it tries again, and a write that fails ends the connection (with the
//! server's GOODBYE as the reason when it sent one).

use std::io;
use std::sync::atomic::Ordering;

use bytes::Bytes;

use super::{lock, Call, Client, Inner, Slot, Writer, QUEUED_MAX};
use crate::error::{Error, Result};
use crate::frame::{self, Flags, Kind, RequestId};

impl Inner {
    /// Writes the deferred requests.
    pub(super) fn flush(&self) -> Result<()> {
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

impl Client {
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
}
