//! Rate limits through real gateways: NGINX's burst and nodelay, keys, the 429's headers,
//! a limit held over a timed window, and a limit shared by two gateways through a real
//! Redis that is killed and restarted mid-test.

use crate::support::*;
use std::time::{Duration, Instant};

fn cfg(origin: &Origin, limit: &str, store: &str) -> String {
    format!(
        r#"
[log]
access_log = "off"
{store}
[[listener]]
name = "http"
address = "127.0.0.1:0"
[[upstream]]
name = "o"
servers = [{{ address = "{}" }}]
[[route]]
name = "limited"
upstream = "o"
[route.rate_limit]
{limit}
"#,
        origin.addr
    )
}

async fn get(addr: std::net::SocketAddr, headers: &[(&str, &str)]) -> Got {
    let mut b = http::Request::get("/whoami").header("host", "x");
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let req = b
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .unwrap();
    http1_send(tokio::net::TcpStream::connect(addr).await.unwrap(), req).await
}

async fn burst(
    addr: std::net::SocketAddr,
    n: usize,
    headers: &'static [(&'static str, &'static str)],
) -> Vec<Got> {
    futures_util::future::join_all((0..n).map(|_| get(addr, headers))).await
}

fn count(got: &[Got], status: u16) -> usize {
    got.iter().filter(|g| g.status == status).count()
}

