//! Cairn's wire protocol and RPC layer (`docs/protocol.md`; PRIMA's Remote Cooperation System).
//!
//! - [`frame`]: the 32-byte frame header, checksums, and the incremental [`frame::FrameDecoder`].
//! - [`message`]: the envelope's message kinds (handshake, requests, reply parts, final and error
//!   replies, GOODBYE, PING, and the server-initiated NOTICE) and their bodies.
//! - [`transport`]: TCP and Unix domain sockets behind one [`transport::Address`], and TLS over
//!   TCP ([`transport::tls`], rustls with the `ring` provider): the server's
//!   `transport::ServerTls` on a `transport::Listener`, the client's [`transport::ClientTls`] in
//!   [`rpc::ClientOptions::tls`].
//! - [`rights`]: callback locking's messages, one set for every client kind (CALLBACK,
//!   CALLBACK_REPLY, RELEASE), keyed by what a right covers: a page or an object.
//! - [`catalog_service`]: CATALOG, the one request by which a client of any kind changes the
//!   schema catalog (the server checks and makes the change; no client writes its pages).
//! - [`rpc`]: the client ([`rpc::Client`]: invoke now, collect later; partial replies as a
//!   stream; a synchronous `call`; [`rpc::Client::next_notice`] for the server's notices) and
//!   the server ([`rpc::run`] with a [`rpc::Handler`], which sends notices through an
//!   [`rpc::Notifier`]).
//! - [`scram`]: SCRAM-SHA-256 authentication (RFC 5802/7677, no channel binding) as pure state
//!   machines over byte strings: the client's and server's steps and the stored
//!   [`scram::Verifier`].
//!
//! Architecture invariant: this crate does no disk I/O (beyond reading the TLS certificate, key
//! and CA files it is pointed at, once, when TLS is set up) and knows nothing of the database;
//! the server crate gives meaning to service kinds (`0x0100` and up). `docs/protocol.md` has the
//! byte layouts.

pub mod catalog_service;
pub mod error;
pub mod frame;
pub mod message;
pub mod object_service;
pub mod page_service;
pub mod rights;
pub mod rpc;
pub mod scram;
pub mod transport;

pub use error::{Error, Result};
pub use frame::{Kind, RequestId};
pub use message::{Architecture, ErrorCode, Fault};
pub use transport::Address;
