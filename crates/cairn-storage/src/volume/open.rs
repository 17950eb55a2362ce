//! Creating and opening a volume: the crash-safe creation steps, and loading
//! (and checking) the header, the group directory and every extent list.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::sync::Arc;

use super::file::VolumeFile;
use super::groups::{self, DirEntry};
use super::header::{VolumeHeader, EXTENT_PAGES_MAX};
use super::manifest::{self, Manifest, MANIFEST_FILE, VOLUME_FILE, VOLUME_NEW_FILE};
use super::spacemap;
use super::{ExtentState, GroupState, SpaceView, ViewPending, Volume, VolumeOptions, DEFAULT_GROUP_NAME};
use crate::access::{PageAccess, PageDevice};
use crate::buffer::BufferPool;
use crate::error::{Error, Result};
use crate::ids::{GroupId, PageId};
use crate::io::Vfs;
use crate::page::{self, PageType};

impl Volume {
    /// Creates a new database in `dir` (which may exist but must not hold a
    /// database).
    ///
    /// Crash-safe in three durable steps: the volume is written and fsynced
    /// as `volume.cairn.new`; the manifest is written (a temporary name,
    /// fsync, rename, directory fsync); then the volume is renamed into
    /// place and the directory fsynced. A crash before the manifest leaves
    /// only `*.new`/`*.tmp` files, which the next create removes (nothing was
    /// ever committed there); a crash after it leaves a manifest and
    /// `volume.cairn.new`, which the next open renames
    /// ([`Volume::finish_create`]). So `volume.cairn` without a manifest
    /// never comes from an interrupted creation, and is refused.
    pub fn create(dir: &Path, opts: &VolumeOptions) -> Result<Volume> {
        page::validate_page_size(opts.page_size)?;
        if opts.extent_pages == 0 || opts.extent_pages > EXTENT_PAGES_MAX {
            return Err(Error::InvalidArgument(format!(
                "extent size {} pages must be within 1..={EXTENT_PAGES_MAX}",
                opts.extent_pages
            )));
        }
        if opts.region_pages == 0 {
            return Err(Error::InvalidArgument(
                "clustering region must be at least 1 page".into(),
            ));
        }
        let vfs = &opts.vfs;
        crate::io::create_dir_durably(vfs.as_ref(), dir).map_err(|e| Error::io("create directory", dir, e))?;
        for name in [MANIFEST_FILE, VOLUME_FILE] {
            let p = dir.join(name);
            if vfs.exists(&p) {
                return Err(Error::AlreadyExists { path: p });
            }
        }
        let vpath = dir.join(VOLUME_NEW_FILE);
        if vfs.exists(&vpath) {
            // An earlier creation died before its manifest: never a database.
            vfs.remove_file(&vpath)
                .map_err(|e| Error::io("remove an unfinished volume", &vpath, e))?;
        }
        let f = vfs
            .open(&vpath, true)
            .map_err(|e| Error::io("create volume", &vpath, e))?;
        let file = Arc::new(VolumeFile::new(f, &vpath, opts.page_size));
        let creation_id = manifest::new_creation_id();
        let header = VolumeHeader {
            page_size: opts.page_size as u32,
            creation_id,
            page_count: 3,
            extent_pages: opts.extent_pages,
            group_dir_page: PageId(2),
            next_group_id: 1,
            region_pages: opts.region_pages,
        };
        let mut vol = Volume::assemble(dir, file, header, opts);
        vol.dir_pages.push(PageId(2));
        vol.change(PageId::HEADER, true, |buf| {
            page::format(buf, PageId::HEADER, PageType::VolumeHeader);
            header.store(buf);
            Ok(())
        })?;
        vol.change(PageId(1), true, |buf| {
            spacemap::init(buf, 0);
            spacemap::set(buf, PageId(0), true);
            spacemap::set(buf, PageId(2), true);
            Ok(())
        })?;
        let default = DirEntry {
            id: GroupId::DEFAULT,
            name: DEFAULT_GROUP_NAME.into(),
            list_head: PageId(0),
            list_tail: PageId(0),
        };
        vol.change(PageId(2), true, |buf| {
            groups::init_dir(buf, PageId(2));
            groups::write_dir_entry(buf, 0, &default);
            Ok(())
        })?;
        vol.add_group_state(&default, PageId(2), 0, Vec::new(), 0)?;
        vol.publish_view();
        vol.pool.flush_all()?;
        Manifest {
            page_size: opts.page_size as u32,
            creation_id,
        }
        .write_new(vfs.as_ref(), dir)?;
        Volume::finish_create(vfs.as_ref(), dir)?;
        Ok(vol)
    }

