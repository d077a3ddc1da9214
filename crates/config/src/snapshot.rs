//! The validated, immutable configuration that the data plane reads.

use crate::HostPattern;
use crate::LogConfig;
use crate::compression::{CompressOffload, Compression};
use crate::hash_key::HashKey;
use crate::resolver::DnsResolver;
use boring::pkey::{PKey, Private};
use boring::x509::X509;
use regex::Regex;
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// A complete, checked configuration. Cheap to share (`Arc` inside), never mutated: a reload
/// builds a new one.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// Where it was loaded from (`<embedded>` for the built-in default).
    pub source: String,
    /// A short content hash of the text and the certificates' files: equal revisions are the
    /// same configuration.
    pub revision: String,
    /// Process-wide settings.
    pub global: Global,
    /// Logging.
    pub log: LogConfig,
    /// Listeners in file order.
    pub listeners: Vec<Listener>,
    /// Certificates by position; listeners refer to them by index.
    pub certificates: Vec<Arc<Certificate>>,
    /// Upstream groups by position; routes refer to them by index.
    pub upstreams: Vec<Arc<Upstream>>,
    /// Routes in file order.
    pub routes: Vec<Arc<Route>>,
    /// The offload layer.
    pub offload: Offload,
    /// The admin listener; `None` when disabled.
    pub admin: Option<Admin>,
    /// `[rate_limit]`: where shared limits are kept.
    pub rate_limit_store: crate::RateLimitStore,
    /// `[cache]`: the response store the routes with `[route.cache]` share.
    pub cache: crate::CacheSettings,
    /// `[tracing]`: spans to an OpenTelemetry collector; `None`: no tracing (an incoming
    /// `traceparent` passes through unchanged).
    pub tracing: Option<crate::TracingSettings>,
    /// `[resolver]`: DNS for upstream servers with `resolve = true`.
    pub resolver: DnsResolver,
    /// Where the built-in demo origin listens (`[demo]`), if anywhere. Started with the
    /// process; a reload does not move it.
    pub demo: Option<SocketAddr>,
    /// `[compression]`: the defaults every route's compression starts from.
    pub compression: Arc<Compression>,
    /// `[config] source = "etcd"`: where the fleet's shared objects come from; `None`: this
    /// file holds everything.
    pub fleet: Option<FleetSource>,
    /// `[acme]`: where ACME certificates are kept and how failed orders are retried.
    pub acme: crate::AcmeSettings,
    /// `[lua]`: what every Lua state shares.
    pub lua: Arc<crate::LuaSettings>,
    /// `[waf]`: the rule sets routes name.
    pub waf: Arc<crate::WafSettings>,
    /// `[auth]`: what every route's authentication shares (the password-hashing pool).
    pub auth: crate::AuthSettings,
}

/// `[config]` of a gateway in fleet mode: its etcd and what it keeps locally.
#[derive(Clone, PartialEq, Eq)]
pub struct FleetSource {
    /// `http://host:port` or `https://host:port`.
    pub endpoints: Vec<String>,
    /// Key prefix without a trailing slash (`/sluice`).
    pub prefix: String,
    /// The last good set of shared objects, to start from while etcd is down.
    pub cache_file: Option<PathBuf>,
    /// CA certificate PEM for etcd over TLS.
    pub ca_pem: Option<Vec<u8>>,
    /// Client certificate and key PEM for etcd's mutual TLS.
    pub client_identity: Option<(Vec<u8>, Vec<u8>)>,
    /// etcd user and password.
    pub user: Option<(String, String)>,
    /// Keys that seal private keys stored in etcd: (id, AES-256 key); the first seals.
    pub keyring: Vec<(String, [u8; 32])>,
    /// Rotation period of the fleet's shared session ticket key.
    pub ticket_key_rotation: Duration,
    /// Deadline of one etcd request.
    pub timeout: Duration,
}

impl std::fmt::Debug for FleetSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print passwords or keys.
        f.debug_struct("FleetSource")
            .field("endpoints", &self.endpoints)
            .field("prefix", &self.prefix)
            .field("cache_file", &self.cache_file)
            .field("tls", &self.ca_pem.is_some())
            .field("keyring_keys", &self.keyring.len())
            .finish_non_exhaustive()
    }
}

