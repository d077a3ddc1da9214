//! A route's filters, by phase, resolved when a configuration is applied.
//!
//! Every optional feature of a route is a filter registered at one phase of the request path
//! (docs/ARCHITECTURE.md, "The request path", lists the phases and what a filter may change
//! at each). [`RoutePlan::resolve`] lists the filters a route uses, in their documented
//! order, once per configuration; a request runs its route's lists and nothing else, so a
//! route without a feature pays no check for it. The lists are enums dispatched by `match`
//! (no boxed trait objects, no allocation per request); the phases that run them are in
//! `phases` (before the upstream) and `proxy` (upstream request and response).
//!
//! Adding a feature: a variant at its phase, a line in `resolve` at its place in the order,
//! its arm where the phase runs the list, and its row in ARCHITECTURE.md's table.

use crate::request::rate_limit::RateLimiter;
use crate::request::router::Router;
use sluice_auth::Authenticator;
use sluice_config::{LuaPhase, Route};
use sluice_lua::{LuaRuntime, RouteScripts};
use std::collections::HashMap;
use std::sync::Arc;

/// The state of the routes' filters that outlives a request and carries across reloads
/// while a route's settings stay: rate limiters and authenticators, by route name.
#[derive(Debug, Default)]
pub(crate) struct RouteGuards {
    pub(crate) limiters: HashMap<String, Arc<RateLimiter>>,
    pub(crate) auth: HashMap<String, Arc<Authenticator>>,
    /// `[auth]`: where the authenticators (routes' and MQTT listeners') hash passwords;
    /// kept across reloads while its size stays.
    pub(crate) hashing: Arc<sluice_auth::HashPool>,
    /// The configuration's Lua states, where a route has a script.
    pub(crate) lua: Option<Arc<LuaRuntime>>,
    /// The configuration's firewall, where a route has `[route.waf]`.
    pub(crate) waf: Option<Arc<sluice_waf::WafRuntime>>,
}

/// A route and its filters by phase.
#[derive(Debug)]
pub(crate) struct RoutePlan {
    pub(crate) route: Arc<Route>,
    /// Phase `access`, in order: may end the request (403, 429) or wait (a delaying limit).
    pub(crate) access: Box<[Access]>,
    /// Phase `upstream_request`: edits of the request's head sent upstream, after the
    /// gateway's own (hop-by-hop fields out, `Host`, forwarding fields).
    pub(crate) upstream_request: Box<[UpstreamRequest]>,
    /// Phase `upstream_response`: edits of the response's head, before the gateway's own
    /// (request ID, cache status, sticky cookie) and compression.
    pub(crate) upstream_response: Box<[UpstreamResponse]>,
    /// `[route.lua]`: the route's scripts (a request takes its state at phase `access`;
    /// `header_filter` and `body_filter` run on the upstream response, `log` at its end).
    pub(crate) lua: Option<Arc<RouteScripts>>,
    /// The route's authenticator where it reads a credential from the query: masked in the
    /// log at the start of `access`, whatever ends the request.
    pub(crate) query_credentials: Option<Arc<Authenticator>>,
}

/// A filter of phase `access`.
#[derive(Debug)]
pub(crate) enum Access {
    /// `[route.lua] rewrite`: first, as OpenResty's rewrite phase comes before access.
    LuaRewrite,
    /// `[route.acl]`: a client outside it is refused (403).
    Acl,
    /// `[route.cors]`: a preflight is answered here (204), before authentication (a
    /// browser sends no credentials with one).
    CorsPreflight,
    /// `[route.auth]`: who the request comes from (401, 403, 500, 503 with the hashing pool
    /// full), its subject and headers for the upstream request.
    Auth(Arc<Authenticator>),
    /// `[route.rate_limit]`: its limiter (kept across reloads while its limit stays). Before
    /// authentication by default (`limit = "before_auth"`), so that refused credentials count
    /// and a client over the limit costs no password check, as NGINX's `limit_req` runs
    /// before `auth_basic`; after it with `limit = "after_auth"` or a limit per subject.
    RateLimit(Arc<RateLimiter>),
    /// `[route.waf]`: the request's head and body through the route's rule set on the
    /// WAF's threads (403 or the rule's status; 503 saturated with `on_overload = "closed"`;
    /// 413 over the body limit). After the cheap refusals (ACL, authentication, the limit),
    /// so that rule evaluation is spent only on requests they let through.
    Waf(Arc<sluice_waf::RouteFirewall>),
    /// `[route.lua] access`: after authentication and the limit, as OpenResty's
    /// `access_by_lua` runs at the end of its access phase.
    Lua,
    /// `[route.lua] content`: last; its answer ends the request (`content_by_lua`), so the
    /// route's upstream, `respond` or `redirect` is never reached.
    LuaContent,
}

