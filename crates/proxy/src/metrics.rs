//! Counters of the data plane, read by the admin listener's `/metrics` and `/status`.

pub(crate) mod mirror;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// TLS versions counted separately.
pub const TLS_VERSIONS: [&str; 2] = ["TLSv1.2", "TLSv1.3"];
/// Status classes.
pub const STATUS_CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];
/// Upstream error kinds.
pub const UPSTREAM_ERRORS: [&str; 3] = ["connect", "timeout", "error"];

/// What the data plane counted since start.
#[derive(Debug, Default)]
pub struct ProxyMetrics {
    /// [version][resumed]
    handshakes: [[AtomicU64; 2]; 2],
    handshake_failures: AtomicU64,
    requests: [AtomicU64; 5],
    upstream_errors: [AtomicU64; 3],
    /// Retries sent, and retries the budget refused.
    retries: [AtomicU64; 2],
    /// Requests refused by a listener's or route's `allow`/`deny`.
    denied: AtomicU64,
    /// Connections closed at accept: over `max_connections`, over the per-client limit.
    refused: [AtomicU64; 2],
    /// TCP listeners' connections by [`TCP_OUTCOMES`].
    tcp: [AtomicU64; 5],
    /// MQTT listeners' connections by [`MQTT_OUTCOMES`].
    mqtt: [AtomicU64; MQTT_OUTCOMES.len()],
    /// PROXY protocol headers by [`PROXY_PROTOCOL_OUTCOMES`].
    proxy_protocol: [AtomicU64; 4],
    /// HTTP request and response body bytes: from clients, to clients.
    bytes: [AtomicU64; 2],
    /// QUIC handshakes completed: full, resumed (also in `handshakes`).
    quic_handshakes: [AtomicU64; 2],
    /// QUIC datagrams dropped by [`QUIC_DROPPED`].
    quic_dropped: [AtomicU64; 7],
    /// Retry packets sent (address validation).
    quic_retries: AtomicU64,
    /// QUIC connections open now (a gauge), handshakes in progress included.
    quic_open: AtomicU64,
    /// HTTP request latency, first byte of the request to the end of its response.
    latency: RequestLatency,
    /// Each route's mirrors, by route and mirror upstream (kept across reloads).
    mirrors: std::sync::Mutex<Vec<(String, String, Arc<mirror::MirrorState>)>>,
}

/// Buckets of HTTP request latency in microseconds (250 µs to 10 s).
pub const REQUEST_LATENCY_BUCKETS_US: &[u64] = &[
    250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000,
    2_500_000, 5_000_000, 10_000_000,
];

#[derive(Debug)]
struct RequestLatency(sluice_offload::Histogram);

impl Default for RequestLatency {
    fn default() -> Self {
        RequestLatency(sluice_offload::Histogram::new(REQUEST_LATENCY_BUCKETS_US))
    }
}

/// How a `kind = "tcp"` listener's connection went: proxied to a server; refused by the
/// listener's `allow`/`deny`; a passthrough ClientHello that was truncated, malformed or
/// larger than 16 KiB; a server name no `passthrough` entry (and no default `upstream`)
/// takes; no server of the group could be connected to.
pub const TCP_OUTCOMES: [&str; 5] = [
    "proxied",
    "denied",
    "bad_client_hello",
    "no_upstream",
    "upstream_unavailable",
];

/// How a `kind = "mqtt"` listener's connection went: proxied to its broker; refused by the
/// listener's `allow`/`deny`; a first packet that is not a CONNECT; a CONNECT that is
/// malformed, breaks a protocol rule, asks for a version other than 3.1, 3.1.1 or 5, has an
/// unacceptable client identifier, or is over `max_connect_size`; no whole CONNECT within
/// `connect_timeout` (or the client closed first); no broker could be connected to; refused
/// by `[listener.mqtt.auth]`: bad or no credentials, credentials that do not allow it, or
/// credentials that could not be checked; over a connection rate; refused by its client
/// certificate (none, one that did not verify, one naming another device); proxied until a
/// newer connection with its client identifier took over (`max_connections_per_client_id`).
pub const MQTT_OUTCOMES: [&str; 19] = [
    "proxied",
    "denied",
    "not_connect",
    "malformed",
    "protocol_error",
    "unsupported_version",
    "client_id_not_valid",
    "too_large",
    "timeout",
    "closed",
    "upstream_unavailable",
    "bad_credentials",
    "not_authorized",
    "auth_unavailable",
    "rate_limited",
    "no_certificate",
    "bad_certificate",
    "certificate_mismatch",
    "taken_over",
];

