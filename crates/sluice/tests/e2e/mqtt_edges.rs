//! What an operator of the MQTT entrance hits first (issue 87), end to end with Debian's
//! mosquitto: devices with an empty client identifier are each their own device (placed,
//! rate-limited and capped by their connection), an MQTT 5 broker's Server Keep Alive sets
//! the idle timeout, the access log counts every byte, and a TLS ClientHello sent to a
//! cleartext listener is `not_connect`.

use crate::mqtt::{CONNACK_OK, Mosquitto, config, connect, lines};
use crate::support::*;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const PINGREQ: [u8; 2] = [0xC0, 0x00];
const PINGRESP: [u8; 2] = [0xD0, 0x00];

/// Reads exactly `n` bytes, or what arrived before the connection closed or 5 s passed.
async fn read_n(s: &mut TcpStream, n: usize) -> Vec<u8> {
    let mut got = vec![0u8; n];
    let mut at = 0;
    let _ = tokio::time::timeout(Duration::from_secs(5), async {
        while at < n {
            match s.read(&mut got[at..]).await {
                Ok(0) | Err(_) => break,
                Ok(k) => at += k,
            }
        }
    })
    .await;
    got.truncate(at);
    got
}

/// An MQTT 5 CONNECT: clean start, keep alive `keep_alive`, no properties.
fn connect_v5(client_id: &str, keep_alive: u16) -> Vec<u8> {
    let mut body = vec![0, 4, b'M', b'Q', b'T', b'T', 5, 0x02];
    body.extend(keep_alive.to_be_bytes());
    body.push(0); // properties
    body.extend((client_id.len() as u16).to_be_bytes());
    body.extend(client_id.as_bytes());
    let mut p = vec![0x10, body.len() as u8];
    p.extend(body);
    p
}

/// Sixteen devices with an empty identifier, all connected at once through a listener that
/// caps each identifier at one connection and allows one new connection per identifier a
/// minute: none is refused, none closes another, and they spread over both brokers (by
/// their address and port; 16 on one broker of two by chance: 1 in 32,768).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn devices_without_an_identifier_are_each_their_own_device() {
    let brokers = [Mosquitto::start().await, Mosquitto::start().await];
    let mqtt = "max_connections_per_client_id = 1\n\
        [listener.mqtt.rate_per_client_id]\nrate = \"1/m\"\nburst = 1\n";
    let text = config(&brokers.iter().collect::<Vec<_>>(), mqtt);
    let gw = TestGateway::start_logged(&text, tempfile::tempdir().unwrap()).await;
    let at = gw.addr("devices");
    let mut devices = Vec::new();
    for i in 0..16 {
        let mut s = TcpStream::connect(at).await.unwrap();
        s.write_all(&connect("")).await.unwrap();
        assert_eq!(read_n(&mut s, 4).await, CONNACK_OK, "device {i}");
        devices.push(s);
    }
    // Every one of them is still connected: none took another over.
    for (i, s) in devices.iter_mut().enumerate() {
        s.write_all(&PINGREQ).await.unwrap();
        assert_eq!(read_n(s, 2).await, PINGRESP, "device {i} still connected");
    }
    drop(devices);
    wait_until(|| lines(gw.dir()).len() >= 16).await;
    let all = lines(gw.dir());
    assert!(all.iter().all(|l| l["status"] == 200), "{all:#?}");
    let used: std::collections::BTreeSet<_> =
        all.iter().map(|l| l["upstream"].to_string()).collect();
    assert_eq!(
        used.len(),
        2,
        "16 unnamed devices over two brokers: {used:?}"
    );
    // A named device still has its identifier's allowance: one a minute, after the burst.
    let mut again = Vec::new();
    for _ in 0..3 {
        let mut s = TcpStream::connect(at).await.unwrap();
        s.write_all(&connect("named")).await.unwrap();
        again.push(read_n(&mut s, 4).await);
    }
    let ok = CONNACK_OK.to_vec();
    assert_eq!(again, [ok.clone(), ok, vec![0x20, 2, 0, 3]]);
}