    /// Completes a creation whose manifest is durable: renames
    /// `volume.cairn.new` into place and fsyncs the directory. Does nothing
    /// if there is no such file. Called by create and before every open.
    pub fn finish_create(vfs: &dyn Vfs, dir: &Path) -> Result<()> {
        let new = dir.join(VOLUME_NEW_FILE);
        let vpath = dir.join(VOLUME_FILE);
        if !vfs.exists(&new) || !vfs.exists(&dir.join(MANIFEST_FILE)) {
            return Ok(());
        }
        if vfs.exists(&vpath) {
            return Err(Error::CorruptFile {
                path: new,
                reason: format!("both {VOLUME_NEW_FILE} and {VOLUME_FILE} exist; which one is the database is unknown"),
            });
        }
        vfs.rename(&new, &vpath)
            .map_err(|e| Error::io("rename the new volume into place", &vpath, e))?;
        vfs.sync_dir(dir).map_err(|e| Error::io("fsync directory", dir, e))
    }

    /// Opens the database in `dir`, verifying the manifest, the header, and the
    /// group directory with every extent list.
    pub fn open(dir: &Path, opts: &VolumeOptions) -> Result<Volume> {
        let vfs = &opts.vfs;
        let m = Manifest::read(vfs.as_ref(), dir)?;
        let page_size = m.page_size as usize;
        let vpath = dir.join(VOLUME_FILE);
        if !vfs.exists(&vpath) {
            return Err(Error::CorruptFile {
                path: vpath,
                reason: "the volume file is missing".into(),
            });
        }
        let f = vfs
            .open(&vpath, false)
            .map_err(|e| Error::io("open volume", &vpath, e))?;
        let file = Arc::new(VolumeFile::new(f, &vpath, page_size));
        let header = Self::read_header(&file, &m)?;
        let mut vol = Volume::assemble(dir, file, header, opts);
        vol.load_groups()?;
        vol.publish_view();
        Ok(vol)
    }

    /// A volume with its buffer pool and no groups loaded yet.
    fn assemble(dir: &Path, file: Arc<VolumeFile>, header: VolumeHeader, opts: &VolumeOptions) -> Volume {
        let page_size = header.page_size as usize;
        let pool = Arc::new(BufferPool::new(
            file.clone() as Arc<dyn PageDevice>,
            opts.buffer_frames.max(8),
            opts.policy,
        ));
        pool.set_read_ahead(opts.read_ahead_pages);
        pool.set_read_around_cold(opts.read_around_cold_pages);
        Volume {
            dir: dir.to_path_buf(),
            file,
            pool,
            log: None,
            action: None,
            poisoned: None,
            header,
            groups: Vec::new(),
            group_by_id: HashMap::new(),
            extent_by_start: BTreeMap::new(),
            dir_pages: Vec::new(),
            scratch: vec![0u8; page_size],
            page_changes: 0,
            view: Arc::new(SpaceView::new(header.page_count)),
            view_pending: ViewPending::default(),
        }
    }

    /// Reads and validates page 0 against the manifest and the file length.
    pub fn read_header(file: &VolumeFile, m: &Manifest) -> Result<VolumeHeader> {
        let page_size = m.page_size as usize;
        let path = file.path().to_path_buf();
        let len = file.len_bytes()?;
        if len < page::PAGE_SIZE_MIN as u64 {
            return Err(Error::CorruptFile {
                path,
                reason: format!("the volume file is {len} bytes, shorter than its header page"),
            });
        }
        let mut raw = vec![0u8; page::PAGE_SIZE_MIN];
        file.read_raw(PageId::HEADER, &mut raw)?;
        VolumeHeader::precheck(&raw, m.page_size, &path)?;
        let mut buf = vec![0u8; page_size];
        file.read_page(PageId::HEADER, &mut buf)?;
        let header = VolumeHeader::load(&buf, m.page_size, m.creation_id, &path)?;
        let expected = u64::from(header.page_count) * page_size as u64;
        if len < expected {
            return Err(Error::CorruptFile {
                path,
                reason: format!(
                    "the volume file is {len} bytes but its header counts {} pages ({expected} bytes): truncated",
                    header.page_count
                ),
            });
        }
        Ok(header)
    }

    fn load_groups(&mut self) -> Result<()> {
        let mut next = Some(self.header.group_dir_page);
        let mut seen = BTreeSet::new();
        while let Some(dir_page) = next {
            self.check_page_bound(dir_page, "group directory")?;
            if !seen.insert(dir_page) {
                return Err(Error::corrupt(dir_page, "the group directory chain loops"));
            }
            let (entries, n) = self.read(dir_page, |b| (groups::read_dir(b, dir_page), groups::next_page(b)))?;
            let entries = entries?;
            self.dir_pages.push(dir_page);
            for (i, e) in entries.iter().enumerate() {
                let (extents, tail_count) = self.load_extent_list(e)?;
                self.add_group_state(e, dir_page, i, extents, tail_count)?;
            }
            next = n;
        }
        if !self.group_by_id.contains_key(&GroupId::DEFAULT) {
            return Err(Error::corrupt(
                self.header.group_dir_page,
                "the default group is missing",
            ));
        }
        Ok(())
    }

