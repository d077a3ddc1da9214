//! The MQTT listener end to end with Debian's mosquitto brokers and clients
//! (`mosquitto_pub`, `mosquitto_sub`): devices routed by client identifier (and by user
//! name) to the broker holding their session, failover when that broker dies, QoS 1 and 2 and
//! retained messages through the relay, and each refusal (not MQTT, malformed, a protocol
//! error, an unsupported version, too large, too slow) with its CONNACK and its count.

use crate::support::*;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A mosquitto broker on 127.0.0.1 and a free port, anonymous, without persistence, in a
/// temporary folder; stopped by PID when dropped.
pub(super) struct Mosquitto {
    port: u16,
    child: Option<std::process::Child>,
    _dir: tempfile::TempDir,
}

impl Mosquitto {
    pub(super) async fn start() -> Mosquitto {
        Self::start_with("").await
    }

    /// A broker with `extra` lines in its configuration (`max_keepalive 5`).
    pub(super) async fn start_with(extra: &str) -> Mosquitto {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let conf = dir.path().join("mosquitto.conf");
        std::fs::write(
            &conf,
            format!("listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\nlog_type none\n{extra}\n"),
        )
        .unwrap();
        // Debian installs it in /usr/sbin, which is not on every user's PATH.
        let bin = ["/usr/sbin/mosquitto", "mosquitto"]
            .into_iter()
            .find(|b| Path::new(b).exists())
            .unwrap_or("mosquitto");
        let child = std::process::Command::new(bin)
            .arg("-c")
            .arg(&conf)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("mosquitto is needed (scripts/test-deps installs Debian's mosquitto)");
        // Owned at once, so that a broker that never listens is still stopped.
        let broker = Mosquitto {
            port,
            child: Some(child),
            _dir: dir,
        };
        for _ in 0..250 {
            if TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
                return broker;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("mosquitto did not listen on {port} within 5 s");
    }

    pub(super) fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Mosquitto {
    fn drop(&mut self) {
        self.kill();
    }
}

pub(super) fn config(brokers: &[&Mosquitto], mqtt: &str) -> String {
    let servers: Vec<String> = brokers
        .iter()
        .map(|b| format!("{{ address = \"{}\" }}", b.addr()))
        .collect();
    format!(
        r#"
[log]
access_log = "{{dir}}/access.log"
access_format = "json"
access_flush = "0s"
[[upstream]]
name = "brokers"
balance = "consistent_hash"
hash_balance_factor = 0
connect_timeout = "1s"
servers = [{}]
[[listener]]
name = "devices"
address = "127.0.0.1:0"
kind = "mqtt"
upstream = "brokers"
[listener.mqtt]
connect_timeout = "500ms"
max_connect_size = "1k"
{mqtt}
"#,
        servers.join(", ")
    )
}

/// A 3.1.1 CONNECT: clean session, keep alive 60.
pub(super) fn connect(client_id: &str) -> Vec<u8> {
    let mut body = vec![0, 4, b'M', b'Q', b'T', b'T', 4, 0x02, 0, 60];
    body.extend((client_id.len() as u16).to_be_bytes());
    body.extend(client_id.as_bytes());
    let mut p = vec![0x10, body.len() as u8];
    p.extend(body);
    p
}

/// Sends `bytes` in pieces (`pause` between them) and returns what comes back until the
/// connection closes or 4 bytes of CONNACK arrived.
async fn exchange(gw: SocketAddr, pieces: &[&[u8]], pause: Duration) -> Vec<u8> {
    let mut s = TcpStream::connect(gw).await.unwrap();
    for p in pieces {
        if s.write_all(p).await.is_err() {
            break;
        }
        tokio::time::sleep(pause).await;
    }
    let mut got = Vec::new();
    let mut buf = [0u8; 64];
    let _ = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
            if got.len() >= 4 {
                break;
            }
        }
    })
    .await;
    got
}

