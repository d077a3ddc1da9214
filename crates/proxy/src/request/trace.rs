//! `[tracing]` on the request path: the SERVER span's attributes (HTTP semantic conventions),
//! the connection's TLS handshake as a span of its first sampled request, and a CLIENT span
//! per upstream attempt. Attributes are built only for sampled (recorded) requests.

use crate::http1::ClientBody;
use crate::request::context::ConnCtx;
use crate::request::done::Done;
use http::{Method, Request, Version};
use sluice_trace::{ChildSpan, KeyValue, RequestSpan, SpanKind, Tracer};
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
    if !span.is_recording() {
        return span;
    }
    let (name, port) = split_host(host, conn.local.port());
    let mut attrs = vec![
        KeyValue::new("http.request.method", req.method().as_str().to_owned()),
        KeyValue::new("url.path", req.uri().path().to_owned()),
        KeyValue::new(
            "url.scheme",
            if conn.tls.is_some() { "https" } else { "http" },
        ),
        KeyValue::new("server.address", name.to_owned()),
        KeyValue::new("server.port", i64::from(port)),
        KeyValue::new("client.address", client.to_string()),
        KeyValue::new("network.peer.address", conn.peer.ip().to_string()),
        KeyValue::new("network.protocol.version", protocol_version(req.version())),
    ];
    if let Some(q) = req.uri().query() {
        attrs.push(KeyValue::new("url.query", q.to_owned()));
    }
    if let Some(ua) = req
        .headers()
        .get(http::header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
    {
        attrs.push(KeyValue::new("user_agent.original", ua.to_owned()));
    }
    if !done.entry.request_id.is_empty() {
        attrs.push(KeyValue::new(
            "sluice.request_id",
            done.entry.request_id.clone(),
        ));
    }
    span.set(attrs);
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
    if let Some(mut h) = span.child("TLS handshake", SpanKind::Internal, Some(began)) {
        let mut attrs = vec![
            KeyValue::new("tls.resumed", tls.resumed),
            KeyValue::new(
                "tls.protocol.version",
                tls.version.trim_start_matches("TLSv").to_owned(),
            ),
            KeyValue::new("tls.cipher", tls.cipher.clone()),
            KeyValue::new(
                "sluice.handshake.kind",
                if tls.resumed { "resumed" } else { "full" },
            ),
            KeyValue::new("sluice.handshake.isolated", tls.isolated),
        ];
        if let Some(sni) = &tls.sni {
            attrs.push(KeyValue::new("tls.server.name", sni.clone()));
        }
        // The private-key operation: which offload engine signed, how long the operation
        // waited before it and how long it was there, and what it fell back from.
        if let Some(op) = &tls.key_operation {
            attrs.push(KeyValue::new("sluice.offload.engine", op.engine.clone()));
            attrs.push(KeyValue::new(
                "sluice.offload.queued_us",
                op.queued.as_micros() as i64,
            ));
            attrs.push(KeyValue::new(
                "sluice.offload.engine_us",
                op.at_engine.as_micros() as i64,
            ));
            if !op.fallbacks.is_empty() {
                attrs.push(KeyValue::new(
                    "sluice.offload.fallbacks",
                    op.fallbacks.join(","),
                ));
            }
        }
        h.set(attrs);
        h.end_at(began + took);
    }
}

/// Once routed: the span is named `{method} {route}` and carries `http.route` (the route's
/// name: Sluice's routes are prefixes, exact paths and patterns, not path templates).
pub(crate) fn routed(span: &mut RequestSpan, method: &Method, route: &str) {
    if span.is_recording() {
        span.rename(format!("{} {route}", method.as_str()));
        span.set([KeyValue::new("http.route", route.to_owned())]);
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
    c.set([
        KeyValue::new("http.request.method", method.as_str().to_owned()),
        KeyValue::new("server.address", addr.ip().to_string()),
        KeyValue::new("server.port", i64::from(addr.port())),
        KeyValue::new("sluice.upstream", upstream.to_owned()),
        KeyValue::new("http.request.resend_count", (n.saturating_sub(1)) as i64),
    ]);
    Some(c)
}

/// An attempt's outcome: the upstream's status, or why there was none.
pub(crate) fn attempt_done(span: Option<ChildSpan>, outcome: Result<u16, &'static str>) {
    let Some(mut span) = span else { return };
    match outcome {
        Ok(status) => {
            span.set([KeyValue::new(
                "http.response.status_code",
                i64::from(status),
            )]);
            if status >= 500 {
                span.fail(status.to_string());
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
