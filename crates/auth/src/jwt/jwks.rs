//! An issuer's JWKS, fetched from its URL: kept for as long as its caching headers say
//! (clamped to 1 minute-1 day, 5 minutes when it gives none), refreshed in the background
//! before then, and at once when a token names a `kid` the set lacks (at most once per
//! [`UNKNOWN_KID_INTERVAL`], so a stream of forged `kid`s cannot turn into a stream of
//! fetches). When the issuer is down the last good set is kept and the failure counted.

use super::keys::KeySet;
use crate::client::HttpClient;
use crate::counters::AuthCounters;
use arc_swap::ArcSwap;
use bytes::Bytes;
use http::{Request, Uri, header};
use http_body_util::Full;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant, SystemTime};

/// The least time between fetches caused by unknown `kid`s.
pub(crate) const UNKNOWN_KID_INTERVAL: Duration = Duration::from_secs(10);
/// How long one fetch may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
const MIN_TTL: Duration = Duration::from_secs(60);
const MAX_TTL: Duration = Duration::from_secs(86_400);
const DEFAULT_TTL: Duration = Duration::from_secs(300);

/// A fetched JWKS.
pub(crate) struct Jwks {
    url: Uri,
    client: HttpClient,
    keys: ArcSwap<KeySet>,
    /// Bumped with every new set (the token cache's entries name the one they were verified
    /// under).
    generation: AtomicU64,
    /// Held by the one fetch in progress; when it was last tried.
    fetching: tokio::sync::Mutex<Option<Instant>>,
    counters: Arc<AuthCounters>,
}

impl std::fmt::Debug for Jwks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Jwks").field("url", &self.url).finish()
    }
}

impl Jwks {
    pub(crate) fn new(
        url: Uri,
        ca: Option<&[u8]>,
        counters: Arc<AuthCounters>,
    ) -> Result<Arc<Self>, String> {
        Ok(Arc::new(Jwks {
            url,
            client: HttpClient::new(ca)?,
            keys: ArcSwap::from_pointee(KeySet::default()),
            generation: AtomicU64::new(0),
            fetching: tokio::sync::Mutex::new(None),
            counters,
        }))
    }

    /// Starts the background refresh (on the current Tokio runtime); it ends when the last
    /// holder of the set lets it go.
    pub(crate) fn start(self: &Arc<Self>) {
        let weak = Arc::downgrade(self);
        tokio::spawn(refresh_loop(weak));
    }

    /// The keys now, and their generation.
    pub(crate) fn current(&self) -> (Arc<KeySet>, u64) {
        (
            self.keys.load_full(),
            self.generation.load(Ordering::Acquire),
        )
    }

    /// Fetches again because a token needs a key the set `seen` (a generation) lacks: at
    /// once unless another request just did, or a fetch was tried within
    /// [`UNKNOWN_KID_INTERVAL`] (then the set stays; counted).
    pub(crate) async fn refresh_for_unknown(&self, seen: u64) {
        let mut last = self.fetching.lock().await;
        if self.generation.load(Ordering::Acquire) != seen {
            return; // another request's fetch brought a new set meanwhile
        }
        if last.is_some_and(|t| t.elapsed() < UNKNOWN_KID_INTERVAL) {
            self.counters
                .jwks_refresh_limited
                .fetch_add(1, Ordering::Relaxed);
            return;
        }
        *last = Some(Instant::now());
        let _ = self.fetch().await;
    }

    /// One fetch: the new set installed, or the failure counted and logged. `Ok`: how long
    /// the answer may be kept.
    async fn fetch(&self) -> Result<Duration, ()> {
        let req = Request::get(self.url.clone())
            .header(header::ACCEPT, "application/json, application/jwk-set+json")
            .header(header::USER_AGENT, "sluice")
            .body(Full::new(Bytes::new()))
            .expect("a GET of a parsed URL is a valid request");
        let answer = self.client.send(req, FETCH_TIMEOUT).await.and_then(|resp| {
            if !resp.status().is_success() {
                return Err(format!("status {}", resp.status()));
            }
            let set = KeySet::from_jwks(
                std::str::from_utf8(resp.body()).map_err(|_| "not UTF-8".to_owned())?,
            )?;
            Ok((set, ttl(resp.headers(), SystemTime::now())))
        });
        match answer {
            Ok((set, ttl)) => {
                tracing::debug!(url = %self.url, keys = set.keys.len(), ?ttl, "JWKS fetched");
                self.keys.store(Arc::new(set));
                self.generation.fetch_add(1, Ordering::AcqRel);
                self.counters.jwks_fetched.fetch_add(1, Ordering::Relaxed);
                Ok(ttl)
            }
            Err(e) => {
                self.counters.jwks_failed.fetch_add(1, Ordering::Relaxed);
                let kept = self.keys.load().keys.len();
                tracing::warn!(url = %self.url, kept, "cannot fetch the JWKS ({e}); the last good set stays");
                Err(())
            }
        }
    }
}

