use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

/// Why a job left an engine for the next one in the chain: something went wrong there. A job
/// the engine never takes (another key type, a key it does not hold, a CPU without its
/// instructions) is not a fallback but routing: [`CountersSnapshot::routed_past`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FallbackReason {
    /// The engine was at capacity.
    Busy,
    /// The engine was down or its breaker open.
    Down,
    /// The engine accepted the job and failed it (or produced a wrong result).
    Error,
    /// The engine did not finish within the deadline.
    Deadline,
}

impl FallbackReason {
    /// Every reason, in the order of [`CountersSnapshot::fell_back`].
    pub const ALL: [FallbackReason; 4] = [
        FallbackReason::Busy,
        FallbackReason::Down,
        FallbackReason::Error,
        FallbackReason::Deadline,
    ];

    /// The label used in metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            FallbackReason::Busy => "busy",
            FallbackReason::Down => "down",
            FallbackReason::Error => "error",
            FallbackReason::Deadline => "deadline",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Why a batching queue flushed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FlushReason {
    /// The batch reached its maximum size.
    Full,
    /// The oldest job had waited `max_wait`.
    Timer,
    /// Every submitter that could add to the batch was already waiting.
    AllWaiting,
}

impl FlushReason {
    /// Every reason, in the order of [`CountersSnapshot::flushes`].
    pub const ALL: [FlushReason; 3] = [
        FlushReason::Full,
        FlushReason::Timer,
        FlushReason::AllWaiting,
    ];

    /// The label used in metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            FlushReason::Full => "full",
            FlushReason::Timer => "timer",
            FlushReason::AllWaiting => "all_waiting",
        }
    }
}

/// A fixed-bucket histogram (Prometheus style: cumulative on export, upper bounds inclusive).
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [u64],
    counts: Vec<AtomicU64>,
    sum: AtomicU64,
}

impl Histogram {
    /// A histogram with these upper bounds (plus +Inf).
    pub fn new(bounds: &'static [u64]) -> Self {
        Histogram {
            bounds,
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum: AtomicU64::new(0),
        }
    }

    /// Records one value.
    pub fn observe(&self, v: u64) {
        let i = self
            .bounds
            .iter()
            .position(|&b| v <= b)
            .unwrap_or(self.bounds.len());
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.sum.fetch_add(v, Ordering::Relaxed);
    }

    /// A copy of the buckets.
    pub fn snapshot(&self) -> HistogramSnapshot {
        HistogramSnapshot {
            bounds: self.bounds,
            counts: self
                .counts
                .iter()
                .map(|c| c.load(Ordering::Relaxed))
                .collect(),
            sum: self.sum.load(Ordering::Relaxed),
        }
    }
}

/// Latency buckets in microseconds.
pub const LATENCY_BUCKETS_US: &[u64] = &[
    50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000,
];
/// Batch size buckets.
pub const BATCH_BUCKETS: &[u64] = &[1, 2, 3, 4, 5, 6, 7, 8, 16];

/// What one engine in one dispatcher did.
#[derive(Debug)]
pub struct EngineCounters {
    engine: String,
    submitted: AtomicU64,
    completed: AtomicU64,
    failed: AtomicU64,
    fell_back: [AtomicU64; 4],
    routed_past: AtomicU64,
    in_flight: AtomicI64,
    flushes: [AtomicU64; 3],
    /// Jobs per flushed batch (batching engines).
    pub batch_size: Histogram,
    /// Submit-to-result time of completed jobs, microseconds.
    pub latency_us: Histogram,
}

/// A copy of the counters at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CountersSnapshot {
    /// Engine name.
    pub engine: String,
    /// Jobs the engine accepted.
    pub submitted: u64,
    /// Jobs it completed correctly.
    pub completed: u64,
    /// Jobs it accepted and failed (errors, wrong results, missed deadlines).
    pub failed: u64,
    /// Jobs that left it for the next engine, by [`FallbackReason::ALL`] order.
    pub fell_back: [u64; 4],
    /// Jobs it never takes, passed to the next engine by design (`Reject::Unsupported`: an
    /// ECDSA key past `mb`, a certificate restricted to other engines, a key the key server
    /// does not hold): routing, not a fault.
    pub routed_past: u64,
    /// Accepted and not yet finished (or abandoned).
    pub in_flight: i64,
    /// Batch flushes by [`FlushReason::ALL`] order.
    pub flushes: [u64; 3],
    /// Submit-to-result time of completed jobs in microseconds.
    pub latency_us: HistogramSnapshot,
    /// Jobs per flushed batch.
    pub batch_size: HistogramSnapshot,
}

/// A copy of a [`Histogram`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistogramSnapshot {
    /// Upper bounds (inclusive) of the finite buckets.
    pub bounds: &'static [u64],
    /// Per-bucket counts (not cumulative), the last one for +Inf.
    pub counts: Vec<u64>,
    /// Sum of the observed values.
    pub sum: u64,
}

