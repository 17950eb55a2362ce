//! The users of one database, their roles and their SCRAM-SHA-256 verifiers
//! ([`cairn_net::scram`]), kept in the file [`USERS_FILE`] (`users`) in the
//! database directory, beside the volume. The server reads it
//! ([`UsersFile`]); `cairn user` changes it ([`add`], [`remove`],
//! [`set_password`], [`set_role`]).
//!
//! # Why a file beside the volume, not objects in it
//!
//! Objects in the volume are what clients are served: a page-server client
//! fetches pages, a file-server client reads the volume file itself, an
//! object client scans groups, and every change goes through the log. A
//! verifier in any of them could be read by a client that may read at all,
//! and a verifier allows an offline dictionary attack on the password and
//! impersonating the server. The users file is reached by no client
//! request of any kind (the server only reads it, and names it to no one),
//! it is never in a page a client may fetch, it has permissions of its own
//! (0600, checked on every read as ssh checks a private key's), and it can
//! be changed while the server runs, without a transaction, by a tool that
//! needs no server.
//!
//! # Layout
//!
//! Integers are little-endian.
//!
//! | offset | size           | field                                                   |
//! |--------|----------------|---------------------------------------------------------|
//! | 0      | 8              | magic `CAIRNUSR`                                        |
//! | 8      | 2              | format version, u16 = [`FORMAT_VERSION`] (1)            |
//! | 10     | 32             | decoy secret ([`Decoy::secret`])                        |
//! | 42     | 4              | decoy iterations, u32 ([`Decoy::iterations`])           |
//! | 46     | 4              | user count N, u32                                       |
//! | 50     |                | N users, in name order, each of:                        |
//! |        | 1              | · name length L, u8 (1..=[`NAME_LEN_MAX`])              |
//! |        | L              | · name (see [`check_name`])                             |
//! |        | 1              | · role, u8: 1 read, 2 write, 3 admin                    |
//! |        | 2              | · verifier length V, u16                                |
//! |        | V              | · verifier ([`Verifier::encode`])                       |
//! | end-4  | 4              | CRC32C of every byte before it                          |
//!
//! # Invariants
//!
//! - Names are valid ([`check_name`]), unique, and in ascending byte order;
//!   at most [`USERS_MAX`] users.
//! - Every verifier decodes ([`Verifier::decode`]) and every role is known.
//! - Nothing follows the checksum, and the checksum matches.
//! - The decoy secret is generated once, when the file is first written,
//!   and every later write keeps it: an unknown user's salt, derived from
//!   it, stays the same across changes and restarts (a salt that changed
//!   would tell an attacker the user does not exist). Every write sets the
//!   decoy iterations to [`ITERATIONS_DEFAULT`], the count new verifiers
//!   get, so unknown users look like recently added ones.
//! - The file's mode gives group and others nothing (0600); reading refuses
//!   a file they may read or write ([`UsersError::Permissions`]).
//!
//! Reading checks each length before taking the bytes it covers and refuses
//! any departure from the above as [`UsersError::Damaged`], naming the
//! file, the byte offset and what is wrong; nothing in the file can make
//! reading panic or allocate more than the file's own size.
//!
//! # Changes
//!
//! A change takes an exclusive lock on `users.lock` ([`File::lock`]: an
//! advisory `flock`, released when the change ends, even if the process
//! dies), reads the file afresh under it, applies the change, writes the
//! whole new file to `users.tmp` (mode 0600), syncs it, renames it over
//! `users` and syncs the directory. So concurrent changers (two `cairn user
//! add` at once) are serialised and never lose one another's change, and a
//! crash leaves the old file or the new one, whole. Verifiers are made
//! (PBKDF2, the slow part) before the lock is taken.
//!
//! # A running server
//!
//! The server holds a [`UsersFile`] and asks it for the [`UsersFile::current`]
//! users at each login. That costs one `stat`: the file is re-read only when
//! its (length, mtime, inode) changed, and since every change renames a new
//! file into place its inode changes too. So `cairn user add` while the
//! server runs takes effect at the next login. A change that leaves the file
//! unreadable, damaged or too open keeps the last good copy (and reports the
//! error once), and so does removing the file while it named users: no
//! mishap on disk can turn a server with users into one with none, which
//! would let anyone in.

use std::collections::BTreeMap;
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::{Arc, Mutex};

use cairn_codec::{DecodeError, Reader};
use cairn_net::scram::{Decoy, ScramError, Verifier, KEY_LEN, MAX_SALT_LEN};
use cairn_storage::MANIFEST_FILE;

