//! One path for every decision: the same request spelled many ways (dot segments, encoded
//! unreserved characters, either hex case, doubled slashes, encoded separators, climbing
//! above the root, broken encodings) goes to Sluice over HTTP/1.1, HTTP/2 and HTTP/3 and to
//! Debian's NGINX with the same routes: a prefix behind basic authentication, an exact path,
//! a prefix every client is denied, a Lua route that answers `ngx.var.uri`, and a catch-all.
//! Every route decision and every 401/403 must match NGINX's, with one named exception: on a
//! listener with the default `escaped_slashes = "reject"`, a path holding `%2F`, `%5C` or
//! `%00` is refused 400 where NGINX decodes it (stricter, never laxer). A listener with
//! `escaped_slashes = "decode"` matches NGINX on those too (bar `%00`, which it still refuses).
//!
//! What the origin receives is checked too: the normalized path by default, the client's own
//! bytes on a route with `forward_path = "original"`.

use crate::differential::{Child, nginx_with, wait_listening};
use crate::support::*;
use sluice_tls::selfsigned::KeyKind;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The resources every spelling names, and whether a spelling is the same resource as
/// its base (an equivalent spelling: the origin must receive the base path).
const BASES: [&str; 5] = [
    "/admin/secret",
    "/api/status",
    "/private/file",
    "/lua/secret",
    "/public/page",
];

/// Spellings of `base` (which has two segments, `/one/two`): (the spelling, whether it is
/// the same resource).
fn spellings(base: &str) -> Vec<(String, bool)> {
    let (one, two) = base[1..].split_once('/').expect("two segments");
    let enc = |s: &str, lower: bool| {
        let c = s.as_bytes()[0];
        if lower {
            format!("%{c:02x}{}", &s[1..])
        } else {
            format!("%{c:02X}{}", &s[1..])
        }
    };
    let same = [
        base.to_owned(),
        format!("/{one}/./{two}"),
        format!("/./{one}/{two}"),
        format!("/zz/../{one}/{two}"),
        format!("/{one}/zz/../{two}"),
        format!("//{one}/{two}"),
        format!("/{one}//{two}"),
        format!("/{one}///{two}"),
        format!("/{}/{two}", enc(one, true)),
        format!("/{}/{two}", enc(one, false)),
        format!("/{one}/{}", enc(two, false)),
        format!("/{one}/%2e/{two}"),
        format!("/{one}/%2E/{two}"),
        format!("/{one}/zz/%2E%2E/{two}"),
        format!("/{one}/zz/.%2e/{two}"),
        format!("/%2e/{one}/{two}"),
        format!("//./{}//zz/%2e%2E/{two}", enc(one, true)),
        format!("/{one}/{two}?q=/../x"),
    ];
    let different = [
        format!("/{}/{two}", one.to_uppercase()),
        format!("/{one}%2F{two}"),
        format!("/{one}%2f{two}"),
        format!("/{one}%5C{two}"),
        format!("/{one}/{two}%00"),
        format!("/../{one}/{two}"),
        format!("/%2e%2e/{one}/{two}"),
        format!("/{one}/../../{two}"),
        format!("/{one}/%zz{two}"),
        format!("/{one}/{two}%"),
        format!("/%252e%252e/{one}/{two}"),
        format!("/{one};x/{two}"),
        format!("/{one}/{two}/."),
        format!("/{one}/{two}/x/.."),
        format!("/{one}/{two}%3F"),
    ];
    same.into_iter()
        .map(|s| (s, true))
        .chain(different.into_iter().map(|s| (s, false)))
        .collect()
}

/// What a gateway decided for one request: the status and, when served, which origin (or
/// the Lua route's answer).
fn decision(status: u16, body: &str) -> String {
    match status {
        200 => body.split_whitespace().next().unwrap_or("").to_owned(),
        s => s.to_string(),
    }
}

/// Whether `path` holds an encoded separator that the default listener refuses.
fn has_escaped_separator(path: &str) -> bool {
    let p = path.to_ascii_lowercase();
    p.contains("%2f") || p.contains("%5c") || p.contains("%00")
}

const LUA: &str = "ngx.say('lua ', ngx.var.uri) return ngx.exit(200)";

