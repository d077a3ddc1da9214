use std::sync::Mutex;
use std::time::{Duration, Instant};

/// When a circuit breaker opens and how long it stays open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerConfig {
    /// Consecutive failures (errors or missed deadlines) that open the breaker.
    pub failures: u32,
    /// First back-off; doubled after each failed probe up to `max_backoff`.
    pub backoff: Duration,
    /// Longest back-off.
    pub max_backoff: Duration,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        BreakerConfig {
            failures: 5,
            backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(30),
        }
    }
}

/// What the breaker says about the next job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Closed: send it.
    Allow,
    /// Half-open: send this one job as the probe.
    Probe,
    /// Open: skip the engine.
    Deny,
}

#[derive(Debug)]
enum State {
    Closed { failures: u32 },
    Open { until: Instant, backoff: Duration },
    HalfOpen { backoff: Duration },
}

/// A circuit breaker for one engine: after `failures` consecutive failures it opens for a
/// back-off, then lets exactly one probe job through; a successful probe closes it (traffic
/// switches back), a failed one opens it again for twice as long.
#[derive(Debug)]
pub struct Breaker {
    config: BreakerConfig,
    state: Mutex<State>,
}

impl Breaker {
    /// A closed breaker.
    pub fn new(config: BreakerConfig) -> Self {
        Breaker {
            config,
            state: Mutex::new(State::Closed { failures: 0 }),
        }
    }

    /// Whether the next job may go to the engine.
    pub fn admit(&self, now: Instant) -> Admission {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match *s {
            State::Closed { .. } => Admission::Allow,
            State::HalfOpen { .. } => Admission::Deny, // a probe is already out
            State::Open { until, backoff } if now >= until => {
                *s = State::HalfOpen { backoff };
                Admission::Probe
            }
            State::Open { .. } => Admission::Deny,
        }
    }

    /// The engine completed a job correctly.
    pub fn success(&self) {
        *self.state.lock().unwrap_or_else(|e| e.into_inner()) = State::Closed { failures: 0 };
    }

    /// The engine failed a job or missed its deadline.
    pub fn failure(&self, now: Instant) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        *s = match *s {
            State::Closed { failures } if failures + 1 >= self.config.failures => State::Open {
                until: now + self.config.backoff,
                backoff: self.config.backoff,
            },
            State::Closed { failures } => State::Closed {
                failures: failures + 1,
            },
            State::HalfOpen { backoff } | State::Open { backoff, .. } => {
                let next = (backoff * 2).min(self.config.max_backoff);
                State::Open {
                    until: now + next,
                    backoff: next,
                }
            }
        };
    }

    /// A probe that was admitted never reached the engine (it rejected the job): let the
    /// next job probe instead.
    pub fn probe_not_sent(&self, now: Instant) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let State::HalfOpen { backoff } = *s {
            *s = State::Open {
                until: now,
                backoff,
            };
        }
    }

    /// Whether the breaker is open or half-open (the engine is being skipped).
    pub fn is_open(&self) -> bool {
        !matches!(
            *self.state.lock().unwrap_or_else(|e| e.into_inner()),
            State::Closed { .. }
        )
    }
}
