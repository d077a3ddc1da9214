//! The response cache on the admin listener: its metrics and its `/status` section (its
//! purge endpoint is with the API's other writes, in `api`).

use crate::Sources;
use crate::exposition::{Exposition, Kind};
use serde_json::{Value, json};
use sluice_cache::CacheSnapshot;

/// A family of the cache's counters by one label: its counts by that label's value.
type ByLabel = fn(&CacheSnapshot) -> &[(&'static str, u64)];

/// The families by a label: name, help, label, counts.
const BY_LABEL: [(&str, &str, &str, ByLabel); 5] = [
    (
        "sluice_cache_requests_total",
        "Requests on routes with [route.cache], by how they were answered (hit, miss, revalidated, expired, stale, bypass).",
        "outcome",
        |c| c.outcomes.as_slice(),
    ),
    (
        "sluice_cache_not_stored_total",
        "Responses the cache did not store, by reason.",
        "reason",
        |c| c.not_stored.as_slice(),
    ),
    (
        "sluice_cache_served_bytes_total",
        "Body bytes served from the cache, by content coding.",
        "coding",
        |c| c.served_bytes.as_slice(),
    ),
    (
        "sluice_cache_variants_made_total",
        "Encoded variants made (once per entry and coding, on the first request for it).",
        "coding",
        |c| c.variants_made.as_slice(),
    ),
    (
        "sluice_cache_upgrades_total",
        "Variants re-encoded in the background at their codec's best level.",
        "coding",
        |c| c.upgrades.as_slice(),
    ),
];

/// One counter of the cache's snapshot.
type Reading = fn(&CacheSnapshot) -> u64;

/// The counters without labels: name, help, count.
const TOTALS: [(&str, &str, Reading); 5] = [
    (
        "sluice_cache_collapsed_total",
        "Misses that waited for another request's fetch of the same key instead of going upstream.",
        |c| c.collapsed,
    ),
    (
        "sluice_cache_not_modified_total",
        "Client conditional requests answered 304 from the cache.",
        |c| c.not_modified,
    ),
    (
        "sluice_cache_upgrades_dropped_total",
        "Background upgrades dropped because their queue was full (asked for again later).",
        |c| c.upgrades_dropped,
    ),
    (
        "sluice_cache_upgrade_saved_bytes_total",
        "Bytes per copy the background upgrades saved (old variant less new).",
        |c| c.upgrade_bytes_saved,
    ),
    (
        "sluice_cache_purges_total",
        "Purge requests (by key or prefix) through the admin API.",
        |c| c.purges,
    ),
];

/// The `sluice_cache_*` families.
pub(crate) fn metrics(out: &mut Exposition, s: &Sources) {
    let cache = s.gateway.cache();
    let c = cache.snapshot();
    for (name, help, label, counts) in BY_LABEL {
        let lower: Vec<(String, u64)> = counts(&c)
            .iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), *v))
            .collect();
        let values = lower.iter().map(|(k, v)| (k.as_str(), v));
        out.family_by(name, Kind::Counter, help, label, values);
    }
    for (name, help, count) in TOTALS {
        out.single(name, Kind::Counter, help, count(&c));
    }
    out.single(
        "sluice_cache_cpu_saved_seconds_total",
        Kind::Counter,
        "Compression CPU not spent: encoded bytes served from the cache at the measured inline cost of the route's encoding (an estimate).",
        c.cpu_saved_s,
    );
    out.single(
        "sluice_cache_bytes",
        Kind::Gauge,
        "Bytes the cache holds (heads, bodies and every variant).",
        cache.bytes(),
    );
    out.single(
        "sluice_cache_max_bytes",
        Kind::Gauge,
        "The cache's bound ([cache] max_size).",
        cache.settings().max_size,
    );
    out.single(
        "sluice_cache_entries",
        Kind::Gauge,
        "Entries the cache holds.",
        cache.entries(),
    );
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
