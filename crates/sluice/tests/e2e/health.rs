//! Active health checks against real origins that can be told to fail, seen through the
//! traffic and through the admin listener (`/api/v1/upstreams/NAME/health`, `/status`,
//! `/metrics`).

use crate::support::*;
use serde_json::Value;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;

fn config(servers: &[String], check: &str) -> String {
    format!(
        r#"
[log]
access_log = "off"
[[listener]]
name = "http"
address = "127.0.0.1:0"
[[upstream]]
name = "pool"
fail_timeout = "30s"
connect_timeout = "1s"
servers = [{}]
[upstream.health_check]
{check}
[[route]]
name = "all"
upstream = "pool"
"#,
        servers.join(", ")
    )
}

async fn health(admin: SocketAddr) -> Value {
    let got = http1_get(admin, "localhost", "/api/v1/upstreams/pool/health").await;
    assert_eq!(got.status, 200, "{}", got.body);
    serde_json::from_str(&got.body).unwrap()
}

fn up(gw: &TestGateway, server: usize) -> bool {
    gw.gateway().upstream_health()[0].servers[server].up
}

#[tokio::test]
async fn a_server_failing_its_checks_gets_no_traffic_until_it_passes_again() {
    let a = Origin::start("a").await;
    let b = Origin::start("b").await;
    let servers = [
        format!("{{ address = \"{}\" }}", a.addr),
        format!("{{ address = \"{}\" }}", b.addr),
    ];
    let check = "path = \"/healthz\"\nstatuses = [\"2xx\"]\nbody = \"ok\"\ninterval = \"100ms\"\ntimeout = \"80ms\"\nhealthy = 2\nunhealthy = 2";
    let gw = TestGateway::plain(&config(&servers, check)).await;
    let (admin, _task) = admin_for(&gw).await;
    let addr = gw.addr("http");

    let doc = health(admin).await;
    assert_eq!(doc["health_check"], true);
    assert_eq!(doc["servers"][1]["state"], "up");

    b.healthy.store(false, Ordering::SeqCst);
    wait_until(|| !up(&gw, 1)).await;
    for _ in 0..20 {
        let got = http1_get(addr, "x", "/whoami").await;
        assert_eq!(
            (got.status, got.body.as_str()),
            (200, "a"),
            "b is out of use"
        );
    }
    let doc = health(admin).await;
    assert_eq!(doc["servers"][0]["state"], "up");
    assert_eq!(doc["servers"][1]["state"], "down");
    let reason = doc["servers"][1]["reason"].as_str().unwrap();
    assert!(reason.contains("status 503"), "{reason}");
    assert_eq!(doc["servers"][1]["address"], b.addr.to_string());

    let metrics = http1_get(admin, "localhost", "/metrics").await.body;
    assert!(
        metrics.contains(&format!(
            "sluice_upstream_server_up{{upstream=\"pool\",server=\"{}\"}} 0",
            b.addr
        )),
        "{metrics}"
    );
    let status: Value =
        serde_json::from_str(&http1_get(admin, "localhost", "/status").await.body).unwrap();
    assert_eq!(status["upstreams"][0]["servers_down"], 1);

    b.healthy.store(true, Ordering::SeqCst);
    wait_until(|| up(&gw, 1)).await;
    let mut bodies = Vec::new();
    for _ in 0..10 {
        bodies.push(http1_get(addr, "x", "/whoami").await.body);
    }
    assert!(bodies.iter().any(|b| b == "b"), "b is back: {bodies:?}");
    assert!(
        health(admin).await["servers"][1]["reason"]
            .as_str()
            .unwrap()
            .contains("passed")
    );
}

#[tokio::test]
async fn a_tcp_check_finds_a_dead_server_before_any_request_does() {
    let live = Origin::start("live").await;
    let dead = dead_port().await;
    let servers = [
        format!("{{ address = \"{dead}\" }}"),
        format!("{{ address = \"{}\" }}", live.addr),
    ];
    let gw = TestGateway::plain(&config(
        &servers,
        "type = \"tcp\"\ninterval = \"100ms\"\nunhealthy = 1",
    ))
    .await;
    let (admin, _task) = admin_for(&gw).await;
    wait_until(|| !up(&gw, 0)).await;
    let doc = health(admin).await;
    let reason = doc["servers"][0]["reason"].as_str().unwrap();
    assert!(reason.starts_with("health check: connect"), "{reason}");
    assert_eq!(live.hits(), 0, "no request was needed to find it");
    for _ in 0..6 {
        assert_eq!(
            http1_get(gw.addr("http"), "x", "/whoami").await.body,
            "live"
        );
    }
    // Every server down: requests still go somewhere (fail open), and that is counted.
    live.stop();
    wait_until(|| !up(&gw, 1)).await;
    let got = http1_get(gw.addr("http"), "x", "/whoami").await;
    assert_eq!(got.status, 502);
    assert!(health(admin).await["fail_open_requests"].as_u64().unwrap() >= 1);
    let unknown = http1_get(admin, "localhost", "/api/v1/upstreams/nosuch/health").await;
    assert_eq!(unknown.status, 404);
}

