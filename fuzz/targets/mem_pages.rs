//! A `PageAccess` over page images cut from a fuzz input, for the targets
//! that walk page trees (`btree_nodes`, `large_object_pages`). Pages are
//! handed out unverified, so the tree code meets any bytes at all; new pages
//! are allocated past the input's last page.

use std::collections::BTreeMap;

use cairn_storage::access::PageAccess;
use cairn_storage::page::{self, PageType};
use cairn_storage::{Error, GroupId, PageId, Result};

/// Page images by id.
#[derive(Clone, Debug)]
pub struct MemPages {
    pub page_size: usize,
    pub pages: BTreeMap<PageId, Vec<u8>>,
    next: u32,
}

impl MemPages {
    /// An empty store.
    pub fn new(page_size: usize) -> MemPages {
        MemPages {
            page_size,
            pages: BTreeMap::new(),
            next: 1,
        }
    }

    /// Pages 1, 2, … cut from `data` (the last one zero-padded), at most
    /// `count_max` of them.
    pub fn from_bytes(data: &[u8], page_size: usize, count_max: usize) -> MemPages {
        let mut m = MemPages::new(page_size);
        for (i, chunk) in data.chunks(page_size).take(count_max).enumerate() {
            let mut p = vec![0u8; page_size];
            p[..chunk.len()].copy_from_slice(chunk);
            m.pages.insert(PageId(i as u32 + 1), p);
        }
        m.next = m.pages.len() as u32 + 1;
        m
    }

    /// The pages in id order, concatenated: the input that rebuilds them
    /// (for writing seed inputs).
    #[allow(
        dead_code,
        reason = "the replay tests' seed generators use it, the libFuzzer binaries do not (so no `expect`)"
    )]
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for id in 1..self.next {
            match self.pages.get(&PageId(id)) {
                Some(p) => out.extend_from_slice(p),
                None => out.extend(std::iter::repeat_n(0u8, self.page_size)),
            }
        }
        out
    }
}

impl PageAccess for MemPages {
    fn page_size(&self) -> usize {
        self.page_size
    }

    fn read<R>(&mut self, id: PageId, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
        let p = self.pages.get(&id).ok_or_else(|| Error::corrupt(id, "no such page"))?;
        Ok(f(p))
    }

    fn modify<R>(&mut self, id: PageId, f: impl FnOnce(&mut [u8]) -> Result<R>) -> Result<R> {
        let p = self
            .pages
            .get_mut(&id)
            .ok_or_else(|| Error::corrupt(id, "no such page"))?;
        let mut copy = p.clone();
        let r = f(&mut copy)?;
        *p = copy;
        Ok(r)
    }

    fn allocate(&mut self, _group: GroupId, _near: Option<PageId>, ty: PageType) -> Result<PageId> {
        if self.pages.len() >= 4096 {
            return Err(Error::VolumeFull("the fuzz store holds 4096 pages".into()));
        }
        let id = PageId(self.next);
        self.next += 1;
        let mut p = vec![0u8; self.page_size];
        page::format(&mut p, id, ty);
        self.pages.insert(id, p);
        Ok(id)
    }

    fn free(&mut self, id: PageId) -> Result<()> {
        self.pages
            .remove(&id)
            .map(|_| ())
            .ok_or_else(|| Error::corrupt(id, "double free"))
    }
}
