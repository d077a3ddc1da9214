//! Reload in place (`Gateway::apply`, what SIGHUP, `sluice reload` and the admin API end in):
//! new routes, upstreams and certificates are served; open connections see them on their next
//! request; tunnels and streams are never cut; removed listeners drain; unchanged listeners,
//! upstream pools, engines and ticket keys are kept; a change that cannot apply changes nothing.

use crate::support::*;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use sluice_tls::selfsigned::KeyKind;
use std::sync::atomic::Ordering;

/// An HTTPS listener and a plain one in front of upstream `a`; `extra` is appended.
fn config(a: &Origin, extra: &str) -> String {
    format!(
        r#"
[global]
shutdown_timeout = "20s"

[[listener]]
name = "https"
address = "127.0.0.1:0"
[listener.tls]

[[listener]]
name = "http"
address = "127.0.0.1:0"

[[certificate]]
name = "a"
cert = "{{dir}}/a.crt"
key = "{{dir}}/a.key"

[[upstream]]
name = "a"
servers = [{{ address = "{}" }}]

[[route]]
name = "a"
upstream = "a"
{extra}"#,
        a.addr
    )
}

fn get(path: &str, host: &str) -> http::Request<Full<Bytes>> {
    http::Request::get(path)
        .header("host", host)
        .body(Full::new(Bytes::new()))
        .unwrap()
}

async fn https_get(gw: &TestGateway, sni: &'static str, path: &str) -> (Got, Vec<u8>) {
    let h = tls_connect(
        gw.addr("https"),
        &ClientOpts {
            sni: Some(sni),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let leaf = h.stream.ssl().peer_certificate().unwrap().to_der().unwrap();
    (http1_send(h.stream, get(path, sni)).await, leaf)
}

fn der(dir: &std::path::Path, stem: &str) -> Vec<u8> {
    let pem = std::fs::read(dir.join(format!("{stem}.crt"))).unwrap();
    boring::x509::X509::from_pem(&pem)
        .unwrap()
        .to_der()
        .unwrap()
}

#[tokio::test]
async fn a_reload_adds_a_route_an_upstream_and_a_certificate_and_they_are_served() {
    let (a, b) = (Origin::start("A").await, Origin::start("B").await);
    let dir = tempfile::tempdir().unwrap();
    write_cert(dir.path(), "a", KeyKind::EcdsaP256, &["a.test"]);
    write_cert(dir.path(), "b", KeyKind::EcdsaP256, &["b.test"]);
    let gw = TestGateway::start(&config(&a, ""), dir).await;
    let (got, leaf) = https_get(&gw, "b.test", "/whoami").await;
    assert_eq!((got.body.as_str(), &leaf), ("A", &der(gw.dir(), "a")));
    let https = gw.addr("https");

    let added = format!(
        r#"
[[certificate]]
name = "b"
cert = "{{dir}}/b.crt"
key = "{{dir}}/b.key"

[[upstream]]
name = "b"
servers = [{{ address = "{}" }}]

[[route]]
name = "b"
hosts = ["b.test"]
upstream = "b"
"#,
        b.addr
    );
    let report = gw.reload(&config(&a, &added)).await.unwrap();
    assert_eq!((report.upstreams_kept, report.upstreams_new), (1, 1));
    assert_eq!(report.tls_rebuilt, vec!["https".to_owned()]);
    assert!(report.listeners_added.is_empty() && report.listeners_removed.is_empty());
    assert!(
        !report.crypto_engines_rebuilt,
        "engines outlive a route change"
    );
    assert_eq!(gw.addr("https"), https, "the listener kept its socket");

    let (got, leaf) = https_get(&gw, "b.test", "/whoami").await;
    assert_eq!((got.body.as_str(), &leaf), ("B", &der(gw.dir(), "b")));
    let (got, _) = https_get(&gw, "a.test", "/whoami").await;
    assert_eq!(got.body, "A");

    // The same configuration again: nothing to do.
    let again = gw.reload(&config(&a, &added)).await.unwrap();
    assert!(again.unchanged, "{again:?}");
}

#[tokio::test]
async fn open_http1_and_http2_connections_see_a_new_route_on_their_next_request() {
    let (a, b) = (Origin::start("A").await, Origin::start("B").await);
    let dir = tempfile::tempdir().unwrap();
    write_cert(dir.path(), "a", KeyKind::EcdsaP256, &["a.test"]);
    let gw = TestGateway::start(&config(&a, ""), dir).await;

    let tcp = tokio::net::TcpStream::connect(gw.addr("http"))
        .await
        .unwrap();
    let (mut h2, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tcp),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    let mut h1 = http1_sender(gw.addr("http")).await;
    let before = collect(h2.send_request(get("/new", "x")).await.unwrap()).await;
    assert_eq!(before.body, "A /new");
    let before = collect(h1.send_request(get("/new", "x")).await.unwrap()).await;
    assert_eq!(before.body, "A /new");

    let route = format!(
        "[[upstream]]\nname = \"b\"\nservers = [{{ address = \"{}\" }}]\n[[route]]\nname = \"new\"\npath_prefix = \"/new\"\nupstream = \"b\"\n",
        b.addr
    );
    gw.reload(&config(&a, &route)).await.unwrap();
    let after = collect(h2.send_request(get("/new", "x")).await.unwrap()).await;
    assert_eq!((after.status, after.body.as_str()), (200, "B /new"));
    let after = collect(h1.send_request(get("/new", "x")).await.unwrap()).await;
    assert_eq!((after.status, after.body.as_str()), (200, "B /new"));
}

#[tokio::test]
async fn websockets_and_streams_survive_twenty_reloads() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    let a = Origin::start("A").await;
    let ws = ws_echo_server().await;
    let dir = tempfile::tempdir().unwrap();
    write_cert(dir.path(), "a", KeyKind::EcdsaP256, &["a.test"]);
    let ws_route = |keepalive: u32| {
        format!(
            "[[upstream]]\nname = \"ws\"\nkeepalive = {keepalive}\nservers = [{{ address = \"{ws}\" }}]\n[[route]]\nname = \"ws\"\npath_prefix = \"/chat\"\nupstream = \"ws\"\n"
        )
    };
    let gw = TestGateway::start(&config(&a, &ws_route(1)), dir).await;
    let addr = gw.addr("http");
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut socket, resp) = tokio_tungstenite::client_async(format!("ws://{addr}/chat"), tcp)
        .await
        .unwrap();
    assert_eq!(resp.status(), 101);
    let mut sender = http1_sender(addr).await;
    let mut stream = sender
        .send_request(get("/hold", "x"))
        .await
        .unwrap()
        .into_body();
    let first = stream.frame().await.unwrap().unwrap().into_data().unwrap();
    assert_eq!(first, "first chunk\n");

    for i in 0..20u32 {
        // Alternate two configurations; the second changes the WebSocket's upstream group,
        // so its old group (and pool) is replaced while the tunnel through it is open.
        let report = gw.reload(&config(&a, &ws_route(2 + i % 2))).await.unwrap();
        assert_eq!(report.upstreams_new, 1, "reload {i}: {report:?}");
        let text = format!("message {i}");
        socket.send(Message::text(text.clone())).await.unwrap();
        let echoed = socket.next().await.unwrap().unwrap();
        assert_eq!(echoed.into_text().unwrap().as_str(), text);
    }
    a.release.notify_one();
    let rest = stream.collect().await.unwrap().to_bytes();
    assert_eq!(
        rest, "second chunk\n",
        "the stream finished on the old configuration"
    );
}

