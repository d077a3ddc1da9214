//! Body wrappers: a request body that enforces the size limit and counts bytes in, and a
//! response body that counts bytes out and finishes the request's bookkeeping (access log,
//! in-flight counters) when it ends or is dropped, so nothing leaks when a client goes away.

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, ready};

/// Errors crossing body boundaries.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The body type sent upstream and to clients.
pub(crate) type ProxyBody = http_body_util::combinators::BoxBody<Bytes, BoxError>;

/// An empty body (a HEAD's answer, a request without a body).
pub(crate) fn empty() -> ProxyBody {
    use http_body_util::BodyExt as _;
    http_body_util::Empty::new()
        .map_err(|never| match never {})
        .boxed()
}

/// The size of a body made of `n` bytes already read, then `rest`.
pub(crate) fn size_after(n: u64, rest: SizeHint) -> SizeHint {
    match rest.exact() {
        Some(r) => SizeHint::with_exact(n + r),
        None => {
            let mut h = SizeHint::new();
            h.set_lower(n + rest.lower());
            h
        }
    }
}

/// The request body exceeded the listener's `max_body_bytes`.
#[derive(Debug, thiserror::Error)]
#[error("request body exceeds the limit of {limit} bytes")]
pub(crate) struct BodyTooLarge {
    pub(crate) limit: u64,
}

pin_project! {
    /// A client's request body on its way upstream: counts bytes, fails past `limit`.
    pub(crate) struct LimitedBody<B> {
        #[pin]
        inner: B,
        limit: u64,
        // Where the count is shared (with the access log's entry); `None`: a request
        // without a body, whose count (`own`, 0) no one reads.
        seen: Option<Arc<AtomicU64>>,
        own: u64,
    }
}

impl<B> LimitedBody<B> {
    pub(crate) fn new(inner: B, limit: u64, seen: Option<Arc<AtomicU64>>) -> Self {
        LimitedBody {
            inner,
            limit,
            seen,
            own: 0,
        }
    }
}

impl<B> Body for LimitedBody<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.project();
        match ready!(this.inner.poll_frame(cx)) {
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    let n = data.len() as u64;
                    let total = match this.seen {
                        Some(seen) => seen.fetch_add(n, Ordering::Relaxed) + n,
                        None => {
                            *this.own += n;
                            *this.own
                        }
                    };
                    if total > *this.limit {
                        return Poll::Ready(Some(Err(Box::new(BodyTooLarge {
                            limit: *this.limit,
                        }))));
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Some(Err(e)) => Poll::Ready(Some(Err(e.into()))),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Runs when a response has been sent completely, failed, or was abandoned by the client.
pub(crate) trait OnDone: Send + 'static {
    /// `bytes_out`: body bytes handed to the client connection; `complete`: whether the body
    /// reached its end.
    fn done(&mut self, bytes_out: u64, complete: bool);
}

pin_project! {
    /// A response body on its way to the client.
    pub(crate) struct TrackedBody<B: Body, D: OnDone> {
        #[pin]
        inner: B,
        sent: u64,
        on_done: Option<D>,
    }

    impl<B: Body, D: OnDone> PinnedDrop for TrackedBody<B, D> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if let Some(mut d) = this.on_done.take() {
                // An empty body may be dropped without ever being polled: that is complete.
                let complete = this.inner.as_ref().get_ref().is_end_stream();
                d.done(*this.sent, complete);
            }
        }
    }
}

impl<B: Body, D: OnDone> TrackedBody<B, D> {
    pub(crate) fn new(inner: B, on_done: D) -> Self {
        TrackedBody {
            inner,
            sent: 0,
            on_done: Some(on_done),
        }
    }
}

impl<B, D> Body for TrackedBody<B, D>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
    D: OnDone,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.project();
        let polled = ready!(this.inner.poll_frame(cx));
        match &polled {
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    *this.sent += data.len() as u64;
                }
            }
            None => {
                if let Some(mut d) = this.on_done.take() {
                    d.done(*this.sent, true);
                }
            }
            Some(Err(_)) => {
                if let Some(mut d) = this.on_done.take() {
                    d.done(*this.sent, false);
                }
            }
        }
        Poll::Ready(polled.map(|r| r.map_err(Into::into)))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A gzip request body that did not decompress: the client gets 400.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct BadRequestBody(pub(crate) String);

pin_project! {
    /// A request body sent with `Content-Encoding: gzip`, decompressed on its way upstream
    /// (`decompress_requests`). Past `max_decompressed_bytes` it fails with
    /// [`BodyTooLarge`] (→ 413), so a decompression bomb costs at most about 1 MiB of memory.
    pub(crate) struct GunzipBody<B> {
        #[pin]
        inner: B,
        inflater: sluice_compress::Inflater,
        finished: bool,
    }
}

impl<B> GunzipBody<B> {
    pub(crate) fn new(inner: B, limit: u64) -> Self {
        GunzipBody {
            inner,
            inflater: sluice_compress::Inflater::new(limit),
            finished: false,
        }
    }
}

fn inflate_error(e: sluice_compress::InflateError) -> BoxError {
    match e {
        sluice_compress::InflateError::TooLarge { limit } => Box::new(BodyTooLarge { limit }),
        other => Box::new(BadRequestBody(other.to_string())),
    }
}

impl<B> Body for GunzipBody<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let mut this = self.project();
        loop {
            if *this.finished {
                return Poll::Ready(None);
            }
            match ready!(this.inner.as_mut().poll_frame(cx)) {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => match this.inflater.push(&data) {
                        // Input that produced no output yet: read on.
                        Ok(out) if out.is_empty() => continue,
                        Ok(out) => return Poll::Ready(Some(Ok(Frame::data(out)))),
                        Err(e) => return Poll::Ready(Some(Err(inflate_error(e)))),
                    },
                    Err(frame) => return Poll::Ready(Some(Ok(frame))),
                },
                Some(Err(e)) => return Poll::Ready(Some(Err(e.into()))),
                None => {
                    *this.finished = true;
                    return match this.inflater.finish() {
                        Ok(out) if out.is_empty() => Poll::Ready(None),
                        Ok(out) => Poll::Ready(Some(Ok(Frame::data(out)))),
                        Err(e) => Poll::Ready(Some(Err(inflate_error(e)))),
                    };
                }
            }
        }
    }
}
