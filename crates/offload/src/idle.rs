//! Work that must never delay a request: run at the scheduler's idle priority.
//!
//! Applying a large configuration (composing 40,000 routes, building a routing table) costs
//! tens of milliseconds of CPU. On a thread at the normal priority it shares the core with
//! the event loop, and requests arriving meanwhile wait for their time slice (p99 13x its idle
//! value in `bench/fleet`). At `SCHED_IDLE` the event loop always preempts it; the work
//! still finishes as soon as the core has a moment.

/// Runs `f` on a thread at `SCHED_IDLE` and waits for it (call it off the event loop: from a
/// blocking thread). A panic in `f` reaches the caller.
///
/// The threads are long-lived (an unprivileged thread cannot leave `SCHED_IDLE`, so they are
/// never lent to other work): a thread per job, as this was first, let each job's memory
/// outlive its thread, and the allocator handed those abandoned pages to whichever thread
/// allocated next, the event loop included, which then sorted through them between
/// requests. A new thread starts when every one is busy (a job may wait on a lock another
/// job holds), up to [`MAX_THREADS`]; beyond that, jobs queue. Where no thread can be
/// started, or the call comes from an idle thread already, `f` runs on the calling thread.
pub fn run_idle<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    if ON_IDLE_THREAD.get() {
        return f();
    }
    let (done, result) = std::sync::mpsc::sync_channel(1);
    let job: Job = Box::new(move || {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        let _ = done.send(r);
    });
    if let Err(job) = POOL.submit(job) {
        // No thread to be had (a process at its limit): here, at the caller's priority.
        job();
    }
    match result.recv() {
        Ok(Ok(v)) => v,
        Ok(Err(panic)) => std::panic::resume_unwind(panic),
        Err(_) => unreachable!("a job always answers: it catches its own panic"),
    }
}

/// The most idle threads at once.
pub const MAX_THREADS: usize = 8;

type Job = Box<dyn FnOnce() + Send + 'static>;

thread_local! {
    static ON_IDLE_THREAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

static POOL: Pool = Pool {
    state: std::sync::Mutex::new(PoolState {
        jobs: std::collections::VecDeque::new(),
        threads: 0,
        waiting: 0,
    }),
    ready: std::sync::Condvar::new(),
};

struct Pool {
    state: std::sync::Mutex<PoolState>,
    ready: std::sync::Condvar,
}

struct PoolState {
    jobs: std::collections::VecDeque<Job>,
    threads: usize,
    /// Threads waiting for a job.
    waiting: usize,
}

impl Pool {
    /// Queues `job`, starting a thread when none is free; gives it back where no thread runs
    /// or can be started.
    fn submit(&'static self, job: Job) -> Result<(), Job> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        // A waiting thread is free only if no queued job has claimed it yet: two jobs
        // submitted before it wakes must not both count on it (they would then run one after
        // the other on it, and jobs that wait on each other would hang).
        let free = st.waiting.saturating_sub(st.jobs.len());
        if free == 0 && st.threads < MAX_THREADS {
            let spawned = std::thread::Builder::new()
                .name("sluice-idle".into())
                .spawn(move || self.work());
            if spawned.is_ok() {
                st.threads += 1;
            } else if st.threads == 0 {
                return Err(job);
            }
        }
        st.jobs.push_back(job);
        drop(st);
        self.ready.notify_one();
        Ok(())
    }

    fn work(&'static self) {
        ON_IDLE_THREAD.set(true);
        lower_to_idle();
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            match st.jobs.pop_front() {
                Some(job) => {
                    drop(st);
                    job();
                    st = self.state.lock().unwrap_or_else(|e| e.into_inner());
                }
                None => {
                    st.waiting += 1;
                    st = self.ready.wait(st).unwrap_or_else(|e| e.into_inner());
                    st.waiting -= 1;
                }
            }
        }
    }
}

/// Moves the calling thread to `SCHED_IDLE`; false where the kernel refused.
#[expect(
    unsafe_code,
    reason = "sched_setscheduler(2) has no safe wrapper in std"
)]
pub fn lower_to_idle() -> bool {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: pid 0 names the calling thread; `param` is a valid, initialized sched_param
    // that outlives the call; SCHED_IDLE requires priority 0, which it has.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) };
    rc == 0
}

/// The calling thread's scheduling policy (tests).
#[expect(
    unsafe_code,
    reason = "sched_getscheduler(2) has no safe wrapper in std"
)]
pub fn current_policy() -> i32 {
    // SAFETY: pid 0 names the calling thread; the call reads no memory of ours.
    unsafe { libc::sched_getscheduler(0) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_work_runs_at_idle_priority_and_the_caller_keeps_its_own() {
        let before = current_policy();
        let (value, policy) = run_idle(|| (6 * 7, current_policy()));
        assert_eq!(value, 42);
        assert_eq!(policy, libc::SCHED_IDLE);
        assert_eq!(current_policy(), before, "the caller's policy changed");
    }

    #[test]
    fn jobs_that_wait_on_each_other_do_not_deadlock_the_pool() {
        // Each job waits until all have started: with fewer threads than jobs this hangs.
        // Several rounds, so that later rounds find threads waiting and submit against them
        // concurrently (the race where two jobs counted on one waiting thread).
        let n = 4;
        for _round in 0..50 {
            let barrier = std::sync::Arc::new(std::sync::Barrier::new(n));
            let start = std::sync::Arc::new(std::sync::Barrier::new(n));
            let callers: Vec<_> = (0..n)
                .map(|i| {
                    let b = barrier.clone();
                    let s = start.clone();
                    std::thread::spawn(move || {
                        s.wait();
                        run_idle(move || {
                            b.wait();
                            (i, current_policy())
                        })
                    })
                })
                .collect();
            for (i, c) in callers.into_iter().enumerate() {
                assert_eq!(c.join().unwrap(), (i, libc::SCHED_IDLE));
            }
        }
    }

    #[test]
    fn a_job_started_from_an_idle_thread_runs_there() {
        let nested = run_idle(|| {
            let outer = std::thread::current().id();
            run_idle(move || std::thread::current().id() == outer)
        });
        assert!(nested);
    }

    #[test]
    #[should_panic(expected = "boom")]
    fn a_panic_reaches_the_caller() {
        run_idle(|| panic!("boom"));
    }
}
