//! The tokio half of the transports: listener, stream and its split halves.

use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{tcp, unix, TcpListener, TcpStream, UnixListener, UnixStream};

use super::Address;

/// A bound listening socket.
#[derive(Debug)]
pub enum Listener {
    /// TCP.
    Tcp(TcpListener),
    /// Unix domain socket.
    Unix(UnixListener),
}

impl Listener {
    /// Binds `addr` (a Unix socket path must not exist yet). Needs a tokio runtime.
    pub async fn bind(addr: &Address) -> io::Result<Listener> {
        Ok(match addr {
            Address::Tcp(a) => Listener::Tcp(TcpListener::bind(a).await?),
            Address::Unix(p) => Listener::Unix(UnixListener::bind(p)?),
        })
    }

    /// The address actually bound (the port chosen for `127.0.0.1:0`).
    pub fn local_addr(&self) -> io::Result<Address> {
        Ok(match self {
            Listener::Tcp(l) => Address::Tcp(l.local_addr()?),
            Listener::Unix(l) => Address::Unix(
                l.local_addr()?
                    .as_pathname()
                    .map(PathBuf::from)
                    .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "unnamed Unix socket"))?,
            ),
        })
    }

    /// Accepts one connection, returning it and a printable peer address.
    pub async fn accept(&self) -> io::Result<(Stream, String)> {
        match self {
            Listener::Tcp(l) => {
                let (s, peer) = l.accept().await?;
                s.set_nodelay(true)?;
                Ok((Stream::Tcp(s), peer.to_string()))
            }
            Listener::Unix(l) => {
                let (s, _) = l.accept().await?;
                Ok((Stream::Unix(s), "unix".to_string()))
            }
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
}

/// The writing half of a [`Stream`].
#[derive(Debug)]
pub enum WriteHalf {
    /// TCP.
    Tcp(tcp::OwnedWriteHalf),
    /// Unix domain socket.
    Unix(unix::OwnedWriteHalf),
}

impl WriteHalf {
    /// Writes what the socket takes now without waiting (`WouldBlock` if nothing); usable outside
    /// the runtime's threads.
    pub fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        match self {
            WriteHalf::Tcp(w) => w.try_write(buf),
            WriteHalf::Unix(w) => w.try_write(buf),
        }
    }
}

impl AsyncRead for ReadHalf {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ReadHalf::Tcp(r) => Pin::new(r).poll_read(cx, buf),
            ReadHalf::Unix(r) => Pin::new(r).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for WriteHalf {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            WriteHalf::Tcp(w) => Pin::new(w).poll_write(cx, buf),
            WriteHalf::Unix(w) => Pin::new(w).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            WriteHalf::Tcp(w) => Pin::new(w).poll_flush(cx),
            WriteHalf::Unix(w) => Pin::new(w).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            WriteHalf::Tcp(w) => Pin::new(w).poll_shutdown(cx),
            WriteHalf::Unix(w) => Pin::new(w).poll_shutdown(cx),
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