/// The access log's lines so far.
pub(super) fn lines(dir: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join("access.log"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The broker each line of client `id` went to.
fn brokers_of(dir: &Path, id: &str) -> Vec<String> {
    lines(dir)
        .iter()
        .filter(|l| l["path"] == id && l["status"] == 200)
        .map(|l| l["upstream"].as_str().unwrap_or("-").to_string())
        .collect()
}

pub(super) const CONNACK_OK: [u8; 4] = [0x20, 0x02, 0x00, 0x00];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_returns_to_its_broker_and_fails_over_when_it_dies() {
    let mut brokers = [
        Mosquitto::start().await,
        Mosquitto::start().await,
        Mosquitto::start().await,
    ];
    let text = config(&brokers.iter().collect::<Vec<_>>(), "");
    let gw = TestGateway::start_logged(&text, tempfile::tempdir().unwrap()).await;
    let web = gw.addr("devices");
    let ids: Vec<String> = (0..12).map(|i| format!("sensor-{i}")).collect();
    for round in 0..2 {
        for id in &ids {
            let got = exchange(web, &[&connect(id)], Duration::ZERO).await;
            assert_eq!(got, CONNACK_OK, "{id}, round {round}");
        }
    }
    wait_until(|| lines(gw.dir()).len() >= 24).await;
    let mut used = std::collections::BTreeSet::new();
    for id in &ids {
        let b = brokers_of(gw.dir(), id);
        assert_eq!(b.len(), 2, "{id}: {b:?}");
        assert_eq!(b[0], b[1], "{id} came back to its broker");
        used.insert(b[0].clone());
    }
    assert!(used.len() >= 2, "12 devices over 3 brokers used {used:?}");
    // The broker of sensor-0 dies: sensor-0 goes to the next on the ring, and comes back
    // there again; the other devices stay where they were.
    let home = brokers_of(gw.dir(), "sensor-0")[0].clone();
    let dead = brokers
        .iter()
        .position(|b| b.addr().to_string() == home)
        .unwrap();
    brokers[dead].kill();
    for _ in 0..2 {
        assert_eq!(
            exchange(web, &[&connect("sensor-0")], Duration::ZERO).await,
            CONNACK_OK
        );
    }
    wait_until(|| brokers_of(gw.dir(), "sensor-0").len() >= 4).await;
    let after = brokers_of(gw.dir(), "sensor-0");
    assert_ne!(after[2], home, "failed over");
    assert_eq!(after[2], after[3], "and stays on the next broker");
    for id in ids.iter().skip(1) {
        let before = brokers_of(gw.dir(), id)[0].clone();
        if before != home {
            assert_eq!(
                exchange(web, &[&connect(id)], Duration::ZERO).await,
                CONNACK_OK
            );
            wait_until(|| brokers_of(gw.dir(), id).len() >= 3).await;
            assert_eq!(brokers_of(gw.dir(), id)[2], before, "{id} did not move");
        }
    }
}

/// Real clients through the relay: by user name, a publisher and a subscriber land on one
/// broker, so QoS 1 and 2 publishes complete and a retained message reaches a later
/// subscriber.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mosquitto_clients_publish_and_subscribe_through_it() {
    let brokers = [Mosquitto::start().await, Mosquitto::start().await];
    let text = config(
        &brokers.iter().collect::<Vec<_>>(),
        "route_by = \"username\"",
    );
    let gw = TestGateway::start_logged(&text, tempfile::tempdir().unwrap()).await;
    let port = gw.addr("devices").port().to_string();
    let run = |args: &[&str]| {
        std::process::Command::new(args[0])
            .args(&args[1..])
            .output()
            .expect("mosquitto-clients is needed (scripts/test-deps installs it)")
    };
    for (qos, id) in [("1", "pub-1"), ("2", "pub-2")] {
        let out = run(&[
            "mosquitto_pub",
            "-h",
            "127.0.0.1",
            "-p",
            &port,
            "-u",
            "plant-7",
            "-i",
            id,
            "-q",
            qos,
            "-t",
            "plant/7/temp",
            "-m",
            "21.5",
            "-r",
        ]);
        assert!(
            out.status.success(),
            "QoS {qos}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = run(&[
        "mosquitto_sub",
        "-h",
        "127.0.0.1",
        "-p",
        &port,
        "-u",
        "plant-7",
        "-i",
        "sub-1",
        "-t",
        "plant/7/temp",
        "-C",
        "1",
        "-W",
        "5",
        "-q",
        "1",
    ]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "21.5",
        "the retained message, from the broker the user name hashes to: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connect_that_is_not_right_is_refused_with_its_code_and_counted() {
    let broker = Mosquitto::start().await;
    let text = config(&[&broker], "client_id_pattern = \"^[a-z0-9-]+$\"");
    let gw = TestGateway::start_logged(&text, tempfile::tempdir().unwrap()).await;
    let web = gw.addr("devices");
    // Not MQTT: closed without a CONNACK.
    assert_eq!(
        exchange(web, &[b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"], Duration::ZERO).await,
        b""
    );
    // MQTT 5 with a receive maximum of 0: CONNACK 0x82 (protocol error), then closed.
    let v5 = [
        0x10, 0x11, 0, 4, b'M', b'Q', b'T', b'T', 5, 0x02, 0, 60, 3, 0x21, 0, 0, 0, 1, b'x',
    ];
    // Cut short, then the client goes: nothing answered, counted as closed.
    let mut s = TcpStream::connect(web).await.unwrap();
    s.write_all(&v5[..v5.len() - 1]).await.unwrap();
    s.shutdown().await.unwrap();
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut rest)).await;
    assert_eq!(rest, b"", "cut short: no answer");
    let got = exchange(web, &[&v5], Duration::ZERO).await;
    assert_eq!(got, [0x20, 0x03, 0x00, 0x82, 0x00]);
    // MQTT at level 6: 3.1.1's "unacceptable protocol version".
    let mut level6 = connect("x");
    level6[8] = 6;
    assert_eq!(
        exchange(web, &[&level6], Duration::ZERO).await,
        [0x20, 0x02, 0x00, 0x01]
    );
    // 3.1.1 with an empty identifier and no clean session: "identifier rejected".
    let mut anon = connect("");
    anon[9] = 0x00;
    assert_eq!(
        exchange(web, &[&anon], Duration::ZERO).await,
        [0x20, 0x02, 0x00, 0x02]
    );
    // An identifier outside the listener's client_id_pattern: "identifier rejected".
    assert_eq!(
        exchange(web, &[&connect("Bad_Id!")], Duration::ZERO).await,
        [0x20, 0x02, 0x00, 0x02]
    );
    // Over max_connect_size (1k), declared in the fixed header: closed at once.
    let big = [0x10, 0xff, 0x7f];
    assert_eq!(exchange(web, &[&big], Duration::ZERO).await, b"");
    // Split across segments, within connect_timeout: accepted.
    let c = connect("split-1");
    let (a, b) = c.split_at(7);
    assert_eq!(
        exchange(web, &[a, b], Duration::from_millis(100)).await,
        CONNACK_OK
    );
    // Too slow: half a CONNECT, then nothing past connect_timeout (500ms).
    assert_eq!(
        exchange(web, &[&c[..5]], Duration::from_millis(900)).await,
        b""
    );
    let (admin, _task) = admin_for(&gw).await;
    wait_until(|| lines(gw.dir()).len() >= 9).await;
    let metrics = crate::auth::get(admin, "/metrics", &[]).await.body;
    for want in [
        "sluice_mqtt_connections_total{outcome=\"proxied\"} 1",
        "sluice_mqtt_connections_total{outcome=\"not_connect\"} 1",
        "sluice_mqtt_connections_total{outcome=\"protocol_error\"} 1",
        "sluice_mqtt_connections_total{outcome=\"unsupported_version\"} 1",
        "sluice_mqtt_connections_total{outcome=\"client_id_not_valid\"} 2",
        "sluice_mqtt_connections_total{outcome=\"too_large\"} 1",
        "sluice_mqtt_connections_total{outcome=\"timeout\"} 1",
        "sluice_mqtt_connections_total{outcome=\"closed\"} 1",
    ] {
        assert!(metrics.contains(want), "{want} in\n{metrics}");
    }
    // `/status`: the outcomes, and the broker with the one device connection held open now.
    let mut held = TcpStream::connect(web).await.unwrap();
    held.write_all(&connect("held-1")).await.unwrap();
    let mut ack = [0u8; 4];
    held.read_exact(&mut ack).await.unwrap();
    assert_eq!(ack, CONNACK_OK);
    let status: serde_json::Value =
        serde_json::from_str(&crate::auth::get(admin, "/status", &[]).await.body).unwrap();
    let mqtt = &status["mqtt"];
    assert_eq!(mqtt["connections"]["timeout"], 1, "{mqtt}");
    assert_eq!(
        mqtt["brokers"][0]["broker"],
        broker.addr().to_string(),
        "{mqtt}"
    );
    assert_eq!(
        mqtt["brokers"][0]["connections"], 1,
        "held-1 is open: {mqtt}"
    );
    drop(held);
    let statuses: Vec<u64> = lines(gw.dir())
        .iter()
        .map(|l| l["status"].as_u64().unwrap())
        .collect();
    assert!(
        statuses.contains(&408) && statuses.contains(&413),
        "{statuses:?}"
    );
}

/// A stand-in broker for the side-by-side test: answers `OK` to whatever arrives, so a
/// connection that got through a gateway says so.
async fn recorder() -> SocketAddr {
    let socket = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = socket.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 64];
                if matches!(tcp.read(&mut buf).await, Ok(n) if n > 0) {
                    let _ = tcp.write_all(b"OK").await;
                }
            });
        }
    });
    addr
}

