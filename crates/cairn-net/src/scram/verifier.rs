//! What the server stores for a user: the [`Verifier`] (salt, iteration count, `StoredKey` and
//! `ServerKey`), made from a password or put together from its parts, and its versioned byte
//! encoding ([`Verifier::encode`], [`Verifier::decode`]).

use std::fmt;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use subtle::ConstantTimeEq;

use super::checks::{check_iterations, check_password, check_salt};
use super::crypto::{random_bytes, Keys};
use super::{Result, ScramError, GENERATED_SALT_LEN, KEY_LEN, VERIFIER_VERSION};
#[cfg(doc)]
use super::{MAX_ITERATIONS, MAX_SALT_LEN, MIN_ITERATIONS, MIN_SALT_LEN};

/// The fixed part of an encoded verifier: version, iterations, two keys, salt length.
pub(super) const VERIFIER_FIXED_LEN: usize = 1 + 4 + KEY_LEN + KEY_LEN + 1;

/// What the server stores for a user: salt, iteration count, `StoredKey` and `ServerKey`.
///
/// It cannot be used to log in (that needs `ClientKey`, which `StoredKey` is the hash of), but it
/// allows an offline dictionary attack and impersonating the server, so keep it private.
///
/// Encoded layout ([`Verifier::encode`], [`Verifier::decode`]), integers little-endian:
///
/// ```text
///  0        1              5             37            69         70
///  | version | iterations   | stored_key  | server_key  | salt_len | salt ...
///    u8 = 1    u32            32 bytes      32 bytes      u8         salt_len bytes (1..=64)
/// ```
#[derive(Clone)]
pub struct Verifier {
    pub(super) salt: Vec<u8>,
    pub(super) iterations: u32,
    pub(super) stored_key: [u8; KEY_LEN],
    pub(super) server_key: [u8; KEY_LEN],
}

impl Verifier {
    /// Makes the verifier of `password` with `salt` and `iterations` (PBKDF2, so this takes a
    /// while by design). Refuses an empty password, a salt outside
    /// [`MIN_SALT_LEN`]`..=`[`MAX_SALT_LEN`] bytes and iterations outside
    /// [`MIN_ITERATIONS`]`..=`[`MAX_ITERATIONS`]. The password is taken as its UTF-8 bytes (see
    /// the module doc).
    pub fn new(password: &str, salt: &[u8], iterations: u32) -> Result<Verifier> {
        check_password(password)?;
        check_salt(salt)?;
        check_iterations(iterations)?;
        let keys = Keys::derive(password, salt, iterations);
        Ok(Verifier {
            salt: salt.to_vec(),
            iterations,
            stored_key: keys.stored_key,
            server_key: keys.server_key,
        })
    }

    /// Makes the verifier of `password` with a random salt of [`GENERATED_SALT_LEN`] bytes.
    pub fn generate(password: &str, iterations: u32) -> Result<Verifier> {
        check_password(password)?;
        check_iterations(iterations)?;
        let salt: [u8; GENERATED_SALT_LEN] = random_bytes()?;
        Verifier::new(password, &salt, iterations)
    }

    /// Puts a verifier together from its parts (e.g. imported from another SCRAM-SHA-256 server),
    /// checking the salt's length and the iteration count.
    pub fn from_parts(
        salt: Vec<u8>,
        iterations: u32,
        stored_key: [u8; KEY_LEN],
        server_key: [u8; KEY_LEN],
    ) -> Result<Verifier> {
        check_salt(&salt)?;
        check_iterations(iterations)?;
        Ok(Verifier {
            salt,
            iterations,
            stored_key,
            server_key,
        })
    }

    /// The salt.
    pub fn salt(&self) -> &[u8] {
        &self.salt
    }

    /// The PBKDF2 iteration count.
    pub fn iterations(&self) -> u32 {
        self.iterations
    }

    /// `StoredKey = H(ClientKey)`.
    pub fn stored_key(&self) -> &[u8; KEY_LEN] {
        &self.stored_key
    }

    /// `ServerKey = HMAC(SaltedPassword, "Server Key")`.
    pub fn server_key(&self) -> &[u8; KEY_LEN] {
        &self.server_key
    }

    /// The verifier as bytes, in the layout of the type's doc.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(VERIFIER_FIXED_LEN + self.salt.len());
        out.push(VERIFIER_VERSION);
        out.extend_from_slice(&self.iterations.to_le_bytes());
        out.extend_from_slice(&self.stored_key);
        out.extend_from_slice(&self.server_key);
        // The salt's length is at most MAX_SALT_LEN (64), checked by every constructor.
        out.push(self.salt.len() as u8);
        out.extend_from_slice(&self.salt);
        out
    }

    /// Reads a verifier written by [`Verifier::encode`]: checks the version, that every field is
    /// complete before taking it, that nothing follows the salt, and the salt's length and the
    /// iteration count.
    pub fn decode(bytes: &[u8]) -> Result<Verifier> {
        let mut reader = Reader { bytes, pos: 0 };
        let [version] = reader.array::<1>("version")?;
        if version != VERIFIER_VERSION {
            return Err(ScramError::VerifierVersion { version });
        }
        let iterations = u32::from_le_bytes(reader.array("iteration count")?);
        let stored_key = reader.array("stored key")?;
        let server_key = reader.array("server key")?;
        let [salt_len] = reader.array::<1>("salt length")?;
        let salt = reader.take("salt", usize::from(salt_len))?.to_vec();
        let count = bytes.len() - reader.pos;
        if count != 0 {
            return Err(ScramError::VerifierTrailingBytes { count });
        }
        Verifier::from_parts(salt, iterations, stored_key, server_key)
    }
}

impl fmt::Debug for Verifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Verifier")
            .field("salt", &BASE64.encode(&self.salt))
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

/// Constant time in the keys.
impl PartialEq for Verifier {
    fn eq(&self, other: &Verifier) -> bool {
        let keys = self.stored_key.ct_eq(&other.stored_key) & self.server_key.ct_eq(&other.server_key);
        bool::from(keys) && self.iterations == other.iterations && self.salt == other.salt
    }
}

impl Eq for Verifier {}

/// A bounds-checked cursor over an encoded verifier.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, field: &'static str, needed: usize) -> Result<&'a [u8]> {
        let available = self.bytes.len() - self.pos;
        if available < needed {
            return Err(ScramError::VerifierTruncated {
                field,
                needed,
                available,
            });
        }
        let taken = &self.bytes[self.pos..self.pos + needed];
        self.pos += needed;
        Ok(taken)
    }

    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N]> {
        let mut out = [0; N];
        out.copy_from_slice(self.take(field, N)?);
        Ok(out)
    }
}
