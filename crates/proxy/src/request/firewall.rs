//! Filter `Waf` of phase `access` (`[route.waf]`): the request's body read within the
//! route's limit, its head and body inspected on the WAF's threads (`sluice-waf`), and the
//! verdict applied: forwarded (matches recorded), refused with the rule's status and the
//! request ID, or, with the WAF saturated, forwarded uninspected or refused (503), counted
//! either way. Nothing reaches the upstream before the verdict. With `inspect_response` the
//! request's transaction is kept in `Done` for its response (`response_inspection`).

use crate::access_log::WafRecord;
use crate::exchange::client_body::ClientBody;
use crate::request::error::Failure;
use crate::request::phases::{Flow, RequestCtx, Stop, set_buffered};
use bytes::{Bytes, BytesMut};
use http::{HeaderMap, HeaderValue, Request, StatusCode, Version, header};
use http_body_util::BodyExt as _;
use sluice_config::{WafBodyOverLimit, WafMode};
use sluice_waf::{Outcome, RequestFacts, RouteFirewall, Verdict};
use std::net::SocketAddr;
use std::sync::Arc;

impl RequestCtx<'_> {
    /// Filter `Waf`: inspect, then forward or stop.
    pub(crate) async fn firewall(
        &mut self,
        firewall: &Arc<RouteFirewall>,
        req: &mut Request<ClientBody>,
    ) -> Flow<()> {
        // The fields as the client sent them: reading the body whole replaces its
        // `Transfer-Encoding` with a `Content-Length` for the upstream, and rules such as
        // CRS's 920171 (a GET with a chunked body) look for the former.
        let headers = head_fields(req, &self.host);
        let (body, over_limit) = match read_body(firewall, req).await? {
            ReadBody::Whole(body) => (body, false),
            ReadBody::Partial(body) => (body, true),
            ReadBody::Refused => {
                self.done.entry.waf = Some(over_limit_record("block", Verdict::default()));
                return Err(Stop::Fail(Failure::BodyTooLarge));
            }
        };
        let facts = RequestFacts {
            client: SocketAddr::new(self.client, self.conn.peer.port()),
            server: self.conn.local,
            method: req.method().clone(),
            // The target as the client sent it too (ModSecurity-nginx passes NGINX's
            // unparsed URI: CRS's transformations decode it, and an evasion the path's
            // normalization undid is still there to be scored); the route it runs for was
            // chosen by the normalized path.
            target: crate::request::path::original_target(req.uri(), req.extensions())
                .or(req.uri().path_and_query())
                .map_or("/", |p| p.as_str())
                .to_string(),
            version: version(req.version()),
            headers,
            body,
            id: self
                .done
                .request_id
                .as_ref()
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string(),
        };
        let outcome = firewall.check(facts).await;
        // Mode `detect` with `body_over_limit = "reject"`: the limit would have refused the
        // body, so the request is recorded as a detection even where no rule matched.
        let limit_detected =
            over_limit && firewall.settings.body_over_limit == WafBodyOverLimit::Reject;
        self.verdict(outcome, limit_detected)
    }

    /// Applies the WAF's outcome: the request's record, and forward or stop.
    fn verdict(&mut self, outcome: Outcome, limit_detected: bool) -> Flow<()> {
        match outcome {
            Outcome::Pass(verdict, pending) => {
                if limit_detected {
                    self.done.entry.waf = Some(over_limit_record("detect", verdict));
                } else if !verdict.matches.is_empty() {
                    self.done.entry.waf = Some(WafRecord::new("detect", verdict));
                }
                self.done.waf = pending;
                Ok(())
            }
            Outcome::Block(status, verdict) => {
                let redirect = verdict.intervention.as_ref().and_then(|i| i.url.clone());
                self.done.entry.waf = Some(WafRecord::new("block", verdict));
                Err(blocked(self.done.request_id.as_ref(), status, redirect))
            }
            Outcome::Overloaded(true) => {
                self.done.entry.waf = Some(WafRecord::new("open", Verdict::default()));
                Ok(())
            }
            Outcome::Overloaded(false) => {
                self.done.entry.waf = Some(WafRecord::new("closed", Verdict::default()));
                Err(Stop::Fail(Failure::WafUnavailable))
            }
        }
    }
}

