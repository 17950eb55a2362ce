//! The page service: what a page-server client asks of `cairn serve`
//! (DESIGN.md §7, §10; `docs/protocol.md` has the byte diagrams).
//!
//! | kind | request body | final reply body |
//! |---|---|---|
//! | `0x0100` BEGIN | empty | `txn u64` |
//! | `0x0101` FETCH | `txn u64, mode u8 (0 S, 1 X), count u16, page u32 × count` | empty; one part per page: `page u32, image` |
//! | `0x0102` ALLOCATE | `txn u64, group u32, near u32 (NO_PAGE: none), page type u8` | `page u32, image` |
//! | `0x0103` FREE | `txn u64, page u32` | empty |
//! | `0x0104` COMMIT | `txn u64, count u32, (len u32, record) × count` | empty, once durable |
//! | `0x0105` ABORT | `txn u64` | empty |
//! | `0x0106` VOLUME | empty | `page_size u32, page_count u32, region_pages u32` |
//!
//! A FETCH takes the lock it needs with the read (S to read, X to change),
//! so locking adds no round trip, and names up to [`FETCH_PAGES_MAX`] pages
//! at once (prefetch); every image travels sealed (its CRC32C set), and the
//! client verifies it as a page read from disk. A COMMIT carries the PAGE
//! redo records the embedded commit builds; the server verifies each before
//! it reaches the log. Errors are [`Fault`](crate::message::Fault)s with
//! the codes below, so a client can tell a deadlock (retry) from damage.

use crate::frame::Kind;
use crate::message::{ErrorCode, MessageError, Reader};

/// Pages one FETCH may name.
pub const FETCH_PAGES_MAX: usize = 256;
/// Records one COMMIT may carry.
pub const COMMIT_RECORDS_MAX: u32 = 1 << 20;
/// "No page" in a `near` field.
pub const NO_PAGE: u32 = u32::MAX;

impl Kind {
    /// Starts a transaction.
    pub const BEGIN: Kind = Kind(0x0100);
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
}

/// A page-service request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PageRequest {
    /// BEGIN.
    Begin,
    /// FETCH.
    Fetch {
        /// The transaction.
        txn: u64,
        /// True for X (to change), false for S.
        exclusive: bool,
        /// The pages, at most [`FETCH_PAGES_MAX`].
        pages: Vec<u32>,
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
    /// ABORT.
    Abort {
        /// The transaction.
        txn: u64,
    },
    /// VOLUME.
    Volume,
}

impl PageRequest {
    /// The request's kind and body.
    pub fn encode(&self) -> (Kind, Vec<u8>) {
        let mut out = Vec::new();
        let kind = match self {
            PageRequest::Begin => Kind::BEGIN,
            PageRequest::Fetch { txn, exclusive, pages } => {
                out.extend_from_slice(&txn.to_le_bytes());
                out.push(u8::from(*exclusive));
                out.extend_from_slice(&(pages.len().min(u16::MAX as usize) as u16).to_le_bytes());
                for p in pages.iter().take(u16::MAX as usize) {
                    out.extend_from_slice(&p.to_le_bytes());
                }
                Kind::FETCH
            }
            PageRequest::Allocate {
                txn,
                group,
                near,
                page_type,
            } => {
                out.extend_from_slice(&txn.to_le_bytes());
                out.extend_from_slice(&group.to_le_bytes());
                out.extend_from_slice(&near.to_le_bytes());
                out.push(*page_type);
                Kind::ALLOCATE
            }
            PageRequest::Free { txn, page } => {
                out.extend_from_slice(&txn.to_le_bytes());
                out.extend_from_slice(&page.to_le_bytes());
                Kind::FREE
            }
            PageRequest::Commit { txn, records } => {
                out.extend_from_slice(&txn.to_le_bytes());
                out.extend_from_slice(&(records.len() as u32).to_le_bytes());
                for r in records {
                    out.extend_from_slice(&(r.len() as u32).to_le_bytes());
                    out.extend_from_slice(r);
                }
                Kind::COMMIT
            }
            PageRequest::Abort { txn } => {
                out.extend_from_slice(&txn.to_le_bytes());
                Kind::ABORT
            }
            PageRequest::Volume => Kind::VOLUME,
        };
        (kind, out)
    }