/// A filter of phase `upstream_request`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum UpstreamRequest {
    /// `[route.request_headers]`: remove, set, add.
    HeaderEdits,
}

/// A filter of phase `upstream_response`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum UpstreamResponse {
    /// `[route.response_headers]`: remove, set, add.
    HeaderEdits,
    /// `[route.cors]`: `Access-Control-Allow-Origin` and the rest for an allowed origin.
    Cors,
}

impl RoutePlan {
    /// `route`'s filters, in phase order; `guards` are the configuration's, by route name.
    pub(crate) fn resolve(route: &Arc<Route>, guards: &RouteGuards) -> Self {
        let mut access = Vec::new();
        let lua = route
            .lua
            .as_ref()
            .and_then(|_| guards.lua.as_ref()?.scripts(&route.name));
        if lua.as_ref().is_some_and(|s| s.has(LuaPhase::Rewrite)) {
            access.push(Access::LuaRewrite);
        }
        if !route.acl.is_empty() {
            access.push(Access::Acl);
        }
        if route.cors.is_some() {
            access.push(Access::CorsPreflight);
        }
        let limit = route
            .rate_limit
            .as_ref()
            .and_then(|l| Some((l.before_auth, guards.limiters.get(&route.name)?)));
        if let Some((true, limiter)) = limit {
            access.push(Access::RateLimit(limiter.clone()));
        }
        if route.auth.is_some()
            && let Some(auth) = guards.auth.get(&route.name)
        {
            access.push(Access::Auth(auth.clone()));
        }
        if let Some((false, limiter)) = limit {
            access.push(Access::RateLimit(limiter.clone()));
        }
        if route.waf.is_some()
            && let Some(firewall) = guards.waf.as_ref().and_then(|w| w.route(&route.name))
        {
            access.push(Access::Waf(firewall.clone()));
        }
        if lua.as_ref().is_some_and(|s| s.has(LuaPhase::Access)) {
            access.push(Access::Lua);
        }
        if lua.as_ref().is_some_and(|s| s.has(LuaPhase::Content)) {
            access.push(Access::LuaContent);
        }
        let mut upstream_request = Vec::new();
        if !route.request_headers.is_empty() {
            upstream_request.push(UpstreamRequest::HeaderEdits);
        }
        let mut upstream_response = Vec::new();
        if !route.response_headers.is_empty() {
            upstream_response.push(UpstreamResponse::HeaderEdits);
        }
        if route.cors.is_some() {
            upstream_response.push(UpstreamResponse::Cors);
        }
        let query_credentials = access.iter().find_map(|f| match f {
            Access::Auth(a) if !a.query_credentials().is_empty() => Some(a.clone()),
            _ => None,
        });
        RoutePlan {
            route: route.clone(),
            access: access.into(),
            upstream_request: upstream_request.into(),
            upstream_response: upstream_response.into(),
            lua,
            query_credentials,
        }
    }
}

/// The plans of `router`'s routes, in its order (`Router::find_index` indexes them).
pub(crate) fn plans(router: &Router, guards: &RouteGuards) -> Arc<[RoutePlan]> {
    router
        .routes()
        .iter()
        .map(|r| RoutePlan::resolve(r, guards))
        .collect()
}

