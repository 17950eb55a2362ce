//! A real server on a real socket for the integration tests: `run(...)` on its own tokio
//! runtime thread, with a test handler.
#![allow(dead_code, reason = "each test file uses part of the harness")]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use bytes::Bytes;
use cairn_net::message::{Architecture, ErrorCode, Fault, Hello};
use cairn_net::rpc::{self, Client, ClientOptions, Handler, Limits, Notifier, Replier, Request};
use cairn_net::transport::{Address, ClientTls, Listener, ServerTls, TlsRoots};
use cairn_net::Kind;
use tokio::sync::{oneshot, Notify};

/// Replies with the request body.
pub const ECHO: Kind = Kind(0x0100);
/// Body `n: u32`: sends parts 0..n (each the index as u32 LE), then the final reply `b"end"`.
pub const STREAM: Kind = Kind(0x0101);
/// Waits until a RELEASE request arrives, then replies with its body.
pub const HOLD: Kind = Kind(0x0102);
/// Wakes every HOLD.
pub const RELEASE: Kind = Kind(0x0103);
/// Fails with application error 0x1001.
pub const FAIL: Kind = Kind(0x0104);
/// Panics.
pub const PANIC: Kind = Kind(0x0105);
/// Body `count: u32 | delay_ms: u32`: pushes `count` NOTICEs to the caller, each body the
/// session's next notice number (u32 LE, from 0, so their order can be checked). With delay 0 they
/// are queued before the final reply (so they precede it on the wire); otherwise a task sends them
/// after the delay and the reply (empty) goes at once.
pub const NOTIFY: Kind = Kind(0x0106);
/// A client with this name gets a NOTICE `b"hello"` queued by `Handler::attach`, right behind the
/// WELCOME.
pub const GREET_NAME: &str = "greet me";

/// The one user the test handler knows, and its password.
pub const USER: &str = "tester";
/// The test user's password.
pub const PASSWORD: &str = "secret";

/// The test user's verifier (the fewest iterations SCRAM allows: tests log in often).
fn test_verifier() -> cairn_net::scram::Verifier {
    static V: std::sync::OnceLock<cairn_net::scram::Verifier> = std::sync::OnceLock::new();
    V.get_or_init(|| cairn_net::scram::Verifier::new(PASSWORD, b"test salt", 4096).unwrap())
        .clone()
}

/// The test handler; counts what it sees.
#[derive(Default)]
pub struct TestHandler {
    release: Notify,
    released: std::sync::atomic::AtomicBool,
    pub running: AtomicUsize,
    pub running_max: AtomicUsize,
    pub holding: AtomicUsize,
    pub opened: AtomicUsize,
    pub closed: AtomicUsize,
    /// The notifier of the latest connection attached.
    pub last_notifier: Mutex<Option<Notifier>>,
}

/// A connection's session: its notifier, and the number of its next notice.
pub struct TestSession {
    greet: bool,
    notifier: Mutex<Option<Notifier>>,
    next_notice: Arc<Mutex<u32>>,
}

impl TestSession {
    /// A sender of numbered notices for this session.
    fn numbered(&self) -> Numbered {
        Numbered {
            notifier: self.notifier.lock().unwrap().clone().expect("attach came first"),
            next: self.next_notice.clone(),
        }
    }
}

/// Sends notices numbered in the order they are queued (the number is taken and the notice
/// queued under one lock, so concurrent senders cannot swap them).
pub struct Numbered {
    notifier: Notifier,
    next: Arc<Mutex<u32>>,
}

impl Numbered {
    fn send(&self, count: u32) {
        for _ in 0..count {
            let mut next = self.next.lock().unwrap();
            if self
                .notifier
                .notice(Bytes::copy_from_slice(&next.to_le_bytes()))
                .is_err()
            {
                return;
            }
            *next += 1;
        }
    }
}

/// The body of a NOTIFY request.
pub fn notify_body(count: u32, delay_ms: u32) -> Bytes {
    let mut b = Vec::with_capacity(8);
    b.extend_from_slice(&count.to_le_bytes());
    b.extend_from_slice(&delay_ms.to_le_bytes());
    Bytes::from(b)
}

/// The number a notice body carries.
pub fn notice_number(body: &[u8]) -> u32 {
    u32::from_le_bytes(body.try_into().expect("a numbered notice is 4 bytes"))
}

