//! Edge policy, the admin listener, shared and local rate limits and connection limits, and their mistakes.

use super::*;

#[test]
fn edge_policy_keys_and_their_mistakes() {
    let dir = tempfile::tempdir().unwrap();
    let src = r#"
[[listener]]
name = "http"
address = "127.0.0.1:0"
trusted_proxies = ["10.0.0.0/8", "2001:db8::1"]
deny = ["192.0.2.0/24"]
[[route]]
name = "go-away"
hosts = ["old.example.com"]
redirect = { location = "https://new.example.com$request_uri", status = 308 }
"#;
    let s = load_str(src, "good.toml", dir.path()).unwrap();
    let l = &s.listeners[0];
    assert_eq!(l.trusted_proxies.len(), 2);
    assert!(!l.acl.permits("192.0.2.7".parse().unwrap()));
    assert!(l.request_id, "on by default");
    assert_eq!(s.routes[0].upstream, None, "a redirect needs no upstream");

    let bad = r#"
[[listener]]
name = "http"
address = "127.0.0.1:0"
trusted_proxies = ["10.0.0.0/33"]
[[upstream]]
name = "o"
servers = [{ address = "127.0.0.1:9000" }]
[[route]]
name = "a"
allow = ["not-an-ip"]
rewrite = { regex = "([", replacement = "/x" }
upstream = "o"
[[route]]
name = "b"
redirect = { location = "https://$hostname/", status = 200 }
[[route]]
name = "c"
[[route]]
name = "d"
upstream = "o"
strip_prefix = "api"
[route.request_headers]
set = { "connection" = "close" }
"#;
    let errs = errors(bad, dir.path());
    let at = |needle: &str| said_at(&errs, bad, needle);
    assert!(
        at("10.0.0.0/33").contains("not an address or CIDR"),
        "{errs:#?}"
    );
    assert!(at("not-an-ip").contains("not an address or CIDR"));
    assert!(at("regex = \"([\"").contains("does not compile"));
    assert!(at("$hostname").contains("`$hostname` is not a variable"));
    assert!(at("$hostname").contains("not a redirect"));
    assert!(at("name = \"c\"").contains("has no upstream"));
    assert!(at("strip_prefix = \"api\"").contains("not a path prefix"));
    assert!(at("\"connection\" = \"close\"").contains("hop-by-hop"));
    assert_eq!(errs.len(), 8, "{errs:#?}");
}

#[test]
fn an_admin_listener_off_loopback_needs_tls_or_an_explicit_insecure_and_its_files_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    write_cert(dir.path(), "admin", "admin.internal");
    write_cert(dir.path(), "ops-ca", "ops-ca");
    write_cert(dir.path(), "other", "other");
    write_secret(&dir.path().join("read.token"), "read-0123456789abcdef\n");
    write_secret(&dir.path().join("short.token"), "short\n");
    let listener = "[[listener]]\nname = \"http\"\naddress = \"127.0.0.1:0\"\n";
    let good = format!(
        "[admin]\naddress = \"0.0.0.0:9901\"\nread_token_file = \"read.token\"\nread_networks = [\"10.0.0.0/8\", \"192.0.2.7\"]\n[admin.tls]\ncertificate = \"admin.crt\"\nkey = \"admin.key\"\nclient_ca = \"ops-ca.crt\"\n{listener}"
    );
    let s = load_str(&good, "good.toml", dir.path()).unwrap();
    let admin = s.admin.as_ref().unwrap();
    assert_eq!(admin.read_token.as_deref(), Some("read-0123456789abcdef"));
    assert_eq!(admin.read_networks.len(), 2);
    let tls = admin.tls.as_ref().unwrap();
    assert_eq!((tls.certificate.len(), tls.client_ca.len()), (1, 1));
    assert!(
        !format!("{admin:?}").contains("read-0123"),
        "no token in Debug"
    );
    // Off loopback in clear only when the operator says so.
    let insecure = format!("[admin]\naddress = \"0.0.0.0:9901\"\ninsecure = true\n{listener}");
    assert!(
        load_str(&insecure, "good.toml", dir.path())
            .unwrap()
            .admin
            .unwrap()
            .tls
            .is_none()
    );
    let loopback = format!("[admin]\naddress = \"[::1]:9901\"\n{listener}");
    assert!(load_str(&loopback, "good.toml", dir.path()).is_ok());

    for (admin, needle, says) in [
        ("address = \"0.0.0.0:9901\"", "0.0.0.0:9901", "in clear"),
        (
            "address = \"10.0.0.5:9901\"\ninsecure = false",
            "10.0.0.5",
            "add [admin.tls]",
        ),
        (
            "read_networks = [\"10.0.0.0/33\"]",
            "10.0.0.0/33",
            "not an address or CIDR",
        ),
        (
            "read_token_file = \"short.token\"",
            "short.token",
            "at least 16",
        ),
        (
            "[admin.tls]\ncertificate = \"admin.crt\"\nkey = \"other.key\"",
            "other.key",
            "does not belong",
        ),
        (
            "[admin.tls]\ncertificate = \"admin.crt\"\nkey = \"admin.key\"\nclient_ca = \"none.crt\"",
            "none.crt",
            "cannot read",
        ),
    ] {
        let src = format!("[admin]\n{admin}\n{listener}");
        let errs = errors(&src, dir.path());
        let said = said_at(&errs, &src, needle);
        assert!(said.contains(says), "{admin}: {errs:#?}");
    }
}

