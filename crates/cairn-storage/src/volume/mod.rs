//! The database directory and its volume: manifest, header, space map,
//! extent allocation and object groups, with pages cached in a buffer pool.
//!
//! **Tool interface** (see the crate docs): the CLI's inspect and verify
//! tools, the fuzz targets and the crash tests read the layout through this
//! module; the upper layers name only [`VolumeOptions`], from the crate root.
//!
//! [`Volume`] implements [`PageAccess`] for the record layer: page reads and
//! changes go through its buffer pool, and every change — the record layer's
//! and the allocator's own (space map, extent lists, group directory, header)
//! — goes through `Volume::change`, the one narrow place where the next
//! issue writes the redo log record and advances the page LSN.
//!
//! **Allocation.** Space is reserved in *extents* of `extent_pages` contiguous
//! pages (default 8), each owned by one group; the space map marks reserved
//! pages, the group's extent list marks which pages of each extent are in use.
//! A new extent is formatted page by page as `Free` pages, so every reserved
//! page is always a valid page on disk. Pages are allocated inside the group's
//! extents, near a given page when asked (within `region_pages` around it).
//! Extents are never returned to the volume in this version; freed pages are
//! reused by their group.
//!
//! **In memory** the volume keeps the header, every group and every extent
//! (16 bytes of disk per extent; a few dozen bytes of memory), loaded at open.
//! A compact copy of what object reads ask — is a page in use, which group
//! owns it, the page count, does a group exist — is kept in a [`SpaceView`]
//! ([`Volume::view`]) that readers share without the volume; it is updated
//! when each system action ends (see `view.rs` for exactly when, and why).
//!
//! Invariants (checked by [`Volume::check_invariants`]):
//! - extents of all groups are disjoint, lie inside `page_count`, and never
//!   contain a space-map page;
//! - a group's `with_free` set lists exactly its extents with an unused page;
//! - `extent_by_start` indexes every extent once;
//! - between actions, unless the volume is poisoned, the [`SpaceView`]
//!   answers what the volume answers.

pub mod file;
pub mod groups;
pub mod header;
pub mod manifest;
pub mod spacemap;
mod view;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::access::{PageAccess, PageDevice};
use crate::buffer::{BufferPool, BufferStats, Policy};
use crate::error::{Error, Result};
use crate::ids::{GroupId, PageId, TxnId};
use crate::io::{FileLock, OsVfs, Vfs};
use crate::page::{self, PageType};
use crate::wal::redo::{self, Redo};
use crate::wal::LogSink;

use self::file::{VolumeFile, VolumeStats};
use self::groups::{DirEntry, ExtentEntry, GROUP_NAME_MAX};
use self::header::{VolumeHeader, EXTENT_PAGES_MAX};
use self::manifest::{Manifest, MANIFEST_FILE, VOLUME_FILE, VOLUME_NEW_FILE};
pub use self::view::SpaceView;
use self::view::{ViewExtent, ViewUpdate};

/// The lock file inside a database directory (see [`lock_dir`]).
pub const LOCK_FILE: &str = "LOCK";

/// Takes the directory lock of database `dir` (the [`LOCK_FILE`], with
/// `flock`): held by whoever has the database open or is checking its
/// files, so recovery never runs against a live database. A second opener
/// gets [`Error::InUse`] naming the holder.
pub fn lock_dir(vfs: &dyn Vfs, dir: &Path) -> Result<Box<dyn FileLock>> {
    let path = dir.join(LOCK_FILE);
    let note = format!("process {}", std::process::id());
    match vfs.lock_exclusive(&path, &note) {
        Ok(Ok(guard)) => Ok(guard),
        Ok(Err(holder)) => Err(Error::InUse {
            path: dir.to_path_buf(),
            holder: if holder.is_empty() {
                "another opener".into()
            } else {
                holder
            },
        }),
        Err(e) => Err(Error::io("lock database directory", path, e)),
    }
}

/// Name of the group every database has.
pub const DEFAULT_GROUP_NAME: &str = "default";

