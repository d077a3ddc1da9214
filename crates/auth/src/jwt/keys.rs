//! Public keys for JWT signatures: a JWKS (RFC 7517) or PEM public keys, made into BoringSSL
//! keys once, each bound to the algorithms its type can verify.

use boring::bn::BigNum;
use boring::ec::{EcGroup, EcKey};
use boring::nid::Nid;
use boring::pkey::{Id, PKey, Public};
use serde_json::Value;

/// The smallest RSA modulus accepted (RFC 7518 §3.3: 2048 bits or larger MUST be used).
const MIN_RSA_BITS: u32 = 2048;

/// What kind of key, and so which algorithms it may verify.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Rsa,
    P256,
    P384,
    Ed25519,
}

impl Kind {
    /// Whether a key of this kind verifies `alg` (the key type decides, never the token:
    /// an RSA key is never used for an ECDSA or HMAC `alg`).
    pub(crate) fn verifies(self, alg: &str) -> bool {
        matches!(
            (self, alg),
            (Kind::Rsa, "RS256" | "RS384" | "RS512" | "PS256" | "PS384")
                | (Kind::P256, "ES256")
                | (Kind::P384, "ES384")
                | (Kind::Ed25519, "EdDSA")
        )
    }
}

/// One verification key.
pub(crate) struct Key {
    pub(crate) kid: Option<String>,
    /// The JWK's `alg`, when it names one: the key verifies that algorithm only.
    pub(crate) alg: Option<String>,
    pub(crate) kind: Kind,
    pub(crate) pkey: PKey<Public>,
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Key")
            .field("kid", &self.kid)
            .field("alg", &self.alg)
            .field("kind", &self.kind)
            .finish()
    }
}

/// A set of keys (a JWKS, or a file of them).
#[derive(Debug, Default)]
pub(crate) struct KeySet {
    pub(crate) keys: Vec<Key>,
}

impl KeySet {
    /// The keys that may verify a token with `alg` and `kid`: the one with that `kid`, or,
    /// for a token without one, every key that fits the algorithm.
    pub(crate) fn candidates<'a>(
        &'a self,
        alg: &'a str,
        kid: Option<&'a str>,
    ) -> impl Iterator<Item = &'a Key> + 'a {
        self.keys.iter().filter(move |k| {
            k.kind.verifies(alg)
                && k.alg.as_deref().is_none_or(|a| a == alg)
                && match kid {
                    Some(kid) => k.kid.as_deref() == Some(kid),
                    None => true,
                }
        })
    }

    /// Whether a key has this `kid`.
    pub(crate) fn has_kid(&self, kid: &str) -> bool {
        self.keys.iter().any(|k| k.kid.as_deref() == Some(kid))
    }

    /// A file's keys: a JWKS (`{"keys": [...]}`), one JWK, or PEM public keys (or
    /// certificates, whose keys are taken).
    pub(crate) fn parse(bytes: &[u8]) -> Result<KeySet, String> {
        let text = std::str::from_utf8(bytes).map_err(|_| "not UTF-8 text".to_owned())?;
        if text.trim_start().starts_with('{') {
            return Self::from_jwks(text);
        }
        if text.contains("-----BEGIN") {
            return Self::from_pem(bytes);
        }
        Err("neither a JWKS (JSON) nor PEM".to_owned())
    }

    /// A JWKS document. Keys of a type or use Sluice does not verify with (`oct`, `enc`,
    /// other curves) are skipped; a set with none left is an error.
    pub(crate) fn from_jwks(text: &str) -> Result<KeySet, String> {
        let doc: Value = serde_json::from_str(text).map_err(|e| format!("JSON: {e}"))?;
        let list = match doc.get("keys") {
            Some(Value::Array(keys)) => keys.iter().collect::<Vec<_>>(),
            Some(_) => return Err("\"keys\" is not an array".to_owned()),
            None if doc.get("kty").is_some() => vec![&doc],
            None => return Err("no \"keys\" array".to_owned()),
        };
        let mut keys = Vec::new();
        let mut problems = Vec::new();
        for (i, jwk) in list.into_iter().enumerate() {
            match jwk_key(jwk) {
                Ok(Some(k)) => keys.push(k),
                Ok(None) => {}
                Err(e) => problems.push(format!("key {i}: {e}")),
            }
        }
        if keys.is_empty() {
            return Err(if problems.is_empty() {
                "no signature verification keys (RSA, P-256, P-384, Ed25519)".to_owned()
            } else {
                problems.join("; ")
            });
        }
        for p in problems {
            tracing::warn!("JWKS: {p}; that key is skipped");
        }
        Ok(KeySet { keys })
    }

    fn from_pem(bytes: &[u8]) -> Result<KeySet, String> {
        let mut keys = Vec::new();
        for block in pem_blocks(bytes) {
            let pkey = if block.contains("CERTIFICATE") {
                boring::x509::X509::from_pem(block.as_bytes())
                    .and_then(|c| c.public_key())
                    .map_err(|e| format!("a certificate: {e}"))?
            } else {
                PKey::public_key_from_pem(block.as_bytes())
                    .map_err(|e| format!("a public key: {e}"))?
            };
            keys.push(pem_key(pkey)?);
        }
        if keys.is_empty() {
            return Err("no PEM public key".to_owned());
        }
        Ok(KeySet { keys })
    }
}

