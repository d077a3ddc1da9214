//! The proxy handler: one client request in, one response out.

use crate::body::{
    BadRequestBody, BodyTooLarge, GunzipBody, LimitedBody, OnDone, ProxyBody, TrackedBody,
};
use crate::http1::ClientBody;
use crate::request::access_log::{AccessLog, Entry};
use crate::request::compression::{self, RequestFacts, strengthen_if_none_match};
use crate::request::conn_state::ConnState;
use crate::request::context::{ConnCtx, ListenerCtx};
use crate::request::error::{Failure, is_caused_by};
use crate::request::forward::{add_forwarding, head_size, strip_hop_by_hop, upgrade_protocol};
use crate::request::policy;
use crate::upstreams::upstream::{ActiveGuard, UpstreamGroup};
use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Method, Request, Response, StatusCode, Uri, Version};
use http_body::Body as _;
use http_body_util::{BodyExt, Empty, Full};
use sluice_config::{PassHost, Route, UpstreamProtocol};
use std::convert::Infallible;
use std::net::IpAddr;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Instant, SystemTime};

/// Each HTTP/1.1 connection's requests come here (`http1::serve`).
impl crate::http1::Service for ConnCtx {
    fn call(self: Arc<Self>, req: Request<ClientBody>) -> crate::http1::Responding {
        Box::pin(handle(self, req))
    }

    fn max_head(&self) -> usize {
        self.listener.config.max_header_bytes
    }
}

/// Finishes a request's bookkeeping when its response body is done or dropped.
struct Done {
    entry: Entry,
    start: Instant,
    bytes_in: Arc<AtomicU64>,
    log: AccessLog,
    state: Arc<ConnState>,
    metrics: Arc<crate::ProxyMetrics>,
    /// Returned in `X-Request-Id` on every response, errors included.
    request_id: Option<HeaderValue>,
    /// A gRPC call: the gateway's own failures answer as gRPC errors.
    grpc: bool,
    _server: Option<ActiveGuard>,
}

impl OnDone for Done {
    fn done(&mut self, bytes_out: u64, complete: bool) {
        self.entry.bytes_out = bytes_out;
        self.entry.bytes_in = self.bytes_in.load(Ordering::Relaxed);
        self.entry.duration = self.start.elapsed();
        self.entry.aborted = !complete;
        self.log.log(&self.entry);
        self.metrics.response(
            self.entry.status,
            self.entry.bytes_in,
            bytes_out,
            self.entry.duration,
        );
        self.state.request_finished();
    }
}

fn protocol(v: Version) -> &'static str {
    match v {
        Version::HTTP_2 => "HTTP/2.0",
        Version::HTTP_10 => "HTTP/1.0",
        Version::HTTP_09 => "HTTP/0.9",
        _ => "HTTP/1.1",
    }
}

fn is_idempotent(m: &Method) -> bool {
    matches!(
        *m,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE
    )
}

