//! The layer's error type.

use std::sync::Arc;

use crate::frame::FrameError;
use crate::message::{Fault, MessageError};

/// Everything that can go wrong in `cairn-net`. Cloneable, because one broken connection fails
/// every call waiting on it with the same error.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A socket operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: &'static str,
        /// The OS error.
        source: Arc<std::io::Error>,
    },
    /// The peer sent a bad frame; the connection is closed.
    #[error(transparent)]
    Frame(#[from] FrameError),
    /// The peer sent a well-framed but bad message; the connection is closed.
    #[error(transparent)]
    Message(#[from] MessageError),
    /// The server refused the handshake (unknown token, unsupported version, …).
    #[error("refused by the server: {0}")]
    Refused(Fault),
    /// The request failed on the server (an error reply); the connection stays open.
    #[error("error reply: {0}")]
    Remote(Fault),
    /// The server closed the connection, saying why (GOODBYE).
    #[error("connection closed by the server: {0}")]
    Closed(Fault),
    /// The connection ended without a GOODBYE.
    #[error("connection lost")]
    Disconnected,
    /// The peer broke the protocol's rules (e.g. a reply to no request).
    #[error("protocol violation: {0}")]
    Protocol(String),
    /// A body over the limit the other side announced.
    #[error("body of {len} bytes exceeds the limit of {max} bytes")]
    TooLarge {
        /// The body's length.
        len: usize,
        /// The limit.
        max: u32,
    },
    /// Something did not happen in time.
    #[error("timed out: {0}")]
    Timeout(&'static str),
    /// A request kind the caller may not send (an envelope kind other than PING).
    #[error("kind {0:#06x} is not a request kind")]
    NotARequest(u16),
    /// TLS failed: the client's TLS settings could not be used (a CA file that is missing or
    /// holds no certificate, say), the TLS handshake failed (the server's certificate did not
    /// verify, or the server does not speak TLS), or the TLS session broke. The text says why.
    #[error("TLS: {0}")]
    Tls(String),
}

impl Error {
    /// Wraps an I/O error with what was being done.
    pub fn io(context: &'static str, source: std::io::Error) -> Error {
        Error::Io {
            context,
            source: Arc::new(source),
        }
    }
}

/// The layer's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
