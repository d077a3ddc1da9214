//! The request path's side of `[route.lua]` (`sluice-lua` runs the scripts): the request's
//! Lua made at phase `access`, the `rewrite` and `access` scripts over the request's head,
//! `header_filter` on the upstream response's head and `body_filter` over its body. The
//! `log` script runs from `Done` when the response ends.

use crate::addresses::Addresses;
use crate::body::ProxyBody;
use crate::exchange::ClientBody;
use crate::request::error::Failure;
use crate::request::phases::{Flow, RequestCtx, Stop};
use crate::upstreams::dns::UpstreamSlot;
use crate::upstreams::upstream::UpstreamGroup;
use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Request, StatusCode, Version};
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use sluice_config::{LuaPhase, UpstreamProtocol};
use sluice_lua::{
    Facts, Fetched, Fetcher, Outbound, Outcome, RequestHead, RequestLua, RouteScripts, Started,
    Waiting,
};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

impl RequestCtx<'_> {
    /// The request's Lua, on the state of the thread it is on (once, at phase `access`).
    pub(crate) fn lua_start(&mut self, scripts: &Arc<RouteScripts>, req: &Request<ClientBody>) {
        if self.done.lua.is_some() {
            return;
        }
        let entry = &self.done.entry;
        let facts = Facts {
            route: scripts.route().clone(),
            client: entry.client.unwrap_or(self.conn.peer),
            local: self.conn.local,
            scheme: if self.listener.tls.is_some() {
                "https"
            } else {
                "http"
            },
            request_id: (!entry.request_id.is_empty()).then(|| entry.request_id.as_str().into()),
            // `ngx.var.request_uri` is the client's own target; kept apart only where the
            // path's normalization changed it (`request::path`).
            request_uri: req
                .extensions()
                .get::<crate::request::path::OriginalTarget>()
                .map(|t| t.original.as_str().into()),
            arrived: self.done.start,
        };
        let lua = scripts.request(facts);
        if !(scripts.has(LuaPhase::Rewrite)
            || scripts.has(LuaPhase::Access)
            || scripts.has(LuaPhase::Content))
        {
            lua.keep_head(req.method(), req.uri(), req.version());
        }
        self.done.lua = Some(lua);
    }

    /// Filters `LuaRewrite` and `LuaAccess`: the script over the request's head (and its
    /// body, on a route that buffers it: [`Self::buffer_body`] first); it may end the
    /// request with its own answer. A call that does not wait ends here, with no future
    /// made for it (the common one); one that waits (an outbound request, a sleep) is
    /// returned for [`Self::lua_finish`].
    pub(crate) fn lua_begin(
        &self,
        phase: LuaPhase,
        req: &mut Request<ClientBody>,
        subject: Option<Arc<str>>,
    ) -> Flow<Option<Waiting>> {
        let Some(lua) = &self.done.lua else {
            return Ok(None);
        };
        let body = match req.body() {
            ClientBody::Buffered(b) => Some(b.clone()),
            _ => None,
        };
        let mut head = RequestHead {
            request: req,
            body,
            subject,
        };
        match lua.start_request(phase, &mut head) {
            Started::Done(outcome) => script_flow(lua, outcome, req).map(|()| None),
            Started::Waiting(waiting) => Ok(Some(waiting)),
        }
    }

    /// Goes on with a call that waits, to its end.
    pub(crate) async fn lua_finish(
        &self,
        waiting: Waiting,
        req: &mut Request<ClientBody>,
    ) -> Flow<()> {
        let Some(lua) = &self.done.lua else {
            return Ok(());
        };
        let fetcher = ScriptFetcher {
            upstreams: &self.listener.upstreams,
            at: Addresses {
                client: self.conn.peer,
                local: self.conn.local,
            },
        };
        let outcome = lua.finish_request(waiting, req, &fetcher).await;
        script_flow(lua, outcome, req)
    }
}

