//! Response compression through the gateway: codecs, skip rules, ETag and Vary, streaming.

use crate::support::*;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper_util::rt::{TokioExecutor, TokioIo};
use sluice_tls::selfsigned::KeyKind;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::{Notify, mpsc};

type OBody = http_body_util::combinators::BoxBody<Bytes, Infallible>;

fn page() -> Vec<u8> {
    html_page(150_000)
}

/// An origin with one path per case. `/sse` sends an event each time `next_event` is
/// notified, so a test can prove each event arrives before the next is sent.
struct CaseOrigin {
    addr: SocketAddr,
    next_event: Arc<Notify>,
}

async fn case_origin() -> CaseOrigin {
    let socket = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    let next_event = Arc::new(Notify::new());
    let ne = next_event.clone();
    let page = Bytes::from(page());
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = socket.accept().await else {
                return;
            };
            let (ne, page) = (ne.clone(), page.clone());
            tokio::spawn(async move {
                let svc =
                    hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let (ne, page) = (ne.clone(), page.clone());
                        async move { Ok::<_, Infallible>(respond(req, ne, page).await) }
                    });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tcp), svc)
                    .await;
            });
        }
    });
    CaseOrigin { addr, next_event }
}

fn full(b: impl Into<Bytes>) -> OBody {
    Full::new(b.into()).boxed()
}

async fn respond(
    req: http::Request<hyper::body::Incoming>,
    ne: Arc<Notify>,
    page: Bytes,
) -> http::Response<OBody> {
    let path = req.uri().path().to_owned();
    if path == "/upload" {
        // Echo what arrived: the Content-Encoding header, the body's length and first bytes,
        // answered once the whole body is in (an answer begun before the upload failed would
        // make the gateway's 413 a race; the gateway's side of that race is a unit test in
        // `http1::client`).
        let ce = req
            .headers()
            .get("content-encoding")
            .map(|v| v.to_str().unwrap_or("").to_owned())
            .unwrap_or_else(|| "none".into());
        let text = match req.into_body().collect().await {
            Ok(b) => {
                let b = b.to_bytes();
                format!(
                    "{ce} {} {}",
                    b.len(),
                    String::from_utf8_lossy(&b[..b.len().min(16)])
                )
            }
            Err(e) => format!("error {e}"),
        };
        return http::Response::builder()
            .header("content-type", "application/octet-stream")
            .body(full(text))
            .unwrap();
    }
    let b = http::Response::builder();
    match path.as_str() {
        "/page.html" => {
            // A strong ETag compared strongly, as a strict origin would.
            let inm = req
                .headers()
                .get("if-none-match")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            if inm.split(',').any(|t| t.trim() == "\"v1\"") {
                return b
                    .status(304)
                    .header("etag", "\"v1\"")
                    .body(full(""))
                    .unwrap();
            }
            b.header("content-type", "text/html; charset=utf-8")
                .header("content-length", page.len())
                .header("etag", "\"v1\"")
                .header("accept-ranges", "bytes")
                .body(full(page))
                .unwrap()
        }
        "/app.html" => b
            .header("content-type", "text/html; charset=utf-8")
            .body(full(format!(
                "<!doctype html><html><head><title>pending</title></head><body><div id=\"result\">pending</div>\
                 <script>fetch('/page.html').then(r => r.text()).then(t => {{\
                   document.getElementById('result').textContent = 'LOADED ' + t.length + ' ' + (t.endsWith('</body></html>\\n') ? 'whole' : 'cut');\
                 }}).catch(e => {{ document.getElementById('result').textContent = 'ERROR ' + e; }});</script>\
                 <!-- {} --></body></html>",
                "padding ".repeat(200)
            )))
            .unwrap(),
        "/range" => b
            .status(206)
            .header("content-type", "text/html")
            .header("content-range", format!("bytes 0-999/{}", page.len()))
            .body(full(page.slice(..1000)))
            .unwrap(),
        "/small" => b
            .header("content-type", "text/html")
            .body(full(page.slice(..100)))
            .unwrap(),
        "/mid" => b
            .header("content-type", "application/json")
            .body(full(page.slice(..8000)))
            .unwrap(),
        "/100k" => b
            .header("content-type", "application/json")
            .body(full(page.slice(..100_000)))
            .unwrap(),
        "/image" => b
            .header("content-type", "image/png")
            .body(full(page.slice(..20_000)))
            .unwrap(),
        "/encoded" => b
            .header("content-type", "text/html")
            .header("content-encoding", "br")
            .body(full(page.slice(..20_000)))
            .unwrap(),
        "/no-transform" => b
            .header("content-type", "text/html")
            .header("cache-control", "public, no-transform")
            .body(full(page.slice(..20_000)))
            .unwrap(),
        "/streamed" | "/streamed-short" => {
            // Unknown length, in uneven pieces.
            let n = if path == "/streamed" { page.len() } else { 60 };
            let (tx, rx) = mpsc::channel::<Result<Frame<Bytes>, Infallible>>(4);
            let page = page.slice(..n);
            tokio::spawn(async move {
                let mut at = 0;
                let mut step = 1;
                while at < page.len() {
                    let end = (at + step * 997).min(page.len());
                    if tx.send(Ok(Frame::data(page.slice(at..end)))).await.is_err() {
                        return;
                    }
                    at = end;
                    step = step % 50 + 7;
                }
            });
            b.header("content-type", "text/html")
                .body(StreamBody::new(tokio_stream_from(rx)).boxed())
                .unwrap()
        }
        "/sse" => {
            let (tx, rx) = mpsc::channel::<Result<Frame<Bytes>, Infallible>>(1);
            tokio::spawn(async move {
                for i in 0..3 {
                    ne.notified().await;
                    let ev = format!("id: {i}\ndata: event number {i}\n\n");
                    if tx.send(Ok(Frame::data(Bytes::from(ev)))).await.is_err() {
                        return;
                    }
                }
            });
            b.header("content-type", "text/event-stream")
                .header("cache-control", "no-cache")
                .body(StreamBody::new(tokio_stream_from(rx)).boxed())
                .unwrap()
        }
        _ => b.status(404).body(full("no such case")).unwrap(),
    }
}

