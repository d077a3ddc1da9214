//! The raw schema: what a configuration file may say, exactly as written.
//!
//! Every struct rejects unknown keys, so a typo is an error rather than a silently ignored
//! setting. Values that later checks need to point at are [`Spanned`] so that an error can name
//! their line and column. Defaults are applied in validation, not here, so that the
//! difference between "absent" and "set to the default" stays visible.

use serde::Deserialize;
use std::collections::BTreeMap;
use toml::Spanned;

mod auth;
mod lua;
mod mqtt;
mod rate_limit;
mod size;
mod waf;
pub use auth::*;
pub use lua::*;
pub use mqtt::*;
pub use rate_limit::*;
pub use size::RawSize;
pub use waf::*;

/// A string that names a duration (`"30s"`) or a size (`"16k"`), kept with its position.
pub type SpannedStr = Spanned<String>;

/// `[global]`: process-wide settings.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawGlobal {
    /// How long in-flight requests may take to finish after SIGTERM/SIGINT.
    pub shutdown_timeout: Option<SpannedStr>,
    /// After `sluice upgrade`: how long the old process keeps relaying its TCP and MQTT
    /// connections.
    pub stream_drain_timeout: Option<SpannedStr>,
}

/// `[resolver]`: the DNS servers and timing of upstreams with `resolve = true`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawResolver {
    /// `ip:port` (or `ip`, port 53) of each DNS server; default: `/etc/resolv.conf`'s.
    pub servers: Option<Spanned<Vec<String>>>,
    /// Never re-resolve sooner than this, whatever the TTL says.
    pub min_ttl: Option<SpannedStr>,
    /// Re-resolve at least this often, whatever the TTL says.
    pub max_ttl: Option<SpannedStr>,
    /// Deadline of one resolution.
    pub timeout: Option<SpannedStr>,
}

/// `[log]`: diagnostics and the access log.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLog {
    /// tracing filter for diagnostics, such as `"info"` or `"sluice_proxy=debug"`.
    pub level: Option<Spanned<String>>,
    /// `"stdout"`, `"stderr"`, `"off"` or a file path to append to.
    pub access_log: Option<Spanned<String>>,
    /// `"text"` or `"json"`.
    pub access_format: Option<Spanned<String>>,
    /// Longest a line waits in memory before it is written (default 200ms); `"0s"` writes
    /// each line as it is logged.
    pub access_flush: Option<SpannedStr>,
    /// Memory for the most recent requests that `/api/v1/requests` searches (default 8m);
    /// 0 keeps none.
    pub request_log: Option<Spanned<RawSize>>,
    /// `[[log.ship]]`: log stores and syslog servers that receive every access log line.
    pub ship: Option<Vec<RawLogShip>>,
}

/// `[[log.ship]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLogShip {
    /// Its name in metrics and `/status` (default `ship-N`).
    pub name: Option<Spanned<String>>,
    /// `http(s)://host:port/path` (batches POSTed), `udp://host:port` or `tcp://host:port`
    /// (syslog, RFC 5424).
    pub url: Spanned<String>,
    /// HTTP only: `"json_lines"` (default), `"elasticsearch"` (the `_bulk` API) or `"otlp"`.
    pub format: Option<Spanned<String>>,
    /// `format = "otlp"`: `"http/protobuf"` (default) or `"grpc"`.
    pub protocol: Option<Spanned<String>>,
    /// `format = "elasticsearch"`: the index (default "sluice").
    pub index: Option<Spanned<String>>,
    /// HTTP only: headers sent with every batch.
    pub headers: Option<BTreeMap<String, Spanned<String>>>,
    /// `https://` and `tls://` only: a PEM file of the CAs trusted for the store (default:
    /// the system's).
    pub ca: Option<SpannedStr>,
    /// `https://` and `tls://` only: a PEM certificate presented to the store (mutual TLS).
    pub client_cert: Option<SpannedStr>,
    /// Its key (PEM, mode 0600).
    pub client_key: Option<SpannedStr>,
    /// Syslog only: the facility (default "local0").
    pub facility: Option<Spanned<String>>,
    /// Syslog only: APP-NAME (default "sluice").
    pub app_name: Option<Spanned<String>>,
    /// Bytes waiting to be sent at most (default 8m); beyond, lines are dropped and counted.
    pub queue: Option<Spanned<RawSize>>,
    /// Lines in one HTTP batch at most (default 1000).
    pub batch: Option<Spanned<u32>>,
    /// Longest a line waits for its batch to fill (default 1s).
    pub flush: Option<SpannedStr>,
    /// Deadline of one send (default 5s).
    pub timeout: Option<SpannedStr>,
}

/// `[dangerous]`: switches that weaken security, kept apart so they stand out in review.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDangerous {
    /// Accept private key files that group or others may read.
    pub allow_insecure_key_permissions: Option<bool>,
}

/// `[config]`: where the fleet's shared objects come from (fleet mode).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfigSource {
    /// `"file"` (default: everything in this file) or `"etcd"`.
    pub source: Option<Spanned<String>>,
    /// etcd endpoints, `host:port` or `http(s)://host:port`.
    pub endpoints: Option<Spanned<Vec<String>>>,
    /// The key prefix of this fleet's objects (default `/sluice`).
    pub prefix: Option<Spanned<String>>,
    /// Where the last good set of shared objects is kept, to start while etcd is down.
    pub cache_file: Option<Spanned<String>>,
    /// CA certificate (PEM) that etcd's server certificate must chain to (TLS to etcd).
    pub ca: Option<Spanned<String>>,
    /// Client certificate (PEM) for etcd's mutual TLS.
    pub cert: Option<Spanned<String>>,
    /// The client certificate's private key.
    pub key: Option<Spanned<String>>,
    /// etcd user (with `password_file`).
    pub user: Option<Spanned<String>>,
    /// File with the etcd user's password (mode 0600).
    pub password_file: Option<Spanned<String>>,
    /// Keyring file: `ID HEX32` lines; the first key seals private keys stored in etcd.
    pub keyring: Option<Spanned<String>>,
    /// How often the fleet's session ticket key rotates (default 12h).
    pub ticket_key_rotation: Option<SpannedStr>,
    /// Deadline of one etcd request (default 5s).
    pub timeout: Option<SpannedStr>,
}

