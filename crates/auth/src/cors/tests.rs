use super::*;
use std::time::Duration;

fn cors(credentials: bool, any: bool) -> Cors {
    Cors {
        origins: vec![OriginPattern {
            scheme: "https://".into(),
            host: "example.com".into(),
            wildcard: true,
            port: String::new(),
        }],
        any_origin: any,
        methods: vec![Method::GET, Method::PUT],
        headers: Some(vec![header::CONTENT_TYPE]),
        expose_headers: vec![header::ETAG],
        credentials,
        max_age: Duration::from_secs(600),
    }
}

fn request(origin: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(header::ORIGIN, origin.parse().unwrap());
    h.insert(
        header::ACCESS_CONTROL_REQUEST_METHOD,
        "PUT".parse().unwrap(),
    );
    h
}

#[test]
fn a_preflight_from_an_allowed_origin_gets_the_routes_lists() {
    let c = cors(true, false);
    assert!(is_preflight(
        &Method::OPTIONS,
        &request("https://a.example.com")
    ));
    assert!(!is_preflight(
        &Method::GET,
        &request("https://a.example.com")
    ));
    let (h, ok) = preflight(&c, &request("https://a.example.com"));
    assert!(ok);
    assert_eq!(
        h[header::ACCESS_CONTROL_ALLOW_ORIGIN],
        "https://a.example.com"
    );
    assert_eq!(h[header::ACCESS_CONTROL_ALLOW_CREDENTIALS], "true");
    assert_eq!(h[header::ACCESS_CONTROL_ALLOW_METHODS], "GET, PUT");
    assert_eq!(h[header::ACCESS_CONTROL_ALLOW_HEADERS], "content-type");
    assert_eq!(h[header::ACCESS_CONTROL_MAX_AGE], "600");
    let (h, ok) = preflight(&c, &request("https://evil.net"));
    assert!(!ok);
    assert!(!h.contains_key(header::ACCESS_CONTROL_ALLOW_ORIGIN));
    assert!(h.contains_key(header::VARY));
}

#[test]
fn responses_name_the_origin_or_the_wildcard() {
    let mut out = HeaderMap::new();
    let origin = HeaderValue::from_static("https://a.example.com");
    on_response(&cors(false, true), Some(&origin), &mut out);
    assert_eq!(out[header::ACCESS_CONTROL_ALLOW_ORIGIN], "*");
    let mut out = HeaderMap::new();
    on_response(&cors(true, false), Some(&origin), &mut out);
    assert_eq!(
        out[header::ACCESS_CONTROL_ALLOW_ORIGIN],
        "https://a.example.com"
    );
    assert_eq!(out[header::ACCESS_CONTROL_EXPOSE_HEADERS], "etag");
    let mut out = HeaderMap::new();
    on_response(
        &cors(true, false),
        Some(&HeaderValue::from_static("https://x.org")),
        &mut out,
    );
    assert!(!out.contains_key(header::ACCESS_CONTROL_ALLOW_ORIGIN));
    assert_eq!(out[header::VARY], "Origin");
}

fn pattern(text: &str) -> OriginPattern {
    let (scheme, rest) = text.split_once("://").unwrap();
    let (host, port) = match rest.rsplit_once(':') {
        Some((h, p)) => (h, format!(":{p}")),
        None => (rest, String::new()),
    };
    let (host, wildcard) = match host.strip_prefix("*.") {
        Some(h) => (h, true),
        None => (host, false),
    };
    OriginPattern {
        scheme: format!("{scheme}://"),
        host: host.into(),
        wildcard,
        port,
    }
}

fn allows(pattern_text: &str, origin: &[u8]) -> bool {
    let p = pattern(pattern_text);
    let c = Cors {
        origins: vec![p.clone()],
        ..cors(true, false)
    };
    let by_parse = Origin::parse(origin).is_some_and(|o| o.is_allowed_by(&p));
    // The header path agrees with the parse (where the bytes can be a header value).
    if let Ok(v) = HeaderValue::from_bytes(origin) {
        assert_eq!(allowed_origin(&c, &v).is_some(), by_parse, "{origin:?}");
    }
    by_parse
}

