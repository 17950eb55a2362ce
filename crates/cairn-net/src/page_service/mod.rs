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
//! | `0x010C` CALLBACK_REPLY | [`CallbackReply`]: `callback u64, page u32, epoch u64, writer u64, count u16, txn u64 × count` | empty |
//! | `0x010D` STAGE | `txn u64, count u32, (len u32, record) × count` (as COMMIT) | empty, once verified and staged |
//! | `0x010E` RELEASE | `count u16, (page u32, epoch u64) × count` | empty |
//! | `0x010F` VOLUME_FILE | empty | the volume file's path (bytes) |
//! | `0x0110` WRITTEN | `txn u64` | empty |
//!
//! and one server-initiated message, a NOTICE whose body is a [`Callback`]:
//! `callback u64, page u32, epoch u64`.
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
//! epoch. Before
//! another client's transaction may take X on the page, the server sends a
//! CALLBACK naming the page and that epoch; the client answers with
//! CALLBACK_REPLY: no transactions (it gave the right up) or the
//! transactions of its own still reading the page (the server then takes S
//! for each of them, so the writer waits for them in the lock table, where
//! a deadlock through a callback is found like any other). A CALLBACK_REPLY
//! with callback id 0 answers no callback: before one of its transactions
//! asks for X on a page it caches, the client names its *other*
//! transactions reading the page under its right the same way (its own
//! right stays). RELEASE gives rights back unasked (pages the client no
//! longer caches), so neither side's table of rights grows with every page
//! a client ever read; a right whose epoch is not the one named (renewed
//! since) stays.
//! A FETCH takes the lock it needs with the read, so locking adds no round
//! trip, and names up to [`FETCH_PAGES_MAX`] pages at once (prefetch). Its
//! mode is [`FETCH_S`], [`FETCH_X`] or [`FETCH_TRY_INSERT`] (take X only if
//! nobody is in the way and the page is an in-use page of `group`: a
//! candidate page for an insert). For each page the client names the LSN of
//! the copy it caches (0: none); if the committed page still has that LSN
//! the reply says so instead of shipping the image again. Every image
//! travels sealed (its CRC32C set), and the client verifies it as a page
//! read from disk. A COMMIT carries the PAGE redo records the embedded
//! commit builds; the server verifies each before it reaches the log, and
//! answers with the LSN each changed page was installed with. READ is the
//! committed image without a lock: a client refilling its cache with a page
//! its transaction already holds a lock on. Lock modes travel as
//! [`LOCK_MODE_IS`] … [`LOCK_MODE_X`]. Errors are
//! [`Fault`](crate::message::Fault)s with the codes below, so a client can
//! tell a deadlock (retry) from damage.
//!
//! **File-server sessions** (architecture 3) use the same service with
//! three differences: a FETCH takes the lock and answers
//! [`FetchStatus::Locked`] without an image (the client reads the page from
//! the volume file VOLUME_FILE names, which the server has made current),
//! and never grants a right to cache; a COMMIT carries full page images
//! and its reply leaves the transaction's locks held; WRITTEN, sent once the
//! client has written and synced the pages, releases them.

use crate::frame::Kind;
use crate::message::{ErrorCode, MessageError, Reader, Writer};

/// Pages one FETCH may name.
pub const FETCH_PAGES_MAX: usize = 256;
/// Rights one RELEASE may give back.
pub const RELEASE_RIGHTS_MAX: usize = 4096;
/// Transactions a CALLBACK_REPLY may name.
pub const TXNS_MAX: usize = 1024;
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
    /// Answers a callback.
    pub const CALLBACK_REPLY: Kind = Kind(0x010C);
    /// Sends part of a transaction's redo records ahead of its COMMIT.
    pub const STAGE: Kind = Kind(0x010D);
    /// Gives rights to cache back (see [`PageRequest::Release`]).
    pub const RELEASE: Kind = Kind(0x010E);
    /// VOLUME_FILE (file-server sessions).
    pub const VOLUME_FILE: Kind = Kind(0x010F);
    /// WRITTEN (file-server sessions).
    pub const WRITTEN: Kind = Kind(0x0110);
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
}

