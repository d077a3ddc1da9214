//! `[tracing]` end to end against a real collector: Jaeger v2 (built by `scripts/deps`),
//! started once for the test that needs it, on 127.0.0.1 and free ports, stopped by PID.
//! Requests go through Sluice over TLS; the origin shows what context it received; Jaeger's
//! query API shows the spans, their parents and attributes, and the TLS handshake's span.

use crate::support::*;
use bytes::Bytes;
use http_body_util::Full;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use sluice_tls::selfsigned::KeyKind;
use std::net::SocketAddr;
use std::process::{Child, Stdio};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// A Jaeger v2 with in-memory storage: OTLP/gRPC and OTLP/HTTP over mutual TLS in (its
/// certificate for `localhost` and the client's from `ca.crt` in its directory), its query
/// API out.
struct Jaeger {
    child: Child,
    otlp: u16,
    otlp_https: u16,
    query: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Jaeger {
    async fn start() -> Jaeger {
        let dir = tempfile::tempdir().unwrap();
        let (otlp, query, query_grpc) = (free_port(), free_port(), free_port());
        let otlp_https = free_port();
        let d = dir.path();
        issue(d, "ca", "collector test CA", None, &[]);
        let ca = boring::x509::X509::from_pem(&std::fs::read(d.join("ca.crt")).unwrap()).unwrap();
        let ca_key =
            boring::pkey::PKey::private_key_from_pem(&std::fs::read(d.join("ca.key")).unwrap())
                .unwrap();
        issue(
            d,
            "collector",
            "localhost",
            Some((&ca, &ca_key)),
            &["localhost"],
        );
        issue(d, "client", "sluice", Some((&ca, &ca_key)), &[]);
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(d.join("client.key"), std::fs::Permissions::from_mode(0o600))
            .unwrap();
        let tls_dir = d.display();
        // Every listener on 127.0.0.1 (Jaeger's defaults bind every interface), no
        // self-metrics port (its default 8888 would clash between test binaries).
        let config = format!(
            r#"
service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_query:
    storage:
      traces: mem
    http:
      endpoint: 127.0.0.1:{query}
    grpc:
      endpoint: 127.0.0.1:{query_grpc}
  jaeger_storage:
    backends:
      mem:
        memory:
          max_traces: 10000
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:{otlp}
      http:
        endpoint: 127.0.0.1:{otlp_https}
        tls:
          cert_file: {tls_dir}/collector.crt
          key_file: {tls_dir}/collector.key
          client_ca_file: {tls_dir}/ca.crt
processors:
  batch:
    timeout: 50ms
exporters:
  jaeger_storage_exporter:
    trace_storage: mem
"#
        );
        let path = dir.path().join("jaeger.yaml");
        std::fs::write(&path, config).unwrap();
        let child = std::process::Command::new(tool("jaeger"))
            .arg("--config")
            .arg(&path)
            .current_dir(dir.path())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("jaeger.log")).unwrap())
            .spawn()
            .expect("Jaeger starts");
        let query: SocketAddr = format!("127.0.0.1:{query}").parse().unwrap();
        let j = Jaeger {
            child,
            otlp,
            otlp_https,
            query,
            _dir: dir,
        };
        for _ in 0..300 {
            let up = tokio::net::TcpStream::connect(("127.0.0.1", otlp))
                .await
                .is_ok()
                && tokio::net::TcpStream::connect(("127.0.0.1", otlp_https))
                    .await
                    .is_ok()
                && tokio::net::TcpStream::connect(query).await.is_ok();
            if up {
                return j;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("Jaeger did not listen within 30 s");
    }

    /// The trace's spans, once Jaeger has them all (`want` of them); `None` if it has none.
    async fn spans(&self, trace_id: &str, want: usize) -> Option<Vec<Value>> {
        for _ in 0..100 {
            let got = http1_get(self.query, "jaeger", &format!("/api/traces/{trace_id}")).await;
            if got.status == 200 {
                let v: Value = serde_json::from_str(&got.body).unwrap();
                let spans = v["data"][0]["spans"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                if spans.len() >= want {
                    return Some(spans);
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        None
    }
}

impl Drop for Jaeger {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn tag<'a>(span: &'a Value, key: &str) -> Option<&'a Value> {
    span["tags"]
        .as_array()?
        .iter()
        .find(|t| t["key"] == key)
        .map(|t| &t["value"])
}

fn parent(span: &Value) -> Option<&str> {
    span["references"]
        .as_array()?
        .iter()
        .find(|r| r["refType"] == "CHILD_OF")
        .and_then(|r| r["spanID"].as_str())
}

fn named<'a>(spans: &'a [Value], name: &str) -> Vec<&'a Value> {
    spans
        .iter()
        .filter(|s| s["operationName"] == name)
        .collect()
}

/// The `traceparent` the origin received, as (trace, parent span, flags).
fn received(got: &Got) -> (String, String, String) {
    let v: Value = serde_json::from_str(&got.body).unwrap();
    let tp = v["headers"]["traceparent"]
        .as_str()
        .unwrap_or_else(|| panic!("the origin got no traceparent: {}", got.body));
    let f: Vec<&str> = tp.split('-').collect();
    assert_eq!((f.len(), f[0]), (4, "00"), "{tp}");
    (f[1].to_owned(), f[2].to_owned(), f[3].to_owned())
}

async fn gateway(
    dir: tempfile::TempDir,
    origin: SocketAddr,
    shadow: SocketAddr,
    tracing: &str,
) -> TestGateway {
    write_cert(dir.path(), "local", KeyKind::EcdsaP256, &["localhost"]);
    TestGateway::start(
        &format!(
            r#"
{tracing}
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
[[upstream]]
name = "shadow"
servers = [{{ address = "{shadow}" }}]
[[route]]
name = "all"
upstream = "o"
[[route]]
name = "mirrored"
path_prefix = "/m/"
strip_prefix = "/m"
upstream = "o"
[[route.mirror]]
upstream = "shadow"
"#
        ),
        dir,
    )
    .await
}

/// Requests on one TLS keep-alive connection: (path, extra header) each.
async fn over_tls(at: SocketAddr, requests: &[(&str, Option<(&str, &str)>)]) -> Vec<Got> {
    let opts = ClientOpts {
        sni: Some("localhost"),
        ..ClientOpts::default()
    };
    let tls = tls_connect(at, &opts).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls.stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut out = Vec::new();
    for (path, header) in requests {
        let mut req = http::Request::get(*path)
            .header("host", "localhost")
            .header("user-agent", "trace-test/1");
        if let Some((k, v)) = header {
            req = req.header(*k, *v);
        }
        sender.ready().await.unwrap();
        out.push(
            collect(
                sender
                    .send_request(req.body(Full::new(Bytes::new())).unwrap())
                    .await
                    .unwrap(),
            )
            .await,
        );
    }
    out
}

/// Sends the spans queued (off the event loop: the flush blocks on the export).
async fn flush(gw: &TestGateway) {
    let tracer = gw.gateway().tracer().unwrap();
    tokio::task::spawn_blocking(move || tracer.flush())
        .await
        .unwrap();
}

const CALLER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";

/// Spans in Jaeger: a caller's context joined (same trace, the caller's span as parent, the
/// origin told the gateway's attempt as its parent), one started where none came, none
/// recorded for a caller that did not sample; attributes, the handshake, B3, a mirror copy.
#[tokio::test]
async fn spans_reach_jaeger_with_their_parents_attributes_and_the_handshake() {
    let jaeger = Jaeger::start().await;
    let origin = Origin::start("o").await;
    let shadow = Origin::start("shadow").await;
    let gw = gateway(
        tempfile::tempdir().unwrap(),
        origin.addr,
        shadow.addr,
        &format!(
            "[tracing]\nendpoint = \"http://127.0.0.1:{}\"\nservice_name = \"sluice-e2e\"\nsample_percent = 100",
            jaeger.otlp
        ),
    )
    .await;
    let at = gw.addr("https");
    let sampled = format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01");
    let unsampled = "00-11111111111111111111111111111111-2222222222222222-00";
    let b3 = "80f198ee56343ba864fe8b2a57d3eff7-e457b5a2e4d86bd1-1";
    let got = over_tls(
        at,
        &[
            ("/headers?x=1", Some(("traceparent", sampled.as_str()))),
            ("/headers", None),
            ("/headers", Some(("traceparent", unsampled))),
            ("/headers", Some(("b3", b3))),
            (
                "/m/headers",
                Some((
                    "traceparent",
                    "00-33333333333333333333333333333333-4444444444444444-01",
                )),
            ),
        ],
    )
    .await;
    assert!(got.iter().all(|g| g.status == 200));

    // Joined: the caller's trace, a new parent for the origin, sampled.
    let (trace, origin_parent, flags) = received(&got[0]);
    assert_eq!((trace.as_str(), flags.as_str()), (CALLER_TRACE, "01"));
    assert_ne!(origin_parent, CALLER_SPAN);
    // Started here: a new trace, sampled at 100%.
    let (new_trace, _, new_flags) = received(&got[1]);
    assert_ne!(new_trace, CALLER_TRACE);
    assert_eq!(new_flags, "01");
    // The caller did not sample: passed on unsampled, same trace.
    let (t, p, f) = received(&got[2]);
    assert_eq!(
        (t.as_str(), f.as_str()),
        ("11111111111111111111111111111111", "00")
    );
    assert_ne!(p, "2222222222222222");
    // B3 in: the same trace in both formats out.
    let (t, p, _) = received(&got[3]);
    assert_eq!(t, "80f198ee56343ba864fe8b2a57d3eff7");
    let v: Value = serde_json::from_str(&got[3].body).unwrap();
    assert_eq!(
        v["headers"]["b3"].as_str().unwrap(),
        format!("80f198ee56343ba864fe8b2a57d3eff7-{p}-1")
    );

    flush(&gw).await;
    let spans = jaeger
        .spans(CALLER_TRACE, 3)
        .await
        .expect("the joined trace in Jaeger");
    let server = named(&spans, "GET all");
    assert_eq!(server.len(), 1, "{spans:#?}");
    let server = server[0];
    let server_id = server["spanID"].as_str().unwrap();
    assert_eq!(parent(server), Some(CALLER_SPAN));
    for (k, want) in [
        ("span.kind", Value::from("server")),
        ("http.request.method", "GET".into()),
        ("url.path", "/headers".into()),
        ("url.query", "x=1".into()),
        ("url.scheme", "https".into()),
        ("http.route", "all".into()),
        ("server.address", "localhost".into()),
        ("client.address", "127.0.0.1".into()),
        ("network.protocol.version", "1.1".into()),
        ("user_agent.original", "trace-test/1".into()),
        ("http.response.status_code", 200.into()),
    ] {
        assert_eq!(tag(server, k), Some(&want), "{k} in {server:#}");
    }
    assert!(tag(server, "server.port").is_some());
    // The attempt: a CLIENT span under it, the origin's parent.
    let upstream = named(&spans, "upstream");
    assert_eq!(upstream.len(), 1);
    assert_eq!(upstream[0]["spanID"].as_str(), Some(origin_parent.as_str()));
    assert_eq!(parent(upstream[0]), Some(server_id));
    assert_eq!(tag(upstream[0], "span.kind"), Some(&"client".into()));
    assert_eq!(tag(upstream[0], "sluice.upstream"), Some(&"o".into()));
    assert_eq!(
        tag(upstream[0], "server.port"),
        Some(&i64::from(origin.addr.port()).into())
    );
    // The connection's handshake, on its first request only.
    let hs = named(&spans, "TLS handshake");
    assert_eq!(hs.len(), 1);
    assert_eq!(parent(hs[0]), Some(server_id));
    assert_eq!(tag(hs[0], "tls.resumed"), Some(&false.into()));
    assert_eq!(tag(hs[0], "sluice.handshake.kind"), Some(&"full".into()));
    assert_eq!(tag(hs[0], "tls.protocol.version"), Some(&"1.3".into()));
    // Its signature: the engine that made it, and how long it waited and ran there.
    assert_eq!(
        tag(hs[0], "sluice.offload.engine"),
        Some(&"pool".into()),
        "{:#}",
        hs[0]
    );
    for t in ["sluice.offload.queued_us", "sluice.offload.engine_us"] {
        assert!(tag(hs[0], t).is_some_and(Value::is_i64), "{t}: {:#}", hs[0]);
    }
    assert!(
        tag(hs[0], "sluice.offload.fallbacks").is_none(),
        "{:#}",
        hs[0]
    );
    let service = spans[0]["processID"].as_str().unwrap();
    let v: Value = serde_json::from_str(
        &http1_get(
            jaeger.query,
            "jaeger",
            &format!("/api/traces/{CALLER_TRACE}"),
        )
        .await
        .body,
    )
    .unwrap();
    assert_eq!(
        v["data"][0]["processes"][service]["serviceName"],
        "sluice-e2e"
    );

    // The trace started here: a root server span, no handshake span (already traced).
    let spans = jaeger
        .spans(&new_trace, 2)
        .await
        .expect("the new trace in Jaeger");
    let root = named(&spans, "GET all");
    assert_eq!((root.len(), parent(root[0])), (1, None));
    assert!(named(&spans, "TLS handshake").is_empty());

    // The mirrored request: a `mirror` span beside the attempt.
    let spans = jaeger
        .spans("33333333333333333333333333333333", 3)
        .await
        .expect("the mirrored trace in Jaeger");
    let server = named(&spans, "GET mirrored");
    let mirror = named(&spans, "mirror");
    assert_eq!((server.len(), mirror.len()), (1, 1), "{spans:#?}");
    assert_eq!(parent(mirror[0]), server[0]["spanID"].as_str());
    assert_eq!(tag(mirror[0], "sluice.upstream"), Some(&"shadow".into()));
    assert_eq!(
        tag(mirror[0], "http.response.status_code"),
        Some(&200.into())
    );

    // Not sampled by its caller: nothing recorded.
    assert!(
        jaeger
            .spans("11111111111111111111111111111111", 1)
            .await
            .is_none()
    );
    let c = gw.gateway().trace_counters();
    assert!(c.exported.load(Ordering::Relaxed) >= 10);
    assert_eq!(c.dropped_queue_full.load(Ordering::Relaxed), 0);
    assert_eq!(c.dropped_export_failed.load(Ordering::Relaxed), 0);
}

/// A collector that is down: every request is answered as before; the spans that could not
/// go are counted.
#[tokio::test]
async fn with_the_collector_down_requests_are_unaffected_and_drops_counted() {
    let origin = Origin::start("o").await;
    let dead = dead_port().await;
    let gw = gateway(
        tempfile::tempdir().unwrap(),
        origin.addr,
        origin.addr,
        &format!(
            "[tracing]\nendpoint = \"http://{dead}\"\nsample_percent = 100\nexport_timeout = \"1s\""
        ),
    )
    .await;
    let reqs: Vec<(&str, Option<(&str, &str)>)> = (0..20).map(|_| ("/whoami", None)).collect();
    let got = over_tls(gw.addr("https"), &reqs).await;
    assert!(got.iter().all(|g| g.status == 200 && g.body == "o"));
    flush(&gw).await;
    let c = gw.gateway().trace_counters();
    let counts = [
        &c.exported,
        &c.dropped_queue_full,
        &c.dropped_export_failed,
        &c.export_errors,
    ]
    .map(|n| n.load(Ordering::Relaxed));
    assert!(
        counts[2] >= 20,
        "exported, queue full, export failed, errors: {counts:?}"
    );
    assert!(c.export_errors.load(Ordering::Relaxed) >= 1);
    assert_eq!(c.exported.load(Ordering::Relaxed), 0);
}

/// Without `[tracing]`, a caller's context reaches the origin as it came.
#[tokio::test]
async fn without_tracing_a_traceparent_passes_through_unchanged() {
    let origin = Origin::start("o").await;
    let gw = gateway(tempfile::tempdir().unwrap(), origin.addr, origin.addr, "").await;
    let tp = format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01");
    let got = over_tls(
        gw.addr("https"),
        &[("/headers", Some(("traceparent", tp.as_str())))],
    )
    .await;
    assert_eq!(
        received(&got[0]),
        (
            CALLER_TRACE.to_owned(),
            CALLER_SPAN.to_owned(),
            "01".to_owned()
        )
    );
    assert!(gw.gateway().tracer().is_none());
}

/// OTLP over HTTP/protobuf to a collector that asks for a client certificate: the span
/// reaches Jaeger through its HTTPS receiver, the collector's certificate checked against the
/// configured CA, Sluice's presented, a header sent with it.
#[tokio::test]
async fn spans_reach_jaeger_over_otlp_http_with_mutual_tls() {
    let jaeger = Jaeger::start().await;
    let origin = Origin::start("o").await;
    let d = jaeger._dir.path().display();
    let gw = gateway(
        tempfile::tempdir().unwrap(),
        origin.addr,
        origin.addr,
        &format!(
            "[tracing]\nendpoint = \"https://localhost:{}\"\nprotocol = \"http/protobuf\"\n\
             ca = \"{d}/ca.crt\"\nclient_cert = \"{d}/client.crt\"\nclient_key = \"{d}/client.key\"\n\
             headers = {{ \"x-api-key\" = \"secret-key\" }}\nservice_name = \"sluice-otlp-http\"\nsample_percent = 100",
            jaeger.otlp_https
        ),
    )
    .await;
    let got = over_tls(gw.addr("https"), &[("/headers", None)]).await;
    assert_eq!(got[0].status, 200);
    let (trace, _, _) = received(&got[0]);
    flush(&gw).await;
    let spans = jaeger
        .spans(&trace, 2)
        .await
        .expect("the spans reached Jaeger over OTLP/HTTP");
    assert!(spans.iter().all(|s| s["traceID"] == trace), "{spans:#?}");
}
