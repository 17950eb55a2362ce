//! The changes `cairn user` makes: each under an exclusive lock on
//! `users.lock`, the file read afresh, the whole new file written to
//! `users.tmp`, synced and renamed into place (see the module docs'
//! "Changes").

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use cairn_net::scram::{Decoy, Verifier};

use super::*;

/// Adds the user `name` with `role` and `password` to the database in `dir`.
/// Refuses an invalid name, an empty password, a `dir` that is not a
/// database, and a user that exists.
pub fn add(dir: &Path, name: &str, role: Role, password: &str) -> Result<(), UsersError> {
    add_with_iterations(dir, name, role, password, ITERATIONS_DEFAULT)
}

/// [`add`] with a verifier of `iterations` rounds (tests use fewer).
pub(crate) fn add_with_iterations(
    dir: &Path,
    name: &str,
    role: Role,
    password: &str,
    iterations: u32,
) -> Result<(), UsersError> {
    valid_name(name)?;
    let verifier = new_verifier(dir, password, iterations)?;
    change(dir, |users| {
        if users.contains_key(name) {
            return Err(UsersError::Exists { name: name.to_owned() });
        }
        if users.len() >= USERS_MAX {
            return Err(UsersError::TooMany);
        }
        let user = User {
            name: name.to_owned(),
            role,
            verifier,
        };
        users.insert(name.to_owned(), user);
        Ok(())
    })
}

/// Removes the user `name` from the database in `dir`; an error if there is
/// no such user.
pub fn remove(dir: &Path, name: &str) -> Result<(), UsersError> {
    valid_name(name)?;
    change(dir, |users| match users.remove(name) {
        Some(_) => Ok(()),
        None => Err(UsersError::NoSuchUser { name: name.to_owned() }),
    })
}

/// Gives the user `name` a new password (a verifier with a new salt and
/// [`ITERATIONS_DEFAULT`] rounds). Refuses an empty password.
pub fn set_password(dir: &Path, name: &str, password: &str) -> Result<(), UsersError> {
    set_password_with_iterations(dir, name, password, ITERATIONS_DEFAULT)
}

/// [`set_password`] with a verifier of `iterations` rounds (tests use fewer).
pub(crate) fn set_password_with_iterations(
    dir: &Path,
    name: &str,
    password: &str,
    iterations: u32,
) -> Result<(), UsersError> {
    valid_name(name)?;
    let verifier = new_verifier(dir, password, iterations)?;
    change(dir, |users| match users.get_mut(name) {
        Some(user) => {
            user.verifier = verifier;
            Ok(())
        }
        None => Err(UsersError::NoSuchUser { name: name.to_owned() }),
    })
}

/// Gives the user `name` the role `role`; returns the role they had.
pub fn set_role(dir: &Path, name: &str, role: Role) -> Result<Role, UsersError> {
    valid_name(name)?;
    let mut was = role;
    change(dir, |users| match users.get_mut(name) {
        Some(user) => {
            was = std::mem::replace(&mut user.role, role);
            Ok(())
        }
        None => Err(UsersError::NoSuchUser { name: name.to_owned() }),
    })?;
    Ok(was)
}

/// [`check_name`] as a [`UsersError`].
fn valid_name(name: &str) -> Result<(), UsersError> {
    check_name(name).map_err(|why| UsersError::InvalidName {
        name: name.to_owned(),
        why,
    })
}

/// The verifier of a new password for the database in `dir`: refuses an
/// empty password and a `dir` that is not a database before the slow part.
fn new_verifier(dir: &Path, password: &str, iterations: u32) -> Result<Verifier, UsersError> {
    if password.is_empty() {
        return Err(UsersError::EmptyPassword);
    }
    check_database(dir)?;
    Ok(Verifier::generate(password, iterations)?)
}

/// One change to the users file of `dir`, serialised with every other (see
/// the module doc).
fn change(
    dir: &Path,
    apply: impl FnOnce(&mut BTreeMap<String, User>) -> Result<(), UsersError>,
) -> Result<(), UsersError> {
    check_database(dir)?;
    let lock_path = dir.join(USERS_LOCK_FILE);
    let lock = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&lock_path)
        .map_err(|e| io_error(&lock_path, "opening", e))?;
    lock.lock().map_err(|e| io_error(&lock_path, "locking", e))?;
    let mut users = match read(dir)? {
        Some((_, users)) => users,
        None => Users::none()?,
    };
    apply(&mut users.users)?;
    users.decoy = Decoy::new(*users.decoy.secret(), ITERATIONS_DEFAULT)?;
    write(dir, &users.encode())
    // The lock is released when `lock` is dropped.
}

/// Writes `bytes` as the users file of `dir`: to a new file, synced, renamed
/// into place, the directory synced.
fn write(dir: &Path, bytes: &[u8]) -> Result<(), UsersError> {
    let tmp = dir.join(USERS_TMP_FILE);
    // A file left by a change that failed (we hold the lock, so no change is
    // writing it now); removed so the new one is created with mode 0600.
    match fs::remove_file(&tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_error(&tmp, "removing", e)),
    }
    let written = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut f| {
            f.write_all(bytes)?;
            f.sync_all()
        });
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(io_error(&tmp, "writing", e));
    }
    let path = dir.join(USERS_FILE);
    fs::rename(&tmp, &path).map_err(|e| io_error(&path, "renaming into place", e))?;
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_error(dir, "syncing", e))
}
