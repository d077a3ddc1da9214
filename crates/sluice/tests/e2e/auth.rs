//! Identity at the edge (`[route.auth]`): JWTs minted by python3-jwt against a JWKS that a
//! test server rotates and takes down; basic authentication from files Apache's `htpasswd`
//! writes and forward authentication against a test service, each side by side with Debian's
//! NGINX (`auth_basic`, `auth_request`) on the same file and service: the same statuses.

use crate::differential::{Child, binary, wait_listening};
use crate::support::*;
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Runs Debian's python3 (python3-jwt, python3-jwcrypto) on `script` with `args`.
fn python(script: &str, args: &[&str]) -> String {
    let out = std::process::Command::new("/usr/bin/python3")
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .expect("Debian's python3 runs: install python3-jwt and python3-jwcrypto");
    assert!(
        out.status.success(),
        "python3: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// A JWKS of the public halves of `keys` (kid, PEM private key file), as jwcrypto writes one.
fn jwks(keys: &[(&str, &Path)]) -> String {
    let script = r#"
import json, sys
from jwcrypto import jwk
keys = []
for kid, path in zip(sys.argv[1::2], sys.argv[2::2]):
    d = json.loads(jwk.JWK.from_pem(open(path, "rb").read()).export_public())
    d["kid"] = kid
    d["use"] = "sig"
    keys.append(d)
print(json.dumps({"keys": keys}))
"#;
    let args: Vec<String> = keys
        .iter()
        .flat_map(|(kid, p)| [kid.to_string(), p.display().to_string()])
        .collect();
    python(script, &args.iter().map(String::as_str).collect::<Vec<_>>())
}

/// A token PyJWT signs with `alg` and the key in `pem`, naming `kid`.
fn token(alg: &str, kid: &str, pem: &Path, claims: &str) -> String {
    let script = r#"
import json, sys, jwt
alg, kid, path, claims = sys.argv[1:5]
print(jwt.encode(json.loads(claims), open(path, "rb").read(), algorithm=alg, headers={"kid": kid}))
"#;
    python(script, &[alg, kid, &pem.display().to_string(), claims])
}

fn ec_key(dir: &Path, name: &str) -> std::path::PathBuf {
    use boring::ec::{EcGroup, EcKey};
    let group = EcGroup::from_curve_name(boring::nid::Nid::X9_62_PRIME256V1).unwrap();
    let key = boring::pkey::PKey::from_ec_key(EcKey::generate(&group).unwrap()).unwrap();
    let path = dir.join(format!("{name}.pem"));
    std::fs::write(&path, key.private_key_to_pem_pkcs8().unwrap()).unwrap();
    path
}

/// A test server that answers every request with what `reply` holds (status, body,
/// `Cache-Control`), counting requests.
struct JwksServer {
    addr: SocketAddr,
    reply: Arc<Mutex<(u16, String)>>,
    hits: Arc<AtomicUsize>,
}

impl JwksServer {
    async fn start(body: String) -> JwksServer {
        let reply = Arc::new(Mutex::new((200, body)));
        let hits = Arc::new(AtomicUsize::new(0));
        let (r, h) = (reply.clone(), hits.clone());
        let addr = serve(move |_req| {
            h.fetch_add(1, Ordering::SeqCst);
            let (status, body) = r.lock().unwrap().clone();
            let resp = Response::builder()
                .status(status)
                .header("cache-control", "max-age=3600")
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(body)))
                .unwrap();
            Box::pin(async move { resp })
        })
        .await;
        JwksServer { addr, reply, hits }
    }

    fn set(&self, status: u16, body: String) {
        *self.reply.lock().unwrap() = (status, body);
    }
}

type Answer = std::pin::Pin<Box<dyn Future<Output = Response<Full<Bytes>>> + Send>>;