/// `[[listener]]`: one socket that accepts client connections.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawListener {
    /// Unique name, used in logs and by routes.
    pub name: Spanned<String>,
    /// `ip:port` to bind.
    pub address: Spanned<String>,
    /// Application protocols offered: `"h2"` and/or `"http/1.1"`.
    pub protocols: Option<Spanned<Vec<String>>>,
    /// Present for an HTTPS listener.
    pub tls: Option<RawListenerTls>,
    /// Client must send its complete request head within this time (→ connection closed).
    pub header_read_timeout: Option<SpannedStr>,
    /// An idle keep-alive connection is closed after this time.
    pub keepalive_timeout: Option<SpannedStr>,
    /// Largest request head (request line and headers) accepted (→ 431).
    pub max_header_bytes: Option<Spanned<RawSize>>,
    /// Most header fields in a request head accepted (→ 431; default 100).
    pub max_header_fields: Option<Spanned<u32>>,
    /// Largest request body accepted (→ 413).
    pub max_body_bytes: Option<Spanned<RawSize>>,
    /// Also send the RFC 7239 `Forwarded` header upstream.
    pub forwarded_header: Option<bool>,
    /// Collapse runs of `/` in request paths before routing (NGINX's `merge_slashes`;
    /// default true).
    pub merge_slashes: Option<Spanned<bool>>,
    /// An encoded `/`, `\` or NUL in a request path: `"reject"` (400, the default), `"keep"`
    /// or `"decode"` (Envoy's `path_with_escaped_slashes_action`).
    pub escaped_slashes: Option<Spanned<String>>,
    /// Serve HTTP/3 over QUIC on the same address (UDP), beside HTTPS.
    pub http3: Option<Spanned<bool>>,
    /// QUIC address validation: `"auto"`, `"always"` or `"off"`.
    pub quic_retry: Option<Spanned<String>>,
    /// A QUIC connection with nothing sent either way for this long is closed.
    pub quic_idle_timeout: Option<SpannedStr>,
    /// Requests (bidirectional streams) a QUIC client may have open at once.
    pub quic_max_streams: Option<Spanned<u32>>,
    /// Peers (CIDRs) whose `X-Forwarded-For` is believed for the client address, and whose
    /// `X-Request-Id` is kept.
    pub trusted_proxies: Option<Vec<Spanned<String>>>,
    /// Client addresses (CIDRs) allowed; everyone when absent.
    pub allow: Option<Vec<Spanned<String>>>,
    /// Client addresses (CIDRs) refused with 403; checked before `allow`.
    pub deny: Option<Vec<Spanned<String>>>,
    /// Give every request an `X-Request-Id` (default true).
    pub request_id: Option<Spanned<bool>>,
    /// Open connections at most; more are closed at accept (default: no limit).
    pub max_connections: Option<Spanned<u32>>,
    /// Open connections per client address at most (default: no limit).
    pub max_connections_per_client: Option<Spanned<u32>>,
    /// `"http"` (the default), `"tcp"` (a layer-4 listener that proxies bytes) or `"mqtt"`
    /// (a layer-4 listener that reads each connection's MQTT CONNECT first).
    pub kind: Option<Spanned<String>>,
    /// A TCP listener's upstream group (for a passthrough listener: server names not listed).
    pub upstream: Option<Spanned<String>>,
    /// A TCP listener that routes TLS by the ClientHello's server name without terminating
    /// it: server name (exact or `*.` wildcard) to upstream group.
    pub passthrough: Option<Spanned<std::collections::BTreeMap<String, Spanned<String>>>>,
    /// A TCP connection with no byte either way for this long is closed (default 10m).
    pub idle_timeout: Option<SpannedStr>,
    /// Expect a PROXY protocol header (v1 or v2) from `trusted_proxies` before anything else.
    pub proxy_protocol: Option<Spanned<bool>>,
    /// `[listener.mqtt]`: what a `kind = "mqtt"` listener reads of each connection's CONNECT.
    pub mqtt: Option<Spanned<RawListenerMqtt>>,
    /// Keep request header fields whose names contain `_` (NGINX's `underscores_in_headers`;
    /// default false: they are dropped).
    pub underscores_in_headers: Option<Spanned<bool>>,
}

