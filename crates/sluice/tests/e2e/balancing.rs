use crate::support::*;
use std::time::Duration;

fn upstream_cfg(balance: &str, servers: &str) -> String {
    format!(
        r#"
[log]
access_log = "off"
[[listener]]
name = "http"
address = "127.0.0.1:0"
[[upstream]]
name = "pool"
balance = "{balance}"
fail_timeout = "30s"
connect_timeout = "2s"
servers = [{servers}]
[[route]]
name = "all"
upstream = "pool"
"#
    )
}

fn server(o: &Origin, weight: u32) -> String {
    format!("{{ address = \"{}\", weight = {weight} }}", o.addr)
}

#[tokio::test]
async fn round_robin_spreads_evenly() {
    let os = [
        Origin::start("0").await,
        Origin::start("1").await,
        Origin::start("2").await,
    ];
    let servers: Vec<String> = os.iter().map(|o| server(o, 1)).collect();
    let gw = TestGateway::plain(&upstream_cfg("round_robin", &servers.join(", "))).await;
    for _ in 0..30 {
        assert_eq!(http1_get(gw.addr("http"), "x", "/whoami").await.status, 200);
    }
    assert_eq!(
        os.iter().map(Origin::hits).collect::<Vec<_>>(),
        [10, 10, 10]
    );
}

#[tokio::test]
async fn weighted_round_robin_follows_weights() {
    let os = [Origin::start("0").await, Origin::start("1").await];
    let servers = format!("{}, {}", server(&os[0], 3), server(&os[1], 1));
    let gw = TestGateway::plain(&upstream_cfg("weighted_round_robin", &servers)).await;
    for _ in 0..40 {
        http1_get(gw.addr("http"), "x", "/whoami").await;
    }
    assert_eq!(os.iter().map(Origin::hits).collect::<Vec<_>>(), [30, 10]);
}

