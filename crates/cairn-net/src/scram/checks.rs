//! The limits on values, wherever they come from (a caller, a peer's message, an encoded
//! verifier): passwords, salt lengths, iteration counts, user names and nonces.

use super::{
    Result, ScramError, MAX_ITERATIONS, MAX_NONCE_LEN, MAX_SALT_LEN, MAX_USERNAME_LEN, MIN_ITERATIONS, MIN_SALT_LEN,
};

pub(super) fn check_password(password: &str) -> Result<()> {
    if password.is_empty() {
        return Err(ScramError::EmptyPassword);
    }
    Ok(())
}

pub(super) fn check_salt(salt: &[u8]) -> Result<()> {
    if !(MIN_SALT_LEN..=MAX_SALT_LEN).contains(&salt.len()) {
        return Err(ScramError::InvalidSaltLength { len: salt.len() });
    }
    Ok(())
}

pub(super) fn check_iterations(iterations: u32) -> Result<()> {
    if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&iterations) {
        return Err(ScramError::IterationsOutOfRange { iterations });
    }
    Ok(())
}

pub(super) fn check_username(user: &str) -> Result<()> {
    let invalid = |reason| Err(ScramError::InvalidUsername { reason });
    if user.is_empty() {
        return invalid("empty");
    }
    if user.len() > MAX_USERNAME_LEN {
        return invalid("longer than 255 bytes");
    }
    if user.contains('\0') {
        return invalid("contains NUL");
    }
    Ok(())
}

/// `printable = %x21-2B / %x2D-7E`, 1 to [`MAX_NONCE_LEN`] bytes.
pub(super) fn check_nonce(nonce: &str) -> Result<()> {
    let invalid = |reason| Err(ScramError::InvalidNonce { reason });
    if nonce.is_empty() {
        return invalid("empty");
    }
    if nonce.len() > MAX_NONCE_LEN {
        return invalid("longer than 256 bytes");
    }
    if !nonce.bytes().all(|b| (0x21..=0x7e).contains(&b) && b != b',') {
        return invalid("not printable ASCII without ','");
    }
    Ok(())
}
