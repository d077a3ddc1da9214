//! A compact JWS (RFC 7515 §7.1) carrying JWT claims (RFC 7519): split, its header read,
//! its signature verified with BoringSSL, its claims checked.

use super::keys::{Key, KeySet};
use crate::token_error::TokenError;
use boring::bn::BigNum;
use boring::ecdsa::EcdsaSig;
use boring::hash::{MessageDigest, hash};
use boring::rsa::Padding;
use boring::sign::{RsaPssSaltlen, Verifier};
use serde_json::{Map, Value};

/// The longest token read at most (`jwt.max_token_size` sets the route's, 8 KiB by
/// default: RFC 7519 sets none, NGINX's default header buffer is 8 KiB).
pub(crate) const MAX_TOKEN: usize = 64 * 1024;

/// A token split and its header read; not verified.
pub(crate) struct Parsed<'a> {
    pub(crate) alg: String,
    pub(crate) kid: Option<String>,
    /// `header.payload`, what the signature covers.
    signed: &'a [u8],
    payload: &'a [u8],
    signature: Vec<u8>,
}

impl<'a> Parsed<'a> {
    pub(crate) fn new(token: &'a [u8]) -> Result<Self, TokenError> {
        if token.len() > MAX_TOKEN {
            return Err(TokenError::Malformed);
        }
        let mut parts = token.split(|&b| b == b'.');
        let (Some(h), Some(p), Some(s), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(TokenError::Malformed);
        };
        let header: Map<String, Value> =
            serde_json::from_slice(&super::keys::b64url(h).ok_or(TokenError::Malformed)?)
                .map_err(|_| TokenError::Malformed)?;
        // RFC 7515 §4.1.11: a recipient MUST reject a token whose `crit` it does not
        // understand; Sluice understands none.
        if header.contains_key("crit") {
            return Err(TokenError::Algorithm);
        }
        let alg = match header.get("alg") {
            Some(Value::String(a)) => a.clone(),
            _ => return Err(TokenError::Malformed),
        };
        let kid = match header.get("kid") {
            None => None,
            Some(Value::String(k)) => Some(k.clone()),
            Some(_) => return Err(TokenError::Malformed),
        };
        Ok(Parsed {
            alg,
            kid,
            signed: &token[..h.len() + 1 + p.len()],
            payload: p,
            signature: super::keys::b64url(s).ok_or(TokenError::Malformed)?,
        })
    }

    /// The signature checked against `keys`; the claims when it verifies.
    pub(crate) fn verify(&self, keys: &KeySet) -> Result<Map<String, Value>, TokenError> {
        self.check_signature(keys)?;
        let claims = super::keys::b64url(self.payload).ok_or(TokenError::Malformed)?;
        match serde_json::from_slice(&claims) {
            Ok(Value::Object(map)) => Ok(map),
            _ => Err(TokenError::Malformed),
        }
    }

    /// Whether a key of `keys` that may verify this token's algorithm and `kid` verifies
    /// its signature.
    pub(crate) fn check_signature(&self, keys: &KeySet) -> Result<(), TokenError> {
        let mut any = false;
        for key in keys.candidates(&self.alg, self.kid.as_deref()) {
            any = true;
            if verify_with(key, &self.alg, self.signed, &self.signature) {
                return Ok(());
            }
        }
        Err(if any {
            TokenError::Signature
        } else {
            TokenError::UnknownKey
        })
    }
}

