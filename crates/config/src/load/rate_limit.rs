//! `[route.rate_limit]` and `[rate_limit]`.

use super::Cx;
use crate::policy::{RateLimit, RateLimitStore};
use crate::raw::*;
use std::time::Duration;
use toml::Spanned;

impl Cx<'_> {
    pub(super) fn rate_limit(&mut self, route: &str, raw: &Spanned<RawRateLimit>) -> RateLimit {
        let r = raw.get_ref();
        let (quota, window) = match parse_rate(r.rate.get_ref()) {
            Some(v) => v,
            None => {
                self.err_at(
                    &r.rate,
                    format!("route `{route}`: rate `{}` is not a rate", r.rate.get_ref()),
                    "write it as \"5/s\", \"300/m\" or \"1000/h\" (a whole number of requests, at least 1)",
                );
                (1, Duration::from_secs(1))
            }
        };
        let key = match &r.key {
            None => Some(crate::HashKey::Client),
            Some(k) if k.get_ref() == "route" => None,
            Some(k) => match super::upstream::hash_key(k.get_ref()) {
                Some(crate::HashKey::Uri) | None => {
                    self.err_at(
                        k,
                        format!("route `{route}`: rate_limit key `{}` is not a key", k.get_ref()),
                        "use \"client\", \"header:NAME\", \"cookie:NAME\", \"query:NAME\" or \"route\"",
                    );
                    None
                }
                Some(key) => Some(key),
            },
        };
        let shared = match &r.store {
            None => false,
            Some(s) => match s.get_ref().as_str() {
                "local" => false,
                "redis" => true,
                other => {
                    self.err_at(
                        s,
                        format!("route `{route}`: rate_limit store `{other}` is not a store"),
                        "use \"local\" or \"redis\"",
                    );
                    false
                }
            },
        };
        if let (true, Some(s)) = (shared, &r.store) {
            self.redis_users.push(s.span().start);
        }
        RateLimit {
            quota,
            window,
            burst: r.burst.as_ref().map_or(0, |b| *b.get_ref()),
            nodelay: r.nodelay.as_ref().is_some_and(|n| *n.get_ref()),
            key,
            shared,
        }
    }

    pub(super) fn rate_limit_store(&mut self, raw: Option<&RawRateLimitStore>) -> RateLimitStore {
        let mut store = RateLimitStore::default();
        let Some(raw) = raw else {
            return store;
        };
        if let Some(url) = &raw.redis {
            let ok =
                url.get_ref().starts_with("redis://") || url.get_ref().starts_with("rediss://");
            if ok {
                store.redis = Some(url.get_ref().clone());
            } else {
                self.err_at(
                    url,
                    format!("[rate_limit] redis `{}` is not a Redis URL", url.get_ref()),
                    "write it as \"redis://127.0.0.1:6379/\"",
                );
            }
        }
        if let Some(t) = self.duration(raw.redis_timeout.as_ref()) {
            store.redis_timeout = t;
        }
        if let Some(n) = &raw.expected_gateways {
            if *n.get_ref() == 0 {
                self.err_at(
                    n,
                    "[rate_limit] expected_gateways must be at least 1",
                    "count the gateways that share the limits",
                );
            } else {
                store.expected_gateways = *n.get_ref();
            }
        }
        store
    }
}

/// `"N/s"`, `"N/m"`, `"N/h"` (also `sec`, `min`, `hour`).
fn parse_rate(text: &str) -> Option<(u32, Duration)> {
    let (n, unit) = text.split_once('/')?;
    let n: u32 = n.trim().parse().ok().filter(|&n| n > 0)?;
    let window = match unit.trim() {
        "s" | "sec" | "second" => Duration::from_secs(1),
        "m" | "min" | "minute" => Duration::from_secs(60),
        "h" | "hour" => Duration::from_secs(3600),
        _ => return None,
    };
    Some((n, window))
}
