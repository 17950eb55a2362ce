//! SCRAM-SHA-256 authentication (RFC 5802, with the SHA-256 hash of RFC 7677), without channel
//! binding: the state machines of both sides, as pure computation over byte strings.
//!
//! This module does no I/O. The server stores each user's [`Verifier`] (its [`Verifier::encode`]d
//! bytes); the handshake frames carry the four messages. A password never reaches the server,
//! and the verifier the server stores cannot be used to log in.
//!
//! # The exchange
//!
//! ```text
//!  client                                                      server
//!  ClientFirst::new(user)
//!        ── client-first-message ────────────────────────────▶ ServerStart::parse
//!           n,,n=USER,r=CNONCE                                 .user(): look up the Verifier
//!                                                              .respond(Option<Verifier>, &Decoy)
//!        ◀──────────────────────────── server-first-message ──
//!           r=CNONCE SNONCE,s=SALT,i=ITERATIONS
//!  .receive_server_first(password)
//!        ── client-final-message ────────────────────────────▶ ServerFirst::verify_client_final
//!           c=biws,r=CNONCE SNONCE,p=CLIENTPROOF
//!        ◀──────────────────────────── server-final-message ──
//!           v=SERVERSIGNATURE      (on failure the server may send e=invalid-proof,
//!  .verify_server_final                see ScramError::server_error_message)
//! ```
//!
//! `CNONCE SNONCE` is one attribute value: the server appends its nonce to the client's.
//! `biws` is the base64 of the GS2 header `n,,`; a client that sends `y,,` ("I support channel
//! binding but think the server does not", which is true) proves it with `c=eSws`. Channel
//! binding proper (`p=NAME`) and authorization identities (`a=`) are refused.
//!
//! With `H` = SHA-256, `HMAC` = HMAC-SHA-256 and `Hi` = PBKDF2-HMAC-SHA-256:
//!
//! ```text
//!  SaltedPassword  = Hi(password, salt, iterations)
//!  ClientKey       = HMAC(SaltedPassword, "Client Key")
//!  StoredKey       = H(ClientKey)                          } the Verifier, with salt and
//!  ServerKey       = HMAC(SaltedPassword, "Server Key")    } iterations
//!  AuthMessage     = client-first-message-bare "," server-first-message ","
//!                    client-final-message-without-proof
//!  ClientProof     = ClientKey XOR HMAC(StoredKey, AuthMessage)
//!  ServerSignature = HMAC(ServerKey, AuthMessage)
//! ```
//!
//! The server recovers `ClientKey` from the proof and checks `H(ClientKey) == StoredKey` in
//! constant time; the client checks `ServerSignature` in constant time, which proves the server
//! holds the verifier made from the same password.
//!
//! # Client states
//!
//! | State         | Made by                                             | Holds                        | Next                                                          |
//! |---------------|-----------------------------------------------------|------------------------------|---------------------------------------------------------------|
//! | [`ClientFirst`] | [`ClientFirst::new`], [`ClientFirst::with_nonce`] | client-first-message         | [`ClientFirst::receive_server_first`] → [`ClientFinal`]       |
//! | [`ClientFinal`] | [`ClientFirst::receive_server_first`]             | client-final-message, the expected ServerSignature | [`ClientFinal::verify_server_final`] → `Ok(())`: the server is authenticated |
//!
//! # Server states
//!
//! | State           | Made by                                                      | Holds                    | Next                                                        |
//! |-----------------|--------------------------------------------------------------|--------------------------|-------------------------------------------------------------|
//! | [`ServerStart`] | [`ServerStart::parse`]                                       | the user name            | [`ServerStart::respond`], [`ServerStart::respond_with_nonce`] → [`ServerFirst`] |
//! | [`ServerFirst`] | [`ServerStart::respond`], [`ServerStart::respond_with_nonce`] | server-first-message     | [`ServerFirst::verify_client_final`] → [`ServerFinal`]      |
//! | [`ServerFinal`] | [`ServerFirst::verify_client_final`]                         | server-final-message, the authenticated user | done                                 |
//!
//! Every transition consumes its state, so a state cannot be used twice by mistake; every
//! failure is a [`ScramError`], after which the exchange is over.
//!
//! # Unknown users
//!
//! For a user it does not know, the server answers exactly as for one it does: [`Decoy`] derives
//! a salt (HMAC of a server secret and the user name, so the same on every attempt) and uses the
//! server's usual iteration count; the exchange then fails at [`ServerFirst::verify_client_final`]
//! with [`ScramError::AuthenticationFailed`], the same error as a wrong password. The decoy's
//! secret must survive restarts (see [`Decoy::secret`]), or a changing salt would give unknown
//! users away.
//!
//! # Strictness and limits
//!
//! Every peer message is parsed strictly: attributes in the RFC's order, every value non-empty,
//! base64 canonical, no NUL, a message at most [`MAX_MESSAGE_LEN`] bytes, a user name at most
//! [`MAX_USERNAME_LEN`] bytes, each nonce part printable ASCII without `,` and at most
//! [`MAX_NONCE_LEN`] bytes, iteration counts within [`MIN_ITERATIONS`]`..=`[`MAX_ITERATIONS`]
//! (so a hostile server cannot make a client hash for hours), salts within
//! [`MIN_SALT_LEN`]`..=`[`MAX_SALT_LEN`] bytes. The reserved mandatory extension `m=` is refused;
//! optional extensions (a letter other than those RFC 5802 defines, `=`, a value) are ignored.
//! Bad input is an error, never a panic.
//!
//! # Passwords and user names
//!
//! Passwords and user names are taken as their exact UTF-8 bytes: there is **no SASLprep**
//! (RFC 4013) normalisation. For printable ASCII, SASLprep changes nothing, so such passwords
//! interoperate exactly with any RFC-conforming peer (the RFC 7677 test vector is ASCII). A
//! non-ASCII password must be typed in the same Unicode form (e.g. NFC) when the verifier is made
//! and when logging in. An empty password is refused, and a user name may not be empty, contain
//! NUL, or exceed [`MAX_USERNAME_LEN`] bytes. Commas and `=` in user names are escaped on the wire
//! as `=2C` and `=3D`; [`ServerStart::user`] returns the unescaped name.

