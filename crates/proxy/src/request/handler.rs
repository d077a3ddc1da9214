//! The proxy handler: one client request in, one response out.

use crate::access_log::Entry;
use crate::body::{ProxyBody, TrackedBody};
use crate::http1::ClientBody;
use crate::request::cache;
use crate::request::compression::RequestFacts;
use crate::request::context::ConnCtx;
use crate::request::done::{Done, failure};
use crate::request::error::Failure;
use crate::request::forward::head_size;
use crate::request::policy;
use bytes::Bytes;
use http::header;
use http::{Request, Response, StatusCode, Version};
use http_body_util::{BodyExt, Full};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

/// Each HTTP/1.1 connection's requests come here (`http1::serve`).
impl crate::http1::Service for ConnCtx {
    fn call(self: Arc<Self>, req: Request<ClientBody>) -> crate::http1::Responding {
        // The box is made first and the future built into it. It was built on the stack and
        // copied whole (~2.9 KB) into its box: 47 of an HTTP/2 request's ~570 L1 data misses
        // (`bench/instructions.py --cache`).
        boxed_in_place(|| handle(self, req))
    }

    fn max_head(&self) -> usize {
        self.listener.config.max_header_bytes
    }
}

/// `make()`'s value in a box made before it: built there rather than on the stack and moved.
fn boxed_in_place<F: Future>(make: impl FnOnce() -> F) -> Pin<Box<F>> {
    Box::into_pin(Box::write(Box::new_uninit(), make()))
}

fn protocol(v: Version) -> &'static str {
    match v {
        Version::HTTP_2 => "HTTP/2.0",
        Version::HTTP_3 => "HTTP/3.0",
        Version::HTTP_10 => "HTTP/1.0",
        Version::HTTP_09 => "HTTP/0.9",
        _ => "HTTP/1.1",
    }
}

