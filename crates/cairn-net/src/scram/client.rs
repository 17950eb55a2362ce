//! The client's side of the exchange: [`ClientFirst`] makes the client-first-message and, given
//! the server-first-message (parsed and checked here) and the password, the
//! client-final-message; [`ClientFinal`] checks the server-final-message, which authenticates
//! the server.

use std::fmt;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use subtle::ConstantTimeEq;

use super::checks::{check_iterations, check_nonce, check_password, check_salt, check_username};
use super::crypto::{auth_message, hmac, random_nonce, xor, Keys};
use super::grammar::{
    decode_key, escape_username, message_text, split_attribute, Attributes, Gs2Flag, SERVER_FINAL, SERVER_FIRST,
};
use super::{Result, ScramError, KEY_LEN};
#[cfg(doc)]
use super::{MAX_ITERATIONS, MAX_NONCE_LEN, MAX_USERNAME_LEN, MIN_ITERATIONS};

/// Client state after making the client-first-message; waits for the server-first-message.
#[derive(Clone)]
pub struct ClientFirst {
    gs2_header: &'static str,
    client_nonce: String,
    /// The whole client-first-message; the bare part starts after the GS2 header.
    message: String,
}

impl ClientFirst {
    /// Starts an exchange for `user` with a random nonce. The client-first-message is
    /// [`ClientFirst::message`]: `n,,n=USER,r=NONCE`, with `,` and `=` in the user name sent as
    /// `=2C` and `=3D`. Refuses an empty user name, one over [`MAX_USERNAME_LEN`] bytes, or one
    /// containing NUL.
    pub fn new(user: &str) -> Result<ClientFirst> {
        ClientFirst::with_nonce(user, &random_nonce()?)
    }

    /// [`ClientFirst::new`] with a given nonce (for tests and test vectors; a real client must use
    /// a fresh random nonce every time). The nonce must be 1 to [`MAX_NONCE_LEN`] bytes of
    /// printable ASCII without `,`.
    pub fn with_nonce(user: &str, client_nonce: &str) -> Result<ClientFirst> {
        ClientFirst::build(user, client_nonce, Gs2Flag::NoServerSupport)
    }

    pub(super) fn build(user: &str, client_nonce: &str, flag: Gs2Flag) -> Result<ClientFirst> {
        check_username(user)?;
        check_nonce(client_nonce)?;
        let gs2_header = flag.header();
        let message = format!("{gs2_header}n={},r={client_nonce}", escape_username(user));
        Ok(ClientFirst {
            gs2_header,
            client_nonce: client_nonce.to_owned(),
            message,
        })
    }

    /// The client-first-message to send.
    pub fn message(&self) -> &[u8] {
        self.message.as_bytes()
    }

    /// Takes the server-first-message and the password, and makes the client-final-message
    /// ([`ClientFinal::message`]). Checks that the server's nonce extends ours, the salt, and that
    /// the iteration count is within [`MIN_ITERATIONS`]`..=`[`MAX_ITERATIONS`] before hashing the
    /// password (PBKDF2: this takes a while by design).
    pub fn receive_server_first(self, server_first: &[u8], password: &str) -> Result<ClientFinal> {
        check_password(password)?;
        let parsed = parse_server_first(server_first, &self.client_nonce)?;
        let keys = Keys::derive(password, &parsed.salt, parsed.iterations);
        let without_proof = format!("c={},r={}", BASE64.encode(self.gs2_header), parsed.nonce);
        let bare = &self.message[self.gs2_header.len()..];
        let auth_message = auth_message(bare, parsed.text, &without_proof);
        let client_signature = hmac(&keys.stored_key, &[&auth_message]);
        let proof = xor(&keys.client_key, &client_signature);
        let server_signature = hmac(&keys.server_key, &[&auth_message]);
        Ok(ClientFinal {
            message: format!("{without_proof},p={}", BASE64.encode(proof)),
            server_signature,
        })
    }
}

impl fmt::Debug for ClientFirst {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientFirst").field("message", &self.message).finish()
    }
}

