//! Test support for Cairn's crates: one way to start a server child process
//! and one way to run a test binary's own child-process entry points.
//!
//! - [`ServerChild`]: a server in a child process, either the `cairn`
//!   binary's `cairn serve` ([`ServerChild::cairn_serve`]) or an entry point
//!   of the test binary itself that serves ([`ServerChild::entry_point`]);
//!   it waits for the server's listening address, connects page clients with
//!   `cairn-net` alone, stops it (with its exit status) or kills it, and kills
//!   it when dropped, so a failing test leaves no server behind.
//! - [`child`]: child-process entry points that are not `#[test]`s
//!   ([`child_entry_points!`]), started by the parent test with
//!   [`child::spawn`], which waits for marker lines such as
//!   [`child::LOCKED`] and kills the child.
//!
//! A dev-dependency only: nothing here is part of Cairn's libraries.

pub mod child;
mod server;

pub use server::{ServerChild, Stop, LISTENING};

/// Waits until `done()` holds: an order a test observes (a counter, a
/// queue, a state), polled. Never a performance bound: the guard (60 s)
/// only turns a broken test's hang into a failure naming `what`.
pub fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !done() {
        assert!(std::time::Instant::now() < deadline, "{what} never happened");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}
