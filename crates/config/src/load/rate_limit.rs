//! `[route.rate_limit]` and `[rate_limit]`.

use super::{Cx, key_belongs};
use crate::policy::{RateLimit, RateLimitStore, RedisTls};
use crate::raw::*;
use std::time::Duration;
use toml::Spanned;

impl Cx<'_> {
    /// Every `store = "redis"` (recorded in `redis_users` as it was read) needs `[rate_limit]
    /// redis`.
    pub(super) fn check_redis_configured(&mut self, store: &RateLimitStore) {
        if store.redis.is_none() {
            for at in std::mem::take(&mut self.redis_users) {
                self.err(
                    at,
                    "store = \"redis\" shares this limit through Redis, and no Redis is configured",
                    "add [rate_limit] redis = \"redis://127.0.0.1:6379/\", or use store = \"local\" (max_connections_store = \"local\" for an MQTT cap)",
                );
            }
        }
    }

    /// `[route.rate_limit]`, or one of an MQTT listener's connection rates; `route` names its
    /// owner in errors (``route `api` ``).
    pub(super) fn rate_limit(&mut self, route: &str, raw: &Spanned<RawRateLimit>) -> RateLimit {
        let r = raw.get_ref();
        let (quota, window) = match parse_rate(r.rate.get_ref()) {
            Some(v) => v,
            None => {
                self.err_at(
                    &r.rate,
                    format!("{route}: rate `{}` is not a rate", r.rate.get_ref()),
                    "write it as \"5/s\", \"300/m\" or \"1000/h\" (a whole number of requests, at least 1)",
                );
                (1, Duration::from_secs(1))
            }
        };
        let key = match &r.key {
            None => Some(crate::HashKey::Client),
            Some(k) if k.get_ref() == "route" => None,
            Some(k) if k.get_ref() == "subject" => Some(crate::HashKey::Subject),
            Some(k) => match super::upstream::hash_key(k.get_ref()) {
                Some(crate::HashKey::Uri) | None => {
                    self.err_at(
                        k,
                        format!("{route}: rate_limit key `{}` is not a key", k.get_ref()),
                        "use \"client\", \"header:NAME\", \"cookie:NAME\", \"query:NAME\", \"subject\" (with [route.auth]) or \"route\"",
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
                        format!("{route}: rate_limit store `{other}` is not a store"),
                        "use \"local\" or \"redis\"",
                    );
                    false
                }
            },
        };
        if let (true, Some(s)) = (shared, &r.store) {
            self.redis_users.push(s.span().start);
        }
        let before_auth = self.limit_order(route, r, key.as_ref());
        RateLimit {
            quota,
            window,
            burst: r.burst.as_ref().map_or(0, |b| *b.get_ref()),
            nodelay: r.nodelay.as_ref().is_some_and(|n| *n.get_ref()),
            key,
            shared,
            before_auth,
        }
    }

    /// `limit`: whether the limit is checked before the route's credentials (the default,
    /// so that failed logins count) or after them. A limit per subject needs authentication
    /// first: it defaults to after, and asking for before is an error.
    fn limit_order(&mut self, route: &str, r: &RawRateLimit, key: Option<&crate::HashKey>) -> bool {
        let per_subject = key == Some(&crate::HashKey::Subject);
        let before = self
            .choice(
                r.limit.as_ref(),
                "limit",
                &[("before_auth", true), ("after_auth", false)],
            )
            .unwrap_or(!per_subject);
        if before
            && per_subject
            && let Some(at) = &r.limit
        {
            self.err_at(
                at,
                format!(
                    "{route}: rate_limit limit = \"before_auth\" with key = \"subject\": the subject is known only after authentication"
                ),
                "use limit = \"after_auth\" (the default with key = \"subject\"), or key = \"client\" to count failed logins per address",
            );
        }
        before && !per_subject
    }

    pub(super) fn rate_limit_store(
        &mut self,
        raw: Option<&RawRateLimitStore>,
        allow_insecure: bool,
    ) -> RateLimitStore {
        let mut store = RateLimitStore::default();
        let Some(raw) = raw else {
            return store;
        };
        let tls = match &raw.redis {
            Some(url) => match redis_url(url.get_ref()) {
                Ok(tls) => {
                    store.redis = Some(url.get_ref().clone());
                    tls
                }
                Err((problem, fix)) => {
                    self.err_at(url, format!("[rate_limit] redis: {problem}"), fix);
                    false
                }
            },
            None => false,
        };
        store.redis_tls = self.redis_tls(raw, tls, allow_insecure);
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

impl Cx<'_> {
    /// `redis_ca`, `redis_certificate` and `redis_key`, which only a `rediss://` URL uses.
    fn redis_tls(
        &mut self,
        raw: &RawRateLimitStore,
        tls: bool,
        allow_insecure: bool,
    ) -> Option<RedisTls> {
        let files = [&raw.redis_ca, &raw.redis_certificate, &raw.redis_key];
        if !tls {
            if let Some(at) = files.into_iter().flatten().next() {
                self.err_at(
                    at,
                    "[rate_limit]: redis_ca, redis_certificate and redis_key are for TLS, and the redis URL is not rediss://",
                    "write the URL as rediss://host:port/ to reach Redis over TLS, or remove these settings",
                );
            }
            return None;
        }
        let ca = match &raw.redis_ca {
            Some(at) => self.pem_certificates(
                at,
                "[rate_limit] redis_ca",
                "the CA certificates Redis's certificate chains to",
            )?,
            None => Vec::new(),
        };
        let client = match (&raw.redis_certificate, &raw.redis_key) {
            (None, None) => None,
            (Some(at), None) | (None, Some(at)) => {
                self.err_at(
                    at,
                    "[rate_limit]: redis_certificate and redis_key go together",
                    "give both (a client certificate for a Redis with tls-auth-clients) or neither",
                );
                return None;
            }
            (Some(cert_at), Some(key_at)) => {
                let chain = self.pem_certificates(
                    cert_at,
                    "[rate_limit] redis_certificate",
                    "this gateway's client certificate, leaf first",
                );
                let path = self.path(key_at.get_ref());
                let key = self.private_key("[rate_limit] redis_key", key_at, &path, allow_insecure);
                let (chain, key) = (chain?, key?);
                let matches = key_belongs(&chain[0], &key);
                if !matches {
                    self.err_at(
                        key_at,
                        "[rate_limit]: redis_key does not belong to redis_certificate",
                        "give the key the client certificate was issued for",
                    );
                    return None;
                }
                Some((chain, key))
            }
        };
        Some(RedisTls { ca, client })
    }
}

