//! A routed request sent upstream, as named phases over one request context (after Pingora's
//! `ProxyHttp` phases and sozu's `HttpContext`):
//!
//! 1. `Proxied::new`: everything decided once (upgrade, whether it can be sent again, gzip
//!    upload, the overall deadline, the balancing key, the rewritten path, the sticky server);
//! 2. `upstream_peer`: a server from the group's balancer, never one already tried;
//! 3. `upstream_request`: the request for that server (hop-by-hop headers out, Host,
//!    forwarding headers, the route's header edits, origin-form target);
//! 4. `attempt`: one try, within the try's deadline;
//! 5. `upstream_failed` / `retry_5xx`: whether a failed try goes to another server (the
//!    route's policy, the group's retry budget, tries and deadline left);
//! 6. `response_filter`: the response's headers, a WebSocket tunnel after `101`, then
//!    compression as the response body's filter.
//!
//! Retrying is the loop in `run` over phases 2-5: one attempt at a time.
//!
//! On a route with `[route.cache]`, the cache's lookup phase (`cache::lookup`) ran before and
//! handed a [`Fetch`]: it edits the request in phase 3 and decides in phase 6 whether the
//! response is stored, renews a stored one (304), or is replaced by a stale entry
//! (`stale-if-error`, also when every try failed).

use super::cache::{self, Fetch, Filtered, Serving};
use super::compression::{self, RequestFacts, strengthen_if_none_match};
use super::context::{ConnCtx, ListenerCtx};
use super::done::{Done, failure};
use super::error::{Failure, is_caused_by};
use super::filters::{RoutePlan, UpstreamRequest, UpstreamResponse};
use super::forward::{
    Forwarding, add_forwarding, forwardable, strip_hop_by_hop, upgrade_protocol, write_forwardable,
};
use super::mirror::{self, Teed};
use super::phases::{RequestCtx, stopped};
use super::policy;
use super::response_inspection;
use crate::body::{BadRequestBody, BodyTooLarge, GunzipBody, LimitedBody, ProxyBody, TrackedBody};
use crate::exchange::ClientBody;
use crate::http1::client::WrittenFields;
use crate::metrics::mirror::MirrorState;
use crate::upstreams::conn_pool::UpstreamError;
use crate::upstreams::upstream::{ActiveGuard, Busy, UpstreamGroup};
use futures_util::FutureExt as _;
use http::header::{self, HeaderMap, HeaderValue};
use http::uri::PathAndQuery;
use http::{Method, Request, Response, StatusCode, Uri, Version};
use http_body::Body as _;
use http_body_util::BodyExt;
use sluice_config::{ForwardPath, PassHost, Route, UpstreamProtocol};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What `proxy::run` needs besides the request's context and route: the upstream group the
/// route chose, what the request says about compression, and the cache's part in it (a route
/// with `[route.cache]` whose lookup did not answer).
pub(super) struct Upstream {
    pub(super) group: Arc<UpstreamGroup>,
    pub(super) facts: RequestFacts,
    pub(super) fetch: Option<Box<Fetch>>,
}

