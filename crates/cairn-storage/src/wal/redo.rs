//! Redo records: the payloads the transaction layer and system actions
//! write into the log (the log itself only frames them).
//!
//! The log frames and checksums each record ([`crate::wal`]); this module
//! defines the payloads. Every record starts with a type byte; integers are
//! little-endian.
//!
//! ```text
//!  PAGE (1)        txn u64 | page u32 | flags u8 (bit 0: full image) | run count u32
//!                  | runs: offset u32, length u32, bytes[length]
//!  COMMIT (2)      txn u64 | free count u32 | pages u32[count]
//!  CHECKPOINT (3)  redo_lsn u64 | next_txn u64 | pending count u32
//!                  | pending: txn u64, page u32 (pages allocated by transactions
//!                    that had not committed when the checkpoint began)
//!                  | pending-free count u32 | pending frees: txn u64, page u32
//!                    (pages freed by committed transactions whose FREE
//!                    actions had not been logged when the checkpoint began)
//!  ALLOC (4)       action u64 | txn u64 | page u32   system action `action` allocated the page for txn
//!  FREE (5)        action u64 | page u32             system action `action` freed the page
//! ```
//!
//! A PAGE record describes bytes `16..page_size` of a page (everything after
//! checksum, page id and LSN) as runs of changed bytes. A *full image* is the
//! runs against an all-zero page: applying it starts from zeros, so it
//! rebuilds a torn or missing page; a *diff* is the runs against the page as
//! it was, and needs that page. Applying either sets the page id and the page
//! LSN (the record's end LSN). Transaction id 0 marks a system action (space
//! allocation), which is redone unconditionally; any other PAGE record is
//! redone only if its transaction's COMMIT is in the log.
//!
//! Decoding checks every count and length against the bytes present before
//! allocating, and rejects trailing bytes.

use crate::bytes::{DecodeError, Reader};
use crate::error::{Error, Result};
use crate::ids::{Lsn, PageId, TxnId};
use crate::page;

const TYPE_PAGE: u8 = 1;
const TYPE_COMMIT: u8 = 2;
const TYPE_CHECKPOINT: u8 = 3;
const TYPE_ALLOC: u8 = 4;
const TYPE_FREE: u8 = 5;

/// Bytes at the start of every page that redo records never carry: the
/// checksum, the page id and the LSN, which applying sets itself.
pub const PAGE_FIXED_PREFIX: usize = 16;

/// Changed runs closer than this are merged into one run.
const MERGE_GAP: usize = 8;

/// A decoded redo record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Redo {
    /// A page change.
    Page {
        /// The transaction (0: a system action).
        txn: TxnId,
        /// The page changed.
        page: PageId,
        /// True if `runs` are against an all-zero page.
        full: bool,
        /// (offset, bytes) runs, offsets ≥ [`PAGE_FIXED_PREFIX`].
        runs: Vec<(u32, Vec<u8>)>,
    },
    /// A transaction committed; its deferred page frees follow as FREE records.
    Commit {
        /// The transaction.
        txn: TxnId,
        /// Pages it freed (to be freed at recovery if their FREE is missing).
        frees: Vec<PageId>,
    },
    /// A checkpoint completed: redo may start at `redo_lsn`.
    Checkpoint {
        /// Every change before this LSN is on the volume.
        redo_lsn: Lsn,
        /// Transaction ids below this were handed out.
        next_txn: u64,
        /// Pages allocated by transactions not yet committed at `redo_lsn`:
        /// their ALLOC markers may be in log segments already removed.
        pending: Vec<(TxnId, PageId)>,
        /// Pages freed by transactions whose COMMIT is before `redo_lsn` but
        /// whose deferred FREE actions were not yet logged: their COMMIT
        /// records may be in log segments already removed.
        pending_frees: Vec<(TxnId, PageId)>,
    },
    /// A page was allocated on behalf of a transaction.
    Alloc {
        /// The system action that allocated it.
        action: TxnId,
        /// The transaction it was allocated for.
        txn: TxnId,
        /// The page.
        page: PageId,
    },
    /// A page was freed.
    Free {
        /// The system action that freed it.
        action: TxnId,
        /// The page.
        page: PageId,
    },
}

