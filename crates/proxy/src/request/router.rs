//! Host and path routing, per listener.
//!
//! Host first, as NGINX picks a `server` before a `location`: the exact name, then the
//! wildcard one label up, then the routes that name no host. Within that group: an exact
//! path, then regular expressions in file order, then the longest prefix. A route whose method
//! or header conditions fail is skipped; when nothing is left the answer is 404.
//!
//! The cost of a lookup follows the request, not the table: hosts and exact paths are hash
//! lookups, prefixes a walk down a radix tree along the path's bytes ([`PrefixTree`]), so
//! 40,000 prefix routes cost what one does. Only regular expressions are tried one by one, as
//! in NGINX; they are kept apart so that tables of plain paths never pay for them.

use http::{HeaderMap, Method};
use sluice_config::{HostPattern, PathMatch, Route, Snapshot, normalized_host};
use std::collections::HashMap;
use std::sync::Arc;

/// The routing table of one listener.
#[derive(Debug, Clone, Default)]
pub struct Router {
    routes: Vec<Arc<Route>>,
    /// Shared with the table this one was updated from, when only routes' targets changed.
    tables: Arc<Tables>,
}

/// The index: which routes a host and path can match. It holds positions in
/// [`Router::routes`], not routes, so a route whose host and path stay keeps its place.
#[derive(Debug, Default)]
struct Tables {
    exact: HashMap<String, PathTable>,
    /// By the suffix of `*.suffix`: a wildcard matches exactly one more label, so the host
    /// without its first label is the only key that can match.
    wildcard: HashMap<String, PathTable>,
    any_host: PathTable,
}

/// The routes of one host group, indexed by how they match the path. Indices point into
/// [`Router::routes`] and are in file order within each list.
#[derive(Debug, Clone, Default)]
struct PathTable {
    exact: HashMap<Box<str>, Vec<u32>>,
    regex: Vec<u32>,
    prefix: PrefixTree,
}

impl Router {
    /// Builds the table for `listener` from the routes that apply to it.
    pub fn new(snapshot: &Snapshot, listener: &str) -> Self {
        Self::from_routes(Self::routes_for(snapshot, listener))
    }

    /// The routes of `snapshot` that apply to `listener`, in order.
    pub fn routes_for(snapshot: &Snapshot, listener: &str) -> Vec<Arc<Route>> {
        snapshot
            .routes
            .iter()
            .filter(|r| r.listeners.is_empty() || r.listeners.iter().any(|l| l == listener))
            .cloned()
            .collect()
    }

    /// Whether this table was built from exactly `routes` (the same objects, in order): a
    /// reload that changed no route keeps the table instead of building it again.
    pub fn same_routes(&self, routes: &[Arc<Route>]) -> bool {
        self.routes.len() == routes.len()
            && self
                .routes
                .iter()
                .zip(routes)
                .all(|(a, b)| Arc::ptr_eq(a, b))
    }

    /// Builds the table of `routes`, in order.
    pub fn from_routes(routes: Vec<Arc<Route>>) -> Self {
        let mut tables = Tables::default();
        for (i, r) in routes.iter().enumerate() {
            let i = u32::try_from(i).expect("fewer than 4 billion routes");
            if r.hosts.is_empty() {
                tables.any_host.insert(i, &r.path);
            }
            for h in &r.hosts {
                let table = match h {
                    HostPattern::Exact(n) => tables.exact.entry(n.clone()).or_default(),
                    HostPattern::Wildcard(s) => tables.wildcard.entry(s.clone()).or_default(),
                };
                table.insert(i, &r.path);
            }
        }
        Router {
            routes,
            tables: Arc::new(tables),
        }
    }

    /// This table with `routes` in place of its own, when they differ only in what the index
    /// does not hold (upstreams, policies, methods, headers), position by position: the
    /// common change in a large fleet (a route's upstream or limits) then costs a copy of
    /// the route list, not a new index (about 11 ms at 40,000 routes). `None`: build anew.
    pub fn updated(&self, routes: &[Arc<Route>]) -> Option<Router> {
        let same_index = self.routes.len() == routes.len()
            && self
                .routes
                .iter()
                .zip(routes)
                .all(|(a, b)| Arc::ptr_eq(a, b) || same_keys(a, b));
        same_index.then(|| Router {
            routes: routes.to_vec(),
            tables: self.tables.clone(),
        })
    }