/// `[admin]`.
#[derive(Clone, PartialEq, Eq)]
pub struct Admin {
    /// Where it listens.
    pub address: SocketAddr,
    /// The bearer token writes need; `None`: the admin API only reads.
    pub token: Option<String>,
    /// A bearer token that only reads.
    pub read_token: Option<String>,
    /// Clients that read without a token, besides loopback.
    pub read_networks: Vec<crate::IpNet>,
    /// HTTPS; `None`: cleartext (loopback, or `insecure = true`).
    pub tls: Option<AdminTls>,
}

impl std::fmt::Debug for Admin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print a token.
        f.debug_struct("Admin")
            .field("address", &self.address)
            .field("token", &self.token.as_ref().map(|_| "<set>"))
            .field("read_token", &self.read_token.as_ref().map(|_| "<set>"))
            .field("read_networks", &self.read_networks)
            .field("tls", &self.tls)
            .finish()
    }
}

/// `[admin.tls]`, files loaded.
#[derive(Clone)]
pub struct AdminTls {
    /// The listener's certificate chain, leaf first.
    pub certificate: Vec<X509>,
    /// Its key.
    pub key: PKey<Private>,
    /// CAs whose client certificates are required; empty: none asked for.
    pub client_ca: Vec<X509>,
}

impl AdminTls {
    /// The DER of everything it holds, to tell whether a reload changed it.
    fn der(&self) -> Vec<Vec<u8>> {
        let certs = self.certificate.iter().chain(&self.client_ca);
        let mut out: Vec<Vec<u8>> = certs.filter_map(|c| c.to_der().ok()).collect();
        out.push(self.client_ca.len().to_le_bytes().to_vec());
        out.extend(self.key.private_key_to_der().ok());
        out
    }
}

impl PartialEq for AdminTls {
    fn eq(&self, other: &Self) -> bool {
        self.der() == other.der()
    }
}

impl Eq for AdminTls {}

impl std::fmt::Debug for AdminTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print key material.
        f.debug_struct("AdminTls")
            .field("certificate", &self.certificate.len())
            .field("client_ca", &self.client_ca.len())
            .finish_non_exhaustive()
    }
}

/// `[offload]`.
#[derive(Debug, Clone, Default)]
pub struct Offload {
    /// TLS private-key operations.
    pub crypto: CryptoOffload,
    /// Response compression chunks.
    pub compress: CompressOffload,
    /// Remote key servers (the `keyless` engine); `None` when not configured.
    pub keyless: Option<KeylessOffload>,
    /// How TLS handshakes are scheduled.
    pub handshakes: Handshakes,
}

/// `[offload.handshakes]`: TLS handshakes as a class of work of their own, below requests on
/// established connections (HAProxy's heavy tasklets, done with threads the kernel schedules
/// at a lower priority).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Handshakes {
    /// Handshakes run on their own threads; `false`: on the event loop with everything else.
    pub isolate: bool,
    /// The CPU share, in percent, handshake threads keep on a core that established traffic
    /// also wants (they take every idle cycle regardless); 0: none, they run only on cycles
    /// established traffic leaves (`SCHED_IDLE`).
    pub share_percent: u32,
    /// Handshakes in progress at once in the gateway; `None`: 128 per CPU. More connections
    /// wait in the listen backlog, not in the gateway's memory.
    pub max_in_progress: Option<usize>,
}

impl Default for Handshakes {
    fn default() -> Self {
        Handshakes {
            isolate: true,
            share_percent: 1,
            max_in_progress: None,
        }
    }
}

/// `[offload.keyless]`, files loaded.
#[derive(Clone)]
pub struct KeylessOffload {
    /// Key servers, `host:port`.
    pub servers: Vec<String>,
    /// The name their certificates carry.
    pub server_name: String,
    /// Trust anchors for their certificates.
    pub ca: Vec<X509>,
    /// This gateway's client certificate chain.
    pub certificate: Vec<X509>,
    /// Its key.
    pub key: PKey<Private>,
    /// Connections per key server.
    pub connections: usize,
    /// Per-attempt timeout.
    pub timeout: Duration,
    /// Ping interval.
    pub ping_interval: Duration,
    /// Sign with the local key when no key server could (`true`), or fail.
    pub fallback_local: bool,
}

impl std::fmt::Debug for KeylessOffload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print key material.
        f.debug_struct("KeylessOffload")
            .field("servers", &self.servers)
            .field("server_name", &self.server_name)
            .field("connections", &self.connections)
            .field("timeout", &self.timeout)
            .field("fallback_local", &self.fallback_local)
            .finish_non_exhaustive()
    }
}

