//! The page service's requests: [`PageRequest`], encoding and decoding
//! itself with the one byte [`Writer`] and [`Reader`]. The byte layout of each is in the module
//! table of [`page_service`](super).

use super::{
    malformed, MessageError, Reader, Writer, COMMIT_RECORDS_MAX, FETCH_CACHE, FETCH_PAGES_MAX, FETCH_U, GROUP_NAME_MAX,
    LOCK_MODE_U, RESOURCE_GROUP,
};
use crate::frame::Kind;
use crate::object_service::{Change, COMMIT_CHANGES_MAX};

/// A page-service request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PageRequest {
    /// FETCH.
    Fetch {
        /// The transaction.
        txn: u64,
        /// [`FETCH_S`](super::FETCH_S), [`FETCH_X`](super::FETCH_X), [`FETCH_TRY_INSERT`](super::FETCH_TRY_INSERT),
        /// [`FETCH_SNAPSHOT`](super::FETCH_SNAPSHOT) or [`FETCH_U`](super::FETCH_U).
        mode: u8,
        /// The group an insert wants ([`FETCH_TRY_INSERT`](super::FETCH_TRY_INSERT); else [`NO_GROUP`](super::NO_GROUP)).
        group: u32,
        /// The pages, with the LSN of the client's cached copy (0: none), at
        /// most [`FETCH_PAGES_MAX`](super::FETCH_PAGES_MAX).
        pages: Vec<(u32, u64)>,
    },
    /// PLACE: X on the first of `pages`, in order, that an insert into
    /// `group` of a record needing `need` bytes may use now (see the
    /// module docs).
    Place {
        /// The transaction.
        txn: u64,
        /// The client answers callbacks ([`FETCH_CACHE`](super::FETCH_CACHE) in a FETCH).
        cache: bool,
        /// The group the insert is into.
        group: u32,
        /// Bytes the record needs on the page: its payload's length (a
        /// page has room if the largest payload an insert could place
        /// there now is at least this).
        need: u32,
        /// The candidate pages, in the order to try them, with the LSN of
        /// the client's cached copy (0: none); 1 to
        /// [`FETCH_PAGES_MAX`](super::FETCH_PAGES_MAX).
        pages: Vec<(u32, u64)>,
    },
    /// ALLOCATE.
    Allocate {
        /// The transaction.
        txn: u64,
        /// The group.
        group: u32,
        /// A page to allocate near, or [`NO_PAGE`](super::NO_PAGE).
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
        /// [`RESOURCE_PAGE`](super::RESOURCE_PAGE) or [`RESOURCE_GROUP`](super::RESOURCE_GROUP).
        resource: u8,
        /// The page or group id.
        id: u32,
        /// [`LOCK_MODE_IS`](super::LOCK_MODE_IS) … [`LOCK_MODE_U`](super::LOCK_MODE_U).
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
    /// VOLUME_FILE: the path of the volume file (a file-server client reads
    /// and writes its pages there).
    VolumeFile,
    /// WRITTEN: a file-server client wrote and synced the pages of its
    /// committed transaction; the server releases its locks.
    Written {
        /// The transaction.
        txn: u64,
    },
    /// LOCK_STATS: the server's lock-manager counters
    /// ([`LockCounters`](super::LockCounters)); any session may ask.
    LockStats,
    /// SNAPSHOT: begins `txn` as a read-only transaction at a snapshot;
    /// the reply is its window ([`SnapshotInfo`](super::SnapshotInfo)).
    Snapshot {
        /// The transaction (new to the session).
        txn: u64,
    },
    /// APPEND: appends the transaction asks the server to keep at object
    /// grain and apply at its commit (see the module docs); the reply
    /// names the pages whose appends the server keeps.
    Append {
        /// The transaction.
        txn: u64,
        /// The appends, each a [`Change::Append`] (1 to
        /// [`COMMIT_CHANGES_MAX`]), in page order and per object in the
        /// order made.
        appends: Vec<Change>,
    },
}

/// Writes `count u16, (page u32, u64) × count` for at most `max` pairs (a
/// FETCH's pages and the LSNs of the client's copies).
fn put_page_pairs(w: &mut Writer, pairs: &[(u32, u64)], max: usize) {
    let pairs = &pairs[..pairs.len().min(max)];
    w.put_u16(pairs.len() as u16);
    for (p, v) in pairs {
        w.put_u32(*p);
        w.put_u64(*v);
    }
}

/// Reads what [`put_page_pairs`] wrote: 1 to `max` pairs, else `bad`.
fn get_page_pairs(
    r: &mut Reader<'_>,
    what: &'static str,
    max: usize,
    bad: &'static str,
) -> Result<Vec<(u32, u64)>, MessageError> {
    let count = r.u16("page count")? as usize;
    if count == 0 || count > max {
        return Err(malformed(what, bad));
    }
    r.check_count("page count", count as u64, 12)?;
    (0..count)
        .map(|_| Ok((r.u32("a page")?, r.u64("its LSN or epoch")?)))
        .collect()
}

