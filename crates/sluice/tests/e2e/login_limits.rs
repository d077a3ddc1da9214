//! Logins that cannot be used to burn the gateway (issue 85): a route's rate limit counts
//! refused credentials (checked before them, as NGINX's `limit_req` runs before
//! `auth_basic`), password hashing runs on a bounded pool that answers 503 when full, and a
//! credential in the query string is masked in the access log and the request log and kept
//! from the origin. Everything is counted; nothing is timed.

use crate::auth::htpasswd;
use crate::support::*;
use base64::Engine as _;
use serde_json::Value;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

fn basic(user: &str, password: &str) -> String {
    let pair = format!("{user}:{password}");
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(pair)
    )
}

/// A gateway with route `login` (basic authentication from `users.htpasswd`) in front of
/// `origin`, `extra` added to the route, `head` before the listener.
async fn login_gateway(
    origin: &Origin,
    dir: tempfile::TempDir,
    head: &str,
    extra: &str,
) -> TestGateway {
    TestGateway::start(
        &format!(
            r#"
{head}
[[listener]]
name = "http"
address = "127.0.0.1:0"
[[upstream]]
name = "o"
servers = [{{ address = "{}" }}]
[[route]]
name = "login"
upstream = "o"
{extra}
[route.auth]
basic = {{ htpasswd = "users.htpasswd" }}
"#,
            origin.addr
        ),
        dir,
    )
    .await
}

async fn get(addr: SocketAddr, path: &str, authorization: &str) -> Got {
    crate::auth::get(addr, path, &[("authorization", authorization)]).await
}

/// The route's authentication counters: passwords hashed, and refusals of `reason`.
fn counted(gw: &TestGateway, reason: &str) -> (u64, u64) {
    let routes = gw.gateway().authentication();
    let (_, c) = routes.iter().find(|(r, _)| r == "login").unwrap();
    let refused = c.refusals().find(|(r, _)| *r == reason).map(|(_, n)| n);
    (c.passwords_hashed.load(Ordering::Relaxed), refused.unwrap())
}

fn statuses(got: &[Got]) -> Vec<u16> {
    got.iter().map(|g| g.status).collect()
}

/// Wrong passwords use up the limit (one plus a burst of two): the fourth attempt gets 429
/// without its password being checked, and so does the right password after them. The
/// origin never sees a request.
#[tokio::test]
async fn wrong_passwords_over_the_limit_get_429_not_401_and_never_reach_the_origin() {
    let dir = tempfile::tempdir().unwrap();
    htpasswd(
        &dir.path().join("users.htpasswd"),
        "-B",
        "alice",
        "wonderland",
    );
    let origin = Origin::start("o").await;
    let limit = "rate_limit = { rate = \"1/m\", burst = 2, nodelay = true }";
    let gw = login_gateway(&origin, dir, "", limit).await;
    let web = gw.addr("http");
    let mut got = Vec::new();
    for _ in 0..5 {
        got.push(get(web, "/whoami", &basic("alice", "guess")).await);
    }
    got.push(get(web, "/whoami", &basic("alice", "wonderland")).await);
    assert_eq!(statuses(&got), [401, 401, 401, 429, 429, 429]);
    assert!(got[3].headers.contains_key("retry-after"));
    assert!(!got[3].headers.contains_key("www-authenticate"));
    assert_eq!(origin.hits(), 0, "no attempt reached the origin");
    assert_eq!(
        counted(&gw, "bad_password"),
        (3, 3),
        "only the attempts within the limit were hashed"
    );
}

/// `limit = "after_auth"`: the old order. Refused credentials do not count (401 every
/// time); the requests authentication let through do.
#[tokio::test]
async fn after_auth_counts_only_the_requests_authentication_let_through() {
    let dir = tempfile::tempdir().unwrap();
    htpasswd(
        &dir.path().join("users.htpasswd"),
        "-B",
        "alice",
        "wonderland",
    );
    let origin = Origin::start("o").await;
    let limit =
        "rate_limit = { rate = \"1/m\", burst = 2, nodelay = true, limit = \"after_auth\" }";
    let gw = login_gateway(&origin, dir, "", limit).await;
    let web = gw.addr("http");
    let mut got = Vec::new();
    for _ in 0..5 {
        got.push(get(web, "/whoami", &basic("alice", "guess")).await);
    }
    for _ in 0..4 {
        got.push(get(web, "/whoami", &basic("alice", "wonderland")).await);
    }
    assert_eq!(
        statuses(&got),
        [401, 401, 401, 401, 401, 200, 200, 200, 429]
    );
    assert_eq!(origin.hits(), 3);
    // Five wrong passwords and the right one once (then remembered): six hashes. A user the
    // file does not have costs one more, as a wrong password does.
    assert_eq!(counted(&gw, "bad_password"), (6, 5));
    let got = get(web, "/whoami", &basic("mallory", "guess")).await;
    assert_eq!(got.status, 401);
    assert_eq!(counted(&gw, "bad_password"), (7, 6));
}

