use crate::job::{KeyJob, run};
use crate::mb::{Mb, MbConfig};
use crate::policy::{EngineKind, VerifyPolicy};
use sluice_offload::{
    BreakerConfig, Dispatcher, DispatcherBuilder, Engine, Inline, Pending, Pool, Reject,
};
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

/// `[offload.crypto]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CryptoConfig {
    /// Engines tried in order before `inline`.
    pub engines: Vec<EngineKind>,
    /// Threads of the `pool` engine.
    pub pool_threads: usize,
    /// Jobs the `pool` engine accepts at once before answering busy.
    pub pool_capacity: usize,
    /// How long an engine may take before the job moves on.
    pub deadline: Duration,
    /// Circuit breaker.
    pub breaker: BreakerConfig,
    /// Verification policy.
    pub verify: VerifyPolicy,
    /// The `mb` engine's batching.
    pub mb: MbConfig,
}

impl Default for CryptoConfig {
    fn default() -> Self {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        CryptoConfig {
            engines: vec![EngineKind::Pool],
            pool_threads: threads,
            pool_capacity: 64 * threads,
            deadline: Duration::from_millis(100),
            breaker: BreakerConfig::default(),
            verify: VerifyPolicy::Rsa,
            mb: MbConfig::default(),
        }
    }
}

/// An engine that answers `Unsupported` to jobs restricted to other engines (a certificate
/// with its own `offload_engines`).
struct Allowed {
    kind: EngineKind,
    inner: Arc<dyn Engine<KeyJob>>,
}

impl Engine<KeyJob> for Allowed {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn submit(&self, job: KeyJob) -> Result<Pending<Vec<u8>>, Reject> {
        if !job.allows(self.kind) {
            return Err(Reject::Unsupported);
        }
        self.inner.submit(job)
    }

    fn counters(&self) -> Option<Arc<sluice_offload::EngineCounters>> {
        self.inner.counters()
    }
}

/// The dispatcher for private-key jobs described by `config`. `keyless` is the remote
/// engine, built by the crate that knows the network (it must be given when
/// `config.engines` names [`EngineKind::Keyless`]).
pub fn build_dispatcher(
    config: &CryptoConfig,
    keyless: Option<Arc<dyn Engine<KeyJob>>>,
) -> std::io::Result<Dispatcher<KeyJob>> {
    let mut b = DispatcherBuilder::new(Arc::new(Inline::new(run)))
        .deadline(config.deadline)
        .breaker(config.breaker);
    for e in &config.engines {
        match e {
            EngineKind::Pool => {
                let pool = Pool::new(
                    "sluice-crypto",
                    config.pool_threads,
                    config.pool_capacity,
                    run,
                )?;
                b = b.engine(Arc::new(Allowed {
                    kind: EngineKind::Pool,
                    inner: Arc::new(pool),
                }));
            }
            EngineKind::Mb => {
                let mb = Mb::new(config.mb, Arc::new(AtomicUsize::new(0)))?;
                b = b.engine(Arc::new(Allowed {
                    kind: EngineKind::Mb,
                    inner: Arc::new(mb),
                }));
            }
            EngineKind::Keyless => {
                let engine = keyless.clone().ok_or_else(|| {
                    std::io::Error::other(
                        "the keyless engine is configured but was not built: give [offload.keyless] servers",
                    )
                })?;
                b = b.engine(Arc::new(Allowed {
                    kind: EngineKind::Keyless,
                    inner: engine,
                }));
            }
        }
    }
    Ok(b.build())
}
