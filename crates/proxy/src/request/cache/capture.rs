//! The body of a response being stored: it goes to the client as it arrives and its bytes
//! are kept (as the `Bytes` the upstream gave, uncopied) until it ends; then the entry is
//! stored and the collapsed misses waiting for it look again.
//!
//! A body that grows past the largest entry, carries trailers or fails is not stored: its
//! capture is dropped at once (the bytes already kept are freed) and the key is passed for
//! a while, so later misses go upstream side by side instead of in a queue.

use crate::body::{BoxError, ProxyBody};
use bytes::{Bytes, BytesMut};
use http::{HeaderMap, StatusCode};
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use sluice_cache::collapse::Leader;
use sluice_cache::{CacheCounters, Entry, Store, Timing, Variant};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll, ready};
use std::time::Duration;

/// What storing a response needs once its body has ended.
pub(crate) struct Capture {
    pub(crate) store: Store,
    pub(crate) counters: Arc<CacheCounters>,
    pub(crate) primary: String,
    pub(crate) request: HeaderMap,
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) timing: Timing,
    pub(crate) lifetime: Duration,
    /// The collapsed fetch this is, if it leads one: dropped after the entry is stored.
    pub(crate) leader: Option<Leader>,
    pub(crate) segments: Vec<Bytes>,
    pub(crate) size: u64,
}

impl Capture {
    /// Stores the entry (identity body only: variants are made on the first request for
    /// each encoding).
    fn finish(mut self) {
        // Copied once into a buffer of its own size: the upstream's pieces may be slices
        // of larger read buffers, which the store would otherwise keep whole while weighing
        // only the slices.
        let mut all = BytesMut::with_capacity(self.size as usize);
        for s in &self.segments {
            all.extend_from_slice(s);
        }
        self.segments.clear();
        let body = all.freeze();
        let entry = Entry {
            status: self.status,
            headers: std::mem::take(&mut self.headers),
            timing: self.timing,
            lifetime: self.lifetime,
            variants: vec![Variant::new("identity", body, false)],
        };
        if !self.store.insert(&self.primary, &self.request, entry) {
            self.abandon();
        }
        // After the entry is in: its waiters find it.
        drop(self.leader.take());
    }

    /// Gives up storing this response.
    fn abandon(&self) {
        self.counters
            .not_stored_body
            .fetch_add(1, Ordering::Relaxed);
        self.store.mark_pass(&self.primary);
    }
}

pin_project! {
    /// A response body that is stored when it ends.
    pub(crate) struct CaptureBody {
        #[pin]
        inner: ProxyBody,
        capture: Option<Capture>,
        limit: u64,
    }
}

impl CaptureBody {
    /// Wraps `inner`; a body that has ended already is stored at once.
    pub(crate) fn new(inner: ProxyBody, capture: Capture) -> CaptureBody {
        let limit = capture.store.max_entry();
        let mut body = CaptureBody {
            inner,
            capture: Some(capture),
            limit,
        };
        if body.inner.is_end_stream()
            && let Some(c) = body.capture.take()
        {
            c.finish();
        }
        body
    }
}

