//! Waiting for a socket to be ready without reading or writing it: the
//! poll(2) that the plain sockets (`sock.rs`) and the TLS socket (`tls.rs`)
//! both use, so neither needs the other for it.

use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

/// Waits up to `timeout` (rounded up to a whole millisecond; `None`: no limit) until `fd` is
/// ready for `events` (`POLLIN`, `POLLOUT`; an error or hang-up counts as ready), without reading
/// or writing. `Ok(false)`: the time ran out (or a signal came).
pub(super) fn poll_fd(fd: RawFd, events: libc::c_short, timeout: Option<Duration>) -> io::Result<bool> {
    let mut pfd = libc::pollfd { fd, events, revents: 0 };
    let ms = timeout.map_or(-1, |t| {
        libc::c_int::try_from(t.as_micros().div_ceil(1000)).unwrap_or(libc::c_int::MAX)
    });
    // SAFETY: `pfd` is one valid, writable pollfd and `nfds` is 1; the caller's descriptor is
    // open for the call (it belongs to a socket the caller borrows).
    let n = unsafe { libc::poll(&mut pfd, 1, ms) };
    if n < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::Interrupted {
            Ok(false)
        } else {
            Err(e)
        };
    }
    Ok(n > 0 && pfd.revents != 0)
}