impl TestHandler {
    /// Wakes every HOLD (as a RELEASE request would).
    pub fn release_all(&self) {
        self.released.store(true, Ordering::SeqCst);
        self.release.notify_waiters();
    }
}

impl Handler for TestHandler {
    type Session = TestSession;

    fn credentials(&self, user: &str) -> Option<(Option<cairn_net::scram::Verifier>, cairn_net::scram::Decoy)> {
        let decoy = cairn_net::scram::Decoy::new([7; 32], 4096).unwrap();
        Some(((user == USER).then(test_verifier), decoy))
    }

    fn open(&self, hello: &Hello, _peer: &str, user: Option<&str>) -> Result<TestSession, Fault> {
        // Raw clients say HELLO without logging in; the RPC layer let only a proven user through.
        assert!(user.is_none_or(|u| u == USER), "a login as {user:?} reached open");
        if hello.architecture != Architecture::RPC && hello.architecture != Architecture::PAGE {
            return Err(Fault::new(
                ErrorCode::UNSUPPORTED_ARCHITECTURE,
                "architecture not served",
            ));
        }
        self.opened.fetch_add(1, Ordering::SeqCst);
        Ok(TestSession {
            greet: hello.client_name == GREET_NAME,
            notifier: Mutex::new(None),
            next_notice: Arc::new(Mutex::new(0)),
        })
    }

    fn attach(&self, session: &TestSession, notifier: Notifier) {
        if session.greet {
            notifier.notice(&b"hello"[..]).unwrap();
        }
        *session.notifier.lock().unwrap() = Some(notifier.clone());
        *self.last_notifier.lock().unwrap() = Some(notifier);
    }

    async fn handle(&self, session: &TestSession, request: Request, reply: &Replier) -> Result<Bytes, Fault> {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.running_max.fetch_max(now, Ordering::SeqCst);
        let result = match request.kind {
            ECHO => Ok(request.body),
            STREAM => {
                let n = u32::from_le_bytes(request.body[..4].try_into().unwrap());
                for i in 0..n {
                    if reply.part(Bytes::copy_from_slice(&i.to_le_bytes())).await.is_err() {
                        break;
                    }
                }
                Ok(Bytes::from_static(b"end"))
            }
            HOLD => {
                self.holding.fetch_add(1, Ordering::SeqCst);
                loop {
                    let notified = self.release.notified();
                    if self.released.load(Ordering::SeqCst) {
                        break;
                    }
                    notified.await;
                }
                Ok(request.body)
            }
            RELEASE => {
                self.released.store(true, Ordering::SeqCst);
                self.release.notify_waiters();
                Ok(Bytes::new())
            }
            NOTIFY => {
                let count = u32::from_le_bytes(request.body[..4].try_into().unwrap());
                let delay_ms = u32::from_le_bytes(request.body[4..8].try_into().unwrap());
                let numbered = session.numbered();
                if delay_ms == 0 {
                    numbered.send(count);
                } else {
                    tokio::spawn(async move {
                        tokio::time::sleep(std::time::Duration::from_millis(delay_ms.into())).await;
                        numbered.send(count);
                    });
                }
                Ok(Bytes::new())
            }
            FAIL => Err(Fault::new(ErrorCode(0x1001), "asked to fail")),
            PANIC => panic!("asked to panic"),
            other => Err(Fault::new(ErrorCode(0x1000), format!("unknown kind {:#x}", other.0))),
        };
        self.running.fetch_sub(1, Ordering::SeqCst);
        result
    }

    fn closed(&self, _session: &TestSession) {
        self.closed.fetch_add(1, Ordering::SeqCst);
    }
}

/// Which socket.
#[derive(Clone, Copy, Debug)]
pub enum Transport {
    Tcp,
    Unix,
    /// TCP with TLS, with a certificate from a fresh test CA ([`Pki`]).
    Tls,
}

/// A throwaway CA and a server certificate it signed (for `localhost` and `127.0.0.1`), as PEM
/// files in a temporary directory.
pub struct Pki {
    /// The CA's certificate: what a client trusts.
    pub ca: PathBuf,
    /// The server's certificate chain (its own certificate, then the CA's).
    pub cert: PathBuf,
    /// The server's private key (PKCS#8).
    pub key: PathBuf,
    /// The directory holding them (for more files).
    pub dir: PathBuf,
    _dir: tempfile::TempDir,
}

