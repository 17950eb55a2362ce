//! The connection to `cairn serve`: its calls, their errors and counters, URL parsing, and the client pool's device.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use cairn_net::catalog_service::{CatalogReply, CatalogRequest};
use cairn_net::message::ErrorCode;
use cairn_net::page_service::{FaultDetail, LockCounters, PageRequest};
use cairn_net::rpc::Client;
use cairn_net::rpc::{ClientTls, Login, TlsRoots};
use cairn_net::transport::Address;
use cairn_storage::access::PageDevice;
use cairn_storage::lock::LockStats;
use cairn_storage::page;
use cairn_storage::{Error, PageId, Result, TxnId};

/// Counters of a page-server client.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RemoteStats {
    /// Requests sent to the server (each a round trip).
    pub round_trips: u64,
    /// Request bytes sent.
    pub bytes_sent: u64,
    /// Reply bytes received.
    pub bytes_received: u64,
    /// Pages the server shipped (FETCH, ALLOCATE and READ images).
    pub pages_shipped: u64,
    /// Fetches answered "your copy is current" (no image shipped).
    pub pages_revalidated: u64,
    /// Requests sent without waiting for the answer (the end of a read-only
    /// transaction): messages, not round trips.
    pub one_way: u64,
    /// Pages a transaction used under the client's right to cache them
    /// (callback locking): no server call at all.
    pub cache_hits: u64,
    /// Callbacks the server sent (another client's writer wanted a page
    /// this client cached).
    pub callbacks: u64,
    /// Of those, the ones answered "in use" (a transaction of this client
    /// was reading the page; the writer waits for it).
    pub callbacks_in_use: u64,
    /// Callback answers the server refused for its bound on one session's
    /// waiting requests, and this client sent again.
    pub answers_refused: u64,
    /// Rights to cache given back to the server unasked (RELEASE): the
    /// client held more than its bound, or emptied its cache.
    pub rights_given_back: u64,
    /// File-server client: pages read from the volume file directly (not
    /// those revalidated by LSN after a lock).
    pub pages_read_direct: u64,
    /// File-server client: pages it wrote into the volume file at commit.
    pub pages_written_direct: u64,
    /// Page-server client: pages whose appends its server kept at object
    /// grain (APPEND) instead of the client changing them under X.
    pub appends_kept: u64,
    /// Of those, the ones whose cached copy the client brought up to date
    /// from the commit's reply (the rest it dropped, to fetch again).
    pub appends_applied_here: u64,
    /// Object-protocol clients: objects the server sent (fetched by name,
    /// or along with their page): the client's object faults.
    pub objects_shipped: u64,
    /// Adaptive client: its fetch decisions and the measure behind them
    /// (all zero for the others).
    pub adaptive: super::adaptive::AdaptiveStats,
}

/// Where and how to connect: parsed from a `cairn://HOST:PORT` or
/// `cairn+unix:///PATH` URL.
pub fn parse_url(url: &str) -> Result<Address> {
    parse_url_login(url, None).map(|(address, _)| address)
}

/// How a client proves itself to the server and protects the connection:
/// the login (SCRAM-SHA-256) and TLS.
#[derive(Clone, Debug, Default)]
pub struct Connect {
    /// The user to log in as; `None`: no login (a server without users
    /// trusts local connections only).
    pub login: Option<Login>,
    /// TLS, for a `cairns://` server.
    pub tls: Option<ClientTls>,
}

