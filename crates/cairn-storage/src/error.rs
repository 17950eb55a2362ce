//! The storage layer's error type.
//!
//! Expected conditions a caller can act on get their own variants
//! (`NotFound`, `Corrupt`, `LimitExceeded`, …). Every variant names *what* is
//! wrong and *where* (a path, a page, an OID), so that a message alone is
//! enough to find the damage.

use std::path::PathBuf;

use crate::ids::{GroupId, Lsn, Oid, PageId, TxnId};

/// Result alias for the storage layer.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in `cairn-storage`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An operating-system I/O call failed.
    #[error("I/O error during {op} on {}: {source}", path.display())]
    Io {
        /// What was being done ("read page", "fsync volume", …).
        op: &'static str,
        /// The file concerned.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },

    /// A page failed verification: bad checksum, wrong id, impossible layout.
    #[error("page {page} is corrupt: {reason}")]
    Corrupt {
        /// The damaged page.
        page: PageId,
        /// What exactly is wrong with it.
        reason: String,
    },

    /// A file other than a page (the manifest, the volume's length) is damaged
    /// or inconsistent.
    #[error("{} is corrupt: {reason}", path.display())]
    CorruptFile {
        /// The damaged file.
        path: PathBuf,
        /// What exactly is wrong with it.
        reason: String,
    },

    /// The directory is not a Cairn database (no manifest, wrong magic).
    #[error("{} is not a Cairn database: {reason}", path.display())]
    NotADatabase {
        /// The directory or file that was opened.
        path: PathBuf,
        /// Why it was not recognised.
        reason: String,
    },

    /// The database was written in a format version this build cannot read.
    #[error("{} has format version {found}, this build reads version {supported}", path.display())]
    UnsupportedVersion {
        /// The file holding the version.
        path: PathBuf,
        /// The version found on disk.
        found: u32,
        /// The version this build reads.
        supported: u32,
    },

    /// A directory already holds a database where a new one was to be made.
    #[error("{} already exists", path.display())]
    AlreadyExists {
        /// The existing path.
        path: PathBuf,
    },

    /// No live object has this OID (never existed, deleted, or its slot was
    /// reused by a newer object).
    #[error("object {oid} not found")]
    NotFound {
        /// The OID that was looked up.
        oid: Oid,
    },

    /// No group with this name or id.
    #[error("group {0} not found")]
    GroupNotFound(String),

    /// A group with this name already exists.
    #[error("group {0:?} already exists")]
    GroupExists(String),

    /// A limit was exceeded; the operation was refused and nothing changed.
    #[error("{what}: {value} exceeds the limit of {limit}")]
    LimitExceeded {
        /// Which limit.
        what: &'static str,
        /// The value asked for.
        value: u64,
        /// The limit.
        limit: u64,
    },

    /// A caller passed an argument that makes no sense (bad page size, a range
    /// past the end of an object, …).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// Recovery met a log record it cannot apply (it does not decode, its
    /// change does not fit its page, its COMMIT frees a page no transaction
    /// may free). Nothing was written; the database stays as it was.
    /// `cairn recover DIR --stop-at LSN` opens it as of just before the
    /// record, keeping the log from there (`Db::recover_stopping_at`).
    #[error(
        "recovery cannot apply the log record at LSN {}{}: {reason}; nothing was changed. \
         `cairn recover <dir> --stop-at {}` opens the database as of just before it and keeps \
         the log from there in the database's lost+found directory",
        lsn.0,
        txn.map_or(String::new(), |t| format!(" (transaction {})", t.0)),
        lsn.0
    )]
    Unrecoverable {
        /// Where the record starts.
        lsn: Lsn,
        /// The transaction it belongs to, when known.
        txn: Option<TxnId>,
        /// What is wrong.
        reason: String,
    },

    /// A lock request of a transaction set to park its waits
    /// ([`crate::Txn::set_parking`]) was parked in the lock manager's queue
    /// instead of waiting: the caller (a server) takes it with
    /// [`crate::Txn::take_parked`], awaits it without a thread, and runs the
    /// request again. Never sent to a client as such.
    #[error("{txn}'s request for {mode} on {resource} waits in the lock queue")]
    LockParked {
        /// The waiting transaction.
        txn: TxnId,
        /// The resource asked for.
        resource: String,
        /// The mode asked for.
        mode: String,
    },

    /// The transaction may not make this change: a server session whose
    /// role does not allow it ([`crate::txn::Restriction`]).
    #[error("permission denied: {0}")]
    PermissionDenied(String),

    /// The operation needs a small object but the OID names a large one, or the
    /// other way round.
    #[error("object {oid} is {actual}, the operation needs a {expected} object")]
    WrongKind {
        /// The object.
        oid: Oid,
        /// "large" or "small".
        expected: &'static str,
        /// "large" or "small".
        actual: &'static str,
    },

    /// An object is too long to be read whole into memory (see
    /// [`crate::record::object::READ_WHOLE_LEN_MAX`]); read it in pieces with
    /// `read_range`. Nothing was allocated for it.
    #[error("object {oid} is {len} bytes, over the limit of {limit} bytes for reading it whole; read it in pieces with read_range")]
    ObjectTooLarge {
        /// The object.
        oid: Oid,
        /// Its length in bytes.
        len: u64,
        /// The limit it exceeds.
        limit: u64,
    },

    /// An earlier I/O failure left the store in an unknown state; it refuses
    /// all further work until it is closed and reopened.
    #[error("the store refuses work after an earlier I/O failure ({0}); reopen it")]
    Poisoned(String),

    /// The volume cannot grow any further.
    #[error("the volume is full: {0}")]
    VolumeFull(String),

    /// A read-only (snapshot) transaction was asked to change something.
    #[error("{0} is a read-only snapshot transaction: it changes nothing")]
    ReadOnlyTxn(TxnId),

    /// A snapshot ran so long that the page versions it needed outgrew the
    /// version store's bound, and it was ended early: begin a new one.
    #[error(
        "the snapshot at LSN {lsn} is too old: the page versions it needed outgrew the version store's {bytes_max} bytes (DbOptions::snapshot_bytes_max); end it and begin a new one"
    )]
    SnapshotTooOld {
        /// The snapshot's LSN.
        lsn: u64,
        /// The store's bound.
        bytes_max: u64,
    },

    /// The transaction was chosen as the victim of a deadlock (the member
    /// of the cycle that had done the least work); it must abort, and may
    /// be retried whole as a new transaction. The message says so.
    #[error(
        "{txn} was chosen as a deadlock victim ({cycle}); nothing of the other transactions was rolled back. \
         Abort this transaction and retry it whole, as a new transaction, after a short random pause; \
         taking locks in one order avoids the deadlock"
    )]
    Deadlock {
        /// The victim.
        txn: TxnId,
        /// The cycle of waits, for the message.
        cycle: String,
    },

    /// A lock wait timed out.
    #[error("{txn} timed out after {waited_ms} ms waiting for {mode} on {resource}")]
    LockTimeout {
        /// The waiting transaction.
        txn: TxnId,
        /// The resource waited for.
        resource: String,
        /// The mode asked for.
        mode: String,
        /// How long it waited.
        waited_ms: u64,
    },

    /// The write-ahead log is damaged where it cannot be a torn tail.
    #[error("the log is corrupt at {}, offset {offset}: {reason}", path.display())]
    CorruptLog {
        /// The segment file.
        path: PathBuf,
        /// Byte offset in the segment.
        offset: u64,
        /// What is wrong.
        reason: String,
    },

    /// The transaction has ended (committed or aborted) or failed and must be
    /// dropped.
    #[error("{0} is no longer active")]
    TxnNotActive(TxnId),

    /// A unique index already holds the key.
    #[error("duplicate key {key} in a unique index (root page {root})")]
    DuplicateKey {
        /// The index's root page.
        root: PageId,
        /// The key, printed (hex or text).
        key: String,
    },

    /// A group id named in an extent or object does not exist.
    #[error("unknown group id {0:?}")]
    UnknownGroupId(GroupId),

    /// Another opener (this process or another) holds the database.
    #[error("the database {} is in use by {holder}", path.display())]
    InUse {
        /// The database directory.
        path: PathBuf,
        /// Who holds it, as the holder wrote it ("process 1234").
        holder: String,
    },

    /// A log segment belongs to another database (its creation id is not
    /// the volume's): a leftover `wal/` must never be replayed onto a volume.
    #[error("{} belongs to another database: creation id {found:032x}, the volume's is {expected:032x}", path.display())]
    ForeignLog {
        /// The segment file.
        path: PathBuf,
        /// The creation id in the segment header.
        found: u128,
        /// The volume's creation id.
        expected: u128,
    },

    /// An earlier error inside the transaction left it half-way through a
    /// change; every call but abort refuses until it is aborted.
    #[error("{txn} is doomed by an earlier error ({cause}); abort it")]
    TxnDoomed {
        /// The transaction.
        txn: TxnId,
        /// The error that doomed it.
        cause: String,
    },

    /// A bug in Cairn: an internal invariant does not hold. Not damage on
    /// disk; please report it.
    #[error("internal error: {0}")]
    Internal(String),

    /// The backend a transaction runs on went away or broke its protocol
    /// (a page-server client lost its connection, or the server answered
    /// nonsense). The transaction is doomed; whether a commit in flight
    /// happened is for the server to tell.
    #[error("the backend at {backend} is unusable: {reason}")]
    BackendLost {
        /// Where the backend is (a server address).
        backend: String,
        /// What happened.
        reason: String,
    },
}

impl Error {
    /// Builds an [`Error::Io`].
    pub fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Error {
        Error::Io {
            op,
            path: path.into(),
            source,
        }
    }

    /// Builds an [`Error::Corrupt`].
    pub fn corrupt(page: PageId, reason: impl Into<String>) -> Error {
        Error::Corrupt {
            page,
            reason: reason.into(),
        }
    }

    /// The page this error names, if any (used by `cairn check` to report it).
    pub fn page(&self) -> Option<PageId> {
        match self {
            Error::Corrupt { page, .. } => Some(*page),
            _ => None,
        }
    }
}
