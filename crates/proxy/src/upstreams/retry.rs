//! Retries that do not make an outage worse: a budget per upstream group (retries at most
//! `retry_budget_percent` of its requests over the last 10 s, plus
//! `retry_budget_min_per_second`, as linkerd's and Envoy's budgets do), so that when every
//! server fails the retries stop instead of multiplying the load; and exponential back-off
//! with full jitter between tries.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

/// Seconds in the budget's window.
const WINDOW: usize = 10;

#[derive(Debug, Default)]
struct Bucket {
    second: AtomicU64,
    requests: AtomicU32,
    retries: AtomicU32,
}

/// Requests and retries of one upstream group over the last [`WINDOW`] seconds, in
/// one-second buckets. Updates race benignly: a bucket reset at a second's turn may lose a
/// count, which only makes the budget a little looser or tighter for that second.
#[derive(Debug)]
pub(crate) struct RetryBudget {
    percent: u32,
    min_per_second: u32,
    buckets: [Bucket; WINDOW],
}

impl RetryBudget {
    pub(crate) fn new(percent: u32, min_per_second: u32) -> Self {
        RetryBudget {
            percent,
            min_per_second,
            buckets: Default::default(),
        }
    }

    fn bucket(&self, now_s: u64) -> &Bucket {
        let b = &self.buckets[(now_s % WINDOW as u64) as usize];
        if b.second.load(Ordering::Relaxed) != now_s {
            b.second.store(now_s, Ordering::Relaxed);
            b.requests.store(0, Ordering::Relaxed);
            b.retries.store(0, Ordering::Relaxed);
        }
        b
    }

    /// Counts a request (its first try).
    pub(crate) fn request(&self, now_s: u64) {
        self.bucket(now_s).requests.fetch_add(1, Ordering::Relaxed);
    }

    /// Takes one retry from the budget if it has one.
    pub(crate) fn try_retry(&self, now_s: u64) -> bool {
        let current = self.bucket(now_s);
        let (mut requests, mut retries) = (0u64, 0u64);
        for b in &self.buckets {
            let s = b.second.load(Ordering::Relaxed);
            if s + (WINDOW as u64) > now_s && s <= now_s {
                requests += u64::from(b.requests.load(Ordering::Relaxed));
                retries += u64::from(b.retries.load(Ordering::Relaxed));
            }
        }
        let allowed = requests * u64::from(self.percent) / 100
            + u64::from(self.min_per_second) * WINDOW as u64;
        if retries >= allowed {
            return false;
        }
        current.retries.fetch_add(1, Ordering::Relaxed);
        true
    }
}

/// The wait before retry number `n` (1 for the first): a random time up to
/// `base` × 2^(n-1), capped at `max` ("full jitter", so that clients that failed together
/// do not retry together).
pub(crate) fn backoff(base: Duration, max: Duration, n: u32) -> Duration {
    if base.is_zero() {
        return Duration::ZERO;
    }
    let ceiling = base
        .saturating_mul(1 << n.saturating_sub(1).min(16))
        .min(max);
    let r = crate::hash::below(1_000_000) as u32;
    ceiling.mul_f64(f64::from(r) / 1_000_000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_stay_within_the_share_of_requests_plus_the_minimum() {
        let b = RetryBudget::new(20, 1);
        // 100 requests in second 5: 20% of them plus 1/s x 10 s = 30 retries.
        for _ in 0..100 {
            b.request(5);
        }
        let granted = (0..100).filter(|_| b.try_retry(5)).count();
        assert_eq!(granted, 30);
        // Ten seconds on, the old second has left the window: only the minimum is left.
        let later = (0..100).filter(|_| b.try_retry(15)).count();
        assert_eq!(later, 10);
    }

    #[test]
    fn a_zero_budget_refuses_every_retry() {
        let b = RetryBudget::new(0, 0);
        b.request(1);
        assert!(!b.try_retry(1));
    }

    #[test]
    fn backoff_grows_and_is_capped_and_jittered() {
        let base = Duration::from_millis(10);
        let max = Duration::from_millis(35);
        for n in 1..6 {
            let cap = (base * (1 << (n - 1))).min(max);
            for _ in 0..50 {
                assert!(backoff(base, max, n) <= cap);
            }
        }
        let draws: std::collections::HashSet<Duration> =
            (0..20).map(|_| backoff(base, max, 3)).collect();
        assert!(draws.len() > 10, "jittered");
        assert_eq!(backoff(Duration::ZERO, max, 3), Duration::ZERO);
    }
}
