//! `sluice_http_*` and the request path's upstream families: responses by status class,
//! body bytes, request duration, upstream errors and retries, allow/deny refusals and the
//! access log's drops.

use crate::Sources;
use crate::exposition::{Exposition, Kind};
use sluice_proxy::{ProxySnapshot, STATUS_CLASSES, UPSTREAM_ERRORS};

/// Responses, body bytes and the request duration histogram.
pub(super) fn traffic(out: &mut Exposition, s: &Sources, p: &ProxySnapshot) {
    out.family_by(
        "sluice_http_requests_total",
        Kind::Counter,
        "Responses sent, by status class.",
        "class",
        STATUS_CLASSES.iter().copied().zip(p.requests),
    );
    out.family_by(
        "sluice_http_body_bytes_total",
        Kind::Counter,
        "HTTP body bytes: received from clients (in), sent to them (out).",
        "direction",
        ["in", "out"].into_iter().zip(p.bytes),
    );
    let name = "sluice_http_request_duration_seconds";
    out.family(
        name,
        Kind::Histogram,
        "HTTP requests from their first byte to the end of their response.",
    );
    let latency = s.gateway.metrics().latency_us();
    let buckets = latency.bounds.iter().zip(&latency.counts);
    out.histogram(
        name,
        &[],
        buckets.map(|(bound, n)| (*bound as f64 / 1e6, *n)),
        latency.sum as f64 / 1e6,
        latency.total(),
    );
}

pub(super) fn upstream_errors(out: &mut Exposition, p: &ProxySnapshot) {
    out.family_by(
        "sluice_upstream_errors_total",
        Kind::Counter,
        "Upstream attempts that failed, by kind.",
        "kind",
        UPSTREAM_ERRORS.iter().copied().zip(p.upstream_errors),
    );
}

/// What policy did to requests: allow/deny refusals, retries, access log lines dropped.
pub(super) fn policy(out: &mut Exposition, s: &Sources, p: &ProxySnapshot) {
    out.single(
        "sluice_http_denied_total",
        Kind::Counter,
        "Requests refused with 403 by a listener's or route's allow/deny lists.",
        p.denied,
    );
    out.family_by(
        "sluice_upstream_retries_total",
        Kind::Counter,
        "Retries a route's policy wanted: sent to another server, or refused by the upstream's retry budget.",
        "result",
        ["sent", "budget_exhausted"].into_iter().zip(p.retries),
    );
    out.single(
        "sluice_access_log_dropped_total",
        Kind::Counter,
        "Access log lines dropped because the sink could not keep up.",
        s.gateway.access_log().dropped(),
    );
}
