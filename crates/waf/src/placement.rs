//! Where a request's inspection runs: on the WAF's threads (the default), or, with
//! `[waf] inline_percent`, on the event-loop thread that holds the request, within a share of
//! that thread's time.
//!
//! Why: handing an inspection to a WAF thread and its verdict back costs two wakes and the
//! context switches between the loop and the WAF thread, with the caches each one evicts. On
//! a 2-vCPU KVM host (AMD EPYC) with the gateway on one core that was about 100 µs of a
//! native-engine GET's 230, more than the inspection's own 70 (docs/waf.md, "Where an
//! inspection runs"). Inline, the same GET cost 102-142 µs. The price of running on the loop
//! is that a flood of inspected requests can take the loop from routes without a WAF, which
//! the WAF threads' idle priority prevents; so the loop lends at most a share of its time,
//! and only to the native engine's inspections of requests without a body and with a head
//! of at most [`INLINE_HEAD_MAX`] bytes, the cheap ones (libmodsecurity's GET costs ten
//! times the hand-off; a body's inspection grows with the body). Past its share,
//! inspections go to the WAF threads as before.
//!
//! The share is a credit per loop thread: it grows with the thread's wall-clock time at the
//! share's rate, up to [`BURST_NS`], and each inline inspection spends its own duration. An
//! inspection is run inline while the credit is positive; one that costs more than the
//! credit drives it negative, and the loop hands off until the share has paid it back. At
//! 100% every such inspection runs inline, as NGINX's worker runs ModSecurity.

use crate::facts::RequestFacts;
use std::cell::Cell;
use std::time::Instant;

/// The largest request head (target and header fields) inspected on the loop. The engine's
/// cost grows with the bytes it reads, and a crafted head (a long value that sends PCRE2
/// backtracking) could hold the loop for that long; a browser's head with its cookies is
/// 0.5-2 KiB. A larger head goes to the WAF's threads.
pub(crate) const INLINE_HEAD_MAX: usize = 4096;

/// The bytes of `facts`' head the rules read: the target and each field's name and value.
pub(crate) fn head_len(facts: &RequestFacts) -> usize {
    facts.target.len()
        + facts
            .headers
            .iter()
            .map(|(k, v)| k.as_str().len() + v.len())
            .sum::<usize>()
}

/// The most credit a loop thread saves while it inspects nothing: after an idle spell, the
/// inline inspections that may run back to back before the share applies.
pub(crate) const BURST_NS: i64 = 1_000_000;

/// One loop thread's credit of inline inspection time, in nanoseconds, as of `last`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Credit {
    credit_ns: i64,
    last: Option<Instant>,
}

impl Credit {
    /// No credit yet: the first look at a thread's clock starts it with [`BURST_NS`].
    pub(crate) const fn new() -> Self {
        Credit {
            credit_ns: 0,
            last: None,
        }
    }

    /// Whether an inspection starting at `now` may run inline at `percent` of the thread's
    /// time (1-100): the credit earned since the last look added (up to the burst), then
    /// positive.
    pub(crate) fn admit(&mut self, now: Instant, percent: u32) -> bool {
        let earned = match self.last {
            None => BURST_NS,
            Some(last) => {
                let elapsed = now.saturating_duration_since(last).as_nanos();
                let share = elapsed.saturating_mul(u128::from(percent.min(100))) / 100;
                i64::try_from(share).unwrap_or(i64::MAX)
            }
        };
        self.last = Some(now);
        self.credit_ns = self.credit_ns.saturating_add(earned).min(BURST_NS);
        self.credit_ns > 0
    }

    /// An inline inspection took `spent_ns`: spent from the credit.
    pub(crate) fn spend(&mut self, spent_ns: u64) {
        let spent = i64::try_from(spent_ns).unwrap_or(i64::MAX);
        self.credit_ns = self.credit_ns.saturating_sub(spent);
    }
}

thread_local! {
    /// The calling loop thread's credit (each tokio worker thread its own).
    static CREDIT: Cell<Credit> = const { Cell::new(Credit::new()) };
}

/// Runs `inspect` on the calling thread if its share (`percent` of its time) allows, and
/// spends what it took; `None` where the share is spent (hand the inspection off instead).
/// At 100 the share is all of the thread's time: every inspection runs inline, uncounted.
pub(crate) fn inline<T>(percent: u32, inspect: impl FnOnce() -> T) -> Option<T> {
    if percent >= 100 {
        return Some(inspect());
    }
    let started = Instant::now();
    let mut credit = CREDIT.get();
    if !credit.admit(started, percent) {
        CREDIT.set(credit);
        return None;
    }
    let out = inspect();
    let spent = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
    credit.spend(spent);
    CREDIT.set(credit);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::{BURST_NS, Credit};
    use std::time::{Duration, Instant};

    const US: u64 = 1_000;

    /// A thread's first inspection runs inline (the burst), and inspections that cost more
    /// than the share earns are refused until it has paid them back: at 50%, a 600 µs
    /// inspection after 1 ms of credit leaves 400 µs; a second one drives the credit to
    /// -200 µs, refused until 400 µs have passed (earning 200 µs).
    #[test]
    fn inspections_run_inline_within_their_share_of_the_thread() {
        let t0 = Instant::now();
        let at = |us: u64| t0 + Duration::from_micros(us);
        let mut c = Credit::new();
        assert!(c.admit(at(0), 50));
        c.spend(600 * US);
        assert!(c.admit(at(0), 50));
        c.spend(600 * US);
        assert!(!c.admit(at(0), 50), "the credit is spent: hand off");
        assert!(!c.admit(at(399), 50), "199.5 µs earned of the 200 owed");
        assert!(c.admit(at(402), 50), "paid back");
    }

    /// The credit saved while idle is capped at the burst, so a long idle spell does not
    /// buy a long run of inspections on the loop; at 100% the share is all the time there
    /// is, and at 1% a thread inspects inline a hundredth of it.
    #[test]
    fn an_idle_thread_saves_no_more_than_the_burst() {
        let t0 = Instant::now();
        let mut c = Credit::new();
        assert!(c.admit(t0, 100));
        assert!(c.admit(t0 + Duration::from_secs(60), 100));
        c.spend(u64::try_from(BURST_NS).unwrap() + 1);
        assert!(!c.admit(t0 + Duration::from_secs(60), 100));
        let mut c = Credit::new();
        assert!(c.admit(t0, 1));
        c.spend(2 * u64::try_from(BURST_NS).unwrap());
        assert!(!c.admit(t0 + Duration::from_millis(99), 1));
        assert!(c.admit(t0 + Duration::from_millis(101), 1));
    }

    /// A clock read earlier than the last (another core's `Instant`, or equal reads) earns
    /// nothing and never panics; huge spends saturate.
    #[test]
    fn a_clock_going_back_or_huge_spends_do_not_break_the_credit() {
        let t0 = Instant::now() + Duration::from_secs(1);
        let mut c = Credit::new();
        assert!(c.admit(t0, 30));
        c.spend(u64::MAX);
        assert!(!c.admit(t0 - Duration::from_millis(500), 30));
        assert!(!c.admit(t0 + Duration::from_secs(3600), 30));
    }
}
