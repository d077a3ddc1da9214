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
mod dns;
mod fleet;
mod layer4;
mod live;

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

#[test]
fn every_error_is_reported_at_once_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    write_cert(dir.path(), "good", "good.test");
    write_cert(dir.path(), "other", "other.test");
    write_cert(dir.path(), "open", "open.test");
    set_mode(&dir.path().join("open.key"), 0o644);
    let src = r#"
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

#[test]
fn offload_settings_load_and_bad_engines_are_named() {
    let dir = tempfile::tempdir().unwrap();
    write_cert(dir.path(), "a", "a.test");
    let base = "[[listener]]\nname = \"l\"\naddress = \"127.0.0.1:1\"\n[listener.tls]\n";
    let good = format!(
        "{base}[offload.crypto]\nengines = [\"pool\", \"inline\"]\npool_threads = 3\ndeadline = \"20ms\"\nverify = \"all\"\n[[certificate]]\nname = \"a\"\ncert = \"a.crt\"\nkey = \"a.key\"\noffload_engines = []\n"
    );
    let s = load_str(&good, "t", dir.path()).unwrap();
    let c = &s.offload.crypto;
    assert_eq!(c.engines, Some(vec![crate::CryptoEngine::Pool]));
    let unset = good.replace("engines = [\"pool\", \"inline\"]\n", "");
    assert_eq!(
        load_str(&unset, "t", dir.path())
            .unwrap()
            .offload
            .crypto
            .engines,
        None,
        "no list: chosen at start"
    );
    assert_eq!(
        (c.pool_threads, c.deadline, c.verify_all),
        (Some(3), Duration::from_millis(20), true)
    );
    assert_eq!(s.certificates[0].offload_engines, Some(vec![]));
    assert!(c.mb_on_worker, "mb batches run on the worker by default");
    let thread = good.replace(
        "verify = \"all\"\n",
        "verify = \"all\"\nmb_run_on = \"thread\"\n",
    );
    assert!(
        !load_str(&thread, "t", dir.path())
            .unwrap()
            .offload
            .crypto
            .mb_on_worker
    );
    let errs = errors(
        &good.replace("verify = \"all\"\n", "mb_run_on = \"gpu\"\n"),
        dir.path(),
    );
    assert!(
        errs.iter().any(|e| e.message.contains("mb_run_on")),
        "{errs:#?}"
    );
    assert_eq!(c.mb_lanes, None, "mb lanes: the CPU's choice by default");
    for (v, want) in [("4", Some(4)), ("8", Some(8)), ("\"auto\"", None)] {
        let t = good.replace("verify = \"all\"\n", &format!("mb_lanes = {v}\n"));
        assert_eq!(
            load_str(&t, "t", dir.path())
                .unwrap()
                .offload
                .crypto
                .mb_lanes,
            want,
            "{v}"
        );
    }
    let errs = errors(
        &good.replace("verify = \"all\"\n", "mb_lanes = 6\n"),
        dir.path(),
    );
    assert!(
        errs.iter()
            .any(|e| e.message.contains("mb_lanes") && e.help.contains("256-bit")),
        "{errs:#?}"
    );
    assert_eq!(
        s.admin.as_ref().map(|a| a.address),
        Some("127.0.0.1:9901".parse().unwrap()),
        "admin on loopback by default"
    );

    let bad = format!(
        "{base}[offload.crypto]\nengines = [\"gpu\"]\npool_threads = 0\n[admin]\naddress = \"nowhere\"\n[[certificate]]\nname = \"a\"\ncert = \"a.crt\"\nkey = \"a.key\"\noffload_engines = [\"qat\"]\n"
    );
    let errs = errors(&bad, dir.path());
    for needle in [
        "\"gpu\"",
        "pool_threads must be at least 1",
        "`nowhere`",
        "offload_engines names \"qat\"",
    ] {
        assert!(
            errs.iter().any(|e| e.message.contains(needle)),
            "missing {needle}: {errs:#?}"
        );
    }
}

#[test]
fn rsa_key_exchange_is_off_by_default_and_refused_with_tls_1_3_only() {
    let dir = tempfile::tempdir().unwrap();
    write_cert(dir.path(), "a", "example.com");
    let s = load_str(GOOD, "good.toml", dir.path()).unwrap();
    assert!(!s.listeners[0].tls.as_ref().unwrap().rsa_key_exchange);

    let on = GOOD.replace("min_version = \"1.3\"", "rsa_key_exchange = true");
    let s = load_str(&on, "on.toml", dir.path()).unwrap();
    assert!(s.listeners[0].tls.as_ref().unwrap().rsa_key_exchange);

    let src = GOOD.replace(
        "min_version = \"1.3\"",
        "min_version = \"1.3\"\nrsa_key_exchange = true",
    );
    let errs = errors(&src, dir.path());
    assert_eq!(errs.len(), 1, "{errs:#?}");
    assert!(errs[0].message.contains("rsa_key_exchange needs TLS 1.2"));
    assert_eq!(errs[0].line, line_of(&src, "rsa_key_exchange"));
    assert!(errs[0].help.contains("min_version = \"1.2\""));
}

