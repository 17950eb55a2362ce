//! Child-process entry points of a test binary, and the parent's side.
//!
//! A test that needs another process (a client killed while it holds locks,
//! a server, several client processes) runs its own test binary again as a
//! child. The child's code is a plain `fn()` named in
//! [`child_entry_points!`](crate::child_entry_points), not a `#[test]`: it is
//! not listed, run or counted by the test harness. The macro registers a
//! function that runs before the harness's `main` (an ELF `.init_array`
//! entry, Mach-O `__mod_init_func` or Windows `.CRT$XCU`, as the `ctor`
//! crate does): when [`CHILD_VAR`] names one of the binary's entry points,
//! it runs that entry point and exits with its outcome (0, or 101 if it
//! panicked); otherwise it returns and the harness runs as usual.
//!
//! The parent starts the child with [`command`] or [`spawn`]. The child's
//! arguments are a test filter that matches no test, so a binary that does
//! not register the name runs no test and exits at once, which the parent
//! reports (the marker never comes; a child that should fail succeeds).

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};

/// The environment variable naming the entry point a child runs.
pub const CHILD_VAR: &str = "CAIRN_TEST_CHILD";

/// The line a child prints once it holds what its parent wants held (locks,
/// rights, uncommitted changes): the parent may kill it now.
pub const LOCKED: &str = "CAIRN-TEST-LOCKED";

/// Registers child-process entry points: `child_entry_points!(a, b)` for
/// `fn a()` and `fn b()` in scope. A child started with [`spawn`]`("a", ..)`
/// (or [`command`]) runs `a` instead of the tests and exits: 0 when `a`
/// returns, 101 when it panics. Use it once per module that has entry
/// points; the names must be unique within the test binary.
///
/// The entry point runs before the test harness's `main`: the standard
/// library works (threads, I/O, a tokio runtime; `SIGPIPE` is ignored as
/// `main` would have it), but the harness's arguments and output capture do
/// not apply.
#[macro_export]
macro_rules! child_entry_points {
    ($($name:ident),+ $(,)?) => {
        const _: () = {
            extern "C" fn cairn_testkit_child_dispatch() {
                $crate::child::dispatch(&[$((stringify!($name), $name as fn())),+]);
            }
            #[used]
            #[cfg_attr(
                any(
                    target_os = "linux",
                    target_os = "android",
                    target_os = "freebsd",
                    target_os = "netbsd",
                    target_os = "openbsd",
                    target_os = "dragonfly",
                    target_os = "illumos"
                ),
                link_section = ".init_array"
            )]
            #[cfg_attr(target_vendor = "apple", link_section = "__DATA,__mod_init_func")]
            #[cfg_attr(windows, link_section = ".CRT$XCU")]
            static CAIRN_TESTKIT_CHILD_DISPATCH: extern "C" fn() = cairn_testkit_child_dispatch;
        };
    };
}

/// Runs the entry point [`CHILD_VAR`] names, if it is one of `entries`, and
/// exits; returns otherwise. Called by [`child_entry_points!`](crate::child_entry_points)
/// before `main`.
#[doc(hidden)]
pub fn dispatch(entries: &[(&str, fn())]) {
    let Some(name) = std::env::var_os(CHILD_VAR) else {
        return;
    };
    let Some(&(_, entry)) = entries.iter().find(|(n, _)| name == *n) else {
        return;
    };
    // What Rust's runtime does before `main`, which has not run yet: a
    // write to a closed pipe or socket is an error, not a SIGPIPE death.
    #[cfg(unix)]
    // SAFETY: setting a signal's disposition to SIG_IGN, before `main` and
    // before this process has started any thread of its own.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
    let code = match std::panic::catch_unwind(entry) {
        Ok(()) => 0,
        Err(_) => 101,
    };
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    std::process::exit(code);
}

/// A command that runs this test binary as the child entry point `name`
/// (with stdin, stdout and stderr as [`Command`] leaves them).
pub fn command(name: &str) -> Command {
    let mut cmd = Command::new(std::env::current_exe().expect("the test binary's path"));
    // A filter that matches no test: if no entry point takes the child, its
    // harness runs nothing and exits.
    cmd.args(["--exact", "cairn-testkit: no child entry point by this name"])
        .env(CHILD_VAR, name);
    cmd
}

/// A running child entry point.
pub struct ChildProcess {
    name: String,
    child: Child,
    out: Option<BufReader<ChildStdout>>,
}

/// Starts the child entry point `name` with `env`, its stdout piped to the
/// parent and its stdin a pipe the parent holds (closed when the parent
/// lets go of the child or dies: see [`wait_to_be_killed`]).
pub fn spawn(name: &str, env: &[(&str, String)]) -> ChildProcess {
    let mut child = command(name)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start the child {name}: {e}"));
    let out = BufReader::new(child.stdout.take().expect("its stdout"));
    ChildProcess {
        name: name.to_string(),
        child,
        out: Some(out),
    }
}

impl ChildProcess {
    /// Reads the child's stdout up to a line containing `marker` and returns
    /// what follows the marker on that line (trimmed). Panics if the child
    /// ends first.
    pub fn wait_for(&mut self, marker: &str) -> String {
        let out = self.out.as_mut().expect("the child's stdout is still read");
        let mut line = String::new();
        loop {
            line.clear();
            let n = out.read_line(&mut line).expect("read the child's stdout");
            assert!(
                n > 0,
                "the child {} ended before printing {marker} (is it registered with child_entry_points!?)",
                self.name
            );
            if let Some((_, rest)) = line.split_once(marker) {
                return rest.trim().to_string();
            }
        }
    }

    /// The child's process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL (a client or server that dies mid-whatever), and reaps it.
    pub fn kill(mut self) {
        self.child.kill().expect("kill the child");
        self.child.wait().expect("reap the child");
    }

    /// Closes its stdin (as the parent's death would), then as [`Self::wait`].
    pub fn close_stdin_and_wait(mut self) -> (ExitStatus, String) {
        drop(self.child.stdin.take());
        self.wait()
    }

    /// Waits for it to end (its stdin still open) and returns its exit
    /// status and the rest of its stdout.
    pub fn wait(mut self) -> (ExitStatus, String) {
        let mut rest = String::new();
        if let Some(mut out) = self.out.take() {
            out.read_to_string(&mut rest).expect("read the child's stdout");
        }
        let status = self.child.wait().expect("wait for the child");
        (status, rest)
    }
}

impl Drop for ChildProcess {
    /// A test that fails leaves no child behind.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Runs the child entry point `name` with `env`, waits until it prints
/// [`LOCKED`] (it holds what the caller wants held), then kills it: a
/// client that dies holding locks, rights and uncommitted changes.
pub fn kill_child_once_locked(name: &str, env: &[(&str, String)]) {
    let mut child = spawn(name, env);
    child.wait_for(LOCKED);
    child.kill();
}

/// For a child entry point: says [`LOCKED`] on stdout.
pub fn say_locked() {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{LOCKED}").expect("write to the parent");
    out.flush().expect("flush to the parent");
}

/// For a child entry point that waits to be killed: blocks until its stdin
/// closes, which happens only if the parent let go of it without killing it
/// (or died), and then fails the child. No clock is involved.
pub fn wait_to_be_killed() -> ! {
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    panic!("the parent closed stdin instead of killing this child");
}
