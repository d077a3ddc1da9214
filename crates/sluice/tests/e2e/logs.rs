//! The access log beyond the file, end to end: lines shipped to a real searchable store
//! (VictoriaLogs, built by `scripts/deps`) over HTTP as JSON lines and as an Elasticsearch
//! `_bulk` body, and to its syslog listeners over UDP and TCP, then found by a LogsQL query;
//! the store down and back (requests never wait, drops counted, shipping resumes); and the
//! in-memory request log on the admin API.

use crate::support::*;
use serde_json::Value;
use std::net::SocketAddr;
use std::process::{Child, Stdio};
use std::time::Duration;

/// A VictoriaLogs on 127.0.0.1: HTTP (ingest and LogsQL queries) and syslog over UDP and TCP.
struct Store {
    child: Option<Child>,
    http: SocketAddr,
    /// An HTTPS listener beside the plain one (`start_tls`), with its certificate's stem.
    https: Option<(SocketAddr, String)>,
    syslog: u16,
    dir: tempfile::TempDir,
}

impl Store {
    async fn start() -> Store {
        let mut s = Store {
            child: None,
            http: format!("127.0.0.1:{}", free_port()).parse().unwrap(),
            https: None,
            syslog: free_port(),
            dir: tempfile::tempdir().unwrap(),
        };
        s.run().await;
        s
    }

    /// Also serving HTTPS, with a certificate for `localhost` issued by `{dir}/ca.crt`.
    async fn start_tls() -> Store {
        let mut s = Store {
            child: None,
            http: format!("127.0.0.1:{}", free_port()).parse().unwrap(),
            https: Some((
                format!("127.0.0.1:{}", free_port()).parse().unwrap(),
                "vl".into(),
            )),
            syslog: free_port(),
            dir: tempfile::tempdir().unwrap(),
        };
        // A CA (`ca.crt`, what the shipper trusts) and the store's certificate from it.
        let dir = s.dir.path();
        issue(dir, "ca", "log store test CA", None, &[]);
        let ca = boring::x509::X509::from_pem(&std::fs::read(dir.join("ca.crt")).unwrap()).unwrap();
        let key =
            boring::pkey::PKey::private_key_from_pem(&std::fs::read(dir.join("ca.key")).unwrap())
                .unwrap();
        issue(dir, "vl", "localhost", Some((&ca, &key)), &["localhost"]);
        s.run().await;
        s
    }