/// `[listener.tls]`: makes a listener HTTPS.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawListenerTls {
    /// Names of `[[certificate]]` entries served here; all of them when absent.
    pub certificates: Option<Vec<Spanned<String>>>,
    /// Certificate served when SNI is missing or matches nothing; the first one when absent.
    pub default_certificate: Option<Spanned<String>>,
    /// `"default"` (serve the default certificate) or `"reject"` (fail the handshake).
    pub unknown_sni: Option<Spanned<String>>,
    /// `"1.2"` or `"1.3"`.
    pub min_version: Option<Spanned<String>>,
    /// `"1.2"` or `"1.3"`.
    pub max_version: Option<Spanned<String>>,
    /// Issue session tickets for resumption (on by default).
    pub session_tickets: Option<bool>,
    /// File with one or more 80-byte ticket keys (NGINX's format) shared by several instances.
    pub ticket_key_file: Option<Spanned<String>>,
    /// How often ticket keys rotate (generated keys) or the key file is re-read.
    pub ticket_key_rotation: Option<SpannedStr>,
    /// Also offer TLS 1.2 RSA key exchange (`TLS_RSA_WITH_AES_*_GCM_*`) for old clients.
    pub rsa_key_exchange: Option<Spanned<bool>>,
    /// Key-exchange groups in preference order, named as OpenSSL and NGINX's
    /// `ssl_ecdh_curve` spell them (`X25519MLKEM768`, `X25519`, `P-256`/`prime256v1`, ...).
    pub groups: Option<Spanned<Vec<String>>>,
    /// Client certificates (NGINX's `ssl_verify_client`): `"off"` (default), `"optional"`
    /// or `"required"`.
    pub client_auth: Option<Spanned<String>>,
    /// PEM of the CAs client certificates must chain to (with `client_auth`).
    pub client_ca: Option<SpannedStr>,
    /// PEM CRLs of those CAs: a client certificate, or a CA certificate of its chain, that
    /// its issuer's CRL revokes is refused.
    pub client_crl: Option<SpannedStr>,
    /// With `client_crl`, a certificate of the chain whose issuer has no CRL there:
    /// `"refuse"` (default, as NGINX's `ssl_crl`) or `"allow"`.
    pub client_crl_missing: Option<Spanned<String>>,
    /// Send the verified client certificate's details upstream in
    /// `X-Forwarded-Client-Cert` (Envoy's format; default false). A client's own copy of the
    /// header is removed either way.
    pub forward_client_cert: Option<Spanned<bool>>,
}

/// `[[certificate]]`: a certificate chain and its private key.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCertificate {
    /// Unique name, used by listeners.
    pub name: Spanned<String>,
    /// PEM file: the leaf certificate first, then intermediates. Absent with `acme`.
    pub cert: Option<Spanned<String>>,
    /// PEM file with the private key (mode 0600 or stricter). Omitted: the key lives on key
    /// servers only, and the certificate's engines must include `"keyless"`.
    pub key: Option<Spanned<String>>,
    /// Host names (exact or `*.` wildcard) this certificate is served for; by default the
    /// names in its subjectAltName.
    pub hosts: Option<Vec<Spanned<String>>>,
    /// This certificate's private-key engines, instead of `[offload.crypto] engines`.
    pub offload_engines: Option<Spanned<Vec<String>>>,
    /// Obtained and renewed from an ACME CA instead of read from `cert`/`key`.
    pub acme: Option<Spanned<RawCertAcme>>,
    /// `"auto"` (default: staple the issuer's OCSP response when the certificate names a
    /// responder) or `"off"`.
    pub ocsp: Option<Spanned<String>>,
    /// For the names this certificate serves, `"off"`, `"optional"` or `"required"` instead
    /// of its listener's `client_auth` (the listener's `client_ca` verifies).
    pub client_auth: Option<Spanned<String>>,
}

/// `acme = { names = [...], ... }` of a `[[certificate]]`: what to order; unset fields come
/// from `[acme]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCertAcme {
    /// The DNS names the certificate is for (the first is its subject).
    pub names: Spanned<Vec<String>>,
    /// The CA's ACME directory URL.
    pub directory: Option<Spanned<String>>,
    /// Contact address given to the CA.
    pub email: Option<Spanned<String>>,
    /// `"http-01"` or `"tls-alpn-01"`.
    pub challenge: Option<Spanned<String>>,
    /// PEM file of the CA that the ACME server's own HTTPS certificate chains to.
    pub ca: Option<Spanned<String>>,
    /// Renew this long before the certificate expires.
    pub renew_before: Option<SpannedStr>,
    /// `"ecdsa"` (P-256) or `"rsa"` (2048 bits).
    pub key_type: Option<Spanned<String>>,
    /// Where dns-01 answers go (RFC 2136 with TSIG).
    pub dns: Option<Spanned<RawAcmeDns>>,
    /// External Account Binding.
    pub eab: Option<Spanned<RawAcmeEab>>,
}

/// `dns = { server, key_name, secret | secret_file, ... }`: RFC 2136 updates for dns-01.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAcmeDns {
    /// `host[:port]` of the primary server that takes updates.
    pub server: Spanned<String>,
    /// The zone (default: found by SOA queries to the server).
    pub zone: Option<Spanned<String>>,
    /// The TSIG key's name (default: the name in `secret_file`'s `key` clause).
    pub key_name: Option<Spanned<String>>,
    /// `hmac-sha256` (default), `hmac-sha384` or `hmac-sha512`.
    pub algorithm: Option<Spanned<String>>,
    /// The TSIG secret in base64.
    pub secret: Option<Spanned<String>>,
    /// A file holding the secret in base64, or a BIND/Knot `key "name" { ... };` clause.
    pub secret_file: Option<Spanned<String>>,
    /// Wait after the update before asking the CA to validate (default `0s`).
    pub propagation_delay: Option<SpannedStr>,
}

/// `eab = { kid, hmac_key | hmac_key_file }`: External Account Binding.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAcmeEab {
    /// The key identifier the CA gave.
    pub kid: Spanned<String>,
    /// The HMAC key in base64url, as the CA gives it.
    pub hmac_key: Option<Spanned<String>>,
    /// A file holding it.
    pub hmac_key_file: Option<Spanned<String>>,
}

