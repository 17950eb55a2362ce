//! `cairn::Error`: one enum with variants a caller can act on.

use cairn_storage::{Oid, PageId};

use crate::codec::DecodeError;

/// Result alias of the public API.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything the typed API can report.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The transaction was chosen as a deadlock victim; abort and retry.
    #[error("deadlock: {0}")]
    Deadlock(String),
    /// A lock wait timed out; abort and retry.
    #[error("lock timeout: {0}")]
    LockTimeout(String),
    /// No live object has this OID (or a named root does not exist).
    #[error("not found: {0}")]
    NotFound(String),
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
    /// The caller asked for something that makes no sense.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// Any other storage error (I/O, limits, a poisoned database, …).
    #[error(transparent)]
    Storage(cairn_storage::Error),
}

impl From<cairn_storage::Error> for Error {
    fn from(e: cairn_storage::Error) -> Error {
        use cairn_storage::Error as S;
        match e {
            S::Deadlock { .. } => Error::Deadlock(e.to_string()),
            S::LockTimeout { .. } => Error::LockTimeout(e.to_string()),
            S::NotFound { .. } | S::GroupNotFound(_) => Error::NotFound(e.to_string()),
            S::Corrupt { page, reason } => Error::Corrupt { page, reason },
            other => Error::Storage(other),
        }
    }
}

impl Error {
    /// True for errors a caller resolves by aborting and retrying the
    /// transaction (deadlock victim, lock timeout).
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::Deadlock(_) | Error::LockTimeout(_))
    }
}