fn sluice_config(o: &Origins, dir: &Path) -> String {
    std::fs::write(
        dir.join("users"),
        "alice:{SHA}5en6G6MezRroT3XKqkdPOmY/BfQ=\n",
    )
    .unwrap();
    format!(
        r#"
[[listener]]
name = "strict"
address = "127.0.0.1:0"
[[listener]]
name = "decode"
address = "127.0.0.1:0"
escaped_slashes = "decode"
[[listener]]
name = "https"
address = "127.0.0.1:0"
http3 = true
[listener.tls]
certificates = ["site"]
[[certificate]]
name = "site"
cert = "site.crt"
key = "site.key"
[[upstream]]
name = "admin"
servers = [{{ address = "{admin}" }}]
[[upstream]]
name = "exact"
servers = [{{ address = "{exact}" }}]
[[upstream]]
name = "public"
servers = [{{ address = "{public}" }}]
[[route]]
name = "admin"
path_prefix = "/admin/"
upstream = "admin"
[route.auth]
basic = {{ htpasswd = "users" }}
[[route]]
name = "exact"
path_exact = "/api/status"
upstream = "exact"
[[route]]
name = "private"
path_prefix = "/private/"
deny = ["127.0.0.0/8"]
upstream = "public"
[[route]]
name = "lua"
path_prefix = "/lua/"
upstream = "public"
[route.lua]
access = "{LUA}"
[[route]]
name = "raw"
path_prefix = "/raw/"
upstream = "public"
forward_path = "original"
[[route]]
name = "public"
path_prefix = "/"
upstream = "public"
"#,
        admin = o.admin.addr,
        exact = o.exact.addr,
        public = o.public.addr,
    )
}