/// `[acme]`: where ACME accounts and certificates are kept, and the defaults of every
/// certificate's `acme = { ... }`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAcme {
    /// Directory of accounts and certificates (default `acme` beside the configuration file).
    pub storage: Option<Spanned<String>>,
    /// Default ACME directory URL (Let's Encrypt's production one).
    pub directory: Option<Spanned<String>>,
    /// Default contact address.
    pub email: Option<Spanned<String>>,
    /// Default challenge.
    pub challenge: Option<Spanned<String>>,
    /// Default CA for the ACME server's HTTPS certificate.
    pub ca: Option<Spanned<String>>,
    /// Default renewal margin (30 days).
    pub renew_before: Option<SpannedStr>,
    /// Default key type.
    pub key_type: Option<Spanned<String>>,
    /// Default dns-01 update server and key.
    pub dns: Option<Spanned<RawAcmeDns>>,
    /// Default External Account Binding.
    pub eab: Option<Spanned<RawAcmeEab>>,
    /// First wait after a failed order; doubled after each failure.
    pub retry_min: Option<SpannedStr>,
    /// Longest wait between failed orders.
    pub retry_max: Option<SpannedStr>,
}

/// `[upstream.tls]`: the group's servers speak TLS.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawUpstreamTls {
    /// SNI, and the name the server's certificate must carry; default: the server's
    /// address (its IP must then be in the certificate).
    pub server_name: Option<Spanned<String>>,
    /// PEM file of the CA certificates that may sign the servers' certificates; default:
    /// the system's roots.
    pub ca: Option<Spanned<String>>,
    /// Check the server's certificate (default true; false only for testing).
    pub verify: Option<Spanned<bool>>,
    /// A PEM certificate presented to servers that ask for one (mutual TLS).
    pub client_cert: Option<SpannedStr>,
    /// Its key (PEM, mode 0600).
    pub client_key: Option<SpannedStr>,
}

/// `[[upstream]]`: a group of servers and how to balance across them.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawUpstream {
    /// Unique name, used by routes.
    pub name: Spanned<String>,
    /// The servers.
    pub servers: Spanned<Vec<RawServer>>,
    /// `"round_robin"`, `"weighted_round_robin"`, `"least_conn"`, `"ip_hash"`,
    /// `"consistent_hash"` or `"peak_ewma"`.
    pub balance: Option<Spanned<String>>,
    /// Key of `consistent_hash`: `"header:NAME"`, `"cookie:NAME"`, `"query:NAME"`, `"uri"` or
    /// `"client"` (the default).
    pub hash_on: Option<Spanned<String>>,
    /// Bounded load of `consistent_hash` (default 1.25; 0 turns the bound off).
    pub hash_balance_factor: Option<Spanned<f64>>,
    /// `"http1"` or `"h2"` (cleartext HTTP/2 with prior knowledge).
    pub protocol: Option<Spanned<String>>,
    /// Open each server connection with a PROXY protocol header: `"v1"` or `"v2"`.
    pub send_proxy_protocol: Option<Spanned<String>>,
    /// `[upstream.tls]`: TLS to the servers.
    pub tls: Option<Spanned<RawUpstreamTls>>,
    /// `"pass"` (client's Host), `"node"` (server address) or `"rewrite"` (`upstream_host`).
    pub pass_host: Option<Spanned<String>>,
    /// The Host sent when `pass_host = "rewrite"`.
    pub upstream_host: Option<Spanned<String>>,
    /// Time allowed to open a TCP connection to one server (→ next server, then 502).
    pub connect_timeout: Option<SpannedStr>,
    /// Time allowed for a server to send response headers (→ 504).
    pub response_timeout: Option<SpannedStr>,
    /// Failures before a server is skipped.
    pub max_fails: Option<Spanned<u32>>,
    /// How long a failed server is skipped.
    pub fail_timeout: Option<SpannedStr>,
    /// Idle pooled connections kept per server.
    pub keepalive: Option<Spanned<u32>>,
    /// How long a pooled connection may stay idle.
    pub keepalive_timeout: Option<SpannedStr>,
    /// `[upstream.sticky]`: keep a client on its server with a signed cookie.
    pub sticky: Option<Spanned<RawSticky>>,
    /// `[upstream.health_check]`: active checks of every server.
    pub health_check: Option<Spanned<RawHealthCheck>>,
    /// `[upstream.outlier]`: eject servers that fail live traffic.
    pub outlier: Option<Spanned<RawOutlier>>,
    /// Retries to this upstream stay under this percentage of its requests over 10 s
    /// (default 20).
    pub retry_budget_percent: Option<Spanned<u32>>,
    /// Retries allowed beyond the percentage, per second (default 10), so that a quiet
    /// upstream can still be retried.
    pub retry_budget_min_per_second: Option<Spanned<u32>>,
    /// Requests in flight per server at most (NGINX's `max_conns`; default: no limit).
    pub max_conns: Option<Spanned<u32>>,
    /// Requests that may wait for a server under `max_conns` (default 0: none wait, 503).
    pub queue: Option<Spanned<u32>>,
    /// How long a request may wait in that queue (default 10s), then 503.
    pub queue_timeout: Option<SpannedStr>,
}

/// `[upstream.outlier]`: outlier ejection from live traffic (Envoy's), beside `max_fails`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawOutlier {
    /// Consecutive 5xx responses, connect errors or timeouts that eject a server (default 5).
    pub consecutive_failures: Option<Spanned<u32>>,
    /// First ejection's length; the n-th lasts n times as long (default 30s).
    pub base_ejection: Option<SpannedStr>,
    /// Longest ejection (default 300s).
    pub max_ejection: Option<SpannedStr>,
    /// Most of the group ejected at once, in percent (default 50; one server at least).
    pub max_ejected_percent: Option<Spanned<u32>>,
}

