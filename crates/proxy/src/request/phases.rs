//! A request's context and the phases before it goes upstream (docs/ARCHITECTURE.md, "The
//! request path", lists them all in order and says what each may change).
//!
//! [`RequestCtx`] is built once, when the request arrives, and every phase reads it. A phase
//! returns a [`Flow`]: `Ok` to go on to the next phase, or a [`Stop`] that ends the request
//! with the gateway's own answer (a failure's status, a route's redirect, an ACME token).
//! Only [`RequestCtx::stop`] turns a `Stop` into a response, so every early end is logged,
//! counted and traced the same way.

use crate::access_log::Entry;
use crate::body::{ProxyBody, TrackedBody};
use crate::exchange::ClientBody;
use crate::request::context::{ConnCtx, ListenerCtx};
use crate::request::done::{Done, failure};
use crate::request::error::Failure;
use crate::request::filters::{Access, RoutePlan};
use crate::request::forward::head_size;
use crate::request::policy;
use crate::request::rate_limit::{RateLimiter, Verdict};
use crate::request::split;
use crate::request::vouched;
use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Request, Response, StatusCode, Version};
use http_body_util::{BodyExt, Full};
use sluice_config::{LuaPhase, Route};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

/// The access log's `refused` for an HTTP/2 or HTTP/3 request with more header fields than
/// the listener's `max_header_fields` (431).
const TOO_MANY_FIELDS: &str = "too_many_fields";

/// More header fields than the listener's `max_header_fields` (HTTP/1.1's parser refuses
/// them before; this is HTTP/2's and HTTP/3's check, whose servers bound the head's bytes
/// only). `Cookie` counts once however many fields carry it: an HTTP/2 browser sends each
/// cookie as a field of its own (RFC 9113 §8.2.3), which NGINX joins into one.
fn too_many_fields(headers: &HeaderMap, max: usize) -> bool {
    headers.len() > max && {
        let cookies = headers.get_all(header::COOKIE).iter().count();
        headers.len() - cookies.saturating_sub(1) > max
    }
}

/// What a phase decided: go on (`Ok`), or end the request here.
pub(crate) type Flow<T> = Result<T, Stop>;

/// Why a request ends before it goes upstream, and with what. Two words: a `Flow` is held in
/// the request's future (moved whole into an HTTP/2 stream's task), so the rare payloads are
/// boxed (`tests::a_stop_is_two_words`).
pub(crate) enum Stop {
    /// A failure's status and short body (`error::Failure`).
    Fail(Failure),
    /// A failure with extra response headers (a rate limit's `Retry-After`).
    FailWith(Failure, Box<HeaderMap>),
    /// The gateway's own answer: a route's redirect or fixed response, an ACME token.
    Answer(Box<(StatusCode, HeaderMap, Bytes)>),
    /// A script's answer through the route's `header_filter` and `body_filter`
    /// (`request::scripting`).
    Scripted(Box<Response<ProxyBody>>),
}

/// One request's context, built once when it arrives and read by every phase: its
/// connection and listener, the client behind trusted proxies, the host it asked for, and
/// its log record (`Done`, which ends with the response body).
pub(crate) struct RequestCtx<'a> {
    pub(crate) conn: &'a Arc<ConnCtx>,
    pub(crate) listener: &'a ListenerCtx,
    /// The client address, behind `trusted_proxies` where the peer is one.
    pub(crate) client: IpAddr,
    /// The authority of the target, else `Host`; empty when neither was sent.
    pub(crate) host: String,
    pub(crate) done: Done,
}

