//! HTTP/3 over QUIC (`http3 = true`): real clients (ngtcp2's example client from Debian's
//! `ngtcp2-client`, headless Chromium) against the gateway's UDP socket, the handshake's
//! signature on the offload engines.

use crate::support::*;
use sluice_tls::selfsigned::KeyKind;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

/// A gateway for a.test with `http3 = true`, signing on `engines`, its access log in the
/// gateway's directory (`access.log`).
async fn gateway(engines: &str) -> (TestGateway, Origin) {
    let (gw, o, _) = gateway_config(engines).await;
    (gw, o)
}

/// [`gateway`], with its configuration text (for a reload).
async fn gateway_config(engines: &str) -> (TestGateway, Origin, String) {
    gateway_with(engines, "").await
}

/// [`gateway_config`] with more `[[listener]]` settings.
async fn gateway_with(engines: &str, listener: &str) -> (TestGateway, Origin, String) {
    let origin = Origin::start("o").await;
    let dir = tempfile::tempdir().unwrap();
    write_cert(dir.path(), "site", KeyKind::EcdsaP256, &["a.test"]);
    let log = dir.path().join("access.log");
    let top = format!(
        "[log]\naccess_log = '{}'\n[offload.crypto]\nengines = {engines}\ndeadline = \"30s\"\n",
        log.display()
    );
    let cfg = site_config(&top, "https", listener, origin.addr);
    (TestGateway::start_logged(&cfg, dir).await, origin, cfg)
}

/// A configuration serving a.test (certificate `site.crt` in the configuration's folder)
/// over HTTPS and HTTP/3 on listener `name` (port 0) with `listener`'s extra settings, every
/// request to `origin`; `top` comes first ([log], [admin], [offload]).
fn site_config(top: &str, name: &str, listener: &str, origin: SocketAddr) -> String {
    format!(
        r#"{top}
[[listener]]
name = "{name}"
address = "127.0.0.1:0"
http3 = true
{listener}
[listener.tls]
certificates = ["site"]
[[certificate]]
name = "site"
cert = "site.crt"
key = "site.key"
[[upstream]]
name = "o"
servers = [{{ address = "{origin}" }}]
[[route]]
name = "all"
upstream = "o"
"#
    )
}

/// What ngtcp2's client did: its exit status, its output, and the bodies it saved.
pub(crate) struct H3Run {
    pub(crate) ok: bool,
    pub(crate) output: String,
    pub(crate) saved: tempfile::TempDir,
}

impl H3Run {
    pub(crate) fn body(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.saved.path().join(name))
            .unwrap_or_else(|e| panic!("no body saved as {name} ({e}):\n{}", self.output))
    }
}

/// Fetches `paths` from `addr` over HTTP/3 on one connection (SNI a.test), with `extra`
/// options (such as `-m POST -d FILE`); each body is saved under its path's last segment.
pub(crate) async fn h3(addr: SocketAddr, paths: &[&str], extra: &[&str]) -> H3Run {
    let saved = tempfile::tempdir().unwrap();
    let mut cmd = tokio::process::Command::new("gtlsclient");
    cmd.args(["--quiet", "--exit-on-all-streams-close", "--sni=a.test"])
        .arg(format!("--download={}", saved.path().display()))
        .args(["--timeout=10s", "--handshake-timeout=10s"])
        .args(extra)
        .arg(addr.ip().to_string())
        .arg(addr.port().to_string());
    for p in paths {
        cmd.arg(format!("https://a.test:{}{p}", addr.port()));
    }
    cmd.kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(60), cmd.output())
        .await
        .expect("ngtcp2's client finished within 60 s")
        .expect("gtlsclient runs (Debian's ngtcp2-client; scripts/deps installs it)");
    H3Run {
        ok: out.status.success(),
        output: format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
        saved,
    }
}

/// What a new connection that may be refused got: `/whoami` with a 1 s handshake timeout.
struct Brief {
    /// The page was saved (ngtcp2's client exits 0 even after a handshake timeout: what it
    /// saved tells).
    served: bool,
    output: String,
}

async fn h3_briefly(addr: SocketAddr) -> Brief {
    let run = h3(
        addr,
        &["/whoami"],
        &["--handshake-timeout=1s", "--timeout=2s"],
    )
    .await;
    Brief {
        served: run.saved.path().join("whoami").exists(),
        output: run.output,
    }
}

fn access_log(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("access.log")).unwrap_or_default()
}