/// `[upstream.health_check]`: one checker per upstream probes every server.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHealthCheck {
    /// `"http"` (default) or `"tcp"` (connect only).
    #[serde(rename = "type")]
    pub kind: Option<Spanned<String>>,
    /// HTTP: the path requested (default `/`).
    pub path: Option<Spanned<String>>,
    /// HTTP: the Host sent (default: the server's address).
    pub host: Option<Spanned<String>>,
    /// HTTP: statuses that pass: `"200"`, `"200-399"` or `"2xx"` (default `["200-399"]`).
    pub statuses: Option<Vec<Spanned<String>>>,
    /// HTTP: text the body must contain.
    pub body: Option<Spanned<String>>,
    /// Time between checks of a server (default 5s).
    pub interval: Option<SpannedStr>,
    /// Time allowed for one check (default 2s).
    pub timeout: Option<SpannedStr>,
    /// Consecutive passes that bring a down server back (default 2).
    pub healthy: Option<Spanned<u32>>,
    /// Consecutive failures that take a server out (default 3).
    pub unhealthy: Option<Spanned<u32>>,
}

/// `[upstream.sticky]`: the gateway sets a cookie naming the server it chose, signed so that a
/// client cannot choose one itself.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSticky {
    /// The cookie's name (default `sluice_server`).
    pub cookie: Option<Spanned<String>>,
    /// The cookie's `Max-Age`; a session cookie when absent.
    pub max_age: Option<SpannedStr>,
    /// A file of at least 32 random bytes that signs the cookies: the same file on every
    /// gateway of a fleet lets any of them honour another's cookie. Absent: a random key per
    /// process (cookies outlive reloads, not restarts).
    pub key_file: Option<Spanned<String>>,
}

/// One server of an upstream group.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawServer {
    /// `host:port`; names are resolved once at load unless `resolve`.
    pub address: Spanned<String>,
    /// Relative share of requests for weighted balancing (default 1).
    pub weight: Option<Spanned<u32>>,
    /// Follow the name in DNS: every A/AAAA record a server, re-resolved in the background.
    pub resolve: Option<Spanned<bool>>,
    /// With `resolve`: follow the name's SRV records for this service instead (NGINX Plus's
    /// `service=`): `http` asks for `_http._tcp.<address>`; a name with a dot as it is.
    pub service: Option<Spanned<String>>,
}

/// `[[route]]`: which requests go to which upstream.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRoute {
    /// Unique name, used in logs.
    pub name: Spanned<String>,
    /// Host patterns; a route without hosts is a default route for any host.
    pub hosts: Option<Vec<Spanned<String>>>,
    /// Matches this path exactly.
    pub path_exact: Option<Spanned<String>>,
    /// Matches paths starting with this prefix (longest prefix wins).
    pub path_prefix: Option<Spanned<String>>,
    /// Matches paths by regular expression (checked in file order, before prefixes).
    pub path_regex: Option<Spanned<String>>,
    /// Allowed methods; any when absent.
    pub methods: Option<Vec<Spanned<String>>>,
    /// Headers that must be present with exactly these values.
    pub headers: Option<BTreeMap<String, Spanned<String>>>,
    /// Listener names this route applies to; all when absent.
    pub listeners: Option<Vec<Spanned<String>>>,
    /// The upstream group that serves the route (not needed with `redirect` or `respond`).
    pub upstream: Option<Spanned<String>>,
    /// `[route.compression]`: overrides of `[compression]` for this route.
    pub compression: Option<RawCompression>,
    /// `[route.retry]`: when a failed attempt is sent again to another server.
    pub retry: Option<Spanned<RawRetry>>,
    /// `[[route.split]]`: shares of the route's traffic for other upstreams (canary, beta);
    /// the first that applies wins, the rest goes to `upstream`.
    pub split: Option<Vec<Spanned<RawSplit>>>,
    /// What a weighted split hashes, so that a user stays on one side: `"header:NAME"`,
    /// `"cookie:NAME"`, `"query:NAME"` or `"client"` (default).
    pub split_on: Option<Spanned<String>>,
    /// Client addresses (CIDRs) allowed on this route; everyone when absent.
    pub allow: Option<Vec<Spanned<String>>>,
    /// Client addresses (CIDRs) refused with 403 on this route; checked before `allow`.
    pub deny: Option<Vec<Spanned<String>>>,
    /// A path prefix removed before the request goes upstream.
    pub strip_prefix: Option<Spanned<String>>,
    /// A regular-expression rewrite of the path sent upstream.
    pub rewrite: Option<Spanned<RawRewrite>>,
    /// `"normalized"` (default: the path every decision was made on goes upstream) or
    /// `"original"` (the path as the client sent it).
    pub forward_path: Option<Spanned<String>>,
    /// Answer with a redirect instead of proxying.
    pub redirect: Option<Spanned<RawRedirect>>,
    /// Answer with a fixed response instead of proxying.
    pub respond: Option<Spanned<RawRespond>>,
    /// Headers set, added or removed on the request sent upstream.
    pub request_headers: Option<Spanned<RawHeaderEdits>>,
    /// Headers set, added or removed on the response sent to the client.
    pub response_headers: Option<Spanned<RawHeaderEdits>>,
    /// `[route.rate_limit]`: requests per second per client (or key), with a burst.
    pub rate_limit: Option<Spanned<RawRateLimit>>,
    /// `[route.cache]`: store responses (and their encoded variants) in the shared cache;
    /// an empty table caches with the defaults.
    pub cache: Option<Spanned<RawRouteCache>>,
    /// `[[route.mirror]]`: copies of a share of the requests for other upstreams, whose
    /// answers are read and discarded (shadow testing).
    pub mirror: Option<Vec<Spanned<RawMirror>>>,
    /// `[route.auth]`: JWT, API keys, basic or forward authentication.
    pub auth: Option<Spanned<RawAuth>>,
    /// `[route.cors]`: cross-origin requests, preflights answered at the edge.
    pub cors: Option<Spanned<RawCors>>,
    /// The largest request body (default the listener's `max_body_bytes`): 413 beyond it.
    pub max_request_body: Option<Spanned<RawSize>>,
    /// Read the whole request body before going upstream (NGINX's
    /// `proxy_request_buffering`; default false: streamed).
    pub request_buffering: Option<Spanned<bool>>,
    /// `[route.lua]`: scripts at the request path's phases.
    pub lua: Option<Spanned<RawRouteLua>>,
    /// `[route.waf]`: the web application firewall's rule set for this route.
    pub waf: Option<Spanned<RawRouteWaf>>,
    /// `[route.mqtt]`: MQTT over WebSocket, each device sent to the broker of the route's
    /// upstream its client identifier hashes to.
    pub mqtt: Option<Spanned<RawRouteMqtt>>,
}