/// Parses a server URL: `cairn://HOST:PORT`, `cairns://HOST:PORT` (TLS: the
/// server's certificate is checked against `tls_ca`, else the
/// `CAIRN_TLS_CA` file, else the system's roots, for the name HOST), or
/// `cairn+unix:///PATH`, each with an optional user: `USER:PASSWORD@` or
/// `USER@` (the password then comes from the `CAIRN_PASSWORD` environment
/// variable; `%XX` escapes in both are decoded). Returns the address and how
/// to connect.
pub fn parse_url_login(url: &str, tls_ca: Option<&std::path::Path>) -> Result<(Address, Connect)> {
    let bad = |why: &str| Error::InvalidArgument(format!("bad server URL: {why}"));
    let (scheme, rest) = if let Some(r) = url.strip_prefix("cairn+unix://") {
        ("cairn+unix://", r)
    } else if let Some(r) = url.strip_prefix("cairns://") {
        ("cairns://", r)
    } else if let Some(r) = url.strip_prefix("cairn://") {
        ("cairn://", r)
    } else {
        return Err(bad("it must start with cairn://, cairns:// or cairn+unix://"));
    };
    let (userinfo, place) = match (scheme, rest.rfind('@'), rest.find('/')) {
        ("cairn+unix://", Some(at), Some(slash)) if at < slash => (Some(&rest[..at]), &rest[at + 1..]),
        ("cairn://" | "cairns://", Some(at), _) => (Some(&rest[..at]), &rest[at + 1..]),
        _ => (None, rest),
    };
    let tls = (scheme == "cairns://").then(|| {
        let host = place.trim_end_matches('/');
        let host = host.rsplit_once(':').map_or(host, |(h, _)| h);
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let roots = match tls_ca
            .map(std::path::Path::to_path_buf)
            .or_else(|| std::env::var_os("CAIRN_TLS_CA").map(PathBuf::from))
        {
            Some(ca) => TlsRoots::CaFile(ca),
            None => TlsRoots::System,
        };
        ClientTls {
            roots,
            server_name: Some(host.to_string()),
        }
    });
    let login = match userinfo {
        None => None,
        Some(info) => {
            let (user, password) = match info.split_once(':') {
                Some((u, p)) => (
                    percent_decode(u).map_err(|w| bad(&w))?,
                    Some(percent_decode(p).map_err(|w| bad(&w))?),
                ),
                None => (percent_decode(info).map_err(|w| bad(&w))?, None),
            };
            let password = match password {
                Some(p) => p,
                None => std::env::var("CAIRN_PASSWORD").map_err(|_| {
                    bad(&format!(
                        "no password for user {user:?}: give it in the URL (USER:PASSWORD@) or in CAIRN_PASSWORD"
                    ))
                })?,
            };
            if user.is_empty() {
                return Err(bad("an empty user name"));
            }
            Some(Login { user, password })
        }
    };
    let plain = if scheme == "cairns://" { "cairn://" } else { scheme };
    Ok((parse_address(&format!("{plain}{place}"))?, Connect { login, tls }))
}

/// `%XX` escapes decoded; the result must be UTF-8.
fn percent_decode(s: &str) -> std::result::Result<String, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s.get(i + 1..i + 3).ok_or("a % escape is cut short")?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| format!("%{hex} is not an escape"))?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "an escape that is not UTF-8".to_string())
}

/// The address of a URL without a user.
fn parse_address(url: &str) -> Result<Address> {
    let bad = |why: &str| Error::InvalidArgument(format!("bad server URL {url:?}: {why}"));
    if let Some(path) = url.strip_prefix("cairn+unix://") {
        if !path.starts_with('/') {
            return Err(bad("a Unix socket URL is cairn+unix:///ABSOLUTE/PATH"));
        }
        return Ok(Address::Unix(PathBuf::from(path)));
    }
    let Some(rest) = url.strip_prefix("cairn://") else {
        return Err(bad("it must start with cairn:// or cairn+unix://"));
    };
    let hostport = rest.trim_end_matches('/');
    use std::net::ToSocketAddrs;
    let addr = hostport
        .to_socket_addrs()
        .map_err(|e| bad(&format!("cannot resolve {hostport:?}: {e}")))?
        .next()
        .ok_or_else(|| bad("the host resolves to no address"))?;
    Ok(Address::Tcp(addr))
}

/// Callback answers a client has at the server at once ([`Connection::answer_all`]):
/// far below the server's bound on one session's waiting requests
/// (`waiting_per_session_max`, 128 by default), which the application's
/// requests share. A server configured lower refuses some of them with
/// LIMIT, and those are sent again ([`ANSWER_TRIES_MAX`]).
pub(super) const ANSWERS_IN_FLIGHT: usize = 32;

/// Times a callback answer is sent when the server refuses it for its
/// bound on a session's waiting requests ([`Connection::answer_all`]).
const ANSWER_TRIES_MAX: u64 = 200;

/// One connection to `cairn serve`, shared by the transactions of a
/// [`crate::Database`].
pub(crate) struct Connection {
    pub(super) client: Client,
    pub(super) address: Address,
    pub(super) round_trips: AtomicU64,
    pub(super) bytes_sent: AtomicU64,
    pub(super) bytes_received: AtomicU64,
    pub(super) pages_shipped: AtomicU64,
    pub(super) pages_revalidated: AtomicU64,
    pub(super) one_way: AtomicU64,
    pub(super) cache_hits: AtomicU64,
    pub(super) appends_kept: AtomicU64,
    pub(super) appends_applied_here: AtomicU64,
    pub(super) objects_shipped: AtomicU64,
    pub(super) callbacks: AtomicU64,
    pub(super) callbacks_in_use: AtomicU64,
    pub(super) answers_refused: AtomicU64,
    pub(super) rights_given_back: AtomicU64,
    pub(super) pages_read_direct: AtomicU64,
    pub(super) pages_written_direct: AtomicU64,
}