/// An engine for private-key operations (the software `inline` engine always ends the chain).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CryptoEngine {
    /// Dedicated threads.
    Pool,
    /// AVX-512 IFMA multi-buffer RSA (falls through where the CPU lacks IFMA).
    Mb,
    /// Remote key servers (`[offload.keyless]`).
    Keyless,
}

/// `[offload.crypto]`.
#[derive(Debug, Clone, PartialEq)]
pub struct CryptoOffload {
    /// Engines before `inline`, in order, as `engines` names them; `None` when the file
    /// names none and the chain is chosen at start from what the machine offers
    /// (`sluice_tls::chain`).
    pub engines: Option<Vec<CryptoEngine>>,
    /// Pool threads; `None`: the CPUs this process may use.
    pub pool_threads: Option<usize>,
    /// Pool capacity; `None`: 64 per thread.
    pub pool_capacity: Option<usize>,
    /// Per-engine deadline.
    pub deadline: Duration,
    /// Failures that open a breaker.
    pub breaker_failures: u32,
    /// Breaker back-off.
    pub breaker_backoff: Duration,
    /// Verify every signature (true) or RSA ones only.
    pub verify_all: bool,
    /// Longest an `mb` job waits for company.
    pub mb_max_wait: Duration,
    /// Jobs the `mb` engine queues before it answers busy.
    pub mb_capacity: usize,
    /// Smaller `mb` batches are signed one at a time in software; `None`: where this CPU's
    /// measured costs put the line.
    pub mb_min_batch: Option<usize>,
    /// Run `mb` batches on the submitting worker rather than the engine's thread.
    pub mb_on_worker: bool,
    /// Lanes per RSA-2048 `mb` batch: 4 (256-bit IFMA) or 8 (512-bit); `None`: the default (8).
    pub mb_lanes: Option<usize>,
}

impl Default for CryptoOffload {
    fn default() -> Self {
        CryptoOffload {
            engines: None,
            pool_threads: None,
            pool_capacity: None,
            deadline: Duration::from_millis(100),
            breaker_failures: 5,
            breaker_backoff: Duration::from_secs(1),
            verify_all: false,
            mb_max_wait: Duration::from_micros(200),
            mb_capacity: 256,
            mb_min_batch: None,
            mb_on_worker: true,
            mb_lanes: None,
        }
    }
}

/// Process-wide settings.
#[derive(Debug, Clone)]
pub struct Global {
    /// Deadline for in-flight requests after SIGTERM/SIGINT.
    pub shutdown_timeout: Duration,
    /// After `sluice upgrade`, how long the old process keeps relaying the TCP and MQTT
    /// connections it holds (a device's session lives on its connection: cutting it makes
    /// every device reconnect at once) before closing them. A stop by signal gives them
    /// `shutdown_timeout`, as requests.
    pub stream_drain_timeout: Duration,
}

/// A TLS protocol version Sluice accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TlsVersion {
    /// TLS 1.2.
    V1_2,
    /// TLS 1.3.
    V1_3,
}

/// What to do with a client whose SNI names no configured certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnknownSni {
    /// Serve the listener's default certificate.
    Default,
    /// Fail the handshake (`unrecognized_name`).
    Reject,
}

/// TLS settings of an HTTPS listener.
#[derive(Debug, Clone)]
pub struct TlsListener {
    /// Indexes into [`Snapshot::certificates`].
    pub certificates: Vec<usize>,
    /// Index into [`Snapshot::certificates`] of the default certificate.
    pub default_certificate: usize,
    /// Behaviour for unknown SNI.
    pub unknown_sni: UnknownSni,
    /// Lowest version accepted.
    pub min_version: TlsVersion,
    /// Highest version accepted.
    pub max_version: TlsVersion,
    /// Whether session tickets are issued.
    pub session_tickets: bool,
    /// Shared ticket key file, if any.
    pub ticket_key_file: Option<PathBuf>,
    /// Rotation (or re-read) interval of ticket keys.
    pub ticket_key_rotation: Duration,
    /// Whether TLS 1.2 RSA key exchange suites are offered (after every ECDHE suite): the
    /// server then decrypts the client's premaster secret with the certificate's key, an
    /// offloaded job like a signature. Off by default: no forward secrecy.
    pub rsa_key_exchange: bool,
    /// Key-exchange groups in preference order, as BoringSSL names them; `None`: BoringSSL's
    /// default ([`DEFAULT_GROUPS`]).
    pub groups: Option<Vec<&'static str>>,
    /// Client certificates, when asked for.
    pub client_auth: Option<Arc<crate::ClientAuth>>,
}

