//! The two seams between the page-level layers.
//!
//! - [`PageDevice`]: where the buffer pool reads and writes page images (the
//!   volume file). Images are verified on read and sealed before write.
//! - [`PageAccess`]: how the record layer (slotted pages, large objects,
//!   groups) reads and changes pages. **Every change to a page goes through
//!   [`PageAccess::modify`]** — the one narrow place where the write-ahead log
//!   record is written and the page LSN advanced (issue 3), and where a
//!   transaction will keep its changes private until commit. `modify` runs the
//!   change on a copy and installs it only if the closure returns `Ok`, so a
//!   change that fails half-way leaves the page as it was.

use crate::error::Result;
use crate::ids::{GroupId, PageId};
use crate::page::PageType;

/// Reads and writes whole page images of one volume.
pub trait PageDevice: Send + Sync {
    /// The volume's page size in bytes.
    fn page_size(&self) -> usize;
    /// Reads page `id` into `buf` (exactly one page) and verifies it
    /// (checksum, page id, type); a page that fails is `Error::Corrupt`.
    fn read_page(&self, id: PageId, buf: &mut [u8]) -> Result<()>;
    /// Reads the `buf.len() / page_size` consecutive pages starting at
    /// `first` into `buf` **without verifying them** (the caller verifies each
    /// page it keeps, [`crate::page::verify`]), in as few device reads as it
    /// can: the buffer pool's read-ahead. A page that cannot be read (past
    /// the end of the volume) is left zeroed, which fails verification. The
    /// default reads page by page.
    fn read_pages(&self, first: PageId, buf: &mut [u8]) -> Result<()> {
        let ps = self.page_size();
        for (i, chunk) in buf.chunks_exact_mut(ps).enumerate() {
            if self.read_page(PageId(first.0 + i as u32), chunk).is_err() {
                chunk.fill(0);
            }
        }
        Ok(())
    }
    /// Seals `buf` (computes its checksum) and writes it as page `id`.
    fn write_page(&self, id: PageId, buf: &mut [u8]) -> Result<()>;
    /// Makes every completed page write durable.
    fn sync(&self) -> Result<()>;
}

/// Page-level access for the record layer.
pub trait PageAccess {
    /// The page size in bytes.
    fn page_size(&self) -> usize;

    /// Calls `f` with the verified image of page `id`.
    fn read<R>(&mut self, id: PageId, f: impl FnOnce(&[u8]) -> R) -> Result<R>;

    /// Changes page `id`: `f` works on a copy of the page, which replaces the
    /// page only if `f` returns `Ok`. The one narrow place for page changes.
    fn modify<R>(&mut self, id: PageId, f: impl FnOnce(&mut [u8]) -> Result<R>) -> Result<R>;

    /// Allocates a page in `group` (near `near` if given: within the group's
    /// clustering region around it when possible), formats it as an empty page
    /// of type `ty`, and returns its id.
    fn allocate(&mut self, group: GroupId, near: Option<PageId>, ty: PageType) -> Result<PageId>;

    /// Returns page `id` to its extent's free pages.
    fn free(&mut self, id: PageId) -> Result<()>;

    /// Announces that page `id` is about to be read and then changed, so a
    /// transaction takes its exclusive lock at once (two transactions that
    /// both read a page shared and then ask to change it would deadlock).
    /// Without locking, nothing to do.
    fn lock_for_update(&mut self, id: PageId) -> Result<()> {
        let _ = id;
        Ok(())
    }

    /// Announces that page `id` is about to be read by an operation whose
    /// transaction may change it later (a lookup for update): a
    /// transaction takes an update lock, which readers share and another
    /// such reader waits for. Without locking, nothing to do.
    fn lock_to_read_for_update(&mut self, id: PageId) -> Result<()> {
        let _ = id;
        Ok(())
    }
}

