//! `soak`: everything a gateway carries at once, for `bench/reload` — keep-alive HTTP/1.1 and
//! HTTP/2 requests (latency recorded, failures counted), a storm of full handshakes, open
//! WebSockets that echo a message every 200 ms, and streams of server-sent events — each
//! counting what was cut. And `origin`: the upstream that serves them (`/ws` echo, `/sse` an
//! event every 100 ms, anything else 1 KiB).

use crate::{Counters, Target, percentile, storm, tls_connect};
use anyhow::{Context as _, bail};
use boring::ssl::{SslConnector, SslMethod, SslVerifyMode};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// What one kind of long-lived traffic saw.
#[derive(Default)]
struct Long {
    opened: AtomicU64,
    /// Ended by the gateway (an error, a close, or no echo within 5 s) before the run ended.
    cut: AtomicU64,
    /// Messages echoed, or events received.
    messages: AtomicU64,
}

impl Long {
    fn json(&self) -> Value {
        json!({
            "opened": self.opened.load(Ordering::Relaxed),
            "cut": self.cut.load(Ordering::Relaxed),
            "messages": self.messages.load(Ordering::Relaxed),
        })
    }
}

/// How many of each.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct Mix {
    /// Keep-alive HTTP/1.1 connections, one request at a time each.
    #[arg(long, default_value_t = 4)]
    pub(crate) http1: usize,
    /// HTTP/2 connections, each with `streams` requests at a time.
    #[arg(long, default_value_t = 1)]
    pub(crate) http2: usize,
    /// Concurrent requests per HTTP/2 connection.
    #[arg(long, default_value_t = 4)]
    pub(crate) streams: usize,
    /// Full handshakes in flight at once.
    #[arg(long, default_value_t = 4)]
    pub(crate) handshakes: usize,
    /// Open WebSockets (`/ws`).
    #[arg(long, default_value_t = 50)]
    pub(crate) websockets: usize,
    /// Open server-sent-event streams (`/sse`).
    #[arg(long, default_value_t = 20)]
    pub(crate) sse: usize,
}

fn alpn_connector(alpn: &[u8]) -> anyhow::Result<SslConnector> {
    let mut b = SslConnector::builder(SslMethod::tls())?;
    b.set_verify(SslVerifyMode::NONE);
    b.set_alpn_protos(alpn)?;
    Ok(b.build())
}

/// Runs the mix against `t` for its duration and returns the figures.
pub(crate) async fn run(t: Target, mix: Mix) -> anyhow::Result<Value> {
    let t = Arc::new(t);
    let stop = Arc::new(AtomicBool::new(false));
    let h1 = Arc::new(Counters::default());
    let h2 = Arc::new(Counters::default());
    let lat1 = Arc::new(std::sync::Mutex::new(Vec::new()));
    let lat2 = Arc::new(std::sync::Mutex::new(Vec::new()));
    let hs = Arc::new(Counters::default());
    let (ws, sse) = (Arc::new(Long::default()), Arc::new(Long::default()));
    let c1 = Arc::new(alpn_connector(b"\x08http/1.1")?);
    let c2 = Arc::new(alpn_connector(b"\x02h2")?);
    let mut tasks = Vec::new();
    for _ in 0..mix.websockets {
        tasks.push(tokio::spawn(websocket(
            c1.clone(),
            t.clone(),
            stop.clone(),
            ws.clone(),
        )));
    }
    for _ in 0..mix.sse {
        tasks.push(tokio::spawn(events(
            c1.clone(),
            t.clone(),
            stop.clone(),
            sse.clone(),
        )));
    }
    for _ in 0..mix.http1 {
        tasks.push(tokio::spawn(keepalive(
            c1.clone(),
            t.clone(),
            stop.clone(),
            h1.clone(),
            lat1.clone(),
            false,
            1,
        )));
    }
    for _ in 0..mix.http2 {
        tasks.push(tokio::spawn(keepalive(
            c2.clone(),
            t.clone(),
            stop.clone(),
            h2.clone(),
            lat2.clone(),
            true,
            mix.streams,
        )));
    }
    // TLS 1.3 with BoringSSL's groups, whatever the target says.
    let plain = crate::Target {
        tls: "1.3".into(),
        groups: None,
        ..(*t).clone()
    };
    let handshake = Arc::new(crate::connector(&plain)?);
    tasks.push(tokio::spawn(storm(
        handshake,
        t.clone(),
        mix.handshakes,
        stop.clone(),
        hs.clone(),
        None,
    )));
    let start = Instant::now();
    tokio::time::sleep(t.duration).await;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        let _ = task.await;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let figures = |c: &Counters, lat: &std::sync::Mutex<Vec<f64>>| {
        let mut l = lat.lock().unwrap_or_else(|e| e.into_inner()).clone();
        l.sort_by(f64::total_cmp);
        json!({
            "requests": c.ok.load(Ordering::Relaxed),
            "failed": c.failed.load(Ordering::Relaxed),
            "retried": c.retried.load(Ordering::Relaxed),
            "first_error": c.first_error(),
            "rate": c.ok.load(Ordering::Relaxed) as f64 / elapsed,
            "p50_ms": percentile(&l, 0.5),
            "p99_ms": percentile(&l, 0.99),
        })
    };
    Ok(json!({
        "mode": "soak",
        "seconds": elapsed,
        "http1": figures(&h1, &lat1),
        "http2": figures(&h2, &lat2),
        "handshakes": {
            "completed": hs.ok.load(Ordering::Relaxed),
            "failed": hs.failed.load(Ordering::Relaxed),
            "first_error": hs.first_error(),
        },
        "websockets": ws.json(),
        "sse": sse.json(),
    }))
}

