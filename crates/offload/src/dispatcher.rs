use crate::{
    Admission, Breaker, BreakerConfig, CountersSnapshot, Engine, EngineCounters, EngineError,
    FallbackReason, Job, Reject,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

struct Slot<J: Job> {
    engine: Arc<dyn Engine<J>>,
    breaker: Breaker,
    counters: Arc<EngineCounters>,
}

/// Gives each job to the first engine of an ordered chain that accepts it, within a
/// deadline, and falls back along the chain to a software engine that never rejects.
pub struct Dispatcher<J: Job> {
    chain: Vec<Slot<J>>,
    software: Slot<J>,
    deadline: Duration,
    /// Inline cost of the jobs engines of the chain completed (those with a known cost), ns.
    saved_ns: AtomicU64,
}

impl<J: Job> std::fmt::Debug for Dispatcher<J> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.chain.iter().map(|s| s.engine.name()).collect();
        f.debug_struct("Dispatcher")
            .field("chain", &names)
            .field("software", &self.software.engine.name())
            .field("deadline", &self.deadline)
            .finish()
    }
}

/// Builds a [`Dispatcher`].
pub struct DispatcherBuilder<J: Job> {
    chain: Vec<Arc<dyn Engine<J>>>,
    software: Arc<dyn Engine<J>>,
    deadline: Duration,
    breaker: BreakerConfig,
}

impl<J: Job> DispatcherBuilder<J> {
    /// A chain that ends in `software`, which must never reject (the `inline` engine).
    pub fn new(software: Arc<dyn Engine<J>>) -> Self {
        DispatcherBuilder {
            chain: Vec::new(),
            software,
            deadline: Duration::from_millis(50),
            breaker: BreakerConfig::default(),
        }
    }

    /// Appends an engine to try before the software engine (in the order added).
    pub fn engine(mut self, engine: Arc<dyn Engine<J>>) -> Self {
        self.chain.push(engine);
        self
    }

    /// How long an accepted job may take on an engine before it moves on.
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// Breaker settings for every engine of the chain.
    pub fn breaker(mut self, config: BreakerConfig) -> Self {
        self.breaker = config;
        self
    }

    /// The dispatcher.
    pub fn build(self) -> Dispatcher<J> {
        let slot = |engine: Arc<dyn Engine<J>>, breaker| Slot {
            counters: engine
                .counters()
                .unwrap_or_else(|| Arc::new(EngineCounters::new(engine.name()))),
            engine,
            breaker: Breaker::new(breaker),
        };
        Dispatcher {
            chain: self
                .chain
                .into_iter()
                .map(|e| slot(e, self.breaker))
                .collect(),
            software: slot(self.software, self.breaker),
            deadline: self.deadline,
            saved_ns: AtomicU64::new(0),
        }
    }
}

/// Counts a job as in flight on an engine until it is resolved; dropped unresolved (the
/// caller went away), it counts as abandoned.
struct InFlight<'a> {
    counters: &'a EngineCounters,
    resolved: bool,
}

impl InFlight<'_> {
    fn resolve(mut self) {
        self.resolved = true;
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if !self.resolved {
            self.counters.abandoned();
        }
    }
}

/// Why a rejected job goes on: a fault (a fallback), or `None` for a job the engine never
/// takes (routing).
fn reason(r: Reject) -> Option<FallbackReason> {
    match r {
        Reject::Busy => Some(FallbackReason::Busy),
        Reject::Down => Some(FallbackReason::Down),
        Reject::Unsupported => None,
    }
}

/// What became of one job, for a trace: the engine that ran it, how long it was there (its
/// queue and its work), and the engines it fell back from, and why.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobTrace {
    /// The engine that completed (or last failed) the job.
    pub engine: String,
    /// From its submission to that engine to the result.
    pub at_engine: Duration,
    /// Engines passed over before it, in chain order, for what went wrong there.
    pub fallbacks: Vec<(String, FallbackReason)>,
    /// Engines that never take this job (routing, not a fault), in chain order.
    pub routed_past: Vec<String>,
}

impl<J: Job> Dispatcher<J> {
    /// Runs `job` on the first engine that accepts and completes it in time; the software
    /// engine runs it when every other engine refused, failed or was too slow. Dropping the
    /// returned future abandons the job cleanly.
    pub async fn run(&self, job: J) -> Result<J::Output, EngineError> {
        self.dispatch(job, None).await
    }

