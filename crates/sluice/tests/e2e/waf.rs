//! The web application firewall (`[route.waf]`) end to end: Debian's OWASP Core Rule Set
//! 3.3.4 on the default engine (the native one; `waf_native` holds it to libmodsecurity's
//! verdicts) in front of a real origin, over HTTP/1.1 and
//! HTTP/2; bodies (urlencoded, multipart, JSON, chunked, over the limit, arriving slowly);
//! what an operator sees (access log, request log, metrics); and the faults (a broken rule at
//! reload, the WAF saturated).

use crate::support::*;
use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Debian's CRS as libmodsecurity loads it.
const CRS: &str =
    r#"files = ["/etc/modsecurity/crs/crs-setup.conf", "/usr/share/modsecurity-crs/rules/*.conf"]"#;

const SQLI: &str = "/g/whoami?id=1%27%20or%20%271%27%3D%271";

fn config(origin: SocketAddr, extra: &str) -> String {
    format!(
        r#"
[log]
access_log = "{{dir}}/access.log"
access_format = "json"
[[listener]]
name = "web"
address = "127.0.0.1:0"
[[upstream]]
name = "api"
servers = [{{ address = "{origin}" }}]
[[waf.ruleset]]
name = "crs"
{CRS}
[[route]]
name = "guarded"
path_prefix = "/g/"
strip_prefix = "/g"
upstream = "api"
[route.waf]
ruleset = "crs"
request_body_limit = "4k"
[[route]]
name = "watched"
path_prefix = "/d/"
strip_prefix = "/d"
upstream = "api"
[route.waf]
ruleset = "crs"
mode = "detect"
[[route]]
name = "partial"
path_prefix = "/partial/"
strip_prefix = "/partial"
upstream = "api"
[route.waf]
ruleset = "crs"
request_body_limit = "1k"
body_over_limit = "inspect_partial"
[[route]]
name = "plain"
path_prefix = "/p/"
strip_prefix = "/p"
upstream = "api"
{extra}
"#
    )
}

async fn send(addr: SocketAddr, req: Request<Full<Bytes>>) -> Got {
    http1_send(TcpStream::connect(addr).await.unwrap(), req).await
}

fn post(path: &str, content_type: &str, body: impl Into<Bytes>) -> Request<Full<Bytes>> {
    Request::post(path)
        .header("host", "shop.test")
        .header(
            "user-agent",
            "Mozilla/5.0 (X11; Linux x86_64) Firefox/120.0",
        )
        .header("accept", "*/*")
        .header("content-type", content_type)
        .body(Full::new(body.into()))
        .unwrap()
}

fn get(path: &str) -> Request<Full<Bytes>> {
    Request::get(path)
        .header("host", "shop.test")
        .header(
            "user-agent",
            "Mozilla/5.0 (X11; Linux x86_64) Firefox/120.0",
        )
        .header("accept", "text/html")
        .body(Full::new(Bytes::new()))
        .unwrap()
}

