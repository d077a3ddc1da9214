//! What a route's authentication did, counted: requests let through by each method, refusals
//! by reason, and the work behind them (signatures verified, JWKS fetches, file reloads).

use crate::token_error::TokenError;
use std::sync::atomic::{AtomicU64, Ordering};

/// Why a request was refused, for counters and the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// No credentials for any method.
    Missing,
    /// A verified client certificate whose subject or subjectAltNames the route does not
    /// accept (403).
    CertNotAllowed,
    /// A bearer token was refused.
    Token(TokenError),
    /// An API key that is not in the file.
    UnknownKey,
    /// Basic credentials that do not match (unknown user or wrong password).
    BadPassword,
    /// Basic credentials that are not `base64(user:password)`.
    MalformedBasic,
    /// The authorization service said 401 or 403.
    ForwardDenied,
    /// The authorization service failed (no answer, another status).
    ForwardError,
    /// The password-hashing pool was full (every thread busy, `[auth] hash_queue` checks
    /// waiting): 503 rather than a longer wait.
    HashQueueFull,
}

impl Reason {
    /// Every reason, in the order [`AuthCounters::refusals`] lists them.
    pub const ALL: [Reason; 18] = [
        Reason::Missing,
        Reason::CertNotAllowed,
        Reason::Token(TokenError::Malformed),
        Reason::Token(TokenError::Algorithm),
        Reason::Token(TokenError::UnknownKey),
        Reason::Token(TokenError::Signature),
        Reason::Token(TokenError::Expired),
        Reason::Token(TokenError::NotYetValid),
        Reason::Token(TokenError::Issuer),
        Reason::Token(TokenError::Audience),
        Reason::Token(TokenError::MissingClaim),
        Reason::Token(TokenError::NoKeys),
        Reason::UnknownKey,
        Reason::BadPassword,
        Reason::MalformedBasic,
        Reason::ForwardDenied,
        Reason::ForwardError,
        Reason::HashQueueFull,
    ];

    /// The reason's name on `/metrics` and in the log.
    pub fn name(self) -> &'static str {
        match self {
            Reason::Missing => "missing",
            Reason::CertNotAllowed => "cert_not_allowed",
            Reason::Token(TokenError::Malformed) => "jwt_malformed",
            Reason::Token(TokenError::Algorithm) => "jwt_algorithm",
            Reason::Token(TokenError::UnknownKey) => "jwt_unknown_key",
            Reason::Token(TokenError::Signature) => "jwt_signature",
            Reason::Token(TokenError::Expired) => "jwt_expired",
            Reason::Token(TokenError::NotYetValid) => "jwt_not_yet_valid",
            Reason::Token(TokenError::Issuer) => "jwt_issuer",
            Reason::Token(TokenError::Audience) => "jwt_audience",
            Reason::Token(TokenError::MissingClaim) => "jwt_missing_claim",
            Reason::Token(TokenError::NoKeys) => "jwt_no_keys",
            Reason::UnknownKey => "unknown_api_key",
            Reason::BadPassword => "bad_password",
            Reason::MalformedBasic => "malformed_basic",
            Reason::ForwardDenied => "forward_denied",
            Reason::ForwardError => "forward_error",
            Reason::HashQueueFull => "hash_queue_full",
        }
    }

    fn index(self) -> usize {
        Reason::ALL
            .iter()
            .position(|r| *r == self)
            .expect("ALL lists every reason")
    }
}

/// The methods, in the order they are tried and [`AuthCounters::allowed`] lists them.
pub const METHODS: [&str; 5] = ["cert", "jwt", "key", "basic", "forward"];

/// One route's counters.
#[derive(Debug, Default)]
pub struct AuthCounters {
    allowed: [AtomicU64; 5],
    refused: [AtomicU64; Reason::ALL.len()],
    /// Token signatures verified (the rest of the tokens accepted came from the cache).
    pub signatures_verified: AtomicU64,
    /// Basic credentials hashed (the rest came from the cache).
    pub passwords_hashed: AtomicU64,
    /// JWKS fetches that brought a set.
    pub jwks_fetched: AtomicU64,
    /// JWKS fetches that failed (the last good set stayed).
    pub jwks_failed: AtomicU64,
    /// Fetches for an unknown `kid` not made, one having been tried just before.
    pub jwks_refresh_limited: AtomicU64,
    /// Key and htpasswd files read again after they changed.
    pub files_reloaded: AtomicU64,
    /// Changed files that could not be used (the old contents stayed).
    pub files_refused: AtomicU64,
    /// Requests let through because the authorization service failed (`on_error = "allow"`).
    pub forward_failed_open: AtomicU64,
    /// Forward-auth decisions answered from the cache.
    pub forward_cached: AtomicU64,
}

impl AuthCounters {
    /// A request let through by method `i` of [`METHODS`].
    pub(crate) fn allow(&self, method: usize) {
        self.allowed[method].fetch_add(1, Ordering::Relaxed);
    }

    /// A request refused.
    pub(crate) fn refuse(&self, why: Reason) {
        self.refused[why.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// Requests let through, by method name.
    pub fn allowed(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        METHODS
            .iter()
            .zip(&self.allowed)
            .map(|(m, n)| (*m, n.load(Ordering::Relaxed)))
    }

    /// Requests refused, by reason name.
    pub fn refusals(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        Reason::ALL
            .iter()
            .zip(&self.refused)
            .map(|(r, n)| (r.name(), n.load(Ordering::Relaxed)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_reason_has_its_own_counter() {
        let c = AuthCounters::default();
        for (i, r) in Reason::ALL.iter().enumerate() {
            for _ in 0..=i {
                c.refuse(*r);
            }
        }
        for (i, (name, n)) in c.refusals().enumerate() {
            assert_eq!(n, i as u64 + 1, "{name}");
        }
        let names: std::collections::HashSet<_> = c.refusals().map(|(n, _)| n).collect();
        assert_eq!(names.len(), Reason::ALL.len());
    }
}
