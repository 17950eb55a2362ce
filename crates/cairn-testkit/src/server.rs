//! A server in a child process.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use cairn_net::message::Architecture;
use cairn_net::rpc::{Client, ClientOptions, Login};
use cairn_net::transport::Address;
use cairn_net::Error as NetError;

/// How a [`ServerChild`] is asked to stop cleanly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// Close its stdin (a test binary's serving entry point watches it, so
    /// it also stops when the test process dies).
    CloseStdin,
    /// SIGTERM (`cairn serve`).
    Sigterm,
}

/// A server child process: `cairn serve`, or a test binary's own serving
/// entry point. Dropping it kills the process.
pub struct ServerChild {
    child: Child,
    /// Where it listens.
    pub addr: Address,
    stop: Stop,
}

/// The line prefix a test binary's serving entry point prints with its
/// address (`cairn serve` prints `listening on ADDRESS`).
pub const LISTENING: &str = "CAIRN-TEST-LISTENING ";

/// How many times [`ServerChild::spawn`] starts a child that ends before
/// it listens.
pub const START_ATTEMPTS: u32 = 3;

/// How long a clean stop may take before the test fails.
const STOP_DEADLINE: Duration = Duration::from_secs(15);

impl ServerChild {
    /// `cairn serve DIR --listen LISTEN EXTRA…` with the `cairn` binary at
    /// `exe` (a `cairn-cli` test passes `env!("CARGO_BIN_EXE_cairn")`), its
    /// log at warnings only.
    pub fn cairn_serve(exe: impl AsRef<OsStr>, dir: &Path, listen: &str, extra: &[&str]) -> ServerChild {
        let mut cmd = Command::new(exe);
        cmd.arg("serve")
            .arg(dir)
            .args(["--listen", listen])
            .args(extra)
            .env("CAIRN_LOG", "warn");
        ServerChild::spawn(cmd, "listening on ", Stop::Sigterm)
    }

    /// The child entry point `name` of this test binary (see
    /// [`crate::child`]) as a server: it prints [`LISTENING`] and its
    /// address, and stops when its stdin closes.
    pub fn entry_point<K, V>(name: &str, env: impl IntoIterator<Item = (K, V)>) -> ServerChild
    where
        K: AsRef<OsStr>,
        V: AsRef<OsStr>,
    {
        let mut cmd = crate::child::command(name);
        cmd.envs(env);
        ServerChild::spawn(cmd, LISTENING, Stop::CloseStdin)
    }

    /// Starts `cmd` (stdin and stdout piped, stderr inherited) and reads its
    /// stdout up to the line with `marker` followed by the address. The rest
    /// of its stdout is drained, so it never blocks on a full pipe.
    ///
    /// A child that ends before it listens is started again, up to
    /// `START_ATTEMPTS` times in all: a test that has just closed the
    /// database may still see its lock held for a moment by another test
    /// thread's child between its fork and its exec (the descriptor is
    /// close-on-exec, but a fork copies it first), and the server then
    /// refuses the database as "in use by" this very process. A child that
    /// never listens fails the test after the last attempt.
    pub fn spawn(mut cmd: Command, marker: &str, stop: Stop) -> ServerChild {
        for attempt in 1..=START_ATTEMPTS {
            if let Some(server) = ServerChild::try_spawn(&mut cmd, marker, stop) {
                return server;
            }
            eprintln!("the server child ended before it listened (attempt {attempt} of {START_ATTEMPTS})");
            std::thread::sleep(Duration::from_millis(50 * u64::from(attempt)));
        }
        panic!("the server child did not say where it listens (see its stderr above)")
    }

    /// One start of [`ServerChild::spawn`]: `None` if the child ended (or
    /// closed its stdout) without saying where it listens.
    fn try_spawn(cmd: &mut Command, marker: &str, stop: Stop) -> Option<ServerChild> {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the server child");
        let mut out = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut addr = None;
        let mut line = String::new();
        while out.read_line(&mut line).unwrap_or(0) > 0 {
            if let Some((_, a)) = line.trim().split_once(marker) {
                addr = Some(
                    a.trim()
                        .parse::<Address>()
                        .unwrap_or_else(|e| panic!("the server child's address {a:?}: {e}")),
                );
                break;
            }
            line.clear();
        }
        let Some(addr) = addr else {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        };
        std::thread::spawn(move || {
            let mut sink = Vec::new();
            let _ = out.read_to_end(&mut sink);
        });
        Some(ServerChild { child, addr, stop })
    }

    /// `cairn://ADDRESS`, for `Database::connect`.
    pub fn url(&self) -> String {
        format!("cairn://{}", self.addr)
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// A page client without a login (a server without users trusts it).
    pub fn client(&self) -> Result<Client, NetError> {
        self.client_as(None)
    }

    /// A page client logging in as `(user, password)`.
    pub fn client_as(&self, login: Option<(&str, &str)>) -> Result<Client, NetError> {
        Client::connect(
            &self.addr,
            &ClientOptions {
                architecture: Architecture::PAGE,
                login: login.map(|(user, password)| Login {
                    user: user.into(),
                    password: password.into(),
                }),
                ..ClientOptions::default()
            },
        )
    }

    /// Stops it cleanly and fails the test unless it exits with success.
    pub fn stop(self) {
        let status = self.stop_status();
        assert!(status.success(), "the server child failed: {status}");
    }

    /// Stops it cleanly (as [`Stop`] says) and returns its exit status. A
    /// `cairn serve` that has not exited 15 s after its SIGTERM fails the
    /// test; a serving entry point is waited for (it checkpoints first).
    pub fn stop_status(mut self) -> ExitStatus {
        drop(self.child.stdin.take());
        if self.stop == Stop::CloseStdin {
            return self.child.wait().expect("wait for the server child");
        }
        let pid = self.child.id().to_string();
        let sent = Command::new("kill").args(["-TERM", &pid]).status().expect("run kill");
        assert!(sent.success(), "SIGTERM to the server child");
        let deadline = Instant::now() + STOP_DEADLINE;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for the server child") {
                return status;
            }
            assert!(Instant::now() < deadline, "the server child did not stop on SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL: the server dies mid-whatever, as in a crash.
    pub fn kill(mut self) {
        self.child.kill().expect("kill the server child");
        self.child.wait().expect("reap the server child");
    }
}

impl Drop for ServerChild {
    /// A test that panics must not leave its server running.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
