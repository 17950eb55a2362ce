//! The tokio half of the transports: listener, stream and its split halves.

use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{tcp, unix, TcpListener, TcpStream, UnixListener, UnixStream};

use super::tls::{ServerTls, TlsError};
use super::Address;

/// A server-side TLS session over TCP.
pub type TlsStream = tokio_rustls::server::TlsStream<TcpStream>;

/// A bound listening socket.
#[derive(Debug)]
pub enum Listener {
    /// TCP.
    Tcp(TcpListener),
    /// Unix domain socket.
    Unix(UnixListener),
    /// TCP whose connections speak TLS ([`Listener::with_tls`]).
    Tls {
        /// The TCP listener.
        listener: TcpListener,
        /// The server's certificate and settings.
        tls: ServerTls,
    },
}

impl Listener {
    /// Binds `addr` (a Unix socket path must not exist yet). Needs a tokio runtime.
    pub async fn bind(addr: &Address) -> io::Result<Listener> {
        Ok(match addr {
            Address::Tcp(a) => Listener::Tcp(TcpListener::bind(a).await?),
            Address::Unix(p) => Listener::Unix(UnixListener::bind(p)?),
        })
    }

    /// Makes every connection accepted from here on speak TLS with `tls` (replacing any TLS set
    /// before). For TCP listeners only: a Unix domain socket is refused with
    /// [`TlsError::UnixSocket`] (it is local; TLS would protect nothing).
    pub fn with_tls(self, tls: ServerTls) -> Result<Listener, TlsError> {
        match self {
            Listener::Tcp(listener) | Listener::Tls { listener, .. } => Ok(Listener::Tls { listener, tls }),
            Listener::Unix(l) => Err(TlsError::UnixSocket {
                path: l
                    .local_addr()
                    .ok()
                    .and_then(|a| a.as_pathname().map(PathBuf::from))
                    .unwrap_or_default(),
            }),
        }
    }

    /// Whether accepted connections speak TLS.
    pub fn is_tls(&self) -> bool {
        matches!(self, Listener::Tls { .. })
    }

    /// The address actually bound (the port chosen for `127.0.0.1:0`).
    pub fn local_addr(&self) -> io::Result<Address> {
        Ok(match self {
            Listener::Tcp(l) | Listener::Tls { listener: l, .. } => Address::Tcp(l.local_addr()?),
            Listener::Unix(l) => Address::Unix(
                l.local_addr()?
                    .as_pathname()
                    .map(PathBuf::from)
                    .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "unnamed Unix socket"))?,
            ),
        })
    }

    /// Accepts one connection. On a TLS listener its TLS handshake has not run yet: that is
    /// [`Incoming::establish`]'s job, so that a peer slow to handshake holds up only its own
    /// connection's task, not the accepting loop.
    pub async fn accept(&self) -> io::Result<Incoming> {
        match self {
            Listener::Tcp(l) => {
                let (s, peer) = l.accept().await?;
                s.set_nodelay(true)?;
                Ok(Incoming {
                    stream: Stream::Tcp(s),
                    peer: peer.to_string(),
                    tls: None,
                })
            }
            Listener::Tls { listener, tls } => {
                let (s, peer) = listener.accept().await?;
                s.set_nodelay(true)?;
                Ok(Incoming {
                    stream: Stream::Tcp(s),
                    peer: peer.to_string(),
                    tls: Some(tls.clone()),
                })
            }
            Listener::Unix(l) => {
                let (s, _) = l.accept().await?;
                Ok(Incoming {
                    stream: Stream::Unix(s),
                    peer: "unix".to_string(),
                    tls: None,
                })
            }
        }
    }
}

/// A connection just accepted by [`Listener::accept`], before its TLS handshake (if its listener
/// has TLS).
#[derive(Debug)]
pub struct Incoming {
    /// The socket as accepted (TCP or Unix, never TLS yet).
    pub(crate) stream: Stream,
    pub(crate) peer: String,
    /// The listener's TLS, still to be started on `stream`.
    pub(crate) tls: Option<ServerTls>,
}

impl Incoming {
    /// A printable peer address (`"unix"` for a Unix socket).
    pub fn peer(&self) -> &str {
        &self.peer
    }

    /// Whether the connection is to speak TLS (its listener has TLS).
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// The stream ready to carry frames: for a TLS listener, after the TLS handshake, which must
    /// complete within `timeout` (`TimedOut` otherwise; a failed handshake is `InvalidData`).
    /// Without TLS it is the accepted socket, at once.
    pub async fn establish(self, timeout: Duration) -> io::Result<Stream> {
        match (self.tls, self.stream) {
            (None, stream) => Ok(stream),
            (Some(tls), Stream::Tcp(tcp)) => match tokio::time::timeout(timeout, tls.acceptor.accept(tcp)).await {
                Ok(Ok(s)) => Ok(Stream::Tls(Box::new(s))),
                Ok(Err(e)) => Err(e),
                Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "no TLS handshake in time")),
            },
            (Some(_), _) => Err(io::Error::new(io::ErrorKind::InvalidInput, "TLS needs a TCP stream")),
        }
    }
}

