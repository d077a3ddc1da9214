//! The demo origin that the embedded default configuration proxies to, so that a newcomer
//! sees real traffic go through the gateway at once: an HTML page of about 100 KiB, a JSON
//! endpoint, a header echo and a stream that sends a line every 100 ms.

use bytes::Bytes;
use http::{Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Channel, Full, combinators::BoxBody};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::graceful::GracefulShutdown;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd as _, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

type Body = BoxBody<Bytes, Infallible>;

/// How long the old demo origin keeps serving the connections it has after an upgrade's
/// gateway drained, before it closes them.
const HANDOVER_GRACE: Duration = Duration::from_millis(500);

/// The running demo origin. An upgrade hands its listening socket to the new process with the
/// gateway's (the demo's port is fixed in the default configuration, so the new process could
/// not bind it again while this one holds it); then [`Demo::stop_accepting`] closes this
/// process's copy, so every new connection reaches the new process's origin, and
/// [`Demo::stop`], once this process's gateway has drained, closes the connections it still
/// has. Closing them earlier would race a gateway that has just connected and is sending its
/// first request (hyper closes a connection that has not read one yet at once); a reused one
/// is safe, since a gateway retries a request on a kept-alive connection that turns out closed.
pub(crate) struct Demo {
    /// Where it listens.
    pub(crate) addr: SocketAddr,
    fd: RawFd,
    /// Running, then no longer accepting, then closing its connections.
    stage: tokio::sync::watch::Sender<Stage>,
    task: tokio::task::JoinHandle<()>,
}

/// Starts the origin on `addr` (`[demo] address`), on `inherited` when an upgrade handed over
/// a socket bound there, and returns where it listens.
pub(crate) async fn start(
    addr: SocketAddr,
    inherited: Option<std::net::TcpListener>,
) -> std::io::Result<Demo> {
    let inherited = inherited.filter(|s| s.local_addr().is_ok_and(|a| a == addr));
    let socket = match inherited {
        Some(s) => {
            s.set_nonblocking(true)?;
            tokio::net::TcpListener::from_std(s)?
        }
        None => tokio::net::TcpListener::bind(addr).await?,
    };
    let addr = socket.local_addr()?;
    let fd = socket.as_raw_fd();
    let (stage, mut stages) = tokio::sync::watch::channel(Stage::Serving);
    let served = Arc::new(AtomicU64::new(0));
    let task = tokio::spawn(async move {
        let graceful = GracefulShutdown::new();
        let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
        loop {
            let tcp = tokio::select! {
                accepted = socket.accept() => match accepted {
                    Ok((tcp, _)) => tcp,
                    Err(_) => continue,
                },
                _ = stages.wait_for(|s| *s != Stage::Serving) => break,
            };
            let served = served.clone();
            let service = hyper::service::service_fn(move |req| {
                let n = served.fetch_add(1, Ordering::Relaxed) + 1;
                async move { Ok::<_, Infallible>(respond(req, n)) }
            });
            let conn = builder
                .serve_connection(TokioIo::new(tcp), service)
                .into_owned();
            tokio::spawn(graceful.watch(conn));
        }
        // Closes this process's copy of the socket: whatever connects now reaches the process
        // that holds the other copy.
        drop(socket);
        let _ = stages.wait_for(|s| *s == Stage::Closing).await;
        // A connection accepted just before the handover (the new process's gateway may
        // connect to either copy of the socket) gets its first request in before the close:
        // hyper closes a connection that has not read one at once, and the gateway does not
        // resend a request on a fresh connection (seen under load: one request of 469 failed
        // across the banner test's upgrade).
        tokio::time::sleep(HANDOVER_GRACE).await;
        // Idle keep-alive connections close now, busy ones after their response (with
        // `Connection: close`), so the gateway that uses them retries on a fresh one.
        graceful.shutdown().await;
    });
    Ok(Demo {
        addr,
        fd,
        stage,
        task,
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Serving,
    NotAccepting,
    Closing,
}

impl Demo {
    /// The listening socket, to hand over in an upgrade.
    pub(crate) fn fd(&self) -> RawFd {
        self.fd
    }

    /// Closes this process's copy of the listening socket; its connections go on.
    pub(crate) fn stop_accepting(&self) {
        self.stage.send_if_modified(|s| {
            let change = *s == Stage::Serving;
            if change {
                *s = Stage::NotAccepting;
            }
            change
        });
    }

    /// Stops accepting, closes the connections (idle ones at once, busy ones after their
    /// response) and waits for them, at most `grace`.
    pub(crate) async fn stop(self, grace: Duration) {
        let _ = self.stage.send(Stage::Closing);
        let _ = tokio::time::timeout(grace, self.task).await;
    }
}

fn full(content_type: &'static str, body: impl Into<Bytes>) -> Response<Body> {
    let mut r = Response::new(Full::new(body.into()).boxed());
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(content_type),
    );
    r
}

fn respond(req: Request<Incoming>, served: u64) -> Response<Body> {
    match req.uri().path() {
        "/" | "/index.html" => full("text/html; charset=utf-8", page().clone()),
        "/api/status" => {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            let body = serde_json::json!({
                "service": "sluice-demo-origin",
                "version": env!("CARGO_PKG_VERSION"),
                "unix_time": now,
                "requests_served": served,
                "endpoints": ["/", "/api/status", "/headers", "/stream?lines=N"],
            });
            full("application/json", body.to_string())
        }
        "/headers" => {
            let headers: serde_json::Map<String, serde_json::Value> = req
                .headers()
                .iter()
                .map(|(k, v)| (k.to_string(), String::from_utf8_lossy(v.as_bytes()).into()))
                .collect();
            let body = serde_json::json!({
                "method": req.method().as_str(),
                "uri": req.uri().to_string(),
                "version": format!("{:?}", req.version()),
                "headers": headers,
            });
            full(
                "application/json",
                serde_json::to_string_pretty(&body).unwrap_or_default(),
            )
        }
        "/stream" => {
            let lines = req
                .uri()
                .query()
                .and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("lines=")))
                .and_then(|n| n.parse::<u32>().ok())
                .unwrap_or(20)
                .clamp(1, 600);
            let mut r = Response::new(ticking_body(lines));
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            r
        }
        _ => {
            let mut r = full(
                "text/plain; charset=utf-8",
                "not found on the demo origin\n",
            );
            *r.status_mut() = StatusCode::NOT_FOUND;
            r
        }
    }
}