/// Sequential requests on keep-alive connections (HTTP/2: `streams` at a time on one); a
/// failed request is counted and the connection opened again.
async fn keepalive(
    connector: Arc<SslConnector>,
    t: Arc<Target>,
    stop: Arc<AtomicBool>,
    c: Arc<Counters>,
    lat: Arc<std::sync::Mutex<Vec<f64>>>,
    h2: bool,
    streams: usize,
) {
    let mut mine = Vec::new();
    // Whether the last connection ended in a retryable error without a request completing
    // since: a second one in a row is a failure.
    let mut retried_last = false;
    while !stop.load(Ordering::Relaxed) {
        let ok_before = c.ok.load(Ordering::Relaxed);
        let s = match tls_connect(&connector, &t).await {
            Ok(s) => s,
            Err(e) => {
                c.fail(format!("connect: {e:#}"));
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let result: anyhow::Result<()> = if h2 {
            async {
                let (sender, conn) =
                    hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(s))
                        .await?;
                tokio::spawn(conn);
                let mut lanes = Vec::new();
                for _ in 0..streams {
                    let (mut sender, t, stop, c) =
                        (sender.clone(), t.clone(), stop.clone(), c.clone());
                    lanes.push(tokio::spawn(async move {
                        let mut l = Vec::new();
                        request_loop(&mut sender, &t, &stop, &c, &mut l).await?;
                        anyhow::Ok(l)
                    }));
                }
                let mut first = Ok(());
                for lane in lanes {
                    match lane.await {
                        Ok(Ok(l)) => mine.extend(l),
                        Ok(Err(e)) => first = first.and(Err(e)),
                        Err(e) => first = first.and(Err(e.into())),
                    }
                }
                first
            }
            .await
        } else {
            async {
                let (mut sender, conn) =
                    hyper::client::conn::http1::handshake(TokioIo::new(s)).await?;
                tokio::spawn(conn);
                request_loop(&mut sender, &t, &stop, &c, &mut mine).await?;
                anyhow::Ok(())
            }
            .await
        };
        if c.ok.load(Ordering::Relaxed) != ok_before {
            retried_last = false;
        }
        if let Err(e) = result
            && !stop.load(Ordering::Relaxed)
        {
            if retryable(&e) && !retried_last {
                // The request was not processed (RFC 9112 9.3.1, RFC 9113 8.7): a client
                // sends it again on a new connection, as the next round here does.
                c.retried.fetch_add(1, Ordering::Relaxed);
                retried_last = true;
            } else {
                c.fail(format!("{e:#}"));
            }
        }
    }
    lat.lock().unwrap_or_else(|e| e.into_inner()).extend(mine);
}

/// What the request loop needs of hyper's HTTP/1.1 and HTTP/2 client senders.
trait Sender {
    /// Whether the connection takes another request: after a `Connection: close` response
    /// (HTTP/1.1) or a GOAWAY (HTTP/2) it does not, and the caller opens another.
    fn ready(&mut self) -> impl Future<Output = bool> + Send;
    fn send(
        &mut self,
        req: http::Request<Empty<Bytes>>,
    ) -> impl Future<Output = hyper::Result<http::Response<hyper::body::Incoming>>> + Send;
}

impl Sender for hyper::client::conn::http1::SendRequest<Empty<Bytes>> {
    async fn ready(&mut self) -> bool {
        hyper::client::conn::http1::SendRequest::ready(self)
            .await
            .is_ok()
    }
    fn send(
        &mut self,
        req: http::Request<Empty<Bytes>>,
    ) -> impl Future<Output = hyper::Result<http::Response<hyper::body::Incoming>>> + Send {
        self.send_request(req)
    }
}

impl Sender for hyper::client::conn::http2::SendRequest<Empty<Bytes>> {
    async fn ready(&mut self) -> bool {
        hyper::client::conn::http2::SendRequest::ready(self)
            .await
            .is_ok()
    }
    fn send(
        &mut self,
        req: http::Request<Empty<Bytes>>,
    ) -> impl Future<Output = hyper::Result<http::Response<hyper::body::Incoming>>> + Send {
        self.send_request(req)
    }
}

/// Requests one after another on `sender` until `stop`, the connection closing, or an error;
/// each completed one is counted and its latency (ms) recorded.
async fn request_loop(
    sender: &mut impl Sender,
    t: &Target,
    stop: &AtomicBool,
    c: &Counters,
    lat: &mut Vec<f64>,
) -> anyhow::Result<()> {
    while !stop.load(Ordering::Relaxed) && sender.ready().await {
        let start = Instant::now();
        let req = http::Request::get(t.path.as_str())
            .header("host", t.sni.as_str())
            .body(Empty::<Bytes>::new())?;
        let resp = sender.send(req).await?;
        if resp.status() != 200 {
            bail!("status {}", resp.status());
        }
        resp.into_body().collect().await?;
        c.ok.fetch_add(1, Ordering::Relaxed);
        lat.push(start.elapsed().as_secs_f64() * 1e3);
    }
    Ok(())
}

/// Errors after which a client may send the request again: the connection closed before
/// any response to it (an idle keep-alive connection closed by the server), or HTTP/2
/// refused it unsent (GOAWAY).
fn retryable(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<hyper::Error>()
            .is_some_and(|h| h.is_canceled() || h.is_incomplete_message())
    })
}

