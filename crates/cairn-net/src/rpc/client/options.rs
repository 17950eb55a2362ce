//! How to connect: the [`ClientOptions`] (the architecture asked for, the login, limits, the
//! connect timeout, TLS) and the [`Login`] to authenticate with, whose password `Debug` hides.

use std::time::Duration;

#[cfg(doc)]
use crate::error::Error;
use crate::frame;
use crate::message::Architecture;
use crate::transport::ClientTls;

/// How to connect.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// The architecture asked for in HELLO.
    pub architecture: Architecture,
    /// The user to log in as (SCRAM-SHA-256), or `None` for a server that trusts this
    /// connection (a server without users, on loopback).
    pub login: Option<Login>,
    /// A name for the server's logs.
    pub client_name: String,
    /// Largest reply body accepted.
    pub body_max: u32,
    /// Time allowed for connecting and the handshake (the TLS handshake included).
    pub connect_timeout: Duration,
    /// TLS for a TCP connection (`None`: none). The server's certificate must verify against
    /// [`ClientTls::roots`] for [`ClientTls::server_name`], which defaults to the IP address
    /// connected to: a caller that resolved a DNS name must pass that name. A Unix socket with
    /// TLS is refused ([`Error::Tls`]).
    pub tls: Option<ClientTls>,
}

/// A user name and password to log in with. The password never crosses the wire (SCRAM), and
/// `Debug` does not print it.
#[derive(Clone, PartialEq, Eq)]
pub struct Login {
    /// The user.
    pub user: String,
    /// The user's password.
    pub password: String,
}

impl std::fmt::Debug for Login {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Login")
            .field("user", &self.user)
            .field("password", &"…")
            .finish()
    }
}

impl Default for ClientOptions {
    fn default() -> ClientOptions {
        ClientOptions {
            architecture: Architecture::RPC,
            login: None,
            client_name: format!("cairn-net client (pid {})", std::process::id()),
            body_max: frame::BODY_MAX_DEFAULT,
            connect_timeout: Duration::from_secs(10),
            tls: None,
        }
    }
}
