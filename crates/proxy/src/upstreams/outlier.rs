//! Outlier ejection (Envoy's, `[upstream.outlier]`): a server whose live traffic fails
//! `consecutive_failures` times in a row (5xx responses, connect errors, timeouts, broken
//! responses) is left out for `base_ejection` × the number of times it was ejected (capped
//! at `max_ejection`), but never more than `max_ejected_percent` of the group at once (one
//! server at least), so that a bad deploy cannot eject a whole group. The count of
//! ejections starts again once a server has gone `max_ejection` without one.
//!
//! This complements `max_fails`/`fail_timeout` (NGINX's passive marks, on connect failures
//! only) and the active checks: all three must agree for a server to be used.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// One server's outlier state.
#[derive(Debug, Default)]
pub(crate) struct OutlierState {
    /// Consecutive failures of live traffic.
    fails: AtomicU32,
    /// Ejected until this time (ms on the group's clock); 0: never ejected.
    until_ms: AtomicU64,
    /// When the current or last ejection began.
    at_ms: AtomicU64,
    /// Ejections in the current series (the multiplier of `base_ejection`).
    ejections: AtomicU32,
    /// An ejection ended and its server has not served since: the first success after it
    /// is logged as the return.
    returning: std::sync::atomic::AtomicBool,
}

/// What an ejection was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ejection {
    /// Its number in the series (1 for the first).
    pub(crate) nth: u32,
    pub(crate) duration_ms: u64,
}

impl OutlierState {
    /// Takes over `old`'s state (the same server in a group a DNS change replaced).
    pub(crate) fn carry_from(&self, old: &OutlierState) {
        let r = Ordering::Relaxed;
        self.fails.store(old.fails.load(r), r);
        self.until_ms.store(old.until_ms.load(r), r);
        self.at_ms.store(old.at_ms.load(r), r);
        self.ejections.store(old.ejections.load(r), r);
        self.returning.store(old.returning.load(r), r);
    }

    pub(crate) fn ejected(&self, now_ms: u64) -> bool {
        self.until_ms.load(Ordering::Relaxed) > now_ms
    }

    /// Counts one result; returns whether this failure reached the threshold (the caller
    /// decides whether the group's cap allows an ejection).
    pub(crate) fn record(&self, failed: bool, threshold: u32) -> bool {
        if !failed {
            if self.fails.load(Ordering::Relaxed) != 0 {
                self.fails.store(0, Ordering::Relaxed);
            }
            return false;
        }
        self.returning.store(false, Ordering::Relaxed);
        self.fails.fetch_add(1, Ordering::Relaxed) + 1 >= threshold
    }

    /// Ejects the server at `now_ms`.
    pub(crate) fn eject(&self, now_ms: u64, base_ms: u64, max_ms: u64) -> Ejection {
        let last_end = self.until_ms.load(Ordering::Relaxed);
        if last_end != 0 && now_ms > last_end.saturating_add(max_ms) {
            self.ejections.store(0, Ordering::Relaxed);
        }
        let nth = self.ejections.fetch_add(1, Ordering::Relaxed) + 1;
        let duration_ms = base_ms.saturating_mul(u64::from(nth)).min(max_ms);
        self.fails.store(0, Ordering::Relaxed);
        self.at_ms.store(now_ms, Ordering::Relaxed);
        self.until_ms.store(now_ms + duration_ms, Ordering::Relaxed);
        self.returning.store(true, Ordering::Relaxed);
        Ejection { nth, duration_ms }
    }

    /// After a success: whether this is the first since an ejection ended (log the return).
    pub(crate) fn returned(&self) -> bool {
        self.returning.load(Ordering::Relaxed) && self.returning.swap(false, Ordering::Relaxed)
    }

    /// The current ejection, for the health endpoint: (began at, ends at, its number).
    pub(crate) fn current(&self, now_ms: u64) -> Option<(u64, u64, u32)> {
        let until = self.until_ms.load(Ordering::Relaxed);
        (until > now_ms).then(|| {
            (
                self.at_ms.load(Ordering::Relaxed),
                until,
                self.ejections.load(Ordering::Relaxed),
            )
        })
    }
}

/// How many servers of a group of `n` may be ejected at once.
pub(crate) fn cap(n: usize, percent: u32) -> usize {
    (n * percent as usize / 100).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consecutive_failures_reach_the_threshold_and_a_success_resets_them() {
        let s = OutlierState::default();
        assert!(!s.record(true, 3));
        assert!(!s.record(true, 3));
        assert!(!s.record(false, 3), "a success resets the count");
        assert!(!s.record(true, 3));
        assert!(!s.record(true, 3));
        assert!(s.record(true, 3));
    }

    #[test]
    fn each_ejection_lasts_longer_up_to_the_cap_and_the_series_ends_after_a_quiet_spell() {
        let s = OutlierState::default();
        let (base, max) = (1_000, 2_500);
        assert_eq!(
            s.eject(0, base, max),
            Ejection {
                nth: 1,
                duration_ms: 1_000
            }
        );
        assert!(s.ejected(999) && !s.ejected(1_000));
        assert!(!s.record(false, 3));
        assert!(
            s.returned(),
            "the first success after an ejection is its return"
        );
        assert!(!s.returned(), "once");
        assert_eq!(s.current(500), Some((0, 1_000, 1)));
        assert_eq!(s.eject(1_500, base, max).duration_ms, 2_000);
        assert_eq!(s.eject(4_000, base, max).duration_ms, 2_500, "capped");
        // Quiet for longer than max_ejection after the last ejection ended (6,500): a new series.
        assert_eq!(
            s.eject(9_100, base, max),
            Ejection {
                nth: 1,
                duration_ms: 1_000
            }
        );
    }

    #[test]
    fn at_least_one_server_may_be_ejected() {
        assert_eq!(cap(3, 10), 1);
        assert_eq!(cap(10, 50), 5);
        assert_eq!(cap(1, 0), 1);
    }
}
