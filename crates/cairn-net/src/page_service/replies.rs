//! The page service's replies: the parts of a FETCH ([`Fetched`]), the
//! final replies of ALLOCATE, COMMIT, GROUP_PAGES, GROUPS, VOLUME and
//! LOCK_STATS ([`LockCounters`]), and the [`FaultDetail`] of an error. The
//! byte layout of each is in the module table of [`page_service`](super).

use super::{malformed, MessageError, Reader, Writer, GROUP_NAME_MAX, SNAPSHOT_EXCLUDED_MAX};

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
    /// A [`FETCH_TRY_INSERT`](super::FETCH_TRY_INSERT) that is not granted: another transaction holds
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
    /// The group owning the page's extent, or [`NO_GROUP`](super::NO_GROUP).
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

/// A SNAPSHOT reply: what the snapshot sees. Every page image of LSN at
/// most `low`; above it, those up to `high` outside the `excluded` ranges
/// (the commits in flight when it began).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotInfo {
    /// The snapshot's LSN.
    pub low: u64,
    /// The log's end when it began.
    pub high: u64,
    /// The LSN ranges `(start, end]` it does not see, at most
    /// [`SNAPSHOT_EXCLUDED_MAX`].
    pub excluded: Vec<(u64, u64)>,
}

impl SnapshotInfo {
    /// True if a page image of LSN `lsn` is part of what the snapshot sees.
    pub fn sees(&self, lsn: u64) -> bool {
        lsn <= self.low || (lsn <= self.high && !self.excluded.iter().any(|&(s, e)| s < lsn && lsn <= e))
    }

    /// Encodes it (a server never begins a snapshot with more than
    /// [`SNAPSHOT_EXCLUDED_MAX`] ranges; past that they are cut, which
    /// [`SnapshotInfo::decode`] refuses).
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(18 + 16 * self.excluded.len());
        w.put_u64(self.low);
        w.put_u64(self.high);
        let n = self.excluded.len().min(u16::MAX as usize);
        w.put_u16(n as u16);
        for &(start, end) in &self.excluded[..n] {
            w.put_u64(start);
            w.put_u64(end);
        }
        w.into_bytes()
    }

    /// Decodes a SNAPSHOT reply: `low <= high`, at most
    /// [`SNAPSHOT_EXCLUDED_MAX`] ranges, each `(start, end]` with `low <=
    /// start < end <= high`.
    pub fn decode(body: &[u8]) -> Result<SnapshotInfo, MessageError> {
        let what = "SNAPSHOT reply";
        let mut r = Reader::within(what, body);
        let low = r.u64("low")?;
        let high = r.u64("high")?;
        if low > high {
            return Err(malformed(what, "the snapshot's LSN is past the log's end"));
        }
        let n = r.u16("count")? as usize;
        if n > SNAPSHOT_EXCLUDED_MAX {
            return Err(malformed(what, "more commits in flight than a snapshot may name"));
        }
        r.check_count("count", n as u64, 16)?;
        let mut excluded = Vec::with_capacity(n);
        for _ in 0..n {
            let (start, end) = (r.u64("a range's start")?, r.u64("a range's end")?);
            if !(low <= start && start < end && end <= high) {
                return Err(malformed(what, "a commit in flight outside the snapshot's window"));
            }
            excluded.push((start, end));
        }
        r.finish("the body")?;
        Ok(SnapshotInfo { low, high, excluded })
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

/// Decodes a COMMIT reply without kept pages' changes ([`decode_commit_reply`]
/// reads one with them).
pub fn decode_lsns(body: &[u8]) -> Result<Vec<(u32, u64)>, MessageError> {
    let reply = decode_commit_reply(body)?;
    if !reply.changes.is_empty() {
        return Err(malformed(
            "COMMIT reply",
            "changes of pages whose appends the server kept, for a transaction that sent none",
        ));
    }
    Ok(reply.lsns)
}

/// How a commit changed a page whose appends the server kept (APPEND): the
/// LSN of the image the changes were applied to, and the byte runs (past
/// the page's first 16 bytes) where the new image differs from it. A
/// client caching that very image applies the runs to it and has the new
/// one, without a fetch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeptChange {
    /// The page.
    pub page: u32,
    /// The LSN of the image the commit changed.
    pub base: u64,
    /// (offset, bytes) runs of the new image.
    pub runs: Vec<(u32, Vec<u8>)>,
}

/// A COMMIT reply: each page's new LSN and, for the pages whose appends
/// the server kept, how the commit changed them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CommitReply {
    /// (page, LSN) of every page the client knows the commit changed.
    pub lsns: Vec<(u32, u64)>,
    /// The kept pages' changes ([`KeptChange`]).
    pub changes: Vec<KeptChange>,
}

impl CommitReply {
    /// The body: the LSNs as [`encode_lsns`] writes them, then, only if
    /// there are any, `count u32, (page u32, base u64, runs u32, (offset
    /// u32, len u32, bytes) × runs) × count`.
    pub fn encode(&self) -> Vec<u8> {
        let mut body = encode_lsns(&self.lsns);
        if self.changes.is_empty() {
            return body;
        }
        let mut w = Writer::new();
        w.put(&(self.changes.len() as u32).to_le_bytes());
        for c in &self.changes {
            w.put(&c.page.to_le_bytes());
            w.put(&c.base.to_le_bytes());
            w.put(&(c.runs.len() as u32).to_le_bytes());
            for (off, bytes) in &c.runs {
                w.put(&off.to_le_bytes());
                w.put(&(bytes.len() as u32).to_le_bytes());
                w.put(bytes);
            }
        }
        body.extend_from_slice(&w.into_bytes());
        body
    }
}