impl HistogramSnapshot {
    /// What was observed since `earlier` (a snapshot of the same histogram), bucket by bucket.
    pub fn since(&self, earlier: &HistogramSnapshot) -> HistogramSnapshot {
        HistogramSnapshot {
            bounds: self.bounds,
            counts: self
                .counts
                .iter()
                .zip(earlier.counts.iter().chain(std::iter::repeat(&0)))
                .map(|(now, then)| now.saturating_sub(*then))
                .collect(),
            sum: self.sum.saturating_sub(earlier.sum),
        }
    }

    /// Observations counted.
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The `q` quantile (0 to 1), interpolated linearly inside its bucket (Prometheus's
    /// `histogram_quantile`); `None` when nothing was observed. A quantile in the +Inf
    /// bucket reads as the last finite bound: the histogram cannot say more.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let total = self.total();
        if total == 0 {
            return None;
        }
        let rank = q.clamp(0.0, 1.0) * total as f64;
        let mut below = 0u64;
        for (i, &n) in self.counts.iter().enumerate() {
            if n > 0 && (below + n) as f64 >= rank {
                let Some(&upper) = self.bounds.get(i) else {
                    return self.bounds.last().map(|&b| b as f64);
                };
                let lower = if i == 0 { 0 } else { self.bounds[i - 1] };
                let within = (rank - below as f64) / n as f64;
                return Some(lower as f64 + (upper - lower) as f64 * within);
            }
            below += n;
        }
        self.bounds.last().map(|&b| b as f64)
    }
}

impl CountersSnapshot {
    /// Jobs that fell back for `reason`.
    pub fn fell_back(&self, reason: FallbackReason) -> u64 {
        self.fell_back[reason.index()]
    }
}

impl EngineCounters {
    /// Zeroed counters for `engine`.
    pub fn new(engine: &str) -> Self {
        EngineCounters {
            engine: engine.to_owned(),
            submitted: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            fell_back: Default::default(),
            routed_past: AtomicU64::new(0),
            in_flight: AtomicI64::new(0),
            flushes: Default::default(),
            batch_size: Histogram::new(BATCH_BUCKETS),
            latency_us: Histogram::new(LATENCY_BUCKETS_US),
        }
    }

    pub(crate) fn submitted(&self) {
        self.submitted.fetch_add(1, Ordering::Relaxed);
        self.in_flight.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn completed(&self, took: Duration) {
        self.completed.fetch_add(1, Ordering::Relaxed);
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
        self.latency_us.observe(took.as_micros() as u64);
    }

    pub(crate) fn failed(&self) {
        self.failed.fetch_add(1, Ordering::Relaxed);
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
    }

    /// The caller went away while the job was in flight.
    pub(crate) fn abandoned(&self) {
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
    }

    pub(crate) fn fell_back(&self, reason: FallbackReason) {
        self.fell_back[reason.index()].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn routed_past(&self) {
        self.routed_past.fetch_add(1, Ordering::Relaxed);
    }

    /// Records a batch flush (called by batching engines).
    pub fn flushed(&self, reason: FlushReason, size: usize) {
        self.flushes[reason as usize].fetch_add(1, Ordering::Relaxed);
        self.batch_size.observe(size as u64);
    }

    /// A copy of the counters.
    pub fn snapshot(&self) -> CountersSnapshot {
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        CountersSnapshot {
            engine: self.engine.clone(),
            submitted: load(&self.submitted),
            completed: load(&self.completed),
            failed: load(&self.failed),
            fell_back: std::array::from_fn(|i| load(&self.fell_back[i])),
            routed_past: load(&self.routed_past),
            in_flight: self.in_flight.load(Ordering::Relaxed),
            flushes: std::array::from_fn(|i| load(&self.flushes[i])),
            latency_us: self.latency_us.snapshot(),
            batch_size: self.batch_size.snapshot(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_interpolate_inside_their_bucket_and_deltas_subtract() {
        let h = Histogram::new(&[10, 20, 40]);
        assert_eq!(h.snapshot().quantile(0.5), None, "nothing observed");
        let before = h.snapshot();
        for v in [1, 2, 3, 4, 15, 16, 17, 18, 30, 1000] {
            h.observe(v);
        }
        let d = h.snapshot().since(&before);
        assert_eq!(d.counts, vec![4, 4, 1, 1]);
        assert_eq!(d.total(), 10);
        // Rank 5 of 10 is the first of the (10, 20] bucket's 4: a quarter into it.
        assert_eq!(d.quantile(0.5), Some(12.5));
        // Rank 9 is the only one in (20, 40]: its top.
        assert_eq!(d.quantile(0.9), Some(40.0));
        // Rank 9.9 falls in +Inf: the last finite bound.
        assert_eq!(d.quantile(0.99), Some(40.0));
        let later = h.snapshot();
        h.observe(5);
        let d = h.snapshot().since(&later);
        assert_eq!(d.counts, vec![1, 0, 0, 0]);
        assert_eq!(d.sum, 5);
        assert_eq!(d.quantile(0.99), Some(9.9));
    }
}