/// Sends a routed request to its group and returns the response (or the failure's answer):
/// the phases, with retry as a loop over one attempt.
///
/// Not an `async fn`: the context is decided here, before the future exists, and the future
/// is a block that captures only it and `done`. An async fn keeps its arguments for its
/// whole life beside what is made from them, and a `mut` argument twice (rustc binds it
/// again inside); every byte of this future is copied at every level above it. Always inlined
/// (as `Proxied::new` and `attempt` are), so that the context is built in the future's slot in
/// its caller's: called, it was built on the stack and copied there
/// (`handler::tests::the_request_future_stays_small` bounds the result).
#[inline(always)]
pub(super) fn run<'a>(
    ctx: RequestCtx<'a>,
    plan: &'a RoutePlan,
    to: Upstream,
    req: Request<ClientBody>,
) -> impl Future<Output = Response<ProxyBody>> + 'a {
    let RequestCtx {
        conn,
        listener,
        client,
        host,
        mut done,
    } = ctx;
    let mut p = Proxied::new(
        Routed {
            conn,
            listener,
            plan,
            client,
            host,
        },
        to,
        req,
        &mut done,
    );
    async move {
        loop {
            let server = match p.upstream_peer().await {
                Ok(s) => s,
                Err(why) => return p.fail(done, why).await,
            };
            let addr = server.server().addr;
            done.entry.upstream = Some(addr);
            // The request is made and handed to the attempt in a block of its own, so that
            // its slot is not kept beside the attempt's future.
            let (attempt, span, sent) = {
                let (mut req, written) = p.upstream_request(addr, done.trace.is_some());
                let span = super::trace::attempt(
                    done.trace.as_deref(),
                    req.method(),
                    &p.group.config.name,
                    addr,
                    p.tried.len(),
                );
                if let Some(t) = &done.trace {
                    // The next hop's parent: this attempt's span (or the request's, not
                    // sampled).
                    t.inject(span.as_ref(), req.headers_mut());
                }
                let sent = Instant::now();
                (p.attempt(&server, req, written, sent), span, sent)
            };
            let next = match attempt.await {
                // (`retry_5xx` also counts the 5xx against the server, once, either way.)
                Ok(resp) if resp.status().is_server_error() && p.retry_5xx(&server, &resp) => {
                    super::trace::attempt_done(span, Ok(resp.status().as_u16()));
                    Next::Retry
                }
                Ok(resp) => {
                    super::trace::attempt_done(span, Ok(resp.status().as_u16()));
                    return p.response_filter(done, server, resp, sent).await;
                }
                Err(e) => {
                    super::trace::attempt_done(span, Err(e.kind()));
                    p.upstream_failed(&server, e)
                }
            };
            match next {
                Next::Retry => tokio::time::sleep(p.backoff()).await,
                Next::Fail(why) => return p.fail(done, why).await,
            }
        }
    }
}

/// What a failed attempt leads to.
enum Next {
    Retry,
    Fail(Failure),
}

/// Why an attempt brought no response.
enum Attempt {
    TimedOut(Duration),
    Failed(UpstreamError),
}

impl Attempt {
    /// Its `error.type` in a trace.
    fn kind(&self) -> &'static str {
        match self {
            Attempt::TimedOut(_) => "timeout",
            Attempt::Failed(_) => "upstream_error",
        }
    }
}

/// Where a request is going: its connection, listener, route (with its filters), client and
/// host.
struct Routed<'a> {
    conn: &'a ConnCtx,
    listener: &'a ListenerCtx,
    plan: &'a RoutePlan,
    client: IpAddr,
    host: String,
}

/// One proxied request's context, decided once and read by every phase.
struct Proxied<'a> {
    conn: &'a ConnCtx,
    listener: &'a ListenerCtx,
    group: Arc<UpstreamGroup>,
    plan: &'a RoutePlan,
    client: IpAddr,
    host: String,
    parts: http::request::Parts,
    /// The client's body, until an attempt takes it (only the first can: it is streamed);
    /// teed where a mirror copies it.
    body: Option<LimitedBody<Teed<ClientBody>>>,
    /// The mirrors this request was copied to (their primary-side counts).
    mirrored: Vec<Arc<MirrorState>>,
    facts: RequestFacts,
    /// An HTTP/1.1 upgrade's protocol, and the client side of it.
    upgrade: Option<HeaderValue>,
    client_upgrade: Option<crate::http1::OnUpgrade>,
    /// No body, and idempotent or the policy allows it: it can be sent again.
    retryable: bool,
    /// `decompress_requests` applies: a gzip upload goes upstream decompressed.
    gunzip: bool,
    wants_trailers: bool,
    /// The route's overall timeout or a gRPC call's deadline, whichever ends first.
    deadline: Option<Instant>,
    key: u64,
    rewritten: Option<PathAndQuery>,
    request_id: Option<HeaderValue>,
    sticky: Option<usize>,
    /// Servers tried so far, in order.
    tried: Vec<usize>,
    /// The cache's part in this request (a route with `[route.cache]`).
    cache: Option<Box<Fetch>>,
}

