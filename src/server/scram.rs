//! The server side of SCRAM-SHA-256 (RFC 5802, RFC 7677), as PostgreSQL
//! runs it: two round trips, checked against a stored verifier.
//!
//! ```text
//! client-first  n,,n=<ignored>,r=<client nonce>
//! server-first  r=<client nonce><server nonce>,s=<salt>,i=<iterations>
//! client-final  c=<base64 of "n,,">,r=<both nonces>,p=<proof>
//! server-final  v=<server signature>
//! ```
//!
//! The user name is the startup packet's, as in PostgreSQL (libpq sends an
//! empty one here). An unknown user gets a made-up salt, stable per name,
//! and the same failure as a wrong password, so that the exchange does not
//! tell which names exist.

use std::sync::LazyLock;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use ring::digest;
use ring::rand::{SecureRandom, SystemRandom};

use crate::catalog::Verifier;
use crate::catalog::role::{hmac_sha256, same_bytes};

/// Why an exchange failed.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// A message that is not SCRAM: a protocol violation (08P01).
    Malformed(&'static str),
    /// The proof did not match, or the user has no verifier (28P01).
    Failed,
}

/// What the server remembers between its first message and the client's last.
#[derive(Debug)]
pub struct Pending {
    client_first_bare: String,
    server_first: String,
    gs2_header: String,
    nonce: String,
    /// `None` for a user who cannot succeed: the exchange runs to its end anyway.
    verifier: Option<Verifier>,
}

const CLIENT_NONCE_MAX: usize = 256;

/// Answer the client-first message: the server-first message to send.
pub fn server_first(
    client_first: &[u8],
    user: &str,
    verifier: Option<Verifier>,
) -> Result<(String, Pending), Refusal> {
    let text = std::str::from_utf8(client_first).map_err(|_| Refusal::Malformed("not UTF-8"))?;
    let (gs2_header, bare) = split_gs2_header(text)?;
    let client_nonce = client_nonce(bare)?;
    let nonce = format!("{client_nonce}{}", random_nonce()?);
    let (salt, iterations) = match &verifier {
        Some(v) => (v.salt.clone(), v.iterations.get()),
        None => (mock_salt(user), crate::catalog::role::ITERATIONS),
    };
    let server_first = format!("r={nonce},s={},i={iterations}", STANDARD.encode(salt));
    let pending = Pending {
        client_first_bare: bare.to_string(),
        server_first: server_first.clone(),
        gs2_header: gs2_header.to_string(),
        nonce,
        verifier,
    };
    Ok((server_first, pending))
}

impl Pending {
    /// Check the client-final message: the server-final message to send.
    pub fn server_final(self, client_final: &[u8]) -> Result<String, Refusal> {
        let text =
            std::str::from_utf8(client_final).map_err(|_| Refusal::Malformed("not UTF-8"))?;
        let (without_proof, proof) = text
            .rsplit_once(",p=")
            .ok_or(Refusal::Malformed("client-final without a proof"))?;
        let mut attributes = without_proof.split(',');
        let binding = attributes
            .next()
            .and_then(|a| a.strip_prefix("c="))
            .ok_or(Refusal::Malformed("client-final without channel binding"))?;
        if STANDARD.decode(binding).ok().as_deref() != Some(self.gs2_header.as_bytes()) {
            return Err(Refusal::Malformed("channel binding does not match"));
        }
        let nonce = attributes
            .next()
            .and_then(|a| a.strip_prefix("r="))
            .ok_or(Refusal::Malformed("client-final without a nonce"))?;
        if nonce != self.nonce {
            return Err(Refusal::Malformed("nonce does not match"));
        }
        let proof = STANDARD
            .decode(proof)
            .map_err(|_| Refusal::Malformed("proof is not base64"))?;
        let verifier = self.verifier.as_ref().ok_or(Refusal::Failed)?;
        let auth_message = format!(
            "{},{},{without_proof}",
            self.client_first_bare, self.server_first
        );
        if !proof_holds(verifier, &auth_message, &proof) {
            return Err(Refusal::Failed);
        }
        let signature = hmac_sha256(&verifier.server_key, auth_message.as_bytes());
        Ok(format!("v={}", STANDARD.encode(signature)))
    }
}

/// `ClientKey = proof XOR HMAC(StoredKey, AuthMessage)`; the proof holds
/// when `H(ClientKey)` is the stored key.
fn proof_holds(verifier: &Verifier, auth_message: &str, proof: &[u8]) -> bool {
    let signature = hmac_sha256(&verifier.stored_key, auth_message.as_bytes());
    if proof.len() != signature.len() {
        return false;
    }
    let client_key: Vec<u8> = proof.iter().zip(&signature).map(|(a, b)| a ^ b).collect();
    let stored = digest::digest(&digest::SHA256, &client_key);
    same_bytes(stored.as_ref(), &verifier.stored_key)
}

/// `n,,` or `y,,` and the rest. A client asking for channel binding
/// (`p=`) was not offered it; an authorization identity is refused, as in
/// PostgreSQL.
fn split_gs2_header(text: &str) -> Result<(&str, &str), Refusal> {
    let header_len = match text.as_bytes() {
        [b'n' | b'y', b',', b',', ..] => 3,
        [b'p', ..] => return Err(Refusal::Malformed("channel binding was not offered")),
        _ => {
            return Err(Refusal::Malformed(
                "client-first without a valid GS2 header",
            ));
        }
    };
    Ok(text.split_at(header_len))
}

