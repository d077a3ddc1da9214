use crate::{SignJob, sign};
use sluice_offload::{BreakerConfig, Dispatcher, DispatcherBuilder, Inline, Pool};
use std::sync::Arc;
use std::time::Duration;

/// A configurable engine (the software `inline` engine always ends the chain).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineKind {
    /// Dedicated threads.
    Pool,
}

/// Which signatures are verified before they leave the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VerifyPolicy {
    /// Every signature (the default).
    All,
    /// RSA only (fault attacks on RSA-CRT leak the key; ECDSA verification costs about
    /// twice the signature).
    Rsa,
}

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
            verify: VerifyPolicy::All,
        }
    }
}

/// The dispatcher for private-key jobs described by `config`.
pub fn build_dispatcher(config: &CryptoConfig) -> std::io::Result<Dispatcher<SignJob>> {
    let mut b = DispatcherBuilder::new(Arc::new(Inline::new(sign)))
        .deadline(config.deadline)
        .breaker(config.breaker);
    for e in &config.engines {
        match e {
            EngineKind::Pool => {
                b = b.engine(Arc::new(Pool::new(
                    "sluice-crypto",
                    config.pool_threads,
                    config.pool_capacity,
                    sign,
                )?));
            }
        }
    }
    Ok(b.build())
}
