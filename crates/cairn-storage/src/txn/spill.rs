//! A transaction's private page copies, spilling to a temporary file when
//! there are more than fit its memory budget.
//!
//! Pages in memory are evicted oldest-first to `DIR/tmp/txn-<id>-<n>.spill`,
//! a file of page-sized slots; a spilled page read again comes back into
//! memory (its slot is reused). The file is removed when the transaction ends,
//! and any left by a crash are removed when the database opens. Spill files
//! hold uncommitted data only; they are never fsynced and never read after a
//! restart.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::ids::PageId;
use crate::io::{StorageFile, Vfs};

/// The directory of spill files inside a database directory.
pub const TMP_DIR: &str = "tmp";

static SPILL_SEQ: AtomicU64 = AtomicU64::new(0);

struct SpillFile {
    file: Arc<dyn StorageFile>,
    path: PathBuf,
    slots: HashMap<PageId, u64>,
    free: Vec<u64>,
    next: u64,
}

/// The private pages of one transaction.
pub(crate) struct PrivatePages {
    mem: HashMap<PageId, Vec<u8>>,
    order: VecDeque<PageId>,
    budget_pages: usize,
    page_size: usize,
    vfs: Option<(Arc<dyn Vfs>, PathBuf)>,
    spill: Option<SpillFile>,
}

impl PrivatePages {
    /// Empty; at most `budget_pages` pages stay in memory once a spill
    /// location is set with [`PrivatePages::spill_to`].
    pub fn new(budget_pages: usize, page_size: usize) -> PrivatePages {
        PrivatePages {
            mem: HashMap::new(),
            order: VecDeque::new(),
            budget_pages: budget_pages.max(2),
            page_size,
            vfs: None,
            spill: None,
        }
    }

    /// Where to spill: the database directory (files go to `DIR/tmp`).
    pub fn spill_to(&mut self, vfs: Arc<dyn Vfs>, db_dir: &Path) {
        self.vfs = Some((vfs, db_dir.join(TMP_DIR)));
    }

    /// The bytes of private pages kept in memory before spilling.
    pub fn budget_bytes(&self) -> usize {
        self.budget_pages.saturating_mul(self.page_size)
    }

    pub fn is_empty(&self) -> bool {
        self.mem.is_empty() && self.spill.as_ref().is_none_or(|s| s.slots.is_empty())
    }

    pub fn contains(&self, id: PageId) -> bool {
        self.mem.contains_key(&id) || self.spill.as_ref().is_some_and(|s| s.slots.contains_key(&id))
    }

    /// Every private page id, sorted.
    pub fn ids(&self) -> Vec<PageId> {
        let mut v: Vec<PageId> = self.mem.keys().copied().collect();
        if let Some(s) = &self.spill {
            v.extend(s.slots.keys().copied());
        }
        v.sort();
        v
    }

    fn load(&mut self, id: PageId) -> Result<bool> {
        if self.mem.contains_key(&id) {
            return Ok(true);
        }
        let Some(s) = self.spill.as_mut() else { return Ok(false) };
        let Some(&off) = s.slots.get(&id) else {
            return Ok(false);
        };
        let mut buf = vec![0u8; self.page_size];
        // The slot is given up only once its page is back in memory: a
        // failed read loses nothing (the transaction is doomed by the error).
        s.file
            .read_exact_at(&mut buf, off)
            .map_err(|e| Error::io("read spilled page", &s.path, e))?;
        s.slots.remove(&id);
        s.free.push(off);
        self.mem.insert(id, buf);
        self.order.push_back(id);
        self.evict_over_budget(id)?;
        Ok(true)
    }

    pub fn get(&mut self, id: PageId) -> Result<Option<&[u8]>> {
        if !self.load(id)? {
            return Ok(None);
        }
        Ok(self.mem.get(&id).map(|v| &v[..]))
    }

    pub fn get_mut(&mut self, id: PageId) -> Result<Option<&mut Vec<u8>>> {
        if !self.load(id)? {
            return Ok(None);
        }
        Ok(self.mem.get_mut(&id))
    }

    /// Adds a page; returns how many pages were spilled to make room.
    pub fn insert(&mut self, id: PageId, bytes: &[u8]) -> Result<u64> {
        self.mem.insert(id, bytes.to_vec());
        self.order.push_back(id);
        self.evict_over_budget(id)
    }

    #[cfg(test)]
    pub fn remove(&mut self, id: PageId) {
        self.mem.remove(&id);
        if let Some(s) = self.spill.as_mut() {
            if let Some(off) = s.slots.remove(&id) {
                s.free.push(off);
            }
        }
    }

