//! The dashboard on the admin listener, in a real browser: headless Chromium (Debian's
//! `chromium`, installed by scripts/deps) loads `/` from a gateway that served a little
//! HTTPS traffic, and the test reads the DOM it drew.

use crate::support::*;
use serde_json::Value;
use sluice_tls::selfsigned::KeyKind;
use std::net::SocketAddr;
use std::time::Duration;

/// Chromium with enough virtual time for a few of the page's one-second refreshes.
async fn browse(url: &str, extra: &[String]) -> (String, String) {
    let mut args = vec!["--virtual-time-budget=3500".to_owned()];
    args.extend_from_slice(extra);
    headless_chromium(url, &args).await
}

/// The text of the element with `id` in a dumped DOM.
fn text_of<'a>(dom: &'a str, id: &str) -> &'a str {
    let at = dom
        .find(&format!("id=\"{id}\""))
        .unwrap_or_else(|| panic!("no #{id} in the DOM"));
    let rest = &dom[at..];
    let start = rest.find('>').unwrap() + 1;
    let end = rest[start..].find('<').unwrap();
    &rest[start..start + end]
}

/// Thousands separators, as the page writes integers.
fn grouped(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

async fn stats(admin: SocketAddr) -> Value {
    let got = http1_get(admin, "localhost", "/api/v1/stats").await;
    assert_eq!(got.status, 200, "{}", got.body);
    serde_json::from_str(&got.body).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_draws_the_stats_in_headless_chromium_without_errors() {
    let o = Origin::start("o").await;
    let dir = tempfile::tempdir().unwrap();
    write_cert(dir.path(), "local", KeyKind::EcdsaP256, &["localhost"]);
    let gw = TestGateway::start(
        &format!(
            r#"
[log]
access_log = "off"
[offload.crypto]
engines = ["pool"]
[[listener]]
name = "https"
address = "127.0.0.1:0"
[listener.tls]
[[certificate]]
name = "local"
cert = "local.crt"
key = "local.key"
[[upstream]]
name = "o"
servers = [{{ address = "{origin}" }}]
[[route]]
name = "all"
upstream = "o"
[route.cache]
default_ttl = "1m"
[[route.mirror]]
upstream = "o"
"#,
            origin = o.addr
        ),
        dir,
    )
    .await;
    let (admin, _task) = admin_for(&gw).await;

    // A little load over a few of the sampler's seconds: full handshakes and a request each
    // (the first goes upstream, the cache answers the others).
    let https = gw.addr("https");
    let until = tokio::time::Instant::now() + Duration::from_millis(2500);
    let mut sent = 0u64;
    while tokio::time::Instant::now() < until || sent < 20 {
        let hs = tls_connect(https, &ClientOpts::default()).await.unwrap();
        let got = http1_send(
            hs.stream,
            http::Request::get("/")
                .header("host", "localhost")
                .body(Default::default())
                .unwrap(),
        )
        .await;
        assert_eq!(got.status, 200);
        sent += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The last request's bookkeeping ends with its body; then one more sample.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let s = stats(admin).await;
    assert_eq!(s["totals"]["requests"].as_u64(), Some(sent), "{s}");
    assert_eq!(s["totals"]["handshakes"].as_u64(), Some(sent));
    let served: f64 = s["series"]["requests"]["2xx"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .sum();
    assert!(served > 0.0, "the 2xx series has the traffic: {s}");
    let pool = s["engines"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["service"] == "crypto" && e["engine"] == "pool")
        .expect("the crypto pool engine is listed");
    assert_eq!(
        pool["completed"].as_u64(),
        Some(sent),
        "every signature on the pool"
    );
    assert!(
        s["cpu"]["saved_s"].as_f64().unwrap() > 0.0,
        "offloaded signatures are credited with their inline cost: {}",
        s["cpu"]
    );

    // The same figures in /metrics.
    let metrics = http1_get(admin, "localhost", "/metrics").await.body;
    let value = |line: &str| -> f64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(line))
            .unwrap_or_else(|| panic!("no {line} in /metrics"))
            .trim()
            .parse()
            .unwrap()
    };
    assert_eq!(
        value("sluice_http_request_duration_seconds_count "),
        sent as f64
    );
    assert!(value("sluice_offload_cpu_saved_seconds_total{service=\"crypto\"} ") > 0.0);
    assert!(value("sluice_http_body_bytes_total{direction=\"out\"} ") > 0.0);

    let url = format!("http://127.0.0.1:{}/", admin.port());
    let (dom, log) = browse(&url, &["--dump-dom".to_owned()]).await;
    let console: Vec<&str> = log.lines().filter(|l| l.contains(":CONSOLE")).collect();
    assert!(console.is_empty(), "the page logged or threw: {console:#?}");
    assert!(dom.contains("id=\"board\""), "{dom}");
    assert!(
        !dom.contains("id=\"board\" hidden"),
        "the board is shown: {dom}"
    );
    // The numbers are the endpoint's, written as the page writes them.
    assert_eq!(text_of(&dom, "hs-total"), grouped(sent));
    // Every request went to the mirror too (the cache answers before proxying, so only the
    // first, which went upstream).
    assert!(
        dom.contains("<td>all</td><td>o</td><td class=\"n\">1</td>"),
        "the mirror's row: {dom}"
    );
    let ratio = 100.0 * (sent - 1) as f64 / sent as f64;
    assert_eq!(
        text_of(&dom, "cache-ratio"),
        format!("{ratio:.1}%"),
        "the cache's hit ratio"
    );
    assert!(
        text_of(&dom, "cache-bytes").ends_with(" / 256 MiB · 1 entries"),
        "{}",
        text_of(&dom, "cache-bytes")
    );
    assert!(dom.contains("<td>pool</td>"), "{dom}");
    assert!(
        dom.contains(&format!("<td class=\"n\">{}</td>", grouped(sent))),
        "the pool's completed jobs: {dom}"
    );
    // Every chart has lines with points.
    for series in ["2xx", "TLSv1.3 full", "gateway CPU"] {
        let marker = format!("data-series=\"{series}\" data-points=\"");
        let at = dom
            .find(&marker)
            .unwrap_or_else(|| panic!("no {series} line: {dom}"));
        let n: usize = dom[at + marker.len()..]
            .split('"')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert!(n >= 2, "{series}: {n} points");
    }
    let revision = match &s["config"]["revision"] {
        Value::String(r) => r.clone(),
        other => other.to_string(),
    };
    assert_eq!(text_of(&dom, "revision"), revision);

    // Screenshots at a laptop's and a phone's width, kept under target/ as artifacts.
    let artifacts =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/test-artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    for (name, size) in [
        ("dashboard-1280x800.png", "1280,800"),
        ("dashboard-390x844.png", "390,844"),
    ] {
        let shot = artifacts.join(name);
        let _ = std::fs::remove_file(&shot);
        let (_, log) = browse(
            &url,
            &[
                format!("--screenshot={}", shot.display()),
                format!("--window-size={size}"),
            ],
        )
        .await;
        let console: Vec<&str> = log.lines().filter(|l| l.contains(":CONSOLE")).collect();
        assert!(
            console.is_empty(),
            "{name}: the page logged or threw: {console:#?}"
        );
        let png = std::fs::read(&shot).unwrap_or_else(|e| panic!("{name} was not written: {e}"));
        assert!(png.starts_with(b"\x89PNG"), "{name} is a PNG");
    }
}

#[tokio::test]
async fn stats_answer_get_only_and_the_page_is_html_with_a_policy_that_keeps_it_local() {
    let dir = tempfile::tempdir().unwrap();
    let gw = TestGateway::start(
        r#"
[[listener]]
name = "http"
address = "127.0.0.1:0"
[[upstream]]
name = "o"
servers = [{ address = "127.0.0.1:9" }]
[[route]]
name = "all"
upstream = "o"
"#,
        dir,
    )
    .await;
    let (admin, _task) = admin_for(&gw).await;
    let page = http1_get(admin, "localhost", "/").await;
    assert_eq!(page.status, 200);
    assert!(
        page.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    let csp = page.headers["content-security-policy"].to_str().unwrap();
    assert!(
        csp.contains("default-src 'none'") && csp.contains("connect-src 'self'"),
        "{csp}"
    );
    assert!(page.body.contains("/api/v1/stats"));
    let s = stats(admin).await;
    assert_eq!(s["upstreams"][0]["server"], "127.0.0.1:9", "{s}");
    let post = raw_exchange(
        admin,
        b"POST /api/v1/stats HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
        Duration::from_secs(5),
    )
    .await;
    assert!(post.starts_with("HTTP/1.1 405"), "{post}");
    assert!(post.to_ascii_lowercase().contains("allow: get"), "{post}");
}