/// What a request phase's outcome means for the request. A script's own answer goes
/// through the route's `header_filter` and `body_filter`, as NGINX's filters run on a
/// `content_by_lua` or `ngx.exit` response (the gateway's own answers, a 401 or a 429, do
/// not).
fn script_flow(lua: &Arc<RequestLua>, outcome: Outcome, req: &mut Request<ClientBody>) -> Flow<()> {
    let (status, headers, body) = match outcome {
        Outcome::Continue => return Ok(()),
        Outcome::Failed => return Err(Stop::Fail(Failure::ScriptFailed)),
        Outcome::Respond(status, headers, body) => answer(status, headers, body),
    };
    let scripts = lua.scripts();
    if !scripts.has(LuaPhase::HeaderFilter)
        && !scripts.has(LuaPhase::BodyFilter)
        && !scripts.has(LuaPhase::Log)
    {
        return Err(Stop::Answer(Box::new((status, headers, body))));
    }
    let (mut parts, ()) = http::Response::new(()).into_parts();
    parts.status = status;
    parts.headers = headers;
    let body = http_body_util::Full::new(body)
        .map_err(|never| match never {})
        .boxed();
    match lua_response(lua, req.headers_mut(), &mut parts, body) {
        Ok(body) => Err(Stop::Scripted(Box::new(http::Response::from_parts(
            parts, body,
        )))),
        Err(_) => Err(Stop::Fail(Failure::ScriptFailed)),
    }
}

/// What sends a script's outbound requests (`resty.http`): the gateway's upstream groups,
/// their pools, balancing, health and TLS. The URI's authority names the group (`http://
/// auth/check`) or one of its servers by address or configured name (`http://10.0.0.5:8080/
/// check`: that server while it is up, else the group's choice); anything else is refused
/// with what to add, since the gateway opens connections only to what its configuration
/// names. Scheme and protocol are the group's (`[upstream.tls]`, `protocol`).
struct ScriptFetcher<'a> {
    upstreams: &'a [Arc<UpstreamSlot>],
    at: Addresses,
}

impl ScriptFetcher<'_> {
    /// The group and preferred server for `authority`.
    fn find(&self, authority: &str) -> Option<(Arc<UpstreamGroup>, Option<usize>)> {
        let groups = self.upstreams.iter().map(|s| s.group());
        let mut by_server = None;
        for group in groups {
            if group.config.name == authority {
                return Some((group, None));
            }
            if by_server.is_none()
                && let Some(i) = group
                    .servers
                    .iter()
                    .position(|s| s.name == authority || s.addr.to_string() == authority)
            {
                by_server = Some((group, Some(i)));
            }
        }
        by_server
    }
}

impl Fetcher for ScriptFetcher<'_> {
    async fn fetch(&self, call: Outbound) -> Result<Fetched, String> {
        let authority = call.uri.authority().map_or("", |a| a.as_str());
        let Some((group, prefer)) = self.find(authority) else {
            return Err(format!(
                "{authority} is not an [[upstream]] nor one of its servers: add an upstream for it and call http://NAME/..."
            ));
        };
        let deadline = tokio::time::Instant::now() + call.timeout;
        let Outbound {
            method,
            uri,
            mut headers,
            body,
            max_body,
            ..
        } = call;
        if !body.is_empty() || !matches!(method, Method::GET | Method::HEAD) {
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
        }
        let exchange = async {
            let server = group
                .acquire(0, &[], prefer)
                .await
                .map_err(|_| format!("no server available in upstream {}", group.config.name))?;
            let mut req = Request::new(
                http_body_util::Full::new(body)
                    .map_err(|never| match never {})
                    .boxed(),
            );
            *req.method_mut() = method;
            *req.uri_mut() = uri.path_and_query().map_or_else(
                || http::Uri::from_static("/"),
                |pq| http::Uri::from(pq.clone()),
            );
            *req.headers_mut() = headers;
            *req.version_mut() = match group.config.protocol {
                UpstreamProtocol::Http1 => Version::HTTP_11,
                UpstreamProtocol::H2 => Version::HTTP_2,
            };
            let resp = group
                .send(server.index, req, None, self.at)
                .await
                .map_err(|e| format!("upstream {}: {e}", group.config.name))?;
            let (parts, body) = resp.into_parts();
            let body = read_whole(body, max_body).await?;
            drop(server);
            Ok(Fetched {
                status: parts.status,
                headers: parts.headers,
                body,
            })
        };
        tokio::time::timeout_at(deadline, exchange)
            .await
            .unwrap_or_else(|_| Err("timeout".into()))
    }
}

