//! A client's answer to a callback: granting the locks of the transactions
//! that read under the right ahead of waiters, dropping the right, and
//! waking the writer. Fails closed: a reader that cannot be granted its lock
//! fails the writer.

use cairn_storage::lock::{LockMode, LockOwner, Resource};
use cairn_storage::{Db, Error, TxnId};

use super::{lock, Callbacks};
use crate::SessionState;

impl Callbacks {
    /// A client's answer to callback `id` for `key` and `epoch`: grants
    /// each transaction in `in_use_by` S on the page (IS on its page and S
    /// on an object; IS on its tree and S on a gap) ahead of waiters, drops
    /// the client's right (if it is still the one called back) and wakes the
    /// writer. An answer to a callback that is no longer outstanding (the
    /// writer gave up) still drops the right and grants the locks: both are
    /// what the client now assumes.
    ///
    /// Id 0 answers no callback (the client names its readers before its
    /// own transaction `own_writer` takes X): the right stays, and an error
    /// granting the locks (a deadlock) is returned to the client.
    ///
    /// A reader already waiting for the writer is made the deadlock victim
    /// ([`Db::lock_ahead`]), else the writer would always be.
    #[allow(clippy::too_many_arguments)]
    pub fn answer(
        &self,
        db: &Db,
        session: &SessionState,
        id: u64,
        key: Resource,
        epoch: u64,
        own_writer: u64,
        in_use_by: &[u64],
    ) -> Result<(), Error> {
        let grants: &[(Resource, LockMode)] = match key {
            Resource::Page(_) => &[(key, LockMode::S)],
            Resource::Object(o) => &[(Resource::Page(o.page), LockMode::IS), (key, LockMode::S)],
            Resource::Gap(root, _) | Resource::TreeEnd(root) => {
                &[(Resource::Tree(root), LockMode::IS), (key, LockMode::S)]
            }
            _ => return Err(Error::InvalidArgument(format!("a callback answer for {key}"))),
        };
        let writer = if id == 0 {
            match own_writer {
                0 => None,
                w => Some(LockOwner::new(session.client, session.txn_or_begin(db, w)?.0)),
            }
        } else {
            lock(&self.table).outstanding.get(&id).map(|o| o.writer)
        };
        let mut outcome = Ok(());
        'txns: for &u in in_use_by {
            for &(res, mode) in grants {
                let granted = session.txn_or_begin(db, u).and_then(|(server_id, _)| {
                    db.lock_ahead(LockOwner::new(session.client, server_id), res, mode, writer)
                });
                match granted {
                    Ok(true) => {}
                    // Fail closed: the reader read under the right, so the
                    // writer may not go on past it; it fails (retryable)
                    // and the right stays registered, so the next writer
                    // calls it back again until the reader is gone.
                    Ok(false) => {
                        lock(&self.stats).readers_not_granted += 1;
                        outcome = Err(Error::Deadlock {
                            txn: writer.map_or(TxnId(u), |w| w.txn),
                            cycle: format!(
                                "transaction {u} of client {} reads {res} under a callback right and cannot be granted {mode:?} on it now",
                                session.client.0
                            ),
                        });
                        break 'txns;
                    }
                    Err(e) => {
                        outcome = Err(e);
                        break 'txns;
                    }
                }
            }
        }
        if id == 0 {
            return outcome;
        }
        if !in_use_by.is_empty() {
            lock(&self.stats).answered_in_use += 1;
        }
        let mut t = lock(&self.table);
        if outcome.is_ok() {
            t.unregister(session.client, key, Some(epoch));
        }
        if let Some(o) = t.outstanding.get_mut(&id) {
            if o.client == session.client && o.key == key && o.outcome.is_none() {
                o.outcome = Some(outcome);
            }
        }
        self.answered.notify_all();
        Ok(())
    }
}