/// BoringSSL's key-exchange groups when `groups` is not set, in its order: the hybrid
/// post-quantum X25519MLKEM768 first.
pub const DEFAULT_GROUPS: &[&str] = &["X25519MLKEM768", "X25519", "P-256", "P-384"];

/// Every group `groups` may name: BoringSSL's name, then the other spellings OpenSSL (and so
/// NGINX's `ssl_ecdh_curve`) accepts for it.
pub const KNOWN_GROUPS: &[(&str, &[&str])] = &[
    ("X25519MLKEM768", &[]),
    ("X25519", &["x25519"]),
    ("P-256", &["prime256v1", "secp256r1"]),
    ("P-384", &["secp384r1"]),
    ("P-521", &["secp521r1"]),
    ("MLKEM1024", &[]),
];

/// A socket that accepts client connections.
#[derive(Debug, Clone)]
pub struct Listener {
    /// Unique name.
    pub name: String,
    /// Address to bind.
    pub address: SocketAddr,
    /// Offer HTTP/2.
    pub h2: bool,
    /// Offer HTTP/1.1.
    pub http1: bool,
    /// TLS settings; `None` for plain HTTP.
    pub tls: Option<TlsListener>,
    /// Request head deadline.
    pub header_read_timeout: Duration,
    /// Idle keep-alive deadline.
    pub keepalive_timeout: Duration,
    /// Request head size limit.
    pub max_header_bytes: usize,
    /// Request header field count limit (`max_header_fields`, default 100): more is 431, on
    /// every protocol.
    pub max_header_fields: usize,
    /// Request body size limit.
    pub max_body_bytes: u64,
    /// Send RFC 7239 `Forwarded` too.
    pub forwarded_header: bool,
    /// How request paths are normalized before any decision (`merge_slashes`,
    /// `escaped_slashes`).
    pub paths: crate::PathPolicy,
    /// Also serve HTTP/3 over QUIC on the same address and port (UDP); TLS listeners of
    /// kind HTTP only. TCP responses then advertise it with `Alt-Svc`.
    pub http3: bool,
    /// QUIC's own settings (used when `http3`).
    pub quic: crate::quic::QuicSettings,
    /// Peers whose `X-Forwarded-For` and `X-Request-Id` are believed.
    pub trusted_proxies: Vec<crate::IpNet>,
    /// Client addresses allowed and refused on this listener.
    pub acl: crate::Acl,
    /// Give every request an `X-Request-Id`.
    pub request_id: bool,
    /// Open connections at most.
    pub max_connections: Option<usize>,
    /// Open connections per client address at most.
    pub max_connections_per_client: Option<u32>,
    /// What the listener speaks: HTTP, or bytes to an upstream group.
    pub kind: ListenerKind,
    /// A PROXY protocol header (v1 or v2) from a `trusted_proxies` peer opens every
    /// connection; its source address is the client's everywhere.
    pub proxy_protocol: bool,
    /// Keep request header fields whose names contain `_` (NGINX's `underscores_in_headers`).
    /// Off, they are dropped: an origin that reads `X_Auth_Subject` as `X-Auth-Subject`
    /// (CGI, PHP, WSGI) would take a client's field for one the gateway vouches for. On or
    /// off, an underscore spelling of a field the gateway sets is always dropped.
    pub underscores_in_headers: bool,
}

/// What a listener speaks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenerKind {
    /// HTTP/1.1 and HTTP/2, routed by `[[route]]`.
    Http,
    /// Layer 4: each connection's bytes go to a server of an upstream group (after TLS, when
    /// the listener terminates it).
    Tcp(TcpProxy),
    /// Layer 4 for MQTT: each connection's CONNECT is read and checked, and its bytes go to
    /// the broker its client identifier (or user name) hashes to.
    Mqtt(MqttProxy),
}

