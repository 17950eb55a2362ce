//! A request in flight: a [`Call`] takes its reply's [`Part`]s from its slot one by one (waiting
//! for them as a reader or a follower), waits for the final one, or, dropped, abandons the reply.

use std::sync::Arc;

use bytes::Bytes;

use super::{lock, Event, Inner};
use crate::error::{Error, Result};
use crate::frame::RequestId;

/// One piece of a reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part {
    /// The bytes.
    pub body: Bytes,
    /// Whether this is the final reply (no more parts follow).
    pub last: bool,
}

/// A request in flight: collect its reply with [`Call::next_part`] (parts, for a streamed reply) or
/// [`Call::wait`]. Dropping it abandons the reply.
pub struct Call {
    pub(super) inner: Arc<Inner>,
    pub(super) id: RequestId,
    pub(super) done: bool,
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