/// An HTTP/1.1 server on 127.0.0.1 answering each request with `answer`.
async fn serve(answer: impl Fn(Request<Incoming>) -> Answer + Send + Sync + 'static) -> SocketAddr {
    let socket = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    let answer = Arc::new(answer);
    tokio::spawn(async move {
        while let Ok((tcp, _)) = socket.accept().await {
            let answer = answer.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req| {
                    let resp = answer(req);
                    async move { Ok::<_, std::convert::Infallible>(resp.await) }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tcp), svc)
                    .await;
            });
        }
    });
    addr
}

/// GET `path` with `headers` on a fresh connection.
async fn get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Got {
    let mut req = Request::get(path).header("host", "api.test");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req.body(Full::new(Bytes::new())).unwrap();
    http1_send(tokio::net::TcpStream::connect(addr).await.unwrap(), req).await
}

fn upstream_header(got: &Got, name: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(&got.body).ok()?;
    v["headers"][name].as_str().map(str::to_owned)
}

#[tokio::test]
async fn jwts_are_verified_against_a_jwks_that_rotates_and_goes_down() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_owned();
    let (k1, k2, k3) = (ec_key(&d, "k1"), ec_key(&d, "k2"), ec_key(&d, "k3"));
    let idp = JwksServer::start(jwks(&[("k1", &k1)])).await;
    let origin = Origin::start("api").await;
    let gw = TestGateway::start(
        &format!(
            r#"
[[listener]]
name = "web"
address = "127.0.0.1:0"
[[upstream]]
name = "api"
servers = [{{ address = "{}" }}]
[[route]]
name = "api"
upstream = "api"
[route.auth]
realm = "api"
jwt = {{ jwks_url = "http://{}/jwks.json", issuer = "https://idp.test", audiences = ["api"], algorithms = ["ES256"], claims_to_headers = {{ email = "X-Email" }}, leeway = "0s" }}
"#,
            origin.addr, idp.addr
        ),
        dir,
    )
    .await;
    let web = gw.addr("web");
    let far = 4_102_444_800u64; // 2100
    let claims = |sub: &str, exp: u64| {
        format!(
            r#"{{"iss":"https://idp.test","aud":"api","sub":"{sub}","email":"{sub}@test","exp":{exp}}}"#
        )
    };
    let bearer = |t: &str| format!("Bearer {t}");

    // Accepted: the subject and the claim go upstream; the client's own copies do not.
    let t1 = token("ES256", "k1", &k1, &claims("alice", far));
    let got = get(
        web,
        "/headers",
        &[
            ("authorization", &bearer(&t1)),
            ("x-auth-subject", "root"),
            ("x-email", "root@evil"),
        ],
    )
    .await;
    assert_eq!(got.status, 200, "{}", got.body);
    assert_eq!(
        upstream_header(&got, "x-auth-subject").as_deref(),
        Some("alice")
    );
    assert_eq!(
        upstream_header(&got, "x-email").as_deref(),
        Some("alice@test")
    );
    // Again: from the verified-token cache, no second signature.
    assert_eq!(
        get(web, "/whoami", &[("authorization", &bearer(&t1))])
            .await
            .status,
        200
    );
    let counters = gw.gateway().authentication()[0].1.clone();
    assert_eq!(counters.signatures_verified.load(Ordering::Relaxed), 1);

    // Refused, with RFC 6750 challenges, before the upstream sees anything.
    let hits = origin.hits();
    let none = get(web, "/whoami", &[]).await;
    assert_eq!(none.status, 401);
    assert_eq!(none.headers["www-authenticate"], "Bearer realm=\"api\"");
    let expired = token("ES256", "k1", &k1, &claims("alice", 1_000_000_000));
    let got = get(web, "/whoami", &[("authorization", &bearer(&expired))]).await;
    assert_eq!(got.status, 401);
    let challenge = got.headers["www-authenticate"].to_str().unwrap();
    assert!(challenge.contains("error=\"invalid_token\""), "{challenge}");
    let wrong_aud = token(
        "ES256",
        "k1",
        &k1,
        r#"{"iss":"https://idp.test","aud":"web","sub":"x","exp":4102444800}"#,
    );
    assert_eq!(
        get(web, "/", &[("authorization", &bearer(&wrong_aud))])
            .await
            .status,
        401
    );
    let alg_none = python(
        r#"import jwt; print(jwt.encode({"sub": "x", "iss": "https://idp.test", "aud": "api"}, None, algorithm="none"))"#,
        &[],
    );
    assert_eq!(
        get(web, "/", &[("authorization", &bearer(&alg_none))])
            .await
            .status,
        401
    );
    assert_eq!(
        origin.hits(),
        hits,
        "no refused request reached the upstream"
    );

    // The issuer rotates to k2: a token naming it makes the gateway fetch again (at most
    // once per 10 s for unknown kids, so this may take that long).
    idp.set(200, jwks(&[("k2", &k2)]));
    let t2 = token("ES256", "k2", &k2, &claims("bob", far));
    let mut status = 0;
    for _ in 0..40 {
        status = get(web, "/whoami", &[("authorization", &bearer(&t2))])
            .await
            .status;
        if status == 200 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    assert_eq!(status, 200, "a rotated-in key is fetched");

    // The issuer goes down: the last good set stays in force; a new kid cannot be
    // fetched, and the failure is counted.
    idp.set(503, String::new());
    let fetches = idp.hits.load(Ordering::SeqCst);
    let t2b = token("ES256", "k2", &k2, &claims("carol", far));
    assert_eq!(
        get(web, "/whoami", &[("authorization", &bearer(&t2b))])
            .await
            .status,
        200
    );
    let t3 = token("ES256", "k3", &k3, &claims("dave", far));
    let mut refused = 0;
    for _ in 0..40 {
        refused = get(web, "/whoami", &[("authorization", &bearer(&t3))])
            .await
            .status;
        if counters.jwks_failed.load(Ordering::Relaxed) > 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    assert_eq!(refused, 401);
    assert!(
        counters.jwks_failed.load(Ordering::Relaxed) > 0,
        "the failed fetch is counted"
    );
    assert!(idp.hits.load(Ordering::SeqCst) > fetches);
    assert_eq!(
        get(web, "/whoami", &[("authorization", &bearer(&t2b))])
            .await
            .status,
        200
    );
    let refusals: std::collections::HashMap<_, _> = counters.refusals().collect();
    assert!(
        refusals["missing"] >= 1 && refusals["jwt_expired"] >= 1,
        "{refusals:?}"
    );
    assert!(refusals["jwt_unknown_key"] >= 1, "{refusals:?}");
}

/// Debian's NGINX in front of `origin`: `/basic/` with `auth_basic` on `htpasswd`, `/fwd/`
/// with `auth_request` to `auth` (the service's `X-User` passed upstream).
fn start_nginx(
    dir: &Path,
    port: u16,
    origin: SocketAddr,
    htpasswd: &Path,
    auth: SocketAddr,
) -> Child {
    let d = dir.display();
    let conf = format!(
        r#"
daemon off;
master_process off;
worker_processes 1;
error_log {d}/nginx-error.log warn;
pid {d}/nginx.pid;
events {{ worker_connections 64; }}
http {{
    access_log off;
    client_body_temp_path {d}/nginx-body;
    proxy_temp_path {d}/nginx-proxy;
    fastcgi_temp_path {d}/nginx-fcgi;
    uwsgi_temp_path {d}/nginx-uwsgi;
    scgi_temp_path {d}/nginx-scgi;
    server {{
        listen 127.0.0.1:{port};
        location /basic/ {{
            auth_basic "api";
            auth_basic_user_file {htpasswd};
            proxy_pass http://{origin};
        }}
        location /fwd/ {{
            auth_request /_auth;
            auth_request_set $user $upstream_http_x_user;
            proxy_set_header X-User $user;
            proxy_pass http://{origin};
        }}
        location = /_auth {{
            internal;
            proxy_pass http://{auth}/check;
            proxy_pass_request_body off;
            proxy_set_header Content-Length "";
            proxy_set_header X-Original-URI $request_uri;
            proxy_read_timeout 1s;
        }}
    }}
}}
"#,
        htpasswd = htpasswd.display()
    );
    let path = dir.join("nginx.conf");
    std::fs::write(&path, conf).unwrap();
    let child = std::process::Command::new(binary("nginx"))
        .arg("-c")
        .arg(&path)
        .arg("-p")
        .arg(dir)
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("nginx starts");
    Child(child)
}

/// `htpasswd` from apache2-utils: `flag` -B (bcrypt), -m (apr1) or -s (SHA-1).
fn htpasswd(file: &Path, flag: &str, user: &str, password: &str) {
    let create = if file.exists() { "-b" } else { "-cb" };
    let out = std::process::Command::new("htpasswd")
        .args([create, flag, &file.display().to_string(), user, password])
        .output()
        .expect("htpasswd runs: install apache2-utils");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The authorization service: by `Authorization`, 200 naming the user in `X-User` and
/// `X-Auth-Subject`, 401 with a challenge, 403, 500, or no answer in time.
async fn auth_service(asked: Arc<AtomicUsize>) -> SocketAddr {
    serve(move |req| {
        asked.fetch_add(1, Ordering::SeqCst);
        let auth = req
            .headers()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let uri = req
            .headers()
            .get("x-original-uri")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        Box::pin(async move {
            let b = Response::builder();
            let b = match auth.as_str() {
                "Bearer good" => b
                    .status(200)
                    .header("x-user", "alice")
                    .header("x-auth-subject", "alice")
                    .header("x-uri-seen", uri),
                "Bearer forbidden" => b.status(403),
                "Bearer broken" => b.status(500),
                "Bearer slow" => {
                    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
                    b.status(200)
                }
                _ => b
                    .status(401)
                    .header("www-authenticate", "Bearer realm=\"svc\""),
            };
            b.body(Full::new(Bytes::new())).unwrap()
        })
    })
    .await
}

#[tokio::test]
async fn basic_and_forward_auth_answer_as_nginx_does() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_owned();
    let file = d.join("users.htpasswd");
    htpasswd(&file, "-B", "alice", "wonderland");
    htpasswd(&file, "-m", "bob", "builder");
    htpasswd(&file, "-s", "carol", "singer");
    let asked = Arc::new(AtomicUsize::new(0));
    let auth = auth_service(asked.clone()).await;
    let origin = Origin::start("api").await;
    let nginx_port = free_port();
    let _nginx = start_nginx(&d, nginx_port, origin.addr, &file, auth);
    let nginx: SocketAddr = ([127, 0, 0, 1], nginx_port).into();
    let gw = TestGateway::start(
        &format!(
            r#"
[[listener]]
name = "web"
address = "127.0.0.1:0"
[[upstream]]
name = "api"
servers = [{{ address = "{origin}" }}]
[[route]]
name = "basic"
path_prefix = "/basic/"
strip_prefix = "/basic"
upstream = "api"
[route.auth]
realm = "api"
basic = {{ htpasswd = "users.htpasswd" }}
[[route]]
name = "fwd"
path_prefix = "/fwd/"
strip_prefix = "/fwd"
upstream = "api"
[route.auth]
forward = {{ url = "http://{auth}/check", upstream_headers = ["X-User"], timeout = "1s" }}
"#,
            origin = origin.addr
        ),
        dir,
    )
    .await;
    wait_listening(nginx).await;
    let web = gw.addr("web");
    let basic = |u: &str, p: &str| {
        use base64::Engine as _;
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"))
        )
    };
    // (case, path, Authorization)
    let cases: Vec<(&str, &str, Option<String>)> = vec![
        ("no credentials", "/basic/headers", None),
        (
            "bcrypt",
            "/basic/headers",
            Some(basic("alice", "wonderland")),
        ),
        ("apr1", "/basic/headers", Some(basic("bob", "builder"))),
        ("sha1", "/basic/headers", Some(basic("carol", "singer"))),
        (
            "wrong password",
            "/basic/headers",
            Some(basic("alice", "x")),
        ),
        ("unknown user", "/basic/headers", Some(basic("eve", "x"))),
        ("not base64", "/basic/headers", Some("Basic %%%".into())),
        ("other scheme", "/basic/headers", Some("Bearer good".into())),
        (
            "service says yes",
            "/fwd/headers",
            Some("Bearer good".into()),
        ),
        (
            "service says 401",
            "/fwd/headers",
            Some("Bearer bad".into()),
        ),
        (
            "service says 403",
            "/fwd/headers",
            Some("Bearer forbidden".into()),
        ),
        (
            "service fails",
            "/fwd/headers",
            Some("Bearer broken".into()),
        ),
        (
            "service too slow",
            "/fwd/headers",
            Some("Bearer slow".into()),
        ),
    ];
    let mut table = String::new();
    let mut differ = Vec::new();
    for (name, path, authorization) in &cases {
        let h: Vec<(&str, &str)> = authorization
            .iter()
            .map(|v| ("authorization", v.as_str()))
            .collect();
        let s = get(web, path, &h).await;
        let n = get(nginx, path, &h).await;
        table.push_str(&format!(
            "{name:20} sluice {} nginx {}\n",
            s.status, n.status
        ));
        if s.status != n.status {
            differ.push(*name);
        }
        if s.status == 401 {
            assert!(
                s.headers.contains_key("www-authenticate"),
                "{name}: a 401 has a challenge"
            );
        }
        if s.status == 200 && path.starts_with("/fwd/") {
            assert_eq!(upstream_header(&s, "x-user").as_deref(), Some("alice"));
            assert_eq!(
                upstream_header(&s, "x-auth-subject").as_deref(),
                Some("alice")
            );
        }
        if s.status == 200 && path.starts_with("/basic/") {
            let user = authorization.as_deref().unwrap_or("");
            assert!(
                upstream_header(&s, "x-auth-subject").is_some(),
                "{name} {user}"
            );
        }
    }
    eprintln!("{table}");
    assert!(
        differ.is_empty(),
        "Sluice and NGINX differ on {differ:?}:\n{table}"
    );
    let fwd_401 = get(web, "/fwd/x", &[("authorization", "Bearer bad")]).await;
    assert_eq!(fwd_401.headers["www-authenticate"], "Bearer realm=\"svc\"");

    // The file changes (htpasswd rewrites it): a new user is accepted without a reload.
    htpasswd(&file, "-B", "dave", "diver");
    let dave = basic("dave", "diver");
    let mut status = 0;
    for _ in 0..40 {
        status = get(web, "/basic/whoami", &[("authorization", &dave)])
            .await
            .status;
        if status == 200 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
    assert_eq!(status, 200, "a user added to the file is accepted");
}

/// A request with `method`, `headers` and `body` on a fresh connection.
async fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &'static [u8],
) -> Got {
    let mut req = Request::builder()
        .method(method)
        .uri(path)
        .header("host", "api.test");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req.body(Full::new(Bytes::from_static(body))).unwrap();
    http1_send(tokio::net::TcpStream::connect(addr).await.unwrap(), req).await
}