/// A page-service request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PageRequest {
    /// FETCH.
    Fetch {
        /// The transaction.
        txn: u64,
        /// [`FETCH_S`], [`FETCH_X`] or [`FETCH_TRY_INSERT`].
        mode: u8,
        /// The group an insert wants ([`FETCH_TRY_INSERT`]; else [`NO_GROUP`]).
        group: u32,
        /// The pages, with the LSN of the client's cached copy (0: none), at
        /// most [`FETCH_PAGES_MAX`].
        pages: Vec<(u32, u64)>,
    },
    /// ALLOCATE.
    Allocate {
        /// The transaction.
        txn: u64,
        /// The group.
        group: u32,
        /// A page to allocate near, or [`NO_PAGE`].
        near: u32,
        /// The new page's type byte.
        page_type: u8,
    },
    /// FREE.
    Free {
        /// The transaction.
        txn: u64,
        /// The page.
        page: u32,
    },
    /// COMMIT.
    Commit {
        /// The transaction.
        txn: u64,
        /// PAGE redo records.
        records: Vec<Vec<u8>>,
    },
    /// STAGE: records verified and kept for the COMMIT that follows (a
    /// transaction larger than one message).
    Stage {
        /// The transaction.
        txn: u64,
        /// PAGE redo records.
        records: Vec<Vec<u8>>,
    },
    /// ABORT.
    Abort {
        /// The transaction.
        txn: u64,
    },
    /// VOLUME.
    Volume,
    /// LOCK.
    Lock {
        /// The transaction.
        txn: u64,
        /// [`RESOURCE_PAGE`] or [`RESOURCE_GROUP`].
        resource: u8,
        /// The page or group id.
        id: u32,
        /// [`LOCK_MODE_IS`] … [`LOCK_MODE_X`].
        mode: u8,
        /// Do not wait: answer "not granted" instead.
        try_only: bool,
    },
    /// GROUP_PAGES.
    GroupPages {
        /// The transaction (its view: its own allocations, not others').
        txn: u64,
        /// The group.
        group: u32,
    },
    /// GROUPS.
    Groups,
    /// GROUP.
    Group {
        /// Create the group if there is none of that name.
        create: bool,
        /// The name, at most [`GROUP_NAME_MAX`] bytes of UTF-8.
        name: String,
    },
    /// READ.
    Read {
        /// The page.
        page: u32,
    },
    /// CALLBACK_REPLY.
    CallbackReply(CallbackReply),
    /// RELEASE: the client gives up its rights to cache these pages (page,
    /// epoch of the right), unasked; at most [`RELEASE_RIGHTS_MAX`]. A right
    /// of another epoch (renewed since) is kept. Needs no answer: a client
    /// sends it with its next request and never waits for the reply.
    Release {
        /// The rights given back.
        rights: Vec<(u32, u64)>,
    },
    /// VOLUME_FILE: the path of the volume file (a file-server client reads
    /// and writes its pages there).
    VolumeFile,
    /// WRITTEN: a file-server client wrote and synced the pages of its
    /// committed transaction; the server releases its locks.
    Written {
        /// The transaction.
        txn: u64,
    },
}

/// A callback (the body of a NOTICE): give up the right to cache `page`
/// granted with `epoch`, or say which transactions still read it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Callback {
    /// The server's id for this callback.
    pub id: u64,
    /// The page.
    pub page: u32,
    /// The epoch of the right being called back (a FETCH part's `cover`).
    pub epoch: u64,
}