    /// Each listener's table, in listener order (the gateway's apply, at idle priority): the
    /// old one where its routes are the same objects, the old index with the new routes where
    /// only what the index does not hold changed, else built once per distinct route list
    /// (listeners that share every route share one table); and how many were built and
    /// updated.
    pub fn for_listeners(
        snapshot: &Snapshot,
        mut old: Vec<Arc<Router>>,
    ) -> (Vec<Arc<Router>>, usize, usize) {
        let (mut built, mut updated) = (0, 0);
        let mut out: Vec<Arc<Router>> = Vec::with_capacity(snapshot.listeners.len());
        // The common case, no route tied to a listener: every listener has all the routes, and
        // the comparisons need no copy of them.
        let unrestricted = snapshot.routes.iter().all(|r| r.listeners.is_empty());
        for l in &snapshot.listeners {
            let router = if unrestricted {
                match old.iter().find(|r| r.same_routes(&snapshot.routes)) {
                    Some(r) => r.clone(),
                    None => {
                        let r = match old.iter().find_map(|r| r.updated(&snapshot.routes)) {
                            Some(r) => {
                                updated += 1;
                                r
                            }
                            None => {
                                built += 1;
                                Router::from_routes(snapshot.routes.clone())
                            }
                        };
                        Arc::new(r)
                    }
                }
            } else {
                let routes = Router::routes_for(snapshot, &l.name);
                match old.iter().find(|r| r.same_routes(&routes)) {
                    Some(r) => r.clone(),
                    None => {
                        built += 1;
                        Arc::new(Router::from_routes(routes))
                    }
                }
            };
            old.push(router.clone());
            out.push(router);
        }
        (out, built, updated)
    }

    /// The route for a request, or `None` (→ 404).
    pub fn find(
        &self,
        host: &str,
        path: &str,
        method: &Method,
        headers: &HeaderMap,
    ) -> Option<&Route> {
        self.find_index(host, path, method, headers)
            .map(|i| &*self.routes[i])
    }

    /// The position of the route for a request among this table's routes (the listener's
    /// resolved filters, `filters::RoutePlan`, are kept in the same order), or `None`.
    pub fn find_index(
        &self,
        host: &str,
        path: &str,
        method: &Method,
        headers: &HeaderMap,
    ) -> Option<usize> {
        let table = self.tables.host_table(&normalized_host(host));
        let usable = |i: &u32| {
            let r = &*self.routes[*i as usize];
            conditions_hold(r, method, headers).then_some(*i as usize)
        };
        if let Some(i) = table
            .exact
            .get(path)
            .and_then(|list| list.iter().find_map(usable))
        {
            return Some(i);
        }
        let regex = table.regex.iter().find_map(|i| {
            let at = usable(i)?;
            matches!(&self.routes[at].path, PathMatch::Regex(re) if re.is_match(path)).then_some(at)
        });
        regex.or_else(|| table.prefix.longest(path.as_bytes(), &usable))
    }

    /// The routes of this table, in the order `find_index` counts them.
    pub fn routes(&self) -> &[Arc<Route>] {
        &self.routes
    }
}

impl Tables {
    fn host_table(&self, host: &str) -> &PathTable {
        if let Some(t) = self.exact.get(host) {
            return t;
        }
        if let Some((label, suffix)) = host.split_once('.')
            && !label.is_empty()
            && let Some(t) = self.wildcard.get(suffix)
        {
            return t;
        }
        &self.any_host
    }
}

impl PathTable {
    fn insert(&mut self, route: u32, path: &PathMatch) {
        match path {
            PathMatch::Exact(p) => self.exact.entry(p.as_str().into()).or_default().push(route),
            PathMatch::Regex(_) => self.regex.push(route),
            PathMatch::Prefix(p) => self.prefix.insert(p.as_bytes(), route),
        }
    }
}

/// A radix tree of path prefixes: each edge holds the bytes it consumes, each node the routes
/// whose prefix ends there. A lookup walks down along the path and answers from the deepest
/// node with a usable route, so its cost is the path's length, whatever the table's size.
#[derive(Debug, Clone, Default)]
struct PrefixTree {
    root: Node,
}

#[derive(Debug, Clone, Default)]
struct Node {
    /// The bytes on the edge into this node (empty for the root).
    label: Box<[u8]>,
    /// Routes whose prefix ends here, in file order.
    routes: Vec<u32>,
    /// Sorted by the first byte of their label, which is unique among siblings.
    children: Vec<Node>,
}

impl PrefixTree {
    fn insert(&mut self, prefix: &[u8], route: u32) {
        let mut node = &mut self.root;
        let mut rest = prefix;
        loop {
            if rest.is_empty() {
                node.routes.push(route);
                return;
            }
            let at = node.children.binary_search_by_key(&rest[0], |c| c.label[0]);
            let i = match at {
                Err(i) => {
                    node.children.insert(
                        i,
                        Node {
                            label: rest.into(),
                            routes: vec![route],
                            children: Vec::new(),
                        },
                    );
                    return;
                }
                Ok(i) => i,
            };
            let child = &mut node.children[i];
            let common = common_len(&child.label, rest);
            if common < child.label.len() {
                // Split the edge: a new node for the shared part, the old child below it.
                let tail: Box<[u8]> = child.label[common..].into();
                let head: Box<[u8]> = child.label[..common].into();
                let mut old = std::mem::take(child);
                old.label = tail;
                *child = Node {
                    label: head,
                    routes: Vec::new(),
                    children: vec![old],
                };
            }
            rest = &rest[common..];
            node = &mut node.children[i];
        }
    }

