//! `[[route]]`: matching rules and the upstream they send to.

use super::Cx;
use crate::compression::*;
use crate::paths::ForwardPath;
use crate::pattern::HostPattern;
use crate::raw::*;
use crate::snapshot::*;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use toml::Spanned;

impl Cx<'_> {
    pub(super) fn route(
        &mut self,
        raw: &RawRoute,
        upstream_names: &HashMap<String, usize>,
        listener_names: &HashMap<String, usize>,
        broken: &HashMap<&'static str, HashSet<String>>,
        compression: &Arc<Compression>,
    ) -> Option<Route> {
        let is_broken = |kind: &str, n: &str| broken.get(kind).is_some_and(|set| set.contains(n));
        let name = raw.name.get_ref().clone();
        let mut ok = true;
        let mut hosts = Vec::new();
        for h in raw.hosts.iter().flatten() {
            match HostPattern::parse(h.get_ref()) {
                Ok(p) => hosts.push(p),
                Err(e) => {
                    ok = false;
                    self.err_at(h, format!("route `{name}`: {e}"), "");
                }
            }
        }
        let given: Vec<&Spanned<String>> = [&raw.path_exact, &raw.path_prefix, &raw.path_regex]
            .into_iter()
            .flatten()
            .collect();
        if given.len() > 1 {
            ok = false;
            self.err_at(
                given[1],
                format!(
                    "route `{name}` sets more than one of path_exact, path_prefix and path_regex"
                ),
                "keep one; split the route in two if you need both",
            );
        }
        let path = if let Some(p) = &raw.path_exact {
            self.path_literal(&name, p).map(PathMatch::Exact)
        } else if let Some(p) = &raw.path_regex {
            match regex::Regex::new(p.get_ref()) {
                Ok(re) => Some(PathMatch::Regex(re)),
                Err(e) => {
                    self.err_at(
                        p,
                        format!("route `{name}`: path_regex does not compile: {e}"),
                        "fix the regular expression (Rust regex syntax)",
                    );
                    None
                }
            }
        } else if let Some(p) = &raw.path_prefix {
            self.path_literal(&name, p).map(PathMatch::Prefix)
        } else {
            Some(PathMatch::Prefix("/".to_owned()))
        };
        let mut methods = Vec::new();
        for m in raw.methods.iter().flatten() {
            let text = m.get_ref();
            match http::Method::from_bytes(text.as_bytes()) {
                Ok(method) if text.chars().all(|c| c.is_ascii_uppercase()) => methods.push(method),
                _ => {
                    ok = false;
                    self.err_at(
                        m,
                        format!("route `{name}`: `{text}` is not an HTTP method"),
                        "use upper-case methods such as \"GET\", \"POST\"",
                    );
                }
            }
        }
        let mut headers = Vec::new();
        for (k, v) in raw.headers.iter().flatten() {
            match (
                http::HeaderName::from_bytes(k.as_bytes()),
                http::HeaderValue::from_str(v.get_ref()),
            ) {
                (Ok(hn), Ok(hv)) => {
                    headers.push((hn, hv));
                }
                _ => {
                    ok = false;
                    self.err_at(v, format!("route `{name}`: header match `{k}` is not a valid header name and value"), "use a header name of letters, digits and '-' and a printable value");
                }
            }
        }
        let mut listeners = Vec::new();
        for l in raw.listeners.iter().flatten() {
            if !listener_names.contains_key(l.get_ref()) {
                ok = false;
                if is_broken("listener", l.get_ref()) {
                    continue;
                }
                let known: Vec<&str> = listener_names.keys().map(String::as_str).collect();
                self.err_at(
                    l,
                    format!(
                        "route `{name}` names listener `{}`, which is not defined",
                        l.get_ref()
                    ),
                    format!("use one of: {}", known.join(", ")),
                );
            }
            listeners.push(l.get_ref().clone());
        }
        let answer = self.answer(&name, raw);
        // A `[route.lua] content` script answers the request as `respond` does.
        let content = raw.lua.as_ref().is_some_and(|l| {
            let l = l.get_ref();
            l.content.is_some() || l.content_file.is_some()
        });
        let upstream = match &raw.upstream {
            None => {
                ok &= answer.is_some() || content;
                // A route with a misspelt key (`upstrem`) has had that reported already.
                if answer.is_none() && !content && !is_broken("route", &name) {
                    self.err(
                        raw.name.span().start,
                        format!("route `{name}` has no upstream"),
                        "add upstream = \"NAME\", or answer with redirect = { location = \"…\" }, respond = { status = 200 } or [route.lua] content",
                    );
                }
                None
            }
            Some(u) => {
                let found = upstream_names.get(u.get_ref()).copied();
                if found.is_none() && !is_broken("upstream", u.get_ref()) {
                    let mut known: Vec<&str> = upstream_names.keys().map(String::as_str).collect();
                    known.sort_unstable();
                    self.err_at(
                        u,
                        format!(
                            "route `{name}` sends to upstream `{}`, which is not defined",
                            u.get_ref()
                        ),
                        if known.is_empty() {
                            "add an [[upstream]] with that name".to_owned()
                        } else {
                            format!(
                                "fix the name or add an [[upstream]] with it (defined: {})",
                                known.join(", ")
                            )
                        },
                    );
                }
                if found.is_none() {
                    ok = false;
                }
                found
            }
        };
        let rate_limit = raw
            .rate_limit
            .as_ref()
            .map(|r| self.rate_limit(&format!("route `{name}`"), r));
        let cache = raw.cache.as_ref().map(|c| {
            if raw.upstream.is_none() {
                self.err_at(
                    c,
                    format!("route `{name}` has [route.cache] but no upstream"),
                    "caching stores upstream responses: remove [route.cache] from a route that answers itself",
                );
            }
            Arc::new(self.route_cache(&name, c))
        });
        let acl = self.acl(
            raw.allow.as_ref(),
            raw.deny.as_ref(),
            &format!("route `{name}`"),
        );
        let rewrite = self.rewrite(&name, raw);
        let request_headers = self.header_edits(
            raw.request_headers.as_ref(),
            &format!("route `{name}`: request_headers"),
        );
        let response_headers = self.header_edits(
            raw.response_headers.as_ref(),
            &format!("route `{name}`: response_headers"),
        );
        let (split, split_on) = self.split(raw, upstream_names, &is_broken);
        let mirrors = self.mirrors(raw, upstream_names, &is_broken);
        let retry = raw
            .retry
            .as_ref()
            .map(|r| self.retry(&name, r))
            .unwrap_or_default();
        let auth = raw
            .auth
            .as_ref()
            .and_then(|a| self.auth(&format!("route `{name}`"), &name, a))
            .map(Arc::new);
        let cors = raw
            .cors
            .as_ref()
            .and_then(|c| self.cors(&format!("route `{name}`"), c))
            .map(Arc::new);
        let max_request_body = self.size(raw.max_request_body.as_ref());
        if let (Some(r), None) = (&raw.rate_limit, &raw.auth)
            && r.get_ref()
                .key
                .as_ref()
                .is_some_and(|k| k.get_ref() == "subject")
        {
            self.err_at(
                r,
                format!("route `{name}`: rate_limit key = \"subject\" without [route.auth]"),
                "add [route.auth] (the subject is who it accepted), or limit by \"client\"",
            );
        }
        let lua = raw
            .lua
            .as_ref()
            .and_then(|l| self.route_lua(&name, l))
            .map(Arc::new);
        let waf = match &raw.waf {
            Some(w) => match self.route_waf(&name, w) {
                Some(w) => Some(Arc::new(w)),
                None => {
                    ok = false;
                    None
                }
            },
            None => None,
        };
        let mqtt = match (&raw.mqtt, upstream) {
            (None, _) => None,
            (Some(m), upstream) => match self.route_mqtt(&name, m, upstream, raw) {
                Some(m) => Some(Arc::new(m)),
                None => {
                    ok = false;
                    None
                }
            },
        };
        if !ok {
            return None;
        }
        Some(Route {
            lua,
            waf,
            mqtt,
            auth,
            cors,
            max_request_body,
            request_buffering: raw.request_buffering.as_ref().is_some_and(|b| *b.get_ref()),
            forward_path: self
                .choice(
                    raw.forward_path.as_ref(),
                    "forward_path",
                    &[
                        ("normalized", ForwardPath::Normalized),
                        ("original", ForwardPath::Original),
                    ],
                )
                .unwrap_or_default(),
            rate_limit,
            cache,
            mirrors,
            acl,
            rewrite,
            answer,
            request_headers,
            response_headers,
            retry,
            split,
            split_on,
            name,
            hosts,
            path: path?,
            methods,
            headers,
            listeners,
            upstream,
            compression: match &raw.compression {
                None => compression.clone(),
                Some(c) => self.compression(
                    compression,
                    Some(c),
                    &format!("route `{}`: [route.compression]", raw.name.get_ref()),
                ),
            },
        })
    }

    pub(super) fn path_literal(&mut self, route: &str, p: &Spanned<String>) -> Option<String> {
        if p.get_ref().starts_with('/') {
            Some(p.get_ref().clone())
        } else {
            self.err_at(
                p,
                format!(
                    "route `{route}`: path `{}` does not start with '/'",
                    p.get_ref()
                ),
                format!("write it as \"/{}\"", p.get_ref()),
            );
            None
        }
    }
}