impl Callback {
    /// Encodes the NOTICE body.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(20);
        w.put(&self.id.to_le_bytes());
        w.put(&self.page.to_le_bytes());
        w.put(&self.epoch.to_le_bytes());
        w.into_bytes()
    }

    /// Decodes a NOTICE body.
    pub fn decode(body: &[u8]) -> Result<Callback, MessageError> {
        let mut r = Reader::within("CALLBACK notice", body);
        let c = Callback {
            id: r.u64("id")?,
            page: r.u32("page")?,
            epoch: r.u64("epoch")?,
        };
        r.finish("the body")?;
        Ok(c)
    }
}

/// The answer to a [`Callback`], or (id 0) a client naming its
/// transactions that read a page under its right before another of its
/// transactions asks for X on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallbackReply {
    /// The callback answered; 0: none (the client's right stays).
    pub id: u64,
    /// Its page.
    pub page: u32,
    /// Its epoch.
    pub epoch: u64,
    /// Callback id 0: the client's transaction about to ask for X (its
    /// readers named here must not wait for it); else 0.
    pub writer: u64,
    /// The client's transactions still reading the page (empty: the right
    /// is given up and nobody uses the page), at most [`TXNS_MAX`].
    pub in_use_by: Vec<u64>,
}

impl PageRequest {
    /// The client transaction the request runs in, if it names one.
    pub fn txn(&self) -> Option<u64> {
        match self {
            PageRequest::Fetch { txn, .. }
            | PageRequest::Allocate { txn, .. }
            | PageRequest::Free { txn, .. }
            | PageRequest::Commit { txn, .. }
            | PageRequest::Stage { txn, .. }
            | PageRequest::Abort { txn }
            | PageRequest::Lock { txn, .. }
            | PageRequest::GroupPages { txn, .. }
            | PageRequest::Written { txn, .. } => Some(*txn),
            PageRequest::Volume
            | PageRequest::Groups
            | PageRequest::Group { .. }
            | PageRequest::Read { .. }
            | PageRequest::CallbackReply(_)
            | PageRequest::Release { .. }
            | PageRequest::VolumeFile => None,
        }
    }

    /// The request's kind and body.
    pub fn encode(&self) -> (Kind, Vec<u8>) {
        let mut w = Writer::new();
        let kind = match self {
            PageRequest::Fetch {
                txn,
                mode,
                group,
                pages,
            } => {
                w.put(&txn.to_le_bytes());
                w.put_u8(*mode);
                w.put(&group.to_le_bytes());
                w.put(&(pages.len().min(u16::MAX as usize) as u16).to_le_bytes());
                for (p, lsn) in pages.iter().take(u16::MAX as usize) {
                    w.put(&p.to_le_bytes());
                    w.put(&lsn.to_le_bytes());
                }
                Kind::FETCH
            }
            PageRequest::Allocate {
                txn,
                group,
                near,
                page_type,
            } => {
                w.put(&txn.to_le_bytes());
                w.put(&group.to_le_bytes());
                w.put(&near.to_le_bytes());
                w.put_u8(*page_type);
                Kind::ALLOCATE
            }
            PageRequest::Free { txn, page } => {
                w.put(&txn.to_le_bytes());
                w.put(&page.to_le_bytes());
                Kind::FREE
            }
            PageRequest::Commit { txn, records } => {
                put_records(&mut w, *txn, records);
                Kind::COMMIT
            }
            PageRequest::Stage { txn, records } => {
                put_records(&mut w, *txn, records);
                Kind::STAGE
            }
            PageRequest::Abort { txn } => {
                w.put(&txn.to_le_bytes());
                Kind::ABORT
            }
            PageRequest::Volume => Kind::VOLUME,
            PageRequest::Lock {
                txn,
                resource,
                id,
                mode,
                try_only,
            } => {
                w.put(&txn.to_le_bytes());
                w.put_u8(*resource);
                w.put(&id.to_le_bytes());
                w.put_u8(*mode);
                w.put_u8(u8::from(*try_only));
                Kind::LOCK
            }
            PageRequest::GroupPages { txn, group } => {
                w.put(&txn.to_le_bytes());
                w.put(&group.to_le_bytes());
                Kind::GROUP_PAGES
            }
            PageRequest::Groups => Kind::GROUPS,
            PageRequest::Group { create, name } => {
                w.put_u8(u8::from(*create));
                let n = &name.as_bytes()[..name.len().min(u16::MAX as usize)];
                w.put(&(n.len() as u16).to_le_bytes());
                w.put(n);
                Kind::GROUP
            }
            PageRequest::Read { page } => {
                w.put(&page.to_le_bytes());
                Kind::READ
            }
            PageRequest::CallbackReply(c) => {
                w.put(&c.id.to_le_bytes());
                w.put(&c.page.to_le_bytes());
                w.put(&c.epoch.to_le_bytes());
                w.put(&c.writer.to_le_bytes());
                put_txns(&mut w, &c.in_use_by);
                Kind::CALLBACK_REPLY
            }
            PageRequest::Release { rights } => {
                let n = rights.len().min(RELEASE_RIGHTS_MAX);
                w.put(&(n as u16).to_le_bytes());
                for (p, epoch) in &rights[..n] {
                    w.put(&p.to_le_bytes());
                    w.put(&epoch.to_le_bytes());
                }
                Kind::RELEASE
            }
            PageRequest::VolumeFile => Kind::VOLUME_FILE,
            PageRequest::Written { txn } => {
                w.put(&txn.to_le_bytes());
                Kind::WRITTEN
            }
        };
        (kind, w.into_bytes())
    }