/// `[[route.mirror]]`: NGINX's `mirror`, Envoy's request mirror policy.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMirror {
    /// The upstream group the copies go to.
    pub upstream: Spanned<String>,
    /// Percentage of the (matching) requests copied, e.g. 10 or 0.5 (default 100): a hash of
    /// the request ID, so the same requests every time.
    pub percent: Option<Spanned<f64>>,
    /// Request headers that must have these values for a request to be copied.
    pub header: Option<BTreeMap<String, Spanned<String>>>,
    /// Largest request body copied (default 1m); a request with a larger one is not copied
    /// (counted).
    pub body_limit: Option<Spanned<RawSize>>,
    /// How long a copy may take, its response read to the end (default 1s).
    pub timeout: Option<SpannedStr>,
    /// Copies in flight to this mirror at most (default 64); beyond it they are skipped.
    pub max_in_flight: Option<Spanned<u32>>,
    /// Headers set, added or removed on the copies (such as a marker header).
    pub request_headers: Option<Spanned<RawHeaderEdits>>,
}

/// `[route.cache]`: RFC 9111 caching of this route's responses.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRouteCache {
    /// Lifetime of responses that give none (no `max-age`, `s-maxage` or `Expires`);
    /// default: RFC 9111's heuristic (10% of the time since `Last-Modified`) or none.
    pub default_ttl: Option<SpannedStr>,
    /// Store responses to requests with `Authorization` (default false: only when the
    /// response says `public`, `s-maxage` or `must-revalidate`).
    pub allow_authorization: Option<Spanned<bool>>,
    /// Store responses that set cookies (default false).
    pub allow_set_cookie: Option<Spanned<bool>>,
    /// How long concurrent misses of one key wait for the first one's fetch before they go
    /// upstream themselves (NGINX's `proxy_cache_lock_timeout`; default 5s).
    pub lock_timeout: Option<SpannedStr>,
    /// Re-encode a compressed variant at its codec's best level in the background after
    /// it was served this many times (default 16; 0 never).
    pub upgrade_after: Option<Spanned<u32>>,
    /// Send RFC 9211 `Cache-Status` (`sluice; hit; ttl=42`, `sluice; fwd=miss;
    /// fwd-status=200; stored`; default true).
    pub cache_status: Option<Spanned<bool>>,
    /// What the cache key holds besides the host and path: `"query"` (the whole query
    /// string), `"query:NAME"`, `"header:NAME"`, `"cookie:NAME"` (default `["query"]`).
    pub key: Option<Spanned<Vec<Spanned<String>>>>,
    /// Request parts (`"header:NAME"`, `"cookie:NAME"`, `"query:NAME"`) that, present with a
    /// value other than empty or `0`, bypass the cache: not looked up, not stored.
    pub bypass: Option<Spanned<Vec<Spanned<String>>>>,
    /// The response header that says how the request was answered (`HIT`, `MISS`, …);
    /// default `X-Cache`, `""` for none.
    pub status_header: Option<Spanned<String>>,
}

/// `[cache]`: the response cache every `[route.cache]` shares.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCache {
    /// The most bytes the stored responses and their variants take (default 256m).
    pub max_size: Option<Spanned<RawSize>>,
    /// The largest response stored, with its variants (default an eighth of `max_size`: one
    /// object must not empty the cache).
    pub max_object_size: Option<Spanned<RawSize>>,
    /// The share of a busy core the background upgrades may take, in percent (1-100,
    /// default 1: nice 19); an idle core they take whole.
    pub upgrade_share_percent: Option<Spanned<u32>>,
    /// `[cache.disk]`: a second tier on disk that survives restarts.
    pub disk: Option<Spanned<RawCacheDisk>>,
}

/// `[tracing]`: OpenTelemetry spans to a collector.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTracing {
    /// The collector's OTLP/gRPC address, `http://host:4317`.
    pub endpoint: Spanned<String>,
    /// `service.name` of the spans (default "sluice").
    pub service_name: Option<Spanned<String>>,
    /// Percentage of traces started here (requests without a sampled parent), 0-100,
    /// fractions allowed (default 1); a parent's decision is followed.
    pub sample_percent: Option<Spanned<f64>>,
    /// Spans waiting for export at most (default 8192); beyond, dropped and counted.
    pub queue: Option<Spanned<u32>>,
    /// Deadline of one export (default 5s).
    pub export_timeout: Option<SpannedStr>,
    /// The operator's trace UI, `{trace_id}` replaced (the dashboard links trace IDs to it).
    pub trace_url: Option<Spanned<String>>,
    /// `"grpc"` (default) or `"http/protobuf"`.
    pub protocol: Option<Spanned<String>>,
    /// Headers (gRPC metadata) sent with every export.
    pub headers: Option<BTreeMap<String, Spanned<String>>>,
    /// `https://`: a PEM file of the CAs trusted for the collector.
    pub ca: Option<SpannedStr>,
    /// `https://`: a PEM certificate presented to the collector.
    pub client_cert: Option<SpannedStr>,
    /// Its key (PEM, mode 0600).
    pub client_key: Option<SpannedStr>,
}

