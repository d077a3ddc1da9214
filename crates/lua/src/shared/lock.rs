//! The lock of one `ngx.shared` dictionary: spin, then yield, and release with a plain
//! store, as NGINX's `ngx_shmtx` spins then yields.
//!
//! Why not a futex mutex (`std`'s, `parking_lot`'s): their release is an atomic
//! read-modify-write (`xchg` or `lock cmpxchg`) that learns whether a waiter sleeps. A
//! dictionary's holds are a hash lookup and an add, shorter than a sleep and a wake, and an
//! `incr` loop takes the lock once per call: on a 2-vCPU KVM host `perf` put about 10 ns on
//! each of the two atomics, most of the call. Here nobody sleeps, so the release needs to tell
//! nobody: a release store, a plain `mov` on x86-64. A waiter spins with the CPU's pause hint
//! for a short while and then yields its thread each round, so a holder that was preempted
//! (or one walking the whole dictionary to evict) is waited for without a core burning at
//! full speed. No hold blocks or calls into Lua.

#![expect(
    unsafe_code,
    reason = "lock_api's RawMutex is an unsafe trait: its lock must exclude"
)]

use std::sync::atomic::{AtomicBool, Ordering};

/// Pause-hinted spins before a waiter starts yielding (NGINX's `ngx_shmtx` spins up to 2,048
/// pauses; a dictionary hold is far shorter than an NGINX worker's).
const SPINS: u32 = 100;

/// The raw lock: `true` while held.
pub(crate) struct RawSpinYield(AtomicBool);

// SAFETY: `lock` returns only after its compare-exchange moved the flag from false to true
// (Acquire), so one holder at a time; `unlock` (Release) is called by the holder alone, as
// lock_api's guard guarantees, and publishes the hold's writes to the next acquirer.
unsafe impl lock_api::RawMutex for RawSpinYield {
    #[allow(
        clippy::declare_interior_mutable_const,
        reason = "lock_api's INIT pattern"
    )]
    const INIT: Self = RawSpinYield(AtomicBool::new(false));
    type GuardMarker = lock_api::GuardSend;

    fn lock(&self) {
        let mut spins = 0;
        while !self.try_lock() {
            while self.0.load(Ordering::Relaxed) {
                if spins < SPINS {
                    spins += 1;
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
        }
    }

    fn try_lock(&self) -> bool {
        self.0
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    unsafe fn unlock(&self) {
        self.0.store(false, Ordering::Release);
    }
}

/// A value behind a [`RawSpinYield`].
pub(crate) type SpinMutex<T> = lock_api::Mutex<RawSpinYield, T>;

#[cfg(test)]
mod tests {
    use super::SpinMutex;
    use std::sync::Arc;

    /// Threads adding to one unsynchronized pair under the lock lose no update and never
    /// see the pair torn: a lock that let two holders in at once would fail either check.
    #[test]
    fn holders_exclude_each_other() {
        const THREADS: u64 = 4;
        const ROUNDS: u64 = 200_000;
        let pair = Arc::new(SpinMutex::new((0_u64, 0_u64)));
        let workers: Vec<_> = (0..THREADS)
            .map(|_| {
                let pair = Arc::clone(&pair);
                std::thread::spawn(move || {
                    for _ in 0..ROUNDS {
                        let mut p = pair.lock();
                        assert_eq!(p.0, p.1, "a second holder was inside");
                        p.0 += 1;
                        std::hint::black_box(&mut *p);
                        p.1 += 1;
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        assert_eq!(*pair.lock(), (THREADS * ROUNDS, THREADS * ROUNDS));
    }

    /// A guard dropped by a panic releases the lock (no poisoning, no lock held for good).
    #[test]
    fn a_panicking_holder_releases() {
        let m = Arc::new(SpinMutex::new(1));
        let held = Arc::clone(&m);
        let r = std::thread::spawn(move || {
            let _g = held.lock();
            panic!("inside the hold");
        })
        .join();
        assert!(r.is_err());
        assert!(m.try_lock().is_some());
    }
}