/// hyper service entry point.
pub(crate) async fn handle(
    conn: Arc<ConnCtx>,
    mut req: Request<ClientBody>,
) -> Result<Response<ProxyBody>, Infallible> {
    conn.state.request_started();
    let start = Instant::now();
    let listener = &conn.slot.load_full();
    let cfg = &listener.config;
    let client = policy::real_client(conn.peer.ip(), req.headers(), &cfg.trusted_proxies);
    let request_id = cfg
        .request_id
        .then(|| policy::request_id(conn.peer.ip(), req.headers(), &cfg.trusted_proxies));
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
        entry: Entry {
            time: Some(SystemTime::now()),
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
            method: req.method().to_string(),
            path: req
                .uri()
                .path_and_query()
                .map_or("/", |p| p.as_str())
                .to_owned(),
            protocol: protocol(req.version()),
            tls_version: tls.map_or("", |t| t.version),
            tls_cipher: tls.map(|t| t.cipher.clone()).unwrap_or_default(),
            tls_resumed: tls.map(|t| t.resumed),
            ..Entry::default()
        },
        start,
        bytes_in: Arc::new(AtomicU64::new(0)),
        log: listener.access_log.clone(),
        state: conn.state.clone(),
        metrics: listener.metrics.clone(),
        request_id,
        grpc: crate::request::grpc::is_grpc(req.headers()),
        _server: None,
    };

    if head_size(req.method(), req.uri(), req.headers()) > listener.config.max_header_bytes {
        return Ok(failure(done, Failure::HeadersTooLarge));
    }
    if req.version() == Version::HTTP_11 && host.is_empty() {
        // RFC 9112 §3.2: a server MUST respond 400 to an HTTP/1.1 request without Host.
        return Ok(failure(done, Failure::BadRequest));
    }
    if !cfg.acl.permits(client) {
        listener.metrics.denied();
        return Ok(failure(done, Failure::Forbidden));
    }
    let Some(route) = listener
        .router
        .find(&host, req.uri().path(), req.method(), req.headers())
    else {
        return Ok(failure(done, Failure::NoRoute));
    };
    done.entry.route = Some(route.name.clone());
    if !route.acl.permits(client) {
        listener.metrics.denied();
        return Ok(failure(done, Failure::Forbidden));
    }
    if route.rate_limit.is_some()
        && let Some(limiter) = listener.limiters.get(&route.name)
    {
        let key = limiter.key(req.uri(), req.headers(), client);
        // Boxed: only rate-limited routes pay for the (Redis-capable) check's future.
        match Box::pin(limiter.check(key)).await {
            crate::request::rate_limit::Verdict::Pass => {}
            crate::request::rate_limit::Verdict::Delay(wait) => tokio::time::sleep(wait).await,
            crate::request::rate_limit::Verdict::Reject(retry) => {
                let mut resp = failure(done, Failure::TooManyRequests);
                limiter.reject_headers(retry, resp.headers_mut());
                return Ok(resp);
            }
        }
    }
    if let Some(a) = &route.answer {
        let vars = policy::Vars {
            host: host_name(&host),
            uri: req.uri(),
            https: listener.tls.is_some(),
            client,
            request_id: done.request_id.as_ref(),
        };
        let (status, mut headers, body) = policy::answer(a, &vars);
        policy::edit_headers(&route.response_headers, &mut headers, &vars);
        return Ok(respond(done, status, headers, body));
    }
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > listener.config.max_body_bytes) {
        return Ok(failure(done, Failure::BodyTooLarge));
    }
    let Some(upstream) =
        crate::request::split::upstream_for(route, req.uri(), req.headers(), client)
    else {
        return Ok(failure(done, Failure::NoRoute));
    };
    let group = listener.upstreams[upstream].clone();
    let facts = RequestFacts::new(&route.compression, req.method(), req.headers());
    Ok(proxy(
        &conn, listener, group, route, client, req, host, done, facts,
    )
    .await)
}