mod checks;
mod client;
mod crypto;
mod decoy;
mod grammar;
mod server;
mod verifier;

pub use client::{ClientFinal, ClientFirst};
pub use decoy::Decoy;
pub use server::{ServerFinal, ServerFirst, ServerStart};
pub use verifier::Verifier;

/// Length of SHA-256 output, and so of every key, proof and signature.
pub const KEY_LEN: usize = 32;
/// The fewest PBKDF2 iterations accepted (RFC 7677 §4's minimum).
pub const MIN_ITERATIONS: u32 = 4096;
/// The most PBKDF2 iterations accepted, from a peer or for a verifier.
pub const MAX_ITERATIONS: u32 = 10_000_000;
/// The longest peer message accepted, in bytes (the handshake's frame body limit).
pub const MAX_MESSAGE_LEN: usize = 4096;
/// The longest user name, in bytes of UTF-8, before `=2C`/`=3D` escaping.
pub const MAX_USERNAME_LEN: usize = 255;
/// The longest nonce part (the client's, and the part the server appends), in bytes.
pub const MAX_NONCE_LEN: usize = 256;
/// The shortest salt accepted, in bytes.
pub const MIN_SALT_LEN: usize = 1;
/// The longest salt accepted, in bytes.
pub const MAX_SALT_LEN: usize = 64;
/// Length of the salts [`Verifier::generate`] and [`Decoy`] make, in bytes.
pub const GENERATED_SALT_LEN: usize = 16;
/// The first byte of [`Verifier::encode`]'s output.
pub const VERIFIER_VERSION: u8 = 1;