impl<'a> RequestCtx<'a> {
    /// The context of `req`, which arrived on `conn` now (`start`): the client, the request
    /// ID (set on `req` where the listener gives one), the host, the log entry and the
    /// request's span.
    #[inline(always)]
    pub(crate) fn new(
        conn: &'a Arc<ConnCtx>,
        listener: &'a ListenerCtx,
        req: &mut Request<ClientBody>,
        start: Instant,
    ) -> Self {
        let cfg = &listener.config;
        let client = policy::real_client(conn.peer.ip(), req.headers(), &cfg.trusted_proxies);
        let request_id = cfg.request_id.then(|| {
            policy::never_indexed(policy::request_id(
                conn.peer.ip(),
                req.headers(),
                &cfg.trusted_proxies,
            ))
        });
        // Counted before the gateway adds its own field; refused in `early`.
        let too_many = matches!(req.version(), Version::HTTP_2 | Version::HTTP_3)
            && too_many_fields(req.headers(), cfg.max_header_fields);
        if let Some(id) = &request_id {
            req.headers_mut().insert(policy::X_REQUEST_ID, id.clone());
        }
        let host = host_of(req);
        let mut entry = entry(conn, listener, req, start);
        if too_many {
            entry.refused = Some(TOO_MANY_FIELDS);
        }
        // The client behind trusted proxies has no port we know.
        entry.client = Some(if client == conn.peer.ip() {
            conn.peer
        } else {
            SocketAddr::new(client, 0)
        });
        entry.host.clone_from(&host);
        if let Some(id) = request_id.as_ref().and_then(|v| v.to_str().ok()) {
            entry.request_id = id.to_owned();
        }
        let mut done = Done {
            entry,
            start,
            bytes_in: None,
            log: listener.access_log.clone(),
            state: conn.state.clone(),
            metrics: listener.metrics.clone(),
            request_id,
            grpc: crate::request::grpc::is_grpc(req.headers()),
            _server: None,
            trace: None,
            lua: None,
            waf: None,
        };
        if let Some(tracer) = &listener.tracer {
            let span = crate::request::trace::server_span(tracer, conn, req, &host, client, &done);
            done.entry.trace = Some(span.ids());
            done.trace = Some(Box::new(span));
        }
        RequestCtx {
            conn,
            listener,
            client,
            host,
            done,
        }
    }

