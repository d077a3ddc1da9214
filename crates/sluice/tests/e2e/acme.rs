//! Certificates from an ACME CA, against Pebble (Let's Encrypt's ACME test server, a Go
//! module that `scripts/deps` builds) with dnsmasq resolving the test names to 127.0.0.1:
//! the real `sluice run` binary orders, answers HTTP-01 on its HTTP listener and TLS-ALPN-01
//! on its TLS listener, stores, serves, renews, and survives the CA refusing.

use crate::dns::Dnsmasq;
use crate::support::*;
use sluice_tls::selfsigned::KeyKind;
use std::io::{BufRead, BufReader};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Pebble on 127.0.0.1, validating against the given challenge ports through `dns`.
pub(crate) struct Pebble {
    child: Child,
    port: u16,
    /// Its management API (roots, test-only controls such as `/set-renewal-info/`).
    management: u16,
    dir: tempfile::TempDir,
}

impl Pebble {
    /// `nonce_reject`: the percentage of good nonces Pebble refuses (the client must retry).
    async fn start(
        dns: u16,
        http_port: u16,
        tls_port: u16,
        validity_s: u64,
        nonce_reject: u8,
    ) -> Pebble {
        Pebble::start_with(
            dns,
            http_port,
            tls_port,
            validity_s,
            nonce_reject,
            serde_json::json!({}),
        )
        .await
    }

    /// With more of Pebble's settings (`extra`'s keys replace the defaults').
    pub(crate) async fn start_with(
        dns: u16,
        http_port: u16,
        tls_port: u16,
        validity_s: u64,
        nonce_reject: u8,
        extra: serde_json::Value,
    ) -> Pebble {
        let dir = tempfile::tempdir().unwrap();
        write_cert(
            dir.path(),
            "pebble",
            KeyKind::EcdsaP256,
            &["127.0.0.1", "localhost"],
        );
        let (port, management) = (free_port(), free_port());
        let mut config = serde_json::json!({ "pebble": {
            "listenAddress": format!("127.0.0.1:{port}"),
            "managementListenAddress": format!("127.0.0.1:{management}"),
            "certificate": dir.path().join("pebble.crt"),
            "privateKey": dir.path().join("pebble.key"),
            "httpPort": http_port,
            "tlsPort": tls_port,
            "ocspResponderURL": "",
            "externalAccountBindingRequired": false,
            "retryAfter": { "authz": 1, "order": 1 },
            "profiles": { "default": { "description": "test", "validityPeriod": validity_s } },
        }});
        for (k, v) in extra.as_object().into_iter().flatten() {
            config["pebble"][k] = v.clone();
        }
        let config_path = dir.path().join("pebble.json");
        std::fs::write(&config_path, config.to_string()).unwrap();
        let log = std::fs::File::create(dir.path().join("pebble.log")).unwrap();
        let child = Command::new(tool("pebble"))
            .arg("-config")
            .arg(&config_path)
            .arg("-dnsserver")
            .arg(format!("127.0.0.1:{dns}"))
            // Validate at once.
            .env("PEBBLE_VA_NOSLEEP", "1")
            .env("PEBBLE_WFE_NONCEREJECT", nonce_reject.to_string())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("pebble starts");
        let p = Pebble {
            child,
            port,
            management,
            dir,
        };
        for _ in 0..250 {
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                return p;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("pebble did not listen within 5 s:\n{}", p.log());
    }

    pub(crate) fn directory(&self) -> String {
        format!("https://127.0.0.1:{}/dir", self.port)
    }

    /// The URL of `path` on its management API.
    pub(crate) fn management_url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.management)
    }

    pub(crate) fn ca_file(&self) -> PathBuf {
        self.dir.path().join("pebble.crt")
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("pebble.log")).unwrap_or_default()
    }
}