    /// Decodes a request; an unknown kind is `Ok(None)` (another service's).
    pub fn decode(kind: Kind, body: &[u8]) -> Result<Option<PageRequest>, MessageError> {
        let what = "page service request";
        let mut r = Reader::within(what, body);
        let req = match kind {
            Kind::FETCH => {
                let txn = r.u64("txn")?;
                let mode = r.u8("mode")?;
                if mode & !FETCH_CACHE > FETCH_TRY_INSERT {
                    return Err(malformed(
                        what,
                        "FETCH mode is not 0 (S), 1 (X) or 2 (try insert), with or without 0x80 (cache)",
                    ));
                }
                let group = r.u32("group")?;
                let count = r.u16("count")? as usize;
                if count == 0 || count > FETCH_PAGES_MAX {
                    return Err(malformed(what, "a FETCH names 1 to 256 pages"));
                }
                r.check_count("a count", count as u64, 12)?;
                let mut pages = Vec::with_capacity(count);
                for _ in 0..count {
                    pages.push((r.u32("a page")?, r.u64("an LSN or epoch")?));
                }
                PageRequest::Fetch {
                    txn,
                    mode,
                    group,
                    pages,
                }
            }
            Kind::ALLOCATE => PageRequest::Allocate {
                txn: r.u64("txn")?,
                group: r.u32("group")?,
                near: r.u32("near")?,
                page_type: r.u8("page type")?,
            },
            Kind::FREE => PageRequest::Free {
                txn: r.u64("txn")?,
                page: r.u32("page")?,
            },
            Kind::COMMIT => {
                let (txn, records) = get_records(&mut r, what)?;
                PageRequest::Commit { txn, records }
            }
            Kind::STAGE => {
                let (txn, records) = get_records(&mut r, what)?;
                PageRequest::Stage { txn, records }
            }
            Kind::ABORT => PageRequest::Abort { txn: r.u64("txn")? },
            Kind::VOLUME => PageRequest::Volume,
            Kind::LOCK => {
                let txn = r.u64("txn")?;
                let resource = r.u8("resource")?;
                if resource > RESOURCE_GROUP {
                    return Err(malformed(what, "LOCK resource is not 0 (page) or 1 (group)"));
                }
                let id = r.u32("id")?;
                let mode = r.u8("mode")?;
                if mode > LOCK_MODE_X {
                    return Err(malformed(what, "LOCK mode is not 0 to 4 (IS, IX, S, SIX, X)"));
                }
                let try_only = match r.u8("a flag")? {
                    0 => false,
                    1 => true,
                    _ => return Err(malformed(what, "LOCK try flag is neither 0 nor 1")),
                };
                PageRequest::Lock {
                    txn,
                    resource,
                    id,
                    mode,
                    try_only,
                }
            }
            Kind::GROUP_PAGES => PageRequest::GroupPages {
                txn: r.u64("txn")?,
                group: r.u32("group")?,
            },
            Kind::GROUPS => PageRequest::Groups,
            Kind::GROUP => {
                let create = match r.u8("a flag")? {
                    0 => false,
                    1 => true,
                    _ => return Err(malformed(what, "GROUP create flag is neither 0 nor 1")),
                };
                let len = r.u16("the group name's length")? as usize;
                if len == 0 || len > GROUP_NAME_MAX {
                    return Err(malformed(what, "a group name is 1 to 255 bytes"));
                }
                let name = std::str::from_utf8(r.take(len, "the group name")?)
                    .map_err(|_| malformed(what, "a group name is not UTF-8"))?
                    .to_string();
                PageRequest::Group { create, name }
            }
            Kind::READ => PageRequest::Read { page: r.u32("page")? },
            Kind::CALLBACK_REPLY => PageRequest::CallbackReply(CallbackReply {
                id: r.u64("id")?,
                page: r.u32("page")?,
                epoch: r.u64("epoch")?,
                writer: r.u64("writer")?,
                in_use_by: get_txns(&mut r, what)?,
            }),
            Kind::RELEASE => {
                let count = r.u16("count")? as usize;
                if count == 0 || count > RELEASE_RIGHTS_MAX {
                    return Err(malformed(what, "a RELEASE names 1 to 4096 rights"));
                }
                r.check_count("a count", count as u64, 12)?;
                let mut rights = Vec::with_capacity(count);
                for _ in 0..count {
                    rights.push((r.u32("a page")?, r.u64("an LSN or epoch")?));
                }
                PageRequest::Release { rights }
            }
            Kind::VOLUME_FILE => PageRequest::VolumeFile,
            Kind::WRITTEN => PageRequest::Written { txn: r.u64("txn")? },
            _ => return Ok(None),
        };
        r.finish("the body")?;
        Ok(Some(req))
    }
}

