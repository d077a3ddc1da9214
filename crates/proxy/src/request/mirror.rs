//! Traffic mirroring (`[[route.mirror]]`): a copy of a share of a route's requests goes to
//! another upstream, its response is read and discarded, and the client never waits for it.
//!
//! - Sampling is a hash of the request ID (the same requests every time; a retry of a request
//!   with the same ID is mirrored again or not, alike), after the mirror's header match.
//! - A copy is a task of its own with its own deadline; the client's request, and the next
//!   request on its keep-alive connection, do not wait for it (NGINX's `mirror` does).
//! - A request body is copied as it streams to the primary (`Teed`): never buffered beyond
//!   `body_limit`, never slowing the primary. A larger body, or one that did not arrive whole,
//!   is not mirrored, and counted.
//! - Each mirror has its own limit of copies in flight; past it, copies are skipped and
//!   counted. Nothing is queued without bound and nothing is dropped silently.
//! - Both sides are counted per route and mirror: the mirror's status classes and latency,
//!   and the primary's for the same requests: the comparison a shadow test is for.

use crate::addresses::Addresses;
use crate::body::BoxError;
use crate::request::context::{ConnCtx, ListenerCtx};
use crate::request::forward::{Forwarding, add_forwarding, forwardable};
use crate::request::policy;
use bytes::{Bytes, BytesMut};
use http::{HeaderValue, Method, Request, Uri, Version};
use http_body::{Body, Frame, SizeHint};
use http_body_util::{BodyExt, Full};
use pin_project_lite::pin_project;
use sluice_config::{Mirror, Route, UpstreamProtocol};
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

use crate::metrics::mirror::{BUSY, INCOMPLETE, MIRROR, MirrorState, NO_SERVER, TOO_LARGE};

/// A copy's slot among its mirror's `max_in_flight`, given back when the copy ends.
struct Slot(Arc<MirrorState>);

impl Slot {
    fn take(state: &Arc<MirrorState>, max: u32) -> Option<Slot> {
        state
            .in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| Slot(state.clone()))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// FNV-1a of the request ID: the sampling hash.
fn sample_point(id: Option<&HeaderValue>) -> u32 {
    let Some(id) = id else {
        // No request ID (`request_id = false`): a random draw.
        return (crate::hash::random() % 1_000_000) as u32;
    };
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in id.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (h % 1_000_000) as u32
}

/// What the copies of one request need of it.
pub(crate) struct Copying<'a> {
    pub(crate) conn: &'a ConnCtx,
    pub(crate) listener: &'a ListenerCtx,
    pub(crate) route: &'a Route,
    pub(crate) parts: &'a http::request::Parts,
    pub(crate) host: &'a str,
    pub(crate) client: IpAddr,
    pub(crate) request_id: Option<&'a HeaderValue>,
    /// The request's span (`[tracing]`): each copy is a `mirror` span under it.
    pub(crate) trace: Option<&'a sluice_trace::RequestSpan>,
}

