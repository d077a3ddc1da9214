//! Upstream groups: consistent hashing, sticky sessions, health checks, outlier ejection, retries and traffic splits, and their mistakes.

use super::*;

#[test]
fn consistent_hash_keys_and_their_mistakes() {
    let dir = tempfile::tempdir().unwrap();
    let good = r#"
[[listener]]
name = "http"
address = "127.0.0.1:0"
[[upstream]]
name = "by-user"
balance = "consistent_hash"
hash_on = "header:X-User"
servers = [{ address = "127.0.0.1:9000" }, { address = "127.0.0.1:9001" }]
[[upstream]]
name = "by-cookie"
balance = "consistent_hash"
hash_on = "cookie:session"
hash_balance_factor = 0
servers = [{ address = "127.0.0.1:9000" }]
[[upstream]]
name = "default-key"
balance = "consistent_hash"
servers = [{ address = "127.0.0.1:9000" }]
[[upstream]]
name = "latency"
balance = "peak_ewma"
servers = [{ address = "127.0.0.1:9000" }]
"#;
    let s = load_str(good, "good.toml", dir.path()).unwrap();
    let u = |name: &str| s.upstreams.iter().find(|u| u.name == name).unwrap();
    assert_eq!(u("by-user").hash_on, HashKey::Header("x-user".into()));
    assert_eq!(u("by-user").hash_balance_factor, Some(1.25));
    assert_eq!(u("by-cookie").hash_on, HashKey::Cookie("session".into()));
    assert_eq!(
        u("by-cookie").hash_balance_factor,
        None,
        "0 turns the bound off"
    );
    assert_eq!(u("default-key").hash_on, HashKey::Client);
    assert_eq!(u("latency").balance, Balance::PeakEwma);

    let bad = r#"
[[listener]]
name = "http"
address = "127.0.0.1:0"
[[upstream]]
name = "a"
balance = "consistent_hash"
hash_on = "header:bad name"
hash_balance_factor = 0.5
servers = [{ address = "127.0.0.1:9000" }]
[[upstream]]
name = "b"
hash_on = "uri"
servers = [{ address = "127.0.0.1:9000" }]
[[upstream]]
name = "c"
balance = "consistent_hashing"
servers = [{ address = "127.0.0.1:9000" }]
"#;
    let errs = errors(bad, dir.path());
    let at = |needle: &str| error_at(&errs, bad, needle);
    assert!(at("header:bad name").help.contains("header:NAME"));
    assert!(at("= 0.5").help.contains("1.0 or more"));
    assert!(at("hash_on = \"uri\"").help.contains("consistent_hash"));
    assert!(
        at("consistent_hashing").message.contains("balance"),
        "{errs:#?}"
    );
    assert_eq!(errs.len(), 4, "{errs:#?}");
}

#[test]
fn sticky_sessions_and_their_mistakes() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("sticky.key"), [9u8; 32]).unwrap();
    std::fs::write(dir.path().join("short.key"), [9u8; 8]).unwrap();
    let src = r#"
[[listener]]
name = "http"
address = "127.0.0.1:0"
[[upstream]]
name = "shared"
servers = [{ address = "127.0.0.1:9000" }]
[upstream.sticky]
cookie = "app_srv"
max_age = "2h"
key_file = "sticky.key"
[[upstream]]
name = "defaults"
servers = [{ address = "127.0.0.1:9000" }]
[upstream.sticky]
"#;
    let s = load_str(src, "good.toml", dir.path()).unwrap();
    let shared = s.upstreams[0].sticky.as_ref().unwrap();
    assert_eq!(shared.cookie, "app_srv");
    assert_eq!(shared.max_age, Some(Duration::from_secs(7200)));
    assert_eq!(shared.key.as_deref(), Some(&[9u8; 32][..]));
    let defaults = s.upstreams[1].sticky.as_ref().unwrap();
    assert_eq!(
        (
            defaults.cookie.as_str(),
            defaults.max_age,
            defaults.key.as_ref()
        ),
        ("sluice_server", None, None)
    );

    let bad = r#"