    /// Starts (or restarts) it on the same ports and data.
    async fn run(&mut self) {
        let syslog = format!("127.0.0.1:{}", self.syslog);
        let mut cmd = std::process::Command::new(tool("victoria-logs"));
        match &self.https {
            None => cmd.arg(format!("-httpListenAddr={}", self.http)),
            Some((at, stem)) => {
                let file = |ext: &str| {
                    self.dir
                        .path()
                        .join(format!("{stem}.{ext}"))
                        .display()
                        .to_string()
                };
                cmd.arg(format!("-httpListenAddr={},{at}", self.http))
                    .arg("-tls=false,true")
                    .arg(format!("-tlsCertFile=,{}", file("crt")))
                    .arg(format!("-tlsKeyFile=,{}", file("key")))
            }
        };
        let child = cmd
            .arg(format!(
                "-storageDataPath={}",
                self.dir.path().join("data").display()
            ))
            .arg(format!("-syslog.listenAddr.udp={syslog}"))
            .arg(format!("-syslog.listenAddr.tcp={syslog}"))
            .arg("-loggerLevel=WARN")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(self.dir.path().join("vl.log")).unwrap())
            .spawn()
            .expect("VictoriaLogs starts");
        self.child = Some(child);
        for _ in 0..300 {
            if tokio::net::TcpStream::connect(self.http).await.is_ok()
                && tokio::net::TcpStream::connect(&syslog).await.is_ok()
                && match &self.https {
                    Some((at, _)) => tokio::net::TcpStream::connect(at).await.is_ok(),
                    None => true,
                }
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("VictoriaLogs did not listen within 30 s");
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// The rows a LogsQL query finds.
    async fn query(&self, logsql: &str) -> Vec<Value> {
        let q: String = url_encode(logsql);
        let got = http1_get(
            self.http,
            "vl",
            &format!("/select/logsql/query?query={q}&limit=1000"),
        )
        .await;
        assert_eq!(got.status, 200, "{}", got.body);
        got.body
            .lines()
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// Waits up to 20 s for a query to find `want` rows (ingestion is visible within about a
    /// second).
    async fn find(&self, logsql: &str, want: usize) -> Vec<Value> {
        let mut rows = Vec::new();
        for _ in 0..200 {
            rows = self.query(logsql).await;
            if rows.len() >= want {
                return rows;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!(
            "`{logsql}` found {} rows, not {want}: {rows:#?}",
            rows.len()
        );
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        self.stop();
    }
}

fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn shippers(store: &Store) -> String {
    format!(
        r#"
[[log.ship]]
name = "lines"
url = "http://{http}/insert/jsonline?_time_field=time&_msg_field=path&_stream_fields=listener"
headers = {{ "VL-Extra-Fields" = "via=lines" }}
flush = "100ms"
[[log.ship]]
name = "bulk"
url = "http://{http}/insert/elasticsearch/_bulk?_msg_field=path"
format = "elasticsearch"
index = "sluice-access"
headers = {{ "VL-Extra-Fields" = "via=bulk" }}
flush = "100ms"
[[log.ship]]
name = "otlp"
url = "http://{http}/insert/opentelemetry/v1/logs"
format = "otlp"
headers = {{ "VL-Extra-Fields" = "via=otlp" }}
flush = "100ms"
[[log.ship]]
name = "syslog-udp"
url = "udp://localhost:{syslog}"
app_name = "sluice-udp"
flush = "100ms"
[[log.ship]]
name = "syslog-tcp"
url = "tcp://127.0.0.1:{syslog}"
app_name = "sluice-tcp"
facility = "local3"
flush = "100ms"
"#,
        http = store.http,
        syslog = store.syslog
    )
}

async fn gateway(origin: SocketAddr, log: &str) -> TestGateway {
    TestGateway::start_logged(
        &format!(
            r#"
[log]
access_log = "off"
{log}
[[listener]]
name = "http"
address = "127.0.0.1:0"
[[upstream]]
name = "o"
servers = [{{ address = "{origin}" }}]
[[upstream]]
name = "gone"
servers = [{{ address = "{gone}" }}]
[[route]]
name = "broken"
path_prefix = "/broken"
upstream = "gone"
[[route]]
name = "all"
upstream = "o"
"#,
            gone = dead_port().await,
        ),
        tempfile::tempdir().unwrap(),
    )
    .await
}

fn shipper<'a>(status: &'a Value, name: &str) -> &'a Value {
    status["log_shipping"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no shipper {name}: {status:#}"))
}

async fn status(admin: SocketAddr) -> Value {
    serde_json::from_str(&http1_get(admin, "admin", "/status").await.body).unwrap()
}

/// Every shipper's lines are in the store and found by what they say: JSON lines and bulk
/// with their fields (status, route, the request's path), syslog with its RFC 5424 header.
#[tokio::test]
async fn access_log_lines_reach_a_log_store_over_http_bulk_and_syslog() {
    let store = Store::start().await;
    let origin = Origin::start("o").await;
    let gw = gateway(origin.addr, &shippers(&store)).await;
    let (admin, _admin_task) = admin_for(&gw).await;
    let at = gw.addr("http");
    for i in 0..5 {
        assert_eq!(
            http1_get(at, "shop.test", &format!("/echo/shipped-{i}"))
                .await
                .status,
            200
        );
    }
    assert_eq!(
        http1_get(at, "shop.test", "/broken/shipped-fail")
            .await
            .status,
        502
    );

    for via in ["lines", "bulk"] {
        let rows = store
            .find(&format!("via:{via} AND _msg:~\"shipped\""), 6)
            .await;
        assert_eq!(rows.len(), 6, "{rows:#?}");
        let failed: Vec<&Value> = rows.iter().filter(|r| r["status"] == "502").collect();
        assert_eq!(failed.len(), 1, "{rows:#?}");
        assert_eq!(failed[0]["route"], "broken");
        assert_eq!(failed[0]["_msg"], "/broken/shipped-fail");
        assert_eq!(failed[0]["host"], "shop.test");
        assert_eq!(failed[0]["listener"], "http");
        assert!(
            failed[0]["request_id"]
                .as_str()
                .is_some_and(|id| id.len() == 32)
        );
    }
    // OTLP: each line a log record whose body (the store's _msg) is the JSON line, the
    // header sent with the request.
    let rows = store.find("via:otlp AND _msg:~\"shipped\"", 6).await;
    assert_eq!(rows.len(), 6, "{rows:#?}");
    let failed: Vec<Value> = rows
        .iter()
        .filter_map(|r| serde_json::from_str::<Value>(r["_msg"].as_str()?).ok())
        .filter(|l| l["status"] == 502)
        .collect();
    assert_eq!(failed.len(), 1, "{rows:#?}");
    assert_eq!(failed[0]["route"], "broken");
    // Each record at its line's time.
    for r in &rows {
        let line: Value = serde_json::from_str(r["_msg"].as_str().unwrap()).unwrap();
        let at = |v: &Value| humantime::parse_rfc3339(v.as_str().unwrap()).unwrap();
        assert_eq!(at(&r["_time"]), at(&line["time"]), "{r:#}");
        assert_eq!(r["severity_text"], "INFO", "{r:#}");
    }

    // Bulk lines carry their time as @timestamp (what Elasticsearch sorts by).
    let bulk = store.query("via:bulk AND status:502").await;
    assert!(
        bulk[0]["@timestamp"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z')),
        "{bulk:#?}"
    );
    assert!(bulk[0].get("time").is_none(), "{bulk:#?}");

    for (app, facility) in [("sluice-udp", "16"), ("sluice-tcp", "19")] {
        let rows = store
            .find(&format!("app_name:{app} AND \"shipped\""), 6)
            .await;
        assert_eq!(rows.len(), 6, "{rows:#?}");
        let failed: Vec<&Value> = rows
            .iter()
            .filter(|r| r["_msg"].as_str().unwrap().contains("shipped-fail"))
            .collect();
        assert_eq!(failed.len(), 1, "{rows:#?}");
        // 5xx is a warning (severity 4); the message is the JSON line.
        assert_eq!(failed[0]["severity"], "4", "{rows:#?}");
        assert_eq!(failed[0]["facility"], facility, "{rows:#?}");
        assert_eq!(failed[0]["msg_id"], "access");
        let line: Value = serde_json::from_str(failed[0]["_msg"].as_str().unwrap()).unwrap();
        assert_eq!(
            (line["status"].as_u64(), line["route"].as_str()),
            (Some(502), Some("broken"))
        );
        let ok = rows
            .iter()
            .find(|r| !r["_msg"].as_str().unwrap().contains("fail"))
            .unwrap();
        assert_eq!(ok["severity"], "6");
    }

    let st = status(admin).await;
    for name in ["lines", "bulk", "otlp", "syslog-udp", "syslog-tcp"] {
        let sh = shipper(&st, name);
        assert_eq!(sh["sent"], 6, "{sh:#}");
        assert_eq!(
            (sh["dropped"].as_u64(), sh["rejected"].as_u64()),
            (Some(0), Some(0)),
            "{sh:#}"
        );
    }
    let metrics = http1_get(admin, "admin", "/metrics").await.body;
    assert!(
        metrics.contains("sluice_log_ship_lines_total{shipper=\"bulk\",outcome=\"sent\"} 6"),
        "{metrics}"
    );
}

/// HTTPS to the store: its certificate checked against `ca` (and its name); without the CA,
/// every send fails verification and is counted, and the requests are answered all the same.
#[tokio::test]
async fn lines_go_to_an_https_store_that_proves_itself() {
    let store = Store::start_tls().await;
    let (https, _) = store.https.clone().unwrap();
    let ca = store.dir.path().join("ca.crt");
    let origin = Origin::start("o").await;
    let gw = gateway(
        origin.addr,
        &format!(
            r#"
[[log.ship]]
name = "trusted"
url = "https://localhost:{port}/insert/jsonline?_time_field=time&_msg_field=path"
ca = "{ca}"
headers = {{ "VL-Extra-Fields" = "via=https" }}
flush = "100ms"
[[log.ship]]
name = "untrusted"
url = "https://localhost:{port}/insert/jsonline?_time_field=time&_msg_field=path"
headers = {{ "VL-Extra-Fields" = "via=unverified" }}
flush = "100ms"
"#,
            port = https.port(),
            ca = ca.display()
        ),
    )
    .await;
    let (admin, _admin_task) = admin_for(&gw).await;
    assert_eq!(
        http1_get(gw.addr("http"), "shop.test", "/echo/over-tls")
            .await
            .status,
        200
    );
    let rows = store.find("via:https AND _msg:\"/echo/over-tls\"", 1).await;
    assert_eq!(rows[0]["status"], "200", "{rows:#?}");
    let mut untrusted = Value::Null;
    for _ in 0..100 {
        untrusted = shipper(&status(admin).await, "untrusted").clone();
        if untrusted["failures"].as_u64() > Some(0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(untrusted["failures"].as_u64() > Some(0), "{untrusted:#}");
    assert!(
        untrusted["last_error"]
            .as_str()
            .unwrap()
            .contains("certificate"),
        "{untrusted:#}"
    );
    assert_eq!(untrusted["sent"], 0);
    assert!(store.query("via:unverified").await.is_empty());
}

/// The store stops: requests are answered as before, sends fail and are counted, lines past
/// the queue are dropped and counted; the store comes back on the same address and the lines
/// logged since reach it.
#[tokio::test]
async fn a_log_store_down_and_back_costs_no_request_and_shipping_resumes() {
    let mut store = Store::start().await;
    let origin = Origin::start("o").await;
    let gw = gateway(
        origin.addr,
        &format!(
            r#"
[[log.ship]]
name = "lines"
url = "http://{}/insert/jsonline?_time_field=time&_msg_field=path"
flush = "50ms"
queue = "64k"
timeout = "1s"
"#,
            store.http
        ),
    )
    .await;
    let (admin, _admin_task) = admin_for(&gw).await;
    let at = gw.addr("http");
    assert_eq!(http1_get(at, "shop.test", "/echo/before").await.status, 200);
    store.find("_msg:\"/echo/before\"", 1).await;

    store.stop();
    // More lines than the 64 KiB queue holds (each is about 450 bytes): all answered.
    let mut sender = http1_sender(at).await;
    for i in 0..400 {
        let req = http::Request::get(format!("/echo/while-down-{i}"))
            .header("host", "shop.test")
            .body(http_body_util::Full::new(bytes::Bytes::new()))
            .unwrap();
        sender.ready().await.unwrap();
        let got = collect(sender.send_request(req).await.unwrap()).await;
        assert_eq!(got.status, 200);
    }
    let mut down = Value::Null;
    for _ in 0..100 {
        down = shipper(&status(admin).await, "lines").clone();
        if down["failures"].as_u64() > Some(0) && down["dropped"].as_u64() > Some(0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(down["failures"].as_u64() > Some(0), "{down:#}");
    assert!(down["dropped"].as_u64() > Some(0), "{down:#}");
    assert!(down["last_error"].as_str().is_some(), "{down:#}");
    assert!(down["queued_bytes"].as_u64() <= Some(64 * 1024), "{down:#}");

    store.run().await;
    // The next try comes within the back-off (at most 30 s): the held batch and the queue go.
    let restarted = std::time::Instant::now();
    let mut up = Value::Null;
    while restarted.elapsed() < Duration::from_secs(45) {
        up = shipper(&status(admin).await, "lines").clone();
        if up["queued_bytes"] == 0 && up["last_error"].is_null() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        up["last_error"].is_null(),
        "not shipping since the store came back: {up:#}"
    );
    // Lines logged now find an empty queue (while it was full, they were dropped).
    assert_eq!(http1_get(at, "shop.test", "/echo/after").await.status, 200);
    store.find("_msg:\"/echo/after\"", 1).await;
    let kept = store.find("_msg:~\"while-down\"", 1).await.len();
    let up = shipper(&status(admin).await, "lines").clone();
    assert_eq!(
        up["sent"].as_u64().unwrap() + up["dropped"].as_u64().unwrap(),
        402,
        "every line is either sent or counted as dropped: {up:#}"
    );
    assert!(
        kept >= 1 && (kept as u64) < 400,
        "{kept} of 400 kept: {up:#}"
    );
}

/// `/api/v1/requests` answers from memory: by status class, route, time and request ID,
/// slowest first; the bound holds under a flood of requests.
#[tokio::test]
async fn recent_requests_are_searchable_on_the_admin_api_within_their_bound() {
    let origin = Origin::start("o").await;
    let gw = gateway(origin.addr, "request_log = \"256k\"").await;
    let (admin, _admin_task) = admin_for(&gw).await;
    let at = gw.addr("http");
    assert_eq!(http1_get(at, "shop.test", "/slow?ms=300").await.status, 200);
    for i in 0..20 {
        assert_eq!(
            http1_get(at, "shop.test", &format!("/echo/{i}"))
                .await
                .status,
            200
        );
    }
    for _ in 0..3 {
        assert_eq!(http1_get(at, "shop.test", "/broken/x").await.status, 502);
    }
    let api = |q: &'static str| async move {
        let got = http1_get(admin, "admin", &format!("/api/v1/requests?{q}")).await;
        let v: Value = serde_json::from_str(&got.body).unwrap();
        (got.status, v)
    };
    let (code, v) = api("status=5xx&route=broken&since=1m").await;
    assert_eq!(code, 200);
    assert_eq!(v["matched"], 3, "{v:#}");
    assert!(
        v["requests"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["status"] == 502 && r["path"] == "/broken/x")
    );
    let (_, v) = api("sort=slowest&limit=1").await;
    assert_eq!(v["requests"][0]["path"], "/slow?ms=300", "{v:#}");
    assert!(v["requests"][0]["duration_ms"].as_f64() >= Some(300.0));
    let (_, v) = api("route=all&limit=2").await;
    assert_eq!(v["matched"], 21);
    assert_eq!(v["requests"][0]["path"], "/echo/19", "newest first: {v:#}");
    let id = v["requests"][0]["request_id"].as_str().unwrap().to_owned();
    let got = http1_get(admin, "admin", &format!("/api/v1/requests?request_id={id}")).await;
    assert!(got.body.contains("\"matched\":1"), "{}", got.body);
    let (code, v) = api("fleet=1").await;
    assert_eq!(code, 400, "not in fleet mode: {v:#}");
    assert!(v["error"].as_str().unwrap().contains("fleet mode"), "{v:#}");
    let (code, v) = api("status=5x").await;
    assert_eq!(code, 400);
    assert!(v["error"].as_str().unwrap().contains("status"), "{v:#}");

    // A flood: far more requests than 256 KiB holds; the newest are kept, within the bound.
    let mut sender = http1_sender(at).await;
    for i in 0..3000 {
        let req = http::Request::get(format!("/echo/flood-{i}"))
            .header("host", "shop.test")
            .body(http_body_util::Full::new(bytes::Bytes::new()))
            .unwrap();
        sender.ready().await.unwrap();
        assert_eq!(
            collect(sender.send_request(req).await.unwrap())
                .await
                .status,
            200
        );
    }
    let rl = status(admin).await["request_log"].clone();
    assert!(rl["bytes"].as_u64() <= Some(256 * 1024), "{rl:#}");
    assert!(rl["evicted_total"].as_u64() > Some(0), "{rl:#}");
    let (_, v) = api("limit=1").await;
    assert_eq!(v["requests"][0]["path"], "/echo/flood-2999");
}

/// The dashboard's "Recent requests" view in headless Chromium: the filters from the page's
/// address, the rows the API answered, and trace IDs linked to the trace UI.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_lists_recent_requests_with_filters_and_trace_links() {
    let origin = Origin::start("o").await;
    // Spans go nowhere (no collector listens): the trace IDs are what is shown.
    let gw = gateway(
        origin.addr,
        &format!(
            "[tracing]\nendpoint = \"http://{}\"\nsample_percent = 100\ntrace_url = \"http://traces.example/trace/{{trace_id}}\"",
            dead_port().await
        ),
    )
    .await;
    let (admin, _admin_task) = admin_for(&gw).await;
    let at = gw.addr("http");
    for i in 0..4 {
        assert_eq!(
            http1_get(at, "shop.test", &format!("/echo/fine-{i}"))
                .await
                .status,
            200
        );
    }
    for _ in 0..2 {
        assert_eq!(
            http1_get(at, "shop.test", "/broken/dashboard").await.status,
            502
        );
    }
    let api: Value = serde_json::from_str(
        &http1_get(admin, "admin", "/api/v1/requests?status=5xx")
            .await
            .body,
    )
    .unwrap();
    let trace = api["requests"][0]["trace_id"].as_str().unwrap().to_owned();

    let url = format!("http://127.0.0.1:{}/?status=5xx&route=broken", admin.port());
    let (dom, log) = headless_chromium(
        &url,
        &[
            "--virtual-time-budget=3500".to_owned(),
            "--dump-dom".to_owned(),
        ],
    )
    .await;
    let console: Vec<&str> = log.lines().filter(|l| l.contains(":CONSOLE")).collect();
    assert!(console.is_empty(), "the page logged or threw: {console:#?}");
    let table = &dom[dom.find("id=\"requests\"").expect("the requests table")..];
    let table = &table[..table.find("</table>").unwrap()];
    assert_eq!(
        table.matches(">/broken/dashboard</td>").count(),
        2,
        "{table}"
    );
    assert!(!table.contains("/echo/fine"), "filtered by status: {table}");
    assert!(
        table.contains(&format!("href=\"http://traces.example/trace/{trace}\"")),
        "{table}"
    );
    assert!(dom.contains("2 matching of 6 kept"), "{dom}");
    // And unfiltered, every request is listed.
    let (dom, _) = headless_chromium(
        &format!("http://127.0.0.1:{}/?since=", admin.port()),
        &[
            "--virtual-time-budget=3500".to_owned(),
            "--dump-dom".to_owned(),
        ],
    )
    .await;
    assert!(dom.contains("6 matching of 6 kept"), "{dom}");
}

/// Debian's rsyslog on 127.0.0.1 taking syslog over TLS (RFC 5425, its GnuTLS driver) from
/// clients with a certificate its CA signed, writing what it gets to a file.
struct Rsyslog {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl Rsyslog {
    async fn start() -> Rsyslog {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        issue(d, "ca", "syslog test CA", None, &[]);
        let ca = boring::x509::X509::from_pem(&std::fs::read(d.join("ca.crt")).unwrap()).unwrap();
        let key =
            boring::pkey::PKey::private_key_from_pem(&std::fs::read(d.join("ca.key")).unwrap())
                .unwrap();
        issue(d, "server", "localhost", Some((&ca, &key)), &["localhost"]);
        issue(d, "client", "sluice", Some((&ca, &key)), &[]);
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(d.join("client.key"), std::fs::Permissions::from_mode(0o600))
            .unwrap();
        let port = free_port();
        let p = d.display();
        std::fs::write(
            d.join("rsyslog.conf"),
            format!(
                "global(workDirectory=\"{p}\" DefaultNetstreamDriver=\"gtls\" \
                 DefaultNetstreamDriverCAFile=\"{p}/ca.crt\" DefaultNetstreamDriverCertFile=\"{p}/server.crt\" \
                 DefaultNetstreamDriverKeyFile=\"{p}/server.key\")\n\
                 module(load=\"imtcp\" StreamDriver.Name=\"gtls\" StreamDriver.Mode=\"1\" StreamDriver.AuthMode=\"x509/certvalid\")\n\
                 input(type=\"imtcp\" address=\"127.0.0.1\" port=\"{port}\")\n\
                 template(name=\"raw\" type=\"string\" string=\"%APP-NAME% %MSGID% %msg%\\n\")\n\
                 *.* action(type=\"omfile\" file=\"{p}/received.log\" template=\"raw\")\n"
            ),
        )
        .unwrap();
        let rsyslogd = ["/usr/sbin/rsyslogd", "rsyslogd"]
            .into_iter()
            .find(|p| std::process::Command::new(p).arg("-v").output().is_ok())
            .expect("rsyslogd is needed (scripts/test-deps installs Debian's rsyslog and rsyslog-gnutls)");
        let child = std::process::Command::new(rsyslogd)
            .arg("-n")
            .arg("-f")
            .arg(d.join("rsyslog.conf"))
            .arg("-i")
            .arg(d.join("rsyslog.pid"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(d.join("rsyslog.log")).unwrap())
            .spawn()
            .expect("rsyslogd starts");
        let r = Rsyslog { child, port, dir };
        for _ in 0..100 {
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                return r;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!(
            "rsyslogd did not listen within 5 s: {}",
            std::fs::read_to_string(r.dir.path().join("rsyslog.log")).unwrap_or_default()
        );
    }

    fn received(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("received.log")).unwrap_or_default()
    }
}

impl Drop for Rsyslog {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Syslog over TLS by host name: rsyslog gets every line from the shipper that presents a
/// client certificate (its own checked against the configured CA and the name `localhost`),
/// and none from one without.
#[tokio::test]
async fn lines_reach_rsyslog_over_tls_with_a_client_certificate() {
    let rsyslog = Rsyslog::start().await;
    let d = rsyslog.dir.path().display();
    let origin = Origin::start("o").await;
    let gw = gateway(
        origin.addr,
        &format!(
            r#"
[[log.ship]]
name = "tls"
url = "tls://localhost:{port}"
ca = "{d}/ca.crt"
client_cert = "{d}/client.crt"
client_key = "{d}/client.key"
app_name = "sluice-tls"
flush = "100ms"
[[log.ship]]
name = "no-cert"
url = "tls://localhost:{port}"
ca = "{d}/ca.crt"
app_name = "sluice-nocert"
flush = "100ms"
"#,
            port = rsyslog.port
        ),
    )
    .await;
    let (admin, _admin_task) = admin_for(&gw).await;
    for i in 0..3 {
        let got = http1_get(gw.addr("http"), "shop.test", &format!("/echo/tls-{i}")).await;
        assert_eq!(got.status, 200);
    }
    let mut lines = Vec::new();
    for _ in 0..100 {
        lines = rsyslog
            .received()
            .lines()
            .filter(|l| l.starts_with("sluice-tls access "))
            .map(str::to_owned)
            .collect();
        if lines.len() >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(lines.len(), 3, "{}", rsyslog.received());
    let first: Value =
        serde_json::from_str(lines[0].trim_start_matches("sluice-tls access ").trim()).unwrap();
    assert!(
        first["path"].as_str().unwrap().starts_with("/echo/tls-"),
        "{first}"
    );
    assert!(!rsyslog.received().contains("sluice-nocert"));
    let st = status(admin).await;
    assert_eq!(shipper(&st, "tls")["sent"], 3, "{st:#}");
    assert_eq!(
        shipper(&st, "tls")["target"],
        format!("tls://localhost:{}", rsyslog.port)
    );
}

/// An OpenTelemetry collector (Jaeger v2's build of it) with one logs pipeline: OTLP/gRPC in,
/// OTLP/HTTP out to `store`'s OpenTelemetry input.
struct Collector {
    child: Child,
    grpc: u16,
    _dir: tempfile::TempDir,
}

impl Collector {
    async fn start(store: &Store) -> Collector {
        let dir = tempfile::tempdir().unwrap();
        let grpc = free_port();
        let config = format!(
            "service:\n  pipelines:\n    logs:\n      receivers: [otlp]\n      exporters: [otlphttp]\n  \
             telemetry:\n    metrics:\n      level: none\n    logs:\n      level: warn\n\
             receivers:\n  otlp:\n    protocols:\n      grpc:\n        endpoint: 127.0.0.1:{grpc}\n\
             exporters:\n  otlphttp:\n    logs_endpoint: http://{}/insert/opentelemetry/v1/logs\n    \
             headers:\n      VL-Extra-Fields: via=collector\n",
            store.http
        );
        std::fs::write(dir.path().join("collector.yaml"), config).unwrap();
        let child = std::process::Command::new(tool("jaeger"))
            .arg("--config")
            .arg(dir.path().join("collector.yaml"))
            .current_dir(dir.path())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("collector.log")).unwrap())
            .spawn()
            .expect("the collector starts");
        let c = Collector {
            child,
            grpc,
            _dir: dir,
        };
        for _ in 0..300 {
            if tokio::net::TcpStream::connect(("127.0.0.1", grpc))
                .await
                .is_ok()
            {
                return c;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("the collector did not listen within 30 s");
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// OTLP logs over gRPC: the lines reach an OpenTelemetry collector's `LogsService`, which
/// passes them on to the store, where LogsQL finds them with the line as the message.
#[tokio::test]
async fn lines_reach_an_opentelemetry_collector_over_otlp_grpc() {
    let store = Store::start().await;
    let collector = Collector::start(&store).await;
    let origin = Origin::start("o").await;
    let gw = gateway(
        origin.addr,
        &format!(
            r#"
[[log.ship]]
name = "otlp-grpc"
url = "http://127.0.0.1:{}"
format = "otlp"
protocol = "grpc"
headers = {{ "x-api-key" = "k" }}
flush = "100ms"
"#,
            collector.grpc
        ),
    )
    .await;
    let (admin, _admin_task) = admin_for(&gw).await;
    for i in 0..3 {
        let got = http1_get(gw.addr("http"), "shop.test", &format!("/echo/grpc-{i}")).await;
        assert_eq!(got.status, 200);
    }
    let rows = store.find("via:collector AND _msg:~\"grpc-\"", 3).await;
    assert_eq!(rows.len(), 3, "{rows:#?}");
    let line: Value = serde_json::from_str(rows[0]["_msg"].as_str().unwrap()).unwrap();
    assert!(
        line["path"].as_str().unwrap().starts_with("/echo/grpc-"),
        "{line}"
    );
    let st = status(admin).await;
    assert_eq!(shipper(&st, "otlp-grpc")["sent"], 3, "{st:#}");
}