/// Starts the copies of a request whose route mirrors: returns the body for the primary (a
/// tee when a copy needs it) and the mirrors it was copied to (for the primary's counts).
pub(crate) fn start<B>(
    c: &Copying<'_>,
    body: B,
    has_body: bool,
) -> (Teed<B>, Vec<Arc<MirrorState>>) {
    let mut tee = Tee::default();
    let mut mirrored = Vec::new();
    let point = sample_point(c.request_id);
    let declared = c
        .parts
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    for m in &c.route.mirrors {
        if point >= m.per_million
            || !m
                .headers
                .iter()
                .all(|(k, v)| c.parts.headers.get_all(k).iter().any(|x| x == v))
        {
            continue;
        }
        let state = c.listener.metrics.mirror(&c.route.name, &m.upstream_name);
        if has_body && declared.is_some_and(|n| n > m.body_limit) {
            state.skip(TOO_LARGE);
            continue;
        }
        let Some(slot) = Slot::take(&state, m.max_in_flight) else {
            state.skip(BUSY);
            continue;
        };
        let source = if has_body {
            let (tx, rx) = oneshot::channel();
            tee.copies.push((tx, state.clone(), m.body_limit));
            BodySource::Pending(rx)
        } else {
            BodySource::Ready(Bytes::new())
        };
        let mut request = copy_request(c, m);
        let span = c.trace.and_then(|t| {
            let mut s = t.child("mirror", sluice_trace::SpanKind::Client, None)?;
            s.str("sluice.upstream", &m.upstream_name)
                .str("http.request.method", c.parts.method.as_str());
            Some(s)
        });
        if let Some(t) = c.trace {
            t.inject(span.as_ref(), &mut request.headers);
        }
        let group = c.listener.upstreams[m.upstream].group();
        let at = Addresses {
            client: c.conn.peer,
            local: c.conn.local,
        };
        let key = group.hash_key(c.parts, c.client);
        tokio::spawn(send(MirrorCopy {
            slot,
            group,
            head: request,
            body: source,
            timeout: m.timeout,
            at,
            key,
            span,
        }));
        mirrored.push(state);
    }
    let tee = (!tee.copies.is_empty()).then_some(tee);
    (Teed { inner: body, tee }, mirrored)
}

/// The head of a copy: the client's request as the primary's would be, Host kept (a
/// `-shadow` suffix breaks virtual hosts: envoy#9094), hop-by-hop headers out, forwarding
/// headers in, the mirror's own header edits.
fn copy_request(c: &Copying<'_>, m: &Mirror) -> http::request::Parts {
    let mut headers = forwardable(&c.parts.headers, crate::http1::ADDED_FIELDS);
    add_forwarding(
        &mut headers,
        &Forwarding {
            peer: c.conn.peer,
            peer_ip: &c.conn.peer_ip,
            client: c.client,
            https: c.listener.tls.is_some(),
            host: c.host,
            forwarded: c.listener.config.forwarded_header,
        },
    );
    if !m.request_headers.is_empty() {
        let vars = policy::Vars {
            host: policy::host_name(c.host),
            uri: &c.parts.uri,
            https: c.listener.tls.is_some(),
            client: c.client,
            request_id: c.request_id,
        };
        policy::edit_headers(&m.request_headers, &mut headers, &vars);
    }
    let mut req = Request::new(());
    *req.method_mut() = c.parts.method.clone();
    *req.uri_mut() = c
        .parts
        .uri
        .path_and_query()
        .map_or_else(|| Uri::from_static("/"), |pq| Uri::from(pq.clone()));
    *req.headers_mut() = headers;
    req.into_parts().0
}

enum BodySource {
    Ready(Bytes),
    /// The tee's copy; a closed channel means the body was too large or did not arrive
    /// whole (the tee counted which).
    Pending(oneshot::Receiver<Bytes>),
}

/// One copy on its way: its place among the mirror's copies in flight, where it goes, what
/// it carries, its deadline and its span.
struct MirrorCopy {
    slot: Slot,
    group: Arc<crate::upstreams::upstream::UpstreamGroup>,
    head: http::request::Parts,
    body: BodySource,
    timeout: Duration,
    at: Addresses,
    /// The balancing key (the primary's, so a hash balancer picks alike).
    key: u64,
    span: Option<sluice_trace::ChildSpan>,
}

