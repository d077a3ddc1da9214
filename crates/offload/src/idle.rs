//! Work that must never delay a request: run at the scheduler's idle priority.
//!
//! Applying a large configuration (composing 40,000 routes, building a routing table) costs
//! tens of milliseconds of CPU. On a thread at the normal priority it shares the core with
//! the event loop, and requests arriving meanwhile wait for their time slice (p99 13x its idle
//! value in `bench/fleet`). At `SCHED_IDLE` the event loop always preempts it; the work
//! still finishes as soon as the core has a moment.

/// Runs `f` on a new thread at `SCHED_IDLE` and waits for it (call it off the event loop:
/// from a blocking thread). The thread is new each time because an unprivileged thread
/// cannot leave `SCHED_IDLE` again; one costs tens of microseconds, the work milliseconds.
/// Where the policy cannot be set, `f` still runs, at the normal priority.
pub fn run_idle<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    let mut job = Some(f);
    let ran = std::thread::scope(|s| {
        let spawned = std::thread::Builder::new()
            .name("sluice-idle".into())
            .spawn_scoped(s, || {
                lower_to_idle();
                (job.take().expect("taken once"))()
            });
        spawned.ok().map(|h| match h.join() {
            Ok(v) => v,
            Err(panic) => std::panic::resume_unwind(panic),
        })
    });
    // No thread to be had (a process at its limit): here, at the caller's priority.
    ran.unwrap_or_else(|| (job.take().expect("not run"))())
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
        let borrowed = [1, 2, 3];
        assert_eq!(run_idle(|| borrowed.iter().sum::<i32>()), 6);
    }

    #[test]
    #[should_panic(expected = "boom")]
    fn a_panic_reaches_the_caller() {
        run_idle(|| panic!("boom"));
    }
}
