//! The bounded pool that checks passwords (bcrypt, apr1): a fixed number of threads and a
//! queue of known length, shared by every route and MQTT listener of a gateway (`[auth]`).
//!
//! A bcrypt check costs milliseconds of a core. On Tokio's blocking pool each failed login
//! was a thread of its own (up to 512), so a flood of wrong passwords could take every core
//! and as many threads; here it takes `hash_threads` cores, `hash_queue` checks wait, and
//! the next is refused at once ([`Busy`]: 503, counted as `hash_queue_full`) rather than
//! waiting behind them.

use sluice_config::AuthSettings;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex, OnceLock};

/// A check to run on the pool.
type Job = Box<dyn FnOnce() + Send>;

/// The pool is full: every thread busy and `hash_queue` checks waiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Busy;

/// The password-hashing pool of one gateway. Its threads start with the first check (a
/// configuration without basic authentication starts none) and end when it is dropped.
#[derive(Debug)]
pub struct HashPool {
    settings: AuthSettings,
    /// Checks accepted and not finished (running or waiting): at most threads + queue.
    in_flight: Arc<AtomicUsize>,
    jobs: OnceLock<Sender<Job>>,
}

impl Default for HashPool {
    fn default() -> Self {
        HashPool::new(AuthSettings::default())
    }
}

impl HashPool {
    /// A pool of `settings`' size; no thread starts until a password is checked.
    pub fn new(settings: AuthSettings) -> Self {
        HashPool {
            settings,
            in_flight: Arc::new(AtomicUsize::new(0)),
            jobs: OnceLock::new(),
        }
    }

    /// Checks accepted and not finished.
    #[cfg(test)]
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }

    /// What it was made with (a reload keeps the pool while they stay).
    pub fn settings(&self) -> AuthSettings {
        self.settings
    }

    /// Runs `check` on a pool thread, or refuses at once when the pool is full. A check
    /// that panics is a failed check (`false`).
    pub(crate) async fn run(
        &self,
        check: impl FnOnce() -> bool + Send + 'static,
    ) -> Result<bool, Busy> {
        let capacity = self.settings.hash_threads.get() + self.settings.hash_queue;
        self.in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < capacity).then_some(n + 1)
            })
            .map_err(|_| Busy)?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        let done = Finished(self.in_flight.clone());
        let job: Job = Box::new(move || {
            let _done = done;
            let _ = tx.send(check());
        });
        // The receiving threads live as long as the sender, which lives as long as `self`.
        if self.sender().send(job).is_err() {
            return Err(Busy);
        }
        // A dropped request leaves its check to finish (and free its place) on the thread.
        Ok(rx.await.unwrap_or(false))
    }

    fn sender(&self) -> &Sender<Job> {
        self.jobs.get_or_init(|| {
            let (tx, rx) = std::sync::mpsc::channel::<Job>();
            let rx = Arc::new(Mutex::new(rx));
            for i in 0..self.settings.hash_threads.get() {
                let rx = rx.clone();
                let spawned = std::thread::Builder::new()
                    .name(format!("sluice-hash-{i}"))
                    .spawn(move || work(&rx));
                if let Err(e) = spawned {
                    tracing::error!("starting a password-hashing thread: {e}");
                }
            }
            tx
        })
    }
}

/// One thread: takes checks until the pool is dropped.
fn work(jobs: &Mutex<Receiver<Job>>) {
    loop {
        // The lock is held only while waiting for the next check, never while running one.
        let job = match jobs.lock() {
            Ok(rx) => rx.recv(),
            Err(poisoned) => poisoned.into_inner().recv(),
        };
        let Ok(job) = job else { return };
        // A panicking check drops its answer (the request's check fails); the thread stays.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
    }
}

/// Frees a check's place in the pool when it ends, however it ends.
struct Finished(Arc<AtomicUsize>);

impl Drop for Finished {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::num::NonZeroUsize;

    /// One thread and one place in the queue: a third check while two are held is refused at
    /// once; once they finish, places are free again. Counted, never timed: the held checks
    /// wait on a channel the test opens.
    #[test]
    fn a_full_pool_refuses_and_frees_its_places() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let pool = Arc::new(HashPool::new(AuthSettings {
            hash_threads: NonZeroUsize::MIN,
            hash_queue: 1,
        }));
        let (open, gate) = std::sync::mpsc::channel::<()>();
        let gate = Arc::new(Mutex::new(gate));
        rt.block_on(async {
            let held: Vec<_> = (0..2)
                .map(|_| {
                    let (pool, gate) = (pool.clone(), gate.clone());
                    tokio::spawn(async move {
                        pool.run(move || gate.lock().unwrap().recv().is_ok()).await
                    })
                })
                .collect();
            // Both accepted (counted in flight) before the third is tried.
            while pool.in_flight.load(Ordering::Acquire) < 2 {
                tokio::task::yield_now().await;
            }
            assert_eq!(pool.run(|| true).await, Err(Busy));
            open.send(()).unwrap();
            open.send(()).unwrap();
            for h in held {
                assert_eq!(h.await.unwrap(), Ok(true));
            }
            assert_eq!(pool.in_flight.load(Ordering::Acquire), 0);
            assert_eq!(pool.run(|| true).await, Ok(true));
            assert_eq!(pool.run(|| panic!("a broken check")).await, Ok(false));
            assert_eq!(pool.run(|| true).await, Ok(true), "the thread survived");
        });
    }
}