/// A request over a raw connection (chunked framing, a body in pieces): the response's head
/// and body as text.
async fn raw(addr: SocketAddr, pieces: &[&[u8]]) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    for p in pieces {
        s.write_all(p).await.unwrap();
    }
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crs_blocks_attacks_in_heads_and_bodies_and_forwards_the_rest() {
    let origin = Origin::start("api").await;
    let gw =
        TestGateway::start_logged(&config(origin.addr, ""), tempfile::tempdir().unwrap()).await;
    let web = gw.addr("web");

    let ok = send(web, get("/g/whoami?sort=price&page=2")).await;
    assert_eq!((ok.status, ok.body.as_str()), (200, "api"));
    let hits = origin.hits();
    let blocked = send(web, get(SQLI)).await;
    assert_eq!(blocked.status, 403);
    let id = blocked.headers["x-request-id"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        blocked.body.contains(&id),
        "the body names the request ID: {}",
        blocked.body
    );

    let form = "user=admin&comment=%3Cscript%3Ealert(1)%3C%2Fscript%3E";
    assert_eq!(
        send(
            web,
            post("/g/upload", "application/x-www-form-urlencoded", form)
        )
        .await
        .status,
        403
    );
    let json = r#"{"user":{"name":"x' UNION SELECT password FROM users--"}}"#;
    assert_eq!(
        send(web, post("/g/upload", "application/json", json))
            .await
            .status,
        403
    );
    let b = "b0undary";
    let multipart = |note: &str| {
        format!(
            "--{b}\r\nContent-Disposition: form-data; name=\"note\"\r\n\r\n{note}\r\n--{b}\r\n\
             Content-Disposition: form-data; name=\"f\"; filename=\"a.txt\"\r\nContent-Type: application/octet-stream\r\n\r\nhello\r\n--{b}--\r\n"
        )
    };
    let ct = format!("multipart/form-data; boundary={b}");
    assert_eq!(
        send(
            web,
            post("/g/upload", &ct, multipart("../../../../etc/passwd"))
        )
        .await
        .status,
        403
    );
    let chunked_attack = raw(
        web,
        &[b"POST /g/upload HTTP/1.1\r\nHost: shop.test\r\nUser-Agent: curl/8\r\nAccept: */*\r\n\
            Content-Type: application/x-www-form-urlencoded\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n\
            11\r\nq=1%27%20or%20%27\r\nb\r\n1%27%3D%271\r\n0\r\n\r\n"],
    )
    .await;
    assert!(
        chunked_attack.starts_with("HTTP/1.1 403"),
        "{chunked_attack}"
    );
    assert_eq!(
        origin.hits(),
        hits,
        "nothing a rule refused reached the upstream"
    );

    // The same kinds of bodies, benign: forwarded whole.
    let got = send(
        web,
        post(
            "/g/upload",
            "application/x-www-form-urlencoded",
            "user=ann&comment=hello",
        ),
    )
    .await;
    assert_eq!((got.status, got.body.as_str()), (200, "api got 22 bytes"));
    let got = send(web, post("/g/upload", &ct, multipart("a note"))).await;
    assert_eq!(got.status, 200, "{}", got.body);
    let got = send(
        web,
        post(
            "/g/upload",
            "application/json",
            r#"{"user":{"name":"ann"}}"#,
        ),
    )
    .await;
    assert_eq!(got.status, 200);
    let chunked = raw(
        web,
        &[b"POST /g/upload HTTP/1.1\r\nHost: shop.test\r\nUser-Agent: curl/8\r\nAccept: */*\r\n\
            Content-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\n{\"a\":\r\n6\r\n\"bcd\"}\r\n0\r\n\r\n"],
    )
    .await;
    assert!(
        chunked.starts_with("HTTP/1.1 200") && chunked.ends_with("api got 11 bytes"),
        "{chunked}"
    );
    assert!(
        send(web, post("/g/upload", "text/plain", vec![b'a'; 5000]))
            .await
            .status
            == 413,
        "over request_body_limit"
    );

    // inspect_partial: the first 1k inspected, the whole body forwarded.
    let mut long = b"q=hello&".to_vec();
    long.resize(3000, b'a');
    long.extend_from_slice(b"&x=1%27%20or%20%271%27%3D%271");
    let got = send(
        web,
        post(
            "/partial/upload",
            "application/x-www-form-urlencoded",
            long.clone(),
        ),
    )
    .await;
    assert_eq!(
        (got.status, got.body.clone()),
        (200, format!("api got {} bytes", long.len()))
    );
    let mut early = b"x=1%27%20or%20%271%27%3D%271&q=".to_vec();
    early.resize(3000, b'a');
    assert_eq!(
        send(
            web,
            post(
                "/partial/upload",
                "application/x-www-form-urlencoded",
                early
            )
        )
        .await
        .status,
        403
    );

    // Detect: forwarded, recorded. A route without a WAF: untouched.
    assert_eq!(
        send(web, get(&SQLI.replace("/g/", "/d/"))).await.status,
        200
    );
    assert_eq!(
        send(web, get(&SQLI.replace("/g/", "/p/"))).await.status,
        200
    );

    // HTTP/2 (h2c): the rules see the authority as Host.
    let h2 = http2_send(TcpStream::connect(web).await.unwrap(), get(SQLI)).await;
    assert_eq!(h2.status, 403);

    // What an operator sees: the access log's audit record, the request log, the metrics.
    let (admin, _server) = admin_for(&gw).await;
    let found = crate::auth::get(admin, "/api/v1/requests?rule_id=942100&route=guarded", &[]).await;
    assert_eq!(found.status, 200, "{}", found.body);
    let found: serde_json::Value = serde_json::from_str(&found.body).unwrap();
    let requests = found["requests"].as_array().expect("requests");
    assert!(
        requests.iter().any(|r| r["request_id"] == id.as_str()),
        "{found}"
    );
    assert!(requests.iter().all(|r| r["status"] == 403), "{found}");
    let metrics = crate::auth::get(admin, "/metrics", &[]).await.body;
    for line in [
        "sluice_waf_rule_matches_total{route=\"guarded\",rule=\"942100\"}",
        "sluice_waf_detected_total{route=\"watched\"} 1",
        "sluice_waf_body_rejected_total{route=\"guarded\"} 1",
        "sluice_waf_body_partial_total{route=\"partial\"} 2",
    ] {
        assert!(metrics.contains(line), "{line} in:\n{metrics}");
    }
    let blocked: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("sluice_waf_blocked_total{route=\"guarded\"} "))
        .and_then(|n| n.parse().ok())
        .expect("the blocked counter");
    assert_eq!(blocked, 6, "{metrics}");
    assert!(
        !metrics
            .lines()
            .any(|l| l.starts_with("sluice_waf_") && l.contains("route=\"plain\"")),
        "a route without a WAF has no WAF series"
    );
    let log = gw.dir().join("access.log");
    wait_until(|| {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains(&id)
    })
    .await;
    let line = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .find(|l| l.contains(&id))
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .unwrap();
    assert_eq!(line["waf"]["action"], "block");
    assert!(
        line["waf"]["anomaly_score"]
            .as_u64()
            .is_some_and(|s| s >= 5),
        "{line}"
    );
    let m = line["waf"]["matches"].as_array().unwrap();
    assert!(
        m.iter()
            .any(|m| m["id"] == 942100 && m["msg"].as_str().unwrap().contains("SQL Injection")),
        "{line}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_body_waits_in_its_request_not_on_the_loop() {
    let origin = Origin::start("api").await;
    let gw =
        TestGateway::start_logged(&config(origin.addr, ""), tempfile::tempdir().unwrap()).await;
    let web = gw.addr("web");
    let mut slow = TcpStream::connect(web).await.unwrap();
    slow.write_all(
        b"POST /g/upload HTTP/1.1\r\nHost: shop.test\r\nUser-Agent: curl/8\r\nAccept: */*\r\n\
          Content-Type: application/json\r\nContent-Length: 10\r\nConnection: close\r\n\r\n{\"a\":",
    )
    .await
    .unwrap();
    // While the body is half sent, other requests (WAF and plain) are answered.
    for path in ["/g/whoami", "/p/whoami"] {
        assert_eq!(send(web, get(path)).await.status, 200);
    }
    slow.write_all(b"\"bc\"}").await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), slow.read_to_end(&mut out)).await;
    let out = String::from_utf8_lossy(&out);
    let path = gw.dir().join("access.log");
    wait_until(|| {
        std::fs::read_to_string(&path)
            .unwrap_or_default()
            .contains("upload")
    })
    .await;
    let log = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        out.starts_with("HTTP/1.1 200") && out.ends_with("api got 10 bytes"),
        "{out}\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_rule_at_reload_leaves_the_old_rules_serving() {
    let origin = Origin::start("api").await;
    let own = |rule: &str| {
        format!(
            "[[waf.ruleset]]\nname = \"own\"\nrules = '''\n{rule}\n'''\n[[route]]\nname = \"own\"\npath_prefix = \"/own/\"\nstrip_prefix = \"/own\"\nupstream = \"api\"\n[route.waf]\nruleset = \"own\"\n"
        )
    };
    let good = own(
        "SecRule ARGS:q \"@contains evil\" \"id:10001,phase:1,deny,status:418,log,msg:'evil'\"",
    );
    let gw = TestGateway::start(&config(origin.addr, &good), tempfile::tempdir().unwrap()).await;
    let web = gw.addr("web");
    assert_eq!(send(web, get("/own/whoami?q=evil")).await.status, 418);
    let broken = own(
        "SecRule ARGS:q \"@contains evil\" \"id:10001,phase:1,deny,status:418,log,msg:'evil'\"\nSecRuleEngin On",
    );
    let err = gw
        .reload(&config(origin.addr, &broken))
        .await
        .expect_err("the broken rule refuses the reload");
    let err = err.to_string();
    assert!(
        err.contains("route `own`") && err.contains("test.toml"),
        "{err}"
    );
    assert_eq!(
        send(web, get("/own/whoami?q=evil")).await.status,
        418,
        "the old rules still serve"
    );
    assert_eq!(send(web, get("/own/whoami?q=kind")).await.status, 200);
    // A rule that changes is in force after the reload.
    let changed = own(
        "SecRule ARGS:q \"@contains kind\" \"id:10001,phase:1,deny,status:403,log,msg:'kind'\"",
    );
    gw.reload(&config(origin.addr, &changed)).await.unwrap();
    assert_eq!(send(web, get("/own/whoami?q=kind")).await.status, 403);
    assert_eq!(send(web, get("/own/whoami?q=evil")).await.status, 200);
}