/// A body that sends a line every 100 ms, `lines` times.
fn ticking_body(lines: u32) -> Body {
    let (mut tx, body) = Channel::<Bytes, Infallible>::new(4);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        for i in 1..=lines {
            tick.tick().await;
            if tx
                .send_data(Bytes::from(format!("line {i} of {lines}\n")))
                .await
                .is_err()
            {
                return; // the client went away
            }
        }
    });
    body.boxed()
}

static PAGE: OnceLock<Bytes> = OnceLock::new();

/// The ~100 KiB HTML page: realistic English prose in sections, lists and a table, built once
/// and deterministic so that compression benchmarks see the same bytes every run.
pub(crate) fn page() -> &'static Bytes {
    PAGE.get_or_init(|| Bytes::from(build_page(100 * 1024)))
}

const SENTENCES: &[&str] = &[
    "A gateway at the entrance of a large site terminates every TLS connection before any application sees a byte.",
    "Most of the processor time at that entrance goes to two things: the public-key operations of new handshakes and the compression of responses.",
    "The sluice gate of a canal lets water through at a controlled rate, and the gateway does the same for requests.",
    "When a handshake waits for its private-key signature, the worker thread can serve thousands of other connections in the meantime.",
    "Operators measure new connections per second, requests per second on established connections, and the latency of the slowest one percent.",
    "A certificate for an ECDSA key makes the handshake cheaper for the server, while older clients still need an RSA certificate beside it.",
    "Session tickets let a returning client skip the expensive part of the handshake, provided every instance shares the ticket keys.",
    "Load balancing spreads requests across the servers of an upstream group, by turns, by weight, by the fewest active requests, or by client address.",
    "A server that refuses connections is skipped for a while, so that clients keep getting answers while it recovers.",
    "Compressing a hundred kilobytes of HTML at level one takes a fraction of a millisecond, and at level nine several times as long for a few percent less.",
    "The access log records one line per request: who asked, for what, how long it took, and which upstream server answered.",
    "Graceful shutdown stops accepting new connections and lets the requests in flight finish before the process exits.",
    "Headers that describe one hop of the connection, such as Connection and Keep-Alive, are removed before the request travels on.",
    "The X-Forwarded-For header tells the application which client address the request really came from.",
    "HTTP/2 multiplexes many requests over one connection, which saves handshakes but makes a single slow response no reason to wait.",
    "A WebSocket starts as an ordinary request with an Upgrade header and then becomes a tunnel of messages in both directions.",
    "Configuration errors are reported with the file, the line and the column, together with what to change.",
    "The accelerator cards in the articles computed RSA signatures in hardware, while a software engine kept serving when the card was busy.",
    "Batching eight RSA operations into the lanes of one vector instruction doubles the throughput of a single core.",
    "A request body larger than the configured limit is refused with status 413 before it reaches the application.",
    "Timeouts protect the gateway from clients that send their headers one byte a minute and from servers that never answer.",
    "Retries are only safe for requests that do not change anything, and only when no byte of the body has been sent.",
    "Streaming responses reach the client as the upstream produces them, without waiting for the whole body.",
    "Every figure in a benchmark is the median of several runs, measured side by side with the reference on the same cores.",
];

