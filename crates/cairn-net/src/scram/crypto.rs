//! The cryptography: the keys derived from a password (`SaltedPassword` by PBKDF2, then
//! `ClientKey`, `StoredKey` and `ServerKey`), HMAC-SHA-256, the proof's XOR, the `AuthMessage`
//! both sides sign, and the operating system's random bytes for nonces, salts and secrets.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

use super::{Result, ScramError, KEY_LEN};

/// Random bytes in a generated nonce (base64: 32 printable characters).
const NONCE_RANDOM_BYTES: usize = 24;

type HmacSha256 = Hmac<Sha256>;

/// The keys derived from a password.
pub(super) struct Keys {
    pub(super) client_key: [u8; KEY_LEN],
    pub(super) stored_key: [u8; KEY_LEN],
    pub(super) server_key: [u8; KEY_LEN],
}

impl Keys {
    pub(super) fn derive(password: &str, salt: &[u8], iterations: u32) -> Keys {
        let mut salted_password = [0; KEY_LEN];
        pbkdf2::pbkdf2_hmac::<Sha256>(password.as_bytes(), salt, iterations, &mut salted_password);
        let client_key = hmac(&salted_password, &[b"Client Key"]);
        Keys {
            client_key,
            stored_key: Sha256::digest(client_key).into(),
            server_key: hmac(&salted_password, &[b"Server Key"]),
        }
    }
}

pub(super) fn hmac(key: &[u8], parts: &[&[u8]]) -> [u8; KEY_LEN] {
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC takes keys of any length");
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().into()
}

pub(super) fn xor(a: &[u8; KEY_LEN], b: &[u8; KEY_LEN]) -> [u8; KEY_LEN] {
    std::array::from_fn(|i| a[i] ^ b[i])
}

pub(super) fn auth_message(client_first_bare: &str, server_first: &str, without_proof: &str) -> Vec<u8> {
    format!("{client_first_bare},{server_first},{without_proof}").into_bytes()
}

pub(super) fn random_bytes<const N: usize>() -> Result<[u8; N]> {
    let mut out = [0; N];
    getrandom::fill(&mut out).map_err(|e| ScramError::Random(e.to_string()))?;
    Ok(out)
}

/// A fresh nonce: base64 of random bytes, so printable ASCII without ','.
pub(super) fn random_nonce() -> Result<String> {
    Ok(BASE64.encode(random_bytes::<NONCE_RANDOM_BYTES>()?))
}