#[tokio::test]
async fn api_keys_cors_body_limits_and_a_limit_per_subject() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("keys"),
        format!(
            "{}\n{}\n",
            sluice_auth::key_line("ios", b"k-ios-0123456789"),
            sluice_auth::key_line("web", b"k-web-0123456789")
        ),
    )
    .unwrap();
    let asked = Arc::new(AtomicUsize::new(0));
    let auth = auth_service(asked.clone()).await;
    let origin = Origin::start("api").await;
    let gw = TestGateway::start(
        &format!(
            r#"
[[listener]]
name = "web"
address = "127.0.0.1:0"
[[upstream]]
name = "api"
servers = [{{ address = "{origin}" }}]
[[route]]
name = "keys"
path_prefix = "/keys/"
strip_prefix = "/keys"
upstream = "api"
rate_limit = {{ rate = "1/m", burst = 0, key = "subject" }}
[route.auth]
keys = {{ file = "keys", query = "api_key" }}
[route.cors]
origins = ["https://*.app.test"]
methods = ["GET", "PUT"]
headers = ["x-api-key", "content-type"]
expose_headers = ["x-request-id"]
credentials = true
max_age = "1h"
[[route]]
name = "upload"
path_prefix = "/upload"
upstream = "api"
max_request_body = "1k"
request_buffering = true
[[route]]
name = "cached"
path_prefix = "/cached/"
strip_prefix = "/cached"
upstream = "api"
[route.auth]
forward = {{ url = "http://{auth}/check", cache_ttl = "1m" }}
"#,
            origin = origin.addr
        ),
        dir,
    )
    .await;
    let web = gw.addr("web");

    // API keys: from the header or the query; the subject is the key's name, and the
    // limit is per subject (one request a minute each).
    let hits = origin.hits();
    let ios = get(web, "/keys/headers", &[("x-api-key", "k-ios-0123456789")]).await;
    assert_eq!(ios.status, 200, "{}", ios.body);
    assert_eq!(
        upstream_header(&ios, "x-auth-subject").as_deref(),
        Some("ios")
    );
    assert_eq!(
        get(web, "/keys/whoami", &[("x-api-key", "k-ios-0123456789")])
            .await
            .status,
        429
    );
    assert_eq!(
        get(web, "/keys/whoami?api_key=k-web-0123456789", &[])
            .await
            .status,
        200
    );
    assert_eq!(
        get(web, "/keys/whoami", &[("x-api-key", "k-other")])
            .await
            .status,
        401
    );
    assert_eq!(origin.hits(), hits + 2);

    // CORS: a preflight is answered at the edge, before authentication and the limit.
    let pre = send(
        web,
        "OPTIONS",
        "/keys/whoami",
        &[
            ("origin", "https://m.app.test"),
            ("access-control-request-method", "PUT"),
            ("access-control-request-headers", "x-api-key"),
        ],
        b"",
    )
    .await;
    assert_eq!(pre.status, 204);
    assert_eq!(
        pre.headers["access-control-allow-origin"],
        "https://m.app.test"
    );
    assert_eq!(pre.headers["access-control-allow-methods"], "GET, PUT");
    assert_eq!(pre.headers["access-control-allow-credentials"], "true");
    assert_eq!(pre.headers["access-control-max-age"], "3600");
    let foreign = send(
        web,
        "OPTIONS",
        "/keys/whoami",
        &[
            ("origin", "https://evil.test"),
            ("access-control-request-method", "PUT"),
        ],
        b"",
    )
    .await;
    assert_eq!(foreign.status, 204);
    assert!(!foreign.headers.contains_key("access-control-allow-origin"));
    assert_eq!(
        origin.hits(),
        hits + 2,
        "preflights never reach the upstream"
    );
    let simple = get(
        web,
        "/keys/whoami?api_key=k-ios-0123456789",
        &[("origin", "https://m.app.test")],
    )
    .await;
    // (This subject's minute is spent: the gateway's own 429 carries the CORS headers too,
    // so that the page can read it.)
    assert_eq!(simple.status, 429);
    assert_eq!(
        simple.headers["access-control-allow-origin"],
        "https://m.app.test"
    );
    let fresh = std::fs::read_to_string(gw.dir().join("keys")).unwrap()
        + &sluice_auth::key_line("tv", b"k-tv-0123456789")
        + "\n";
    std::fs::write(gw.dir().join("keys.new"), fresh).unwrap();
    std::fs::rename(gw.dir().join("keys.new"), gw.dir().join("keys")).unwrap();
    let tv_headers = [
        ("x-api-key", "k-tv-0123456789"),
        ("origin", "https://m.app.test"),
    ];
    let mut tv = get(web, "/keys/whoami", &tv_headers).await;
    // Refused until the watcher has read the file again (within a second or two).
    let mut refused_before_reload = 0;
    for _ in 0..40 {
        if tv.status == 200 {
            break;
        }
        assert_eq!(tv.status, 401);
        refused_before_reload += 1;
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        tv = get(web, "/keys/whoami", &tv_headers).await;
    }
    assert_eq!(tv.status, 200, "a key added to the file is accepted");
    assert_eq!(
        tv.headers["access-control-allow-origin"],
        "https://m.app.test"
    );
    assert_eq!(tv.headers["access-control-expose-headers"], "x-request-id");
    assert!(tv.headers.get_all("vary").iter().any(|v| v == "Origin"));

    // Request bodies: over the route's limit, 413 (declared or not); a buffered body goes
    // upstream whole, with its length.
    let big: &'static [u8] = &[b'x'; 2000];
    assert_eq!(send(web, "POST", "/upload", &[], big).await.status, 413);
    let mut sender = http1_sender(web).await;
    let (mut tx, body) = http_body_util::Channel::<Bytes, std::convert::Infallible>::new(4);
    let req = Request::post("/upload")
        .header("host", "api.test")
        .body(body)
        .unwrap();
    let resp = tokio::spawn(async move { sender.send_request(req).await });
    for _ in 0..3 {
        tx.send_data(Bytes::from_static(&[b'y'; 300]))
            .await
            .unwrap();
    }
    drop(tx);
    let resp = resp.await.unwrap().unwrap();
    assert_eq!(resp.status(), 200);
    let text = collect(resp).await.body;
    assert_eq!(text, "api got 900 bytes");

    // Forward auth with a decision cache: the service is asked once per credential.
    let before = asked.load(Ordering::SeqCst);
    for _ in 0..3 {
        let got = get(web, "/cached/whoami", &[("authorization", "Bearer good")]).await;
        assert_eq!(got.status, 200);
    }
    assert_eq!(asked.load(Ordering::SeqCst), before + 1);
    assert_eq!(
        get(web, "/cached/whoami", &[("authorization", "Bearer bad")])
            .await
            .status,
        401
    );
    assert_eq!(asked.load(Ordering::SeqCst), before + 2);

    let metrics: std::collections::HashMap<_, _> =
        gw.gateway().authentication().into_iter().collect();
    let refused: std::collections::HashMap<_, _> = metrics["keys"].refusals().collect();
    assert_eq!(refused["unknown_api_key"], 1 + refused_before_reload);
    assert_eq!(metrics["cached"].forward_cached.load(Ordering::Relaxed), 2);
}