/// Client state after making the client-final-message; waits for the server-final-message.
#[derive(Clone)]
pub struct ClientFinal {
    message: String,
    server_signature: [u8; KEY_LEN],
}

impl ClientFinal {
    /// The client-final-message to send.
    pub fn message(&self) -> &[u8] {
        self.message.as_bytes()
    }

    /// Checks the server-final-message: `Ok(())` if it is `v=` with the expected
    /// `ServerSignature` (compared in constant time), so the server is authenticated too;
    /// [`ScramError::ServerError`] if it is `e=VALUE`; [`ScramError::ServerSignatureMismatch`] if
    /// the signature is wrong.
    pub fn verify_server_final(self, server_final: &[u8]) -> Result<()> {
        let text = message_text(SERVER_FINAL, server_final)?;
        let mut attributes = Attributes::new(SERVER_FINAL, text);
        let Some(first) = attributes.next_part() else {
            return Err(ScramError::MissingAttribute {
                message: SERVER_FINAL,
                expected: 'v',
            });
        };
        let (name, value) = split_attribute(SERVER_FINAL, first)?;
        match name {
            'v' => {
                let signature = decode_key(SERVER_FINAL, 'v', value)?;
                attributes.extensions()?;
                if bool::from(signature.ct_eq(&self.server_signature)) {
                    Ok(())
                } else {
                    Err(ScramError::ServerSignatureMismatch)
                }
            }
            'e' => {
                attributes.extensions()?;
                Err(ScramError::ServerError(value.to_owned()))
            }
            'm' => Err(ScramError::MandatoryExtension { message: SERVER_FINAL }),
            found => Err(ScramError::UnexpectedAttribute {
                message: SERVER_FINAL,
                expected: 'v',
                found,
            }),
        }
    }
}

impl fmt::Debug for ClientFinal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientFinal")
            .field("message", &self.message)
            .finish_non_exhaustive()
    }
}

/// The parts of a server-first-message the client uses.
#[derive(Debug)]
pub(super) struct ServerFirstParts<'a> {
    /// The whole message, for the AuthMessage.
    text: &'a str,
    /// The combined nonce.
    pub(super) nonce: &'a str,
    pub(super) salt: Vec<u8>,
    pub(super) iterations: u32,
}

/// Parses a server-first-message `[m=…,]r=NONCE,s=SALT,i=ITERATIONS[,extensions]`.
pub(super) fn parse_server_first<'a>(bytes: &'a [u8], client_nonce: &str) -> Result<ServerFirstParts<'a>> {
    let text = message_text(SERVER_FIRST, bytes)?;
    let mut attributes = Attributes::new(SERVER_FIRST, text);
    let nonce = attributes.expect('r')?;
    let Some(server_part) = nonce.strip_prefix(client_nonce) else {
        return Err(ScramError::NonceMismatch {
            reason: "the server's nonce does not start with the client's",
        });
    };
    if server_part.is_empty() {
        return Err(ScramError::NonceMismatch {
            reason: "the server did not append a nonce of its own",
        });
    }
    check_nonce(server_part)?;
    let salt_b64 = attributes.expect('s')?;
    let salt = BASE64.decode(salt_b64).map_err(|_| ScramError::InvalidBase64 {
        message: SERVER_FIRST,
        attribute: 's',
    })?;
    check_salt(&salt)?;
    let iterations = parse_iterations(attributes.expect('i')?)?;
    check_iterations(iterations)?;
    attributes.extensions()?;
    Ok(ServerFirstParts {
        text,
        nonce,
        salt,
        iterations,
    })
}

/// `posit-number = %x31-39 *DIGIT`, as a `u32`.
fn parse_iterations(value: &str) -> Result<u32> {
    let invalid = |reason| ScramError::InvalidIterationCount { reason };
    if !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid("not a decimal number"));
    }
    if value.starts_with('0') {
        return Err(invalid("leading zero"));
    }
    value.parse::<u32>().map_err(|_| invalid("too large for 32 bits"))
}