/// Whether a gateway let `bytes` through to the stand-in broker.
async fn passes(gw: SocketAddr, bytes: Vec<u8>) -> bool {
    let Ok(mut s) = TcpStream::connect(gw).await else {
        return false;
    };
    if s.write_all(&bytes).await.is_err() {
        return false;
    }
    let mut got = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(4), s.read_to_end(&mut got)).await;
    got.starts_with(b"OK")
}

/// Valid CONNECTs of 3.1.1 and 5 (with a will, a login, properties), and mutations of them.
fn vectors() -> Vec<Vec<u8>> {
    let s = |b: &[u8]| {
        let mut v = (b.len() as u16).to_be_bytes().to_vec();
        v.extend_from_slice(b);
        v
    };
    let packet = |body: Vec<u8>| {
        let mut p = vec![0x10, body.len() as u8];
        p.extend(body);
        p
    };
    let mut v311 = vec![0, 4, b'M', b'Q', b'T', b'T', 4, 0xCE, 0, 30];
    for f in [&b"dev-9"[..], b"will/dev-9", b"bye", b"user", b"pass"] {
        v311.extend(s(f));
    }
    let mut v5 = vec![
        0, 4, b'M', b'Q', b'T', b'T', 5, 0xC2, 0, 30, 8, 0x11, 0, 0, 0, 60, 0x21, 0, 8,
    ];
    for f in [&b"dev-5"[..], b"user", b"pass"] {
        v5.extend(s(f));
    }
    let bases = [packet(v311), packet(v5), connect("plain-1")];
    let mut out: Vec<Vec<u8>> = bases.to_vec();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for i in 0..450 {
        let mut m = bases[i % bases.len()].clone();
        for _ in 0..=(next() % 2) {
            let at = (next() % m.len() as u64) as usize;
            m[at] = match next() % 3 {
                0 => next() as u8,
                1 => m[at] ^ (1 << (next() % 8)),
                _ => [0x00, 0x01, 0x7f, 0x80, 0xff][(next() % 5) as usize],
            };
        }
        out.push(m);
    }
    out
}