/// A `kind = "mqtt"` listener's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MqttProxy {
    /// Index into [`Snapshot::upstreams`]: the brokers (`balance = "consistent_hash"`).
    pub upstream: usize,
    /// The CONNECT must be whole within this long.
    pub connect_timeout: Duration,
    /// The largest CONNECT accepted, in bytes.
    pub max_connect_size: usize,
    /// What a device's broker is chosen by.
    pub route_by: MqttRouteBy,
    /// Client identifiers that may connect (others are refused, "client identifier not
    /// valid"); `None`: any.
    pub client_id_pattern: Option<IdPattern>,
    /// `[listener.mqtt.auth]`: who may connect (`basic` and `jwt` only).
    pub auth: Option<Arc<crate::RouteAuth>>,
    /// The CONNECT field that must equal the verified client certificate's common name
    /// (`[listener.tls] client_auth = "required"`); `None`: no such binding.
    pub certificate_identity: Option<MqttRouteBy>,
    /// New connections per client address (keyless, never delayed).
    pub rate_per_client: Option<crate::RateLimit>,
    /// New connections per client identifier (keyless, never delayed).
    pub rate_per_client_id: Option<crate::RateLimit>,
    /// At most this many open connections per client identifier to the brokers.
    pub max_connections_per_client_id: Option<ClientIdCap>,
    /// A connection whose CONNECT asked for no keep alive is closed after this long without
    /// a byte either way; one with a keep alive, after 1.5 times it (MQTT-3.1.2-24).
    pub idle_timeout: Duration,
}

/// `max_connections_per_client_id`: a newer connection with a client identifier already
/// connected this many times closes the oldest, as a broker's session takeover does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientIdCap {
    /// Connections allowed at once (at least 1).
    pub max: u32,
    /// Counted across the fleet in `[rate_limit] redis` (else in this gateway).
    pub shared: bool,
}

/// A regular expression compared by its text (so that a listener's settings compare equal
/// across reloads when the pattern is unchanged).
#[derive(Debug, Clone)]
pub struct IdPattern(pub regex::Regex);

impl PartialEq for IdPattern {
    fn eq(&self, other: &Self) -> bool {
        self.0.as_str() == other.0.as_str()
    }
}

impl Eq for IdPattern {}

/// What an MQTT listener hashes to choose a device's broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MqttRouteBy {
    /// The CONNECT's client identifier (a device returns to the broker holding its session).
    ClientId,
    /// The CONNECT's user name (an empty one: the client identifier).
    Username,
}

/// A `kind = "tcp"` listener's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpProxy {
    /// Index into [`Snapshot::upstreams`]: every connection's group, or, with `passthrough`,
    /// the group of server names it does not list (`None`: those are closed).
    pub upstream: Option<usize>,
    /// TLS passthrough: (server name, index into [`Snapshot::upstreams`]), exact names before
    /// wildcards; empty when the listener does not read the ClientHello.
    pub passthrough: Vec<(crate::HostPattern, usize)>,
    /// A connection with no byte either way for this long is closed.
    pub idle_timeout: Duration,
}

/// The PROXY protocol header sent to an upstream's servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyProtocol {
    /// The text header.
    V1,
    /// The binary header.
    V2,
}

/// The kind of a certificate's key; BoringSSL prefers ECDSA when the client supports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyType {
    /// RSA with this many bits.
    Rsa(u32),
    /// ECDSA on this curve (bits: 256 for P-256, 384 for P-384).
    Ecdsa(u32),
    /// Ed25519.
    Ed25519,
}

/// A parsed certificate chain with its (matching) private key.
pub struct Certificate {
    /// Unique name.
    pub name: String,
    /// Leaf first.
    pub chain: Vec<X509>,
    /// The private key; `None` when it lives on key servers only.
    pub key: Option<PKey<Private>>,
    /// Its kind.
    pub key_type: KeyType,
    /// Names it is served for.
    pub hosts: Vec<HostPattern>,
    /// Its private-key engines when they differ from `[offload.crypto] engines`.
    pub offload_engines: Option<Vec<CryptoEngine>>,
    /// SHA-256 of its settings and its files' bytes: equal fingerprints are the same
    /// certificate, so a reload may keep what was built from it.
    pub fingerprint: [u8; 32],
    /// Issued and renewed by an ACME CA (`acme = { ... }`): the chain and key above are what
    /// its storage held at load.
    pub acme: Option<Arc<crate::AcmeOrder>>,
    /// A self-signed stand-in, served until the CA issues the real certificate (ACME only).
    pub placeholder: bool,
    /// Staple its issuer's OCSP response (`ocsp = "auto"`, the default).
    pub ocsp: bool,
    /// `client_auth` for this certificate's names, instead of the listener's.
    pub client_auth: Option<crate::ClientAuthMode>,
}