/// Whether `signature` over `signed` verifies with `key` under `alg` (already checked to
/// fit the key's type).
fn verify_with(key: &Key, alg: &str, signed: &[u8], signature: &[u8]) -> bool {
    let digest = match alg {
        "RS256" | "PS256" | "ES256" => MessageDigest::sha256(),
        "RS384" | "PS384" | "ES384" => MessageDigest::sha384(),
        "RS512" => MessageDigest::sha512(),
        "EdDSA" => {
            return Verifier::new_without_digest(&key.pkey)
                .and_then(|mut v| v.verify_oneshot(signature, signed))
                .unwrap_or(false);
        }
        _ => return false,
    };
    if alg.starts_with("ES") {
        // JWS carries R || S, each the curve's size (RFC 7518 §3.4); BoringSSL wants DER.
        let half = if alg == "ES256" { 32 } else { 48 };
        if signature.len() != 2 * half {
            return false;
        }
        let (Ok(r), Ok(s)) = (
            BigNum::from_slice(&signature[..half]),
            BigNum::from_slice(&signature[half..]),
        ) else {
            return false;
        };
        let (Ok(sig), Ok(ec), Ok(d)) = (
            EcdsaSig::from_private_components(r, s),
            key.pkey.ec_key(),
            hash(digest, signed),
        ) else {
            return false;
        };
        return sig.verify(&d, &ec).unwrap_or(false);
    }
    let Ok(mut v) = Verifier::new(digest, &key.pkey) else {
        return false;
    };
    if alg.starts_with("PS") {
        // RFC 7518 §3.5: MGF1 with the same hash, a salt as long as the hash.
        let set = v
            .set_rsa_padding(Padding::PKCS1_PSS)
            .and_then(|()| v.set_rsa_pss_saltlen(RsaPssSaltlen::DIGEST_LENGTH))
            .and_then(|()| v.set_rsa_mgf1_md(digest));
        if set.is_err() {
            return false;
        }
    }
    v.update(signed)
        .and_then(|()| v.verify(signature))
        .unwrap_or(false)
}

/// What the claims must satisfy.
pub(crate) struct Rules<'a> {
    pub(crate) issuer: Option<&'a str>,
    pub(crate) audiences: &'a [String],
    pub(crate) leeway_s: u64,
    /// Claims that must be present (`jwt.require`).
    pub(crate) required: &'a [String],
}

/// Checks `exp`, `nbf`, `iat`, `iss` and `aud` at `now` (Unix seconds). What it returns:
/// when the claims stop being valid (`exp` plus leeway), `None` without `exp`.
pub(crate) fn check_claims(
    claims: &Map<String, Value>,
    rules: &Rules<'_>,
    now: u64,
) -> Result<Option<u64>, TokenError> {
    let number = |name: &str| -> Result<Option<u64>, TokenError> {
        match claims.get(name) {
            None => Ok(None),
            Some(Value::Number(n)) => Ok(Some(
                n.as_u64()
                    .or_else(|| n.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64))
                    .ok_or(TokenError::Malformed)?,
            )),
            Some(_) => Err(TokenError::Malformed),
        }
    };
    if rules.required.iter().any(|c| !claims.contains_key(c)) {
        return Err(TokenError::MissingClaim);
    }
    let exp = number("exp")?.map(|e| e.saturating_add(rules.leeway_s));
    if exp.is_some_and(|e| now >= e) {
        return Err(TokenError::Expired);
    }
    if number("nbf")?.is_some_and(|nbf| nbf > now.saturating_add(rules.leeway_s)) {
        return Err(TokenError::NotYetValid);
    }
    if number("iat")?.is_some_and(|iat| iat > now.saturating_add(rules.leeway_s)) {
        return Err(TokenError::NotYetValid);
    }
    if let Some(iss) = rules.issuer
        && claims.get("iss").and_then(Value::as_str) != Some(iss)
    {
        return Err(TokenError::Issuer);
    }
    if !rules.audiences.is_empty() {
        let ok = match claims.get("aud") {
            Some(Value::String(a)) => rules.audiences.iter().any(|x| x == a),
            Some(Value::Array(list)) => list
                .iter()
                .filter_map(Value::as_str)
                .any(|a| rules.audiences.iter().any(|x| x == a)),
            _ => false,
        };
        if !ok {
            return Err(TokenError::Audience);
        }
    }
    Ok(exp)
}
