//! RPC after PRIMA's Remote Cooperation System: asynchronous, pipelined calls with partial
//! replies, and NOTICEs the server sends unasked. [`client`] is the calling half (synchronous API),
//! [`server`] the serving half (tokio).

pub mod client;
#[cfg(feature = "server")]
mod login;
#[cfg(feature = "server")]
pub mod server;

pub use crate::transport::{ClientTls, TlsRoots};
pub use client::{Call, Client, ClientOptions, Login, Part};
#[cfg(feature = "server")]
pub use login::address_of;
#[cfg(feature = "server")]
pub use server::{run, run_counted, Handler, Limits, Notifier, Replier, Request, ServerStats};