#[tokio::test]
async fn outlier_ejection_takes_out_a_failing_server_but_never_too_many() {
    let os = [
        Origin::start("a").await,
        Origin::start("b").await,
        Origin::start("c").await,
    ];
    let servers: Vec<String> = os
        .iter()
        .map(|o| format!("{{ address = \"{}\" }}", o.addr))
        .collect();
    let cfg = config(&servers, "type = \"tcp\"\ninterval = \"60s\"").replace(
        "[upstream.health_check]\ntype = \"tcp\"\ninterval = \"60s\"",
        "[upstream.outlier]\nconsecutive_failures = 3\nbase_ejection = \"60s\"\nmax_ejected_percent = 34",
    );
    let gw = TestGateway::plain(&cfg).await;
    let (admin, _task) = admin_for(&gw).await;
    let addr = gw.addr("http");

    // Round robin: b answers every third request with a 500, three times in a row.
    let mut statuses = Vec::new();
    for _ in 0..9 {
        statuses.push(http1_get(addr, "x", "/fail_on?who=b").await.status);
    }
    assert_eq!(
        statuses.iter().filter(|&&s| s == 500).count(),
        3,
        "{statuses:?}"
    );
    assert!(!up(&gw, 1), "b is ejected");
    for _ in 0..12 {
        let got = http1_get(addr, "x", "/fail_on?who=b").await;
        assert_eq!(got.status, 200, "b gets no traffic: {}", got.body);
    }
    let doc = health(admin).await;
    assert_eq!(doc["servers"][1]["state"], "down");
    assert!(
        doc["servers"][1]["reason"]
            .as_str()
            .unwrap()
            .starts_with("outlier")
    );
    assert_eq!(doc["ejections"], 1);

    // c fails too, but one of three (34%) is ejected already: c stays, and that is counted.
    for _ in 0..8 {
        http1_get(addr, "x", "/fail_on?who=b,c").await;
    }
    assert!(up(&gw, 2), "the cap keeps c in use");
    let doc = health(admin).await;
    assert!(doc["ejections_capped"].as_u64().unwrap() >= 1, "{doc}");
    let metrics = http1_get(admin, "localhost", "/metrics").await.body;
    assert!(
        metrics.contains("sluice_upstream_ejections_total{upstream=\"pool\",result=\"ejected\"} 1"),
        "{metrics}"
    );
}

#[tokio::test]
async fn retries_follow_the_route_policy_and_stop_at_the_budget() {
    let os = [
        Origin::start("a").await,
        Origin::start("b").await,
        Origin::start("c").await,
    ];
    let servers: Vec<String> = os
        .iter()
        .map(|o| format!("{{ address = \"{}\" }}", o.addr))
        .collect();
    let cfg = format!(
        r#"
[log]
access_log = "off"
[[listener]]
name = "http"
address = "127.0.0.1:0"
[[upstream]]
name = "pool"
retry_budget_percent = 10
retry_budget_min_per_second = 0
servers = [{}]
[[route]]
name = "retry-5xx"
headers = {{ "x-retry" = "1" }}
upstream = "pool"
[route.retry]
attempts = 3
on = ["5xx"]
backoff = "1ms"
[[route]]
name = "default"
upstream = "pool"
"#,
        servers.join(", ")
    );
    let gw = TestGateway::plain(&cfg).await;
    let (admin, _task) = admin_for(&gw).await;
    let addr = gw.addr("http");

    // b answers 500: the route retries 5xx on another server, within the budget (10% of
    // requests, no minimum). Ten requests buy one retry.
    let retry = ("x-retry", "1");
    for _ in 0..9 {
        get_with(addr, "/fail_on?who=nobody", retry).await;
    }
    let mut statuses = Vec::new();
    for _ in 0..3 {
        statuses.push(get_with(addr, "/fail_on?who=b", retry).await.status);
    }
    let m = gw.gateway().metrics().snapshot();
    assert_eq!(m.retries[0], 1, "one retry sent: {:?}", m.retries);
    let failed = statuses.iter().filter(|&&s| s == 500).count();
    assert_eq!(
        m.retries[1] as usize, failed,
        "every 500 a client saw was a refused retry"
    );

    // Every server fails: the budget is spent, so no more retries go out (a retry storm
    // would triple the load); each refusal is counted.
    for _ in 0..20 {
        let got = get_with(addr, "/fail_on?who=a,b,c", retry).await;
        assert_eq!(got.status, 500);
    }
    let m = gw.gateway().metrics().snapshot();
    let sent = m.retries[0];
    assert!(sent <= 3, "10% of 32 requests: {sent} retries sent");
    assert!(m.retries[1] >= 15, "refusals counted: {:?}", m.retries);
    let metrics = http1_get(admin, "localhost", "/metrics").await.body;
    assert!(metrics.contains("sluice_upstream_retries_total{result=\"budget_exhausted\"}"));

    // The default policy (another route) does not retry a 5xx.
    let before = os.iter().map(Origin::hits).sum::<usize>();
    let got = http1_get(addr, "x", "/fail_on?who=a,b,c").await;
    assert_eq!(got.status, 500);
    assert_eq!(
        os.iter().map(Origin::hits).sum::<usize>(),
        before + 1,
        "one try only"
    );
}
