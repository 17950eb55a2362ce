//! `cairn user`: the users of a database and their roles (the `users` file
//! beside the volume, see [`cairn_server::users`]). A running server reads
//! the file again when it changes, so every change here applies from the
//! next login on; sessions already logged in are not affected.
//!
//! Passwords come from `--password-file FILE` (which group and others may
//! not read, as for the users file itself) or as one line on stdin; a
//! trailing newline is not part of the password, and an empty one is
//! refused.

use std::io::{BufRead, IsTerminal, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use cairn_server::users::{self, Role, Users};
use clap::Subcommand;

/// The `cairn user` subcommands.
#[derive(Subcommand, Debug)]
pub enum UserCommand {
    /// Add a user (the password from --password-file, or one line on stdin).
    Add {
        /// The database directory.
        dir: PathBuf,
        /// The user's name: 1 to 64 ASCII letters, digits, '_', '.' or '-', not starting with '-'.
        name: String,
        /// What the user may do: read, write or admin.
        #[arg(long, default_value_t = Role::Write)]
        role: Role,
        /// Read the password from this file (mode 0600 or stricter) instead of stdin.
        #[arg(long)]
        password_file: Option<PathBuf>,
    },
    /// Change a user's password (from --password-file, or one line on stdin).
    Passwd {
        /// The database directory.
        dir: PathBuf,
        /// The user.
        name: String,
        /// Read the password from this file (mode 0600 or stricter) instead of stdin.
        #[arg(long)]
        password_file: Option<PathBuf>,
    },
    /// Change a user's role.
    Role {
        /// The database directory.
        dir: PathBuf,
        /// The user.
        name: String,
        /// The new role: read, write or admin.
        role: Role,
    },
    /// Remove a user.
    Remove {
        /// The database directory.
        dir: PathBuf,
        /// The user.
        name: String,
    },
    /// List the users and their roles, one `NAME ROLE` line each, by name.
    List {
        /// The database directory.
        dir: PathBuf,
    },
}

/// What a running server does with a change.
const PICKED_UP: &str = "a running server applies it from the next login";

/// Runs one `cairn user` subcommand.
pub fn run(command: UserCommand) -> anyhow::Result<()> {
    match command {
        UserCommand::Add {
            dir,
            name,
            role,
            password_file,
        } => {
            precheck(&dir, &name, false)?;
            let password = password(password_file.as_deref(), &name)?;
            users::add(&dir, &name, role, &password)?;
            println!("added user {name} ({role}) to {}; {PICKED_UP}", dir.display());
        }
        UserCommand::Passwd {
            dir,
            name,
            password_file,
        } => {
            precheck(&dir, &name, true)?;
            let password = password(password_file.as_deref(), &name)?;
            users::set_password(&dir, &name, &password)?;
            println!("changed the password of {name} in {}; {PICKED_UP}", dir.display());
        }
        UserCommand::Role { dir, name, role } => {
            let was = users::set_role(&dir, &name, role)?;
            println!("{name} is now {role} (was {was}) in {}; {PICKED_UP}", dir.display());
        }
        UserCommand::Remove { dir, name } => {
            users::remove(&dir, &name)?;
            println!("removed user {name} from {}; {PICKED_UP}", dir.display());
        }
        UserCommand::List { dir } => {
            let users = Users::load(&dir)?;
            let mut out = std::io::stdout().lock();
            if users.is_empty() {
                writeln!(out, "no users: loopback connections are trusted")?;
            }
            for u in users.iter() {
                writeln!(out, "{} {}", u.name, u.role)?;
            }
        }
    }
    Ok(())
}

/// Fails before a password is asked for if the change would be refused: an
/// invalid name, a `dir` that is no database or whose users file is
/// unreadable, a user that exists (`add`) or does not (`passwd`). The
/// change checks all this again under its lock.
fn precheck(dir: &Path, name: &str, exists: bool) -> anyhow::Result<()> {
    users::check_name(name).map_err(|why| users::UsersError::InvalidName {
        name: name.to_owned(),
        why,
    })?;
    let found = Users::load(dir)?.get(name).is_some();
    let name = name.to_owned();
    match (exists, found) {
        (true, false) => Err(users::UsersError::NoSuchUser { name }.into()),
        (false, true) => Err(users::UsersError::Exists { name }.into()),
        _ => Ok(()),
    }
}

/// The password for `name`: the first line of `file`, which group and
/// others may not read or write, or one line of stdin; without the newline
/// that ends it. Refuses an empty password and more than one line.
fn password(file: Option<&Path>, name: &str) -> anyhow::Result<String> {
    let (text, from) = match file {
        Some(file) => {
            let meta =
                std::fs::metadata(file).with_context(|| format!("reading the password file {}", file.display()))?;
            let mode = meta.mode() & 0o7777;
            if mode & 0o077 != 0 {
                bail!(
                    "the password file {} has mode {mode:04o}: group or others may read or write it; \
                     run `chmod 600 {}`",
                    file.display(),
                    file.display()
                );
            }
            let text = std::fs::read_to_string(file)
                .with_context(|| format!("reading the password file {}", file.display()))?;
            (text, format!("the password file {}", file.display()))
        }
        None => {
            let stdin = std::io::stdin();
            if stdin.is_terminal() {
                // The password is echoed: there is no portable way to hide
                // it without a terminal library. Use --password-file to
                // keep it off the screen.
                eprint!("password for {name} (shown as typed): ");
                std::io::stderr().flush()?;
            }
            let mut line = String::new();
            stdin
                .lock()
                .read_line(&mut line)
                .context("reading the password from stdin")?;
            (line, "stdin".to_owned())
        }
    };
    let password = text.strip_suffix('\n').unwrap_or(&text);
    let password = password.strip_suffix('\r').unwrap_or(password);
    if password.contains(['\n', '\r']) {
        bail!("{from} holds more than one line; a password is one line");
    }
    if password.is_empty() {
        bail!("the password from {from} is empty");
    }
    Ok(password.to_owned())
}