    /// The first usable route of the longest prefix of `path` that has one.
    fn longest<F>(&self, path: &[u8], usable: &F) -> Option<usize>
    where
        F: Fn(&u32) -> Option<usize>,
    {
        fn walk<F>(node: &Node, rest: &[u8], usable: &F) -> Option<usize>
        where
            F: Fn(&u32) -> Option<usize>,
        {
            let deeper = rest.first().and_then(|b| {
                let i = node.children.binary_search_by_key(b, |c| c.label[0]).ok()?;
                let child = &node.children[i];
                let after = rest.strip_prefix(&*child.label)?;
                walk(child, after, usable)
            });
            deeper.or_else(|| node.routes.iter().find_map(usable))
        }
        walk(&self.root, path, usable)
    }
}

fn common_len(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Whether two routes sit at the same places in the index: the same hosts and path rule.
fn same_keys(a: &Route, b: &Route) -> bool {
    let path = match (&a.path, &b.path) {
        (PathMatch::Exact(x), PathMatch::Exact(y))
        | (PathMatch::Prefix(x), PathMatch::Prefix(y)) => x == y,
        (PathMatch::Regex(x), PathMatch::Regex(y)) => x.as_str() == y.as_str(),
        _ => false,
    };
    path && a.hosts == b.hosts
}

fn conditions_hold(route: &Route, method: &Method, headers: &HeaderMap) -> bool {
    (route.methods.is_empty() || route.methods.contains(method))
        && route
            .headers
            .iter()
            .all(|(name, value)| headers.get_all(name).iter().any(|v| v == value))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every prefix in `prefixes` (route i has prefix i) against a brute-force scan.
    fn check(prefixes: &[&str], paths: &[&str]) {
        let mut tree = PrefixTree::default();
        for (i, p) in prefixes.iter().enumerate() {
            tree.insert(p.as_bytes(), i as u32);
        }
        for path in paths {
            let mut found = None;
            let seen = std::cell::RefCell::new(Vec::new());
            let probe = |i: &u32| -> Option<usize> {
                seen.borrow_mut().push(*i);
                None
            };
            assert!(tree.longest(path.as_bytes(), &probe).is_none());
            // The tree offers candidates deepest first; the first offered is the answer.
            if let Some(first) = seen.borrow().first() {
                found = Some(*first);
            }
            let expected = prefixes
                .iter()
                .enumerate()
                .filter(|(_, p)| path.starts_with(**p))
                .rev()
                .max_by_key(|(_, p)| p.len())
                .map(|(i, _)| i as u32);
            assert_eq!(found, expected, "path {path:?} in {prefixes:?}");
            // And every candidate offered is a real prefix, longest first.
            let offered = seen.borrow();
            let lens: Vec<usize> = offered
                .iter()
                .map(|&i| prefixes[i as usize].len())
                .collect();
            assert!(
                offered
                    .iter()
                    .all(|&i| path.starts_with(prefixes[i as usize]))
            );
            assert!(lens.windows(2).all(|w| w[0] >= w[1]), "{lens:?}");
        }
    }

    #[test]
    fn radix_tree_finds_the_longest_prefix_after_splits() {
        check(
            &[
                "/",
                "/api",
                "/api/v1/",
                "/apx",
                "/api/v1/users",
                "/a",
                "/api",
            ],
            &[
                "/",
                "/a",
                "/ap",
                "/api",
                "/api/",
                "/api/v1",
                "/api/v1/",
                "/api/v1/users/7",
                "/apx/y",
                "/b",
                "",
                "/api/v2",
            ],
        );
        // Inserted in the other order, the edges split differently; the answers are the same.
        check(
            &["/api/v1/users", "/api/v1/", "/apx", "/api", "/a", "/"],
            &["/api/v1/users", "/api/v1/x", "/apz", "/a", "/zz"],
        );
    }

    #[test]
    fn radix_tree_matches_a_brute_force_scan_on_generated_tables() {
        let mut prefixes = Vec::new();
        for a in ["/", "/s", "/shop", "/shop/", "/static/"] {
            for b in ["", "a", "ab", "b/", "abc/d"] {
                prefixes.push(format!("{a}{b}"));
            }
        }
        let prefixes: Vec<&str> = prefixes.iter().map(String::as_str).collect();
        let paths = [
            "/shop/abc/d/e",
            "/shopab",
            "/sa",
            "/static/b/x",
            "/x",
            "/shop/",
            "/s",
            "/static/abc/",
        ];
        check(&prefixes, &paths);
    }
}
