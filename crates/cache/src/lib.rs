//! HTTP caching for Sluice (RFC 9111), as a shared cache at a site's entrance.
//!
//! The rules are pure functions of header maps and times, so that every directive is tested
//! on its own; the store holds entries; the proxy (not yet wired) decides with both.
//!
//! - `directives`: `Cache-Control` parsed (requests and responses);
//! - `freshness`: what may be stored (`storable`), for how long (`lifetime`), how old it is
//!   (`Timing`) and what a request may be given (`serve`: fresh, stale while revalidating,
//!   or revalidate first, with or without `stale-if-error`);
//! - `counters`: what the cache did (outcomes, bytes per coding, upgrades, CPU saved);
//! - `collapse`: concurrent misses of one key make one upstream fetch;
//! - `conditional`: a client's `If-None-Match` / `If-Modified-Since` answered from the
//!   store, revalidation upstream, and a 304 merged into the stored head;
//! - `store`: entries with their encoded variants, bounded by bytes (moka's W-TinyLFU, so
//!   a scan cannot flush what is hit), purged by key or prefix;
//! - `range`: byte ranges answered from a whole stored response (206, multiple ranges,
//!   `If-Range`, 416);
//! - `status`: RFC 9211 `Cache-Status`, how the cache handled a request;
//! - `purge`: purges as records (key or prefix, and time), so that what a purge covers is
//!   never stored, written or read back after it, across restarts too;
//! - `entry`: one stored response with its variants;
//! - `disk`: the optional disk tier (files written whole, an LRU bound, read back at start);
//! - `vary`: the secondary key from the request fields a response's `Vary` names (without
//!   `Accept-Encoding`: the cache keeps the encoded variants of an entry itself).

pub mod collapse;
pub mod conditional;
pub mod counters;
pub mod directives;
pub mod disk;
pub mod entry;
pub mod freshness;
pub mod purge;
pub mod range;
pub mod status;
pub mod store;
pub mod vary;

pub use collapse::{Collapser, Turn};
pub use counters::{CacheCounters, CacheSnapshot, Outcome};
pub use directives::CacheControl;
pub use freshness::{NotStored, Serve, StorePolicy, Timing, lifetime, serve, storable};
pub use purge::Purge;
pub use status::CacheStatus;
pub use store::{Entry, Store, Variant};

/// A header map from `(name, value)` pairs (the rules' tests).
#[cfg(test)]
pub(crate) fn test_headers(fields: &[(&str, &str)]) -> http::HeaderMap {
    let mut m = http::HeaderMap::new();
    for (k, v) in fields {
        m.append(
            http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            http::HeaderValue::from_str(v).unwrap(),
        );
    }
    m
}
