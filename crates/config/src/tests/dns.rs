//! `resolve = true` servers and `[resolver]`: what loads and what is refused.

use super::{errors, said_at};
use crate::load_str;
use std::time::Duration;

#[test]
fn a_followed_name_loads_unresolved_with_the_resolver_settings() {
    let src = r#"
[resolver]
servers = ["127.0.0.1:5353", "10.0.0.2"]
min_ttl = "2s"
max_ttl = "30s"
[[listener]]
name = "http"
address = "127.0.0.1:0"
[[upstream]]
name = "app"
servers = [{ address = "app.never-resolved.invalid:8080", resolve = true, weight = 2 }]
[[route]]
name = "all"
upstream = "app"
"#;
    // The name is not looked up at load (it would fail: .invalid never resolves).
    let s = load_str(src, "t.toml", std::path::Path::new(".")).unwrap_or_else(|e| panic!("{e}"));
    let server = &s.upstreams[0].servers[0];
    assert!(server.resolve);
    assert_eq!(
        server.dns_name(),
        Some(("app.never-resolved.invalid", 8080))
    );
    assert_eq!(server.weight.get(), 2);
    assert_eq!(
        s.resolver.servers,
        vec![
            "127.0.0.1:5353".parse().unwrap(),
            "10.0.0.2:53".parse().unwrap()
        ]
    );
    assert_eq!(
        (s.resolver.min_ttl, s.resolver.max_ttl),
        (Duration::from_secs(2), Duration::from_secs(30))
    );
    // Without [resolver]: the system's servers, 1 s to 60 s.
    let (_, without) = src.split_once("max_ttl = \"30s\"\n").unwrap();
    let plain =
        load_str(without, "t.toml", std::path::Path::new(".")).unwrap_or_else(|e| panic!("{e}"));
    assert!(plain.resolver.servers.is_empty());
    assert_eq!(
        (plain.resolver.min_ttl, plain.resolver.max_ttl),
        (Duration::from_secs(1), Duration::from_secs(60))
    );
}

#[test]
fn resolve_on_an_address_a_bad_name_and_bad_resolver_settings_are_located() {
    let dir = tempfile::tempdir().unwrap();
    let src = r#"
[resolver]
servers = ["dns.example"]
min_ttl = "90s"
max_ttl = "30s"
[[listener]]
name = "http"
address = "127.0.0.1:0"
[[upstream]]
name = "app"
servers = [
  { address = "10.0.0.5:8080", resolve = true },
  { address = "no port here", resolve = true },
]
[[route]]
name = "all"
upstream = "app"
"#;
    let errs = errors(src, dir.path());
    assert!(
        said_at(&errs, src, "dns.example").contains("is not an IP address"),
        "{errs:#?}"
    );
    assert!(
        said_at(&errs, src, "min_ttl").contains("above max_ttl"),
        "{errs:#?}"
    );
    assert!(
        said_at(&errs, src, "10.0.0.5:8080").contains("no name to resolve"),
        "{errs:#?}"
    );
    assert!(
        said_at(&errs, src, "no port here").contains("a DNS name and a port"),
        "{errs:#?}"
    );
}

#[test]
fn an_srv_server_names_its_service_and_every_mistake_is_located() {
    let dir = tempfile::tempdir().unwrap();
    let src = r#"
[[listener]]
name = "http"
address = "127.0.0.1:0"
[[upstream]]
name = "app"
servers = [
  { address = "grpc.example", service = "_grpc._tcp", resolve = true },
  { address = "web.example", service = "http", resolve = true },
]
[[upstream]]
name = "broken"
servers = [
  { address = "a.example", service = "needs-resolve" },
  { address = "b.example:8080", service = "has-port", resolve = true },
  { address = "c.example", service = "bad service!", resolve = true },
  { address = "d.example", service = "zero", resolve = true, weight = 0 },
]
[[route]]
name = "all"
upstream = "app"
"#;
    let errs = errors(src, dir.path());
    assert!(
        said_at(&errs, src, "\"needs-resolve\"").contains("needs resolve = true"),
        "{errs:#?}"
    );
    assert!(
        said_at(&errs, src, "\"b.example:8080\"").contains("without a port"),
        "{errs:#?}"
    );
    assert!(
        said_at(&errs, src, "\"bad service!\"").contains("not a DNS service name"),
        "{errs:#?}"
    );
    assert!(
        said_at(&errs, src, "weight = 0").contains("never be chosen"),
        "{errs:#?}"
    );
    assert_eq!(errs.len(), 4, "{errs:#?}");
    let (good, _) = src.split_once("[[upstream]]\nname = \"broken\"").unwrap();
    let s = load_str(
        &format!("{good}[[route]]\nname = \"all\"\nupstream = \"app\"\n"),
        "t.toml",
        dir.path(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let names: Vec<(&str, bool, bool)> = s.upstreams[0]
        .servers
        .iter()
        .map(|x| (x.address.name.as_str(), x.resolve, x.srv))
        .collect();
    assert_eq!(
        names,
        vec![
            ("_grpc._tcp.grpc.example", true, true),
            ("_http._tcp.web.example", true, true)
        ]
    );
}
