//! The server's side of the exchange: [`ServerStart`] parses the client-first-message and names
//! the user; [`ServerFirst`] makes the server-first-message from the user's [`Verifier`] (or a
//! [`Decoy`]'s) and checks the client's proof; [`ServerFinal`] holds the authenticated user and
//! the server-final-message.

use std::fmt;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use sha2::{Digest, Sha256};
use subtle::{Choice, ConstantTimeEq};

use super::checks::check_nonce;
use super::crypto::{auth_message, hmac, random_nonce, xor};
use super::grammar::{
    check_extension, decode_key, message_text, split_attribute, unescape_username, Attributes, Gs2Flag, CLIENT_FINAL,
    CLIENT_FIRST,
};
#[cfg(doc)]
use super::MAX_NONCE_LEN;
use super::{Decoy, Result, ScramError, Verifier, KEY_LEN};

/// Server state after parsing the client-first-message: knows the user name, waits for the caller
/// to look up the user's [`Verifier`].
#[derive(Clone)]
pub struct ServerStart {
    gs2_header: &'static str,
    user: String,
    client_nonce: String,
    client_first_bare: String,
}

impl ServerStart {
    /// Parses the client-first-message `GS2HEADER n=USER,r=NONCE[,extensions]`. The GS2 header
    /// must be `n,,` or `y,,`: channel binding (`p=`) and authorization identities (`a=`) are
    /// refused, as is the mandatory extension `m=`.
    pub fn parse(client_first: &[u8]) -> Result<ServerStart> {
        let text = message_text(CLIENT_FIRST, client_first)?;
        let gs2_error = |reason| ScramError::InvalidGs2Header { reason };
        let Some((flag, rest)) = text.split_once(',') else {
            return Err(gs2_error("no ',' after the channel binding flag"));
        };
        let flag = match flag {
            "n" => Gs2Flag::NoServerSupport,
            "y" => Gs2Flag::NoClientSupport,
            _ => {
                if let Some(name) = flag.strip_prefix("p=") {
                    let valid = !name.is_empty()
                        && name.len() <= 64
                        && name
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-');
                    if valid {
                        return Err(ScramError::ChannelBindingNotSupported { name: name.to_owned() });
                    }
                    return Err(gs2_error("malformed channel binding type"));
                }
                return Err(gs2_error("the channel binding flag must be n, y or p=TYPE"));
            }
        };
        let Some((authzid, bare)) = rest.split_once(',') else {
            return Err(gs2_error("no ',' after the authorization identity"));
        };
        if authzid.starts_with("a=") {
            return Err(ScramError::AuthzidNotSupported);
        }
        if !authzid.is_empty() {
            return Err(gs2_error("the authorization identity must be empty or a=NAME"));
        }
        let mut attributes = Attributes::new(CLIENT_FIRST, bare);
        let user = unescape_username(attributes.expect('n')?)?;
        let client_nonce = attributes.expect('r')?;
        check_nonce(client_nonce)?;
        attributes.extensions()?;
        Ok(ServerStart {
            gs2_header: flag.header(),
            user,
            client_nonce: client_nonce.to_owned(),
            client_first_bare: bare.to_owned(),
        })
    }

    /// The user name, unescaped: look up its verifier.
    pub fn user(&self) -> &str {
        &self.user
    }

    /// Makes the server-first-message `r=CNONCE SNONCE,s=SALT,i=ITERATIONS` with a random
    /// server nonce. `verifier` is the user's, or `None` for an unknown user: then the `decoy`
    /// supplies a salt and iteration count that look like a real user's, and the exchange fails at
    /// [`ServerFirst::verify_client_final`]. The caller must pass the verifier of
    /// [`ServerStart::user`].
    pub fn respond(self, verifier: Option<Verifier>, decoy: &Decoy) -> Result<ServerFirst> {
        let nonce = random_nonce()?;
        self.respond_with_nonce(verifier, decoy, &nonce)
    }

    /// [`ServerStart::respond`] with a given server nonce (for tests and test vectors; a real
    /// server must use a fresh random nonce every time). The nonce must be 1 to [`MAX_NONCE_LEN`]
    /// bytes of printable ASCII without `,`.
    pub fn respond_with_nonce(
        self,
        verifier: Option<Verifier>,
        decoy: &Decoy,
        server_nonce: &str,
    ) -> Result<ServerFirst> {
        check_nonce(server_nonce)?;
        let (verifier, known) = match verifier {
            Some(verifier) => (verifier, true),
            None => (decoy.verifier_for(&self.user), false),
        };
        let nonce = format!("{}{server_nonce}", self.client_nonce);
        let message = format!(
            "r={nonce},s={},i={}",
            BASE64.encode(&verifier.salt),
            verifier.iterations
        );
        Ok(ServerFirst {
            start: self,
            nonce,
            message,
            verifier,
            known,
        })
    }
}

