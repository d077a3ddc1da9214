//! Whether a response may be stored by a shared cache (RFC 9111 §3), for how long it is fresh
//! (§4.2.1-4.2.2), how old a stored one is (§4.2.3), and what a request may be given from it
//! (§4.2, §4.2.4 and RFC 5861's stale-while-revalidate / stale-if-error).

use crate::directives::CacheControl;
use http::header::{AGE, AUTHORIZATION, DATE, EXPIRES, LAST_MODIFIED, SET_COOKIE, VARY};
use http::{HeaderMap, Method, StatusCode};
use std::time::{Duration, SystemTime};

/// Statuses a cache may store and give a heuristic lifetime without explicit freshness
/// (§4.2.2, RFC 9110 §15.1 "heuristically cacheable").
const HEURISTIC_STATUSES: &[u16] = &[200, 203, 204, 206, 300, 301, 308, 404, 405, 410, 414, 501];

/// The share of the time since `Last-Modified` a heuristic lifetime takes (§4.2.2's "10%").
const HEURISTIC_SHARE: u32 = 10;

/// The longest heuristic lifetime given (NGINX gives none; Varnish 2 min by default; a day
/// keeps a forgotten `Last-Modified` from pinning a page for weeks).
const HEURISTIC_CAP: Duration = Duration::from_secs(86_400);

/// What a route allows beyond the RFC's defaults.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StorePolicy {
    /// Store responses to requests with `Authorization` (otherwise only when the response
    /// says `public`, `s-maxage` or `must-revalidate`, §3.5).
    pub allow_authorization: bool,
    /// Store responses with `Set-Cookie` (otherwise never: one user's cookie served to all).
    pub allow_set_cookie: bool,
    /// A lifetime for responses with none of their own (`None`: heuristics only).
    pub default_ttl: Option<Duration>,
}

/// Why a response is not stored (counted by reason).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotStored {
    /// Not GET or HEAD.
    Method,
    /// A status without explicit freshness that is not heuristically cacheable.
    Status,
    /// `no-store` in the request or response.
    NoStore,
    /// `private`.
    Private,
    /// The request had `Authorization` and the response did not allow sharing it.
    Authorization,
    /// The response sets a cookie.
    SetCookie,
    /// `Vary: *`.
    VaryStar,
    /// No lifetime of any kind (explicit, heuristic or the route's) and nothing to
    /// revalidate with: storing it would only ever miss.
    NoLifetime,
    /// The origin sent it encoded though the cache asked for identity (the entry keeps the
    /// identity body and makes the encodings itself). Not returned by [`storable`].
    Encoded,
}

impl NotStored {
    /// The reason's name in metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            NotStored::Method => "method",
            NotStored::Status => "status",
            NotStored::NoStore => "no_store",
            NotStored::Private => "private",
            NotStored::Authorization => "authorization",
            NotStored::SetCookie => "set_cookie",
            NotStored::VaryStar => "vary_star",
            NotStored::NoLifetime => "no_lifetime",
            NotStored::Encoded => "encoded",
        }
    }
}

/// Whether a shared cache may store `status` and `response` for `method` with `request`'s
/// headers (§3, §3.5), under `policy`.
pub fn storable(
    method: &Method,
    request: &HeaderMap,
    status: StatusCode,
    response: &HeaderMap,
    policy: &StorePolicy,
) -> Result<(), NotStored> {
    if method != Method::GET && method != Method::HEAD {
        return Err(NotStored::Method);
    }
    let req = CacheControl::parse(request);
    let resp = CacheControl::parse(response);
    if req.no_store || resp.no_store {
        return Err(NotStored::NoStore);
    }
    if resp.private {
        return Err(NotStored::Private);
    }
    if request.contains_key(AUTHORIZATION)
        && !policy.allow_authorization
        && !(resp.public || resp.s_maxage.is_some() || resp.must_revalidate)
    {
        return Err(NotStored::Authorization);
    }
    if response.contains_key(SET_COOKIE) && !policy.allow_set_cookie {
        return Err(NotStored::SetCookie);
    }
    if response.get_all(VARY).iter().any(|v| {
        v.to_str()
            .map_or(true, |v| v.split(',').any(|f| f.trim() == "*"))
    }) {
        return Err(NotStored::VaryStar);
    }
    let explicit = resp.max_age.is_some()
        || resp.s_maxage.is_some()
        || response.contains_key(EXPIRES)
        || resp.public;
    let heuristic = HEURISTIC_STATUSES.contains(&status.as_u16());
    if !explicit && !heuristic {
        return Err(NotStored::Status);
    }
    if status == StatusCode::PARTIAL_CONTENT {
        // Ranges are served from whole entries; a stored 206 would be one range only.
        return Err(NotStored::Status);
    }
    let validator =
        response.contains_key(http::header::ETAG) || response.contains_key(LAST_MODIFIED);
    if lifetime(status, response, policy.default_ttl).is_zero() && !validator && !resp.no_cache {
        return Err(NotStored::NoLifetime);
    }
    Ok(())
}