/// Writes `txn u64, count u32, (len u32, record) × count` (COMMIT, STAGE).
fn put_records(w: &mut Writer, txn: u64, records: &[Vec<u8>]) {
    w.put(&txn.to_le_bytes());
    w.put(&(records.len() as u32).to_le_bytes());
    for r in records {
        w.put(&(r.len() as u32).to_le_bytes());
        w.put(r);
    }
}

/// Reads what [`put_records`] wrote.
fn get_records(r: &mut Reader<'_>, what: &'static str) -> Result<(u64, Vec<Vec<u8>>), MessageError> {
    let txn = r.u64("txn")?;
    let count = r.u32("count")?;
    if count > COMMIT_RECORDS_MAX {
        return Err(malformed(what, "a COMMIT or STAGE carries too many records"));
    }
    r.check_count("a count", count as usize as u64, 4)?;
    let mut records = Vec::with_capacity(count as usize);
    for _ in 0..count {
        records.push(r.bytes32("a record")?.to_vec());
    }
    Ok((txn, records))
}

/// Writes `count u16, txn u64 × count` (at most [`TXNS_MAX`]).
pub(crate) fn put_txns(w: &mut Writer, txns: &[u64]) {
    let txns = &txns[..txns.len().min(TXNS_MAX)];
    w.put(&(txns.len() as u16).to_le_bytes());
    for t in txns {
        w.put(&t.to_le_bytes());
    }
}

