//! The volume file as a [`PageDevice`]: page `n` lives at byte `n * page_size`.
//!
//! Every read is verified ([`page::verify`]); every write is sealed first
//! ([`page::seal`]). A read past the end of the file is reported as the page
//! being missing (the volume was truncated), naming the page.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::access::PageDevice;
use crate::error::{Error, Result};
use crate::ids::PageId;
use crate::io::StorageFile;
use crate::page;

/// Counters of the volume file's I/O.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VolumeStats {
    /// Pages read.
    pub page_reads: u64,
    /// Pages written.
    pub page_writes: u64,
    /// fsyncs of the volume file.
    pub syncs: u64,
}

/// The volume file of one database.
#[derive(Debug)]
pub struct VolumeFile {
    file: Arc<dyn StorageFile>,
    path: PathBuf,
    page_size: usize,
    reads: AtomicU64,
    writes: AtomicU64,
    syncs: AtomicU64,
}

impl VolumeFile {
    /// Wraps an open file holding pages of `page_size` bytes.
    pub fn new(file: Arc<dyn StorageFile>, path: &Path, page_size: usize) -> VolumeFile {
        VolumeFile {
            file,
            path: path.to_path_buf(),
            page_size,
            reads: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            syncs: AtomicU64::new(0),
        }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's length in bytes.
    pub fn len_bytes(&self) -> Result<u64> {
        self.file.len().map_err(|e| Error::io("stat volume", &self.path, e))
    }

    /// Reads page `id` without verifying it (for the checker and for reading
    /// the header before the page size is trusted). `buf` may be any length.
    pub fn read_raw(&self, id: PageId, buf: &mut [u8]) -> Result<()> {
        let offset = id.index() * self.page_size as u64;
        self.file.read_exact_at(buf, offset).map_err(|e| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                Error::corrupt(
                    id,
                    format!(
                        "page is missing: {} ends before byte {}",
                        self.path.display(),
                        offset + buf.len() as u64
                    ),
                )
            } else {
                Error::io("read page", &self.path, e)
            }
        })?;
        self.reads.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Counters so far.
    pub fn stats(&self) -> VolumeStats {
        VolumeStats {
            page_reads: self.reads.load(Ordering::Relaxed),
            page_writes: self.writes.load(Ordering::Relaxed),
            syncs: self.syncs.load(Ordering::Relaxed),
        }
    }

    /// Advises the OS to drop the file's cached pages (for cold benchmarks).
    pub fn file(&self) -> &Arc<dyn StorageFile> {
        &self.file
    }
}

impl PageDevice for VolumeFile {
    fn page_size(&self) -> usize {
        self.page_size
    }

    fn read_page(&self, id: PageId, buf: &mut [u8]) -> Result<()> {
        debug_assert_eq!(buf.len(), self.page_size);
        self.read_raw(id, buf)?;
        page::verify(buf, id)
    }

    fn read_pages(&self, first: PageId, buf: &mut [u8]) -> Result<()> {
        match self.read_raw(first, buf) {
            Ok(()) => Ok(()),
            // The run reaches past the end of the file: page by page, the
            // missing ones zeroed.
            Err(Error::Corrupt { .. }) => {
                for (i, chunk) in buf.chunks_exact_mut(self.page_size).enumerate() {
                    if self.read_raw(PageId(first.0 + i as u32), chunk).is_err() {
                        chunk.fill(0);
                    }
                }
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    fn write_page(&self, id: PageId, buf: &mut [u8]) -> Result<()> {
        debug_assert_eq!(buf.len(), self.page_size);
        debug_assert_eq!(page::page_id(buf), id, "writing a page image under another page's id");
        page::seal(buf);
        let offset = id.index() * self.page_size as u64;
        self.file
            .write_all_at(buf, offset)
            .map_err(|e| Error::io("write page", &self.path, e))?;
        self.writes.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn sync(&self) -> Result<()> {
        self.file
            .sync_data()
            .map_err(|e| Error::io("fsync volume", &self.path, e))?;
        self.syncs.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}
