//! Pass 2, redo: from the checkpoint's redo LSN, every PAGE record of a
//! committed transaction or system action is applied to its page, and the
//! allocation markers and free lists are followed to find the pages to give
//! back.

use std::collections::{BTreeSet, HashMap};

use crate::buffer::BufferPool;
use crate::error::{Error, Result};
use crate::ids::{Lsn, PageId, TxnId};
use crate::page;
use crate::wal::redo::{self, Redo};
use crate::wal::Wal;

use super::analyse::Analysis;
use super::Recovered;

/// Replays the log from the redo LSN onto `pool`'s pages.
///
/// **A full page image is applied whatever the page on disk says.** The page
/// read may come from the OS cache after a failed fsync (PostgreSQL's
/// "fsyncgate"): its LSN can look current while the disk holds an older
/// version, and skipping the image would leave the next checkpoint trimming
/// the only log that could rebuild it. Applied, the page is dirty in this
/// pool and is written and fsynced before the log is trimmed. Every page
/// changed since the checkpoint began has a full image as its first record
/// after the redo LSN, so this rewrites every such page. A diff record is
/// applied only to a page whose LSN is below it (the page already has it
/// otherwise), which keeps replaying twice harmless.
///
/// A record that cannot be applied — it does not decode, its changes do not
/// fit its page, or its COMMIT frees a page no transaction may free — stops
/// recovery with [`Error::Unrecoverable`] naming the record's LSN (where it
/// starts) and why; nothing is written. With `stop` the log is taken to end
/// there (`cairn recover --stop-at`).
pub(super) fn apply(wal: &Wal, pool: &BufferPool, a: &Analysis, out: &mut Recovered, stop: Option<Lsn>) -> Result<()> {
    // Allocations still pending at the checkpoint, whose ALLOC markers may be
    // gone with older segments; later markers override them.
    let mut alloc_owner: HashMap<PageId, TxnId> = a.pending_allocs.iter().map(|&(t, p)| (p, t)).collect();
    let mut pending_frees: BTreeSet<PageId> = a.pending_frees.iter().map(|&(_, p)| p).collect();
    let mut unrecoverable: HashMap<PageId, String> = HashMap::new();
    let mut start = a.redo_lsn;
    for item in wal.read_from(a.redo_lsn)? {
        let (lsn, payload) = item?;
        let record_start = std::mem::replace(&mut start, lsn);
        if stop.is_some_and(|s| record_start >= s) {
            break;
        }
        let redo = Redo::decode(&payload, lsn)
            .map_err(|e| super::unrecoverable(record_start, None, "the record does not decode", &e))?;
        match redo {
            Redo::Page {
                txn,
                page: id,
                full,
                runs,
            } => {
                if !a.committed.contains(&txn) {
                    out.uncommitted += 1;
                    continue;
                }
                apply_page(pool, id, full, &runs, lsn, out, &mut unrecoverable).map_err(|e| {
                    super::unrecoverable(
                        record_start,
                        Some(txn),
                        &format!("its change of page {id} does not apply"),
                        &e,
                    )
                })?;
            }
            Redo::Commit { txn, frees } => {
                out.committed += u64::from(a.committed.contains(&txn));
                // Where each free comes from, so a free the volume refuses
                // once recovery is done can name its COMMIT (the page's kind
                // cannot be judged here: a fuzzy checkpoint may have written
                // the page as it is later in the log).
                for &p in &frees {
                    out.free_origins.insert(p, (record_start, txn));
                }
                pending_frees.extend(frees);
            }
            Redo::Alloc { action, txn, page } => {
                if a.committed.contains(&action) {
                    alloc_owner.insert(page, txn);
                }
            }
            Redo::Free { action, page } => {
                if a.committed.contains(&action) {
                    alloc_owner.remove(&page);
                    pending_frees.remove(&page);
                }
            }
            Redo::Checkpoint { .. } => {}
        }
    }
    if let Some((&page, reason)) = unrecoverable.iter().min_by_key(|(p, _)| **p) {
        return Err(Error::corrupt(
            page,
            format!("damaged ({reason}) and the log holds no full image to rebuild it from"),
        ));
    }
    let mut to_free: BTreeSet<PageId> = pending_frees;
    to_free.extend(
        alloc_owner
            .into_iter()
            .filter(|(_, t)| !a.committed.contains(t))
            .map(|(p, _)| p),
    );
    out.to_free = to_free.into_iter().collect();
    Ok(())
}

/// Applies one committed PAGE record (see [`apply`] for when).
fn apply_page(
    pool: &BufferPool,
    id: PageId,
    full: bool,
    runs: &[(u32, Vec<u8>)],
    lsn: Lsn,
    out: &mut Recovered,
    unrecoverable: &mut HashMap<PageId, String>,
) -> Result<()> {
    if full {
        // The image replaces whatever is there — torn, missing, or current
        // only in a cache — whatever its LSN says.
        let mut g = match pool.write(id) {
            Ok(g) => g,
            Err(Error::Corrupt { .. }) => {
                out.rebuilt.push(id);
                pool.create(id)?
            }
            Err(e) => return Err(e),
        };
        redo::apply(&mut g, id, true, runs, lsn)?;
        out.applied += 1;
        out.images += 1;
        unrecoverable.remove(&id);
        return Ok(());
    }
    match pool.write(id) {
        Ok(mut g) => {
            if page::lsn(&g) >= lsn {
                out.skipped += 1;
                return Ok(());
            }
            redo::apply(&mut g, id, false, runs, lsn)?;
            out.applied += 1;
            Ok(())
        }
        Err(Error::Corrupt { reason, .. }) => {
            unrecoverable.entry(id).or_insert(reason);
            Ok(())
        }
        Err(e) => Err(e),
    }
}