[[listener]]
name = "http"
address = "127.0.0.1:0"
[[upstream]]
name = "a"
servers = [{ address = "127.0.0.1:9000" }]
[upstream.sticky]
cookie = "bad name;"
key_file = "short.key"
[[upstream]]
name = "b"
servers = [{ address = "127.0.0.1:9000" }]
[upstream.sticky]
key_file = "missing.key"
"#;
    let errs = errors(bad, dir.path());
    let at = |needle: &str| error_at(&errs, bad, needle);
    assert!(at("bad name;").message.contains("not a cookie name"));
    assert!(at("short.key").help.contains("head -c 32 /dev/urandom"));
    assert!(at("missing.key").message.contains("cannot read"));
    assert_eq!(errs.len(), 3, "{errs:#?}");
}

#[test]
fn health_checks_and_their_mistakes() {
    let dir = tempfile::tempdir().unwrap();
    let src = r#"
[[listener]]
name = "http"
address = "127.0.0.1:0"
[[upstream]]
name = "web"
servers = [{ address = "127.0.0.1:9000" }]
[upstream.health_check]
path = "/healthz"
statuses = ["2xx", "301-302", "418"]
body = "ok"
interval = "3s"
timeout = "1s"
[[upstream]]
name = "db"
servers = [{ address = "127.0.0.1:9001" }]
[upstream.health_check]
type = "tcp"
"#;
    let s = load_str(src, "good.toml", dir.path()).unwrap();
    let web = s.upstreams[0].health_check.as_ref().unwrap();
    assert_eq!(
        web.probe,
        HealthProbe::Http {
            path: "/healthz".into(),
            host: None,
            statuses: vec![(200, 299), (301, 302), (418, 418)],
            body: Some("ok".into()),
        }
    );
    assert_eq!(
        (web.interval, web.timeout),
        (Duration::from_secs(3), Duration::from_secs(1))
    );
    assert_eq!((web.healthy.get(), web.unhealthy.get()), (2, 3), "defaults");
    assert_eq!(
        s.upstreams[1].health_check.as_ref().unwrap().probe,
        HealthProbe::Tcp
    );

    let bad = r#"
[[listener]]
name = "http"
address = "127.0.0.1:0"
[[upstream]]
name = "web"
servers = [{ address = "127.0.0.1:9000" }]
[upstream.health_check]
path = "healthz"
statuses = ["2xx", "600", "3xx-4xx"]
interval = "1s"
timeout = "5s"
healthy = 0
[[upstream]]
name = "db"
servers = [{ address = "127.0.0.1:9001" }]
[upstream.health_check]
type = "tcp"
path = "/x"
"#;
    let errs = errors(bad, dir.path());
    let at = |needle: &str| error_at(&errs, bad, needle);
    assert!(at("\"healthz\"").help.contains("/healthz"));
    assert!(at("\"600\"").message.contains("`600`"), "{errs:#?}");
    assert!(
        at("timeout = \"5s\"")
            .help
            .contains("shorter than the interval")
    );
    assert!(at("healthy = 0").message.contains("at least 1"));
    assert!(at("path = \"/x\"").help.contains("type = \"http\""));
    // "600" and "3xx-4xx" share a line: both reported.
    assert_eq!(errs.len(), 6, "{errs:#?}");
}

#[test]
fn outlier_ejection_and_its_mistakes() {
    let dir = tempfile::tempdir().unwrap();
    let src = r#"
[[listener]]
name = "http"
address = "127.0.0.1:0"
[[upstream]]
name = "web"
servers = [{ address = "127.0.0.1:9000" }]
[upstream.outlier]
consecutive_failures = 3
[[upstream]]
name = "bad"
servers = [{ address = "127.0.0.1:9000" }]
[upstream.outlier]
consecutive_failures = 0
base_ejection = "1m"
max_ejection = "10s"
max_ejected_percent = 150
"#;
    let errs = errors(src, dir.path());
    let at = |needle: &str| error_at(&errs, src, needle);
    assert!(
        at("consecutive_failures = 0")
            .message
            .contains("at least 1")
    );
    assert!(
        at("max_ejection = \"10s\"")
            .help
            .contains("at least base_ejection")
    );
    assert!(at("= 150").message.contains("over 100"));
    assert_eq!(errs.len(), 3, "{errs:#?}");
    let good = src.split("[[upstream]]\nname = \"bad\"").next().unwrap();
    let s = load_str(good, "good.toml", dir.path()).unwrap();
    let o = s.upstreams[0].outlier.as_ref().unwrap();
    assert_eq!(o.consecutive_failures.get(), 3);
    assert_eq!(
        (o.base_ejection, o.max_ejection, o.max_ejected_percent),
        (Duration::from_secs(30), Duration::from_secs(300), 50)
    );
}

