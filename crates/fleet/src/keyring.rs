//! Private keys at rest in etcd: sealed with AES-256-GCM under the gateways' local keyring.
//!
//! etcd's data is readable by whoever reads etcd (its backups, its operators, any client with
//! read access to the prefix), so a certificate's private key is never stored in the clear.
//! The keyring file (`[config] keyring`, `ID HEX` lines) lives on the gateways only; its first
//! key seals, every key opens, so keys rotate by adding a new first line, re-pushing, and
//! dropping the old line once nothing sealed under it is left.
//!
//! Sealed form: `sluice-sealed:v1:ID:BASE64(nonce ‖ ciphertext ‖ tag)`, with the object's
//! etcd key as additional data, so a sealed key copied to another certificate does not open.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use boring::symm::{Cipher, decrypt_aead, encrypt_aead};

const PREFIX: &str = "sluice-sealed:v1:";
const NONCE: usize = 12;
const TAG: usize = 16;

/// The keys of `[config] keyring`; the first seals.
#[derive(Clone, Default)]
pub struct Keyring {
    keys: Vec<(String, [u8; 32])>,
}

impl std::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ids: Vec<&str> = self.keys.iter().map(|(id, _)| id.as_str()).collect();
        f.debug_struct("Keyring").field("ids", &ids).finish()
    }
}

impl Keyring {
    /// A keyring of these keys, the first sealing.
    pub fn new(keys: Vec<(String, [u8; 32])>) -> Self {
        Keyring { keys }
    }

    /// Whether it has a key to seal with.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Seals `plain` (a PEM private key) for the etcd key `context`.
    pub fn seal(&self, plain: &[u8], context: &str) -> Result<String, String> {
        let Some((id, key)) = self.keys.first() else {
            return Err("no keyring: set [config] keyring to a file of `ID HEX` lines (`echo \"k1 $(openssl rand -hex 32)\" > keyring; chmod 600 keyring`) to store private keys in etcd".into());
        };
        let mut nonce = [0u8; NONCE];
        boring::rand::rand_bytes(&mut nonce).map_err(|e| format!("random nonce: {e}"))?;
        let mut tag = [0u8; TAG];
        let sealed = encrypt_aead(
            Cipher::aes_256_gcm(),
            key,
            Some(&nonce),
            context.as_bytes(),
            plain,
            &mut tag,
        )
        .map_err(|e| format!("sealing: {e}"))?;
        let mut out = Vec::with_capacity(NONCE + sealed.len() + TAG);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&sealed);
        out.extend_from_slice(&tag);
        Ok(format!("{PREFIX}{id}:{}", STANDARD.encode(out)))
    }

    /// Opens a value made by [`Keyring::seal`] for the same `context`.
    pub fn open(&self, sealed: &str, context: &str) -> Result<Vec<u8>, String> {
        let rest = sealed
            .strip_prefix(PREFIX)
            .ok_or("not a sealed key (expected `sluice-sealed:v1:…`)")?;
        let (id, data) = rest.split_once(':').ok_or("malformed sealed key")?;
        let (_, key) = self.keys.iter().find(|(k, _)| k == id).ok_or_else(|| {
            format!("sealed with keyring key `{id}`, which this gateway's keyring does not have; add it to [config] keyring")
        })?;
        let data = STANDARD
            .decode(data)
            .map_err(|e| format!("malformed sealed key: {e}"))?;
        if data.len() < NONCE + TAG {
            return Err("malformed sealed key: too short".into());
        }
        let (nonce, rest) = data.split_at(NONCE);
        let (body, tag) = rest.split_at(rest.len() - TAG);
        decrypt_aead(
            Cipher::aes_256_gcm(),
            key,
            Some(nonce),
            context.as_bytes(),
            body,
            tag,
        )
        .map_err(|_| {
            format!("sealed key does not open with keyring key `{id}` (wrong key, or sealed for another object)")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring(ids: &[(&str, u8)]) -> Keyring {
        Keyring::new(
            ids.iter()
                .map(|(id, b)| (id.to_string(), [*b; 32]))
                .collect(),
        )
    }

    #[test]
    fn sealed_keys_open_with_any_key_of_the_ring_and_only_for_their_object() {
        let old = ring(&[("k1", 1)]);
        let sealed = old
            .seal(b"-----BEGIN PRIVATE KEY-----", "/sluice/certificates/a")
            .unwrap();
        assert!(sealed.starts_with("sluice-sealed:v1:k1:"));
        assert!(!sealed.contains("BEGIN"));
        // A rotated ring (new first key) still opens what the old key sealed.
        let rotated = ring(&[("k2", 2), ("k1", 1)]);
        assert_eq!(
            rotated.open(&sealed, "/sluice/certificates/a").unwrap(),
            b"-----BEGIN PRIVATE KEY-----"
        );
        assert!(
            rotated
                .seal(b"x", "c")
                .unwrap()
                .starts_with("sluice-sealed:v1:k2:")
        );
        // Another object's context, a ring without k1, a flipped byte: refused.
        assert!(rotated.open(&sealed, "/sluice/certificates/b").is_err());
        let err = ring(&[("k2", 2)])
            .open(&sealed, "/sluice/certificates/a")
            .unwrap_err();
        assert!(err.contains("`k1`"), "{err}");
        let mut bytes = sealed.into_bytes();
        let last = bytes.len() - 3;
        bytes[last] = if bytes[last] == b'A' { b'B' } else { b'A' };
        let tampered = String::from_utf8(bytes).unwrap();
        assert!(rotated.open(&tampered, "/sluice/certificates/a").is_err());
        // Same key for a different-content ring id: refused as another key.
        assert!(
            ring(&[("k1", 9)])
                .open(&rotated.seal(b"y", "c").unwrap(), "c")
                .is_err()
        );
        assert!(
            Keyring::default()
                .seal(b"x", "c")
                .unwrap_err()
                .contains("keyring")
        );
    }
}
