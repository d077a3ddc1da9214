//! Layer 4: TCP listeners (plain, TLS-terminated, TLS passthrough by server name) and the
//! PROXY protocol, received from a trusted balancer and sent to upstreams that ask for it.

use crate::support::*;
use boring::ssl::{SslAcceptor, SslMethod};
use bytes::Bytes;
use http_body_util::Full;
use sluice_tls::selfsigned::{KeyKind, generate};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const LIMIT: Duration = Duration::from_secs(10);

/// A server that reads until the client's end of stream, then answers what it got and
/// closes: it answers only if the gateway passed the client's half-close on.
async fn answer_after_eof() -> SocketAddr {
    let socket = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = socket.accept().await {
            tokio::spawn(async move {
                let mut got = Vec::new();
                if tcp.read_to_end(&mut got).await.is_ok() {
                    let reply = format!("got {}: {}", got.len(), String::from_utf8_lossy(&got));
                    let _ = tcp.write_all(reply.as_bytes()).await;
                }
            });
        }
    });
    addr
}

/// A server that sends back every byte as it arrives.
async fn echo() -> SocketAddr {
    let socket = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = socket.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = tcp.into_split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    addr
}

/// A certificate for `host` issued by a CA whose certificate `dir/ca.crt` holds.
pub(crate) fn issued(
    dir: &std::path::Path,
    host: &str,
) -> (
    boring::x509::X509,
    boring::pkey::PKey<boring::pkey::Private>,
) {
    issue(dir, "ca", "Origins CA", None, &[]);
    let read = |f: &str| std::fs::read(dir.join(f)).unwrap();
    let ca = boring::x509::X509::from_pem(&read("ca.crt")).unwrap();
    let ca_key = boring::pkey::PKey::private_key_from_pem(&read("ca.key")).unwrap();
    issue(dir, "leaf", host, Some((&ca, &ca_key)), &[host]);
    (
        boring::x509::X509::from_pem(&read("leaf.crt")).unwrap(),
        boring::pkey::PKey::private_key_from_pem(&read("leaf.key")).unwrap(),
    )
}

/// A TLS server for `host` (its certificate from `issued`) that writes `name` and closes.
async fn tls_origin_in(
    dir: &std::path::Path,
    host: &'static str,
    name: &'static str,
) -> SocketAddr {
    let (cert, key) = issued(dir, host);
    naming_tls_server(acceptor(&cert, &key), name).await
}

/// A TLS server for `host` (self-signed) that writes `name` after its handshake and closes.
async fn tls_origin(host: &'static str, name: &'static str) -> SocketAddr {
    let (cert, key) = generate(KeyKind::EcdsaP256, &[host], 30).unwrap();
    naming_tls_server(acceptor(&cert, &key), name).await
}

pub(crate) fn acceptor(
    cert: &boring::x509::X509,
    key: &boring::pkey::PKey<boring::pkey::Private>,
) -> SslAcceptor {
    let mut b = SslAcceptor::mozilla_intermediate_v5(SslMethod::tls()).unwrap();
    b.set_certificate(cert).unwrap();
    b.set_private_key(key).unwrap();
    b.build()
}

/// Serves TLS with `acceptor`: every connection gets `name`, then a close.
pub(crate) async fn naming_tls_server(acceptor: SslAcceptor, name: &'static str) -> SocketAddr {
    let socket = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = socket.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                if let Ok(mut s) = tokio_boring::accept(&acceptor, tcp).await {
                    let _ = s.write_all(name.as_bytes()).await;
                    let _ = s.shutdown().await;
                }
            });
        }
    });
    addr
}

/// An HTTP/1.1 server that requires a PROXY protocol header (v1 or v2) on every connection
/// and answers each request with the client address the header named (`LOCAL` for a health
/// check's); a connection without a valid header is closed.
async fn proxy_protocol_origin() -> SocketAddr {
    let socket = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = socket.accept().await {
            tokio::spawn(async move {
                let Some(source) = read_proxy_header(&mut tcp).await else {
                    return;
                };
                let svc = hyper::service::service_fn(move |_req| {
                    let body = format!("source={source}");
                    async move {
                        Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(
                            Bytes::from(body),
                        )))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(tcp), svc)
                    .await;
            });
        }
    });
    addr
}