#[tokio::test]
async fn a_removed_listener_drains_and_the_others_keep_their_sockets() {
    let a = Origin::start("A").await;
    let dir = tempfile::tempdir().unwrap();
    write_cert(dir.path(), "a", KeyKind::EcdsaP256, &["a.test"]);
    let extra = "[[listener]]\nname = \"extra\"\naddress = \"127.0.0.1:0\"\n";
    let gw = TestGateway::start(&config(&a, extra), dir).await;
    let (http, extra_addr) = (gw.addr("http"), gw.addr("extra"));
    let mut sender = http1_sender(extra_addr).await;
    let mut held = sender
        .send_request(get("/hold", "x"))
        .await
        .unwrap()
        .into_body();
    held.frame().await.unwrap().unwrap();

    let report = gw.reload(&config(&a, "")).await.unwrap();
    assert_eq!(report.listeners_removed, vec!["extra".to_owned()]);
    assert_eq!(gw.addr("http"), http);
    assert!(gw.gateway().local_addr("extra").is_none());
    assert!(
        tokio::net::TcpStream::connect(extra_addr).await.is_err(),
        "a removed listener no longer accepts"
    );
    assert_eq!(http1_get(http, "x", "/whoami").await.body, "A");
    assert!(
        gw.gateway().open_connections() >= 1,
        "the held request is still open"
    );
    a.release.notify_one();
    let rest = held.collect().await.unwrap().to_bytes();
    assert_eq!(rest, "second chunk\n", "its in-flight request finished");

    // Added back: a new socket.
    let report = gw.reload(&config(&a, extra)).await.unwrap();
    assert_eq!(report.listeners_added, vec!["extra".to_owned()]);
    assert_eq!(http1_get(gw.addr("extra"), "x", "/whoami").await.body, "A");
}

