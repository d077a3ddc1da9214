//! Idle timeouts of a listener's TCP connections, kept by one sweeping task per listener
//! instead of a timer per connection.
//!
//! Why: registering a tokio timer while the worker is busy (not parked) makes the time
//! driver unpark itself, an `eventfd` write and a spurious wake-up per registration; a
//! connection-rate load paid that once per connection (`strace -c`, `bench/stream`). Here a
//! connection costs a lock and a push, and the sweep (a few times a second) closes the
//! connections whose last byte is older than their `idle_timeout`. The price is precision:
//! a connection closes up to a quarter of its `idle_timeout` (at most 1 s) late.

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

/// A listener's open TCP connections, swept for idleness.
#[derive(Debug)]
pub(crate) struct IdleSweep {
    clock: Instant,
    conns: Mutex<Vec<Weak<Activity>>>,
    /// The shortest `idle_timeout` seen, which sets the sweep's period.
    tick_ms: AtomicU64,
    started: std::sync::Once,
}

impl Default for IdleSweep {
    fn default() -> Self {
        IdleSweep {
            clock: Instant::now(),
            conns: Mutex::new(Vec::new()),
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
        self.tick_ms
            .fetch_min((idle_ms / 4).clamp(10, 1000), Ordering::Relaxed);
        self.conns
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Arc::downgrade(&activity));
        let me = Arc::downgrade(self);
        self.started.call_once(|| {
            tokio::spawn(sweep(me));
        });
        activity
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