/// One copy: wait for its body, send it, read the answer to its end, count.
async fn send(copy: MirrorCopy) {
    let MirrorCopy {
        slot,
        group,
        head,
        body,
        timeout,
        at,
        key,
        span,
    } = copy;
    let state = slot.0.clone();
    let deadline = tokio::time::Instant::now() + timeout;
    let body = match body {
        BodySource::Ready(b) => b,
        BodySource::Pending(rx) => match tokio::time::timeout_at(deadline, rx).await {
            Ok(Ok(b)) => b,
            Ok(Err(_)) => return super::trace::attempt_done(span, Err("body_not_copied")),
            Err(_) => {
                state.failed[0].fetch_add(1, Ordering::Relaxed);
                return super::trace::attempt_done(span, Err("timeout"));
            }
        },
    };
    let server = match group.acquire(key, &[], None).await {
        Ok(s) => s,
        Err(_) => {
            state.skip(NO_SERVER);
            return super::trace::attempt_done(span, Err("no_server"));
        }
    };
    let mut req = Request::from_parts(
        head,
        Full::new(body).map_err(|never| match never {}).boxed(),
    );
    *req.version_mut() = match group.config.protocol {
        UpstreamProtocol::Http1 => Version::HTTP_11,
        UpstreamProtocol::H2 => Version::HTTP_2,
    };
    if *req.method() == Method::GET && req.body().is_end_stream() {
        req.headers_mut().remove(http::header::CONTENT_LENGTH);
    }
    state.sent.fetch_add(1, Ordering::Relaxed);
    let started = Instant::now();
    let exchange = async {
        let resp = group
            .send(server.index, req, None, at)
            .await
            .map_err(drop)?;
        let status = resp.status();
        // Read to the end (and dropped): the connection goes back to the pool.
        resp.into_body().collect().await.map_err(drop)?;
        Ok::<_, ()>(status)
    };
    match tokio::time::timeout_at(deadline, exchange).await {
        Ok(Ok(status)) => {
            state.response(MIRROR, status, started.elapsed());
            super::trace::attempt_done(span, Ok(status.as_u16()));
        }
        Ok(Err(_)) => {
            state.failed[1].fetch_add(1, Ordering::Relaxed);
            super::trace::attempt_done(span, Err("upstream_error"));
        }
        Err(_) => {
            state.failed[0].fetch_add(1, Ordering::Relaxed);
            super::trace::attempt_done(span, Err("timeout"));
        }
    }
    drop(server);
    drop(slot);
}

/// The copies waiting for a request body.
#[derive(Default)]
struct Tee {
    copies: Vec<(oneshot::Sender<Bytes>, Arc<MirrorState>, u64)>,
    segments: Vec<Bytes>,
    size: u64,
}

impl Tee {
    fn data(&mut self, data: &Bytes) {
        self.size += data.len() as u64;
        let size = self.size;
        self.copies.retain(|(_, state, limit)| {
            let keep = size <= *limit;
            if !keep {
                state.skip(TOO_LARGE);
            }
            keep
        });
        if !self.copies.is_empty() {
            self.segments.push(data.clone());
        }
    }

    fn finish(&mut self) {
        let mut all = BytesMut::with_capacity(self.size as usize);
        for s in self.segments.drain(..) {
            all.extend_from_slice(&s);
        }
        let body = all.freeze();
        for (tx, _, _) in self.copies.drain(..) {
            let _ = tx.send(body.clone());
        }
    }
}

impl Drop for Tee {
    fn drop(&mut self) {
        // Still waiting: the body failed or the primary dropped it before its end.
        for (_, state, _) in self.copies.drain(..) {
            state.skip(INCOMPLETE);
        }
    }
}

pin_project! {
    /// A request body that gives mirrors a copy as it streams to the primary.
    pub(crate) struct Teed<B> {
        #[pin]
        inner: B,
        tee: Option<Tee>,
    }
}

impl<B> Teed<B> {
    /// `inner` without copies.
    pub(crate) fn plain(inner: B) -> Teed<B> {
        Teed { inner, tee: None }
    }
}

impl<B> Body for Teed<B>
where
    B: Body<Data = Bytes, Error = BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let mut this = self.project();
        let frame = ready!(this.inner.as_mut().poll_frame(cx));
        if let Some(tee) = this.tee.as_mut() {
            match &frame {
                Some(Ok(f)) => match f.data_ref() {
                    Some(d) => tee.data(d),
                    // Trailers: the body is whole (the copy goes without them).
                    None => tee.finish(),
                },
                Some(Err(_)) => {
                    this.tee.take();
                }
                None => tee.finish(),
            }
            if this.inner.is_end_stream()
                && let Some(tee) = this.tee.as_mut()
            {
                tee.finish();
            }
            if this.tee.as_ref().is_some_and(|t| t.copies.is_empty()) {
                this.tee.take();
            }
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
