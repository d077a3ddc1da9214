//! MQTT over WebSocket (`[route.mqtt]`) goes through the MQTT listener's admission, end to
//! end with Debian's mosquitto behind and raw MQTT packets in a tungstenite client's binary
//! frames: the CONNECT's credentials (`[route.mqtt.auth]`), the connection rates
//! (`rate_per_client`, `rate_per_client_id`), the frame guard before admission (no frame may
//! declare more than twice `max_connect_size` plus 1 KiB, nor the device send more in all),
//! and the idle timeout (`idle_timeout`, or 1.5 times the CONNECT's keep alive).

use crate::mqtt::{CONNACK_OK, Mosquitto, config, lines};
use crate::support::*;
use futures_util::{SinkExt as _, StreamExt as _};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;

type Ws = WebSocketStream<TcpStream>;

const PINGREQ: [u8; 2] = [0xC0, 0x00];
const PINGRESP: [u8; 2] = [0xD0, 0x00];

/// A WebSocket to `path` on `web`, asking for the `mqtt` subprotocol: switched (`101`).
async fn open(web: SocketAddr, path: &str) -> Ws {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
    let mut req = format!("ws://{web}{path}").into_client_request().unwrap();
    req.headers_mut()
        .insert("sec-websocket-protocol", "mqtt".parse().unwrap());
    let tcp = TcpStream::connect(web).await.unwrap();
    let (ws, resp) = tokio_tungstenite::client_async(req, tcp).await.unwrap();
    assert_eq!(resp.status(), 101);
    ws
}

/// An MQTT packet: its fixed header (`kind`, the remaining length) and `body`.
fn packet(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut p = vec![kind];
    let mut n = body.len();
    loop {
        let b = (n % 128) as u8;
        n /= 128;
        p.push(if n > 0 { b | 0x80 } else { b });
        if n == 0 {
            break;
        }
    }
    p.extend(body);
    p
}

fn string(into: &mut Vec<u8>, s: &[u8]) {
    into.extend((s.len() as u16).to_be_bytes());
    into.extend(s);
}

/// A CONNECT in `version` (4: 3.1.1, 5): clean start, `keep_alive`, with a user name and
/// password where `login` has them.
fn connect(version: u8, id: &str, keep_alive: u16, login: Option<(&str, &str)>) -> Vec<u8> {
    let flags = if login.is_some() { 0xC2 } else { 0x02 };
    let mut body = vec![0, 4, b'M', b'Q', b'T', b'T', version, flags];
    body.extend(keep_alive.to_be_bytes());
    if version == 5 {
        body.push(0); // no properties
    }
    string(&mut body, id.as_bytes());
    if let Some((user, password)) = login {
        string(&mut body, user.as_bytes());
        string(&mut body, password.as_bytes());
    }
    packet(0x10, &body)
}

async fn send(ws: &mut Ws, bytes: &[u8]) {
    ws.send(Message::binary(bytes.to_vec())).await.unwrap();
}

/// The binary frames' bytes until `n` arrived, or what came before the connection ended
/// (or 5 s passed).
async fn read_n(ws: &mut Ws, n: usize) -> Vec<u8> {
    let mut got = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), async {
        while got.len() < n {
            match ws.next().await {
                Some(Ok(Message::Binary(b))) => got.extend_from_slice(&b),
                Some(Ok(Message::Close(_)) | Err(_)) | None => break,
                Some(Ok(_)) => {}
            }
        }
    })
    .await;
    got
}

/// Whether the gateway ends the WebSocket (its close frame answered and the socket closed,
/// or the socket closed) within `secs`, sending no more MQTT before it.
async fn ends(ws: &mut Ws, secs: u64) -> Result<(), String> {
    let end = tokio::time::timeout(Duration::from_secs(secs), async {
        loop {
            match ws.next().await {
                // Polled on after a close frame, the client answers it and sees the end.
                Some(Ok(Message::Close(_))) => {}
                Some(Err(_)) | None => return Ok(()),
                Some(Ok(Message::Binary(b))) => return Err(format!("more MQTT: {b:02x?}")),
                Some(Ok(_)) => {}
            }
        }
    })
    .await;
    end.unwrap_or_else(|_| Err(format!("still open after {secs} s")))
}