/// Entries one TREE_RANGE asks for.
const TREE_RANGE_BATCH: u32 = 4096;

impl Connection {
    /// Connects to `address` as a client of `architecture`, as `connect`
    /// says (login, TLS); `kind` names the client to the server ("page",
    /// "file", "object").
    pub(super) fn open(
        address: Address,
        architecture: cairn_net::message::Architecture,
        connect: &Connect,
        kind: &str,
    ) -> Result<Arc<Connection>> {
        let opts = cairn_net::rpc::ClientOptions {
            architecture,
            login: connect.login.clone(),
            tls: connect.tls.clone(),
            client_name: format!("cairn {kind} client (pid {})", std::process::id()),
            ..cairn_net::rpc::ClientOptions::default()
        };
        let client = Client::connect(&address, &opts).map_err(|e| Error::BackendLost {
            backend: address.to_string(),
            reason: format!("cannot connect: {e}"),
        })?;
        Ok(Arc::new(Connection {
            client,
            address,
            round_trips: AtomicU64::new(0),
            bytes_sent: AtomicU64::new(0),
            bytes_received: AtomicU64::new(0),
            pages_shipped: AtomicU64::new(0),
            pages_revalidated: AtomicU64::new(0),
            one_way: AtomicU64::new(0),
            cache_hits: AtomicU64::new(0),
            appends_kept: AtomicU64::new(0),
            appends_applied_here: AtomicU64::new(0),
            objects_shipped: AtomicU64::new(0),
            callbacks: AtomicU64::new(0),
            callbacks_in_use: AtomicU64::new(0),
            answers_refused: AtomicU64::new(0),
            rights_given_back: AtomicU64::new(0),
            pages_read_direct: AtomicU64::new(0),
            pages_written_direct: AtomicU64::new(0),
        }))
    }

    /// Sends a callback answer (`kind`, `body`) and waits for the server to
    /// acknowledge it. `counted`: the application's round trip (a writer
    /// naming its client's readers); the callback thread's answers are not
    /// counted as round trips.
    pub(super) fn answer(&self, kind: cairn_net::frame::Kind, body: Vec<u8>, counted: bool) -> Result<()> {
        if counted {
            self.round_trips.fetch_add(1, Ordering::Relaxed);
            self.bytes_sent.fetch_add(body.len() as u64, Ordering::Relaxed);
        }
        self.answer_all(vec![(kind, body)]).pop().unwrap_or(Ok(()))
    }

    /// Sends the messages of `messages` (callback answers)
    /// [`ANSWERS_IN_FLIGHT`] at a time, each group before waiting for any
    /// of its replies (the RPC layer pipelines them): a round trip per
    /// group, not per message, and never more requests of this session at
    /// the server than its bound lets wait there. Not the application's
    /// round trips. One outcome per message, in order.
    pub(super) fn answer_all(&self, messages: Vec<(cairn_net::frame::Kind, Vec<u8>)>) -> Vec<Result<()>> {
        let mut out = Vec::with_capacity(messages.len());
        let messages: Vec<(cairn_net::frame::Kind, Bytes)> = messages
            .into_iter()
            .map(|(kind, body)| (kind, Bytes::from(body)))
            .collect();
        for group in messages.chunks(ANSWERS_IN_FLIGHT) {
            let calls: Vec<_> = group
                .iter()
                .map(|(kind, body)| self.client.invoke(*kind, body.clone()))
                .collect();
            for (call, (kind, body)) in calls.into_iter().zip(group) {
                let sent = call.and_then(|c| c.wait()).map(|_| ());
                out.push(self.again_if_refused(*kind, body, sent).map_err(|e| self.error(e)));
            }
        }
        out
    }