    /// Phase `early`: what is checked before routing, for every request of the listener: the
    /// head's size (431), HTTP/1.1's `Host` (400), an ACME CA's HTTP-01 validation (answered
    /// before routes and ACLs: a CA's validation servers are anywhere, and only for a token
    /// the ACME manager has published), the listener's ACL (403), the header fields the
    /// gateway vouches for (400, `vouched_fields`).
    pub(crate) fn early(&mut self, req: &mut Request<ClientBody>) -> Flow<()> {
        let listener = self.listener;
        if head_size(req.method(), req.uri(), req.headers()) > listener.config.max_header_bytes
            || self.done.entry.refused == Some(TOO_MANY_FIELDS)
        {
            return Err(Stop::Fail(Failure::HeadersTooLarge));
        }
        if req.version() == Version::HTTP_11 && self.host.is_empty() {
            // RFC 9112 §3.2: a server MUST respond 400 to an HTTP/1.1 request without Host.
            return Err(Stop::Fail(Failure::BadRequest));
        }
        if !self.host.is_empty() && !crate::request::authority::is_plain(&self.host) {
            self.done.entry.refused = Some("bad_host");
            return Err(Stop::Fail(Failure::BadRequest));
        }
        if req
            .uri()
            .path()
            .starts_with(sluice_tls::live::HTTP01_PREFIX)
            && matches!(*req.method(), http::Method::GET | http::Method::HEAD)
            && let Some(answer) = sluice_tls::live().http_answer(req.uri().path())
        {
            let mut headers = HeaderMap::new();
            headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/octet-stream"),
            );
            return Err(Stop::Answer(Box::new((
                StatusCode::OK,
                headers,
                Bytes::from(answer),
            ))));
        }
        if !listener.config.acl.permits(self.client) {
            listener.metrics.denied();
            return Err(Stop::Fail(Failure::Forbidden));
        }
        self.vouched_fields(req)?;
        self.client_cert_check()
    }

    /// Phase `early`, the header fields: a second `Authorization` or `Proxy-Authorization`
    /// is 400 (the reason in the log), underscored names are dropped (unless the listener's
    /// `underscores_in_headers` keeps them; never an underscore spelling of a field the
    /// gateway sets), and the fields `Connection` names go now, before the gateway sets its
    /// own (`vouched::screen`).
    fn vouched_fields(&mut self, req: &mut Request<ClientBody>) -> Flow<()> {
        let keep_underscores = self.listener.config.underscores_in_headers;
        let request_id = self.done.request_id.is_some();
        vouched::screen(req.headers_mut(), keep_underscores, request_id).map_err(|why| {
            self.done.entry.refused = Some(why);
            Stop::Fail(Failure::DuplicateAuthorization)
        })
    }

    /// A listener that asks for client certificates: 400 where one is required and none was
    /// sent, or one was sent that did not verify (NGINX's `ssl_verify_client` answers).
    fn client_cert_check(&self) -> Flow<()> {
        let Some(auth) = self
            .listener
            .config
            .tls
            .as_ref()
            .and_then(|t| t.client_auth.as_ref())
        else {
            return Ok(());
        };
        let tls = self.conn.tls.as_ref();
        let mode_for = |name: Option<&str>| {
            match (name, &self.listener.tls) {
                (Some(name), Some(acceptor)) => acceptor.store().client_auth_for(name),
                _ => None,
            }
            .unwrap_or(auth.mode)
        };
        let mode = mode_for(tls.and_then(|t| t.sni.as_deref()));
        // The handshake asked for a certificate as the SNI name's settings say. A `Host` (or
        // `:authority`, also on an HTTP/2 connection coalesced across names) whose site asks
        // for certificates otherwise would skip or change its check, so the request is
        // misdirected (NGINX answers 421 too). A site that asks for none is served on any
        // connection, and one whose settings are the SNI name's was checked as it asks.
        let host = policy::host_name(&self.host);
        if !host.is_empty() {
            let wanted = mode_for(Some(host));
            if wanted != sluice_config::ClientAuthMode::Off && wanted != mode {
                return Err(Stop::Fail(Failure::Misdirected));
            }
        }
        match (mode, tls.and_then(|t| t.client_cert.as_deref())) {
            (sluice_config::ClientAuthMode::Off, _) => Ok(()),
            (_, Some(cert)) if !cert.verified => Err(Stop::Fail(Failure::BadClientCert)),
            (sluice_config::ClientAuthMode::Required, None) => {
                Err(Stop::Fail(Failure::NoClientCert))
            }
            _ => Ok(()),
        }
    }

    /// Phase `early`'s first step: the path in normal form (`request::path`), set on the
    /// request so that every later phase (routing, ACLs, limits, authentication, the WAF,
    /// Lua, the cache key, the target sent upstream) sees the one spelling; the client's own
    /// is kept for a route with `forward_path = "original"`. A refused path is 400 with its
    /// reason in the log.
    pub(crate) fn normalize_path(&mut self, req: &mut Request<ClientBody>) -> Flow<()> {
        let policy = &self.listener.config.paths;
        // An absolute-form target with an empty path (`http://a?x`, or an HTTP/2 `:path`
        // of `?x`) goes on in origin form with the path `/` (RFC 9112 §3.2.1).
        let no_path = req
            .uri()
            .path_and_query()
            .is_some_and(|pq| pq.as_str().starts_with('?'));
        let normal = match crate::request::path::normalize(req.uri().path(), policy) {
            Ok(None) if !no_path => return Ok(()),
            Ok(None) => "/".to_owned(),
            Ok(Some(normal)) => normal,
            Err(why) => {
                self.done.entry.refused = Some(why.name());
                return Err(Stop::Fail(Failure::BadPath));
            }
        };
        let Some((uri, original)) = crate::request::path::with_path(req.uri(), &normal) else {
            self.done.entry.refused = Some("path_not_a_target");
            return Err(Stop::Fail(Failure::BadPath));
        };
        *req.uri_mut() = uri;
        req.extensions_mut().insert(original);
        Ok(())
    }

    /// Phase `route`: the route for the request's host, path, method and headers (404),
    /// with its filters by phase.
    pub(crate) fn route(&mut self, req: &Request<ClientBody>) -> Flow<&'a RoutePlan> {
        let listener = self.listener;
        let at = listener
            .router
            .find_index(&self.host, req.uri().path(), req.method(), req.headers())
            .ok_or(Stop::Fail(Failure::NoRoute))?;
        let plan = &listener.plans[at];
        debug_assert!(Arc::ptr_eq(&plan.route, &listener.router.routes()[at]));
        self.done.entry.route = Some(plan.route.name.clone());
        if let Some(span) = &mut self.done.trace {
            crate::request::trace::routed(span, req.method(), &plan.route.name);
        }
        Ok(plan)
    }

    /// Phase `access`: the route's access filters in order (`filters::Access`): its ACL
    /// (403), a CORS preflight (answered 204), authentication (401, 403, 500; the subject and
    /// the identity's headers go on the request), its rate limit (a delay waits here; a
    /// refusal is 429 with the limit's headers), the WAF (`firewall.rs`), Lua's `access`.
    pub(crate) async fn access(
        &mut self,
        plan: &RoutePlan,
        req: &mut Request<ClientBody>,
    ) -> Flow<()> {
        let mut subject = None;
        if let Some(auth) = &plan.query_credentials {
            // Before any filter may end the request: a refused or limited request's key is
            // not written down either.
            self.mask_query_credentials(auth.query_credentials());
        }
        if let Some(scripts) = &plan.lua {
            self.lua_start(scripts, req);
        }
        for filter in &*plan.access {
            match filter {
                Access::LuaRewrite | Access::Lua | Access::LuaContent => {
                    let (phase, subject) = match filter {
                        Access::Lua => (LuaPhase::Access, subject.clone()),
                        Access::LuaContent => (LuaPhase::Content, subject.clone()),
                        _ => (LuaPhase::Rewrite, None),
                    };
                    if plan.route.request_buffering {
                        // `ngx.req.get_body_data` sees the body, as with
                        // `lua_need_request_body on`.
                        Box::pin(self.buffer_body(&plan.route, req)).await?;
                    }
                    // A call that does not wait makes no future (`lua_begin`).
                    if let Some(waiting) = self.lua_begin(phase, req, subject)? {
                        Box::pin(self.lua_finish(waiting, req)).await?;
                    }
                }
                Access::Acl => {
                    if !plan.route.acl.permits(self.client) {
                        self.listener.metrics.denied();
                        return Err(Stop::Fail(Failure::Forbidden));
                    }
                }
                Access::CorsPreflight => self.cors_preflight(&plan.route, req)?,
                Access::Auth(auth) => {
                    // Boxed: only authenticated routes pay for its future in the request's.
                    let found = Box::pin(self.authenticate(auth, req)).await;
                    subject = Some(found.map_err(|s| with_cors(&plan.route, req, s))?);
                }
                Access::RateLimit(limiter) => self
                    .rate_limit(limiter, req, subject.as_deref())
                    .await
                    .map_err(|s| with_cors(&plan.route, req, s))?,
                // Boxed: only WAF routes carry its future.
                Access::Waf(firewall) => Box::pin(self.firewall(firewall, req)).await?,
            }
        }
        Ok(())
    }

    /// The route's query credentials (`keys.query`, `jwt.token_from = "query:NAME"`) masked
    /// in the target the log keeps, which the access log, the request log, shipped lines and
    /// the trace's `url.query` all read (`sluice_auth::query`).
    fn mask_query_credentials(&mut self, names: &[String]) {
        if let Some(masked) = sluice_auth::query::mask(&self.done.entry.path, names) {
            self.done.entry.path = masked;
        }
    }

    /// Filter `CorsPreflight` of phase `access`: a preflight from any origin is answered
    /// here (the browser decides from the headers whether its origin may go on).
    fn cors_preflight(&self, route: &Route, req: &Request<ClientBody>) -> Flow<()> {
        let Some(cors) = &route.cors else {
            return Ok(());
        };
        if !sluice_auth::cors::is_preflight(req.method(), req.headers()) {
            return Ok(());
        }
        let (headers, _allowed) = sluice_auth::cors::preflight(cors, req.headers());
        Err(Stop::Answer(Box::new((
            StatusCode::NO_CONTENT,
            headers,
            Bytes::new(),
        ))))
    }

    /// Filter `Auth` of phase `access`: the identity's subject (returned, for a limit per
    /// subject) and headers go on the request sent upstream, after any copy the client sent
    /// of them is removed.
    async fn authenticate(
        &mut self,
        auth: &sluice_auth::Authenticator,
        req: &mut Request<ClientBody>,
    ) -> Flow<Arc<str>> {
        if auth
            .credential_headers()
            .any(|h| req.headers().get_all(h).iter().nth(1).is_some())
        {
            self.done.entry.refused = Some("duplicate_credential");
            return Err(Stop::Fail(Failure::BadRequest));
        }
        let (parts, uri) = (req.headers(), req.uri());
        let part =
            |k: &sluice_config::HashKey| crate::upstreams::request_key::key_value(k, uri, parts);
        let cert = self
            .conn
            .tls
            .as_ref()
            .and_then(|t| t.client_cert.as_deref())
            .filter(|c| c.verified);
        let presented = sluice_auth::Presented {
            client_cert: cert.map(|c| sluice_auth::PresentedCert {
                subject: &c.subject,
                sans: &c.sans,
            }),
            method: req.method(),
            uri,
            headers: parts,
            host: &self.host,
            https: self.listener.tls.is_some(),
            client: self.client,
            part: &part,
        };
        let verdict = auth.authenticate(&presented).await;
        let cfg = &auth.config;
        if !cfg.forward_credential {
            strip_query_credentials(req, auth.query_credentials());
        }
        let headers = req.headers_mut();
        if let Some(h) = &cfg.subject_header {
            headers.remove(h);
        }
        for name in auth.identity_headers() {
            headers.remove(name);
        }
        if self.listener.config.underscores_in_headers {
            // A listener that keeps `_` names: the client's `X_Auth_Subject` would go on
            // beside the subject set below (`early` dropped the gateway-wide ones).
            vouched::drop_spellings(
                headers,
                cfg.subject_header.iter().chain(auth.identity_headers()),
            );
        }
        match verdict {
            Ok(id) => {
                if let (Some(h), Ok(v)) = (&cfg.subject_header, HeaderValue::from_str(&id.subject))
                {
                    headers.insert(h.clone(), v);
                }
                for (k, v) in id.headers {
                    headers.append(k, v);
                }
                if let Some(span) = &mut self.done.trace {
                    crate::request::trace::authenticated(span, &id.subject);
                }
                self.done.entry.subject = Some(id.subject.clone());
                Ok(id.subject)
            }
            Err(denial) => {
                self.done.entry.auth_refused = Some(denial.reason.name());
                let why = match denial.status {
                    StatusCode::UNAUTHORIZED => Failure::Unauthorized,
                    StatusCode::FORBIDDEN => Failure::AuthForbidden,
                    StatusCode::SERVICE_UNAVAILABLE => Failure::AuthBusy,
                    _ => Failure::AuthUnavailable,
                };
                Err(Stop::FailWith(why, Box::new(denial.headers)))
            }
        }
    }

    /// Filter `RateLimit` of phase `access`.
    async fn rate_limit(
        &self,
        limiter: &RateLimiter,
        req: &Request<ClientBody>,
        subject: Option<&str>,
    ) -> Flow<()> {
        let key = limiter.key(req.uri(), req.headers(), self.client, subject);
        // Boxed: only rate-limited routes pay for the (Redis-capable) check's future.
        match Box::pin(limiter.check(key)).await {
            Verdict::Pass => Ok(()),
            Verdict::Delay(wait) => {
                tokio::time::sleep(wait).await;
                Ok(())
            }
            Verdict::Reject(retry) => {
                let mut headers = HeaderMap::new();
                limiter.reject_headers(retry, &mut headers);
                Err(Stop::FailWith(Failure::TooManyRequests, Box::new(headers)))
            }
        }
    }

    /// Phase `answer`: the route's redirect or fixed response, with its response header
    /// edits, instead of going upstream.
    pub(crate) fn answer(&self, route: &Route, req: &Request<ClientBody>) -> Flow<()> {
        let Some(a) = &route.answer else {
            return Ok(());
        };
        let vars = self.vars(req);
        let (status, mut headers, body) = policy::answer(a, &vars);
        policy::edit_headers(&route.response_headers, &mut headers, &vars);
        Err(Stop::Answer(Box::new((status, headers, body))))
    }

    /// Phase `upstream choice`: the declared body within the route's or the listener's limit
    /// (413), then the
    /// route's upstream group, by its traffic split where it has one.
    pub(crate) fn upstream(&self, route: &Route, req: &Request<ClientBody>) -> Flow<usize> {
        let declared = req
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        let limit = route
            .max_request_body
            .unwrap_or(self.listener.config.max_body_bytes);
        if declared.is_some_and(|n| n > limit) {
            return Err(Stop::Fail(Failure::BodyTooLarge));
        }
        split::upstream_for(route, req.uri(), req.headers(), self.client)
            .ok_or(Stop::Fail(Failure::NoRoute))
    }

    /// Phase `request body`, on a route with `request_buffering`: the whole body read
    /// within the route's limit (413 beyond it, 400 when the client stops sending), then sent
    /// upstream with its `Content-Length` (NGINX's `proxy_request_buffering on`).
    pub(crate) async fn buffer_body(
        &self,
        route: &Route,
        req: &mut Request<ClientBody>,
    ) -> Flow<()> {
        use http_body::Body as _;
        if !route.request_buffering || req.body().is_end_stream() {
            return Ok(());
        }
        let limit = route
            .max_request_body
            .unwrap_or(self.listener.config.max_body_bytes);
        let body = std::mem::replace(req.body_mut(), ClientBody::Empty);
        let limited =
            http_body_util::Limited::new(body, usize::try_from(limit).unwrap_or(usize::MAX));
        let bytes = match limited.collect().await {
            Ok(c) => c.to_bytes(),
            Err(e) if e.is::<http_body_util::LengthLimitError>() => {
                return Err(Stop::Fail(Failure::BodyTooLarge));
            }
            Err(_) => return Err(Stop::Fail(Failure::BadRequest)),
        };
        set_buffered(req, bytes);
        Ok(())
    }

    /// What a route's templates (answers, header edits) may refer to.
    pub(crate) fn vars<'r>(&'r self, req: &'r Request<ClientBody>) -> policy::Vars<'r> {
        policy::Vars {
            host: policy::host_name(&self.host),
            uri: req.uri(),
            https: self.listener.tls.is_some(),
            client: self.client,
            request_id: self.done.request_id.as_ref(),
        }
    }

    /// The response that ends the request at `stop`: logged, counted and traced when its
    /// body ends, like every response.
    pub(crate) fn stop(self, stop: Stop) -> Response<ProxyBody> {
        stopped(self.done, stop)
    }
}