/// SUBSCRIBE to `topic` (QoS 0), then a QoS 0 PUBLISH there: the broker's SUBACK, then the
/// message back, both through the WebSocket.
async fn round_trip(ws: &mut Ws, topic: &str) {
    let mut sub = vec![0, 1];
    string(&mut sub, topic.as_bytes());
    sub.push(0);
    send(ws, &packet(0x82, &sub)).await;
    assert_eq!(read_n(ws, 5).await, [0x90, 3, 0, 1, 0], "SUBACK");
    let mut publish = Vec::new();
    string(&mut publish, topic.as_bytes());
    publish.extend(b"over-ws");
    let publish = packet(0x30, &publish);
    send(ws, &publish).await;
    assert_eq!(read_n(ws, publish.len()).await, publish, "the message back");
}

/// The gateway's count of MQTT connections with outcome `name`.
fn outcome(gw: &TestGateway, name: &str) -> u64 {
    let counts = gw.gateway().metrics().snapshot().mqtt;
    let i = (sluice_proxy::MQTT_OUTCOMES.iter()).position(|o| *o == name);
    counts[i.unwrap()]
}

/// The MQTT lines of devices over WebSocket: (client identifier, status, subject).
fn ws_lines(gw: &TestGateway) -> Vec<(String, u64, String)> {
    let text = |v: &serde_json::Value| v.as_str().unwrap_or("").to_string();
    lines(gw.dir())
        .iter()
        .filter(|l| l["method"] == "MQTT" && l["protocol"] == "mqtt-ws")
        .map(|l| {
            (
                text(&l["path"]),
                l["status"].as_u64().unwrap(),
                text(&l["subject"]),
            )
        })
        .collect()
}

/// `config`'s brokers and MQTT listener, and an HTTP listener `web` with `routes`.
fn with_web(brokers: &[&Mosquitto], routes: &str) -> String {
    config(brokers, "")
        + r#"
[[listener]]
name = "web"
address = "127.0.0.1:0"
"# + routes
}

/// `[route.mqtt.auth]`: a CONNECT with a wrong password (3.1.1 and 5) or none gets "bad
/// user name or password" in the WebSocket and the WebSocket ends; the right password is
/// relayed to mosquitto, and a SUBSCRIBE and PUBLISH go there and back; a reload keeps the
/// check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_connects_credentials_are_checked_over_websocket() {
    let broker = Mosquitto::start().await;
    let dir = tempfile::tempdir().unwrap();
    crate::auth::htpasswd(
        &dir.path().join("devices.htpasswd"),
        "-B",
        "dev-7",
        "s3cret",
    );
    let routes = r#"