/// The rules see the head the client sent, not the one forwarded upstream: a chunked GET
/// keeps its `Transfer-Encoding` (the body is then forwarded with a `Content-Length`), and an
/// HTTP/1.0 request without `Host` has none (CRS's rules 920171 and 920280 look for these).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rules_see_the_head_as_the_client_sent_it() {
    let origin = Origin::start("api").await;
    let own = r#"
[[waf.ruleset]]
name = "own"
rules = '''
SecRule REQUEST_HEADERS:Transfer-Encoding "@streq chunked" "id:10011,phase:1,deny,status:421,log,msg:'chunked'"
SecRule &REQUEST_HEADERS:Host "@eq 0" "id:10012,phase:1,deny,status:422,log,msg:'no host'"
'''
[[route]]
name = "own"
path_prefix = "/own/"
strip_prefix = "/own"
upstream = "api"
[route.waf]
ruleset = "own"
"#;
    let gw = TestGateway::start(&config(origin.addr, own), tempfile::tempdir().unwrap()).await;
    let web = gw.addr("web");
    let chunked = raw(
        web,
        &[b"GET /own/whoami HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n3\r\nabc\r\n0\r\n\r\n"],
    )
    .await;
    assert!(chunked.starts_with("HTTP/1.1 421"), "{chunked}");
    let no_host = raw(web, &[b"GET /own/whoami HTTP/1.0\r\n\r\n"]).await;
    assert!(no_host.starts_with("HTTP/1.1 422"), "{no_host}");
    // The same request with a Host and a Content-Length passes.
    let plain = raw(
        web,
        &[b"GET /own/whoami HTTP/1.0\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"],
    )
    .await;
    assert!(plain.starts_with("HTTP/1.1 200"), "{plain}");
}

