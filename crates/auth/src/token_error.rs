//! Why a bearer token was refused: the JWT verifier's answer and a reason the counters
//! count, in a module of its own so that neither imports the other for it.

/// Why a token was refused (RFC 6750 §3.1's `invalid_token`, with the reason for the log
/// and the counters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenError {
    /// Not three base64url parts of JSON.
    Malformed,
    /// `alg` is not one the route accepts (`none`, HMAC, or not listed), or has `crit`.
    Algorithm,
    /// No key with the token's `kid` (after a refresh) or for its algorithm.
    UnknownKey,
    /// The signature does not verify.
    Signature,
    /// Past `exp`.
    Expired,
    /// Before `nbf`, or issued in the future.
    NotYetValid,
    /// `iss` is not the issuer.
    Issuer,
    /// No `aud` value is one of the audiences.
    Audience,
    /// A claim the route requires (`jwt.require`) is absent.
    MissingClaim,
    /// No keys to verify with (the JWKS could not be fetched yet).
    NoKeys,
}

impl TokenError {
    /// The reason's name in counters and logs.
    pub fn name(self) -> &'static str {
        match self {
            TokenError::Malformed => "malformed",
            TokenError::Algorithm => "algorithm",
            TokenError::UnknownKey => "unknown_key",
            TokenError::Signature => "signature",
            TokenError::Expired => "expired",
            TokenError::NotYetValid => "not_yet_valid",
            TokenError::Issuer => "issuer",
            TokenError::Audience => "audience",
            TokenError::MissingClaim => "missing_claim",
            TokenError::NoKeys => "no_keys",
        }
    }

    /// What `error_description` says.
    pub(crate) fn description(self) -> &'static str {
        match self {
            TokenError::Malformed => "the token is malformed",
            TokenError::Algorithm => "the token's algorithm is not accepted",
            TokenError::UnknownKey => "the token's key is unknown",
            TokenError::Signature => "the token's signature is invalid",
            TokenError::Expired => "the token expired",
            TokenError::NotYetValid => "the token is not valid yet",
            TokenError::Issuer => "the token's issuer is not accepted",
            TokenError::Audience => "the token's audience is not accepted",
            TokenError::MissingClaim => "the token lacks a required claim",
            TokenError::NoKeys => "the token cannot be verified now",
        }
    }
}
