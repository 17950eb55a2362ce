//! The writer's side of a callback: marking a key so no other client gets
//! a right to it, sending a callback to every other client holding one, and
//! waiting for their answers (see "A callback's states" in the module docs).

use std::sync::{Arc, MutexGuard};
use std::time::{Duration, Instant};

use cairn_net::rights::Callback;
use cairn_storage::lock::{LockOwner, Resource};
use cairn_storage::{ClientId, Error, TxnId};

use super::{lock, right_key, Callbacks, Outstanding, Table};
use crate::SessionState;

/// A writer's mark on a page or object: while it lives no other client
/// gets a right to it (nor, for a page, to its objects). Dropped after the
/// writer's lock request returns.
pub struct WriterMark<'a> {
    callbacks: &'a Callbacks,
    client: ClientId,
    key: Resource,
}

impl Drop for WriterMark<'_> {
    fn drop(&mut self) {
        self.callbacks.unmark(self.client, self.key);
    }
}

impl WriterMark<'_> {
    /// The mark's (writer, key), the mark kept: whoever takes it must call
    /// [`Callbacks::unmark`] once the writer's lock request is over.
    pub fn keep(self) -> (ClientId, Resource) {
        let parts = (self.client, self.key);
        std::mem::forget(self);
        parts
    }
}

impl Callbacks {
    /// Ends a writer's mark on `key` (see [`WriterMark::keep`]).
    pub fn unmark(&self, client: ClientId, key: Resource) {
        let mut t = lock(&self.table);
        if let Some(rights) = t.entries.get_mut(&key) {
            if let Some(i) = rights.writers.iter().position(|c| *c == client) {
                rights.writers.swap_remove(i);
            }
            t.tidy(key);
        }
    }