/// What went wrong in a SCRAM exchange, or with a verifier. After any error the exchange is over.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ScramError {
    /// A peer message is longer than [`MAX_MESSAGE_LEN`].
    #[error("{message} is {len} bytes, over the limit of {max}")]
    MessageTooLong {
        /// Which message.
        message: &'static str,
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A peer message is empty.
    #[error("{message} is empty")]
    EmptyMessage {
        /// Which message.
        message: &'static str,
    },
    /// A peer message is not valid UTF-8.
    #[error("{message} is not valid UTF-8")]
    NotUtf8 {
        /// Which message.
        message: &'static str,
    },
    /// A peer message contains a NUL byte.
    #[error("{message} contains a NUL byte")]
    NulByte {
        /// Which message.
        message: &'static str,
    },
    /// The client-first-message's GS2 header (`n,,`, `y,,`) is malformed.
    #[error("client-first-message: malformed GS2 header: {reason}")]
    InvalidGs2Header {
        /// What is wrong.
        reason: &'static str,
    },
    /// The client asked for channel binding (`p=NAME`), which this implementation does not do.
    #[error("channel binding {name:?} requested, but channel binding is not supported (send \"n,,\")")]
    ChannelBindingNotSupported {
        /// The channel binding type the client named.
        name: String,
    },
    /// The client sent an authorization identity (`a=`), which this implementation does not take.
    #[error("authorization identities (a=) are not supported")]
    AuthzidNotSupported,
    /// An attribute is not `LETTER=VALUE` with a non-empty value.
    #[error("{message}: malformed attribute: {reason}")]
    MalformedAttribute {
        /// Which message.
        message: &'static str,
        /// What is wrong.
        reason: &'static str,
    },
    /// A mandatory attribute is missing: the message ended early.
    #[error("{message}: missing attribute {expected}=")]
    MissingAttribute {
        /// Which message.
        message: &'static str,
        /// The attribute that should have come next.
        expected: char,
    },
    /// Another attribute stands where a mandatory one should (the order is fixed).
    #[error("{message}: expected attribute {expected}=, found {found}=")]
    UnexpectedAttribute {
        /// Which message.
        message: &'static str,
        /// The attribute that should have come next.
        expected: char,
        /// The attribute found instead.
        found: char,
    },
    /// An attribute RFC 5802 defines stands in the place of an optional extension (a repeated
    /// attribute, or one after the proof).
    #[error("{message}: attribute {attribute}= is not allowed here")]
    MisplacedAttribute {
        /// Which message.
        message: &'static str,
        /// The attribute.
        attribute: char,
    },
    /// The peer sent the reserved mandatory extension `m=`, which no version of SCRAM defines.
    #[error("{message}: mandatory extension m= is not supported")]
    MandatoryExtension {
        /// Which message.
        message: &'static str,
    },
    /// A user name is empty, too long, contains NUL, or is badly escaped.
    #[error("invalid user name: {reason}")]
    InvalidUsername {
        /// What is wrong.
        reason: &'static str,
    },
    /// A nonce is empty, too long, or not printable ASCII without `,`.
    #[error("invalid nonce: {reason}")]
    InvalidNonce {
        /// What is wrong.
        reason: &'static str,
    },
    /// The nonce does not continue the exchange: the server's does not extend the client's, or
    /// the client-final-message's is not the server-first-message's.
    #[error("nonce mismatch: {reason}")]
    NonceMismatch {
        /// What is wrong.
        reason: &'static str,
    },
    /// An attribute's value is not canonical standard base64.
    #[error("{message}: attribute {attribute}= is not valid base64")]
    InvalidBase64 {
        /// Which message.
        message: &'static str,
        /// The attribute.
        attribute: char,
    },
    /// A proof or signature does not decode to [`KEY_LEN`] bytes.
    #[error("{message}: attribute {attribute}= decodes to {len} bytes, expected {expected}")]
    WrongLength {
        /// Which message.
        message: &'static str,
        /// The attribute.
        attribute: char,
        /// Its decoded length.
        len: usize,
        /// The length it must have.
        expected: usize,
    },
    /// A salt's length is outside [`MIN_SALT_LEN`]`..=`[`MAX_SALT_LEN`].
    #[error("salt of {len} bytes, must be {MIN_SALT_LEN} to {MAX_SALT_LEN}")]
    InvalidSaltLength {
        /// The salt's length.
        len: usize,
    },
    /// The server-first-message's `i=` is not a positive decimal number without leading zeros
    /// that fits in 32 bits.
    #[error("server-first-message: invalid iteration count: {reason}")]
    InvalidIterationCount {
        /// What is wrong.
        reason: &'static str,
    },
    /// An iteration count is outside [`MIN_ITERATIONS`]`..=`[`MAX_ITERATIONS`].
    #[error("iteration count {iterations} is outside {MIN_ITERATIONS}..={MAX_ITERATIONS}")]
    IterationsOutOfRange {
        /// The iteration count.
        iterations: u32,
    },
    /// The client-final-message's `c=` does not repeat the GS2 header of the client-first-message.
    #[error("client-final-message: channel binding data (c=) does not match the GS2 header")]
    ChannelBindingMismatch,
    /// The password is empty.
    #[error("the password is empty")]
    EmptyPassword,
    /// Server side: the client's proof is wrong: a wrong password, or a user the server does not
    /// know (deliberately the same error).
    #[error("authentication failed")]
    AuthenticationFailed,
    /// Client side: the server's signature is wrong, so the server does not hold this password's
    /// verifier (an impostor, or a different account).
    #[error("the server's signature does not match: the server could not prove it knows the password's verifier")]
    ServerSignatureMismatch,
    /// Client side: the server refused the authentication with `e=VALUE`.
    #[error("the server refused the authentication: {0}")]
    ServerError(String),
    /// An encoded verifier ends before a field is complete.
    #[error("encoded verifier truncated: {field} needs {needed} bytes, {available} left")]
    VerifierTruncated {
        /// The field being read.
        field: &'static str,
        /// Bytes the field needs.
        needed: usize,
        /// Bytes that were left.
        available: usize,
    },
    /// An encoded verifier has bytes after its salt.
    #[error("encoded verifier has {count} trailing bytes after the salt")]
    VerifierTrailingBytes {
        /// How many.
        count: usize,
    },
    /// An encoded verifier starts with a version byte this code does not know.
    #[error("encoded verifier has version {version}, expected {VERIFIER_VERSION}")]
    VerifierVersion {
        /// The version byte found.
        version: u8,
    },
    /// The operating system could not supply random bytes for a nonce, salt or secret.
    #[error("no random bytes from the operating system: {0}")]
    Random(String),
}