/// `[cache.disk]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCacheDisk {
    /// The directory (created, mode 0700; relative to the configuration file).
    pub path: Spanned<String>,
    /// The most bytes its files take (default 1g).
    pub max_size: Option<Spanned<RawSize>>,
}

/// `rewrite = { regex = "^/old/(.*)$", replacement = "/new/$1" }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRewrite {
    /// Matched against the path.
    pub regex: Spanned<String>,
    /// The new path; `$1`, `${name}` are the captures.
    pub replacement: Spanned<String>,
}

/// `redirect = { location = "https://$host$request_uri", status = 301 }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRedirect {
    /// The `Location`, with variables.
    pub location: Spanned<String>,
    /// 301, 302, 303, 307 or 308 (default 302).
    pub status: Option<Spanned<u16>>,
}

/// `respond = { status = 200, body = "ok", content_type = "text/plain" }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRespond {
    /// The status (default 200).
    pub status: Option<Spanned<u16>>,
    /// The body, with variables (default empty).
    pub body: Option<Spanned<String>>,
    /// The `Content-Type` (default `text/plain; charset=utf-8`).
    pub content_type: Option<Spanned<String>>,
}

/// `request_headers` / `response_headers`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHeaderEdits {
    /// Replace (or create) these headers; values may hold variables.
    pub set: Option<BTreeMap<String, Spanned<String>>>,
    /// Append these headers.
    pub add: Option<BTreeMap<String, Spanned<String>>>,
    /// Remove these headers.
    pub remove: Option<Vec<Spanned<String>>>,
}

/// `[[route.split]]`: one upstream's share of a route, by weight, by match, or both.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSplit {
    /// The upstream that takes this share.
    pub upstream: Spanned<String>,
    /// Percentage of the (matching) requests, e.g. 5 or 0.5; all of them when absent.
    pub weight: Option<Spanned<f64>>,
    /// Request headers that must have these values.
    pub header: Option<BTreeMap<String, Spanned<String>>>,
    /// Cookies that must have these values.
    pub cookie: Option<BTreeMap<String, Spanned<String>>>,
    /// Query arguments that must have these values.
    pub query: Option<BTreeMap<String, Spanned<String>>>,
}

/// `[route.retry]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRetry {
    /// Tries in all, the first included (default 2).
    pub attempts: Option<Spanned<u32>>,
    /// What is retried: `"connect"`, `"reset"`, `"timeout"`, `"5xx"` (default connect and reset).
    pub on: Option<Vec<Spanned<String>>>,
    /// Retry POST, PATCH and the like too (default false); requests with a body never are.
    pub retry_non_idempotent: Option<Spanned<bool>>,
    /// Wait before the first retry, doubled for each next one, with full jitter (default 0s).
    pub backoff: Option<SpannedStr>,
    /// Longest wait between tries (default 250ms).
    pub backoff_max: Option<SpannedStr>,
    /// Deadline of one try for response headers (default: the upstream's response_timeout).
    pub per_try_timeout: Option<SpannedStr>,
    /// Deadline of all tries together (default: none beyond the tries' own).
    pub timeout: Option<SpannedStr>,
}

/// `[compression]` (defaults for every route) and `[route.compression]` (one route's
/// overrides): response compression with NGINX-like knobs.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCompression {
    /// Compress responses (NGINX's `gzip on`); off unless set.
    pub enabled: Option<bool>,
    /// Codings offered, in the server's order of preference: `"zstd"`, `"br"`, `"gzip"`.
    pub codecs: Option<Spanned<Vec<String>>>,
    /// gzip level: 1-9 with zlib-rs, 0-3 with ISA-L.
    pub gzip_level: Option<Spanned<u32>>,
    /// `"isal"` (ISA-L igzip, the default) or `"zlib-rs"`.
    pub gzip_backend: Option<Spanned<String>>,
    /// brotli quality, 0-11.
    pub brotli_level: Option<Spanned<u32>>,
    /// zstd level, 1-19.
    pub zstd_level: Option<Spanned<u32>>,
    /// Responses shorter than this are sent as they are (NGINX's `gzip_min_length`).
    pub min_length: Option<Spanned<RawSize>>,
    /// MIME types to compress; `text/*`-style wildcards and `"*"` allowed.
    pub types: Option<Spanned<Vec<String>>>,
    /// Input bytes per chunk job.
    pub chunk_size: Option<Spanned<RawSize>>,
    /// Bodies up to this size compress on the event loop, without a job.
    pub sw_threshold: Option<Spanned<RawSize>>,
    /// Prime each gzip chunk with the previous 32 KiB (better ratio, same independence).
    pub dictionary: Option<bool>,
    /// Decompress request bodies sent with `Content-Encoding: gzip` before forwarding.
    pub decompress_requests: Option<bool>,
    /// Largest decompressed request body (→ 413).
    pub max_decompressed_bytes: Option<Spanned<RawSize>>,
}

/// `[offload]`: the offload layer.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawOffload {
    /// `[offload.crypto]`: TLS private-key operations.
    pub crypto: Option<RawOffloadCrypto>,
    /// `[offload.compress]`: response compression chunks.
    pub compress: Option<RawOffloadCompress>,
    /// `[offload.keyless]`: remote key servers for the `keyless` engine.
    pub keyless: Option<RawOffloadKeyless>,
    /// `[offload.handshakes]`: TLS handshakes as a class of work below established traffic.
    pub handshakes: Option<RawOffloadHandshakes>,
}

