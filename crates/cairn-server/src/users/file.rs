//! The users file on disk as the server reads it: one read, checked
//! whole ([`read`]), and [`UsersFile`], which re-reads it only when its
//! stamp (length, mtime, inode) changed and keeps the last good copy (see
//! the module docs' "A running server").

use std::fs::{self, File};
use std::io::{self, Read};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::*;

/// What identifies one version of the users file on disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Stamp {
    len: u64,
    mtime: i64,
    mtime_nsec: i64,
    ino: u64,
    dev: u64,
}

impl Stamp {
    fn of(m: &fs::Metadata) -> Stamp {
        Stamp {
            len: m.len(),
            mtime: m.mtime(),
            mtime_nsec: m.mtime_nsec(),
            ino: m.ino(),
            dev: m.dev(),
        }
    }
}

/// Reads the users file of `dir` and the stamp of what was read; `None` if
/// there is no file. Refuses a file group or others may read or write.
pub(super) fn read(dir: &Path) -> Result<Option<(Stamp, Users)>, UsersError> {
    let path = dir.join(USERS_FILE);
    let f = match File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_error(&path, "opening", e)),
    };
    let meta = f.metadata().map_err(|e| io_error(&path, "reading", e))?;
    let damaged = |offset: u64, what: String| UsersError::Damaged {
        path: path.clone(),
        offset,
        what,
    };
    if !meta.is_file() {
        return Err(damaged(0, "it is not a regular file".into()));
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(UsersError::Permissions { path, mode });
    }
    let mut bytes = Vec::new();
    f.take(FILE_LEN_MAX + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| io_error(&path, "reading", e))?;
    if bytes.len() as u64 > FILE_LEN_MAX {
        return Err(damaged(
            FILE_LEN_MAX,
            format!("it is longer than {FILE_LEN_MAX} bytes, the most {USERS_MAX} users take"),
        ));
    }
    Ok(Some((Stamp::of(&meta), Users::decode(&path, &bytes)?)))
}

/// The users file as a running server sees it: reloaded when it changed on
/// disk.
#[derive(Debug)]
pub struct UsersFile {
    dir: PathBuf,
    state: Mutex<Seen>,
}

/// What [`UsersFile`] last saw on disk, and the users it last read well.
#[derive(Debug)]
struct Seen {
    file: OnDisk,
    good: Arc<Users>,
}

/// The users file's state on disk, as far as a `stat` tells.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OnDisk {
    File(Stamp),
    Missing,
    Unreadable(io::ErrorKind),
}

impl UsersFile {
    /// Reads the users file of the database in `dir` (see [`Users::load`]).
    pub fn open(dir: &Path) -> Result<UsersFile, UsersError> {
        let seen = match read(dir)? {
            Some((stamp, users)) => Seen {
                file: OnDisk::File(stamp),
                good: Arc::new(users),
            },
            None => {
                check_database(dir)?;
                Seen {
                    file: OnDisk::Missing,
                    good: Arc::new(Users::none()?),
                }
            }
        };
        Ok(UsersFile {
            dir: dir.to_owned(),
            state: Mutex::new(seen),
        })
    }

    /// The current users: the cached copy, or the file re-read if its
    /// (length, mtime, inode) changed since. A file that became unreadable or
    /// damaged keeps the last good copy and returns the error once per change
    /// (the server logs it and goes on with [`UsersFile::last_good`]), never
    /// an empty set that would open the door. So does a file removed while it
    /// named users ([`UsersError::Removed`]); one that named none may go.
    pub fn current(&self) -> Result<Arc<Users>, UsersError> {
        let mut seen = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let path = self.dir.join(USERS_FILE);
        let now = match fs::metadata(&path) {
            Ok(m) => OnDisk::File(Stamp::of(&m)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => OnDisk::Missing,
            Err(e) => {
                let kind = OnDisk::Unreadable(e.kind());
                if seen.file == kind {
                    return Ok(seen.good.clone());
                }
                seen.file = kind;
                return Err(io_error(&path, "reading", e));
            }
        };
        if now == seen.file {
            return Ok(seen.good.clone());
        }
        let read = match now {
            OnDisk::File(_) => read(&self.dir),
            _ => Ok(None),
        };
        match read {
            Ok(Some((stamp, users))) => {
                seen.file = OnDisk::File(stamp);
                seen.good = Arc::new(users);
                Ok(seen.good.clone())
            }
            Ok(None) => {
                seen.file = OnDisk::Missing;
                if seen.good.is_empty() {
                    Ok(seen.good.clone())
                } else {
                    Err(UsersError::Removed {
                        path,
                        kept: seen.good.len(),
                    })
                }
            }
            Err(e) => {
                seen.file = now;
                Err(e)
            }
        }
    }

    /// The users last read well (what [`UsersFile::current`] returns after
    /// it reported an error).
    pub fn last_good(&self) -> Arc<Users> {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).good.clone()
    }
}