/// How to create or open a volume.
#[derive(Clone, Debug)]
pub struct VolumeOptions {
    /// Page size for a new volume (ignored on open: the manifest rules).
    pub page_size: usize,
    /// Pages per extent for a new volume (1..=64).
    pub extent_pages: u32,
    /// Default clustering region (pages around the target) for a new volume.
    pub region_pages: u32,
    /// Buffer pool frames.
    pub buffer_frames: usize,
    /// Buffer replacement policy.
    pub policy: Policy,
    /// Read-ahead on a buffer miss, in pages (see
    /// [`BufferPool::set_read_ahead`]: only into free frames; 1 = off).
    pub read_ahead_pages: usize,
    /// The file system.
    pub vfs: Arc<dyn Vfs>,
}

impl Default for VolumeOptions {
    fn default() -> Self {
        VolumeOptions {
            page_size: page::PAGE_SIZE_DEFAULT,
            extent_pages: 8,
            region_pages: 8,
            buffer_frames: 1024,
            policy: Policy::Clock,
            read_ahead_pages: 8,
            vfs: Arc::new(OsVfs),
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct ExtentState {
    start: PageId,
    len: u32,
    used: u64,
    list_page: PageId,
    list_index: usize,
}

impl ExtentState {
    fn full_mask(&self) -> u64 {
        if self.len == 64 {
            u64::MAX
        } else {
            (1u64 << self.len) - 1
        }
    }

    fn has_free(&self) -> bool {
        self.used != self.full_mask()
    }

    fn contains(&self, id: PageId) -> bool {
        id.0 >= self.start.0 && id.0 - self.start.0 < self.len
    }
}

#[derive(Clone, Debug)]
struct GroupState {
    id: GroupId,
    name: String,
    dir_page: PageId,
    dir_index: usize,
    list_head: PageId,
    list_tail: PageId,
    list_tail_count: usize,
    extents: Vec<ExtentState>,
    with_free: BTreeSet<usize>,
}

/// What [`Volume::groups`] reports of one group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupInfo {
    /// The group's id.
    pub id: GroupId,
    /// The group's name.
    pub name: String,
    /// Extents the group owns.
    pub extents: usize,
    /// Pages reserved by those extents.
    pub pages_reserved: u64,
    /// Pages in use (objects, large-object pages, the extent list itself).
    pub pages_used: u64,
}

/// A system action in progress: see [`Volume::run_action`].
struct Action {
    id: TxnId,
    /// Changed page → (the page before the action, `None` if fresh; after).
    pages: BTreeMap<PageId, (Option<Vec<u8>>, Vec<u8>)>,
    /// ALLOC / FREE markers, logged with the action.
    markers: Vec<Redo>,
}

/// What changed in the space state since the view was last published: the
/// keys only; `Volume::publish_view` copies their current truth.
#[derive(Debug, Default)]
struct ViewPending {
    /// First pages of extents added, removed, or whose in-use bits changed.
    extents: BTreeSet<u32>,
    /// Groups created (or removed).
    groups: BTreeSet<GroupId>,
}

/// An open volume: see the module docs.
pub struct Volume {
    dir: PathBuf,
    file: Arc<VolumeFile>,
    pool: Arc<BufferPool>,
    log: Option<LogSink>,
    /// The system action in progress (with a log attached): its changed
    /// pages, kept private until the action commits as one log batch.
    action: Option<Action>,
    /// Set when an action failed after changing pages: the in-memory space
    /// state may disagree with the pages, so the volume refuses further work.
    poisoned: Option<String>,
    header: VolumeHeader,
    groups: Vec<GroupState>,
    group_by_id: HashMap<GroupId, usize>,
    /// Extent first page → (group index, extent index).
    extent_by_start: BTreeMap<u32, (usize, usize)>,
    dir_pages: Vec<PageId>,
    scratch: Vec<u8>,
    page_changes: u64,
    /// The read view shared with readers (see `view.rs`).
    view: Arc<SpaceView>,
    /// What the view has not been told yet.
    view_pending: ViewPending,
}

impl std::fmt::Debug for Volume {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Volume")
            .field("dir", &self.dir)
            .field("header", &self.header)
            .finish()
    }
}

/// Upper bound on pages in a volume (page ids are u32; the top is kept free).
pub const VOLUME_PAGES_MAX: u32 = u32::MAX - 64;

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