/// The nonce of `n=<user>,r=<nonce>[,extensions]`.
fn client_nonce(bare: &str) -> Result<&str, Refusal> {
    let mut attributes = bare.split(',');
    let user = attributes.next().unwrap_or_default();
    if !user.starts_with("n=") {
        return Err(Refusal::Malformed("client-first without a user name"));
    }
    let nonce = attributes
        .next()
        .and_then(|a| a.strip_prefix("r="))
        .ok_or(Refusal::Malformed("client-first without a nonce"))?;
    let printable = nonce.bytes().all(|b| (0x21..=0x7e).contains(&b));
    if nonce.is_empty() || nonce.len() > CLIENT_NONCE_MAX || !printable {
        return Err(Refusal::Malformed("client-first with an invalid nonce"));
    }
    if attributes.next().is_some() {
        return Err(Refusal::Malformed("SCRAM extensions are not supported"));
    }
    Ok(nonce)
}

fn random_nonce() -> Result<String, Refusal> {
    let mut bytes = [0u8; 18];
    SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| Refusal::Malformed("the system random source failed"))?;
    Ok(STANDARD.encode(bytes))
}

/// A salt for a user without a verifier: derived from the name and a
/// secret of this process, so that asking twice gives the same answer.
fn mock_salt(user: &str) -> Vec<u8> {
    static SECRET: LazyLock<[u8; 32]> = LazyLock::new(|| {
        let mut secret = [0u8; 32];
        // Without randomness the salt is still stable per name, which is all
        // it must be.
        let _ = SystemRandom::new().fill(&mut secret);
        secret
    });
    hmac_sha256(SECRET.as_ref(), user.as_bytes())[..16].to_vec()
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;

    use super::*;

    /// A client's side of the exchange, as RFC 5802 defines it.
    fn client_final(password: &str, client_first_bare: &str, server_first: &str) -> String {
        let mut fields = server_first.split(',');
        let nonce = &fields.next().expect("nonce")[2..];
        let salt = STANDARD
            .decode(&fields.next().expect("salt")[2..])
            .expect("base64 salt");
        let iterations: u32 = fields.next().expect("iterations")[2..]
            .parse()
            .expect("a number");
        let iterations = NonZeroU32::new(iterations).expect("nonzero");
        let mine = Verifier::with_salt(password, salt.clone(), iterations);
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("{client_first_bare},{server_first},{without_proof}");
        let signature = hmac_sha256(&mine.stored_key, auth_message.as_bytes());
        let mut salted = [0u8; 32];
        ring::pbkdf2::derive(
            ring::pbkdf2::PBKDF2_HMAC_SHA256,
            iterations,
            &salt,
            password.as_bytes(),
            &mut salted,
        );
        let client_key = hmac_sha256(&salted, b"Client Key");
        let proof: Vec<u8> = client_key
            .iter()
            .zip(signature)
            .map(|(a, b)| a ^ b)
            .collect();
        format!("{without_proof},p={}", STANDARD.encode(proof))
    }

    fn exchange(password: &str, verifier: Option<Verifier>) -> Result<String, Refusal> {
        let bare = "n=,r=fyko+d2lbbFgONRv9qkxdawL";
        let (first, pending) = server_first(format!("n,,{bare}").as_bytes(), "u", verifier)?;
        assert!(first.starts_with("r=fyko+d2lbbFgONRv9qkxdawL"), "{first}");
        pending.server_final(client_final(password, bare, &first).as_bytes())
    }

    #[test]
    fn the_right_password_passes_and_a_wrong_one_fails() {
        let verifier = Verifier::new("pencil").expect("verifier");
        let signature = exchange("pencil", Some(verifier.clone())).expect("accepted");
        assert!(signature.starts_with("v="), "{signature}");
        assert_eq!(exchange("crayon", Some(verifier)), Err(Refusal::Failed));
    }

    #[test]
    fn an_unknown_user_fails_like_a_wrong_password_with_a_stable_salt() {
        assert_eq!(exchange("pencil", None), Err(Refusal::Failed));
        let first = |user| server_first(b"n,,n=,r=abc", user, None).expect("first").0;
        let salt = |message: String| message.split(',').nth(1).map(str::to_string);
        assert_eq!(salt(first("ghost")), salt(first("ghost")));
        assert_ne!(salt(first("ghost")), salt(first("spirit")));
    }

    #[test]
    fn malformed_messages_are_refused() {
        for bad in [
            &b"x"[..],
            b"p=tls-server-end-point,,n=,r=a",
            b"n,,r=a",
            b"n,,n=,r=",
        ] {
            assert!(
                matches!(server_first(bad, "u", None), Err(Refusal::Malformed(_))),
                "{bad:?}"
            );
        }
        let (_, pending) = server_first(b"n,,n=,r=abc", "u", None).expect("first");
        assert!(matches!(
            pending.server_final(b"c=biws,r=other,p=AAAA"),
            Err(Refusal::Malformed(_))
        ));
    }
}
