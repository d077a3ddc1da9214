//! A mirror's counters: what `/metrics`, `/status` and the dashboard report for each route's
//! mirror (`request::mirror` counts into them), kept across reloads by route and upstream by
//! the metrics registry, which therefore needs nothing of the request path.

use http::StatusCode;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

/// Why a sampled request was not mirrored, in metrics.
pub const MIRROR_SKIPS: [&str; 4] = ["busy", "body_too_large", "body_incomplete", "no_server"];
/// Why a copy that was sent failed.
pub const MIRROR_FAILURES: [&str; 2] = ["timeout", "error"];
/// The two sides compared.
pub const MIRROR_SIDES: [&str; 2] = ["mirror", "primary"];

pub(crate) const BUSY: usize = 0;
pub(crate) const TOO_LARGE: usize = 1;
pub(crate) const INCOMPLETE: usize = 2;
pub(crate) const NO_SERVER: usize = 3;
pub(crate) const MIRROR: usize = 0;
pub(crate) const PRIMARY: usize = 1;

/// One route's mirror: its limit and counters (kept across reloads by route and upstream).
#[derive(Debug, Default)]
pub(crate) struct MirrorState {
    pub(crate) in_flight: AtomicU32,
    pub(crate) sent: AtomicU64,
    pub(crate) skipped: [AtomicU64; 4],
    pub(crate) failed: [AtomicU64; 2],
    /// [side][status class 1xx..5xx]
    pub(crate) classes: [[AtomicU64; 5]; 2],
    /// [side]: latency sum (µs) and count.
    pub(crate) latency_us: [AtomicU64; 2],
    pub(crate) latency_n: [AtomicU64; 2],
}

/// A mirror's counters at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MirrorSnapshot {
    /// The route.
    pub route: String,
    /// The mirror's upstream.
    pub upstream: String,
    /// Copies in flight now.
    pub in_flight: u32,
    /// Copies sent.
    pub sent: u64,
    /// Sampled requests not mirrored, by [`MIRROR_SKIPS`].
    pub skipped: [u64; 4],
    /// Copies that failed, by [`MIRROR_FAILURES`].
    pub failed: [u64; 2],
    /// Responses by side ([`MIRROR_SIDES`]) and status class.
    pub classes: [[u64; 5]; 2],
    /// Latency sum in µs and count, by side.
    pub latency_us: [u64; 2],
    /// Responses timed, by side.
    pub latency_n: [u64; 2],
}

impl MirrorState {
    pub(crate) fn skip(&self, why: usize) {
        self.skipped[why].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn response(&self, side: usize, status: StatusCode, took: Duration) {
        let class = (status.as_u16() / 100).clamp(1, 5) as usize - 1;
        self.classes[side][class].fetch_add(1, Ordering::Relaxed);
        self.latency_us[side].fetch_add(took.as_micros() as u64, Ordering::Relaxed);
        self.latency_n[side].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts the primary's answer to a request that was mirrored.
    pub(crate) fn primary(&self, status: StatusCode, took: Duration) {
        self.response(PRIMARY, status, took);
    }

    pub(crate) fn snapshot(&self, route: &str, upstream: &str) -> MirrorSnapshot {
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        MirrorSnapshot {
            route: route.to_owned(),
            upstream: upstream.to_owned(),
            in_flight: self.in_flight.load(Ordering::Relaxed),
            sent: load(&self.sent),
            skipped: self.skipped.each_ref().map(load),
            failed: self.failed.each_ref().map(load),
            classes: self.classes.each_ref().map(|c| c.each_ref().map(load)),
            latency_us: self.latency_us.each_ref().map(load),
            latency_n: self.latency_n.each_ref().map(load),
        }
    }
}