/// A probe refused before any rule runs (a request target the URI parser refuses, a version
/// that is not one) is in the access log like any request: status, client, the request line
/// with its unsafe bytes escaped; and it is counted among the 4xx responses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_refused_before_the_rules_is_logged_and_counted() {
    let origin = Origin::start("api").await;
    let text = config(origin.addr, "").replace(
        "access_format = \"json\"",
        "access_format = \"json\"\naccess_flush = \"0s\"",
    );
    let gw = TestGateway::start_logged(&text, tempfile::tempdir().unwrap()).await;
    let web = gw.addr("web");
    let xss = raw(
        web,
        &[b"GET /g/get?x=<script>alert(1)</script> HTTP/1.1\r\nHost: x\r\n\r\n"],
    )
    .await;
    assert!(xss.starts_with("HTTP/1.1 400"), "{xss}");
    let junk = raw(web, &[b"GET / JUNK/1.0\r\nHost: x\r\n\r\n"]).await;
    assert!(junk.starts_with("HTTP/1.1 400"), "{junk}");
    let log = std::fs::read_to_string(gw.dir().join("access.log")).unwrap();
    let lines: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{log}");
    assert_eq!(lines[0]["status"], 400);
    assert_eq!(lines[0]["method"], "-");
    assert_eq!(
        lines[0]["path"],
        "GET\\x20/g/get?x=<script>alert(1)</script>\\x20HTTP/1.1"
    );
    assert!(
        lines[0]["client"]
            .as_str()
            .unwrap()
            .starts_with("127.0.0.1:")
    );
    assert_eq!(lines[1]["path"], "GET\\x20/\\x20JUNK/1.0");
    let (admin, _task) = admin_for(&gw).await;
    let metrics = crate::auth::get(admin, "/metrics", &[]).await.body;
    assert!(
        metrics.contains("sluice_http_requests_total{class=\"4xx\"} 2"),
        "{metrics}"
    );
}