/// One WebSocket through the gateway, echoing a message every 200 ms until the end.
async fn websocket(
    connector: Arc<SslConnector>,
    t: Arc<Target>,
    stop: Arc<AtomicBool>,
    w: Arc<Long>,
) {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    let Ok(s) = tls_connect(&connector, &t).await else {
        w.cut.fetch_add(1, Ordering::Relaxed);
        return;
    };
    let url = format!("ws://{}/ws", t.sni);
    let Ok((mut ws, _)) = tokio_tungstenite::client_async(url, s).await else {
        w.cut.fetch_add(1, Ordering::Relaxed);
        return;
    };
    w.opened.fetch_add(1, Ordering::Relaxed);
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let text = format!("message {n}");
        let echoed = async {
            ws.send(Message::text(text.clone())).await.ok()?;
            let m = ws.next().await?.ok()?;
            (m.into_text().ok()?.as_str() == text).then_some(())
        };
        match tokio::time::timeout(Duration::from_secs(5), echoed).await {
            Ok(Some(())) => {
                w.messages.fetch_add(1, Ordering::Relaxed);
            }
            _ => {
                if !stop.load(Ordering::Relaxed) {
                    w.cut.fetch_add(1, Ordering::Relaxed);
                }
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let _ = ws.close(None).await;
}

/// One server-sent-event stream through the gateway, read until the end.
async fn events(connector: Arc<SslConnector>, t: Arc<Target>, stop: Arc<AtomicBool>, e: Arc<Long>) {
    let opened = async {
        let s = tls_connect(&connector, &t).await?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(s)).await?;
        tokio::spawn(conn);
        let req = http::Request::get("/sse")
            .header("host", t.sni.as_str())
            .header("accept", "text/event-stream")
            .body(Empty::<Bytes>::new())?;
        let resp = sender.send_request(req).await?;
        if resp.status() != 200 {
            bail!("status {}", resp.status());
        }
        anyhow::Ok((sender, resp.into_body()))
    }
    .await;
    let Ok((_sender, mut body)) = opened else {
        e.cut.fetch_add(1, Ordering::Relaxed);
        return;
    };
    e.opened.fetch_add(1, Ordering::Relaxed);
    while !stop.load(Ordering::Relaxed) {
        match tokio::time::timeout(Duration::from_secs(5), body.frame()).await {
            Ok(Some(Ok(_))) => {
                e.messages.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) if stop.load(Ordering::Relaxed) => return,
            _ => {
                if !stop.load(Ordering::Relaxed) {
                    e.cut.fetch_add(1, Ordering::Relaxed);
                }
                return;
            }
        }
    }
}

/// The upstream of `bench/reload`: `/ws` echoes WebSocket messages, `/sse` sends an event
/// every 100 ms until the client goes, anything else is 1 KiB. Runs for `duration`.
pub(crate) async fn origin(addr: SocketAddr, duration: Duration) -> anyhow::Result<Value> {
    let socket = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding {addr}"))?;
    let served = Arc::new(AtomicU64::new(0));
    let s = served.clone();
    let serve = async move {
        loop {
            let Ok((tcp, _)) = socket.accept().await else {
                continue;
            };
            let s = s.clone();
            tokio::spawn(async move {
                let _ = tcp.set_nodelay(true);
                let svc =
                    hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        s.fetch_add(1, Ordering::Relaxed);
                        respond(req)
                    });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection_with_upgrades(TokioIo::new(tcp), svc)
                    .await;
            });
        }
    };
    let _ = tokio::time::timeout(duration, serve).await;
    Ok(json!({ "mode": "origin", "served": served.load(Ordering::Relaxed) }))
}

