//! The server's notices: the bounded queue readers fill ([`NOTICES_MAX`], [`NOTICE_BYTES_MAX`]),
//! and [`Client::next_notice`], which takes them and, while nobody reads, watches the socket with
//! poll(2) without taking the reading side (the module docs of [`client`](super) say why).

use std::time::{Duration, Instant};

use bytes::Bytes;

use super::{lock, Client, Inner, State, NOTICES_MAX, NOTICE_BYTES_MAX, NOTICE_POLL};
use crate::error::{Error, Result};

impl Inner {
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
}

/// Queues a notice, or fails (and marks the state flooded) past the queue's bounds.
pub(super) fn queue_notice(st: &mut State, body: Bytes) -> Result<()> {
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

impl Client {
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
}