/// The host without a port, for `$host`.
fn host_name(host: &str) -> &str {
    match host.rsplit_once(':') {
        Some((h, port))
            if port.bytes().all(|b| b.is_ascii_digit())
                && !h.ends_with(']')
                && !h.contains(':') =>
        {
            h
        }
        Some((h, port)) if h.ends_with(']') && port.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => host,
    }
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

#[allow(clippy::too_many_arguments)]
async fn proxy(
    conn: &ConnCtx,
    listener: &ListenerCtx,
    group: Arc<UpstreamGroup>,
    route: &Route,
    client: IpAddr,
    mut req: Request<ClientBody>,
    host: String,
    mut done: Done,
    facts: RequestFacts,
) -> Response<ProxyBody> {
    let upgrade = if req.version() == Version::HTTP_11 {
        upgrade_protocol(req.headers())
    } else {
        None
    };
    let client_upgrade = upgrade
        .as_ref()
        .and_then(|_| req.extensions_mut().remove::<crate::http1::OnUpgrade>());
    let (parts, body) = req.into_parts();
    let has_body = !body.is_end_stream();
    let policy = &route.retry;
    // A request without a body can be sent again; one whose body is streaming cannot (it is
    // not buffered), whatever the policy says.
    let retryable = (policy.non_idempotent || is_idempotent(&parts.method)) && !has_body;
    let mut body = Some(LimitedBody::new(
        body,
        listener.config.max_body_bytes,
        done.bytes_in.clone(),
    ));
    // `decompress_requests`: a gzip upload goes upstream decompressed, within a limit.
    let gunzip = facts.settings.decompress_requests
        && has_body
        && parts
            .headers
            .get(header::CONTENT_ENCODING)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| {
                let v = v.trim();
                v.eq_ignore_ascii_case("gzip") || v.eq_ignore_ascii_case("x-gzip")
            });
    let wants_trailers = parts.headers.get_all(header::TE).iter().any(|v| {
        v.to_str().is_ok_and(|s| {
            s.split(',')
                .any(|t| t.trim().eq_ignore_ascii_case("trailers"))
        })
    });

    group.budget.request(group.now_s());
    let per_try = policy
        .per_try_timeout
        .unwrap_or(group.config.response_timeout);
    // The route's overall timeout, and a gRPC call's own deadline, whichever ends first.
    let now = Instant::now();
    let deadline = [
        policy.timeout,
        done.grpc
            .then(|| crate::request::grpc::timeout(&parts.headers))
            .flatten(),
    ]
    .into_iter()
    .flatten()
    .min()
    .map(|t| now + t);
    let key = group.hash_key(&parts, client);
    // The path sent upstream (the route's rewrite), and what variables stand for.
    let rewritten = route
        .rewrite
        .as_ref()
        .and_then(|rw| policy::rewrite(rw, &parts.uri));
    let request_id = done.request_id.clone();
    let vars = policy::Vars {
        host: host_name(&host),
        uri: &parts.uri,
        https: listener.tls.is_some(),
        client,
        request_id: request_id.as_ref(),
    };
    let sticky = group.sticky.as_ref().and_then(|s| s.server(&parts.headers));
    let mut tried = Vec::with_capacity(2);
    loop {
        let server = match group.acquire(key, &tried, sticky).await {
            Ok(s) => s,
            Err(crate::upstreams::upstream::Busy::NoServer) => {
                return failure(done, Failure::UpstreamConnect);
            }
            Err(busy) => {
                tracing::warn!(upstream = %group.config.name, ?busy, "every upstream server is at max_conns");
                return failure(done, Failure::ServiceUnavailable);
            }
        };
        tried.push(server.index);
        let addr = server.server().addr;
        done.entry.upstream = Some(addr);

        let mut headers = parts.headers.clone();
        strip_hop_by_hop(&mut headers);
        if let Some(proto) = &upgrade {
            headers.insert(header::UPGRADE, proto.clone());
            headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        }
        if wants_trailers {
            headers.insert(header::TE, HeaderValue::from_static("trailers"));
        }
        strengthen_if_none_match(&facts.settings, &mut headers);
        if gunzip {
            headers.remove(header::CONTENT_ENCODING);
            headers.remove(header::CONTENT_LENGTH);
        }
        let host_value = match &group.config.pass_host {
            PassHost::Pass => host.clone(),
            PassHost::Node => crate::text::addr_string(&addr),
            PassHost::Rewrite(h) => h.clone(),
        };
        if let Ok(v) = HeaderValue::from_str(&host_value) {
            headers.insert(header::HOST, v);
        }
        add_forwarding(
            &mut headers,
            conn.peer,
            client,
            listener.tls.is_some(),
            &host,
            listener.config.forwarded_header,
        );
        if !route.request_headers.is_empty() {
            policy::edit_headers(&route.request_headers, &mut headers, &vars);
        }

        // Origin-form: the request line carries the path and query only.
        let uri = match rewritten.as_ref().or(parts.uri.path_and_query()) {
            Some(pq) => Uri::from(pq.clone()),
            None => Uri::from_static("/"),
        };
        let upstream_body: ProxyBody = match body.take() {
            Some(b) if !retryable && gunzip => {
                GunzipBody::new(b, facts.settings.max_decompressed_bytes).boxed()
            }
            Some(b) if !retryable => b.boxed(),
            _ => Empty::new().map_err(|never| match never {}).boxed(),
        };
        let mut up_req = Request::new(upstream_body);
        *up_req.method_mut() = parts.method.clone();
        *up_req.uri_mut() = uri;
        *up_req.version_mut() = match group.config.protocol {
            UpstreamProtocol::Http1 => Version::HTTP_11,
            UpstreamProtocol::H2 => Version::HTTP_2,
        };
        *up_req.headers_mut() = headers;

        let sent = Instant::now();
        let try_timeout =
            deadline.map_or(per_try, |d| per_try.min(d.saturating_duration_since(sent)));
        let result = tokio::time::timeout(
            try_timeout,
            group.send(
                server.index,
                up_req,
                crate::addresses::Addresses {
                    client: conn.peer,
                    local: conn.local,
                },
            ),
        )
        .await;
        // Whether this try's failure may be sent again: the policy wants it, the request can
        // be repeated, tries and servers are left, the overall deadline has not passed, and
        // the group's budget has a retry (asked last, so only real candidates spend it).
        let retry = |wanted: bool| {
            let left = tried.len() < policy.attempts.get() as usize
                && tried.len() < group.servers.len()
                && deadline.is_none_or(|d| Instant::now() < d);
            if !(wanted && retryable && left) {
                return false;
            }
            let granted = group.budget.try_retry(group.now_s());
            listener.metrics.retry(granted);
            granted
        };
        let backoff = |n: usize| {
            crate::upstreams::retry::backoff(policy.backoff, policy.backoff_max, n as u32)
        };
        match result {
            Err(_elapsed) => {
                group.mark_failed(server.index);
                group.outcome(server.index, true);
                // peak_ewma: a server that timed out looks as slow as the timeout.
                group.observe_latency(server.index, try_timeout);
                listener.metrics.upstream_error(1);
                let again = retry(policy.on_timeout);
                tracing::warn!(upstream = %group.config.name, %addr, timeout = ?try_timeout, retry = again, "upstream response timed out");
                if again {
                    tokio::time::sleep(backoff(tried.len())).await;
                    continue;
                }
                return failure(done, Failure::UpstreamTimeout);
            }
            Ok(Err(e)) => {
                if is_caused_by::<BodyTooLarge>(&e) {
                    return failure(done, Failure::BodyTooLarge);
                }
                if is_caused_by::<BadRequestBody>(&e) {
                    return failure(done, Failure::BadRequest);
                }
                let connect = e.is_connect();
                if connect {
                    group.mark_failed(server.index);
                }
                group.outcome(server.index, true);
                listener.metrics.upstream_error(if connect { 0 } else { 2 });
                let again = retry(if connect {
                    policy.on_connect
                } else {
                    policy.on_reset
                });
                tracing::warn!(upstream = %group.config.name, %addr, error = %ErrorChain(&e), retry = again, "upstream request failed");
                if again {
                    tokio::time::sleep(backoff(tried.len())).await;
                    continue;
                }
                return failure(
                    done,
                    if connect {
                        Failure::UpstreamConnect
                    } else {
                        Failure::UpstreamError
                    },
                );
            }
            Ok(Ok(mut resp)) => {
                server.server().succeeded();
                group.outcome(server.index, resp.status().is_server_error());
                if resp.status().is_server_error() && retry(policy.on_5xx) {
                    tracing::info!(upstream = %group.config.name, %addr, status = resp.status().as_u16(), "upstream answered 5xx; retrying on another server");
                    drop(resp);
                    tokio::time::sleep(backoff(tried.len())).await;
                    continue;
                }
                let upstream_time = sent.elapsed();
                group.observe_latency(server.index, upstream_time);
                done.entry.upstream_time = Some(upstream_time);
                done.entry.status = resp.status().as_u16();
                let switching = resp.status() == StatusCode::SWITCHING_PROTOCOLS;
                let upstream_upgrade = resp
                    .extensions_mut()
                    .remove::<crate::upstreams::conn_pool::UpstreamUpgrade>()
                    .and_then(|u| u.take());
                if let (true, Some(client_upgrade), Some(upstream_upgrade)) =
                    (switching, client_upgrade, upstream_upgrade)
                {
                    tokio::spawn(tunnel(client_upgrade, upstream_upgrade, addr));
                } else {
                    strip_hop_by_hop(resp.headers_mut());
                }
                let (mut rparts, rbody) = resp.into_parts();
                rparts.version = parts.version;
                if !route.response_headers.is_empty() {
                    policy::edit_headers(&route.response_headers, &mut rparts.headers, &vars);
                }
                if let Some(id) = &request_id {
                    rparts.headers.insert(policy::X_REQUEST_ID, id.clone());
                }
                // A new session, or one whose server was down: name the server chosen.
                if let Some(cookies) = &group.sticky
                    && sticky != Some(server.index)
                {
                    rparts.headers.append(
                        header::SET_COOKIE,
                        cookies.set_cookie(server.index, listener.tls.is_some()),
                    );
                }
                done._server = Some(server);
                let rbody =
                    compression::apply(&listener.compressor, &facts, &mut rparts, rbody).await;
                return Response::from_parts(rparts, TrackedBody::new(rbody, done).boxed());
            }
        }
    }
}

