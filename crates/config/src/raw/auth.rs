//! The raw schema of a route's identity features: `[route.auth]` and `[route.cors]`.

use serde::Deserialize;
use toml::Spanned;

/// A string with its place in the file.
type SpannedStr = Spanned<String>;

/// `[route.auth]`: who may use the route. Each method given is tried in a fixed order
/// (`jwt`, `keys`, `basic`, `forward`); `require` says whether one of them (`"any"`, the
/// default) or every one (`"all"`) must accept the request.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAuth {
    /// A client certificate the listener verified (`[listener.tls] client_auth`).
    pub cert: Option<Spanned<RawCertAuth>>,
    /// Bearer tokens (RFC 7519) verified against a JWKS or public keys.
    pub jwt: Option<Spanned<RawJwt>>,
    /// API keys, stored hashed in a file.
    pub keys: Option<Spanned<RawKeys>>,
    /// HTTP basic authentication against an htpasswd file.
    pub basic: Option<Spanned<RawBasic>>,
    /// A subrequest to an authorization service (NGINX `auth_request`, Envoy `ext_authz`).
    pub forward: Option<Spanned<RawForward>>,
    /// `"any"` (default) or `"all"`.
    pub require: Option<Spanned<String>>,
    /// The request header that carries the authenticated subject upstream (default
    /// `X-Auth-Subject`; `""` for none). A client's own copy is always removed.
    pub subject_header: Option<Spanned<String>>,
    /// The realm named in `WWW-Authenticate` challenges (default the route's name).
    pub realm: Option<Spanned<String>>,
    /// Keep the query argument that carries a credential (`keys.query`, `jwt.token_from =
    /// "query:NAME"`) in the target sent upstream (default false: removed). Logs and traces
    /// mask it either way.
    pub forward_credential: Option<Spanned<bool>>,
}

/// `[auth]`: what every route's authentication shares: the threads that hash passwords.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAuthSettings {
    /// Threads hashing basic-authentication passwords (bcrypt, apr1; default one per core).
    pub hash_threads: Option<Spanned<usize>>,
    /// Passwords waiting for a hashing thread before further ones are refused with 503
    /// (default 256).
    pub hash_queue: Option<Spanned<usize>>,
}

/// `cert = { subjects = [...], sans = [...] }`: empty lists accept any verified certificate.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCertAuth {
    /// Subjects accepted, as RFC 4514 strings (`CN=alice,O=Example`).
    pub subjects: Option<Vec<SpannedStr>>,
    /// subjectAltNames accepted: `DNS:host`, `URI:spiffe://...`, `email:a@b`.
    pub sans: Option<Vec<SpannedStr>>,
}

/// `jwt = { ... }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawJwt {
    /// Where the issuer publishes its JWKS (`https://…/.well-known/jwks.json`).
    pub jwks_url: Option<SpannedStr>,
    /// PEM of the CA certificates the JWKS server's must chain to (default the system's).
    pub jwks_ca: Option<SpannedStr>,
    /// A file of public keys: a JWKS (JSON) or PEM public keys.
    pub keys: Option<SpannedStr>,
    /// The `iss` a token must carry.
    pub issuer: Option<SpannedStr>,
    /// `aud` values of which a token must carry one.
    pub audiences: Option<Vec<SpannedStr>>,
    /// The algorithms accepted (default all the supported asymmetric ones).
    pub algorithms: Option<Vec<SpannedStr>>,
    /// Claims copied to request headers sent upstream: `{ sub = "X-User" }`.
    pub claims_to_headers: Option<std::collections::BTreeMap<String, SpannedStr>>,
    /// Clock skew allowed on `exp`, `nbf` and `iat` (default 60s).
    pub leeway: Option<SpannedStr>,
    /// Where the token is: `"header"` (default: `Authorization: Bearer`),
    /// `"header:NAME"`, `"cookie:NAME"` or `"query:NAME"`.
    pub token_from: Option<SpannedStr>,
    /// Verified tokens remembered until they expire (default 10000; 0 for none).
    pub cache_size: Option<Spanned<u32>>,
    /// Claims a token must carry (`["exp"]`: no token without an expiry is accepted).
    pub require: Option<Vec<SpannedStr>>,
    /// The longest token read (default `"8k"`, NGINX's header buffer; at most `"64k"`).
    pub max_token_size: Option<Spanned<crate::raw::RawSize>>,
}

/// `keys = { file = "keys.txt" }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawKeys {
    /// Lines `name:sha256:HEX` (the SHA-256 of the key), reread when the file changes.
    pub file: SpannedStr,
    /// The request header that carries the key (default `X-API-Key`).
    pub header: Option<SpannedStr>,
    /// A query argument that may carry it instead.
    pub query: Option<SpannedStr>,
}

/// `basic = { htpasswd = "users.htpasswd" }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawBasic {
    /// An htpasswd file (bcrypt, `{SHA}` and `$apr1$` entries), reread when it changes.
    pub htpasswd: SpannedStr,
    /// Verified credentials remembered (default 1000; 0 for none).
    pub cache_size: Option<Spanned<u32>>,
}

/// `forward = { url = "http://127.0.0.1:9001/check" }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawForward {
    /// The authorization service's URL (`http://` or `https://`).
    pub url: SpannedStr,
    /// PEM of the CA certificates an `https://` service's must chain to.
    pub ca: Option<SpannedStr>,
    /// Client request headers sent to the service (default `Authorization` and `Cookie`).
    pub request_headers: Option<Vec<SpannedStr>>,
    /// The header of a 2xx answer that names the authenticated subject (default
    /// `X-Auth-Subject`).
    pub subject: Option<SpannedStr>,
    /// Headers of a 2xx answer copied to the upstream request.
    pub upstream_headers: Option<Vec<SpannedStr>>,
    /// Headers of a 401/403 answer copied to the client's (default `WWW-Authenticate`,
    /// `Location`, `Set-Cookie`).
    pub client_headers: Option<Vec<SpannedStr>>,
    /// How long the service may take (default 2s).
    pub timeout: Option<SpannedStr>,
    /// When the service fails (no answer, a status other than 2xx, 401 and 403):
    /// `"deny"` (default, 500 as NGINX) or `"allow"`.
    pub on_error: Option<SpannedStr>,
    /// Remember each decision this long, keyed by `cache_key`'s request headers.
    pub cache_ttl: Option<SpannedStr>,
    /// The request headers a remembered decision is keyed by (default `request_headers`).
    pub cache_key: Option<Vec<SpannedStr>>,
}

/// `[route.cors]`: cross-origin requests (the Fetch standard's CORS protocol).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCors {
    /// Origins allowed: `"https://app.example.com"`, `"https://*.example.com"` or `"*"`.
    pub origins: Vec<SpannedStr>,
    /// Methods a preflight may ask for (default GET, HEAD, POST).
    pub methods: Option<Vec<SpannedStr>>,
    /// Request headers a preflight may ask for (`"*"`: any).
    pub headers: Option<Vec<SpannedStr>>,
    /// Response headers the page may read.
    pub expose_headers: Option<Vec<SpannedStr>>,
    /// Allow credentials (cookies, `Authorization`); not with `"*"` origins.
    pub credentials: Option<Spanned<bool>>,
    /// How long a browser may keep a preflight's answer (default 10m).
    pub max_age: Option<SpannedStr>,
}
