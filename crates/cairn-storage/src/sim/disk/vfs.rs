//! The simulated disk as a [`Vfs`]: its open files, its locks, and the
//! namespace operations.

use std::ffi::OsString;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};

use super::{apply, parent_of, DirChange, FileId, OpKind, Pending, SimDisk, State, Verdict, ENOSPC, SECTOR_SIZE};
use crate::io::{FileLock, StorageFile, Vfs};

/// One open file of a [`SimDisk`].
struct SimFile {
    disk: SimDisk,
    id: FileId,
    path: PathBuf,
}

impl fmt::Debug for SimFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimFile").field("path", &self.path).finish()
    }
}

impl StorageFile for SimFile {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let mut st = self.disk.lock();
        st.proceed(OpKind::Read, &self.path)?;
        let data = &st.file(self.id).current;
        let off = usize::try_from(offset).unwrap_or(usize::MAX);
        match off.checked_add(buf.len()) {
            Some(end) if end <= data.len() => {
                buf.copy_from_slice(&data[off..end]);
                Ok(())
            }
            _ => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "read of {} bytes at {offset} past the end of {}",
                    buf.len(),
                    self.path.display()
                ),
            )),
        }
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let mut st = self.disk.lock();
        let grows = offset + buf.len() as u64 > st.file(self.id).current.len() as u64;
        match st.begin(OpKind::Write, &self.path, grows, buf.len()) {
            Verdict::Proceed => {
                st.write(self.id, offset, buf);
                Ok(())
            }
            Verdict::Fail(e) => Err(e),
            Verdict::Short => {
                let part = if buf.len() as u64 > SECTOR_SIZE {
                    ((buf.len() / 2) as u64 / SECTOR_SIZE * SECTOR_SIZE) as usize
                } else {
                    buf.len() / 2
                };
                st.write(self.id, offset, &buf[..part]);
                Err(io::Error::from_raw_os_error(ENOSPC))
            }
        }
    }

    fn sync_data(&self) -> io::Result<()> {
        let mut st = self.disk.lock();
        match st.begin(OpKind::SyncData, &self.path, false, 0) {
            Verdict::Proceed => {
                st.stats.syncs += 1;
                let f = st.file(self.id);
                for p in std::mem::take(&mut f.pending) {
                    apply(&mut f.durable, &p);
                }
                Ok(())
            }
            Verdict::Fail(e) => {
                if st.crashed_at.is_none() {
                    // A writeback error: the dirty pages are marked clean and
                    // never reach the disk, though reads still see them.
                    st.file(self.id).pending.clear();
                }
                Err(e)
            }
            Verdict::Short => unreachable!("a short write applies to writes only"),
        }
    }

    fn len(&self) -> io::Result<u64> {
        let mut st = self.disk.lock();
        st.proceed(OpKind::Len, &self.path)?;
        Ok(st.file(self.id).current.len() as u64)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut st = self.disk.lock();
        let grows = len > st.file(self.id).current.len() as u64;
        match st.begin(OpKind::SetLen, &self.path, grows, 0) {
            Verdict::Proceed => {
                let f = st.file(self.id);
                let p = Pending::SetLen { len };
                apply(&mut f.current, &p);
                f.pending.push(p);
                Ok(())
            }
            Verdict::Fail(e) => Err(e),
            Verdict::Short => unreachable!("a short write applies to writes only"),
        }
    }
}

/// A lock held in a [`SimDisk`]'s lock table.
struct SimLock {
    state: Weak<Mutex<State>>,
    path: PathBuf,
    token: u64,
}

impl fmt::Debug for SimLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimLock").field("path", &self.path).finish()
    }
}

impl FileLock for SimLock {}

impl Drop for SimLock {
    fn drop(&mut self) {
        if let Some(state) = self.state.upgrade() {
            let mut st = state.lock().unwrap_or_else(|e| e.into_inner());
            if st.locks.get(&self.path).is_some_and(|(t, _)| *t == self.token) {
                st.locks.remove(&self.path);
            }
        }
    }
}