/// Fetches the set now and again before it goes stale; after a failure, again in 5 s, then
/// doubling to 5 minutes.
async fn refresh_loop(jwks: Weak<Jwks>) {
    let mut backoff = Duration::from_secs(5);
    loop {
        let Some(this) = jwks.upgrade() else { return };
        let wait = {
            let mut last = this.fetching.lock().await;
            *last = Some(Instant::now());
            match this.fetch().await {
                Ok(ttl) => {
                    backoff = Duration::from_secs(5);
                    // Refreshed a little before the answer goes stale.
                    ttl.mul_f64(0.9)
                }
                Err(()) => {
                    let wait = backoff;
                    backoff = (backoff * 2).min(DEFAULT_TTL);
                    wait
                }
            }
        };
        drop(this);
        tokio::time::sleep(wait).await;
    }
}

/// How long an answer with `headers` may be kept at `now`: `Cache-Control`'s `max-age`
/// (`s-maxage` first), else `Expires`, else 5 minutes; `no-store`/`no-cache` the least;
/// clamped to 1 minute-1 day.
pub(crate) fn ttl(headers: &http::HeaderMap, now: SystemTime) -> Duration {
    let mut max_age = None;
    let mut s_maxage = None;
    let mut uncacheable = false;
    for v in headers.get_all(header::CACHE_CONTROL) {
        let Ok(text) = v.to_str() else { continue };
        for d in text.split(',').map(str::trim) {
            let (name, value) = d.split_once('=').unwrap_or((d, ""));
            let secs = || value.trim_matches('"').parse::<u64>().ok();
            match name.to_ascii_lowercase().as_str() {
                "max-age" => max_age = secs(),
                "s-maxage" => s_maxage = secs(),
                "no-store" | "no-cache" => uncacheable = true,
                _ => {}
            }
        }
    }
    let given = if uncacheable {
        Some(Duration::ZERO)
    } else if let Some(s) = s_maxage.or(max_age) {
        Some(Duration::from_secs(s))
    } else {
        headers
            .get(header::EXPIRES)
            .and_then(|v| v.to_str().ok())
            .and_then(|t| httpdate::parse_http_date(t).ok())
            .map(|at| at.duration_since(now).unwrap_or(Duration::ZERO))
    };
    given.unwrap_or(DEFAULT_TTL).clamp(MIN_TTL, MAX_TTL)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn a_jwks_is_kept_as_its_caching_headers_say_within_bounds() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        assert_eq!(ttl(&headers(&[]), now), DEFAULT_TTL);
        assert_eq!(
            ttl(&headers(&[("cache-control", "public, max-age=3600")]), now),
            Duration::from_secs(3600)
        );
        assert_eq!(
            ttl(
                &headers(&[("cache-control", "max-age=3600, s-maxage=7200")]),
                now
            ),
            Duration::from_secs(7200)
        );
        assert_eq!(
            ttl(&headers(&[("cache-control", "max-age=5")]), now),
            MIN_TTL
        );
        assert_eq!(
            ttl(&headers(&[("cache-control", "no-cache")]), now),
            MIN_TTL
        );
        assert_eq!(
            ttl(&headers(&[("cache-control", "max-age=99999999")]), now),
            MAX_TTL
        );
        let expires = httpdate::fmt_http_date(now + Duration::from_secs(1800));
        assert_eq!(
            ttl(&headers(&[("expires", &expires)]), now),
            Duration::from_secs(1800)
        );
    }
}