/// What became of connections on `proxy_protocol` listeners: a header read; a peer outside
/// `trusted_proxies` (closed without reading); a missing or malformed header; none in
/// `header_read_timeout`.
pub const PROXY_PROTOCOL_OUTCOMES: [&str; 4] = ["accepted", "untrusted", "malformed", "timeout"];

/// A copy of [`ProxyMetrics`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProxySnapshot {
    /// Completed handshakes by [`TLS_VERSIONS`] index, then not resumed / resumed.
    pub handshakes: [[u64; 2]; 2],
    /// Handshakes that failed or timed out.
    pub handshake_failures: u64,
    /// Responses by [`STATUS_CLASSES`] index.
    pub requests: [u64; 5],
    /// Upstream failures by [`UPSTREAM_ERRORS`] index.
    pub upstream_errors: [u64; 3],
    /// Retries sent to another server, and retries the retry budget refused.
    pub retries: [u64; 2],
    /// Requests refused by `allow`/`deny` (403).
    pub denied: u64,
    /// Connections closed at accept: by `max_connections`, by `max_connections_per_client`.
    pub connections_refused: [u64; 2],
    /// TCP listeners' connections by [`TCP_OUTCOMES`] index.
    pub tcp: [u64; 5],
    /// MQTT listeners' connections by [`MQTT_OUTCOMES`] index.
    pub mqtt: [u64; MQTT_OUTCOMES.len()],
    /// PROXY protocol headers by [`PROXY_PROTOCOL_OUTCOMES`] index.
    pub proxy_protocol: [u64; 4],
    /// HTTP body bytes from clients and to clients.
    pub bytes: [u64; 2],
    /// QUIC handshakes completed, not resumed / resumed (counted in `handshakes` too).
    pub quic_handshakes: [u64; 2],
    /// QUIC datagrams dropped, by [`QUIC_DROPPED`] index.
    pub quic_dropped: [u64; 7],
    /// Retry packets sent (QUIC address validation).
    pub quic_retries: u64,
    /// QUIC connections open now, handshakes in progress included.
    pub quic_open: u64,
}

/// One open QUIC connection in the `quic_open` gauge, until dropped.
pub(crate) struct QuicOpen(Arc<ProxyMetrics>);