/// Computes the runs where `after` differs from `before` (or from zeros if
/// `before` is `None`), over bytes `16..`.
pub fn diff(before: Option<&[u8]>, after: &[u8]) -> Vec<(u32, Vec<u8>)> {
    let differs = |i: usize| match before {
        Some(b) => b[i] != after[i],
        None => after[i] != 0,
    };
    // 32 equal bytes at a time through the unchanged stretches (most of a
    // page after a small change): slice compares, not byte tests.
    let same32 = |i: usize| match before {
        Some(b) => b[i..i + 32] == after[i..i + 32],
        None => after[i..i + 32] == [0u8; 32],
    };
    let mut runs: Vec<(u32, Vec<u8>)> = Vec::new();
    let mut i = PAGE_FIXED_PREFIX;
    let n = after.len();
    while i < n {
        while i + 32 <= n && same32(i) {
            i += 32;
        }
        if i >= n {
            break;
        }
        if !differs(i) {
            i += 1;
            continue;
        }
        let start = i;
        let mut end = i + 1;
        // Extend while differences keep coming within MERGE_GAP.
        let mut j = end;
        while j < n && j - end < MERGE_GAP {
            if differs(j) {
                end = j + 1;
            }
            j += 1;
        }
        runs.push((start as u32, after[start..end].to_vec()));
        i = end;
    }
    runs
}

/// Encodes a PAGE record for `after` (a full image when `before` is `None`).
pub fn page_record(txn: TxnId, id: PageId, before: Option<&[u8]>, after: &[u8]) -> Vec<u8> {
    let runs = diff(before, after);
    let body: usize = runs.iter().map(|(_, b)| 8 + b.len()).sum();
    let mut out = Vec::with_capacity(18 + body);
    out.push(TYPE_PAGE);
    out.extend_from_slice(&txn.0.to_le_bytes());
    out.extend_from_slice(&id.0.to_le_bytes());
    out.push(u8::from(before.is_none()));
    out.extend_from_slice(&(runs.len() as u32).to_le_bytes());
    for (off, bytes) in &runs {
        out.extend_from_slice(&off.to_le_bytes());
        out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        out.extend_from_slice(bytes);
    }
    out
}