/// A connected socket.
#[derive(Debug)]
pub enum Stream {
    /// TCP.
    Tcp(TcpStream),
    /// Unix domain socket.
    Unix(UnixStream),
    /// A TLS session over TCP (server side, from [`Incoming::establish`]).
    Tls(Box<TlsStream>),
}

impl Stream {
    /// Connects to `addr`. Needs a tokio runtime.
    pub async fn connect(addr: &Address) -> io::Result<Stream> {
        Ok(match addr {
            Address::Tcp(a) => {
                let s = TcpStream::connect(a).await?;
                s.set_nodelay(true)?;
                Stream::Tcp(s)
            }
            Address::Unix(p) => Stream::Unix(UnixStream::connect(p).await?),
        })
    }

    /// Splits into independently owned halves.
    pub fn into_split(self) -> (ReadHalf, WriteHalf) {
        match self {
            Stream::Tcp(s) => {
                let (r, w) = s.into_split();
                (ReadHalf::Tcp(r), WriteHalf::Tcp(w))
            }
            Stream::Unix(s) => {
                let (r, w) = s.into_split();
                (ReadHalf::Unix(r), WriteHalf::Unix(w))
            }
            Stream::Tls(s) => {
                // One rustls state machine serves both directions: tokio's split puts it behind
                // a lock that each half takes for one non-blocking poll at a time.
                let (r, w) = tokio::io::split(*s);
                (ReadHalf::Tls(r), WriteHalf::Tls(w))
            }
        }
    }
}

/// The reading half of a [`Stream`].
#[derive(Debug)]
pub enum ReadHalf {
    /// TCP.
    Tcp(tcp::OwnedReadHalf),
    /// Unix domain socket.
    Unix(unix::OwnedReadHalf),
    /// TLS over TCP.
    Tls(tokio::io::ReadHalf<TlsStream>),
}

/// The writing half of a [`Stream`].
#[derive(Debug)]
pub enum WriteHalf {
    /// TCP.
    Tcp(tcp::OwnedWriteHalf),
    /// Unix domain socket.
    Unix(unix::OwnedWriteHalf),
    /// TLS over TCP. Bytes written may stay inside the TLS session (encrypted, not yet sent)
    /// until a flush: flush after each batch.
    Tls(tokio::io::WriteHalf<TlsStream>),
}

impl WriteHalf {
    /// Writes what the socket takes now without waiting (`WouldBlock` if nothing); usable outside
    /// the runtime's threads.
    ///
    /// Over TLS it always answers `WouldBlock` and writes nothing: the TLS session is shared with
    /// the reading half and can be driven only by the async writes (polling it here, outside a
    /// task, could also take the socket's wake-up from the task that waits on it). Callers fall
    /// back to [`AsyncWrite`], as they must for a full socket anyway.
    pub fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        match self {
            WriteHalf::Tcp(w) => w.try_write(buf),
            WriteHalf::Unix(w) => w.try_write(buf),
            WriteHalf::Tls(_) => Err(io::ErrorKind::WouldBlock.into()),
        }
    }
}

impl AsyncRead for ReadHalf {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ReadHalf::Tcp(r) => Pin::new(r).poll_read(cx, buf),
            ReadHalf::Unix(r) => Pin::new(r).poll_read(cx, buf),
            ReadHalf::Tls(r) => Pin::new(r).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for WriteHalf {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            WriteHalf::Tcp(w) => Pin::new(w).poll_write(cx, buf),
            WriteHalf::Unix(w) => Pin::new(w).poll_write(cx, buf),
            WriteHalf::Tls(w) => Pin::new(w).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            WriteHalf::Tcp(w) => Pin::new(w).poll_flush(cx),
            WriteHalf::Unix(w) => Pin::new(w).poll_flush(cx),
            WriteHalf::Tls(w) => Pin::new(w).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            WriteHalf::Tcp(w) => Pin::new(w).poll_shutdown(cx),
            WriteHalf::Unix(w) => Pin::new(w).poll_shutdown(cx),
            WriteHalf::Tls(w) => Pin::new(w).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_parse_and_print() {
        let a: Address = "127.0.0.1:7000".parse().unwrap();
        assert_eq!(a, Address::Tcp("127.0.0.1:7000".parse().unwrap()));
        assert_eq!(a.to_string(), "127.0.0.1:7000");
        let u: Address = "unix:/tmp/x.sock".parse().unwrap();
        assert_eq!(u, Address::Unix("/tmp/x.sock".into()));
        assert_eq!(u.to_string(), "unix:/tmp/x.sock");
        assert!("unix:".parse::<Address>().is_err());
        assert!("nonsense".parse::<Address>().is_err());
    }
}