    /// [`Dispatcher::run`], telling `trace` which engine ran the job, for how long, and
    /// what it fell back from (a handshake's span shows it).
    pub async fn run_traced(&self, job: J, trace: &mut JobTrace) -> Result<J::Output, EngineError> {
        self.dispatch(job, Some(trace)).await
    }

    async fn dispatch(
        &self,
        job: J,
        mut trace: Option<&mut JobTrace>,
    ) -> Result<J::Output, EngineError> {
        // A job passed over: a fallback (`Some(why)`), or routed past an engine that never
        // takes it (`None`).
        let mut fell_back = |slot: &Slot<J>, why: Option<FallbackReason>| {
            let name = || slot.engine.name().to_owned();
            match why {
                Some(why) => {
                    slot.counters.fell_back(why);
                    if let Some(t) = trace.as_deref_mut() {
                        t.fallbacks.push((name(), why));
                    }
                }
                None => {
                    slot.counters.routed_past();
                    if let Some(t) = trace.as_deref_mut() {
                        t.routed_past.push(name());
                    }
                }
            }
        };
        for slot in &self.chain {
            let admission = slot.breaker.admit(Instant::now());
            if admission == Admission::Deny {
                fell_back(slot, Some(FallbackReason::Down));
                continue;
            }
            let pending = match slot.engine.submit(job.clone()) {
                Ok(p) => p,
                Err(r) => {
                    if admission == Admission::Probe {
                        slot.breaker.probe_not_sent(Instant::now());
                    }
                    fell_back(slot, reason(r));
                    continue;
                }
            };
            slot.counters.submitted();
            let guard = InFlight {
                counters: &slot.counters,
                resolved: false,
            };
            let start = Instant::now();
            match tokio::time::timeout(self.deadline, pending).await {
                Ok(Ok(out)) => {
                    guard.resolve();
                    slot.counters.completed(start.elapsed());
                    if let Some(t) = trace {
                        t.engine = slot.engine.name().to_owned();
                        t.at_engine = start.elapsed();
                    }
                    slot.breaker.success();
                    if let Some(cost) = job.inline_cost() {
                        self.saved_ns
                            .fetch_add(cost.as_nanos() as u64, Ordering::Relaxed);
                    }
                    return Ok(out);
                }
                Ok(Err(_)) => {
                    guard.resolve();
                    slot.counters.failed();
                    slot.breaker.failure(Instant::now());
                    fell_back(slot, Some(FallbackReason::Error));
                }
                Err(_elapsed) => {
                    // The engine may still answer; nobody listens any more.
                    guard.resolve();
                    slot.counters.failed();
                    slot.breaker.failure(Instant::now());
                    fell_back(slot, Some(FallbackReason::Deadline));
                }
            }
        }
        let s = &self.software;
        let pending = s.engine.submit(job).map_err(|r| {
            EngineError::Failed(format!("the software engine rejected a job ({r:?})"))
        })?;
        s.counters.submitted();
        let guard = InFlight {
            counters: &s.counters,
            resolved: false,
        };
        let start = Instant::now();
        let result = pending.await;
        guard.resolve();
        match &result {
            Ok(_) => s.counters.completed(start.elapsed()),
            Err(_) => s.counters.failed(),
        }
        if let Some(t) = trace {
            t.engine = s.engine.name().to_owned();
            t.at_engine = start.elapsed();
        }
        result
    }

    /// The counters of every engine, chain order, software engine last.
    pub fn counters(&self) -> Vec<CountersSnapshot> {
        self.chain
            .iter()
            .chain(std::iter::once(&self.software))
            .map(|s| s.counters.snapshot())
            .collect()
    }

    /// The event-loop CPU time the chain's engines saved: the measured inline cost
    /// ([`Job::inline_cost`]) of every job they completed.
    pub fn cpu_saved(&self) -> Duration {
        Duration::from_nanos(self.saved_ns.load(Ordering::Relaxed))
    }

    /// Whether each engine's breaker is open, in [`Dispatcher::counters`]' order (the
    /// software engine has none: always false).
    pub fn breakers_open(&self) -> Vec<bool> {
        self.chain
            .iter()
            .map(|s| s.breaker.is_open())
            .chain(std::iter::once(false))
            .collect()
    }

    /// Whether the breaker of the chain engine at `index` is open.
    pub fn breaker_open(&self, index: usize) -> bool {
        self.chain.get(index).is_some_and(|s| s.breaker.is_open())
    }
}