impl Pki {
    /// A new CA named `name` and a server certificate signed by it.
    pub fn new(name: &str) -> Pki {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
        let dir = tempfile::tempdir().unwrap();
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.distinguished_name.push(DnType::CommonName, name);
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_cert = ca_params.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(ca_params, ca_key);
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
        params.distinguished_name.push(DnType::CommonName, "localhost");
        let cert = params.signed_by(&key, &issuer).unwrap();
        let pki = Pki {
            ca: dir.path().join("ca.pem"),
            cert: dir.path().join("server.pem"),
            key: dir.path().join("server.key"),
            dir: dir.path().to_path_buf(),
            _dir: dir,
        };
        std::fs::write(&pki.ca, ca_cert.pem()).unwrap();
        std::fs::write(&pki.cert, format!("{}{}", cert.pem(), ca_cert.pem())).unwrap();
        std::fs::write(&pki.key, key.serialize_pem()).unwrap();
        pki
    }

    /// The server's TLS settings from these files.
    pub fn server_tls(&self) -> ServerTls {
        ServerTls::from_pem_files(&self.cert, &self.key).unwrap()
    }

    /// A client's TLS settings trusting this CA (the server name: the address connected to).
    pub fn client_tls(&self) -> ClientTls {
        ClientTls {
            roots: TlsRoots::CaFile(self.ca.clone()),
            server_name: None,
        }
    }
}

/// A running server; shuts down (gracefully) when dropped.
pub struct Server {
    pub addr: Address,
    pub handler: Arc<TestHandler>,
    /// The RPC server's own counters (`rpc::run_counted`).
    pub stats: Arc<rpc::ServerStats>,
    /// The certificates of a TLS server.
    pub pki: Option<Pki>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
    _dir: Option<tempfile::TempDir>,
}

impl Server {
    pub fn start(transport: Transport, limits: Limits) -> Server {
        let handler = Arc::new(TestHandler::default());
        let pki = matches!(transport, Transport::Tls).then(|| Pki::new("cairn test CA"));
        let tls = pki.as_ref().map(Pki::server_tls);
        let (dir, addr) = match transport {
            Transport::Tcp | Transport::Tls => (None, Address::Tcp("127.0.0.1:0".parse::<SocketAddr>().unwrap())),
            Transport::Unix => {
                let dir = tempfile::tempdir().unwrap();
                let path = dir.path().join("cairn.sock");
                (Some(dir), Address::Unix(path))
            }
        };
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let h = handler.clone();
        let stats = Arc::new(rpc::ServerStats::default());
        let counted = stats.clone();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let mut listener = Listener::bind(&addr).await.unwrap();
                if let Some(tls) = tls {
                    listener = listener.with_tls(tls).unwrap();
                }
                addr_tx.send(listener.local_addr().unwrap()).unwrap();
                rpc::run_counted(
                    listener,
                    async move {
                        let _ = stop_rx.await;
                    },
                    h,
                    limits,
                    counted,
                )
                .await;
            });
        });
        let addr = addr_rx.recv().unwrap();
        Server {
            addr,
            handler,
            stats,
            pki,
            stop: Some(stop_tx),
            thread: Some(thread),
            _dir: dir,
        }
    }

    pub fn connect(&self) -> Client {
        Client::connect(&self.addr, &self.options()).unwrap()
    }

    /// [`options`], with TLS trusting the server's CA when the server has TLS.
    pub fn options(&self) -> ClientOptions {
        ClientOptions {
            tls: self.pki.as_ref().map(Pki::client_tls),
            ..options()
        }
    }

    /// Asks the server to shut down and waits until `run` has returned.
    pub fn shutdown(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }

    /// Starts shutting down without waiting.
    pub fn begin_shutdown(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shutdown();
    }
}

pub fn options() -> ClientOptions {
    ClientOptions {
        login: Some(rpc::Login {
            user: USER.into(),
            password: PASSWORD.into(),
        }),
        client_name: "test".into(),
        ..ClientOptions::default()
    }
}

/// A well-behaved client does a few echo calls and a ping.
pub fn well_behaved(server: &Server) {
    let c = server.connect();
    for i in 0..10u32 {
        let body = Bytes::copy_from_slice(&i.to_le_bytes());
        assert_eq!(c.call(ECHO, body.clone()).unwrap(), body);
    }
    c.ping().unwrap();
}

pub fn both() -> [Transport; 2] {
    [Transport::Tcp, Transport::Unix]
}