fn tokio_stream_from<T: Send + 'static>(
    mut rx: mpsc::Receiver<T>,
) -> impl futures_util::Stream<Item = T> + Send {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

async fn gateway(origin: SocketAddr, compression: &str, engines: &str) -> TestGateway {
    TestGateway::plain(&format!(
        r#"
[log]
access_log = "off"
[offload.compress]
{engines}
[compression]
enabled = true
{compression}
[[listener]]
name = "http"
address = "127.0.0.1:0"
[[upstream]]
name = "o"
servers = [{{ address = "{origin}" }}]
[[route]]
name = "all"
upstream = "o"
"#
    ))
    .await
}

struct Fetched {
    status: u16,
    headers: http::HeaderMap,
    body: Vec<u8>,
}

async fn fetch(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Fetched {
    let mut sender = http1_sender::<Full<Bytes>>(addr).await;
    let mut req = http::Request::get(path).header("host", "t.test");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = sender
        .send_request(req.body(Full::new(Bytes::new())).unwrap())
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp
        .into_body()
        .collect()
        .await
        .unwrap()
        .to_bytes()
        .to_vec();
    Fetched {
        status,
        headers,
        body,
    }
}

fn decode(encoding: Option<&str>, data: &[u8]) -> Vec<u8> {
    decode_body(encoding, data)
}

fn header<'a>(f: &'a Fetched, name: &str) -> Option<&'a str> {
    f.headers.get(name).and_then(|v| v.to_str().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_codec_and_backend_round_trips_with_the_right_headers() {
    let o = case_origin().await;
    let expected = page();
    for (conf, accept, want) in [
        ("gzip_backend = \"isal\"\ngzip_level = 1", "gzip", "gzip"),
        (
            "gzip_backend = \"zlib-rs\"\ngzip_level = 6",
            "gzip, deflate",
            "gzip",
        ),
        ("", "br;q=0.9, gzip;q=0.5", "br"),
        ("", "gzip, zstd, br", "zstd"),
        ("codecs = [\"gzip\", \"br\"]", "gzip, zstd, br", "gzip"),
    ] {
        for engines in ["engines = [\"pool\"]\npool_threads = 1", "engines = []"] {
            let gw = gateway(o.addr, conf, engines).await;
            let f = fetch(
                gw.addr("http"),
                "/page.html",
                &[("accept-encoding", accept)],
            )
            .await;
            assert_eq!(f.status, 200);
            assert_eq!(
                header(&f, "content-encoding"),
                Some(want),
                "{conf} / {accept}"
            );
            assert_eq!(header(&f, "content-length"), None, "no stale length");
            assert_eq!(header(&f, "vary"), Some("Accept-Encoding"));
            assert_eq!(header(&f, "etag"), Some("W/\"v1\""), "strong ETag weakened");
            assert_eq!(header(&f, "accept-ranges"), None);
            assert!(
                f.body.len() < expected.len() / 3,
                "{want}: {} bytes",
                f.body.len()
            );
            assert_eq!(decode(Some(want), &f.body), expected, "{conf} {engines}");
            let m = gw.gateway().compressor().counters();
            let codec = sluice_compress::Codec::from_token(want).unwrap();
            assert_eq!(m.compressed_count(codec), 1);
            let bytes: u64 = m.bytes().iter().map(|b| b.bytes_in).sum();
            assert_eq!(bytes, expected.len() as u64);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_skip_rule_passes_the_body_through() {
    use sluice_compress::SkipReason::*;
    let o = case_origin().await;
    let gw = gateway(o.addr, "min_length = 256", "engines = [\"pool\"]").await;
    let addr = gw.addr("http");
    let gz = [("accept-encoding", "gzip")];
    for (path, extra, reason) in [
        ("/page.html", &[][..], NotAccepted),
        ("/small", &gz[..], TooShort),
        ("/streamed-short", &gz[..], TooShort),
        ("/image", &gz[..], Type),
        ("/encoded", &gz[..], AlreadyEncoded),
        ("/no-transform", &gz[..], NoTransform),
        ("/range", &gz[..], Range),
        (
            "/page.html",
            &[("accept-encoding", "gzip"), ("range", "bytes=0-99")][..],
            Range,
        ),
    ] {
        let before = gw.gateway().compressor().counters().skipped_count(reason);
        let f = fetch(addr, path, extra).await;
        let ce = header(&f, "content-encoding");
        assert!(ce.is_none() || path == "/encoded", "{path}: {ce:?}");
        assert_eq!(
            gw.gateway().compressor().counters().skipped_count(reason),
            before + 1,
            "{path} {reason:?}"
        );
        if reason == NotAccepted {
            assert_eq!(
                header(&f, "vary"),
                Some("Accept-Encoding"),
                "the decision depended on it"
            );
            assert_eq!(f.body, page());
        }
        if path == "/streamed-short" {
            assert_eq!(f.body.len(), 60);
            assert_eq!(header(&f, "content-length"), Some("60"));
        }
    }
    // HEAD: no body, nothing compressed.
    let mut sender = http1_sender::<Full<Bytes>>(addr).await;
    let resp = sender
        .send_request(
            http::Request::head("/page.html")
                .header("host", "t")
                .header("accept-encoding", "gzip")
                .body(Full::new(Bytes::new()))
                .unwrap(),
        )
        .await
        .unwrap();
    assert!(resp.headers().get("content-encoding").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_weakened_etag_still_revalidates() {
    let o = case_origin().await;
    let gw = gateway(o.addr, "", "engines = [\"pool\"]").await;
    let f = fetch(
        gw.addr("http"),
        "/page.html",
        &[("accept-encoding", "gzip")],
    )
    .await;
    let etag = header(&f, "etag").unwrap().to_owned();
    assert_eq!(etag, "W/\"v1\"");
    let again = fetch(
        gw.addr("http"),
        "/page.html",
        &[("accept-encoding", "gzip"), ("if-none-match", &etag)],
    )
    .await;
    assert_eq!(
        again.status, 304,
        "the origin compares strongly; the gateway sent \"v1\" too"
    );
    assert_eq!(header(&again, "etag"), Some("W/\"v1\""));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_length_and_small_bodies_compress_and_decode() {
    let o = case_origin().await;
    let gw = gateway(
        o.addr,
        "chunk_size = \"16k\"\nsw_threshold = \"16k\"",
        "engines = [\"pool\"]\npool_threads = 2",
    )
    .await;
    for (path, accept) in [
        ("/streamed", "gzip"),
        ("/streamed", "br"),
        ("/streamed", "zstd"),
        ("/mid", "gzip"),
    ] {
        let f = fetch(gw.addr("http"), path, &[("accept-encoding", accept)]).await;
        let want = if path == "/mid" {
            page()[..8000].to_vec()
        } else {
            page()
        };
        assert_eq!(header(&f, "content-encoding"), Some(accept), "{path}");
        assert_eq!(decode(Some(accept), &f.body), want, "{path} {accept}");
    }
    let c = gw.gateway().compressor().counters().bytes();
    assert!(c.iter().any(|b| b.engine == "pool"), "{c:?}");
    assert!(
        c.iter().any(|b| b.engine == "inline"),
        "the 8000-byte body compresses inline: {c:?}"
    );
}

/// Without `sw_threshold`, the size up to which a body compresses on the event loop follows
/// the codec's speed: a 100 KB body stays inline with ISA-L level 1 (handing it to a thread
/// would cost more than it saves) and goes to the pool with zlib-rs level 6; a configured
/// `sw_threshold` overrides both ways.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_inline_threshold_follows_the_codec() {
    let o = case_origin().await;
    for (settings, engine) in [
        ("gzip_backend = \"isal\"\ngzip_level = 1", "inline"),
        ("gzip_backend = \"zlib-rs\"\ngzip_level = 6", "pool"),
        (
            "gzip_backend = \"isal\"\ngzip_level = 1\nsw_threshold = \"16k\"",
            "pool",
        ),
        (
            "gzip_backend = \"zlib-rs\"\ngzip_level = 6\nsw_threshold = \"128k\"",
            "inline",
        ),
    ] {
        let gw = gateway(o.addr, settings, "engines = [\"pool\"]").await;
        let f = fetch(gw.addr("http"), "/100k", &[("accept-encoding", "gzip")]).await;
        assert_eq!(header(&f, "content-encoding"), Some("gzip"), "{settings}");
        assert_eq!(
            decode(Some("gzip"), &f.body),
            page()[..100_000],
            "{settings}"
        );
        // The choice is what was handed to the pool: a job the pool accepted may still run
        // inline when it misses its deadline on a loaded machine (counted as a fallback), so
        // the bytes' engine is no proof of the choice, the pool's submissions are.
        let text = sluice_admin::metrics(&sluice_admin::Sources {
            gateway: gw.gateway().clone(),
            control: None,
            started: std::time::Instant::now(),
        });
        let submitted: u64 = text
            .lines()
            .find_map(|l| {
                l.strip_prefix(
                    "sluice_offload_jobs_submitted_total{service=\"compress\",engine=\"pool\"} ",
                )
            })
            .map_or(0, |v| v.parse().unwrap());
        let c = gw.gateway().compressor().counters().bytes();
        if engine == "pool" {
            assert!(
                submitted >= 1,
                "{settings}: nothing went to the pool: {c:?}"
            );
        } else {
            assert_eq!(submitted, 0, "{settings}: want it inline: {c:?}");
            assert!(c.iter().all(|b| b.bytes_in == 0 || b.engine == "inline"));
        }
    }
}

/// Server-sent events: each event reaches the client, decodable, before the origin sends
/// the next one (the stage flushes when the upstream pauses).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_sent_events_arrive_one_by_one() {
    let o = case_origin().await;
    let gw = gateway(o.addr, "", "engines = [\"pool\"]").await;
    let mut sender = http1_sender::<Full<Bytes>>(gw.addr("http")).await;
    let resp = sender
        .send_request(
            http::Request::get("/sse")
                .header("host", "t")
                .header("accept-encoding", "gzip")
                .body(Full::new(Bytes::new()))
                .unwrap(),
        )
        .await;
    // The response head waits for nothing but the origin's head.
    o.next_event.notify_one();
    let resp = resp.unwrap();
    assert_eq!(resp.headers().get("content-encoding").unwrap(), "gzip");
    let mut body = resp.into_body();
    let mut received = Vec::new();
    let mut decoder = flate2::write::GzDecoder::new(Vec::new());
    for i in 0..3 {
        if i > 0 {
            o.next_event.notify_one();
        }
        let want = format!("id: {i}\ndata: event number {i}\n\n");
        // Read frames until this event has decoded; it must come without the next one.
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            use std::io::Write as _;
            let text = String::from_utf8_lossy(decoder.get_ref()).to_string();
            if text.ends_with(&want) {
                break;
            }
            let frame = tokio::time::timeout_at(deadline, body.frame())
                .await
                .unwrap_or_else(|_| panic!("event {i} did not arrive; so far: {text:?}"))
                .unwrap()
                .unwrap();
            if let Ok(d) = frame.into_data() {
                received.extend_from_slice(&d);
                decoder.write_all(&d).unwrap();
                decoder.flush().unwrap();
            }
        }
    }
}

fn gzipped(data: &[u8]) -> Vec<u8> {
    use std::io::Write as _;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(9));
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

async fn upload(addr: SocketAddr, body: Vec<u8>) -> (u16, String) {
    let mut sender = http1_sender::<Full<Bytes>>(addr).await;
    let resp = sender
        .send_request(
            http::Request::post("/upload")
                .header("host", "t")
                .header("content-encoding", "gzip")
                .body(Full::new(Bytes::from(body)))
                .unwrap(),
        )
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let text =
        String::from_utf8_lossy(&resp.into_body().collect().await.unwrap().to_bytes()).to_string();
    (status, text)
}

/// `decompress_requests`: a gzip upload reaches the origin decompressed; a bomb gets 413 and
/// a broken stream 400; with the switch off the body passes as sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gzip_uploads_are_decompressed_within_a_limit() {
    let o = case_origin().await;
    let data: Vec<u8> = b"upload line of text\n".repeat(5000); // 100,000 bytes
    let gw = gateway(
        o.addr,
        "decompress_requests = true\nmax_decompressed_bytes = \"1m\"",
        "engines = []",
    )
    .await;
    let addr = gw.addr("http");
    let (status, text) = upload(addr, gzipped(&data)).await;
    assert_eq!(
        (status, text.as_str()),
        (200, "none 100000 upload line of t")
    );

    // 16 MiB of zeros compress to about 16 KiB: refused after 1 MiB, without buffering it.
    let bomb = gzipped(&vec![0u8; 16 << 20]);
    assert!(bomb.len() < 100_000);
    let (status, _) = upload(addr, bomb).await;
    assert_eq!(status, 413);

    let mut broken = gzipped(&data);
    broken.truncate(broken.len() / 2);
    let (status, _) = upload(addr, broken).await;
    assert_eq!(status, 400);

    let off = gateway(o.addr, "", "engines = []").await;
    let compressed = gzipped(&data);
    let (status, text) = upload(off.addr("http"), compressed.clone()).await;
    assert_eq!(status, 200);
    assert!(
        text.starts_with(&format!("gzip {} ", compressed.len())),
        "{text}"
    );
}

/// `/metrics` shows what compression did, per codec and engine, beside the crypto offload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compression_counters_are_on_metrics() {
    let o = case_origin().await;
    let gw = gateway(o.addr, "", "engines = [\"pool\"]").await;
    let f = fetch(
        gw.addr("http"),
        "/page.html",
        &[("accept-encoding", "gzip")],
    )
    .await;
    assert_eq!(header(&f, "content-encoding"), Some("gzip"));
    let _ = fetch(gw.addr("http"), "/image", &[("accept-encoding", "gzip")]).await;
    let g = gw.gateway();
    let text = sluice_admin::metrics(&sluice_admin::Sources {
        gateway: g.clone(),
        control: None,
        started: std::time::Instant::now(),
    });
    for line in [
        "sluice_compress_responses_total{codec=\"gzip\"} 1".to_string(),
        "sluice_compress_skipped_total{reason=\"type\"} 1".to_string(),
        format!(
            "sluice_compress_bytes_in_total{{codec=\"gzip\",engine=\"pool\"}} {}",
            page().len()
        ),
    ] {
        assert!(text.contains(&line), "missing `{line}` in:\n{text}");
    }
    let jobs: u64 = text
        .lines()
        .find_map(|l| {
            l.strip_prefix(
                "sluice_offload_jobs_completed_total{service=\"compress\",engine=\"pool\"} ",
            )
        })
        .expect("the compress service's pool engine is exported")
        .parse()
        .unwrap();
    assert!(
        jobs >= 2,
        "a 150 KB body is at least two 128 KiB chunks: {jobs}"
    );
    // Each family is declared once even with two offload services.
    assert_eq!(
        text.matches("# TYPE sluice_offload_jobs_completed_total")
            .count(),
        1
    );
}

/// A real browser: headless Chromium (Debian's `chromium`, installed by scripts/deps) loads a
/// page over HTTPS whose script fetches a 150 KB page through the gateway, compressed with
/// each codec in turn, and writes what it decoded into the DOM. Chromium offers
/// `gzip, deflate, br, zstd` on HTTPS only, hence TLS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headless_chromium_decodes_every_codec() {
    let o = case_origin().await;
    for codec in ["zstd", "br", "gzip"] {
        let dir = tempfile::tempdir().unwrap();
        write_cert(dir.path(), "local", KeyKind::EcdsaP256, &["localhost"]);
        let gw = TestGateway::start(
            &format!(
                r#"
[log]
access_log = "off"
[offload.compress]
engines = ["pool"]
[compression]
enabled = true
codecs = ["{codec}"]
chunk_size = "32k"
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
"#,
                origin = o.addr
            ),
            dir,
        )
        .await;
        let url = format!("https://localhost:{}/app.html", gw.addr("https").port());
        let (dom, stderr) = headless_chromium(
            &url,
            &[
                "--ignore-certificate-errors".to_owned(),
                "--virtual-time-budget=10000".to_owned(),
                "--dump-dom".to_owned(),
            ],
        )
        .await;
        let want = format!("LOADED {} whole", page().len());
        assert!(
            dom.contains(&want),
            "{codec}: the page's script did not decode the fetch ({want}); DOM: {dom}\nstderr: {}",
            stderr
        );
        let c = gw.gateway().compressor().counters();
        let coded = sluice_compress::Codec::from_token(codec).unwrap();
        assert!(
            c.compressed_count(coded) >= 1,
            "{codec}: the gateway compressed nothing with {codec}; {:?}",
            c.bytes()
        );
    }
}