[[route]]
name = "ws-auth"
path_exact = "/mqtt"
upstream = "brokers"
[route.mqtt]
[route.mqtt.auth]
basic = { htpasswd = "{dir}/devices.htpasswd" }
"#;
    let gw = TestGateway::start_logged(&with_web(&[&broker], routes), dir).await;
    let web = gw.addr("web");

    let refusals: [(Vec<u8>, &[u8]); 3] = [
        (
            connect(4, "ws-wrong", 30, Some(("dev-7", "wrong"))),
            &[0x20, 2, 0, 0x04],
        ),
        (
            connect(5, "ws-wrong-5", 30, Some(("dev-7", "wrong"))),
            &[0x20, 3, 0, 0x86, 0],
        ),
        (connect(4, "ws-bare", 30, None), &[0x20, 2, 0, 0x04]),
    ];
    for (connect, connack) in &refusals {
        let mut ws = open(web, "/mqtt").await;
        send(&mut ws, connect).await;
        assert_eq!(read_n(&mut ws, connack.len()).await, *connack);
        ends(&mut ws, 5)
            .await
            .expect("a refused device's WebSocket ends");
    }

    let mut ws = open(web, "/mqtt").await;
    send(
        &mut ws,
        &connect(4, "ws-auth-1", 30, Some(("dev-7", "s3cret"))),
    )
    .await;
    assert_eq!(read_n(&mut ws, 4).await, CONNACK_OK, "mosquitto's CONNACK");
    round_trip(&mut ws, "ws/auth-1").await;
    send(&mut ws, &[0xE0, 0]).await; // DISCONNECT
    ends(&mut ws, 5).await.unwrap();

    // A reload (the same text, loaded anew): the route still checks credentials.
    gw.reload(&with_web(&[&broker], routes)).await.unwrap();
    let mut ws = open(web, "/mqtt").await;
    send(&mut ws, &refusals[0].0).await;
    assert_eq!(read_n(&mut ws, 4).await, refusals[0].1, "after a reload");
    ends(&mut ws, 5).await.unwrap();

    wait_until(|| ws_lines(&gw).len() >= 5).await;
    let seen = ws_lines(&gw);
    assert!(
        seen.contains(&("ws-auth-1".into(), 200, "dev-7".into())),
        "relayed, as the htpasswd user: {seen:?}"
    );
    for id in ["ws-wrong", "ws-wrong-5", "ws-bare"] {
        assert!(
            seen.iter().any(|(p, s, _)| p == id && *s == 401),
            "{id}: {seen:?}"
        );
    }
    assert_eq!(outcome(&gw, "bad_credentials"), 4);
    assert_eq!(outcome(&gw, "proxied"), 1);
}

/// `rate_per_client` and `rate_per_client_id`, each on its own route (each route has its
/// own allowances): past the rate a device gets "connection rate exceeded" (3.1.1: 0x03,
/// 5: 0x9F) in the WebSocket and the WebSocket ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_rates_hold_over_websocket() {
    let broker = Mosquitto::start().await;
    let routes = r#"
[[route]]
name = "ws-rate"
path_exact = "/mqtt"
upstream = "brokers"
[route.mqtt]
[route.mqtt.rate_per_client]
rate = "1/m"
burst = 1
[[route]]
name = "ws-rate-id"
path_exact = "/mqtt-id"
upstream = "brokers"
[route.mqtt]
[route.mqtt.rate_per_client_id]
rate = "1/m"
burst = 1
"#;
    let gw = TestGateway::start_logged(&with_web(&[&broker], routes), tempfile::tempdir().unwrap())
        .await;
    let web = gw.addr("web");
    // The answer to `connect` on `path`, and whether the WebSocket then ended.
    let go = |path: &'static str, connect: Vec<u8>| async move {
        let mut ws = open(web, path).await;
        send(&mut ws, &connect).await;
        let connack = read_n(&mut ws, 4).await;
        if connack == CONNACK_OK {
            round_trip(&mut ws, "ws/rate").await;
            return (connack, false);
        }
        // A 5-byte MQTT 5 CONNACK: its properties' length.
        let mut connack = connack;
        if connack.get(1) == Some(&3) {
            connack.extend(read_n(&mut ws, 1).await);
        }
        (connack, ends(&mut ws, 5).await.is_ok())
    };
    let ok = (CONNACK_OK.to_vec(), false);
    let refused = (vec![0x20, 2, 0, 0x03], true);
    // Per address: two (one, and a burst of one), whatever their identifiers, then none.
    assert_eq!(go("/mqtt", connect(4, "addr-1", 30, None)).await, ok);
    assert_eq!(go("/mqtt", connect(4, "addr-2", 30, None)).await, ok);
    assert_eq!(go("/mqtt", connect(4, "addr-3", 30, None)).await, refused);
    assert_eq!(
        go("/mqtt", connect(5, "addr-4", 30, None)).await,
        (vec![0x20, 3, 0, 0x9F, 0], true)
    );
    // Per identifier: two each, from the same address (the other route's allowance).
    assert_eq!(go("/mqtt-id", connect(4, "loop-1", 30, None)).await, ok);
    assert_eq!(go("/mqtt-id", connect(4, "loop-1", 30, None)).await, ok);
    assert_eq!(
        go("/mqtt-id", connect(4, "loop-1", 30, None)).await,
        refused
    );
    assert_eq!(go("/mqtt-id", connect(4, "loop-2", 30, None)).await, ok);

    wait_until(|| ws_lines(&gw).len() >= 8).await;
    let seen = ws_lines(&gw);
    let limited: Vec<_> = seen.iter().filter(|(_, s, _)| *s == 429).collect();
    assert_eq!(limited.len(), 3, "{seen:?}");
    assert_eq!(outcome(&gw, "rate_limited"), 3);
}