impl Drop for Pebble {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `sluice run` on a configuration file, stopped (by PID) when dropped.
pub(crate) struct Gw {
    child: Child,
    pub(crate) admin: SocketAddr,
    stderr: PathBuf,
}

impl Gw {
    pub(crate) fn start(dir: &Path, config: &str) -> Gw {
        let path = dir.join("gw.toml");
        std::fs::write(&path, config).unwrap();
        let stderr = dir.join("gw.stderr");
        let mut child = crate::cli::sluice()
            .args(["run", "--config"])
            .arg(&path)
            .arg("--pid-file")
            .arg(dir.join("gw.pid"))
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut admin = None;
        for line in lines.by_ref().take(20) {
            let line = line.unwrap();
            if line.trim_start().starts_with("admin ") {
                admin = line
                    .split("http://")
                    .nth(1)
                    .and_then(|r| r.split('/').next())
                    .and_then(|a| a.parse().ok());
            }
            if line.starts_with("Stop with") {
                break;
            }
        }
        std::thread::spawn(move || for _ in lines {});
        Gw {
            child,
            admin: admin.unwrap_or_else(|| {
                panic!(
                    "no admin line; stderr:\n{}",
                    std::fs::read_to_string(&stderr).unwrap_or_default()
                )
            }),
            stderr,
        }
    }

    pub(crate) async fn status(&self) -> serde_json::Value {
        let got = http1_get(self.admin, "x", "/status").await;
        serde_json::from_str(&got.body).unwrap()
    }

    pub(crate) async fn acme(&self, name: &str) -> serde_json::Value {
        let s = self.status().await;
        s["acme"]
            .as_array()
            .and_then(|a| a.iter().find(|c| c["certificate"] == name).cloned())
            .unwrap_or_default()
    }