/// The route plans of `router`: resolved once per distinct table in an apply (listeners that
/// share a table share its plans), kept in `made`.
pub(crate) fn plans_for(
    made: &mut Vec<(Arc<Router>, Arc<[RoutePlan]>)>,
    router: &Arc<Router>,
    guards: &RouteGuards,
) -> Arc<[RoutePlan]> {
    if let Some((_, plans)) = made.iter().find(|(r, _)| Arc::ptr_eq(r, router)) {
        return plans.clone();
    }
    let plans = crate::request::filters::plans(router, guards);
    made.push((router.clone(), plans.clone()));
    plans
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(toml: &str) -> Arc<Route> {
        let text = format!(
            "[[listener]]\nname = \"l\"\naddress = \"127.0.0.1:0\"\n\
             [[upstream]]\nname = \"u\"\nservers = [{{ address = \"127.0.0.1:9\" }}]\n\
             [[route]]\nname = \"r\"\nupstream = \"u\"\n{toml}"
        );
        let snapshot = sluice_config::load_str(&text, "r.toml", std::path::Path::new("."))
            .expect("a valid configuration");
        snapshot.routes[0].clone()
    }

    #[test]
    fn a_plain_route_has_no_filters() {
        let plan = RoutePlan::resolve(&route(""), &RouteGuards::default());
        assert!(plan.access.is_empty());
        assert!(plan.upstream_request.is_empty());
        assert!(plan.upstream_response.is_empty());
        assert!(
            plan.lua.is_none(),
            "no Lua state is touched for a route without a script"
        );
    }

    /// `rewrite` first (before the ACL), `access` last (after the limit), as OpenResty runs
    /// them; a route without `[route.lua]` in the same configuration gets no script.
    #[test]
    fn lua_scripts_open_and_close_the_access_phase() {
        let r = route(
            "allow = [\"10.0.0.0/8\"]\n\
             [route.lua]\nrewrite = 'ngx.req.set_header(\"a\", \"1\")'\naccess = 'return'\n",
        );
        let snapshot_routes = [r.clone()];
        let lua = sluice_lua::LuaRuntime::build(
            &Arc::new(sluice_config::LuaSettings::default()),
            &snapshot_routes,
            None,
        )
        .unwrap();
        let guards = RouteGuards {
            lua,
            ..RouteGuards::default()
        };
        let plan = RoutePlan::resolve(&r, &guards);
        assert!(matches!(
            &*plan.access,
            [Access::LuaRewrite, Access::Acl, Access::Lua]
        ));
        assert!(plan.lua.is_some());
        let plain = RoutePlan::resolve(&route(""), &guards);
        assert!(plain.access.is_empty() && plain.lua.is_none());
    }

    #[test]
    fn each_feature_registers_at_its_phase_in_order() {
        let r = route(
            "allow = [\"10.0.0.0/8\"]\n\
             rate_limit = { rate = \"10/s\", burst = 5 }\n\
             request_headers = { set = { \"x-a\" = \"1\" } }\n\
             response_headers = { remove = [\"server\"] }\n",
        );
        let store = sluice_config::RateLimitStore::default();
        let mut guards = RouteGuards::default();
        guards.limiters.insert(
            "r".to_owned(),
            Arc::new(RateLimiter::new(
                "r",
                r.rate_limit.clone().unwrap(),
                &store,
                None,
            )),
        );
        let plan = RoutePlan::resolve(&r, &guards);
        assert!(matches!(
            &*plan.access,
            [Access::Acl, Access::RateLimit(l)] if Arc::ptr_eq(l, &guards.limiters["r"])
        ));
        assert_eq!(&*plan.upstream_request, [UpstreamRequest::HeaderEdits]);
        assert_eq!(&*plan.upstream_response, [UpstreamResponse::HeaderEdits]);
    }

    /// A route with `[route.auth]` and `[route.cors]` limited by `limit`, and its guards.
    fn guarded(limit: &str) -> (Arc<Route>, RouteGuards, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let keys = dir.path().join("keys");
        std::fs::write(&keys, sluice_auth::key_line("k", b"secret-key-0123")).unwrap();
        let r = route(&format!(
            "allow = [\"10.0.0.0/8\"]\n\
             rate_limit = {{ rate = \"10/s\"{limit} }}\n\
             [route.auth]\nkeys = {{ file = \"{}\" }}\n\
             [route.cors]\norigins = [\"*\"]\n",
            keys.display()
        ));
        let store = sluice_config::RateLimitStore::default();
        let mut guards = RouteGuards::default();
        let limiter = RateLimiter::new("r", r.rate_limit.clone().unwrap(), &store, None);
        guards.limiters.insert("r".to_owned(), Arc::new(limiter));
        let auth =
            sluice_auth::Authenticator::new(r.auth.as_ref().unwrap(), &guards.hashing).unwrap();
        guards.auth.insert("r".to_owned(), Arc::new(auth));
        (r, guards, dir)
    }

    /// CORS preflights before authentication (a browser sends none with them), and the
    /// limit before authentication by default, so that refused credentials count.
    #[test]
    fn identity_filters_come_after_the_acl_and_the_limit_before_them() {
        let (r, guards, _dir) = guarded("");
        let plan = RoutePlan::resolve(&r, &guards);
        assert!(matches!(
            &*plan.access,
            [Access::Acl, Access::CorsPreflight, Access::RateLimit(_), Access::Auth(a)]
                if Arc::ptr_eq(a, &guards.auth["r"])
        ));
        assert_eq!(&*plan.upstream_response, [UpstreamResponse::Cors]);
    }

    /// `limit = "after_auth"`, and a limit per subject (which only authentication knows):
    /// the limit after authentication.
    #[test]
    fn a_limit_after_auth_or_per_subject_follows_authentication() {
        for limit in [", limit = \"after_auth\"", ", key = \"subject\""] {
            let (r, guards, _dir) = guarded(limit);
            let plan = RoutePlan::resolve(&r, &guards);
            assert!(
                matches!(
                    &*plan.access,
                    [
                        Access::Acl,
                        Access::CorsPreflight,
                        Access::Auth(_),
                        Access::RateLimit(_)
                    ]
                ),
                "{limit}: {:?}",
                plan.access
            );
        }
    }
}
