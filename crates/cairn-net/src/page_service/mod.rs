//! The page service: what a page-server client asks of `cairn serve`
//! (`docs/protocol.md` has the byte diagrams).
//!
//! | kind | request body | final reply body |
//! |---|---|---|
//! | `0x0100` | retired (was BEGIN: a transaction now begins on the server with its first request) | |
//! | `0x0101` FETCH | `txn u64, mode u8, group u32, count u16, (page u32, lsn u64) × count` | empty; one part per page ([`Fetched`]) |
//! | `0x0102` ALLOCATE | `txn u64, group u32, near u32 (NO_PAGE: none), page type u8` | `page u32, page_count u32, image` |
//! | `0x0103` FREE | `txn u64, page u32` | empty |
//! | `0x0104` COMMIT | `txn u64, count u32, (len u32, record) × count` | `count u32, (page u32, lsn u64) × count`, once durable |
//! | `0x0105` ABORT | `txn u64` | empty |
//! | `0x0106` VOLUME | empty | `page_size u32, page_count u32, region_pages u32` |
//! | `0x0107` LOCK | `txn u64, resource u8 (0 page, 1 group), id u32, mode u8, try u8` | `granted u8` |
//! | `0x0108` GROUP_PAGES | `txn u64, group u32` | `count u32, page u32 × count` |
//! | `0x0109` GROUPS | empty | `count u32, (id u32, len u16, name) × count` |
//! | `0x010A` GROUP | `create u8, len u16, name` | `id u32` |
//! | `0x010B` READ | `page u32` | `image` |
//! | `0x010C` | retired (was CALLBACK_REPLY: now [`crate::rights`]'s, for every client) | |
//! | `0x010D` STAGE | `txn u64, count u32, (len u32, record) × count` (as COMMIT) | empty, once verified and staged |
//! | `0x010E` | retired (was RELEASE: now [`crate::rights`]'s) | |
//! | `0x010F` VOLUME_FILE | empty | the volume file's path (bytes) |
//! | `0x0110` WRITTEN | `txn u64` | empty |
//! | `0x0111` LOCK_STATS | empty | `requests u64, waits u64, deadlocks u64, timeouts u64, upgrades u64, wait_micros u64` ([`LockCounters`]) |
//! | `0x0112` SNAPSHOT | `txn u64` | `low u64, high u64, count u16, (start u64, end u64) × count` ([`SnapshotInfo`]) |
//! | `0x0113` PLACE | `txn u64, cache u8, group u32, need u32, count u16, (page u32, lsn u64) × count` | empty; one part per page tried ([`Fetched`]) |
//! | `0x0114` APPEND | `txn u64, count u32, append × count` (each as the object service's OBJ_COMMIT carries an append: `oid, 2 u8, class u32, len u16, field, len u16, elem, count u32, len u32, elems`) | `count u32, page u32 × count`: the pages whose appends the server keeps |
//!
//! and the messages of callback locking, which every client shares
//! ([`crate::rights`]: the server's CALLBACK notice, CALLBACK_REPLY and
//! RELEASE).
//!
//! **Transactions** are named by the client (any id but 0, unique among the
//! session's open ones): the server begins one the first time a request
//! names it, and ends it at COMMIT or ABORT (or when the session ends). A
//! transaction that only read pages it caches under callbacks never reaches
//! the server at all.
//!
//! **Callback locking.** A client that answers callbacks sets
//! [`FETCH_CACHE`] in a FETCH's mode; a FETCH part that then grants it the
//! right to cache the page across transactions carries a nonzero `cover`
//! epoch, a right on the page ([`crate::rights::RightKey::Page`]) that
//! the server calls back before another client's transaction takes X on
//! the page ([`crate::rights`] has the protocol).
//! A FETCH takes the lock it needs with the read, so locking adds no round
//! trip, and names up to [`FETCH_PAGES_MAX`] pages at once (prefetch). Its
//! mode is [`FETCH_S`], [`FETCH_X`], [`FETCH_TRY_INSERT`] (take X only if
//! nobody is in the way and the page is an in-use page of `group`: a
//! candidate page for an insert) or [`FETCH_U`] (an update lock: a page
//! read now and perhaps changed next, such as the B+-tree leaf of a lookup
//! for update; readers and rights to cache share it, a second U waits, so
//! two updaters queue instead of both reading under S and then deadlocking
//! on their upgrades to X; it calls back nobody, and is never taken through
//! a right to cache). For each page the client names the LSN of
//! the copy it caches (0: none); if the committed page still has that LSN
//! the reply says so instead of shipping the image again. Every image
//! travels sealed (its CRC32C set), and the client verifies it as a page
//! read from disk. A COMMIT carries the PAGE redo records the embedded
//! commit builds; the server verifies each before it reaches the log, and
//! answers with the LSN each changed page was installed with. READ is the
//! committed image without a lock: a client refilling its cache with a page
//! its transaction already holds a lock on. Lock modes travel as
//! [`LOCK_MODE_IS`] … [`LOCK_MODE_X`] and [`LOCK_MODE_U`]. Errors are
//! [`Fault`](crate::message::Fault)s with the codes below, so a client can
//! tell a deadlock (retry) from damage.
//!
//! **PLACE** finds a page for an insert in one round trip where a
//! [`FETCH_TRY_INSERT`] per candidate page took one each. The server tries
//! the candidates in order: a page that is not an in-use slotted page of
//! `group`, or whose committed image has no room for a payload of `need`
//! bytes (with its slot entry), is passed over with nothing locked
//! ([`FetchStatus::NotInUse`] or [`FetchStatus::NotGranted`]); otherwise
//! X is tried as a try-insert FETCH tries it (never waiting, refused while
//! another client caches the page). The first page locked whose image,
//! read under the lock, has the room ends the request; a page locked
//! whose image no longer has it (changed between the look and the lock)
//! stays locked and comes back as a part like any other, and the search
//! goes on. The reply has one part per page tried, in order, as a FETCH's
//! (the pages after the one found are not tried and have none); `cache`
//! is the [`FETCH_CACHE`] flag of a FETCH.
//!
//! **APPEND** (page-server sessions) hands the server list appends to
//! keep at object grain — IX on the page, the append lock A on each
//! object — and apply at the transaction's COMMIT, so appenders of one
//! page do not exclude each other. The server keeps each page's appends
//! all together or not at all (a record moved or large, no room, an
//! append that does not apply: none), answers with the pages kept, and
//! names them with their new LSNs in the COMMIT's reply (the client's
//! older copies are stale). The client applies the rest itself; a COMMIT
//! shipping an image of a page whose appends the server keeps replaces
//! them (the client applied them into its image).
//!
//! **Snapshots.** SNAPSHOT begins the named transaction as a read-only
//! one at a snapshot of the last committed state (the server's version
//! store keeps the page versions it needs) and answers with its window:
//! its LSN `low`, the log's end `high` when it began, and the LSN ranges of
//! the commits in flight then, which it does not see
//! ([`SnapshotInfo::sees`]). The transaction reads with FETCH in mode
//! [`FETCH_SNAPSHOT`]: each part is the page as of the snapshot (or
//! UNCHANGED when that version has the LSN the client named), takes no
//! lock and grants no right. It sends nothing else but ABORT, which ends
//! it; every other request naming it is refused. A client may read a page
//! it caches under a right for the snapshot instead, if the window sees
//! the page's LSN: under the right the cached image is the newest
//! committed one, so no version the snapshot sees can be newer. A
//! snapshot that outlived the server's version store fails with
//! [`ErrorCode::SNAPSHOT_TOO_OLD`].
//!
//! **LOCK_STATS** reads the server's lock-manager counters since it opened
//! the database (all sessions together): any session may ask, whatever its
//! architecture or role, and it changes nothing. A benchmark reads it
//! before and after a run to report lock waits per operation.
//!
//! **File-server sessions** (architecture 3) use the same service with
//! three differences: a FETCH takes the lock and answers
//! [`FetchStatus::Locked`] without an image (the client reads the page from
//! the volume file VOLUME_FILE names, which the server has made current),
//! and never grants a right to cache; a COMMIT carries full page images
//! and its reply leaves the transaction's locks held; WRITTEN, sent once the
//! client has written and synced the pages, releases them.
//!
//! **A server that locks key ranges** of its B+-trees announces
//! [`KEY_RANGES`] in its WELCOME. Its commits change a tree's pages under
//! the tree's latch and no page lock, so a page-server client never reads
//! or writes the pages of a tree it did not make there: it sends the
//! object service's TREE_APPLY (changes, kept in its transaction at the
//! server and applied at its commit), TREE_RANGE (a lookup or a range,
//! locking the entries and gaps it reads) and TREE_DESTROY, which such a
//! server answers on a page session too; a COMMIT record of such a tree's
//! page is refused, and no right to cache a B+-tree page is granted (no
//! callback would ever name it). File-server sessions are refused there.

