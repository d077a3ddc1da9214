//! The worker threads scripts run on: how many states a configuration has (one per thread)
//! and which one a state is (`ngx.worker.id()`).

/// This state's place among the worker threads' (`ngx.worker.id()`).
pub(crate) struct WorkerId(pub(crate) usize);

/// How many states a configuration has: one per worker thread of the gateway's runtime.
pub(crate) fn worker_count() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}