impl<'a> Proxied<'a> {
    #[inline(always)]
    fn new(at: Routed<'a>, to: Upstream, mut req: Request<ClientBody>, done: &mut Done) -> Self {
        let Routed {
            conn,
            listener,
            plan,
            client,
            host,
        } = at;
        let route = &*plan.route;
        let Upstream {
            group,
            facts,
            fetch: cache,
        } = to;
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
        // A request without a body can be sent again; one whose body is streaming cannot (it
        // is not buffered), whatever the policy says.
        let retryable = (policy.non_idempotent || is_idempotent(&parts.method)) && !has_body;
        // An upgrade (WebSocket) is not copied: a copy cannot hold the conversation after it.
        let (body, mirrored) = if route.mirrors.is_empty() || upgrade.is_some() {
            (Teed::plain(body), Vec::new())
        } else {
            let copying = mirror::Copying {
                conn,
                listener,
                route,
                parts: &parts,
                host: &host,
                client,
                request_id: done.request_id.as_ref(),
                trace: done.trace.as_deref(),
            };
            mirror::start(&copying, body, has_body)
        };
        let body = Some(LimitedBody::new(
            body,
            route
                .max_request_body
                .unwrap_or(listener.config.max_body_bytes),
            // Shared with the log entry only when there is a body to count: a request
            // without one saves the counter's allocation.
            has_body.then(|| done.bytes_in.get_or_insert_with(Default::default).clone()),
        ));
        let gunzip = facts.settings.decompress_requests && has_body && gzipped(&parts.headers);
        let wants_trailers = wants_trailers(&parts.headers);
        group.budget.request(group.now_s());
        let deadline = deadline(route, done.grpc, &parts.headers);
        let key = group.hash_key(&parts, client);
        let rewritten = match &route.rewrite {
            Some(rw) => policy::rewrite(rw, &parts.uri),
            None if route.forward_path == ForwardPath::Original => {
                crate::request::path::original_target(&parts.uri, &parts.extensions).cloned()
            }
            None => None,
        };
        let sticky = group.sticky.as_ref().and_then(|s| s.server(&parts.headers));
        Proxied {
            conn,
            listener,
            group,
            plan,
            client,
            host,
            parts,
            body,
            facts,
            upgrade,
            client_upgrade,
            retryable,
            gunzip,
            wants_trailers,
            deadline,
            key,
            rewritten,
            request_id: done.request_id.clone(),
            sticky,
            tried: Vec::with_capacity(2),
            cache,
            mirrored,
        }
    }