/// The users file's name inside a database directory.
pub const USERS_FILE: &str = "users";
/// The lock file that serialises changes to [`USERS_FILE`].
pub const USERS_LOCK_FILE: &str = "users.lock";
/// Where a change writes the new file before renaming it over [`USERS_FILE`].
pub const USERS_TMP_FILE: &str = "users.tmp";
/// The format version this build reads and writes.
pub const FORMAT_VERSION: u16 = 1;
/// PBKDF2 rounds for new verifiers and the decoy.
///
/// Eight times RFC 7677's minimum (4096, chosen in 2015, and PostgreSQL's
/// default). The server never runs PBKDF2 at a login (it checks a hash), so
/// the count costs the server nothing per login and cannot be turned against
/// it; the client pays it once per connection, a few milliseconds on a
/// current CPU. Whoever steals the users file pays it for every password
/// guessed, eight times what the minimum would cost them. Larger counts
/// (OWASP's 600,000 for stored password hashes) would make every connection
/// wait some twenty times as long.
pub const ITERATIONS_DEFAULT: u32 = 32_768;
/// The longest user name, in bytes.
pub const NAME_LEN_MAX: usize = 64;
/// The most users one file may hold.
pub const USERS_MAX: usize = 65_536;

const MAGIC: &[u8; 8] = b"CAIRNUSR";
/// Magic, version, decoy secret, decoy iterations, user count.
const HEADER_LEN: usize = 8 + 2 + KEY_LEN + 4 + 4;
/// The longest encoded verifier: version, iterations, two keys, salt length, salt.
const VERIFIER_LEN_MAX: usize = 1 + 4 + KEY_LEN + KEY_LEN + 1 + MAX_SALT_LEN;
/// The longest user entry: name length, name, role, verifier length, verifier.
const ENTRY_LEN_MAX: usize = 1 + NAME_LEN_MAX + 1 + 2 + VERIFIER_LEN_MAX;
/// The longest valid file.
const FILE_LEN_MAX: u64 = (HEADER_LEN + USERS_MAX * ENTRY_LEN_MAX + 4) as u64;

/// What a user may do. Ordered: each role may do what the ones before it may.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// May read the database.
    Read,
    /// May also change it.
    Write,
    /// May also administer the server.
    Admin,
}

impl Role {
    /// Every role, in order.
    pub const ALL: [Role; 3] = [Role::Read, Role::Write, Role::Admin];

    /// The role's name: `read`, `write` or `admin`.
    pub fn name(self) -> &'static str {
        match self {
            Role::Read => "read",
            Role::Write => "write",
            Role::Admin => "admin",
        }
    }

    /// The role's byte in the file.
    fn code(self) -> u8 {
        match self {
            Role::Read => 1,
            Role::Write => 2,
            Role::Admin => 3,
        }
    }

    /// The role a byte of the file names.
    fn from_code(code: u8) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.code() == code)
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Parses `read`, `write` or `admin` (exactly); anything else is
/// [`UsersError::InvalidRole`].
impl FromStr for Role {
    type Err = UsersError;

    fn from_str(s: &str) -> Result<Role, UsersError> {
        Role::ALL
            .into_iter()
            .find(|r| r.name() == s)
            .ok_or_else(|| UsersError::InvalidRole { role: s.to_owned() })
    }
}

/// One user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    /// The name they log in with (valid by [`check_name`]).
    pub name: String,
    /// What they may do.
    pub role: Role,
    /// Their password's verifier.
    pub verifier: Verifier,
}

/// The users of one database, as read from its users file.
#[derive(Clone, Debug)]
pub struct Users {
    decoy: Decoy,
    users: BTreeMap<String, User>,
}

impl Users {
    /// Reads the users file of the database in `dir`. Without a file there
    /// are no users, and the decoy is generated in memory (the first change
    /// writes one for good). Refuses a `dir` that is not a database
    /// ([`UsersError::NotADatabase`]) and a file that is damaged or that group
    /// or others may read or write.
    pub fn load(dir: &Path) -> Result<Users, UsersError> {
        match read(dir)? {
            Some((_, users)) => Ok(users),
            None => {
                check_database(dir)?;
                Users::none()
            }
        }
    }

    /// No users, and a new decoy.
    fn none() -> Result<Users, UsersError> {
        Ok(Users {
            decoy: Decoy::generate(ITERATIONS_DEFAULT)?,
            users: BTreeMap::new(),
        })
    }