/// The response that ends a request at `stop` (before it went upstream, or instead of the
/// upstream's response).
pub(crate) fn stopped(done: Done, stop: Stop) -> Response<ProxyBody> {
    match stop {
        Stop::Fail(why) => failure(done, why),
        Stop::FailWith(why, headers) => {
            let mut resp = failure(done, why);
            resp.headers_mut().extend(*headers);
            resp
        }
        Stop::Answer(answer) => {
            let (status, headers, body) = *answer;
            respond(done, status, headers, body)
        }
        Stop::Scripted(resp) => {
            let (parts, body) = resp.into_parts();
            respond_with(done, parts.status, parts.headers, body)
        }
    }
}

/// `req`'s body replaced by `bytes`, read whole: sent on as one piece with its
/// `Content-Length` (NGINX's request buffering), the client's framing dropped.
pub(crate) fn set_buffered(req: &mut Request<ClientBody>, bytes: Bytes) {
    let headers = req.headers_mut();
    headers.remove(header::TRANSFER_ENCODING);
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(bytes.len()));
    *req.body_mut() = ClientBody::Buffered(bytes);
}

/// `req`'s target without the query arguments in `names` (a route's query credentials,
/// unless it has `forward_credential`), its path as it is: the upstream never sees them.
fn strip_query_credentials(req: &mut Request<ClientBody>, names: &[String]) {
    let uri = req.uri();
    let Some(kept) = uri
        .query()
        .and_then(|q| sluice_auth::query::strip(q, names))
    else {
        return;
    };
    let target = with_query(uri.path(), &kept);
    let mut parts = uri.clone().into_parts();
    // Arguments removed from a valid target leave a valid one.
    parts.path_and_query = http::uri::PathAndQuery::try_from(target).ok();
    let Ok(stripped) = http::Uri::from_parts(parts) else {
        return;
    };
    // The client's own target, kept for `forward_path = "original"`, loses them too (the
    // query is the same in both: normalization leaves it as it came).
    let original = crate::request::path::original_target(req.uri(), req.extensions())
        .map(|pq| pq.path().to_owned());
    *req.uri_mut() = stripped;
    if let Some(path) = original {
        let target = with_query(&path, &kept);
        let normalized = req.uri().path_and_query().cloned();
        if let (Ok(sent), Some(normalized), Some(slot)) = (
            http::uri::PathAndQuery::try_from(target),
            normalized,
            req.extensions_mut()
                .get_mut::<crate::request::path::OriginalTarget>(),
        ) {
            slot.original = sent;
            slot.normalized = normalized;
        }
    }
}

