//! Keyless: gateways whose private keys live on key servers (`sluice-keyserver`), signing over
//! mutual TLS, with failover between key servers and fallback to a local key.

use crate::support::*;
use boring::pkey::PKey;
use boring::ssl::{SslConnector, SslMethod, SslVerifyMode};
use boring::x509::X509;
use bytes::{Bytes, BytesMut};
use http_body_util::Full;
use sluice_keyless::protocol::{Frame, Message, Op, Status};
use sluice_keyless::{KeyServer, ServerConfig};
use sluice_offload::FallbackReason;
use sluice_tls::selfsigned::KeyKind;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The certificates of a keyless deployment: the site's (`site`, RSA-2048, for a.test), the
/// key servers' (`ks`), the gateway's client certificate (`gw`) and one nobody pinned
/// (`intruder`).
fn write_pki(dir: &Path) {
    write_cert(dir, "site", KeyKind::Rsa2048, &["a.test"]);
    write_cert(dir, "other-site", KeyKind::EcdsaP256, &["b.test"]);
    write_cert(dir, "ks", KeyKind::EcdsaP256, &["localhost", "127.0.0.1"]);
    write_cert(dir, "gw", KeyKind::EcdsaP256, &["gateway-1"]);
    write_cert(dir, "gw2", KeyKind::EcdsaP256, &["gateway-2"]);
    write_cert(dir, "intruder", KeyKind::EcdsaP256, &["intruder"]);
}

fn cert(dir: &Path, stem: &str) -> X509 {
    X509::from_pem(&std::fs::read(dir.join(format!("{stem}.crt"))).unwrap()).unwrap()
}