/// Where the standards allow what HAProxy 2.6's `mqtt_is_valid` refuses (docs/mqtt.md): MQTT
/// 3.1, an empty client identifier, an empty string as the packet's last field.
fn allowed_difference(bytes: &[u8]) -> Option<&'static str> {
    let Ok(sluice_mqtt::Parsed::Complete(c, n)) = sluice_mqtt::parse_connect(bytes, 1 << 16) else {
        return None;
    };
    if c.version == sluice_mqtt::Version::V31 {
        return Some("MQTT 3.1");
    }
    if c.client_id.is_empty() {
        return Some("an empty client identifier");
    }
    // A string (or binary field) of length 0 at the very end: its two length bytes end it.
    if bytes[..n].ends_with(&[0, 0]) {
        return Some("an empty last field");
    }
    None
}

/// The same CONNECTs, valid and malformed, through HAProxy 2.6 with `mqtt_is_valid` and
/// through Sluice: Sluice never lets through what HAProxy refuses, except where the standards
/// allow it (each such case named), and it refuses what HAProxy refuses for other reasons.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sluice_lets_through_no_connect_haproxy_refuses() {
    use futures_util::StreamExt as _;
    let broker = recorder().await;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = dir.path().join("haproxy.cfg");
    std::fs::write(
        &cfg,
        format!(
            "global\n    maxconn 512\ndefaults\n    mode tcp\n    timeout connect 2s\n    timeout client 5s\n    timeout server 5s\n\
             frontend mqtt\n    bind 127.0.0.1:{port}\n    tcp-request inspect-delay 1s\n\
             \x20   tcp-request content reject unless {{ req.payload(0,0),mqtt_is_valid }}\n    default_backend b\n\
             backend b\n    server s {broker}\n"
        ),
    )
    .unwrap();
    let _haproxy = crate::differential::Child(
        std::process::Command::new(crate::differential::binary("haproxy"))
            .arg("-db")
            .arg("-f")
            .arg(&cfg)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("haproxy starts"),
    );
    let haproxy = SocketAddr::from(([127, 0, 0, 1], port));
    crate::differential::wait_listening(haproxy).await;
    let text = format!(
        r#"
[[upstream]]
name = "brokers"
balance = "consistent_hash"
hash_balance_factor = 0
servers = [{{ address = "{broker}" }}]
[[listener]]
name = "devices"
address = "127.0.0.1:0"
kind = "mqtt"
upstream = "brokers"
[listener.mqtt]
connect_timeout = "1s"
"#
    );
    let gw = TestGateway::plain(&text).await;
    let sluice = gw.addr("devices");
    let results: Vec<(Vec<u8>, bool, bool)> = futures_util::stream::iter(vectors())
        .map(|v| async move {
            let (h, s) = tokio::join!(passes(haproxy, v.clone()), passes(sluice, v.clone()));
            (v, h, s)
        })
        .buffer_unordered(32)
        .collect()
        .await;
    let mut differences = std::collections::BTreeMap::<&str, usize>::new();
    let (mut both, mut neither) = (0, 0);
    for (v, h, s) in &results {
        match (h, s) {
            (true, true) => both += 1,
            (false, false) => neither += 1,
            (false, true) => {
                let why = allowed_difference(v)
                    .unwrap_or_else(|| panic!("Sluice let through what HAProxy refused: {v:02x?}"));
                *differences.entry(why).or_default() += 1;
            }
            (true, false) => *differences.entry("refused by Sluice only").or_default() += 1,
        }
    }
    println!(
        "{} CONNECTs: {both} through both, {neither} through neither, {differences:?}",
        results.len()
    );
    assert!(
        both >= 3 && neither > 100,
        "{both} through both, {neither} through neither, {differences:?}"
    );
}