#[test]
fn shared_limits_over_tls_load_their_files_and_every_url_the_gateway_cannot_serve_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    write_cert(dir.path(), "ca", "redis.internal");
    write_cert(dir.path(), "gw", "gw.internal");
    write_cert(dir.path(), "other", "other.internal");
    let tail = r#"
[[listener]]
name = "http"
address = "127.0.0.1:0"
[[upstream]]
name = "o"
servers = [{ address = "127.0.0.1:9000" }]
[[route]]
name = "api"
upstream = "o"
[route.rate_limit]
rate = "5/s"
store = "redis"
"#;
    redis_over_tls_loads_its_files(dir.path(), tail);
    unservable_redis_urls_are_refused(dir.path(), tail);
}

/// `rediss://` with its CA and client certificate, with the system's roots, and `redis://`.
fn redis_over_tls_loads_its_files(dir: &Path, tail: &str) {
    let good = format!(
        "[rate_limit]\nredis = \"rediss://:pw@redis.internal:6380/2\"\nredis_ca = \"ca.crt\"\nredis_certificate = \"gw.crt\"\nredis_key = \"gw.key\"\n{tail}"
    );
    let s = load_str(&good, "good.toml", dir).unwrap();
    let tls = s
        .rate_limit_store
        .redis_tls
        .as_ref()
        .expect("rediss:// has TLS");
    assert_eq!(tls.ca.len(), 1);
    assert!(tls.client.is_some());
    assert!(
        !format!("{tls:?}").contains("BEGIN"),
        "no key material in Debug"
    );
    // The system's roots when no CA is given; no TLS for redis://.
    let roots = format!("[rate_limit]\nredis = \"rediss://redis.internal/\"\n{tail}");
    let s = load_str(&roots, "good.toml", dir).unwrap();
    assert!(s.rate_limit_store.redis_tls.as_ref().unwrap().ca.is_empty());
    let plain = format!("[rate_limit]\nredis = \"redis://127.0.0.1:6379/\"\n{tail}");
    assert!(
        load_str(&plain, "good.toml", dir)
            .unwrap()
            .rate_limit_store
            .redis_tls
            .is_none()
    );
}