fn fingerprint_hex(dir: &Path, stem: &str) -> String {
    sluice_keyless::fingerprint(&cert(dir, stem))
        .unwrap()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A key server configuration file serving `keys` to `gw` (and `gw2`, which may only use
/// `other-site`).
fn keyserver_toml(dir: &Path, listen: SocketAddr, metrics: SocketAddr, keys: &[&str]) -> String {
    let mut s = format!(
        "listen = \"{listen}\"\nmetrics = \"{metrics}\"\nengines = [\"pool\"]\npool_threads = 1\n\
         [tls]\ncertificate = \"ks.crt\"\nkey = \"ks.key\"\n\
         [[client]]\nname = \"gw\"\nfingerprint = \"{}\"\n\
         [[client]]\nname = \"gw2\"\nfingerprint = \"{}\"\n",
        fingerprint_hex(dir, "gw"),
        fingerprint_hex(dir, "gw2"),
    );
    for k in keys {
        let clients = if *k == "other-site" {
            "[\"gw\", \"gw2\"]"
        } else {
            "[\"gw\"]"
        };
        s += &format!("[[key]]\nfile = \"{k}.key\"\nclients = {clients}\n");
    }
    s
}

/// An in-process key server for `dir`'s keys.
async fn in_process_keyserver(dir: &Path, keys: &[&str]) -> (SocketAddr, SocketAddr) {
    in_process_keyserver_with(dir, keys, "").await
}

/// The same with top-level settings prepended (e.g. `max_pending = 2`).
async fn in_process_keyserver_with(
    dir: &Path,
    keys: &[&str],
    settings: &str,
) -> (SocketAddr, SocketAddr) {
    let text = settings.to_owned()
        + &keyserver_toml(
            dir,
            "127.0.0.1:0".parse().unwrap(),
            "127.0.0.1:0".parse().unwrap(),
            keys,
        );
    let config = ServerConfig::parse(&text, &dir.join("ks.toml")).unwrap();
    assert!(settings.is_empty() || config.max_pending == 2);
    let server = KeyServer::bind(&config).await.unwrap();
    let addrs = (server.local_addr().unwrap(), server.metrics_addr().unwrap());
    tokio::spawn(server.run());
    addrs
}

/// A `sluice-keyserver` process (so a test can kill it).
struct KeyServerProcess {
    child: std::process::Child,
    listen: SocketAddr,
    metrics: SocketAddr,
    config: std::path::PathBuf,
}

impl KeyServerProcess {
    async fn start(dir: &Path, name: &str, keys: &[&str]) -> Self {
        let (listen, metrics) = (dead_port().await, dead_port().await);
        let config = dir.join(format!("{name}.toml"));
        std::fs::write(&config, keyserver_toml(dir, listen, metrics, keys)).unwrap();
        let mut p = KeyServerProcess {
            child: Self::spawn(&config),
            listen,
            metrics,
            config,
        };
        p.wait_listening().await;
        p
    }

    fn spawn(config: &Path) -> std::process::Child {
        std::process::Command::new(env!("CARGO_BIN_EXE_sluice-keyserver"))
            .arg("--config")
            .arg(config)
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap()
    }

    async fn wait_listening(&mut self) {
        for _ in 0..500 {
            if TcpStream::connect(self.metrics).await.is_ok() {
                return;
            }
            assert!(
                self.child.try_wait().unwrap().is_none(),
                "sluice-keyserver exited"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("sluice-keyserver did not start");
    }

    fn kill(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    async fn restart(&mut self) {
        self.child = Self::spawn(&self.config);
        self.wait_listening().await;
    }
}

impl Drop for KeyServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// GET /metrics from a key server.
async fn metrics(addr: SocketAddr) -> String {
    raw_exchange(
        addr,
        b"GET /metrics HTTP/1.1\r\nhost: ks\r\n\r\n",
        Duration::from_secs(5),
    )
    .await
}

/// The value of one metrics line (by its exact name and labels), 0 when absent.
fn metric(text: &str, series: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0)
}

const SIGNED_OK: &str = "sluice_keyserver_requests_total{op=\"sign\",status=\"ok\"}";

/// A gateway for a.test whose site key is on `servers`; `key_line` is `key = "site.key"` or
/// empty (no local key at all).
async fn keyless_gateway(
    dir: tempfile::TempDir,
    servers: &[SocketAddr],
    key_line: &str,
    fallback: &str,
) -> (TestGateway, Origin) {
    keyless_gateway_with(dir, servers, key_line, fallback, "", "").await
}

/// The same with extra `[[listener]]` and `[listener.tls]` settings.
async fn keyless_gateway_with(
    dir: tempfile::TempDir,
    servers: &[SocketAddr],
    key_line: &str,
    fallback: &str,
    listener: &str,
    listener_tls: &str,
) -> (TestGateway, Origin) {
    let origin = Origin::start("o").await;
    let servers: Vec<String> = servers.iter().map(|s| format!("\"{s}\"")).collect();
    let servers = servers.join(", ");
    let cfg = format!(
        r#"
[log]
access_log = "off"
[offload.crypto]
engines = ["keyless"]
deadline = "5s"
[offload.keyless]
servers = [{servers}]
server_name = "localhost"
ca = "ks.crt"
certificate = "gw.crt"
key = "gw.key"
timeout = "2s"
ping_interval = "100ms"
fallback = "{fallback}"
[[listener]]
name = "https"
address = "127.0.0.1:0"
{listener}
[listener.tls]
session_tickets = false
{listener_tls}
[[certificate]]
name = "site"
cert = "site.crt"
{key_line}
[[upstream]]
name = "o"
servers = [{{ address = "{}" }}]
[[route]]
name = "all"
upstream = "o"
"#,
        origin.addr
    );
    (TestGateway::start(&cfg, dir).await, origin)
}

/// One full handshake and request; the status, or why it failed.
async fn one_request(addr: SocketAddr) -> Result<u16, String> {
    let h = tls_connect(
        addr,
        &ClientOpts {
            sni: Some("a.test"),
            ..Default::default()
        },
    )
    .await?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(h.stream))
            .await
            .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let req = http::Request::get("/")
        .header("host", "a.test")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
    Ok(collect(resp).await.status)
}

async fn wait_for(what: &str, mut ok: impl FnMut() -> bool) {
    for _ in 0..500 {
        if ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("timed out waiting for {what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handshakes_survive_a_key_server_killed_and_restarted_with_no_local_key() {
    let dir = tempfile::tempdir().unwrap();
    write_pki(dir.path());
    let mut a = KeyServerProcess::start(dir.path(), "a", &["site"]).await;
    let b = KeyServerProcess::start(dir.path(), "b", &["site"]).await;
    // The gateway has no file for the site's key: only the key servers can sign.
    let (gw, _o) = keyless_gateway(dir, &[a.listen, b.listen], "", "none").await;
    let offload = gw.gateway().key_offload();
    wait_for("both key servers up", || {
        offload.key_servers().iter().all(|s| s.up)
    })
    .await;
    let addr = gw.addr("https");

    // Four clients handshake in a loop (bounded: 30 s at most) until told to stop.
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let errors = Arc::new(std::sync::Mutex::new(Vec::new()));
    let clients: Vec<_> = (0..4)
        .map(|_| {
            let (stop, ok, failed, errors) =
                (stop.clone(), ok.clone(), failed.clone(), errors.clone());
            tokio::spawn(async move {
                let until = tokio::time::Instant::now() + Duration::from_secs(30);
                while !stop.load(Ordering::Relaxed) && tokio::time::Instant::now() < until {
                    match one_request(addr).await {
                        Ok(200) => ok.fetch_add(1, Ordering::Relaxed),
                        other => {
                            errors.lock().unwrap().push(format!("{other:?}"));
                            failed.fetch_add(1, Ordering::Relaxed)
                        }
                    };
                }
            })
        })
        .collect();
    let at_least = |n: usize| {
        let ok = ok.clone();
        move || ok.load(Ordering::Relaxed) >= n
    };
    wait_for("handshakes with both key servers", at_least(20)).await;

    // Kill key server A in the middle of the load.
    a.kill();
    let before = ok.load(Ordering::Relaxed);
    wait_for("handshakes after the kill", at_least(before + 40)).await;
    assert!(
        offload
            .key_servers()
            .iter()
            .any(|s| s.address == a.listen.to_string() && !s.up),
        "the gateway saw A go down: {:?}",
        offload.key_servers()
    );

    // Restart it: the gateway reconnects and sends it traffic again.
    a.restart().await;
    wait_for("A up again", || offload.key_servers().iter().all(|s| s.up)).await;
    let mut returned = 0;
    for _ in 0..500 {
        returned = metric(&metrics(a.metrics).await, SIGNED_OK);
        if returned >= 5 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.await.unwrap();
    }
    assert_eq!(
        failed.load(Ordering::Relaxed),
        0,
        "no handshake failed: {:?}",
        errors.lock().unwrap()
    );
    assert!(
        returned >= 5,
        "traffic returned to the restarted key server"
    );
    assert!(metric(&metrics(b.metrics).await, SIGNED_OK) > 0);
    let c = gw.gateway().crypto_counters();
    assert_eq!(c[0].engine, "keyless");
    assert_eq!(
        c[0].completed as usize,
        ok.load(Ordering::Relaxed),
        "every signature came from a key server: {c:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_key_gets_a_clean_error_and_the_gateway_signs_with_its_local_key() {
    let dir = tempfile::tempdir().unwrap();
    write_pki(dir.path());
    // The key server holds another site's key only.
    let (ks, ks_metrics) = in_process_keyserver(dir.path(), &["other-site"]).await;
    let (gw, _o) = keyless_gateway(dir, &[ks], "key = \"site.key\"", "local").await;
    let offload = gw.gateway().key_offload();
    wait_for("key server up", || {
        offload.key_servers().iter().all(|s| s.up)
    })
    .await;
    for _ in 0..3 {
        assert_eq!(one_request(gw.addr("https")).await, Ok(200));
    }
    let c = gw.gateway().crypto_counters();
    let (keyless, inline) = (&c[0], &c[1]);
    assert_eq!(keyless.engine, "keyless");
    assert_eq!(keyless.completed, 0, "{c:?}");
    // The first job asked the key server and failed over; the key server's answer is
    // remembered, so the next two went to the local key without asking (and without
    // counting as failures against the engine's breaker).
    assert_eq!(keyless.fell_back(FallbackReason::Error), 1, "{c:?}");
    assert_eq!(keyless.routed_past, 2, "routed, not a fault: {c:?}");
    assert_eq!(inline.completed, 3, "the local key signed: {c:?}");
    let m = metrics(ks_metrics).await;
    assert_eq!(
        metric(
            &m,
            "sluice_keyserver_requests_total{op=\"sign\",status=\"unknown_key\"}"
        ),
        1,
        "{m}"
    );
}

/// A raw protocol connection to a key server, as client `stem`.
async fn raw_client(
    dir: &Path,
    addr: SocketAddr,
    stem: Option<&str>,
) -> Result<tokio_boring::SslStream<TcpStream>, String> {
    let mut b = SslConnector::builder(SslMethod::tls()).unwrap();
    b.set_verify(SslVerifyMode::NONE);
    if let Some(stem) = stem {
        b.set_certificate(&cert(dir, stem)).unwrap();
        let key =
            PKey::private_key_from_pem(&std::fs::read(dir.join(format!("{stem}.key"))).unwrap())
                .unwrap();
        b.set_private_key(&key).unwrap();
    }
    let tcp = TcpStream::connect(addr).await.unwrap();
    tokio_boring::connect(b.build().configure().unwrap(), "localhost", tcp)
        .await
        .map_err(|e| e.to_string())
}

/// Sends `frame` and reads one frame back; `Err` when the server closed the connection.
async fn exchange(
    s: &mut tokio_boring::SslStream<TcpStream>,
    bytes: &[u8],
) -> Result<Frame, String> {
    s.write_all(bytes).await.map_err(|e| e.to_string())?;
    let mut buf = BytesMut::new();
    loop {
        if let Some(f) = Frame::decode(&mut buf).map_err(|e| e.to_string())? {
            return Ok(f);
        }
        let n = tokio::time::timeout(Duration::from_secs(5), s.read_buf(&mut buf))
            .await
            .map_err(|_| "no answer".to_string())?
            .map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("closed".into());
        }
    }
}

fn key_id(dir: &Path, stem: &str) -> [u8; 32] {
    sluice_keyless::key_id_of(&cert(dir, stem).public_key().unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_server_refuses_unknown_clients_and_enforces_which_client_uses_which_key() {
    let dir = tempfile::tempdir().unwrap();
    write_pki(dir.path());
    let (ks, ks_metrics) = in_process_keyserver(dir.path(), &["site", "other-site"]).await;
    let sign = |id| Frame::sign(1, id, 0x0804, b"handshake transcript").to_bytes();
    let ping = Frame::ping(2, b"hi").to_bytes();

    // A certificate nobody pinned, and no certificate at all: refused.
    for stem in [Some("intruder"), None] {
        let refused = match raw_client(dir.path(), ks, stem).await {
            Err(_) => true,
            // TLS 1.3: the client learns of the refusal at its first read.
            Ok(mut s) => exchange(&mut s, &ping).await.is_err(),
        };
        assert!(refused, "{stem:?} was refused");
    }
    let m = metrics(ks_metrics).await;
    assert_eq!(
        metric(&m, "sluice_keyserver_refused_handshakes_total"),
        2,
        "{m}"
    );

    // gw may use `site`; gw2 may not, but may use `other-site`.
    let mut gw = raw_client(dir.path(), ks, Some("gw")).await.unwrap();
    let f = exchange(&mut gw, &sign(key_id(dir.path(), "site")))
        .await
        .unwrap();
    let Message::Response { status, body, .. } = f.message else {
        panic!("{f:?}")
    };
    assert_eq!(status, Status::Ok);
    let site = cert(dir.path(), "site").public_key().unwrap();
    let mut v = boring::sign::Verifier::new(boring::hash::MessageDigest::sha256(), &site).unwrap();
    v.set_rsa_padding(boring::rsa::Padding::PKCS1_PSS).unwrap();
    v.update(b"handshake transcript").unwrap();
    assert!(v.verify(&body).unwrap(), "a valid RSA-PSS signature");

    let mut gw2 = raw_client(dir.path(), ks, Some("gw2")).await.unwrap();
    let f = exchange(&mut gw2, &sign(key_id(dir.path(), "site")))
        .await
        .unwrap();
    assert!(
        matches!(
            f.message,
            Message::Response {
                status: Status::Forbidden,
                ..
            }
        ),
        "{f:?}"
    );
    // A scheme of another key type, and an unknown key: clean errors, same connection.
    let f = exchange(
        &mut gw2,
        &Frame::sign(3, key_id(dir.path(), "other-site"), 0x0804, b"x").to_bytes(),
    )
    .await
    .unwrap();
    assert!(
        matches!(
            f.message,
            Message::Response {
                status: Status::Unsupported,
                ..
            }
        ),
        "{f:?}"
    );
    let f = exchange(&mut gw2, &sign([7; 32])).await.unwrap();
    assert!(
        matches!(
            f.message,
            Message::Response {
                status: Status::UnknownKey,
                ..
            }
        ),
        "{f:?}"
    );
    let f = exchange(
        &mut gw2,
        &Frame::sign(4, key_id(dir.path(), "other-site"), 0x0403, b"x").to_bytes(),
    )
    .await
    .unwrap();
    assert!(
        matches!(
            f.message,
            Message::Response {
                op: Op::Sign,
                status: Status::Ok,
                ..
            }
        ),
        "{f:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_frames_close_that_connection_and_the_server_keeps_serving_others() {
    let dir = tempfile::tempdir().unwrap();
    write_pki(dir.path());
    let (ks, ks_metrics) = in_process_keyserver(dir.path(), &["site"]).await;
    let mut good = raw_client(dir.path(), ks, Some("gw")).await.unwrap();
    assert!(
        exchange(&mut good, &Frame::ping(1, b"a").to_bytes())
            .await
            .is_ok()
    );

    let garbage: [&[u8]; 4] = [
        // Version 9: answered with bad_version, then closed.
        &[9, 1, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0],
        // A body length over the limit: closed before the body is read.
        &[1, 1, 0, 0, 0, 0, 0, 6, 0xff, 0xff, 0xff, 0xff],
        // An unknown opcode.
        &[1, 0x44, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0],
        // A sign request too short for a key id.
        &[1, 1, 0, 0, 0, 0, 0, 8, 0, 0, 0, 2, 0xaa, 0xbb],
    ];
    for (i, bytes) in garbage.iter().enumerate() {
        let mut bad = raw_client(dir.path(), ks, Some("gw")).await.unwrap();
        let first = exchange(&mut bad, bytes).await;
        if i == 0 {
            let f = first.unwrap();
            assert!(
                matches!(
                    f.message,
                    Message::Response {
                        status: Status::BadVersion,
                        ..
                    }
                ),
                "{f:?}"
            );
            assert!(
                exchange(&mut bad, &Frame::ping(2, b"b").to_bytes())
                    .await
                    .is_err()
            );
        } else {
            assert!(first.is_err(), "frame {i} closed the connection: {first:?}");
        }
        // The connection opened before is untouched.
        let f = exchange(&mut good, &Frame::ping(100 + i as u32, b"still").to_bytes())
            .await
            .unwrap();
        assert_eq!(f.id, 100 + i as u32);
    }
    let m = metrics(ks_metrics).await;
    assert_eq!(
        metric(&m, "sluice_keyserver_malformed_frames_total"),
        4,
        "{m}"
    );
    assert_eq!(metric(&m, "sluice_keyserver_connections_active"), 1, "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_pipelined_past_max_pending_wait_their_turn_and_all_get_answers() {
    let dir = tempfile::tempdir().unwrap();
    write_pki(dir.path());
    let (ks, ks_metrics) =
        in_process_keyserver_with(dir.path(), &["other-site"], "max_pending = 2\n").await;
    let mut s = raw_client(dir.path(), ks, Some("gw")).await.unwrap();
    // 64 requests in one write: the server works on two at a time and stops reading the rest
    // until one finishes; every one is answered, each under its own id.
    let id = key_id(dir.path(), "other-site");
    let mut burst = BytesMut::new();
    for i in 0..64u32 {
        Frame::sign(i, id, 0x0403, format!("message {i}").as_bytes()).encode(&mut burst);
    }
    s.write_all(&burst).await.unwrap();
    let mut seen = std::collections::HashSet::new();
    let mut buf = BytesMut::new();
    while seen.len() < 64 {
        while let Some(f) = Frame::decode(&mut buf).unwrap() {
            assert!(
                matches!(
                    f.message,
                    Message::Response {
                        status: Status::Ok,
                        ..
                    }
                ),
                "{f:?}"
            );
            assert!(seen.insert(f.id), "one answer per request");
        }
        if seen.len() == 64 {
            break;
        }
        let n = tokio::time::timeout(Duration::from_secs(10), s.read_buf(&mut buf))
            .await
            .expect("answers keep coming")
            .unwrap();
        assert!(n > 0, "the server kept the connection");
    }
    let m = metrics(ks_metrics).await;
    assert!(m.contains(&format!("{SIGNED_OK} 64")), "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_1_2_rsa_key_exchange_decrypts_on_the_key_server() {
    let dir = tempfile::tempdir().unwrap();
    write_pki(dir.path());
    let (ks, ks_metrics) = in_process_keyserver(dir.path(), &["site"]).await;
    let (gw, _o) =
        keyless_gateway_with(dir, &[ks], "", "none", "", "rsa_key_exchange = true").await;
    let offload = gw.gateway().key_offload();
    wait_for("key server up", || {
        offload.key_servers().iter().all(|s| s.up)
    })
    .await;
    // A client that offers only RSA key exchange: the premaster secret is decrypted remotely
    // (the gateway has no key file) and checked by re-encryption before BoringSSL uses it.
    let h = tls_connect(
        gw.addr("https"),
        &ClientOpts {
            sni: Some("a.test"),
            max_version: Some(boring::ssl::SslVersion::TLS1_2),
            ciphers: Some("AES128-GCM-SHA256"),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(h.cipher, "AES128-GCM-SHA256");
    let m = metrics(ks_metrics).await;
    assert_eq!(
        metric(
            &m,
            "sluice_keyserver_requests_total{op=\"decrypt\",status=\"ok\"}"
        ),
        1,
        "{m}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateways_with_ca_issued_certificates_are_named_by_their_common_name() {
    let dir = tempfile::tempdir().unwrap();
    write_pki(dir.path());
    issue(dir.path(), "ca", "Gateways CA", None, &[]);
    let ca = cert(dir.path(), "ca");
    let ca_key =
        PKey::private_key_from_pem(&std::fs::read(dir.path().join("ca.key")).unwrap()).unwrap();
    issue(dir.path(), "edge-1", "edge-1", Some((&ca, &ca_key)), &[]);
    issue(dir.path(), "edge-2", "edge-2", Some((&ca, &ca_key)), &[]);
    let text = "listen = \"127.0.0.1:0\"\nmetrics = \"127.0.0.1:0\"\n\
                [tls]\ncertificate = \"ks.crt\"\nkey = \"ks.key\"\nclient_ca = \"ca.crt\"\n\
                [[key]]\nfile = \"site.key\"\nclients = [\"edge-1\"]\n";
    let config = ServerConfig::parse(text, &dir.path().join("ks.toml")).unwrap();
    let server = KeyServer::bind(&config).await.unwrap();
    let ks = server.local_addr().unwrap();
    tokio::spawn(server.run());

    let sign = Frame::sign(1, key_id(dir.path(), "site"), 0x0804, b"m").to_bytes();
    let status = |f: Frame| match f.message {
        Message::Response { status, .. } => status,
        other => panic!("{other:?}"),
    };
    // edge-1: issued by the CA and allowed to use the key.
    let mut edge1 = raw_client(dir.path(), ks, Some("edge-1")).await.unwrap();
    assert_eq!(
        status(exchange(&mut edge1, &sign).await.unwrap()),
        Status::Ok
    );
    // edge-2: issued by the CA, so it may connect, but the key is not for it.
    let mut edge2 = raw_client(dir.path(), ks, Some("edge-2")).await.unwrap();
    assert_eq!(
        status(exchange(&mut edge2, &sign).await.unwrap()),
        Status::Forbidden
    );
    // gw: self-signed and not pinned in this configuration: refused.
    let refused = match raw_client(dir.path(), ks, Some("gw")).await {
        Err(_) => true,
        Ok(mut s) => exchange(&mut s, &sign).await.is_err(),
    };
    assert!(refused);
}

/// QUIC handshakes on key servers: signed there; a stalled key server only delays them; a
/// client that leaves while its signature is on a stalled key server aborts the job when its
/// connection is dropped (nothing left in flight, before the key server's own timeout); a
/// dead key server falls back to the local key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quic_handshakes_sign_on_key_servers_wait_for_a_slow_one_abort_and_fall_back() {
    let dir = tempfile::tempdir().unwrap();
    write_pki(dir.path());
    let mut a = KeyServerProcess::start(dir.path(), "a", &["site"]).await;
    let (gw, _o) = keyless_gateway_with(
        dir,
        &[a.listen],
        "key = \"site.key\"",
        "local",
        "http3 = true\nheader_read_timeout = \"1500ms\"",
        "",
    )
    .await;
    let offload = gw.gateway().key_offload();
    wait_for("key server up", || {
        offload.key_servers().iter().all(|s| s.up)
    })
    .await;
    let addr = gw.addr("https");
    let keyless = |gw: &TestGateway| gw.gateway().crypto_counters()[0].clone();

    let run = crate::http3::h3(addr, &["/whoami"], &[]).await;
    assert_eq!(run.body("whoami"), b"o", "{}", run.output);
    assert_eq!(keyless(&gw).completed, 1, "{:?}", keyless(&gw));

    // Stalled for 700 ms: the handshake waits, then completes on the key server.
    let pid = a.child.id().to_string();
    let signal = |sig: &str| {
        assert!(
            std::process::Command::new("kill")
                .args([sig, &pid])
                .status()
                .unwrap()
                .success()
        );
    };
    signal("-STOP");
    let slow = tokio::spawn(async move { crate::http3::h3(addr, &["/whoami"], &[]).await });
    tokio::time::sleep(Duration::from_millis(700)).await;
    signal("-CONT");
    let run = slow.await.unwrap();
    assert_eq!(run.body("whoami"), b"o", "{}", run.output);
    assert_eq!(keyless(&gw).completed, 2, "{:?}", keyless(&gw));

    // Stalled again, and the client gives up: the job is in flight until the gateway drops
    // the connection (on the client's close, or at the 1.5 s handshake deadline), which
    // aborts it before the key server's 2 s timeout would have failed it over: nothing
    // failed or fell back.
    let before = keyless(&gw);
    signal("-STOP");
    let gone = crate::http3::h3(addr, &["/whoami"], &["--handshake-timeout=500ms"]).await;
    assert!(!gone.saved.path().join("whoami").exists());
    wait_for("the abandoned job in flight", || {
        keyless(&gw).in_flight == 1
    })
    .await;
    wait_for("the job aborted with its connection", || {
        keyless(&gw).in_flight == 0
    })
    .await;
    let after = keyless(&gw);
    assert_eq!(
        (after.completed, after.failed, after.fell_back),
        (before.completed, before.failed, before.fell_back),
        "aborted, not failed over: {after:?}"
    );
    signal("-CONT");

    // Dead: the local key signs.
    a.kill();
    let run = crate::http3::h3(addr, &["/whoami"], &[]).await;
    assert_eq!(run.body("whoami"), b"o", "{}", run.output);
    let c = gw.gateway().crypto_counters();
    assert!(c[1].completed >= 1, "the local key signed: {c:?}");
    assert_eq!(c.iter().map(|c| c.in_flight).sum::<i64>(), 0, "{c:?}");
}