/// Pages, a 1 MB body and a 300 KB upload over HTTP/3 through the same routes as HTTPS; the
/// QUIC handshakes sign on the pool engine; the access log says HTTP/3.0; the TCP side
/// advertises HTTP/3 with Alt-Svc on the same port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http3_serves_pages_bodies_and_uploads_after_an_offloaded_handshake() {
    let (gw, _o) = gateway("[\"pool\"]").await;
    let addr = gw.addr("https");

    let run = h3(addr, &["/whoami", "/bytes?n=1000000"], &[]).await;
    assert!(run.ok, "{}", run.output);
    assert_eq!(run.body("whoami"), b"o");
    let big = run.body("bytes?n=1000000");
    assert_eq!(big.len(), 1_000_000);
    assert!(big.chunks(16).all(|c| c == &b"0123456789abcdef"[..c.len()]));

    let upload = gw.dir().join("upload.bin");
    std::fs::write(&upload, vec![7u8; 300 * 1024]).unwrap();
    let run = h3(
        addr,
        &["/upload"],
        &["-m", "POST", "-d", upload.to_str().unwrap()],
    )
    .await;
    assert!(run.ok, "{}", run.output);
    assert_eq!(run.body("upload"), b"o got 307200 bytes");

    // Both handshakes signed on the pool: the offload layer served QUIC as it serves TCP.
    let pool = gw
        .gateway()
        .crypto_counters()
        .into_iter()
        .find(|c| c.engine == "pool")
        .unwrap();
    assert!(pool.completed >= 2, "{pool:?}");
    assert_eq!(pool.in_flight, 0);
    let m = gw.gateway().metrics().snapshot();
    assert!(m.quic_handshakes[0] >= 2, "{m:?}");

    let mut log = String::new();
    for _ in 0..500 {
        log = access_log(gw.dir());
        if log.lines().count() >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for want in [
        "\"GET /whoami HTTP/3.0\" 200",
        "\"GET /bytes?n=1000000 HTTP/3.0\" 200",
        "\"POST /upload HTTP/3.0\" 200",
    ] {
        assert!(log.contains(want), "missing {want} in:\n{log}");
    }

    // Over TCP, the same listener points at its UDP side.
    let h = tls_connect(
        addr,
        &ClientOpts {
            sni: Some("a.test"),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let got = http1_send(
        h.stream,
        http::Request::get("/whoami")
            .header("host", "a.test")
            .body(http_body_util::Full::new(bytes::Bytes::new()))
            .unwrap(),
    )
    .await;
    assert_eq!(
        got.headers.get("alt-svc").and_then(|v| v.to_str().ok()),
        Some(format!("h3=\":{}\"; ma=86400", addr.port()).as_str())
    );
}

/// Datagrams that are no QUIC a gateway would accept (garbage, truncated headers, packets
/// for no connection, Initials too short to be a client's first) are dropped and counted,
/// and the listener goes on serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_datagrams_are_dropped_counted_and_harmless() {
    let (gw, _o) = gateway("[\"pool\"]").await;
    let addr = gw.addr("https");
    let sock = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let mut next = 0x9e37_79b9_7f4a_7c15u64;
    let mut noise = |n: usize| -> Vec<u8> {
        (0..n)
            .map(|_| {
                next ^= next << 13;
                next ^= next >> 7;
                next ^= next << 17;
                next as u8
            })
            .collect()
    };
    // A long header (0xc0: Initial, version 1) with a destination ID length past the end.
    let truncated = vec![0xc0, 0, 0, 0, 1, 20, 1, 2];
    // A short header (0x40) for a connection nobody opened.
    let mut unknown = vec![0x40];
    unknown.extend(noise(60));
    // A well-formed Initial header in a 200-byte datagram: too short for a client's first.
    let mut short_initial = vec![0xc0, 0, 0, 0, 1, 8];
    short_initial.extend(noise(8));
    short_initial.push(8);
    short_initial.extend(noise(8));
    short_initial.extend(vec![0u8; 200 - short_initial.len()]);
    let mut corpus = vec![vec![], vec![0xc0], truncated, unknown, short_initial];
    for n in [1, 5, 40, 1200, 1500] {
        for _ in 0..20 {
            corpus.push(noise(n));
        }
    }
    for d in &corpus {
        sock.send_to(d, addr).await.unwrap();
    }
    let dropped = || gw.gateway().metrics().snapshot().quic_dropped;
    wait_until(|| dropped().iter().sum::<u64>() >= 60).await;
    let d = dropped();
    let names = sluice_proxy::QUIC_DROPPED;
    let at = |name: &str| d[names.iter().position(|n| *n == name).unwrap()];
    assert!(at("unparsable") >= 1, "{d:?}");
    assert!(at("unknown_connection") >= 1, "{d:?}");
    assert!(at("bad_initial") >= 1, "{d:?}");
    assert_eq!(at("accept_failed"), 0, "{d:?}");
    assert_eq!(gw.gateway().metrics().snapshot().quic_handshakes, [0, 0]);

    let run = h3(addr, &["/whoami"], &[]).await;
    assert!(run.ok, "{}", run.output);
    assert_eq!(run.body("whoami"), b"o");
}

/// Headless Chromium loads a page over QUIC (forced on for the origin, the test
/// certificate's key trusted by its hash), and the access log shows it came over HTTP/3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_loads_a_page_over_http3() {
    let (gw, _o) = gateway("[\"pool\"]").await;
    let port = gw.addr("https").port();
    let pem = std::fs::read(gw.dir().join("site.crt")).unwrap();
    let spki = boring::x509::X509::from_pem(&pem)
        .unwrap()
        .public_key()
        .unwrap()
        .public_key_to_der()
        .unwrap();
    let hash = boring::hash::hash(boring::hash::MessageDigest::sha256(), &spki).unwrap();
    let (dom, log) = headless_chromium(
        &format!("https://a.test:{port}/echo/from-chromium"),
        &[
            "--dump-dom".to_owned(),
            "--enable-quic".to_owned(),
            format!("--origin-to-force-quic-on=a.test:{port}"),
            "--host-resolver-rules=MAP a.test 127.0.0.1".to_owned(),
            format!(
                "--ignore-certificate-errors-spki-list={}",
                boring::base64::encode_block(&hash)
            ),
        ],
    )
    .await;
    assert!(dom.contains("/echo/from-chromium"), "{dom}\n{log}");
    let mut access = String::new();
    for _ in 0..500 {
        access = access_log(gw.dir());
        if access.contains("/echo/from-chromium") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        access.contains("\"GET /echo/from-chromium HTTP/3.0\" 200"),
        "{access}"
    );
}

