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