    fn add_group_state(
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

    /// The one narrow place through which every page change goes. `fresh`
    /// pages are not read from the volume (they never held anything).
    /// `f` runs on a copy; the copy is kept only if `f` succeeds.
    ///
    /// Without a log (creating a volume, tests, the checker) the copy replaces
    /// the page in the buffer pool at once. With a log, the change joins the
    /// system action in progress ([`Volume::run_action`]) and reaches the pool
    /// when the action commits.
    fn change<R>(&mut self, id: PageId, fresh: bool, f: impl FnOnce(&mut [u8]) -> Result<R>) -> Result<R> {
        let Volume {
            pool,
            scratch,
            log,
            action,
            ..
        } = self;
        if log.is_some() {
            let act = action
                .as_mut()
                .ok_or_else(|| Error::corrupt(id, "a logged page change outside a system action (a bug)"))?;
            if let std::collections::btree_map::Entry::Vacant(slot) = act.pages.entry(id) {
                let base = if fresh { None } else { Some(pool.read(id)?.to_vec()) };
                let after = base.clone().unwrap_or_else(|| vec![0u8; scratch.len()]);
                slot.insert((base, after));
            }
            let (_, after) = act.pages.get_mut(&id).expect("just inserted");
            scratch.copy_from_slice(after);
            let r = f(scratch)?;
            debug_assert_eq!(page::page_id(scratch), id, "a change must not alter the page id");
            after.copy_from_slice(scratch);
            self.page_changes += 1;
            return Ok(r);
        }
        let mut guard = if fresh { pool.create(id)? } else { pool.write(id)? };
        scratch.copy_from_slice(&guard);
        let r = f(scratch)?;
        debug_assert_eq!(page::page_id(scratch), id, "a change must not alter the page id");
        guard.copy_from_slice(scratch);
        drop(guard);
        self.page_changes += 1;
        Ok(r)
    }

    /// Records a marker (allocation bookkeeping for recovery) in the action.
    fn marker(&mut self, rec: Redo) {
        if let Some(act) = self.action.as_mut() {
            act.markers.push(rec);
        }
    }

    /// Runs `f` as one **system action**: every page it changes, and its
    /// markers, are logged as one batch ending in a COMMIT under the action's
    /// own id, and only then installed in the buffer pool, each page stamped
    /// with the COMMIT's LSN. Recovery redoes an action only if its COMMIT is
    /// in the log, so an action is all or nothing however the log is cut; and
    /// since a page's LSN is the COMMIT's, the WAL rule keeps any of its pages
    /// off the volume until the whole action is durable. No fsync here: the
    /// next commit that depends on the action makes it durable.
    ///
    /// If `f` fails after changing pages, the in-memory space state may no
    /// longer match the pages, so the volume refuses further work.
    ///
    /// When the action is over — its batch logged and its pages installed —
    /// its space changes are published to the [`SpaceView`].
    fn run_action<R>(&mut self, f: impl FnOnce(&mut Self) -> Result<R>) -> Result<R> {
        let r = self.run_action_unpublished(f);
        self.publish_view();
        r
    }

    /// [`Volume::run_action`] without publishing to the view.
    fn run_action_unpublished<R>(&mut self, f: impl FnOnce(&mut Self) -> Result<R>) -> Result<R> {
        if let Some(why) = &self.poisoned {
            return Err(Error::Poisoned(why.clone()));
        }
        let Some(log) = self.log.clone() else { return f(self) };
        let id = TxnId(log.next_id.fetch_add(1, Ordering::SeqCst));
        self.action = Some(Action {
            id,
            pages: BTreeMap::new(),
            markers: Vec::new(),
        });
        let result = f(self);
        let act = self.action.take().expect("the action is still there");
        let r = match result {
            Ok(r) => r,
            Err(e) => {
                if !act.pages.is_empty() {
                    self.poisoned = Some(format!("a space allocation failed half-way: {e}"));
                }
                return Err(e);
            }
        };
        if act.pages.is_empty() && act.markers.is_empty() {
            return Ok(r);
        }
        let _gate = log.gate.read().unwrap_or_else(|e| e.into_inner());
        let mut recs: Vec<Vec<u8>> = Vec::with_capacity(act.pages.len() + act.markers.len() + 1);
        for (pid, (base, after)) in &act.pages {
            let before = base.as_deref().filter(|b| !log.needs_full_image(page::lsn(b)));
            recs.push(redo::page_record(act.id, *pid, before, after));
        }
        recs.extend(act.markers.iter().map(Redo::encode));
        recs.push(
            Redo::Commit {
                txn: act.id,
                frees: Vec::new(),
            }
            .encode(),
        );
        let refs: Vec<&[u8]> = recs.iter().map(|r| &r[..]).collect();
        let lsns = match log.wal.append(&refs) {
            Ok(l) => l,
            Err(e) => {
                self.poisoned = Some(format!("logging a space allocation failed: {e}"));
                return Err(e);
            }
        };
        let commit = *lsns.last().expect("the batch has a commit");
        for (pid, (base, mut after)) in act.pages {
            page::set_lsn(&mut after, commit);
            let installed = (|| {
                let mut g = if base.is_none() {
                    self.pool.create(pid)?
                } else {
                    self.pool.write(pid)?
                };
                g.copy_from_slice(&after);
                Ok::<_, Error>(())
            })();
            if let Err(e) = installed {
                self.poisoned = Some(format!("installing a space allocation failed: {e}"));
                return Err(e);
            }
        }
        Ok(r)
    }

    /// Publishes to the view what changed since the last publication: the
    /// page count, and the current state of every extent and group noted in
    /// `view_pending`. In memory only; the view's write lock is held just for
    /// the copy. A poisoned volume publishes nothing more: the view keeps the
    /// last state that matches the pool (see `view.rs`).
    fn publish_view(&mut self) {
        let pending = std::mem::take(&mut self.view_pending);
        if self.poisoned.is_some() {
            return;
        }
        if pending.extents.is_empty() && pending.groups.is_empty() && self.view.page_count() == self.header.page_count {
            return;
        }
        let extents = pending
            .extents
            .into_iter()
            .map(|start| {
                let x = self.extent_by_start.get(&start).map(|&(gi, xi)| {
                    let g = &self.groups[gi];
                    let x = &g.extents[xi];
                    ViewExtent {
                        group: g.id,
                        len: x.len,
                        used: x.used,
                    }
                });
                (start, x)
            })
            .collect();
        let groups = pending
            .groups
            .into_iter()
            .map(|id| (id, self.group_by_id.contains_key(&id)))
            .collect();
        self.view.apply(ViewUpdate {
            page_count: self.header.page_count,
            extents,
            groups,
        });
    }

    /// The read view of this volume's space, for readers that must not wait
    /// for the volume (see [`SpaceView`]): it answers `is_page_in_use`,
    /// `group_of_page`, `page_count` and whether a group exists as the volume
    /// does between system actions, and changes when an action ends.
    pub fn view(&self) -> Arc<SpaceView> {
        self.view.clone()
    }

    /// Attaches the log: from now on every page change is logged.
    pub fn attach_log(&mut self, sink: LogSink) {
        self.log = Some(sink);
    }

    /// The buffer pool, shared.
    pub fn pool_arc(&self) -> Arc<BufferPool> {
        self.pool.clone()
    }

    /// The volume file.
    pub fn file(&self) -> &Arc<VolumeFile> {
        &self.file
    }

    /// Allocates a page for transaction `txn` (a system action, logged with
    /// an ALLOC marker so recovery can give it back if `txn` never commits).
    pub fn allocate_for(&mut self, txn: TxnId, group: GroupId, near: Option<PageId>, ty: PageType) -> Result<PageId> {
        self.run_action(|v| {
            let page = v.allocate_page(group, near, ty)?;
            let action = v.action.as_ref().map_or(TxnId(0), |a| a.id);
            v.marker(Redo::Alloc { action, txn, page });
            Ok(page)
        })
    }

    /// Frees a page (a system action, logged with a FREE marker).
    pub fn free_logged(&mut self, page: PageId) -> Result<()> {
        self.run_action(|v| {
            v.free_page(page)?;
            let action = v.action.as_ref().map_or(TxnId(0), |a| a.id);
            v.marker(Redo::Free { action, page });
            Ok(())
        })
    }

    /// The database directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The decoded volume header.
    pub fn header(&self) -> &VolumeHeader {
        &self.header
    }

    /// Pages in the volume.
    pub fn page_count(&self) -> u32 {
        self.header.page_count
    }

    /// The buffer pool.
    pub fn pool(&self) -> &BufferPool {
        &self.pool
    }

    /// Buffer pool counters.
    pub fn buffer_stats(&self) -> BufferStats {
        self.pool.stats()
    }

    /// Volume file counters.
    pub fn volume_stats(&self) -> VolumeStats {
        self.file.stats()
    }

    /// Page changes made through the narrow change path so far.
    pub fn page_changes(&self) -> u64 {
        self.page_changes
    }

    /// Writes every dirty page and fsyncs the volume.
    pub fn flush(&mut self) -> Result<()> {
        self.pool.flush_all()
    }

    /// Flushes and closes the volume.
    pub fn close(mut self) -> Result<()> {
        self.flush()
    }

    /// Looks a group up by name.
    pub fn group_id(&self, name: &str) -> Option<GroupId> {
        self.groups.iter().find(|g| g.name == name).map(|g| g.id)
    }

    /// The name of a group.
    pub fn group_name(&self, id: GroupId) -> Option<&str> {
        self.group_by_id.get(&id).map(|&i| self.groups[i].name.as_str())
    }

    /// Every group with its space.
    pub fn groups(&self) -> Vec<GroupInfo> {
        self.groups
            .iter()
            .map(|g| GroupInfo {
                id: g.id,
                name: g.name.clone(),
                extents: g.extents.len(),
                pages_reserved: g.extents.iter().map(|x| u64::from(x.len)).sum(),
                pages_used: g.extents.iter().map(|x| u64::from(x.used.count_ones())).sum(),
            })
            .collect()
    }

    /// Pages not in use: unreserved pages plus unused pages of extents.
    pub fn free_pages(&self) -> u64 {
        let used: u64 = self.groups().iter().map(|g| g.pages_used).sum();
        let system_outside = self
            .system_pages()
            .into_iter()
            .filter(|p| self.group_of_page(*p).is_none())
            .count();
        // Loading refuses overlapping extents and extents past the end, so
        // this cannot go below zero; if a bug ever made it, the answer is 0
        // free pages, not a wrapped-around count or a panic.
        u64::from(self.header.page_count)
            .saturating_sub(used)
            .saturating_sub(system_outside as u64)
    }

    /// The pages of a group's extents that are in use, in physical order.
    pub fn group_pages(&self, id: GroupId) -> Result<Vec<PageId>> {
        let gi = *self.group_by_id.get(&id).ok_or(Error::UnknownGroupId(id))?;
        let mut xs: Vec<&ExtentState> = self.groups[gi].extents.iter().collect();
        xs.sort_by_key(|x| x.start);
        Ok(xs
            .into_iter()
            .flat_map(|x| {
                (0..x.len)
                    .filter(move |i| x.used >> i & 1 == 1)
                    .map(move |i| PageId(x.start.0 + i))
            })
            .collect())
    }

    /// Every page of a group's extents, in use or not, in physical order.
    pub fn group_reserved_pages(&self, id: GroupId) -> Result<Vec<PageId>> {
        let gi = self.group_index(id)?;
        let mut xs: Vec<&ExtentState> = self.groups[gi].extents.iter().collect();
        xs.sort_by_key(|x| x.start);
        Ok(xs
            .into_iter()
            .flat_map(|x| (x.start.0..x.start.0 + x.len).map(PageId))
            .collect())
    }

    /// The group owning the extent that holds page `id`, if any.
    pub fn group_of_page(&self, id: PageId) -> Option<GroupId> {
        let (gi, xi) = self.extent_of(id)?;
        let _ = xi;
        Some(self.groups[gi].id)
    }

    /// True if page `id` is an allocated (in-use) page of some extent.
    pub fn is_page_in_use(&self, id: PageId) -> bool {
        self.extent_of(id).is_some_and(|(gi, xi)| {
            let x = &self.groups[gi].extents[xi];
            x.used >> (id.0 - x.start.0) & 1 == 1
        })
    }

    fn extent_of(&self, id: PageId) -> Option<(usize, usize)> {
        let (_, &(gi, xi)) = self.extent_by_start.range(..=id.0).next_back()?;
        self.groups[gi].extents[xi].contains(id).then_some((gi, xi))
    }

    /// The extent list and space-map pages of every group, and the group
    /// directory pages: the pages that hold no objects.
    pub fn system_pages(&self) -> Vec<PageId> {
        let mut out = vec![PageId::HEADER];
        let ps = self.page_size();
        let last_interval = spacemap::interval_of(PageId(self.header.page_count - 1), ps);
        out.extend((0..=last_interval).map(|k| spacemap::map_page(k, ps)));
        out.extend(self.dir_pages.iter().copied());
        for g in &self.groups {
            let mut lists: Vec<PageId> = g.extents.iter().map(|x| x.list_page).collect();
            lists.dedup();
            out.extend(lists);
        }
        out.sort();
        out.dedup();
        out
    }

    /// Creates a new, empty group (a system action).
    pub fn create_group(&mut self, name: &str) -> Result<GroupId> {
        self.run_action(|v| v.create_group_inner(name))
    }

    fn create_group_inner(&mut self, name: &str) -> Result<GroupId> {
        if name.is_empty() {
            return Err(Error::InvalidArgument("a group name must not be empty".into()));
        }
        if name.len() > GROUP_NAME_MAX {
            return Err(Error::LimitExceeded {
                what: "group name bytes",
                value: name.len() as u64,
                limit: GROUP_NAME_MAX as u64,
            });
        }
        if self.group_id(name).is_some() {
            return Err(Error::GroupExists(name.to_string()));
        }
        let id = GroupId(self.header.next_group_id);
        if id.0 == u32::MAX {
            return Err(Error::LimitExceeded {
                what: "groups created",
                value: u64::from(id.0),
                limit: u64::from(u32::MAX - 1),
            });
        }
        let entry = DirEntry {
            id,
            name: name.to_string(),
            list_head: PageId(0),
            list_tail: PageId(0),
        };
        let mut dir_page = *self.dir_pages.last().expect("the directory has a page");
        let mut index = self.read(dir_page, groups::entry_count)?;
        if index >= groups::dir_capacity(self.page_size()) {
            let new_page = self.allocate_page(GroupId::DEFAULT, Some(dir_page), PageType::GroupDir)?;
            self.change(new_page, false, |b| {
                groups::init_dir(b, new_page);
                Ok(())
            })?;
            self.change(dir_page, false, |b| {
                groups::set_next_page(b, new_page);
                Ok(())
            })?;
            self.dir_pages.push(new_page);
            dir_page = new_page;
            index = 0;
        }
        self.change(dir_page, false, |b| {
            groups::write_dir_entry(b, index, &entry);
            Ok(())
        })?;
        self.header.next_group_id += 1;
        self.store_header()?;
        self.add_group_state(&entry, dir_page, index, Vec::new(), 0)?;
        Ok(id)
    }

    fn store_header(&mut self) -> Result<()> {
        let h = self.header;
        self.change(PageId::HEADER, false, |b| {
            h.store(b);
            Ok(())
        })
    }

    fn group_index(&self, id: GroupId) -> Result<usize> {
        self.group_by_id.get(&id).copied().ok_or(Error::UnknownGroupId(id))
    }

    /// Finds an unused page of group `gi`, near `near` if possible.
    fn find_free_page(&self, gi: usize, near: Option<PageId>) -> Option<(usize, u32)> {
        let g = &self.groups[gi];
        if let Some(near) = near {
            let half = self.header.region_pages / 2 + 1;
            let lo = near.0.saturating_sub(half + EXTENT_PAGES_MAX);
            let hi = near.0.saturating_add(half);
            let mut best: Option<(u32, usize, u32)> = None;
            for (_, &(ogi, xi)) in self.extent_by_start.range(lo..=hi) {
                if ogi != gi {
                    continue;
                }
                let x = &g.extents[xi];
                for i in 0..x.len {
                    if x.used >> i & 1 == 0 {
                        let d = (x.start.0 + i).abs_diff(near.0);
                        if d <= half && best.is_none_or(|(bd, _, _)| d < bd) {
                            best = Some((d, xi, i));
                        }
                    }
                }
            }
            if let Some((_, xi, i)) = best {
                return Some((xi, i));
            }
        }
        let &xi = g.with_free.last()?;
        let x = &g.extents[xi];
        let i = (!x.used).trailing_zeros();
        debug_assert!(i < x.len);
        Some((xi, i))
    }

    /// Reserves a new extent for group `gi` at the end of the volume, formats
    /// its pages as free pages and records it in the group's extent list.
    fn reserve_extent(&mut self, gi: usize) -> Result<usize> {
        let ps = self.page_size();
        let mut len = self.header.extent_pages;
        // An extent never contains a space-map page, and the volume never
        // skips a page (every page below page_count is a valid page): an
        // extent that would reach the next interval's map page is cut short
        // before it, and the map page is created when the volume reaches it.
        let mut start = self.header.page_count;
        loop {
            if u64::from(start) + u64::from(len) > u64::from(VOLUME_PAGES_MAX) {
                return Err(Error::VolumeFull(format!(
                    "{} pages; no room for another extent",
                    self.header.page_count
                )));
            }
            match (start..start + len).find(|&p| spacemap::is_map_page(PageId(p), ps)) {
                None => break,
                Some(map) if map > start => {
                    len = map - start;
                    break;
                }
                Some(map) => {
                    let k = spacemap::interval_of(PageId(map), ps);
                    self.change(PageId(map), true, |b| {
                        spacemap::init(b, k);
                        Ok(())
                    })?;
                    self.header.page_count = map + 1;
                    self.store_header()?;
                    start = map + 1;
                }
            }
        }
        for p in start..start + len {
            self.change(PageId(p), true, |b| {
                page::format(b, PageId(p), PageType::Free);
                Ok(())
            })?;
        }
        let map = spacemap::map_page(spacemap::interval_of(PageId(start), ps), ps);
        self.change(map, false, |b| {
            for p in start..start + len {
                spacemap::set(b, PageId(p), true);
            }
            Ok(())
        })?;
        self.header.page_count = start + len;
        self.store_header()?;

        // Record the extent in the group's list; its first page becomes a new
        // list page when the group has none yet or the tail is full.
        let g = &self.groups[gi];
        let (group_id, tail, tail_count) = (g.id, g.list_tail, g.list_tail_count);
        let mut x = ExtentState {
            start: PageId(start),
            len,
            used: 0,
            list_page: tail,
            list_index: tail_count,
        };
        if tail.0 == 0 || tail_count >= groups::list_capacity(ps) {
            let lp = PageId(start);
            self.change(lp, false, |b| {
                groups::init_list(b, lp, group_id);
                Ok(())
            })?;
            if tail.0 != 0 {
                self.change(tail, false, |b| {
                    groups::set_next_page(b, lp);
                    Ok(())
                })?;
            }
            x.used = 1;
            x.list_page = lp;
            x.list_index = 0;
            let g = &mut self.groups[gi];
            if g.list_head.0 == 0 {
                g.list_head = lp;
            }
            g.list_tail = lp;
            g.list_tail_count = 0;
            let entry = DirEntry {
                id: g.id,
                name: g.name.clone(),
                list_head: g.list_head,
                list_tail: g.list_tail,
            };
            let (dp, di) = (g.dir_page, g.dir_index);
            self.change(dp, false, |b| {
                groups::write_dir_entry(b, di, &entry);
                Ok(())
            })?;
        }
        self.write_extent(&x)?;
        let g = &mut self.groups[gi];
        g.list_tail_count += 1;
        let xi = g.extents.len();
        g.extents.push(x);
        if x.has_free() {
            g.with_free.insert(xi);
        }
        self.extent_by_start.insert(start, (gi, xi));
        self.view_pending.extents.insert(start);
        Ok(xi)
    }

    /// Writes an extent's entry into its extent-list page.
    fn write_extent(&mut self, x: &ExtentState) -> Result<()> {
        let entry = ExtentEntry {
            start: x.start,
            len: x.len,
            used: x.used,
        };
        let (page, index) = (x.list_page, x.list_index);
        self.change(page, false, |b| {
            groups::write_list_entry(b, index, &entry);
            Ok(())
        })
    }

    fn set_used(&mut self, gi: usize, xi: usize, bit: u32, used: bool) -> Result<()> {
        let mut x = self.groups[gi].extents[xi];
        if used {
            x.used |= 1 << bit;
        } else {
            x.used &= !(1 << bit);
        }
        self.write_extent(&x)?;
        let g = &mut self.groups[gi];
        g.extents[xi] = x;
        if x.has_free() {
            g.with_free.insert(xi);
        } else {
            g.with_free.remove(&xi);
        }
        self.view_pending.extents.insert(x.start.0);
        Ok(())
    }

    /// Allocates a page (inside a system action, if logged).
    fn allocate_page(&mut self, group: GroupId, near: Option<PageId>, ty: PageType) -> Result<PageId> {
        let gi = self.group_index(group)?;
        let (xi, bit) = match self.find_free_page(gi, near) {
            Some(found) => found,
            // A new extent's first page may become the group's next
            // extent-list page; an extent of one page (extent_pages 1, or
            // one cut short before a space-map page) then has no page left,
            // and the next one is taken.
            None => loop {
                let xi = self.reserve_extent(gi)?;
                let x = &self.groups[gi].extents[xi];
                if x.has_free() {
                    break (xi, (!x.used).trailing_zeros());
                }
            },
        };
        let id = PageId(self.groups[gi].extents[xi].start.0 + bit);
        // Format first: if reading the free page fails, nothing is marked used.
        self.change(id, false, |b| {
            page::expect_type(b, id, PageType::Free)?;
            page::format(b, id, ty);
            Ok(())
        })?;
        self.set_used(gi, xi, bit, true)?;
        Ok(id)
    }

    /// Frees a page (inside a system action, if logged).
    fn free_page(&mut self, id: PageId) -> Result<()> {
        let (gi, xi) = self
            .extent_of(id)
            .ok_or_else(|| Error::corrupt(id, "freeing a page that belongs to no extent"))?;
        let x = self.groups[gi].extents[xi];
        let bit = id.0 - x.start.0;
        if x.used >> bit & 1 == 0 {
            return Err(Error::corrupt(id, "freeing a page that is not in use"));
        }
        if x.list_page == id {
            return Err(Error::corrupt(id, "freeing an extent-list page"));
        }
        self.change(id, false, |b| {
            page::format(b, id, PageType::Free);
            Ok(())
        })?;
        self.set_used(gi, xi, bit, false)
    }

    /// Asserts the in-memory invariants listed in the module docs.
    pub fn check_invariants(&self) {
        let ps = self.page_size();
        let mut count = 0;
        for (gi, g) in self.groups.iter().enumerate() {
            assert_eq!(self.group_by_id[&g.id], gi);
            for (xi, x) in g.extents.iter().enumerate() {
                count += 1;
                assert_eq!(self.extent_by_start.get(&x.start.0), Some(&(gi, xi)));
                assert!(x.start.0 + x.len <= self.header.page_count);
                assert_eq!(g.with_free.contains(&xi), x.has_free());
                assert!((x.start.0..x.start.0 + x.len).all(|p| !spacemap::is_map_page(PageId(p), ps)));
            }
        }
        assert_eq!(count, self.extent_by_start.len());
        let mut prev_end = 0;
        for (&s, &(gi, xi)) in &self.extent_by_start {
            assert!(s >= prev_end, "extents overlap at page {s}");
            prev_end = s + self.groups[gi].extents[xi].len;
        }
        self.view.check_invariants();
        if self.poisoned.is_none() {
            let seen = self.view.snapshot();
            assert_eq!(seen.page_count, self.header.page_count, "the view's page count");
            assert_eq!(
                seen.groups,
                self.group_by_id.keys().copied().collect::<BTreeSet<_>>(),
                "the view's groups"
            );
            assert_eq!(seen.extents.len(), self.extent_by_start.len(), "the view's extents");
            for (&s, &(gi, xi)) in &self.extent_by_start {
                let (g, x) = (&self.groups[gi], &self.groups[gi].extents[xi]);
                let expected = ViewExtent {
                    group: g.id,
                    len: x.len,
                    used: x.used,
                };
                assert_eq!(
                    seen.extents.get(&s),
                    Some(&expected),
                    "the view of the extent at page {s}"
                );
            }
        }
    }
}

impl PageAccess for Volume {
    fn page_size(&self) -> usize {
        self.scratch.len()
    }

    fn read<R>(&mut self, id: PageId, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
        if id.0 >= self.header.page_count {
            return Err(Error::corrupt(
                id,
                format!(
                    "page lies beyond the end of the volume ({} pages)",
                    self.header.page_count
                ),
            ));
        }
        if let Some((_, after)) = self.action.as_ref().and_then(|a| a.pages.get(&id)) {
            return Ok(f(after));
        }
        let guard = self.pool.read(id)?;
        Ok(f(&guard))
    }

    fn modify<R>(&mut self, id: PageId, f: impl FnOnce(&mut [u8]) -> Result<R>) -> Result<R> {
        if id.0 >= self.header.page_count {
            return Err(Error::corrupt(
                id,
                format!(
                    "page lies beyond the end of the volume ({} pages)",
                    self.header.page_count
                ),
            ));
        }
        self.run_action(|v| v.change(id, false, f))
    }

    fn allocate(&mut self, group: GroupId, near: Option<PageId>, ty: PageType) -> Result<PageId> {
        self.run_action(|v| v.allocate_page(group, near, ty))
    }

    fn free(&mut self, id: PageId) -> Result<()> {
        self.run_action(|v| v.free_page(id))
    }
}