/// A [`PageAccess`] that notes every page changed, allocated or freed
/// through it (in order, with repeats): who caches what was read from those
/// pages learns what to drop (the typed layer's index cache, an object
/// client's kept lookups).
pub struct Recording<'a, A: PageAccess> {
    /// The access the operations go to.
    pub inner: &'a mut A,
    /// The pages changed, allocated or freed so far.
    pub pages: &'a mut Vec<PageId>,
}

impl<A: PageAccess> PageAccess for Recording<'_, A> {
    fn page_size(&self) -> usize {
        self.inner.page_size()
    }

    fn read<R>(&mut self, id: PageId, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
        self.inner.read(id, f)
    }

    fn modify<R>(&mut self, id: PageId, f: impl FnOnce(&mut [u8]) -> Result<R>) -> Result<R> {
        self.pages.push(id);
        self.inner.modify(id, f)
    }

    fn allocate(&mut self, group: GroupId, near: Option<PageId>, ty: PageType) -> Result<PageId> {
        let p = self.inner.allocate(group, near, ty)?;
        self.pages.push(p);
        Ok(p)
    }

    fn free(&mut self, id: PageId) -> Result<()> {
        self.pages.push(id);
        self.inner.free(id)
    }

    fn lock_for_update(&mut self, id: PageId) -> Result<()> {
        self.inner.lock_for_update(id)
    }

    fn lock_to_read_for_update(&mut self, id: PageId) -> Result<()> {
        self.inner.lock_to_read_for_update(id)
    }
}

/// A [`PageAccess`] over a plain map of page images, for unit tests of the
/// record layer. It allocates pages sequentially and keeps freed ones for
/// reuse; it is a test fixture, not a storage engine.
#[cfg(test)]
pub mod testing {
    use std::collections::BTreeMap;

    use super::*;
    use crate::error::Error;
    use crate::page;

    /// Page images in a `BTreeMap`.
    #[derive(Debug)]
    pub struct MemPages {
        /// The page size.
        pub page_size: usize,
        /// Live pages (allocated and not freed).
        pub pages: BTreeMap<PageId, Vec<u8>>,
        /// Freed pages, reused first (their images are kept for the uniquifier).
        pub freed: BTreeMap<PageId, Vec<u8>>,
        /// Next never-used page id.
        pub next: u32,
        /// Count of `modify` calls (every change goes through it).
        pub modify_count: u64,
    }

    impl MemPages {
        /// An empty store with the given page size.
        pub fn new(page_size: usize) -> MemPages {
            MemPages {
                page_size,
                pages: BTreeMap::new(),
                freed: BTreeMap::new(),
                next: 1,
                modify_count: 0,
            }
        }
    }

    impl PageAccess for MemPages {
        fn page_size(&self) -> usize {
            self.page_size
        }

        fn read<R>(&mut self, id: PageId, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
            let p = self
                .pages
                .get(&id)
                .ok_or_else(|| Error::corrupt(id, "page is not allocated"))?;
            Ok(f(p))
        }

        fn modify<R>(&mut self, id: PageId, f: impl FnOnce(&mut [u8]) -> Result<R>) -> Result<R> {
            let p = self
                .pages
                .get_mut(&id)
                .ok_or_else(|| Error::corrupt(id, "page is not allocated"))?;
            let mut copy = p.clone();
            let r = f(&mut copy)?;
            *p = copy;
            self.modify_count += 1;
            Ok(r)
        }

        fn allocate(&mut self, _group: GroupId, _near: Option<PageId>, ty: PageType) -> Result<PageId> {
            let (id, mut buf) = match self.freed.pop_first() {
                Some((id, buf)) => (id, buf),
                None => {
                    let id = PageId(self.next);
                    self.next += 1;
                    (id, vec![0u8; self.page_size])
                }
            };
            page::format(&mut buf, id, ty);
            self.pages.insert(id, buf);
            Ok(id)
        }

        fn free(&mut self, id: PageId) -> Result<()> {
            let mut buf = self
                .pages
                .remove(&id)
                .ok_or_else(|| Error::corrupt(id, "double free"))?;
            page::format(&mut buf, id, PageType::Free);
            self.freed.insert(id, buf);
            Ok(())
        }
    }
}
