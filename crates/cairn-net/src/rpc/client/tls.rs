//! The client's TLS socket: a rustls `ClientConnection` driven by hand over a TCP socket, for the
//! blocking, threadless client (no runtime; see `client/mod.rs`).
//!
//! # What it protects
//!
//! Everything the client sends and receives after the TCP connect, from the HELLO (and the SCRAM
//! login) on: see [`crate::transport::tls`]. The server's certificate is checked during
//! [`TlsSock::connect`], before a byte of the protocol is sent.
//!
//! # Concurrency
//!
//! rustls keeps one state machine for both directions, so the `ClientConnection` sits behind a
//! mutex; but the client's threads must still read and write at the same time (a reader blocked
//! for up to `READ_POLL` must not stop a writer, nor a thread in `Client::next_notice`). So
//! **nobody holds the mutex while blocked in the socket**:
//!
//! - the TCP socket is non-blocking (only this module touches it), and every blocking wait is a
//!   poll(2) on the descriptor *outside* the lock, bounded by the timeout the client set
//!   ([`TlsSock::set_timeouts`] stands in for `SO_RCVTIMEO`/`SO_SNDTIMEO`);
//! - a reader (only ever one: the client's reading side is held by one thread at a time) takes
//!   the lock, hands out the plaintext rustls holds, and otherwise reads what the socket has
//!   (`read_tls`, `process_new_packets`), until its buffer is full or the socket is empty; then it
//!   lets go and polls for readability. Nobody else takes bytes off the socket, so a poll that
//!   follows an empty read cannot miss data;
//! - a writer (one at a time too: the client's writer lock) takes the lock, sends the encrypted
//!   records still queued, hands rustls plaintext only once that queue is empty (so at most one
//!   buffer's worth waits inside rustls), sends what it can, and lets go; when the socket is full
//!   it polls for writability, outside the lock, until its write timeout: `WouldBlock` then, as a
//!   plain socket's send timeout would, so the client's write-stall rule (read replies, then try
//!   again) applies unchanged. Records left queued when a write returns go out with the next
//!   write or with [`TlsSock::flush`], which the client calls at the end of each batch;
//! - `Client::next_notice` may only use the socket's readability as a hint, and with TLS the
//!   plaintext rustls already decrypted (more than a reader's buffer took, or what came with the
//!   WELCOME) counts as readable too: [`TlsSock::buffered`].
//!
//! The plain TCP and Unix paths do not come through here: they keep no lock and make no copy.

use std::io::{self, IoSlice, Read, Write};
use std::net::TcpStream;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rustls::pki_types::ServerName;
use rustls::ClientConnection;

use super::poll::poll_fd;
use crate::error::{Error, Result};
use crate::frame::MAGIC;
use crate::transport::tls::describe;

/// A timeout atomic's value for "none" (block for as long as it takes).
const NO_TIMEOUT: u64 = u64::MAX;

/// A TLS session over a non-blocking TCP socket, shared by the client's threads.
#[derive(Debug)]
pub(in crate::rpc) struct TlsSock {
    tcp: TcpStream,
    conn: Mutex<ClientConnection>,
    /// The read and write timeouts in microseconds ([`NO_TIMEOUT`]: none).
    read_timeout: AtomicU64,
    write_timeout: AtomicU64,
}