/// A relay in front of `to` that counts the connections it is opened.
async fn counting(to: SocketAddr) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let opened = Arc::new(AtomicUsize::new(0));
    let count = opened.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                if let Ok(mut up) = TcpStream::connect(to).await {
                    let _ = tokio::io::copy_bidirectional(&mut s, &mut up).await;
                }
            });
        }
    });
    (addr, opened)
}

/// The frame guard (`max_connect_size = "1k"`: 3 KiB before admission): a first frame that
/// declares 1 MiB is refused at its header, without waiting for its payload (the CONNECT's
/// time limit is a minute) and without a CONNACK; a CONNECT dribbled a byte a frame is
/// refused once the frames' bytes pass the bound. Neither reaches the broker; a device
/// within the bound does, and may send more than the bound once admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_past_the_guard_are_refused_before_the_broker() {
    let broker = Mosquitto::start().await;
    let (relay, opened) = counting(broker.addr()).await;
    let text = format!(
        r#"
[log]
access_log = "{{dir}}/access.log"
access_format = "json"
access_flush = "0s"
[[upstream]]
name = "brokers"
balance = "consistent_hash"
hash_balance_factor = 0
servers = [{{ address = "{relay}" }}]
[[listener]]
name = "web"
address = "127.0.0.1:0"
[[route]]
name = "ws-guarded"
path_exact = "/mqtt"
upstream = "brokers"
[route.mqtt]
max_connect_size = "1k"
connect_timeout = "60s"
"#
    );
    let gw = TestGateway::start_logged(&text, tempfile::tempdir().unwrap()).await;
    let web = gw.addr("web");

    // A masked binary frame's header declaring 1 MiB, and nothing of its payload.
    let mut ws = open(web, "/mqtt").await;
    let mut header = vec![0x82, 0x80 | 127];
    header.extend((1u64 << 20).to_be_bytes());
    header.extend([1, 2, 3, 4]);
    ws.get_mut().write_all(&header).await.unwrap();
    ends(&mut ws, 10)
        .await
        .expect("refused at the frame's header");

    // A valid CONNECT of 1,000 bytes (within max_connect_size: its 985-byte identifier), a
    // byte a frame: 7 bytes of frame for each, past 3 KiB before the CONNECT is whole.
    let mut ws = open(web, "/mqtt").await;
    let dribble = connect(4, &"d".repeat(985), 30, None);
    assert_eq!(dribble.len(), 1000);
    for b in &dribble {
        if ws.send(Message::binary(vec![*b])).await.is_err() {
            break;
        }
    }
    ends(&mut ws, 10)
        .await
        .expect("refused past the bytes in all");
    assert_eq!(opened.load(Ordering::SeqCst), 0, "the broker saw nothing");

    // Within the bound: admitted, and then a PUBLISH of 8 KiB passes.
    let mut ws = open(web, "/mqtt").await;
    send(&mut ws, &connect(4, "guarded-ok", 30, None)).await;
    assert_eq!(read_n(&mut ws, 4).await, CONNACK_OK);
    let mut sub = vec![0, 1];
    string(&mut sub, b"ws/big");
    sub.push(0);
    send(&mut ws, &packet(0x82, &sub)).await;
    assert_eq!(read_n(&mut ws, 5).await, [0x90, 3, 0, 1, 0]);
    let mut publish = Vec::new();
    string(&mut publish, b"ws/big");
    publish.resize(8 * 1024, b'x');
    let publish = packet(0x30, &publish);
    send(&mut ws, &publish).await;
    assert_eq!(read_n(&mut ws, publish.len()).await, publish);
    assert_eq!(opened.load(Ordering::SeqCst), 1);

    // The two refused: logged as they end (the admitted one is still open), each as the TCP
    // listener logs a CONNECT past max_connect_size.
    wait_until(|| ws_lines(&gw).len() >= 2).await;
    let seen = ws_lines(&gw);
    assert!(seen.iter().all(|(_, s, _)| *s == 413), "{seen:?}");
    assert_eq!(outcome(&gw, "too_large"), 2);
    assert_eq!(outcome(&gw, "proxied"), 0);
}

