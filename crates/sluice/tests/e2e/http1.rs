//! Sluice's own HTTP/1.1 server side on raw sockets: framing, pipelining, `Expect`,
//! malformed bodies found after the head went upstream, and smuggling shapes.

use crate::http::{one, plain_cfg};
use crate::support::*;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn gateway(origin: &Origin) -> TestGateway {
    TestGateway::plain(&plain_cfg("", "", &one(origin))).await
}

const LIMIT: Duration = Duration::from_secs(10);

/// Reads from `s` until `needle` has arrived (or the peer closed); everything read.
async fn read_until(s: &mut tokio::net::TcpStream, needle: &str) -> String {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    let _ = tokio::time::timeout(LIMIT, async {
        while !String::from_utf8_lossy(&out).contains(needle) {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn pipelined_requests_are_answered_in_order_on_one_connection() {
    let origin = Origin::start("o").await;
    let gw = gateway(&origin).await;
    let raw = "GET /echo/first HTTP/1.1\r\nHost: x\r\n\r\n\
               GET /echo/second HTTP/1.1\r\nHost: x\r\n\r\n\
               GET /echo/third HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    let answer = raw_exchange(gw.addr("http"), raw.as_bytes(), LIMIT).await;
    assert_eq!(answer.matches("HTTP/1.1 200 OK").count(), 3, "{answer}");
    let (a, b, c) = (
        answer.find("/echo/first").unwrap(),
        answer.find("/echo/second").unwrap(),
        answer.find("/echo/third").unwrap(),
    );
    assert!(a < b && b < c, "{answer}");
    assert!(answer.contains("connection: close"), "{answer}");
}

#[tokio::test]
async fn chunked_uploads_with_extensions_and_trailers_arrive_whole() {
    let origin = Origin::start("o").await;
    let gw = gateway(&origin).await;
    let raw = "POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n\
               5;name=value\r\nhello\r\n6\r\n world\r\n0\r\nX-Checksum: 1\r\n\r\n";
    let answer = raw_exchange(gw.addr("http"), raw.as_bytes(), LIMIT).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with("o got 11 bytes"), "{answer}");
}

#[tokio::test]
async fn expect_100_continue_is_answered_before_the_body_is_sent() {
    let origin = Origin::start("o").await;
    let gw = gateway(&origin).await;
    let mut s = tokio::net::TcpStream::connect(gw.addr("http"))
        .await
        .unwrap();
    s.write_all(
        b"PUT /upload HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n",
    )
    .await
    .unwrap();
    let interim = read_until(&mut s, "\r\n\r\n").await;
    assert_eq!(interim, "HTTP/1.1 100 Continue\r\n\r\n");
    s.write_all(b"hello").await.unwrap();
    let answer = read_until(&mut s, "bytes").await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with("o got 5 bytes"), "{answer}");
    // The connection carries the next request.
    s.write_all(b"GET /whoami HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let next = read_until(&mut s, "\r\n\r\no").await;
    assert!(next.starts_with("HTTP/1.1 200"), "{next}");
}

#[tokio::test]
async fn a_malformed_chunk_found_after_the_head_went_upstream_is_a_400() {
    let origin = Origin::start("o").await;
    let gw = gateway(&origin).await;
    let mut s = tokio::net::TcpStream::connect(gw.addr("http"))
        .await
        .unwrap();
    s.write_all(
        b"POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",
    )
    .await
    .unwrap();
    // The head is upstream before the bad chunk arrives.
    wait_until(|| origin.hits() == 1).await;
    s.write_all(b"zz\r\nmore\r\n").await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(LIMIT, s.read_to_end(&mut out)).await;
    let answer = String::from_utf8_lossy(&out);
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("connection: close"), "{answer}");
}

#[tokio::test]
async fn smuggling_shapes_are_refused_before_anything_goes_upstream() {
    let origin = Origin::start("o").await;
    let gw = gateway(&origin).await;
    for raw in [
        "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
        "POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n",
        "POST /upload HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: x\r\nX-Folded: a\r\n b\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding : chunked\r\n\r\n",
    ] {
        let answer = raw_exchange(gw.addr("http"), raw.as_bytes(), LIMIT).await;
        assert!(answer.starts_with("HTTP/1.1 400"), "{raw:?} -> {answer}");
    }
    let answer = raw_exchange(
        gw.addr("http"),
        b"POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n",
        LIMIT,
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 501"), "{answer}");
    assert_eq!(origin.hits(), 0, "nothing reached the origin");
}

#[tokio::test]
async fn http_1_0_keeps_alive_only_when_asked_and_head_has_no_body() {
    let origin = Origin::start("o").await;
    let gw = gateway(&origin).await;
    let raw = "GET /whoami HTTP/1.0\r\nConnection: keep-alive\r\n\r\n\
               HEAD /whoami HTTP/1.0\r\nConnection: keep-alive\r\n\r\n\
               GET /whoami HTTP/1.0\r\n\r\n\
               GET /whoami HTTP/1.0\r\n\r\n";
    let answer = raw_exchange(gw.addr("http"), raw.as_bytes(), LIMIT).await;
    // Three answers (the fourth request is never read: the third closed the connection).
    assert_eq!(answer.matches("HTTP/1.1 200 OK").count(), 3, "{answer}");
    assert_eq!(
        answer.matches("connection: keep-alive").count(),
        2,
        "{answer}"
    );
    // The HEAD answer carries the length but no body: "o" appears twice, for the GETs.
    assert_eq!(answer.matches("content-length: 1").count(), 3, "{answer}");
    assert_eq!(answer.matches("\r\n\r\no").count(), 2, "{answer}");
}

/// `max_header_fields`: the default (100) refuses a head with 101 fields with 431; a listener
/// that allows 150 takes 140 (parsed past the stack array, into the heap) and refuses 151, over
/// HTTP/1.1 and over HTTP/2 (whose server bounds only the head's bytes: the request path
/// counts), where a browser's one-field-per-cookie crumbs count as one field.
#[tokio::test]
async fn the_header_field_limit_is_the_listeners_on_http1_and_http2() {
    let cfg = |extra: &str| {
        format!(
            "[log]\naccess_log = \"off\"\n[[listener]]\nname = \"http\"\naddress = \"127.0.0.1:0\"\n{extra}\n\
             [[route]]\nname = \"ok\"\nrespond = {{ status = 200, body = \"ok\" }}\n"
        )
    };
    let h1 = |addr, n: usize| async move {
        // `n` fields in all, with Host and Connection.
        let fields: String = (0..n - 2).map(|i| format!("x-f{i}: v\r\n")).collect();
        let raw = format!("GET / HTTP/1.1\r\nHost: x\r\n{fields}Connection: close\r\n\r\n");
        let answer = raw_exchange(addr, raw.as_bytes(), LIMIT).await;
        answer[9..12].parse::<u16>().unwrap()
    };
    let h2 = |addr, n: usize, cookies: usize| async move {
        let mut req = http::Request::get("http://x/");
        for i in 0..n {
            req = req.header(format!("x-f{i}"), "v");
        }
        for i in 0..cookies {
            req = req.header("cookie", format!("c{i}=v"));
        }
        let req = req
            .body(http_body_util::Full::new(bytes::Bytes::new()))
            .unwrap();
        http2_send(tokio::net::TcpStream::connect(addr).await.unwrap(), req)
            .await
            .status
    };
    let default = TestGateway::plain(&cfg("")).await;
    let addr = default.addr("http");
    assert_eq!(h1(addr, 100).await, 200);
    assert_eq!(h1(addr, 101).await, 431);
    assert_eq!(h2(addr, 100, 0).await, 200);
    assert_eq!(h2(addr, 101, 0).await, 431);
    assert_eq!(
        h2(addr, 90, 30).await,
        200,
        "30 cookie crumbs are one field"
    );
    let wide = TestGateway::plain(&cfg("max_header_fields = 150")).await;
    let addr = wide.addr("http");
    assert_eq!(h1(addr, 140).await, 200);
    assert_eq!(h1(addr, 150).await, 200);
    assert_eq!(h1(addr, 151).await, 431);
    assert_eq!(h2(addr, 150, 0).await, 200);
    assert_eq!(h2(addr, 151, 0).await, 431);
}