/// How long a response is fresh for a shared cache (§4.2.1): `s-maxage`, else `max-age`,
/// else `Expires` less `Date`, else `default_ttl`, else a heuristic (10% of the time since
/// `Last-Modified`, at most a day) for heuristically cacheable statuses. Zero when stale
/// from the start (a malformed directive, `no-cache`, an `Expires` in the past or invalid).
pub fn lifetime(
    status: StatusCode,
    response: &HeaderMap,
    default_ttl: Option<Duration>,
) -> Duration {
    let cc = CacheControl::parse(response);
    if cc.invalid || cc.no_cache {
        return Duration::ZERO;
    }
    if let Some(s) = cc.s_maxage.or(cc.max_age) {
        return s;
    }
    if response.contains_key(EXPIRES) {
        // An invalid Expires (such as "0") means already expired (§5.3).
        let (Some(expires), date) = (date(response, EXPIRES), date(response, DATE)) else {
            return Duration::ZERO;
        };
        let date = date.unwrap_or_else(SystemTime::now);
        return expires.duration_since(date).unwrap_or(Duration::ZERO);
    }
    if let Some(ttl) = default_ttl {
        return ttl;
    }
    if !HEURISTIC_STATUSES.contains(&status.as_u16()) {
        return Duration::ZERO;
    }
    match (date(response, LAST_MODIFIED), date(response, DATE)) {
        (Some(modified), date) => date
            .unwrap_or_else(SystemTime::now)
            .duration_since(modified)
            .map_or(Duration::ZERO, |d| (d / HEURISTIC_SHARE).min(HEURISTIC_CAP)),
        (None, _) => Duration::ZERO,
    }
}

/// An HTTP-date field.
pub(crate) fn date(headers: &HeaderMap, name: http::HeaderName) -> Option<SystemTime> {
    let v = headers.get(name)?.to_str().ok()?;
    httpdate::parse_http_date(v.trim()).ok()
}

/// When a stored response was fetched, to compute its age later (§4.2.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// When the request went upstream.
    pub request_time: SystemTime,
    /// When the response head arrived.
    pub response_time: SystemTime,
    /// The response's age when it arrived (corrected_initial_age).
    pub initial_age: Duration,
}

impl Timing {
    /// The age of `response` on arrival: the larger of its apparent age (`Date` against our
    /// clock) and its `Age` plus the round trip (§4.2.3).
    pub fn new(
        request_time: SystemTime,
        response_time: SystemTime,
        response: &HeaderMap,
    ) -> Timing {
        let apparent = date(response, DATE)
            .and_then(|d| response_time.duration_since(d).ok())
            .unwrap_or(Duration::ZERO);
        let age_value = response
            .get(AGE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map_or(Duration::ZERO, Duration::from_secs);
        let delay = response_time
            .duration_since(request_time)
            .unwrap_or(Duration::ZERO);
        Timing {
            request_time,
            response_time,
            initial_age: apparent.max(age_value + delay),
        }
    }

    /// The stored response's current age at `now`.
    pub fn age(&self, now: SystemTime) -> Duration {
        self.initial_age
            + now
                .duration_since(self.response_time)
                .unwrap_or(Duration::ZERO)
    }
}

/// What a request may be given from a stored response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Serve {
    /// Fresh enough for this request: serve it.
    Fresh,
    /// Stale, but within `stale-while-revalidate`: serve it and revalidate in the background.
    StaleWhileRevalidate,
    /// Must be revalidated (or fetched) before it is served; if the upstream fails, it may
    /// still be served when `stale_if_error` is true.
    Revalidate {
        /// Within `stale-if-error` (the response's or the request's).
        stale_if_error: bool,
    },
}

