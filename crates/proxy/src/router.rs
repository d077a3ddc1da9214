//! Host and path routing, per listener.
//!
//! Host first, as NGINX picks a `server` before a `location`: the exact name, then the
//! longest matching wildcard, then the routes that name no host. Within that group: an exact
//! path, then regular expressions in file order, then the longest prefix. A route whose method
//! or header conditions fail is skipped; when nothing is left the answer is 404.

use http::{HeaderMap, Method};
use sluice_config::{HostPattern, PathMatch, Route, Snapshot, normalize_host};
use std::collections::HashMap;

/// The routing table of one listener.
#[derive(Debug, Clone)]
pub struct Router {
    routes: Vec<Route>,
    exact: HashMap<String, Vec<usize>>,
    /// (`*.suffix` pattern, routes), longest suffix first.
    wildcard: Vec<(HostPattern, Vec<usize>)>,
    any_host: Vec<usize>,
}

impl Router {
    /// Builds the table for `listener` from the routes that apply to it.
    pub fn new(snapshot: &Snapshot, listener: &str) -> Self {
        let routes: Vec<Route> = snapshot
            .routes
            .iter()
            .filter(|r| r.listeners.is_empty() || r.listeners.iter().any(|l| l == listener))
            .cloned()
            .collect();
        let mut exact: HashMap<String, Vec<usize>> = HashMap::new();
        let mut wildcard: HashMap<String, Vec<usize>> = HashMap::new();
        let mut any_host = Vec::new();
        for (i, r) in routes.iter().enumerate() {
            if r.hosts.is_empty() {
                any_host.push(i);
            }
            for h in &r.hosts {
                match h {
                    HostPattern::Exact(n) => exact.entry(n.clone()).or_default().push(i),
                    HostPattern::Wildcard(s) => wildcard.entry(s.clone()).or_default().push(i),
                }
            }
        }
        let mut wildcard: Vec<_> = wildcard.into_iter().collect();
        wildcard.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0)));
        let wildcard = wildcard
            .into_iter()
            .map(|(s, g)| (HostPattern::Wildcard(s), g))
            .collect();
        Router {
            routes,
            exact,
            wildcard,
            any_host,
        }
    }

    /// The route for a request, or `None` (→ 404).
    pub fn find(
        &self,
        host: &str,
        path: &str,
        method: &Method,
        headers: &HeaderMap,
    ) -> Option<&Route> {
        let group = self.host_group(&normalize_host(host));
        let candidates = || {
            group
                .iter()
                .map(|&i| &self.routes[i])
                .filter(|r| conditions_hold(r, method, headers))
        };
        candidates()
            .find(|r| matches!(&r.path, PathMatch::Exact(p) if p == path))
            .or_else(|| {
                candidates().find(|r| matches!(&r.path, PathMatch::Regex(re) if re.is_match(path)))
            })
            .or_else(|| {
                candidates()
                    .filter_map(|r| match &r.path {
                        PathMatch::Prefix(p) if path.starts_with(p.as_str()) => Some((p.len(), r)),
                        _ => None,
                    })
                    // max_by_key keeps the last of equals; reverse so the first in file order wins.
                    .rev()
                    .max_by_key(|(len, _)| *len)
                    .map(|(_, r)| r)
            })
    }

    fn host_group(&self, host: &str) -> &[usize] {
        if let Some(g) = self.exact.get(host) {
            return g;
        }
        for (pattern, g) in &self.wildcard {
            if pattern.matches(host) {
                return g;
            }
        }
        &self.any_host
    }
}

fn conditions_hold(route: &Route, method: &Method, headers: &HeaderMap) -> bool {
    (route.methods.is_empty() || route.methods.contains(method))
        && route
            .headers
            .iter()
            .all(|(name, value)| headers.get_all(name).iter().any(|v| v == value))
}