/// Copies bytes both ways between an upgraded client connection and upstream connection.
async fn tunnel(
    client: crate::http1::OnUpgrade,
    mut upstream: crate::http1::Upgraded,
    addr: SocketAddr,
) {
    let Some(mut client) = client.wait().await else {
        tracing::debug!(%addr, "the client connection did not switch protocols");
        return;
    };
    if let Err(e) = tokio::io::copy_bidirectional(&mut client, &mut upstream).await {
        tracing::debug!(%addr, error = %e, "upgraded connection ended with an error");
    }
}

/// A short response for a request that failed before (or instead of) reaching a server.
fn failure(mut done: Done, why: Failure) -> Response<ProxyBody> {
    let status = why.status();
    done.entry.status = status.as_u16();
    let http1 = done.entry.protocol != "HTTP/2.0";
    let id = done.request_id.clone();
    if done.grpc {
        // Trailers-only: the status in the head of an empty 200 (the log keeps the HTTP
        // status the failure stands for).
        let mut resp = Response::new(TrackedBody::new(Full::new(Bytes::new()), done).boxed());
        crate::request::grpc::error_headers(why, resp.headers_mut());
        if let Some(id) = id {
            resp.headers_mut().insert(policy::X_REQUEST_ID, id);
        }
        return resp;
    }
    let mut resp = Response::new(
        TrackedBody::new(
            Full::new(Bytes::from_static(why.message().as_bytes())),
            done,
        )
        .boxed(),
    );
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    if let Some(id) = id {
        h.insert(policy::X_REQUEST_ID, id);
    }
    if http1
        && matches!(
            why,
            Failure::HeadersTooLarge | Failure::BodyTooLarge | Failure::BadRequest
        )
    {
        // The rest of the request was not read; do not try to reuse the connection.
        h.insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    resp
}

/// Displays an error with its causes, `a: b: c`.
struct ErrorChain<'a>(&'a (dyn std::error::Error + 'static));

impl std::fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)?;
        let mut cur = self.0.source();
        while let Some(e) = cur {
            write!(f, ": {e}")?;
            cur = e.source();
        }
        Ok(())
    }
}
