use crate::{
    Balance, HashKey, HealthProbe, HostPattern, LoadError, PassHost, PathMatch, TlsVersion,
    UnknownSni, load_str, parse_byte_size, parse_duration,
};
use boring::asn1::Asn1Time;
use boring::ec::{EcGroup, EcKey};
use boring::hash::MessageDigest;
use boring::nid::Nid;
use boring::pkey::PKey;
use boring::x509::extension::SubjectAlternativeName;
use boring::x509::{X509, X509NameBuilder};
use std::path::Path;
use std::time::Duration;

/// Writes `stem.crt` and `stem.key` (mode 0600) with a fresh P-256 key for `host`.
mod acme;
mod dns;
mod fleet;
mod layer4;
mod live;
mod logging;
mod ocsp;
mod offload;
mod policy;
mod reference;
mod upstreams;

fn write_cert(dir: &Path, stem: &str, host: &str) {
    let key = PKey::from_ec_key(
        EcKey::generate(&EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).unwrap()).unwrap(),
    )
    .unwrap();
    let mut name = X509NameBuilder::new().unwrap();
    name.append_entry_by_nid(Nid::COMMONNAME, host).unwrap();
    let name = name.build();
    let mut b = X509::builder().unwrap();
    b.set_version(2).unwrap();
    b.set_subject_name(&name).unwrap();
    b.set_issuer_name(&name).unwrap();
    b.set_pubkey(&key).unwrap();
    b.set_not_before(&Asn1Time::days_from_now(0).unwrap())
        .unwrap();
    b.set_not_after(&Asn1Time::days_from_now(30).unwrap())
        .unwrap();
    let san = SubjectAlternativeName::new()
        .dns(host)
        .build(&b.x509v3_context(None, None))
        .unwrap();
    b.append_extension(&san).unwrap();
    b.sign(&key, MessageDigest::sha256()).unwrap();
    std::fs::write(dir.join(format!("{stem}.crt")), b.build().to_pem().unwrap()).unwrap();
    let key_path = dir.join(format!("{stem}.key"));
    std::fs::write(&key_path, key.private_key_to_pem_pkcs8().unwrap()).unwrap();
    set_mode(&key_path, 0o600);
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

const GOOD: &str = r#"
[global]
shutdown_timeout = "5s"

[[listener]]
name = "https"
address = "127.0.0.1:8443"
max_body_bytes = "2m"
[listener.tls]
certificates = ["a"]
unknown_sni = "reject"
min_version = "1.3"

[[listener]]
name = "http"
address = "127.0.0.1:8080"
protocols = ["http/1.1"]

[[certificate]]
name = "a"
cert = "a.crt"
key = "a.key"

[[upstream]]
name = "app"
balance = "weighted_round_robin"
pass_host = "rewrite"
upstream_host = "app.internal"
servers = [{ address = "127.0.0.1:9001", weight = 3 }, { address = "localhost:9002" }]

[[route]]
name = "api"
hosts = ["*.example.com", "example.com"]
path_prefix = "/api/"
methods = ["GET", "POST"]
headers = { "x-canary" = "1" }
upstream = "app"

[[route]]
name = "user"
path_regex = "^/u/[0-9]+$"
listeners = ["http"]
upstream = "app"
"#;

#[test]
fn a_good_file_loads_with_its_values_and_defaults() {
    let dir = tempfile::tempdir().unwrap();
    write_cert(dir.path(), "a", "example.com");
    let s = load_str(GOOD, "good.toml", dir.path()).unwrap();
    assert_eq!(s.global.shutdown_timeout, Duration::from_secs(5));
    assert_eq!(
        s.global.stream_drain_timeout,
        Duration::from_secs(3600),
        "default"
    );
    let https = &s.listeners[0];
    assert_eq!(https.max_body_bytes, 2 << 20);
    assert_eq!(https.keepalive_timeout, Duration::from_secs(75), "default");
    let tls = https.tls.as_ref().unwrap();
    assert_eq!(tls.unknown_sni, UnknownSni::Reject);
    assert_eq!(
        (tls.min_version, tls.max_version),
        (TlsVersion::V1_3, TlsVersion::V1_3)
    );
    assert!(tls.session_tickets);
    assert!(s.listeners[1].tls.is_none());
    assert!(s.listeners[1].http1 && !s.listeners[1].h2);
    assert_eq!(
        s.certificates[0].hosts,
        vec![HostPattern::Exact("example.com".into())],
        "hosts from the SAN"
    );
    let up = &s.upstreams[0];
    assert_eq!(up.balance, Balance::WeightedRoundRobin);
    assert_eq!(up.pass_host, PassHost::Rewrite("app.internal".into()));
    assert_eq!(up.servers[0].weight.get(), 3);
    assert_eq!(up.servers[1].weight.get(), 1);
    assert!(
        up.servers[1].address.addr.ip().is_loopback(),
        "names resolve at load"
    );
    assert!(matches!(&s.routes[0].path, PathMatch::Prefix(p) if p == "/api/"));
    assert!(matches!(&s.routes[1].path, PathMatch::Regex(_)));
    assert_eq!(s.routes[1].listeners, vec!["http".to_string()]);
}

