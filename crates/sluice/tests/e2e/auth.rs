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
pub(crate) fn jwks(keys: &[(&str, &Path)]) -> String {
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
pub(crate) fn token(alg: &str, kid: &str, pem: &Path, claims: &str) -> String {
    let script = r#"
import json, sys, jwt
alg, kid, path, claims = sys.argv[1:5]
print(jwt.encode(json.loads(claims), open(path, "rb").read(), algorithm=alg, headers={"kid": kid}))
"#;
    python(script, &[alg, kid, &pem.display().to_string(), claims])
}

pub(crate) fn ec_key(dir: &Path, name: &str) -> std::path::PathBuf {
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

pub(crate) type Answer = std::pin::Pin<Box<dyn Future<Output = Response<Full<Bytes>>> + Send>>;

/// An HTTP/1.1 server on 127.0.0.1 answering each request with `answer`.
pub(crate) async fn serve(
    answer: impl Fn(Request<Incoming>) -> Answer + Send + Sync + 'static,
) -> SocketAddr {
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
pub(crate) async fn get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Got {
    let mut req = Request::get(path).header("host", "api.test");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req.body(Full::new(Bytes::new())).unwrap();
    http1_send(tokio::net::TcpStream::connect(addr).await.unwrap(), req).await
}

pub(crate) fn upstream_header(got: &Got, name: &str) -> Option<String> {
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
pub(crate) fn htpasswd(file: &Path, flag: &str, user: &str, password: &str) {
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
pub(crate) async fn auth_service(asked: Arc<AtomicUsize>) -> SocketAddr {
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
pub(crate) async fn send(
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
