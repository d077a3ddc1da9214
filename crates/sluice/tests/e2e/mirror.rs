//! Traffic mirroring (`[[route.mirror]]`) end to end: the primary is a real origin, the
//! mirror another that records what it received (or stalls); the share, bodies, headers,
//! limits and counters are checked, and that the client never waits for a copy.

use crate::support::*;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio::net::TcpListener;

/// What the mirror received of one request.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    path: String,
    headers: http::HeaderMap,
    body: Bytes,
}

/// A mirror origin: records every request; answers 500 (to tell its answers from the
/// primary's) or, while `stall` is set, never answers.
#[derive(Clone)]
struct MirrorOrigin {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    stall: Arc<AtomicBool>,
}

impl MirrorOrigin {
    async fn start() -> MirrorOrigin {
        let socket = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let o = MirrorOrigin {
            addr: socket.local_addr().unwrap(),
            seen: Default::default(),
            stall: Default::default(),
        };
        let state = o.clone();
        tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = socket.accept().await else {
                    return;
                };
                let state = state.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(
                        move |req: http::Request<hyper::body::Incoming>| {
                            let state = state.clone();
                            async move {
                                let (parts, body) = req.into_parts();
                                let body = body
                                    .collect()
                                    .await
                                    .map(|b| b.to_bytes())
                                    .unwrap_or_default();
                                state.seen.lock().unwrap().push(Seen {
                                    method: parts.method.to_string(),
                                    path: parts.uri.to_string(),
                                    headers: parts.headers,
                                    body,
                                });
                                if state.stall.load(Ordering::SeqCst) {
                                    std::future::pending::<()>().await;
                                }
                                Ok::<_, Infallible>(
                                    http::Response::builder()
                                        .status(500)
                                        .body(Full::new(Bytes::from_static(b"mirror")))
                                        .unwrap(),
                                )
                            }
                        },
                    );
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(tcp), svc)
                        .await;
                });
            }
        });
        o
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

async fn gateway(primary: SocketAddr, mirror: SocketAddr, settings: &str) -> TestGateway {
    TestGateway::plain(&format!(
        r#"
[log]
access_log = "off"
[[listener]]
name = "http"
address = "127.0.0.1:0"
trusted_proxies = ["127.0.0.1"]
[[upstream]]
name = "primary"
servers = [{{ address = "{primary}" }}]
[[upstream]]
name = "shadow"
servers = [{{ address = "{mirror}" }}]
[[route]]
name = "app"
upstream = "primary"
[[route.mirror]]
upstream = "shadow"
{settings}
"#
    ))
    .await
}

fn mirrors(gw: &TestGateway) -> sluice_proxy::MirrorSnapshot {
    gw.gateway()
        .metrics()
        .mirrors()
        .into_iter()
        .next()
        .unwrap_or_default()
}

/// Requests on one keep-alive connection, each with its own request ID.
async fn send_many(at: SocketAddr, n: usize, tag: &str) {
    let mut sender = http1_sender::<Full<Bytes>>(at).await;
    for i in 0..n {
        sender.ready().await.unwrap();
        let req = http::Request::get("/whoami")
            .header("host", "app.test")
            .header("x-request-id", format!("{tag}-{i}"))
            .body(Full::new(Bytes::new()))
            .unwrap();
        let got = collect(sender.send_request(req).await.unwrap()).await;
        assert_eq!((got.status, got.body.as_str()), (200, "P"));
    }
}

/// `percent = 10` copies about a tenth of 10,000 requests, chosen by request ID: the same
/// IDs again are copied again, exactly as many.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_share_of_the_requests_chosen_by_request_id_is_mirrored() {
    let primary = Origin::start("P").await;
    let shadow = MirrorOrigin::start().await;
    let gw = gateway(primary.addr, shadow.addr, "percent = 10").await;
    let at = gw.addr("http");
    let tasks: Vec<_> = (0..4)
        .map(|t| tokio::spawn(async move { send_many(at, 2500, &format!("r{t}")).await }))
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    wait_until(|| mirrors(&gw).in_flight == 0).await;
    let first = shadow.seen().len();
    // 10,000 x 10%: 1,000, standard deviation 30; four of them either side.
    assert!((880..=1120).contains(&first), "{first} of 10,000 mirrored");
    assert_eq!(mirrors(&gw).sent as usize, first);
    send_many(at, 2500, "r0").await;
    wait_until(|| mirrors(&gw).in_flight == 0).await;
    let ids = |seen: &[Seen]| -> Vec<String> {
        let mut v: Vec<String> = seen
            .iter()
            .filter_map(|s| {
                s.headers
                    .get("x-request-id")?
                    .to_str()
                    .ok()
                    .map(str::to_owned)
            })
            .filter(|id| id.starts_with("r0-"))
            .collect();
        v.sort();
        v
    };
    let all = shadow.seen();
    let (before, after) = all.split_at(first);
    assert_eq!(ids(before), ids(after), "the same requests, chosen again");
    // The copies went to the mirror with the client's Host and path.
    assert!(
        all.iter()
            .all(|s| s.path == "/whoami" && s.headers["host"] == "app.test")
    );
    // The mirror answered 500, the primary 200: both counted for the same requests.
    let m = mirrors(&gw);
    assert_eq!(m.classes[0][4] as usize, all.len(), "mirror 5xx");
    assert_eq!(m.classes[1][1] as usize, all.len(), "primary 2xx");
    assert_eq!(
        primary.hits(),
        12_500,
        "every request reached the primary once"
    );
}