/// Each `-----BEGIN …-----` … `-----END …-----` block of a PEM file.
fn pem_blocks(bytes: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(bytes);
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        if line.starts_with("-----BEGIN") {
            current = Some(String::new());
        }
        if let Some(b) = &mut current {
            b.push_str(line);
            b.push('\n');
            if line.starts_with("-----END") {
                blocks.extend(current.take());
            }
        }
    }
    blocks
}

fn pem_key(pkey: PKey<Public>) -> Result<Key, String> {
    let kind = match pkey.id() {
        Id::RSA => Kind::Rsa,
        Id::EC => {
            let ec = pkey.ec_key().map_err(|e| e.to_string())?;
            match ec.group().curve_name() {
                Some(Nid::X9_62_PRIME256V1) => Kind::P256,
                Some(Nid::SECP384R1) => Kind::P384,
                _ => return Err("an EC key on a curve other than P-256 and P-384".to_owned()),
            }
        }
        Id::ED25519 => Kind::Ed25519,
        _ => return Err("a key that is not RSA, EC or Ed25519".to_owned()),
    };
    check_rsa_size(kind, &pkey)?;
    Ok(Key {
        kid: None,
        alg: None,
        kind,
        pkey,
    })
}

fn check_rsa_size(kind: Kind, pkey: &PKey<Public>) -> Result<(), String> {
    if kind == Kind::Rsa && pkey.bits() < MIN_RSA_BITS {
        return Err(format!(
            "an RSA key of {} bits (at least {MIN_RSA_BITS} are required)",
            pkey.bits()
        ));
    }
    Ok(())
}

/// One JWK; `Ok(None)` for a key not for signatures Sluice verifies.
fn jwk_key(jwk: &Value) -> Result<Option<Key>, String> {
    let field = |name: &str| jwk.get(name).and_then(Value::as_str);
    if field("use").is_some_and(|u| u != "sig") {
        return Ok(None);
    }
    let b64 = |name: &str| -> Result<Vec<u8>, String> {
        let text = field(name).ok_or_else(|| format!("no \"{name}\""))?;
        b64url(text.as_bytes()).ok_or_else(|| format!("\"{name}\" is not base64url"))
    };
    let (kind, pkey) = match (field("kty"), field("crv")) {
        (Some("RSA"), _) => {
            let n = BigNum::from_slice(&b64("n")?).map_err(|e| e.to_string())?;
            let e = BigNum::from_slice(&b64("e")?).map_err(|e| e.to_string())?;
            let rsa = boring::rsa::Rsa::from_public_components(n, e).map_err(|e| e.to_string())?;
            (Kind::Rsa, PKey::from_rsa(rsa).map_err(|e| e.to_string())?)
        }
        (Some("EC"), Some(crv @ ("P-256" | "P-384"))) => {
            let (nid, kind) = if crv == "P-256" {
                (Nid::X9_62_PRIME256V1, Kind::P256)
            } else {
                (Nid::SECP384R1, Kind::P384)
            };
            let group = EcGroup::from_curve_name(nid).map_err(|e| e.to_string())?;
            let x = BigNum::from_slice(&b64("x")?).map_err(|e| e.to_string())?;
            let y = BigNum::from_slice(&b64("y")?).map_err(|e| e.to_string())?;
            let ec = EcKey::from_public_key_affine_coordinates(&group, &x, &y)
                .map_err(|e| format!("the point is not on {crv}: {e}"))?;
            (kind, PKey::from_ec_key(ec).map_err(|e| e.to_string())?)
        }
        (Some("OKP"), Some("Ed25519")) => {
            let x = b64("x")?;
            if x.len() != 32 {
                return Err("an Ed25519 key is 32 bytes".to_owned());
            }
            // SubjectPublicKeyInfo of id-Ed25519 (RFC 8410 §4) around the raw key.
            let mut der = vec![
                0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00,
            ];
            der.extend_from_slice(&x);
            let pkey = PKey::public_key_from_der(&der).map_err(|e| e.to_string())?;
            (Kind::Ed25519, pkey)
        }
        _ => return Ok(None),
    };
    check_rsa_size(kind, &pkey)?;
    let alg = field("alg").map(str::to_owned);
    if let Some(a) = &alg
        && !kind.verifies(a)
    {
        return Err(format!("\"alg\" {a} does not fit the key's type"));
    }
    Ok(Some(Key {
        kid: field("kid").map(str::to_owned),
        alg,
        kind,
        pkey,
    }))
}