/// One hashing thread and one waiting place, and eight wrong passwords at a bcrypt cost of 12
/// sent at once: at most two are checked at a time, the others get 503 at once, counted in
/// `sluice_auth_refused_total{reason="hash_queue_full"}`. Each answer is 401 (checked) or 503
/// (refused), and the counters agree with the answers.
#[tokio::test]
async fn a_full_hashing_pool_answers_503_and_counts_each() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("users.htpasswd");
    let out = std::process::Command::new("htpasswd")
        .args([
            "-cbB",
            "-C",
            "12",
            &file.display().to_string(),
            "alice",
            "wonderland",
        ])
        .output()
        .expect("htpasswd runs: install apache2-utils");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let origin = Origin::start("o").await;
    let gw = login_gateway(&origin, dir, "[auth]\nhash_threads = 1\nhash_queue = 1", "").await;
    let (admin, _admin_task) = admin_for(&gw).await;
    let web = gw.addr("http");
    const N: usize = 8;
    // Every connection open and waiting before any request is sent, so that all eight
    // arrive while the first check runs (one bcrypt at cost 12 is some 4096 rounds of
    // Blowfish key setup; eight requests on open connections are a few writes).
    let ready = Arc::new(tokio::sync::Barrier::new(N));
    let request = format!(
        "GET /whoami HTTP/1.1\r\nhost: api.test\r\nauthorization: {}\r\nconnection: close\r\n\r\n",
        basic("alice", "guess")
    );
    let sent = (0..N).map(|_| {
        let (ready, request) = (ready.clone(), request.clone());
        tokio::spawn(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut tcp = tokio::net::TcpStream::connect(web).await.unwrap();
            ready.wait().await;
            tcp.write_all(request.as_bytes()).await.unwrap();
            let mut answer = Vec::new();
            tcp.read_to_end(&mut answer).await.unwrap();
            let answer = String::from_utf8_lossy(&answer).into_owned();
            answer
                .get(9..12)
                .and_then(|s| s.parse::<u16>().ok())
                .unwrap_or_else(|| panic!("not an HTTP answer: {answer:?}"))
        })
    });
    let mut got = Vec::new();
    for s in futures_util::future::join_all(sent).await {
        got.push(s.unwrap());
    }
    let refused = got.iter().filter(|s| **s == 503).count() as u64;
    let checked = got.iter().filter(|s| **s == 401).count() as u64;
    assert_eq!(checked + refused, N as u64, "only 401 and 503: {got:?}");
    assert!(refused >= 1, "a full pool refuses: {got:?}");
    assert!(checked >= 1, "{got:?}");
    assert_eq!(counted(&gw, "hash_queue_full"), (checked, refused));
    let metrics = http1_get(admin, "admin", "/metrics").await.body;
    let line = format!(
        "sluice_auth_refused_total{{route=\"login\",reason=\"hash_queue_full\"}} {refused}"
    );
    assert!(metrics.lines().any(|l| l == line), "{line} in:\n{metrics}");
    assert_eq!(origin.hits(), 0);
}

