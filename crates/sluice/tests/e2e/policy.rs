//! Edge policy through a real gateway: request IDs, client address lists behind trusted
//! proxies (IPv4 and IPv6, spoofed X-Forwarded-For), path rewrites, redirects, fixed
//! responses and header edits.

use crate::support::*;
use serde_json::Value;

fn get(
    addr: std::net::SocketAddr,
    path: &str,
    host: &str,
    headers: &[(&str, &str)],
) -> impl std::future::Future<Output = Got> {
    let mut b = http::Request::get(path).header("host", host);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let req = b
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .unwrap();
    async move { http1_send(tokio::net::TcpStream::connect(addr).await.unwrap(), req).await }
}

fn cfg(origin: &Origin, listener_extra: &str, routes: &str) -> String {
    format!(
        r#"
[log]
access_log = "off"
[[listener]]
name = "http"
address = "127.0.0.1:0"
{listener_extra}
[[upstream]]
name = "o"
servers = [{{ address = "{}" }}]
{routes}
[[route]]
name = "default"
upstream = "o"
"#,
        origin.addr
    )
}

#[tokio::test]
async fn every_request_gets_an_id_upstream_and_back_and_only_trusted_proxies_set_one() {
    let o = Origin::start("o").await;
    let gw = TestGateway::plain(&cfg(&o, "", "")).await;
    let got = get(
        gw.addr("http"),
        "/headers",
        "x",
        &[("x-request-id", "spoofed")],
    )
    .await;
    let id = got.headers["x-request-id"].to_str().unwrap().to_owned();
    assert_eq!(id.len(), 32, "{id}");
    assert_ne!(id, "spoofed", "an untrusted client's ID is replaced");
    let upstream: Value = serde_json::from_str(&got.body).unwrap();
    assert_eq!(
        upstream["headers"]["x-request-id"],
        id.as_str(),
        "the origin saw the same ID"
    );
    // Error responses carry it too.
    let miss = get(gw.addr("http"), "/x", "x", &[]).await;
    assert!(miss.headers.contains_key("x-request-id"));

    let gw = TestGateway::plain(&cfg(&o, "trusted_proxies = [\"127.0.0.1/32\"]", "")).await;
    let got = get(
        gw.addr("http"),
        "/headers",
        "x",
        &[("x-request-id", "from-the-lb-42")],
    )
    .await;
    assert_eq!(
        got.headers["x-request-id"], "from-the-lb-42",
        "a trusted proxy's ID is kept"
    );

    let gw = TestGateway::plain(&cfg(&o, "request_id = false", "")).await;
    let got = get(gw.addr("http"), "/headers", "x", &[]).await;
    assert!(!got.headers.contains_key("x-request-id"));
}