/// A fake 3.1.1 broker: each connection's CONNECT gets CONNACK 0, then every PINGREQ a
/// PINGRESP; it never closes a connection itself (mosquitto would, at 1.5 times the keep
/// alive, and hide whether the gateway does).
async fn patient_broker() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 256];
                if s.read(&mut buf).await.unwrap_or(0) == 0 {
                    return;
                }
                let _ = s.write_all(&CONNACK_OK).await;
                while let Ok(n) = s.read(&mut buf).await {
                    if n == 0 || s.write_all(&PINGRESP).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    addr
}

/// `idle_timeout` and the keep alive over WebSocket: a device that asked for no keep alive
/// (which mosquitto never closes) is closed after the route's `idle_timeout` of silence; one
/// with a keep alive of 1 s stays while it pings, and is closed once silent past 1.5 s,
/// though the route's `idle_timeout` is ten minutes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_device_is_closed_after_its_keep_alive() {
    let broker = Mosquitto::start().await;
    let fake = patient_broker().await;
    let routes = format!(
        r#"
[[upstream]]
name = "patient"
balance = "consistent_hash"
hash_balance_factor = 0
servers = [{{ address = "{fake}" }}]
[[route]]
name = "ws-idle"
path_exact = "/mqtt"
upstream = "brokers"
[route.mqtt]
idle_timeout = "1s"
[[route]]
name = "ws-keep-alive"
path_exact = "/keep-alive"
upstream = "patient"
[route.mqtt]
idle_timeout = "10m"
"#
    );
    let gw =
        TestGateway::start_logged(&with_web(&[&broker], &routes), tempfile::tempdir().unwrap())
            .await;
    let web = gw.addr("web");

    let mut ws = open(web, "/mqtt").await;
    send(&mut ws, &connect(4, "no-keep-alive", 0, None)).await;
    assert_eq!(read_n(&mut ws, 4).await, CONNACK_OK);
    send(&mut ws, &PINGREQ).await;
    assert_eq!(read_n(&mut ws, 2).await, PINGRESP, "mosquitto answers");
    ends(&mut ws, 15)
        .await
        .expect("closed after the route's idle_timeout");

    let mut ws = open(web, "/keep-alive").await;
    send(&mut ws, &connect(4, "keeps-alive", 1, None)).await;
    assert_eq!(read_n(&mut ws, 4).await, CONNACK_OK);
    // 3 s of pings every 0.5 s: twice its 1.5 s, and the device is still there.
    for i in 0..6 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        send(&mut ws, &PINGREQ).await;
        assert_eq!(read_n(&mut ws, 2).await, PINGRESP, "ping {i}");
    }
    ends(&mut ws, 15)
        .await
        .expect("closed once silent past 1.5 times its keep alive");

    wait_until(|| ws_lines(&gw).len() >= 2).await;
    let seen = ws_lines(&gw);
    for id in ["no-keep-alive", "keeps-alive"] {
        assert!(
            seen.iter().any(|(p, s, _)| p == id && *s == 200),
            "{id}: {seen:?}"
        );
    }
}
