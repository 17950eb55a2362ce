//! Who may connect and what each session may change.
//!
//! **Logins.** The users and their SCRAM verifiers are in the database
//! directory's users file (`users.rs`), re-read when it changes, so `cairn
//! user add` works while the server runs. A HELLO that logs in is checked by
//! the RPC layer against [`Access::credentials`]; [`Access::admit`] then
//! gives the session its role. A HELLO without a login is admitted only
//! while the database has no users **and** the server was started to trust
//! such connections (every listener on loopback or a Unix socket:
//! PostgreSQL's `trust` for local connections, for development); it then
//! gets the `admin` role, and the server says so in its log at start. Once
//! a user exists, every connection must log in.
//!
//! **Roles** become a [`Restriction`] on every transaction of the session
//! ([`Access::restriction`]), checked by the storage engine where each lock
//! that allows a change is taken — so no request of any service (page,
//! file, object, methods) can get around it:
//!
//! | role | may |
//! |---|---|
//! | `read` | read; every change is refused (PermissionDenied, the transaction doomed) |
//! | `write` | change objects and the entries of indexes; not the schema — the group `cairn.system`, which holds the catalog (classes, the index directory) and the named roots — so registering or evolving a class, adding or dropping an index or naming a root is refused |
//! | `admin` | everything; the schema only by CATALOG requests (`catalog.rs`), like every client |
//!
//! The schema's group is found by page ([`Db::group_of_page`], a read of the
//! volume's space map without a lock), so the check costs no I/O. No
//! role's own locks may change it: the schema changes only through CATALOG
//! requests, which the server checks for meaning and makes itself, and
//! only for an `admin`. A new database gets its catalog from its first
//! typed client, which must therefore be an `admin`.

use std::sync::{Arc, OnceLock};

use cairn_net::message::{ErrorCode, Fault};
use cairn_net::scram::{Decoy, Verifier};
use cairn_storage::{Db, GroupId, Restriction};

use crate::users::{Role, Users, UsersFile};

/// The group holding the catalog and the named roots (the typed layer's
/// `cairn.system`).
pub const SCHEMA_GROUP: &str = "cairn.system";

/// Who may connect, and what each role may change.
pub struct Access {
    db: Arc<Db>,
    users: Option<UsersFile>,
    trust_without_login: bool,
    /// The schema's group, once it exists.
    schema: Arc<OnceLock<GroupId>>,
}

impl Access {
    /// Access to `db` for the users of `users` (none: a server without a
    /// users file, which admits only connections without a login, and only
    /// if `trust_without_login`).
    pub fn new(db: Arc<Db>, users: Option<UsersFile>, trust_without_login: bool) -> Access {
        Access {
            db,
            users,
            trust_without_login,
            schema: Arc::new(OnceLock::new()),
        }
    }
    /// Reads users from `users` from now on.
    pub fn set_users(&mut self, users: UsersFile) {
        self.users = Some(users);
    }

    /// The users now (the last good copy if the file became unreadable;
    /// the error is logged once per change).
    fn users(&self) -> Option<Arc<Users>> {
        let file = self.users.as_ref()?;
        Some(file.current().unwrap_or_else(|e| {
            tracing::error!(error = %e, "the users file cannot be read; the last good copy stays in force");
            file.last_good()
        }))
    }

    /// Whether the server has any user (then every connection must log in).
    pub fn has_users(&self) -> bool {
        self.users().is_some_and(|u| !u.is_empty())
    }

    /// What a login as `user` is checked against; `None` when the server
    /// has no users (a login is then refused).
    pub fn credentials(&self, user: &str) -> Option<(Option<Verifier>, Decoy)> {
        let users = self.users()?;
        if users.is_empty() {
            return None;
        }
        Some((users.get(user).map(|u| u.verifier.clone()), users.decoy().clone()))
    }

    /// The role of a session whose HELLO proved `user` (or logged in as
    /// nobody), or the refusal.
    pub fn admit(&self, peer: &str, user: Option<&str>) -> Result<Role, Fault> {
        match user {
            Some(name) => match self.users().and_then(|u| u.get(name).map(|u| u.role)) {
                Some(role) => Ok(role),
                // Removed between the proof and now.
                None => Err(Fault::new(ErrorCode::AUTH_FAILED, "authentication failed")),
            },
            None if self.has_users() => {
                tracing::warn!(peer, "refused: a connection without a login to a server with users");
                Err(Fault::new(
                    ErrorCode::AUTH_FAILED,
                    "this server requires a login: connect with a user and password",
                ))
            }
            None if self.trust_without_login => Ok(Role::Admin),
            None => Err(Fault::new(
                ErrorCode::AUTH_FAILED,
                "this server trusts no connection without a login and has no users: add one with `cairn user add`",
            )),
        }
    }

    /// The restriction every transaction of a session of `role` runs under:
    /// no role's own locks may change the schema group's pages; an
    /// `admin` changes the schema only by CATALOG requests, which the
    /// server checks and makes with its own code (`catalog.rs`).
    pub fn restriction(&self, role: Role) -> Restriction {
        let why = match role {
            Role::Read => {
                return Restriction {
                    read_only: true,
                    protected: None,
                }
            }
            Role::Write => "which only an admin may change (by CATALOG requests)",
            Role::Admin => "which a client changes only by CATALOG requests",
        };
        let db = self.db.clone();
        let schema = self.schema.clone();
        Restriction {
            read_only: false,
            protected: Some(Arc::new(move |p| {
                let g = match schema.get() {
                    Some(g) => *g,
                    None => {
                        let g = db.group(SCHEMA_GROUP).ok()?;
                        let _ = schema.set(g);
                        g
                    }
                };
                (db.group_of_page(p) == Some(g))
                    .then(|| format!("page {p} holds the schema (classes, indexes, named roots), {why}"))
            })),
        }
    }
}