#[test]
fn retry_policies_and_their_mistakes() {
    let dir = tempfile::tempdir().unwrap();
    let src = r#"
[[listener]]
name = "http"
address = "127.0.0.1:0"
[[upstream]]
name = "app"
retry_budget_percent = 25
servers = [{ address = "127.0.0.1:9000" }]
[[route]]
name = "api"
path_prefix = "/api/"
upstream = "app"
[route.retry]
attempts = 3
on = ["connect", "5xx", "timeout"]
backoff = "25ms"
per_try_timeout = "2s"
timeout = "5s"
[[route]]
name = "site"
upstream = "app"
"#;
    let s = load_str(src, "good.toml", dir.path()).unwrap();
    let api = &s.routes.iter().find(|r| r.name == "api").unwrap().retry;
    assert_eq!(api.attempts.get(), 3);
    assert!(api.on_connect && api.on_5xx && api.on_timeout && !api.on_reset);
    assert_eq!(
        (api.backoff, api.per_try_timeout, api.timeout),
        (
            Duration::from_millis(25),
            Some(Duration::from_secs(2)),
            Some(Duration::from_secs(5))
        )
    );
    let site = &s.routes.iter().find(|r| r.name == "site").unwrap().retry;
    assert_eq!(
        *site,
        crate::RetryPolicy::default(),
        "one retry on connect failure or reset"
    );
    assert_eq!(
        (
            s.upstreams[0].retry_budget_percent,
            s.upstreams[0].retry_budget_min_per_second
        ),
        (25, 10)
    );

    let bad = r#"
[[listener]]
name = "http"
address = "127.0.0.1:0"
[[upstream]]
name = "app"
retry_budget_percent = 101
servers = [{ address = "127.0.0.1:9000" }]
[[route]]
name = "api"
upstream = "app"
[route.retry]
attempts = 0
on = ["connect", "4xx"]
"#;
    let errs = errors(bad, dir.path());
    let at = |needle: &str| error_at(&errs, bad, needle);
    assert!(at("= 101").message.contains("over 100"));
    assert!(at("attempts = 0").help.contains("1 (no retry) to 10"));
    assert!(at("\"4xx\"").message.contains("`4xx`"));
    assert_eq!(errs.len(), 3, "{errs:#?}");
}

#[test]
fn traffic_splits_and_their_mistakes() {
    let dir = tempfile::tempdir().unwrap();
    let src = r#"
[[listener]]
name = "http"
address = "127.0.0.1:0"
[[upstream]]
name = "stable"
servers = [{ address = "127.0.0.1:9000" }]
[[upstream]]
name = "canary"
servers = [{ address = "127.0.0.1:9001" }]
[[route]]
name = "app"
upstream = "stable"
split_on = "uri"
[[route.split]]
upstream = "canary"
weight = 60
[[route.split]]
upstream = "ghost"
weight = 50
[[route.split]]
upstream = "canary"
"#;
    let errs = errors(src, dir.path());
    let at = |needle: &str| error_at(&errs, src, needle);
    assert!(at("split_on = \"uri\"").help.contains("cookie:NAME"));
    assert!(at("\"ghost\"").message.contains("not defined"));
    assert!(
        errs.iter()
            .any(|e| e.message.contains("neither weight nor match")),
        "{errs:#?}"
    );
    assert!(
        errs.iter().any(|e| e.message.contains("add up to")),
        "{errs:#?}"
    );
    assert_eq!(errs.len(), 4, "{errs:#?}");
}
