//! `[[route]]`: matching rules and the upstream they send to.

use super::{Cx, RawConfig};
use crate::auth::{Cors, RouteAuth};
use crate::compression::*;
use crate::lua::RouteLua;
use crate::paths::ForwardPath;
use crate::pattern::HostPattern;
use crate::policy::{Answer, HeaderEdits, RouteCache};
use crate::raw::*;
use crate::snapshot::*;
use crate::waf::{RouteWaf, WafSettings};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use toml::Spanned;

/// What a route matches. `path` is `None` when it has a mistake (reported): the route then
/// fails, once the keys after it are checked too.
struct RouteMatch {
    hosts: Vec<HostPattern>,
    path: Option<PathMatch>,
    methods: Vec<http::Method>,
    headers: Vec<(http::HeaderName, http::HeaderValue)>,
    listeners: Vec<String>,
}

/// Whether an entry of a section (`"upstream"`, `"listener"`) failed to parse: a reference
/// to it is not reported again as undefined.
type IsBroken<'a> = dyn Fn(&str, &str) -> bool + 'a;

impl Cx<'_> {
    /// Every `[[route]]` that loads; one with a mistake is reported and left out.
    pub(super) fn routes(
        &mut self,
        raw: &RawConfig,
        upstream_names: &HashMap<String, usize>,
        listener_names: &HashMap<String, usize>,
        compression: &Arc<Compression>,
    ) -> Vec<Arc<Route>> {
        let mut route_names = HashMap::new();
        let mut routes = Vec::new();
        for r in &raw.routes {
            self.unique(&mut route_names, &r.name, "route", routes.len());
            if let Some(route) =
                self.route(r, upstream_names, listener_names, &raw.broken, compression)
            {
                routes.push(Arc::new(route));
            }
        }
        routes
    }

    /// A route's `[route.waf]` names a rule set of `[waf]`, and its `[route.mqtt]` brokers
    /// are on a hash ring: checks against the rest of the configuration.
    pub(super) fn check_route_tables(
        &mut self,
        raw: &RawConfig,
        routes: &[Arc<Route>],
        upstreams: &[Arc<Upstream>],
        waf: &WafSettings,
    ) {
        for (r, raw_r) in routes.iter().zip(&raw.routes) {
            if let (Some(w), Some(at)) = (&r.waf, &raw_r.waf) {
                self.waf_ruleset_exists(&r.name, &w.ruleset, at, waf);
            }
            if let (Some(m), Some(at)) = (&r.mqtt, &raw_r.mqtt) {
                let owner = format!("route `{}` [route.mqtt]", r.name);
                let (u, raw_u) = (&upstreams[m.upstream], &raw.upstreams[m.upstream]);
                self.mqtt_brokers_hashed(&owner, at.span().start, u, raw_u);
            }
        }
    }

    /// A TCP listener sends every connection to its upstream: no route applies there.
    pub(super) fn check_no_route_on_tcp(&mut self, raw: &RawConfig, listeners: &[Listener]) {
        for r in &raw.routes {
            for l in r.listeners.iter().flatten() {
                let tcp = listeners
                    .iter()
                    .any(|x| x.name == *l.get_ref() && !matches!(x.kind, ListenerKind::Http));
                if tcp {
                    self.err_at(
                        l,
                        format!(
                            "route `{}` names listener `{}`, a kind = \"tcp\" listener, which does not route requests",
                            r.name.get_ref(),
                            l.get_ref()
                        ),
                        "remove it from the route's listeners: a TCP listener sends every connection to its upstream",
                    );
                }
            }
        }
    }

    /// One `[[route]]`, checked against the names of the configuration it joins; `None` when
    /// it has a mistake (reported).
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
        let matches = self.route_match(&name, raw, listener_names, &is_broken);
        let answer = self.answer(&name, raw);
        let upstream = self.route_upstream(&name, raw, upstream_names, &is_broken, &answer);
        let rate_limit = raw
            .rate_limit
            .as_ref()
            .map(|r| self.rate_limit(&format!("route `{name}`"), r));
        let cache = self.route_cache_for_upstream(&name, raw);
        let acl = self.acl(
            raw.allow.as_ref(),
            raw.deny.as_ref(),
            &format!("route `{name}`"),
        );
        let rewrite = self.rewrite(&name, raw);
        let (request_headers, response_headers) = self.route_header_edits(&name, raw);
        let (split, split_on) = self.split(raw, upstream_names, &is_broken);
        let mirrors = self.mirrors(raw, upstream_names, &is_broken);
        let retry = self.route_retry(&name, raw);
        let (auth, cors) = self.route_auth_and_cors(&name, raw);
        let max_request_body = self.size(raw.max_request_body.as_ref());
        self.subject_needs_auth(&name, raw);
        let lua = self.route_lua_script(&name, raw);
        let waf = self.route_waf_table(&name, raw);
        let mqtt = self.route_mqtt_table(&name, raw, upstream.unwrap_or(None));
        let (Some(matches), Ok(upstream), Ok(waf), Ok(mqtt)) = (matches, upstream, waf, mqtt)
        else {
            return None;
        };
        let forward_path = self.forward_path(raw);
        let path = matches.path?;
        let compression = self.route_compression(raw, compression);
        Some(Route {
            lua,
            waf,
            mqtt,
            auth,
            cors,
            max_request_body,
            request_buffering: raw.request_buffering.as_ref().is_some_and(|b| *b.get_ref()),
            forward_path,
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
            hosts: matches.hosts,
            path,
            methods: matches.methods,
            headers: matches.headers,
            listeners: matches.listeners,
            upstream,
            compression,
        })
    }

    /// What the route matches: `None` when one of `hosts`, `methods`, `headers` or
    /// `listeners` has a mistake, or more than one path key is given (all reported).
    fn route_match(
        &mut self,
        route: &str,
        raw: &RawRoute,
        listener_names: &HashMap<String, usize>,
        is_broken: &IsBroken<'_>,
    ) -> Option<RouteMatch> {
        let hosts = self.route_hosts(route, raw);
        let one_path = self.one_path_key(route, raw);
        let path = self.route_path(route, raw);
        let methods = self.route_methods(route, raw);
        let headers = self.route_headers(route, raw);
        let listeners = self.route_listeners(route, raw, listener_names, is_broken);
        let (Some(hosts), true, Some(methods), Some(headers), Some(listeners)) =
            (hosts, one_path, methods, headers, listeners)
        else {
            return None;
        };
        Some(RouteMatch {
            hosts,
            path,
            methods,
            headers,
            listeners,
        })
    }

    /// `hosts`: the Host patterns the route matches; `None` when one is not a pattern.
    fn route_hosts(&mut self, route: &str, raw: &RawRoute) -> Option<Vec<HostPattern>> {
        let mut ok = true;
        let mut hosts = Vec::new();
        for h in raw.hosts.iter().flatten() {
            match HostPattern::parse(h.get_ref()) {
                Ok(p) => hosts.push(p),
                Err(e) => {
                    ok = false;
                    self.err_at(h, format!("route `{route}`: {e}"), "");
                }
            }
        }
        ok.then_some(hosts)
    }

    /// Whether at most one of `path_exact`, `path_prefix` and `path_regex` is given: a route
    /// matches paths one way.
    fn one_path_key(&mut self, route: &str, raw: &RawRoute) -> bool {
        let given: Vec<&Spanned<String>> = [&raw.path_exact, &raw.path_prefix, &raw.path_regex]
            .into_iter()
            .flatten()
            .collect();
        if given.len() > 1 {
            self.err_at(
                given[1],
                format!(
                    "route `{route}` sets more than one of path_exact, path_prefix and path_regex"
                ),
                "keep one; split the route in two if you need both",
            );
            return false;
        }
        true
    }

    /// The route's path match (every path by default); `None` when it has a mistake.
    fn route_path(&mut self, route: &str, raw: &RawRoute) -> Option<PathMatch> {
        if let Some(p) = &raw.path_exact {
            self.path_literal(route, p).map(PathMatch::Exact)
        } else if let Some(p) = &raw.path_regex {
            match regex::Regex::new(p.get_ref()) {
                Ok(re) => Some(PathMatch::Regex(re)),
                Err(e) => {
                    self.err_at(
                        p,
                        format!("route `{route}`: path_regex does not compile: {e}"),
                        "fix the regular expression (Rust regex syntax)",
                    );
                    None
                }
            }
        } else if let Some(p) = &raw.path_prefix {
            self.path_literal(route, p).map(PathMatch::Prefix)
        } else {
            Some(PathMatch::Prefix("/".to_owned()))
        }
    }

    /// `methods`: upper-case HTTP methods; `None` when one is not.
    fn route_methods(&mut self, route: &str, raw: &RawRoute) -> Option<Vec<http::Method>> {
        let mut ok = true;
        let mut methods = Vec::new();
        for m in raw.methods.iter().flatten() {
            let text = m.get_ref();
            match http::Method::from_bytes(text.as_bytes()) {
                Ok(method) if text.chars().all(|c| c.is_ascii_uppercase()) => methods.push(method),
                _ => {
                    ok = false;
                    self.err_at(
                        m,
                        format!("route `{route}`: `{text}` is not an HTTP method"),
                        "use upper-case methods such as \"GET\", \"POST\"",
                    );
                }
            }
        }
        ok.then_some(methods)
    }

    /// `headers`: the request headers the route matches; `None` when one is not a valid
    /// header.
    fn route_headers(
        &mut self,
        route: &str,
        raw: &RawRoute,
    ) -> Option<Vec<(http::HeaderName, http::HeaderValue)>> {
        let mut ok = true;
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
                    self.err_at(v, format!("route `{route}`: header match `{k}` is not a valid header name and value"), "use a header name of letters, digits and '-' and a printable value");
                }
            }
        }
        ok.then_some(headers)
    }

    /// `listeners`: the listeners the route serves on (all by default); `None` when one is
    /// not defined.
    fn route_listeners(
        &mut self,
        route: &str,
        raw: &RawRoute,
        listener_names: &HashMap<String, usize>,
        is_broken: &IsBroken<'_>,
    ) -> Option<Vec<String>> {
        let mut ok = true;
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
                        "route `{route}` names listener `{}`, which is not defined",
                        l.get_ref()
                    ),
                    format!("use one of: {}", known.join(", ")),
                );
            }
            listeners.push(l.get_ref().clone());
        }
        ok.then_some(listeners)
    }

    /// `upstream`: the index of the upstream the route sends to, `None` for a route that
    /// answers itself (`answer`, or a `[route.lua] content` script); `Err` when it names no
    /// defined upstream, or has neither.
    fn route_upstream(
        &mut self,
        route: &str,
        raw: &RawRoute,
        upstream_names: &HashMap<String, usize>,
        is_broken: &IsBroken<'_>,
        answer: &Option<Answer>,
    ) -> Result<Option<usize>, ()> {
        // A `[route.lua] content` script answers the request as `respond` does.
        let content = raw.lua.as_ref().is_some_and(|l| {
            let l = l.get_ref();
            l.content.is_some() || l.content_file.is_some()
        });
        let Some(u) = &raw.upstream else {
            // A route with a misspelt key (`upstrem`) has had that reported already.
            if answer.is_none() && !content && !is_broken("route", route) {
                self.err(
                    raw.name.span().start,
                    format!("route `{route}` has no upstream"),
                    "add upstream = \"NAME\", or answer with redirect = { location = \"…\" }, respond = { status = 200 } or [route.lua] content",
                );
            }
            let answered = answer.is_some() || content;
            return answered.then_some(None).ok_or(());
        };
        let found = upstream_names.get(u.get_ref()).copied();
        if found.is_none() && !is_broken("upstream", u.get_ref()) {
            let mut known: Vec<&str> = upstream_names.keys().map(String::as_str).collect();
            known.sort_unstable();
            self.err_at(
                u,
                format!(
                    "route `{route}` sends to upstream `{}`, which is not defined",
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
        found.map(Some).ok_or(())
    }

    /// `[route.cache]`, which stores what an upstream answers: refused on a route without one.
    fn route_cache_for_upstream(&mut self, route: &str, raw: &RawRoute) -> Option<Arc<RouteCache>> {
        raw.cache.as_ref().map(|c| {
            if raw.upstream.is_none() {
                self.err_at(
                    c,
                    format!("route `{route}` has [route.cache] but no upstream"),
                    "caching stores upstream responses: remove [route.cache] from a route that answers itself",
                );
            }
            Arc::new(self.route_cache(route, c))
        })
    }

    /// `request_headers` and `response_headers`: what the route adds, sets and removes.
    fn route_header_edits(&mut self, route: &str, raw: &RawRoute) -> (HeaderEdits, HeaderEdits) {
        let request_headers = self.header_edits(
            raw.request_headers.as_ref(),
            &format!("route `{route}`: request_headers"),
        );
        let response_headers = self.header_edits(
            raw.response_headers.as_ref(),
            &format!("route `{route}`: response_headers"),
        );
        (request_headers, response_headers)
    }

    /// `[route.retry]`: when and how often a failed request is tried again.
    fn route_retry(&mut self, route: &str, raw: &RawRoute) -> RetryPolicy {
        raw.retry
            .as_ref()
            .map(|r| self.retry(route, r))
            .unwrap_or_default()
    }

    /// `[route.lua]`: the route's scripts.
    fn route_lua_script(&mut self, route: &str, raw: &RawRoute) -> Option<Arc<RouteLua>> {
        raw.lua
            .as_ref()
            .and_then(|l| self.route_lua(route, l))
            .map(Arc::new)
    }

    /// `[route.waf]`; `Err` when it has a mistake (reported), which fails the route.
    fn route_waf_table(
        &mut self,
        route: &str,
        raw: &RawRoute,
    ) -> Result<Option<Arc<RouteWaf>>, ()> {
        (raw.waf.as_ref())
            .map(|w| self.route_waf(route, w).map(Arc::new).ok_or(()))
            .transpose()
    }

    /// `[route.mqtt]` over the route's `upstream`; `Err` when it has a mistake (reported),
    /// which fails the route.
    fn route_mqtt_table(
        &mut self,
        route: &str,
        raw: &RawRoute,
        upstream: Option<usize>,
    ) -> Result<Option<Arc<MqttProxy>>, ()> {
        (raw.mqtt.as_ref())
            .map(|m| {
                self.route_mqtt(route, m, upstream, raw)
                    .map(Arc::new)
                    .ok_or(())
            })
            .transpose()
    }

    /// `[route.auth]` and `[route.cors]`: who may call the route, and from which pages.
    fn route_auth_and_cors(
        &mut self,
        route: &str,
        raw: &RawRoute,
    ) -> (Option<Arc<RouteAuth>>, Option<Arc<Cors>>) {
        let auth = raw
            .auth
            .as_ref()
            .and_then(|a| self.auth(&format!("route `{route}`"), route, a))
            .map(Arc::new);
        let cors = raw
            .cors
            .as_ref()
            .and_then(|c| self.cors(&format!("route `{route}`"), c))
            .map(Arc::new);
        (auth, cors)
    }

    /// A rate limit keyed on `"subject"` counts who `[route.auth]` accepted, so it needs one.
    fn subject_needs_auth(&mut self, route: &str, raw: &RawRoute) {
        if let (Some(r), None) = (&raw.rate_limit, &raw.auth)
            && r.get_ref()
                .key
                .as_ref()
                .is_some_and(|k| k.get_ref() == "subject")
        {
            self.err_at(
                r,
                format!("route `{route}`: rate_limit key = \"subject\" without [route.auth]"),
                "add [route.auth] (the subject is who it accepted), or limit by \"client\"",
            );
        }
    }

    /// `forward_path` (default normalized): which form of the path the upstream is sent.
    fn forward_path(&mut self, raw: &RawRoute) -> ForwardPath {
        self.choice(
            raw.forward_path.as_ref(),
            "forward_path",
            &[
                ("normalized", ForwardPath::Normalized),
                ("original", ForwardPath::Original),
            ],
        )
        .unwrap_or_default()
    }

    /// `[route.compression]` over the configuration's `[compression]`.
    fn route_compression(&mut self, raw: &RawRoute, base: &Arc<Compression>) -> Arc<Compression> {
        match &raw.compression {
            None => base.clone(),
            Some(c) => self.compression(
                base,
                Some(c),
                &format!("route `{}`: [route.compression]", raw.name.get_ref()),
            ),
        }
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
        let settings = self.mqtt_settings(Some(super::listener::mqtt::MqttConnectKeys {
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
