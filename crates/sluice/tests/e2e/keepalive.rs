//! Keep-alive connections to HTTP/1.1 upstreams (`[[upstream]] keepalive`,
//! `keepalive_timeout`): reused while alive, never reused once the server closed them,
//! closed when idle too long, not kept at all with `keepalive = 0`.

use crate::support::*;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A raw HTTP/1.1 origin that answers `ok` to every request and counts the connections it
/// accepted and those the gateway closed. With `close_after_response` it closes each
/// connection after its first response without announcing it (no `Connection: close`), as
/// a server whose idle timeout struck would.
pub(crate) struct RawOrigin {
    pub(crate) addr: SocketAddr,
    pub(crate) accepted: Arc<AtomicUsize>,
    closed_by_gateway: Arc<AtomicUsize>,
}

pub(crate) async fn raw_origin(close_after_response: bool) -> RawOrigin {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let closed_by_gateway = Arc::new(AtomicUsize::new(0));
    let (a, c) = (accepted.clone(), closed_by_gateway.clone());
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            a.fetch_add(1, Ordering::SeqCst);
            let c = c.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    let n = match tcp.read(&mut chunk).await {
                        Ok(0) | Err(_) => {
                            c.fetch_add(1, Ordering::SeqCst);
                            return;
                        }
                        Ok(n) => n,
                    };
                    buf.extend_from_slice(&chunk[..n]);
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        buf.drain(..end + 4);
                        let answer = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 2\r\n\r\nok";
                        if tcp.write_all(answer).await.is_err() {
                            return;
                        }
                        if close_after_response {
                            return;
                        }
                    }
                }
            });
        }
    });
    RawOrigin {
        addr,
        accepted,
        closed_by_gateway,
    }
}

async fn gateway(origin: &RawOrigin, upstream_extra: &str) -> TestGateway {
    TestGateway::plain(&format!(
        r#"
[log]
access_log = "off"
[[listener]]
name = "http"
address = "127.0.0.1:0"
[[upstream]]
name = "o"
servers = [{{ address = "{}" }}]
{upstream_extra}
[[route]]
name = "all"
upstream = "o"
"#,
        origin.addr
    ))
    .await
}

#[tokio::test]
async fn sequential_requests_reuse_one_upstream_connection() {
    let origin = raw_origin(false).await;
    let gw = gateway(&origin, "").await;
    for i in 0..5 {
        let got = http1_get(gw.addr("http"), "x", &format!("/r{i}")).await;
        assert_eq!((got.status, got.body.as_str()), (200, "ok"), "request {i}");
    }
    assert_eq!(origin.accepted.load(Ordering::SeqCst), 1);
    assert_eq!(origin.closed_by_gateway.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn keepalive_zero_keeps_no_connection() {
    let origin = raw_origin(false).await;
    let gw = gateway(&origin, "keepalive = 0").await;
    for i in 0..3 {
        assert_eq!(
            http1_get(gw.addr("http"), "x", "/").await.status,
            200,
            "{i}"
        );
    }
    assert_eq!(origin.accepted.load(Ordering::SeqCst), 3);
    wait_until(|| origin.closed_by_gateway.load(Ordering::SeqCst) == 3).await;
}

#[tokio::test]
async fn a_connection_the_server_closed_is_not_reused() {
    let origin = raw_origin(true).await;
    let gw = gateway(&origin, "").await;
    for i in 1..=3 {
        let got = http1_get(gw.addr("http"), "x", "/").await;
        assert_eq!((got.status, got.body.as_str()), (200, "ok"), "request {i}");
        assert_eq!(origin.accepted.load(Ordering::SeqCst), i);
        // Let the gateway's side of the connection see the close before the next request
        // (a request written into a connection as it closes is a race no client wins).
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

#[tokio::test]
async fn idle_upstream_connections_close_after_keepalive_timeout() {
    let origin = raw_origin(false).await;
    let gw = gateway(&origin, "keepalive_timeout = \"200ms\"").await;
    assert_eq!(http1_get(gw.addr("http"), "x", "/").await.status, 200);
    assert_eq!(origin.accepted.load(Ordering::SeqCst), 1);
    // No further request comes to find it: the pool closes it by itself.
    wait_until(|| origin.closed_by_gateway.load(Ordering::SeqCst) == 1).await;
    assert_eq!(http1_get(gw.addr("http"), "x", "/").await.status, 200);
    assert_eq!(origin.accepted.load(Ordering::SeqCst), 2);
}

/// More requests in flight than `keepalive`: the connections they opened are kept while the
/// traffic needs them (NGINX would close all but `keepalive` after each round and open them
/// again), and those no request needs are closed after a sweep period, down to `keepalive`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_keepalive_are_kept_while_used_then_closed() {
    let origin = raw_origin(false).await;
    let gw = gateway(&origin, "keepalive = 2").await;
    let at = gw.addr("http");
    for round in 0..10 {
        let requests: Vec<_> = (0..8)
            .map(|i| tokio::spawn(async move { http1_get(at, "x", &format!("/r{i}")).await }))
            .collect();
        for r in requests {
            assert_eq!(r.await.unwrap().status, 200, "round {round}");
        }
    }
    let opened = origin.accepted.load(Ordering::SeqCst);
    // At most 8 at once, whatever the order the gateway ran them in; each round would
    // otherwise open about 6 again (over 50 in all).
    assert!(
        opened <= 16,
        "{opened} connections for 10 rounds of 8 at once"
    );
    // No more traffic: all but keepalive's 2 are closed by the sweeper.
    let surplus = opened.saturating_sub(2);
    wait_until(|| origin.closed_by_gateway.load(Ordering::SeqCst) == surplus).await;
}