impl std::fmt::Debug for Certificate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print key material.
        f.debug_struct("Certificate")
            .field("name", &self.name)
            .field("key_type", &self.key_type)
            .field("hosts", &self.hosts)
            .finish_non_exhaustive()
    }
}

/// How requests are spread across an upstream's servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Balance {
    /// Each server in turn.
    RoundRobin,
    /// NGINX's smooth weighted round robin.
    WeightedRoundRobin,
    /// The server with the fewest active requests (relative to weight).
    LeastConn,
    /// A hash of the client address, so a client keeps its server (NGINX's `ip_hash`: most
    /// keys move when the group changes).
    IpHash,
    /// Maglev consistent hashing on [`Upstream::hash_on`], with bounded load: a key keeps its
    /// server as servers come and go (about 1/N of keys move when one of N leaves), and no
    /// server takes more than `hash_balance_factor` × its share of the requests in flight.
    ConsistentHash,
    /// Power of two choices on peak-EWMA latency × requests in flight (linkerd's balancer):
    /// steers away from slow servers as well as busy ones.
    PeakEwma,
}

/// Protocol spoken to upstream servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamProtocol {
    /// HTTP/1.1 with keep-alive.
    Http1,
    /// Cleartext HTTP/2 (prior knowledge).
    H2,
}

/// Which Host header goes upstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PassHost {
    /// The client's.
    Pass,
    /// The chosen server's address.
    Node,
    /// This value.
    Rewrite(String),
}

/// An upstream server address as configured and as resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerAddr {
    /// As written in the file (for logs).
    pub name: String,
    /// Resolved at load; for a `resolve` server, `0.0.0.0` and its port (the gateway puts
    /// one server per resolved address in its place).
    pub addr: SocketAddr,
}

/// One server of a group.
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamServer {
    /// Its address.
    pub address: ServerAddr,
    /// Relative weight (≥ 1).
    pub weight: NonZeroU32,
    /// `resolve = true`: `address.name` is `host:port`, followed in DNS by the gateway.
    pub resolve: bool,
    /// `resolve` with `service`: `address.name` is the SRV name (`_http._tcp.app.internal`),
    /// whose records (of the lowest priority) give the servers, ports and weights.
    pub srv: bool,
}

impl UpstreamServer {
    /// The `host` and port of a `resolve` server that follows A/AAAA records.
    pub fn dns_name(&self) -> Option<(&str, u16)> {
        if !self.resolve || self.srv {
            return None;
        }
        let (host, port) = self.address.name.rsplit_once(':')?;
        Some((
            host.trim_start_matches('[').trim_end_matches(']'),
            port.parse().ok()?,
        ))
    }
}

/// A group of servers.
#[derive(Debug, Clone, PartialEq)]
pub struct Upstream {
    /// Unique name.
    pub name: String,
    /// Its servers (at least one).
    pub servers: Vec<UpstreamServer>,
    /// Balancing algorithm.
    pub balance: Balance,
    /// The key of `balance = "consistent_hash"`; a request without it hashes on the client
    /// address, so it still keeps a server.
    pub hash_on: HashKey,
    /// Bounded load of `consistent_hash`: no server above this × its weighted share of the
    /// group's requests in flight; `None` when unbounded (`hash_balance_factor = 0`).
    pub hash_balance_factor: Option<f64>,
    /// Protocol to the servers.
    pub protocol: UpstreamProtocol,
    /// Host header policy.
    pub pass_host: PassHost,
    /// TCP connect deadline per attempt.
    pub connect_timeout: Duration,
    /// Deadline for response headers.
    pub response_timeout: Duration,
    /// Failures before a server is skipped.
    pub max_fails: NonZeroU32,
    /// How long it is skipped.
    pub fail_timeout: Duration,
    /// Idle connections kept per server.
    pub keepalive: usize,
    /// Idle pooled connection lifetime.
    pub keepalive_timeout: Duration,
    /// Sticky sessions by a signed cookie.
    pub sticky: Option<Sticky>,
    /// Active health checks.
    pub health_check: Option<HealthCheck>,
    /// Outlier ejection from live traffic.
    pub outlier: Option<Outlier>,
    /// Retries stay under this percentage of the upstream's requests over 10 s...
    pub retry_budget_percent: u32,
    /// ...plus this many per second.
    pub retry_budget_min_per_second: u32,
    /// Requests in flight per server at most.
    pub max_conns: Option<usize>,
    /// Requests that may wait for a server under `max_conns`.
    pub queue: usize,
    /// Longest wait in that queue.
    pub queue_timeout: Duration,
    /// Each new server connection starts with this PROXY protocol header, carrying the
    /// client's address.
    pub send_proxy_protocol: Option<ProxyProtocol>,
    /// TLS to the servers; `None`: cleartext.
    pub tls: Option<UpstreamTls>,
}

