//! A route's identity features as loaded: `[route.auth]` (JWT, API keys, basic and forward
//! authentication) and `[route.cors]`. The files they name are read and parsed by the
//! `sluice-auth` crate, which `sluice check` and every apply run over them.

use crate::HashKey;
use http::{HeaderName, Method, Uri};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// `[route.auth]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteAuth {
    /// A verified client certificate.
    pub cert: Option<Arc<CertAuth>>,
    /// Bearer tokens.
    pub jwt: Option<Arc<JwtAuth>>,
    /// API keys.
    pub keys: Option<Arc<KeyAuth>>,
    /// Basic authentication.
    pub basic: Option<Arc<BasicAuth>>,
    /// A subrequest to an authorization service.
    pub forward: Option<Arc<ForwardAuth>>,
    /// Every method given must accept the request (else one is enough).
    pub all: bool,
    /// Where the authenticated subject goes upstream; `None`: nowhere.
    pub subject_header: Option<HeaderName>,
    /// The realm of `WWW-Authenticate` challenges.
    pub realm: String,
    /// Send the query argument that carried a credential upstream (else it is removed).
    pub forward_credential: bool,
}

/// `[auth]`: the pool that hashes basic-authentication passwords, shared by every route and
/// MQTT listener. Bounded, so that a flood of wrong passwords costs a known number of cores
/// and a queue of known length, never a thread per attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuthSettings {
    /// Threads hashing passwords.
    pub hash_threads: std::num::NonZeroUsize,
    /// Passwords waiting for a thread at most; beyond them a check is refused (503).
    pub hash_queue: usize,
}

impl Default for AuthSettings {
    fn default() -> Self {
        AuthSettings {
            hash_threads: std::thread::available_parallelism()
                .unwrap_or(std::num::NonZeroUsize::MIN),
            hash_queue: 256,
        }
    }
}

/// `cert = { ... }`: which verified client certificates a route accepts.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CertAuth {
    /// RFC 4514 subjects; empty: any.
    pub subjects: Vec<String>,
    /// `DNS:…`, `URI:…`, `email:…` subjectAltNames of which one must be present; empty: any.
    pub sans: Vec<String>,
}

/// The JWS algorithms Sluice verifies (RFC 7518 §3.1, RFC 8037): asymmetric only, so that
/// a public key can never be used as an HMAC secret (algorithm confusion).
pub const JWT_ALGORITHMS: [&str; 8] = [
    "RS256", "RS384", "RS512", "PS256", "PS384", "ES256", "ES384", "EdDSA",
];

/// `jwt = { ... }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JwtAuth {
    /// The issuer's JWKS, fetched and refreshed.
    pub jwks_url: Option<Uri>,
    /// PEM of the CAs the JWKS server must chain to; `None`: the system's roots.
    pub jwks_ca: Option<Vec<u8>>,
    /// A file of public keys (JWKS or PEM).
    pub keys_file: Option<PathBuf>,
    /// The `iss` required.
    pub issuer: Option<String>,
    /// Accepted `aud` values (a token must carry one); empty: `aud` is not checked.
    pub audiences: Vec<String>,
    /// Accepted algorithms, each one of [`JWT_ALGORITHMS`].
    pub algorithms: Vec<String>,
    /// Claim name, and the request header its value goes upstream in.
    pub claims_to_headers: Vec<(String, HeaderName)>,
    /// Clock skew allowed.
    pub leeway: Duration,
    /// Where the token is.
    pub token_from: TokenSource,
    /// Verified tokens remembered at most.
    pub cache_size: usize,
    /// Claims a token must carry (`require`).
    pub required_claims: Vec<String>,
    /// The longest token read, bytes; a longer one is malformed.
    pub max_token_size: usize,
}

/// Where a bearer token is found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenSource {
    /// `Authorization: Bearer TOKEN` (RFC 6750 §2.1).
    Bearer,
    /// A header, a cookie or a query argument holding the token alone.
    Part(HashKey),
}

/// `keys = { ... }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyAuth {
    /// `name:sha256:HEX` lines.
    pub file: PathBuf,
    /// The header that carries the key.
    pub header: HeaderName,
    /// A query argument that may carry it.
    pub query: Option<String>,
}

/// `basic = { ... }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BasicAuth {
    /// The htpasswd file.
    pub htpasswd: PathBuf,
    /// Verified credentials remembered at most.
    pub cache_size: usize,
}

/// `forward = { ... }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardAuth {
    /// The service's URL.
    pub url: Uri,
    /// PEM of the CAs an `https://` service must chain to.
    pub ca: Option<Vec<u8>>,
    /// Client request headers sent along.
    pub request_headers: Vec<HeaderName>,
    /// The answer header that names the subject.
    pub subject: HeaderName,
    /// Answer headers copied to the upstream request on 2xx.
    pub upstream_headers: Vec<HeaderName>,
    /// Answer headers copied to the client's response on 401/403.
    pub client_headers: Vec<HeaderName>,
    /// How long the service may take.
    pub timeout: Duration,
    /// A failing service lets requests through (else 500).
    pub allow_on_error: bool,
    /// How long a decision is remembered; `None`: not at all.
    pub cache_ttl: Option<Duration>,
    /// The request headers a remembered decision is keyed by.
    pub cache_key: Vec<HeaderName>,
}

/// `[route.cors]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cors {
    /// Allowed origins; empty with `any_origin`.
    pub origins: Vec<OriginPattern>,
    /// `"*"` was given.
    pub any_origin: bool,
    /// Methods a preflight may ask for.
    pub methods: Vec<Method>,
    /// Request headers a preflight may ask for (lower case); `None`: any.
    pub headers: Option<Vec<HeaderName>>,
    /// Response headers the page may read.
    pub expose_headers: Vec<HeaderName>,
    /// `Access-Control-Allow-Credentials: true`.
    pub credentials: bool,
    /// `Access-Control-Max-Age`.
    pub max_age: Duration,
}

/// An allowed origin: `scheme://host[:port]`, the host possibly `*.` and a domain. A
/// request's `Origin` is parsed before it is compared with one (`sluice_auth::cors`): a
/// string comparison would let `https://evil.com/.example.com` match `*.example.com`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OriginPattern {
    /// `https://` or `http://` and everything up to the host.
    pub scheme: String,
    /// The host (lower case), without `*.`.
    pub host: String,
    /// `*.` was given: any subdomain of `host` (not `host` itself).
    pub wildcard: bool,
    /// `:port`, as written, or empty.
    pub port: String,
}