const HEADINGS: &[&str] = &[
    "Terminating TLS at the edge",
    "Where the processor time goes",
    "Handshakes that never block",
    "Certificates for every client",
    "Resuming sessions across instances",
    "Spreading load across servers",
    "When a server goes away",
    "Compression that pays for itself",
    "What the access log tells",
    "Stopping without dropping requests",
    "Proxy headers done right",
    "HTTP/2 and WebSockets",
];

fn build_page(target: usize) -> String {
    let mut seed: u64 = 0x5eed_5eed;
    let mut next = move |n: usize| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((seed >> 33) as usize) % n
    };
    let mut html = String::with_capacity(target + 4096);
    html.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>Sluice demo origin</title>\n<style>body{font-family:system-ui,sans-serif;max-width:46rem;margin:2rem auto;line-height:1.5;color:#222}h1,h2{color:#0b4f6c}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.2rem .5rem}</style>\n</head>\n<body>\n<h1>Sluice: the HTTPS gateway demo page</h1>\n<p id=\"intro\">This page was served by the demo origin built into <code>sluice</code> and reached you through the gateway. Try <a href=\"/api/status\">/api/status</a>, <a href=\"/headers\">/headers</a> and <a href=\"/stream\">/stream</a>.</p>\n");
    let mut section = 0;
    while html.len() < target {
        let heading = HEADINGS[section % HEADINGS.len()];
        html.push_str(&format!(
            "<section id=\"s{section}\">\n<h2>{}. {heading}</h2>\n",
            section + 1
        ));
        for _ in 0..4 {
            html.push_str("<p>");
            for k in 0..(4 + next(4)) {
                if k > 0 {
                    html.push(' ');
                }
                html.push_str(SENTENCES[next(SENTENCES.len())]);
            }
            html.push_str("</p>\n");
        }
        if section % 3 == 0 {
            html.push_str("<ul>\n");
            for _ in 0..5 {
                html.push_str(&format!("<li>{}</li>\n", SENTENCES[next(SENTENCES.len())]));
            }
            html.push_str("</ul>\n");
        }
        if section % 4 == 1 {
            html.push_str("<table>\n<tr><th>Scenario</th><th>Requests</th><th>Median ms</th><th>p99 ms</th></tr>\n");
            for row in 0..6 {
                html.push_str(&format!(
                    "<tr><td>run {}-{row}</td><td>{}</td><td>{}.{:02}</td><td>{}.{:02}</td></tr>\n",
                    section,
                    1000 + next(9000),
                    next(5),
                    next(100),
                    5 + next(20),
                    next(100)
                ));
            }
            html.push_str("</table>\n");
        }
        html.push_str("</section>\n");
        section += 1;
    }
    html.push_str("<footer><p>End of the demo page.</p></footer>\n</body>\n</html>\n");
    html
}
