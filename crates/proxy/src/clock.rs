//! The coarse clock: milliseconds for the timestamps that only second-scale timeouts read
//! (a connection's keep-alive and head timers, a pooled connection's idle time, an upstream
//! group's retry budget and down marks).
//!
//! `CLOCK_MONOTONIC_COARSE` is the monotonic clock as of the kernel's last tick (1-10 ms
//! behind, by `CONFIG_HZ`), read from the vDSO without touching the time source: 4 ns where
//! `Instant::now` took 17 ns on a KVM guest, and a keep-alive request
//! read the clock ~12 times. NGINX does the same with its cached `ngx_current_msec`. Latency
//! (a request's duration, its upstream time, peak EWMA) stays on `Instant`: a tick's
//! resolution would blur it.
//!
//! A request's wall-clock time (its access-log timestamp) is taken from the `Instant` read
//! at its start anyway ([`wall_at`]), through a per-thread anchor pair refreshed each
//! second: one clock read a request fewer.
//!
//! The clock is read through libc (glibc finds the vDSO's `clock_gettime`), not rustix's
//! own vDSO parser: that one read past the end of the vDSO image valgrind maps and crashed
//! the gateway at start under `bench/instructions.py`.

use std::cell::Cell;
use std::time::{Duration, Instant, SystemTime};

/// Milliseconds on `CLOCK_MONOTONIC_COARSE`: compare only with other values of this clock.
#[expect(unsafe_code, reason = "clock_gettime(2) through libc (FFI)")]
pub(crate) fn coarse_ms() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a live, writable timespec; CLOCK_MONOTONIC_COARSE exists on every
    // Linux since 2.6.32, so the call cannot fail (a failure would leave `t` at zero, and
    // the test below, which needs the clock to move, would catch it).
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut t) };
    t.tv_sec as u64 * 1_000 + t.tv_nsec as u64 / 1_000_000
}

/// How long a thread's anchor pair serves before it is read again: a step of the wall clock
/// (an operator's `date -s`) shows within this, and NTP's slew (at most 0.5 ms a second)
/// stays below the log's millisecond.
const ANCHOR_LIFE: Duration = Duration::from_secs(1);

thread_local! {
    /// The wall clock and the monotonic clock read together.
    static ANCHOR: Cell<Option<(Instant, SystemTime)>> = const { Cell::new(None) };
}

/// The wall-clock time at `at`, an `Instant` read on this thread a moment ago: an anchor's
/// wall time plus the monotonic time since the anchor.
pub(crate) fn wall_at(at: Instant) -> SystemTime {
    ANCHOR.with(|anchor| {
        if let Some((mono, wall)) = anchor.get()
            && let Some(since) = at.checked_duration_since(mono)
            && since < ANCHOR_LIFE
        {
            return wall + since;
        }
        let (mono, wall) = (Instant::now(), SystemTime::now());
        anchor.set(Some((mono, wall)));
        // `at` precedes the fresh anchor by the moment since it was read.
        wall.checked_sub(mono.saturating_duration_since(at))
            .unwrap_or(wall)
    })
}

#[cfg(test)]
mod tests {
    use super::{coarse_ms, wall_at};
    use std::time::{Duration, Instant, SystemTime};

    #[test]
    fn a_requests_wall_time_is_the_wall_clock_at_its_instant() {
        for round in 0..3 {
            // Bounded between two wall-clock readings around the Instant's, whether the
            // anchor is fresh (round 0), reused, or renewed after its life (round 2).
            let before = SystemTime::now();
            let at = Instant::now();
            let after = SystemTime::now();
            let wall = wall_at(at);
            let slack = Duration::from_millis(2);
            assert!(
                wall + slack >= before && wall <= after + slack,
                "round {round}: {wall:?} outside {before:?}..{after:?}"
            );
            if round == 1 {
                std::thread::sleep(super::ANCHOR_LIFE + Duration::from_millis(50));
            }
        }
    }

    #[test]
    fn coarse_time_moves_with_the_precise_clock_within_a_tick() {
        // Each coarse reading is taken between two precise ones, so that a preemption
        // anywhere widens the precise bounds instead of failing the test.
        let (p0, c0, q0) = (Instant::now(), coarse_ms(), Instant::now());
        std::thread::sleep(Duration::from_millis(120));
        let (p1, c1, q1) = (Instant::now(), coarse_ms(), Instant::now());
        assert!(c1 >= c0, "the coarse clock went back: {c0} then {c1}");
        let coarse = c1 - c0;
        let (least, most) = (
            p1.saturating_duration_since(q0).as_millis() as u64,
            q1.duration_since(p0).as_millis() as u64,
        );
        // A reading is up to a tick behind (10 ms at HZ=100), plus a ms of truncation.
        assert!(
            coarse + 11 >= least && coarse <= most + 11,
            "coarse {coarse} ms, precise between {least} and {most} ms"
        );
        assert!(
            coarse >= 100,
            "the coarse clock missed a 120 ms sleep: {coarse} ms"
        );
    }
}
