//! The response cache on the admin listener: its metrics, its `/status` section, and
//! `POST /api/v1/cache/purge`.

use crate::Sources;
use crate::api::{Reply, error, json_body, json_reply};
use http::{Request, StatusCode};
use hyper::body::Incoming;
use serde_json::{Value, json};
use std::fmt::Write as _;

/// The `sluice_cache_*` families.
pub(crate) fn metrics(out: &mut String, s: &Sources) {
    let cache = s.gateway.cache();
    let c = cache.snapshot();
    let mut counter = |name: &str, help: &str, label: &str, values: &[(&str, u64)]| {
        crate::family(out, name, "counter", help);
        for (k, v) in values {
            let _ = writeln!(out, "{name}{{{label}=\"{}\"}} {v}", k.to_ascii_lowercase());
        }
    };
    counter(
        "sluice_cache_requests_total",
        "Requests on routes with [route.cache], by how they were answered (hit, miss, revalidated, expired, stale, bypass).",
        "outcome",
        &c.outcomes,
    );
    counter(
        "sluice_cache_not_stored_total",
        "Responses the cache did not store, by reason.",
        "reason",
        &c.not_stored,
    );
    counter(
        "sluice_cache_served_bytes_total",
        "Body bytes served from the cache, by content coding.",
        "coding",
        &c.served_bytes,
    );
    counter(
        "sluice_cache_variants_made_total",
        "Encoded variants made (once per entry and coding, on the first request for it).",
        "coding",
        &c.variants_made,
    );
    counter(
        "sluice_cache_upgrades_total",
        "Variants re-encoded in the background at their codec's best level.",
        "coding",
        &c.upgrades,
    );
    for (name, help, v) in [
        (
            "sluice_cache_collapsed_total",
            "Misses that waited for another request's fetch of the same key instead of going upstream.",
            c.collapsed,
        ),
        (
            "sluice_cache_not_modified_total",
            "Client conditional requests answered 304 from the cache.",
            c.not_modified,
        ),
        (
            "sluice_cache_upgrades_dropped_total",
            "Background upgrades dropped because their queue was full (asked for again later).",
            c.upgrades_dropped,
        ),
        (
            "sluice_cache_upgrade_saved_bytes_total",
            "Bytes per copy the background upgrades saved (old variant less new).",
            c.upgrade_bytes_saved,
        ),
        (
            "sluice_cache_purges_total",
            "Purge requests (by key or prefix) through the admin API.",
            c.purges,
        ),
    ] {
        crate::family(out, name, "counter", help);
        let _ = writeln!(out, "{name} {v}");
    }
    crate::family(
        out,
        "sluice_cache_cpu_saved_seconds_total",
        "counter",
        "Compression CPU not spent: encoded bytes served from the cache at the measured inline cost of the route's encoding (an estimate).",
    );
    let _ = writeln!(
        out,
        "sluice_cache_cpu_saved_seconds_total {}",
        c.cpu_saved_s
    );
    for (name, help, v) in [
        (
            "sluice_cache_bytes",
            "Bytes the cache holds (heads, bodies and every variant).",
            cache.bytes(),
        ),
        (
            "sluice_cache_max_bytes",
            "The cache's bound ([cache] max_size).",
            cache.settings().max_size,
        ),
        (
            "sluice_cache_entries",
            "Entries the cache holds.",
            cache.entries(),
        ),
    ] {
        crate::family(out, name, "gauge", help);
        let _ = writeln!(out, "{name} {v}");
    }
}

/// `/status`'s `cache` section.
pub(crate) fn status(s: &Sources) -> Value {
    let cache = s.gateway.cache();
    let c = cache.snapshot();
    let map = |pairs: &[(&str, u64)]| -> serde_json::Map<String, Value> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), (*v).into()))
            .collect()
    };
    json!({
        "bytes": cache.bytes(),
        "max_bytes": cache.settings().max_size,
        "entries": cache.entries(),
        "hit_ratio": c.hit_ratio(),
        "requests": map(&c.outcomes),
        "served_bytes": map(&c.served_bytes),
        "variants_made": map(&c.variants_made),
        "upgrades": map(&c.upgrades),
        "collapsed": c.collapsed,
        "cpu_saved_s": c.cpu_saved_s,
        "disk": cache.disk().map(|(d, dropped)| json!({
            "bytes": d.bytes, "max_bytes": d.max_bytes, "entries": d.entries,
            "reads": d.reads, "writes": d.writes, "corrupt": d.corrupt, "dropped": dropped,
        })),
    })
}

/// `POST /api/v1/cache/purge` with `{"host": "example.com", "path": "/page?x=1"}` (one URL,
/// every variant and Vary entry of it) or `{"host": "example.com", "prefix": "/static/"}`
/// (every URL under it; `"prefix": "/"` empties the host). In fleet mode it reaches every
/// gateway through etcd; with etcd away it fails (503) and purges nothing.
pub(crate) async fn purge(s: &Sources, req: Request<Incoming>) -> Reply {
    let body = match json_body(req).await {
        Ok(b) => b,
        Err(r) => return *r,
    };
    let host = body.get("host").and_then(Value::as_str).unwrap_or("");
    let (path, prefix) = match (
        body.get("path").and_then(Value::as_str),
        body.get("prefix").and_then(Value::as_str),
    ) {
        (Some(p), None) => (p, false),
        (None, Some(p)) => (p, true),
        _ => {
            return error(
                StatusCode::BAD_REQUEST,
                "give \"host\" and one of \"path\" (one URL, with its query) or \"prefix\" (every URL under it)",
            );
        }
    };
    if host.is_empty() || !path.starts_with('/') {
        return error(
            StatusCode::BAD_REQUEST,
            "\"host\" is the request's Host (with its port if not 80/443) and the path starts with /",
        );
    }
    // In a fleet, every gateway (this one too) purges when the purge arrives through etcd;
    // this one also purges now, so that its next answer is already without it.
    let fleet = match s.control.as_ref().and_then(|c| c.shared()) {
        Some(store) => match store.purge_cache(host, path, prefix).await {
            Ok(()) => true,
            Err(e) => return error(StatusCode::SERVICE_UNAVAILABLE, &e.message),
        },
        None => false,
    };
    s.gateway.cache().purge_requested(host, path, prefix);
    json_reply(
        StatusCode::OK,
        &json!({
            "result": "ok", "host": host, if prefix { "prefix" } else { "path" }: path,
            "fleet": fleet,
        }),
    )
}