    pub(crate) fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    pub(crate) fn reload(&self) {
        let sent = Command::new("kill")
            .args(["-HUP", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
    }
}

impl Drop for Gw {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

/// What a new handshake for `sni` is served: (issuer common name or organization, serial).
pub(crate) async fn served(addr: SocketAddr, sni: &'static str) -> (String, String) {
    let h = tls_connect(
        addr,
        &ClientOpts {
            sni: Some(sni),
            ..ClientOpts::default()
        },
    )
    .await
    .unwrap_or_else(|e| panic!("handshake for {sni}: {e}"));
    let cert = h.stream.ssl().peer_certificate().unwrap();
    let issuer = cert
        .issuer_name()
        .entries()
        .map(|e| {
            e.data()
                .as_utf8()
                .map(|s| s.to_string())
                .unwrap_or_default()
        })
        .collect::<Vec<_>>()
        .join(", ");
    let serial = cert
        .serial_number()
        .to_bn()
        .unwrap()
        .to_hex_str()
        .unwrap()
        .to_string();
    (issuer, serial)
}

/// Keep-alive HTTPS requests on one connection plus a new connection every 50 ms, until
/// stopped: (requests that succeeded, requests or handshakes that failed).
struct Load {
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicUsize>,
    failed: Arc<AtomicUsize>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    fn start(addr: SocketAddr, sni: &'static str) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let ok = Arc::new(AtomicUsize::new(0));
        let failed = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for keep_alive in [true, false] {
            let (stop, ok, failed) = (stop.clone(), ok.clone(), failed.clone());
            tasks.push(tokio::spawn(async move {
                let deadline = Instant::now() + Duration::from_secs(120);
                let mut sender = None;
                while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                    if sender.is_none() {
                        let opts = ClientOpts {
                            sni: Some(sni),
                            ..ClientOpts::default()
                        };
                        match tls_connect(addr, &opts).await {
                            Ok(h) => {
                                let io = hyper_util::rt::TokioIo::new(h.stream);
                                let (s, conn) =
                                    hyper::client::conn::http1::handshake(io).await.unwrap();
                                tokio::spawn(conn);
                                sender = Some(s);
                            }
                            Err(_) => {
                                failed.fetch_add(1, Ordering::Relaxed);
                                continue;
                            }
                        }
                    }
                    let s: &mut hyper::client::conn::http1::SendRequest<_> =
                        sender.as_mut().unwrap();
                    let req = http::Request::get("/")
                        .header("host", sni)
                        .body(http_body_util::Empty::<bytes::Bytes>::new())
                        .unwrap();
                    match s.send_request(req).await {
                        Ok(r) if r.status() == 200 => {
                            let _ = http_body_util::BodyExt::collect(r.into_body()).await;
                            ok.fetch_add(1, Ordering::Relaxed);
                        }
                        _ => {
                            failed.fetch_add(1, Ordering::Relaxed);
                            sender = None;
                        }
                    }
                    if !keep_alive {
                        sender = None;
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            }));
        }
        Load {
            stop,
            ok,
            failed,
            tasks,
        }
    }

    async fn finish(self) -> (usize, usize) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.tasks {
            t.await.unwrap();
        }
        (
            self.ok.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
        )
    }
}

/// Waits (up to `limit`) until `f` says yes; panics with `what` otherwise.
pub(crate) async fn until<F, Fut>(limit: Duration, what: impl Fn() -> String, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if f().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{}", what());
}

fn config(
    dir: &Path,
    pebble: &Pebble,
    http: u16,
    https: u16,
    origin: SocketAddr,
    acme: &str,
) -> String {
    format!(
        r#"
[log]
access_log = "off"
[admin]
address = "127.0.0.1:0"
[acme]
storage = "{storage}"
directory = "{directory}"
ca = "{ca}"
email = "ops@acme.test"
retry_min = "500ms"
retry_max = "2s"
[[listener]]
name = "http"
address = "127.0.0.1:{http}"
[[listener]]
name = "https"
address = "127.0.0.1:{https}"
[listener.tls]
certificates = ["site"]
[[certificate]]
name = "site"
acme = {acme}
[[upstream]]
name = "origin"
servers = [{{ address = "{origin}" }}]
[[route]]
name = "all"
upstream = "origin"
"#,
        storage = dir.join("acme").display(),
        directory = pebble.directory(),
        ca = pebble.ca_file().display(),
    )
}

fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

/// When the first log line containing `what` was written (tracing's RFC 3339 timestamp).
fn log_time(log: &str, what: &str) -> Option<std::time::SystemTime> {
    let line = log.lines().find(|l| l.contains(what))?;
    // Without the terminal colour codes tracing may add.
    let mut plain = String::new();
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            chars.by_ref().find(|c| *c == 'm');
        } else {
            plain.push(c);
        }
    }
    humantime::parse_rfc3339_weak(plain.split_whitespace().next()?.trim_end_matches('Z')).ok()
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

fn loopback() -> IpAddr {
    IpAddr::from([127, 0, 0, 1])
}

/// Everything one ACME test runs: dnsmasq resolving `hosts` to 127.0.0.1, Pebble issuing
/// `validity_s`-second certificates, an origin, and `sluice run` with one ACME certificate
/// `site` (`acme`, the certificate's inline table) served on an HTTPS listener.
struct Scene {
    gw: Gw,
    pebble: Pebble,
    /// The gateway's HTTPS and HTTP listeners.
    https: SocketAddr,
    http: SocketAddr,
    _dns: Dnsmasq,
    _origin: Origin,
    _dir: tempfile::TempDir,
}

impl Scene {
    /// `http01_elsewhere`: Pebble validates HTTP-01 on a port nothing listens on.
    /// `nonce_reject`: see [`Pebble::start`].
    async fn start(
        hosts: &[&str],
        validity_s: u64,
        acme: &str,
        http01_elsewhere: bool,
        nonce_reject: u8,
    ) -> Scene {
        let records: Vec<(&str, IpAddr)> = hosts.iter().map(|h| (*h, loopback())).collect();
        let dns = Dnsmasq::start(&records).await;
        let (http, https) = (free_port(), free_port());
        let http01 = if http01_elsewhere { free_port() } else { http };
        let pebble = Pebble::start(dns.port, http01, https, validity_s, nonce_reject).await;
        let origin = Origin::start("origin").await;
        let dir = tempfile::tempdir().unwrap();
        let text = config(dir.path(), &pebble, http, https, origin.addr, acme);
        let gw = Gw::start(dir.path(), &text);
        Scene {
            gw,
            pebble,
            https: SocketAddr::from(([127, 0, 0, 1], https)),
            http: SocketAddr::from(([127, 0, 0, 1], http)),
            _dns: dns,
            _origin: origin,
            _dir: dir,
        }
    }

    /// The gateway's and Pebble's logs, for a failure's message.
    fn report(&self) -> String {
        format!(
            "gateway:\n{}\npebble:\n{}",
            self.gw.stderr(),
            self.pebble.log()
        )
    }

    fn storage(&self) -> PathBuf {
        self._dir.path().join("acme")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn http01_issues_renews_and_survives_a_reload_without_a_failed_request() {
    // Pebble's certificates last 40 s; renew_before 30 s is capped at a third of the life.
    let scene = Scene::start(
        &["a.acme.test", "www.acme.test"],
        40,
        r#"{ names = ["a.acme.test", "www.acme.test"], renew_before = "30s" }"#,
        false,
        20,
    )
    .await;
    let (gw, pebble, addr) = (&scene.gw, &scene.pebble, scene.https);
    let load = Load::start(addr, "a.acme.test");

    // Issued: a new handshake gets Pebble's certificate, and /status says so.
    until(
        Duration::from_secs(60),
        || scene.report(),
        || async { served(addr, "a.acme.test").await.0.contains("Pebble") },
    )
    .await;
    let first_seen = std::time::SystemTime::now();
    let (_, first_serial) = served(addr, "www.acme.test").await;
    let seen_at = unix_now();
    let status = gw.acme("site").await;
    // The certificate lives 40 s and its renewal starts about 13 s before the end: on a
    // busy machine that may already have begun ("ordering"), the issue still recorded.
    assert!(
        matches!(status["state"].as_str(), Some("issued" | "ordering")),
        "{status}"
    );
    assert_eq!(status["challenge"], "http-01");
    assert!(status["issued"].as_u64() >= Some(1), "{status}");
    let issued_at = status["last_issued"].as_i64().unwrap();
    assert!(
        seen_at >= issued_at,
        "served before it was issued? {status}"
    );
    // The figure (printed, not asserted): from the gateway's log line saying the certificate
    // is in force to the first new handshake seen with it (polled every 100 ms).
    if let Some(in_force) = log_time(&gw.stderr(), "ACME certificate issued and in force")
        && let Ok(after) = first_seen.duration_since(in_force)
    {
        println!(
            "ACME: first handshake with the issued certificate {} ms after it was in force",
            after.as_millis()
        );
    }

    // Stored with mode 0600, account and certificate, in a 0700 directory.
    let storage = scene.storage();
    assert_eq!(mode(&storage.join("site/key.pem")), 0o600);
    assert_eq!(mode(&storage.join("site/cert.pem")), 0o600);
    assert_eq!(mode(&storage.join("site")), 0o700);
    let accounts: Vec<_> = std::fs::read_dir(storage.join("accounts"))
        .unwrap()
        .collect();
    assert_eq!(accounts.len(), 1);
    assert_eq!(mode(&accounts[0].as_ref().unwrap().path()), 0o600);

    // A reload reads the same certificate from storage and keeps serving it.
    gw.reload();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (issuer, serial) = served(addr, "a.acme.test").await;
    assert!(issuer.contains("Pebble"), "{issuer}");
    let renewed_already = serial != first_serial;

    // Renewed in the background ~10 s later: a new serial, counted.
    until(
        Duration::from_secs(60),
        || format!("no renewal: {}", gw.stderr()),
        || async { renewed_already || served(addr, "a.acme.test").await.1 != first_serial },
    )
    .await;
    let status = gw.acme("site").await;
    assert!(status["issued"].as_u64() >= Some(2), "{status}");
    // Pebble refused a fifth of the good nonces: instant-acme retries a refused request
    // twice, and an order that still fails is ordered again after the back-off.
    assert!(
        pebble.log().contains("reject 20% of good nonces"),
        "{}",
        pebble.log()
    );
    let metrics = http1_get(gw.admin, "x", "/metrics").await.body;
    assert!(
        metrics.contains("sluice_acme_orders_total{certificate=\"site\",result=\"issued\"}"),
        "{metrics}"
    );
    assert!(metrics.contains("sluice_acme_placeholder{certificate=\"site\"} 0"));

    let (ok, failed) = load.finish().await;
    assert!(ok > 50, "the load ran: {ok} requests");
    assert_eq!(
        failed,
        0,
        "{failed} of {} requests failed during issuance and renewal",
        ok + failed
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tls_alpn01_is_answered_by_the_tls_listener() {
    let scene = Scene::start(
        &["alpn.acme.test"],
        3600,
        r#"{ names = ["alpn.acme.test"], challenge = "tls-alpn-01", key_type = "rsa" }"#,
        false,
        0,
    )
    .await;
    let (gw, addr) = (&scene.gw, scene.https);
    // Before the CA issues: the self-signed placeholder serves the name.
    let (issuer, _) = served(addr, "alpn.acme.test").await;
    assert!(
        issuer.contains("Pebble") || issuer.contains("Sluice placeholder"),
        "{issuer}"
    );
    until(
        Duration::from_secs(60),
        || scene.report(),
        || async { served(addr, "alpn.acme.test").await.0.contains("Pebble") },
    )
    .await;
    let h = tls_connect(
        addr,
        &ClientOpts {
            sni: Some("alpn.acme.test"),
            ..ClientOpts::default()
        },
    )
    .await
    .unwrap();
    assert!(h.key_is_rsa, "key_type = \"rsa\" orders an RSA certificate");
    let status = gw.acme("site").await;
    assert_eq!(status["challenge"], "tls-alpn-01");
    assert_eq!(status["state"], "issued", "{status}");
    // Pebble validated over TLS: the gateway logged answering it.
    assert!(gw.stderr().contains("tls-alpn-01"), "{}", gw.stderr());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_refused_order_is_retried_counted_and_shown_while_the_placeholder_serves() {
    // Pebble validates HTTP-01 on a port where nothing listens: every order fails.
    let scene = Scene::start(
        &["fail.acme.test"],
        3600,
        r#"{ names = ["fail.acme.test"] }"#,
        true,
        0,
    )
    .await;
    let (gw, addr) = (&scene.gw, scene.https);
    until(
        Duration::from_secs(60),
        || scene.report(),
        || async { gw.acme("site").await["failures"].as_u64() >= Some(2) },
    )
    .await;
    let status = gw.acme("site").await;
    // Retried with back-off, the CA's reason shown, and the placeholder still serving.
    assert_eq!(status["issued"], 0, "{status}");
    assert_eq!(status["not_after"], serde_json::Value::Null);
    let why = status["last_error"].as_str().unwrap_or_default().to_owned();
    assert!(why.contains("validat"), "{status}");
    let (issuer, _) = served(addr, "fail.acme.test").await;
    assert!(issuer.contains("Sluice placeholder"), "{issuer}");
    let got = http1_get(scene.http, "fail.acme.test", "/").await;
    assert_eq!(got.status, 200, "plain HTTP keeps serving");
    let metrics = http1_get(gw.admin, "x", "/metrics").await.body;
    assert!(
        metrics.contains("sluice_acme_placeholder{certificate=\"site\"} 1"),
        "{metrics}"
    );
    let failed_line = metrics
        .lines()
        .find(|l| l.starts_with("sluice_acme_orders_total{certificate=\"site\",result=\"failed\"}"))
        .unwrap_or_default();
    let failed: u64 = failed_line
        .rsplit(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(failed >= 2, "{metrics}");
    assert!(gw.stderr().contains("ACME order failed"), "{}", gw.stderr());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failed_renewal_keeps_the_issued_certificate_serving() {
    // 30-second certificates: renewal is due 10 s before expiry (a third of the life).
    let mut scene = Scene::start(
        &["keep.acme.test"],
        30,
        r#"{ names = ["keep.acme.test"] }"#,
        false,
        0,
    )
    .await;
    let addr = scene.https;
    until(
        Duration::from_secs(60),
        || scene.report(),
        || async { served(addr, "keep.acme.test").await.0.contains("Pebble") },
    )
    .await;
    let (_, serial) = served(addr, "keep.acme.test").await;
    let failed_before = scene.gw.acme("site").await["failures"]
        .as_u64()
        .unwrap_or(0);
    // The CA goes away before the renewal is due.
    let _ = scene.pebble.child.kill();
    let _ = scene.pebble.child.wait();
    let gw = &scene.gw;
    until(
        Duration::from_secs(60),
        || format!("no failed renewal: {}", gw.stderr()),
        || async { gw.acme("site").await["failures"].as_u64() > Some(failed_before) },
    )
    .await;
    let status = gw.acme("site").await;
    assert_eq!(status["state"], "retrying", "{status}");
    assert!(status["last_error"].is_string(), "{status}");
    assert_eq!(status["issued"], 1, "{status}");
    assert!(status["not_after"].as_i64().is_some(), "{status}");
    let (issuer, now_serial) = served(addr, "keep.acme.test").await;
    assert!(issuer.contains("Pebble"), "{issuer}");
    assert_eq!(
        now_serial, serial,
        "the issued certificate keeps serving while renewal fails"
    );
}

/// A fleet-mode gateway's file: its listeners on `ip` (`http`, and `https` serving `site`
/// when `acme` is given), the fleet's etcd, keyring and ACME settings.
fn fleet_config(
    dir: &Path,
    ip: &str,
    ports: (u16, u16),
    etcd: &str,
    pebble: &Pebble,
    acme: Option<&str>,
) -> String {
    let tls = match acme {
        Some(a) => format!(
            "[[listener]]\nname = \"https\"\naddress = \"{ip}:{}\"\n[listener.tls]\ncertificates = [\"site\"]\n[[certificate]]\nname = \"site\"\nacme = {a}\n",
            ports.1
        ),
        None => String::new(),
    };
    format!(
        r#"[config]
source = "etcd"
endpoints = ["{etcd}"]
keyring = "{keyring}"
timeout = "2s"
[log]
access_log = "off"
[admin]
address = "127.0.0.1:0"
[acme]
storage = "{storage}"
directory = "{directory}"
ca = "{ca}"
retry_min = "500ms"
retry_max = "2s"
[[listener]]
name = "http"
address = "{ip}:{http}"
{tls}"#,
        keyring = dir.join("keyring").display(),
        storage = dir.join("acme").display(),
        directory = pebble.directory(),
        ca = pebble.ca_file().display(),
        http = ports.0,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn in_a_fleet_one_gateway_orders_another_answers_the_challenge_and_takes_the_certificate() {
    // The name resolves to gateway B (127.0.0.3) only; gateway A (127.0.0.2) orders. A's
    // order can only be validated if B gives the answer A published in etcd.
    let b_ip = IpAddr::from([127, 0, 0, 3]);
    let dns = Dnsmasq::start(&[("fleet.acme.test", b_ip)]).await;
    let ports = (free_port(), free_port());
    let pebble = Pebble::start(dns.port, ports.0, ports.1, 3600, 0).await;
    let etcd = Etcd::start().await;
    let acme = r#"{ names = ["fleet.acme.test"] }"#;
    let keyring = format!("k1 {}\n", "cd".repeat(32));
    let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    for d in [&a_dir, &b_dir] {
        let p = d.path().join("keyring");
        std::fs::write(&p, &keyring).unwrap();
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    // B serves plain HTTP and does not have the certificate in its file yet.
    let b_text = fleet_config(
        b_dir.path(),
        "127.0.0.3",
        ports,
        &etcd.endpoint(),
        &pebble,
        None,
    );
    let b = Gw::start(b_dir.path(), &b_text);
    let a_text = fleet_config(
        a_dir.path(),
        "127.0.0.2",
        ports,
        &etcd.endpoint(),
        &pebble,
        Some(acme),
    );
    let a = Gw::start(a_dir.path(), &a_text);
    let a_https = SocketAddr::from(([127, 0, 0, 2], ports.1));
    let report = || {
        format!(
            "A:\n{}\nB:\n{}\npebble:\n{}",
            a.stderr(),
            b.stderr(),
            pebble.log()
        )
    };
    until(Duration::from_secs(60), report, || async {
        served(a_https, "fleet.acme.test")
            .await
            .0
            .contains("Pebble")
    })
    .await;
    let status = a.acme("site").await;
    assert_eq!(status["issued"], 1, "{status}");
    assert!(
        a.stderr().contains("this gateway orders for the fleet"),
        "{}",
        a.stderr()
    );
    let (_, a_serial) = served(a_https, "fleet.acme.test").await;

    // B's file gains the certificate: B takes the fleet's (the same serial) and orders none.
    let b_text = fleet_config(
        b_dir.path(),
        "127.0.0.3",
        ports,
        &etcd.endpoint(),
        &pebble,
        Some(acme),
    );
    std::fs::write(b_dir.path().join("gw.toml"), b_text).unwrap();
    b.reload();
    let b_https = SocketAddr::from(([127, 0, 0, 3], ports.1));
    let report = || format!("B:\n{}", b.stderr());
    until(Duration::from_secs(30), report, || async {
        tokio::net::TcpStream::connect(b_https).await.is_ok()
            && served(b_https, "fleet.acme.test").await.1 == a_serial
    })
    .await;
    let status = b.acme("site").await;
    assert_eq!(status["state"], "issued", "{status}");
    assert_eq!(status["issued"], 0, "B ordered nothing: {status}");
    assert!(
        b.stderr()
            .contains("took the ACME certificate another gateway"),
        "{}",
        b.stderr()
    );
    // Stored on B too (mode 0600), from the sealed copy in etcd.
    assert_eq!(mode(&b_dir.path().join("acme/site/key.pem")), 0o600);
    drop(etcd);
}
