//! HTTP/2 streams run inside their connection's task, as HTTP/3's requests do
//! (`http3::connection`), not as a task each.
//!
//! hyper hands each stream's future to an executor; `TokioExecutor` spawned it, and a
//! stream's life then cost a task (its allocation, the runtime's task list, a run-queue
//! entry per wake-up) and a cross-task wake of the connection's task for every frame it
//! queued. Here [`StreamSet`] keeps them in a `FuturesUnordered` that [`StreamSet::poll`]
//! drives from the connection's own task, before the connection is polled, so the frames a
//! stream queues are written in the same poll. A connection's streams then share one worker
//! thread at a time (as NGINX's and HAProxy's connections do), and end with it: a stream still
//! running when its connection has ended is dropped (its client is gone).

use futures_util::stream::{FuturesUnordered, StreamExt};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

type StreamFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The streams of one HTTP/2 connection; hyper's executor for it.
#[derive(Clone, Default)]
pub(crate) struct StreamSet(Arc<Inner>);

#[derive(Default)]
struct Inner {
    /// Locked only by the connection's task (hyper's `execute` is called from inside the
    /// connection's poll, never during the streams' own); the lock makes the set `Sync`.
    streams: Mutex<FuturesUnordered<StreamFuture>>,
    /// Streams added so far: a poll that added one polls the streams again.
    added: AtomicUsize,
}

impl<F> hyper::rt::Executor<F> for StreamSet
where
    F: Future<Output = ()> + Send + 'static,
{
    fn execute(&self, fut: F) {
        self.0
            .streams
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Box::pin(fut));
        self.0.added.fetch_add(1, Ordering::Relaxed);
    }
}

impl StreamSet {
    /// Polls the streams, then `conn`, and again while `conn` started new streams; returns
    /// what `conn` returned.
    pub(crate) fn poll<T>(
        &self,
        cx: &mut Context<'_>,
        mut conn: impl FnMut(&mut Context<'_>) -> Poll<T>,
    ) -> Poll<T> {
        loop {
            self.poll_streams(cx);
            let added = self.0.added.load(Ordering::Relaxed);
            let polled = conn(cx);
            if polled.is_ready() || self.0.added.load(Ordering::Relaxed) == added {
                return polled;
            }
        }
    }

    /// Runs every stream that is ready until each waits or ends.
    fn poll_streams(&self, cx: &mut Context<'_>) {
        let mut streams = self.0.streams.lock().unwrap_or_else(|e| e.into_inner());
        // `Ready(None)`: none left; `Pending`: all wait (or the set yielded, having woken
        // this task to come back).
        while let Poll::Ready(Some(())) = streams.poll_next_unpin(cx) {}
    }

    /// Streams not yet ended.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.0.streams.lock().unwrap().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::rt::Executor;
    use std::sync::atomic::AtomicBool;

    #[test]
    fn streams_started_by_the_connection_run_in_the_same_poll() {
        let set = StreamSet::default();
        let ran = Arc::new(AtomicBool::new(false));
        let mut polls = 0;
        let mut cx = Context::from_waker(std::task::Waker::noop());
        // One poll of the connection's task: the connection reads a request and starts its
        // stream, and the stream must run before the poll returns.
        let result = set.poll(&mut cx, |_| {
            polls += 1;
            if polls == 1 {
                let ran = ran.clone();
                set.execute(async move { ran.store(true, Ordering::Relaxed) });
                Poll::Pending
            } else {
                Poll::Ready(ran.load(Ordering::Relaxed))
            }
        });
        assert_eq!(
            result,
            Poll::Ready(true),
            "the new stream ran before the connection's next poll"
        );
        assert_eq!(polls, 2);
        assert_eq!(set.len(), 0, "the ended stream is gone");
    }

    #[tokio::test]
    async fn a_waiting_stream_is_polled_again_when_it_is_woken() {
        let set = StreamSet::default();
        let (tx, rx) = tokio::sync::oneshot::channel::<u32>();
        let got = Arc::new(AtomicUsize::new(0));
        {
            let got = got.clone();
            set.execute(async move { got.store(rx.await.unwrap() as usize, Ordering::Relaxed) });
        }
        // First poll: the stream waits; the connection has nothing to do.
        let first =
            std::future::poll_fn(|cx| Poll::Ready(set.poll(cx, |_| Poll::<()>::Pending))).await;
        assert!(first.is_pending());
        assert_eq!(set.len(), 1);
        tx.send(7).unwrap();
        // The stream's wake-up wakes the connection's task, whose poll runs the stream (a
        // bound, so that a lost wake-up fails the test rather than hanging it).
        let woken = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            std::future::poll_fn(|cx| {
                let _ = set.poll(cx, |_| Poll::<()>::Pending);
                if set.len() == 0 {
                    Poll::Ready(())
                } else {
                    Poll::Pending
                }
            }),
        )
        .await;
        assert!(
            woken.is_ok(),
            "the stream's wake-up did not reach the connection's task"
        );
        assert_eq!(got.load(Ordering::Relaxed), 7);
    }
}