#[tokio::test]
async fn least_conn_avoids_the_busy_server() {
    let os = [Origin::start("0").await, Origin::start("1").await];
    let servers = format!("{}, {}", server(&os[0], 1), server(&os[1], 1));
    let gw = TestGateway::plain(&upstream_cfg("least_conn", &servers)).await;
    let addr = gw.addr("http");
    // Occupy one server with a slow request, then see where quick ones go.
    let slow = tokio::spawn(async move { http1_get(addr, "x", "/slow?ms=4000").await });
    let busy = loop {
        if let Some(i) = os.iter().position(|o| o.hits() == 1) {
            break i;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    for _ in 0..6 {
        let got = http1_get(addr, "x", "/whoami").await;
        assert_eq!(
            got.body,
            (1 - busy).to_string(),
            "quick requests avoid server {busy}"
        );
    }
    assert_eq!(slow.await.unwrap().status, 200);
}

#[tokio::test]
async fn ip_hash_keeps_a_client_on_one_server() {
    let os = [
        Origin::start("0").await,
        Origin::start("1").await,
        Origin::start("2").await,
    ];
    let servers: Vec<String> = os.iter().map(|o| server(o, 1)).collect();
    let gw = TestGateway::plain(&upstream_cfg("ip_hash", &servers.join(", "))).await;
    let first = http1_get(gw.addr("http"), "x", "/whoami").await.body;
    for _ in 0..15 {
        assert_eq!(http1_get(gw.addr("http"), "x", "/whoami").await.body, first);
    }
    let mut hits: Vec<usize> = os.iter().map(Origin::hits).collect();
    hits.sort_unstable();
    assert_eq!(hits, [0, 0, 16]);
}

#[tokio::test]
async fn a_refusing_server_is_retried_around_and_then_skipped() {
    let dead = dead_port().await;
    let live = Origin::start("live").await;
    let servers = format!("{{ address = \"{dead}\" }}, {}", server(&live, 1));
    let gw = TestGateway::plain(&upstream_cfg("round_robin", &servers)).await;
    for _ in 0..10 {
        let got = http1_get(gw.addr("http"), "x", "/whoami").await;
        assert_eq!((got.status, got.body.as_str()), (200, "live"));
    }
    assert_eq!(live.hits(), 10);
}

#[tokio::test]
async fn an_upstream_that_goes_away_mid_run_costs_no_request() {
    let a = Origin::start("a").await;
    let b = Origin::start("b").await;
    let servers = format!("{}, {}", server(&a, 1), server(&b, 1));
    let gw = TestGateway::plain(&upstream_cfg("round_robin", &servers)).await;
    let addr = gw.addr("http");
    // Keep-alive connections to both servers exist in the pool when b disappears.
    let mut sender = http1_sender(addr).await;
    let mut bodies = Vec::new();
    for i in 0..40 {
        if i == 10 {
            b.stop();
        }
        let req = http::Request::get("/whoami")
            .header("host", "x")
            .body(http_body_util::Full::new(bytes::Bytes::new()))
            .unwrap();
        let got = collect(sender.send_request(req).await.unwrap()).await;
        assert_eq!(got.status, 200, "request {i} failed: {}", got.body);
        bodies.push(got.body);
    }
    assert!(
        bodies[..10].contains(&"b".to_string()),
        "b served before it went away"
    );
    assert!(
        bodies[12..].iter().all(|b| b == "a"),
        "only a serves after b went away: {bodies:?}"
    );
}

#[tokio::test]
async fn consistent_hash_keeps_each_user_on_a_server_and_moves_only_a_stopped_servers_users() {
    let os = [
        Origin::start("0").await,
        Origin::start("1").await,
        Origin::start("2").await,
    ];
    let servers: Vec<String> = os.iter().map(|o| server(o, 1)).collect();
    let cfg = upstream_cfg("consistent_hash", &servers.join(", "))
        .replace("servers = [", "hash_on = \"header:X-User\"\nservers = [");
    let gw = TestGateway::plain(&cfg).await;
    let addr = gw.addr("http");
    let mut home = Vec::new();
    for user in 0..30 {
        let u = format!("user-{user}");
        let first = get_with(addr, "/whoami", ("x-user", &u)).await.body;
        for _ in 0..2 {
            assert_eq!(
                get_with(addr, "/whoami", ("x-user", &u)).await.body,
                first,
                "{u}"
            );
        }
        home.push(first);
    }
    for name in ["0", "1", "2"] {
        assert!(home.iter().any(|h| h == name), "users spread: {home:?}");
    }

    os[1].stop();
    for (user, was) in home.iter().enumerate() {
        let got = get_with(addr, "/whoami", ("x-user", &format!("user-{user}"))).await;
        assert_eq!(
            got.status, 200,
            "user-{user} is served when their server is gone"
        );
        if was == "1" {
            assert_ne!(got.body, "1");
        } else {
            assert_eq!(&got.body, was, "user-{user}'s server is up: they stay");
        }
    }
}

#[tokio::test]
async fn peak_ewma_steers_away_from_a_slow_server() {
    let os = [Origin::start("fast").await, Origin::start("slow").await];
    let servers = format!("{}, {}", server(&os[0], 1), server(&os[1], 1));
    let gw = TestGateway::plain(&upstream_cfg("peak_ewma", &servers)).await;
    for _ in 0..20 {
        let got = http1_get(gw.addr("http"), "x", "/slow_on?who=slow&ms=150").await;
        assert_eq!(got.status, 200);
    }
    // Both start unmeasured and take turns until each has answered once; from then on the
    // 150 ms server costs a hundred times the fast one.
    assert!(os[1].hits() <= 2, "slow server got {} of 20", os[1].hits());
    assert!(os[0].hits() >= 18);
}

/// `name=value` of the response's Set-Cookie, if any.
fn set_cookie(got: &Got) -> Option<String> {
    got.headers
        .get(http::header::SET_COOKIE)
        .map(|v| v.to_str().unwrap().split(';').next().unwrap().to_string())
}

#[tokio::test]
async fn a_sticky_cookie_keeps_a_client_on_its_server_and_moves_it_when_the_server_goes() {
    let os = [
        Origin::start("0").await,
        Origin::start("1").await,
        Origin::start("2").await,
    ];
    let servers: Vec<String> = os.iter().map(|o| server(o, 1)).collect();
    let cfg = upstream_cfg("round_robin", &servers.join(", "))
        + "[upstream.sticky]\ncookie = \"srv\"\nmax_age = \"1h\"\n";
    // `[upstream.sticky]` must follow its [[upstream]]: move the route after it.
    let cfg = cfg.replace("[[route]]\nname = \"all\"\nupstream = \"pool\"\n", "")
        + "[[route]]\nname = \"all\"\nupstream = \"pool\"\n";
    let gw = TestGateway::plain(&cfg).await;
    let addr = gw.addr("http");

    let first = http1_get(addr, "x", "/whoami").await;
    let cookie = set_cookie(&first).expect("a new session gets a cookie");
    assert!(cookie.starts_with("srv="));
    let full = first.headers[http::header::SET_COOKIE].to_str().unwrap();
    assert!(
        full.contains("HttpOnly") && full.contains("Max-Age=3600"),
        "{full}"
    );
    for _ in 0..9 {
        let got = get_with(addr, "/whoami", ("cookie", &cookie)).await;
        assert_eq!(got.body, first.body, "round robin would have moved it");
        assert_eq!(set_cookie(&got), None, "a valid cookie is not set again");
    }

    // A client cannot pick a server: another server's id with this tag is ignored.
    let other = loop {
        let got = http1_get(addr, "x", "/whoami").await;
        if got.body != first.body {
            break set_cookie(&got).unwrap();
        }
    };
    let (_, tag) = cookie.split_once('.').unwrap();
    let (other_id, _) = other.split_once('.').unwrap();
    let forged = get_with(addr, "/whoami", ("cookie", &format!("{other_id}.{tag}"))).await;
    assert_eq!(forged.status, 200);
    assert!(set_cookie(&forged).is_some(), "a forged cookie is replaced");

    // Its server goes away: the client moves, and gets a cookie for the new one.
    let home: usize = first.body.parse().unwrap();
    os[home].stop();
    let moved = get_with(addr, "/whoami", ("cookie", &cookie)).await;
    assert_eq!(moved.status, 200);
    assert_ne!(moved.body, first.body);
    let new_cookie = set_cookie(&moved).expect("the new server is named");
    for _ in 0..4 {
        let got = get_with(addr, "/whoami", ("cookie", &new_cookie)).await;
        assert_eq!(got.body, moved.body);
    }
}

#[tokio::test]
async fn a_canary_split_takes_its_share_of_users_and_a_header_picks_the_beta() {
    let stable = Origin::start("stable").await;
    let canary = Origin::start("canary").await;
    let beta = Origin::start("beta").await;
    let cfg = format!(
        r#"
[log]
access_log = "off"
[[listener]]
name = "http"
address = "127.0.0.1:0"
[[upstream]]
name = "stable"
servers = [{{ address = "{}" }}]
[[upstream]]
name = "canary"
servers = [{{ address = "{}" }}]
[[upstream]]
name = "beta"
servers = [{{ address = "{}" }}]
[[route]]
name = "app"
upstream = "stable"
split_on = "cookie:uid"
[[route.split]]
upstream = "beta"
header = {{ "x-beta" = "yes" }}
[[route.split]]
upstream = "canary"
weight = 5
"#,
        stable.addr, canary.addr, beta.addr
    );
    let gw = TestGateway::plain(&cfg).await;
    let mut sender = http1_sender(gw.addr("http")).await;
    let mut side = Vec::with_capacity(10_000);
    for uid in 0..10_000 {
        let req = http::Request::get("/whoami")
            .header("host", "x")
            .header("cookie", format!("uid={uid}"))
            .body(http_body_util::Full::new(bytes::Bytes::new()))
            .unwrap();
        let got = collect(sender.send_request(req).await.unwrap()).await;
        side.push(got.body == "canary");
    }
    let to_canary = side.iter().filter(|&&c| c).count();
    // 500 expected of 10,000; the binomial's standard deviation is about 22.
    assert!(
        (400..=600).contains(&to_canary),
        "{to_canary} of 10,000 users on the canary"
    );
    assert_eq!(canary.hits() + stable.hits(), 10_000);
    // A user keeps their side.
    for uid in (0..10_000).step_by(97) {
        let got = get_with(
            gw.addr("http"),
            "/whoami",
            ("cookie", &format!("uid={uid}")),
        )
        .await;
        assert_eq!(got.body == "canary", side[uid], "user {uid}");
    }
    let got = get_with(gw.addr("http"), "/whoami", ("x-beta", "yes")).await;
    assert_eq!(got.body, "beta");
}
