use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::sync::oneshot;

/// A self-contained unit of work. Cheap to clone (inputs behind `Arc`), so that a job an
/// engine could not finish can be given to the next one.
pub trait Job: Clone + Send + 'static {
    /// What the job produces.
    type Output: Send + 'static;

    /// Jobs with the same key may share a batch (for example RSA-2048 signatures, whatever
    /// the key). Engines that do not batch ignore it.
    fn batch_key(&self) -> u64 {
        0
    }

    /// What the job would cost on the event loop, as measured on this machine, if known:
    /// the dispatcher credits it to "CPU saved" when an engine off the event loop ran it.
    fn inline_cost(&self) -> Option<std::time::Duration> {
        None
    }
}

/// Why an engine refused a job at once. The dispatcher matches on it exhaustively.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reject {
    /// At its in-flight capacity.
    Busy,
    /// Unhealthy (or its circuit breaker is open).
    Down,
    /// Cannot do this kind of job (key type, size, codec).
    Unsupported,
}

/// Why an accepted job did not produce a result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// The engine tried and failed.
    #[error("engine failed: {0}")]
    Failed(String),
    /// The engine produced a result that did not check out (for example a signature that
    /// does not verify); it never leaves the process.
    #[error("engine produced a wrong result: {0}")]
    WrongResult(String),
    /// The engine dropped the job without an answer (it shut down or panicked).
    #[error("the engine dropped the job")]
    Dropped,
}

/// The future result of an accepted job.
#[derive(Debug)]
pub struct Pending<T> {
    inner: PendingInner<T>,
}

#[derive(Debug)]
enum PendingInner<T> {
    Ready(Option<Result<T, EngineError>>),
    Waiting(oneshot::Receiver<Result<T, EngineError>>),
}

impl<T> Pending<T> {
    /// A result that is already known (engines that run on the caller's thread).
    pub fn ready(result: Result<T, EngineError>) -> Self {
        Pending {
            inner: PendingInner::Ready(Some(result)),
        }
    }
}

/// A pair for an engine that completes jobs elsewhere: it keeps the sender (completing it, or
/// dropping it, which reads as [`EngineError::Dropped`]) and returns the [`Pending`].
pub fn completer<T>() -> (oneshot::Sender<Result<T, EngineError>>, Pending<T>) {
    let (tx, rx) = oneshot::channel();
    (
        tx,
        Pending {
            inner: PendingInner::Waiting(rx),
        },
    )
}

// The result is only moved out, never pinned in place.
impl<T> Unpin for Pending<T> {}

impl<T> Future for Pending<T> {
    type Output = Result<T, EngineError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        match &mut this.inner {
            PendingInner::Ready(r) => Poll::Ready(r.take().unwrap_or(Err(EngineError::Dropped))),
            PendingInner::Waiting(rx) => Pin::new(rx)
                .poll(cx)
                .map(|r| r.unwrap_or(Err(EngineError::Dropped))),
        }
    }
}

/// An engine: accepts or rejects a job at once, completes accepted jobs asynchronously.
pub trait Engine<J: Job>: Send + Sync + 'static {
    /// The name configuration uses for it (`inline`, `pool`, `mb`, ...).
    fn name(&self) -> &str;

    /// Accepts the job (returning its future result) or rejects it without waiting.
    fn submit(&self, job: J) -> Result<Pending<J::Output>, Reject>;

    /// Counters the engine keeps itself (a batching engine records its flushes there); the
    /// dispatcher then counts into them too, so one snapshot shows both. `None`: the
    /// dispatcher makes its own.
    fn counters(&self) -> Option<std::sync::Arc<crate::EngineCounters>> {
        None
    }
}