/// `[upstream.tls]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamTls {
    /// SNI and the name verified in the server's certificate; `None`: the server's IP.
    pub server_name: Option<String>,
    /// PEM of the CA certificates trusted for the servers; `None`: the system's roots.
    pub ca: Option<Vec<u8>>,
    /// Whether the server's certificate is checked at all.
    pub verify: bool,
    /// The certificate and key presented when the server asks for one (mutual TLS).
    pub client_identity: Option<crate::client_tls::ClientIdentity>,
}

/// `[upstream.outlier]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outlier {
    /// Consecutive failures (5xx, connect errors, timeouts) that eject.
    pub consecutive_failures: NonZeroU32,
    /// First ejection's length; the n-th is n times as long.
    pub base_ejection: Duration,
    /// Cap of an ejection's length.
    pub max_ejection: Duration,
    /// Most of the group ejected at once, in percent (one server at least).
    pub max_ejected_percent: u32,
}

/// `[upstream.health_check]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthCheck {
    /// What a check does.
    pub probe: HealthProbe,
    /// Time between checks of one server.
    pub interval: Duration,
    /// Deadline of one check.
    pub timeout: Duration,
    /// Consecutive passes that bring a down server back.
    pub healthy: NonZeroU32,
    /// Consecutive failures that take a server out.
    pub unhealthy: NonZeroU32,
}

/// How a server is checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HealthProbe {
    /// A TCP connection opens.
    Tcp,
    /// An HTTP GET answers with an expected status (and body text).
    Http {
        /// Path and query requested.
        path: String,
        /// Host header; `None`: the server's address.
        host: Option<String>,
        /// Passing statuses, as inclusive ranges.
        statuses: Vec<(u16, u16)>,
        /// Text the body must contain.
        body: Option<String>,
    },
}

/// `[upstream.sticky]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sticky {
    /// Cookie name.
    pub cookie: String,
    /// `Max-Age`; `None`: a session cookie.
    pub max_age: Option<Duration>,
    /// The signing key from `key_file`; `None`: the process's own random key.
    pub key: Option<Vec<u8>>,
}

/// How a route matches the path.
#[derive(Debug, Clone)]
pub enum PathMatch {
    /// Equal to this path.
    Exact(String),
    /// Starts with this prefix.
    Prefix(String),
    /// Matches this regular expression.
    Regex(Regex),
}