/// A gateway with route `keyed` (an API key in `X-API-Key` or `?api_key=`) and route
/// `passed` (the same, with `forward_credential = true`), logging JSON lines to
/// `{dir}/access.log`.
async fn keyed_gateway(origin: &Origin) -> TestGateway {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("api-keys"),
        format!(
            "{}\n",
            sluice_auth::key_line("mobile", b"GOOD-KEY-0123456789")
        ),
    )
    .unwrap();
    TestGateway::start_logged(
        &format!(
            r#"
[log]
access_log = "{{dir}}/access.log"
access_format = "json"
[[listener]]
name = "http"
address = "127.0.0.1:0"
[[upstream]]
name = "o"
servers = [{{ address = "{}" }}]
[[route]]
name = "passed"
path_prefix = "/echo/passed"
upstream = "o"
[route.auth]
keys = {{ file = "api-keys", query = "api_key" }}
forward_credential = true
[[route]]
name = "keyed"
upstream = "o"
[route.auth]
keys = {{ file = "api-keys", query = "api_key" }}
"#,
            origin.addr
        ),
        dir,
    )
    .await
}

/// A key in the query, right or wrong, is `REDACTED` in the access log line and the request
/// log, and removed from the target the origin receives (the rest of the query kept), unless
/// the route forwards it.
#[tokio::test]
async fn a_query_key_is_masked_in_the_logs_and_kept_from_the_origin() {
    let origin = Origin::start("o").await;
    let gw = keyed_gateway(&origin).await;
    let (admin, _admin_task) = admin_for(&gw).await;
    let web = gw.addr("http");
    let got = crate::auth::get(web, "/echo/a?x=1&api_key=GOOD-KEY-0123456789&y=2", &[]).await;
    assert_eq!((got.status, got.body.as_str()), (200, "/echo/a?x=1&y=2"));
    let got = crate::auth::get(web, "/echo/b?api_key=GOOD-KEY-0123456789", &[]).await;
    assert_eq!((got.status, got.body.as_str()), (200, "/echo/b"));
    let got = crate::auth::get(web, "/echo/c?api_key=WRONG-KEY-987654321&z=3", &[]).await;
    assert_eq!(got.status, 401);
    let got = crate::auth::get(web, "/echo/passed?api_key=GOOD-KEY-0123456789", &[]).await;
    assert_eq!(
        (got.status, got.body.as_str()),
        (200, "/echo/passed?api_key=GOOD-KEY-0123456789"),
        "forward_credential = true"
    );
    assert_eq!(origin.hits(), 3);

    gw.gateway().access_log().flush();
    let log = gw.dir().join("access.log");
    wait_until(|| {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .count()
            >= 4
    })
    .await;
    let text = std::fs::read_to_string(&log).unwrap();
    let paths: Vec<String> = text
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["path"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(
        paths,
        [
            "/echo/a?x=1&api_key=REDACTED&y=2",
            "/echo/b?api_key=REDACTED",
            "/echo/c?api_key=REDACTED&z=3",
            "/echo/passed?api_key=REDACTED",
        ]
    );
    assert!(!text.contains("KEY-"), "no key in the access log:\n{text}");

    let ring = http1_get(admin, "admin", "/api/v1/requests?limit=10").await;
    assert_eq!(ring.status, 200, "{}", ring.body);
    assert!(
        !ring.body.contains("KEY-"),
        "no key in the request log: {}",
        ring.body
    );
    let v: Value = serde_json::from_str(&ring.body).unwrap();
    let mut logged: Vec<&str> = v["requests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["path"].as_str().unwrap())
        .collect();
    logged.sort_unstable();
    assert_eq!(
        logged,
        [
            "/echo/a?x=1&api_key=REDACTED&y=2",
            "/echo/b?api_key=REDACTED",
            "/echo/c?api_key=REDACTED&z=3",
            "/echo/passed?api_key=REDACTED",
        ]
    );
}

/// Two copies of the header that carries the route's key are refused with 400 before either
/// is checked (the gateway would verify one and the origin might read the other), as two
/// `Authorization` fields are; one good copy passes.
#[tokio::test]
async fn two_key_headers_are_refused_before_either_is_checked() {
    let origin = Origin::start("o").await;
    let gw = keyed_gateway(&origin).await;
    let web = gw.addr("http");
    let good = ("x-api-key", "GOOD-KEY-0123456789");
    let got = crate::auth::get(web, "/echo/one", &[good]).await;
    assert_eq!((got.status, got.body.as_str()), (200, "/echo/one"));
    for second in ["GOOD-KEY-0123456789", "WRONG-KEY-987654321"] {
        let got = crate::auth::get(web, "/echo/two", &[good, ("x-api-key", second)]).await;
        assert_eq!(got.status, 400, "{second}");
    }
    assert_eq!(origin.hits(), 1, "no request with two keys went upstream");
}
