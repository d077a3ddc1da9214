//! What the gateway tells each connection: a drain has begun, the drain's deadline has
//! passed, and the listener's idle timers (`idle_sweep`). Its own module, below both the
//! connection serving (`listen`) and the request context (`request::context`), which both
//! hold it.

pub(crate) mod idle_sweep;

use std::sync::Arc;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Signals a connection receives from its gateway.
#[derive(Clone, Debug)]
pub(crate) struct Signals {
    /// Becomes true when the gateway starts a graceful shutdown.
    pub(crate) draining: watch::Receiver<bool>,
    /// Cancelled when the shutdown deadline has passed: close at once.
    pub(crate) force: CancellationToken,
    /// The listener's TCP connections' idle timeouts.
    pub(crate) idle: Arc<idle_sweep::IdleSweep>,
    /// Where relays that outlive their request run.
    pub(crate) streams: Streams,
}

/// Where a request's long-lived relays run once they have left its connection (a
/// WebSocket's tunnel after `101`, an MQTT device over WebSocket): tracked apart from the
/// listener's connections, so that the drain after `sluice upgrade` waits for them as long as
/// for layer-4 connections (`stream_drain_timeout`) while requests get `shutdown_timeout`.
#[derive(Clone, Debug, Default)]
pub(crate) struct Streams {
    pub(crate) tasks: TaskTracker,
    /// Cancelled when their drain's deadline has passed: close at once.
    pub(crate) force: CancellationToken,
}