/// Reads what [`put_txns`] wrote.
pub(crate) fn get_txns(r: &mut Reader<'_>, what: &'static str) -> Result<Vec<u64>, MessageError> {
    let n = r.u16("a transaction count")? as usize;
    if n > TXNS_MAX {
        return Err(malformed(what, "a list of more than 1,024 transactions"));
    }
    r.check_count("a count", n as u64, 8)?;
    (0..n).map(|_| Ok(r.u64("a transaction")?)).collect()
}

fn malformed(what: &'static str, problem: &'static str) -> MessageError {
    MessageError::Malformed { what, problem }
}

/// What a FETCH part says about one page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FetchStatus {
    /// Locked; the committed image follows.
    Image,
    /// Locked; the client's copy (the LSN it named) is current.
    Unchanged,
    /// The page is not an in-use page (for this transaction); nothing was
    /// locked.
    NotInUse,
    /// A [`FETCH_TRY_INSERT`] that is not granted: another transaction holds
    /// the page, or it is not a page of the group; nothing was locked.
    NotGranted,
    /// Locked; no image is shipped (a file-server session reads the page
    /// from the volume file).
    Locked,
}

impl FetchStatus {
    /// True if the page is locked now (with its image, revalidated, or to
    /// be read from the volume file).
    pub fn is_locked(self) -> bool {
        matches!(self, FetchStatus::Image | FetchStatus::Unchanged | FetchStatus::Locked)
    }

    fn to_u8(self) -> u8 {
        match self {
            FetchStatus::Image => 0,
            FetchStatus::Unchanged => 1,
            FetchStatus::NotInUse => 2,
            FetchStatus::NotGranted => 3,
            FetchStatus::Locked => 4,
        }
    }

    fn from_u8(b: u8) -> Option<FetchStatus> {
        Some(match b {
            0 => FetchStatus::Image,
            1 => FetchStatus::Unchanged,
            2 => FetchStatus::NotInUse,
            3 => FetchStatus::NotGranted,
            4 => FetchStatus::Locked,
            _ => return None,
        })
    }
}

/// One FETCH part: `page u32, status u8, group u32, page_count u32, lsn
/// u64, cover u64`, then the sealed image if the status is
/// [`FetchStatus::Image`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fetched<'a> {
    /// The page.
    pub page: u32,
    /// What happened.
    pub status: FetchStatus,
    /// The group owning the page's extent, or [`NO_GROUP`].
    pub group: u32,
    /// Pages in the volume now.
    pub page_count: u32,
    /// The committed page's LSN (0 if not locked).
    pub lsn: u64,
    /// Nonzero: the client may keep the page across transactions until the
    /// server calls back this epoch (callback locking); 0: only for this
    /// transaction.
    pub cover: u64,
    /// The image ([`FetchStatus::Image`] only; else empty).
    pub image: &'a [u8],
}

/// Bytes of a FETCH part before the image.
pub const FETCHED_HEADER: usize = 29;

impl Fetched<'_> {
    /// Encodes the part.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(FETCHED_HEADER + self.image.len());
        w.put(&self.page.to_le_bytes());
        w.put_u8(self.status.to_u8());
        w.put(&self.group.to_le_bytes());
        w.put(&self.page_count.to_le_bytes());
        w.put(&self.lsn.to_le_bytes());
        w.put(&self.cover.to_le_bytes());
        w.put(self.image);
        w.into_bytes()
    }

    /// Decodes a part; the image's own checks (checksum, page id) are the
    /// caller's.
    pub fn decode(body: &[u8]) -> Result<Fetched<'_>, MessageError> {
        let what = "FETCH part";
        let mut r = Reader::within(what, body);
        let page = r.u32("page")?;
        let status = FetchStatus::from_u8(r.u8("a flag")?).ok_or(malformed(what, "unknown page status"))?;
        let group = r.u32("group")?;
        let page_count = r.u32("page count")?;
        let lsn = r.u64("lsn")?;
        let cover = r.u64("cover")?;
        let image = &body[FETCHED_HEADER..];
        if (status == FetchStatus::Image) == image.is_empty() {
            return Err(malformed(what, "an image comes with status 0 and only then"));
        }
        Ok(Fetched {
            page,
            status,
            group,
            page_count,
            lsn,
            cover,
            image,
        })
    }
}

