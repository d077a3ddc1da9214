use crate::{EngineCounters, EngineError, FlushReason, Job, Pending, completer};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// When a batch is flushed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchConfig {
    /// Jobs per batch at most (8 for the lanes of AVX-512 IFMA).
    pub max_batch: usize,
    /// Longest a job waits for company.
    pub max_wait: Duration,
}

type Work<J> = (J, oneshot::Sender<Result<<J as Job>::Output, EngineError>>);

struct Batch<J: Job> {
    jobs: Vec<Work<J>>,
    oldest: Instant,
}

struct State<J: Job> {
    batches: HashMap<u64, Batch<J>>,
    queued: usize,
    closed: bool,
}

struct Shared<J: Job> {
    state: Mutex<State<J>>,
    wake: Condvar,
    config: BatchConfig,
    potential: Arc<AtomicUsize>,
    counters: Arc<EngineCounters>,
}

/// Gathers jobs by [`Job::batch_key`] for a batching engine and runs each batch on a thread
/// of its own. A batch is flushed when it is full, when its oldest job has waited
/// `max_wait`, or at once when every submitter that could add to it is already waiting
/// (`queued >= potential`, where `potential` counts, for example, the handshakes in
/// progress): a lone job is never held back by the timer, the mistake that made Intel's
/// multi-buffer engine ten times slower than plain OpenSSL with one job in flight.
pub struct BatchQueue<J: Job> {
    shared: Arc<Shared<J>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl<J: Job> std::fmt::Debug for BatchQueue<J> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchQueue")
            .field("config", &self.shared.config)
            .finish_non_exhaustive()
    }
}

impl<J: Job> BatchQueue<J> {
    /// Starts the queue's thread; `run` computes one batch and returns one result per job,
    /// in order.
    pub fn new<F>(
        name: &str,
        config: BatchConfig,
        potential: Arc<AtomicUsize>,
        counters: Arc<EngineCounters>,
        run: F,
    ) -> std::io::Result<Self>
    where
        F: Fn(Vec<J>) -> Vec<Result<J::Output, EngineError>> + Send + 'static,
    {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                batches: HashMap::new(),
                queued: 0,
                closed: false,
            }),
            wake: Condvar::new(),
            config: BatchConfig {
                max_batch: config.max_batch.max(1),
                ..config
            },
            potential,
            counters,
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name(format!("{name}-batch"))
            .spawn(move || flusher(&s, &run))?;
        Ok(BatchQueue {
            shared,
            thread: Some(thread),
        })
    }

    /// Jobs waiting for a batch (not counting the batch being computed).
    pub fn queued(&self) -> usize {
        self.shared
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .queued
    }

    /// Queues a job.
    pub fn push(&self, job: J) -> Pending<J::Output> {
        let (tx, pending) = completer();
        let key = job.batch_key();
        let mut st = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
        st.batches
            .entry(key)
            .or_insert_with(|| Batch {
                jobs: Vec::new(),
                oldest: Instant::now(),
            })
            .jobs
            .push((job, tx));
        st.queued += 1;
        drop(st);
        self.shared.wake.notify_one();
        pending
    }
}

/// The next batch to flush and why, or how long to wait for one.
fn ready<J: Job>(
    st: &State<J>,
    config: &BatchConfig,
    potential: usize,
    now: Instant,
) -> Result<(u64, FlushReason), Option<Duration>> {
    if let Some((&k, _)) = st
        .batches
        .iter()
        .find(|(_, b)| b.jobs.len() >= config.max_batch)
    {
        return Ok((k, FlushReason::Full));
    }
    let oldest = st
        .batches
        .iter()
        .filter(|(_, b)| !b.jobs.is_empty())
        .min_by_key(|(_, b)| b.oldest);
    let Some((&k, b)) = oldest else {
        return Err(None);
    };
    if st.queued >= potential {
        return Ok((k, FlushReason::AllWaiting));
    }
    let due = b.oldest + config.max_wait;
    if due <= now {
        Ok((k, FlushReason::Timer))
    } else {
        Err(Some(due - now))
    }
}

fn flusher<J: Job, F>(shared: &Shared<J>, run: &F)
where
    F: Fn(Vec<J>) -> Vec<Result<J::Output, EngineError>>,
{
    loop {
        let (jobs, reason) = {
            let mut st = shared.state.lock().unwrap_or_else(|e| e.into_inner());
            loop {
                let potential = shared.potential.load(Ordering::Acquire);
                match ready(&st, &shared.config, potential, Instant::now()) {
                    Ok((key, reason)) => {
                        let batch = st
                            .batches
                            .get_mut(&key)
                            .expect("ready() returned a present key");
                        let n = batch.jobs.len().min(shared.config.max_batch);
                        let jobs: Vec<Work<J>> = batch.jobs.drain(..n).collect();
                        batch.oldest = Instant::now();
                        if batch.jobs.is_empty() {
                            st.batches.remove(&key);
                        }
                        st.queued -= jobs.len();
                        break (jobs, reason);
                    }
                    Err(_) if st.closed => return,
                    Err(Some(wait)) => {
                        st = shared
                            .wake
                            .wait_timeout(st, wait)
                            .unwrap_or_else(|e| e.into_inner())
                            .0
                    }
                    Err(None) => st = shared.wake.wait(st).unwrap_or_else(|e| e.into_inner()),
                }
            }
        };
        // Jobs whose caller went away are not computed.
        let (jobs, replies): (Vec<J>, Vec<_>) =
            jobs.into_iter().filter(|(_, tx)| !tx.is_closed()).unzip();
        if jobs.is_empty() {
            continue;
        }
        shared.counters.flushed(reason, jobs.len());
        let results = run(jobs);
        let mut results = results.into_iter();
        for tx in replies {
            let r = results.next().unwrap_or(Err(EngineError::Failed(
                "the batch returned too few results".into(),
            )));
            let _ = tx.send(r);
        }
    }
}

impl<J: Job> Drop for BatchQueue<J> {
    fn drop(&mut self) {
        self.shared
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .closed = true;
        self.shared.wake.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
