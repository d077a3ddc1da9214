//! A side future polled again only after its own waker was used.
//!
//! A connection's task waits on its I/O and, beside it, on signals that almost never fire:
//! a forced shutdown, the start of a drain, a due timeout. `tokio::select!` polls every
//! branch on every wake-up, and each of those signals is a `tokio::sync::Notify` waiter
//! underneath (`watch::Receiver::changed`, `CancellationToken::cancelled`, `Notify`), which
//! takes its Notify's mutex on every poll to look for a notification it was not sent. On
//! the HTTP/1.1 keep-alive path that was 3% of the gateway's user time
//! (`NotifiedProject::poll_notified` and `is_cancelled`). The gate
//! gives the side future a waker of its own and skips polling it while that waker has not
//! fired, as `FuturesUnordered` does for each of its futures.

use futures_util::task::AtomicWaker;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};

/// Polls a side future only when it is new or was woken since its last poll. One per task,
/// reused for each new side future (`fresh`).
pub(crate) struct WakeGate {
    flag: Arc<Flag>,
    /// The waker the side future is polled with (`flag`'s): made once, not per poll.
    waker: Waker,
}

struct Flag {
    /// The side future's waker was used since it was last polled.
    fired: AtomicBool,
    /// The task to wake when it is.
    task: AtomicWaker,
}

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.fired.store(true, Ordering::Release);
        self.task.wake();
    }
}

impl WakeGate {
    pub(crate) fn new() -> Self {
        let flag = Arc::new(Flag {
            fired: AtomicBool::new(false),
            task: AtomicWaker::new(),
        });
        let waker = Waker::from(flag.clone());
        WakeGate { flag, waker }
    }

    /// Polls `side` when `fresh` (a future this gate has not polled yet) or when its waker
    /// fired since its last poll; otherwise `Pending`, with the task's waker kept so that the
    /// side future's wake reaches the task.
    pub(crate) fn poll<F: Future>(
        &self,
        cx: &mut Context<'_>,
        side: Pin<&mut F>,
        fresh: bool,
    ) -> Poll<F::Output> {
        // The task's waker first: a wake between the check below and the next poll then
        // reaches the task (`register` only clones a waker that would wake another task).
        self.flag.task.register(cx.waker());
        if fresh | self.flag.fired.swap(false, Ordering::AcqRel) {
            side.poll(&mut Context::from_waker(&self.waker))
        } else {
            Poll::Pending
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::pin::pin;
    use std::sync::atomic::AtomicUsize;

    #[tokio::test]
    async fn a_side_future_is_polled_when_new_or_woken_and_never_misses_its_wake() {
        let polls = AtomicUsize::new(0);
        let notify = tokio::sync::Notify::new();
        let mut fut = pin!(async {
            let mut waiting = pin!(notify.notified());
            std::future::poll_fn(|cx| {
                polls.fetch_add(1, Ordering::Relaxed);
                waiting.as_mut().poll(cx)
            })
            .await;
            7
        });
        let gate = WakeGate::new();
        let task = futures_util::task::noop_waker();
        let mut cx = Context::from_waker(&task);
        assert!(gate.poll(&mut cx, fut.as_mut(), true).is_pending());
        assert_eq!(
            polls.load(Ordering::Relaxed),
            1,
            "a fresh side future is polled"
        );
        for _ in 0..5 {
            assert!(gate.poll(&mut cx, fut.as_mut(), false).is_pending());
        }
        assert_eq!(
            polls.load(Ordering::Relaxed),
            1,
            "not polled again until its waker fires"
        );
        notify.notify_one();
        assert_eq!(gate.poll(&mut cx, fut.as_mut(), false), Poll::Ready(7));
        assert_eq!(polls.load(Ordering::Relaxed), 2);
    }

    #[tokio::test]
    async fn the_side_futures_wake_reaches_the_task() {
        let notify = Arc::new(tokio::sync::Notify::new());
        let n = notify.clone();
        let waited = tokio::spawn(async move {
            let gate = WakeGate::new();
            let mut side = pin!(n.notified());
            let mut fresh = true;
            // A task that is woken only through the gate: without the gate's wake it would
            // hang (and the timeout below fail the test).
            std::future::poll_fn(|cx| gate.poll(cx, side.as_mut(), std::mem::take(&mut fresh)))
                .await
        });
        tokio::task::yield_now().await;
        notify.notify_one();
        tokio::time::timeout(std::time::Duration::from_secs(10), waited)
            .await
            .expect("the task was woken")
            .unwrap();
    }
}