    /// What answering from the cache needs (`None` on a route without `[route.cache]`).
    fn serving(&self) -> Option<Serving<'_>> {
        Some(Serving {
            cache: &self.listener.cache,
            settings: self.plan.route.cache.as_ref()?,
            host_key: &self.host,
            compressor: &self.listener.compressor,
            facts: &self.facts,
            method: &self.parts.method,
            request: &self.parts.headers,
            route: &self.plan.route,
            vars: self.vars(),
        })
    }

    /// The answer when no server gave a response: a stale entry where `stale-if-error`
    /// allows it, else the failure's.
    async fn fail(&mut self, done: Done, why: Failure) -> Response<ProxyBody> {
        for m in &self.mirrored {
            m.primary(why.status(), done.start.elapsed());
        }
        let stale = self.cache.as_mut().and_then(|f| f.on_failure());
        if let (Some(entry), Some(s)) = (stale, self.serving()) {
            // Boxed, like every cache answer here: only cached routes pay for its future.
            return Box::pin(cache::respond(
                &s,
                entry,
                sluice_cache::Outcome::Stale,
                done,
            ))
            .await;
        }
        failure(done, why)
    }

    /// What the route's header edits may refer to.
    fn vars(&self) -> policy::Vars<'_> {
        policy::Vars {
            host: policy::host_name(&self.host),
            uri: &self.parts.uri,
            https: self.listener.tls.is_some(),
            client: self.client,
            request_id: self.request_id.as_ref(),
        }
    }

    /// Phase 2: a server not tried yet (the sticky one first).
    async fn upstream_peer(&mut self) -> Result<ActiveGuard, Failure> {
        match self.group.acquire(self.key, &self.tried, self.sticky).await {
            Ok(server) => {
                self.tried.push(server.index);
                Ok(server)
            }
            Err(Busy::NoServer) => Err(Failure::UpstreamConnect),
            Err(busy) => {
                tracing::warn!(upstream = %self.group.config.name, ?busy, "every upstream server is at max_conns");
                Err(Failure::ServiceUnavailable)
            }
        }
    }

    /// Phase 3: the request for the server at `addr`, and its fields written as lines
    /// where nothing but the forwarding edits them (see [`write_forwardable`]): an HTTP/1.1
    /// server, no route header edits, cache, upgrade, trailers, gzip upload, trace context
    /// (`traced`, added to the map afterwards) or weak validator to strengthen. Otherwise
    /// the fields are a map of their own, edited in turn.
    fn upstream_request(
        &mut self,
        addr: SocketAddr,
        traced: bool,
    ) -> (Request<ProxyBody>, Option<WrittenFields>) {
        let node;
        let host_value = match &self.group.config.pass_host {
            PassHost::Pass => &self.host,
            PassHost::Node => {
                node = crate::text::addr_string(&addr);
                &node
            }
            PassHost::Rewrite(h) => h,
        };
        let fwd = Forwarding {
            peer: self.conn.peer,
            peer_ip: &self.conn.peer_ip,
            client: self.client,
            https: self.listener.tls.is_some(),
            host: &self.host,
            forwarded: self.listener.config.forwarded_header,
        };
        let xfcc = self.client_cert_header();
        let plain = !traced
            && xfcc.is_none()
            && matches!(self.group.config.protocol, UpstreamProtocol::Http1)
            && self.plan.upstream_request.is_empty()
            && self.cache.is_none()
            && self.upgrade.is_none()
            && !self.wants_trailers
            && !self.gunzip;
        let compressing = self.facts.settings.enabled;
        let written = plain
            .then(|| {
                write_forwardable(&self.parts.headers, host_value, &fwd, |name| {
                    compressing && name == header::IF_NONE_MATCH
                })
            })
            .flatten();
        let headers = if written.is_some() {
            HeaderMap::new()
        } else {
            let mut headers = self.edited_headers(host_value, &fwd);
            if let Some(v) = xfcc {
                headers.insert(super::forward::XFCC, v);
            }
            headers
        };
        // Origin-form: the request line carries the path and query only.
        let uri = match self.rewritten.as_ref().or(self.parts.uri.path_and_query()) {
            Some(pq) => Uri::from(pq.clone()),
            None => Uri::from_static("/"),
        };
        let body: ProxyBody = match self.body.take() {
            Some(b) if !self.retryable && self.gunzip => {
                GunzipBody::new(b, self.facts.settings.max_decompressed_bytes).boxed()
            }
            Some(b) if !self.retryable => b.boxed(),
            _ => crate::body::empty(),
        };
        let mut req = Request::new(body);
        *req.method_mut() = match self.cache.as_ref().and_then(|f| f.upstream_method()) {
            Some(m) => m,
            None => self.parts.method.clone(),
        };
        *req.uri_mut() = uri;
        *req.version_mut() = match self.group.config.protocol {
            UpstreamProtocol::Http1 => Version::HTTP_11,
            UpstreamProtocol::H2 => Version::HTTP_2,
        };
        *req.headers_mut() = headers;
        (req, written)
    }

    /// `X-Forwarded-Client-Cert` for the connection's verified client certificate, where the
    /// listener forwards it (a client's own copy never goes upstream: `forward::XFCC`).
    fn client_cert_header(&self) -> Option<HeaderValue> {
        let forward = self
            .listener
            .config
            .tls
            .as_ref()
            .and_then(|t| t.client_auth.as_ref())
            .is_some_and(|a| a.forward_client_cert);
        if !forward {
            return None;
        }
        let cert = self.conn.tls.as_ref()?.client_cert.as_ref()?;
        cert.verified
            .then(|| HeaderValue::from_str(&cert.xfcc()).ok())
            .flatten()
    }

    /// The map path of phase 3: the client's fields copied without the hop-by-hop ones,
    /// then each edit in turn.
    fn edited_headers(&self, host_value: &str, fwd: &Forwarding<'_>) -> HeaderMap {
        let mut headers = forwardable(&self.parts.headers, crate::http1::ADDED_FIELDS);
        if let Some(proto) = &self.upgrade {
            headers.insert(header::UPGRADE, proto.clone());
            headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        }
        if self.wants_trailers {
            headers.insert(header::TE, HeaderValue::from_static("trailers"));
        }
        strengthen_if_none_match(&self.facts.settings, &mut headers);
        if let Some(fetch) = &self.cache {
            fetch.edit_request(&mut headers);
        }
        if self.gunzip {
            headers.remove(header::CONTENT_ENCODING);
            headers.remove(header::CONTENT_LENGTH);
        }
        if let Ok(v) = HeaderValue::from_str(host_value) {
            headers.insert(header::HOST, v);
        }
        add_forwarding(&mut headers, fwd);
        for filter in &*self.plan.upstream_request {
            match filter {
                UpstreamRequest::HeaderEdits => {
                    let edits = &self.plan.route.request_headers;
                    policy::edit_headers(edits, &mut headers, &self.vars());
                }
            }
        }
        headers
    }

    /// Phase 4: one try, within the per-try timeout and what is left of the deadline. Not
    /// an `async fn`, for the reason `run` is not: the future is the send's own, timed.
    #[inline(always)]
    fn attempt(
        &self,
        server: &ActiveGuard,
        req: Request<ProxyBody>,
        written: Option<WrittenFields>,
        sent: Instant,
    ) -> impl Future<Output = Result<Response<ProxyBody>, Attempt>> + use<'_, 'a> {
        let per_try = self
            .plan
            .route
            .retry
            .per_try_timeout
            .unwrap_or(self.group.config.response_timeout);
        let timeout = self
            .deadline
            .map_or(per_try, |d| per_try.min(d.saturating_duration_since(sent)));
        let at = crate::addresses::Addresses {
            client: self.conn.peer,
            local: self.conn.local,
        };
        // Timed from `sent`, already read: `timeout` would read the clock again.
        let due = tokio::time::Instant::from_std(sent) + timeout;
        tokio::time::timeout_at(due, self.group.send(server.index, req, written, at)).map(
            move |r| match r {
                Err(_elapsed) => Err(Attempt::TimedOut(timeout)),
                Ok(Err(e)) => Err(Attempt::Failed(e)),
                Ok(Ok(resp)) => Ok(resp),
            },
        )
    }

    /// Whether a failed try may be sent again: the policy wants it, the request can be
    /// repeated, tries and servers are left, the overall deadline has not passed, and the
    /// group's budget has a retry (asked last, so only real candidates spend it).
    fn may_retry(&self, wanted: bool) -> bool {
        let policy = &self.plan.route.retry;
        let left = self.tried.len() < policy.attempts.get() as usize
            && self.tried.len() < self.group.servers.len()
            && self.deadline.is_none_or(|d| Instant::now() < d);
        if !(wanted && self.retryable && left) {
            return false;
        }
        let granted = self.group.budget.try_retry(self.group.now_s());
        self.listener.metrics.retry(granted);
        granted
    }

    /// The wait before the next try.
    fn backoff(&self) -> Duration {
        let policy = &self.plan.route.retry;
        crate::upstreams::retry::backoff(
            policy.backoff,
            policy.backoff_max,
            self.tried.len() as u32,
        )
    }

    /// Phase 5, for a try without a response: counted against the server, then another
    /// server or the failure's answer.
    fn upstream_failed(&self, server: &ActiveGuard, failed: Attempt) -> Next {
        let (group, policy) = (&self.group, &self.plan.route.retry);
        let addr = server.server().addr;
        match failed {
            Attempt::TimedOut(timeout) => {
                group.mark_failed(server.index);
                group.outcome(server.index, true);
                // peak_ewma: a server that timed out looks as slow as the timeout.
                group.observe_latency(server.index, timeout);
                self.listener.metrics.upstream_error(1);
                let again = self.may_retry(policy.on_timeout);
                tracing::warn!(upstream = %group.config.name, %addr, ?timeout, retry = again, "upstream response timed out");
                if again {
                    Next::Retry
                } else {
                    Next::Fail(Failure::UpstreamTimeout)
                }
            }
            Attempt::Failed(e) => {
                // The client's own upload failed: its answer, not the server's fault.
                if is_caused_by::<BodyTooLarge>(&e) {
                    return Next::Fail(Failure::BodyTooLarge);
                }
                if is_caused_by::<BadRequestBody>(&e) {
                    return Next::Fail(Failure::BadRequest);
                }
                let connect = e.is_connect();
                if connect {
                    group.mark_failed(server.index);
                }
                group.outcome(server.index, true);
                self.listener
                    .metrics
                    .upstream_error(if connect { 0 } else { 2 });
                let again = self.may_retry(if connect {
                    policy.on_connect
                } else {
                    policy.on_reset
                });
                tracing::warn!(upstream = %group.config.name, %addr, error = %ErrorChain(&e), retry = again, "upstream request failed");
                if again {
                    Next::Retry
                } else if connect {
                    Next::Fail(Failure::UpstreamConnect)
                } else {
                    Next::Fail(Failure::UpstreamError)
                }
            }
        }
    }

    /// Phase 5, for a 5xx: whether it goes to another server instead of to the client.
    fn retry_5xx(&self, server: &ActiveGuard, resp: &Response<ProxyBody>) -> bool {
        server.server().succeeded();
        self.group.outcome(server.index, true);
        let again = self.may_retry(self.plan.route.retry.on_5xx);
        if again {
            tracing::info!(upstream = %self.group.config.name, addr = %server.server().addr, status = resp.status().as_u16(), "upstream answered 5xx; retrying on another server");
        }
        again
    }

    /// Phase 6: the response on its way to the client: accounting, headers, a tunnel after
    /// `101`, and compression as the body's filter.
    async fn response_filter(
        &mut self,
        mut done: Done,
        server: ActiveGuard,
        mut resp: Response<ProxyBody>,
        sent: Instant,
    ) -> Response<ProxyBody> {
        let group = &self.group;
        if !resp.status().is_server_error() {
            // (A 5xx kept for the client was counted by `retry_5xx`.)
            server.server().succeeded();
            group.outcome(server.index, false);
        }
        let upstream_time = sent.elapsed();
        group.observe_latency(server.index, upstream_time);
        for m in &self.mirrored {
            m.primary(resp.status(), upstream_time);
        }
        done.entry.upstream_time = Some(upstream_time);
        done.entry.status = resp.status().as_u16();
        let switching = resp.status() == StatusCode::SWITCHING_PROTOCOLS;
        let upstream_upgrade = resp
            .extensions_mut()
            .remove::<crate::upstreams::conn_pool::UpstreamUpgrade>()
            .and_then(|u| u.take());
        if let (true, Some(client_upgrade), Some(upstream_upgrade)) =
            (switching, self.client_upgrade.take(), upstream_upgrade)
        {
            let streams = &self.conn.signals.streams;
            streams.tasks.spawn(tunnel(
                streams.force.clone(),
                client_upgrade,
                upstream_upgrade,
                server.server().addr,
            ));
        } else {
            strip_hop_by_hop(resp.headers_mut());
        }
        let (mut rparts, rbody) = resp.into_parts();
        rparts.version = self.parts.version;
        let mut marks = None;
        let rbody = match self.cache.take() {
            None => rbody,
            Some(fetch) => match fetch.on_response(rparts.status, &rparts.headers, rbody) {
                Filtered::Pass(body, m) => {
                    marks = Some(m);
                    body
                }
                Filtered::FromStore(entry, outcome) => {
                    done._server = Some(server);
                    if let Some(s) = self.serving() {
                        return Box::pin(cache::respond(&s, entry, outcome, done)).await;
                    }
                    unreachable!("a fetch exists only on a route with [route.cache]")
                }
            },
        };
        self.response_head(&mut rparts.headers, marks, server.index);
        done._server = Some(server);
        let rbody = match done.waf.take() {
            // Boxed: only routes that inspect responses carry its future.
            Some(pending) if !switching => {
                let inspected = Box::pin(response_inspection::inspect(
                    pending, &mut done, &rparts, rbody,
                ));
                match inspected.await {
                    Ok(body) => body,
                    Err(stop) => return stopped(done, stop),
                }
            }
            _ => rbody,
        };
        let rbody = match &done.lua {
            Some(lua) => match crate::request::scripting::lua_response(
                lua,
                &mut self.parts.headers,
                &mut rparts,
                rbody,
            ) {
                Ok(body) => body,
                Err(_) => return crate::request::done::failure(done, Failure::ScriptFailed),
            },
            None => rbody,
        };
        let rbody =
            compression::apply(&self.listener.compressor, &self.facts, &mut rparts, rbody).await;
        Response::from_parts(rparts, TrackedBody::new(rbody, done).boxed())
    }
}

