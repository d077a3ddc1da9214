//! Edge policy in the snapshot: client address lists, request IDs, path rewrites, redirects,
//! fixed responses and header edits, with the variables their values may hold; rate limits and
//! response caching.

pub use ipnet::IpNet;
use std::net::IpAddr;
use std::time::Duration;

/// Allow and deny lists of client addresses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Acl {
    /// Allowed networks; everyone when empty.
    pub allow: Vec<IpNet>,
    /// Refused networks; checked first.
    pub deny: Vec<IpNet>,
}

impl Acl {
    /// Whether `ip` may pass. An IPv4-mapped IPv6 address is checked as IPv4.
    pub fn permits(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        !self.deny.iter().any(|n| n.contains(&ip))
            && (self.allow.is_empty() || self.allow.iter().any(|n| n.contains(&ip)))
    }

    /// No list at all: nothing to check per request.
    pub fn is_empty(&self) -> bool {
        self.allow.is_empty() && self.deny.is_empty()
    }
}

/// `::ffff:a.b.c.d` as `a.b.c.d` (dual-stack sockets report IPv4 clients that way).
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// A value with variables: `$host`, `$uri`, `$request_uri`, `$args`, `$scheme`,
/// `$remote_addr` (the client, after `trusted_proxies`) and `$request_id`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template(pub Vec<Part>);

/// A piece of a [`Template`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    /// Text as written.
    Text(String),
    /// A variable.
    Var(Var),
}

/// The variables a [`Template`] may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Var {
    /// The request's host (without port).
    Host,
    /// The path.
    Uri,
    /// Path and query as received.
    RequestUri,
    /// The query (without `?`).
    Args,
    /// `http` or `https`.
    Scheme,
    /// The client address.
    RemoteAddr,
    /// The request ID.
    RequestId,
}

impl Var {
    /// Every variable with its name.
    pub const ALL: [(&'static str, Var); 7] = [
        ("host", Var::Host),
        ("uri", Var::Uri),
        ("request_uri", Var::RequestUri),
        ("args", Var::Args),
        ("scheme", Var::Scheme),
        ("remote_addr", Var::RemoteAddr),
        ("request_id", Var::RequestId),
    ];
}

impl Template {
    /// Parses `$name` variables (`$$` is a `$`); the error names the unknown variable.
    pub fn parse(text: &str) -> Result<Template, String> {
        let mut parts = Vec::new();
        let mut lit = String::new();
        let mut rest = text;
        while let Some(at) = rest.find('$') {
            lit.push_str(&rest[..at]);
            rest = &rest[at + 1..];
            if let Some(r) = rest.strip_prefix('$') {
                lit.push('$');
                rest = r;
                continue;
            }
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            let name = &rest[..end];
            let Some(&(_, var)) = Var::ALL.iter().find(|(n, _)| *n == name) else {
                return Err(format!("`${name}` is not a variable"));
            };
            if !lit.is_empty() {
                parts.push(Part::Text(std::mem::take(&mut lit)));
            }
            parts.push(Part::Var(var));
            rest = &rest[end..];
        }
        lit.push_str(rest);
        if !lit.is_empty() {
            parts.push(Part::Text(lit));
        }
        Ok(Template(parts))
    }

    /// Whether the value is plain text (no variable to fill in per request).
    pub fn is_static(&self) -> bool {
        self.0.iter().all(|p| matches!(p, Part::Text(_)))
    }
}

/// A path rewrite before the request goes upstream.
#[derive(Debug, Clone)]
pub enum Rewrite {
    /// Remove this prefix (a path that becomes empty is `/`).
    StripPrefix(String),
    /// Replace the path by `replacement` (captures as `$1`, `${name}`) where `regex` matches.
    Regex {
        /// Matched against the path.
        regex: regex::Regex,
        /// What it becomes.
        replacement: String,
    },
}

impl PartialEq for Rewrite {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Rewrite::StripPrefix(a), Rewrite::StripPrefix(b)) => a == b,
            (
                Rewrite::Regex {
                    regex: a,
                    replacement: ra,
                },
                Rewrite::Regex {
                    regex: b,
                    replacement: rb,
                },
            ) => a.as_str() == b.as_str() && ra == rb,
            _ => false,
        }
    }
}