/// Reads one PROXY header byte by byte (v1 to its CRLF, v2 by its length): the source
/// address, or "LOCAL".
async fn read_proxy_header(tcp: &mut TcpStream) -> Option<String> {
    // Twelve bytes: v2's signature, and shorter than any v1 header.
    let mut buf = vec![0u8; 12];
    tcp.read_exact(&mut buf).await.ok()?;
    if buf.starts_with(b"\r\n\r\n\0\r\nQUIT\n") {
        let mut more = [0u8; 4];
        tcp.read_exact(&mut more).await.ok()?;
        buf.extend_from_slice(&more);
        let len = u16::from_be_bytes([buf[14], buf[15]]) as usize;
        let mut rest = vec![0u8; len];
        tcp.read_exact(&mut rest).await.ok()?;
        buf.extend_from_slice(&rest);
    } else {
        while !buf.ends_with(b"\r\n") && buf.len() < 108 {
            let mut b = [0u8; 1];
            tcp.read_exact(&mut b).await.ok()?;
            buf.push(b[0]);
        }
    }
    match ppp::HeaderResult::parse(&buf) {
        ppp::HeaderResult::V1(Ok(h)) => match h.addresses {
            ppp::v1::Addresses::Tcp4(a) => {
                Some(format!("v1 {}:{}", a.source_address, a.source_port))
            }
            ppp::v1::Addresses::Tcp6(a) => {
                Some(format!("v1 [{}]:{}", a.source_address, a.source_port))
            }
            ppp::v1::Addresses::Unknown => Some("v1 LOCAL".into()),
        },
        ppp::HeaderResult::V2(Ok(h)) => match (h.command, h.addresses) {
            (ppp::v2::Command::Proxy, ppp::v2::Addresses::IPv4(a)) => {
                Some(format!("v2 {}:{}", a.source_address, a.source_port))
            }
            (ppp::v2::Command::Proxy, ppp::v2::Addresses::IPv6(a)) => {
                Some(format!("v2 [{}]:{}", a.source_address, a.source_port))
            }
            (ppp::v2::Command::Local, _) => Some("v2 LOCAL".into()),
            _ => None,
        },
        _ => None,
    }
}

/// Writes `first`, half-closes, and reads the answer to its end.
pub(crate) async fn exchange(addr: SocketAddr, first: &[u8]) -> String {
    talk(addr, first, true).await
}

/// Writes `first` and reads the answer to its end, half-closing after the write or not
/// (hyper's HTTP/1 server takes a client's half-close for the end of the connection).
async fn talk(addr: SocketAddr, first: &[u8], half_close: bool) -> String {
    let run = async {
        let mut tcp = TcpStream::connect(addr).await.unwrap();
        tcp.write_all(first).await.unwrap();
        if half_close {
            tcp.shutdown().await.unwrap();
        }
        let mut got = Vec::new();
        let _ = tcp.read_to_end(&mut got).await;
        String::from_utf8_lossy(&got).into_owned()
    };
    tokio::time::timeout(LIMIT, run)
        .await
        .expect("the exchange ended")
}

#[tokio::test]
async fn a_tcp_listener_passes_bytes_and_half_closes_and_skips_a_server_that_refuses() {
    let live = answer_after_eof().await;
    let dead = dead_port().await;
    let gw = TestGateway::plain(&format!(
        r#"
[[listener]]
name = "db"
address = "127.0.0.1:0"
kind = "tcp"
upstream = "db"
[[upstream]]
name = "db"
servers = [{{ address = "{dead}" }}, {{ address = "{live}" }}]
max_fails = 1
fail_timeout = "30s"
"#
    ))
    .await;
    let addr = gw.addr("db");
    for i in 0..4 {
        let payload = format!("message {i} {}", "x".repeat(100_000));
        let got = exchange(addr, payload.as_bytes()).await;
        assert_eq!(
            got,
            format!("got {}: {payload}", payload.len()),
            "connection {i}"
        );
    }
    let m = gw.gateway().metrics();
    wait_until(|| m.snapshot().tcp[0] == 4).await;
    let s = m.snapshot();
    assert_eq!(s.tcp, [4, 0, 0, 0, 0], "all proxied");
    assert_eq!(
        s.upstream_errors[0], 1,
        "the refusing server was tried once, then skipped"
    );
    let health = gw.gateway().upstream_health();
    assert!(
        !health[0].servers[0].up && health[0].servers[1].up,
        "{health:?}"
    );
}

