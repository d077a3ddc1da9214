//! `[route.cache]` and `[cache]`.

use super::Cx;
use crate::HashKey;
use crate::policy::{CacheKey, CacheSettings, RouteCache};
use crate::raw::*;
use toml::Spanned;

/// The smallest `[cache] max_size`: below it every page of a site is larger than the
/// largest entry stored (an eighth of the bound).
const MIN_SIZE: u64 = 1 << 20;

impl Cx<'_> {
    pub(super) fn route_cache(&mut self, route: &str, raw: &Spanned<RawRouteCache>) -> RouteCache {
        let r = raw.get_ref();
        let mut c = RouteCache {
            default_ttl: self.duration(r.default_ttl.as_ref()),
            allow_authorization: r.allow_authorization.as_ref().is_some_and(|b| *b.get_ref()),
            allow_set_cookie: r.allow_set_cookie.as_ref().is_some_and(|b| *b.get_ref()),
            ..RouteCache::default()
        };
        if let Some(t) = self.duration(r.lock_timeout.as_ref()) {
            c.lock_timeout = t;
        }
        if let Some(n) = &r.upgrade_after {
            c.upgrade_after = *n.get_ref();
        }
        if let Some(b) = &r.cache_status {
            c.cache_status = *b.get_ref();
        }
        if let Some(list) = &r.key {
            c.key = CacheKey {
                query: false,
                parts: Vec::new(),
            };
            for item in list.get_ref() {
                if item.get_ref() == "query" {
                    c.key.query = true;
                } else if let Some(part) = self.cache_part(route, "key", item) {
                    c.key.parts.push(part);
                }
            }
        }
        for item in r.bypass.iter().flat_map(|l| l.get_ref()) {
            if let Some(part) = self.cache_part(route, "bypass", item) {
                c.bypass.push(part);
            }
        }
        if let Some(h) = &r.status_header {
            let text = h.get_ref();
            c.status_header = if text.is_empty() {
                None
            } else {
                match http::HeaderName::from_bytes(text.as_bytes()) {
                    Ok(name) => Some(name),
                    Err(_) => {
                        self.err_at(
                            h,
                            format!(
                                "route `{route}`: cache status_header `{text}` is not a header name"
                            ),
                            "use letters, digits and '-' (such as \"X-Cache\"), or \"\" for none",
                        );
                        None
                    }
                }
            };
        }
        c
    }

    /// One item of `[route.cache] key` or `bypass`: a header, cookie or query argument.
    fn cache_part(&mut self, route: &str, what: &str, item: &Spanned<String>) -> Option<HashKey> {
        match super::upstream::hash_key(item.get_ref()) {
            Some(k @ (HashKey::Header(_) | HashKey::Cookie(_) | HashKey::Query(_))) => Some(k),
            _ => {
                let also = if what == "key" {
                    "\"query\" (the whole query string), "
                } else {
                    ""
                };
                self.err_at(
                    item,
                    format!(
                        "route `{route}`: cache {what} item \"{}\" is not a request part",
                        item.get_ref()
                    ),
                    format!("use {also}\"header:NAME\", \"cookie:NAME\" or \"query:NAME\""),
                );
                None
            }
        }
    }

    pub(super) fn cache_settings(&mut self, raw: Option<&RawCache>) -> CacheSettings {
        let mut s = CacheSettings::default();
        let Some(raw) = raw else {
            return s;
        };
        if let Some(n) = self.size(raw.max_size.as_ref()) {
            if n < MIN_SIZE {
                if let Some(at) = &raw.max_size {
                    self.err_at(
                        at,
                        format!("[cache] max_size of {n} bytes is too small"),
                        "give it at least \"1m\" (an entry may take an eighth of it)",
                    );
                }
            } else {
                s.max_size = n;
            }
        }
        if let Some(n) = self.size(raw.max_object_size.as_ref()) {
            if n == 0 || n > s.max_size {
                if let Some(at) = &raw.max_object_size {
                    self.err_at(
                        at,
                        format!(
                            "[cache] max_object_size of {n} bytes is not between 1 and max_size ({} bytes)",
                            s.max_size
                        ),
                        "give the largest response to store, such as \"32m\", at most max_size",
                    );
                }
            } else {
                s.max_object_size = Some(n);
            }
        }
        if let Some(p) = &raw.upgrade_share_percent {
            if (1..=100).contains(p.get_ref()) {
                s.upgrade_share_percent = *p.get_ref();
            } else {
                self.err_at(
                    p,
                    format!("[cache] upgrade_share_percent {} is not 1 to 100", p.get_ref()),
                    "give the percent of a busy core upgrades may take, such as 1 (the default) or 10",
                );
            }
        }
        if let Some(d) = &raw.disk {
            let d = d.get_ref();
            let max = self.size(d.max_size.as_ref()).unwrap_or(1 << 30);
            if max < MIN_SIZE
                && let Some(at) = &d.max_size
            {
                self.err_at(
                    at,
                    format!("[cache.disk] max_size of {max} bytes is too small"),
                    "give it at least \"1m\"",
                );
            }
            if d.path.get_ref().is_empty() {
                self.err_at(
                    &d.path,
                    "[cache.disk] path is empty",
                    "name a directory, such as \"/var/cache/sluice\"",
                );
            }
            s.disk = Some((self.base_dir.join(d.path.get_ref()), max));
        }
        s
    }
}