/// Encodes a page with its id and the volume's page count: an ALLOCATE reply.
pub fn encode_page(page: u32, page_count: u32, image: &[u8]) -> Vec<u8> {
    let mut w = Writer::with_capacity(8 + image.len());
    w.put(&page.to_le_bytes());
    w.put(&page_count.to_le_bytes());
    w.put(image);
    w.into_bytes()
}

/// Decodes an ALLOCATE reply; the image's own checks are the caller's.
pub fn decode_page(body: &[u8]) -> Result<(u32, u32, &[u8]), MessageError> {
    let mut r = Reader::within("ALLOCATE reply", body);
    let page = r.u32("page")?;
    let count = r.u32("count")?;
    Ok((page, count, &body[8..]))
}

/// Encodes a list of (page, LSN) pairs: a COMMIT reply.
pub fn encode_lsns(lsns: &[(u32, u64)]) -> Vec<u8> {
    let mut w = Writer::with_capacity(4 + 12 * lsns.len());
    w.put(&(lsns.len() as u32).to_le_bytes());
    for (p, l) in lsns {
        w.put(&p.to_le_bytes());
        w.put(&l.to_le_bytes());
    }
    w.into_bytes()
}

/// Decodes a COMMIT reply.
pub fn decode_lsns(body: &[u8]) -> Result<Vec<(u32, u64)>, MessageError> {
    let mut r = Reader::within("COMMIT reply", body);
    let n = r.count32("a count", 12)?;
    let mut lsns = Vec::with_capacity(n);
    for _ in 0..n {
        lsns.push((r.u32("a page")?, r.u64("an LSN")?));
    }
    r.finish("the body")?;
    Ok(lsns)
}

/// Encodes a list of pages: a GROUP_PAGES reply.
pub fn encode_pages(pages: &[u32]) -> Vec<u8> {
    let mut w = Writer::with_capacity(4 + 4 * pages.len());
    w.put(&(pages.len() as u32).to_le_bytes());
    for p in pages {
        w.put(&p.to_le_bytes());
    }
    w.into_bytes()
}

/// Decodes a GROUP_PAGES reply.
pub fn decode_pages(body: &[u8]) -> Result<Vec<u32>, MessageError> {
    let mut r = Reader::within("GROUP_PAGES reply", body);
    let n = r.count32("a count", 4)?;
    let pages = (0..n).map(|_| r.u32("a page")).collect::<Result<_, _>>()?;
    r.finish("the body")?;
    Ok(pages)
}

/// Encodes the groups: a GROUPS reply.
pub fn encode_groups(groups: &[(u32, String)]) -> Vec<u8> {
    let mut w = Writer::new();
    w.put(&(groups.len() as u32).to_le_bytes());
    for (id, name) in groups {
        let n = &name.as_bytes()[..name.len().min(GROUP_NAME_MAX)];
        w.put(&id.to_le_bytes());
        w.put(&(n.len() as u16).to_le_bytes());
        w.put(n);
    }
    w.into_bytes()
}

/// Decodes a GROUPS reply.
pub fn decode_groups(body: &[u8]) -> Result<Vec<(u32, String)>, MessageError> {
    let what = "GROUPS reply";
    let mut r = Reader::within(what, body);
    let n = r.count32("a count", 6)?;
    let mut groups = Vec::with_capacity(n);
    for _ in 0..n {
        let id = r.u32("id")?;
        let name = std::str::from_utf8(r.bytes16("a group name")?)
            .map_err(|_| malformed(what, "a group name is not UTF-8"))?;
        groups.push((id, name.to_string()));
    }
    r.finish("the body")?;
    Ok(groups)
}