/// Each Redis URL or TLS file the gateway cannot use, refused where it is written, and never
/// with the password in the message.
fn unservable_redis_urls_are_refused(dir: &Path, tail: &str) {
    for (store, needle, says) in [
        (
            "redis = \"rediss://127.0.0.1:6380/#insecure\"",
            "#insecure",
            "always makes",
        ),
        (
            "redis = \"redis+unix:///run/redis.sock\"",
            "redis+unix",
            "is not served",
        ),
        (
            "redis = \"valkeys://127.0.0.1/\"",
            "valkeys",
            "is not served",
        ),
        ("redis = \"redis:///0\"", "redis:///0", "names no host"),
        (
            "redis = \"redis://127.0.0.1:6379/zero\"",
            "zero",
            "is not a number",
        ),
        ("redis = \"redis://127.0.0.1:99999/\"", "99999", "not a URL"),
        (
            "redis = \"redis://:s3cret@127.0.0.1:99999/\"",
            "s3cret",
            "not a URL",
        ),
        (
            "redis = \"redis://127.0.0.1/\"\nredis_ca = \"ca.crt\"",
            "redis_ca",
            "the redis URL is not rediss://",
        ),
        (
            "redis = \"rediss://127.0.0.1/\"\nredis_certificate = \"gw.crt\"",
            "redis_certificate",
            "go together",
        ),
        (
            "redis = \"rediss://127.0.0.1/\"\nredis_certificate = \"gw.crt\"\nredis_key = \"other.key\"",
            "redis_key",
            "does not belong",
        ),
        (
            "redis = \"rediss://127.0.0.1/\"\nredis_ca = \"missing.crt\"",
            "missing.crt",
            "cannot read",
        ),
    ] {
        let src = format!("[rate_limit]\n{store}\n{tail}");
        let errs = errors(&src, dir);
        let said = said_at(&errs, &src, needle);
        assert!(said.contains(says), "{store}: {errs:#?}");
        assert!(
            !said.contains("s3cret"),
            "an error repeats a password: {said}"
        );
    }
}

#[test]
fn rate_limits_and_their_mistakes() {
    let dir = tempfile::tempdir().unwrap();
    let src = r#"
[rate_limit]
redis = "redis://127.0.0.1:6379/"
expected_gateways = 4
[[listener]]
name = "http"
address = "127.0.0.1:0"
[[upstream]]
name = "o"
servers = [{ address = "127.0.0.1:9000" }]
[[route]]
name = "api"
upstream = "o"
[route.rate_limit]
rate = "300/m"
burst = 20
key = "cookie:session"
store = "redis"
"#;
    let s = load_str(src, "good.toml", dir.path()).unwrap();
    let rl = s.routes[0].rate_limit.as_ref().unwrap();
    assert_eq!(
        (rl.quota, rl.window, rl.burst, rl.nodelay, rl.shared),
        (300, Duration::from_secs(60), 20, false, true)
    );
    assert_eq!(rl.interval(), Duration::from_millis(200));
    assert_eq!(rl.key, Some(HashKey::Cookie("session".into())));
    assert_eq!(s.rate_limit_store.expected_gateways, 4);

    let bad = r#"
[[listener]]
name = "http"
address = "127.0.0.1:0"
[[upstream]]
name = "o"
servers = [{ address = "127.0.0.1:9000" }]
[[route]]
name = "a"
upstream = "o"
[route.rate_limit]
rate = "5 per second"
key = "uri"
store = "redis"
"#;
    let errs = errors(bad, dir.path());
    let at = |needle: &str| said_at(&errs, bad, needle);
    assert!(at("5 per second").contains("\"5/s\""), "{errs:#?}");
    assert!(at("key = \"uri\"").contains("not a key"));
    assert!(at("store = \"redis\"").contains("[rate_limit] redis"));
    assert_eq!(errs.len(), 3, "{errs:#?}");
}

#[test]
fn connection_limits_and_their_mistakes() {
    let dir = tempfile::tempdir().unwrap();
    let src = r#"
[[listener]]
name = "http"
address = "127.0.0.1:0"
max_connections = 10000
max_connections_per_client = 0
[[upstream]]
name = "o"
queue = 10
servers = [{ address = "127.0.0.1:9000" }]
[[upstream]]
name = "p"
max_conns = 100
queue = 50
queue_timeout = "3s"
servers = [{ address = "127.0.0.1:9000" }]
"#;
    let errs = errors(src, dir.path());
    assert!(
        errs.iter()
            .any(|e| e.line == line_of(src, "max_connections_per_client = 0")
                && e.message.contains("refuse everything")),
        "{errs:#?}"
    );
    assert!(
        errs.iter()
            .any(|e| e.line == line_of(src, "queue = 10") && e.help.contains("max_conns")),
        "{errs:#?}"
    );
    assert_eq!(errs.len(), 2, "{errs:#?}");
    let good = src
        .replace(
            "max_connections_per_client = 0",
            "max_connections_per_client = 64",
        )
        .replace("queue = 10\n", "");
    let s = load_str(&good, "good.toml", dir.path()).unwrap();
    assert_eq!(
        (
            s.listeners[0].max_connections,
            s.listeners[0].max_connections_per_client
        ),
        (Some(10_000), Some(64))
    );
    let p = &s.upstreams[1];
    assert_eq!(
        (p.max_conns, p.queue, p.queue_timeout),
        (Some(100), 50, Duration::from_secs(3))
    );
}

