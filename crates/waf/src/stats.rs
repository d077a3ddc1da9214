//! What the WAF did on a route: the counters `/metrics`, `/status` and the dashboard read.
//! They outlive reloads while the route keeps its name.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// A route's WAF counters.
#[derive(Debug, Default)]
pub struct RouteStats {
    pub(crate) inspected: AtomicU64,
    /// Of `inspected`, those run on the event loop (`[waf] inline_percent`).
    pub(crate) inline: AtomicU64,
    pub(crate) blocked: AtomicU64,
    pub(crate) detected: AtomicU64,
    pub(crate) overload_open: AtomicU64,
    pub(crate) overload_closed: AtomicU64,
    pub(crate) faults: AtomicU64,
    pub(crate) body_rejected: AtomicU64,
    pub(crate) body_partial: AtomicU64,
    pub(crate) inspect_us: AtomicU64,
    /// Responses the rules evaluated (`inspect_response`).
    pub(crate) responses: AtomicU64,
    /// Matches by rule id (only requests that match anything take the lock).
    pub(crate) rules: Mutex<BTreeMap<u32, u64>>,
}

/// A copy of a route's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    /// Requests the rules evaluated.
    pub inspected: u64,
    /// Of `inspected`, those evaluated on the event loop's thread (`[waf] inline_percent`)
    /// instead of the WAF's threads.
    pub inline: u64,
    /// Requests refused by a rule (mode `block`).
    pub blocked: u64,
    /// Requests forwarded with at least one match (mode `detect`, or matches below the
    /// blocking threshold).
    pub detected: u64,
    /// Requests forwarded uninspected because the WAF was saturated (`on_overload = "open"`).
    pub overload_open: u64,
    /// Requests refused because the WAF was saturated (`on_overload = "closed"`).
    pub overload_closed: u64,
    /// Requests the engine failed on (a fault caught on its thread), then forwarded or
    /// refused as `on_overload` says.
    pub faults: u64,
    /// Requests refused with 413: body over `request_body_limit`.
    pub body_rejected: u64,
    /// Requests whose body was inspected only up to `request_body_limit`.
    pub body_partial: u64,
    /// Microseconds spent evaluating rules, in all (requests and responses).
    pub inspect_us: u64,
    /// Responses the rules evaluated (`inspect_response`).
    pub responses: u64,
    /// Matches by rule id.
    pub rules: BTreeMap<u32, u64>,
}

impl RouteStats {
    /// A copy of the counters.
    pub fn snapshot(&self) -> StatsSnapshot {
        StatsSnapshot {
            inspected: self.inspected.load(Relaxed),
            inline: self.inline.load(Relaxed),
            blocked: self.blocked.load(Relaxed),
            detected: self.detected.load(Relaxed),
            overload_open: self.overload_open.load(Relaxed),
            overload_closed: self.overload_closed.load(Relaxed),
            faults: self.faults.load(Relaxed),
            body_rejected: self.body_rejected.load(Relaxed),
            body_partial: self.body_partial.load(Relaxed),
            inspect_us: self.inspect_us.load(Relaxed),
            responses: self.responses.load(Relaxed),
            rules: self.rules.lock().unwrap_or_else(|e| e.into_inner()).clone(),
        }
    }

    /// A body over the route's limit: refused (413) or inspected in part.
    pub fn body_over_limit(&self, rejected: bool) {
        if rejected {
            &self.body_rejected
        } else {
            &self.body_partial
        }
        .fetch_add(1, Relaxed);
    }
}
