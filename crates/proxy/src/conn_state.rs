//! A client connection's state that its timers (`connection`) read and the handler updates:
//! requests in flight, when the last one ended, when an incomplete head began.

use crate::clock::coarse_ms;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// "Not set" for the millisecond fields.
pub(crate) const NONE: u64 = u64::MAX;

/// Which of a connection's timeouts is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Timeout {
    /// A request head has been arriving for too long: close.
    Head,
    /// No request for the keep-alive time: close gracefully.
    KeepAlive,
}

/// What the connection's timers need to know, updated by the handler and the I/O wrapper.
#[derive(Debug)]
pub(crate) struct ConnState {
    /// When it was accepted, on the coarse clock (`clock`: the fields below are ms since
    /// then, and timeouts of seconds read them).
    born_ms: u64,
    pub(crate) inflight: AtomicUsize,
    /// Set while the connection drains: a starting request then wakes `run`.
    pub(crate) draining: AtomicBool,
    /// Its TLS handshake went into a trace already (`[tracing]`: on the first sampled
    /// request only).
    pub(crate) handshake_traced: AtomicBool,
    /// Woken when a request starts on a draining connection.
    pub(crate) request_seen: tokio::sync::Notify,
    /// When the last request started or finished (ms since `born`).
    pub(crate) last_request_ms: AtomicU64,
    /// When the first byte of a not-yet-complete request head arrived (HTTP/1 only).
    pub(crate) head_started_ms: AtomicU64,
    /// Notified by the listener's sweep (`signals::idle_sweep`) when a timeout is due.
    pub(crate) due: tokio::sync::Notify,
}

impl ConnState {
    pub(crate) fn new() -> Self {
        ConnState {
            born_ms: coarse_ms(),
            inflight: AtomicUsize::new(0),
            draining: AtomicBool::new(false),
            handshake_traced: AtomicBool::new(false),
            request_seen: tokio::sync::Notify::new(),
            last_request_ms: AtomicU64::new(0),
            head_started_ms: AtomicU64::new(NONE),
            due: tokio::sync::Notify::new(),
        }
    }

    /// The timeout that is due, if any: a request head arriving for `head_ms` or more, or
    /// no request for `keepalive_ms` with none in flight. A draining connection's end is the
    /// drain's business. The sweep asks this to wake the connection, and the connection
    /// again to act (the state may have moved in between).
    pub(crate) fn timeout(&self, keepalive_ms: u64, head_ms: u64) -> Option<Timeout> {
        if self.inflight.load(Ordering::Relaxed) != 0 || self.draining.load(Ordering::Relaxed) {
            return None;
        }
        let now = self.now_ms();
        let head = self.head_started_ms.load(Ordering::Relaxed);
        if head != NONE {
            (now.saturating_sub(head) >= head_ms).then_some(Timeout::Head)
        } else {
            let idle = now.saturating_sub(self.last_request_ms.load(Ordering::Relaxed));
            (idle >= keepalive_ms).then_some(Timeout::KeepAlive)
        }
    }

    /// Whether [`ConnState::timeout`] finds one due.
    pub(crate) fn timed_out(&self, keepalive_ms: u64, head_ms: u64) -> bool {
        self.timeout(keepalive_ms, head_ms).is_some()
    }

    pub(crate) fn now_ms(&self) -> u64 {
        coarse_ms().saturating_sub(self.born_ms)
    }

    pub(crate) fn request_started(&self) {
        self.inflight.fetch_add(1, Ordering::Relaxed);
        if self.draining.load(Ordering::Relaxed) {
            self.request_seen.notify_one();
        }
        self.head_started_ms.store(NONE, Ordering::Relaxed);
        self.last_request_ms.store(self.now_ms(), Ordering::Relaxed);
    }

    pub(crate) fn request_finished(&self) {
        self.inflight.fetch_sub(1, Ordering::Relaxed);
        self.last_request_ms.store(self.now_ms(), Ordering::Relaxed);
    }

    pub(crate) fn bytes_read(&self) {
        if self.inflight.load(Ordering::Relaxed) == 0
            && self.head_started_ms.load(Ordering::Relaxed) == NONE
        {
            self.head_started_ms.store(self.now_ms(), Ordering::Relaxed);
        }
    }
}