/// `sluice check` names the rule file and line that does not load, with each engine: the
/// native engine (the default) as `file:line: directive: why and what to do`, libmodsecurity
/// in its own words.
#[test]
fn sluice_check_names_a_broken_rules_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("own.conf"),
        "SecRuleEngine On\nSecRequestBodyAcess On\n",
    )
    .unwrap();
    let config = dir.path().join("sluice.toml");
    for (engine, said) in [
        ("", "own.conf:2: SecRequestBodyAcess: "),
        ("engine = \"modsecurity\"\n", "Line: 2"),
    ] {
        std::fs::write(
            &config,
            format!(
                "[[listener]]\nname = \"web\"\naddress = \"127.0.0.1:0\"\n\
                 [[upstream]]\nname = \"api\"\nservers = [{{ address = \"127.0.0.1:9\" }}]\n\
                 [[waf.ruleset]]\nname = \"own\"\n{engine}files = [\"own.conf\"]\n\
                 [[route]]\nname = \"r\"\nupstream = \"api\"\n[route.waf]\nruleset = \"own\"\n"
            ),
        )
        .unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(["check", "--config"])
            .arg(&config)
            .output()
            .unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("own.conf") && err.contains(said),
            "{engine}: {err}"
        );
    }
}

/// One WAF thread and a queue of one: a request whose inspection is held (a libmodsecurity
/// rule runs a script that waits for a file; the native engine has no `@inspectFile`) fills
/// the WAF; then a `closed` route refuses (503), an
/// `open` route forwards uninspected, both counted, and a route without a WAF is untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saturated_waf_fails_open_or_closed_as_each_route_says() {
    let origin = Origin::start("api").await;
    let dir = tempfile::tempdir().unwrap();
    let release = dir.path().join("release");
    let script = dir.path().join("hold.sh");
    std::fs::write(
        &script,
        format!("#!/bin/sh\ni=0\nwhile [ ! -e {} ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done\necho 1\n", release.display()),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let extra = format!(
        "[waf]\nthreads = 1\nqueue = 1\n\
         [[waf.ruleset]]\nname = \"held\"\nengine = \"modsecurity\"\nrules = '''\nSecRule ARGS:hold \"@inspectFile {}\" \"id:10002,phase:1,pass,nolog\"\n'''\n\
         [[route]]\nname = \"closed\"\npath_prefix = \"/closed/\"\nstrip_prefix = \"/closed\"\nupstream = \"api\"\n[route.waf]\nruleset = \"held\"\n\
         [[route]]\nname = \"open\"\npath_prefix = \"/open/\"\nstrip_prefix = \"/open\"\nupstream = \"api\"\n[route.waf]\nruleset = \"held\"\non_overload = \"open\"\n",
        script.display()
    );
    let text = config(origin.addr, &extra).replace(
        "access_format = \"json\"",
        "access_format = \"json\"\naccess_flush = \"0s\"",
    );
    let gw = TestGateway::start_logged(&text, dir).await;
    let web = gw.addr("web");
    let waf = gw.gateway().waf().expect("a firewall");
    let held = tokio::spawn(async move { send(web, get("/closed/whoami?hold=1")).await });
    wait_until(|| waf.in_flight() == 1).await;
    let refused = send(web, get("/closed/whoami")).await;
    assert_eq!(refused.status, 503);
    let forwarded = send(web, get("/open/whoami")).await;
    assert_eq!((forwarded.status, forwarded.body.as_str()), (200, "api"));
    assert_eq!(send(web, get("/p/whoami")).await.status, 200);
    std::fs::write(&release, "").unwrap();
    assert_eq!(held.await.unwrap().status, 200);
    let stats: Vec<_> = waf
        .stats()
        .map(|(r, s)| (r.to_string(), s.snapshot()))
        .collect();
    let of = |name: &str| {
        stats
            .iter()
            .find(|(r, _)| r == name)
            .map(|(_, s)| s.clone())
            .unwrap()
    };
    assert_eq!(
        (of("closed").overload_closed, of("closed").inspected),
        (1, 1)
    );
    assert_eq!((of("open").overload_open, of("open").inspected), (1, 0));
    // The 503 the WAF caused says so in its access log line, as the forwarded one does.
    let lines = log_lines(&gw);
    let refused = lines.iter().find(|l| l["status"] == 503).expect("the 503");
    assert_eq!(refused["waf"]["action"], "closed", "{refused}");
    let open = lines.iter().find(|l| l["route"] == "open").expect("open");
    assert_eq!(open["waf"]["action"], "open", "{open}");
}

