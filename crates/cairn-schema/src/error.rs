//! `cairn::Error`: one enum with variants a caller can act on.

use cairn_storage::{Oid, PageId, TxnId};

use cairn_codec::DecodeError;

/// Result alias of the public API.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything the typed API can report.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The transaction was chosen as a deadlock victim; abort and retry.
    #[error(
        "deadlock: {txn} was chosen as the victim ({cycle}); drop or abort the transaction and run it \
         again as a new one, after a short random pause (taking locks in one order avoids it)"
    )]
    Deadlock {
        /// The victim (this transaction).
        txn: TxnId,
        /// The cycle of waits.
        cycle: String,
    },
    /// A lock wait timed out; abort and retry.
    #[error("lock timeout: {txn} waited {waited_ms} ms for {mode} on {resource}")]
    LockTimeout {
        /// The waiting transaction.
        txn: TxnId,
        /// What it waited for (a page, a group, an object).
        resource: String,
        /// The lock mode it asked for (`S`, `X`, …).
        mode: String,
        /// How long it waited, in milliseconds.
        waited_ms: u64,
    },
    /// No live object has this OID (never created, deleted, or a reference
    /// from another database).
    #[error("no object {oid}")]
    NotFound {
        /// The OID followed.
        oid: Oid,
    },
    /// No object is named `name` (`cairn::Transaction::root`).
    #[error("no root named {name:?}")]
    NoRoot {
        /// The name asked for.
        name: String,
    },
    /// No group has this name.
    #[error("no group named {name:?}")]
    NoGroup {
        /// The name asked for.
        name: String,
    },
    /// The server of a `cairn::Database::connect`ed database cannot be
    /// reached, went away, or broke the protocol. The transaction is lost
    /// (a commit in flight may or may not have happened); reconnect.
    #[error("server {server}: {reason}")]
    Net {
        /// The server's address.
        server: String,
        /// What happened.
        reason: String,
    },
    /// A bug in Cairn: an invariant does not hold (not damage on disk).
    /// Please report it.
    #[error("internal error: {0}")]
    Internal(String),
    /// Damaged data, naming the page.
    #[error("page {page} is corrupt: {reason}")]
    Corrupt {
        /// The damaged page.
        page: PageId,
        /// What is wrong.
        reason: String,
    },
    /// A persistent type's definition does not match what the database holds.
    #[error("schema mismatch for type {type_name}, field {field}: {reason}")]
    SchemaMismatch {
        /// The type.
        type_name: String,
        /// The field.
        field: String,
        /// What changed.
        reason: String,
    },
    /// A reference points at an object of another type.
    #[error("object {oid} is a {found}, not a {expected}")]
    WrongType {
        /// The object.
        oid: Oid,
        /// The type asked for.
        expected: String,
        /// The type stored.
        found: String,
    },
    /// An object's bytes could not be decoded.
    #[error("object {oid}: {source}")]
    Decode {
        /// The object.
        oid: Oid,
        /// What failed.
        #[source]
        source: DecodeError,
    },
    /// A unique index already holds the key.
    #[error("duplicate key in index {index}: {key}")]
    DuplicateKey {
        /// The index (type.field).
        index: String,
        /// The key.
        key: String,
    },
    /// An index query names a field of the type that has no
    /// `#[cairn(index)]` (a misspelled or unindexed field).
    #[error("type {type_name} has no index on field {field:?}; its indexed fields are: {indexed}")]
    NoIndex {
        /// The type queried.
        type_name: String,
        /// The field named by the query.
        field: String,
        /// The type's indexed fields, comma-separated ("none" if it has none).
        indexed: String,
    },
    /// An index query's key type is not the indexed field's type.
    #[error("the index on {type_name}.{field} has keys of type {field_type}, the query's key is a {key_type}")]
    IndexKeyType {
        /// The type queried.
        type_name: String,
        /// The indexed field.
        field: String,
        /// The field's type.
        field_type: String,
        /// The type of the query's key.
        key_type: String,
    },
    /// An object is longer than the typed layer decodes whole
    /// (`cairn::Options::object_bytes_max`, or the storage layer's limit
    /// for reading an object whole). Nothing was allocated for it; raise the
    /// limit, or read its bytes in pieces through the storage transaction's
    /// `read_range`.
    #[error("object {oid} is {len} bytes, over the limit of {limit} bytes for decoding an object whole")]
    ObjectTooLarge {
        /// The object.
        oid: Oid,
        /// Its length in bytes.
        len: u64,
        /// The limit it exceeds.
        limit: u64,
    },
    /// The caller asked for something that makes no sense.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The session's role does not allow the change (a `read` user writing,
    /// a `write` user changing classes or indexes); the transaction is
    /// doomed.
    #[error("permission denied: {0}")]
    PermissionDenied(String),
    /// A read-only (snapshot) transaction was asked to change something.
    #[error("read-only transaction: {0} changes nothing (begin an ordinary transaction to change objects)")]
    ReadOnly(String),
    /// Any other storage error (I/O, limits, a poisoned database, a
    /// snapshot too old, …).
    #[error(transparent)]
    Storage(cairn_storage::Error),
}

impl From<cairn_storage::Error> for Error {
    fn from(e: cairn_storage::Error) -> Error {
        use cairn_storage::Error as S;
        match e {
            S::Deadlock { txn, cycle } => Error::Deadlock { txn, cycle },
            S::LockTimeout {
                txn,
                resource,
                mode,
                waited_ms,
            } => Error::LockTimeout {
                txn,
                resource,
                mode,
                waited_ms,
            },
            S::NotFound { oid } => Error::NotFound { oid },
            S::GroupNotFound(name) => Error::NoGroup { name },
            S::BackendLost { backend, reason } => Error::Net {
                server: backend,
                reason,
            },
            S::Internal(why) => Error::Internal(why),
            S::Corrupt { page, reason } => Error::Corrupt { page, reason },
            S::ObjectTooLarge { oid, len, limit } => Error::ObjectTooLarge { oid, len, limit },
            S::PermissionDenied(why) => Error::PermissionDenied(why),
            S::ReadOnlyTxn(txn) => Error::ReadOnly(txn.to_string()),
            other => Error::Storage(other),
        }
    }
}

impl Error {
    /// True for errors a caller resolves by aborting and retrying the
    /// transaction (deadlock victim, lock timeout).
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::Deadlock { .. } | Error::LockTimeout { .. })
    }

    /// The storage layer's error this one came from (the inverse of the
    /// conversion above), or, for an error of the typed layer itself, an
    /// `InvalidArgument` carrying its message: what a server sends back for
    /// a method it ran ([`crate::methods::serve`]).
    pub fn into_storage(self) -> cairn_storage::Error {
        use cairn_storage::Error as S;
        match self {
            Error::Deadlock { txn, cycle } => S::Deadlock { txn, cycle },
            Error::LockTimeout {
                txn,
                resource,
                mode,
                waited_ms,
            } => S::LockTimeout {
                txn,
                resource,
                mode,
                waited_ms,
            },
            Error::NotFound { oid } => S::NotFound { oid },
            Error::NoGroup { name } => S::GroupNotFound(name),
            Error::Net { server, reason } => S::BackendLost {
                backend: server,
                reason,
            },
            Error::Internal(why) => S::Internal(why),
            Error::Corrupt { page, reason } => S::Corrupt { page, reason },
            Error::ObjectTooLarge { oid, len, limit } => S::ObjectTooLarge { oid, len, limit },
            Error::PermissionDenied(why) => S::PermissionDenied(why),
            Error::Storage(e) => e,
            other => S::InvalidArgument(other.to_string()),
        }
    }
}
