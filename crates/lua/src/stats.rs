//! What scripts cost and how they ended, per route and phase, for `/metrics`, `/status` and
//! the dashboard. Counters outlive configurations (a reload does not reset a counter a
//! Prometheus server has seen), keyed by route name and phase.

use sluice_config::LuaPhase;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// Upper bounds of the time histogram's buckets, in microseconds.
pub const TIME_BUCKETS_US: [u64; 10] = [5, 10, 25, 50, 100, 250, 1000, 10_000, 100_000, 1_000_000];

/// One script's counters.
#[derive(Debug, Default)]
pub struct ScriptStats {
    /// Runtime errors (each answered 500 where the phase could still answer).
    pub errors: AtomicU64,
    /// Calls stopped at the instruction budget.
    pub stopped: AtomicU64,
    /// Calls that ended the request (`ngx.exit`, `ngx.redirect`, output).
    pub exits: AtomicU64,
    /// Outbound requests made (`resty.http`).
    pub outbound: AtomicU64,
    /// Outbound requests that got no response (no server, refused, timed out, too large).
    pub outbound_failures: AtomicU64,
    /// Calls by time spent ([`TIME_BUCKETS_US`]; the last: over the last bound).
    pub buckets: [AtomicU64; TIME_BUCKETS_US.len() + 1],
    /// Microseconds spent in all.
    pub time_us: AtomicU64,
}

impl ScriptStats {
    pub(crate) fn observe(&self, spent: Duration) {
        let us = u64::try_from(spent.as_micros()).unwrap_or(u64::MAX);
        let at = TIME_BUCKETS_US
            .iter()
            .position(|b| us <= *b)
            .unwrap_or(TIME_BUCKETS_US.len());
        self.buckets[at].fetch_add(1, Ordering::Relaxed);
        // Most calls take under a microsecond: nothing to add (an atomic add per call saved).
        if us > 0 {
            self.time_us.fetch_add(us, Ordering::Relaxed);
        }
    }

    /// Calls made: the histogram's count (a call is counted once, in its bucket).
    pub fn calls(&self) -> u64 {
        self.buckets.iter().map(|b| b.load(Ordering::Relaxed)).sum()
    }
}

type Registry = Mutex<HashMap<(String, LuaPhase), Arc<ScriptStats>>>;

fn registry() -> &'static Registry {
    static ALL: OnceLock<Registry> = OnceLock::new();
    ALL.get_or_init(Default::default)
}

/// The counters of `route`'s script at `phase`.
pub(crate) fn for_script(route: &str, phase: LuaPhase) -> Arc<ScriptStats> {
    registry()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .entry((route.to_owned(), phase))
        .or_default()
        .clone()
}

/// Every script's counters: route, phase, counters; sorted by route and phase.
pub fn all() -> Vec<(String, LuaPhase, Arc<ScriptStats>)> {
    let mut v: Vec<_> = registry()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .map(|((r, p), s)| (r.clone(), *p, s.clone()))
        .collect();
    v.sort_by(|a, b| (&a.0, a.1 as u8).cmp(&(&b.0, b.1 as u8)));
    v
}

static TIMER_FAILURES: AtomicU64 = AtomicU64::new(0);
static OVER_MEMORY: AtomicU64 = AtomicU64::new(0);
static PANICS: AtomicU64 = AtomicU64::new(0);
static REFUSED: AtomicU64 = AtomicU64::new(0);

pub(crate) fn refused() {
    REFUSED.fetch_add(1, Ordering::Relaxed);
}

/// Calls refused because another call had held their state for over a second (stuck in a
/// C function, `gate.rs`): each failed its request rather than hold a worker thread.
pub fn refused_count() -> u64 {
    REFUSED.load(Ordering::Relaxed)
}

pub(crate) fn panicked() {
    PANICS.fetch_add(1, Ordering::Relaxed);
}

/// Panics in the `ngx` API's Rust functions, each turned into its call's Lua error
/// (`guard.rs`): a bug to report, which stopped one request rather than the process.
pub fn panic_count() -> u64 {
    PANICS.load(Ordering::Relaxed)
}

pub(crate) fn timer_failed() {
    TIMER_FAILURES.fetch_add(1, Ordering::Relaxed);
}

pub(crate) fn over_memory() {
    OVER_MEMORY.fetch_add(1, Ordering::Relaxed);
}

/// Timer callbacks that raised an error.
pub fn timer_failures() -> u64 {
    TIMER_FAILURES.load(Ordering::Relaxed)
}

/// Calls after which a state stayed over `max_memory` even after a full collection.
pub fn over_memory_count() -> u64 {
    OVER_MEMORY.load(Ordering::Relaxed)
}