/// The JSON access log's lines so far.
fn log_lines(gw: &TestGateway) -> Vec<serde_json::Value> {
    std::fs::read_to_string(gw.dir().join("access.log"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Mode `detect` refuses nothing the rules would not: a body over `request_body_limit` with
/// `body_over_limit = "reject"` (the default) is inspected up to the limit and forwarded
/// whole, counted and recorded (`waf=detect reason=body_over_limit`); in mode `block` the
/// same body is refused with 413, and that 413 carries the WAF's record too, as a rule's 403
/// does. A 413 from the listener's own `max_body_bytes` has none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn detect_mode_refuses_no_body_and_each_waf_status_has_its_record() {
    let origin = Origin::start("api").await;
    let extra = "[[route]]\nname = \"dl\"\npath_prefix = \"/dl/\"\nstrip_prefix = \"/dl\"\nupstream = \"api\"\n\
                 [route.waf]\nruleset = \"crs\"\nmode = \"detect\"\nrequest_body_limit = \"1k\"\n";
    let text = config(origin.addr, extra)
        .replace(
            "access_format = \"json\"",
            "access_format = \"json\"\naccess_flush = \"0s\"",
        )
        .replace(
            "address = \"127.0.0.1:0\"",
            "address = \"127.0.0.1:0\"\nmax_body_bytes = \"8k\"",
        );
    let gw = TestGateway::start_logged(&text, tempfile::tempdir().unwrap()).await;
    let web = gw.addr("web");
    let hits = origin.hits();
    let got = send(web, post("/dl/upload", "text/plain", vec![b'a'; 3000])).await;
    assert_eq!(
        (got.status, got.body.as_str()),
        (200, "api got 3000 bytes"),
        "detect forwards the whole body"
    );
    assert_eq!(origin.hits(), hits + 1);
    let refused = send(web, post("/g/upload", "text/plain", vec![b'a'; 5000])).await;
    assert_eq!(refused.status, 413, "block refuses it");
    let listener = send(web, post("/p/upload", "text/plain", vec![b'a'; 9000])).await;
    assert_eq!(listener.status, 413, "max_body_bytes");
    assert_eq!(send(web, get(SQLI)).await.status, 403);
    // A record is written as its request ends, which can be after its client read the
    // whole response: wait for all four, and find each by its path, not by its place.
    wait_until(|| log_lines(&gw).len() >= 4).await;
    let lines = log_lines(&gw);
    assert_eq!(lines.len(), 4, "{lines:?}");
    let waf = |path: &str| {
        let mut of = lines
            .iter()
            .filter(|l| l["path"].as_str().is_some_and(|p| p.starts_with(path)));
        let l = of.next().unwrap_or_else(|| panic!("{path} in {lines:?}"));
        assert!(of.next().is_none(), "one record for {path}: {lines:?}");
        (
            l["status"].as_u64().unwrap(),
            l["waf"]["action"].as_str(),
            l["waf"]["reason"].as_str(),
        )
    };
    assert_eq!(
        waf("/dl/upload"),
        (200, Some("detect"), Some("body_over_limit"))
    );
    assert_eq!(
        waf("/g/upload"),
        (413, Some("block"), Some("body_over_limit"))
    );
    assert_eq!(
        waf("/p/upload"),
        (413, None, None),
        "not the WAF's: no record"
    );
    assert_eq!(waf("/g/whoami"), (403, Some("block"), None));
    let (admin, _task) = admin_for(&gw).await;
    let metrics = crate::auth::get(admin, "/metrics", &[]).await.body;
    for want in [
        "sluice_waf_body_partial_total{route=\"dl\"} 1",
        "sluice_waf_body_rejected_total{route=\"dl\"} 0",
        "sluice_waf_body_rejected_total{route=\"guarded\"} 1",
    ] {
        assert!(metrics.contains(want), "{want} in\n{metrics}");
    }
}

fn gzip(data: &[u8]) -> Vec<u8> {
    use std::io::Write as _;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

const LEAK_PAGE: &str = "<html><body>ORA-00933: SQL command not properly ended</body></html>";
const FINE_PAGE: &str = "<html><body>all is well</body></html>";

/// An origin that answers `/leak` with `LEAK_PAGE` and anything else with `FINE_PAGE`, both
/// HTML compressed with gzip (`Content-Encoding: gzip`), on keep-alive connections.
async fn gzip_origin() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    let end = loop {
                        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            break i + 4;
                        }
                        match s.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    };
                    let leak = buf.starts_with(b"GET /leak");
                    buf.drain(..end);
                    let body = gzip(if leak { LEAK_PAGE } else { FINE_PAGE }.as_bytes());
                    let head = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Encoding: gzip\r\nContent-Length: {}\r\n\r\n",
                        body.len()
                    );
                    if s.write_all(head.as_bytes()).await.is_err()
                        || s.write_all(&body).await.is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// `inspect_response` with a gzip upstream body: the rules see it decoded (a leak in it is
/// blocked, as the same page uncompressed is), and the client gets the upstream's bytes as
/// they were sent (compressed, byte for byte) when nothing matches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compressed_response_is_inspected_decoded_and_sent_as_it_came() {
    let origin = Origin::start("api").await;
    let zipped = gzip_origin().await;
    let extra = format!(
        "[[upstream]]\nname = \"zipped\"\nservers = [{{ address = \"{zipped}\" }}]\n\
         [[waf.ruleset]]\nname = \"outbound\"\nrules = '''\n\
         SecRule RESPONSE_BODY \"@contains ORA-00933\" \"id:10021,phase:4,deny,status:502,log,msg:'database error leak'\"\n'''\n\
         [[route]]\nname = \"z\"\npath_prefix = \"/z/\"\nstrip_prefix = \"/z\"\nupstream = \"zipped\"\n\
         [route.waf]\nruleset = \"outbound\"\ninspect_response = true\n"
    );
    let gw = TestGateway::start(&config(origin.addr, &extra), tempfile::tempdir().unwrap()).await;
    let web = gw.addr("web");
    let fetch = |path: &'static str| async move {
        let req = Request::get(path)
            .header("host", "shop.test")
            .header("accept-encoding", "gzip")
            .body(Full::new(Bytes::new()))
            .unwrap();
        let mut sender = http1_sender(web).await;
        let resp = sender.send_request(req).await.unwrap();
        let status = resp.status().as_u16();
        let encoding = resp.headers().get("content-encoding").cloned();
        let body = http_body_util::BodyExt::collect(resp.into_body())
            .await
            .unwrap()
            .to_bytes();
        (status, encoding, body)
    };
    let (status, _, body) = fetch("/z/leak").await;
    assert_eq!(
        status, 502,
        "the leak, gzip-compressed, is seen and blocked"
    );
    assert!(
        String::from_utf8_lossy(&body).contains("blocked by the web application firewall"),
        "{body:?}"
    );
    let (status, encoding, body) = fetch("/z/fine").await;
    assert_eq!(
        (status, encoding.as_ref().map(|v| v.as_bytes())),
        (200, Some(&b"gzip"[..]))
    );
    assert_eq!(
        &body[..],
        &gzip(FINE_PAGE.as_bytes())[..],
        "the upstream's bytes"
    );
}