/// A record whose reason is the body limit (`reason=body_over_limit`): a 413 the WAF
/// answered, or, in mode `detect`, a body forwarded that the limit would have refused.
fn over_limit_record(action: &'static str, verdict: Verdict) -> Box<WafRecord> {
    let mut record = WafRecord::new(action, verdict);
    record.reason = Some("body_over_limit");
    record
}

/// The answer to a request (or a response) a rule refused: the rule's status (a redirect's
/// `Location` where the rule redirects) and a body that names the request ID for support.
pub(crate) fn blocked(
    request_id: Option<&HeaderValue>,
    status: u16,
    redirect: Option<String>,
) -> Stop {
    let status = StatusCode::from_u16(status)
        .ok()
        .filter(|s| s.is_client_error() || s.is_server_error() || s.is_redirection())
        .unwrap_or(StatusCode::FORBIDDEN);
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    if let Some(url) = redirect.and_then(|u| HeaderValue::try_from(u).ok())
        && status.is_redirection()
    {
        headers.insert(header::LOCATION, url);
    }
    let id = request_id.and_then(|v| v.to_str().ok()).unwrap_or("-");
    let body = format!("request blocked by the web application firewall; request ID {id}\n");
    Stop::Answer(Box::new((status, headers, Bytes::from(body))))
}

/// A request's body as read for the rules.
enum ReadBody {
    /// Within `request_body_limit`: read whole, sent on as one piece.
    Whole(Bytes),
    /// Over the limit and forwarded: its first `request_body_limit` bytes, which the rules
    /// see (the whole body goes upstream).
    Partial(Bytes),
    /// Over the limit and refused (413).
    Refused,
}

/// The request's body for the rules: read whole when it fits `request_body_limit` (then sent
/// on as one piece with its `Content-Length`, NGINX's buffering). A larger one is refused
/// (413) with `body_over_limit = "reject"` in mode `block`; otherwise inspected up to the
/// limit and forwarded whole: with `"inspect_partial"`, and in mode `detect` whatever the
/// setting, as detection never refuses what a rule would not (ModSecurity's `DetectionOnly`
/// does not enforce `SecRequestBodyLimitAction Reject` either). Read from the connection as
/// it arrives: a slow body waits in this request's task, never on the loop.
async fn read_body(firewall: &RouteFirewall, req: &mut Request<ClientBody>) -> Flow<ReadBody> {
    use http_body::Body as _;
    if req.body().is_end_stream() {
        return Ok(ReadBody::Whole(Bytes::new()));
    }
    let settings = &firewall.settings;
    let limit = usize::try_from(settings.request_body_limit).unwrap_or(usize::MAX);
    let mut body = std::mem::replace(req.body_mut(), ClientBody::Empty);
    let mut read = BytesMut::new();
    let over = loop {
        match body.frame().await {
            None => break false,
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    read.extend_from_slice(&data);
                    if read.len() > limit {
                        break true;
                    }
                }
            }
            Some(Err(_)) => return Err(Stop::Fail(Failure::BadRequest)),
        }
    };
    let read = read.freeze();
    if !over {
        set_buffered(req, read.clone());
        return Ok(ReadBody::Whole(read));
    }
    let refuse =
        settings.body_over_limit == WafBodyOverLimit::Reject && settings.mode == WafMode::Block;
    firewall.stats.body_over_limit(refuse);
    if refuse {
        return Ok(ReadBody::Refused);
    }
    let inspected = read.slice(..limit);
    *req.body_mut() = ClientBody::Prefixed(read, Box::new(body));
    Ok(ReadBody::Partial(inspected))
}

/// The request's header fields as the rules see them, with `Host` for HTTP/2 and HTTP/3
/// (whose `:authority` is not a field), as ModSecurity-nginx passes NGINX's `Host`. An
/// HTTP/1.0 request without `Host` stays without one (CRS's rule 920280 looks for that).
fn head_fields(req: &Request<ClientBody>, host: &str) -> HeaderMap {
    let mut headers = req.headers().clone();
    if matches!(req.version(), Version::HTTP_2 | Version::HTTP_3)
        && !headers.contains_key(header::HOST)
        && let Ok(v) = HeaderValue::from_str(host)
    {
        headers.insert(header::HOST, v);
    }
    headers
}

/// The HTTP version as ModSecurity-nginx passes it.
fn version(v: Version) -> &'static str {
    match v {
        Version::HTTP_2 => "2.0",
        Version::HTTP_3 => "3.0",
        Version::HTTP_10 => "1.0",
        Version::HTTP_09 => "0.9",
        _ => "1.1",
    }
}