#[tokio::test]
async fn a_tcp_listener_with_no_server_left_closes_and_counts_it() {
    let dead = dead_port().await;
    let gw = TestGateway::plain(&format!(
        r#"
[[listener]]
name = "db"
address = "127.0.0.1:0"
kind = "tcp"
upstream = "db"
deny = ["10.0.0.0/8"]
[[upstream]]
name = "db"
servers = [{{ address = "{dead}" }}]
"#
    ))
    .await;
    assert_eq!(exchange(gw.addr("db"), b"hello").await, "");
    let m = gw.gateway().metrics();
    wait_until(|| m.snapshot().tcp[4] == 1).await;
    assert_eq!(m.snapshot().tcp, [0, 0, 0, 0, 1]);
}

#[tokio::test]
async fn an_idle_tcp_connection_is_closed_after_idle_timeout() {
    let server = echo().await;
    let gw = TestGateway::plain(&format!(
        r#"
[[listener]]
name = "t"
address = "127.0.0.1:0"
kind = "tcp"
upstream = "e"
idle_timeout = "300ms"
[[upstream]]
name = "e"
servers = [{{ address = "{server}" }}]
"#
    ))
    .await;
    let mut tcp = TcpStream::connect(gw.addr("t")).await.unwrap();
    tcp.write_all(b"ping").await.unwrap();
    let mut buf = [0u8; 4];
    tcp.read_exact(&mut buf).await.unwrap();
    assert_eq!(&buf, b"ping");
    // Then nothing either way: the gateway closes it.
    let mut rest = Vec::new();
    let n = tokio::time::timeout(LIMIT, tcp.read_to_end(&mut rest))
        .await
        .expect("closed by the gateway")
        .unwrap_or(0);
    assert_eq!(n, 0);
    let m = gw.gateway().metrics();
    wait_until(|| m.snapshot().tcp[0] == 1).await;
}