/// Base64url without padding (RFC 7515 §2), refusing padding and other alphabets.
pub(super) fn b64url(text: &[u8]) -> Option<Vec<u8>> {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(text)
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_jwks_keeps_signature_keys_and_skips_others() {
        // RFC 7517 appendix A.1's public keys (an EC P-256 key and a 2048-bit RSA key), and
        // a symmetric key that must never be used.
        let jwks = r#"{"keys":[
          {"kty":"EC","crv":"P-256","x":"MKBCTNIcKUSDii11ySs3526iDZ8AiTo7Tu6KPAqv7D4","y":"4Etl6SRW2YiLUrN5vfvVHuhp7x8PxltmWWlbbM4IFyM","use":"enc","kid":"1"},
          {"kty":"EC","crv":"P-256","x":"MKBCTNIcKUSDii11ySs3526iDZ8AiTo7Tu6KPAqv7D4","y":"4Etl6SRW2YiLUrN5vfvVHuhp7x8PxltmWWlbbM4IFyM","kid":"ec"},
          {"kty":"RSA","n":"0vx7agoebGcQSuuPiLJXZptN9nndrQmbXEps2aiAFbWhM78LhWx4cbbfAAtVT86zwu1RK7aPFFxuhDR1L6tSoc_BJECPebWKRXjBZCiFV4n3oknjhMstn64tZ_2W-5JsGY4Hc5n9yBXArwl93lqt7_RN5w6Cf0h4QyQ5v-65YGjQR0_FDW2QvzqY368QQMicAtaSqzs8KJZgnYb9c7d0zgdAZHzu6qMQvRL5hajrn1n91CbOpbISD08qNLyrdkt-bFTWhAI4vMQFh6WeZu0fM4lFd2NcRwr3XPksINHaQ-G_xBniIqbw0Ls1jF44-csFCur-kEgU8awapJzKnqDKgw","e":"AQAB","alg":"RS256","kid":"2011-04-29"},
          {"kty":"oct","k":"AyM1SysPpbyDfgZld3umj1qzKObwVMkoqQ-EstJQLr_T-1qS0gZH75aKtMN3Yj0iPS4hcgUuTwjAzZr1Z9CAow","kid":"hmac"}
        ]}"#;
        let set = KeySet::from_jwks(jwks).unwrap();
        assert_eq!(set.keys.len(), 2);
        assert!(set.has_kid("ec") && set.has_kid("2011-04-29") && !set.has_kid("hmac"));
        assert_eq!(set.candidates("ES256", Some("ec")).count(), 1);
        // Algorithm confusion: the RSA key never verifies an ECDSA or HMAC token, and a key
        // with "alg" only that algorithm.
        assert_eq!(set.candidates("ES256", Some("2011-04-29")).count(), 0);
        assert_eq!(set.candidates("HS256", None).count(), 0);
        assert_eq!(set.candidates("PS256", Some("2011-04-29")).count(), 0);
        assert_eq!(set.candidates("RS256", None).count(), 1);
    }

    #[test]
    fn small_rsa_keys_and_off_curve_points_are_refused() {
        let small = boring::rsa::Rsa::generate(1024).unwrap();
        let pem = PKey::from_rsa(small).unwrap().public_key_to_pem().unwrap();
        let e = KeySet::parse(&pem).unwrap_err();
        assert!(e.contains("1024 bits"), "{e}");
        let bad_point = r#"{"kty":"EC","crv":"P-256","x":"MKBCTNIcKUSDii11ySs3526iDZ8AiTo7Tu6KPAqv7D4","y":"4Etl6SRW2YiLUrN5vfvVHuhp7x8PxltmWWlbbM4IFyA"}"#;
        assert!(KeySet::parse(bad_point.as_bytes()).is_err());
        assert!(KeySet::parse(b"hello").is_err());
    }
}