#[tokio::test]
async fn a_burst_with_nodelay_passes_at_once_and_the_rest_get_429_with_their_headers() {
    let o = Origin::start("o").await;
    let gw = TestGateway::plain(&cfg(&o, "rate = \"1/m\"\nburst = 5\nnodelay = true", "")).await;
    let got = burst(gw.addr("http"), 20, &[]).await;
    assert_eq!(count(&got, 200), 6, "one plus the burst of 5");
    assert_eq!(count(&got, 429), 14);
    let refused = got.iter().find(|g| g.status == 429).unwrap();
    assert_eq!(refused.headers["ratelimit-policy"], "\"limited\";q=1;w=60");
    let retry: u64 = refused.headers["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&retry), "{retry}");
    assert!(
        refused.headers["ratelimit"]
            .to_str()
            .unwrap()
            .starts_with("\"limited\";r=0;t=")
    );
    assert_eq!(o.hits(), 6, "refused requests never reach the origin");
}

#[tokio::test]
async fn without_nodelay_the_burst_is_queued_not_refused() {
    let o = Origin::start("o").await;
    let gw = TestGateway::plain(&cfg(&o, "rate = \"20/s\"\nburst = 3", "")).await;
    let got = burst(gw.addr("http"), 4, &[]).await;
    assert_eq!(count(&got, 200), 4, "all within rate + burst are served");
    let limits = gw.gateway().rate_limits();
    assert_eq!(
        limits[0].1,
        [1, 3, 0],
        "one passed at once, three waited their turn"
    );
}

#[tokio::test]
async fn each_key_has_its_own_allowance() {
    let o = Origin::start("o").await;
    let gw = TestGateway::plain(&cfg(
        &o,
        "rate = \"1/m\"\nburst = 1\nnodelay = true\nkey = \"header:x-user\"",
        "",
    ))
    .await;
    let a = burst(gw.addr("http"), 4, &[("x-user", "alice")]).await;
    let b = burst(gw.addr("http"), 4, &[("x-user", "bob")]).await;
    assert_eq!((count(&a, 200), count(&b, 200)), (2, 2));
}

/// Eight clients sending one request after another for `window`, spread over `addrs`
/// (more than the limit lets through, even on a busy test machine); returns (passed,
/// elapsed).
async fn hammer(addrs: &[std::net::SocketAddr], window: Duration) -> (usize, Duration) {
    let start = Instant::now();
    let workers = (0..8).map(|w| {
        let addrs = addrs.to_vec();
        async move {
            let mut passed = 0;
            let mut i = w;
            while start.elapsed() < window {
                let got = get(addrs[i % addrs.len()], &[]).await;
                assert!(
                    got.status == 200 || got.status == 429,
                    "never an error: {}",
                    got.status
                );
                passed += usize::from(got.status == 200);
                i += 1;
            }
            passed
        }
    });
    let passed = futures_util::future::join_all(workers)
        .await
        .into_iter()
        .sum();
    (passed, start.elapsed())
}

fn close_to(passed: usize, rate: f64, elapsed: Duration, burst: usize) {
    let expected = rate * elapsed.as_secs_f64() + 1.0 + burst as f64;
    let off = (passed as f64 - expected).abs() / expected;
    assert!(
        off < 0.06,
        "{passed} passed where about {expected:.0} should have: {:.1}% off",
        off * 100.0
    );
}

#[tokio::test]
async fn a_limit_holds_over_a_timed_window() {
    let o = Origin::start("o").await;
    // A burst absorbs the jitter of arrivals, as in NGINX: with none, a request that comes
    // a little after its slot loses that little for good, and the rate served falls short.
    let gw = TestGateway::plain(&cfg(&o, "rate = \"100/s\"\nburst = 10\nnodelay = true", "")).await;
    let (passed, elapsed) = hammer(&[gw.addr("http")], Duration::from_millis(1_500)).await;
    close_to(passed, 100.0, elapsed, 10);
}

#[tokio::test]
async fn two_gateways_share_a_limit_through_redis_and_survive_it_dying() {
    let mut redis = Redis::start().await;
    let o = Origin::start("o").await;
    let store = format!(
        "[rate_limit]\nredis = \"{}\"\nredis_timeout = \"200ms\"\nexpected_gateways = 2",
        redis.url()
    );
    let text = cfg(
        &o,
        "rate = \"100/s\"\nburst = 10\nnodelay = true\nkey = \"route\"\nstore = \"redis\"",
        &store,
    );
    let a = TestGateway::plain(&text).await;
    let b = TestGateway::plain(&text).await;
    wait_until(|| {
        a.gateway().rate_limit_redis().is_some_and(|r| r.up)
            && b.gateway().rate_limit_redis().is_some_and(|r| r.up)
    })
    .await;

    // Alternating between the two: together they get one limit, not two.
    let (passed, elapsed) = hammer(
        &[a.addr("http"), b.addr("http")],
        Duration::from_millis(1_500),
    )
    .await;
    close_to(passed, 100.0, elapsed, 10);
    assert_eq!(
        a.gateway().rate_limits()[0].2 + b.gateway().rate_limits()[0].2,
        0,
        "no fallback while Redis is up"
    );

    // Redis dies: requests keep flowing under the local fallback (100 / 2 per gateway),
    // and the counter and the gauge say so.
    redis.kill();
    let (passed, elapsed) = hammer(
        &[a.addr("http"), b.addr("http")],
        Duration::from_millis(1_000),
    )
    .await;
    assert!(passed > 0);
    // Each gateway allows 50/s of its own (and its own burst); together about 100/s again.
    close_to(passed, 100.0, elapsed, 20);
    let fell = a.gateway().rate_limits()[0].2 + b.gateway().rate_limits()[0].2;
    assert!(fell > 0, "fallbacks counted");
    assert!(!a.gateway().rate_limit_redis().unwrap().up);

    // Redis back: shared again.
    redis.restart().await;
    wait_until(|| {
        a.gateway().rate_limit_redis().is_some_and(|r| r.up)
            && b.gateway().rate_limit_redis().is_some_and(|r| r.up)
    })
    .await;
    let before = a.gateway().rate_limits()[0].2 + b.gateway().rate_limits()[0].2;
    let got = burst(a.addr("http"), 3, &[]).await;
    assert!(got.iter().all(|g| g.status == 200 || g.status == 429));
    assert_eq!(
        a.gateway().rate_limits()[0].2 + b.gateway().rate_limits()[0].2,
        before,
        "decided in Redis again"
    );
}

/// A `[rate_limit]` table for a TLS Redis: its URL, the CA, and a client certificate from
/// `client_stem` in `pki` (none when `None`).
fn tls_store(redis: &Redis, ca: &std::path::Path, client: Option<&std::path::Path>) -> String {
    let mut t = format!(
        "[rate_limit]\nredis = \"{}\"\nredis_timeout = \"200ms\"\nredis_ca = \"{}\"\n",
        redis.url(),
        ca.display()
    );
    if let Some(pki) = client {
        t += &format!(
            "redis_certificate = \"{}\"\nredis_key = \"{}\"\n",
            pki.join("client.crt").display(),
            pki.join("client.key").display()
        );
    }
    t
}

#[tokio::test]
async fn a_limit_is_shared_through_redis_over_tls_and_a_redis_it_cannot_trust_is_never_used() {
    let pki = tempfile::tempdir().unwrap();
    let redis = Redis::start_tls(pki.path()).await;
    let o = Origin::start("o").await;
    let limit = "rate = \"100/s\"\nburst = 10\nnodelay = true\nkey = \"route\"\nstore = \"redis\"";
    // Two gateways with the CA and a client certificate Redis accepts.
    let text = cfg(
        &o,
        limit,
        &tls_store(&redis, &pki.path().join("ca.crt"), Some(pki.path())),
    );
    let a = TestGateway::plain(&text).await;
    let b = TestGateway::plain(&text).await;
    wait_until(|| {
        a.gateway().rate_limit_redis().is_some_and(|r| r.up)
            && b.gateway().rate_limit_redis().is_some_and(|r| r.up)
    })
    .await;
    let store = a.gateway().rate_limit_redis().unwrap();
    assert!(store.tls, "{store:?}");
    assert_eq!(store.outages, 0);
    let (passed, elapsed) = hammer(
        &[a.addr("http"), b.addr("http")],
        Duration::from_millis(1_500),
    )
    .await;
    close_to(passed, 100.0, elapsed, 10);
    assert_eq!(
        a.gateway().rate_limits()[0].2 + b.gateway().rate_limits()[0].2,
        0,
        "decided in Redis, over TLS"
    );
    assert!(a.gateway().rate_limits()[0].3 > 0, "Redis was asked");

    // A gateway that trusts another CA refuses Redis's certificate: it never shares the
    // limit, limits locally (counted), and says so once, on /status too.
    let other = tempfile::tempdir().unwrap();
    write_cert(
        other.path(),
        "stranger",
        sluice_tls::selfsigned::KeyKind::EcdsaP256,
        &["127.0.0.1"],
    );
    let text = cfg(
        &o,
        limit,
        &tls_store(&redis, &other.path().join("stranger.crt"), Some(pki.path())),
    );
    let c = TestGateway::plain(&text).await;
    wait_until(|| {
        c.gateway()
            .rate_limit_redis()
            .is_some_and(|r| r.outages == 1)
    })
    .await;
    let got = burst(c.addr("http"), 3, &[]).await;
    assert!(
        got.iter().all(|g| g.status == 200),
        "the local fallback decides"
    );
    assert!(c.gateway().rate_limits()[0].2 > 0, "fallbacks counted");
    let (admin, task) = admin_for(&c).await;
    let status: serde_json::Value =
        serde_json::from_str(&http1_get(admin, "admin", "/status").await.body).unwrap();
    let metrics = http1_get(admin, "admin", "/metrics").await.body;
    task.abort();
    let shown = &status["rate_limit_store"];
    assert_eq!(shown["up"], false, "{shown}");
    assert_eq!(shown["tls"], true, "{shown}");
    assert_eq!(shown["outages"], 1, "{shown}");
    assert!(shown["fallback_total"].as_u64().unwrap() > 0, "{shown}");
    assert!(
        metrics.contains("sluice_rate_limit_redis_up 0"),
        "{metrics}"
    );
    assert!(
        metrics.contains("sluice_rate_limit_redis_outages_total 1"),
        "{metrics}"
    );
    assert!(!c.gateway().rate_limit_redis().unwrap().up);

    // Without a client certificate, Redis (tls-auth-clients yes) refuses the gateway.
    let text = cfg(
        &o,
        limit,
        &tls_store(&redis, &pki.path().join("ca.crt"), None),
    );
    let d = TestGateway::plain(&text).await;
    wait_until(|| {
        d.gateway()
            .rate_limit_redis()
            .is_some_and(|r| r.outages == 1)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!d.gateway().rate_limit_redis().unwrap().up);
}