/// A plain blocking socket, for sending what no well-behaved client would.
pub enum Raw {
    Tcp(std::net::TcpStream),
    Unix(std::os::unix::net::UnixStream),
}

impl std::io::Read for Raw {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Raw::Tcp(s) => s.read(buf),
            Raw::Unix(s) => s.read(buf),
        }
    }
}

impl std::io::Write for Raw {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Raw::Tcp(s) => s.write(buf),
            Raw::Unix(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Raw {
    /// Connects; reads give up after 20 s so a bug hangs no test forever.
    pub fn connect(addr: &Address) -> Raw {
        let guard = Some(std::time::Duration::from_secs(20));
        match addr {
            Address::Tcp(a) => {
                let s = std::net::TcpStream::connect(a).unwrap();
                s.set_read_timeout(guard).unwrap();
                Raw::Tcp(s)
            }
            Address::Unix(p) => {
                let s = std::os::unix::net::UnixStream::connect(p).unwrap();
                s.set_read_timeout(guard).unwrap();
                Raw::Unix(s)
            }
        }
    }

    /// Whether the server has said something or closed (a look without
    /// waiting and without taking what is there).
    pub fn peer_closed(&mut self) -> bool {
        use std::os::fd::AsRawFd;
        let fd = match self {
            Raw::Tcp(s) => s.as_raw_fd(),
            Raw::Unix(s) => s.as_raw_fd(),
        };
        let mut b = [0u8; 1];
        // SAFETY: `fd` is this stream's open descriptor and `b` a valid one-byte buffer.
        let n = unsafe { libc::recv(fd, b.as_mut_ptr().cast(), 1, libc::MSG_PEEK | libc::MSG_DONTWAIT) };
        n >= 0 || std::io::Error::last_os_error().kind() != std::io::ErrorKind::WouldBlock
    }

    /// Closes the writing side.
    pub fn shutdown_write(&self) {
        match self {
            Raw::Tcp(s) => s.shutdown(std::net::Shutdown::Write).unwrap(),
            Raw::Unix(s) => s.shutdown(std::net::Shutdown::Write).unwrap(),
        }
    }

    pub fn send(&mut self, bytes: &[u8]) {
        use std::io::Write;
        self.write_all(bytes).unwrap();
    }

    pub fn send_message(&mut self, m: &cairn_net::message::Message) {
        let mut b = Vec::new();
        m.encode(&mut b);
        self.send(&b);
    }

    /// HELLO (without a login); returns the WELCOME.
    pub fn handshake(&mut self) -> cairn_net::message::Welcome {
        self.send_message(&cairn_net::message::Message::Hello(hello()));
        match self.next_message() {
            Some(cairn_net::message::Message::Welcome(w)) => w,
            other => panic!("expected WELCOME, got {other:?}"),
        }
    }

    /// The next message, `None` at end of stream (or a reset).
    pub fn next_message(&mut self) -> Option<cairn_net::message::Message> {
        use std::io::Read;
        let mut header = [0u8; cairn_net::frame::HEADER_SIZE];
        if self.read_exact(&mut header).is_err() {
            return None;
        }
        let mut dec = cairn_net::frame::FrameDecoder::new(u32::MAX);
        dec.push(&header);
        let h = cairn_net::frame::FrameHeader::decode(&header).unwrap();
        let mut body = vec![0u8; h.body_len as usize];
        self.read_exact(&mut body).unwrap();
        dec.push(&body);
        let frame = dec.decode().unwrap().unwrap();
        Some(cairn_net::message::Message::from_frame(frame).unwrap())
    }

    /// Every message until the server closes.
    pub fn messages_until_closed(&mut self) -> Vec<cairn_net::message::Message> {
        let mut out = Vec::new();
        while let Some(m) = self.next_message() {
            out.push(m);
        }
        out
    }
}

pub fn hello() -> Hello {
    Hello {
        architecture: Architecture::RPC,
        auth: Bytes::new(),
        client_name: "raw".into(),
    }
}

/// The frame of a request, for tampering with.
pub fn request_frame(kind: Kind, id: u64, body: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    cairn_net::frame::encode_frame(
        kind,
        cairn_net::frame::Flags::NONE,
        cairn_net::RequestId(id),
        body,
        &mut b,
    );
    b
}

/// Recomputes a tampered header's checksum.
pub fn reseal(frame: &mut [u8]) {
    let crc = crc32c::crc32c(&frame[..28]);
    frame[28..32].copy_from_slice(&crc.to_le_bytes());
}
