//! TLS for TCP connections (rustls, TLS 1.2 and 1.3, the `ring` crypto provider only).
//!
//! # What it protects
//!
//! TLS wraps the whole byte stream of a TCP connection: every frame, from the HELLO on, travels
//! inside it unchanged (`docs/protocol.md`, "TLS"). It gives the connection confidentiality and
//! integrity against anyone on the path, and it authenticates the *server*: the client checks the
//! server's certificate chain against the roots it trusts ([`TlsRoots`]) and the name it meant to
//! reach ([`ClientTls::server_name`]). Clients are not asked for certificates; a client proves who
//! it is with the SCRAM login that then runs inside TLS, exactly as without it. SCRAM is not bound
//! to the TLS session (no channel binding yet), so the login alone does not detect a relay by
//! someone who holds a certificate the client trusts: the certificate check is what stops that.
//! Unix domain sockets are local and get no TLS ([`Listener::with_tls`] refuses them).
//!
//! # The two sides
//!
//! - The server (feature `server`) builds a [`ServerTls`] from PEM files and puts it on a TCP
//!   listener with [`Listener::with_tls`]; `rpc::run` then runs each accepted connection's TLS
//!   handshake in that connection's own task, within [`Limits::handshake_timeout`] (which covers
//!   the TLS handshake and the HELLO together), so a peer that never finishes it holds its
//!   connection slot only that long and blocks nobody else. The TLS stream is split with
//!   `tokio::io::split` (one rustls state machine behind tokio's lock, held only for each
//!   non-blocking step), and the connection's writer flushes after each batch so that no encrypted
//!   record is left inside rustls while it waits for more frames.
//! - The blocking client ([`crate::rpc::Client`]) drives a rustls `ClientConnection` itself, with
//!   no runtime and no thread of its own; `ClientOptions::tls` turns it on. See the client's
//!   socket module (`rpc/client/tls.rs`) for how readers, writers and `Client::next_notice` share
//!   that one state machine without anyone holding its lock while blocked in the socket.
//!
//! Both sides use rustls' `ring` provider explicitly (never a process-wide default), with rustls'
//! safe default protocol versions (TLS 1.3 and 1.2) and cipher suites.
//!
//! [`Listener::with_tls`]: crate::transport::Listener::with_tls
//! [`Limits::handshake_timeout`]: crate::rpc::Limits::handshake_timeout

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::{self, PemObject};
#[cfg(feature = "server")]
use rustls::pki_types::PrivateKeyDer;
use rustls::pki_types::{CertificateDer, ServerName};

/// Which certificate authorities a TLS client trusts to sign the server's certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TlsRoots {
    /// The CA certificates in this PEM file (one or more `BEGIN CERTIFICATE` blocks), and no
    /// others: for a server with its own CA or a self-signed certificate.
    CaFile(PathBuf),
    /// The operating system's trusted roots (read by `rustls-native-certs` at each connect).
    System,
}

/// A client's TLS settings ([`crate::rpc::ClientOptions::tls`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientTls {
    /// The CAs trusted to sign the server's certificate.
    pub roots: TlsRoots,
    /// The name the server's certificate must be valid for: a DNS name (`db.example.com`) or an
    /// IP address. `None`: the IP address connected to, since an [`Address::Tcp`] holds a
    /// resolved socket address and no longer knows the host name it came from. A caller that
    /// connects to a DNS name must therefore pass that name here (most certificates name hosts,
    /// not addresses).
    ///
    /// [`Address::Tcp`]: crate::transport::Address::Tcp
    pub server_name: Option<String>,
}

impl ClientTls {
    /// TLS trusting `roots`, checking the certificate against the address connected to (set
    /// [`ClientTls::server_name`] for a DNS name).
    pub fn new(roots: TlsRoots) -> ClientTls {
        ClientTls {
            roots,
            server_name: None,
        }
    }

