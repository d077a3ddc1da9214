//! `[tracing]` on the request path: the SERVER span's attributes (HTTP semantic conventions),
//! the connection's TLS handshake as a span of its first sampled request, and a CLIENT span
//! per upstream attempt. Attributes are built only for sampled (recorded) requests.

use crate::exchange::ClientBody;
use crate::request::context::ConnCtx;
use crate::request::done::Done;
use http::{Method, Request, Version};
use sluice_trace::{ChildSpan, RequestSpan, SpanKind, Tracer};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;

/// A request's SERVER span, with its attributes when sampled.
pub(crate) fn server_span(
    tracer: &Tracer,
    conn: &ConnCtx,
    req: &Request<ClientBody>,
    host: &str,
    client: IpAddr,
    done: &Done,
) -> RequestSpan {
    let start = done.entry.time.unwrap_or_else(std::time::SystemTime::now);
    let mut span = tracer.server(req.headers(), req.method().as_str(), start);
    let Some(s) = span.recording() else {
        return span;
    };
    let (name, port) = split_host(host, conn.local.port());
    s.str("http.request.method", req.method().as_str())
        .str("url.path", req.uri().path())
        .str(
            "url.scheme",
            if conn.tls.is_some() { "https" } else { "http" },
        )
        .str("server.address", name)
        .int("server.port", i64::from(port))
        .display("client.address", client)
        .display("network.peer.address", conn.peer.ip())
        .str("network.protocol.version", protocol_version(req.version()));
    // `url.query` is set at the end (`done::Done`), from the target as the log keeps it: a
    // route's query credentials are masked there, and only routing tells which they are.
    if let Some(ua) = req
        .headers()
        .get(http::header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
    {
        s.str("user_agent.original", ua);
    }
    if !done.entry.request_id.is_empty() {
        s.str("sluice.request_id", &done.entry.request_id);
    }
    handshake_span(&span, conn);
    span
}

/// The connection's TLS handshake, once per connection, under the first sampled request
/// (what no gateway shows: whether it was resumed, where it ran, how long it took).
fn handshake_span(span: &RequestSpan, conn: &ConnCtx) {
    let Some(tls) = &conn.tls else { return };
    let Some((began, took)) = tls.handshake else {
        return;
    };
    if conn.state.handshake_traced.swap(true, Ordering::Relaxed) {
        return;
    }
    let Some(mut h) = span.child("TLS handshake", SpanKind::Internal, Some(began)) else {
        return;
    };
    h.bool("tls.resumed", tls.resumed)
        .str(
            "tls.protocol.version",
            tls.version.trim_start_matches("TLSv"),
        )
        .str("tls.cipher", tls.cipher)
        .str(
            "sluice.handshake.kind",
            if tls.resumed { "resumed" } else { "full" },
        )
        .bool("sluice.handshake.isolated", tls.isolated);
    if let Some(sni) = &tls.sni {
        h.str("tls.server.name", sni);
    }
    // The private-key operation: which offload engine signed, how long the operation waited
    // before it and how long it was there, and what it fell back from.
    if let Some(op) = &tls.key_operation {
        h.str("sluice.offload.engine", &op.engine)
            .int("sluice.offload.queued_us", op.queued.as_micros() as i64)
            .int("sluice.offload.engine_us", op.at_engine.as_micros() as i64);
        if !op.fallbacks.is_empty() {
            h.str("sluice.offload.fallbacks", &op.fallbacks.join(","));
        }
        if !op.routed_past.is_empty() {
            h.str("sluice.offload.routed_past", &op.routed_past.join(","));
        }
    }
    h.end_at(began + took);
}

/// Once routed: the span is named `{method} {route}` and carries `http.route` (the route's
/// name: Sluice's routes are prefixes, exact paths and patterns, not path templates).
pub(crate) fn routed(span: &mut RequestSpan, method: &Method, route: &str) {
    if let Some(s) = span.recording() {
        s.rename(format!("{} {route}", method.as_str()));
        s.str("http.route", route);
    }
}

/// Once authenticated: the span carries the subject (OpenTelemetry's `enduser.id`).
pub(crate) fn authenticated(span: &mut RequestSpan, subject: &str) {
    if let Some(s) = span.recording() {
        s.str("enduser.id", subject);
    }
}

/// The CLIENT span of one upstream attempt (the `n`th try, to `addr` of `upstream`).
pub(crate) fn attempt(
    span: Option<&RequestSpan>,
    method: &Method,
    upstream: &str,
    addr: SocketAddr,
    n: usize,
) -> Option<ChildSpan> {
    let mut c = span?.child("upstream", SpanKind::Client, None)?;
    c.str("http.request.method", method.as_str())
        .display("server.address", addr.ip())
        .int("server.port", i64::from(addr.port()))
        .str("sluice.upstream", upstream)
        .int("http.request.resend_count", (n.saturating_sub(1)) as i64);
    Some(c)
}

/// An attempt's outcome: the upstream's status, or why there was none.
pub(crate) fn attempt_done(span: Option<ChildSpan>, outcome: Result<u16, &'static str>) {
    let Some(mut span) = span else { return };
    match outcome {
        Ok(status) => {
            span.int("http.response.status_code", i64::from(status));
            if status >= 500 {
                span.fail_status(status);
            }
        }
        Err(why) => span.fail(why),
    }
    span.end();
}

fn protocol_version(v: Version) -> &'static str {
    match v {
        Version::HTTP_2 => "2",
        Version::HTTP_3 => "3",
        Version::HTTP_10 => "1.0",
        Version::HTTP_09 => "0.9",
        _ => "1.1",
    }
}

/// `host[:port]` (or `[v6]:port`): the name, and the port (the connection's when absent).
fn split_host(host: &str, default_port: u16) -> (&str, u16) {
    if let Some(rest) = host.strip_prefix('[') {
        if let Some((name, after)) = rest.split_once(']') {
            let port = after
                .strip_prefix(':')
                .and_then(|p| p.parse().ok())
                .unwrap_or(default_port);
            return (name, port);
        }
        return (host, default_port);
    }
    match host.rsplit_once(':') {
        Some((name, port)) => (name, port.parse().unwrap_or(default_port)),
        None => (host, default_port),
    }
}

#[cfg(test)]
mod tests {
    use super::split_host;

    #[test]
    fn host_and_port_are_split_as_the_server_address_wants() {
        assert_eq!(split_host("example.com", 443), ("example.com", 443));
        assert_eq!(split_host("example.com:8443", 443), ("example.com", 8443));
        assert_eq!(split_host("[::1]:8443", 443), ("::1", 8443));
        assert_eq!(split_host("[::1]", 443), ("::1", 443));
    }
}
