//! Sluice's data plane: listeners, the hyper HTTP/1.1 and HTTP/2 server, the router, upstream
//! groups with load balancing and passive health, the proxy handler and the access log.
//!
//! Dependencies point one way: `proxy` reads a [`sluice_config::Snapshot`], asks
//! `sluice_tls` for handshakes, and knows no offload engine by name.
//!
//! The entry point is [`Gateway::start`], which binds every listener of a snapshot and
//! returns a [`Gateway`] handle for its addresses, for moving to a new snapshot while serving
//! ([`Gateway::apply`]) and for a graceful shutdown.

mod access_log;
mod addresses;
mod balance;
mod body;
mod client_hello;
mod coalesce;
mod compression;
mod conn_limit;
mod conn_pool;
mod conn_state;
mod connection;
mod context;
mod error;
mod forward;
mod gateway;
mod grpc;
mod handler;
mod health;
mod http1;
mod idle_sweep;
mod metrics;
mod outlier;
mod policy;
mod proxy_protocol;
mod rate_limit;
mod request_key;
mod retry;
mod router;
mod splice;
mod split;
mod sticky;
mod stream;
mod text;
mod upstream;
mod upstream_tls;

pub use access_log::AccessLog;
pub use compression::Compressor;
pub use error::ProxyError;
pub use gateway::{ApplyReport, Gateway};
pub use metrics::{
    PROXY_PROTOCOL_OUTCOMES, ProxyMetrics, ProxySnapshot, REQUEST_LATENCY_BUCKETS_US,
    STATUS_CLASSES, TCP_OUTCOMES, TLS_VERSIONS, UPSTREAM_ERRORS,
};
pub use router::Router;
pub use upstream::{ServerHealthReport, UpstreamHealth};

#[cfg(test)]
mod tests;