/// Decodes a COMMIT reply ([`CommitReply::encode`]).
pub fn decode_commit_reply(body: &[u8]) -> Result<CommitReply, MessageError> {
    let mut r = Reader::within("COMMIT reply", body);
    let n = r.count32("a count", 12)?;
    let mut lsns = Vec::with_capacity(n);
    for _ in 0..n {
        lsns.push((r.u32("a page")?, r.u64("an LSN")?));
    }
    let mut changes = Vec::new();
    if r.remaining() > 0 {
        let n = r.count32("a count of kept pages' changes", 16)?;
        if n == 0 {
            return Err(malformed(
                "COMMIT reply",
                "an empty list of kept pages' changes is left out",
            ));
        }
        for _ in 0..n {
            let page = r.u32("a page")?;
            let base = r.u64("a base LSN")?;
            let runs_n = r.count32("a count of runs", 8)?;
            let mut runs = Vec::with_capacity(runs_n);
            for _ in 0..runs_n {
                let off = r.u32("a run's offset")?;
                runs.push((off, r.bytes32("a run's bytes")?.to_vec()));
            }
            changes.push(KeptChange { page, base, runs });
        }
    }
    r.finish("the body")?;
    Ok(CommitReply { lsns, changes })
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
    page_list("GROUP_PAGES reply", body)
}

/// Decodes an APPEND reply (encoded as [`encode_pages`]): the pages whose
/// appends the server keeps.
pub fn decode_kept_pages(body: &[u8]) -> Result<Vec<u32>, MessageError> {
    page_list("APPEND reply", body)
}

/// A `count u32, page u32 × count` reply.
fn page_list(what: &'static str, body: &[u8]) -> Result<Vec<u32>, MessageError> {
    let mut r = Reader::within(what, body);
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

/// The LOCK_STATS reply: the server's lock-manager counters since it
/// opened the database, all sessions together (the storage engine's
/// `LockStats`).
///
/// ```text
/// requests u64 | waits u64 | deadlocks u64 | timeouts u64 | upgrades u64 | wait_micros u64
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LockCounters {
    /// Lock requests.
    pub requests: u64,
    /// Requests that had to wait (each counted once).
    pub waits: u64,
    /// Requests refused because they closed a cycle (deadlock victims).
    pub deadlocks: u64,
    /// Waits that gave up at the lock timeout.
    pub timeouts: u64,
    /// Requests to strengthen a lock already held.
    pub upgrades: u64,
    /// Time requests spent waiting, in microseconds, summed over every wait
    /// that ended.
    pub wait_micros: u64,
}

/// Bytes of a LOCK_STATS reply.
pub const LOCK_COUNTERS_BYTES: usize = 48;

impl LockCounters {
    /// Encodes the reply.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(LOCK_COUNTERS_BYTES);
        for v in [
            self.requests,
            self.waits,
            self.deadlocks,
            self.timeouts,
            self.upgrades,
            self.wait_micros,
        ] {
            w.put_u64(v);
        }
        w.into_bytes()
    }

    /// Decodes the reply.
    pub fn decode(body: &[u8]) -> Result<LockCounters, MessageError> {
        let mut r = Reader::within("LOCK_STATS reply", body);
        let c = LockCounters {
            requests: r.u64("requests")?,
            waits: r.u64("waits")?,
            deadlocks: r.u64("deadlocks")?,
            timeouts: r.u64("timeouts")?,
            upgrades: r.u64("upgrades")?,
            wait_micros: r.u64("wait micros")?,
        };
        r.finish("the body")?;
        Ok(c)
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
    /// A lock wait timed out ([`ErrorCode::LOCK_TIMEOUT`](crate::message::ErrorCode::LOCK_TIMEOUT)).
    LockTimeout {
        /// The resource waited for.
        resource: String,
        /// The mode asked for.
        mode: String,
        /// How long it waited.
        waited_ms: u64,
    },
    /// The transaction was chosen as a deadlock's victim ([`ErrorCode::DEADLOCK`](crate::message::ErrorCode::DEADLOCK)).
    Deadlock {
        /// The cycle, as the server's lock manager described it.
        cycle: String,
    },
    /// A page of the server's volume is damaged ([`ErrorCode::CORRUPT`](crate::message::ErrorCode::CORRUPT)).
    Corrupt {
        /// The page.
        page: u32,
        /// What is wrong with it.
        reason: String,
    },
    /// A snapshot outlived the version store ([`ErrorCode::SNAPSHOT_TOO_OLD`](crate::message::ErrorCode::SNAPSHOT_TOO_OLD)).
    SnapshotTooOld {
        /// The snapshot's LSN.
        lsn: u64,
        /// The version store's bound, in bytes.
        bytes_max: u64,
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
            FaultDetail::SnapshotTooOld { lsn, bytes_max } => {
                w.put_u8(4);
                w.put_u64(*lsn);
                w.put_u64(*bytes_max);
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
            4 => FaultDetail::SnapshotTooOld {
                lsn: r.u64("lsn")?,
                bytes_max: r.u64("bytes max")?,
            },
            _ => return Err(malformed(what, "a fault detail tag is not 1 to 4")),
        };
        r.finish("the body")?;
        Ok(d)
    }
}
