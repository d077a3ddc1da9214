//! The end of a request: its bookkeeping (access log line, metrics, the connection's count)
//! when its response body is done or dropped, and the gateway's own short answer when it
//! failed before reaching a server. Shared by the handler and the proxying phases.

use crate::access_log::{AccessLog, Entry};
use crate::body::{OnDone, ProxyBody, TrackedBody};
use crate::conn_state::ConnState;
use crate::request::error::Failure;
use crate::request::policy;
use crate::upstreams::upstream::ActiveGuard;
use bytes::Bytes;
use http::Response;
use http::header::{self, HeaderValue};
use http_body_util::{BodyExt, Full};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Finishes a request's bookkeeping when its response body is done or dropped.
///
/// Moved by value through the request's phases and into its response body, so it is kept
/// small: the access-log entry (384 bytes) is boxed, else every phase's future and every
/// move would carry it (each async fn keeps its arguments for its whole life).
pub(crate) struct Done {
    pub(crate) entry: Box<Entry>,
    pub(crate) start: Instant,
    /// The request body's bytes, counted as they go upstream (`None` until a body does).
    pub(crate) bytes_in: Option<Arc<AtomicU64>>,
    pub(crate) log: AccessLog,
    pub(crate) state: Arc<ConnState>,
    pub(crate) metrics: Arc<crate::ProxyMetrics>,
    /// Returned in `X-Request-Id` on every response, errors included.
    pub(crate) request_id: Option<HeaderValue>,
    /// A gRPC call: the gateway's own failures answer as gRPC errors.
    pub(crate) grpc: bool,
    pub(crate) _server: Option<ActiveGuard>,
    /// The request's span (`[tracing]`), ended with the response.
    pub(crate) trace: Option<Box<sluice_trace::RequestSpan>>,
    /// The request's Lua (a route with `[route.lua]`): its `log` script runs at the end.
    pub(crate) lua: Option<Arc<sluice_lua::RequestLua>>,
    /// The request's WAF transaction, kept for its response (`[route.waf]`
    /// `inspect_response`) until phase `upstream_response` takes it.
    pub(crate) waf: Option<Box<sluice_waf::PendingResponse>>,
}

impl OnDone for Done {
    fn done(&mut self, bytes_out: u64, complete: bool) {
        self.entry.bytes_out = bytes_out;
        self.entry.bytes_in = self
            .bytes_in
            .as_ref()
            .map_or(0, |n| n.load(Ordering::Relaxed));
        self.entry.duration = self.start.elapsed();
        self.entry.aborted = !complete;
        if let Some(mut span) = self.trace.take() {
            // `url.query` from the log's target, a route's query credentials masked
            // (`sluice_auth::query`): only routing told which they are.
            if let (Some(s), Some((_, query))) = (span.recording(), self.entry.path.split_once('?'))
            {
                s.str("url.query", query);
            }
            span.end(self.entry.status, std::time::SystemTime::now());
        }
        self.metrics.response(
            self.entry.status,
            self.entry.bytes_in,
            bytes_out,
            self.entry.duration,
        );
        // Borrowed: the entry goes with `Done`'s box (taking it moved 384 bytes out and
        // wrote a default in their place).
        self.log.log(&self.entry);
        if let Some(lua) = self.lua.take()
            && lua.scripts().has(sluice_config::LuaPhase::Log)
        {
            lua.run_log(self.entry.status, bytes_out);
        }
        self.state.request_finished();
    }
}

/// NGINX's page for a 500, signed as Sluice's pages are (`sluice_lua`'s `error_page`).
const SCRIPT_FAILED_PAGE: &str = "<html>\r\n<head><title>500 Internal Server Error</title></head>\r\n<body>\r\n<center><h1>500 Internal Server Error</h1></center>\r\n<hr><center>sluice</center>\r\n</body>\r\n</html>\r\n";

/// A short response for a request that failed before (or instead of) reaching a server.
pub(crate) fn failure(mut done: Done, why: Failure) -> Response<ProxyBody> {
    let status = why.status();
    done.entry.status = status.as_u16();
    let http1 = done.entry.protocol.starts_with("HTTP/1");
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
    // A script's failure is answered with the page OpenResty sends for it (its clients,
    // and tests written for it, look for the status's words there).
    let (body, content_type) = match why {
        Failure::ScriptFailed => (SCRIPT_FAILED_PAGE, "text/html"),
        _ => (why.message(), "text/plain; charset=utf-8"),
    };
    let mut resp = Response::new(
        TrackedBody::new(Full::new(Bytes::from_static(body.as_bytes())), done).boxed(),
    );
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
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
