//! Sluice configuration: the TOML schema, its validation and the immutable [`Snapshot`] that
//! the data plane reads.
//!
//! Loading runs in three stages (as in sozu): raw serde structs that reject unknown keys
//! ([`raw`]), a validation pass that applies defaults and cross-field checks, and the typed,
//! immutable [`Snapshot`]. Every problem found is reported at once, each with the file, line
//! and column and what to do about it, so an operator fixes a broken file in one round trip.
//!
//! Dependencies point one way: this crate knows nothing of sockets, TLS sessions or HTTP
//! serving. It parses certificates and keys (with BoringSSL) only to check them at load time
//! and to hand them, already parsed, to the TLS layer.

mod acme;
mod auth;
mod cache;
mod client_tls;
mod compression;
mod default;
mod error;
mod hash_key;
mod load;
mod logging;
mod lua;
mod paths;
mod pattern;
mod policy;
mod quic;
pub mod raw;
mod resolver;
pub mod selfsigned;
mod snapshot;
mod tracing;
mod units;
mod waf;

pub use acme::{
    AcmeChallenge, AcmeKeyType, AcmeOrder, AcmeSettings, DnsUpdate, ExternalAccount, LETS_ENCRYPT,
    Secret, TsigAlgorithm,
};
pub use auth::{
    AuthSettings, BasicAuth, CertAuth, Cors, ForwardAuth, JWT_ALGORITHMS, JwtAuth, KeyAuth,
    OriginPattern, RouteAuth, TokenSource,
};
pub use cache::CertCache;
pub use client_tls::{ClientAuth, ClientAuthMode, ClientIdentity};
pub use compression::{
    CompressEngineName, CompressOffload, Compression, ContentCoding, DEFAULT_COMPRESS_TYPES,
    GzipBackend,
};
pub use default::{
    DEFAULT_CONFIG_TEMPLATE, DefaultConfigParams, default_config, default_config_text,
};
pub use error::{ConfigError, LoadError};
pub use hash_key::HashKey;
pub use load::fleet::{RouteContext, fleet_source, load_route, parse_keyring};
pub use load::{load_file, load_file_cached, load_str, load_str_cached};
pub use logging::{
    AccessLogFormat, AccessLogTarget, DEFAULT_ACCESS_FLUSH, DEFAULT_REQUEST_LOG_BYTES,
    HttpLogFormat, LogConfig, LogShip, SYSLOG_FACILITIES, ShipSink, SyslogTransport,
};
pub use lua::{DEFAULT_MAX_INSTRUCTIONS, LuaCode, LuaPhase, LuaSettings, RouteLua, SharedDictSize};
pub use paths::{EscapedSlashes, ForwardPath, PathPolicy};
pub use pattern::{HostPattern, normalize_host, normalized_host};
pub use policy::{
    Acl, Answer, CacheKey, CacheSettings, HeaderEdits, IpNet, Mirror, Part, RateLimit,
    RateLimitStore, RedisTls, Rewrite, RouteCache, Template, Var, canonical,
};
pub use quic::{QuicRetry, QuicSettings};
pub use resolver::DnsResolver;
pub use snapshot::{
    Admin, AdminTls, Balance, Certificate, ClientIdCap, CryptoEngine, CryptoOffload,
    DEFAULT_GROUPS, FleetSource, Global, Handshakes, HealthCheck, HealthProbe, KNOWN_GROUPS,
    KeyType, KeylessOffload, Listener, ListenerKind, MqttProxy, MqttRouteBy, Offload, Outlier,
    PassHost, PathMatch, ProxyProtocol, RetryPolicy, Route, ServerAddr, Snapshot, Split, Sticky,
    TcpProxy, TlsListener, TlsVersion, UnknownSni, Upstream, UpstreamProtocol, UpstreamServer,
    UpstreamTls,
};
pub use tracing::{OtlpProtocol, TracingSettings};
pub use units::{parse_byte_size, parse_duration};
pub use waf::{
    DEFAULT_INLINE_PERCENT, DEFAULT_RESPONSE_MIME_TYPES, RouteWaf, WafBodyOverLimit, WafEngine,
    WafExclusion, WafInline, WafMode, WafOverload, WafRuleSet, WafSettings,
};

#[cfg(test)]
mod tests;
