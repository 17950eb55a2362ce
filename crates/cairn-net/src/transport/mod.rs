//! Transports: TCP and Unix domain sockets behind one address, listener and stream type, so
//! that everything above carries the same frames over either; and TLS over TCP ([`tls`]), which
//! wraps the byte stream and leaves the frames as they are.
//!
//! TCP connections have `TCP_NODELAY` set on both sides: every frame is a message someone waits
//! for, and the RPC layer batches writes itself.
//!
//! [`Address`] and the client's TLS settings ([`ClientTls`], [`TlsRoots`]) are always here; the
//! tokio listener and stream types and [`ServerTls`] (the server's half) only with the `server`
//! feature, so the blocking client and embedded users do not link tokio.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;

#[cfg(feature = "server")]
mod sockets;
pub mod tls;
#[cfg(feature = "server")]
pub use sockets::{Incoming, Listener, ReadHalf, Stream, TlsStream, WriteHalf};
#[cfg(feature = "server")]
pub use tls::ServerTls;
pub use tls::{ClientTls, TlsError, TlsRoots};

/// Where a server listens or a client connects: `host:port` for TCP, `unix:PATH` for a Unix socket.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Address {
    /// A TCP address.
    Tcp(SocketAddr),
    /// A Unix domain socket path.
    Unix(PathBuf),
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Address::Tcp(a) => write!(f, "{a}"),
            Address::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

impl FromStr for Address {
    type Err = String;

    fn from_str(s: &str) -> Result<Address, String> {
        if let Some(path) = s.strip_prefix("unix:") {
            if path.is_empty() {
                return Err("empty Unix socket path".into());
            }
            return Ok(Address::Unix(PathBuf::from(path)));
        }
        s.parse::<SocketAddr>()
            .map(Address::Tcp)
            .map_err(|e| format!("bad address {s:?} (want HOST:PORT or unix:PATH): {e}"))
    }
}