    /// Whether there are no users.
    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }

    /// How many users there are.
    pub fn len(&self) -> usize {
        self.users.len()
    }

    /// The user called `name`.
    pub fn get(&self, name: &str) -> Option<&User> {
        self.users.get(name)
    }

    /// The users in name order (by bytes).
    pub fn iter(&self) -> impl Iterator<Item = &User> {
        self.users.values()
    }

    /// How to answer for users that do not exist (see [`cairn_net::scram`]).
    pub fn decoy(&self) -> &Decoy {
        &self.decoy
    }

    /// The file's bytes (see the module doc).
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_LEN + self.users.len() * ENTRY_LEN_MAX + 4);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        out.extend_from_slice(self.decoy.secret());
        out.extend_from_slice(&self.decoy.iterations().to_le_bytes());
        // At most USERS_MAX, checked by `add`.
        out.extend_from_slice(&(self.users.len() as u32).to_le_bytes());
        for u in self.users.values() {
            // Names are at most NAME_LEN_MAX (64) bytes, checked by `add`.
            out.push(u.name.len() as u8);
            out.extend_from_slice(u.name.as_bytes());
            out.push(u.role.code());
            let v = u.verifier.encode();
            // At most VERIFIER_LEN_MAX (134) bytes.
            out.extend_from_slice(&(v.len() as u16).to_le_bytes());
            out.extend_from_slice(&v);
        }
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Reads the file's bytes, checking every invariant of the module doc;
    /// `path` names the file in errors.
    fn decode(path: &Path, bytes: &[u8]) -> Result<Users, UsersError> {
        let damaged = |offset: usize, what: String| UsersError::Damaged {
            path: path.to_owned(),
            offset: offset as u64,
            what,
        };
        // A field the file is too short for: it was cut off.
        let short = |e: DecodeError| damaged(e.offset, format!("{}: {}: it is truncated", e.what, e.reason));
        let mut c = Reader::new(bytes);
        let magic = c.take(MAGIC.len(), "the magic number").map_err(short)?;
        if magic != MAGIC {
            return Err(damaged(
                0,
                format!("not a Cairn users file: it starts with {magic:02x?}, not \"CAIRNUSR\""),
            ));
        }
        let version = c.u16("the format version").map_err(short)?;
        if version != FORMAT_VERSION {
            return Err(damaged(
                8,
                format!("format version {version}; this build reads version {FORMAT_VERSION}"),
            ));
        }
        let secret = c.take_array::<KEY_LEN>("the decoy secret").map_err(short)?;
        let at = c.offset();
        let iterations = c.u32("the decoy iteration count").map_err(short)?;
        let decoy = Decoy::new(secret, iterations).map_err(|e| damaged(at, format!("the decoy: {e}")))?;
        let at = c.offset();
        let count = c.u32("the user count").map_err(short)?;
        if count as usize > USERS_MAX {
            return Err(damaged(
                at,
                format!("{count} users, more than the limit of {USERS_MAX}"),
            ));
        }
        let mut users = BTreeMap::new();
        let mut previous: Option<String> = None;
        for i in 0..count {
            let at = c.offset();
            let len = c.u8(&format!("the name length of user {i}")).map_err(short)?;
            let name = c
                .take(usize::from(len), &format!("the name of user {i}"))
                .map_err(short)?;
            let name = std::str::from_utf8(name)
                .map_err(|_| damaged(at + 1, format!("the name of user {i} is not UTF-8")))
                .and_then(|name| {
                    check_name(name).map_err(|why| damaged(at + 1, format!("the name {name:?}: {why}")))?;
                    Ok(name.to_owned())
                })?;
            if let Some(previous) = &previous {
                if name == *previous {
                    return Err(damaged(at, format!("the user {name:?} appears twice")));
                }
                if name < *previous {
                    return Err(damaged(
                        at,
                        format!("the user {name:?} comes after {previous:?}: not in order"),
                    ));
                }
            }
            let at = c.offset();
            let code = c.u8(&format!("the role of {name:?}")).map_err(short)?;
            let role =
                Role::from_code(code).ok_or_else(|| damaged(at, format!("{name:?} has an unknown role {code}")))?;
            let len = c.u16(&format!("the verifier length of {name:?}")).map_err(short)?;
            let at = c.offset();
            let verifier = c
                .take(usize::from(len), &format!("the verifier of {name:?}"))
                .map_err(short)?;
            let verifier =
                Verifier::decode(verifier).map_err(|e| damaged(at, format!("the verifier of {name:?}: {e}")))?;
            previous = Some(name.clone());
            users.insert(name.clone(), User { name, role, verifier });
        }
        let end = c.offset();
        let stored = c.u32("the checksum").map_err(short)?;
        if c.offset() != bytes.len() {
            let n = bytes.len() - c.offset();
            let what = if n == 1 {
                "1 byte follows".to_owned()
            } else {
                format!("{n} bytes follow")
            };
            return Err(damaged(c.offset(), format!("{what} the checksum")));
        }
        let computed = crc32c::crc32c(&bytes[..end]);
        if stored != computed {
            return Err(damaged(
                end,
                format!("checksum mismatch: stored {stored:#010x}, computed {computed:#010x}"),
            ));
        }
        Ok(Users { decoy, users })
    }
}

/// Checks a user name: 1 to [`NAME_LEN_MAX`] bytes of ASCII letters, digits,
/// `_`, `.` and `-`, not starting with `-`. Such names are safe in logs and
/// on command lines, and need no escaping in SCRAM. The error says why not.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("a user name may not be empty".into());
    }
    if name.len() > NAME_LEN_MAX {
        return Err(format!(
            "it is {} bytes long; a user name has at most {NAME_LEN_MAX}",
            name.len()
        ));
    }
    if let Some((i, c)) = name
        .char_indices()
        .find(|&(_, c)| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')))
    {
        return Err(format!(
            "it contains {c:?} at byte {i}; a user name holds only ASCII letters, digits, '_', '.' and '-'"
        ));
    }
    if name.starts_with('-') {
        return Err("it starts with '-', which would read as an option on a command line".into());
    }
    Ok(())
}

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