impl Proxied<'_> {
    /// Phase 6's edits of the response's head: the route's `upstream_response` filters,
    /// then the gateway's own (request ID, cache status, the sticky cookie of `server`).
    fn response_head(
        &self,
        headers: &mut HeaderMap,
        marks: Option<cache::marks::Marks>,
        server: usize,
    ) {
        for filter in &*self.plan.upstream_response {
            match filter {
                UpstreamResponse::HeaderEdits => {
                    let edits = &self.plan.route.response_headers;
                    policy::edit_headers(edits, headers, &self.vars());
                }
                UpstreamResponse::Cors => {
                    if let Some(cors) = &self.plan.route.cors {
                        let origin = self.parts.headers.get(header::ORIGIN);
                        sluice_auth::cors::on_response(cors, origin, headers);
                    }
                }
            }
        }
        if let Some(id) = &self.request_id {
            headers.insert(policy::X_REQUEST_ID, id.clone());
        }
        if let Some(m) = marks {
            m.apply(headers);
        }
        // A new session, or one whose server was down: name the server chosen.
        if let Some(cookies) = &self.group.sticky
            && self.sticky != Some(server)
        {
            headers.append(
                header::SET_COOKIE,
                cookies.set_cookie(server, self.listener.tls.is_some()),
            );
        }
    }
}