#[test]
fn route_caches_and_their_mistakes() {
    let dir = tempfile::tempdir().unwrap();
    route_caches_load_as_written(dir.path());
    route_cache_mistakes_are_located(dir.path());
}

/// `[cache]` and `[route.cache]` as written, and `[cache]`'s defaults.
fn route_caches_load_as_written(dir: &Path) {
    let good = r#"
[cache]
max_size = "64m"
max_object_size = "20m"
upgrade_share_percent = 10
[[listener]]
name = "http"
address = "127.0.0.1:0"
[[upstream]]
name = "o"
servers = [{ address = "127.0.0.1:9000" }]
[[route]]
name = "defaults"
upstream = "o"
[route.cache]
[[route]]
name = "chosen"
upstream = "o"
[route.cache]
default_ttl = "5m"
allow_set_cookie = true
lock_timeout = "2s"
upgrade_after = 0
status_header = ""
key = ["header:X-Device", "cookie:lang"]
bypass = ["cookie:session", "query:nocache"]
[[route]]
name = "uncached"
upstream = "o"
"#;
    let s = load_str(good, "good.toml", dir).unwrap();
    assert_eq!(s.cache.max_size, 64 << 20);
    assert_eq!(s.cache.max_object_size, Some(20 << 20));
    assert_eq!(s.cache.upgrade_share_percent, 10);
    let d = s.routes[0].cache.as_deref().expect("an empty table caches");
    assert_eq!(*d, crate::RouteCache::default());
    assert_eq!(
        d.status_header.as_ref().map(|h| h.as_str()),
        Some("x-cache")
    );
    let c = s.routes[1].cache.as_deref().unwrap();
    assert_eq!(c.default_ttl, Some(Duration::from_secs(300)));
    assert!(c.allow_set_cookie && !c.allow_authorization);
    assert_eq!(
        (c.lock_timeout, c.upgrade_after),
        (Duration::from_secs(2), 0)
    );
    assert_eq!(c.status_header, None);
    assert!(!c.key.query, "a key list without \"query\" leaves it out");
    assert_eq!(
        c.key.parts,
        [
            crate::HashKey::Header("x-device".into()),
            crate::HashKey::Cookie("lang".into())
        ]
    );
    assert_eq!(
        c.bypass,
        [
            crate::HashKey::Cookie("session".into()),
            crate::HashKey::Query("nocache".into())
        ]
    );
    assert!(d.key.query && d.key.parts.is_empty() && d.bypass.is_empty());
    assert!(s.routes[2].cache.is_none());
    let unset = load_str(
        "[[listener]]\nname = \"http\"\naddress = \"127.0.0.1:0\"\n",
        "none.toml",
        dir,
    )
    .unwrap();
    assert_eq!(unset.cache.max_size, 256 << 20);
    assert_eq!(unset.cache.max_object_size, None);
}

/// Each mistake of `[cache]` and `[route.cache]`, where it is.
fn route_cache_mistakes_are_located(dir: &Path) {
    let over = "[cache]\nmax_size = \"2m\"\nmax_object_size = \"3m\"\n";
    let errs = errors(over, dir);
    assert!(
        said_at(&errs, over, "\"3m\"").contains("not between 1 and max_size"),
        "{errs:#?}"
    );

    let bad = r#"
[cache]
max_size = "100k"
upgrade_share_percent = 0
[[listener]]
name = "http"
address = "127.0.0.1:0"
[[upstream]]
name = "o"
servers = [{ address = "127.0.0.1:9000" }]
[[route]]
name = "a"
upstream = "o"
[route.cache]
default_ttl = "soon"
status_header = "X Cache"
key = ["client"]
bypass = ["uri"]
[[route]]
name = "b"
respond = { status = 200 }
[route.cache]
[[route]]
name = "c"
upstream = "o"
[route.cache]
max_age = 5
"#;
    let errs = errors(bad, dir);
    let at = |needle: &str| said_at(&errs, bad, needle);
    assert!(at("\"100k\"").contains("too small"), "{errs:#?}");
    assert!(
        at("upgrade_share_percent = 0").contains("not 1 to 100"),
        "{errs:#?}"
    );
    assert!(at("\"soon\"").contains("soon"), "{errs:#?}");
    assert!(at("\"X Cache\"").contains("not a header name"), "{errs:#?}");
    assert!(at("\"client\"").contains("not a request part"), "{errs:#?}");
    assert!(at("\"uri\"").contains("not a request part"), "{errs:#?}");
    assert!(at("max_age").contains("unknown field"), "{errs:#?}");
    assert!(
        errs.iter()
            .any(|e| e.to_string().contains("[route.cache] but no upstream")),
        "{errs:#?}"
    );
    assert_eq!(errs.len(), 8, "{errs:#?}");
}

