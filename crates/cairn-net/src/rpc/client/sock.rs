//! The client's socket, TCP, Unix or TLS over TCP, with the non-blocking read and poll its
//! reader needs. The TLS socket (`tls.rs`) keeps its own lock and timeouts; the plain ones are
//! the std sockets as they are.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use super::poll::poll_fd;
use super::tls::TlsSock;

/// The socket, any kind. Reads and writes go through `&Sock`, so one thread can read while
/// another writes.
#[derive(Debug)]
pub(super) enum Sock {
    Tcp(TcpStream),
    Unix(UnixStream),
    Tls(Box<TlsSock>),
}

impl Sock {
    pub(super) fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Sock::Tcp(s) => (&*s).read(buf),
            Sock::Unix(s) => (&*s).read(buf),
            Sock::Tls(s) => s.read(buf),
        }
    }

    /// Writes some of `buf`. Over TLS the encrypted records may stay queued: [`Sock::flush`]
    /// after the last write of a batch.
    pub(super) fn write(&self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Sock::Tcp(s) => (&*s).write(buf),
            Sock::Unix(s) => (&*s).write(buf),
            Sock::Tls(s) => s.write(buf),
        }
    }

    /// Sends what earlier writes left queued (only TLS queues anything; a plain socket returns
    /// at once). Times out like a write.
    pub(super) fn flush(&self) -> io::Result<()> {
        match self {
            Sock::Tls(s) => s.flush(),
            Sock::Tcp(_) | Sock::Unix(_) => Ok(()),
        }
    }

    pub(super) fn fd(&self) -> RawFd {
        match self {
            Sock::Tcp(s) => s.as_raw_fd(),
            Sock::Unix(s) => s.as_raw_fd(),
            Sock::Tls(s) => s.raw_fd(),
        }
    }

    /// Reads what has arrived without waiting (`MSG_DONTWAIT`; the socket's other readers keep
    /// their blocking mode and timeout, which a non-blocking flag on the descriptor would change).
    /// Over TLS: the plaintext there is now (that socket is non-blocking, and only its reader
    /// reads it).
    pub(super) fn read_now(&self, buf: &mut [u8]) -> io::Result<usize> {
        if let Sock::Tls(s) = self {
            return s.read_now(buf);
        }
        // SAFETY: `buf` is writable for `buf.len()` bytes for the whole call, and the descriptor
        // is open: it belongs to `self`, which outlives the call.
        let n = unsafe { libc::recv(self.fd(), buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }

    /// Waits up to `timeout` (rounded up to a whole millisecond) until the socket has something
    /// to read (data, end of stream or an error), without reading it. Over TLS, plaintext the
    /// TLS session holds already counts (the socket itself may have nothing more).
    pub(super) fn poll_readable(&self, timeout: Duration) -> io::Result<bool> {
        if let Sock::Tls(s) = self {
            if s.buffered() {
                return Ok(true);
            }
        }
        poll_fd(self.fd(), libc::POLLIN, Some(timeout))
    }

    pub(super) fn set_timeouts(&self, read: Option<Duration>, write: Option<Duration>) -> io::Result<()> {
        match self {
            Sock::Tls(s) => {
                s.set_timeouts(read, write);
                Ok(())
            }
            Sock::Tcp(s) => {
                s.set_read_timeout(read)?;
                s.set_write_timeout(write)
            }
            Sock::Unix(s) => {
                s.set_read_timeout(read)?;
                s.set_write_timeout(write)
            }
        }
    }

    pub(super) fn shutdown(&self) {
        let _ = match self {
            Sock::Tcp(s) => s.shutdown(Shutdown::Both),
            Sock::Unix(s) => s.shutdown(Shutdown::Both),
            Sock::Tls(s) => {
                s.shutdown();
                Ok(())
            }
        };
    }
}