/// `[offload.handshakes]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawOffloadHandshakes {
    /// Run TLS handshakes on threads of their own below established connections (default
    /// true); false: on the event loop, as before.
    pub isolate: Option<Spanned<bool>>,
    /// The CPU share (percent, 0-50) handshakes keep on a core that established traffic
    /// also wants (default 0: only cycles established traffic leaves).
    pub share_percent: Option<Spanned<u32>>,
    /// Handshakes in progress at once; more connections wait in the listen backlog.
    pub max_in_progress: Option<Spanned<u32>>,
}

/// `[offload.keyless]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawOffloadKeyless {
    /// Key servers, `host:port`, tried fewest-in-flight first.
    pub servers: Spanned<Vec<String>>,
    /// The name the key servers' certificates carry (default: the first server's host).
    pub server_name: Option<Spanned<String>>,
    /// PEM file with the CA (or the certificates themselves) that key servers' certificates
    /// chain to.
    pub ca: Spanned<String>,
    /// PEM file with this gateway's client certificate.
    pub certificate: Spanned<String>,
    /// PEM file with its key (mode 0600).
    pub key: Spanned<String>,
    /// Connections per key server (default 2).
    pub connections: Option<Spanned<u32>>,
    /// How long one attempt on one key server may take (default 50ms).
    pub timeout: Option<SpannedStr>,
    /// How often key servers are pinged and closed connections reopened (default 1s).
    pub ping_interval: Option<SpannedStr>,
    /// `"local"` (default: when no key server signs, the local key does, if the certificate
    /// has one) or `"none"` (never sign locally).
    pub fallback: Option<Spanned<String>>,
}

/// `[offload.compress]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawOffloadCompress {
    /// Engines tried in order before `inline`: `[]` or `["pool"]`.
    pub engines: Option<Spanned<Vec<String>>>,
    /// Threads of the `pool` engine (default: the CPUs this process may use).
    pub pool_threads: Option<Spanned<u32>>,
    /// Chunks the `pool` holds at once before it answers busy (default 16 per thread).
    pub pool_capacity: Option<Spanned<u32>>,
    /// How long an engine may take with a chunk before it runs elsewhere.
    pub deadline: Option<SpannedStr>,
}

/// `[offload.crypto]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawOffloadCrypto {
    /// Engines tried in order before the software `inline` engine: `[]`, `["pool"]`,
    /// `["mb", "pool"]` (AVX-512 IFMA multi-buffer RSA first)...
    pub engines: Option<Spanned<Vec<String>>>,
    /// Threads of the `pool` engine (default: the CPUs this process may use).
    pub pool_threads: Option<Spanned<u32>>,
    /// Jobs the `pool` engine holds at once before it answers busy (default 64 per thread).
    pub pool_capacity: Option<Spanned<u32>>,
    /// How long an engine may take before the job moves to the next one.
    pub deadline: Option<SpannedStr>,
    /// Consecutive failures that open an engine's circuit breaker.
    pub breaker_failures: Option<Spanned<u32>>,
    /// How long an open breaker waits before its probe.
    pub breaker_backoff: Option<SpannedStr>,
    /// `"rsa"` (the default: verify RSA signatures before release, against RSA-CRT faults) or
    /// `"all"` (ECDSA and Ed25519 too, at four to five times their signing cost).
    pub verify: Option<Spanned<String>>,
    /// Longest an `mb` job waits for company (default 200us; only applies when more
    /// handshakes could still add to the batch).
    pub mb_max_wait: Option<SpannedStr>,
    /// Jobs the `mb` engine queues at once before it answers busy (default 256).
    pub mb_capacity: Option<Spanned<u32>>,
    /// Batches smaller than this are signed one by one in software (default: where this
    /// CPU's measured costs put the line, since a batch costs the kernel a full batch's time
    /// however few lanes it uses: 8 on AMD Zen 4, 4 on an Intel Xeon).
    pub mb_min_batch: Option<Spanned<u32>>,
    /// `"thread"` (default: batches run on the mb engine's own thread) or `"worker"` (on the
    /// event-loop worker that submits the batch's last job).
    pub mb_run_on: Option<Spanned<String>>,
    /// `"auto"` (default: 8), `4` or `8`: lanes per RSA-2048 mb batch (256- or 512-bit IFMA).
    pub mb_lanes: Option<Spanned<toml::Value>>,
}

/// `[admin]`: the admin listener (`/metrics`, `/status`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAdmin {
    /// Serve it (default true).
    pub enabled: Option<bool>,
    /// Where (default 127.0.0.1:9901; keep it on loopback).
    pub address: Option<Spanned<String>>,
    /// File holding the bearer token that admin API writes need (mode 0600). Without it the
    /// admin listener only reads.
    pub token_file: Option<Spanned<String>>,
    /// File holding a token that only reads (`/metrics`, `/status`, the dashboard's data,
    /// `GET /api/v1/…`) from clients off loopback and outside `read_networks` (mode 0600).
    pub read_token_file: Option<Spanned<String>>,
    /// Networks whose clients read without a token (loopback always does).
    pub read_networks: Option<Vec<Spanned<String>>>,
    /// Serve an address off loopback without TLS (the token and `/status` in clear).
    pub insecure: Option<Spanned<bool>>,
    /// HTTPS for the admin listener.
    pub tls: Option<RawAdminTls>,
}

/// `[admin.tls]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAdminTls {
    /// PEM certificate chain, leaf first.
    pub certificate: Spanned<String>,
    /// Its key (mode 0600).
    pub key: Spanned<String>,
    /// CAs whose client certificates are required (mutual TLS); unset: none asked for.
    pub client_ca: Option<Spanned<String>>,
}

/// `[demo]`: the built-in demo origin, for trying Sluice out.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDemo {
    /// Where it listens, `ip:port`.
    pub address: Spanned<String>,
}
