//! A write buffer for TLS client connections that gathers a response's pieces into one TLS
//! record and one `send(2)`, and holds no memory while the connection is idle.
//!
//! hyper writes a response head and its body separately, and h2 a frame header and its
//! payload; written straight to TLS each piece would be its own record and its own system
//! call. `tokio::io::BufWriter` gathers them, but allocates its capacity when the connection
//! opens and keeps it for the connection's life: 16 KiB on every idle keep-alive connection,
//! which at an entrance holding hundreds of thousands of idle mobile connections is most of
//! the memory per connection. This one allocates on the first write and frees its buffer
//! once flushed (an allocation per response costs far less than the syscalls it saves).

use std::io::IoSlice;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Gathers writes up to `cap` bytes; flushes when full, on `poll_flush` and on shutdown.
pub(crate) struct Coalescing<S> {
    inner: S,
    buf: Vec<u8>,
    /// Bytes of `buf` already written to `inner` (a flush interrupted by `Pending`).
    written: usize,
    cap: usize,
    /// Holds a flush back while more is still coming (HTTP/2; see `defer_flushes`).
    defer_flush: bool,
    /// `buf.len()` when a flush was last held back (0: none is). A flush that finds more
    /// bytes than that is held back again; one that finds none new goes out.
    held: usize,
}

impl<S> Coalescing<S> {
    pub(crate) fn new(inner: S, cap: usize) -> Self {
        Coalescing {
            inner,
            buf: Vec::new(),
            written: 0,
            cap,
            defer_flush: false,
            held: 0,
        }
    }

    /// Holds each flush back while the connection's task still has company in the run queue,
    /// so that what the other ready tasks add meanwhile goes out in the same record and
    /// `send(2)`.
    ///
    /// For HTTP/2. A held flush wakes its own task, which goes to the back of tokio's run
    /// queue; when it comes back, a flush that finds new bytes since it was held is held
    /// again, and one that finds none goes out (so does a full buffer). Held for one turn only
    /// (as it once was), a stream that finished after that turn woke the connection,
    /// whose next poll flushed at once: 0.54 `send(2)` per request on the h2 keep-alive bench
    /// (64 streams on 4 connections; HAProxy 0.17). Held until quiet: 0.13-0.14, and 7% less
    /// gateway CPU per request. (Tokio's `yield_now`, which waits for an I/O driver poll as
    /// well, batched the same but added a non-blocking `epoll_wait` per flush: 0.3 per
    /// request against 0.06, and 4% more CPU.) HTTP/1.1 answers one request at a time and
    /// does not use it.
    pub(crate) fn defer_flushes(mut self) -> Self {
        self.defer_flush = true;
        self
    }

    #[cfg(test)]
    pub(crate) fn get_ref(&self) -> &S {
        &self.inner
    }

    /// Bytes this writer holds allocated (0 while idle).
    #[cfg(test)]
    pub(crate) fn allocated(&self) -> usize {
        self.buf.capacity()
    }

    /// The capacity the buffer is allocated with for a first write of `total` bytes.
    ///
    /// A writer that holds its flushes back (HTTP/2) gathers the responses of several streams
    /// before it sends: allocated at 4 KiB, its buffer grew twice on the way to a full record,
    /// each time copying what it held (1.5 reallocations per record on the HTTP/2 keep-alive
    /// bench, 460 instructions and 32 of Sluice's ~620 simulated L1 data misses per request;
    /// `bench/instructions.py --cache`). It gets the record's size at once; only the bytes
    /// written are touched, and the buffer is freed when flushed either way. HTTP/1.1 sends
    /// one response at a time, and a small one needs no more than 4 KiB.
    fn first_capacity(&self, total: usize) -> usize {
        if self.defer_flush {
            self.cap
        } else {
            self.cap.min(total.max(4096))
        }
    }
}