    /// A callback answer the server refused for its bound on one session's
    /// waiting requests (LIMIT: refused at once, not taken in — a server
    /// configured below [`ANSWERS_IN_FLIGHT`], or this client's own
    /// requests holding the places), sent again alone, up to
    /// [`ANSWER_TRIES_MAX`] times, a little later each time. Unanswered,
    /// the writer it holds back would wait out its lock timeout and the
    /// server end this session as silent.
    fn again_if_refused(
        &self,
        kind: cairn_net::frame::Kind,
        body: &Bytes,
        mut sent: std::result::Result<(), cairn_net::Error>,
    ) -> std::result::Result<(), cairn_net::Error> {
        let mut tries = 1;
        while tries < ANSWER_TRIES_MAX
            && matches!(&sent, Err(cairn_net::Error::Remote(f)) if f.code == ErrorCode::LIMIT)
        {
            self.answers_refused.fetch_add(1, Ordering::Relaxed);
            std::thread::sleep(Duration::from_millis(tries.min(20)));
            tries += 1;
            sent = self
                .client
                .invoke(kind, body.clone())
                .and_then(|c| c.wait())
                .map(|_| ());
        }
        sent
    }

    /// Sends a request of any service (`kind`, `body`) for transaction
    /// `txn` (its errors name it) and collects the reply's parts.
    pub(super) fn call_kind(&self, kind: cairn_net::frame::Kind, body: Vec<u8>, txn: TxnId) -> Result<Vec<Bytes>> {
        self.round_trips.fetch_add(1, Ordering::Relaxed);
        self.bytes_sent.fetch_add(body.len() as u64, Ordering::Relaxed);
        let parts = self
            .client
            .invoke(kind, body)
            .and_then(|c| c.collect())
            .map_err(|e| self.error_for(e, txn))?;
        let n: usize = parts.iter().map(|p| p.len()).sum();
        self.bytes_received.fetch_add(n as u64, Ordering::Relaxed);
        Ok(parts)
    }

    pub(super) fn call(&self, req: &PageRequest) -> Result<Vec<Bytes>> {
        let (kind, body) = req.encode();
        self.call_kind(kind, body, txn_of(req))
    }

    /// The server's lock-manager counters (LOCK_STATS): all sessions'
    /// lock requests, waits, deadlocks and timeouts since it opened the
    /// database. One round trip, counted as any other.
    pub(super) fn server_lock_stats(&self) -> Result<LockStats> {
        let body = self.call_one(&PageRequest::LockStats)?;
        let c = LockCounters::decode(&body).map_err(|e| self.error(cairn_net::Error::Message(e)))?;
        Ok(LockStats {
            requests: c.requests,
            waits: c.waits,
            deadlocks: c.deadlocks,
            timeouts: c.timeouts,
            upgrades: c.upgrades,
            wait_micros: c.wait_micros,
        })
    }

    /// A CATALOG request: the catalog change `change` (the schema layer's
    /// bytes) made by the server in transaction `txn`, and its reply.
    pub(super) fn catalog(&self, txn: TxnId, change: &[u8]) -> Result<CatalogReply> {
        let (kind, body) = CatalogRequest {
            txn: txn.0,
            change: change.to_vec(),
        }
        .encode();
        let parts = self.call_kind(kind, body, txn)?;
        let body = self.one_body(parts)?;
        CatalogReply::decode(&body).map_err(|e| self.error(cairn_net::Error::Message(e)))
    }

    /// The one reply body of a call that has no parts.
    pub(super) fn call_one(&self, req: &PageRequest) -> Result<Bytes> {
        let parts = self.call(req)?;
        self.one_body(parts)
    }

    /// The body of a reply that must come as one (no parts).
    /// The entries of a B+-tree range read with TREE_RANGE requests of
    /// `TREE_RANGE_BATCH` entries, each sent by `call` (the transaction's
    /// own way), to `f` until it says false: from `lo` (after the value
    /// `after` of the key `lo` names) to `hi`, each batch resuming after
    /// the last entry handed on — its key again, skipping its values up to
    /// the last one seen.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn tree_range_batches(
        &self,
        txn: TxnId,
        root: PageId,
        mut lo: std::ops::Bound<Vec<u8>>,
        hi: std::ops::Bound<Vec<u8>>,
        mut after: Option<Vec<u8>>,
        call: &mut dyn FnMut(&cairn_net::object_service::ObjectRequest) -> Result<Bytes>,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<()> {
        loop {
            let body = call(&cairn_net::object_service::ObjectRequest::TreeRange {
                txn: txn.0,
                root: root.0,
                limit: TREE_RANGE_BATCH,
                lo: lo.clone(),
                hi: hi.clone(),
                after: after.take(),
            })?;
            let (entries, more) = cairn_net::object_service::decode_entries(&body)
                .map_err(|e| self.error(cairn_net::Error::Message(e)))?;
            let mut last = None;
            for (k, v) in entries {
                if !f(&k, &v) {
                    return Ok(());
                }
                last = Some((k, v));
            }
            match (more, last) {
                (true, Some((k, v))) => {
                    lo = std::ops::Bound::Included(k);
                    after = Some(v);
                }
                (true, None) => return Err(self.protocol("a TREE_RANGE reply that says \"more\" sends an entry")),
                (false, _) => return Ok(()),
            }
        }
    }