impl Redo {
    /// Encodes the record.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        match self {
            Redo::Page { txn, page, full, runs } => {
                out.push(TYPE_PAGE);
                out.extend_from_slice(&txn.0.to_le_bytes());
                out.extend_from_slice(&page.0.to_le_bytes());
                out.push(u8::from(*full));
                out.extend_from_slice(&(runs.len() as u32).to_le_bytes());
                for (off, bytes) in runs {
                    out.extend_from_slice(&off.to_le_bytes());
                    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
                    out.extend_from_slice(bytes);
                }
            }
            Redo::Commit { txn, frees } => {
                out.push(TYPE_COMMIT);
                out.extend_from_slice(&txn.0.to_le_bytes());
                out.extend_from_slice(&(frees.len() as u32).to_le_bytes());
                for p in frees {
                    out.extend_from_slice(&p.0.to_le_bytes());
                }
            }
            Redo::Checkpoint {
                redo_lsn,
                next_txn,
                pending,
                pending_frees,
            } => {
                out.push(TYPE_CHECKPOINT);
                out.extend_from_slice(&redo_lsn.0.to_le_bytes());
                out.extend_from_slice(&next_txn.to_le_bytes());
                for list in [pending, pending_frees] {
                    out.extend_from_slice(&(list.len() as u32).to_le_bytes());
                    for (t, p) in list {
                        out.extend_from_slice(&t.0.to_le_bytes());
                        out.extend_from_slice(&p.0.to_le_bytes());
                    }
                }
            }
            Redo::Alloc { action, txn, page } => {
                out.push(TYPE_ALLOC);
                out.extend_from_slice(&action.0.to_le_bytes());
                out.extend_from_slice(&txn.0.to_le_bytes());
                out.extend_from_slice(&page.0.to_le_bytes());
            }
            Redo::Free { action, page } => {
                out.push(TYPE_FREE);
                out.extend_from_slice(&action.0.to_le_bytes());
                out.extend_from_slice(&page.0.to_le_bytes());
            }
        }
        out
    }

    /// Decodes a record; `at` (the record's LSN) names it in errors.
    pub fn decode(bytes: &[u8], at: Lsn) -> Result<Redo> {
        let bad = |reason: String| Error::CorruptLog {
            path: std::path::PathBuf::from("wal"),
            offset: at.0,
            reason: format!("redo record ending at LSN {}: {reason}", at.0),
        };
        let mut r = Reader::new(bytes);
        let rec = Redo::decode_fields(&mut r).map_err(|e| match e {
            Bad::Decode(e) => bad(e.to_string()),
            Bad::Field(reason) => bad(reason),
        })?;
        r.finish("the record").map_err(|e| bad(e.to_string()))?;
        Ok(rec)
    }

    fn decode_fields(r: &mut Reader<'_>) -> std::result::Result<Redo, Bad> {
        let ty = r.u8("record type")?;
        Ok(match ty {
            TYPE_PAGE => {
                let txn = TxnId(r.u64("txn")?);
                let page = PageId(r.u32("page")?);
                let flags = r.u8("flags")?;
                if flags > 1 {
                    return Err(Bad::Field(format!("unknown page-record flags {flags}")));
                }
                // Each run needs at least 8 bytes: the count is bounded before allocating.
                let count = r.count32("runs", 8)?;
                let mut runs = Vec::with_capacity(count);
                for _ in 0..count {
                    let off = r.u32("run offset")?;
                    let len = r.u32("run length")? as usize;
                    if (off as usize) < PAGE_FIXED_PREFIX {
                        return Err(Bad::Field(format!(
                            "run at offset {off} overwrites the fixed page prefix"
                        )));
                    }
                    runs.push((off, r.take(len, "run bytes")?.to_vec()));
                }
                Redo::Page {
                    txn,
                    page,
                    full: flags == 1,
                    runs,
                }
            }
            TYPE_COMMIT => {
                let txn = TxnId(r.u64("txn")?);
                let frees = pages(r)?;
                Redo::Commit { txn, frees }
            }
            TYPE_CHECKPOINT => {
                let redo_lsn = Lsn(r.u64("redo LSN")?);
                let next_txn = r.u64("next txn")?;
                let pending = txn_pages(r)?;
                let pending_frees = txn_pages(r)?;
                Redo::Checkpoint {
                    redo_lsn,
                    next_txn,
                    pending,
                    pending_frees,
                }
            }
            TYPE_ALLOC => Redo::Alloc {
                action: TxnId(r.u64("action")?),
                txn: TxnId(r.u64("txn")?),
                page: PageId(r.u32("page")?),
            },
            TYPE_FREE => Redo::Free {
                action: TxnId(r.u64("action")?),
                page: PageId(r.u32("page")?),
            },
            other => return Err(Bad::Field(format!("unknown record type {other}"))),
        })
    }

    /// True if `payload` is a CHECKPOINT record. A checkpoint record proves
    /// the log before it durable (it is written only after the log and the
    /// volume were fsynced), which tells a damaged log from a torn tail.
    pub fn is_checkpoint(payload: &[u8]) -> bool {
        payload.first() == Some(&TYPE_CHECKPOINT)
    }
}

/// Why a record's fields were refused.
enum Bad {
    Decode(DecodeError),
    Field(String),
}

impl From<DecodeError> for Bad {
    fn from(e: DecodeError) -> Bad {
        Bad::Decode(e)
    }
}

/// A `u32` count of page ids, then the ids.
fn pages(r: &mut Reader<'_>) -> std::result::Result<Vec<PageId>, Bad> {
    let count = r.count32("pages", 4)?;
    (0..count).map(|_| Ok(PageId(r.u32("page")?))).collect()
}

/// A `u32` count of (transaction, page) pairs, then the pairs.
fn txn_pages(r: &mut Reader<'_>) -> std::result::Result<Vec<(TxnId, PageId)>, Bad> {
    let count = r.count32("txn pages", 12)?;
    (0..count)
        .map(|_| Ok((TxnId(r.u64("txn")?), PageId(r.u32("page")?))))
        .collect()
}

