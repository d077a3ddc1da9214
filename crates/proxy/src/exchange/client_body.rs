//! A client's request body, read by the connection's task and consumed by whoever sends it
//! on (the upstream connection).
//!
//! One frame at a time crosses: the connection reads the socket only when the consumer has
//! asked for a frame and the last one was taken, so a slow upstream slows the client by TCP's
//! own flow control and nothing is buffered without bound (hyper's `want` does the same).
//! Requests without a body (most of them) never create one of these.

use crate::body::{BoxError, size_after};
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

#[derive(Default)]
struct Inner {
    /// A frame (or the error that ended the body) waiting for the consumer.
    ready: Option<Result<Frame<Bytes>, BoxError>>,
    /// The connection has delivered the body's last frame.
    ended: bool,
    /// The consumer polled and found nothing: the connection should read.
    wanted: bool,
    /// The consumer is gone: the rest of the body will never be read.
    dropped: bool,
    /// Bytes still to come when the length is known (Content-Length).
    remaining: Option<u64>,
    consumer: Option<Waker>,
    connection: Option<Waker>,
}

fn lock(inner: &Mutex<Inner>) -> std::sync::MutexGuard<'_, Inner> {
    // Nothing panics while holding it; a poisoned lock still holds consistent fields.
    inner
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The consumer's side: an `http_body::Body`.
pub(crate) struct RequestBody {
    inner: Arc<Mutex<Inner>>,
}

/// The connection's side.
pub(crate) struct BodySender {
    inner: Arc<Mutex<Inner>>,
}

/// A body and its sender; `remaining` is the Content-Length, when there is one.
pub(crate) fn channel(remaining: Option<u64>) -> (BodySender, RequestBody) {
    let inner = Arc::new(Mutex::new(Inner {
        remaining,
        ..Inner::default()
    }));
    (
        BodySender {
            inner: inner.clone(),
        },
        RequestBody { inner },
    )
}

/// What the connection may do for the body now.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Demand {
    /// Read and deliver the next frame.
    Frame,
    /// Nothing: a frame is waiting or none was asked for (the waker is registered).
    Wait,
    /// The consumer dropped the body.
    Gone,
}

impl BodySender {
    /// Whether the consumer wants a frame; registers `cx` to be woken when it does.
    pub(crate) fn demand(&self, cx: &mut Context<'_>) -> Demand {
        let mut i = lock(&self.inner);
        if i.dropped {
            return Demand::Gone;
        }
        if i.ready.is_none() && i.wanted {
            return Demand::Frame;
        }
        if i.connection
            .as_ref()
            .is_none_or(|w| !w.will_wake(cx.waker()))
        {
            i.connection = Some(cx.waker().clone());
        }
        Demand::Wait
    }