/// `path` with the query `kept` (none when it is empty).
fn with_query(path: &str, kept: &str) -> String {
    match kept {
        "" => path.to_owned(),
        kept => format!("{path}?{kept}"),
    }
}

/// `stop` with the route's CORS response headers (`[route.cors]`): a page on an allowed
/// origin reads the gateway's own 401 or 429 as it reads the upstream's answers.
fn with_cors(route: &Route, req: &Request<ClientBody>, stop: Stop) -> Stop {
    let Some(cors) = &route.cors else {
        return stop;
    };
    let origin = req.headers().get(header::ORIGIN);
    match stop {
        Stop::Fail(why) => {
            let mut headers = HeaderMap::new();
            sluice_auth::cors::on_response(cors, origin, &mut headers);
            Stop::FailWith(why, Box::new(headers))
        }
        Stop::FailWith(why, mut headers) => {
            sluice_auth::cors::on_response(cors, origin, &mut headers);
            Stop::FailWith(why, headers)
        }
        answer @ (Stop::Answer(_) | Stop::Scripted(_)) => answer,
    }
}

/// A response the gateway makes itself (a route's redirect or fixed response).
pub(crate) fn respond(
    done: Done,
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
) -> Response<ProxyBody> {
    respond_with(done, status, headers, Full::new(body))
}