/// Applies a PAGE record's runs to `buf` (a whole page) and stamps the page id
/// and `lsn`. A full image first zeroes the page. Runs past the page end are
/// a corrupt record.
pub fn apply(buf: &mut [u8], page: PageId, full: bool, runs: &[(u32, Vec<u8>)], lsn: Lsn) -> Result<()> {
    for (off, bytes) in runs {
        let end = *off as usize + bytes.len();
        if end > buf.len() || (*off as usize) < PAGE_FIXED_PREFIX {
            return Err(Error::corrupt(
                page,
                format!(
                    "the log record at LSN {} writes bytes {off}..{end} of a {}-byte page",
                    lsn.0,
                    buf.len()
                ),
            ));
        }
    }
    if full {
        buf.fill(0);
    }
    for (off, bytes) in runs {
        buf[*off as usize..*off as usize + bytes.len()].copy_from_slice(bytes);
    }
    buf[4..8].copy_from_slice(&page.0.to_le_bytes());
    page::set_lsn(buf, lsn);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::page::PageType;
    use proptest::prelude::*;

    #[test]
    fn records_round_trip_and_trailing_bytes_are_refused() {
        let recs = vec![
            Redo::Page {
                txn: TxnId(7),
                page: PageId(9),
                full: false,
                runs: vec![(16, vec![1, 2]), (100, vec![])],
            },
            Redo::Commit {
                txn: TxnId(7),
                frees: vec![PageId(3), PageId(4)],
            },
            Redo::Checkpoint {
                redo_lsn: Lsn(12345),
                pending: vec![(TxnId(5), PageId(6))],
                next_txn: 99,
                pending_frees: vec![(TxnId(4), PageId(8)), (TxnId(4), PageId(9))],
            },
            Redo::Alloc {
                action: TxnId(9),
                txn: TxnId(8),
                page: PageId(77),
            },
            Redo::Free {
                action: TxnId(10),
                page: PageId(77),
            },
        ];
        for r in recs {
            let mut b = r.encode();
            assert_eq!(Redo::decode(&b, Lsn(1)).unwrap(), r);
            b.push(0);
            assert!(matches!(Redo::decode(&b, Lsn(1)), Err(Error::CorruptLog { .. })));
            b.truncate(b.len() - 2);
            assert!(Redo::decode(&b, Lsn(1)).is_err());
        }
        assert!(Redo::decode(&[], Lsn(1)).is_err());
        assert!(Redo::decode(&[42], Lsn(1)).is_err());
    }

    #[test]
    fn a_huge_run_count_is_refused_before_allocating() {
        let mut b = vec![TYPE_PAGE];
        b.extend_from_slice(&1u64.to_le_bytes());
        b.extend_from_slice(&1u32.to_le_bytes());
        b.push(0);
        b.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(Redo::decode(&b, Lsn(5)), Err(Error::CorruptLog { .. })));
    }

    proptest! {
        #[test]
        fn diff_then_apply_reproduces_the_page(
            changes in proptest::collection::vec((16usize..4096, any::<u8>()), 0..64),
            full in any::<bool>(),
        ) {
            let mut before = vec![0u8; 4096];
            page::format(&mut before, PageId(3), PageType::Slotted);
            for i in (200..4096).step_by(7) { before[i] = i as u8; }
            let mut after = before.clone();
            for (i, v) in changes { after[i] = v; }
            let rec = page_record(TxnId(1), PageId(3), if full { None } else { Some(&before) }, &after);
            let Redo::Page { runs, full: f, page: p, .. } = Redo::decode(&rec, Lsn(9)).unwrap() else { panic!() };
            let mut rebuilt = if full { vec![0xAAu8; 4096] } else { before.clone() };
            apply(&mut rebuilt, p, f, &runs, Lsn(77)).unwrap();
            prop_assert_eq!(&rebuilt[16..], &after[16..]);
            prop_assert_eq!(page::page_id(&rebuilt), PageId(3));
            prop_assert_eq!(page::lsn(&rebuilt), Lsn(77));
        }

        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = Redo::decode(&bytes, Lsn(0));
        }
    }
}