/// A 66-byte exchange (CONNECT, PINGREQ, DISCONNECT sent at once) logs every byte each way,
/// and a TLS ClientHello sent to the cleartext listener is counted `not_connect`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_access_log_counts_every_byte_and_tls_is_not_mqtt() {
    let broker = Mosquitto::start().await;
    let gw = TestGateway::start_logged(&config(&[&broker], ""), tempfile::tempdir().unwrap()).await;
    let at = gw.addr("devices");
    let mut s = TcpStream::connect(at).await.unwrap();
    let mut sent = connect("counted-1");
    sent.extend(PINGREQ);
    s.write_all(&sent).await.unwrap();
    assert_eq!(
        read_n(&mut s, 6).await,
        [&CONNACK_OK[..], &PINGRESP].concat()
    );
    s.write_all(&[0xE0, 0x00]).await.unwrap();
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut rest)).await;
    // The relay ends when both directions have: this one too.
    drop(s);
    let mut hello = TcpStream::connect(at).await.unwrap();
    hello
        .write_all(&[0x16, 0x03, 0x01, 0x00, 0x05, 0x01, 0x00, 0x00, 0x01, 0x03])
        .await
        .unwrap();
    let mut closed = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), hello.read_to_end(&mut closed)).await;
    assert!(closed.is_empty(), "no CONNACK for TLS: {closed:?}");
    wait_until(|| lines(gw.dir()).len() >= 2).await;
    let all = lines(gw.dir());
    let line = all.iter().find(|l| l["path"] == "counted-1").unwrap();
    assert_eq!(line["bytes_in"], sent.len() + 2, "{line}");
    assert_eq!(line["bytes_out"], 6, "{line}");
    let counts = gw.gateway().metrics().snapshot().mqtt;
    let outcome = |name: &str| {
        let i = (sluice_proxy::MQTT_OUTCOMES.iter()).position(|o| *o == name);
        counts[i.unwrap()]
    };
    assert_eq!(outcome("not_connect"), 1);
    assert_eq!(outcome("malformed"), 0);
}

/// A fake MQTT 5 broker: each connection's CONNECT is answered with a CONNACK carrying
/// Server Keep Alive `secs`, then every PINGREQ with a PINGRESP.
async fn raising_broker(secs: u16) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 256];
                if s.read(&mut buf).await.unwrap_or(0) == 0 {
                    return;
                }
                let [hi, lo] = secs.to_be_bytes();
                let _ = s.write_all(&[0x20, 6, 0, 0, 3, 0x13, hi, lo]).await;
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

/// A client asks for a 1 s keep alive; its broker answers with Server Keep Alive 6, so the
/// client pings every 6 s or less (MQTT-3.2.2-21): the gateway keeps it past 1.5 s of
/// silence (its own value would close it at 1.5 s). mosquitto with `max_keepalive` sends the
/// property too (2.0.11: for a keep alive above it, and only from 10 s up), and it reaches
/// the client unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_brokers_server_keep_alive_sets_the_idle_timeout() {
    let fake = raising_broker(6).await;
    let text = format!(
        r#"
[[upstream]]
name = "brokers"
balance = "consistent_hash"
hash_balance_factor = 0
servers = [{{ address = "{fake}" }}]
[[listener]]
name = "devices"
address = "127.0.0.1:0"
kind = "mqtt"
upstream = "brokers"
"#
    );
    let gw = TestGateway::start_logged(&text, tempfile::tempdir().unwrap()).await;
    let mut s = TcpStream::connect(gw.addr("devices")).await.unwrap();
    s.write_all(&connect_v5("raised", 1)).await.unwrap();
    assert_eq!(read_n(&mut s, 8).await, [0x20, 6, 0, 0, 3, 0x13, 0, 6]);
    tokio::time::sleep(Duration::from_secs(3)).await;
    s.write_all(&PINGREQ).await.unwrap();
    assert_eq!(
        read_n(&mut s, 2).await,
        PINGRESP,
        "silent for 3 s, twice its own 1.5 s, within the broker's 9 s"
    );

    let broker = Mosquitto::start_with("max_keepalive 10").await;
    let gw = TestGateway::start_logged(&config(&[&broker], ""), tempfile::tempdir().unwrap()).await;
    let mut s = TcpStream::connect(gw.addr("devices")).await.unwrap();
    s.write_all(&connect_v5("lowered", 60)).await.unwrap();
    let head = read_n(&mut s, 2).await;
    assert_eq!(head[0], 0x20, "{head:?}");
    let connack = read_n(&mut s, usize::from(head[1])).await;
    assert!(
        connack.windows(3).any(|w| w == [0x13, 0, 10]),
        "mosquitto's Server Keep Alive 10 passed on: {connack:?}"
    );
}