/// Terminates TLS with the gateway's certificates and engine, then passes plain bytes.
#[tokio::test]
async fn a_tls_terminating_tcp_listener_signs_its_handshakes_on_the_pool() {
    let c = tls_terminating(r#"["pool"]"#, 3).await;
    let (pool, inline) = (&c[0], &c[1]);
    assert_eq!(
        (pool.engine.as_str(), pool.submitted),
        ("pool", 3),
        "every signature offered to the pool: {c:?}"
    );
    // A job that misses the pool's deadline on a loaded machine finishes inline.
    assert_eq!(pool.completed + inline.completed, 3, "{c:?}");
}

/// With `mb` first: batches where the CPU has AVX-512 IFMA, else every job passes on to the
/// pool (`Unsupported`) and the handshakes still succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_terminating_tcp_listener_signs_its_handshakes_on_mb_or_passes_them_on() {
    let c = tls_terminating(r#"["mb", "pool"]"#, 8).await;
    let (mb, pool, inline) = (&c[0], &c[1], &c[2]);
    assert_eq!(mb.engine, "mb", "{c:?}");
    assert_eq!(mb.completed + pool.completed + inline.completed, 8, "{c:?}");
    if sluice_crypto::Kernel::detect_lanes(8).is_some() {
        assert!(mb.completed >= 1, "{c:?}");
    } else {
        assert_eq!(mb.routed_past, 8, "{c:?}");
    }
}

/// `n` TLS connections, one line echoed on each, through a TLS-terminating TCP listener
/// whose crypto engines are `engines`; the crypto counters after.
async fn tls_terminating(engines: &str, n: usize) -> Vec<sluice_offload::CountersSnapshot> {
    let server = echo().await;
    let dir = tempfile::tempdir().unwrap();
    write_cert(dir.path(), "site", KeyKind::Rsa2048, &["db.test"]);
    let gw = TestGateway::start(
        &format!(
            r#"
[offload.crypto]
engines = {engines}
[[listener]]
name = "tls"
address = "127.0.0.1:0"
kind = "tcp"
upstream = "e"
[listener.tls]
session_tickets = false
[[certificate]]
name = "site"
cert = "site.crt"
key = "site.key"
[[upstream]]
name = "e"
servers = [{{ address = "{server}" }}]
"#
        ),
        dir,
    )
    .await;
    let handshakes = (0..n).map(|i| {
        let addr = gw.addr("tls");
        tokio::spawn(async move {
            let mut h = tls_connect(
                addr,
                &ClientOpts {
                    sni: Some("db.test"),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
            assert!(h.key_is_rsa, "the gateway's certificate");
            let line = format!("line {i}\n");
            h.stream.write_all(line.as_bytes()).await.unwrap();
            let mut back = vec![0u8; line.len()];
            h.stream.read_exact(&mut back).await.unwrap();
            assert_eq!(back, line.as_bytes());
        })
    });
    for t in handshakes.collect::<Vec<_>>() {
        t.await.unwrap();
    }
    let m = gw.gateway().metrics().snapshot();
    assert_eq!(m.handshakes[1], [n as u64, 0], "TLS 1.3, none resumed");
    gw.gateway().crypto_counters()
}

async fn passthrough_gateway(default: &str) -> (TestGateway, SocketAddr) {
    let a = tls_origin("a.test", "origin A").await;
    let b = tls_origin("b.example", "origin B").await;
    let gw = TestGateway::plain(&format!(
        r#"
[[listener]]
name = "pass"
address = "127.0.0.1:0"
kind = "tcp"
{default}
passthrough = {{ "a.test" = "a", "*.example" = "b" }}
[[upstream]]
name = "a"
servers = [{{ address = "{a}" }}]
[[upstream]]
name = "b"
servers = [{{ address = "{b}" }}]
"#
    ))
    .await;
    let addr = gw.addr("pass");
    (gw, addr)
}

async fn read_all_tls(mut h: Handshake) -> String {
    let mut got = Vec::new();
    let _ = h.stream.read_to_end(&mut got).await;
    String::from_utf8_lossy(&got).into_owned()
}

#[tokio::test]
async fn passthrough_routes_by_server_name_and_the_client_sees_the_origins_certificate() {
    let (gw, addr) = passthrough_gateway("").await;
    for (sni, origin) in [
        ("a.test", "origin A"),
        ("b.example", "origin B"),
        ("a.test", "origin A"),
    ] {
        let h = tls_connect(
            addr,
            &ClientOpts {
                sni: Some(sni),
                ..Default::default()
            },
        )
        .await
        .unwrap();
        let cert = h.stream.ssl().peer_certificate().unwrap();
        let names: Vec<String> = cert
            .subject_alt_names()
            .unwrap()
            .iter()
            .filter_map(|n| n.dnsname().map(str::to_owned))
            .collect();
        assert_eq!(names, [sni], "the origin's own certificate, end to end");
        assert_eq!(read_all_tls(h).await, origin);
    }
    // A name no entry takes, and no default: closed.
    let err = tls_connect(
        addr,
        &ClientOpts {
            sni: Some("c.other"),
            ..Default::default()
        },
    )
    .await;
    assert!(err.is_err());
    let m = gw.gateway().metrics();
    wait_until(|| m.snapshot().tcp[0] == 3 && m.snapshot().tcp[3] == 1).await;
}

#[tokio::test]
async fn passthrough_sends_unlisted_names_to_its_default_upstream() {
    let (_gw, addr) = passthrough_gateway("upstream = \"a\"").await;
    let h = tls_connect(addr, &ClientOpts::default()).await.unwrap();
    assert_eq!(read_all_tls(h).await, "origin A", "no SNI at all");
    let h = tls_connect(
        addr,
        &ClientOpts {
            sni: Some("zzz.invalid"),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(read_all_tls(h).await, "origin A");
}

#[tokio::test]
async fn truncated_garbage_and_oversized_client_hellos_are_closed_and_counted() {
    let (gw, addr) = passthrough_gateway("upstream = \"a\"").await;
    // A record header that promises a hello, then the end of stream.
    assert_eq!(exchange(addr, &[22, 3, 1, 0, 200, 1, 0, 0]).await, "");
    // Not TLS at all.
    assert_eq!(
        exchange(addr, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").await,
        ""
    );
    // A 64 KiB hello: four full records of handshake bytes.
    let mut big = Vec::new();
    let body_len: u32 = 64 * 1024;
    let mut message = vec![1u8];
    message.extend_from_slice(&body_len.to_be_bytes()[1..]);
    message.extend(std::iter::repeat_n(0u8, body_len as usize));
    for chunk in message.chunks(16 * 1024) {
        big.extend_from_slice(&[22, 3, 1]);
        big.extend_from_slice(&(chunk.len() as u16).to_be_bytes());
        big.extend_from_slice(chunk);
    }
    assert_eq!(exchange(addr, &big).await, "");
    let m = gw.gateway().metrics();
    wait_until(|| m.snapshot().tcp[2] == 3).await;
    // The listener still serves.
    let h = tls_connect(addr, &ClientOpts::default()).await.unwrap();
    assert_eq!(read_all_tls(h).await, "origin A");
    wait_until(|| m.snapshot().tcp[0] == 1).await;
    let (admin, _task) = admin_for(&gw).await;
    let metrics = http1_get(admin, "localhost", "/metrics").await.body;
    for line in [
        "sluice_tcp_connections_total{outcome=\"proxied\"} 1",
        "sluice_tcp_connections_total{outcome=\"bad_client_hello\"} 3",
        "sluice_tcp_connections_total{outcome=\"no_upstream\"} 0",
    ] {
        assert!(metrics.contains(line), "{line} in {metrics}");
    }
}

fn v2_header(source: SocketAddr, destination: SocketAddr, tlvs: bool) -> Vec<u8> {
    let mut b = ppp::v2::Builder::with_addresses(
        ppp::v2::Version::Two | ppp::v2::Command::Proxy,
        ppp::v2::Protocol::Stream,
        (source, destination),
    );
    if tlvs {
        b = b
            .write_tlv(ppp::v2::Type::ALPN, b"http/1.1")
            .unwrap()
            .write_tlv(ppp::v2::Type::Authority, b"site.test")
            .unwrap();
    }
    b.build().unwrap()
}

/// The `/headers` answer of an origin, for one request after `prefix` on a new connection.
async fn headers_after(addr: SocketAddr, prefix: &[u8]) -> String {
    let mut req = prefix.to_vec();
    req.extend_from_slice(b"GET /headers HTTP/1.1\r\nHost: site.test\r\nConnection: close\r\n\r\n");
    talk(addr, &req, false).await
}

#[tokio::test]
async fn proxy_protocol_from_a_trusted_balancer_names_the_client_everywhere() {
    let origin = Origin::start("o").await;
    let gw = TestGateway::plain(&format!(
        r#"
[[listener]]
name = "lb"
address = "127.0.0.1:0"
proxy_protocol = true
trusted_proxies = ["127.0.0.1/32"]
deny = ["198.51.100.0/24"]
[[listener]]
name = "strict"
address = "127.0.0.1:0"
proxy_protocol = true
trusted_proxies = ["10.0.0.0/8"]
[[upstream]]
name = "o"
servers = [{{ address = "{}" }}]
[[route]]
name = "all"
upstream = "o"
"#,
        origin.addr
    ))
    .await;
    let lb = gw.addr("lb");
    let got = headers_after(lb, b"PROXY TCP4 192.0.2.9 127.0.0.1 5555 80\r\n").await;
    assert!(got.contains(r#""x-real-ip":"192.0.2.9""#), "{got}");
    assert!(got.contains(r#""x-forwarded-for":"192.0.2.9""#), "{got}");
    let v6 = v2_header(
        "[2001:db8::9]:4444".parse().unwrap(),
        "[2001:db8::1]:443".parse().unwrap(),
        true,
    );
    let got = headers_after(lb, &v6).await;
    assert!(
        got.contains(r#""x-real-ip":"2001:db8::9""#),
        "TLVs skipped: {got}"
    );
    // LOCAL (the balancer's own health check): the peer is the client.
    let local = ppp::v2::Builder::with_addresses(
        ppp::v2::Version::Two | ppp::v2::Command::Local,
        ppp::v2::Protocol::Unspecified,
        ppp::v2::Addresses::Unspecified,
    )
    .build()
    .unwrap();
    let got = headers_after(lb, &local).await;
    assert!(got.contains(r#""x-real-ip":"127.0.0.1""#), "{got}");
    // The listener's deny list sees the proxied client.
    let got = headers_after(lb, b"PROXY TCP4 198.51.100.7 127.0.0.1 5555 80\r\n").await;
    assert!(got.starts_with("HTTP/1.1 403"), "{got}");
    // No header at all: closed without an answer.
    assert_eq!(headers_after(lb, b"").await, "");
    // A peer outside trusted_proxies: closed, header or not.
    let strict = gw.addr("strict");
    assert_eq!(
        headers_after(strict, b"PROXY TCP4 192.0.2.9 127.0.0.1 5555 80\r\n").await,
        ""
    );
    let m = gw.gateway().metrics().snapshot();
    assert_eq!(
        m.proxy_protocol,
        [4, 1, 1, 0],
        "accepted, untrusted, malformed, timeout"
    );
    assert_eq!(origin.hits(), 3);
}

#[tokio::test]
async fn a_proxy_protocol_header_that_never_completes_times_out() {
    let origin = Origin::start("o").await;
    let gw = TestGateway::plain(&format!(
        r#"
[[listener]]
name = "lb"
address = "127.0.0.1:0"
proxy_protocol = true
trusted_proxies = ["127.0.0.0/8"]
header_read_timeout = "300ms"
[[upstream]]
name = "o"
servers = [{{ address = "{}" }}]
[[route]]
name = "all"
upstream = "o"
"#,
        origin.addr
    ))
    .await;
    let mut tcp = TcpStream::connect(gw.addr("lb")).await.unwrap();
    tcp.write_all(b"PROXY TCP4 192.0.2.9 ").await.unwrap();
    let mut rest = Vec::new();
    let n = tokio::time::timeout(LIMIT, tcp.read_to_end(&mut rest))
        .await
        .expect("closed by the gateway")
        .unwrap_or(0);
    assert_eq!(n, 0);
    assert_eq!(
        gw.gateway().metrics().snapshot().proxy_protocol,
        [0, 0, 0, 1]
    );
}

#[tokio::test]
async fn upstreams_that_ask_for_it_get_the_client_in_a_proxy_protocol_header() {
    let checking = proxy_protocol_origin().await;
    let gw = TestGateway::plain(&format!(
        r#"
[[listener]]
name = "http"
address = "127.0.0.1:0"
proxy_protocol = true
trusted_proxies = ["127.0.0.1/32"]
[[listener]]
name = "tcp"
address = "127.0.0.1:0"
kind = "tcp"
upstream = "v2"
proxy_protocol = true
trusted_proxies = ["127.0.0.1/32"]
[[upstream]]
name = "v1"
servers = [{{ address = "{checking}" }}]
send_proxy_protocol = "v1"
[upstream.health_check]
interval = "100ms"
[[upstream]]
name = "v2"
servers = [{{ address = "{checking}" }}]
send_proxy_protocol = "v2"
[[route]]
name = "all"
upstream = "v1"
"#
    ))
    .await;
    // HTTP: the client the balancer named, on connections of that client only.
    for client in ["192.0.2.1", "192.0.2.2", "192.0.2.1"] {
        let header = format!("PROXY TCP4 {client} 127.0.0.1 7000 80\r\n");
        let got = headers_after(gw.addr("http"), header.as_bytes()).await;
        assert!(got.ends_with(&format!("source=v1 {client}:7000")), "{got}");
    }
    // TCP, v2, IPv6.
    let header = v2_header(
        "[2001:db8::5]:6000".parse().unwrap(),
        "[2001:db8::1]:5432".parse().unwrap(),
        false,
    );
    let got = headers_after(gw.addr("tcp"), &header).await;
    assert!(got.ends_with("source=v2 [2001:db8::5]:6000"), "{got}");
    // The health checks spoke PROXY too (a LOCAL header), so the server stays up.
    // (Three failed checks 100 ms apart would have marked it down by now.)
    tokio::time::sleep(Duration::from_millis(800)).await;
    let health = gw.gateway().upstream_health();
    assert!(health[0].servers[0].up, "{health:?}");
}

#[tokio::test]
async fn a_plain_request_through_the_http_listener_still_works_after_a_proxied_one() {
    // The pool keeps connections of different clients apart, and a client's own connection
    // is reused for its next request.
    let checking = proxy_protocol_origin().await;
    let gw = TestGateway::plain(&format!(
        r#"
[[listener]]
name = "http"
address = "127.0.0.1:0"
[[upstream]]
name = "v1"
servers = [{{ address = "{checking}" }}]
send_proxy_protocol = "v1"
[[route]]
name = "all"
upstream = "v1"
"#
    ))
    .await;
    let addr = gw.addr("http");
    let mut sender = http1_sender::<Full<Bytes>>(addr).await;
    let mut seen = Vec::new();
    for _ in 0..3 {
        let req = http::Request::get("/")
            .header("host", "x")
            .body(Full::new(Bytes::new()))
            .unwrap();
        let got = collect(sender.send_request(req).await.unwrap()).await;
        seen.push(got.body);
    }
    assert!(seen[0].starts_with("source=v1 127.0.0.1:"), "{seen:?}");
    assert!(
        seen.iter().all(|s| s == &seen[0]),
        "one client connection, one source: {seen:?}"
    );
    let other = http1_get(addr, "x", "/").await;
    assert!(other.body.starts_with("source=v1 127.0.0.1:"));
    assert_ne!(
        other.body, seen[0],
        "another client connection is another source"
    );
}

/// A server that writes `name` on every connection and then echoes.
async fn named_echo(name: &'static str) -> SocketAddr {
    let socket = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = socket.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = tcp.into_split();
                if w.write_all(name.as_bytes()).await.is_ok() {
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                }
            });
        }
    });
    addr
}

#[tokio::test]
async fn a_reload_sends_new_tcp_connections_to_the_new_upstream_and_keeps_open_ones() {
    let (a, b) = (named_echo("A").await, named_echo("B").await);
    let config = |server: SocketAddr| {
        format!(
            r#"
[[listener]]
name = "t"
address = "127.0.0.1:0"
kind = "tcp"
upstream = "u"
[[upstream]]
name = "u"
servers = [{{ address = "{server}" }}]
"#
        )
    };
    let gw = TestGateway::plain(&config(a)).await;
    let addr = gw.addr("t");
    let mut open = TcpStream::connect(addr).await.unwrap();
    let mut first = [0u8; 1];
    open.read_exact(&mut first).await.unwrap();
    assert_eq!(&first, b"A");

    gw.reload(&config(b)).await.unwrap();
    assert_eq!(gw.addr("t"), addr, "the socket stays");
    let mut new = TcpStream::connect(addr).await.unwrap();
    new.read_exact(&mut first).await.unwrap();
    assert_eq!(&first, b"B", "a new connection goes to the new upstream");
    // The connection opened before the reload still talks to A.
    open.write_all(b"still here").await.unwrap();
    let mut back = [0u8; 10];
    open.read_exact(&mut back).await.unwrap();
    assert_eq!(&back, b"still here");
}

#[tokio::test]
async fn a_tcp_listener_reaches_a_tls_upstream_and_verifies_its_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let origin = tls_origin_in(dir.path(), "db.internal", "secure origin").await;
    let gw = TestGateway::start(
        &format!(
            r#"
[[listener]]
name = "good"
address = "127.0.0.1:0"
kind = "tcp"
upstream = "good"
[[listener]]
name = "wrong-name"
address = "127.0.0.1:0"
kind = "tcp"
upstream = "wrong-name"
[[listener]]
name = "unknown-ca"
address = "127.0.0.1:0"
kind = "tcp"
upstream = "unknown-ca"
[[upstream]]
name = "good"
servers = [{{ address = "{origin}" }}]
[upstream.tls]
server_name = "db.internal"
ca = "ca.crt"
[[upstream]]
name = "wrong-name"
servers = [{{ address = "{origin}" }}]
[upstream.tls]
server_name = "other.internal"
ca = "ca.crt"
[[upstream]]
name = "unknown-ca"
servers = [{{ address = "{origin}" }}]
[upstream.tls]
server_name = "db.internal"
"#
        ),
        dir,
    )
    .await;
    // The client speaks plain TCP; the gateway speaks TLS to the origin.
    assert_eq!(exchange(gw.addr("good"), b"").await, "secure origin");
    // A certificate for another name, or from a CA the gateway does not trust: no server.
    assert_eq!(exchange(gw.addr("wrong-name"), b"").await, "");
    assert_eq!(exchange(gw.addr("unknown-ca"), b"").await, "");
    let m = gw.gateway().metrics();
    wait_until(|| m.snapshot().tcp[0] == 1 && m.snapshot().tcp[4] == 2).await;
}

/// An HTTPS origin (hyper over BoringSSL) that answers every request with `name`.
async fn https_origin(dir: &std::path::Path, host: &'static str, name: &'static str) -> SocketAddr {
    let (cert, key) = issued(dir, host);
    let acceptor = acceptor(&cert, &key);
    let socket = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = socket.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(s) = tokio_boring::accept(&acceptor, tcp).await else {
                    return;
                };
                let svc = hyper::service::service_fn(
                    move |req: http::Request<hyper::body::Incoming>| async move {
                        let body = format!("{name} {}", req.uri().path());
                        Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(
                            Bytes::from(body),
                        )))
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(s), svc)
                    .await;
            });
        }
    });
    addr
}

#[tokio::test]
async fn http_routes_reach_tls_upstreams_with_health_checks_over_tls() {
    let dir = tempfile::tempdir().unwrap();
    let origin = https_origin(dir.path(), "app.internal", "tls app").await;
    let gw = TestGateway::start(
        &format!(
            r#"
[[listener]]
name = "http"
address = "127.0.0.1:0"
[[upstream]]
name = "app"
servers = [{{ address = "{origin}" }}]
[upstream.tls]
server_name = "app.internal"
ca = "ca.crt"
[upstream.health_check]
interval = "100ms"
[[route]]
name = "all"
upstream = "app"
"#
        ),
        dir,
    )
    .await;
    let addr = gw.addr("http");
    let mut sender = http1_sender::<Full<Bytes>>(addr).await;
    for path in ["/a", "/b", "/c"] {
        let req = http::Request::get(path)
            .header("host", "x")
            .body(Full::new(Bytes::new()))
            .unwrap();
        let got = collect(sender.send_request(req).await.unwrap()).await;
        assert_eq!(
            (got.status, got.body.as_str()),
            (200, format!("tls app {path}").as_str())
        );
    }
    // Checks over TLS pass (three failures 100 ms apart would have marked it down).
    tokio::time::sleep(Duration::from_millis(800)).await;
    let health = gw.gateway().upstream_health();
    assert!(health[0].servers[0].up, "{health:?}");
}

#[tokio::test]
async fn each_tcp_connection_ends_with_one_access_log_line() {
    let server = echo().await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let text = format!(
        r#"
[log]
access_log = "{}"
[[listener]]
name = "t"
address = "127.0.0.1:0"
kind = "tcp"
upstream = "e"
[[listener]]
name = "pass"
address = "127.0.0.1:0"
kind = "tcp"
passthrough = {{ "a.test" = "e" }}
[[upstream]]
name = "e"
servers = [{{ address = "{server}" }}]
"#,
        log.display()
    );
    let snapshot = sluice_config::load_str(&text, "t.toml", dir.path()).unwrap();
    let gw = sluice_proxy::Gateway::start(std::sync::Arc::new(snapshot))
        .await
        .unwrap();
    let mut tcp = TcpStream::connect(gw.local_addr("t").unwrap())
        .await
        .unwrap();
    tcp.write_all(b"ping").await.unwrap();
    let mut back = [0u8; 4];
    tcp.read_exact(&mut back).await.unwrap();
    drop(tcp);
    assert_eq!(
        exchange(gw.local_addr("pass").unwrap(), b"not tls").await,
        ""
    );
    let m = gw.metrics();
    wait_until(|| m.snapshot().tcp[0] == 1 && m.snapshot().tcp[2] == 1).await;
    gw.access_log().flush();
    let lines = std::fs::read_to_string(&log).unwrap();
    let proxied = lines
        .lines()
        .find(|l| l.contains(" t \"TCP - tcp\" "))
        .unwrap_or_else(|| panic!("no line for the proxied connection in:\n{lines}"));
    assert!(proxied.contains("\" 200 in=4 out=4 "), "{proxied}");
    assert!(proxied.contains(&format!("upstream={server}")), "{proxied}");
    let refused = lines
        .lines()
        .find(|l| l.contains(" pass \"TCP - tcp\" "))
        .unwrap_or_else(|| panic!("no line for the refused hello in:\n{lines}"));
    assert!(refused.contains("\" 400 "), "{refused}");
    assert_eq!(
        lines.lines().count(),
        2,
        "one line per connection:\n{lines}"
    );
}