fn errors(src: &str, dir: &Path) -> Vec<crate::ConfigError> {
    match load_str(src, "broken.toml", dir) {
        Err(LoadError::Invalid(e)) => e,
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("a broken configuration loaded"),
    }
}

/// The error on `needle`'s line; fails the test, listing every error, when there is none.
fn error_at<'a>(errs: &'a [crate::ConfigError], src: &str, needle: &str) -> &'a crate::ConfigError {
    errs.iter()
        .find(|e| e.line == line_of(src, needle))
        .unwrap_or_else(|| panic!("no error at `{needle}`: {errs:#?}"))
}

/// Every error on `needle`'s line, as "message | help" lines (empty when there is none).
fn said_at(errs: &[crate::ConfigError], src: &str, needle: &str) -> String {
    errs.iter()
        .filter(|e| e.line == line_of(src, needle))
        .map(|e| format!("{} | {}", e.message, e.help))
        .collect::<Vec<_>>()
        .join("\n")
}

fn line_of(src: &str, needle: &str) -> usize {
    src.lines()
        .position(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("{needle} not in source"))
        + 1
}

/// One configuration with a mistake of every kind, for
/// `every_error_is_reported_at_once_with_its_line`.
const EVERY_KIND_OF_MISTAKE: &str = r#"
[[listener]]
name = "web"
address = "127.0.0.1:80800"
[listener.tls]
certificates = ["good", "nosuch"]

[[listener]]
name = "web"
adress = "127.0.0.1:8081"

[[certificate]]
name = "good"
cert = "good.crt"
key = "good.key"

[[certificate]]
name = "mismatch"
cert = "good.crt"
key = "other.key"

[[certificate]]
name = "missing"
cert = "missing.crt"
key = "good.key"

[[certificate]]
name = "open"
cert = "open.crt"
key = "open.key"

[[upstream]]
name = "app"
servers = [{ address = "127.0.0.1:9000" }]
connect_timeout = 5

[[route]]
name = "r"
upstream = "ghost"

[[route]]
name = "to-app"
upstream = "app"
"#;

#[test]
fn every_error_is_reported_at_once_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    write_cert(dir.path(), "good", "good.test");
    write_cert(dir.path(), "other", "other.test");
    write_cert(dir.path(), "open", "open.test");
    set_mode(&dir.path().join("open.key"), 0o644);
    let src = EVERY_KIND_OF_MISTAKE;
    let errs = errors(src, dir.path());
    let rendered: Vec<String> = errs.iter().map(ToString::to_string).collect();
    let find = |needle: &str| {
        errs.iter()
            .find(|e| e.message.contains(needle))
            .unwrap_or_else(|| panic!("no error about {needle:?} in {rendered:#?}"))
    };
    assert_eq!(find("not an ip:port").line, line_of(src, "80800"));
    assert_eq!(find("`nosuch`").line, line_of(src, "\"nosuch\""));
    assert_eq!(find("unknown field `adress`").line, line_of(src, "adress"));
    assert_eq!(find("does not belong").line, line_of(src, "other.key"));
    assert_eq!(find("cannot read").line, line_of(src, "missing.crt"));
    let open = find("readable by group or others");
    assert_eq!(open.line, line_of(src, "open.key"));
    assert!(open.help.contains("chmod 600"), "{}", open.help);
    assert_eq!(find("invalid type").line, line_of(src, "connect_timeout"));
    assert_eq!(find("`ghost`").line, line_of(src, "ghost"));
    assert!(
        !errs
            .iter()
            .any(|e| e.message.contains("`app`, which is not defined")),
        "an entry that failed to parse is not reported again as undefined: {rendered:#?}"
    );
    assert!(
        errs.iter()
            .all(|e| e.file == "broken.toml" && e.column >= 1 && !e.help.is_empty()),
        "{rendered:#?}"
    );
    // The column points at the value, not the start of the line.
    assert_eq!(find("not an ip:port").column, "address = ".len() + 1);
}

#[test]
fn duplicate_names_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let src = "[[listener]]\nname = \"a\"\naddress = \"127.0.0.1:1\"\n[[listener]]\nname = \"a\"\naddress = \"127.0.0.1:2\"\n[[upstream]]\nname = \"u\"\nservers = [{ address = \"127.0.0.1:3\" }]\n[[upstream]]\nname = \"u\"\nservers = [{ address = \"127.0.0.1:4\" }]\n";
    let errs = errors(src, dir.path());
    assert!(
        errs.iter()
            .any(|e| e.message.contains("duplicate listener name `a`") && e.line == 5)
    );
    assert!(
        errs.iter()
            .any(|e| e.message.contains("duplicate upstream name `u`") && e.line == 11)
    );
}