    pub(super) fn one_body(&self, mut parts: Vec<Bytes>) -> Result<Bytes> {
        match (parts.pop(), parts.is_empty()) {
            (Some(b), true) => Ok(b),
            _ => Err(self.protocol("a reply of one body")),
        }
    }

    pub(super) fn protocol(&self, wanted: &str) -> Error {
        Error::BackendLost {
            backend: self.address.to_string(),
            reason: format!("the server broke the page protocol: expected {wanted}"),
        }
    }

    /// A network error outside any transaction's request.
    pub(super) fn error(&self, e: cairn_net::Error) -> Error {
        self.error_for(e, TxnId(0))
    }

    /// A network error as a storage error the transaction can act on: the
    /// server's fault codes keep their meaning (a deadlock is still one), a
    /// lost connection or a broken protocol is [`Error::BackendLost`] (the
    /// transaction is doomed).
    pub(super) fn error_for(&self, e: cairn_net::Error, txn: TxnId) -> Error {
        match e {
            cairn_net::Error::Remote(f) => {
                let m = f.message.clone();
                // The error's fields, where the server sent them (an error
                // without them, or with damaged ones, still keeps its code).
                let detail = FaultDetail::decode(&f.detail).ok();
                match (f.code, detail) {
                    (ErrorCode::DEADLOCK, Some(FaultDetail::Deadlock { cycle })) => Error::Deadlock {
                        txn,
                        cycle: format!("on the server: {cycle}"),
                    },
                    (
                        ErrorCode::LOCK_TIMEOUT,
                        Some(FaultDetail::LockTimeout {
                            resource,
                            mode,
                            waited_ms,
                        }),
                    ) => Error::LockTimeout {
                        txn,
                        resource: format!("{resource} (on the server)"),
                        mode,
                        waited_ms,
                    },
                    (ErrorCode::CORRUPT, Some(FaultDetail::Corrupt { page, reason })) => Error::Corrupt {
                        page: PageId(page),
                        reason: format!("on the server: {reason}"),
                    },
                    (ErrorCode::SNAPSHOT_TOO_OLD, Some(FaultDetail::SnapshotTooOld { lsn, bytes_max })) => {
                        Error::SnapshotTooOld { lsn, bytes_max }
                    }
                    (code, _) => Connection::coded_error(code, m, txn),
                }
            }
            // Refused before sending: the connection is fine, the request
            // (a COMMIT of a very large transaction) is over the limit.
            cairn_net::Error::TooLarge { len, max } => Error::LimitExceeded {
                what: "bytes in one request to the server (its message bound)",
                value: len as u64,
                limit: u64::from(max),
            },
            other => Error::BackendLost {
                backend: self.address.to_string(),
                reason: other.to_string(),
            },
        }
    }

    /// A server fault without (usable) detail: its code keeps its meaning,
    /// the message stands in for the fields.
    fn coded_error(code: ErrorCode, m: String, txn: TxnId) -> Error {
        match code {
            ErrorCode::DEADLOCK => Error::Deadlock {
                txn,
                cycle: format!("on the server: {m}"),
            },
            ErrorCode::LOCK_TIMEOUT => Error::LockTimeout {
                txn,
                resource: format!("(on the server: {m})"),
                mode: "a lock".into(),
                waited_ms: 0,
            },
            ErrorCode::POISONED => Error::Poisoned(format!("the server's database: {m}")),
            ErrorCode::DOOMED => Error::TxnDoomed {
                txn,
                cause: format!("on the server: {m}"),
            },
            ErrorCode::CORRUPT => Error::Corrupt {
                page: PageId(u32::MAX),
                reason: format!("on the server: {m}"),
            },
            ErrorCode::SNAPSHOT_TOO_OLD => Error::SnapshotTooOld { lsn: 0, bytes_max: 0 },
            ErrorCode::INTERNAL => Error::Internal(format!("on the server: {m}")),
            ErrorCode::DENIED => Error::PermissionDenied(format!("on the server: {m}")),
            ErrorCode::NOT_FOUND => Error::InvalidArgument(format!("the server found no such thing: {m}")),
            _ => Error::InvalidArgument(format!("the server refused: {m} (code {:#06x})", code.0)),
        }
    }
}