impl<S: AsyncWrite + Unpin> Coalescing<S> {
    /// Writes out everything buffered, then frees the buffer.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        while self.written < self.buf.len() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &self.buf[self.written..]))?;
            if n == 0 {
                return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()));
            }
            self.written += n;
        }
        self.written = 0;
        self.held = 0;
        // Freed, not cleared: an idle connection holds no write buffer.
        self.buf = Vec::new();
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Coalescing<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.poll_write_vectored(cx, &[IoSlice::new(data)])
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let this = &mut *self;
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if this.buf.len() + total > this.cap && !this.buf.is_empty() {
            ready!(this.poll_drain(cx))?;
        }
        if this.buf.is_empty() && total >= this.cap {
            // Already a full record's worth: no copy.
            let first = bufs
                .iter()
                .find(|b| !b.is_empty())
                .map_or(&[][..], |b| &b[..]);
            return Pin::new(&mut this.inner).poll_write(cx, first);
        }
        let room = this.cap - this.buf.len();
        if this.buf.capacity() == 0 {
            this.buf.reserve_exact(this.first_capacity(total));
        }
        let mut taken = 0;
        for b in bufs {
            let n = b.len().min(room - taken);
            this.buf.extend_from_slice(&b[..n]);
            taken += n;
            if taken == room {
                break;
            }
        }
        Poll::Ready(Ok(taken))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        if self.defer_flush && self.written == 0 && self.buf.len() > self.held {
            self.held = self.buf.len();
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        ready!(self.poll_drain(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        ready!(self.poll_drain(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Coalescing<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    /// Records each write it receives; accepts at most `limit` bytes per write.
    #[derive(Default)]
    struct Recorder {
        writes: Vec<Vec<u8>>,
        limit: Option<usize>,
        flushes: usize,
    }

    impl AsyncWrite for Recorder {
        fn poll_write(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            data: &[u8],
        ) -> Poll<std::io::Result<usize>> {
            let n = self.limit.map_or(data.len(), |l| l.min(data.len()));
            self.writes.push(data[..n].to_vec());
            Poll::Ready(Ok(n))
        }
        fn poll_flush(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            self.flushes += 1;
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn pieces_go_out_as_one_write_and_the_buffer_is_freed() {
        let mut w = Coalescing::new(Recorder::default(), 16 * 1024);
        assert_eq!(w.allocated(), 0, "nothing allocated before the first write");
        w.write_all(b"HTTP/1.1 200 OK\r\n\r\n").await.unwrap();
        let n = w
            .write_vectored(&[IoSlice::new(b"frame head"), IoSlice::new(b"payload")])
            .await
            .unwrap();
        assert_eq!(n, 17, "both slices taken");
        assert!(w.get_ref().writes.is_empty(), "held until the flush");
        w.flush().await.unwrap();
        assert_eq!(
            w.get_ref().writes,
            vec![b"HTTP/1.1 200 OK\r\n\r\nframe headpayload".to_vec()]
        );
        assert_eq!(w.get_ref().flushes, 1);
        assert_eq!(w.allocated(), 0, "an idle connection holds no buffer");
    }

    #[tokio::test]
    async fn a_full_buffer_is_written_before_more_is_taken_and_big_writes_skip_it() {
        let mut w = Coalescing::new(Recorder::default(), 8);
        w.write_all(b"abcde").await.unwrap();
        w.write_all(b"fghij").await.unwrap(); // 10 > 8: "abcde" goes out first, whole
        assert_eq!(w.get_ref().writes, vec![b"abcde".to_vec()]);
        w.flush().await.unwrap();
        w.write_all(b"0123456789").await.unwrap(); // at least a buffer's worth: direct
        assert_eq!(
            w.get_ref().writes,
            vec![b"abcde".to_vec(), b"fghij".to_vec(), b"0123456789".to_vec()]
        );
    }

    #[tokio::test]
    async fn short_writes_of_the_inner_stream_lose_nothing() {
        let inner = Recorder {
            limit: Some(3),
            ..Default::default()
        };
        let mut w = Coalescing::new(inner, 1024);
        w.write_all(b"hello, ").await.unwrap();
        w.write_all(b"world").await.unwrap();
        w.shutdown().await.unwrap();
        let all: Vec<u8> = w.get_ref().writes.concat();
        assert_eq!(all, b"hello, world");
        assert_eq!(w.allocated(), 0);
    }

    /// Counts its wake-ups.
    struct Wakes(std::sync::atomic::AtomicUsize);

    impl std::task::Wake for Wakes {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    #[test]
    fn a_held_flush_waits_until_nothing_new_came_and_carries_it_all() {
        use std::sync::Arc;
        use std::sync::atomic::Ordering;
        let wakes = Arc::new(Wakes(0.into()));
        let waker = std::task::Waker::from(wakes.clone());
        let mut cx = Context::from_waker(&waker);
        let mut w = Coalescing::new(Recorder::default(), 16 * 1024).defer_flushes();
        let mut w = Pin::new(&mut w);

        // Nothing buffered: a flush has nothing to hold back.
        assert!(w.as_mut().poll_flush(&mut cx).is_ready());
        assert_eq!(wakes.0.load(Ordering::Relaxed), 0);

        // The first stream's response: its flush is held back, and the task woken to
        // come back to it.
        assert!(w.as_mut().poll_write(&mut cx, b"stream 1").is_ready());
        assert!(w.as_mut().poll_flush(&mut cx).is_pending());
        assert_eq!(wakes.0.load(Ordering::Relaxed), 1, "the task must be woken");
        assert!(w.get_ref().writes.is_empty());

        // Another stream's response in the meantime: the flush is held again.
        assert!(w.as_mut().poll_write(&mut cx, b", stream 2").is_ready());
        assert!(w.as_mut().poll_flush(&mut cx).is_pending());
        assert_eq!(wakes.0.load(Ordering::Relaxed), 2);
        assert!(w.get_ref().writes.is_empty());

        // Nothing new since: both go out in one write, and the buffer is freed.
        assert!(w.as_mut().poll_flush(&mut cx).is_ready());
        assert_eq!(w.get_ref().writes, vec![b"stream 1, stream 2".to_vec()]);
        assert_eq!(w.get_ref().flushes, 2, "the empty one, then this one");
        assert_eq!(w.allocated(), 0);

        // The next response is held afresh (the mark went with the flushed bytes).
        assert!(w.as_mut().poll_write(&mut cx, b"stream 3").is_ready());
        assert!(w.as_mut().poll_flush(&mut cx).is_pending());
        assert!(w.as_mut().poll_flush(&mut cx).is_ready());
        assert_eq!(w.get_ref().writes.len(), 2);
        assert_eq!(wakes.0.load(Ordering::Relaxed), 3);

        // Shutting down never waits.
        assert!(w.as_mut().poll_write(&mut cx, b"goaway").is_ready());
        assert!(w.as_mut().poll_shutdown(&mut cx).is_ready());
        assert_eq!(w.get_ref().writes.len(), 3);
        assert_eq!(wakes.0.load(Ordering::Relaxed), 3);
    }

    /// Inside tokio, a held flush goes out only once the tasks made ready meanwhile have run
    /// (a chain of two here; a flush held for one turn only would carry the first alone).
    #[tokio::test(flavor = "current_thread")]
    async fn a_held_flush_comes_back_after_the_tasks_made_ready_meanwhile() {
        use std::cell::RefCell;
        use std::rc::Rc;
        use tokio::sync::oneshot;
        let w = Rc::new(RefCell::new(
            Coalescing::new(Recorder::default(), 16 * 1024).defer_flushes(),
        ));
        let write = |w: &Rc<RefCell<Coalescing<Recorder>>>, data: &[u8]| {
            let waker = std::task::Waker::noop();
            let poll =
                Pin::new(&mut *w.borrow_mut()).poll_write(&mut Context::from_waker(waker), data);
            assert!(matches!(poll, Poll::Ready(Ok(n)) if n == data.len()));
        };
        let local = tokio::task::LocalSet::new();
        let ((tx1, rx1), (tx2, rx2)) = (oneshot::channel::<()>(), oneshot::channel::<()>());
        local.spawn_local({
            let w = w.clone();
            async move {
                rx1.await.unwrap();
                write(&w, b" second");
                tx2.send(()).unwrap();
            }
        });
        local.spawn_local({
            let w = w.clone();
            async move {
                rx2.await.unwrap();
                write(&w, b" third");
            }
        });
        let flusher = local.spawn_local({
            let w = w.clone();
            async move {
                write(&w, b"first");
                tx1.send(()).unwrap();
                std::future::poll_fn(|cx| Pin::new(&mut *w.borrow_mut()).poll_flush(cx))
                    .await
                    .unwrap();
            }
        });
        local.run_until(flusher).await.unwrap();
        assert_eq!(
            w.borrow().get_ref().writes,
            vec![b"first second third".to_vec()]
        );
    }

    #[test]
    fn a_deferring_writer_gathers_a_full_record_without_regrowing() {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut w = Coalescing::new(Recorder::default(), 16 * 1024).defer_flushes();
        let mut w = Pin::new(&mut w);
        // Twelve streams' responses of 1.2 KiB each, their flushes held back meanwhile.
        let response = [7u8; 1200];
        assert!(w.as_mut().poll_write(&mut cx, &response).is_ready());
        let first = w.allocated();
        assert_eq!(first, 16 * 1024, "allocated at the record's size");
        for _ in 1..12 {
            assert!(w.as_mut().poll_write(&mut cx, &response).is_ready());
            assert!(w.as_mut().poll_flush(&mut cx).is_pending());
        }
        assert_eq!(
            w.allocated(),
            first,
            "the buffer was never grown (and copied)"
        );
        assert!(w.as_mut().poll_flush(&mut cx).is_ready());
        assert_eq!(w.get_ref().writes.len(), 1);
        assert_eq!(w.get_ref().writes[0].len(), 12 * 1200);
        assert_eq!(w.allocated(), 0);

        // Without deferring (HTTP/1.1), a small response takes 4 KiB.
        let mut h1 = Coalescing::new(Recorder::default(), 16 * 1024);
        let mut h1 = Pin::new(&mut h1);
        assert!(h1.as_mut().poll_write(&mut cx, &response).is_ready());
        assert_eq!(h1.allocated(), 4096);
    }

    #[tokio::test]
    async fn without_deferring_a_flush_goes_out_at_once() {
        let mut w = Coalescing::new(Recorder::default(), 1024);
        w.write_all(b"HTTP/1.1 200 OK\r\n\r\n").await.unwrap();
        let flushed = std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut w).poll_flush(cx))).await;
        assert!(flushed.is_ready(), "HTTP/1.1's flush is never held back");
        assert_eq!(w.get_ref().writes.len(), 1);
    }
}