#[test]
fn a_wildcard_pattern_matches_subdomains_as_hosts_not_as_text() {
    let w = "https://*.example.com";
    for ok in [
        &b"https://a.example.com"[..],
        b"https://a.b.example.com",
        b"https://A.EXAMPLE.COM",
        b"HTTPS://a.Example.com",
        b"https://a.example.com:443",
        b"https://a_b.example.com",
        b"https://xn--caf-dma.example.com",
    ] {
        assert!(allows(w, ok), "{:?}", String::from_utf8_lossy(ok));
    }
    for bad in [
        &b"https://evil.com/.example.com"[..],
        b"https://evil.com?.example.com",
        b"https://evil.com#.example.com",
        b"https://evil.com\\.example.com",
        b"https://evil.com%2f.example.com",
        b"https://a.example.com.evil.com",
        b"https://user@a.example.com",
        b"https://a.example.com@evil.com",
        b"https://a.example.com/",
        b"https://a.example.com/path",
        b"https://a.example.com:",
        b"https://a.example.com:8443",
        b"https://a.example.com:65536",
        b"https://a.example.com:+443",
        b"https://a.example.com:0443x",
        b"https://example.com",
        b"https://.example.com",
        b"https://a..example.com",
        b"https://a.example.com.",
        b"https://aexample.com",
        b"http://a.example.com",
        b"https:/a.example.com",
        b"a.example.com",
        b"https://a.example.com https://b.example.com",
        b"https://a.example.com,https://b.example.com",
        b"https://caf\xc3\xa9.example.com",
        b"https://a\x80.example.com",
        b"null",
        b"",
    ] {
        assert!(!allows(w, bad), "{:?}", String::from_utf8_lossy(bad));
    }
}

#[test]
fn an_exact_pattern_matches_scheme_host_and_port() {
    let p = "https://app.example.com";
    assert!(allows(p, b"https://app.example.com"));
    assert!(allows(p, b"https://APP.example.COM"));
    assert!(allows(p, b"https://app.example.com:443"));
    assert!(!allows(p, b"http://app.example.com"));
    assert!(!allows(p, b"https://app.example.com:8443"));
    assert!(!allows(p, b"https://a.app.example.com"));
    assert!(!allows(p, b"https://app.example.com.evil.net"));
    assert!(!allows(p, b"https://app.example.com/"));
    let port = "http://localhost:3000";
    assert!(allows(port, b"http://localhost:3000"));
    assert!(!allows(port, b"http://localhost"));
    assert!(!allows(port, b"http://localhost:30000"));
    assert!(!allows(port, b"http://localhost:300"));
    // A pattern that spells out the default port is the origin without it.
    assert!(allows(
        "https://app.example.com:443",
        b"https://app.example.com"
    ));
    assert!(!allows(
        "https://app.example.com:443",
        b"http://app.example.com:443"
    ));
}

#[test]
fn origins_parse_into_scheme_host_and_port() {
    assert_eq!(
        Origin::parse(b"https://a.example.com:8443"),
        Some(Origin {
            scheme: "https",
            host: "a.example.com",
            port: Some(8443)
        })
    );
    assert_eq!(
        Origin::parse(b"http://[::1]:8080"),
        Some(Origin {
            scheme: "http",
            host: "[::1]",
            port: Some(8080)
        })
    );
    for bad in [
        &b"http://[::1"[..],
        b"http://[evil.com]",
        b"http://[::1]x",
        b"1http://a.example",
        b"://a.example",
        b"http://",
    ] {
        assert_eq!(
            Origin::parse(bad),
            None,
            "{:?}",
            String::from_utf8_lossy(bad)
        );
    }
}

#[test]
fn null_and_non_origins_are_never_echoed() {
    let c = cors(true, false);
    for v in ["null", "https://evil.com/.example.com"] {
        let mut out = HeaderMap::new();
        on_response(&c, Some(&HeaderValue::from_static(v)), &mut out);
        assert!(
            !out.contains_key(header::ACCESS_CONTROL_ALLOW_ORIGIN),
            "{v}"
        );
        let (h, ok) = preflight(&c, &request(v));
        assert!(!ok, "{v}");
        assert!(!h.contains_key(header::ACCESS_CONTROL_ALLOW_ORIGIN), "{v}");
    }
}
