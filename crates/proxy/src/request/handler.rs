//! The proxy handler: one client request in, one response out, through the request path's
//! phases in their order (`phases` for those before the upstream, `cache`, then `proxy`).

use crate::body::ProxyBody;
use crate::exchange::ClientBody;
use crate::request::cache;
use crate::request::compression::RequestFacts;
use crate::request::context::ConnCtx;
use crate::request::filters::RoutePlan;
use crate::request::phases::{Flow, RequestCtx};
use crate::request::policy;
use crate::request::proxy;
use http::header;
use http::{Request, Response, Version};
use http_body_util::BodyExt;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

/// Each HTTP/1.1 connection's requests come here (`http1::serve`).
impl crate::exchange::Service for ConnCtx {
    fn call(self: Arc<Self>, req: Request<ClientBody>) -> crate::exchange::Responding {
        // The box is made first and the future built into it. It was built on the stack and
        // copied whole (~2.9 KB) into its box: 47 of an HTTP/2 request's ~570 L1 data misses
        // (`bench/instructions.py --cache`).
        boxed_in_place(|| handle(self, req))
    }

    fn max_head(&self) -> usize {
        self.listener.config.max_header_bytes
    }

    fn max_fields(&self) -> usize {
        self.listener.config.max_header_fields
    }

    fn refused(&self, status: http::StatusCode, line: &[u8]) {
        let listener = self.slot.load();
        let entry = crate::access_log::Entry {
            time: Some(std::time::SystemTime::now()),
            client: Some(self.peer),
            listener: listener.name.clone(),
            method: "-".into(),
            path: escaped_line(line),
            protocol: "HTTP/1.1",
            status: status.as_u16(),
            tls_version: self.tls.as_ref().map_or("", |t| t.version),
            tls_cipher: self.tls.as_ref().map_or("", |t| t.cipher).into(),
            tls_resumed: self.tls.as_ref().map(|t| t.resumed),
            ..Default::default()
        };
        listener
            .metrics
            .response(entry.status, 0, 0, std::time::Duration::ZERO);
        listener.access_log.log(&entry);
    }
}

/// A refused request's line for the log: printable ASCII kept, any other byte (space,
/// quote, backslash, controls, non-ASCII) as `\xHH`, as NGINX escapes its `$request`, so
/// that what a client sent cannot break a log line or forge a field.
fn escaped_line(line: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(line.len() + 8);
    for &b in line {
        if b.is_ascii_graphic() && b != b'"' && b != b'\\' {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "\\x{b:02X}");
        }
    }
    if out.is_empty() {
        out.push('-');
    }
    out
}

/// `make()`'s value in a box made before it: built there rather than on the stack and moved.
fn boxed_in_place<F: Future>(make: impl FnOnce() -> F) -> Pin<Box<F>> {
    Box::into_pin(Box::write(Box::new_uninit(), make()))
}

/// The entry point of every request, whichever protocol brought it: its context, then the
/// phases in their order (docs/ARCHITECTURE.md, "The request path"). Not an `async fn`: the
/// future is a block that captures `conn` and `req` once (an async fn's `mut` argument is
/// kept twice). Always inlined, so that the future is built where its caller puts it
/// (`boxed_in_place`) rather than built on the stack and copied there.
#[expect(
    clippy::manual_async_fn,
    reason = "an async fn would keep `req` twice in a future copied at every level"
)]
#[inline(always)]
pub(crate) fn handle(
    conn: Arc<ConnCtx>,
    mut req: Request<ClientBody>,
) -> impl Future<Output = Result<Response<ProxyBody>, Infallible>> {
    async move {
        // A listener that also serves HTTP/3 says so on its TCP responses (RFC 9114 §3.1.1),
        // for the port the client reached (the UDP socket has the same). Added here rather
        // than by a `map` around this future: the map's closure, made beside the future,
        // had the whole future built on the stack and copied into its box.
        let alt_svc = (req.version() != Version::HTTP_3)
            .then(|| conn.listener.alt_svc.for_port(conn.local.port()))
            .flatten();
        conn.state.request_started();
        let start = Instant::now();
        // Loaded once: a reload never changes a request's configuration mid-way.
        let listener = &conn.slot.load_full();
        let mut ctx = RequestCtx::new(&conn, listener, &mut req, start);
        let resp = match phases(&mut ctx, &mut req).await {
            Err(stop) => ctx.stop(stop),
            Ok((plan, upstream)) => {
                let route = &*plan.route;
                if let Some(mqtt) = &route.mqtt {
                    // `[route.mqtt]`: the route answers the WebSocket upgrade itself and
                    // hands the device to the MQTT relay (`mqtt_ws`).
                    let stop = crate::request::mqtt_ws::answer(&ctx, listener, mqtt, &mut req);
                    return Ok(with_alt_svc(ctx.stop(stop), alt_svc));
                }
                // Phase `cache lookup` (routes with `[route.cache]`), then the upstream
                // phases of `proxy::run`. Inline rather than an async fn of their own:
                // an async fn keeps its arguments (the context, the request) for its
                // whole life beside the future it hands them to.
                let group = listener.upstreams[upstream].group();
                let facts = RequestFacts::new(&route.compression, req.method(), req.headers());
                let mut fetch = None;
                if let Some(settings) = &route.cache {
                    let request_id = ctx.done.request_id.clone();
                    let serving = cache::Serving {
                        cache: &listener.cache,
                        settings,
                        host_key: &ctx.host,
                        compressor: &listener.compressor,
                        facts: &facts,
                        method: req.method(),
                        request: req.headers(),
                        route,
                        vars: policy::Vars {
                            host: policy::host_name(&ctx.host),
                            uri: req.uri(),
                            https: listener.tls.is_some(),
                            client: ctx.client,
                            request_id: request_id.as_ref(),
                        },
                    };
                    // Boxed: only cached routes pay for the lookup's future in the request's.
                    match Box::pin(cache::lookup(serving, &req, ctx.done)).await {
                        cache::Lookup::Answered(resp, refresh) => {
                            if let Some(refresh) = refresh {
                                spawn_refresh(&conn, &req, refresh);
                            }
                            return Ok(with_alt_svc(resp, alt_svc));
                        }
                        cache::Lookup::Fetch(f, d) => {
                            fetch = Some(f);
                            ctx.done = d;
                        }
                    }
                }
                let to = proxy::Upstream {
                    group,
                    facts,
                    fetch,
                };
                proxy::run(ctx, plan, to, req).await
            }
        };
        Ok(with_alt_svc(resp, alt_svc))
    }
}