use crate::frame::Kind;
use crate::message::{ErrorCode, MessageError, Reader, Writer};

/// WELCOME capability: the server locks key ranges of its B+-trees, and a
/// page-server session sends its tree operations as the object service's
/// tree requests (see the module docs).
pub const KEY_RANGES: crate::message::Capabilities = crate::message::Capabilities(1 << 16);

/// Pages one FETCH may name.
pub const FETCH_PAGES_MAX: usize = 256;
/// Records one COMMIT may carry.
pub const COMMIT_RECORDS_MAX: u32 = 1 << 20;
/// "No page" in a `near` field.
pub const NO_PAGE: u32 = u32::MAX;
/// "No group" in a FETCH part's group field.
pub const NO_GROUP: u32 = u32::MAX;
/// Longest group name.
pub const GROUP_NAME_MAX: usize = 255;

/// FETCH mode: shared lock.
pub const FETCH_S: u8 = 0;
/// FETCH mode: exclusive lock.
pub const FETCH_X: u8 = 1;
/// FETCH mode: exclusive lock only if granted at once and the page is an
/// in-use page of the request's group.
pub const FETCH_TRY_INSERT: u8 = 2;
/// FETCH mode: no lock; the page as of the transaction's snapshot (a
/// transaction begun by SNAPSHOT, and only such a one).
pub const FETCH_SNAPSHOT: u8 = 3;
/// FETCH mode: update lock (U) — shared with readers and rights to cache,
/// exclusive among updaters; the page is read to be changed next.
pub const FETCH_U: u8 = 4;
/// Commits in flight one SNAPSHOT reply may name (the server refuses to
/// begin a snapshot while more are).
pub const SNAPSHOT_EXCLUDED_MAX: usize = 4096;
/// FETCH mode flag (ORed into the mode): the client answers callbacks, so
/// the server may grant it the right to cache the pages. A client without
/// a callback thread leaves it clear and is never called back.
pub const FETCH_CACHE: u8 = 0x80;