#[test]
fn syntax_errors_and_unknown_sections_name_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let errs = errors(
        "[[listener]]\nname = \"a\"\naddress = \"127.0.0.1:1\n",
        dir.path(),
    );
    assert_eq!(errs[0].line, 3, "{errs:?}");
    let errs = errors(
        "[[listener]]\nname = \"a\"\naddress = \"127.0.0.1:1\"\n[listners]\nx = 1\n",
        dir.path(),
    );
    assert!(
        errs.iter()
            .any(|e| e.message.contains("unknown section `listners`") && e.line == 4),
        "{errs:?}"
    );
}

#[test]
fn the_dangerous_switch_allows_a_readable_key() {
    let dir = tempfile::tempdir().unwrap();
    write_cert(dir.path(), "a", "a.test");
    set_mode(&dir.path().join("a.key"), 0o644);
    let src = "[[listener]]\nname = \"l\"\naddress = \"127.0.0.1:1\"\n[listener.tls]\n[[certificate]]\nname = \"a\"\ncert = \"a.crt\"\nkey = \"a.key\"\n";
    assert!(load_str(src, "t", dir.path()).is_err());
    let allowed = format!("{src}[dangerous]\nallow_insecure_key_permissions = true\n");
    assert!(load_str(&allowed, "t", dir.path()).is_ok());
}

#[test]
fn https_listener_without_certificates_and_bad_route_values_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let src = "[[listener]]\nname = \"l\"\naddress = \"127.0.0.1:1\"\n[listener.tls]\n[[upstream]]\nname = \"u\"\nservers = [{ address = \"127.0.0.1:3\", weight = 0 }]\n[[route]]\nname = \"r\"\nupstream = \"u\"\npath_prefix = \"api\"\nmethods = [\"get\"]\n";
    let errs = errors(src, dir.path());
    for needle in [
        "has no certificate",
        "weight 0",
        "does not start with '/'",
        "not an HTTP method",
    ] {
        assert!(
            errs.iter().any(|e| e.message.contains(needle)),
            "missing {needle}: {errs:#?}"
        );
    }
}

#[test]
fn units_parse_and_refuse_ambiguity() {
    assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
    assert_eq!(parse_duration("1m 30s").unwrap(), Duration::from_secs(90));
    assert!(parse_duration("30").is_err());
    assert_eq!(parse_byte_size("16k").unwrap(), 16384);
    assert_eq!(parse_byte_size("10MiB").unwrap(), 10 << 20);
    assert_eq!(parse_byte_size("123").unwrap(), 123);
    assert!(parse_byte_size("12x").is_err());
}

#[test]
fn host_patterns_match_like_certificates() {
    let w = HostPattern::parse("*.Example.com").unwrap();
    assert!(w.matches("a.example.com"));
    assert!(!w.matches("example.com"));
    assert!(!w.matches("a.b.example.com"));
    assert!(HostPattern::parse("a.*.com").is_err());
    assert_eq!(crate::normalize_host("Example.COM.:443"), "example.com");
    assert_eq!(crate::normalize_host("[::1]:8443"), "[::1]");
    // The per-request form borrows what needs no lowercasing, and agrees with the other.
    use std::borrow::Cow;
    for (host, want, borrowed) in [
        ("example.com:8443", "example.com", true),
        ("127.0.0.1:443", "127.0.0.1", true),
        ("example.com.", "example.com", true),
        (" Example.COM.:443", "example.com", false),
        ("[::1]:8443", "[::1]", true),
        ("[::A]", "[::a]", false),
    ] {
        let got = crate::normalized_host(host);
        assert_eq!(got, want, "{host}");
        assert_eq!(matches!(got, Cow::Borrowed(_)), borrowed, "{host}");
        assert_eq!(crate::normalize_host(host), want, "{host}");
    }
    // The one-pass path answers what the general one does, over hosts built from the
    // characters that decide between them.
    let parts = [
        "a", "Z", "0", "9", ".", "-", ":", "[", "]", " ", "\t", "é", "80",
    ];
    let mut hosts = vec![String::new()];
    for _ in 0..4 {
        hosts = hosts
            .iter()
            .flat_map(|h| parts.iter().map(move |p| format!("{h}{p}")))
            .collect();
        for h in &hosts {
            assert_eq!(
                crate::pattern::normalized_host(h),
                crate::pattern::normalized_host_general(h),
                "{h:?}"
            );
        }
    }
}