#[tokio::test]
async fn allow_and_deny_use_the_real_client_behind_trusted_proxies_only() {
    let o = Origin::start("o").await;
    let routes = r#"
[[route]]
name = "internal"
path_prefix = "/internal"
allow = ["10.0.0.0/8", "2001:db8::/32"]
deny = ["10.66.0.0/16"]
upstream = "o"
"#;
    // No trusted proxies: the peer (127.0.0.1) is the client, whatever X-Forwarded-For says.
    let gw = TestGateway::plain(&cfg(&o, "", routes)).await;
    let spoofed = get(
        gw.addr("http"),
        "/internal/echo",
        "x",
        &[("x-forwarded-for", "10.1.2.3")],
    )
    .await;
    assert_eq!(spoofed.status, 403, "a spoofed X-Forwarded-For is ignored");
    assert_eq!(
        get(gw.addr("http"), "/echo", "x", &[]).await.status,
        200,
        "other routes are open"
    );
    assert_eq!(gw.gateway().metrics().snapshot().denied, 1);

    // Behind a trusted load balancer on 127.0.0.1: the address it appended decides.
    let gw = TestGateway::plain(&cfg(&o, "trusted_proxies = [\"127.0.0.0/8\"]", routes)).await;
    let addr = gw.addr("http");
    let status = |xff: &'static str| async move {
        get(addr, "/internal/echo", "x", &[("x-forwarded-for", xff)])
            .await
            .status
    };
    assert_eq!(status("10.1.2.3").await, 200);
    assert_eq!(status("10.66.0.9").await, 403, "deny wins over allow");
    assert_eq!(status("192.0.2.1").await, 403);
    assert_eq!(status("2001:db8::5").await, 200, "IPv6");
    assert_eq!(status("2001:db9::5").await, 403);
    assert_eq!(
        status("6.6.6.6, 10.1.2.3").await,
        200,
        "the client's own claim before the LB's is not believed"
    );
    assert_eq!(status("10.1.2.3, 192.0.2.1").await, 403);
    // The origin learns the client in X-Real-IP; X-Forwarded-For keeps the chain.
    let got = get(addr, "/headers", "x", &[("x-forwarded-for", "10.1.2.3")]).await;
    let seen: Value = serde_json::from_str(&got.body).unwrap();
    assert_eq!(seen["headers"]["x-real-ip"], "10.1.2.3");
    assert_eq!(seen["headers"]["x-forwarded-for"], "10.1.2.3, 127.0.0.1");

    // A listener-wide deny.
    let gw = TestGateway::plain(&cfg(&o, "deny = [\"127.0.0.1\"]", "")).await;
    assert_eq!(get(gw.addr("http"), "/echo", "x", &[]).await.status, 403);
}

#[tokio::test]
async fn rewrites_redirects_fixed_responses_and_header_edits() {
    let o = Origin::start("o").await;
    let routes = r#"
[[route]]
name = "api"
path_prefix = "/api/"
strip_prefix = "/api"
upstream = "o"
[route.request_headers]
set = { "x-client" = "$remote_addr", "x-orig" = "$request_uri" }
remove = ["x-secret"]
[route.response_headers]
add = { "x-served-by" = "sluice" }
set = { "cache-control" = "no-store" }
[[route]]
name = "legacy"
path_regex = "^/old/"
rewrite = { regex = "^/old/([a-z]+)/([0-9]+)$", replacement = "/echo/$1?id=$2" }
upstream = "o"
[[route]]
name = "canonical"
hosts = ["old.example.com"]
redirect = { location = "https://www.example.com$request_uri", status = 301 }
[[route]]
name = "health"
path_exact = "/healthz"
respond = { status = 200, body = "ok from $host", content_type = "text/plain" }
"#;
    let gw = TestGateway::plain(&cfg(&o, "", routes)).await;
    let addr = gw.addr("http");

    let got = get(addr, "/api/echo/users?page=2", "x", &[]).await;
    assert_eq!(
        (got.status, got.body.as_str()),
        (200, "/echo/users?page=2"),
        "prefix stripped, query kept"
    );
    assert_eq!(got.headers["x-served-by"], "sluice");
    assert_eq!(got.headers["cache-control"], "no-store");
    let got = get(addr, "/api/headers", "x", &[("x-secret", "s3cr3t")]).await;
    let seen: Value = serde_json::from_str(&got.body).unwrap();
    assert_eq!(seen["headers"]["x-client"], "127.0.0.1");
    assert_eq!(seen["headers"]["x-orig"], "/api/headers");
    assert!(
        seen["headers"].get("x-secret").is_none(),
        "removed before it went upstream"
    );

    let got = get(addr, "/old/users/42", "x", &[]).await;
    assert_eq!(got.body, "/echo/users?id=42");
    assert_eq!(
        get(addr, "/old/nomatch", "x", &[]).await.body,
        "o /old/nomatch",
        "a path the regex does not match goes upstream as it is"
    );

    let got = get(addr, "/a/b?c=d", "old.example.com", &[]).await;
    assert_eq!(got.status, 301);
    assert_eq!(got.headers["location"], "https://www.example.com/a/b?c=d");
    let hits = o.hits();
    let got = get(addr, "/healthz", "site.example:8080", &[]).await;
    assert_eq!(
        (got.status, got.body.as_str()),
        (200, "ok from site.example")
    );
    assert_eq!(o.hits(), hits, "answered by the gateway");
    assert!(got.headers.contains_key("x-request-id"));
}