/// What a route answers itself instead of proxying.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// A redirect.
    Redirect {
        /// 301, 302, 303, 307 or 308.
        status: u16,
        /// The `Location`.
        location: Template,
    },
    /// A fixed response.
    Respond {
        /// Its status.
        status: u16,
        /// Its body.
        body: Template,
        /// Its `Content-Type`.
        content_type: http::HeaderValue,
    },
}

/// Headers set, added or removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeaderEdits {
    /// Removed first.
    pub remove: Vec<http::HeaderName>,
    /// Then replaced or created.
    pub set: Vec<(http::HeaderName, Template)>,
    /// Then appended.
    pub add: Vec<(http::HeaderName, Template)>,
}

impl HeaderEdits {
    /// Nothing to do.
    pub fn is_empty(&self) -> bool {
        self.remove.is_empty() && self.set.is_empty() && self.add.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_parse_variables_and_refuse_unknown_ones() {
        let t = Template::parse("https://$host$request_uri?x=$$1").unwrap();
        assert_eq!(
            t.0,
            [
                Part::Text("https://".into()),
                Part::Var(Var::Host),
                Part::Var(Var::RequestUri),
                Part::Text("?x=$1".into()),
            ]
        );
        assert!(Template::parse("plain").unwrap().is_static());
        assert_eq!(
            Template::parse("$hostname").unwrap_err(),
            "`$hostname` is not a variable"
        );
    }

    #[test]
    fn acls_deny_first_then_allow_and_see_mapped_ipv4() {
        let acl = Acl {
            allow: vec![
                "10.0.0.0/8".parse().unwrap(),
                "2001:db8::/32".parse().unwrap(),
            ],
            deny: vec!["10.1.0.0/16".parse().unwrap()],
        };
        assert!(acl.permits("10.2.3.4".parse().unwrap()));
        assert!(!acl.permits("10.1.3.4".parse().unwrap()), "deny wins");
        assert!(!acl.permits("192.0.2.1".parse().unwrap()), "not allowed");
        assert!(acl.permits("2001:db8::7".parse().unwrap()));
        assert!(!acl.permits("2001:db9::7".parse().unwrap()));
        assert!(
            acl.permits("::ffff:10.2.3.4".parse().unwrap()),
            "IPv4-mapped"
        );
        assert!(Acl::default().permits("192.0.2.1".parse().unwrap()));
    }
}

/// `[route.rate_limit]`: GCRA, which is NGINX's leaky bucket in another form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimit {
    /// Requests per `window` (the N of `"N/s"`).
    pub quota: u32,
    /// The rate's unit: 1 s, 1 min or 1 h.
    pub window: std::time::Duration,
    /// Requests beyond the rate still served.
    pub burst: u32,
    /// Serve the burst at once (else spaced out at the rate).
    pub nodelay: bool,
    /// What is limited; `None`: the route as a whole.
    pub key: Option<crate::HashKey>,
    /// Shared through Redis (else this gateway's memory).
    pub shared: bool,
    /// Checked before the route's `[route.auth]` (so that refused credentials count), else
    /// after it (a limit per subject).
    pub before_auth: bool,
}

impl RateLimit {
    /// Time between two requests at the rate (GCRA's emission interval).
    pub fn interval(&self) -> std::time::Duration {
        self.window / self.quota
    }
}

/// `[rate_limit]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimitStore {
    /// The Redis URL, if limits are shared.
    pub redis: Option<String>,
    /// TLS to Redis: set for a `rediss://` URL.
    pub redis_tls: Option<RedisTls>,
    /// Longest wait for Redis per request.
    pub redis_timeout: std::time::Duration,
    /// Gateways sharing each limit (the fallback's divisor).
    pub expected_gateways: u32,
}

impl Default for RateLimitStore {
    fn default() -> Self {
        RateLimitStore {
            redis: None,
            redis_tls: None,
            redis_timeout: std::time::Duration::from_millis(20),
            expected_gateways: 1,
        }
    }
}

/// TLS to the shared rate limits' Redis (`rediss://`), files loaded. Redis's certificate is
/// always verified: against `ca`, or the system's roots when `ca` is empty.
#[derive(Clone)]
pub struct RedisTls {
    /// Trust anchors for Redis's certificate; empty: the system's roots.
    pub ca: Vec<boring::x509::X509>,
    /// This gateway's client certificate chain and its key, for a Redis that asks for one.
    pub client: Option<(
        Vec<boring::x509::X509>,
        boring::pkey::PKey<boring::pkey::Private>,
    )>,
}