fn lock(m: &Mutex<ClientConnection>) -> MutexGuard<'_, ClientConnection> {
    // A panic inside rustls while locked leaves a connection that fails its next call, which ends
    // the client's connection with an error: usable enough.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl TlsSock {
    /// Runs the TLS handshake on a connected TCP socket by `deadline`: afterwards the server's
    /// certificate has been checked against `config`'s roots for `name`.
    pub(in crate::rpc) fn connect(
        tcp: TcpStream,
        config: Arc<rustls::ClientConfig>,
        name: ServerName<'static>,
        deadline: Instant,
    ) -> Result<TlsSock> {
        tcp.set_nonblocking(true)
            .map_err(|e| Error::io("configuring the socket", e))?;
        let conn = ClientConnection::new(config, name).map_err(|e| Error::Tls(describe(&e)))?;
        let sock = TlsSock {
            tcp,
            conn: Mutex::new(conn),
            read_timeout: AtomicU64::new(NO_TIMEOUT),
            write_timeout: AtomicU64::new(NO_TIMEOUT),
        };
        sock.handshake(deadline)?;
        Ok(sock)
    }

    fn handshake(&self, deadline: Instant) -> Result<()> {
        let mut looked = false;
        loop {
            let events = {
                let mut c = lock(&self.conn);
                self.send_tls(&mut c)
                    .map_err(|e| Error::Tls(format!("the TLS handshake failed sending: {e}")))?;
                if c.wants_write() {
                    libc::POLLOUT
                } else if !c.is_handshaking() {
                    return Ok(());
                } else {
                    if !looked && self.answered_in_plain() {
                        return Err(Error::Tls(
                            "the server answered without TLS: this address serves Cairn without TLS (connect without TLS)"
                                .into(),
                        ));
                    }
                    match c.read_tls(&mut &self.tcp) {
                        Ok(0) => {
                            return Err(Error::Tls(
                                "the server closed the connection during the TLS handshake (does it speak TLS on this address?)"
                                    .into(),
                            ))
                        }
                        Ok(_) => {
                            looked = true;
                            if let Err(e) = c.process_new_packets() {
                                // The alert that tells the server why.
                                let _ = self.send_tls(&mut c);
                                return Err(Error::Tls(describe(&e)));
                            }
                            continue;
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => libc::POLLIN,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                        Err(e) => return Err(Error::Tls(format!("the TLS handshake failed: {e}"))),
                    }
                }
            };
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::Timeout("the TLS handshake"));
            }
            poll_fd(self.fd(), events, Some(left)).map_err(|e| Error::io("the TLS handshake", e))?;
        }
    }

    /// Whether the first bytes the server sent are a frame's magic (a plain Cairn server
    /// answering our ClientHello with a REFUSAL), looked at without taking them.
    fn answered_in_plain(&self) -> bool {
        let mut first = [0u8; 4];
        // SAFETY: `first` is writable for its 4 bytes for the whole call, and the descriptor is
        // open (it belongs to `self.tcp`, which outlives the call).
        let n = unsafe {
            libc::recv(
                self.fd(),
                first.as_mut_ptr().cast(),
                first.len(),
                libc::MSG_PEEK | libc::MSG_DONTWAIT,
            )
        };
        n == 4 && first == MAGIC.to_le_bytes()
    }

    fn fd(&self) -> RawFd {
        self.tcp.as_raw_fd()
    }

    /// Sends the encrypted records rustls has queued, as far as the socket takes them now.
    fn send_tls(&self, c: &mut ClientConnection) -> io::Result<()> {
        while c.wants_write() {
            match c.write_tls(&mut NoSigPipe(&self.tcp)) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Reads plaintext, waiting up to the read timeout for some (`WouldBlock` after it, as a
    /// plain socket with `SO_RCVTIMEO` answers). `Ok(0)`: the server closed the connection.
    pub(in crate::rpc) fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        let deadline = deadline(&self.read_timeout);
        loop {
            match self.read_now(buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                other => return other,
            }
            let left = match deadline {
                Some(d) => match d.saturating_duration_since(Instant::now()) {
                    left if left.is_zero() => return Err(io::ErrorKind::WouldBlock.into()),
                    left => Some(left),
                },
                None => None,
            };
            // Outside the lock: writers and `next_notice` go on meanwhile.
            poll_fd(self.fd(), libc::POLLIN, left)?;
        }
    }

    /// Reads the plaintext there is now, without waiting (`WouldBlock` if none): what rustls
    /// holds, then what the socket has, until `buf` is full or the socket is empty.
    pub(in crate::rpc) fn read_now(&self, buf: &mut [u8]) -> io::Result<usize> {
        let mut c = lock(&self.conn);
        let mut n = 0;
        loop {
            match c.reader().read(&mut buf[n..]) {
                // `buf` is full, or the server closed the session (then the next read says 0).
                Ok(0) => return Ok(n),
                Ok(k) => {
                    n += k;
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // The TCP connection ended without TLS's close_notify: an end of stream like a
                // plain socket's (frames are self-delimiting and checksummed, so a cut frame is
                // still reported as truncated).
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(n),
                Err(e) => return if n > 0 { Ok(n) } else { Err(e) },
            }
            match c.read_tls(&mut &self.tcp) {
                // 0 is the end of the stream: the reader reports it on the next turn.
                Ok(_) => {
                    if let Err(e) = c.process_new_packets() {
                        // Sends the alert telling the server why.
                        let _ = self.send_tls(&mut c);
                        return if n > 0 {
                            Ok(n)
                        } else {
                            Err(io::Error::new(
                                io::ErrorKind::InvalidData,
                                format!("TLS: {}", describe(&e)),
                            ))
                        };
                    }
                    // Whatever the TLS layer answers by itself (a key update); the rest goes with
                    // the next write.
                    if c.wants_write() {
                        let _ = self.send_tls(&mut c);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return if n > 0 { Ok(n) } else { Err(e) },
            }
        }
    }

    /// Whether rustls holds plaintext (or the end of the session) not yet read: something to
    /// read that a poll of the socket would not show.
    pub(in crate::rpc) fn buffered(&self) -> bool {
        let mut c = lock(&self.conn);
        let r = io::BufRead::fill_buf(&mut c.reader()).map(|b| b.len());
        !matches!(r, Err(e) if e.kind() == io::ErrorKind::WouldBlock)
    }

    /// Encrypts and sends some of `buf`, waiting up to the write timeout for room (`WouldBlock`
    /// after it). Plaintext is taken only once the records of earlier writes have left; the
    /// records of this one may stay queued ([`TlsSock::flush`] sends them).
    pub(in crate::rpc) fn write(&self, buf: &[u8]) -> io::Result<usize> {
        let deadline = deadline(&self.write_timeout);
        loop {
            {
                let mut c = lock(&self.conn);
                self.send_tls(&mut c)?;
                if !c.wants_write() {
                    let n = c.writer().write(buf)?;
                    self.send_tls(&mut c)?;
                    if n > 0 || buf.is_empty() {
                        return Ok(n);
                    }
                    if !c.wants_write() {
                        // Nothing queued and still no room: the session takes no more.
                        return Err(io::ErrorKind::WriteZero.into());
                    }
                }
            }
            self.wait_writable(deadline)?;
        }
    }

    /// Sends every queued record, waiting up to the write timeout for room (`WouldBlock` after
    /// it; what is left stays queued).
    pub(in crate::rpc) fn flush(&self) -> io::Result<()> {
        let deadline = deadline(&self.write_timeout);
        loop {
            {
                let mut c = lock(&self.conn);
                self.send_tls(&mut c)?;
                if !c.wants_write() {
                    return Ok(());
                }
            }
            self.wait_writable(deadline)?;
        }
    }

    /// Polls for room in the socket, outside the lock, until `deadline` (`WouldBlock` then).
    fn wait_writable(&self, deadline: Option<Instant>) -> io::Result<()> {
        let left = match deadline {
            Some(d) => match d.saturating_duration_since(Instant::now()) {
                left if left.is_zero() => return Err(io::ErrorKind::WouldBlock.into()),
                left => Some(left),
            },
            None => None,
        };
        poll_fd(self.fd(), libc::POLLOUT, left).map(|_| ())
    }

    /// Sets the time a read or a write may wait (`None`: as long as it takes).
    pub(in crate::rpc) fn set_timeouts(&self, read: Option<Duration>, write: Option<Duration>) {
        let micros =
            |t: Option<Duration>| t.map_or(NO_TIMEOUT, |t| u64::try_from(t.as_micros()).unwrap_or(NO_TIMEOUT - 1));
        self.read_timeout.store(micros(read), Ordering::Relaxed);
        self.write_timeout.store(micros(write), Ordering::Relaxed);
    }

    /// Says close_notify if the socket takes it now, and shuts the socket down both ways.
    pub(in crate::rpc) fn shutdown(&self) {
        {
            let mut c = lock(&self.conn);
            c.send_close_notify();
            let _ = self.send_tls(&mut c);
        }
        let _ = self.tcp.shutdown(std::net::Shutdown::Both);
    }

    pub(in crate::rpc) fn raw_fd(&self) -> RawFd {
        self.fd()
    }
}

/// When a wait that starts now with this timeout ends (`None`: never).
fn deadline(timeout: &AtomicU64) -> Option<Instant> {
    match timeout.load(Ordering::Relaxed) {
        NO_TIMEOUT => None,
        micros => Some(Instant::now() + Duration::from_micros(micros)),
    }
}

/// Writes to the socket with `MSG_NOSIGNAL`, so that a server gone away is `EPIPE` and not a
/// SIGPIPE that kills the process (std's `write` does so already; its `write_vectored`, which
/// rustls uses to send several records at once, does not).
struct NoSigPipe<'a>(&'a TcpStream);

#[cfg(any(
    target_os = "linux",
    target_os = "android",
    target_os = "freebsd",
    target_os = "netbsd",
    target_os = "openbsd"
))]
const NOSIGNAL: libc::c_int = libc::MSG_NOSIGNAL;
// Elsewhere (macOS) std sets SO_NOSIGPIPE on every socket it makes.
#[cfg(not(any(
    target_os = "linux",
    target_os = "android",
    target_os = "freebsd",
    target_os = "netbsd",
    target_os = "openbsd"
)))]
const NOSIGNAL: libc::c_int = 0;

impl Write for NoSigPipe<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        (&*self.0).write(buf)
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        // SAFETY: an all-zero msghdr is valid (no address, no control data); its iovec array is
        // `bufs`, which std guarantees ABI-compatible with `struct iovec` on Unix and which lives
        // for the whole call; the kernel only reads it. The descriptor is open (it belongs to
        // `self.0`, borrowed for the call).
        let n = unsafe {
            let mut msg: libc::msghdr = std::mem::zeroed();
            msg.msg_iov = bufs.as_ptr().cast_mut().cast();
            msg.msg_iovlen = bufs.len().min(1024) as _;
            libc::sendmsg(self.0.as_raw_fd(), &msg, NOSIGNAL)
        };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