#[tokio::test]
async fn sluice_check_names_a_broken_htpasswd_line() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("users"),
        "alice:{SHA}5en6G6MezRroT3XKqkdPOmY/BfQ=\nbob:plaintext\n",
    )
    .unwrap();
    let config = dir.path().join("sluice.toml");
    std::fs::write(
        &config,
        r#"
[[listener]]
name = "web"
address = "127.0.0.1:0"
[[upstream]]
name = "api"
servers = [{ address = "127.0.0.1:9" }]
[[route]]
name = "api"
upstream = "api"
[route.auth]
basic = { htpasswd = "users" }
"#,
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["check", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("route `api`") && err.contains("users: line 2 (user `bob`)"),
        "{err}"
    );
    assert!(err.contains("htpasswd -B"), "{err}");
}

/// API keys through the admin API: added (given, or made by the gateway and answered once),
/// listed by name, removed; the file holds only hashes, and requests follow at once.
#[tokio::test]
async fn api_keys_are_managed_through_the_admin_api() {
    use std::os::unix::fs::PermissionsExt;
    const TOKEN: &str = "auth-test-token-0123456789abcdef";
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("admin.token");
    std::fs::write(&token, TOKEN).unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::write(dir.path().join("keys"), "").unwrap();
    let origin = Origin::start("api").await;
    let gw = TestGateway::start(
        &format!(
            r#"
[admin]
address = "127.0.0.1:0"
token_file = "admin.token"
[[listener]]
name = "web"
address = "127.0.0.1:0"
[[upstream]]
name = "api"
servers = [{{ address = "{}" }}]
[[route]]
name = "api"
upstream = "api"
[route.auth]
keys = {{ file = "keys" }}
"#,
            origin.addr
        ),
        dir,
    )
    .await;
    let (admin, _task) = admin_for(&gw).await;
    let call = |method: &'static str,
                path: &'static str,
                body: Option<serde_json::Value>,
                token: &'static str| async move {
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header("host", "admin")
            .header("authorization", format!("Bearer {token}"));
        if body.is_some() {
            req = req.header("content-type", "application/json");
        }
        let body = body.map_or_else(Bytes::new, |b| Bytes::from(b.to_string()));
        let got = http1_send(
            tokio::net::TcpStream::connect(admin).await.unwrap(),
            req.body(Full::new(body)).unwrap(),
        )
        .await;
        let v: serde_json::Value = serde_json::from_str(&got.body).unwrap_or_default();
        (got.status, v)
    };
    let web = gw.addr("web");
    let given = serde_json::json!({"route": "api", "name": "ios", "key": "k-ios-0123456789"});
    assert_eq!(
        call(
            "POST",
            "/api/v1/auth/keys",
            Some(given.clone()),
            "wrong-token-0123456789abcdef"
        )
        .await
        .0,
        401
    );
    assert_eq!(
        call("POST", "/api/v1/auth/keys", Some(given.clone()), TOKEN)
            .await
            .0,
        201
    );
    assert_eq!(
        call("POST", "/api/v1/auth/keys", Some(given), TOKEN)
            .await
            .0,
        409
    );
    let (status, made) = call(
        "POST",
        "/api/v1/auth/keys",
        Some(serde_json::json!({"route": "api", "name": "tv"})),
        TOKEN,
    )
    .await;
    assert_eq!(status, 201);
    let tv_key = made["key"]
        .as_str()
        .expect("a key made and answered")
        .to_owned();
    assert_eq!(tv_key.len(), 48);
    let (status, listed) = call("GET", "/api/v1/auth/keys?route=api", None, TOKEN).await;
    assert_eq!(status, 200);
    assert_eq!(listed["keys"], serde_json::json!(["ios", "tv"]));
    let file = std::fs::read_to_string(gw.dir().join("keys")).unwrap();
    assert!(
        !file.contains("k-ios") && !file.contains(&tv_key),
        "only hashes at rest"
    );
    // In force at once, no reload.
    assert_eq!(
        get(web, "/whoami", &[("x-api-key", "k-ios-0123456789")])
            .await
            .status,
        200
    );
    let got = get(web, "/headers", &[("x-api-key", &tv_key)]).await;
    assert_eq!(
        upstream_header(&got, "x-auth-subject").as_deref(),
        Some("tv")
    );
    let gone = serde_json::json!({"route": "api", "name": "ios"});
    assert_eq!(
        call("DELETE", "/api/v1/auth/keys", Some(gone.clone()), TOKEN)
            .await
            .0,
        200
    );
    assert_eq!(
        call("DELETE", "/api/v1/auth/keys", Some(gone), TOKEN)
            .await
            .0,
        404
    );
    assert_eq!(
        get(web, "/whoami", &[("x-api-key", "k-ios-0123456789")])
            .await
            .status,
        401
    );
    let (status, _) = call("GET", "/api/v1/auth/keys?route=nope", None, TOKEN).await;
    assert_eq!(status, 404);
}