impl Drop for QuicOpen {
    fn drop(&mut self) {
        self.0.quic_open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Why the QUIC endpoint dropped a datagram.
pub const QUIC_DROPPED: [&str; 7] = QuicDropped::NAMES;

/// Why a datagram was dropped, for the `sluice_quic_packets_dropped_total` counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum QuicDropped {
    /// Not a QUIC packet header.
    Unparsable = 0,
    /// A short-header or non-Initial packet for no connection of ours.
    UnknownConnection = 1,
    /// A client's first Initial under 1200 bytes, or with a destination ID under 8 bytes.
    BadInitial = 2,
    /// The connection's queue was full.
    QueueFull = 3,
    /// quiche refused to create the connection.
    AcceptFailed = 4,
    /// A new connection while the listener drains (shutdown, upgrade, removal).
    Draining = 5,
    /// An Initial whose token is not one of our Retry tokens (forged, expired, for another
    /// address) while address validation is required.
    BadToken = 6,
}

impl QuicDropped {
    /// Label values, by discriminant.
    pub(crate) const NAMES: [&'static str; 7] = [
        "unparsable",
        "unknown_connection",
        "bad_initial",
        "queue_full",
        "accept_failed",
        "draining",
        "bad_token",
    ];
}

impl ProxyMetrics {
    /// The state of `route`'s mirror to `upstream` (made on first use).
    pub(crate) fn mirror(&self, route: &str, upstream: &str) -> Arc<mirror::MirrorState> {
        let mut all = self.mirrors.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, _, s)) = all.iter().find(|(r, u, _)| r == route && u == upstream) {
            return s.clone();
        }
        let s = Arc::new(mirror::MirrorState::default());
        all.push((route.to_owned(), upstream.to_owned(), s.clone()));
        s
    }

    /// Every mirror's counters, in the order they were first used.
    pub fn mirrors(&self) -> Vec<mirror::MirrorSnapshot> {
        self.mirrors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(r, u, s)| s.snapshot(r, u))
            .collect()
    }

    pub(crate) fn handshake(&self, version: &str, resumed: bool) {
        if let Some(v) = TLS_VERSIONS.iter().position(|x| *x == version) {
            self.handshakes[v][usize::from(resumed)].fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn handshake_failed(&self) {
        self.handshake_failures.fetch_add(1, Ordering::Relaxed);
    }

    /// A response finished (or was cut): its status, body bytes each way and latency.
    pub(crate) fn response(&self, status: u16, bytes_in: u64, bytes_out: u64, took: Duration) {
        let class = usize::from(status / 100).clamp(1, 5) - 1;
        self.requests[class].fetch_add(1, Ordering::Relaxed);
        self.bytes[0].fetch_add(bytes_in, Ordering::Relaxed);
        self.bytes[1].fetch_add(bytes_out, Ordering::Relaxed);
        self.latency.0.observe(took.as_micros() as u64);
    }

    /// HTTP request latency in microseconds, by [`REQUEST_LATENCY_BUCKETS_US`].
    pub fn latency_us(&self) -> sluice_offload::HistogramSnapshot {
        self.latency.0.snapshot()
    }

    /// `kind` is an index into [`UPSTREAM_ERRORS`].
    pub(crate) fn upstream_error(&self, kind: usize) {
        self.upstream_errors[kind].fetch_add(1, Ordering::Relaxed);
    }

    /// A retry the policy wanted: sent (`granted`) or refused by the budget.
    pub(crate) fn retry(&self, granted: bool) {
        self.retries[usize::from(!granted)].fetch_add(1, Ordering::Relaxed);
    }

    /// A connection refused by a connection limit: the per-client one, or the listener's.
    pub(crate) fn connection_refused(&self, per_client: bool) {
        let i = usize::from(per_client);
        self.refused[i].fetch_add(1, Ordering::Relaxed);
    }

    /// `outcome` is an index into [`TCP_OUTCOMES`].
    pub(crate) fn tcp(&self, outcome: usize) {
        self.tcp[outcome].fetch_add(1, Ordering::Relaxed);
    }

    /// `outcome` is an index into [`MQTT_OUTCOMES`].
    pub(crate) fn mqtt(&self, outcome: usize) {
        self.mqtt[outcome].fetch_add(1, Ordering::Relaxed);
    }

    /// `outcome` is an index into [`PROXY_PROTOCOL_OUTCOMES`].
    pub(crate) fn proxy_protocol(&self, outcome: usize) {
        self.proxy_protocol[outcome].fetch_add(1, Ordering::Relaxed);
    }

    /// A QUIC handshake completed (counted with the TCP ones and on its own).
    pub(crate) fn quic_handshake(&self, resumed: bool) {
        self.handshake("TLSv1.3", resumed);
        self.quic_handshakes[usize::from(resumed)].fetch_add(1, Ordering::Relaxed);
    }

    /// A QUIC connection opened; it counts as open until the guard is dropped.
    pub(crate) fn quic_opened(self: &Arc<Self>) -> QuicOpen {
        self.quic_open.fetch_add(1, Ordering::Relaxed);
        QuicOpen(self.clone())
    }

    pub(crate) fn quic_retry(&self) {
        self.quic_retries.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn quic_dropped(&self, why: QuicDropped) {
        self.quic_dropped[why as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn denied(&self) {
        self.denied.fetch_add(1, Ordering::Relaxed);
    }

    /// A copy of the counters.
    pub fn snapshot(&self) -> ProxySnapshot {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ProxySnapshot {
            handshakes: std::array::from_fn(|v| std::array::from_fn(|r| l(&self.handshakes[v][r]))),
            handshake_failures: l(&self.handshake_failures),
            requests: std::array::from_fn(|i| l(&self.requests[i])),
            upstream_errors: std::array::from_fn(|i| l(&self.upstream_errors[i])),
            retries: std::array::from_fn(|i| l(&self.retries[i])),
            denied: l(&self.denied),
            connections_refused: std::array::from_fn(|i| l(&self.refused[i])),
            tcp: std::array::from_fn(|i| l(&self.tcp[i])),
            mqtt: std::array::from_fn(|i| l(&self.mqtt[i])),
            proxy_protocol: std::array::from_fn(|i| l(&self.proxy_protocol[i])),
            bytes: std::array::from_fn(|i| l(&self.bytes[i])),
            quic_handshakes: std::array::from_fn(|i| l(&self.quic_handshakes[i])),
            quic_dropped: std::array::from_fn(|i| l(&self.quic_dropped[i])),
            quic_retries: l(&self.quic_retries),
            quic_open: l(&self.quic_open),
        }
    }
}
