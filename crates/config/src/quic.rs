//! A listener's QUIC settings (HTTP/3, `http3 = true`).

use std::time::Duration;

/// A listener's QUIC settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuicSettings {
    /// When a new connection must first prove its address (a Retry round trip).
    pub retry: QuicRetry,
    /// Idle timeout (QUIC's `max_idle_timeout`); default: the listener's `keepalive_timeout`.
    pub idle_timeout: Duration,
    /// Bidirectional streams (requests) a client may have open at once.
    pub max_streams: u32,
}

/// QUIC address validation (RFC 9000 §8.1): a Retry packet makes the client echo a token,
/// proving it receives at the address it claims before the server spends a handshake on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuicRetry {
    /// Only while more than [`QuicRetry::AUTO_THRESHOLD`] handshakes are in progress (a
    /// flood of Initials): one round trip more for everyone then, none otherwise (HAProxy's
    /// `tune.quic.retry-threshold`).
    Auto,
    /// Every new connection (NGINX's `quic_retry on`).
    Always,
    /// Never.
    Off,
}

impl QuicRetry {
    /// Handshakes in progress on a listener above which `auto` asks for a Retry.
    pub const AUTO_THRESHOLD: usize = 100;
}