impl Cx<'_> {
    /// `[route.retry]`.
    fn retry(&mut self, route: &str, raw: &toml::Spanned<RawRetry>) -> RetryPolicy {
        let r = raw.get_ref();
        let mut p = RetryPolicy::default();
        if let Some(a) = &r.attempts {
            match std::num::NonZeroU32::new(*a.get_ref()) {
                Some(n) if n.get() <= 10 => p.attempts = n,
                _ => self.err_at(
                    a,
                    format!(
                        "route `{route}`: retry attempts = {} is out of range",
                        a.get_ref()
                    ),
                    "use 1 (no retry) to 10; attempts count the first try",
                ),
            }
        }
        if let Some(on) = &r.on {
            p.on_connect = false;
            p.on_reset = false;
            for cond in on {
                match cond.get_ref().as_str() {
                    "connect" => p.on_connect = true,
                    "reset" => p.on_reset = true,
                    "timeout" => p.on_timeout = true,
                    "5xx" => p.on_5xx = true,
                    other => self.err_at(
                        cond,
                        format!("route `{route}`: retry on `{other}` is not a condition"),
                        "use \"connect\", \"reset\", \"timeout\" or \"5xx\"",
                    ),
                }
            }
        }
        if let Some(v) = &r.retry_non_idempotent {
            p.non_idempotent = *v.get_ref();
        }
        if let Some(b) = &r.backoff {
            p.backoff = crate::units::parse_duration(b.get_ref()).unwrap_or_else(|e| {
                self.err_at(
                    b,
                    format!("route `{route}`: retry backoff: {e}"),
                    "use a duration such as \"25ms\", or \"0s\" for none",
                );
                p.backoff
            });
        }
        if let Some(m) = self.duration(r.backoff_max.as_ref()) {
            p.backoff_max = m;
        }
        p.per_try_timeout = self.duration(r.per_try_timeout.as_ref());
        p.timeout = self.duration(r.timeout.as_ref());
        p
    }
}

