//! The guards callers hold a page through, and the pin each of them carries.

use std::fmt;
use std::ops::{Deref, DerefMut};

use super::{BufferPool, FrameIdx, FrameRead, FrameWrite};
use crate::ids::PageId;
use crate::page;

/// One pin of a frame, released on drop. Guards declare it after their lock
/// so that the lock is released first.
pub(super) struct Pin<'a> {
    pub(super) pool: &'a BufferPool,
    pub(super) frame: FrameIdx,
}

impl Drop for Pin<'_> {
    fn drop(&mut self) {
        self.pool.unpin(self.frame);
    }
}

/// Shared access to a cached page; the page stays pinned until the guard is
/// dropped. Dereferences to the page's bytes.
pub struct PageReadGuard<'a> {
    // Field order matters: `data` (the lock) is dropped before `pin`.
    pub(super) data: FrameRead<'a>,
    pub(super) pin: Pin<'a>,
    pub(super) page: PageId,
}

impl PageReadGuard<'_> {
    /// The page this guard holds.
    pub fn page_id(&self) -> PageId {
        self.page
    }
}

impl Deref for PageReadGuard<'_> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.data
    }
}

impl fmt::Debug for PageReadGuard<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PageReadGuard")
            .field("page", &self.page)
            .field("frame", &self.pin.frame)
            .finish()
    }
}

/// Exclusive access to a cached page; the page stays pinned until the guard
/// is dropped, and is then marked dirty with the LSN in its header.
/// Dereferences (mutably) to the page's bytes.
pub struct PageWriteGuard<'a> {
    // Field order matters: `data` (the lock) is dropped before `pin`.
    pub(super) data: FrameWrite<'a>,
    pub(super) pin: Pin<'a>,
    pub(super) page: PageId,
    /// Set by [`BufferPool::install`]: the frame holds what the device
    /// holds, so it is left clean.
    pub(super) clean: bool,
}

impl PageWriteGuard<'_> {
    /// The page this guard holds.
    pub fn page_id(&self) -> PageId {
        self.page
    }
}

impl Deref for PageWriteGuard<'_> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.data
    }
}

impl DerefMut for PageWriteGuard<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.data
    }
}

impl Drop for PageWriteGuard<'_> {
    /// Marks the page dirty while still holding its write lock (so a flusher
    /// holding the read lock cannot clear the bit over this change).
    fn drop(&mut self) {
        let pool = self.pin.pool;
        if std::thread::panicking() {
            pool.poison(format!(
                "a thread panicked while holding a write guard on page {}",
                self.page
            ));
        }
        let lsn = page::lsn(&self.data);
        let mut st = pool.lock_state();
        let meta = &mut st.metas[self.pin.frame.0];
        meta.dirty = !self.clean;
        meta.lsn = lsn;
    }
}

impl fmt::Debug for PageWriteGuard<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PageWriteGuard")
            .field("page", &self.page)
            .field("frame", &self.pin.frame)
            .finish()
    }
}