    /// The rustls client configuration and the server name to check, for a connection to `ip`.
    pub(crate) fn config(
        &self,
        ip: std::net::IpAddr,
    ) -> Result<(Arc<rustls::ClientConfig>, ServerName<'static>), TlsError> {
        let name = match &self.server_name {
            Some(n) => ServerName::try_from(n.clone()).map_err(|_| TlsError::BadServerName { name: n.clone() })?,
            None => ServerName::IpAddress(ip.into()),
        };
        let mut roots = rustls::RootCertStore::empty();
        match &self.roots {
            TlsRoots::CaFile(path) => {
                let pem = read_file(path)?;
                for cert in certificates(path, &pem)? {
                    roots.add(cert).map_err(|e| TlsError::BadCertificate {
                        path: path.clone(),
                        reason: e.to_string(),
                    })?;
                }
            }
            TlsRoots::System => {
                let found = rustls_native_certs::load_native_certs();
                let (added, _unparsable) = roots.add_parsable_certificates(found.certs);
                if added == 0 {
                    let why = found
                        .errors
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join("; ");
                    return Err(TlsError::NoSystemRoots {
                        reason: if why.is_empty() {
                            "the system's certificate store is empty".into()
                        } else {
                            why
                        },
                    });
                }
            }
        }
        let config = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Config { reason: e.to_string() })?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok((Arc::new(config), name))
    }
}

/// The crypto provider both sides use: `ring`, explicitly (so that no process-wide default is
/// needed, and nothing else can be picked).
pub(crate) fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Why TLS could not be set up: a certificate or key file that is missing or wrong, a bad server
/// name, or a listener that cannot take TLS. Each names the file (or name) and what is wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// The file could not be read (missing, not readable).
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file is not valid PEM.
    #[error("{} is not valid PEM: {reason}", path.display())]
    Pem {
        /// The file.
        path: PathBuf,
        /// What the PEM parser said.
        reason: String,
    },
    /// The file holds no `BEGIN CERTIFICATE` block.
    #[error("{} holds no certificate (a PEM block 'BEGIN CERTIFICATE' was expected)", path.display())]
    NoCertificate {
        /// The file.
        path: PathBuf,
    },
    /// The file holds no private key this build can use.
    #[error("{} holds no private key (a PEM block 'BEGIN PRIVATE KEY', 'BEGIN RSA PRIVATE KEY' or 'BEGIN EC PRIVATE KEY' was expected{})", path.display(), if *encrypted { "; encrypted keys are not supported, decrypt it first" } else { "" })]
    NoPrivateKey {
        /// The file.
        path: PathBuf,
        /// Whether the file holds an encrypted key instead.
        encrypted: bool,
    },
    /// A certificate in the file could not be used.
    #[error("{}: bad certificate: {reason}", path.display())]
    BadCertificate {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The private key could not be used (an unsupported algorithm, say).
    #[error("{}: unusable private key: {reason}", path.display())]
    BadKey {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The private key is not the one the certificate was issued for.
    #[error("the private key in {} does not match the certificate in {} (the first certificate there must be the server's own)", key.display(), cert.display())]
    KeyMismatch {
        /// The certificate chain file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
    },
    /// TLS was asked for on a Unix domain socket (local: TLS is for TCP).
    #[error("TLS is for TCP listeners; {} is a Unix socket", path.display())]
    UnixSocket {
        /// The socket's path.
        path: PathBuf,
    },
    /// [`ClientTls::server_name`] is neither a DNS name nor an IP address.
    #[error("{name:?} is not a valid TLS server name (want a DNS name or an IP address)")]
    BadServerName {
        /// The name given.
        name: String,
    },
    /// [`TlsRoots::System`], but no usable root certificate was found.
    #[error("no usable system root certificates: {reason}")]
    NoSystemRoots {
        /// What went wrong loading them.
        reason: String,
    },
    /// rustls refused the configuration.
    #[error("TLS configuration: {reason}")]
    Config {
        /// Why.
        reason: String,
    },
}

fn read_file(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// Every certificate in a PEM file (at least one).
fn certificates(path: &Path, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, pem::Error>>()
        .map_err(|e| TlsError::Pem {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            path: path.to_path_buf(),
        });
    }
    Ok(certs)
}

/// The first private key in a PEM file (PKCS#8, PKCS#1 or SEC1).
#[cfg(feature = "server")]
fn private_key(path: &Path, pem: &[u8]) -> Result<PrivateKeyDer<'static>, TlsError> {
    match PrivateKeyDer::from_pem_slice(pem) {
        Ok(key) => Ok(key),
        Err(pem::Error::NoItemsFound) => Err(TlsError::NoPrivateKey {
            path: path.to_path_buf(),
            encrypted: pem.windows(21).any(|w| w == b"ENCRYPTED PRIVATE KEY"),
        }),
        Err(e) => Err(TlsError::Pem {
            path: path.to_path_buf(),
            reason: e.to_string(),
        }),
    }
}

