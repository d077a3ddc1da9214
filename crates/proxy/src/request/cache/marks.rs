//! The headers that say how the cache handled a response, on every answer of a cached route
//! (from the store or forwarded).

use http::header::{HeaderMap, HeaderName, HeaderValue};
use sluice_cache::CacheStatus;
use sluice_config::RouteCache;

/// The headers that say how the cache handled a response: the route's short one (`X-Cache:
/// MISS`) and RFC 9211 `Cache-Status`, each where the route sends it.
pub(crate) struct Marks {
    short: Option<HeaderName>,
    status: CacheStatus,
    /// The route sends `Cache-Status`.
    rfc: bool,
}

impl Marks {
    /// The marks of `status` as the route's settings want them.
    pub(crate) fn new(settings: &RouteCache, status: CacheStatus) -> Self {
        Marks {
            short: settings.status_header.clone(),
            status,
            rfc: settings.cache_status,
        }
    }

    /// Adds them to a response's `headers`.
    pub(crate) fn apply(self, headers: &mut HeaderMap) {
        if let Some(name) = self.short {
            headers.insert(name, HeaderValue::from_static(self.status.outcome.as_str()));
        }
        if self.rfc
            && let Ok(v) = HeaderValue::try_from(self.status.value())
        {
            headers.insert(&CACHE_STATUS, v);
        }
    }
}

/// RFC 9211's field.
static CACHE_STATUS: HeaderName = HeaderName::from_static("cache-status");