    /// Hands over a frame, the end (`None`), or an error that ends the body.
    pub(crate) fn send(&self, item: Option<Result<Frame<Bytes>, BoxError>>) {
        let waker = {
            let mut i = lock(&self.inner);
            match item {
                Some(Ok(frame)) => {
                    if let (Some(r), Some(d)) = (i.remaining.as_mut(), frame.data_ref()) {
                        *r = r.saturating_sub(d.len() as u64);
                    }
                    i.ready = Some(Ok(frame));
                }
                Some(Err(e)) => {
                    i.ready = Some(Err(e));
                    i.ended = true;
                }
                None => i.ended = true,
            }
            i.wanted = false;
            i.consumer.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

impl Drop for BodySender {
    fn drop(&mut self) {
        // A connection that goes away mid-body ends it with an error, never a silent end.
        let unfinished = {
            let i = lock(&self.inner);
            !i.ended
        };
        if unfinished {
            self.send(Some(Err(Box::new(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the client connection closed before the request body ended",
            )))));
        }
    }
}

impl Drop for RequestBody {
    fn drop(&mut self) {
        let waker = {
            let mut i = lock(&self.inner);
            i.dropped = true;
            i.connection.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let waker = {
            let mut i = lock(&self.inner);
            if let Some(item) = i.ready.take() {
                return Poll::Ready(Some(item));
            }
            if i.ended {
                return Poll::Ready(None);
            }
            i.consumer = Some(cx.waker().clone());
            if i.wanted {
                None
            } else {
                i.wanted = true;
                i.connection.take()
            }
        };
        if let Some(w) = waker {
            w.wake();
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        let i = lock(&self.inner);
        i.ended && i.ready.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        let i = lock(&self.inner);
        let pending = i
            .ready
            .as_ref()
            .and_then(|r| r.as_ref().ok())
            .and_then(Frame::data_ref)
            .map_or(0, |d| d.len() as u64);
        match i.remaining {
            // A request with Content-Length goes upstream with the same header.
            Some(n) => SizeHint::with_exact(n + pending),
            None => SizeHint::default(),
        }
    }
}

/// A client's request body, from whichever protocol carried it: what the handler takes.
pub(crate) enum ClientBody {
    /// No body (most requests on HTTP/1.1).
    Empty,
    /// Read by Sluice's own HTTP/1.1 connection, or by an HTTP/3 connection's task (the same
    /// demand-driven channel).
    Http1(RequestBody),
    /// An HTTP/2 stream's body, from hyper.
    Http2(hyper::body::Incoming),
    /// A body read whole before going upstream (`request_buffering`): sent as one frame.
    Buffered(Bytes),
    /// A body whose start was read before going upstream (`[route.waf]` with
    /// `body_over_limit = "inspect_partial"`): that start, then the rest as it arrives.
    Prefixed(Bytes, Box<ClientBody>),
}

impl ClientBody {
    /// An HTTP/2 stream's body: `Empty` when the stream ended with its head (a GET's
    /// `END_STREAM` on `HEADERS`). hyper's body answers `is_end_stream` under the
    /// connection's stream lock, and the request path asks it three times or more.
    pub(crate) fn http2(b: hyper::body::Incoming) -> Self {
        if b.is_end_stream() {
            ClientBody::Empty
        } else {
            ClientBody::Http2(b)
        }
    }
}

/// A request's trailer fields are dropped (its body ends where they start), as NGINX drops
/// them: they arrive after every decision was made on the head, so a client could put there a
/// second `Authorization` or its own `X-Auth-Subject` or `X-Forwarded-For`, which an origin
/// that merges trailers into the head would believe (RFC 9110 §6.5.1 lets a recipient
/// discard them). gRPC's requests carry none; its responses' trailers pass.
fn without_trailers(
    frame: Poll<Option<Result<Frame<Bytes>, BoxError>>>,
) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
    match frame {
        Poll::Ready(Some(Ok(f))) if f.is_trailers() => Poll::Ready(None),
        other => other,
    }
}

impl Body for ClientBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            ClientBody::Empty => Poll::Ready(None),
            ClientBody::Http1(b) => without_trailers(Pin::new(b).poll_frame(cx)),
            ClientBody::Http2(b) => {
                without_trailers(Pin::new(b).poll_frame(cx).map_err(Into::into))
            }
            ClientBody::Buffered(b) if b.is_empty() => Poll::Ready(None),
            ClientBody::Buffered(b) => Poll::Ready(Some(Ok(Frame::data(std::mem::take(b))))),
            ClientBody::Prefixed(start, _) if !start.is_empty() => {
                Poll::Ready(Some(Ok(Frame::data(std::mem::take(start)))))
            }
            ClientBody::Prefixed(_, rest) => Pin::new(&mut **rest).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ClientBody::Empty => true,
            ClientBody::Http1(b) => b.is_end_stream(),
            ClientBody::Http2(b) => b.is_end_stream(),
            ClientBody::Buffered(b) => b.is_empty(),
            ClientBody::Prefixed(start, rest) => start.is_empty() && rest.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ClientBody::Empty => SizeHint::with_exact(0),
            ClientBody::Http1(b) => b.size_hint(),
            ClientBody::Http2(b) => b.size_hint(),
            ClientBody::Buffered(b) => SizeHint::with_exact(b.len() as u64),
            ClientBody::Prefixed(start, rest) => size_after(start.len() as u64, rest.size_hint()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn frames_cross_one_at_a_time_on_demand() {
        let (tx, mut rx) = channel(Some(6));
        assert_eq!(rx.size_hint().exact(), Some(6));
        let waker = futures_util::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        assert_eq!(tx.demand(&mut cx), Demand::Wait, "nobody asked yet");
        assert!(Pin::new(&mut rx).poll_frame(&mut cx).is_pending());
        assert_eq!(tx.demand(&mut cx), Demand::Frame);
        tx.send(Some(Ok(Frame::data(Bytes::from_static(b"abc")))));
        assert_eq!(tx.demand(&mut cx), Demand::Wait, "a frame is waiting");
        assert_eq!(rx.size_hint().exact(), Some(6));
        let f = rx.frame().await.unwrap().unwrap();
        assert_eq!(f.into_data().unwrap(), "abc");
        assert_eq!(rx.size_hint().exact(), Some(3));
        tx.send(Some(Ok(Frame::data(Bytes::from_static(b"def")))));
        tx.send(None);
        assert_eq!(
            rx.frame().await.unwrap().unwrap().into_data().unwrap(),
            "def"
        );
        assert!(rx.is_end_stream());
        assert!(rx.frame().await.is_none());
    }

    #[tokio::test]
    async fn a_sender_dropped_mid_body_is_an_error_and_a_dropped_body_is_seen() {
        let (tx, mut rx) = channel(None);
        drop(tx);
        assert!(rx.frame().await.unwrap().is_err());
        let (tx, rx) = channel(None);
        drop(rx);
        let waker = futures_util::task::noop_waker();
        assert_eq!(tx.demand(&mut Context::from_waker(&waker)), Demand::Gone);
    }
}