    /// Decodes a request; an unknown kind is `Ok(None)` (another service's).
    pub fn decode(kind: Kind, body: &[u8]) -> Result<Option<PageRequest>, MessageError> {
        let what = "page service request";
        let mut r = Reader::new(body, what);
        let req = match kind {
            Kind::BEGIN => PageRequest::Begin,
            Kind::FETCH => {
                let txn = r.u64()?;
                let exclusive = match r.u8()? {
                    0 => false,
                    1 => true,
                    _ => return Err(malformed(what, "lock mode is neither 0 (S) nor 1 (X)")),
                };
                let count = r.u16()? as usize;
                if count == 0 || count > FETCH_PAGES_MAX {
                    return Err(malformed(what, "a FETCH names 1 to 256 pages"));
                }
                r.check_count(count, 4)?;
                let pages = (0..count).map(|_| r.u32()).collect::<Result<_, _>>()?;
                PageRequest::Fetch { txn, exclusive, pages }
            }
            Kind::ALLOCATE => PageRequest::Allocate {
                txn: r.u64()?,
                group: r.u32()?,
                near: r.u32()?,
                page_type: r.u8()?,
            },
            Kind::FREE => PageRequest::Free {
                txn: r.u64()?,
                page: r.u32()?,
            },
            Kind::COMMIT => {
                let txn = r.u64()?;
                let count = r.u32()?;
                if count > COMMIT_RECORDS_MAX {
                    return Err(malformed(what, "a COMMIT carries too many records"));
                }
                r.check_count(count as usize, 4)?;
                let mut records = Vec::with_capacity(count as usize);
                for _ in 0..count {
                    let len = r.u32()? as usize;
                    records.push(r.take(len)?.to_vec());
                }
                PageRequest::Commit { txn, records }
            }
            Kind::ABORT => PageRequest::Abort { txn: r.u64()? },
            Kind::VOLUME => PageRequest::Volume,
            _ => return Ok(None),
        };
        r.end()?;
        Ok(Some(req))
    }
}

fn malformed(what: &'static str, problem: &'static str) -> MessageError {
    MessageError::Malformed { what, problem }
}

/// Encodes a page with its id: a FETCH part or an ALLOCATE reply.
pub fn encode_page(page: u32, image: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + image.len());
    out.extend_from_slice(&page.to_le_bytes());
    out.extend_from_slice(image);
    out
}

/// Decodes a page with its id; the image's own checks are the caller's.
pub fn decode_page(body: &[u8]) -> Result<(u32, &[u8]), MessageError> {
    let mut r = Reader::new(body, "page");
    let page = r.u32()?;
    Ok((page, &body[4..]))
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
        let mut out = Vec::with_capacity(12);
        for v in [self.page_size, self.page_count, self.region_pages] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out
    }

    /// Decodes the reply.
    pub fn decode(body: &[u8]) -> Result<VolumeInfo, MessageError> {
        let mut r = Reader::new(body, "VOLUME reply");
        let info = VolumeInfo {
            page_size: r.u32()?,
            page_count: r.u32()?,
            region_pages: r.u32()?,
        };
        r.end()?;
        Ok(info)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every_request() -> Vec<PageRequest> {
        vec![
            PageRequest::Begin,
            PageRequest::Fetch {
                txn: 7,
                exclusive: true,
                pages: vec![1, 2, 3],
            },
            PageRequest::Allocate {
                txn: 7,
                group: 1,
                near: NO_PAGE,
                page_type: 5,
            },
            PageRequest::Free { txn: 7, page: 9 },
            PageRequest::Commit {
                txn: 7,
                records: vec![vec![1, 2, 3], vec![], vec![9; 100]],
            },
            PageRequest::Abort { txn: 7 },
            PageRequest::Volume,
        ]
    }

    #[test]
    fn requests_round_trip_and_every_truncation_or_extension_is_refused() {
        for req in every_request() {
            let (kind, body) = req.encode();
            assert_eq!(PageRequest::decode(kind, &body).unwrap(), Some(req.clone()));
            for cut in 0..body.len() {
                assert!(PageRequest::decode(kind, &body[..cut]).is_err(), "{req:?} cut at {cut}");
            }
            let mut longer = body.clone();
            longer.push(0);
            assert!(
                PageRequest::decode(kind, &longer).is_err(),
                "{req:?} with a trailing byte"
            );
        }
    }

    #[test]
    fn counts_are_checked_before_allocating() {
        let mut body = 7u64.to_le_bytes().to_vec();
        body.extend_from_slice(&COMMIT_RECORDS_MAX.to_le_bytes());
        assert!(PageRequest::decode(Kind::COMMIT, &body).is_err());
        let mut body = 7u64.to_le_bytes().to_vec();
        body.push(0);
        body.extend_from_slice(&300u16.to_le_bytes());
        assert!(PageRequest::decode(Kind::FETCH, &body).is_err());
        assert_eq!(PageRequest::decode(Kind(0x0999), b"").unwrap(), None);
    }

    #[test]
    fn volume_info_round_trips() {
        let v = VolumeInfo {
            page_size: 4096,
            page_count: 77,
            region_pages: 9,
        };
        assert_eq!(VolumeInfo::decode(&v.encode()).unwrap(), v);
        assert!(VolumeInfo::decode(&v.encode()[..11]).is_err());
    }
}