/// What `request` may be given from a response stored with `response` headers, `lifetime`
/// and an `age` now (§4.2, §4.2.4, RFC 5861).
pub fn serve(
    request: &HeaderMap,
    response: &HeaderMap,
    lifetime: Duration,
    age: Duration,
) -> Serve {
    let req = CacheControl::parse(request);
    let resp = CacheControl::parse(response);
    let fresh_for = lifetime.saturating_sub(age);
    let stale_by = age.saturating_sub(lifetime);
    let within = |window: Option<Duration>| window.is_some_and(|w| stale_by <= w);
    // A shared cache never serves stale past no-cache, must-revalidate or proxy-revalidate,
    // or s-maxage, which implies proxy-revalidate (RFC 9111 §4.2.4, §5.2.2.10).
    let revalidate_only =
        resp.no_cache || resp.must_revalidate || resp.proxy_revalidate || resp.s_maxage.is_some();
    let stale_if_error = |fresh: bool| Serve::Revalidate {
        stale_if_error: !fresh
            && !revalidate_only
            && (within(resp.stale_if_error) || within(req.stale_if_error)),
    };
    if req.no_cache || resp.no_cache {
        return stale_if_error(false);
    }
    // `max-age` in a request: no older than that.
    if req.max_age.is_some_and(|m| age > m) {
        return stale_if_error(false);
    }
    let is_fresh = age < lifetime;
    if is_fresh {
        if req.min_fresh.is_some_and(|m| fresh_for < m) {
            return stale_if_error(true);
        }
        return Serve::Fresh;
    }
    // Stale from here.
    if !revalidate_only {
        if let Some(max_stale) = req.max_stale
            && max_stale.is_none_or(|m| stale_by <= m)
        {
            return Serve::Fresh;
        }
        if within(resp.stale_while_revalidate) {
            return Serve::StaleWhileRevalidate;
        }
    }
    stale_if_error(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_headers as h;

    fn ok(req: &[(&str, &str)], status: u16, resp: &[(&str, &str)]) -> Result<(), NotStored> {
        storable(
            &Method::GET,
            &h(req),
            StatusCode::from_u16(status).unwrap(),
            &h(resp),
            &StorePolicy::default(),
        )
    }

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn what_a_shared_cache_may_store() {
        assert_eq!(ok(&[], 200, &[("cache-control", "max-age=60")]), Ok(()));
        assert_eq!(
            storable(
                &Method::POST,
                &h(&[]),
                StatusCode::OK,
                &h(&[("cache-control", "max-age=60")]),
                &StorePolicy::default()
            ),
            Err(NotStored::Method)
        );
        assert_eq!(
            ok(&[], 200, &[("cache-control", "no-store, max-age=60")]),
            Err(NotStored::NoStore)
        );
        assert_eq!(
            ok(
                &[("cache-control", "no-store")],
                200,
                &[("cache-control", "max-age=60")]
            ),
            Err(NotStored::NoStore)
        );
        assert_eq!(
            ok(&[], 200, &[("cache-control", "private, max-age=60")]),
            Err(NotStored::Private)
        );
        let auth = [("authorization", "Bearer x")];
        assert_eq!(
            ok(&auth, 200, &[("cache-control", "max-age=60")]),
            Err(NotStored::Authorization)
        );
        for allowed in [
            "public, max-age=60",
            "s-maxage=60",
            "must-revalidate, max-age=60",
        ] {
            assert_eq!(
                ok(&auth, 200, &[("cache-control", allowed)]),
                Ok(()),
                "{allowed}"
            );
        }
        assert_eq!(
            ok(
                &[],
                200,
                &[("cache-control", "max-age=60"), ("set-cookie", "a=b")]
            ),
            Err(NotStored::SetCookie)
        );
        let lax = StorePolicy {
            allow_authorization: true,
            allow_set_cookie: true,
            default_ttl: None,
        };
        assert_eq!(
            storable(
                &Method::GET,
                &h(&auth),
                StatusCode::OK,
                &h(&[("cache-control", "max-age=60"), ("set-cookie", "a=b")]),
                &lax
            ),
            Ok(())
        );
        assert_eq!(
            ok(
                &[],
                200,
                &[
                    ("cache-control", "max-age=60"),
                    ("vary", "accept-encoding, *")
                ]
            ),
            Err(NotStored::VaryStar)
        );
        // 500 is not heuristically cacheable; with explicit freshness it may be stored.
        assert_eq!(ok(&[], 500, &[]), Err(NotStored::Status));
        assert_eq!(ok(&[], 500, &[("cache-control", "max-age=5")]), Ok(()));
        assert_eq!(
            ok(&[], 206, &[("cache-control", "max-age=5")]),
            Err(NotStored::Status)
        );
        // 200 with nothing: no lifetime, no validator.
        assert_eq!(ok(&[], 200, &[]), Err(NotStored::NoLifetime));
        // ...but with a validator it is worth keeping to revalidate.
        assert_eq!(ok(&[], 200, &[("etag", "\"a\"")]), Ok(()));
    }

    #[test]
    fn lifetimes_follow_the_rfc_order() {
        let l = |resp: &[(&str, &str)]| lifetime(StatusCode::OK, &h(resp), None);
        assert_eq!(l(&[("cache-control", "max-age=60, s-maxage=120")]), S(120));
        assert_eq!(
            l(&[
                ("cache-control", "max-age=60"),
                ("expires", "Thu, 01 Jan 2099 00:00:00 GMT")
            ]),
            S(60)
        );
        assert_eq!(
            l(&[
                ("date", "Thu, 26 Nov 2026 00:00:00 GMT"),
                ("expires", "Thu, 26 Nov 2026 00:05:00 GMT")
            ]),
            S(300)
        );
        assert_eq!(
            l(&[("expires", "0")]),
            S(0),
            "an invalid Expires is already expired"
        );
        assert_eq!(l(&[("cache-control", "max-age=abc")]), S(0));
        assert_eq!(l(&[("cache-control", "no-cache, max-age=60")]), S(0));
        // Heuristic: 10% of Date - Last-Modified, capped at a day.
        assert_eq!(
            l(&[
                ("date", "Thu, 26 Nov 2026 10:00:00 GMT"),
                ("last-modified", "Thu, 26 Nov 2026 00:00:00 GMT")
            ]),
            S(3600)
        );
        assert_eq!(
            l(&[
                ("date", "Thu, 26 Nov 2026 10:00:00 GMT"),
                ("last-modified", "Thu, 01 Jan 2015 00:00:00 GMT")
            ]),
            S(86_400)
        );
        assert_eq!(
            lifetime(
                StatusCode::INTERNAL_SERVER_ERROR,
                &h(&[("last-modified", "Thu, 01 Jan 2015 00:00:00 GMT")]),
                None
            ),
            S(0),
            "no heuristics for a 500"
        );
        assert_eq!(
            lifetime(StatusCode::OK, &h(&[]), Some(S(30))),
            S(30),
            "the route's default"
        );
    }

    #[test]
    fn age_counts_the_apparent_age_the_age_field_and_the_round_trip() {
        let t0 = httpdate::parse_http_date("Thu, 26 Nov 2026 10:00:00 GMT").unwrap();
        // The origin's clock is 10 s behind ours; Age says 3; the round trip took 2 s.
        let resp = h(&[("date", "Thu, 26 Nov 2026 09:59:52 GMT"), ("age", "3")]);
        let t = Timing::new(t0, t0 + S(2), &resp);
        assert_eq!(t.initial_age, S(10), "the apparent age is the larger");
        assert_eq!(t.age(t0 + S(32)), S(40));
        let t = Timing::new(t0, t0 + S(2), &h(&[("age", "30")]));
        assert_eq!(t.initial_age, S(32));
    }

    #[test]
    fn what_a_request_is_given() {
        let none = h(&[]);
        let resp = |cc: &str| h(&[("cache-control", cc)]);
        assert_eq!(
            serve(&none, &resp("max-age=60"), S(60), S(10)),
            Serve::Fresh
        );
        assert_eq!(
            serve(&none, &resp("max-age=60"), S(60), S(61)),
            Serve::Revalidate {
                stale_if_error: false
            }
        );
        // stale-while-revalidate: served while within the window, then revalidated first.
        let swr = resp("max-age=60, stale-while-revalidate=30");
        assert_eq!(
            serve(&none, &swr, S(60), S(80)),
            Serve::StaleWhileRevalidate
        );
        assert_eq!(
            serve(&none, &swr, S(60), S(91)),
            Serve::Revalidate {
                stale_if_error: false
            }
        );
        // stale-if-error, from the response or the request.
        let sie = resp("max-age=60, stale-if-error=600");
        assert_eq!(
            serve(&none, &sie, S(60), S(300)),
            Serve::Revalidate {
                stale_if_error: true
            }
        );
        assert_eq!(
            serve(&none, &sie, S(60), S(700)),
            Serve::Revalidate {
                stale_if_error: false
            }
        );
        let asks = h(&[("cache-control", "stale-if-error=100")]);
        assert_eq!(
            serve(&asks, &resp("max-age=60"), S(60), S(100)),
            Serve::Revalidate {
                stale_if_error: true
            }
        );
        // must-revalidate, proxy-revalidate and s-maxage forbid serving stale.
        for strict in [
            "max-age=60, must-revalidate, stale-if-error=600, stale-while-revalidate=60",
            "s-maxage=60, stale-if-error=600, stale-while-revalidate=60",
            "max-age=60, proxy-revalidate, stale-while-revalidate=60",
        ] {
            assert_eq!(
                serve(&none, &resp(strict), S(60), S(70)),
                Serve::Revalidate {
                    stale_if_error: false
                },
                "{strict}"
            );
        }
        // Request directives.
        let r = |cc: &str| h(&[("cache-control", cc)]);
        assert_eq!(
            serve(&r("no-cache"), &resp("max-age=60"), S(60), S(1)),
            Serve::Revalidate {
                stale_if_error: false
            }
        );
        assert_eq!(
            serve(&r("max-age=5"), &resp("max-age=60"), S(60), S(10)),
            Serve::Revalidate {
                stale_if_error: false
            }
        );
        assert_eq!(
            serve(&r("min-fresh=55"), &resp("max-age=60"), S(60), S(10)),
            Serve::Revalidate {
                stale_if_error: false
            }
        );
        assert_eq!(
            serve(&r("max-stale=20"), &resp("max-age=60"), S(60), S(75)),
            Serve::Fresh
        );
        assert_eq!(
            serve(&r("max-stale=20"), &resp("max-age=60"), S(60), S(90)),
            Serve::Revalidate {
                stale_if_error: false
            }
        );
        assert_eq!(
            serve(&r("max-stale"), &resp("max-age=60"), S(60), S(9999)),
            Serve::Fresh
        );
        assert_eq!(
            serve(
                &r("max-stale"),
                &resp("max-age=60, must-revalidate"),
                S(60),
                S(61)
            ),
            Serve::Revalidate {
                stale_if_error: false
            }
        );
        // no-cache in the response: always revalidate.
        assert_eq!(
            serve(&none, &resp("no-cache"), S(0), S(0)),
            Serve::Revalidate {
                stale_if_error: false
            }
        );
        assert_eq!(
            serve(&none, &resp("no-cache, stale-if-error=600"), S(0), S(5)),
            Serve::Revalidate {
                stale_if_error: false
            },
            "no stale past a response's no-cache"
        );
    }
}