impl ScramError {
    /// The RFC 5802 `server-error-value` a server would send for this error in an
    /// `e=` server-final-message. [`ScramError::AuthenticationFailed`] is `invalid-proof`, for
    /// unknown users too.
    pub fn server_error_value(&self) -> &'static str {
        match self {
            ScramError::MessageTooLong { .. }
            | ScramError::EmptyMessage { .. }
            | ScramError::NotUtf8 { .. }
            | ScramError::NulByte { .. }
            | ScramError::InvalidGs2Header { .. }
            | ScramError::MalformedAttribute { .. }
            | ScramError::MissingAttribute { .. }
            | ScramError::UnexpectedAttribute { .. }
            | ScramError::MisplacedAttribute { .. }
            | ScramError::InvalidNonce { .. }
            | ScramError::InvalidBase64 { .. }
            | ScramError::WrongLength { .. } => "invalid-encoding",
            ScramError::MandatoryExtension { .. } => "extensions-not-supported",
            ScramError::ChannelBindingNotSupported { .. } => "channel-binding-not-supported",
            ScramError::ChannelBindingMismatch => "channel-bindings-dont-match",
            ScramError::InvalidUsername { .. } => "invalid-username-encoding",
            ScramError::AuthenticationFailed => "invalid-proof",
            _ => "other-error",
        }
    }

    /// The `e=VALUE` server-final-message a server may send for this error (see
    /// [`ScramError::server_error_value`]).
    pub fn server_error_message(&self) -> Vec<u8> {
        format!("e={}", self.server_error_value()).into_bytes()
    }
}

type Result<T, E = ScramError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests;