/// Lock mode IS on the wire.
pub const LOCK_MODE_IS: u8 = 0;
/// Lock mode IX on the wire.
pub const LOCK_MODE_IX: u8 = 1;
/// Lock mode S on the wire.
pub const LOCK_MODE_S: u8 = 2;
/// Lock mode SIX on the wire.
pub const LOCK_MODE_SIX: u8 = 3;
/// Lock mode X on the wire.
pub const LOCK_MODE_X: u8 = 4;
/// Lock mode U (update: shares with IS and S, not with another U) on the
/// wire.
pub const LOCK_MODE_U: u8 = 5;

/// LOCK resource: a page.
pub const RESOURCE_PAGE: u8 = 0;
/// LOCK resource: a group.
pub const RESOURCE_GROUP: u8 = 1;

impl Kind {
    /// Reads pages under a lock.
    pub const FETCH: Kind = Kind(0x0101);
    /// Allocates a page.
    pub const ALLOCATE: Kind = Kind(0x0102);
    /// Frees a page at commit.
    pub const FREE: Kind = Kind(0x0103);
    /// Commits a batch of redo records.
    pub const COMMIT: Kind = Kind(0x0104);
    /// Aborts a transaction.
    pub const ABORT: Kind = Kind(0x0105);
    /// Describes the volume.
    pub const VOLUME: Kind = Kind(0x0106);
    /// Takes a lock.
    pub const LOCK: Kind = Kind(0x0107);
    /// Lists a group's pages.
    pub const GROUP_PAGES: Kind = Kind(0x0108);
    /// Lists the groups.
    pub const GROUPS: Kind = Kind(0x0109);
    /// Looks a group up by name, or creates it.
    pub const GROUP: Kind = Kind(0x010A);
    /// Reads a committed page without a lock.
    pub const READ: Kind = Kind(0x010B);
    /// Sends part of a transaction's redo records ahead of its COMMIT.
    pub const STAGE: Kind = Kind(0x010D);
    /// VOLUME_FILE (file-server sessions).
    pub const VOLUME_FILE: Kind = Kind(0x010F);
    /// WRITTEN (file-server sessions).
    pub const WRITTEN: Kind = Kind(0x0110);
    /// LOCK_STATS: the server's lock-manager counters (any session).
    pub const LOCK_STATS: Kind = Kind(0x0111);
    /// SNAPSHOT: begins a read-only transaction at a snapshot.
    pub const SNAPSHOT: Kind = Kind(0x0112);
    /// PLACE: X on the first of several candidate pages with room for an
    /// insert.
    pub const PLACE: Kind = Kind(0x0113);
    /// APPEND: appends kept at object grain by the server, applied at the
    /// transaction's commit.
    pub const APPEND: Kind = Kind(0x0114);
}