#[test]
fn route_mirrors_and_their_mistakes() {
    let dir = tempfile::tempdir().unwrap();
    let good = r#"
[[listener]]
name = "http"
address = "127.0.0.1:0"
[[upstream]]
name = "o"
servers = [{ address = "127.0.0.1:9000" }]
[[upstream]]
name = "shadow"
servers = [{ address = "127.0.0.1:9001" }]
[[route]]
name = "a"
upstream = "o"
[[route.mirror]]
upstream = "shadow"
[[route.mirror]]
upstream = "o"
percent = 0.5
header = { "x-beta" = "1" }
body_limit = "64k"
timeout = "250ms"
max_in_flight = 8
request_headers = { set = { "x-shadow" = "1" } }
"#;
    let s = load_str(good, "good.toml", dir.path()).unwrap();
    let m = &s.routes[0].mirrors;
    assert_eq!(m.len(), 2);
    assert_eq!(
        (m[0].upstream, m[0].per_million, m[0].body_limit),
        (1, 1_000_000, 1 << 20)
    );
    assert_eq!(
        (m[0].timeout, m[0].max_in_flight),
        (Duration::from_secs(1), 64)
    );
    assert_eq!(
        (m[1].upstream_name.as_str(), m[1].per_million),
        ("o", 5_000)
    );
    assert_eq!(m[1].headers.len(), 1);
    assert_eq!(
        (m[1].body_limit, m[1].timeout, m[1].max_in_flight),
        (64 << 10, Duration::from_millis(250), 8)
    );
    assert!(!m[1].request_headers.is_empty());

    let bad = r#"
[[listener]]
name = "http"
address = "127.0.0.1:0"
[[upstream]]
name = "o"
servers = [{ address = "127.0.0.1:9000" }]
[[route]]
name = "a"
upstream = "o"
[[route.mirror]]
upstream = "nope"
[[route.mirror]]
upstream = "o"
percent = 150
max_in_flight = 0
timeout = "soon"
"#;
    let errs = errors(bad, dir.path());
    let at = |needle: &str| said_at(&errs, bad, needle);
    assert!(at("\"nope\"").contains("not defined"), "{errs:#?}");
    assert!(at("150").contains("not a percentage"), "{errs:#?}");
    assert!(at("max_in_flight = 0").contains("at least 1"), "{errs:#?}");
    assert!(at("\"soon\"").contains("soon"), "{errs:#?}");
    assert_eq!(errs.len(), 4, "{errs:#?}");
}