/// A flag byte: 0 or 1, else `bad`.
fn get_flag(r: &mut Reader<'_>, what: &'static str, field: &str, bad: &'static str) -> Result<bool, MessageError> {
    match r.u8(field)? {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(malformed(what, bad)),
    }
}

impl PageRequest {
    /// The client transaction the request runs in, if it names one.
    pub fn txn(&self) -> Option<u64> {
        match self {
            PageRequest::Fetch { txn, .. }
            | PageRequest::Place { txn, .. }
            | PageRequest::Allocate { txn, .. }
            | PageRequest::Free { txn, .. }
            | PageRequest::Commit { txn, .. }
            | PageRequest::Stage { txn, .. }
            | PageRequest::Abort { txn }
            | PageRequest::Lock { txn, .. }
            | PageRequest::GroupPages { txn, .. }
            | PageRequest::Written { txn, .. }
            | PageRequest::Append { txn, .. }
            | PageRequest::Snapshot { txn } => Some(*txn),
            PageRequest::Volume
            | PageRequest::Groups
            | PageRequest::Group { .. }
            | PageRequest::Read { .. }
            | PageRequest::VolumeFile
            | PageRequest::LockStats => None,
        }
    }

    /// The request's kind and body.
    pub fn encode(&self) -> (Kind, Vec<u8>) {
        let mut w = Writer::new();
        let kind = self.put(&mut w);
        (kind, w.into_bytes())
    }

    /// Writes the body; returns the kind.
    fn put(&self, w: &mut Writer) -> Kind {
        match self {
            PageRequest::Fetch {
                txn,
                mode,
                group,
                pages,
            } => {
                w.put_u64(*txn);
                w.put_u8(*mode);
                w.put_u32(*group);
                put_page_pairs(w, pages, u16::MAX as usize);
                Kind::FETCH
            }
            PageRequest::Place {
                txn,
                cache,
                group,
                need,
                pages,
            } => {
                w.put_u64(*txn);
                w.put_u8(u8::from(*cache));
                w.put_u32(*group);
                w.put_u32(*need);
                put_page_pairs(w, pages, u16::MAX as usize);
                Kind::PLACE
            }
            PageRequest::Allocate {
                txn,
                group,
                near,
                page_type,
            } => {
                w.put_u64(*txn);
                w.put_u32(*group);
                w.put_u32(*near);
                w.put_u8(*page_type);
                Kind::ALLOCATE
            }
            PageRequest::Free { txn, page } => {
                w.put_u64(*txn);
                w.put_u32(*page);
                Kind::FREE
            }
            PageRequest::Commit { txn, records } => {
                put_records(w, *txn, records);
                Kind::COMMIT
            }
            PageRequest::Stage { txn, records } => {
                put_records(w, *txn, records);
                Kind::STAGE
            }
            PageRequest::Lock {
                txn,
                resource,
                id,
                mode,
                try_only,
            } => {
                w.put_u64(*txn);
                w.put_u8(*resource);
                w.put_u32(*id);
                w.put_u8(*mode);
                w.put_u8(u8::from(*try_only));
                Kind::LOCK
            }
            _ => self.put_other(w),
        }
    }

    /// [`PageRequest::put`] for the requests of one or two fields.
    fn put_other(&self, w: &mut Writer) -> Kind {
        match self {
            PageRequest::Abort { txn } => {
                w.put_u64(*txn);
                Kind::ABORT
            }
            PageRequest::Written { txn } => {
                w.put_u64(*txn);
                Kind::WRITTEN
            }
            PageRequest::Snapshot { txn } => {
                w.put_u64(*txn);
                Kind::SNAPSHOT
            }
            PageRequest::Append { txn, appends } => {
                w.put_u64(*txn);
                w.put_u32(appends.len() as u32);
                for a in appends {
                    a.put(w);
                }
                Kind::APPEND
            }
            PageRequest::GroupPages { txn, group } => {
                w.put_u64(*txn);
                w.put_u32(*group);
                Kind::GROUP_PAGES
            }
            PageRequest::Group { create, name } => {
                w.put_u8(u8::from(*create));
                w.put_bytes16(name.as_bytes());
                Kind::GROUP
            }
            PageRequest::Read { page } => {
                w.put_u32(*page);
                Kind::READ
            }
            PageRequest::Volume => Kind::VOLUME,
            PageRequest::Groups => Kind::GROUPS,
            PageRequest::VolumeFile => Kind::VOLUME_FILE,
            PageRequest::LockStats => Kind::LOCK_STATS,
            _ => unreachable!("put_other is called for the requests put does not write"),
        }
    }

