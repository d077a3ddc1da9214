//! The running configuration as the gateway holds it ([`State`]), and what applying a new
//! one changed ([`ApplyReport`]): shared by the gateway, which swaps it in, and `prepare`,
//! which reads it to find what carries over.

use super::running::RunningListener;
use crate::ProxyError;
use crate::access_log::AccessLog;
use crate::handshakes::HandshakeScheduler;
use crate::request::filters::RouteGuards;
use crate::request::rate_limit::RedisStore;
use crate::request::rate_limit::takeover::Takeovers;
use crate::upstreams::dns::{Resolver, UpstreamSlot};
use sluice_config::{CompressOffload, LogConfig, Snapshot};
use sluice_tls::KeyOffload;
use std::collections::HashMap;
use std::sync::Arc;
use tokio_util::task::TaskTracker;

/// The running configuration and what serves it.
#[derive(Debug)]
pub(super) struct State {
    pub(super) snapshot: Arc<Snapshot>,
    pub(super) listeners: Vec<RunningListener>,
    /// Removed listeners whose connections are still finishing.
    pub(super) draining: Vec<TaskTracker>,
    /// Upstream groups by name, and in configuration order.
    pub(super) upstreams: Arc<HashMap<String, Arc<UpstreamSlot>>>,
    pub(super) groups: Arc<[Arc<UpstreamSlot>]>,
    /// `[resolver]`'s, while some server follows DNS.
    pub(super) resolver: Option<Arc<Resolver>>,
    pub(super) key_offload: Arc<KeyOffload>,
    pub(super) key_identity: Vec<u8>,
    /// Where handshakes run; replaced when `[offload.handshakes]` changes.
    pub(super) handshakes: Arc<HandshakeScheduler>,
    pub(super) compressor: Arc<crate::Compressor>,
    pub(super) compress_config: CompressOffload,
    /// The response cache; rebuilt (empty) only when `[cache]` changes.
    pub(super) cache: Arc<crate::ResponseCache>,
    /// `[tracing]`'s exporter; started again only when `[tracing]` changes.
    pub(super) tracer: Option<Arc<sluice_trace::Tracer>>,
    /// Its counters, kept across such changes.
    pub(super) trace_counters: Arc<sluice_trace::Counters>,
    pub(super) access_log: AccessLog,
    pub(super) log_config: LogConfig,
    /// Rate limiters and authenticators by route, and the shared store's connection.
    pub(super) guards: Arc<RouteGuards>,
    pub(super) redis: Option<Arc<RedisStore>>,
    /// MQTT connections per client identifier, for the gateway's life.
    pub(super) takeovers: Arc<Takeovers>,
    pub(super) stopped: bool,
}

/// What a successful [`Gateway::apply`] changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApplyReport {
    /// Nothing differed from the running configuration (same revision): nothing was done.
    pub unchanged: bool,
    /// Listeners bound by this change.
    pub listeners_added: Vec<String>,
    /// Listeners that stopped accepting and are draining.
    pub listeners_removed: Vec<String>,
    /// Listeners whose TLS acceptor was rebuilt (certificates or TLS settings changed).
    pub tls_rebuilt: Vec<String>,
    /// Upstream groups kept with their pools and health state.
    pub upstreams_kept: usize,
    /// Upstream groups built new.
    pub upstreams_new: usize,
    /// Whether the private-key engines were rebuilt.
    pub crypto_engines_rebuilt: bool,
    /// Whether the compression engines were rebuilt.
    pub compress_engines_rebuilt: bool,
    /// Routing tables built (a change that touched no route builds none).
    pub routers_built: usize,
    /// Routing tables kept with some routes replaced in place (same hosts and paths).
    pub routers_updated: usize,
}

/// The compression engines `snapshot` needs: none when no route compresses.
pub(super) fn compress_config(snapshot: &Snapshot) -> CompressOffload {
    let mut compress = snapshot.offload.compress.clone();
    if !snapshot.routes.iter().any(|r| r.compression.enabled) {
        compress.engines.clear();
    }
    compress
}

/// What opening `config`'s access log failed with, naming its target.
pub(super) fn access_log_error(
    config: &LogConfig,
) -> impl FnOnce(std::io::Error) -> ProxyError + '_ {
    |source| ProxyError::AccessLog {
        path: format!("{:?}", config.access_log),
        source,
    }
}