#[test]
fn tracing_settings_and_their_mistakes() {
    let dir = tempfile::tempdir().unwrap();
    let base = r#"
[[listener]]
name = "http"
address = "127.0.0.1:0"
[[upstream]]
name = "o"
servers = [{ address = "127.0.0.1:9000" }]
[[route]]
name = "a"
upstream = "o"
"#;
    let s = load_str(base, "none.toml", dir.path()).unwrap();
    assert!(s.tracing.is_none());
    let good = format!(
        "{base}[tracing]\nendpoint = \"http://127.0.0.1:4317/\"\nsample_percent = 0.5\nqueue = 100\nexport_timeout = \"2s\"\ntrace_url = \"http://jaeger:16686/trace/{{trace_id}}\"\n"
    );
    let t = load_str(&good, "good.toml", dir.path())
        .unwrap()
        .tracing
        .unwrap();
    assert_eq!(t.endpoint, "http://127.0.0.1:4317");
    assert_eq!((t.sample_ratio, t.queue), (0.005, 100));
    assert_eq!(t.export_timeout, Duration::from_secs(2));
    assert_eq!(t.service_name, "sluice");
    let defaults = format!("{base}[tracing]\nendpoint = \"http://otel:4317\"\n");
    let t = load_str(&defaults, "d.toml", dir.path())
        .unwrap()
        .tracing
        .unwrap();
    assert_eq!((t.sample_ratio, t.queue, t.trace_url), (0.01, 8192, None));

    let bad = format!(
        "{base}[tracing]\nendpoint = \"otel:4317\"\nsample_percent = 101\nqueue = 0\ntrace_url = \"http://jaeger/\"\nservice_name = \"\"\n"
    );
    let errs = errors(&bad, dir.path());
    let at = |needle: &str| said_at(&errs, &bad, needle);
    assert!(at("\"otel:4317\"").contains("http://"), "{errs:#?}");
    assert_eq!(errs.len(), 1, "a bad endpoint stops there: {errs:#?}");
    let bad = bad.replace("\"otel:4317\"", "\"http://otel:4317\"");
    let errs = errors(&bad, dir.path());
    let at = |needle: &str| said_at(&errs, &bad, needle);
    assert!(at("101").contains("not a percentage"), "{errs:#?}");
    assert!(at("queue = 0").contains("at least one"), "{errs:#?}");
    assert!(at("\"http://jaeger/\"").contains("{trace_id}"), "{errs:#?}");
    assert!(at("service_name = \"\"").contains("empty"), "{errs:#?}");
    assert_eq!(errs.len(), 4, "{errs:#?}");
    let unknown = format!("{base}[tracing]\nendpoint = \"http://otel:4317\"\nratio = 1\n");
    assert!(!errors(&unknown, dir.path()).is_empty());
}

#[test]
fn waf_route_keys_their_defaults_and_mistakes() {
    let dir = tempfile::tempdir().unwrap();
    let src = r#"
[[listener]]
name = "http"
address = "127.0.0.1:0"
[[upstream]]
name = "o"
servers = [{ address = "127.0.0.1:9000" }]
[[waf.ruleset]]
name = "own"
rules = 'SecRule ARGS "@contains x" "id:1,phase:2,deny"'
[[route]]
name = "plain"
path_prefix = "/p/"
upstream = "o"
[route.waf]
ruleset = "own"
[[route]]
name = "outbound"
path_prefix = "/o/"
upstream = "o"
[route.waf]
ruleset = "own"
inspect_response = true
response_body_limit = "64k"
response_mime_types = ["application/json"]
"#;
    let s = load_str(src, "good.toml", dir.path()).unwrap();
    let plain = s.routes[0].waf.as_ref().unwrap();
    // Only its ruleset: every default is `RouteWaf::new`'s, and those are the documented ones.
    assert_eq!(**plain, crate::RouteWaf::new("own"));
    assert_eq!(plain.mode, crate::WafMode::Block);
    assert_eq!(plain.paranoia_level, 1);
    assert_eq!(
        (
            plain.inbound_anomaly_threshold,
            plain.outbound_anomaly_threshold
        ),
        (5, 4)
    );
    assert_eq!(plain.request_body_limit, 128 << 10);
    assert_eq!(plain.body_over_limit, crate::WafBodyOverLimit::Reject);
    assert_eq!(plain.on_overload, crate::WafOverload::Closed);
    assert!(plain.exclusions.is_empty());
    assert!(!plain.inspect_response, "off unless asked");
    assert_eq!(plain.response_body_limit, 512 << 10);
    assert_eq!(
        plain.response_mime_types,
        crate::DEFAULT_RESPONSE_MIME_TYPES
    );
    let out = s.routes[1].waf.as_ref().unwrap();
    assert!(out.inspect_response);
    assert_eq!(out.response_body_limit, 64 << 10);
    assert_eq!(out.response_mime_types, ["application/json"]);
    assert_eq!(s.waf.rulesets[0].engine, crate::WafEngine::Native);
    assert_eq!(
        s.waf.inline_percent,
        crate::DEFAULT_INLINE_PERCENT,
        "bodiless native inspections on the loop within its share unless asked"
    );
    let oracle = src.replace(
        "name = \"own\"\n",
        "name = \"own\"\nengine = \"modsecurity\"\n",
    );
    let s = load_str(&oracle, "good.toml", dir.path()).unwrap();
    assert_eq!(s.waf.rulesets[0].engine, crate::WafEngine::ModSecurity);
    let native = src.replace("name = \"own\"\n", "name = \"own\"\nengine = \"native\"\n");
    let s = load_str(&native, "good.toml", dir.path()).unwrap();
    assert_eq!(s.waf.rulesets[0].engine, crate::WafEngine::Native);
    let threads = format!("[waf]\ninline_percent = 0\n{native}");
    let s = load_str(&threads, "good.toml", dir.path()).unwrap();
    assert_eq!(s.waf.inline_percent, 0);
    let inline = format!("[waf]\ninline_percent = 40\n{native}");
    let s = load_str(&inline, "good.toml", dir.path()).unwrap();
    assert_eq!(s.waf.inline_percent, 40);
    let bad = format!("[waf]\ninline_percent = 101\n{native}");
    let errs = errors(&bad, dir.path());
    assert!(said_at(&errs, &bad, "101").contains("from 0"), "{errs:#?}");
    let bad = src.replace("name = \"own\"\n", "name = \"own\"\nengine = \"coraza\"\n");
    let errs = errors(&bad, dir.path());
    let said = said_at(&errs, &bad, "coraza");
    assert!(
        said.contains("`engine` is \"coraza\"") && said.contains("\"native\""),
        "{errs:#?}"
    );

    let bad = src.replace(
        r#"["application/json"]"#,
        r#"["application/json", "text/html; charset=utf-8", "HTML"]"#,
    );
    let errs = errors(&bad, dir.path());
    let said = said_at(&errs, &bad, "response_mime_types");
    assert!(
        said.contains("`text/html; charset=utf-8` is not a media type")
            && said.contains("`HTML` is not a media type")
            && !said.contains("`application/json`"),
        "{errs:#?}"
    );
}