#[test]
fn handshake_scheduling_defaults_settings_and_located_errors() {
    let dir = tempfile::tempdir().unwrap();
    write_cert(dir.path(), "a", "example.com");
    let s = load_str(GOOD, "good.toml", dir.path()).unwrap();
    assert_eq!(
        s.offload.handshakes,
        crate::Handshakes {
            isolate: true,
            share_percent: 1,
            max_in_progress: None
        },
        "isolated, nice +19, 128 per CPU"
    );
    let set = format!(
        "{GOOD}\n[offload.handshakes]\nisolate = false\nshare_percent = 25\nmax_in_progress = 64\n"
    );
    let h = load_str(&set, "h.toml", dir.path())
        .unwrap()
        .offload
        .handshakes;
    assert_eq!(
        (h.isolate, h.share_percent, h.max_in_progress),
        (false, 25, Some(64))
    );
    for (bad, says) in [
        ("share_percent = 60", "share_percent = 60 is over 50"),
        ("max_in_progress = 0", "max_in_progress must be at least 1"),
    ] {
        let src = format!("{GOOD}\n[offload.handshakes]\n{bad}\n");
        let errs = errors(&src, dir.path());
        assert_eq!(errs.len(), 1, "{errs:#?}");
        assert!(errs[0].message.contains(says), "{errs:#?}");
        assert_eq!(errs[0].line, line_of(&src, bad), "{bad}");
    }
}

