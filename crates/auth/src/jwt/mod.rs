//! `jwt = {...}`: bearer tokens verified against a file of keys or an issuer's JWKS, with a
//! cache of verified tokens (a token verified once is trusted until its expiry or until the
//! key set changes), so that a client repeating its token costs a lookup, not a signature.

pub(crate) mod jwks;
pub(crate) mod keys;
pub(crate) mod token;

use crate::counters::AuthCounters;
use crate::token_error::TokenError;
use crate::ttl_cache::TtlCache;
use crate::ttl_cache::unix_now;
use http::{HeaderName, HeaderValue};
use jwks::Jwks;
use keys::KeySet;
use serde_json::{Map, Value};
use sluice_config::JwtAuth;
use std::sync::Arc;
use token::{Parsed, Rules, check_claims};

/// How long a verified token without `exp` is remembered.
const NO_EXP_TTL: u64 = 300;

/// A token's verified identity: its subject and the headers its claims fill.
#[derive(Debug)]
pub(crate) struct Claims {
    /// `sub`, if the token has one.
    pub(crate) subject: Option<Arc<str>>,
    /// `claims_to_headers`' headers, in order.
    pub(crate) headers: Vec<(HeaderName, HeaderValue)>,
}

/// Where the keys come from.
enum Source {
    File(Arc<KeySet>),
    Remote(Arc<Jwks>),
}

/// One route's JWT verification.
pub(crate) struct JwtVerifier {
    pub(crate) config: Arc<JwtAuth>,
    source: Source,
    cache: TtlCache<Arc<Claims>>,
    counters: Arc<AuthCounters>,
}

impl std::fmt::Debug for JwtVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwtVerifier")
            .field("config", &self.config)
            .finish()
    }
}

impl JwtVerifier {
    /// Reads the key file or prepares the JWKS client (fetched once `start` runs).
    pub(crate) fn new(config: &Arc<JwtAuth>, counters: &Arc<AuthCounters>) -> Result<Self, String> {
        let source = match (&config.keys_file, &config.jwks_url) {
            (Some(path), _) => {
                let bytes =
                    std::fs::read(path).map_err(|e| format!("jwt keys {}: {e}", path.display()))?;
                let set = KeySet::parse(&bytes)
                    .map_err(|e| format!("jwt keys {}: {e}", path.display()))?;
                Source::File(Arc::new(set))
            }
            (None, Some(url)) => Source::Remote(Jwks::new(
                url.clone(),
                config.jwks_ca.as_deref(),
                counters.clone(),
            )?),
            (None, None) => return Err("jwt has neither keys nor jwks_url".to_owned()),
        };
        Ok(JwtVerifier {
            config: config.clone(),
            source,
            cache: TtlCache::new(config.cache_size),
            counters: counters.clone(),
        })
    }

    /// Starts fetching the JWKS, where there is one.
    pub(crate) fn start(&self) {
        if let Source::Remote(j) = &self.source {
            j.start();
        }
    }

    fn keys(&self) -> (Arc<KeySet>, u64) {
        match &self.source {
            Source::File(set) => (set.clone(), 0),
            Source::Remote(j) => j.current(),
        }
    }

    /// Verifies `token`: from the cache when it was verified before under the same keys,
    /// else its signature and claims (fetching the JWKS again for an unknown `kid`).
    pub(crate) async fn verify(&self, token: &[u8]) -> Result<Arc<Claims>, TokenError> {
        let now = unix_now();
        let (mut keys, mut generation) = self.keys();
        if let Some(hit) = self.cache.get(token, generation, now) {
            return Ok(hit);
        }
        if token.len() > self.config.max_token_size {
            return Err(TokenError::Malformed);
        }
        let parsed = Parsed::new(token)?;
        if !self.config.algorithms.contains(&parsed.alg) {
            return Err(TokenError::Algorithm);
        }
        if let Source::Remote(jwks) = &self.source {
            let missing = match &parsed.kid {
                Some(kid) => !keys.has_kid(kid),
                None => keys.keys.is_empty(),
            };
            if missing {
                jwks.refresh_for_unknown(generation).await;
                (keys, generation) = jwks.current();
                if keys.keys.is_empty() {
                    return Err(TokenError::NoKeys);
                }
            }
        }
        let claims = parsed.verify(&keys)?;
        self.counters
            .signatures_verified
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let rules = Rules {
            issuer: self.config.issuer.as_deref(),
            audiences: &self.config.audiences,
            leeway_s: self.config.leeway.as_secs(),
            required: &self.config.required_claims,
        };
        let until = check_claims(&claims, &rules, now)?.unwrap_or(now + NO_EXP_TTL);
        let verified = Arc::new(self.identity(&claims));
        self.cache.put(token, verified.clone(), until, generation);
        Ok(verified)
    }

    /// The subject and `claims_to_headers`' headers of verified `claims`. A claim that is
    /// not a string, number or boolean goes as its JSON text; one that cannot be a header
    /// value is left out.
    fn identity(&self, claims: &Map<String, Value>) -> Claims {
        let text = |v: &Value| match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let headers = self
            .config
            .claims_to_headers
            .iter()
            .filter_map(|(claim, header)| {
                let value = HeaderValue::try_from(text(claims.get(claim)?)).ok()?;
                Some((header.clone(), value))
            })
            .collect();
        Claims {
            subject: claims.get("sub").map(|v| Arc::from(text(v))),
            headers,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
