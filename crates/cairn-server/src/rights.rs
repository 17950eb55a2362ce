//! Callback locking's messages from a client, one path for every session
//! kind (page, file, object, adaptive): the answer to a callback (or a
//! client naming its readers before one of its transactions writes), and
//! rights given back unasked ([`cairn_net::rights`]). The table they act
//! on is [`crate::callbacks`].

use std::sync::Arc;

use bytes::Bytes;
use cairn_net::message::{ErrorCode, Fault};
use cairn_net::rights::RightsRequest;

use crate::callbacks::key_of;
use crate::{fault, run_blocking, Core, SessionState};

/// Answers a CALLBACK_REPLY or a RELEASE of a session.
///
/// A page or file session's rights are on pages, and a page session's of
/// a server that locks key ranges on the gaps of its lookups too: a
/// message of one naming anything else is refused (INVALID) and changes
/// nothing.
pub(crate) async fn handle(core: &Arc<Core>, state: &Arc<SessionState>, req: RightsRequest) -> Result<Bytes, Fault> {
    let gaps = core.db.locks_key_ranges() && !state.file;
    let may_name = state.object || req.pages_only() || (gaps && req.names_no_object());
    if !may_name {
        return Err(Fault::new(
            ErrorCode::INVALID,
            "a page session's rights are on pages (and on a key-range server, gaps): its CALLBACK_REPLY or RELEASE named something else",
        ));
    }
    match req {
        RightsRequest::Release { rights } => {
            // In memory only: here on the network thread (a blocking
            // thread would cost more than it).
            let rights: Vec<_> = rights.into_iter().map(|(k, e)| (key_of(k), e)).collect();
            core.callbacks.give_back(state.client, &rights);
            Ok(Bytes::new())
        }
        RightsRequest::CallbackReply(c) if c.in_use_by.is_empty() => {
            // "Dropped": the table only, here on the network thread (a
            // client answers the callbacks of a burst together, and they
            // need no thread).
            core.callbacks
                .answer(&core.db, state, c.id, key_of(c.key), c.epoch, c.writer, &[])
                .map_err(fault)?;
            Ok(Bytes::new())
        }
        RightsRequest::CallbackReply(c) => {
            // Granting the named readers their locks may wait for the
            // lock table: on a blocking thread. Id 0 answers no callback:
            // the client names its transactions reading under a right
            // before another of them changes what it covers.
            let (cc, s) = (core.clone(), state.clone());
            run_blocking(core, state, move || {
                cc.callbacks
                    .answer(&cc.db, &s, c.id, key_of(c.key), c.epoch, c.writer, &c.in_use_by)
            })
            .await?
            .map_err(fault)?;
            Ok(Bytes::new())
        }
    }
}
