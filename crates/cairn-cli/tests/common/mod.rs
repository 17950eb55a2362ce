//! Helpers shared by the tests that drive `cairn serve` with raw
//! page-service calls.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use cairn_net::message::{Architecture, ErrorCode};
use cairn_net::page_service::{FetchStatus, Fetched, PageRequest, FETCH_S, FETCH_X, NO_GROUP};
use cairn_net::rpc::{Client, ClientOptions};
use cairn_net::transport::Address;
use cairn_net::Error as NetError;
use cairn_storage::{page, PageId};

/// A `cairn serve` child process.
pub struct Server {
    /// The process.
    pub child: Child,
    /// Where it listens.
    pub addr: Address,
}

impl Server {
    pub fn start(dir: &Path, extra: &[&str]) -> Server {
        Server::start_at(dir, "127.0.0.1:0", extra)
    }

    /// A server listening on `listen` (HOST:PORT).
    pub fn start_at(dir: &Path, listen: &str, extra: &[&str]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_cairn"))
            .arg("serve")
            .arg(dir)
            .args(["--listen", listen])
            .args(extra)
            .env("CAIRN_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start cairn serve");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .parse()
            .unwrap();
        Server { child, addr }
    }

    /// A page client without a login (a server without users trusts it).
    pub fn client(&self) -> Result<Client, NetError> {
        self.client_as(None)
    }

    /// A page client logging in as `login`.
    pub fn client_as(&self, login: Option<(&str, &str)>) -> Result<Client, NetError> {
        Client::connect(
            &self.addr,
            &ClientOptions {
                architecture: Architecture::PAGE,
                login: login.map(|(user, password)| cairn_net::rpc::Login {
                    user: user.into(),
                    password: password.into(),
                }),
                ..ClientOptions::default()
            },
        )
    }

    /// SIGKILL: the server dies mid-whatever, as in a crash.
    pub fn kill(mut self) {
        self.child.kill().expect("kill the server");
        self.child.wait().expect("reap the server");
    }
}

impl Drop for Server {
    /// A test that panics must not leave its server running.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Server {
    /// SIGTERM, and the exit status.
    pub fn stop(mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        for _ in 0..300 {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.child.kill().ok();
        panic!("cairn serve did not stop on SIGTERM");
    }
}

pub fn call(c: &Client, req: &PageRequest) -> Result<Vec<bytes::Bytes>, NetError> {
    let (kind, body) = req.encode();
    c.invoke(kind, body)?.collect()
}

/// A new transaction id for `c`: the client names its transactions (the
/// server begins one with the first request naming it).
pub fn begin(_c: &Client) -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Fetches one page and checks it as a page read from disk.
pub fn fetch(c: &Client, txn: u64, id: PageId, exclusive: bool) -> Result<Vec<u8>, NetError> {
    let parts = call(
        c,
        &PageRequest::Fetch {
            txn,
            mode: if exclusive { FETCH_X } else { FETCH_S },
            group: NO_GROUP,
            pages: vec![(id.0, 0)],
        },
    )?;
    let part = Fetched::decode(&parts[0]).unwrap();
    assert_eq!(part.page, id.0);
    assert_eq!(part.status, FetchStatus::Image, "page {id} is in use");
    let image = part.image;
    page::verify(image, id).expect("the page arrives sealed and whole");
    Ok(image.to_vec())
}

pub fn remote_code(e: NetError) -> ErrorCode {
    match e {
        NetError::Remote(f) => f.code,
        other => panic!("expected an error reply, got {other}"),
    }
}
