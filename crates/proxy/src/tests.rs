use crate::hash::hash_ip;
use crate::request::router::Router;
use crate::upstreams::balance::{Balancer, PickCx, Server};
use http::{HeaderMap, HeaderValue, Method};
use sluice_config::{Balance, load_str};
use std::net::IpAddr;

fn servers(weights: &[u32]) -> Vec<Server> {
    weights
        .iter()
        .enumerate()
        .map(|(i, &w)| Server::new(format!("127.0.0.1:{}", 9000 + i).parse().unwrap(), w))
        .collect()
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// A pick as the handler makes it: `ip_hash` keys on the client address.
fn pick(b: &Balancer, s: &[Server], now_ms: u64, client: IpAddr, tried: &[usize]) -> Option<usize> {
    let cx = PickCx {
        now_ms,
        now_ns: now_ms * 1_000_000,
        key: hash_ip(client),
        tried,
        in_flight: 0,
    };
    b.pick(s, &cx)
}

#[test]
fn round_robin_takes_turns() {
    let s = servers(&[1, 1, 1]);
    let b = Balancer::new(Balance::RoundRobin, &s, None);
    let picks: Vec<usize> = (0..6)
        .map(|_| pick(&b, &s, 0, ip("10.0.0.1"), &[]).unwrap())
        .collect();
    assert_eq!(picks, [0, 1, 2, 0, 1, 2]);
}

#[test]
fn smooth_weighted_round_robin_matches_nginx() {
    // NGINX's documented sequence for weights 5, 1, 1: a a b a c a a.
    let s = servers(&[5, 1, 1]);
    let b = Balancer::new(Balance::WeightedRoundRobin, &s, None);
    let picks: Vec<usize> = (0..14)
        .map(|_| pick(&b, &s, 0, ip("10.0.0.1"), &[]).unwrap())
        .collect();
    assert_eq!(picks, [0, 0, 1, 0, 2, 0, 0, 0, 0, 1, 0, 2, 0, 0]);
}

#[test]
fn least_conn_prefers_the_idlest_relative_to_weight() {
    let s = servers(&[1, 1, 2]);
    let b = Balancer::new(Balance::LeastConn, &s, None);
    s[0].active.store(1, std::sync::atomic::Ordering::Relaxed);
    s[1].active.store(3, std::sync::atomic::Ordering::Relaxed);
    s[2].active.store(3, std::sync::atomic::Ordering::Relaxed);
    // 1/1 < 3/2 < 3/1
    assert_eq!(pick(&b, &s, 0, ip("10.0.0.1"), &[]), Some(0));
    s[0].active.store(2, std::sync::atomic::Ordering::Relaxed);
    assert_eq!(
        pick(&b, &s, 0, ip("10.0.0.1"), &[]),
        Some(2),
        "3/2 beats 2/1"
    );
}

#[test]
fn ip_hash_is_sticky_and_spreads() {
    let s = servers(&[1, 1, 1, 1]);
    let b = Balancer::new(Balance::IpHash, &s, None);
    let first = pick(&b, &s, 0, ip("192.0.2.7"), &[]).unwrap();
    for _ in 0..10 {
        assert_eq!(pick(&b, &s, 0, ip("192.0.2.7"), &[]), Some(first));
    }
    let used: std::collections::HashSet<usize> = (0..64)
        .map(|i| pick(&b, &s, 0, ip(&format!("198.51.100.{i}")), &[]).unwrap())
        .collect();
    assert!(
        used.len() > 1,
        "different clients land on different servers"
    );
}

#[test]
fn a_failed_server_is_skipped_until_its_fail_timeout_passes() {
    let s = servers(&[1, 1]);
    let b = Balancer::new(Balance::RoundRobin, &s, None);
    assert!(s[0].failed(1_000, 1, 10_000));
    for _ in 0..6 {
        assert_eq!(pick(&b, &s, 5_000, ip("10.0.0.1"), &[]), Some(1));
    }
    let later: Vec<usize> = (0..4)
        .map(|_| pick(&b, &s, 11_000, ip("10.0.0.1"), &[]).unwrap())
        .collect();
    assert!(later.contains(&0), "back after fail_timeout: {later:?}");
    // All down: still tried rather than refusing; tried servers are never repeated.
    s[1].failed(11_000, 1, 10_000);
    s[0].failed(11_000, 1, 10_000);
    assert!(pick(&b, &s, 12_000, ip("10.0.0.1"), &[]).is_some());
    assert_eq!(pick(&b, &s, 12_000, ip("10.0.0.1"), &[0]), Some(1));
    assert_eq!(pick(&b, &s, 12_000, ip("10.0.0.1"), &[0, 1]), None);
}

#[test]
fn max_fails_counts_consecutive_failures() {
    let s = servers(&[1]);
    assert!(!s[0].failed(0, 3, 1000));
    s[0].succeeded();
    assert!(!s[0].failed(0, 3, 1000));
    assert!(!s[0].failed(0, 3, 1000));
    assert!(
        s[0].failed(0, 3, 1000),
        "third consecutive failure marks it down"
    );
    assert!(!s[0].available(500));
}

const ROUTES: &str = r#"
[[listener]]
name = "a"
address = "127.0.0.1:0"
[[listener]]
name = "b"
address = "127.0.0.1:0"
[[upstream]]
name = "u"
servers = [{ address = "127.0.0.1:1" }]
[[route]]
name = "exact-host-root"
hosts = ["api.example.com"]
upstream = "u"
[[route]]
name = "exact-host-v1"
hosts = ["api.example.com"]
path_prefix = "/v1/"
upstream = "u"
[[route]]
name = "exact-host-v1-users"
hosts = ["api.example.com"]
path_prefix = "/v1/users"
upstream = "u"
[[route]]
name = "exact-host-health"
hosts = ["api.example.com"]
path_exact = "/v1/health"
upstream = "u"
[[route]]
name = "exact-host-regex"
hosts = ["api.example.com"]
path_regex = "^/v1/items/[0-9]+$"
upstream = "u"
[[route]]
name = "wild"
hosts = ["*.example.com"]
upstream = "u"
[[route]]
name = "deeper-wild"
hosts = ["*.eu.example.com"]
upstream = "u"
[[route]]
name = "post-only"
hosts = ["forms.test"]
methods = ["POST"]
upstream = "u"
[[route]]
name = "canary"
hosts = ["canary.test"]
headers = { "x-canary" = "yes" }
upstream = "u"
[[route]]
name = "default"
path_prefix = "/"
listeners = ["a"]
upstream = "u"
"#;

#[test]
fn routing_follows_host_then_path_precedence() {
    let snap = load_str(ROUTES, "routes.toml", std::path::Path::new(".")).unwrap();
    let r = Router::new(&snap, "a");
    let get = Method::GET;
    let none = HeaderMap::new();
    let name = |host: &str, path: &str| r.find(host, path, &get, &none).map(|r| r.name.clone());
    assert_eq!(name("api.example.com", "/"), Some("exact-host-root".into()));
    assert_eq!(
        name("API.example.com:443", "/v1/x"),
        Some("exact-host-v1".into())
    );
    assert_eq!(
        name("api.example.com", "/v1/users/7"),
        Some("exact-host-v1-users".into()),
        "longest prefix"
    );
    assert_eq!(
        name("api.example.com", "/v1/health"),
        Some("exact-host-health".into()),
        "exact beats prefix"
    );
    assert_eq!(
        name("api.example.com", "/v1/items/42"),
        Some("exact-host-regex".into()),
        "regex beats prefix"
    );
    assert_eq!(name("www.example.com", "/anything"), Some("wild".into()));
    assert_eq!(
        name("x.eu.example.com", "/"),
        Some("deeper-wild".into()),
        "longest wildcard"
    );
    assert_eq!(name("unknown.test", "/"), Some("default".into()));
    assert_eq!(
        name("forms.test", "/"),
        None,
        "method does not match; the host group has nothing else"
    );
    assert_eq!(
        r.find("forms.test", "/", &Method::POST, &none)
            .map(|r| r.name.as_str()),
        Some("post-only")
    );
    let mut canary = HeaderMap::new();
    canary.insert("x-canary", HeaderValue::from_static("yes"));
    assert_eq!(
        r.find("canary.test", "/", &get, &canary)
            .map(|r| r.name.as_str()),
        Some("canary")
    );
    assert_eq!(name("canary.test", "/"), None);
    // Listener b has no default route.
    let rb = Router::new(&snap, "b");
    assert!(rb.find("unknown.test", "/", &get, &none).is_none());
}

#[test]
fn a_route_whose_host_and_path_stay_is_replaced_in_place_and_others_rebuild() {
    let base = |upstream: &str, prefix: &str| {
        format!(
            "[[listener]]\nname = \"a\"\naddress = \"127.0.0.1:0\"\n[[upstream]]\nname = \"u\"\nservers = [{{ address = \"127.0.0.1:9\" }}]\n[[upstream]]\nname = \"v\"\nservers = [{{ address = \"127.0.0.1:10\" }}]\n[[route]]\nname = \"one\"\npath_prefix = \"/one/\"\nupstream = \"u\"\n[[route]]\nname = \"two\"\npath_prefix = \"{prefix}\"\nupstream = \"{upstream}\"\n[[route]]\nname = \"three\"\npath_regex = \"^/t[0-9]+$\"\nupstream = \"u\"\n"
        )
    };
    let load = |t: &str| load_str(t, "r.toml", std::path::Path::new(".")).unwrap();
    let before = load(&base("u", "/two/"));
    let router = Router::new(&before, "a");
    let get = Method::GET;
    let none = HeaderMap::new();
    // Route `two` now sends to `v`; `one` and `three` are the same objects.
    let mut after = load(&base("v", "/two/"));
    after.routes[0] = before.routes[0].clone();
    after.routes[2] = before.routes[2].clone();
    let updated = router
        .updated(&after.routes)
        .expect("same hosts and paths: updated");
    assert!(updated.same_routes(&after.routes));
    let found = updated.find("x", "/two/y", &get, &none).unwrap();
    assert_eq!(found.upstream, Some(1), "the new route answers");
    assert_eq!(
        updated.find("x", "/t42", &get, &none).unwrap().name,
        "three"
    );
    assert_eq!(
        router.find("x", "/two/y", &get, &none).unwrap().upstream,
        Some(0),
        "the old table is untouched"
    );
    // A moved path or a different number of routes needs a new index.
    assert!(router.updated(&load(&base("u", "/deux/")).routes).is_none());
    assert!(router.updated(&after.routes[..2]).is_none());
}