impl Vfs for SimDisk {
    fn open(&self, path: &Path, create: bool) -> io::Result<Arc<dyn StorageFile>> {
        let mut st = self.lock();
        let id = if create {
            st.proceed(OpKind::Create, path)?;
            st.new_entry(path)?
        } else {
            st.proceed(OpKind::Open, path)?;
            *st.current
                .names
                .get(path)
                .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("no file {}", path.display())))?
        };
        Ok(Arc::new(SimFile {
            disk: self.clone(),
            id,
            path: path.to_path_buf(),
        }))
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut st = self.lock();
        st.proceed(OpKind::SyncDir, dir)?;
        if !st.current.dirs.contains(dir) {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("no directory {}", dir.display()),
            ));
        }
        st.stats.syncs += 1;
        let pending = std::mem::take(&mut st.pending_dir);
        for (d, c) in pending {
            if d == dir {
                st.durable.apply(&c);
            } else {
                st.pending_dir.push((d, c));
            }
        }
        Ok(())
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut st = self.lock();
        st.proceed(OpKind::CreateDir, dir)?;
        let missing: Vec<PathBuf> = dir
            .ancestors()
            .filter(|a| !st.current.dirs.contains(*a))
            .map(Path::to_path_buf)
            .collect();
        for d in missing.into_iter().rev() {
            if st.current.names.contains_key(&d) {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("{} is a file", d.display()),
                ));
            }
            let parent = parent_of(&d)?;
            st.current.dirs.insert(d.clone());
            st.pending_dir.push((parent, DirChange::MkDir { path: d }));
        }
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut st = self.lock();
        st.proceed(OpKind::Rename, to)?;
        let id = *st
            .current
            .names
            .get(from)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("no file {}", from.display())))?;
        let parent = parent_of(to)?;
        if !st.current.dirs.contains(&parent) {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("no directory {}", parent.display()),
            ));
        }
        st.current.names.remove(from);
        st.current.names.insert(to.to_path_buf(), id);
        st.pending_dir.push((
            parent,
            DirChange::Rename {
                from: from.to_path_buf(),
                to: to.to_path_buf(),
                id,
            },
        ));
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut st = self.lock();
        st.proceed(OpKind::Remove, path)?;
        let id = st
            .current
            .names
            .remove(path)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("no file {}", path.display())))?;
        let parent = parent_of(path)?;
        st.pending_dir.push((
            parent,
            DirChange::Remove {
                path: path.to_path_buf(),
                id,
            },
        ));
        Ok(())
    }

    fn exists(&self, path: &Path) -> bool {
        let st = self.lock();
        st.current.names.contains_key(path) || st.current.dirs.contains(path)
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<OsString>> {
        let mut st = self.lock();
        st.proceed(OpKind::ListDir, dir)?;
        if !st.current.dirs.contains(dir) {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("no directory {}", dir.display()),
            ));
        }
        let child = |p: &Path| {
            (p.parent() == Some(dir))
                .then(|| p.file_name().map(|n| n.to_os_string()))
                .flatten()
        };
        let mut out: Vec<OsString> = st.current.names.keys().filter_map(|p| child(p)).collect();
        out.extend(st.current.dirs.iter().filter_map(|p| child(p)));
        Ok(out)
    }

    fn lock_exclusive(&self, path: &Path, note: &str) -> io::Result<std::result::Result<Box<dyn FileLock>, String>> {
        let mut st = self.lock();
        st.proceed(OpKind::Lock, path)?;
        if let Some((_, holder)) = st.locks.get(path) {
            return Ok(Err(holder.clone()));
        }
        if !st.current.names.contains_key(path) {
            st.new_entry(path)?;
        }
        let token = st.next_token;
        st.next_token += 1;
        st.locks.insert(path.to_path_buf(), (token, note.to_string()));
        Ok(Ok(Box::new(SimLock {
            state: Arc::downgrade(&self.state),
            path: path.to_path_buf(),
            token,
        })))
    }
}
