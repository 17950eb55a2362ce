//! Session bookkeeping: what the table does when a session opens (an
//! address barred for silence gets no rights) or closes (its rights go and
//! callbacks waiting on it are answered), and ending a session that did not
//! answer a callback in time.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_net::message::{ErrorCode, Fault};
use cairn_storage::lock::Resource;
use cairn_storage::ClientId;

use super::{lock, Callbacks};
use crate::SessionState;

/// An address barred from rights to cache: a session of it did not answer
/// a callback in time. Its sessions opened before `until` get no right, so
/// no writer waits on them; each new offence doubles the bar
/// ([`SILENT_BAR_FIRST`], at most [`SILENT_BAR_MAX`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct Bar {
    until: Instant,
    strikes: u32,
}

/// How long an address goes without rights to cache after its first
/// session ended for silence; each further one doubles it.
pub const SILENT_BAR_FIRST: Duration = Duration::from_secs(60);
/// The longest bar.
pub const SILENT_BAR_MAX: Duration = Duration::from_secs(3600);

impl Callbacks {
    /// Ends the sessions of `silent` clients, which did not answer a
    /// callback (for the key named with each) within the lock timeout:
    /// each gets a GOODBYE and
    /// its connection closes (its transactions abort when it has), and its
    /// rights are dropped now, so the writer goes on. Ending the session,
    /// not just taking the right, is what keeps this safe: the client may
    /// be reading under the right, and a session that is gone can commit
    /// nothing it read.
    ///
    /// Its address is barred from rights for a while ([`Bar`]): a client
    /// that reconnects at once to cache the page again cannot make the next
    /// writer wait a lock timeout too.
    pub(super) fn end_silent(
        &self,
        sessions: &dyn Fn(ClientId) -> Option<Arc<SessionState>>,
        silent: &[(ClientId, Resource)],
    ) {
        for &(client, key) in silent {
            let state = sessions(client);
            let peer = state.as_ref().map_or("", |s| s.peer.as_str());
            let bar = self.bar(peer);
            tracing::warn!(client = client.0, %key, peer, bar_s = bar.as_secs(), "ending a session that did not answer a callback in time; its address gets no rights to cache for a while");
            if let Some(n) = state.and_then(|s| s.notifier.get().cloned()) {
                n.close(Fault::new(
                    ErrorCode::SESSION_ENDED,
                    format!("the session did not answer a callback for {key} within the lock timeout"),
                ));
            }
            self.session_closed(client);
            lock(&self.stats).sessions_ended_silent += 1;
        }
    }

    /// Bars the address of `peer` from rights (another strike), and
    /// returns for how long.
    fn bar(&self, peer: &str) -> Duration {
        let mut t = lock(&self.table);
        let now = Instant::now();
        let host = cairn_net::rpc::address_of(peer).to_string();
        let strikes = t.bars.get(&host).map_or(0, |b| b.strikes) + 1;
        let bar = SILENT_BAR_FIRST
            .saturating_mul(1u32 << (strikes - 1).min(16))
            .min(SILENT_BAR_MAX);
        t.bars.insert(
            host,
            Bar {
                until: now + bar,
                strikes,
            },
        );
        // Bars that ended long ago are forgotten (they bound the table).
        t.bars.retain(|_, b| b.until + SILENT_BAR_MAX > now);
        bar
    }

    /// A session `client` opened from `peer`: false (and the session gets
    /// no rights to cache; it is served under locks alone) if the address
    /// is barred now.
    pub fn session_opened(&self, client: ClientId, peer: &str) -> bool {
        let mut t = lock(&self.table);
        let barred = t
            .bars
            .get(cairn_net::rpc::address_of(peer))
            .is_some_and(|b| b.until > Instant::now());
        if barred {
            t.no_rights.insert(client);
            drop(t);
            lock(&self.stats).sessions_without_rights += 1;
        }
        !barred
    }

    /// A session ended: its rights go, and callbacks waiting for it are
    /// answered (its transactions were aborted, their locks released).
    pub fn session_closed(&self, client: ClientId) {
        let mut t = lock(&self.table);
        t.no_rights.remove(&client);
        let keys = t.by_client.remove(&client).unwrap_or_default();
        for k in keys {
            t.unregister(client, k, None);
        }
        for o in t.outstanding.values_mut() {
            if o.client == client && o.outcome.is_none() {
                o.outcome = Some(Ok(()));
            }
        }
        self.answered.notify_all();
    }
}
