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
//! A change takes an exclusive lock on `users.lock` ([`File::lock`](std::fs::File::lock): an
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
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use cairn_codec::{DecodeError, Reader};
use cairn_net::scram::{Decoy, ScramError, Verifier, KEY_LEN, MAX_SALT_LEN};
use cairn_storage::MANIFEST_FILE;

mod change;
mod file;
#[cfg(test)]
mod tests;

pub use change::{add, remove, set_password, set_role};
#[cfg(test)]
pub(crate) use change::{add_with_iterations, set_password_with_iterations};
use file::read;
pub use file::UsersFile;

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

fn io_error(path: &Path, action: &'static str, source: io::Error) -> UsersError {
    UsersError::Io {
        path: path.to_owned(),
        action,
        source,
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