impl Body for CaptureBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let mut this = self.project();
        let frame = ready!(this.inner.as_mut().poll_frame(cx));
        match &frame {
            Some(Ok(f)) => match f.data_ref() {
                Some(data) => {
                    if let Some(c) = this.capture.as_mut() {
                        c.size += data.len() as u64;
                        if c.size > *this.limit {
                            if let Some(c) = this.capture.take() {
                                c.abandon();
                            }
                        } else {
                            c.segments.push(data.clone());
                        }
                    }
                }
                // Trailers: not stored (the entry would answer without them).
                None => {
                    if let Some(c) = this.capture.take() {
                        c.abandon();
                    }
                }
            },
            Some(Err(_)) => {
                if let Some(c) = this.capture.take() {
                    c.abandon();
                }
            }
            None => {
                if let Some(c) = this.capture.take() {
                    c.finish();
                }
            }
        }
        // A server that knows the body's length may stop polling after its last bytes.
        if this.inner.is_end_stream()
            && let Some(c) = this.capture.take()
        {
            c.finish();
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, StreamBody};
    use std::time::SystemTime;

    fn capture(store: &Store, counters: &Arc<CacheCounters>) -> Capture {
        let now = SystemTime::now();
        Capture {
            store: store.clone(),
            counters: counters.clone(),
            primary: Store::primary_key("a.test", "/x"),
            request: HeaderMap::new(),
            status: StatusCode::OK,
            headers: HeaderMap::new(),
            timing: Timing::new(now, now, &HeaderMap::new()),
            lifetime: Duration::from_secs(60),
            leader: None,
            segments: Vec::new(),
            size: 0,
        }
    }

    fn chunks(parts: Vec<Result<Frame<Bytes>, BoxError>>) -> ProxyBody {
        StreamBody::new(futures_util::stream::iter(parts)).boxed()
    }

    #[tokio::test]
    async fn a_body_read_to_its_end_is_stored_whole() {
        let store = Store::new(8 << 20);
        let counters = Arc::new(CacheCounters::default());
        let body = chunks(vec![
            Ok(Frame::data(Bytes::from_static(b"hello "))),
            Ok(Frame::data(Bytes::from_static(b"world"))),
        ]);
        let got = CaptureBody::new(body, capture(&store, &counters))
            .collect()
            .await
            .unwrap()
            .to_bytes();
        assert_eq!(&got[..], b"hello world");
        let e = store
            .lookup(&Store::primary_key("a.test", "/x"), &HeaderMap::new())
            .unwrap();
        assert_eq!(&e.identity()[..], b"hello world");
    }

    #[tokio::test]
    async fn a_failed_cut_short_or_oversized_body_is_not_stored() {
        let key = Store::primary_key("a.test", "/x");
        let counters = Arc::new(CacheCounters::default());
        // Fails midway.
        let store = Store::new(8 << 20);
        let body = chunks(vec![
            Ok(Frame::data(Bytes::from_static(b"part"))),
            Err("upstream reset".into()),
        ]);
        let _ = CaptureBody::new(body, capture(&store, &counters))
            .collect()
            .await;
        assert!(store.lookup(&key, &HeaderMap::new()).is_none());
        assert!(store.is_pass(&key));
        // Dropped before its end (the client left).
        let store = Store::new(8 << 20);
        let mut b = CaptureBody::new(
            chunks(vec![
                Ok(Frame::data(Bytes::from_static(b"a"))),
                Ok(Frame::data(Bytes::from_static(b"b"))),
            ]),
            capture(&store, &counters),
        );
        let _ = b.frame().await;
        drop(b);
        assert!(store.lookup(&key, &HeaderMap::new()).is_none());
        // Larger than an eighth of the store.
        let store = Store::new(1 << 20);
        let big = Bytes::from(vec![b'x'; 100 << 10]);
        let body = chunks((0..2).map(|_| Ok(Frame::data(big.clone()))).collect());
        let got = CaptureBody::new(body, capture(&store, &counters))
            .collect()
            .await
            .unwrap()
            .to_bytes();
        assert_eq!(got.len(), 200 << 10, "the client still gets all of it");
        assert!(store.lookup(&key, &HeaderMap::new()).is_none());
        assert_eq!(counters.not_stored_body.load(Ordering::Relaxed), 2);
    }

    #[tokio::test]
    async fn a_slice_of_a_larger_buffer_is_stored_at_its_own_size() {
        let store = Store::new(8 << 20);
        let counters = Arc::new(CacheCounters::default());
        let read_buffer = Bytes::from(vec![b'r'; 64 << 10]);
        let body = chunks(vec![Ok(Frame::data(read_buffer.slice(..100)))]);
        let _ = CaptureBody::new(body, capture(&store, &counters))
            .collect()
            .await
            .unwrap();
        let e = store
            .lookup(&Store::primary_key("a.test", "/x"), &HeaderMap::new())
            .unwrap();
        assert_eq!(e.identity().len(), 100);
        let (stored, buffer) = (
            e.identity().as_ptr() as usize,
            read_buffer.as_ptr() as usize,
        );
        assert!(
            stored < buffer || stored >= buffer + (64 << 10),
            "the entry does not point into the 64 KiB read buffer"
        );
    }

    #[tokio::test]
    async fn a_body_of_known_length_is_stored_without_a_last_poll() {
        let store = Store::new(8 << 20);
        let counters = Arc::new(CacheCounters::default());
        let body = http_body_util::Full::new(Bytes::from_static(b"whole"))
            .map_err(|never| match never {})
            .boxed();
        let mut b = CaptureBody::new(body, capture(&store, &counters));
        let first = b.frame().await.unwrap().unwrap();
        assert_eq!(first.into_data().unwrap(), "whole");
        assert!(
            store
                .lookup(&Store::primary_key("a.test", "/x"), &HeaderMap::new())
                .is_some()
        );
    }
}
