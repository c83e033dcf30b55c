//! Roles: who may log in, and the SCRAM-SHA-256 verifier that proves it.
//!
//! A password is never stored. What is stored is PostgreSQL's verifier,
//! `SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>` (RFC 5802,
//! 7677): enough to check a client's proof, not enough to log in with.

use std::num::NonZeroU32;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use ring::rand::{SecureRandom, SystemRandom};
use ring::{digest, hmac, pbkdf2};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The bootstrap superuser, whose password comes from the node's
/// configuration.
pub const BOOTSTRAP_ROLE: &str = "weir";

/// A persisted role.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoleDef {
    /// From the catalog's id sequence: the role's oid in `pg_roles`.
    pub id: u64,
    pub name: String,
    pub superuser: bool,
    pub login: bool,
    /// The SCRAM verifier; `None` for a role without a password, which
    /// cannot log in while passwords are checked.
    pub verifier: Option<String>,
}

/// PBKDF2 rounds for new verifiers: PostgreSQL's `scram_iterations` default.
pub const ITERATIONS: u32 = 4096;

const SALT_BYTES: usize = 16;
const KEY_BYTES: usize = 32;

/// The parts of a SCRAM-SHA-256 verifier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verifier {
    pub iterations: NonZeroU32,
    pub salt: Vec<u8>,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
}

impl Verifier {
    /// A verifier for `password` with a fresh random salt.
    pub fn new(password: &str) -> Result<Verifier> {
        let mut salt = vec![0; SALT_BYTES];
        SystemRandom::new()
            .fill(&mut salt)
            .map_err(|_| Error::Internal("the system random source failed".into()))?;
        let iterations = NonZeroU32::new(ITERATIONS).expect("a nonzero constant");
        Ok(Verifier::with_salt(password, salt, iterations))
    }

    /// The verifier of `password` under a given salt and iteration count.
    pub fn with_salt(password: &str, salt: Vec<u8>, iterations: NonZeroU32) -> Verifier {
        let salted = salted_password(password, &salt, iterations);
        let client_key = hmac_sha256(&salted, b"Client Key");
        Verifier {
            iterations,
            stored_key: digest::digest(&digest::SHA256, &client_key)
                .as_ref()
                .to_vec(),
            server_key: hmac_sha256(&salted, b"Server Key"),
            salt,
        }
    }

    /// Whether `password` is the one this verifier was made from.
    pub fn matches(&self, password: &str) -> bool {
        let again = Verifier::with_salt(password, self.salt.clone(), self.iterations);
        same_bytes(&again.stored_key, &self.stored_key)
    }

    /// Read a verifier in PostgreSQL's text form.
    pub fn parse(text: &str) -> Option<Verifier> {
        let rest = text.strip_prefix("SCRAM-SHA-256$")?;
        let (params, keys) = rest.split_once('$')?;
        let (iterations, salt) = params.split_once(':')?;
        let (stored_key, server_key) = keys.split_once(':')?;
        let verifier = Verifier {
            iterations: iterations.parse().ok()?,
            salt: STANDARD.decode(salt).ok()?,
            stored_key: STANDARD.decode(stored_key).ok()?,
            server_key: STANDARD.decode(server_key).ok()?,
        };
        let whole =
            verifier.stored_key.len() == KEY_BYTES && verifier.server_key.len() == KEY_BYTES;
        whole.then_some(verifier)
    }
}

impl std::fmt::Display for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "SCRAM-SHA-256${}:{}${}:{}",
            self.iterations,
            STANDARD.encode(&self.salt),
            STANDARD.encode(&self.stored_key),
            STANDARD.encode(&self.server_key)
        )
    }
}

/// RFC 5802's `Hi(Normalize(password), salt, i)`. Passwords are used as
/// their bytes: PostgreSQL falls back to that too when SASLprep refuses a
/// password, and clients send ASCII passwords unchanged either way.
fn salted_password(password: &str, salt: &[u8], iterations: NonZeroU32) -> [u8; KEY_BYTES] {
    let mut out = [0; KEY_BYTES];
    pbkdf2::derive(
        pbkdf2::PBKDF2_HMAC_SHA256,
        iterations,
        salt,
        password.as_bytes(),
        &mut out,
    );
    out
}

/// Whether two keys are equal, in a time that does not depend on where
/// they differ.
pub fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// HMAC-SHA-256 of `message` under `key`.
pub fn hmac_sha256(key: &[u8], message: &[u8]) -> Vec<u8> {
    let key = hmac::Key::new(hmac::HMAC_SHA256, key);
    hmac::sign(&key, message).as_ref().to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_verifier_round_trips_and_checks_its_password() {
        let verifier = Verifier::new("pencil").expect("verifier");
        let text = verifier.to_string();
        assert!(text.starts_with("SCRAM-SHA-256$4096:"), "{text}");
        assert!(!text.contains("pencil"));
        let parsed = Verifier::parse(&text).expect("parses");
        assert_eq!(parsed, verifier);
        assert!(parsed.matches("pencil"));
        assert!(!parsed.matches("pen"));
    }

    #[test]
    fn two_verifiers_of_one_password_differ_by_salt() {
        let a = Verifier::new("pencil").expect("verifier");
        let b = Verifier::new("pencil").expect("verifier");
        assert_ne!(a.to_string(), b.to_string());
    }

    /// RFC 7677's example: user "user", password "pencil".
    #[test]
    fn keys_match_the_rfc_example() {
        let salt = STANDARD.decode("W22ZaJ0SNY7soEsUEjb6gQ==").expect("salt");
        let iterations = NonZeroU32::new(4096).expect("nonzero");
        let verifier = Verifier::with_salt("pencil", salt, iterations);
        let salted = salted_password("pencil", &verifier.salt, iterations);
        let client_key = hmac_sha256(&salted, b"Client Key");
        let auth_message = "n=user,r=rOprNGfwEbeRWgbNEkqO,\
            r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
            s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096,\
            c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
        let signature = hmac_sha256(&verifier.stored_key, auth_message.as_bytes());
        let proof: Vec<u8> = client_key
            .iter()
            .zip(signature)
            .map(|(a, b)| a ^ b)
            .collect();
        assert_eq!(
            STANDARD.encode(proof),
            "dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        let server = hmac_sha256(&verifier.server_key, auth_message.as_bytes());
        assert_eq!(
            STANDARD.encode(server),
            "6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
        );
    }
}