#[test]
fn the_embedded_default_is_valid() {
    let dir = tempfile::tempdir().unwrap();
    write_cert(dir.path(), "localhost-ecdsa", "localhost");
    write_cert(dir.path(), "localhost-rsa", "localhost");
    write_secret(
        &dir.path().join("admin.token"),
        "0123456789abcdef0123456789abcdef\n",
    );
    let params = crate::DefaultConfigParams {
        state_dir: dir.path(),
    };
    let (text, s) = crate::default_config(&params).unwrap();
    assert!(!text.contains('{') || !text.contains("{state_dir}"));
    assert_eq!(s.demo, Some("127.0.0.1:8081".parse().unwrap()));
    assert_eq!(s.upstreams[0].servers[0].address.addr, s.demo.unwrap());
    assert_eq!(s.listeners.len(), 2);
    assert_eq!(s.listeners[0].address.port(), 8443);
    assert!(
        s.listeners[0].http3,
        "the default serves HTTP/3 beside HTTPS"
    );
    assert!(!s.listeners[1].http3);
    let admin = s.admin.as_ref().unwrap();
    assert_eq!(
        admin.token.as_deref(),
        Some("0123456789abcdef0123456789abcdef")
    );
}

/// Writes `text` to `path` with mode 0600.
fn write_secret(path: &std::path::Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

/// `http3 = true` needs TLS and an HTTP listener; each refusal names its line and the fix.
#[test]
fn http3_is_refused_where_it_cannot_be_served() {
    let dir = tempfile::tempdir().unwrap();
    write_cert(dir.path(), "a", "example.com");
    let src = r#"
[[listener]]
name = "plain"
address = "127.0.0.1:8080"
http3 = true # plain

[[listener]]
name = "l4"
address = "127.0.0.1:8444"
kind = "tcp"
upstream = "app"
http3 = true # l4
[listener.tls]
certificates = ["a"]

[[listener]]
name = "https"
address = "127.0.0.1:8443"
http3 = true # fine
[listener.tls]
certificates = ["a"]

[[certificate]]
name = "a"
cert = "a.crt"
key = "a.key"

[[upstream]]
name = "app"
servers = [{ address = "127.0.0.1:9001" }]
"#;
    let errs = errors(src, dir.path());
    assert!(
        said_at(&errs, src, "# plain").contains("needs TLS"),
        "{errs:#?}"
    );
    assert!(
        said_at(&errs, src, "# l4").contains("kind = \"tcp\""),
        "{errs:#?}"
    );
    assert_eq!(said_at(&errs, src, "# fine"), "");
    let ok = src
        .replace("http3 = true # plain", "")
        .replace("http3 = true # l4", "");
    let s = load_str(&ok, "ok.toml", dir.path()).unwrap();
    assert_eq!(
        s.listeners.iter().map(|l| l.http3).collect::<Vec<_>>(),
        vec![false, false, true]
    );
}

/// QUIC settings: defaults (retry only under a flood, the keep-alive timeout as the idle
/// timeout, 100 streams), explicit values, and refusals with their line.
#[test]
fn quic_settings_load_with_defaults_and_refuse_bad_values() {
    let dir = tempfile::tempdir().unwrap();
    write_cert(dir.path(), "a", "example.com");
    let listener = |extra: &str| {
        format!(
            r#"
[[listener]]
name = "https"
address = "127.0.0.1:8443"
http3 = true
keepalive_timeout = "20s"
{extra}
[listener.tls]
certificates = ["a"]

[[certificate]]
name = "a"
cert = "a.crt"
key = "a.key"
"#
        )
    };
    let s = load_str(&listener(""), "q.toml", dir.path()).unwrap();
    let q = s.listeners[0].quic;
    assert_eq!(q.retry, crate::QuicRetry::Auto);
    assert_eq!(
        q.idle_timeout,
        Duration::from_secs(20),
        "the keep-alive timeout"
    );
    assert_eq!(q.max_streams, 100);
    let src =
        listener("quic_retry = \"always\"\nquic_idle_timeout = \"5s\"\nquic_max_streams = 16");
    let q = load_str(&src, "q.toml", dir.path()).unwrap().listeners[0].quic;
    assert_eq!(
        (q.retry, q.idle_timeout, q.max_streams),
        (crate::QuicRetry::Always, Duration::from_secs(5), 16)
    );
    let src = listener("quic_retry = \"sometimes\" # retry\nquic_max_streams = 0 # streams");
    let errs = errors(&src, dir.path());
    assert!(
        said_at(&errs, &src, "# retry").contains("always"),
        "{errs:#?}"
    );
    assert!(
        said_at(&errs, &src, "# streams").contains("quic_max_streams"),
        "{errs:#?}"
    );
}