/// Checks a Redis URL as the gateway will use it: `redis://` or `rediss://` (TLS), a host, a
/// port, a database number. Returns whether it asks for TLS, or what is wrong and the fix.
fn redis_url(text: &str) -> Result<bool, (String, &'static str)> {
    const FIX: &str =
        "write it as \"redis://[:password@]host:port/[db]\" or \"rediss://…\" for TLS";
    // Errors show on /status: they never repeat the URL, which may carry a password.
    let url = url::Url::parse(text).map_err(|e| (format!("not a URL: {e}"), FIX))?;
    let tls = match url.scheme() {
        "redis" => false,
        "rediss" => true,
        other => {
            return Err((
                format!("`{other}://` is not served: shared limits reach Redis over TCP"),
                FIX,
            ));
        }
    };
    if url.host_str().is_none_or(str::is_empty) {
        return Err(("the URL names no host".to_owned(), FIX));
    }
    let db = url.path().trim_matches('/');
    if !db.is_empty() && db.parse::<i64>().is_err() {
        return Err((format!("database `{db}` is not a number"), FIX));
    }
    match url.fragment() {
        None => {}
        Some("insecure") => {
            return Err((
                "`#insecure` would turn off the check of Redis's certificate, which Sluice always makes".to_owned(),
                "remove `#insecure`; give the CA that issued Redis's certificate as redis_ca",
            ));
        }
        Some(other) => return Err((format!("`#{other}` means nothing in a Redis URL"), FIX)),
    }
    Ok(tls)
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