/// Refuses a `dir` without a manifest.
fn check_database(dir: &Path) -> Result<(), UsersError> {
    let not = |why: &'static str| UsersError::NotADatabase {
        dir: dir.to_owned(),
        why,
    };
    match fs::metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Err(not("it is not a directory")),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(not("it does not exist")),
        Err(e) => return Err(io_error(dir, "reading", e)),
    }
    let manifest = dir.join(MANIFEST_FILE);
    match fs::metadata(&manifest) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err(not("it has no MANIFEST file")),
        Err(e) => Err(io_error(&manifest, "reading", e)),
    }
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

/// What identifies one version of the users file on disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
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
fn read(dir: &Path) -> Result<Option<(Stamp, Users)>, UsersError> {
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

fn io_error(path: &Path, action: &'static str, source: io::Error) -> UsersError {
    UsersError::Io {
        path: path.to_owned(),
        action,
        source,
    }
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

/// What went wrong reading or changing a users file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UsersError {
    /// The operating system refused an operation on a file.
    #[error("{action} {}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What was being done: `opening`, `reading`, `locking`, ...
        action: &'static str,
        /// The error.
        source: io::Error,
    },
    /// The users file breaks the layout or an invariant of the module doc.
    #[error("the users file {} is damaged at byte {offset}: {what}; restore it from a backup", path.display())]
    Damaged {
        /// The file.
        path: PathBuf,
        /// Where the damage was found.
        offset: u64,
        /// What is wrong.
        what: String,
    },
    /// The users file may be read or written by group or others.
    #[error(
        "the users file {} has mode {mode:04o}: group or others may read or write it, and it holds \
         password verifiers; run `chmod 600 {}`",
        path.display(),
        path.display()
    )]
    Permissions {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The directory holds no Cairn database.
    #[error("{} is not a Cairn database: {why}", dir.display())]
    NotADatabase {
        /// The directory.
        dir: PathBuf,
        /// Why not.
        why: &'static str,
    },
    /// A user of that name exists.
    #[error("the user {name:?} exists already")]
    Exists {
        /// The name.
        name: String,
    },
    /// No user has that name.
    #[error("there is no user {name:?}")]
    NoSuchUser {
        /// The name.
        name: String,
    },
    /// The name is not a valid user name ([`check_name`]).
    #[error("invalid user name {name:?}: {why}")]
    InvalidName {
        /// The name.
        name: String,
        /// Why not.
        why: String,
    },
    /// Not `read`, `write` or `admin`.
    #[error("unknown role {role:?}: a role is read, write or admin")]
    InvalidRole {
        /// What was given.
        role: String,
    },
    /// The password is empty.
    #[error("the password is empty")]
    EmptyPassword,
    /// The file holds [`USERS_MAX`] users already.
    #[error("there are {USERS_MAX} users already, the most a database may have")]
    TooMany,
    /// The users file was removed while it named users; [`UsersFile`] keeps
    /// them.
    #[error(
        "the users file {} was removed; the server keeps the {kept} users it read last until it restarts \
         (restore the file, or add users again with `cairn user add`)",
        path.display()
    )]
    Removed {
        /// The file.
        path: PathBuf,
        /// How many users are kept.
        kept: usize,
    },
    /// Making a verifier or the decoy failed.
    #[error(transparent)]
    Scram(#[from] ScramError),
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use cairn_net::scram::MIN_ITERATIONS;

    use super::*;

    /// Iterations for test verifiers: fast.
    const ITERS: u32 = MIN_ITERATIONS;

    fn database() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let opts = cairn_storage::DbOptions {
            background: false,
            ..cairn_storage::DbOptions::default()
        };
        cairn_storage::Db::create(dir.path(), &opts).unwrap().close().unwrap();
        dir
    }

    fn add(dir: &Path, name: &str, role: Role, password: &str) -> Result<(), UsersError> {
        add_with_iterations(dir, name, role, password, ITERS)
    }

    fn set_password(dir: &Path, name: &str, password: &str) -> Result<(), UsersError> {
        set_password_with_iterations(dir, name, password, ITERS)
    }

    /// Whether `user`'s verifier is `password`'s.
    fn has_password(user: &User, password: &str) -> bool {
        let v = &user.verifier;
        Verifier::new(password, v.salt(), v.iterations()).unwrap() == *v
    }

    fn listing(users: &Users) -> Vec<(String, Role)> {
        users.iter().map(|u| (u.name.clone(), u.role)).collect()
    }

    fn users_path(dir: &Path) -> PathBuf {
        dir.join(USERS_FILE)
    }

    /// A valid file of three users.
    fn sample() -> (tempfile::TempDir, Vec<u8>) {
        let db = database();
        add(db.path(), "carol", Role::Read, "c").unwrap();
        add(db.path(), "alice", Role::Admin, "a").unwrap();
        add(db.path(), "bob", Role::Write, "b").unwrap();
        let bytes = fs::read(users_path(db.path())).unwrap();
        (db, bytes)
    }

    /// Replaces the users file (a new inode, as every real change makes).
    fn replace(dir: &Path, bytes: &[u8], mode: u32) {
        let tmp = dir.join("replacement");
        fs::write(&tmp, bytes).unwrap();
        fs::set_permissions(&tmp, fs::Permissions::from_mode(mode)).unwrap();
        fs::rename(&tmp, users_path(dir)).unwrap();
    }

    fn assert_damaged(result: Result<Users, UsersError>, context: &str) {
        match result {
            Err(UsersError::Damaged { offset, what, .. }) => {
                assert!(!what.is_empty(), "{context}: offset {offset}");
            }
            Err(e) => panic!("{context}: expected Damaged, got {e}"),
            Ok(_) => panic!("{context}: a damaged file was accepted"),
        }
    }

    /// A file of hand-made entries (name, role byte, verifier bytes) with a
    /// right checksum, so only the structural checks can refuse it.
    fn raw(version: u16, entries: &[(&str, u8, Vec<u8>)]) -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        out.extend_from_slice(&version.to_le_bytes());
        out.extend_from_slice(&[7; KEY_LEN]);
        out.extend_from_slice(&ITERATIONS_DEFAULT.to_le_bytes());
        out.extend_from_slice(&(entries.len() as u32).to_le_bytes());
        for (name, role, v) in entries {
            out.push(name.len() as u8);
            out.extend_from_slice(name.as_bytes());
            out.push(*role);
            out.extend_from_slice(&(v.len() as u16).to_le_bytes());
            out.extend_from_slice(v);
        }
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    fn verifier_bytes(password: &str) -> Vec<u8> {
        Verifier::new(password, b"0123456789abcdef", ITERS).unwrap().encode()
    }

    #[test]
    fn add_list_passwd_role_remove_round_trip_across_reloads() {
        let db = database();
        let dir = db.path();
        assert!(Users::load(dir).unwrap().is_empty());
        add(dir, "bob", Role::Admin, "bob's secret").unwrap();
        add(dir, "alice", Role::Write, "hunter2").unwrap();
        add(dir, "carol", Role::Read, "c").unwrap();

        let users = Users::load(dir).unwrap();
        assert_eq!(
            listing(&users),
            [
                ("alice".to_owned(), Role::Write),
                ("bob".to_owned(), Role::Admin),
                ("carol".to_owned(), Role::Read)
            ]
        );
        assert_eq!(users.len(), 3);
        assert!(has_password(users.get("alice").unwrap(), "hunter2"));
        assert!(has_password(users.get("bob").unwrap(), "bob's secret"));
        assert!(!has_password(users.get("bob").unwrap(), "hunter2"));
        assert!(users.get("dave").is_none());

        set_password(dir, "alice", "correct horse").unwrap();
        assert_eq!(set_role(dir, "carol", Role::Admin).unwrap(), Role::Read);
        let users = Users::load(dir).unwrap();
        let alice = users.get("alice").unwrap();
        assert!(has_password(alice, "correct horse"));
        assert!(!has_password(alice, "hunter2"));
        assert_eq!(alice.role, Role::Write);
        assert_eq!(users.get("carol").unwrap().role, Role::Admin);
        assert!(has_password(users.get("bob").unwrap(), "bob's secret"));

        remove(dir, "bob").unwrap();
        let users = Users::load(dir).unwrap();
        assert_eq!(
            listing(&users),
            [("alice".to_owned(), Role::Write), ("carol".to_owned(), Role::Admin)]
        );
        remove(dir, "alice").unwrap();
        remove(dir, "carol").unwrap();
        let users = Users::load(dir).unwrap();
        assert!(users.is_empty());
        assert!(
            users_path(dir).exists(),
            "a file of no users stays (it keeps the decoy)"
        );
    }

    #[test]
    fn the_real_iteration_count_is_used_by_default() {
        let db = database();
        super::add(db.path(), "alice", Role::Read, "pw").unwrap();
        let users = Users::load(db.path()).unwrap();
        assert_eq!(users.get("alice").unwrap().verifier.iterations(), ITERATIONS_DEFAULT);
        assert_eq!(users.decoy().iterations(), ITERATIONS_DEFAULT);
    }

    #[test]
    fn the_decoy_secret_survives_every_write() {
        let db = database();
        let dir = db.path();
        // Without a file, each load makes up its own (nothing to keep yet).
        assert_ne!(
            Users::load(dir).unwrap().decoy().secret(),
            Users::load(dir).unwrap().decoy().secret()
        );
        add(dir, "alice", Role::Write, "a").unwrap();
        let secret = *Users::load(dir).unwrap().decoy().secret();
        assert_eq!(*Users::load(dir).unwrap().decoy().secret(), secret);
        add(dir, "bob", Role::Write, "b").unwrap();
        set_password(dir, "alice", "a2").unwrap();
        set_role(dir, "bob", Role::Read).unwrap();
        remove(dir, "alice").unwrap();
        remove(dir, "bob").unwrap();
        add(dir, "carol", Role::Write, "c").unwrap();
        let users = Users::load(dir).unwrap();
        assert_eq!(*users.decoy().secret(), secret);
        assert_eq!(users.decoy().iterations(), ITERATIONS_DEFAULT);
    }

    #[test]
    fn duplicate_add_and_absent_user_are_errors() {
        let db = database();
        let dir = db.path();
        add(dir, "alice", Role::Write, "a").unwrap();
        let before = fs::read(users_path(dir)).unwrap();
        assert!(matches!(
            add(dir, "alice", Role::Admin, "other"),
            Err(UsersError::Exists { name }) if name == "alice"
        ));
        assert!(matches!(remove(dir, "bob"), Err(UsersError::NoSuchUser { name }) if name == "bob"));
        assert!(matches!(
            set_password(dir, "bob", "b"),
            Err(UsersError::NoSuchUser { .. })
        ));
        assert!(matches!(
            set_role(dir, "bob", Role::Read),
            Err(UsersError::NoSuchUser { .. })
        ));
        assert_eq!(
            fs::read(users_path(dir)).unwrap(),
            before,
            "a refused change writes nothing"
        );
        let users = Users::load(dir).unwrap();
        assert!(has_password(users.get("alice").unwrap(), "a"));
        assert_eq!(users.get("alice").unwrap().role, Role::Write);
    }

    #[test]
    fn bad_names_and_empty_passwords_are_refused() {
        let db = database();
        let dir = db.path();
        let long = "x".repeat(NAME_LEN_MAX + 1);
        for bad in [
            "",
            "-alice",
            "a b",
            "a,b",
            "a=b",
            "a\0b",
            "é",
            "a/b",
            "tab\t",
            "new\nline",
            &long,
        ] {
            match add(dir, bad, Role::Read, "pw") {
                Err(UsersError::InvalidName { name, why }) => {
                    assert_eq!(name, bad);
                    assert!(!why.is_empty());
                }
                other => panic!("{bad:?}: {other:?}"),
            }
            assert!(
                matches!(remove(dir, bad), Err(UsersError::InvalidName { .. })),
                "{bad:?}"
            );
        }
        let e = add(dir, "a b", Role::Read, "pw").unwrap_err().to_string();
        assert!(e.contains("' '") && e.contains("\"a b\""), "{e}");
        for good in ["a", "Alice.Smith-2_x", "a-", "0", &"y".repeat(NAME_LEN_MAX)] {
            add(dir, good, Role::Read, "pw").unwrap();
        }
        assert!(matches!(
            add(dir, "zed", Role::Read, ""),
            Err(UsersError::EmptyPassword)
        ));
        assert!(matches!(set_password(dir, "a", ""), Err(UsersError::EmptyPassword)));
        assert!(Users::load(dir).unwrap().get("zed").is_none());
    }

    #[test]
    fn roles_parse_print_and_order() {
        for r in Role::ALL {
            assert_eq!(r.to_string().parse::<Role>().unwrap(), r);
            assert_eq!(Role::from_code(r.code()), Some(r));
        }
        assert!(Role::Read < Role::Write && Role::Write < Role::Admin);
        assert_eq!("admin".parse::<Role>().unwrap(), Role::Admin);
        for bad in ["", "Admin", "root", "read "] {
            let e = bad.parse::<Role>().unwrap_err();
            assert!(matches!(&e, UsersError::InvalidRole { role } if role == bad));
            assert!(e.to_string().contains("read, write or admin"), "{e}");
        }
        assert_eq!(Role::from_code(0), None);
        assert_eq!(Role::from_code(4), None);
    }

    #[test]
    fn a_directory_without_a_database_is_refused() {
        let plain = tempfile::tempdir().unwrap();
        assert!(matches!(
            super::add(plain.path(), "alice", Role::Read, "pw"),
            Err(UsersError::NotADatabase { .. })
        ));
        assert!(matches!(
            set_password(plain.path(), "alice", "pw"),
            Err(UsersError::NotADatabase { .. })
        ));
        assert!(matches!(
            remove(plain.path(), "alice"),
            Err(UsersError::NotADatabase { .. })
        ));
        assert!(matches!(
            Users::load(plain.path()),
            Err(UsersError::NotADatabase { .. })
        ));
        let missing = plain.path().join("missing");
        match Users::load(&missing) {
            Err(e @ UsersError::NotADatabase { .. }) => assert!(e.to_string().contains("does not exist"), "{e}"),
            other => panic!("{other:?}"),
        }
        assert!(!plain.path().join(USERS_FILE).exists());
        assert!(!plain.path().join(USERS_LOCK_FILE).exists());
    }

    #[test]
    fn every_truncation_is_damaged() {
        let (db, bytes) = sample();
        assert_eq!(Users::decode(Path::new("users"), &bytes).unwrap().len(), 3);
        for len in 0..bytes.len() {
            assert_damaged(
                Users::decode(Path::new("users"), &bytes[..len]),
                &format!("length {len}"),
            );
        }
        replace(db.path(), &bytes[..bytes.len() / 2], 0o600);
        assert_damaged(Users::load(db.path()), "truncated on disk");
    }

    #[test]
    fn every_flipped_byte_is_damaged() {
        let (db, bytes) = sample();
        for i in 0..bytes.len() {
            for mask in [0x01, 0x80, 0xff] {
                let mut b = bytes.clone();
                b[i] ^= mask;
                assert_damaged(Users::decode(Path::new("users"), &b), &format!("byte {i} ^ {mask:#x}"));
            }
        }
        let mut b = bytes.clone();
        b[HEADER_LEN + 3] ^= 0x20;
        replace(db.path(), &b, 0o600);
        match Users::load(db.path()) {
            Err(e @ UsersError::Damaged { .. }) => {
                let s = e.to_string();
                assert!(s.contains(&users_path(db.path()).display().to_string()), "{s}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn trailing_bytes_are_refused() {
        let (db, bytes) = sample();
        for extra in [&[0u8][..], &[0; 4], &bytes[..]] {
            let mut b = bytes.clone();
            b.extend_from_slice(extra);
            match Users::decode(Path::new("users"), &b) {
                Err(UsersError::Damaged { offset, what, .. }) => {
                    assert_eq!(offset as usize, bytes.len());
                    assert!(what.starts_with(&format!("{} byte", extra.len())), "{what}");
                    assert!(what.ends_with("the checksum"), "{what}");
                }
                other => panic!("{other:?}"),
            }
        }
        let mut b = bytes.clone();
        b.push(0);
        replace(db.path(), &b, 0o600);
        assert_damaged(Users::load(db.path()), "trailing byte on disk");
    }

    #[test]
    fn structural_damage_under_a_right_checksum_is_refused() {
        let path = Path::new("users");
        let a = || verifier_bytes("a");
        let ok = raw(FORMAT_VERSION, &[("alice", 1, a()), ("bob", 3, a())]);
        assert_eq!(Users::decode(path, &ok).unwrap().len(), 2);
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (raw(2, &[("alice", 1, a())]), "format version 2"),
            (raw(FORMAT_VERSION, &[("alice", 4, a())]), "unknown role 4"),
            (raw(FORMAT_VERSION, &[("alice", 0, a())]), "unknown role 0"),
            (raw(FORMAT_VERSION, &[("alice", 1, a()), ("alice", 2, a())]), "twice"),
            (
                raw(FORMAT_VERSION, &[("bob", 1, a()), ("alice", 2, a())]),
                "not in order",
            ),
            (raw(FORMAT_VERSION, &[("alice", 1, a()[1..].to_vec())]), "verifier"),
            (raw(FORMAT_VERSION, &[("alice", 1, vec![])]), "verifier"),
            (raw(FORMAT_VERSION, &[("-x", 1, a())]), "'-'"),
            (raw(FORMAT_VERSION, &[("", 1, a())]), "empty"),
            (raw(FORMAT_VERSION, &[("a b", 1, a())]), "' '"),
        ];
        for (bytes, expect) in cases {
            match Users::decode(path, &bytes) {
                Err(UsersError::Damaged { what, .. }) => assert!(what.contains(expect), "{expect}: {what}"),
                other => panic!("{expect}: {other:?}"),
            }
        }
        // A user count past the limit, and one past the entries there are.
        let mut many = raw(FORMAT_VERSION, &[]);
        many[46..50].copy_from_slice(&(USERS_MAX as u32 + 1).to_le_bytes());
        assert_damaged(Users::decode(path, &many), "too many users");
        let mut more = raw(FORMAT_VERSION, &[("alice", 1, a())]);
        more[46..50].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_damaged(Users::decode(path, &more), "count past the entries");
        // A decoy iteration count out of range.
        let mut low = raw(FORMAT_VERSION, &[]);
        low[42..46].copy_from_slice(&1u32.to_le_bytes());
        let n = low.len() - 4;
        let crc = crc32c::crc32c(&low[..n]);
        low[n..].copy_from_slice(&crc.to_le_bytes());
        assert_damaged(Users::decode(path, &low), "decoy iterations");
        assert_damaged(Users::decode(path, b"CAIRNMF\0\x01\x00"), "another file's magic");
    }

    #[test]
    fn a_file_others_may_read_is_refused() {
        let (db, bytes) = sample();
        let dir = db.path();
        let path = users_path(dir);
        assert_eq!(fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
        assert_eq!(fs::metadata(dir.join(USERS_LOCK_FILE)).unwrap().mode() & 0o777, 0o600);
        assert!(!dir.join(USERS_TMP_FILE).exists());
        for mode in [0o644, 0o640, 0o604, 0o620, 0o602, 0o610] {
            fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
            match Users::load(dir) {
                Err(e @ UsersError::Permissions { .. }) => {
                    let s = e.to_string();
                    assert!(s.contains(&format!("chmod 600 {}", path.display())), "{s}");
                    assert!(s.contains(&format!("{mode:04o}")), "{s}");
                }
                other => panic!("{mode:o}: {other:?}"),
            }
            assert!(matches!(remove(dir, "alice"), Err(UsersError::Permissions { .. })));
        }
        fs::set_permissions(&path, fs::Permissions::from_mode(0o400)).unwrap();
        assert_eq!(Users::load(dir).unwrap().len(), 3);
        replace(dir, &bytes, 0o600);
        assert_eq!(Users::load(dir).unwrap().len(), 3);
    }

    #[test]
    fn users_file_sees_changes_and_keeps_the_last_good_copy() {
        let db = database();
        let dir = db.path();
        let file = UsersFile::open(dir).unwrap();
        assert!(file.current().unwrap().is_empty());
        add(dir, "alice", Role::Write, "a").unwrap();
        let now = file.current().unwrap();
        assert_eq!(listing(&now), [("alice".to_owned(), Role::Write)]);
        assert!(
            Arc::ptr_eq(&now, &file.current().unwrap()),
            "unchanged: the cached copy"
        );
        set_role(dir, "alice", Role::Read).unwrap();
        add(dir, "bob", Role::Admin, "b").unwrap();
        let good = file.current().unwrap();
        assert_eq!(
            listing(&good),
            [("alice".to_owned(), Role::Read), ("bob".to_owned(), Role::Admin)]
        );

        // Damaged: the error once, then the last good copy.
        let mut bytes = fs::read(users_path(dir)).unwrap();
        bytes[HEADER_LEN + 2] ^= 1;
        replace(dir, &bytes, 0o600);
        assert!(matches!(file.current(), Err(UsersError::Damaged { .. })));
        assert!(Arc::ptr_eq(&file.last_good(), &good));
        assert!(Arc::ptr_eq(&file.current().unwrap(), &good));
        assert!(Arc::ptr_eq(&file.current().unwrap(), &good));

        // Too open: likewise.
        bytes[HEADER_LEN + 2] ^= 1;
        replace(dir, &bytes, 0o644);
        assert!(matches!(file.current(), Err(UsersError::Permissions { .. })));
        assert!(Arc::ptr_eq(&file.current().unwrap(), &good));

        // Mended: read again.
        fs::set_permissions(users_path(dir), fs::Permissions::from_mode(0o600)).unwrap();
        add(dir, "carol", Role::Read, "c").unwrap();
        assert_eq!(file.current().unwrap().len(), 3);

        // Removed while it named users: kept, the error once.
        fs::remove_file(users_path(dir)).unwrap();
        assert!(matches!(file.current(), Err(UsersError::Removed { kept: 3, .. })));
        assert_eq!(file.current().unwrap().len(), 3);
        // A new file is read.
        add(dir, "dave", Role::Read, "d").unwrap();
        assert_eq!(listing(&file.current().unwrap()), [("dave".to_owned(), Role::Read)]);
    }

    #[test]
    fn users_file_opens_a_damaged_file_as_an_error() {
        let (db, mut bytes) = sample();
        bytes[0] = b'X';
        replace(db.path(), &bytes, 0o600);
        assert!(matches!(
            UsersFile::open(db.path()),
            Err(UsersError::Damaged { offset: 0, .. })
        ));
        assert!(matches!(
            add(db.path(), "x", Role::Read, "x"),
            Err(UsersError::Damaged { .. })
        ));
        assert_eq!(
            fs::read(users_path(db.path())).unwrap(),
            bytes,
            "a damaged file is not overwritten"
        );
    }

    #[test]
    fn concurrent_adds_lose_nothing() {
        let db = database();
        let dir = db.path();
        std::thread::scope(|s| {
            for t in 0..2 {
                s.spawn(move || {
                    for i in 0..20 {
                        add(dir, &format!("user{t}-{i:02}"), Role::Write, "pw").unwrap();
                    }
                });
            }
        });
        let users = Users::load(dir).unwrap();
        assert_eq!(users.len(), 40);
        for t in 0..2 {
            for i in 0..20 {
                assert!(users.get(&format!("user{t}-{i:02}")).is_some(), "user{t}-{i:02}");
            }
        }
        assert!(!dir.join(USERS_TMP_FILE).exists());
    }
}