    /// Decodes a request; an unknown kind is `Ok(None)` (another service's).
    pub fn decode(kind: Kind, body: &[u8]) -> Result<Option<PageRequest>, MessageError> {
        let what = "page service request";
        let mut r = Reader::within(what, body);
        let req = match kind {
            Kind::FETCH => Self::get_fetch(&mut r, what)?,
            Kind::PLACE => PageRequest::Place {
                txn: r.u64("txn")?,
                cache: get_flag(&mut r, what, "the cache flag", "PLACE cache flag is neither 0 nor 1")?,
                group: r.u32("group")?,
                need: r.u32("need")?,
                pages: get_page_pairs(&mut r, what, FETCH_PAGES_MAX, "a PLACE names 1 to 256 pages")?,
            },
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
            Kind::LOCK => Self::get_lock(&mut r, what)?,
            Kind::GROUP_PAGES => PageRequest::GroupPages {
                txn: r.u64("txn")?,
                group: r.u32("group")?,
            },
            Kind::GROUPS => PageRequest::Groups,
            Kind::GROUP => Self::get_group(&mut r, what)?,
            Kind::READ => PageRequest::Read { page: r.u32("page")? },
            Kind::VOLUME_FILE => PageRequest::VolumeFile,
            Kind::WRITTEN => PageRequest::Written { txn: r.u64("txn")? },
            Kind::LOCK_STATS => PageRequest::LockStats,
            Kind::SNAPSHOT => PageRequest::Snapshot { txn: r.u64("txn")? },
            Kind::APPEND => Self::get_append(&mut r, what)?,
            _ => return Ok(None),
        };
        r.finish("the body")?;
        Ok(Some(req))
    }

    fn get_fetch(r: &mut Reader<'_>, what: &'static str) -> Result<PageRequest, MessageError> {
        let txn = r.u64("txn")?;
        let mode = r.u8("mode")?;
        if mode & !FETCH_CACHE > FETCH_U {
            return Err(malformed(
                what,
                "FETCH mode is not 0 (S), 1 (X), 2 (try insert), 3 (snapshot) or 4 (U), with or without 0x80 (cache)",
            ));
        }
        let group = r.u32("group")?;
        let pages = get_page_pairs(r, what, FETCH_PAGES_MAX, "a FETCH names 1 to 256 pages")?;
        Ok(PageRequest::Fetch {
            txn,
            mode,
            group,
            pages,
        })
    }

    fn get_append(r: &mut Reader<'_>, what: &'static str) -> Result<PageRequest, MessageError> {
        let txn = r.u64("txn")?;
        let count = r.u32("an append count")?;
        if count == 0 || count > COMMIT_CHANGES_MAX {
            return Err(malformed(what, "an APPEND carries 1 to 2^20 appends"));
        }
        // An append is at least its OID, kind, class, two lengths, count
        // and elements' length.
        let min = crate::object_service::OID_BYTES + 1 + 4 + 2 + 2 + 4 + 4;
        let count = r.check_count("an append count", u64::from(count), min)?;
        let mut appends = Vec::with_capacity(count);
        for _ in 0..count {
            let c = Change::get(r, what)?;
            if !matches!(c, Change::Append { .. }) {
                return Err(malformed(what, "an APPEND carries appends only (change kind 2)"));
            }
            appends.push(c);
        }
        Ok(PageRequest::Append { txn, appends })
    }

    fn get_lock(r: &mut Reader<'_>, what: &'static str) -> Result<PageRequest, MessageError> {
        let txn = r.u64("txn")?;
        let resource = r.u8("resource")?;
        if resource > RESOURCE_GROUP {
            return Err(malformed(what, "LOCK resource is not 0 (page) or 1 (group)"));
        }
        let id = r.u32("id")?;
        let mode = r.u8("mode")?;
        if mode > LOCK_MODE_U {
            return Err(malformed(what, "LOCK mode is not 0 to 5 (IS, IX, S, SIX, X, U)"));
        }
        let try_only = get_flag(r, what, "the try flag", "LOCK try flag is neither 0 nor 1")?;
        Ok(PageRequest::Lock {
            txn,
            resource,
            id,
            mode,
            try_only,
        })
    }

    fn get_group(r: &mut Reader<'_>, what: &'static str) -> Result<PageRequest, MessageError> {
        let create = get_flag(r, what, "the create flag", "GROUP create flag is neither 0 nor 1")?;
        let len = r.u16("the group name's length")? as usize;
        if len == 0 || len > GROUP_NAME_MAX {
            return Err(malformed(what, "a group name is 1 to 255 bytes"));
        }
        let name = std::str::from_utf8(r.take(len, "the group name")?)
            .map_err(|_| malformed(what, "a group name is not UTF-8"))?
            .to_string();
        Ok(PageRequest::Group { create, name })
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