#[test]
fn key_exchange_groups_load_in_any_openssl_spelling_and_bad_lists_are_located() {
    let dir = tempfile::tempdir().unwrap();
    write_cert(dir.path(), "a", "example.com");
    let s = load_str(GOOD, "good.toml", dir.path()).unwrap();
    assert_eq!(
        s.listeners[0].tls.as_ref().unwrap().groups,
        None,
        "BoringSSL's default"
    );

    let with = |groups: &str| {
        GOOD.replace(
            "min_version = \"1.3\"",
            &format!("min_version = \"1.3\"\ngroups = {groups}"),
        )
    };
    let s = load_str(
        &with(r#"["x25519", "prime256v1", "secp384r1", "X25519MLKEM768"]"#),
        "g.toml",
        dir.path(),
    )
    .unwrap();
    assert_eq!(
        s.listeners[0].tls.as_ref().unwrap().groups,
        Some(vec!["X25519", "P-256", "P-384", "X25519MLKEM768"])
    );

    for (groups, says, help) in [
        (
            r#"["X25519", "brainpoolP256r1"]"#,
            "\"brainpoolP256r1\", which is not a key-exchange group",
            "\"X25519MLKEM768\"",
        ),
        (
            r#"["P-256", "secp256r1"]"#,
            "names P-256 twice",
            "each group once",
        ),
        (
            "[]",
            "groups is empty",
            "remove groups for the default (X25519MLKEM768, X25519, P-256, P-384)",
        ),
    ] {
        let src = with(groups);
        let errs = errors(&src, dir.path());
        assert_eq!(errs.len(), 1, "{groups}: {errs:#?}");
        assert!(errs[0].message.contains(says), "{groups}: {errs:#?}");
        assert!(errs[0].message.contains("listener `"), "{errs:#?}");
        assert!(errs[0].help.contains(help), "{groups}: {errs:#?}");
        assert_eq!(errs[0].line, line_of(&src, "groups"), "{groups}");
    }
}

#[test]
fn compression_defaults_overrides_and_errors() {
    let dir = tempfile::tempdir().unwrap();
    write_cert(dir.path(), "a", "example.com");
    let s = load_str(GOOD, "good.toml", dir.path()).unwrap();
    let c = &s.routes[0].compression;
    assert!(!c.enabled, "off unless configured, as in NGINX");
    assert!(c.compresses_type("text/html; charset=utf-8"));
    assert!(c.compresses_type("application/ld+json"));
    assert!(!c.compresses_type("image/png"));

    let src = format!(
        "{GOOD}\n[compression]\nenabled = true\ngzip_backend = \"zlib-rs\"\ngzip_level = 6\n"
    )
    .replace(
        "upstream = \"app\"\n\n[[route]]\nname = \"user\"",
        "upstream = \"app\"\n[route.compression]\nenabled = false\n\n[[route]]\nname = \"user\"",
    );
    let s = load_str(&src, "c.toml", dir.path()).unwrap();
    assert!(!s.routes[0].compression.enabled, "the route's override");
    let user = &s.routes[1].compression;
    assert!(user.enabled);
    assert_eq!(
        (user.gzip_backend, user.gzip_level),
        (crate::GzipBackend::ZlibRs, 6)
    );

    let src = format!(
        "{GOOD}\n[compression]\ncodecs = [\"gzip\", \"lzma\"]\ngzip_level = 5\ntypes = [\"html\"]\n"
    );
    let errs = errors(&src, dir.path());
    for (needle, line) in [
        ("\"lzma\"", "codecs ="),
        ("gzip_level = 5 is out of range 0-3", "gzip_level"),
        ("`html`, which is not a MIME type", "types ="),
    ] {
        let e = errs
            .iter()
            .find(|e| e.message.contains(needle))
            .unwrap_or_else(|| panic!("missing {needle}: {errs:#?}"));
        assert_eq!(e.line, line_of(&src, line), "{needle}");
    }
}

#[test]
fn keyless_settings_load_and_a_keyless_certificate_needs_the_engine() {
    let dir = tempfile::tempdir().unwrap();
    write_cert(dir.path(), "a", "a.test");
    write_cert(dir.path(), "ks", "keyserver.test");
    write_cert(dir.path(), "gw", "gateway.test");
    let base = "[[listener]]\nname = \"l\"\naddress = \"127.0.0.1:1\"\n[listener.tls]\n";
    let keyless = "[offload.keyless]\nservers = [\"10.0.0.5:2407\", \"ks2.internal:2407\"]\nca = \"ks.crt\"\ncertificate = \"gw.crt\"\nkey = \"gw.key\"\ntimeout = \"30ms\"\nfallback = \"none\"\n";
    // No key file: the key lives on key servers.
    let cert = "[[certificate]]\nname = \"a\"\ncert = \"a.crt\"\n";
    let good =
        format!("{base}[offload.crypto]\nengines = [\"keyless\", \"pool\"]\n{keyless}{cert}");
    let s = load_str(&good, "t", dir.path()).unwrap();
    assert_eq!(
        s.offload.crypto.engines,
        Some(vec![
            crate::CryptoEngine::Keyless,
            crate::CryptoEngine::Pool
        ])
    );
    let k = s.offload.keyless.as_ref().unwrap();
    assert_eq!(k.servers.len(), 2);
    assert_eq!(
        k.server_name, "10.0.0.5",
        "defaults to the first server's host"
    );
    assert_eq!(
        (k.connections, k.timeout, k.fallback_local),
        (2, Duration::from_millis(30), false)
    );
    assert!(s.certificates[0].key.is_none());
    assert_eq!(s.certificates[0].key_type, crate::KeyType::Ecdsa(256));

    // Without the engine, a certificate without a key is an error that says what to do; so
    // is naming the engine without [offload.keyless], and a server that is not host:port.
    let src = format!("{base}{cert}");
    let errs = errors(&src, dir.path());
    assert!(
        errs.iter()
            .any(|e| e.message.contains("has no `key`") && e.help.contains("keyless")),
        "{errs:#?}"
    );
    let src = format!("{base}[offload.crypto]\nengines = [\"keyless\"]\n{cert}");
    let errs = errors(&src, dir.path());
    assert!(
        errs.iter()
            .any(|e| e.message.contains("[offload.keyless] is missing")),
        "{errs:#?}"
    );
    let src = format!(
        "{base}[offload.crypto]\nengines = [\"keyless\"]\n{}{cert}",
        keyless.replace("10.0.0.5:2407", "10.0.0.5")
    );
    let errs = errors(&src, dir.path());
    let e = errs
        .iter()
        .find(|e| e.message.contains("is not host:port"))
        .unwrap_or_else(|| panic!("{errs:#?}"));
    assert_eq!(e.line, line_of(&src, "servers ="));
}

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
    let good = format!(
        "[rate_limit]\nredis = \"rediss://:pw@redis.internal:6380/2\"\nredis_ca = \"ca.crt\"\nredis_certificate = \"gw.crt\"\nredis_key = \"gw.key\"\n{tail}"
    );
    let s = load_str(&good, "good.toml", dir.path()).unwrap();
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
    let s = load_str(&roots, "good.toml", dir.path()).unwrap();
    assert!(s.rate_limit_store.redis_tls.as_ref().unwrap().ca.is_empty());
    let plain = format!("[rate_limit]\nredis = \"redis://127.0.0.1:6379/\"\n{tail}");
    assert!(
        load_str(&plain, "good.toml", dir.path())
            .unwrap()
            .rate_limit_store
            .redis_tls
            .is_none()
    );

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
        let errs = errors(&src, dir.path());
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
