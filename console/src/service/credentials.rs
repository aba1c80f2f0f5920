//! Secrets: API tokens (shown once, stored as SHA-256), passwords (argon2id) and app signing
//! secrets.

use argon2::Argon2;
use argon2::password_hash::{PasswordHasher, PasswordVerifier};
use sha2::{Digest, Sha256};

/// Every API token starts with this, so a leaked one is recognisable (e.g. by secret scanners).
pub const TOKEN_PREFIX: &str = "mthpt_";

/// `n` random bytes as lowercase hex.
pub fn random_hex(n: usize) -> String {
    (0..n)
        .map(|_| format!("{:02x}", rand::random::<u8>()))
        .collect()
}

/// A new API token value: the prefix and 256 random bits.
pub fn new_token() -> String {
    format!("{TOKEN_PREFIX}{}", random_hex(32))
}

/// A new app signing secret (256 random bits, hex).
pub fn new_app_secret() -> String {
    random_hex(32)
}

/// A new generated password (128 random bits, hex).
pub fn new_password() -> String {
    random_hex(16)
}

/// What the store keeps of a token: its SHA-256, hex. Tokens carry 256 random bits, so a fast
/// hash is enough (no dictionary to guess from), and lookups stay one indexed equality.
pub fn token_hash(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// Errors of password hashing.
#[derive(Debug, thiserror::Error)]
#[error("password hashing failed: {0}")]
pub struct HashError(String);

/// An argon2id PHC string for `password`, with a fresh salt.
pub fn hash_password(password: &str) -> Result<String, HashError> {
    Argon2::default()
        .hash_password(password.as_bytes())
        .map(|h| h.to_string())
        .map_err(|e| HashError(e.to_string()))
}

/// Whether `password` matches the PHC string `phc` (false for a malformed hash too).
pub fn verify_password(password: &str, phc: &str) -> bool {
    match argon2::password_hash::phc::PasswordHash::new(phc) {
        Ok(parsed) => Argon2::default()
            .verify_password(password.as_bytes(), &parsed)
            .is_ok(),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_prefixed_random_and_hashed_stably() {
        let a = new_token();
        let b = new_token();
        assert!(a.starts_with(TOKEN_PREFIX) && a.len() == TOKEN_PREFIX.len() + 64);
        assert_ne!(a, b);
        assert_eq!(token_hash(&a), token_hash(&a));
        assert_ne!(token_hash(&a), token_hash(&b));
    }

    #[test]
    fn a_password_verifies_only_against_its_own_hash() {
        let phc = hash_password("correct horse").unwrap();
        assert!(phc.starts_with("$argon2id$"));
        assert!(verify_password("correct horse", &phc));
        assert!(!verify_password("wrong horse", &phc));
        assert!(!verify_password("correct horse", "not a hash"));
    }
}