    fn load_extent_list(&mut self, e: &DirEntry) -> Result<(Vec<ExtentState>, usize)> {
        let mut out = Vec::new();
        let mut next = (e.list_head.0 != 0).then_some(e.list_head);
        let mut last = None;
        let mut tail_count = 0;
        let mut hops = 0u64;
        while let Some(lp) = next {
            self.check_page_bound(lp, "extent list")?;
            hops += 1;
            if hops > u64::from(self.header.page_count) {
                return Err(Error::corrupt(
                    lp,
                    format!("the extent list of group {:?} loops", e.name),
                ));
            }
            let (parsed, n) = self.read(lp, |b| (groups::read_list(b, lp), groups::next_page(b)))?;
            let (owner, entries) = parsed?;
            if owner != e.id {
                return Err(Error::corrupt(
                    lp,
                    format!("extent list of group {} claims to belong to group {}", e.id.0, owner.0),
                ));
            }
            tail_count = entries.len();
            for (i, x) in entries.into_iter().enumerate() {
                let end = u64::from(x.start.0) + u64::from(x.len);
                if x.start.0 == 0 || end > u64::from(self.header.page_count) {
                    return Err(Error::corrupt(
                        lp,
                        format!("extent entry {i} ({}+{}) lies outside the volume", x.start, x.len),
                    ));
                }
                out.push(ExtentState {
                    start: x.start,
                    len: x.len,
                    used: x.used,
                    list_page: lp,
                    list_index: i,
                });
            }
            last = Some(lp);
            next = n;
        }
        if e.list_head.0 != 0 && last != Some(e.list_tail) {
            return Err(Error::corrupt(
                e.list_head,
                format!(
                    "group {:?}: extent list ends at page {}, directory says {}",
                    e.name,
                    last.unwrap_or_default(),
                    e.list_tail
                ),
            ));
        }
        Ok((out, tail_count))
    }

    pub(super) fn add_group_state(
        &mut self,
        e: &DirEntry,
        dir_page: PageId,
        dir_index: usize,
        extents: Vec<ExtentState>,
        tail_count: usize,
    ) -> Result<()> {
        if self.group_by_id.contains_key(&e.id) || self.groups.iter().any(|g| g.name == e.name) {
            return Err(Error::corrupt(
                dir_page,
                format!("group {} ({:?}) appears twice", e.id.0, e.name),
            ));
        }
        let gi = self.groups.len();
        for (xi, x) in extents.iter().enumerate() {
            self.index_extent(gi, xi, x, dir_page)?;
        }
        let with_free = extents
            .iter()
            .enumerate()
            .filter(|(_, x)| x.has_free())
            .map(|(i, _)| i)
            .collect();
        self.groups.push(GroupState {
            id: e.id,
            name: e.name.clone(),
            dir_page,
            dir_index,
            list_head: e.list_head,
            list_tail: e.list_tail,
            list_tail_count: tail_count,
            extents,
            with_free,
        });
        self.group_by_id.insert(e.id, gi);
        self.view_pending.groups.insert(e.id);
        let starts = self.groups[gi].extents.iter().map(|x| x.start.0);
        self.view_pending.extents.extend(starts);
        Ok(())
    }

    fn index_extent(&mut self, gi: usize, xi: usize, x: &ExtentState, at: PageId) -> Result<()> {
        let end = x.start.0 + x.len;
        if let Some((&s, &(ogi, oxi))) = self.extent_by_start.range(..end).next_back() {
            let other = &self.groups.get(ogi).map(|g| g.extents[oxi]);
            let overlaps = other.map_or(s >= x.start.0, |o| o.start.0 + o.len > x.start.0);
            if overlaps {
                return Err(Error::corrupt(
                    at,
                    format!("extent {}+{} overlaps the extent at page {s}", x.start, x.len),
                ));
            }
        }
        for p in x.start.0..end {
            if spacemap::is_map_page(PageId(p), self.page_size()) {
                return Err(Error::corrupt(
                    at,
                    format!("extent {}+{} covers space-map page {p}", x.start, x.len),
                ));
            }
        }
        self.extent_by_start.insert(x.start.0, (gi, xi));
        Ok(())
    }

    fn check_page_bound(&self, id: PageId, what: &str) -> Result<()> {
        if id.0 == 0 || id.0 >= self.header.page_count {
            return Err(Error::corrupt(
                id,
                format!(
                    "{what} page {id} lies outside the volume ({} pages)",
                    self.header.page_count
                ),
            ));
        }
        Ok(())
    }
}