/// `resp` with the listener's `Alt-Svc` where it has none of its own.
fn with_alt_svc(
    mut resp: Response<ProxyBody>,
    alt_svc: Option<http::HeaderValue>,
) -> Response<ProxyBody> {
    if let Some(v) = alt_svc {
        resp.headers_mut().entry(header::ALT_SVC).or_insert(v);
    }
    resp
}

/// The phases before the upstream ones: `early`, `route`, `access`, `answer` and the choice
/// of upstream group. What they end in: the route and its group, or the request's end.
#[inline(always)]
async fn phases<'a>(
    ctx: &mut RequestCtx<'a>,
    req: &mut Request<ClientBody>,
) -> Flow<(&'a RoutePlan, usize)> {
    ctx.normalize_path(req)?;
    ctx.early(req)?;
    let plan = ctx.route(req)?;
    ctx.access(plan, req).await?;
    ctx.answer(&plan.route, req)?;
    let upstream = ctx.upstream(&plan.route, req)?;
    if plan.route.request_buffering {
        // Boxed: only buffering routes pay for reading the body in the request's future.
        Box::pin(ctx.buffer_body(&plan.route, req)).await?;
    }
    Ok((plan, upstream))
}

/// Revalidates a stale entry in the background (`stale-while-revalidate`): the request again,
/// as a GET through the whole path (routing, limits, the access log), marked so that the
/// cache goes upstream with the entry's validators instead of answering it.
fn spawn_refresh(conn: &Arc<ConnCtx>, req: &Request<ClientBody>, refresh: cache::Refresh) {
    let mut again = Request::new(ClientBody::Empty);
    *again.method_mut() = http::Method::GET;
    *again.uri_mut() = req.uri().clone();
    *again.version_mut() = req.version();
    *again.headers_mut() = req.headers().clone();
    again.extensions_mut().insert(refresh);
    let conn = conn.clone();
    tokio::spawn(async move {
        let Ok(resp) = crate::exchange::Service::call(conn, again).await;
        // Read to its end: the entry is stored as the body ends.
        let _ = resp.into_body().collect().await;
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The size of the future an async fn of two arguments returns, without calling it.
    fn future_size<A, B, F: std::future::Future>(_: fn(A, B) -> F) -> usize {
        std::mem::size_of::<F>()
    }

    /// Every request's future is moved whole into its box (and for HTTP/2 into hyper's
    /// stream task), and async fns keep their arguments for their whole life: a rarely taken
    /// branch awaited inline (the cache's lookup and answers, a failure's stale answer) or a
    /// large value passed by value through the phases made it 9.9 KB, copied several times
    /// per request. Those branches are boxed and `Done`'s log entry is, and the phases'
    /// futures are blocks that capture their values once (5.3 KB before that, 2.8 KB
    /// after); this keeps it so.
    #[test]
    fn the_request_future_stays_small() {
        let size = future_size(handle);
        eprintln!("handler::handle's future: {size} bytes");
        assert!(
            size <= 3584,
            "handler::handle's future grew to {size} bytes"
        );
    }

    #[test]
    fn a_refused_line_is_logged_with_its_unsafe_bytes_escaped() {
        assert_eq!(
            escaped_line(b"GET /a?b=<c>\"d\\ HTTP/1.1\x00\xff"),
            "GET\\x20/a?b=<c>\\x22d\\x5C\\x20HTTP/1.1\\x00\\xFF"
        );
        assert_eq!(escaped_line(b""), "-");
    }
}