/// [`respond`] with a body of any kind (a script's answer through its `body_filter`).
fn respond_with<B>(
    mut done: Done,
    status: StatusCode,
    headers: HeaderMap,
    body: B,
) -> Response<ProxyBody>
where
    B: http_body::Body<Data = Bytes> + Send + Sync + 'static,
    B::Error: Into<crate::body::BoxError>,
{
    done.entry.status = status.as_u16();
    let id = done.request_id.clone();
    let mut resp = Response::new(TrackedBody::new(body, done).boxed());
    *resp.status_mut() = status;
    *resp.headers_mut() = headers;
    if let Some(id) = id {
        resp.headers_mut().insert(policy::X_REQUEST_ID, id);
    }
    resp
}

/// The authority of the request target, else its `Host`; empty when it has neither.
fn host_of(req: &Request<ClientBody>) -> String {
    req.uri()
        .authority()
        .map(|a| a.as_str().to_owned())
        .or_else(|| {
            req.headers()
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
                .map(str::to_owned)
        })
        .unwrap_or_default()
}

/// The access log's entry for `req` as the connection and the request line give it (the
/// client, host and request ID are filled in by `RequestCtx::new`).
#[inline(always)]
fn entry(
    conn: &ConnCtx,
    listener: &ListenerCtx,
    req: &Request<ClientBody>,
    start: Instant,
) -> Box<Entry> {
    let tls = conn.tls.as_ref();
    Box::new(Entry {
        time: Some(crate::clock::wall_at(start)),
        listener: listener.name.clone(),
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
    })
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

/// A method's name for the log: borrowed for the standard ones.
pub(crate) fn method_name(m: &http::Method) -> std::borrow::Cow<'static, str> {
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

    /// A `Flow` sits in the request's future, which an HTTP/2 stream moves whole: a `Stop`
    /// with its payloads inline (a `HeaderMap`, a body) made every phase's result ~140 bytes.
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

    /// The credential leaves the target, the rest of the query keeps its order, and the path
    /// (and an absolute form's scheme and authority) stays as it was.
    #[test]
    fn a_query_credential_leaves_the_target_and_the_rest_stays() {
        let names = ["api_key".to_owned()];
        let strip = |target: &str| {
            let mut req = Request::get(target).body(ClientBody::Empty).unwrap();
            strip_query_credentials(&mut req, &names);
            req.uri().to_string()
        };
        assert_eq!(strip("/a%2Fb/c?x=1&api_key=k&y=2"), "/a%2Fb/c?x=1&y=2");
        assert_eq!(strip("/p?api_key=k"), "/p");
        assert_eq!(strip("/p?x=1"), "/p?x=1");
        assert_eq!(
            strip("https://api.test:8443/p?api_key=k&x"),
            "https://api.test:8443/p?x"
        );
    }

    #[test]
    fn a_stop_is_two_words() {
        assert!(
            std::mem::size_of::<Stop>() <= 16,
            "{}",
            std::mem::size_of::<Stop>()
        );
        assert!(std::mem::size_of::<Flow<(&RoutePlan, usize)>>() <= 24);
    }
}
