//! Upstream servers that follow DNS (`resolve = true`), against a real DNS server: Debian's
//! dnsmasq (scripts/deps), started on 127.0.0.1 with a hosts file the test rewrites.

use crate::support::*;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

/// dnsmasq answering for the names of a hosts file (TTL 1 s), and nothing else.
pub(crate) struct Dnsmasq {
    pub(crate) port: u16,
    hosts: PathBuf,
    child: Option<std::process::Child>,
    _dir: tempfile::TempDir,
}

impl Dnsmasq {
    pub(crate) async fn start(records: &[(&str, IpAddr)]) -> Dnsmasq {
        Dnsmasq::start_with(records, &[]).await
    }

    /// With more of dnsmasq's options (`--srv-host=…`: SRV records, fixed for its life).
    async fn start_with(records: &[(&str, IpAddr)], extra: &[String]) -> Dnsmasq {
        let dir = tempfile::tempdir().unwrap();
        // dnsmasq started by root reads the file again as `nobody`.
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut d = Dnsmasq {
            port: free_port(),
            hosts: dir.path().join("hosts"),
            child: None,
            _dir: dir,
        };
        d.set(records);
        let dnsmasq = ["/usr/sbin/dnsmasq", "dnsmasq"]
            .into_iter()
            .find(|p| {
                std::process::Command::new(p)
                    .arg("--version")
                    .output()
                    .is_ok()
            })
            .expect("dnsmasq is needed (scripts/deps installs Debian's dnsmasq-base)");
        let child = std::process::Command::new(dnsmasq)
            .args([
                "--keep-in-foreground",
                "--conf-file=/dev/null",
                "--no-hosts",
                "--no-resolv",
            ])
            .arg(format!("--addn-hosts={}", d.hosts.display()))
            .args([
                "--listen-address=127.0.0.1",
                "--bind-interfaces",
                "--local-ttl=1",
            ])
            .arg(format!("--port={}", d.port))
            .args(extra)
            .args(["--pid-file=", "--log-facility=-"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("dnsmasq starts");
        d.child = Some(child);
        for _ in 0..250 {
            if tokio::net::TcpStream::connect(("127.0.0.1", d.port))
                .await
                .is_ok()
            {
                return d;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("dnsmasq did not listen on {} within 5 s", d.port);
    }

    /// Replaces the records and has dnsmasq read them again (SIGHUP, by PID).
    fn set(&self, records: &[(&str, IpAddr)]) {
        let text: String = records
            .iter()
            .map(|(n, ip)| format!("{ip} {n}\n"))
            .collect();
        std::fs::write(&self.hosts, text).unwrap();
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&self.hosts, std::fs::Permissions::from_mode(0o644)).unwrap();
        if let Some(c) = &self.child {
            let sent = std::process::Command::new("kill")
                .args(["-HUP", &c.id().to_string()])
                .status()
                .unwrap();
            assert!(sent.success(), "SIGHUP to dnsmasq");
        }
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Dnsmasq {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Three origins on 127.0.0.2, .3 and .4, all on one port (a name's records carry no port).
async fn three_origins() -> (u16, [Origin; 3]) {
    for _ in 0..20 {
        let port = free_port();
        let at = |last: u8| SocketAddr::from(([127, 0, 0, last], port));
        let (Some(a), Some(b), Some(c)) = (
            Origin::start_on("a", at(2)).await,
            Origin::start_on("b", at(3)).await,
            Origin::start_on("c", at(4)).await,
        ) else {
            continue;
        };
        return (port, [a, b, c]);
    }
    panic!("no port free on 127.0.0.2, .3 and .4");
}

fn ip(last: u8) -> IpAddr {
    IpAddr::from([127, 0, 0, last])
}

fn addresses(gw: &TestGateway) -> Vec<String> {
    let h = gw.gateway().upstream_health();
    let mut a: Vec<String> = h[0].servers.iter().map(|s| s.address.clone()).collect();
    a.sort();
    a
}

#[tokio::test]
async fn servers_follow_dns_as_records_are_added_and_removed_without_failing_a_request() {
    const NAME: &str = "app.sluice.test";
    let (port, [a, b, c]) = three_origins().await;
    let mut dns = Dnsmasq::start(&[(NAME, ip(2)), (NAME, ip(3))]).await;
    let config = format!(
        r#"
[log]
access_log = "off"
[resolver]
servers = ["127.0.0.1:{dns}"]
min_ttl = "100ms"
max_ttl = "300ms"
timeout = "1s"
[[listener]]
name = "http"
address = "127.0.0.1:0"
[[upstream]]
name = "app"
servers = [{{ address = "{NAME}:{port}", resolve = true }}]
[[route]]
name = "all"
upstream = "app"
"#,
        dns = dns.port
    );
    let gw = TestGateway::plain(&config).await;
    // Both records, each a server of its own, resolved before the first request.
    assert_eq!(
        addresses(&gw),
        [
            format!("{NAME}:{port} (127.0.0.2:{port})"),
            format!("{NAME}:{port} (127.0.0.3:{port})")
        ]
    );

    // Load on keep-alive connections until told to stop (bounded: 60 s at most).
    let addr = gw.addr("http");
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let mut clients = Vec::new();
    for _ in 0..4 {
        let (stop, ok, failed) = (stop.clone(), ok.clone(), failed.clone());
        clients.push(tokio::spawn(async move {
            let mut sender = http1_sender(addr).await;
            let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
            while !stop.load(Ordering::Relaxed) && tokio::time::Instant::now() < deadline {
                let req = http::Request::get("/whoami")
                    .header("host", "x")
                    .body(http_body_util::Full::new(bytes::Bytes::new()))
                    .unwrap();
                let got = match sender.send_request(req).await {
                    Ok(resp) => collect(resp).await,
                    Err(e) => panic!("the gateway closed a keep-alive connection: {e}"),
                };
                if got.status == 200 {
                    ok.fetch_add(1, Ordering::Relaxed);
                } else {
                    failed.fetch_add(1, Ordering::Relaxed);
                    eprintln!("failed: {} {}", got.status, got.body);
                }
            }
        }));
    }
    wait_until(|| a.hits() > 0 && b.hits() > 0).await;
    assert_eq!(c.hits(), 0, "c is not in DNS yet");

    // A server added in DNS takes traffic.
    dns.set(&[(NAME, ip(2)), (NAME, ip(3)), (NAME, ip(4))]);
    wait_until(|| c.hits() > 0).await;
    assert_eq!(addresses(&gw).len(), 3);

    // A server removed from DNS stops getting requests; then it goes away for good.
    dns.set(&[(NAME, ip(3)), (NAME, ip(4))]);
    wait_until(|| addresses(&gw).len() == 2).await;
    assert!(!addresses(&gw).iter().any(|s| s.contains("127.0.0.2")));
    // Requests that had picked it finish on it; none picks it any more.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let a_hits = a.hits();
    let served = ok.load(Ordering::Relaxed);
    wait_until(|| ok.load(Ordering::Relaxed) > served + 200).await;
    assert_eq!(a.hits(), a_hits, "a removed server gets no new request");
    a.stop();

    // DNS down: lookups fail, counted, and the last good servers keep serving.
    dns.stop();
    wait_until(|| {
        gw.gateway().upstream_health()[0]
            .dns
            .as_ref()
            .is_some_and(|d| d.failures > 0 && d.last_error.is_some())
    })
    .await;
    let served = ok.load(Ordering::Relaxed);
    wait_until(|| ok.load(Ordering::Relaxed) > served + 200).await;
    assert_eq!(addresses(&gw).len(), 2, "the last good set is kept");

    // A reload that changes the upstream builds a new group from the addresses the old one
    // had: no lookup (DNS is down) and no request lost.
    let report = gw
        .reload(&config.replace("name = \"app\"\n", "name = \"app\"\nmax_fails = 3\n"))
        .await
        .unwrap();
    assert_eq!(report.upstreams_new, 1);
    assert_eq!(
        addresses(&gw).len(),
        2,
        "the new group starts from the last good set"
    );
    let served = ok.load(Ordering::Relaxed);
    wait_until(|| ok.load(Ordering::Relaxed) > served + 200).await;

    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.await.unwrap();
    }
    assert_eq!(failed.load(Ordering::Relaxed), 0, "no request failed");
    let report = gw.gateway().upstream_health()[0].dns.clone().unwrap();
    assert_eq!(report.changes, 2, "one change per DNS change: {report:?}");
    assert!(b.hits() > 0 && c.hits() > 0);

    // The admin listener shows it: /status and /metrics.
    let (admin, _task) = admin_for(&gw).await;
    let status = http1_get(admin, "localhost", "/status").await;
    assert!(status.body.contains("\"last_error\""), "{}", status.body);
    let metrics = http1_get(admin, "localhost", "/metrics").await.body;
    let failed_lookups = metrics
        .lines()
        .find(|l| {
            l.starts_with("sluice_upstream_dns_lookups_total{upstream=\"app\",result=\"failed\"}")
        })
        .and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .expect("failed lookups in /metrics");
    assert!(failed_lookups > 0);
}

#[tokio::test]
async fn a_name_that_never_resolves_serves_nothing_from_it_and_the_other_servers_serve() {
    let live = Origin::start("live").await;
    let dns = Dnsmasq::start(&[]).await;
    let gw = TestGateway::plain(&format!(
        r#"
[log]
access_log = "off"
[resolver]
servers = ["127.0.0.1:{}"]
timeout = "1s"
[[listener]]
name = "http"
address = "127.0.0.1:0"
[[upstream]]
name = "app"
servers = [{{ address = "missing.sluice.test:80", resolve = true }}, {{ address = "{}" }}]
[[route]]
name = "all"
upstream = "app"
"#,
        dns.port, live.addr
    ))
    .await;
    for _ in 0..5 {
        let got = http1_get(gw.addr("http"), "x", "/whoami").await;
        assert_eq!((got.status, got.body.as_str()), (200, "live"));
    }
    let h = &gw.gateway().upstream_health()[0];
    assert_eq!(h.servers.len(), 1);
    let d = h.dns.as_ref().unwrap();
    assert!(
        d.failures >= 1
            && d.last_error
                .as_deref()
                .is_some_and(|e| e.contains("missing.sluice.test")),
        "{d:?}"
    );
}

#[tokio::test]
async fn srv_records_give_the_servers_their_ports_and_weights_and_their_targets_are_followed() {
    const SERVICE: &str = "_http._tcp.web.sluice.test";
    // a on 127.0.0.2:p1, b on 127.0.0.3:p2, and c on 127.0.0.4:p2, where b's name moves.
    let (p1, p2, [a, b, c]) = 'found: {
        for _ in 0..20 {
            let (p1, p2) = (free_port(), free_port());
            let (Some(a), Some(b), Some(c)) = (
                Origin::start_on("a", SocketAddr::from(([127, 0, 0, 2], p1))).await,
                Origin::start_on("b", SocketAddr::from(([127, 0, 0, 3], p2))).await,
                Origin::start_on("c", SocketAddr::from(([127, 0, 0, 4], p2))).await,
            ) else {
                continue;
            };
            break 'found (p1, p2, [a, b, c]);
        }
        panic!("no free ports on 127.0.0.2-4");
    };
    let dns = Dnsmasq::start_with(
        &[
            ("a.sluice.test", ip(2)),
            ("b.sluice.test", ip(3)),
            ("backup.sluice.test", ip(5)),
        ],
        &[
            format!("--srv-host={SERVICE},a.sluice.test,{p1},0,1"),
            format!("--srv-host={SERVICE},b.sluice.test,{p2},0,3"),
            // A higher priority number: a backup, not served while priority 0 answers.
            format!("--srv-host={SERVICE},backup.sluice.test,{p1},1,1"),
        ],
    )
    .await;
    let config = format!(
        r#"
[log]
access_log = "off"
[resolver]
servers = ["127.0.0.1:{dns}"]
min_ttl = "100ms"
max_ttl = "300ms"
timeout = "1s"
[[listener]]
name = "http"
address = "127.0.0.1:0"
[[upstream]]
name = "web"
balance = "weighted_round_robin"
servers = [{{ address = "web.sluice.test", service = "http", resolve = true }}]
[[route]]
name = "all"
upstream = "web"
"#,
        dns = dns.port
    );
    let gw = TestGateway::plain(&config).await;
    assert_eq!(
        addresses(&gw),
        [
            format!("{SERVICE} (127.0.0.2:{p1})"),
            format!("{SERVICE} (127.0.0.3:{p2})")
        ],
        "the lowest priority's targets at their records' ports"
    );
    let addr = gw.addr("http");
    for _ in 0..40 {
        assert_eq!(http1_get(addr, "x", "/whoami").await.status, 200);
    }
    assert_eq!((a.hits(), b.hits()), (10, 30), "SRV weights 1 and 3");

    // A target's own A record changes: followed like any name.
    dns.set(&[
        ("a.sluice.test", ip(2)),
        ("b.sluice.test", ip(4)),
        ("backup.sluice.test", ip(5)),
    ]);
    let want = format!("{SERVICE} (127.0.0.4:{p2})");
    wait_until(|| addresses(&gw).contains(&want)).await;
    for _ in 0..8 {
        assert_eq!(http1_get(addr, "x", "/whoami").await.status, 200);
    }
    assert!(c.hits() > 0, "the moved target serves");
    let report = gw.gateway().upstream_health();
    let dns_report = report[0].dns.as_ref().expect("the group follows DNS");
    assert!(dns_report.changes >= 1);
    assert_eq!(dns_report.names[0].0, SERVICE);
}