impl RedisTls {
    /// The DER of everything it holds, to tell whether a reload changed it.
    fn der(&self) -> Vec<Vec<u8>> {
        let mut out: Vec<Vec<u8>> = self.ca.iter().filter_map(|c| c.to_der().ok()).collect();
        if let Some((chain, key)) = &self.client {
            out.push(b"client".to_vec());
            out.extend(chain.iter().filter_map(|c| c.to_der().ok()));
            out.extend(key.private_key_to_der().ok());
        }
        out
    }
}

impl PartialEq for RedisTls {
    fn eq(&self, other: &Self) -> bool {
        self.der() == other.der()
    }
}

impl Eq for RedisTls {}

impl std::fmt::Debug for RedisTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print key material.
        f.debug_struct("RedisTls")
            .field("ca", &self.ca.len())
            .field("client_certificate", &self.client.is_some())
            .finish()
    }
}

/// `[route.cache]`: how a route's responses are cached (RFC 9111 with these choices).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteCache {
    /// Lifetime of responses without one of their own (`None`: heuristics only).
    pub default_ttl: Option<Duration>,
    /// Store responses to requests with `Authorization`.
    pub allow_authorization: bool,
    /// Store responses that set cookies.
    pub allow_set_cookie: bool,
    /// How long a miss waits for another's fetch of the same key.
    pub lock_timeout: Duration,
    /// Hits after which a compressed variant is upgraded to its codec's best level (0:
    /// never).
    pub upgrade_after: u32,
    /// The header saying how the request was answered (`None`: not sent).
    pub status_header: Option<http::HeaderName>,
    /// Send RFC 9211 `Cache-Status` (`sluice; hit; ttl=42`).
    pub cache_status: bool,
    /// What the cache key holds besides the host and path.
    pub key: CacheKey,
    /// Request parts that, present with a value other than empty or `0`, send the request
    /// upstream without the cache and keep its response out of it (NGINX's
    /// `proxy_cache_bypass` with `proxy_no_cache` on the same conditions).
    pub bypass: Vec<crate::HashKey>,
}

/// `[route.cache] key`: the cache key is the host and path, the query where `query` (the
/// default), then each of `parts` (a header's, cookie's or query argument's value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheKey {
    /// The whole query string is part of the key.
    pub query: bool,
    /// Further parts, in order: `Header`, `Cookie` or `Query` only.
    pub parts: Vec<crate::HashKey>,
}

impl Default for CacheKey {
    fn default() -> Self {
        CacheKey {
            query: true,
            parts: Vec::new(),
        }
    }
}

impl Default for RouteCache {
    fn default() -> Self {
        RouteCache {
            default_ttl: None,
            allow_authorization: false,
            allow_set_cookie: false,
            lock_timeout: Duration::from_secs(5),
            upgrade_after: 16,
            status_header: Some(http::HeaderName::from_static("x-cache")),
            cache_status: true,
            key: CacheKey::default(),
            bypass: Vec::new(),
        }
    }
}

/// `[cache]`: the store every route that caches shares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheSettings {
    /// Its bound in bytes.
    pub max_size: u64,
    /// The largest entry stored, in bytes (`None`: an eighth of `max_size`).
    pub max_object_size: Option<u64>,
    /// `[cache.disk]`: the directory of the disk tier and its bound in bytes.
    pub disk: Option<(std::path::PathBuf, u64)>,
    /// The share of a busy core the background upgrades may take, in percent.
    pub upgrade_share_percent: u32,
}

impl Default for CacheSettings {
    fn default() -> Self {
        CacheSettings {
            max_size: 256 << 20,
            max_object_size: None,
            disk: None,
            upgrade_share_percent: 1,
        }
    }
}

/// `[[route.mirror]]`: where copies of a share of a route's requests go.
#[derive(Debug, Clone)]
pub struct Mirror {
    /// Index into the snapshot's upstreams.
    pub upstream: usize,
    /// Its name (metrics).
    pub upstream_name: String,
    /// Share of the matching requests copied, in millionths (1,000,000 = all).
    pub per_million: u32,
    /// Headers (names lower-case) that must have these values.
    pub headers: Vec<(http::HeaderName, http::HeaderValue)>,
    /// Largest request body copied.
    pub body_limit: u64,
    /// A copy's deadline, its response read to the end.
    pub timeout: Duration,
    /// Copies in flight at most.
    pub max_in_flight: u32,
    /// Edits of the copies' headers.
    pub request_headers: HeaderEdits,
}