/// A routing rule.
#[derive(Debug, Clone)]
pub struct Route {
    /// Unique name.
    pub name: String,
    /// Host patterns; empty = any host.
    pub hosts: Vec<HostPattern>,
    /// Path rule.
    pub path: PathMatch,
    /// Allowed methods; empty = any.
    pub methods: Vec<http::Method>,
    /// Required header values (names lower-case).
    pub headers: Vec<(http::HeaderName, http::HeaderValue)>,
    /// Listener names; empty = all.
    pub listeners: Vec<String>,
    /// Index into [`Snapshot::upstreams`]; `None` when the route answers itself.
    pub upstream: Option<usize>,
    /// Client addresses allowed and refused on this route.
    pub acl: crate::Acl,
    /// The path rewrite before the request goes upstream.
    pub rewrite: Option<crate::Rewrite>,
    /// A redirect or fixed response instead of proxying.
    pub answer: Option<crate::Answer>,
    /// Header edits of the request sent upstream.
    pub request_headers: crate::HeaderEdits,
    /// Header edits of the response.
    pub response_headers: crate::HeaderEdits,
    /// `[route.rate_limit]`.
    pub rate_limit: Option<crate::RateLimit>,
    /// `[route.cache]`: responses stored in the shared cache.
    pub cache: Option<Arc<crate::RouteCache>>,
    /// `[[route.mirror]]`: copies of requests for other upstreams.
    pub mirrors: Vec<crate::Mirror>,
    /// Response compression for this route (`[compression]` with the route's overrides).
    pub compression: Arc<Compression>,
    /// When failed attempts are retried.
    pub retry: RetryPolicy,
    /// Shares of the traffic for other upstreams, checked in order.
    pub split: Vec<Split>,
    /// The key a weighted split hashes (a request without it uses the client address).
    pub split_on: HashKey,
    /// `[route.auth]`.
    pub auth: Option<Arc<crate::RouteAuth>>,
    /// `[route.cors]`.
    pub cors: Option<Arc<crate::Cors>>,
    /// The largest request body; `None`: the listener's.
    pub max_request_body: Option<u64>,
    /// Read the whole request body before going upstream.
    pub request_buffering: bool,
    /// Which spelling of the path goes upstream: the normalized one every decision was
    /// made on (default), or the client's own.
    pub forward_path: crate::ForwardPath,
    /// `[route.lua]`.
    pub lua: Option<Arc<crate::RouteLua>>,
    /// `[route.waf]`.
    pub waf: Option<Arc<crate::RouteWaf>>,
    /// `[route.mqtt]`: the route answers WebSocket upgrades asking for MQTT itself and relays
    /// each device to its broker (`upstream` is the route's; no credentials or rates of its
    /// own: the route's `[route.auth]` and `[route.rate_limit]` check the upgrade).
    pub mqtt: Option<Arc<MqttProxy>>,
}

/// One `[[route.split]]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Split {
    /// Index into [`Snapshot::upstreams`].
    pub upstream: usize,
    /// Share of the matching requests in basis points (10,000 = all).
    pub basis_points: u32,
    /// Headers (names lower-case) that must have these values.
    pub headers: Vec<(http::HeaderName, http::HeaderValue)>,
    /// Cookies that must have these values.
    pub cookies: Vec<(String, String)>,
    /// Query arguments that must have these values (as sent, percent-encoded).
    pub query: Vec<(String, String)>,
}

/// `[route.retry]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Tries in all, the first included.
    pub attempts: NonZeroU32,
    /// Retry when the connection could not be made.
    pub on_connect: bool,
    /// Retry when the connection broke before a response.
    pub on_reset: bool,
    /// Retry when response headers did not come within the per-try timeout.
    pub on_timeout: bool,
    /// Retry on a 5xx response.
    pub on_5xx: bool,
    /// Retry non-idempotent methods too (never requests with a body).
    pub non_idempotent: bool,
    /// Wait before the first retry (doubled for each next one, full jitter).
    pub backoff: Duration,
    /// Cap of that wait.
    pub backoff_max: Duration,
    /// Deadline of one try; `None`: the upstream's `response_timeout`.
    pub per_try_timeout: Option<Duration>,
    /// Deadline of all tries; `None`: no overall deadline.
    pub timeout: Option<Duration>,
}

impl Default for RetryPolicy {
    /// One retry on connect failure or reset, at once: what Sluice did before `[route.retry]`.
    fn default() -> Self {
        RetryPolicy {
            attempts: NonZeroU32::new(2).expect("positive"),
            on_connect: true,
            on_reset: true,
            on_timeout: false,
            on_5xx: false,
            non_idempotent: false,
            backoff: Duration::ZERO,
            backoff_max: Duration::from_millis(250),
            per_try_timeout: None,
            timeout: None,
        }
    }
}

/// `max_header_fields`' default: 100, the limit of Apache (`LimitRequestFields`), Envoy and
/// hyper (HAProxy's is 101). NGINX counts none and bounds the head by its bytes alone
/// (`large_client_header_buffers`, `max_header_bytes` here); no browser or common client
/// sends near 100, so a larger default would only let a head hold more work per byte.
pub(crate) const DEFAULT_MAX_HEADER_FIELDS: usize = 100;

/// `max_header_fields`' largest value: below `http::HeaderMap`'s capacity (32,768 entries)
/// with room for the fields the gateway adds.
pub(crate) const MAX_HEADER_FIELDS_LIMIT: usize = 10_000;