#[test]
fn path_normalization_keys_their_defaults_and_mistakes() {
    let dir = tempfile::tempdir().unwrap();
    let src = r#"
[[listener]]
name = "strict"
address = "127.0.0.1:0"
[[listener]]
name = "lax"
address = "127.0.0.1:0"
merge_slashes = false
escaped_slashes = "decode"
[[upstream]]
name = "app"
servers = [{ address = "127.0.0.1:9001" }]
[[route]]
name = "raw"
path_prefix = "/raw/"
upstream = "app"
forward_path = "original"
[[route]]
name = "rest"
upstream = "app"
"#;
    let s = load_str(src, "good.toml", dir.path()).unwrap();
    assert_eq!(s.listeners[0].paths, crate::PathPolicy::default());
    assert!(s.listeners[0].paths.merge_slashes, "NGINX's default");
    assert_eq!(
        s.listeners[0].paths.escaped_slashes,
        crate::EscapedSlashes::Reject
    );
    assert!(!s.listeners[1].paths.merge_slashes);
    assert_eq!(
        s.listeners[1].paths.escaped_slashes,
        crate::EscapedSlashes::Decode
    );
    assert_eq!(s.routes[0].forward_path, crate::ForwardPath::Original);
    assert_eq!(s.routes[1].forward_path, crate::ForwardPath::Normalized);

    let bad = src
        .replace(
            r#"escaped_slashes = "decode""#,
            r#"escaped_slashes = "allow""#,
        )
        .replace(r#"forward_path = "original""#, r#"forward_path = "raw""#);
    let errs = errors(&bad, dir.path());
    let said = said_at(&errs, &bad, "escaped_slashes");
    assert!(said.contains(r#""reject", "keep", "decode""#), "{said}");
    let said = said_at(&errs, &bad, "forward_path");
    assert!(said.contains(r#""normalized", "original""#), "{said}");
}

#[test]
fn underscores_in_headers_is_off_unless_a_listener_turns_it_on() {
    let dir = tempfile::tempdir().unwrap();
    let src = r#"
[[listener]]
name = "plain"
address = "127.0.0.1:0"
[[listener]]
name = "keeps"
address = "127.0.0.1:0"
underscores_in_headers = true
[[upstream]]
name = "o"
servers = [{ address = "127.0.0.1:9000" }]
[[route]]
name = "a"
upstream = "o"
"#;
    let s = load_str(src, "good.toml", dir.path()).unwrap();
    assert!(!s.listeners[0].underscores_in_headers, "dropped by default");
    assert!(s.listeners[1].underscores_in_headers);

    let bad = r#"
[[listener]]
name = "http"
address = "127.0.0.1:0"
underscores_in_headers = "on"
"#;
    let errs = errors(bad, dir.path());
    assert!(
        !said_at(&errs, bad, "underscores_in_headers").is_empty(),
        "{errs:#?}"
    );
}

/// A route's limit is checked before its credentials unless it says otherwise or limits per
/// subject (known only after them); asking for before with a subject key is an error that
/// names the key and the fix. `[auth]` sizes the password-hashing pool.
#[test]
fn limits_come_before_credentials_unless_per_subject() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("keys"), "").unwrap();
    let route = |name: &str, limit: &str| {
        format!(
            "[[route]]\nname = \"{name}\"\nupstream = \"o\"\npath_prefix = \"/{name}\"\n\
             rate_limit = {{ rate = \"5/s\"{limit} }}\n\
             auth = {{ keys = {{ file = \"keys\", query = \"api_key\" }}, forward_credential = true }}\n"
        )
    };
    let head = "[[listener]]\nname = \"http\"\naddress = \"127.0.0.1:0\"\n\
                [[upstream]]\nname = \"o\"\nservers = [{ address = \"127.0.0.1:9000\" }]\n";
    let src = format!(
        "[auth]\nhash_threads = 2\nhash_queue = 0\n{head}{}{}{}{}",
        route("plain", ""),
        route("after", ", limit = \"after_auth\""),
        route("subject", ", key = \"subject\""),
        route("both", ", key = \"subject\", limit = \"after_auth\""),
    );
    let s = load_str(&src, "good.toml", dir.path()).unwrap();
    let before: Vec<bool> = s
        .routes
        .iter()
        .map(|r| r.rate_limit.as_ref().unwrap().before_auth)
        .collect();
    assert_eq!(before, [true, false, false, false]);
    assert!(s.routes[0].auth.as_ref().unwrap().forward_credential);
    assert_eq!((s.auth.hash_threads.get(), s.auth.hash_queue), (2, 0));
    let plain = load_str(&format!("{head}{}", route("p", "")), "p.toml", dir.path()).unwrap();
    assert_eq!(plain.auth, crate::AuthSettings::default());
    assert_eq!(plain.auth.hash_queue, 256);

    let bad = format!(
        "[auth]\nhash_threads = 0\n{head}{}{}",
        route("a", ", key = \"subject\", limit = \"before_auth\""),
        route("b", ", limit = \"first\""),
    );
    let errs = errors(&bad, dir.path());
    let at = |needle: &str| said_at(&errs, &bad, needle);
    let subject = at("limit = \"before_auth\"");
    assert!(
        subject.contains("key = \"subject\"") && subject.contains("limit = \"after_auth\""),
        "{errs:#?}"
    );
    assert!(
        at("limit = \"first\"").contains("\"before_auth\""),
        "{errs:#?}"
    );
    assert!(at("hash_threads = 0").contains("at least 1"), "{errs:#?}");
    assert_eq!(errs.len(), 3, "{errs:#?}");

    // An MQTT listener's connection rates have no credentials to come before or after.
    let mqtt = "[[listener]]\nname = \"m\"\naddress = \"127.0.0.1:0\"\nkind = \"mqtt\"\nupstream = \"o\"\n\
                [listener.mqtt.rate_per_client]\nrate = \"5/s\"\nlimit = \"after_auth\"\n\
                [[upstream]]\nname = \"o\"\nservers = [{ address = \"127.0.0.1:1883\" }]\n";
    let errs = errors(mqtt, dir.path());
    assert!(
        said_at(&errs, mqtt, "limit = \"after_auth\"").contains("does not apply"),
        "{errs:#?}"
    );
}