/// MQTT over TLS: the listener terminates TLS with its certificate, and mosquitto_pub's QoS 1
/// publish completes through it; the access log says `mqtts`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_over_tls_terminates_at_the_listener() {
    let broker = Mosquitto::start().await;
    let dir = tempfile::tempdir().unwrap();
    write_cert(
        dir.path(),
        "devices",
        sluice_tls::selfsigned::KeyKind::EcdsaP256,
        &["devices.test"],
    );
    let text = config(&[&broker], "").replace("[listener.mqtt]", "[listener.tls]\n[listener.mqtt]")
        + "[[certificate]]\nname = \"devices\"\ncert = \"devices.crt\"\nkey = \"devices.key\"\n";
    let gw = TestGateway::start_logged(&text, dir).await;
    let port = gw.addr("devices").port().to_string();
    let ca = gw.dir().join("devices.crt");
    let ca = ca.display().to_string();
    // The certificate names devices.test, not 127.0.0.1: --insecure skips the name only.
    let out = publish(&port, "tls-1", &["--cafile", &ca, "--insecure"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_until(|| !brokers_of(gw.dir(), "tls-1").is_empty()).await;
    let line = lines(gw.dir())
        .into_iter()
        .find(|l| l["path"] == "tls-1")
        .unwrap();
    assert_eq!(line["protocol"], "mqtts", "{line}");
    assert_eq!(line["upstream"], broker.addr().to_string());
}

/// `mosquitto_pub` of one QoS 1 message as `id` through the gateway's `port`, with `extra`.
pub(super) fn publish(port: &str, id: &str, extra: &[&str]) -> std::process::Output {
    std::process::Command::new("mosquitto_pub")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            port,
            "-i",
            id,
            "-q",
            "1",
            "-t",
            "t",
            "-m",
            "x",
        ])
        .args(extra)
        .output()
        .expect("mosquitto-clients is needed (scripts/test-deps installs it)")
}

