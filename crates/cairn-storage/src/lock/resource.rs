//! What can be locked ([`Resource`]) and who holds a lock ([`LockOwner`]).

use std::fmt;

use crate::ids::{ClientId, GroupId, Oid, PageId, TxnId};

/// A lockable thing. Coarse resources (the volume, a group) take intention
/// modes; pages and objects take `S` and `X`. The lock manager does not
/// enforce the hierarchy: callers lock top-down (volume, group, page or
/// object) and the intention modes make conflicting coarse locks wait.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub enum Resource {
    /// The whole volume.
    Volume,
    /// An object group.
    Group(GroupId),
    /// A page (the default granularity).
    Page(PageId),
    /// One object (the optional finer granularity).
    Object(Oid),
    /// A whole B+-tree under key-range locking (named by its root page):
    /// IS/IX by every key-range operation, X to destroy it.
    Tree(PageId),
    /// One entry of a B+-tree under key-range locking: the tree's root and
    /// a hash of the entry's identity (its key in a unique tree, its key
    /// and value in another). Two entries sharing a hash only conflict
    /// more than they must.
    Entry(PageId, u64),
    /// The gap just below an entry of a B+-tree (between it and the entry
    /// before it), hashed as [`Resource::Entry`]: readers that scanned
    /// through the gap hold S, an inserter into it checks for them (IX).
    Gap(PageId, u64),
    /// The gap above the last entry of a B+-tree.
    TreeEnd(PageId),
}

impl Resource {
    /// The tree (its root) an entry, gap or tree-end lock belongs to.
    pub fn tree(&self) -> Option<PageId> {
        match *self {
            Resource::Entry(root, _) | Resource::Gap(root, _) | Resource::TreeEnd(root) => Some(root),
            _ => None,
        }
    }
}

impl fmt::Display for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Resource::Volume => write!(f, "the volume"),
            Resource::Group(g) => write!(f, "group {}", g.0),
            Resource::Page(p) => write!(f, "page {p}"),
            Resource::Object(oid) => write!(f, "object {oid}"),
            Resource::Tree(root) => write!(f, "the tree at page {root}"),
            Resource::Entry(root, h) => write!(f, "entry {h:016x} of the tree at page {root}"),
            Resource::Gap(root, h) => write!(f, "the gap below entry {h:016x} of the tree at page {root}"),
            Resource::TreeEnd(root) => write!(f, "the end of the tree at page {root}"),
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