/// `inspect_response = true`: the upstream's response goes through phases 3 and 4 before
/// anything of it is sent. A rule on the body or the head replaces the response with its
/// status (nothing of the original reaches the client); `detect` forwards it and records the
/// match with the request's; a media type outside `response_mime_types` and a body's part
/// beyond `response_body_limit` pass as they came.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_are_inspected_where_the_route_asks() {
    let origin = Origin::start("api").await;
    let route = |name: &str, headers: &str, waf: &str| {
        format!(
            "[[route]]\nname = \"{name}\"\npath_prefix = \"/{name}/\"\nstrip_prefix = \"/{name}\"\nupstream = \"api\"\n\
             [route.response_headers]\nset = {{ {headers} }}\n\
             [route.waf]\nruleset = \"outbound\"\ninspect_response = true\nresponse_body_limit = \"1k\"\n{waf}\n"
        )
    };
    let html = "\"content-type\" = \"text/html; charset=utf-8\"";
    let extra = format!(
        "[[waf.ruleset]]\nname = \"outbound\"\nrules = '''\n\
         SecRule ARGS:q \"@streq odd\" \"id:10020,phase:1,pass,log,msg:'odd request'\"\n\
         SecRule RESPONSE_BODY \"@contains ORA-00933\" \"id:10021,phase:4,deny,status:502,log,msg:'database error leak'\"\n\
         SecRule RESPONSE_HEADERS:X-Leak \"@streq yes\" \"id:10022,phase:3,deny,status:503,log,msg:'header leak'\"\n\
         '''\n{}{}{}{}",
        route("out", html, ""),
        route("outd", html, "mode = \"detect\""),
        route("bin", "\"content-type\" = \"application/octet-stream\"", ""),
        route("leak", &format!("{html}, \"x-leak\" = \"yes\""), ""),
    );
    let text = config(origin.addr, &extra).replace(
        "access_format = \"json\"",
        "access_format = \"json\"\naccess_flush = \"0s\"",
    );
    let gw = TestGateway::start_logged(&text, tempfile::tempdir().unwrap()).await;
    let web = gw.addr("web");
    let leak = "/echo?e=ORA-00933";
    let blocked = send(web, get(&format!("/out{leak}"))).await;
    assert_eq!(blocked.status, 502);
    assert!(
        blocked
            .body
            .contains("blocked by the web application firewall")
            && !blocked.body.contains("ORA"),
        "{}",
        blocked.body
    );
    let fine = send(web, get("/out/whoami")).await;
    assert_eq!((fine.status, fine.body.as_str()), (200, "api"));
    let detected = send(web, get(&format!("/outd{leak}&q=odd"))).await;
    assert_eq!(
        (detected.status, detected.body.as_str()),
        (200, "/echo?e=ORA-00933&q=odd")
    );
    let binary = send(web, get(&format!("/bin{leak}"))).await;
    assert_eq!(
        binary.status, 200,
        "application/octet-stream is not inspected"
    );
    assert_eq!(send(web, get("/leak/whoami")).await.status, 503, "phase 3");
    // 5000 bytes against a 1k limit: the rules see the start, the client gets every byte.
    let long = send(web, get("/out/bytes?n=5000")).await;
    assert_eq!((long.status, long.body.len()), (200, 5000));
    let log = std::fs::read_to_string(gw.dir().join("access.log")).unwrap();
    let lines: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let rules = |l: &serde_json::Value| -> Vec<u64> {
        l["waf"]["matches"]
            .as_array()
            .map(|m| m.iter().map(|x| x["id"].as_u64().unwrap()).collect())
            .unwrap_or_default()
    };
    assert_eq!(lines[0]["status"], 502);
    assert_eq!(
        (lines[0]["waf"]["action"].as_str(), rules(&lines[0])),
        (Some("block"), vec![10021])
    );
    assert!(
        lines[1]["waf"].is_null(),
        "nothing matched: no record {}",
        lines[1]
    );
    assert_eq!(
        (lines[2]["waf"]["action"].as_str(), rules(&lines[2])),
        (Some("detect"), vec![10020, 10021]),
        "the request's match and the response's in one record"
    );
    assert!(lines[3]["waf"].is_null(), "{}", lines[3]);
    assert_eq!(rules(&lines[4]), vec![10022]);
    let (admin, _task) = admin_for(&gw).await;
    let metrics = crate::auth::get(admin, "/metrics", &[]).await.body;
    for want in [
        "sluice_waf_responses_inspected_total{route=\"out\"} 3",
        "sluice_waf_blocked_total{route=\"out\"} 1",
        "sluice_waf_detected_total{route=\"outd\"} 1",
        "sluice_waf_blocked_total{route=\"leak\"} 1",
        "sluice_waf_rule_matches_total{route=\"outd\",rule=\"10021\"} 1",
    ] {
        assert!(metrics.contains(want), "{want} in\n{metrics}");
    }
}
