//! `[route.auth]` keys and CORS with a limit per subject, request bodies and cached
//! forward-auth decisions, and API keys through the admin API (helpers in `auth.rs`).

use crate::auth::{auth_service, get, send, upstream_header};
use crate::support::*;
use bytes::Bytes;
use http_body_util::Full;
use hyper::Request;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

#[tokio::test]
async fn api_keys_cors_and_a_limit_per_subject() {
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

    let metrics: std::collections::HashMap<_, _> =
        gw.gateway().authentication().into_iter().collect();
    let refused: std::collections::HashMap<_, _> = metrics["keys"].refusals().collect();
    assert_eq!(refused["unknown_api_key"], 1 + refused_before_reload);
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

/// Request bodies over the route's limit get 413 (declared or not); a buffered body goes
/// upstream whole, with its length; forward-auth decisions are remembered per credential.
#[tokio::test]
async fn body_limits_buffering_and_cached_forward_decisions() {
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
        tempfile::tempdir().unwrap(),
    )
    .await;
    let web = gw.addr("web");
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

    let cached = &gw.gateway().authentication()[0].1;
    assert_eq!(cached.forward_cached.load(Ordering::Relaxed), 2);
}
