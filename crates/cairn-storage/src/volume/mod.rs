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

mod alloc;
pub mod file;
pub mod groups;
pub mod header;
pub mod manifest;
mod open;
pub mod spacemap;
mod view;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::access::PageAccess;
use crate::buffer::{BufferPool, BufferStats, Policy};
use crate::error::{Error, Result};
use crate::ids::{GroupId, PageId, TxnId};
use crate::io::{FileLock, OsVfs, Vfs};
use crate::page::{self, PageType};
use crate::wal::redo::{self, Redo};
use crate::wal::LogSink;

use self::file::{VolumeFile, VolumeStats};
use self::header::VolumeHeader;
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

/// Pages read around each miss while the buffer pool is cold, by default
/// ([`VolumeOptions::read_around_cold_pages`]).
pub const READ_AROUND_COLD_DEFAULT: usize = 128;

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
    /// While the buffer pool is more than half free, read this many pages
    /// around every miss (an aligned run), not only around misses that
    /// cluster; 0 or 1 = off (see [`BufferPool::set_read_around_cold`]).
    pub read_around_cold_pages: usize,
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
            read_around_cold_pages: READ_AROUND_COLD_DEFAULT,
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
