//! What the gateway tells each connection: a drain has begun, the drain's deadline has
//! passed, and the listener's idle timers. Its own module, below both the connection serving
//! (`listen`) and the request context (`request::context`), which both hold it.

use std::sync::Arc;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// Signals a connection receives from its gateway.
#[derive(Clone, Debug)]
pub(crate) struct Signals {
    /// Becomes true when the gateway starts a graceful shutdown.
    pub(crate) draining: watch::Receiver<bool>,
    /// Cancelled when the shutdown deadline has passed: close at once.
    pub(crate) force: CancellationToken,
    /// The listener's TCP connections' idle timeouts.
    pub(crate) idle: Arc<crate::listen::idle_sweep::IdleSweep>,
}
