//! Sluice's data plane: listeners, Sluice's own HTTP/1.1, hyper's HTTP/2 and quiche's HTTP/3,
//! the router,
//! upstream groups with load balancing and health, the proxy handler and the access log.
//!
//! Folders by concern, each depending only on those after it: `gateway` (binding, moving to
//! a new configuration) → `accept` (a listener's accept loop) → `layer4` (TCP relays) →
//! `http3` (a listener's QUIC endpoint and its connections) → `listen` (a client connection:
//! TLS, timers, HTTP/1.1 or HTTP/2) → `request` (the request path) → `upstreams` (groups, balancing,
//! health, the keep-alive pool) → `http1` (the HTTP/1.1 codec, both sides) → shared leaves
//! (`exchange`: what every protocol's server shares with the request path, `Service` and the
//! protocol-neutral `ClientBody`; `signals`: what the gateway tells a connection, and the
//! idle sweep; `conn_state`: a connection's requests in flight and timeouts; `body`,
//! `addresses`, `clock`, `hash`: hashing and randomness, `proxy_protocol`, `metrics`, `text`,
//! `handshakes`: where TLS handshakes run).
//!
//! Dependencies point one way: `proxy` reads a [`sluice_config::Snapshot`], asks
//! `sluice_tls` for handshakes, and knows no offload engine by name.
//!
//! The entry point is [`Gateway::start`], which binds every listener of a snapshot and
//! returns a [`Gateway`] handle for its addresses, for moving to a new snapshot while serving
//! ([`Gateway::apply`]) and for a graceful shutdown.

mod accept;
mod access_log;
mod addresses;
mod body;
mod clock;
mod conn_state;
mod exchange;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzz;
mod gateway;
mod handshakes;
mod hash;
mod http1;
mod http3;
mod layer4;
mod listen;
mod metrics;
mod proxy_protocol;
mod request;
mod signals;
mod text;
mod upstreams;

pub use access_log::{
    AccessLog, Query as RequestQuery, RequestLog, RequestLogStats, ShipperSnapshot,
};
pub use gateway::{ApplyReport, Gateway, SharedStore};
pub use handshakes::{HandshakeScheduler, HandshakeStats, Priority};
pub use http3::set_generation as set_quic_generation;
pub use metrics::mirror::{MIRROR_FAILURES, MIRROR_SIDES, MIRROR_SKIPS, MirrorSnapshot};
pub use metrics::{
    MQTT_OUTCOMES, PROXY_PROTOCOL_OUTCOMES, ProxyMetrics, ProxySnapshot, QUIC_DROPPED,
    REQUEST_LATENCY_BUCKETS_US, STATUS_CLASSES, TCP_OUTCOMES, TLS_VERSIONS, UPSTREAM_ERRORS,
};
pub use request::cache::ResponseCache;
pub use request::compression::Compressor;
pub use request::error::ProxyError;
pub use request::rate_limit::takeover::TakeoverCounts;
pub use request::router::Router;
pub use upstreams::upstream::DnsReport;
pub use upstreams::upstream::{ServerHealthReport, UpstreamHealth};

#[cfg(test)]
mod tests;
