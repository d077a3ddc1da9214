//! Idle timeouts of a listener's TCP connections, and the keep-alive and header-read
//! timeouts of its HTTP connections, kept by one sweeping task per listener instead of a
//! timer per connection.
//!
//! HTTP connections had an `interval` each (a tick a second): every tick woke the
//! connection's task, polled the connection and re-armed the timer, ~7 µs per idle
//! connection per second (2,000 idle connections: 4% more CPU per request on the site mix;
//! NGINX: nothing). The sweep reads each connection's `ConnState` and wakes only those whose
//! deadline passed.
//!
//! Why: registering a tokio timer while the worker is busy (not parked) makes the time
//! driver unpark itself, an `eventfd` write and a spurious wake-up per registration; a
//! connection-rate load paid that once per connection (`strace -c`, `bench/stream`). Here a
//! connection costs a lock and a push, and the sweep (a few times a second) closes the
//! connections whose last byte is older than their `idle_timeout`. The price is precision:
//! a connection closes up to a quarter of its `idle_timeout` (at most 1 s) late.

use crate::conn_state::ConnState;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// One connection's activity, as the sweep sees it.
#[derive(Debug)]
pub(crate) struct Activity {
    /// When a byte last moved (ms on the sweep's clock).
    last_ms: AtomicU64,
    idle_ms: u64,
    /// Notified once the connection has been idle for `idle_ms`.
    pub(crate) expired: Notify,
    clock: Instant,
}

impl Activity {
    /// Notes that a byte moved now.
    pub(crate) fn touch(&self) {
        self.last_ms
            .store(self.clock.elapsed().as_millis() as u64, Ordering::Relaxed);
    }
}

/// An HTTP connection's timeouts, read from its state.
#[derive(Debug)]
struct HttpWatch {
    state: Weak<ConnState>,
    keepalive_ms: u64,
    head_ms: u64,
}

/// A listener's open TCP connections, swept for idleness.
#[derive(Debug)]
pub(crate) struct IdleSweep {
    clock: Instant,
    conns: Mutex<Vec<Weak<Activity>>>,
    http: Mutex<Vec<HttpWatch>>,
    /// The shortest `idle_timeout` seen, which sets the sweep's period.
    tick_ms: AtomicU64,
    started: std::sync::Once,
}

impl Default for IdleSweep {
    fn default() -> Self {
        IdleSweep {
            clock: Instant::now(),
            conns: Mutex::new(Vec::new()),
            http: Mutex::new(Vec::new()),
            tick_ms: AtomicU64::new(1000),
            started: std::sync::Once::new(),
        }
    }
}

impl IdleSweep {
    /// Watches a new connection that closes after `idle` without a byte either way. The
    /// sweep starts with the first connection, on the caller's runtime, and ends when the
    /// listener (the last `Arc`) is gone.
    pub(crate) fn watch(self: &Arc<Self>, idle: Duration) -> Arc<Activity> {
        let idle_ms = idle.as_millis().max(1) as u64;
        let activity = Arc::new(Activity {
            last_ms: AtomicU64::new(self.clock.elapsed().as_millis() as u64),
            idle_ms,
            expired: Notify::new(),
            clock: self.clock,
        });
        self.conns
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Arc::downgrade(&activity));
        self.start(idle_ms);
        activity
    }

    /// Watches an HTTP connection: `state.due` is notified (each sweep, until it closes or
    /// moves again) once a request head has been arriving for `head`, or no request has
    /// been in flight for `keepalive` (`ConnState::timed_out`). As precise as `watch`.
    pub(crate) fn watch_http(
        self: &Arc<Self>,
        state: &Arc<ConnState>,
        keepalive: Duration,
        head: Duration,
    ) {
        let keepalive_ms = keepalive.as_millis().max(1) as u64;
        let head_ms = head.as_millis().max(1) as u64;
        self.http
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(HttpWatch {
                state: Arc::downgrade(state),
                keepalive_ms,
                head_ms,
            });
        self.start(keepalive_ms.min(head_ms));
    }

    /// Sweeps at least every quarter of `timeout_ms` (10 ms to 1 s), from the first watch on.
    fn start(self: &Arc<Self>, timeout_ms: u64) {
        self.tick_ms
            .fetch_min((timeout_ms / 4).clamp(10, 1000), Ordering::Relaxed);
        let me = Arc::downgrade(self);
        self.started.call_once(|| {
            tokio::spawn(sweep(me));
        });
    }
}

