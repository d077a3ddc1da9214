//! The lock that lets one thread at a time into a state, with a bounded wait.
//!
//! A state's calls run on the gateway's worker threads, which also drive its sockets. A call
//! normally holds its state for microseconds, and a thread that finds the state busy (a
//! request that moved to another worker thread between its phases, a timer, `/metrics`
//! reading the state's memory) waits for it. But a call can hold its state for good: inside
//! one C function that no budget interrupts (a Lua pattern that backtracks over a long
//! subject), or with no budget at all (`max_instructions = 0`). A worker thread that waited
//! for such a state would be lost as well, and with it every connection it serves. So a
//! waiter gives up once the same call has held the state for [`STUCK_AFTER`]; the first
//! waiter to see that marks the call, and later ones refuse at once while it still holds.
//! A refused call fails (its request gets a 500) and is counted
//! (`sluice_lua_refused_total`); the state is usable again as soon as the call ends.

use crate::stats;
use mlua::Thread;
use parking_lot::{Mutex, MutexGuard};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long one call may hold a state before threads stop waiting for it: far beyond what
/// a call under the instruction budget runs (the default stops a loop within tens of
/// milliseconds), short enough that a lost worker thread is noticed.
pub(crate) const STUCK_AFTER: Duration = Duration::from_secs(1);

/// How often a waiter looks again at who holds the state.
const LOOK_EVERY: Duration = Duration::from_millis(10);

/// A state's lock, which holds its runners at rest.
#[derive(Debug)]
pub(crate) struct Gate {
    idle: Mutex<Vec<Thread>>,
    /// One more at each entry (written by the thread that just entered): which call holds
    /// the state, as waiters see it.
    entries: AtomicU64,
    /// The entry a waiter saw hold the state for [`STUCK_AFTER`] (`u64::MAX`: none).
    stuck: AtomicU64,
}

/// Why a thread did not get into a state.
#[derive(Debug)]
pub(crate) struct Stuck;

impl std::fmt::Display for Stuck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "refused: another call has held this worker's Lua state for over {} s (inside a C function no budget interrupts, such as a backtracking Lua pattern, or with max_instructions = 0); the state serves again when that call ends",
            STUCK_AFTER.as_secs()
        )
    }
}

impl Default for Gate {
    fn default() -> Self {
        Gate {
            idle: Mutex::new(Vec::new()),
            entries: AtomicU64::new(0),
            stuck: AtomicU64::new(u64::MAX),
        }
    }
}

impl Gate {
    /// Into the state: at once when it is free, else once its call ends, unless that call
    /// has held it for [`STUCK_AFTER`] (counted).
    pub(crate) fn enter(&self) -> Result<MutexGuard<'_, Vec<Thread>>, Stuck> {
        if let Some(held) = self.idle.try_lock() {
            return Ok(self.entered(held));
        }
        let mut since = Instant::now();
        let mut holder = self.entries.load(Ordering::Acquire);
        loop {
            if holder == self.stuck.load(Ordering::Relaxed) {
                stats::refused();
                return Err(Stuck);
            }
            if let Some(held) = self.idle.try_lock_for(LOOK_EVERY) {
                return Ok(self.entered(held));
            }
            let now = self.entries.load(Ordering::Acquire);
            if now != holder {
                // Another call got in meanwhile: the wait starts again.
                (holder, since) = (now, Instant::now());
            } else if since.elapsed() >= STUCK_AFTER {
                self.stuck.store(holder, Ordering::Relaxed);
            }
        }
    }

    /// Whether a waiter gave up on the call that holds the state now: a new request goes
    /// to another state.
    pub(crate) fn is_stuck(&self) -> bool {
        self.entries.load(Ordering::Acquire) == self.stuck.load(Ordering::Relaxed)
    }

    /// Into the state only if it is free now (for readers that can do without it).
    pub(crate) fn enter_if_free(&self) -> Option<MutexGuard<'_, Vec<Thread>>> {
        self.idle.try_lock().map(|held| self.entered(held))
    }

    /// Marks the entry of the thread that holds `held` (only it writes the count).
    fn entered<'a>(&self, held: MutexGuard<'a, Vec<Thread>>) -> MutexGuard<'a, Vec<Thread>> {
        let n = self.entries.load(Ordering::Relaxed).wrapping_add(1) % u64::MAX;
        self.entries.store(n, Ordering::Release);
        held
    }

    /// Whether no thread holds the state now.
    #[cfg(test)]
    pub(crate) fn is_free(&self) -> bool {
        !self.idle.is_locked()
    }
}
