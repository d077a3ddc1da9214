//! `[route.rate_limit]` (also an MQTT listener's connection rates) and `[rate_limit]`, the
//! shared store.

use serde::Deserialize;
use toml::Spanned;

type SpannedStr = Spanned<String>;

/// `[route.rate_limit]`: NGINX's `limit_req` (rate and burst, delayed or `nodelay`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRateLimit {
    /// `"5/s"`, `"300/m"` or `"1000/h"`.
    pub rate: Spanned<String>,
    /// Requests beyond the rate that are still served (queued, or at once with `nodelay`).
    pub burst: Option<Spanned<u32>>,
    /// Serve the burst at once instead of spacing it out at the rate (default false).
    pub nodelay: Option<Spanned<bool>>,
    /// What is limited: `"client"` (default), `"header:NAME"`, `"cookie:NAME"`,
    /// `"query:NAME"` or `"route"` (the route as a whole).
    pub key: Option<Spanned<String>>,
    /// `"local"` (default: this gateway's memory) or `"redis"` (shared, `[rate_limit]`).
    pub store: Option<Spanned<String>>,
    /// On a route with `[route.auth]`: `"before_auth"` (default: failed logins count, as
    /// NGINX's `limit_req` runs before `auth_basic`) or `"after_auth"` (the default with
    /// `key = "subject"`, which only authentication knows).
    pub limit: Option<Spanned<String>>,
}

/// `[rate_limit]`: the shared store of `store = "redis"` limits.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRateLimitStore {
    /// `redis://host:port/` (optionally `redis://:password@host:port/db`), or `rediss://`
    /// for TLS.
    pub redis: Option<Spanned<String>>,
    /// `rediss://`: PEM of the CA certificates Redis's certificate must chain to (default:
    /// the system's roots).
    pub redis_ca: Option<Spanned<String>>,
    /// `rediss://`: this gateway's client certificate, leaf first (Redis `tls-auth-clients`).
    pub redis_certificate: Option<Spanned<String>>,
    /// `rediss://`: its key.
    pub redis_key: Option<Spanned<String>>,
    /// Longest wait for Redis before the local fallback decides (default 20ms).
    pub redis_timeout: Option<SpannedStr>,
    /// Gateways sharing the limits: the local fallback allows `rate / expected_gateways`
    /// (default 1).
    pub expected_gateways: Option<Spanned<u32>>,
}