/// The transaction a request is for (0 for none).
fn txn_of(req: &PageRequest) -> TxnId {
    match req {
        PageRequest::Fetch { txn, .. }
        | PageRequest::Place { txn, .. }
        | PageRequest::Allocate { txn, .. }
        | PageRequest::Free { txn, .. }
        | PageRequest::Commit { txn, .. }
        | PageRequest::Abort { txn }
        | PageRequest::Lock { txn, .. }
        | PageRequest::GroupPages { txn, .. } => TxnId(*txn),
        _ => TxnId(0),
    }
}

/// The client pool's device: a page the pool misses is read (without a
/// lock: the transaction asking already holds one) from the server.
pub struct RemoteDevice {
    pub(super) conn: Arc<Connection>,
    pub(super) page_size: usize,
    /// A file-server client's volume file: pages are read there, not
    /// asked of the server.
    pub(super) file: Option<Arc<VolumeFile>>,
}

/// The served volume file, opened by a file-server client (the same
/// machine's file system standing in for a network file system):
/// positional reads and writes of whole pages, each verified on read.
pub(crate) struct VolumeFile {
    file: std::fs::File,
    path: PathBuf,
    page_size: usize,
}

impl VolumeFile {
    /// Opens the volume file at `path` (the server's) for reading and writing.
    pub(super) fn open(path: PathBuf, page_size: usize) -> Result<VolumeFile> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|source| Error::Io {
                op: "open the served volume file (the file-server architecture reads and writes it directly)",
                path: path.clone(),
                source,
            })?;
        Ok(VolumeFile { file, path, page_size })
    }

    fn io(&self, op: &'static str, source: std::io::Error) -> Error {
        Error::Io {
            op,
            path: self.path.clone(),
            source,
        }
    }

    /// Reads page `id` into `buf` and verifies it (checksum, page id).
    pub(super) fn read(&self, id: PageId, buf: &mut [u8]) -> Result<()> {
        use std::os::unix::fs::FileExt;
        self.file
            .read_exact_at(buf, id.0 as u64 * self.page_size as u64)
            .map_err(|e| self.io("read a page of the served volume file", e))?;
        page::verify(buf, id)
    }

    /// Writes `image` (sealed) as page `id`; not synced.
    pub(super) fn write(&self, id: PageId, image: &[u8]) -> Result<()> {
        use std::os::unix::fs::FileExt;
        self.file
            .write_all_at(image, id.0 as u64 * self.page_size as u64)
            .map_err(|e| self.io("write a page of the served volume file", e))
    }

    /// Makes the writes so far durable.
    pub(super) fn sync(&self) -> Result<()> {
        self.file
            .sync_data()
            .map_err(|e| self.io("sync the served volume file", e))
    }
}

impl PageDevice for RemoteDevice {
    fn page_size(&self) -> usize {
        self.page_size
    }

    fn read_page(&self, id: PageId, buf: &mut [u8]) -> Result<()> {
        if let Some(f) = &self.file {
            // Under the transaction's lock, which the server granted with
            // the file current.
            self.conn.pages_read_direct.fetch_add(1, Ordering::Relaxed);
            return f.read(id, buf);
        }
        let body = self.conn.call_one(&PageRequest::Read { page: id.0 })?;
        if body.len() != buf.len() {
            return Err(Error::corrupt(
                id,
                format!("the server sent {} bytes for a page of {}", body.len(), buf.len()),
            ));
        }
        buf.copy_from_slice(&body);
        self.conn.pages_shipped.fetch_add(1, Ordering::Relaxed);
        page::verify(buf, id)?;
        // Only ever a page the asking transaction holds a lock on, whose
        // image came with that lock: if it differs now, the FETCH that took
        // the lock announced it.
        Ok(())
    }

    /// Never called with a change: the pool holds only committed images the
    /// server already has (installed clean). Nothing to write.
    fn write_page(&self, _id: PageId, _buf: &mut [u8]) -> Result<()> {
        Ok(())
    }

    fn sync(&self) -> Result<()> {
        Ok(())
    }
}
