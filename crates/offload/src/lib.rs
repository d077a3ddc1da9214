//! The offload layer: the plug-in point between work that should not run on the event loop
//! (a TLS handshake's private-key operation, a chunk of a response to compress) and the
//! engines that can do it (the caller's thread, a thread pool, a batching SIMD engine, a
//! remote key server, an accelerator card).
//!
//! It is to engines what rustls' core is to crypto providers: it defines [`Job`] and
//! [`Engine`] and depends on no engine, no TLS and no HTTP. `crypto` and `compress` define
//! jobs; configuration picks engines by name at run time.
//!
//! - An engine accepts or rejects a job **at once** ([`Reject`]: busy, down, unsupported) and
//!   completes accepted jobs asynchronously through a [`Pending`].
//! - A [`Dispatcher`] tries an ordered chain of engines ending in a software engine that never
//!   rejects. Rejection, failure or a missed deadline moves the job to the next engine, so a
//!   request never fails because an accelerator did. A [`Breaker`] per engine opens after
//!   repeated failures, lets one probe through after a back-off, and closes when it succeeds.
//! - A [`BatchQueue`] gathers jobs for batching engines and flushes when full, when the oldest
//!   has waited `max_wait`, or at once when every submitter that could add to it is already
//!   waiting, so a lone job is never held back by a timer.
//! - [`EngineCounters`] count what each engine did: the first thing an operator looks at.
//!
//! Dropping the future of a job in flight (the connection closed) leaks nothing: the engine's
//! late result is discarded, and the pool skips jobs whose caller is already gone.

mod batch;
mod breaker;
mod counters;
mod dispatcher;
mod engine;
pub mod idle;
mod inline;
mod pool;

pub use batch::{BatchConfig, BatchQueue};
pub use breaker::{Admission, Breaker, BreakerConfig};
pub use counters::{
    BATCH_BUCKETS, CountersSnapshot, EngineCounters, FallbackReason, FlushReason, Histogram,
    HistogramSnapshot, LATENCY_BUCKETS_US,
};
pub use dispatcher::{Dispatcher, DispatcherBuilder, JobTrace};
pub use engine::{Engine, EngineError, Job, Pending, Reject, completer};
pub use inline::Inline;
pub use pool::Pool;

#[cfg(test)]
mod tests;