impl Cx<'_> {
    /// `[route.mqtt]`: the CONNECT's limits and what routes a device, with the route's own
    /// upstream as the brokers (`None`, reported, when it has none or a mistake). What the
    /// WebSocket's bytes would pass through is refused: a cache, mirrors, a traffic split.
    fn route_mqtt(
        &mut self,
        name: &str,
        raw: &Spanned<RawRouteMqtt>,
        upstream: Option<usize>,
        route: &RawRoute,
    ) -> Option<MqttProxy> {
        let m = raw.get_ref();
        let settings = self.mqtt_settings(Some(super::listener::MqttConnectKeys {
            connect_timeout: m.connect_timeout.as_ref(),
            max_connect_size: m.max_connect_size.as_ref(),
            route_by: m.route_by.as_ref(),
            client_id_pattern: m.client_id_pattern.as_ref(),
        }));
        let conflicts = [
            ("[route.cache]", route.cache.is_some()),
            ("[[route.mirror]]", route.mirror.is_some()),
            ("[[route.split]]", route.split.is_some()),
        ];
        if let Some((what, _)) = conflicts.iter().find(|(_, set)| *set) {
            self.err_at(
                raw,
                format!("route `{name}`: [route.mqtt] relays each device's connection to its broker, which {what} cannot take part in"),
                format!("remove {what} from this route"),
            );
            return None;
        }
        let Some(upstream) = upstream else {
            if route.upstream.is_none() {
                self.err_at(
                    raw,
                    format!("route `{name}`: [route.mqtt] needs the brokers as the route's upstream"),
                    "add upstream = \"brokers\" (an [[upstream]] with balance = \"consistent_hash\")",
                );
            }
            return None;
        };
        let max_connections_per_client_id = self.mqtt_client_id_cap(
            &format!("route `{name}` [route.mqtt]"),
            m.max_connections_per_client_id.as_ref(),
            m.max_connections_store.as_ref(),
        );
        let admission = self.route_mqtt_admission(name, m);
        let (connect_timeout, max_connect_size, route_by, client_id_pattern) = settings?;
        let admission = admission?;
        Some(MqttProxy {
            upstream,
            connect_timeout,
            max_connect_size,
            route_by,
            client_id_pattern,
            auth: admission.auth,
            rate_per_client: admission.rate_per_client,
            rate_per_client_id: admission.rate_per_client_id,
            max_connections_per_client_id,
            certificate_identity: admission.certificate_identity,
            idle_timeout: admission.idle_timeout,
        })
    }

    /// `[route.mqtt]`'s admission keys, as `[listener.mqtt]`'s: a device over WebSocket is
    /// admitted by the same rules as over TCP. `None` when one has a mistake (reported).
    fn route_mqtt_admission(&mut self, name: &str, m: &RawRouteMqtt) -> Option<MqttAdmission> {
        let before = self.errors.len();
        let owner = |table: &str| format!("route `{name}` [route.mqtt.{table}]");
        let auth = self.mqtt_auth(&owner("auth"), name, m.auth.as_ref());
        let rate_per_client =
            (m.rate_per_client.as_ref()).map(|r| self.mqtt_rate(&owner("rate_per_client"), r));
        let rate_per_client_id = (m.rate_per_client_id.as_ref())
            .map(|r| self.mqtt_rate(&owner("rate_per_client_id"), r));
        let certificate_identity = self.choice(
            m.certificate_identity.as_ref(),
            "certificate_identity",
            &[
                ("client_id", MqttRouteBy::ClientId),
                ("username", MqttRouteBy::Username),
            ],
        );
        let idle_timeout = self
            .duration(m.idle_timeout.as_ref())
            .unwrap_or(std::time::Duration::from_secs(600));
        if self.errors.len() != before {
            return None;
        }
        Some(MqttAdmission {
            auth: auth.ok()?,
            rate_per_client,
            rate_per_client_id,
            certificate_identity,
            idle_timeout,
        })
    }
}

/// `[route.mqtt]`'s keys that admit a device, beside the CONNECT's limits.
struct MqttAdmission {
    auth: Option<Arc<crate::RouteAuth>>,
    rate_per_client: Option<crate::RateLimit>,
    rate_per_client_id: Option<crate::RateLimit>,
    certificate_identity: Option<MqttRouteBy>,
    idle_timeout: std::time::Duration,
}