/// A response body read whole, refused past `max` bytes.
async fn read_whole(mut body: ProxyBody, max: usize) -> Result<Bytes, String> {
    let mut all = bytes::BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| format!("reading the response: {e}"))?;
        if let Ok(data) = frame.into_data() {
            if all.len() + data.len() > max {
                return Err(format!("response body over {max} bytes ([lua] max_memory)"));
            }
            all.extend_from_slice(&data);
        }
    }
    Ok(all.freeze())
}

/// A script's answer as it goes out: `text/plain`, NGINX's default type, where it has a
/// body and the script set no type.
fn answer(
    status: StatusCode,
    mut headers: HeaderMap,
    body: Bytes,
) -> (StatusCode, HeaderMap, Bytes) {
    if !body.is_empty() && !headers.contains_key(header::CONTENT_TYPE) {
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    }
    (status, headers, body)
}

/// `header_filter` and `body_filter` on an upstream response or a script's answer (the
/// headers a `rewrite` or `access` script set first, on a request that went upstream):
/// `Err` when the header filter failed (the response becomes a 500). With a body filter the length is no longer
/// known (`Content-Length` goes; the body is chunked or framed by the protocol).
pub(crate) fn lua_response(
    lua: &Arc<RequestLua>,
    request_headers: &mut HeaderMap,
    parts: &mut http::response::Parts,
    body: ProxyBody,
) -> Result<ProxyBody, ProxyBody> {
    let scripts = lua.scripts();
    lua.add_script_headers(&mut parts.headers);
    if scripts.has(LuaPhase::HeaderFilter)
        && !lua.run_header_filter(request_headers, &mut parts.status, &mut parts.headers)
    {
        return Err(body);
    }
    if scripts.has(LuaPhase::Log) {
        lua.keep_for_log(request_headers);
    }
    if !scripts.has(LuaPhase::BodyFilter) {
        return Ok(body);
    }
    parts.headers.remove(header::CONTENT_LENGTH);
    Ok(BodyExt::boxed(LuaBody {
        inner: body,
        lua: lua.clone(),
        ended: false,
    }))
}

/// A response body through the route's `body_filter`: each data frame is the script's
/// `ngx.arg[1]`; the end is one more call with an empty piece and `ngx.arg[2]` true. A script
/// that sets `ngx.arg[2]` ends the body there; one that fails cuts it short.
struct LuaBody {
    inner: ProxyBody,
    lua: Arc<RequestLua>,
    ended: bool,
}

impl Body for LuaBody {
    type Data = Bytes;
    type Error = <ProxyBody as Body>::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        loop {
            if self.ended {
                return Poll::Ready(None);
            }
            let (chunk, eof) = match std::task::ready!(Pin::new(&mut self.inner).poll_frame(cx)) {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => (data, false),
                    // Trailers pass as they are.
                    Err(frame) => return Poll::Ready(Some(Ok(frame))),
                },
                Some(Err(e)) => return Poll::Ready(Some(Err(e))),
                None => (Bytes::new(), true),
            };
            match self.lua.run_body_filter(chunk, eof) {
                Some((out, end)) => {
                    self.ended = eof || end;
                    if !out.is_empty() {
                        return Poll::Ready(Some(Ok(Frame::data(out))));
                    }
                }
                None => {
                    self.ended = true;
                    return Poll::Ready(Some(Err(Box::new(std::io::Error::other(
                        "the route's body_filter failed",
                    )))));
                }
            }
        }
    }
}
