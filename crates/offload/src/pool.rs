use crate::{Engine, EngineError, Job, Pending, Reject, completer};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use tokio::sync::oneshot;

type Work<J> = (J, oneshot::Sender<Result<<J as Job>::Output, EngineError>>);

struct Shared<J: Job> {
    queue: Mutex<Queue<J>>,
    ready: Condvar,
    in_flight: AtomicUsize,
    capacity: usize,
}

struct Queue<J: Job> {
    jobs: VecDeque<Work<J>>,
    closed: bool,
}

/// Runs jobs on `threads` dedicated threads, with at most `capacity` accepted and not yet
/// finished; past that it answers [`Reject::Busy`] at once, so the dispatcher moves on
/// instead of queueing without bound.
///
/// A job whose caller has gone away by the time a thread picks it up is skipped.
pub struct Pool<J: Job> {
    shared: Arc<Shared<J>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl<J: Job> std::fmt::Debug for Pool<J> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("threads", &self.threads.len())
            .field("capacity", &self.shared.capacity)
            .field("in_flight", &self.in_flight())
            .finish()
    }
}

impl<J: Job> Pool<J> {
    /// Starts `threads` threads (at least one) computing with `work`.
    pub fn new<F>(name: &str, threads: usize, capacity: usize, work: F) -> std::io::Result<Self>
    where
        F: Fn(&J) -> Result<J::Output, EngineError> + Send + Sync + 'static,
    {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue {
                jobs: VecDeque::new(),
                closed: false,
            }),
            ready: Condvar::new(),
            in_flight: AtomicUsize::new(0),
            capacity: capacity.max(1),
        });
        let work = Arc::new(work);
        let mut handles = Vec::new();
        for i in 0..threads.max(1) {
            let (shared, work) = (shared.clone(), work.clone());
            handles.push(
                std::thread::Builder::new()
                    .name(format!("{name}-{i}"))
                    .spawn(move || worker(&shared, &*work))?,
            );
        }
        Ok(Pool {
            shared,
            threads: handles,
        })
    }

    /// Jobs accepted and not yet finished.
    pub fn in_flight(&self) -> usize {
        self.shared.in_flight.load(Ordering::Acquire)
    }
}

fn worker<J: Job, F>(shared: &Shared<J>, work: &F)
where
    F: Fn(&J) -> Result<J::Output, EngineError>,
{
    loop {
        let (job, reply) = {
            let mut q = shared.queue.lock().unwrap_or_else(|e| e.into_inner());
            loop {
                if let Some(w) = q.jobs.pop_front() {
                    break w;
                }
                if q.closed {
                    return;
                }
                q = shared.ready.wait(q).unwrap_or_else(|e| e.into_inner());
            }
        };
        let result = (!reply.is_closed()).then(|| work(&job));
        // Released before the reply: a caller woken by it may submit its next job at once and
        // must find the slot free (released after, a pool at capacity answered `Busy` to
        // callers that had every right to a slot, and their jobs fell back).
        shared.in_flight.fetch_sub(1, Ordering::AcqRel);
        if let Some(result) = result {
            let _ = reply.send(result); // the caller may have gone meanwhile: result discarded
        }
    }
}

impl<J: Job> Engine<J> for Pool<J> {
    fn name(&self) -> &str {
        "pool"
    }

    fn submit(&self, job: J) -> Result<Pending<J::Output>, Reject> {
        let s = &self.shared;
        let mut current = s.in_flight.load(Ordering::Acquire);
        loop {
            if current >= s.capacity {
                return Err(Reject::Busy);
            }
            match s.in_flight.compare_exchange_weak(
                current,
                current + 1,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => break,
                Err(now) => current = now,
            }
        }
        let (tx, pending) = completer();
        s.queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .jobs
            .push_back((job, tx));
        s.ready.notify_one();
        Ok(pending)
    }
}

impl<J: Job> Drop for Pool<J> {
    fn drop(&mut self) {
        self.shared
            .queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .closed = true;
        self.shared.ready.notify_all();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