impl fmt::Debug for ServerStart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerStart")
            .field("user", &self.user)
            .field("gs2_header", &self.gs2_header)
            .field("client_nonce", &self.client_nonce)
            .finish()
    }
}

/// Server state after making the server-first-message; waits for the client-final-message.
#[derive(Clone)]
pub struct ServerFirst {
    start: ServerStart,
    /// The combined nonce.
    nonce: String,
    message: String,
    verifier: Verifier,
    /// False for an unknown user (a [`Decoy`] verifier): the exchange must fail.
    known: bool,
}

impl ServerFirst {
    /// The server-first-message to send.
    pub fn message(&self) -> &[u8] {
        self.message.as_bytes()
    }

    /// The user name from the client-first-message.
    pub fn user(&self) -> &str {
        &self.start.user
    }

    /// Checks the client-final-message `c=GS2HEADER,r=NONCE[,extensions],p=PROOF`: `c=` must be
    /// the base64 of the client-first-message's GS2 header, the nonce exactly the
    /// server-first-message's, and the proof must recover a `ClientKey` whose hash is the
    /// verifier's `StoredKey` (compared in constant time). On success the [`ServerFinal`] holds
    /// `v=SERVERSIGNATURE`; a wrong password or an unknown user is
    /// [`ScramError::AuthenticationFailed`]. On any error the caller may send
    /// [`ScramError::server_error_message`].
    pub fn verify_client_final(self, client_final: &[u8]) -> Result<ServerFinal> {
        let text = message_text(CLIENT_FINAL, client_final)?;
        let mut attributes = Attributes::new(CLIENT_FINAL, text);
        let channel_binding = attributes.expect('c')?;
        let nonce = attributes.expect('r')?;
        // Optional extensions, then the proof, last.
        let (without_proof, proof) = loop {
            let start = attributes.pos;
            let Some(part) = attributes.next_part() else {
                return Err(ScramError::MissingAttribute {
                    message: CLIENT_FINAL,
                    expected: 'p',
                });
            };
            let (name, value) = split_attribute(CLIENT_FINAL, part)?;
            if name == 'p' {
                if attributes.next_part().is_some() {
                    return Err(ScramError::MisplacedAttribute {
                        message: CLIENT_FINAL,
                        attribute: 'p',
                    });
                }
                // `start` is past "c=…,r=…," so `start - 1` is the ',' before "p=".
                break (&text[..start - 1], value);
            }
            check_extension(CLIENT_FINAL, name)?;
        };
        let channel_binding = BASE64.decode(channel_binding).map_err(|_| ScramError::InvalidBase64 {
            message: CLIENT_FINAL,
            attribute: 'c',
        })?;
        let proof = decode_key(CLIENT_FINAL, 'p', proof)?;
        if channel_binding != self.start.gs2_header.as_bytes() {
            return Err(ScramError::ChannelBindingMismatch);
        }
        if nonce != self.nonce {
            return Err(ScramError::NonceMismatch {
                reason: "the client-final-message's nonce is not the server-first-message's",
            });
        }
        let auth_message = auth_message(&self.start.client_first_bare, &self.message, without_proof);
        let client_signature = hmac(&self.verifier.stored_key, &[&auth_message]);
        let client_key = xor(&proof, &client_signature);
        let stored_key: [u8; KEY_LEN] = Sha256::digest(client_key).into();
        let valid = stored_key.ct_eq(&self.verifier.stored_key) & Choice::from(u8::from(self.known));
        if !bool::from(valid) {
            return Err(ScramError::AuthenticationFailed);
        }
        let server_signature = hmac(&self.verifier.server_key, &[&auth_message]);
        Ok(ServerFinal {
            user: self.start.user,
            message: format!("v={}", BASE64.encode(server_signature)),
        })
    }
}

impl fmt::Debug for ServerFirst {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerFirst")
            .field("user", &self.start.user)
            .field("message", &self.message)
            .finish_non_exhaustive()
    }
}

/// Server state after a successful exchange: the user is authenticated, and the
/// server-final-message lets the client authenticate the server.
#[derive(Clone, Debug)]
pub struct ServerFinal {
    user: String,
    message: String,
}

impl ServerFinal {
    /// The authenticated user's name.
    pub fn user(&self) -> &str {
        &self.user
    }

    /// The server-final-message to send: `v=SERVERSIGNATURE`.
    pub fn message(&self) -> &[u8] {
        self.message.as_bytes()
    }
}