type Body = http_body_util::combinators::BoxBody<Bytes, std::convert::Infallible>;

async fn respond(
    mut req: http::Request<hyper::body::Incoming>,
) -> Result<http::Response<Body>, std::convert::Infallible> {
    static KIB: [u8; 1024] = [b'x'; 1024];
    let path = req.uri().path().to_owned();
    Ok(match path.as_str() {
        "/ws" => {
            use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
            let key = req
                .headers()
                .get("sec-websocket-key")
                .map(|k| derive_accept_key(k.as_bytes()));
            let Some(accept) = key else {
                return Ok(http::Response::builder()
                    .status(400)
                    .body(Full::new(Bytes::from_static(b"not a websocket\n")).boxed())
                    .unwrap_or_default());
            };
            let upgrade = hyper::upgrade::on(&mut req);
            tokio::spawn(async move {
                use futures_util::{SinkExt, StreamExt};
                let Ok(up) = upgrade.await else { return };
                let mut ws = tokio_tungstenite::WebSocketStream::from_raw_socket(
                    TokioIo::new(up),
                    tokio_tungstenite::tungstenite::protocol::Role::Server,
                    None,
                )
                .await;
                while let Some(Ok(m)) = ws.next().await {
                    if (m.is_text() || m.is_binary()) && ws.send(m).await.is_err() {
                        return;
                    }
                }
            });
            http::Response::builder()
                .status(101)
                .header("connection", "upgrade")
                .header("upgrade", "websocket")
                .header("sec-websocket-accept", accept)
                .body(Empty::new().boxed())
                .unwrap_or_default()
        }
        "/sse" => {
            let (mut tx, body) = http_body_util::Channel::<Bytes, std::convert::Infallible>::new(4);
            tokio::spawn(async move {
                let mut n = 0u64;
                loop {
                    n += 1;
                    let event = Bytes::from(format!("id: {n}\ndata: tick {n}\n\n"));
                    if tx.send_data(event).await.is_err() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            });
            http::Response::builder()
                .header("content-type", "text/event-stream")
                .header("cache-control", "no-cache")
                .body(body.boxed())
                .unwrap_or_default()
        }
        _ => http::Response::builder()
            .header("content-type", "text/plain")
            .body(Full::new(Bytes::from_static(&KIB)).boxed())
            .unwrap_or_default(),
    })
}