/// Whether a request body is gzip-encoded (`decompress_requests` sends it upstream
/// decompressed).
#[inline]
fn gzipped(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            let v = v.trim();
            v.eq_ignore_ascii_case("gzip") || v.eq_ignore_ascii_case("x-gzip")
        })
}

/// Whether the client takes trailers (`TE: trailers`), which gRPC needs passed on.
#[inline]
fn wants_trailers(headers: &HeaderMap) -> bool {
    headers.get_all(header::TE).iter().any(|v| {
        v.to_str().is_ok_and(|s| {
            s.split(',')
                .any(|t| t.trim().eq_ignore_ascii_case("trailers"))
        })
    })
}

/// The route's overall timeout or a gRPC call's deadline, whichever ends first. The clock is
/// read only for a request that has one.
#[inline]
fn deadline(route: &Route, grpc: bool, headers: &HeaderMap) -> Option<Instant> {
    [
        route.retry.timeout,
        grpc.then(|| crate::request::grpc::timeout(headers))
            .flatten(),
    ]
    .into_iter()
    .flatten()
    .min()
    .map(|t| Instant::now() + t)
}

fn is_idempotent(m: &Method) -> bool {
    matches!(
        *m,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE
    )
}

/// Copies bytes both ways between an upgraded client connection and upstream connection,
/// until both end or the listener's long-lived relays are forced closed (`force`: their
/// drain's deadline, `stream_drain_timeout` after an upgrade).
async fn tunnel(
    force: tokio_util::sync::CancellationToken,
    client: crate::http1::OnUpgrade,
    mut upstream: crate::http1::Upgraded,
    addr: SocketAddr,
) {
    let Some(mut client) = client.wait().await else {
        tracing::debug!(%addr, "the client connection did not switch protocols");
        return;
    };
    tokio::select! {
        r = tokio::io::copy_bidirectional(&mut client, &mut upstream) => {
            if let Err(e) = r {
                tracing::debug!(%addr, error = %e, "upgraded connection ended with an error");
            }
        }
        () = force.cancelled() => {}
    }
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