/// The server's TLS identity and settings: its certificate chain and private key, TLS 1.2 and
/// 1.3, no client certificates. Cheap to clone. Put it on a TCP listener with
/// [`Listener::with_tls`](crate::transport::Listener::with_tls).
#[cfg(feature = "server")]
#[derive(Clone)]
pub struct ServerTls {
    pub(crate) acceptor: tokio_rustls::TlsAcceptor,
}

#[cfg(feature = "server")]
impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls").finish_non_exhaustive()
    }
}

#[cfg(feature = "server")]
impl ServerTls {
    /// Reads the server's certificate chain (PEM, the server's own certificate first, then any
    /// intermediates) and its private key (PEM: PKCS#8, PKCS#1 or SEC1; not encrypted). Fails,
    /// naming the file, when a file is missing or unreadable, is not PEM, holds no certificate or
    /// no private key, or when the key does not belong to the certificate.
    pub fn from_pem_files(cert_chain: &Path, key: &Path) -> Result<ServerTls, TlsError> {
        let chain = certificates(cert_chain, &read_file(cert_chain)?)?;
        let key_der = private_key(key, &read_file(key)?)?;
        let provider = provider();
        let bad_key = |e: rustls::Error| TlsError::BadKey {
            path: key.to_path_buf(),
            reason: e.to_string(),
        };
        let signing_key = provider.key_provider.load_private_key(key_der).map_err(bad_key)?;
        let certified = rustls::sign::CertifiedKey::new(chain, signing_key);
        match certified.keys_match() {
            Ok(()) => {}
            Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) => {
                return Err(TlsError::KeyMismatch {
                    cert: cert_chain.to_path_buf(),
                    key: key.to_path_buf(),
                })
            }
            // The key cannot tell its public half: nothing to compare (rustls does the same).
            Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {}
            Err(e) => {
                return Err(TlsError::BadCertificate {
                    path: cert_chain.to_path_buf(),
                    reason: match e {
                        rustls::Error::InvalidCertificate(c) => {
                            format!("the first certificate (the server's own) cannot be used: {c}")
                        }
                        e => e.to_string(),
                    },
                })
            }
        }
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Config { reason: e.to_string() })?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(rustls::sign::SingleCertAndKey::from(certified)));
        Ok(ServerTls {
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)),
        })
    }
}

/// A rustls error as the client reports it: certificate problems in plain words first.
pub(crate) fn describe(e: &rustls::Error) -> String {
    use rustls::CertificateError as C;
    match e {
        rustls::Error::InvalidCertificate(c) => {
            let what = match c {
                C::UnknownIssuer => "it is not signed by a trusted CA (unknown issuer)".to_string(),
                C::BadSignature => "its signature does not verify".to_string(),
                C::Expired | C::ExpiredContext { .. } => format!("it has expired ({c})"),
                C::NotValidYet | C::NotValidYetContext { .. } => format!("it is not valid yet ({c})"),
                C::NotValidForName | C::NotValidForNameContext { .. } => {
                    format!("it is not valid for the server's name ({c}); the name checked is ClientTls::server_name, or the IP address connected to when that is not set")
                }
                C::Revoked => "it has been revoked".to_string(),
                C::InvalidPurpose | C::InvalidPurposeContext { .. } => {
                    format!("it is not a server certificate ({c})")
                }
                other => other.to_string(),
            };
            format!("the server's certificate was rejected: {what}")
        }
        rustls::Error::AlertReceived(alert) => format!("the server ended the TLS handshake with alert {alert:?}"),
        rustls::Error::InvalidMessage(_) => {
            format!("the server's answer is not TLS (is it a listener without TLS?): {e}")
        }
        other => other.to_string(),
    }
}