impl ErrorCode {
    /// The transaction was a deadlock victim: abort and retry.
    pub const DEADLOCK: ErrorCode = ErrorCode(0x1001);
    /// A lock wait timed out.
    pub const LOCK_TIMEOUT: ErrorCode = ErrorCode(0x1002);
    /// No such object, page or transaction.
    pub const NOT_FOUND: ErrorCode = ErrorCode(0x1003);
    /// Damaged data on the server (a page or the log).
    pub const CORRUPT: ErrorCode = ErrorCode(0x1004);
    /// The request made no sense (a page past the end, a refused record).
    pub const INVALID: ErrorCode = ErrorCode(0x1005);
    /// The server's database refuses work after an I/O failure.
    pub const POISONED: ErrorCode = ErrorCode(0x1006);
    /// The transaction is doomed by an earlier error: abort it.
    pub const DOOMED: ErrorCode = ErrorCode(0x1007);
    /// A limit was exceeded.
    pub const LIMIT: ErrorCode = ErrorCode(0x1008);
    /// An I/O error on the server.
    pub const IO: ErrorCode = ErrorCode(0x1009);
    /// The session's role does not allow the request (a `read` user changing something, a
    /// `write` user changing the catalog).
    pub const DENIED: ErrorCode = ErrorCode(0x100A);
    /// The server ended the session (in a GOODBYE): it did not answer a callback within the
    /// lock timeout, so its rights were taken and its transactions aborted.
    pub const SESSION_ENDED: ErrorCode = ErrorCode(0x100B);
    /// A snapshot ran so long that the versions it needed outgrew the
    /// server's version store, and it was ended early: begin a new one.
    pub const SNAPSHOT_TOO_OLD: ErrorCode = ErrorCode(0x100C);
}

fn malformed(what: &'static str, problem: &'static str) -> MessageError {
    MessageError::Malformed { what, problem }
}

mod request;
pub use request::PageRequest;

mod replies;
pub use replies::*;

#[cfg(test)]
mod tests;
