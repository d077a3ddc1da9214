//! The part of a request a hash, a cache key or a rate-limit key is taken from: shared by the
//! upstream balancer, the cache, the rate limiter and authentication, so it has a module of
//! its own that none of them owns.

/// What a consistent hash (or a cache, limit or decision key) is computed on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HashKey {
    /// The first value of this request header (name in lower case).
    Header(String),
    /// This cookie's value.
    Cookie(String),
    /// This query argument's value.
    Query(String),
    /// The path and query, as NGINX's `$request_uri`.
    Uri,
    /// The client address.
    Client,
    /// The subject `[route.auth]` accepted (rate limits only); the client address for a
    /// request without one.
    Subject,
}