async fn sweep(sweep: Weak<IdleSweep>) {
    loop {
        let Some(tick) = sweep.upgrade().map(|s| s.tick_ms.load(Ordering::Relaxed)) else {
            return;
        };
        tokio::time::sleep(Duration::from_millis(tick)).await;
        let Some(s) = sweep.upgrade() else { return };
        let now = s.clock.elapsed().as_millis() as u64;
        // Closed connections drop out; expired ones are told and drop out too.
        s.conns
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|w| match w.upgrade() {
                None => false,
                Some(a) if now.saturating_sub(a.last_ms.load(Ordering::Relaxed)) >= a.idle_ms => {
                    a.expired.notify_one();
                    false
                }
                Some(_) => true,
            });
        s.http
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|w| match w.state.upgrade() {
                None => false,
                Some(state) => {
                    if state.timed_out(w.keepalive_ms, w.head_ms) {
                        state.due.notify_one();
                    }
                    true
                }
            });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_idle_connection_expires_and_a_busy_one_does_not() {
        let sweep = Arc::new(IdleSweep::default());
        let idle = sweep.watch(Duration::from_millis(100));
        let busy = sweep.watch(Duration::from_millis(100));
        let started = Instant::now();
        let keep_busy = async {
            loop {
                busy.touch();
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::select! {
            () = idle.expired.notified() => {}
            () = keep_busy => unreachable!(),
        }
        assert!(
            started.elapsed() >= Duration::from_millis(100),
            "not before its idle timeout"
        );
        // The busy one is still watched; the expired one is gone from the list.
        let live: Vec<_> = sweep
            .conns
            .lock()
            .unwrap()
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        assert_eq!(live.len(), 1);
        assert!(Arc::ptr_eq(&live[0], &busy));
    }

    #[tokio::test]
    async fn http_connections_are_woken_only_when_a_timeout_is_due() {
        let sweep = Arc::new(IdleSweep::default());
        let (idle, busy, slow) = (
            Arc::new(ConnState::new()),
            Arc::new(ConnState::new()),
            Arc::new(ConnState::new()),
        );
        for s in [&idle, &busy, &slow] {
            sweep.watch_http(s, Duration::from_millis(150), Duration::from_millis(50));
        }
        busy.request_started();
        slow.bytes_read(); // a head began arriving and never ended
        tokio::select! {
            () = slow.due.notified() => {}
            () = idle.due.notified() => panic!("keep-alive (150 ms) before the head timeout (50 ms)"),
        }
        idle.due.notified().await;
        // A request in flight is never timed out; its connection is still watched.
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!busy.timed_out(150, 50));
        tokio::select! {
            biased;
            () = busy.due.notified() => panic!("woken with a request in flight"),
            () = tokio::time::sleep(Duration::from_millis(50)) => {}
        }
        drop((idle, slow));
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(
            sweep.http.lock().unwrap().len(),
            1,
            "closed ones leave the list"
        );
    }

    #[tokio::test]
    async fn closed_connections_leave_the_list_and_the_sweep_ends_with_the_listener() {
        let sweep = Arc::new(IdleSweep::default());
        drop(sweep.watch(Duration::from_millis(40)));
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(sweep.conns.lock().unwrap().is_empty());
        let weak = Arc::downgrade(&sweep);
        drop(sweep);
        assert!(
            weak.upgrade().is_none(),
            "the sweep task holds no strong reference"
        );
    }
}