/// A 5 CONNECT with a user name and password.
fn connect_v5(client_id: &str, user: &str, password: &[u8]) -> Vec<u8> {
    let mut body = vec![0, 4, b'M', b'Q', b'T', b'T', 5, 0xC2, 0, 60, 0];
    for f in [client_id.as_bytes(), user.as_bytes(), password] {
        body.extend((f.len() as u16).to_be_bytes());
        body.extend_from_slice(f);
    }
    let mut p = vec![0x10];
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

/// `[listener.mqtt.auth]`: the CONNECT's user name and password against an htpasswd file
/// (bcrypt), or its password as a JWT against a JWKS; refused with "bad user name or
/// password" (3.1.1: 0x04, 5: 0x86) and counted; the accepted subject in the access log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_are_checked_against_a_password_file_or_as_a_token() {
    use crate::auth::{ec_key, htpasswd, jwks, token};
    let broker = Mosquitto::start().await;
    let dir = tempfile::tempdir().unwrap();
    htpasswd(
        &dir.path().join("devices.htpasswd"),
        "-B",
        "dev-7",
        "s3cret",
    );
    let key = ec_key(dir.path(), "idp");
    std::fs::write(dir.path().join("jwks.json"), jwks(&[("k1", &key)])).unwrap();
    let exp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 600;
    let good = token(
        "ES256",
        "k1",
        &key,
        &format!(r#"{{"sub":"dev-8","exp":{exp}}}"#),
    );
    let expired = token("ES256", "k1", &key, r#"{"sub":"dev-8","exp":1000}"#);
    let auth = "[listener.mqtt.auth]\n\
        basic = { htpasswd = \"{dir}/devices.htpasswd\" }\n\
        jwt = { keys = \"{dir}/jwks.json\", algorithms = [\"ES256\"] }\n";
    let gw = TestGateway::start_logged(&config(&[&broker], auth), dir).await;
    let web = gw.addr("devices");
    let port = web.port().to_string();
    let publish = |user: &str, password: &str| {
        publish(&port, "cred-1", &["-u", user, "-P", password])
            .status
            .success()
    };
    assert!(publish("dev-7", "s3cret"), "the htpasswd user");
    assert!(!publish("dev-7", "wrong"), "a wrong password");
    assert!(publish("anyone", &good), "a valid token as password");
    assert!(!publish("anyone", &expired), "an expired token");
    // No credentials at all, 3.1.1: 0x04.
    assert_eq!(
        exchange(web, &[&connect("bare")], Duration::ZERO).await,
        [0x20, 0x02, 0x00, 0x04]
    );
    // 5: 0x86.
    let v5 = connect_v5("v5-dev", "dev-7", b"wrong");
    assert_eq!(
        exchange(web, &[&v5], Duration::ZERO).await,
        [0x20, 0x03, 0x00, 0x86, 0x00]
    );
    let v5 = connect_v5("v5-dev", "dev-7", b"s3cret");
    let accepted = exchange(web, &[&v5], Duration::ZERO).await;
    assert_eq!(
        (accepted[0], accepted[3]),
        (0x20, 0x00),
        "the broker's own CONNACK, success (with its properties): {accepted:02x?}"
    );
    wait_until(|| lines(gw.dir()).len() >= 7).await;
    let subjects: Vec<(String, u64, String)> = lines(gw.dir())
        .iter()
        .map(|l| {
            (
                l["path"].as_str().unwrap_or("").to_string(),
                l["status"].as_u64().unwrap(),
                l["subject"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    assert!(
        subjects.contains(&("cred-1".into(), 200, "dev-7".into())),
        "{subjects:?}"
    );
    assert!(
        subjects.contains(&("cred-1".into(), 200, "dev-8".into())),
        "the token's subject: {subjects:?}"
    );
    assert!(
        subjects.iter().any(|(p, s, _)| p == "bare" && *s == 401),
        "{subjects:?}"
    );
    let (admin, _task) = admin_for(&gw).await;
    let metrics = crate::auth::get(admin, "/metrics", &[]).await.body;
    assert!(
        metrics.contains("sluice_mqtt_connections_total{outcome=\"bad_credentials\"} 4"),
        "{metrics}"
    );
}

/// Connection rates per client identifier and per address: over either, refused with
/// "connection rate exceeded" (5: 0x9F; 3.1.1 has no code for it: 0x03, "server
/// unavailable") before any credential is checked, and counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_rates_hold_per_identifier_and_per_address() {
    let broker = Mosquitto::start().await;
    let rates = "[listener.mqtt.rate_per_client_id]\nrate = \"1/m\"\nburst = 1\n\
                 [listener.mqtt.rate_per_client]\nrate = \"1/m\"\nburst = 5\n";
    let gw =
        TestGateway::start_logged(&config(&[&broker], rates), tempfile::tempdir().unwrap()).await;
    let web = gw.addr("devices");
    let go = |id: &'static str| async move { exchange(web, &[&connect(id)], Duration::ZERO).await };
    assert_eq!(go("storm-1").await, CONNACK_OK);
    assert_eq!(go("storm-1").await, CONNACK_OK, "the burst");
    assert_eq!(
        go("storm-1").await,
        [0x20, 0x02, 0x00, 0x03],
        "over its identifier's rate"
    );
    let v5 = connect_v5("storm-1", "u", b"p");
    assert_eq!(
        exchange(web, &[&v5], Duration::ZERO).await,
        [0x20, 0x03, 0x00, 0x9f, 0x00]
    );
    assert_eq!(go("other-1").await, CONNACK_OK, "another identifier");
    assert_eq!(go("other-2").await, CONNACK_OK);
    assert_eq!(
        go("other-3").await,
        [0x20, 0x02, 0x00, 0x03],
        "over the address's rate"
    );
    let (admin, _task) = admin_for(&gw).await;
    let metrics = crate::auth::get(admin, "/metrics", &[]).await.body;
    assert!(
        metrics.contains("sluice_mqtt_connections_total{outcome=\"rate_limited\"} 3"),
        "{metrics}"
    );
    wait_until(|| {
        lines(gw.dir())
            .iter()
            .filter(|l| l["status"] == 429)
            .count()
            == 3
    })
    .await;
}