    fn evict_over_budget(&mut self, keep: PageId) -> Result<u64> {
        let mut spilled = 0;
        while self.mem.len() > self.budget_pages {
            let Some(victim) = self.order.pop_front() else { break };
            if victim == keep {
                self.order.push_back(victim);
                if self.order.len() == 1 {
                    break;
                }
                continue;
            }
            let Some(bytes) = self.mem.remove(&victim) else {
                continue;
            };
            // The victim goes back into memory if it cannot be written out,
            // so a failed spill never drops a private page.
            if let Err(e) = self.write_out(victim, &bytes) {
                self.mem.insert(victim, bytes);
                self.order.push_front(victim);
                return Err(e);
            }
            spilled += 1;
        }
        Ok(spilled)
    }

    /// Writes `bytes` (page `id`) to a slot of the spill file.
    fn write_out(&mut self, id: PageId, bytes: &[u8]) -> Result<()> {
        let s = self.spill_file()?;
        let off = s.free.pop().unwrap_or_else(|| {
            let o = s.next;
            s.next += bytes.len() as u64;
            o
        });
        if let Err(e) = s.file.write_all_at(bytes, off) {
            s.free.push(off);
            return Err(Error::io("write spilled page", &s.path, e));
        }
        s.slots.insert(id, off);
        Ok(())
    }

    fn spill_file(&mut self) -> Result<&mut SpillFile> {
        if self.spill.is_none() {
            let (vfs, dir) = self.vfs.as_ref().ok_or(Error::LimitExceeded {
                what: "private pages of a transaction without a spill directory",
                value: self.mem.len() as u64,
                limit: self.budget_pages as u64,
            })?;
            vfs.create_dir_all(dir)
                .map_err(|e| Error::io("create spill directory", dir, e))?;
            let n = SPILL_SEQ.fetch_add(1, Ordering::Relaxed);
            let path = dir.join(format!("txn-{}-{n}.spill", std::process::id()));
            let file = vfs
                .open(&path, true)
                .map_err(|e| Error::io("create spill file", &path, e))?;
            self.spill = Some(SpillFile {
                file,
                path,
                slots: HashMap::new(),
                free: Vec::new(),
                next: 0,
            });
        }
        Ok(self.spill.as_mut().expect("just created"))
    }

    /// Drops every page and the spill file.
    pub fn clear(&mut self) {
        self.mem.clear();
        self.order.clear();
        if let Some(s) = self.spill.take() {
            drop(s.file);
            if let Some((vfs, _)) = &self.vfs {
                let _ = vfs.remove_file(&s.path);
            }
        }
    }
}

impl Drop for PrivatePages {
    fn drop(&mut self) {
        self.clear();
    }
}

/// Removes spill files a crashed process left behind.
pub fn remove_leftovers(vfs: &Arc<dyn Vfs>, db_dir: &Path) {
    let dir = db_dir.join(TMP_DIR);
    if let Ok(names) = vfs.list_dir(&dir) {
        for name in names {
            if name.to_string_lossy().ends_with(".spill") {
                let _ = vfs.remove_file(&dir.join(name));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::OsVfs;

    #[test]
    fn pages_over_budget_spill_and_come_back() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = PrivatePages::new(3, 4096);
        p.spill_to(Arc::new(OsVfs), dir.path());
        let mut spilled = 0;
        for i in 0..20u32 {
            spilled += p.insert(PageId(i), &vec![i as u8; 4096]).unwrap();
        }
        assert_eq!(spilled, 17);
        assert_eq!(p.spill.as_ref().map_or(0, |s| s.slots.len()), 17);
        assert_eq!(p.ids().len(), 20);
        for i in (0..20u32).rev() {
            assert_eq!(p.get(PageId(i)).unwrap().unwrap()[100], i as u8);
        }
        p.get_mut(PageId(4)).unwrap().unwrap()[0] = 99;
        for i in 0..20u32 {
            let b = p.get(PageId(i)).unwrap().unwrap();
            assert_eq!(b[100], i as u8);
            if i == 4 {
                assert_eq!(b[0], 99);
            }
        }
        p.remove(PageId(7));
        assert!(!p.contains(PageId(7)));
        assert_eq!(p.ids().len(), 19);
        p.clear();
        assert!(p.is_empty());
        let left = std::fs::read_dir(dir.path().join(TMP_DIR)).unwrap().count();
        assert_eq!(left, 0, "the spill file is removed");
    }
}