/// A reload keeps QUIC connections: a request in flight across it completes, and new
/// connections come in after it, on the same UDP socket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_keeps_quic_connections_and_their_requests() {
    let (gw, o, text) = gateway_config("[\"pool\"]").await;
    let addr = gw.addr("https");
    let slow = tokio::spawn(async move { h3(addr, &["/slow?ms=1500"], &[]).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    gw.reload(&text.replace("[[route]]\nname = \"all\"", "[[route]]\nname = \"all2\""))
        .await
        .unwrap();
    let run = slow.await.unwrap();
    assert!(run.ok, "{}", run.output);
    assert_eq!(run.body("slow?ms=1500"), b"o");
    let run = h3(addr, &["/whoami"], &[]).await;
    assert!(run.ok, "{}", run.output);
    assert_eq!(run.body("whoami"), b"o");
    drop(o);
}

/// A graceful shutdown lets a request in flight on a QUIC connection finish (GOAWAY, then the
/// connection closes) and takes no new QUIC connection meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_shutdown_drains_quic_connections() {
    let (gw, _o) = gateway("[\"pool\"]").await;
    let addr = gw.addr("https");
    let slow = tokio::spawn(async move { h3(addr, &["/slow?ms=1500"], &[]).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let g = gw.gateway().clone();
    let shutdown = tokio::spawn(async move { g.shutdown(Duration::from_secs(20)).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let late = h3_briefly(addr).await;
    assert!(
        !late.served,
        "a new connection while draining: {}",
        late.output
    );
    let run = slow.await.unwrap();
    assert!(run.ok, "{}", run.output);
    assert_eq!(run.body("slow?ms=1500"), b"o", "{}", run.output);
    assert!(shutdown.await.unwrap(), "every connection finished in time");
    let d = gw.gateway().metrics().snapshot().quic_dropped;
    let draining = sluice_proxy::QUIC_DROPPED
        .iter()
        .position(|n| *n == "draining")
        .unwrap();
    assert!(
        d[draining] >= 1,
        "the late Initial counted as draining: {d:?}"
    );
}

/// `quic_retry = "always"`: every new connection first gets a Retry and must echo its token
/// from its address; ngtcp2's client does, and is served after one Retry and one handshake.
/// (Forged, expired and misaddressed tokens: `http3::endpoint`'s unit tests.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quic_retry_validates_addresses_before_any_handshake() {
    let (gw, _o, _) = gateway_with("[\"pool\"]", "quic_retry = \"always\"").await;
    let addr = gw.addr("https");
    let run = h3(addr, &["/whoami"], &[]).await;
    assert_eq!(run.body("whoami"), b"o", "{}", run.output);
    let m = gw.gateway().metrics().snapshot();
    assert_eq!(m.quic_retries, 1, "{m:?}");
    assert_eq!(m.quic_handshakes, [1, 0]);
}

/// `sluice upgrade` while QUIC connections download: each connection's datagrams keep
/// reaching the old process (the downloads need the client's flow-control credit throughout,
/// so a connection whose packets went to the new process would stall), and new connections
/// reach the new process (the old one, draining, takes none). Six of each: with the kernel's
/// hash alone about half of each would go to the wrong process.
#[test]
fn an_upgrade_keeps_quic_connections_with_the_old_process_and_new_ones_go_to_the_new() {
    use crate::cli;
    let rt = tokio::runtime::Runtime::new().unwrap();
    let origin = rt.block_on(Origin::start("o"));
    let dir = tempfile::tempdir().unwrap();
    write_cert(dir.path(), "site", KeyKind::EcdsaP256, &["a.test"]);
    let config = site_config(
        "[log]\naccess_log = \"off\"\n[admin]\naddress = \"127.0.0.1:0\"\n",
        "http",
        "",
        origin.addr,
    );
    let path = dir.path().join("gw.toml");
    std::fs::write(&path, config).unwrap();
    let pid_file = dir.path().join("sluice.pid");
    let mut gw = cli::start_from(cli::sluice(), &path, &pid_file);
    let addr = gw.http;
    const DRIP: &str = "/drip?n=40&ms=100";
    let drips: Vec<_> = (0..6)
        .map(|_| {
            rt.spawn(h3(
                addr,
                &[DRIP],
                &["--max-data=16K", "--max-stream-data-bidi-local=16K"],
            ))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(800));
    let out = crate::cli::upgrade_cmd(&pid_file);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let new_pid = cli::pid_in(&pid_file).expect("the new process wrote the pid file");
    let _stop_new = cli::StopOnDrop(new_pid);
    for i in 0..6 {
        let run = rt.block_on(h3(
            addr,
            &["/whoami"],
            &["--handshake-timeout=3s", "--timeout=5s"],
        ));
        assert!(
            run.saved.path().join("whoami").exists(),
            "new connection {i} after the upgrade was not served: {}",
            run.output
        );
        assert_eq!(run.body("whoami"), b"o");
    }
    let whole: Vec<u8> = (0..40).flat_map(|i| drip_chunk(i).to_vec()).collect();
    for (i, d) in drips.into_iter().enumerate() {
        let run = rt.block_on(d).unwrap();
        assert!(run.ok, "download {i}: {}", run.output);
        assert!(
            run.body(&DRIP[1..]) == whole,
            "download {i} across the upgrade is whole: {}",
            run.output
        );
    }
    assert_eq!(
        gw.child.wait().unwrap().code(),
        Some(0),
        "the old process drained its QUIC connections and exited"
    );
    drop(origin);
}

/// The QUIC side is visible where an operator looks: `/status` lists the listener with its
/// UDP address and counts QUIC connections and handshakes, `/metrics` has the open gauge, the
/// dashboard's data has the QUIC share of handshakes; the gauge falls back to 0 when the
/// connection ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quic_side_shows_on_status_metrics_and_the_dashboard() {
    let (gw, _o) = gateway("[\"pool\"]").await;
    let addr = gw.addr("https");
    let (admin, _task) = admin_for(&gw).await;
    let status = || async move {
        let got = http1_get(admin, "admin", "/status").await;
        assert_eq!(got.status, 200);
        serde_json::from_str::<serde_json::Value>(&got.body).unwrap()
    };
    let s = status().await;
    assert_eq!(s["listeners"][0]["name"], "https");
    assert_eq!(s["listeners"][0]["kind"], "http");
    assert_eq!(s["listeners"][0]["tls"], true);
    assert_eq!(s["listeners"][0]["http3"], format!("udp://{addr}"));
    assert_eq!(s["quic"]["connections_open"], 0);

    let download = tokio::spawn(async move { h3(addr, &["/drip?n=20&ms=100"], &[]).await });
    let mut open = serde_json::Value::Null;
    for _ in 0..200 {
        open = status().await["quic"]["connections_open"].clone();
        if open == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(open, 1, "the download's connection counted as open");
    let run = download.await.unwrap();
    assert!(run.ok, "{}", run.output);

    let mut s = serde_json::Value::Null;
    for _ in 0..500 {
        s = status().await;
        if s["quic"]["connections_open"] == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(s["quic"]["connections_open"], 0, "{s}");
    assert_eq!(s["quic"]["handshakes"]["full"], 1, "{s}");
    assert_eq!(s["quic"]["dropped"]["unparsable"], 0, "{s}");
    let metrics = http1_get(admin, "admin", "/metrics").await.body;
    assert!(
        metrics.contains("\nsluice_quic_connections_open 0\n"),
        "{metrics}"
    );
    for line in [
        "sluice_quic_handshakes_total{resumed=\"false\"} 1\n",
        "sluice_tls_handshakes_total{version=\"TLSv1.3\",resumed=\"false\",transport=\"quic\"} 1\n",
        "sluice_tls_handshakes_total{version=\"TLSv1.3\",resumed=\"false\",transport=\"tcp\"} 0\n",
    ] {
        assert!(metrics.contains(line), "no {line} in:\n{metrics}");
    }
    let stats: serde_json::Value =
        serde_json::from_str(&http1_get(admin, "admin", "/api/v1/stats").await.body).unwrap();
    assert_eq!(stats["totals"]["quic_handshakes"], 1, "{stats}");
    assert_eq!(stats["totals"]["quic_connections_open"], 0, "{stats}");
    assert!(stats["series"]["quic_handshakes"].is_array(), "{stats}");
}

/// A second, independent HTTP/3 stack: aioquic (PyPI; `crates/sluice/tests/e2e/h3client.py`)
/// sends a page, a 1 MB body and a 300 KB upload at once on one connection (three streams in
/// flight together) and gets each whole, with ALPN h3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aioquic_fetches_pages_bodies_and_uploads_on_concurrent_streams() {
    let (gw, _o) = gateway("[\"pool\"]").await;
    let addr = gw.addr("https");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/e2e/h3client.py");
    let out = tokio::process::Command::new(tool("aioquic/bin/python3"))
        .arg(script)
        .args(["--sni", "a.test", "--port", &addr.port().to_string()])
        .args(["/whoami", "/bytes?n=1000000", "POST:/upload:307200"])
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(60), out)
        .await
        .expect("aioquic's client finished")
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4, "{stdout}");
    assert_eq!(lines[0]["alpn"], "h3");
    assert_eq!(lines[1]["status"], 200);
    assert_eq!(lines[1]["body"], "o");
    assert_eq!(lines[2]["status"], 200);
    assert_eq!(lines[2]["body_len"], 1_000_000);
    let pattern: Vec<u8> = (0..1_000_000)
        .map(|i| b"0123456789abcdef"[i % 16])
        .collect();
    let digest = boring::hash::hash(boring::hash::MessageDigest::sha256(), &pattern).unwrap();
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(lines[2]["sha256"], hex);
    assert_eq!(lines[3]["status"], 200);
    assert_eq!(lines[3]["body"], "o got 307200 bytes");
    let m = gw.gateway().metrics().snapshot();
    assert_eq!(m.quic_handshakes, [1, 0], "one connection for all three");
}

/// `max_connections` counts QUIC connections with TCP ones: while a QUIC connection holds
/// the only place, a second QUIC connection and a TCP one are refused and counted; once it
/// ends, QUIC is served again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_connections_counts_quic_and_tcp_together() {
    let (gw, _o, _) = gateway_with("[\"pool\"]", "max_connections = 1").await;
    let addr = gw.addr("https");
    let download = tokio::spawn(async move { h3(addr, &["/drip?n=20&ms=100"], &[]).await });
    let metrics = gw.gateway().metrics();
    wait_until(|| metrics.snapshot().quic_open == 1).await;

    let late = h3_briefly(addr).await;
    assert!(
        !late.served,
        "a second connection over max_connections: {}",
        late.output
    );
    let tcp = tls_connect(
        addr,
        &ClientOpts {
            sni: Some("a.test"),
            ..Default::default()
        },
    )
    .await;
    assert!(tcp.is_err(), "a TCP connection while QUIC holds the place");
    assert!(
        metrics.snapshot().connections_refused[0] >= 2,
        "{:?}",
        metrics.snapshot()
    );

    let run = download.await.unwrap();
    assert!(run.ok, "{}", run.output);
    wait_until(|| metrics.snapshot().quic_open == 0).await;
    let run = h3(addr, &["/whoami"], &[]).await;
    assert_eq!(run.body("whoami"), b"o", "{}", run.output);
}
