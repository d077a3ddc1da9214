use crate::support::*;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use sluice_tls::selfsigned::KeyKind;
use std::time::Duration;

pub(crate) fn plain_cfg(listener_extra: &str, upstream_extra: &str, servers: &str) -> String {
    format!(
        r#"
[log]
access_log = "off"
[[listener]]
name = "http"
address = "127.0.0.1:0"
{listener_extra}
[[upstream]]
name = "o"
servers = [{servers}]
{upstream_extra}
[[route]]
name = "all"
upstream = "o"
"#
    )
}

pub(crate) fn one(o: &Origin) -> String {
    format!("{{ address = \"{}\" }}", o.addr)
}

#[tokio::test]
async fn proxy_headers_and_hop_by_hop_over_https_h2_and_h1() {
    let origin = Origin::start("o").await;
    let dir = tempfile::tempdir().unwrap();
    write_cert(dir.path(), "c", KeyKind::EcdsaP256, &["a.test"]);
    let cfg = format!(
        r#"
[log]
access_log = "off"
[[listener]]
name = "https"
address = "127.0.0.1:0"
forwarded_header = true
[listener.tls]
[[certificate]]
name = "c"
cert = "c.crt"
key = "c.key"
[[upstream]]
name = "o"
servers = [{{ address = "{}" }}]
[[route]]
name = "all"
upstream = "o"
"#,
        origin.addr
    );
    let gw = TestGateway::start(&cfg, dir).await;
    let addr = gw.addr("https");

    let h = tls_connect(
        addr,
        &ClientOpts {
            sni: Some("a.test"),
            alpn: vec![b"h2"],
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let req = http::Request::get("https://a.test/headers")
        .header("x-forwarded-for", "203.0.113.9")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let got = http2_send(h.stream, req).await;
    assert_eq!(got.version, http::Version::HTTP_2);
    let seen: serde_json::Value = serde_json::from_str(&got.body).unwrap();
    let hdr = |k: &str| seen["headers"][k].as_str().unwrap_or("").to_string();
    assert_eq!(seen["version"], "HTTP/1.1", "upstream speaks HTTP/1.1");
    assert_eq!(hdr("host"), "a.test", "h2 :authority becomes Host");
    assert_eq!(hdr("x-forwarded-for"), "203.0.113.9, 127.0.0.1");
    assert_eq!(hdr("x-forwarded-proto"), "https");
    assert_eq!(hdr("x-forwarded-host"), "a.test");
    assert_eq!(hdr("x-real-ip"), "127.0.0.1");
    assert_eq!(
        hdr("forwarded"),
        "for=127.0.0.1;proto=https;host=\"a.test\""
    );

    let h = tls_connect(
        addr,
        &ClientOpts {
            sni: Some("a.test"),
            alpn: vec![b"http/1.1"],
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let req = http::Request::get("/headers")
        .header("host", "a.test")
        .header("connection", "keep-alive, x-secret")
        .header("x-secret", "only for this hop")
        .header("keep-alive", "timeout=5")
        .header("proxy-connection", "keep-alive")
        .header("x-kept", "yes")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let got = http1_send(h.stream, req).await;
    let seen: serde_json::Value = serde_json::from_str(&got.body).unwrap();
    let headers = seen["headers"].as_object().unwrap();
    for gone in ["x-secret", "keep-alive", "proxy-connection"] {
        assert!(
            !headers.contains_key(gone),
            "{gone} must not be forwarded: {headers:?}"
        );
    }
    assert_eq!(headers["x-kept"], "yes");
}

#[tokio::test]
async fn host_is_passed_or_set_per_upstream() {
    let origin = Origin::start("o").await;
    let node = TestGateway::plain(&plain_cfg("", "pass_host = \"node\"", &one(&origin))).await;
    let got = http1_get(node.addr("http"), "client.test", "/headers").await;
    let seen: serde_json::Value = serde_json::from_str(&got.body).unwrap();
    assert_eq!(seen["headers"]["host"], origin.addr.to_string());
    let rewrite = TestGateway::plain(&plain_cfg(
        "",
        "pass_host = \"rewrite\"\nupstream_host = \"app.internal\"",
        &one(&origin),
    ))
    .await;
    let got = http1_get(rewrite.addr("http"), "client.test", "/headers").await;
    let seen: serde_json::Value = serde_json::from_str(&got.body).unwrap();
    assert_eq!(seen["headers"]["host"], "app.internal");
    assert_eq!(seen["headers"]["x-forwarded-host"], "client.test");
}

#[tokio::test]
async fn h2_upstreams_and_h2c_clients_work() {
    let origin = Origin::start_h2("h2-origin").await;
    let gw = TestGateway::plain(&plain_cfg("", "protocol = \"h2\"", &one(&origin))).await;
    // Prior-knowledge HTTP/2 from the client too.
    let tcp = tokio::net::TcpStream::connect(gw.addr("http"))
        .await
        .unwrap();
    let req = http::Request::get("http://x.test/headers")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let got = http2_send(tcp, req).await;
    assert_eq!(got.status, 200);
    let seen: serde_json::Value = serde_json::from_str(&got.body).unwrap();
    assert_eq!(seen["version"], "HTTP/2.0");
}

#[tokio::test]
async fn websocket_upgrades_pass_through() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    let ws = ws_echo_server().await;
    let gw = TestGateway::plain(&plain_cfg("", "", &format!("{{ address = \"{ws}\" }}"))).await;
    let tcp = tokio::net::TcpStream::connect(gw.addr("http"))
        .await
        .unwrap();
    let (mut socket, resp) =
        tokio_tungstenite::client_async(format!("ws://{}/chat", gw.addr("http")), tcp)
            .await
            .unwrap();
    assert_eq!(resp.status(), 101);
    for text in ["hello", "through the gateway"] {
        socket.send(Message::text(text)).await.unwrap();
        let echoed = socket.next().await.unwrap().unwrap();
        assert_eq!(echoed.into_text().unwrap().as_str(), text);
    }
}

#[tokio::test]
async fn response_bodies_stream_before_the_origin_finishes() {
    let origin = Origin::start("o").await;
    let gw = TestGateway::plain(&plain_cfg("", "", &one(&origin))).await;
    let mut sender = http1_sender(gw.addr("http")).await;
    let req = http::Request::get("/hold")
        .header("host", "x")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let mut body = sender.send_request(req).await.unwrap().into_body();
    // The origin holds the rest of the body until released: this frame can only arrive if
    // the gateway streams.
    let first = tokio::time::timeout(Duration::from_secs(10), body.frame())
        .await
        .expect("first chunk streamed")
        .unwrap()
        .unwrap();
    assert_eq!(first.into_data().unwrap(), "first chunk\n");
    origin.release.notify_one();
    let rest = body.collect().await.unwrap().to_bytes();
    assert_eq!(rest, "second chunk\n");
}

#[tokio::test]
async fn request_bodies_stream_upstream_and_limits_give_413_and_431() {
    let origin = Origin::start("o").await;
    let gw = TestGateway::plain(&plain_cfg(
        "max_body_bytes = \"64k\"\nmax_header_bytes = \"2k\"",
        "",
        &one(&origin),
    ))
    .await;
    let addr = gw.addr("http");
    // A chunked upload under the limit arrives whole.
    let chunks: Vec<Result<Frame<Bytes>, std::convert::Infallible>> = (0..8)
        .map(|_| Ok(Frame::data(Bytes::from(vec![b'x'; 4096]))))
        .collect();
    let body = StreamBody::new(futures_util::stream::iter(chunks));
    let req = http::Request::post("/upload")
        .header("host", "x")
        .body(body)
        .unwrap();
    let mut sender = http1_sender(addr).await;
    let got = collect(sender.send_request(req).await.unwrap()).await;
    assert_eq!(got.body, "o got 32768 bytes");

    // Declared too large: refused before anything goes upstream.
    let big = http::Request::post("/upload")
        .header("host", "x")
        .body(Full::new(Bytes::from(vec![0u8; 70_000])))
        .unwrap();
    let hits_before = origin.hits();
    let got = http1_send(tokio::net::TcpStream::connect(addr).await.unwrap(), big).await;
    assert_eq!(got.status, 413);
    assert_eq!(origin.hits(), hits_before);

    // Chunked and too large: found while streaming.
    let chunks: Vec<Result<Frame<Bytes>, std::convert::Infallible>> = (0..40)
        .map(|_| Ok(Frame::data(Bytes::from(vec![b'y'; 4096]))))
        .collect();
    let req = http::Request::post("/upload")
        .header("host", "x")
        .body(StreamBody::new(futures_util::stream::iter(chunks)))
        .unwrap();
    let mut sender = http1_sender(addr).await;
    let got = collect(sender.send_request(req).await.unwrap()).await;
    assert_eq!(got.status, 413);

    // A request head over the limit.
    let huge = "v".repeat(4096);
    let raw = format!("GET / HTTP/1.1\r\nhost: x\r\nx-big: {huge}\r\n\r\n");
    let answer = raw_exchange(addr, raw.as_bytes(), Duration::from_secs(10)).await;
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");
    // Over HTTP/2 too.
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = http::Request::get("http://x/")
        .header("x-big", huge)
        .body(Full::new(Bytes::new()))
        .unwrap();
    let (mut sender, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tcp),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    match sender.send_request(req).await {
        Ok(resp) => assert_eq!(resp.status(), 431),
        Err(e) => panic!("expected a 431 response over HTTP/2, got {e}"),
    }
}

#[tokio::test]
async fn malformed_requests_get_400_and_leave_no_connection_behind() {
    let origin = Origin::start("o").await;
    let gw = TestGateway::plain(&plain_cfg("", "", &one(&origin))).await;
    let addr = gw.addr("http");
    let no_host = raw_exchange(addr, b"GET / HTTP/1.1\r\n\r\n", Duration::from_secs(10)).await;
    assert!(no_host.starts_with("HTTP/1.1 400"), "{no_host}");
    let garbage = raw_exchange(
        addr,
        b"\x16\x03\x01 not http at all\r\n\r\n",
        Duration::from_secs(10),
    )
    .await;
    assert!(garbage.starts_with("HTTP/1.1 400"), "{garbage}");
    let bad_len = raw_exchange(
        addr,
        b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 12x\r\n\r\n",
        Duration::from_secs(10),
    )
    .await;
    assert!(bad_len.starts_with("HTTP/1.1 400"), "{bad_len}");
    wait_until(|| gw.gateway().open_connections() == 0).await;
}

#[tokio::test]
async fn upstream_failures_map_to_502_and_504() {
    let dead = dead_port().await;
    let gw = TestGateway::plain(&plain_cfg("", "", &format!("{{ address = \"{dead}\" }}"))).await;
    assert_eq!(http1_get(gw.addr("http"), "x", "/").await.status, 502);

    let origin = Origin::start("slow").await;
    let gw = TestGateway::plain(&plain_cfg(
        "",
        "response_timeout = \"300ms\"",
        &one(&origin),
    ))
    .await;
    assert_eq!(
        http1_get(gw.addr("http"), "x", "/slow?ms=5000")
            .await
            .status,
        504
    );
    assert_eq!(
        http1_get(gw.addr("http"), "x", "/whoami").await.status,
        200,
        "a quick request still works"
    );
}

#[tokio::test]
async fn slow_request_heads_and_idle_keepalive_connections_are_closed() {
    let origin = Origin::start("o").await;
    let gw = TestGateway::plain(&plain_cfg(
        "header_read_timeout = \"300ms\"\nkeepalive_timeout = \"300ms\"",
        "",
        &one(&origin),
    ))
    .await;
    let addr = gw.addr("http");
    // Half a request head, then silence: the gateway closes without answering.
    let answer = raw_exchange(
        addr,
        b"GET / HTTP/1.1\r\nhost: x\r\n",
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(answer, "", "no response to an unfinished head");
    // A complete keep-alive request is answered; then the idle connection is closed.
    let answer = raw_exchange(
        addr,
        b"GET /whoami HTTP/1.1\r\nhost: x\r\n\r\n",
        Duration::from_secs(20),
    )
    .await;
    assert!(
        answer.starts_with("HTTP/1.1 200") && answer.ends_with('o'),
        "{answer}"
    );
    wait_until(|| gw.gateway().open_connections() == 0).await;
}

#[tokio::test]
async fn graceful_shutdown_lets_in_flight_requests_finish() {
    let origin = Origin::start("o").await;
    let mut gw = TestGateway::plain(&plain_cfg("", "", &one(&origin))).await;
    let addr = gw.addr("http");
    let in_flight = tokio::spawn(async move { http1_get(addr, "x", "/slow?ms=700").await });
    while origin.hits() == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let gateway = gw.gateway.take().unwrap();
    let clean = gateway.shutdown(Duration::from_secs(20)).await;
    assert!(clean, "finished within the deadline");
    let got = in_flight.await.unwrap();
    assert_eq!((got.status, got.body.as_str()), (200, "o"));
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "no longer accepting"
    );
}

#[tokio::test]
async fn shutdown_deadline_closes_what_is_left() {
    let origin = Origin::start("o").await;
    let mut gw = TestGateway::plain(&plain_cfg("", "", &one(&origin))).await;
    let addr = gw.addr("http");
    let stuck = tokio::spawn(async move {
        let mut sender = http1_sender(addr).await;
        let req = http::Request::get("/slow?ms=60000")
            .header("host", "x")
            .body(Full::new(Bytes::new()))
            .unwrap();
        sender.send_request(req).await.is_err()
    });
    while origin.hits() == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let clean = gw
        .gateway
        .take()
        .unwrap()
        .shutdown(Duration::from_millis(200))
        .await;
    assert!(!clean);
    assert!(
        stuck.await.unwrap(),
        "the stuck request's connection was closed"
    );
}

/// What a server sent on a connection before closing it (bounded read, 5 s), and whether it
/// closed cleanly (FIN, not a reset).
async fn read_until_closed<S: tokio::io::AsyncRead + Unpin>(mut s: S) -> (Vec<u8>, bool) {
    use tokio::io::AsyncReadExt;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await {
            Ok(Ok(0)) => return (got, true),
            Ok(Err(_)) => return (got, false),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Err(_) => panic!(
                "the connection was not closed; got {:?}",
                String::from_utf8_lossy(&got)
            ),
        }
    }
}

/// RFC 9113 §3.4: a client that negotiated `h2` (ALPN) or reached an HTTP/2-only cleartext
/// listener must open with the preface; an HTTP/1.1 request there is a connection error, not
/// a request (h2spec 3.5/2). The gateway closes without an HTTP/1.1 response.
#[tokio::test]
async fn an_http1_request_on_an_h2_connection_is_a_connection_error() {
    use tokio::io::AsyncWriteExt;
    let origin = Origin::start("o").await;
    let dir = tempfile::tempdir().unwrap();
    write_cert(dir.path(), "c", KeyKind::EcdsaP256, &["a.test"]);
    let cfg = format!(
        r#"
[log]
access_log = "off"
[[listener]]
name = "https"
address = "127.0.0.1:0"
[listener.tls]
[[listener]]
name = "h2c"
address = "127.0.0.1:0"
protocols = ["h2"]
[[certificate]]
name = "c"
cert = "c.crt"
key = "c.key"
[[upstream]]
name = "o"
servers = [{{ address = "{}" }}]
[[route]]
name = "all"
upstream = "o"
"#,
        origin.addr
    );
    let gw = TestGateway::start(&cfg, dir).await;
    let request = b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n";

    let mut h = tls_connect(
        gw.addr("https"),
        &ClientOpts {
            sni: Some("a.test"),
            alpn: vec![b"h2"],
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert!(h.alpn_h2);
    h.stream.write_all(request).await.unwrap();
    let (got, _) = read_until_closed(h.stream).await;
    assert!(
        !got.starts_with(b"HTTP/1"),
        "answered as HTTP/1.1 on an h2 connection: {:?}",
        String::from_utf8_lossy(&got)
    );

    let mut tcp = tokio::net::TcpStream::connect(gw.addr("h2c"))
        .await
        .unwrap();
    tcp.write_all(request).await.unwrap();
    let (got, clean) = read_until_closed(tcp).await;
    assert!(
        !got.starts_with(b"HTTP/1"),
        "answered as HTTP/1.1 on an HTTP/2-only listener: {:?}",
        String::from_utf8_lossy(&got)
    );
    assert!(
        clean,
        "closed with a reset: the gateway left the client's bytes unread (lingering close)"
    );

    // The same listeners still serve the protocol they speak.
    let h = tls_connect(
        gw.addr("https"),
        &ClientOpts {
            sni: Some("a.test"),
            alpn: vec![b"h2"],
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let req = http::Request::get("https://a.test/")
        .body(Full::new(Bytes::new()))
        .unwrap();
    assert_eq!(http2_send(h.stream, req).await.status, 200);
}
