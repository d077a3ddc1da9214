//! The export path against an in-process OTLP/gRPC receiver (tonic and `opentelemetry-proto`'s
//! generated service): what the gateway records arrives whole, what the collector refuses is
//! counted, and the queue's bound holds. The end-to-end tests do the same against Jaeger.

use super::*;
use crate::{SpanKind, Tracer};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTracePartialSuccess, ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::trace::v1::Span as ProtoSpan;
use sluice_config::TracingSettings;
use std::time::SystemTime;

/// Keeps what it receives; rejects one span of each request when `reject` is set.
#[derive(Default, Clone)]
struct Receiver {
    got: Arc<Mutex<Vec<ExportTraceServiceRequest>>>,
    reject: bool,
}

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.got.lock().unwrap().push(request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: self.reject.then(|| ExportTracePartialSuccess {
                rejected_spans: 1,
                error_message: "one too many".into(),
            }),
        }))
    }
}

async fn receiver(reject: bool) -> (Receiver, String) {
    let r = Receiver {
        reject,
        ..Receiver::default()
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let service = TraceServiceServer::new(r.clone());
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    (r, format!("http://{addr}"))
}

fn tracer(endpoint: String) -> Tracer {
    let settings = TracingSettings {
        endpoint,
        sample_ratio: 1.0,
        service_name: "edge-7".into(),
        ..TracingSettings::default()
    };
    Tracer::start(&settings, Arc::default()).unwrap()
}

async fn flush(t: &Arc<Tracer>) {
    let t = t.clone();
    tokio::task::spawn_blocking(move || t.flush())
        .await
        .unwrap();
}

fn spans(r: &Receiver) -> Vec<ProtoSpan> {
    let got = r.got.lock().unwrap();
    got.iter()
        .flat_map(|req| &req.resource_spans)
        .flat_map(|rs| &rs.scope_spans)
        .flat_map(|ss| ss.spans.clone())
        .collect()
}

fn attr(s: &ProtoSpan, key: &str) -> Option<Any> {
    s.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.clone()?.value)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_reach_the_collector_with_their_parents_and_attributes() {
    let (r, endpoint) = receiver(false).await;
    let t = Arc::new(tracer(endpoint));
    let mut h = http::HeaderMap::new();
    h.insert(
        "traceparent",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
            .parse()
            .unwrap(),
    );
    let mut server = t.server(&h, "GET", SystemTime::now());
    server
        .recording()
        .unwrap()
        .str("url.path", "/api/x")
        .int("server.port", 8443)
        .display("client.address", std::net::Ipv4Addr::LOCALHOST);
    server.recording().unwrap().rename("GET api");
    let mut attempt = server.child("upstream", SpanKind::Client, None).unwrap();
    attempt.str("sluice.upstream", "o");
    attempt.fail("connect_refused");
    let attempt_id = attempt.span_id();
    attempt.end();
    // A span dropped without an end (a cancelled request) is still sent.
    drop(server.child("mirror", SpanKind::Client, None));
    let (trace, server_id) = server.ids();
    server.end(503, SystemTime::now());
    flush(&t).await;

    let got = spans(&r);
    assert_eq!(got.len(), 3, "{got:#?}");
    let resource = &r.got.lock().unwrap()[0].resource_spans[0];
    let service = resource
        .resource
        .as_ref()
        .unwrap()
        .attributes
        .iter()
        .find(|kv| kv.key == "service.name");
    assert_eq!(
        service.and_then(|kv| kv.value.clone()?.value),
        Some(Any::StringValue("edge-7".into()))
    );
    let by_name = |n: &str| got.iter().find(|s| s.name == n).unwrap();
    let s = by_name("GET api");
    assert_eq!(s.trace_id, trace.to_be_bytes());
    assert_eq!(trace, 0x4bf92f3577b34da6a3ce929d0e0e4736);
    assert_eq!(s.span_id, server_id.to_be_bytes());
    assert_eq!(s.parent_span_id, 0x00f067aa0ba902b7u64.to_be_bytes());
    assert_eq!(attr(s, "url.path"), Some(Any::StringValue("/api/x".into())));
    assert_eq!(attr(s, "server.port"), Some(Any::IntValue(8443)));
    assert_eq!(
        attr(s, "client.address"),
        Some(Any::StringValue("127.0.0.1".into()))
    );
    assert_eq!(
        attr(s, "http.response.status_code"),
        Some(Any::IntValue(503))
    );
    assert_eq!(attr(s, "error.type"), Some(Any::StringValue("503".into())));
    assert_eq!(s.status.as_ref().map(|st| st.code), Some(2));
    assert!(s.end_time_unix_nano >= s.start_time_unix_nano && s.start_time_unix_nano > 0);
    let a = by_name("upstream");
    assert_eq!(a.span_id, attempt_id.to_be_bytes());
    assert_eq!(a.parent_span_id, server_id.to_be_bytes());
    assert_eq!(a.kind, SpanKind::Client as i32);
    assert_eq!(
        attr(a, "error.type"),
        Some(Any::StringValue("connect_refused".into()))
    );
    assert_eq!(by_name("mirror").parent_span_id, server_id.to_be_bytes());
    let c = t.counters();
    assert_eq!(c.exported.load(Ordering::Relaxed), 3);
    assert_eq!(c.dropped_export_failed.load(Ordering::Relaxed), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_collector_rejects_is_counted_as_dropped() {
    let (r, endpoint) = receiver(true).await;
    let t = Arc::new(tracer(endpoint));
    for _ in 0..4 {
        t.server(&http::HeaderMap::new(), "GET", SystemTime::now())
            .end(200, SystemTime::now());
    }
    flush(&t).await;
    let requests = r.got.lock().unwrap().len() as u64;
    assert!(requests >= 1);
    assert_eq!(spans(&r).len(), 4);
    let c = t.counters();
    assert_eq!(c.dropped_export_failed.load(Ordering::Relaxed), requests);
    assert_eq!(c.exported.load(Ordering::Relaxed), 4 - requests);
    assert_eq!(c.export_errors.load(Ordering::Relaxed), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_is_down_fails_the_export_counted() {
    // A port nothing listens on: bound, then let go.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let t = Arc::new(tracer(format!("http://127.0.0.1:{port}")));
    for _ in 0..3 {
        t.server(&http::HeaderMap::new(), "GET", SystemTime::now())
            .end(200, SystemTime::now());
    }
    flush(&t).await;
    let c = t.counters();
    assert_eq!(c.dropped_export_failed.load(Ordering::Relaxed), 3);
    assert!(c.export_errors.load(Ordering::Relaxed) >= 1);
    assert_eq!(c.exported.load(Ordering::Relaxed), 0);
}

#[test]
fn past_its_capacity_the_queue_drops_and_counts() {
    let counters = Arc::new(Counters::default());
    let q = Queue::new(5, counters.clone());
    for i in 0..8u8 {
        q.push(|out| out.push(i));
    }
    let p = q.lock();
    assert_eq!((p.count, p.spans.as_slice()), (5, &[0u8, 1, 2, 3, 4][..]));
    assert_eq!(counters.dropped_queue_full.load(Ordering::Relaxed), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_tracer_still_sends_the_spans_open_at_the_time() {
    let (r, endpoint) = receiver(false).await;
    let t = tracer(endpoint);
    let open = t.server(&http::HeaderMap::new(), "GET", SystemTime::now());
    drop(t);
    open.end(200, SystemTime::now());
    // The export thread sends it after its linger, then ends; wait for it (bounded).
    for _ in 0..100 {
        if !spans(&r).is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(spans(&r).len(), 1);
}