fn start_nginx(dir: &Path, port: u16, o: &Origins) -> Child {
    let d = dir.display();
    let servers = format!(
        r#"
    server {{
        listen 127.0.0.1:{port};
        location ^~ /admin/ {{
            auth_basic "admin";
            auth_basic_user_file {d}/users;
            proxy_pass http://{admin};
        }}
        location = /api/status {{ proxy_pass http://{exact}; }}
        location ^~ /private/ {{ deny all; proxy_pass http://{public}; }}
        location ^~ /lua/ {{ access_by_lua_block {{ {LUA} }} }}
        location / {{ proxy_pass http://{public}; }}
    }}"#,
        admin = o.admin.addr,
        exact = o.exact.addr,
        public = o.public.addr,
    );
    nginx_with(dir, &servers, true, "warn")
}

struct Origins {
    admin: Origin,
    exact: Origin,
    public: Origin,
}

/// One HTTP/1.1 request with `path` sent byte for byte (no client library between), on a
/// connection of its own; the status and body.
async fn h1(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await;
    let text = String::from_utf8_lossy(&out);
    let status = text
        .strip_prefix("HTTP/1.1 ")
        .and_then(|t| t.get(..3))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    // NGINX's Lua answer is chunked: the chunk size line first.
    let body = match body.split_once("\r\n") {
        Some((size, rest)) if !size.is_empty() && size.bytes().all(|b| b.is_ascii_hexdigit()) => {
            rest
        }
        _ => body,
    };
    (status, body.to_owned())
}

/// Every spelling over HTTP/2 on one TLS connection; decisions by spelling.
async fn h2_all(addr: SocketAddr, paths: &[String]) -> BTreeMap<String, String> {
    let hs = tls_connect(
        addr,
        &ClientOpts {
            sni: Some("a.test"),
            alpn: vec![b"h2"],
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert!(hs.alpn_h2);
    let (mut sender, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(hs.stream),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    let mut out = BTreeMap::new();
    for p in paths {
        let req = http::Request::get(format!("https://a.test{p}"))
            .body(http_body_util::Full::new(bytes::Bytes::new()))
            .unwrap();
        let got = collect(sender.send_request(req).await.unwrap()).await;
        out.insert(p.clone(), decision(got.status, &got.body));
    }
    out
}

/// Every spelling over HTTP/3 (aioquic's client, one connection); decisions by spelling.
async fn h3_all(addr: SocketAddr, paths: &[String]) -> BTreeMap<String, String> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/e2e/h3client.py");
    let out = tokio::process::Command::new(tool("aioquic/bin/python3"))
        .arg(script)
        .args(["--sni", "a.test", "--port", &addr.port().to_string()])
        .args(paths)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(90), out)
        .await
        .expect("aioquic's client finished")
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<serde_json::Value> = stdout
        .lines()
        .skip(1)
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), paths.len(), "{stdout}");
    paths
        .iter()
        .zip(lines)
        .map(|(p, l)| {
            let status = l["status"].as_u64().unwrap_or(0) as u16;
            (
                p.clone(),
                decision(status, l["body"].as_str().unwrap_or("")),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_spelling_of_a_path_is_decided_as_nginx_decides_it() {
    let o = Origins {
        admin: Origin::start("admin").await,
        exact: Origin::start("exact").await,
        public: Origin::start("public").await,
    };
    let dir = tempfile::tempdir().unwrap();
    write_cert(dir.path(), "site", KeyKind::EcdsaP256, &["a.test"]);
    let cfg = sluice_config(&o, dir.path());
    let ngx_dir = tempfile::tempdir().unwrap();
    std::fs::copy(dir.path().join("users"), ngx_dir.path().join("users")).unwrap();
    let gw = TestGateway::start(&cfg, dir).await;
    let port = free_port();
    let _nginx = start_nginx(ngx_dir.path(), port, &o);
    let nginx: SocketAddr = ([127, 0, 0, 1], port).into();
    wait_listening(nginx).await;

    let cases: Vec<(String, bool, &str)> = BASES
        .iter()
        .flat_map(|b| spellings(b).into_iter().map(move |(s, same)| (s, same, *b)))
        .collect();
    let paths: Vec<String> = cases.iter().map(|c| c.0.clone()).collect();
    let h2 = h2_all(gw.addr("https"), &paths).await;
    let h3 = h3_all(gw.addr("https"), &paths).await;
    let (mut table, mut wrong) = (String::new(), Vec::new());
    for (path, same, base) in &cases {
        let (ns, nb) = h1(nginx, path).await;
        let theirs = decision(ns, &nb);
        let (ss, sb) = h1(gw.addr("strict"), path).await;
        let strict = decision(ss, &sb);
        let (ds, db) = h1(gw.addr("decode"), path).await;
        let decoded = decision(ds, &db);
        let row = format!(
            "{path:<40} nginx {theirs:<7} strict {strict:<7} decode {decoded:<7} h2 {:<7} h3 {}\n",
            h2[path], h3[path]
        );
        table.push_str(&row);
        // The strict listener, and HTTP/2 and HTTP/3 (also strict), may refuse an encoded
        // separator NGINX decodes; nothing else may differ.
        let strict_ok = |d: &str| d == theirs || (d == "400" && has_escaped_separator(path));
        let decode_ok = decoded == theirs || (decoded == "400" && path.contains("%00"));
        if !strict_ok(&strict) || !strict_ok(&h2[path]) || !strict_ok(&h3[path]) || !decode_ok {
            wrong.push(row.clone());
        }
        // An equivalent spelling served by an origin reaches it as the base path.
        if *same && ss == 200 && !base.starts_with("/lua/") {
            let got = sb.split_once(' ').map_or("", |(_, p)| p);
            let want = base.split('?').next().unwrap();
            if got != want {
                wrong.push(format!("{path}: the origin got {got:?}, not {want:?}\n"));
            }
        }
    }
    println!("{table}");
    assert!(
        wrong.is_empty(),
        "decisions that differ:\n{}",
        wrong.concat()
    );
    // The table is not empty, and refused, unauthenticated, denied and served rows all
    // appear (no request sends credentials: the protected origin is never reached).
    for d in ["400", "401", "403", "exact", "public", "lua"] {
        assert!(
            table.contains(&format!("nginx {d} ")),
            "no row where NGINX decided {d}:\n{table}"
        );
    }
}

/// A route with `forward_path = "original"` sends the client's bytes upstream; the default
/// sends the normalized path; a refused path never reaches any origin, and its log line says
/// why.
#[tokio::test]
async fn the_origin_gets_the_normalized_path_unless_the_route_asks_for_the_original() {
    let o = Origins {
        admin: Origin::start("admin").await,
        exact: Origin::start("exact").await,
        public: Origin::start("public").await,
    };
    let dir = tempfile::tempdir().unwrap();
    write_cert(dir.path(), "site", KeyKind::EcdsaP256, &["a.test"]);
    let cfg = sluice_config(&o, dir.path());
    let gw = TestGateway::start(&cfg, dir).await;
    let addr = gw.addr("strict");
    let (s, body) = h1(addr, "/raw/./a%41/b?x=%2e%2e").await;
    assert_eq!((s, body.as_str()), (200, "public /raw/./a%41/b"));
    let (s, body) = h1(addr, "/pub/./a%41//b?x=1").await;
    assert_eq!((s, body.as_str()), (200, "public /pub/aA/b"));
    // The query goes on as it came: only the path is normalized.
    let got = http1_get(addr, "a.test", "/echo/./x?q=%2e%2e/a").await;
    assert_eq!(got.body, "/echo/x?q=%2e%2e/a");
    // An absolute-form target with an empty path goes on in origin form, path `/`.
    let (s, body) = h1(addr, "http://a.test?/admin/x").await;
    assert_eq!((s, body.as_str()), (200, "public /"));
    // A host an origin could read as another (userinfo, a list, an encoding) is refused.
    for host in ["a@a.test", "a.test,admin.test", "a%2etest", ".a.test"] {
        let got = raw_exchange(
            addr,
            format!("GET /x HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes(),
            Duration::from_secs(10),
        )
        .await;
        assert!(got.starts_with("HTTP/1.1 400"), "{host}: {got}");
    }
    let before = o.public.hits() + o.admin.hits();
    for bad in ["/../x", "/a/%2e%2e/..%2F", "/a%zz", "/a%2Fb"] {
        let (s, _) = h1(addr, bad).await;
        assert_eq!(s, 400, "{bad}");
    }
    assert_eq!(
        o.public.hits() + o.admin.hits(),
        before,
        "no refused path went upstream"
    );
}
