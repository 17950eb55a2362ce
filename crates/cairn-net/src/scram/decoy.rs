//! Unknown users: the [`Decoy`] the server answers with for a user it does not know, so that the
//! exchange looks like a real user's (a salt that is the same on every attempt, the usual
//! iteration count) and then fails like a wrong password.

use std::fmt;

use super::checks::check_iterations;
use super::crypto::{hmac, random_bytes};
#[cfg(doc)]
use super::ScramError;
use super::{Result, Verifier, GENERATED_SALT_LEN, KEY_LEN};

/// How the server answers for users it does not know: a salt derived from a secret and the user
/// name (the same on every attempt, like a real user's), the server's usual iteration count, and
/// an exchange that always fails at the final step with [`ScramError::AuthenticationFailed`].
#[derive(Clone)]
pub struct Decoy {
    secret: [u8; KEY_LEN],
    iterations: u32,
}

impl Decoy {
    /// A decoy with this secret and iteration count. Use the iteration count new verifiers are
    /// made with, so that decoys look like real users.
    pub fn new(secret: [u8; KEY_LEN], iterations: u32) -> Result<Decoy> {
        check_iterations(iterations)?;
        Ok(Decoy { secret, iterations })
    }

    /// A decoy with a random secret. Store [`Decoy::secret`] and use [`Decoy::new`] afterwards:
    /// a secret that changes on restart changes the unknown users' salts, which gives them away.
    pub fn generate(iterations: u32) -> Result<Decoy> {
        Decoy::new(random_bytes()?, iterations)
    }

    /// The secret the salts are derived from.
    pub fn secret(&self) -> &[u8; KEY_LEN] {
        &self.secret
    }

    /// The iteration count announced for unknown users.
    pub fn iterations(&self) -> u32 {
        self.iterations
    }

    /// A verifier for `user` that no password matches in practice (and that is refused anyway).
    pub(super) fn verifier_for(&self, user: &str) -> Verifier {
        // User names contain no NUL, so "label \0 user" is unambiguous.
        let derive = |label: &[u8]| hmac(&self.secret, &[label, b"\0", user.as_bytes()]);
        let salt = derive(b"cairn scram decoy salt")[..GENERATED_SALT_LEN].to_vec();
        Verifier {
            salt,
            iterations: self.iterations,
            stored_key: derive(b"cairn scram decoy stored key"),
            server_key: derive(b"cairn scram decoy server key"),
        }
    }
}

impl fmt::Debug for Decoy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Decoy")
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}