/// A mirror that never answers: the client's requests, one after another on one keep-alive
/// connection, all complete while the copies are still in flight; past `max_in_flight`,
/// copies are skipped and counted; the timeout ends the stalled ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_never_waits_for_a_stalled_mirror() {
    let primary = Origin::start("P").await;
    let shadow = MirrorOrigin::start().await;
    shadow.stall.store(true, Ordering::SeqCst);
    let gw = gateway(
        primary.addr,
        shadow.addr,
        "max_in_flight = 3\ntimeout = \"3s\"",
    )
    .await;
    send_many(gw.addr("http"), 5, "s").await;
    // Every answer came while the copies had not: they are still in flight.
    let m = mirrors(&gw);
    assert_eq!(m.in_flight, 3, "{m:?}");
    assert_eq!(m.skipped[0], 2, "busy: {m:?}");
    assert_eq!(
        m.classes[1][1], 3,
        "the primary answered the mirrored requests: {m:?}"
    );
    wait_until(|| mirrors(&gw).failed[0] == 3).await;
    assert_eq!(mirrors(&gw).in_flight, 0);
    let metrics = sluice_admin::metrics(&sluice_admin::Sources {
        gateway: gw.gateway().clone(),
        control: None,
        started: std::time::Instant::now(),
    });
    for line in [
        "sluice_mirror_skipped_total{route=\"app\",upstream=\"shadow\",reason=\"busy\"} 2",
        "sluice_mirror_failed_total{route=\"app\",upstream=\"shadow\",reason=\"timeout\"} 3",
        "sluice_mirror_requests_total{route=\"app\",upstream=\"shadow\"} 3",
    ] {
        assert!(metrics.contains(line), "missing `{line}` in:\n{metrics}");
    }
}

/// Request bodies are copied up to `body_limit` (declared or streamed); larger ones are not
/// copied, counted, and reach the primary whole. The mirror's header edits apply to the
/// copies only; a header match picks which requests are copied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_within_the_limit_and_edited_headers_reach_the_mirror() {
    let primary = Origin::start("P").await;
    let shadow = MirrorOrigin::start().await;
    let gw = gateway(
        primary.addr,
        shadow.addr,
        "body_limit = \"1k\"\nheader = { \"x-beta\" = \"1\" }\nrequest_headers = { set = { \"x-shadow\" = \"1\" }, remove = [\"x-secret\"] }",
    )
    .await;
    let at = gw.addr("http");
    let upload = |body: Bytes, chunked: bool, beta: bool| async move {
        let mut sender =
            http1_sender::<http_body_util::combinators::BoxBody<Bytes, Infallible>>(at).await;
        let mut req = http::Request::post("/upload")
            .header("host", "app.test")
            .header("x-secret", "s3cr3t");
        if beta {
            req = req.header("x-beta", "1");
        }
        let body = if chunked {
            let pieces: Vec<Result<Frame<Bytes>, Infallible>> = body
                .chunks(700)
                .map(|c| Ok(Frame::data(Bytes::copy_from_slice(c))))
                .collect();
            StreamBody::new(futures_util::stream::iter(pieces)).boxed()
        } else {
            Full::new(body).boxed()
        };
        collect(sender.send_request(req.body(body).unwrap()).await.unwrap()).await
    };
    let small = Bytes::from(vec![b's'; 500]);
    let big = Bytes::from(vec![b'b'; 5000]);
    assert_eq!(
        upload(small.clone(), false, true).await.body,
        "P got 500 bytes"
    );
    assert_eq!(
        upload(small.clone(), true, true).await.body,
        "P got 500 bytes"
    );
    assert_eq!(
        upload(big.clone(), false, true).await.body,
        "P got 5000 bytes"
    );
    assert_eq!(
        upload(big.clone(), true, true).await.body,
        "P got 5000 bytes"
    );
    assert_eq!(
        upload(small.clone(), false, false).await.body,
        "P got 500 bytes"
    );
    wait_until(|| mirrors(&gw).in_flight == 0 && shadow.seen().len() >= 2).await;
    let seen = shadow.seen();
    assert_eq!(
        seen.len(),
        2,
        "the two small bodies of x-beta requests: {seen:?}"
    );
    for s in &seen {
        assert_eq!((s.method.as_str(), s.path.as_str()), ("POST", "/upload"));
        assert_eq!(s.body, small, "the whole body");
        assert_eq!(s.headers["x-shadow"], "1");
        assert!(s.headers.get("x-secret").is_none(), "removed from the copy");
        assert_eq!(s.headers["host"], "app.test");
    }
    let m = mirrors(&gw);
    assert_eq!(m.skipped[1], 2, "two bodies over the limit: {m:?}");
    assert_eq!(m.sent, 2);
}