/// Whether the server closed a fresh connection at once (read returns end of stream).
async fn closed_at_once(addr: std::net::SocketAddr) -> bool {
    use tokio::io::AsyncReadExt as _;
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut buf = [0u8; 1];
    matches!(
        tokio::time::timeout(std::time::Duration::from_secs(5), s.read(&mut buf)).await,
        Ok(Ok(0)) | Ok(Err(_))
    )
}

#[tokio::test]
async fn connections_over_the_listener_and_per_client_limits_are_closed_at_accept() {
    let o = Origin::start("o").await;
    let gw = TestGateway::plain(&cfg(&o, "max_connections_per_client = 2", "")).await;
    let addr = gw.addr("http");
    let mut a = http1_sender::<http_body_util::Full<bytes::Bytes>>(addr).await;
    let mut b = http1_sender::<http_body_util::Full<bytes::Bytes>>(addr).await;
    let req = || {
        http::Request::get("/whoami")
            .header("host", "x")
            .body(http_body_util::Full::new(bytes::Bytes::new()))
            .unwrap()
    };
    assert_eq!(a.send_request(req()).await.unwrap().status(), 200);
    assert_eq!(b.send_request(req()).await.unwrap().status(), 200);
    assert!(
        closed_at_once(addr).await,
        "a third connection from 127.0.0.1 is closed"
    );
    assert_eq!(
        a.send_request(req()).await.unwrap().status(),
        200,
        "the first two go on"
    );
    assert_eq!(
        gw.gateway().metrics().snapshot().connections_refused,
        [0, 1]
    );
    drop(a);
    // Its slot comes back once the gateway sees it close.
    let mut ok = false;
    for _ in 0..100 {
        let reply = raw_exchange(
            addr,
            b"GET /whoami HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
            std::time::Duration::from_secs(2),
        )
        .await;
        if reply.starts_with("HTTP/1.1 200") {
            ok = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(ok, "a slot freed by a closed connection is reused");

    let gw = TestGateway::plain(&cfg(&o, "max_connections = 1", "")).await;
    let _held = http1_sender::<http_body_util::Full<bytes::Bytes>>(gw.addr("http")).await;
    assert!(closed_at_once(gw.addr("http")).await);
    assert_eq!(
        gw.gateway().metrics().snapshot().connections_refused,
        [1, 0]
    );
}

#[tokio::test]
async fn max_conns_queues_then_answers_503() {
    let o = Origin::start("o").await;
    let text = cfg(&o, "", "").replace(
        "servers = [",
        "max_conns = 1\nqueue = 1\nqueue_timeout = \"2s\"\nservers = [",
    );
    let gw = TestGateway::plain(&text).await;
    let addr = gw.addr("http");
    let queued = || gw.gateway().upstream_health()[0].queued;
    // A holds the one connection; B waits in the queue and is served when A ends.
    let a = tokio::spawn(get(addr, "/slow?ms=600", "x", &[]));
    wait_until(|| o.hits() == 1).await;
    let b = tokio::spawn(get(addr, "/whoami", "x", &[]));
    wait_until(|| queued() == 1).await;
    // The queue holds one: C is refused at once.
    let c = get(addr, "/whoami", "x", &[]).await;
    assert_eq!(c.status, 503);
    assert_eq!(a.await.unwrap().status, 200);
    assert_eq!(
        b.await.unwrap().status,
        200,
        "served once A freed the server"
    );
    assert_eq!(queued(), 0);

    // A wait longer than queue_timeout ends in 503.
    let text = text.replace("queue_timeout = \"2s\"", "queue_timeout = \"200ms\"");
    let gw = TestGateway::plain(&text).await;
    let addr = gw.addr("http");
    let hits = o.hits();
    let a = tokio::spawn(get(addr, "/slow?ms=1500", "x", &[]));
    wait_until(|| o.hits() == hits + 1).await;
    assert_eq!(get(addr, "/whoami", "x", &[]).await.status, 503);
    assert_eq!(a.await.unwrap().status, 200);
}