#[tokio::test]
async fn a_renewed_certificate_is_served_on_the_next_handshake_and_tickets_still_resume() {
    let a = Origin::start("A").await;
    let dir = tempfile::tempdir().unwrap();
    write_cert(dir.path(), "a", KeyKind::EcdsaP256, &["a.test"]);
    let gw = TestGateway::start(&config(&a, ""), dir).await;
    let addr = gw.addr("https");
    let (_, ticket) = crate::tls::resumable(addr, boring::ssl::SslVersion::TLS1_3, None).await;
    let old_leaf = der(gw.dir(), "a");

    write_cert(gw.dir(), "a", KeyKind::EcdsaP256, &["a.test"]);
    let new_leaf = der(gw.dir(), "a");
    assert_ne!(old_leaf, new_leaf);
    let report = gw.reload(&config(&a, "")).await.unwrap();
    assert_eq!(report.tls_rebuilt, vec!["https".to_owned()]);

    let (got, leaf) = https_get(&gw, "a.test", "/whoami").await;
    assert_eq!((got.body.as_str(), leaf), ("A", new_leaf));
    let (resumed, _) = crate::tls::resumable(addr, boring::ssl::SslVersion::TLS1_3, ticket).await;
    assert!(
        resumed,
        "a ticket issued before the reload resumes after it"
    );
}

#[tokio::test]
async fn an_unchanged_upstream_keeps_its_keepalive_connections() {
    let origin = crate::keepalive::raw_origin(false).await;
    let cfg = |route: &str| {
        format!(
            "[[listener]]\nname = \"http\"\naddress = \"127.0.0.1:0\"\n[[upstream]]\nname = \"o\"\nservers = [{{ address = \"{}\" }}]\n[[route]]\nname = \"{route}\"\nupstream = \"o\"\n",
            origin.addr
        )
    };
    let gw = TestGateway::plain(&cfg("first")).await;
    assert_eq!(http1_get(gw.addr("http"), "x", "/").await.body, "ok");
    let report = gw.reload(&cfg("second")).await.unwrap();
    assert_eq!((report.upstreams_kept, report.upstreams_new), (1, 0));
    assert_eq!(http1_get(gw.addr("http"), "x", "/").await.body, "ok");
    assert_eq!(
        origin.accepted.load(Ordering::SeqCst),
        1,
        "the second request reused the pooled connection"
    );
}

#[tokio::test]
async fn a_change_that_cannot_apply_changes_nothing() {
    let (a, b) = (Origin::start("A").await, Origin::start("B").await);
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_cert(dir.path(), "a", KeyKind::EcdsaP256, &["a.test"]);
    let gw = TestGateway::start(&config(&a, ""), dir).await;
    let before = gw.gateway().snapshot().revision.clone();
    let broken = format!(
        "[[listener]]\nname = \"clash\"\naddress = \"{}\"\n[[upstream]]\nname = \"b\"\nservers = [{{ address = \"{}\" }}]\n[[route]]\nname = \"b\"\npath_prefix = \"/b\"\nupstream = \"b\"\n",
        taken.local_addr().unwrap(),
        b.addr
    );
    let err = gw.reload(&config(&a, &broken)).await.unwrap_err();
    assert!(err.to_string().contains("cannot bind"), "{err}");
    assert_eq!(gw.gateway().snapshot().revision, before);
    let got = http1_get(gw.addr("http"), "x", "/b").await;
    assert_eq!(got.body, "A /b", "the new route did not apply");
}

#[tokio::test]
async fn changed_engines_are_rebuilt_and_the_old_ones_are_released() {
    let a = Origin::start("A").await;
    let dir = tempfile::tempdir().unwrap();
    write_cert(dir.path(), "a", KeyKind::EcdsaP256, &["a.test"]);
    let engines = |n: u32| format!("[offload.crypto]\nengines = [\"pool\"]\npool_threads = {n}\n");
    let gw = TestGateway::start(&config(&a, &engines(2)), dir).await;
    let (got, _) = https_get(&gw, "a.test", "/whoami").await;
    assert_eq!(got.body, "A");
    // The other tests of this binary start threads too, so the old engines' release is
    // checked by identity (dropping a pool joins its threads), not by counting threads.
    let mut retired = vec![std::sync::Arc::downgrade(&gw.gateway().key_offload())];
    for i in 0..30u32 {
        let report = gw.reload(&config(&a, &engines(3 + i % 2))).await.unwrap();
        assert!(report.crypto_engines_rebuilt, "reload {i}: {report:?}");
        assert_eq!(report.tls_rebuilt, vec!["https".to_owned()]);
        let (got, _) = https_get(&gw, "a.test", "/whoami").await;
        assert_eq!(got.body, "A");
        retired.push(std::sync::Arc::downgrade(&gw.gateway().key_offload()));
    }
    let current = retired.pop().unwrap();
    wait_until(|| retired.iter().all(|w| w.upgrade().is_none())).await;
    assert!(current.upgrade().is_some());
    let signed: u64 = gw
        .gateway()
        .crypto_counters()
        .iter()
        .map(|c| c.completed)
        .sum();
    assert!(signed >= 1, "the newest engines signed");
}
