//! The response cache on the admin listener: its metrics and its `/status` section (its
//! purge endpoint is with the API's other writes, in `api`).

use crate::Sources;
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
        "purges_recorded": cache.purges_recorded(),
        "disk": cache.disk().map(|(d, dropped)| json!({
            "bytes": d.bytes, "max_bytes": d.max_bytes, "entries": d.entries,
            "reads": d.reads, "writes": d.writes, "corrupt": d.corrupt, "dropped": dropped,
        })),
    })
}