    /// The writer's mark [`Callbacks::call_back`] would return, if there is
    /// no one to call back: no client but `writer` holds a right to `key`
    /// (nor, with `objects`, to an object of the page `key` names). `None`
    /// otherwise (nothing is changed); the caller then calls back, where it
    /// may wait. Never waits.
    pub fn try_mark(&self, writer: ClientId, key: Resource, objects: bool) -> Option<WriterMark<'_>> {
        let mut t = lock(&self.table);
        if !t.targets(writer, key, objects).is_empty() {
            return None;
        }
        t.entries.entry(key).or_default().writers.push(writer);
        Some(WriterMark {
            callbacks: self,
            client: writer,
            key,
        })
    }

    /// Calls `key` back from every client but `writer` holding a right to
    /// it (and, with `objects`, every object of the page `key` names) and
    /// waits (up to `timeout`) for every answer; see the module docs. The
    /// returned mark keeps other clients from getting a right until the
    /// caller's lock request is over.
    ///
    /// Errors: [`Error::LockTimeout`] if a client did not answer in time;
    /// [`Error::Deadlock`] if granting a reader's lock closed a cycle (the
    /// writer `txn` is the victim).
    #[allow(clippy::too_many_arguments)]
    pub fn call_back<'a>(
        &'a self,
        sessions: &dyn Fn(ClientId) -> Option<Arc<SessionState>>,
        writer: ClientId,
        txn: TxnId,
        key: Resource,
        objects: bool,
        timeout: Duration,
    ) -> Result<WriterMark<'a>, Error> {
        let mut marks = self.call_back_all(sessions, writer, txn, &[key], objects, timeout)?;
        Ok(marks.pop().expect("one mark per key"))
    }

    /// [`Callbacks::call_back`] of every key of `keys` at once: every
    /// callback is sent before any answer is waited for, so a writer about
    /// to lock many pages (a FETCH X of a commit's targets) waits for one
    /// round of answers, not one per page. One mark per key, in order.
    #[allow(clippy::too_many_arguments)]
    pub fn call_back_all<'a>(
        &'a self,
        sessions: &dyn Fn(ClientId) -> Option<Arc<SessionState>>,
        writer: ClientId,
        txn: TxnId,
        keys: &[Resource],
        objects: bool,
        timeout: Duration,
    ) -> Result<Vec<WriterMark<'a>>, Error> {
        let mut t = lock(&self.table);
        let mut marks = Vec::with_capacity(keys.len());
        let mut ids = Vec::new();
        for &key in keys {
            t.entries.entry(key).or_default().writers.push(writer);
            marks.push(WriterMark {
                callbacks: self,
                client: writer,
                key,
            });
            for (k, client, epoch) in t.targets(writer, key, objects) {
                t.next_id += 1;
                let id = t.next_id;
                t.outstanding.insert(
                    id,
                    Outstanding {
                        client,
                        key: k,
                        writer: LockOwner::new(writer, txn),
                        outcome: None,
                    },
                );
                ids.push((id, k, client, epoch));
            }
        }
        drop(t);
        if ids.is_empty() {
            return Ok(marks);
        }
        {
            let mut st = lock(&self.stats);
            st.callbacks_sent += ids.len() as u64;
            st.callback_rounds += 1;
        }
        self.send_notices(sessions, &ids);
        let silent = self.wait_for_answers(&ids, timeout)?;
        if !silent.is_empty() {
            self.end_silent(sessions, &silent);
        }
        Ok(marks)
    }

    /// Sends each callback of `ids` (id, key, client, epoch) to its client;
    /// one whose client is gone is answered at once (its right went with it).
    fn send_notices(
        &self,
        sessions: &dyn Fn(ClientId) -> Option<Arc<SessionState>>,
        ids: &[(u64, Resource, ClientId, u64)],
    ) {
        for &(id, k, client, epoch) in ids {
            let sent = sessions(client).is_some_and(|s| {
                let notice = match (s.object, k, right_key(k)) {
                    // A page session holds no object rights.
                    (false, Resource::Object(_), _) | (_, _, None) => return false,
                    (_, _, Some(key)) => Callback { id, key, epoch }.encode(),
                };
                s.notifier.get().is_some_and(|n| n.notice(notice).is_ok())
            });
            if !sent {
                let mut t = lock(&self.table);
                t.unregister(client, k, Some(epoch));
                if let Some(o) = t.outstanding.get_mut(&id) {
                    o.outcome = Some(Ok(()));
                }
            }
        }
    }

    /// Waits (up to `timeout`) until every callback of `ids` is answered
    /// and collects them: the first answer that failed (granting a reader
    /// closed a cycle, or could not be granted) is the writer's error. The
    /// clients that did not answer in time are returned, each with a key it
    /// did not answer for (their callbacks are forgotten):
    /// [`Callbacks::end_silent`] ends them.
    fn wait_for_answers(
        &self,
        ids: &[(u64, Resource, ClientId, u64)],
        timeout: Duration,
    ) -> Result<Vec<(ClientId, Resource)>, Error> {
        let start = Instant::now();
        let deadline = start + timeout;
        let mut t = lock(&self.table);
        loop {
            let pending: Vec<u64> = ids
                .iter()
                .filter(|(id, ..)| t.outstanding.get(id).is_some_and(|o| o.outcome.is_none()))
                .map(|(id, ..)| *id)
                .collect();
            if pending.is_empty() {
                break;
            }
            let now = Instant::now();
            if now >= deadline {
                let mut silent: Vec<(ClientId, Resource)> = pending
                    .iter()
                    .filter_map(|id| t.outstanding.get(id).map(|o| (o.client, o.key)))
                    .collect();
                silent.sort_unstable_by_key(|(c, _)| c.0);
                silent.dedup_by_key(|(c, _)| *c);
                return take_outcomes(&mut t, ids).map(|()| silent);
            }
            t = self
                .answered
                .wait_timeout(t, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        take_outcomes(&mut t, ids).map(|()| Vec::new())
    }
}

/// Removes the callbacks of `ids` from the table; the first answer that
/// failed is the writer's error.
fn take_outcomes(t: &mut MutexGuard<'_, Table>, ids: &[(u64, Resource, ClientId, u64)]) -> Result<(), Error> {
    let mut result = Ok(());
    for (id, ..) in ids {
        if let Some(Outstanding {
            outcome: Some(Err(e)), ..
        }) = t.outstanding.remove(id)
        {
            if result.is_ok() {
                result = Err(e);
            }
        }
    }
    result
}
