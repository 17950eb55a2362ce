//! What can be locked ([`Resource`]) and who holds a lock ([`LockOwner`]).

use std::fmt;

use crate::ids::{ClientId, GroupId, Oid, PageId, TxnId};

/// A lockable thing. Coarse resources (the volume, a group) take intention
/// modes; pages and objects take `S` and `X`. The lock manager does not
/// enforce the hierarchy: callers lock top-down (volume, group, page or
/// object) and the intention modes make conflicting coarse locks wait.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Resource {
    /// The whole volume.
    Volume,
    /// An object group.
    Group(GroupId),
    /// A page (the default granularity).
    Page(PageId),
    /// One object (the optional finer granularity).
    Object(Oid),
}

impl fmt::Display for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Resource::Volume => write!(f, "the volume"),
            Resource::Group(g) => write!(f, "group {}", g.0),
            Resource::Page(p) => write!(f, "page {p}"),
            Resource::Object(oid) => write!(f, "object {oid}"),
        }
    }
}

/// Who holds or waits for a lock: a transaction of a client. Never a thread —
/// any thread may act for any owner, and a remote client's owner has no
/// thread in this process at all.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct LockOwner {
    /// The client (0 is the embedded process itself).
    pub client: ClientId,
    /// The transaction of that client.
    pub txn: TxnId,
}

impl LockOwner {
    /// The owner for `txn` of `client`.
    pub fn new(client: ClientId, txn: TxnId) -> LockOwner {
        LockOwner { client, txn }
    }
}

impl fmt::Display for LockOwner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} of client {}", self.txn, self.client.0)
    }
}