/// The entry point of every request, whichever protocol brought it: the request's phases
/// before it goes upstream. Not an `async fn`: the future is a block that captures `conn`
/// and `req` once (an async fn's `mut` argument is kept twice). Always inlined, so that the
/// future is built where its caller puts it (`boxed_in_place`) rather than built on the
/// stack and copied there.
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
        let mut resp = 'phases: {
            conn.state.request_started();
            let start = Instant::now();
            let listener = &conn.slot.load_full();
            let cfg = &listener.config;
            let client = policy::real_client(conn.peer.ip(), req.headers(), &cfg.trusted_proxies);
            let request_id = cfg.request_id.then(|| {
                policy::never_indexed(policy::request_id(
                    conn.peer.ip(),
                    req.headers(),
                    &cfg.trusted_proxies,
                ))
            });
            if let Some(id) = &request_id {
                req.headers_mut().insert(policy::X_REQUEST_ID, id.clone());
            }
            let host = req
                .uri()
                .authority()
                .map(|a| a.as_str().to_owned())
                .or_else(|| {
                    req.headers()
                        .get(header::HOST)
                        .and_then(|h| h.to_str().ok())
                        .map(str::to_owned)
                })
                .unwrap_or_default();
            let tls = conn.tls.as_ref();
            let mut done = Done {
                entry: Box::new(Entry {
                    time: Some(crate::clock::wall_at(start)),
                    // The client behind trusted proxies has no port we know.
                    client: Some(if client == conn.peer.ip() {
                        conn.peer
                    } else {
                        SocketAddr::new(client, 0)
                    }),
                    request_id: request_id
                        .as_ref()
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("")
                        .to_owned(),
                    listener: listener.name.clone(),
                    host: host.clone(),
                    method: method_name(req.method()),
                    path: req
                        .uri()
                        .path_and_query()
                        .map_or("/", |p| p.as_str())
                        .to_owned(),
                    protocol: protocol(req.version()),
                    tls_version: tls.map_or("", |t| t.version),
                    tls_cipher: tls.map_or("", |t| t.cipher).into(),
                    tls_resumed: tls.map(|t| t.resumed),
                    ..Entry::default()
                }),
                start,
                bytes_in: None,
                log: listener.access_log.clone(),
                state: conn.state.clone(),
                metrics: listener.metrics.clone(),
                request_id,
                grpc: crate::request::grpc::is_grpc(req.headers()),
                _server: None,
                trace: None,
            };
            if let Some(tracer) = &listener.tracer {
                let span =
                    crate::request::trace::server_span(tracer, &conn, &req, &host, client, &done);
                done.entry.trace = Some(span.ids());
                done.trace = Some(Box::new(span));
            }

            if head_size(req.method(), req.uri(), req.headers()) > listener.config.max_header_bytes
            {
                break 'phases failure(done, Failure::HeadersTooLarge);
            }
            if req.version() == Version::HTTP_11 && host.is_empty() {
                // RFC 9112 §3.2: a server MUST respond 400 to an HTTP/1.1 request without Host.
                break 'phases failure(done, Failure::BadRequest);
            }
            // An ACME CA's HTTP-01 validation: answered before routes and ACLs (a CA's validation
            // servers are anywhere), only for a token the ACME manager has published.
            if req
                .uri()
                .path()
                .starts_with(sluice_tls::live::HTTP01_PREFIX)
                && matches!(*req.method(), http::Method::GET | http::Method::HEAD)
                && let Some(answer) = sluice_tls::live().http_answer(req.uri().path())
            {
                let mut headers = http::HeaderMap::new();
                headers.insert(
                    header::CONTENT_TYPE,
                    http::HeaderValue::from_static("application/octet-stream"),
                );
                break 'phases respond(done, StatusCode::OK, headers, Bytes::from(answer));
            }
            if !cfg.acl.permits(client) {
                listener.metrics.denied();
                break 'phases failure(done, Failure::Forbidden);
            }
            let Some(route) =
                listener
                    .router
                    .find(&host, req.uri().path(), req.method(), req.headers())
            else {
                break 'phases failure(done, Failure::NoRoute);
            };
            done.entry.route = Some(route.name.clone());
            if let Some(span) = &mut done.trace {
                crate::request::trace::routed(span, req.method(), &route.name);
            }
            if !route.acl.permits(client) {
                listener.metrics.denied();
                break 'phases failure(done, Failure::Forbidden);
            }
            if route.rate_limit.is_some()
                && let Some(limiter) = listener.limiters.get(&route.name)
            {
                let key = limiter.key(req.uri(), req.headers(), client);
                // Boxed: only rate-limited routes pay for the (Redis-capable) check's future.
                match Box::pin(limiter.check(key)).await {
                    crate::request::rate_limit::Verdict::Pass => {}
                    crate::request::rate_limit::Verdict::Delay(wait) => {
                        tokio::time::sleep(wait).await
                    }
                    crate::request::rate_limit::Verdict::Reject(retry) => {
                        let mut resp = failure(done, Failure::TooManyRequests);
                        limiter.reject_headers(retry, resp.headers_mut());
                        break 'phases resp;
                    }
                }
            }
            if let Some(a) = &route.answer {
                let vars = policy::Vars {
                    host: policy::host_name(&host),
                    uri: req.uri(),
                    https: listener.tls.is_some(),
                    client,
                    request_id: done.request_id.as_ref(),
                };
                let (status, mut headers, body) = policy::answer(a, &vars);
                policy::edit_headers(&route.response_headers, &mut headers, &vars);
                break 'phases respond(done, status, headers, body);
            }
            let declared = req
                .headers()
                .get(header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<u64>().ok());
            if declared.is_some_and(|n| n > listener.config.max_body_bytes) {
                break 'phases failure(done, Failure::BodyTooLarge);
            }
            let Some(upstream) =
                crate::request::split::upstream_for(route, req.uri(), req.headers(), client)
            else {
                break 'phases failure(done, Failure::NoRoute);
            };
            let group = listener.upstreams[upstream].group();
            let facts = RequestFacts::new(&route.compression, req.method(), req.headers());
            let mut fetch = None;
            if let Some(settings) = &route.cache {
                let request_id = done.request_id.clone();
                let serving = cache::Serving {
                    cache: &listener.cache,
                    settings,
                    host_key: &host,
                    compressor: &listener.compressor,
                    facts: &facts,
                    method: req.method(),
                    request: req.headers(),
                    route,
                    vars: policy::Vars {
                        host: policy::host_name(&host),
                        uri: req.uri(),
                        https: listener.tls.is_some(),
                        client,
                        request_id: request_id.as_ref(),
                    },
                };
                // Boxed: only cached routes pay for the lookup's future in the request's.
                match Box::pin(cache::lookup(serving, &req, done)).await {
                    cache::Lookup::Answered(resp, refresh) => {
                        if let Some(refresh) = refresh {
                            spawn_refresh(&conn, &req, refresh);
                        }
                        break 'phases resp;
                    }
                    cache::Lookup::Fetch(f, d) => {
                        fetch = Some(f);
                        done = d;
                    }
                }
            }
            super::proxy::run(
                &conn, listener, group, route, client, req, host, done, facts, fetch,
            )
            .await
        };
        if let Some(v) = alt_svc {
            resp.headers_mut().entry(header::ALT_SVC).or_insert(v);
        }
        Ok(resp)
    }
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
        let Ok(resp) = crate::http1::Service::call(conn, again).await;
        // Read to its end: the entry is stored as the body ends.
        let _ = resp.into_body().collect().await;
    });
}

/// A response the gateway makes itself (a route's redirect or fixed response).
fn respond(
    mut done: Done,
    status: StatusCode,
    headers: http::HeaderMap,
    body: Bytes,
) -> Response<ProxyBody> {
    done.entry.status = status.as_u16();
    let id = done.request_id.clone();
    let mut resp = Response::new(TrackedBody::new(Full::new(body), done).boxed());
    *resp.status_mut() = status;
    *resp.headers_mut() = headers;
    if let Some(id) = id {
        resp.headers_mut().insert(policy::X_REQUEST_ID, id);
    }
    resp
}

/// A method's name for the log: borrowed for the standard ones.
fn method_name(m: &http::Method) -> std::borrow::Cow<'static, str> {
    use http::Method;
    let name = match *m {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::OPTIONS => "OPTIONS",
        Method::PATCH => "PATCH",
        Method::TRACE => "TRACE",
        Method::CONNECT => "CONNECT",
        _ => return m.as_str().to_owned().into(),
    };
    name.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The size of the future an async fn of two arguments returns, without calling it.
    fn future_size<A, B, F: std::future::Future>(_: fn(A, B) -> F) -> usize {
        std::mem::size_of::<F>()
    }

    #[test]
    fn method_names_are_the_methods() {
        for m in [
            "GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH", "TRACE", "CONNECT", "PURGE",
        ] {
            let method = http::Method::from_bytes(m.as_bytes()).unwrap();
            let name = method_name(&method);
            assert_eq!(name, m);
            assert_eq!(
                matches!(name, std::borrow::Cow::Borrowed(_)),
                m != "PURGE",
                "{m}"
            );
        }
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
}