/// The VOLUME reply's fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VolumeInfo {
    /// Bytes per page.
    pub page_size: u32,
    /// Pages in the volume.
    pub page_count: u32,
    /// The clustering region, in pages.
    pub region_pages: u32,
}

impl VolumeInfo {
    /// Encodes the reply.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(12);
        for v in [self.page_size, self.page_count, self.region_pages] {
            w.put(&v.to_le_bytes());
        }
        w.into_bytes()
    }

    /// Decodes the reply.
    pub fn decode(body: &[u8]) -> Result<VolumeInfo, MessageError> {
        let mut r = Reader::within("VOLUME reply", body);
        let info = VolumeInfo {
            page_size: r.u32("page size")?,
            page_count: r.u32("page count")?,
            region_pages: r.u32("region pages")?,
        };
        r.finish("the body")?;
        Ok(info)
    }
}

/// What a page-service [`Fault`](crate::message::Fault) carries for
/// programs in its `detail` (the message is for people): the fields of the
/// storage error, so a client rebuilds the same error, not a string. Empty
/// detail, or detail that does not decode, leaves the client with the code
/// and the message.
///
/// Encoding: `tag u8`, then for 1 (lock timeout) `waited_ms u64, mode
/// string16, resource string16`; 2 (deadlock) `cycle string16`; 3
/// (corrupt page) `page u32, reason string16`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FaultDetail {
    /// A lock wait timed out ([`ErrorCode::LOCK_TIMEOUT`]).
    LockTimeout {
        /// The resource waited for.
        resource: String,
        /// The mode asked for.
        mode: String,
        /// How long it waited.
        waited_ms: u64,
    },
    /// The transaction was chosen as a deadlock's victim ([`ErrorCode::DEADLOCK`]).
    Deadlock {
        /// The cycle, as the server's lock manager described it.
        cycle: String,
    },
    /// A page of the server's volume is damaged ([`ErrorCode::CORRUPT`]).
    Corrupt {
        /// The page.
        page: u32,
        /// What is wrong with it.
        reason: String,
    },
}

fn put_string16(w: &mut Writer, s: &str) {
    let s = crate::message::truncate_str(s, u16::MAX as usize);
    w.put(&(s.len() as u16).to_le_bytes());
    w.put(s.as_bytes());
}

impl FaultDetail {
    /// Encodes it (texts cut to 65,535 bytes at a character boundary).
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        match self {
            FaultDetail::LockTimeout {
                resource,
                mode,
                waited_ms,
            } => {
                w.put_u8(1);
                w.put(&waited_ms.to_le_bytes());
                put_string16(&mut w, mode);
                put_string16(&mut w, resource);
            }
            FaultDetail::Deadlock { cycle } => {
                w.put_u8(2);
                put_string16(&mut w, cycle);
            }
            FaultDetail::Corrupt { page, reason } => {
                w.put_u8(3);
                w.put(&page.to_le_bytes());
                put_string16(&mut w, reason);
            }
        }
        w.into_bytes()
    }

    /// Decodes a fault's detail.
    pub fn decode(body: &[u8]) -> Result<FaultDetail, MessageError> {
        let what = "page service fault detail";
        let mut r = Reader::within(what, body);
        let d = match r.u8("a flag")? {
            1 => FaultDetail::LockTimeout {
                waited_ms: r.u64("waited ms")?,
                mode: r.str16("text").map(str::to_owned)?,
                resource: r.str16("text").map(str::to_owned)?,
            },
            2 => FaultDetail::Deadlock {
                cycle: r.str16("text").map(str::to_owned)?,
            },
            3 => FaultDetail::Corrupt {
                page: r.u32("page")?,
                reason: r.str16("text").map(str::to_owned)?,
            },
            _ => return Err(malformed(what, "a fault detail tag is not 1 to 3")),
        };
        r.finish("the body")?;
        Ok(d)
    }
}

#[cfg(test)]
mod tests;
